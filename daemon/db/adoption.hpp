#pragma once
// An adoption's batch as the guard of a write of counts (db/write_path.hpp apply):
// adopt/adopt.hpp runs the batches and says what they do; this is what one batch reads
// and records in its transaction, before its slot rows are written.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "db/connection.hpp"
#include "db/repository.hpp"
#include "db/sql_adopt.hpp"

namespace slotted::db {

// An adoption refused for what the owning table or the schema holds: nothing of the
// step that found it is applied; the message names the row or the table.
struct adoption_refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The target's row in the adoptions table.
struct adoption_state {
  std::string state, mode;
  std::optional<std::uint64_t> last_id;
  std::string rows = "0", total = "0";
};

// The target's adoption row (none: not there); `lock`: FOR UPDATE. Throws db_error (fatal)
// when rows that differ only in the count column's case are there.
std::optional<adoption_state> read_adoption(connection& conn, const rollup_target& t, bool lock);

// Why the owning row (id, count) may not be taken under `limits`, as a sentence naming it.
std::string owning_row_refusal(const rollup_target& t, const row_limits& limits,
                               const result_row& row);

// One batch of the adoption of `target`: the next `batch_rows` owning rows after the
// adoption row's cursor.
struct adoption_guard {
  rollup_target target;
  row_limits limits;
  std::size_t batch_rows = 10000;
};

// What a batch takes: the owning rows with a count above 0, and their total (exact).
struct adoption_claim {
  std::vector<counter_row> rows;  // with top-N: as slot 0 of their counters, in id order
  std::uint64_t taken = 0;        // owning rows with a count taken
  __int128 total = 0;
  bool last = false;  // the batch finished the adoption ('done')
};

// The lock order's 1 for an adoption batch, in the caller's transaction: locks the
// adoption row (two runs at once take turns batch by batch); when it is 'done', rolls
// back and returns none. Else checks the batch's owning rows again (the table may have
// changed since the validation pass) and takes them, then moves the row's cursor, rows
// and total on ('done' with the last batch). A counter `with_top` (counters[].top) has
// its rows read once, checked, and returned for apply to write as slot 0 with their
// totals (a count past INT64_MAX is refused: a slot row's count is an int64). Any other
// is taken by the server: a checking scan, then INSERT ... SELECT into slot 0 of
// `counters_table` in id order (sql_adopt.hpp take_batch_insert), its lock order's 3,
// before the adoption row's update: about 1.4 times as fast as reading the rows and
// sending them back (bench/RESULTS.md, "Issue 41: --adopt through db::apply"), and exact
// for counts up to what the column holds; a row changed between the check and the copy
// is taken as it then is, or fails the batch with the server's error. Owning rows are read unlocked
// (a consistent read). A row that is NULL, negative or past `limits` throws adoption_refused naming
// it; a deleted adoption row, db_error (fatal: a rerun would take the batches already taken again).
std::optional<adoption_claim> claim_adoption(connection& conn, const adoption_guard& g,
                                             std::string_view counters_table, bool with_top);

}  // namespace slotted::db
