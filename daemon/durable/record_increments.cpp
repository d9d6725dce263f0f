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

bool read_timed_increments(reader& in, std::vector<timed_delta>& out) {
  std::uint32_t n = 0;
  if (!in.get(n) || n > in.remaining() / 24) return false;
  out.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    timed_delta d;
    std::int32_t delta = 0;
    in.get(d.key.record_type);
    in.get(d.key.record_id);
    in.get(delta);
    in.get(d.at);
    if (d.at < no_time || d.at > ingest::max_at) return false;
    d.delta = delta;
    out.push_back(d);
  }
  return true;
}

std::optional<std::vector<timed_delta>> decode_timed_increments(reader& in) {
  std::vector<timed_delta> out;
  if (!read_timed_increments(in, out) || !in.done()) return std::nullopt;
  return out;
}

}  // namespace codec

}  // namespace slotted::durable
