#pragma once
// The write-ahead log as the daemon runs it: wal::write_ahead_log (which sees bytes, a
// directory and an observer) in wal.dir, its figures in the daemon's metrics, and its
// config beside it for the committer (the fsync mode).

#include <chrono>
#include <cstddef>
#include <utility>

#include "config/config.hpp"
#include "metrics/metrics.hpp"
#include "wal/wal.hpp"

namespace slotted::durable {

// The log's figures as the daemon's metrics.
class wal_metrics final : public wal::observer {
 public:
  explicit wal_metrics(metrics::registry& m) : metrics_(m) {}
  void torn_tail_cut() override { metrics_.wal_torn_tails.Increment(); }
  void synced(std::chrono::duration<double> took) override {
    metrics_.wal_fsync_duration_seconds.Observe(took.count());
  }
  void data_sync_failed() override { metrics_.wal_data_sync_failures.Increment(); }
  void directory_sync_failed() override { metrics_.wal_directory_sync_failures.Increment(); }
  void size_changed(std::size_t bytes) override {
    metrics_.wal_bytes.Set(static_cast<double>(bytes));
  }
  metrics::registry& registry() const { return metrics_; }

 private:
  metrics::registry& metrics_;
};

// Members, not bases: the observer is built before the log and destroyed after it, so
// the log's last sync (in its destructor) reports to a whole object.
class daemon_log final {
 public:
  daemon_log(config::wal_config cfg, metrics::registry& m)
      : observer_(m), log_(cfg.dir, observer_), cfg_(std::move(cfg)) {}
  wal::write_ahead_log& log() { return log_; }
  const config::wal_config& config() const { return cfg_; }
  metrics::registry& metrics() const { return observer_.registry(); }

 private:
  wal_metrics observer_;
  wal::write_ahead_log log_;
  config::wal_config cfg_;
};

}  // namespace slotted::durable
