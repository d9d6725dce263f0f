#include "durable/committer.hpp"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include "durable/recovery.hpp"
#include "util/log.hpp"

namespace slotted::durable {

namespace net = boost::asio;
using clock = std::chrono::steady_clock;

namespace {
// The committer whose end-of-turn lead this HTTP thread has posted to its loop and not
// yet run: one post per loop turn, whatever number of requests the turn submits.
thread_local const void* lead_posted_for = nullptr;

bool runs_here(net::io_context* home) {
  return home != nullptr && home->get_executor().running_in_this_thread();
}
}  // namespace

struct committer::request {
  std::vector<ingest::increment> increments;
  // Its items with a `client` (logged in the same record as the others), held in
  // uniques_ once applied.
  std::vector<store::unique_entry> uniques;
  std::string record;  // the increments as one WAL record, encoded by the submitter
  net::io_context* home = nullptr;
  done_fn done;
  commit_result result = commit_result::applied;
  std::uint64_t magnitude = 0;  // sum of |delta|
  // What its increments and unique entries may hold against the pending bounds once
  // applied (store/pending_charge.hpp); a keyed request's is held by the keyed store.
  store::pending_charge charge{};
  // A keyed request (then `increments` is empty): applying it is accepting it in the
  // keyed store; admitted there, so the store's limits do not apply.
  std::optional<idempotency::keyed_request> keyed{};
  // Submitted on its home loop's own thread: a leader may hand the next group there.
  bool on_loop = false;
};

// The requests of one group that one HTTP thread applies and answers.
struct committer::job {
  util::mutex mutex;
  bool applied GUARDED_BY(mutex) = false;  // the logged increments are in the store
  // No lock: filled before the job is shared; only apply_whole then moves `keyed` out.
  std::vector<request> requests;
  store::pending_charge held;   // logged requests' charges, counted in unapplied_
  std::uint64_t magnitude = 0;  // their |delta|, counted in unapplied_magnitude_
  bool keyed = false;           // holds a logged keyed request
};

committer::committer(daemon_log& log, store::pending_store& store,
                     const store::pending_limits& limits)
    : log_(log.log()),
      log_config_(log.config()),
      log_metrics_(log.metrics()),
      store_(store),
      limits_(limits),
      synced_(log.config().fsync == config::fsync_mode::always) {}

committer::~committer() {
  stop();
}

void committer::start(store::batch_queue& queue, bool replayed) {
  queue_ = &queue;
  // Everything replayed is logged again as one snapshot; the old segments then go.
  util::unique_lock log_lock(log_mutex_);  // no other thread yet; snapshot() requires it
  if (const auto written = snapshot(); !written) {
    // Only a full disk is run through (ingest answers 503 until appends fit): any other
    // error (EACCES, EIO, EROFS...) will not pass by itself, and fails the start.
    if (replayed || !log_.last_failure_was_full_disk())
      throw wal::wal_error("cannot write to the WAL directory " + log_.dir() + ": " +
                           written.failed().detail);
    log::warn("WAL: ", written.failed().detail,
              "; the WAL's disk is full: increments are refused (503) until there is room");
  }
  log_lock.unlock();
  started_ = true;
  thread_ = std::thread([this] { run(); });
}

void committer::stop() {
  {
    util::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
  util::lock_guard log_lock(log_mutex_);
  closed_ = true;
  // Releases queued after the thread's last look, in their order (takes and other waited-for
  // tasks are refused once stopping_ is set, see on_log_thread). A later release is dropped:
  // its committed record is then missing; a replay sends those batches again (no-ops).
  std::deque<std::function<void()>> left;
  {
    util::lock_guard lock(mutex_);
    left.swap(tasks_);
  }
  for (auto& task : left) task();
  // What an HTTP loop that stopped first was to apply (a group written after the loops
  // stopped, its post never run): into the store now, and out of unapplied_. The last
  // reference to its job, and so to the answer callbacks and the sessions they hold, is
  // then the loop's queued handler, destroyed with its io_context, not by this object
  // after the loops are gone. Those requests are never answered; the WAL replays them.
  drain();
  if (started_ && log_.unsynced()) static_cast<void>(log_.sync());  // a failure is logged
}

void committer::submit(std::vector<ingest::increment>&& increments, net::io_context* home,
                       done_fn done) {
  submit(std::move(increments), {}, home, std::move(done));
}

void committer::submit(std::vector<ingest::increment>&& increments,
                       std::vector<store::unique_entry>&& uniques, net::io_context* home,
                       done_fn done) {
  request r{std::move(increments), std::move(uniques), {}, home, std::move(done)};
  // Encoded here, on the submitting thread: the log thread only concatenates.
  append_increments(r.record, r.increments, r.uniques);
  r.magnitude = store::pending_store::magnitude(r.increments);
  r.charge = store::plain_charge(r.increments.size());
  for (const auto& e : r.uniques) r.charge += store::charge_of(e);
  queue(std::move(r));
}

void committer::queue(request&& r) {
  r.on_loop = runs_here(r.home);
  net::io_context* const home = r.on_loop ? r.home : nullptr;
  {
    util::unique_lock lock(mutex_);
    if (stopping_) {
      lock.unlock();
      r.done(commit_result::stopping);
      return;
    }
    pending_.push_back(std::move(r));
  }
  if (home == nullptr) return lead(false);
  // The rest of this loop turn (the other connections whose requests arrived with this
  // one) queues too, and one write takes them all.
  if (lead_posted_for == this) return;
  net::post(*home, [this] {
    if (lead_posted_for == this) lead_posted_for = nullptr;
    lead(false);
  });
  // Marked only once posted (a post runs nothing before it returns): a post that throws
  // (bad_alloc) must not leave this loop believing a lead is queued.
  lead_posted_for = this;
}

void committer::submit_keyed(idempotency::keyed_request&& keyed, net::io_context* home,
                             done_fn done) {
  const std::string key = keyed.key;
  // Whatever is not applied (logged and accepted) gives the key's reservation back.
  request r{{}, {}, {}, home, [this, key, done = std::move(done)](commit_result result) {
              if (result != commit_result::applied) keyed_->abandon(key);
              done(result);
            }};
  append_keyed(r.record, keyed);
  r.keyed = std::move(keyed);
  queue(std::move(r));
}

void committer::run() {
  util::unique_lock lock(mutex_);
  const auto& cfg = log_config_;
  const bool interval_mode = cfg.fsync == config::fsync_mode::interval;
  // Appends happen on other threads without a word to this one: it looks at the log
  // when the oldest unsynced append may be due, or an interval from now.
  auto next_look = clock::now() + cfg.fsync_interval;
  // The safety net: every queued request has a leader writing, or a lead posted to its
  // loop, or log_wanted_; should that lead never run (a loop stopped at shutdown before
  // its posted lead, an exception in a handler before it), this thread looks at the
  // queue at least every safety_look and writes it when no leader took from it or ended
  // since the previous look, which found it non-empty too, and no leader is writing.
  constexpr auto safety_look = std::chrono::milliseconds(250);
  std::optional<std::uint64_t> dequeued_seen;  // dequeued_ at a look that found requests
  while (true) {
    // Stopping, it waits for a leader still writing (which wakes it once done).
    const auto has_work = [&]() REQUIRES(mutex_) {
      return (stopping_ && !leading_) || snapshot_wanted_ || log_wanted_ || !tasks_.empty();
    };
    const auto safety_deadline = clock::now() + safety_look;
    const bool woken = lock.wait_until(
        wake_, interval_mode ? std::min(next_look, safety_deadline) : safety_deadline, has_work);
    while (!tasks_.empty()) {
      auto task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      {
        util::lock_guard log_lock(log_mutex_);
        task();
      }
      lock.lock();
    }
    // What a leader left to this thread (it found the log held by a task), what is left
    // at stop(), or what no leader took (the safety net above).
    log_wanted_ = false;
    const bool stranded = !pending_.empty() && dequeued_seen == dequeued_;
    if (!pending_.empty() && !leading_ && (woken || stranded)) {
      lock.unlock();
      lead(true);
      lock.lock();
    }
    dequeued_seen = pending_.empty() ? std::nullopt : std::optional<std::uint64_t>(dequeued_);
    const bool stop_now = stopping_ && !leading_ && pending_.empty() && tasks_.empty();
    snapshot_wanted_ = false;  // looked at below
    lock.unlock();
    {
      util::lock_guard log_lock(log_mutex_);
      if (interval_mode && log_.unsynced() && clock::now() >= log_.last_sync() + cfg.fsync_interval)
        static_cast<void>(log_.sync());  // a failure is logged
      // Nothing unsynced: an append after this look is due an interval from now at most.
      next_look = log_.unsynced() ? log_.last_sync() + cfg.fsync_interval
                                  : clock::now() + cfg.fsync_interval;
      if (stop_now) return;
      if (log_.snapshot_due()) static_cast<void>(snapshot());  // retried when due again
    }
    lock.lock();
  }
}

template <typename BeforeDrain>
commit_result committer::admit(const request& r, store::pending_charge logged,
                               std::uint64_t unapplied, BeforeDrain before_drain) {
  if (r.keyed) return commit_result::applied;  // admitted by the keyed store
  // The pending limit, as without a WAL: checked before anything is logged, counting
  // what is logged but not yet applied.
  if (store_.over_pending_limit(limits_, unapplied_charge() + logged))
    return commit_result::over_limit;
  // And the bound on pending sums: what is logged must be applicable, or replay would
  // apply what the client was told was refused.
  std::uint64_t pending_change = 0;
  if (__builtin_add_overflow(unapplied_magnitude_.load(), unapplied, &pending_change))
    pending_change = UINT64_MAX;
  auto fit = store_.fits(r.increments, pending_change);
  if (fit == store::pending_store::fit::maybe) {
    // Near the bound: what is logged so far goes into the store first, then an exact
    // check (nothing else is logged, so nothing else adds, while log_mutex_ is held).
    before_drain();
    drain();
    fit = store_.fits(r.increments, 0);
  }
  return fit == store::pending_store::fit::no ? commit_result::out_of_range
                                              : commit_result::applied;
}

namespace {
// Runs f; an exception out of it is logged and ends the process (see lead() and apply()).
template <typename F>
void or_terminate(const char* doing, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    log::error("WAL: exception while ", doing, ", terminating: ", e.what());
    std::terminate();
  } catch (...) {
    log::error("WAL: unknown exception while ", doing, ", terminating");
    std::terminate();
  }
}
}  // namespace

void committer::lead(bool log_thread) {
  // An exception past leading_ = true would leave leading_ set for good: no later lead
  // writes, the queue and stop() wait for ever, the group's requests are dropped
  // unanswered and its keyed reservations never abandoned. Which of the group's records
  // were written, dispatched or applied when it was thrown is not known here, so no
  // answer (log_unavailable would be wrong for a written record: replay applies it) and
  // no undo is safe. The process ends instead, as it did when the log thread wrote: what
  // was answered is in the WAL; what was not is in doubt, as for a SIGKILL.
  or_terminate("writing a group", [&] { lead_groups(log_thread); });
}

void committer::lead_groups(bool log_thread) {
  util::unique_lock lock(mutex_);
  while (true) {
    if (leading_ || pending_.empty()) return;
    if (stopping_ && !log_thread) {
      // stop() began: the log thread writes what is left (the loops may be gone).
      lock.unlock();
      wake_.notify_one();
      return;
    }
    leading_ = true;
    lock.unlock();
    util::unique_lock log_lock(log_mutex_, std::defer_lock);
    if (log_thread) {
      log_lock.lock();
    } else if (!log_lock.try_lock()) {
      // The log thread holds the log for a take, a snapshot or a sync (disk I/O): an
      // HTTP loop does not wait for that. The group stays queued for the log thread,
      // which writes it once done (after the cut, for a take).
      lock.lock();
      leading_ = false;
      log_wanted_ = true;
      lock.unlock();
      wake_.notify_one();
      return;
    }
    lock.lock();
    std::vector<request> group = dequeue_group();
    lock.unlock();
    if (group_hook_) group_hook_();
    std::vector<std::shared_ptr<job>> local;
    write_group(group, local);
    // With wal.fsync never nothing else wakes the log thread while nothing is taken (a
    // database outage): without this the segments would only grow.
    const bool snapshot_due = log_.snapshot_due();
    log_lock.unlock();
    count_group(group.size(), log_thread);

    // What queued meanwhile: the next leader is the loop of its first request (a post;
    // that loop answers its own requests without a post back), so this thread goes back
    // to its connections or its tasks; else (no such loop: a caller off any loop) an
    // HTTP thread writes it too. The log thread writes one group per call and leaves
    // the rest to run(), which runs the tasks queued meanwhile (takes, resets, releases,
    // snapshots, the interval sync) first: under steady load the queue is never empty
    // when a group ends, and a log thread that went on leading would run none of them.
    lock.lock();
    leading_ = false;
    ++dequeued_;  // a leader's end is progress too: a hand-off it posted is not stranded
    if (snapshot_due) snapshot_wanted_ = true;
    bool wake_log = snapshot_due || stopping_;
    bool again = false;
    net::io_context* next = nullptr;
    if (!pending_.empty() && !stopping_) {
      const auto& front = pending_.front();
      if (front.on_loop && !runs_here(front.home)) {
        next = front.home;
      } else if (log_thread) {
        log_wanted_ = true;  // run() leads again, after its tasks
      } else {
        again = true;
      }
    } else if (!pending_.empty() && log_thread) {
      log_wanted_ = true;  // stopping: run() writes the rest, a group per pass
    }
    lock.unlock();
    if (wake_log) wake_.notify_one();
    if (next != nullptr) net::post(*next, [this] { lead(false); });
    // Answered after the log is free: a take need not wait for this thread's answers.
    for (auto& j : local) apply_and_answer(*j);
    if (!again) return;
    lock.lock();
  }
}

std::vector<committer::request> committer::dequeue_group() {
  // Queued in a vector that grows by moving them: a copy would copy the answer callback.
  static_assert(std::is_nothrow_move_constructible_v<request>);
  std::size_t n = 0;
  std::size_t bytes = 0;
  while (n < pending_.size() && (n == 0 || bytes + pending_[n].record.size() <= max_group_bytes)) {
    bytes += pending_[n].record.size();
    ++n;
  }
  dequeued_ += n;
  std::vector<request> group;
  if (n == pending_.size()) {
    // The whole queue, as a rule: it becomes the group as it is, and the queue starts
    // again with room for as many (one allocation a group, not one a request), up to a
    // loop turn's worth: a burst's size is not held once it has passed.
    group.swap(pending_);
    pending_.reserve(std::min<std::size_t>(n, 256));
    return group;
  }
  const auto end = pending_.begin() + static_cast<std::ptrdiff_t>(n);
  group.assign(std::make_move_iterator(pending_.begin()), std::make_move_iterator(end));
  pending_.erase(pending_.begin(), end);
  return group;
}

void committer::count_group(std::size_t requests, bool log_thread) {
  groups_.fetch_add(1, std::memory_order_relaxed);
  grouped_requests_.fetch_add(requests, std::memory_order_relaxed);
  log_metrics_.wal_group_requests.Observe(static_cast<double>(requests));
  if (log_thread) log_thread_groups_.fetch_add(1, std::memory_order_relaxed);
}

void committer::write_group(std::vector<request>& group, std::vector<std::shared_ptr<job>>& local) {
  std::string bytes;
  std::size_t group_bytes = 0;
  for (const auto& r : group) group_bytes += r.record.size();
  bytes.reserve(group_bytes);
  std::vector<request> chunk;
  chunk.reserve(group.size());
  bool any_logged = false;
  store::pending_charge logged;  // what the requests logged in `bytes` may hold
  std::uint64_t unapplied = 0;   // their |delta|
  const auto write_chunk = [&]() REQUIRES(log_mutex_) {
    // One write for all of them: if it fails, none is logged, applied or acknowledged.
    if (const auto w = any_logged ? log_.append(bytes, synced_) : result<void>(); !w) {
      const auto failed = w.error() == errc::wal_sync_failed ? commit_result::log_unsynced
                                                             : commit_result::log_unavailable;
      for (auto& r : chunk)
        if (r.result == commit_result::applied) r.result = failed;
    }
    dispatch(chunk, local);
    chunk.clear();
    bytes.clear();
    any_logged = false;
    logged = {};
    unapplied = 0;
  };
  for (auto& r : group) {
    if (closed_) {
      r.result = commit_result::log_unavailable;
      chunk.push_back(std::move(r));
      continue;
    }
    r.result = admit(r, logged, unapplied, write_chunk);
    if (r.result != commit_result::applied) {
      chunk.push_back(std::move(r));
      continue;
    }
    logged += r.charge;
    if (__builtin_add_overflow(unapplied, r.magnitude, &unapplied)) unapplied = UINT64_MAX;
    bytes += r.record;
    any_logged = true;
    chunk.push_back(std::move(r));
  }
  write_chunk();
}

void committer::dispatch(std::vector<request>& chunk, std::vector<std::shared_ptr<job>>& local) {
  // One job per HTTP thread: a handful, so a linear search.
  std::vector<std::shared_ptr<job>> jobs;
  for (auto& r : chunk) {
    std::shared_ptr<job>* j = nullptr;
    for (auto& candidate : jobs) {
      if (candidate->requests.front().home == r.home) j = &candidate;
    }
    if (j == nullptr) {
      j = &jobs.emplace_back(std::make_shared<job>());
      // The first job, as a rule the whole chunk's (the leader's own loop): room for it
      // at once. Another loop's grows as needed: reserving the chunk for each of
      // http.threads jobs would hold that many times its size.
      if (jobs.size() == 1) (*j)->requests.reserve(chunk.size());
    }
    if (r.result == commit_result::applied) {
      (*j)->held += r.charge;
      (*j)->magnitude += r.magnitude;
      if (r.keyed) (*j)->keyed = true;
    }
    (*j)->requests.push_back(std::move(r));
  }
  for (auto& j : jobs) {
    // Registered before the log is free: a take that comes next applies it if its
    // thread has not yet.
    if (j->held.entries > 0 || j->keyed) {
      unapplied_keys_ += j->held.entries;
      unapplied_bytes_ += j->held.bytes;
      unapplied_magnitude_ += j->magnitude;
      util::lock_guard lock(unapplied_mutex_);
      unapplied_.push_back(j);
    } else {
      util::lock_guard lock(j->mutex);  // not shared yet: for the analysis
      j->applied = true;                // nothing to apply
    }
    auto* home = j->requests.front().home;
    if (home == nullptr || runs_here(home)) {
      local.push_back(j);
    } else {
      net::post(*home, [this, j] { apply_and_answer(*j); });
    }
  }
}

// An exception while applying (bad_alloc in store_.add or keyed_->accept) leaves the job
// part applied with j.applied false: a later drain would apply that part again (counted
// twice, logged once), and on an HTTP loop (whose run_io_context catches and runs on) the
// job's requests would never be answered. No undo is safe, so the process ends, as for an
// exception while leading: what was answered is in the WAL and replays once.
void committer::apply(job& j) {
  or_terminate("applying logged requests", [&] { apply_whole(j); });
}

void committer::apply_whole(job& j) {
  util::lock_guard lock(j.mutex);
  if (j.applied) return;
  for (auto& r : j.requests) {
    if (r.result != commit_result::applied) continue;
    if (r.keyed) {
      keyed_->accept(std::move(*r.keyed));
      continue;
    }
    // Checked before it was logged (fits, the pending limit counted it): applies.
    if (!r.increments.empty() && store_.add(r.increments, SIZE_MAX) != store::add_result::applied)
      log::error("WAL: a logged request could not be applied to the store");
    if (!r.uniques.empty()) apply_uniques(r.uniques);
  }
  j.applied = true;
  unapplied_keys_ -= j.held.entries;
  unapplied_bytes_ -= j.held.bytes;
  unapplied_magnitude_ -= j.magnitude;
  util::lock_guard l(unapplied_mutex_);
  std::erase_if(unapplied_, [&](const std::shared_ptr<job>& p) { return p.get() == &j; });
}

void committer::apply_and_answer(job& j) {
  apply(j);  // answered only once applied: a read after the answer sees it
  for (auto& r : j.requests) r.done(r.result);
}

void committer::drain() {
  std::vector<std::shared_ptr<job>> jobs;
  {
    util::lock_guard lock(unapplied_mutex_);
    jobs = unapplied_;
  }
  for (auto& j : jobs) apply(*j);
}

}  // namespace slotted::durable
