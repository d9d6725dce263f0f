#pragma once
// The bounds of one bucketed top-N (db/top.hpp reads it; http/ refuses a request past
// them with a 400 before any read). Pure.

#include <algorithm>
#include <cstddef>

namespace slotted::db {

// What one bucketed top-N may read in its rounds (the rows of its round statements)
// before it stops: with counts tied across many record ids over a long range the merge
// would read on to every row of the range, holding a connection of the flusher's pool.
constexpr std::size_t max_top_rows = 200'000;

// The rows per bucket one round reads: 1.5 x `limit`, at least 20.
constexpr std::size_t top_page(std::size_t limit) {
  return std::max<std::size_t>(limit + limit / 2, 20);
}
// What the first round of a top-N of `limit` over `buckets` buckets may read: past
// max_top_rows the request can never be answered, whatever the data (the router's 400).
constexpr std::size_t top_first_round_rows(std::size_t buckets, std::size_t limit) {
  return buckets * top_page(limit);
}

}  // namespace slotted::db
