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
// column, and at most INT64_MAX: a slot row's count is an int64).
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
std::string state_insert(const dialect& d, const rollup_target& t, std::string_view state,
                         std::string_view mode);

// Records one batch: last_id (unchanged when none), rows and total added, and 'done'
// with the finishing time when `done`.
std::string state_advance(const dialect& d, const rollup_target& t,
                          std::optional<std::uint64_t> last_id, std::uint64_t rows,
                          std::string_view total, bool done);

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

// A batch's figures, one scan of its range: (bad rows, rows with a count > 0, their total
// (exact, DECIMAL), largest id).
std::string batch_check_select(const rollup_target& t, const row_limits& limits,
                               const id_range& range);

// Takes the counts of the owning rows in `range` into slot 0 of their counters, in id
// order (the writers' lock order, db/repository.hpp), adding to a slot row the daemon
// may have written already:
// INSERT INTO `counters` (`record_type`, `record_id`, `slot`, `count`)
// SELECT T, o.`id`, 0, o.`count` FROM `owner` AS o WHERE <range> AND o.`count` > 0
// ORDER BY o.`id` ON DUPLICATE KEY UPDATE `counters`.`count` = `counters`.`count` +
// VALUES(`count`)
std::string take_batch_insert(const dialect& d, std::string_view counters_table,
                              const rollup_target& t, const id_range& range);

// The owning rows of a batch's `range`, (id, count) in id order, every one (a batch is at
// most batch_rows rows): for a counter that keeps top-N totals (counters[].top) they are
// read once, checked, and slot 0 and the totals table (db/top.hpp) written from those
// values, so the two cannot disagree (two INSERT ... SELECT would each read the owning
// table anew under READ COMMITTED).
std::string batch_rows_select(const rollup_target& t, const id_range& range);

// One row when the owning column holds a value other than 0 (the roller's check of a
// column that needs no adoption).
std::string nonzero_select(const rollup_target& t);

}  // namespace slotted::db
