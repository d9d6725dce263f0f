#pragma once
// Owns the acceptor; starts a session per connection, on the HTTP threads' io_contexts
// in turn, and can drain them all.
//
// At most `max_connections` sessions live at once (a session holds its place until its
// socket is closed). A connection accepted beyond that is sent a fixed 503 if the
// socket takes it at once, then closed, and counted in
// slotted_counterd_http_connections_rejected_total; it costs no session and no buffer.
//
// Thread-safety: run() once; stop() from any thread. sessions() may be read anywhere.

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <string>
#include <vector>

#include "http/session.hpp"
#include "metrics/metrics.hpp"
#include "util/thread_annotations.hpp"

namespace slotted::http {

class listener : public std::enable_shared_from_this<listener> {
 public:
  // Counts the connections of every listener together against one max_connections.
  using connection_count = std::shared_ptr<std::atomic<std::size_t>>;

  // Binds and listens on TCP; throws boost::system::system_error when it cannot.
  // The acceptor lives on contexts[0]; connections are spread over all of them.
  listener(std::vector<boost::asio::io_context*> contexts,
           const boost::asio::ip::tcp::endpoint& endpoint, router& r, session_limits limits,
           std::size_t max_connections, metrics::registry& m, connection_count open = nullptr);
  // Binds and listens on a Unix socket at `path` with permissions `mode`. A socket file
  // left there by a process that is gone is removed first; a live one (something
  // accepts on it) or a file that is not a socket is never touched: throws
  // std::runtime_error naming the path. The file is removed again by stop(). Without
  // `open`, it counts its connections alone, as the TCP listener does.
  listener(std::vector<boost::asio::io_context*> contexts, const std::string& path, unsigned mode,
           router& r, session_limits limits, std::size_t max_connections, metrics::registry& m,
           connection_count open);
  // Accepts on a listening socket it is handed (`fd`, of `family`: see
  // passed_sockets.hpp), e.g. by systemd. stop() closes this descriptor only: whoever
  // passed it keeps its own, so connections that are queued or still arriving wait for
  // the next process, and a Unix socket's file is never removed.
  listener(std::vector<boost::asio::io_context*> contexts, int fd, int family, router& r,
           session_limits limits, std::size_t max_connections, metrics::registry& m,
           connection_count open);
  ~listener();

  // The TCP port (0 for a Unix socket).
  std::uint16_t port() const { return port_; }
  const connection_count& open_count() const { return open_; }
  void run();
  // Stops accepting and drains every open session (see session::drain).
  void stop();
  // Sessions still alive.
  std::size_t sessions() const;

 private:
  class slot;
  // What both public constructors share; they open and bind the acceptor.
  listener(std::vector<boost::asio::io_context*> contexts, router& r, session_limits limits,
           std::size_t max_connections, metrics::registry& m, connection_count open, bool tcp);
  void do_accept();
  void remove_socket_file();
  void on_accept(boost::beast::error_code ec, socket_type socket);

  std::vector<boost::asio::io_context*> contexts_;
  std::size_t next_context_ = 0;
  boost::asio::basic_socket_acceptor<boost::asio::generic::stream_protocol> acceptor_;
  boost::asio::steady_timer retry_timer_;
  router& router_;
  session_limits limits_;
  std::uint16_t port_ = 0;
  // Also the socket file's removal (stop() and the destructor may both try it).
  mutable util::mutex sessions_mutex_;
  std::vector<std::weak_ptr<session>> sessions_ GUARDED_BY(sessions_mutex_);
  std::size_t next_sweep_ GUARDED_BY(sessions_mutex_) = 64;
  std::atomic<bool> stopped_{false};
  std::size_t max_connections_;
  connection_count open_;
  metrics::registry& metrics_;
  bool tcp_ = true;
  // Removed at stop() when it is still our socket.
  std::string unix_path_ GUARDED_BY(sessions_mutex_);
  std::uint64_t unix_inode_ GUARDED_BY(sessions_mutex_) = 0;
};

// How many client connections the open-file limit allows while keeping `reserve`
// descriptors for the daemon's own files, database connections and the accept that
// refuses a connection: the smaller of `configured` and `open_file_limit - reserve`
// (half the limit when the reserve would take more than half).
std::size_t connection_limit(std::size_t configured, std::uint64_t open_file_limit,
                             std::size_t reserve);

// Runs `ctx` until it is stopped. An exception escaping a handler (a connection that
// could not get memory) is logged and the loop resumes: the handler's connection ends,
// the others and the process go on.
void run_io_context(boost::asio::io_context& ctx);

}  // namespace slotted::http
