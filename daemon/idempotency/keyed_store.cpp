#include "idempotency/keyed_store.hpp"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>

namespace slotted::idempotency {

keyed_store::keyed_store(clock::duration window, std::size_t max_keys, metrics::registry& m)
    : window_(window),
      max_keys_per_shard_(std::max<std::size_t>(1, max_keys / shard_count)),
      hash_{util::random_sip_key()},
      requests_(m.idempotency_requests),
      replays_(m.idempotency_replays),
      duplicates_(m.idempotency_duplicates_dropped),
      conflicts_(m.idempotency_conflicts_dropped),
      keys_(m.idempotency_keys) {
  for (std::size_t i = 0; i < shard_count; ++i) shards_.push_back(std::make_unique<shard>(hash_));
}

keyed_store::shard& keyed_store::shard_of(const std::string& key) {
  // The map hashes the same key again: the bits above the ones it uses pick the shard.
  return *shards_[(hash_(key) >> 56) % shard_count];
}

void keyed_store::expire(shard& sh, clock::time_point now) {
  const std::size_t before = sh.index.size();
  while (!sh.order.empty()) {
    auto& [at, key] = sh.order.front();
    const auto it = sh.index.find(key);
    if (it == sh.index.end() || it->second.at != at) {
      sh.order.pop_front();  // abandoned, or remembered again later (a newer entry)
      continue;
    }
    const bool expired = now - at >= window_;
    if (!expired && sh.index.size() <= max_keys_per_shard_) break;
    if (it->second.in_flight) break;  // answered within moments; dropped after
    sh.index.erase(it);
    sh.order.pop_front();
  }
  // Entries of keys abandoned or remembered again stay in `order` until they reach its
  // front; while the WAL fails, every request leaves one. Dropped here in one pass when
  // they are as many as the live ones, so `order` stays within twice the index.
  if (sh.order.size() > 2 * sh.index.size() + 1024) {
    std::erase_if(sh.order, [&](const auto& o) {
      const auto it = sh.index.find(o.second);
      return it == sh.index.end() || it->second.at != o.first;
    });
  }
  indexed_ -= before - sh.index.size();
}

void keyed_store::remember(shard& sh, const keyed_request& r, clock::time_point now,
                           bool in_flight) {
  const auto [it, fresh] = sh.index.try_emplace(r.key);
  if (fresh) ++indexed_;
  auto& e = it->second;
  e.hash = r.hash;
  e.accepted = static_cast<std::uint32_t>(r.increments.size());
  e.at = now;
  e.in_flight = in_flight;
  sh.order.emplace_back(now, r.key);
}

void keyed_store::add_pending(keyed_request&& r) {
  pending_items_ += r.increments.size();
  std::lock_guard lock(pending_mutex_);
  pending_.push_back(std::move(r));
}

admission keyed_store::admit(keyed_request& r, std::size_t pending_elsewhere,
                             std::size_t max_pending, bool accept_now) {
  requests_.Increment();
  const auto now = clock::now();
  auto& sh = shard_of(r.key);
  {
    std::lock_guard lock(sh.mutex);
    expire(sh, now);
    if (const auto known = find(sh, r.key, r.hash)) return *known;
    if (pending_elsewhere + pending_items_.load() >= max_pending) return {admit_result::over_limit};
    // Remembered before it is pending: a retry racing this one finds it (in flight
    // until accept() with a WAL; without one, as accepted, and it is pending below).
    remember(sh, r, now, !accept_now);
  }
  keys_.Set(static_cast<double>(indexed_.load()));
  if (accept_now) add_pending(std::move(r));
  return {admit_result::fresh};
}

std::optional<admission> keyed_store::find(shard& sh, const std::string& key,
                                           const body_hash& hash) {
  const auto it = sh.index.find(key);
  if (it == sh.index.end()) return std::nullopt;
  const auto& e = it->second;
  if (e.in_flight) return admission{admit_result::in_progress};
  if (e.hash != hash) return admission{admit_result::conflict};
  replays_.Increment();
  return admission{admit_result::replay, e.accepted};
}

admission keyed_store::lookup(const std::string& key, const body_hash& hash) {
  requests_.Increment();
  auto& sh = shard_of(key);
  std::lock_guard lock(sh.mutex);
  expire(sh, clock::now());
  return find(sh, key, hash).value_or(admission{admit_result::fresh});
}

void keyed_store::accept(keyed_request&& r) {
  auto& sh = shard_of(r.key);
  {
    std::lock_guard lock(sh.mutex);
    if (const auto it = sh.index.find(r.key); it != sh.index.end()) it->second.in_flight = false;
  }
  add_pending(std::move(r));
}

void keyed_store::abandon(const std::string& key) {
  auto& sh = shard_of(key);
  std::lock_guard lock(sh.mutex);
  if (const auto it = sh.index.find(key); it != sh.index.end() && it->second.in_flight) {
    sh.index.erase(it);
    --indexed_;
  }
  expire(sh, clock::now());
  keys_.Set(static_cast<double>(indexed_.load()));
}

std::vector<keyed_request> keyed_store::take_pending() {
  // At every flush cycle: the gauge follows the window even without keyed traffic.
  const auto now = clock::now();
  for (auto& sh : shards_) {
    std::lock_guard lock(sh->mutex);
    expire(*sh, now);
  }
  keys_.Set(static_cast<double>(indexed_.load()));
  std::deque<keyed_request> taken;
  {
    std::lock_guard lock(pending_mutex_);
    taken.swap(pending_);
    pending_items_ = 0;
  }
  return {std::make_move_iterator(taken.begin()), std::make_move_iterator(taken.end())};
}

void keyed_store::put_back(std::vector<keyed_request>&& requests) {
  std::size_t items = 0;
  for (const auto& r : requests) items += r.increments.size();
  std::lock_guard lock(pending_mutex_);
  pending_items_ += items;
  pending_.insert(pending_.begin(), std::make_move_iterator(requests.begin()),
                  std::make_move_iterator(requests.end()));
}

std::vector<keyed_request> keyed_store::pending_copy() const {
  std::lock_guard lock(pending_mutex_);
  return {pending_.begin(), pending_.end()};
}

void keyed_store::restore(std::vector<keyed_request>&& pending,
                          const std::vector<keyed_request>& in_batches) {
  const auto now = clock::now();
  const auto known = [&](const keyed_request& r) {
    auto& sh = shard_of(r.key);
    std::lock_guard lock(sh.mutex);
    remember(sh, r, now, false);
    expire(sh, now);
  };
  for (const auto& r : in_batches) known(r);
  for (auto& r : pending) {
    known(r);
    add_pending(std::move(r));
  }
  keys_.Set(static_cast<double>(indexed_.load()));
}

std::size_t keyed_store::pending_items() const {
  return pending_items_.load();
}

std::int64_t keyed_store::pending(const store::counter_key& key) const {
  std::lock_guard lock(pending_mutex_);
  std::int64_t sum = 0;
  for (const auto& r : pending_) {
    for (const auto& inc : r.increments) {
      if (inc.record_type == key.record_type && inc.record_id == key.record_id) sum += inc.delta;
    }
  }
  return sum;
}

void keyed_store::pending_buckets(const store::counter_key& key, store::granularity g,
                                  std::int64_t from, std::int64_t to,
                                  std::vector<std::pair<std::int64_t, std::int64_t>>& out) const {
  std::lock_guard lock(pending_mutex_);
  for (const auto& r : pending_) {
    for (const auto& inc : r.increments) {
      if (inc.record_type != key.record_type || inc.record_id != key.record_id || !inc.has_time())
        continue;
      const std::int64_t b = store::bucket_start(g, inc.at);
      if (b >= from && b <= to) out.emplace_back(b, inc.delta);
    }
  }
}

std::size_t keyed_store::indexed_keys() const {
  return indexed_.load();
}

void keyed_store::dropped_at_flush(std::size_t duplicates, std::size_t conflicts) {
  duplicates_.Increment(static_cast<double>(duplicates));
  conflicts_.Increment(static_cast<double>(conflicts));
}

}  // namespace slotted::idempotency
