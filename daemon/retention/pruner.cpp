#include "retention/pruner.hpp"

#include <algorithm>

#include "db/errors.hpp"
#include "db/repository.hpp"
#include "util/log.hpp"

namespace slotted::retention {

std::chrono::milliseconds prune_period(const store::bucket_spec& buckets) {
  std::chrono::milliseconds shortest = std::chrono::minutes(1);
  for (const auto& c : buckets.counters()) {
    for (const auto g : store::all_granularities) {
      if (c.keeps(g))
        shortest = std::min<std::chrono::milliseconds>(shortest, c.retention[static_cast<int>(g)]);
    }
  }
  return std::clamp<std::chrono::milliseconds>(shortest / 4, std::chrono::seconds(1),
                                               std::chrono::minutes(1));
}

std::uint64_t prune_counter(db::connection& conn, const std::string& table,
                            const store::bucket_spec::counter& counter, store::granularity g,
                            std::int64_t now, std::size_t chunk, int max_chunks, bool& behind,
                            bool totals) {
  const std::int64_t cut =
      std::max<std::int64_t>(0, now - counter.retention[static_cast<int>(g)].count());
  const std::int64_t before = store::bucket_start(g, cut);
  std::uint64_t deleted = 0;
  for (int i = 0; i < max_chunks; ++i) {
    const auto n = db::prune_buckets(conn, table, g, counter.record_type, before, chunk, totals);
    deleted += n.deleted;
    if (n.read < chunk) return deleted;
  }
  behind = true;
  return deleted;
}

pruner::pruner(settings s, db::pool& pool, metrics::registry& metrics)
    : settings_(std::move(s)),
      pool_(pool),
      metrics_(metrics),
      worker_([this] { return run_once(); },
              [this](const prune_result& r) {
                // Behind: again soon (the chunks of one run were all full).
                return r && r->behind ? std::chrono::milliseconds(100)
                                      : prune_period(settings_.buckets);
              },
              prune_period(settings_.buckets)) {}

void pruner::start() {
  if (!settings_.buckets.empty()) worker_.start();
}

void pruner::stop() {
  worker_.stop();
}

prune_result pruner::run_once() {
  const std::int64_t local = settings_.clock
                                 ? settings_.clock()
                                 : std::chrono::duration_cast<std::chrono::seconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count();
  pruned done;
  try {
    auto lease = pool_.acquire();
    lease.use([&](db::connection& conn) {
      // The earlier of the two clocks (see settings::clock).
      std::int64_t now = local;
      if (const auto database_now = db::database_clock(conn)) {
        const std::int64_t database = *database_now;
        now = std::min(local, database);
        const bool apart = local - database > 300 || database - local > 300;
        if (apart && !clocks_apart_) {
          log::warn("bucket retention: this host's clock (", local, ") and the database's (",
                    database, ") differ by more than 5 minutes; pruning by the earlier one");
        }
        clocks_apart_ = apart;
      }
      for (const auto& c : settings_.buckets.counters()) {
        for (const auto g : store::all_granularities) {
          if (!c.keeps(g)) continue;
          const auto n =
              prune_counter(conn, settings_.table, c, g, now, settings_.chunk, settings_.max_chunks,
                            done.behind, settings_.top.keeps(c.record_type));
          done.rows += n;
          metrics_.buckets_pruned.Increment(static_cast<double>(n));
        }
      }
    });
  } catch (const db::db_error& e) {
    metrics_.db_error(e.kind());
    const std::string why = e.what();
    if (why != last_error_) {
      // Instances prune the same rows: a lock conflict is retried at the next run.
      log::warn("bucket retention failed (retried at the next run): ", why);
      last_error_ = why;
    }
    return failure(errc::database_unavailable, why);
  }
  if (last_error_) log::info("bucket retention works again");
  last_error_.reset();
  if (done.rows > 0) log::debug("bucket retention: ", done.rows, " rows deleted");
  return done;
}

}  // namespace slotted::retention
