// Socket activation (systemd/slotted-counterd.socket): the daemon serves the API on the
// listening sockets passed to it (LISTEN_FDS, at descriptor 3 on), in place of the
// configured listeners, and a restart on the same sockets refuses no connection: what
// arrives while no daemon runs waits in the socket's queue for the next one.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {
namespace {

// The bytes of one increment of `delta` to (1, id), on a connection closed after it.
std::string post_bytes(std::uint64_t id, int delta) {
  return http_post_bytes(R"({"record_type": 1, "record_id": )" + std::to_string(id) +
                             R"(, "delta": )" + std::to_string(delta) + "}",
                         "Connection: close\r\n");
}

class SocketActivation : public ::testing::Test {
 protected:
  void SetUp() override {
    database_ = migrated_database(shared_mariadb());
    dir_ = slotted::test::make_temp_dir("activation");
    unix_path_ = dir_ + "/http.sock";
    unix_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un u{};
    u.sun_family = AF_UNIX;
    std::strncpy(u.sun_path, unix_path_.c_str(), sizeof u.sun_path - 1);
    ASSERT_EQ(::bind(unix_fd_, reinterpret_cast<sockaddr*>(&u), sizeof u), 0);
    ASSERT_EQ(::listen(unix_fd_, 512), 0);
    tcp_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(tcp_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::listen(tcp_fd_, 512), 0);
    socklen_t len = sizeof a;
    ASSERT_EQ(::getsockname(tcp_fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    tcp_port_ = ntohs(a.sin_port);
  }
  void TearDown() override {
    ::close(unix_fd_);
    ::close(tcp_fd_);
    std::filesystem::remove_all(dir_);
  }

  // A config whose own listeners differ from the passed ones: they must not be used.
  std::string yaml() const {
    return "listen: {address: 127.0.0.1, port: 0, unix_socket: " + dir_ +
           "/configured.sock}\n"
           "http: {threads: 2}\n"
           "mysql: {socket: " +
           shared_mariadb().socket() + ", user: root, database: " + database_ +
           "}\n"
           "accept_undeclared_types: true\n"
           "flush: {interval: 1h}\n"
           "shutdown_timeout: 20s\n";
  }

  // Connects to the passed Unix socket and sends one request; -1 when refused. The
  // connection is queued by the kernel even while no daemon accepts.
  int unix_send(std::uint64_t id, int delta) const {
    const int c = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un u{};
    u.sun_family = AF_UNIX;
    std::strncpy(u.sun_path, unix_path_.c_str(), sizeof u.sun_path - 1);
    timeval tv{30, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const auto bytes = post_bytes(id, delta);
    if (::connect(c, reinterpret_cast<sockaddr*>(&u), sizeof u) != 0 ||
        ::send(c, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) {
      ::close(c);
      return -1;
    }
    return c;
  }
  // The answer's status (0: none, the connection closed or failed first); closes `c`.
  static unsigned read_status(int c) {
    if (c < 0) return 0;
    std::string got;
    char buf[1024];
    ssize_t n;
    while ((n = ::recv(c, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<std::size_t>(n));
    ::close(c);
    return got.starts_with("HTTP/1.1 ") ? static_cast<unsigned>(std::stoul(got.substr(9, 3))) : 0;
  }
  unsigned unix_post(std::uint64_t id, int delta) const {
    return read_status(unix_send(id, delta));
  }

  std::int64_t total() const {
    return shared_mariadb().query_int(
        database_, "SELECT CAST(COALESCE(SUM(count), 0) AS SIGNED) FROM slotted_counters");
  }

  std::vector<passed_fd> both() const { return {{tcp_fd_, "http-tcp"}, {unix_fd_, "http-unix"}}; }

  std::string database_, dir_, unix_path_;
  int unix_fd_ = -1, tcp_fd_ = -1;
  std::uint16_t tcp_port_ = 0;
};

TEST_F(SocketActivation, ServesTheApiOnEveryPassedSocketInPlaceOfTheConfiguredOnes) {
  daemon_process daemon(yaml(), 0, false, both());
  EXPECT_EQ(daemon.port(), tcp_port_) << daemon.log();
  const auto log = daemon.log();
  EXPECT_NE(log.find("socket 'http-tcp' passed by systemd"), std::string::npos) << log;
  EXPECT_NE(log.find(unix_path_ + " (socket 'http-unix' passed by systemd)"), std::string::npos)
      << log;
  EXPECT_NE(log.find("listen.unix_socket are not used"), std::string::npos) << log;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/configured.sock"));

  EXPECT_EQ(unix_post(1, 5), 202u);
  http_client tcp(tcp_port_);
  EXPECT_EQ(
      tcp.post_json("/v1/increments", R"({"record_type": 1, "record_id": 2, "delta": 7})").status,
      202u);
  EXPECT_EQ(tcp.get("/metrics").status, 200u);
  EXPECT_EQ(tcp.request("POST", "/v1/flush").status, 200u);
  EXPECT_EQ(total(), 12);
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(std::chrono::seconds(30)), 0) << daemon.log();
  // The passed Unix socket's file belongs to whoever passed it: still there.
  EXPECT_TRUE(std::filesystem::exists(unix_path_));
}

// Bad input: a passed descriptor that is not a listening socket stops the start with
// an error naming it, and nothing is served.
TEST_F(SocketActivation, ADescriptorThatIsNotAListeningSocketFailsTheStartNamingIt) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  try {
    daemon_process daemon(yaml() + "wal: {dir: " + dir_ + "/wal}\n", 0, false,
                          {{tcp_fd_, "http-tcp"}, {pair[0], "stray"}});
    ADD_FAILURE() << "started with a descriptor that is not a listening socket";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("status 256"), std::string::npos) << what;  // exit 1
    EXPECT_NE(what.find("LISTEN_FDS: descriptor 4 ('stray') is not a listening stream socket"),
              std::string::npos)
        << what;
  }
  ::close(pair[0]);
  ::close(pair[1]);
}

// A daemon stopped (SIGTERM) while clients keep posting, and the next one started on
// the same sockets: every request is answered 202, the queued ones by the next daemon,
// and the table holds every increment once.
TEST_F(SocketActivation, ConnectionsQueuedWhileNoDaemonRunsAreServedByTheNext) {
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> acknowledged{0};
  std::atomic<int> failed{0};
  std::mutex failures_mutex;
  std::vector<unsigned> failures;  // the statuses that were not 202 (0: no answer)
  std::atomic<int> served_by_second{0};
  std::atomic<bool> second_up{false};
  auto first = std::make_unique<daemon_process>(yaml(), 0, false, both());
  std::vector<std::thread> clients;
  struct joiner {  // an ASSERT that returns early still ends the clients
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~joiner() {
      stop = true;
      for (auto& t : threads) {
        if (t.joinable()) t.join();
      }
    }
  } join_clients{stop, clients};
  for (int n = 0; n < 3; ++n) {
    clients.emplace_back([&, n] {
      for (std::uint64_t i = 0; !stop; ++i) {
        const int delta = static_cast<int>(i % 5) + 1;
        const unsigned status = unix_post(static_cast<std::uint64_t>(n) * 1000 + i % 50, delta);
        if (status == 202) {
          acknowledged += delta;
          if (second_up) ++served_by_second;
        } else {
          ++failed;
          std::lock_guard lock(failures_mutex);
          failures.push_back(status);
        }
      }
    });
  }
  ASSERT_TRUE(eventually([&] { return acknowledged.load() >= 100; }, std::chrono::seconds(30)));
  first->signal(SIGTERM);
  EXPECT_EQ(first->wait(std::chrono::seconds(30)), 0) << first->log();
  first.reset();
  // Nobody accepts now: these connections (and the clients' next ones) wait in the queue.
  std::vector<int> queued;
  for (std::uint64_t q = 0; q < 3; ++q) {
    queued.push_back(unix_send(9000 + q, 1));
    EXPECT_GE(queued.back(), 0) << "refused while no daemon ran";
  }
  daemon_process second(yaml(), 0, false, both());
  second_up = true;
  ASSERT_TRUE(eventually([&] { return served_by_second.load() >= 100; }, std::chrono::seconds(30)));
  stop = true;
  for (auto& t : clients) t.join();
  for (int c : queued) {
    if (read_status(c) == 202) {
      acknowledged += 1;
    } else {
      ++failed;
    }
  }
  EXPECT_EQ(failed.load(), 0) << "statuses: " << ::testing::PrintToString(failures);
  http_client tcp(second.port());
  ASSERT_EQ(tcp.request("POST", "/v1/flush").status, 200u);
  EXPECT_EQ(total(), acknowledged.load());
}

}  // namespace
}  // namespace slotted::test
