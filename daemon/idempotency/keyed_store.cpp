#include "idempotency/keyed_store.hpp"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>

namespace slotted::idempotency {

keyed_store::keyed_store(clock::duration window, std::size_t max_keys, metrics::registry& m)
    : window_(window),
      max_keys_(max_keys),
      requests_(prometheus::BuildCounter()
                    .Name("slotted_counterd_idempotency_requests_total")
                    .Help("POST /v1/increments requests that carried a valid Idempotency-Key")
                    .Register(m.prometheus())
                    .Add({})),
      replays_(prometheus::BuildCounter()
                   .Name("slotted_counterd_idempotency_replays_total")
                   .Help("Keyed requests this instance recognised at ingest as a retry of one "
                         "it had accepted (answered as then, not applied again)")
                   .Register(m.prometheus())
                   .Add({})),
      duplicates_(prometheus::BuildCounter()
                      .Name("slotted_counterd_idempotency_duplicates_dropped_total")
                      .Help("Keyed requests a flush dropped because their key was already "
                            "committed (by this or another instance)")
                      .Register(m.prometheus())
                      .Add({})),
      conflicts_(prometheus::BuildCounter()
                     .Name("slotted_counterd_idempotency_conflicts_dropped_total")
                     .Help("Keyed requests a flush dropped because their key was committed "
                           "with another body")
                     .Register(m.prometheus())
                     .Add({})),
      keys_(prometheus::BuildGauge()
                .Name("slotted_counterd_idempotency_keys")
                .Help("Idempotency keys this instance remembers (accepted within "
                      "idempotency.window, bounded)")
                .Register(m.prometheus())
                .Add({})) {}

void keyed_store::expire(clock::time_point now) {
  while (!order_.empty()) {
    auto& [at, key] = order_.front();
    const auto it = index_.find(key);
    if (it == index_.end() || it->second.at != at) {
      order_.pop_front();  // abandoned, or remembered again later (a newer entry)
      continue;
    }
    const bool expired = now - at >= window_;
    if (!expired && index_.size() <= max_keys_) break;
    if (it->second.in_flight) break;  // answered within moments; dropped after
    index_.erase(it);
    order_.pop_front();
  }
  keys_.Set(static_cast<double>(index_.size()));
}

void keyed_store::remember(const keyed_request& r, clock::time_point now, bool in_flight) {
  auto& e = index_[r.key];
  e.hash = r.hash;
  e.accepted = static_cast<std::uint32_t>(r.increments.size());
  e.at = now;
  e.in_flight = in_flight;
  order_.emplace_back(now, r.key);
}

admission keyed_store::admit(keyed_request& r, std::size_t pending_elsewhere,
                             std::size_t max_pending, bool accept_now) {
  requests_.Increment();
  const auto now = clock::now();
  std::lock_guard lock(mutex_);
  expire(now);
  if (const auto it = index_.find(r.key); it != index_.end()) {
    const auto& e = it->second;
    if (e.in_flight) return {admit_result::in_progress};
    if (e.hash != r.hash) return {admit_result::conflict};
    replays_.Increment();
    return {admit_result::replay, e.accepted};
  }
  if (pending_elsewhere + pending_items_ >= max_pending) return {admit_result::over_limit};
  remember(r, now, !accept_now);
  keys_.Set(static_cast<double>(index_.size()));
  if (accept_now) {
    pending_items_ += r.increments.size();
    pending_.push_back(std::move(r));
  }
  return {admit_result::fresh};
}

void keyed_store::accept(keyed_request&& r) {
  std::lock_guard lock(mutex_);
  if (const auto it = index_.find(r.key); it != index_.end()) it->second.in_flight = false;
  pending_items_ += r.increments.size();
  pending_.push_back(std::move(r));
}

void keyed_store::abandon(const std::string& key) {
  std::lock_guard lock(mutex_);
  if (const auto it = index_.find(key); it != index_.end() && it->second.in_flight) {
    index_.erase(it);
  }
  keys_.Set(static_cast<double>(index_.size()));
}

std::vector<keyed_request> keyed_store::take_pending() {
  std::lock_guard lock(mutex_);
  expire(clock::now());  // at every flush cycle: the gauge follows the window
  pending_items_ = 0;
  return std::exchange(pending_, {});
}

void keyed_store::put_back(std::vector<keyed_request>&& requests) {
  std::lock_guard lock(mutex_);
  for (const auto& r : requests) pending_items_ += r.increments.size();
  requests.insert(requests.end(), std::make_move_iterator(pending_.begin()),
                  std::make_move_iterator(pending_.end()));
  pending_ = std::move(requests);
}

std::vector<keyed_request> keyed_store::pending_copy() const {
  std::lock_guard lock(mutex_);
  return pending_;
}

void keyed_store::restore(std::vector<keyed_request>&& pending,
                          const std::vector<keyed_request>& in_batches) {
  const auto now = clock::now();
  std::lock_guard lock(mutex_);
  for (const auto& r : in_batches) remember(r, now, false);
  for (auto& r : pending) {
    remember(r, now, false);
    pending_items_ += r.increments.size();
    pending_.push_back(std::move(r));
  }
  expire(now);
}

std::size_t keyed_store::pending_items() const {
  std::lock_guard lock(mutex_);
  return pending_items_;
}

std::int64_t keyed_store::pending(const store::counter_key& key) const {
  std::lock_guard lock(mutex_);
  std::int64_t sum = 0;
  for (const auto& r : pending_) {
    for (const auto& inc : r.increments) {
      if (inc.record_type == key.record_type && inc.record_id == key.record_id) sum += inc.delta;
    }
  }
  return sum;
}

std::size_t keyed_store::indexed_keys() const {
  std::lock_guard lock(mutex_);
  return index_.size();
}

void keyed_store::dropped_at_flush(std::size_t duplicates, std::size_t conflicts) {
  duplicates_.Increment(static_cast<double>(duplicates));
  conflicts_.Increment(static_cast<double>(conflicts));
}

}  // namespace slotted::idempotency
