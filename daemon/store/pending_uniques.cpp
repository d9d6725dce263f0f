#include "store/pending_uniques.hpp"

#include <mutex>
#include <string>
#include <unordered_set>

#include "util/siphash.hpp"
#include "util/thread_annotations.hpp"

namespace slotted::store {

namespace {
// Clients choose the clients and ids: a keyed hash, as for counter keys (counter_key.hpp).
struct entry_hash {
  std::size_t operator()(const unique_entry& e) const {
    const auto& key = process_hash_key();
    std::uint64_t h = util::siphash_u64_u32<1, 3>(key, e.record_id, e.record_type);
    h ^= util::siphash_u64_u32<1, 3>(key, static_cast<std::uint64_t>(e.window), 0x75);
    return h ^ util::siphash<1, 3>(key, e.client) * 0x9E3779B97F4A7C15ull;
  }
};
struct entry_eq {
  bool operator()(const unique_entry& a, const unique_entry& b) const { return a.same_key(b); }
};
}  // namespace

struct pending_uniques::shard {
  util::mutex mutex;
  std::unordered_set<unique_entry, entry_hash, entry_eq> entries GUARDED_BY(mutex);
};

pending_uniques::pending_uniques(pending_store& limit, unsigned shards)
    : limit_(limit),
      shard_count_(shards == 0 ? 1 : shards),
      shards_(std::make_unique<shard[]>(shard_count_)) {}

pending_uniques::~pending_uniques() = default;

std::size_t pending_uniques::add(std::span<const unique_entry> entries) {
  std::size_t duplicates = 0;
  const entry_hash hash;
  for (const auto& e : entries) {
    auto& s = shards_[hash(e) % shard_count_];
    bool fresh = false;
    {
      util::lock_guard lock(s.mutex);
      fresh = s.entries.insert(e).second;
    }
    if (fresh) {
      size_.fetch_add(1, std::memory_order_relaxed);
      limit_.hold(charge_of(e));
    } else {
      ++duplicates;
    }
  }
  return duplicates;
}

void pending_uniques::take_all(std::vector<unique_entry>& out) {
  for (std::size_t i = 0; i < shard_count_; ++i) {
    std::unordered_set<unique_entry, entry_hash, entry_eq> taken;
    {
      util::lock_guard lock(shards_[i].mutex);
      taken.swap(shards_[i].entries);
    }
    const std::size_t n = taken.size();
    pending_charge held;
    while (!taken.empty()) {
      out.push_back(std::move(taken.extract(taken.begin()).value()));
      held += charge_of(out.back());
    }
    size_.fetch_sub(n, std::memory_order_relaxed);
    limit_.release(held);
  }
}

void pending_uniques::copy_all(std::vector<unique_entry>& out) const {
  for (std::size_t i = 0; i < shard_count_; ++i) {
    util::lock_guard lock(shards_[i].mutex);
    out.insert(out.end(), shards_[i].entries.begin(), shards_[i].entries.end());
  }
}

}  // namespace slotted::store
