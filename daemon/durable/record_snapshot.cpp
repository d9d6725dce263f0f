// The snapshot record (see record.hpp).
#include <algorithm>

#include "durable/codec.hpp"

namespace slotted::durable {

namespace codec {

bool read_deltas_with_buckets(reader& in, std::uint64_t n, snapshot_record& s) {
  if (n > in.remaining() / 29) return false;
  for (std::uint64_t i = 0; i < n; ++i) {
    store::pending_delta d;
    std::uint8_t g = 0;
    in.get(d.key.record_type);
    in.get(d.key.record_id);
    in.get(d.delta);
    in.get(g);
    in.get(d.bucket);
    if (g == 0) {
      s.deltas.push_back({d.key, d.delta});
    } else if (valid_granularity(g)) {
      d.gran = static_cast<store::granularity>(g);
      s.buckets.push_back(d);
    } else {
      return false;
    }
  }
  return true;
}

// A snapshot record: plain, or (old logs) with the marks of bucket counts and `at`s.
std::optional<snapshot_record> decode_snapshot(reader& in) {
  snapshot_record s;
  std::uint64_t n = 0;
  if (!read_batches(in, s.batches, form::plain) || !in.get(n)) return std::nullopt;
  if ((n & old_snapshot_with_buckets) != 0) {
    if (!read_deltas_with_buckets(in, n & ~old_snapshot_with_buckets, s)) return std::nullopt;
  } else if (!read_deltas<std::int64_t>(in, n, s.deltas)) {
    return std::nullopt;
  }
  if (!read_keyed_trailer(in, s.batches, s.keyed, form::plain)) return std::nullopt;
  return s;
}

bool read_bucketed_snapshot(reader& in, snapshot_record& s, bool last) {
  std::uint64_t n = 0;
  return read_batches(in, s.batches, form::timed) && in.get(n) &&
         read_deltas_with_buckets(in, n, s) &&
         read_keyed_trailer(in, s.batches, s.keyed, form::timed, last);
}

std::optional<snapshot_record> decode_bucketed_snapshot(reader& in) {
  snapshot_record s;
  if (!read_bucketed_snapshot(in, s, true)) return std::nullopt;
  return s;
}

}  // namespace codec

}  // namespace slotted::durable
