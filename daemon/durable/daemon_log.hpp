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

namespace detail {
// The log's figures as the daemon's metrics: a base of daemon_log, so that it is built
// before the log that reports to it.
class wal_metrics : public wal::observer {
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

 protected:
  metrics::registry& metrics_;
};
}  // namespace detail

class daemon_log final : private detail::wal_metrics, public wal::write_ahead_log {
 public:
  daemon_log(config::wal_config cfg, metrics::registry& m)
      : detail::wal_metrics(m),
        wal::write_ahead_log(cfg.dir, static_cast<detail::wal_metrics&>(*this)),
        cfg_(std::move(cfg)) {}
  const config::wal_config& config() const { return cfg_; }
  metrics::registry& metrics() const { return metrics_; }

 private:
  config::wal_config cfg_;
};

}  // namespace slotted::durable
