#pragma once
// The one walk over a YAML mapping of named keys, shared by every config section
// (config.cpp) and by log_sources (log_sources.cpp): each known key's handler is called
// in the order of the text; an unknown key and a key given twice are problems, each
// reported at its line.

#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <string>

namespace slotted::config {

// Records a problem of the key `key` at the node `at` (its line).
using yaml_fail =
    std::function<void(const YAML::Node& at, const std::string& key, const std::string& message)>;

using key_handler = std::function<void(const YAML::Node& value, const std::string& path)>;
using key_handlers = std::map<std::string, key_handler>;

// What a null (empty) value where a mapping belongs is: an empty mapping (a config
// section left empty), or a problem ("expected a mapping").
enum class null_mapping { empty, problem };

// Walks `node`, the value at key path `path` ("" for the top level, named
// "(top level)" in a message); a key's own path is `path.key` (or `key` at the top).
void walk_mapping(const YAML::Node& node, const std::string& path, const key_handlers& handlers,
                  const yaml_fail& fail, null_mapping on_null);

}  // namespace slotted::config
