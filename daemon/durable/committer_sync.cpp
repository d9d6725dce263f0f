// The pipelined sync of wal.fsync always (see committer.hpp): a leader writes its group
// under the log's mutex, frees the log, then syncs outside it, so the next group can be
// written while the disk syncs this one; a sync that starts after a write covers it, and
// a leader whose write a finished sync already covered does not sync again.
#include "durable/committer.hpp"

#include <utility>

namespace slotted::durable {

void committer::hold_unsynced(std::vector<request>& chunk,
                              std::vector<std::shared_ptr<unsynced_write>>& written) {
  auto w = std::make_shared<unsynced_write>();
  w->jobs = make_jobs(chunk);
  util::lock_guard lock(sync_written_mutex_);
  if (sync_error_ != 0) {
    // A sync failed after this write's cut_after_failed_sync() and before here: the log is
    // cut back to the last good sync before the next write, which takes these bytes too.
    written.push_back(w);
    unsynced_.push_back(std::move(w));
    resolve_syncs(0, sync_error_);
    return;
  }
  w->seq = ++write_seq_;
  written_ = log_.written();
  written.push_back(w);
  unsynced_.push_back(std::move(w));
}

void committer::await_sync(const std::vector<std::shared_ptr<unsynced_write>>& written) {
  if (written.empty()) return;
  const unsynced_write& last = *written.back();  // a sync resolves the writes in order
  bool failed = false;
  {
    util::lock_guard sync_lock(sync_mutex_);
    wal::write_ahead_log::sync_point point;
    std::uint64_t covers = 0;
    {
      util::lock_guard lock(sync_written_mutex_);
      // Unless a sync that began after it was written (another leader's, or the log
      // thread's settle()) covered it, or failed.
      if (last.status == unsynced_write::state::written) {
        point = written_;
        covers = write_seq_;
      }
    }
    if (covers != 0) {
      // Without log_mutex_: the next group is written meanwhile. No rotation can run (a
      // task settles first, which waits for sync_mutex_), so the file is the current one.
      const int err = sync_log(point);
      util::lock_guard lock(sync_written_mutex_);
      resolve_syncs(covers, err);
    }
    util::lock_guard lock(sync_written_mutex_);
    for (const auto& w : written) failed = failed || w->status == unsynced_write::state::failed;
  }
  if (!failed) return;
  // Not answered (log_unsynced) before the failed bytes are cut off: a client told its
  // request failed must not find it replayed after a crash. This waits for the log (a
  // task on the log thread may hold it): only after a failed sync.
  util::lock_guard log_lock(log_mutex_);
  cut_after_failed_sync();
}

void committer::settle() {
  if (!synced_) return;
  {
    util::lock_guard sync_lock(sync_mutex_);  // waits for a leader's sync in progress
    wal::write_ahead_log::sync_point point;
    std::uint64_t covers = 0;
    {
      util::lock_guard lock(sync_written_mutex_);
      if (unsynced_.empty()) {
        covers = 0;
      } else {
        point = written_;  // the log's end: nothing is written while log_mutex_ is held
        covers = write_seq_;
      }
    }
    if (covers != 0) {
      const int err = sync_log(point);
      util::lock_guard lock(sync_written_mutex_);
      resolve_syncs(covers, err);
    }
  }
  cut_after_failed_sync();
}

int committer::sync_log(const wal::write_ahead_log::sync_point& point)
    NO_THREAD_SAFETY_ANALYSIS {  // log_ without log_mutex_: sync_written() allows it
  if (sync_hook_) {
    if (const int injected = sync_hook_(); injected != 0) return injected;
  }
  return log_.sync_written(point);
}

void committer::cut_after_failed_sync() {
  int err = 0;
  {
    util::lock_guard lock(sync_written_mutex_);
    err = std::exchange(sync_error_, 0);
  }
  // No write is pending a sync now (the failure failed them all, and none is written
  // while log_mutex_ is held), so nothing else is cut.
  if (err != 0) static_cast<void>(log_.cut_to_synced(err));
}

}  // namespace slotted::durable
