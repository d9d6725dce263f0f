// Adoption of an existing owning column (docs/adopting.md, daemon/adopt/adopt.hpp):
// --adopt takes each owning row's count into the counter exactly once (also when
// killed, run twice or twice at once, or cut off from the database), refuses rows it
// cannot take and changes nothing then; until a counter is adopted the roller leaves its
// owning column alone.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "db/top.hpp"
#include "integration/load.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/fault_proxy.hpp"
#include "support/http_client.hpp"
#include "support/joined_thread.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;

constexpr const char* counters_yaml =
    "counters:\n"
    "  - name: repo_downloads\n"
    "    record_type: 123\n"
    "    rollup: {table: repositories, id_column: id, count_column: download_count}\n"
    "  - {name: pages, record_type: 7}\n";

// repositories(id, download_count), download_count nullable (a NULL is bad input).
void create_owners(const db_server& server, const std::string& database,
                   const std::string& values, const std::string& id_type = "BIGINT") {
  auto conn = server.connect(database);
  conn.execute("CREATE TABLE repositories (id " + id_type +
               " PRIMARY KEY, download_count BIGINT NULL)");
  if (!values.empty()) conn.execute("INSERT INTO repositories VALUES " + values);
}

// `n` owning rows, ids 1..n, count (id * 7) % 1000 (some zero).
void create_many_owners(const db_server& server, const std::string& database, int n) {
  create_owners(server, database, "");
  auto conn = server.connect(database);
  for (int from = 1; from <= n; from += 5000) {
    std::string sql = "INSERT INTO repositories VALUES ";
    for (int i = from; i < from + 5000 && i <= n; ++i)
      sql += std::string(i > from ? "," : "") + "(" + std::to_string(i) + "," +
             std::to_string(i * 7 % 1000) + ")";
    conn.execute(sql);
  }
}

struct run_result {
  int status = -1;  // wait status
  std::string output;
  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status); }
};

// The built binary with `args` after --config, in a temp dir; `batch_rows` > 0 sets the
// adoption's batch size (the binary's test knob).
class adopt_process {
 public:
  adopt_process(const std::string& yaml, const std::vector<std::string>& args,
                std::size_t batch_rows = 0) {
    dir_ = slotted::test::make_temp_dir("adopt");
    std::ofstream(dir_ + "/c.yaml") << yaml;
    std::vector<std::string> argv{"env"};
    if (batch_rows > 0)
      argv.push_back("SLOTTED_COUNTERD_ADOPT_BATCH_ROWS=" + std::to_string(batch_rows));
    argv.insert(argv.end(), {SLOTTED_DAEMON_BINARY, "--config", dir_ + "/c.yaml"});
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = spawn_process(argv, dir_ + "/out");
  }
  ~adopt_process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      wait_process(pid_);
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  void kill() { ::kill(pid_, SIGKILL); }
  run_result wait() {
    run_result r;
    r.status = wait_process(pid_);
    pid_ = -1;
    std::ifstream in(dir_ + "/out");
    r.output.assign(std::istreambuf_iterator<char>(in), {});
    return r;
  }

 private:
  std::string dir_;
  pid_t pid_ = -1;
};

run_result adopt(const std::string& yaml, const std::vector<std::string>& args,
                 std::size_t batch_rows = 0) {
  return adopt_process(yaml, args, batch_rows).wait();
}

std::int64_t slot_sum(const db_server& server, const std::string& database, std::uint64_t id) {
  return server.query_int(database,
                          "SELECT COALESCE(SUM(count), 0) FROM slotted_counters "
                          "WHERE record_type = 123 AND record_id = " +
                              std::to_string(id));
}

// Owning rows whose count differs from SUM(count) of their counter's slots plus `extra`
// (what the daemon counted), and the sums' total against the column's.
void expect_exact(const db_server& server, const std::string& database,
                  const sums& extra = {}) {
  auto conn = server.connect(database);
  std::map<std::uint64_t, std::int64_t> slots;
  for (const auto& r : conn.query("SELECT record_id, SUM(count) FROM "
                                  "slotted_counters WHERE record_type = 123 GROUP BY record_id"))
    slots[std::stoull(*r[0])] = std::stoll(*r[1]);
  std::size_t wrong = 0, owners = 0;
  std::string first;
  for (const auto& r : conn.query("SELECT id, download_count FROM repositories")) {
    ++owners;
    const auto id = std::stoull(*r[0]);
    const auto it = extra.find({123, id});
    const std::int64_t want = std::stoll(*r[1]) + (it == extra.end() ? 0 : it->second);
    const std::int64_t have = slots.count(id) ? slots[id] : 0;
    if (have != want) {
      if (wrong++ == 0)
        first = "id " + std::to_string(id) + ": " + std::to_string(have) +
                " != " + std::to_string(want);
    }
    slots.erase(id);
  }
  EXPECT_EQ(wrong, 0u) << "counters that differ from history + daemon counts, first: " << first;
  EXPECT_TRUE(slots.empty()) << "slot rows without an owning row";
  EXPECT_GT(owners, 0u);
}

std::string adoption_state(const db_server& server, const std::string& database) {
  const auto rows = server.connect(database).query(
      "SELECT state, mode, last_id, rows_taken, total_taken FROM "
      "slotted_counterd_adoptions WHERE record_type = 123");
  if (rows.empty()) return "none";
  std::string s;
  for (std::size_t i = 0; i < rows[0].size(); ++i)
    s += rows[0][i].value_or(i == 2 ? "none" : "NULL") + " ";
  return s;
}

std::string slots_fingerprint(const db_server& server, const std::string& database) {
  const auto rows = server.connect(database).query(
      "SELECT COUNT(*), COALESCE(SUM(count), 0), COALESCE(SUM(record_id * 31 + slot * count), "
      "0) FROM slotted_counters");
  return rows[0][0].value_or("") + "/" + rows[0][1].value_or("") + "/" + rows[0][2].value_or("");
}

class Adopt : public engine_test {};
// MariaDB's alone: its column names are case-insensitive; top-N is not built on
// PostgreSQL yet.
class AdoptOnMariaDB : public engine_test {};

TEST_P(Adopt, HistoryIsKeptThroughAdoptionAndRollup) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  create_owners(server, database, "(1, 1000), (2, 0), (3, 7)");
  const auto yaml = daemon_yaml(server, database,
                                std::string(counters_yaml) +
                                    "flush: {interval: 1h}\nrollup: {interval: 1h}\n"
                                    "log: {level: info}\n");
  daemon_process daemon(yaml);
  daemon.settle();
  http_client c(daemon.port());
  ASSERT_EQ(
      c.post_json("/v1/increments", R"({"record_type": 123, "record_id": 1, "delta": 5})").status,
      202u);
  ASSERT_EQ(daemon.settle(), 200u);
  ASSERT_EQ(c.request("POST", "/v1/rollup").status, 200u);
  // Not adopted: the history stays in the column.
  EXPECT_EQ(server.query_int(database, "SELECT download_count FROM repositories WHERE id = 1"),
            1000);

  const auto r = adopt(yaml, {"--adopt", "repo_downloads"});
  ASSERT_EQ(r.exit_code(), 0) << r.output;
  EXPECT_NE(r.output.find("2 owning rows with a count taken, total 1007"), std::string::npos)
      << r.output;
  EXPECT_EQ(slot_sum(server, database, 1), 1005);
  EXPECT_EQ(json_int(c.get("/v1/counters/123/1").body, "count"), 1005);

  ASSERT_EQ(
      c.post_json("/v1/increments", R"({"record_type": 123, "record_id": 1, "delta": 3})").status,
      202u);
  ASSERT_EQ(daemon.settle(), 200u);
  const auto rolled = c.request("POST", "/v1/rollup");
  ASSERT_EQ(rolled.status, 200u) << rolled.body;
  EXPECT_EQ(server.query_int(database, "SELECT download_count FROM repositories WHERE id = 1"),
            1008);
  EXPECT_EQ(json_int(c.get("/v1/counters/123/1").body, "count"), 1008);
  EXPECT_EQ(json_int(c.get("/v1/counters/123/3").body, "count"), 7);
  EXPECT_EQ(server.query_int(database, "SELECT download_count FROM repositories WHERE id = 3"), 7);
  EXPECT_NE(
      c.get("/metrics").body.find("slotted_counterd_rollup_adopted{counter=\"repo_downloads\"} 1"),
      std::string::npos);
}

TEST_P(Adopt, UntilAdoptedRollupLeavesTheOwningColumnAloneAndSaysSoOnce) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  create_owners(server, database, "(1, 1000), (2, 0)");
  daemon_process daemon(
      daemon_yaml(server, database,
                  std::string(counters_yaml) + "flush: {interval: 1h}\nrollup: {interval: 1h}\n"));
  daemon.settle();
  http_client c(daemon.port());
  ASSERT_EQ(c.post_json("/v1/increments", R"([{"record_type": 123, "record_id": 1, "delta": 5},
                                              {"record_type": 123, "record_id": 2, "delta": 2}])")
                .status,
            202u);
  ASSERT_EQ(daemon.settle(), 200u);
  for (int i = 0; i < 3; ++i) {
    const auto rolled = c.request("POST", "/v1/rollup");
    ASSERT_EQ(rolled.status, 200u) << rolled.body;
    EXPECT_EQ(json_int(rolled.body, "records"), 0);
  }
  EXPECT_EQ(server.query_int(database, "SELECT download_count FROM repositories WHERE id = 1"),
            1000);
  EXPECT_EQ(server.query_int(database, "SELECT download_count FROM repositories WHERE id = 2"), 0);
  // Its marks are kept for the rollup after the adoption.
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counterd_dirty"), 2);
  EXPECT_NE(
      c.get("/metrics").body.find("slotted_counterd_rollup_adopted{counter=\"repo_downloads\"} 0"),
      std::string::npos);
  EXPECT_EQ(occurrences(daemon.log(), "is not rolled up: "), 1u) << daemon.log();
  // ... naming both ways out: --adopt, and --no-history for a column an earlier version
  // rolled up (where --adopt would count its values twice).
  EXPECT_NE(daemon.log().find("run --adopt repo_downloads --no-history instead"),
            std::string::npos);
}

TEST_P(Adopt, AnAllZeroOwningColumnIsRolledUpWithoutAdoption) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  create_owners(server, database, "(1, 0), (2, 0)");
  daemon_process daemon(
      daemon_yaml(server, database,
                  std::string(counters_yaml) + "flush: {interval: 1h}\nrollup: {interval: 1h}\n"));
  daemon.settle();
  http_client c(daemon.port());
  ASSERT_EQ(
      c.post_json("/v1/increments", R"({"record_type": 123, "record_id": 1, "delta": 4})").status,
      202u);
  ASSERT_EQ(daemon.settle(), 200u);
  const auto rolled = c.request("POST", "/v1/rollup");
  ASSERT_EQ(rolled.status, 200u) << rolled.body;
  EXPECT_EQ(json_int(rolled.body, "records"), 1);
  EXPECT_EQ(server.query_int(database, "SELECT download_count FROM repositories WHERE id = 1"), 4);
  EXPECT_EQ(adoption_state(server, database), "done zeros none 0 0 ");
  EXPECT_NE(
      c.get("/metrics").body.find("slotted_counterd_rollup_adopted{counter=\"repo_downloads\"} 1"),
      std::string::npos);
  // Recorded: later values the daemon wrote do not make it "not adopted" again.
  ASSERT_EQ(
      c.post_json("/v1/increments", R"({"record_type": 123, "record_id": 1, "delta": 1})").status,
      202u);
  ASSERT_EQ(daemon.settle(), 200u);
  ASSERT_EQ(c.request("POST", "/v1/rollup").status, 200u);
  EXPECT_EQ(server.query_int(database, "SELECT download_count FROM repositories WHERE id = 1"), 5);
  EXPECT_EQ(daemon.log().find("--adopt"), std::string::npos) << daemon.log();
}

TEST_P(Adopt, ASecondAdoptExitsZeroAndChangesNothing) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  create_many_owners(server, database, 3000);
  const auto yaml = daemon_yaml(server, database, counters_yaml);
  const auto first = adopt(yaml, {"--adopt", "repo_downloads"}, 1000);
  ASSERT_EQ(first.exit_code(), 0) << first.output;
  expect_exact(server, database);
  const auto slots = slots_fingerprint(server, database);
  const auto state = adoption_state(server, database);
  EXPECT_EQ(state.substr(0, 13), "done history ");
  const auto second = adopt(yaml, {"--adopt", "repo_downloads"}, 1000);
  EXPECT_EQ(second.exit_code(), 0) << second.output;
  EXPECT_NE(second.output.find("already adopted"), std::string::npos) << second.output;
  EXPECT_EQ(slots_fingerprint(server, database), slots);
  EXPECT_EQ(adoption_state(server, database), state);
  // --no-history on an adopted counter: nothing either.
  const auto third = adopt(yaml, {"--adopt", "repo_downloads", "--no-history"});
  EXPECT_EQ(third.exit_code(), 0) << third.output;
  EXPECT_EQ(slots_fingerprint(server, database), slots);
  EXPECT_EQ(adoption_state(server, database), state);
}

// MariaDB column names ignore case: the same column spelled otherwise in the config after
// the adoption is the adopted column, not one to adopt again (which would take the
// column's values, history and the daemon's rolled-up counts, a second time).
TEST_P(AdoptOnMariaDB, TheAdoptedColumnSpelledInAnotherCaseIsStillAdopted) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  create_many_owners(server, database, 300);
  const auto first =
      adopt(daemon_yaml(server, database, counters_yaml), {"--adopt", "repo_downloads"});
  ASSERT_EQ(first.exit_code(), 0) << first.output;
  const auto slots = slots_fingerprint(server, database);
  std::string respelled = counters_yaml;
  respelled.replace(respelled.find("count_column: download_count"), 28,
                    "count_column: Download_Count");
  const auto second =
      adopt(daemon_yaml(server, database, respelled), {"--adopt", "repo_downloads"});
  EXPECT_EQ(second.exit_code(), 0) << second.output;
  EXPECT_NE(second.output.find("already adopted"), std::string::npos) << second.output;
  EXPECT_EQ(slots_fingerprint(server, database), slots);
  expect_exact(server, database);
}

// A run cut short before its first batch, its row spelling the column otherwise than the
// config does now: the rerun resumes that row (one row, all history once), where an
// INSERT IGNORE of the config's spelling added a second one.
TEST_P(AdoptOnMariaDB, ARunCutShortResumesWhateverTheColumnsCase) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  create_many_owners(server, database, 300);
  server.connect(database).execute(
      "INSERT INTO slotted_counterd_adoptions (record_type, owner_table, count_column, "
      "id_column, state, mode, started) VALUES (123, 'repositories', 'Download_Count', 'id', "
      "'running', 'history', UTC_TIMESTAMP())");
  const auto rerun =
      adopt(daemon_yaml(server, database, counters_yaml), {"--adopt", "repo_downloads"});
  ASSERT_EQ(rerun.exit_code(), 0) << rerun.output;
  expect_exact(server, database);
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counterd_adoptions"), 1);
  EXPECT_EQ(adoption_state(server, database).substr(0, 5), "done ");
}

// A column adopted twice by an earlier build (two adoption rows that differ only in the
// column's case): which one holds is not known, so --adopt refuses, naming the rows.
TEST_P(AdoptOnMariaDB, TwoAdoptionRowsOfOneColumnInTwoCasesAreRefused) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  create_many_owners(server, database, 30);
  const auto yaml = daemon_yaml(server, database, counters_yaml);
  ASSERT_EQ(adopt(yaml, {"--adopt", "repo_downloads"}).exit_code(), 0);
  server.connect(database).execute(
      "INSERT INTO slotted_counterd_adoptions (record_type, owner_table, count_column, "
      "id_column, state, mode, started) SELECT record_type, owner_table, 'Download_Count', "
      "id_column, state, mode, started FROM slotted_counterd_adoptions");
  const auto slots = slots_fingerprint(server, database);
  const auto again = adopt(yaml, {"--adopt", "repo_downloads"});
  EXPECT_EQ(again.exit_code(), 2) << again.output;
  EXPECT_NE(again.output.find("differ only in the column's case"), std::string::npos)
      << again.output;
  EXPECT_EQ(slots_fingerprint(server, database), slots);
}

TEST_P(Adopt, NoHistoryRecordsTheAdoptionAndTakesNothing) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  create_owners(server, database, "(1, 1000), (2, 5)");
  const auto yaml = daemon_yaml(server, database, counters_yaml);
  const auto r = adopt(yaml, {"--adopt", "repo_downloads", "--no-history"});
  ASSERT_EQ(r.exit_code(), 0) << r.output;
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counters"), 0);
  EXPECT_EQ(adoption_state(server, database), "done no_history none 0 0 ");
}

TEST_P(Adopt, SigkillMidwayThenRerunEndsExact) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  create_many_owners(server, database, 20000);
  const auto yaml = daemon_yaml(server, database, counters_yaml);
  {
    adopt_process p(yaml, {"--adopt", "repo_downloads"}, 10);
    ASSERT_TRUE(eventually(
        [&] {
          return server.query_int(database,
                                  "SELECT COALESCE(MAX(last_id), 0) FROM "
                                  "slotted_counterd_adoptions") > 0;
        },
        60s, 5ms));
    p.kill();
    const auto killed = p.wait();
    ASSERT_EQ(killed.exit_code(), -SIGKILL) << "it ended before the kill: " << killed.output;
  }
  const auto mid = adoption_state(server, database);
  ASSERT_EQ(mid.substr(0, 8), "running ") << mid;
  const auto rerun = adopt(yaml, {"--adopt", "repo_downloads"}, 1000);
  ASSERT_EQ(rerun.exit_code(), 0) << rerun.output;
  EXPECT_NE(rerun.output.find("resuming after owning id"), std::string::npos) << rerun.output;
  expect_exact(server, database);
  EXPECT_EQ(adoption_state(server, database).substr(0, 5), "done ");
}

TEST_P(Adopt, TwoRunsAtOnceTakeEachRowOnce) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  create_many_owners(server, database, 10000);
  const auto yaml = daemon_yaml(server, database, counters_yaml);
  adopt_process a(yaml, {"--adopt", "repo_downloads"}, 50);
  adopt_process b(yaml, {"--adopt", "repo_downloads"}, 50);
  const auto ra = a.wait(), rb = b.wait();
  EXPECT_EQ(ra.exit_code(), 0) << ra.output;
  EXPECT_EQ(rb.exit_code(), 0) << rb.output;
  expect_exact(server, database);
  EXPECT_EQ(
      server.query_int(database,
                       "SELECT total_taken FROM slotted_counterd_adoptions"),
      server.query_int(database, "SELECT SUM(download_count) FROM repositories"));
}

// Each bad owning row: exit 2 naming it, nothing applied (no slot row, no adoption row).
void expect_refused(db_server& server, const std::string& rows, const std::string& named,
                    const std::string& id_type = "BIGINT", bool seed_table = false) {
  const auto database = server.create_database();
  if (seed_table) create_seed_table(server, database);  // record_id INT: at most 2^31 - 1
  migrate(server, database);
  create_owners(server, database, rows, id_type);
  const auto r =
      adopt(daemon_yaml(server, database, counters_yaml), {"--adopt", "repo_downloads"}, 2);
  EXPECT_EQ(r.exit_code(), 2) << r.output;
  EXPECT_NE(r.output.find(named), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nothing applied"), std::string::npos) << r.output;
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counters"), 0);
  EXPECT_EQ(adoption_state(server, database), "none");
}

TEST_P(Adopt, BadOwningRowsAreRefusedNamingTheRowAndNothingIsApplied) {
  expect_refused(server(), "(1, 5), (2, 6), (3, NULL), (4, 1)",
                 "`repositories`.`id` = 3 (`download_count` = NULL): its count is NULL");
  expect_refused(server(), "(1, 5), (2, 6), (3, 2), (4, -9)",
                 "`repositories`.`id` = 4 (`download_count` = -9): its count is negative");
  expect_refused(server(), "(-4, 5), (2, 6), (3, 2)",
                 "`repositories`.`id` = -4 (`download_count` = 5): its id is outside");
  expect_refused(server(), "(1, 5), (2, 6), (3000000000, 2)",
                 "`repositories`.`id` = 3000000000 (`download_count` = 2): its id is outside",
                 "BIGINT", true);
}

// An owning id without a unique key: two rows of one id would both go into one counter.
TEST_P(Adopt, AnOwningTableWithoutAUniqueKeyOnItsIdIsRefused) {
  auto& server = this->server();
  const auto database = server.create_database();
  migrate(server, database);
  server.connect(database).execute(
      postgresql() ? "CREATE TABLE repositories (pk serial PRIMARY KEY, id BIGINT, "
                     "download_count BIGINT); CREATE INDEX ON repositories (id)"
                   : "CREATE TABLE repositories (pk INT AUTO_INCREMENT PRIMARY KEY, id BIGINT, "
                     "download_count BIGINT, KEY (id))");
  server.connect(database).execute(
      "INSERT INTO repositories (id, download_count) VALUES (5, 10), (5, 20)");
  const auto r =
      adopt(daemon_yaml(server, database, counters_yaml), {"--adopt", "repo_downloads"}, 2);
  EXPECT_EQ(r.exit_code(), 2) << r.output;
  EXPECT_NE(r.output.find("no PRIMARY or UNIQUE key on exactly `id`"), std::string::npos)
      << r.output;
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counters"), 0);
  EXPECT_EQ(adoption_state(server, database), "none");
}

TEST_P(Adopt, AnUndeclaredCounterOrOneWithoutRollupTargetIsExitTwoNamingIt) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  const auto yaml = daemon_yaml(server, database, counters_yaml);
  const auto undeclared = adopt(yaml, {"--adopt", "no_such_counter"});
  EXPECT_EQ(undeclared.exit_code(), 2);
  EXPECT_NE(undeclared.output.find("no counter named 'no_such_counter'"), std::string::npos)
      << undeclared.output;
  const auto no_target = adopt(yaml, {"--adopt", "pages"});
  EXPECT_EQ(no_target.exit_code(), 2);
  EXPECT_NE(no_target.output.find("counter 'pages' has no rollup target"), std::string::npos)
      << no_target.output;
  EXPECT_EQ(adopt(yaml, {"--no-history"}).exit_code(), 2);  // without --adopt: usage
  EXPECT_EQ(adopt(yaml, {"--adopt="}).exit_code(), 2);      // an empty name: not a start
}

// Through the fault proxy, which speaks MariaDB's protocol.
TEST_P(AdoptOnMariaDB, ADatabaseThatGoesAwayEndsTheRunNonZeroAndARerunEndsExact) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  create_many_owners(server, database, 10000);
  fault_proxy proxy(shared_mariadb().port());
  const std::string via_proxy =
      "listen: {address: 127.0.0.1, port: 0}\n"
      "mysql: {host: 127.0.0.1, port: " +
      std::to_string(proxy.port()) + ", user: root, database: " + database + "}\n" + counters_yaml;
  {
    adopt_process p(via_proxy, {"--adopt", "repo_downloads"}, 20);
    ASSERT_TRUE(eventually(
        [&] {
          return server.query_int(database,
                                  "SELECT COALESCE(MAX(last_id), 0) FROM "
                                  "slotted_counterd_adoptions") > 0;
        },
        60s, 5ms));
    // The worst moment: a COMMIT the server executes whose reply never arrives.
    proxy.arm("COMMIT", fault_proxy::cut::after_statement);
    const auto cut = p.wait();
    EXPECT_EQ(cut.exit_code(), 1) << cut.output;
    EXPECT_EQ(proxy.cuts(), 1);
  }
  ASSERT_EQ(adoption_state(server, database).substr(0, 8), "running ");
  const auto rerun = adopt(via_proxy, {"--adopt", "repo_downloads"}, 1000);
  ASSERT_EQ(rerun.exit_code(), 0) << rerun.output;
  expect_exact(server, database);
}

TEST_P(Adopt, AdoptionWhileADaemonFlushesTheSameCounterIsExact) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  create_many_owners(server, database, 4000);
  auto cfg = test_config(server, database);
  cfg.counters = {
      {"repo_downloads", 123, config::rollup_target{"repositories", "id", "download_count"}}};
  cfg.flush.interval = 50ms;
  cfg.rollup.interval = 1h;
  in_process_daemon daemon(cfg);
  load_options o;
  o.clients = 2;
  o.increments_per_client = 4000;
  o.min_delta = 1;
  for (std::uint64_t id = 1; id <= 4000; id += 3) o.keys.push_back({123, id});
  load_outcome load;
  joined_thread loader([&] { load = run_load(daemon.port(), o); });
  const auto r =
      adopt(daemon_yaml(server, database, counters_yaml), {"--adopt", "repo_downloads"}, 40);
  loader.join();
  ASSERT_EQ(r.exit_code(), 0) << r.output;
  ASSERT_EQ(load.failed_requests, 0u);
  http_client c(daemon.port());
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  expect_exact(server, database, load.acknowledged);
  // And the rollup after it sets every touched owning row to history + counts.
  ASSERT_EQ(c.request("POST", "/v1/rollup").status, 200u);
  std::size_t wrong = 0;
  for (const auto& [k, v] : load.acknowledged)
    wrong += server.query_int(database, "SELECT download_count FROM repositories WHERE id = " +
                                            std::to_string(k.second)) !=
             slot_sum(server, database, k.second);
  EXPECT_EQ(wrong, 0u);
}

// counters[].top on the adopted counter: each batch reads its owning rows once and
// writes slot 0 and the totals from those values (not two statements reading the
// owning table twice): after the adoption, in batches, the totals equal the slot sums
// row for row, and the adoption row's total equals them too.
TEST_P(AdoptOnMariaDB, WithTopTheTotalsAreWrittenFromTheOneReadOfTheOwningRows) {
  auto& server = this->server();
  const auto database = migrated_database(server);
  create_many_owners(server, database, 700);
  {
    auto conn = server.connect(database);
    db::migrate_totals(conn, "slotted_counters", store::top_spec({123}, store::no_buckets()));
  }
  const std::string yaml =
      daemon_yaml(server, database,
                  "counters:\n"
                  "  - name: repo_downloads\n"
                  "    record_type: 123\n"
                  "    rollup: {table: repositories, id_column: id, count_column: download_count}\n"
                  "    top: true\n");
  const auto r = adopt(yaml, {"--adopt", "repo_downloads"}, 100);
  ASSERT_EQ(r.exit_code(), 0) << r.output;
  expect_exact(server, database);
  EXPECT_EQ(server.query_int(
                database,
                "SELECT COUNT(*) FROM (SELECT record_id, SUM(count) AS s FROM slotted_counters "
                "WHERE record_type = 123 GROUP BY record_id) c LEFT JOIN slotted_counters_totals t "
                "ON t.record_type = 123 AND t.record_id = c.record_id WHERE t.count IS NULL OR "
                "t.count <> c.s"),
            0);
  EXPECT_EQ(
      server.query_int(database, "SELECT COUNT(*) FROM slotted_counters_totals"),
      server.query_int(database, "SELECT COUNT(*) FROM repositories WHERE download_count > 0"));
  EXPECT_EQ(server.query_int(database,
                             "SELECT SUM(count) FROM "
                             "slotted_counters_totals"),
            server.query_int(database,
                             "SELECT total_taken FROM "
                             "slotted_counterd_adoptions"));
}

INSTANTIATE_ENGINES(Adopt);
INSTANTIATE_TEST_SUITE_P(, AdoptOnMariaDB, ::testing::Values(db::engine::mariadb),
                         engine_param_name());

}  // namespace
}  // namespace slotted::test
