#pragma once
// Unique per client per window (README: HTTP API, `client`; docs/guarantees.md): which
// declared counters count an item that carries a `client` at most once per (counter,
// record_id, client, window), and the entries that decision is made of. Pure; a
// dedupe_spec is immutable once built and shared by every thread.
//
// A window is a UTC hour or day, named by its start in unix seconds, as a bucket is
// (model/buckets.hpp).

#include <algorithm>
#include <compare>
#include <cstdint>
#include <string>
#include <tuple>
#include <unordered_map>

#include "model/buckets.hpp"

namespace slotted::store {

// A client's length, in bytes: 1 to 128 (the uniques table's VARBINARY(128)).
inline constexpr std::size_t max_client_bytes = 128;

// The clock margin of buckets (ingest::max_at_ahead_seconds), so that clocks a few
// seconds apart agree on a window: the prune keeps a window's decisions this much longer
// than its counter's keep.
inline constexpr std::int64_t unique_margin_seconds = 300;

// How long after its window ends a window's decisions are kept (counters[].dedupe_keep):
// an item or a log line that comes up to this late counts once in its own window; one
// later is refused. The default, and the bounds of the key (a keep is rows: see
// docs/operations.md, Sizing).
inline constexpr std::int64_t default_dedupe_keep_seconds = 48 * 3600;
inline constexpr std::int64_t min_dedupe_keep_seconds = unique_margin_seconds;
inline constexpr std::int64_t max_dedupe_keep_seconds = 31 * 86400;

// Whether an item of the window of granularity `g` starting at `window` is accepted at
// `now` (unix seconds): the window ended at most `keep` seconds before. The first check
// of every writer (HTTP items, log lines); a batch then decides only the entries whose
// window's decisions no prune has passed (db::decidable_entries).
inline bool window_decidable(granularity g, std::int64_t window, std::int64_t now,
                             std::int64_t keep) {
  return window + seconds_of(g) + keep >= now;
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

// Which record types dedupe, by hour or by day, and how long each keeps its windows'
// decisions (counters[].dedupe, dedupe_keep).
class dedupe_spec {
 public:
  dedupe_spec() = default;
  void declare(std::uint32_t record_type, granularity g,
               std::int64_t keep_seconds = default_dedupe_keep_seconds) {
    by_type_[record_type] = {g, keep_seconds};
  }
  bool empty() const { return by_type_.empty(); }
  // The counter's window, granularity::none when it does not dedupe.
  granularity window_of(std::uint32_t record_type) const {
    const auto it = by_type_.find(record_type);
    return it == by_type_.end() ? granularity::none : it->second.window;
  }
  // How long its windows' decisions are kept; for a record type that does not dedupe
  // (rows left by an earlier config), the longest keep declared, at least the default.
  std::int64_t keep_of(std::uint32_t record_type) const {
    const auto it = by_type_.find(record_type);
    if (it != by_type_.end()) return it->second.keep;
    std::int64_t longest = default_dedupe_keep_seconds;
    for (const auto& [type, d] : by_type_) longest = std::max(longest, d.keep);
    return longest;
  }
  // Whether an item of `record_type` in the window starting at `window` is accepted at
  // `now` (window_decidable with the counter's window and keep).
  bool accepts(std::uint32_t record_type, std::int64_t window, std::int64_t now) const {
    const auto g = window_of(record_type);
    return g != granularity::none && window_decidable(g, window, now, keep_of(record_type));
  }
  bool operator==(const dedupe_spec&) const = default;

 private:
  struct declared {
    granularity window = granularity::none;
    std::int64_t keep = default_dedupe_keep_seconds;
    bool operator==(const declared&) const = default;
  };
  std::unordered_map<std::uint32_t, declared> by_type_;
};

inline const dedupe_spec& no_dedupe() {
  static const dedupe_spec none;
  return none;
}

}  // namespace slotted::store
