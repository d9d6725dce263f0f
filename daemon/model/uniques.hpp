#pragma once
// Unique per client per window (README: HTTP API, `client`; docs/guarantees.md): which
// declared counters count an item that carries a `client` at most once per (counter,
// record_id, client, window), and the entries that decision is made of. Pure; a
// dedupe_spec is immutable once built and shared by every thread.
//
// A window is a UTC hour or day, named by its start in unix seconds, as a bucket is
// (model/buckets.hpp).

#include <compare>
#include <cstdint>
#include <string>
#include <tuple>
#include <unordered_map>

#include "model/buckets.hpp"

namespace slotted::store {

// A client's length, in bytes: 1 to 128 (the uniques table's VARBINARY(128)).
inline constexpr std::size_t max_client_bytes = 128;

// How long after its window ends a unique entry is kept (its row in `<table>_uniques`),
// and how late an item may come for a window: the clock margin of buckets
// (ingest::max_at_ahead_seconds), so that clocks a few seconds apart agree on it.
inline constexpr std::int64_t unique_margin_seconds = 300;

// Whether the window of granularity `g` starting at `window` can still be decided at
// `now` (unix seconds): it ended at most the margin before. Past that, a prune (twice the
// margin) may have taken its decisions. The one rule of every writer (HTTP items, log
// lines, unique batches).
inline bool window_decidable(granularity g, std::int64_t window, std::int64_t now) {
  return window + seconds_of(g) + unique_margin_seconds >= now;
}

// One (counter, window, client) decision, as the store holds it, the flusher writes it
// and the database keeps it. `at`: the time of the first item seen for it (unix seconds;
// the bucket it counts in, for a counter with buckets).
struct unique_entry {
  std::uint32_t record_type = 0;
  std::uint64_t record_id = 0;
  std::int64_t window = 0;  // the window's start
  std::string client;
  std::int64_t at = 0;

  // The table's primary key order, (record_type, window, record_id, client): every
  // writer inserts in it (db/repository.hpp, "Lock order").
  friend bool operator<(const unique_entry& a, const unique_entry& b) {
    return std::tie(a.record_type, a.window, a.record_id, a.client) <
           std::tie(b.record_type, b.window, b.record_id, b.client);
  }
  bool same_key(const unique_entry& o) const {
    return window == o.window && record_type == o.record_type && record_id == o.record_id &&
           client == o.client;
  }
  bool operator==(const unique_entry&) const = default;
};

// Which record types dedupe, by hour or by day (counters[].dedupe).
class dedupe_spec {
 public:
  dedupe_spec() = default;
  void declare(std::uint32_t record_type, granularity g) { by_type_[record_type] = g; }
  bool empty() const { return by_type_.empty(); }
  // The counter's window, granularity::none when it does not dedupe.
  granularity window_of(std::uint32_t record_type) const {
    const auto it = by_type_.find(record_type);
    return it == by_type_.end() ? granularity::none : it->second;
  }
  bool operator==(const dedupe_spec&) const = default;

 private:
  std::unordered_map<std::uint32_t, granularity> by_type_;
};

inline const dedupe_spec& no_dedupe() {
  static const dedupe_spec none;
  return none;
}

}  // namespace slotted::store
