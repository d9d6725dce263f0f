#include "db/adoption.hpp"

#include <algorithm>
#include <string_view>

#include "db/errors.hpp"
#include "db/sql.hpp"
#include "util/decimal.hpp"

namespace slotted::db {

std::optional<adoption_state> read_adoption(connection& conn, const rollup_target& t, bool lock) {
  const auto rows = conn.query(state_select(t, lock));
  if (rows.empty()) return std::nullopt;
  if (rows.size() > 1) {
    // Rows that differ only in the count column's case: an earlier build keyed them as
    // spelled, and the column was adopted twice. Which one holds is not known.
    throw db_error(error_class::fatal,
                   "table `" + std::string(adoptions_table) + "` has " +
                       std::to_string(rows.size()) + " rows for record_type " +
                       std::to_string(t.record_type) + ", `" + t.table + "`.`" + t.count_column +
                       "` that differ only in the column's case (adopted more than once); keep "
                       "the right one, delete the others, and check the counter's history");
  }
  const auto& r = rows[0];
  adoption_state s;
  s.state = r[0].value_or("");
  s.mode = r[1].value_or("");
  if (r[2]) s.last_id = std::stoull(*r[2]);
  s.rows = r[3].value_or("0");
  s.total = r[4].value_or("0");
  return s;
}

namespace {
// A decimal integer's digits above `max` (a sign is not a digit: callers test it first).
bool above(std::string_view v, std::uint64_t max) {
  while (v.size() > 1 && v.front() == '0') v.remove_prefix(1);  // ZEROFILL comes padded
  const std::string m = std::to_string(max);
  return v.size() > m.size() || (v.size() == m.size() && v > m);
}

}  // namespace

std::string owning_row_refusal(const rollup_target& t, const row_limits& limits,
                               const result_row& row) {
  const std::string id = row.size() > 0 && row[0] ? *row[0] : "NULL";
  const std::string count = row.size() > 1 && row[1] ? *row[1] : "NULL";
  std::string why;
  if (id == "NULL") {
    why = "its id is NULL";
  } else if (id.starts_with('-') || above(id, limits.max_id)) {
    why = "its id is outside the counter's range (0 to " + std::to_string(limits.max_id) +
          ", the counters table's record_id column)";
  } else if (count == "NULL") {
    why = "its count is NULL";
  } else if (count.starts_with('-')) {
    why = "its count is negative";
  } else {
    why = "its count is larger than a slot row takes (at most " + std::to_string(limits.max_count) +
          ", the counters table's count column)";
  }
  return "owning row `" + t.table + "`.`" + t.id_column + "` = " + id + " (`" + t.count_column +
         "` = " + count + "): " + why + "; fix the row and run --adopt " + t.counter + " again";
}

namespace {
// An exact sum the server printed (DECIMAL; at most batch_rows counts of 64 bits each).
__int128 digits_of(std::string_view v) {
  __int128 out = 0;
  for (const char c : v) {
    if (c < '0' || c > '9') break;
    out = out * 10 + (c - '0');
  }
  return out;
}

// A batch of a counter that keeps top-N totals: its owning rows read once and checked,
// then given to apply as slot 0 of their counters, so that the slot rows and the totals
// are written from the same values. A slot row's count is an int64 (counter_row) whatever
// the column holds.
void take_rows_once(connection& conn, const adoption_guard& g, const id_range& range,
                    adoption_claim& claim, std::optional<std::uint64_t>& last_id) {
  row_limits limits = g.limits;
  limits.max_count = std::min<std::uint64_t>(limits.max_count, INT64_MAX);
  for (const auto& row : conn.query(batch_rows_select(g.target, range))) {
    const auto bad = [&](const std::optional<std::string>& v, std::uint64_t max) {
      return !v || v->empty() || v->starts_with('-') || above(*v, max);
    };
    if (row.size() < 2 || bad(row[0], limits.max_id) || bad(row[1], limits.max_count))
      throw adoption_refused(owning_row_refusal(g.target, limits, row));
    const std::uint64_t id = std::stoull(*row[0]), count = std::stoull(*row[1]);
    if (!range.upto) last_id = id;  // in id order: the last batch ends at its largest id
    if (count == 0) continue;
    claim.rows.push_back({g.target.record_type, id, 0, static_cast<std::int64_t>(count)});
    claim.total += count;
  }
  claim.taken = claim.rows.size();
}
}  // namespace

std::optional<adoption_claim> claim_adoption(connection& conn, const adoption_guard& g,
                                             std::string_view counters_table, bool with_top) {
  const auto& t = g.target;
  const auto s = read_adoption(conn, t, true);
  if (!s) {
    // Fatal: a rerun would start from no cursor and take every committed batch again.
    throw db_error(error_class::fatal,
                   "the adoption row of counter '" + t.counter + "' (record_type " +
                       std::to_string(t.record_type) + ", `" + t.table + "`.`" + t.count_column +
                       "`) was deleted while it ran; do NOT run --adopt again (it would take the "
                       "rows already taken a second time): restore the row");
  }
  if (s->state == "done") {
    conn.execute(rollback);
    return std::nullopt;
  }
  id_range range{s->last_id, std::nullopt};
  if (const auto up = conn.query(batch_upper_select(t, s->last_id, g.batch_rows));
      !up.empty() && up[0][0])
    range.upto = std::stoull(*up[0][0]);
  adoption_claim claim;
  std::optional<std::uint64_t> last_id = range.upto;
  if (with_top) {
    take_rows_once(conn, g, range, claim, last_id);
  } else {
    // The batch checked again (the table may have changed since the validation), then
    // taken by the server.
    const auto check = conn.query(batch_check_select(t, g.limits, range));
    if (check.empty() || check[0].size() < 4)
      throw db_error(error_class::other, "no answer to a batch's check");
    if (std::stoull(check[0][0].value_or("0")) > 0) {
      const auto bad = conn.query(first_bad_row_select(t, g.limits, range));
      throw adoption_refused(bad.empty() ? "an owning row changed while it was checked"
                                         : owning_row_refusal(t, g.limits, bad[0]));
    }
    claim.taken = std::stoull(check[0][1].value_or("0"));
    claim.total = digits_of(check[0][2].value_or("0"));
    if (!range.upto && check[0][3]) last_id = std::stoull(*check[0][3]);
    if (claim.taken > 0) conn.execute(take_batch_insert(conn.sql(), counters_table, t, range));
  }
  claim.last = !range.upto;
  conn.execute(
      state_advance(conn.sql(), t, last_id, claim.taken, util::decimal(claim.total), claim.last));
  return claim;
}

}  // namespace slotted::db
