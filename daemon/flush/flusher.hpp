#pragma once
// Moves pending deltas from the store into the database, exactly once (README: Guarantees, exactly
// once).
//
// Every flush interval the flusher takes everything out of the store, drops zero net
// deltas, sorts the rest by key (one lock order for every writer), cuts them into
// batches of at most max_rows_per_statement rows and gives each batch one random slot
// in [0, slots) for all its rows. A batch's content and id (instance, run, seq) are
// fixed once formed. Each batch commits in one transaction with its ledger row, so a
// retry after an unknown COMMIT outcome finds the ledger row and applies nothing.
// Batches that fail stay queued, oldest first, and are retried with capped
// exponential backoff and jitter before anything new is taken from the store, so
// hot keys keep aggregating in memory during an outage.
//
// With `connections` above 1 the queued batches of a cycle are written over that many
// connections at once, a batch starting only when it conflicts with no batch before it
// in the queue (see batch_schedule.hpp); the cycle ends once none is in flight.
//
// Its parts are units of their own, which the cycle (flusher.cpp) calls in turn: the
// batch queue (queue.hpp: queued, in flight, in doubt, the generation; the only state
// the writers and the readers share), the batch writer (batch_writer.hpp, over the
// writer threads of writer_threads.hpp), housekeeping (housekeeping.hpp: schema checks and
// prunes), the exact reader (exact_reader.hpp) and the reset job (reset_job.hpp).
//
// Thread-safety: one background thread runs the cycles; within one it may hand batches
// to writer threads of its own (one per extra connection, started with the flusher and
// stopped after its final flush: see writer_threads.hpp). request_flush(),
// read_total(), ready() and the accessors may be called from any thread.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "db/pool.hpp"
#include "db/repository.hpp"
#include "flush/batch_forming.hpp"
#include "flush/batch_writer.hpp"
#include "flush/exact_reader.hpp"
#include "flush/housekeeping.hpp"
#include "flush/internal.hpp"
#include "flush/queue.hpp"
#include "flush/read_gate.hpp"
#include "flush/reset_job.hpp"
#include "flush/settings.hpp"
#include "idempotency/keyed_store.hpp"
#include "ingest/table_limits.hpp"
#include "metrics/metrics.hpp"
#include "model/batch.hpp"
#include "model/result.hpp"
#include "model/top_spec.hpp"
#include "store/pending_store.hpp"
#include "store/pending_uniques.hpp"
#include "util/thread_annotations.hpp"
#include "util/worker.hpp"

namespace slotted::flush {

using store::flush_batch;

// A flush cycle: the rows it committed, or why it failed (database_unavailable with the
// database's message, wal_write_failed, deadline_passed, draining; unavailable for a
// failure of another kind, such as memory).
using flush_result = result<std::size_t>;

class flusher final : public store::batch_queue {
 public:
  flusher(settings s, store::pending_store& store, db::pool& pool, metrics::registry& metrics);
  ~flusher() override;
  flusher(const flusher&) = delete;
  flusher& operator=(const flusher&) = delete;

  void start();

  // Takes batches through `source` (the durable path: it logs every batch before it
  // may commit) and tells it what has committed, instead of taking the store's content
  // itself. Call before start().
  void attach_source(store::batch_source* source) {
    source_ = source;
    housekeeping_.attach_source(source);
    writer_.attach_source(source);
    reset_job_.attach_source(source);
  }
  // Forms keyed batches of the keyed requests `keyed` holds, at every cycle. Call
  // before start().
  void attach_keyed(idempotency::keyed_store* keyed) {
    keyed_ = keyed;
    housekeeping_.attach_keyed(keyed);
    writer_.attach_keyed(keyed);
    reader_.attach_keyed(keyed);
  }
  // Forms unique batches (db/uniques.hpp) of the entries `uniques` holds, at every cycle.
  // Call before start().
  void attach_uniques(store::pending_uniques* uniques) { uniques_ = uniques; }
  // Queues batches recovered from the WAL (they keep their ids), in doubt until the
  // ledger says whether they committed before the restart. Call before start().
  void enqueue(std::vector<flush_batch> batches);

  // store::batch_queue
  std::vector<flush_batch> queued_copy() override;
  void retag_all(std::uint64_t tag) override;

  // Stops the periodic cycles, then keeps flushing until everything is written or
  // `deadline` passes; the deadline is checked before every batch, so a long backlog
  // cannot hold the stop past it (only a statement already sent can, bounded by the
  // I/O timeout). Returns the number of rows that could not be written.
  std::size_t stop(std::chrono::steady_clock::time_point deadline);

  // Runs a cycle as soon as the flusher is free; `done` is called on the flusher
  // thread with its result. The cycle takes everything added before this call.
  void request_flush(std::function<void(const flush_result&)> done);

  // Resets one counter (README: HTTP API, Reset), ordered with the batches: right after
  // a flush cycle that starts after this call (so every increment acknowledged before
  // it is in the database, nothing queued and nothing in flight), on the flusher
  // thread, one transaction (db::apply, a reset set) deletes its slot rows with a ledger row
  // of its own; then the store's pending delta for it is dropped, through the batch
  // source (which logs it, synced) when there is one. `done` is called once, on the
  // flusher thread (or the thread calling stop()), with what was cleared, or why
  // nothing changed: the cycle failed (database down, WAL unwritable), shutting down,
  // or the transaction failed. A connection lost after its COMMIT was sent leaves the
  // outcome unknown: like a batch in doubt, it is re-sent under the same id until the
  // ledger tells, holding the flusher meanwhile (bounded by the stop deadline).
  void request_reset(const store::counter_key& key, std::function<void(const reset_result&)> done);

  // The exact reads (exact_reader.hpp), from any thread.
  result<counter_reading> read_total(const store::counter_key& key) {
    return reader_.read_total(key);
  }
  result<totals_reading> read_totals(std::uint32_t record_type,
                                     std::span<const std::uint64_t> record_ids) {
    return reader_.read_totals(record_type, record_ids);
  }
  result<top_reading> read_top(std::uint32_t record_type, std::size_t limit,
                               std::optional<store::granularity> g = std::nullopt,
                               std::int64_t from = 0, std::int64_t to = 0) {
    return reader_.read_top(record_type, limit, g, from, to);
  }
  result<series_reading> read_series(const store::counter_key& key, store::granularity g,
                                     std::int64_t from, std::int64_t to) {
    return reader_.read_series(key, g, from, to);
  }
  read_gate& heavy_reads() { return reader_.heavy_reads(); }

  // The database was reachable and the schema valid at the last cycle, and the probe
  // (see db/probe.hpp) has not found it gone since.
  bool ready() const { return ready_.load() && reachable_.load(); }
  // The probe's latest answer. When the database comes back, a cycle runs at once
  // rather than at the end of the backoff, so readiness and the backlog follow it.
  void probe_result(bool reachable);
  // False when a cycle has made no progress for `limit`: no batch committed, no
  // statement answered (even with an error such as a lock wait timeout). Then the
  // flusher is wedged and the watchdog stops pinging. A long cycle that keeps
  // answering (a big backlog draining, lock waits retried) is healthy, and so is
  // waiting between cycles, even in a long backoff.
  bool healthy(std::chrono::steady_clock::duration limit) const;

  // Sets pending_keys and pending_oldest_age_seconds from the store and the queue now
  // (at every flush cycle and every scrape).
  void update_gauges();

  // Replaces the rolled-up counters (a config reload). Thread-safe; the next cycle
  // takes them and verifies the schema and the targets again before it writes.
  void set_rollups(std::vector<db::rollup_target> rollups);

 private:
  // flusher.cpp: the cycle and its steps.
  flush_result cycle();
  // Marks the cycle started and takes the rollups set_rollups() left.
  void begin_cycle();
  // The backlog, then what the store holds (`wal_failed` when the source could not log
  // it). Returns rows committed; throws db_error.
  std::size_t write_backlog_then_new(db::connection& conn, bool& wal_failed);
  // Readiness, metrics and the result's last word (deadline, WAL) after a cycle.
  void finish_cycle(flush_result& result, std::chrono::steady_clock::time_point started,
                    bool wal_failed);
  void publish_success(const flush_result& result, std::chrono::steady_clock::time_point started);
  // A statement was answered or a batch committed: the cycle is not wedged.
  void progress();
  void publish_ready();
  // False when the source could not log the batches (what was taken went back).
  bool take_from_store();
  void note_failure(const db::db_error& e);
  std::chrono::milliseconds next_backoff();

  settings settings_;
  store::pending_store& store_;
  db::pool& pool_;
  metrics::registry& metrics_;
  std::uint64_t run_id_;
  std::uint64_t next_seq_ = 1;
  std::mt19937_64 rng_;
  store::batch_source* source_ = nullptr;
  idempotency::keyed_store* keyed_ = nullptr;
  store::pending_uniques* uniques_ = nullptr;
  // The unique batches of what uniques_ holds, seqs from next_seq_ on (flush/unique_batches.cpp).
  std::vector<flush_batch> form_unique_batches(std::size_t max_entries);

  // Set by stop() before it waits for the cycle in progress.
  stop_deadline deadline_;
  // The batches: queued, in flight, in doubt, and the generation reads follow.
  queue queue_;
  // The schema checks and the prunes, around each cycle's writes.
  housekeeping housekeeping_;

  // The exact reads, on connections of the pool, from any thread.
  exact_reader reader_;
  // The resets request_reset() queues, each run after a cycle on the flusher thread.
  reset_job reset_job_;
  // Commits the queued batches, over its own writer threads beside the flusher's. Before
  // worker_: its threads stop after the flusher thread, the last to hand them a round.
  batch_writer writer_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> reachable_{true};
  // True while a cycle runs; last_progress_ holds steady_clock ticks of its last sign
  // of progress (its start, an answered statement, a committed batch).
  std::atomic<bool> in_cycle_{false};
  std::atomic<std::chrono::steady_clock::rep> last_progress_{0};
  // stop() began: resets still waiting are refused (the final cycle is for batches).
  std::atomic<bool> stopping_{false};
  // The cycle's connection's max_statement_bytes(), for forming batches (read on the
  // WAL's thread when there is one).
  std::atomic<std::size_t> statement_budget_{std::size_t{1} << 20};
  bool fatal_ = false;
  std::string last_error_;
  unsigned consecutive_failures_ = 0;
  util::mutex rollups_mutex_;
  // From set_rollups().
  std::optional<std::vector<db::rollup_target>> next_rollups_ GUARDED_BY(rollups_mutex_);
  // Last member: its thread must stop before anything it uses is destroyed.
  util::worker<flush_result> worker_;
};

}  // namespace slotted::flush
