// HTTP/1.1 behaviour that clients rely on: chunked bodies, Expect: 100-continue,
// pipelining, keep-alive, header limits and read timeouts against slow clients.

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>
#include <thread>

#include "http/listener.hpp"
#include "integration/load.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/fake_backend.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"

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

// What a hostile client saw: it sent `head`, then `filler` over and over (up to
// `max_filler_bytes`) until the server answered; then it read until the server closed.
struct streamed {
  std::string reply;
  std::size_t filler_sent = 0;
  bool closed = false;  // the server closed (EOF or reset) within the deadline
};

streamed stream_until_answered(std::uint16_t port, const std::string& head,
                               const std::string& filler, std::size_t max_filler_bytes) {
  net::io_context ioc;
  net::ip::tcp::socket s(ioc);
  s.connect({net::ip::make_address("127.0.0.1"), port});
  net::write(s, net::buffer(head));
  s.non_blocking(true);
  const int fd = s.native_handle();
  streamed out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool answered = false;
  while (std::chrono::steady_clock::now() < deadline) {
    const bool want_write = !answered && out.filler_sent < max_filler_bytes;
    pollfd p{fd, static_cast<short>(POLLIN | (want_write ? POLLOUT : 0)), 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[4096];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        out.reply.append(buf, static_cast<std::size_t>(n));
        answered = out.reply.find("\r\n\r\n") != std::string::npos;
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        out.closed = true;
        break;
      }
    }
    if (want_write && (p.revents & POLLOUT)) {
      const ssize_t n = ::send(fd, filler.data(), filler.size(), MSG_NOSIGNAL);
      if (n > 0) out.filler_sent += static_cast<std::size_t>(n);
    }
  }
  return out;
}

// The answers in a byte stream, split by their Content-Length. A HEAD answer has none
// of its body on the wire, so `head_answers` says which answers to take as such.
std::vector<std::string> split_answers(std::string text, const std::vector<bool>& head_answers) {
  std::vector<std::string> answers;
  for (std::size_t i = 0; !text.empty(); ++i) {
    const auto end = text.find("\r\n\r\n");
    if (end == std::string::npos) break;
    std::size_t length = 0;
    const auto cl = text.find("Content-Length: ");
    if (cl != std::string::npos && cl < end) length = std::stoul(text.substr(cl + 16));
    const bool head = i < head_answers.size() && head_answers[i];
    const std::size_t size = std::min(text.size(), end + 4 + (head ? 0 : length));
    answers.push_back(text.substr(0, size));
    text.erase(0, size);
  }
  return answers;
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

TEST_F(Http, AnHttp10ClientIsNeverSentA100Continue) {
  // An HTTP/1.0 client does not know interim answers: it would take a 100 for the final
  // answer. It sends its body at once and must get exactly one answer, the 202.
  const std::string body = R"({"record_type": 1, "record_id": 46, "delta": 3})";
  const auto reply =
      raw_exchange(daemon_->port(),
                   "POST /v1/increments HTTP/1.0\r\nContent-Type: application/json\r\n"
                   "Expect: 100-continue\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_TRUE(reply.starts_with("HTTP/1.0 202")) << reply;
  EXPECT_EQ(reply.find("100 Continue"), std::string::npos) << reply;
  EXPECT_EQ(total(46), 3);
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

// Issue 40: http_requests_total counts every answer, also those the session gives
// before any route (the dashboard's 5xx and 4xx panels read it).
TEST(HttpCounting, TheSessionsOwnAnswersAreCountedInRequestsTotal) {
  auto cfg = test_config(shared_mariadb(), migrated_database(shared_mariadb()));
  cfg.http.max_body_bytes = 64;
  in_process_daemon daemon(cfg);
  const auto* daemon_ = &daemon;
  EXPECT_NE(raw_exchange(daemon_->port(), "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " +
                                              std::string(20000, 'a') + "\r\n\r\n")
                .find("HTTP/1.1 431"),
            std::string::npos);
  EXPECT_NE(raw_exchange(daemon_->port(), "GET /healthz HTTP/7.1\r\nHost: x\r\n\r\n")
                .find("HTTP/1.1 400"),
            std::string::npos);
  // A body over http.max_body_bytes, its header accepted: counted under its route.
  EXPECT_NE(raw_exchange(daemon_->port(),
                         "POST /v1/increments HTTP/1.1\r\nHost: x\r\nContent-Type: "
                         "application/json\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n" +
                             std::string(100, ' ') + "\r\n0\r\n\r\n")
                .find("HTTP/1.1 413"),
            std::string::npos);
  const auto metrics = http_client(daemon_->port()).get("/metrics").body;
  EXPECT_EQ(
      metric_value(metrics, R"(slotted_counterd_http_requests_total{code="431",route="unparsed"})"),
      1);
  EXPECT_EQ(
      metric_value(metrics, R"(slotted_counterd_http_requests_total{code="400",route="unparsed"})"),
      1);
  EXPECT_EQ(metric_value(metrics,
                         R"(slotted_counterd_http_requests_total{code="413",route="increments"})"),
            1);
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

TEST_F(Http, EndlessChunkExtensionIsRefusedWithBoundedMemory) {
  // "1;" and then a chunk extension that never ends: without a bound on the read
  // buffer the server keeps buffering until memory runs out. It must answer 400 after
  // a bounded amount and close.
  const auto got = stream_until_answered(
      daemon_->port(), "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1;",
      std::string(65536, 'a'), 64u << 20);
  EXPECT_TRUE(got.reply.starts_with("HTTP/1.1 400")) << got.reply.substr(0, 200);
  EXPECT_NE(got.reply.find("chunk-size line"), std::string::npos) << got.reply;
  EXPECT_TRUE(got.closed);
  EXPECT_LT(got.filler_sent, 64u << 20);
  // The daemon is alive and serving.
  EXPECT_EQ(http_client(daemon_->port()).get("/healthz").status, 200u);
}

TEST_F(Http, EndlessTrailerIsRefusedWithBoundedMemory) {
  const auto got =
      stream_until_answered(daemon_->port(),
                            "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                            "1\r\na\r\n0\r\nX-Trailer: ",
                            std::string(65536, 'b'), 64u << 20);
  EXPECT_TRUE(got.reply.starts_with("HTTP/1.1 431")) << got.reply.substr(0, 200);
  EXPECT_TRUE(got.closed);
  EXPECT_LT(got.filler_sent, 64u << 20);
  EXPECT_EQ(http_client(daemon_->port()).get("/healthz").status, 200u);
}

TEST_F(Http, LargeBodiesStillPassTheBoundedBuffer) {
  // The read buffer is bounded to the header limit plus 64 KiB; a body near
  // http.max_body_bytes (1 MiB) still arrives whole, plain and chunked.
  std::string ndjson;
  int items = 0;
  while (ndjson.size() < 900000) {
    ndjson += R"({"record_type": 1, "record_id": 45, "delta": 1})"
              "\n";
    ++items;
  }
  http_client c(daemon_->port());
  EXPECT_EQ(c.request("POST", "/v1/increments", ndjson, "application/x-ndjson").status, 202u);
  char len[32];
  std::snprintf(len, sizeof len, "%zx\r\n", ndjson.size());
  const auto chunked = stream_until_answered(
      daemon_->port(),
      "POST /v1/increments HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\n"
      "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
          std::string(len) + ndjson + "\r\n0\r\n\r\n",
      "", 0);
  EXPECT_TRUE(chunked.reply.starts_with("HTTP/1.1 202")) << chunked.reply.substr(0, 200);
  EXPECT_EQ(total(45), 2 * items);
}

TEST_F(Http, HeadAnswersCarryNoBodySoPipelinedAnswersStayInStep) {
  const auto reply = raw_exchange(daemon_->port(),
                                  "HEAD /nope HTTP/1.1\r\nHost: x\r\n\r\n"
                                  "HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                                  "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const auto answers = split_answers(reply, {true, true, false});
  ASSERT_EQ(answers.size(), 3u) << reply;
  EXPECT_TRUE(answers[0].starts_with("HTTP/1.1 404")) << reply;
  EXPECT_TRUE(answers[0].ends_with("\r\n\r\n")) << reply;  // no body
  EXPECT_TRUE(answers[1].starts_with("HTTP/1.1 200")) << reply;
  EXPECT_TRUE(answers[1].ends_with("\r\n\r\n")) << reply;
  // The Content-Length a GET would get.
  EXPECT_NE(answers[1].find("Content-Length: 16"), std::string::npos) << reply;
  EXPECT_TRUE(answers[2].starts_with("HTTP/1.1 200")) << reply;
  EXPECT_TRUE(answers[2].ends_with(R"({"status": "ok"})")) << reply;
}

TEST_F(Http, HeadOfAPostOnlyPathIs405WithoutBody) {
  http_client c(daemon_->port());
  const auto r = c.request("HEAD", "/v1/increments");
  EXPECT_EQ(r.status, 405u);
  EXPECT_TRUE(r.body.empty());
  EXPECT_TRUE(r.keep_alive);
  EXPECT_EQ(c.get("/healthz").status, 200u);  // the next answer is read in step
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

TEST(HttpConnectionLimit, ConnectionsBeyondMaxConnectionsAreRefusedAndCounted) {
  auto cfg = test_config(shared_mariadb(), migrated_database(shared_mariadb()));
  cfg.http.max_connections = 3;
  in_process_daemon daemon(cfg);
  std::vector<std::unique_ptr<http_client>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<http_client>(daemon.port()));
    ASSERT_EQ(held.back()->get("/healthz").status, 200u);
  }
  // A fourth connection gets a 503 (or, if that is lost to the reset, just the close),
  // never an answer to its request.
  const auto refused =
      stream_until_answered(daemon.port(), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", "", 0);
  EXPECT_TRUE(refused.closed);
  EXPECT_TRUE(refused.reply.empty() || refused.reply.starts_with("HTTP/1.1 503")) << refused.reply;
  auto metrics = held[0]->get("/metrics").body;
  EXPECT_EQ(metric_value(metrics, "slotted_counterd_http_connections_rejected_total"), 1);
  EXPECT_EQ(metric_value(metrics, "slotted_counterd_http_connections_open"), 3);
  // Every answer is in http_requests_total, the connection limit's 503 too (issue 40).
  EXPECT_EQ(
      metric_value(metrics,
                   R"(slotted_counterd_http_requests_total{code="503",route="connection_limit"})"),
      1);
  // Closing one gives its place back.
  held.pop_back();
  EXPECT_TRUE(eventually(
      [&] {
        return metric_value(held[0]->get("/metrics").body,
                            "slotted_counterd_http_connections_open") == 2;
      },
      std::chrono::seconds(20)));
  EXPECT_EQ(http_client(daemon.port()).get("/healthz").status, 200u);
}

// Issue 40: metrics.listen serves /metrics (and /healthz) on an address of its own, the
// Prometheus convention, and the API's listener no longer answers /metrics.
TEST(HttpMetricsListen, MetricsAreServedOnlyOnTheirOwnListener) {
  auto cfg = test_config(shared_mariadb(), migrated_database(shared_mariadb()));
  cfg.metrics_listen = "127.0.0.1:0";
  in_process_daemon daemon(cfg);
  ASSERT_NE(daemon.metrics_port(), 0);
  ASSERT_NE(daemon.metrics_port(), daemon.port());
  http_client api(daemon.port()), scrape(daemon.metrics_port());
  EXPECT_EQ(api.get("/metrics").status, 404u);
  EXPECT_EQ(api.get("/healthz").status, 200u);
  const auto m = scrape.get("/metrics");
  EXPECT_EQ(m.status, 200u);
  EXPECT_NE(m.body.find("slotted_counterd_build_info"), std::string::npos);
  EXPECT_EQ(scrape.get("/healthz").status, 200u);
  EXPECT_EQ(scrape.get("/readyz").status, 404u);
  EXPECT_EQ(scrape
                .request("POST", "/v1/increments", R"({"record_type": 1, "record_id": 1})",
                         "application/json")
                .status,
            404u);
  EXPECT_EQ(scrape.get("/v1/counters/1/1").status, 404u);
}

// Issue 40: the API's own address and port as metrics.listen is a config error, not a
// failed bind at start.
TEST(HttpMetricsListen, TheApisOwnPortIsRefusedByCheckConfig) {
  std::string yaml = daemon_yaml(shared_mariadb(), migrated_database(shared_mariadb()),
                                 "metrics: {listen: \"127.0.0.1:18080\"}\n");
  yaml.replace(yaml.find("port: 0"), 7, "port: 18080");
  std::string out;
  EXPECT_EQ(run_binary(yaml, "--check-config", out), 2) << out;
  EXPECT_NE(out.find("metrics.listen"), std::string::npos) << out;
  EXPECT_NE(out.find("listen.port 18080"), std::string::npos) << out;
}

// A backend whose /metrics handler throws, as an allocation failing would.
struct throwing_backend : fake_backend {
  throwing_backend() {
    metrics_text_ = []() -> std::string { throw std::bad_alloc(); };
  }
};

TEST(HttpFailures, AHandlerThatThrowsIsAnswered500AndTheServerGoesOn) {
  config::daemon_config cfg;
  throwing_backend backend;
  metrics::registry metrics;
  ingest::table_limits limits;
  http::router router(cfg, backend, metrics, limits);
  net::io_context ioc(1);
  auto listener = std::make_shared<http::listener>(
      std::vector<net::io_context*>{&ioc},
      net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), 0), router, http::session_limits{},
      100, metrics);
  listener->run();
  std::thread io([&] { http::run_io_context(ioc); });
  {
    http_client c(listener->port());
    const auto failed = c.get("/metrics");
    EXPECT_EQ(failed.status, 500u);
    EXPECT_FALSE(failed.keep_alive);
    EXPECT_EQ(c.get("/healthz").status, 200u);
    EXPECT_EQ(c.get("/metrics").status, 500u);
  }
  listener->stop();
  ioc.stop();
  io.join();
}

TEST(HttpUnixListener, WithoutASharedCountItCountsItsOwnConnections) {
  config::daemon_config cfg;
  throwing_backend backend;
  metrics::registry metrics;
  ingest::table_limits limits;
  http::router router(cfg, backend, metrics, limits);
  const std::string dir = slotted::test::make_temp_dir("unixcount");
  const std::string path = dir + "/api.sock";
  net::io_context ioc(1);
  // No shared count, as the TCP listener allows: on main the first accept
  // dereferenced the missing counter.
  auto listener =
      std::make_shared<http::listener>(std::vector<net::io_context*>{&ioc}, path, 0600u, router,
                                       http::session_limits{}, 100, metrics, nullptr);
  listener->run();
  std::thread io([&] { http::run_io_context(ioc); });
  std::string got;
  {
    net::io_context client_ctx;
    net::local::stream_protocol::socket s(client_ctx);
    s.connect(net::local::stream_protocol::endpoint(path));
    net::write(s, net::buffer(std::string("GET /healthz HTTP/1.1\r\nHost: x\r\n"
                                          "Connection: close\r\n\r\n")));
    boost::system::error_code ec;
    net::read(s, net::dynamic_buffer(got), ec);  // until the server closes
  }
  EXPECT_TRUE(got.starts_with("HTTP/1.1 200")) << got;
  listener->stop();
  ioc.stop();
  io.join();
  ::rmdir(dir.c_str());
}

TEST(HttpFailures, AnAnswerThatThrowsOnABackendThreadDoesNotEndTheProcess) {
  config::daemon_config cfg;
  fake_backend backend;  // keeps the flush's callback, to answer it from another thread
  metrics::registry metrics;
  ingest::table_limits limits;
  http::router router(cfg, backend, metrics, limits);
  // The first answer fails as handing it to the connection would without memory; the
  // router answers 500 instead. Unguarded, the exception escapes into the backend's
  // thread and std::terminate ends the process (and this test).
  std::vector<unsigned> answered;
  router.handle(http::request{boost::beast::http::verb::post, "/v1/flush", 11},
                [&](http::response&& res) {
                  answered.push_back(res.result_int());
                  if (answered.size() == 1) throw std::bad_alloc();
                  EXPECT_FALSE(res.keep_alive());
                });
  ASSERT_TRUE(backend.flush_done_);
  std::thread db_thread([&] { backend.flush_done_(http::backend_result::counted(5)); });
  db_thread.join();
  EXPECT_EQ(answered, (std::vector<unsigned>{200u, 500u}));
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

// nginx mirror subrequests keep their upstream connection only for bodiless answers.
TEST_F(Http, PreferReturnMinimalIsAnswered204WithoutABodyOnTheSameConnection) {
  // Two minimal POSTs, then a health check, pipelined on one connection: the 204s must
  // carry no body (a stray one would be read as the start of the next answer).
  const std::string body = R"({"record_type": 1, "record_id": 61, "delta": 3})";
  const auto reply =
      raw_exchange(daemon_->port(),
                   http_post_bytes(body, "Prefer: return=minimal\r\n") +
                       http_post_bytes(body, "Prefer: respond-async, RETURN=\"minimal\"; x=y\r\n") +
                       "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string no_content =
      "HTTP/1.1 204 No Content\r\nPreference-Applied: return=minimal\r\n\r\n";
  ASSERT_TRUE(reply.starts_with(no_content + no_content + "HTTP/1.1 200 OK\r\n")) << reply;
  EXPECT_EQ(total(61), 6);
}

TEST_F(Http, PreferReturnMinimalInASecondPreferFieldCounts) {
  // Preferences may come in several Prefer fields, the same as one comma-separated
  // field: `return=minimal` in the second one is honoured.
  const std::string body = R"({"record_type": 1, "record_id": 63, "delta": 2})";
  const auto reply = raw_exchange(
      daemon_->port(),
      http_post_bytes(body,
                      "Prefer: respond-async\r\nPrefer: return=minimal\r\nConnection: close\r\n"));
  EXPECT_EQ(reply,
            "HTTP/1.1 204 No Content\r\nPreference-Applied: return=minimal\r\n"
            "Connection: close\r\n\r\n");
  EXPECT_EQ(total(63), 2);
}

TEST_F(Http, OtherPreferencesAndRefusalsKeepTheirBodies) {
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

}  // namespace
}  // namespace slotted::test
