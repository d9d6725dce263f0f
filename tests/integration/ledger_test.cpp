// The ledger's retention (README: Design in brief, Exactly once): every instance's old
// rows go, whoever wrote them, in bounded chunks that catch up with a backlog and lock
// only the rows they delete; --migrate gives an older ledger the index that prune reads.

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "db/repository.hpp"
#include "db/sql.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/mariadb_server.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;

class Ledger : public engine_test {
 protected:
  // The database's time `age` ago ("2 DAY").
  std::string ago(const std::string& age) const {
    return postgresql() ? "statement_timestamp() - INTERVAL '" + age + "'"
                        : "NOW(3) - INTERVAL " + age;
  }
  // `n` ledger rows of `instance` (run `run`, seqs 1..n) committed `age` ago.
  void insert_rows(db::connection& conn, const std::string& instance, int run, int n,
                   const std::string& age) const {
    conn.execute(
        "INSERT INTO slotted_counterd_ledger (instance_id, run_id, batch_seq, row_count, "
        "committed_at) SELECT '" +
        instance + "', " + std::to_string(run) + ", seq, 1, " + ago(age) +
        (postgresql() ? " FROM generate_series(1, " + std::to_string(n) + ") AS g(seq)"
                      : " FROM seq_1_to_" + std::to_string(n)));
  }
  std::int64_t rows_of(const std::string& database, const std::string& where) const {
    return server().query_int(database,
                              "SELECT COUNT(*) FROM slotted_counterd_ledger WHERE " + where);
  }
};

// Failed before the change: each instance pruned only its own rows, so those of an
// instance that never came back stayed for good.
TEST_P(Ledger, TheRowsOfAnInstanceThatNeverComesBackArePruned) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  {
    auto conn = server.connect(database);
    insert_rows(conn, "gone", 1, 25000, "2 DAY");  // a container under an old hostname
    insert_rows(conn, "gone", 2, 100, "2 HOUR");   // its instance may still need these
    insert_rows(conn, "alive", 1, 100, "1 MINUTE");
  }
  in_process_daemon daemon(test_config(server, database));
  EXPECT_TRUE(eventually(
      [&] {
        return rows_of(database,
                       "run_id = 1 AND instance_id = "
                       "'gone'") == 0;
      },
      20s));
  EXPECT_EQ(rows_of(database, "instance_id = 'gone' AND run_id = 2"), 100);
  EXPECT_EQ(rows_of(database, "instance_id = 'alive'"), 100);
}

// Failed before the change: 10,000 rows a minute, so a backlog of this instance's own
// rows (after an outage, a burst of small batches) took minutes, and grew while the rate
// of batches stayed above it.
TEST_P(Ledger, ABacklogOfThisInstancesRowsCatchesUpWithoutWaitingAMinuteAChunk) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  {
    auto conn = server.connect(database);
    // test_config's instance_id, an earlier run (another run's rows go after a day)
    insert_rows(conn, "test", 7, 25000, "2 DAY");
    insert_rows(conn, "test", 8, 100, "1 MINUTE");
  }
  in_process_daemon daemon(test_config(server, database));
  EXPECT_TRUE(eventually([&] { return rows_of(database, "run_id = 7") == 0; }, 20s))
      << rows_of(database, "run_id = 7") << " old rows left";
  EXPECT_EQ(rows_of(database, "run_id = 8"), 100);
}

// One run deletes at most its chunks on each side and says when it is behind; no chunk
// waits on a row another transaction holds, current rows of this or another instance.
TEST_P(Ledger, APruneRunIsBoundedAndLocksOnlyTheRowsItDeletes) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  auto conn = server.connect(database);
  insert_rows(conn, "gone", 1, 5000, "2 DAY");
  insert_rows(conn, "me", 2, 5000, "2 HOUR");  // this run's, committed
  insert_rows(conn, "other", 1, 1000, "1 MINUTE");
  insert_rows(conn, "me", 3, 1000, "1 MINUTE");
  conn.execute(postgresql() ? "ANALYZE slotted_counterd_ledger"
                            : "ANALYZE TABLE slotted_counterd_ledger");
  // Flushes holding current rows, not yet committed.
  auto other = server.connect(database);
  other.execute("START TRANSACTION");
  other.execute(
      "UPDATE slotted_counterd_ledger SET row_count = 2 WHERE batch_seq IN (1, 500, 1000) "
      "AND committed_at > " +
      ago("1 HOUR"));
  other.execute(
      "INSERT INTO slotted_counterd_ledger (instance_id, run_id, batch_seq, row_count) VALUES "
      "('other', 9, 1, 1), ('me', 9, 1, 1)");
  conn.execute(postgresql() ? "SET lock_timeout = '2s'"
                            : "SET SESSION innodb_lock_wait_timeout = 2");
  db::ledger_prune_result r;
  ASSERT_NO_THROW(r = db::prune_ledger(conn, {"me", 2, 5001}, 3600, 86400, 1000, 3));
  EXPECT_EQ(r.deleted, 6000u);
  EXPECT_TRUE(r.behind);
  ASSERT_NO_THROW(r = db::prune_ledger(conn, {"me", 2, 5001}, 3600, 86400, 1000, 3));
  EXPECT_EQ(r.deleted, 4000u);
  EXPECT_FALSE(r.behind);
  other.execute("COMMIT");
  EXPECT_EQ(rows_of(database, "TRUE"), 2002);
}

// Two processes may share an instance_id (two daemons on one host both default to the
// host name; a restart replays an earlier run's WAL). The rows of a run that is not this
// process's own go only after the others' age: within it, that run may still resend a
// batch (in doubt, or in its WAL), and only its ledger row makes that a no-op. Failed
// before the change: this instance's rows of every run went after an hour.
TEST_P(Ledger, TheRowsOfAnotherRunOfTheSameInstanceIdAreKeptForTheOthersAge) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  auto conn = server.connect(database);
  insert_rows(conn, "shared", 5, 100, "2 HOUR");  // the other process's, maybe still needed
  insert_rows(conn, "shared", 6, 100, "2 DAY");   // an earlier run's, long resolved
  insert_rows(conn, "shared", 2, 100, "2 HOUR");  // this run's own, committed
  db::ledger_prune_result r;
  ASSERT_NO_THROW(r = db::prune_ledger(conn, {"shared", 2, 101}, 3600, 86400, 1000, 3));
  EXPECT_EQ(r.deleted, 200u);
  EXPECT_EQ(rows_of(database, "instance_id = 'shared' AND run_id = 5"), 100);
  EXPECT_EQ(rows_of(database, "run_id IN (2, 6)"), 0);
}

// A ledger made by a version before the prune of every instance's rows gets its index
// from --migrate, which stays safe to run again.
INSTANTIATE_ENGINES(Ledger);

// MariaDB's history alone: PostgreSQL's ledger was made with the index.
class LedgerUpgrade : public Ledger {};

TEST_P(LedgerUpgrade, MigrateAddsTheTimeIndexToAnOlderLedgerAndCanRunTwice) {
  auto& server = this->server();
  const auto database = server.create_database();
  server.connect(database).execute(
      "CREATE TABLE slotted_counterd_ledger (instance_id VARCHAR(64) NOT NULL, "
      "run_id BIGINT UNSIGNED NOT NULL, batch_seq BIGINT UNSIGNED NOT NULL, "
      "row_count INT UNSIGNED NOT NULL, "
      "committed_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3), "
      "PRIMARY KEY (instance_id, run_id, batch_seq), "
      "KEY by_age (instance_id, committed_at)) ENGINE=InnoDB");
  auto conn = server.connect(database);
  insert_rows(conn, "gone", 1, 10, "2 DAY");
  const std::string index_count =
      "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
      "AND TABLE_NAME = 'slotted_counterd_ledger' AND INDEX_NAME = 'by_time'";
  ASSERT_EQ(server.query_int(database, index_count), 0);
  migrate(server, database);
  EXPECT_EQ(server.query_int(database, index_count), 1);
  migrate(server, database);
  EXPECT_EQ(server.query_int(database, index_count), 1);
  EXPECT_EQ(rows_of(database, "TRUE"), 10);
}

INSTANTIATE_TEST_SUITE_P(, LedgerUpgrade, ::testing::Values(db::engine::mariadb),
                         engine_param_name());

}  // namespace
}  // namespace slotted::test
