#pragma once
// Unique per client per window (model/uniques.hpp; README: HTTP API, `client`): the
// table that keeps the decisions, `<table>_uniques`, and the commit of a unique batch.
//
// `<table>_uniques` holds one row per (window, counter, client) counted: its primary key
// (record_type, window_start, record_id, client), and the tag of the commit that
// inserted it (instance_id, run_id, batch_seq: unique_tag, random for each attempt). The record
// type leads the key, then the window: the prune of a counter's passed windows is a range of the
// primary key (whatever the windows of other counters), and a counter's rows of one
// window sit together.
//
// A unique batch (store::flush_batch::uniques, sorted by that key) commits in one
// transaction:
//   INSERT INTO ledger ...                          -- a retry of a committed batch stops here
//   INSERT IGNORE INTO <table>_uniques ... VALUES (entry, this attempt's tag), ...
//   SELECT the keys of those rows that carry this attempt's tag
//   upsert what they count: +1 per row to its counter under the batch's slot, to its
//     buckets (by the entry's `at`), to the totals of top-N, and the dirty marks
//   COMMIT
// A row another transaction inserted first (another instance, or an earlier batch of
// this one) is skipped by INSERT IGNORE: committed, it carries that commit's tag; not
// yet committed, InnoDB makes this INSERT wait on its row lock, then skips it when it
// commits or inserts it when it rolls back. So each (window, counter, client) counts once
// across every instance sharing the database, and the ledger makes each batch count once
// across retries. The lock order is db/repository.hpp's (the uniques rows at its 2).
//
// Late items (counters[].dedupe_keep, model/uniques.hpp): a window's rows are kept
// until `keep` (48 h by default) plus the margin after it ends, so an item or a log line
// that comes late counts once in its own window. What has been pruned is recorded in
// `slotted_counterd_uniques_pruned`, a row per (uniques table, record type): the
// decisions of windows that ended before `ended_before` may be gone. Every commit that
// decides entries first reads its record types' rows and the table's `every_type` row
// (made by --migrate) LOCK IN SHARE MODE, and decides only the entries whose windows
// ended at or after both: an entry of a pruned window is not counted (`too_late`)
// rather than counted twice, whatever the keep of the instance that pruned it. A prune
// first raises its type's row, holding the every_type row FOR UPDATE (so it waits for
// the commits reading the old value, and commits that come after read the new one),
// then deletes. The lock order is db/repository.hpp's (these rows at its 1b).
//
// Failures throw db_error; the transaction is then rolled back (when the connection
// allows).

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "db/connection.hpp"
#include "db/repository.hpp"
#include "model/batch.hpp"
#include "model/top_spec.hpp"
#include "model/uniques.hpp"

namespace slotted::db {

// `<table>_uniques`.
std::string uniques_table(std::string_view table);

// What has been pruned from each uniques table (see above): (uniques_table, record_type,
// ended_before), and the row of a table's every record type.
inline constexpr std::string_view pruned_table = "slotted_counterd_uniques_pruned";
inline constexpr std::uint32_t every_type = 4294967295u;  // no record type is (max 2^31-1)
std::string create_pruned_table(const dialect& d);

// SQL builders, pure. Quoted values (`quoted_*`) come quoted for the connection.
std::string create_uniques_table(const dialect& d, std::string_view table);
// One row per entry of `quoted_clients` (parallel to `entries`), tagged with the batch.
std::string uniques_insert(const dialect& d, std::string_view table,
                           std::span<const store::unique_entry> entries,
                           std::span<const std::string> quoted_clients,
                           std::string_view quoted_instance, std::uint64_t run_id,
                           std::uint64_t seq);
// The keys (record_type, window_start, record_id, HEX(client)) of the rows of `entries`
// that carry the batch's identity.
std::string uniques_select_ours(const dialect& d, std::string_view table,
                                std::span<const store::unique_entry> entries,
                                std::span<const std::string> quoted_clients,
                                std::string_view quoted_instance, std::uint64_t run_id,
                                std::uint64_t seq);
// Deletes up to `limit` rows of `record_type` whose window starts before `before`: a
// range of the primary key.
std::string uniques_prune(const dialect& d, std::string_view table, std::uint32_t record_type,
                          std::int64_t before, std::size_t limit);
// The record types that have rows.
std::string uniques_types_select(std::string_view table);

// Creates `<table>_uniques` and `slotted_counterd_uniques_pruned` with the table's
// every_type row when `dedupe` is not empty (--migrate). That row says nothing was pruned
// for a uniques table made now, and, for one an earlier version made (which pruned a
// window 10 minutes after its end and recorded nothing), that every window which ended
// before this migration may have been. Idempotent.
void migrate_uniques(connection& conn, const std::string& table, const store::dedupe_spec& dedupe);
// Throws a fatal db_error naming what is missing (run --migrate) when `dedupe` needs the
// uniques table and it, the pruned table or the table's every_type row does not exist.
void verify_uniques_table(connection& conn, const std::string& table,
                          const store::dedupe_spec& dedupe);

// The tag of one commit's rows in `<table>_uniques`: `instance_id`, a random 63-bit
// run_id and batch_seq 0, drawn anew for every attempt (128-bit seeded). Not the batch's
// identity: a batch committed whose ledger row is gone (replayed from the WAL a day
// later, docs/known-limits.md) would find the rows its first attempt inserted carrying
// it, take them for its own and count them again, while the window is kept.
batch_identity unique_tag(const std::string& instance_id);

// Inserts `entries` (in the table's key order) tagged with `id` (unique_tag), skipping
// those a commit inserted before, and returns the ones this call inserted, in `entries`'
// order. Inside the caller's transaction. Throws db_error.
std::vector<store::unique_entry> insert_and_find_ours(connection& conn, const std::string& table,
                                                      const batch_identity& id,
                                                      std::span<const store::unique_entry> entries);

// The entries of `entries` whose windows' decisions no prune has passed, read inside
// the caller's transaction: the pruned rows of their record types and the every_type
// row, LOCK IN SHARE MODE (see above). An entry of a record type `dedupe` does not
// dedupe is left out. Throws db_error (a fatal one when the every_type row is missing).
std::vector<store::unique_entry> decidable_entries(connection& conn, const std::string& table,
                                                   std::span<const store::unique_entry> entries,
                                                   const store::dedupe_spec& dedupe);
// The entries whose window (by `dedupe`) ended at or after the `ended_before` of their
// record type (absent: nothing pruned) and `every` (the every_type row's). Pure.
std::vector<store::unique_entry> not_pruned(
    std::span<const store::unique_entry> entries, const store::dedupe_spec& dedupe,
    const std::map<std::uint32_t, std::int64_t>& ended_before, std::int64_t every);

// A batch's unique entries decided, inside its transaction (after its guard): with
// `dedupe`, only those decidable_entries() leaves (the others `too_late`); inserted
// (insert_and_find_ours, tagged unique_tag(instance_id)); the ones this call inserted
// first count +1 each, as `rows` and `buckets` under `slot` (rows_of_counted). The one
// claim of the uniques, a unique batch's and a log pass's (db::apply).
struct uniques_claimed {
  std::size_t counted = 0;
  std::size_t duplicates = 0;
  std::size_t too_late = 0;
  std::vector<counter_row> rows;
  std::vector<store::bucket_row> buckets;
};
uniques_claimed claim_uniques(connection& conn, const std::string& table,
                              const std::string& instance_id,
                              std::span<const store::unique_entry> entries,
                              const store::dedupe_spec* dedupe, std::uint16_t slot,
                              const store::bucket_spec& buckets);

// The rows and bucket rows that `counted` adds under `slot` (sorted, a row for every
// counter with bucket rows). Pure.
void rows_of_counted(std::span<const store::unique_entry> counted, std::uint16_t slot,
                     const store::bucket_spec& buckets, std::vector<counter_row>& rows,
                     std::vector<store::bucket_row>& bucket_rows);

// For each record type with rows: records that windows which ended before now less its
// keep (dedupe.keep_of) and the margin are pruned (its row of the pruned table raised,
// see above, in a transaction of its own), then deletes those windows' rows (by the
// window of `dedupe`; a record type it no longer names: by day), `limit` rows a
// statement, at most `max_chunks` statements per record type, each committing on its
// own. `now`: unix seconds, the earlier of two clocks. `behind`: a record type's last
// allowed statement deleted a full `limit` (more may be due: the caller prunes again
// soon). Throws db_error.
struct unique_prune {
  std::uint64_t deleted = 0;
  bool behind = false;
};
unique_prune prune_uniques(connection& conn, const std::string& table,
                           const store::dedupe_spec& dedupe, std::int64_t now,
                           std::size_t limit = 1000, int max_chunks = 10);

}  // namespace slotted::db
