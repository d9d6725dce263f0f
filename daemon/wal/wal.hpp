#pragma once
// The write-ahead log (wal.dir): segments of records on disk. It appends, syncs,
// rotates, snapshots and scans; it does not decide when, and sees only bytes: the
// records' content and their replay are durable/'s (durable/recovery.hpp).
// durable::committer owns the one thread that calls it and the "log, then apply, then
// answer" order around it.
//
// Segments and batches: when the flusher takes the store's content, the batches formed
// from it are logged as the first record of a new segment, synced, before any of them
// may commit (log_batches). Replay therefore sees each batch with its original id and
// rows, and the ledger turns a batch that had committed before a crash into a no-op. A
// segment is deleted once every batch covering its increments, and every batch it
// logged, has committed (release). A snapshot of what is pending replaces every older
// segment, so disk use stays bounded by what is pending while nothing can be flushed.
//
// One process per directory: open() takes an exclusive flock on wal.dir itself and on
// wal.dir/lock (which names the holder's pid) before it reads anything there, so a
// second copy fails without touching the running one's log, even if the lock file was
// deleted.
//
// Thread-safety: none; one thread at a time (the committer's log thread, or the
// starting thread before it runs). A failed write or sync returns its failure
// (errc::wal_write_failed or errc::wal_sync_failed, the detail naming the call and
// errno's text), cuts the segment back to its last good length and logs the error once
// per distinct cause.

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "model/result.hpp"
#include "wal/frame.hpp"

namespace slotted::wal {

class wal_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The numbers of the segments (wal-<n>.log) in `dir`, none when it cannot be read; a
// segment's path; its whole content (throws wal_error when it cannot be read).
std::set<std::uint64_t> segment_numbers_in(const std::string& dir);
std::string segment_path_in(const std::string& dir, std::uint64_t n);
std::string read_segment(const std::string& path);

struct opened {
  std::size_t segments = 0;
  std::size_t salvaged = 0;  // damaged segments whose valid prefix was kept
};

struct open_options {
  // Keep the valid records before the damage in a damaged segment and move the file
  // aside (logging what is dropped), rather than refusing to start.
  bool salvage = false;
};

// What the log reports as it works, to whoever keeps its figures (durable::daemon_log
// gives them to the daemon's metrics). Called on the thread that calls the log.
class observer {
 public:
  virtual ~observer() = default;
  virtual void torn_tail_cut() = 0;
  virtual void synced(std::chrono::duration<double> took) = 0;  // one fdatasync, failed or not
  virtual void data_sync_failed() = 0;
  virtual void directory_sync_failed() = 0;
  virtual void size_changed(std::size_t bytes) = 0;  // of every segment
};

class write_ahead_log {
 public:
  using clock = std::chrono::steady_clock;

  // The log in directory `dir` (wal.dir), reporting to `obs` (which outlives it).
  write_ahead_log(std::string dir, observer& obs);
  // Syncs what is appended but not synced, then releases the lock.
  ~write_ahead_log();
  write_ahead_log(const write_ahead_log&) = delete;
  write_ahead_log& operator=(const write_ahead_log&) = delete;

  const std::string& dir() const { return dir_; }

  // Creates the directory (0700) if needed, locks it (flock on the directory and a lock file)
  // and scans every segment, oldest first, handing each record's payload to `apply` (a
  // false from it: a malformed record, corruption). A torn tail is cut off with a
  // warning; corruption anywhere else throws wal_error naming the file and offset (or,
  // with options.salvage, keeps what precedes it). Throws wal_error, having read and
  // changed nothing, when another process holds the lock (the message names its pid); and
  // when the directory cannot be used. The lock is held until this object is destroyed.
  opened open(const record_sink& apply, const open_options& options = {});

  // Appends whole records (see frame.hpp) at the end of the current segment, synced
  // when `synced`. On failure cuts the segment back to where it was: wal_write_failed
  // (or wal_sync_failed). When that cut fails too, records that are to be answered as
  // refused may still be in the file, where a replay would apply them: the process
  // ends instead (std::terminate, after logging why), leaving them in doubt as a
  // SIGKILL would.
  result<void> append(std::string_view bytes, bool synced);
  // Syncs every appended record: wal_sync_failed when fdatasync fails.
  result<void> sync();
  bool unsynced() const { return unsynced_; }
  clock::time_point last_sync() const { return last_sync_; }

  // Starts a new segment whose first record, synced, is record(the new segment's tag):
  // one that logs batches covering every record appended before.
  result<void> log_batches(const std::function<std::string(std::uint64_t tag)>& record);

  // Starts a new segment holding `record`, synced: one snapshot of everything pending
  // (`holds_batches`: batches among it), and drops every older segment (salvaged ones
  // move aside). Returns the new segment's tag, or why it could not be written.
  result<std::uint64_t> snapshot(std::string_view record, bool holds_batches);
  // The segments have grown well past the last snapshot (and no failed snapshot was
  // tried within the last second): time to replace them with a new one.
  bool snapshot_due() const;

  // Every queued batch has wal_tag >= min_queued_tag (UINT64_MAX: none queued; a batch
  // in flight counts with the tag a retag gave it, see flush/queue.hpp): appends
  // `committed_record` (it says every batch has committed) when none is queued and
  // batches were logged since, and deletes the segments no queued batch needs.
  void release(std::uint64_t min_queued_tag, std::string_view committed_record);
  // No batch is logged that is not yet logged as committed.
  bool batches_logged_committed() const { return !uncommitted_batches_logged_; }

  // Counts, readable from any thread (tests, the committer's group figures): the
  // appends that reached pwrite(2) (one per group of requests, plus takes, resets,
  // snapshots), the fdatasyncs done, and how much of the current segment the last
  // successful fdatasync covered (0 right after a rotation).
  std::uint64_t writes() const { return writes_.load(std::memory_order_relaxed); }
  // Tests only: asked before each fdatasync, each cut of a segment and each sync of the
  // directory ("fdatasync", "truncate", "directory fsync"); true makes that call fail
  // with EIO instead of running. Asked before
  // each pwrite(2) of an append too: "short write" true writes half of what is left,
  // "write" true fails it with ENOSPC. "create segment" true fails a new segment's
  // creation with ENOSPC; "pid write" true writes half of the lock file's pid.
  void set_fault_for_test(std::function<bool(std::string_view call)> fault) {
    fault_ = std::move(fault);
  }
  std::uint64_t syncs() const { return syncs_.load(std::memory_order_relaxed); }
  // The last failed write or sync failed for want of room (ENOSPC, EDQUOT, or a short
  // write): a full disk, which the start tolerates (see committer::start).
  bool last_failure_was_full_disk() const { return last_errno_ == ENOSPC || last_errno_ == EDQUOT; }
  std::size_t synced_bytes() const { return synced_bytes_.load(std::memory_order_acquire); }

 private:
  // The steps of open(): the directory created, opened and locked; its segments' numbers;
  // a torn tail of the last segment cut off; a damaged segment refused, or set aside
  // (--wal-salvage).
  void open_directory();
  std::set<std::uint64_t> segment_numbers() const;
  void cut_torn_tail(const std::string& path, const scan_result& scan);
  void salvage_damaged(const std::string& path, const std::string& data, const scan_result& scan,
                       bool salvage);
  void lock_directory();
  // Writes this process's pid into the lock file at `path` (lock_fd_); a full disk (or a
  // short write) is logged and tolerated, any other error throws wal_error.
  void write_pid(const std::string& path);
  result<void> rotate();
  // fsync(2) of the directory: wal_sync_failed when it fails, and then every append
  // tries it again first and is refused while it fails.
  result<void> sync_wal_directory();
  std::string segment_path(std::uint64_t n) const;
  void update_size_gauge();
  // Cuts the current segment back to `length` (segment_bytes_ already) after a failed
  // append, and syncs the cut if the disk lets it; ends the process when it cannot cut
  // (see append()).
  void cut_back(std::size_t length);
  // The failure `code` of call `what` with errno `err`, logged once per distinct cause.
  failure failed(const std::string& what, int err, errc code = errc::wal_write_failed);

  std::string dir_;
  observer* observer_;  // never null

  int fd_ = -1;
  int dir_fd_ = -1;
  int lock_fd_ = -1;
  std::uint64_t segment_ = 0;      // the segment being appended to
  std::size_t segment_bytes_ = 0;  // its length, all of it written and (per mode) synced
  std::vector<std::pair<std::uint64_t, std::size_t>> closed_;  // older segments and their sizes
  std::size_t closed_bytes_ = 0;                               // the sum of those sizes
  // Segments that begin with a batches or snapshot record: every increment logged
  // before such a segment is covered by it.
  std::vector<std::uint64_t> covering_;
  // Damaged segments whose valid prefix open() kept, and the names they go to once a
  // snapshot holds that prefix.
  std::vector<std::pair<std::string, std::string>> salvaged_;
  std::size_t last_snapshot_bytes_ = 0;
  // Batches were logged since the last committed record (or snapshot without batches).
  bool uncommitted_batches_logged_ = false;
  // After a failed snapshot, none is due again before this time.
  clock::time_point next_snapshot_try_{};
  bool unsynced_ = false;
  // The last sync of the directory failed (see sync_wal_directory()).
  bool directory_unsynced_ = false;
  clock::time_point last_sync_ = clock::now();
  // The last write or sync error logged, empty once writable again.
  std::string last_logged_;
  int last_errno_ = 0;  // of the last failure (see failed())
  std::atomic<std::uint64_t> writes_{0};
  std::atomic<std::uint64_t> syncs_{0};
  std::atomic<std::size_t> synced_bytes_{0};
  std::function<bool(std::string_view)> fault_;
};

}  // namespace slotted::wal
