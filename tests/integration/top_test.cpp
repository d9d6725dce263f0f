// Issue 26 against a real MariaDB: many counters in one read equal to single reads
// (pending and persisted), and top-N (totals and day ranges) equal to the truth computed
// from the same events, through plain and keyed batches, a reset, and a second instance.

#include "db/top.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <regex>

#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"
#include "support/top_items.hpp"
#include "support/unix_now.hpp"

namespace slotted::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// The truth: largest first, ties by smaller id, `limit` of them, zeros left out.
ranking top_of(const std::map<std::uint64_t, std::int64_t>& sums, std::size_t limit) {
  ranking all;
  for (const auto& [id, c] : sums) {
    if (c != 0) all.emplace_back(id, c);
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  if (all.size() > limit) all.resize(limit);
  return all;
}

class ManyAndTop : public ::testing::Test {
 protected:
  // MariaDB here (the tests that write MariaDB's SQL themselves); each engine in
  // ManyAndTopOnEngines.
  virtual db::engine engine() const { return db::engine::mariadb; }
  db_server& server() const { return shared_server(engine()); }

  void SetUp() override {
    database_ = server().create_database();
    root_ = slotted::test::make_temp_dir("top-test");
  }
  void TearDown() override { fs::remove_all(root_); }

  // `counters`: the YAML list; by default downloads keeps day buckets and top-N totals.
  std::string yaml(
      const std::string& instance,
      const std::string& counters =
          "  - {name: downloads, record_type: 123, buckets: {day: 400d}, top: true}\n") const {
    return daemon_yaml(
        server(), database_,
        "instance_id: " + instance + "\ncounters:\n" + counters + "flush: {interval: 1h}\n");
  }
  std::int64_t totals_tables() const {
    return server().query_int(
        database_, engine() == db::engine::postgresql
                       ? "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = "
                         "current_schema() AND table_name LIKE '%totals%'"
                       : "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '" +
                             database_ + "' AND table_name LIKE '%totals%'");
  }
  void run_migrate() const {
    std::string out;
    ASSERT_EQ(run_binary(yaml("top-a"), "--migrate", out), 0) << out;
  }

  std::string database_, root_;
};

class ManyAndTopOnEngines : public ManyAndTop, public ::testing::WithParamInterface<db::engine> {
 protected:
  db::engine engine() const override { return GetParam(); }
};

TEST_P(ManyAndTopOnEngines, AManyCounterReadEqualsSingleReadsPendingAndPersisted) {
  run_migrate();
  daemon_process d(yaml("top-a"));
  ASSERT_EQ(d.settle(), 200u);
  http_client c(d.port());
  const auto post = [&](std::uint64_t id, int delta) {
    ASSERT_EQ(c.post_json("/v1/increments",
                          "{\"record_type\": 123, \"record_id\": " + std::to_string(id) +
                              ", \"delta\": " + std::to_string(delta) + "}")
                  .status,
              202u);
  };
  post(1, 3);
  post(2, 5);
  ASSERT_TRUE(flush_until_ok(c));
  post(1, 4);   // persisted 3 + pending 4
  post(3, -2);  // pending only
  const std::string ids = "1,2,3,1,99";
  const auto check = [&] {
    const auto many = c.get("/v1/counters/downloads?ids=" + ids);
    ASSERT_EQ(many.status, 200u) << many.body;
    std::string want = "{\"record_type\": 123, \"items\": [";
    bool first = true;
    for (const std::uint64_t id : {1, 2, 3, 99}) {
      const auto one = c.get("/v1/counters/123/" + std::to_string(id));
      ASSERT_EQ(one.status, 200u) << one.body;
      // The single read's fields after its record_type, as one item.
      const auto from = one.body.find("\"record_id\"");
      want += (first ? "{" : ", {") + one.body.substr(from);
      first = false;
    }
    want += "]}";
    EXPECT_EQ(many.body, want);
  };
  check();
  EXPECT_NE(c.get("/v1/counters/downloads?ids=1,2,3,1,99").body.find("\"count\": 7"),
            std::string::npos);
  ASSERT_TRUE(flush_until_ok(c));
  check();
  EXPECT_NE(c.get("/v1/counters/downloads?ids=3").body.find("\"persisted\": -2"),
            std::string::npos);
  const auto bad = c.get("/v1/counters/downloads?ids=1,x");
  EXPECT_EQ(bad.status, 400u);
  EXPECT_NE(bad.body.find("ids must be"), std::string::npos);
}

TEST_P(ManyAndTopOnEngines, TopNEqualsTheTruthThroughTwoInstancesKeyedBatchesAndAReset) {
  run_migrate();
  daemon_process a(yaml("top-a"));
  daemon_process b(yaml("top-b"));
  ASSERT_EQ(a.settle(), 200u);
  ASSERT_EQ(b.settle(), 200u);
  http_client ca(a.port()), cb(b.port());
  const std::int64_t today = unix_now() / 86400 * 86400;
  std::map<std::uint64_t, std::int64_t> total;
  std::map<std::int64_t, std::map<std::uint64_t, std::int64_t>> by_day;  // day -> id -> sum
  std::mt19937 rng(26);
  // Skewed: a few ids take most events; ties are frequent (small deltas).
  for (int request = 0; request < 24; ++request) {
    std::string body;
    for (int i = 0; i < 20; ++i) {
      const std::uint64_t id = rng() % 4 == 0 ? rng() % 5 : 5 + rng() % 60;
      const int delta = static_cast<int>(rng() % 3) + 1 - (rng() % 10 == 0 ? 3 : 0);
      const std::int64_t day = today - 86400 * static_cast<std::int64_t>(rng() % 4);
      const std::int64_t at = day + static_cast<std::int64_t>(rng() % 600);
      if (at > unix_now()) continue;
      body += "{\"record_type\": 123, \"record_id\": " + std::to_string(id) +
              ", \"delta\": " + std::to_string(delta) + ", \"at\": " + std::to_string(at) + "}\n";
      total[id] += delta;
      by_day[day][id] += delta;
    }
    auto& client = request % 2 == 0 ? ca : cb;
    std::map<std::string, std::string> extra;
    if (request % 3 == 0) extra = {{"Idempotency-Key", "top-" + std::to_string(request)}};
    const auto r = client.request("POST", "/v1/increments", body, "application/x-ndjson", extra);
    ASSERT_EQ(r.status, 202u) << r.body;
    if (request % 8 == 7) {
      ASSERT_TRUE(flush_until_ok(ca));
      ASSERT_TRUE(flush_until_ok(cb));
    }
  }
  ASSERT_TRUE(flush_until_ok(ca));
  ASSERT_TRUE(flush_until_ok(cb));
  const auto range_truth = [&](int days, std::size_t limit) {
    std::map<std::uint64_t, std::int64_t> sums;
    for (const auto& [day, ids] : by_day) {
      if (day > today - 86400 * days)
        for (const auto& [id, c] : ids) sums[id] += c;
    }
    return top_of(sums, limit);
  };
  const auto check = [&] {
    for (const std::size_t limit : {1u, 3u, 10u, 1000u}) {
      auto got = cb.get("/v1/top/downloads?limit=" + std::to_string(limit));
      ASSERT_EQ(got.status, 200u) << got.body;
      EXPECT_EQ(items_of(got.body), top_of(total, limit)) << "limit " << limit;
      for (const int days : {1, 2, 4}) {
        const std::string range =
            "&granularity=day&from=" + std::to_string(today - 86400 * (days - 1)) +
            "&to=" + std::to_string(today + 1);
        got = ca.get("/v1/top/123?limit=" + std::to_string(limit) + range);
        ASSERT_EQ(got.status, 200u) << got.body;
        EXPECT_EQ(items_of(got.body), range_truth(days, limit))
            << "limit " << limit << ", " << days << " days";
      }
    }
  };
  check();
  // A reset lowers the totals and the buckets' totals: the leader leaves the ranking.
  const auto leader = top_of(total, 1).at(0).first;
  const auto reset = ca.request("DELETE", "/v1/counters/123/" + std::to_string(leader));
  ASSERT_EQ(reset.status, 200u) << reset.body;
  total.erase(leader);
  for (auto& [day, ids] : by_day) ids.erase(leader);
  check();
  // It counts again from zero.
  ASSERT_EQ(cb.post_json("/v1/increments", "{\"record_type\": 123, \"record_id\": " +
                                               std::to_string(leader) + ", \"delta\": 1}")
                .status,
            202u);
  ASSERT_TRUE(flush_until_ok(cb));
  total[leader] = 1;
  by_day[today][leader] = 1;
  check();
  EXPECT_EQ(ca.get("/v1/top/123?limit=0").status, 400u);
  EXPECT_EQ(ca.get("/v1/top/123?limit=1001").status, 400u);
}

// A database of a version before top-N (no totals tables), upgraded without --migrate:
// the start is refused with an error naming the missing table and --migrate (as for a
// missing bucket table), never a daemon that runs but does not flush; --migrate then
// creates the totals tables filled from the counts already there.
TEST_F(ManyAndTop, AnUpgradeWithoutMigrateIsRefusedAtStartNamingTheTotalsTable) {
  run_migrate();
  auto conn = shared_mariadb().connect(database_);
  conn.execute("DROP TABLE slotted_counters_totals, slotted_counters_day_totals");
  conn.execute(
      "INSERT INTO slotted_counters (record_type, record_id, slot, count) VALUES "
      "(123, 5, 0, 7), (123, 5, 1, 2), (123, 6, 0, 4)");
  for (const std::string flags : {"--check-config", ""}) {
    std::string out;
    EXPECT_NE(run_binary(yaml("top-a"), flags, out), 0) << flags << out;
    EXPECT_NE(out.find("table `slotted_counters_totals` does not exist: every flush writes the "
                       "totals of top-N"),
              std::string::npos)
        << flags << out;
    EXPECT_NE(out.find("run slotted-counterd --migrate"), std::string::npos) << flags << out;
  }
  // A fill cut by a crash left its scratch table, part filled: --migrate builds it again
  // and renames it into place, leaving no scratch table.
  conn.execute(
      "CREATE TABLE slotted_counters_tfill (record_type INT UNSIGNED NOT NULL, "
      "record_id BIGINT UNSIGNED NOT NULL, count DECIMAL(30,0) NOT NULL, PRIMARY KEY "
      "(record_type, record_id))");
  conn.execute("INSERT INTO slotted_counters_tfill VALUES (123, 5, 1)");
  run_migrate();
  EXPECT_EQ(shared_mariadb().query_int(
                database_, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '" +
                               database_ + "' AND table_name LIKE '%tfill'"),
            0);
  daemon_process d(yaml("top-a"));
  ASSERT_EQ(d.settle(), 200u);
  http_client c(d.port());
  const auto top = c.get("/v1/top/downloads");
  ASSERT_EQ(top.status, 200u) << top.body;
  EXPECT_EQ(items_of(top.body), (ranking{{5, 9}, {6, 4}}));
}

// The totals table dropped while the daemon runs: the flush stops with the same error
// (no batch commits without its totals), nothing is dropped, and --migrate resumes it.
TEST_P(ManyAndTopOnEngines, ATotalsTableDroppedWhileRunningStopsTheFlushUntilMigrate) {
  run_migrate();
  daemon_process d(yaml("top-a"));
  ASSERT_EQ(d.settle(), 200u);
  http_client c(d.port());
  server().connect(database_).execute("DROP TABLE slotted_counters_totals");
  ASSERT_EQ(c.post_json("/v1/increments", "{\"record_type\": 123, \"record_id\": 4, \"delta\": 7}")
                .status,
            202u);
  ASSERT_TRUE(eventually(
      [&] {
        c.request("POST", "/v1/flush");
        return d.log().find(
                   "table `slotted_counters_totals` does not exist: every flush "
                   "writes the totals of top-N") != std::string::npos;
      },
      30s))
      << d.log();
  EXPECT_EQ(c.get("/readyz").status, 503u);
  run_migrate();
  ASSERT_TRUE(flush_until_ok(c));
  const auto top = c.get("/v1/top/downloads");
  ASSERT_EQ(top.status, 200u) << top.body;
  EXPECT_EQ(items_of(top.body), (ranking{{4, 7}}));
}

// 300 records of type 123, each counted once on each of the 30 days from 2026-01-01
// (from_day to to_day): 9,000 day-totals rows.
constexpr std::int64_t from_day = 1767225600;  // 2026-01-01
constexpr std::int64_t to_day = from_day + 29 * 86400;
void insert_tied_days(db::connection& conn) {
  conn.execute(
      "INSERT INTO slotted_counters_day_totals (record_type, record_id, bucket, count) "
      "SELECT 123, r.seq, '2026-01-01' + INTERVAL d.seq DAY, 1 FROM seq_1_to_300 r, "
      "seq_0_to_29 d");
}

// A bucketed top-N whose merge would read past its row bound (here every count tied:
// the merge reads on to every row of the range) stops with top_too_costly and leaves
// its connection with no snapshot open, to go back to the pool; a range whose first
// round alone could pass the bound is refused before any statement; under the bound the
// same read answers exactly (ties by smaller record_id).
TEST_F(ManyAndTop, ABucketedTopNPastItsRowBoundStopsAndLeavesNoSnapshot) {
  run_migrate();
  auto conn = shared_mariadb().connect(database_);
  insert_tied_days(conn);  // 9,000 rows, all tied
  const auto g = store::granularity::day;
  EXPECT_THROW(db::read_top_buckets(conn, "slotted_counters", g, 123, from_day, to_day, 10, 2000),
               db::top_too_costly);
  EXPECT_EQ(conn.query("SELECT @@in_transaction").at(0).at(0).value_or("?"), "0");
  // Limit 100 reads a first round of 30 x 150 rows: refused before it.
  EXPECT_THROW(db::read_top_buckets(conn, "slotted_counters", g, 123, from_day, to_day, 100, 4000),
               db::top_too_costly);
  EXPECT_EQ(conn.query("SELECT @@in_transaction").at(0).at(0).value_or("?"), "0");
  const auto top =
      db::read_top_buckets(conn, "slotted_counters", g, 123, from_day, to_day, 3, 20000);
  ASSERT_EQ(top.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(top[i].first, i + 1);
    EXPECT_TRUE(top[i].second == 30);
  }
}

// The rows a bucketed top-N sums for the record ids its rounds met have a bound of their
// own (max_top_sum_rows), and a summing statement takes no more ids than the rows left
// allow: the read stops within one id's rows of that bound, however many ids a round met.
TEST_F(ManyAndTop, ABucketedTopNBoundsTheRowsItSumsAndStopsNearThatBound) {
  run_migrate();
  auto conn = shared_mariadb().connect(database_);
  // All tied: the rounds read all 9,000 rows, and the sums read each record's 30 again.
  insert_tied_days(conn);
  const auto g = store::granularity::day;
  const auto top = [&](std::size_t max_sum_rows) {
    return db::read_top_buckets(conn, "slotted_counters", g, 123, from_day, to_day, 3, 20000,
                                max_sum_rows);
  };
  try {
    top(8000);
    ADD_FAILURE() << "8,000 rows to sum were enough";
  } catch (const db::top_too_costly& e) {
    EXPECT_NE(std::string(e.what()).find("more than 8000 rows to sum"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(top(9000).size(), 3u);
  // With 400 rows to sum, the first round reads 600 (a page of 20 in each of 30 buckets)
  // and meets 20 ids: summing them all at once would read 600 rows, not 420.
  const auto handler_reads = [&] {
    std::int64_t n = 0;
    for (const auto& row : conn.query("SHOW SESSION STATUS LIKE 'Handler_read%'"))
      n += std::stoll(row.at(1).value_or("0"));
    return n;
  };
  const auto before = handler_reads();
  EXPECT_THROW(top(400), db::top_too_costly);
  // The round's 600, the bound, one id's 30 rows past it at most, and the status reads
  // themselves (1,034 measured; 1,220 when a statement summed every id met).
  EXPECT_LE(handler_reads() - before, 1100);
}

// counters[].top off (the default): --migrate makes no totals table, the start does not
// ask for one, and plain and keyed batches, a reset and the many-counter read all work
// without it (a totals statement anywhere would fail on the missing table: the flush
// would not commit); top-N is a 404 naming the switch.
TEST_P(ManyAndTopOnEngines, WithTopOffNoTotalsTableIsMadeAskedForOrWritten) {
  const std::string off = "  - {name: downloads, record_type: 123, buckets: {day: 400d}}\n";
  std::string out;
  ASSERT_EQ(run_binary(yaml("top-a", off), "--migrate", out), 0) << out;
  EXPECT_EQ(totals_tables(), 0);
  daemon_process d(yaml("top-a", off));
  ASSERT_EQ(d.settle(), 200u) << d.log();
  http_client c(d.port());
  const auto at = std::to_string(unix_now() - 60);
  ASSERT_EQ(c.post_json("/v1/increments",
                        "{\"record_type\": 123, \"record_id\": 1, \"delta\": 3, "
                        "\"at\": " +
                            at + "}")
                .status,
            202u);
  ASSERT_EQ(c.request("POST", "/v1/increments",
                      "{\"record_type\": 123, \"record_id\": 2, \"delta\": 5, \"at\": " + at + "}",
                      "application/json", {{"Idempotency-Key", "top-off-1"}})
                .status,
            202u);
  ASSERT_TRUE(flush_until_ok(c)) << d.log();
  EXPECT_EQ(server().query_int(database_, "SELECT SUM(count) FROM slotted_counters"), 8);
  const auto reset = c.request("DELETE", "/v1/counters/123/1");
  ASSERT_EQ(reset.status, 200u) << reset.body;
  const auto many = c.get("/v1/counters/downloads?ids=1,2");
  ASSERT_EQ(many.status, 200u) << many.body;
  EXPECT_EQ(many.body,
            "{\"record_type\": 123, \"items\": [{\"record_id\": \"1\", \"count\": 0, "
            "\"persisted\": 0, \"pending\": 0}, {\"record_id\": \"2\", \"count\": 5, "
            "\"persisted\": 5, \"pending\": 0}]}");
  const auto top = c.get("/v1/top/downloads");
  EXPECT_EQ(top.status, 404u) << top.body;
  EXPECT_NE(top.body.find("top: true (counters[].top)"), std::string::npos) << top.body;
  EXPECT_EQ(totals_tables(), 0);
  EXPECT_EQ(d.log().find("_totals"), std::string::npos) << d.log();
}

// Two counters on one table, one with top: true: only its rows reach the totals (and its
// day buckets' totals); the other's flushes write none.
TEST_P(ManyAndTopOnEngines, OnlyTheCountersWithTopAreAddedToTheTotals) {
  const std::string mixed =
      "  - {name: downloads, record_type: 123, buckets: {day: 400d}, top: true}\n"
      "  - {name: views, record_type: 124, buckets: {day: 400d}}\n";
  std::string out;
  ASSERT_EQ(run_binary(yaml("top-a", mixed), "--migrate", out), 0) << out;
  daemon_process d(yaml("top-a", mixed));
  ASSERT_EQ(d.settle(), 200u) << d.log();
  http_client c(d.port());
  std::string body;
  for (const int type : {123, 124})
    for (const int id : {1, 2})
      body += "{\"record_type\": " + std::to_string(type) +
              ", \"record_id\": " + std::to_string(id) + ", \"delta\": " + std::to_string(id * 10) +
              "}\n";
  ASSERT_EQ(c.request("POST", "/v1/increments", body, "application/x-ndjson").status, 202u);
  ASSERT_TRUE(flush_until_ok(c)) << d.log();
  EXPECT_EQ(server().query_int(
                database_, "SELECT COUNT(*) FROM slotted_counters_totals WHERE record_type = 124"),
            0);
  EXPECT_EQ(
      server().query_int(
          database_, "SELECT COUNT(*) FROM slotted_counters_day_totals WHERE record_type = 124"),
      0);
  EXPECT_EQ(
      server().query_int(database_,
                         "SELECT SUM(count) FROM slotted_counters_totals WHERE record_type = 123"),
      30);
  EXPECT_EQ(items_of(c.get("/v1/top/downloads").body), (ranking{{2, 20}, {1, 10}}));
  EXPECT_EQ(c.get("/v1/top/views").status, 404u);
}

INSTANTIATE_ENGINES(ManyAndTopOnEngines);

}  // namespace
}  // namespace slotted::test
