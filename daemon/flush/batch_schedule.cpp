#include "flush/batch_schedule.hpp"

#include <cstdint>

namespace slotted::flush {

batch_span span_of(const store::flush_batch& b, bool in_flight) {
  batch_span s;
  s.keyed = store::keyed_of(b) != nullptr;
  s.in_flight = in_flight;
  s.empty = b.rows.empty();
  if (store::unique_of(b) != nullptr) {
    // A unique batch's rows are known only as it commits (db/uniques.hpp): it spans every
    // key, and waits for (and holds back) every batch around it.
    s.keyed = true;
    s.empty = false;
    s.first = {0, 0};
    s.last = {UINT32_MAX, UINT64_MAX};
  } else if (!s.empty) {
    s.first = {b.rows.front().record_type, b.rows.front().record_id};
    s.last = {b.rows.back().record_type, b.rows.back().record_id};
  }
  return s;
}

bool conflict(const batch_span& a, const batch_span& b) {
  if (a.keyed && b.keyed) return true;
  if (a.empty || b.empty) return false;
  return a.first <= b.last && b.first <= a.last;
}

std::optional<std::size_t> next_startable(std::span<const batch_span> queue) {
  for (std::size_t i = 0; i < queue.size(); ++i) {
    if (queue[i].in_flight) continue;
    bool blocked = false;
    for (std::size_t j = 0; j < i && !blocked; ++j) blocked = conflict(queue[j], queue[i]);
    if (!blocked) return i;
  }
  return std::nullopt;
}

}  // namespace slotted::flush
