#include "config/duration.hpp"

#include <charconv>
#include <cstdint>

namespace slotted::config {

std::optional<duration> parse_duration(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 12) return std::nullopt;
  std::uint64_t value = 0;
  std::from_chars(text.data(), text.data() + digits, value);
  const std::string_view unit = text.substr(digits);
  std::uint64_t factor = 0;
  if (unit == "ms")
    factor = 1;
  else if (unit == "s")
    factor = 1000;
  else if (unit == "m")
    factor = 60'000;
  else if (unit == "h")
    factor = 3'600'000;
  else if (unit == "d")
    factor = 86'400'000;
  else
    return std::nullopt;
  std::uint64_t ms = 0;
  if (__builtin_mul_overflow(value, factor, &ms) || ms > static_cast<std::uint64_t>(INT64_MAX))
    return std::nullopt;
  return duration{static_cast<duration::rep>(ms)};
}

std::string format_duration(duration d) {
  const auto ms = d.count();
  if (ms % 1000 != 0) return std::to_string(ms) + "ms";
  return std::to_string(ms / 1000) + "s";
}

}  // namespace slotted::config
