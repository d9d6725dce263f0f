// Late items of counters with dedupe (issue 39, case 7) against a real MariaDB: an HTTP
// item and an access log line three hours late for a `dedupe: hour` counter count once
// in their own window, and a second copy of each counts nothing, through one instance,
// a second one and after a restart; beyond counters[].dedupe_keep they are refused. A
// window pruned by any instance, and one an earlier version may have pruned before
// --migrate recorded it, is decided by none.

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "db/repository.hpp"
#include "db/uniques.hpp"
#include "db/write_path.hpp"
#include "support/batch_content.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"
#include "support/unix_now.hpp"

namespace slotted::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A combined line of `client` fetching /d/ID/f.tgz at unix time `at`.
std::string line_at(const std::string& client, std::uint64_t id, std::int64_t at) {
  const std::time_t t = static_cast<std::time_t>(at);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char when[40];
  std::strftime(when, sizeof when, "%d/%b/%Y:%H:%M:%S +0000", &tm);
  return client + " - - [" + when + "] \"GET /d/" + std::to_string(id) +
         "/f.tgz HTTP/1.1\" 200 123 \"-\" \"curl/8\"\n";
}

void append(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::app | std::ios::binary) << text;
}

std::string item(std::uint64_t id, const std::string& client, std::int64_t at) {
  return "[{\"record_type\": \"dl\", \"record_id\": " + std::to_string(id) + ", \"client\": \"" +
         client + "\", \"at\": " + std::to_string(at) + "}]";
}

class LateUniques : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = shared_mariadb().create_database();
    dir_ = make_temp_dir("late-uniques");
    std::string out;
    ASSERT_EQ(run_binary(yaml("late-a"), "--migrate", out), 0) << out;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Instance `instance` reads its own log, dir_/<instance>.log.
  std::string yaml(const std::string& instance) const {
    return daemon_yaml(shared_mariadb(), db_,
                       "instance_id: " + instance +
                           "\ncounters: [{name: dl, record_type: 5, dedupe: hour}]\n"
                           "flush: {interval: 50ms}\n"
                           "log_sources:\n  - path: " +
                           log_of(instance) +
                           "\n    rules: [{counter: dl, path: '^/d/([0-9]+)/'}]\n");
  }
  std::string log_of(const std::string& instance) const { return dir_ + "/" + instance + ".log"; }
  std::int64_t count(std::uint64_t id) const {
    return shared_mariadb().query_int(
        db_,
        "SELECT COALESCE(SUM(`count`), 0) FROM slotted_counters WHERE record_type = 5 AND "
        "record_id = " +
            std::to_string(id));
  }
  // Posts `body` through `c` (202 expected) and flushes.
  static void post_and_flush(http_client& c, const std::string& body) {
    const auto r = c.post_json("/v1/increments", body);
    ASSERT_EQ(r.status, 202u) << r.body;
    ASSERT_TRUE(flush_until_ok(c));
  }
  // Appends the repeat line `repeat`, then a line of a new client for id 9 (the marker):
  // once the marker counts, the repeat before it was read and decided too.
  void repeat_then_marker(const std::string& instance, const std::string& repeat, std::int64_t at) {
    const std::string marker = "198.51.100." + std::to_string(++markers_);
    append(log_of(instance), repeat + line_at(marker, 9, at));
    ASSERT_TRUE(eventually([&] { return count(9) == markers_; }, 20s)) << count(9);
  }

  std::string db_, dir_;
  int markers_ = 0;
};

TEST_F(LateUniques, AnItemAndALineThreeHoursLateCountOnceAcrossInstancesAndRestarts) {
  const std::int64_t late = unix_now() - 3 * 3600;  // its hour ended 2 to 3 hours ago
  auto a = std::make_unique<daemon_process>(yaml("late-a"));
  daemon_process b(yaml("late-b"));
  http_client cb(b.port());
  const std::string late_line = line_at("192.0.2.7", 2, late);
  {
    http_client ca(a->port());
    post_and_flush(ca, item(1, "c1", late));
    EXPECT_EQ(count(1), 1);
    post_and_flush(ca, item(1, "c1", late));  // a second copy: nothing more
    append(log_of("late-a"), late_line);
    ASSERT_TRUE(eventually([&] { return count(2) == 1; }, 20s)) << count(2);
    repeat_then_marker("late-a", late_line, late);
  }
  // Through the second instance: the HTTP item and the line again.
  post_and_flush(cb, item(1, "c1", late));
  repeat_then_marker("late-b", late_line, late);
  // After a restart of the first.
  a->signal(SIGTERM);
  ASSERT_EQ(a->wait(30s), 0);
  a = std::make_unique<daemon_process>(yaml("late-a"));
  http_client ca(a->port());
  post_and_flush(ca, item(1, "c1", late));
  repeat_then_marker("late-a", late_line, late);
  EXPECT_EQ(count(1), 1);
  EXPECT_EQ(count(2), 1);
  // Another client of that window, late as well, still counts.
  post_and_flush(ca, item(1, "c2", late));
  EXPECT_EQ(count(1), 2);
  // One row per pair counted: ids 1 and 2, and the markers.
  EXPECT_EQ(shared_mariadb().query_int(db_, "SELECT COUNT(*) FROM slotted_counters_uniques"),
            3 + markers_);
}

TEST_F(LateUniques, BeyondTheKeepAnItemIsRefusedAndALineIsNotCounted) {
  daemon_process d(yaml("late-a"));
  http_client c(d.port());
  const std::int64_t too_late = unix_now() - store::default_dedupe_keep_seconds - 2 * 3600;
  const auto r = c.post_json("/v1/increments", item(1, "c1", too_late));
  EXPECT_EQ(r.status, 400u);
  EXPECT_NE(r.body.find("lies in a dedupe window that ended more than 172800 s "
                        "(counters[].dedupe_keep) before now"),
            std::string::npos)
      << r.body;
  append(log_of("late-a"), line_at("192.0.2.7", 2, too_late));
  repeat_then_marker("late-a", "", unix_now());
  const std::string series =
      "slotted_counterd_log_lines_total{outcome=\"too_late_for_dedupe\","
      "source=\"" +
      log_of("late-a") + "\"}";
  // Tallied as its pass commits, just after the marker became visible.
  EXPECT_TRUE(eventually([&] { return metric_value(c.get("/metrics").body, series) == 1; }, 20s));
  EXPECT_EQ(count(1), 0);
  EXPECT_EQ(count(2), 0);
}

// Commits one unique batch of `entries` under `dedupe` as instance "i", sequence `seq`.
db::write_result commit(db::connection& conn, const store::dedupe_spec& dedupe,
                        std::vector<store::unique_entry> entries, std::uint64_t seq) {
  store::flush_batch b;
  b.run_id = 7;
  b.seq = seq;
  unique_in(b).entries = std::move(entries);
  return db::apply(conn, db::write_set_of({"i", 7, seq}, b),
                   {.table = "slotted_counters", .dedupe = &dedupe});
}

// An instance keeping an hour's decisions 10 minutes prunes a window whose entries
// another instance, keeping them 48 h, would still accept: that instance decides none
// of them (it would count the client twice), and a window not pruned still counts.
TEST(LateUniquesFaults, AWindowPrunedByAnyInstanceIsDecidedByNone) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  auto conn = server.connect(database);
  store::dedupe_spec shortly, long_kept;
  shortly.declare(5, store::granularity::hour, 600);
  long_kept.declare(5, store::granularity::hour);
  db::migrate_uniques(conn, "slotted_counters", long_kept);
  const std::int64_t now = unix_now();
  const std::int64_t hour = now - now % 3600;
  const std::int64_t old = hour - 3 * 3600;  // ended 2 to 3 hours ago
  auto out = commit(conn, long_kept, {{5, 1, old, "a", old}, {5, 1, hour, "a", now}}, 1);
  EXPECT_EQ(out.counted, 2u);
  const auto pruned = db::prune_uniques(conn, "slotted_counters", shortly, now);
  EXPECT_EQ(pruned.deleted, 1u);
  EXPECT_EQ(server.query_int(database,
                             "SELECT ended_before FROM slotted_counterd_uniques_pruned WHERE "
                             "uniques_table = 'slotted_counters_uniques' AND record_type = 5"),
            now - 600 - store::unique_margin_seconds);
  // The pair again, and a new client of the pruned window: neither is decided.
  out = commit(conn, long_kept, {{5, 1, old, "a", old}, {5, 1, old, "b", old}}, 2);
  EXPECT_EQ(out.too_late, 2u);
  EXPECT_EQ(out.counted, 0u);
  // A later prune with a longer keep lowers nothing.
  db::prune_uniques(conn, "slotted_counters", long_kept, now);
  out = commit(conn, long_kept, {{5, 1, old, "c", old}, {5, 1, hour, "c", now}}, 3);
  EXPECT_EQ(out.too_late, 1u);
  EXPECT_EQ(out.counted, 1u);
  EXPECT_EQ(server.query_int(database, "SELECT SUM(`count`) FROM slotted_counters"), 3);
}

// A unique batch that committed but stayed in the WAL (a SIGKILL before its committed
// record) is replayed with its identity by the next run. After a day another instance's
// ledger prune has deleted its ledger row, but its entries' rows are kept for the keep
// (48 h): the replay must find them counted by the first attempt, not take them for its
// own (they carried the batch's identity) and count them again.
TEST(LateUniquesFaults, ABatchReplayedAfterItsLedgerRowWasPrunedCountsNothingAgain) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  auto conn = server.connect(database);
  store::dedupe_spec dedupe;
  dedupe.declare(5, store::granularity::hour);
  db::migrate_uniques(conn, "slotted_counters", dedupe);
  const std::int64_t at = unix_now() - 30 * 3600;  // its hour ended 29 to 30 hours ago
  const std::int64_t window = at - at % 3600;
  const std::vector<store::unique_entry> entries{{5, 1, window, "a", at}, {5, 2, window, "b", at}};
  auto out = commit(conn, dedupe, entries, 1);
  ASSERT_EQ(out.counted, 2u);
  // The day since: the row is another run's to every instance, older than a day.
  conn.execute("UPDATE slotted_counterd_ledger SET committed_at = NOW() - INTERVAL 2 DAY");
  const auto pruned = db::prune_ledger(conn, {"another", 1, 1}, 3600, 86400);
  ASSERT_EQ(pruned.deleted, 1u);
  out = commit(conn, dedupe, entries, 1);
  EXPECT_EQ(out.outcome, db::commit_outcome::applied);
  EXPECT_EQ(out.counted, 0u);
  EXPECT_EQ(out.duplicates, 2u);
  EXPECT_EQ(server.query_int(database, "SELECT SUM(`count`) FROM slotted_counters"), 2);
}

// --migrate over a uniques table an earlier version made (which pruned each window 10
// minutes after its end and recorded nothing): windows that ended before the migration
// are decided by none, later ones are. Run again, it changes nothing.
TEST(LateUniquesFaults, MigrateRecordsWhatAnEarlierVersionMayHavePrunedOnce) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  auto conn = server.connect(database);
  store::dedupe_spec dedupe;
  dedupe.declare(5, store::granularity::hour);
  const auto every = [&] {
    return server.query_int(database,
                            "SELECT ended_before FROM slotted_counterd_uniques_pruned WHERE "
                            "uniques_table = 'slotted_counters_uniques' AND record_type = " +
                                std::to_string(db::every_type));
  };
  // A new table: nothing was pruned.
  db::migrate_uniques(conn, "fresh", dedupe);
  EXPECT_EQ(server.query_int(database,
                             "SELECT ended_before FROM slotted_counterd_uniques_pruned WHERE "
                             "uniques_table = 'fresh_uniques'"),
            0);
  // The earlier version's table, without its row.
  conn.execute(db::create_uniques_table(db::mariadb_dialect(), "slotted_counters"));
  EXPECT_THROW(db::verify_uniques_table(conn, "slotted_counters", dedupe), db::db_error);
  const std::int64_t before = unix_now();
  db::migrate_uniques(conn, "slotted_counters", dedupe);
  const std::int64_t recorded = every();
  EXPECT_GE(recorded, before);
  EXPECT_LE(recorded, unix_now() + 1);
  db::migrate_uniques(conn, "slotted_counters", dedupe);
  EXPECT_EQ(every(), recorded);
  EXPECT_NO_THROW(db::verify_uniques_table(conn, "slotted_counters", dedupe));
  const std::int64_t now = unix_now();
  const std::int64_t hour = now - now % 3600;
  const auto out = commit(
      conn, dedupe, {{5, 1, hour - 3 * 3600, "a", hour - 3 * 3600}, {5, 1, hour, "a", now}}, 1);
  EXPECT_EQ(out.too_late, 1u);
  EXPECT_EQ(out.counted, 1u);
}

}  // namespace
}  // namespace slotted::test
