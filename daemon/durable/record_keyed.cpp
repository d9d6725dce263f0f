// The keyed record, and the keyed trailer of batches and snapshot records (see
// record.hpp).
#include <algorithm>

#include "durable/codec.hpp"

namespace slotted::durable {

namespace codec {

// Whether any of `increments` carries a time to log (see record.hpp).
bool any_at(std::span<const ingest::increment> increments) {
  return std::any_of(increments.begin(), increments.end(),
                     [](const ingest::increment& inc) { return inc.has_time(); });
}

namespace {

// A logged time: >= 0 the receive time (0: none), < 0 a time the client sent (-at - 1),
// which the body hash covers (see idempotency::hash_of).
std::int64_t logged_at(const ingest::increment& inc) {
  return inc.at_given ? -inc.at - 1 : inc.at;
}

void set_logged_at(ingest::increment& inc, std::int64_t logged) {
  inc.at_given = logged < 0;
  inc.at = logged < 0 ? -(logged + 1) : logged;
}

// Reads the key: its length byte, then its characters. The plain form (kind 5) wrote the
// longest key (128) as 0, which no key has: in old logs the byte's top bit was the `at`
// mark (and 128 alone read as that mark with an empty key). `with_at` is that mark.
bool read_key(reader& in, std::string& key, form f, bool& with_at) {
  std::uint8_t len = 0;
  if (!in.get(len)) return false;
  with_at = f == form::timed;
  if (f == form::plain) {
    with_at = (len & old_keyed_with_at) != 0;
    len &= static_cast<std::uint8_t>(~old_keyed_with_at);
    if (len == 0) len = idempotency::max_key_length;
  }
  if (!in.has(len)) return false;
  key.resize(len);
  for (auto& c : key) in.get(c);
  return idempotency::valid_key(key);
}

}  // namespace

void put_keyed(std::string& out, const idempotency::keyed_request& r) {
  put<std::uint8_t>(out, static_cast<std::uint8_t>(r.key.size()));
  out += r.key;
  put<std::uint64_t>(out, r.hash[0]);
  put<std::uint64_t>(out, r.hash[1]);
  put<std::int64_t>(out, r.received_ms);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(r.increments.size()));
  for (const auto& inc : r.increments) {
    put<std::uint32_t>(out, inc.record_type);
    put<std::uint64_t>(out, inc.record_id);
    put<std::int32_t>(out, inc.delta);
    put<std::int64_t>(out, logged_at(inc));
  }
}

bool read_keyed(reader& in, idempotency::keyed_request& r, form f) {
  bool with_at = false;
  std::uint32_t n = 0;
  if (!read_key(in, r.key, f, with_at)) return false;
  if (!in.get(r.hash[0]) || !in.get(r.hash[1]) || !in.get(r.received_ms) || !in.get(n) ||
      n > in.remaining() / (with_at ? 24 : 16))
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

// Reads a keyed trailer (nothing when the record ends here) into `batches` and `pending`.
bool read_keyed_trailer(reader& in, std::vector<store::flush_batch>& batches,
                        std::vector<idempotency::keyed_request>& pending, form f, bool last) {
  if (f == form::plain && in.done()) return true;
  std::uint32_t m = 0;
  if (!in.get(m) || (m == 0 && f == form::plain)) return false;
  for (std::uint32_t i = 0; i < m; ++i) {
    std::uint32_t index = 0;
    idempotency::keyed_request r;
    if (!in.get(index) || !read_keyed(in, r, f)) return false;
    if (index == not_in_batch) {
      pending.push_back(std::move(r));
    } else if (index < batches.size()) {
      // The first request names a plain batch keyed (a batch holds one kind only).
      auto& b = batches[index];
      if (std::holds_alternative<store::plain_content>(b.content))
        b.content = store::keyed_content{};
      auto* k = store::keyed_of(b);
      if (k == nullptr) return false;
      k->requests.push_back(std::move(r));
    } else {
      return false;
    }
  }
  return !last || in.done();
}

// A keyed record: plain, or (old logs) with the `at` mark in its length byte.
std::optional<idempotency::keyed_request> decode_keyed(reader& in) {
  idempotency::keyed_request r;
  if (!read_keyed(in, r, form::plain) || !in.done()) return std::nullopt;
  return r;
}

std::optional<idempotency::keyed_request> decode_timed_keyed(reader& in) {
  idempotency::keyed_request r;
  if (!read_keyed(in, r, form::timed) || !in.done()) return std::nullopt;
  return r;
}

}  // namespace codec

}  // namespace slotted::durable
