// bench/galera: conflict behaviour on a 3-node Galera cluster on loopback (see
// bench/galera for how to run it, bench/RESULTS.md for figures).
//
// Modes, each for --seconds on the same cluster, every writer on its own node:
//   direct-slotted  the seed's pattern: INSERT ... slot = FLOOR(RAND()*100) ... ON
//                   DUPLICATE KEY UPDATE count = count + 1, one event per statement
//   direct-update   the seed's hot row: UPDATE ... SET count = count + 1
//   flush-row / flush-batch  the daemon's flush transaction (ledger row + one sorted
//                   multi-row upsert) from one writer per node, slots drawn per row
//                   or once per batch: what the slot choice does to certification
//   daemons         three daemons (Release binary), one per node listing its own node
//                   first, single-event POSTs; events/s counts what was acknowledged
//                   AND is in the table (the final flushes are inside the window)
//   daemons-uniform the same, record_id uniform over --keys counters: every flush
//                   writes thousands of rows that the other daemons also write
// All increments go to one hot counter (direct modes, daemons) or uniformly to
// --keys counters (flush modes, daemons-uniform). Every mode checks that the table holds exactly
// what succeeded. On 2 shared cores this measures conflicts, not scaling.

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "db/repository.hpp"
#include "model/errors.hpp"
#include "support/commit_rows.hpp"
#include "support/daemon_process.hpp"
#include "support/galera_cluster.hpp"
#include "support/http_client.hpp"

namespace {

using namespace slotted;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

struct options {
  int seconds = 10;
  int clients = 8;  // per node (direct) or per daemon (HTTP)
  int keys = 20000;
  int batch_rows = 1000;
  std::string only;  // run one mode
};

struct outcome {
  std::uint64_t ok = 0, aborted = 0, other_errors = 0;
  double seconds = 0;
};

std::int64_t table_sum(const test::galera_cluster& c, const std::string& sql) {
  return c.query_int(0, "bench", sql);
}

std::int64_t cert_failures(const test::galera_cluster& c) {
  std::int64_t total = 0;
  for (int n = 0; n < c.size(); ++n)
    total += c.status(n, "wsrep_local_cert_failures") + c.status(n, "wsrep_local_bf_aborts");
  return total;
}

db::connect_options node_options(const test::galera_cluster& c, int node) {
  db::connect_options o;
  o.host = "127.0.0.1";
  o.port = c.port(node);
  o.user = "root";
  o.database = "bench";
  o.tls.mode = db::tls_mode::disabled;
  return o;
}

// `clients` writers per node run `statement(conn, rng)` for `seconds`; a 1213 (or
// another wsrep abort) counts as aborted, anything else as another error.
template <typename F>
outcome run_writers(const test::galera_cluster& c, int clients, int seconds, F statement) {
  outcome total;
  std::mutex merge;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  const auto started = clock_type::now();
  for (int node = 0; node < c.size(); ++node) {
    for (int k = 0; k < clients; ++k) {
      threads.emplace_back([&, node, k] {
        outcome mine;
        std::mt19937_64 rng(node * 1000 + k);
        std::optional<db::connection> conn;
        while (!stop) {
          try {
            if (!conn) conn.emplace(node_options(c, node));
            mine.ok += statement(*conn, rng);
          } catch (const db::db_error& e) {
            if (e.kind() == db::error_kind::deadlock)
              ++mine.aborted;
            else
              ++mine.other_errors;
            if (e.connection_lost()) conn.reset();
            try {
              if (conn) conn->execute("ROLLBACK");
            } catch (const db::db_error&) {
              conn.reset();
            }
          }
        }
        std::lock_guard lock(merge);
        total.ok += mine.ok;
        total.aborted += mine.aborted;
        total.other_errors += mine.other_errors;
      });
    }
  }
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  total.seconds = std::chrono::duration<double>(clock_type::now() - started).count();
  return total;
}

void report(const char* mode, const outcome& o, const std::string& extra) {
  const double attempts = static_cast<double>(o.ok + o.aborted);
  std::printf("%-15s %10.0f events/s  aborted %5.1f%%  (ok %llu, aborted %llu, other %llu)%s\n",
              mode, o.ok / o.seconds, attempts > 0 ? 100.0 * o.aborted / attempts : 0.0,
              static_cast<unsigned long long>(o.ok), static_cast<unsigned long long>(o.aborted),
              static_cast<unsigned long long>(o.other_errors), extra.c_str());
  std::fflush(stdout);
}

bool wanted(const options& opt, const char* mode) {
  return opt.only.empty() || opt.only == mode;
}

int run(const options& opt) {
  std::fprintf(stderr, "bringing up a 3-node Galera cluster on loopback...\n");
  test::galera_cluster c(3);
  {
    auto conn = c.connect(0);
    conn.execute("CREATE DATABASE bench");
    auto db = c.connect(0, "bench");
    db::migrate(db, "slotted_counters");
    db.execute("CREATE TABLE hot_row (id INT PRIMARY KEY, count BIGINT NOT NULL)");
    db.execute("INSERT INTO hot_row VALUES (1, 0)");
  }
  std::printf("3 nodes, %d clients per node/daemon, %d s per mode\n", opt.clients, opt.seconds);
  int failures = 0;
  const auto check = [&](const char* what, std::int64_t table, std::int64_t expected) {
    if (table != expected) {
      ++failures;
      std::printf("  MISMATCH %s: table %lld, expected %lld\n", what, static_cast<long long>(table),
                  static_cast<long long>(expected));
    }
  };

  if (wanted(opt, "direct-slotted")) {
    const auto before = cert_failures(c);
    const auto o = run_writers(c, opt.clients, opt.seconds, [](db::connection& conn, auto&) {
      conn.execute(
          "INSERT INTO slotted_counters (record_type, record_id, slot, count) VALUES "
          "(1, 1, FLOOR(RAND() * 100), 1) ON DUPLICATE KEY UPDATE count = count + 1");
      return 1;
    });
    report("direct-slotted", o,
           "  cert failures+bf aborts " + std::to_string(cert_failures(c) - before));
    check("direct-slotted",
          table_sum(c, "SELECT SUM(count) FROM slotted_counters WHERE record_type = 1"),
          static_cast<std::int64_t>(o.ok));
  }
  if (wanted(opt, "direct-update")) {
    const auto before = cert_failures(c);
    const auto o = run_writers(c, opt.clients, opt.seconds, [](db::connection& conn, auto&) {
      conn.execute("UPDATE hot_row SET count = count + 1 WHERE id = 1");
      return 1;
    });
    report("direct-update", o,
           "  cert failures+bf aborts " + std::to_string(cert_failures(c) - before));
    check("direct-update", table_sum(c, "SELECT count FROM hot_row WHERE id = 1"),
          static_cast<std::int64_t>(o.ok));
  }
  for (const bool per_batch : {false, true}) {
    const char* mode = per_batch ? "flush-batch" : "flush-row";
    if (!wanted(opt, mode)) continue;
    const auto record_type = per_batch ? 3u : 2u;
    const auto before = cert_failures(c);
    std::atomic<std::uint64_t> seq{0}, batches{0};
    // One writer per node, as one daemon per node flushes.
    const auto o = run_writers(c, 1, opt.seconds, [&](db::connection& conn, std::mt19937_64& rng) {
      std::vector<std::uint64_t> ids(opt.batch_rows);
      for (auto& id : ids) id = rng() % opt.keys;
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      const unsigned batch_slot = rng() % 100;
      std::vector<db::counter_row> rows;
      for (auto id : ids)
        rows.push_back(
            {record_type, id, static_cast<std::uint16_t>(per_batch ? batch_slot : rng() % 100), 1});
      const db::batch_identity id{"bench", record_type, ++seq};
      test::commit_rows(conn, "slotted_counters", id, rows);
      ++batches;
      return static_cast<int>(rows.size());  // rows (= events) committed
    });
    const auto failures_delta = cert_failures(c) - before;
    std::printf(
        "%-14s %10.0f rows/s  %llu batches committed, %llu aborted by certification "
        "(%.1f%% of attempts; server cert failures+bf aborts %lld)\n",
        mode, o.ok / o.seconds, static_cast<unsigned long long>(batches.load()),
        static_cast<unsigned long long>(o.aborted),
        100.0 * o.aborted / std::max<double>(1, batches + o.aborted),
        static_cast<long long>(failures_delta));
    check(mode,
          table_sum(c, "SELECT SUM(count) FROM slotted_counters WHERE record_type = " +
                           std::to_string(record_type)),
          static_cast<std::int64_t>(o.ok));
  }
  for (const bool uniform : {false, true}) {
    const char* mode = uniform ? "daemons-uniform" : "daemons";
    const std::uint32_t record_type = uniform ? 5 : 4;
    if (!wanted(opt, mode)) continue;
    std::vector<std::unique_ptr<test::daemon_process>> daemons;
    for (int i = 0; i < 3; ++i) {
      std::string hosts;
      for (int k = 0; k < 3; ++k)
        hosts += std::string(k ? ", " : "") + "\"127.0.0.1:" + std::to_string(c.port((i + k) % 3)) +
                 "\"";
      daemons.push_back(std::make_unique<test::daemon_process>(
          "listen: {address: 127.0.0.1, port: 0}\nhttp: {threads: 1}\ninstance_id: bench" +
          std::to_string(i) +
          "\naccept_undeclared_types: true\nflush: {interval: 1s}\n"
          "mysql: {hosts: [" +
          hosts + "], user: root, database: bench}\n"));
    }
    const auto before = cert_failures(c);
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> acknowledged{0}, refused{0};
    std::vector<std::thread> threads;
    const auto started = clock_type::now();
    for (int i = 0; i < 3; ++i) {
      for (int k = 0; k < opt.clients; ++k) {
        threads.emplace_back([&, i, k, port = daemons[i]->port()] {
          test::http_client client(port);
          std::mt19937_64 rng(i * 100 + k);
          std::uint64_t ok = 0, bad = 0;
          while (!stop) {
            const std::uint64_t id = uniform ? rng() % opt.keys : 1;
            const auto r = client.post_json("/v1/increments",
                                            "{\"record_type\": " + std::to_string(record_type) +
                                                ", \"record_id\": " + std::to_string(id) + "}");
            (r.status == 202 ? ok : bad) += 1;
          }
          acknowledged += ok;
          refused += bad;
        });
      }
    }
    std::this_thread::sleep_for(std::chrono::seconds(opt.seconds));
    stop = true;
    for (auto& t : threads) t.join();
    double conflicts = 0, rows = 0, statements = 0;
    for (auto& d : daemons) {
      test::http_client client(d->port());
      if (!test::flush_until_ok(client)) ++failures;
      const auto m = client.get("/metrics").body;
      conflicts += test::metric_value(m, "slotted_counterd_db_errors_total{kind=\"deadlock\"}");
      rows += test::metric_value(m, "slotted_counterd_flush_rows_total");
      statements += test::metric_value(m, "slotted_counterd_flush_statements_total");
    }
    outcome o;
    o.ok = acknowledged;
    o.other_errors = refused;
    o.seconds = std::chrono::duration<double>(clock_type::now() - started).count();
    char extra[256];
    std::snprintf(extra, sizeof extra,
                  "  (%.0f rows in %.0f statements; certification conflicts %.0f = %.4f per "
                  "flushed row; cert failures+bf aborts %lld)",
                  rows, statements, conflicts, rows > 0 ? conflicts / rows : 0.0,
                  static_cast<long long>(cert_failures(c) - before));
    report(mode, o, extra);
    check(mode,
          table_sum(c, "SELECT SUM(count) FROM slotted_counters WHERE record_type = " +
                           std::to_string(record_type)),
          static_cast<std::int64_t>(o.ok));
    for (auto& d : daemons) {
      d->signal(SIGTERM);
      if (d->wait(30s) != 0) ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "galera_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--seconds")
      opt.seconds = std::stoi(value());
    else if (a == "--clients")
      opt.clients = std::stoi(value());
    else if (a == "--keys")
      opt.keys = std::stoi(value());
    else if (a == "--batch-rows")
      opt.batch_rows = std::stoi(value());
    else if (a == "--only")
      opt.only = value();
    else {
      std::fprintf(stderr,
                   "usage: galera_bench [--seconds N] [--clients N] [--keys N] [--batch-rows N] "
                   "[--only MODE]\n");
      return 2;
    }
  }
  if (opt.seconds < 1 || opt.seconds > 600 || opt.clients < 1 || opt.clients > 64 || opt.keys < 1 ||
      opt.batch_rows < 1 || opt.batch_rows > 100000) {
    std::fprintf(stderr, "galera_bench: value out of range\n");
    return 2;
  }
  try {
    return run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "galera_bench: %s\n", e.what());
    return 1;
  }
}
