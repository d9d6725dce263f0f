// Which record types each totals table was filled for (db/top.hpp, totals_filled_table):
// a totals table counts a record type's slot (or bucket) rows only from the moment it
// was filled for it; the counts of a counter that had some before `top` was turned on
// are in it only once --migrate has filled it for that type.
#include <algorithm>

#include "db/errors.hpp"
#include "db/sql_text.hpp"
#include "db/top.hpp"

namespace slotted::db {

using sql_text::num;

namespace {
// Appended piece by piece (gcc 12's false -Wrestrict at -O3 on `"lit" + std::string&&`).
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::string out;
  (out.append(parts), ...);
  return out;
}
}  // namespace

std::string create_totals_filled_table(const dialect& d) {
  return d.create_table({std::string(totals_filled_table),
                         {{"`totals_table`", column_type::ascii64},
                          {"`record_type`", column_type::u32},
                          {"`filled_at`", column_type::moment, false, "CURRENT_TIMESTAMP"}},
                         "`totals_table`, `record_type`"});
}

std::vector<std::uint32_t> unfilled_record_types(connection& conn, const std::string& totals,
                                                 const store::top_spec& top) {
  std::vector<std::uint32_t> filled;
  try {
    for (const auto& row :
         conn.query(cat("SELECT `record_type` FROM ", quote_identifier(totals_filled_table),
                        " WHERE `totals_table` = ", conn.quote(totals)))) {
      filled.push_back(static_cast<std::uint32_t>(std::stoul(row[0].value_or("0"))));
    }
  } catch (const db_error& e) {
    if (!e.no_such_table()) throw;  // a version before it: none recorded
  }
  std::vector<std::uint32_t> out;
  for (const auto t : top.record_types()) {
    if (std::find(filled.begin(), filled.end(), t) == filled.end()) out.push_back(t);
  }
  return out;
}

void record_filled(connection& conn, const std::string& totals,
                   std::span<const std::uint32_t> record_types) {
  if (record_types.empty()) return;
  std::string sql = cat(conn.sql().insert_ignore(), quote_identifier(totals_filled_table),
                        " (`totals_table`, `record_type`) VALUES ");
  for (std::size_t i = 0; i < record_types.size(); ++i) {
    if (i > 0) sql += ',';
    sql += '(';
    sql += conn.quote(totals);
    sql += ',';
    sql += num(record_types[i]);
    sql += ')';
  }
  sql += conn.sql().ignore_conflicts();
  conn.execute(sql);
}

void refill_totals(connection& conn, const std::string& totals, const std::string& source,
                   bool bucketed, std::span<const std::uint32_t> record_types) {
  if (record_types.empty()) return;
  std::string in = " WHERE `record_type` IN (";
  for (std::size_t i = 0; i < record_types.size(); ++i) {
    if (i > 0) in += ',';
    in += num(record_types[i]);
  }
  in += ")";
  const std::string columns =
      bucketed ? "`record_type`, `record_id`, `bucket`" : "`record_type`, `record_id`";
  in_transaction(conn, [&] {
    // What the totals hold of these types (what was counted since top was turned on)
    // goes; the sums of their rows, read under shared locks (a flush of them waits for
    // the COMMIT), take its place. The rows are locked first, by a count of them, and
    // the totals after: the order a flush takes them in (db/write_path.cpp: slot or
    // bucket rows, then totals), so the two never wait for each other in a cycle.
    // MariaDB's sum locks again beside its GROUP BY (a row a flush inserted since is
    // waited for); PostgreSQL takes no lock clause there.
    const bool beside = conn.sql().locks_beside_group_by();
    conn.query(cat("SELECT COUNT(*) FROM (SELECT 1 FROM ", quote_identifier(source), in, " ",
                   conn.sql().share_lock(), ") AS locked"));
    conn.execute(cat("DELETE FROM ", quote_identifier(totals), in));
    conn.execute(cat("INSERT INTO ", quote_identifier(totals), " (", columns, ", `count`) SELECT ",
                     columns, ", SUM(`count`) FROM ", quote_identifier(source), in, " GROUP BY ",
                     columns, beside ? " " : "", beside ? conn.sql().share_lock() : ""));
    record_filled(conn, totals, record_types);
    conn.execute("COMMIT");
  });
}

void verify_totals_filled(connection& conn, const std::string& table, const store::top_spec& top) {
  if (top.empty()) return;
  std::vector<std::string> tables{totals_table(table)};
  for (const auto g : store::all_granularities) {
    if (top.uses(g)) tables.push_back(bucket_totals_table(table, g));
  }
  for (const auto& t : tables) {
    const auto unfilled = unfilled_record_types(conn, t, top);
    if (unfilled.empty()) continue;
    throw db_error(
        error_class::fatal,
        cat("counters[].top is on for record_type ", num(unfilled.front()), " but table `", t,
            "` was not filled with its counts (top was turned on for a counter that "
            "already had counts, or the totals were made by a version before "
            "it): top-N would miss what it counted before; run slotted-counterd "
            "--migrate (it fills the totals of those record types from their rows)"));
  }
}

}  // namespace slotted::db
