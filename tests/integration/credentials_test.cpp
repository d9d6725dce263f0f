// --mysql-user / --mysql-password-file against a real MariaDB: an administrator runs
// --migrate and --check-config with the very config the service uses, whose own user
// cannot create tables and whose password it cannot read; the password is in no output;
// a SIGHUP reload keeps the command line's credentials.

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>

#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr const char* admin_password = "Adm1n-pw-never-shown";
constexpr const char* reader_password = "Re4der-pw-never-shown";

class CredentialsDb : public ::testing::Test {
 protected:
  void SetUp() override {
    database_ = shared_mariadb().create_database();
    admin_ = "cred_admin_" + database_;
    reader_ = "cred_reader_" + database_;
    dir_ = make_temp_dir("cred-test");
    auto root = shared_mariadb().connect();
    // Over TCP ('%'): the socket's anonymous ''@'localhost' would shadow them.
    root.execute("CREATE USER '" + admin_ + "'@'%' IDENTIFIED BY '" + admin_password + "'");
    root.execute("GRANT ALL ON `" + database_ + "`.* TO '" + admin_ + "'@'%'");
    root.execute("CREATE USER '" + reader_ + "'@'%' IDENTIFIED BY '" + reader_password + "'");
    root.execute("GRANT SELECT ON `" + database_ + "`.* TO '" + reader_ + "'@'%'");
    std::ofstream(dir_ + "/admin-pw") << admin_password << "\n";
    std::ofstream(dir_ + "/reader-pw") << reader_password << "\n";
    std::ofstream(dir_ + "/wrong-pw") << "Wr0ng-pw-never-shown\n";
  }
  void TearDown() override {
    auto root = shared_mariadb().connect();
    root.execute("DROP USER IF EXISTS '" + admin_ + "'@'%', '" + reader_ + "'@'%'");
    fs::remove_all(dir_);
  }

  // The service's config: its own user (SELECT only), its password in a systemd
  // credential this process cannot read.
  std::string service_yaml() const {
    return "instance_id: cred-test\n"
           "listen: {address: 127.0.0.1, port: 0}\n"
           "http: {threads: 2}\n"
           "mysql:\n"
           "  host: 127.0.0.1\n"
           "  port: " +
           std::to_string(shared_mariadb().port()) +
           "\n"
           "  user: " +
           reader_ +
           "\n"
           "  password_file: /run/credentials/slotted-counterd.service/db-password\n"
           "  database: " +
           database_ +
           "\n"
           "counters: [{name: downloads, record_type: 1}]\n"
           "flush: {interval: 200ms}\n";
  }
  std::int64_t tables() const {
    return shared_mariadb().query_int(
        "",
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '" + database_ + "'");
  }
  std::string admin_flags() const {
    return "--mysql-user " + admin_ + " --mysql-password-file " + dir_ + "/admin-pw";
  }

  std::string database_, admin_, reader_, dir_;
};

TEST_F(CredentialsDb, MigrateAndCheckConfigAsAnAdminGivenOnlyOnTheCommandLine) {
  std::string out;
  // The config alone: its password file cannot be read.
  EXPECT_EQ(run_binary(service_yaml(), "--migrate", out), 2) << out;
  EXPECT_NE(out.find("mysql.password_file: cannot read "
                     "'/run/credentials/slotted-counterd.service/db-password'"),
            std::string::npos)
      << out;
  // The config's user with its password: it cannot create tables.
  EXPECT_NE(
      run_binary(service_yaml(), "--migrate --mysql-password-file " + dir_ + "/reader-pw", out), 0)
      << out;
  EXPECT_NE(out.find("denied"), std::string::npos) << out;
  EXPECT_EQ(tables(), 0);

  // The administrator, given on the command line only.
  ASSERT_EQ(run_binary(service_yaml(), "--migrate " + admin_flags(), out), 0) << out;
  EXPECT_GE(tables(), 4);  // counters, ledger, dirty marks, Idempotency-Keys
  EXPECT_EQ(run_binary(service_yaml(), "--check-config " + admin_flags(), out), 0) << out;
  EXPECT_NE(out.find("OK (database schema and rollup targets verified)"), std::string::npos) << out;
  // In any order, and in the --flag=VALUE form.
  EXPECT_EQ(
      run_binary(
          service_yaml(),
          "--mysql-password-file=" + dir_ + "/admin-pw --check-config --mysql-user=" + admin_, out),
      0)
      << out;
  EXPECT_NE(out.find("OK (database schema and rollup targets verified)"), std::string::npos) << out;
  // --print-grants needs no password: the config's credential path is not read.
  EXPECT_EQ(run_binary(service_yaml(), "--print-grants", out), 0) << out;
  EXPECT_NE(out.find("TO '" + reader_ + "'@'%'"), std::string::npos) << out;
  // ... and takes the user too.
  EXPECT_EQ(run_binary(service_yaml(), "--print-grants " + admin_flags(), out), 0) << out;
  EXPECT_NE(out.find("TO '" + admin_ + "'@'%'"), std::string::npos) << out;
  EXPECT_EQ(out.find(admin_password), std::string::npos) << out;
}

TEST_F(CredentialsDb, UnreadableOrWrongPasswordFileIsAClearErrorWithoutThePassword) {
  std::string out;
  for (const char* mode : {"--migrate", "--check-config", "--wal-salvage", ""}) {
    SCOPED_TRACE(mode);
    EXPECT_EQ(run_binary(service_yaml(),
                         std::string(mode) + " --mysql-user " + admin_ + " --mysql-password-file " +
                             dir_ + "/missing",
                         out),
              2)
        << out;
    EXPECT_NE(out.find("--mysql-password-file: cannot read '" + dir_ +
                       "/missing': No such file or directory"),
              std::string::npos)
        << out;
  }
  // A readable file with the wrong password: the server refuses, and neither password
  // is in what the daemon says.
  run_binary(
      service_yaml(),
      "--check-config --mysql-user " + admin_ + " --mysql-password-file " + dir_ + "/wrong-pw",
      out);
  EXPECT_EQ(out.find("never-shown"), std::string::npos) << out;
  EXPECT_NE(
      run_binary(
          service_yaml(),
          "--migrate --mysql-user " + admin_ + " --mysql-password-file " + dir_ + "/wrong-pw", out),
      0)
      << out;
  EXPECT_NE(out.find("Access denied"), std::string::npos) << out;
  EXPECT_EQ(out.find("never-shown"), std::string::npos) << out;
}

TEST_F(CredentialsDb, AReloadKeepsTheCommandLineCredentials) {
  std::string out;
  ASSERT_EQ(run_binary(service_yaml(), "--migrate " + admin_flags(), out), 0) << out;
  daemon_process d(service_yaml(), 0, false, {},
                   {"--mysql-user", admin_, "--mysql-password-file", dir_ + "/admin-pw"});
  ASSERT_TRUE(eventually([&] { return http_client(d.port()).get("/readyz").status == 200; }, 20s))
      << d.log();
  // A reload with a change that applies live: without the command line's credentials
  // it would read the config's password file (and fail) and see mysql.user changed.
  d.write_config(service_yaml() + "log: {level: debug}\n");
  d.signal(SIGHUP);
  ASSERT_TRUE(eventually(
      [&] {
        const auto log = d.log();
        return log.find("reload: applied") != std::string::npos ||
               log.find("reload refused") != std::string::npos;
      },
      20s))
      << d.log();
  const auto log = d.log();
  EXPECT_NE(log.find("reload: applied log.level"), std::string::npos) << log;
  EXPECT_EQ(log.find("reload refused"), std::string::npos) << log;
  EXPECT_EQ(log.find("mysql.user"), std::string::npos) << log;
  EXPECT_EQ(log.find("never-shown"), std::string::npos) << log;
  // And it still writes as the administrator.
  http_client c(d.port());
  ASSERT_EQ(
      c.post_json("/v1/increments", R"({"record_type": 1, "record_id": 5, "delta": 3})").status,
      202u);
  EXPECT_TRUE(eventually(
      [&] {
        return shared_mariadb().query_int(
                   database_, "SELECT COALESCE(SUM(count), 0) FROM slotted_counters") == 3;
      },
      20s))
      << d.log();
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(30s), 0) << d.log();
}

}  // namespace
}  // namespace slotted::test
