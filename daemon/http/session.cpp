#include "http/session.hpp"

#include <sched.h>
#include <sys/ioctl.h>
#include <time.h>

#include <algorithm>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/empty_body.hpp>

#include "util/log.hpp"

namespace slotted::http {

namespace net = boost::asio;
namespace beast = boost::beast;
using beast_http::status;

session::session(socket_type&& socket, router& r, const session_limits& limits,
                 std::unique_ptr<connection_slot> slot)
    : slot_(std::move(slot)),
      socket_(std::move(socket)),
      deadline_timer_(socket_.get_executor()),
      buffer_(limits.max_header_bytes + limits.framing_allowance_bytes),
      router_(r),
      limits_(limits) {}

namespace {
// The most Beast reads from the socket at once (beast::http::read_some).
constexpr std::size_t body_read_bytes = 65536;
// A buffer larger than this is given back between requests.
constexpr std::size_t idle_buffer_bytes = 8192;

// CLOCK_MONOTONIC_COARSE: a few ns instead of a full clock read; deadlines are
// checked every idle_timeout/4, so its few ms of granularity do not matter.
std::chrono::steady_clock::time_point coarse_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::steady_clock::time_point(std::chrono::seconds(ts.tv_sec) +
                                               std::chrono::nanoseconds(ts.tv_nsec));
}

// Whether this HTTP thread has a yield queued, and when it last yielded (see
// yield_after_batch). Each HTTP thread runs its own io_context alone, so these are the
// thread's.
thread_local bool yield_queued = false;
thread_local std::chrono::steady_clock::time_point last_yield{};
// An HTTP thread keeps its core at most this long (and one batch) while others wait.
// Not coarse_now(): its few ms of granularity would make the gap a tick.
constexpr auto yield_gap = std::chrono::milliseconds(1);

// Gives the core to whoever waits for it after a batch of ready connections, at most
// once per yield_gap. Without it a busy HTTP thread always finds another ready
// connection and keeps its core until the scheduler's tick takes it (4 ms at HZ=250);
// when the machine has more runnable threads than cores (the clients, the flusher, the
// database), the connections of a thread that lost its core then wait a tick or two:
// the p99 of 8 ms beside a p50 of 0.25 ms that bench/RESULTS.md (issue 44 item 3)
// measured with two HTTP threads and wrk on two cores. The yield is posted behind the
// handlers queued now, so it runs when they are done (after the loop's next poll, when
// that is queued ahead of it), and not at all when the thread is idle; where nothing
// else is runnable it returns at once. Only a keep-alive answer posts it. The gap bounds
// its cost: at most a thousand yields a second per thread (a yield after every batch,
// about twelve thousand a second, cost 3-4% of the rate).
void yield_after_batch(const executor_type& ex) {
  if (yield_queued) return;
  net::post(ex, [] {
    yield_queued = false;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_yield < yield_gap) return;
    last_yield = now;
    sched_yield();
  });
  // Set once posted (a post runs nothing before it returns): a post that throws must not
  // leave the thread believing a yield is queued, and never yielding again.
  yield_queued = true;
}
}  // namespace

void session::set_deadline(std::chrono::steady_clock::duration from_now) {
  deadline_ = coarse_now() + from_now;
}

void session::watch_deadline() {
  const auto period = std::clamp<std::chrono::steady_clock::duration>(
      limits_.idle_timeout / 4, std::chrono::milliseconds(20), std::chrono::seconds(1));
  deadline_timer_.expires_after(period);
  deadline_timer_.async_wait([weak = weak_from_this()](beast::error_code ec) {
    auto self = weak.lock();
    if (ec || !self || !self->socket_.is_open()) return;
    if (coarse_now() > self->deadline_) {
      // Pending operations complete with operation_aborted and end the session.
      beast::error_code ignored;
      self->closed_ = true;
      self->socket_.close(ignored);
      return;
    }
    self->watch_deadline();
  });
}

session::~session() = default;

void session::start() {
  net::dispatch(socket_.get_executor(), [self = shared_from_this()] {
    self->watch_deadline();
    self->do_read();
  });
}

void session::drain() {
  net::dispatch(socket_.get_executor(), [self = shared_from_this()] {
    self->draining_ = true;
    if (!self->between_requests_ || self->buffer_.size() != 0 || self->parser_->got_some() ||
        self->closed_) {
      return;  // a request in progress: answered (Connection: close), then closed
    }
    // Bytes of a next request that the kernel holds already: read and answer it too.
    // Closing with them unread would reset the connection, and the client would not know
    // whether its request was taken.
    int unread = 0;
    if (::ioctl(self->socket_.native_handle(), FIONREAD, &unread) == 0 && unread > 0) return;
    if (!self->served_one_) {
      // A new connection (accepted just before the stop) whose client has not sent its
      // request yet, but is about to: it gets a second for it, answered as above.
      self->deadline_ = std::min(self->deadline_, coarse_now() + std::chrono::seconds(1));
      return;
    }
    // Idle: end the header read. If it completed already (its handler is queued), the
    // request it read is answered as above; otherwise on_header closes the connection
    // (a request that crosses the close is neither read nor applied: the client sees
    // the connection end before any answer, and may send it again on a new one).
    self->idle_read_cancelled_ = true;
    beast::error_code ignored;
    self->socket_.cancel(ignored);
  });
}

void session::do_read() {
  if (draining_ && buffer_.size() == 0) return do_close();
  head_request_ = false;
  accepted_ = {};  // each request's own header check says where it goes
  // An idle connection keeps a small buffer (see read_body).
  if (buffer_.size() == 0 && buffer_.capacity() > idle_buffer_bytes) buffer_.shrink_to_fit();
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(limits_.max_header_bytes));
  parser_->body_limit(limits_.max_body_bytes);
  // One deadline for the whole header, however slowly it trickles in.
  set_deadline(limits_.idle_timeout);
  between_requests_ = true;
  beast_http::async_read_header(socket_, buffer_, *parser_,
                                beast::bind_front_handler(&session::on_header, shared_from_this()));
}

void session::on_header(beast::error_code ec, std::size_t) {
  between_requests_ = false;
  if (ec && idle_read_cancelled_) {
    // Drained while idle (see drain): no request to answer, nothing to wait for.
    closed_ = true;
    beast::error_code ignored;
    socket_.shutdown(net::ip::tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    deadline_timer_.cancel();
    return;
  }
  if (ec) return fail_request(ec);
  served_one_ = true;
  const auto& header = parser_->get();
  request_keep_alive_ = header.keep_alive();
  head_request_ = header.method() == beast_http::verb::head;
  if (auto refused = router_.check_header(header.base(), &accepted_)) {
    // With a body left unread the connection cannot carry another request.
    if (!parser_->is_done()) refused->keep_alive(false);
    return send(std::move(*refused));
  }
  // Never to an HTTP/1.0 client (RFC 9110 15.2): it would take the 100 for the final
  // answer and read the real one as the answer to its next request.
  if (header.version() >= 11 && beast::iequals(header[beast_http::field::expect], "100-continue")) {
    auto cont = std::make_shared<beast_http::response<beast_http::empty_body>>(status::continue_,
                                                                               header.version());
    in_flight_ = cont;
    return beast_http::async_write(socket_, *cont,
                                   [self = shared_from_this()](beast::error_code ec, std::size_t) {
                                     self->in_flight_.reset();
                                     if (ec) return self->do_close();
                                     self->set_deadline(self->limits_.idle_timeout);
                                     self->read_body();
                                   });
  }
  read_body();
}

void session::read_body() {
  // A small request usually arrives whole in one read, so its body is in the buffer
  // already: parsed here, as Beast's read would parse it, rather than through another
  // asynchronous read that completes at once through a post (a composed operation and
  // a pass through the scheduler per request). What is missing is read as before.
  parser_->eager(true);
  beast::error_code ec;
  while (!parser_->is_done() && buffer_.size() > 0) {
    const std::size_t used = parser_->put(buffer_.data(), ec);
    buffer_.consume(used);
    if (ec == beast_http::error::need_more) {
      ec = {};
      break;
    }
    if (ec || used == 0) break;
  }
  if (ec || parser_->is_done()) return on_read(ec, 0);
  // Beast reads only into the free space the buffer already has (512 bytes at least),
  // and the parser moves body bytes out as they arrive, so the buffer never grew: a
  // 37 KB NDJSON body took 63 recv calls, each a trip through the read machinery. Room
  // for the rest of the body first, up to what Beast reads at once and never past the
  // buffer's limit; do_read() gives it back once the request is done.
  if (!parser_->is_done()) {
    const auto rest = parser_->content_length_remaining();
    const std::size_t want = std::min(
        buffer_.size() + std::min<std::uint64_t>(rest.value_or(body_read_bytes), body_read_bytes),
        buffer_.max_size());
    if (want > buffer_.capacity()) buffer_.reserve(want);
  }
  // The deadline set before the header covers the body too: a request arrives whole
  // within idle_timeout (it restarts only after a 100 Continue, see on_header).
  beast_http::async_read(socket_, buffer_, *parser_,
                         beast::bind_front_handler(&session::on_read, shared_from_this()));
}

void session::on_read(beast::error_code ec, std::size_t) {
  if (ec) return fail_request(ec);
  deadline_ = std::chrono::steady_clock::time_point::max();  // the backend may take its time
  answered_.store(false, std::memory_order_relaxed);
  const unsigned version = parser_->get().version();
  try {
    router_.handle(parser_->release(), accepted_, [self = shared_from_this()](response&& res) {
      if (self->answered_.exchange(true)) return;
      if (self->socket_.get_executor().running_in_this_thread()) return self->send(std::move(res));
      // Answered from another thread (a database worker): hand it to the session's own.
      net::post(self->socket_.get_executor(),
                [self, res = std::move(res)]() mutable { self->send(std::move(res)); });
    });
  } catch (const std::exception& e) {
    // Out of memory, most likely. One request failing must not end the process: answer
    // it (unless it was answered already) and close this connection.
    log::error("HTTP request failed: ", e.what());
    if (answered_.exchange(true)) return;
    request_keep_alive_ = false;
    router_.count_session_answer(accepted_, 500);
    send(router::error_response(version, status::internal_server_error, "internal error"));
  }
}

void session::fail_request(beast::error_code ec) {
  request_keep_alive_ = false;
  const unsigned version = parser_ && parser_->is_header_done() ? parser_->get().version() : 11;
  if (ec == beast_http::error::end_of_stream || ec == net::error::eof ||
      ec == beast::error::timeout || ec == net::error::operation_aborted ||
      ec == net::error::connection_reset || ec == beast_http::error::partial_message) {
    return do_close();
  }
  response res;
  if (ec == beast_http::error::body_limit) {
    res = router::error_response(
        version, status::payload_too_large,
        "body larger than http.max_body_bytes (" + std::to_string(limits_.max_body_bytes) + ")");
  } else if (ec == beast_http::error::header_limit ||
             (ec == beast_http::error::buffer_overflow && !parser_->is_header_done())) {
    res = router::error_response(version, status::request_header_fields_too_large,
                                 "header too large");
  } else if (ec == beast_http::error::buffer_overflow && trailer_pending()) {
    res = router::error_response(version, status::request_header_fields_too_large,
                                 "chunked trailer larger than " +
                                     std::to_string(limits_.framing_allowance_bytes) + " bytes");
  } else if (ec == beast_http::error::buffer_overflow) {
    res = router::error_response(version, status::bad_request,
                                 "chunk-size line (with extensions) larger than " +
                                     std::to_string(limits_.framing_allowance_bytes) + " bytes");
  } else if (ec.category() ==
                 beast_http::make_error_code(beast_http::error::body_limit).category() ||
             ec == beast_http::error::bad_version) {
    res = router::error_response(version, status::bad_request,
                                 "malformed HTTP request: " + ec.message());
  } else {
    log::debug("http read: ", ec.message());
    return do_close();
  }
  res.keep_alive(false);
  router_.count_session_answer(accepted_, res.result_int());
  send(std::move(res));
}

// After a buffer overflow in a chunked body: whether the buffer holds the last chunk
// ("0" with optional extensions and its line end), so that what overflowed is the trailer.
bool session::trailer_pending() const {
  const auto data = buffer_.cdata();
  std::string_view rest(static_cast<const char*>(data.data()), data.size());
  if (rest.starts_with("\r\n")) rest.remove_prefix(2);  // the end of the previous chunk
  const auto digits = rest.find_first_not_of('0');
  if (digits == 0 || digits == std::string_view::npos) return false;
  if (rest[digits] != ';' && rest[digits] != '\r') return false;
  return rest.find("\r\n", digits) != std::string_view::npos;
}

void session::send(response&& res) {
  const bool keep_alive = !draining_ && res.keep_alive() && request_keep_alive_;
  res.keep_alive(keep_alive);
  // Serialised by hand into one buffer: the answers are small and their bodies are
  // strings, and Beast's generic serializer (a view over many buffers) took about 8%
  // of the CPU per request in the profile.
  wire_.clear();
  wire_.append(res.version() == 10 ? "HTTP/1.0 " : "HTTP/1.1 ");
  wire_.append(std::to_string(res.result_int()));
  wire_.push_back(' ');
  wire_.append(res.reason());
  wire_.append("\r\n");
  for (const auto& f : res) {
    wire_.append(f.name_string());
    wire_.append(": ");
    wire_.append(f.value());
    wire_.append("\r\n");
  }
  wire_.append("\r\n");
  // A HEAD answer keeps the Content-Length a GET would get but carries no body: a
  // keep-alive client reads exactly the header and then the next answer.
  if (!head_request_) wire_.append(res.body());
  set_deadline(limits_.idle_timeout);
  net::async_write(socket_, net::buffer(wire_),
                   beast::bind_front_handler(&session::on_write, shared_from_this(), keep_alive));
}

void session::on_write(bool keep_alive, beast::error_code ec, std::size_t) {
  if (ec || !keep_alive) return do_close();
  yield_after_batch(socket_.get_executor());
  do_read();
}

void session::do_close() {
  if (closed_) return;
  closed_ = true;
  beast::error_code ignored;
  socket_.shutdown(net::ip::tcp::socket::shutdown_send, ignored);
  // Read what the client still sends (an unread body) until it closes, briefly: closing
  // with unread input would reset the connection and could destroy our last response.
  set_deadline(std::chrono::seconds(1));
  discard_input();
}

void session::discard_input() {
  socket_.async_read_some(net::buffer(discard_buffer_),
                          [self = shared_from_this()](beast::error_code ec, std::size_t) {
                            if (!ec) return self->discard_input();
                            beast::error_code ignored;
                            self->socket_.close(ignored);
                            self->deadline_timer_.cancel();
                          });
}
}  // namespace slotted::http
