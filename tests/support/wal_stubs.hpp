#pragma once
// What the WAL's unit tests (committer, rotation) build records and a committer with.

#include <cstdint>
#include <string>
#include <vector>

#include "durable/record.hpp"
#include "model/batch.hpp"

namespace slotted::test {

// The flusher's queue as the committer sees it: only what snapshots copy.
struct queue_stub : store::batch_queue {
  std::vector<store::flush_batch> queued_copy() override { return {}; }
  void retag_all(std::uint64_t) override {}
};

// One increments record: `delta` to counter (1, id).
inline std::string increments_record(std::uint64_t id, std::int32_t delta) {
  std::string out;
  durable::append_increments(out, std::vector<ingest::increment>{{1, id, delta}});
  return out;
}

}  // namespace slotted::test
