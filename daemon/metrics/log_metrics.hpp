#pragma once
// The access-log metrics (logs/log_ingest.hpp), registered once for a reader: each
// source's series labelled {source} (its path), handed to logs/ as handles, so that
// logs/ never sees the Prometheus registry.

#include <string>

#include "metrics/metrics.hpp"

namespace slotted::metrics {

class log_metrics {
 public:
  explicit log_metrics(registry& r);

  // slotted_counterd_log_lines_total{source, outcome}
  counter_handle& lines(const std::string& source, const char* outcome);
  // slotted_counterd_log_events_total{source, kind}
  counter_handle& event(const std::string& source, const char* kind);
  gauge_handle& lag(const std::string& source);
  gauge_handle& last_commit(const std::string& source);
  gauge_handle& missing(const std::string& source);
  gauge_handle& denied(const std::string& source);

 private:
  explicit log_metrics(prometheus::Registry& p);
  prometheus::Family<prometheus::Counter>& lines_;
  prometheus::Family<prometheus::Gauge>& lag_;
  prometheus::Family<prometheus::Gauge>& last_commit_;
  prometheus::Family<prometheus::Gauge>& missing_;
  prometheus::Family<prometheus::Gauge>& denied_;
  prometheus::Family<prometheus::Counter>& events_;
};

}  // namespace slotted::metrics
