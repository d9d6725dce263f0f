#include "support/http_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <stdexcept>

namespace slotted::test {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using net::ip::tcp;

struct http_client::impl {
  net::io_context ioc;
  beast::tcp_stream stream{ioc};
  beast::flat_buffer buffer;
  std::uint16_t port;
  std::chrono::milliseconds timeout;
  bool connected = false;

  void connect() {
    stream.expires_after(timeout);
    stream.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
    connected = true;
    buffer.clear();
  }
};

http_client::http_client(std::uint16_t port, std::chrono::milliseconds timeout) : impl_(new impl) {
  impl_->port = port;
  impl_->timeout = timeout;
}

http_client::~http_client() {
  delete impl_;
}

http_reply http_client::request(const std::string& method, const std::string& target,
                                const std::string& body, const std::string& content_type,
                                const std::map<std::string, std::string>& headers) {
  http_reply reply;
  try {
    if (!impl_->connected) impl_->connect();
    http::request<http::string_body> req{http::string_to_verb(method), target, 11};
    req.set(http::field::host, "127.0.0.1");
    if (!content_type.empty()) req.set(http::field::content_type, content_type);
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = body;
    req.prepare_payload();
    impl_->stream.expires_after(impl_->timeout);
    http::write(impl_->stream, req);
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    parser.skip(method == "HEAD");  // a HEAD answer has a Content-Length but no body
    http::read(impl_->stream, impl_->buffer, parser);
    auto res = parser.release();
    reply.status = res.result_int();
    reply.body = res.body();
    for (const auto& f : res) {
      std::string name(f.name_string());
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      reply.headers[name] = std::string(f.value());
    }
    reply.keep_alive = res.keep_alive();
    if (!reply.keep_alive) {
      beast::error_code ignored;
      impl_->stream.socket().close(ignored);
      impl_->connected = false;
    }
  } catch (const std::exception&) {
    beast::error_code ignored;
    impl_->stream.socket().close(ignored);
    impl_->connected = false;
    reply.status = 0;
  }
  return reply;
}

std::string raw_exchange(std::uint16_t port, const std::string& bytes,
                         std::chrono::milliseconds timeout) {
  net::io_context ioc;
  beast::tcp_stream stream{ioc};
  stream.expires_after(timeout);
  stream.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  net::write(stream.socket(), net::buffer(bytes));
  std::string out;
  char buf[4096];
  beast::error_code ec;
  while (true) {
    stream.expires_after(timeout);
    const std::size_t n = stream.read_some(net::buffer(buf), ec);
    if (ec) break;
    out.append(buf, n);
  }
  return out;
}

double metric_value(const std::string& text, const std::string& series) {
  const auto pos = text.find("\n" + series + " ");
  return pos == std::string::npos ? -1 : std::stod(text.substr(pos + series.size() + 2));
}

bool flush_until_ok(http_client& client, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (client.request("POST", "/v1/flush").status == 200) return true;
  }
  return false;
}

std::int64_t json_int(const std::string& body, const std::string& field) {
  const std::string key = "\"" + field + "\":";
  auto pos = body.find(key);
  if (pos == std::string::npos) throw std::runtime_error("no field " + field + " in " + body);
  pos += key.size();
  while (pos < body.size() && (body[pos] == ' ' || body[pos] == '"')) ++pos;
  return std::stoll(body.substr(pos));
}

std::string http_post_bytes(const std::string& body, const std::string& extra_headers) {
  return "POST /v1/increments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

}  // namespace slotted::test
