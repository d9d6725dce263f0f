#include "db/write_path.hpp"

#include <tuple>
#include <vector>

#include "db/adoption.hpp"
#include "db/errors.hpp"
#include "db/keys.hpp"
#include "db/top.hpp"
#include "db/uniques.hpp"

namespace slotted::db {

bool claim_ledger(connection& conn, const batch_identity& id, std::size_t row_count) {
  try {
    conn.execute(ledger_insert(conn.quote(id.instance_id), id.run_id, id.seq, row_count));
  } catch (const db_error& e) {
    if (!e.duplicate_key()) throw;
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
    return upsert_statement(conn.sql(), w.table, w.rows.subspan(first, n));
  });
  // 4. Bucket rows: hour, then day.
  for (const auto g : store::all_granularities) {
    std::vector<store::bucket_row> of_g;
    for (const auto& r : w.buckets) {
      if (r.gran == g) of_g.push_back(r);
    }
    const std::span<const store::bucket_row> rows(of_g);
    execute_in_statements(conn, rows.size(), w.max_rows, [&](std::size_t first, std::size_t n) {
      return bucket_upsert_statement(conn.sql(), w.table, g, rows.subspan(first, n));
    });
  }
  // 5. Totals of top-N, of the counters that keep them.
  if (w.top != nullptr) {
    for (const auto& sql :
         totals_upserts(conn.sql(), w.table, w.rows, w.buckets, *w.top, conn.max_statement_bytes()))
      conn.execute(sql);
  }
  // 6. Dirty marks.
  execute_in_statements(conn, w.marks.size(), w.max_rows, [&](std::size_t first, std::size_t n) {
    return dirty_upsert(conn.sql(), w.quoted_instance, w.marks.subspan(first, n), w.mark_gen);
  });
}

namespace {
// `a` and `b` (each sorted by `less`, one row per key) as one sorted list, rows of one
// key added up.
template <typename Row, typename Less>
std::vector<Row> merged(std::span<const Row> a, std::vector<Row>&& b, Less less) {
  if (a.empty()) return std::move(b);
  std::vector<Row> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  std::stable_sort(out.begin(), out.end(), less);
  std::vector<Row> sums;
  for (auto& r : out) {
    if (!sums.empty() && !less(sums.back(), r)) {
      sums.back().delta += r.delta;
    } else {
      sums.push_back(std::move(r));
    }
  }
  return sums;
}

// Hour rows then day rows, each by (record_type, record_id, bucket): the writer's order.
bool bucket_row_less(const store::bucket_row& a, const store::bucket_row& b) {
  return std::tie(a.gran, a.record_type, a.record_id, a.bucket) <
         std::tie(b.gran, b.record_type, b.record_id, b.bucket);
}

// The instance whose marks the set writes (an adoption writes none).
const std::string& instance_of(const write_set& ws) {
  static const std::string none;
  if (const auto* l = std::get_if<ledger_guard>(&ws.guard)) return l->id.instance_id;
  if (const auto* p = std::get_if<position_guard>(&ws.guard)) return p->instance_id;
  return none;
}

// The guard (1): false, having rolled back, when the set is not to be applied. An
// adoption's claim leaves the rows it takes in `claimed`.
bool claim_guard(connection& conn, const write_set& ws, const write_rules& rules, write_result& out,
                 std::vector<counter_row>& claimed) {
  if (const auto* l = std::get_if<ledger_guard>(&ws.guard)) {
    if (claim_ledger(conn, l->id, l->row_count)) return true;
    out.outcome = commit_outcome::already_applied;
    return false;
  }
  if (const auto* p = std::get_if<position_guard>(&ws.guard)) {
    if (claim_position(conn, p->instance_id, p->path, p->from, p->to)) return true;
    out.outcome = commit_outcome::moved;
    return false;
  }
  const auto& a = std::get<adoption_guard>(ws.guard);
  auto taken = claim_adoption(conn, a, rules.table, rules.top->keeps(a.target.record_type));
  if (!taken) {
    out.outcome = commit_outcome::already_applied;
    return false;
  }
  claimed = std::move(taken->rows);
  out.taken = taken->taken;
  out.total = taken->total;
  out.last = taken->last;
  return true;
}
}  // namespace

namespace {
// A reset's 3 to 6, after its guard: the counter's slot rows read locked (3); with top,
// the bucket rows of those slots read locked (4: no other writer writes a bucket row of
// a slot it does not hold); the deletes of sql.hpp reset_statements (slot rows, their
// bucket rows, and without top the mark); with top, the totals lowered by what was
// deleted (5, db::reset_totals_statements) and the mark (6).
void reset_counted(connection& conn, const store::counter_key& key, const write_set& ws,
                   const write_rules& rules, write_result& out) {
  std::vector<std::int64_t> slots;
  for (const auto& row :
       conn.query(reset_rows_select_locked(rules.table, key.record_type, key.record_id))) {
    slots.push_back(static_cast<std::int64_t>(slot_count(row[0])));
    out.cleared += slot_count(row[1]);
  }
  out.cleared_rows = slots.size();
  // Its bucket rows go with it (README: Counts per bucket): the buckets it keeps now.
  std::vector<store::granularity> grans;
  if (const auto* c = rules.buckets->find(key.record_type)) {
    for (const auto g : store::all_granularities)
      if (c->keeps(g)) grans.push_back(g);
  }
  const counter_row mark{key.record_type, key.record_id, 0, 0};
  const bool marked = rules.marks && !rules.marks(std::span(&mark, 1)).empty();
  const std::string instance = conn.quote(instance_of(ws));
  const bool with_top = rules.top->keeps(key.record_type);
  std::vector<store::bucket_row> lost_buckets;
  if (with_top && !slots.empty()) {
    for (const auto g : grans) {
      for (const auto& row :
           conn.query(reset_bucket_sums_select_locked(conn.sql(), rules.table, g, key, slots))) {
        if (!row[0]) continue;
        lost_buckets.push_back({key.record_type, key.record_id, g, std::stoll(*row[0]), 0,
                                -static_cast<std::int64_t>(slot_count(row[1]))});  // BIGINT
      }
    }
  }
  const bool mark_with_deletes = marked && !with_top;
  for (const auto& sql :
       reset_statements(conn.sql(), rules.table, key.record_type, key.record_id, slots, instance,
                        mark_with_deletes ? std::optional(ws.mark_gen) : std::nullopt, grans))
    conn.execute(sql);
  if (!with_top) return;
  for (const auto& sql : reset_totals_statements(rules.table, key, out.cleared, lost_buckets, grans,
                                                 conn.max_statement_bytes()))
    conn.execute(sql);
  if (marked) conn.execute(dirty_upsert(conn.sql(), instance, std::span(&mark, 1), ws.mark_gen));
}
}  // namespace

void apply(connection& conn, const write_set& ws, const write_rules& rules, write_result& out) {
  out = {};
  in_transaction(conn, [&] {
    // 1, 1b, 2: what the adoption, the keys and the unique entries add, under the set's
    // slot.
    std::vector<counter_row> added;
    std::vector<store::bucket_row> added_buckets;
    if (!claim_guard(conn, ws, rules, out, added)) return;
    if (ws.reset) {
      reset_counted(conn, *ws.reset, ws, rules, out);
      out.commit_sent = true;
      conn.execute(commit);
      return;
    }
    if (!ws.keyed.empty()) {
      // Keys are a flush batch's only: its guard is a ledger row (write_set_of).
      auto keys = claim_keys(conn, std::get<ledger_guard>(ws.guard).id, ws.keyed, ws.slot,
                             *rules.buckets, rules.key_window, rules.local_now_ms);
      out.duplicates = keys.duplicates;
      out.conflicts = keys.conflicts;
      added = std::move(keys.rows);
      added_buckets = std::move(keys.buckets);
    } else if (!ws.uniques.empty()) {
      auto uniques = claim_uniques(conn, rules.table, instance_of(ws), ws.uniques, rules.dedupe,
                                   ws.slot, *rules.buckets);
      out.counted = uniques.counted;
      out.duplicates = uniques.duplicates;
      out.too_late = uniques.too_late;
      added = std::move(uniques.rows);
      added_buckets = std::move(uniques.buckets);
    }
    std::span<const counter_row> rows = ws.rows;
    std::span<const store::bucket_row> buckets = ws.buckets;
    if (!added.empty()) {
      added = merged(ws.rows, std::move(added), store::counter_order);
      added_buckets = merged(ws.buckets, std::move(added_buckets), bucket_row_less);
      rows = added;
      buckets = added_buckets;
    }
    // 3 to 6.
    const std::string instance = conn.quote(instance_of(ws));
    write_counted(conn, {.table = rules.table,
                         .rows = rows,
                         .buckets = buckets,
                         .top = rules.top,
                         .marks = rules.marks ? rules.marks(rows) : std::span<const counter_row>{},
                         .quoted_instance = instance,
                         .mark_gen = ws.mark_gen,
                         .max_rows = rules.max_rows});
    out.rows = rows.size();
    out.commit_sent = true;
    conn.execute(commit);
  });
}

write_result apply(connection& conn, const write_set& ws, const write_rules& rules) {
  write_result out;
  apply(conn, ws, rules, out);
  return out;
}

write_set write_set_of(const batch_identity& id, const store::flush_batch& b) {
  write_set ws{.guard = ledger_guard{id, b.rows.size()}, .mark_gen = dirty_gen_of(id)};
  std::visit(store::overloaded{[&](const store::plain_content&) {
                                 ws.rows = b.rows;
                                 ws.buckets = b.bucket_rows;
                               },
                               [&](const store::keyed_content& k) {
                                 // The requests' rows under the slot the batch drew
                                 // (`rows` sums every request's).
                                 ws.keyed = k.requests;
                                 ws.slot = b.rows.empty() ? 0 : b.rows.front().slot;
                               },
                               [&](const store::unique_content& u) {
                                 std::get<ledger_guard>(ws.guard).row_count = u.entries.size();
                                 ws.uniques = u.entries;
                                 ws.slot = u.slot;
                               }},
             b.content);
  return ws;
}

}  // namespace slotted::db
