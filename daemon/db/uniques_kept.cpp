// What `<table>_uniques` keeps and for how long (db/uniques.hpp, Late items): its tables
// made by --migrate and checked at start, the entries a commit may still decide, and
// the prune that records what it deletes before it deletes it.
#include <algorithm>

#include "db/errors.hpp"
#include "db/repository.hpp"
#include "db/sql_text.hpp"
#include "db/uniques.hpp"

namespace slotted::db {

using namespace sql_text;

std::string create_pruned_table(const dialect& d) {
  return d.create_table({std::string(pruned_table),
                         {{"`uniques_table`", column_type::ascii64},
                          {"`record_type`", column_type::u32},
                          {"`ended_before`", column_type::i64}},
                         pruned_key_columns});
}

namespace {

// The rows of `types` of the pruned table for `uniques`, then `lock`.
std::string pruned_rows_select(connection& conn, const std::string& uniques,
                               const std::vector<std::uint32_t>& types, std::string_view lock) {
  std::string sql = "SELECT `record_type`, `ended_before` FROM ";
  sql += quote_identifier(pruned_table);
  sql += " WHERE `uniques_table` = ";
  sql += conn.quote(uniques);
  sql += " AND `record_type` IN ";
  append_int_list(sql, types);
  if (!lock.empty()) sql.append(" ").append(lock);
  return sql;
}

// The row (uniques, type, ended_before): kept as it is when there is one (`raise`
// false), else raised to `ended_before` if that is later.
std::string pruned_row_insert(connection& conn, const std::string& uniques, std::uint32_t type,
                              std::int64_t ended_before, bool raise) {
  const dialect& d = conn.sql();
  const std::string t = quote_identifier(pruned_table);
  std::string sql = raise ? "INSERT INTO " : std::string(d.insert_ignore());
  sql += t;
  sql += " (`uniques_table`, `record_type`, `ended_before`) VALUES (";
  sql += conn.quote(uniques);
  sql += ',';
  append_int(sql, type);
  sql += ',';
  append_int(sql, ended_before);
  sql += ')';
  if (raise) {
    sql += d.on_conflict(pruned_key_columns) + "`ended_before` = GREATEST(" +
           d.existing(t, "`ended_before`") + ", " + d.incoming("`ended_before`") + ")";
  } else {
    sql += d.ignore_conflicts();
  }
  return sql;
}

}  // namespace

void migrate_uniques(connection& conn, const std::string& table, const store::dedupe_spec& dedupe) {
  if (dedupe.empty()) return;
  const std::string uniques = uniques_table(table);
  // A uniques table that exists without its every_type row was made by an earlier
  // version (or by a run of this one cut short: then the row is only more careful).
  const bool earlier = table_exists(conn, uniques);
  conn.execute(create_uniques_table(conn.sql(), table));
  conn.execute(create_pruned_table(conn.sql()));
  conn.execute(
      pruned_row_insert(conn, uniques, every_type, earlier ? later_clock(conn) : 0, false));
}

void verify_uniques_table(connection& conn, const std::string& table,
                          const store::dedupe_spec& dedupe) {
  if (dedupe.empty()) return;
  const std::string name = uniques_table(table);
  const auto missing = [](const std::string& what) {
    return db_error(error_class::fatal,
                    what + " (counters[].dedupe) does not exist; run slotted-counterd --migrate");
  };
  if (!table_exists(conn, name)) throw missing("table `" + name + "`");
  if (!table_exists(conn, pruned_table)) throw missing("table `" + std::string(pruned_table) + "`");
  if (conn.query(pruned_rows_select(conn, name, {every_type}, "")).empty())
    throw missing("the row of `" + name + "` in `" + std::string(pruned_table) + "`");
}

std::vector<store::unique_entry> not_pruned(
    std::span<const store::unique_entry> entries, const store::dedupe_spec& dedupe,
    const std::map<std::uint32_t, std::int64_t>& ended_before, std::int64_t every) {
  std::vector<store::unique_entry> out;
  out.reserve(entries.size());
  for (const auto& e : entries) {
    const auto g = dedupe.window_of(e.record_type);
    if (g == store::granularity::none) continue;
    const auto it = ended_before.find(e.record_type);
    const std::int64_t cut = std::max(every, it == ended_before.end() ? every : it->second);
    if (e.window + store::seconds_of(g) >= cut) out.push_back(e);
  }
  return out;
}

std::vector<store::unique_entry> decidable_entries(connection& conn, const std::string& table,
                                                   std::span<const store::unique_entry> entries,
                                                   const store::dedupe_spec& dedupe) {
  if (entries.empty()) return {};
  std::vector<std::uint32_t> types;
  for (const auto& e : entries) types.push_back(e.record_type);
  std::sort(types.begin(), types.end());
  types.erase(std::unique(types.begin(), types.end()), types.end());
  const std::string uniques = uniques_table(table);
  // The every_type row first, in a statement of its own, as the prune locks it before
  // the row of a type: no cycle. Under READ COMMITTED the types' rows are then read as
  // committed: none changes before this transaction ends, the prune waiting for that.
  const auto every_row =
      conn.query(pruned_rows_select(conn, uniques, {every_type}, conn.sql().share_lock()));
  // Without it no lock orders the commit after a prune: nothing is decided.
  if (every_row.empty() || every_row[0].size() < 2 || !every_row[0][1]) {
    throw db_error(error_class::fatal, "the row of `" + uniques + "` in `" +
                                           std::string(pruned_table) +
                                           "` does not exist; run slotted-counterd --migrate");
  }
  const std::int64_t every = std::stoll(*every_row[0][1]);
  std::map<std::uint32_t, std::int64_t> ended_before;
  for (const auto& r : conn.query(pruned_rows_select(conn, uniques, types, ""))) {
    if (r.size() < 2 || !r[0] || !r[1]) continue;
    ended_before[static_cast<std::uint32_t>(std::stoul(*r[0]))] = std::stoll(*r[1]);
  }
  return not_pruned(entries, dedupe, ended_before, every);
}

namespace {

// Records that the windows of `type` which ended before `ended_before` are pruned, in a
// transaction of its own that first locks the table's every_type row: it waits for the
// commits that read the row before (db/uniques.hpp), and the commits after it read the
// new value.
void raise_pruned(connection& conn, const std::string& uniques, std::uint32_t type,
                  std::int64_t ended_before) {
  in_transaction(conn, [&] {
    // Waits for the commits deciding entries now (each holds it in share mode for its
    // transaction), at most 10 s: a prune that cannot have it then is tried again at
    // the next run (a lock wait timeout, tolerated by the housekeeping).
    conn.query(conn.sql().locked_within(pruned_rows_select(conn, uniques, {every_type}, ""), 10));
    conn.execute(pruned_row_insert(conn, uniques, type, ended_before, true));
    conn.execute(commit);
  });
}

}  // namespace

unique_prune prune_uniques(connection& conn, const std::string& table,
                           const store::dedupe_spec& dedupe, std::int64_t now, std::size_t limit,
                           int max_chunks) {
  unique_prune out;
  const std::string uniques = uniques_table(table);
  // Every record type with rows (a loose scan of the key's first column), also those of
  // counters whose dedupe was removed: their rows are kept by day, for the longest keep.
  for (const auto& r : conn.query(uniques_types_select(table))) {
    if (r.empty() || !r[0]) continue;
    const auto type = static_cast<std::uint32_t>(std::stoul(*r[0]));
    auto g = dedupe.window_of(type);
    if (g == store::granularity::none) g = store::granularity::day;
    // Windows that ended more than the keep and the margin ago (the margin for clocks
    // a few seconds apart, and an entry accepted at its keep's end and committed later).
    const std::int64_t ended_before = now - dedupe.keep_of(type) - store::unique_margin_seconds;
    raise_pruned(conn, uniques, type, ended_before);
    const std::int64_t before = ended_before - store::seconds_of(g);
    for (int i = 0;; ++i) {
      if (i == max_chunks) {
        out.behind = true;
        break;
      }
      conn.execute(uniques_prune(conn.sql(), table, type, before, limit));
      const auto n = conn.affected_rows();
      out.deleted += n;
      if (n < limit) break;
    }
  }
  return out;
}

}  // namespace slotted::db
