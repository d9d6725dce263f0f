#include "logs/log_ingest.hpp"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <stdexcept>

#include "db/errors.hpp"
#include "db/repository.hpp"
#include "logs/source_state.hpp"
#include "util/log.hpp"

namespace slotted::logs {

namespace {
// A source whose passes keep failing on an I/O error is logged again this often.
constexpr auto read_error_reminder = std::chrono::minutes(10);
}  // namespace

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

log_ingester::log_ingester(ingest_settings settings, db::pool& pool, metrics::registry& registry)
    : settings_(std::move(settings)), pool_(pool), metrics_(registry) {
  for (const auto& src : settings_.sources) {
    auto s = std::make_unique<source_state>();
    s->cfg = src;
    s->after_listing = &hooks_.after_listing;
    for (const auto& r : src.rules) {
      const auto c =
          std::find_if(settings_.counters.begin(), settings_.counters.end(),
                       [&](const config::counter_decl& d) { return d.name == r.counter; });
      if (c != settings_.counters.end()) s->rules.emplace_back(r, c->record_type);
    }
    for (int o = 0; o < outcome_count_; ++o)
      s->lines[o] = &metrics_.lines(src.path, outcome_names[o]);
    s->lag = &metrics_.lag(src.path);
    s->last_commit = &metrics_.last_commit(src.path);
    s->missing = &metrics_.missing(src.path);
    s->denied = &metrics_.denied(src.path);
    const auto event = [&](const char* kind) { return &metrics_.event(src.path, kind); };
    s->files_lost = event("file_lost");
    s->truncations = event("truncated");
    s->commit_errors = event("commit_error");
    s->read_errors = event("read_error");
    s->open_denied = event("open_denied");
    s->other_instance = event("other_instance");
    sources_.push_back(std::move(s));
  }
}

log_ingester::~log_ingester() {
  stop();
}

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
    util::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
}

void log_ingester::stop() {
  request_stop();
  if (thread_.joinable()) thread_.join();
}

void log_ingester::loop() {
  for (;;) {
    bool more = false;
    try {
      more = run_once();
    } catch (const std::exception& e) {
      // A failure outside a source's own (its report itself failing: out of memory).
      log::warn("log_sources: ", e.what(), "; the pass is tried again");
    }
    util::unique_lock lock(mutex_);
    if (stopping_) return;
    if (more) continue;
    lock.wait_until(wake_, std::chrono::steady_clock::now() + settings_.interval,
                    [&]() REQUIRES(mutex_) { return stopping_; });
    if (stopping_) return;
  }
}

// One pass over the sources due: each reads and commits what it can. A source that fails
// waits its own backoff, read again from its committed position; while it waits, its
// PATH is still looked at each pass (a rotation during an outage holds the new file
// before its name moves on), and the other sources go on at their pace.
bool log_ingester::run_once() {
  bool more = false;
  for (auto& s : sources_) {
    {
      util::lock_guard lock(mutex_);
      if (stopping_) break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now < s->retry_at) {
      try {
        watch_path(*s);
      } catch (const std::exception&) {
        // Looked at again by its next pass, which reports it.
      }
      continue;
    }
    try {
      more = run_source(*s) || more;
      s->read_failing = false;
      s->backoff = std::chrono::milliseconds(0);
    } catch (const names_moved&) {
      // Caught where the rotated files are looked at (made again there); one that got
      // here is a read error as any other, never an end of the reader thread.
      s->read_errors->Increment();
      back_off(*s);
      s->loaded = false;
    } catch (const log_io_error& e) {
      // Never taken for a cut or another file: the same files are read again from the
      // committed position after the backoff.
      s->read_errors->Increment();
      back_off(*s);
      if (!s->read_failing || now - s->read_warned >= read_error_reminder) {
        log::warn("log_sources: ", s->cfg.path, ": ", e.what(), "; read again from the ",
                  "committed position in ", s->backoff.count(), " ms ",
                  "(log_events_total{kind=\"read_error\"}; a file that can never be read, ",
                  "such as a damaged .gz, stops the source until it is moved away: ",
                  "docs/operations.md)");
        s->read_warned = now;
      }
      s->read_failing = true;
      s->loaded = false;
    } catch (const std::exception& e) {
      s->commit_errors->Increment();
      back_off(*s);
      log::warn("log_sources: ", s->cfg.path, ": ", e.what(), "; the lines are read again ",
                "from the committed position in ", s->backoff.count(), " ms");
      // Read again from what the database holds; the files held stay open.
      s->loaded = false;
    }
  }
  return more;
}

void log_ingester::back_off(source_state& s) {
  constexpr std::chrono::milliseconds most(30000);
  s.backoff = std::min(s.backoff.count() == 0 ? settings_.interval : s.backoff * 2, most);
  s.retry_at = std::chrono::steady_clock::now() + s.backoff;
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
    s.committed = lease.use(
        [&](db::connection& c) { return read_position(c, settings_.instance_id, s.cfg.path); });
    const std::string other = s.committed ? std::string() : lease.use([&](db::connection& c) {
      return other_instance_reading(c, settings_.instance_id, s.cfg);
    });
    if (other != s.held_for) {
      if (!other.empty()) {
        s.other_instance->Increment();
        log::error(other);
      } else {
        log::info("log_sources: ", s.cfg.path,
                  ": no other instance's position names its "
                  "file any more; reading it");
      }
      s.held_for = other;
    }
    // A held source looks again at each pass (an operator may move the position), and so
    // does one without a position yet (another instance's file may be unreadable now,
    // told only once it can be read, before any of it is).
    s.loaded = s.held_for.empty() && s.committed.has_value();
    align_with_committed(s);
  }
}

// Counts and position in one transaction; false when the position changed under this
// instance (it is read again from the database).
bool log_ingester::commit_pass(db::pool::lease& lease, source_state& s, const pass_counts& pass,
                               const log_position& to) {
  pass_batch b;
  make_batch(s, settings_, pass, to, b);
  const auto result = lease.use([&](db::connection& c) { return db::apply(c, b.set, b.rules); });
  if (result.outcome == db::commit_outcome::moved) {
    log::warn("log_sources: ", s.cfg.path,
              ": its committed position changed under this instance (another process with "
              "the same instance_id?); reading from the position the database holds");
    s.loaded = false;
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
  if (!s.held_for.empty()) {
    s.files.clear();
    return false;
  }
  if (s.files.empty() && !open_source_files(s)) return false;
  watch_path(s);

  // The file as it is before reading: checked again before the commit.
  auto& read = s.files.front();
  file_snapshot before;
  if (!read.file->snapshot(before))
    throw log_io_error(read.name + ": fstat/read failed: " + std::strerror(errno));
  const auto cut = detect_truncation(s, before);
  if (cut == truncation::copy_first) return true;
  const bool truncated = cut == truncation::cut;
  pass_counts pass = read_lines(s, settings_, before.size, truncated);
  if (hooks_.after_read) hooks_.after_read();
  const rotation_check rot = check_rotation(s, before, pass);
  log_position to;
  position_after(s, rot, pass, to);

  file_snapshot after;
  if (!read.file->snapshot(after))
    throw log_io_error(read.name + ": fstat/read failed: " + std::strerror(errno));
  if (!still_same_file(before, after)) {
    // Cut while read: nothing of this pass is committed. A copytruncate copied its lines
    // up to the cut: that copy (its first bytes those the pass saw) is read first, from
    // read_from; the next pass could not tell it by the committed position (there may be
    // none yet: a first pass over the file).
    if (!read.file->compressed() &&
        hold_copy_first(
            s, [&](const std::string& head) { return same_start(head, before.head); }, s.read_from,
            !truncated && s.resume_skipping)) {
      s.truncations->Increment();
      if (s.committed && s.committed->file.dev == before.dev && s.committed->file.ino == before.ino)
        s.cut_warned = s.committed->file;
      // Held as it is after the cut: the look at the waiting files does not take this
      // cut for another.
      auto& cut = s.files[1];
      cut.size = after.size;
      cut.head = after.head;
      return true;
    }
    log::warn("log_sources: ", read.name, " changed under the reader (truncated?); the ",
              "pass is dropped and read again");
    return true;  // read_from unchanged: the next pass sees the truncation
  }
  if (s.committed && *s.committed == to) {
    s.lag->Set(lag_behind(s, before.size, pass.end));
    return false;
  }
  if (!commit_pass(lease, s, pass, to)) return false;
  s.lag->Set(lag_behind(s, before.size, pass.end));
  return advance_after_commit(s, pass, rot, before.size, truncated);
}

std::string other_instance_reading(db::connection& conn, const std::string& instance,
                                   const config::log_source& src) {
  const auto here = inodes_of(src);
  for (const auto& other : positions_of_others(conn, instance, src.path, here)) {
    // At offset 0 a position refuses only when it names its file by its first bytes:
    // one taken while the file was empty names it by device and inode alone, which a
    // file made since may have been given (ext4 and XFS reuse inode numbers), and
    // refusing on that would stop a start for a file no one read.
    const bool at_zero = other.position.offset == 0;
    if (at_zero && other.position.file.head_len == 0) continue;
    const std::string at = where_is(src, other.position);
    if (at.empty()) continue;
    // At offset 0 of PATH nothing of it was counted, and this instance's first start
    // reads PATH from its start: right. At offset 0 of a file rotated since, the files
    // before it were counted and it was not; this instance would read PATH alone and
    // never it: refused as any other position is.
    if (at_zero && at == src.path) continue;
    return "log_sources: " + src.path + ": this instance (instance_id '" + instance +
           "') has no position for it, but instance_id '" + other.instance_id + "' counted " + at +
           " up to byte " + std::to_string(other.position.offset) +
           " (the same device, inode and first bytes): reading it from byte 0 would count "
           "those lines again, so it is not read. Was the host or container renamed? Set "
           "instance_id: " +
           other.instance_id + " in the config (and restart), or move the position: " +
           db::positions_move_statement(other.instance_id, instance) +
           " (only once that instance is stopped for good); see docs/configuration.md, "
           "Counting from access logs";
  }
  return "";
}

void check_other_instances(db::connection& conn, const std::string& instance,
                           const std::vector<config::log_source>& sources) {
  for (const auto& src : sources) {
    if (read_position(conn, instance, src.path)) continue;
    const std::string other = other_instance_reading(conn, instance, src);
    if (!other.empty()) throw other_instance_error(other);
  }
}

}  // namespace slotted::logs
