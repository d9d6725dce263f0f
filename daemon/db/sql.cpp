// The SQL builders (sql.hpp) of identifiers, schema checks, the counters table and a
// counter's reset; the other tables' are in sql_<table>.cpp.
#include "db/sql.hpp"

#include "db/sql_text.hpp"

namespace slotted::db {

using namespace sql_text;

std::string quote_identifier(std::string_view name) {
  std::string out;
  out.reserve(name.size() + 2);
  out.push_back('`');
  for (char c : name) {
    if (c == '`') out.push_back('`');  // unreachable for valid identifiers; defence in depth
    out.push_back(c);
  }
  out.push_back('`');
  return out;
}

std::string upsert_statement(const dialect& d, std::string_view table,
                             std::span<const counter_row> rows) {
  std::string sql;
  sql.reserve(128 + rows.size() * 40);
  sql += "INSERT INTO ";
  const std::string t = quote_identifier(table);
  sql += t;
  sql += " (`record_type`, `record_id`, `slot`, `count`) VALUES ";
  append_tuples(sql, rows, [&](const counter_row& r) {
    append_values(sql, r.record_type, r.record_id, r.slot, r.delta);
  });
  sql += d.on_conflict(counter_key_columns);
  sql += d.adding(t, "`count`");
  return sql;
}

std::string create_counters_table(const dialect& d, std::string_view table) {
  return d.create_table({std::string(table),
                         {{"`record_type`", column_type::u32},
                          {"`record_id`", column_type::u64},
                          {"`slot`", column_type::u16},
                          {"`count`", column_type::i64}},
                         counter_key_columns});
}

std::string select_count(std::string_view table, std::uint32_t record_type,
                         std::uint64_t record_id) {
  // SUM is DECIMAL and printed exactly: a CAST AS SIGNED would cap a total past
  // 2^63 - 1 silently (read into 128 bits, see db::read_count).
  std::string sql = "SELECT COALESCE(SUM(`count`), 0) FROM " + quote_identifier(table) +
                    " WHERE `record_type` = ";
  append_int(sql, record_type);
  sql += " AND `record_id` = ";
  append_int(sql, record_id);
  return sql;
}

std::string reset_rows_select_locked(std::string_view table, std::uint32_t record_type,
                                     std::uint64_t record_id) {
  std::string sql = "SELECT `slot`, `count` FROM " + quote_identifier(table);
  append_counter_key(sql, record_type, record_id);
  sql += " FOR UPDATE";
  return sql;
}

std::vector<std::string> reset_statements(const dialect& d, std::string_view table,
                                          std::uint32_t record_type, std::uint64_t record_id,
                                          std::span<const std::int64_t> slots,
                                          std::string_view quoted_instance,
                                          std::optional<std::uint64_t> dirty_gen,
                                          std::span<const store::granularity> bucket_grans) {
  // In the writers' lock order (repository.hpp, "Lock order"): slot rows, bucket rows,
  // dirty mark.
  std::vector<std::string> out;
  if (!slots.empty()) {
    std::string sql = "DELETE FROM " + quote_identifier(table);
    append_counter_key(sql, record_type, record_id);
    sql += " AND `slot` IN ";
    append_int_list(sql, slots);
    out.push_back(std::move(sql));
    for (const auto g : bucket_grans) {
      // The bucket rows of exactly the slots read (and locked): a slot another
      // instance inserts meanwhile keeps its buckets with its total.
      std::string b = "DELETE FROM " + quote_identifier(bucket_table(table, g));
      append_counter_key(b, record_type, record_id);
      b += " AND `slot` IN ";
      append_int_list(b, slots);
      out.push_back(std::move(b));
    }
  }
  if (dirty_gen) {
    const counter_row row{record_type, record_id, 0, 0};
    out.push_back(dirty_upsert(d, quoted_instance, std::span(&row, 1), *dirty_gen));
  }
  return out;
}

}  // namespace slotted::db
