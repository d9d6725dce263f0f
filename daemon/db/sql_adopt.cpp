#include "db/sql_adopt.hpp"

#include "db/sql.hpp"
#include "db/sql_text.hpp"

namespace slotted::db {

namespace {

std::string literal(std::string_view identifier) {
  // Appended, not "'" + std::string(...): gcc 12 at -O2 reports a false -Wrestrict
  // (GCC bug 105329) for operator+(const char*, std::string&&).
  std::string s;
  s.reserve(identifier.size() + 2);
  s.append(1, '\'').append(identifier).append(1, '\'');
  return s;
}

// The table compared as MariaDB compares table names on Linux (case-sensitively, the
// column's ascii_bin), the column as it compares column names: ignoring case, so that the
// adopted column spelled otherwise in the config is still the adopted one.
std::string key_condition(const rollup_target& t) {
  return " WHERE `record_type` = " + std::to_string(t.record_type) +
         " AND `owner_table` = " + literal(t.table) + " AND LOWER(`count_column`) = LOWER(" +
         literal(t.count_column) + ")";
}

std::string id_of(const rollup_target& t) {
  return "o." + quote_identifier(t.id_column);
}
std::string count_of(const rollup_target& t) {
  return "o." + quote_identifier(t.count_column);
}
std::string from_owner(const rollup_target& t) {
  return " FROM " + quote_identifier(t.table) + " AS o";
}

// " WHERE <range>" (always a WHERE: TRUE for the whole table, as both engines read it).
std::string where_range(const rollup_target& t, const id_range& r) {
  std::string sql = " WHERE ";
  if (!r.after && !r.upto) return sql + "TRUE";
  if (r.after) sql += id_of(t) + " > " + std::to_string(*r.after);
  if (r.after && r.upto) sql += " AND ";
  if (r.upto) sql += id_of(t) + " <= " + std::to_string(*r.upto);
  return sql;
}
}  // namespace

std::string state_select(const rollup_target& t, bool for_update) {
  return "SELECT `state`, `mode`, `last_id`, `rows_taken`, `total_taken` FROM " +
         quote_identifier(adoptions_table) + key_condition(t) + (for_update ? " FOR UPDATE" : "");
}

std::string state_insert(const dialect& d, const rollup_target& t, std::string_view state,
                         std::string_view mode) {
  const bool done = state == "done";
  const std::string now(d.utc_now());
  return std::string(d.insert_ignore()) + quote_identifier(adoptions_table) +
         " (`record_type`, `owner_table`, `count_column`, `id_column`, `state`, `mode`, "
         "`started`, `finished`) VALUES (" +
         std::to_string(t.record_type) + ", " + literal(t.table) + ", " + literal(t.count_column) +
         ", " + literal(t.id_column) + ", " + literal(state) + ", " + literal(mode) + ", " + now +
         ", " + (done ? now : "NULL") + ")" + std::string(d.ignore_conflicts());
}

std::string state_advance(const dialect& d, const rollup_target& t,
                          std::optional<std::uint64_t> last_id, std::uint64_t rows,
                          std::string_view total, bool done) {
  std::string sql = "UPDATE " + quote_identifier(adoptions_table) + " SET ";
  if (last_id) sql += "`last_id` = " + std::to_string(*last_id) + ", ";
  sql += "`rows_taken` = `rows_taken` + " + std::to_string(rows) +
         ", `total_taken` = `total_taken` + " + std::string(total);
  if (done) sql += ", `state` = 'done', `finished` = " + std::string(d.utc_now());
  return sql + key_condition(t);
}

std::string bad_row_condition(const rollup_target& t, const row_limits& limits) {
  const auto id = id_of(t), count = count_of(t);
  return "(" + id + " IS NULL OR " + id + " < 0 OR " + id + " > " + std::to_string(limits.max_id) +
         " OR " + count + " IS NULL OR " + count + " < 0 OR " + count + " > " +
         std::to_string(limits.max_count) + ")";
}

std::string validation_select(const rollup_target& t, const row_limits& limits,
                              const id_range& range) {
  // COUNT(CASE ...), not SUM of the condition: PostgreSQL has no SUM of a boolean.
  return "SELECT COUNT(*), COUNT(CASE WHEN " + bad_row_condition(t, limits) + " THEN 1 END)" +
         from_owner(t) + where_range(t, range);
}

std::string first_bad_row_select(const rollup_target& t, const row_limits& limits,
                                 const id_range& range) {
  return "SELECT " + id_of(t) + ", " + count_of(t) + from_owner(t) + where_range(t, range) +
         " AND " + bad_row_condition(t, limits) + " ORDER BY " + id_of(t) + " LIMIT 1";
}

std::string batch_upper_select(const rollup_target& t, std::optional<std::uint64_t> after,
                               std::size_t batch_rows) {
  return "SELECT " + id_of(t) + from_owner(t) + where_range(t, {after, std::nullopt}) +
         " ORDER BY " + id_of(t) + " LIMIT 1 OFFSET " +
         std::to_string(batch_rows == 0 ? 0 : batch_rows - 1);
}

std::string batch_check_select(const rollup_target& t, const row_limits& limits,
                               const id_range& range) {
  const auto count = count_of(t);
  return "SELECT COUNT(CASE WHEN " + bad_row_condition(t, limits) +
         " THEN 1 END), COUNT(CASE WHEN " + count + " > 0 THEN 1 END), COALESCE(SUM(CASE WHEN " +
         count + " > 0 THEN " + count + " END), 0), MAX(" + id_of(t) + ")" + from_owner(t) +
         where_range(t, range);
}

std::string take_batch_insert(const dialect& d, std::string_view counters_table,
                              const rollup_target& t, const id_range& range) {
  const std::string counters = quote_identifier(counters_table);
  return "INSERT INTO " + counters + " (`record_type`, `record_id`, `slot`, `count`) SELECT " +
         std::to_string(t.record_type) + ", " + id_of(t) + ", 0, " + count_of(t) + from_owner(t) +
         where_range(t, range) + " AND " + count_of(t) + " > 0 ORDER BY " + id_of(t) +
         d.on_conflict(sql_text::counter_key_columns) + "`count` = " + counters + ".`count` + " +
         d.incoming("`count`");
}

std::string batch_rows_select(const rollup_target& t, const id_range& range) {
  return "SELECT " + id_of(t) + ", " + count_of(t) + from_owner(t) + where_range(t, range) +
         " ORDER BY " + id_of(t);
}

std::string nonzero_select(const rollup_target& t) {
  return "SELECT 1" + from_owner(t) + " WHERE " + count_of(t) + " <> 0 LIMIT 1";
}

}  // namespace slotted::db
