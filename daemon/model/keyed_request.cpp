#include "model/keyed_request.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "util/siphash.hpp"

namespace slotted::idempotency {

bool valid_key(std::string_view key) {
  if (key.empty() || key.size() > max_key_length) return false;
  for (const char c : key) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

body_hash hash_of(std::span<const ingest::increment> increments) {
  // Fixed, public keys: stability across processes is the point (see the header).
  static constexpr util::sip_key k0{0x736c6f747465642dull, 0x69646500636f756eull};
  static constexpr util::sip_key k1{0x6964656d706f7465ull, 0x6e63792d6b657931ull};
  std::string bytes;
  bytes.resize(increments.size() * 16);
  char* p = bytes.data();
  for (const auto& inc : increments) {
    // Little-endian on every platform the daemon builds for (x86-64, arm64).
    std::memcpy(p, &inc.record_type, 4);
    std::memcpy(p + 4, &inc.delta, 4);
    std::memcpy(p + 8, &inc.record_id, 8);
    p += 16;
  }
  // `at` as the client sent it (a retry without one arrives later, and is the same
  // request). Appended only when some item has one, so that every body without `at`
  // hashes as before (keys committed by an earlier version still match their retries);
  // then 16n + 3 + 8n bytes, odd, never the even length of a body without `at`.
  if (std::any_of(increments.begin(), increments.end(),
                  [](const ingest::increment& inc) { return inc.at_given; })) {
    bytes.append("\x01at", 3);
    for (const auto& inc : increments) {
      const std::int64_t at = inc.at_given ? inc.at : -1;
      char b[8];
      std::memcpy(b, &at, 8);
      bytes.append(b, 8);
    }
  }
  return {util::siphash<2, 4>(k0, bytes), util::siphash<2, 4>(k1, bytes)};
}

std::string hex(const body_hash& h) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int w = 0; w < 2; ++w) {
    for (int i = 0; i < 16; ++i) out[w * 16 + i] = digits[(h[w] >> (60 - 4 * i)) & 0xf];
  }
  return out;
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace slotted::idempotency
