#include "durable/recovery.hpp"

#include <exception>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

namespace slotted::durable {

recovered recover(wal::write_ahead_log& log, const recover_options& options) {
  replay_state state(options.buckets);
  const auto opened = log.open([&](std::string_view payload) { return state.apply(payload); },
                               {.salvage = options.salvage});
  recovered out;
  out.segments = opened.segments;
  out.salvaged = opened.salvaged;
  try {
    out.deltas = state.deltas();
  } catch (const std::overflow_error& e) {
    throw wal::wal_error("WAL in " + log.dir() + " is corrupt: " + e.what());
  }
  out.keyed = state.keyed();
  out.uniques = state.uniques();
  // A batch logged twice, in a snapshot and a batches record, is one batch.
  std::set<std::pair<std::uint64_t, std::uint64_t>> seen;
  for (const auto& b : state.batches()) {
    if (seen.insert({b.run_id, b.seq}).second) out.batches.push_back(b);
  }
  return out;
}

bool holds_something_to_replay(const std::string& dir) {
  replay_state state;
  try {
    for (const auto n : wal::segment_numbers_in(dir)) {
      const auto scan = scan_segment(wal::read_segment(wal::segment_path_in(dir, n)), state);
      if (scan.outcome == scan_result::status::corrupt) return true;
    }
    return !state.deltas().empty() || !state.batches().empty() || !state.keyed().empty() ||
           !state.uniques().empty();
  } catch (const std::exception&) {
    return true;  // unreadable, or deltas past the int64 range: a replay would say why
  }
}

result<void> log_batches(wal::write_ahead_log& log, std::vector<store::flush_batch>& batches) {
  return log.log_batches([&](std::uint64_t tag) {
    for (auto& b : batches) b.wal_tag = tag;
    std::string bytes;
    append_batches(bytes, batches);
    return bytes;
  });
}

result<std::uint64_t> log_snapshot(wal::write_ahead_log& log,
                                   std::span<const store::flush_batch> batches,
                                   std::span<const store::pending_delta> deltas,
                                   std::span<const idempotency::keyed_request> keyed,
                                   std::span<const store::unique_entry> uniques) {
  std::string bytes;
  append_snapshot(bytes, batches, deltas, keyed, uniques);
  return log.snapshot(bytes, !batches.empty());
}

void release(wal::write_ahead_log& log, std::uint64_t min_queued_tag) {
  std::string committed;
  append_committed(committed);
  log.release(min_queued_tag, committed);
}

}  // namespace slotted::durable
