// The totals tables' SQL (db/top.hpp), pure: their names and CREATE TABLE, the upserts a
// batch adds, a reset's and the retention's statements; and the many-counter read's
// SELECT (sql.hpp select_counts).
#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "db/sql_text.hpp"
#include "db/top.hpp"

namespace slotted::db {

using sql_text::num;

std::string select_counts(std::string_view table, std::uint32_t record_type,
                          std::span<const std::uint64_t> record_ids) {
  // SUM printed exactly, as in select_count.
  std::string sql = "SELECT `record_id`, COALESCE(SUM(`count`), 0) FROM " +
                    quote_identifier(table) + " WHERE `record_type` = ";
  sql_text::append_int(sql, record_type);
  sql += " AND `record_id` IN ";
  sql_text::append_int_list(sql, record_ids);
  sql += " GROUP BY `record_id`";
  return sql;
}

std::string totals_table(std::string_view table) {
  return std::string(table) + "_totals";
}

std::string bucket_totals_table(std::string_view table, store::granularity g) {
  return bucket_table(table, g) + "_totals";
}

std::string create_totals_table(const dialect& d, std::string_view table) {
  // DECIMAL: the sum of a counter's slots may pass BIGINT (read_count reads 128 bits).
  return d.create_table({totals_table(table),
                         {{"`record_type`", column_type::u32},
                          {"`record_id`", column_type::u64},
                          {"`count`", column_type::total}},
                         sql_text::totals_key_columns,
                         // A top-N is a range read of this index, in its order (MariaDB 10.8
                         // and later keep DESC; an older server sorts the record type's rows
                         // instead).
                         {{"by_count", "`record_type`, `count` DESC, `record_id`"}}});
}

std::string create_bucket_totals_table(const dialect& d, std::string_view table,
                                       store::granularity g) {
  const auto bucket = g == store::granularity::day ? column_type::date : column_type::date_time;
  return d.create_table({bucket_totals_table(table, g),
                         {{"`record_type`", column_type::u32},
                          {"`record_id`", column_type::u64},
                          {"`bucket`", bucket},
                          {"`count`", column_type::total}},
                         sql_text::bucket_totals_key_columns,
                         {{"by_count", "`record_type`, `bucket`, `count` DESC, `record_id`"}}});
}

namespace {

// Multi-row upserts of VALUES tuples under `head` (into `table`, quoted, on its primary
// key `key`, adding to `count`), each statement at most `max_bytes`
// long (as the slot statements are formed, see flush::batch_forming), at least one tuple
// a statement; in the order added.
class upsert_cutter {
 public:
  upsert_cutter(std::vector<std::string>& out, const dialect& d, const std::string& table,
                std::string_view key, std::string_view columns, std::size_t max_bytes)
      : out_(out),
        head_("INSERT INTO " + table + " (" + std::string(columns) + ") VALUES "),
        update_(d.on_conflict(key) + d.adding(table, "`count`")),
        max_bytes_(max_bytes) {}
  void add(const std::string& tuple) {
    if (!sql_.empty() && sql_.size() + 1 + tuple.size() + update_.size() > max_bytes_) finish();
    sql_ += sql_.empty() ? head_ : ",";
    sql_ += tuple;
  }
  void finish() {
    if (!sql_.empty()) out_.push_back(std::exchange(sql_, {}) + update_);
  }

 private:
  std::vector<std::string>& out_;
  std::string head_, update_, sql_;
  std::size_t max_bytes_;
};

// The bucket totals of `buckets` of granularity `g` (of counters `top` keeps), summed per
// counter and bucket, in key order.
void bucket_totals_upserts(std::vector<std::string>& out, const dialect& d, std::string_view table,
                           store::granularity g, std::span<const store::bucket_row> buckets,
                           const store::top_spec& top, std::size_t max_bytes) {
  std::map<std::tuple<std::uint32_t, std::uint64_t, std::int64_t>, __int128> sums;
  for (const auto& b : buckets) {
    if (b.gran == g && top.keeps(b.record_type))
      sums[{b.record_type, b.record_id, b.bucket}] += b.delta;
  }
  upsert_cutter cut(out, d, quote_identifier(bucket_totals_table(table, g)),
                    sql_text::bucket_totals_key_columns,
                    "`record_type`, `record_id`, `bucket`, `count`", max_bytes);
  for (const auto& [key, delta] : sums) {
    if (delta == 0) continue;
    // Appended piece by piece: `"(" + num(...)` trips gcc 12's false -Wrestrict at -O3.
    std::string tuple(1, '(');
    tuple.append(num(std::get<0>(key))).append(1, ',').append(num(std::get<1>(key)));
    tuple.append(1, ',').append(bucket_literal(g, std::get<2>(key)));
    tuple.append(1, ',').append(num(delta)).append(1, ')');
    cut.add(std::move(tuple));
  }
  cut.finish();
}

// A reset's bucket totals of `key` in granularity `g` lowered by `lost` (negative
// deltas): UPDATEs, never upserts, so a bucket whose totals row is gone (pruned) gets no
// row of a negative count; each statement at most `max_bytes` long (one bucket at least).
void bucket_totals_lowered(std::vector<std::string>& out, std::string_view table,
                           store::granularity g, const store::counter_key& key,
                           std::span<const store::bucket_row> lost, std::size_t max_bytes) {
  std::map<std::int64_t, __int128> sums;  // bucket order: the index's, the lock order's
  for (const auto& b : lost) {
    if (b.gran == g && b.record_type == key.record_type && b.record_id == key.record_id)
      sums[b.bucket] += b.delta;
  }
  std::string head = "UPDATE ";
  head.append(quote_identifier(bucket_totals_table(table, g)))
      .append(" SET `count` = `count` + CASE `bucket`");
  std::string tail = " END WHERE `record_type` = ";
  tail.append(num(key.record_type)).append(" AND `record_id` = ").append(num(key.record_id));
  tail.append(" AND `bucket` IN (");
  std::string cases, in;
  const auto finish = [&] {
    if (cases.empty()) return;
    std::string sql = head;
    sql.append(cases).append(tail).append(in).append(1, ')');
    out.push_back(std::move(sql));
    cases.clear();
    in.clear();
  };
  for (const auto& [bucket, delta] : sums) {
    if (delta == 0) continue;
    const std::string lit = bucket_literal(g, bucket);
    std::string when = " WHEN ";
    when.append(lit).append(" THEN ").append(num(delta));
    if (!cases.empty() &&
        head.size() + cases.size() + when.size() + tail.size() + in.size() + lit.size() + 2 >
            max_bytes)
      finish();
    cases += when;
    if (!in.empty()) in += ',';
    in += lit;
  }
  finish();
}

}  // namespace

std::vector<std::string> totals_upserts(const dialect& d, std::string_view table,
                                        std::span<const counter_row> rows,
                                        std::span<const store::bucket_row> buckets,
                                        const store::top_spec& top, std::size_t max_bytes) {
  std::vector<std::string> out;
  if (top.empty()) return out;  // counters[].top off everywhere: no totals table
  // Summed per key, in key order (the lock order's).
  std::map<std::pair<std::uint32_t, std::uint64_t>, __int128> totals;
  for (const auto& r : rows) {
    if (top.keeps(r.record_type)) totals[{r.record_type, r.record_id}] += r.delta;
  }
  upsert_cutter cut(out, d, quote_identifier(totals_table(table)), sql_text::totals_key_columns,
                    "`record_type`, `record_id`, `count`", max_bytes);
  for (const auto& [key, delta] : totals) {
    if (delta == 0) continue;  // a row of delta 0 carries buckets only
    std::string tuple(1, '(');
    tuple.append(num(key.first)).append(1, ',').append(num(key.second));
    tuple.append(1, ',').append(num(delta)).append(1, ')');
    cut.add(std::move(tuple));
  }
  cut.finish();
  for (const auto g : store::all_granularities)
    bucket_totals_upserts(out, d, table, g, buckets, top, max_bytes);
  return out;
}

std::string reset_bucket_sums_select_locked(const dialect& d, std::string_view table,
                                            store::granularity g, const store::counter_key& key,
                                            std::span<const std::int64_t> slots) {
  std::string sql = "SELECT " + d.epoch_seconds("`bucket`") + ", `count` FROM " +
                    quote_identifier(bucket_table(table, g)) +
                    " WHERE `record_type` = " + num(key.record_type) +
                    " AND `record_id` = " + num(key.record_id) + " AND `slot` IN (";
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (i > 0) sql += ',';
    sql += num(slots[i]);
  }
  return sql + ") ORDER BY `bucket`, `slot` FOR UPDATE";
}

std::string bucket_totals_prune_delete(std::string_view table, store::granularity g,
                                       std::uint32_t record_type, std::int64_t bucket,
                                       std::span<const std::uint64_t> ids) {
  std::string sql = "DELETE FROM " + quote_identifier(bucket_totals_table(table, g)) +
                    " WHERE `record_type` = " + num(record_type) +
                    " AND `bucket` = " + bucket_literal(g, bucket) + " AND `record_id` IN (";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) sql += ',';
    sql += num(ids[i]);
  }
  return sql + ")";
}

std::vector<std::string> reset_totals_statements(std::string_view table,
                                                 const store::counter_key& key, __int128 persisted,
                                                 std::span<const store::bucket_row> lost_buckets,
                                                 std::span<const store::granularity> grans,
                                                 std::size_t max_bytes) {
  const std::string where =
      " WHERE `record_type` = " + num(key.record_type) + " AND `record_id` = " + num(key.record_id);
  // `<table>_totals` first, even when nothing is subtracted (its DELETE takes the row's
  // lock), then each granularity's table: the lock order's 5 (repository.hpp).
  std::vector<std::string> out;
  if (persisted != 0) {
    out.push_back("UPDATE " + quote_identifier(totals_table(table)) + " SET `count` = `count` - " +
                  num(persisted) + where);
  }
  out.push_back("DELETE FROM " + quote_identifier(totals_table(table)) + where +
                " AND `count` = 0");
  for (const auto g : store::all_granularities) {
    if (std::find(grans.begin(), grans.end(), g) == grans.end()) continue;
    bucket_totals_lowered(out, table, g, key, lost_buckets, max_bytes);
    out.push_back("DELETE FROM " + quote_identifier(bucket_totals_table(table, g)) + where +
                  " AND `count` = 0");
  }
  return out;
}

}  // namespace slotted::db
