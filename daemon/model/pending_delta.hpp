#pragma once
// What the pending store holds of one counter, as it is taken, handed back, logged and
// replayed (store::pending_store, model/batch.hpp's batch_source, the WAL).

#include <cstdint>

#include "model/buckets.hpp"
#include "model/counter_key.hpp"

namespace slotted::store {

// A counter's pending total (granularity none), or its pending count in one bucket
// (hour or day, `bucket` its start in unix seconds): totals and buckets travel
// together, so that what is taken, handed back, logged and replayed is one set.
struct pending_delta {
  counter_key key;
  std::int64_t delta = 0;
  granularity gran = granularity::none;
  std::int64_t bucket = 0;
};

}  // namespace slotted::store
