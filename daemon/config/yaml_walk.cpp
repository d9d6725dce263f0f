#include "config/yaml_walk.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "config/config_keys.hpp"

namespace slotted::config {
namespace {

// "counters[3].rollup" -> "counters[].rollup": the key path as the key table names it.
std::string without_indexes(const std::string& path) {
  std::string out;
  bool in_index = false;
  for (char ch : path) {
    if (ch == ']') in_index = false;
    if (!in_index) out += ch;
    if (ch == '[') in_index = true;
  }
  return out;
}

// Every key the parser accepts has a row in the key table (or is a section of keys
// that have): a handler without one is a programming error, found by any parse that
// walks its mapping (config_test's every-section config walks them all).
void check_rows(const std::string& path, const key_handlers& handlers) {
  const std::string prefix = path.empty() ? "" : without_indexes(path) + ".";
  for (const auto& [key, handler] : handlers) {
    const std::string full = prefix + key;
    const bool section =
        std::any_of(config_keys().begin(), config_keys().end(),
                    [&](const key_row& r) { return r.key.starts_with(full + "."); });
    if (find_key(full) == nullptr && !section)
      throw std::logic_error("config key without a row in the key table: " + full);
  }
}

}  // namespace

void walk_mapping(const YAML::Node& node, const std::string& path, const key_handlers& handlers,
                  const yaml_fail& fail, null_mapping on_null) {
  check_rows(path, handlers);
  if (node.IsNull() && on_null == null_mapping::empty) return;
  if (!node.IsMap()) {
    fail(node, path.empty() ? "(top level)" : path, "expected a mapping");
    return;
  }
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    // Copies: the iterator hands out a temporary pair.
    const YAML::Node key_node = it->first;
    const YAML::Node value = it->second;
    const std::string key = key_node.IsScalar() ? key_node.Scalar() : std::string("?");
    const std::string full = path.empty() ? key : path + "." + key;
    if (!seen.insert(key).second) {
      fail(key_node, full, "duplicate key");
      continue;
    }
    const auto h = handlers.find(key);
    if (h == handlers.end()) {
      fail(key_node, full, "unknown key");
      continue;
    }
    h->second(value, full);
  }
}

}  // namespace slotted::config
