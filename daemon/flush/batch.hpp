#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "db/sql.hpp"
#include "idempotency/keyed_request.hpp"

namespace slotted::flush {

// A unit of exactly-once writing: fixed rows (sorted by key, slots drawn) and a fixed
// id (instance, run_id, seq), committed in one transaction with its ledger row.
struct flush_batch {
  std::uint64_t run_id = 0;
  std::uint64_t seq = 0;
  std::vector<db::counter_row> rows;
  std::chrono::steady_clock::time_point oldest_arrival;
  // The WAL segment holding the record that logged this batch (0 without a WAL).
  std::uint64_t wal_tag = 0;
  // Replayed from the WAL: parts of it may have committed already (see
  // flusher::expand_recovered).
  bool recovered = false;
  // A keyed batch (see idempotency/keyed_batches.hpp): these requests, whose increments
  // `rows` sums; each is applied only if its key is not committed yet.
  std::vector<idempotency::keyed_request> keyed;
};

}  // namespace slotted::flush
