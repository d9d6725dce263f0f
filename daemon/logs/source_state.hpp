#pragma once
// Private to logs/: the state the log reader keeps per source (log_ingest.cpp) and the
// steps one pass over a source is made of, in the order log_ingester::run_source calls
// them:
//   the tailer (log_tailer.cpp): which file to read and from where, truncation, reading
//     the complete lines, rotation, the position the pass ends at;
//   the line counter (log_count.cpp): one line parsed, matched and tallied;
//   the writer (log_writer.cpp): the batch of the pass and what a commit records.

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <unistd.h>

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "db/log_positions.hpp"
#include "logs/line_parser.hpp"
#include "logs/log_ingest.hpp"
#include "model/buckets.hpp"
#include "model/counter_key.hpp"
#include "model/uniques.hpp"

namespace slotted::logs {

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
  std::optional<file_identity> cut_warned;   // the committed file found cut, reported
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

// What one pass read: the counts of the complete lines from read_from on.
struct pass_counts {
  std::unordered_map<store::counter_key, std::int64_t, key_hash> totals;
  std::map<bucket_key, std::int64_t> buckets;
  // The (counter, window, client) entries of lines of counters with `dedupe`, each once
  // (the first line's time kept): whether each counts is decided as the pass commits.
  std::set<store::unique_entry> uniques;
  std::uint64_t tally[outcome_count_]{};
  std::uint64_t limit = 0;        // where reading stopped: the size, or a batch bound
  // The rows its commit writes (ingest_settings::max_batch_rows bounds them).
  std::size_t rows() const { return totals.size() + buckets.size() + uniques.size(); }
  std::uint64_t end = 0;          // after the last complete line
  bool skipping = false;          // the pass ended inside a line longer than the bound
  bool resume_skipping = false;   // ... whose rest the next pass skips to its newline
};

// PATH as the pass leaves it, against the open file.
struct rotation_check {
  bool path_exists = false;
  bool rotated = false;        // PATH is another file, or gone
  bool switch_to_new = false;  // the open file is done: the next one is read from 0
  std::int64_t path_size = 0;  // PATH's size (0 when it does not exist)
};

// --- the tailer (log_tailer.cpp) ---
bool pread_all(int fd, char* buf, std::size_t n, std::uint64_t off, std::size_t& got);
// The identity of the open file `fd` with the hash of its first min(offset, head_bytes).
bool identity_of(int fd, std::uint64_t offset, file_identity& out);
// Opens the file of the committed position (at PATH, PATH.1 or PATH.2), else PATH.1 or
// PATH from 0; false when there is no file to read (PATH missing).
bool open_source_file(source_state& s);
// copytruncate: the file cut below the position, or its first bytes changed; read_from
// is then 0.
bool detect_truncation(source_state& s, const file_snapshot& before);
// Reads and counts the complete lines from read_from up to `size` (at most
// max_batch_bytes).
pass_counts read_lines(source_state& s, const ingest_settings& settings, std::uint64_t size,
                       bool truncated);
// Whether PATH was rotated away from the open file and the open file is done with.
rotation_check check_rotation(source_state& s, const file_snapshot& before, pass_counts& pass);
// The position the pass ends at: `end` of the open file, or 0 of the next file. False
// when the next file cannot be opened yet.
bool position_after(const source_state& s, const rotation_check& rot, std::uint64_t end,
                    log_position& to);
// The bytes behind `position`: the open file's, and the new file's when rotated.
double lag_behind(const rotation_check& rot, std::uint64_t size, std::uint64_t position);
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
  bool user_agent_;  // a rule of the source reads the user agent: parse it
  std::vector<bool> same_as_before_;  // rule i tests the request as rule i - 1 does
  parsed_line line_;
  std::string scratch_;
};

// --- the writer (log_writer.cpp) ---
// The batch committing a pass: totals sorted (the lock order), one slot drawn for it.
struct pass_batch {
  std::vector<store::unique_entry> uniques;  // in the uniques table's key order
  std::vector<db::counter_row> rows;
  std::vector<db::counter_row> dirty;
  std::vector<store::bucket_row> buckets;
  log_batch batch;  // views of the rows above
};
void make_batch(const source_state& s, const ingest_settings& settings,
                const pass_counts& pass, const log_position& to, pass_batch& out);
// After a commit: the new position and the metrics of the pass.
void record_commit(source_state& s, const pass_counts& pass, const log_position& to);

}  // namespace slotted::logs
