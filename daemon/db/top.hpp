#pragma once
// Top-N (README: HTTP API, GET /v1/top/{record_type}): the totals tables that answer it
// without a scan of the counters table, kept up to date in the transactions that change
// slot and bucket rows (repository.hpp, "Lock order", 5), and the reads. Only for the
// counters declared with `top: true` (store::top_spec, counters[].top): with none, no
// totals table is made, checked or written, and a transaction pays nothing for them.
//
//   `<table>_totals`        (record_type, record_id) -> SUM(count) of its slot rows,
//                           index (record_type, count DESC, record_id): a top-N is an
//                           index range read of N rows.
//   `<table>_hour_totals`,  (record_type, record_id, bucket) -> SUM(count) of its bucket
//   `<table>_day_totals`    rows, index (record_type, bucket, count DESC, record_id).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "db/connection.hpp"
#include "db/sql.hpp"
#include "model/batch.hpp"
#include "model/counter_key.hpp"
#include "model/top_limits.hpp"
#include "model/top_spec.hpp"

namespace slotted::db {

std::string totals_table(std::string_view table);
std::string bucket_totals_table(std::string_view table, store::granularity g);

// The name --migrate builds the totals table `target` under before renaming it into
// place: `<x>_totals` -> `<x>_tfill`, never longer than `target` (a name of 64
// characters at most stays one). Pure.
std::string totals_scratch_table(std::string_view target);

// CREATE TABLE IF NOT EXISTS of each, pure.
std::string create_totals_table(const dialect& d, std::string_view table);
std::string create_bucket_totals_table(const dialect& d, std::string_view table,
                                       store::granularity g);

// Creates the totals tables `top` needs (--migrate; none when `top` is empty); a totals
// table created now is filled with the counters `top` keeps from the counters (or
// bucket) table before it is renamed into place, so a database migrated with counts in
// it answers top-N at once; an existing one is filled again for the record types not
// recorded as filled into it (refill_totals). Idempotent.
void migrate_totals(connection& conn, const std::string& table, const store::top_spec& top);

// Which record types each totals table was filled for (db/top_filled.cpp): a row
// (totals_table, record_type) once --migrate has filled `totals_table` with that type's
// counts (at its creation, or later when `top` was turned on for a counter that had
// counts). Made by --migrate with the first totals table; read at every schema check.
inline constexpr std::string_view totals_filled_table = "slotted_counterd_totals_filled";
std::string create_totals_filled_table(const dialect& d);

// The record types of `top` not recorded as filled into `totals` (all of them when the
// table of records does not exist yet). Throws db_error.
std::vector<std::uint32_t> unfilled_record_types(connection& conn, const std::string& totals,
                                                 const store::top_spec& top);
// Records `record_types` as filled into `totals` (INSERT IGNORE).
void record_filled(connection& conn, const std::string& totals,
                   std::span<const std::uint32_t> record_types);
// In one transaction: the rows of `record_types` in `totals` replaced by the sums of
// their rows of `source` (the counters table, or the bucket table when `bucketed`),
// read under shared locks, and the types recorded as filled.
void refill_totals(connection& conn, const std::string& totals, const std::string& source,
                   bool bucketed, std::span<const std::uint32_t> record_types);
// Throws a fatal db_error naming the record type, the totals table and --migrate when a
// totals table `top` needs was not filled for one of its types: a counter whose `top`
// was turned on after it had counts would otherwise rank by what it counted since (and
// a reset would drive its totals negative). Nothing is checked when `top` is empty.
void verify_totals_filled(connection& conn, const std::string& table, const store::top_spec& top);

// The totals tables `top` needs that do not exist.
std::vector<std::string> missing_totals_tables(connection& conn, const std::string& table,
                                               const store::top_spec& top);

// Throws a fatal db_error naming the first of them and --migrate when one is missing (a
// version before top-N, upgraded without --migrate): at start (app verify_database) and
// at the flusher's schema check, as for a missing bucket table. The totals are written
// in every batch's transaction (for the counters `top` keeps); a batch committed without
// them would leave top-N short of it for good, so nothing is flushed until --migrate has
// made (and filled) them; and when one was not filled for a record type of `top`
// (verify_totals_filled). Nothing is checked when `top` is empty.
void verify_totals_tables(connection& conn, const std::string& table, const store::top_spec& top);

// The upserts adding a batch's deltas to the totals of the counters `top` keeps (the
// others' rows are left out): `<table>_totals` from `rows` (summed per counter, sorted by
// counter), then each granularity's from `buckets` (summed per counter and bucket,
// sorted), each statement at most `max_bytes` long (the connection's
// max_statement_bytes()). Pure; empty when there is nothing to add, and always when
// `top` is empty.
std::vector<std::string> totals_upserts(const dialect& d, std::string_view table,
                                        std::span<const counter_row> rows,
                                        std::span<const store::bucket_row> buckets,
                                        const store::top_spec& top, std::size_t max_bytes);

// A reset (db/write_path.hpp apply) of a counter that keeps totals, in its
// transaction: the bucket rows of the slots `slots` of `key` (bucket start in unix
// seconds, count), locked; then reset_totals_statements, in the lock order's 5:
// `<table>_totals` lowered by `persisted` and deleted when left at 0 (its row locked even
// when `persisted` is 0), then for each of `grans` (hour, day) the bucket totals lowered
// by `lost_buckets` (deltas of the deleted bucket rows, negative) and those left at 0
// deleted. Pure but for the locking read.
std::string reset_bucket_sums_select_locked(const dialect& d, std::string_view table,
                                            store::granularity g, const store::counter_key& key,
                                            std::span<const std::int64_t> slots);
std::vector<std::string> reset_totals_statements(std::string_view table,
                                                 const store::counter_key& key, __int128 persisted,
                                                 std::span<const store::bucket_row> lost_buckets,
                                                 std::span<const store::granularity> grans,
                                                 std::size_t max_bytes);

// The retention's delete of the bucket totals of `ids` in bucket `bucket` (after their
// bucket rows, in their transaction, see repository.hpp prune_buckets).
std::string bucket_totals_prune_delete(std::string_view table, store::granularity g,
                                       std::uint32_t record_type, std::int64_t bucket,
                                       std::span<const std::uint64_t> ids);

// The `limit` largest totals of `record_type`: (record_id, count), count descending,
// ties by smaller record_id. One index range read (two: positive, then negative
// counts), each cut after 5 s (max_statement_time). Throws db_error.
std::vector<std::pair<std::uint64_t, __int128>> read_top(connection& conn, const std::string& table,
                                                         std::uint32_t record_type,
                                                         std::size_t limit);

// max_top_rows, top_page and top_first_round_rows: model/top_limits.hpp (the router
// refuses a top-N past them before it reads).

// What it may read to sum the record ids its rounds met over the range (primary-key
// reads, each id at most one row per bucket): many ids whose counts change from bucket
// to bucket, over a long range, would sum far more rows than the rounds read.
constexpr std::size_t max_top_sum_rows = 2'000'000;

// The wall-clock bound on one bucketed top-N's rounds (each statement is also cut at
// db::read_time_limit): past it the read stops with a db_error of
// error_class::statement_timeout, answered as read_timed_out.
constexpr std::chrono::seconds max_top_time{10};

// Runs `read` in one consistent read-only snapshot (REPEATABLE READ, READ ONLY);
// whatever `read` (or the SET TRANSACTION / START before it) throws, the connection is
// left with no transaction open (a ROLLBACK, unless it was lost), and it is rethrown.
void in_read_snapshot(connection& conn, const std::function<void()>& read);

// A bucketed top-N stopped at `max_rows` (see max_top_rows); nothing else changed.
struct top_too_costly : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The same over the sums of the `g` buckets starting in [from, to] (bucket-aligned), by
// an exact threshold-algorithm merge of the buckets' count-ordered indexes, in one
// consistent snapshot (see top.cpp for its cost). Each statement is cut by the server
// after 5 s (max_statement_time), the whole after max_top_time. Throws db_error, or
// top_too_costly past `max_rows` or `max_sum_rows`.
std::vector<std::pair<std::uint64_t, __int128>> read_top_buckets(
    connection& conn, const std::string& table, store::granularity g, std::uint32_t record_type,
    std::int64_t from, std::int64_t to, std::size_t limit, std::size_t max_rows = max_top_rows,
    std::size_t max_sum_rows = max_top_sum_rows);

}  // namespace slotted::db
