#pragma once
// The WAL's records written and read through wal::write_ahead_log, which sees only bytes:
// replay at start-up, and the records that rotate, snapshot and release its segments.
// One thread at a time, as the log itself (see wal/wal.hpp).

#include <cstdint>
#include <span>
#include <vector>

#include "durable/record.hpp"
#include "model/result.hpp"
#include "wal/wal.hpp"

namespace slotted::durable {

struct recovered {
  std::vector<store::pending_delta> deltas;
  std::vector<store::flush_batch> batches;
  std::vector<idempotency::keyed_request> keyed;  // keyed requests not yet in a batch
  std::vector<store::unique_entry> uniques;       // unique entries not yet in a batch
  std::size_t segments = 0;
  std::size_t salvaged = 0;  // damaged segments whose valid prefix was kept
};

struct recover_options {
  // Keep the valid records before the damage in a damaged segment and move the file
  // aside (logging what is dropped), rather than refusing to start.
  bool salvage = false;
  // Counters with buckets: increments logged with their `at` count in these buckets
  // again (see replay_state).
  store::bucket_spec buckets{};
};

// Opens `log` (write_ahead_log::open) and replays every segment. Throws wal::wal_error as
// open() does, and when the logged deltas of a counter sum past the int64 range (corrupt).
recovered recover(wal::write_ahead_log& log, const recover_options& options = {});

// Whether the segments in `dir` hold something a replay would keep (increments,
// batches, keyed requests or unique entries), or cannot be read whole (damaged,
// unreadable): read only, without the directory's lock. For a directory no WAL is
// configured on (see application::log_durability).
bool holds_something_to_replay(const std::string& dir);

// Starts a new segment whose first record logs `batches` (each tagged with that
// segment), synced: every increment appended before is covered by them.
// Fails as the log does (wal_write_failed, wal_sync_failed).
result<void> log_batches(wal::write_ahead_log& log, std::vector<store::flush_batch>& batches);

// A new segment holding one snapshot of everything pending (write_ahead_log::snapshot):
// the new segment's tag for the batches, or why it could not be written.
result<std::uint64_t> log_snapshot(wal::write_ahead_log& log,
                                   std::span<const store::flush_batch> batches,
                                   std::span<const store::pending_delta> deltas,
                                   std::span<const idempotency::keyed_request> keyed = {},
                                   std::span<const store::unique_entry> uniques = {});

// write_ahead_log::release with a committed record.
void release(wal::write_ahead_log& log, std::uint64_t min_queued_tag);

}  // namespace slotted::durable
