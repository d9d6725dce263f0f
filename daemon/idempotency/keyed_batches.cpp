#include "idempotency/keyed_batches.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <tuple>
#include <unordered_set>

#include "db/sql.hpp"
#include "db/write_path.hpp"

namespace slotted::idempotency {

std::size_t claim_bytes(const keyed_request& r) {
  // ('key','32 hex digits',accepted,'instance' (64 characters, each escaped at worst to
  // two),run,seq,<the database's now in ms> - age) (about 340 bytes besides the key),
  // and the key again in the locking read.
  return 2 * r.key.size() + 480;
}

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
  const auto by_counter = store::counter_order;
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

std::vector<store::flush_batch> form_keyed_batches(
    std::vector<keyed_request> requests, std::size_t max_items, unsigned slots,
    std::uint64_t run_id, std::uint64_t first_seq, std::mt19937_64& rng,
    std::chrono::steady_clock::time_point oldest, std::size_t& dropped,
    const store::bucket_spec& buckets, std::size_t max_statement_bytes,
    std::chrono::milliseconds window) {
  dropped = 0;
  // Stable: of one key twice, the first accepted stays.
  std::stable_sort(requests.begin(), requests.end(),
                   [](const keyed_request& a, const keyed_request& b) { return a.key < b.key; });
  std::vector<store::flush_batch> batches;
  std::size_t items = 0, bytes = 0;
  std::string last_key;               // the previous request was moved from
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
    // Bounded by items, by keys and by the bytes of its claim: a batch of requests
    // without increments (or with few) must not grow past what one statement carries.
    if (batches.empty() || items + r.increments.size() > max_items ||
        batches.back().keyed.size() >= max_items || bytes + claim_bytes(r) > max_statement_bytes) {
      store::flush_batch b;
      b.run_id = run_id;
      b.seq = first_seq + batches.size();
      b.oldest_arrival = oldest;
      batches.push_back(std::move(b));
      items = 0;
      bytes = claim_fixed_bytes;
    }
    items += r.increments.size();
    bytes += claim_bytes(r);
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
                                    first_seq + batches.size(), rng, oldest, later_dropped, buckets,
                                    max_statement_bytes, window);
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

namespace {

using dirty_marks =
    std::function<std::span<const db::counter_row>(std::span<const db::counter_row>)>;

// Claims the key of each request for batch `id`. A key first received longer than
// `window` before this request is forgotten: this batch takes the row over. Judged by
// when each request arrived (`created` holds the first one's arrival), not by when this
// batch commits: a retry accepted inside the window stays a retry however late its
// flush. Each request's age by this instance's clock, its arrival by the database's (one
// clock for every instance, whatever their skew).
void claim_keys(db::connection& conn, std::span<const keyed_request> requests,
                std::span<const std::string> keys, const std::string& instance,
                const db::batch_identity& id, std::chrono::milliseconds window,
                std::int64_t local_now_ms) {
  const std::int64_t local_now = local_now_ms != 0 ? local_now_ms : now_ms();
  db::in_statements(
      requests.size(), conn.max_statement_bytes(),
      [&](std::size_t first, std::size_t n) {
        return db::idempotency_keys_claim(requests.subspan(first, n), keys.subspan(first, n),
                                          instance, id.run_id, id.seq, window, local_now);
      },
      [&](const std::string& sql) { conn.execute(sql); });
}

// The keys' rows, by a locking read: the latest committed rows, whatever this
// transaction's snapshot.
std::vector<db::result_row> read_claimed_rows(db::connection& conn,
                                              std::span<const std::string> keys) {
  std::vector<db::result_row> found;
  db::in_statements(
      keys.size(), conn.max_statement_bytes(),
      [&](std::size_t first, std::size_t n) {
        return db::idempotency_keys_select_locked(keys.subspan(first, n));
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
                                            const std::vector<db::result_row>& found,
                                            const db::batch_identity& id, keyed_outcome& out) {
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

// The counts of the applied requests, in the writers' lock order (db/repository.hpp,
// "Lock order"), by db::write_counted: slot rows, bucket rows, totals, dirty marks, each
// cut to the budget (one request alone may hold more rows than a statement carries).
// Returns the slot rows written.
std::size_t write_applied(db::connection& conn, const std::string& table,
                          const db::batch_identity& id, const std::string& instance,
                          const store::flush_batch& b, const std::vector<keyed_request>& applied,
                          const dirty_marks& dirty, const store::bucket_spec& buckets,
                          const store::top_spec& top) {
  const std::uint16_t slot = b.rows.empty() ? 0 : b.rows.front().slot;
  auto rows = rows_of(applied, slot);
  // The applied requests' buckets, in this transaction with their totals (each
  // counter with a bucket row has a row in `rows`).
  const auto bucket_rows = bucket_rows_of(applied, slot, buckets, rows);
  if (rows.empty()) return 0;
  db::write_counted(conn, {.table = table,
                           .rows = rows,
                           .buckets = bucket_rows,
                           .top = &top,
                           .marks = dirty(rows),
                           .quoted_instance = instance,
                           .mark_gen = db::dirty_gen_of(id)});
  return rows.size();
}

}  // namespace

keyed_outcome commit_keyed_batch(db::connection& conn, const std::string& table,
                                 const db::batch_identity& id, const store::flush_batch& b,
                                 std::chrono::milliseconds window, const dirty_marks& dirty,
                                 const store::bucket_spec& buckets, std::int64_t local_now_ms,
                                 const store::top_spec& top) {
  keyed_outcome out;
  const std::string instance = conn.quote(id.instance_id);
  const std::span<const keyed_request> requests(b.keyed);
  return db::in_transaction(conn, [&] {
    if (!db::claim_ledger(conn, id, b.rows.size())) {  // committed before, reply lost
      out.outcome = db::commit_outcome::already_applied;
      return out;
    }
    std::vector<std::string> quoted_keys;
    quoted_keys.reserve(requests.size());
    for (const auto& r : requests) quoted_keys.push_back(conn.quote(r.key));
    claim_keys(conn, requests, quoted_keys, instance, id, window, local_now_ms);
    const auto found = read_claimed_rows(conn, quoted_keys);
    const auto applied = applied_requests(requests, found, id, out);
    if (!applied.empty())
      out.rows = write_applied(conn, table, id, instance, b, applied, dirty, buckets, top);
    conn.execute(db::commit);
    return out;
  });
}

std::optional<committed_key> find_committed_key(db::connection& conn, const std::string& key,
                                                std::int64_t received_ms,
                                                std::chrono::milliseconds window,
                                                std::int64_t local_now_ms) {
  const std::int64_t age = (local_now_ms != 0 ? local_now_ms : now_ms()) - received_ms;
  const auto rows = conn.query(db::idempotency_keys_find(conn.quote(key), age, window));
  if (rows.empty() || !rows[0][0] || !rows[0][1]) return std::nullopt;
  return committed_key{*rows[0][0], static_cast<std::uint32_t>(std::stoul(*rows[0][1]))};
}

std::uint64_t prune_keys(db::connection& conn, std::chrono::milliseconds window, std::size_t chunk,
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
    for (const auto& row : conn.query(db::idempotency_keys_prune_select(2 * window, chunk))) {
      if (row[0]) keys.push_back(conn.quote(*row[0]));
    }
    if (keys.empty()) break;
    conn.execute(db::idempotency_keys_delete(keys, 2 * window));
    deleted += conn.affected_rows();
    if (keys.size() < chunk) break;
  }
  return deleted;
}

}  // namespace slotted::idempotency
