// Counter reset (README: HTTP API, Reset): DELETE /v1/counters/{record_type}/{record_id}
// against a real MariaDB. Acknowledged before: cleared; after: counted. A batch formed
// before the reset commits before it or the reset fails; a lost COMMIT reply is resolved
// by the ledger; an outage is a 503 that changes nothing; the rollup target goes to 0;
// another instance's pending lands after; a SIGKILL right after the 200 with the WAL on
// neither loses the reset nor replays what it cleared.

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "db/repository.hpp"
#include "db/top.hpp"
#include "support/commit_rows.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/fault_proxy.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string event(std::uint32_t type, std::uint64_t id, int delta) {
  return R"({"record_type": )" + std::to_string(type) + R"(, "record_id": )" + std::to_string(id) +
         R"(, "delta": )" + std::to_string(delta) + "}";
}

class Reset : public ::testing::Test {
 protected:
  // MariaDB here; each engine in ResetOnEngines.
  virtual db::engine engine() const { return db::engine::mariadb; }
  db_server& server() const { return shared_server(engine()); }
  void SetUp() override { database_ = migrated_database(server()); }

  config::daemon_config cfg() const {
    auto c = test_config(server(), database_);
    c.flush.interval = 1h;  // only the flushes a test asks for (and those a reset runs)
    return c;
  }
  // cfg(), connecting through `proxy` (which can cut a connection at a statement).
  config::daemon_config through(const fault_proxy& proxy) const {
    return test::through(cfg(), proxy.port());
  }
  std::int64_t db_total(std::uint32_t type, std::uint64_t id) const {
    return server().query_int(database_,
                              "SELECT COALESCE(SUM(count), 0) FROM slotted_counters WHERE "
                              "record_type = " +
                                  std::to_string(type) + " AND record_id = " + std::to_string(id));
  }
  std::int64_t db_rows(std::uint32_t type, std::uint64_t id) const {
    return server().query_int(database_,
                              "SELECT COUNT(*) FROM slotted_counters WHERE record_type = " +
                                  std::to_string(type) + " AND record_id = " + std::to_string(id));
  }
  static unsigned post(http_client& c, std::uint32_t type, std::uint64_t id, int delta) {
    return c.post_json("/v1/increments", event(type, id, delta)).status;
  }
  // GET's count; -1 when the read is not answered 200.
  static std::int64_t count(http_client& c, std::uint32_t type, std::uint64_t id) {
    const auto r = c.get("/v1/counters/" + std::to_string(type) + "/" + std::to_string(id));
    return r.status == 200 ? json_int(r.body, "count") : -1;
  }
  static http_reply reset(http_client& c, const std::string& counter) {
    return c.request("DELETE", "/v1/counters/" + counter);
  }

  std::string database_;
};

// The tests whose outcome is the database's: on each engine.
class ResetOnEngines : public Reset, public ::testing::WithParamInterface<db::engine> {
 protected:
  db::engine engine() const override { return GetParam(); }
};

TEST_P(ResetOnEngines, IncrementsAcknowledgedBeforeAreClearedThoseAfterCount) {
  in_process_daemon d(cfg());
  http_client c(d.port());
  ASSERT_EQ(post(c, 1, 5, 3), 202u);
  ASSERT_TRUE(flush_until_ok(c));     // persisted ...
  ASSERT_EQ(post(c, 1, 5, 4), 202u);  // ... and pending
  ASSERT_EQ(post(c, 1, 6, 7), 202u);  // another counter
  ASSERT_EQ(count(c, 1, 5), 7);

  const auto r = reset(c, "1/5");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.body, R"({"record_type": 1, "record_id": "5", "cleared": 7})");
  EXPECT_EQ(count(c, 1, 5), 0);
  EXPECT_EQ(db_rows(1, 5), 0) << "every slot row of it is deleted";
  EXPECT_EQ(count(c, 1, 6), 7) << "another counter is untouched";

  ASSERT_EQ(post(c, 1, 5, 2), 202u);  // after the answer: counts
  EXPECT_EQ(count(c, 1, 5), 2);
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(db_total(1, 5), 2);
  EXPECT_EQ(db_total(1, 6), 7);
  EXPECT_EQ(json_int(reset(c, "1/5").body, "cleared"), 2);
  // A counter that is already zero (no rows, nothing pending) resets to zero again.
  const auto again = reset(c, "1/5");
  EXPECT_EQ(again.status, 200u);
  EXPECT_EQ(json_int(again.body, "cleared"), 0);
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(db_total(1, 5), 0);
  const auto m = c.get("/metrics").body;
  EXPECT_EQ(metric_value(m, R"(slotted_counterd_resets_total{result="ok"})"), 3);
  EXPECT_EQ(metric_value(m, R"(slotted_counterd_http_requests_total{code="200",route="reset"})"),
            3);
  EXPECT_EQ(d.stop(), 0);
}

TEST_F(Reset, AuthAndBadCountersAreRefusedAndChangeNothing) {
  auto c0 = cfg();
  c0.accept_undeclared_types = false;
  c0.counters = {{"downloads", 7, std::nullopt}};
  c0.http.auth_token = "s3cret";
  in_process_daemon d(c0);
  http_client c(d.port());
  const std::map<std::string, std::string> auth{{"Authorization", "Bearer s3cret"}};
  ASSERT_EQ(c.request("POST", "/v1/increments", event(7, 1, 5), "application/json", auth).status,
            202u);
  EXPECT_EQ(reset(c, "7/1").status, 401u) << "auth as for every /v1/ route";
  for (const auto* bad : {"8/1", "nope/1", "7/x", "7/-1", "7/18446744073709551616"}) {
    const auto r = c.request("DELETE", std::string("/v1/counters/") + bad, "", "", auth);
    EXPECT_EQ(r.status, 400u) << bad << ": " << r.body;
  }
  EXPECT_EQ(c.request("DELETE", "/v1/counters/7/1/2", "", "", auth).status, 404u);
  const auto read = c.request("GET", "/v1/counters/downloads/1", "", "", auth);
  EXPECT_EQ(json_int(read.body, "count"), 5) << "nothing was reset: " << read.body;
  const auto r = c.request("DELETE", "/v1/counters/downloads/1", "", "", auth);
  EXPECT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(json_int(r.body, "cleared"), 5);
  EXPECT_EQ(d.stop(), 0);
}

TEST_P(ResetOnEngines, DuringAnOutageIs503WithRetryAfterAndChangesNothing) {
  auto& server = this->server();
  in_process_daemon d(cfg());
  http_client c(d.port());
  ASSERT_EQ(post(c, 1, 9, 5), 202u);
  ASSERT_TRUE(flush_until_ok(c));
  ASSERT_EQ(post(c, 1, 9, 2), 202u);

  started_at_exit restart{server};
  server.stop();
  const auto r = reset(c, "1/9");
  EXPECT_EQ(r.status, 503u) << r.body;
  EXPECT_TRUE(r.headers.count("retry-after"));
  EXPECT_EQ(
      metric_value(c.get("/metrics").body, R"(slotted_counterd_resets_total{result="error"})"), 1);
  server.start();
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(db_total(1, 9), 7) << "the refused reset changed nothing";
  EXPECT_EQ(count(c, 1, 9), 7);
  EXPECT_EQ(d.stop(), 0);
}

// A batch formed before the reset (taken from the store, then its upsert cut off) is
// still queued when the reset comes: the reset writes it first, or fails with 503 and
// changes nothing; it never commits after the reset (which would bring back what the
// reset cleared).
TEST_P(ResetOnEngines, ABatchFormedBeforeItCommitsBeforeItOrTheResetFails) {
  auto& server = this->server();
  const auto proxied = proxy_to(engine());
  auto& proxy = *proxied;
  in_process_daemon d(through(proxy));
  http_client c(d.port());
  ASSERT_TRUE(flush_until_ok(c));

  ASSERT_EQ(post(c, 1, 11, 4), 202u);
  proxy.arm(as_sent(engine(), "INSERT INTO `slotted_counters`"), fault_proxy::cut::before_statement,
            2);
  EXPECT_EQ(c.request("POST", "/v1/flush").status, 503u) << "the batch stays queued";
  // The reset's own cycle meets the second cut: the batch is still queued, so no reset.
  const auto failed = reset(c, "1/11");
  EXPECT_EQ(failed.status, 503u) << failed.body;
  EXPECT_EQ(proxy.cuts(), 2);
  EXPECT_EQ(db_rows(1, 11), 0);
  // Now the batch commits first, then the reset clears it.
  const auto r = reset(c, "1/11");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(json_int(r.body, "cleared"), 4);
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(db_total(1, 11), 0) << "the batch formed before the reset came back after it";
  EXPECT_EQ(count(c, 1, 11), 0);
  EXPECT_EQ(server.query_int(database_,
                             "SELECT COUNT(*) FROM slotted_counterd_ledger WHERE "
                             "row_count > 0"),
            1)
      << "the batch committed once";
  EXPECT_EQ(d.stop(), 0);
}

// The reset's COMMIT executes but its reply is cut: the outcome is unknown until the
// ledger answers. The reset is re-sent under its id, finds its ledger row and answers
// what the first attempt cleared.
TEST_P(ResetOnEngines, ALostCommitReplyIsResolvedByTheLedger) {
  const auto proxied = proxy_to(engine());
  auto& proxy = *proxied;
  in_process_daemon d(through(proxy));
  http_client c(d.port());
  ASSERT_EQ(post(c, 1, 12, 9), 202u);
  ASSERT_TRUE(flush_until_ok(c));  // the reset's cycle then commits nothing: its COMMIT is cut
  proxy.arm("COMMIT", fault_proxy::cut::after_statement, 1);
  const auto r = reset(c, "1/12");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(proxy.cuts(), 1);
  EXPECT_EQ(json_int(r.body, "cleared"), 9) << "the committed attempt's figure";
  EXPECT_EQ(db_rows(1, 12), 0);
  EXPECT_EQ(count(c, 1, 12), 0);
  EXPECT_EQ(metric_value(c.get("/metrics").body, R"(slotted_counterd_resets_total{result="ok"})"),
            1);
  EXPECT_EQ(d.stop(), 0);
}

TEST_P(ResetOnEngines, TheRollupAfterAResetSetsTheTargetToZero) {
  auto& server = this->server();
  server.connect(database_).execute(
      "CREATE TABLE repositories (id BIGINT PRIMARY KEY, download_count BIGINT NOT "
      "NULL)");
  server.connect(database_).execute("INSERT INTO repositories VALUES (1, 0), (2, 0)");
  auto c0 = cfg();
  c0.counters = {
      {"repo_downloads", 123, config::rollup_target{"repositories", "id", "download_count"}}};
  c0.rollup.interval = 1h;
  in_process_daemon d(c0);
  http_client c(d.port());
  ASSERT_EQ(post(c, 123, 1, 5), 202u);
  ASSERT_EQ(post(c, 123, 2, 8), 202u);
  ASSERT_TRUE(flush_until_ok(c));
  ASSERT_EQ(c.request("POST", "/v1/rollup").status, 200u);
  const auto target = [&](int id) {
    return server.query_int(
        database_, "SELECT download_count FROM repositories WHERE id = " + std::to_string(id));
  };
  ASSERT_EQ(target(1), 5);
  const auto r = reset(c, "repo_downloads/1");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(json_int(r.body, "cleared"), 5);
  ASSERT_EQ(c.request("POST", "/v1/rollup").status, 200u);
  EXPECT_EQ(target(1), 0) << "no slot row is left, yet the target must follow";
  EXPECT_EQ(target(2), 8);
  EXPECT_EQ(server.query_int(database_, "SELECT COUNT(*) FROM slotted_counterd_dirty"), 0);
  EXPECT_EQ(d.stop(), 0);
}

// Instances do not coordinate: a reset clears what the database holds and what its own
// instance holds pending; another instance's pending lands after it.
TEST_P(ResetOnEngines, AnotherInstancesPendingLandsAfterTheReset) {
  auto ca = cfg(), cb = cfg();
  ca.instance_id = "reset-a";
  cb.instance_id = "reset-b";
  in_process_daemon a(ca), b(cb);
  http_client c_a(a.port()), c_b(b.port());
  ASSERT_EQ(post(c_a, 1, 30, 3), 202u);
  ASSERT_EQ(post(c_b, 1, 30, 10), 202u);
  ASSERT_TRUE(flush_until_ok(c_b));      // b's 10 persisted
  ASSERT_EQ(post(c_b, 1, 30, 5), 202u);  // b's 5 pending

  const auto r = reset(c_a, "1/30");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(json_int(r.body, "cleared"), 13) << "persisted (b's 10, a's 3) + a's pending";
  EXPECT_EQ(db_total(1, 30), 0);
  ASSERT_TRUE(flush_until_ok(c_b));
  EXPECT_EQ(db_total(1, 30), 5) << "b's pending landed after the reset";
  EXPECT_EQ(count(c_a, 1, 30), 5);
  EXPECT_EQ(a.stop(), 0);
  EXPECT_EQ(b.stop(), 0);
}

// Resets while clients keep incrementing the counter and flushes run every 50 ms, with
// and without the WAL: every acknowledged increment is either in exactly one reset's
// `cleared` or in the final total (never both, never neither), and another counter is
// untouched.
class ResetUnderLoad : public Reset, public ::testing::WithParamInterface<std::string> {};

TEST_P(ResetUnderLoad, EveryAcknowledgedIncrementIsClearedOnceOrCountsAfter) {
  const std::string root = make_temp_dir("reset-load");
  auto c0 = cfg();
  c0.flush.interval = 50ms;
  if (GetParam() != "none") {
    c0.wal.dir = root + "/wal";
    c0.wal.fsync = GetParam() == "always" ? config::fsync_mode::always : config::fsync_mode::never;
  }
  in_process_daemon d(c0);
  constexpr int clients = 3, per_client = 300;
  std::atomic<std::int64_t> acked_hot{0}, acked_other{0};
  std::atomic<int> failed{0}, finished{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      http_client c(d.port());
      for (int i = 0; i < per_client; ++i) {
        const int delta = 1 + (i + t) % 3;
        const bool hot = i % 4 != 0;
        if (post(c, 1, hot ? 40 : 41, delta) != 202) {
          ++failed;
          continue;
        }
        (hot ? acked_hot : acked_other) += delta;
      }
      ++finished;
    });
  }
  http_client c(d.port());
  std::int64_t cleared = 0;
  int resets = 0;
  while (finished.load() < clients) {
    const auto r = reset(c, "1/40");
    ASSERT_EQ(r.status, 200u) << r.body;
    cleared += json_int(r.body, "cleared");
    ++resets;
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failed.load(), 0);
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_GE(resets, 3) << "too few resets ran during the load to prove anything";
  EXPECT_GT(cleared, 0);
  EXPECT_EQ(cleared + db_total(1, 40), acked_hot.load());
  EXPECT_EQ(db_total(1, 41), acked_other.load());
  EXPECT_EQ(d.stop(), 0);
  fs::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(WalModes, ResetUnderLoad, ::testing::Values("none", "always", "never"),
                         [](const auto& info) { return info.param; });

// With the WAL on, a SIGKILL right after the 200 keeps the reset: the increments it
// cleared (flushed before it, or pending and dropped by it) are not replayed on top,
// and those acknowledged after it are not lost. A transaction of the test holds the
// counter's rows so that increments arrive while the reset waits: they are pending at
// its cut and dropped, and only the WAL's reset record keeps a replay from bringing
// them back. A keyed request among them is kept whole and counts after the reset.
TEST_F(Reset, SigkillRightAfterTheAnswerNeitherLosesItNorReplaysWhatItCleared) {
  const std::string root = make_temp_dir("reset-test");
  const std::string yaml = daemon_yaml(shared_mariadb(), database_,
                                       "instance_id: reset-wal\n"
                                       "accept_undeclared_types: true\n"
                                       "flush: {interval: 1h}\n"
                                       "wal: {dir: " +
                                           root + "/wal, fsync: never}\n");
  {
    daemon_process d(yaml);
    ASSERT_EQ(d.settle(), 200u);
    http_client c(d.port());
    ASSERT_EQ(post(c, 1, 20, 3), 202u);
    ASSERT_TRUE(flush_until_ok(c));
    ASSERT_EQ(post(c, 1, 20, 4), 202u);
    ASSERT_TRUE(flush_until_ok(c));  // so the reset's own cycle writes nothing

    // READ COMMITTED, as the daemon's sessions: locks on the rows, no gap locks.
    auto other = shared_mariadb().connect(database_);
    other.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
    other.execute("START TRANSACTION");
    other.query(
        "SELECT count FROM slotted_counters WHERE record_type = 1 AND record_id = 20 "
        "FOR UPDATE");
    std::atomic<unsigned> status{0};
    std::string body;
    std::thread resetter([&] {
      http_client r(d.port(), 120s);
      const auto reply = reset(r, "1/20");
      body = reply.body;
      status = reply.status;
    });
    ASSERT_TRUE(eventually(
        [&] {
          return shared_mariadb().query_int(
                     database_,
                     "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() "
                     "AND INFO LIKE 'SELECT `slot`, `count` FROM `slotted_counters`%FOR UPDATE' "
                     "AND TIME_MS > 200") > 0;
        },
        60s))
        << "the reset did not wait on the counter's rows";
    EXPECT_EQ(status.load(), 0u);
    // Acknowledged while the reset waits: pending at its cut, dropped with it.
    for (int i = 0; i < 5; ++i) ASSERT_EQ(post(c, 1, 20, 1), 202u);
    ASSERT_EQ(c.request("POST", "/v1/increments", event(1, 20, 100), "application/json",
                        {{"Idempotency-Key", "reset-keyed-1"}})
                  .status,
              202u);
    other.execute("COMMIT");
    resetter.join();
    ASSERT_EQ(status.load(), 200u) << body;
    EXPECT_EQ(json_int(body, "cleared"), 3 + 4 + 5) << body;
    ASSERT_EQ(post(c, 1, 20, 6), 202u);  // after the answer
    d.signal(SIGKILL);
    ASSERT_EQ(d.wait(10s), -SIGKILL);
  }
  daemon_process d(yaml);
  http_client c(d.port());
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(db_total(1, 20), 6 + 100)
      << "the reset was lost, or what it cleared was replayed on top of it";
  // The keyed request is still known by its key: a retry does not count again.
  EXPECT_EQ(c.request("POST", "/v1/increments", event(1, 20, 100), "application/json",
                      {{"Idempotency-Key", "reset-keyed-1"}})
                .status,
            202u);
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(db_total(1, 20), 6 + 100);
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(30s), 0) << d.log();
  fs::remove_all(root);
}

// Reads of other counters go on during resets. A reset makes the generation odd (reads
// wait for it, up to 20 x 200 ms, then 503) and must hold its connection before it does:
// otherwise reads take the connections (mysql.pool_size, 2 by default) while it is odd,
// each waits for the reset while the reset waits for a connection, and every read in
// flight answers 503 after ~4 s while the flusher stalls. With the WAL, a reset gives its
// connection back before its synced record and stays odd meanwhile; resets that share a
// cycle then follow each other on the flusher thread, so reads hold both connections
// when the next one goes odd.
TEST_P(ResetOnEngines, ReadsDoNotStallConcurrentResetsNorFail) {
  const std::string root = make_temp_dir("reset-reads");
  auto c0 = cfg();
  ASSERT_EQ(c0.mysql.pool_size, 2u);
  c0.wal.dir = root + "/wal";
  c0.wal.fsync = config::fsync_mode::always;
  in_process_daemon d(c0);
  http_client c(d.port());
  ASSERT_EQ(post(c, 1, 41, 5), 202u);
  ASSERT_TRUE(flush_until_ok(c));

  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, refused{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 8; ++i) {
    readers.emplace_back([&] {
      http_client r(d.port(), 30s);
      const auto until = std::chrono::steady_clock::now() + 90s;  // bounded whatever happens
      while (!stop && std::chrono::steady_clock::now() < until)
        (r.get("/v1/counters/1/41").status == 200 ? ok : refused)++;
    });
  }
  ASSERT_TRUE(eventually([&] { return ok.load() >= 40; }, 30s));
  std::atomic<int> resets_ok{0};
  std::atomic<long> slowest_ms{0};
  std::vector<std::thread> resetters;
  for (int i = 0; i < 4; ++i) {
    resetters.emplace_back([&, i] {
      http_client r(d.port(), 60s);
      for (int k = 0; k < 2; ++k) {
        const auto started = std::chrono::steady_clock::now();
        if (reset(r, "1/" + std::to_string(50 + i)).status == 200) ++resets_ok;
        const long ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - started)
                            .count();
        if (ms > slowest_ms) slowest_ms = ms;
      }
    });
  }
  for (auto& t : resetters) t.join();
  const int ok_at_answer = ok.load();
  ASSERT_TRUE(eventually([&] { return ok.load() >= ok_at_answer + 20; }, 30s));
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(resets_ok.load(), 8);
  EXPECT_EQ(refused.load(), 0) << "reads of another counter were refused during resets "
                               << "(the slowest reset took " << slowest_ms.load() << " ms)";
  EXPECT_EQ(count(c, 1, 41), 5);
  EXPECT_EQ(d.stop(), 0);
  fs::remove_all(root);
}

// The daemon adopts an existing table whatever its `count` column's type (only the four
// columns and the unique key are checked), and a read sums in SQL; the reset must not
// fail where the read does not: a slot row whose count lies outside the signed 64-bit
// range (an unsigned BIGINT column) is summed exactly, not thrown out of the flusher's
// thread as std::out_of_range (which ends the process, the transaction still open).
TEST_F(Reset, ASlotCountOutsideInt64IsSummedExactlyNotACrash) {
  auto conn = shared_mariadb().connect(database_);
  conn.execute(
      "CREATE TABLE wide_counters (record_type INT UNSIGNED NOT NULL, record_id BIGINT "
      "UNSIGNED NOT NULL, slot SMALLINT UNSIGNED NOT NULL, count BIGINT UNSIGNED NOT NULL, "
      "PRIMARY KEY (record_type, record_id, slot)) ENGINE=InnoDB");
  conn.execute(
      "INSERT INTO wide_counters VALUES (1, 5, 0, 18446744073709551615), (1, 5, 1, 1), "
      "(1, 6, 0, 7)");
  // Its totals table, as --migrate makes it for an existing table (summed in DECIMAL).
  const store::top_spec top({1}, store::no_buckets());
  db::migrate_totals(conn, "wide_counters", top);
  db::write_result p;
  ASSERT_NO_THROW(p = reset_counter(conn, "wide_counters", {"rv", 1, 1}, store::counter_key{1, 5},
                                    store::no_buckets(), top));
  EXPECT_EQ(p.outcome, db::commit_outcome::applied);
  EXPECT_TRUE(p.cleared == (static_cast<__int128>(1) << 64)) << "cleared is not 2^64";
  EXPECT_EQ(p.cleared_rows, 2u);
  EXPECT_EQ(shared_mariadb().query_int(database_,
                                       "SELECT COUNT(*) FROM wide_counters WHERE record_id = 5"),
            0);
  EXPECT_EQ(shared_mariadb().query_int(database_,
                                       "SELECT COUNT(*) FROM wide_counters WHERE record_id = 6"),
            1);
  // The totals follow: the reset counter's row is gone, the other's kept.
  EXPECT_EQ(shared_mariadb().query_int(
                database_, "SELECT COUNT(*) FROM wide_counters_totals WHERE record_id = 5"),
            0);
  EXPECT_EQ(
      shared_mariadb().query_int(
          database_, "SELECT CAST(count AS SIGNED) FROM wide_counters_totals WHERE record_id = 6"),
      7);
}

// A total past 2^63 - 1 (two slots of 9e18 in the BIGINT `count`): GET prints it
// exactly, and equal to what a reset then clears (both sum in 128 bits).
TEST_P(ResetOnEngines, AReadOfATotalPastInt64IsExactAndEqualsWhatTheResetClears) {
  server().connect(database_).execute(
      "INSERT INTO slotted_counters (record_type, record_id, slot, count) VALUES "
      "(7, 1, 0, 9000000000000000000), (7, 1, 1, 9000000000000000000)");
  in_process_daemon d(cfg());
  http_client c(d.port());
  const auto read = c.get("/v1/counters/7/1");
  ASSERT_EQ(read.status, 200u) << read.body;
  EXPECT_NE(read.body.find("\"count\": 18000000000000000000,"), std::string::npos) << read.body;
  EXPECT_NE(read.body.find("\"persisted\": 18000000000000000000,"), std::string::npos) << read.body;
  const auto r = reset(c, "7/1");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_NE(r.body.find("\"cleared\": 18000000000000000000}"), std::string::npos) << r.body;
  EXPECT_EQ(d.stop(), 0);
}

INSTANTIATE_ENGINES(ResetOnEngines);

}  // namespace
}  // namespace slotted::test
