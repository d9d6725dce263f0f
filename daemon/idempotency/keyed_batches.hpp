#pragma once
// Keyed flush batches (README: HTTP API, Idempotency-Key): how keyed requests become
// batches and how one commits, exactly once per key across every instance sharing the
// database.
//
// A keyed batch is a flush_batch whose `keyed` holds its requests; its rows are their
// increments summed per counter (one slot for the batch, like any batch), so the
// flusher's queue, the WAL and GET /v1/counters treat it like any other. Committing
// one, in one transaction:
//   INSERT INTO ledger ...                       -- a retry of a committed batch stops here
//   INSERT INTO keys (key, hash, batch id) VALUES ...   (keys sorted)
//     ON DUPLICATE KEY UPDATE: only a row older than idempotency.window is taken over
//   SELECT key, hash, batch id FROM keys WHERE key IN (...) LOCK IN SHARE MODE
//   upsert the rows of the requests whose key row carries this batch's id (slot rows,
//     then bucket rows, then dirty marks: db/repository.hpp, "Lock order"); COMMIT
// A key another transaction committed first carries that batch's id: the request is a
// duplicate (or, with another hash, a conflict) and none of it is applied. A key
// another transaction inserted but has not committed makes the INSERT wait on its
// row lock: when it commits, this one sees the duplicate; when it rolls back, this one
// inserts. So two instances racing with one key apply it once.
//
// Failures throw db_error; the transaction is then rolled back (when the connection
// allows).

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "db/connection.hpp"
#include "db/repository.hpp"
#include "model/batch.hpp"
#include "model/keyed_request.hpp"
#include "model/top_spec.hpp"

namespace slotted::idempotency {

// Batches of `requests` holding at most `max_items` increments and at most `max_items`
// keys each (at least one request: a request without increments is a key all the
// same), and keys whose claim statement (see claim_bytes) stays within
// `max_statement_bytes`; keys sorted (one lock order for every instance), one random
// slot per batch, seqs from `first_seq` on. A key twice among `requests` received within
// `window` of the one kept (a retry this instance had forgotten) is dropped; `dropped`
// counts those. One received more than `window` after the kept one takes the key over
// (as commit_keyed_batch judges it): it goes into a later batch, in arrival order, so
// that the earlier one's key is committed first. Pure.
std::vector<store::flush_batch> form_keyed_batches(
    std::vector<keyed_request> requests, std::size_t max_items, unsigned slots,
    std::uint64_t run_id, std::uint64_t first_seq, std::mt19937_64& rng,
    std::chrono::steady_clock::time_point oldest, std::size_t& dropped,
    const store::bucket_spec& buckets = store::no_buckets(),
    std::size_t max_statement_bytes = std::size_t{1} << 20,
    std::chrono::milliseconds window = std::chrono::milliseconds::max());

// An upper bound of the bytes a request's row adds to the keys claim (see
// db::idempotency_keys_claim), for an instance id of up to 64 characters; and of the
// claim's fixed part.
std::size_t claim_bytes(const keyed_request& r);
inline constexpr std::size_t claim_fixed_bytes = 1024;

// The rows of `requests` under `slot`: their deltas summed per counter, sorted, zero
// sums left out. Pure.
std::vector<db::counter_row> rows_of(std::span<const keyed_request> requests, std::uint16_t slot);

// The bucket rows of `requests` under `slot` (their increments' `at`, for counters that
// keep buckets under `buckets`), summed per bucket, sorted, zero sums left out; and
// rows gets a row of delta 0 for a counter whose buckets have no row there (see
// store::flush_batch). `rows` must be sorted by counter (as rows_of makes it) and stays
// so. Pure; O(n log n) in the increments.
std::vector<store::bucket_row> bucket_rows_of(std::span<const keyed_request> requests,
                                              std::uint16_t slot, const store::bucket_spec& buckets,
                                              std::vector<db::counter_row>& rows);

// `left` and `right` (the halves split_batch() made of `whole`, with their ids) get
// half of whole's requests each, and their rows. Pure.
void split_requests(const store::flush_batch& whole, store::flush_batch& left,
                    store::flush_batch& right,
                    const store::bucket_spec& buckets = store::no_buckets());

struct keyed_outcome {
  db::commit_outcome outcome = db::commit_outcome::applied;
  std::size_t rows = 0;        // counter rows upserted
  std::size_t duplicates = 0;  // requests whose key was committed before, same body
  std::size_t conflicts = 0;   // ... with another body
};

// Commits keyed batch `b` as described above; keys committed longer than `window` ago
// count as not committed. Each statement is cut to stay within the connection's
// max_statement_bytes() (the claim, the locking read and the upserts in as many
// statements as that takes, in key and row order, in the one transaction). `dirty`
// gives the rows whose counters are rolled up among those it is passed.
// `local_now_ms`: this instance's clock now (0: now_ms()), against which each request's
// received_ms gives its age; the keys table places its arrival on the database's clock
// by that age (see db::idempotency_keys_claim). `top`: the counters whose applied rows
// are added to the totals of top-N in the same transaction (db/top.hpp); none by default.
keyed_outcome commit_keyed_batch(
    db::connection& conn, const std::string& table, const db::batch_identity& id,
    const store::flush_batch& b, std::chrono::milliseconds window,
    const std::function<std::span<const db::counter_row>(std::span<const db::counter_row>)>& dirty,
    const store::bucket_spec& buckets = store::no_buckets(), std::int64_t local_now_ms = 0,
    const store::top_spec& top = store::no_top());

// A key's row in the keys table, as committed.
struct committed_key {
  std::string body_hash;  // hex(), 32 lowercase hex digits
  std::uint32_t accepted = 0;
};

// The committed row of `key` if the request that arrived at `received_ms` (unix
// milliseconds, this instance's clock, which reads `local_now_ms` now; 0: now_ms())
// would find the key still inside `window` (its first arrival no more than `window`
// before), as commit_keyed_batch() judges it; nullopt otherwise, and for a key another
// transaction has inserted but not yet committed. Answers retries this instance cannot
// admit (see http::backend::find_keyed). Throws db_error.
std::optional<committed_key> find_committed_key(db::connection& conn, const std::string& key,
                                                std::int64_t received_ms,
                                                std::chrono::milliseconds window,
                                                std::int64_t local_now_ms = 0);

// Deletes keys first received longer than two windows ago (see keyed_batches.cpp), oldest first
// (every instance in the same order), in chunks of `chunk` rows, at most `max_chunks` of them (each
// chunk's keys read without a lock, then deleted through the primary key in a statement that
// commits on its own: it locks only the keys it deletes). Returns rows deleted. Throws db_error.
std::uint64_t prune_keys(db::connection& conn, std::chrono::milliseconds window, std::size_t chunk,
                         int max_chunks);

}  // namespace slotted::idempotency
