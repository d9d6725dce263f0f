// The snapshot record (see record.hpp).
#include <algorithm>

#include "durable/codec.hpp"

namespace slotted::durable {

namespace codec {

namespace {

// The deltas of a snapshot with buckets: granularity 0 a counter's total, else a bucket.
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

}  // namespace

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

void put_snapshot(std::string& out, std::span<const store::flush_batch> batches,
                  std::span<const store::pending_delta> deltas,
                  std::span<const idempotency::keyed_request> keyed, form f) {
  put_batches(out, batches, f);
  put<std::uint64_t>(out, deltas.size());
  for (const auto& d : deltas) {
    put<std::uint32_t>(out, d.key.record_type);
    put<std::uint64_t>(out, d.key.record_id);
    put<std::int64_t>(out, d.delta);
    if (f == form::timed) {
      put<std::uint8_t>(out, static_cast<std::uint8_t>(d.gran));
      put<std::int64_t>(out, d.bucket);
    }
  }
  put_keyed_trailer(out, batches, keyed, f);
}

}  // namespace codec

void append_snapshot(std::string& out, std::span<const store::flush_batch> batches,
                     std::span<const store::pending_delta> deltas,
                     std::span<const idempotency::keyed_request> keyed,
                     std::span<const store::unique_entry> uniques) {
  // Any unique entry, pending or in a batch: its own kind (record_uniques.cpp).
  if (!uniques.empty() || codec::any_uniques(batches))
    return codec::append_unique_snapshot(out, batches, deltas, keyed, uniques);
  const bool bucketed = std::any_of(deltas.begin(), deltas.end(), [](const auto& d) {
    return d.gran != store::granularity::none;
  });
  const auto f =
      bucketed || codec::needs_timed(batches, keyed) ? codec::form::timed : codec::form::plain;
  const std::size_t start = codec::begin_record(
      out, f == codec::form::timed ? record_kind::bucketed_snapshot : record_kind::snapshot);
  codec::put_snapshot(out, batches, deltas, keyed, f);
  codec::finish_record(out, start);
}

}  // namespace slotted::durable
