#pragma once
// Which queued batch a free flush connection may write next (README: Design, flushing
// over several connections). Pure: the flusher describes its queue, oldest first, and
// asks.
//
// Two batches conflict when their key ranges [first row, last row] meet (they could
// lock the same counter rows, or the same dirty marks) or when both are keyed (they
// write the Idempotency-Key table, and two keyed batches of one instance can carry the
// same key: a key its index forgot, accepted again while the first batch still waits
// in the queue; a unique batch counts as keyed and spans every key). A batch may start
// only when it conflicts with no batch before it in the queue, whether that one is being
// written or still waits. So no two connections
// ever lock the same rows (each statement keeps its one sorted lock order), and of two
// batches with a counter in common the older commits first.

#include <cstddef>
#include <optional>
#include <span>

#include "model/batch.hpp"
#include "model/counter_key.hpp"

namespace slotted::flush {

struct batch_span {
  store::counter_key first;  // the batch's lowest and highest key (its rows are sorted)
  store::counter_key last;
  bool empty = true;  // no rows (a keyed batch whose requests sum to zero)
  bool keyed = false;
  bool in_flight = false;
};

// The span of `b`, whose rows are sorted by key.
batch_span span_of(const store::flush_batch& b, bool in_flight);

bool conflict(const batch_span& a, const batch_span& b);

// The index in `queue` (oldest first) of the oldest batch not in flight that conflicts
// with no batch before it; nullopt when there is none. Looks at the whole span it is
// given: the caller passes a prefix of its queue (a batch beyond it just waits).
std::optional<std::size_t> next_startable(std::span<const batch_span> queue);

}  // namespace slotted::flush
