#pragma once
// What moves downstream from the store: rows and the batches they are cut into, and the
// two interfaces between the durable path and the flusher. A neutral place: the store,
// the WAL, the flusher and the database layer all include it, and it includes none of
// them, so the data still flows one way (README: Design).

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <variant>
#include <vector>

#include "model/counter_key.hpp"
#include "model/keyed_request.hpp"
#include "model/pending_delta.hpp"
#include "model/uniques.hpp"

namespace slotted::store {

// One counter's delta as written: the slot is drawn per batch (see flush::form_batches).
struct counter_row {
  std::uint32_t record_type = 0;
  std::uint64_t record_id = 0;
  std::uint16_t slot = 0;
  std::int64_t delta = 0;

  counter_key key() const { return {record_type, record_id}; }
};

// Rows in the flush order of their counters (counter_key's), whatever their slot: the
// order every writer of counter rows sorts by.
struct counter_order_t {
  bool operator()(const counter_row& a, const counter_row& b) const { return a.key() < b.key(); }
};
inline constexpr counter_order_t counter_order{};

// One counter's delta in one bucket (README: Counts per bucket): written to
// `<table>_hour` or `<table>_day` under the slot of its batch, in the same transaction
// as the batch's totals.
struct bucket_row {
  std::uint32_t record_type = 0;
  std::uint64_t record_id = 0;
  granularity gran = granularity::hour;
  std::int64_t bucket = 0;  // the bucket's start, unix seconds (UTC)
  std::uint16_t slot = 0;
  std::int64_t delta = 0;
};

// What a batch writes besides its rows, a closed set: every place that treats the kinds
// differently visits it (std::visit with one overload per kind), so a fourth kind is a
// compile error there, not a silent fall-through to "plain".
//
// plain: the rows and bucket rows are the batch.
struct plain_content {};
// keyed (see idempotency/keyed_batches.hpp): these requests, whose increments `rows`
// and `bucket_rows` sum; each is applied only if its key is not committed yet.
struct keyed_content {
  std::vector<idempotency::keyed_request> requests;
};
// unique (db/uniques.hpp): these entries, sorted, each counted only if no batch
// committed it before; the batch's `rows` and `bucket_rows` stay empty (what it adds is
// known only as it commits), its rows go under `slot`.
struct unique_content {
  std::vector<unique_entry> entries;
  std::uint16_t slot = 0;
};
using batch_content = std::variant<plain_content, keyed_content, unique_content>;

// A unit of exactly-once writing: fixed rows (sorted by key, slots drawn) and a fixed
// id (instance, run_id, seq), committed in one transaction with its ledger row.
struct flush_batch {
  std::uint64_t run_id = 0;
  std::uint64_t seq = 0;
  std::vector<counter_row> rows;
  // The bucket counts of the counters in `rows` (sorted by counter, granularity,
  // bucket): every counter with a bucket row has a row in `rows` (its delta may be 0),
  // so a split by rows keeps each counter's total and buckets together.
  std::vector<bucket_row> bucket_rows{};
  std::chrono::steady_clock::time_point oldest_arrival;
  // The WAL segment holding the record that logged this batch (0 without a WAL).
  std::uint64_t wal_tag = 0;
  // Replayed from the WAL: parts of it may have committed already (see
  // flusher::expand_recovered).
  bool recovered = false;
  batch_content content{};
};

// The content of one kind, or null: for the places that only ask "is it keyed?".
inline const keyed_content* keyed_of(const flush_batch& b) {
  return std::get_if<keyed_content>(&b.content);
}
inline keyed_content* keyed_of(flush_batch& b) {
  return std::get_if<keyed_content>(&b.content);
}
inline const unique_content* unique_of(const flush_batch& b) {
  return std::get_if<unique_content>(&b.content);
}
inline unique_content* unique_of(flush_batch& b) {
  return std::get_if<unique_content>(&b.content);
}

// A keyed batch's requests; none for the other kinds.
inline std::span<const idempotency::keyed_request> keyed_requests(const flush_batch& b) {
  const auto* k = keyed_of(b);
  return k != nullptr ? std::span<const idempotency::keyed_request>(k->requests)
                      : std::span<const idempotency::keyed_request>{};
}

// For std::visit: one lambda per alternative.
template <class... F>
struct overloaded : F... {
  using F::operator()...;
};
template <class... F>
overloaded(F...) -> overloaded<F...>;

// The flusher's queue of formed batches, as the durable path sees it (for a snapshot).
class batch_queue {
 public:
  virtual ~batch_queue() = default;
  // Copies of every queued batch.
  virtual std::vector<flush_batch> queued_copy() = 0;
  // Every queued batch is logged in segment `tag` now (a snapshot logged them): its
  // wal_tag becomes `tag` (for a batch in flight, once it comes back from its writer).
  virtual void retag_all(std::uint64_t tag) = 0;
};

// Where the flusher takes its batches from when a WAL is on (durable::committer).
class batch_source {
 public:
  virtual ~batch_source() = default;
  // Forms batches from what the store held, oldest arrival given.
  using former = std::function<std::vector<flush_batch>(std::vector<pending_delta>&&,
                                                        std::chrono::steady_clock::time_point)>;
  // Queues formed batches (runs before take() returns, so that nothing taken is ever
  // in neither the store, the queue nor a snapshot).
  using publisher = std::function<void(std::vector<flush_batch>&&)>;
  // Takes the store's content, forms batches and logs them before any may commit, then
  // publishes them. When they cannot be logged the content goes back to the store and
  // false is returned.
  virtual bool take(const former& form, const publisher& publish) = 0;
  // Every queued batch has wal_tag >= min_queued_tag (UINT64_MAX: none queued; a batch
  // in flight counts with the tag retag_all gave it).
  virtual void release(std::uint64_t min_queued_tag) = 0;
  // True when the log holds no batch it has not logged as committed (see
  // durable::committer); until then ledger rows must not be pruned.
  virtual bool batches_logged_committed() = 0;
  // A reset's cut (README: HTTP API, Reset): drops `key`'s pending delta from the store
  // and logs a reset record, synced whatever wal.fsync says, between two groups: every
  // increment logged before it is dropped with it, none logged after. Returns the delta
  // dropped; nullopt, having dropped nothing, when the record cannot be written (or
  // stop() began).
  virtual std::optional<std::int64_t> drop_pending(const counter_key& key) = 0;
};

}  // namespace slotted::store
