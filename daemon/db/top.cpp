#include "db/top.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <functional>
#include <map>
#include <unordered_map>
#include <utility>

#include "db/errors.hpp"
#include "db/repository.hpp"
#include "db/sql_text.hpp"

namespace slotted::db {

using sql_text::num;

namespace {

// A DECIMAL as the server prints it (no fraction: DECIMAL(30,0)), exactly.
__int128 decimal_of(const std::optional<std::string>& text) {
  if (!text || text->empty()) return 0;
  std::string_view s = *text;
  const bool negative = s.front() == '-';
  if (negative) s.remove_prefix(1);
  __int128 v = 0;
  for (const char c : s) {
    if (c == '.') break;
    if (c < '0' || c > '9')
      throw db_error(error_class::other, "a total is not an integer: " + *text);
    v = v * 10 + (c - '0');
  }
  return negative ? -v : v;
}

std::uint64_t id_of(const std::optional<std::string>& text) {
  std::uint64_t v = 0;
  if (text) std::from_chars(text->data(), text->data() + text->size(), v);
  return v;
}

}  // namespace

std::string totals_scratch_table(std::string_view target) {
  // `<x>_totals` -> `<x>_tfill`: shorter than the table it becomes, so any mysql.table
  // the config accepts (config/table_names.cpp) leaves it a valid identifier.
  constexpr std::string_view suffix = "_totals";
  std::string out(target.substr(0, target.size() - suffix.size()));
  out += "_tfill";
  return out;
}

namespace {
// Creates `target` (its CREATE TABLE `ddl`) already filled by `fill` (an INSERT ...
// SELECT given the table to fill), so that it never exists empty or part filled: built
// under a scratch name (totals_scratch_table), then renamed into place by one atomic
// RENAME TABLE. A scratch table left by a crash is dropped and built again. Where DDL is
// transactional (PostgreSQL), made and filled in one transaction under its own name (its
// indexes keep theirs), created without IF NOT EXISTS: a second --migrate at once fails
// rather than fill it twice.
void create_filled(connection& conn, const std::string& target, std::string ddl,
                   const std::function<std::string(const std::string&)>& fill) {
  if (conn.sql().transactional_ddl()) {
    constexpr std::string_view if_not_exists = " IF NOT EXISTS";
    ddl.erase(ddl.find(if_not_exists), if_not_exists.size());
    in_transaction(conn, [&] {
      conn.execute(ddl);
      conn.execute(fill(quote_identifier(target)));
      conn.execute("COMMIT");
    });
    return;
  }
  const std::string scratch = totals_scratch_table(target);
  const auto at = ddl.find(quote_identifier(target));
  ddl.replace(at, quote_identifier(target).size(), quote_identifier(scratch));
  conn.execute("DROP TABLE IF EXISTS " + quote_identifier(scratch));
  conn.execute(ddl);
  conn.execute(fill(quote_identifier(scratch)));
  conn.execute("RENAME TABLE " + quote_identifier(scratch) + " TO " + quote_identifier(target));
}
}  // namespace

void migrate_totals(connection& conn, const std::string& table, const store::top_spec& top) {
  if (top.empty()) return;  // no counter keeps totals: no table
  // Only the counters that keep totals are filled in (the others' are never written).
  std::string kept = " WHERE `record_type` IN (";
  // Appended piece by piece: `(i ? "," : "") + num(...)` trips gcc 12's false
  // -Wrestrict at -O3 (as in sql_adopt.cpp).
  for (std::size_t i = 0; i < top.record_types().size(); ++i) {
    if (i > 0) kept += ',';
    kept += num(top.record_types()[i]);
  }
  kept += ")";
  conn.execute(create_totals_filled_table(conn.sql()));
  // A table made now is filled for every type; one that exists, for the types not
  // recorded as filled into it (top turned on for a counter with counts).
  const auto fill_or_refill = [&](const std::string& totals, const std::string& ddl,
                                  const std::string& source, const std::string& columns) {
    if (table_exists(conn, totals)) {
      return refill_totals(conn, totals, source, columns.find("bucket") != std::string::npos,
                           unfilled_record_types(conn, totals, top));
    }
    create_filled(conn, totals, ddl, [&](const std::string& into) {
      return "INSERT INTO " + into + " (" + columns + ", `count`) SELECT " + columns +
             ", SUM(`count`) FROM " + quote_identifier(source) + kept + " GROUP BY " + columns;
    });
    record_filled(conn, totals, top.record_types());
  };
  fill_or_refill(totals_table(table), create_totals_table(conn.sql(), table), table,
                 "`record_type`, `record_id`");
  for (const auto g : store::all_granularities) {
    if (!top.uses(g)) continue;
    fill_or_refill(bucket_totals_table(table, g), create_bucket_totals_table(conn.sql(), table, g),
                   bucket_table(table, g), "`record_type`, `record_id`, `bucket`");
  }
}

std::vector<std::string> missing_totals_tables(connection& conn, const std::string& table,
                                               const store::top_spec& top) {
  std::vector<std::string> missing;
  if (top.empty()) return missing;
  if (!table_exists(conn, totals_table(table))) missing.push_back(totals_table(table));
  for (const auto g : store::all_granularities) {
    if (top.uses(g) && !table_exists(conn, bucket_totals_table(table, g)))
      missing.push_back(bucket_totals_table(table, g));
  }
  return missing;
}

void verify_totals_tables(connection& conn, const std::string& table, const store::top_spec& top) {
  const auto missing = missing_totals_tables(conn, table, top);
  if (missing.empty()) return verify_totals_filled(conn, table, top);
  throw db_error(error_class::fatal,
                 "table `" + missing.front() +
                     "` does not exist: every flush writes the totals of top-N "
                     "(GET /v1/top) of the counters with counters[].top there; run "
                     "slotted-counterd --migrate (it creates the totals tables and fills them "
                     "from the counts)");
}

std::vector<std::pair<std::uint64_t, __int128>> read_top(connection& conn, const std::string& table,
                                                         std::uint32_t record_type,
                                                         std::size_t limit) {
  // The positive totals, then (when fewer than `limit`) the negative ones: each one range
  // of `by_count` read in its order, `limit` rows at most (EXPLAIN at 1M counters: a range
  // read of by_count, no filesort; MariaDB 10.11 reads `count <> 0` the same way, so this
  // split only keeps the plan from depending on how a server orders two ranges).
  std::vector<std::pair<std::uint64_t, __int128>> out;
  const auto read = [&](std::string_view sign) {
    if (out.size() >= limit) return;
    for (const auto& row : conn.query_limited(
             "SELECT `record_id`, `count` FROM " + quote_identifier(totals_table(table)) +
             conn.sql().index_hint("`by_count`") + " WHERE `record_type` = " + num(record_type) +
             " AND `count` " + std::string(sign) + " 0 ORDER BY `count` DESC, `record_id` LIMIT " +
             num(std::uint64_t{limit - out.size()}))) {
      out.emplace_back(id_of(row[0]), decimal_of(row[1]));
    }
  };
  read(">");
  read("<");
  return out;
}

// The merge (Fagin's threshold algorithm, exact): each bucket's rows are read in
// count order, a page of `page` rows per bucket per round, all buckets in one UNION
// statement; every record id met is summed over the whole range by its primary key (one
// statement per round). A record id not met yet has, in each bucket, at most the last
// count read there (0 when the bucket is read to its end, or has no row for it): once
// the limit-th best sum is above the sum of those bounds, no record id not met can
// enter. Its cost: with a skewed distribution (a few record ids far ahead, as downloads
// are), one or two rounds, i.e. buckets x page index rows plus buckets x ids met
// primary-key rows, whatever the number of counters; with counts tied across many
// record ids it reads on, page by page, up to every row of the range.
namespace {

struct bucket_cursor {
  std::int64_t bucket;
  bool started = false, done = false;
  __int128 last = 0;
  std::uint64_t last_id = 0;
};

// One round's statement: the next `page` rows of each cursor not done, in count order,
// one UNION ALL; into `asked` the cursors it reads.
std::string round_select(const dialect& d, const std::string& bt, store::granularity g,
                         std::uint32_t record_type, const std::vector<bucket_cursor>& cursors,
                         std::size_t page, std::vector<std::size_t>& asked) {
  std::string sql;
  for (std::size_t i = 0; i < cursors.size(); ++i) {
    const auto& c = cursors[i];
    if (c.done) continue;
    if (!sql.empty()) sql += " UNION ALL ";
    sql += "(SELECT " + num(std::uint64_t{i}) + ", `record_id`, `count` FROM " + bt +
           d.index_hint("`by_count`") + " WHERE `record_type` = " + num(record_type) +
           " AND `bucket` = " + bucket_literal(g, c.bucket);
    if (c.started) {
      sql += " AND (`count` < " + num(c.last) + " OR (`count` = " + num(c.last) +
             " AND `record_id` > " + num(c.last_id) + "))";
    }
    sql += " ORDER BY `count` DESC, `record_id` LIMIT " + num(std::uint64_t{page}) + ")";
    asked.push_back(i);
  }
  return sql;
}

// The `limit` best of `sums` (count descending, ties by smaller id; a count of 0 is no
// rank).
std::vector<std::pair<std::uint64_t, __int128>> best_of(
    const std::unordered_map<std::uint64_t, __int128>& sums, std::size_t limit) {
  std::vector<std::pair<std::uint64_t, __int128>> best;
  for (const auto& s : sums) {
    if (s.second != 0) best.push_back(s);
  }
  const auto order = [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  };
  const std::size_t n = std::min(limit, best.size());
  std::partial_sort(best.begin(), best.begin() + static_cast<std::ptrdiff_t>(n), best.end(), order);
  best.resize(n);
  return best;
}

// What one bucketed top-N may still read: the rows of its rounds (max_rows), the rows it
// sums for the record ids they met (max_sum_rows: primary-key reads, cheaper), and time
// (max_top_time, checked before every statement, and the statement cut at what is left).
class read_budget {
 public:
  read_budget(std::size_t max_rows, std::size_t max_sum_rows)
      : max_rows_(max_rows),
        max_sum_rows_(max_sum_rows),
        deadline_(std::chrono::steady_clock::now() + max_top_time) {}

  void charge_round(std::size_t rows) {
    round_rows_ += rows;
    if (round_rows_ > max_rows_)
      throw too_costly(max_rows_, " rows (a long range, or counts tied across many records)");
  }
  void charge_sums(std::size_t rows) {
    sum_rows_ += rows;
    if (sum_rows_ > max_sum_rows_)
      throw too_costly(max_sum_rows_,
                       " rows to sum the records its rounds met (a long range over many "
                       "records, the largest ones changing from bucket to bucket)");
  }
  std::size_t sum_rows_left() const { return max_sum_rows_ - std::min(max_sum_rows_, sum_rows_); }
  // The time left, each statement's limit; past the deadline a db_error of
  // error_class::statement_timeout (answered as read_timed_out), before the statement runs.
  std::chrono::milliseconds left() const {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline_ - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      std::string why = "this top-N ran past its ";
      why += std::to_string(max_top_time.count());
      why += " s bound; ask for a shorter range, a coarser granularity or a smaller limit";
      throw db_error(error_class::statement_timeout, why);
    }
    return left;
  }
  static top_too_costly too_costly(std::size_t bound, std::string_view what) {
    std::string why = "this top-N would read more than " + std::to_string(bound);
    why.append(what).append(": ask for a shorter range, a coarser granularity or a smaller limit");
    return top_too_costly(why);
  }

 private:
  std::size_t max_rows_;
  std::size_t max_sum_rows_;
  std::size_t round_rows_ = 0;
  std::size_t sum_rows_ = 0;
  std::chrono::steady_clock::time_point deadline_;
};

// Into `sums`: the sum over the `buckets` buckets [from, to] of each of `fresh`, by its
// primary key, at most 1000 record ids a statement (far below max_allowed_packet). Each
// id reads at most one row per bucket, so a statement sums no more ids than the rows
// left in `budget` allow (at least one): the read stops within one id's rows of its
// bound however many ids a round met.
void sum_over_range(connection& conn, const std::string& bt, store::granularity g,
                    std::uint32_t record_type, std::int64_t from, std::int64_t to,
                    std::size_t buckets, const std::vector<std::uint64_t>& fresh,
                    std::unordered_map<std::uint64_t, __int128>& sums, read_budget& budget) {
  for (std::size_t at = 0; at < fresh.size();) {
    const std::size_t n = std::clamp<std::size_t>(
        budget.sum_rows_left() / std::max<std::size_t>(buckets, 1), 1, 1000);
    std::string ids;
    for (std::size_t k = at; k < std::min(fresh.size(), at + n); ++k) {
      if (!ids.empty()) ids += ',';
      ids += num(fresh[k]);
    }
    at += n;
    std::size_t rows = 0;
    for (const auto& row : conn.query_limited(
             "SELECT `record_id`, SUM(`count`), COUNT(*) FROM " + bt +
                 " WHERE `record_type` = " + num(record_type) + " AND `record_id` IN (" + ids +
                 ") AND `bucket` BETWEEN " + bucket_literal(g, from) + " AND " +
                 bucket_literal(g, to) + " GROUP BY `record_id`",
             budget.left())) {
      sums[id_of(row[0])] = decimal_of(row[1]);
      rows += static_cast<std::size_t>(id_of(row[2]));
    }
    budget.charge_sums(rows);
  }
}

}  // namespace

void in_read_snapshot(connection& conn, const std::function<void()>& read) {
  // top_too_costly, bad_alloc, a malformed row: no snapshot is left open.
  rolled_back_on_throw(conn, [&] {
    conn.begin_read_snapshot();
    read();
    conn.execute("COMMIT");
  });
}

std::vector<std::pair<std::uint64_t, __int128>> read_top_buckets(
    connection& conn, const std::string& table, store::granularity g, std::uint32_t record_type,
    std::int64_t from, std::int64_t to, std::size_t limit, std::size_t max_rows,
    std::size_t max_sum_rows) {
  const std::int64_t step = store::seconds_of(g);
  std::vector<bucket_cursor> cursors;
  for (std::int64_t b = from; b <= to; b += step) cursors.push_back({b});
  const std::size_t page = top_page(limit);
  const std::string bt = quote_identifier(bucket_totals_table(table, g));
  std::unordered_map<std::uint64_t, __int128> sums;  // every record id met, its range sum
  std::vector<std::pair<std::uint64_t, __int128>> best;
  in_read_snapshot(conn, [&] {
    // One round reads up to a page of every bucket: refused before any statement when
    // that alone could pass the bound (e.g. limit 1000 over 400 hours; the router
    // refuses such a request as a 400 before it comes here, see top_first_round_rows).
    if (top_first_round_rows(cursors.size(), limit) > max_rows)
      throw read_budget::too_costly(max_rows, " rows in its first round");
    read_budget budget(max_rows, max_sum_rows);
    while (true) {
      std::vector<std::size_t> asked;
      const std::string sql = round_select(conn.sql(), bt, g, record_type, cursors, page, asked);
      if (asked.empty()) break;
      std::vector<std::size_t> got(cursors.size(), 0);
      std::vector<std::uint64_t> fresh;
      for (const auto& row : conn.query_limited(sql, budget.left())) {
        const auto i = static_cast<std::size_t>(id_of(row[0]));
        auto& c = cursors[i];
        c.started = true;
        c.last_id = id_of(row[1]);
        c.last = decimal_of(row[2]);
        ++got[i];
        if (sums.emplace(c.last_id, 0).second) fresh.push_back(c.last_id);
      }
      for (const auto i : asked) {
        if (got[i] < page) cursors[i].done = true;
      }
      std::size_t round_rows = 0;
      for (const auto n : got) round_rows += n;
      budget.charge_round(round_rows);
      sum_over_range(conn, bt, g, record_type, from, to, cursors.size(), fresh, sums, budget);
      best = best_of(sums, limit);
      // A record id not met yet sums at most the last count read in each open bucket.
      __int128 bound = 0;
      bool open = false;
      for (const auto& c : cursors) {
        if (c.done) continue;
        open = true;
        bound += std::max<__int128>(c.last, 0);
      }
      if (!open || (best.size() == limit && best.back().second > bound)) break;
    }
  });
  return best;
}

}  // namespace slotted::db
