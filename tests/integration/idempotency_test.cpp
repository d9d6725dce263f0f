// Idempotency-Key (README: HTTP API, Idempotency-Key) against a real MariaDB with two
// daemons sharing it: a keyed request is applied once whether its retries reach the same
// instance or the other one, before or after either flushed, after a SIGKILL with the
// WAL on, or race through both at once; another body under a used key changes nothing;
// a malformed key is refused; a key is forgotten after idempotency.window.

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "db/sql.hpp"
#include "model/keyed_request.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string event(std::uint64_t id, int delta = 1) {
  return R"({"record_type": 7, "record_id": )" + std::to_string(id) + R"(, "delta": )" +
         std::to_string(delta) + "}";
}

bool replayed(const http_reply& r) {
  const auto it = r.headers.find("idempotent-replayed");
  return it != r.headers.end() && it->second == "true";
}

double metric(http_client& c, const std::string& series) {
  return metric_value(c.get("/metrics").body, series);
}

class Idempotency : public engine_test {
 protected:
  void SetUp() override {
    database_ = migrated_database(server());
    root_ = make_temp_dir("idem-test");
  }
  void TearDown() override { fs::remove_all(root_); }

  // Flushes only when asked (POST /v1/flush) unless `interval` says otherwise.
  std::string yaml(const std::string& instance, const std::string& extra = "",
                   const std::string& interval = "1h") const {
    return daemon_yaml(server(), database_,
                       "instance_id: " + instance +
                           "\naccept_undeclared_types: true\nflush: {interval: " + interval +
                           "}\n" + extra);
  }

  std::int64_t db_total(std::uint64_t id) const {
    return server().query_int(database_,
                              "SELECT COALESCE(SUM(count), 0) FROM slotted_counters "
                              "WHERE record_type = 7 AND record_id = " +
                                  std::to_string(id));
  }
  std::int64_t keys_in_table() const {
    return server().query_int(database_, "SELECT COUNT(*) FROM slotted_counterd_idempotency_keys");
  }

  std::string database_, root_;
};

TEST_P(Idempotency, RetriesToTheSameInstanceAreAnsweredAsTheFirstAndAppliedOnce) {
  daemon_process a(yaml("idem-a"));
  ASSERT_EQ(a.settle(), 200u);
  http_client c(a.port());
  const auto first = post_keyed(c, "order-1:download.7", event(1, 5));
  ASSERT_EQ(first.status, 202u) << first.body;
  EXPECT_EQ(first.body, R"({"accepted": 1})");
  EXPECT_FALSE(replayed(first));

  // Before the flush, and after it: the same answer, marked as a replay.
  const auto before = post_keyed(c, "order-1:download.7", event(1, 5));
  EXPECT_EQ(before.status, 202u);
  EXPECT_EQ(before.body, first.body);
  EXPECT_TRUE(replayed(before));
  ASSERT_TRUE(flush_until_ok(c));
  const auto after = post_keyed(c, "order-1:download.7", event(1, 5));
  EXPECT_EQ(after.status, 202u);
  EXPECT_EQ(after.body, first.body);
  EXPECT_TRUE(replayed(after));
  // return=minimal: 204 for the replay too.
  const auto minimal =
      post_keyed(c, "order-1:download.7", event(1, 5), {{"Prefer", "return=minimal"}});
  EXPECT_EQ(minimal.status, 204u);
  EXPECT_TRUE(replayed(minimal));
  ASSERT_TRUE(flush_until_ok(c));

  EXPECT_EQ(db_total(1), 5);
  EXPECT_EQ(json_int(c.get("/v1/counters/7/1").body, "count"), 5);
  EXPECT_EQ(metric(c, "slotted_counterd_idempotency_requests_total"), 4);
  EXPECT_EQ(metric(c, "slotted_counterd_idempotency_replays_total"), 3);
  EXPECT_EQ(metric(c, "slotted_counterd_idempotency_keys"), 1);
  EXPECT_EQ(keys_in_table(), 1);
  // Requests without the header are untouched: applied every time.
  EXPECT_EQ(c.post_json("/v1/increments", event(1)).status, 202u);
  EXPECT_EQ(c.post_json("/v1/increments", event(1)).status, 202u);
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(db_total(1), 7);
}

TEST_P(Idempotency, RetriesToTheOtherInstanceBeforeAndAfterFlushesAreAppliedOnce) {
  daemon_process a(yaml("idem-a")), b(yaml("idem-b"));
  ASSERT_EQ(a.settle(), 200u);
  ASSERT_EQ(b.settle(), 200u);
  http_client ca(a.port()), cb(b.port());

  // Neither has flushed: both accept (B cannot know yet), the flushes apply it once,
  // whichever commits second drops it.
  ASSERT_EQ(post_keyed(ca, "k-both-unflushed", event(2, 3)).status, 202u);
  const auto at_b = post_keyed(cb, "k-both-unflushed", event(2, 3));
  ASSERT_EQ(at_b.status, 202u);
  EXPECT_EQ(at_b.body, R"({"accepted": 1})");
  ASSERT_TRUE(flush_until_ok(cb));
  ASSERT_TRUE(flush_until_ok(ca));
  EXPECT_EQ(db_total(2), 3);
  EXPECT_EQ(metric(ca, "slotted_counterd_idempotency_duplicates_dropped_total"), 1);

  // A flushed it; then the retry reaches B, before and after B's flush.
  ASSERT_EQ(post_keyed(ca, "k-a-flushed", event(3, 4)).status, 202u);
  ASSERT_TRUE(flush_until_ok(ca));
  ASSERT_EQ(post_keyed(cb, "k-a-flushed", event(3, 4)).status, 202u);
  ASSERT_TRUE(flush_until_ok(cb));
  ASSERT_EQ(post_keyed(cb, "k-a-flushed", event(3, 4)).status, 202u);  // B knows it now
  ASSERT_TRUE(flush_until_ok(cb));
  EXPECT_EQ(db_total(3), 4);
  EXPECT_EQ(metric(cb, "slotted_counterd_idempotency_duplicates_dropped_total"), 1);

  // B accepted it and has not flushed; A gets the retry and flushes first.
  ASSERT_EQ(post_keyed(cb, "k-b-unflushed", event(4, 6)).status, 202u);
  ASSERT_EQ(post_keyed(ca, "k-b-unflushed", event(4, 6)).status, 202u);
  ASSERT_TRUE(flush_until_ok(ca));
  ASSERT_TRUE(flush_until_ok(cb));
  EXPECT_EQ(db_total(4), 6);
  EXPECT_EQ(metric(cb, "slotted_counterd_idempotency_duplicates_dropped_total"), 2);
}

TEST_P(Idempotency, AnotherBodyUnderAUsedKeyIs422OrDroppedAndChangesNothing) {
  daemon_process a(yaml("idem-a")), b(yaml("idem-b"));
  ASSERT_EQ(a.settle(), 200u);
  ASSERT_EQ(b.settle(), 200u);
  http_client ca(a.port()), cb(b.port());
  ASSERT_EQ(post_keyed(ca, "k-conflict", event(10, 2)).status, 202u);
  // The same instance knows the key: 422 with a JSON error, before and after the flush.
  const auto before = post_keyed(ca, "k-conflict", event(10, 9));
  EXPECT_EQ(before.status, 422u);
  EXPECT_NE(before.body.find("\"error\""), std::string::npos) << before.body;
  ASSERT_TRUE(flush_until_ok(ca));
  EXPECT_EQ(post_keyed(ca, "k-conflict", event(11)).status, 422u);
  // The other instance cannot know before its flush: it accepts, and the flush drops it.
  EXPECT_EQ(post_keyed(cb, "k-conflict", event(10, 9)).status, 202u);
  ASSERT_TRUE(flush_until_ok(cb));
  EXPECT_EQ(db_total(10), 2);
  EXPECT_EQ(db_total(11), 0);
  EXPECT_EQ(metric(cb, "slotted_counterd_idempotency_conflicts_dropped_total"), 1);
  // The same events in another serialisation are the same body (NDJSON, spacing).
  const auto ndjson =
      ca.request("POST", "/v1/increments", "{\"record_type\":7,\"record_id\":\"10\",\"delta\":2}\n",
                 "application/x-ndjson", {{"Idempotency-Key", "k-conflict"}});
  EXPECT_EQ(ndjson.status, 202u);
  EXPECT_TRUE(replayed(ndjson));
}

TEST_P(Idempotency, AMalformedKeyIs400AndAppliesNothing) {
  daemon_process a(yaml("idem-a"));
  http_client c(a.port());
  for (const std::string& key :
       {std::string(129, 'a'), std::string("has space"), std::string("slash/no"),
        std::string("ümlaut"), std::string("semi;colon")}) {
    const auto r = post_keyed(c, key, event(20));
    EXPECT_EQ(r.status, 400u) << key;
    EXPECT_NE(r.body.find("Idempotency-Key"), std::string::npos) << r.body;
  }
  // Empty, and two fields (raw, as the client sends one field per name).
  const auto empty = raw_exchange(
      a.port(), http_post_bytes(event(20), "Idempotency-Key: \r\nConnection: close\r\n"));
  EXPECT_NE(empty.find(" 400 "), std::string::npos) << empty;
  const auto twice = raw_exchange(
      a.port(),
      http_post_bytes(event(20),
                      "Idempotency-Key: a1\r\nIdempotency-Key: a2\r\nConnection: close\r\n"));
  EXPECT_NE(twice.find(" 400 "), std::string::npos) << twice;
  // 128 characters of every allowed kind is fine.
  std::string longest = "AZaz09._:-";
  longest.resize(128, 'x');
  EXPECT_EQ(post_keyed(c, longest, event(21)).status, 202u);
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(db_total(20), 0);
  EXPECT_EQ(db_total(21), 1);
}

TEST_P(Idempotency, ARetryAfterSigkillWithTheWalIsAppliedOnce) {
  const std::string wal = "wal: {dir: " + root_ + "/wal, fsync: always}\n";
  {
    daemon_process a(yaml("idem-a", wal));
    http_client c(a.port());
    // One flushed before the kill, one only logged.
    ASSERT_EQ(post_keyed(c, "k-flushed", event(30, 2)).status, 202u);
    ASSERT_TRUE(flush_until_ok(c));
    ASSERT_EQ(post_keyed(c, "k-logged", event(31, 3)).status, 202u);
    a.signal(SIGKILL);
    ASSERT_EQ(a.wait(10s), -SIGKILL);
  }
  daemon_process a(yaml("idem-a", wal));
  http_client c(a.port());
  // The logged one came back from the WAL with its key: a replay.
  const auto logged = post_keyed(c, "k-logged", event(31, 3));
  EXPECT_EQ(logged.status, 202u);
  EXPECT_TRUE(replayed(logged));
  // The flushed one is only in the database: accepted again here, dropped at the flush.
  EXPECT_EQ(post_keyed(c, "k-flushed", event(30, 2)).status, 202u);
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(db_total(30), 2);
  EXPECT_EQ(db_total(31), 3);
  EXPECT_EQ(metric(c, "slotted_counterd_idempotency_duplicates_dropped_total"), 1);

  // And the other instance, which never saw either.
  daemon_process b(yaml("idem-b"));
  http_client cb(b.port());
  EXPECT_EQ(post_keyed(cb, "k-logged", event(31, 3)).status, 202u);
  ASSERT_TRUE(flush_until_ok(cb));
  EXPECT_EQ(db_total(31), 3);
}

TEST_P(Idempotency, ConcurrentRetriesThroughBothInstancesAreAppliedOnce) {
  // Both flush every 20 ms, so their keyed batches race for the same keys.
  daemon_process a(yaml("idem-a", "", "20ms")), b(yaml("idem-b", "", "20ms"));
  constexpr int keys = 300;
  std::atomic<int> accepted{0};
  std::vector<std::thread> clients;
  for (const auto port : {a.port(), b.port(), a.port(), b.port()}) {
    clients.emplace_back([&, port] {
      http_client c(port);
      for (int k = 0; k < keys; ++k) {
        if (post_keyed(c, "race-" + std::to_string(k), event(1000 + k)).status == 202) ++accepted;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(accepted.load(), 4 * keys);
  http_client ca(a.port()), cb(b.port());
  ASSERT_TRUE(flush_until_ok(ca));
  ASSERT_TRUE(flush_until_ok(cb));
  EXPECT_EQ(server().query_int(database_,
                               "SELECT COALESCE(SUM(count), 0) FROM slotted_counters WHERE "
                               "record_type = 7"),
            keys);
  EXPECT_EQ(server().query_int(
                database_,
                "SELECT COUNT(*) FROM (SELECT record_id FROM slotted_counters WHERE record_type "
                "= 7 GROUP BY record_id HAVING SUM(count) <> 1) t"),
            0);
  // Every request beyond the first of its key was caught: at ingest or at a flush.
  const double caught = metric(ca, "slotted_counterd_idempotency_replays_total") +
                        metric(cb, "slotted_counterd_idempotency_replays_total") +
                        metric(ca, "slotted_counterd_idempotency_duplicates_dropped_total") +
                        metric(cb, "slotted_counterd_idempotency_duplicates_dropped_total");
  EXPECT_EQ(caught, 3 * keys);
}

// The race of two instances, made deterministic: "the other instance" is a transaction
// of the test that holds the key row uncommitted while the daemon's flush inserts the
// same key. The flush must wait on the row lock, then skip the request when the other
// commits, and apply it when the other rolls back.
TEST_P(Idempotency, AKeyAnotherTransactionHoldsUncommittedDecidesTheFlushWhenItEnds) {
  daemon_process a(yaml("idem-a"));
  // Or the first cycle, run at start, may flush the request before the other holds it.
  ASSERT_EQ(a.settle(), 200u);
  http_client c(a.port());
  // The flush's INSERT of the key has been waiting a while. (information_schema.INNODB_TRX
  // does not always list a waiting transaction; its statement in PROCESSLIST is there.)
  const auto waiting_for_lock = [&] {
    return eventually(
        [&] {
          return server().query_int(
                     database_,
                     postgresql()
                         ? "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                           "AND datname = current_database() AND query LIKE 'INSERT INTO "
                           "\"slotted_counterd_idempotency_keys\"%' "
                           "AND statement_timestamp() - query_start > INTERVAL '300 milliseconds'"
                         : "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = "
                           "DATABASE() AND INFO LIKE 'INSERT INTO "
                           "`slotted_counterd_idempotency_keys`%' AND TIME_MS > 300") > 0;
        },
        60s);
  };
  for (const bool other_commits : {true, false}) {
    const std::string key = other_commits ? "k-held-committed" : "k-held-rolled-back";
    const std::uint64_t id = other_commits ? 60 : 61;
    ASSERT_EQ(post_keyed(c, key, event(id, 4)).status, 202u);
    auto other = server().connect(database_);
    other.execute("START TRANSACTION");
    other.execute(
        "INSERT INTO slotted_counterd_idempotency_keys (idem_key, body_hash, accepted, "
        "instance_id, run_id, batch_seq, created_ms) VALUES ('" +
        key + "', '" +
        idempotency::hex(idempotency::hash_of(std::vector<ingest::increment>{{7, id, 4}})) +
        "', 1, 'the-other', 1, 1, " + std::string(other.sql().now_ms()) + ")");
    std::atomic<unsigned> flushed{0};
    std::thread flusher([&] {
      http_client f(a.port(), 150s);
      flushed = f.request("POST", "/v1/flush").status;
    });
    ASSERT_TRUE(waiting_for_lock()) << "the flush did not wait on the key's row lock";
    EXPECT_EQ(flushed.load(), 0u);  // still waiting
    other.execute(other_commits ? "COMMIT" : "ROLLBACK");
    flusher.join();
    EXPECT_EQ(flushed.load(), 200u);
    EXPECT_EQ(db_total(id), other_commits ? 0 : 4) << key;
  }
  EXPECT_EQ(metric(c, "slotted_counterd_idempotency_duplicates_dropped_total"), 1);
}

TEST_P(Idempotency, RetriesAcrossSigkillsAtRandomMomentsCountEveryKeyExactlyOnce) {
  // Clients send keyed single increments; an attempt left unanswered by a SIGKILL is
  // retried with its key after the restart, through the restarted instance (WAL on) or
  // through a second one without a WAL that shares the database. In the end every key
  // counts exactly once: no bounds here, unlike the test without keys.
  const std::string wal = "wal: {dir: " + root_ + "/wal, fsync: always}\n";
  daemon_process other(yaml("idem-other", "", "50ms"));
  constexpr int clients = 3, ids = 10;
  std::vector<std::vector<std::string>> unanswered(clients);  // keys to retry
  std::vector<int> next(clients, 0), sent_keys(clients, 0);
  std::mt19937 rng(11);
  const auto body_of = [](const std::string& key) {
    return event(500 + std::hash<std::string>{}(key) % ids);
  };
  for (int round = 0; round < 8; ++round) {
    daemon_process a(yaml("idem-a", wal, "50ms"));
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, c] {
        http_client ca(a.port(), 5s), cb(other.port(), 5s);
        // First the keys a kill left unanswered: odd rounds through the other instance.
        auto& retry = round % 2 ? cb : ca;
        while (!unanswered[c].empty() && !stop) {
          const auto& key = unanswered[c].back();
          const auto r = post_keyed(retry, key, body_of(key));
          if (r.status == 0) return;  // killed again: retried next round
          ASSERT_EQ(r.status, 202u) << r.body;
          unanswered[c].pop_back();
        }
        while (!stop) {
          const std::string key = "c" + std::to_string(c) + "-" + std::to_string(next[c]++);
          ++sent_keys[c];
          const auto r = post_keyed(ca, key, body_of(key));
          if (r.status != 202) {
            ASSERT_EQ(r.status, 0u) << r.body;
            unanswered[c].push_back(key);
            return;
          }
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 300));
    a.signal(SIGKILL);
    EXPECT_EQ(a.wait(10s), -SIGKILL);
    stop = true;
    for (auto& t : threads) t.join();
  }
  // The last retries, then everything flushed by both.
  daemon_process a(yaml("idem-a", wal, "50ms"));
  http_client ca(a.port()), cb(other.port());
  for (int c = 0; c < clients; ++c) {
    for (const auto& key : unanswered[c]) {
      ASSERT_EQ(post_keyed(cb, key, body_of(key)).status, 202u);
      ASSERT_EQ(post_keyed(ca, key, body_of(key)).status, 202u);
    }
  }
  ASSERT_TRUE(flush_until_ok(ca));
  ASSERT_TRUE(flush_until_ok(cb));
  int keys = 0;
  for (int c = 0; c < clients; ++c) keys += sent_keys[c];
  EXPECT_GT(keys, 100);
  EXPECT_EQ(server().query_int(database_,
                               "SELECT COALESCE(SUM(count), 0) FROM slotted_counters WHERE "
                               "record_type = 7"),
            keys);
  EXPECT_EQ(keys_in_table(), keys);
}

TEST_P(Idempotency, KeysAreForgottenAfterTheWindow) {
  daemon_process a(yaml("idem-a", "idempotency: {window: 2s}\n", "200ms"));
  http_client c(a.port());
  ASSERT_EQ(post_keyed(c, "k-window", event(40)).status, 202u);
  EXPECT_TRUE(replayed(post_keyed(c, "k-window", event(40))));
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(keys_in_table(), 1);
  // The window is the time to wait for here: nothing else says it has passed.
  std::this_thread::sleep_for(2500ms);
  const auto late = post_keyed(c, "k-window", event(40));
  EXPECT_EQ(late.status, 202u);
  EXPECT_FALSE(replayed(late));  // forgotten here...
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(db_total(40), 2);  // ...and in the database: applied as a new request
  // The table forgets it too: pruned within a window of its expiry.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (keys_in_table() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(keys_in_table(), 0);
  EXPECT_EQ(metric(c, "slotted_counterd_idempotency_keys"), 0);
}

std::string ev(std::uint64_t type, std::uint64_t id, long long delta) {
  return R"({"record_type": )" + std::to_string(type) + R"(, "record_id": )" + std::to_string(id) +
         R"(, "delta": )" + std::to_string(delta) + "}";
}

// A keyed batch the database refuses is split by its requests; the halves' rows may add
// up to more than the whole's (a counter in both). The flusher's count of queued rows
// must follow them, or it wraps below zero and the pending limit refuses everything.
INSTANTIATE_ENGINES(Idempotency);

class IdempotencyEdges : public engine_test {};

TEST_P(IdempotencyEdges, ASplitKeyedBatchKeepsThePendingCountExact) {
  auto& server = this->server();
  const auto database = server.create_database();
  create_seed_table(server, database);  // INT count column
  migrate(server, database);
  auto cfg = test_config(server, database);
  cfg.flush.interval = std::chrono::hours(1);
  cfg.flush.slots = 1;  // every flush adds to the same row
  in_process_daemon daemon(cfg);
  http_client c(daemon.port());
  ASSERT_EQ(c.post_json("/v1/increments", ev(1, 40, 2147483646)).status, 202u);
  ASSERT_TRUE(flush_until_ok(c));
  // Two keyed requests on the same counter: one row (+2) in their keyed batch, which
  // passes INT max (refused, 1264); the halves are one row each (+1, +1).
  ASSERT_EQ(post_keyed(c, "split-a", ev(1, 40, 1)).status, 202u);
  ASSERT_EQ(post_keyed(c, "split-b", ev(1, 40, 1)).status, 202u);
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(server.query_int(database, "SELECT count FROM slotted_counters WHERE record_id = 40"),
            2147483647);
  const auto metrics = c.get("/metrics").body;
  EXPECT_LT(metric_value(metrics, "slotted_counterd_pending_keys"), 1e6)
      << "pending_keys gauge after the split";
  // An ordinary request afterwards must still be accepted.
  const auto later = c.post_json("/v1/increments", ev(1, 41, 1));
  EXPECT_EQ(later.status, 202u) << later.body;
  const auto later_keyed = post_keyed(c, "after-split", ev(1, 42, 1));
  EXPECT_EQ(later_keyed.status, 202u) << later_keyed.body;
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(c.post_json("/v1/increments", ev(1, 43, 1)).status, 202u);
  // A clean shutdown with nothing pending reports nothing lost (exit 0).
  EXPECT_EQ(daemon.stop(), 0);
}

// A retry accepted inside idempotency.window is not applied again, even when its flush
// commits after the window has passed: the window is judged by arrival.
TEST_P(IdempotencyEdges, ARetryAcceptedInsideTheWindowStaysARetryWhenFlushedAfterIt) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  auto cfg = test_config(server, database);
  cfg.flush.interval = std::chrono::hours(1);
  cfg.idempotency.window = std::chrono::seconds(3);
  cfg.instance_id = "rev-a";
  in_process_daemon a(cfg);
  cfg.instance_id = "rev-b";
  in_process_daemon b(cfg);
  http_client ca(a.port()), cb(b.port());
  ASSERT_EQ(post_keyed(ca, "k-edge", ev(7, 2, 1)).status, 202u);
  ASSERT_TRUE(flush_until_ok(ca));  // committed at T0
  const auto retry_at = std::chrono::steady_clock::now();
  ASSERT_EQ(post_keyed(cb, "k-edge", ev(7, 2, 1)).status, 202u);  // T0 + ~0: inside
  // B's flush comes later than the window (a slow flush, an outage, a long interval):
  // wall time must pass, so this waits for it.
  std::this_thread::sleep_until(retry_at + 3500ms);
  ASSERT_TRUE(flush_until_ok(cb));
  EXPECT_EQ(server.query_int(database,
                             "SELECT SUM(count) FROM slotted_counters WHERE "
                             "record_type = 7 AND record_id = 2"),
            1);
}

TEST_P(IdempotencyEdges, WithoutTheKeysTableUnkeyedRequestsFlushAndKeyedOnesAre503) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  server.connect(database).execute("DROP TABLE slotted_counterd_idempotency_keys");
  auto cfg = test_config(server, database);
  cfg.flush.interval = std::chrono::hours(1);
  in_process_daemon daemon(cfg);
  http_client c(daemon.port());
  ASSERT_EQ(c.post_json("/v1/increments", ev(7, 3, 1)).status, 202u);
  const auto flushed = c.request("POST", "/v1/flush");
  EXPECT_EQ(flushed.status, 200u) << flushed.body;
  EXPECT_EQ(server.query_int(database,
                             "SELECT SUM(count) FROM slotted_counters WHERE "
                             "record_type = 7 AND record_id = 3"),
            1);
  // A keyed request cannot be committed exactly once without the table: refused whole.
  const auto keyed = post_keyed(c, "no-table", ev(7, 4, 1));
  EXPECT_EQ(keyed.status, 503u) << keyed.body;
  EXPECT_NE(keyed.body.find("--migrate"), std::string::npos) << keyed.body;
  // Once --migrate has made it, keyed requests are taken again.
  migrate(server, database);
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  const auto later = post_keyed(c, "with-table", ev(7, 4, 1));
  EXPECT_EQ(later.status, 202u) << later.body;
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  EXPECT_EQ(server.query_int(database,
                             "SELECT SUM(count) FROM slotted_counters WHERE "
                             "record_type = 7 AND record_id = 4"),
            1);
}

INSTANTIATE_ENGINES(IdempotencyEdges);

}  // namespace
}  // namespace slotted::test
