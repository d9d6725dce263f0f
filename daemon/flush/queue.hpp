#pragma once
// The flusher's queue of formed batches: queued (oldest first), in flight (being
// committed by a writer), in doubt (commit outcome unknown), and the generation that
// exact reads follow. No database here: the writer and the readers (flusher.hpp) ask it
// for batches and for a settled view, and it keeps their rules:
//
// - Batches start oldest first, a batch only when it conflicts with no batch before it
//   (batch_schedule.hpp); a batch in flight is never handed out again.
// - The generation is odd while any batch is in flight, or while a change a read could
//   see half of is made (set_committing: deltas moving from the store into batches, a
//   reset's commit); a read is exact when the generation was even and the same, with
//   nothing in doubt, before and after it (read_pending).
// - A batch leaves the queue (committed, or replaced by its halves) before the
//   generation turns even again, so a read that waited for the flight to end finds it in
//   the table and no longer pending.
//
// Thread-safety: every member may be called from any thread. The list is a std::list so
// that a batch in flight stays where it is while others leave or are split around it;
// its writer reads it through its position without the lock (only that writer removes
// it).

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <vector>

#include "flush/internal.hpp"
#include "model/batch.hpp"
#include "model/result.hpp"
#include "util/thread_annotations.hpp"

namespace slotted::flush {

class queue {
 public:
  using batch_list = std::list<store::flush_batch>;
  using position = batch_list::iterator;

  // Told of changes, under the queue's lock (keep them short, taking no lock that may
  // wait for the queue's): what the queued batches hold against the pending bounds
  // (held_charge), and the batches in flight.
  struct observer {
    std::function<void(store::pending_charge)> unwritten;
    std::function<void(std::size_t)> in_flight;
  };

  explicit queue(observer obs = {});
  queue(const queue&) = delete;
  queue& operator=(const queue&) = delete;

  // --- Filling and looking (any thread).
  // Appends newly formed batches.
  void publish(std::vector<store::flush_batch>&& batches) EXCLUDES(mutex_);
  // Appends batches recovered from the WAL: recovered, and in doubt until the ledger
  // answers for them (replace_recovered, or their own commit attempt).
  void enqueue_recovered(std::vector<store::flush_batch> batches) EXCLUDES(mutex_);
  std::vector<store::flush_batch> copy() const EXCLUDES(mutex_);
  // Every queued batch is logged in segment `tag` (a snapshot logged them). A batch in
  // flight, which its writer reads without the lock, takes the tag when it comes back
  // (give_back) or passes it to its halves; min_wal_tag counts it already.
  void retag_all(std::uint64_t tag) EXCLUDES(mutex_);
  // The least wal_tag of the queued batches (UINT64_MAX: none queued).
  std::uint64_t min_wal_tag() const EXCLUDES(mutex_);
  std::size_t size() const EXCLUDES(mutex_);
  // The entries the queued batches hold (rows_held).
  std::size_t rows() const EXCLUDES(mutex_);
  // The entries the queued batches hold and the oldest arrival of the oldest one, read
  // together.
  struct backlog {
    std::size_t rows = 0;
    std::optional<std::chrono::steady_clock::time_point> oldest_arrival;
  };
  backlog held() const EXCLUDES(mutex_);
  // The seq of the oldest queued batch.
  std::optional<std::uint64_t> first_seq() const EXCLUDES(mutex_);
  // Nothing queued and nothing in doubt (a reset may run).
  bool drained() const EXCLUDES(mutex_);

  // --- Recovered batches (before any batch is in flight).
  // The run of the oldest recovered batch not yet checked against the ledger.
  std::optional<std::uint64_t> recovered_run() const EXCLUDES(mutex_);
  // Replaces every recovered batch of `run` by what is left of it once the batches
  // whose seqs are in `committed` (the run's committed split parts, from the ledger)
  // are written (uncommitted_parts); each is checked then (no longer recovered).
  void replace_recovered(std::uint64_t run, const std::vector<std::uint64_t>& committed)
      EXCLUDES(mutex_);

  // --- A write round (writers on several threads).
  // A new round: nobody has stopped it.
  void begin_round() EXCLUDES(mutex_);
  // No writer starts another batch this round; waiting ones give up.
  void stop_round() EXCLUDES(mutex_);
  // The oldest batch that may start now (batch_schedule.hpp), marked in flight; waits
  // while every waiting batch conflicts with one before it. nullopt when this writer is
  // done: the round stopped, every batch left is in flight, or `deadline` passed (then
  // the deadline is hit and the round stops: what is left stays queued).
  std::optional<position> take_next(const stop_deadline& deadline) EXCLUDES(mutex_);
  // Batch `it`, in flight, committed (or was already, or was dropped): off the queue.
  void pop(position it) EXCLUDES(mutex_);
  // Batch `it`, in flight, refused for its data: replaced where it stands by its two
  // halves (`left` first), which keep its order against the others.
  void replace_with_halves(position it, store::flush_batch&& left, store::flush_batch&& right)
      EXCLUDES(mutex_);
  // Batch `it`, in flight, failed: it stays queued, in doubt when `in_doubt` (the
  // connection was lost during it), and the round stops.
  void give_back(position it, bool in_doubt) EXCLUDES(mutex_);
  // The stop deadline passed: nothing more is written (reset by clear_deadline_hit, at
  // the start of a cycle).
  void mark_deadline_hit() EXCLUDES(mutex_);
  void clear_deadline_hit() EXCLUDES(mutex_);
  bool deadline_hit() const EXCLUDES(mutex_);

  // --- The generation (exact reads).
  // Odd (true) or even again (false) around a change that a read could see half of,
  // while no batch is in flight (or the parity would be the writers').
  void set_committing(bool committing) EXCLUDES(mutex_);
  // Waits up to `timeout` for a settled queue (the generation even, nothing in doubt);
  // its generation, or nullopt if it did not settle.
  std::optional<std::uint64_t> wait_settled(std::chrono::milliseconds timeout) EXCLUDES(mutex_);
  // After a read begun at generation `before` (wait_settled): calls `add_pending` with
  // the queued batches, under the lock (it may read what else is pending, such as the
  // store, but take no lock that waits for the queue); its failure, or whether the
  // queue is still settled at `before` (else the read is to be done again).
  result<bool> read_pending(std::uint64_t before,
                            const std::function<result<void>(const batch_list&)>& add_pending)
      EXCLUDES(mutex_);
  std::uint64_t generation() const EXCLUDES(mutex_);
  // Threads blocked now in take_next() or wait_settled(): for tests, which wait for a
  // thread to block before they wake it.
  std::size_t waiting() const EXCLUDES(mutex_);

 private:
  position next_startable() REQUIRES(mutex_);
  void mark_in_flight(position it) REQUIRES(mutex_);
  void unmark_in_flight(position it) REQUIRES(mutex_);
  // Erases `it` (in flight) from the queue and the in-doubt list, and unmarks it.
  void remove(position it) REQUIRES(mutex_);
  // The tag retag_all gave batch `b` while it was in flight (its own wal_tag if none);
  // settle_tag also forgets it (the batch came back or leaves).
  std::uint64_t tag_of(const store::flush_batch& b) const REQUIRES(mutex_);
  std::uint64_t settle_tag(const store::flush_batch& b) REQUIRES(mutex_);
  bool settled() const REQUIRES(mutex_);
  void held_changed() REQUIRES(mutex_);
  // A flight ended or the round stopped: waiting writers and readers look again.
  void wake_all();

  const observer observer_;
  mutable util::mutex mutex_;
  std::condition_variable generation_changed_;
  std::condition_variable writers_wake_;
  batch_list queued_ GUARDED_BY(mutex_);
  store::pending_charge queued_held_ GUARDED_BY(mutex_);  // held_charge of queued_
  // Queued batches being committed now (at most flush.connections).
  std::vector<const store::flush_batch*> in_flight_ GUARDED_BY(mutex_);
  // Queued batches whose commit outcome is unknown (the connection was lost during it,
  // or recovered from the WAL) until a later attempt resolves it.
  std::vector<const store::flush_batch*> in_doubt_ GUARDED_BY(mutex_);
  // Batches in flight when retag_all ran, and their new tag (see retag_all).
  std::vector<std::pair<const store::flush_batch*, std::uint64_t>> retagged_in_flight_
      GUARDED_BY(mutex_);
  // Odd while batches are being committed: a concurrent read of the database may or
  // may not include them.
  std::uint64_t generation_ GUARDED_BY(mutex_) = 0;
  bool round_stopped_ GUARDED_BY(mutex_) = false;
  bool deadline_hit_ GUARDED_BY(mutex_) = false;
  std::size_t waiting_ GUARDED_BY(mutex_) = 0;
};

}  // namespace slotted::flush
