// mysql.hosts failover (README "Production databases"), made deterministic with two
// loopback proxies in front of one MariaDB: each proxy is a "host", and taking a proxy
// down is that host failing. The ledger lives behind both, as it lives in a cluster.
// The Galera test (galera_test.cpp) does the same against real cluster nodes.

#include <gtest/gtest.h>

#include "integration/load.hpp"
#include "support/daemon_process.hpp"
#include "support/fault_proxy.hpp"
#include "support/http_client.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;

double host_in_use(http_client& client, const fault_proxy& proxy) {
  return metric_value(
      client.get("/metrics").body,
      "slotted_counterd_mysql_host_info{host=\"127.0.0.1:" + std::to_string(proxy.port()) + "\"}");
}

sums merge(sums a, const sums& b) {
  for (const auto& [k, v] : b) a[k] += v;
  return a;
}

TEST(Failover, MovesOnOnlyWhenTheCurrentHostFailsAndResolvesTheBatchInDoubt) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  fault_proxy a(server.port()), b(server.port());
  auto cfg = test_config(server, database);
  cfg.mysql.socket.clear();
  cfg.mysql.hosts = {{"127.0.0.1", a.port()}, {"127.0.0.1", b.port()}};
  cfg.flush.interval = 1h;  // only explicit flushes
  in_process_daemon daemon(cfg);
  http_client client(daemon.port());
  ASSERT_TRUE(flush_until_ok(client));
  EXPECT_EQ(host_in_use(client, a), 1) << "the first host listed is used first";
  EXPECT_EQ(host_in_use(client, b), 0);

  const auto o = random_load(2, 1500, 200, 31);
  sums acknowledged;
  const auto load_round = [&] {
    const auto l = run_load(daemon.port(), o);
    EXPECT_EQ(l.failed_requests, 0u);
    acknowledged = merge(acknowledged, l.acknowledged);
  };

  // A commits a batch but its reply is lost, then A goes down: the batch is in doubt
  // and is resolved against the ledger through B, not applied twice.
  load_round();
  a.arm("COMMIT", fault_proxy::cut::after_statement, 1);
  EXPECT_EQ(client.request("POST", "/v1/flush").status, 503u);
  a.set_down(true);
  ASSERT_TRUE(flush_until_ok(client));
  EXPECT_EQ(host_in_use(client, b), 1);
  EXPECT_EQ(host_in_use(client, a), 0);
  EXPECT_EQ(metric_value(client.get("/metrics").body,
                         "slotted_counterd_flush_batches_already_applied_total"),
            1);
  EXPECT_EQ(read_table(server, database).totals, without_zeros(acknowledged));

  // A is back, and B loses a connection while still answering: the daemon stays on B
  // (no flapping back to the earlier host).
  a.set_down(false);
  load_round();
  b.arm("INSERT INTO `slotted_counters`", fault_proxy::cut::before_statement, 1);
  EXPECT_EQ(client.request("POST", "/v1/flush").status, 503u);
  ASSERT_TRUE(flush_until_ok(client));
  EXPECT_EQ(b.cuts(), 1);
  EXPECT_EQ(host_in_use(client, b), 1) << "an earlier host is not retried while this one works";

  // B fails: the daemon wraps around to A.
  load_round();
  b.set_down(true);
  ASSERT_TRUE(flush_until_ok(client));
  EXPECT_EQ(host_in_use(client, a), 1);
  EXPECT_EQ(read_table(server, database).totals, without_zeros(acknowledged));
  EXPECT_EQ(daemon.stop(), 0);
}

TEST(Failover, EveryHostDownIsA503NamingEachHost) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  fault_proxy a(server.port()), b(server.port());
  a.set_down(true);
  b.set_down(true);
  auto cfg = test_config(server, database);
  cfg.mysql.socket.clear();
  cfg.mysql.hosts = {{"127.0.0.1", a.port()}, {"127.0.0.1", b.port()}};
  cfg.flush.interval = 1h;
  in_process_daemon daemon(cfg);
  http_client client(daemon.port());
  const auto r = client.request("POST", "/v1/flush");
  EXPECT_EQ(r.status, 503u);
  EXPECT_NE(r.body.find("127.0.0.1:" + std::to_string(a.port())), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("127.0.0.1:" + std::to_string(b.port())), std::string::npos) << r.body;
  EXPECT_EQ(client.get("/readyz").status, 503u);
  b.set_down(false);
  ASSERT_TRUE(flush_until_ok(client));
  EXPECT_EQ(host_in_use(client, b), 1);
  EXPECT_EQ(daemon.stop(), 0);
}

}  // namespace
}  // namespace slotted::test
