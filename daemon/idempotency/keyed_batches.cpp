#include "idempotency/keyed_batches.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <tuple>
#include <unordered_set>

#include "db/errors.hpp"
#include "db/sql.hpp"

namespace slotted::idempotency {

std::vector<db::counter_row> rows_of(std::span<const keyed_request> requests, std::uint16_t slot) {
  // A batch holds at most max(max_rows_per_statement, one request's items) increments of
  // 32 bits each: their sum stays far inside int64.
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::int64_t> sums;
  for (const auto& r : requests) {
    for (const auto& inc : r.increments) sums[{inc.record_type, inc.record_id}] += inc.delta;
  }
  std::vector<db::counter_row> rows;
  rows.reserve(sums.size());
  for (const auto& [k, delta] : sums) {
    if (delta != 0) rows.push_back({k.first, k.second, slot, delta});
  }
  return rows;
}

std::vector<store::bucket_row> bucket_rows_of(std::span<const keyed_request> requests,
                                              std::uint16_t slot, const store::bucket_spec& buckets,
                                              std::vector<db::counter_row>& rows) {
  std::vector<store::bucket_row> out;
  if (buckets.empty()) return out;
  std::map<std::tuple<std::uint32_t, std::uint64_t, store::granularity, std::int64_t>, std::int64_t>
      sums;
  for (const auto& r : requests) {
    for (const auto& inc : r.increments) {
      const auto* c = buckets.find(inc.record_type);
      if (c == nullptr || !inc.has_time()) continue;
      for (const auto g : store::all_granularities) {
        if (c->keeps(g))
          sums[{inc.record_type, inc.record_id, g, store::bucket_start(g, inc.at)}] += inc.delta;
      }
    }
  }
  // `rows` is sorted by counter (rows_of, or an earlier call): a binary search per
  // bucket row. A linear scan made one request of n distinct counters cost n^2 / 2
  // comparisons here (seconds for the 20,000 a 1 MiB body holds), at forming, at every
  // split and at commit, inside the batch's transaction.
  const auto by_counter = [](const db::counter_row& r, const db::counter_row& s) {
    return std::tie(r.record_type, r.record_id) < std::tie(s.record_type, s.record_id);
  };
  const std::size_t had = rows.size();
  for (const auto& [k, delta] : sums) {
    if (delta == 0) continue;
    // Copies, not bindings: clang 14 (the fuzz build) cannot capture a binding.
    const std::uint32_t type = std::get<0>(k);
    const std::uint64_t id = std::get<1>(k);
    out.push_back({type, id, std::get<2>(k), std::get<3>(k), slot, delta});
    const db::counter_row row{type, id, slot, 0};
    const bool has_row =
        std::binary_search(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(had), row,
                           by_counter) ||
        (rows.size() > had && !by_counter(rows.back(), row) && !by_counter(row, rows.back()));
    if (!has_row) rows.push_back(row);
  }
  // The added rows come in counter order (the map's), after the sorted ones: one merge.
  std::inplace_merge(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(had), rows.end(),
                     by_counter);
  return out;
}

std::vector<store::flush_batch> form_keyed_batches(std::vector<keyed_request> requests,
                                                   std::size_t max_items, unsigned slots,
                                                   std::uint64_t run_id, std::uint64_t first_seq,
                                                   std::mt19937_64& rng,
                                                   std::chrono::steady_clock::time_point oldest,
                                                   std::size_t& dropped,
                                                   const store::bucket_spec& buckets,
                                                   std::chrono::milliseconds window) {
  dropped = 0;
  // Stable: of one key twice, the first accepted stays.
  std::stable_sort(requests.begin(), requests.end(),
                   [](const keyed_request& a, const keyed_request& b) { return a.key < b.key; });
  std::vector<store::flush_batch> batches;
  std::size_t items = 0;
  std::string last_key;  // the previous request was moved from
  std::int64_t last_received_ms = 0;  // of the request of last_key kept
  // Of one key, requests received more than a window after the one kept: each takes
  // the key over, so they are formed into later batches (committed after this take's).
  std::vector<keyed_request> takeovers;
  for (auto& r : requests) {
    if (!batches.empty() && r.key == last_key) {
      const bool within = r.received_ms <= 0 || last_received_ms <= 0 ||
                          r.received_ms - last_received_ms <= window.count();
      if (within) {
        ++dropped;
      } else {
        takeovers.push_back(std::move(r));
      }
      continue;
    }
    last_key = r.key;
    last_received_ms = r.received_ms;
    if (batches.empty() || items + r.increments.size() > max_items) {
      store::flush_batch b;
      b.run_id = run_id;
      b.seq = first_seq + batches.size();
      b.oldest_arrival = oldest;
      batches.push_back(std::move(b));
      items = 0;
    }
    items += r.increments.size();
    batches.back().keyed.push_back(std::move(r));
  }
  for (auto& b : batches) {
    const auto slot = static_cast<std::uint16_t>(rng() % slots);
    b.rows = rows_of(b.keyed, slot);
    b.bucket_rows = bucket_rows_of(b.keyed, slot, buckets, b.rows);
  }
  if (!takeovers.empty()) {
    std::size_t later_dropped = 0;
    auto later = form_keyed_batches(std::move(takeovers), max_items, slots, run_id,
                                    first_seq + batches.size(), rng, oldest, later_dropped,
                                    buckets, window);
    dropped += later_dropped;
    std::move(later.begin(), later.end(), std::back_inserter(batches));
  }
  return batches;
}

void split_requests(const store::flush_batch& whole, store::flush_batch& left,
                    store::flush_batch& right, const store::bucket_spec& buckets) {
  const auto middle = whole.keyed.begin() + static_cast<std::ptrdiff_t>(whole.keyed.size() / 2);
  const std::uint16_t slot = whole.rows.empty() ? 0 : whole.rows.front().slot;
  left.keyed.assign(whole.keyed.begin(), middle);
  right.keyed.assign(middle, whole.keyed.end());
  left.rows = rows_of(left.keyed, slot);
  right.rows = rows_of(right.keyed, slot);
  left.bucket_rows = bucket_rows_of(left.keyed, slot, buckets, left.rows);
  right.bucket_rows = bucket_rows_of(right.keyed, slot, buckets, right.rows);
}

keyed_outcome commit_keyed_batch(
    db::connection& conn, const std::string& table, const db::batch_identity& id,
    const store::flush_batch& b, std::chrono::milliseconds window,
    const std::function<std::span<const db::counter_row>(std::span<const db::counter_row>)>& dirty,
    const store::bucket_spec& buckets) {
  keyed_outcome out;
  const std::string instance = conn.quote(id.instance_id);
  const std::span<const keyed_request> requests(b.keyed);
  conn.execute(db::start_transaction);
  try {
    try {
      conn.execute(db::ledger_insert(instance, id.run_id, id.seq, b.rows.size()));
    } catch (const db::db_error& e) {
      if (e.code() != 1062) throw;  // ER_DUP_ENTRY: committed before, reply lost
      conn.execute(db::rollback);
      out.outcome = db::commit_outcome::already_applied;
      return out;
    }
    std::vector<std::string> quoted_keys;
    quoted_keys.reserve(requests.size());
    for (const auto& r : requests) quoted_keys.push_back(conn.quote(r.key));
    // A key first received longer than `window` before this request is forgotten: this
    // batch takes the row over. Judged by when each request arrived (`created` holds
    // the first one's arrival), not by when this batch commits: a retry accepted inside
    // the window stays a retry however late its flush.
    conn.execute(
        db::idempotency_keys_claim(requests, quoted_keys, instance, id.run_id, id.seq, window));
    // A locking read: the latest committed rows, whatever this transaction's snapshot.
    const auto found = conn.query(db::idempotency_keys_select_locked(quoted_keys));
    const std::string run = std::to_string(id.run_id), seq = std::to_string(id.seq);
    std::unordered_set<std::string> ours;
    std::map<std::string, std::string> hash_of_key;
    for (const auto& row : found) {
      const std::string key = row[0].value_or("");
      if (row[2].value_or("") == id.instance_id && row[3].value_or("") == run &&
          row[4].value_or("") == seq) {
        ours.insert(key);
      } else {
        hash_of_key[key] = row[1].value_or("");
      }
    }
    std::vector<keyed_request> applied;
    for (const auto& r : requests) {
      if (ours.contains(r.key)) {
        applied.push_back(r);
      } else if (hash_of_key[r.key] == hex(r.hash)) {
        ++out.duplicates;
      } else {
        ++out.conflicts;
      }
    }
    if (!applied.empty()) {
      const std::uint16_t slot = b.rows.empty() ? 0 : b.rows.front().slot;
      auto rows = rows_of(applied, slot);
      // The applied requests' buckets, in this transaction with their totals.
      const auto bucket_rows = bucket_rows_of(applied, slot, buckets, rows);
      db::upsert_buckets(conn, table, bucket_rows);
      if (!rows.empty()) {
        conn.execute(db::upsert_statement(table, rows));
        if (const auto marks = dirty(rows); !marks.empty()) {
          std::uint64_t gen = id.run_id ^ (id.seq * 0x9E3779B97F4A7C15ull);
          gen ^= gen >> 31;
          conn.execute(db::dirty_upsert(instance, marks, gen & 0x7fffffffffffffffull));
        }
      }
      out.rows = rows.size();
    }
    conn.execute(db::commit);
    return out;
  } catch (const db::db_error& e) {
    if (!e.connection_lost()) {
      try {
        conn.execute(db::rollback);
      } catch (const db::db_error&) {
        // The original error is the one worth reporting.
      }
    }
    throw;
  }
}

std::optional<committed_key> find_committed_key(db::connection& conn, const std::string& key,
                                                std::int64_t received_ms,
                                                std::chrono::milliseconds window) {
  const auto rows = conn.query(db::idempotency_keys_find(conn.quote(key), received_ms, window));
  if (rows.empty() || !rows[0][0] || !rows[0][1]) return std::nullopt;
  return committed_key{*rows[0][0], static_cast<std::uint32_t>(std::stoul(*rows[0][1]))};
}

std::uint64_t prune_keys(db::connection& conn, std::chrono::milliseconds window, std::size_t chunk,
                         int max_chunks) {
  std::uint64_t deleted = 0;
  // Two windows: a retry received inside the window may still be pending (in memory,
  // or in another instance's WAL) when the first one's key passes the window, and must
  // find that key when it commits. Only a retry pending for longer than a whole window
  // (an instance cut off from the database that long) can miss it.
  for (int i = 0; i < max_chunks; ++i) {
    conn.execute(db::idempotency_keys_prune(2 * window, chunk));
    const auto n = conn.affected_rows();
    deleted += n;
    if (n < chunk) break;
  }
  return deleted;
}

}  // namespace slotted::idempotency
