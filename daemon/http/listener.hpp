#pragma once
// Owns the acceptor; starts a session per connection, on the HTTP threads' io_contexts
// in turn, and can drain them all.
//
// Thread-safety: run() once; stop() from any thread. sessions() may be read anywhere.

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <mutex>
#include <vector>

#include "http/session.hpp"

namespace slotted::http {

class listener : public std::enable_shared_from_this<listener> {
 public:
  // Binds and listens; throws boost::system::system_error when it cannot.
  // The acceptor lives on contexts[0]; connections are spread over all of them.
  listener(std::vector<boost::asio::io_context*> contexts,
           const boost::asio::ip::tcp::endpoint& endpoint, router& r, session_limits limits);

  std::uint16_t port() const { return port_; }
  void run();
  // Stops accepting and drains every open session (see session::drain).
  void stop();
  // Sessions still alive.
  std::size_t sessions() const;

 private:
  void do_accept();
  void on_accept(boost::beast::error_code ec, socket_type socket);

  std::vector<boost::asio::io_context*> contexts_;
  std::size_t next_context_ = 0;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer retry_timer_;
  router& router_;
  session_limits limits_;
  std::uint16_t port_ = 0;
  mutable std::mutex sessions_mutex_;
  std::vector<std::weak_ptr<session>> sessions_;
  std::size_t next_sweep_ = 64;
  std::atomic<bool> stopped_{false};
};

}  // namespace slotted::http
