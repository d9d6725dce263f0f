#pragma once
// Private to logs/: the state the log reader keeps per source (log_ingest.cpp) and the
// steps one pass over a source is made of, in the order log_ingester::run_source calls
// them:
//   the tailer (log_tailer.cpp): which file to read and from where, truncation, reading
//     the complete lines, rotation, the position the pass ends at;
//   the line counter (log_count.cpp): one line parsed, matched and tallied;
//   the writer (log_writer.cpp): the batch of the pass and what a commit records.

#include <unistd.h>

#include <chrono>
#include <compare>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "db/write_path.hpp"
#include "logs/line_parser.hpp"
#include "logs/log_files.hpp"
#include "logs/log_ingest.hpp"
#include "metrics/metrics.hpp"
#include "model/buckets.hpp"
#include "model/counter_key.hpp"
#include "model/uniques.hpp"

namespace slotted::logs {

enum outcome {
  counted,
  not_matched,
  malformed,
  too_old_for_buckets,
  too_long,
  rule_error,
  too_late_for_dedupe,
  outcome_count_
};
inline constexpr const char* outcome_names[] = {
    "counted",  "not_matched", "malformed",          "too_old_for_buckets",
    "too_long", "rule_error",  "too_late_for_dedupe"};

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

using steady_time = std::chrono::steady_clock::time_point;

// A file of the source held open: the one read (source_state::files.front()), or one
// that follows it, waiting its turn.
struct held_file {
  std::unique_ptr<log_file> file;
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
  std::string name;        // the name it was opened by (for messages)
  std::uint64_t size = 0;  // its size when last looked at
  std::string head;        // its first bytes then (a cut of a file not read yet, below)
  steady_time opened;      // when it was opened (a file after the read one: found)
  steady_time grew;        // when it was last seen to grow (or opened)
};

// Why PATH could not be opened, reported once per change (open_path).
enum class open_problem { none, missing, denied, other };

struct source_state {
  config::log_source cfg;
  std::vector<compiled_rule> rules;
  bool loaded = false;  // `committed` read from the database
  std::optional<log_position> committed;
  // The file read, then the files after it in the order they were written (PATH last
  // when it is one of them). Kept across failed passes: a rename, a compression or a
  // deletion of their names loses nothing.
  std::deque<held_file> files;
  std::uint64_t read_from = 0;   // where the unread lines of files.front() start
  bool resume_skipping = false;  // read_from is inside an over-long line: skip to its newline
  std::optional<file_identity> lost_warned;  // the lost committed file already reported
  std::optional<file_identity> cut_warned;   // the committed file found cut, reported
  std::uint64_t examined = 0;                // offset up to which malformed lines were logged
  std::size_t logged_malformed = 0;
  open_problem reported = open_problem::none;
  // Another instance whose position names a file here (a renamed instance): the source
  // is not read (load_position).
  std::string held_for;
  // The last pass met an I/O error: logged when it starts, then again every
  // read_error_reminder while it lasts (a file that can never be read: a damaged .gz).
  bool read_failing = false;
  std::chrono::steady_clock::time_point read_warned{};
  // After a failed pass (read or commit error) the source waits `backoff` (the flush
  // interval, doubled at each failure, at most 30 s) before its next; the other sources
  // keep their pace (one thread reads them all: a read that blocks still holds them).
  // 0: the last pass succeeded.
  std::chrono::milliseconds backoff{0};
  std::chrono::steady_clock::time_point retry_at{};
  metrics::counter_handle* lines[outcome_count_]{};
  metrics::gauge_handle* lag = nullptr;
  metrics::gauge_handle* last_commit = nullptr;
  metrics::gauge_handle* missing = nullptr;
  metrics::gauge_handle* denied = nullptr;
  metrics::counter_handle* files_lost = nullptr;
  metrics::counter_handle* truncations = nullptr;
  metrics::counter_handle* commit_errors = nullptr;
  metrics::counter_handle* read_errors = nullptr;
  metrics::counter_handle* open_denied = nullptr;
  metrics::counter_handle* other_instance = nullptr;
  // Tests (log_ingester::test_hooks): run after open_committed's look at the rotated files.
  const std::function<void()>* after_listing = nullptr;
};

// What one pass read: the counts of the complete lines from read_from on.
struct pass_counts {
  std::unordered_map<store::counter_key, std::int64_t, key_hash> totals;
  std::map<bucket_key, std::int64_t> buckets;
  // The (counter, window, client) entries of lines of counters with `dedupe`, each once
  // (the first line's time kept): whether each counts is decided as the pass commits.
  std::set<store::unique_entry> uniques;
  std::uint64_t tally[outcome_count_]{};
  std::uint64_t limit = 0;  // where reading stopped: the size, or a batch bound
  // The rows its commit writes (ingest_settings::max_batch_rows bounds them).
  std::size_t rows() const { return totals.size() + buckets.size() + uniques.size(); }
  std::uint64_t end = 0;          // after the last complete line
  bool skipping = false;          // the pass ended inside a line longer than the bound
  bool resume_skipping = false;   // ... whose rest the next pass skips to its newline
  bool end_in_long_line = false;  // `end` is inside an over-long line (its rest skipped)
};

// The read file as the pass leaves it.
struct rotation_check {
  bool rotated = false;        // a file after it is known (or PATH is gone)
  bool switch_to_new = false;  // the read file is done: the next one is read from 0
};

// --- the files (log_open.cpp) ---
// Opens the file of the committed position (wherever its rotation put it, compressed or
// not) and the files after it, else PATH from 0; false when there is no file to read
// (PATH missing).
bool open_source_files(source_state& s);
// After the committed position was read again (a failed or refused commit): the held
// file it names becomes the read one, the files before it are let go; when it is none
// of them, they all are (opened again by open_source_files).
void align_with_committed(source_state& s);
// Looks at PATH: a file there that is not held is a new one, held after the others, with
// any rotated file written between the last held one and it (two rotations between two
// looks).
void watch_path(source_state& s);
// copytruncate seen while running: the read file (the committed inode) was cut. When a
// rotated file is its copy (another inode with the committed first bytes, at least as
// long as the position), it is held first and read from the position (its lines after
// the position would otherwise be lost), then the cut file from its start. False when
// there is none (or it is shorter: reported).
bool hold_copy_of_cut(source_state& s);
// The same for a copy `is_copy` tells by its first bytes, read from `offset` (a pass
// that found its file cut under it: the copy of the file it read).
bool hold_copy_first(source_state& s, const std::function<bool(const std::string&)>& is_copy,
                     std::uint64_t offset, bool in_long_line);
// Where the file `pos` names is among PATH and its rotated files (by its device, inode
// and first bytes; a compressed one by its first bytes): its name, or "" when nowhere.
std::string where_is(const config::log_source& src, const log_position& pos);

// --- the tailer (log_tailer.cpp) ---
// copytruncate: the file cut below the position, or its first bytes changed. Then the
// copy is read first from the position (copy_first: the pass ends, the next one reads
// it), or the file from 0 (read_from 0: cut).
enum class truncation { none, cut, copy_first };
truncation detect_truncation(source_state& s, const file_snapshot& before);
// Reads and counts the complete lines from read_from up to `size` (at most
// max_batch_bytes).
pass_counts read_lines(source_state& s, const ingest_settings& settings, std::uint64_t size,
                       bool truncated);
// Whether the read file is done with: read to its end, a file after it known, and
// neither grown nor the next one found for the source's rotate_wait.
rotation_check check_rotation(source_state& s, const file_snapshot& before, pass_counts& pass);
// The position the pass ends at: `end` of the read file, or 0 of the next file.
void position_after(source_state& s, const rotation_check& rot, const pass_counts& pass,
                    log_position& to);
// The bytes behind `position`: the read file's and those of the files after it.
double lag_behind(const source_state& s, std::uint64_t size, std::uint64_t position);
// After the commit: where the next pass reads from. True when there is more to read at
// once.
bool advance_after_commit(source_state& s, const pass_counts& pass, const rotation_check& rot,
                          std::uint64_t size, bool truncated);

// --- the line counter (log_count.cpp) ---
class line_counter {
 public:
  line_counter(source_state& s, const ingest_settings& settings, pass_counts& pass);
  void count(std::string_view text, std::uint64_t at_offset);

 private:
  bool parsed(std::string_view text, std::uint64_t at_offset);
  void add_match(const compiled_rule& rule, std::uint64_t id);
  bool add_unique(std::uint32_t record_type, std::uint64_t id, store::granularity g);

  source_state& s_;
  const ingest_settings& settings_;
  pass_counts& pass_;
  std::int64_t now_s_;
  bool user_agent_;                   // a rule of the source reads the user agent: parse it
  std::vector<bool> same_as_before_;  // rule i tests the request as rule i - 1 does
  parsed_line line_;
  std::string scratch_;
};

// --- the writer (log_writer.cpp) ---
// The write committing a pass (db::apply): totals sorted (the lock order), one slot drawn
// for it, its position's compare-and-set as its guard.
struct pass_batch {
  pass_batch() = default;
  pass_batch(const pass_batch&) = delete;  // `set` and `rules` view its own members
  pass_batch& operator=(const pass_batch&) = delete;
  std::vector<store::unique_entry> uniques;  // in the uniques table's key order
  std::vector<db::counter_row> rows;
  std::vector<db::counter_row> dirty;  // the marks' rows (rules.marks fills it)
  std::vector<store::bucket_row> buckets;
  db::write_set set;  // views of the rows above
  db::write_rules rules;
};
void make_batch(const source_state& s, const ingest_settings& settings, const pass_counts& pass,
                const log_position& to, pass_batch& out);
// After a commit: the new position and the metrics of the pass.
void record_commit(source_state& s, const pass_counts& pass, const log_position& to);

}  // namespace slotted::logs
