// The writer of the log reader (source_state.hpp): the batch one pass commits (counts
// and the new position in one transaction, db::apply) and what a commit
// records.

#include <algorithm>
#include <chrono>
#include <random>

#include "logs/source_state.hpp"

namespace slotted::logs {

namespace {

std::vector<db::counter_row> sorted_rows(const pass_counts& pass, std::uint16_t slot) {
  std::vector<db::counter_row> rows;
  rows.reserve(pass.totals.size());
  for (const auto& [k, n] : pass.totals) rows.push_back({k.record_type, k.record_id, slot, n});
  std::sort(rows.begin(), rows.end(), store::counter_order);
  return rows;
}

// Hour rows then day rows, each sorted by (record_type, record_id, bucket).
std::vector<store::bucket_row> bucket_rows_of(const pass_counts& pass, std::uint16_t slot) {
  std::vector<store::bucket_row> bucket_rows;
  for (const auto g : store::all_granularities)
    for (const auto& [k, n] : pass.buckets)
      if (k.gran == g) bucket_rows.push_back({k.record_type, k.record_id, g, k.bucket, slot, n});
  return bucket_rows;
}

}  // namespace

void make_batch(const source_state& s, const ingest_settings& settings, const pass_counts& pass,
                const log_position& to, pass_batch& out) {
  // Seeded with 128 bits: two processes drawing the same tags is out of reach.
  thread_local std::mt19937_64 rng = [] {
    std::random_device rd;
    std::seed_seq seed{rd(), rd(), rd(), rd()};
    return std::mt19937_64(seed);
  }();
  const auto slot = static_cast<std::uint16_t>(
      std::uniform_int_distribution<unsigned>(0, settings.slots - 1)(rng));
  out.uniques.assign(pass.uniques.begin(), pass.uniques.end());
  out.rows = sorted_rows(pass, slot);
  out.buckets = bucket_rows_of(pass, slot);
  out.set = {.guard = db::position_guard{settings.instance_id, s.cfg.path, s.committed, to},
             .rows = out.rows,
             .buckets = out.buckets,
             .uniques = out.uniques,
             .slot = slot,
             .mark_gen = rng() & 0x7fffffffffffffffull};
  out.rules = {.table = settings.table,
               .buckets = &settings.buckets,
               .top = &settings.top,
               .dedupe = &settings.dedupe,
               // The counters rolled up into their owning tables, among those written.
               .marks =
                   [&settings, &dirty = out.dirty](std::span<const db::counter_row> rows) {
                     dirty.clear();
                     for (const auto& r : rows) {
                       if (std::any_of(settings.counters.begin(), settings.counters.end(),
                                       [&](const config::counter_decl& c) {
                                         return c.record_type == r.record_type && c.rollup;
                                       }))
                         dirty.push_back(r);
                     }
                     return std::span<const db::counter_row>(dirty);
                   },
               .max_rows = settings.max_rows_per_statement};
}

void record_commit(source_state& s, const pass_counts& pass, const log_position& to) {
  s.committed = to;
  for (int o = 0; o < outcome_count_; ++o)
    if (pass.tally[o] > 0) s.lines[o]->Increment(static_cast<double>(pass.tally[o]));
  s.last_commit->Set(static_cast<double>(std::chrono::duration_cast<std::chrono::seconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count()));
}

}  // namespace slotted::logs
