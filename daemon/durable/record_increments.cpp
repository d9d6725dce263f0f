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

namespace {
void put_increments(std::string& out, std::span<const ingest::increment> increments, bool timed) {
  put<std::uint32_t>(out, static_cast<std::uint32_t>(increments.size()));
  for (const auto& inc : increments) {
    put<std::uint32_t>(out, inc.record_type);
    put<std::uint64_t>(out, inc.record_id);
    put<std::int32_t>(out, inc.delta);
    if (timed) put<std::int64_t>(out, inc.has_time() ? inc.at : no_time);
  }
}
}  // namespace

void put_timed_increments(std::string& out, std::span<const ingest::increment> increments) {
  put_increments(out, increments, true);
}

}  // namespace codec

void append_increments(std::string& out, std::span<const ingest::increment> increments,
                       std::span<const store::unique_entry> uniques) {
  // Items with a `client`: one record for the whole request (record_uniques.cpp).
  if (!uniques.empty()) return codec::append_unique_increments(out, increments, uniques);
  // With a time: a record kind of its own, whose encoding tells "no time" from `at: 0`.
  const bool timed = std::any_of(increments.begin(), increments.end(),
                                 [](const ingest::increment& inc) { return inc.has_time(); });
  // Room for the whole record at once (kind, count, then 16 or 24 bytes an increment):
  // one allocation for a request's record, on the path every request with a WAL takes.
  out.reserve(out.size() + wal::record_header_bytes + 8 + increments.size() * (timed ? 24 : 16));
  const std::size_t start =
      codec::begin_record(out, timed ? record_kind::timed_increments : record_kind::increments);
  codec::put_increments(out, increments, timed);
  codec::finish_record(out, start);
}

}  // namespace slotted::durable
