#pragma once
// The durable ingest path, with a WAL: log, then apply, then answer (README: Design).
// This component alone owns that order; the WAL only writes, the store only holds.
//
// Group commit (wal.fsync: always): a request's increments are encoded as a WAL record
// on the thread that submits them and queued. One log thread is the group's leader: it
// takes every queued request, checks the pending limit and the pending-sum bound, writes
// the group with one write(2) and syncs once for all of it. That is all it does. The
// group's increments are applied to the sharded store and answered on the HTTP thread
// that submitted them (one post per HTTP thread per group), so applying and answering
// spread over http.threads as they do without a WAL (LevelDB's writer queue; RocksDB's
// pipelined write with concurrent memtable inserts).
//
// Without a sync per answer (wal.fsync: interval or never) a hand-off to the log thread
// would cost more than the write itself: the submitting thread checks, appends (under
// the log's mutex) and applies and answers at once. The log thread then only syncs every
// wal.fsync_interval and runs the flusher's takes and the snapshots.
//
// The cut: the flusher's take() and the snapshots run on the log thread between two
// groups, and before either reads the store, every increment logged so far is applied
// (drain(): what an HTTP thread has not applied yet, the log thread applies itself).
// So a batches record covers exactly what was logged before it, nothing logged after it
// is in what it covers, and a snapshot holds everything logged. An apply whose HTTP
// thread never runs it (its loop stopped at shutdown) is done by the next drain; its
// request is never answered (in doubt, as for a SIGKILL).
//
// Failures: a request whose write or sync fails is answered log_unavailable and was
// applied nowhere (the WAL cut its segment back). Requests submitted once stop() began
// are answered log_unavailable at once. A store_.add that throws (bad_alloc) in the
// middle of a logged request is not handled: see apply().
//
// Shutdown: stop() applies whatever is logged and not yet applied (a group handed to an
// HTTP loop that stopped first), so the committer keeps no answer callback, nor the
// session it holds, past stop(): those die with the loop's queued handler, while the
// loop still exists. Such a request is never answered and replays from the WAL. Once
// stop() began, take() returns false (the store keeps its content) and nothing more is
// logged but what was queued before.
//
// Thread-safety: submit(), take(), release() and batches_logged_committed() from any
// thread; start() and stop() from one.

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "idempotency/keyed_store.hpp"
#include "model/batch.hpp"
#include "model/increment.hpp"
#include "store/pending_store.hpp"
#include "wal/wal.hpp"

namespace slotted::durable {

enum class commit_result { applied, over_limit, out_of_range, log_unavailable };

class committer final : public store::batch_source {
 public:
  using done_fn = std::function<void(commit_result)>;

  // `log` must be open (replayed) and outlive this object.
  committer(wal::write_ahead_log& log, store::pending_store& store, std::size_t max_pending_keys);
  ~committer() override;
  committer(const committer&) = delete;
  committer& operator=(const committer&) = delete;

  // Logs what is pending (the store and `queue`, where the caller put what the log
  // recovered) as a snapshot in a fresh segment, dropping the older segments, and starts
  // the log thread. Throws wal::wal_error when that cannot be written.
  void start(store::batch_queue& queue);
  // Handles what is queued, then stops the log thread and applies what is logged and
  // not yet applied. Call it before the io_contexts passed to submit() are destroyed.
  // Idempotent.
  void stop();

  // Logs `increments`, then applies them and calls `done` on `home` (the submitting
  // HTTP thread's loop; null: on the log thread). `done` gets applied, over_limit or
  // out_of_range (nothing logged), or log_unavailable (nothing applied).
  void submit(std::vector<ingest::increment>&& increments, boost::asio::io_context* home,
              done_fn done);

  // Requests with an Idempotency-Key (README: HTTP API, Idempotency-Key) live in `keyed`
  // (set before start()) rather than the store: submit_keyed() logs one that
  // keyed.admit() reserved, then accepts it there (its "apply") and answers applied, or
  // abandons it and answers log_unavailable. Takes and snapshots cover them as they
  // cover the store.
  void attach_keyed(idempotency::keyed_store* keyed) { keyed_ = keyed; }
  void submit_keyed(idempotency::keyed_request&& request, boost::asio::io_context* home,
                    done_fn done);

  // store::batch_source
  bool take(const former& form, const publisher& publish) override;
  void release(std::uint64_t min_queued_tag) override;
  bool batches_logged_committed() override;
  std::optional<std::int64_t> drop_pending(const store::counter_key& key) override;

 private:
  struct request;
  struct job;
  // Whether `r` may be logged: applied, or over_limit or out_of_range. `new_keys` and
  // `unapplied` count what the caller logged and has not dispatched yet; near the
  // pending-sum bound `before_drain` dispatches it, then everything logged is applied
  // and the check is exact. Under log_mutex_.
  template <typename BeforeDrain>
  commit_result admit(const request& r, std::size_t new_keys, std::uint64_t unapplied,
                      BeforeDrain before_drain);
  // wal.fsync interval and never: logs, applies and answers on the calling thread, or
  // queues `r` for the log thread when that holds the log (a take, a snapshot, a sync).
  void write_inline(request&& r);
  // Queues `r` for the log thread, or answers log_unavailable once stop() began.
  void enqueue(request&& r);
  void run();
  void write_group(std::vector<request>& group);
  // Hands `chunk` (written, or refused) to the threads that apply and answer it.
  void dispatch(std::vector<request>& chunk);
  // Applies a job's logged increments unless that was done; idempotent.
  void apply(job& j);
  void apply_and_answer(job& j);
  // Applies every increment logged so far (on the log thread, between groups).
  void drain();
  bool snapshot();
  // Runs `task` on the log thread between two groups and waits for it; once stop()
  // began, runs nothing and returns a value-initialised result (false).
  template <typename Task>
  auto on_log_thread(Task task);

  wal::write_ahead_log& log_;
  store::pending_store& store_;
  std::size_t max_pending_keys_;
  const bool inline_;  // wal.fsync is not always: see write_inline
  // Guards log_ (not thread-safe) and makes check-then-append one step.
  std::mutex log_mutex_;
  std::atomic<bool> closed_{false};  // stop() began: nothing more is logged
  store::batch_queue* queue_ = nullptr;
  idempotency::keyed_store* keyed_ = nullptr;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<request> pending_;
  std::deque<std::function<void()>> tasks_;  // run on the log thread between groups
  bool stopping_ = false;
  bool started_ = false;
  // wal.fsync never: an inline append found a snapshot due (the log thread has no other
  // reason to wake while nothing is taken, as during a database outage).
  bool snapshot_wanted_ = false;
  std::uint64_t min_queued_tag_ = UINT64_MAX;

  // Jobs logged and not yet applied, and upper bounds of what they will add: the keys
  // they may create (for the pending limit) and the sum of |delta| (for the bound).
  std::mutex unapplied_mutex_;
  std::vector<std::shared_ptr<job>> unapplied_;
  std::atomic<std::size_t> unapplied_keys_{0};
  std::atomic<std::uint64_t> unapplied_magnitude_{0};

  std::thread thread_;
};

}  // namespace slotted::durable
