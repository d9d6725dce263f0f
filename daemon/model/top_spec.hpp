#pragma once
// Which record types keep the totals of top-N (counters[].top, docs/configuration.md):
// only their rows are added to the totals tables (db/top.hpp), only they answer
// GET /v1/top, and only the granularities their buckets use have a bucket totals table.
// With no counter declaring it, no totals table exists, is checked or written. Pure; a
// top_spec is immutable once built and shared by every thread.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/buckets.hpp"

namespace slotted::store {

class top_spec {
 public:
  top_spec() = default;
  // `record_types` keep top-N totals; `buckets` says which granularities each keeps.
  top_spec(std::vector<std::uint32_t> record_types, const bucket_spec& buckets)
      : types_(std::move(record_types)) {
    std::sort(types_.begin(), types_.end());
    types_.erase(std::unique(types_.begin(), types_.end()), types_.end());
    for (const auto t : types_) {
      if (const auto* c = buckets.find(t)) {
        for (const auto g : all_granularities) uses_[static_cast<int>(g)] |= c->keeps(g);
      }
    }
  }

  // No counter keeps totals: no totals table is needed.
  bool empty() const { return types_.empty(); }
  bool keeps(std::uint32_t record_type) const {
    return std::binary_search(types_.begin(), types_.end(), record_type);
  }
  // Whether a counter keeping totals keeps buckets of `g` (`<table>_<g>_totals` needed).
  bool uses(granularity g) const { return uses_[static_cast<int>(g)]; }
  // Sorted, each once.
  const std::vector<std::uint32_t>& record_types() const { return types_; }
  bool operator==(const top_spec&) const = default;

 private:
  std::vector<std::uint32_t> types_;
  bool uses_[3]{};
};

// The spec of a daemon where no counter keeps top-N totals.
inline const top_spec& no_top() {
  static const top_spec none;
  return none;
}

}  // namespace slotted::store
