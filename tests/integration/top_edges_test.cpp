// Top-N and many-counter reads at their edges, against a real MariaDB (and, for the
// totals filled by --migrate, PostgreSQL): the
// longest accepted mysql.table migrates and starts; top turned on for a counter that
// already has counts is refused until --migrate fills its totals, and a reset then
// never drives them negative; the heavy reads' cap leaves the flush its connection; a
// snapshot read that throws leaves no transaction open; a read cut by its time limit is
// a 503 saying so.

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <regex>

#include "app/application.hpp"
#include "db/top.hpp"
#include "flush/flusher.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/top_items.hpp"
#include "support/unix_now.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;

class TopEdges : public ::testing::Test {
 protected:
  // MariaDB here; each engine in TopEdgesOnEngines.
  virtual db::engine engine() const { return db::engine::mariadb; }
  db_server& server() const { return shared_server(engine()); }
  void SetUp() override { database_ = server().create_database(); }
  std::string yaml(const std::string& counters, const std::string& mysql_extra = "") const {
    return daemon_yaml(server(), database_,
                       "instance_id: top-edges\ncounters:\n" + counters + "flush: {interval: 1h}\n",
                       mysql_extra);
  }
  std::int64_t count(const std::string& sql) const { return server().query_int(database_, sql); }
  std::string database_;
};

class TopEdgesOnEngines : public TopEdges, public ::testing::WithParamInterface<db::engine> {
 protected:
  db::engine engine() const override { return GetParam(); }
};

// At the longest mysql.table the config accepts with top and both granularities (52
// characters: `<table>_hour_totals` is 64), --migrate builds every totals table (under
// its scratch name, 62 characters) and the daemon starts, flushes and answers top-N;
// one character more is a config error naming mysql.table and 52. With the scratch name
// `<x>_totals_filling` the --migrate failed here (error 1059).
TEST_F(TopEdges, TheLongestAcceptedTableNameMigratesAndStartsAndOneMoreIsRefused) {
  const std::string counters =
      "  - {name: downloads, record_type: 123, buckets: {hour: 2d, day: 40d}, top: true}\n";
  const std::string longest(52, 't');
  std::string out;
  ASSERT_EQ(run_binary(yaml(counters, "table: " + longest), "--migrate", out), 0) << out;
  EXPECT_EQ(count("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '" +
                  database_ + "' AND table_name LIKE '%totals'"),
            3);
  daemon_process d(yaml(counters, "table: " + longest));
  ASSERT_EQ(d.settle(), 200u) << d.log();
  http_client c(d.port());
  ASSERT_EQ(
      c.post_json("/v1/increments", R"({"record_type": 123, "record_id": 4, "delta": 7})").status,
      202u);
  ASSERT_TRUE(flush_until_ok(c)) << d.log();
  EXPECT_EQ(items_of(c.get("/v1/top/downloads").body), (ranking{{4, 7}}));
  const auto today = unix_now() / 86400 * 86400;
  const auto hours = c.get(
      "/v1/top/downloads?granularity=hour&from=" + std::to_string(unix_now() / 3600 * 3600 - 7200) +
      "&to=" + std::to_string(unix_now()));
  EXPECT_EQ(items_of(hours.body), (ranking{{4, 7}})) << hours.body;
  EXPECT_EQ(items_of(c.get("/v1/top/downloads?granularity=day&from=" +
                           std::to_string(today - 86400) + "&to=" + std::to_string(unix_now()))
                         .body),
            (ranking{{4, 7}}));

  ASSERT_NE(run_binary(yaml(counters, "table: " + longest + "t"), "--check-config", out), 0);
  EXPECT_NE(out.find("mysql.table"), std::string::npos) << out;
  EXPECT_NE(out.find("may have at most 52 characters"), std::string::npos) << out;
}

// A counter with counts (and the totals tables there, for another counter) gets
// `top: true`: the start is refused naming the record type, the table and --migrate
// (before, it started and ranked by what was counted since: here nothing); --migrate
// fills its totals from its rows; top-N then equals the truth, total and per day, and a
// reset leaves no negative total, even for a bucket whose totals row is gone.
TEST_P(TopEdgesOnEngines, TopTurnedOnForACounterWithCountsIsRefusedUntilMigrateFillsIt) {
  const std::string off =
      "  - {name: downloads, record_type: 123, buckets: {day: 40d}}\n"
      "  - {name: stars, record_type: 124, buckets: {day: 40d}, top: true}\n";
  const std::string on =
      "  - {name: downloads, record_type: 123, buckets: {day: 40d}, top: true}\n"
      "  - {name: stars, record_type: 124, buckets: {day: 40d}, top: true}\n";
  std::string out;
  ASSERT_EQ(run_binary(yaml(off), "--migrate", out), 0) << out;
  const auto today = unix_now() / 86400 * 86400;
  const auto yesterday = today - 86400;
  {
    daemon_process d(yaml(off));
    ASSERT_EQ(d.settle(), 200u) << d.log();
    http_client c(d.port());
    const std::string body =
        "{\"record_type\": 123, \"record_id\": 1, \"delta\": 5, \"at\": " +
        std::to_string(yesterday + 60) + "}\n" +
        "{\"record_type\": 123, \"record_id\": 2, \"delta\": 3, \"at\": " + std::to_string(today) +
        "}\n" +
        "{\"record_type\": 123, \"record_id\": 1, \"delta\": 1, \"at\": " + std::to_string(today) +
        "}\n" + "{\"record_type\": 124, \"record_id\": 1, \"delta\": 2}\n";
    ASSERT_EQ(c.request("POST", "/v1/increments", body, "application/x-ndjson").status, 202u);
    ASSERT_TRUE(flush_until_ok(c)) << d.log();
  }
  for (const std::string flags : {"--check-config", ""}) {
    EXPECT_NE(run_binary(yaml(on), flags, out), 0) << flags << out;
    EXPECT_NE(out.find("counters[].top is on for record_type 123 but table "
                       "`slotted_counters_totals` was not filled with its counts"),
              std::string::npos)
        << flags << out;
    EXPECT_NE(out.find("run slotted-counterd --migrate"), std::string::npos) << flags << out;
  }
  ASSERT_EQ(run_binary(yaml(on), "--migrate", out), 0) << out;
  ASSERT_EQ(run_binary(yaml(on), "--migrate", out), 0) << out;  // idempotent
  daemon_process d(yaml(on));
  ASSERT_EQ(d.settle(), 200u) << d.log();
  http_client c(d.port());
  EXPECT_EQ(items_of(c.get("/v1/top/downloads").body), (ranking{{1, 6}, {2, 3}}));
  EXPECT_EQ(items_of(c.get("/v1/top/stars").body), (ranking{{1, 2}}));  // untouched
  const auto day = [&](std::int64_t d0) {
    return items_of(c.get("/v1/top/downloads?granularity=day&from=" + std::to_string(d0) +
                          "&to=" + std::to_string(d0))
                        .body);
  };
  EXPECT_EQ(day(yesterday), (ranking{{1, 5}}));
  EXPECT_EQ(day(today), (ranking{{2, 3}, {1, 1}}));
  // Yesterday's totals row of record 1 gone (as at the retention edge): the reset
  // lowers what is there and makes no row for it.
  const std::string days = std::to_string(yesterday / 86400);
  server().connect(database_).execute(
      "DELETE FROM slotted_counters_day_totals WHERE record_type = 123 AND record_id = 1 AND "
      "bucket = " +
      (engine() == db::engine::postgresql ? "DATE '1970-01-01' + " + days
                                          : "'1970-01-01' + INTERVAL " + days + " DAY"));
  ASSERT_EQ(c.request("DELETE", "/v1/counters/123/1").status, 200u);
  EXPECT_EQ(items_of(c.get("/v1/top/downloads").body), (ranking{{2, 3}}));
  EXPECT_EQ(day(today), (ranking{{2, 3}}));
  EXPECT_EQ(day(yesterday), ranking{});
  EXPECT_EQ(count("SELECT COUNT(*) FROM slotted_counters_totals WHERE count < 0"), 0);
  EXPECT_EQ(count("SELECT COUNT(*) FROM slotted_counters_day_totals WHERE count < 0"), 0);
  EXPECT_EQ(count("SELECT COUNT(*) FROM slotted_counters_day_totals WHERE record_id = 1 AND "
                  "record_type = 123"),
            0);
}

INSTANTIATE_ENGINES(TopEdgesOnEngines);

// Many-counter and top-N reads together hold at most mysql.pool_size less
// flush.connections connections (here 2 - 1): with that many held (a read in flight
// each), another is refused at once with retry_later (503 with Retry-After), and a
// flush still commits over the connection left. With a cap of the whole pool the flush
// would wait for a connection (the bounded wait below fails).
TEST_F(TopEdges, PastTheCapHeavyReadsAreRefusedAndAFlushKeepsItsConnection) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  metrics::registry metrics;
  store::pending_store store{8};
  db::pool pool(connect_options_for(test_config(server, database).mysql), 2);
  flush::settings s;
  s.instance_id = "cap";
  s.table = "slotted_counters";
  s.interval = 1h;
  s.max_retry_backoff = 100ms;
  flush::flusher f(s, store, pool, metrics);
  f.start();
  // Not an ASSERT: with a cap of the whole pool the flush below must be seen to wait.
  EXPECT_EQ(f.heavy_reads().cap(), 1u);
  // Each slot with the connection its read would hold.
  std::vector<flush::read_gate::slot> held;
  std::vector<db::pool::lease> leases;
  for (unsigned i = 0; i < f.heavy_reads().cap(); ++i) {
    held.push_back(f.heavy_reads().try_enter());
    ASSERT_TRUE(held.back().held());
    leases.push_back(pool.acquire());
  }
  const std::vector<std::uint64_t> ids = {1, 2};
  const auto many = f.read_totals(1, ids);
  ASSERT_FALSE(many);
  EXPECT_EQ(many.error(), errc::retry_later);
  EXPECT_NE(many.failed().detail.find(
                "at most 1, the database section's pool_size less flush.connections"),
            std::string::npos)
      << many.failed().detail;
  const auto top = f.read_top(1, 10);
  ASSERT_FALSE(top);
  EXPECT_EQ(top.error(), errc::retry_later);

  ASSERT_EQ(store.add(std::vector<ingest::increment>{{1, 7, 5}}, 1000), store::add_result::applied);
  std::promise<flush::flush_result> flushed;
  auto answer = flushed.get_future();
  f.request_flush([&](const flush::flush_result& r) { flushed.set_value(r); });
  ASSERT_EQ(answer.wait_for(30s), std::future_status::ready) << "the flush found no connection";
  const auto r = answer.get();
  ASSERT_TRUE(r) << r.failed().text();
  EXPECT_EQ(server.query_int(database,
                             "SELECT SUM(count) FROM slotted_counters WHERE "
                             "record_type = 1 AND record_id = 7"),
            5);
  // Given back, the next read is served.
  leases.clear();
  held.clear();
  const auto again = f.read_totals(1, std::vector<std::uint64_t>{7});
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->totals.at(0).persisted == 5);
  f.stop(std::chrono::steady_clock::now() + 10s);
}

// Whatever a snapshot read throws (a db_error or not), its connection is left with
// no transaction open, to go back to the pool.
TEST_F(TopEdges, ASnapshotReadThatThrowsLeavesNoTransactionOpen) {
  auto conn = shared_mariadb().connect(database_);
  const auto in_transaction = [&] {
    return conn.query("SELECT @@in_transaction").at(0).at(0).value_or("?");
  };
  EXPECT_THROW(db::in_read_snapshot(conn, [] { throw std::runtime_error("not a db_error"); }),
               std::runtime_error);
  EXPECT_EQ(in_transaction(), "0");
  EXPECT_THROW(db::in_read_snapshot(conn, [&] { conn.query("SELECT * FROM no_such_table"); }),
               db::db_error);
  EXPECT_EQ(in_transaction(), "0");
  bool ran = false;
  db::in_read_snapshot(conn, [&] { ran = in_transaction() == "1"; });
  EXPECT_TRUE(ran);
  EXPECT_EQ(in_transaction(), "0");
}

// A many-counter read cut by its statement time limit (5 s; here it waits on a
// table lock) is a 503 saying the read took too long, not "database not reachable".
TEST_F(TopEdges, AReadPastItsTimeLimitIs503SayingItTookTooLong) {
  const std::string counters = "  - {name: downloads, record_type: 123}\n";
  std::string out;
  ASSERT_EQ(run_binary(yaml(counters), "--migrate", out), 0) << out;
  daemon_process d(yaml(counters));
  ASSERT_EQ(d.settle(), 200u) << d.log();
  http_client c(d.port());
  auto lock = shared_mariadb().connect(database_);
  lock.execute("LOCK TABLES slotted_counters WRITE");
  const auto cut = c.get("/v1/counters/downloads?ids=1,2");
  lock.execute("UNLOCK TABLES");
  EXPECT_EQ(cut.status, 503u) << cut.body;
  EXPECT_NE(cut.body.find("the read took too long"), std::string::npos) << cut.body;
  EXPECT_EQ(cut.body.find("not reachable"), std::string::npos) << cut.body;
  EXPECT_EQ(c.get("/v1/counters/downloads?ids=1,2").status, 200u);
}

}  // namespace
}  // namespace slotted::test
