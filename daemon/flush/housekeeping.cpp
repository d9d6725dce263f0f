// The flush cycle's housekeeping (see housekeeping.hpp).
#include "flush/housekeeping.hpp"

#include <algorithm>

#include "db/errors.hpp"
#include "db/keys.hpp"
#include "db/top.hpp"
#include "db/uniques.hpp"
#include "flush/internal.hpp"
#include "util/log.hpp"

namespace slotted::flush {

housekeeping::housekeeping(const settings& s, const queue& q, metrics::registry& metrics,
                           std::function<void()> progress)
    : settings_(s), queue_(q), metrics_(metrics), progress_(std::move(progress)) {}

bool housekeeping::verify_when_due(db::connection& conn, bool after_fatal) {
  if (verified_ && !after_fatal) return false;
  verify_schema(conn);
  return true;
}

void housekeeping::after_writes(db::connection& conn, std::size_t rows, std::uint64_t run_id,
                                std::uint64_t next_seq) {
  if (rows == 0) {
    conn.ping();  // proves the connection is alive
  } else {
    check_autoincrement(conn);
  }
  progress_();
  prune_ledger_when_due(conn, run_id, next_seq);
  prune_keys_when_due(conn);
  prune_uniques_when_due(conn);
}

void housekeeping::check_autoincrement(db::connection& conn) {
  const auto st = db::read_autoincrement(conn, settings_.table);
  if (!st) {
    metrics_.set_autoincrement_remaining(std::nullopt);
    return;
  }
  const auto remaining = st->remaining();
  metrics_.set_autoincrement_remaining(static_cast<double>(remaining));
  const bool low = static_cast<double>(remaining) <
                   autoincrement_warn_fraction * static_cast<double>(st->max / st->increment);
  if (low && !autoincrement_warned_) {
    log::warn("table `", settings_.table, "`: its AUTO_INCREMENT column `", st->column, "` (",
              st->column_type, ") has ", remaining, " values left (every flushed row uses one, ",
              "even an update); widen it before it runs out: ",
              conn.sql().widen_autoincrement(settings_.table, st->column));
  }
  autoincrement_warned_ = low;
}

db::db_error housekeeping::autoincrement_exhausted(db::connection& conn,
                                                   const db::db_error& cause) {
  std::string column = "id", type = "its type";
  try {
    if (const auto st = db::read_autoincrement(conn, settings_.table)) {
      column = st->column;
      type = st->column_type;
      metrics_.set_autoincrement_remaining(0.0);
    }
  } catch (const db::db_error&) {
    // The message still names the table and the remedy.
  }
  return db::db_error(db::error_class::fatal,
                      "table `" + settings_.table + "`: its AUTO_INCREMENT column `" + column +
                          "` (" + type + ") is exhausted (" + cause.what() +
                          "); no counter row can be written until it is widened: " +
                          conn.sql().widen_autoincrement(settings_.table, column) +
                          ". Nothing is dropped: the "
                          "batches stay queued and flushing resumes by itself once it is wider",
                      cause.native_code());
}

void housekeeping::verify_bucket_tables(db::connection& conn) {
  // Missing bucket tables stop the flush of everything (a fatal schema error, checked
  // again at every cycle, so --migrate resumes it): writing the totals without their
  // buckets would leave the two disagreeing for good. Nothing is dropped meanwhile:
  // what is pending stays in memory (and the WAL) up to flush.max_pending_keys.
  const auto missing = db::missing_bucket_tables(conn, settings_.table, settings_.buckets);
  if (missing.empty()) return db::verify_totals_tables(conn, settings_.table, settings_.top);
  std::string names;
  for (const auto& t : missing) names += (names.empty() ? "`" : ", `") + t + "`";
  throw db::db_error(db::error_class::fatal,
                     "table " + names +
                         " does not exist but counters[].buckets needs it; run "
                         "slotted-counterd --migrate (nothing is flushed until then, nothing "
                         "is dropped)");
}

void housekeeping::verify_schema(db::connection& conn) {
  const auto limits = db::verify_schema(conn, settings_.table, !settings_.rollups.empty());
  if (settings_.limits != nullptr)
    settings_.limits->set(limits.max_record_type, limits.max_record_id);
  // Rollup targets are not checked here: the flusher writes only the dirty marks,
  // never an owning table, so a missing one must not stop the flush (the roller
  // checks each target at each run, see rollup::roller).
  verify_bucket_tables(conn);
  db::verify_uniques_table(conn, settings_.table, settings_.dedupe);
  check_autoincrement(conn);
  progress_();
  verified_ = true;
  if (keyed_ == nullptr) return;
  if (!limits.idempotency_keys && keyed_->table_present()) {
    log::error("table `", db::idempotency_keys_table,
               limits.idempotency_keys_unmigrated
                   ? "` has the layout of an earlier version (`created` TIMESTAMP, no "
                     "`created_ms`): requests with an Idempotency-Key are refused (503) "
                     "until slotted-counterd --migrate converts it; the others flush as "
                     "ever"
                   : "` does not exist: requests with an Idempotency-Key are refused (503) "
                     "until slotted-counterd --migrate creates it; the others flush as ever");
  }
  keyed_->set_table_present(limits.idempotency_keys);
  // Looked for again at every cycle until --migrate has made it.
  if (!limits.idempotency_keys) verified_ = false;
}

namespace {
// Instances prune the same rows: a lock conflict there is not a failed flush. Rethrows
// anything else.
void tolerate_lock_conflict(const db::db_error& e, metrics::registry& metrics) {
  if (e.connection_lost() ||
      (e.kind() != db::error_kind::deadlock && e.kind() != db::error_kind::lock_wait_timeout))
    throw;
  metrics.db_error(e.kind());
}
}  // namespace

void housekeeping::prune_ledger_when_due(db::connection& conn, std::uint64_t run_id,
                                         std::uint64_t next_seq) {
  // A committed batch the WAL still holds (its committed record not yet logged, or
  // unloggable on a full disk) is replayed after a crash, and only its ledger row
  // makes that a no-op: prune only once the WAL has logged every batch committed.
  // In bounded chunks, once a minute, and at every cycle while the last run could not
  // delete all that was due (a backlog catches up).
  if (queue_.deadline_hit() ||
      !(ledger_prune_behind_ || clock::now() - last_ledger_prune_ > prune_every) ||
      (source_ != nullptr && !source_->batches_logged_committed()))
    return;
  const std::uint64_t keep_from = queue_.first_seq().value_or(next_seq);
  last_ledger_prune_ = clock::now();
  try {
    ledger_prune_behind_ = db::prune_ledger(conn, {settings_.instance_id, run_id, keep_from},
                                            ledger_max_age_seconds, ledger_others_max_age_seconds)
                               .behind;
  } catch (const db::db_error& e) {
    tolerate_lock_conflict(e, metrics_);
  }
}

void housekeeping::prune_keys_when_due(db::connection& conn) {
  // Keys past two windows, of every instance (any may do it), in bounded chunks: at
  // least once per min(1 minute, window), and at every cycle while the last prune
  // found more than its chunks could take (a keyed rate above what one prune a
  // minute deletes), so that the table stays about two windows of keys.
  if (queue_.deadline_hit() || keyed_ == nullptr || !keyed_->table_present() ||
      !(keys_prune_behind_ ||
        clock::now() - last_key_prune_ >
            std::min<clock::duration>(prune_every, settings_.idempotency_window)))
    return;
  last_key_prune_ = clock::now();
  constexpr std::size_t chunk = 10000;
  constexpr int chunks = 10;
  try {
    keys_prune_behind_ =
        db::prune_keys(conn, settings_.idempotency_window, chunk, chunks) == chunk * chunks;
  } catch (const db::db_error& e) {
    tolerate_lock_conflict(e, metrics_);
  }
}

void housekeeping::prune_uniques_when_due(db::connection& conn) {
  // Once a minute, and at every cycle while the last run had more due than its chunks
  // (a backlog catches up).
  if (queue_.deadline_hit() || settings_.dedupe.empty() ||
      !(uniques_prune_behind_ || clock::now() - last_unique_prune_ >= prune_every))
    return;
  last_unique_prune_ = clock::now();
  try {
    // The earlier of this host's clock and the database's, as the bucket pruner does: a
    // clock fast here must not delete windows other instances still count in.
    uniques_prune_behind_ =
        db::prune_uniques(conn, settings_.table, settings_.dedupe, db::earlier_clock(conn)).behind;
  } catch (const db::db_error& e) {
    tolerate_lock_conflict(e, metrics_);
  }
}

}  // namespace slotted::flush
