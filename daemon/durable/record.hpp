#pragma once
// The write-ahead log's records: their codec and replay. Pure functions, no I/O,
// thread-safe.
//
// Each is one payload in the WAL's record frame (wal/frame.hpp: segments, lengths,
// checksums). The payload starts with a kind byte:
//
//   kind name               payload after the kind byte                 written when
//   1    increments         u32 n, n x inc                              no `at`
//   7    timed_increments   u32 n, n x (inc, i64 at)                    any `at`
//   5    keyed              key(plain), req, u32 n, n x inc             no `at`
//   8    timed_keyed        key(timed), req, u32 n, n x (inc, i64 at')  any `at`
//   2    batches            batches(plain), trailer(plain)              no bucket row, no `at`
//   9    bucketed_batches   batches(timed), trailer(timed)              else
//   3    snapshot           batches(plain), u64 n, n x total,           no bucket row or
//                           trailer(plain)                              count, no `at`
//   10   bucketed_snapshot  batches(timed), u64 n, n x (total, u8       else
//                           granularity, i64 bucket start), trailer(timed)
//   4    committed          nothing
//   6    reset              u32 record_type, u64 record_id (README: HTTP API, Reset)
// where
//   inc          u32 record_type, u64 record_id, i32 delta
//   total        u32 record_type, u64 record_id, i64 delta
//   at           -1 for an increment without a time (its counter had no buckets), else
//                its `at` (0 included: 1970-01-01 is a time)
//   at'          a keyed item's time: 0 none, > 0 the receive time, < 0 a time the
//                client sent (-at' - 1), which the body hash covers
//   key(plain)   u8 length (1 to 127, or 0 for the longest key, 128), the key
//   key(timed)   u8 length (1 to 128), the key
//   req          u64 x 2 body hash, i64 received (unix ms)
//   batches(f)   u32 n, n x (u64 run_id, u64 seq, u32 rows, rows x row, and in the timed
//                form u32 k, k x bucket row)
//   row          u32 record_type, u64 record_id, u16 slot, i64 delta
//   bucket row   u32 record_type, u64 record_id, u8 granularity, i64 bucket start, u16
//                slot, i64 delta
//   granularity  0 a counter's total (snapshot only), 1 hour, 2 day (store::granularity)
//   trailer(f)   the keyed requests the record holds: u32 m, m x (u32 batch index, or
//                0xffffffff for a request not yet in a batch, then the keyed (plain) or
//                timed_keyed (timed) payload); the plain form leaves out a trailer of
//                none (m = 0), as logs before keyed requests had none.
// A record is written in the plain kind whenever that can hold it, so a log that uses no
// buckets is byte for byte what earlier versions wrote, and they read it. The timed kinds
// are refused by earlier versions as corrupt (an unknown kind is a malformed record), as
// this version refuses a kind that a later one adds: a format change is a new kind (or a
// new segment magic), never a bit borrowed from a field.
// Earlier versions wrote the bucket extension by borrowing bits; this version still reads
// them (every log an earlier version wrote replays), never writes them:
//   increments: when any increment has an `at`, n x i64 at follow the n items (0 read as
//               no time, so an `at` of 0 lost its buckets).
//   keyed:      0x80 in the key length byte: each item is followed by its i64 at'.
//               (Earlier versions logged a 128-character key as 0x80 alone: it reads as
//               128 with `at`, and where its items had none the record is malformed.)
//   batches:    0x80000000 in a batch's row count: its rows are followed by u32 k, k x
//               bucket row; the keyed requests of its trailer as keyed (above).
//   snapshot:   the top bit of its u64 n: each total is followed by u8 granularity and
//               i64 bucket start; its batches and trailer as in batches (above).
// Replay counts a logged `at` in the buckets its counter keeps under the config it
// replays with (a counter whose buckets were removed just drops them, and an increment
// logged without a time, its counter then having none, counts in no bucket); logged batches
// and snapshots carry their bucket counts as they were formed.
// A batches record means: every increment logged before it (since the previous batches
// or snapshot record) now lives in these batches. A snapshot replaces everything logged
// before it. A committed record means every batch logged before it has committed, so
// replay must not send them again (their ledger rows may be pruned by then). Keyed
// requests follow the same rules as increments. A reset record means: the counter's
// increments logged before it and not yet in a batch were dropped (its reset cleared
// them); keyed requests are kept whole (a reset leaves them pending, see README).

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/batch.hpp"
#include "model/increment.hpp"
#include "store/pending_store.hpp"
#include "wal/frame.hpp"

namespace slotted::durable {

using wal::decode_header;
using wal::encode_header;
using wal::record_header_bytes;
using wal::scan_result;
using wal::segment_magic;

// One encoder (append_*, choosing the plain or the timed kind) and one decoder per record
// kind, each in the file of its kind (record_increments.cpp, record_keyed.cpp,
// record_batches.cpp, record_snapshot.cpp, record_reset.cpp); replay in replay.cpp. The
// frame, checksums and scanning are wal/'s (wal/frame.hpp).

namespace codec {
struct timed_delta;
struct snapshot_record;
}  // namespace codec

enum class record_kind : std::uint8_t {
  increments = 1,
  batches = 2,
  snapshot = 3,
  committed = 4,
  keyed = 5,
  reset = 6,
  timed_increments = 7,
  timed_keyed = 8,
  bucketed_batches = 9,
  bucketed_snapshot = 10
};

void append_increments(std::string& out, std::span<const ingest::increment> increments);
void append_batches(std::string& out, std::span<const store::flush_batch> batches);
void append_snapshot(std::string& out, std::span<const store::flush_batch> batches,
                     std::span<const store::pending_delta> deltas,
                     std::span<const idempotency::keyed_request> keyed = {});
void append_keyed(std::string& out, const idempotency::keyed_request& request);
void append_committed(std::string& out);
void append_reset(std::string& out, const store::counter_key& key);

// What replaying records yields: deltas not yet in any batch, and the batches logged
// (some may have committed already; the ledger tells).
class replay_state {
 public:
  explicit replay_state(store::bucket_spec buckets = {}) : buckets_(std::move(buckets)) {}

  // Applies one record's payload; false when the payload is malformed.
  bool apply(std::string_view payload);

  // The net pending delta of every counter, then of every bucket. Throws std::overflow_error naming
  // the counter when its logged deltas sum past the int64 range: the daemon never logs such a sum
  // (see pending_store::max_pending_sum), so the log is corrupt.
  std::vector<store::pending_delta> deltas() const;
  const std::vector<store::flush_batch>& batches() const { return batches_; }
  // Keyed requests not yet in any batch.
  const std::vector<idempotency::keyed_request>& keyed() const { return keyed_; }

 private:
  struct key_hash {
    std::size_t operator()(const store::counter_key& k) const { return store::hash_of(k); }
  };
  // Appends the bucket counts of `delta` at unix time `at` for the buckets its counter
  // keeps now.
  void count_in_buckets(const store::counter_key& key, std::int64_t delta, std::int64_t at,
                        std::vector<store::pending_delta>& out) const;
  // Each kind's decoded record applied; false (and nothing changed) for a malformed one.
  bool apply_increments(const std::optional<std::vector<codec::timed_delta>>& read);
  bool apply_keyed(std::optional<idempotency::keyed_request>&& r);
  bool apply_batches(std::optional<std::vector<store::flush_batch>>&& logged);
  void apply_reset(const store::counter_key& key);
  bool apply_snapshot(std::optional<codec::snapshot_record>&& s);
  std::vector<std::pair<store::counter_key, std::int64_t>> delta_log_;
  // Bucket counts not yet in any batch, alongside delta_log_.
  std::vector<store::pending_delta> bucket_log_;
  store::bucket_spec buckets_;
  std::vector<store::flush_batch> batches_;
  std::vector<idempotency::keyed_request> keyed_;
};

// Scans one segment (wal::scan_segment), applying each record to `state`.
inline scan_result scan_segment(std::string_view data, replay_state& state) {
  return wal::scan_segment(data, [&](std::string_view payload) { return state.apply(payload); });
}

}  // namespace slotted::durable
