// The installed conffile (config/slotted-counterd.yaml) starts on a fresh database: set
// host/user/password (and database), --migrate as an administrator given on the command
// line, the printed GRANTs for the daemon's user, start: ready, and it counts.

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// `text` with the one occurrence of `from` replaced (an edit the operator makes).
std::string edited(const std::string& text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  if (at == std::string::npos || text.find(from, at + 1) != std::string::npos)
    throw std::runtime_error("the shipped config has not exactly one '" + from + "'");
  return text.substr(0, at) + to + text.substr(at + from.size());
}

TEST(ShippedConfigDb, StartsOnAFreshDatabaseAfterMigrate) {
  auto& server = shared_mariadb();
  const auto database = server.create_database();
  const std::string admin = "shipped_admin_" + database, user = "shipped_" + database;
  const std::string dir = make_temp_dir("shipped-test");
  std::ofstream(dir + "/admin-pw") << "Shipped-admin-pw\n";
  std::ofstream(dir + "/pw") << "Shipped-user-pw\n";
  {
    auto root = server.connect();
    root.execute("CREATE USER '" + admin + "'@'%' IDENTIFIED BY 'Shipped-admin-pw'");
    root.execute("GRANT ALL ON `" + database + "`.* TO '" + admin + "'@'%'");
    root.execute("CREATE USER '" + user + "'@'%' IDENTIFIED BY 'Shipped-user-pw'");
  }

  std::ifstream in(std::string(SLOTTED_SOURCE_DIR) + "/config/slotted-counterd.yaml");
  std::stringstream shipped;
  shipped << in.rdbuf();
  // host stays 127.0.0.1, where the test server listens. The listen port becomes any
  // free one: 8080 may be taken on a shared machine.
  std::string yaml = shipped.str();
  yaml = edited(yaml, "\n  port: 8080\n", "\n  port: 0\n");
  yaml = edited(yaml, "\n  port: 3306\n", "\n  port: " + std::to_string(server.port()) + "\n");
  yaml = edited(yaml, "\n  user: counterd", "\n  user: " + user);
  yaml = edited(yaml, "\n  password_file: \"\"", "\n  password_file: " + dir + "/pw");
  yaml = edited(yaml, "\n  database: app", "\n  database: " + database);

  std::string out;
  ASSERT_EQ(
      run_binary(yaml,
                 "--migrate --mysql-user " + admin + " --mysql-password-file " + dir + "/admin-pw",
                 out),
      0)
      << out;
  ASSERT_EQ(run_binary(yaml, "--print-grants", out), 0) << out;
  std::ofstream(dir + "/grants.sql") << out;
  ASSERT_EQ(std::system(("mariadb --no-defaults --socket=" + server.socket() + " -u root < " + dir +
                         "/grants.sql")
                            .c_str()),
            0)
      << out;
  ASSERT_EQ(run_binary(yaml, "--check-config", out), 0) << out;
  EXPECT_NE(out.find("OK (database schema and rollup targets verified)"), std::string::npos) << out;

  {
    daemon_process d(yaml);
    http_client c(d.port());
    EXPECT_TRUE(eventually([&] { return c.get("/readyz").status == 200; }, 20s)) << d.log();
    // The example counter counts.
    ASSERT_EQ(
        c.post_json("/v1/increments", R"({"record_type": 123, "record_id": 1, "delta": 2})").status,
        202u);
    EXPECT_TRUE(eventually(
        [&] {
          return server.query_int(database,
                                  "SELECT COALESCE(SUM(count), 0) FROM slotted_counters") == 2;
        },
        20s))
        << d.log();
    d.signal(SIGTERM);
    EXPECT_EQ(d.wait(40s), 0) << d.log();
    EXPECT_EQ(d.log().find("denied"), std::string::npos) << d.log();
  }
  server.connect().execute("DROP USER '" + admin + "'@'%', '" + user + "'@'%'");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace slotted::test
