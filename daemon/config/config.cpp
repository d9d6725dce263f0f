#include "config/config.hpp"

#include <arpa/inet.h>
#include <unistd.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "config/log_sources_parse.hpp"
#include "config/yaml_walk.hpp"
#include "model/increment.hpp"

namespace slotted::config {
namespace {

std::string join_problems(const std::vector<std::string>& problems) {
  std::string out;
  for (const auto& p : problems) {
    if (!out.empty()) out += '\n';
    out += p;
  }
  return out;
}

std::string trim(std::string s) {
  const auto not_space = [](unsigned char c) { return !std::isspace(c); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  return s;
}

bool read_whole_file(const std::string& path, std::string& out, std::string& why) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    why = "not a regular file";
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    why = std::strerror(errno);
    return false;
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) {
    why = "read error";
    return false;
  }
  out = buf.str();
  return true;
}

bool is_valid_instance_id(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string default_instance_id() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) return "slotted-counterd";
  std::string id;
  for (char c : std::string_view(host)) {
    if (id.size() == 64) break;
    id.push_back(is_valid_instance_id(std::string_view(&c, 1)) ? c : '_');
  }
  return id.empty() ? "slotted-counterd" : id;
}

// Walks the YAML tree, recording every problem with its line instead of stopping at
// the first one, so --check-config can list them all.
class checker {
 public:
  explicit checker(std::string origin) : origin_(std::move(origin)) {}

  void fail(const YAML::Node& at, const std::string& key, const std::string& msg) {
    std::string where = origin_;
    if (at.IsDefined() && at.Mark().line >= 0) where += ":" + std::to_string(at.Mark().line + 1);
    problems_.push_back(where + ": " + key + ": " + msg);
  }
  void fail_plain(const std::string& key, const std::string& msg) {
    const auto line = lines_.find(key);
    problems_.push_back(origin_ + (line == lines_.end() ? "" : ":" + std::to_string(line->second)) +
                        ": " + key + ": " + msg);
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

  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::string origin_;
  std::vector<std::string> problems_;
  std::map<std::string, int> lines_;
};

using namespace std::chrono_literals;

// "host:port", "[v6]:port" or a bare host (port 3306).
std::optional<host_port> parse_host_port(const std::string& text, std::string& why) {
  host_port out;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos) {
      why = "unterminated [";
      return std::nullopt;
    }
    out.host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') {
        why = "expected ':' after ']'";
        return std::nullopt;
      }
      port = text.substr(close + 2);
      if (port.empty()) {
        why = "empty port";
        return std::nullopt;
      }
    }
  } else {
    const auto colon = text.rfind(':');
    if (colon != std::string::npos && text.find(':') != colon) {
      why = "an IPv6 address needs brackets: [addr]:port";
      return std::nullopt;
    }
    out.host = text.substr(0, colon);
    if (colon != std::string::npos) {
      port = text.substr(colon + 1);
      if (port.empty()) {
        why = "empty port";
        return std::nullopt;
      }
    }
  }
  if (out.host.empty()) {
    why = "empty host";
    return std::nullopt;
  }
  for (char c : out.host) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '/' || c == '@') {
      why = "not a host name or address";
      return std::nullopt;
    }
  }
  if (!port.empty()) {
    unsigned value = 0;
    const auto r = std::from_chars(port.data(), port.data() + port.size(), value);
    if (r.ec != std::errc() || r.ptr != port.data() + port.size() || value < 1 || value > 65535) {
      why = "port must be an integer in [1, 65535]";
      return std::nullopt;
    }
    out.port = static_cast<std::uint16_t>(value);
  }
  return out;
}

// mysql.tls: consistent modes and files, and the files readable now (the client reads
// them at each connect, so an operator may replace them while the daemon runs).
void check_tls(daemon_config& cfg, checker& c) {
  const auto& m = cfg.mysql;
  const auto& t = m.tls;
  const bool verify = t.mode == tls_mode::verify_ca || t.mode == tls_mode::verify_identity;
  const bool required = t.mode != tls_mode::disabled && t.mode != tls_mode::preferred;
  if (verify && t.ca_file.empty())
    c.fail_plain("mysql.tls.ca_file", "required for mode verify_ca and verify_identity");
  if (t.cert_file.empty() != t.key_file.empty())
    c.fail_plain(t.cert_file.empty() ? "mysql.tls.cert_file" : "mysql.tls.key_file",
                 "set cert_file and key_file together");
  if (required && !m.socket.empty())
    c.fail_plain("mysql.tls.mode",
                 "TLS applies to TCP connections and mysql.socket is set: use host or hosts, or "
                 "mode preferred");
  const std::pair<const char*, const std::string*> files[] = {{"mysql.tls.ca_file", &t.ca_file},
                                                              {"mysql.tls.cert_file", &t.cert_file},
                                                              {"mysql.tls.key_file", &t.key_file}};
  for (const auto& [key, path] : files) {
    if (path->empty()) continue;
    std::string content, why;
    if (!read_whole_file(*path, content, why))
      c.fail_plain(key, "cannot read '" + *path + "': " + why);
  }
}

// `password_file_from_flag`: mysql.password_file came from --mysql-password-file, and
// messages name that flag instead of a line of the config.
void resolve_secrets(daemon_config& cfg, checker& c, bool password_file_from_flag) {
  auto& m = cfg.mysql;
  if (!m.password_file.empty() && !m.password_env.empty()) {
    c.fail_plain("mysql.password_file", "set password_file or password_env, not both");
  } else if (!m.password_file.empty()) {
    std::string content, why;
    if (!read_whole_file(m.password_file, content, why)) {
      const std::string msg = "cannot read '" + m.password_file + "': " + why;
      if (password_file_from_flag) {
        c.fail_flag("--mysql-password-file: " + msg);
      } else {
        c.fail_plain("mysql.password_file", msg);
      }
    } else {
      // One trailing newline is an artefact of editors, not part of the password.
      if (!content.empty() && content.back() == '\n') content.pop_back();
      if (!content.empty() && content.back() == '\r') content.pop_back();
      m.password = std::move(content);
    }
  } else if (!m.password_env.empty()) {
    const char* value = std::getenv(m.password_env.c_str());
    if (value == nullptr) {
      c.fail_plain("mysql.password_env",
                   "environment variable '" + m.password_env + "' is not set");
    } else {
      m.password = value;
    }
  }

  auto& h = cfg.http;
  if (!h.auth_token_file.empty()) {
    std::string content, why;
    if (!read_whole_file(h.auth_token_file, content, why)) {
      c.fail_plain("http.auth_token_file", "cannot read '" + h.auth_token_file + "': " + why);
    } else {
      h.auth_token = trim(std::move(content));
      if (h.auth_token.empty()) c.fail_plain("http.auth_token_file", "the token file is empty");
    }
  }
}

}  // namespace

config_error::config_error(std::vector<std::string> problems)
    : std::runtime_error(join_problems(problems)), problems_(std::move(problems)) {}

bool is_valid_identifier(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  const auto head = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  };
  if (!head(name[0])) return false;
  for (char c : name.substr(1)) {
    if (!head(c) && !(c >= '0' && c <= '9')) return false;
  }
  return true;
}

namespace {

// Where each document of a YAML stream starts, for at most `max` documents.
// yaml-cpp 0.7's LoadAll() never returns on some malformed input (a stray ',' yields
// empty documents forever, none consuming anything, each one allocated; upstream
// jbeder/yaml-cpp#1040, found by tests/fuzz/config_fuzz), so documents are counted here
// with a bound, and one starting where the previous one started means no progress.
std::vector<YAML::Mark> document_starts(const std::string& yaml_text, std::size_t max) {
  struct starts : YAML::EventHandler {
    std::vector<YAML::Mark> marks;
    void OnDocumentStart(const YAML::Mark& m) override { marks.push_back(m); }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                    YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
  } handler;
  std::istringstream in(yaml_text);
  YAML::Parser parser(in);
  while (handler.marks.size() < max && parser.HandleNextDocument(handler)) {
  }
  return handler.marks;
}

// One function per config section. Each records its problems in the checker and
// stores what is valid in cfg; none stops at the first problem.

void parse_instance_id(checker& c, const YAML::Node& v, const std::string& p, daemon_config& cfg) {
  std::string id;
  c.string(v, p, id);
  if (!is_valid_instance_id(id)) {
    c.fail(v, p, "expected 1 to 64 characters from [A-Za-z0-9._-], got '" + id + "'");
  } else {
    cfg.instance_id = id;
  }
}

void parse_listen(checker& c, const YAML::Node& v, const std::string& p, daemon_config& cfg) {
  c.mapping(v, p,
            {
                {"address",
                 [&](const YAML::Node& a, const std::string& ap) {
                   std::string addr;
                   c.string(a, ap, addr);
                   unsigned char buf[sizeof(in6_addr)];
                   if (inet_pton(AF_INET, addr.c_str(), buf) != 1 &&
                       inet_pton(AF_INET6, addr.c_str(), buf) != 1) {
                     c.fail(a, ap, "expected an IPv4 or IPv6 address, got '" + addr + "'");
                   } else {
                     cfg.listen_address = addr;
                   }
                 }},
                {"port",
                 [&](const YAML::Node& a, const std::string& ap) {
                   c.integer<std::uint16_t>(a, ap, 0, 65535, cfg.listen_port);
                 }},
                {"unix_socket",
                 [&](const YAML::Node& a, const std::string& ap) {
                   std::string path;
                   c.string(a, ap, path);
                   if (!a.IsScalar()) return;  // reported by string()
                   if (path.empty() || path.front() != '/' || path.size() > 107) {
                     c.fail(a, ap,
                            "expected an absolute path of at most 107 bytes, got '" + path + "'");
                   } else {
                     cfg.listen_unix_socket = path;
                   }
                 }},
                {"unix_socket_mode",
                 [&](const YAML::Node& a, const std::string& ap) {
                   // Octal, as chmod takes it: 0660, or "0660" quoted.
                   std::string text;
                   c.string(a, ap, text);
                   if (!a.IsScalar()) return;  // reported by string()
                   unsigned mode = 0;
                   const auto r = std::from_chars(text.data(), text.data() + text.size(), mode, 8);
                   if (text.empty() || r.ec != std::errc() || r.ptr != text.data() + text.size() ||
                       mode > 0777) {
                     c.fail(a, ap, "expected an octal mode 0000..0777, got '" + text + "'");
                   } else {
                     cfg.listen_unix_socket_mode = mode;
                   }
                 }},
            });
}

void parse_http(checker& c, const YAML::Node& v, const std::string& p, http_config& h) {
  c.mapping(
      v, p,
      {
          {"threads", [&](auto& a, auto& ap) { c.integer<unsigned>(a, ap, 0, 256, h.threads); }},
          {"max_body_bytes",
           [&](auto& a, auto& ap) {
             c.integer<std::size_t>(a, ap, 64, 1ull << 30, h.max_body_bytes);
           }},
          {"max_items_per_request",
           [&](auto& a, auto& ap) {
             c.integer<std::size_t>(a, ap, 1, 10'000'000, h.max_items_per_request);
           }},
          {"idle_timeout",
           [&](auto& a, auto& ap) { c.time_span(a, ap, 100ms, 1h, h.idle_timeout); }},
          {"max_connections",
           [&](auto& a, auto& ap) {
             c.integer<std::size_t>(a, ap, 1, 10'000'000, h.max_connections);
           }},
          {"auth_token_file",
           [&](auto& a, auto& ap) {
             c.string(a, ap, h.auth_token_file);
             c.remember_line(ap, a);
           }},
      });
}

// mysql.hosts: a list of distinct "host:port".
void parse_mysql_hosts(checker& c, const YAML::Node& a, const std::string& ap,
                       std::vector<host_port>& hosts) {
  if (a.IsNull()) return;
  if (!a.IsSequence()) {
    c.fail(a, ap, "expected a list of \"host:port\"");
    return;
  }
  if (a.size() > 16) c.fail(a, ap, "at most 16 hosts");
  std::set<std::string> seen;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::string ip = ap + "[" + std::to_string(i) + "]";
    std::string text, why;
    if (!c.scalar(a[i], ip, text)) continue;
    const auto hp = parse_host_port(text, why);
    if (!hp) {
      c.fail(a[i], ip, "expected \"host:port\", got '" + text + "': " + why);
    } else if (!seen.insert(hp->host + ":" + std::to_string(hp->port)).second) {
      c.fail(a[i], ip, "'" + text + "' is listed twice");
    } else {
      hosts.push_back(*hp);
    }
  }
  c.remember_line("mysql.hosts", a);
}

// mysql.tls: the files are checked after the walk (check_tls), with the lines kept here.
void parse_mysql_tls(checker& c, const YAML::Node& a, const std::string& ap, tls_config& t) {
  const auto file = [&](std::string& out) {
    return [&c, &out](const YAML::Node& b, const std::string& bp) {
      c.string(b, bp, out);
      c.remember_line(bp, b);
    };
  };
  c.mapping(a, ap,
            {
                {"mode",
                 [&](auto& b, auto& bp) {
                   c.choice<tls_mode>(b, bp,
                                      {{"disabled", tls_mode::disabled},
                                       {"preferred", tls_mode::preferred},
                                       {"required", tls_mode::required},
                                       {"verify_ca", tls_mode::verify_ca},
                                       {"verify_identity", tls_mode::verify_identity}},
                                      t.mode);
                   c.remember_line(bp, b);
                 }},
                {"ca_file", file(t.ca_file)},
                {"cert_file", file(t.cert_file)},
                {"key_file", file(t.key_file)},
            });
}

void parse_mysql(checker& c, const YAML::Node& v, const std::string& p, mysql_config& m) {
  c.mapping(
      v, p,
      {
          {"host", [&](auto& a, auto& ap) { c.string(a, ap, m.host); }},
          {"port", [&](auto& a, auto& ap) { c.integer<std::uint16_t>(a, ap, 1, 65535, m.port); }},
          {"socket", [&](auto& a, auto& ap) { c.string(a, ap, m.socket); }},
          {"user", [&](auto& a, auto& ap) { c.string(a, ap, m.user); }},
          {"password",
           [&](auto& a, auto& ap) {
             c.fail(a, ap,
                    "passwords do not belong in the config file: use password_file or "
                    "password_env");
           }},
          {"password_file",
           [&](auto& a, auto& ap) {
             c.string(a, ap, m.password_file);
             c.remember_line(ap, a);
           }},
          {"password_env",
           [&](auto& a, auto& ap) {
             c.string(a, ap, m.password_env);
             c.remember_line(ap, a);
           }},
          {"database", [&](auto& a, auto& ap) { c.identifier(a, ap, m.database); }},
          {"table", [&](auto& a, auto& ap) { c.identifier(a, ap, m.table); }},
          {"connect_timeout",
           [&](auto& a, auto& ap) { c.time_span(a, ap, 100ms, 5min, m.connect_timeout); }},
          {"pool_size", [&](auto& a, auto& ap) { c.integer<unsigned>(a, ap, 1, 64, m.pool_size); }},
          {"hosts", [&](auto& a, auto& ap) { parse_mysql_hosts(c, a, ap, m.hosts); }},
          {"tls", [&](auto& a, auto& ap) { parse_mysql_tls(c, a, ap, m.tls); }},
      });
  if (!m.hosts.empty() && !m.socket.empty())
    c.fail_plain("mysql.hosts", "set hosts or socket, not both");
}

// counters[i].rollup: all three keys or none.
void parse_rollup_target(checker& c, const YAML::Node& a, const std::string& ap,
                         std::optional<rollup_target>& out) {
  rollup_target t;
  int present = 0;
  const auto column = [&](std::string& field) {
    return [&c, &field, &present](const YAML::Node& b, const std::string& bp) {
      c.identifier(b, bp, field);
      ++present;
    };
  };
  c.mapping(a, ap,
            {
                {"table", column(t.table)},
                {"id_column", column(t.id_column)},
                {"count_column", column(t.count_column)},
            });
  if (present != 3) c.fail(a, ap, "needs table, id_column and count_column");
  out = t;
}

// counters[i].buckets: {hour: RETENTION, day: RETENTION}, at least one of them.
void parse_buckets(checker& c, const YAML::Node& a, const std::string& ap,
                   std::vector<bucket_decl>& out) {
  if (!a.IsMap() || a.size() == 0) {
    c.fail(
        a, ap,
        "expected a mapping of granularity (hour, day) to retention, e.g. {hour: 48h, day: 400d}");
    return;
  }
  std::vector<bucket_decl> found;
  for (const auto& entry : a) {
    const std::string key = entry.first.as<std::string>("");
    const std::string kp = ap + "." + key;
    const auto g = store::granularity_named(key);
    if (!g) {
      c.fail(entry.first, kp, "unknown granularity '" + key + "'; expected hour or day");
      continue;
    }
    std::string text;
    if (entry.second.IsScalar()) text = entry.second.Scalar();
    const auto d = parse_duration(text);
    if (!d) {
      c.fail(entry.second, kp,
             "expected a retention like 48h or 400d (a positive duration), got '" + text + "'");
      continue;
    }
    // A bucket's row is written before it can be pruned, so a retention below a second
    // would only churn; 100 years is far past any use and far inside every range.
    if (*d < std::chrono::seconds(1) || *d > std::chrono::hours(24) * 36500) {
      c.fail(entry.second, kp, "retention must be between 1s and 36500d, got '" + text + "'");
      continue;
    }
    found.push_back({*g, *d});
  }
  std::sort(found.begin(), found.end(), [](const bucket_decl& x, const bucket_decl& y) {
    return x.granularity < y.granularity;
  });
  out = std::move(found);
}

// counters: a list of {name, record_type[, rollup][, buckets]}, names and types each
// unique.
void parse_counters(checker& c, const YAML::Node& v, const std::string& p,
                    std::vector<counter_decl>& counters) {
  if (v.IsNull()) return;
  if (!v.IsSequence()) {
    c.fail(v, p, "expected a list of counters");
    return;
  }
  std::set<std::string> names;
  std::set<std::uint32_t> types;
  // One owning column per counter: two counters rolled up into one column would each
  // adopt its history and overwrite each other's totals (docs/adopting.md).
  std::map<std::string, std::string> owning_columns;  // "table.column" -> counter name
  for (std::size_t i = 0; i < v.size(); ++i) {
    const YAML::Node item = v[i];
    const std::string ip = p + "[" + std::to_string(i) + "]";
    if (!item.IsMap()) {
      c.fail(item, ip, "expected a mapping with name and record_type");
      continue;
    }
    counter_decl d;
    bool has_name = false, has_type = false;
    c.mapping(item, ip,
              {
                  {"name",
                   [&](auto& a, auto& ap) {
                     c.identifier(a, ap, d.name);
                     has_name = true;
                   }},
                  {"record_type",
                   [&](auto& a, auto& ap) {
                     c.integer<std::uint32_t>(a, ap, 0, ingest::max_record_type, d.record_type);
                     has_type = true;
                   }},
                  {"rollup", [&](auto& a, auto& ap) { parse_rollup_target(c, a, ap, d.rollup); }},
                  {"buckets", [&](auto& a, auto& ap) { parse_buckets(c, a, ap, d.buckets); }},
              });
    if (!has_name) c.fail(item, ip + ".name", "missing");
    if (!has_type) c.fail(item, ip + ".record_type", "missing");
    if (has_name && !d.name.empty() && !names.insert(d.name).second) {
      c.fail(item, ip + ".name", "'" + d.name + "' is declared twice");
    }
    if (has_type && !types.insert(d.record_type).second) {
      c.fail(item, ip + ".record_type", std::to_string(d.record_type) + " is declared twice");
    }
    if (d.rollup) {
      std::string column = d.rollup->count_column;
      std::transform(column.begin(), column.end(), column.begin(),
                     [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
      const auto [it, fresh] = owning_columns.emplace(d.rollup->table + "." + column, d.name);
      if (!fresh) {
        c.fail(item, ip + ".rollup",
               "`" + d.rollup->table + "`.`" + d.rollup->count_column +
                   "` is already the rollup target of counter '" + it->second +
                   "': one owning column holds one counter");
      }
    }
    counters.push_back(std::move(d));
  }
}

void parse_flush(checker& c, const YAML::Node& v, const std::string& p, flush_config& f) {
  c.mapping(
      v, p,
      {
          {"interval", [&](auto& a, auto& ap) { c.time_span(a, ap, 10ms, 1h, f.interval); }},
          {"max_rows_per_statement",
           [&](auto& a, auto& ap) {
             c.integer<std::size_t>(a, ap, 1, 100000, f.max_rows_per_statement);
           }},
          {"slots", [&](auto& a, auto& ap) { c.integer<unsigned>(a, ap, 1, 65535, f.slots); }},
          {"max_pending_keys",
           [&](auto& a, auto& ap) {
             c.integer<std::size_t>(a, ap, 1, 1'000'000'000, f.max_pending_keys);
           }},
          {"max_retry_backoff",
           [&](auto& a, auto& ap) { c.time_span(a, ap, 10ms, 1h, f.max_retry_backoff); }},
          {"connections",
           [&](auto& a, auto& ap) {
             c.integer<unsigned>(a, ap, 1, max_flush_connections, f.connections);
             c.remember_line(ap, a);
           }},
      });
}

// The flusher holds flush.connections connections while it writes; reads (GET
// /v1/counters) and the rollup need one more, or they wait for the whole flush.
void check_flush_connections(const daemon_config& cfg, checker& c) {
  if (cfg.flush.connections > 1 && cfg.mysql.pool_size < cfg.flush.connections + 1) {
    c.fail_plain("flush.connections",
                 std::to_string(cfg.flush.connections) + " connections need mysql.pool_size >= " +
                     std::to_string(cfg.flush.connections + 1) +
                     " (one more for reads and the rollup), but mysql.pool_size is " +
                     std::to_string(cfg.mysql.pool_size));
  }
}

void parse_rollup(checker& c, const YAML::Node& v, const std::string& p, rollup_config& r) {
  c.mapping(
      v, p,
      {
          {"interval", [&](auto& a, auto& ap) { c.time_span(a, ap, 100ms, 24h, r.interval); }},
          {"batch_size",
           [&](auto& a, auto& ap) { c.integer<std::size_t>(a, ap, 1, 100000, r.batch_size); }},
      });
}

void parse_wal(checker& c, const YAML::Node& v, const std::string& p, wal_config& w) {
  c.mapping(v, p,
            {
                {"dir", [&](auto& a, auto& ap) { c.string(a, ap, w.dir); }},
                {"fsync",
                 [&](auto& a, auto& ap) {
                   c.choice<fsync_mode>(a, ap,
                                        {{"always", fsync_mode::always},
                                         {"interval", fsync_mode::interval},
                                         {"never", fsync_mode::never}},
                                        w.fsync);
                 }},
                {"fsync_interval",
                 [&](auto& a, auto& ap) { c.time_span(a, ap, 1ms, 10s, w.fsync_interval); }},
            });
}

void parse_idempotency(checker& c, const YAML::Node& v, const std::string& p,
                       idempotency_config& i) {
  c.mapping(
      v, p,
      {
          {"window", [&](auto& a, auto& ap) { c.time_span(a, ap, 1s, 24h * 30, i.window); }},
          {"max_keys",
           [&](auto& a, auto& ap) { c.integer<std::size_t>(a, ap, 1, 100'000'000, i.max_keys); }},
      });
}

void parse_log(checker& c, const YAML::Node& v, const std::string& p, log_level& level) {
  c.mapping(v, p,
            {
                {"level",
                 [&](auto& a, auto& ap) {
                   c.choice<log_level>(a, ap,
                                       {{"debug", log_level::debug},
                                        {"info", log_level::info},
                                        {"warn", log_level::warn},
                                        {"error", log_level::error}},
                                       level);
                 }},
            });
}

// The text as one YAML document (or none: an empty file is all defaults).
YAML::Node load_one_document(const std::string& yaml_text, const std::string& origin) {
  try {
    const auto starts = document_starts(yaml_text, 2);
    if (starts.size() > 1 && starts[1].pos == starts[0].pos) {
      throw config_error({origin + ":" + std::to_string(starts[0].line + 1) +
                          ": invalid YAML: unexpected character at column " +
                          std::to_string(starts[0].column + 1)});
    }
    if (starts.size() > 1) {
      throw config_error({origin + ":" + std::to_string(starts[1].line + 1) +
                          ": the config must be one YAML document, not several"});
    }
    if (starts.empty()) return YAML::Node();
    return YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw config_error(
        {origin + ":" + std::to_string(e.mark.line + 1) + ": invalid YAML: " + e.msg});
  }
}

}  // namespace

std::vector<std::string> apply_credentials(mysql_config& m, const mysql_credentials& over) {
  std::vector<std::string> problems;
  if (over.user) {
    if (over.user->empty()) problems.emplace_back("--mysql-user: empty user name");
    m.user = *over.user;
    // The config's password is its own user's, not this one's.
    m.password_file.clear();
    m.password_env.clear();
  }
  if (over.password_file) {
    if (over.password_file->empty()) problems.emplace_back("--mysql-password-file: empty path");
    m.password_file = *over.password_file;
    m.password_env.clear();
  }
  m.password.clear();
  return problems;
}

daemon_config parse_config(const std::string& yaml_text, const std::string& origin,
                           const mysql_credentials& over, bool read_secrets) {
  const YAML::Node root = load_one_document(yaml_text, origin);
  daemon_config cfg;
  checker c(origin);
  YAML::Node log_sources;  // parsed once the counters are known
  std::string log_sources_key;
  c.mapping(
      root, "",
      {
          {"instance_id", [&](auto& v, auto& p) { parse_instance_id(c, v, p, cfg); }},
          {"listen", [&](auto& v, auto& p) { parse_listen(c, v, p, cfg); }},
          {"http", [&](auto& v, auto& p) { parse_http(c, v, p, cfg.http); }},
          {"mysql", [&](auto& v, auto& p) { parse_mysql(c, v, p, cfg.mysql); }},
          {"counters", [&](auto& v, auto& p) { parse_counters(c, v, p, cfg.counters); }},
          {"accept_undeclared_types",
           [&](auto& v, auto& p) { c.boolean(v, p, cfg.accept_undeclared_types); }},
          {"shards", [&](auto& v, auto& p) { c.integer<unsigned>(v, p, 1, 4096, cfg.shards); }},
          {"flush", [&](auto& v, auto& p) { parse_flush(c, v, p, cfg.flush); }},
          {"rollup", [&](auto& v, auto& p) { parse_rollup(c, v, p, cfg.rollup); }},
          {"wal", [&](auto& v, auto& p) { parse_wal(c, v, p, cfg.wal); }},
          {"idempotency", [&](auto& v, auto& p) { parse_idempotency(c, v, p, cfg.idempotency); }},
          {"shutdown_timeout",
           [&](auto& v, auto& p) { c.time_span(v, p, 100ms, 1h, cfg.shutdown_timeout); }},
          {"log", [&](auto& v, auto& p) { parse_log(c, v, p, cfg.log); }},
          {"log_sources",
           [&](auto& v, auto& p) {
             log_sources = v;
             log_sources_key = p;
           }},
      });
  if (log_sources.IsDefined()) {
    parse_log_sources(
        log_sources, log_sources_key, cfg.counters,
        [&c](const YAML::Node& at, const std::string& key, const std::string& msg) {
          c.fail(at, key, msg);
        },
        cfg.log_sources);
  }

  if (cfg.instance_id.empty()) cfg.instance_id = default_instance_id();
  for (auto& p : apply_credentials(cfg.mysql, over)) c.fail_flag(std::move(p));
  if (read_secrets) resolve_secrets(cfg, c, over.password_file.has_value());
  check_tls(cfg, c);
  check_flush_connections(cfg, c);
  // The bucket tables are named after the counters table: `<table>_hour`, `<table>_day`.
  if (!bucket_spec_of(cfg).empty() && cfg.mysql.table.size() + 5 > 64) {
    c.fail_plain("mysql.table",
                 "with counters[].buckets the table name may have at most 59 characters "
                 "(its bucket tables are named `<table>_hour` and `<table>_day`)");
  }
  if (!c.problems().empty()) throw config_error(c.problems());
  return cfg;
}

daemon_config load_config(const std::string& path, const mysql_credentials& over,
                          bool read_secrets) {
  std::string text, why;
  if (!read_whole_file(path, text, why)) {
    throw config_error({path + ": cannot read config: " + why});
  }
  return parse_config(text, path, over, read_secrets);
}

store::bucket_spec bucket_spec_of(const daemon_config& cfg) {
  store::bucket_spec spec;
  for (const auto& c : cfg.counters) {
    for (const auto& b : c.buckets)
      spec.declare(c.record_type, b.granularity,
                   std::chrono::duration_cast<std::chrono::seconds>(b.retention));
  }
  return spec;
}

reload_plan plan_reload(const daemon_config& a, const daemon_config& b) {
  reload_plan plan;
  const auto live = [&](bool changed, const char* key) {
    if (changed) plan.live.emplace_back(key);
  };
  const auto restart = [&](bool changed, const char* key) {
    if (changed) plan.needs_restart.emplace_back(key);
  };
  live(a.log != b.log, "log.level");
  live(a.http.auth_token_file != b.http.auth_token_file || a.http.auth_token != b.http.auth_token,
       "http.auth_token_file");
  // Buckets need a restart (see the header); the rest of counters is live.
  const auto without_buckets = [](std::vector<counter_decl> counters) {
    for (auto& c : counters) c.buckets.clear();
    return counters;
  };
  live(without_buckets(a.counters) != without_buckets(b.counters), "counters");
  restart(bucket_spec_of(a) != bucket_spec_of(b), "counters[].buckets");
  live(a.accept_undeclared_types != b.accept_undeclared_types, "accept_undeclared_types");

  restart(a.instance_id != b.instance_id, "instance_id");
  restart(a.listen_address != b.listen_address, "listen.address");
  restart(a.listen_port != b.listen_port, "listen.port");
  restart(a.listen_unix_socket != b.listen_unix_socket, "listen.unix_socket");
  restart(a.listen_unix_socket_mode != b.listen_unix_socket_mode, "listen.unix_socket_mode");
  restart(a.http.max_connections != b.http.max_connections, "http.max_connections");
  restart(a.http.threads != b.http.threads, "http.threads");
  restart(a.http.max_body_bytes != b.http.max_body_bytes, "http.max_body_bytes");
  restart(a.http.max_items_per_request != b.http.max_items_per_request,
          "http.max_items_per_request");
  restart(a.http.idle_timeout != b.http.idle_timeout, "http.idle_timeout");
  restart(a.mysql.host != b.mysql.host, "mysql.host");
  restart(a.mysql.port != b.mysql.port, "mysql.port");
  restart(a.mysql.socket != b.mysql.socket, "mysql.socket");
  restart(a.mysql.hosts != b.mysql.hosts, "mysql.hosts");
  restart(a.mysql.tls != b.mysql.tls, "mysql.tls");
  restart(a.mysql.user != b.mysql.user, "mysql.user");
  // A new password in the same file or variable is a change of that key.
  const bool same_password = a.mysql.password == b.mysql.password;
  restart(a.mysql.password_file != b.mysql.password_file ||
              (!b.mysql.password_file.empty() && !same_password),
          "mysql.password_file");
  restart(a.mysql.password_env != b.mysql.password_env ||
              (!b.mysql.password_env.empty() && !same_password),
          "mysql.password_env");
  restart(a.mysql.database != b.mysql.database, "mysql.database");
  restart(a.mysql.table != b.mysql.table, "mysql.table");
  restart(a.mysql.connect_timeout != b.mysql.connect_timeout, "mysql.connect_timeout");
  restart(a.mysql.pool_size != b.mysql.pool_size, "mysql.pool_size");
  restart(a.shards != b.shards, "shards");
  restart(a.flush.interval != b.flush.interval, "flush.interval");
  restart(a.flush.max_rows_per_statement != b.flush.max_rows_per_statement,
          "flush.max_rows_per_statement");
  restart(a.flush.slots != b.flush.slots, "flush.slots");
  restart(a.flush.max_pending_keys != b.flush.max_pending_keys, "flush.max_pending_keys");
  restart(a.flush.max_retry_backoff != b.flush.max_retry_backoff, "flush.max_retry_backoff");
  // Sizes the flusher's writers against the pool, which is sized at start.
  restart(a.flush.connections != b.flush.connections, "flush.connections");
  restart(a.rollup.interval != b.rollup.interval, "rollup.interval");
  restart(a.rollup.batch_size != b.rollup.batch_size, "rollup.batch_size");
  restart(a.wal.dir != b.wal.dir, "wal.dir");
  restart(a.wal.fsync != b.wal.fsync, "wal.fsync");
  restart(a.wal.fsync_interval != b.wal.fsync_interval, "wal.fsync_interval");
  restart(a.shutdown_timeout != b.shutdown_timeout, "shutdown_timeout");
  restart(a.idempotency.window != b.idempotency.window, "idempotency.window");
  restart(a.idempotency.max_keys != b.idempotency.max_keys, "idempotency.max_keys");
  restart(a.log_sources != b.log_sources, "log_sources");
  return plan;
}

}  // namespace slotted::config
