#pragma once
// Forming batches from pending deltas and splitting them (pure, batch_forming.cpp).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "model/batch.hpp"

namespace slotted::flush {

// The two halves of a batch the database refused for its data (see write_queued):
// their ids derive from the parent's, so a replay splits the same way under the same
// ids and the ledger still recognises halves that committed. Pure, exposed for tests.
std::pair<store::flush_batch, store::flush_batch> split_batch(const store::flush_batch& b);

// What is left to write of `b` when the batches whose seqs are in `committed` (its own
// split parts among them) have committed: `b` itself when none of its parts did,
// else the split parts (see split_batch) not covered by a committed one, in order.
// Pure, exposed for tests.
std::vector<store::flush_batch> uncommitted_parts(const store::flush_batch& b,
                                                  const std::vector<std::uint64_t>& committed);

// Cuts sorted deltas into batches; pure, exposed for tests.
std::vector<store::flush_batch> form_batches(std::vector<store::pending_delta> deltas,
                                             std::size_t max_rows, unsigned slots,
                                             std::uint64_t run_id, std::uint64_t first_seq,
                                             std::mt19937_64& rng,
                                             std::chrono::steady_clock::time_point oldest_arrival);

}  // namespace slotted::flush
