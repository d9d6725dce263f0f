#pragma once
// Counts per bucket (README: HTTP API, Counts per bucket): which declared counters keep
// their increments per UTC hour and per UTC day, for how long, and the arithmetic of
// buckets. Pure; a bucket_spec is immutable once built and shared by every thread.
//
// A bucket is named by its start in unix seconds (UTC): unix time has no leap seconds
// and UTC no daylight saving, so every hour is 3,600 s and every day 86,400 s, and a
// bucket's start is `at` rounded down to a multiple of that.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace slotted::store {

// `none` marks a counter's total where totals and buckets travel together (see
// pending_delta); the others name a bucket table (`<table>_hour`, `<table>_day`).
enum class granularity : std::uint8_t { none = 0, hour = 1, day = 2 };

inline constexpr granularity all_granularities[] = {granularity::hour, granularity::day};

constexpr std::int64_t seconds_of(granularity g) {
  return g == granularity::hour ? 3600 : g == granularity::day ? 86400 : 1;
}

constexpr std::string_view name_of(granularity g) {
  return g == granularity::hour ? "hour" : g == granularity::day ? "day" : "none";
}

// "hour" or "day"; nullopt for anything else.
constexpr std::optional<granularity> granularity_named(std::string_view name) {
  if (name == "hour") return granularity::hour;
  if (name == "day") return granularity::day;
  return std::nullopt;
}

// The start of the bucket holding `at` (unix seconds). Precondition: at >= 0 (the
// parser refuses negative times).
constexpr std::int64_t bucket_start(granularity g, std::int64_t at) {
  return at - at % seconds_of(g);
}

// Which record types keep buckets, of which granularities, for how long.
class bucket_spec {
 public:
  struct counter {
    std::uint32_t record_type = 0;
    // Indexed by granularity; zero: that granularity is not kept.
    std::chrono::seconds retention[3]{};
    bool keeps(granularity g) const { return retention[static_cast<int>(g)].count() > 0; }
    std::chrono::seconds longest() const { return std::max(retention[1], retention[2]); }
    bool operator==(const counter&) const = default;
  };

  bucket_spec() = default;
  // `retention` must be positive (config validation).
  void declare(std::uint32_t record_type, granularity g, std::chrono::seconds retention) {
    auto& c = by_type_[record_type];
    c.record_type = record_type;
    c.retention[static_cast<int>(g)] = retention;
  }

  bool empty() const { return by_type_.empty(); }
  // The counter's buckets, or null when it keeps none.
  const counter* find(std::uint32_t record_type) const {
    const auto it = by_type_.find(record_type);
    return it == by_type_.end() ? nullptr : &it->second;
  }
  // Whether any counter keeps granularity `g` (its table must then exist).
  bool uses(granularity g) const {
    for (const auto& [type, c] : by_type_)
      if (c.keeps(g)) return true;
    return false;
  }
  bool operator==(const bucket_spec&) const = default;

  std::vector<counter> counters() const {
    std::vector<counter> out;
    for (const auto& [type, c] : by_type_) out.push_back(c);
    return out;
  }

 private:
  std::unordered_map<std::uint32_t, counter> by_type_;
};

// The spec of a daemon whose counters keep no buckets.
inline const bucket_spec& no_buckets() {
  static const bucket_spec none;
  return none;
}

}  // namespace slotted::store
