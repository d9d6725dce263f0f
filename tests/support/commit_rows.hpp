#pragma once
// A plain batch of `rows` (sorted by counter) committed as the flusher commits one
// (db::apply), with dirty marks for `marks` and its bucket rows: for the
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
      .table = table,
      .marks = [&](std::span<const db::counter_row>) { return std::span(marks); }};
  return db::apply(conn, db::write_set_of(id, b), rules).outcome;
}

}  // namespace slotted::test
