#include "store/pending_store.hpp"

#include <algorithm>
#include <boost/unordered/unordered_flat_map.hpp>

#include "util/log.hpp"
#include "util/thread_annotations.hpp"

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

// One counter's bucket. Kept in the counter's shard (hashed by the counter's keyed
// hash, mixed with the bucket): a counter's total and its buckets change under one lock.
// The counter's hash rides along, computed once per increment for its shard: a second
// and third SipHash per increment (one per bucket) showed as most of the cost of
// buckets at ingest (bench/RESULTS.md, Counts per bucket).
struct bucket_key {
  counter_key key;
  granularity gran = granularity::none;
  std::int64_t bucket = 0;
  std::uint64_t counter_hash = 0;  // hash_of(key)
  friend bool operator==(const bucket_key& a, const bucket_key& b) {
    return a.key == b.key && a.gran == b.gran && a.bucket == b.bucket;
  }
};
struct bucket_hash {
  // Not avalanching: boost mixes the combination once more.
  std::size_t operator()(const bucket_key& k) const {
    return k.counter_hash ^ (static_cast<std::uint64_t>(k.bucket) * 0x9E3779B97F4A7C15ull +
                             static_cast<std::uint64_t>(k.gran));
  }
};
using bucket_map = boost::unordered_flat_map<bucket_key, std::int64_t, bucket_hash>;

// An increment of a counter that keeps hour and day buckets is held once, in its hour,
// as this store-only granularity: it stands for the hour row and its part of the day
// row (a UTC hour lies within one UTC day), and becomes both only when it leaves the
// store (see emit_buckets). One map update per increment instead of two: the second
// was a third of the cost of buckets at ingest (bench/RESULTS.md, Counts per bucket).
// Hand-backs and replays bring hour and day rows apart, and stay apart.
constexpr granularity hour_and_day = static_cast<granularity>(3);

// The rows (keys) an entry stands for, against the pending limit.
std::size_t weight_of(granularity g) {
  return g == hour_and_day ? 2 : 1;
}

// Appends an entry's rows to `out`.
void emit_bucket(const bucket_key& k, std::int64_t delta, std::vector<pending_delta>& out) {
  if (k.gran == hour_and_day) {
    out.push_back({k.key, delta, granularity::hour, k.bucket});
    out.push_back({k.key, delta, granularity::day, bucket_start(granularity::day, k.bucket)});
  } else {
    out.push_back({k.key, delta, k.gran, k.bucket});
  }
}

std::uint64_t abs_of(std::int64_t v) {
  return v < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
}

// a + b, or UINT64_MAX when that overflows.
std::uint64_t add_saturating(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

// Exact: would applying `items` (indices into `increments`, all of keys in shards whose
// maps are in `maps`, locked by the caller) take a pending sum past max_pending_sum?
template <typename MapOf>
bool passes_bound(std::span<const ingest::increment> increments,
                  std::span<const std::uint32_t> items, MapOf map_of) {
  boost::unordered_flat_map<counter_key, std::int64_t, key_hash> sums;
  for (const auto i : items) {
    const auto& inc = increments[i];
    const counter_key key{inc.record_type, inc.record_id};
    auto [it, inserted] = sums.try_emplace(key, 0);
    if (inserted) {
      const delta_map& m = map_of(i);
      const auto found = m.find(key);
      if (found != m.end()) it->second = found->second;
    }
    // Stored sums stay within twice the bound (see max_pending_sum), so this cannot
    // overflow; the check is for the rule, not the arithmetic.
    it->second += inc.delta;
  }
  return std::any_of(sums.begin(), sums.end(),
                     [](const auto& kv) { return abs_of(kv.second) > abs_of(max_pending_sum); });
}
}  // namespace

struct pending_store::shard {
  mutable util::mutex mutex;
  delta_map deltas GUARDED_BY(mutex);
  bucket_map buckets GUARDED_BY(mutex);
  std::optional<clock::time_point> first_arrival GUARDED_BY(mutex);
  // An upper bound of |delta| in `deltas` (written under `mutex`, read without it for
  // a quick "far from the bound" test); reset when the map is taken.
  std::atomic<std::uint64_t> max_abs{0};

  // Raises max_abs to |sum| (a sum just stored, under `mutex`).
  void note_sum(std::int64_t sum) {
    const std::uint64_t m = abs_of(sum);
    if (m > max_abs.load(std::memory_order_relaxed)) max_abs.store(m, std::memory_order_relaxed);
  }

  // Adds `delta` to one bucket (under `mutex`); returns the keys that created (see
  // weight_of), 0 when it existed.
  std::size_t add_bucket(const bucket_key& k, std::int64_t delta) REQUIRES(mutex) {
    auto [it, inserted] = buckets.try_emplace(k, 0);
    // A sum past int64 would take about 2^32 increments of the largest delta with
    // opposite signs in two buckets within one flush interval; it is clamped rather
    // than wrapped (see README, Counts per bucket).
    if (__builtin_add_overflow(it->second, delta, &it->second))
      it->second = delta < 0 ? INT64_MIN : INT64_MAX;
    return inserted ? weight_of(k.gran) : 0;
  }

  // Counts `inc` in its buckets, when its counter keeps any (under `mutex`); returns the
  // buckets created.
  std::size_t count_in_buckets(const bucket_spec::counter* c, const ingest::increment& inc,
                               std::uint64_t hash) REQUIRES(mutex) {
    if (c == nullptr) return 0;
    const counter_key key{inc.record_type, inc.record_id};
    const bool hour = c->keeps(granularity::hour), day = c->keeps(granularity::day);
    if (hour && day)
      return add_bucket({key, hour_and_day, bucket_start(granularity::hour, inc.at), hash},
                        inc.delta);
    const granularity g = hour ? granularity::hour : granularity::day;
    return add_bucket({key, g, bucket_start(g, inc.at), hash}, inc.delta);
  }

  // Adds `inc` (its key's hash `hash`; `c` its counter's buckets, if any) and counts
  // the keys it creates in `keys`. `keys` changes under the shard's lock, so take_all()
  // can never subtract a key before the add that inserted it was counted (the count
  // would wrap below zero).
  void apply(const ingest::increment& inc, std::uint64_t hash, const bucket_spec::counter* c,
             std::atomic<std::size_t>& keys) REQUIRES(mutex) {
    const counter_key key{inc.record_type, inc.record_id};
    auto it = deltas.find(hashed_key{key, hash});
    if (it != deltas.end()) {
      it->second += inc.delta;
    } else {
      it = deltas.emplace(key, inc.delta).first;
      keys.fetch_add(1, std::memory_order_relaxed);
    }
    note_sum(it->second);
    if (const auto created = count_in_buckets(c, inc, hash))
      keys.fetch_add(created, std::memory_order_relaxed);
  }
};

pending_store::pending_store(unsigned shards)
    : shard_count_(shards == 0 ? 1 : shards), shards_(std::make_unique<shard[]>(shard_count_)) {}

pending_store::~pending_store() = default;

std::uint64_t pending_store::magnitude(std::span<const ingest::increment> increments) {
  std::uint64_t total = 0;
  for (const auto& inc : increments) total = add_saturating(total, abs_of(inc.delta));
  return total;
}

// A request's increments grouped by shard (a counting sort), so each shard is locked
// once per request rather than once per increment: the items of shard k are
// order[starts[k-1] .. starts[k]) (starts[-1] being 0).
struct pending_store::shard_groups {
  std::vector<std::uint32_t> shard_of_item, order, starts;
  std::vector<std::uint64_t> hashes;
};

namespace {
// The spec's entry of a type, remembered for the next increment: a request's items are
// nearly always of one type.
class counter_lookup {
 public:
  explicit counter_lookup(const bucket_spec& spec) : spec_(spec) {}
  const bucket_spec::counter* of(std::uint32_t type) {
    if (!looked_up_ || type != last_type_) {
      last_counter_ = spec_.find(type);
      last_type_ = type;
      looked_up_ = true;
    }
    return last_counter_;
  }

 private:
  const bucket_spec& spec_;
  std::uint32_t last_type_ = 0;
  const bucket_spec::counter* last_counter_ = nullptr;
  bool looked_up_ = false;
};
}  // namespace

add_result pending_store::add(std::span<const ingest::increment> increments,
                              const pending_limits& limits) {
  if (over_pending_limit(limits)) return add_result::over_limit;
  if (increments.size() == 1) return add_one(increments.front());
  return add_many(increments);
}

add_result pending_store::add_one(const ingest::increment& inc) {
  const std::uint64_t bound = abs_of(max_pending_sum);
  const counter_key key{inc.record_type, inc.record_id};
  const auto hash = hash_of(key);
  shard& s = shards_[shard_of(hash)];
  util::lock_guard lock(s.mutex);
  // Looked up with the hash computed for the shard; hashed again only to insert.
  const auto it = s.deltas.find(hashed_key{key, hash});
  const bool found = it != s.deltas.end();
  // Stored sums stay within the bound, and a delta is an int32: no overflow here.
  const std::int64_t sum = (found ? it->second : 0) + inc.delta;
  if (abs_of(sum) > bound) return add_result::out_of_range;
  // Read only when a shard has no arrival time yet: a clock read per request showed in
  // the single-event profile.
  if (!s.first_arrival) s.first_arrival = clock::now();
  if (found) {
    it->second = sum;
  } else {
    s.deltas.emplace(key, sum);
    keys_.fetch_add(1, std::memory_order_relaxed);
  }
  s.note_sum(sum);
  if (!buckets_.empty()) {
    if (const auto created = s.count_in_buckets(buckets_.find(inc.record_type), inc, hash))
      keys_.fetch_add(created, std::memory_order_relaxed);
  }
  return add_result::applied;
}

// Not analysed: with a request near the bound every touched shard is locked at once
// (held), which the analysis cannot follow; shard::apply is.
add_result pending_store::add_many(std::span<const ingest::increment> increments)
    NO_THREAD_SAFETY_ANALYSIS {
  const shard_groups& g = group_by_shard(increments);
  // Far from the bound (always, in practice) the request cannot pass it: apply shard
  // by shard. Near it, check exactly with every touched shard locked (in index
  // order, so two such requests cannot deadlock), then apply under those locks.
  const bool near = near_bound(g, magnitude(increments));
  std::vector<std::unique_lock<util::mutex>> held;
  if (near) {
    for (std::size_t k = 0, begin = 0; k < shard_count_; begin = g.starts[k++]) {
      if (g.starts[k] != begin) held.emplace_back(shards_[k].mutex);
    }
    if (passes_bound(increments, g.order, [&](std::uint32_t i) -> const delta_map& {
          return shards_[g.shard_of_item[i]].deltas;
        }))
      return add_result::out_of_range;
  }
  apply_by_shard(increments, g, near);
  return add_result::applied;
}

const pending_store::shard_groups& pending_store::group_by_shard(
    std::span<const ingest::increment> increments) const {
  thread_local shard_groups g;
  g.shard_of_item.resize(increments.size());
  g.hashes.resize(increments.size());
  g.order.resize(increments.size());
  g.starts.assign(shard_count_ + 1, 0);
  for (std::size_t i = 0; i < increments.size(); ++i) {
    const auto& inc = increments[i];
    g.hashes[i] = hash_of(counter_key{inc.record_type, inc.record_id});
    g.shard_of_item[i] = static_cast<std::uint32_t>(shard_of(g.hashes[i]));
    ++g.starts[g.shard_of_item[i] + 1];
  }
  for (std::size_t k = 0; k < shard_count_; ++k) g.starts[k + 1] += g.starts[k];
  for (std::size_t i = 0; i < increments.size(); ++i)
    g.order[g.starts[g.shard_of_item[i]]++] = static_cast<std::uint32_t>(i);
  // starts[k] is now the end of shard k's run.
  return g;
}

bool pending_store::near_bound(const shard_groups& g, std::uint64_t request) const {
  const std::uint64_t bound = abs_of(max_pending_sum);
  bool near = false;
  for (std::size_t k = 0, begin = 0; k < shard_count_ && !near; begin = g.starts[k++]) {
    if (g.starts[k] != begin &&
        add_saturating(shards_[k].max_abs.load(std::memory_order_relaxed), request) > bound)
      near = true;
  }
  return near;
}

// Not analysed: locks each shard unless the caller holds them all (`locked`).
void pending_store::apply_by_shard(std::span<const ingest::increment> increments,
                                   const shard_groups& g, bool locked) NO_THREAD_SAFETY_ANALYSIS {
  // Read only when a shard has no arrival time yet: a clock read per request showed in
  // the single-event profile.
  std::optional<clock::time_point> now;
  counter_lookup counters(buckets_);
  const bool with_buckets = !buckets_.empty();
  std::size_t begin = 0;
  for (std::size_t k = 0; k < shard_count_; ++k) {
    const std::size_t end = g.starts[k];
    if (end == begin) continue;
    shard& s = shards_[k];
    std::unique_lock<util::mutex> lock(s.mutex, std::defer_lock);
    if (!locked) lock.lock();
    if (!s.first_arrival) {
      if (!now) now = clock::now();
      s.first_arrival = *now;
    }
    for (std::size_t j = begin; j < end; ++j) {
      const auto& inc = increments[g.order[j]];
      s.apply(inc, g.hashes[g.order[j]], with_buckets ? counters.of(inc.record_type) : nullptr,
              keys_);
    }
    begin = end;
  }
}

pending_store::fit pending_store::fits(std::span<const ingest::increment> increments,
                                       std::uint64_t unapplied) const {
  const std::uint64_t bound = abs_of(max_pending_sum);
  const std::uint64_t change = add_saturating(magnitude(increments), unapplied);
  bool near = false;
  for (const auto& inc : increments) {
    const shard& s = shards_[shard_of(hash_of(counter_key{inc.record_type, inc.record_id}))];
    if (add_saturating(s.max_abs.load(std::memory_order_relaxed), change) > bound) {
      near = true;
      break;
    }
  }
  if (!near) return fit::yes;
  if (unapplied > 0) return fit::maybe;
  std::vector<std::uint32_t> items(increments.size());
  for (std::uint32_t i = 0; i < items.size(); ++i) items[i] = i;
  // Locked one shard at a time: exact only while nothing else adds (see the header).
  delta_map snapshot;
  for (const auto& inc : increments) {
    const counter_key key{inc.record_type, inc.record_id};
    if (!snapshot.contains(key)) snapshot.emplace(key, pending(key));
  }
  return passes_bound(increments, items,
                      [&](std::uint32_t) -> const delta_map& { return snapshot; })
             ? fit::no
             : fit::yes;
}

void pending_store::add_deltas(std::span<const pending_delta> deltas) {
  const auto now = clock::now();
  for (const auto& d : deltas) {
    shard& s = shards_[shard_of(hash_of(d.key))];
    util::lock_guard lock(s.mutex);
    if (!s.first_arrival) s.first_arrival = now;
    if (d.gran != granularity::none) {
      if (s.add_bucket({d.key, d.gran, d.bucket, hash_of(d.key)}, d.delta) != 0)
        keys_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    auto [it, inserted] = s.deltas.try_emplace(d.key, 0);
    // Recovered sums start from an empty store and handed-back ones restore what was
    // taken, so this stays within the bound; a sum past int64 would be a bug, and is
    // clamped with an error rather than wrapped.
    if (__builtin_add_overflow(it->second, d.delta, &it->second)) {
      it->second = d.delta < 0 ? INT64_MIN : INT64_MAX;
      log::error("pending sum of counter (", d.key.record_type, ", ", d.key.record_id,
                 ") overflows; clamped");
    }
    if (inserted) keys_.fetch_add(1, std::memory_order_relaxed);
    s.note_sum(it->second);
  }
}

void pending_store::copy_all(std::vector<pending_delta>& out) const {
  for (std::size_t i = 0; i < shard_count_; ++i) {
    util::lock_guard lock(shards_[i].mutex);
    for (const auto& [key, delta] : shards_[i].deltas) out.push_back({key, delta});
    for (const auto& [k, delta] : shards_[i].buckets) emit_bucket(k, delta, out);
  }
}

std::optional<pending_store::clock::time_point> pending_store::take_all(
    std::vector<pending_delta>& out) {
  std::optional<clock::time_point> oldest;
  for (std::size_t i = 0; i < shard_count_; ++i) {
    delta_map taken;
    bucket_map taken_buckets;
    std::optional<clock::time_point> arrival;
    {
      // A counter's total and its buckets leave together, so no batch holds one
      // without the other.
      util::lock_guard lock(shards_[i].mutex);
      taken.swap(shards_[i].deltas);
      taken_buckets.swap(shards_[i].buckets);
      shards_[i].max_abs.store(0, std::memory_order_relaxed);
      arrival = std::exchange(shards_[i].first_arrival, std::nullopt);
      std::size_t bucket_keys = 0;
      for (const auto& [k, delta] : taken_buckets) bucket_keys += weight_of(k.gran);
      keys_.fetch_sub(taken.size() + bucket_keys, std::memory_order_relaxed);
    }
    if (arrival && (!oldest || *arrival < *oldest)) oldest = arrival;
    out.reserve(out.size() + taken.size() + taken_buckets.size());
    for (const auto& [key, delta] : taken) out.push_back({key, delta});
    for (const auto& [k, delta] : taken_buckets) emit_bucket(k, delta, out);
  }
  return oldest;
}

std::int64_t pending_store::pending(const counter_key& key) const {
  const shard& s = shards_[shard_of(hash_of(key))];
  util::lock_guard lock(s.mutex);
  const auto it = s.deltas.find(key);
  return it == s.deltas.end() ? 0 : it->second;
}

std::int64_t pending_store::drop(const counter_key& key) {
  shard& s = shards_[shard_of(hash_of(key))];
  util::lock_guard lock(s.mutex);
  std::int64_t delta = 0;
  std::size_t dropped = 0;
  if (const auto it = s.deltas.find(key); it != s.deltas.end()) {
    delta = it->second;
    s.deltas.erase(it);
    dropped = 1;
  }
  // Its buckets too, or the buckets would outnumber the total they are part of. A scan
  // of the shard's buckets: resets are rare, and this keeps add() free of an index.
  boost::unordered::erase_if(s.buckets, [&](const auto& entry) {
    if (!(entry.first.key == key)) return false;
    dropped += weight_of(entry.first.gran);
    return true;
  });
  // Under the shard's lock, as in add() and take_all(), so the count never wraps.
  keys_.fetch_sub(dropped, std::memory_order_relaxed);
  // max_abs stays an upper bound; first_arrival stays as it is (an older time, which
  // only makes the oldest-age gauge err on the safe side until the next take).
  return delta;
}

void pending_store::pending_buckets(const counter_key& key, granularity g, std::int64_t from,
                                    std::int64_t to,
                                    std::vector<std::pair<std::int64_t, std::int64_t>>& out) const {
  const auto hash = hash_of(key);
  const shard& s = shards_[shard_of(hash)];
  util::lock_guard lock(s.mutex);
  if (s.buckets.empty() || from > to) return;
  // An entry's bucket of granularity `g`, if it has one (see hour_and_day).
  const auto as_g = [g](const bucket_key& k) -> std::optional<std::int64_t> {
    if (k.gran == g) return k.bucket;
    if (k.gran == hour_and_day) return bucket_start(g, k.bucket);
    return std::nullopt;
  };
  const auto add = [&](const bucket_key& k, std::int64_t delta) {
    const auto b = as_g(k);
    if (b && *b >= from && *b <= to) out.emplace_back(*b, delta);
  };
  // Whichever is shorter under the shard's lock: a look-up per bucket of the range (and
  // per hour of it, for the hours held for both granularities), or a scan of the
  // shard's buckets.
  const std::int64_t step = seconds_of(g);
  const std::int64_t first = bucket_start(g, std::max<std::int64_t>(from, 0));
  const std::uint64_t points = static_cast<std::uint64_t>((to - first) / step) + 1;
  const std::uint64_t hours_per_point = static_cast<std::uint64_t>(step / 3600);
  if (points * (1 + hours_per_point) < s.buckets.size()) {
    for (std::int64_t b = first; b <= to; b += step) {
      if (b < from) continue;
      if (const auto it = s.buckets.find(bucket_key{key, g, b, hash}); it != s.buckets.end())
        out.emplace_back(b, it->second);
      for (std::int64_t h = b; h < b + step; h += 3600) {
        const auto it = s.buckets.find(bucket_key{key, hour_and_day, h, hash});
        if (it != s.buckets.end()) out.emplace_back(b, it->second);
      }
    }
    return;
  }
  for (const auto& [k, delta] : s.buckets) {
    if (k.key == key) add(k, delta);
  }
}

std::optional<pending_store::clock::time_point> pending_store::oldest() const {
  std::optional<clock::time_point> oldest;
  for (std::size_t i = 0; i < shard_count_; ++i) {
    const shard& s = shards_[i];
    util::lock_guard lock(s.mutex);
    const auto& a = s.first_arrival;
    if (a && (!oldest || *a < *oldest)) oldest = a;
  }
  return oldest;
}

}  // namespace slotted::store
