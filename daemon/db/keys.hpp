#pragma once
// Idempotency keys in the database (README: HTTP API, Idempotency-Key): the claim of a
// keyed batch's keys inside its transaction, the rows its requests add up to, the read
// of a committed key and the prune.
//
// A keyed batch (store::flush_batch::keyed, keys sorted; idempotency/keyed_batches.hpp
// forms them) commits through db::apply (db/write_path.hpp), in one
// transaction:
//   INSERT INTO ledger ...                       -- a retry of a committed batch stops here
//   INSERT INTO keys (key, hash, batch id) VALUES ...   (keys sorted)
//     ON DUPLICATE KEY UPDATE: only a row older than idempotency.window is taken over
//   SELECT key, hash, batch id FROM keys WHERE key IN (...) LOCK IN SHARE MODE
//   upsert the rows of the requests whose key row carries this batch's id (slot rows,
//     then bucket rows, totals, dirty marks: db/repository.hpp, "Lock order"); COMMIT
// A key another transaction committed first carries that batch's id: the request is a
// duplicate (or, with another hash, a conflict) and none of it is applied. A key
// another transaction inserted but has not committed makes the INSERT wait on its
// row lock: when it commits, this one sees the duplicate; when it rolls back, this one
// inserts. So two instances racing with one key apply it once.

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "db/connection.hpp"
#include "db/repository.hpp"
#include "model/batch.hpp"
#include "model/keyed_request.hpp"

namespace slotted::db {

// The rows of `requests` under `slot`: their deltas summed per counter, sorted, zero
// sums left out. Pure.
std::vector<counter_row> rows_of(std::span<const idempotency::keyed_request> requests,
                                 std::uint16_t slot);

// The bucket rows of `requests` under `slot` (their increments' `at`, for counters that
// keep buckets under `buckets`), summed per bucket, sorted, zero sums left out; and
// rows gets a row of delta 0 for a counter whose buckets have no row there (see
// store::flush_batch). `rows` must be sorted by counter (as rows_of makes it) and stays
// so. Pure; O(n log n) in the increments.
std::vector<store::bucket_row> bucket_rows_of(std::span<const idempotency::keyed_request> requests,
                                              std::uint16_t slot, const store::bucket_spec& buckets,
                                              std::vector<counter_row>& rows);

// A keyed batch's keys claimed, inside its transaction (after its ledger row, the lock
// order's 2): the rows and bucket rows of the requests whose key this batch holds now,
// under `slot`; the others counted as duplicates (the key's row has their body's hash)
// or conflicts.
struct keys_claimed {
  std::size_t duplicates = 0;
  std::size_t conflicts = 0;
  std::vector<counter_row> rows;
  std::vector<store::bucket_row> buckets;
};
// Claims the key of each of `requests` for batch `id`. A key first received longer than
// `window` before its request is forgotten: this batch takes the row over. Judged by
// when each request arrived, not by when this batch commits: a retry accepted inside
// the window stays a retry however late its flush. Each request's age by this
// instance's clock (`local_now_ms` now; 0: idempotency::now_ms()), its arrival by the
// database's (one clock for every instance, whatever their skew). Each statement cut to
// the connection's max_statement_bytes(). Throws db_error.
keys_claimed claim_keys(connection& conn, const batch_identity& id,
                        std::span<const idempotency::keyed_request> requests, std::uint16_t slot,
                        const store::bucket_spec& buckets, std::chrono::milliseconds window,
                        std::int64_t local_now_ms);

// A key's row in the keys table, as committed.
struct committed_key {
  std::string body_hash;  // idempotency::hex(), 32 lowercase hex digits
  std::uint32_t accepted = 0;
};

// The committed row of `key` if the request that arrived at `received_ms` (unix
// milliseconds, this instance's clock, which reads `local_now_ms` now; 0: now_ms())
// would find the key still inside `window` (its first arrival no more than `window`
// before), as claim_keys() judges it; nullopt otherwise, and for a key another
// transaction has inserted but not yet committed. Answers retries this instance cannot
// admit (see http::backend::find_keyed). Throws db_error.
std::optional<committed_key> find_committed_key(connection& conn, const std::string& key,
                                                std::int64_t received_ms,
                                                std::chrono::milliseconds window,
                                                std::int64_t local_now_ms = 0);

// Deletes keys first received longer than two windows ago (see keys.cpp), oldest first
// (every instance in the same order), in chunks of `chunk` rows, at most `max_chunks` of them (each
// chunk's keys read without a lock, then deleted through the primary key in a statement that
// commits on its own: it locks only the keys it deletes). Returns rows deleted. Throws db_error.
std::uint64_t prune_keys(connection& conn, std::chrono::milliseconds window, std::size_t chunk,
                         int max_chunks);

}  // namespace slotted::db
