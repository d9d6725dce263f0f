#pragma once
// A request that carried `Idempotency-Key` (README: HTTP API, Idempotency-Key): its key,
// a hash of what it asks for, and its increments. Pure functions, thread-safe.
//
// Keyed requests never enter the aggregated store: each is kept whole until the flush
// that commits its key in the same transaction as its increments, so that a key
// already committed (by any instance) makes that transaction skip the request.

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/increment.hpp"

namespace slotted::idempotency {

// 1..128 characters of [A-Za-z0-9._:-].
constexpr std::size_t max_key_length = 128;
bool valid_key(std::string_view key);

// 128 bits of SipHash-2-4 under two fixed keys: the same on every instance and after
// every restart, so two instances compare the hashes of one key's bodies. Not a secret:
// it only tells an honest client's changed body from its retry (a client who sends
// another body under its own key hurts nobody but itself).
using body_hash = std::array<std::uint64_t, 2>;
// Of the parsed increments (record_type, record_id, delta, `at` as sent, in order): a retry that
// serialises the same events differently (spacing, names for types, JSON or NDJSON) is
// the same request.
body_hash hash_of(std::span<const ingest::increment> increments);
std::string hex(const body_hash& h);  // 32 lowercase hex digits

struct keyed_request {
  std::string key;
  body_hash hash{};
  std::vector<ingest::increment> increments;  // "accepted" is their number
  // When the request arrived (unix milliseconds, this instance's clock): whether a key
  // committed before is still inside idempotency.window is judged against this, not
  // against when the request's batch happens to commit.
  std::int64_t received_ms = 0;
};

// Unix milliseconds now, for keyed_request::received_ms.
std::int64_t now_ms();

}  // namespace slotted::idempotency
