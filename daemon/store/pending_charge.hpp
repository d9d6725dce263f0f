#pragma once
// What a pending entry holds against the two pending bounds: one entry against
// flush.max_pending_keys, and its memory, in bytes, against flush.max_pending_bytes.
//
// The bytes are charged when an entry is admitted (plain and keyed requests, unique
// items, WAL on or off) and given back when its batch commits; an entry is charged the
// same wherever it waits (the store's maps, the keyed requests, the unique set, a batch
// of the flusher's queue, the WAL's applies): the most it costs in any of them. Each
// figure is the resident memory bench/sizing.py measured per entry of its kind
// (docs/operations.md, Sizing), rounded up; a request is admitted whole when the bound
// is not yet reached, so the bound may be passed by one request's entries per HTTP
// thread. Pure and thread-safe.

#include <cstddef>
#include <cstdint>

#include "model/increment.hpp"
#include "model/keyed_request.hpp"
#include "model/uniques.hpp"

namespace slotted::store {

struct pending_charge {
  std::size_t entries = 0;
  std::size_t bytes = 0;

  pending_charge& operator+=(const pending_charge& o) {
    entries += o.entries;
    bytes += o.bytes;
    return *this;
  }
  // What was added before: never more (the counts would wrap).
  pending_charge& operator-=(const pending_charge& o) {
    entries -= o.entries;
    bytes -= o.bytes;
    return *this;
  }
  friend pending_charge operator+(pending_charge a, const pending_charge& b) { return a += b; }
  bool operator==(const pending_charge&) const = default;
};

// The bounds: flush.max_pending_keys (entries) and flush.max_pending_bytes (bytes). A
// number alone bounds the entries only; the default, nothing.
struct pending_limits {
  // NOLINTNEXTLINE(google-explicit-constructor): a count of entries reads as the limit
  pending_limits(std::size_t max_entries = SIZE_MAX, std::size_t max_bytes = SIZE_MAX)
      : entries(max_entries), bytes(max_bytes) {}
  std::size_t entries;
  std::size_t bytes;

  // Whether `held` reaches either bound.
  bool reached_by(const pending_charge& held) const {
    return held.entries >= entries || held.bytes >= bytes;
  }
};

// A counter's total or one of its pending buckets in the store (an hour-and-day entry
// counts as two), and a row or bucket row of a queued batch: 55-66 bytes RSS measured
// per counter in the store's maps (their growth steps), 43-47 per bucket entry, 32-48 in
// a batch.
inline constexpr std::size_t key_bytes = 72;

// The heap block of a std::string of `n` bytes: none within its own 15 bytes; past
// that n + 1 and malloc's 8-byte header, in 16-byte steps.
constexpr std::size_t string_heap_bytes(std::size_t n) {
  return n <= 15 ? 0 : (n + 1 + 8 + 15) / 16 * 16;
}

// A unique entry in the pending set (its hash node and bucket slot; the client's block
// apart): 148-150 bytes RSS measured with a 16-byte client, 271-273 with a 128-byte one.
inline constexpr std::size_t unique_entry_bytes = 144;

inline pending_charge charge_of(const unique_entry& e) {
  return {1, unique_entry_bytes + string_heap_bytes(e.client.size())};
}

// A keyed request pending (its deque slot) and its entry in the key index (the entry,
// its slot), each with a copy of the key, and each of its increments (32 bytes in a
// vector that may have grown to twice that): 495 bytes RSS measured with a
// 128-character key and no increment, 575 with one, 1,023 with eight. Its increments
// count as entries too.
inline constexpr std::size_t keyed_request_bytes = 256;
inline constexpr std::size_t keyed_increment_bytes = 72;

inline pending_charge keyed_charge(std::size_t key_length, std::size_t increments) {
  return {1 + increments, keyed_request_bytes + 2 * string_heap_bytes(key_length) +
                              increments * keyed_increment_bytes};
}
inline pending_charge charge_of(const idempotency::keyed_request& r) {
  return keyed_charge(r.key.size(), r.increments.size());
}

// Plain increments as a request brings them: each may make a new key.
inline pending_charge plain_charge(std::size_t increments) {
  return {increments, increments * key_bytes};
}

}  // namespace slotted::store
