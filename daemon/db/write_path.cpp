#include "db/write_path.hpp"

#include <mysqld_error.h>

#include <vector>

#include "db/errors.hpp"
#include "db/top.hpp"

namespace slotted::db {

bool claim_ledger(connection& conn, const batch_identity& id, std::size_t row_count) {
  try {
    conn.execute(ledger_insert(conn.quote(id.instance_id), id.run_id, id.seq, row_count));
  } catch (const db_error& e) {
    if (e.code() != ER_DUP_ENTRY) throw;
    conn.execute(rollback);
    return false;
  }
  return true;
}

namespace {
// Each statement `build(first, n)` of [0, count), cut to the budget (in_statements), run.
template <typename Build>
void execute_in_statements(connection& conn, std::size_t count, std::size_t max_rows,
                           const Build& build) {
  in_statements(
      count, conn.max_statement_bytes(), build, [&](const std::string& sql) { conn.execute(sql); },
      max_rows);
}
}  // namespace

void write_counted(connection& conn, const counted_writes& w) {
  // 3. Slot rows.
  execute_in_statements(conn, w.rows.size(), w.max_rows, [&](std::size_t first, std::size_t n) {
    return upsert_statement(w.table, w.rows.subspan(first, n));
  });
  // 4. Bucket rows: hour, then day.
  for (const auto g : store::all_granularities) {
    std::vector<store::bucket_row> of_g;
    for (const auto& r : w.buckets) {
      if (r.gran == g) of_g.push_back(r);
    }
    const std::span<const store::bucket_row> rows(of_g);
    execute_in_statements(conn, rows.size(), w.max_rows, [&](std::size_t first, std::size_t n) {
      return bucket_upsert_statement(w.table, g, rows.subspan(first, n));
    });
  }
  // 5. Totals of top-N, of the counters that keep them.
  if (w.top != nullptr) {
    for (const auto& sql :
         totals_upserts(w.table, w.rows, w.buckets, *w.top, conn.max_statement_bytes()))
      conn.execute(sql);
  }
  // 6. Dirty marks.
  execute_in_statements(conn, w.marks.size(), w.max_rows, [&](std::size_t first, std::size_t n) {
    return dirty_upsert(w.quoted_instance, w.marks.subspan(first, n), w.mark_gen);
  });
}

}  // namespace slotted::db
