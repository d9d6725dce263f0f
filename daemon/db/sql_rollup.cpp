// The dirty marks, rollup and adoptions tables' statements (sql.hpp).
#include "db/sql.hpp"
#include "db/sql_text.hpp"

namespace slotted::db {

using namespace sql_text;

std::string create_dirty_table(const dialect& d) {
  return d.create_table({std::string(dirty_table),
                         {{"`record_type`", column_type::u32},
                          {"`record_id`", column_type::u64},
                          {"`instance_id`", column_type::text64},
                          {"`gen`", column_type::u64}},
                         dirty_key_columns});
}

std::string create_adoptions_table(const dialect& d) {
  // Identifiers are ASCII (config::is_valid_identifier), stored as the config spelled
  // them; sql_adopt.cpp's key_condition compares the table as MariaDB compares table
  // names on Linux (case-sensitively) and the column ignoring case.
  return d.create_table({std::string(adoptions_table),
                         {{"`record_type`", column_type::u32},
                          {"`owner_table`", column_type::ascii_bin64},
                          {"`count_column`", column_type::ascii_bin64},
                          {"`id_column`", column_type::ascii_bin64},
                          {"`state`", column_type::state_enum},
                          {"`mode`", column_type::adoption_mode},
                          {"`last_id`", column_type::u64, true},
                          {"`rows_taken`", column_type::u64, false, "0"},
                          {"`total_taken`", column_type::big_total, false, "0"},
                          {"`started`", column_type::date_time},
                          {"`finished`", column_type::date_time, true}},
                         "`record_type`, `owner_table`, `count_column`"});
}

std::string dirty_upsert(const dialect& d, std::string_view quoted_instance,
                         std::span<const counter_row> rows, std::uint64_t gen) {
  std::string sql = "INSERT INTO " + quote_identifier(dirty_table) +
                    " (`record_type`, `record_id`, `instance_id`, `gen`) VALUES ";
  sql.reserve(sql.size() + rows.size() * (32 + quoted_instance.size()));
  append_tuples(sql, rows, [&](const counter_row& r) {
    append_values(sql, r.record_type, r.record_id, quoted_instance, gen);
  });
  sql += d.on_conflict(dirty_key_columns);
  sql += "`gen` = " + d.incoming("`gen`");
  return sql;
}

std::string dirty_select(std::uint32_t record_type, std::size_t limit, const dirty_cursor& cursor) {
  std::string sql = "SELECT `record_id`, `instance_id`, `gen` FROM " +
                    quote_identifier(dirty_table) + " WHERE `record_type` = ";
  append_int(sql, record_type);
  sql += " AND `record_id` <= ";
  append_int(sql, cursor.max_record_id);
  if (cursor.started) {
    sql += " AND (`record_id` > ";
    append_int(sql, cursor.last_record_id);
    sql += " OR (`record_id` = ";
    append_int(sql, cursor.last_record_id);
    sql += " AND `instance_id` > " + cursor.last_quoted_instance + "))";
  }
  sql += " ORDER BY `record_id`, `instance_id` LIMIT ";
  append_int(sql, limit);
  return sql;
}

std::string dirty_max_record_id(std::uint32_t record_type) {
  std::string sql =
      "SELECT MAX(`record_id`) FROM " + quote_identifier(dirty_table) + " WHERE `record_type` = ";
  append_int(sql, record_type);
  return sql;
}

std::string dirty_delete(std::uint32_t record_type, std::span<const dirty_mark> marks) {
  std::string sql = "DELETE FROM " + quote_identifier(dirty_table) + " WHERE `record_type` = ";
  append_int(sql, record_type);
  sql += " AND (`record_id`, `instance_id`, `gen`) IN (";
  append_tuples(sql, marks, [&](const dirty_mark& m) {
    append_values(sql, m.record_id, m.quoted_instance, m.gen);
  });
  sql.push_back(')');
  return sql;
}

std::string owner_ids_select(std::string_view owner_table, std::string_view id_column,
                             std::span<const std::uint64_t> ids) {
  std::string sql = "SELECT " + quote_identifier(id_column) + " FROM " +
                    quote_identifier(owner_table) + " WHERE " + quote_identifier(id_column) +
                    " IN (";
  append_id_list(sql, ids);
  sql += ") ORDER BY " + quote_identifier(id_column) + " FOR UPDATE";
  return sql;
}

}  // namespace slotted::db
