#include "metrics/metrics.hpp"

#include <prometheus/text_serializer.h>

#include "metrics/log_metrics.hpp"
#include "version.hpp"

namespace slotted::metrics {

namespace {
using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

// HTTP handling is sub-millisecond when healthy; flush and rollup statements take from
// about a millisecond to seconds.
const prometheus::Histogram::BucketBoundaries http_buckets{
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025,   0.05,   0.1,     0.25,   0.5,   1,      2.5,   10};
const prometheus::Histogram::BucketBoundaries db_buckets{
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
const prometheus::Histogram::BucketBoundaries group_buckets{1, 2, 4, 8, 16, 32, 64, 128, 256, 1024};
const prometheus::Histogram::BucketBoundaries fsync_buckets{
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1};

template <typename Builder>
auto& family(Builder b, prometheus::Registry& r, const char* name, const char* help) {
  return b.Name(name).Help(help).Register(r);
}

// One series of a family. Registering a name again returns the family registered
// first, so two series of one family (flushes_total{result}) each come through here.
prometheus::Counter& counter(prometheus::Registry& r, const char* name, const char* help,
                             const prometheus::Labels& labels = {}) {
  return family(BuildCounter(), r, name, help).Add(labels);
}
prometheus::Gauge& gauge(prometheus::Registry& r, const char* name, const char* help,
                         const prometheus::Labels& labels = {}) {
  return family(BuildGauge(), r, name, help).Add(labels);
}
prometheus::Histogram& histogram(prometheus::Registry& r, const char* name, const char* help,
                                 const prometheus::Histogram::BucketBoundaries& buckets) {
  return family(BuildHistogram(), r, name, help).Add({}, buckets);
}

// One series per value of an enumerated label (0 .. N-1), created at start so that every
// one is exported from the first scrape on, and found by index without a lookup.
template <typename Metric, std::size_t N, typename NameOf>
void label_children(prometheus::Family<Metric>& f, const char* label, NameOf name_of,
                    std::array<Metric*, N>& out) {
  for (std::size_t i = 0; i < N; ++i) out[i] = &f.Add({{label, name_of(i)}});
}
}  // namespace

const char* route_name(route r) {
  static constexpr const char* names[] = {
      "increments", "counters",      "flush", "rollup",    "reset",    "metrics",         "healthz",
      "readyz",     "counters_many", "top",   "not_found", "unparsed", "connection_limit"};
  return names[static_cast<int>(r)];
}

const char* reason_name(reject_reason r) {
  static constexpr const char* names[] = {
      "invalid",       "unauthorized", "too_large",      "unsupported_media_type",
      "pending_limit", "draining",     "wal_unavailable"};
  return names[static_cast<int>(r)];
}

registry::registry()
    : increments_accepted(counter(*registry_, "slotted_counterd_increments_accepted_total",
                                  "Increments answered 202 and queued for the database")),
      pending_keys(gauge(*registry_, "slotted_counterd_pending_keys",
                         "Distinct counters held in memory and not yet written")),
      pending_bytes(gauge(*registry_, "slotted_counterd_pending_bytes",
                          "Memory held by pending entries, as charged against "
                          "flush.max_pending_bytes")),
      pending_oldest_age_seconds(gauge(*registry_, "slotted_counterd_pending_oldest_age_seconds",
                                       "Age of the oldest increment not yet written")),
      flushes_ok(counter(*registry_, "slotted_counterd_flushes_total", "Flush cycles by result",
                         {{"result", "ok"}})),
      flushes_error(counter(*registry_, "slotted_counterd_flushes_total", "Flush cycles by result",
                            {{"result", "error"}})),
      flush_duration_seconds(histogram(*registry_, "slotted_counterd_flush_duration_seconds",
                                       "Duration of flush cycles that wrote rows", db_buckets)),
      flush_rows(counter(*registry_, "slotted_counterd_flush_rows_total",
                         "Counter rows written to the database")),
      flush_statements(counter(*registry_, "slotted_counterd_flush_statements_total",
                               "Upsert statements committed")),
      last_flush_success_timestamp_seconds(
          gauge(*registry_, "slotted_counterd_last_flush_success_timestamp_seconds",
                "Unix time of the last successful flush cycle")),
      batches_already_applied(
          counter(*registry_, "slotted_counterd_flush_batches_already_applied_total",
                  "Retried batches found committed in the ledger and not applied again")),
      rows_refused(counter(*registry_, "slotted_counterd_flush_rows_refused_total",
                           "Counter rows the database refused for their values (out of range) "
                           "and that were dropped")),
      flush_batches_in_flight(
          gauge(*registry_, "slotted_counterd_flush_batches_in_flight",
                "Flush batches being committed now (at most flush.connections)")),
      ready(gauge(*registry_, "slotted_counterd_ready",
                  "1 when the last flush cycle succeeded (database reachable, schema valid) and "
                  "the probe still reaches the database")),
      rollups_ok(counter(*registry_, "slotted_counterd_rollups_total", "Rollup runs by result",
                         {{"result", "ok"}})),
      rollups_error(counter(*registry_, "slotted_counterd_rollups_total", "Rollup runs by result",
                            {{"result", "error"}})),
      rollup_duration_seconds(histogram(*registry_, "slotted_counterd_rollup_duration_seconds",
                                        "Duration of rollup runs", db_buckets)),
      rollup_records(counter(*registry_, "slotted_counterd_rollup_records_total",
                             "Owning rows updated by rollups")),
      rollup_missing_owners(
          counter(*registry_, "slotted_counterd_rollup_missing_owners_total",
                  "Rolled-up counters whose owning row does not exist (skipped)")),
      rollup_rows_refused(counter(
          *registry_, "slotted_counterd_rollup_rows_refused_total",
          "Rollups of a counter whose SUM(count) its owning column cannot hold (skipped, marks "
          "kept)")),
      last_rollup_success_timestamp_seconds(
          gauge(*registry_, "slotted_counterd_last_rollup_success_timestamp_seconds",
                "Unix time of the last successful rollup")),
      wal_bytes(
          gauge(*registry_, "slotted_counterd_wal_bytes", "Bytes in write-ahead log segments")),
      wal_fsync_duration_seconds(histogram(*registry_,
                                           "slotted_counterd_wal_fsync_duration_seconds",
                                           "Duration of write-ahead log syncs", fsync_buckets)),
      wal_torn_tails(counter(*registry_, "slotted_counterd_wal_torn_tails_total",
                             "Incomplete records cut off the end of the WAL at startup")),
      wal_data_sync_failures(counter(*registry_, "slotted_counterd_wal_sync_failures_total",
                                     "Write-ahead log syncs that failed, by what was synced",
                                     {{"sync", "data"}})),
      wal_directory_sync_failures(counter(*registry_, "slotted_counterd_wal_sync_failures_total",
                                          "Write-ahead log syncs that failed, by what was synced",
                                          {{"sync", "directory"}})),
      wal_group_requests(histogram(*registry_, "slotted_counterd_wal_group_requests",
                                   "Requests written to the WAL together, with one write",
                                   group_buckets)),
      http_connections_open(gauge(*registry_, "slotted_counterd_http_connections_open",
                                  "HTTP connections open now (held until closed)")),
      http_connections_rejected(
          counter(*registry_, "slotted_counterd_http_connections_rejected_total",
                  "HTTP connections closed at accept because http.max_connections were open")),
      http_connections_accepted(
          counter(*registry_, "slotted_counterd_http_connections_accepted_total",
                  "HTTP connections accepted (TCP and Unix socket), refused ones not counted")),
      idempotency_requests(
          counter(*registry_, "slotted_counterd_idempotency_requests_total",
                  "POST /v1/increments requests that carried a valid Idempotency-Key")),
      idempotency_replays(counter(*registry_, "slotted_counterd_idempotency_replays_total",
                                  "Keyed requests this instance recognised at ingest as a retry "
                                  "of one it had accepted (answered as then, not applied again)")),
      idempotency_duplicates_dropped(
          counter(*registry_, "slotted_counterd_idempotency_duplicates_dropped_total",
                  "Keyed requests a flush dropped because their key was already committed (by "
                  "this or another instance)")),
      idempotency_conflicts_dropped(
          counter(*registry_, "slotted_counterd_idempotency_conflicts_dropped_total",
                  "Keyed requests a flush dropped because their key was committed with another "
                  "body")),
      idempotency_keys(gauge(*registry_, "slotted_counterd_idempotency_keys",
                             "Idempotency keys this instance remembers (accepted within "
                             "idempotency.window, bounded by idempotency.max_keys)")),
      resets_ok(counter(*registry_, "slotted_counterd_resets_total",
                        "DELETE /v1/counters resets by result: ok (cleared, answered 200) or "
                        "error (nothing changed, answered 503)",
                        {{"result", "ok"}})),
      resets_error(counter(*registry_, "slotted_counterd_resets_total",
                           "DELETE /v1/counters resets by result: ok (cleared, answered 200) or "
                           "error (nothing changed, answered 503)",
                           {{"result", "error"}})),
      buckets_pruned(counter(*registry_, "slotted_counterd_buckets_pruned_total",
                             "Bucket rows (counts per hour or day) deleted by retention")),
      unique_items_accepted(counter(*registry_, "slotted_counterd_unique_items_accepted_total",
                                    "Increments with a client (counters[].dedupe) accepted")),
      unique_items_duplicate(
          counter(*registry_, "slotted_counterd_unique_items_duplicate_total",
                  "Increments with a client found already counted in their window")),
      requests_(family(BuildCounter(), *registry_, "slotted_counterd_http_requests_total",
                       "HTTP requests by route and status code")),
      request_duration_(family(BuildHistogram(), *registry_,
                               "slotted_counterd_http_request_duration_seconds",
                               "Time from a complete request to its response")),
      rejected_(family(BuildCounter(), *registry_, "slotted_counterd_increments_rejected_total",
                       "Increments refused, by reason (a body that could not be parsed counts 1)")),
      db_errors_family_(family(BuildCounter(), *registry_, "slotted_counterd_db_errors_total",
                               "Database errors by kind")),
      autoincrement_family_(
          family(BuildGauge(), *registry_, "slotted_counterd_autoincrement_remaining",
                 "Values left before the counters table's AUTO_INCREMENT column is exhausted "
                 "(absent when it has none)")),
      rollup_adopted_(family(BuildGauge(), *registry_, "slotted_counterd_rollup_adopted",
                             "1 when the counter's owning column is adopted and rolled up, 0 "
                             "while rollup leaves it alone until slotted-counterd --adopt")) {
  add_labelled_children();
}

// The children of the labelled families (one per route, code, reason, kind) and the
// build info.
void registry::add_labelled_children() {
  const auto route_of = [](std::size_t r) { return route_name(static_cast<route>(r)); };
  for (std::size_t r = 0; r < durations_.size(); ++r)
    durations_[r] = &request_duration_.Add({{"route", route_of(r)}}, http_buckets);
  for (std::size_t r = 0; r < requests_by_code_.size(); ++r) {
    for (std::size_t c = 0; c < known_codes.size(); ++c) {
      requests_by_code_[r][c] =
          &requests_.Add({{"route", route_of(r)}, {"code", std::to_string(known_codes[c])}});
    }
  }
  label_children(
      rejected_, "reason", [](std::size_t r) { return reason_name(static_cast<reject_reason>(r)); },
      rejected_by_reason_);
  label_children(
      db_errors_family_, "kind",
      [](std::size_t k) { return db::kind_name(static_cast<db::error_kind>(k)); }, db_errors_);
  gauge(*registry_, "slotted_counterd_build_info", "Build information, value 1",
        {{"version", slotted::version}})
      .Set(1);
}

void registry::set_mysql_hosts(const std::vector<std::string>& names) {
  auto& f = family(BuildGauge(), *registry_, "slotted_counterd_mysql_host_info",
                   "The database host in use (1) among those configured (0)");
  host_info_.clear();
  for (const auto& name : names) host_info_.push_back(&f.Add({{"host", name}}));
}

void registry::set_database_engine(const std::string& section) {
  gauge(*registry_, "slotted_counterd_database_info",
        "The database engine written to, value 1: the config's section, mysql or postgresql",
        {{"engine", section}})
      .Set(1);
}

void registry::rollup_adopted(const std::string& counter, bool adopted) {
  rollup_adopted_.Add({{"counter", counter}}).Set(adopted ? 1 : 0);
}

void registry::mysql_host_in_use(std::size_t index) {
  for (std::size_t i = 0; i < host_info_.size(); ++i) host_info_[i]->Set(i == index ? 1 : 0);
}

void registry::observe_request(route r, unsigned status, double seconds) {
  durations_[static_cast<int>(r)]->Observe(seconds);
  count_answer(r, status);
}

void registry::count_answer(route r, unsigned status) {
  const int ri = static_cast<int>(r);
  for (std::size_t c = 0; c < known_codes.size(); ++c) {
    if (known_codes[c] == status) {
      requests_by_code_[ri][c]->Increment();
      return;
    }
  }
  requests_.Add({{"route", route_name(r)}, {"code", std::to_string(status)}}).Increment();
}

void registry::reject(reject_reason reason, std::size_t increments) {
  rejected_by_reason_[static_cast<int>(reason)]->Increment(static_cast<double>(increments));
}

void registry::set_autoincrement_remaining(std::optional<double> values_left) {
  util::lock_guard lock(autoincrement_mutex_);
  if (!values_left) {
    if (autoincrement_remaining_ != nullptr) autoincrement_family_.Remove(autoincrement_remaining_);
    autoincrement_remaining_ = nullptr;
    return;
  }
  if (autoincrement_remaining_ == nullptr)
    autoincrement_remaining_ = &autoincrement_family_.Add({});
  autoincrement_remaining_->Set(*values_left);
}

std::string registry::serialize() const {
  auto families = registry_->Collect();
  auto process = collect_process_metrics();
  families.insert(families.end(), std::make_move_iterator(process.begin()),
                  std::make_move_iterator(process.end()));
  return prometheus::TextSerializer().Serialize(families);
}

log_metrics::log_metrics(registry& r) : log_metrics(r.prometheus_registry()) {}

log_metrics::log_metrics(prometheus::Registry& p)
    : lines_(family(BuildCounter(), p, "slotted_counterd_log_lines_total",
                    "Access log lines committed, by source and outcome (counted, not_matched, "
                    "malformed, too_old_for_buckets: counted in the total only, too_long, "
                    "rule_error: no longer produced, too_late_for_dedupe: a deduplicated line "
                    "read after its window's margin, not counted)")),
      lag_(family(BuildGauge(), p, "slotted_counterd_log_lag_bytes",
                  "Bytes of the access log (and of its rotated file) behind the committed "
                  "position")),
      last_commit_(family(BuildGauge(), p, "slotted_counterd_log_last_commit_timestamp_seconds",
                          "Unix time of the last committed position of the access log")),
      missing_(family(BuildGauge(), p, "slotted_counterd_log_file_missing",
                      "1 while the access log's path does not exist (or cannot be opened for "
                      "another reason than permissions)")),
      denied_(family(BuildGauge(), p, "slotted_counterd_log_file_denied",
                     "1 while the access log cannot be opened for lack of permission")),
      events_(family(BuildCounter(), p, "slotted_counterd_log_events_total",
                     "Access log events by source and kind: file_lost (the file of the "
                     "committed position is gone before it was read to its end), truncated "
                     "(copytruncate: read again from 0, or found when reopened), commit_error, "
                     "read_error (an I/O error: the pass is read again), open_denied (the log "
                     "cannot be opened for lack of permission), other_instance (the source is "
                     "not read: another instance_id's position names its file)")) {}

counter_handle& log_metrics::lines(const std::string& source, const char* outcome) {
  return lines_.Add({{"source", source}, {"outcome", outcome}});
}
counter_handle& log_metrics::event(const std::string& source, const char* kind) {
  return events_.Add({{"source", source}, {"kind", kind}});
}
gauge_handle& log_metrics::lag(const std::string& source) {
  return lag_.Add({{"source", source}});
}
gauge_handle& log_metrics::last_commit(const std::string& source) {
  return last_commit_.Add({{"source", source}});
}
gauge_handle& log_metrics::missing(const std::string& source) {
  return missing_.Add({{"source", source}});
}
gauge_handle& log_metrics::denied(const std::string& source) {
  return denied_.Add({{"source", source}});
}

}  // namespace slotted::metrics
