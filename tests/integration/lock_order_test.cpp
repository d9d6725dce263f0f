// The writers' lock order (db/repository.hpp, "Lock order") against a real MariaDB:
// two writers of one counter and slot, one paused holding its locks (behind a row lock
// a connection of the test holds), the other run into it; then both commit, no
// deadlock, and the counter's total equals the sum of its hour buckets and of its day
// buckets. And a reset deletes the bucket rows of the slot rows it read, no others.

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "db/errors.hpp"
#include "db/keys.hpp"
#include "db/repository.hpp"
#include "db/write_path.hpp"
#include "support/batch_content.hpp"
#include "support/commit_rows.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;
using store::granularity;

constexpr std::uint32_t type = 123;
constexpr std::uint64_t id = 42;
const std::string table = "slotted_counters";
// 2025-11-24 00:00 UTC and three hours of that day.
constexpr std::int64_t day = 1763942400;
constexpr auto poll = 250ms;
constexpr std::int64_t hour_a = day + 3600, hour_b = day + 2 * 3600, hour_c = day + 5 * 3600;

// A job on a thread of its own, with its db_error (empty: none); joined when it goes.
class background {
 public:
  explicit background(std::function<void()> job)
      : thread_([this, job = std::move(job)] {
          try {
            job();
          } catch (const db::db_error& e) {
            error_ = "db_error " + e.native_code() + ": " + e.what();
          }
        }) {}
  ~background() { join(); }
  // Waits for the job; its error, empty when none.
  const std::string& join() {
    if (thread_.joinable()) thread_.join();
    return error_;
  }

 private:
  std::string error_;
  std::thread thread_;
};

class LockOrder : public ::testing::Test {
 protected:
  void SetUp() override {
    database_ = shared_mariadb().create_database();
    auto conn = connect();
    db::migrate(conn, table);
    spec_.declare(type, granularity::hour, 24h * 3650);
    spec_.declare(type, granularity::day, 24h * 3650);
    db::migrate_buckets(conn, table, spec_);
  }

  // A connection as the daemon's (READ COMMITTED), whose lock waits end within 10 s
  // rather than the server's 50 (a test that fails does not hang).
  db::connection connect() const {
    auto conn = shared_mariadb().connect(database_);
    conn.execute("SET SESSION innodb_lock_wait_timeout = 10");
    return conn;
  }
  static std::uint64_t thread_id(db::connection& conn) {
    return std::stoull(conn.query("SELECT CONNECTION_ID()").at(0).at(0).value_or("0"));
  }
  // The statement connection `thread` waits on a row lock with; empty when it does not.
  // InnoDB refreshes information_schema.INNODB_TRX only when it was not read in the last
  // 100 ms: pollers wait 250 ms between reads (see `poll`), or they read a stale copy.
  std::string waiting(std::uint64_t thread) const {
    auto conn = shared_mariadb().connect(database_);
    const auto rows = conn.query(
        "SELECT trx_query FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT' AND "
        "trx_mysql_thread_id = " +
        std::to_string(thread));
    return rows.empty() ? std::string() : rows[0][0].value_or("?");
  }
  // Every open transaction, for a failure's message.
  std::string transactions() const {
    auto conn = shared_mariadb().connect(database_);
    std::string out;
    for (const auto& r : conn.query("SELECT trx_mysql_thread_id, trx_state, trx_query FROM "
                                    "information_schema.INNODB_TRX"))
      out += r[0].value_or("-") + " " + r[1].value_or("-") + " " + r[2].value_or("-") + "\n";
    for (const auto& r : conn.query("SELECT ID, COMMAND, STATE, INFO FROM "
                                    "information_schema.PROCESSLIST"))
      out += r[0].value_or("-") + " " + r[1].value_or("-") + " " + r[2].value_or("-") + " " +
             r[3].value_or("-") + "\n";
    return out;
  }
  // Waits until `thread` waits on a row lock with a statement on `table_name`.
  bool waits_on(std::uint64_t thread, const std::string& table_name) const {
    return eventually(
        [&] { return waiting(thread).find("`" + table_name + "`") != std::string::npos; }, 20s,
        poll);
  }
  // Holds the lock of one existing hour bucket row of the counter (slot `slot`) in an
  // open transaction of `conn`.
  static void hold_hour_row(db::connection& conn, std::int64_t hour, int slot) {
    conn.execute("START TRANSACTION");
    ASSERT_EQ(conn.query("SELECT `count` FROM `slotted_counters_hour` WHERE record_type = " +
                         std::to_string(type) + " AND record_id = " + std::to_string(id) +
                         " AND bucket = " + db::bucket_literal(granularity::hour, hour) +
                         " AND slot = " + std::to_string(slot) + " FOR UPDATE")
                  .size(),
              1u);
  }

  std::int64_t sum(const std::string& table_name) const {
    return shared_mariadb().query_int(
        database_, "SELECT CAST(COALESCE(SUM(count), 0) AS SIGNED) FROM `" + table_name +
                       "` WHERE record_type = " + std::to_string(type) +
                       " AND record_id = " + std::to_string(id));
  }
  // The counter's total, and its hour and day sums.
  std::vector<std::int64_t> sums() const {
    return {sum(table), sum(table + "_hour"), sum(table + "_day")};
  }

  // A plain batch of the counter: `delta` on `slot` in the given hours (of `day`).
  static void plain_batch(db::connection& conn, const std::string& instance, int slot,
                          std::vector<std::pair<std::int64_t, std::int64_t>> hours) {
    const auto s = static_cast<std::uint16_t>(slot);
    std::int64_t total = 0;
    std::vector<store::bucket_row> buckets;
    for (const auto& [hour, delta] : hours) {
      buckets.push_back({type, id, granularity::hour, hour, s, delta});
      total += delta;
    }
    buckets.push_back({type, id, granularity::day, day, s, total});
    const std::vector<db::counter_row> rows{{type, id, s, total}};
    ASSERT_EQ(commit_rows(conn, table, {instance, 1, 1}, rows, {}, buckets),
              db::commit_outcome::applied);
  }
  // A keyed batch of the counter: one request of `delta` at `at`, on `slot`.
  std::size_t keyed_batch(db::connection& conn, int slot, std::int64_t at, int delta) const {
    idempotency::keyed_request r;
    r.key = "key-1";
    ingest::increment inc{type, id, delta};
    inc.at_given = true;
    inc.at = at;
    r.increments = {inc};
    r.hash = idempotency::hash_of(r.increments);
    r.received_ms = idempotency::now_ms();
    store::flush_batch b;
    b.run_id = 1;
    b.seq = 1;
    b.content = store::keyed_content{{r}};
    b.rows = db::rows_of(requests_of(b), static_cast<std::uint16_t>(slot));
    b.bucket_rows =
        db::bucket_rows_of(requests_of(b), static_cast<std::uint16_t>(slot), spec_, b.rows);
    return db::apply(conn, db::write_set_of({"keyed", 1, 1}, b),
                     {.table = table, .buckets = &spec_})
        .rows;
  }

  // An owning table `owners` (id, total 0) with a row for each of `rows`, whose counters
  // are counted and marked for the rollup (rollup_target below) by one committed batch.
  static void counted_with_owners(db::connection& conn, const std::vector<db::counter_row>& rows) {
    conn.execute(
        "CREATE TABLE owners (id BIGINT UNSIGNED PRIMARY KEY, total BIGINT NOT NULL DEFAULT 0)");
    for (const auto& r : rows)
      conn.execute("INSERT INTO owners (id) VALUES (" + std::to_string(r.record_id) + ")");
    ASSERT_EQ(commit_rows(conn, table, {"a", 1, 1}, rows, rows), db::commit_outcome::applied);
  }
  const db::rollup_target target{type, "owners", "id", "total", "downloads"};

  std::string database_;
  store::bucket_spec spec_;
};

// Issue 21 item 5. A plain batch holds the counter's slot row and waits for its hour
// bucket (whose lock the test holds); a keyed batch of the same counter and slot then
// runs. It took bucket rows first, then the slot row: it held the day bucket the plain
// batch needs next and waited for the slot row, a deadlock (one of the two rolled back
// with 1213) as soon as the plain batch could go on. In one lock order the keyed batch
// waits on the slot row holding nothing of the counter, and both commit.
TEST_F(LockOrder, AKeyedBatchAndAPlainBatchOfOneCounterAndSlotDoNotDeadlock) {
  auto setup = connect();
  plain_batch(setup, "seed", 3, {{hour_a, 5}});
  auto plain = connect(), keyed = connect();
  const auto plain_thread = thread_id(plain), keyed_thread = thread_id(keyed);
  std::size_t keyed_rows = 0;
  std::optional<background> plain_job, keyed_job;
  auto holder = connect();
  hold_hour_row(holder, hour_a, 3);

  plain_job.emplace([&] { plain_batch(plain, "plain", 3, {{hour_a, 2}}); });
  ASSERT_TRUE(waits_on(plain_thread, "slotted_counters_hour")) << plain_thread << "\n"
                                                               << transactions();
  keyed_job.emplace([&] { keyed_rows = keyed_batch(keyed, 3, hour_c + 10, 4); });
  ASSERT_TRUE(eventually([&] { return !waiting(keyed_thread).empty(); }, 20s, poll));
  EXPECT_NE(waiting(keyed_thread).find("`slotted_counters` "), std::string::npos)
      << "the keyed batch waits on the slot row: " << waiting(keyed_thread);
  holder.execute("ROLLBACK");

  EXPECT_EQ(plain_job->join(), "");
  EXPECT_EQ(keyed_job->join(), "");
  EXPECT_EQ(keyed_rows, 1u);
  EXPECT_EQ(sums(), (std::vector<std::int64_t>{11, 11, 11}));
}

// Issue 21 item 5. A reset holds the counter's slot row and waits to delete its first
// hour bucket (whose lock the test holds); a keyed batch of the same counter and slot
// then runs. Buckets first, it held the later hour bucket and the day bucket the reset
// deletes next, and waited for the slot row: a deadlock. In one lock order it waits for
// the reset, holding nothing of the counter, and counts after it.
TEST_F(LockOrder, AResetAndAKeyedBatchOfOneCounterAndSlotDoNotDeadlock) {
  auto setup = connect();
  plain_batch(setup, "seed", 3, {{hour_a, 2}, {hour_b, 3}});
  auto reset = connect(), keyed = connect();
  const auto reset_thread = thread_id(reset), keyed_thread = thread_id(keyed);
  db::write_result progress;
  std::size_t keyed_rows = 0;
  std::optional<background> reset_job, keyed_job;
  auto holder = connect();
  hold_hour_row(holder, hour_a, 3);

  reset_job.emplace([&] {
    progress = reset_counter(reset, table, {"reset", 1, 1}, {type, id}, spec_);
    EXPECT_EQ(progress.outcome, db::commit_outcome::applied);
  });
  ASSERT_TRUE(waits_on(reset_thread, "slotted_counters_hour")) << reset_thread << "\n"
                                                               << transactions();
  keyed_job.emplace([&] { keyed_rows = keyed_batch(keyed, 3, hour_b + 10, 4); });
  ASSERT_TRUE(eventually([&] { return !waiting(keyed_thread).empty(); }, 20s, poll));
  holder.execute("ROLLBACK");

  EXPECT_EQ(reset_job->join(), "");
  EXPECT_EQ(keyed_job->join(), "");
  EXPECT_EQ(static_cast<std::int64_t>(progress.cleared), 5);
  EXPECT_EQ(keyed_rows, 1u);
  EXPECT_EQ(sums(), (std::vector<std::int64_t>{4, 4, 4}));
}

// Issue 21 item 2. A reset holds the slot rows it read and waits to delete the
// counter's buckets (a bucket row's lock held by the test); meanwhile another instance
// commits a batch of the counter on a new slot, total and buckets. The reset deleted
// every bucket row of the counter: the new slot's total survived without its buckets,
// and the total no longer equalled the sum of its buckets, for good. It deletes the
// bucket rows of the slots it read, whose counts are in `cleared`, and no others.
TEST_F(LockOrder, AResetDeletesOnlyTheBucketsOfTheSlotRowsItRead) {
  auto setup = connect();
  plain_batch(setup, "seed", 3, {{hour_a, 5}});
  auto reset = connect();
  const auto reset_thread = thread_id(reset);
  db::write_result progress;
  std::optional<background> reset_job;
  auto holder = connect();
  hold_hour_row(holder, hour_a, 3);

  reset_job.emplace([&] {
    progress = reset_counter(reset, table, {"reset", 1, 1}, {type, id}, spec_);
    EXPECT_EQ(progress.outcome, db::commit_outcome::applied);
  });
  ASSERT_TRUE(waits_on(reset_thread, "slotted_counters_hour")) << reset_thread << "\n"
                                                               << transactions();
  // Another instance's batch on slot 7, which the reset did not read: it commits.
  auto other = connect();
  plain_batch(other, "other", 7, {{hour_a, 4}});
  holder.execute("ROLLBACK");

  EXPECT_EQ(reset_job->join(), "");
  EXPECT_EQ(static_cast<std::int64_t>(progress.cleared), 5);
  EXPECT_EQ(progress.cleared_rows, 1u);
  EXPECT_EQ(sums(), (std::vector<std::int64_t>{4, 4, 4}))
      << "the other instance's slot keeps its buckets with its total";
}

// Two instances' rollers of one counter (G4 with several daemons): roller A's chunk
// (counters 1, 2 and 42) waits on owning row 2, which the test holds; meanwhile counter 42
// is flushed again and roller B, whose chunk holds 42 only, sets it to its new total and
// deletes its mark. Then A goes on and writes the newest total: in one transaction A
// locks the owning rows in id order before it reads any SUM. Before (each statement on
// its own, the UPDATE reading its SUMs as it reached its first owning row), this test
// failed: B waited behind A, A's rollup ended in a lock wait timeout (1205) and rows 1
// and 2 kept 0; and an UPDATE that read its SUMs before it waited could write an older
// total over the one another roller wrote meanwhile, its mark deleted.
TEST_F(LockOrder, TwoRollersOfOneCounterLeaveItsNewestTotal) {
  auto conn = connect();
  ASSERT_NO_FATAL_FAILURE(
      counted_with_owners(conn, {{type, 1, 0, 5}, {type, 2, 0, 7}, {type, id, 0, 10}}));
  const auto total_of = [&](std::uint64_t owner) {
    return shared_mariadb().query_int(
        database_, "SELECT total FROM owners WHERE id = " + std::to_string(owner));
  };
  const auto roll_up = [&](db::connection& c) {
    auto cursor = db::rollup_start(c, type);
    ASSERT_TRUE(cursor.has_value());
    db::rollup_chunk(c, table, target, 100, *cursor);
  };

  auto holder = connect();
  holder.execute("START TRANSACTION");
  ASSERT_EQ(holder.query("SELECT id FROM owners WHERE id = 2 FOR UPDATE").size(), 1u);
  auto conn_a = connect();
  const auto a_thread = thread_id(conn_a);
  background a([&] { roll_up(conn_a); });
  ASSERT_TRUE(waits_on(a_thread, "owners")) << transactions();

  const std::vector<db::counter_row> again{{type, id, 0, 1}};
  ASSERT_EQ(commit_rows(conn, table, {"a", 1, 2}, again, again), db::commit_outcome::applied);
  conn.execute("DELETE FROM slotted_counterd_dirty WHERE record_id IN (1, 2)");
  auto conn_b = connect();
  roll_up(conn_b);
  EXPECT_EQ(total_of(id), 11);

  holder.execute("ROLLBACK");
  EXPECT_EQ(a.join(), "");
  EXPECT_EQ(total_of(id), 11) << "the newest total, SUM(count) of counter 42";
  EXPECT_EQ(total_of(1), 5);
  EXPECT_EQ(total_of(2), 7);
  EXPECT_EQ(shared_mariadb().query_int(database_, "SELECT COUNT(*) FROM slotted_counterd_dirty"),
            0);
}

// A rollup chunk holds its owning rows from before its SUMs are read until its marks are
// deleted and it commits: here its DELETE waits on a mark row the test holds, and
// meanwhile owning row 1 cannot be locked by anyone else and still reads as before (the
// UPDATE not committed). Statements committing on their own would have released the
// owning rows, and shown the new total, before the DELETE.
TEST_F(LockOrder, ARollupChunkHoldsItsOwningRowsUntilItsMarksAreDeleted) {
  auto conn = connect();
  ASSERT_NO_FATAL_FAILURE(counted_with_owners(conn, {{type, 1, 0, 5}, {type, id, 0, 10}}));
  auto holder = connect();
  holder.execute("START TRANSACTION");
  ASSERT_EQ(holder
                .query("SELECT record_id FROM slotted_counterd_dirty WHERE record_id = 42 "
                       "FOR UPDATE")
                .size(),
            1u);
  auto conn_a = connect();
  const auto a_thread = thread_id(conn_a);
  background a([&] {
    auto cursor = db::rollup_start(conn_a, type);
    ASSERT_TRUE(cursor.has_value());
    db::rollup_chunk(conn_a, table, target, 100, *cursor);
  });
  ASSERT_TRUE(waits_on(a_thread, "slotted_counterd_dirty")) << transactions();
  auto probe = connect();
  try {
    probe.query("SELECT id FROM owners WHERE id = 1 FOR UPDATE NOWAIT");
    ADD_FAILURE() << "owning row 1 could be locked while the chunk was open";
  } catch (const db::db_error& e) {
    EXPECT_EQ(e.kind(), db::error_kind::lock_wait_timeout) << e.what();
  }
  EXPECT_EQ(shared_mariadb().query_int(database_, "SELECT total FROM owners WHERE id = 1"), 0);
  holder.execute("ROLLBACK");
  EXPECT_EQ(a.join(), "");
  EXPECT_EQ(shared_mariadb().query_int(database_, "SELECT total FROM owners WHERE id = 1"), 5);
  EXPECT_EQ(shared_mariadb().query_int(database_, "SELECT total FROM owners WHERE id = 42"), 10);
  EXPECT_EQ(shared_mariadb().query_int(database_, "SELECT COUNT(*) FROM slotted_counterd_dirty"),
            0);
}

}  // namespace
}  // namespace slotted::test
