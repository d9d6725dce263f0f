#pragma once
// Items with a `client` (README: HTTP API; model/uniques.hpp), once a body is parsed and
// its times resolved: checked against the counters' dedupe windows, then turned into the
// unique entries the store holds. Pure; thread-safe.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "ingest/parser.hpp"
#include "model/increment.hpp"
#include "model/uniques.hpp"

namespace slotted::ingest {

// An item with a `client` must be of a counter with counters[].dedupe and have a delta of
// 1; its `at` (given, else `now`, which it is then set to) must lie in a window that ended
// at most its counter's keep (counters[].dedupe_keep) before `now` (the table keeps a
// window's entries that long, so an older one could count twice) and no more than
// max_at_ahead_seconds after `now`. The first item that fails is a 400 naming it; then nothing of
// the request may be applied.
std::optional<parse_error> check_clients(std::span<increment> increments,
                                         const store::dedupe_spec& dedupe, std::int64_t now);

// Whether any item carries a client.
bool has_clients(std::span<const increment> increments);

// The unique entry of a checked item with a client.
store::unique_entry unique_entry_of(const increment& inc, const store::dedupe_spec& dedupe);

// A checked request's items apart: those without a client stay increments, the others
// become their unique entries.
struct split_items {
  std::vector<increment> plain;
  std::vector<store::unique_entry> entries;
};
split_items split_clients(std::span<const increment> increments, const store::dedupe_spec& dedupe);

}  // namespace slotted::ingest
