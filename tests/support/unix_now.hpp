#pragma once
// This host's clock in unix seconds, as the daemon reads it for `at` and buckets.

#include <chrono>
#include <cstdint>

namespace slotted::test {

inline std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace slotted::test
