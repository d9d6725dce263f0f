// The keyed record, and the keyed trailer of batches and snapshot records (see
// record.hpp).
#include <algorithm>

#include "wal/codec.hpp"

namespace slotted::wal {

namespace codec {

namespace {

// Whether any of `increments` carries a time to log (see record.hpp).
bool any_at(std::span<const ingest::increment> increments) {
  return std::any_of(increments.begin(), increments.end(),
                     [](const ingest::increment& inc) { return inc.has_time(); });
}

// A logged time: >= 0 the receive time, < 0 a time the client sent (-at - 1), which
// the body hash covers (see idempotency::hash_of).
void set_logged_at(ingest::increment& inc, std::int64_t logged) {
  inc.at_given = logged < 0;
  inc.at = logged < 0 ? -(logged + 1) : logged;
}

}  // namespace

void put_keyed(std::string& out, const idempotency::keyed_request& r) {
  const bool with_at = any_at(r.increments);
  // The length's top bit is the `at` mark, so a length of 128 (the longest key) is
  // written as 0, which no key has. (128 itself was the mark alone: "empty key".)
  const std::size_t length = r.key.size() == idempotency::max_key_length ? 0 : r.key.size();
  put<std::uint8_t>(out, static_cast<std::uint8_t>(length | (with_at ? keyed_with_at : 0)));
  out += r.key;
  put<std::uint64_t>(out, r.hash[0]);
  put<std::uint64_t>(out, r.hash[1]);
  put<std::int64_t>(out, r.received_ms);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(r.increments.size()));
  for (const auto& inc : r.increments) {
    put<std::uint32_t>(out, inc.record_type);
    put<std::uint64_t>(out, inc.record_id);
    put<std::int32_t>(out, inc.delta);
    if (with_at) put<std::int64_t>(out, inc.at_given ? -inc.at - 1 : inc.at);
  }
}

bool read_keyed(reader& in, idempotency::keyed_request& r) {
  std::uint8_t len = 0;
  std::uint32_t n = 0;
  if (!in.get(len)) return false;
  const bool with_at = (len & keyed_with_at) != 0;
  len &= static_cast<std::uint8_t>(~keyed_with_at);
  const std::size_t length = len == 0 ? idempotency::max_key_length : len;
  if (!in.has(length)) return false;
  r.key.resize(length);
  for (auto& c : r.key) in.get(c);
  if (!idempotency::valid_key(r.key)) return false;
  if (!in.get(r.hash[0]) || !in.get(r.hash[1]) || !in.get(r.received_ms) || !in.get(n) ||
      n > in.remaining() / 16)
    return false;
  r.increments.resize(n);
  for (auto& inc : r.increments) {
    if (!in.get(inc.record_type) || !in.get(inc.record_id) || !in.get(inc.delta)) return false;
    if (with_at) {
      std::int64_t at = 0;
      if (!in.get(at)) return false;
      set_logged_at(inc, at);
    }
  }
  return true;
}

// The keyed requests of a batches or snapshot record: those of `batches`, then `pending`.
void put_keyed_trailer(std::string& out, std::span<const store::flush_batch> batches,
                       std::span<const idempotency::keyed_request> pending) {
  std::uint32_t m = static_cast<std::uint32_t>(pending.size());
  for (const auto& b : batches) m += static_cast<std::uint32_t>(b.keyed.size());
  if (m == 0) return;  // as earlier versions wrote it
  put<std::uint32_t>(out, m);
  for (std::size_t i = 0; i < batches.size(); ++i) {
    for (const auto& r : batches[i].keyed) {
      put<std::uint32_t>(out, static_cast<std::uint32_t>(i));
      put_keyed(out, r);
    }
  }
  for (const auto& r : pending) {
    put<std::uint32_t>(out, not_in_batch);
    put_keyed(out, r);
  }
}

// Reads a keyed trailer (nothing when the record ends here) into `batches` and `pending`.
bool read_keyed_trailer(reader& in, std::vector<store::flush_batch>& batches,
                        std::vector<idempotency::keyed_request>& pending) {
  if (in.done()) return true;
  std::uint32_t m = 0;
  if (!in.get(m) || m == 0) return false;
  for (std::uint32_t i = 0; i < m; ++i) {
    std::uint32_t index = 0;
    idempotency::keyed_request r;
    if (!in.get(index) || !read_keyed(in, r)) return false;
    if (index == not_in_batch) {
      pending.push_back(std::move(r));
    } else if (index < batches.size()) {
      batches[index].keyed.push_back(std::move(r));
    } else {
      return false;
    }
  }
  return in.done();
}

std::optional<idempotency::keyed_request> decode_keyed(reader& in) {
  idempotency::keyed_request r;
  if (!read_keyed(in, r) || !in.done()) return std::nullopt;
  return r;
}

}  // namespace codec

void append_keyed(std::string& out, const idempotency::keyed_request& request) {
  const std::size_t start = codec::begin_record(out, record_kind::keyed);
  codec::put_keyed(out, request);
  codec::finish_record(out, start);
}

}  // namespace slotted::wal
