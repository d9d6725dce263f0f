// --print-grants (db::grant_statements): the exact statements.

#include "db/grants.hpp"

#include <gtest/gtest.h>

#include <sstream>

namespace slotted::db {
namespace {

config::daemon_config config_of(const std::string& yaml) {
  return config::parse_config(yaml, "test.yaml");
}

// PostgreSQL: to the role, on TABLE schema.name, the schema's USAGE first; names
// double-quoted; no host.
TEST(Grants, PostgresqlGrantsToTheRoleInTheSchema) {
  const auto cfg = config_of(R"(
postgresql: {user: "count\"er", database: app, schema: counting, table: hits}
counters:
  - name: repo_downloads
    record_type: 123
    rollup: {table: repositories, id_column: id, count_column: download_count}
    buckets: {hour: 48h}
)");
  const std::vector<std::string> want = {
      R"(GRANT USAGE ON SCHEMA "counting" TO "count""er")",
      R"(GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "counting"."hits" TO "count""er")",
      R"(GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "counting"."hits_hour" TO "count""er")",
      R"(GRANT SELECT, INSERT, DELETE ON TABLE "counting"."slotted_counterd_ledger" TO "count""er")",
      R"(GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "counting"."slotted_counterd_idempotency_keys" TO "count""er")",
      R"(GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "counting"."slotted_counterd_dirty" TO "count""er")",
      R"(GRANT SELECT, INSERT ON TABLE "counting"."slotted_counterd_adoptions" TO "count""er")",
      R"(GRANT SELECT ("id", "download_count"), UPDATE ("download_count") ON TABLE "counting"."repositories" TO "count""er")",
  };
  EXPECT_EQ(grant_statements(cfg), want);
  std::ostringstream out, err;
  EXPECT_EQ(print_grants(cfg, "%", out, err), 0) << err.str();
  EXPECT_NE(out.str().find(R"(-- GRANT USAGE, CREATE ON SCHEMA "counting" TO ADMIN;)"),
            std::string::npos)
      << out.str();
  EXPECT_NE(
      out.str().find(R"(-- GRANT USAGE ON SEQUENCE "counting"."hits_id_seq" TO "count""er";)"),
      std::string::npos)
      << out.str();
  // A role GRANT would read as everyone, or one that would end a comment line early.
  for (const char* role : {"public", "PUBLIC", "pg_monitor", "Current_User"}) {
    auto odd = cfg;
    odd.mysql.user = role;
    std::ostringstream o, e;
    EXPECT_EQ(print_grants(odd, "%", o, e), 2) << role;
    EXPECT_TRUE(o.str().empty()) << role;
    EXPECT_NE(e.str().find("postgresql.user"), std::string::npos) << e.str();
  }
  auto broken = cfg;
  broken.mysql.user = "a\nGRANT ALL ON SCHEMA public TO x; --";
  std::ostringstream o, e;
  EXPECT_EQ(print_grants(broken, "%", o, e), 2);
  EXPECT_NE(e.str().find("control character"), std::string::npos) << e.str();
  std::ostringstream out2, err2;
  EXPECT_EQ(print_grants(cfg, "10.0.0.1", out2, err2), 2);
  EXPECT_NE(err2.str().find("pg_hba.conf"), std::string::npos);
  EXPECT_TRUE(out2.str().empty());
}

TEST(Grants, BucketsAndTwoRollupTargets) {
  const auto cfg = config_of(R"(
mysql: {user: counterd, database: app, table: hits}
counters:
  - name: repo_downloads
    record_type: 123
    rollup: {table: repositories, id_column: id, count_column: download_count}
    buckets: {hour: 48h, day: 400d}
    top: true
  - name: release_downloads
    record_type: 124
    rollup: {table: releases, id_column: release_id, count_column: downloads}
  - name: repo_views
    record_type: 125
    rollup: {table: repositories, id_column: id, count_column: view_count}
)");
  const std::vector<std::string> want = {
      "GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.`hits` TO 'counterd'@'%'",
      "GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.`hits_hour` TO 'counterd'@'%'",
      "GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.`hits_day` TO 'counterd'@'%'",
      "GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.`hits_totals` TO 'counterd'@'%'",
      "GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.`hits_hour_totals` TO 'counterd'@'%'",
      "GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.`hits_day_totals` TO 'counterd'@'%'",
      "GRANT SELECT ON `app`.`slotted_counterd_totals_filled` TO 'counterd'@'%'",
      "GRANT SELECT, INSERT, DELETE ON `app`.`slotted_counterd_ledger` TO 'counterd'@'%'",
      "GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.`slotted_counterd_idempotency_keys` TO "
      "'counterd'@'%'",
      "GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.`slotted_counterd_dirty` TO 'counterd'@'%'",
      "GRANT SELECT, INSERT ON `app`.`slotted_counterd_adoptions` TO 'counterd'@'%'",
      "GRANT SELECT (`id`, `download_count`, `view_count`), UPDATE (`download_count`, "
      "`view_count`) ON `app`.`repositories` TO 'counterd'@'%'",
      "GRANT SELECT (`release_id`, `downloads`), UPDATE (`downloads`) ON `app`.`releases` TO "
      "'counterd'@'%'",
  };
  EXPECT_EQ(grant_statements(cfg), want);
}

TEST(Grants, OnlyTheBucketTablesDeclaredAndNoRollupTablesWithoutARollup) {
  const auto cfg = config_of(
      "mysql: {user: counterd}\n"
      "counters: [{name: a, record_type: 1, buckets: {day: 30d}}]\n");
  const std::vector<std::string> want = {
      "GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.`slotted_counters` TO 'counterd'@'%'",
      "GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.`slotted_counters_day` TO 'counterd'@'%'",
      "GRANT SELECT, INSERT, DELETE ON `app`.`slotted_counterd_ledger` TO 'counterd'@'%'",
      "GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.`slotted_counterd_idempotency_keys` TO "
      "'counterd'@'%'",
  };
  EXPECT_EQ(grant_statements(cfg), want);
}

TEST(Grants, HostIsQuoted) {
  const auto cfg = config_of("mysql: {user: counterd}\n");
  for (const auto& s : grant_statements(cfg, "10.0.%"))
    EXPECT_TRUE(s.ends_with(" TO 'counterd'@'10.0.%'")) << s;
  for (const auto& s : grant_statements(cfg, "it's"))
    EXPECT_TRUE(s.ends_with(" TO 'counterd'@'it''s'")) << s;
}

TEST(Grants, UserNeedingEscaping) {
  const auto cfg = config_of(R"(mysql: {user: "o'brien\\x y", database: shop})");
  ASSERT_EQ(cfg.mysql.user, "o'brien\\x y");
  const auto s = grant_statements(cfg, "localhost");
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s[0],
            "GRANT SELECT, INSERT, UPDATE, DELETE ON `shop`.`slotted_counters` TO "
            "'o''brien\\\\x y'@'localhost'");
}

TEST(Grants, AnAccountThatCannotExistIsRefusedLoudly) {
  EXPECT_THROW(grant_statements(config_of("mysql: {user: \"\"}\n")), std::invalid_argument);
  EXPECT_THROW(grant_statements(config_of("mysql: {user: u}\n"), ""), std::invalid_argument);
  EXPECT_THROW(grant_statements(config_of("mysql: {user: \"a\\0b\"}\n")), std::invalid_argument);
  std::ostringstream out, err;
  EXPECT_EQ(print_grants(config_of("mysql: {user: u}\n"), "", out, err), 2);
  EXPECT_EQ(out.str(), "");
  EXPECT_EQ(err.str(), "cannot print grants: grant host: empty name\n");
}

TEST(Grants, NeedNoSecret) {
  // The service's config from a shell: its credentials are the service's alone.
  const std::string yaml =
      "mysql: {user: u, password_file: /run/credentials/slotted-counterd.service/db-password}\n"
      "http: {auth_token_file: /run/credentials/slotted-counterd.service/token}\n";
  EXPECT_THROW(config::parse_config(yaml, "c.yaml"), config::config_error);
  const auto cfg = config::parse_config(yaml, "c.yaml", {}, false);
  EXPECT_EQ(grant_statements(cfg).size(), 3u);
}

TEST(Grants, PrintedOnePerLineWithASemicolon) {
  std::ostringstream out, err;
  EXPECT_EQ(print_grants(config_of("mysql: {user: u}\n"), "h", out, err), 0);
  EXPECT_EQ(err.str(), "");
  EXPECT_EQ(out.str(),
            "GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.`slotted_counters` TO 'u'@'h';\n"
            "GRANT SELECT, INSERT, DELETE ON `app`.`slotted_counterd_ledger` TO 'u'@'h';\n"
            "GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.`slotted_counterd_idempotency_keys` "
            "TO 'u'@'h';\n"
            "-- The administrator's account that runs --migrate (not mysql.user) needs:\n"
            "-- GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, DROP ON `app`.* TO "
            "'ADMIN'@'HOST';\n");
}

}  // namespace
}  // namespace slotted::db
