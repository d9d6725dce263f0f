// SIGHUP reload on the real binary (what `systemctl reload` sends): the live keys take
// effect without a restart, changed keys that need one are named, and a config with
// errors or a missing rollup target is refused while the daemon runs on unchanged.
// Also the journald priority prefixes (JOURNAL_STREAM).

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {
namespace {

// Waits until the daemon's log holds `needle` at least `count` times.
bool wait_for_log(const daemon_process& d, const std::string& needle, std::size_t count = 1) {
  return eventually([&] { return occurrences(d.log(), needle) >= count; },
                    std::chrono::seconds(30));
}

struct token_files {
  std::string dir;
  token_files() {
    dir = make_temp_dir("reload");
    std::ofstream(dir + "/a") << "token-a\n";
    std::ofstream(dir + "/b") << "token-b\n";
  }
  ~token_files() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
};

// daemon_yaml() without its `http` key, which these configs set themselves.
std::string yaml_for(const mariadb_server& server, const std::string& database,
                     const std::string& rest) {
  return "listen: {address: 127.0.0.1, port: 0}\n"
         "mysql: {socket: " +
         server.socket() + ", user: root, database: " + database + "}\n" +
         "instance_id: reload-test\n"
         "rollup: {interval: 1h}\n" +
         rest;
}

http_reply post(std::uint16_t port, const std::string& token, const std::string& body) {
  return http_client(port).request("POST", "/v1/increments", body, "application/json",
                                   {{"Authorization", "Bearer " + token}});
}

TEST(Reload, SighupAppliesLiveKeysNamesTheRestAndRefusesBrokenConfigs) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  server.connect(database).execute(
      "CREATE TABLE repositories (id BIGINT UNSIGNED PRIMARY KEY, download_count BIGINT NOT "
      "NULL)");
  server.connect(database).execute("INSERT INTO repositories VALUES (1, 0), (2, 0)");
  token_files tokens;
  daemon_process daemon(yaml_for(server, database,
                                 "flush: {interval: 200ms}\n"
                                 "http: {threads: 2, auth_token_file: " +
                                     tokens.dir +
                                     "/a}\n"
                                     "counters: [{name: pages, record_type: 7}]\n"
                                     "log: {level: info}\n"));
  const std::string downloads = R"({"record_type": "downloads", "record_id": 1, "delta": 5})";
  EXPECT_EQ(post(daemon.port(), "token-a", downloads).status, 400u);  // not declared yet
  EXPECT_EQ(post(daemon.port(), "token-b", downloads).status, 401u);

  // New token, a new counter rolled up into `repositories`, a quieter log level, and a
  // key that needs a restart.
  daemon.write_config(yaml_for(
      server, database,
      "http: {threads: 2, auth_token_file: " + tokens.dir +
          "/b}\n"
          "counters:\n"
          "  - {name: pages, record_type: 7}\n"
          "  - name: downloads\n"
          "    record_type: 123\n"
          "    rollup: {table: repositories, id_column: id, count_column: download_count}\n"
          "log: {level: warn}\n"
          "flush: {interval: 200ms, slots: 7}\n"));
  daemon.signal(SIGHUP);
  ASSERT_TRUE(wait_for_log(daemon, "reload: applied")) << daemon.log();
  EXPECT_NE(daemon.log().find("reload: applied log.level, http.auth_token_file, counters"),
            std::string::npos)
      << daemon.log();
  EXPECT_NE(daemon.log().find("only after a restart (not applied): flush.slots"), std::string::npos)
      << daemon.log();
  EXPECT_EQ(daemon.log().find("token-"), std::string::npos) << "a secret reached the log";

  EXPECT_EQ(post(daemon.port(), "token-a", downloads).status, 401u);
  ASSERT_EQ(post(daemon.port(), "token-b", downloads).status, 202u);
  // The new rollup target is live in the flusher (dirty marks) and the roller.
  http_client c(daemon.port());
  const std::map<std::string, std::string> auth{{"Authorization", "Bearer token-b"}};
  ASSERT_EQ(c.request("POST", "/v1/flush", "", "", auth).status, 200u);
  const auto rolled = c.request("POST", "/v1/rollup", "", "", auth);
  ASSERT_EQ(rolled.status, 200u) << rolled.body;
  EXPECT_EQ(json_int(rolled.body, "records"), 1);
  EXPECT_EQ(server.query_int(database, "SELECT download_count FROM repositories WHERE id = 1"), 5);

  // A config with errors: refused, logged with the key and line, nothing changes.
  daemon.write_config(yaml_for(server, database,
                               "counters: [{name: pages, record_type: -1}]\n"
                               "log: {level: debug}\n"));
  daemon.signal(SIGHUP);
  ASSERT_TRUE(wait_for_log(daemon, "reload refused")) << daemon.log();
  EXPECT_NE(daemon.log().find("reload: config error: "), std::string::npos);
  EXPECT_NE(daemon.log().find("counters[0].record_type"), std::string::npos) << daemon.log();

  // A rollup target the database lacks: refused too.
  daemon.write_config(
      yaml_for(server, database,
               "counters:\n"
               "  - name: downloads\n"
               "    record_type: 123\n"
               "    rollup: {table: no_such_table, id_column: id, count_column: c}\n"));
  daemon.signal(SIGHUP);
  ASSERT_TRUE(wait_for_log(daemon, "reload refused", 2)) << daemon.log();
  EXPECT_NE(daemon.log().find("no_such_table"), std::string::npos) << daemon.log();

  // Still running on the second config: token b, downloads declared, level warn (so the
  // info line "SIGHUP received" was logged for the first reload only).
  EXPECT_EQ(post(daemon.port(), "token-b", downloads).status, 202u);
  EXPECT_EQ(post(daemon.port(), "token-a", downloads).status, 401u);
  EXPECT_EQ(occurrences(daemon.log(), "SIGHUP received"), 1u) << daemon.log();

  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(std::chrono::seconds(30)), 0) << daemon.log();
}

// A reload while the database is down cannot check a new rollup target; applied, a
// target whose table is missing must not stop the flush (which never writes the owning
// table): only that target's rollup fails, the other targets go on.
TEST(Reload, ABadRollupTargetAppliedWhileTheDatabaseIsDownStopsNeitherFlushNorOtherTargets) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  server.connect(database).execute(
      "CREATE TABLE repositories (id BIGINT UNSIGNED PRIMARY KEY, download_count BIGINT NOT "
      "NULL)");
  server.connect(database).execute("INSERT INTO repositories VALUES (1, 0)");
  daemon_process daemon(yaml_for(server, database,
                                 "flush: {interval: 1h}\n"
                                 "counters: [{name: pages, record_type: 7}]\n"));
  ASSERT_EQ(daemon.settle(), 200u);

  started_at_exit restart{server};
  server.stop();
  daemon.write_config(
      yaml_for(server, database,
               "flush: {interval: 1h}\n"
               "counters:\n"
               "  - {name: pages, record_type: 7}\n"
               "  - name: downloads\n"
               "    record_type: 123\n"
               "    rollup: {table: repositories, id_column: id, count_column: download_count}\n"
               "  - name: installs\n"
               "    record_type: 124\n"
               "    rollup: {table: no_such_table, id_column: id, count_column: c}\n"));
  daemon.signal(SIGHUP);
  ASSERT_TRUE(wait_for_log(daemon, "reload: applied")) << daemon.log();
  server.start();

  http_client c(daemon.port());
  ASSERT_EQ(c.post_json("/v1/increments", R"([{"record_type": 7, "record_id": 1, "delta": 3},
                                              {"record_type": 123, "record_id": 1, "delta": 5}])")
                .status,
            202u);
  // The first flush may still meet a connection of the stopped server.
  ASSERT_TRUE(flush_until_ok(c, std::chrono::seconds(20))) << daemon.log();
  EXPECT_EQ(server.query_int(database,
                             "SELECT SUM(count) FROM slotted_counters WHERE record_type = 7 AND "
                             "record_id = 1"),
            3);
  // The broken target fails the run, named; the good one is rolled up all the same.
  const auto rolled = c.request("POST", "/v1/rollup");
  EXPECT_EQ(rolled.status, 503u) << rolled.body;
  EXPECT_NE(rolled.body.find("no_such_table"), std::string::npos) << rolled.body;
  EXPECT_EQ(server.query_int(database, "SELECT download_count FROM repositories WHERE id = 1"), 5);
  EXPECT_NE(daemon.log().find("no_such_table"), std::string::npos) << daemon.log();
  EXPECT_EQ(c.get("/readyz").status, 200u);

  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(std::chrono::seconds(30)), 0) << daemon.log();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (auto nl = text.find('\n'); nl != std::string::npos; nl = text.find('\n', start)) {
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

TEST(Reload, UnderJournaldEveryLineCarriesItsPriority) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  const std::string yaml = daemon_yaml(server, database, "accept_undeclared_types: true\n");
  daemon_process journal(yaml, 0, true);
  journal.write_config("flush: {slots: 0}\n");  // a reload that logs errors
  journal.signal(SIGHUP);
  ASSERT_TRUE(wait_for_log(journal, "reload refused")) << journal.log();
  const auto lines = lines_of(journal.log());
  ASSERT_FALSE(lines.empty());
  std::size_t info = 0, error = 0;
  for (const auto& line : lines) {
    ASSERT_TRUE(line.starts_with("<")) << line;
    if (line.find(" info ") != std::string::npos) {
      EXPECT_TRUE(line.starts_with("<6>")) << line;
      ++info;
    }
    if (line.find(" error ") != std::string::npos) {
      EXPECT_TRUE(line.starts_with("<3>")) << line;
      ++error;
    }
  }
  EXPECT_GT(info, 0u);
  EXPECT_GT(error, 0u);

  // Not under journald (or JOURNAL_STREAM naming another stream): plain lines.
  setenv("JOURNAL_STREAM", "1:1", 1);
  daemon_process plain(yaml);
  unsetenv("JOURNAL_STREAM");
  for (const auto& line : lines_of(plain.log())) EXPECT_FALSE(line.starts_with("<")) << line;
}

}  // namespace
}  // namespace slotted::test
