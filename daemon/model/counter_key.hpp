#pragma once
// A counter's identity, (record_type, record_id), and how the daemon hashes it: the key
// of every pending map, WAL record and slot row (README: Design).
//
// Thread-safety: values; hash_of() may be called from any thread.

#include <compare>
#include <cstdint>

#include "util/siphash.hpp"

namespace slotted::store {

struct counter_key {
  std::uint32_t record_type = 0;
  std::uint64_t record_id = 0;

  friend bool operator==(const counter_key&, const counter_key&) = default;
  // The flush order: every writer locks rows in this one order.
  friend auto operator<=>(const counter_key&, const counter_key&) = default;
};

// Keyed hashing of counter keys. Clients choose ids, so an unkeyed hash (even a
// full-avalanche bijection) lets them pick ids that all land in one shard and one probe
// sequence: every insert then scans the same group under one shard mutex, O(n^2). With
// SipHash-1-3 under a key drawn at random per process nobody can predict where an id
// lands. Its cost on the ingest path is measured in bench/RESULTS.md (hash_cost).
class key_hasher {
 public:
  explicit key_hasher(util::sip_key key) : key_(key) {}
  std::uint64_t operator()(const counter_key& k) const {
    return util::siphash_u64_u32<1, 3>(key_, k.record_id, k.record_type);
  }

 private:
  util::sip_key key_;
};

// The key this process hashes with: random, drawn once on first use.
inline const util::sip_key& process_hash_key() {
  static const util::sip_key key = util::random_sip_key();
  return key;
}

// The process's keyed hash: fully mixed, so the low bits may choose a shard and the
// hash map may use the value as is.
inline std::uint64_t hash_of(const counter_key& k) {
  return key_hasher(process_hash_key())(k);
}

}  // namespace slotted::store
