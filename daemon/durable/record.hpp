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
//   11   unique_increments  u32 n, n x (inc, i64 at), u32 u,           a request with any
//                           u x unique                                  `client` item
//   12   unique_batches     the bucketed_batches payload, uniques       any unique batch
//   13   unique_snapshot    the bucketed_snapshot payload, uniques,     any unique entry
//                           u32 p, p x unique (pending)
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
//   unique       u32 record_type, u64 record_id, i64 window start, i64 at, u8 client
//                length (1 to 128), the client (model/uniques.hpp)
//   uniques      the unique batches the record holds (db/uniques.hpp): u32 m, m x (u32
//                batch index, u16 unique slot, u32 k >= 1, k x unique), each batch index
//                once, of a batch without rows, bucket rows or keyed requests
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
// A record holding no unique entry is written in kinds 1 to 10, byte for byte as
// before unique entries were logged; the unique kinds only where one is involved (an
// earlier version refuses them as corrupt, as any unknown kind).
// A batches record means: every increment logged before it (since the previous batches
// or snapshot record) now lives in these batches. A snapshot replaces everything logged
// before it. A committed record means every batch logged before it has committed, so
// replay must not send them again (their ledger rows may be pruned by then). Keyed
// requests and unique entries follow the same rules as increments: a batches record of
// any kind means every unique entry logged before it is in its unique batches (a take
// takes them all), a snapshot of any kind replaces the pending ones (none but in a
// unique_snapshot). A reset record means: the counter's
// increments logged before it and not yet in a batch were dropped (its reset cleared
// them); keyed requests are kept whole (a reset leaves them pending, see README), and
// unique entries too (a reset clears the counter, not its decisions; known-limits.md).

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
// record_batches.cpp, record_snapshot.cpp, record_reset.cpp, and record_uniques.cpp for
// the three unique kinds); replay in replay.cpp. The
// frame, checksums and scanning are wal/'s (wal/frame.hpp).

namespace codec {
struct timed_delta;
struct snapshot_record;
struct unique_increments_record;
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
  bucketed_snapshot = 10,
  unique_increments = 11,
  unique_batches = 12,
  unique_snapshot = 13
};

// `uniques`: a request's items with a `client`, as unique entries (then the
// unique_increments kind; `increments` are its other items).
void append_increments(std::string& out, std::span<const ingest::increment> increments,
                       std::span<const store::unique_entry> uniques = {});
void append_batches(std::string& out, std::span<const store::flush_batch> batches);
// `uniques`: the unique entries pending (not in a batch).
void append_snapshot(std::string& out, std::span<const store::flush_batch> batches,
                     std::span<const store::pending_delta> deltas,
                     std::span<const idempotency::keyed_request> keyed = {},
                     std::span<const store::unique_entry> uniques = {});
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
  // Unique entries not yet in any batch (as logged: one logged twice is here twice).
  const std::vector<store::unique_entry>& uniques() const { return uniques_; }

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
  bool apply_unique_increments(std::optional<codec::unique_increments_record>&& r);
  std::vector<std::pair<store::counter_key, std::int64_t>> delta_log_;
  // Bucket counts not yet in any batch, alongside delta_log_.
  std::vector<store::pending_delta> bucket_log_;
  store::bucket_spec buckets_;
  std::vector<store::flush_batch> batches_;
  std::vector<idempotency::keyed_request> keyed_;
  std::vector<store::unique_entry> uniques_;
};

// Scans one segment (wal::scan_segment), applying each record to `state`.
inline scan_result scan_segment(std::string_view data, replay_state& state) {
  return wal::scan_segment(data, [&](std::string_view payload) { return state.apply(payload); });
}

}  // namespace slotted::durable
