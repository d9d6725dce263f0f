// The increments and timed_increments records (see record.hpp).
#include <algorithm>

#include "durable/codec.hpp"

namespace slotted::durable {

namespace codec {

// An increments record: n triples, then (an earlier version's bucket extension) n times,
// 0 read as no time.
std::optional<std::vector<timed_delta>> decode_increments(reader& in) {
  std::uint32_t n = 0;
  std::vector<logged_delta> read;
  if (!in.get(n) || !read_deltas<std::int32_t>(in, n, read)) return std::nullopt;
  std::vector<timed_delta> out;
  out.reserve(read.size());
  for (const auto& [key, delta] : read) out.push_back({key, delta, no_time});
  if (in.done()) return out;
  if (in.remaining() != std::size_t{n} * 8) return std::nullopt;
  for (auto& d : out) {
    std::int64_t at = 0;
    in.get(at);
    // 0: no time (its counter had no buckets when it was logged). This encoding
    // cannot tell `at: 0` from that; timed_increments records can.
    if (at > 0) d.at = at;
  }
  return out;
}

std::optional<std::vector<timed_delta>> decode_timed_increments(reader& in) {
  std::uint32_t n = 0;
  if (!in.get(n) || n > in.remaining() / 24) return std::nullopt;
  std::vector<timed_delta> out;
  out.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    timed_delta d;
    std::int32_t delta = 0;
    in.get(d.key.record_type);
    in.get(d.key.record_id);
    in.get(delta);
    in.get(d.at);
    if (d.at < no_time || d.at > ingest::max_at) return std::nullopt;
    d.delta = delta;
    out.push_back(d);
  }
  if (!in.done()) return std::nullopt;
  return out;
}

}  // namespace codec

void append_increments(std::string& out, std::span<const ingest::increment> increments) {
  // With a time: a record kind of its own, whose encoding tells "no time" from `at: 0`.
  const bool timed = std::any_of(increments.begin(), increments.end(),
                                 [](const ingest::increment& inc) { return inc.has_time(); });
  const std::size_t start =
      codec::begin_record(out, timed ? record_kind::timed_increments : record_kind::increments);
  codec::put<std::uint32_t>(out, static_cast<std::uint32_t>(increments.size()));
  for (const auto& inc : increments) {
    codec::put<std::uint32_t>(out, inc.record_type);
    codec::put<std::uint64_t>(out, inc.record_id);
    codec::put<std::int32_t>(out, inc.delta);
    if (timed) codec::put<std::int64_t>(out, inc.has_time() ? inc.at : codec::no_time);
  }
  codec::finish_record(out, start);
}

}  // namespace slotted::durable
