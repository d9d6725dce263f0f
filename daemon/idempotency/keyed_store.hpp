#pragma once
// This instance's view of Idempotency-Keys (README: HTTP API, Idempotency-Key): a
// bounded index of the keys it accepted, and the keyed requests not yet formed into
// flush batches.
//
// The index answers retries that reach this instance (a replay, or 422 for another
// body) without the database; it forgets keys older than idempotency.window and, past
// `max_keys`, the oldest first. The database's keys table stays the authority: a key
// this index does not know (accepted by another instance, forgotten, or lost with a
// restart) is accepted again here and dropped by the flush that finds it committed.
//
// Thread-safety: every member may be called from any thread. The index is sharded by
// key, each shard under its own mutex; the pending requests have one mutex, held for a
// push or a swap.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "metrics/metrics.hpp"
#include "model/buckets.hpp"
#include "model/counter_key.hpp"
#include "model/keyed_request.hpp"
#include "store/pending_store.hpp"
#include "util/siphash.hpp"
#include "util/thread_annotations.hpp"

namespace slotted::idempotency {

enum class admit_result {
  fresh,        // new: pending, or reserved until accept() / abandon()
  replay,       // accepted before with the same body: answer as then
  conflict,     // accepted before with another body: 422
  in_progress,  // the first request with this key is being logged right now: 503
  over_limit,   // flush.max_pending_keys reached: 503
};

struct admission {
  admit_result result = admit_result::fresh;
  std::uint32_t accepted = 0;  // for replay
};

class keyed_store {
 public:
  using clock = std::chrono::steady_clock;

  // `bound` is the pending bounds' account (see store::pending_store::charged): every
  // request reserved or pending here holds its charge() until it is formed into a batch
  // (the flusher's queue then counts it) or abandoned.
  keyed_store(clock::duration window, std::size_t max_keys, metrics::registry& metrics,
              store::pending_store& bound);
  ~keyed_store();
  keyed_store(const keyed_store&) = delete;
  keyed_store& operator=(const keyed_store&) = delete;

  // Looks `r` up in the index. A fresh request is refused (over_limit) when what is
  // pending (everything, this store's requests included) reaches a bound of `limits`;
  // else it holds charge(r) from now on. With `accept_now` (no WAL), it is moved in and
  // pending at once; else it is reserved until accept() or abandon().
  admission admit(keyed_request& r, const store::pending_limits& limits, bool accept_now);
  // What a keyed request holds against the pending bounds until it is formed into a
  // batch: one entry for its key, one per increment, and the bytes of the request and
  // of its index entry (store/pending_charge.hpp). A request without increments costs
  // its key: a client cannot pile up keys for free.
  static store::pending_charge charge(const keyed_request& r) { return store::charge_of(r); }
  // What the index says of `key` with body `hash`, without admitting anything: replay,
  // conflict or in_progress as admit() says them, else fresh (not in the index), and
  // nothing is remembered or pending. Counted like admit() (a request, a replay).
  admission lookup(const std::string& key, const body_hash& hash);
  // A replay recognised elsewhere (the database's keys table): counted as one.
  void count_replay() { replays_.Increment(); }
  // The request admitted fresh is logged (or needs no log): it is pending now.
  void accept(keyed_request&& r);
  // It could not be logged: forget the reservation (nothing was applied).
  void abandon(const std::string& key);

  // Moves every pending request out (the flusher forms batches of them).
  std::vector<keyed_request> take_pending();
  // Puts requests taken by take_pending() back, in front (their batches could not be logged).
  void put_back(std::vector<keyed_request>&& requests);
  std::vector<keyed_request> pending_copy() const;
  // After a WAL replay: `pending` is pending again; every request of `in_batches` is
  // known to the index as accepted, as of its received_ms (forgotten a window after it,
  // as if there had been no restart).
  void restore(std::vector<keyed_request>&& pending, const std::vector<keyed_request>& in_batches);

  // Entries (charge) of the requests pending here, not yet in a batch (reserved ones
  // not included).
  std::size_t pending_entries() const;
  // The sum of pending deltas for one counter (for GET /v1/counters).
  std::int64_t pending(const store::counter_key& key) const;
  // The pending deltas of one counter per bucket of granularity `g` starting in
  // [from, to] (by each increment's `at`), appended to `out` (for its series).
  void pending_buckets(const store::counter_key& key, store::granularity g, std::int64_t from,
                       std::int64_t to,
                       std::vector<std::pair<std::int64_t, std::int64_t>>& out) const;
  std::size_t indexed_keys() const;

  // What a flush found in the database's keys table and dropped.
  void dropped_at_flush(std::size_t duplicates, std::size_t conflicts);
  clock::duration window() const { return window_; }
  // Whether the database has the keys table (as last seen; true until a schema check
  // says otherwise): without it a keyed request cannot be committed exactly once.
  bool table_present() const { return table_present_.load(std::memory_order_relaxed); }
  void set_table_present(bool present) { table_present_.store(present, std::memory_order_relaxed); }

 private:
  // The index of one shard: each remembered key once, in an entry found by hash and
  // linked into the shard's age list (see keyed_store.cpp).
  struct entry;
  struct shard;
  static constexpr std::size_t shard_count = 16;
  // Keys come from clients: hashed with a random SipHash key, so nobody can pick keys
  // that pile into one probe sequence or one shard (as the counter store's shards are).
  // Hashed once per call: the shard and the index's probe use the same hash.
  std::uint64_t hash_key(std::string_view key) const { return util::siphash<1, 3>(sip_, key); }
  shard& shard_of(std::uint64_t key_hash);
  // Drops the shard's expired entries and, past its share of max_keys_, its oldest
  // (never one in flight). Under the shard's mutex (REQUIRES on the definitions).
  void expire(shard& sh, clock::time_point now);
  // Remembers `r` (key hash `h`) as the shard's newest entry: a new entry, or the one
  // the key had (updated and moved to the newest end). Under the shard's mutex.
  void remember(shard& sh, const keyed_request& r, std::uint64_t h, clock::time_point now,
                bool in_flight);
  // What the index says of `key` (key hash `h`) with body `hash` (a replay counted), or
  // nullopt when it does not know the key. Under the shard's mutex.
  std::optional<admission> find(shard& sh, const std::string& key, std::uint64_t h,
                                const body_hash& hash);
  void add_pending(keyed_request&& r);

  const clock::duration window_;
  const std::size_t max_keys_per_shard_;
  const util::sip_key sip_;
  std::vector<std::unique_ptr<shard>> shards_;
  std::atomic<std::size_t> indexed_{0};
  // Pending requests: a deque, so that growing never moves what it holds under the lock.
  mutable util::mutex pending_mutex_;
  std::deque<keyed_request> pending_ GUARDED_BY(pending_mutex_);
  std::atomic<std::size_t> pending_entries_{0};
  std::atomic<std::size_t> pending_bytes_{0};
  store::pending_store& bound_;
  std::atomic<bool> table_present_{true};

  metrics::counter_handle& requests_;
  metrics::counter_handle& replays_;
  metrics::counter_handle& duplicates_;
  metrics::counter_handle& conflicts_;
  metrics::gauge_handle& keys_;
};

}  // namespace slotted::idempotency
