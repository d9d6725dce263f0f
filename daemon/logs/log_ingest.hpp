#pragma once
// Counting from access logs (docs/configuration.md, log_sources): one thread reads every
// configured log and, each flush interval, commits per source the counts of the lines
// read since its committed position together with the new position, in one
// transaction (positions.hpp). Nothing is held in memory between two commits: after any
// failure the lines are read again from the committed position, so a line is counted
// exactly once whatever happens (a SIGKILL, a lost connection, a database outage).
//
// A file is followed by its identity (positions.hpp file_identity), through a
// descriptor held open (source_state.hpp, log_files.hpp): after a rename rotation (PATH
// renamed, a new PATH opened by the web server) the renamed file is read to its end and
// then the files after it from their start, whatever happened to their names, also
// across failed commits. After a stop the committed file is looked for among PATH and the
// names its rotation scheme gives (log_sources[].rotation), compressed or not. A file cut
// below the position (copytruncate) is read again from 0.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "db/pool.hpp"
#include "metrics/log_metrics.hpp"
#include "model/buckets.hpp"
#include "model/top_spec.hpp"
#include "model/uniques.hpp"
#include "util/thread_annotations.hpp"

namespace slotted::db {
struct log_position;
}  // namespace slotted::db

namespace slotted::logs {

struct ingest_settings {
  std::string instance_id;
  std::string table;
  std::vector<config::log_source> sources;
  std::vector<config::counter_decl> counters;
  store::bucket_spec buckets;
  store::top_spec top;  // counters[].top: their rows are added to the totals of top-N
  // counters[].dedupe: a line with a client counts once per (counter, client, window)
  // (db/uniques.hpp), decided as its pass commits.
  store::dedupe_spec dedupe;
  unsigned slots = 100;
  std::chrono::milliseconds interval{1000};
  std::size_t max_rows_per_statement = 1000;
  // The largest record_id the counters table holds (read from it at the first pass).
  std::uint64_t max_record_id = UINT64_MAX;
  // The bytes one commit reads at most (a backlog is committed in several batches, back
  // to back): 64 MiB, some 450,000 lines, read in about a tenth of a second, so a pass
  // ends soon after a stop is asked for.
  std::size_t max_batch_bytes = 64u << 20;
  // The rows one commit writes at most (counters, buckets, unique entries): a pass ends
  // at the line that reaches it, so one transaction locks a bounded number of rows
  // however many distinct records its lines name. A backlog of few records is committed
  // in few large batches (bench/RESULTS.md, issue 39).
  std::size_t max_batch_rows = 25000;
};

ingest_settings ingest_settings_for(const config::daemon_config& cfg);

// What a pass sees of its open file before reading it: fstat's device, inode and size,
// and its first bytes (up to positions.hpp head_bytes).
struct file_snapshot {
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
  std::uint64_t size = 0;
  std::string head;
};
bool snapshot_of(int fd, file_snapshot& out);
// Whether `after` (taken before the commit) is still the file `before` saw: the same
// device and inode, not shorter, its first bytes unchanged. When not (copytruncate
// during the pass), the pass commits nothing and is read again.
bool still_same_file(const file_snapshot& before, const file_snapshot& after);

struct source_state;
struct pass_counts;

// This instance has no position for a source whose file another instance_id's position
// names (a renamed host, a new container): its lines up to there were counted under that
// name, and reading it from byte 0 would count them again.
class other_instance_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// The message of other_instance_error for `src` when this instance (`instance`) has no
// position for it and another one's names a file here; "" otherwise.
std::string other_instance_reading(db::connection& conn, const std::string& instance,
                                   const config::log_source& src);
// At start, with the database reachable: throws other_instance_error for the first
// source other_instance_reading names.
void check_other_instances(db::connection& conn, const std::string& instance,
                           const std::vector<config::log_source>& sources);

class log_ingester {
 public:
  log_ingester(ingest_settings settings, db::pool& pool, metrics::registry& registry);
  ~log_ingester();
  log_ingester(const log_ingester&) = delete;
  log_ingester& operator=(const log_ingester&) = delete;

  void start();
  // Asks the reader thread to end after the pass in progress (what is not committed is
  // read again at the next start); stop() also joins it.
  void request_stop();
  void stop();

  // One pass over every source not waiting out a failure's backoff (the thread's work;
  // public for tests and the bench). Returns true when some source has more to read at
  // once (a backlog). A source's failure is counted, logged and backed off, not thrown.
  bool run_once();

  // Tests: `after_read` runs after a pass has read its lines and before it looks at its
  // file again (a cut during the pass), `after_listing` after the rotated files are first
  // looked at when the committed file is searched for (a rotation meanwhile). Set before
  // start(): the reader thread reads them unlocked.
  struct test_hooks {
    std::function<void()> after_read;
    std::function<void()> after_listing;
  };
  void set_hooks_for_test(test_hooks hooks) { hooks_ = std::move(hooks); }

 private:
  bool run_source(source_state& s);
  bool held_for_other(db::pool::lease& lease, source_state& s);
  void back_off(source_state& s);
  void load_position(db::pool::lease& lease, source_state& s);
  bool commit_pass(db::pool::lease& lease, source_state& s, const pass_counts& pass,
                   const db::log_position& to);
  void loop();

  ingest_settings settings_;
  db::pool& pool_;
  std::vector<std::unique_ptr<source_state>> sources_;
  metrics::log_metrics metrics_;
  util::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ GUARDED_BY(mutex_) = false;
  bool limits_read_ = false;
  test_hooks hooks_;
  std::thread thread_;
};

}  // namespace slotted::logs
