#include "adopt/adopt.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>
#include <vector>

#include "db/errors.hpp"
#include "db/sql.hpp"
#include "db/sql_adopt.hpp"
#include "db/write_path.hpp"
#include "util/decimal.hpp"

namespace slotted::adopt {

namespace {

using steady = std::chrono::steady_clock;

// Bad input: exit 2, nothing applied.
using bad_input = db::adoption_refused;

std::string describe(const db::rollup_target& t) {
  return "counter '" + t.counter + "' (record_type " + std::to_string(t.record_type) + ", `" +
         t.table + "`.`" + t.count_column + "`)";
}

// The limits owning rows must keep, and the column types checked.
db::row_limits limits_for(db::connection& conn, const std::string& counters_table,
                          const db::rollup_target& t) {
  const auto keys = db::verify_schema(conn, counters_table, true);
  if (!db::table_exists(conn, db::adoptions_table)) {
    throw bad_input("table `" + std::string(db::adoptions_table) +
                    "` does not exist; run slotted-counterd --migrate first");
  }
  db::verify_rollup_target(conn, t);
  db::row_limits limits;
  limits.max_id = keys.max_record_id;
  for (const auto& r : conn.query(conn.sql().columns_select(conn.quote(counters_table)))) {
    if (r[0].value_or("") == "count" && db::is_integer_type(r[1].value_or("")))
      limits.max_count = db::integer_column_max(r[1].value_or(""), r[2].value_or(""));
  }
  const auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
  };
  // Ids must name one owning row each, through an index: with two rows of one id both
  // would be taken into one counter (and the rollup would set both to its sum), and
  // without an index every batch would scan the table.
  std::map<std::string, std::vector<std::string>> unique_indexes;
  for (const auto& r : conn.query(conn.sql().unique_index_columns_select(conn.quote(t.table))))
    unique_indexes[r[0].value_or("")].push_back(r[1].value_or(""));
  const std::vector<std::string> id_only{lower(t.id_column)};
  if (std::none_of(unique_indexes.begin(), unique_indexes.end(),
                   [&](const auto& e) { return e.second == id_only; })) {
    throw bad_input("`" + t.table + "` has no PRIMARY or UNIQUE key on exactly `" + t.id_column +
                    "`: each owning row must be the only one of its id");
  }
  for (const auto& r : conn.query(conn.sql().columns_select(conn.quote(t.table)))) {
    const std::string name = r[0].value_or(""), type = r[2].value_or("");
    if ((name == lower(t.id_column) || name == lower(t.count_column)) &&
        !db::is_integer_type(r[1].value_or(""))) {
      throw bad_input("column `" + t.table + "`.`" + name + "` is " + type +
                      ", not an integer type: it cannot be adopted as a counter's " +
                      (name == lower(t.id_column) ? "record_id" : "count"));
    }
  }
  return limits;
}

struct batch_outcome {
  bool done_before = false;  // the adoption row was 'done' already (another run finished)
  bool last = false;         // this batch finished the adoption
  std::uint64_t rows = 0;
  __int128 total = 0;
};

// One batch in one transaction (adopt.hpp, Mechanism) through the one write of counts:
// its adoption row as guard, its owning rows as slot 0 of their counters, no bucket
// rows, no dirty marks (the roller's own column is what is taken); the totals of top-N
// when the counter keeps them (`with_totals`; db/adoption.hpp claim_adoption).
batch_outcome take_batch(db::connection& conn, const std::string& counters_table,
                         const db::rollup_target& t, const db::row_limits& limits,
                         std::size_t batch_rows, bool with_totals) {
  const store::top_spec top({t.record_type}, store::no_buckets());
  const auto r = db::apply(conn, {.guard = db::adoption_guard{t, limits, batch_rows}},
                           {.table = counters_table, .top = with_totals ? &top : &store::no_top()});
  return {.done_before = r.outcome == db::commit_outcome::already_applied,
          .last = r.last,
          .rows = r.taken,
          .total = r.total};
}

std::string seconds_since(steady::time_point start) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - start).count();
  return std::to_string(ms / 1000) + "." + std::to_string(ms % 1000 / 100) + " s";
}

int adopt_no_history(db::connection& conn, const db::rollup_target& t, std::ostream& out,
                     std::ostream& err) {
  auto s = db::read_adoption(conn, t, false);
  bool recorded = false;
  if (!s) {
    conn.execute(db::state_insert(conn.sql(), t, "done", "no_history"));
    recorded = conn.affected_rows() == 1;
    s = db::read_adoption(conn, t, false);
  }
  if (s && s->state == "done") {
    if (recorded) {
      out << describe(t) << ": recorded as adopted without taking its counts (--no-history); "
          << "the roller sets its owning rows to the counter's totals from now on\n";
    } else {
      out << describe(t) << ": already adopted (" << s->mode << "), nothing changed\n";
    }
    return 0;
  }
  err << "slotted-counterd: --adopt " << t.counter << " --no-history: an adoption of "
      << describe(t) << " with its history is under way (" << (s ? s->rows : "0")
      << " owning rows taken); nothing changed: finish it with --adopt " << t.counter << "\n";
  return 2;
}

int adopt_history(db::connection& conn, const config::daemon_config& cfg,
                  const db::rollup_target& t, const db::row_limits& limits, std::size_t batch_rows,
                  std::ostream& out, std::ostream& err) {
  const auto started = steady::now();
  const auto before = db::read_adoption(conn, t, false);
  if (before && before->state == "done") {
    out << describe(t) << ": already adopted (" << before->mode << "), nothing changed\n";
    return 0;
  }
  // The validation pass: read-only, from the cursor of a run cut short (the rows before
  // it are taken already).
  const db::id_range rest{before ? before->last_id : std::nullopt, std::nullopt};
  const auto v = conn.query(db::validation_select(t, limits, rest));
  const std::uint64_t estimate = v.empty() ? 0 : std::stoull(v[0][0].value_or("0"));
  if (!v.empty() && std::stoull(v[0][1].value_or("0")) > 0) {
    const auto bad = conn.query(db::first_bad_row_select(t, limits, rest));
    if (!bad.empty()) throw bad_input(db::owning_row_refusal(t, limits, bad[0]));
  }
  // Only when there is none: a run cut short left its row, perhaps with the column spelled
  // in another case (the key compares it ignoring case), which an INSERT IGNORE would
  // not see as the same row.
  if (!before) conn.execute(db::state_insert(conn.sql(), t, "running", "history"));
  if (before && before->last_id)
    err << "adopt " << t.counter << ": resuming after owning id " << *before->last_id << "\n";

  std::uint64_t rows = 0, scanned_batches = 0;
  __int128 total = 0;  // of counts of at most INT64_MAX each: exact
  auto last_progress = steady::now();
  bool finished_here = false;
  for (;;) {
    batch_outcome b;
    for (int attempt = 1;; ++attempt) {
      try {
        b = take_batch(conn, cfg.mysql.table, t, limits, batch_rows,
                       config::top_spec_of(cfg).keeps(t.record_type));
        break;
      } catch (const db::db_error& e) {
        // A deadlock or lock wait timeout rolled the batch back whole: again.
        const bool transient =
            e.kind() == db::error_kind::deadlock || e.kind() == db::error_kind::lock_wait_timeout;
        if (!transient || e.connection_lost() || attempt >= 10) throw;
      }
    }
    if (b.done_before) break;
    rows += b.rows;
    total += b.total;
    ++scanned_batches;
    if (b.last) {
      finished_here = true;
      break;
    }
    if (steady::now() - last_progress >= std::chrono::seconds(2)) {
      last_progress = steady::now();
      err << "adopt " << t.counter << ": " << std::min(scanned_batches * batch_rows, estimate)
          << " / " << estimate << " owning rows (" << rows << " with a count taken, "
          << seconds_since(started) << ")\n";
    }
  }
  if (rows == 0 && !finished_here && !(before && before->last_id)) {
    out << describe(t) << ": already adopted, nothing changed\n";
    return 0;
  }
  const auto after = db::read_adoption(conn, t, false);
  out << "adopted " << describe(t) << ": " << rows << " owning rows with a count taken, total "
      << util::decimal(total) << ", in " << seconds_since(started);
  if (!finished_here) out << " (another --adopt run took the rest)";
  if (after) out << "; in all " << after->rows << " rows, total " << after->total;
  out << "\n";
  return 0;
}

}  // namespace

int run(const config::daemon_config& cfg, const options& o,
        const std::function<db::connection()>& connect, std::ostream& out, std::ostream& err) {
  const auto decl =
      std::find_if(cfg.counters.begin(), cfg.counters.end(),
                   [&](const config::counter_decl& c) { return c.name == o.counter; });
  if (decl == cfg.counters.end()) {
    err << "slotted-counterd: --adopt: no counter named '" << o.counter
        << "' is declared in counters[]\n";
    return 2;
  }
  if (!decl->rollup) {
    err << "slotted-counterd: --adopt: counter '" << o.counter
        << "' has no rollup target (counters[].rollup): there is no owning column to adopt\n";
    return 2;
  }
  const db::rollup_target t{decl->record_type, decl->rollup->table, decl->rollup->id_column,
                            decl->rollup->count_column, decl->name};
  std::size_t batch_rows = o.batch_rows;
  // Undocumented, for the tests: small batches make a run long enough to interrupt.
  if (const char* v = std::getenv("SLOTTED_COUNTERD_ADOPT_BATCH_ROWS"); v && std::atoll(v) > 0)
    batch_rows = static_cast<std::size_t>(std::atoll(v));
  try {
    auto conn = connect();
    auto limits = limits_for(conn, cfg.mysql.table, t);
    // A counter with top-N has its rows read and written as int64 counts (db/adoption.hpp):
    // a larger owning count is refused by the validation pass, before anything is taken.
    if (config::top_spec_of(cfg).keeps(t.record_type))
      limits.max_count = std::min<std::uint64_t>(limits.max_count, INT64_MAX);
    if (o.no_history) return adopt_no_history(conn, t, out, err);
    return adopt_history(conn, cfg, t, limits, batch_rows, out, err);
  } catch (const bad_input& e) {
    err << "slotted-counterd: --adopt " << o.counter << ": " << e.what()
        << "; nothing applied in this step (what earlier batches committed stays; "
           "fix the row and run --adopt again to go on)\n";
    return 2;
  } catch (const db::db_error& e) {
    err << "slotted-counterd: --adopt " << o.counter << ": " << e.what()
        << (e.fatal() ? "" : " (what was committed stays; run it again to go on)") << "\n";
    return e.fatal() ? 2 : 1;
  }
}

adoption check_adopted(db::connection& conn, const db::rollup_target& t) {
  std::optional<db::adoption_state> s;
  try {
    s = db::read_adoption(conn, t, false);
  } catch (const db::db_error& e) {
    if (e.no_such_table()) return adoption::no_table;
    throw;
  }
  if (s) return s->state == "done" ? adoption::adopted : adoption::not_adopted;
  if (!conn.query(db::nonzero_select(t)).empty()) return adoption::not_adopted;
  conn.execute(db::state_insert(conn.sql(), t, "done", "zeros"));
  s = db::read_adoption(conn, t, false);
  return s && s->state == "done" ? adoption::adopted : adoption::not_adopted;
}

}  // namespace slotted::adopt
