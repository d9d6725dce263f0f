#pragma once
// Inside the config parser (config.cpp, config_keys.cpp, mysql_parse.cpp,
// counters_parse.cpp, secrets.cpp): the checker that records every problem with its
// line, and the parse and check functions of the structured keys.

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "config/yaml_walk.hpp"
#include "model/result.hpp"

namespace slotted::config::detail {

// Walks the YAML tree, recording every problem with its line instead of stopping at
// the first one, so --check-config can list them all.
class checker {
 public:
  explicit checker(std::string origin) : origin_(std::move(origin)) {}

  void fail(const YAML::Node& at, const std::string& key, const std::string& msg) {
    add_problem(at.IsDefined() && at.Mark().line >= 0 ? at.Mark().line + 1 : 0, key, msg);
  }
  void fail_plain(const std::string& key, const std::string& msg) {
    const auto line = lines_.find(key);
    add_problem(line == lines_.end() ? 0 : line->second, key, msg);
  }
  // A problem of the command line rather than of the config text.
  void fail_flag(std::string msg) { problems_.push_back(std::move(msg)); }
  // Remembers where a key stood, for problems found after the walk (secret files).
  void remember_line(const std::string& key, const YAML::Node& at) {
    if (at.IsDefined() && at.Mark().line >= 0) lines_[key] = at.Mark().line + 1;
  }

  using handler = key_handler;

  // Calls the handler of each known key; unknown keys and duplicates are problems.
  void mapping(const YAML::Node& node, const std::string& path, const key_handlers& handlers) {
    walk_mapping(
        node, path, handlers,
        [this](const YAML::Node& at, const std::string& key, const std::string& msg) {
          fail(at, key, msg);
        },
        null_mapping::empty);
  }

  // A list (true), or nothing (null) or a problem "EXPECTED" (false).
  bool list(const YAML::Node& v, const std::string& path, const char* expected) {
    if (v.IsNull()) return false;
    if (!v.IsSequence()) {
      fail(v, path, expected);
      return false;
    }
    return true;
  }

  bool scalar(const YAML::Node& v, const std::string& path, std::string& out) {
    if (v.IsNull()) {
      out.clear();
      return true;
    }
    if (!v.IsScalar()) {
      fail(v, path, "expected a single value");
      return false;
    }
    out = v.Scalar();
    return true;
  }

  // A quoted scalar is a string in YAML: "8080" is not a number here.
  bool unquoted(const YAML::Node& v, const std::string& path, const char* what) {
    if (v.IsScalar() && v.Tag() == "!") {
      fail(v, path,
           std::string("expected ") + what + ", got the quoted string '" + v.Scalar() + "'");
      return false;
    }
    return true;
  }

  template <typename Int>
  void integer(const YAML::Node& v, const std::string& path, Int lo, Int hi, Int& out) {
    std::string text;
    if (!unquoted(v, path, "an integer") || !scalar(v, path, text)) return;
    unsigned long long value = 0;
    const char* end = text.data() + text.size();
    const auto r = std::from_chars(text.data(), end, value);
    if (text.empty() || r.ec != std::errc() || r.ptr != end ||
        value < static_cast<unsigned long long>(lo) ||
        value > static_cast<unsigned long long>(hi)) {
      fail(v, path,
           "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
               "], got '" + text + "'");
      return;
    }
    out = static_cast<Int>(value);
  }

  void boolean(const YAML::Node& v, const std::string& path, bool& out) {
    std::string text;
    if (!unquoted(v, path, "true or false") || !scalar(v, path, text)) return;
    if (text == "true")
      out = true;
    else if (text == "false")
      out = false;
    else
      fail(v, path, "expected true or false, got '" + text + "'");
  }

  void string(const YAML::Node& v, const std::string& path, std::string& out) {
    std::string text;
    if (scalar(v, path, text)) out = std::move(text);
  }

  void identifier(const YAML::Node& v, const std::string& path, std::string& out) {
    std::string text;
    if (!scalar(v, path, text)) return;
    if (!is_valid_identifier(text)) {
      fail(v, path, "'" + text + "' is not a valid identifier (^[A-Za-z_][A-Za-z0-9_]{0,63}$)");
      return;
    }
    out = std::move(text);
  }

  void time_span(const YAML::Node& v, const std::string& path, duration lo, duration hi,
                 duration& out) {
    std::string text;
    if (!scalar(v, path, text)) return;
    const auto d = parse_duration(text);
    if (!d) {
      fail(v, path, "expected a duration like 250ms, 1s, 5m or 1h, got '" + text + "'");
      return;
    }
    if (*d < lo || *d > hi) {
      fail(v, path,
           "expected a duration in [" + format_duration(lo) + ", " + format_duration(hi) +
               "], got '" + text + "'");
      return;
    }
    out = *d;
  }

  template <typename Enum>
  void choice(const YAML::Node& v, const std::string& path,
              const std::vector<std::pair<std::string, Enum>>& options, Enum& out) {
    std::string text;
    if (!scalar(v, path, text)) return;
    std::string names;
    for (const auto& [name, value] : options) {
      if (name == text) {
        out = value;
        return;
      }
      names += names.empty() ? name : " | " + name;
    }
    fail(v, path, "expected one of " + names + ", got '" + text + "'");
  }

  // A value parsed after the walk, once what it refers to is known (log_sources names
  // counters).
  void defer(const std::string& key, const YAML::Node& value) { deferred_[key] = value; }
  const std::map<std::string, YAML::Node>& deferred() const { return deferred_; }

  const std::vector<std::string>& problems() const { return problems_; }

 private:
  // "origin[:line]: key: msg" (line 0: none), built by appends: gcc 12 at -O2 takes a
  // chain of operator+ on a temporary for an overlapping copy (a false -Wrestrict).
  void add_problem(int line, const std::string& key, const std::string& msg) {
    std::string problem = origin_;
    if (line > 0) {
      problem += ':';
      problem += std::to_string(line);
    }
    problem += ": ";
    problem += key;
    problem += ": ";
    problem += msg;
    problems_.push_back(std::move(problem));
  }

  std::string origin_;
  std::vector<std::string> problems_;
  std::map<std::string, int> lines_;
  std::map<std::string, YAML::Node> deferred_;
};

// "host:port", "[v6]:port" or a bare host (port `default_port`); else
// errc::invalid_input saying why.
result<host_port> parse_host_port(const std::string& text,
                                  std::uint16_t default_port = mariadb_default_port);
// mysql.hosts (postgresql.hosts): a list of distinct "host:port".
void parse_mysql_hosts(checker& c, const YAML::Node& a, const std::string& ap,
                       std::vector<host_port>& hosts, std::uint16_t default_port);
// mysql.hosts and mysql.socket together (once the mysql section is walked).
void check_hosts_and_socket(const daemon_config& cfg, checker& c);
// mysql.tls: consistent modes and files, and the files readable now.
void check_tls(const daemon_config& cfg, checker& c);
// The flusher's connections against mysql.pool_size.
void check_flush_connections(const daemon_config& cfg, checker& c);
// metrics.listen must not be the API's own listen.address and listen.port: the second
// bind would fail at start.
void check_metrics_listen(const daemon_config& cfg, checker& c);
// mysql.table short enough for every table derived from it (config/table_names.cpp).
void check_table_name_length(const daemon_config& cfg, checker& c);
// counters: a list of {name, record_type[, rollup][, buckets]}.
void parse_counters(checker& c, const YAML::Node& v, const std::string& p,
                    std::vector<counter_decl>& counters);

// instance_id: 1 to 64 of [A-Za-z0-9._-]; its default, from the host name.
bool is_valid_instance_id(std::string_view s);
std::string default_instance_id();
// The environment variable that gives the default instance_id (a container's Pod name,
// from the downward API: docs/install.md).
inline constexpr char instance_id_env[] = "SLOTTED_COUNTERD_INSTANCE_ID";
inline constexpr char instance_id_expected[] = "1 to 64 characters from [A-Za-z0-9._-]";
// instance_id not in the file: $SLOTTED_COUNTERD_INSTANCE_ID when set and not empty,
// else default_instance_id(). A value that is no instance_id is a problem naming the
// variable, never replaced by the host name.
void resolve_instance_id(daemon_config& cfg, checker& c);

// The file's bytes, or its errno (or "not a regular file") as the failure.
result<std::string> read_whole_file(const std::string& path);
// Reads the password and the auth token. `password_file_from_flag`: mysql.password_file
// came from --mysql-password-file, and messages name that flag instead of a line.
void resolve_secrets(daemon_config& cfg, checker& c, bool password_file_from_flag);

}  // namespace slotted::config::detail
