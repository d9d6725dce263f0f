#pragma once
// Query-string parameters of the read routes (docs/http-api.md): each named parameter
// at most once, no other; the `ids` list of GET /v1/counters/{record_type}; and the
// `granularity`, `from` and `to` of series and top-N reads. Pure, no I/O; a failure is
// errc::invalid_input (a 400) whose detail names the parameter.

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/buckets.hpp"
#include "model/result.hpp"

namespace slotted::http {

// The query of `target` (after '?') split into `names` -> value: a failure when a
// parameter is not one of `names` or is given twice. Values are as sent (not decoded).
struct query_params {
  std::map<std::string_view, std::string_view> values;
  std::optional<std::string_view> get(std::string_view name) const {
    const auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  }
};
result<query_params> parse_query(std::string_view target,
                                 std::initializer_list<std::string_view> names);

// At most this many ids in one GET /v1/counters/{record_type}?ids=... .
inline constexpr std::size_t max_ids_per_read = 1000;

// `ids`: record ids in decimal separated by ',' (or "%2C"), 1 to max_ids_per_read of
// them. Each once, in the order first given (a repeated id is read once).
result<std::vector<std::uint64_t>> parse_id_list(std::string_view ids);

// The buckets of granularity `granularity` that start in [`from`, `to`] (unix seconds):
// `first` and `last` are the first and last such bucket's start, and there is none when
// first > last. A range of more than `max_buckets` is refused.
struct bucket_range {
  store::granularity gran = store::granularity::day;
  std::int64_t first = 0;
  std::int64_t last = 0;
  bool empty() const { return first > last; }
};
result<bucket_range> parse_bucket_range(std::string_view granularity, std::string_view from,
                                        std::string_view to, std::int64_t max_buckets);

}  // namespace slotted::http
