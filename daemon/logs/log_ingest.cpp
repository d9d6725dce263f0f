#include "logs/log_ingest.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <random>
#include <tuple>
#include <unordered_map>

#include "model/errors.hpp"
#include "db/repository.hpp"
#include "logs/line_parser.hpp"
#include "db/log_positions.hpp"
#include "model/counter_key.hpp"
#include "util/log.hpp"

namespace slotted::logs {

ingest_settings ingest_settings_for(const config::daemon_config& cfg) {
  ingest_settings s;
  s.instance_id = cfg.instance_id;
  s.table = cfg.mysql.table;
  s.sources = cfg.log_sources;
  s.counters = cfg.counters;
  s.buckets = config::bucket_spec_of(cfg);
  s.slots = cfg.flush.slots;
  s.interval = std::chrono::duration_cast<std::chrono::milliseconds>(cfg.flush.interval);
  s.max_rows_per_statement = cfg.flush.max_rows_per_statement;
  return s;
}

namespace {

struct fd_guard {
  int fd = -1;
  fd_guard() = default;
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  ~fd_guard() { reset(); }
  void reset(int to = -1) {
    if (fd >= 0) ::close(fd);
    fd = to;
  }
};

bool pread_all(int fd, char* buf, std::size_t n, std::uint64_t off, std::size_t& got) {
  got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, buf + got, n - got, static_cast<off_t>(off + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return true;
}

// The identity of the open file `fd` with the hash of its first min(offset, head_bytes).
bool identity_of(int fd, std::uint64_t offset, file_identity& out) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  out.dev = static_cast<std::uint64_t>(st.st_dev);
  out.ino = static_cast<std::uint64_t>(st.st_ino);
  char head[head_bytes];
  const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(offset, head_bytes));
  std::size_t got = 0;
  if (!pread_all(fd, head, want, 0, got) || got != want) return false;
  out.head_len = static_cast<std::uint32_t>(want);
  out.head_hash = head_hash(std::string_view(head, want));
  return true;
}

// Opens `path` when it is the file `id` names (device, inode and first bytes).
int open_if_same(const std::string& path, const file_identity& id) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  file_identity now;
  if (identity_of(fd, id.head_len, now) && now == id) return fd;
  ::close(fd);
  return -1;
}

}  // namespace

bool snapshot_of(int fd, file_snapshot& out) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  out.dev = static_cast<std::uint64_t>(st.st_dev);
  out.ino = static_cast<std::uint64_t>(st.st_ino);
  out.size = static_cast<std::uint64_t>(st.st_size);
  out.head.resize(static_cast<std::size_t>(std::min<std::uint64_t>(out.size, head_bytes)));
  std::size_t got = 0;
  if (!pread_all(fd, out.head.data(), out.head.size(), 0, got)) return false;
  out.head.resize(got);
  return true;
}

bool still_same_file(const file_snapshot& before, const file_snapshot& after) {
  return after.dev == before.dev && after.ino == before.ino && after.size >= before.size &&
         after.head.size() >= before.head.size() &&
         after.head.compare(0, before.head.size(), before.head) == 0;
}

namespace {

struct bucket_key {
  std::uint32_t record_type;
  std::uint64_t record_id;
  store::granularity gran;
  std::int64_t bucket;
  auto operator<=>(const bucket_key&) const = default;
};

struct key_hash {
  std::size_t operator()(const store::counter_key& k) const {
    return static_cast<std::size_t>((k.record_id * 0x9E3779B97F4A7C15ull) ^ k.record_type);
  }
};

enum outcome {
  counted,
  not_matched,
  malformed,
  too_old_for_buckets,
  too_long,
  rule_error,
  outcome_count_
};
constexpr const char* outcome_names[] = {"counted",  "not_matched", "malformed",
                                         "too_old_for_buckets", "too_long", "rule_error"};

}  // namespace

struct source_state {
  config::log_source cfg;
  std::vector<compiled_rule> rules;
  bool loaded = false;  // `committed` read from the database
  std::optional<log_position> committed;
  fd_guard file;
  std::uint64_t read_from = 0;  // where the open file's unread lines start
  bool on_rotated = false;      // the open file is no longer at PATH
  int quiet_cycles = 0;         // passes the rotated file did not grow, read to its end
  std::uint64_t seen_size = 0;  // the open file's size at the last pass
  bool resume_skipping = false;  // read_from is inside an over-long line: skip to its newline
  std::string next_path;         // the file after the open one when it is done (empty: PATH)
  std::optional<file_identity> lost_warned;  // the lost committed file already reported
  std::uint64_t examined = 0;   // offset up to which malformed lines were logged
  std::size_t logged_malformed = 0;
  bool warned_missing = false;
  prometheus::Counter* lines[outcome_count_]{};
  prometheus::Gauge* lag = nullptr;
  prometheus::Gauge* last_commit = nullptr;
  prometheus::Gauge* missing = nullptr;
  prometheus::Counter* files_lost = nullptr;
  prometheus::Counter* truncations = nullptr;
  prometheus::Counter* commit_errors = nullptr;
};

log_ingester::log_ingester(ingest_settings settings, db::pool& pool,
                           prometheus::Registry& registry)
    : settings_(std::move(settings)),
      pool_(pool),
      lines_(prometheus::BuildCounter()
                 .Name("slotted_counterd_log_lines_total")
                 .Help("Access log lines committed, by source and outcome (counted, not_matched, "
                       "malformed, too_old_for_buckets: counted in the total only, too_long, "
                       "rule_error: a rule's pattern gave up on the line, not counted)")
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
                        "truncated (copytruncate: read again from 0), commit_error")
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
  thread_ = std::thread([this] { loop(); });
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

bool log_ingester::run_source(source_state& s) {
  const std::string& path = s.cfg.path;
  auto lease = pool_.acquire();
  if (!limits_read_) {
    settings_.max_record_id = lease.use([&](db::connection& c) {
      return db::verify_schema(c, settings_.table, false).max_record_id;
    });
    limits_read_ = true;
  }
  if (!s.loaded) {
    s.committed = lease.use([&](db::connection& c) {
      return read_position(c, settings_.instance_id, path);
    });
    s.loaded = true;
    s.file.reset();
  }

  // The file to read and where from.
  if (s.file.fd < 0) {
    s.on_rotated = false;
    s.quiet_cycles = 0;
    s.seen_size = 0;
    s.resume_skipping = false;
    s.next_path.clear();
    if (s.committed) {
      int fd = open_if_same(path, s.committed->file);
      if (fd < 0) {
        fd = open_if_same(path + ".1", s.committed->file);
        s.on_rotated = fd >= 0;
      }
      if (fd < 0) {
        // Two rotations while stopped: the committed file is PATH.2, PATH.1 comes next.
        fd = open_if_same(path + ".2", s.committed->file);
        s.on_rotated = fd >= 0;
        if (fd >= 0) s.next_path = path + ".1";
      }
      if (fd >= 0) {
        s.file.reset(fd);
        s.read_from = s.committed->offset;
      } else {
        const bool dot1 = (fd = ::open((path + ".1").c_str(), O_RDONLY | O_CLOEXEC)) >= 0;
        if (!(s.lost_warned && *s.lost_warned == s.committed->file)) {
          s.lost_warned = s.committed->file;
          s.files_lost->Increment();
          log::warn("log_sources: ", path, ": the file of the committed position (inode ",
                    s.committed->file.ino, ", offset ", s.committed->offset,
                    ") is neither at this path nor at ", path, ".1 or ", path,
                    ".2; lines after that offset of it are lost; reading ",
                    dot1 ? path + ".1" : path, " from its start");
        }
        if (dot1) {
          // The file after the lost one (rotated while stopped), then PATH.
          s.file.reset(fd);
          s.read_from = 0;
          s.on_rotated = true;
        }
      }
    }
    if (s.file.fd < 0) {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        s.missing->Set(1);
        if (!s.warned_missing) {
          log::warn("log_sources: cannot open ", path, ": ", std::strerror(errno),
                    "; counted once it is there");
          s.warned_missing = true;
        }
        return false;
      }
      s.file.reset(fd);
      s.read_from = 0;
    }
    s.missing->Set(0);
    s.warned_missing = false;
  }

  // The file as it is before reading: checked again before the commit.
  file_snapshot before;
  if (!snapshot_of(s.file.fd, before)) throw std::runtime_error(path + ": fstat/read failed");
  struct stat st {};
  st.st_dev = static_cast<dev_t>(before.dev);
  st.st_ino = static_cast<ino_t>(before.ino);
  const auto size = before.size;
  // copytruncate: cut below the position, or its first bytes changed.
  bool truncated = size < s.read_from;
  if (!truncated && s.committed && s.committed->file.dev == static_cast<std::uint64_t>(st.st_dev) &&
      s.committed->file.ino == static_cast<std::uint64_t>(st.st_ino) &&
      s.read_from == s.committed->offset) {
    file_identity now;
    truncated = !identity_of(s.file.fd, s.committed->file.head_len, now) ||
                now != s.committed->file;
  }
  if (truncated) {
    s.truncations->Increment();
    log::warn("log_sources: ", path, " was truncated (size ", size, " below the position ",
              s.read_from, "); reading it again from its start");
    s.read_from = 0;
  }

  // Read and count the complete lines from read_from on.
  std::unordered_map<store::counter_key, std::int64_t, key_hash> totals;
  std::map<bucket_key, std::int64_t> buckets;
  std::uint64_t tally[outcome_count_]{};
  const std::uint64_t limit = std::min<std::uint64_t>(size, s.read_from + settings_.max_batch_bytes);
  std::uint64_t end = s.read_from;  // after the last complete line
  const auto now_s = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  std::vector<char> buf(std::max<std::size_t>(1u << 20, 2 * config::max_log_line_bytes));
  std::size_t held = 0;        // bytes in buf from `end` on
  bool skipping = s.resume_skipping && !truncated;  // inside a line longer than the bound
  std::uint64_t skipped = 0;   // its bytes dropped so far
  std::uint64_t file_pos = s.read_from;
  parsed_line line;
  std::string scratch;
  std::vector<std::pair<const compiled_rule*, std::uint64_t>> matched;
  const auto count_line = [&](std::string_view text, std::uint64_t at_offset) {
    const bool ok = s.cfg.format == config::log_format::combined
                        ? parse_combined(text, line)
                        : parse_json(text, s.cfg.json, line, scratch);
    if (!ok || !line_time_accepted(line.at, now_s)) {
      ++tally[malformed];
      if (at_offset >= s.examined && s.logged_malformed < 5) {
        ++s.logged_malformed;
        log::warn("log_sources: ", path, ": a line at offset ", at_offset, " does not parse as ",
                  s.cfg.format == config::log_format::combined ? "combined" : "json",
                  "; skipped (slotted_counterd_log_lines_total{outcome=\"malformed\"})");
      }
      return;
    }
    // Every rule first: a line a pattern gives up on counts for none of them.
    matched.clear();
    for (const auto& rule : s.rules) {
      bool failed = false;
      const auto id = rule.match(line, settings_.max_record_id, &failed);
      if (failed) {
        ++tally[rule_error];
        if (at_offset >= s.examined && s.logged_malformed < 5) {
          ++s.logged_malformed;
          log::warn("log_sources: ", path, ": a rule's pattern gives up on the line at offset ",
                    at_offset, " (regex complexity limit); skipped ",
                    "(slotted_counterd_log_lines_total{outcome=\"rule_error\"})");
        }
        return;
      }
      if (id) matched.emplace_back(&rule, *id);
    }
    bool any = false, old = false;
    for (const auto& [rule_p, id] : matched) {
      const auto& rule = *rule_p;
      any = true;
      const store::counter_key key{rule.record_type(), id};
      ++totals[key];
      if (const auto* b = settings_.buckets.find(rule.record_type())) {
        for (const auto g : store::all_granularities) {
          if (!b->keeps(g)) continue;
          if (line.at < now_s - b->retention[static_cast<int>(g)].count()) {
            old = true;
            continue;
          }
          ++buckets[{key.record_type, key.record_id, g, store::bucket_start(g, line.at)}];
        }
      }
    }
    ++tally[!any ? not_matched : old ? too_old_for_buckets : counted];
  };
  while (file_pos < limit) {
    const std::size_t want =
        static_cast<std::size_t>(std::min<std::uint64_t>(buf.size() - held, limit - file_pos));
    std::size_t got = 0;
    if (!pread_all(s.file.fd, buf.data() + held, want, file_pos, got))
      throw std::runtime_error(path + ": read failed: " + std::strerror(errno));
    if (got == 0) break;
    file_pos += got;
    held += got;
    std::size_t start = 0;
    for (;;) {
      const void* nl = std::memchr(buf.data() + start, '\n', held - start);
      if (nl == nullptr) break;
      const std::size_t stop = static_cast<std::size_t>(static_cast<const char*>(nl) - buf.data());
      if (skipping) {
        ++tally[too_long];
        skipping = false;
        end += skipped;
        skipped = 0;
      } else if (stop + 1 - start > config::max_log_line_bytes) {
        ++tally[too_long];
      } else {
        count_line(std::string_view(buf.data() + start, stop - start), end);
      }
      end += stop + 1 - start;
      start = stop + 1;
    }
    // The partial line moves to the front; one past the bound is skipped to its newline.
    const std::size_t rest = held - start;
    if (skipping || rest >= config::max_log_line_bytes) {
      // Its bytes are dropped; `end` stays at the line's start until its newline.
      skipping = true;
      skipped += rest;
      held = 0;
      continue;
    }
    std::memmove(buf.data(), buf.data() + start, rest);
    held = rest;
  }
  // One line longer than the whole batch: skipped as too_long up to here, the rest of it
  // (to its newline) skipped at the next pass.
  bool resume_skipping = false;
  if (skipping && file_pos == limit && limit < size) {
    ++tally[too_long];
    end = file_pos;
    resume_skipping = true;
  }
  s.examined = std::max(s.examined, end);

  // Rotation: the open file read to its end, and PATH is another file (or gone).
  bool switch_to_new = false;
  struct stat now_st {};
  const bool path_exists = ::stat(path.c_str(), &now_st) == 0;
  const bool rotated = !path_exists || now_st.st_dev != st.st_dev || now_st.st_ino != st.st_ino;
  if (rotated && limit == size) {
    // The web server may still write to the old file until it reopens its log: it is
    // left only when it has not grown for two passes and the new one exists. Bytes after
    // its last newline (a write cut short, or the inside of an over-long line) are then
    // one malformed (too_long) line.
    s.quiet_cycles = size == s.seen_size ? s.quiet_cycles + 1 : 0;
    const bool next_exists =
        s.next_path.empty() ? path_exists : ::access(s.next_path.c_str(), R_OK) == 0;
    switch_to_new = next_exists && s.quiet_cycles >= 2;
    if (switch_to_new && end < size) {
      ++tally[skipping ? too_long : malformed];
      log::warn("log_sources: ", path, ": the rotated file ends in ", size - end,
                " bytes without a newline; skipped as one ", skipping ? "too_long" : "malformed",
                " line");
      end = size;
    }
  } else {
    s.quiet_cycles = 0;
  }
  s.seen_size = size;
  s.on_rotated = rotated;

  log_position to;
  if (switch_to_new) {
    const std::string& next = s.next_path.empty() ? path : s.next_path;
    const int fd = ::open(next.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    fd_guard g;
    g.reset(fd);
    if (!identity_of(fd, 0, to.file)) return false;
    to.offset = 0;
  } else {
    if (!identity_of(s.file.fd, end, to.file)) throw std::runtime_error(path + ": read failed");
    to.offset = end;
  }

  // Lag: the open file's bytes past the position, and the new file's when rotated.
  const auto update_lag = [&](std::uint64_t position) {
    double behind = static_cast<double>(size - std::min(size, position));
    if (rotated && path_exists && !switch_to_new) behind += static_cast<double>(now_st.st_size);
    if (switch_to_new) behind = static_cast<double>(now_st.st_size);
    s.lag->Set(behind);
  };

  {
    file_snapshot after;
    if (!snapshot_of(s.file.fd, after) || !still_same_file(before, after)) {
      // Truncated (or replaced) while read: nothing of this pass is committed.
      log::warn("log_sources: ", path, " changed under the reader (truncated?); the pass is ",
                "dropped and read again");
      return true;  // read_from unchanged: the next pass sees the truncation
    }
  }

  if (s.committed && *s.committed == to) {
    update_lag(end);
    return false;
  }

  // The batch: totals sorted (the lock order), one slot drawn for it.
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const auto slot = static_cast<std::uint16_t>(
      std::uniform_int_distribution<unsigned>(0, settings_.slots - 1)(rng));
  std::vector<db::counter_row> rows;
  rows.reserve(totals.size());
  for (const auto& [k, n] : totals) rows.push_back({k.record_type, k.record_id, slot, n});
  std::sort(rows.begin(), rows.end(), [](const db::counter_row& a, const db::counter_row& b) {
    return std::tie(a.record_type, a.record_id) < std::tie(b.record_type, b.record_id);
  });
  std::vector<store::bucket_row> bucket_rows;
  // Hour rows then day rows, each sorted by (record_type, record_id, bucket).
  for (const auto g : store::all_granularities)
    for (const auto& [k, n] : buckets)
      if (k.gran == g) bucket_rows.push_back({k.record_type, k.record_id, g, k.bucket, slot, n});
  std::vector<db::counter_row> dirty;
  for (const auto& r : rows) {
    const bool rolled = std::any_of(settings_.counters.begin(), settings_.counters.end(),
                                    [&](const config::counter_decl& c) {
                                      return c.record_type == r.record_type && c.rollup;
                                    });
    if (rolled) dirty.push_back(r);
  }

  log_batch batch;
  batch.instance_id = settings_.instance_id;
  batch.path = path;
  batch.from = s.committed;
  batch.to = to;
  batch.rows = rows;
  batch.dirty = dirty;
  batch.buckets = bucket_rows;
  batch.dirty_gen = rng() & 0x7fffffffffffffffull;
  batch.max_rows_per_statement = settings_.max_rows_per_statement;
  const auto result = lease.use([&](db::connection& c) {
    return commit_log_batch(c, settings_.table, batch);
  });
  if (result == log_commit::conflict) {
    log::warn("log_sources: ", path,
              ": its committed position changed under this instance (another process with "
              "the same instance_id?); reading from the position the database holds");
    s.loaded = false;
    s.file.reset();
    return false;
  }
  s.committed = to;
  for (int o = 0; o < outcome_count_; ++o)
    if (tally[o] > 0) s.lines[o]->Increment(static_cast<double>(tally[o]));
  s.last_commit->Set(static_cast<double>(
      std::chrono::duration_cast<std::chrono::seconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count()));
  update_lag(end);
  if (switch_to_new) {
    log::info("log_sources: ", path, " was rotated; the old file is read to its end, reading ",
              "the new one from its start");
    s.file.reset();  // the next pass opens the committed identity: the new PATH
    s.examined = 0;
    return true;
  }
  s.read_from = end;
  s.resume_skipping = resume_skipping;
  if (truncated) s.examined = end;
  return end < size && (!skipping || resume_skipping);
}

}  // namespace slotted::logs
