// The installed conffile (config/slotted-counterd.yaml): every value it shows is the
// built-in default, except those its comment marks "example"; and it names no table
// but the daemon's own, so that it starts on a fresh database after --migrate.

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "config/config.hpp"

namespace slotted::config {
namespace {

const std::string shipped = std::string(SLOTTED_SOURCE_DIR) + "/config/slotted-counterd.yaml";

std::string shipped_text() {
  std::ifstream in(shipped);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ShippedConfig, EveryValueShownIsTheDefaultOrMarkedExample) {
  const auto defaults = parse_config("", "defaults");
  auto c = load_config(shipped);

  // The values marked "example": the one counter, declared without a rollup or buckets.
  ASSERT_EQ(c.counters.size(), 1u);
  EXPECT_EQ(c.counters[0].name, "repo_downloads");
  EXPECT_EQ(c.counters[0].record_type, 123u);
  EXPECT_FALSE(c.counters[0].rollup) << "a rollup names a table a fresh database lacks";
  EXPECT_TRUE(c.counters[0].buckets.empty());
  // Each line that declares it says so.
  std::istringstream lines(shipped_text());
  std::string line;
  int example_lines = 0;
  const std::regex uncommented_counter_line(R"(^\s*(- name|record_type):)");
  while (std::getline(lines, line)) {
    if (!std::regex_search(line, uncommented_counter_line)) continue;
    ++example_lines;
    EXPECT_NE(line.find("# example"), std::string::npos) << "not marked example: " << line;
  }
  EXPECT_EQ(example_lines, 2);
  c.counters = defaults.counters;

  // Everything else: plan_reload compares every key of the config.
  const auto diff = plan_reload(defaults, c);
  EXPECT_EQ(diff.live, std::vector<std::string>{});
  EXPECT_EQ(diff.needs_restart, std::vector<std::string>{});
  // ... but for the resolved secrets and the instance_id (the hostname on both sides).
  EXPECT_EQ(c.mysql.password_file, "");
  EXPECT_EQ(c.http.auth_token_file, "");
  EXPECT_EQ(c.instance_id, defaults.instance_id);
}

}  // namespace
}  // namespace slotted::config
