#include "support/fault_proxy.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

namespace slotted::test {

namespace {
bool read_exact(int fd, char* buf, std::size_t n) {
  while (n > 0) {
    const ssize_t r = ::recv(fd, buf, n, 0);
    if (r <= 0) return false;
    buf += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool write_all(int fd, const char* buf, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, buf, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    buf += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}
}  // namespace

struct fault_proxy::connection {
  int client = -1;
  int server = -1;
  std::atomic<bool> drop_next_reply{false};
  std::once_flag closed;

  void close_both() {
    std::call_once(closed, [&] {
      ::shutdown(client, SHUT_RDWR);
      ::shutdown(server, SHUT_RDWR);
    });
  }
  ~connection() {
    if (client >= 0) ::close(client);
    if (server >= 0) ::close(server);
  }
};

fault_proxy::fault_proxy(std::uint16_t upstream_port, protocol p)
    : upstream_port_(upstream_port), protocol_(p) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 64) != 0) {
    throw std::runtime_error("proxy: cannot listen");
  }
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

fault_proxy::~fault_proxy() {
  stopping_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  ::close(listen_fd_);
  {
    std::lock_guard lock(mutex_);
    for (auto& c : connections_) c->close_both();
  }
  for (auto& t : threads_) t.join();
}

void fault_proxy::arm(const std::string& prefix, cut where, int times) {
  std::lock_guard lock(mutex_);
  prefix_ = prefix;
  where_ = where;
  remaining_ = times;
}

void fault_proxy::set_down(bool down) {
  down_ = down;
  if (!down) return;
  std::lock_guard lock(mutex_);
  for (auto& c : connections_) c->close_both();
}

void fault_proxy::accept_loop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int client = ::accept(listen_fd_, nullptr, nullptr);
    if (client < 0) continue;
    if (down_) {
      ::close(client);
      continue;
    }
    const int server = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(upstream_port_);
    if (::connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(server);
      ::close(client);
      continue;
    }
    int one = 1;
    ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_shared<connection>();
    c->client = client;
    c->server = server;
    std::lock_guard lock(mutex_);
    connections_.push_back(c);
    threads_.emplace_back([this, c] { pump_client(c); });
    threads_.emplace_back([this, c] { pump_server(c); });
  }
}

namespace {
std::uint32_t big_endian(const char* p) {
  return (std::uint32_t{static_cast<unsigned char>(p[0])} << 24) |
         (std::uint32_t{static_cast<unsigned char>(p[1])} << 16) |
         (std::uint32_t{static_cast<unsigned char>(p[2])} << 8) |
         std::uint32_t{static_cast<unsigned char>(p[3])};
}
}  // namespace

bool fault_proxy::next_message(int fd, bool& startup, std::vector<char>& message,
                               std::string_view& sql) {
  sql = {};
  if (protocol_ == protocol::mysql) {
    // 3-byte length, 1-byte sequence, payload; COM_QUERY (0x03) carries a statement.
    char header[4];
    if (!read_exact(fd, header, 4)) return false;
    const std::size_t len = static_cast<unsigned char>(header[0]) |
                            (static_cast<unsigned char>(header[1]) << 8) |
                            (static_cast<unsigned char>(header[2]) << 16);
    message.assign(header, header + 4);
    message.resize(4 + len);
    if (!read_exact(fd, message.data() + 4, len)) return false;
    if (len > 1 && message[4] == 0x03) sql = std::string_view(message.data() + 5, len - 1);
    return true;
  }
  // PostgreSQL: the startup phase's messages have no type byte (a length, then a code);
  // an SSLRequest or GSSENCRequest is followed by another untyped message, once the server
  // has answered it 'N' (no TLS, as the tests' servers). Then: type byte, length, body.
  const std::size_t head = startup ? 4 : 5;
  char header[5];
  if (!read_exact(fd, header, head)) return false;
  const std::uint32_t len = big_endian(header + head - 4);
  // PostgreSQL's own bound on a startup message is 10000 bytes: a longer one is no
  // message of the protocol read here (a TLS hello), and ends the connection.
  if (len < 4 || len > (startup ? 10000u : (1u << 30))) return false;
  message.assign(header, header + head);
  message.resize(head + len - 4);
  if (!read_exact(fd, message.data() + head, len - 4)) return false;
  if (startup) {
    const std::uint32_t code = len >= 8 ? big_endian(message.data() + 4) : 0;
    startup = code == 80877103 || code == 80877104;  // SSLRequest, GSSENCRequest
  } else if (header[0] == 'Q' && len > 5) {
    sql = std::string_view(message.data() + 5, len - 5);  // without its NUL
  }
  return true;
}

// Client -> server, one message at a time.
void fault_proxy::pump_client(std::shared_ptr<connection> c) {
  std::vector<char> packet;
  bool startup = true;
  std::string_view sql;
  while (next_message(c->client, startup, packet, sql)) {
    bool cut_here = false;
    cut where = cut::before_statement;
    if (!sql.empty()) {
      std::lock_guard lock(mutex_);
      if (remaining_ > 0 && sql.starts_with(prefix_)) {
        --remaining_;
        cut_here = true;
        where = where_;
      }
    }
    if (cut_here && where == cut::before_statement) {
      ++cuts_;
      break;
    }
    if (cut_here) c->drop_next_reply = true;
    if (!write_all(c->server, packet.data(), packet.size())) break;
  }
  c->close_both();
}

void fault_proxy::pump_server(std::shared_ptr<connection> c) {
  char buf[16384];
  while (true) {
    const ssize_t n = ::recv(c->server, buf, sizeof buf, 0);
    if (n <= 0) break;
    if (c->drop_next_reply) {
      // The server has executed the statement; its reply is lost on the way.
      ++cuts_;
      break;
    }
    if (!write_all(c->client, buf, static_cast<std::size_t>(n))) break;
  }
  c->close_both();
}

}  // namespace slotted::test
