#pragma once
// One HTTP/1.1 connection: read a request (header first, then body), hand it to the
// router, write the answer, repeat while keep-alive. Limits are enforced where the read
// happens: header size, body size (Content-Length or chunked), and a deadline of
// idle_timeout for each request to arrive in full, so a client trickling a header byte
// a second is cut off. I/O errors are error_codes, never exceptions.
//
// Memory per connection is bounded: the read buffer holds at most max_header_bytes +
// framing_allowance_bytes (body bytes move into the request as they are parsed, so
// the buffer only ever has to hold a header, a chunk-size line with its extensions, or
// a trailer), and the body at most max_body_bytes. A chunk-size line or trailer that
// does not fit is answered 400 or 431 and the connection closed. An exception thrown
// while handling a request (std::bad_alloc included) is answered 500 and closes the
// connection; the rest of the daemon carries on.
//
// Deadlines: each read or write sets a deadline (a coarse clock read); one timer per
// connection wakes every idle_timeout/4 and closes the socket once the deadline has
// passed. Re-arming a timer per read and per write cost about 5% of the CPU per request
// (timer queue operations and clock reads) in the profile.
//
// Thread-safety: all work runs on the one HTTP thread whose io_context the connection
// was accepted on (see executor_type below); drain() may be called from any thread.

#include <array>
#include <atomic>
#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <memory>
#include <optional>

#include "http/router.hpp"

namespace slotted::http {

struct session_limits {
  std::size_t max_body_bytes = 1048576;
  std::size_t max_header_bytes = 16384;
  std::chrono::milliseconds idle_timeout{30000};
  // Room beyond the header limit for chunk framing and for reading ahead.
  std::size_t framing_allowance_bytes = 65536;
};

// Held by a session for as long as it lives (its socket open); destroying it gives
// the connection's place back (see listener and http.max_connections).
class connection_slot {
 public:
  virtual ~connection_slot() = default;
};

// Each HTTP thread runs its own io_context, and a connection lives on one of them: its
// handlers never run concurrently, so no strand is needed, and the stream's executor is
// the concrete io_context executor rather than a type-erased one. Profiling the first
// version (one shared io_context, a strand per session, any_io_executor) showed about
// 12% of the CPU in executor copies and strand dispatch.
using executor_type = boost::asio::io_context::executor_type;
// A generic stream socket: the same session serves TCP and Unix-socket connections
// (listen.unix_socket); the protocol is a runtime value, the I/O path is the same.
using socket_type =
    boost::asio::basic_stream_socket<boost::asio::generic::stream_protocol, executor_type>;

class session : public std::enable_shared_from_this<session> {
 public:
  session(socket_type&& socket, router& r, const session_limits& limits,
          std::unique_ptr<connection_slot> slot = nullptr);
  ~session();

  void start();
  // Closes the connection now if it is between requests and nothing of a next request
  // has arrived (not even in the kernel's buffer), otherwise right after the response
  // to the request in progress. A request is never read without being answered. A
  // connection that has not had its first request yet gets a second for it.
  void drain();

 private:
  void do_read();
  void on_header(boost::beast::error_code ec, std::size_t);
  void read_body();
  void on_read(boost::beast::error_code ec, std::size_t);
  void send(response&& res);
  void on_write(bool keep_alive, boost::beast::error_code ec, std::size_t);
  void fail_request(boost::beast::error_code ec);
  bool trailer_pending() const;
  void do_close();
  void discard_input();
  void set_deadline(std::chrono::steady_clock::duration from_now);
  void watch_deadline();

  std::unique_ptr<connection_slot> slot_;  // first: released after the socket is closed
  socket_type socket_;
  boost::asio::basic_waitable_timer<
      std::chrono::steady_clock, boost::asio::wait_traits<std::chrono::steady_clock>, executor_type>
      deadline_timer_;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
  boost::beast::flat_buffer buffer_;
  std::optional<beast_http::request_parser<beast_http::string_body>> parser_;
  std::string wire_;                 // the answer being written, serialised
  std::shared_ptr<void> in_flight_;  // an interim message being written (100 Continue)
  std::array<char, 4096> discard_buffer_;
  router& router_;
  session_limits limits_;
  // Set by the first answer to the current request; a later one (an exception thrown
  // after the router answered) is dropped. Answers may come from a database thread.
  std::atomic<bool> answered_{false};
  bool request_keep_alive_ = false;
  bool head_request_ = false;        // the answer carries no body
  router::accepted_route accepted_;  // what check_header() found for the request read
  bool between_requests_ = false;
  bool draining_ = false;
  bool idle_read_cancelled_ = false;  // drain() ended the wait for a next request
  bool served_one_ = false;           // a request header has arrived on this connection
  bool closed_ = false;
};

}  // namespace slotted::http
