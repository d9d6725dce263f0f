// What web servers in front of the daemon rely on: `Prefer: return=minimal` answers
// (nginx mirror subrequests keep their upstream connection only for bodiless answers),
// and the API on a Unix socket (listen.unix_socket) for web servers on the same host.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <filesystem>
#include <fstream>

#include "support/daemon_process.hpp"
#include "support/http_client.hpp"

namespace slotted::test {
namespace {

class Edge : public ::testing::Test {
 protected:
  void SetUp() override {
    auto& server = shared_mariadb();
    database_ = migrated_database(server);
    auto cfg = test_config(server, database_);
    cfg.flush.interval = std::chrono::hours(1);
    daemon_ = std::make_unique<in_process_daemon>(cfg);
  }

  std::int64_t total(std::uint64_t id) {
    http_client c(daemon_->port());
    EXPECT_EQ(c.request("POST", "/v1/flush").status, 200u);
    return shared_mariadb().query_int(
        database_,
        "SELECT CAST(COALESCE(SUM(count), 0) AS SIGNED) FROM slotted_counters WHERE record_id = " +
            std::to_string(id));
  }

  std::string database_;
  std::unique_ptr<in_process_daemon> daemon_;
};

std::string post(const std::string& body, const std::string& extra_headers) {
  return "POST /v1/increments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

TEST_F(Edge, PreferReturnMinimalIsAnswered204WithoutABodyOnTheSameConnection) {
  // Two minimal POSTs, then a health check, pipelined on one connection: the 204s must
  // carry no body (a stray one would be read as the start of the next answer).
  const std::string body = R"({"record_type": 1, "record_id": 61, "delta": 3})";
  const auto reply = raw_exchange(
      daemon_->port(), post(body, "Prefer: return=minimal\r\n") +
                           post(body, "Prefer: respond-async, RETURN=\"minimal\"; x=y\r\n") +
                           "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string no_content =
      "HTTP/1.1 204 No Content\r\nPreference-Applied: return=minimal\r\n\r\n";
  ASSERT_TRUE(reply.starts_with(no_content + no_content + "HTTP/1.1 200 OK\r\n")) << reply;
  EXPECT_EQ(total(61), 6);
}

TEST_F(Edge, PreferReturnMinimalInASecondPreferFieldCounts) {
  // Preferences may come in several Prefer fields, the same as one comma-separated
  // field: `return=minimal` in the second one is honoured.
  const std::string body = R"({"record_type": 1, "record_id": 63, "delta": 2})";
  const auto reply =
      raw_exchange(daemon_->port(), post(body,
                                         "Prefer: respond-async\r\nPrefer: return=minimal\r\n"
                                         "Connection: close\r\n"));
  EXPECT_EQ(reply,
            "HTTP/1.1 204 No Content\r\nPreference-Applied: return=minimal\r\n"
            "Connection: close\r\n\r\n");
  EXPECT_EQ(total(63), 2);
}

TEST_F(Edge, OtherPreferencesAndRefusalsKeepTheirBodies) {
  http_client c(daemon_->port());
  const std::string body = R"({"record_type": 1, "record_id": 62})";
  const auto full = c.request("POST", "/v1/increments", body, "application/json",
                              {{"Prefer", "return=representation"}});
  EXPECT_EQ(full.status, 202u);
  EXPECT_EQ(full.body, R"({"accepted": 1})");
  // An error is never hidden by the preference: the client needs to know why.
  const auto bad = c.request("POST", "/v1/increments", R"({"record_type": -1, "record_id": 1})",
                             "application/json", {{"Prefer", "return=minimal"}});
  EXPECT_EQ(bad.status, 400u);
  EXPECT_NE(bad.body.find("record_type"), std::string::npos) << bad.body;
  EXPECT_EQ(total(62), 1);
}

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
    char tmpl[] = "/tmp/slotted-unix-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
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
    const auto reply =
        unix_exchange(path_, post(body, "") + post(body, "Prefer: return=minimal\r\n") +
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
