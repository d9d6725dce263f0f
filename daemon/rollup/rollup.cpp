#include "rollup/rollup.hpp"

#include <utility>

#include "adopt/adopt.hpp"
#include "db/errors.hpp"
#include "db/sql.hpp"
#include "util/log.hpp"

namespace slotted::rollup {

roller::roller(settings s, db::pool& pool, metrics::registry& metrics)
    : settings_(std::move(s)),
      targets_(std::exchange(settings_.targets, {})),
      pool_(pool),
      metrics_(metrics),
      worker_([this] { return run_once(); },
              [this](const rollup_result&) { return settings_.interval; }, settings_.interval) {}

// Started even without targets: a reload may declare some. A run without targets
// does nothing (see run_once).
void roller::start() {
  worker_.start();
}

void roller::set_targets(std::vector<db::rollup_target> targets) {
  util::lock_guard lock(targets_mutex_);
  targets_ = std::move(targets);
}

std::vector<db::rollup_target> roller::targets() const {
  util::lock_guard lock(targets_mutex_);
  return targets_;
}

void roller::stop() {
  for (auto& w : worker_.stop()) w(rollup_result(errc::draining, "shutting down"));
}

void roller::request(std::function<void(const rollup_result&)> done) {
  if (targets().empty()) return done(rollup_result(std::size_t{0}));
  if (!worker_.request(done)) done(rollup_result(errc::draining, "shutting down"));
}

namespace {
// Per run, so that a counter refused at every run does not flood the log.
constexpr std::size_t refusals_logged = 10;
}  // namespace

// What one run counts: the owning rows set (by the targets that did roll up, even when
// another failed), and why targets failed.
struct roller::run_tally {
  std::size_t records = 0;
  std::size_t missing = 0;
  std::size_t refused = 0;
  bool no_adoptions_table = false;
  std::vector<std::string> failures;  // each failed target's (or the run's) message

  void fail(std::string why) { failures.push_back(std::move(why)); }
  // The run's result: the records rolled up, or every failure's message, in order.
  rollup_result outcome() const {
    if (failures.empty()) return records;
    std::string joined;
    for (const auto& f : failures) joined += (joined.empty() ? "" : "; ") + f;
    return {errc::database_unavailable, std::move(joined)};
  }
};

rollup_result roller::run_once() {
  const auto targets_now = targets();
  if (targets_now.empty()) return std::size_t{0};
  const auto started = std::chrono::steady_clock::now();
  run_tally tally;
  try {
    roll_up_targets(targets_now, tally);
    if (tally.no_adoptions_table) {
      tally.fail("table `" + std::string(db::adoptions_table) +
                 "` does not exist: no counter is rolled up until slotted-counterd "
                 "--migrate creates it");
    }
  } catch (const db::db_error& e) {
    metrics_.db_error(e.kind());
    tally.fail(e.what());
  }
  rollup_result result = tally.outcome();
  report(result, tally, started);
  return result;
}

void roller::roll_up_targets(const std::vector<db::rollup_target>& targets, run_tally& tally) {
  auto lease = pool_.acquire();
  for (const auto& target : targets) {
    // Each target on its own: one that fails does not starve the ones after it.
    try {
      lease.use([&](db::connection& conn) {
        // Also a target a reload applied while the database was unreachable: one that
        // is missing fails here, for itself alone.
        db::verify_rollup_target(conn, target);
        if (!adopted(conn, target, tally)) return;
        metrics_.rollup_adopted(target.counter, true);
        roll_up(conn, target, tally);
      });
    } catch (const db::db_error& e) {
      if (e.connection_lost()) throw;  // no connection left for the other targets
      metrics_.db_error(e.kind());
      tally.fail("record_type " + std::to_string(target.record_type) + ": " + e.what());
    }
  }
}

bool roller::adopted(db::connection& conn, const db::rollup_target& target, run_tally& tally) {
  const target_key key{target.record_type, target.table, target.count_column};
  if (adopted_.contains(key)) return true;
  const auto state = adopt::check_adopted(conn, target);
  if (state == adopt::adoption::no_table) {
    tally.no_adoptions_table = true;
    metrics_.rollup_adopted(target.counter, false);
    return false;
  }
  if (state == adopt::adoption::not_adopted) {
    metrics_.rollup_adopted(target.counter, false);
    if (skip_logged_.insert(key).second) {
      log::warn("rollup: counter '", target.counter, "' is not rolled up: `", target.table, "`.`",
                target.count_column,
                "` holds counts the daemon did not write, which a rollup would "
                "overwrite; once no other writer of the column is left, run "
                "slotted-counterd --config FILE --adopt ",
                target.counter,
                " (docs/adopting.md). If an earlier slotted-counterd already rolled "
                "this column up, its values are the daemon's: run --adopt ",
                target.counter,
                " --no-history instead (--adopt would count them twice). "
                "Its counts are kept.");
    }
    return false;
  }
  adopted_.insert(key);
  if (skip_logged_.contains(key))
    log::info("rollup: counter '", target.counter, "' is adopted; rolling it up");
  return true;
}

void roller::roll_up(db::connection& conn, const db::rollup_target& target, run_tally& tally) {
  // Bounded to the marks there are now: under steady load new marks keep coming, and a
  // run that chased them would never end (later targets would starve and POST
  // /v1/rollup never answer). Marks past the cursor wait for the next run.
  auto cursor = db::rollup_start(conn, target.record_type);
  while (cursor) {
    const auto chunk =
        db::rollup_chunk(conn, settings_.counters_table, target, settings_.batch_size, *cursor);
    tally.records += chunk.records;
    tally.missing += chunk.missing_owners;
    for (const auto& f : chunk.refused) {
      if (tally.refused++ < refusals_logged) {
        log::error("rollup: counter (", target.record_type, ", ", f.record_id, ") has SUM(count) ",
                   f.sum, ", which `", target.table, "`.`", target.count_column, "` cannot hold (",
                   f.error, "); its owning row is left as it is and it stays marked");
      }
    }
    if (chunk.marks < settings_.batch_size) break;
  }
}

void roller::report(const rollup_result& result, const run_tally& tally,
                    std::chrono::steady_clock::time_point started) {
  if (tally.refused > refusals_logged)
    log::error("rollup: ", tally.refused - refusals_logged, " more counters refused likewise");
  metrics_.rollup_rows_refused.Increment(static_cast<double>(tally.refused));

  metrics_.rollup_records.Increment(static_cast<double>(tally.records));
  metrics_.rollup_missing_owners.Increment(static_cast<double>(tally.missing));
  metrics_.rollup_duration_seconds.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  if (tally.missing > 0)
    log::warn("rollup: ", tally.missing, " counters have no owning row; skipped");
  if (result) {
    metrics_.rollups_ok.Increment();
    metrics_.last_rollup_success_timestamp_seconds.Set(
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
    if (last_error_) log::info("rollup works again");
    last_error_.reset();
  } else {
    metrics_.rollups_error.Increment();
    // Logged once until it changes or the rollup works again.
    const std::string why = result.failed().text();
    if (why != last_error_) log::warn("rollup failed: ", why);
    last_error_ = why;
  }
}

}  // namespace slotted::rollup
