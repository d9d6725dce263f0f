#pragma once
// The SQL text of an adoption, which adopt/adopt.hpp and db/adoption.hpp send. Pure
// functions, no I/O, thread-safe. Identifiers come from the validated config
// (config::is_valid_identifier: ASCII letters, digits and '_'), so they appear backquoted as
// identifiers and single-quoted as the adoptions table's keys without further escaping. The owning
// table is read as `o`; its id and count columns are the target's.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "db/repository.hpp"

namespace slotted::db {

// What an owning row must satisfy to be taken: id in [0, max_id] (the counters table's
// record_id column), count not NULL and in [0, max_count] (the counters table's count
// column).
struct row_limits {
  std::uint64_t max_id = UINT64_MAX;
  std::uint64_t max_count = INT64_MAX;
};

// A range of owning ids: id > after (none: from the first) and id <= upto (none: to the
// last).
struct id_range {
  std::optional<std::uint64_t> after;
  std::optional<std::uint64_t> upto;
};

// The target's adoption row: (state, mode, last_id, rows_taken, total_taken); no row
// when there is none. `for_update`: locked (the batches' serialisation point).
std::string state_select(const rollup_target& t, bool for_update);

// Creates the target's row in `state` ('running' or 'done') and `mode` ('history',
// 'no_history', 'zeros') unless it exists (INSERT IGNORE: a row there wins).
std::string state_insert(const rollup_target& t, std::string_view state, std::string_view mode);

// Records one batch: last_id (unchanged when none), rows and total added, and 'done'
// with the finishing time when `done`.
std::string state_advance(const rollup_target& t, std::optional<std::uint64_t> last_id,
                          std::uint64_t rows, std::string_view total, bool done);

// The condition an owning row violates `limits` by (true for a row that must not be
// taken; NULL never: every part is IS NULL or compares non-NULL values).
std::string bad_row_condition(const rollup_target& t, const row_limits& limits);

// The validation pass: (rows, bad rows) of the owning rows in `range`, one scan,
// aggregated by the server (bounded memory whatever the table's size).
std::string validation_select(const rollup_target& t, const row_limits& limits,
                              const id_range& range);

// The first owning row in `range` that violates `limits`, as (id, count), in id order.
std::string first_bad_row_select(const rollup_target& t, const row_limits& limits,
                                 const id_range& range);

// The id of the `batch_rows`-th owning row after `after` (no row: fewer are left, the
// last batch).
std::string batch_upper_select(const rollup_target& t, std::optional<std::uint64_t> after,
                               std::size_t batch_rows);

// The owning rows of a batch's `range`, (id, count) in id order, every one (a batch is at
// most batch_rows rows): read once, checked, and taken (db/adoption.hpp).
std::string batch_rows_select(const rollup_target& t, const id_range& range);

// One row when the owning column holds a value other than 0 (the roller's check of a
// column that needs no adoption).
std::string nonzero_select(const rollup_target& t);

}  // namespace slotted::db
