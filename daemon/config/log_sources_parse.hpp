#pragma once
// Parsing and validating log_sources (config/log_sources.hpp); called once by
// parse_config, after the counters are known.

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace slotted::config {

// Records a problem of the key `key` at the node `at` (its line).
using log_sources_fail =
    std::function<void(const YAML::Node& at, const std::string& key, const std::string& message)>;

// Parses `v` (the value of `log_sources`, at key path `p`) into `out`: a list of
// {path, format, json, rules}. Problems (an unknown or duplicate key, a relative or
// duplicate path, a format other than combined or json, a rule naming a counter not in
// `counters`, a path pattern that does not compile or has no capture group, a method
// or status out of range) go to `fail`, each naming its key.
void parse_log_sources(const YAML::Node& v, const std::string& p,
                       const std::vector<counter_decl>& counters, const log_sources_fail& fail,
                       std::vector<log_source>& out);

}  // namespace slotted::config
