#pragma once
// The batch writer: commits the queued batches (queue.hpp), oldest first, over up to
// flush.connections connections at once: the cycle's own and, when more than one batch
// waits, leases of its own on long-lived writer threads (writer_threads.hpp). Each
// batch commits in one transaction with its ledger row; deadlocks and lock wait
// timeouts are retried a few times; a batch the database refuses for its data is split
// in two where it stands (batch_forming.hpp), down to the one row, request or entry at
// fault, which is dropped, loudly. Batches recovered from the WAL are first checked
// against the ledger for split parts that committed before the restart.
//
// Thread-safety: write_queued() is called by the flusher thread alone, one round at a
// time; within a round its writers share only the queue and the round's results.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "db/pool.hpp"
#include "db/repository.hpp"
#include "flush/housekeeping.hpp"
#include "flush/internal.hpp"
#include "flush/queue.hpp"
#include "flush/settings.hpp"
#include "flush/writer_threads.hpp"
#include "idempotency/keyed_store.hpp"
#include "metrics/metrics.hpp"
#include "model/batch.hpp"
#include "util/thread_annotations.hpp"

namespace slotted::flush {

class batch_writer {
 public:
  // `deadline` is the flusher's stop deadline; `progress`
  // tells the flusher that a statement was answered or a batch committed; `hk` names an
  // exhausted AUTO_INCREMENT column.
  batch_writer(const settings& s, queue& q, db::pool& pool, metrics::registry& metrics,
               housekeeping& hk, const stop_deadline& deadline, std::function<void()> progress);
  batch_writer(const batch_writer&) = delete;
  batch_writer& operator=(const batch_writer&) = delete;

  // Tells `source` (the WAL) when batches left the queue, so it may release segments.
  void attach_source(store::batch_source* source) { source_ = source; }
  // Counts the requests of keyed batches found committed already.
  void attach_keyed(idempotency::keyed_store* keyed) { keyed_ = keyed; }
  // Starts the extra writer threads (flush.connections - 1).
  void start();
  // Stops them (after the final flush: no round comes after it).
  void stop();

  // Commits queued batches, oldest first, over up to settings.connections connections
  // (`conn` and, when more than one batch waits, leases of its own), until the queue is
  // empty, a writer fails or the stop deadline has passed. Returns once no batch is in
  // flight: rows committed; throws the first writer's db_error.
  std::size_t write_queued(db::connection& conn);
  // `conn` was lost in the last write_queued (whichever writer's error came out first):
  // the caller discards it.
  bool conn_lost() const { return conn_lost_; }

 private:
  using queue_position = queue::position;
  // One call of write_queued: what its writers found, read by it once they have ended.
  // Whether the round stops (an error, the stop deadline) is the queue's (stop_round).
  struct write_round {
    util::mutex mutex;
    std::exception_ptr error GUARDED_BY(mutex);  // the first writer's, rethrown at the end
    std::size_t written GUARDED_BY(mutex) = 0;
    bool popped GUARDED_BY(mutex) = false;  // a batch left the queue: the WAL may release
  };
  // One writer: takes the oldest batch that may start (see batch_schedule.hpp), commits
  // it on `conn`, again until none is left to start or the round stops. Never throws:
  // an error stops the round and is kept in it. Returns true when `conn` was lost.
  bool write_batches(db::connection& conn, write_round& round, std::vector<db::counter_row>& dirty);
  // A writer of its own connection from the pool, beside the cycle's. A connection the
  // pool cannot open, or none free in it now (it does not wait for one), leaves the
  // round to the other writers (one fewer, not an error).
  void write_batches_on_lease(write_round& round);
  // How one batch's commit ended: its outcome, or the database refused its data.
  struct commit_attempt {
    db::commit_outcome outcome{};
    std::optional<std::string> refused;
    std::size_t rows = 0;  // rows upserted (a keyed or unique batch: those it applied)
  };
  // Commits `b` in one transaction with its ledger row, retrying deadlocks and lock
  // wait timeouts a few times (not past the stop deadline). Throws db_error for
  // anything else (a lost connection leaves the batch in doubt: see write_batches).
  // `dirty` is the writer's buffer for the batch's rolled-up rows.
  commit_attempt commit_with_retries(db::connection& conn, const store::flush_batch& b,
                                     std::vector<db::counter_row>& dirty);
  // Takes batch `it`, in flight until now, off the queue after `a`: counted as written
  // or already applied, dropped (one refused row), or replaced where it stands by its
  // two halves (refused, to find the bad rows). Returns rows written.
  std::size_t pop_committed(queue_position it, const commit_attempt& a);
  // Replaces every queued batch of `run` that came from the WAL by what is left of it
  // when it had been split and parts of it committed before the restart (one ledger
  // query). Only while no batch is in flight. Throws db_error.
  void expand_recovered(db::connection& conn, std::uint64_t run);
  void release_source();
  // One attempt at batch `id` (db::apply), and what a keyed or a unique
  // batch dropped counted. Throws db_error.
  commit_attempt commit_once(db::connection& conn, const db::batch_identity& id,
                             const store::flush_batch& batch, std::vector<db::counter_row>& dirty);

  const settings& settings_;
  queue& queue_;
  db::pool& pool_;
  metrics::registry& metrics_;
  housekeeping& housekeeping_;
  const stop_deadline& deadline_;
  const std::function<void()> progress_;
  store::batch_source* source_ = nullptr;
  idempotency::keyed_store* keyed_ = nullptr;
  // The cycle's thread's buffer for rolled-up rows.
  std::vector<db::counter_row> dirty_rows_;
  // conn_lost(), set by write_queued on the flusher thread.
  bool conn_lost_ = false;
  // An extra writer's connection was refused (logged once until one is lent again).
  std::atomic<bool> helper_refused_{false};
  // The extra writers (flush.connections - 1), from start() until stop() after the
  // final flush.
  writer_threads writers_;
};

}  // namespace slotted::flush
