// A seed-style table's AUTO_INCREMENT id runs out: every flushed row uses a value, even
// an update. The daemon exports the headroom, warns, stops flushing with a message that
// names the remedy, drops nothing, and resumes by itself once the column is widened.

#include <gtest/gtest.h>

#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;

std::string ids_body(int first, int last) {
  std::string body = "[";
  for (int id = first; id <= last; ++id)
    body += std::string(id > first ? "," : "") + R"({"record_type": 1, "record_id": )" +
            std::to_string(id) + "}";
  return body + "]";
}

TEST(AutoIncrement, ExhaustionHoldsEverythingUntilTheColumnIsWidened) {
  auto& server = shared_mariadb();
  const auto database = server.create_database();
  constexpr std::uint64_t int_max = 2147483647;
  create_seed_table(server, database, int_max - 60);  // 61 values left
  migrate(server, database);
  daemon_process daemon(daemon_yaml(server, database,
                                    "instance_id: autoinc\n"
                                    "accept_undeclared_types: true\n"
                                    "flush: {interval: 1h, max_retry_backoff: 200ms, slots: 1}\n"));
  http_client c(daemon.port());
  const auto remaining = [&] {
    return metric_value(c.get("/metrics").body, "slotted_counterd_autoincrement_remaining");
  };
  ASSERT_TRUE(flush_until_ok(c, 30s));
  EXPECT_EQ(remaining(), 61);

  // 40 new rows use 40 values.
  ASSERT_EQ(c.post_json("/v1/increments", ids_body(1, 40)).status, 202u);
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  EXPECT_EQ(remaining(), 21);
  EXPECT_NE(daemon.log().find("values left (every flushed row uses one"), std::string::npos)
      << daemon.log();
  // The same 40 counters again: updates only, yet the statement reserves 40 values
  // (more than are left). They still succeed, as no new id is needed.
  ASSERT_EQ(c.post_json("/v1/increments", ids_body(1, 40)).status, 202u);
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  EXPECT_EQ(remaining(), 0);

  // A new counter needs an id: none is left.
  ASSERT_EQ(c.post_json("/v1/increments", ids_body(1, 40)).status, 202u);
  ASSERT_EQ(c.post_json("/v1/increments", ids_body(41, 50)).status, 202u);
  const auto failed = c.request("POST", "/v1/flush");
  EXPECT_EQ(failed.status, 503u) << failed.body;
  EXPECT_EQ(c.get("/readyz").status, 503u);
  const auto log = daemon.log();
  EXPECT_NE(log.find("AUTO_INCREMENT column `id` (int(11)) is exhausted"), std::string::npos)
      << log;
  EXPECT_NE(log.find("ALTER TABLE `slotted_counters` MODIFY `id` BIGINT"), std::string::npos)
      << log;
  EXPECT_EQ(metric_value(c.get("/metrics").body, "slotted_counterd_flush_rows_refused_total"), 0)
      << "nothing may be dropped";
  EXPECT_EQ(server.query_int(database, "SELECT SUM(count) FROM slotted_counters"), 80);

  server.connect(database).execute(
      "ALTER TABLE slotted_counters MODIFY id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT");
  // Resumes by itself (the retry backoff), without a flush request.
  EXPECT_TRUE(eventually(
      [&] {
        return server.query_int(database, "SELECT COALESCE(SUM(count), 0) FROM slotted_counters") ==
               130;
      },
      30s, 50ms));
  EXPECT_EQ(
      server.query_int(database, "SELECT SUM(count) FROM slotted_counters WHERE record_id <= 40"),
      120);
  EXPECT_EQ(server.query_int(database,
                             "SELECT COUNT(*) FROM slotted_counters WHERE record_id > 40 "
                             "AND count = 1"),
            10);
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counters"), 50);
  ASSERT_TRUE(flush_until_ok(c, 10s));
  EXPECT_GT(remaining(), 1e18);
  EXPECT_EQ(c.get("/readyz").status, 200u);
}

// With auto_increment_increment = 10 (Galera sets it to the cluster size) ids are 10
// apart: 100 values before the column's maximum hold only 10 ids. The gauge counts ids.
TEST(AutoIncrement, RemainingCountsIdsNotValuesUnderAnIncrement) {
  auto& server = shared_mariadb();
  const auto database = server.create_database();
  create_seed_table(server, database, 2147483647 - 99);  // 100 values left
  migrate(server, database);
  auto admin = server.connect();
  struct restore {
    db::connection& c;
    std::int64_t increment;
    ~restore() { c.execute("SET GLOBAL auto_increment_increment = " + std::to_string(increment)); }
  } restore_increment{admin,
                      server.query_int(database, "SELECT @@GLOBAL.auto_increment_increment")};
  admin.execute("SET GLOBAL auto_increment_increment = 10");  // the daemon's sessions
  auto cfg = test_config(server, database);
  cfg.flush.interval = 1h;
  cfg.flush.slots = 1;
  in_process_daemon daemon(cfg);
  http_client c(daemon.port());
  ASSERT_TRUE(flush_until_ok(c, 30s));
  EXPECT_EQ(metric_value(c.get("/metrics").body, "slotted_counterd_autoincrement_remaining"), 10);
}

// A table without an AUTO_INCREMENT column has no such series.
TEST(AutoIncrement, NoGaugeWithoutAnAutoIncrementColumn) {
  auto& server = shared_mariadb();
  in_process_daemon daemon(test_config(server, migrated_database(server)));
  http_client c(daemon.port());
  ASSERT_TRUE(flush_until_ok(c, 30s));
  const auto metrics = c.get("/metrics").body;
  EXPECT_EQ(metric_value(metrics, "slotted_counterd_autoincrement_remaining"), -1) << metrics;
}

}  // namespace
}  // namespace slotted::test
