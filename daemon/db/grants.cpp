#include "db/grants.hpp"

#include <algorithm>
#include <utility>

#include "db/log_positions.hpp"
#include "db/sql.hpp"
#include "db/top.hpp"
#include "db/uniques.hpp"

namespace slotted::db {

std::string quote_account_part(std::string_view what, std::string_view name) {
  if (name.empty()) throw std::invalid_argument(std::string(what) + ": empty name");
  if (name.find('\0') != std::string_view::npos)
    throw std::invalid_argument(std::string(what) + ": contains a NUL byte");
  std::string out = "'";
  for (char c : name) {
    if (c == '\'') {
      out += "''";
    } else if (c == '\\') {
      out += "\\\\";
    } else {
      out.push_back(c);
    }
  }
  out.push_back('\'');
  return out;
}

namespace {

// The adoption state of rollup targets (`--adopt NAME`), created by --migrate.
constexpr std::string_view adoption_state_table = "slotted_counterd_adoptions";

bool on_postgresql(const config::daemon_config& cfg) {
  return cfg.mysql.engine == config::database_engine::postgresql;
}

// A name as the engine's GRANT takes it: backquoted, or double-quoted (PostgreSQL).
std::string name_of(const config::daemon_config& cfg, std::string_view name) {
  if (!on_postgresql(cfg)) return quote_identifier(name);
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  return out + "\"";
}

std::string column_list(const config::daemon_config& cfg, const std::vector<std::string>& columns) {
  std::string out = " (";
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (i > 0) out += ", ";
    out += name_of(cfg, columns[i]);
  }
  return out + ")";
}

// The role a PostgreSQL GRANT names: an identifier, never empty, without a control
// character (a line break would end the comment lines it is printed in), and none that
// GRANT reads as a keyword even quoted (PUBLIC: everyone) or reserves (pg_*).
std::string role_of(const config::daemon_config& cfg) {
  const std::string& user = cfg.mysql.user;
  quote_account_part("postgresql.user", user);  // the same refusals
  std::string lower;
  for (char c : user) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      throw std::invalid_argument("postgresql.user: contains a control character");
    lower.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
  }
  for (const char* keyword : {"public", "none", "current_user", "session_user", "current_role"}) {
    if (lower == keyword)
      throw std::invalid_argument("postgresql.user: '" + user + "' is a keyword to GRANT");
  }
  if (lower.starts_with("pg_"))
    throw std::invalid_argument("postgresql.user: '" + user + "': pg_ names are reserved");
  return name_of(cfg, user);
}

void add_unique(std::vector<std::string>& v, const std::string& s) {
  if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
}

}  // namespace

std::vector<std::string> grant_statements(const config::daemon_config& cfg, std::string_view host) {
  const bool postgresql = on_postgresql(cfg);
  // PostgreSQL grants to a role, whatever its host (pg_hba.conf says where it may come
  // from), on the tables of the config's schema, which it must be able to use.
  const std::string account = postgresql ? role_of(cfg)
                                         : quote_account_part("mysql.user", cfg.mysql.user) + "@" +
                                               quote_account_part("grant host", host);
  const std::string db = name_of(cfg, postgresql ? cfg.mysql.schema : cfg.mysql.database) + ".";
  std::vector<std::string> out;
  if (postgresql)
    out.push_back("GRANT USAGE ON SCHEMA " + name_of(cfg, cfg.mysql.schema) + " TO " + account);
  const auto grant = [&](const std::string& privileges, std::string_view table) {
    out.push_back("GRANT " + privileges + " ON " + (postgresql ? "TABLE " : "") + db +
                  name_of(cfg, table) + " TO " + account);
  };
  constexpr const char* all_rows = "SELECT, INSERT, UPDATE, DELETE";

  grant(all_rows, cfg.mysql.table);
  const auto buckets = config::bucket_spec_of(cfg);
  for (const auto g : {store::granularity::hour, store::granularity::day}) {
    if (buckets.uses(g)) grant(all_rows, bucket_table(cfg.mysql.table, g));
  }
  // The totals of top-N (db/top.hpp), with counters[].top only.
  if (const auto top = config::top_spec_of(cfg); !top.empty()) {
    grant(all_rows, cfg.mysql.table + "_totals");
    for (const auto g : {store::granularity::hour, store::granularity::day}) {
      if (top.uses(g)) grant(all_rows, bucket_table(cfg.mysql.table, g) + "_totals");
    }
    grant("SELECT", totals_filled_table);  // which types they were filled for (read at start)
  }
  // Unique per client per window (db/uniques.hpp), with counters[].dedupe only.
  if (!config::dedupe_spec_of(cfg).empty()) {
    grant("SELECT, INSERT, DELETE", cfg.mysql.table + "_uniques");
    // What was pruned from it: read (locked) by every unique commit, raised by the prune.
    grant("SELECT, INSERT, UPDATE", pruned_table);
  }
  grant("SELECT, INSERT, DELETE", ledger_table);
  grant(all_rows, idempotency_keys_table);
  if (!cfg.log_sources.empty()) grant("SELECT, INSERT, UPDATE", positions_table);

  // The owning tables in the order the config first names them, each with the
  // columns of all its targets.
  struct owner {
    std::string table;
    std::vector<std::string> read;     // id and count columns
    std::vector<std::string> written;  // count columns
  };
  std::vector<owner> owners;
  for (const auto& c : cfg.counters) {
    if (!c.rollup) continue;
    auto it = std::find_if(owners.begin(), owners.end(),
                           [&](const owner& o) { return o.table == c.rollup->table; });
    if (it == owners.end()) it = owners.insert(owners.end(), owner{c.rollup->table, {}, {}});
    add_unique(it->read, c.rollup->id_column);
    add_unique(it->read, c.rollup->count_column);
    add_unique(it->written, c.rollup->count_column);
  }
  if (!owners.empty()) {
    grant(all_rows, dirty_table);
    grant("SELECT, INSERT", adoption_state_table);  // check_adopted: read, INSERT IGNORE
  }
  for (const auto& o : owners) {
    grant("SELECT" + column_list(cfg, o.read) + ", UPDATE" + column_list(cfg, o.written), o.table);
  }
  return out;
}

std::string admin_grant_statement(const config::daemon_config& cfg) {
  // PostgreSQL: --migrate's role creates the tables and so owns them; it needs the schema.
  if (on_postgresql(cfg))
    return "GRANT USAGE, CREATE ON SCHEMA " + name_of(cfg, cfg.mysql.schema) + " TO ADMIN";
  return "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, DROP ON " +
         quote_identifier(cfg.mysql.database) + ".* TO 'ADMIN'@'HOST'";
}

int print_grants(const config::daemon_config& cfg, std::string_view host, std::ostream& out,
                 std::ostream& err) {
  if (on_postgresql(cfg) && host != "%") {
    err << "--grant-host: PostgreSQL grants to a role wherever it connects from; "
           "pg_hba.conf says from where\n";
    return 2;
  }
  std::vector<std::string> statements;
  try {
    statements = grant_statements(cfg, host);
  } catch (const std::invalid_argument& e) {
    err << "cannot print grants: " << e.what() << "\n";
    return 2;
  }
  for (const auto& s : statements) out << s << ";\n";
  if (on_postgresql(cfg)) {
    out << "-- A seed-style table whose id is a serial needs its sequence too:\n-- GRANT USAGE ON "
           "SEQUENCE "
        << name_of(cfg, cfg.mysql.schema) << "." << name_of(cfg, cfg.mysql.table + "_id_seq")
        << " TO " << role_of(cfg) << ";\n"
        << "-- The role that runs --migrate (not postgresql.user) needs, and then owns the "
           "tables:\n-- "
        << admin_grant_statement(cfg) << ";\n";
  } else {
    out << "-- The administrator's account that runs --migrate (not mysql.user) needs:\n-- "
        << admin_grant_statement(cfg) << ";\n";
  }
  out.flush();
  return out ? 0 : 1;
}

}  // namespace slotted::db
