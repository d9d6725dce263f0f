#pragma once
// The write-ahead log's records: their codec and replay. Pure functions, no I/O,
// thread-safe.
//
// Each is one payload in the WAL's record frame (wal/frame.hpp: segments, lengths,
// checksums). The payload starts with a kind byte. This version writes one kind, 14
// (tagged), for every record (record_tagged.cpp):
//
//   payload = u8 kind = 14 | u8 version = 1 | u8 role | u32 fields | fields x field
//   field   = u8 tag | u64 length | length bytes, all of them the field's body
//
//   role          means                                    fields (in tag order)
//   1 append      one request                              one of 1, 2, 3; 4? not with 3
//   2 cut         what was logged before is in these       5*
//                 batches now
//   3 snapshot    replaces everything logged before it     3*, 4?, 5*, 6?, 7?
//   4 committed   every batch logged before it committed   none
//   5 reset       the counter's increments logged before   8
//                 it and not in a batch were dropped
//
//   tag 1 increments        u32 n, n x inc                  (no item has a time)
//       2 timed increments  u32 n, n x (inc, i64 at)        at -1: no time (0 is a time)
//       3 keyed request     key(timed), req, u32 n, n x (inc, i64 at')
//       4 unique entries    u32 n >= 1, n x unique
//       5 batch             u64 run_id, u64 seq, u8 content (0 plain, 1 keyed, 2 unique),
//                           u16 slot (a unique batch's, else 0), u32 r, r x row, u32 k,
//                           k x bucket row, then keyed: u32 m, m x keyed request body;
//                           unique: u32 n >= 1, n x unique (and no rows)
//       6 pending totals    u64 n, n x total
//       7 pending buckets   u64 n, n x (total, u8 granularity 1|2, i64 bucket start)
//       8 counter           u32 record_type, u64 record_id
// where
//   inc          u32 record_type, u64 record_id, i32 delta
//   total        u32 record_type, u64 record_id, i64 delta
//   at'          a keyed item's time: 0 none, > 0 the receive time, < 0 a time the
//                client sent (-at' - 1), which the body hash covers
//   key(timed)   u8 length (1 to 128), the key
//   req          u64 x 2 body hash, i64 received (unix ms)
//   row          u32 record_type, u64 record_id, u16 slot, i64 delta
//   bucket row   u32 record_type, u64 record_id, u8 granularity, i64 bucket start, u16
//                slot, i64 delta
//   unique       u32 record_type, u64 record_id, i64 window start, i64 at, u8 client
//                length (1 to 128), the client (model/uniques.hpp)
// An unknown version, role or tag, a field its role does not take or repeated where one
// is allowed, fields out of tag order, a body not exactly its length, another number of
// fields than the count (a record cut at a field's end too), or trailing bytes:
// malformed, as an unknown kind is (a later version's record is refused whole, never
// half read). A format change is a new version or a new tag, never a bit borrowed from a
// field.
//
// Kinds 1 to 13, which earlier versions wrote, are read and never written (their
// decoders are record_increments.cpp, record_keyed.cpp, record_batches.cpp,
// record_snapshot.cpp, record_reset.cpp, record_uniques.cpp; their layouts, and the
// borrowed bits of the versions before them, are in docs/wal-format.md; one log of each
// is in tests/data/wal-golden).
//
// What the roles mean for replay, whichever kind carried them: a cut means every
// increment logged before it (since the previous cut or snapshot) now lives in its
// batches, and every keyed request and unique entry logged before it too (a take takes
// them all). A snapshot replaces everything logged before it. A committed record means
// every batch logged before it has committed, so replay must not send them again (their
// ledger rows may be pruned by then). A reset means the counter's increments logged
// before it and not yet in a batch were dropped (its reset cleared them); keyed requests
// are kept whole (a reset leaves them pending, see README), and unique entries too (a
// reset clears the counter, not its decisions; known-limits.md). Replay counts a logged
// `at` in the buckets its counter keeps under the config it replays with (a counter
// whose buckets were removed just drops them, and an increment logged without a time,
// its counter then having none, counts in no bucket); logged batches and snapshots carry
// their bucket counts as they were formed.

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

// The encoders (append_*, each a record of the tagged kind) and its decoder are in
// record_tagged.cpp; the decoders of kinds 1-13 in the file of their kind; replay in
// replay.cpp. The frame, checksums and scanning are wal/'s (wal/frame.hpp).

namespace codec {
struct timed_delta;
struct snapshot_record;
struct unique_increments_record;
struct tagged_record;
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
  unique_snapshot = 13,
  tagged = 14
};

// `uniques`: a request's items with a `client`, as unique entries (a field of their own
// in the same record; `increments` are its other items).
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
  bool apply_tagged(std::optional<codec::tagged_record>&& r);
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
