// Prints the config's key table (daemon/config/config_keys.cpp), one key a line, tab
// separated: key, type, default, reload (live, restart or refused; a key parsed as part
// of another, counters[].name say, has that key's), integer bounds ("lo-hi" or empty).
// tests/docs/man_test.py compares docs/configuration.md's key table with it.

#include <iostream>
#include <string>

#include "config/config_keys.hpp"

int main() {
  using namespace slotted::config;
  for (const auto& row : config_keys()) {
    const key_row* whole = find_key(plan_name(row));
    const reload_kind reload = whole != nullptr ? whole->reload : row.reload;
    const char* said = reload == reload_kind::live      ? "live"
                       : reload == reload_kind::restart ? "restart"
                                                        : "refused";
    std::string bounds;
    if (row.type == "integer" && row.parse != nullptr)
      bounds = std::to_string(row.lo) + "-" + std::to_string(row.hi);
    std::cout << row.key << '\t' << row.type << '\t' << row.default_value << '\t' << said << '\t'
              << bounds << '\n';
  }
  return 0;
}
