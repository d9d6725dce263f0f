#pragma once
// SipHash (Aumasson and Bernstein), a keyed hash designed for hash tables that face
// chosen keys: without the 128-bit key, nobody can pick inputs that collide, so a
// client cannot pile its ids into one shard or one probe sequence. SipHash-c-d runs c
// rounds per 8-byte block and d at the end; 2-4 is the reference strength, 1-3 the
// variant Rust's HashMap and CPython use for the same job.
//
// Thread-safety: pure functions; random_sip_key() may be called from any thread.

#include <sys/random.h>

#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <system_error>

namespace slotted::util {

struct sip_key {
  std::uint64_t k0 = 0;
  std::uint64_t k1 = 0;
  friend bool operator==(const sip_key&, const sip_key&) = default;
};

// 128 bits from getrandom(2), which blocks only until the kernel's pool is first
// seeded. Throws std::system_error when the call fails.
inline sip_key random_sip_key() {
  std::uint64_t words[2];
  auto* p = reinterpret_cast<char*>(words);
  std::size_t got = 0;
  while (got < sizeof words) {
    const ssize_t n = ::getrandom(p + got, sizeof words - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    got += static_cast<std::size_t>(n);
  }
  return {words[0], words[1]};
}

namespace detail {
inline std::uint64_t rotl(std::uint64_t x, int b) {
  return (x << b) | (x >> (64 - b));
}

struct sip_state {
  std::uint64_t v0, v1, v2, v3;
  explicit sip_state(const sip_key& k)
      : v0(k.k0 ^ 0x736f6d6570736575ull),
        v1(k.k1 ^ 0x646f72616e646f6dull),
        v2(k.k0 ^ 0x6c7967656e657261ull),
        v3(k.k1 ^ 0x7465646279746573ull) {}
  void round() {
    v0 += v1;
    v1 = rotl(v1, 13);
    v1 ^= v0;
    v0 = rotl(v0, 32);
    v2 += v3;
    v3 = rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = rotl(v1, 17);
    v1 ^= v2;
    v2 = rotl(v2, 32);
  }
  template <int C>
  void absorb(std::uint64_t m) {
    v3 ^= m;
    for (int i = 0; i < C; ++i) round();
    v0 ^= m;
  }
  template <int D>
  std::uint64_t finish() {
    v2 ^= 0xff;
    for (int i = 0; i < D; ++i) round();
    return v0 ^ v1 ^ v2 ^ v3;
  }
};

inline std::uint64_t load_le64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}
}  // namespace detail

// SipHash-C-D of arbitrary bytes, as in the reference implementation.
template <int C, int D>
std::uint64_t siphash(const sip_key& key, std::string_view data) {
  detail::sip_state s(key);
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  const std::size_t n = data.size();
  const std::size_t whole = n - n % 8;
  for (std::size_t i = 0; i < whole; i += 8) s.absorb<C>(detail::load_le64(p + i));
  std::uint64_t last = static_cast<std::uint64_t>(n & 0xff) << 56;
  for (std::size_t i = whole; i < n; ++i)
    last |= static_cast<std::uint64_t>(p[i]) << (8 * (i - whole));
  s.absorb<C>(last);
  return s.finish<D>();
}

// The same as siphash<C, D> over the 12 bytes `lo` (8, little-endian) then `hi` (4,
// little-endian), without going through memory: the hot path of the counter store.
template <int C, int D>
std::uint64_t siphash_u64_u32(const sip_key& key, std::uint64_t lo, std::uint32_t hi) {
  detail::sip_state s(key);
  s.absorb<C>(lo);
  s.absorb<C>(static_cast<std::uint64_t>(hi) | (std::uint64_t{12} << 56));
  return s.finish<D>();
}

}  // namespace slotted::util
