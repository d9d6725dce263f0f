// --mysql-user / --mysql-password-file over the config's credentials (config::apply_credentials).

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "config/config.hpp"
#include "support/temp_dir.hpp"
#include "support/config_problems.hpp"

namespace slotted::config {
namespace {

constexpr const char* secret = "Adm1n-s3cret-do-not-print";

struct temp_dir {
  std::string path;
  temp_dir() {
    path = test::make_temp_dir("cred");
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream(path + "/" + name) << content;
    return path + "/" + name;
  }
};

// The service's config: its own user, its password in a systemd credential that an
// administrator's shell cannot read.
const std::string service_yaml =
    "mysql:\n"
    "  user: counterd\n"
    "  password_file: /run/credentials/slotted-counterd.service/db-password\n";

using test::problems_of;

TEST(Credentials, WithoutFlagsTheConfigsPasswordFileIsRead) {
  const auto p = problems_of(service_yaml, {});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("test.yaml:3: mysql.password_file: cannot read "
                      "'/run/credentials/slotted-counterd.service/db-password'"),
            std::string::npos)
      << p[0];
}

TEST(Credentials, UserAndPasswordFileReplaceTheConfigs) {
  temp_dir d;
  const auto file = d.write("admin-pw", std::string(secret) + "\n");
  const auto c = parse_config(service_yaml, "c.yaml", {.user = "admin", .password_file = file});
  EXPECT_EQ(c.mysql.user, "admin");
  EXPECT_EQ(c.mysql.password_file, file);
  EXPECT_EQ(c.mysql.password, secret);  // one trailing newline dropped, as for the config's
  EXPECT_TRUE(c.mysql.password_env.empty());
}

TEST(Credentials, OverridesAPasswordEnvToo) {
  temp_dir d;
  const auto file = d.write("pw", "pw-from-file");
  ::unsetenv("SLOTTED_TEST_UNSET_PASSWORD");
  const auto c = parse_config("mysql: {user: counterd, password_env: SLOTTED_TEST_UNSET_PASSWORD}\n",
                              "c.yaml", {.user = std::nullopt, .password_file = file});
  EXPECT_EQ(c.mysql.user, "counterd");  // a password file alone: the config's user
  EXPECT_EQ(c.mysql.password, "pw-from-file");
  EXPECT_TRUE(c.mysql.password_env.empty());
}

TEST(Credentials, UserAloneConnectsWithoutTheConfigUsersPassword) {
  // e.g. root over the unix socket with unix_socket authentication.
  const auto c = parse_config(service_yaml, "c.yaml", {.user = "root", .password_file = std::nullopt});
  EXPECT_EQ(c.mysql.user, "root");
  EXPECT_TRUE(c.mysql.password.empty());
  EXPECT_TRUE(c.mysql.password_file.empty());
}

TEST(Credentials, UnreadablePasswordFileNamesTheFlagAndTheFile) {
  temp_dir d;
  const auto p = problems_of(service_yaml, {.user = "admin", .password_file = d.path + "/none"});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "--mysql-password-file: cannot read '" + d.path +
                      "/none': No such file or directory");
  const auto dir = problems_of(service_yaml, {.user = std::nullopt, .password_file = d.path});
  ASSERT_EQ(dir.size(), 1u);
  EXPECT_EQ(dir[0], "--mysql-password-file: cannot read '" + d.path + "': not a regular file");
}

TEST(Credentials, EmptyUserOrPathIsAnError) {
  const auto p = problems_of(service_yaml, {.user = "", .password_file = ""});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0], "--mysql-user: empty user name");
  EXPECT_EQ(p[1], "--mysql-password-file: empty path");
}

TEST(Credentials, ThePasswordIsInNoProblemNorReloadMessage) {
  temp_dir d;
  const auto file = d.write("pw", secret);
  // A config with other errors: the password was read, and is in none of them.
  const auto p = problems_of(service_yaml + "flush: {slots: 0}\nno_such_key: 1\n",
                             {.user = "admin", .password_file = file});
  ASSERT_EQ(p.size(), 2u);
  for (const auto& msg : p) EXPECT_EQ(msg.find(secret), std::string::npos) << msg;
  // A changed password between start and reload: reported by its source, not shown.
  const mysql_credentials over{.user = "admin", .password_file = file};
  const auto running = parse_config(service_yaml, "c.yaml", over);
  d.write("pw", std::string(secret) + "-rotated");
  const auto next = parse_config(service_yaml, "c.yaml", over);
  const auto plan = plan_reload(running, next);
  ASSERT_EQ(plan.needs_restart, std::vector<std::string>{"mysql.password_file"});
  for (const auto& k : plan.needs_restart) EXPECT_EQ(k.find(secret), std::string::npos);
}

TEST(Credentials, TheSameFlagsGiveTheSameConfigOnReload) {
  // What reload() does: load again with the flags the start had. Nothing changed.
  temp_dir d;
  const auto file = d.write("pw", secret);
  const auto path = d.write("c.yaml", service_yaml);
  const mysql_credentials over{.user = "admin", .password_file = file};
  const auto plan = plan_reload(load_config(path, over), load_config(path, over));
  EXPECT_TRUE(plan.live.empty());
  EXPECT_TRUE(plan.needs_restart.empty());
}

}  // namespace
}  // namespace slotted::config
