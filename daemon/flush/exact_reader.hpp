#pragma once
// The exact reader: a counter's total, many counters' totals, a counter's series (each
// persisted plus pending, never counting a batch twice or not at all while it commits:
// it reads the database between two settled looks at the batch queue, queue.hpp), and
// top-N (persisted only). Many-counter and top-N reads share a cap (read_gate.hpp).
//
// Thread-safety: every read may be called from any thread (database worker threads: each
// blocks on a connection of the pool). It holds no lock of its own: the queue's lock,
// the store's and the keyed store's guard what it reads.

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "db/pool.hpp"
#include "flush/queue.hpp"
#include "flush/read_gate.hpp"
#include "flush/settings.hpp"
#include "idempotency/keyed_store.hpp"
#include "metrics/metrics.hpp"
#include "model/result.hpp"
#include "store/pending_store.hpp"

namespace slotted::flush {

// A counter's exact figures (read_total); when none can be had now, the read fails with
// not_exact_yet (a batch being committed or in doubt throughout, a sum out of range):
// not an error, retry later.
struct counter_reading {
  __int128 persisted = 0;  // SUM(count) may pass int64
  std::int64_t pending = 0;
};

// A top-N (read_top): (record_id, count), best first; or retry_later (another top-N
// running on this instance, or too costly: the detail says what to narrow).
struct top_reading {
  std::vector<std::pair<std::uint64_t, __int128>> items;
};

// Many counters of one record type (GET /v1/counters/{t}?ids=...): one entry per id
// asked for, in that order, each exact as counter_reading is (or not_exact_yet).
struct totals_reading {
  struct total {
    std::uint64_t record_id = 0;
    __int128 persisted = 0;
    std::int64_t pending = 0;
  };
  std::vector<total> totals;
};

// One counter's counts per bucket (GET .../series): (bucket start, persisted + pending),
// in bucket order, buckets whose count is 0 left out; exact, or not_exact_yet as
// counter_reading.
struct series_reading {
  std::vector<std::pair<std::int64_t, __int128>> points;
};

class exact_reader {
 public:
  exact_reader(const settings& s, queue& q, store::pending_store& store, db::pool& pool,
               metrics::registry& metrics);
  exact_reader(const exact_reader&) = delete;
  exact_reader& operator=(const exact_reader&) = delete;

  // Adds what `keyed` holds pending to the figures. Call before the first read.
  void attach_keyed(idempotency::keyed_store* keyed) { keyed_ = keyed; }

  // Persisted SUM(count) plus what is still pending, never counting a batch twice or
  // not at all while it commits; when no exact figure can be had now, not_exact_yet
  // and why. Blocking: call from a database worker thread. Throws db_error when the
  // database cannot be read.
  result<counter_reading> read_total(const store::counter_key& key);

  // read_total() of each of `record_ids` (distinct) of `record_type`, with one
  // database statement per try (db::read_counts) and the same exactness rules.
  // Blocking: call from a database worker thread. Throws db_error.
  result<totals_reading> read_totals(std::uint32_t record_type,
                                     std::span<const std::uint64_t> record_ids);

  // Top-N (db/top.hpp): the `limit` largest persisted totals of `record_type`, or with
  // `g` those of the sums of its buckets starting in [from, to] (bucket-aligned). One at
  // a time per instance (a second meanwhile is told to retry), so top-N reads never hold
  // more than one connection of the pool the flushes need; a bucketed one past
  // db::max_top_rows stops. Blocking: call from a database worker thread. Throws
  // db_error.
  result<top_reading> read_top(std::uint32_t record_type, std::size_t limit,
                               std::optional<store::granularity> g = std::nullopt,
                               std::int64_t from = 0, std::int64_t to = 0);

  // The cap read_totals() and read_top() share (read_gate.hpp): past it they answer
  // retry_later at once. Exposed for tests, which hold its slots.
  read_gate& heavy_reads() { return heavy_reads_; }

  // The counter's buckets of granularity `g` starting in [from, to] (bucket-aligned):
  // persisted plus pending, exact as read_total() is (the same generation and in-doubt
  // rules). Blocking: call from a database worker thread. Throws db_error.
  result<series_reading> read_series(const store::counter_key& key, store::granularity g,
                                     std::int64_t from, std::int64_t to);

 private:
  // The exact read of read_total() and read_series(), on a connection of the pool:
  // `read_db` reads the database, then `add_pending` (under the queue's lock, given the
  // queued batches: queue::read_pending) adds what is pending, again until no commit
  // started or ended during the read and no batch is in doubt; at most 20 tries, each waiting up to
  // 200 ms for that. Succeeds when the figures are exact, else fails with what add_pending failed
  // with (give up now) or not_exact_yet: the counter is being written. Throws db_error (counted; a
  // lost connection is closed).
  result<void> read_stable(
      const std::function<void(db::connection&)>& read_db,
      const std::function<result<void>(const queue::batch_list&)>& add_pending);

  const settings& settings_;
  queue& queue_;
  store::pending_store& store_;
  db::pool& pool_;
  metrics::registry& metrics_;
  idempotency::keyed_store* keyed_ = nullptr;
  std::atomic<bool> top_running_{false};  // a read_top() holds a connection
  read_gate heavy_reads_;                 // read_totals() and read_top() (read_gate.hpp)
};

}  // namespace slotted::flush
