#pragma once
// What a config's parse reports: its problems (config_error::problems()), none when it
// parses; for the unit tests of the config keys.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config.hpp"

namespace slotted::test {

inline std::vector<std::string> problems_of(const std::string& yaml,
                                            const config::mysql_credentials& over = {}) {
  try {
    config::parse_config(yaml, "test.yaml", over);
  } catch (const config::config_error& e) {
    return e.problems();
  }
  return {};
}

// The one problem `yaml` has (a test failure when it has none or several).
inline std::string only_problem(const std::string& yaml) {
  const auto p = problems_of(yaml);
  EXPECT_EQ(p.size(), 1u) << (p.empty() ? "no problem reported" : p[0]);
  return p.empty() ? "" : p[0];
}

}  // namespace slotted::test
