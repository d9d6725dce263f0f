#include "idempotency/keyed_store.hpp"

#include <algorithm>
#include <boost/unordered/unordered_flat_set.hpp>

namespace slotted::idempotency {

// A shard's index: a boost::unordered_flat_set (open addressing, SIMD-probed tags) of
// entries, each allocated once and holding its key once. The set finds an entry by the
// key's hash, computed once per call (it picks the shard too), and its key; the entries
// are linked in the order they were remembered, the oldest first, for expiry and
// eviction. Unlinking is O(1), so a forgotten reservation (abandon) leaves nothing behind.
// It replaced a std::unordered_map by key string plus a deque of (time, key) copies, whose
// lookups of new keys walked bucket chains through cold nodes and which hashed each key
// four times (bench/RESULTS.md, "Idempotency-Key: the daemon's CPU per request").
struct keyed_store::entry {
  std::string key;
  std::uint64_t key_hash = 0;  // hash_key(key)
  body_hash hash{};
  std::uint32_t accepted = 0;
  bool in_flight = false;
  clock::time_point at;
  entry* older = nullptr;  // the age list: every entry of the shard's index
  entry* newer = nullptr;
};

struct keyed_store::shard {
  struct key_ref {
    std::string_view key;
    std::uint64_t hash;
  };
  struct entry_hash {
    using is_avalanching = std::true_type;  // SipHash mixes fully; no second mix needed
    using is_transparent = void;
    std::size_t operator()(const std::unique_ptr<entry>& e) const { return e->key_hash; }
    std::size_t operator()(const key_ref& k) const { return k.hash; }
  };
  struct entry_equal {
    using is_transparent = void;
    bool operator()(const std::unique_ptr<entry>& a, const std::unique_ptr<entry>& b) const {
      return a->key_hash == b->key_hash && a->key == b->key;
    }
    bool operator()(const key_ref& a, const std::unique_ptr<entry>& b) const {
      return a.hash == b->key_hash && a.key == b->key;
    }
    bool operator()(const std::unique_ptr<entry>& a, const key_ref& b) const {
      return a->key_hash == b.hash && a->key == b.key;
    }
  };

  util::mutex mutex;
  boost::unordered_flat_set<std::unique_ptr<entry>, entry_hash, entry_equal> index
      GUARDED_BY(mutex);
  // The age list's ends. Its entries are reached only through these and `index`, so
  // they are under `mutex` too (which the analysis does not follow through pointers).
  entry* oldest GUARDED_BY(mutex) = nullptr;
  entry* newest GUARDED_BY(mutex) = nullptr;

  entry* find(std::string_view key, std::uint64_t h) const REQUIRES(mutex) {
    const auto it = index.find(key_ref{key, h});
    return it == index.end() ? nullptr : it->get();
  }
  void unlink(entry* e) REQUIRES(mutex) {
    (e->older != nullptr ? e->older->newer : oldest) = e->newer;
    (e->newer != nullptr ? e->newer->older : newest) = e->older;
    e->older = e->newer = nullptr;
  }
  void link_newest(entry* e) REQUIRES(mutex) {
    e->older = newest;
    e->newer = nullptr;
    (newest != nullptr ? newest->newer : oldest) = e;
    newest = e;
  }
  // Unlinks and deletes `e`.
  void forget(entry* e) REQUIRES(mutex) {
    unlink(e);
    index.erase(key_ref{e->key, e->key_hash});
  }
};

keyed_store::keyed_store(clock::duration window, std::size_t max_keys, metrics::registry& m,
                         store::pending_store& bound)
    : window_(window),
      max_keys_per_shard_(std::max<std::size_t>(1, max_keys / shard_count)),
      sip_{util::random_sip_key()},
      bound_(bound),
      requests_(m.idempotency_requests),
      replays_(m.idempotency_replays),
      duplicates_(m.idempotency_duplicates_dropped),
      conflicts_(m.idempotency_conflicts_dropped),
      keys_(m.idempotency_keys) {
  for (std::size_t i = 0; i < shard_count; ++i) shards_.push_back(std::make_unique<shard>());
}

keyed_store::~keyed_store() = default;

keyed_store::shard& keyed_store::shard_of(std::uint64_t key_hash) {
  // The set probes by the hash's top bits and tags by its lowest byte: bits between
  // them pick the shard, so that a shard's keys still spread over its whole table.
  return *shards_[(key_hash >> 32) % shard_count];
}

// REQUIRES on these definitions: the header cannot name sh.mutex (shard is incomplete
// there), so they precede their callers in this file.
void keyed_store::expire(shard& sh, clock::time_point now) REQUIRES(sh.mutex) {
  const std::size_t before = sh.index.size();
  while (sh.oldest != nullptr) {
    entry* e = sh.oldest;
    const bool expired = now - e->at >= window_;
    if (!expired && sh.index.size() <= max_keys_per_shard_) break;
    if (e->in_flight) break;  // answered within moments; dropped after
    sh.forget(e);
  }
  indexed_ -= before - sh.index.size();
}

void keyed_store::remember(shard& sh, const keyed_request& r, std::uint64_t h,
                           clock::time_point now, bool in_flight) REQUIRES(sh.mutex) {
  entry* e = sh.find(r.key, h);
  if (e != nullptr) {
    sh.unlink(e);
  } else {
    auto fresh = std::make_unique<entry>();
    fresh->key = r.key;
    fresh->key_hash = h;
    e = fresh.get();
    sh.index.insert(std::move(fresh));
    ++indexed_;
  }
  e->hash = r.hash;
  e->accepted = static_cast<std::uint32_t>(r.increments.size());
  e->at = now;
  e->in_flight = in_flight;
  sh.link_newest(e);
}

std::optional<admission> keyed_store::find(shard& sh, const std::string& key, std::uint64_t h,
                                           const body_hash& hash) REQUIRES(sh.mutex) {
  const entry* e = sh.find(key, h);
  if (e == nullptr) return std::nullopt;
  if (e->in_flight) return admission{admit_result::in_progress};
  if (e->hash != hash) return admission{admit_result::conflict};
  replays_.Increment();
  return admission{admit_result::replay, e->accepted};
}

void keyed_store::add_pending(keyed_request&& r) {
  util::lock_guard lock(pending_mutex_);
  // Under the lock, so that take_pending() releases exactly what it takes.
  const auto c = charge(r);
  pending_entries_ += c.entries;
  pending_bytes_ += c.bytes;
  pending_.push_back(std::move(r));
}

admission keyed_store::admit(keyed_request& r, const store::pending_limits& limits,
                             bool accept_now) {
  requests_.Increment();
  const auto now = clock::now();
  const auto h = hash_key(r.key);
  auto& sh = shard_of(h);
  {
    util::lock_guard lock(sh.mutex);
    expire(sh, now);
    if (const auto known = find(sh, r.key, h, r.hash)) return *known;
    if (bound_.over_pending_limit(limits)) return {admit_result::over_limit};
    // Held from now on, reserved or pending: requests being logged count too.
    bound_.hold(charge(r));
    // Remembered before it is pending: a retry racing this one finds it (in flight
    // until accept() with a WAL; without one, as accepted, and it is pending below).
    remember(sh, r, h, now, !accept_now);
  }
  keys_.Set(static_cast<double>(indexed_.load()));
  if (accept_now) add_pending(std::move(r));
  return {admit_result::fresh};
}

admission keyed_store::lookup(const std::string& key, const body_hash& hash) {
  requests_.Increment();
  const auto h = hash_key(key);
  auto& sh = shard_of(h);
  util::lock_guard lock(sh.mutex);
  expire(sh, clock::now());
  return find(sh, key, h, hash).value_or(admission{admit_result::fresh});
}

void keyed_store::accept(keyed_request&& r) {
  const auto h = hash_key(r.key);
  auto& sh = shard_of(h);
  {
    util::lock_guard lock(sh.mutex);
    if (entry* e = sh.find(r.key, h)) e->in_flight = false;
  }
  add_pending(std::move(r));
}

void keyed_store::abandon(const std::string& key) {
  const auto h = hash_key(key);
  auto& sh = shard_of(h);
  util::lock_guard lock(sh.mutex);
  if (entry* e = sh.find(key, h); e != nullptr && e->in_flight) {
    // In flight entries are never expired or evicted: this is the reservation admit()
    // made, holding the charge of its key and accepted increments.
    bound_.release(store::keyed_charge(e->key.size(), e->accepted));
    sh.forget(e);
    --indexed_;
  }
  expire(sh, clock::now());
  keys_.Set(static_cast<double>(indexed_.load()));
}

std::vector<keyed_request> keyed_store::take_pending() {
  // At every flush cycle: the gauge follows the window even without keyed traffic.
  const auto now = clock::now();
  for (auto& sh : shards_) {
    util::lock_guard lock(sh->mutex);
    expire(*sh, now);
  }
  keys_.Set(static_cast<double>(indexed_.load()));
  std::deque<keyed_request> taken;
  {
    util::lock_guard lock(pending_mutex_);
    taken.swap(pending_);
    // Formed into batches next: the flusher's queue counts them from then on.
    bound_.release({pending_entries_.exchange(0), pending_bytes_.exchange(0)});
  }
  return {std::make_move_iterator(taken.begin()), std::make_move_iterator(taken.end())};
}

void keyed_store::put_back(std::vector<keyed_request>&& requests) {
  store::pending_charge held;
  for (const auto& r : requests) held += charge(r);
  util::lock_guard lock(pending_mutex_);
  pending_entries_ += held.entries;
  pending_bytes_ += held.bytes;
  bound_.hold(held);
  pending_.insert(pending_.begin(), std::make_move_iterator(requests.begin()),
                  std::make_move_iterator(requests.end()));
}

std::vector<keyed_request> keyed_store::pending_copy() const {
  util::lock_guard lock(pending_mutex_);
  return {pending_.begin(), pending_.end()};
}

void keyed_store::restore(std::vector<keyed_request>&& pending,
                          const std::vector<keyed_request>& in_batches) {
  const auto now = clock::now();
  const std::int64_t now_unix_ms = now_ms();
  const auto window_ms = std::chrono::duration_cast<std::chrono::milliseconds>(window_).count();
  // Each key is remembered as of when it was received (logged with it), not as of the
  // restart: it is forgotten a window after it first arrived, restart or not. The age
  // is capped at the window (older is forgotten in any case); a time ahead of this
  // clock counts as now, and so does none (0, a request never stamped).
  const auto received = [&](const keyed_request& r) {
    if (r.received_ms <= 0) return now;
    const std::int64_t age = std::clamp<std::int64_t>(now_unix_ms - r.received_ms, 0, window_ms);
    return now - std::chrono::duration_cast<clock::duration>(std::chrono::milliseconds(age));
  };
  // Remembered oldest first: each remember() links its key as the newest, and expiry
  // walks from the oldest end, stopping at the first entry inside the window.
  std::vector<std::pair<clock::time_point, const keyed_request*>> order;
  order.reserve(in_batches.size() + pending.size());
  for (const auto& r : in_batches) order.emplace_back(received(r), &r);
  for (const auto& r : pending) order.emplace_back(received(r), &r);
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [at, r] : order) {
    const auto h = hash_key(r->key);
    auto& sh = shard_of(h);
    util::lock_guard lock(sh.mutex);
    remember(sh, *r, h, at, false);
    expire(sh, now);
  }
  // Pending again, in their logged order, whether or not the index still knows them,
  // each held against the pending bound again.
  for (auto& r : pending) {
    bound_.hold(charge(r));
    add_pending(std::move(r));
  }
  keys_.Set(static_cast<double>(indexed_.load()));
}

std::size_t keyed_store::pending_entries() const {
  return pending_entries_.load();
}

std::int64_t keyed_store::pending(const store::counter_key& key) const {
  util::lock_guard lock(pending_mutex_);
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
  util::lock_guard lock(pending_mutex_);
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
