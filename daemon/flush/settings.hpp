#pragma once
// The flusher's settings (from the config's flush, mysql and counters sections).

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "db/repository.hpp"
#include "ingest/table_limits.hpp"
#include "model/buckets.hpp"
#include "model/top_spec.hpp"
#include "model/uniques.hpp"

namespace slotted::flush {

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

}  // namespace slotted::flush
