// SIGTERM under load: the real binary stops accepting, answers what is in flight,
// flushes, exits 0, and the database holds exactly what was acknowledged.

#include <gtest/gtest.h>
#include <signal.h>

#include "integration/load.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/joined_thread.hpp"

namespace slotted::test {
namespace {

TEST(Shutdown, SigtermUnderLoadLosesNothing) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  daemon_process daemon(daemon_yaml(server, database,
                                    "instance_id: shutdown-test\n"
                                    "accept_undeclared_types: true\n"
                                    "flush: {interval: 300ms}\n"
                                    "shutdown_timeout: 20s\n"));

  std::atomic<bool> stop{false};
  load_options o;
  o.clients = 4;
  o.increments_per_client = 10'000'000;  // until stopped
  o.keys = random_keys(200, UINT64_MAX, 3);
  o.stop = &stop;
  load_outcome load;
  joined_thread clients(stop, [&] { load = run_load(daemon.port(), o); });

  // Wait until the load is well under way (a condition on the daemon's own metric).
  http_client probe(daemon.port());
  eventually(
      [&] {
        return metric_value(probe.get("/metrics").body,
                            "slotted_counterd_increments_accepted_total") >= 20000;
      },
      std::chrono::seconds(60));
  daemon.signal(SIGTERM);
  const int code = daemon.wait(std::chrono::seconds(30));
  stop = true;
  clients.join();

  EXPECT_EQ(code, 0) << daemon.log();
  EXPECT_GE(load.accepted_increments, 20000u);
  const auto st = read_table(server, database);
  EXPECT_EQ(st.totals, without_zeros(load.acknowledged));
  EXPECT_NE(daemon.log().find("shutdown complete"), std::string::npos) << daemon.log();
}

}  // namespace
}  // namespace slotted::test
