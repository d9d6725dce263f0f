// Flushing over several connections (README: Design, flushing over several
// connections): batches in disjoint key ranges commit side by side, a batch that shares
// keys with an older one waits for it, and every guarantee of the one-connection flush
// holds: exact totals, exact reads while batches are in flight, one ledger row per
// batch, in-doubt batches resolved after a cut, nothing lost or doubled by a SIGKILL.

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <random>
#include <regex>
#include <thread>

#include "flush/writer_threads.hpp"
#include "integration/load.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/fault_proxy.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {
namespace {

// Inserts counter (1, 5) and holds its row in a transaction of the test (returned):
// a batch holding it waits until the connection commits, rolls back or closes.
db::connection hold_counter_5(const mariadb_server& server, const std::string& database) {
  auto holder = server.connect(database);
  holder.execute(
      "INSERT INTO slotted_counters (record_type, record_id, slot, count) VALUES (1, 5, 0, 0)");
  holder.execute("START TRANSACTION");
  holder.execute(
      "SELECT count FROM slotted_counters WHERE record_type = 1 AND record_id = 5 AND slot = 0 "
      "FOR UPDATE");
  return holder;
}

// One increment of each of counters (1, 1) .. (1, 100), in one request; a failure
// names the answer (ASSERT_TRUE on it: the test cannot go on without them).
testing::AssertionResult post_ids_1_to_100(http_client& client) {
  std::string body = "[";
  for (int id = 1; id <= 100; ++id)
    body += std::string(id > 1 ? "," : "") + R"({"record_type": 1, "record_id": )" +
            std::to_string(id) + "}";
  const auto reply = client.post_json("/v1/increments", body + "]");
  if (reply.status == 202u) return testing::AssertionSuccess();
  return testing::AssertionFailure()
         << "POST /v1/increments answered " << reply.status << ": " << reply.body;
}

// A keyed request on counters (1, 5) and (1, 60): one keyed batch spanning [5, 60].
unsigned post_keyed_5_and_60(http_client& client, const std::string& key) {
  return client
      .request("POST", "/v1/increments",
               R"([{"record_type": 1, "record_id": 5, "delta": 10},)"
               R"({"record_type": 1, "record_id": 60, "delta": 10}])",
               "application/json", {{"Idempotency-Key", key}})
      .status;
}

using namespace std::chrono_literals;

config::daemon_config parallel_config(mariadb_server& server, const std::string& database,
                                      unsigned connections) {
  auto cfg = test_config(server, database);
  cfg.flush.connections = connections;
  cfg.mysql.pool_size = connections + 1;
  return cfg;
}

std::string counter_path(std::uint32_t type, std::uint64_t id) {
  return "/v1/counters/" + std::to_string(type) + "/" + std::to_string(id);
}

class ParallelFlush : public ::testing::TestWithParam<unsigned> {};

// Load from several clients while the flusher writes over 2 or 4 connections every
// 100 ms, and GETs of counters whose acknowledged totals the test knows at every moment:
// a read that counted a batch in flight twice (table and queue) or not at all would
// fall outside [acknowledged before the GET, sent before its answer].
TEST_P(ParallelFlush, TotalsAndConcurrentReadsAreExact) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  auto cfg = parallel_config(server, database, GetParam());
  cfg.flush.interval = 100ms;
  cfg.flush.slots = 16;
  cfg.flush.max_rows_per_statement = 40;  // many batches per cycle
  in_process_daemon daemon(cfg);

  // Tracked counters, spread over the key space so that they fall into different
  // batches: one writer posts to them in turn, one reader reads them.
  constexpr std::uint32_t tracked_type = 9;
  constexpr int tracked = 16;
  const auto tracked_id = [](int i) { return static_cast<std::uint64_t>(i) * 1000003; };
  std::array<std::atomic<std::int64_t>, tracked> sent{}, acked{};
  std::atomic<bool> stop{false};
  std::atomic<int> failed_posts{0}, exact_reads{0}, bad_reads{0};
  std::thread writer([&] {
    http_client c(daemon.port());
    for (int n = 0; !stop; ++n) {
      const int i = n % tracked;
      sent[i] += 1;
      const auto r = c.post_json("/v1/increments", R"({"record_type": 9, "record_id": )" +
                                                       std::to_string(tracked_id(i)) + "}");
      if (r.status == 202) {
        acked[i] += 1;
      } else {
        ++failed_posts;
      }
    }
  });
  std::thread reader([&] {
    http_client c(daemon.port());
    for (int n = 0; !stop; ++n) {
      const int i = n % tracked;
      const auto low = acked[i].load();
      const auto r = c.get(counter_path(tracked_type, tracked_id(i)));
      const auto high = sent[i].load();
      if (r.status != 200) continue;  // 503: being written, retry later
      const auto count = json_int(r.body, "count");
      if (count < low || count > high) {
        ++bad_reads;
        ADD_FAILURE() << "counter " << i << ": read " << count << ", acknowledged " << low
                      << " before the read, sent " << high << " before its answer";
      }
      ++exact_reads;
    }
  });

  // The most batches seen in flight at once (a sample: the gauge at each scrape).
  double most_in_flight = 0;
  std::thread watcher([&] {
    http_client c(daemon.port());
    while (!stop) {
      most_in_flight = std::max(
          most_in_flight,
          metric_value(c.get("/metrics").body, "slotted_counterd_flush_batches_in_flight"));
    }
  });

  load_options o = random_load(4, 8000, 3000, 21);
  const auto load = run_load(daemon.port(), o);
  stop = true;
  writer.join();
  reader.join();
  watcher.join();
  std::printf("exact reads %d, most batches in flight %.0f\n", exact_reads.load(), most_in_flight);
  EXPECT_GE(most_in_flight, 2) << "never two batches in flight at once";
  EXPECT_LE(most_in_flight, GetParam());
  EXPECT_EQ(load.failed_requests, 0u);
  EXPECT_EQ(failed_posts.load(), 0);
  EXPECT_EQ(bad_reads.load(), 0);
  // Reads that proved something: there are quiet moments between cycles.
  EXPECT_GT(exact_reads.load(), 0);

  http_client client(daemon.port());
  ASSERT_TRUE(flush_until_ok(client));
  sums expected = without_zeros(load.acknowledged);
  for (int i = 0; i < tracked; ++i) {
    if (acked[i] > 0) expected[{tracked_type, tracked_id(i)}] = acked[i];
  }
  const auto st = read_table(server, database);
  EXPECT_EQ(st.totals, expected);
  EXPECT_LT(st.max_slot, 16);
  // Every batch committed once: a ledger row each, as many as statements.
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counterd_ledger"),
            static_cast<std::int64_t>(metric_value(client.get("/metrics").body,
                                                   "slotted_counterd_flush_statements_total")));
  EXPECT_EQ(metric_value(client.get("/metrics").body, "slotted_counterd_flush_batches_in_flight"),
            0);
  EXPECT_EQ(daemon.stop(), 0);
}

INSTANTIATE_TEST_SUITE_P(Connections, ParallelFlush, ::testing::Values(2u, 4u));

// The proof that a second connection writes: the first batch of a flush waits on a row
// another transaction holds, and the batches of the other key ranges commit meanwhile
// (with one connection nothing passes the first batch). A keyed batch that shares the
// locked counter waits behind it: keyed batches go by key range, and the older commits
// first. Released, the flush ends with every batch written once.
TEST(ParallelFlushOrder, DisjointBatchesPassABlockedOneAndOverlappingOnesWait) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  auto cfg = parallel_config(server, database, 2);
  cfg.flush.interval = 1h;  // only explicit flushes
  cfg.flush.slots = 1;
  cfg.flush.max_rows_per_statement = 10;
  in_process_daemon daemon(cfg);
  http_client client(daemon.port());

  // Counter (1, 5) exists; a transaction of the test holds its row.
  auto holder = hold_counter_5(server, database);

  ASSERT_TRUE(post_ids_1_to_100(client));
  // A keyed request on the locked counter and one far from it: one keyed batch,
  // [5, 60], behind the blocked batch [1, 10].
  ASSERT_EQ(post_keyed_5_and_60(client, "order-1"), 202u);

  auto flushed = std::async(std::launch::async, [&] {
    http_client c(daemon.port(), 120s);
    return c.request("POST", "/v1/flush");
  });
  const auto sum = [&](const std::string& where) {
    return server.query_int(database,
                            "SELECT CAST(COALESCE(SUM(count), 0) AS SIGNED) FROM slotted_counters "
                            "WHERE " +
                                where);
  };
  // The nine other plain batches commit while the first one waits for the lock.
  EXPECT_TRUE(eventually([&] { return sum("record_id > 10") == 90; }, 30s))
      << "batches of other key ranges did not commit beside the blocked one";
  EXPECT_EQ(sum("record_id <= 10"), 0) << "the blocked batch committed through a lock";
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counterd_idempotency_keys"), 0)
      << "the keyed batch overlapping the blocked one did not wait for it";
  EXPECT_EQ(metric_value(client.get("/metrics").body, "slotted_counterd_flush_batches_in_flight"),
            1);
  EXPECT_EQ(flushed.wait_for(0s), std::future_status::timeout)
      << "the flush answered with a batch still in flight";

  holder.execute("ROLLBACK");
  const auto reply = flushed.get();
  ASSERT_EQ(reply.status, 200u) << reply.body;
  EXPECT_EQ(json_int(reply.body, "flushed_rows"), 102);
  EXPECT_EQ(sum("record_id <= 10"), 10 + 10);
  EXPECT_EQ(sum("record_id > 10"), 90 + 10);
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counterd_ledger"), 11);
  EXPECT_EQ(daemon.stop(), 0);
}

// The stop deadline holds for every writer: past it none starts another batch, even one
// that only waited for a batch in flight. The first batch waits on a row the test holds
// past the deadline; the keyed batch behind it is never started, and what it holds is
// reported unwritten (exit 1, no WAL).
TEST(ParallelFlushOrder, NoWriterStartsABatchPastTheStopDeadline) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  auto cfg = parallel_config(server, database, 2);
  cfg.flush.interval = 1h;
  cfg.flush.slots = 1;
  cfg.flush.max_rows_per_statement = 10;
  cfg.shutdown_timeout = 2s;
  auto daemon = std::make_unique<in_process_daemon>(cfg);
  http_client client(daemon->port());

  auto holder = hold_counter_5(server, database);
  ASSERT_TRUE(post_ids_1_to_100(client));
  ASSERT_EQ(post_keyed_5_and_60(client, "late-1"), 202u);

  const auto stop_started = std::chrono::steady_clock::now();
  auto stopped = std::async(std::launch::async, [&] { return daemon->stop(); });
  const auto sum = [&](const std::string& where) {
    return server.query_int(database,
                            "SELECT CAST(COALESCE(SUM(count), 0) AS SIGNED) FROM slotted_counters "
                            "WHERE " +
                                where);
  };
  ASSERT_TRUE(eventually([&] { return sum("record_id > 10") == 90; }, 30s));
  // Past the deadline (shutdown_timeout from the stop), the blocked batch goes through.
  std::this_thread::sleep_until(stop_started + cfg.shutdown_timeout + 500ms);
  EXPECT_EQ(stopped.wait_for(0s), std::future_status::timeout)
      << "the stop returned with a batch in flight";
  holder.execute("ROLLBACK");
  EXPECT_EQ(stopped.get(), 1) << "the keyed batch's counters must be reported unwritten";
  EXPECT_EQ(sum("record_id <= 10"), 10);  // the batch in flight finished
  EXPECT_EQ(sum("record_id > 10"), 90);   // the keyed batch (+10 on 60) never started
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counterd_idempotency_keys"),
            0);
}

// A writer beside the cycle's that the server refuses a connection (the account's
// connection limit, or max_connections) only means fewer writers: the cycle's own
// connection writes every batch and the flush succeeds, an error to no one. A
// failed flush here would back off and leave all but a batch or so per cycle queued.
TEST(ParallelFlushLimits, AWriterRefusedAConnectionDoesNotFailTheFlush) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  // Two connections for the account (the probe's and the cycle's, or two of the pool):
  // of the three extra writers at least two are refused.
  const std::string user = "limited_" + database;
  auto admin = server.connect();
  admin.execute("CREATE USER '" + user + "'@'localhost' WITH MAX_USER_CONNECTIONS 2");
  admin.execute("GRANT ALL ON `" + database + "`.* TO '" + user + "'@'localhost'");
  auto cfg = parallel_config(server, database, 4);
  cfg.mysql.user = user;
  cfg.flush.interval = 1h;  // only explicit flushes
  cfg.flush.max_rows_per_statement = 10;
  in_process_daemon daemon(cfg);
  http_client client(daemon.port());

  ASSERT_TRUE(post_ids_1_to_100(client));
  const auto reply = client.request("POST", "/v1/flush");
  EXPECT_EQ(reply.status, 200u) << reply.body;
  EXPECT_EQ(server.query_int(
                database, "SELECT CAST(COALESCE(SUM(count), 0) AS SIGNED) FROM slotted_counters"),
            100);
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counterd_ledger"), 10);
  // Not /readyz: which of the probe and a writer got the second connection is a race,
  // and a refused probe is not ready, rightly.
  EXPECT_EQ(metric_value(client.get("/metrics").body,
                         R"(slotted_counterd_flushes_total{result="error"})"),
            0);
  EXPECT_EQ(daemon.stop(), 0);
}

// The extra writers are the flusher's own threads, started once with it (flush.connections
// - 1 of them) and stopped with it, not new threads every round: after several flushes
// over 3 connections, each with more batches than writers, at most 2 were ever started,
// and every batch was written once.
TEST(ParallelFlushWriters, WriterThreadsAreStartedOnceNotPerRound) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  auto cfg = parallel_config(server, database, 3);
  cfg.flush.interval = 1h;  // only explicit flushes
  cfg.flush.max_rows_per_statement = 10;
  const auto before = flush::writer_threads::started_total();
  in_process_daemon daemon(cfg);
  http_client client(daemon.port());

  constexpr int rounds = 4;
  for (int i = 0; i < rounds; ++i) {
    ASSERT_TRUE(post_ids_1_to_100(client));
    const auto reply = client.request("POST", "/v1/flush");
    ASSERT_EQ(reply.status, 200u) << reply.body;
    EXPECT_EQ(json_int(reply.body, "flushed_rows"), 100);
  }
  EXPECT_LE(flush::writer_threads::started_total() - before, 2u)
      << "writer threads were started per round";
  EXPECT_EQ(server.query_int(
                database, "SELECT CAST(COALESCE(SUM(count), 0) AS SIGNED) FROM slotted_counters"),
            100 * rounds);
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counterd_ledger"),
            10 * rounds);
  EXPECT_EQ(daemon.stop(), 0);
  EXPECT_LE(flush::writer_threads::started_total() - before, 2u);
}

// A connection cut after COMMIT reached the server (its outcome unknown to the daemon)
// while four writers run: the cycle fails, the other writers start nothing more, and the
// next cycle finds the batch in the ledger and applies nothing twice.
TEST(ParallelFlushFaults, ACommitCutInDoubtIsResolvedOnceAcrossWriters) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  fault_proxy proxy(server.port());
  auto cfg = parallel_config(server, database, 4);
  cfg.mysql.socket.clear();
  cfg.mysql.host = "127.0.0.1";
  cfg.mysql.port = proxy.port();
  cfg.flush.interval = 1h;
  cfg.flush.max_rows_per_statement = 50;
  in_process_daemon daemon(cfg);
  http_client client(daemon.port());
  ASSERT_TRUE(flush_until_ok(client));

  const auto load = run_load(daemon.port(), random_load(4, 2000, 600, 8));
  ASSERT_EQ(load.failed_requests, 0u);
  proxy.arm("COMMIT", fault_proxy::cut::after_statement, 1);
  const auto first = client.request("POST", "/v1/flush");
  EXPECT_EQ(first.status, 503u) << "the cut must make this flush fail: " << first.body;
  EXPECT_EQ(proxy.cuts(), 1);
  const sums nonzero = without_zeros(load.acknowledged);
  const auto& [k, v] = *nonzero.begin();
  ASSERT_TRUE(flush_until_ok(client));
  EXPECT_EQ(read_table(server, database).totals, nonzero);
  const auto m = client.get("/metrics").body;
  EXPECT_EQ(metric_value(m, "slotted_counterd_flush_batches_already_applied_total"), 1);
  // 600 keys in batches of 50: one ledger row each, whatever the cut.
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counterd_ledger"), 12);
  const auto reading = client.get(counter_path(k.first, k.second));
  ASSERT_EQ(reading.status, 200u) << reading.body;
  EXPECT_EQ(json_int(reading.body, "count"), v);
  EXPECT_EQ(daemon.stop(), 0);
}

// SIGKILL at random moments while four connections flush small batches, with the WAL
// on: nothing acknowledged is lost, nothing applied twice.
TEST(ParallelFlushWal, SigkillDuringParallelFlushesLosesNothingAndDoublesNothing) {
  namespace fs = std::filesystem;
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  const std::string root = make_temp_dir("parflush");
  const std::string yaml = daemon_yaml(server, database,
                                       "instance_id: par-test\n"
                                       "accept_undeclared_types: true\n"
                                       "flush: {interval: 100ms, connections: 4, "
                                       "max_rows_per_statement: 5}\n"
                                       "wal: {dir: " +
                                           root + "/wal, fsync: always}\n",
                                       "pool_size: 5");
  load_options o = random_load(4, SIZE_MAX, 2000, 3);  // until stopped
  o.max_batch = 8;
  o.min_delta = 1;  // positive: acknowledged <= table <= acknowledged + unanswered
  o.max_delta = 5;
  sums acknowledged, unanswered;
  std::int64_t replayed_batches = 0;
  const auto count_replay = [&](const std::string& log) {
    static const std::regex replayed(
        R"(WAL replayed from \d+ segments: \d+ pending counters and (\d+) logged batches)");
    std::smatch m;
    if (std::regex_search(log, m, replayed)) replayed_batches += std::stoll(m[1]);
  };
  std::mt19937 rng(7);
  int parallel_kills = 0;  // kills that came with two batches or more in flight
  for (int round = 0; round < 10; ++round) {
    daemon_process daemon(yaml);
    std::atomic<bool> stop{false};
    o.stop = &stop;
    auto load = std::async(std::launch::async, [&] { return run_load(daemon.port(), o); });
    // A random moment at which batches are being written over two connections or more.
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng() % 300));
    http_client watcher(daemon.port(), 5s);
    parallel_kills += eventually(
        [&] {
          return metric_value(watcher.get("/metrics").body,
                              "slotted_counterd_flush_batches_in_flight") >= 2;
        },
        10s, 1ms);
    daemon.signal(SIGKILL);
    EXPECT_EQ(daemon.wait(10s), -SIGKILL);
    count_replay(daemon.log());
    stop = true;
    // Requests refused after the kill count as unanswered too: a looser upper bound.
    const auto outcome = load.get();
    for (const auto& [k, v] : outcome.acknowledged) acknowledged[k] += v;
    for (const auto& [k, v] : outcome.in_doubt) unanswered[k] += v;
  }
  daemon_process last(yaml);
  http_client c(last.port());
  ASSERT_TRUE(flush_until_ok(c));
  last.signal(SIGTERM);
  EXPECT_EQ(last.wait(30s), 0) << last.log();
  count_replay(last.log());
  // Kills landed while logged batches were still being written: replay sent them
  // again, and only the ledger kept those that had committed from applying twice.
  EXPECT_GT(replayed_batches, 0) << "no kill landed during a flush";
  EXPECT_GT(parallel_kills, 0) << "no kill came while two connections were writing";
  std::printf("kills: 10, %d with two batches or more in flight; replayed %lld batches\n",
              parallel_kills, static_cast<long long>(replayed_batches));
  const auto table = read_table(server, database).totals;
  std::size_t lost = 0, doubled = 0;
  std::int64_t total = 0;
  for (const auto& k : o.keys) {
    const auto at = [&](const sums& m) {
      const auto it = m.find(k);
      return it == m.end() ? std::int64_t{0} : it->second;
    };
    const auto in_db = at(table), ack = at(acknowledged), doubt = at(unanswered);
    if (in_db < ack) ++lost;
    if (in_db > ack + doubt) ++doubled;
    total += ack;
  }
  EXPECT_EQ(lost, 0u) << "counters missing an acknowledged increment";
  EXPECT_EQ(doubled, 0u) << "counters with an increment applied twice";
  EXPECT_LE(table.size(), o.keys.size());
  EXPECT_GT(total, 1000);
  fs::remove_all(root);
}

}  // namespace
}  // namespace slotted::test
