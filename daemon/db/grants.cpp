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

std::string column_list(const std::vector<std::string>& columns) {
  std::string out = " (";
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (i > 0) out += ", ";
    out += quote_identifier(columns[i]);
  }
  return out + ")";
}

void add_unique(std::vector<std::string>& v, const std::string& s) {
  if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
}

}  // namespace

std::vector<std::string> grant_statements(const config::daemon_config& cfg, std::string_view host) {
  const std::string account = quote_account_part("mysql.user", cfg.mysql.user) + "@" +
                              quote_account_part("grant host", host);
  const std::string db = quote_identifier(cfg.mysql.database) + ".";
  std::vector<std::string> out;
  const auto grant = [&](const std::string& privileges, std::string_view table) {
    out.push_back("GRANT " + privileges + " ON " + db + quote_identifier(table) + " TO " + account);
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
    grant("SELECT" + column_list(o.read) + ", UPDATE" + column_list(o.written), o.table);
  }
  return out;
}

std::string admin_grant_statement(const config::daemon_config& cfg) {
  return "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, DROP ON " +
         quote_identifier(cfg.mysql.database) + ".* TO 'ADMIN'@'HOST'";
}

int print_grants(const config::daemon_config& cfg, std::string_view host, std::ostream& out,
                 std::ostream& err) {
  std::vector<std::string> statements;
  try {
    statements = grant_statements(cfg, host);
  } catch (const std::invalid_argument& e) {
    err << "cannot print grants: " << e.what() << "\n";
    return 2;
  }
  for (const auto& s : statements) out << s << ";\n";
  out << "-- The administrator's account that runs --migrate (not mysql.user) needs:\n-- "
      << admin_grant_statement(cfg) << ";\n";
  out.flush();
  return out ? 0 : 1;
}

}  // namespace slotted::db
