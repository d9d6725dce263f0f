// --print-grants against a real MariaDB (README: Production install, docs/production.md):
// a user holding exactly the printed GRANTs runs every feature of a config that uses
// them all (ingest, flush, Idempotency-Key, reads, /series, buckets with retention, the
// ledger's and the keys' retention, rollup to an owning table, reset), and the schema
// checks in information_schema see what they need. Without one of the GRANTs a feature
// breaks (GrantsDb.WithoutOneGrantItsFeatureBreaks).

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/postgres_server.hpp"
#include "support/temp_dir.hpp"
#include "support/unix_now.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr const char* user_password = "Gr4nts-user-pw";
// Until --migrate creates it (the --adopt work), the adoption table may be missing: its
// GRANT is then left out, as a GRANT on a missing table is an error.
constexpr const char* adoptions_table = "slotted_counterd_adoptions";

class GrantsDb : public ::testing::Test {
 protected:
  // MariaDB here; PostgreSQL in GrantsOnPostgresql (a role, the socket, trust).
  virtual db::engine engine() const { return db::engine::mariadb; }
  bool postgresql() const { return engine() == db::engine::postgresql; }
  db_server& server() const { return shared_server(engine()); }

  void SetUp() override {
    database_ = server().create_database();
    // A name that needs quoting: a quote and a backslash; on PostgreSQL, capitals and a
    // dash (grants_test.cpp's unit twin doubles a double quote).
    user_ = postgresql() ? "Slotted-Grant-" + database_ : "slotted'grant\\" + database_;
    dir_ = make_temp_dir("grants-test");
    std::ofstream(dir_ + "/pw") << user_password << "\n";

    std::string out;
    ASSERT_EQ(
        run_binary(daemon_yaml(server(), database_, counters(), "table: hits"), "--migrate", out),
        0)
        << out;
    auto root = server().connect(database_);
    // The application's table: columns the daemon has no business with besides its own.
    root.execute(std::string("CREATE TABLE repos (id BIGINT ") + (postgresql() ? "" : "UNSIGNED ") +
                 "PRIMARY KEY, name VARCHAR(64) NOT NULL, "
                 "download_count BIGINT NOT NULL DEFAULT 0, owner_email VARCHAR(128))");
    root.execute("INSERT INTO repos (id, name) VALUES (1, 'a'), (2, 'b'), (3, 'c')");
    if (postgresql()) {
      root.execute("CREATE ROLE \"" + user_ + "\" LOGIN");
    } else {
      // Over TCP ('%'): the socket's anonymous ''@'localhost' would shadow the user.
      root.execute("CREATE USER '" + sql_escaped(user_) + "'@'%' IDENTIFIED BY '" + user_password +
                   "'");
    }
    // Old rows for the retention to delete: buckets past their retention, and a ledger
    // row another instance left two days ago.
    root.execute(
        "INSERT INTO hits_hour (record_type, record_id, bucket, slot, count) VALUES "
        "(1, 99, '2020-01-01 00:00:00', 0, 1)");
    root.execute(
        "INSERT INTO hits_day (record_type, record_id, bucket, slot, count) VALUES "
        "(1, 99, '2020-01-01', 0, 1)");
    root.execute(
        "INSERT INTO slotted_counterd_ledger (instance_id, run_id, batch_seq, row_count, "
        "committed_at) VALUES ('gone-instance', 1, 1, 1, " +
        std::string(postgresql() ? "statement_timestamp() - INTERVAL '2 DAY'"
                                 : "NOW() - INTERVAL 2 DAY") +
        ")");
    adoptions_present_ =
        postgresql() || shared_mariadb().query_int("",
                                                   "SELECT COUNT(*) FROM information_schema.TABLES "
                                                   "WHERE TABLE_SCHEMA = '" +
                                                       database_ + "' AND TABLE_NAME = '" +
                                                       adoptions_table + "'") == 1;
  }
  void TearDown() override {
    if (postgresql()) {
      try {
        auto root = server().connect(database_);
        root.execute("DROP OWNED BY \"" + user_ + "\"");
        root.execute("DROP ROLE \"" + user_ + "\"");
      } catch (const std::exception& e) {
        ADD_FAILURE() << "dropping the role: " << e.what();
      }
    } else {
      shared_mariadb().connect().execute("DROP USER IF EXISTS '" + sql_escaped(user_) + "'@'%'");
    }
    fs::remove_all(dir_);
  }

  static std::string sql_escaped(const std::string& s) {
    std::string out;
    for (char c : s) {
      if (c == '\'' || c == '\\') out.push_back(c == '\'' ? '\'' : '\\');
      out.push_back(c);
    }
    return out;
  }
  // Every feature: rollup to repos, hour and day buckets with retention, top-N totals.
  static std::string counters() {
    return "counters:\n"
           "  - name: downloads\n"
           "    record_type: 1\n"
           "    rollup: {table: repos, id_column: id, count_column: download_count}\n"
           "    buckets: {hour: 48h, day: 400d}\n"
           "    top: true\n";
  }
  // The daemon's config: the user above, over TCP with its password file; on PostgreSQL
  // over the socket (trust).
  std::string yaml() const {
    if (postgresql()) {
      return "instance_id: grants-test\n"
             "listen: {address: 127.0.0.1, port: 0}\n"
             "http: {threads: 2}\n"
             "postgresql: {socket: " +
             shared_postgres().socket_dir() +
             ", port: " + std::to_string(shared_postgres().port()) + ", user: " + user_ +
             ", database: " + database_ + ", table: hits}\n" + counters() +
             "flush: {interval: 200ms}\n"
             "rollup: {interval: 500ms}\n"
             "idempotency: {window: 2s}\n";
    }
    return "instance_id: grants-test\n"
           "listen: {address: 127.0.0.1, port: 0}\n"
           "http: {threads: 2}\n"
           "mysql:\n"
           "  host: 127.0.0.1\n"
           "  port: " +
           std::to_string(shared_mariadb().port()) +
           "\n"
           "  user: \"slotted'grant\\\\" +
           database_ +
           "\"\n"
           "  password_file: " +
           dir_ + "/pw\n" + "  database: " + database_ + "\n" + "  table: hits\n" + counters() +
           "flush: {interval: 200ms}\n"
           "rollup: {interval: 500ms}\n"
           "idempotency: {window: 2s}\n";
  }

  // --print-grants' output, one statement per line; its comment lines (the
  // administrator's GRANT) go to `comments`.
  std::vector<std::string> printed_grants(std::vector<std::string>* comments = nullptr) const {
    std::string out;
    EXPECT_EQ(run_binary(yaml(), "--print-grants", out), 0) << out;
    std::vector<std::string> lines;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      if (!line.starts_with("-- "))
        lines.push_back(line);
      else if (comments != nullptr)
        comments->push_back(line.substr(3));
    }
    return lines;
  }

  // Runs `statements` as root through the mariadb client, as an administrator would (on
  // PostgreSQL as the superuser, over the daemon's driver).
  void apply(const std::vector<std::string>& statements) const {
    if (postgresql()) {
      auto root = server().connect(database_);
      for (const auto& s : statements) root.execute(s.substr(0, s.size() - 1));  // no ';'
      return;
    }
    std::ofstream(dir_ + "/grants.sql") << [&] {
      std::string text;
      for (const auto& s : statements) text += s + "\n";
      return text;
    }();
    const std::string cmd = "mariadb --no-defaults --socket=" + shared_mariadb().socket() +
                            " -u root " + database_ + " < " + dir_ + "/grants.sql > " + dir_ +
                            "/grants.out 2>&1";
    const int status = std::system(cmd.c_str());
    std::ifstream in(dir_ + "/grants.out");
    const std::string out((std::istreambuf_iterator<char>(in)), {});
    ASSERT_EQ(status, 0) << out;
  }

  std::int64_t db_int(const std::string& sql) const { return server().query_int(database_, sql); }

  // Runs every feature as the user; returns what failed (empty: all worked). With
  // `to_the_end` false, stops waiting at the first failure.
  std::vector<std::string> exercise(bool to_the_end = true) const {
    std::vector<std::string> failed;
    std::string out;
    if (run_binary(yaml(), "--check-config", out) != 0 ||
        out.find("OK (database schema and rollup targets verified)") == std::string::npos)
      failed.push_back("--check-config (information_schema): " + out);
    std::unique_ptr<daemon_process> d;
    try {
      d = std::make_unique<daemon_process>(yaml());
    } catch (const std::exception& e) {
      failed.push_back(std::string("start: ") + e.what());
      return failed;
    }
    const auto check = [&](const std::string& what, auto done) {
      if (!to_the_end && !failed.empty()) return;
      if (!eventually(done, 20s, 50ms)) failed.push_back(what);
    };
    http_client c(d->port());
    check("/readyz", [&] { return c.get("/readyz").status == 200; });
    const auto post = [&](int id, int delta, const std::string& key = "") {
      std::map<std::string, std::string> headers;
      if (!key.empty()) headers["Idempotency-Key"] = key;
      return c
          .request("POST", "/v1/increments",
                   "{\"record_type\": 1, \"record_id\": " + std::to_string(id) +
                       ", \"delta\": " + std::to_string(delta) + "}",
                   "application/json", headers)
          .status;
    };
    if (post(1, 5) != 202 || post(2, 7) != 202) failed.push_back("ingest");
    // Keyed, and retried: applied once.
    const auto k1 = post(3, 4, "grants-k1"), k2 = post(3, 4, "grants-k1");
    if (k1 / 100 != 2 || k2 / 100 != 2)
      failed.push_back("Idempotency-Key: " + std::to_string(k1) + ", " + std::to_string(k2));
    const auto total = [&](const std::string& table, int id) {
      return db_int("SELECT COALESCE(SUM(count), 0) FROM " + table +
                    " WHERE record_type = 1 AND record_id = " + std::to_string(id));
    };
    check("flush", [&] { return total("hits", 1) == 5 && total("hits", 2) == 7; });
    check("Idempotency-Key applied once", [&] { return total("hits", 3) == 4; });
    check("hour and day buckets", [&] {
      return total("hits_hour", 1) == 5 && total("hits_day", 1) == 5 && total("hits_hour", 3) == 4;
    });
    const auto owning = [&](int id) {
      return db_int("SELECT download_count FROM repos WHERE id = " + std::to_string(id));
    };
    check("rollup", [&] { return owning(1) == 5 && owning(2) == 7 && owning(3) == 4; });
    check("GET /v1/counters", [&] {
      const auto r = c.get("/v1/counters/1/1");
      return r.status == 200 && json_int(r.body, "count") == 5 &&
             json_int(r.body, "persisted") == 5;
    });
    const auto now = unix_now();
    check("/series", [&] {
      const auto r = c.get("/v1/counters/downloads/1/series?granularity=hour&from=" +
                           std::to_string(now - 7200) + "&to=" + std::to_string(now + 3600));
      return r.status == 200 && r.body.find("\"count\": 5") != std::string::npos;
    });
    const auto reset = c.request("DELETE", "/v1/counters/1/2");
    if (reset.status != 200)
      failed.push_back("reset: " + std::to_string(reset.status) + reset.body);
    check("reset cleared the slots and buckets, and the rollup set 0", [&] {
      return total("hits", 2) == 0 && total("hits_hour", 2) == 0 && total("hits_day", 2) == 0 &&
             owning(2) == 0;
    });
    check("bucket retention",
          [&] { return total("hits_hour", 99) == 0 && total("hits_day", 99) == 0; });
    check("ledger retention", [&] {
      return db_int(
                 "SELECT COUNT(*) FROM slotted_counterd_ledger WHERE instance_id = "
                 "'gone-instance'") == 0;
    });
    check("Idempotency-Key retention",
          [&] { return db_int("SELECT COUNT(*) FROM slotted_counterd_idempotency_keys") == 0; });
    d->signal(SIGTERM);
    if (d->wait(30s) != 0) failed.push_back("stop");
    const auto log = d->log();
    if (log.find("denied") != std::string::npos) failed.push_back("permission error in the log");
    if (!failed.empty()) failed.push_back("daemon log:\n" + log);
    return failed;
  }

  std::string database_, user_, dir_;
  bool adoptions_present_ = false;
};

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "\n";
  return out;
}

TEST_F(GrantsDb, ThePrintedGrantsAreEnoughForEveryFeature) {
  auto grants = printed_grants();
  std::cout << "--print-grants:\n" << joined(grants);
  ASSERT_EQ(grants.size(), 12u) << joined(grants);
  for (const auto& g : grants) {
    EXPECT_TRUE(g.starts_with("GRANT ") && g.ends_with(";")) << g;
    EXPECT_EQ(g.find("IDENTIFIED"), std::string::npos) << g;
    EXPECT_EQ(g.find(user_password), std::string::npos) << g;
  }
  // On the application's table: its two columns, nothing else.
  EXPECT_EQ(grants.back(), "GRANT SELECT (`id`, `download_count`), UPDATE (`download_count`) ON `" +
                               database_ + "`.`repos` TO 'slotted''grant\\\\" + database_ +
                               "'@'%';");
  if (!adoptions_present_) {
    std::erase_if(grants, [](const std::string& g) { return g.find(adoptions_table) != g.npos; });
    ASSERT_EQ(grants.size(), 11u);
    std::cout << "note: " << adoptions_table
              << " not created by --migrate yet; its GRANT left out\n";
  }
  apply(grants);
  const auto failed = exercise();
  EXPECT_TRUE(failed.empty()) << joined(failed);
}

// PostgreSQL's printer: the role holding exactly the printed GRANTs runs every feature
// built there (dedupe and access logs are not yet); without the keys table's, keyed
// requests fail.
class GrantsOnPostgresql : public GrantsDb {
 protected:
  db::engine engine() const override { return db::engine::postgresql; }
};

TEST_F(GrantsOnPostgresql, ThePrintedGrantsAreEnoughForEveryFeatureBuiltThere) {
  const auto grants = printed_grants();
  std::cout << "--print-grants:\n" << joined(grants);
  ASSERT_EQ(grants.size(), 13u) << joined(grants);
  EXPECT_EQ(grants.front(), "GRANT USAGE ON SCHEMA \"public\" TO \"" + user_ + "\";");
  EXPECT_EQ(grants.back(),
            "GRANT SELECT (\"id\", \"download_count\"), UPDATE (\"download_count\") ON TABLE "
            "\"public\".\"repos\" TO \"" +
                user_ + "\";");
  apply(grants);
  const auto failed = exercise();
  EXPECT_TRUE(failed.empty()) << joined(failed);
}

TEST_F(GrantsOnPostgresql, WithoutOneGrantItsFeatureBreaks) {
  auto grants = printed_grants();
  std::erase_if(grants, [](const std::string& g) {
    return g.find("slotted_counterd_idempotency_keys") != g.npos;
  });
  ASSERT_EQ(grants.size(), 12u);
  apply(grants);
  const auto failed = exercise(false);
  ASSERT_FALSE(failed.empty());
  EXPECT_TRUE(failed[0].starts_with("Idempotency-Key")) << joined(failed);
}

// Issue 40: the administrator's GRANT --print-grants prints (and docs/install.md gives) is
// enough for --migrate of every feature on a fresh database, top-N's totals tables
// included (DROP TABLE IF EXISTS, RENAME TABLE); without DROP it is not.
TEST_F(GrantsDb, TheAdministratorsPrintedGrantIsEnoughForMigrate) {
  std::vector<std::string> comments;
  printed_grants(&comments);
  ASSERT_EQ(comments.size(), 2u);
  const std::string admin_grant = comments[1];
  ASSERT_TRUE(admin_grant.starts_with("GRANT ") && admin_grant.ends_with(" TO 'ADMIN'@'HOST';"))
      << admin_grant;
  auto root = shared_mariadb().connect();
  const auto migrate_as = [&](const std::string& grant) {
    const auto db = shared_mariadb().create_database();
    const std::string admin = "adm_" + db.substr(db.size() > 20 ? db.size() - 20 : 0);
    root.execute("CREATE USER '" + admin + "'@'%' IDENTIFIED BY '" + user_password + "'");
    std::string g = grant.substr(0, grant.size() - 1);  // no ';'
    g.replace(g.find("`" + database_ + "`"), database_.size() + 2, "`" + db + "`");
    g.replace(g.find("'ADMIN'@'HOST'"), 14, "'" + admin + "'@'%'");
    root.execute(g);
    // The rollup's owning table, which --migrate expects in the application's database.
    root.execute("CREATE TABLE `" + db +
                 "`.repos (id BIGINT UNSIGNED PRIMARY KEY, "
                 "download_count BIGINT NOT NULL DEFAULT 0)");
    auto y = yaml();
    y.replace(y.find("  database: " + database_), 12 + database_.size(), "  database: " + db);
    std::string out;
    const int rc = run_binary(
        y, "--migrate --mysql-user " + admin + " --mysql-password-file " + dir_ + "/pw", out);
    root.execute("DROP USER '" + admin + "'@'%'");
    return std::make_pair(rc, out);
  };
  const auto [rc, out] = migrate_as(admin_grant);
  EXPECT_EQ(rc, 0) << out;
  std::string without_drop = admin_grant;
  without_drop.erase(without_drop.find(", DROP"), 6);
  const auto [rc2, out2] = migrate_as(without_drop);
  EXPECT_NE(rc2, 0) << "--migrate of top-N totals without DROP: " << out2;
  EXPECT_NE(out2.find("DROP command denied"), std::string::npos) << out2;
}

TEST_F(GrantsDb, WithoutOneGrantItsFeatureBreaks) {
  // The proof that the test above tests the list: drop the GRANT on the Idempotency-Key
  // table, and keyed requests fail while the rest works.
  auto grants = printed_grants();
  std::erase_if(grants, [](const std::string& g) {
    return g.find(adoptions_table) != g.npos ||
           g.find("slotted_counterd_idempotency_keys") != g.npos;
  });
  ASSERT_EQ(grants.size(), 10u);
  apply(grants);
  const auto failed = exercise(false);
  ASSERT_FALSE(failed.empty());
  EXPECT_TRUE(failed[0].starts_with("Idempotency-Key")) << joined(failed);
}

}  // namespace
}  // namespace slotted::test
