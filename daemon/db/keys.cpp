// Idempotency keys in the database (see keys.hpp).
#include "db/keys.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <tuple>
#include <unordered_set>

#include "db/sql.hpp"
#include "db/write_path.hpp"

namespace slotted::db {

using idempotency::hex;
using idempotency::keyed_request;
using idempotency::now_ms;

std::vector<counter_row> rows_of(std::span<const keyed_request> requests, std::uint16_t slot) {
  // A batch holds at most max(max_rows_per_statement, one request's items) increments of
  // 32 bits each: their sum stays far inside int64.
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::int64_t> sums;
  for (const auto& r : requests) {
    for (const auto& inc : r.increments) sums[{inc.record_type, inc.record_id}] += inc.delta;
  }
  std::vector<counter_row> rows;
  rows.reserve(sums.size());
  for (const auto& [k, delta] : sums) {
    if (delta != 0) rows.push_back({k.first, k.second, slot, delta});
  }
  return rows;
}

std::vector<store::bucket_row> bucket_rows_of(std::span<const keyed_request> requests,
                                              std::uint16_t slot, const store::bucket_spec& buckets,
                                              std::vector<counter_row>& rows) {
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
  const auto by_counter = store::counter_order;
  const std::size_t had = rows.size();
  for (const auto& [k, delta] : sums) {
    if (delta == 0) continue;
    // Copies, not bindings: clang 14 (the fuzz build) cannot capture a binding.
    const std::uint32_t type = std::get<0>(k);
    const std::uint64_t id = std::get<1>(k);
    out.push_back({type, id, std::get<2>(k), std::get<3>(k), slot, delta});
    const counter_row row{type, id, slot, 0};
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

namespace {

// The claim of claim_keys (keys.hpp): the keys' rows inserted or taken over, in key
// order, in statements cut to the budget.
void claim_statements(connection& conn, std::span<const keyed_request> requests,
                      std::span<const std::string> keys, const std::string& instance,
                      const batch_identity& id, std::chrono::milliseconds window,
                      std::int64_t local_now_ms) {
  const std::int64_t local_now = local_now_ms != 0 ? local_now_ms : now_ms();
  in_statements(
      requests.size(), conn.max_statement_bytes(),
      [&](std::size_t first, std::size_t n) {
        return idempotency_keys_claim(conn.sql(), requests.subspan(first, n),
                                      keys.subspan(first, n), instance, id.run_id, id.seq, window,
                                      local_now);
      },
      [&](const std::string& sql) { conn.execute(sql); });
}

// The keys' rows, by a locking read: the latest committed rows, whatever this
// transaction's snapshot.
std::vector<result_row> read_claimed_rows(connection& conn, std::span<const std::string> keys) {
  std::vector<result_row> found;
  in_statements(
      keys.size(), conn.max_statement_bytes(),
      [&](std::size_t first, std::size_t n) {
        return idempotency_keys_select_locked(conn.sql(), keys.subspan(first, n));
      },
      [&](const std::string& sql) {
        auto part = conn.query(sql);
        std::move(part.begin(), part.end(), std::back_inserter(found));
      });
  return found;
}

// The requests whose key this batch holds now; the others are counted in `out` as
// duplicates (the row's body is theirs) or conflicts.
std::vector<keyed_request> applied_requests(std::span<const keyed_request> requests,
                                            const std::vector<result_row>& found,
                                            const batch_identity& id, keys_claimed& out) {
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
  return applied;
}

}  // namespace

keys_claimed claim_keys(connection& conn, const batch_identity& id,
                        std::span<const keyed_request> requests, std::uint16_t slot,
                        const store::bucket_spec& buckets, std::chrono::milliseconds window,
                        std::int64_t local_now_ms) {
  keys_claimed out;
  std::vector<std::string> quoted_keys;
  quoted_keys.reserve(requests.size());
  for (const auto& r : requests) quoted_keys.push_back(conn.quote(r.key));
  claim_statements(conn, requests, quoted_keys, conn.quote(id.instance_id), id, window,
                   local_now_ms);
  const auto applied = applied_requests(requests, read_claimed_rows(conn, quoted_keys), id, out);
  out.rows = rows_of(applied, slot);
  // The applied requests' buckets, in this transaction with their totals (each
  // counter with a bucket row has a row in `rows`).
  out.buckets = bucket_rows_of(applied, slot, buckets, out.rows);
  return out;
}

std::optional<committed_key> find_committed_key(connection& conn, const std::string& key,
                                                std::int64_t received_ms,
                                                std::chrono::milliseconds window,
                                                std::int64_t local_now_ms) {
  const std::int64_t age = (local_now_ms != 0 ? local_now_ms : now_ms()) - received_ms;
  const auto rows = conn.query(idempotency_keys_find(conn.sql(), conn.quote(key), age, window));
  if (rows.empty() || !rows[0][0] || !rows[0][1]) return std::nullopt;
  return committed_key{*rows[0][0], static_cast<std::uint32_t>(std::stoul(*rows[0][1]))};
}

std::uint64_t prune_keys(connection& conn, std::chrono::milliseconds window, std::size_t chunk,
                         int max_chunks) {
  std::uint64_t deleted = 0;
  // The DELETE lists its keys (each at most 2 * 128 + 3 bytes quoted): a chunk stays
  // under the connection's statement budget (max_allowed_packet).
  const std::size_t budget = conn.max_statement_bytes();
  chunk = std::clamp<std::size_t>(budget > 2048 ? (budget - 1024) / 260 : 1, 1, chunk);
  // Two windows: a retry received inside the window may still be pending (in memory,
  // or in another instance's WAL) when the first one's key passes the window, and must
  // find that key when it commits. Only a retry pending for longer than a whole window
  // (an instance cut off from the database that long) can miss it.
  for (int i = 0; i < max_chunks; ++i) {
    std::vector<std::string> keys;
    for (const auto& row :
         conn.query(idempotency_keys_prune_select(conn.sql(), 2 * window, chunk))) {
      if (row[0]) keys.push_back(conn.quote(*row[0]));
    }
    if (keys.empty()) break;
    conn.execute(idempotency_keys_delete(conn.sql(), keys, 2 * window));
    deleted += conn.affected_rows();
    if (keys.size() < chunk) break;
  }
  return deleted;
}

}  // namespace slotted::db
