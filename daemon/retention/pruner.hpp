#pragma once
// Retention of counts per bucket (README: Counts per bucket): deletes the buckets of each
// counter older than its granularity's retention.
//
// Every period (a quarter of the shortest retention, between 1 s and 1 minute) the
// pruner deletes, per counter and granularity, the rows whose bucket starts before the
// bucket holding now - retention: with {hour: 48h} the hour buckets of the last 48
// hours and the one the cut falls in stay. It deletes in chunks (the keys of the n
// oldest rows read through the (record_type, bucket) index, then deleted through the
// primary key, see db::prune_buckets), each statement committing on its own and locking
// only the rows it deletes, so no lock outlives a chunk and none reaches the buckets
// flushes write; a run deletes at most max_chunks chunks per counter and
// granularity, and the next run comes at once while one was cut short. Every instance
// may prune: they delete the same rows, and a lock conflict between them is retried at
// the next run. Rows deleted are counted in slotted_counterd_buckets_pruned_total.
//
// Thread-safety: its own thread does the work; start() and stop() from one owner.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "db/pool.hpp"
#include "metrics/metrics.hpp"
#include "model/buckets.hpp"
#include "model/result.hpp"
#include "model/top_spec.hpp"
#include "util/worker.hpp"

namespace slotted::retention {

// What one run did; a failure is errc::database_unavailable with the database's text.
struct pruned {
  std::uint64_t rows = 0;  // rows deleted by this run
  bool behind = false;     // a counter had more to delete than one run's chunks
};
using prune_result = result<pruned>;

struct settings {
  std::string table;  // the counters table; the bucket tables are named after it
  store::bucket_spec buckets;
  std::size_t chunk = 10000;
  int max_chunks = 10;
  // This host's clock, unix seconds (tests replace it). A run cuts at the earlier of it
  // and the database's clock: a clock stepped forward on one side (a bad NTP source, a
  // restored VM) must not delete, at once and for good, buckets still inside their
  // retention; a disagreement past a few minutes is logged.
  std::function<std::int64_t()> clock = nullptr;
  // Counters that keep top-N totals (counters[].top): their bucket totals are deleted
  // with their buckets, in one transaction.
  store::top_spec top{};
};

// The period between runs for `buckets` (see above).
std::chrono::milliseconds prune_period(const store::bucket_spec& buckets);

// Deletes `counter`'s buckets of granularity `g` older than its retention at `now`
// (unix seconds) in chunks; returns rows deleted, and sets `behind` when max_chunks
// were all full. `totals`: the counter keeps top-N totals (their bucket totals go with
// the buckets, see db::prune_buckets). Throws db_error.
std::uint64_t prune_counter(db::connection& conn, const std::string& table,
                            const store::bucket_spec::counter& counter, store::granularity g,
                            std::int64_t now, std::size_t chunk, int max_chunks, bool& behind,
                            bool totals = false);

class pruner {
 public:
  pruner(settings s, db::pool& pool, metrics::registry& metrics);

  // Does nothing when no counter keeps buckets.
  void start();
  void stop();

 private:
  prune_result run_once();

  settings settings_;
  db::pool& pool_;
  metrics::registry& metrics_;
  std::optional<std::string> last_error_;  // the last run's failure, logged once
  bool clocks_apart_ = false;              // logged once per episode
  util::worker<prune_result> worker_;
};

}  // namespace slotted::retention
