// Idempotency-Key (README: HTTP API, Idempotency-Key) under an unlucky operator and a
// production database: the window judged by a server in a daylight-saving time zone and
// by instances whose clocks disagree, a keys table that is missing while keyed requests
// are pending, the keys table's prune beside open keyed commits, and the header's
// spelling. Tests named DISABLED_ fail on this version; their comment names the finding
// of the review (reviews/idem2.md in the lead's notes) they prove.

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "db/repository.hpp"
#include "idempotency/keyed_batches.hpp"
#include "idempotency/keyed_request.hpp"
#include "support/daemon_process.hpp"
#include "support/fault_proxy.hpp"
#include "support/http_client.hpp"
#include "support/mariadb_server.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;

// A keyed request of one increment, +1 to counter (7, id), that arrived at `received_ms`
// (unix milliseconds by its instance's clock).
idempotency::keyed_request keyed(const std::string& key, std::uint64_t id,
                                 std::int64_t received_ms) {
  idempotency::keyed_request r;
  r.key = key;
  r.increments = {ingest::increment{7, id, 1}};
  r.hash = idempotency::hash_of(r.increments);
  r.received_ms = received_ms;
  return r;
}

// Commits `r` alone, in a keyed batch of `instance`, as its flush would; returns the
// counter rows it upserted (0: the key was found committed before).
std::size_t commit_alone(db::connection& conn, const std::string& instance, std::uint64_t seq,
                         idempotency::keyed_request r, std::chrono::milliseconds window) {
  std::mt19937_64 rng(1);
  std::size_t dropped = 0;
  std::vector<idempotency::keyed_request> requests;
  requests.push_back(std::move(r));
  const auto batches = idempotency::form_keyed_batches(std::move(requests), 1000, 1, 1, seq, rng,
                                                       std::chrono::steady_clock::now(), dropped);
  const auto out = idempotency::commit_keyed_batch(
      conn, "slotted_counters", {instance, 1, seq}, batches.at(0), window,
      [](std::span<const db::counter_row>) { return std::span<const db::counter_row>{}; });
  return out.rows;
}

std::int64_t total(const mariadb_server& server, const std::string& database, std::uint64_t id) {
  return server.query_int(database,
                          "SELECT CAST(COALESCE(SUM(count), 0) AS SIGNED) FROM slotted_counters "
                          "WHERE record_type = 7 AND record_id = " +
                              std::to_string(id));
}

http_reply post_keyed(http_client& c, const std::string& key, const std::string& body) {
  return c.request("POST", "/v1/increments", body, "application/json", {{"Idempotency-Key", key}});
}

std::string ev(std::uint64_t id) {
  return R"({"record_type": 7, "record_id": )" + std::to_string(id) + R"(, "delta": 1})";
}

// A MariaDB whose time_zone is SYSTEM (its default) on a host in Europe/Berlin.
mariadb_server& berlin_mariadb() {
  static mariadb_server* server = [] {
    const char* was = getenv("TZ");
    const std::optional<std::string> saved = was ? std::optional<std::string>(was) : std::nullopt;
    setenv("TZ", "Europe/Berlin", 1);  // inherited by the mariadbd it spawns
    mariadb_server* s = nullptr;
    try {
      s = new mariadb_server();
    } catch (...) {
      saved ? setenv("TZ", saved->c_str(), 1) : unsetenv("TZ");
      throw;
    }
    saved ? setenv("TZ", saved->c_str(), 1) : unsetenv("TZ");
    return s;
  }();
  return *server;
}

// Finding 0 (HIGH): a keyed request with a key of 128 characters (valid) is logged
// with a key length byte the replay reads as malformed: after a SIGKILL the instance
// does not start again (the WAL is "corrupt"), and --wal-salvage would cut the request
// and everything logged after it.
TEST(IdempotencyReview, AKeyOf128CharactersSurvivesASigkillWithTheWal) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  char tmpl[] = "/tmp/slotted-idem-review-XXXXXX";
  const std::string root = mkdtemp(tmpl);
  const std::string yaml =
      daemon_yaml(server, database,
                  "instance_id: rv-long\naccept_undeclared_types: true\nflush: {interval: 1h}\n"
                  "wal: {dir: " +
                      root + "/wal, fsync: always}\n");
  const std::string key(128, 'k');
  {
    daemon_process a(yaml);
    ASSERT_EQ(a.settle(), 200u);
    http_client c(a.port());
    ASSERT_EQ(post_keyed(c, key, ev(14)).status, 202u);
    ASSERT_EQ(c.post_json("/v1/increments", ev(15)).status, 202u);  // logged after it
    a.signal(SIGKILL);
    ASSERT_EQ(a.wait(10s), -SIGKILL);
  }
  daemon_process a(yaml);  // throws when the daemon exits instead of listening
  http_client c(a.port());
  const auto retry = post_keyed(c, key, ev(14));
  EXPECT_EQ(retry.status, 202u);
  EXPECT_EQ(retry.headers.count("idempotent-replayed"), 1u);
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(total(server, database, 14), 1);
  EXPECT_EQ(total(server, database, 15), 1);
  std::filesystem::remove_all(root);
}

// Finding 1 (MEDIUM): `created` is written through FROM_UNIXTIME and the window compared
// with DATETIME arithmetic, both in the session's time_zone: on a server whose zone has
// daylight saving (MariaDB's default time_zone is SYSTEM), the window is wall-clock
// hours, one hour short across the spring change. A retry 23 h 45 min after the first
// request, across it, was taken for a new request and applied a second time.
TEST(IdempotencyReview, AServerInADaylightSavingZoneKeepsTheWholeWindow) {
  auto& server = berlin_mariadb();
  ASSERT_EQ(server.query_int("", "SELECT @@system_time_zone IN ('CET', 'CEST')"), 1);
  const auto database = server.create_database();
  migrate(server, database);
  auto conn = server.connect(database);
  // 2026-03-28 01:30 UTC (02:30 CET); the retry 23 h 45 min later, 2026-03-29 01:15 UTC
  // (03:15 CEST): 24 h 45 min apart on the wall clock.
  const std::int64_t first = 1774661400000;
  const std::int64_t retry = first + (23 * 60 + 45) * 60 * 1000;
  EXPECT_EQ(commit_alone(conn, "dst-a", 1, keyed("dst-day", 1, first), 24h), 1u);
  EXPECT_EQ(commit_alone(conn, "dst-b", 1, keyed("dst-day", 1, retry), 24h), 0u)
      << "a retry 23 h 45 min after the first was applied again (window 24 h)";
  EXPECT_EQ(total(server, database, 1), 1);
  // With a window of one hour, any retry across the change: 45 minutes later here.
  const std::int64_t night = 1774744200000;  // 2026-03-29 00:30 UTC (01:30 CET)
  EXPECT_EQ(commit_alone(conn, "dst-a", 2, keyed("dst-hour", 2, night), 1h), 1u);
  EXPECT_EQ(commit_alone(conn, "dst-b", 2, keyed("dst-hour", 2, night + 45 * 60 * 1000), 1h), 0u)
      << "a retry 45 min after the first was applied again (window 1 h)";
  EXPECT_EQ(total(server, database, 2), 1);
}

// Finding 3 (LOW-MEDIUM): `created` is the arriving instance's clock, and a retry's
// arrival is compared with it on another instance's clock: the window moves by their
// skew. A retry one minute after the first, through an instance whose clock runs ten
// minutes ahead (window 10 min), or accepted first by an instance ten minutes behind,
// is applied again. The database's one clock would not move (see reviews/idem2.md).
TEST(IdempotencyReview, DISABLED_ARetryThroughAnInstanceWithAnotherClockIsNotAppliedAgain) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  auto conn = server.connect(database);
  const std::int64_t now = idempotency::now_ms();
  const std::int64_t minute = 60 * 1000;
  // A (clock right) accepted it now; the retry a minute later reaches B, 10 min ahead.
  EXPECT_EQ(commit_alone(conn, "skew-a", 1, keyed("skew-ahead", 3, now), 10min), 1u);
  EXPECT_EQ(commit_alone(conn, "skew-b", 1, keyed("skew-ahead", 3, now + 11 * minute), 10min), 0u)
      << "applied again through the instance whose clock is ahead";
  EXPECT_EQ(total(server, database, 3), 1);
  // B, 10 min behind, accepted it now; the retry a minute later reaches A.
  EXPECT_EQ(commit_alone(conn, "skew-b", 2, keyed("skew-behind", 4, now - 10 * minute), 10min), 1u);
  EXPECT_EQ(commit_alone(conn, "skew-a", 2, keyed("skew-behind", 4, now + minute), 10min), 0u)
      << "applied again after the instance whose clock is behind accepted it";
  EXPECT_EQ(total(server, database, 4), 1);
}

// Finding 2 (MEDIUM): the keys table is assumed present until a schema check says
// otherwise. An upgrade without --migrate whose database is not reachable at the start
// (or simply slower than the first request) accepts keyed requests; their batch then
// fails (1146, no such table) at every cycle, before the cycle takes anything new from
// the store: every later increment, keyed or not, stays pending. The README promises
// that without the table "the daemon flushes everything else as before".
TEST(IdempotencyReview,
     DISABLED_AKeyedRequestAcceptedBeforeTheSchemaCheckDoesNotStopTheFlushOfOthers) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  // A database of the version before Idempotency-Key: no keys table.
  server.connect(database).execute("DROP TABLE slotted_counterd_idempotency_keys");
  fault_proxy proxy(server.port());
  proxy.set_down(true);  // not reachable when the daemon starts
  auto cfg = test_config(server, database);
  cfg.mysql.socket.clear();
  cfg.mysql.host = "127.0.0.1";
  cfg.mysql.port = proxy.port();
  cfg.flush.interval = std::chrono::hours(1);
  in_process_daemon daemon(cfg);
  http_client c(daemon.port());
  const auto first = post_keyed(c, "before-the-check", ev(5));
  EXPECT_EQ(first.status, 503u) << "a keyed request was accepted without a keys table";
  proxy.set_down(false);
  c.request("POST", "/v1/flush");  // finds the table missing
  ASSERT_EQ(c.post_json("/v1/increments", ev(6)).status, 202u);
  EXPECT_TRUE(flush_until_ok(c, 15s)) << "no flush succeeds any more";
  EXPECT_EQ(total(server, database, 6), 1) << "an unkeyed increment stays pending";
  // Once --migrate has made the table, an accepted keyed request is applied once.
  migrate(server, database);
  ASSERT_TRUE(flush_until_ok(c, 30s));
  EXPECT_EQ(total(server, database, 5), first.status == 202 ? 1 : 0);
}

// Finding 2, the other way in: the table is dropped (or a backup without it restored)
// while a keyed request is pending. Same wedge.
TEST(IdempotencyReview, DISABLED_ADroppedKeysTableDoesNotStopTheFlushOfOthers) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  auto cfg = test_config(server, database);
  cfg.flush.interval = std::chrono::hours(1);
  in_process_daemon daemon(cfg);
  http_client c(daemon.port());
  ASSERT_EQ(post_keyed(c, "pending-when-dropped", ev(8)).status, 202u);
  server.connect(database).execute("DROP TABLE slotted_counterd_idempotency_keys");
  c.request("POST", "/v1/flush");  // the keyed batch meets the missing table
  ASSERT_EQ(c.post_json("/v1/increments", ev(9)).status, 202u);
  EXPECT_TRUE(flush_until_ok(c, 15s)) << "no flush succeeds any more";
  EXPECT_EQ(total(server, database, 9), 1) << "an unkeyed increment stays pending";
  // Keyed requests are refused meanwhile, and nothing is lost once --migrate ran.
  EXPECT_EQ(post_keyed(c, "while-missing", ev(10)).status, 503u);
  migrate(server, database);
  ASSERT_TRUE(flush_until_ok(c, 30s));
  EXPECT_EQ(total(server, database, 8), 1);
}

// Not a finding (a guard): a chunk of the keys table's prune reads through `by_age` and
// locks only what it deletes, even when old keys are most of the table (a backlog after
// an outage, a shorter window), so it neither waits on nor blocks a keyed commit holding
// a current key. (Measured on MariaDB 10.11: range on by_age, 2 locks per deleted row,
// with 75% and with 100% of the rows old.) The one row it does lock beyond its cut is
// the first one past it, as the range's end: not held here.
// DISABLED (finding 5, unresolved): fails in about 2 of 3 runs on this branch (the
// prune throws a lock wait timeout, deleting nothing), passed twice on main: whether a
// chunk waits on a current key seems to depend on the sampled statistics. To be
// investigated with EXPLAIN and trx_rows_locked before it is enabled.
TEST(IdempotencyReview, DISABLED_AKeysPruneChunkWaitsOnNoCurrentKey) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  auto conn = server.connect(database);
  // 30,000 keys older than two windows of one hour, 10,000 current ones.
  conn.execute(
      "INSERT INTO slotted_counterd_idempotency_keys (idem_key, body_hash, accepted, "
      "instance_id, run_id, batch_seq, created) SELECT CONCAT('old-', seq), "
      "'0123456789abcdef0123456789abcdef', 1, 'prune', 1, seq, NOW(3) - INTERVAL 3 HOUR + "
      "INTERVAL seq MICROSECOND FROM seq_1_to_30000");
  conn.execute(
      "INSERT INTO slotted_counterd_idempotency_keys (idem_key, body_hash, accepted, "
      "instance_id, run_id, batch_seq, created) SELECT CONCAT('new-', seq), "
      "'0123456789abcdef0123456789abcdef', 1, 'prune', 2, seq, NOW(3) - INTERVAL 30 MINUTE + "
      "INTERVAL seq MICROSECOND FROM seq_1_to_10000");
  conn.execute("ANALYZE TABLE slotted_counterd_idempotency_keys");
  // A keyed commit holding a current key (taking it over), not yet committed.
  auto other = server.connect(database);
  other.execute("START TRANSACTION");
  other.execute(
      "UPDATE slotted_counterd_idempotency_keys SET batch_seq = 0 WHERE idem_key = 'new-5000'");
  conn.execute("SET SESSION innodb_lock_wait_timeout = 2");
  std::uint64_t deleted = 0;
  EXPECT_NO_THROW(deleted = idempotency::prune_keys(conn, 1h, 10000, 10));
  EXPECT_EQ(deleted, 30000u);
  other.execute("COMMIT");
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counterd_idempotency_keys"),
            10000);
}

// Not a finding (a guard): the header's name is case-insensitive, so two fields that
// differ only in case are the same header sent twice (400), and one in lower case is
// the key.
TEST(IdempotencyReview, TheHeaderNameIsCaseInsensitiveAndTwoFieldsInAnyCaseAre400) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  auto cfg = test_config(server, database);
  cfg.flush.interval = std::chrono::hours(1);
  in_process_daemon daemon(cfg);
  const auto twice = raw_exchange(
      daemon.port(),
      http_post_bytes(ev(11),
                      "Idempotency-Key: a1\r\nidempotency-key: a1\r\nConnection: close\r\n"));
  EXPECT_NE(twice.find(" 400 "), std::string::npos) << twice;
  for (int i = 0; i < 2; ++i) {
    const auto lower =
        raw_exchange(daemon.port(),
                     http_post_bytes(ev(12), "IDEMPOTENCY-KEY: lower-1\r\nConnection: close\r\n"));
    EXPECT_NE(lower.find(" 202 "), std::string::npos) << lower;
    EXPECT_EQ(lower.find("Idempotent-Replayed") != std::string::npos, i == 1) << lower;
  }
  http_client c(daemon.port());
  ASSERT_TRUE(flush_until_ok(c));
  EXPECT_EQ(total(server, database, 11), 0);
  EXPECT_EQ(total(server, database, 12), 1);
  // GET and HEAD on the path apply nothing.
  EXPECT_EQ(c.request("GET", "/v1/increments", "", "", {{"Idempotency-Key", "get-1"}}).status,
            405u);
}

}  // namespace
}  // namespace slotted::test
