// Unique per client per window (issue 26, item 1) against a real MariaDB and PostgreSQL:
// the same (record_id, client, day) sent 1 to 4 times, to one instance or to two on one
// database, with client-less items mixed in; the totals, the day series and top-N equal
// the distinct (client, day) pairs plus the client-less items. A client is compared byte
// for byte: its quote, backslash and two-byte character are stored as they were sent.

#include "db/uniques.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <thread>
#include <tuple>

#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/fault_proxy.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"
#include "support/top_items.hpp"
#include "support/unix_now.hpp"

namespace slotted::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::int64_t day_of(std::int64_t at) {
  return at - at % 86400;
}

struct event {
  std::uint64_t id = 0;
  std::string client;  // empty: a client-less item
  int delta = 1;
  std::int64_t at = 0;
  std::string json() const {
    std::string s = "{\"record_type\": \"dl\", \"record_id\": " + std::to_string(id) +
                    ", \"delta\": " + std::to_string(delta) + ", \"at\": " + std::to_string(at);
    if (client.empty()) return s + "}";
    s += ", \"client\": \"";
    for (const char ch : client) {
      if (ch == '"' || ch == '\\') s.push_back('\\');
      s.push_back(ch);
    }
    return s + "\"}";
  }
};

// What the counts must be: each (id, client, day) once, client-less items as sent.
struct truth {
  std::set<std::tuple<std::uint64_t, std::string, std::int64_t>> pairs;
  std::map<std::pair<std::uint64_t, std::int64_t>, std::int64_t> per_day;  // (id, day)
  void add(const event& e) {
    if (!e.client.empty() && !pairs.emplace(e.id, e.client, day_of(e.at)).second) return;
    per_day[{e.id, day_of(e.at)}] += e.delta;
  }
  std::map<std::uint64_t, std::int64_t> totals() const {
    std::map<std::uint64_t, std::int64_t> out;
    for (const auto& [k, n] : per_day) out[k.first] += n;
    return out;
  }
};

// `pairs` (id, client) each sent 1 to 4 times, and `plain` client-less items, at times of
// the last minute, shuffled.
std::vector<event> events(std::mt19937& rng, int ids, int clients, int plain) {
  const std::int64_t now = unix_now();
  std::vector<event> out;
  for (int id = 1; id <= ids; ++id) {
    for (int c = 0; c < clients; ++c) {
      const int copies = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < copies; ++k)
        out.push_back({static_cast<std::uint64_t>(id),
                       "client-" + std::to_string(c) + "\\'\xc3\xa9", 1,
                       now - static_cast<std::int64_t>(rng() % 60)});
    }
  }
  for (int i = 0; i < plain; ++i)
    out.push_back({1 + rng() % static_cast<unsigned>(ids), "", 1 + static_cast<int>(rng() % 3),
                   now - static_cast<std::int64_t>(rng() % 60)});
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

void post(http_client& c, std::span<const event> batch) {
  std::string body = "[";
  for (std::size_t i = 0; i < batch.size(); ++i) body += (i ? ", " : "") + batch[i].json();
  body += "]";
  const auto r = c.post_json("/v1/increments", body);
  ASSERT_EQ(r.status, 202u) << r.body;
}

ranking top_of(const std::map<std::uint64_t, std::int64_t>& sums) {
  ranking all(sums.begin(), sums.end());
  std::erase_if(all, [](const auto& p) { return p.second == 0; });
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  if (all.size() > 10) all.resize(10);
  return all;
}

class Uniques : public engine_test {
 protected:
  void SetUp() override { database_ = server().create_database(); }
  void TearDown() override {
    if (!wal_root_.empty()) fs::remove_all(wal_root_);
  }

  // `wal`: the instance logs to a write-ahead log of its own (synced per request).
  std::string yaml(const std::string& instance, bool wal = false,
                   const std::string& dedupe = "day") {
    std::string extra;
    if (wal) {
      if (wal_root_.empty()) wal_root_ = make_temp_dir("uniques-wal");
      extra = "wal: {dir: " + wal_root_ + "/" + instance + ", fsync: always}\n";
    }
    return daemon_yaml(
        server(), database_,
        "instance_id: " + instance +
            "\ncounters:\n"
            "  - {name: dl, record_type: 321, buckets: {day: 400d}, top: true, dedupe: " +
            dedupe +
            "}\n"
            "  - {name: plain, record_type: 322}\n"
            "flush: {interval: 1h}\n" +
            extra);
  }
  void run_migrate() {
    std::string out;
    ASSERT_EQ(run_binary(yaml("u-a"), "--migrate", out), 0) << out;
  }
  // Totals, day series and top-N, as read through `c` after everything was flushed.
  void expect_truth(http_client& c, const truth& t) {
    const auto totals = t.totals();
    for (const auto& [id, n] : totals) {
      const auto r = c.get("/v1/counters/dl/" + std::to_string(id));
      ASSERT_EQ(r.status, 200u) << r.body;
      EXPECT_EQ(json_int(r.body, "count"), n) << "record " << id << ": " << r.body;
      EXPECT_EQ(json_int(r.body, "pending"), 0) << r.body;
    }
    const std::int64_t today = day_of(unix_now());
    for (const auto& [id, n] : totals) {
      const auto r = c.get("/v1/counters/dl/" + std::to_string(id) +
                           "/series?granularity=day&from=" + std::to_string(today - 86400) +
                           "&to=" + std::to_string(today));
      ASSERT_EQ(r.status, 200u) << r.body;
      for (const auto& [key, want] : t.per_day) {
        if (key.first != id) continue;
        const std::string point = "{\"bucket\": " + std::to_string(key.second) +
                                  ", \"count\": " + std::to_string(want) + "}";
        EXPECT_NE(r.body.find(point), std::string::npos) << point << " in " << r.body;
      }
    }
    const auto top = c.get("/v1/top/dl?limit=10");
    ASSERT_EQ(top.status, 200u) << top.body;
    EXPECT_EQ(items_of(top.body), top_of(totals)) << top.body;
  }
  // Posts each event of `part` to `ca` or `cb` at random; returns how many went to `ca`.
  static std::size_t spread(std::mt19937& rng, std::span<const event> part, http_client& ca,
                            http_client& cb) {
    std::vector<event> for_a, for_b;
    for (const auto& e : part) (rng() % 2 == 0 ? for_a : for_b).push_back(e);
    if (!for_a.empty()) post(ca, for_a);
    if (!for_b.empty()) post(cb, for_b);
    return for_a.size();
  }
  // Sends `all` from `from` on, and every pair before it once more, to either instance;
  // flushes both and checks both against `t`.
  void send_rest_and_check(std::mt19937& rng, const std::vector<event>& all, std::size_t from,
                           http_client& ca, http_client& cb, const truth& t) {
    std::vector<event> rest(all.begin() + static_cast<std::ptrdiff_t>(from), all.end());
    for (std::size_t i = 0; i < from; ++i)
      if (!all[i].client.empty()) rest.push_back(all[i]);
    spread(rng, rest, ca, cb);
    ASSERT_TRUE(flush_until_ok(ca));
    ASSERT_TRUE(flush_until_ok(cb));
    expect_truth(ca, t);
    expect_truth(cb, t);
  }
  std::int64_t table_rows() const {
    return server().query_int(database_, "SELECT COUNT(*) FROM slotted_counters_uniques");
  }

  std::string database_;
  std::string wal_root_;
};

TEST_P(Uniques, EachClientCountsOncePerDayAcrossRequestsAndFlushes) {
  run_migrate();
  daemon_process d(yaml("u-a"));
  ASSERT_EQ(d.settle(), 200u);
  http_client c(d.port());
  std::mt19937 rng(26);
  const auto all = events(rng, 6, 5, 25);
  truth t;
  // Requests of 7 items, a flush after every third: a pair's copies land in one request,
  // in one batch, or in batches of different flushes.
  for (std::size_t i = 0, n = 0; i < all.size(); i += 7, ++n) {
    const auto part = std::span(all).subspan(i, std::min<std::size_t>(7, all.size() - i));
    post(c, part);
    for (const auto& e : part) t.add(e);
    if (n % 3 == 2) {
      ASSERT_TRUE(flush_until_ok(c));
    }
  }
  ASSERT_TRUE(flush_until_ok(c));
  expect_truth(c, t);
  EXPECT_EQ(table_rows(), static_cast<std::int64_t>(t.pairs.size()));
  // Sent again: nothing more counts.
  for (std::size_t i = 0; i < all.size(); i += 50) {
    std::vector<event> again;
    for (std::size_t j = i; j < std::min(all.size(), i + 50); ++j)
      if (!all[j].client.empty()) again.push_back(all[j]);
    if (!again.empty()) post(c, again);
  }
  ASSERT_TRUE(flush_until_ok(c));
  expect_truth(c, t);
  const auto metrics = c.get("/metrics").body;
  EXPECT_NE(metrics.find("slotted_counterd_unique_items_duplicate_total"), std::string::npos);
}

TEST_P(Uniques, TwoInstancesCountAPairOnceBetweenThem) {
  run_migrate();
  daemon_process a(yaml("u-a")), b(yaml("u-b"));
  ASSERT_EQ(a.settle(), 200u);
  ASSERT_EQ(b.settle(), 200u);
  http_client ca(a.port()), cb(b.port());
  std::mt19937 rng(2026);
  const auto all = events(rng, 5, 6, 20);
  truth t;
  for (const auto& e : all) t.add(e);
  // Every event to one instance or the other; every pair's first copy to both, so that
  // both hold it pending and their batches race for it.
  std::vector<event> to_a, to_b;
  std::set<std::pair<std::uint64_t, std::string>> seen;
  for (const auto& e : all) {
    const bool first = !e.client.empty() && seen.emplace(e.id, e.client).second;
    const bool to_first = rng() % 2 == 0;
    if (first || to_first) to_a.push_back(e);
    if (first || !to_first) to_b.push_back(e);
  }
  post(ca, to_a);
  post(cb, to_b);
  // Both flush at once: their INSERT IGNOREs meet on the same keys.
  bool ok_a = false, ok_b = false;
  std::thread fa([&] { ok_a = flush_until_ok(ca); });
  std::thread fb([&] { ok_b = flush_until_ok(cb); });
  fa.join();
  fb.join();
  ASSERT_TRUE(ok_a && ok_b);
  expect_truth(ca, t);
  expect_truth(cb, t);
  EXPECT_EQ(table_rows(), static_cast<std::int64_t>(t.pairs.size()));
}

// Two instances on one database, one SIGKILLed after a flush and started again, the same
// (id, client, day) sent 1 to 4 times to either, before and after the kill, client-less
// items mixed in: totals, day series and top-N equal the truth. (With a WAL and entries
// pending at the kill: the next test.)
TEST_P(Uniques, TwoInstancesOneKilledAndRestartedCountEachPairOnce) {
  run_migrate();
  auto a = std::make_unique<daemon_process>(yaml("u-a"));
  daemon_process b(yaml("u-b"));
  ASSERT_EQ(a->settle(), 200u);
  ASSERT_EQ(b.settle(), 200u);
  std::mt19937 rng(4);
  const auto all = events(rng, 6, 4, 30);
  truth t;
  for (const auto& e : all) t.add(e);
  const std::size_t half = all.size() / 2;
  http_client cb(b.port());
  {
    http_client ca(a->port());
    spread(rng, std::span(all).first(half), ca, cb);
    ASSERT_TRUE(flush_until_ok(ca));
    ASSERT_TRUE(flush_until_ok(cb));
  }
  a->signal(SIGKILL);
  EXPECT_EQ(a->wait(30s), -SIGKILL);
  a = std::make_unique<daemon_process>(yaml("u-a"));
  ASSERT_EQ(a->settle(), 200u);
  http_client ca(a->port());
  // The second half, and every pair of the first half once more, to either instance.
  send_rest_and_check(rng, all, half, ca, cb, t);
}

// The test: two instances on one database, one with a WAL, SIGKILLed with unique
// entries pending (answered, not flushed) and started again, twice (the second replay
// reads what the first start logged); the same (id, client, day) sent 1 to 4 times
// to either, client-less items mixed in. What was pending at the kill is written once
// after the restart, before anything is sent again; then every pair once more and the

// An entry pending in the WAL at a SIGKILL, its counter's window changed before the
// restart (dedupe: hour, then day): it takes its day window when replayed, so the same
// client's entry of that day, sent after the restart, is the same pair, counted once.
TEST_P(Uniques, AnEntryReplayedAfterItsWindowChangedIsInTheNewWindow) {
  const std::int64_t at = unix_now();
  if (at % 86400 < 3600 + 60)
    GTEST_SKIP() << "in the first hour of a UTC day its hour and day windows start together";
  run_migrate();
  auto a = std::make_unique<daemon_process>(yaml("u-a", true, "hour"));
  ASSERT_EQ(a->settle(), 200u);
  const event e{1, "client-0", 1, at};
  {
    http_client ca(a->port());
    post(ca, std::span(&e, 1));
  }
  a->signal(SIGKILL);
  EXPECT_EQ(a->wait(30s), -SIGKILL);
  a = std::make_unique<daemon_process>(yaml("u-a", true, "day"));
  ASSERT_EQ(a->settle(), 200u);
  EXPECT_NE(a->log().find("WAL replayed 1 pending unique entries"), std::string::npos) << a->log();
  http_client ca(a->port());
  post(ca, std::span(&e, 1));
  ASSERT_TRUE(flush_until_ok(ca));
  const auto r = ca.get("/v1/counters/dl/1");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(json_int(r.body, "count"), 1) << r.body;
  EXPECT_EQ(table_rows(), 1);
}
// rest: totals, day series and top-N equal the truth each time.
TEST_P(Uniques, TwoInstancesOneWithAWalKilledWithEntriesPendingCountEachPairOnce) {
  run_migrate();
  auto a = std::make_unique<daemon_process>(yaml("u-a", true));
  daemon_process b(yaml("u-b"));
  ASSERT_EQ(a->settle(), 200u);
  ASSERT_EQ(b.settle(), 200u);
  std::mt19937 rng(5);
  const auto all = events(rng, 6, 4, 30);
  const std::size_t third = all.size() / 3;
  truth before_kill, t;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (i < 2 * third) before_kill.add(all[i]);
    t.add(all[i]);
  }
  std::size_t to_a = 0;
  const auto kill_and_restart = [&](bool pending) {
    a->signal(SIGKILL);
    EXPECT_EQ(a->wait(30s), -SIGKILL);
    a = std::make_unique<daemon_process>(yaml("u-a", true));
    ASSERT_EQ(a->settle(), 200u);
    // Entries were pending at the kill, and came back from the log.
    if (pending) {
      EXPECT_NE(a->log().find(" pending unique entries"), std::string::npos) << a->log();
    }
  };
  http_client cb(b.port());
  {
    http_client ca(a->port());
    // A first third flushed by both (the WAL then holds committed batches), a second
    // third answered by `a` and pending there at the kill.
    to_a += spread(rng, std::span(all).first(third), ca, cb);
    ASSERT_TRUE(flush_until_ok(ca));
    ASSERT_TRUE(flush_until_ok(cb));
    const std::size_t flushed_to_a = to_a;
    to_a += spread(rng, std::span(all).subspan(third, third), ca, cb);
    ASSERT_GT(to_a, flushed_to_a);
    ASSERT_TRUE(flush_until_ok(cb));
  }
  kill_and_restart(true);
  // Killed again at once: the start snapshot holds what was replayed, or (the flush
  // that follows a start having run) the unique batch it logged, committed or not.
  kill_and_restart(false);
  http_client ca(a->port());
  ASSERT_TRUE(flush_until_ok(ca));
  expect_truth(ca, before_kill);
  EXPECT_EQ(table_rows(), static_cast<std::int64_t>(before_kill.pairs.size()));
  // The last third, and every pair of the first two once more, to either instance.
  send_rest_and_check(rng, all, 2 * third, ca, cb, t);
  EXPECT_EQ(table_rows(), static_cast<std::int64_t>(t.pairs.size()));
}

INSTANTIATE_ENGINES(Uniques);

// A database with counter 321 ("dl") deduped by day, and a config reaching it through
// `proxy` (which the caller makes on server.port()), flushing only when asked.
config::daemon_config proxied_dedupe_config(mariadb_server& server, const std::string& database,
                                            const fault_proxy& proxy) {
  {
    auto conn = server.connect(database);
    store::dedupe_spec dedupe;
    dedupe.declare(321, store::granularity::day);
    db::migrate_uniques(conn, "slotted_counters", dedupe);
  }
  auto cfg = test_config(server, database);
  cfg.mysql.socket.clear();
  cfg.mysql.host = "127.0.0.1";
  cfg.mysql.port = proxy.port();
  cfg.flush.interval = 1h;
  cfg.counters = {{"dl", 321, std::nullopt, {}, false, store::granularity::day}};
  return cfg;
}

// Through a proxy that cuts the database: a COMMIT whose reply is lost (the ledger
// resolves the batch), then an outage during which unique entries stay pending, bounded
// by flush.max_pending_keys, and are decided once the database is back.
TEST(UniquesFaults, ALostCommitReplyAndAnOutageNeitherLoseNorDoubleADecision) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  fault_proxy proxy(server.port());
  auto cfg = proxied_dedupe_config(server, database, proxy);
  cfg.flush.max_pending_keys = 60;
  in_process_daemon daemon(cfg);
  http_client c(daemon.port());
  ASSERT_TRUE(flush_until_ok(c));
  truth t;
  const std::int64_t now = unix_now();
  const auto send = [&](std::uint64_t id, const std::string& client) {
    const event e{id, client, 1, now};
    const auto r = c.post_json("/v1/increments", e.json());
    if (r.status == 202) t.add(e);
    return r.status;
  };
  for (int round = 0; round < 2; ++round)
    for (std::uint64_t id = 1; id <= 3; ++id)
      for (const char* client : {"a", "b", "c", "d"}) ASSERT_EQ(send(id, client), 202u);
  ASSERT_EQ(send(1, ""), 202u);
  // The COMMIT is applied and its reply lost: the retry finds the ledger row.
  proxy.arm("COMMIT", fault_proxy::cut::after_statement, 1);
  EXPECT_EQ(c.request("POST", "/v1/flush").status, 503u);
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(proxy.cuts(), 1);
  const auto persisted = [&](std::uint64_t id) {
    return server.query_int(database,
                            "SELECT CAST(COALESCE(SUM(count), 0) AS SIGNED) FROM "
                            "slotted_counters WHERE record_type = 321 AND record_id = " +
                                std::to_string(id));
  };
  for (const auto& [id, n] : t.totals()) EXPECT_EQ(persisted(id), n) << id;
  // An outage: the same pairs again and new ones stay pending, up to the limit.
  proxy.set_down(true);
  EXPECT_EQ(c.request("POST", "/v1/flush").status, 503u);
  unsigned refused = 0, accepted = 0;
  for (std::uint64_t id = 1; id <= 40 && refused == 0; ++id) {
    for (const char* client : {"a", "e"}) {
      const auto status = send(id, client);
      if (status == 503u) {
        ++refused;
      } else {
        EXPECT_EQ(status, 202u);
        ++accepted;
      }
    }
  }
  // Each request holds one entry (a pair counted before included: only the database
  // knows): the limit of 60 is reached by them, passed by at most one.
  EXPECT_GE(refused, 1u) << "the pending limit never answered 503";
  EXPECT_GE(accepted, 59u);
  EXPECT_LE(accepted, 61u);
  proxy.set_down(false);
  ASSERT_TRUE(flush_until_ok(c, 30s));
  for (const auto& [id, n] : t.totals()) EXPECT_EQ(persisted(id), n) << id;
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counters_uniques"),
            static_cast<std::int64_t>(t.pairs.size()));
  EXPECT_EQ(daemon.stop(), 0);
}

// A stop that cannot reach the database counts the unique entries it could not write:
// the daemon exits 1 ("lost"), never "everything acknowledged was written". Here no
// cycle of the stop can connect, so the entry is never taken into a batch: only the
// pending set holds it, and flusher::stop counts it from there.
TEST(UniquesFaults, AStopThatCannotWriteUniqueEntriesSaysSo) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  fault_proxy proxy(server.port());
  auto cfg = proxied_dedupe_config(server, database, proxy);
  cfg.shutdown_timeout = 2s;
  in_process_daemon daemon(cfg);
  http_client c(daemon.port());
  ASSERT_TRUE(flush_until_ok(c));
  proxy.set_down(true);
  // A flush that fails drops the pooled connection the proxy cut: from here on, every
  // cycle fails to connect, before it takes anything.
  EXPECT_EQ(c.request("POST", "/v1/flush").status, 503u);
  const event e{7, "a", 1, unix_now()};
  ASSERT_EQ(c.post_json("/v1/increments", e.json()).status, 202u);
  EXPECT_EQ(daemon.stop(), 1) << "a unique entry was lost and the stop said all was written";
}

// The prune deletes the rows of windows that ended more than their counter's keep and
// the margin ago, by each counter's window (by day and the longest keep for a counter
// that dedupes no more), records what it deleted, keeps the rest, and says when it had
// more due than its chunks.
TEST(UniquesFaults, ThePruneDeletesPassedWindowsOnlyAndSaysWhenBehind) {
  auto& server = shared_mariadb();
  const auto database = server.create_database();
  auto conn = server.connect(database);
  store::dedupe_spec dedupe;
  dedupe.declare(321, store::granularity::day, 3600);
  dedupe.declare(322, store::granularity::hour, 600);
  db::migrate_uniques(conn, "t", dedupe);
  const std::int64_t now = 100 * 86400 + 3600 * 5 + 700;  // 05:11:40 on day 100
  const std::int64_t m = store::unique_margin_seconds;
  const auto row = [](std::uint32_t type, std::int64_t window) {
    return "(" + std::to_string(type) + ", " + std::to_string(window) + ", 1, 'a', 'i', 1, 1)";
  };
  // 321 (day, kept 1 h): days 98 and 99 ended more than 1 h 5 min ago (gone), day 100 is
  // now (kept). 322 (hour, kept 10 min): an hour that ended 940 s ago, more than the keep
  // and the margin (gone), one that ends in 40 min (kept). 323 dedupes no more: kept by
  // day for 48 h, so day 96 goes and day 100 stays.
  conn.execute("INSERT INTO t_uniques VALUES " + row(321, 98 * 86400) + ", " +
               row(321, 99 * 86400) + ", " + row(321, 100 * 86400) + ", " +
               row(322, now - 940 - 3600) + ", " + row(322, now - 700 - 40) + ", " +
               row(323, 96 * 86400) + ", " + row(323, 100 * 86400));
  // One row a statement, one statement a type: 321 has more due than that.
  auto pruned = db::prune_uniques(conn, "t", dedupe, now, 1, 1);
  EXPECT_EQ(pruned.deleted, 3u);
  EXPECT_TRUE(pruned.behind);
  pruned = db::prune_uniques(conn, "t", dedupe, now);
  EXPECT_EQ(pruned.deleted, 1u);
  EXPECT_FALSE(pruned.behind);
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM t_uniques"), 3);
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM t_uniques WHERE window_start = " +
                                           std::to_string(100 * 86400) +
                                           " AND record_type IN "
                                           "(321, 323)"),
            2);
  // What each type's prune recorded: windows that ended before it are decided by none.
  const auto ended_before = [&](std::uint32_t type) {
    return server.query_int(database,
                            "SELECT ended_before FROM slotted_counterd_uniques_pruned WHERE "
                            "uniques_table = 't_uniques' AND record_type = " +
                                std::to_string(type));
  };
  EXPECT_EQ(ended_before(321), now - 3600 - m);
  EXPECT_EQ(ended_before(322), now - 600 - m);
  EXPECT_EQ(ended_before(323), now - store::default_dedupe_keep_seconds - m);
}

}  // namespace
}  // namespace slotted::test
