// End to end: concurrent HTTP clients -> daemon -> a real MariaDB and PostgreSQL; the
// database must hold exactly what was acknowledged.

#include <gtest/gtest.h>

#include "integration/load.hpp"
#include "support/daemon_process.hpp"
#include "support/http_client.hpp"

namespace slotted::test {
namespace {

void expect_exact(const load_outcome& load, const table_state& st, unsigned slots) {
  EXPECT_EQ(load.failed_requests, 0u);
  const sums expected = without_zeros(load.acknowledged);
  ASSERT_EQ(st.totals.size(), expected.size());
  std::size_t mismatches = 0;
  for (const auto& [k, v] : expected) {
    const auto it = st.totals.find(k);
    if (it == st.totals.end() || it->second != v) ++mismatches;
  }
  EXPECT_EQ(mismatches, 0u) << "counters whose SUM(count) differs from the acknowledged sum";
  EXPECT_GE(st.min_slot, 0);
  EXPECT_LT(st.max_slot, static_cast<std::int64_t>(slots));
}

class Pipeline : public engine_test {
 protected:
  // The largest record id the daemon's own table holds: BIGINT UNSIGNED on MariaDB,
  // bigint (signed) on PostgreSQL.
  std::uint64_t max_id() const { return postgresql() ? INT64_MAX : UINT64_MAX; }
};

TEST_P(Pipeline, ConcurrentClientsSumExactlyAfterFlush) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  auto cfg = test_config(server, database);
  cfg.flush.slots = 16;
  cfg.flush.max_rows_per_statement = 100;  // many statements per flush
  in_process_daemon daemon(cfg);

  load_options o;
  o.keys = random_keys(1000, max_id(), 7);
  const auto load = run_load(daemon.port(), o);
  EXPECT_EQ(load.accepted_increments, 8u * 20000u);

  http_client client(daemon.port());
  const auto flushed = client.request("POST", "/v1/flush");
  ASSERT_EQ(flushed.status, 200u) << flushed.body;

  expect_exact(load, read_table(server, database), cfg.flush.slots);

  // The read API agrees with the database and has nothing pending.
  const sums nonzero = without_zeros(load.acknowledged);
  const auto& [k, v] = *nonzero.begin();
  const auto reply =
      client.get("/v1/counters/" + std::to_string(k.first) + "/" + std::to_string(k.second));
  ASSERT_EQ(reply.status, 200u);
  EXPECT_EQ(json_int(reply.body, "count"), v);
  EXPECT_EQ(json_int(reply.body, "pending"), 0);
  // /metrics names the engine, as the config's section does, and no other.
  const auto metrics = client.get("/metrics").body;
  const std::string section = postgresql() ? "postgresql" : "mysql";
  const std::string other = postgresql() ? "mysql" : "postgresql";
  EXPECT_EQ(metric_value(metrics, "slotted_counterd_database_info{engine=\"" + section + "\"}"),
            1);
  EXPECT_EQ(metrics.find("engine=\"" + other + "\""), std::string::npos);
  EXPECT_EQ(daemon.stop(), 0);
}

TEST_P(Pipeline, SeedStyleTableWorksUnchanged) {
  auto& server = this->server();
  const auto database = server.create_database();
  create_seed_table(server, database);
  migrate(server, database);  // adds the ledger, leaves the table as it is
  auto cfg = test_config(server, database);
  in_process_daemon daemon(cfg);

  load_options o;
  o.keys = random_keys(1000, 2147483647, 11);
  const auto load = run_load(daemon.port(), o);

  http_client client(daemon.port());
  ASSERT_EQ(client.request("POST", "/v1/flush").status, 200u);
  expect_exact(load, read_table(server, database), cfg.flush.slots);
  EXPECT_EQ(daemon.stop(), 0);
}

TEST_P(Pipeline, IdsTheTableCannotHoldAreRefusedAtIngest) {
  auto& server = this->server();
  const auto database = server.create_database();
  create_seed_table(server, database);
  migrate(server, database);
  auto cfg = test_config(server, database);
  cfg.flush.interval = std::chrono::hours(1);
  in_process_daemon daemon(cfg);  // its first flush cycle has read the column types
  http_client client(daemon.port());
  const auto refused = client.post_json(
      "/v1/increments",
      R"([{"record_type": 1, "record_id": 5}, {"record_type": 1, "record_id": 3000000000}])");
  EXPECT_EQ(refused.status, 400u);
  EXPECT_EQ(json_int(refused.body, "index"), 1);
  EXPECT_NE(
      refused.body.find("does not fit the counters table's record_id column (at most 2147483647)"),
      std::string::npos)
      << refused.body;
  EXPECT_EQ(json_int(client.request("POST", "/v1/flush").body, "flushed_rows"), 0);
}

// With flush.connections 1 and 4: with 4, the batch at fault is split where it stands
// while the other writers write the other batches.
class PipelineRefused : public ::testing::TestWithParam<std::tuple<db::engine, unsigned>> {};

TEST_P(PipelineRefused, RowsTheTableCannotHoldAreDroppedWithoutBlockingTheRest) {
  const auto [engine, connections] = GetParam();
  auto& server = shared_server(engine);
  const auto database = server.create_database();
  create_seed_table(server, database);
  migrate(server, database);
  auto cfg = test_config(server, database);
  cfg.flush.interval = std::chrono::hours(1);
  cfg.flush.slots = 1;  // every flush adds to the same row
  cfg.flush.max_rows_per_statement = 8;
  cfg.flush.connections = connections;
  cfg.mysql.pool_size = connections + 1;
  in_process_daemon daemon(cfg);
  http_client client(daemon.port());
  // The seed-style INT count of counter 40 overflows on the second flush (MariaDB's strict
  // mode: error 1264; PostgreSQL: 22003); the 39 others must still be written.
  std::string body = "[";
  for (int i = 1; i <= 40; ++i)
    body += R"({"record_type": 1, "record_id": )" + std::to_string(i) + "},";
  body += R"({"record_type": 1, "record_id": 40, "delta": 2147483646}])";
  ASSERT_EQ(client.post_json("/v1/increments", body).status, 202u);
  ASSERT_EQ(json_int(client.request("POST", "/v1/flush").body, "flushed_rows"), 40);
  ASSERT_EQ(client.post_json("/v1/increments", body).status, 202u);
  const auto flushed = client.request("POST", "/v1/flush");
  ASSERT_EQ(flushed.status, 200u) << flushed.body;
  EXPECT_EQ(json_int(flushed.body, "flushed_rows"), 39);
  EXPECT_EQ(
      server.query_int(database, "SELECT SUM(count) FROM slotted_counters WHERE record_id < 40"),
      2 * 39);
  EXPECT_EQ(server.query_int(database, "SELECT count FROM slotted_counters WHERE record_id = 40"),
            2147483647);
  EXPECT_EQ(metric_value(client.get("/metrics").body, "slotted_counterd_flush_rows_refused_total"),
            1);
  // Later increments flow as usual.
  ASSERT_EQ(client.post_json("/v1/increments", R"({"record_type": 1, "record_id": 41})").status,
            202u);
  EXPECT_EQ(json_int(client.request("POST", "/v1/flush").body, "flushed_rows"), 1);
}

INSTANTIATE_TEST_SUITE_P(FlushConnections, PipelineRefused,
                         ::testing::Combine(::testing::ValuesIn(test_engines()),
                                            ::testing::Values(1u, 4u)),
                         [](const auto& info) {
                           return std::string(engine_name(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST_P(Pipeline, PendingIsVisibleBeforeFlushAndPersistedAfter) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  auto cfg = test_config(server, database);
  cfg.flush.interval = std::chrono::hours(1);  // only explicit flushes
  in_process_daemon daemon(cfg);
  http_client client(daemon.port());

  const std::string id = std::to_string(max_id());
  ASSERT_EQ(client
                .post_json("/v1/increments",
                           R"({"record_type": 5, "record_id": ")" + id + R"(", "delta": 7})")
                .status,
            202u);
  if (postgresql()) {
    // bigint holds 2^63 - 1 at most: a larger id is refused at ingest, not at the flush.
    const auto refused = client.post_json(
        "/v1/increments", R"({"record_type": 5, "record_id": "9223372036854775808"})");
    EXPECT_EQ(refused.status, 400u);
    EXPECT_NE(refused.body.find("record_id column (at most 9223372036854775807)"),
              std::string::npos)
        << refused.body;
  }
  auto reply = client.get("/v1/counters/5/" + id);
  ASSERT_EQ(reply.status, 200u);
  EXPECT_EQ(json_int(reply.body, "pending"), 7);
  EXPECT_EQ(json_int(reply.body, "persisted"), 0);

  const auto flushed = client.request("POST", "/v1/flush");
  ASSERT_EQ(flushed.status, 200u);
  EXPECT_EQ(json_int(flushed.body, "flushed_rows"), 1);
  reply = client.get("/v1/counters/5/" + id);
  EXPECT_EQ(json_int(reply.body, "persisted"), 7);
  EXPECT_EQ(json_int(reply.body, "pending"), 0);
  EXPECT_EQ(json_int(reply.body, "count"), 7);

  // A zero net delta writes nothing.
  ASSERT_EQ(client
                .post_json("/v1/increments", R"([{"record_type": 5, "record_id": 1, "delta": 3},
                                                   {"record_type": 5, "record_id": 1, "delta": -3}])")
                .status,
            202u);
  EXPECT_EQ(json_int(client.request("POST", "/v1/flush").body, "flushed_rows"), 0);
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counters WHERE record_id = 1"),
            0);
}

TEST_P(Pipeline, ReadingACounterNearTheInt64LimitIsExact) {
  // persisted + pending passes 2^63 - 1: the answer must not wrap (nor trap).
  auto& server = this->server();
  const auto database = migrated_database(server);
  server.connect(database).execute(
      "INSERT INTO slotted_counters VALUES (1, 500, 0, 9223372036854775802)");
  auto cfg = test_config(server, database);
  cfg.flush.interval = std::chrono::hours(1);
  in_process_daemon daemon(cfg);
  http_client client(daemon.port());
  ASSERT_EQ(
      client.post_json("/v1/increments", R"({"record_type": 1, "record_id": 500, "delta": 10})")
          .status,
      202u);
  const auto reply = client.get("/v1/counters/1/500");
  ASSERT_EQ(reply.status, 200u) << reply.body;
  EXPECT_NE(reply.body.find("\"count\": 9223372036854775812,"), std::string::npos) << reply.body;
  EXPECT_NE(reply.body.find("\"persisted\": 9223372036854775802,"), std::string::npos)
      << reply.body;
}

INSTANTIATE_ENGINES(Pipeline);

// bigint holds 2^63 - 1 at most: with a postgresql section, a larger id is refused from
// the start, before any schema check has read the columns (here the server is never
// reachable). Accepted, it would be dropped at its flush (22003).
TEST(PipelinePostgresql, AnIdPastBigintIsRefusedEvenBeforeTheDatabaseIsReached) {
  auto cfg = test_config(shared_mariadb(), "app");
  cfg.mysql.engine = config::database_engine::postgresql;
  cfg.mysql.socket = "/nonexistent/postgresql";
  cfg.mysql.connect_timeout = std::chrono::milliseconds(200);
  cfg.flush.interval = std::chrono::hours(1);
  cfg.shutdown_timeout = std::chrono::milliseconds(500);  // what it took stays unwritten
  in_process_daemon daemon(cfg);
  http_client client(daemon.port());
  const auto refused = client.post_json(
      "/v1/increments", R"({"record_type": 1, "record_id": "9223372036854775808"})");
  EXPECT_EQ(refused.status, 400u) << refused.body;
  EXPECT_NE(refused.body.find("(at most 9223372036854775807)"), std::string::npos) << refused.body;
  const auto taken = client.post_json("/v1/increments",
                                      R"({"record_type": 1, "record_id": "9223372036854775807"})");
  EXPECT_EQ(taken.status, 202u) << taken.body;
}

}  // namespace
}  // namespace slotted::test
