#pragma once
// The write-ahead log (wal.dir): an increment is acknowledged only once it is logged
// according to wal.fsync, so a SIGKILL or power cut loses nothing acknowledged (G1).
//
// One thread owns the log. Requests queue their increments; the thread writes every
// queued request with one write(2), syncs once for all of them (group commit, under
// fsync: always), then applies them to the store and answers them. A request whose
// write or sync fails is answered `wal_unavailable` and was applied nowhere; the
// segment is cut back to its last good length.
//
// Segments and batches: when the flusher takes the store's content, the log thread
// does it between two groups, starts a new segment and logs the batches formed from
// it as that segment's first record, synced, before any of them may commit. Replay
// therefore sees each batch with its original id and rows, and the ledger turns a
// batch that had committed before a crash into a no-op. A segment is deleted once
// every batch covering its increments, and every batch it logged, has committed. While
// nothing can be flushed (an outage), the log writes a snapshot of what is pending
// once it has grown past a threshold and drops the segments before it, so disk use
// stays bounded by what is pending, like memory.
//
// One process per directory: open() takes an exclusive flock on wal.dir/lock before it
// reads anything there, so a second copy fails without touching the running one's log.
//
// Thread-safety: submit() and release() from any thread; swap() from the flusher.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "flush/batch.hpp"
#include "idempotency/keyed_store.hpp"
#include "ingest/increment.hpp"
#include "metrics/metrics.hpp"
#include "store/pending_store.hpp"

namespace slotted::wal {

class wal_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct recovered {
  std::vector<store::pending_delta> deltas;
  std::vector<flush::flush_batch> batches;
  std::vector<idempotency::keyed_request> keyed;  // keyed requests not yet in a batch
  std::size_t segments = 0;
  std::size_t salvaged = 0;  // damaged segments whose valid prefix was kept
};

struct open_options {
  // Keep the valid records before the damage in a damaged segment and move the file
  // aside (logging what is dropped), rather than refusing to start.
  bool salvage = false;
};

// What the log needs from the flusher's queue of formed batches.
class batch_queue {
 public:
  virtual ~batch_queue() = default;
  // Copies of every queued batch (for a snapshot).
  virtual std::vector<flush::flush_batch> queued_copy() = 0;
  // Sets every queued batch's wal_tag to `tag` (once a snapshot logs them).
  virtual void retag_all(std::uint64_t tag) = 0;
};

class write_ahead_log {
 public:
  write_ahead_log(config::wal_config cfg, store::pending_store& store, metrics::registry& metrics,
                  std::size_t max_pending_keys);
  ~write_ahead_log();

  // Creates the directory (0700) if needed, locks it (a lock file, flock) and replays
  // every segment. A torn tail is cut off with a warning; corruption anywhere else
  // throws wal_error naming the file and offset (or, with options.salvage, keeps what
  // precedes it). Throws wal_error, having read and changed nothing, when another
  // process holds the lock (the message names its pid); and when the directory cannot
  // be used. The lock is held until this object is destroyed.
  recovered open(const open_options& options = {});

  // Logs what is pending (the store and `queue`, where the caller put what open()
  // recovered) as a snapshot in a fresh segment, drops the older segments and starts
  // the log thread. Throws wal_error when that cannot be written.
  void start(batch_queue& queue);
  void stop();

  // Logs, then applies and answers: `done` runs on the log thread with `applied`,
  // `over_limit` (nothing logged) or `wal_unavailable` (nothing applied).
  void submit(std::vector<ingest::increment>&& increments,
              std::function<void(store::add_result)> done);

  // Keyed requests (README: HTTP API, Idempotency-Key) are logged as keyed records and
  // applied to `keyed` (set before start()), taken with the store's content at a swap
  // and kept in snapshots. submit_keyed() logs one that keyed.admit() reserved, then
  // accepts it there and answers `applied`, or abandons it and answers
  // `wal_unavailable`.
  void attach_keyed(idempotency::keyed_store* keyed) { keyed_ = keyed; }
  void submit_keyed(idempotency::keyed_request&& request,
                    std::function<void(store::add_result)> done);

  using former = std::function<std::vector<flush::flush_batch>(
      std::vector<store::pending_delta>&&, std::chrono::steady_clock::time_point oldest)>;
  using publisher = std::function<void(std::vector<flush::flush_batch>&&)>;
  // On the log thread, between groups: takes the store's content, forms batches, logs
  // them synced in a new segment (tagging them with it) and publishes them. When the
  // log cannot be written the deltas go back to the store and false is returned.
  bool swap(const former& form, const publisher& publish);

  // Every queued batch has wal_tag >= min_queued_tag (UINT64_MAX: none queued).
  void release(std::uint64_t min_queued_tag);

  // Waits until the log thread has handled every release() so far; true when the log
  // holds no batch it has not logged as committed (false while one is queued, when the
  // committed record cannot be written, and once stopped). Until then a replay may send
  // committed batches again, and their ledger rows must not be pruned.
  bool batches_logged_committed();

 private:
  struct request {
    std::vector<ingest::increment> increments;
    std::function<void(store::add_result)> done;
    std::optional<idempotency::keyed_request> keyed;  // then `increments` is empty
  };
  void lock_directory();
  void run();
  void write_group(std::vector<request>& group);
  // Appends whole records at the end of the segment, synced when `synced`; on failure
  // cuts the segment back to where it was.
  bool append_synced(const std::string& bytes, bool synced);
  bool sync();
  bool rotate();
  void delete_released();
  void maybe_checkpoint();
  bool checkpoint();
  std::string segment_path(std::uint64_t n) const;
  void update_size_gauge();
  void failed(const std::string& what, int err);

  config::wal_config cfg_;
  store::pending_store& store_;
  metrics::registry& metrics_;
  std::size_t max_pending_keys_;
  batch_queue* queue_ = nullptr;
  idempotency::keyed_store* keyed_ = nullptr;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<request> pending_;
  std::deque<std::function<void()>> tasks_;  // run on the log thread between groups
  bool stopping_ = false;
  std::uint64_t min_queued_tag_ = UINT64_MAX;

  // Owned by the log thread.
  int fd_ = -1;
  int dir_fd_ = -1;
  int lock_fd_ = -1;
  std::uint64_t segment_ = 0;      // the segment being appended to
  std::size_t segment_bytes_ = 0;  // its length, all of it written and (per mode) synced
  std::vector<std::pair<std::uint64_t, std::size_t>> closed_;  // older segments and their sizes
  // Segments that begin with a batches or snapshot record: every increment logged
  // before such a segment is covered by it.
  std::vector<std::uint64_t> covering_;
  // Damaged segments whose valid prefix open() kept, and the names they go to once a
  // snapshot holds that prefix.
  std::vector<std::pair<std::string, std::string>> salvaged_;
  std::size_t last_snapshot_bytes_ = 0;
  // Batches were logged since the last committed record (or snapshot without batches).
  bool uncommitted_batches_logged_ = false;
  // After a failed checkpoint, none is tried again before this time.
  std::chrono::steady_clock::time_point next_checkpoint_try_{};
  bool unsynced_ = false;
  std::chrono::steady_clock::time_point last_sync_;
  std::string last_error_;
  std::thread thread_;
};

}  // namespace slotted::wal
