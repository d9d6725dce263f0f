#pragma once
// What the flusher's units share (internal to flush/): its clock, the limits of its
// retries and prunes, and two facts about a queued batch.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "db/repository.hpp"
#include "model/batch.hpp"
#include "store/pending_charge.hpp"

namespace slotted::flush {

using clock = std::chrono::steady_clock;
using store::flush_batch;

// The rows of `rows` whose counters are rolled up into an owning table (`rollups`): their
// dirty marks (db::write_rules::marks). A view of `out`, refilled.
inline std::span<const db::counter_row> rolled_up_rows(
    const std::vector<db::rollup_target>& rollups, std::span<const db::counter_row> rows,
    std::vector<db::counter_row>& out) {
  out.clear();
  for (const auto& r : rows) {
    if (std::any_of(rollups.begin(), rollups.end(),
                    [&](const db::rollup_target& t) { return t.record_type == r.record_type; }))
      out.push_back(r);
  }
  return out;
}

// A batch the database refused for its data can be split to find what is at fault: a
// plain batch by its rows, a keyed batch by its requests (each applied whole or not).
inline bool splittable(const flush_batch& b) {
  return std::visit(
      store::overloaded{[&](const store::plain_content&) { return b.rows.size() > 1; },
                        [](const store::keyed_content& k) { return k.requests.size() > 1; },
                        [](const store::unique_content& u) { return u.entries.size() > 1; }},
      b.content);
}

// The entries a queued batch holds against flush.max_pending_keys (see
// store::pending_store::pending_entries): its totals, its bucket counts and, for a keyed
// batch, its keys (a request without increments holds its key all the same); for a
// unique batch, its entries.
inline std::size_t rows_held(const flush_batch& b) {
  return b.rows.size() + b.bucket_rows.size() +
         std::visit(
             store::overloaded{[](const store::plain_content&) -> std::size_t { return 0; },
                               [](const store::keyed_content& k) { return k.requests.size(); },
                               [](const store::unique_content& u) { return u.entries.size(); }},
             b.content);
}
// And its charge against both pending bounds (store/pending_charge.hpp): those entries,
// and the bytes its rows and bucket rows, keyed requests and unique entries are charged.
inline store::pending_charge held_charge(const flush_batch& b) {
  store::pending_charge c{rows_held(b), (b.rows.size() + b.bucket_rows.size()) * store::key_bytes};
  std::visit(store::overloaded{[](const store::plain_content&) {},
                               [&](const store::keyed_content& k) {
                                 for (const auto& r : k.requests)
                                   c.bytes += store::charge_of(r).bytes;
                               },
                               [&](const store::unique_content& u) {
                                 for (const auto& e : u.entries)
                                   c.bytes += store::charge_of(e).bytes;
                               }},
             b.content);
  return c;
}

// The most bytes a row adds to a plain batch's statements: its upsert's tuple (about 60)
// and its dirty mark's (about 190, with a 64-character instance id escaped).
constexpr std::size_t max_row_bytes = 256;

// This run's own ledger rows older than this are pruned, but for those of batches still
// queued (and all while the WAL has not logged every batch committed).
constexpr std::uint64_t ledger_max_age_seconds = 3600;
// ... and the rows of every other run older than this, whoever wrote them (other
// instances, an earlier run of this one, another process sharing its instance_id).
// Longer: only the run that wrote them knows which of its rows it still needs (a batch
// in doubt while it cannot reach the database, a WAL not yet replayed after a crash), so
// they are kept for an outage of up to a day; what an instance that never comes back (a
// container under a new hostname) leaves goes after that.
constexpr std::uint64_t ledger_others_max_age_seconds = 86400;
constexpr auto prune_every = std::chrono::minutes(1);
// Deadlocks and lock wait timeouts are retried within the cycle this many times.
constexpr int lock_retries = 3;
// Below this fraction of its column's range left, the AUTO_INCREMENT headroom is
// logged as a warning (for a seed-style INT id: about 107 million values).
constexpr double autoincrement_warn_fraction = 0.05;

// The stop deadline (flusher::stop's; none until then): no batch is started, no lock wait
// retried and no reset retried past it. Set on the stopping thread while the flusher's
// threads read it, hence atomic.
class stop_deadline {
 public:
  void set(clock::time_point t) { ticks_.store(t.time_since_epoch().count()); }
  clock::time_point when() const { return clock::time_point(clock::duration(ticks_.load())); }
  bool passed() const { return clock::now() >= when(); }

 private:
  std::atomic<clock::rep> ticks_{clock::time_point::max().time_since_epoch().count()};
};

inline double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace slotted::flush
