#pragma once
// Private to the SQL builders (db/sql*.cpp, db/log_positions.cpp): appending numbers,
// lists and tuples to statement text.

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "db/driver.hpp"
#include "util/decimal.hpp"

namespace slotted::db::sql_text {

template <typename Int>
void append_int(std::string& out, Int value) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, r.ptr);
}
// Appends "(a,b,...)": the values of an IN list.
template <typename Ints>
void append_int_list(std::string& out, const Ints& values) {
  out.push_back('(');
  bool first = true;
  for (const auto v : values) {
    if (!first) out.push_back(',');
    first = false;
    append_int(out, v);
  }
  out.push_back(')');
}
// Appends "a,b,...": integers as numbers, anything else (a quoted string, a bucket
// literal) as it is.
template <typename... Values>
void append_values(std::string& out, const Values&... values) {
  bool first = true;
  const auto one = [&](const auto& v) {
    if (!first) out.push_back(',');
    first = false;
    if constexpr (std::is_integral_v<std::remove_cvref_t<decltype(v)>>) {
      append_int(out, v);
    } else {
      out += v;
    }
  };
  (one(values), ...);
}
// Appends "(a,b,...),(...)" with one tuple per row, written by `tuple`.
template <typename Row, typename Tuple>
void append_tuples(std::string& sql, std::span<const Row> rows, Tuple tuple) {
  bool first = true;
  for (const auto& r : rows) {
    if (!first) sql.push_back(',');
    first = false;
    sql.push_back('(');
    tuple(r);
    sql.push_back(')');
  }
}
// "a,b,...": ids as numbers, without parentheses.
inline void append_id_list(std::string& sql, std::span<const std::uint64_t> ids) {
  bool first = true;
  for (const auto id : ids) {
    if (!first) sql.push_back(',');
    first = false;
    append_int(sql, id);
  }
}
// " WHERE `record_type` = T AND `record_id` = I"
inline void append_counter_key(std::string& sql, std::uint32_t record_type,
                               std::uint64_t record_id) {
  sql += " WHERE `record_type` = ";
  append_int(sql, record_type);
  sql += " AND `record_id` = ";
  append_int(sql, record_id);
}
// The unique keys upserts collide on (dialect::on_conflict).
inline constexpr std::string_view counter_key_columns = "`record_type`, `record_id`, `slot`";
inline constexpr std::string_view bucket_key_columns =
    "`record_type`, `record_id`, `bucket`, `slot`";
// The totals tables' keys (db/top.hpp), and the dirty marks' and the pruned rows'.
inline constexpr std::string_view totals_key_columns = "`record_type`, `record_id`";
inline constexpr std::string_view bucket_totals_key_columns =
    "`record_type`, `record_id`, `bucket`";
inline constexpr std::string_view dirty_key_columns = "`record_type`, `record_id`, `instance_id`";
inline constexpr std::string_view pruned_key_columns = "`uniques_table`, `record_type`";

// A number as statement text; 128 bits printed exactly (a total, a DECIMAL(30,0)).
inline std::string num(std::int64_t v) {
  return std::to_string(v);
}
inline std::string num(std::uint64_t v) {
  return std::to_string(v);
}
inline std::string num(std::uint32_t v) {
  return std::to_string(v);
}
inline std::string num(__int128 v) {
  return util::decimal(v);
}

// MariaDB's text of connection::query_limited: `select`, cut by the server after `ms`
// milliseconds (at least 1, at most read_time_limit; max_statement_time, error 1969).
inline std::string time_limited(std::string_view select, std::int64_t ms) {
  ms = std::clamp<std::int64_t>(ms, 1, read_time_limit.count());
  std::string sql = "SET STATEMENT max_statement_time = ";
  sql.append(std::to_string(ms / 1000)).append(".");
  const std::string frac = std::to_string(1000 + ms % 1000);  // three digits
  sql.append(frac.substr(1)).append(" FOR ").append(select);
  return sql;
}

}  // namespace slotted::db::sql_text
