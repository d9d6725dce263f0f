// HTTP/1.1 behaviour that clients rely on: chunked bodies, Expect: 100-continue,
// pipelining, keep-alive, header limits and read timeouts against slow clients.

#include <gtest/gtest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>

#include "integration/load.hpp"
#include "support/daemon_process.hpp"
#include "support/http_client.hpp"

namespace slotted::test {
namespace {

namespace net = boost::asio;

class Http : public ::testing::Test {
 protected:
  void SetUp() override {
    auto& server = shared_mariadb();
    database_ = migrated_database(server);
    auto cfg = test_config(server, database_);
    cfg.flush.interval = std::chrono::hours(1);
    cfg.http.idle_timeout = std::chrono::milliseconds(700);
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

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1))
    ++n;
  return n;
}

TEST_F(Http, ChunkedBodyIsAccepted) {
  const std::string body = R"({"record_type": 1, "record_id": 41, "delta": 4})";
  std::string chunked;
  for (std::size_t i = 0; i < body.size(); i += 10) {
    const auto part = body.substr(i, 10);
    char len[16];
    std::snprintf(len, sizeof len, "%zx\r\n", part.size());
    chunked += len + part + "\r\n";
  }
  chunked += "0\r\n\r\n";
  const auto reply =
      raw_exchange(daemon_->port(),
                   "POST /v1/increments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
                       chunked);
  EXPECT_NE(reply.find("HTTP/1.1 202"), std::string::npos) << reply;
  EXPECT_EQ(total(41), 4);
}

TEST_F(Http, ExpectContinueGetsA100BeforeTheBody) {
  net::io_context ioc;
  net::ip::tcp::socket s(ioc);
  s.connect({net::ip::make_address("127.0.0.1"), daemon_->port()});
  const std::string body = R"({"record_type": 1, "record_id": 42, "delta": 6})";
  net::write(
      s, net::buffer("POST /v1/increments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Expect: 100-continue\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n"));
  std::string got;
  net::read_until(s, net::dynamic_buffer(got), "\r\n\r\n");
  EXPECT_TRUE(got.starts_with("HTTP/1.1 100 Continue")) << got;
  net::write(s, net::buffer(body));
  got.clear();
  net::read_until(s, net::dynamic_buffer(got), "}");
  EXPECT_NE(got.find("HTTP/1.1 202"), std::string::npos) << got;
  EXPECT_EQ(total(42), 6);
}

TEST_F(Http, PipelinedRequestsAreAnsweredInOrder) {
  std::string requests;
  for (int i = 0; i < 5; ++i) {
    const std::string body =
        R"({"record_type": 1, "record_id": 43, "delta": )" + std::to_string(i + 1) + "}";
    requests +=
        "POST /v1/increments HTTP/1.1\r\nHost: x\r\nContent-Type: "
        "application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
  }
  requests += "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  const auto reply = raw_exchange(daemon_->port(), requests);
  EXPECT_EQ(count_of(reply, "HTTP/1.1 202"), 5u) << reply;
  EXPECT_LT(reply.rfind("HTTP/1.1 202"), reply.find("HTTP/1.1 200"));
  EXPECT_EQ(total(43), 1 + 2 + 3 + 4 + 5);
}

TEST_F(Http, KeepAliveServesManyRequestsOnOneConnection) {
  http_client c(daemon_->port());
  for (int i = 0; i < 50; ++i) {
    const auto r = c.post_json("/v1/increments", R"({"record_type": 1, "record_id": 44})");
    ASSERT_EQ(r.status, 202u);
    ASSERT_TRUE(r.keep_alive);
  }
  EXPECT_EQ(total(44), 50);
}

TEST_F(Http, RefusedRequestsWithoutABodyKeepTheConnection) {
  http_client c(daemon_->port());
  const auto missing = c.get("/no/such/path");
  EXPECT_EQ(missing.status, 404u);
  EXPECT_TRUE(missing.keep_alive);
  // A refused request whose body was not read closes the connection.
  const auto refused =
      c.request("POST", "/v1/increments", R"({"record_type": 1, "record_id": 1})", "text/plain");
  EXPECT_EQ(refused.status, 415u);
  EXPECT_FALSE(refused.keep_alive);
  EXPECT_EQ(c.get("/healthz").status, 200u);  // the client reconnects
}

TEST_F(Http, OversizedHeaderIs431) {
  const auto reply = raw_exchange(daemon_->port(), "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " +
                                                       std::string(20000, 'a') + "\r\n\r\n");
  EXPECT_NE(reply.find("HTTP/1.1 431"), std::string::npos) << reply.substr(0, 200);
}

TEST_F(Http, SlowHeaderIsCutOffAtTheIdleTimeout) {
  net::io_context ioc;
  net::ip::tcp::socket s(ioc);
  s.connect({net::ip::make_address("127.0.0.1"), daemon_->port()});
  const auto started = std::chrono::steady_clock::now();
  const std::string header = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
  boost::system::error_code ec;
  // One byte every 100 ms: each byte arrives well within the timeout, but the whole
  // header never does. The server must close the connection.
  for (std::size_t i = 0; i < header.size() && !ec; ++i) {
    net::write(s, net::buffer(&header[i], 1), ec);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the slow client itself
  }
  char buf[64];
  s.read_some(net::buffer(buf), ec);  // returns once the server closes
  EXPECT_TRUE(ec == net::error::eof || ec == net::error::connection_reset ||
              ec == net::error::broken_pipe)
      << ec.message();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
}

TEST_F(Http, HealthAndReadiness) {
  http_client c(daemon_->port());
  EXPECT_EQ(c.get("/healthz").status, 200u);
  // Ready once the flusher has reached the database; a flush proves it.
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  EXPECT_EQ(c.get("/readyz").status, 200u);
  const auto metrics = c.get("/metrics");
  EXPECT_EQ(metrics.status, 200u);
  EXPECT_NE(metrics.body.find("slotted_counterd_flushes_total{result=\"ok\"}"), std::string::npos);
  EXPECT_NE(metrics.body.find("process_resident_memory_bytes"), std::string::npos);
}

TEST(HttpNoDatabase, AcceptsIntoMemoryAndIsNotReadyWhileTheDatabaseIsUnreachable) {
  auto cfg = test_config(shared_mariadb(), "nowhere");
  cfg.mysql.socket = "/nonexistent/mysqld.sock";
  cfg.shutdown_timeout = std::chrono::milliseconds(500);
  in_process_daemon daemon(cfg);
  http_client c(daemon.port());
  EXPECT_EQ(c.post_json("/v1/increments", R"({"record_type": 1, "record_id": 1})").status, 202u);
  EXPECT_EQ(c.get("/readyz").status, 503u);
  const auto flush = c.request("POST", "/v1/flush");
  EXPECT_EQ(flush.status, 503u);
  EXPECT_TRUE(flush.headers.count("retry-after"));
  const auto read = c.get("/v1/counters/1/1");
  EXPECT_EQ(read.status, 503u);
  // What could not be written is reported through the exit code.
  EXPECT_EQ(daemon.stop(), 1);
}

}  // namespace
}  // namespace slotted::test
