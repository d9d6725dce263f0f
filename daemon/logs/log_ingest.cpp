#include "logs/log_ingest.hpp"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "db/repository.hpp"
#include "logs/source_state.hpp"
#include "model/errors.hpp"
#include "util/log.hpp"

namespace slotted::logs {

ingest_settings ingest_settings_for(const config::daemon_config& cfg) {
  ingest_settings s;
  s.instance_id = cfg.instance_id;
  s.table = cfg.mysql.table;
  s.sources = cfg.log_sources;
  s.counters = cfg.counters;
  s.buckets = config::bucket_spec_of(cfg);
  s.top = config::top_spec_of(cfg);
  s.dedupe = config::dedupe_spec_of(cfg);
  s.slots = cfg.flush.slots;
  s.interval = std::chrono::duration_cast<std::chrono::milliseconds>(cfg.flush.interval);
  s.max_rows_per_statement = cfg.flush.max_rows_per_statement;
  return s;
}

log_ingester::log_ingester(ingest_settings settings, db::pool& pool, prometheus::Registry& registry)
    : settings_(std::move(settings)),
      pool_(pool),
      lines_(prometheus::BuildCounter()
                 .Name("slotted_counterd_log_lines_total")
                 .Help("Access log lines committed, by source and outcome (counted, not_matched, "
                       "malformed, too_old_for_buckets: counted in the total only, too_long, "
                       "rule_error: no longer produced, "
                       "too_late_for_dedupe: "
                       "a deduplicated line read after its window's margin, not counted)")
                 .Register(registry)),
      lag_(prometheus::BuildGauge()
               .Name("slotted_counterd_log_lag_bytes")
               .Help("Bytes of the access log (and of its rotated file) behind the committed "
                     "position")
               .Register(registry)),
      last_commit_(prometheus::BuildGauge()
                       .Name("slotted_counterd_log_last_commit_timestamp_seconds")
                       .Help("Unix time of the last committed position of the access log")
                       .Register(registry)),
      missing_(prometheus::BuildGauge()
                   .Name("slotted_counterd_log_file_missing")
                   .Help("1 while the access log's path does not exist")
                   .Register(registry)),
      events_(prometheus::BuildCounter()
                  .Name("slotted_counterd_log_events_total")
                  .Help("Access log events by source and kind: file_lost (the file of the "
                        "committed position is gone before it was read to its end), "
                        "truncated (copytruncate: read again from 0, or found when reopened), "
                        "commit_error")
                  .Register(registry)) {
  for (const auto& src : settings_.sources) {
    auto s = std::make_unique<source_state>();
    s->cfg = src;
    for (const auto& r : src.rules) {
      const auto c = std::find_if(settings_.counters.begin(), settings_.counters.end(),
                                  [&](const config::counter_decl& d) { return d.name == r.counter; });
      if (c != settings_.counters.end()) s->rules.emplace_back(r, c->record_type);
    }
    const std::map<std::string, std::string> source{{"source", src.path}};
    for (int o = 0; o < outcome_count_; ++o) {
      auto labels = source;
      labels["outcome"] = outcome_names[o];
      s->lines[o] = &lines_.Add(labels);
    }
    s->lag = &lag_.Add(source);
    s->last_commit = &last_commit_.Add(source);
    s->missing = &missing_.Add(source);
    const auto event = [&](const char* kind) {
      auto labels = source;
      labels["kind"] = kind;
      return &events_.Add(labels);
    };
    s->files_lost = event("file_lost");
    s->truncations = event("truncated");
    s->commit_errors = event("commit_error");
    sources_.push_back(std::move(s));
  }
}

log_ingester::~log_ingester() { stop(); }

void log_ingester::start() {
  thread_ = std::thread([this] {
    // A backlog yields the CPU to HTTP: the reader thread alone at nice 10 (nice is per
    // thread on Linux), about a tenth of a core against one busy thread of nice 0, a
    // twentieth against two (bench/RESULTS.md, POSTs while a source catches up), and a
    // whole core when nothing else runs. Named for ps and top.
    ::pthread_setname_np(::pthread_self(), "slotted-logs");
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
    loop();
  });
}

void log_ingester::request_stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
}

void log_ingester::stop() {
  request_stop();
  if (thread_.joinable()) thread_.join();
}

void log_ingester::loop() {
  auto backoff = settings_.interval;
  for (;;) {
    bool more = false;
    bool failed = false;
    try {
      more = run_once();
      backoff = settings_.interval;
    } catch (const std::exception& e) {
      failed = true;
      log::warn("log_sources: ", e.what(), "; the lines are read again from the committed ",
                "position in ", backoff.count(), " ms");
    }
    std::unique_lock lock(mutex_);
    if (stopping_) return;
    if (more && !failed) continue;
    wake_.wait_for(lock, failed ? backoff : settings_.interval, [&] { return stopping_; });
    if (failed) backoff = std::min(backoff * 2, std::chrono::milliseconds(30000));
    if (stopping_) return;
  }
}

bool log_ingester::run_once() {
  bool more = false;
  std::exception_ptr first;
  for (auto& s : sources_) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
    }
    try {
      more = run_source(*s) || more;
    } catch (...) {
      s->commit_errors->Increment();
      // Read again from what the database holds.
      s->loaded = false;
      s->file.reset();
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
  return more;
}

// The committed position of the source (and, at the first pass, the counters table's
// largest record_id), read from the database when not known.
void log_ingester::load_position(db::pool::lease& lease, source_state& s) {
  if (!limits_read_) {
    settings_.max_record_id = lease.use([&](db::connection& c) {
      return db::verify_schema(c, settings_.table, false).max_record_id;
    });
    limits_read_ = true;
  }
  if (!s.loaded) {
    s.committed = lease.use([&](db::connection& c) {
      return read_position(c, settings_.instance_id, s.cfg.path);
    });
    s.loaded = true;
    s.file.reset();
  }
}

// Counts and position in one transaction; false when the position changed under this
// instance (it is read again from the database).
bool log_ingester::commit_pass(db::pool::lease& lease, source_state& s, const pass_counts& pass,
                               const log_position& to) {
  pass_batch b;
  make_batch(s, settings_, pass, to, b);
  b.batch.top = &settings_.top;
  const auto result = lease.use([&](db::connection& c) {
    return commit_log_batch(c, settings_.table, b.batch);
  });
  if (result == log_commit::conflict) {
    log::warn("log_sources: ", s.cfg.path,
              ": its committed position changed under this instance (another process with "
              "the same instance_id?); reading from the position the database holds");
    s.loaded = false;
    s.file.reset();
    return false;
  }
  record_commit(s, pass, to);
  return true;
}

// One pass over one source: reads the complete lines after its committed position and
// commits their counts with the position after them. True when it has more to read at
// once.
bool log_ingester::run_source(source_state& s) {
  auto lease = pool_.acquire();
  load_position(lease, s);
  if (s.file.fd < 0 && !open_source_file(s)) return false;

  // The file as it is before reading: checked again before the commit.
  file_snapshot before;
  if (!snapshot_of(s.file.fd, before)) throw std::runtime_error(s.cfg.path + ": fstat/read failed");
  const bool truncated = detect_truncation(s, before);
  pass_counts pass = read_lines(s, settings_, before.size, truncated);
  const rotation_check rot = check_rotation(s, before, pass);
  log_position to;
  if (!position_after(s, rot, pass.end, to)) return false;

  file_snapshot after;
  if (!snapshot_of(s.file.fd, after) || !still_same_file(before, after)) {
    // Truncated (or replaced) while read: nothing of this pass is committed.
    log::warn("log_sources: ", s.cfg.path, " changed under the reader (truncated?); the ",
              "pass is dropped and read again");
    return true;  // read_from unchanged: the next pass sees the truncation
  }
  if (s.committed && *s.committed == to) {
    s.lag->Set(lag_behind(rot, before.size, pass.end));
    return false;
  }
  if (!commit_pass(lease, s, pass, to)) return false;
  s.lag->Set(lag_behind(rot, before.size, pass.end));
  return advance_after_commit(s, pass, rot, before.size, truncated);
}

}  // namespace slotted::logs
