#include "config/config.hpp"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <sstream>

#include "config/checker.hpp"
#include "config/config_keys.hpp"
#include "config/log_sources_parse.hpp"

namespace slotted::config {
namespace {

using detail::checker;

std::string join_problems(const std::vector<std::string>& problems) {
  std::string out;
  for (const auto& p : problems) {
    if (!out.empty()) out += '\n';
    out += p;
  }
  return out;
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

void after_section(const std::string& section, const daemon_config& cfg, checker& c) {
  if (section == cfg.mysql.section()) detail::check_hosts_and_socket(cfg, c);
}

// The database section, mysql: or postgresql:, chosen before the walk: its keys' defaults
// (the port, a host without one) are the engine's.
void choose_engine(const YAML::Node& root, daemon_config& cfg, checker& c) {
  if (!root.IsMap() || !root["postgresql"]) return;
  cfg.mysql.engine = database_engine::postgresql;
  cfg.mysql.port = cfg.mysql.default_port();
  if (root["mysql"])
    c.fail(root["postgresql"], "postgresql",
           "a config names one database: a mysql section or a postgresql one, not both");
}

// The handlers of the keys under `prefix` ("", "mysql.", "mysql.tls."), from the key
// table: a key's row parses its value; a section's handler walks it by the rows under it.
key_handlers handlers_under(checker& c, daemon_config& cfg, const std::string& prefix) {
  key_handlers handlers;
  for (const auto& row : config_keys()) {
    if (row.parse == nullptr || !row.key.starts_with(prefix)) continue;
    const auto rest = row.key.substr(prefix.size());
    const auto dot = rest.find('.');
    const std::string name(rest.substr(0, dot));
    if (dot == std::string_view::npos) {
      handlers[name] = [&c, &cfg, &row](const YAML::Node& v, const std::string& p) {
        row.parse(c, row, v, p, cfg);
      };
    } else if (!handlers.contains(name)) {
      handlers[name] = [&c, &cfg, section = prefix + name](const YAML::Node& v,
                                                           const std::string& p) {
        c.mapping(v, p, handlers_under(c, cfg, section + "."));
        after_section(section, cfg, c);
      };
    }
  }
  return handlers;
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
  // Set before the walk: a wal.dir in the config, "" included, replaces it.
  cfg.wal.dir = default_wal_dir();
  checker c(origin);
  choose_engine(root, cfg, c);
  c.mapping(root, "", handlers_under(c, cfg, ""));
  // log_sources names counters: parsed once they are known.
  if (const auto it = c.deferred().find("log_sources"); it != c.deferred().end()) {
    parse_log_sources(
        it->second, it->first, cfg.counters,
        [&c](const YAML::Node& at, const std::string& key, const std::string& msg) {
          c.fail(at, key, msg);
        },
        cfg.log_sources);
  }

  detail::resolve_instance_id(cfg, c);
  for (auto& p : apply_credentials(cfg.mysql, over)) c.fail_flag(std::move(p));
  if (read_secrets) detail::resolve_secrets(cfg, c, over.password_file.has_value());
  detail::check_tls(cfg, c);
  detail::check_flush_connections(cfg, c);
  detail::check_metrics_listen(cfg, c);
  // The tables named after the counters table (`<table>_hour`, `<table>_totals`, ...)
  // must fit 64 characters (config/table_names.cpp).
  detail::check_table_name_length(cfg, c);
  if (!c.problems().empty()) throw config_error(c.problems());
  return cfg;
}

daemon_config load_config(const std::string& path, const mysql_credentials& over,
                          bool read_secrets) {
  const auto text = detail::read_whole_file(path);
  if (!text) throw config_error({path + ": cannot read config: " + text.failed().text()});
  return parse_config(*text, path, over, read_secrets);
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

// Iterates the key table: a key has a row or is not parsed at all, so no key can be
// missing from a plan.
reload_plan plan_reload(const daemon_config& a, const daemon_config& b) {
  reload_plan plan;
  for (const auto& row : config_keys()) {
    if (row.differs == nullptr || !row.differs(a, b)) continue;
    auto& list = row.reload == reload_kind::live ? plan.live : plan.needs_restart;
    std::string name(plan_name(row));
    // The database's keys by the section the config uses (config_keys.cpp: postgresql_keys).
    if (name.starts_with("mysql.")) name = b.mysql.key(name.substr(name.find('.') + 1));
    if (std::find(list.begin(), list.end(), name) == list.end()) list.push_back(name);
  }
  if (a.mysql.engine != b.mysql.engine) plan.needs_restart.emplace_back(b.mysql.section());
  return plan;
}

}  // namespace slotted::config
