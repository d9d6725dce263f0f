// The pending bound (flush.max_pending_keys) and statement sizes (issue 21, items 1 and
// 9): every keyed request counts against the one bound, whatever its items, WAL on or
// off; and keyed and plain batches land whole under a small max_allowed_packet, their
// statements cut below it, never a batch stuck at the head of the queue.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "db/repository.hpp"
#include "support/commit_rows.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/fault_proxy.hpp"
#include "support/http_client.hpp"
#include "support/mariadb_server.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;

// A JSON array of `n` increments +1 to counters (type, first) .. (type, first + n - 1).
std::string spread(std::uint32_t type, std::uint64_t first, std::size_t n) {
  std::string body = "[";
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) body += ',';
    body += R"({"record_type":)" + std::to_string(type) + R"(,"record_id":)" +
            std::to_string(first + i) + "}";
  }
  return body + "]";
}

std::int64_t sum_of_type(const mariadb_server& server, const std::string& database,
                         std::uint32_t type) {
  return server.query_int(database,
                          "SELECT CAST(COALESCE(SUM(count), 0) AS SIGNED) FROM slotted_counters "
                          "WHERE record_type = " +
                              std::to_string(type));
}

class PendingBound : public ::testing::TestWithParam<bool> {};

// Keyed `[]` requests with a fresh key each, the database away: before, every one was
// accepted (202) and counted 0 against the limit. Now each is a pending entry (its key):
// 503 after the limit, with or without a WAL.
TEST_P(PendingBound, KeyedRequestsWithoutIncrementsGet503AtTheLimit) {
  const bool with_wal = GetParam();
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  fault_proxy proxy(server.port());
  auto cfg = test_config(server, database);
  cfg.mysql.socket.clear();
  cfg.mysql.host = "127.0.0.1";
  cfg.mysql.port = proxy.port();
  cfg.flush.interval = 1h;  // only explicit flushes
  cfg.flush.max_pending_keys = 100;
  std::string root;
  if (with_wal) {
    root = make_temp_dir("bound");
    cfg.wal.dir = root + "/wal";
  }
  {
    in_process_daemon daemon(cfg);
    http_client client(daemon.port());
    ASSERT_TRUE(flush_until_ok(client));  // connected, the schema (and keys table) seen

    proxy.set_down(true);
    const auto flushed = client.request("POST", "/v1/flush");
    ASSERT_EQ(flushed.status, 503u) << "the database must be away: " << flushed.body;

    // Before the fix every one of them was accepted. 5,000 rather than the issue's 70,000:
    // one at a time under ASan on a loaded machine, 70,000 took two minutes.
    const int requests = 5000;
    int accepted = 0, refused = 0, first_refused = -1;
    for (int i = 0; i < requests; ++i) {
      const auto r = post_keyed(client, "empty-" + std::to_string(i), "[]");
      if (r.status == 202) {
        ++accepted;
      } else {
        ASSERT_EQ(r.status, 503u) << i << ": " << r.body;
        if (first_refused < 0) first_refused = i;
        ++refused;
      }
    }
    // One connection, one request at a time: the limit is met exactly.
    EXPECT_EQ(accepted, 100);
    EXPECT_EQ(first_refused, 100);
    EXPECT_EQ(refused, requests - 100);
    const auto m = client.get("/metrics").body;
    EXPECT_LE(metric_value(m, "slotted_counterd_pending_keys"), 100);

    // Back: the 100 keys commit, and the bound is free again.
    proxy.set_down(false);
    ASSERT_TRUE(flush_until_ok(client));
    EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counterd_idempotency_keys"),
              100);
    EXPECT_EQ(post_keyed(client, "after", "[]").status, 202u);
    EXPECT_EQ(client.post_json("/v1/increments", spread(3, 1, 1)).status, 202u);
    ASSERT_TRUE(flush_until_ok(client));
    EXPECT_EQ(sum_of_type(server, database, 3), 1);
    EXPECT_EQ(daemon.stop(), 0);
  }
  if (!root.empty()) std::filesystem::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(Wal, PendingBound, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "On" : "Off"; });

// Sets the server's global max_allowed_packet for the test's life (new connections see
// it), then puts the old value back.
class global_packet_limit {
 public:
  global_packet_limit(const mariadb_server& server, std::int64_t bytes) : server_(server) {
    old_ = server.query_int("", "SELECT @@GLOBAL.max_allowed_packet");
    server.connect().execute("SET GLOBAL max_allowed_packet = " + std::to_string(bytes));
  }
  ~global_packet_limit() {
    server_.connect().execute("SET GLOBAL max_allowed_packet = " + std::to_string(old_));
  }

 private:
  const mariadb_server& server_;
  std::int64_t old_ = 0;
};

// max_allowed_packet lowered to 1 MiB, batches that would each take more than that in
// one statement: 5,000 keyed requests with 128-character keys (one claim INSERT of
// about 1.2 MB), one keyed request of 60,000 counters with 16-digit ids (one upsert of
// about 1.6 MB), a plain request of the same (the same). Before, the server refused the first
// statement too large, the batch stayed at the head of the queue and nothing was
// flushed again. Now every batch lands, and later plain increments reach the table.
TEST(StatementSize, EveryBatchLandsUnderASmallMaxAllowedPacket) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  const global_packet_limit limit(server, 1 << 20);
  auto cfg = test_config(server, database);
  cfg.flush.interval = 1h;  // only explicit flushes
  cfg.flush.max_rows_per_statement = 100000;
  cfg.http.max_body_bytes = 4 << 20;
  in_process_daemon daemon(cfg);
  http_client client(daemon.port());
  ASSERT_TRUE(flush_until_ok(client));

  constexpr int keyed = 5000;
  constexpr std::uint64_t wide = 1000000000000000;  // 16 digits: long tuples
  for (int i = 0; i < keyed; ++i) {
    std::string key = "k" + std::to_string(i);
    key += std::string(128 - key.size(), 'x');
    ASSERT_EQ(post_keyed(client, key, spread(7, static_cast<std::uint64_t>(i), 1)).status, 202u);
  }
  ASSERT_EQ(post_keyed(client, "big", spread(7, wide, 60000)).status, 202u);
  ASSERT_EQ(client.post_json("/v1/increments", spread(8, wide, 60000)).status, 202u);

  const auto flushed = client.request("POST", "/v1/flush");
  EXPECT_EQ(flushed.status, 200u) << flushed.body;
  ASSERT_TRUE(flush_until_ok(client, 20s));
  EXPECT_EQ(sum_of_type(server, database, 7), keyed + 60000);
  EXPECT_EQ(sum_of_type(server, database, 8), 60000);
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counterd_idempotency_keys"),
            keyed + 1);

  // Nothing is left stuck: later increments flush as ever.
  ASSERT_EQ(client.post_json("/v1/increments", spread(9, 1, 10)).status, 202u);
  ASSERT_TRUE(flush_until_ok(client, 30s));
  EXPECT_EQ(sum_of_type(server, database, 9), 10);
  EXPECT_EQ(daemon.stop(), 0);
}

// A plain batch bigger than one statement may be (one replayed from a WAL written while
// max_allowed_packet was larger): db::apply sends its slot rows and dirty marks in
// statements under the connection's budget, in one transaction under one ledger row.
// Before write_counted, its rows went as one statement, refused as too large.
TEST(StatementSize, APlainBatchOverTheBudgetCommitsWholeInOneTransaction) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  const global_packet_limit limit(server, 1 << 20);
  auto conn = server.connect(database);
  constexpr std::uint64_t wide = 1000000000000000;  // 16 digits: long tuples
  std::vector<db::counter_row> rows;
  for (std::uint64_t i = 0; i < 60000; ++i) rows.push_back({8, wide + i, 3, 1});
  ASSERT_EQ(commit_rows(conn, "slotted_counters", {"big", 1, 1}, rows, rows),
            db::commit_outcome::applied);
  EXPECT_EQ(sum_of_type(server, database, 8), 60000);
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counters"), 60000);
  EXPECT_EQ(server.query_int(database,
                             "SELECT COUNT(*) FROM slotted_counterd_ledger "
                             "WHERE instance_id = 'big'"),
            1);
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counterd_dirty"), 60000);
}

}  // namespace
}  // namespace slotted::test
