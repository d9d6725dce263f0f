// MariaDB's statement text (db/dialect.hpp).
#include "db/dialect.hpp"
#include "db/sql.hpp"
#include "db/sql_text.hpp"

namespace slotted::db {

namespace {

using namespace sql_text;

const char* type_name(column_type t) {
  switch (t) {
    case column_type::u8:
      return "TINYINT UNSIGNED";
    case column_type::u16:
      return "SMALLINT UNSIGNED";
    case column_type::u32:
      return "INT UNSIGNED";
    case column_type::u64:
      return "BIGINT UNSIGNED";
    case column_type::i64:
      return "BIGINT";
    case column_type::total:
      return "DECIMAL(30,0)";
    case column_type::big_total:
      return "DECIMAL(65, 0)";
    case column_type::text64:
      return "VARCHAR(64)";
    case column_type::ascii64:
      return "VARCHAR(64) CHARACTER SET ascii";
    case column_type::ascii_bin64:
      return "VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin";
    case column_type::hash32:
      return "CHAR(32) CHARACTER SET ascii";
    case column_type::ascii_key128:
    case column_type::bytes128:
      return "VARBINARY(128)";
    case column_type::bytes512:
      return "VARBINARY(512)";
    case column_type::date_time:
      return "DATETIME";
    case column_type::date:
      return "DATE";
    case column_type::moment:
      return "TIMESTAMP";
    case column_type::moment_ms:
      return "TIMESTAMP(3)";
    case column_type::state_enum:
      return "ENUM('running', 'done')";
    case column_type::adoption_mode:
      return "ENUM('history', 'no_history', 'zeros')";
  }
  return "";
}

class mariadb final : public dialect {
  static std::string schema_select(std::string_view columns, std::string_view view,
                                   std::string_view quoted_table, std::string_view rest = {}) {
    return dialect::schema_select(" WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ", columns,
                                  view, quoted_table, rest);
  }

 public:
  std::string table_exists_select(std::string_view quoted_table) const override {
    return schema_select("1", "TABLES", quoted_table);
  }
  std::string columns_select(std::string_view quoted_table) const override {
    return schema_select("LOWER(COLUMN_NAME), LOWER(DATA_TYPE), LOWER(COLUMN_TYPE)", "COLUMNS",
                         quoted_table);
  }
  std::string unique_index_columns_select(std::string_view quoted_table) const override {
    return schema_select("INDEX_NAME, LOWER(COLUMN_NAME)", "STATISTICS", quoted_table,
                         " AND NON_UNIQUE = 0 ORDER BY INDEX_NAME, SEQ_IN_INDEX");
  }
  std::string column_exists_select(std::string_view quoted_table,
                                   std::string_view quoted_column) const override {
    return schema_select("1", "COLUMNS", quoted_table,
                         std::string(" AND COLUMN_NAME = ").append(quoted_column));
  }
  std::string index_exists_select(std::string_view quoted_table,
                                  std::string_view quoted_index) const override {
    return schema_select("1", "STATISTICS", quoted_table,
                         std::string(" AND INDEX_NAME = ").append(quoted_index).append(" LIMIT 1"));
  }
  std::string autoincrement_column_select(std::string_view quoted_table) const override {
    return schema_select("COLUMN_NAME, LOWER(DATA_TYPE), LOWER(COLUMN_TYPE)", "COLUMNS",
                         quoted_table, " AND EXTRA LIKE '%auto_increment%'");
  }
  std::string autoincrement_next_select(std::string_view quoted_table,
                                        std::string_view) const override {
    return schema_select("AUTO_INCREMENT, @@SESSION.auto_increment_increment", "TABLES",
                         quoted_table);
  }
  // One statement, its keys inline: every table the daemon creates, with the one set of
  // table options.
  std::string create_table(const table_def& t) const override {
    std::string columns = column_lines(t, type_name, nullptr);
    for (const auto& i : t.indexes) {
      columns.append(",\n  KEY ").append(quote_identifier(i.name)).append(" (");
      columns.append(i.columns).append(")");
    }
    columns.append("\n");
    std::string sql = "CREATE TABLE IF NOT EXISTS ";
    sql.append(quote_identifier(t.name)).append(" (\n").append(columns).append(") ENGINE=InnoDB");
    return sql;
  }
  std::string on_conflict(std::string_view) const override { return " ON DUPLICATE KEY UPDATE "; }
  std::string existing(std::string_view, std::string_view column) const override {
    return std::string(column);
  }
  std::string incoming(std::string_view column) const override {
    return "VALUES(" + std::string(column) + ")";
  }
  std::string_view insert_ignore() const override { return "INSERT IGNORE INTO "; }
  std::string_view ignore_conflicts() const override { return ""; }
  std::string choose(std::string_view condition, std::string_view then,
                     std::string_view otherwise) const override {
    std::string out = "IF(";
    out.append(condition).append(", ").append(then).append(", ").append(otherwise).append(")");
    return out;
  }
  std::string_view share_lock() const override { return "LOCK IN SHARE MODE"; }
  std::string locked_within(std::string_view select, std::uint32_t seconds) const override {
    std::string out(select);
    out.append(" FOR UPDATE WAIT ").append(num(seconds));
    return out;
  }
  // NOW(3): the session's time_zone is UTC (db/sql.hpp session_setup).
  std::string older_than(std::string_view column, std::uint64_t seconds) const override {
    std::string out(column);
    out.append(" < NOW(3) - INTERVAL ").append(num(seconds)).append(" SECOND");
    return out;
  }
  std::string_view utc_now() const override { return "UTC_TIMESTAMP()"; }
  // UTC_TIMESTAMP is a DATETIME (to year 9999), independent of the session's time_zone.
  std::string_view now_ms() const override {
    return "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(3)) DIV 1000)";
  }
  std::string_view now_seconds_select() const override { return "SELECT UNIX_TIMESTAMP()"; }
  // From the epoch as text: unix seconds of a UTC value, whatever the session's time_zone.
  std::string epoch_seconds(std::string_view column) const override {
    return "TIMESTAMPDIFF(SECOND, '1970-01-01 00:00:00', " + std::string(column) + ")";
  }
  std::string index_hint(std::string_view index) const override {
    return " FORCE INDEX (" + std::string(index) + ")";
  }
  // The multi-table form, for its index hint: without it the optimizer may scan the
  // table for a long IN list and wait on (and lock) rows it does not delete.
  bool locks_beside_group_by() const override { return true; }
  bool transactional_ddl() const override { return false; }
  std::string widen_autoincrement(std::string_view table, std::string_view column) const override {
    return "ALTER TABLE " + quote_identifier(table) + " MODIFY " + quote_identifier(column) +
           " BIGINT UNSIGNED NOT NULL AUTO_INCREMENT";
  }
  std::string delete_by_primary_key(std::string_view table) const override {
    std::string out = "DELETE ";
    out.append(table).append(" FROM ").append(table).append(" FORCE INDEX (PRIMARY)");
    return out;
  }
  std::string delete_first(std::string_view table, std::string_view where, std::string_view order,
                           std::size_t limit) const override {
    std::string out = "DELETE FROM ";
    out.append(table).append(" WHERE ").append(where).append(" ORDER BY ").append(order);
    out.append(" LIMIT ").append(num(std::uint64_t{limit}));
    return out;
  }
  std::string hex(std::string_view column) const override {
    return "HEX(" + std::string(column) + ")";
  }
  std::string u64_bits(std::uint64_t value) const override { return std::to_string(value); }
  // A LEFT JOIN: a marked counter without slot rows (reset) is set to 0, not skipped.
  std::string rollup_update(std::string_view counters_table, std::uint32_t record_type,
                            std::string_view owner_table, std::string_view id_column,
                            std::string_view count_column,
                            std::span<const std::uint64_t> ids) const override {
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
};

}  // namespace

const dialect& mariadb_dialect() {
  static const mariadb d;
  return d;
}

}  // namespace slotted::db
