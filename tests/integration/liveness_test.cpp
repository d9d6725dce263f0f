// The flusher's liveness (what the systemd watchdog pings on) means progress, not a
// short cycle: a long drain that keeps committing is healthy, a statement that never
// answers is not. And a stop honours its deadline between batches.

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <optional>
#include <thread>

#include "app/application.hpp"
#include "flush/flusher.hpp"
#include "support/daemon_process.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

// A flusher on its own, writing one row per batch (a transaction each), so that
// draining `keys` keys takes long; over `connections` writers, from a pool of 2.
struct single_row_flusher {
  metrics::registry metrics;
  store::pending_store store{8};
  db::pool pool;
  flush::flusher flusher;

  single_row_flusher(const mariadb_server& server, const std::string& database, int keys,
                     unsigned connections = 1)
      : pool(connect_options_for(test_config(server, database).mysql), 2),
        flusher(settings(connections), store, pool, metrics) {
    std::vector<ingest::increment> incs;
    for (int i = 1; i <= keys; ++i) incs.push_back({1, static_cast<std::uint64_t>(i), 1});
    store.add(incs, SIZE_MAX);
  }
  static flush::settings settings(unsigned connections) {
    flush::settings s;
    s.instance_id = "liveness";
    s.table = "slotted_counters";
    s.interval = 1h;
    s.max_rows_per_statement = 1;
    s.slots = 1;
    s.connections = connections;
    return s;
  }
};

TEST(Liveness, LongDrainThatKeepsCommittingIsHealthy) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  // About 8000 single-row transactions a second here (fewer under ThreadSanitizer):
  // several seconds of draining.
  constexpr int keys = 60000;
  single_row_flusher f(server, database, keys);
  // One commit stalled past 1 s on a 2-core machine running two test suites under
  // ThreadSanitizer; the daemon's own limit is the watchdog's, tens of seconds.
  const auto limit = 2s;
  std::atomic<bool> done{false};
  std::size_t unwritten = 1;
  const auto started = steady::now();
  std::thread drain([&] {
    unwritten = f.flusher.stop(steady::now() + 10min);  // one cycle writes them all
    done = true;
  });
  int unhealthy = 0, polls = 0;
  while (!done) {
    unhealthy += !f.flusher.healthy(limit);
    ++polls;
    std::this_thread::sleep_for(5ms);
  }
  drain.join();
  const auto took = steady::now() - started;
  EXPECT_EQ(unwritten, 0u);
  EXPECT_EQ(server.query_int(database, "SELECT SUM(count) FROM slotted_counters"), keys);
  // Otherwise the test proves nothing: the cycle must outlast the limit several times.
  ASSERT_GT(took, 2 * limit) << "drain too fast; raise `keys`";
  EXPECT_EQ(unhealthy, 0) << "of " << polls << " polls during a drain of "
                          << std::chrono::duration<double>(took).count() << " s";
}

TEST(Liveness, StatementThatNeverAnswersIsUnhealthy) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  single_row_flusher f(server, database, 10);
  auto locker = server.connect(database);
  locker.execute("LOCK TABLES slotted_counters WRITE");  // the upsert waits on it
  std::atomic<bool> done{false};
  std::thread drain([&] {
    f.flusher.stop(steady::now() + 10min);
    done = true;
  });
  const auto deadline = steady::now() + 20s;
  bool unhealthy = false;
  while (!unhealthy && steady::now() < deadline) {
    unhealthy = !f.flusher.healthy(300ms);
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_FALSE(done) << "the flush must be blocked while the table is locked";
  locker.execute("UNLOCK TABLES");
  drain.join();
  EXPECT_TRUE(unhealthy) << "no progress for 300 ms must count as wedged";
  EXPECT_TRUE(f.flusher.healthy(300ms)) << "between cycles";
  EXPECT_EQ(server.query_int(database, "SELECT SUM(count) FROM slotted_counters"), 10);
}

TEST(Liveness, StopHonoursItsDeadlineBetweenBatches) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  constexpr int keys = 5000;
  single_row_flusher f(server, database, keys);
  const auto started = steady::now();
  const std::size_t unwritten = f.flusher.stop(started + 300ms);
  const auto took = steady::now() - started;
  EXPECT_LT(took, 2s) << "the deadline was 300 ms";
  EXPECT_GT(unwritten, 0u) << "5000 single-row transactions cannot all commit in 300 ms";
  // Nothing lost: what was written plus what is left is everything.
  EXPECT_EQ(server.query_int(database, "SELECT COALESCE(SUM(count), 0) FROM slotted_counters") +
                static_cast<std::int64_t>(unwritten),
            keys);
}

// The common case of a stop: a cycle is already draining a backlog when it comes. The
// deadline must reach that cycle too, not only the final one stop() runs itself.
TEST(Liveness, StopHonoursItsDeadlineInTheCycleAlreadyRunning) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  constexpr int keys = 40000;  // several seconds of single-row transactions
  single_row_flusher f(server, database, keys);
  f.flusher.start();  // the first cycle runs at once and takes all of them
  const auto running = steady::now() + 30s;
  while (server.query_int(database, "SELECT COALESCE(SUM(count), 0) FROM slotted_counters") == 0 &&
         steady::now() < running) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_GT(server.query_int(database, "SELECT COALESCE(SUM(count), 0) FROM slotted_counters"), 0)
      << "the first cycle never started writing";
  const auto started = steady::now();
  const std::size_t unwritten = f.flusher.stop(started + 300ms);
  const auto took = steady::now() - started;
  EXPECT_GT(unwritten, 0u) << "the running cycle drained everything: the deadline did not reach it";
  EXPECT_LT(took, 3s) << "the deadline was 300 ms";
  EXPECT_EQ(server.query_int(database, "SELECT COALESCE(SUM(count), 0) FROM slotted_counters") +
                static_cast<std::int64_t>(unwritten),
            keys);
}

// A batch that meets a lock wait timeout is retried; past the stop deadline it must not be.
TEST(Liveness, StopDoesNotRetryLockWaitsPastItsDeadline) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  auto admin = server.connect(database);
  struct restore {
    db::connection& c;
    std::int64_t seconds;
    ~restore() { c.execute("SET GLOBAL innodb_lock_wait_timeout = " + std::to_string(seconds)); }
  } restore_timeout{admin, server.query_int(database, "SELECT @@GLOBAL.innodb_lock_wait_timeout")};
  // Sessions opened from now on (the flusher's pool) wait 2 s for a row lock.
  admin.execute("SET GLOBAL innodb_lock_wait_timeout = 2");
  single_row_flusher f(server, database, 3);
  auto locker = server.connect(database);
  locker.execute("START TRANSACTION");
  locker.execute(
      "INSERT INTO slotted_counters (record_type, record_id, slot, count) VALUES (1, 1, 0, 0)");
  const auto started = steady::now();
  const std::size_t unwritten = f.flusher.stop(started + 200ms);
  const auto took = steady::now() - started;
  locker.execute("ROLLBACK");
  EXPECT_EQ(unwritten, 3u);
  // The statement already sent waits its 2 s; three retries would take 6 s and more.
  EXPECT_LT(took, 4500ms) << "lock waits were retried past the stop deadline";
}

// An extra writer of a parallel flush that finds the pool's connections all lent out
// (a rollup run, a read waiting for a stable generation) does not wait for one: it
// would hold the round, and the stop, until the lease came back. The cycle's own
// connection writes every batch, within the deadline.
TEST(Liveness, AnExtraWriterDoesNotWaitForALentOutConnection) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  constexpr int keys = 20;
  single_row_flusher f(server, database, keys, 2);
  // The pool's second connection, held by someone else: the cycle takes the first.
  std::optional<db::pool::lease> held;
  held.emplace(f.pool.acquire());
  // Given back only once the stop has returned, or long after its deadline (so that a
  // writer waiting for it makes this test fail rather than hang).
  std::promise<void> stopped;
  std::thread holder([&, done = stopped.get_future()] {
    done.wait_for(20s);
    held.reset();
  });
  const auto started = steady::now();
  const std::size_t unwritten = f.flusher.stop(started + 3s);
  const auto took = steady::now() - started;
  stopped.set_value();
  holder.join();
  EXPECT_LT(took, 6s) << "the deadline was 3 s: a writer waited for a connection in the pool";
  EXPECT_EQ(unwritten, 0u) << "the cycle's own connection writes every batch";
  EXPECT_EQ(server.query_int(database, "SELECT COALESCE(SUM(count), 0) FROM slotted_counters"),
            keys);
}

}  // namespace
}  // namespace slotted::test
