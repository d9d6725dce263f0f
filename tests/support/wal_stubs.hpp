#pragma once
// What the WAL's unit tests (committer, rotation, format, golden logs) build records and a
// committer with.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "durable/record.hpp"
#include "model/batch.hpp"
#include "model/keyed_request.hpp"

namespace slotted::test {

// The flusher's queue as the committer sees it: only what snapshots copy.
struct queue_stub : store::batch_queue {
  std::vector<store::flush_batch> queued_copy() override { return {}; }
  void retag_all(std::uint64_t) override {}
};

// An increment with a time: `at`, as the client sent it (`given`) or as received.
inline ingest::increment timed_increment(std::uint32_t type, std::uint64_t id, std::int32_t delta,
                                         std::int64_t at, bool given) {
  ingest::increment inc{type, id, delta};
  inc.at = at;
  inc.at_given = given;
  return inc;
}

// A keyed request as a WAL record holds it (received at a fixed time).
inline idempotency::keyed_request keyed_request(std::string key,
                                                std::vector<ingest::increment> increments,
                                                const idempotency::body_hash& hash) {
  idempotency::keyed_request r;
  r.key = std::move(key);
  r.hash = hash;
  r.received_ms = 1700000000123;
  r.increments = std::move(increments);
  return r;
}

// One increments record: `delta` to counter (1, id).
inline std::string increments_record(std::uint64_t id, std::int32_t delta) {
  std::string out;
  durable::append_increments(out, std::vector<ingest::increment>{{1, id, delta}});
  return out;
}

}  // namespace slotted::test
