// Forming batches from pending deltas, and splitting them (pure functions, see batch_forming.hpp).
#include "flush/batch_forming.hpp"

#include <algorithm>
#include <tuple>

#include "db/errors.hpp"
#include "flush/internal.hpp"
#include "util/log.hpp"

namespace slotted::flush {

std::vector<flush_batch> form_batches(std::vector<store::pending_delta> deltas,
                                      std::size_t max_rows, unsigned slots, std::uint64_t run_id,
                                      std::uint64_t first_seq, std::mt19937_64& rng,
                                      clock::time_point oldest_arrival) {
  // Totals and bucket counts arrive mixed (see store::pending_delta); buckets sort after
  // their counter's total. A total of 0 stays when the counter has bucket counts (a
  // +1 in one hour and a -1 in another), so that its buckets have a row to travel with.
  std::sort(deltas.begin(), deltas.end(), [](const auto& a, const auto& b) {
    return std::tie(a.key, a.gran, a.bucket) < std::tie(b.key, b.gran, b.bucket);
  });
  // One bucket may come in parts (a day from each of its hours in the store): summed.
  // The parts' sum stays within what the store's clamp allows (README, Counts per
  // bucket); a total comes once.
  std::size_t kept = 0;
  for (std::size_t i = 0; i < deltas.size(); ++i) {
    if (kept > 0 && deltas[i].gran != store::granularity::none &&
        deltas[kept - 1].key == deltas[i].key && deltas[kept - 1].gran == deltas[i].gran &&
        deltas[kept - 1].bucket == deltas[i].bucket) {
      if (__builtin_add_overflow(deltas[kept - 1].delta, deltas[i].delta, &deltas[kept - 1].delta))
        deltas[kept - 1].delta = deltas[i].delta < 0 ? INT64_MIN : INT64_MAX;
      continue;
    }
    deltas[kept++] = deltas[i];
  }
  deltas.resize(kept);
  std::erase_if(deltas, [](const store::pending_delta& d) { return d.delta == 0; });
  std::vector<flush_batch> batches;
  std::size_t in_batch = max_rows;  // rows of the last batch: a new one first
  std::uint16_t slot = 0;
  for (std::size_t i = 0; i < deltas.size(); ++i) {
    const auto& d = deltas[i];
    const bool total = d.gran == store::granularity::none;
    const bool new_counter = i == 0 || !(deltas[i - 1].key == d.key);
    if (new_counter) {
      if (in_batch >= max_rows) {
        flush_batch b;
        b.run_id = run_id;
        b.seq = first_seq + batches.size();
        b.oldest_arrival = oldest_arrival;
        // One slot for the whole batch, drawn afresh per batch: two writers' batches then
        // share a row only when they drew the same slot (1 in `slots`), instead of almost
        // surely somewhere when each row draws its own. Fewer lock waits on one server,
        // fewer certification failures on Galera (bench/RESULTS.md, Galera).
        slot = static_cast<std::uint16_t>(rng() % slots);
        batches.push_back(std::move(b));
        in_batch = 0;
      }
      batches.back().rows.push_back(
          {d.key.record_type, d.key.record_id, slot, total ? d.delta : 0});
      ++in_batch;
    }
    if (!total) {
      batches.back().bucket_rows.push_back(
          {d.key.record_type, d.key.record_id, d.gran, d.bucket, slot, d.delta});
    }
  }
  return batches;
}

namespace {
// A batch's seq keeps the formed sequence number in its low 44 bits and a heap index of
// the split (1 for the whole batch, 2h and 2h+1 for the halves of h) above them.
constexpr std::uint64_t split_low_bits = 44;
std::uint64_t formed_seq(std::uint64_t seq) {
  return seq & ((std::uint64_t{1} << split_low_bits) - 1);
}
std::uint64_t split_node(std::uint64_t seq) {
  return std::max<std::uint64_t>(1, seq >> split_low_bits);
}
}  // namespace

std::pair<flush_batch, flush_batch> split_batch(const flush_batch& b) {
  const std::uint64_t formed = formed_seq(b.seq);
  const std::uint64_t node = split_node(b.seq);
  flush_batch left = b, right = b;
  const auto middle = b.rows.begin() + static_cast<std::ptrdiff_t>(b.rows.size() / 2);
  left.rows.assign(b.rows.begin(), middle);
  right.rows.assign(middle, b.rows.end());
  // Each counter's bucket rows go with its row.
  left.bucket_rows.clear();
  right.bucket_rows.clear();
  for (const auto& r : b.bucket_rows) {
    const bool to_left =
        middle != b.rows.end() && store::counter_key{r.record_type, r.record_id} <
                                      store::counter_key{middle->record_type, middle->record_id};
    (to_left ? left : right).bucket_rows.push_back(r);
  }
  // A unique batch (no rows) by its entries.
  if (const auto* u = store::unique_of(b)) {
    const auto half = u->entries.begin() + static_cast<std::ptrdiff_t>(u->entries.size() / 2);
    store::unique_of(left)->entries.assign(u->entries.begin(), half);
    store::unique_of(right)->entries.assign(half, u->entries.end());
  }
  left.seq = ((node * 2) << split_low_bits) | formed;
  right.seq = ((node * 2 + 1) << split_low_bits) | formed;
  return {std::move(left), std::move(right)};
}

std::vector<flush_batch> uncommitted_parts(const flush_batch& b,
                                           const std::vector<std::uint64_t>& committed) {
  const std::uint64_t formed = formed_seq(b.seq);
  std::vector<std::uint64_t> nodes;  // split indices of committed parts of b
  for (const auto seq : committed) {
    if (formed_seq(seq) == formed) nodes.push_back(split_node(seq));
  }
  std::vector<flush_batch> out;
  const auto walk = [&](auto& self, const flush_batch& part) -> void {
    const std::uint64_t node = split_node(part.seq);
    // Nothing left to write (a unique batch holds entries instead of rows).
    const auto* u = store::unique_of(part);
    if ((part.rows.empty() && (u == nullptr || u->entries.empty())) ||
        std::find(nodes.begin(), nodes.end(), node) != nodes.end())
      return;
    // Nodes are at least 1, so halving m stops at node or below it.
    const bool below = std::any_of(nodes.begin(), nodes.end(), [&](std::uint64_t m) {
      while (m > node) m >>= 1;
      return m == node;
    });
    // Split indices are heap positions in 20 bits; deeper ones cannot come from a split.
    if (!below || node >= (std::uint64_t{1} << (63 - split_low_bits))) return out.push_back(part);
    auto [left, right] = split_batch(part);
    self(self, left);
    self(self, right);
  };
  walk(walk, b);
  return out;
}

}  // namespace slotted::flush
