#pragma once
// Durations in the config are strings with a unit: "250ms", "1s", "5m", "2h", "400d"
// (a day is 24 hours).

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace slotted::config {

using duration = std::chrono::milliseconds;

// Returns nullopt for anything but digits followed by one of ms, s, m, h, d
// (no sign, no fraction, no spaces) or a value that overflows.
std::optional<duration> parse_duration(std::string_view text);

std::string format_duration(duration d);

}  // namespace slotted::config
