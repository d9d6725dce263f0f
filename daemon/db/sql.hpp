#pragma once
// All SQL text the daemon sends, built here. Pure functions, no I/O, thread-safe.
// Identifiers come from the validated config and are always backquoted; values are
// numbers formatted here, never text taken from a request.

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "db/dialect.hpp"
#include "model/batch.hpp"

namespace slotted::db {

// The bookkeeping table of committed flush batches (README: Guarantees, exactly once).
inline constexpr std::string_view ledger_table = "slotted_counterd_ledger";

// Durable "needs rollup" marks, written in the flush transaction (see rollup/).
inline constexpr std::string_view dirty_table = "slotted_counterd_dirty";

// Committed Idempotency-Keys (README: HTTP API, Idempotency-Key), one row per key.
inline constexpr std::string_view idempotency_keys_table = "slotted_counterd_idempotency_keys";

// Adoptions of existing owning columns (daemon/adopt/adopt.hpp): one row per (record_type,
// owning table, count column), 'running' with its cursor while `--adopt` takes the
// column's counts into the slotted table, 'done' once they are all taken (or the
// column needs no adoption). The roller rolls a target up only once it is 'done'.
inline constexpr std::string_view adoptions_table = "slotted_counterd_adoptions";

// Defined with the batches (model/batch.hpp), upstream of the database layer.
using counter_row = store::counter_row;

// `name` backquoted. Precondition: config::is_valid_identifier(name).
std::string quote_identifier(std::string_view name);

// Statements without parameters.
inline constexpr const char* start_transaction = "START TRANSACTION";
inline constexpr const char* commit = "COMMIT";
inline constexpr const char* rollback = "ROLLBACK";
// A round trip that proves the connection alive and touches no table.
inline constexpr const char* ping_statement = "DO 1";
// Sent on every new connection, in this order:
inline constexpr const char* session_setup[] = {
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    // A strict sql_mode whatever the server's global one, so a value that does not fit
    // its column is an error (the flusher isolates and reports the row), never a silent
    // clamp.
    ("SET SESSION sql_mode = "
     "'STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ZERO_DATE,NO_ENGINE_SUBSTITUTION'"),
    // UTC: the TIMESTAMP column (the ledger's `committed_at`) is written through NOW()
    // and compared with INTERVAL arithmetic, in the session's time_zone (so was the keys
    // table's `created` before it became `created_ms`). In a zone with daylight saving
    // (the server's default is SYSTEM, its host's zone) that arithmetic is on the wall
    // clock: an hour is missing across the spring change, so a keyed retry 23 h 45 min
    // after the first was past a window of 24 h and counted twice.
    "SET SESSION time_zone = '+00:00'",
};
// Whether a node may take writes (db/driver_mariadb.cpp require_writable), as (name, value)
// rows: variables and status any MySQL or MariaDB answers; the wsrep ones exist only on
// a server built with Galera.
inline constexpr const char* node_state_selects[] = {
    "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('read_only', 'wsrep_reject_queries')",
    ("SHOW GLOBAL STATUS WHERE Variable_name IN "
     "('wsrep_ready', 'wsrep_local_state', 'wsrep_local_state_comment')"),
};
// On a Galera node: reads wait until the node has applied what the cluster committed.
inline constexpr const char* galera_sync_reads = "SET SESSION wsrep_sync_wait = 1";

// This instance's and run's ledger batch_seq values from `min_seq` on.
std::string ledger_seqs_select(std::string_view quoted_instance, std::uint64_t run_id,
                               std::uint64_t min_seq);

// One multi-row upsert for `rows` (in the order given):
// INSERT INTO `t` (`record_type`, `record_id`, `slot`, `count`) VALUES (...),...
// ON DUPLICATE KEY UPDATE `count` = `count` + VALUES(`count`)
std::string upsert_statement(const dialect& d, std::string_view table,
                             std::span<const counter_row> rows);

std::string create_counters_table(const dialect& d, std::string_view table);
std::string create_ledger_table(const dialect& d);
// The ledger's index for its prune of every instance's old rows (ledger_stale_select),
// added by --migrate to a ledger created before it.
std::string ledger_add_time_index();
inline constexpr std::string_view ledger_time_index = "by_time";

// `instance` must already be a quoted literal (connection::quote).
std::string ledger_insert(std::string_view quoted_instance, std::uint64_t run_id,
                          std::uint64_t batch_seq, std::size_t rows);

// The ledger's retention (db::prune_ledger) reads the keys of the rows to delete
// without locking anything, then deletes exactly those through the primary key
// (ledger_delete): a DELETE ... ORDER BY committed_at LIMIT n also locks the row past
// its range's end, a current row a flush may hold.
// This process's own rows (its instance and current run) older than `max_age_seconds`,
// before `keep_from_seq` (from there on, batches whose outcome may still be checked):
// (instance_id, run_id, batch_seq) of up to `limit` of the oldest. Only the run that
// wrote a row knows when it no longer needs it: the rows of an earlier run of this
// instance (whose WAL a restart replays) or of another process that shares its
// instance_id are every other run's (ledger_stale_select).
std::string ledger_prune_select(const dialect& d, std::string_view quoted_instance,
                                std::uint64_t run_id, std::uint64_t keep_from_seq,
                                std::uint64_t max_age_seconds, std::size_t limit);

// The rows of every run but this process's own (`quoted_instance`, `run_id`) older than
// `max_age_seconds`: (instance_id, run_id, batch_seq) of up to `limit` of the oldest,
// through `by_time`.
std::string ledger_stale_select(const dialect& d, std::string_view quoted_instance,
                                std::uint64_t run_id, std::uint64_t max_age_seconds,
                                std::size_t limit);
// Deletes exactly these rows of one instance's run (through the primary key, forced: it
// locks no other row) while they are still older than `max_age_seconds`. `seqs` must
// not be empty.
std::string ledger_delete(const dialect& d, std::string_view quoted_instance, std::uint64_t run_id,
                          std::span<const std::uint64_t> seqs, std::uint64_t max_age_seconds);

std::string create_dirty_table(const dialect& d);

// The adoptions table (adoptions_table above). `last_id`: the largest owning id taken
// (NULL: none yet); `rows_taken` / `total_taken`: owning rows and their counts taken;
// `mode`: 'history' (--adopt), 'no_history' (--adopt --no-history) or 'zeros' (the
// roller found the column holding only zeros: nothing to adopt).
std::string create_adoptions_table(const dialect& d);

// Key times (`created_ms`) are unix milliseconds by the database's clock, a BIGINT:
// every instance places an arrival on that one clock (the database's now less the
// request's age, measured on the clock of the instance it reached), so the window's
// edge does not move with the skew between instances' clocks, and no time in the range
// of a 64-bit clock is refused (a TIMESTAMP ends in 2038; FROM_UNIXTIME past it is NULL).
std::string create_idempotency_keys_table(const dialect& d);
// Converts a keys table of the layout before (`created` TIMESTAMP(3)) in place, keeping
// each key's time: the statements to run in order, given whether `created_ms` is there
// already (an upgrade cut short) and whether the old `by_age` index is.
std::vector<std::string> idempotency_keys_upgrade(bool has_created_ms, bool has_by_age);
// Claims the key of each of `requests` (`quoted_keys[i]` is requests[i].key quoted) for
// batch (instance, run_id, seq): a new key gets a row naming the batch; a key whose row
// records a first arrival more than `window` before this request's arrival is taken
// over; any other row stays as it is (INSERT IGNORE, but waiting on an uncommitted one).
// A request's arrival: the database's now less its age, `local_now_ms` less its
// received_ms (both this instance's clock; a negative age counts as 0).
std::string idempotency_keys_claim(const dialect& d,
                                   std::span<const idempotency::keyed_request> requests,
                                   std::span<const std::string> quoted_keys,
                                   std::string_view quoted_instance, std::uint64_t run_id,
                                   std::uint64_t batch_seq, std::chrono::milliseconds window,
                                   std::int64_t local_now_ms);
// The rows of `quoted_keys`, read with a shared lock (the latest committed values):
// idem_key, body_hash, instance_id, run_id, batch_seq.
std::string idempotency_keys_select_locked(const dialect& d,
                                           std::span<const std::string> quoted_keys);
// The body_hash and accepted of key `quoted_key` when its row records a first arrival
// no more than `window` before an arrival `age_ms` ago: the rows a claim by that request
// would leave as they are (see idempotency_keys_claim). A plain read: the latest
// committed row under READ COMMITTED, no lock taken or awaited.
std::string idempotency_keys_find(const dialect& d, std::string_view quoted_key,
                                  std::int64_t age_ms, std::chrono::milliseconds window);
// The keys table's prune (db::prune_keys): the keys of up to `limit` of the
// oldest rows first received more than `age` ago, through `by_age`, locking nothing ...
std::string idempotency_keys_prune_select(const dialect& d, std::chrono::milliseconds age,
                                          std::size_t limit);
// ... then exactly those, through the primary key, while still that old (not taken
// over meanwhile): a DELETE ... ORDER BY created_ms LIMIT n may lock more than it
// deletes (the row past its range's end, or, on another plan, current keys).
std::string idempotency_keys_delete(const dialect& d, std::span<const std::string> quoted_keys,
                                    std::chrono::milliseconds age);

// Marks each row's counter dirty for this instance with generation `gen` (unique per
// batch), replacing the generation of a mark that is already there. A roller deletes a
// mark only with the generation it read, so a mark deleted and marked again by a later
// batch is never taken for the old one.
std::string dirty_upsert(const dialect& d, std::string_view quoted_instance,
                         std::span<const counter_row> rows, std::uint64_t gen);

// Where a rollup run stands: marks of one record type are read in (record_id,
// instance_id) order, each at most once per run, and only up to the largest record_id
// marked when the run started, so a run ends even while new marks keep arriving.
struct dirty_cursor {
  std::uint64_t max_record_id = 0;
  bool started = false;  // false: nothing read yet
  std::uint64_t last_record_id = 0;
  std::string last_quoted_instance;  // a quoted literal
};

// Up to `limit` dirty marks of one record type after `cursor`, in (record_id,
// instance_id) order.
std::string dirty_select(std::uint32_t record_type, std::size_t limit, const dirty_cursor& cursor);

// The largest record_id marked dirty for this record type (NULL when none).
std::string dirty_max_record_id(std::uint32_t record_type);

struct dirty_mark {
  std::uint64_t record_id = 0;
  std::string quoted_instance;  // a quoted literal
  std::uint64_t gen = 0;
};

// Deletes exactly these marks; a mark whose gen moved on (flushed again since it was
// read) stays for the next rollup.
std::string dirty_delete(std::uint32_t record_type, std::span<const dirty_mark> marks);

// The ids among `ids` that have an owning row, locked (FOR UPDATE) in id order.
std::string owner_ids_select(std::string_view owner_table, std::string_view id_column,
                             std::span<const std::uint64_t> ids);

std::string select_count(std::string_view table, std::uint32_t record_type,
                         std::uint64_t record_id);

// Many counters of one record type in one statement (GET /v1/counters/{t}?ids=...):
// (record_id, SUM(count)) for those of `record_ids` that have slot rows, through the
// primary key. `record_ids` not empty.
std::string select_counts(std::string_view table, std::uint32_t record_type,
                          std::span<const std::uint64_t> record_ids);

// A reset of one counter (README: HTTP API, Reset), in its transaction after its ledger
// row: first this locking read of its slot rows, (slot, count) ...
std::string reset_rows_select_locked(std::string_view table, std::uint32_t record_type,
                                     std::uint64_t record_id);
// ... then these statements, in the writers' lock order (repository.hpp, "Lock
// order"): delete exactly the slot rows read (`slots`; a row another instance inserts
// meanwhile lands after the reset); delete the rows of those slots, and of no other, in
// the bucket tables of `bucket_grans` (the granularities it keeps, README: Counts per
// bucket), so that the buckets deleted are exactly those whose counts the slot rows
// held and every counter's buckets still add up to its total; and, when the counter is
// rolled up (`dirty_gen` set), mark it dirty so that the next rollup sets its target to
// 0 with no slot row left. Every table a reset clears is listed here.
std::vector<std::string> reset_statements(const dialect& d, std::string_view table,
                                          std::uint32_t record_type, std::uint64_t record_id,
                                          std::span<const std::int64_t> slots,
                                          std::string_view quoted_instance,
                                          std::optional<std::uint64_t> dirty_gen,
                                          std::span<const store::granularity> bucket_grans = {});
// Counts per bucket (README: Schema). One slotted table per granularity, named
// `<table>_hour` and `<table>_day`, keyed (record_type, record_id, bucket, slot).
// `bucket` is the UTC start of the hour (DATETIME) or of the day (DATE): readable as it
// is in SQL whatever the session's time_zone (the daemon writes and reads it as UTC
// text, never through FROM_UNIXTIME or UNIX_TIMESTAMP, which convert by time_zone),
// 5 and 3 bytes in the key instead of 8 for a BIGINT of unix seconds.
std::string bucket_table(std::string_view table, store::granularity g);
// The bucket's start as an SQL literal: '2026-11-23 06:00:00' (hour), '2026-11-23' (day).
std::string bucket_literal(store::granularity g, std::int64_t start);
std::string create_bucket_table(const dialect& d, std::string_view table, store::granularity g);
// One multi-row upsert into the granularity's table (rows of that granularity only).
std::string bucket_upsert_statement(const dialect& d, std::string_view table, store::granularity g,
                                    std::span<const store::bucket_row> rows);
// (bucket start in unix seconds, SUM(count)) of one counter's buckets in [from, to]
// (unix seconds), in bucket order.
std::string bucket_series_select(const dialect& d, std::string_view table, store::granularity g,
                                 std::uint32_t record_type, std::uint64_t record_id,
                                 std::int64_t from, std::int64_t to);
// Retention (db::prune_buckets): the (bucket start, record_id) of up to `limit` rows of
// one record type whose bucket starts before `before` (unix seconds), oldest first,
// read through the (record_type, bucket) index without locking anything.
std::string bucket_prune_select(const dialect& d, std::string_view table, store::granularity g,
                                std::uint32_t record_type, std::int64_t before, std::size_t limit);
// Deletes every slot of `record_ids` in one bucket of one record type, through the
// primary key: it reads and locks those rows only. (`DELETE ... WHERE bucket < X ORDER
// BY bucket LIMIT n` does not: once the old rows are a few percent of the type's,
// MariaDB takes the primary key's record_type prefix and locks every row of the type,
// current buckets too.) `record_ids` must not be empty.
std::string bucket_prune_delete(std::string_view table, store::granularity g,
                                std::uint32_t record_type, std::int64_t bucket,
                                std::span<const std::uint64_t> record_ids);

}  // namespace slotted::db
