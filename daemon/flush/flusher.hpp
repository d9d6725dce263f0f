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
// Thread-safety: one background thread runs the cycles; within one it may hand batches
// to writer threads of its own (one per extra connection, started with the flusher and
// stopped after its final flush: see writer_threads.hpp). request_flush(),
// read_total(), ready() and the accessors may be called from any thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "db/pool.hpp"
#include "db/repository.hpp"
#include "flush/read_gate.hpp"
#include "flush/writer_threads.hpp"
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

struct settings {
  std::string instance_id;
  std::string table;
  std::chrono::milliseconds interval{1000};
  std::size_t max_rows_per_statement = 1000;
  unsigned slots = 100;
  std::chrono::milliseconds max_retry_backoff{30000};
  // Connections the queued batches are written over at once (flush.connections); the
  // pool must lend that many to the flusher besides what reads need.
  unsigned connections = 1;
  // Counters rolled up into an owning table: their rows get dirty marks in the flush
  // transaction, and the targets are verified with the schema.
  std::vector<db::rollup_target> rollups;
  // Told the table's key ranges at each schema check (may be null).
  ingest::table_limits* limits = nullptr;
  // Committed Idempotency-Keys older than this are pruned from the keys table.
  std::chrono::milliseconds idempotency_window{std::chrono::hours(24)};
  // Counters with buckets: their tables are verified with the schema (missing ones stop
  // the flush, see cycle()), and keyed batches derive their bucket rows with it.
  store::bucket_spec buckets;
  // Counters that keep the totals of top-N (counters[].top, db/top.hpp): only their rows
  // are added to the totals tables, which are verified with the schema when not empty.
  store::top_spec top;
  // Counters that dedupe items with a `client` (counters[].dedupe, db/uniques.hpp): their
  // table is verified with the schema and pruned of passed windows.
  store::dedupe_spec dedupe;
};

// A flush cycle: the rows it committed, or why it failed (database_unavailable with the
// database's message, wal_write_failed, deadline_passed, draining; unavailable for a
// failure of another kind, such as memory).
using flush_result = result<std::size_t>;

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

// One counter's counts per bucket (GET .../series): (bucket start, persisted + pending),
// in bucket order, buckets whose count is 0 left out; exact, or not_exact_yet as
// counter_reading.
struct series_reading {
  std::vector<std::pair<std::int64_t, __int128>> points;
};

// The two halves of a batch the database refused for its data (see write_queued):
// their ids derive from the parent's, so a replay splits the same way under the same
// ids and the ledger still recognises halves that committed. Pure, exposed for tests.
std::pair<flush_batch, flush_batch> split_batch(const flush_batch& b);

// What is left to write of `b` when the batches whose seqs are in `committed` (its own
// split parts among them) have committed: `b` itself when none of its parts did,
// else the split parts (see split_batch) not covered by a committed one, in order.
// Pure, exposed for tests.
std::vector<flush_batch> uncommitted_parts(const flush_batch& b,
                                           const std::vector<std::uint64_t>& committed);

// Cuts sorted deltas into batches; pure, exposed for tests.
std::vector<flush_batch> form_batches(std::vector<store::pending_delta> deltas,
                                      std::size_t max_rows, unsigned slots, std::uint64_t run_id,
                                      std::uint64_t first_seq, std::mt19937_64& rng,
                                      std::chrono::steady_clock::time_point oldest_arrival);

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
  void attach_source(store::batch_source* source) { source_ = source; }
  // Forms keyed batches of the keyed requests `keyed` holds, at every cycle. Call
  // before start().
  void attach_keyed(idempotency::keyed_store* keyed) { keyed_ = keyed; }
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
  // thread, one transaction (db::reset_counter) deletes its slot rows with a ledger row
  // of its own; then the store's pending delta for it is dropped, through the batch
  // source (which logs it, synced) when there is one. `done` is called once, on the
  // flusher thread (or the thread calling stop()), with what was cleared, or why
  // nothing changed: the cycle failed (database down, WAL unwritable), shutting down,
  // or the transaction failed. A connection lost after its COMMIT was sent leaves the
  // outcome unknown: like a batch in doubt, it is re-sent under the same id until the
  // ledger tells, holding the flusher meanwhile (bounded by the stop deadline).
  void request_reset(const store::counter_key& key, std::function<void(const reset_result&)> done);

  // Persisted SUM(count) plus what is still pending, never counting a batch twice or
  // not at all while it commits; when no exact figure can be had now, not_exact_yet
  // and why. Blocking: call from a database worker thread. Throws db_error when the
  // database cannot be read.
  result<counter_reading> read_total(const store::counter_key& key);

  // read_total() of each of `record_ids` (distinct) of `record_type`, with one
  // database statement per try (db::read_counts) and the same exactness rules.
  // multi_reader.cpp. Blocking: call from a database worker thread. Throws db_error.
  result<totals_reading> read_totals(std::uint32_t record_type,
                                     std::span<const std::uint64_t> record_ids);

  // Top-N (db/top.hpp): the `limit` largest persisted totals of `record_type`, or with
  // `g` those of the sums of its buckets starting in [from, to] (bucket-aligned). One at
  // a time per instance (a second meanwhile is told to retry), so top-N reads never hold
  // more than one connection of the pool the flushes need; a bucketed one past
  // db::max_top_rows stops. multi_reader.cpp. Blocking: call from a database worker
  // thread. Throws db_error.
  result<top_reading> read_top(
      std::uint32_t record_type, std::size_t limit,
      std::optional<store::granularity> g = std::nullopt, std::int64_t from = 0,
      std::int64_t to = 0);

  // The cap read_totals() and read_top() share (read_gate.hpp): past it they answer
  // retry_later at once. Exposed for tests, which hold its slots.
  read_gate& heavy_reads() { return heavy_reads_; }

  // The counter's buckets of granularity `g` starting in [from, to] (bucket-aligned):
  // persisted plus pending, exact as read_total() is (the same generation and in-doubt
  // rules). Blocking: call from a database worker thread. Throws db_error.
  result<series_reading> read_series(const store::counter_key& key, store::granularity g,
                                     std::int64_t from, std::int64_t to);

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
  // A ping when nothing was written, else the AUTO_INCREMENT check.
  void prove_connection(db::connection& conn, std::size_t rows);
  // Readiness, metrics and the result's last word (deadline, WAL) after a cycle.
  void finish_cycle(flush_result& result, std::chrono::steady_clock::time_point started,
                    bool wal_failed);
  void publish_success(const flush_result& result, std::chrono::steady_clock::time_point started);
  // housekeeping.cpp: the schema checks (throw a fatal db_error) and the prunes, each
  // run when due.
  void verify_schema(db::connection& conn);
  void prune_ledger_when_due(db::connection& conn);
  void prune_keys_when_due(db::connection& conn);
  // The exact read of read_total() and read_series(), on a connection of the pool:
  // `read_db` reads the database, then `add_pending` (under queue_mutex_: written
  // [&]() REQUIRES(queue_mutex_), unchecked through std::function) adds what is
  // pending, again until no commit started or ended during the read and no batch is in
  // doubt; at most 20 tries, each waiting up to 200 ms for that. Succeeds when the
  // figures are exact, else fails with what add_pending failed with (give up now) or
  // not_exact_yet: the counter is being written. Throws db_error (counted; a lost
  // connection is closed).
  result<void> read_stable(const std::function<void(db::connection&)>& read_db,
                           const std::function<result<void>()>& add_pending);
  // reset_job.cpp: the reset job of request_reset, after the cycle that ended with
  // `flushed`, and its steps.
  reset_result reset_now(const store::counter_key& key, const flush_result& flushed);
  reset_result refused_reset(failure why);
  // Why the reset cannot run after the cycle that ended with `flushed`, if so.
  std::optional<failure> reset_refusal(const flush_result& flushed);
  // Commits the reset on `lease` (taken again after a lost connection), retrying lock
  // conflicts and re-sending a COMMIT in doubt until the ledger answers or the stop
  // deadline passes. Returns why it failed, else nullopt with `known` its figures.
  std::optional<failure> commit_reset(const store::counter_key& key, const db::batch_identity& id,
                                      std::optional<db::pool::lease>& lease,
                                      db::reset_progress& known);
  // The pause before a reset in doubt is re-sent (doubling `pause`, never past the stop
  // deadline).
  void wait_for_reset_ledger(const store::counter_key& key, const db::db_error& e,
                             std::chrono::milliseconds& pause);
  // Drops what is pending for the counter, through the source when there is one.
  // Returns what was dropped.
  std::int64_t drop_pending_after_reset(const store::counter_key& key);
  // Makes the generation odd (true) or even again (false) around a reset's commit, so a
  // concurrent read_total() retries. Only while no batch is in flight (the reset runs
  // after its cycle, whose writers have all ended), or the parity would be the writers'.
  void set_committing(bool committing);
  using queue_position = std::list<flush_batch>::iterator;
  // One call of write_queued: its writers' shared state, under queue_mutex_ while they
  // run (not annotated: GUARDED_BY cannot name the flusher's mutex from here, and
  // write_queued reads it without the lock once they have ended).
  struct write_round {
    bool stop = false;         // an error or the stop deadline: no writer starts another batch
    std::exception_ptr error;  // the first writer's error, rethrown once all have ended
    std::size_t written = 0;
    bool popped = false;  // a batch left the queue: the WAL may release segments
  };
  // Commits queued batches, oldest first, over up to settings_.connections connections
  // (`conn` and, when more than one batch waits, leases of its own), until the queue is
  // empty, a writer fails or the stop deadline has passed. Returns once no batch is in
  // flight: rows committed; throws the first writer's db_error.
  std::size_t write_queued(db::connection& conn);
  // One writer: takes the oldest batch that may start (see batch_schedule.hpp), commits
  // it on `conn`, again until none is left to start or the round stops. Never throws:
  // an error stops the round and is kept in it. Returns true when `conn` was lost.
  bool write_batches(db::connection& conn, write_round& round, std::vector<db::counter_row>& dirty);
  // A writer of its own connection from the pool, beside the cycle's. A connection the
  // pool cannot open, or none free in it now (it does not wait for one), leaves the
  // round to the other writers (one fewer, not an error).
  void write_batches_on_lease(write_round& round);
  // Under queue_mutex_: the oldest batch that may start now, or queued_.end().
  queue_position next_batch() REQUIRES(queue_mutex_);
  // Under queue_mutex_: a batch is or is no longer in flight; the generation is odd
  // while any is (see read_total).
  void mark_in_flight(queue_position it) REQUIRES(queue_mutex_);
  void unmark_in_flight(queue_position it) REQUIRES(queue_mutex_);
  // deadline_hit_, read under queue_mutex_.
  bool deadline_hit() const EXCLUDES(queue_mutex_);
  // How one batch's commit ended: its outcome, or the database refused its data.
  struct commit_attempt {
    db::commit_outcome outcome{};
    std::optional<std::string> refused;
    std::size_t keyed_rows = 0;  // rows a keyed (or unique) batch upserted
  };
  // Commits `b` in one transaction with its ledger row, retrying deadlocks and lock
  // wait timeouts a few times (not past the stop deadline). Throws db_error for
  // anything else (a lost connection leaves the batch in doubt: see write_batches).
  // `dirty` is the writer's buffer for the batch's rolled-up rows.
  commit_attempt commit_with_retries(db::connection& conn, const flush_batch& b,
                                     std::vector<db::counter_row>& dirty);
  // Takes batch `it`, in flight until now, off the queue after `a`: counted as written
  // or already applied, dropped (one refused row), or replaced where it stands by its
  // two halves (refused, to find the bad rows). Returns rows written.
  std::size_t pop_committed(queue_position it, const commit_attempt& a);
  // A statement was answered or a batch committed: the cycle is not wedged.
  void progress();
  bool past_deadline() const;
  void publish_ready();
  // Reads the counters table's AUTO_INCREMENT headroom into the gauge; warns once when
  // it falls below autoincrement_warn_fraction of the column's range.
  void check_autoincrement(db::connection& conn);
  // Throws a fatal db_error naming the bucket tables settings_.buckets needs that do not
  // exist.
  void verify_bucket_tables(db::connection& conn);
  // The fatal error for an exhausted AUTO_INCREMENT column: names it, the table and
  // the ALTER TABLE that fixes it.
  db::db_error autoincrement_exhausted(db::connection& conn, const db::db_error& cause);
  // False when the source could not log the batches (what was taken went back).
  bool take_from_store();
  void publish(std::vector<flush_batch>&& batches);
  // Replaces every queued batch of `run` that came from the WAL by what is left of it
  // when it had been split and parts of it committed before the restart (one ledger
  // query). Only while no batch is in flight. Throws db_error.
  void expand_recovered(db::connection& conn, std::uint64_t run);
  void release_source();
  // The rows of `rows` whose counters are rolled up (a view of `out`, refilled).
  std::span<const db::counter_row> rolled_up_rows(std::span<const db::counter_row> rows,
                                                  std::vector<db::counter_row>& out);
  void note_failure(const db::db_error& e);
  std::chrono::milliseconds next_backoff();

  settings settings_;
  store::pending_store& store_;
  db::pool& pool_;
  metrics::registry& metrics_;
  std::uint64_t run_id_;
  std::uint64_t next_seq_ = 1;
  std::mt19937_64 rng_;
  std::vector<db::counter_row> dirty_rows_;
  store::batch_source* source_ = nullptr;
  idempotency::keyed_store* keyed_ = nullptr;
  store::pending_uniques* uniques_ = nullptr;
  std::chrono::steady_clock::time_point last_unique_prune_{};
  bool uniques_prune_behind_ = false;  // the last uniques prune had more due than its chunks
  // The unique batches of what uniques_ holds, seqs from next_seq_ on (flush/unique_batches.cpp).
  std::vector<flush_batch> form_unique_batches(std::size_t max_entries);
  // Commits a unique batch (db/uniques.hpp) and counts its entries. Throws db_error.
  commit_attempt commit_unique(db::connection& conn, const db::batch_identity& id,
                               const flush_batch& batch, std::vector<db::counter_row>& dirty);
  // Deletes the uniques rows of passed windows, bounded, once a minute.
  void prune_uniques_when_due(db::connection& conn);
  // Commits a keyed batch (see idempotency/keyed_batches.hpp) and counts what it
  // dropped. Throws db_error.
  commit_attempt commit_keyed(db::connection& conn, const db::batch_identity& id,
                              const flush_batch& batch, std::vector<db::counter_row>& dirty);

  // Guards queued_, the in-flight and in-doubt lists and generation_. The flusher's
  // threads alone change them. A list: a batch in flight stays where it is (and is
  // read by its writer without the lock) while others leave or are split around it.
  // The batches in the list are not annotated: a batch in flight is read by its writer
  // without the lock (the list itself is under it).
  mutable util::mutex queue_mutex_;
  std::condition_variable generation_changed_;
  // A batch left the flight or the round stopped: waiting writers look again.
  std::condition_variable writers_wake_;
  std::list<flush_batch> queued_ GUARDED_BY(queue_mutex_);
  std::size_t queued_rows_ GUARDED_BY(queue_mutex_) = 0;
  // Queued batches being committed now (at most settings_.connections).
  std::vector<const flush_batch*> in_flight_ GUARDED_BY(queue_mutex_);
  // Queued batches whose commit outcome is unknown (the connection was lost during it,
  // or recovered from the WAL) until a later attempt resolves it.
  std::vector<const flush_batch*> in_doubt_ GUARDED_BY(queue_mutex_);
  // Odd while batches are being committed: a concurrent read of the database may or
  // may not include them (see read_total).
  std::uint64_t generation_ GUARDED_BY(queue_mutex_) = 0;

  std::atomic<bool> top_running_{false};  // a read_top() holds a connection
  read_gate heavy_reads_;                  // read_totals() and read_top() (read_gate.hpp)
  std::atomic<bool> ready_{false};
  std::atomic<bool> reachable_{true};
  // True while a cycle runs; last_progress_ holds steady_clock ticks of its last sign
  // of progress (its start, an answered statement, a committed batch).
  std::atomic<bool> in_cycle_{false};
  std::atomic<std::chrono::steady_clock::rep> last_progress_{0};
  // steady_clock ticks of the stop deadline (max until stop()): no batch is started and
  // no lock wait retried past it. Set by stop() before it waits for the cycle in
  // progress, which reads it on the flusher thread, hence atomic.
  std::atomic<std::chrono::steady_clock::rep> deadline_{
      std::chrono::steady_clock::time_point::max().time_since_epoch().count()};
  bool deadline_hit_ GUARDED_BY(queue_mutex_) = false;
  // The cycle's own connection was lost in write_queued (flusher thread only): cycle()
  // discards it whichever writer's error came out first.
  bool conn_lost_ = false;
  // stop() began: resets still waiting are refused (the final cycle is for batches).
  std::atomic<bool> stopping_{false};
  // An extra writer's connection was refused (logged once until one is lent again).
  std::atomic<bool> helper_refused_{false};
  // The cycle's connection's max_statement_bytes(), for forming batches (read on the
  // WAL's thread when there is one).
  std::atomic<std::size_t> statement_budget_{std::size_t{1} << 20};
  bool schema_verified_ = false;
  bool autoincrement_warned_ = false;
  bool fatal_ = false;
  std::string last_error_;
  unsigned consecutive_failures_ = 0;
  util::mutex rollups_mutex_;
  // From set_rollups().
  std::optional<std::vector<db::rollup_target>> next_rollups_ GUARDED_BY(rollups_mutex_);
  std::chrono::steady_clock::time_point last_prune_{};
  bool ledger_prune_behind_ = false;  // the last ledger prune deleted all it was allowed
  std::chrono::steady_clock::time_point last_key_prune_{};
  bool keys_prune_behind_ = false;  // the last key prune deleted all it was allowed
  // The extra writers (flush.connections - 1), from start() until stop() after the
  // final flush. Before worker_: destroyed after its thread, the last to hand them a
  // round, has stopped.
  writer_threads writers_;
  // Last member: its thread must stop before anything it uses is destroyed.
  util::worker<flush_result> worker_;
};

}  // namespace slotted::flush
