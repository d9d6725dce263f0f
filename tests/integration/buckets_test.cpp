// Counts per bucket (README: HTTP API, Counts per bucket) against a real MariaDB: UTC
// hour and day boundaries, `at` validation, totals equal to the sum of their buckets,
// the tables --migrate creates (and what the daemon says without them), and SIGKILL
// with the WAL keeping bucket counts exact.

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <thread>

#include "app/application.hpp"
#include "retention/pruner.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/fault_proxy.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"
#include "support/unix_now.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// The "count" values of a series answer, in order.
std::vector<std::int64_t> counts_of(const std::string& body) {
  std::vector<std::int64_t> out;
  for (std::size_t pos = body.find("\"count\": "); pos != std::string::npos;
       pos = body.find("\"count\": ", pos)) {
    pos += 9;
    out.push_back(std::stoll(body.substr(pos)));
  }
  return out;
}

class Buckets : public ::testing::Test {
 protected:
  // MariaDB here (the tests that write MariaDB's SQL themselves); each engine in
  // BucketsOnEngines.
  virtual db::engine engine() const { return db::engine::mariadb; }
  db_server& server() const { return shared_server(engine()); }

  void SetUp() override {
    database_ = server().create_database();
    root_ = make_temp_dir("buckets-test");
  }
  void TearDown() override { fs::remove_all(root_); }

  // Type 123 keeps hour and day buckets, type 7 none. A long flush interval: the test
  // flushes when it asks.
  std::string yaml(const std::string& buckets = "{hour: 48h, day: 400d}") const {
    return daemon_yaml(server(), database_,
                       "instance_id: buckets-test\n"
                       "counters:\n"
                       "  - {name: repo_downloads, record_type: 123, buckets: " +
                           buckets +
                           "}\n"
                           "  - {name: page_views, record_type: 7}\n"
                           "flush: {interval: 1h}\n"
                           "wal: {dir: " +
                           root_ + "/wal, fsync: always}\n");
  }

  void run_migrate() const {
    std::string out;
    ASSERT_EQ(run_binary(yaml(), "--migrate", out), 0) << out;
  }
  // The schema, and a connection for a test that writes its rows itself.
  db::connection migrated_connection() const {
    run_migrate();
    return server().connect(database_);
  }
  // One call of the pruner's chunked delete on counter 123's `g` buckets, kept for
  // `retention`, at unix time `now`.
  static std::uint64_t prune_123(db::connection& conn, store::granularity g,
                                 std::chrono::seconds retention, std::int64_t now,
                                 std::size_t chunk, int max_chunks, bool& behind) {
    store::bucket_spec spec;
    spec.declare(123, g, retention);
    return retention::prune_counter(conn, "slotted_counters", *spec.find(123), g, now, chunk,
                                    max_chunks, behind);
  }

  std::int64_t query(const std::string& sql) const { return server().query_int(database_, sql); }
  std::int64_t total(std::uint64_t id) const {
    return query(
        "SELECT COALESCE(SUM(count), 0) FROM slotted_counters "
        "WHERE record_type = 123 AND record_id = " +
        std::to_string(id));
  }
  // SUM(count) of one bucket, named by its SQL value ('2026-01-01 00:00:00').
  std::int64_t bucket(const std::string& table, std::uint64_t id, const std::string& value) const {
    return query("SELECT COALESCE(SUM(count), 0) FROM " + table +
                 " WHERE record_type = 123 AND record_id = " + std::to_string(id) +
                 " AND bucket = '" + value + "'");
  }
  std::int64_t bucket_sum(const std::string& table, std::uint64_t id) const {
    return query("SELECT COALESCE(SUM(count), 0) FROM " + table +
                 " WHERE record_type = 123 AND record_id = " + std::to_string(id));
  }

  std::string database_, root_;
};

// The tests whose outcome is the database's and whose own SQL both engines read.
class BucketsOnEngines : public Buckets, public ::testing::WithParamInterface<db::engine> {
 protected:
  db::engine engine() const override { return GetParam(); }
};

// An hour boundary and a day boundary in UTC, a few minutes back: the last second of
// one bucket and the first of the next land in different rows.
TEST_F(Buckets, HourAndDayBoundariesAreUtcAndTotalsEqualTheSumOfBuckets) {
  run_migrate();
  daemon_process d(yaml());
  ASSERT_EQ(d.settle(), 200u);
  http_client c(d.port());
  // The latest UTC midnight at least 70 minutes back (inside 48h): the items reach an
  // hour past it, and all of them must be at least 10 minutes old whatever the time of
  // day (with "10 minutes back" the test failed from 00:10 to 00:55 UTC, its last items
  // being ahead of the clock).
  const std::int64_t now = unix_now();
  const std::int64_t midnight = (now - 3600 - 600) / 86400 * 86400;
  auto r = c.request("POST", "/v1/increments",
                     "{\"record_type\": 123, \"record_id\": 5, \"delta\": 2, \"at\": " +
                         std::to_string(midnight - 1) +
                         "}\n"
                         "{\"record_type\": \"repo_downloads\", \"record_id\": 5, \"at\": " +
                         std::to_string(midnight) +
                         "}\n"
                         "{\"record_type\": 123, \"record_id\": 5, \"delta\": 4, \"at\": " +
                         std::to_string(midnight + 3599) +
                         "}\n"
                         "{\"record_type\": 123, \"record_id\": 5, \"delta\": 8, \"at\": " +
                         std::to_string(midnight + 3600) + "}\n",
                     "application/x-ndjson");
  ASSERT_EQ(r.status, 202u) << r.body;
  ASSERT_TRUE(flush_until_ok(c));
  const std::string today = shared_mariadb()
                                .connect(database_)
                                .query("SELECT DATE_FORMAT('1970-01-01' + INTERVAL " +
                                       std::to_string(midnight / 86400) + " DAY, '%Y-%m-%d')")[0][0]
                                .value_or("");
  const std::string yesterday =
      shared_mariadb()
          .connect(database_)
          .query("SELECT DATE_FORMAT('1970-01-01' + INTERVAL " +
                 std::to_string(midnight / 86400 - 1) + " DAY, '%Y-%m-%d')")[0][0]
          .value_or("");
  EXPECT_EQ(total(5), 15);
  EXPECT_EQ(bucket("slotted_counters_day", 5, yesterday), 2);
  EXPECT_EQ(bucket("slotted_counters_day", 5, today), 13);
  EXPECT_EQ(bucket("slotted_counters_hour", 5, yesterday + " 23:00:00"), 2);
  EXPECT_EQ(bucket("slotted_counters_hour", 5, today + " 00:00:00"), 5);
  EXPECT_EQ(bucket("slotted_counters_hour", 5, today + " 01:00:00"), 8);
  // Totals equal the sum of the buckets, per granularity.
  EXPECT_EQ(bucket_sum("slotted_counters_hour", 5), total(5));
  EXPECT_EQ(bucket_sum("slotted_counters_day", 5), total(5));
  // Without `at`: the receive time's buckets.
  const std::int64_t before = unix_now();
  ASSERT_EQ(c.post_json("/v1/increments", "{\"record_type\": 123, \"record_id\": 6}").status, 202u);
  const std::int64_t after = unix_now();
  ASSERT_TRUE(flush_until_ok(c));
  const auto hour_of = query(
      "SELECT TIMESTAMPDIFF(SECOND, '1970-01-01 00:00:00', bucket) FROM slotted_counters_hour "
      "WHERE record_type = 123 AND record_id = 6");
  EXPECT_TRUE(hour_of == before / 3600 * 3600 || hour_of == after / 3600 * 3600) << hour_of;
  EXPECT_EQ(bucket_sum("slotted_counters_day", 6), 1);
}

TEST_P(BucketsOnEngines, AtIsValidatedAndABadOneAppliesNothing) {
  run_migrate();
  daemon_process d(yaml("{hour: 2h, day: 3d}"));
  ASSERT_EQ(d.settle(), 200u);
  http_client c(d.port());
  const std::int64_t now = unix_now();
  const auto post = [&](const std::string& second_at) {
    return c.request("POST", "/v1/increments",
                     "[{\"record_type\": 123, \"record_id\": 1, \"delta\": 1},"
                     " {\"record_type\": 123, \"record_id\": 2, \"at\": " +
                         second_at + "}]",
                     "application/json");
  };
  // Older than the longest retention (3 days).
  auto r = post(std::to_string(now - 3 * 86400 - 120));
  EXPECT_EQ(r.status, 400u);
  EXPECT_NE(r.body.find("older than the longest retention"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\"index\": 1"), std::string::npos) << r.body;
  // More than 5 minutes ahead.
  r = post(std::to_string(now + 400));
  EXPECT_EQ(r.status, 400u);
  EXPECT_NE(r.body.find("in the future"), std::string::npos) << r.body;
  // Not an integer.
  for (const char* bad : {"1.5", "\"1700000000\"", "-1", "1e9", "null"}) {
    r = post(bad);
    EXPECT_EQ(r.status, 400u) << bad;
    EXPECT_NE(r.body.find("\\\"at\\\""), std::string::npos) << bad << ": " << r.body;
  }
  // Within the retention, and a little ahead: accepted.
  EXPECT_EQ(post(std::to_string(now - 2 * 86400)).status, 202u);
  EXPECT_EQ(post(std::to_string(now + 200)).status, 202u);
  // A counter without buckets: any integer is fine and changes nothing.
  EXPECT_EQ(
      c.post_json("/v1/increments", "{\"record_type\": 7, \"record_id\": 1, \"at\": 5}").status,
      202u);
  EXPECT_EQ(
      c.post_json("/v1/increments", "{\"record_type\": 7, \"record_id\": 1, \"at\": 5.5}").status,
      400u);
  ASSERT_TRUE(flush_until_ok(c));
  // Only the two accepted requests: none of the refused ones applied anything.
  EXPECT_EQ(total(1), 2);
  EXPECT_EQ(total(2), 2);
  EXPECT_EQ(bucket_sum("slotted_counters_day", 1), 2);
  EXPECT_EQ(bucket_sum("slotted_counters_day", 2), 2);
  EXPECT_EQ(query("SELECT COUNT(*) FROM slotted_counters_hour WHERE record_type = 7"), 0);
  EXPECT_EQ(query("SELECT COUNT(*) FROM slotted_counters_day WHERE record_type = 7"), 0);
  EXPECT_EQ(query("SELECT SUM(count) FROM slotted_counters WHERE record_type = 7"), 1);
}

// Acknowledged increments only the WAL holds come back after SIGKILL in their buckets,
// exactly: as pending increments, and as a logged batch that had not committed.
TEST_F(Buckets, SigkillAndWalReplayKeepBucketCountsExact) {
  run_migrate();
  const std::int64_t now = unix_now();
  const std::int64_t an_hour_ago = now - 3600, yesterday = now - 86400;
  {
    daemon_process d(yaml());
    ASSERT_EQ(d.settle(), 200u);
    http_client c(d.port());
    for (int i = 0; i < 20; ++i) {
      const std::int64_t at = i % 2 == 0 ? an_hour_ago : yesterday;
      ASSERT_EQ(c.request("POST", "/v1/increments",
                          "{\"record_type\": 123, \"record_id\": 9, \"delta\": " +
                              std::to_string(i + 1) + ", \"at\": " + std::to_string(at) + "}",
                          "application/x-ndjson")
                    .status,
                202u);
    }
    // Keyed requests carry their `at` through the WAL too.
    ASSERT_EQ(c.request("POST", "/v1/increments",
                        "{\"record_type\": 123, \"record_id\": 9, \"delta\": 1000, \"at\": " +
                            std::to_string(yesterday) + "}",
                        "application/json", {{"Idempotency-Key", "bucket-kill-1"}})
                  .status,
              202u);
    d.signal(SIGKILL);
    EXPECT_EQ(d.wait(10s), -SIGKILL);
  }
  EXPECT_EQ(total(9), 0);  // nothing was flushed before the kill
  daemon_process d(yaml());
  http_client c(d.port());
  ASSERT_TRUE(flush_until_ok(c));
  const std::int64_t odd = 2 + 4 + 6 + 8 + 10 + 12 + 14 + 16 + 18 + 20;  // i odd: yesterday
  const std::int64_t even = 1 + 3 + 5 + 7 + 9 + 11 + 13 + 15 + 17 + 19;  // an hour ago
  EXPECT_EQ(total(9), odd + even + 1000);
  EXPECT_EQ(bucket_sum("slotted_counters_hour", 9), odd + even + 1000);
  EXPECT_EQ(bucket_sum("slotted_counters_day", 9), odd + even + 1000);
  EXPECT_EQ(query("SELECT CAST(SUM(count) AS SIGNED) FROM slotted_counters_hour WHERE "
                  "record_type = 123 AND record_id = 9 AND bucket = '1970-01-01' + INTERVAL " +
                  std::to_string(an_hour_ago / 3600) + " HOUR"),
            even);
  EXPECT_EQ(query("SELECT CAST(SUM(count) AS SIGNED) FROM slotted_counters_hour WHERE "
                  "record_type = 123 AND record_id = 9 AND bucket = '1970-01-01' + INTERVAL " +
                  std::to_string(yesterday / 3600) + " HOUR"),
            odd + 1000);
}

// A reset (README: HTTP API, Reset) clears a counter's buckets with its total, flushed
// and pending: afterwards the total and every bucket start again from zero and still
// agree, and another counter's buckets are untouched.
TEST_P(BucketsOnEngines, AResetClearsTheCountersBucketsWithItsTotal) {
  run_migrate();
  daemon_process d(yaml());
  ASSERT_EQ(d.settle(), 200u);
  http_client c(d.port());
  const std::int64_t an_hour_ago = unix_now() - 3600;
  const auto post = [&](std::uint64_t id, int delta) {
    return c
        .request("POST", "/v1/increments",
                 "{\"record_type\": 123, \"record_id\": " + std::to_string(id) + ", \"delta\": " +
                     std::to_string(delta) + ", \"at\": " + std::to_string(an_hour_ago) + "}",
                 "application/json")
        .status;
  };
  ASSERT_EQ(post(11, 3), 202u);
  ASSERT_EQ(post(12, 5), 202u);
  ASSERT_TRUE(flush_until_ok(c));
  ASSERT_EQ(post(11, 4), 202u);  // pending at the reset
  const auto reset = c.request("DELETE", "/v1/counters/123/11");
  ASSERT_EQ(reset.status, 200u) << reset.body;
  EXPECT_EQ(json_int(reset.body, "cleared"), 7);
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(total(11), 0);
  EXPECT_EQ(bucket_sum("slotted_counters_hour", 11), 0);
  EXPECT_EQ(bucket_sum("slotted_counters_day", 11), 0);
  const std::string series =
      "/v1/counters/123/11/series?granularity=hour&from=" + std::to_string(an_hour_ago - 3600) +
      "&to=" + std::to_string(an_hour_ago + 3600);
  EXPECT_TRUE(counts_of(c.get(series).body).empty()) << c.get(series).body;
  // After the reset it counts again, totals and buckets alike; the other is untouched.
  ASSERT_EQ(post(11, 2), 202u);
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(total(11), 2);
  EXPECT_EQ(bucket_sum("slotted_counters_hour", 11), 2);
  EXPECT_EQ(bucket_sum("slotted_counters_day", 11), 2);
  EXPECT_EQ(counts_of(c.get(series).body), std::vector<std::int64_t>{2});
  EXPECT_EQ(total(12), 5);
  EXPECT_EQ(bucket_sum("slotted_counters_hour", 12), 5);
  EXPECT_EQ(bucket_sum("slotted_counters_day", 12), 5);
}

// A bucket whose slots add up past 2^63 - 1 is printed exactly, not capped.
TEST_P(BucketsOnEngines, ASeriesPointPastInt64IsPrintedExactly) {
  auto conn = migrated_connection();
  const std::int64_t hour = (unix_now() - 3600) / 3600 * 3600;
  conn.execute(
      "INSERT INTO slotted_counters_hour (record_type, record_id, bucket, slot, count) "
      "VALUES (123, 5, " +
      db::bucket_literal(store::granularity::hour, hour) + ", 0, 9000000000000000000), (123, 5, " +
      db::bucket_literal(store::granularity::hour, hour) + ", 1, 9000000000000000000)");
  daemon_process d(yaml());
  http_client c(d.port());
  const auto series =
      c.get("/v1/counters/123/5/series?granularity=hour&from=" + std::to_string(hour) +
            "&to=" + std::to_string(hour));
  ASSERT_EQ(series.status, 200u) << series.body;
  EXPECT_NE(series.body.find("\"count\": 18000000000000000000}"), std::string::npos) << series.body;
}

// An existing deployment that declares buckets before its --migrate: the daemon says
// which table is missing and what creates it, and flushes once it exists.
TEST_F(Buckets, MissingBucketTablesAreNamedAndMigrateCreatesThem) {
  migrate(shared_mariadb(), database_);  // the tables of a version without buckets
  std::string out;
  EXPECT_EQ(run_binary(yaml(), "--check-config", out), 2) << out;
  EXPECT_NE(out.find("slotted_counters_hour` does not exist"), std::string::npos) << out;
  EXPECT_NE(out.find("--migrate"), std::string::npos) << out;
  run_migrate();
  EXPECT_EQ(run_binary(yaml(), "--check-config", out), 0) << out;
  EXPECT_EQ(
      query("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '" + database_ +
            "' AND TABLE_NAME = 'slotted_counters_day' AND COLUMN_NAME = 'bucket' AND "
            "DATA_TYPE = 'date'"),
      1);
  EXPECT_EQ(
      query("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '" + database_ +
            "' AND TABLE_NAME = 'slotted_counters_hour' AND COLUMN_NAME = 'bucket' AND "
            "DATA_TYPE = 'datetime'"),
      1);
}

// A bucket table that goes away while the daemon runs: the flush stops with an error
// naming it and --migrate (no total is written without its buckets), nothing is
// dropped, and once --migrate has run the next flush writes both, exactly.
TEST_P(BucketsOnEngines, ABucketTableDroppedWhileRunningStopsTheFlushUntilMigrate) {
  run_migrate();
  daemon_process d(yaml());
  ASSERT_EQ(d.settle(), 200u);
  http_client c(d.port());
  server().connect(database_).execute("DROP TABLE slotted_counters_day");
  ASSERT_EQ(c.post_json("/v1/increments", "{\"record_type\": 123, \"record_id\": 4, \"delta\": 7}")
                .status,
            202u);
  auto r = c.request("POST", "/v1/flush");
  EXPECT_EQ(r.status, 503u) << r.body;
  // The cycle after the failed write checks the schema and says what is missing.
  ASSERT_TRUE(eventually(
      [&] {
        c.request("POST", "/v1/flush");
        return d.log().find(
                   "slotted_counters_day` does not exist but counters[].buckets "
                   "needs it; run slotted-counterd --migrate") != std::string::npos;
      },
      30s))
      << d.log();
  EXPECT_EQ(c.get("/readyz").status, 503u);
  EXPECT_EQ(total(4), 0);
  EXPECT_EQ(bucket_sum("slotted_counters_hour", 4), 0);
  run_migrate();
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(total(4), 7);
  EXPECT_EQ(bucket_sum("slotted_counters_hour", 4), 7);
  EXPECT_EQ(bucket_sum("slotted_counters_day", 4), 7);
}

// Reads of a series while flushes commit every few milliseconds: every answer lies
// between what was acknowledged before it was asked and what was sent by its answer;
// a batch counted twice (in the table and still as pending) or not at all (between
// the two) falls outside.
TEST_P(BucketsOnEngines, SeriesReadsAreExactUnderConcurrentFlushes) {
  run_migrate();
  daemon_process d(daemon_yaml(server(), database_,
                               "counters:\n"
                               "  - {name: repo_downloads, record_type: 123, buckets: {hour: 48h, "
                               "day: 400d}}\n"
                               "flush: {interval: 10ms}\n"));
  const std::int64_t now = unix_now();
  const std::int64_t hour_a = (now - 7200) / 3600 * 3600, hour_b = hour_a + 3600;
  constexpr int requests = 2000;
  std::atomic<std::int64_t> sent{0}, acknowledged{0};
  std::atomic<bool> writer_done{false};
  std::thread writer([&] {
    http_client c(d.port());
    // Two items a request, one per hour: each hour's count is the requests acknowledged.
    for (int i = 0; i < requests; ++i) {
      sent.fetch_add(1);
      const auto r = c.request(
          "POST", "/v1/increments",
          "{\"record_type\": 123, \"record_id\": 1, \"at\": " + std::to_string(hour_a + 10) +
              "}\n{\"record_type\": 123, \"record_id\": 1, \"at\": " + std::to_string(hour_b + 10) +
              "}\n",
          "application/x-ndjson");
      if (r.status != 202) break;
      acknowledged.fetch_add(1);
    }
    writer_done = true;
  });
  http_client c(d.port());
  const std::string target =
      "/v1/counters/123/1/series?granularity=hour&from=" + std::to_string(hour_a) +
      "&to=" + std::to_string(hour_b);
  int mid_flight = 0;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (!writer_done && std::chrono::steady_clock::now() < deadline) {
    const std::int64_t low = acknowledged.load();
    const auto r = c.get(target);
    const std::int64_t high = sent.load();
    if (r.status == 503) continue;  // "being written; retry": allowed, never wrong
    ASSERT_EQ(r.status, 200u) << r.body;
    const auto counts = counts_of(r.body);
    // Both hours carry the same count (a bucket not flushed nor pending yet is absent).
    for (const auto n : counts) {
      ASSERT_GE(n, low) << r.body;
      ASSERT_LE(n, high) << r.body;
    }
    if (counts.size() < 2) {
      ASSERT_EQ(low, 0) << r.body;
    }
    if (low > 0 && low < requests) ++mid_flight;
  }
  writer.join();
  ASSERT_EQ(acknowledged.load(), requests);
  EXPECT_GT(mid_flight, 5) << "the reads did not overlap the writes";
  ASSERT_TRUE(flush_until_ok(c));
  const auto final_read = c.get(target);
  EXPECT_EQ(final_read.body,
            "{\"granularity\": \"hour\", \"points\": [{\"bucket\": " + std::to_string(hour_a) +
                ", \"count\": " + std::to_string(requests) + "}, {\"bucket\": " +
                std::to_string(hour_b) + ", \"count\": " + std::to_string(requests) + "}]}");
  // The two hours may fall on two days: the days sum to both.
  const auto days =
      counts_of(c.get("/v1/counters/repo_downloads/1/series?granularity=day&from=" +
                      std::to_string(hour_a / 86400 * 86400) + "&to=" + std::to_string(now))
                    .body);
  std::int64_t day_sum = 0;
  for (const auto n : days) day_sum += n;
  EXPECT_EQ(day_sum, 2 * requests);
  EXPECT_EQ(total(1), 2 * requests);
}

// Retention with a short one: the hour buckets older than 1 s go, by the pruning job,
// counted in the metric; the day buckets and another counter's hours stay.
TEST_P(BucketsOnEngines, RetentionPrunesOldBucketsPerCounterAndGranularity) {
  const std::string config =
      daemon_yaml(server(), database_,
                  "counters:\n"
                  "  - {name: short_hours, record_type: 123, buckets: {hour: 1s, day: 2d}}\n"
                  "  - {name: long_hours, record_type: 124, buckets: {hour: 48h}}\n"
                  "flush: {interval: 1h}\n");
  std::string out;
  ASSERT_EQ(run_binary(config, "--migrate", out), 0) << out;
  // A row of a type that declares no buckets (any more): nobody's to delete.
  server().connect(database_).execute(
      "INSERT INTO slotted_counters_hour VALUES (999, 1, '2001-01-01 00:00:00', 0, 5)");
  daemon_process d(config);
  ASSERT_EQ(d.settle(), 200u);
  http_client c(d.port());
  const std::int64_t two_hours_ago = unix_now() - 7200;
  for (const int type : {123, 124}) {
    ASSERT_EQ(c.request("POST", "/v1/increments",
                        "{\"record_type\": " + std::to_string(type) +
                            ", \"record_id\": 1, \"delta\": 3, \"at\": " +
                            std::to_string(two_hours_ago) + "}",
                        "application/x-ndjson")
                  .status,
              202u);
  }
  ASSERT_TRUE(flush_until_ok(c));
  const auto hours_of = [&](int type) {
    return query("SELECT COUNT(*) FROM slotted_counters_hour WHERE record_type = " +
                 std::to_string(type));
  };
  // Flushed, then pruned within a few of the pruner's 1 s periods.
  ASSERT_TRUE(eventually([&] { return hours_of(123) == 0; }, 30s));
  EXPECT_EQ(hours_of(124), 1);
  EXPECT_EQ(hours_of(999), 1);
  EXPECT_EQ(bucket_sum("slotted_counters_day", 1), 3);
  EXPECT_EQ(total(1), 3);
  EXPECT_GE(metric_value(c.get("/metrics").body, "slotted_counterd_buckets_pruned_total"), 1.0);
}

// The chunks: at most `chunk` rows a statement, `max_chunks` statements a call, and the
// caller told it was cut short.
TEST_F(Buckets, PruningDeletesInBoundedChunksOldestFirst) {
  auto conn = migrated_connection();
  for (int day = 1; day <= 5; ++day) {
    conn.execute("INSERT INTO slotted_counters_day VALUES (123, 1, '2020-01-0" +
                 std::to_string(day) + "', 0, 1)");
  }
  conn.execute("INSERT INTO slotted_counters_day VALUES (123, 1, '2020-02-01', 0, 1)");
  const std::int64_t now = 1580515200 + 3600;  // 2020-02-01 01:00 UTC: keeps 2020-01-31 on
  bool behind = false;
  EXPECT_EQ(prune_123(conn, store::granularity::day, 24h, now, 2, 2, behind), 4u);
  EXPECT_TRUE(behind);
  // The oldest went first.
  EXPECT_EQ(query("SELECT DATE_FORMAT(MIN(bucket), '%d') FROM slotted_counters_day"), 5);
  behind = false;
  EXPECT_EQ(prune_123(conn, store::granularity::day, 24h, now, 2, 2, behind), 1u);
  EXPECT_FALSE(behind);
  EXPECT_EQ(query("SELECT COUNT(*) FROM slotted_counters_day"), 1);
}

// A chunk of the pruner locks the rows it deletes, not the counter's current buckets: a
// flush's transaction holding a current row (here an UPDATE left open) must not stop
// it. With `DELETE ... WHERE record_type = ? AND bucket < ? ORDER BY bucket LIMIT n`
// MariaDB takes the primary key's `record_type` prefix (and a filesort) once the old
// rows are more than a few percent of the type's (a backlog after an outage, a shorter
// retention): it then reads and locks every row of the record type, the current ones
// too, for each chunk, and waits behind (or blocks) every flush of that type.
TEST_F(Buckets, APruneChunkLocksOnlyTheRowsItDeletes) {
  auto conn = migrated_connection();
  // 20 old hours (January 2020) and 20 current ones (ending 2020-03-01 00:00) of 500
  // counters each: half the type's rows are to be pruned.
  conn.execute(
      "INSERT INTO slotted_counters_hour SELECT 123, seq % 500, '2020-01-01 00:00:00' + "
      "INTERVAL (seq DIV 500) HOUR, 0, 1 FROM seq_0_to_9999");
  conn.execute(
      "INSERT INTO slotted_counters_hour SELECT 123, seq % 500, '2020-02-29 05:00:00' + "
      "INTERVAL (seq DIV 500) HOUR, 0, 1 FROM seq_0_to_9999");
  conn.execute("ANALYZE TABLE slotted_counters_hour");
  // A flush of a current row, not yet committed.
  auto flush = shared_mariadb().connect(database_);
  flush.execute("BEGIN");
  flush.execute(
      "UPDATE slotted_counters_hour SET count = count + 1 WHERE record_type = 123 AND "
      "record_id = 7 AND bucket = '2020-02-29 23:00:00' AND slot = 0");
  conn.execute("SET SESSION innodb_lock_wait_timeout = 2");
  const std::int64_t now = 1583020800;  // 2020-03-01 00:00 UTC
  bool behind = false;
  std::uint64_t deleted = 0;
  EXPECT_NO_THROW(deleted = prune_123(conn, store::granularity::hour, 48h, now, 4000, 10, behind));
  EXPECT_EQ(deleted, 10000u);
  EXPECT_FALSE(behind);
  flush.execute("COMMIT");
  EXPECT_EQ(query("SELECT COUNT(*) FROM slotted_counters_hour WHERE bucket < '2020-02-01'"), 0);
  EXPECT_EQ(query("SELECT COUNT(*) FROM slotted_counters_hour"), 10000);
  EXPECT_EQ(query("SELECT CAST(SUM(count) AS SIGNED) FROM slotted_counters_hour"), 10001);
}

// A clock stepped forward on the daemon's host must not delete buckets still inside
// their retention by the database's clock: the pruner cuts at the earlier of the two.
// (Before, a run cut at the local clock alone: a year's step with day: 400d deleted all
// but the last 35 days, for good.)
TEST_F(Buckets, APruneAfterTheHostClockJumpedForwardKeepsBucketsInsideTheRetention) {
  auto conn = migrated_connection();
  conn.execute(
      "INSERT INTO slotted_counters_day VALUES (123, 1, UTC_DATE() - INTERVAL 40 DAY, 0, 1), "
      "(123, 1, UTC_DATE() - INTERVAL 500 DAY, 0, 1)");
  metrics::registry metrics;
  db::pool pool(connect_options_for(test_config(shared_mariadb(), database_).mysql), 1);
  retention::settings s;
  s.table = "slotted_counters";
  s.buckets.declare(123, store::granularity::day, std::chrono::hours(24 * 400));
  // A short retention elsewhere: runs every second.
  s.buckets.declare(124, store::granularity::hour, std::chrono::seconds(4));
  s.clock = [] { return unix_now() + 365 * 86400; };
  retention::pruner p(s, pool, metrics);
  p.start();
  // A run happened: the bucket older than the retention by any clock is gone.
  const bool ran = eventually(
      [&] {
        return query(
                   "SELECT COUNT(*) FROM slotted_counters_day WHERE bucket < UTC_DATE() - "
                   "INTERVAL 400 DAY") == 0;
      },
      60s);
  p.stop();
  ASSERT_TRUE(ran);
  EXPECT_EQ(query("SELECT COUNT(*) FROM slotted_counters_day"), 1);
}

// A retry of an accepted keyed request is answered as the first time (README: HTTP API,
// Idempotency-Key), whatever the clock did meanwhile: the `at` it carries was checked
// when it was accepted. Once the first request's `at` has slipped past the retention, a
// new request with it is a 400, but the retry is looked up first: a replay (202,
// Idempotent-Replayed), or a 422 for another body, never a 400 "nothing of this request
// was applied" for a request that was applied. Here the instance's index knows the key.
TEST_P(BucketsOnEngines, AKeyedRetryIsAReplayAfterItsAtLeftTheRetention) {
  run_migrate();
  daemon_process d(yaml("{hour: 5s}"));
  ASSERT_EQ(d.settle(), 200u);
  http_client c(d.port());
  const std::int64_t now = unix_now();
  const std::string at = std::to_string(now - 3);
  const std::string body = "{\"record_type\": 123, \"record_id\": 31, \"at\": " + at + "}";
  const auto send = [&](const std::string& b) {
    return c.request("POST", "/v1/increments", b, "application/json",
                     {{"Idempotency-Key", "edge-of-retention-1"}});
  };
  const auto first = send(body);
  ASSERT_EQ(first.status, 202u) << first.body;
  // The `at` is now older than the 5 s retention (the daemon's now > at + 5).
  ASSERT_TRUE(eventually([&] { return unix_now() >= now + 4; }, 30s));
  const auto retry = send(body);
  EXPECT_EQ(retry.status, 202u) << retry.body;
  EXPECT_EQ(retry.body, "{\"accepted\": 1}");
  EXPECT_EQ(retry.headers.count("idempotent-replayed"), 1u) << retry.body;
  const auto other =
      send("{\"record_type\": 123, \"record_id\": 31, \"delta\": 2, \"at\": " + at + "}");
  EXPECT_EQ(other.status, 422u) << other.body;
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(total(31), 1);
}

// The same when the retry reaches another instance sharing the database, after the
// first one flushed: that instance's index has never seen the key, so the keys table
// answers (a replay, a 422 for another body). A key nobody accepted still gets the 400
// of its `at`, and a look-up the database does not answer is a 503 to retry, not a 400.
TEST_F(Buckets, AKeyedRetryReachingAnotherInstanceAfterItsAtLeftTheRetentionIsAReplay) {
  run_migrate();
  daemon_process a(yaml("{hour: 5s}"));
  ASSERT_EQ(a.settle(), 200u);
  // B reaches the database through a proxy that can cut the look-up's statement.
  fault_proxy proxy(shared_mariadb().port());
  auto cfg = test_config(server(), database_);
  cfg.instance_id = "buckets-test-b";
  cfg.mysql.socket.clear();
  cfg.mysql.host = "127.0.0.1";
  cfg.mysql.port = proxy.port();
  cfg.flush.interval = 1h;
  cfg.counters = {{"repo_downloads", 123, std::nullopt, {{store::granularity::hour, 5s}}}};
  in_process_daemon b(cfg);
  http_client ca(a.port()), cb(b.port());

  const std::int64_t now = unix_now();
  const std::string at = std::to_string(now - 3);
  const std::string body = "{\"record_type\": 123, \"record_id\": 32, \"at\": " + at + "}";
  const auto send = [&](http_client& c, const std::string& key, const std::string& b) {
    return c.request("POST", "/v1/increments", b, "application/json", {{"Idempotency-Key", key}});
  };
  const auto first = send(ca, "elsewhere-1", body);
  ASSERT_EQ(first.status, 202u) << first.body;
  ASSERT_TRUE(flush_until_ok(ca));
  ASSERT_EQ(query("SELECT COUNT(*) FROM slotted_counterd_idempotency_keys"), 1);
  ASSERT_TRUE(eventually([&] { return unix_now() >= now + 4; }, 30s));

  proxy.arm("SELECT `body_hash`", fault_proxy::cut::before_statement, 1);
  const auto cut = send(cb, "elsewhere-1", body);
  EXPECT_EQ(cut.status, 503u) << cut.body;
  EXPECT_EQ(cut.headers.count("retry-after"), 1u) << cut.body;
  EXPECT_EQ(proxy.cuts(), 1);

  const auto retry = send(cb, "elsewhere-1", body);
  EXPECT_EQ(retry.status, 202u) << retry.body;
  EXPECT_EQ(retry.body, "{\"accepted\": 1}");
  EXPECT_EQ(retry.headers.count("idempotent-replayed"), 1u) << retry.body;
  const auto minimal =
      cb.request("POST", "/v1/increments", body, "application/json",
                 {{"Idempotency-Key", "elsewhere-1"}, {"Prefer", "return=minimal"}});
  EXPECT_EQ(minimal.status, 204u) << minimal.body;
  EXPECT_EQ(minimal.headers.count("idempotent-replayed"), 1u);

  const auto other =
      send(cb, "elsewhere-1",
           "{\"record_type\": 123, \"record_id\": 32, \"delta\": 2, \"at\": " + at + "}");
  EXPECT_EQ(other.status, 422u) << other.body;
  const auto unknown = send(cb, "elsewhere-2", body);
  EXPECT_EQ(unknown.status, 400u) << unknown.body;
  EXPECT_NE(unknown.body.find("older than the longest retention"), std::string::npos)
      << unknown.body;

  EXPECT_EQ(metric_value(cb.get("/metrics").body, "slotted_counterd_idempotency_replays_total"),
            2.0);
  ASSERT_TRUE(flush_until_ok(cb));
  ASSERT_TRUE(flush_until_ok(ca));
  EXPECT_EQ(total(32), 1);
  EXPECT_EQ(query("SELECT COUNT(*) FROM slotted_counterd_idempotency_keys"), 1);
}

INSTANTIATE_ENGINES(BucketsOnEngines);

}  // namespace
}  // namespace slotted::test
