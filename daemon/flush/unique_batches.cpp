// Unique batches (db/uniques.hpp): formed from the pending unique entries (committed by
// batch_writer.cpp, the table pruned by housekeeping.cpp).
#include <algorithm>
#include <chrono>

#include "db/uniques.hpp"
#include "flush/flusher.hpp"
#include "flush/internal.hpp"
#include "util/log.hpp"

namespace slotted::flush {

std::vector<flush_batch> flusher::form_unique_batches(std::size_t max_entries) {
  std::vector<flush_batch> batches;
  if (uniques_ == nullptr) return batches;
  std::vector<store::unique_entry> entries;
  uniques_->take_all(entries);
  if (entries.empty()) return batches;
  // The table's key order: every writer inserts its rows in it (the lock order's 2).
  std::sort(entries.begin(), entries.end());
  const auto now = clock::now();
  for (std::size_t first = 0; first < entries.size(); first += max_entries) {
    flush_batch b;
    b.run_id = run_id_;
    b.seq = next_seq_++;
    b.oldest_arrival = now;
    const auto last = entries.begin() +
                      static_cast<std::ptrdiff_t>(std::min(entries.size(), first + max_entries));
    b.content = store::unique_content{
        .entries = {std::make_move_iterator(entries.begin() + static_cast<std::ptrdiff_t>(first)),
                    std::make_move_iterator(last)},
        .slot = static_cast<std::uint16_t>(rng_() % settings_.slots)};
    batches.push_back(std::move(b));
  }
  return batches;
}

}  // namespace slotted::flush
