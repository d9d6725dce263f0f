#pragma once
// The write-ahead log's on-disk records. Pure functions, no I/O, thread-safe.
//
// A record is [u32 payload length][u32 CRC-32 of payload][payload], little endian; the
// payload starts with a kind byte:
//   increments: u32 n, then n x (u32 record_type, u64 record_id, i32 delta)
//   batches:    u32 n, then n batches (u64 run_id, u64 seq, u32 rows,
//               rows x (u32 record_type, u64 record_id, u16 slot, i64 delta))
//   snapshot:   the batches encoding, then u64 n, n x (u32 record_type, u64 record_id, i64 delta)
//   committed:  nothing after the kind byte
// A batches record means: every increment logged before it (since the previous batches
// or snapshot record) now lives in these batches. A snapshot replaces everything logged
// before it. A committed record means every batch logged before it has committed, so
// replay must not send them again (their ledger rows may be pruned by then).

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "flush/batch.hpp"
#include "ingest/increment.hpp"
#include "store/pending_store.hpp"

namespace slotted::wal {

enum class record_kind : std::uint8_t { increments = 1, batches = 2, snapshot = 3, committed = 4 };

constexpr std::size_t record_header_bytes = 8;

void append_increments(std::string& out, std::span<const ingest::increment> increments);
void append_batches(std::string& out, std::span<const flush::flush_batch> batches);
void append_snapshot(std::string& out, std::span<const flush::flush_batch> batches,
                     std::span<const store::pending_delta> deltas);
void append_committed(std::string& out);

// What replaying records yields: deltas not yet in any batch, and the batches logged
// (some may have committed already; the ledger tells).
class replay_state {
 public:
  // Applies one record's payload; false when the payload is malformed.
  bool apply(std::string_view payload);

  std::vector<store::pending_delta> deltas() const;
  const std::vector<flush::flush_batch>& batches() const { return batches_; }

 private:
  struct key_hash {
    std::size_t operator()(const store::counter_key& k) const { return store::hash_of(k); }
  };
  std::vector<std::pair<store::counter_key, std::int64_t>> delta_log_;
  std::vector<flush::flush_batch> batches_;
};

struct scan_result {
  enum class status { ok, torn_tail, corrupt } outcome = status::ok;
  std::size_t valid_bytes = 0;  // records before this offset are whole and valid
  std::string problem;          // for torn_tail and corrupt
};

// Walks the records of one segment, applying each to `state`. A damaged record that
// reaches the end of the data is a torn tail (an interrupted append); damage with more
// data after it is corruption.
scan_result scan_segment(std::string_view data, replay_state& state);

}  // namespace slotted::wal
