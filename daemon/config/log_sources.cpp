#include <fnmatch.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <map>
#include <set>
#include <span>

#include "config/duration.hpp"
#include "config/log_sources_parse.hpp"
#include "config/yaml_walk.hpp"

namespace slotted::config {
namespace {

class walker {
 public:
  explicit walker(const log_sources_fail& fail) : fail_(fail) {}

  void fail(const YAML::Node& at, const std::string& key, const std::string& msg) const {
    fail_(at, key, msg);
  }

  // Calls the handler of each known key; unknown keys and duplicates are problems.
  void mapping(const YAML::Node& node, const std::string& path,
               const key_handlers& handlers) const {
    walk_mapping(node, path, handlers, fail_, null_mapping::problem);
  }

  bool text(const YAML::Node& v, const std::string& path, std::string& out) const {
    if (!v.IsScalar() || v.Scalar().empty()) {
      fail(v, path, "expected a non-empty value");
      return false;
    }
    out = v.Scalar();
    return true;
  }

 private:
  const log_sources_fail& fail_;
};

bool is_method(const std::string& m) {
  return !m.empty() && m.size() <= 32 &&
         std::all_of(m.begin(), m.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
}

void parse_methods(const walker& w, const YAML::Node& v, const std::string& p,
                   std::vector<std::string>& out) {
  if (!v.IsSequence() || v.size() == 0) {
    w.fail(v, p, "expected a non-empty list of methods, e.g. [GET]");
    return;
  }
  std::vector<std::string> found;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string ip = p + "[" + std::to_string(i) + "]";
    std::string m;
    if (!w.text(v[i], ip, m)) continue;
    if (!is_method(m)) {
      w.fail(v[i], ip, "'" + m + "' is not a method (upper-case letters, e.g. GET)");
      continue;
    }
    found.push_back(m);
  }
  out = std::move(found);
}

void parse_statuses(const walker& w, const YAML::Node& v, const std::string& p,
                    std::vector<unsigned>& out) {
  if (!v.IsSequence() || v.size() == 0) {
    w.fail(v, p, "expected a non-empty list of statuses, e.g. [200]");
    return;
  }
  std::vector<unsigned> found;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string ip = p + "[" + std::to_string(i) + "]";
    std::string s;
    if (!w.text(v[i], ip, s)) continue;
    unsigned status = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), status);
    if (r.ec != std::errc() || r.ptr != s.data() + s.size() || status < 100 || status > 599) {
      w.fail(v[i], ip, "expected an HTTP status in [100, 599], got '" + s + "'");
      continue;
    }
    found.push_back(status);
  }
  out = std::move(found);
}

// The pattern compiles with RE2 and, with `group`, has a capture group (the record_id).
void check_pattern(const walker& w, const YAML::Node& at, const std::string& p,
                   const std::string& pattern, bool group) {
  if (pattern.size() > 1000) {
    w.fail(at, p, "the pattern is longer than 1000 characters");
    return;
  }
  if (const auto c = compile_pattern(pattern, group); !c.re)
    w.fail(at, p, "'" + pattern + "' " + c.error);
}

void parse_rules(const walker& w, const YAML::Node& v, const std::string& p,
                 const std::vector<counter_decl>& counters, std::vector<log_rule>& out) {
  if (!v.IsSequence() || v.size() == 0) {
    w.fail(v, p,
           "expected a non-empty list of rules {counter, path[, methods][, statuses][, "
           "user_agent][, not_user_agent]}");
    return;
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    const YAML::Node item = v[i];
    const std::string ip = p + "[" + std::to_string(i) + "]";
    log_rule r;
    bool has_counter = false, has_path = false;
    w.mapping(item, ip,
              {
                  {"counter",
                   [&](auto& a, auto& ap) {
                     if (!w.text(a, ap, r.counter)) return;
                     has_counter = true;
                     const bool declared =
                         std::any_of(counters.begin(), counters.end(),
                                     [&](const counter_decl& c) { return c.name == r.counter; });
                     if (!declared) {
                       w.fail(a, ap,
                              "'" + r.counter + "' is not a declared counter (counters[].name)");
                     }
                   }},
                  {"path",
                   [&](auto& a, auto& ap) {
                     if (!w.text(a, ap, r.path)) return;
                     has_path = true;
                     check_pattern(w, a, ap, r.path, true);
                   }},
                  {"user_agent",
                   [&](auto& a, auto& ap) {
                     if (w.text(a, ap, r.user_agent)) check_pattern(w, a, ap, r.user_agent, false);
                   }},
                  {"not_user_agent",
                   [&](auto& a, auto& ap) {
                     if (w.text(a, ap, r.not_user_agent))
                       check_pattern(w, a, ap, r.not_user_agent, false);
                   }},
                  {"methods", [&](auto& a, auto& ap) { parse_methods(w, a, ap, r.methods); }},
                  {"statuses", [&](auto& a, auto& ap) { parse_statuses(w, a, ap, r.statuses); }},
              });
    if (!item.IsMap()) continue;
    if (!has_counter) w.fail(item, ip + ".counter", "missing");
    if (!has_path) w.fail(item, ip + ".path", "missing");
    out.push_back(std::move(r));
  }
}

void parse_json_fields(const walker& w, const YAML::Node& v, const std::string& p,
                       log_json_fields& f) {
  const auto field = [&w](std::string& out) {
    return [&w, &out](const YAML::Node& a, const std::string& ap) { w.text(a, ap, out); };
  };
  w.mapping(v, p,
            {
                {"time", field(f.time)},
                {"method", field(f.method)},
                {"path", field(f.path)},
                {"status", field(f.status)},
                {"client", field(f.client)},
                {"user_agent", field(f.user_agent)},
            });
}

// rotation: numbered | dateext | an absolute glob of the rotated files' names.
void parse_rotation(const walker& w, const YAML::Node& v, const std::string& p, log_source& s) {
  std::string r;
  if (!w.text(v, p, r)) return;
  if (r == "numbered") {
    s.rotation = rotation_scheme::numbered;
  } else if (r == "dateext") {
    s.rotation = rotation_scheme::dateext;
  } else if (r.front() == '/' && r.find_first_of("*?[") != std::string::npos && r.size() <= 1024) {
    s.rotation = rotation_scheme::glob;
    s.rotated_glob = r;
  } else {
    w.fail(v, p,
           "expected numbered, dateext or an absolute glob of the rotated files (e.g. "
           "/var/log/nginx/old/access.log.*), got '" +
               r + "'");
  }
}

// Names that stand for the files `s` holds: its PATH and what its scheme names after a
// rotation (a glob's own text stands for the files it names).
std::vector<std::string> sample_names(const log_source& s) {
  std::vector<std::string> names{s.path};
  switch (s.rotation) {
    case rotation_scheme::numbered:
      names.insert(names.end(), {s.path + ".1", s.path + ".2.gz"});
      break;
    case rotation_scheme::dateext:
      names.insert(names.end(), {s.path + "-20261201", s.path + "-20261201.gz"});
      break;
    case rotation_scheme::glob:
      names.push_back(s.rotated_glob);
      break;
  }
  return names;
}

// A source whose rotation glob also names another source's files would take them in as
// rotated files of its own and count their lines a second time (or wait for ever behind a
// PATH that keeps growing). Two globs can overlap in ways no check decides; this refuses
// the cases a config shows: a glob that matches another source's PATH or one of its
// rotated names, or the other's glob text itself (the same directory with '*').
std::string glob_takes_in_another(const log_source& s, std::span<const log_source> others) {
  if (s.rotation != rotation_scheme::glob) return "";
  for (const auto& o : others) {
    if (o.path == s.path) continue;
    for (const auto& name : sample_names(o)) {
      if (::fnmatch(s.rotated_glob.c_str(), name.c_str(), FNM_PATHNAME) == 0)
        return "the glob '" + s.rotated_glob + "' also names '" + name +
               "', a file of the source '" + o.path +
               "': its lines would be counted twice; give each source a glob of its own files";
    }
  }
  return "";
}

void parse_rotate_wait(const walker& w, const YAML::Node& v, const std::string& p, log_source& s) {
  std::string t;
  if (!w.text(v, p, t)) return;
  const auto d = parse_duration(t);
  if (!d || *d > std::chrono::hours(1)) {
    w.fail(v, p, "expected a duration from 0s to 1h (e.g. 5s), got '" + t + "'");
    return;
  }
  s.rotate_wait = *d;
}

}  // namespace

void parse_log_sources(const YAML::Node& v, const std::string& p,
                       const std::vector<counter_decl>& counters, const log_sources_fail& fail,
                       std::vector<log_source>& out) {
  if (v.IsNull()) return;
  const walker w(fail);
  if (!v.IsSequence()) {
    w.fail(v, p, "expected a list of sources {path, format, rules}");
    return;
  }
  std::set<std::string> paths;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const YAML::Node item = v[i];
    const std::string ip = p + "[" + std::to_string(i) + "]";
    log_source s;
    bool has_path = false, has_rules = false, has_json = false;
    w.mapping(item, ip,
              {
                  {"path",
                   [&](auto& a, auto& ap) {
                     if (!w.text(a, ap, s.path)) return;
                     has_path = true;
                     const std::filesystem::path fp(s.path);
                     if (!fp.is_absolute() || !fp.has_filename()) {
                       w.fail(a, ap, "expected an absolute path of a file, got '" + s.path + "'");
                       return;
                     }
                     s.path = fp.lexically_normal().string();
                     // The key of its positions row (VARBINARY(512)).
                     if (s.path.size() > 512) w.fail(a, ap, "longer than 512 bytes");
                     if (!paths.insert(s.path).second)
                       w.fail(a, ap, "'" + s.path + "' is listed twice");
                   }},
                  {"format",
                   [&](auto& a, auto& ap) {
                     std::string f;
                     if (!w.text(a, ap, f)) return;
                     if (f == "combined")
                       s.format = log_format::combined;
                     else if (f == "json")
                       s.format = log_format::json;
                     else
                       w.fail(a, ap, "expected one of combined | json, got '" + f + "'");
                   }},
                  {"rotation", [&](auto& a, auto& ap) { parse_rotation(w, a, ap, s); }},
                  {"rotate_wait", [&](auto& a, auto& ap) { parse_rotate_wait(w, a, ap, s); }},
                  {"json",
                   [&](auto& a, auto& ap) {
                     has_json = true;
                     parse_json_fields(w, a, ap, s.json);
                   }},
                  {"rules",
                   [&](auto& a, auto& ap) {
                     has_rules = true;
                     parse_rules(w, a, ap, counters, s.rules);
                   }},
              });
    if (!item.IsMap()) continue;
    if (!has_path) w.fail(item, ip + ".path", "missing");
    if (!has_rules) w.fail(item, ip + ".rules", "missing");
    if (has_json && s.format != log_format::json)
      w.fail(item, ip + ".json", "only with format: json");
    if (item.IsMap() && item["rotation"]) {
      if (const auto other = glob_takes_in_another(s, out); !other.empty())
        w.fail(item["rotation"], ip + ".rotation", other);
    }
    for (const auto& earlier :
         has_path ? std::span<const log_source>(out) : std::span<const log_source>{}) {
      if (const auto other = glob_takes_in_another(earlier, {&s, 1}); !other.empty())
        w.fail(item["path"], ip + ".path", other);
    }
    out.push_back(std::move(s));
  }
}

}  // namespace slotted::config
