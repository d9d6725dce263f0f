// Rollup (README: Rollup): owning rows get SUM(count) of their slots, only for counters that
// were touched, and converge after a SIGKILL between flush and rollup.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "db/sql_adopt.hpp"
#include "integration/load.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/joined_thread.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;

constexpr int owners = 5000;

// repositories(id, download_count) with `owners` rows at -1 ("never rolled up"), recorded
// as adopted without history (the roller leaves a column alone until it is adopted).
void create_owners(const db_server& server, const std::string& database) {
  auto conn = server.connect(database);
  conn.execute(
      "CREATE TABLE repositories (id BIGINT PRIMARY KEY, name VARCHAR(32), download_count "
      "BIGINT NOT NULL)");
  std::string sql = "INSERT INTO repositories VALUES ";
  for (int i = 1; i <= owners; ++i)
    sql += std::string(i > 1 ? "," : "") + "(" + std::to_string(i) + ",'r',-1)";
  conn.execute(sql);
  conn.execute(db::state_insert(conn.sql(),
                                {123, "repositories", "id", "download_count", "repo_downloads"},
                                "done", "no_history"));
}

config::counter_decl downloads() {
  return {"repo_downloads", 123, config::rollup_target{"repositories", "id", "download_count"}};
}

// The owning table with its rows, and a test config declaring downloads() on it.
config::daemon_config rollup_config(const db_server& server, const std::string& database) {
  create_owners(server, database);
  auto cfg = test_config(server, database);
  cfg.counters = {downloads()};
  return cfg;
}

// Every owning row equals SUM(count) of its slots, or -1 when it was never touched.
void expect_converged(const db_server& server, const std::string& database, const sums& touched) {
  auto conn = server.connect(database);
  std::map<std::uint64_t, std::int64_t> sums_by_id;
  for (const auto& r : conn.query("SELECT record_id, SUM(count) FROM "
                                  "slotted_counters WHERE record_type = 123 GROUP BY record_id")) {
    sums_by_id[std::stoull(*r[0])] = std::stoll(*r[1]);
  }
  std::size_t wrong = 0, untouched_changed = 0;
  for (const auto& r : conn.query("SELECT id, download_count FROM repositories")) {
    const auto id = std::stoull(*r[0]);
    const auto count = std::stoll(*r[1]);
    const auto it = sums_by_id.find(id);
    if (it != sums_by_id.end()) {
      wrong += count != it->second;
    } else if (!touched.count({123, id})) {
      untouched_changed += count != -1;
    }
  }
  EXPECT_EQ(wrong, 0u) << "owning rows that differ from SUM(count)";
  EXPECT_EQ(untouched_changed, 0u) << "rows never touched were changed";
  EXPECT_GT(sums_by_id.size(), 1000u);
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counterd_dirty"), 0);
}

std::vector<key> owner_keys() {
  std::vector<key> keys;
  for (std::uint64_t id = 1; id <= owners; id += 2) keys.push_back({123, id});  // half of them
  return keys;
}

class Rollup : public engine_test {};

TEST_P(Rollup, OwningRowsEqualSumOfSlotsAfterFlushAndRollup) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  auto cfg = rollup_config(server, database);
  cfg.rollup.interval = 1h;  // explicit rollups only
  cfg.rollup.batch_size = 300;
  in_process_daemon daemon(cfg);

  load_options o;
  o.clients = 4;
  o.increments_per_client = 10000;
  o.keys = owner_keys();
  o.min_delta = 1;
  const auto load = run_load(daemon.port(), o);
  ASSERT_EQ(load.failed_requests, 0u);
  http_client c(daemon.port());
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  const auto rolled = c.request("POST", "/v1/rollup");
  ASSERT_EQ(rolled.status, 200u) << rolled.body;
  EXPECT_EQ(static_cast<std::size_t>(json_int(rolled.body, "records")), load.acknowledged.size());
  expect_converged(server, database, load.acknowledged);

  // Nothing new: the next rollup touches nothing.
  EXPECT_EQ(json_int(c.request("POST", "/v1/rollup").body, "records"), 0);
  const auto m = c.get("/metrics").body;
  EXPECT_NE(m.find("slotted_counterd_rollups_total{result=\"ok\"} 2"), std::string::npos);
}

TEST_P(Rollup, PeriodicRollupConvergesWithinOneFlushAndOneRollupInterval) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  auto cfg = rollup_config(server, database);
  cfg.flush.interval = 100ms;
  cfg.rollup.interval = 300ms;
  in_process_daemon daemon(cfg);
  http_client c(daemon.port());
  ASSERT_EQ(c.post_json("/v1/increments",
                        R"([{"record_type": "repo_downloads", "record_id": 7, "delta": 5},
                                              {"record_type": 123, "record_id": 8}])")
                .status,
            202u);
  eventually(
      [&] {
        return server.query_int(database, "SELECT download_count FROM repositories WHERE id = 7") ==
               5;
      },
      20s);
  EXPECT_EQ(server.query_int(database, "SELECT download_count FROM repositories WHERE id = 7"), 5);
  EXPECT_EQ(server.query_int(database, "SELECT download_count FROM repositories WHERE id = 8"), 1);
  EXPECT_EQ(server.query_int(database, "SELECT download_count FROM repositories WHERE id = 9"), -1);
}

TEST_P(Rollup, MissingOwningRowsAreSkippedAndCounted) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  auto cfg = rollup_config(server, database);
  cfg.rollup.interval = 1h;
  in_process_daemon daemon(cfg);
  http_client c(daemon.port());
  ASSERT_EQ(c.post_json("/v1/increments", R"([{"record_type": 123, "record_id": 3, "delta": 2},
                                              {"record_type": 123, "record_id": 999999, "delta": 4}])")
                .status,
            202u);
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  const auto rolled = c.request("POST", "/v1/rollup");
  ASSERT_EQ(rolled.status, 200u);
  EXPECT_EQ(json_int(rolled.body, "records"), 1);
  EXPECT_EQ(server.query_int(database, "SELECT download_count FROM repositories WHERE id = 3"), 2);
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM repositories WHERE id = 999999"), 0)
      << "not created";
  EXPECT_NE(c.get("/metrics").body.find("slotted_counterd_rollup_missing_owners_total 1"),
            std::string::npos);
}

// Under steady load every flush marks the same counters again. A run must still end:
// it takes the marks there were when it started, and leaves newer ones to the next run.
TEST_P(Rollup, RunEndsUnderSteadyLoad) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  auto cfg = rollup_config(server, database);
  cfg.flush.interval = 20ms;  // marks come back all the time
  cfg.rollup.interval = 1h;   // explicit rollups only
  cfg.rollup.batch_size = 5;  // small chunks: a run chasing new marks never ends
  in_process_daemon daemon(cfg);

  std::string body = "[";
  // More counters than a run can roll up between two flushes that mark them again.
  constexpr int ids = 2000;
  for (int id = 1; id <= ids; ++id)
    body += std::string(id > 1 ? "," : "") + R"({"record_type": 123, "record_id": )" +
            std::to_string(id) + "}";
  body += "]";
  std::atomic<bool> stop{false};
  std::atomic<int> posted{0};
  joined_thread loader(stop, [&] {
    http_client c(daemon.port());
    // Bounded: stops when told, or by itself after 60 s.
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (!stop && std::chrono::steady_clock::now() < deadline) {
      if (c.post_json("/v1/increments", body).status == 202) ++posted;
    }
  });
  // Marks exist and keep being renewed before the rollup is asked for.
  const auto marked = [&] {
    return server.query_int(database, "SELECT COUNT(*) FROM slotted_counterd_dirty") >= ids;
  };
  eventually(marked, 20s, 10ms);
  http_client c(daemon.port(), 20s);
  const auto asked = std::chrono::steady_clock::now();
  const auto rolled = c.request("POST", "/v1/rollup");
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  const bool load_still_running = !stop && posted.load() > 0;
  const int posted_at_answer = posted.load();
  const bool load_continued =
      eventually([&] { return posted.load() > posted_at_answer; }, 10s, 5ms);
  stop = true;
  loader.join();
  ASSERT_EQ(rolled.status, 200u) << "the rollup run did not end under load: " << rolled.body;
  EXPECT_TRUE(load_still_running && load_continued) << "the load must run throughout";
  // Each counter once: the marks the flusher renewed meanwhile wait for the next run.
  EXPECT_EQ(json_int(rolled.body, "records"), ids);
  // About 2 s here; a run that chases the renewed marks took 26 s or never ended.
  EXPECT_LT(took, 10.0) << "the run chased new marks";
}

std::string rollup_yaml(const db_server& server, const std::string& database,
                        const std::string& table = "repositories",
                        const std::string& count_column = "download_count") {
  return daemon_yaml(server, database,
                     "instance_id: rollup-test\n"
                     "counters:\n"
                     "  - name: repo_downloads\n"
                     "    record_type: 123\n"
                     "    rollup: {table: " +
                         table + ", id_column: id, count_column: " + count_column +
                         "}\n"
                         "flush: {interval: 1h}\n"
                         "rollup: {interval: 1h}\n");
}

TEST_P(Rollup, ConvergesAfterSigkillBetweenFlushAndRollup) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  create_owners(server, database);
  sums acknowledged;
  {
    daemon_process first(rollup_yaml(server, database));
    load_options o;
    o.clients = 4;
    o.increments_per_client = 5000;
    o.keys = owner_keys();
    o.min_delta = 1;
    acknowledged = run_load(first.port(), o).acknowledged;
    http_client c(first.port());
    ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
    first.signal(SIGKILL);
    EXPECT_EQ(first.wait(10s), -SIGKILL);
  }
  EXPECT_EQ(
      server.query_int(database, "SELECT COUNT(*) FROM repositories WHERE download_count <> -1"), 0)
      << "nothing was rolled up before the kill";
  daemon_process second(rollup_yaml(server, database));
  http_client c(second.port());
  ASSERT_EQ(c.request("POST", "/v1/rollup").status, 200u);
  expect_converged(server, database, acknowledged);
}

// A SUM the owning column cannot hold (here -1 in an INT UNSIGNED column, in strict
// sql_mode; on PostgreSQL, against a CHECK) is refused for that counter alone: the other counters
// of its chunk and every later target are rolled up, the refused one is logged with its SUM,
// counted, and keeps its mark until its SUM fits again.
TEST_P(Rollup, ASumTheOwningColumnCannotHoldIsRefusedAloneAndLaterTargetsGoOn) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  {
    auto conn = server.connect(database);
    conn.execute(postgresql()
                     ? "CREATE TABLE repositories (id BIGINT PRIMARY KEY, download_count integer "
                       "NOT NULL DEFAULT 0 CHECK (download_count >= 0))"
                     : "CREATE TABLE repositories (id BIGINT UNSIGNED PRIMARY KEY, download_count "
                       "INT UNSIGNED NOT NULL DEFAULT 0)");
    conn.execute("INSERT INTO repositories (id) VALUES (1), (2), (3)");
    conn.execute("CREATE TABLE packages (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)");
    conn.execute("INSERT INTO packages VALUES (1, 0)");
  }
  daemon_process daemon(
      daemon_yaml(server, database,
                  "instance_id: rollup-refused\n"
                  "counters:\n"
                  "  - name: repo_downloads\n"
                  "    record_type: 123\n"
                  "    rollup: {table: repositories, id_column: id, count_column: download_count}\n"
                  "  - name: package_installs\n"
                  "    record_type: 124\n"
                  "    rollup: {table: packages, id_column: id, count_column: n}\n"
                  "flush: {interval: 1h}\n"
                  "rollup: {interval: 1h}\n"));
  ASSERT_EQ(daemon.settle(), 200u);
  http_client c(daemon.port());
  ASSERT_EQ(c.post_json("/v1/increments", R"([{"record_type": 123, "record_id": 1, "delta": -1},
                                              {"record_type": 123, "record_id": 2, "delta": 5},
                                              {"record_type": 123, "record_id": 3, "delta": 7},
                                              {"record_type": 124, "record_id": 1, "delta": 4}])")
                .status,
            202u);
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  const auto count_of = [&](const std::string& table, const std::string& column, int id) {
    return server.query_int(
        database, "SELECT " + column + " FROM " + table + " WHERE id = " + std::to_string(id));
  };
  const auto marks_of = [&](int type, int id) {
    return server.query_int(database,
                            "SELECT COUNT(*) FROM slotted_counterd_dirty WHERE record_type = " +
                                std::to_string(type) + " AND record_id = " + std::to_string(id));
  };
  const auto rolled = c.request("POST", "/v1/rollup");
  ASSERT_EQ(rolled.status, 200u) << rolled.body;
  EXPECT_EQ(json_int(rolled.body, "records"), 3);  // 123/2, 123/3, 124/1
  EXPECT_EQ(count_of("repositories", "download_count", 1), 0);
  EXPECT_EQ(count_of("repositories", "download_count", 2), 5);
  EXPECT_EQ(count_of("repositories", "download_count", 3), 7);
  EXPECT_EQ(count_of("packages", "n", 1), 4) << "a later target was starved";
  EXPECT_EQ(marks_of(123, 1), 1) << "the refused counter's mark must stay";
  EXPECT_EQ(marks_of(123, 2) + marks_of(123, 3) + marks_of(124, 1), 0);
  EXPECT_EQ(metric_value(c.get("/metrics").body, "slotted_counterd_rollup_rows_refused_total"), 1);
  ASSERT_TRUE(eventually([&] { return daemon.log().find("SUM(count) -1") != std::string::npos; },
                         std::chrono::seconds(10)))
      << daemon.log();
  EXPECT_NE(daemon.log().find("(123, 1)"), std::string::npos) << daemon.log();

  // Its SUM fits again: the next rollup sets it and deletes its mark.
  ASSERT_EQ(
      c.post_json("/v1/increments", R"({"record_type": 123, "record_id": 1, "delta": 3})").status,
      202u);
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  const auto again = c.request("POST", "/v1/rollup");
  ASSERT_EQ(again.status, 200u) << again.body;
  EXPECT_EQ(count_of("repositories", "download_count", 1), 2);
  EXPECT_EQ(marks_of(123, 1), 0);
  EXPECT_EQ(metric_value(c.get("/metrics").body, "slotted_counterd_rollup_rows_refused_total"), 1);
}

TEST_P(Rollup, MissingTableOrColumnIsAClearStartupError) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  create_owners(server, database);
  std::string out;
  EXPECT_EQ(run_binary(rollup_yaml(server, database), "--check-config", out), 0) << out;
  EXPECT_NE(out.find("rollup targets verified"), std::string::npos) << out;

  EXPECT_EQ(run_binary(rollup_yaml(server, database, "repos"), "--check-config", out), 2) << out;
  EXPECT_NE(out.find("table `repos` does not exist"), std::string::npos) << out;
  EXPECT_EQ(
      run_binary(rollup_yaml(server, database, "repositories", "downloads"), "--check-config", out),
      2)
      << out;
  EXPECT_NE(out.find("has no column `downloads`"), std::string::npos) << out;
  // At start: exits 1 naming the problem.
  EXPECT_EQ(run_binary(rollup_yaml(server, database, "repos"), "", out), 1) << out;
  EXPECT_NE(out.find("table `repos` does not exist"), std::string::npos) << out;
}

INSTANTIATE_ENGINES(Rollup);

}  // namespace
}  // namespace slotted::test
