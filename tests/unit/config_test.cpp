#include "config/config.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "support/config_problems.hpp"
#include "support/temp_dir.hpp"

namespace slotted::config {
namespace {

using test::only_problem;
using test::problems_of;

TEST(Config, EmptyFileGivesTheDocumentedDefaults) {
  const auto c = parse_config("", "test.yaml");
  EXPECT_EQ(c.listen_address, "127.0.0.1");
  EXPECT_EQ(c.listen_port, 8080);
  EXPECT_EQ(c.http.max_body_bytes, 1048576u);
  EXPECT_EQ(c.http.max_items_per_request, 100000u);
  EXPECT_EQ(c.http.idle_timeout, std::chrono::seconds(30));
  EXPECT_EQ(c.mysql.table, "slotted_counters");
  EXPECT_EQ(c.mysql.pool_size, 2u);
  EXPECT_EQ(c.shards, 64u);
  EXPECT_EQ(c.flush.interval, std::chrono::seconds(1));
  EXPECT_EQ(c.flush.slots, 100u);
  EXPECT_EQ(c.flush.max_pending_keys, 5000000u);
  EXPECT_EQ(c.rollup.interval, std::chrono::seconds(60));
  EXPECT_EQ(c.wal.fsync, fsync_mode::never);
  EXPECT_EQ(c.shutdown_timeout, std::chrono::seconds(30));
  EXPECT_FALSE(c.instance_id.empty());  // the hostname
}

// Issue 40: the WAL is on by default under the unit (systemd sets $STATE_DIRECTORY from
// StateDirectory=); wal.dir: "" is the explicit way to turn it off.
TEST(Config, WalDirDefaultsToTheStateDirectoryAndAnEmptyOneTurnsItOff) {
  struct restore_env {
    ~restore_env() { unsetenv("STATE_DIRECTORY"); }
  } restore;
  unsetenv("STATE_DIRECTORY");
  EXPECT_EQ(parse_config("", "test.yaml").wal.dir, "") << "no WAL outside a unit";
  setenv("STATE_DIRECTORY", "/var/lib/slotted-counterd", 1);
  EXPECT_EQ(parse_config("", "test.yaml").wal.dir, "/var/lib/slotted-counterd");
  EXPECT_EQ(parse_config("wal: {fsync: never}\n", "test.yaml").wal.dir,
            "/var/lib/slotted-counterd");
  EXPECT_EQ(parse_config("wal: {dir: \"\"}\n", "test.yaml").wal.dir, "") << "explicitly off";
  EXPECT_EQ(parse_config("wal: {dir: /srv/wal}\n", "test.yaml").wal.dir, "/srv/wal");
  // Several StateDirectory= entries: systemd joins them with ':'; the first one is the WAL's.
  setenv("STATE_DIRECTORY", "/var/lib/a:/var/lib/b", 1);
  EXPECT_EQ(parse_config("", "test.yaml").wal.dir, "/var/lib/a");
  // The shipped config leaves wal.dir to the default.
  setenv("STATE_DIRECTORY", "/var/lib/slotted-counterd", 1);
  EXPECT_EQ(load_config(std::string(SLOTTED_SOURCE_DIR) + "/config/slotted-counterd.yaml").wal.dir,
            "/var/lib/slotted-counterd");
}

TEST(Config, MetricsListenIsAnAddressAndAPort) {
  EXPECT_EQ(parse_config("", "t.yaml").metrics_listen, "");
  EXPECT_EQ(parse_config("metrics: {listen: \"127.0.0.1:9108\"}\n", "t.yaml").metrics_listen,
            "127.0.0.1:9108");
  const auto v6 = listen_endpoint("[::1]:9108");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->address, "::1");
  EXPECT_EQ(v6->port, 9108);
  for (const char* bad : {"localhost:9108", "127.0.0.1", "127.0.0.1:", "127.0.0.1:70000",
                          "::1:9108", "[127.0.0.1]:9108", "127.0.0.1:9x"}) {
    SCOPED_TRACE(bad);
    EXPECT_NE(only_problem(std::string("metrics: {listen: \"") + bad + "\"}\n")
                  .find("metrics.listen: expected ADDRESS:PORT"),
              std::string::npos);
  }
}

// Issue 40: the API's own address and port passed --check-config, then failed at bind.
TEST(Config, MetricsListenMustNotTakeTheApisPort) {
  for (const char* clash :
       {"listen: {port: 8080}\nmetrics: {listen: \"127.0.0.1:8080\"}\n",
        "listen: {address: 0.0.0.0, port: 9000}\nmetrics: {listen: \"127.0.0.1:9000\"}\n",
        "listen: {address: \"::\", port: 9000}\nmetrics: {listen: \"10.1.2.3:9000\"}\n",
        "listen: {address: \"::1\", port: 9000}\nmetrics: {listen: \"[0:0::1]:9000\"}\n"}) {
    SCOPED_TRACE(clash);
    const auto problem = only_problem(clash);
    EXPECT_NE(problem.find("metrics.listen: '"), std::string::npos) << problem;
    EXPECT_NE(problem.find("listen.port"), std::string::npos) << problem;
  }
  for (const char* apart :
       {"listen: {port: 8080}\nmetrics: {listen: \"127.0.0.1:9108\"}\n",
        "listen: {address: 127.0.0.1, port: 9000}\nmetrics: {listen: \"10.1.2.3:9000\"}\n",
        "listen: {address: 0.0.0.0, port: 9000}\nmetrics: {listen: \"[::1]:9000\"}\n",
        "listen: {port: 0}\nmetrics: {listen: \"127.0.0.1:0\"}\n"}) {
    SCOPED_TRACE(apart);
    EXPECT_NO_THROW(parse_config(apart, "t.yaml"));
  }
}

TEST(Config, TheShippedExampleIsValid) {
  const auto c = load_config(std::string(SLOTTED_SOURCE_DIR) + "/config/slotted-counterd.yaml");
  ASSERT_EQ(c.counters.size(), 1u);
  EXPECT_EQ(c.counters[0].name, "repo_downloads");
  EXPECT_EQ(c.counters[0].record_type, 123u);
  // The rollup is a commented example: no table but the daemon's own (ShippedConfig.*).
  EXPECT_FALSE(c.counters[0].rollup);
}

TEST(Config, FullConfigParses) {
  const auto c = parse_config(R"(
instance_id: web-01
listen: {address: "::1", port: 9000}
http: {threads: 4, max_body_bytes: 2048, max_items_per_request: 10, idle_timeout: 250ms}
mysql: {host: db, port: 3307, socket: /run/mysqld.sock, user: u, database: d, table: t, connect_timeout: 2s, pool_size: 3}
counters:
  - name: a
    record_type: 1
  - {name: b, record_type: 2, rollup: {table: repos, id_column: id, count_column: n}}
accept_undeclared_types: true
shards: 8
flush: {interval: 5m, max_rows_per_statement: 10, slots: 7, max_pending_keys: 99, max_retry_backoff: 1h}
rollup: {interval: 2m, batch_size: 5}
wal: {dir: /var/lib/x, fsync: interval, fsync_interval: 20ms}
shutdown_timeout: 10s
log: {level: debug}
)");
  EXPECT_EQ(c.instance_id, "web-01");
  EXPECT_EQ(c.listen_address, "::1");
  EXPECT_EQ(c.http.idle_timeout, std::chrono::milliseconds(250));
  EXPECT_EQ(c.mysql.port, 3307);
  EXPECT_EQ(c.counters.size(), 2u);
  EXPECT_EQ(c.counters[1].rollup->table, "repos");
  EXPECT_EQ(c.flush.interval, std::chrono::minutes(5));
  EXPECT_EQ(c.flush.max_retry_backoff, std::chrono::hours(1));
  EXPECT_EQ(c.wal.fsync, fsync_mode::interval);
  EXPECT_EQ(c.log, log_level::debug);
}

TEST(Config, UnknownKeyIsNamedWithItsLine) {
  EXPECT_EQ(only_problem("shards: 4\nflush:\n  intervall: 1s\n"),
            "test.yaml:3: flush.intervall: unknown key");
}

TEST(Config, WrongTypesAndRangesAreNamed) {
  EXPECT_EQ(only_problem("shards: many\n"),
            "test.yaml:1: shards: expected an integer in [1, 4096], got 'many'");
  EXPECT_EQ(only_problem("\nflush: {slots: 0}\n"),
            "test.yaml:2: flush.slots: expected an integer in [1, 65535], got '0'");
  EXPECT_EQ(only_problem("flush: {slots: 65536}\n"),
            "test.yaml:1: flush.slots: expected an integer in [1, 65535], got '65536'");
  EXPECT_NE(only_problem("flush: {interval: 1 s}\n").find("flush.interval: expected a duration"),
            std::string::npos);
  EXPECT_NE(only_problem("flush: {interval: 1ms}\n").find("expected a duration in [10ms"),
            std::string::npos);
  EXPECT_NE(only_problem("http: {threads: -1}\n").find("http.threads"), std::string::npos);
  EXPECT_NE(only_problem("accept_undeclared_types: maybe\n").find("expected true or false"),
            std::string::npos);
  EXPECT_NE(
      only_problem("wal: {fsync: sometimes}\n").find("expected one of always | interval | never"),
      std::string::npos);
  EXPECT_NE(only_problem("listen: {address: localhost}\n").find("listen.address"),
            std::string::npos);
  EXPECT_NE(only_problem("listen: [1, 2]\n").find("listen: expected a mapping"), std::string::npos);
  EXPECT_NE(only_problem("instance_id: \"web 01\"\n").find("instance_id"), std::string::npos);
}

// A container's Pod name, from the downward API (docs/install.md), is the default
// instance_id; the file's key still wins, and a value that is no instance_id stops the
// start naming the variable rather than fall back to the host name.
TEST(Config, InstanceIdComesFromTheEnvironmentWhenTheFileHasNone) {
  struct restore {
    ~restore() { ::unsetenv("SLOTTED_COUNTERD_INSTANCE_ID"); }
  } guard;
  ::unsetenv("SLOTTED_COUNTERD_INSTANCE_ID");
  const auto host = parse_config("", "test.yaml").instance_id;
  ::setenv("SLOTTED_COUNTERD_INSTANCE_ID", "web-7d9f8c6b5-x2x4q", 1);
  EXPECT_EQ(parse_config("", "test.yaml").instance_id, "web-7d9f8c6b5-x2x4q");
  EXPECT_EQ(parse_config("instance_id: web-01\n", "test.yaml").instance_id, "web-01");
  ::setenv("SLOTTED_COUNTERD_INSTANCE_ID", "", 1);
  EXPECT_EQ(parse_config("", "test.yaml").instance_id, host);
  ::setenv("SLOTTED_COUNTERD_INSTANCE_ID", "web 01", 1);
  EXPECT_EQ(only_problem(""),
            "SLOTTED_COUNTERD_INSTANCE_ID (the default instance_id): 'web 01' is not 1 to 64 "
            "characters from [A-Za-z0-9._-]");
  ::setenv("SLOTTED_COUNTERD_INSTANCE_ID", std::string(65, 'a').c_str(), 1);
  EXPECT_NE(only_problem("").find("SLOTTED_COUNTERD_INSTANCE_ID"), std::string::npos);
}

TEST(Config, BadIdentifiersAreRefused) {
  EXPECT_NE(only_problem("mysql: {table: \"x; DROP TABLE y\"}\n")
                .find("mysql.table: 'x; DROP TABLE y' is not a valid identifier"),
            std::string::npos);
  EXPECT_NE(only_problem("mysql: {database: 1abc}\n").find("mysql.database"), std::string::npos);
  EXPECT_NE(only_problem("counters:\n  - name: a\n    record_type: 1\n    rollup: {table: t, "
                         "id_column: \"i`d\", count_column: c}\n")
                .find("test.yaml:4: counters[0].rollup.id_column"),
            std::string::npos);
  EXPECT_TRUE(is_valid_identifier("_a1"));
  EXPECT_TRUE(is_valid_identifier(std::string(64, 'a')));
  EXPECT_FALSE(is_valid_identifier(std::string(65, 'a')));
  EXPECT_FALSE(is_valid_identifier(""));
  EXPECT_FALSE(is_valid_identifier("a-b"));
}

TEST(Config, CountersAreChecked) {
  EXPECT_NE(only_problem("counters:\n  - name: a\n").find("counters[0].record_type: missing"),
            std::string::npos);
  EXPECT_NE(
      only_problem("counters:\n  - {name: a, record_type: 1}\n  - {name: a, record_type: 2}\n")
          .find("declared twice"),
      std::string::npos);
  EXPECT_NE(only_problem("counters:\n  - {name: a, record_type: 2147483648}\n")
                .find("counters[0].record_type"),
            std::string::npos);
}

TEST(Config, FlushConnectionsAreBoundedAndNeedAPoolWithOneMore) {
  EXPECT_EQ(parse_config("", "t.yaml").flush.connections, 1u);
  EXPECT_EQ(only_problem("flush: {connections: 0}\n"),
            "test.yaml:1: flush.connections: expected an integer in [1, 16], got '0'");
  EXPECT_EQ(only_problem("mysql: {pool_size: 20}\nflush: {connections: 17}\n"),
            "test.yaml:2: flush.connections: expected an integer in [1, 16], got '17'");
  EXPECT_EQ(only_problem("mysql: {pool_size: 2}\nflush:\n  connections: 2\n"),
            "test.yaml:3: flush.connections: 2 connections need mysql.pool_size >= 3 (one more "
            "for reads and the rollup), but mysql.pool_size is 2");
  const auto ok = parse_config("mysql: {pool_size: 5}\nflush: {connections: 4}\n", "t.yaml");
  EXPECT_EQ(ok.flush.connections, 4u);
  // One connection with a pool of one stays valid, as before the key existed.
  EXPECT_EQ(parse_config("mysql: {pool_size: 1}\n", "t.yaml").flush.connections, 1u);
  EXPECT_EQ(plan_reload(parse_config("", "a.yaml"), ok).needs_restart,
            (std::vector<std::string>{"mysql.pool_size", "flush.connections"}));
}

TEST(Config, EveryProblemIsReported) {
  EXPECT_EQ(problems_of("shards: 0\nflush: {slots: x}\nbogus: 1\n").size(), 3u);
}

TEST(Config, PasswordComesFromFileOrEnvAndNeverFromTheConfig) {
  EXPECT_NE(only_problem("mysql: {password: hunter2}\n").find("password_file or password_env"),
            std::string::npos);
  EXPECT_EQ(only_problem("mysql: {password: hunter2}\n").find("hunter2"), std::string::npos);

  const std::filesystem::path dir = test::make_temp_dir("config-test");
  const auto file = dir / "password";
  std::ofstream(file) << "pa55word\n";
  EXPECT_EQ(parse_config("mysql: {password_file: " + file.string() + "}\n").mysql.password,
            "pa55word");
  std::filesystem::remove(file);
  EXPECT_NE(only_problem("mysql: {password_file: " + file.string() + "}\n").find("cannot read"),
            std::string::npos);
  std::filesystem::remove_all(dir);

  setenv("SLOTTED_TEST_PASSWORD", "from-env", 1);
  EXPECT_EQ(parse_config("mysql: {password_env: SLOTTED_TEST_PASSWORD}\n").mysql.password,
            "from-env");
  unsetenv("SLOTTED_TEST_PASSWORD");
  EXPECT_NE(only_problem("mysql: {password_env: SLOTTED_TEST_PASSWORD}\n").find("is not set"),
            std::string::npos);
  EXPECT_NE(only_problem("mysql: {password_env: A, password_file: /x}\n").find("not both"),
            std::string::npos);
}

TEST(Config, HostsReplaceHostAndPortInOrder) {
  const auto c = parse_config("mysql:\n  hosts: [\"db1:3307\", db2, \"[::1]:3308\"]\n");
  ASSERT_EQ(c.mysql.hosts.size(), 3u);
  EXPECT_EQ(c.mysql.hosts[0].host, "db1");
  EXPECT_EQ(c.mysql.hosts[0].port, 3307);
  EXPECT_EQ(c.mysql.hosts[1].host, "db2");
  EXPECT_EQ(c.mysql.hosts[1].port, 3306);
  EXPECT_EQ(c.mysql.hosts[2].host, "::1");
  EXPECT_EQ(c.mysql.hosts[2].port, 3308);
  EXPECT_TRUE(parse_config("").mysql.hosts.empty());
  EXPECT_NE(only_problem("mysql: {hosts: [\"db1:0\"]}\n").find("mysql.hosts[0]"),
            std::string::npos);
  EXPECT_NE(only_problem("mysql: {hosts: [\"db1:\"]}\n").find("empty port"), std::string::npos);
  EXPECT_NE(only_problem("mysql: {hosts: [\"::1:3306\"]}\n").find("brackets"), std::string::npos);
  EXPECT_NE(only_problem("mysql: {hosts: [a, \"a:3306\"]}\n").find("listed twice"),
            std::string::npos);
  EXPECT_NE(only_problem("mysql: {hosts: db1}\n").find("mysql.hosts: expected a list"),
            std::string::npos);
  EXPECT_NE(only_problem("mysql: {hosts: [db1], socket: /run/x.sock}\n").find("not both"),
            std::string::npos);
}

// postgresql: in place of mysql: takes the same keys into the same fields, with
// PostgreSQL's port, a schema, and its 63-byte names; a config names one database.
TEST(Config, APostgresqlSectionTakesTheSameKeysAndExcludesMysql) {
  EXPECT_EQ(parse_config("").mysql.engine, database_engine::mariadb);
  const auto c = parse_config(
      "postgresql:\n  hosts: [\"db1:5433\", db2]\n  user: u\n  database: d\n  table: t\n"
      "  schema: counting\n  pool_size: 3\n  tls: {mode: required}\n");
  EXPECT_EQ(c.mysql.engine, database_engine::postgresql);
  EXPECT_EQ(c.mysql.section(), "postgresql");
  ASSERT_EQ(c.mysql.hosts.size(), 2u);
  EXPECT_EQ(c.mysql.hosts[0].port, 5433);
  EXPECT_EQ(c.mysql.hosts[1].port, 5432);  // PostgreSQL's port, not MariaDB's
  EXPECT_EQ(c.mysql.user, "u");
  EXPECT_EQ(c.mysql.table, "t");
  EXPECT_EQ(c.mysql.schema, "counting");
  EXPECT_EQ(c.mysql.pool_size, 3u);
  EXPECT_EQ(c.mysql.tls.mode, tls_mode::required);
  EXPECT_EQ(parse_config("postgresql: {}\n").mysql.port, 5432);
  EXPECT_EQ(parse_config("postgresql: {}\n").mysql.schema, "public");
  EXPECT_NE(only_problem("mysql: {}\npostgresql: {}\n").find("not both"), std::string::npos);
  EXPECT_NE(only_problem("mysql: {schema: s}\n").find("mysql.schema: unknown key"),
            std::string::npos);
  // Problems name the section's own keys.
  EXPECT_NE(only_problem("postgresql: {hosts: [db1], socket: /run/pg}\n")
                .find("postgresql.hosts: set hosts or socket, not both"),
            std::string::npos);
  for (const char* host : {"\"\"", "/run/postgresql", "\"db1,db2\""})
    EXPECT_NE(
        only_problem(std::string("postgresql: {host: ") + host + "}\n").find("postgresql.host: '"),
        std::string::npos)
        << host;
  EXPECT_NE(only_problem("postgresql: {hosts: [\"db1,db2:5432\"]}\n").find("not a host name"),
            std::string::npos);
  EXPECT_NE(only_problem("postgresql:\n  tls: {mode: verify_ca}\n")
                .find("postgresql.tls.ca_file: required"),
            std::string::npos);
  EXPECT_NE(only_problem("postgresql: {password_file: /nonexistent/pw}\n")
                .find("postgresql.password_file: cannot read"),
            std::string::npos);
  // 63 bytes, less the longest index name of a derived table (`<table>_hour_by_age`).
  EXPECT_NO_THROW(parse_config("postgresql: {table: " + std::string(63, 'a') + "}\n"));
  EXPECT_NE(only_problem("postgresql: {table: " + std::string(64, 'a') + "}\n")
                .find("postgresql.table: may have at most 63 characters"),
            std::string::npos);
  const std::string hourly = "counters: [{name: a, record_type: 1, buckets: {hour: 1d}}]\n";
  EXPECT_NO_THROW(parse_config(hourly + "postgresql: {table: " + std::string(51, 'a') + "}\n"));
  EXPECT_NE(only_problem(hourly + "postgresql: {table: " + std::string(52, 'a') + "}\n")
                .find("may have at most 51 characters with this config (it has 52): the tables "
                      "derived from it (`<table>_hour`) and their indexes must fit PostgreSQL's "
                      "63-byte names, the longest being `<table>_hour_by_age`"),
            std::string::npos);
  EXPECT_NO_THROW(parse_config(hourly + "mysql: {table: " + std::string(59, 'a') + "}\n"));
  const std::string top_hourly =
      "counters: [{name: a, record_type: 1, top: true, buckets: {hour: 1d}}]\n";
  EXPECT_NO_THROW(parse_config(top_hourly + "postgresql: {table: " + std::string(42, 'a') + "}\n"));
  EXPECT_NE(only_problem(top_hourly + "postgresql: {table: " + std::string(43, 'a') + "}\n")
                .find("the longest being `<table>_hour_totals_by_count`"),
            std::string::npos);
  EXPECT_NO_THROW(
      parse_config("counters: [{name: a, record_type: 1, dedupe: hour}]\npostgresql: {}\n"));
  // Every feature is built on both engines: none is refused for PostgreSQL's sake.
  EXPECT_NO_THROW(parse_config(
      "counters: [{name: a, record_type: 1}]\npostgresql: {}\n"
      "log_sources: [{path: /var/log/a.log, rules: [{counter: a, path: '^/([0-9]+)'}]}]\n"));
  // A reload names the keys by the section in use, and a change of section needs a restart.
  const auto other = parse_config("postgresql: {host: db9}\n");
  EXPECT_EQ(plan_reload(parse_config("postgresql: {host: db8}\n"), other).needs_restart,
            std::vector<std::string>{"postgresql.host"});
  const auto switched = plan_reload(parse_config("mysql: {host: db9}\n"), other);
  EXPECT_EQ(switched.needs_restart, (std::vector<std::string>{"postgresql.port", "postgresql"}));
}

TEST(Config, TlsModesNeedTheirFilesReadable) {
  EXPECT_EQ(parse_config("").mysql.tls.mode, tls_mode::preferred);
  EXPECT_EQ(parse_config("mysql: {tls: {mode: required}}\n").mysql.tls.mode, tls_mode::required);
  EXPECT_NE(only_problem("mysql: {tls: {mode: strict}}\n")
                .find("expected one of disabled | preferred | required | verify_ca | "
                      "verify_identity"),
            std::string::npos);
  EXPECT_NE(only_problem("mysql:\n  tls: {mode: verify_identity}\n")
                .find("mysql.tls.ca_file: required for mode verify_ca and verify_identity"),
            std::string::npos);
  const auto missing =
      only_problem("mysql:\n  tls:\n    mode: verify_ca\n    ca_file: /nonexistent/ca.pem\n");
  EXPECT_NE(missing.find("test.yaml:4: mysql.tls.ca_file: cannot read '/nonexistent/ca.pem'"),
            std::string::npos)
      << missing;
  const std::filesystem::path dir = test::make_temp_dir("config-test");
  const auto file = dir / "ca.pem";
  std::ofstream(file) << "-----BEGIN CERTIFICATE-----\n";
  const auto c = parse_config("mysql: {tls: {mode: verify_ca, ca_file: " + file.string() + "}}\n");
  EXPECT_EQ(c.mysql.tls.ca_file, file.string());
  EXPECT_NE(only_problem("mysql: {tls: {cert_file: " + file.string() + "}}\n")
                .find("set cert_file and key_file together"),
            std::string::npos);
  std::filesystem::remove_all(dir);
  EXPECT_NE(only_problem("mysql: {socket: /run/x.sock, tls: {mode: required}}\n")
                .find("mysql.tls.mode: TLS applies to TCP"),
            std::string::npos);
}

TEST(Config, MalformedShapesQuotedScalarsAndUnreadableSecretsAreNamed) {
  EXPECT_NE(only_problem("counters:\n  -\n").find("counters[0]: expected a mapping"),
            std::string::npos);
  EXPECT_NE(only_problem("shards: 4\n---\nshards: 0\n").find("one YAML document"),
            std::string::npos);
  EXPECT_NE(only_problem("listen: {port: \"8080\"}\n").find("got the quoted string '8080'"),
            std::string::npos);
  EXPECT_NE(only_problem("accept_undeclared_types: \"true\"\n").find("quoted string"),
            std::string::npos);
  // Secret files: named with their line, reported with the other problems, and a
  // directory is not a password file.
  const auto problems = problems_of("shards: 0\nmysql:\n  password_file: /nonexistent/pw\n");
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[1].rfind("test.yaml:3: mysql.password_file: cannot read", 0), 0u)
      << problems[1];
  EXPECT_NE(only_problem("mysql: {password_file: /tmp}\n").find("not a regular file"),
            std::string::npos);
}

TEST(Config, InvalidYamlIsAnError) {
  EXPECT_NE(only_problem("flush: {interval: 1s\n").find("invalid YAML"), std::string::npos);
  // yaml-cpp's LoadAll() looped forever on a stray ',', allocating (found by fuzzing).
  EXPECT_NE(only_problem(",\n").find("invalid YAML"), std::string::npos);
  EXPECT_NE(only_problem("# ok so far\n, shards: 4\n").find("invalid YAML"), std::string::npos);
}

TEST(Duration, ParsesUnitsStrictly) {
  EXPECT_EQ(parse_duration("250ms"), std::chrono::milliseconds(250));
  EXPECT_EQ(parse_duration("1s"), std::chrono::seconds(1));
  EXPECT_EQ(parse_duration("5m"), std::chrono::minutes(5));
  EXPECT_EQ(parse_duration("2h"), std::chrono::hours(2));
  for (const char* bad : {"", "s", "1", "1.5s", "-1s", " 1s", "1S", "1sec", "10000000000000s"}) {
    EXPECT_FALSE(parse_duration(bad)) << bad;
  }
}

TEST(Config, HttpMaxConnections) {
  EXPECT_EQ(parse_config("", "test.yaml").http.max_connections, 10000u);
  EXPECT_EQ(parse_config("http: {max_connections: 3}\n", "test.yaml").http.max_connections, 3u);
  EXPECT_NE(only_problem("http: {max_connections: 0}\n").find("http.max_connections"),
            std::string::npos);
}

TEST(Config, ListenUnixSocket) {
  const auto none = parse_config("", "test.yaml");
  EXPECT_EQ(none.listen_unix_socket, "");
  EXPECT_EQ(none.listen_unix_socket_mode, 0660u);
  const auto set = parse_config(
      "listen: {unix_socket: /run/slotted/api.sock, unix_socket_mode: 0600}\n", "test.yaml");
  EXPECT_EQ(set.listen_unix_socket, "/run/slotted/api.sock");
  EXPECT_EQ(set.listen_unix_socket_mode, 0600u);
  EXPECT_EQ(
      parse_config("listen: {unix_socket: /a.sock, unix_socket_mode: \"0666\"}\n", "test.yaml")
          .listen_unix_socket_mode,
      0666u);
  EXPECT_NE(only_problem("listen: {unix_socket: relative.sock}\n").find("listen.unix_socket"),
            std::string::npos);
  EXPECT_NE(only_problem("listen: {unix_socket: /" + std::string(120, 'a') + "}\n")
                .find("at most 107 bytes"),
            std::string::npos);
  EXPECT_NE(only_problem("listen: {unix_socket_mode: 0999}\n").find("listen.unix_socket_mode"),
            std::string::npos);
  EXPECT_NE(only_problem("listen: {unix_socket_mode: 01777}\n").find("octal mode"),
            std::string::npos);
}

TEST(Config, ReloadAppliesLiveKeysAndNamesTheRest) {
  const auto running = parse_config(
      "log: {level: info}\n"
      "counters: [{name: pages, record_type: 7}]\n"
      "flush: {slots: 100}\n",
      "a.yaml");
  EXPECT_TRUE(plan_reload(running, running).live.empty());
  EXPECT_TRUE(plan_reload(running, running).needs_restart.empty());

  const auto next = parse_config(
      "log: {level: debug}\n"
      "accept_undeclared_types: true\n"
      "counters:\n"
      "  - {name: pages, record_type: 7}\n"
      "  - name: downloads\n"
      "    record_type: 123\n"
      "    rollup: {table: repositories, id_column: id, count_column: download_count}\n"
      "flush: {slots: 8}\n"
      "listen: {port: 9999, unix_socket: /run/x.sock}\n"
      "mysql: {hosts: [\"db2:3306\"], tls: {mode: required}}\n"
      "http: {max_connections: 5}\n"
      "wal: {fsync: always}\n",
      "b.yaml");
  const auto plan = plan_reload(running, next);
  EXPECT_EQ(plan.live,
            (std::vector<std::string>{"log.level", "counters", "accept_undeclared_types"}));
  EXPECT_EQ(plan.needs_restart,
            (std::vector<std::string>{"listen.port", "listen.unix_socket", "http.max_connections",
                                      "mysql.hosts", "mysql.tls", "flush.slots", "wal.fsync"}));

  // A rollup target that changes column alone is a change of counters.
  auto moved = next;
  moved.counters[1].rollup->count_column = "downloads";
  EXPECT_EQ(plan_reload(next, moved).live, (std::vector<std::string>{"counters"}));
}

TEST(Config, ReloadSeesANewTokenOrPasswordInTheSameFileWithoutShowingIt) {
  auto a = parse_config("", "a.yaml");
  auto b = a;
  a.http.auth_token_file = b.http.auth_token_file = "/etc/token";
  a.http.auth_token = "old-secret";
  b.http.auth_token = "new-secret";
  a.mysql.password_file = b.mysql.password_file = "/etc/pw";
  a.mysql.password = "old-password";
  b.mysql.password = "new-password";
  const auto plan = plan_reload(a, b);
  EXPECT_EQ(plan.live, (std::vector<std::string>{"http.auth_token_file"}));
  EXPECT_EQ(plan.needs_restart, (std::vector<std::string>{"mysql.password_file"}));
  for (const auto& k : plan.live) EXPECT_EQ(k.find("secret"), std::string::npos);
}

TEST(Config, IdempotencyWindow) {
  EXPECT_EQ(parse_config("", "a.yaml").idempotency.window, std::chrono::hours(24));
  EXPECT_EQ(parse_config("", "a.yaml").idempotency.max_keys, 1000000u);
  const auto cfg = parse_config("idempotency: {window: 90m, max_keys: 5000}\n", "a.yaml");
  EXPECT_EQ(cfg.idempotency.window, std::chrono::minutes(90));
  EXPECT_EQ(cfg.idempotency.max_keys, 5000u);
  for (const char* bad : {"idempotency: {window: 0s}\n", "idempotency: {window: 721h}\n",
                          "idempotency: {window: soon}\n", "idempotency: {size: 3}\n",
                          "idempotency: {max_keys: 0}\n"}) {
    EXPECT_THROW(parse_config(bad, "a.yaml"), config_error) << bad;
  }
  // Restart-only: the index and the flusher read it at start.
  const auto plan = plan_reload(parse_config("", "a.yaml"), cfg);
  EXPECT_TRUE(plan.live.empty());
  EXPECT_EQ(plan.needs_restart,
            (std::vector<std::string>{"idempotency.window", "idempotency.max_keys"}));
}

// Two counters rolled up into one owning column would each adopt its history (counted
// twice) and overwrite each other's totals: refused, naming the first.
TEST(Config, OneOwningColumnHoldsOneCounter) {
  const std::string target = "rollup: {table: repos, id_column: id, count_column: ";
  const auto p =
      only_problem("counters:\n  - {name: a, record_type: 1, " + target +
                   "downloads}}\n  - {name: b, record_type: 2, " + target + "Downloads}}\n");
  EXPECT_NE(p.find("counters[1].rollup"), std::string::npos) << p;
  EXPECT_NE(p.find("counter 'a'"), std::string::npos) << p;
  EXPECT_TRUE(problems_of("counters:\n  - {name: a, record_type: 1, " + target +
                          "downloads}}\n  - {name: b, record_type: 2, " + target + "views}}\n")
                  .empty());
}

}  // namespace
}  // namespace slotted::config
