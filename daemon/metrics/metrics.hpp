#pragma once
// Every metric the daemon exports (README: Operations; ops_test checks the names), registered once
// at start. Labels take values from fixed sets only, never from request content, so cardinality is
// bounded.
//
// Thread-safety: all members may be updated from any thread; serialize() may run
// concurrently with updates.

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/errors.hpp"
#include "util/thread_annotations.hpp"

namespace slotted::metrics {

enum class route {
  increments,
  counters,
  flush,
  rollup,
  reset,
  metrics,
  healthz,
  readyz,
  counters_many,  // GET /v1/counters/{t}?ids=...
  top,            // GET /v1/top/{t}
  not_found,
  // Answered by the session before any route: a malformed request, a header too large
  // (400, 431), and a body over the limit of a request whose header was refused too.
  unparsed,
  // The 503 the listener sends to a connection over http.max_connections.
  connection_limit,
  count_
};
const char* route_name(route r);

// Why increments were refused (increments_rejected_total{reason}).
enum class reject_reason {
  invalid,
  unauthorized,
  too_large,
  unsupported_media_type,
  pending_limit,
  draining,
  wal_unavailable,
  count_
};
const char* reason_name(reject_reason r);

// The handles other folders hold and update (Increment, Set), never registering a
// family themselves: the registry below, or log_metrics (metrics/log_metrics.hpp).
using counter_handle = prometheus::Counter;
using gauge_handle = prometheus::Gauge;

class registry {
  // Declared first: every reference member below is initialised from it.
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();

 public:
  registry();
  // For the families registered beside these (log_metrics).
  prometheus::Registry& prometheus_registry() { return *registry_; }

  void observe_request(route r, unsigned status, double seconds);
  // Counts an answer in http_requests_total alone (no duration: answers that never
  // reached a handler, such as the connection limit's 503).
  void count_answer(route r, unsigned status);
  void reject(reject_reason reason, std::size_t increments);
  void db_error(db::error_kind kind) { db_errors_[static_cast<int>(kind)]->Increment(); }
  // slotted_counterd_mysql_host_info{host}: one series per configured host (bounded by
  // the config). Call set_mysql_hosts once, before other threads run; then
  // mysql_host_in_use(i) from any thread marks host i as the one connected to.
  void set_mysql_hosts(const std::vector<std::string>& names);
  // slotted_counterd_database_info{engine}: 1, the config's section ("mysql" or
  // "postgresql") naming the engine the daemon writes to. Once, before other threads run.
  void set_database_engine(const std::string& section);
  void mysql_host_in_use(std::size_t index);
  // slotted_counterd_rollup_adopted{counter}: 1 when the counter's owning column is
  // adopted (rolled up), 0 while the roller leaves it alone (adopt/adopt.hpp).
  void rollup_adopted(const std::string& counter, bool adopted);

  prometheus::Counter& increments_accepted;
  prometheus::Gauge& pending_keys;
  // What is pending, in bytes, as charged against flush.max_pending_bytes.
  prometheus::Gauge& pending_bytes;
  prometheus::Gauge& pending_oldest_age_seconds;
  prometheus::Counter& flushes_ok;
  prometheus::Counter& flushes_error;
  prometheus::Histogram& flush_duration_seconds;
  prometheus::Counter& flush_rows;
  prometheus::Counter& flush_statements;
  prometheus::Gauge& last_flush_success_timestamp_seconds;
  prometheus::Counter& batches_already_applied;
  prometheus::Counter& rows_refused;
  // Batches being committed now, over flush.connections connections at most.
  prometheus::Gauge& flush_batches_in_flight;
  prometheus::Gauge& ready;
  prometheus::Counter& rollups_ok;
  prometheus::Counter& rollups_error;
  prometheus::Histogram& rollup_duration_seconds;
  prometheus::Counter& rollup_records;
  prometheus::Counter& rollup_missing_owners;
  prometheus::Counter& rollup_rows_refused;
  prometheus::Gauge& last_rollup_success_timestamp_seconds;
  prometheus::Gauge& wal_bytes;
  prometheus::Histogram& wal_fsync_duration_seconds;
  prometheus::Counter& wal_torn_tails;
  // WAL syncs that failed: of a segment's data (fdatasync), of the directory (fsync at
  // a segment's creation, or retried before an append while that one fails).
  prometheus::Counter& wal_data_sync_failures;
  prometheus::Counter& wal_directory_sync_failures;
  // Requests per group the committer wrote with one pwrite (README: Design, Durable path).
  prometheus::Histogram& wal_group_requests;
  prometheus::Gauge& http_connections_open;
  prometheus::Counter& http_connections_rejected;
  prometheus::Counter& http_connections_accepted;
  // Idempotency-Key (README: HTTP API, Idempotency-Key).
  prometheus::Counter& idempotency_requests;
  prometheus::Counter& idempotency_replays;
  prometheus::Counter& idempotency_duplicates_dropped;
  prometheus::Counter& idempotency_conflicts_dropped;
  prometheus::Gauge& idempotency_keys;
  // Counter resets (README: HTTP API, Reset), by result.
  prometheus::Counter& resets_ok;
  prometheus::Counter& resets_error;
  // Counts per bucket (README: Counts per bucket): bucket rows deleted by retention.
  prometheus::Counter& buckets_pruned;
  // Unique per client per window (db/uniques.hpp): items with a `client` accepted, and
  // those found duplicate (in this instance's pending set, or in the uniques table as
  // their batch committed).
  prometheus::Counter& unique_items_accepted;
  prometheus::Counter& unique_items_duplicate;

  // slotted_counterd_autoincrement_remaining: the values left before the counters
  // table's AUTO_INCREMENT column is exhausted; nullopt removes the series (the table
  // has none).
  void set_autoincrement_remaining(std::optional<double> values_left);

  // Text exposition format 0.0.4, including the process_* metrics read from /proc.
  std::string serialize() const;

 private:
  void add_labelled_children();
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Family<prometheus::Counter>& rejected_;
  prometheus::Family<prometheus::Counter>& db_errors_family_;
  prometheus::Family<prometheus::Gauge>& autoincrement_family_;
  prometheus::Family<prometheus::Gauge>& rollup_adopted_;
  util::mutex autoincrement_mutex_;
  prometheus::Gauge* autoincrement_remaining_ GUARDED_BY(autoincrement_mutex_) = nullptr;
  std::array<prometheus::Histogram*, static_cast<int>(route::count_)> durations_{};
  std::array<prometheus::Counter*, static_cast<int>(reject_reason::count_)> rejected_by_reason_{};
  std::array<prometheus::Counter*, db::error_kind_count> db_errors_{};
  std::vector<prometheus::Gauge*> host_info_;
  // requests_total children for every status the daemon answers with (http/router.cpp,
  // the session's own 400, 413 and 431, the listener's 503). Another status would still
  // be counted, through a slower lookup.
  static constexpr std::array<unsigned, 13> known_codes{200, 202, 204, 400, 401, 404, 405,
                                                        413, 415, 422, 431, 500, 503};
  std::array<std::array<prometheus::Counter*, known_codes.size()>, static_cast<int>(route::count_)>
      requests_by_code_{};
};

// process_resident_memory_bytes, process_cpu_seconds_total, process_open_fds,
// process_start_time_seconds, process_virtual_memory_bytes, process_max_fds.
std::vector<prometheus::MetricFamily> collect_process_metrics();

}  // namespace slotted::metrics
