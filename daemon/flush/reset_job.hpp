#pragma once
// The reset job (README: HTTP API, Reset): clears one counter right after a flush cycle,
// on the flusher thread, ordered with the batches (see flusher::request_reset). Refused
// unless that cycle wrote every batch formed before it (nothing queued, nothing in
// doubt); then one transaction deletes the counter's slot and bucket rows with a ledger
// row of its own, the generation odd throughout (queue.hpp) so that an exact read
// retries, and what is pending for it is dropped, through the batch source (which logs
// it, synced) when there is one.
//
// Thread-safety: the flusher thread alone runs it (or the thread calling stop()).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>

#include "db/pool.hpp"
#include "db/repository.hpp"
#include "db/write_path.hpp"
#include "flush/internal.hpp"
#include "flush/queue.hpp"
#include "flush/settings.hpp"
#include "metrics/metrics.hpp"
#include "model/batch.hpp"
#include "model/result.hpp"
#include "store/pending_store.hpp"

namespace slotted::flush {

// What a counter reset (README: HTTP API, Reset) cleared.
struct cleared_counter {
  __int128 persisted = 0;    // SUM(count) of the slot rows deleted
  std::int64_t pending = 0;  // what this instance held pending for it, dropped
};
// What it cleared, or why nothing changed (draining, retry_later, database_unavailable,
// or the failed flush's code before it). Nothing changed, except after outcome_unknown
// (a connection lost during the reset's COMMIT and not resolved before the stop
// deadline).
using reset_result = result<cleared_counter>;

class reset_job {
 public:
  // `deadline` is the flusher's stop deadline; `progress`
  // tells the flusher that a statement was answered.
  reset_job(const settings& s, queue& q, store::pending_store& store, db::pool& pool,
            metrics::registry& metrics, const stop_deadline& deadline,
            std::function<void()> progress);

  // Drops what is pending through `source` (a WAL) rather than the store directly. Call
  // before the first reset.
  void attach_source(store::batch_source* source) { source_ = source; }

  // Resets `key` after the cycle that ended with `flushed`, under the id (run_id,
  // next_seq++) when it runs; `stopping`: the flusher is stopping (refused). Counts
  // the outcome in the reset metrics.
  reset_result run(const store::counter_key& key, const result<std::size_t>& flushed, bool stopping,
                   std::uint64_t run_id, std::uint64_t& next_seq);
  // A reset refused before it could run (counted).
  reset_result refused(failure why);

 private:
  // Why the reset cannot run after the cycle that ended with `flushed`, if so.
  std::optional<failure> refusal(const result<std::size_t>& flushed, bool stopping);
  // Commits the reset on `lease` (taken again after a lost connection), retrying lock
  // conflicts and re-sending a COMMIT in doubt until the ledger answers or the stop
  // deadline passes. Returns why it failed, else nullopt with `known` its figures.
  std::optional<failure> commit(const store::counter_key& key, const db::batch_identity& id,
                                std::optional<db::pool::lease>& lease, db::write_result& known);
  // The pause before a reset in doubt is re-sent (doubling `pause`, never past the stop
  // deadline).
  void wait_for_ledger(const store::counter_key& key, const db::db_error& e,
                       std::chrono::milliseconds& pause);
  // Drops what is pending for the counter, through the source when there is one.
  // Returns what was dropped.
  std::int64_t drop_pending(const store::counter_key& key);

  const settings& settings_;
  queue& queue_;
  store::pending_store& store_;
  db::pool& pool_;
  metrics::registry& metrics_;
  const stop_deadline& deadline_;
  const std::function<void()> progress_;
  store::batch_source* source_ = nullptr;
};

}  // namespace slotted::flush
