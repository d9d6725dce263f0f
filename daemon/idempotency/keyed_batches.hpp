#pragma once
// Keyed flush batches (README: HTTP API, Idempotency-Key): how keyed requests become
// batches, exactly once per key across every instance sharing the database when they
// commit (db/keys.hpp says how).
//
// A keyed batch is a flush_batch whose `keyed` holds its requests; its rows are their
// increments summed per counter (one slot for the batch, like any batch), so the
// flusher's queue, the WAL and GET /v1/counters treat it like any other.

#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

#include "model/batch.hpp"
#include "model/buckets.hpp"
#include "model/keyed_request.hpp"

namespace slotted::idempotency {

// Batches of `requests` holding at most `max_items` increments and at most `max_items`
// keys each (at least one request: a request without increments is a key all the
// same), and keys whose claim statement (see claim_bytes) stays within
// `max_statement_bytes`; keys sorted (one lock order for every instance), one random
// slot per batch, seqs from `first_seq` on. A key twice among `requests` received within
// `window` of the one kept (a retry this instance had forgotten) is dropped; `dropped`
// counts those. One received more than `window` after the kept one takes the key over
// (as db::claim_keys judges it): it goes into a later batch, in arrival order, so
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

// `left` and `right` (the halves split_batch() made of `whole`, with their ids) get
// half of whole's requests each, and their rows. Pure.
void split_requests(const store::flush_batch& whole, store::flush_batch& left,
                    store::flush_batch& right,
                    const store::bucket_spec& buckets = store::no_buckets());

}  // namespace slotted::idempotency
