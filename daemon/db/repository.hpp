#pragma once
// The database operations the daemon performs, each on a caller-provided connection.
// Blocking; never on HTTP I/O threads. Failures throw db_error (see errors.hpp).

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "db/connection.hpp"
#include "db/sql.hpp"
#include "model/increment.hpp"
#include "model/top_spec.hpp"

namespace slotted::db {

// Whether table `name` exists in the connection's database. Throws db_error.
bool table_exists(connection& conn, std::string_view name);

// Creates the counters table, the ledger, the dirty marks, the adoptions table
// (sql.hpp adoptions_table) and the Idempotency-Key table
// if missing. Idempotent. Alters no counters table (a seed-style table is left as it
// is); brings the daemon's own tables of an earlier version up to date (the ledger's
// `by_time` index, the keys table's `created_ms`).
void migrate(connection& conn, const std::string& table);

// Converts an Idempotency-Key table of the layout before (`created` TIMESTAMP(3), which
// ends in 2038) to `created_ms` (sql.hpp), keeping each key's time; nothing when it is
// converted already. Safe to run again, also after a run cut short. Part of migrate().
void migrate_idempotency_keys(connection& conn);

// Creates the bucket tables (`<table>_hour`, `<table>_day`) that `buckets` uses, if
// missing (--migrate). Idempotent.
void migrate_buckets(connection& conn, const std::string& table, const store::bucket_spec& buckets);

// The bucket tables `buckets` uses that do not exist (empty: all there).
std::vector<std::string> missing_bucket_tables(connection& conn, const std::string& table,
                                               const store::bucket_spec& buckets);

// One counter's persisted buckets of granularity `g` starting in [from, to], as
// (bucket start, SUM(count)) in bucket order, the sums exact in 128 bits. Throws db_error.
std::vector<std::pair<std::int64_t, __int128>> read_series(
    connection& conn, const std::string& table, store::granularity g, std::uint32_t record_type,
    std::uint64_t record_id, std::int64_t from, std::int64_t to);

// Deletes up to `limit` rows of `record_type`'s `g` buckets that start before `before`,
// oldest first: reads their keys through the (record_type, bucket) index without a
// lock, then deletes them through the primary key, one statement per bucket, each
// committed on its own (see sql.hpp, bucket_prune_delete). `read` is the rows found
// (fewer than `limit`: nothing older is left); `deleted` may differ by the rows another
// instance deleted first, and by the other slots of the last counter read, which go
// with it. Throws db_error.
struct prune_chunk {
  std::size_t read = 0;
  std::uint64_t deleted = 0;
};
// `totals` (the counter keeps top-N totals, counters[].top): each bucket's DELETE and
// that of its bucket totals rows in one transaction.
prune_chunk prune_buckets(connection& conn, const std::string& table, store::granularity g,
                          std::uint32_t record_type, std::int64_t before, std::size_t limit,
                          bool totals = false);

// Checks that `table` has record_type, record_id, slot and count and a unique key on
// exactly (record_type, record_id, slot), and that the ledger (and, with rollups, the
// dirty-mark table) exists. Throws a fatal db_error naming what is wrong and how to
// fix it.
// Returns the largest record_type and record_id the table's columns can hold (an
// existing seed-style table has INT columns).
struct key_limits {
  std::uint64_t max_record_type = ingest::max_record_type;
  std::uint64_t max_record_id = ingest::max_record_id;
  bool idempotency_keys = true;  // the Idempotency-Key table exists, in this version's layout
  // ... it exists, in the layout before `created_ms` (--migrate converts it): unusable
  // until then, like a missing one.
  bool idempotency_keys_unmigrated = false;
};
key_limits verify_schema(connection& conn, const std::string& table, bool with_rollups);

// The counters table's AUTO_INCREMENT column (a seed-style `id`), which a multi-row
// INSERT ... ON DUPLICATE KEY UPDATE advances by one per row, even for rows that update.
struct autoincrement_state {
  std::string column;       // its name
  std::string column_type;  // e.g. "int(11)"
  std::uint64_t next = 0;   // information_schema.TABLES.AUTO_INCREMENT
  std::uint64_t max = 0;    // the largest value the column can hold
  // @@auto_increment_increment of the session (Galera sets it to the cluster size): the
  // ids used are `increment` apart, so only every increment-th value can be handed out.
  std::uint64_t increment = 1;
  std::uint64_t remaining() const { return next > max ? 0 : (max - next) / increment + 1; }
};

// Reads it from information_schema (COLUMNS.EXTRA, TABLES.AUTO_INCREMENT); empty when
// the table has no AUTO_INCREMENT column. Throws db_error.
std::optional<autoincrement_state> read_autoincrement(connection& conn, const std::string& table);

struct rollup_target {
  std::uint32_t record_type = 0;
  std::string table;
  std::string id_column;
  std::string count_column;
  std::string counter;  // the counter's name (counters[].name), for logs and metrics
};

// The largest value an integer column of this information_schema DATA_TYPE and
// COLUMN_TYPE (lower case, e.g. "int", "int(10) unsigned") can hold; a type that is not
// an integer type is taken as BIGINT.
std::uint64_t integer_column_max(const std::string& data_type, const std::string& column_type);
// Whether DATA_TYPE is one of the integer types (tinyint ... bigint).
bool is_integer_type(const std::string& data_type);

// Checks that the owning table and both columns exist. Throws a fatal db_error naming
// the missing one.
void verify_rollup_target(connection& conn, const rollup_target& target);

// A counter whose SUM(count) its owning column cannot hold (out of its range in the
// session's strict sql_mode): its owning row is left as it is and its marks kept.
struct rollup_refusal {
  std::uint64_t record_id = 0;
  std::string sum;    // SUM(count) as the server prints it
  std::string error;  // the server's message
};

struct rollup_chunk_result {
  std::size_t marks = 0;                // dirty marks processed (0: nothing left)
  std::size_t records = 0;              // owning rows set to SUM(count)
  std::size_t missing_owners = 0;       // dirty records without an owning row (skipped)
  std::vector<rollup_refusal> refused;  // owning rows that cannot hold their SUM (skipped)
};

// The cursor a rollup run of `record_type` starts from: bounded by the largest
// record_id marked now. Empty when there is no mark.
std::optional<dirty_cursor> rollup_start(connection& conn, std::uint32_t record_type);

// Rolls up at most `batch_size` dirty marks of `target.record_type` after `cursor`
// (which it advances): one set-based UPDATE for their records, then deletes exactly the
// marks read (a mark flushed again meanwhile stays for the next run). When the UPDATE is
// refused for its data (a SUM out of the owning column's range), the ids are bisected
// until the ones at fault stand alone: those are skipped and returned in `refused`, with
// their marks kept; all others are set and unmarked. One transaction: the owning rows
// locked first, in id order, then the UPDATE (its SUMs read once those are held), then
// the marks deleted. A run ends at the first chunk with fewer
// than `batch_size` marks; it reads each mark at most once and none above the bound.
rollup_chunk_result rollup_chunk(connection& conn, const std::string& counters_table,
                                 const rollup_target& target, std::size_t batch_size,
                                 dirty_cursor& cursor);

// Lock order. Every transaction that writes a counter's rows takes its row locks in this
// one order, so that no two writers, of this instance or another, wait on each other in
// a cycle (a deadlock: one of them rolled back with 1213). Under READ COMMITTED a
// statement locks the rows it writes, and those a FOR UPDATE / LOCK IN SHARE MODE read
// returns, until COMMIT; gap locks only in duplicate-key checks. The order is coded once
// (db/write_path.hpp): db::apply, guard, claims and db::write_counted (3 to 6), which an
// adoption's batch also calls after its own guard.
//   1. The writer's ledger row: its own id, never another writer's (a retry after a
//      lost COMMIT reply waits here on the first attempt, holding nothing else).
//   1b. With unique entries: the rows of `slotted_counterd_uniques_pruned` of their
//      uniques table (db/uniques.hpp, Late items), LOCK IN SHARE MODE, read by one
//      statement; the prune locks the table's every_type row FOR UPDATE and raises one
//      record type's row in a transaction holding nothing else.
//   2. Idempotency-Key rows (keyed batches), keys sorted; or `<table>_uniques` rows (unique
//      batches, db/uniques.hpp), sorted by its primary key (record_type, window_start,
//      record_id, client): inserted with INSERT IGNORE, whose duplicate check waits on a
//      row another transaction inserted until that one ends.
//   3. Slot rows of the counters table, sorted by (record_type, record_id).
//   4. Bucket rows, `<table>_hour` then `<table>_day`, each sorted by (record_type,
//      record_id, bucket), and only of slot rows the transaction holds (3).
//   5. Totals rows (db/top.hpp), only of counters declared with counters[].top:
//      `<table>_totals` sorted by (record_type, record_id), then `<table>_hour_totals`,
//      `<table>_day_totals`, each sorted by (record_type, record_id, bucket); only of
//      counters whose slot rows the transaction holds (3).
//   6. Dirty marks, sorted.
// The writers: db::apply (db/write_path.hpp) for every flush batch, log pass, adoption
// batch and reset (1: a batch's ledger row, or in its place a log source's position
// row, or an adoption's row (adopt/adopt.hpp), which no other writer locks, by SELECT ...
// FOR UPDATE, its owning rows then read unlocked; 2 for a keyed batch by claim_keys; 1b
// and 2 for unique entries by claim_uniques; 3, 4, 5, 6 by write_counted, an adoption
// without bucket rows or marks, and without top-N its 3 by INSERT ... SELECT ... ORDER BY
// id in db::claim_adoption; a reset's 3 by a locking read of the counter's slot rows,
// with top 4 by a locking read of their bucket rows, sql.hpp reset_statements, with top
// 5 lowered by what it deleted, `<table>_totals` first even when its sum was 0, and 6). An INSERT
// IGNORE of an adoption row (the roller's record of an all-zero column, a run's first row) commits
// on its own holding nothing else. A batch writes a slot row for every counter it has bucket rows
// of (a row of delta 0 if need be, see store::flush_batch), so by (4) no bucket row of a slot is
// written by a transaction that does not hold the slot row: a reset that holds the slot rows it
// read deletes the bucket rows of those slots exactly, and a slot another instance inserts
// meanwhile keeps its buckets with its total. rollup_chunk locks owning rows (a locking read in id
// order; the slot rows a consistent read after it), then dirty marks, in one transaction: no writer
// above locks owning rows, and an adoption reads them unlocked. Statements that commit on their own
// wait in no cycle, as each holds one kind of row at a time: prune_buckets (one bucket's rows, in
// key order; with top, then their bucket totals, 4 then 5 in one transaction), prune_ledger,
// db::prune_keys and db::prune_uniques (one record type's passed windows of
// `<table>_uniques`, a range of its key; the types read unlocked).
// Tested in tests/integration/lock_order_test.cpp.

// How a write ended: applied, or nothing applied as its guard found it done before
// (already_applied: its ledger row is there) or another writer moved its position row.
enum class commit_outcome { applied, already_applied, moved };

struct batch_identity {
  std::string instance_id;
  std::uint64_t run_id = 0;
  std::uint64_t seq = 0;
};

// The generation of a batch's dirty marks: unique per batch (run ids are random), so a
// fresh mark never repeats an old one.
std::uint64_t dirty_gen_of(const batch_identity& id);

// A slot row's count as the server prints it, exactly: an adopted table's `count` may be
// of any integer type (unsigned BIGINT too), so it is read into 128 bits; text that is
// no integer is a db_error (the caller's contract), never a std:: exception.
__int128 slot_count(const std::optional<std::string>& text);

// The ledger's retention, one run of it: deletes this process's own rows (`keep_from`'s
// instance and run) older than `own_max_age_seconds` before `keep_from`'s seq (see
// sql.hpp ledger_prune_select), then every other run's rows older than
// `others_max_age_seconds` (ledger_stale_select: an instance that never comes back, a
// container under a new hostname, leaves its rows for any instance to delete; the rows
// of an earlier run of this instance, or of another process that shares its
// instance_id, are another run's, which only it knows it no longer needs). Each in chunks of
// `chunk` rows (keys read without a lock, then ledger_delete through the primary key, each
// statement committing on its own: a chunk locks only the rows it deletes), at
// most `max_chunks` chunks each; `behind` is set when a side had more than that (the
// caller runs again soon). Returns rows deleted. Throws db_error.
struct ledger_prune_result {
  std::uint64_t deleted = 0;
  bool behind = false;
};
ledger_prune_result prune_ledger(connection& conn, const batch_identity& keep_from,
                                 std::uint64_t own_max_age_seconds,
                                 std::uint64_t others_max_age_seconds, std::size_t chunk = 1000,
                                 int max_chunks = 10);

// The ledger's batch_seq values of this instance and run that are parts of split
// batches (a split index above 1, see flush::split_batch): a batch replayed from the
// WAL must not apply again the parts of it that committed before the restart.
std::vector<std::uint64_t> committed_split_parts(connection& conn, const std::string& instance_id,
                                                 std::uint64_t run_id);

// SUM(count) over the slots of one counter, exact in 128 bits (it may pass int64).
__int128 read_count(connection& conn, const std::string& table, std::uint32_t record_type,
                    std::uint64_t record_id);

// SUM(count) of each of `record_ids` (one record type) in one statement, exact in 128
// bits: (record_id, sum) for the ids that have slot rows, the others left out. Throws
// db_error.
std::vector<std::pair<std::uint64_t, __int128>> read_counts(
    connection& conn, const std::string& table, std::uint32_t record_type,
    std::span<const std::uint64_t> record_ids);

// The database's clock (SELECT UNIX_TIMESTAMP()) in Unix seconds; none when it answers
// no value. Throws db_error.
std::optional<std::int64_t> database_clock(connection& conn);
// Unix seconds now by the later of this host's clock and the database's: the clock a
// writer decides entries by. A prune cuts by the earlier one, so that a clock fast on one
// side never deletes what the other still counts in.
std::int64_t later_clock(connection& conn);
std::int64_t earlier_clock(connection& conn);

}  // namespace slotted::db
