// The dirty marks, rollup and adoptions tables' statements (sql.hpp).
#include "db/sql.hpp"
#include "db/sql_text.hpp"

namespace slotted::db {

using namespace sql_text;

std::string create_dirty_table() {
  return create_table(quote_identifier(dirty_table),
                      "  `record_type` INT UNSIGNED NOT NULL,\n"
                      "  `record_id` BIGINT UNSIGNED NOT NULL,\n"
                      "  `instance_id` VARCHAR(64) NOT NULL,\n"
                      "  `gen` BIGINT UNSIGNED NOT NULL,\n"
                      "  PRIMARY KEY (`record_type`, `record_id`, `instance_id`)\n");
}

std::string create_adoptions_table() {
  // Identifiers are ASCII (config::is_valid_identifier), stored as the config spelled
  // them; sql_adopt.cpp's key_condition compares the table as MariaDB compares table
  // names on Linux (case-sensitively) and the column ignoring case.
  return create_table(
      quote_identifier(adoptions_table),
      "  `record_type` INT UNSIGNED NOT NULL,\n"
      "  `owner_table` VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n"
      "  `count_column` VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n"
      "  `id_column` VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n"
      "  `state` ENUM('running', 'done') NOT NULL,\n"
      "  `mode` ENUM('history', 'no_history', 'zeros') NOT NULL,\n"
      "  `last_id` BIGINT UNSIGNED NULL,\n"
      "  `rows_taken` BIGINT UNSIGNED NOT NULL DEFAULT 0,\n"
      "  `total_taken` DECIMAL(65, 0) NOT NULL DEFAULT 0,\n"
      "  `started` DATETIME NOT NULL,\n"
      "  `finished` DATETIME NULL,\n"
      "  PRIMARY KEY (`record_type`, `owner_table`, `count_column`)\n");
}

std::string dirty_upsert(std::string_view quoted_instance, std::span<const counter_row> rows,
                         std::uint64_t gen) {
  std::string sql = "INSERT INTO " + quote_identifier(dirty_table) +
                    " (`record_type`, `record_id`, `instance_id`, `gen`) VALUES ";
  sql.reserve(sql.size() + rows.size() * (32 + quoted_instance.size()));
  append_tuples(sql, rows, [&](const counter_row& r) {
    append_values(sql, r.record_type, r.record_id, quoted_instance, gen);
  });
  sql += " ON DUPLICATE KEY UPDATE `gen` = VALUES(`gen`)";
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

std::string rollup_update(std::string_view counters_table, std::uint32_t record_type,
                          std::string_view owner_table, std::string_view id_column,
                          std::string_view count_column, std::span<const std::uint64_t> ids) {
  // A LEFT JOIN: a marked counter without slot rows (reset) is set to 0, not skipped.
  std::string sql = "UPDATE " + quote_identifier(owner_table) +
                    " AS o LEFT JOIN (SELECT `record_id`, SUM(`count`) AS total FROM " +
                    quote_identifier(counters_table) + " WHERE `record_type` = ";
  append_int(sql, record_type);
  sql += " AND `record_id` IN (";
  append_id_list(sql, ids);
  sql += ") GROUP BY `record_id`) AS s ON o." + quote_identifier(id_column) +
         " = s.`record_id` SET o." + quote_identifier(count_column) +
         " = COALESCE(s.total, 0) WHERE o." + quote_identifier(id_column) + " IN (";
  append_id_list(sql, ids);
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
