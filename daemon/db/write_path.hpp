#pragma once
// The writers' lock order (db/repository.hpp, "Lock order") as code: the ledger guard
// (1) and the counted writes (3 slot rows, 4 bucket rows, 5 totals, 6 dirty marks),
// which every writer of counts runs after its own guard and claims, inside its
// transaction.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>

#include "db/connection.hpp"
#include "db/repository.hpp"
#include "db/sql.hpp"
#include "model/top_spec.hpp"

namespace slotted::db {

// Runs the statements `build(first, n)` makes of [0, count), in order, in chunks whose
// text stays within `budget` bytes (halved until it does; a single item too large is
// sent all the same, and the connection refuses it) and of at most `max_items` items.
// Each chunk is handed to `run`. No item takes less than 32 bytes: the first try never
// builds much more than the budget, however many items (a batch replayed from an older
// WAL may hold more than a statement carries).
template <typename Build, typename Run>
void in_statements(std::size_t count, std::size_t budget, const Build& build, const Run& run,
                   std::size_t max_items = std::numeric_limits<std::size_t>::max()) {
  std::size_t n = std::clamp<std::size_t>(budget / 32, 1, std::max<std::size_t>(1, max_items));
  for (std::size_t first = 0; first < count; first += n) {
    n = std::min(n, count - first);
    std::string sql = build(first, n);
    while (sql.size() > budget && n > 1) {
      n = (n + 1) / 2;
      sql = build(first, n);
    }
    run(sql);
  }
}

// The lock order's 1 for a batch: inserts the ledger row of `id` (`row_count` as the
// ledger records it) as the transaction's first statement. When the ledger holds it
// already (an earlier attempt committed, its reply lost; a retry waits here on that
// attempt's row lock, holding nothing else), rolls back and returns false: nothing is
// to be applied. Throws db_error otherwise.
bool claim_ledger(connection& conn, const batch_identity& id, std::size_t row_count);

// What a transaction counts, after its guard and claims.
struct counted_writes {
  std::string_view table = {};                      // the counters table
  std::span<const counter_row> rows = {};           // 3: sorted by counter, one per counter
  std::span<const store::bucket_row> buckets = {};  // 4: only of counters in `rows`
  const store::top_spec* top = nullptr;             // 5: the counters with totals; null: none
  std::span<const counter_row> marks = {};          // 6: sorted; empty: none
  std::string_view quoted_instance = {};            // the marks' instance, quoted
  std::uint64_t mark_gen = 0;                       // the marks' generation
  // Rows a statement carries at most besides the byte budget (the flush setting).
  std::size_t max_rows = std::numeric_limits<std::size_t>::max();
};

// The lock order's 3 to 6, in one transaction the caller holds: the slot rows, the bucket
// rows (hour, then day, each in the order given), the totals of top-N (db/top.hpp
// totals_upserts) and the dirty marks, each phase in statements cut to the connection's
// byte budget and sent in order, so that the order holds across statements. Throws
// db_error.
void write_counted(connection& conn, const counted_writes& w);

}  // namespace slotted::db
