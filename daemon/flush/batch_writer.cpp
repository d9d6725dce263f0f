// The batch writer (see batch_writer.hpp).
#include "flush/batch_writer.hpp"

#include <algorithm>
#include <exception>
#include <thread>

#include "db/errors.hpp"
#include "db/write_path.hpp"
#include "flush/batch_forming.hpp"
#include "flush/internal.hpp"
#include "idempotency/keyed_batches.hpp"
#include "util/log.hpp"

namespace slotted::flush {

batch_writer::batch_writer(const settings& s, queue& q, db::pool& pool, metrics::registry& metrics,
                           housekeeping& hk, const stop_deadline& deadline,
                           std::function<void()> progress)
    : settings_(s),
      queue_(q),
      pool_(pool),
      metrics_(metrics),
      housekeeping_(hk),
      deadline_(deadline),
      progress_(std::move(progress)) {}

void batch_writer::start() {
  writers_.start(settings_.connections > 1 ? settings_.connections - 1 : 0);
}

void batch_writer::stop() {
  writers_.stop();
}

batch_writer::commit_attempt batch_writer::commit_with_retries(
    db::connection& conn, const flush_batch& b, std::vector<db::counter_row>& dirty) {
  const db::batch_identity id{settings_.instance_id, b.run_id, b.seq};
  // Each writer thread pauses by a generator of its own.
  thread_local std::minstd_rand jitter_rng{std::random_device{}()};
  for (int attempt = 0;; ++attempt) {
    try {
      const auto done = commit_once(conn, id, b, dirty);
      progress_();
      return done;
    } catch (const db::db_error& e) {
      progress_();  // an answer, even an error, is a sign of life
      // Not a bad row: no row can be written. Nothing is dropped; the batch stays
      // queued until the column is widened (checked again at each retry).
      if (e.autoincrement_exhausted()) throw housekeeping_.autoincrement_exhausted(conn, e);
      if (e.data_error()) return {db::commit_outcome{}, e.what()};
      // A statement too large for max_allowed_packet (the connection refused to send
      // it, the transaction is rolled back): the batch is split like one refused for its
      // data, never resent whole.
      if (e.too_large()) return {db::commit_outcome{}, e.what()};
      const auto kind = e.kind();
      // Past the stop deadline a retry would hold the stop for another lock wait
      // (up to innodb_lock_wait_timeout): the batch stays queued instead.
      if ((kind != db::error_kind::deadlock && kind != db::error_kind::lock_wait_timeout) ||
          attempt + 1 >= lock_retries || deadline_.passed()) {
        throw;
      }
      metrics_.db_error(kind);
      std::uniform_int_distribution<int> pause_ms(5, 20 << attempt);
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms(jitter_rng)));
    }
  }
}

std::size_t batch_writer::pop_committed(queue_position it, const commit_attempt& a) {
  const flush_batch& batch = *it;  // in flight: only this writer removes it
  if (a.refused && splittable(batch)) {
    // Rolled back, so nothing of it was applied: split it to find the rows at fault
    // and let the others through. A keyed batch is split by its requests (a request is
    // applied whole or not at all); its halves' rows may then add up to more than the
    // whole's (a counter in both halves), so the count of queued rows follows them.
    // The halves take its place in the queue (the left one first), so they keep its
    // order against the batches before and after it.
    auto [left, right] = split_batch(batch);
    if (store::keyed_of(batch) != nullptr)
      idempotency::split_requests(batch, left, right, settings_.buckets);
    queue_.replace_with_halves(it, std::move(left), std::move(right));
    return 0;
  }
  std::size_t written = 0;
  const auto* keyed = store::keyed_of(batch);
  const auto* unique = store::unique_of(batch);
  if (a.refused && keyed != nullptr && !keyed->requests.empty()) {
    // One keyed request the table cannot hold: dropped like a row (its key stays
    // uncommitted, so a retry is refused the same way).
    metrics_.rows_refused.Increment(static_cast<double>(batch.rows.size()));
    log::error("the database refuses the increments of the request with Idempotency-Key ",
               keyed->requests.front().key, ": ", *a.refused, "; they are dropped");
  } else if (a.refused && unique != nullptr && !unique->entries.empty()) {
    const auto& e = unique->entries.front();
    metrics_.rows_refused.Increment();
    log::error("the database refuses the unique entry of counter (", e.record_type, ", ",
               e.record_id, ") in window ", e.window, ": ", *a.refused, "; it is dropped");
  } else if (a.refused) {
    // One row the table cannot hold (e.g. an id above a seed-style INT column, or a
    // total past BIGINT): dropped, loudly, so that it does not block every later
    // batch forever.
    const auto& r = batch.rows.front();
    metrics_.rows_refused.Increment();
    log::error("the database refuses the delta ", r.delta, " of counter (", r.record_type, ", ",
               r.record_id, "): ", *a.refused, "; it is dropped");
  } else if (a.outcome == db::commit_outcome::applied) {
    // A keyed batch writes only the rows of the requests whose keys were new.
    written = a.rows;
    metrics_.flush_rows.Increment(static_cast<double>(written));
    metrics_.flush_statements.Increment();
  } else {
    metrics_.batches_already_applied.Increment();
    log::info("batch ", batch.seq, " of run ", batch.run_id,
              " was already committed (found in the ledger); not applied again");
  }
  queue_.pop(it);
  return written;
}

bool batch_writer::write_batches(db::connection& conn, write_round& round,
                                 std::vector<db::counter_row>& dirty) {
  bool lost = false;
  while (const auto next = queue_.take_next(deadline_)) {
    const queue_position it = *next;
    try {
      const auto attempt = commit_with_retries(conn, *it, dirty);
      const std::size_t written = pop_committed(it, attempt);
      util::lock_guard lock(round.mutex);
      round.written += written;
      round.popped = true;
    } catch (...) {
      // Rolled back (outcome known) unless the connection went: then the batch stays
      // in doubt until a later attempt resolves it. Either way it stays queued, and the
      // round stops: the other writers finish the batch they hold and start no other.
      try {
        throw;
      } catch (const db::db_error& e) {
        lost = e.connection_lost();
      } catch (...) {
        // Not a database error (bad_alloc): rethrown by write_queued all the same. The
        // transaction may be open on `conn`: it is closed (which rolls it back) as after
        // a lost connection, and the batch resolved against the ledger.
        lost = true;
      }
      {
        util::lock_guard lock(round.mutex);
        if (!round.error) round.error = std::current_exception();
      }
      queue_.give_back(it, lost);
    }
  }
  return lost;
}

void batch_writer::write_batches_on_lease(write_round& round) {
  std::vector<db::counter_row> dirty;
  try {
    std::optional<db::pool::lease> lease;
    try {
      // Never waits for a lease to come back: a read or a rollup run may hold one for
      // long, and the round (and a stop's deadline) would wait for this writer.
      if (auto free = pool_.try_acquire()) lease.emplace(std::move(*free));
    } catch (const db::db_error& e) {
      // Refused a connection (the server's max_connections, the account's
      // max_user_connections, or it is down): one writer fewer, not a failed flush. The
      // cycle's own connection writes what this one would have, and meets the database
      // itself if it is gone.
      metrics_.db_error(e.kind());
      if (!helper_refused_.exchange(true)) {
        log::warn("flush: an extra connection for flush.connections was refused (", e.what(),
                  "); flushing over fewer connections");
      }
      return;
    }
    if (!lease) {
      // Every connection of the pool is lent out (to reads, the rollup or the pruner):
      // one writer fewer this round, as above.
      log::debug("flush: no free connection in the pool for an extra writer");
      return;
    }
    helper_refused_.store(false);
    progress_();
    // A lease whose connection was lost is closed rather than lent out again.
    if (write_batches(**lease, round, dirty)) lease->discard();
  } catch (...) {
    // Not a database error (a refused connection is handled above): the round stops as
    // after any writer's error.
    {
      util::lock_guard lock(round.mutex);
      if (!round.error) round.error = std::current_exception();
    }
    queue_.stop_round();
  }
}

void batch_writer::release_source() {
  if (source_ != nullptr) source_->release(queue_.min_wal_tag());
}

void batch_writer::expand_recovered(db::connection& conn, std::uint64_t run) {
  // One look at the ledger for every queued batch of that run.
  queue_.replace_recovered(run, db::committed_split_parts(conn, settings_.instance_id, run));
}

std::size_t batch_writer::write_queued(db::connection& conn) {
  conn_lost_ = false;
  write_round round;
  queue_.begin_round();
  // Batches replayed from the WAL first, one run at a time, before any batch is in
  // flight: their committed parts leave the queue (the WAL must hear of it, below, as
  // of any committed batch, or a later replay could send them again).
  bool expanded = false;
  while (const auto run = queue_.recovered_run()) {
    if (deadline_.passed()) {
      queue_.mark_deadline_hit();
      return 0;
    }
    try {
      expand_recovered(conn, *run);
    } catch (const db::db_error&) {
      if (expanded) release_source();
      throw;
    }
    progress_();
    expanded = true;
  }
  // Writers beside this thread's: one per extra connection, as far as batches wait
  // for them. They are the flusher's long-lived writer threads (see writer_threads.hpp):
  // each that joins the round has left it before run_round returns, so `round` may
  // live on this stack.
  const std::size_t waiting = queue_.size();
  const std::size_t helpers =
      std::min<std::size_t>(settings_.connections - 1, waiting > 0 ? waiting - 1 : 0);
  // Its connection, when lost, is discarded by cycle() as the error comes out, even
  // when the error rethrown below is another writer's.
  writers_.run_round(
      helpers, [this, &round] { write_batches_on_lease(round); },
      [this, &conn, &round] { conn_lost_ = write_batches(conn, round, dirty_rows_); });
  std::exception_ptr error;
  std::size_t written = 0;
  {
    util::lock_guard lock(round.mutex);
    error = round.error;
    written = round.written;
    expanded = expanded || round.popped;
  }
  if (expanded) release_source();
  if (error) std::rethrow_exception(error);
  return written;
}

batch_writer::commit_attempt batch_writer::commit_once(db::connection& conn,
                                                       const db::batch_identity& id,
                                                       const flush_batch& batch,
                                                       std::vector<db::counter_row>& dirty) {
  db::write_rules rules{.table = settings_.table,
                        .buckets = &settings_.buckets,
                        .top = &settings_.top,
                        .dedupe = &settings_.dedupe,
                        .key_window = settings_.idempotency_window,
                        .marks = [this, &dirty](std::span<const db::counter_row> rows) {
                          return rolled_up_rows(settings_.rollups, rows, dirty);
                        }};
  const auto r = db::apply(conn, db::write_set_of(id, batch), rules);
  if (r.outcome == db::commit_outcome::applied && store::keyed_of(batch) != nullptr) {
    if (keyed_ != nullptr) keyed_->dropped_at_flush(r.duplicates, r.conflicts);
    if (r.duplicates + r.conflicts > 0) {
      log::debug("keyed batch ", id.seq, ": ", r.duplicates, " requests already committed, ",
                 r.conflicts, " committed with another body; not applied");
    }
  }
  if (r.outcome == db::commit_outcome::applied && store::unique_of(batch) != nullptr) {
    metrics_.unique_items_duplicate.Increment(static_cast<double>(r.duplicates));
    if (r.too_late > 0) {
      log::warn("flush: ", r.too_late,
                " unique entries were not counted: their windows' decisions had been pruned "
                "(they ended more than counters[].dedupe_keep before their batch committed, "
                "held up by an outage or a restart), or their counters no longer have dedupe "
                "(docs/known-limits.md)");
    }
  }
  return {r.outcome, std::nullopt, r.rows};
}

}  // namespace slotted::flush
