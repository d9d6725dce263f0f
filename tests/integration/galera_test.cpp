// A 3-node Galera cluster on loopback (README "Production databases"): daemons spread
// over the nodes, each listing its own node first, under load on hot and uniform keys,
// while a node is SIGKILLed and rejoins by IST and a daemon is SIGKILLed and restarted
// from its WAL. Every node ends with the same totals, and every counter is between
// what was acknowledged and that plus what was in doubt (requests without a reply
// when their daemon was killed). Also: a node that rejects queries (1047) is left for
// the next host, and the daemon keeps flushing there.

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>

#include "db/repository.hpp"
#include "integration/load.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/galera_cluster.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;

sums node_totals(const galera_cluster& c, int node, const std::string& database) {
  sums totals;
  auto conn = c.connect(node, database);
  for (const auto& r : conn.query("SELECT record_type, record_id, CAST(SUM(count) AS SIGNED) "
                                  "FROM slotted_counters GROUP BY record_type, record_id")) {
    totals[{static_cast<std::uint32_t>(std::stoul(*r[0])), std::stoull(*r[1])}] = std::stoll(*r[2]);
  }
  return without_zeros(totals);
}

std::string daemon_config(const galera_cluster& c, const std::vector<int>& nodes, int instance,
                          const std::string& wal_dir) {
  std::string hosts;
  for (int n : nodes)
    hosts += (hosts.empty() ? "\"" : ", \"") + std::string("127.0.0.1:") +
             std::to_string(c.port(n)) + "\"";
  return "listen: {address: 127.0.0.1, port: 0}\n"
         "http: {threads: 2}\n"
         "instance_id: galera" +
         std::to_string(instance) +
         "\n"
         "accept_undeclared_types: true\n"
         "flush: {interval: 200ms, max_retry_backoff: 500ms}\n"
         "mysql: {hosts: [" +
         hosts +
         "], user: counterd, database: counters, connect_timeout: 2s}\n"
         "wal: {dir: " +
         wal_dir + ", fsync: always}\n";
}

double metric(std::uint16_t port, const std::string& series) {
  http_client client(port, 5s);
  return metric_value(client.get("/metrics").body, series);
}

std::string host_series(const galera_cluster& c, int node) {
  return "slotted_counterd_mysql_host_info{host=\"127.0.0.1:" + std::to_string(c.port(node)) +
         "\"}";
}

struct galera_setup {
  galera_cluster cluster{3};
  std::string wal_base;
  galera_setup() {
    wal_base = slotted::test::make_temp_dir("galera-wal");
    auto conn = cluster.connect(0);
    conn.execute("CREATE DATABASE counters");
    // Not SUPER: wsrep_reject_queries and read_only apply to it as to an application.
    conn.execute("CREATE USER counterd@'127.0.0.1'");
    conn.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON counters.* TO counterd@'127.0.0.1'");
    auto db = cluster.connect(0, "counters");
    db::migrate(db, "slotted_counters");
  }
  ~galera_setup() {
    std::error_code ignored;
    std::filesystem::remove_all(wal_base, ignored);
  }
};

TEST(Galera, NodeAndDaemonKilledUnderLoadTotalsExactOnEveryNode) {
  galera_setup g;
  auto& c = g.cluster;
  // Daemon i lists its own node first; daemon 1 lists only two nodes, so killing node 1
  // must move it to node 2 and it must keep flushing there.
  const std::vector<std::vector<int>> hosts{{0, 1, 2}, {1, 2}, {2, 0, 1}};
  std::vector<std::string> yaml;
  std::vector<std::unique_ptr<daemon_process>> daemons;
  for (int i = 0; i < 3; ++i) {
    yaml.push_back(daemon_config(c, hosts[i], i, g.wal_base + "/wal" + std::to_string(i)));
    daemons.push_back(std::make_unique<daemon_process>(yaml[i]));
  }
  for (int i = 0; i < 3; ++i) {
    const auto port = daemons[i]->port();
    ASSERT_TRUE(eventually([&] { return metric(port, host_series(c, i)) == 1; }, 30s))
        << "daemon " << i << " starts on its own node";
  }

  // Half the increments on 8 hot keys, half spread over 1500 keys; positive deltas, so
  // that acknowledged <= table <= acknowledged + in doubt says something per key.
  const auto uniform = random_keys(1500, UINT64_MAX, 41);
  std::vector<key> keys;
  for (std::size_t i = 0; i < 8; ++i)
    for (int r = 0; r < 190; ++r) keys.push_back(uniform[i]);
  keys.insert(keys.end(), uniform.begin(), uniform.end());

  sums acknowledged, in_doubt;
  std::mutex merge;
  const auto absorb = [&](const load_outcome& l) {
    std::lock_guard lock(merge);
    for (const auto& [k, v] : l.acknowledged) acknowledged[k] += v;
    for (const auto& [k, v] : l.in_doubt) in_doubt[k] += v;
  };
  std::array<std::atomic<bool>, 3> stop{};
  std::vector<std::thread> loads;
  const auto start_load = [&](int i) {
    loads.emplace_back([&, i, port = daemons[i]->port()] {
      load_options o;
      o.clients = 2;
      o.increments_per_client = 100'000'000;
      o.keys = keys;
      o.min_delta = 1;
      o.max_delta = 5;
      o.max_batch = 20;
      o.stop = &stop[i];
      absorb(run_load(port, o));
    });
  };
  for (int i = 0; i < 3; ++i) start_load(i);
  const auto rows_flushed = [&](int i) {
    return metric(daemons[i]->port(), "slotted_counterd_flush_rows_total");
  };
  const auto progress = [&](int i, double more) {
    const double before = rows_flushed(i);
    return eventually([&] { return rows_flushed(i) >= before + more; }, 60s);
  };
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(progress(i, 200)) << "daemon " << i;

  // Node 1 dies mid-load: daemon 1 moves to node 2 and keeps flushing through it.
  c.kill(1);
  ASSERT_TRUE(eventually([&] { return metric(daemons[1]->port(), host_series(c, 2)) == 1; }, 60s))
      << daemons[1]->log();
  EXPECT_EQ(metric(daemons[1]->port(), host_series(c, 1)), 0);
  ASSERT_TRUE(progress(1, 200)) << "daemon 1 flushes through node 2 while node 1 is down";
  {
    http_client client(daemons[1]->port());
    EXPECT_EQ(client.request("POST", "/v1/flush").status, 200u);
  }
  c.restart(1);  // by IST
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(progress(i, 200)) << "daemon " << i;

  // Daemon 2 dies mid-load; what it acknowledged is in its WAL.
  daemons[2]->signal(SIGKILL);
  EXPECT_EQ(daemons[2]->wait(10s), -SIGKILL);
  stop[2] = true;
  loads[2].join();
  daemons[2] = std::make_unique<daemon_process>(yaml[2]);
  stop[2] = false;
  start_load(2);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(progress(i, 200)) << "daemon " << i;

  for (auto& s : stop) s = true;
  for (auto& t : loads)
    if (t.joinable()) t.join();
  double conflicts = 0, rows = 0;
  for (int i = 0; i < 3; ++i) {
    http_client client(daemons[i]->port());
    ASSERT_TRUE(flush_until_ok(client)) << daemons[i]->log();
    const auto m = client.get("/metrics").body;
    conflicts += metric_value(m, "slotted_counterd_db_errors_total{kind=\"deadlock\"}");
    rows += metric_value(m, "slotted_counterd_flush_rows_total");
  }
  std::cout << "certification conflicts (deadlock errors) " << conflicts << " for " << rows
            << " rows flushed since the last start of each daemon\n";

  ASSERT_FALSE(acknowledged.empty());
  const auto totals = node_totals(c, 0, "counters");
  EXPECT_EQ(node_totals(c, 1, "counters"), totals);
  EXPECT_EQ(node_totals(c, 2, "counters"), totals);
  std::size_t exact = 0;
  for (const auto& [k, ack] : acknowledged) {
    const auto it = totals.find(k);
    const std::int64_t table = it == totals.end() ? 0 : it->second;
    const std::int64_t doubt = in_doubt.count(k) ? in_doubt.at(k) : 0;
    EXPECT_LE(ack, table) << "lost increments of (" << k.first << ", " << k.second << ")";
    EXPECT_LE(table, ack + doubt) << "doubled increments of (" << k.first << ", " << k.second
                                  << ")";
    exact += table == ack;
  }
  for (const auto& [k, v] : totals)
    EXPECT_TRUE(acknowledged.count(k) || in_doubt.count(k)) << "a counter nobody sent";
  std::cout << exact << " of " << acknowledged.size() << " counters equal what was acknowledged\n";

  for (auto& d : daemons) {
    d->signal(SIGTERM);
    EXPECT_EQ(d->wait(60s), 0) << d->log();
  }
}

TEST(Galera, ANodeRejectingQueriesIsLeftForTheNext) {
  galera_setup g;
  auto& c = g.cluster;
  daemon_process daemon(daemon_config(c, {0, 1}, 7, g.wal_base + "/wal7"));
  http_client client(daemon.port());
  ASSERT_TRUE(flush_until_ok(client));
  ASSERT_EQ(metric(daemon.port(), host_series(c, 0)), 1);

  // 1047 on every statement, while the node still accepts connections.
  c.connect(0).execute("SET GLOBAL wsrep_reject_queries = ALL");
  ASSERT_EQ(client.post_json("/v1/increments", R"({"record_type": 1, "record_id": 5, "delta": 3})")
                .status,
            202u);
  ASSERT_TRUE(flush_until_ok(client, 30s)) << daemon.log();
  EXPECT_EQ(metric(daemon.port(), host_series(c, 1)), 1) << daemon.log();
  EXPECT_EQ(c.query_int(1, "counters", "SELECT SUM(count) FROM slotted_counters"), 3);

  // Back to normal: the daemon stays where it is (no flapping).
  c.connect(0).execute("SET GLOBAL wsrep_reject_queries = NONE");
  ASSERT_EQ(client.post_json("/v1/increments", R"({"record_type": 1, "record_id": 5, "delta": 4})")
                .status,
            202u);
  ASSERT_TRUE(flush_until_ok(client));
  EXPECT_EQ(metric(daemon.port(), host_series(c, 1)), 1);
  EXPECT_EQ(c.query_int(0, "counters", "SELECT SUM(count) FROM slotted_counters"), 7);
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(30s), 0);
}

}  // namespace
}  // namespace slotted::test
