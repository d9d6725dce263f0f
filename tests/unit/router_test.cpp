// The router against a scripted backend (tests/support/fake_backend.hpp): every backend
// result maps to its status and body, synchronous or answered later from another thread.

#include "http/router.hpp"

#include <gtest/gtest.h>

#include <ctime>
#include <thread>

#include "support/fake_backend.hpp"

namespace slotted::http {
namespace {

namespace bh = boost::beast::http;

class Router : public ::testing::Test {
 protected:
  static config::daemon_config any_type() {
    config::daemon_config cfg;
    cfg.accept_undeclared_types = true;
    return cfg;
  }

  // Sends one request; returns the answers it got (the router must give exactly one).
  std::vector<response> send(bh::verb verb, std::string target, std::string body = {}) {
    request req{verb, target, 11};
    if (!body.empty()) {
      req.set(bh::field::content_type, "application/json");
      req.body() = std::move(body);
      req.prepare_payload();
    }
    return send_to(router_, std::move(req));
  }
  // `req` through router `r`, as a session passes it: its header first.
  std::vector<response> send_to(router& r, request req) {
    if (auto refused = r.check_header(req)) return {std::move(*refused)};
    auto answers = std::make_shared<std::vector<response>>();
    r.handle(std::move(req), [answers](response&& res) { answers->push_back(std::move(res)); });
    last_ = answers;
    return *answers;
  }
  // The answers of the last request so far (for one answered later).
  std::vector<response> answers() const { return *last_; }

  std::string metrics_text() { return metrics_.serialize(); }

  config::daemon_config cfg_ = any_type();
  test::fake_backend backend_;
  metrics::registry metrics_;
  ingest::table_limits limits_;
  router router_{cfg_, backend_, metrics_, limits_};
  std::shared_ptr<std::vector<response>> last_;
};

const std::string one = R"({"record_type": 3, "record_id": 9, "delta": 2})";

TEST_F(Router, AnAppliedIncrementIsAnswered202AndReachesTheBackend) {
  const auto got = send(bh::verb::post, "/v1/increments", one);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].result_int(), 202u);
  EXPECT_EQ(got[0].body(), R"({"accepted": 1})");
  ASSERT_EQ(backend_.added_.size(), 1u);
  EXPECT_EQ(backend_.added_[0][0].record_type, 3u);
  EXPECT_EQ(backend_.added_[0][0].record_id, 9u);
  EXPECT_EQ(backend_.added_[0][0].delta, 2);
}

TEST_F(Router, EachRefusalOfTheBackendHasItsOwnStatus) {
  backend_.add_answer_ = {errc::over_limit};
  auto got = send(bh::verb::post, "/v1/increments", one);
  EXPECT_EQ(got.at(0).result_int(), 503u);
  EXPECT_EQ(got[0][bh::field::retry_after], "5");
  EXPECT_NE(got[0].body().find("flush.max_pending_keys"), std::string::npos);
  backend_.add_answer_ = {errc::out_of_range};
  got = send(bh::verb::post, "/v1/increments", one);
  EXPECT_EQ(got.at(0).result_int(), 422u);
  EXPECT_NE(metrics_text().find(
                R"(slotted_counterd_increments_rejected_total{reason="pending_limit"} 1)"),
            std::string::npos);
}

TEST_F(Router, ADurableAddIsAnsweredOnceTheBackendAnswersFromItsThread) {
  backend_.durable_ = true;
  EXPECT_TRUE(send(bh::verb::post, "/v1/increments", one).empty()) << "answered before logged";
  ASSERT_TRUE(backend_.add_done_);
  std::thread log_thread([&] { backend_.add_done_({}); });
  log_thread.join();
  ASSERT_EQ(answers().size(), 1u);
  EXPECT_EQ(answers()[0].result_int(), 202u);

  send(bh::verb::post, "/v1/increments", one);
  backend_.add_done_({errc::unavailable, "the write-ahead log cannot be written; retry later"});
  ASSERT_EQ(answers().size(), 1u);
  EXPECT_EQ(answers()[0].result_int(), 503u);
  EXPECT_NE(answers()[0].body().find("write-ahead log"), std::string::npos);
  EXPECT_NE(metrics_text().find(
                R"(slotted_counterd_increments_rejected_total{reason="wal_unavailable"} 1)"),
            std::string::npos);
  // A failure without a text of its own tells its code's message.
  send(bh::verb::post, "/v1/increments", one);
  backend_.add_done_({errc::wal_sync_failed});
  ASSERT_EQ(answers().size(), 1u);
  EXPECT_EQ(answers()[0].result_int(), 503u);
  EXPECT_EQ(answers()[0][bh::field::retry_after], "5");
  EXPECT_EQ(answers()[0].body(),
            "{\"error\": \"" + make_error_code(errc::wal_sync_failed).message() + "\"}");
  // A request the log refused because the daemon is stopping: draining, counted as such.
  send(bh::verb::post, "/v1/increments", one);
  backend_.add_done_({errc::draining, "draining"});
  ASSERT_EQ(answers().size(), 1u);
  EXPECT_EQ(answers()[0].result_int(), 503u);
  EXPECT_EQ(answers()[0][bh::field::retry_after], "1");
  EXPECT_NE(metrics_text().find(
                R"(slotted_counterd_increments_rejected_total{reason="draining"} 1)"),
            std::string::npos);
}

TEST_F(Router, ACounterReadShowsPersistedPlusPendingOrWhyNot) {
  EXPECT_TRUE(send(bh::verb::get, "/v1/counters/3/9").empty());
  EXPECT_EQ(backend_.read_key_.record_type, 3u);
  EXPECT_EQ(backend_.read_key_.record_id, 9u);
  backend_result r;
  r.persisted = INT64_MAX;
  r.pending = 5;  // the total passes int64 and is still printed exactly
  backend_.read_done_(r);
  ASSERT_EQ(answers().size(), 1u);
  EXPECT_EQ(answers()[0].result_int(), 200u);
  EXPECT_NE(answers()[0].body().find(R"("count": 9223372036854775812)"), std::string::npos)
      << answers()[0].body();

  send(bh::verb::get, "/v1/counters/3/9");
  backend_.read_done_({errc::unavailable, "the counter is being written; retry"});
  ASSERT_EQ(answers().size(), 1u);
  EXPECT_EQ(answers()[0].result_int(), 503u);
  EXPECT_NE(answers()[0].body().find("being written"), std::string::npos);
}

TEST_F(Router, AResetAnswersWhatItClearedOr503) {
  EXPECT_TRUE(send(bh::verb::delete_, "/v1/counters/3/18446744073709551615").empty());
  EXPECT_EQ(backend_.reset_key_.record_type, 3u);
  EXPECT_EQ(backend_.reset_key_.record_id, 18446744073709551615ull);
  backend_result r;
  r.cleared = static_cast<__int128>(INT64_MAX) + 5;  // persisted plus pending, exactly
  backend_.reset_done_(r);
  ASSERT_EQ(answers().size(), 1u);
  EXPECT_EQ(answers()[0].result_int(), 200u);
  EXPECT_EQ(
      answers()[0].body(),
      R"({"record_type": 3, "record_id": "18446744073709551615", "cleared": 9223372036854775812})");

  send(bh::verb::delete_, "/v1/counters/3/9");
  backend_.reset_done_({errc::unavailable, "database: gone"});
  ASSERT_EQ(answers().size(), 1u);
  EXPECT_EQ(answers()[0].result_int(), 503u);
  EXPECT_EQ(answers()[0][bh::field::retry_after], "5");
  EXPECT_NE(answers()[0].body().find("reset failed: database: gone"), std::string::npos);
  EXPECT_NE(
      metrics_text().find(R"(slotted_counterd_http_requests_total{code="503",route="reset"} 1)"),
      std::string::npos);
}

TEST_F(Router, AResetOfABadCounterIsRefused400WithoutReachingTheBackend) {
  cfg_.accept_undeclared_types = false;
  cfg_.counters.push_back({});
  cfg_.counters.back().name = "downloads";
  cfg_.counters.back().record_type = 7;
  router_.reconfigure(cfg_);
  for (const auto* target : {"/v1/counters/8/1", "/v1/counters/x/1", "/v1/counters/7/-1",
                             "/v1/counters/7/18446744073709551616", "/v1/counters/7/1x"}) {
    const auto got = send(bh::verb::delete_, target);
    ASSERT_EQ(got.size(), 1u) << target;
    EXPECT_EQ(got[0].result_int(), 400u) << target;
  }
  EXPECT_FALSE(backend_.reset_done_);
  EXPECT_EQ(send(bh::verb::delete_, "/v1/counters/7/1/x").at(0).result_int(), 404u);
  // A declared name works as in a read.
  EXPECT_TRUE(send(bh::verb::delete_, "/v1/counters/downloads/1").empty());
  EXPECT_EQ(backend_.reset_key_.record_type, 7u);
  // Draining: refused before the backend, with Retry-After.
  backend_.reset_done_ = nullptr;
  backend_.draining_ = true;
  const auto got = send(bh::verb::delete_, "/v1/counters/7/1");
  EXPECT_EQ(got.at(0).result_int(), 503u);
  EXPECT_TRUE(got[0].count(bh::field::retry_after));
  EXPECT_FALSE(backend_.reset_done_);
  // Another method on the path names DELETE among those allowed.
  EXPECT_EQ(send(bh::verb::post, "/v1/counters/7/1").at(0)[bh::field::allow], "GET, HEAD, DELETE");
}

// README (Reset): "an id out of range is a 400, as for increments" -- and increments
// refuse an id the counters table's column cannot hold (a seed-style INT table). A
// reset of such an id must not reach the backend (a ledger row, a synced WAL record,
// a flush cycle, and a 200 "cleared 0" for a counter that cannot exist).
TEST_F(Router, AResetOfAnIdTheTableCannotHoldIsRefused400AsForIncrements) {
  limits_.set(2147483647u, 2147483647u);  // a seed-style INT table
  ASSERT_EQ(send(bh::verb::post, "/v1/increments",
                 R"({"record_type": 3, "record_id": 2147483648, "delta": 1})")
                .at(0)
                .result_int(),
            400u);
  const auto got = send(bh::verb::delete_, "/v1/counters/3/2147483648");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].result_int(), 400u);
  EXPECT_NE(got[0].body().find("record_id"), std::string::npos) << got[0].body();
  EXPECT_FALSE(backend_.reset_done_);
  // The largest id the column holds still reaches the backend.
  EXPECT_TRUE(send(bh::verb::delete_, "/v1/counters/3/2147483647").empty());
  EXPECT_EQ(backend_.reset_key_.record_id, 2147483647u);
}

// README (Reset): resets_total{result="error"} counts resets answered 503; the flusher
// counts those it refuses ("shutting down" included), and a reset refused by the router
// while draining is one too, or the dashboard's refused resets miss every shutdown.
TEST_F(Router, AResetRefusedWhileDrainingIsCountedAsAnError) {
  backend_.draining_ = true;
  ASSERT_EQ(send(bh::verb::delete_, "/v1/counters/3/1").at(0).result_int(), 503u);
  EXPECT_NE(metrics_text().find(R"(slotted_counterd_resets_total{result="error"} 1)"),
            std::string::npos);
}

// A request read while the daemon stops is answered as usual: the final flush runs after
// the last answer, so nothing of it is lost, and a client of a restart under socket
// activation sees no refusal. (Before: 503 "shutting down".)
TEST_F(Router, AnIncrementReadWhileDrainingIsApplied) {
  backend_.draining_ = true;
  const auto got = send(bh::verb::post, "/v1/increments", one);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].result_int(), 202u) << got[0].body();
  EXPECT_EQ(backend_.added_.size(), 1u);
  // Readiness says it is going away, so load balancers send the next ones elsewhere.
  EXPECT_EQ(send(bh::verb::get, "/readyz").at(0).result_int(), 503u);
}

TEST_F(Router, FlushAndRollupReportTheirCountOrTheirError) {
  send(bh::verb::post, "/v1/flush");
  backend_.flush_done_(backend_result::counted(12));
  EXPECT_EQ(answers().at(0).body(), R"({"flushed_rows": 12})");
  send(bh::verb::post, "/v1/rollup");
  backend_.rollup_done_({errc::unavailable, "no database"});
  EXPECT_EQ(answers().at(0).result_int(), 503u);
  EXPECT_NE(answers()[0].body().find("rollup failed: no database"), std::string::npos);
}

TEST_F(Router, ReadinessFollowsTheBackend) {
  EXPECT_EQ(send(bh::verb::get, "/readyz").at(0).result_int(), 200u);
  backend_.ready_ = false;
  EXPECT_EQ(send(bh::verb::get, "/readyz").at(0).result_int(), 503u);
  backend_.draining_ = true;
  EXPECT_NE(send(bh::verb::get, "/readyz").at(0).body().find("draining"), std::string::npos);
  // (Increments read while draining are applied: AnIncrementReadWhileDrainingIsApplied.)
}

// Type 3 keeps day buckets; type 4 is declared without buckets.
class SeriesRouter : public Router {
 protected:
  static config::daemon_config with_buckets() {
    config::daemon_config cfg;
    cfg.counters = {
        {"downloads", 3, std::nullopt, {{store::granularity::day, std::chrono::hours(24 * 400)}}},
        {"views", 4, std::nullopt, {}}};
    return cfg;
  }
  config::daemon_config series_cfg_ = with_buckets();
  router series_router_{series_cfg_, backend_, metrics_, limits_};

  std::vector<response> get(std::string target) {
    return send_to(series_router_, request{bh::verb::get, target, 11});
  }
};

TEST_F(SeriesRouter, ASeriesReadAsksForWholeBucketsAndPrintsThePoints) {
  // From mid-day: the first bucket is the next day's (buckets that start in the range).
  EXPECT_TRUE(get("/v1/counters/downloads/9/series?granularity=day&from=86401&to=259200").empty());
  EXPECT_EQ(backend_.read_key_.record_type, 3u);
  EXPECT_EQ(backend_.read_key_.record_id, 9u);
  EXPECT_EQ(backend_.series_.g, store::granularity::day);
  EXPECT_EQ(backend_.series_.from, 172800);
  EXPECT_EQ(backend_.series_.to, 259200);
  backend_result r;
  r.points = {{172800, 5}, {259200, static_cast<__int128>(INT64_MAX) + 1}};
  backend_.read_done_(r);
  ASSERT_EQ(answers().size(), 1u);
  EXPECT_EQ(answers()[0].result_int(), 200u);
  EXPECT_EQ(answers()[0].body(),
            R"({"granularity": "day", "points": [{"bucket": 172800, "count": 5}, )"
            R"({"bucket": 259200, "count": 9223372036854775808}]})");
  get("/v1/counters/3/9/series?granularity=day&from=0&to=86400");
  backend_.read_done_({errc::unavailable, "the counter is being written; retry"});
  EXPECT_EQ(answers().at(0).result_int(), 503u);
  // No bucket starts in the range: nothing to read.
  const auto empty = get("/v1/counters/3/9/series?granularity=day&from=1&to=86399");
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_EQ(empty[0].body(), R"({"granularity": "day", "points": []})");
}

TEST_F(SeriesRouter, BadSeriesParametersAre400WithAReason) {
  const auto reason = [&](const std::string& target) {
    const auto got = get(target);
    EXPECT_EQ(got.size(), 1u) << target;
    if (got.empty()) return std::string();
    EXPECT_EQ(got[0].result_int(), 400u) << target;
    return got[0].body();
  };
  const std::string base = "/v1/counters/3/9/series";
  EXPECT_NE(reason(base).find("granularity, from and to are required"), std::string::npos);
  EXPECT_NE(reason(base + "?granularity=week&from=0&to=1").find("hour or day"), std::string::npos);
  EXPECT_NE(reason(base + "?granularity=day&from=-1&to=1").find("unix seconds"), std::string::npos);
  EXPECT_NE(reason(base + "?granularity=day&from=x&to=1").find("unix seconds"), std::string::npos);
  EXPECT_NE(reason(base + "?granularity=day&from=5&to=1").find("must not be after"),
            std::string::npos);
  EXPECT_NE(reason(base + "?granularity=day&from=0&to=1&from=2").find("given twice"),
            std::string::npos);
  EXPECT_NE(reason(base + "?granularity=day&from=0&to=1&limit=2").find("unknown query"),
            std::string::npos);
  // One request cannot ask for a million points.
  EXPECT_NE(reason(base + "?granularity=day&from=0&to=" + std::to_string(86400 * 1000))
                .find("more than 1000 day buckets"),
            std::string::npos);
  EXPECT_TRUE(get(base + "?granularity=day&from=0&to=" + std::to_string(86400 * 999)).empty());
  // A counter without such buckets, an undeclared one.
  EXPECT_NE(reason(base + "?granularity=hour&from=0&to=1").find("keeps no hour buckets"),
            std::string::npos);
  EXPECT_NE(reason("/v1/counters/4/9/series?granularity=day&from=0&to=1").find("keeps no day"),
            std::string::npos);
  EXPECT_NE(reason("/v1/counters/5/9/series?granularity=day&from=0&to=1").find("not declared"),
            std::string::npos);
}

// Issue 21 item 3: a DELETE of a counter's series reset the whole counter (the path
// matched the counter's, the suffix only chose the GET handler). The series is
// read-only: every other method is a 405 naming GET and HEAD, and only the counter's own
// path reaches the reset.
TEST_F(SeriesRouter, OnlyTheCountersOwnPathReachesTheReset) {
  for (const auto verb : {bh::verb::delete_, bh::verb::post, bh::verb::put}) {
    const auto got =
        send_to(series_router_, request{verb, "/v1/counters/downloads/9/series?x=1", 11});
    ASSERT_EQ(got.size(), 1u) << verb;
    EXPECT_EQ(got[0].result_int(), 405u) << verb;
    EXPECT_EQ(got[0][bh::field::allow], "GET, HEAD") << verb;
  }
  EXPECT_FALSE(backend_.reset_done_) << "the series DELETE reached the reset";
  // Paths that only look like the counter's are 404s, for DELETE as for GET.
  for (const auto* target : {"/v1/counters/3/9/series/", "/v1/counters/3/9/series/series",
                             "/v1/counters/3/9/", "/v1/counters/3/series", "/v1/counters/3/9/x"}) {
    const auto got = send_to(series_router_, request{bh::verb::delete_, target, 11});
    ASSERT_EQ(got.size(), 1u) << target;
    EXPECT_EQ(got[0].result_int(), 404u) << target;
  }
  EXPECT_FALSE(backend_.reset_done_);
  // The counter's own path still resets it, and names DELETE among its methods.
  EXPECT_TRUE(send_to(series_router_, request{bh::verb::delete_, "/v1/counters/3/9", 11}).empty());
  EXPECT_EQ(backend_.reset_key_.record_id, 9u);
  EXPECT_EQ(send_to(series_router_, request{bh::verb::put, "/v1/counters/3/9", 11})
                .at(0)[bh::field::allow],
            "GET, HEAD, DELETE");
}

// A keyed request whose `at` the router refuses (older than the retention of type 3's
// day buckets here): its key is looked up first (README: HTTP API, Idempotency-Key), and
// only a key the backend does not know gets the 400. Without the header the 400 comes at
// once, without asking the backend anything.
class KeyedRouter : public SeriesRouter {
 protected:
  std::vector<response> post(const std::string& body, const std::string& key) {
    request req{bh::verb::post, "/v1/increments", 11};
    req.set(bh::field::content_type, "application/json");
    if (!key.empty()) req.set("Idempotency-Key", key);
    req.body() = body;
    req.prepare_payload();
    auto answers = std::make_shared<std::vector<response>>();
    series_router_.handle(std::move(req),
                          [answers](response&& res) { answers->push_back(std::move(res)); });
    last_ = answers;
    return *answers;
  }
  // 401 days ago: past the 400-day retention.
  const std::string aged_ = R"({"record_type": 3, "record_id": 9, "at": )" +
                            std::to_string(std::time(nullptr) - 401 * 86400) + "}";
};

TEST_F(KeyedRouter, AnAtTheRouterRefusesIsAReplayWhenTheKeyWasAccepted) {
  EXPECT_TRUE(post(aged_, "k1").empty()) << "answered before the key was looked up";
  ASSERT_EQ(backend_.found_.size(), 1u);
  EXPECT_EQ(backend_.found_[0].first, "k1");
  // The hash of the increments as sent: the one the first, accepted copy was stored with.
  std::vector<ingest::increment> sent;
  ASSERT_FALSE(ingest::parse_increments(aged_, ingest::body_format::json,
                                        ingest::type_registry({}, true), 10, sent));
  EXPECT_EQ(backend_.found_[0].second, idempotency::hash_of(sent));
  EXPECT_TRUE(backend_.keyed_.empty());  // nothing admitted
  backend_result replay;
  replay.replayed = true;
  replay.count = 1;
  std::thread db_thread([&] { backend_.find_done_(replay); });
  db_thread.join();
  ASSERT_EQ(answers().size(), 1u);
  EXPECT_EQ(answers()[0].result_int(), 202u);
  EXPECT_EQ(answers()[0]["Idempotent-Replayed"], "true");
  EXPECT_EQ(answers()[0].body(), R"({"accepted": 1})");

  post(aged_, "k1");
  backend_.find_done_({errc::conflict});
  EXPECT_EQ(answers().at(0).result_int(), 422u);
  post(aged_, "k1");
  backend_.find_done_({errc::unavailable, "the database is not reachable"});
  EXPECT_EQ(answers().at(0).result_int(), 503u);
  EXPECT_FALSE(answers()[0][bh::field::retry_after].empty());
  // Not known: the request's own 400.
  post(aged_, "k2");
  backend_.find_done_({});
  ASSERT_EQ(answers().size(), 1u);
  EXPECT_EQ(answers()[0].result_int(), 400u);
  EXPECT_NE(answers()[0].body().find("older than the longest retention"), std::string::npos);
  EXPECT_NE(answers()[0].body().find("\"index\": 0"), std::string::npos);
  EXPECT_TRUE(backend_.keyed_.empty());
  EXPECT_TRUE(backend_.added_.empty());
}

TEST_F(KeyedRouter, WithoutAKeyAnAtTheRouterRefusesIs400AtOnce) {
  const auto got = post(aged_, "");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].result_int(), 400u);
  EXPECT_TRUE(backend_.found_.empty());
  // An `at` more than 5 minutes ahead is refused the same way, and looked up with a key.
  const std::string ahead = R"({"record_type": 3, "record_id": 9, "at": )" +
                            std::to_string(std::time(nullptr) + 3600) + "}";
  EXPECT_EQ(post(ahead, "").at(0).result_int(), 400u);
  EXPECT_TRUE(post(ahead, "k3").empty());
  EXPECT_EQ(backend_.found_.size(), 1u);
}

}  // namespace
}  // namespace slotted::http

namespace slotted::http {
namespace {

// The endpoint table (router.cpp) decides path, method and route for every request:
// a 404 for a path no row has, a 405 naming every method of the path's rows (HEAD with
// GET), and the route a request is counted under. A row lost, or methods gathered
// wrongly, changes one of these.
TEST_F(Router, TheEndpointTableDecidesPathMethodAndRoute) {
  struct expectation {
    bh::verb verb;
    const char* target;
    unsigned code;
    const char* allow;  // for a 405
  };
  const expectation cases[] = {
      {bh::verb::get, "/v1/increments", 405, "POST"},
      {bh::verb::get, "/v1/flush", 405, "POST"},
      {bh::verb::put, "/v1/rollup", 405, "POST"},
      {bh::verb::post, "/metrics", 405, "GET, HEAD"},
      {bh::verb::post, "/healthz?x=1", 405, "GET, HEAD"},
      {bh::verb::delete_, "/readyz", 405, "GET, HEAD"},
      {bh::verb::post, "/v1/counters/3/9", 405, "GET, HEAD, DELETE"},
      {bh::verb::delete_, "/v1/counters/3/9/series", 405, "GET, HEAD"},
      // The many-counter read's path: a DELETE without a record_id resets nothing
      // (docs/http-api.md, Many counters and top-N).
      {bh::verb::delete_, "/v1/counters/3", 405, "GET, HEAD"},
      {bh::verb::get, "/healthz", 200, ""},
      {bh::verb::head, "/healthz", 200, ""},
      {bh::verb::head, "/readyz", 200, ""},
      {bh::verb::get, "/", 404, ""},
      {bh::verb::get, "/v1/increments/x", 404, ""},
      {bh::verb::get, "/healthz/", 404, ""},
      {bh::verb::get, "/v1/top/3/9", 404, ""},
      {bh::verb::get, "/v1/counters//9", 404, ""},
      {bh::verb::get, "/v1/counters/3/series", 404, ""},
      {bh::verb::get, "/v1/counters/3/9/series/x", 404, ""},
  };
  for (const auto& c : cases) {
    const auto got = send(c.verb, c.target);
    ASSERT_EQ(got.size(), 1u) << c.verb << " " << c.target;
    EXPECT_EQ(got[0].result_int(), c.code) << c.verb << " " << c.target;
    EXPECT_EQ(got[0][bh::field::allow], c.allow) << c.verb << " " << c.target;
  }
  // Each request counted under its row's route; the 405 of a path under its first row's.
  const auto text = metrics_text();
  for (const auto* counted :
       {R"(slotted_counterd_http_requests_total{code="405",route="increments"} 1)",
        R"(slotted_counterd_http_requests_total{code="405",route="counters"} 2)",
        R"(slotted_counterd_http_requests_total{code="200",route="healthz"} 2)",
        R"(slotted_counterd_http_requests_total{code="404",route="not_found"} 7)"}) {
    EXPECT_NE(text.find(counted), std::string::npos) << counted;
  }
  // A DELETE of the counter's own path is the reset row's.
  EXPECT_TRUE(send(bh::verb::delete_, "/v1/counters/3/9").empty());
  backend_.reset_done_({errc::unavailable, "gone"});
  EXPECT_NE(
      metrics_text().find(R"(slotted_counterd_http_requests_total{code="503",route="reset"} 1)"),
      std::string::npos);
}

// The daemon's expected failures are one error category, and router::failure_response
// the one place they become a status (and a Retry-After for those a retry cures).
TEST(BackendErrors, EachFailureHasOneStatusAndRetryAfter) {
  struct expectation {
    errc e;
    unsigned code;
    const char* retry_after;
    const char* text;
  };
  const expectation cases[] = {
      {errc::over_limit, 503, "5", "flush.max_pending_keys"},
      {errc::out_of_range, 422, "", "2^62"},
      {errc::unavailable, 503, "5", "retry later"},
      {errc::conflict, 422, "", "Idempotency-Key"},
      {errc::draining, 503, "1", "shutting down"},
      {errc::not_exact_yet, 503, "5", "being written; retry"},
      {errc::retry_later, 503, "5", "retry later"},
      {errc::outcome_unknown, 503, "5", "outcome is unknown"},
      {errc::database_unavailable, 503, "5", "database is not reachable"},
      {errc::wal_write_failed, 503, "5", "write-ahead log cannot be written"},
      {errc::wal_sync_failed, 503, "5", "write-ahead log cannot be synced"},
      {errc::deadline_passed, 503, "5", "shutdown deadline passed"},
      {errc::read_timed_out, 503, "5", "the read took too long"},
      {errc::too_costly, 422, "", "would cost too much"},
      {errc::invalid_input, 400, "", "not valid"},
  };
  // Every code has a case: a new code without a status fails here.
  EXPECT_EQ(std::size(cases), static_cast<std::size_t>(last_errc));
  for (const auto& c : cases) {
    const std::error_code e = c.e;
    EXPECT_EQ(&e.category(), &slotted_category());
    EXPECT_STREQ(e.category().name(), "slotted");
    const auto res = router::failure_response(11, e);
    EXPECT_EQ(res.result_int(), c.code) << e.message();
    EXPECT_EQ(res[bh::field::retry_after], c.retry_after) << e.message();
    EXPECT_NE(res.body().find(c.text), std::string::npos) << res.body();
    // The caller's message replaces the code's own text; the status stays.
    const auto told = router::failure_response(11, e, "flush failed: x");
    EXPECT_EQ(told.result_int(), c.code);
    EXPECT_EQ(told.body(), R"({"error": "flush failed: x"})");
  }
  // A code of another category, or one this category does not know, is not an expected
  // failure: a 500.
  EXPECT_EQ(router::failure_response(11, std::make_error_code(std::errc::io_error)).result_int(),
            500u);
  const std::error_code unknown(static_cast<int>(last_errc) + 1, slotted_category());
  EXPECT_EQ(router::failure_response(11, unknown).result_int(), 500u);
  // A backend_result's failure is its code: none for done and for a replay.
  backend_result replayed;
  replayed.replayed = true;
  EXPECT_FALSE(replayed.failure());
  EXPECT_EQ((backend_result{errc::wal_sync_failed, "x"}.failure()), errc::wal_sync_failed);
}

}  // namespace
}  // namespace slotted::http
