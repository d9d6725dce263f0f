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

// The key: its length byte, then its characters. The plain form writes the longest key
// (128) as 0, which no key has: in old logs the byte's top bit was the `at` mark (and 128
// alone read as that mark with an empty key).
void put_key(std::string& out, const std::string& key, form f) {
  const bool longest = f == form::plain && key.size() == idempotency::max_key_length;
  put<std::uint8_t>(out, static_cast<std::uint8_t>(longest ? 0 : key.size()));
  out += key;
}

// Reads the key; `with_at` is the mark an old plain record set in the length byte.
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

// The plain form is written only for a request without any `at` (needs_timed).
void put_keyed(std::string& out, const idempotency::keyed_request& r, form f) {
  put_key(out, r.key, f);
  put<std::uint64_t>(out, r.hash[0]);
  put<std::uint64_t>(out, r.hash[1]);
  put<std::int64_t>(out, r.received_ms);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(r.increments.size()));
  for (const auto& inc : r.increments) {
    put<std::uint32_t>(out, inc.record_type);
    put<std::uint64_t>(out, inc.record_id);
    put<std::int32_t>(out, inc.delta);
    if (f == form::timed) put<std::int64_t>(out, logged_at(inc));
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

// The keyed requests of a batches or snapshot record: those of `batches`, then `pending`.
// The plain form leaves out a trailer of none (as earlier versions wrote it), the timed
// form always has one.
void put_keyed_trailer(std::string& out, std::span<const store::flush_batch> batches,
                       std::span<const idempotency::keyed_request> pending, form f) {
  std::uint32_t m = static_cast<std::uint32_t>(pending.size());
  for (const auto& b : batches) m += static_cast<std::uint32_t>(store::keyed_requests(b).size());
  if (m == 0 && f == form::plain) return;
  put<std::uint32_t>(out, m);
  for (std::size_t i = 0; i < batches.size(); ++i) {
    for (const auto& r : store::keyed_requests(batches[i])) {
      put<std::uint32_t>(out, static_cast<std::uint32_t>(i));
      put_keyed(out, r, f);
    }
  }
  for (const auto& r : pending) {
    put<std::uint32_t>(out, not_in_batch);
    put_keyed(out, r, f);
  }
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

void append_keyed(std::string& out, const idempotency::keyed_request& request) {
  const auto f = codec::any_at(request.increments) ? codec::form::timed : codec::form::plain;
  const std::size_t start = codec::begin_record(
      out, f == codec::form::timed ? record_kind::timed_keyed : record_kind::keyed);
  codec::put_keyed(out, request, f);
  codec::finish_record(out, start);
}

}  // namespace slotted::durable
