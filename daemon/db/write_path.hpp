#pragma once
// The writers' lock order (db/repository.hpp, "Lock order") as code: the ledger guard
// (1) and the counted writes (3 slot rows, 4 bucket rows, 5 totals, 6 dirty marks),
// which every writer of counts runs after its own guard and claims, inside its
// transaction; and the one write of counts, apply(), that every writer commits through.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "db/adoption.hpp"
#include "db/connection.hpp"
#include "db/log_positions.hpp"
#include "db/repository.hpp"
#include "db/sql.hpp"
#include "model/batch.hpp"
#include "model/keyed_request.hpp"
#include "model/top_spec.hpp"
#include "model/uniques.hpp"

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

// The guard a transaction takes first (the lock order's 1), its own row: a flush
// batch's ledger row, a log source's position row, or an adoption's row
// (db/adoption.hpp adoption_guard, whose claim reads the rows the set writes).
struct ledger_guard {
  batch_identity id;
  std::size_t row_count = 0;  // as the ledger records it
};
// Compare and set: the position row of (instance_id, path), locked, must hold `from`
// (be absent when `from` is); it is set to `to`.
struct position_guard {
  std::string instance_id;
  std::string path;
  std::optional<log_position> from;
  log_position to;
};

// What one transaction writes, after its guard: views, valid for one apply() call.
struct write_set {
  std::variant<ledger_guard, position_guard, adoption_guard> guard;
  std::span<const counter_row> rows = {};           // sorted by counter, one per counter
  std::span<const store::bucket_row> buckets = {};  // only of counters in `rows`
  // Each applied when its key is new (2, db/keys.hpp); a ledger guard's only.
  std::span<const idempotency::keyed_request> keyed = {};
  // Each +1 when no batch counted it before (1b and 2, db/uniques.hpp); sorted.
  std::span<const store::unique_entry> uniques = {};
  // A reset (a ledger guard's only, with no rows): this counter's slot rows read locked
  // and deleted with their bucket rows (of the granularities rules.buckets keeps for it),
  // its totals of top-N lowered by what they held, its dirty mark when rules.marks keeps
  // it (README: HTTP API, Reset).
  std::optional<store::counter_key> reset = std::nullopt;
  std::uint16_t slot = 0;  // of the rows the keys and the unique entries add
  std::uint64_t mark_gen = 0;
};

// What a writer's sets share.
struct write_rules {
  std::string table;  // the counters table
  // The buckets of the rows keys and unique entries add (a set's own bucket rows are
  // given).
  const store::bucket_spec* buckets = &store::no_buckets();
  const store::top_spec* top = &store::no_top();  // the counters with totals (db/top.hpp)
  // Unique entries: only those decidable_entries() leaves are decided (db/uniques.hpp,
  // Late items); null: every entry.
  const store::dedupe_spec* dedupe = nullptr;
  // Keys first received longer than this ago count as not committed (db/keys.hpp).
  std::chrono::milliseconds key_window = std::chrono::hours(24);
  // This instance's clock now for the keys' ages; 0: idempotency::now_ms() at each claim.
  std::int64_t local_now_ms = 0;
  // The rows whose counters are rolled up among those it is passed (their dirty marks);
  // empty: none.
  std::function<std::span<const counter_row>(std::span<const counter_row>)> marks = {};
  // Rows a statement carries at most besides the byte budget.
  std::size_t max_rows = std::numeric_limits<std::size_t>::max();
};

struct write_result {
  commit_outcome outcome = commit_outcome::applied;
  std::size_t rows = 0;        // counter rows upserted
  std::size_t duplicates = 0;  // keyed: requests whose key was committed before with this
                               // body; unique: entries a batch had counted before
  std::size_t conflicts = 0;   // keyed: ... with another body
  std::size_t counted = 0;     // unique: entries this set counted
  std::size_t too_late = 0;    // unique: entries not decided, their windows' decisions pruned
  // COMMIT was sent: a lost connection now leaves the outcome to the ledger (a retry
  // under the same guard answers it). Set in the result a throwing call filled.
  bool commit_sent = false;
  __int128 cleared = 0;          // reset: SUM(count) of the slot rows deleted
  std::size_t cleared_rows = 0;  // reset: slot rows deleted
  std::uint64_t taken = 0;       // adoption: owning rows with a count taken
  __int128 total = 0;            // adoption: their counts
  bool last = false;             // adoption: the batch finished it
};

// The one write of counts: `ws` in one transaction, in the lock order. Its guard (1):
// a ledger row already there (an earlier attempt committed, its reply lost) applies
// nothing (already_applied), a position row that no longer holds `from` neither
// (moved), nor an adoption that is done (already_applied); an adoption's claim gives
// the set's rows (slot 0, no buckets) or, for a counter without top-N, takes them
// itself (db/adoption.hpp). A reset then deletes its counter's rows (3 to 6, in that
// order: slot rows read locked, their bucket rows, totals, mark). Any other set: its
// keys (2, claim_keys: the rows of the requests whose key is new) or its unique entries
// (1b and 2, claim_uniques), whose rows are added to the set's own, and write_counted
// (3 to 6) with the marks `rules` gives. On error the transaction is rolled back (when
// the connection still allows it) and db_error is thrown; `out` is filled as the call
// goes, so that a caller whose call threw reads commit_sent there.
void apply(connection& conn, const write_set& ws, const write_rules& rules, write_result& out);
write_result apply(connection& conn, const write_set& ws, const write_rules& rules);

// Flush batch `b` as batch `id`, by its content: its ledger row (row_count its rows, or
// its unique entries), its rows and bucket rows as formed (plain), or its keys (keyed),
// or its unique entries under their slot (unique); the marks' generation dirty_gen_of(id).
write_set write_set_of(const batch_identity& id, const store::flush_batch& b);

}  // namespace slotted::db
