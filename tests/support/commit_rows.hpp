#pragma once
// A plain batch of `rows` (sorted by counter) committed as the flusher commits one
// (db::apply), with dirty marks for `marks` and its bucket rows, and a reset: for the
// tests that write counts without a daemon.

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "db/write_path.hpp"

namespace slotted::test {

inline db::commit_outcome commit_rows(db::connection& conn, const std::string& table,
                                      const db::batch_identity& id,
                                      std::vector<db::counter_row> rows,
                                      const std::vector<db::counter_row>& marks = {},
                                      std::vector<store::bucket_row> buckets = {}) {
  store::flush_batch b;
  b.run_id = id.run_id;
  b.seq = id.seq;
  b.rows = std::move(rows);
  b.bucket_rows = std::move(buckets);
  const db::write_rules rules{
      .table = table, .marks = [&](std::span<const db::counter_row>) { return std::span(marks); }};
  return db::apply(conn, db::write_set_of(id, b), rules).outcome;
}

// A reset of `key` committed as the flusher's reset job commits one (db::apply): its
// bucket rows those `buckets` keeps for it, its totals when `top` keeps it, no mark.
inline db::write_result reset_counter(db::connection& conn, const std::string& table,
                                      const db::batch_identity& id, store::counter_key key,
                                      const store::bucket_spec& buckets = store::no_buckets(),
                                      const store::top_spec& top = store::no_top()) {
  return db::apply(
      conn, {.guard = db::ledger_guard{id, 0}, .reset = key, .mark_gen = db::dirty_gen_of(id)},
      {.table = table, .buckets = &buckets, .top = &top});
}

}  // namespace slotted::test
