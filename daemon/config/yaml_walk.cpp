#include "config/yaml_walk.hpp"

#include <set>

namespace slotted::config {

void walk_mapping(const YAML::Node& node, const std::string& path, const key_handlers& handlers,
                  const yaml_fail& fail, null_mapping on_null) {
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
