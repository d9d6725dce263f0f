#pragma once
// Query-string parameters of the read routes (README: HTTP API): each named parameter
// at most once, no other; and the `ids` list of GET /v1/counters/{record_type}. Pure,
// no I/O; the errors name the parameter.

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace slotted::http {

// The query of `target` (after '?') split into `names` -> value: an error when a
// parameter is not one of `names` or is given twice. Values are as sent (not decoded).
struct query_params {
  std::map<std::string_view, std::string_view> values;
  std::optional<std::string> error;
  std::optional<std::string_view> get(std::string_view name) const {
    const auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  }
};
query_params parse_query(std::string_view target, std::initializer_list<std::string_view> names);

// At most this many ids in one GET /v1/counters/{record_type}?ids=... .
inline constexpr std::size_t max_ids_per_read = 1000;

// `ids`: record ids in decimal separated by ',' (or "%2C"), 1 to max_ids_per_read of
// them. Into `out`, each once in the order first given (a repeated id is read once).
// Returns the error, naming `ids`, or nullopt.
std::optional<std::string> parse_id_list(std::string_view ids, std::vector<std::uint64_t>& out);

}  // namespace slotted::http
