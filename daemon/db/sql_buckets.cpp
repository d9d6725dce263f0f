// The bucket tables' statements (sql.hpp): counts per hour and per day.
#include <cstdio>

#include "db/sql.hpp"
#include "db/sql_text.hpp"

namespace slotted::db {

using namespace sql_text;

std::string bucket_table(std::string_view table, store::granularity g) {
  return std::string(table) + "_" + std::string(store::name_of(g));
}

std::string bucket_literal(store::granularity g, std::int64_t start) {
  // Civil date of a day count (H. Hinnant's days_from_civil, inverted): no time zone,
  // no locale, no libc state.
  const std::int64_t days = start / 86400, secs = start % 86400;
  const std::int64_t z = days + 719468;
  const std::int64_t era = z / 146097;
  const std::int64_t doe = z - era * 146097;
  const std::int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const std::int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const std::int64_t mp = (5 * doy + 2) / 153;
  const std::int64_t d = doy - (153 * mp + 2) / 5 + 1;
  const std::int64_t m = mp < 10 ? mp + 3 : mp - 9;
  const std::int64_t y = yoe + era * 400 + (m <= 2 ? 1 : 0);
  char buf[128];  // room for any int64 fields, though a valid time needs 21
  if (g == store::granularity::day) {
    std::snprintf(buf, sizeof buf, "'%04lld-%02lld-%02lld'", static_cast<long long>(y),
                  static_cast<long long>(m), static_cast<long long>(d));
  } else {
    std::snprintf(buf, sizeof buf, "'%04lld-%02lld-%02lld %02lld:%02lld:%02lld'",
                  static_cast<long long>(y), static_cast<long long>(m), static_cast<long long>(d),
                  static_cast<long long>(secs / 3600), static_cast<long long>(secs / 60 % 60),
                  static_cast<long long>(secs % 60));
  }
  return buf;
}

std::string create_bucket_table(const dialect& d, std::string_view table, store::granularity g) {
  // The UTC start of the bucket (see sql.hpp).
  const auto bucket = g == store::granularity::day ? column_type::date : column_type::date_time;
  return d.create_table({bucket_table(table, g),
                         {{"`record_type`", column_type::u32},
                          {"`record_id`", column_type::u64},
                          {"`bucket`", bucket},
                          {"`slot`", column_type::u16},
                          {"`count`", column_type::i64}},
                         bucket_key_columns,
                         // Retention deletes the oldest buckets of one record type through this.
                         {{"by_age", "`record_type`, `bucket`"}}});
}

std::string bucket_upsert_statement(const dialect& d, std::string_view table, store::granularity g,
                                    std::span<const store::bucket_row> rows) {
  std::string sql;
  sql.reserve(128 + rows.size() * 64);
  sql += "INSERT INTO ";
  const std::string t = quote_identifier(bucket_table(table, g));
  sql += t;
  sql += " (`record_type`, `record_id`, `bucket`, `slot`, `count`) VALUES ";
  append_tuples(sql, rows, [&](const store::bucket_row& r) {
    append_values(sql, r.record_type, r.record_id, bucket_literal(g, r.bucket), r.slot, r.delta);
  });
  sql += d.on_conflict(bucket_key_columns);
  sql += d.adding(t, "`count`");
  return sql;
}

std::string bucket_series_select(const dialect& d, std::string_view table, store::granularity g,
                                 std::uint32_t record_type, std::uint64_t record_id,
                                 std::int64_t from, std::int64_t to) {
  std::string sql = "SELECT " + d.epoch_seconds("`bucket`") + ", SUM(`count`) FROM " +
                    quote_identifier(bucket_table(table, g)) + " WHERE `record_type` = ";
  append_int(sql, record_type);
  sql += " AND `record_id` = ";
  append_int(sql, record_id);
  sql += " AND `bucket` BETWEEN " + bucket_literal(g, from) + " AND " + bucket_literal(g, to);
  sql += " GROUP BY `bucket` ORDER BY `bucket`";
  return sql;
}

std::string bucket_prune_select(const dialect& d, std::string_view table, store::granularity g,
                                std::uint32_t record_type, std::int64_t before, std::size_t limit) {
  // A plain (consistent, lock-free) read of the index alone: it holds record_id and
  // slot after (record_type, bucket), in the order asked for.
  std::string sql = "SELECT " + d.epoch_seconds("`bucket`") + ", `record_id` FROM " +
                    quote_identifier(bucket_table(table, g)) + d.index_hint("`by_age`") +
                    " WHERE `record_type` = ";
  append_int(sql, record_type);
  sql += " AND `bucket` < " + bucket_literal(g, before) + " ORDER BY `bucket`, `record_id` LIMIT ";
  append_int(sql, limit);
  return sql;
}

std::string bucket_prune_delete(std::string_view table, store::granularity g,
                                std::uint32_t record_type, std::int64_t bucket,
                                std::span<const std::uint64_t> record_ids) {
  // Primary-key prefixes (record_type, record_id, bucket): MariaDB reads and locks
  // those rows only, whatever share of the type's rows is old.
  std::string sql =
      "DELETE FROM " + quote_identifier(bucket_table(table, g)) + " WHERE `record_type` = ";
  append_int(sql, record_type);
  sql += " AND `bucket` = " + bucket_literal(g, bucket) + " AND `record_id` IN ";
  append_int_list(sql, record_ids);
  return sql;
}

}  // namespace slotted::db
