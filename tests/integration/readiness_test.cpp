// /readyz follows the database while the flusher is idle: a probe checks it every
// min(flush.interval, 5s), so a long flush interval does not hide an outage.

#include <gtest/gtest.h>

#include "db/errors.hpp"
#include "support/daemon_process.hpp"
#include "support/http_client.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

// Polls /readyz until it answers `status`; returns how long that took, or nullopt
// when it did not within `limit`.
std::optional<steady::duration> await_readyz(std::uint16_t port, unsigned status,
                                             steady::duration limit) {
  const auto start = steady::now();
  while (steady::now() - start < limit) {
    http_client c(port, 5s);
    if (c.get("/readyz").status == status) return steady::now() - start;
    std::this_thread::sleep_for(50ms);
  }
  return std::nullopt;
}

TEST(Readiness, FollowsTheDatabaseWhileTheFlusherIsIdle) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  auto cfg = test_config(server, database);
  cfg.flush.interval = 300s;  // no flush cycle runs during the test
  cfg.flush.max_retry_backoff = 30s;
  in_process_daemon daemon(cfg);
  ASSERT_TRUE(await_readyz(daemon.port(), 200, 10s));

  started_at_exit restart{server};
  server.stop(/*hard=*/true);
  const auto lost = await_readyz(daemon.port(), 503, 10s);
  ASSERT_TRUE(lost) << "/readyz still 200 10 s after the database was killed";
  EXPECT_EQ(metric_value(http_client(daemon.port()).get("/metrics").body, "slotted_counterd_ready"),
            0);

  server.start();
  const auto back = await_readyz(daemon.port(), 200, 20s);
  ASSERT_TRUE(back) << "/readyz not 200 within 20 s of the database coming back";
  // And it stays ready: the flusher works again too (not only the probe).
  http_client c(daemon.port());
  ASSERT_EQ(
      c.post_json("/v1/increments", R"({"record_type": 1, "record_id": 2, "delta": 3})").status,
      202u);
  ASSERT_TRUE(flush_until_ok(c, std::chrono::seconds(20)));
  EXPECT_EQ(server.query_int(database, "SELECT SUM(count) FROM slotted_counters"), 3);
  EXPECT_EQ(c.get("/readyz").status, 200u);
}

// The probe keeps its connection between attempts. When that one connection goes (a
// server-side KILL here; wait_timeout, a proxy's idle close or a quick restart do the
// same) while the database itself answers, /readyz must stay 200: one dead socket is
// not a dead database.
TEST(Readiness, ALostProbeConnectionIsNotALostDatabase) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  auto cfg = test_config(server, database);
  cfg.flush.interval = 300s;  // no flush cycle runs (it would meet a dead pooled connection)
  in_process_daemon daemon(cfg);
  ASSERT_TRUE(await_readyz(daemon.port(), 200, 10s));
  auto admin = server.connect();
  // Every connection of the daemon (the probe's and the pool's): the flusher's pool
  // reconnects on its own, the probe's next `DO 1` meets a closed socket.
  int killed = 0;
  for (const auto& row : admin.query(
           "SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND DB = " +
           admin.quote(database))) {
    try {
      admin.execute("KILL CONNECTION " + row.at(0).value_or("0"));
      ++killed;
    } catch (const db::db_error&) {
      // Gone meanwhile.
    }
  }
  ASSERT_GT(killed, 0);
  // A probe period (5 s) and then some: every answer must be 200.
  const auto until = steady::now() + 7s;
  int polls = 0;
  while (steady::now() < until) {
    http_client c(daemon.port(), 5s);
    const auto status = c.get("/readyz").status;
    ASSERT_EQ(status, 200u) << "after " << polls << " polls: the database never went away";
    ++polls;
    std::this_thread::sleep_for(20ms);
  }
}

}  // namespace
}  // namespace slotted::test
