#pragma once
// Top-N (README: HTTP API, GET /v1/top/{record_type}): the totals tables that answer it
// without a scan of the counters table, kept up to date in the transactions that change
// slot and bucket rows (repository.hpp, "Lock order", 5), and the reads.
//
//   `<table>_totals`        (record_type, record_id) -> SUM(count) of its slot rows,
//                           index (record_type, count DESC, record_id): a top-N is an
//                           index range read of N rows.
//   `<table>_hour_totals`,  (record_type, record_id, bucket) -> SUM(count) of its bucket
//   `<table>_day_totals`    rows, index (record_type, bucket, count DESC, record_id).

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "db/connection.hpp"
#include "db/sql.hpp"
#include "model/batch.hpp"
#include "model/counter_key.hpp"

namespace slotted::db {

std::string totals_table(std::string_view table);
std::string bucket_totals_table(std::string_view table, store::granularity g);

// CREATE TABLE IF NOT EXISTS of each, pure.
std::string create_totals_table(std::string_view table);
std::string create_bucket_totals_table(std::string_view table, store::granularity g);

// Creates the totals tables `buckets` uses (--migrate); a totals table created now is
// filled from the counters (or bucket) table in the same statement run, so a database
// migrated with counts in it answers top-N at once. Idempotent.
void migrate_totals(connection& conn, const std::string& table, const store::bucket_spec& buckets);

// The totals tables `buckets` uses that do not exist.
std::vector<std::string> missing_totals_tables(connection& conn, const std::string& table,
                                               const store::bucket_spec& buckets);

// Throws a fatal db_error naming the first of them and --migrate when one is missing (a
// version before top-N, upgraded without --migrate): at start (app verify_database) and
// at the flusher's schema check, as for a missing bucket table. The totals are written
// in every batch's transaction; a batch committed without them would leave top-N short
// of it for good, so nothing is flushed until --migrate has made (and filled) them.
void verify_totals_tables(connection& conn, const std::string& table,
                          const store::bucket_spec& buckets);

// The upserts adding a batch's deltas to the totals: one statement for `rows` (summed
// per counter; sorted by counter), one per granularity for `buckets` (summed per
// counter and bucket, sorted). Pure; empty when there is nothing to add.
std::vector<std::string> totals_upserts(std::string_view table, std::span<const counter_row> rows,
                                        std::span<const store::bucket_row> buckets);

// A reset (repository.cpp reset_counter), in its transaction: the bucket rows of the
// slots `slots` of `key` (bucket start in unix seconds, count), locked; the total
// lowered by `persisted`; the counter's total and bucket totals left at 0 deleted.
std::string reset_bucket_sums_select_locked(std::string_view table, store::granularity g,
                                            const store::counter_key& key,
                                            std::span<const std::int64_t> slots);
std::string totals_subtract(std::string_view table, const store::counter_key& key,
                            __int128 persisted);
std::vector<std::string> totals_zero_deletes(std::string_view table, const store::counter_key& key,
                                             std::span<const store::granularity> grans);

// The retention's delete of the bucket totals of `ids` in bucket `bucket` (after their
// bucket rows, see repository.hpp prune_buckets).
std::string bucket_totals_prune_delete(std::string_view table, store::granularity g,
                                       std::uint32_t record_type, std::int64_t bucket,
                                       std::span<const std::uint64_t> ids);

// The `limit` largest totals of `record_type`: (record_id, count), count descending,
// ties by smaller record_id. One index range read. Throws db_error.
std::vector<std::pair<std::uint64_t, __int128>> read_top(connection& conn, const std::string& table,
                                                         std::uint32_t record_type,
                                                         std::size_t limit);

// What one bucketed top-N may read (rows of the round statements plus record ids summed)
// before it stops: with counts tied across many record ids over a long range the merge
// would read on to every row of the range, holding a connection of the flusher's pool.
constexpr std::size_t max_top_rows = 200'000;

// A bucketed top-N stopped at `max_rows` (see max_top_rows); nothing else changed.
struct top_too_costly : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The same over the sums of the `g` buckets starting in [from, to] (bucket-aligned), by
// an exact threshold-algorithm merge of the buckets' count-ordered indexes, in one
// consistent snapshot (see top.cpp for its cost). Each statement is cut by the server
// after 5 s (max_statement_time). Throws db_error, or top_too_costly past `max_rows`.
std::vector<std::pair<std::uint64_t, __int128>> read_top_buckets(
    connection& conn, const std::string& table, store::granularity g, std::uint32_t record_type,
    std::int64_t from, std::int64_t to, std::size_t limit, std::size_t max_rows = max_top_rows);

}  // namespace slotted::db
