#pragma once
// Checks a presented bearer token against the configured one without revealing, through
// the time taken, anything about the configured token: neither a prefix nor its length.
//
// Both tokens are reduced to a 16-byte digest under a key drawn at random for this
// object (two SipHash-2-4 values), and the digests are compared with no early exit.
// The time taken depends only on the length of the presented token, which its sender
// knows. A keyed digest rather than a plain SHA-256: no new library to link, and even
// a leak in the comparison would concern digests an attacker cannot compute offline.
// Two different tokens match only if both 64-bit halves collide under a secret key
// (about 2^-128 per guess).
//
// Thread-safety: matches() may run on any number of threads at once.

#include <array>
#include <cstdint>
#include <string_view>

#include "util/siphash.hpp"

namespace slotted::http {

class token_check {
 public:
  using digest_type = std::array<std::uint64_t, 2>;

  explicit token_check(std::string_view expected)
      : keys_{util::random_sip_key(), util::random_sip_key()}, expected_(digest(expected)) {}

  bool matches(std::string_view presented) const {
    const digest_type got = digest(presented);
    std::uint64_t diff = 0;
    for (std::size_t i = 0; i < got.size(); ++i) diff |= got[i] ^ expected_[i];
    return diff == 0;
  }

  digest_type digest(std::string_view token) const {
    return {util::siphash<2, 4>(keys_[0], token), util::siphash<2, 4>(keys_[1], token)};
  }

 private:
  std::array<util::sip_key, 2> keys_;
  digest_type expected_;
};

}  // namespace slotted::http
