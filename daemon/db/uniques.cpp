#include "db/uniques.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "db/sql_text.hpp"
#include "db/write_path.hpp"

namespace slotted::db {

using namespace sql_text;

std::string uniques_table(std::string_view table) {
  std::string name(table);
  name += "_uniques";
  return name;
}

std::string create_uniques_table(const dialect& d, std::string_view table) {
  return d.create_table({uniques_table(table),
                         {{"`record_type`", column_type::u32},
                          {"`window_start`", column_type::i64},
                          {"`record_id`", column_type::u64},
                          {"`client`", column_type::bytes128},
                          {"`instance_id`", column_type::text64},
                          {"`run_id`", column_type::u64},
                          {"`batch_seq`", column_type::u64}},
                         "`record_type`, `window_start`, `record_id`, `client`"});
}

namespace {
void append_key(std::string& sql, const store::unique_entry& e, const std::string& quoted_client) {
  append_values(sql, e.record_type, e.window, e.record_id, quoted_client);
}
}  // namespace

std::string uniques_insert(const dialect& d, std::string_view table,
                           std::span<const store::unique_entry> entries,
                           std::span<const std::string> quoted_clients,
                           std::string_view quoted_instance, std::uint64_t run_id,
                           std::uint64_t seq) {
  std::string sql(d.insert_ignore());
  sql += quote_identifier(uniques_table(table));
  sql +=
      " (`record_type`, `window_start`, `record_id`, `client`, `instance_id`, `run_id`, "
      "`batch_seq`) VALUES ";
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) sql.push_back(',');
    sql.push_back('(');
    append_key(sql, entries[i], quoted_clients[i]);
    sql.push_back(',');
    append_values(sql, quoted_instance, run_id, seq);
    sql.push_back(')');
  }
  sql += d.ignore_conflicts();
  return sql;
}

std::string uniques_select_ours(const dialect& d, std::string_view table,
                                std::span<const store::unique_entry> entries,
                                std::span<const std::string> quoted_clients,
                                std::string_view quoted_instance, std::uint64_t run_id,
                                std::uint64_t seq) {
  std::string sql =
      "SELECT `record_type`, `window_start`, `record_id`, " + d.hex("`client`") + " FROM ";
  sql += quote_identifier(uniques_table(table));
  sql += " WHERE (`record_type`, `window_start`, `record_id`, `client`) IN (";
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) sql.push_back(',');
    sql.push_back('(');
    append_key(sql, entries[i], quoted_clients[i]);
    sql.push_back(')');
  }
  sql += ") AND `instance_id` = ";
  sql += quoted_instance;
  sql += " AND `run_id` = ";
  append_int(sql, run_id);
  sql += " AND `batch_seq` = ";
  append_int(sql, seq);
  return sql;
}

std::string uniques_prune(const dialect& d, std::string_view table, std::uint32_t record_type,
                          std::int64_t before, std::size_t limit) {
  std::string where = "`record_type` = ";
  append_int(where, record_type);
  where += " AND `window_start` < ";
  append_int(where, before);
  return d.delete_first(quote_identifier(uniques_table(table)), where, "`window_start`", limit);
}

std::string uniques_types_select(std::string_view table) {
  return "SELECT DISTINCT `record_type` FROM " + quote_identifier(uniques_table(table));
}

void rows_of_counted(std::span<const store::unique_entry> counted, std::uint16_t slot,
                     const store::bucket_spec& buckets, std::vector<counter_row>& rows,
                     std::vector<store::bucket_row>& bucket_rows) {
  std::map<store::counter_key, std::int64_t> totals;
  std::map<std::tuple<store::counter_key, store::granularity, std::int64_t>, std::int64_t>
      in_buckets;
  for (const auto& e : counted) {
    const store::counter_key key{e.record_type, e.record_id};
    ++totals[key];
    if (const auto* c = buckets.find(e.record_type)) {
      for (const auto g : store::all_granularities)
        if (c->keeps(g)) ++in_buckets[{key, g, store::bucket_start(g, e.at)}];
    }
  }
  rows.clear();
  bucket_rows.clear();
  for (const auto& [key, n] : totals) rows.push_back({key.record_type, key.record_id, slot, n});
  for (const auto& [b, n] : in_buckets) {
    const auto& [key, g, start] = b;
    bucket_rows.push_back({key.record_type, key.record_id, g, start, slot, n});
  }
}

namespace {
std::string hex_upper(std::string_view s) {
  static constexpr char digits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() * 2);
  for (const unsigned char ch : s) {
    out.push_back(digits[ch >> 4]);
    out.push_back(digits[ch & 15]);
  }
  return out;
}

// A tuple's bytes at most: the key (a client of 128 bytes, escaped: 258, or 268 in
// PostgreSQL's hex literal) and the batch's
// identity (an instance id of 64 characters, escaped: 130), with the numbers.
constexpr std::size_t max_tuple_bytes = 512;

}  // namespace

batch_identity unique_tag(const std::string& instance_id) {
  thread_local std::mt19937_64 rng = [] {
    std::random_device rd;
    std::seed_seq seed{rd(), rd(), rd(), rd()};
    return std::mt19937_64(seed);
  }();
  return {instance_id, rng() & 0x7fffffffffffffffull, 0};
}

// The entries this commit inserted (their rows carry its tag), in `entries`' order.
std::vector<store::unique_entry> insert_and_find_ours(
    connection& conn, const std::string& table, const batch_identity& id,
    std::span<const store::unique_entry> entries) {
  const std::string instance = conn.quote(id.instance_id);
  std::vector<std::string> clients;
  clients.reserve(entries.size());
  for (const auto& e : entries) clients.push_back(conn.quote_bytes(e.client));
  const std::size_t budget = conn.max_statement_bytes();
  const std::size_t per =
      std::max<std::size_t>(1, budget > 2048 ? (budget - 1024) / max_tuple_bytes : 1);
  const std::span<const std::string> quoted(clients);
  std::set<std::tuple<std::uint32_t, std::int64_t, std::uint64_t, std::string>> ours;
  for (std::size_t first = 0; first < entries.size(); first += per) {
    const std::size_t n = std::min(per, entries.size() - first);
    conn.execute(uniques_insert(conn.sql(), table, entries.subspan(first, n),
                                quoted.subspan(first, n), instance, id.run_id, id.seq));
  }
  for (std::size_t first = 0; first < entries.size(); first += per) {
    const std::size_t n = std::min(per, entries.size() - first);
    for (const auto& r :
         conn.query(uniques_select_ours(conn.sql(), table, entries.subspan(first, n),
                                        quoted.subspan(first, n), instance, id.run_id, id.seq))) {
      if (r.size() < 4 || !r[0] || !r[1] || !r[2] || !r[3]) continue;
      ours.emplace(static_cast<std::uint32_t>(std::stoul(*r[0])), std::stoll(*r[1]),
                   std::stoull(*r[2]), *r[3]);
    }
  }
  std::vector<store::unique_entry> out;
  for (const auto& e : entries) {
    if (ours.contains({e.record_type, e.window, e.record_id, hex_upper(e.client)}))
      out.push_back(e);
  }
  return out;
}

uniques_claimed claim_uniques(connection& conn, const std::string& table,
                              const std::string& instance_id,
                              std::span<const store::unique_entry> entries,
                              const store::dedupe_spec* dedupe, std::uint16_t slot,
                              const store::bucket_spec& buckets) {
  uniques_claimed out;
  // Only entries whose windows no prune has passed: an entry held up (a restart
  // replaying the WAL, an outage, a log backlog) past its window's keep may not be
  // decided.
  std::vector<store::unique_entry> decidable;
  if (dedupe != nullptr) {
    decidable = decidable_entries(conn, table, entries, *dedupe);
    out.too_late = entries.size() - decidable.size();
    entries = decidable;
  }
  const auto counted = insert_and_find_ours(conn, table, unique_tag(instance_id), entries);
  out.counted = counted.size();
  out.duplicates = entries.size() - counted.size();
  rows_of_counted(counted, slot, buckets, out.rows, out.buckets);
  return out;
}

}  // namespace slotted::db
