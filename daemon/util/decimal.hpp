#pragma once
// A 128-bit integer as decimal text, exactly: totals (SUM(count) of slot rows, read as
// DECIMAL) and persisted + pending can pass int64.
//
// Thread-safety: a pure function.

#include <cstdint>
#include <string>

namespace slotted::util {

inline std::string decimal(__int128 v) {
  if (v >= INT64_MIN && v <= INT64_MAX) return std::to_string(static_cast<std::int64_t>(v));
  const bool negative = v < 0;
  unsigned __int128 u = negative ? -static_cast<unsigned __int128>(v) : v;
  std::string digits;
  for (; u > 0; u /= 10) digits.insert(digits.begin(), static_cast<char>('0' + u % 10));
  if (negative) digits.insert(digits.begin(), '-');
  return digits;
}

}  // namespace slotted::util
