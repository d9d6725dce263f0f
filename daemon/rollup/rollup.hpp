#pragma once
// Writes SUM(count) totals back into the owning rows (README: Rollup).
//
// The flusher marks each rolled-up counter dirty in the same transaction that writes
// its delta, so the marks are exactly as durable as the counts: whatever was flushed
// before a restart or a SIGKILL is still marked afterwards and gets rolled up. Every
// rollup.interval (or on request) the roller takes up to rollup.batch_size marks per
// declared counter, sets the owning rows to SUM(count) in one set-based UPDATE, and
// deletes exactly the marks it read (a counter flushed again meanwhile keeps its
// mark). Owning rows that do not exist are skipped and counted, never created.
// A target is rolled up only once adopted (adopt/adopt.hpp check_adopted): until then
// its owning column holds counts the daemon did not write, which a rollup would
// overwrite; it is skipped with its marks kept, logged once per process, and
// slotted_counterd_rollup_adopted{counter} is 0.
//
// Thread-safety: its own thread does the work; request() from any thread.

#include <chrono>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "db/pool.hpp"
#include "db/repository.hpp"
#include "metrics/metrics.hpp"
#include "model/result.hpp"
#include "util/thread_annotations.hpp"
#include "util/worker.hpp"

namespace slotted::rollup {

// A rollup run: the owning rows it set, or why it failed: database_unavailable (the
// database's messages, one per target that failed, joined by "; "), draining.
using rollup_result = result<std::size_t>;

struct settings {
  std::string counters_table;
  std::vector<db::rollup_target> targets;
  std::chrono::milliseconds interval{60000};
  std::size_t batch_size = 500;
};

class roller {
 public:
  roller(settings s, db::pool& pool, metrics::registry& metrics);

  void start();
  void stop();
  // Runs a rollup as soon as the roller is free; `done` gets its result.
  void request(std::function<void(const rollup_result&)> done);
  // Replaces the targets (a config reload); the next run uses them. Thread-safe.
  // Counters flushed before a target was added have no dirty mark: their owning rows
  // are set once they are flushed again.
  void set_targets(std::vector<db::rollup_target> targets);

 private:
  struct run_tally;
  rollup_result run_once();
  // The steps of a run: every target on its own; whether a target is adopted (a column
  // with counts the daemon did not write is not rolled up); its marks rolled up; the
  // run's metrics and log.
  void roll_up_targets(const std::vector<db::rollup_target>& targets, run_tally& tally);
  bool adopted(db::connection& conn, const db::rollup_target& target, run_tally& tally);
  void roll_up(db::connection& conn, const db::rollup_target& target, run_tally& tally);
  void report(const rollup_result& result, const run_tally& tally,
              std::chrono::steady_clock::time_point started);
  std::vector<db::rollup_target> targets() const;

  settings settings_;  // but its targets: targets_
  mutable util::mutex targets_mutex_;
  std::vector<db::rollup_target> targets_ GUARDED_BY(targets_mutex_);
  db::pool& pool_;
  metrics::registry& metrics_;
  std::optional<std::string> last_error_;  // the last failed run's message, logged once
  // Only on the roller's thread: targets found adopted (never asked again), and those
  // whose skipping is logged already. Keyed (record_type, table, count_column).
  using target_key = std::tuple<std::uint32_t, std::string, std::string>;
  std::set<target_key> adopted_, skip_logged_;
  util::worker<rollup_result> worker_;
};

}  // namespace slotted::rollup
