#include "http/listener.hpp"

#include <boost/asio/dispatch.hpp>

#include "util/log.hpp"

namespace slotted::http {

namespace net = boost::asio;
namespace beast = boost::beast;
using net::ip::tcp;

listener::listener(std::vector<net::io_context*> contexts, const tcp::endpoint& endpoint, router& r,
                   session_limits limits)
    : contexts_(std::move(contexts)),
      acceptor_(*contexts_.front()),
      retry_timer_(*contexts_.front()),
      router_(r),
      limits_(limits) {
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(net::socket_base::reuse_address(true));
  acceptor_.bind(endpoint);
  acceptor_.listen(net::socket_base::max_listen_connections);
  port_ = acceptor_.local_endpoint().port();
}

void listener::run() {
  net::dispatch(acceptor_.get_executor(), [self = shared_from_this()] { self->do_accept(); });
}

void listener::stop() {
  stopped_ = true;
  net::dispatch(acceptor_.get_executor(), [self = shared_from_this()] {
    beast::error_code ignored;
    self->acceptor_.close(ignored);
    self->retry_timer_.cancel();
  });
  std::vector<std::shared_ptr<session>> live;
  {
    std::lock_guard lock(sessions_mutex_);
    for (auto& w : sessions_) {
      if (auto s = w.lock()) live.push_back(std::move(s));
    }
  }
  for (auto& s : live) s->drain();
}

std::size_t listener::sessions() const {
  std::lock_guard lock(sessions_mutex_);
  std::size_t n = 0;
  for (const auto& w : sessions_) n += w.expired() ? 0 : 1;
  return n;
}

void listener::do_accept() {
  if (stopped_) return;
  net::io_context& target = *contexts_[next_context_++ % contexts_.size()];
  acceptor_.async_accept(target.get_executor(),
                         beast::bind_front_handler(&listener::on_accept, shared_from_this()));
}

void listener::on_accept(beast::error_code ec, socket_type socket) {
  if (stopped_ || ec == net::error::operation_aborted) return;
  if (ec) {
    // Typically EMFILE: wait a little instead of spinning on the same error.
    log::warn("accept: ", ec.message());
    retry_timer_.expires_after(std::chrono::milliseconds(100));
    retry_timer_.async_wait([self = shared_from_this()](beast::error_code e) {
      if (!e) self->do_accept();
    });
    return;
  }
  socket.set_option(tcp::no_delay(true), ec);
  auto s = std::make_shared<session>(std::move(socket), router_, limits_);
  {
    std::lock_guard lock(sessions_mutex_);
    if (sessions_.size() >= next_sweep_) {
      std::erase_if(sessions_, [](const auto& w) { return w.expired(); });
      next_sweep_ = std::max<std::size_t>(64, sessions_.size() * 2);
    }
    sessions_.push_back(s);
  }
  s->start();
  if (stopped_) s->drain();
  do_accept();
}

}  // namespace slotted::http
