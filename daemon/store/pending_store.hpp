#pragma once
// Sharded in-memory accumulation of not-yet-flushed deltas, keyed by counter.
//
// Thread-safety: every member function is safe to call concurrently. Ingest threads
// lock only the shards their keys hash to; the flusher swaps a shard's map out under
// that shard's lock and does its I/O with no lock held.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "model/buckets.hpp"
#include "model/counter_key.hpp"
#include "model/increment.hpp"
#include "model/pending_delta.hpp"
#include "store/pending_charge.hpp"

namespace slotted::store {

// over_limit: a pending bound is reached (see over_pending_limit); out_of_range: a
// counter's pending sum would pass max_pending_sum. Nothing applied in either case.
enum class add_result { applied, over_limit, out_of_range };

// How far a counter's pending sum (what accumulates in memory between two flushes)
// may go from zero: 2^62, half the int64 range. An add that would take one further is
// refused whole. The other half is headroom: requests applied concurrently (each
// checked against what it saw) may pass the bound by what they carry, never the
// int64 range, and the WAL's replay and hand-back sums stay exact.
constexpr std::int64_t max_pending_sum = std::int64_t{1} << 62;

class pending_store {
 public:
  using clock = std::chrono::steady_clock;

  explicit pending_store(unsigned shards);
  ~pending_store();

  // Which counters keep buckets: add() then also counts each of their increments in
  // its hour and day buckets (by its `at`), in the counter's shard, under the same
  // lock. Each pending bucket counts as a key against the pending limit. Call before
  // any other member.
  void set_buckets(bucket_spec spec) { buckets_ = std::move(spec); }
  const bucket_spec& buckets() const { return buckets_; }
  pending_store(const pending_store&) = delete;
  pending_store& operator=(const pending_store&) = delete;

  // Applies every increment, or none of them when a pending bound is reached (see
  // over_pending_limit). The bounds are checked once per call, so a single call may go
  // past them by at most its own keys. None of them either (out_of_range) when a
  // counter's pending sum would pass max_pending_sum.
  add_result add(std::span<const ingest::increment> increments, const pending_limits& limits);

  // What is pending, the one definition every admission path uses (README:
  // Configuration, flush.max_pending_keys and flush.max_pending_bytes): the keys held
  // here (counters and buckets, key_bytes each), what the batches handed to the flusher
  // but not yet written hold (see set_unwritten), what is held outside the shards
  // (keyed requests not yet in a batch, unique entries, see hold()), and `unapplied`
  // (logged by the WAL but not yet applied here, an upper bound).
  pending_charge charged(pending_charge unapplied = {}) const {
    const std::size_t k = keys();
    return pending_charge{k, k * key_bytes} + unwritten() + held_charge() + unapplied;
  }
  std::size_t pending_entries(std::size_t unapplied_keys = 0) const {
    return charged({unapplied_keys, 0}).entries;
  }
  // The pending bounds, the one copy of them: true when what is pending reaches either.
  bool over_pending_limit(const pending_limits& limits, pending_charge unapplied = {}) const {
    return limits.reached_by(charged(unapplied));
  }
  // What is pending outside the shards and the flusher's queue (the keyed store's
  // requests, reserved or pending, not yet formed into batches; unique entries): it
  // counts against the same bounds. release() gives back what hold() took.
  void hold(pending_charge c) {
    held_.fetch_add(c.entries, std::memory_order_relaxed);
    held_bytes_.fetch_add(c.bytes, std::memory_order_relaxed);
  }
  void release(pending_charge c) {
    held_.fetch_sub(c.entries, std::memory_order_relaxed);
    held_bytes_.fetch_sub(c.bytes, std::memory_order_relaxed);
  }
  std::size_t held() const { return held_.load(std::memory_order_relaxed); }
  pending_charge held_charge() const {
    return {held(), held_bytes_.load(std::memory_order_relaxed)};
  }

  // Whether add() could apply `increments` without passing max_pending_sum, given
  // deltas of total magnitude `unapplied` that will be applied first (to any keys).
  // `maybe` only when unapplied > 0: apply those, then ask again with 0, which is
  // exact when nothing else adds meanwhile (with a WAL, durable::committer applies
  // everything logged before it asks, and logs nothing new while it does).
  enum class fit { yes, no, maybe };
  fit fits(std::span<const ingest::increment> increments, std::uint64_t unapplied) const;
  // Sum of |delta| over `increments` (saturating).
  static std::uint64_t magnitude(std::span<const ingest::increment> increments);

  // Adds deltas (recovered from the WAL, or handed back) without a limit check.
  void add_deltas(std::span<const pending_delta> deltas);

  // Copies every shard's content into `out` (appended to), leaving the shards as they are.
  void copy_all(std::vector<pending_delta>& out) const;

  // Moves every shard's content out, leaving the shards empty; `out` is appended to.
  // Returns the time the oldest of the moved deltas arrived (nullopt when none).
  std::optional<clock::time_point> take_all(std::vector<pending_delta>& out);

  // The delta accumulated for one key, 0 when none.
  std::int64_t pending(const counter_key& key) const;

  // Removes one counter (a reset, README: HTTP API, Reset), its total and its pending
  // buckets, and returns the total's delta, 0 when none. An add() running at the same
  // time lands wholly before (dropped with it) or after (kept): the shard's lock orders
  // them.
  std::int64_t drop(const counter_key& key);

  // The pending counts of one counter's buckets of granularity `g` that start in
  // [from, to], appended to `out` as (bucket start, count), unordered, a bucket possibly
  // in several parts (sum them).
  void pending_buckets(const counter_key& key, granularity g, std::int64_t from, std::int64_t to,
                       std::vector<std::pair<std::int64_t, std::int64_t>>& out) const;

  // Keys held in the shards now: counters and pending buckets.
  std::size_t keys() const { return keys_.load(std::memory_order_relaxed); }

  // The flusher reports what its batches not yet written hold (rows, bucket rows,
  // Idempotency-Keys and unique entries, and their bytes); it counts against the
  // pending bounds so that memory stays bounded during an outage.
  void set_unwritten(pending_charge c) {
    unwritten_rows_.store(c.entries, std::memory_order_relaxed);
    unwritten_bytes_.store(c.bytes, std::memory_order_relaxed);
  }
  std::size_t unwritten_rows() const { return unwritten_rows_.load(std::memory_order_relaxed); }
  pending_charge unwritten() const {
    return {unwritten_rows(), unwritten_bytes_.load(std::memory_order_relaxed)};
  }

  // When the oldest delta still in the shards arrived; nullopt when they are empty.
  std::optional<clock::time_point> oldest() const;

 private:
  struct shard;
  struct shard_groups;
  add_result add_one(const ingest::increment& inc);
  add_result add_many(std::span<const ingest::increment> increments);
  const shard_groups& group_by_shard(std::span<const ingest::increment> increments) const;
  // Whether a request of total magnitude `request` could take a pending sum of a shard
  // it touches past max_pending_sum (then checked exactly).
  bool near_bound(const shard_groups& g, std::uint64_t request) const;
  void apply_by_shard(std::span<const ingest::increment> increments, const shard_groups& g,
                      bool locked);
  std::size_t shard_of(std::uint64_t hash) const { return hash % shard_count_; }

  std::size_t shard_count_;
  std::unique_ptr<shard[]> shards_;
  bucket_spec buckets_;
  std::atomic<std::size_t> keys_{0};
  std::atomic<std::size_t> unwritten_rows_{0};
  std::atomic<std::size_t> unwritten_bytes_{0};
  std::atomic<std::size_t> held_{0};
  std::atomic<std::size_t> held_bytes_{0};
};

}  // namespace slotted::store
