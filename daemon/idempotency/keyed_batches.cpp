#include "idempotency/keyed_batches.hpp"

#include <algorithm>
#include <iterator>

#include "db/keys.hpp"

namespace slotted::idempotency {

std::size_t claim_bytes(const keyed_request& r) {
  // ('key','32 hex digits',accepted,'instance' (64 characters, each escaped at worst to
  // two),run,seq,<the database's now in ms> - age) (about 340 bytes besides the key),
  // and the key again in the locking read.
  return 2 * r.key.size() + 480;
}

std::vector<store::flush_batch> form_keyed_batches(
    std::vector<keyed_request> requests, std::size_t max_items, unsigned slots,
    std::uint64_t run_id, std::uint64_t first_seq, std::mt19937_64& rng,
    std::chrono::steady_clock::time_point oldest, std::size_t& dropped,
    const store::bucket_spec& buckets, std::size_t max_statement_bytes,
    std::chrono::milliseconds window) {
  dropped = 0;
  // Stable: of one key twice, the first accepted stays.
  std::stable_sort(requests.begin(), requests.end(),
                   [](const keyed_request& a, const keyed_request& b) { return a.key < b.key; });
  std::vector<store::flush_batch> batches;
  std::size_t items = 0, bytes = 0;
  std::string last_key;               // the previous request was moved from
  std::int64_t last_received_ms = 0;  // of the request of last_key kept
  // Of one key, requests received more than a window after the one kept: each takes
  // the key over, so they are formed into later batches (committed after this take's).
  std::vector<keyed_request> takeovers;
  for (auto& r : requests) {
    if (!batches.empty() && r.key == last_key) {
      const bool within = r.received_ms <= 0 || last_received_ms <= 0 ||
                          r.received_ms - last_received_ms <= window.count();
      if (within) {
        ++dropped;
      } else {
        takeovers.push_back(std::move(r));
      }
      continue;
    }
    last_key = r.key;
    last_received_ms = r.received_ms;
    // Bounded by items, by keys and by the bytes of its claim: a batch of requests
    // without increments (or with few) must not grow past what one statement carries.
    if (batches.empty() || items + r.increments.size() > max_items ||
        store::keyed_of(batches.back())->requests.size() >= max_items ||
        bytes + claim_bytes(r) > max_statement_bytes) {
      store::flush_batch b;
      b.content = store::keyed_content{};
      b.run_id = run_id;
      b.seq = first_seq + batches.size();
      b.oldest_arrival = oldest;
      batches.push_back(std::move(b));
      items = 0;
      bytes = claim_fixed_bytes;
    }
    items += r.increments.size();
    bytes += claim_bytes(r);
    store::keyed_of(batches.back())->requests.push_back(std::move(r));
  }
  for (auto& b : batches) {
    const auto slot = static_cast<std::uint16_t>(rng() % slots);
    const auto& requests = store::keyed_of(b)->requests;
    b.rows = db::rows_of(requests, slot);
    b.bucket_rows = db::bucket_rows_of(requests, slot, buckets, b.rows);
  }
  if (!takeovers.empty()) {
    std::size_t later_dropped = 0;
    auto later = form_keyed_batches(std::move(takeovers), max_items, slots, run_id,
                                    first_seq + batches.size(), rng, oldest, later_dropped, buckets,
                                    max_statement_bytes, window);
    dropped += later_dropped;
    std::move(later.begin(), later.end(), std::back_inserter(batches));
  }
  return batches;
}

void split_requests(const store::flush_batch& whole, store::flush_batch& left,
                    store::flush_batch& right, const store::bucket_spec& buckets) {
  const auto& requests = std::get<store::keyed_content>(whole.content).requests;
  const auto middle = requests.begin() + static_cast<std::ptrdiff_t>(requests.size() / 2);
  const std::uint16_t slot = whole.rows.empty() ? 0 : whole.rows.front().slot;
  const auto half = [&](store::flush_batch& part, auto from, auto to) {
    part.content = store::keyed_content{{from, to}};
    const auto& mine = store::keyed_of(part)->requests;
    part.rows = db::rows_of(mine, slot);
    part.bucket_rows = db::bucket_rows_of(mine, slot, buckets, part.rows);
  };
  half(left, requests.begin(), middle);
  half(right, middle, requests.end());
}

}  // namespace slotted::idempotency
