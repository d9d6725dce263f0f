#pragma once

#include <compare>
#include <cstdint>

namespace slotted::store {

struct counter_key {
  std::uint32_t record_type = 0;
  std::uint64_t record_id = 0;

  friend bool operator==(const counter_key&, const counter_key&) = default;
  // The flush order: every writer locks rows in this one order.
  friend auto operator<=>(const counter_key&, const counter_key&) = default;
};

// A full-avalanche mix (the murmur3 finaliser), so the low bits choose a shard and the
// hash map may use the value as is.
inline std::uint64_t hash_of(const counter_key& k) {
  std::uint64_t h =
      k.record_id ^ (static_cast<std::uint64_t>(k.record_type) * 0x9E3779B97F4A7C15ull);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

}  // namespace slotted::store
