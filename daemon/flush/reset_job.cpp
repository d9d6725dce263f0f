// The reset job (see reset_job.hpp).
#include "flush/reset_job.hpp"

#include <algorithm>
#include <thread>

#include "db/errors.hpp"
#include "flush/internal.hpp"
#include "util/log.hpp"

namespace slotted::flush {

reset_job::reset_job(const settings& s, queue& q, store::pending_store& store, db::pool& pool,
                     metrics::registry& metrics, const stop_deadline& deadline,
                     std::function<void()> progress)
    : settings_(s),
      queue_(q),
      store_(store),
      pool_(pool),
      metrics_(metrics),
      deadline_(deadline),
      progress_(std::move(progress)) {}

// The reset job, in steps: refuse it when the cycle before it did not write everything,
// take a connection, commit the reset (odd generation throughout), then drop what is
// pending for the counter.
reset_result reset_job::run(const store::counter_key& key, const result<std::size_t>& flushed,
                            bool stopping, std::uint64_t run_id, std::uint64_t& next_seq) {
  if (auto why = refusal(flushed, stopping)) return refused(std::move(*why));
  // An id from the batches' sequence: the ledger answers "did it commit" after a lost
  // connection, as for a batch.
  const db::batch_identity id{settings_.instance_id, run_id, next_seq++};
  // The connection first, as a cycle does: a read holds its connection while it waits
  // for an even generation, so a reset that went odd first could wait for a connection
  // held by reads that wait for it (each answering 503 after its retries).
  std::optional<db::pool::lease> lease;
  try {
    lease.emplace(pool_.acquire());
  } catch (const db::db_error& e) {
    metrics_.db_error(e.kind());
    return refused({errc::database_unavailable, std::string("database: ") + e.what()});
  }
  // Odd throughout: a concurrent read_total() retries rather than see the slot rows
  // gone and the pending delta not yet dropped.
  queue_.set_committing(true);
  db::write_result known;  // the figures of the attempt that committed (or may have)
  if (auto why = commit(key, id, lease, known)) {
    queue_.set_committing(false);
    return refused(std::move(*why));
  }
  const std::int64_t dropped = drop_pending(key);
  queue_.set_committing(false);
  metrics_.resets_ok.Increment();
  log::debug("counter (", key.record_type, ", ", key.record_id, ") reset: ", known.cleared_rows,
             " slot rows deleted, ", dropped, " pending dropped");
  return cleared_counter{known.cleared, dropped};
}

reset_result reset_job::refused(failure why) {
  metrics_.resets_error.Increment();
  return why;
}

std::optional<failure> reset_job::refusal(const result<std::size_t>& flushed, bool stopping) {
  if (stopping) return failure(errc::draining, "shutting down");
  // Every batch formed before the reset must commit before it, or it would bring back
  // what the reset cleared: the cycle wrote them all, or the reset does not happen.
  if (!flushed)
    return failure(flushed.error(),
                   "the flush before the reset failed: " + flushed.failed().text());
  if (!queue_.drained())
    return failure(errc::retry_later, "batches formed before the reset are not yet written; retry");
  return std::nullopt;
}

std::optional<failure> reset_job::commit(const store::counter_key& key,
                                         const db::batch_identity& id,
                                         std::optional<db::pool::lease>& lease,
                                         db::write_result& known) {
  // First its ledger row, as for a batch: a retry after a lost COMMIT reply waits on the
  // first attempt's row lock, then finds it committed or takes the id over.
  const db::write_set ws{
      .guard = db::ledger_guard{id, 0}, .reset = key, .mark_gen = db::dirty_gen_of(id)};
  std::vector<db::counter_row> marked;
  const db::write_rules rules{.table = settings_.table,
                              .buckets = &settings_.buckets,
                              .top = &settings_.top,
                              .marks = [&](std::span<const db::counter_row> rows) {
                                return rolled_up_rows(settings_.rollups, rows, marked);
                              }};
  bool in_doubt = false;
  auto pause = std::chrono::milliseconds(100);
  for (int attempt = 0;; ++attempt) {
    db::write_result p;
    try {
      // Kept across retries; taken again only after a lost connection.
      if (!lease) lease.emplace(pool_.acquire());
      db::apply(**lease, ws, rules, p);
      progress_();
      // already_applied: an earlier attempt whose COMMIT reply was lost had committed.
      if (p.outcome == db::commit_outcome::applied) known = p;
      return std::nullopt;
    } catch (const db::db_error& e) {
      progress_();
      if (lease && e.connection_lost()) {
        lease->discard();
        lease.reset();
      }
      metrics_.db_error(e.kind());
      if (e.connection_lost() && p.commit_sent) {
        known = p;
        in_doubt = true;
      }
      const bool lock_conflict =
          e.kind() == db::error_kind::deadlock || e.kind() == db::error_kind::lock_wait_timeout;
      if (in_doubt && !deadline_.passed()) {
        wait_for_ledger(key, e, pause);
        continue;
      }
      if (!in_doubt && lock_conflict && attempt + 1 < lock_retries && !deadline_.passed()) continue;
      if (in_doubt)
        return failure(errc::outcome_unknown,
                       "the reset's outcome is unknown (connection lost during its COMMIT, "
                       "not resolved before the shutdown deadline): " +
                           std::string(e.what()));
      return failure(errc::database_unavailable, std::string("database: ") + e.what());
    }
  }
}

void reset_job::wait_for_ledger(const store::counter_key& key, const db::db_error& e,
                                std::chrono::milliseconds& pause) {
  // Resolved only by the ledger: re-sent under the same id until an attempt gets
  // an answer (its ledger insert finds the row, or takes the id over and commits).
  // Nothing else is flushed meanwhile, so the order stays as it was.
  log::warn("reset of counter (", key.record_type, ", ", key.record_id,
            "): connection lost during its COMMIT; asking the ledger: ", e.what());
  // Never past the stop deadline (a stop waits for this job).
  const auto deadline = deadline_.when();
  std::this_thread::sleep_for(std::min<clock::duration>(pause, deadline - clock::now()));
  pause = std::min<std::chrono::milliseconds>(pause * 2, settings_.max_retry_backoff);
}

std::int64_t reset_job::drop_pending(const store::counter_key& key) {
  // The cut: what this instance holds pending for the counter now arrived after the
  // cycle above took the store, i.e. concurrently with the reset; it is dropped (and
  // counted in `cleared`). With a WAL the drop is logged, synced, before the answer.
  if (source_ == nullptr) return store_.drop(key);
  if (const auto d = source_->drop_pending(key)) return *d;
  // The reset committed; only the drop could not be made durable, so it is not made:
  // what is pending (concurrent increments) lands after the reset, a valid order.
  log::warn("reset of counter (", key.record_type, ", ", key.record_id,
            "): the WAL cannot log it; increments pending for it land after the reset");
  return 0;
}

}  // namespace slotted::flush
