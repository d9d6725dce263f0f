// Unique batches (db/uniques.hpp): formed from the pending unique entries, committed,
// and the uniques table pruned of passed windows.
#include <algorithm>
#include <chrono>

#include "db/uniques.hpp"
#include "flush/flusher.hpp"
#include "flush/flusher_internal.hpp"
#include "util/log.hpp"

namespace slotted::flush {

std::vector<flush_batch> flusher::form_unique_batches(std::size_t max_entries) {
  std::vector<flush_batch> batches;
  if (uniques_ == nullptr) return batches;
  std::vector<store::unique_entry> entries;
  uniques_->take_all(entries);
  if (entries.empty()) return batches;
  // The table's key order: every writer inserts its rows in it (the lock order's 2).
  std::sort(entries.begin(), entries.end());
  const auto now = clock::now();
  for (std::size_t first = 0; first < entries.size(); first += max_entries) {
    flush_batch b;
    b.run_id = run_id_;
    b.seq = next_seq_++;
    b.oldest_arrival = now;
    b.unique_slot = static_cast<std::uint16_t>(rng_() % settings_.slots);
    const auto last = entries.begin() +
                      static_cast<std::ptrdiff_t>(std::min(entries.size(), first + max_entries));
    b.uniques.assign(std::make_move_iterator(entries.begin() + static_cast<std::ptrdiff_t>(first)),
                     std::make_move_iterator(last));
    batches.push_back(std::move(b));
  }
  return batches;
}

flusher::commit_attempt flusher::commit_unique(db::connection& conn, const db::batch_identity& id,
                                               const flush_batch& batch,
                                               std::vector<db::counter_row>& dirty) {
  const auto outcome = db::commit_unique_batch(
      conn, settings_.table, id, batch,
      [this, &dirty](std::span<const db::counter_row> rows) { return rolled_up_rows(rows, dirty); },
      settings_.buckets, settings_.top, &settings_.dedupe);
  if (outcome.outcome == db::commit_outcome::applied) {
    metrics_.unique_items_duplicate.Increment(static_cast<double>(outcome.duplicates));
    if (outcome.too_late > 0) {
      log::warn("flush: ", outcome.too_late,
                " unique entries were not counted: their windows had ended more than ",
                store::unique_margin_seconds,
                " s before their batch committed (held up by an outage or a restart), or "
                "their counters no longer have dedupe (docs/known-limits.md)");
    }
  }
  commit_attempt done;
  done.outcome = outcome.outcome;
  done.keyed_rows = outcome.rows;
  return done;
}

void flusher::prune_uniques_when_due(db::connection& conn) {
  // Once a minute, and at every cycle while the last run had more due than its chunks
  // (a backlog catches up).
  if (deadline_hit() || settings_.dedupe.empty() ||
      !(uniques_prune_behind_ || clock::now() - last_unique_prune_ >= prune_every))
    return;
  last_unique_prune_ = clock::now();
  std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  try {
    // The earlier of this host's clock and the database's, as the bucket pruner does: a
    // clock fast here must not delete windows other instances still count in.
    const auto rows = conn.query("SELECT UNIX_TIMESTAMP()");
    if (!rows.empty() && !rows[0].empty() && rows[0][0])
      now = std::min<std::int64_t>(now, std::stoll(*rows[0][0]));
    uniques_prune_behind_ = db::prune_uniques(conn, settings_.table, settings_.dedupe, now).behind;
  } catch (const db::db_error& e) {
    if (e.connection_lost() ||
        (e.kind() != db::error_kind::deadlock && e.kind() != db::error_kind::lock_wait_timeout))
      throw;
    metrics_.db_error(e.kind());
  }
}

}  // namespace slotted::flush
