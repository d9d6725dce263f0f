// PostgreSQL's statement text (db/dialect.hpp).
#include "db/dialect.hpp"
#include "db/errors.hpp"
#include "db/sql.hpp"
#include "db/sql_text.hpp"

namespace slotted::db {

namespace {

using namespace sql_text;

// Every integer is a bigint (no unsigned types; the few bytes an integer or smallint
// would save are lost to alignment in these keys).
const char* pg_type_name(column_type t) {
  switch (t) {
    case column_type::u8:
    case column_type::u16:
    case column_type::u32:
    case column_type::u64:
    case column_type::i64:
      return "bigint";
    case column_type::total:
      return "numeric(30,0)";
    case column_type::big_total:
      return "numeric(65,0)";
    // Text compared byte for byte, whatever the database's locale.
    case column_type::text64:
    case column_type::ascii64:
    case column_type::ascii_bin64:
      return "varchar(64) COLLATE \"C\"";
    case column_type::ascii_key128:
      return "varchar(128) COLLATE \"C\"";
    case column_type::hash32:
      return "char(32)";
    case column_type::bytes128:
    case column_type::bytes512:
      return "bytea";
    case column_type::date_time:
      return "timestamp(0)";
    case column_type::date:
      return "date";
    case column_type::moment:
      return "timestamptz(0)";
    case column_type::moment_ms:
      return "timestamptz(3)";
    case column_type::state_enum:
    case column_type::adoption_mode:
      return "varchar(16)";
  }
  return "";
}

// The values an enumerated column may hold, for its CHECK; empty for any other.
std::string_view choices(column_type t) {
  switch (t) {
    case column_type::state_enum:
      return "'running', 'done'";
    case column_type::adoption_mode:
      return "'history', 'no_history', 'zeros'";
    default:
      return {};
  }
}

class postgresql final : public dialect {
  static std::string pg_schema_select(std::string_view columns, std::string_view view,
                                      std::string_view quoted_table, std::string_view rest = {}) {
    return schema_select(" WHERE table_schema = current_schema() AND table_name = ", columns, view,
                         quoted_table, rest);
  }

 public:
  std::string table_exists_select(std::string_view quoted_table) const override {
    return pg_schema_select("1", "tables", quoted_table);
  }
  std::string columns_select(std::string_view quoted_table) const override {
    return pg_schema_select("LOWER(column_name), LOWER(data_type), LOWER(data_type)", "columns",
                            quoted_table);
  }
  std::string unique_index_columns_select(std::string_view quoted_table) const override {
    std::string sql =
        "SELECT i.relname, LOWER(a.attname) FROM pg_index x JOIN pg_class i ON i.oid = "
        "x.indexrelid JOIN pg_class t ON t.oid = x.indrelid JOIN pg_namespace n ON n.oid = "
        "t.relnamespace CROSS JOIN LATERAL unnest(x.indkey) WITH ORDINALITY AS k(attnum, ord) "
        "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum WHERE x.indisunique "
        // Only a key that makes its columns unique for every row, now and for ON CONFLICT:
        // valid, not deferred, not partial, no expression, its INCLUDE columns left out.
        "AND x.indisvalid AND x.indimmediate AND x.indpred IS NULL AND x.indexprs IS NULL AND "
        "k.ord <= x.indnkeyatts AND n.nspname = current_schema() AND t.relname = ";
    sql.append(quoted_table).append(" ORDER BY i.relname, k.ord");
    return sql;
  }
  std::string column_exists_select(std::string_view quoted_table,
                                   std::string_view quoted_column) const override {
    return pg_schema_select("1", "columns", quoted_table,
                            std::string(" AND column_name = ").append(quoted_column));
  }
  // Index names are the schema's: create_table prefixes the table's.
  std::string index_exists_select(std::string_view quoted_table,
                                  std::string_view quoted_index) const override {
    std::string sql =
        "SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() AND tablename = ";
    sql.append(quoted_table).append(" AND indexname = ").append(quoted_table);
    sql.append(" || '_' || ").append(quoted_index).append(" LIMIT 1");
    return sql;
  }
  std::string autoincrement_column_select(std::string_view quoted_table) const override {
    return pg_schema_select("column_name, LOWER(data_type), LOWER(data_type)", "columns",
                            quoted_table,
                            " AND (is_identity = 'YES' OR column_default LIKE 'nextval(%')");
  }
  // The sequence's next value: its start before the first, else the last plus the step,
  // in numeric (the last of a bigint sequence plus one does not fit a bigint).
  // pg_sequence_last_value fails without a privilege on the sequence, where pg_sequences
  // would answer NULL, read as "never used".
  std::string autoincrement_next_select(std::string_view quoted_table,
                                        std::string_view quoted_column) const override {
    std::string sql =
        "SELECT COALESCE(pg_sequence_last_value(q.seq) + CAST(s.seqincrement AS numeric), "
        "s.seqstart), s.seqincrement FROM (SELECT CAST(pg_get_serial_sequence(format('%I.%I', "
        "current_schema(), ";
    sql.append(quoted_table).append("), ").append(quoted_column);
    sql.append(") AS regclass) AS seq) AS q JOIN pg_sequence s ON s.seqrelid = q.seq");
    return sql;
  }
  // The table, then each index as a statement of its own, named after the table.
  std::string create_table(const table_def& t) const override {
    // PostgreSQL cuts a longer name to 63 bytes without an error: an index cut to its
    // table's name would be skipped by IF NOT EXISTS, a table not found by its name.
    const auto fits = [&](const std::string& name) {
      if (name.size() > max_identifier_bytes)
        throw db_error(error_class::fatal, "the name `" + name + "` is longer than the " +
                                               std::to_string(max_identifier_bytes) +
                                               " bytes PostgreSQL keeps; choose a shorter table");
    };
    fits(t.name);
    for (const auto& i : t.indexes) fits(t.name + "_" + std::string(i.name));
    const std::string name = quote_identifier(t.name);
    std::string sql = "CREATE TABLE IF NOT EXISTS " + name + " (\n";
    sql.append(column_lines(t, pg_type_name, choices)).append("\n)");
    for (const auto& i : t.indexes) {
      sql.append("; CREATE INDEX IF NOT EXISTS ");
      sql.append(quote_identifier(t.name + "_" + std::string(i.name)));
      sql.append(" ON ").append(name).append(" (").append(i.columns).append(")");
    }
    return sql;
  }
  std::string on_conflict(std::string_view key) const override {
    return " ON CONFLICT (" + std::string(key) + ") DO UPDATE SET ";
  }
  // Unqualified, a column in DO UPDATE SET could be the table's or EXCLUDED's.
  std::string existing(std::string_view table, std::string_view column) const override {
    std::string out(table);
    out.append(".").append(column);
    return out;
  }
  std::string incoming(std::string_view column) const override {
    return "EXCLUDED." + std::string(column);
  }
  std::string_view insert_ignore() const override { return "INSERT INTO "; }
  std::string_view ignore_conflicts() const override { return " ON CONFLICT DO NOTHING"; }
  std::string choose(std::string_view condition, std::string_view then,
                     std::string_view otherwise) const override {
    std::string out = "CASE WHEN ";
    out.append(condition).append(" THEN ").append(then).append(" ELSE ").append(otherwise);
    return out.append(" END");
  }
  std::string_view share_lock() const override { return "FOR SHARE"; }
  // No per-statement wait: the lock_timeout (db/driver_postgresql.cpp sets the session's)
  // lowered for the rest of this transaction.
  std::string locked_within(std::string_view select, std::uint32_t seconds) const override {
    std::string out = "SET LOCAL lock_timeout = '" + num(seconds) + "s'; ";
    out.append(select).append(" FOR UPDATE");
    return out;
  }
  // The transaction's start, as NOW(3) is the statement's on MariaDB: the session is UTC.
  std::string older_than(std::string_view column, std::uint64_t seconds) const override {
    std::string out(column);
    out.append(" < CURRENT_TIMESTAMP - INTERVAL '").append(num(seconds)).append(" seconds'");
    return out;
  }
  std::string_view utc_now() const override { return "(CURRENT_TIMESTAMP AT TIME ZONE 'UTC')"; }
  // The statement's start, as MariaDB's UTC_TIMESTAMP(3): not now(), the transaction's,
  // and not clock_timestamp(), which is volatile, so a comparison with it cannot bound
  // an index scan (the keys' prune would read every key: 117 ms against 0.02 ms at 200k).
  std::string_view now_ms() const override {
    return "CAST(FLOOR(EXTRACT(EPOCH FROM statement_timestamp()) * 1000) AS BIGINT)";
  }
  std::string_view now_seconds_select() const override {
    return "SELECT CAST(FLOOR(EXTRACT(EPOCH FROM statement_timestamp())) AS BIGINT)";
  }
  // A date or a timestamp without time zone: its nominal seconds, no zone applied.
  std::string epoch_seconds(std::string_view column) const override {
    return "CAST(EXTRACT(EPOCH FROM " + std::string(column) + ") AS BIGINT)";
  }
  std::string index_hint(std::string_view) const override { return {}; }
  bool locks_beside_group_by() const override { return false; }
  bool transactional_ddl() const override { return true; }
  std::string widen_autoincrement(std::string_view table, std::string_view column) const override {
    // Appended piece by piece: `"\"" + std::string(...)` trips gcc 12's false -Wrestrict
    // at -O3 (as in sql_adopt.cpp).
    std::string out = "ALTER TABLE \"";
    out += table;
    out += "\" ALTER COLUMN \"";
    out += column;
    out += "\" TYPE bigint, then its sequence: ALTER SEQUENCE <SELECT pg_get_serial_sequence('\"";
    out += table;
    out += "\"', '";
    out += column;
    out += "')> AS bigint";
    return out;
  }
  std::string delete_by_primary_key(std::string_view table) const override {
    return "DELETE FROM " + std::string(table);
  }
  // No ORDER BY or LIMIT on a DELETE: the rows by their physical address.
  std::string delete_first(std::string_view table, std::string_view where, std::string_view order,
                           std::size_t limit) const override {
    std::string out = "DELETE FROM ";
    out.append(table).append(" WHERE ctid IN (SELECT ctid FROM ").append(table);
    out.append(" WHERE ").append(where).append(" ORDER BY ").append(order);
    out.append(" LIMIT ").append(num(std::uint64_t{limit})).append(")");
    return out;
  }
  std::string hex(std::string_view column) const override {
    return "UPPER(ENCODE(" + std::string(column) + ", 'hex'))";
  }
  std::string u64_bits(std::uint64_t value) const override {
    return std::to_string(static_cast<std::int64_t>(value));
  }
  // A correlated sum per owning row (no UPDATE ... LEFT JOIN): through the slotted
  // table's primary key, 0 for a counter without slot rows.
  std::string rollup_update(std::string_view counters_table, std::uint32_t record_type,
                            std::string_view owner_table, std::string_view id_column,
                            std::string_view count_column,
                            std::span<const std::uint64_t> ids) const override {
    std::string sql = "UPDATE " + quote_identifier(owner_table) + " AS o SET " +
                      quote_identifier(count_column) + " = COALESCE((SELECT SUM(`count`) FROM " +
                      quote_identifier(counters_table) + " AS s WHERE s.`record_type` = ";
    append_int(sql, record_type);
    sql += " AND s.`record_id` = o." + quote_identifier(id_column) + "), 0) WHERE o." +
           quote_identifier(id_column) + " IN (";
    append_id_list(sql, ids);
    sql.push_back(')');
    return sql;
  }
};

}  // namespace

const dialect& postgresql_dialect() {
  static const postgresql d;
  return d;
}

std::string postgresql_text(std::string_view sql) {
  std::string out(sql);
  char open = 0;  // the quote we are inside: ', " or `, or none
  for (char& c : out) {
    if (open == 0) {
      if (c == '\'' || c == '"' || c == '`') open = c;
    } else if (c == open) {
      open = 0;
    } else {
      continue;
    }
    if (c == '`') c = '"';
  }
  if (open != 0)
    throw db_error(error_class::fatal, std::string("query: a statement that ends inside a ") +
                                           open + " quote; not sent");
  return out;
}

}  // namespace slotted::db
