// The keyed hashes: SipHash against its reference vectors, the counter store's hash
// (random per process, not the unkeyed bijection it replaced), and the bearer-token
// check built on it.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "http/token_check.hpp"
#include "model/counter_key.hpp"
#include "util/siphash.hpp"

namespace slotted {
namespace {

// The key 00 01 .. 0f and the messages 00 01 .. (n-1) of the SipHash paper's test vectors.
const util::sip_key reference_key{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
std::string reference_message(std::size_t n) {
  std::string m;
  for (std::size_t i = 0; i < n; ++i) m.push_back(static_cast<char>(i));
  return m;
}

TEST(SipHash, MatchesTheReferenceVectors) {
  EXPECT_EQ((util::siphash<2, 4>(reference_key, reference_message(0))), 0x726fdb47dd0e0e31ull);
  EXPECT_EQ((util::siphash<2, 4>(reference_key, reference_message(1))), 0x74f839c593dc67fdull);
  EXPECT_EQ((util::siphash<2, 4>(reference_key, reference_message(15))), 0xa129ca6149be45e5ull);
}

TEST(SipHash, TheTwoWordFormIsSipHashOfTwelveBytes) {
  const std::uint64_t lo = 0x1122334455667788ull;
  const std::uint32_t hi = 0x99aabbccu;
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>(lo >> (8 * i)));
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>(hi >> (8 * i)));
  EXPECT_EQ((util::siphash_u64_u32<1, 3>(reference_key, lo, hi)),
            (util::siphash<1, 3>(reference_key, bytes)));
}

// The hash the store used before: the murmur3 finaliser over id ^ type * golden ratio,
// a bijection anyone can invert.
std::uint64_t fmix(std::uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}
std::uint64_t inverse_of_odd(std::uint64_t a) {  // Newton's iteration modulo 2^64
  std::uint64_t x = a;
  for (int i = 0; i < 6; ++i) x *= 2 - a * x;
  return x;
}
std::uint64_t unfmix(std::uint64_t h) {
  h ^= h >> 33;
  h *= inverse_of_odd(0xc4ceb9fe1a85ec53ull);
  h ^= h >> 33;
  h *= inverse_of_odd(0xff51afd7ed558ccdull);
  h ^= h >> 33;
  return h;
}

// Ids an attacker can compute for the unkeyed hash: all in shard 0 of 16, with the
// same low 32 bits, so they also share the hash map's probe group metadata.
std::vector<store::counter_key> colliding_keys_for_the_old_hash(std::size_t n) {
  std::vector<store::counter_key> keys;
  const std::uint32_t type = 7;
  for (std::uint64_t i = 1; keys.size() < n; ++i) {
    const std::uint64_t wanted = i << 32;  // low bits zero: shard 0, same reduced hash
    keys.push_back({type, unfmix(wanted) ^ (type * 0x9E3779B97F4A7C15ull)});
  }
  return keys;
}

TEST(CounterHash, IdsChosenAgainstTheOldHashSpreadOverShards) {
  const auto keys = colliding_keys_for_the_old_hash(1600);
  // The attack works on the old hash ...
  for (const auto& k : keys) {
    ASSERT_EQ(fmix(k.record_id ^ (k.record_type * 0x9E3779B97F4A7C15ull)) % 16, 0u);
  }
  // ... and not on the keyed one: the ids spread over all 16 shards, none far above
  // the 100 it would hold on average.
  std::vector<int> per_shard(16);
  for (const auto& k : keys) ++per_shard[store::hash_of(k) % 16];
  EXPECT_LT(*std::max_element(per_shard.begin(), per_shard.end()), 200);
  EXPECT_GT(*std::min_element(per_shard.begin(), per_shard.end()), 0);
  for (const auto& k : keys) {
    EXPECT_NE(store::hash_of(k), fmix(k.record_id ^ (k.record_type * 0x9E3779B97F4A7C15ull)));
  }
}

TEST(CounterHash, DifferentKeysHashDifferentlyAndTheProcessKeyIsRandom) {
  const store::key_hasher a(util::sip_key{1, 2});
  const store::key_hasher a2(util::sip_key{1, 2});
  const store::key_hasher b(util::sip_key{1, 3});
  int differ = 0;
  for (std::uint64_t id = 0; id < 1000; ++id) {
    const store::counter_key k{5, id};
    EXPECT_EQ(a(k), a2(k));
    differ += a(k) != b(k);
  }
  EXPECT_EQ(differ, 1000);
  // Drawn at random once per process: not zero, stable, and the hash uses it.
  const auto key = store::process_hash_key();
  EXPECT_NE(key, (util::sip_key{0, 0}));
  EXPECT_EQ(store::process_hash_key(), key);
  EXPECT_NE(util::random_sip_key(), util::random_sip_key());
  const store::counter_key k{1, 42};
  EXPECT_EQ(store::hash_of(k), store::key_hasher(key)(k));
}

TEST(TokenCheck, AcceptsOnlyTheExactToken) {
  const http::token_check check("s3cret-token");
  EXPECT_TRUE(check.matches("s3cret-token"));
  EXPECT_FALSE(check.matches(""));
  EXPECT_FALSE(check.matches("s3cret-toke"));    // a prefix
  EXPECT_FALSE(check.matches("s3cret-tokenX"));  // longer
  EXPECT_FALSE(check.matches("s3cret-tokeN"));   // the last byte differs
  EXPECT_FALSE(check.matches(std::string("s3cret-token\0", 13)));
}

TEST(TokenCheck, ComparesFixedLengthKeyedDigests) {
  // The comparison sees two 16-byte digests whatever the lengths, and the digests are
  // keyed per check: nobody can compute them offline.
  const http::token_check a("token");
  const http::token_check b("token");
  EXPECT_EQ(a.digest("x").size(), 2u);
  EXPECT_EQ(a.digest(std::string(5000, 'x')).size(), 2u);
  EXPECT_NE(a.digest("token"), b.digest("token"));
  EXPECT_EQ(a.digest("token"), a.digest("token"));
}

}  // namespace
}  // namespace slotted
