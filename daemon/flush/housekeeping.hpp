#pragma once
// The flush cycle's housekeeping: before it writes, the schema checks (the counters
// table and its key ranges, the bucket, totals and uniques tables, the Idempotency-Key
// table) when due; after it, a proof that the connection lives (a ping, or the
// AUTO_INCREMENT headroom when rows were written) and the prunes of the ledger, the
// Idempotency-Keys and the uniques of passed windows, each in bounded chunks when due.
// Like the bucket pruner, each prune runs once a minute and again at every cycle while
// the last one had more due than its chunks; none runs past the stop deadline.
//
// Thread-safety: the flusher thread alone calls it from cycle(), so its timers and flags
// have no lock. autoincrement_exhausted() is called from the extra writer threads too: it
// reads only the fixed settings and sets a gauge, and must stay so.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "db/pool.hpp"
#include "flush/queue.hpp"
#include "flush/settings.hpp"
#include "idempotency/keyed_store.hpp"
#include "metrics/metrics.hpp"
#include "model/batch.hpp"

namespace slotted::flush {

class housekeeping {
 public:
  // `s` are the flusher's settings (its rollups change between cycles: see
  // schema_changed), `q` its queue; `progress` tells the flusher that a statement was
  // answered.
  housekeeping(const settings& s, const queue& q, metrics::registry& metrics,
               std::function<void()> progress);

  // Call before the flusher starts, as the flusher's own attach_*.
  void attach_keyed(idempotency::keyed_store* keyed) { keyed_ = keyed; }
  void attach_source(store::batch_source* source) { source_ = source; }

  // The schema checks, before a cycle writes: at the first cycle, after schema_changed(),
  // after a fatal error (`after_fatal`: --migrate or an ALTER TABLE may have fixed it),
  // and at every cycle while the Idempotency-Key table is missing. Returns true when
  // they ran and passed; throws db_error (fatal for a schema problem).
  bool verify_when_due(db::connection& conn, bool after_fatal);
  // The rollups changed: the next cycle verifies the schema again.
  void schema_changed() { verified_ = false; }

  // After a cycle wrote `rows`: proves the connection and prunes what is due. The ledger
  // rows of run `run_id` from the oldest queued batch on (else from `next_seq`) are kept.
  // Throws db_error (a prune's lock conflict with another instance is not one).
  void after_writes(db::connection& conn, std::size_t rows, std::uint64_t run_id,
                    std::uint64_t next_seq);

  // The fatal error for an exhausted AUTO_INCREMENT column (a batch's commit failed with
  // it): names it, the table and the ALTER TABLE that fixes it.
  db::db_error autoincrement_exhausted(db::connection& conn, const db::db_error& cause);

 private:
  // Verifies the table (and reads its key ranges), the bucket tables and the
  // AUTO_INCREMENT headroom, and looks for the Idempotency-Key table.
  void verify_schema(db::connection& conn);
  // Throws a fatal db_error naming the bucket tables settings_.buckets needs that do not
  // exist.
  void verify_bucket_tables(db::connection& conn);
  // Reads the counters table's AUTO_INCREMENT headroom into the gauge; warns once when
  // it falls below autoincrement_warn_fraction of the column's range.
  void check_autoincrement(db::connection& conn);
  void prune_ledger_when_due(db::connection& conn, std::uint64_t run_id, std::uint64_t next_seq);
  void prune_keys_when_due(db::connection& conn);
  // Deletes the uniques rows of passed windows.
  void prune_uniques_when_due(db::connection& conn);

  const settings& settings_;
  const queue& queue_;
  metrics::registry& metrics_;
  const std::function<void()> progress_;
  idempotency::keyed_store* keyed_ = nullptr;
  store::batch_source* source_ = nullptr;
  bool verified_ = false;
  bool autoincrement_warned_ = false;
  std::chrono::steady_clock::time_point last_ledger_prune_{};
  bool ledger_prune_behind_ = false;  // the last ledger prune deleted all it was allowed
  std::chrono::steady_clock::time_point last_key_prune_{};
  bool keys_prune_behind_ = false;  // the last key prune deleted all it was allowed
  std::chrono::steady_clock::time_point last_unique_prune_{};
  bool uniques_prune_behind_ = false;  // the last uniques prune had more due than its chunks
};

}  // namespace slotted::flush
