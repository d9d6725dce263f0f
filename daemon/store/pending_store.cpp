#include "store/pending_store.hpp"

#include <boost/unordered/unordered_flat_map.hpp>

// boost::unordered_flat_map (open addressing, SIMD-probed metadata) over
// std::unordered_map: one allocation per table instead of one per key, which keeps the
// bytes per pending key low and the probes cache friendly. See bench/RESULTS.md.

namespace slotted::store {

namespace {
// A key with its hash already computed (for its shard): looking it up does not hash
// it a second time. The keyed hash costs more than the unkeyed one it replaced, and
// hashing once per increment wins most of that back (bench/RESULTS.md, hash_cost).
struct hashed_key {
  counter_key key;
  std::uint64_t hash;
};
struct key_hash {
  using is_avalanching = std::true_type;  // SipHash mixes fully; no second mix needed
  using is_transparent = void;
  std::size_t operator()(const counter_key& k) const { return hash_of(k); }
  std::size_t operator()(const hashed_key& k) const { return k.hash; }
};
struct key_equal {
  using is_transparent = void;
  bool operator()(const counter_key& a, const counter_key& b) const { return a == b; }
  bool operator()(const hashed_key& a, const counter_key& b) const { return a.key == b; }
  bool operator()(const counter_key& a, const hashed_key& b) const { return a == b.key; }
};
using delta_map = boost::unordered_flat_map<counter_key, std::int64_t, key_hash, key_equal>;
}  // namespace

struct pending_store::shard {
  mutable std::mutex mutex;
  delta_map deltas;
  std::optional<clock::time_point> first_arrival;
};

pending_store::pending_store(unsigned shards)
    : shard_count_(shards == 0 ? 1 : shards), shards_(std::make_unique<shard[]>(shard_count_)) {}

pending_store::~pending_store() = default;

add_result pending_store::add(std::span<const ingest::increment> increments,
                              std::size_t max_pending_keys) {
  if (keys() + unwritten_rows_.load(std::memory_order_relaxed) >= max_pending_keys) {
    return add_result::over_limit;
  }
  const auto now = clock::now();
  // keys_ changes under the shard's lock, so take_all() can never subtract a key before
  // the add that inserted it was counted (the count would wrap below zero).
  const auto apply = [&](shard& s, const ingest::increment& inc, std::uint64_t hash) {
    const counter_key key{inc.record_type, inc.record_id};
    if (const auto it = s.deltas.find(hashed_key{key, hash}); it != s.deltas.end()) {
      it->second += inc.delta;
      return;
    }
    s.deltas.emplace(key, inc.delta);
    keys_.fetch_add(1, std::memory_order_relaxed);
  };
  if (increments.size() == 1) {
    const auto& inc = increments.front();
    const auto hash = hash_of(counter_key{inc.record_type, inc.record_id});
    shard& s = shards_[shard_of(hash)];
    std::lock_guard lock(s.mutex);
    if (!s.first_arrival) s.first_arrival = now;
    apply(s, inc, hash);
  } else {
    // Grouped by shard (a counting sort), so each shard is locked once per request
    // rather than once per increment.
    thread_local std::vector<std::uint32_t> shard_of_item, order, starts;
    thread_local std::vector<std::uint64_t> hashes;
    shard_of_item.resize(increments.size());
    hashes.resize(increments.size());
    order.resize(increments.size());
    starts.assign(shard_count_ + 1, 0);
    for (std::size_t i = 0; i < increments.size(); ++i) {
      const auto& inc = increments[i];
      hashes[i] = hash_of(counter_key{inc.record_type, inc.record_id});
      shard_of_item[i] = static_cast<std::uint32_t>(shard_of(hashes[i]));
      ++starts[shard_of_item[i] + 1];
    }
    for (std::size_t k = 0; k < shard_count_; ++k) starts[k + 1] += starts[k];
    for (std::size_t i = 0; i < increments.size(); ++i)
      order[starts[shard_of_item[i]]++] = static_cast<std::uint32_t>(i);
    // starts[k] is now the end of shard k's run.
    std::size_t begin = 0;
    for (std::size_t k = 0; k < shard_count_; ++k) {
      const std::size_t end = starts[k];
      if (end == begin) continue;
      shard& s = shards_[k];
      std::lock_guard lock(s.mutex);
      if (!s.first_arrival) s.first_arrival = now;
      for (std::size_t j = begin; j < end; ++j) apply(s, increments[order[j]], hashes[order[j]]);
      begin = end;
    }
  }
  return add_result::applied;
}

void pending_store::add_deltas(std::span<const pending_delta> deltas) {
  const auto now = clock::now();
  for (const auto& d : deltas) {
    shard& s = shards_[shard_of(hash_of(d.key))];
    std::lock_guard lock(s.mutex);
    if (!s.first_arrival) s.first_arrival = now;
    auto [it, inserted] = s.deltas.try_emplace(d.key, 0);
    it->second += d.delta;
    if (inserted) keys_.fetch_add(1, std::memory_order_relaxed);
  }
}

void pending_store::copy_all(std::vector<pending_delta>& out) const {
  for (std::size_t i = 0; i < shard_count_; ++i) {
    std::lock_guard lock(shards_[i].mutex);
    for (const auto& [key, delta] : shards_[i].deltas) out.push_back({key, delta});
  }
}

std::optional<pending_store::clock::time_point> pending_store::take_all(
    std::vector<pending_delta>& out) {
  std::optional<clock::time_point> oldest;
  for (std::size_t i = 0; i < shard_count_; ++i) {
    delta_map taken;
    std::optional<clock::time_point> arrival;
    {
      std::lock_guard lock(shards_[i].mutex);
      taken.swap(shards_[i].deltas);
      arrival = std::exchange(shards_[i].first_arrival, std::nullopt);
      keys_.fetch_sub(taken.size(), std::memory_order_relaxed);
    }
    if (arrival && (!oldest || *arrival < *oldest)) oldest = arrival;
    out.reserve(out.size() + taken.size());
    for (const auto& [key, delta] : taken) out.push_back({key, delta});
  }
  return oldest;
}

std::int64_t pending_store::pending(const counter_key& key) const {
  const shard& s = shards_[shard_of(hash_of(key))];
  std::lock_guard lock(s.mutex);
  const auto it = s.deltas.find(key);
  return it == s.deltas.end() ? 0 : it->second;
}

std::optional<pending_store::clock::time_point> pending_store::oldest() const {
  std::optional<clock::time_point> oldest;
  for (std::size_t i = 0; i < shard_count_; ++i) {
    std::lock_guard lock(shards_[i].mutex);
    const auto& a = shards_[i].first_arrival;
    if (a && (!oldest || *a < *oldest)) oldest = a;
  }
  return oldest;
}

}  // namespace slotted::store
