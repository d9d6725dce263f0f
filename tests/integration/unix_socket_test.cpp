// The API on a Unix socket (listen.unix_socket), for web servers on the same host: served
// like TCP, a stale socket file replaced, a live one or any other file never touched.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <filesystem>
#include <fstream>

#include "app/application.hpp"
#include "support/daemon_process.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {
namespace {

namespace net = boost::asio;
using unix_socket = net::local::stream_protocol;

// Sends `bytes` on a new connection to the Unix socket at `path` and reads until the
// daemon closes it.
std::string unix_exchange(const std::string& path, const std::string& bytes) {
  net::io_context ioc;
  unix_socket::socket s(ioc);
  s.connect(unix_socket::endpoint(path));
  net::write(s, net::buffer(bytes));
  std::string got;
  boost::system::error_code ec;
  net::read(s, net::dynamic_buffer(got), ec);  // until EOF
  return got;
}

class UnixSocket : public ::testing::Test {
 protected:
  void SetUp() override {
    auto& server = shared_mariadb();
    database_ = migrated_database(server);
    dir_ = slotted::test::make_temp_dir("unix");
    path_ = dir_ + "/api.sock";
    cfg_ = test_config(server, database_);
    cfg_.flush.interval = std::chrono::hours(1);
    cfg_.listen_unix_socket = path_;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::int64_t total(std::uint64_t id) {
    return shared_mariadb().query_int(
        database_,
        "SELECT CAST(COALESCE(SUM(count), 0) AS SIGNED) FROM slotted_counters WHERE record_id = " +
            std::to_string(id));
  }

  std::string database_, dir_, path_;
  config::daemon_config cfg_;
};

TEST_F(UnixSocket, ServesTheApiWithItsModeAndRemovesTheFileAtStop) {
  cfg_.listen_unix_socket_mode = 0600;
  {
    in_process_daemon daemon(cfg_);
    struct stat st {};
    ASSERT_EQ(lstat(path_.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    const std::string body = R"({"record_type": 1, "record_id": 71, "delta": 5})";
    const auto reply = unix_exchange(
        path_, http_post_bytes(body, "") + http_post_bytes(body, "Prefer: return=minimal\r\n") +
                   "POST /v1/flush HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_NE(reply.find("HTTP/1.1 202"), std::string::npos) << reply;
    EXPECT_NE(reply.find("HTTP/1.1 204"), std::string::npos) << reply;
    EXPECT_NE(reply.find("HTTP/1.1 200"), std::string::npos) << reply;
    EXPECT_EQ(total(71), 10);
    // The TCP listener serves at the same time.
    http_client tcp(daemon.port());
    EXPECT_EQ(tcp.get("/healthz").status, 200u);
    EXPECT_EQ(daemon.stop(), 0);
  }
  EXPECT_FALSE(std::filesystem::exists(path_));
}

TEST_F(UnixSocket, AStaleSocketFileIsReplaced) {
  {
    // A socket bound and closed without unlinking: what a SIGKILLed daemon leaves.
    net::io_context ioc;
    unix_socket::acceptor stale(ioc, unix_socket::endpoint(path_));
  }
  ASSERT_TRUE(std::filesystem::exists(path_));
  in_process_daemon daemon(cfg_);
  const auto reply =
      unix_exchange(path_, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 200")) << reply;
}

TEST_F(UnixSocket, ALiveSocketOrAnotherFileIsNeverTouched) {
  net::io_context ioc;
  unix_socket::acceptor live(ioc, unix_socket::endpoint(path_));  // listening: a live owner
  {
    application app(cfg_);
    try {
      app.start();
      FAIL() << "started on a live socket";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("another process accepts on " + path_),
                std::string::npos)
          << e.what();
    }
  }
  // Still the live owner's socket: a client reaches it, not a daemon.
  unix_socket::socket client(ioc);
  client.connect(unix_socket::endpoint(path_));
  unix_socket::socket accepted(ioc);
  live.accept(accepted);
  live.close();
  client.close();

  std::filesystem::remove(path_);
  std::ofstream(path_) << "not a socket";
  {
    application app(cfg_);
    EXPECT_THROW(app.start(), std::runtime_error);
  }
  std::ifstream in(path_);
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "not a socket");
}

}  // namespace
}  // namespace slotted::test
