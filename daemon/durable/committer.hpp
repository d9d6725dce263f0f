#pragma once
// The durable ingest path, with a WAL: log, then apply, then answer (README: Design).
// This component alone owns that order; the WAL only writes, the store only holds.
//
// Group commit with a leader, in every wal.fsync mode (LevelDB's DBImpl::Write,
// RocksDB's write thread): a request's increments are encoded as a WAL record on the
// thread that submits them and queued. The requests that queue while a group is being
// written join the next group; one thread, the leader, takes the queued requests (at
// most max_group_bytes of records), checks the pending limit and the pending-sum bound,
// writes them with one pwrite(2) (and, with wal.fsync always, one fdatasync) and hands
// each request to the thread that applies and answers it. The leader is, as a rule, an
// HTTP thread (the log thread leads only a group left to it, one group per pass): a request
// submitted on its HTTP loop is queued, and the loop writes what its turn queued once that turn's
// other handlers ran (one post to itself, no other thread involved), then applies and answers its
// own requests at once. A loop that finds another leader writing does not wait: its requests go
// into the next group, which the leader hands to the loop of the first of them (a post) once it is
// done, so the leaders take turns and each loop writes its own requests. A follower's loop goes on
// serving its connections; only its requests wait, for the write in progress and then their own.
// With wal.fsync always the leader's loop waits for its group's fdatasync (the other loops
// meanwhile parse the next group), holding the log: the requests queued meanwhile then go out as
// one group under one sync. Freeing the log before the sync (a pipelined sync, measured in
// bench/RESULTS.md) let the next loop write a smaller group at once and wait for that sync before
// its own: twice the syncs, 11-17% less throughput with two HTTP threads, nothing gained with one.
// Requests written by another thread than their loop's are applied and answered on their loop (one
// post per HTTP thread per group), so applying and answering spread over http.threads as they do
// without a WAL.
//
// The log thread runs (committer_tasks.cpp) the flusher's takes, resets, releases, the snapshots
// and, with wal.fsync interval, the periodic sync. It holds the log through those (disk I/O,
// seconds on a slow disk), and a leader on an HTTP loop (which serves /healthz and the
// watchdog ping) must not wait for it: a leader that finds the log held leaves the group
// queued for the log thread, which writes it after its task (after the cut, for a take).
// The log thread writes one group at a time and hands the rest on as a leader on a loop
// does (or writes it on its next pass, after the tasks queued meanwhile): it never stays
// leader, which would starve the takes, resets and syncs under steady load.
//
// The cut: the flusher's take() and the snapshots run on the log thread between two
// groups, and before either reads the store, every increment logged so far is applied
// (drain(): what an HTTP thread has not applied yet, the log thread applies itself).
// So a batches record covers exactly what was logged before it, nothing logged after it
// is in what it covers, and a snapshot holds everything logged. An apply whose HTTP
// thread never runs it (its loop stopped at shutdown) is done by the next drain; its
// request is never answered (in doubt, as for a SIGKILL).
//
// Failures: a request whose write fails is answered log_unavailable (log_unsynced when
// the sync failed) and was applied nowhere (the WAL cut its segment back); a write fails
// for all the requests it carries (a group split at the pending-sum bound is several
// writes). Requests submitted once stop() began are answered stopping at once. An
// exception while leading (bad_alloc: queuing, dispatching, applying in a drain), or
// while applying a logged job anywhere (an HTTP loop, a take's or reset's drain), is
// logged and ends the process (std::terminate), as one on the log thread always did:
// the group may be part written, part dispatched, and no answer for it would be right;
// a crash loses nothing answered, the WAL replays it. See lead().
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

#include "durable/daemon_log.hpp"
#include "idempotency/keyed_store.hpp"
#include "model/batch.hpp"
#include "model/increment.hpp"
#include "model/result.hpp"
#include "store/pending_store.hpp"
#include "store/pending_uniques.hpp"
#include "util/thread_annotations.hpp"
#include "wal/wal.hpp"

namespace slotted::durable {

enum class commit_result {
  applied,
  over_limit,
  out_of_range,
  log_unavailable,
  log_unsynced,
  stopping
};

class committer final : public store::batch_source {
 public:
  using done_fn = std::function<void(commit_result)>;

  // `log` must be open (replayed) and outlive this object.
  // `limits`: the pending bounds (flush.max_pending_keys, flush.max_pending_bytes).
  committer(daemon_log& log, store::pending_store& store, const store::pending_limits& limits);
  ~committer() override;
  committer(const committer&) = delete;
  committer& operator=(const committer&) = delete;

  // Logs what is pending (the store and `queue`, where the caller put what the log
  // recovered) as a snapshot in a fresh segment, dropping the older segments, and starts
  // the log thread. Throws wal::wal_error when that cannot be written, unless `replayed`
  // is false (an empty log: the snapshot holds nothing a failure could lose, so a full
  // disk leaves the daemon running, its appends refused until they fit).
  void start(store::batch_queue& queue, bool replayed = true);
  // Handles what is queued, then stops the log thread and applies what is logged and
  // not yet applied. Call it before the io_contexts passed to submit() are destroyed.
  // Idempotent.
  void stop();

  // Logs `increments`, then applies them and calls `done` on `home` (the submitting
  // HTTP thread's loop; null: on the log thread). `done` gets applied, over_limit or
  // out_of_range (nothing logged), or log_unavailable (nothing applied).
  void submit(std::vector<ingest::increment>&& increments, boost::asio::io_context* home,
              done_fn done);
  // The same for a request with items with a `client` (counters[].dedupe): `uniques` are
  // their unique entries, `increments` its other items; logged with them in one record,
  // then held in the set attach_uniques() gave. Same answers.
  void submit(std::vector<ingest::increment>&& increments,
              std::vector<store::unique_entry>&& uniques, boost::asio::io_context* home,
              done_fn done);

  // Group figures since start: groups written (pwrites of requests), requests logged
  // in them, and groups the log thread wrote (a leader found the log held by a take,
  // a snapshot or a sync; or stop()).
  std::uint64_t groups() const { return groups_.load(std::memory_order_relaxed); }
  std::uint64_t grouped_requests() const {
    return grouped_requests_.load(std::memory_order_relaxed);
  }
  std::uint64_t log_thread_groups() const {
    return log_thread_groups_.load(std::memory_order_relaxed);
  }
  // Tests only: called by each leader while it leads (before its group's write), to
  // inject a failure there. Set before start().
  void set_group_hook_for_test(std::function<void()> hook) { group_hook_ = std::move(hook); }
  // A group's records stop growing past this: a request past it waits for the next.
  static constexpr std::size_t max_group_bytes = 1u << 20;

  // Requests with an Idempotency-Key (README: HTTP API, Idempotency-Key) live in `keyed`
  // (set before start()) rather than the store: submit_keyed() logs one that
  // keyed.admit() reserved, then accepts it there (its "apply") and answers applied, or
  // abandons it and answers log_unavailable. Takes and snapshots cover them as they
  // cover the store.
  void attach_keyed(idempotency::keyed_store* keyed) { keyed_ = keyed; }
  // Unique entries (counters[].dedupe) live in `uniques` (set before start()): a request's
  // are applied there, and takes and snapshots cover them as they cover the store.
  void attach_uniques(store::pending_uniques* uniques) { uniques_ = uniques; }
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
  // Whether `r` may be logged: applied, or over_limit or out_of_range. `logged` and
  // `unapplied` count what the caller logged and has not dispatched yet; near the
  // pending-sum bound `before_drain` dispatches it, then everything logged is applied
  // and the check is exact. Under log_mutex_.
  template <typename BeforeDrain>
  commit_result admit(const request& r, store::pending_charge logged, std::uint64_t unapplied,
                      BeforeDrain before_drain) REQUIRES(log_mutex_);
  // Queues `r` for the next group and makes sure a leader writes it: at the end of this
  // loop turn when submitted on its HTTP loop, else now, on this thread. Once stop()
  // began: answers log_unavailable.
  void queue(request&& r);
  // Becomes the leader unless one is writing, and writes the queued requests; then
  // hands what queued meanwhile to the loop of its first request, or writes it too. The
  // log thread (`log_thread`) waits for the log, writes one group and returns (its
  // tasks come before the next; it leaves the rest to run() or a loop); an HTTP thread
  // leaves the group to the log thread when the log is held.
  // An exception in there (bad_alloc) is logged and ends the process: see lead().
  void lead(bool log_thread);
  void lead_groups(bool log_thread);
  // The next group: queued requests in order, up to max_group_bytes (at least one).
  // Under mutex_.
  std::vector<request> dequeue_group() REQUIRES(mutex_);
  // A written group's metrics.
  void count_group(std::size_t requests, bool log_thread);
  void run();
  // Writes `group` (one pwrite, and one fdatasync with wal.fsync always, unless the
  // pending-sum bound needs a drain in between) and hands its requests on: those this
  // thread applies and answers itself go to `local`. Under log_mutex_.
  void write_group(std::vector<request>& group, std::vector<std::shared_ptr<job>>& local)
      REQUIRES(log_mutex_);
  // Registers `chunk`'s logged requests as unapplied and posts each HTTP loop its
  // requests, but those of this thread (its own loop, or none), which go to `local`.
  // Under log_mutex_: registered before the log is free, so the next take applies them.
  void dispatch(std::vector<request>& chunk, std::vector<std::shared_ptr<job>>& local)
      REQUIRES(log_mutex_);
  // Applies a job's logged increments unless that was done; idempotent.
  void apply(job& j);  // ends the process on an exception: see the .cpp
  void apply_whole(job& j);
  void apply_and_answer(job& j);
  // Holds a logged request's unique entries in uniques_ (committer_tasks.cpp).
  void apply_uniques(std::span<const store::unique_entry> entries);
  // Applies every increment logged so far (on the log thread, between groups; with the
  // log held, so that nothing is logged meanwhile: the cut).
  void drain() REQUIRES(log_mutex_);
  result<void> snapshot() REQUIRES(log_mutex_);
  // Runs `task` on the log thread between two groups, under log_mutex_ (so `task` is
  // written [&]() REQUIRES(log_mutex_) { ... }), and waits for it; once stop() began,
  // runs nothing and returns a value-initialised result (false).
  template <typename Task>
  auto on_log_thread(Task task);

  wal::write_ahead_log& log_ GUARDED_BY(log_mutex_);
  // The log's settings and metrics: fixed, thread-safe, read without log_mutex_.
  const config::wal_config& log_config_;
  metrics::registry& log_metrics_;
  store::pending_store& store_;
  const store::pending_limits limits_;
  const bool synced_;  // wal.fsync always: each group is synced before it is answered
  // Guards log_ (not thread-safe) and makes check-then-append one step. Taken before
  // mutex_ (stop(), a leader) and unapplied_mutex_ (a group's jobs registered).
  util::mutex log_mutex_ ACQUIRED_BEFORE(mutex_, unapplied_mutex_);
  std::atomic<bool> closed_{false};  // stop() began: nothing more is logged
  store::batch_queue* queue_ = nullptr;
  idempotency::keyed_store* keyed_ = nullptr;
  store::pending_uniques* uniques_ = nullptr;

  util::mutex mutex_;
  std::condition_variable wake_;
  std::vector<request> pending_ GUARDED_BY(mutex_);  // queued for the next group
  // Leader progress (requests taken from pending_, groups ended): run()'s safety net.
  std::uint64_t dequeued_ GUARDED_BY(mutex_) = 0;
  bool leading_ GUARDED_BY(mutex_) = false;  // a leader is writing a group
  // A leader found the log held (a task on the log thread): the log thread writes what
  // is queued once its task is done.
  bool log_wanted_ GUARDED_BY(mutex_) = false;
  // Run on the log thread between groups, under log_mutex_ (a call through
  // std::function: the analysis does not check it).
  std::deque<std::function<void()>> tasks_ GUARDED_BY(mutex_);
  bool stopping_ GUARDED_BY(mutex_) = false;
  // A leader found a snapshot due (the log thread has no other reason to wake while
  // nothing is taken, as during a database outage).
  bool snapshot_wanted_ GUARDED_BY(mutex_) = false;
  std::uint64_t min_queued_tag_ GUARDED_BY(mutex_) = UINT64_MAX;
  bool started_ = false;  // no lock: written by start(), read by stop(), on one thread

  // Jobs logged and not yet applied, and upper bounds of what they will add: the keys
  // they may create and their bytes (for the pending bounds) and the sum of |delta|
  // (for the pending-sum bound).
  util::mutex unapplied_mutex_;
  std::vector<std::shared_ptr<job>> unapplied_ GUARDED_BY(unapplied_mutex_);
  std::atomic<std::size_t> unapplied_keys_{0};
  std::atomic<std::size_t> unapplied_bytes_{0};
  store::pending_charge unapplied_charge() const {
    return {unapplied_keys_.load(), unapplied_bytes_.load()};
  }
  std::atomic<std::uint64_t> unapplied_magnitude_{0};

  std::atomic<std::uint64_t> groups_{0};
  std::atomic<std::uint64_t> grouped_requests_{0};
  std::atomic<std::uint64_t> log_thread_groups_{0};

  std::function<void()> group_hook_;

  std::thread thread_;
};

}  // namespace slotted::durable
