// The listener on a socket it is handed (systemd socket activation) and a session
// drained while idle: a request that reached the kernel before the drain is answered,
// and a stopped listener leaves a passed socket open with its queue for the next one.

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>

#include "http/listener.hpp"
#include "support/eventually.hpp"
#include "support/fake_backend.hpp"
#include "support/temp_dir.hpp"

namespace slotted::http {
namespace {

namespace net = boost::asio;

const std::string increment =
    "POST /v1/increments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    "Content-Length: 46\r\n\r\n"
    R"({"record_type": 3, "record_id": 9, "delta": 2})";

// A listening Unix socket at a fresh path, as systemd would pass it.
class unix_listen_socket {
 public:
  unix_listen_socket() {
    dir_ = slotted::test::make_temp_dir("passed");
    path_ = dir_ + "/http.sock";
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path_.c_str(), sizeof a.sun_path - 1);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 64) != 0) {
      std::abort();
    }
  }
  ~unix_listen_socket() {
    ::close(fd_);
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  int fd() const { return fd_; }
  // A new client connection (queued by the kernel even while nobody accepts).
  int connect() const {
    const int c = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path_.c_str(), sizeof a.sun_path - 1);
    if (::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) std::abort();
    timeval tv{10, 0};  // a test that goes wrong fails instead of hanging
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return c;
  }

 private:
  std::string dir_, path_;
  int fd_ = -1;
};

void send_all(int fd, const std::string& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

// One response (header and Content-Length body), or what arrived until EOF or an error.
std::string read_response(int fd) {
  std::string got;
  char buf[4096];
  for (;;) {
    const auto end = got.find("\r\n\r\n");
    if (end != std::string::npos) {
      const auto cl = got.find("Content-Length: ");
      const std::size_t body = cl == std::string::npos ? 0 : std::stoul(got.substr(cl + 16));
      if (got.size() >= end + 4 + body) return got;
    }
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return got + (n < 0 ? "<error: " + std::string(std::strerror(errno)) + ">" : "");
    got.append(buf, static_cast<std::size_t>(n));
  }
}

class PassedListener : public ::testing::Test {
 protected:
  static config::daemon_config any_type() {
    config::daemon_config cfg;
    cfg.accept_undeclared_types = true;
    return cfg;
  }
  std::shared_ptr<listener> make_listener(int fd) {
    return std::make_shared<listener>(std::vector<net::io_context*>{&ctx_}, fd, AF_UNIX, router_,
                                      session_limits{}, 100, metrics_, nullptr);
  }
  void SetUp() override {
    thread_ = std::thread([this] { run_io_context(ctx_); });
  }
  void TearDown() override {
    ctx_.stop();
    thread_.join();
  }
  std::size_t adds() {
    std::lock_guard lock(backend_.mutex_);
    return backend_.added_.size();
  }

  config::daemon_config cfg_ = any_type();
  test::fake_backend backend_;
  metrics::registry metrics_;
  ingest::table_limits limits_;
  router router_{cfg_, backend_, metrics_, limits_};
  net::io_context ctx_{1};
  std::thread thread_;
};

// The next request of a keep-alive connection is in the kernel's buffer, not yet read,
// when the listener stops: it is read and answered (Connection: close), not reset.
// (Before: the idle session was closed with the request unread, or the request was
// applied after the close and never answered.)
TEST_F(PassedListener, ARequestArrivedBeforeTheDrainOfAnIdleConnectionIsAnswered) {
  unix_listen_socket sock;
  auto l = make_listener(::dup(sock.fd()));
  l->run();
  const int c = sock.connect();
  send_all(c, increment);
  EXPECT_NE(read_response(c).find("202 Accepted"), std::string::npos);

  // The HTTP thread is held while the next request arrives and the drain is asked for.
  std::promise<void> held, release;
  auto released = release.get_future().share();
  net::post(ctx_, [&held, released] {
    held.set_value();
    released.wait();
  });
  held.get_future().wait();
  send_all(c, increment);  // a Unix socket: in the daemon's receive queue on return
  l->stop();
  release.set_value();

  const std::string second = read_response(c);
  EXPECT_NE(second.find("202 Accepted"), std::string::npos) << second;
  EXPECT_NE(second.find("Connection: close"), std::string::npos) << second;
  EXPECT_EQ(adds(), 2u);
  ::close(c);
}

// A connection idle at the stop is closed without an answer; nothing was applied.
TEST_F(PassedListener, AnIdleConnectionIsClosedAtTheStop) {
  unix_listen_socket sock;
  auto l = make_listener(::dup(sock.fd()));
  l->run();
  const int c = sock.connect();
  send_all(c, increment);
  EXPECT_NE(read_response(c).find("202 Accepted"), std::string::npos);
  l->stop();
  EXPECT_EQ(read_response(c), "");  // EOF
  EXPECT_EQ(adds(), 1u);
  ::close(c);
}

// A connection accepted just before the stop whose request comes right after it: the
// request is answered. (Before: the new connection was closed as idle at once, and the
// client, which had been accepted, got no answer.)
TEST_F(PassedListener, ANewConnectionsFirstRequestAfterTheStopIsAnswered) {
  unix_listen_socket sock;
  auto l = make_listener(::dup(sock.fd()));
  l->run();
  const int c = sock.connect();
  ASSERT_TRUE(test::eventually([&] { return l->sessions() == 1; }, std::chrono::seconds(10)));
  l->stop();
  // Handlers run in order on the one thread: once this one has, so has the drain.
  std::promise<void> drained;
  net::post(ctx_, [&drained] { drained.set_value(); });
  drained.get_future().wait();
  send_all(c, increment);
  const std::string got = read_response(c);
  EXPECT_NE(got.find("202 Accepted"), std::string::npos) << got;
  EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
  EXPECT_EQ(adds(), 1u);
  ::close(c);
}

// stop() closes the listener's own descriptor only: connections that arrive afterwards
// wait in the socket's queue and the next listener on it answers them.
TEST_F(PassedListener, ConnectionsQueuedAfterAStopAreServedByTheNextListener) {
  unix_listen_socket sock;
  auto first = make_listener(::dup(sock.fd()));
  first->run();
  const int a = sock.connect();
  send_all(a, increment);
  EXPECT_NE(read_response(a).find("202 Accepted"), std::string::npos);
  first->stop();
  ::close(a);

  int queued[3];
  for (int& q : queued) {
    q = sock.connect();
    send_all(q, increment);
  }
  auto second = make_listener(::dup(sock.fd()));
  second->run();
  for (int q : queued) {
    EXPECT_NE(read_response(q).find("202 Accepted"), std::string::npos);
    ::close(q);
  }
  EXPECT_EQ(adds(), 4u);
  second->stop();
}

}  // namespace
}  // namespace slotted::http
