#include "http/listener.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "util/log.hpp"

namespace slotted::http {

namespace net = boost::asio;
namespace beast = boost::beast;
using net::ip::tcp;

// Gives a connection's place back when its session ends. It holds the count, not the
// listener: sessions may outlive the listener (destroyed with their io_context).
class listener::slot : public connection_slot {
 public:
  slot(std::shared_ptr<std::atomic<std::size_t>> open, metrics::gauge_handle& gauge)
      : open_(std::move(open)), gauge_(gauge) {
    open_->fetch_add(1);
    gauge_.Increment();
  }
  ~slot() override {
    open_->fetch_sub(1);
    gauge_.Decrement();
  }

 private:
  std::shared_ptr<std::atomic<std::size_t>> open_;
  metrics::gauge_handle& gauge_;  // the registry outlives the io_contexts
};

listener::listener(std::vector<net::io_context*> contexts, router& r, session_limits limits,
                   std::size_t max_connections, metrics::registry& m, connection_count open,
                   bool tcp)
    : contexts_(std::move(contexts)),
      acceptor_(*contexts_.front()),
      retry_timer_(*contexts_.front()),
      router_(r),
      limits_(limits),
      max_connections_(max_connections),
      open_(open ? std::move(open) : std::make_shared<std::atomic<std::size_t>>(0)),
      metrics_(m),
      tcp_(tcp) {}

listener::listener(std::vector<net::io_context*> contexts, const tcp::endpoint& endpoint, router& r,
                   session_limits limits, std::size_t max_connections, metrics::registry& m,
                   connection_count open)
    : listener(std::move(contexts), r, limits, max_connections, m, std::move(open), true) {
  const net::generic::stream_protocol::endpoint generic(endpoint);
  acceptor_.open(generic.protocol());
  acceptor_.set_option(net::socket_base::reuse_address(true));
  acceptor_.bind(generic);
  acceptor_.listen(net::socket_base::max_listen_connections);
  tcp::endpoint bound;
  socklen_t len = static_cast<socklen_t>(bound.capacity());
  if (::getsockname(acceptor_.native_handle(), bound.data(), &len) == 0) {
    bound.resize(len);
    port_ = bound.port();
  }
}

listener::listener(std::vector<net::io_context*> contexts, int fd, int family, router& r,
                   session_limits limits, std::size_t max_connections, metrics::registry& m,
                   connection_count open)
    : listener(std::move(contexts), r, limits, max_connections, m, std::move(open),
               family != AF_UNIX) {
  acceptor_.assign(net::generic::stream_protocol(family, tcp_ ? IPPROTO_TCP : 0), fd);
  if (tcp_) {
    tcp::endpoint bound;
    socklen_t len = static_cast<socklen_t>(bound.capacity());
    if (::getsockname(fd, bound.data(), &len) == 0) {
      bound.resize(len);
      port_ = bound.port();
    }
  }
}

namespace {
// Whether something accepts connections on the Unix socket at `path` right now.
bool socket_is_live(const std::string& path) {
  net::io_context ctx;
  net::local::stream_protocol::socket probe(ctx);
  beast::error_code ec;
  probe.connect(net::local::stream_protocol::endpoint(path), ec);
  return !ec;
}
}  // namespace

listener::listener(std::vector<net::io_context*> contexts, const std::string& path, unsigned mode,
                   router& r, session_limits limits, std::size_t max_connections,
                   metrics::registry& m, connection_count open)
    : listener(std::move(contexts), r, limits, max_connections, m, std::move(open), false) {
  if (path.empty() || path.size() >= sizeof(sockaddr_un::sun_path)) {
    throw std::runtime_error("listen.unix_socket: '" + path + "' is empty or longer than " +
                             std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes");
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      throw std::runtime_error("listen.unix_socket: " + path +
                               " exists and is not a socket; not touching it");
    }
    if (socket_is_live(path)) {
      throw std::runtime_error("listen.unix_socket: another process accepts on " + path +
                               " (a second copy of the daemon?); not touching it");
    }
    // Left behind by a process that is gone (SIGKILL, power cut): nobody listens.
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      throw std::runtime_error("listen.unix_socket: cannot remove the stale socket " + path + ": " +
                               std::strerror(errno));
    }
    log::info("removed the stale socket ", path);
  }
  const net::generic::stream_protocol::endpoint generic(
      net::local::stream_protocol::endpoint{path});
  acceptor_.open(generic.protocol());
  acceptor_.bind(generic);
  // Not chmod(): between bind() and here, whoever may write the directory could swap the
  // socket for a symlink, and chmod() would then change the mode of the link's target.
  // AT_SYMLINK_NOFOLLOW fails on a symlink instead (EOPNOTSUPP).
  if (::fchmodat(AT_FDCWD, path.c_str(), mode, AT_SYMLINK_NOFOLLOW) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    throw std::runtime_error("listen.unix_socket: chmod " + path + ": " + std::strerror(err));
  }
  acceptor_.listen(net::socket_base::max_listen_connections);
  if (::lstat(path.c_str(), &st) == 0) unix_inode_ = st.st_ino;
  unix_path_ = path;
}

// A listener that was never stopped (start() failed after binding) still removes its
// socket file.
listener::~listener() {
  remove_socket_file();
}

void listener::remove_socket_file() {
  util::lock_guard lock(sessions_mutex_);
  if (unix_path_.empty()) return;
  // Only our own socket: a newer daemon may have replaced it already.
  struct stat st {};
  if (::lstat(unix_path_.c_str(), &st) == 0 && st.st_ino == unix_inode_) {
    ::unlink(unix_path_.c_str());
  }
  unix_path_.clear();
}

void listener::run() {
  net::dispatch(acceptor_.get_executor(), [self = shared_from_this()] { self->do_accept(); });
}

void listener::stop() {
  stopped_ = true;
  remove_socket_file();
  net::dispatch(acceptor_.get_executor(), [self = shared_from_this()] {
    beast::error_code ignored;
    self->acceptor_.close(ignored);
    self->retry_timer_.cancel();
  });
  std::vector<std::shared_ptr<session>> live;
  {
    util::lock_guard lock(sessions_mutex_);
    for (auto& w : sessions_) {
      if (auto s = w.lock()) live.push_back(std::move(s));
    }
  }
  for (auto& s : live) s->drain();
}

std::size_t listener::sessions() const {
  util::lock_guard lock(sessions_mutex_);
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

namespace {
constexpr std::string_view busy_body =
    R"({"error": "too many connections (http.max_connections); retry later"})";

// A connection over the limit: one non-blocking write of a fixed 503 (a fresh socket's
// send buffer takes it whole; if not, the client just sees the close), then close.
void refuse(socket_type& socket) {
  static const std::string busy =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
      "Retry-After: 1\r\nConnection: close\r\nContent-Length: " +
      std::to_string(busy_body.size()) + "\r\n\r\n" + std::string(busy_body);
  beast::error_code ignored;
  socket.non_blocking(true, ignored);
  socket.send(net::buffer(busy), 0, ignored);
  socket.shutdown(net::socket_base::shutdown_both, ignored);
  socket.close(ignored);
}
}  // namespace

void listener::on_accept(beast::error_code ec, socket_type socket) {
  if (ec == net::error::operation_aborted) return;
  if (ec && stopped_) return;
  if (ec) {
    // Typically EMFILE: wait a little instead of spinning on the same error.
    log::warn("accept: ", ec.message());
    retry_timer_.expires_after(std::chrono::milliseconds(100));
    retry_timer_.async_wait([self = shared_from_this()](beast::error_code e) {
      if (!e) self->do_accept();
    });
    return;
  }
  if (open_->load() >= max_connections_) {
    // Counted before the close, so that whoever sees the close sees the count.
    metrics_.http_connections_rejected.Increment();
    metrics_.count_answer(metrics::route::connection_limit, 503);
    refuse(socket);
    return do_accept();
  }
  metrics_.http_connections_accepted.Increment();
  if (tcp_) socket.set_option(tcp::no_delay(true), ec);
  auto s = std::make_shared<session>(std::move(socket), router_, limits_,
                                     std::make_unique<slot>(open_, metrics_.http_connections_open));
  {
    util::lock_guard lock(sessions_mutex_);
    if (sessions_.size() >= next_sweep_) {
      std::erase_if(sessions_, [](const auto& w) { return w.expired(); });
      next_sweep_ = std::max<std::size_t>(64, sessions_.size() * 2);
    }
    sessions_.push_back(s);
  }
  s->start();
  // Accepted as the listener stopped: taken out of the socket's queue, so it is this
  // process's to answer (its first request), not the next one's.
  if (stopped_) return s->drain();
  do_accept();
}

std::size_t connection_limit(std::size_t configured, std::uint64_t open_file_limit,
                             std::size_t reserve) {
  if (open_file_limit == RLIM_INFINITY) return configured;
  const std::uint64_t available = open_file_limit > 2 * static_cast<std::uint64_t>(reserve)
                                      ? open_file_limit - reserve
                                      : open_file_limit / 2;
  return static_cast<std::size_t>(std::min<std::uint64_t>(configured, available));
}

void run_io_context(net::io_context& ctx) {
  auto guard = net::make_work_guard(ctx);
  for (;;) {
    try {
      ctx.run();
      return;
    } catch (const std::exception& e) {
      log::error("HTTP thread: a handler failed (", e.what(), "); its connection is closed");
    } catch (...) {
      log::error("HTTP thread: a handler failed; its connection is closed");
    }
  }
}

}  // namespace slotted::http
