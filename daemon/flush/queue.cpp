// The flusher's queue of batches (see queue.hpp).
#include "flush/queue.hpp"

#include <algorithm>
#include <array>
#include <cassert>

#include "flush/batch_forming.hpp"
#include "flush/batch_schedule.hpp"
#include "flush/internal.hpp"
#include "util/log.hpp"

namespace slotted::flush {

namespace {
// Matches the entry of batch `b` in queue::retagged_in_flight_.
auto of(const store::flush_batch& b) {
  return
      [&b](const std::pair<const store::flush_batch*, std::uint64_t>& e) { return e.first == &b; };
}
}  // namespace

queue::queue(observer obs) : observer_(std::move(obs)) {}

void queue::held_changed() {
  if (observer_.unwritten) observer_.unwritten(queued_held_);
}

void queue::wake_all() {
  writers_wake_.notify_all();
  generation_changed_.notify_all();
}

void queue::publish(std::vector<store::flush_batch>&& batches) {
  util::lock_guard lock(mutex_);
  for (auto& b : batches) {
    queued_.push_back(std::move(b));
    queued_held_ += held_charge(queued_.back());
  }
  held_changed();
}

void queue::enqueue_recovered(std::vector<store::flush_batch> batches) {
  // Each may have committed before the restart, its committed record never logged: in
  // doubt, as after a connection lost during its COMMIT, until the ledger answers for it
  // (replace_recovered for the parts of a split one, else its own commit attempt). Until
  // then a read would count it twice, in the table and as queued: reads wait for the
  // answer or say retry.
  util::lock_guard lock(mutex_);
  for (auto& b : batches) {
    b.recovered = true;
    queued_held_ += held_charge(b);
    queued_.push_back(std::move(b));
    in_doubt_.push_back(&queued_.back());
  }
  held_changed();
}

std::vector<store::flush_batch> queue::copy() const {
  util::lock_guard lock(mutex_);
  return {queued_.begin(), queued_.end()};
}

void queue::retag_all(std::uint64_t tag) {
  util::lock_guard lock(mutex_);
  for (auto& b : queued_) {
    const auto flying = std::find(in_flight_.begin(), in_flight_.end(), &b);
    if (flying == in_flight_.end()) {
      b.wal_tag = tag;
      continue;
    }
    // Its writer reads it without the lock (a split copies it): the tag waits for it.
    const auto e = std::find_if(retagged_in_flight_.begin(), retagged_in_flight_.end(), of(b));
    if (e != retagged_in_flight_.end())
      e->second = tag;
    else
      retagged_in_flight_.emplace_back(&b, tag);
  }
}

std::uint64_t queue::tag_of(const store::flush_batch& b) const {
  const auto e = std::find_if(retagged_in_flight_.begin(), retagged_in_flight_.end(), of(b));
  return e != retagged_in_flight_.end() ? e->second : b.wal_tag;
}

std::uint64_t queue::settle_tag(const store::flush_batch& b) {
  const std::uint64_t tag = tag_of(b);
  std::erase_if(retagged_in_flight_, of(b));
  return tag;
}

std::uint64_t queue::min_wal_tag() const {
  std::uint64_t min_tag = UINT64_MAX;
  util::lock_guard lock(mutex_);
  for (const auto& b : queued_) min_tag = std::min(min_tag, tag_of(b));
  return min_tag;
}

std::size_t queue::size() const {
  util::lock_guard lock(mutex_);
  return queued_.size();
}

std::size_t queue::rows() const {
  util::lock_guard lock(mutex_);
  return queued_held_.entries;
}

queue::backlog queue::held() const {
  util::lock_guard lock(mutex_);
  backlog out{queued_held_.entries, std::nullopt};
  if (!queued_.empty()) out.oldest_arrival = queued_.front().oldest_arrival;
  return out;
}

std::optional<std::uint64_t> queue::first_seq() const {
  util::lock_guard lock(mutex_);
  if (queued_.empty()) return std::nullopt;
  return queued_.front().seq;
}

bool queue::drained() const {
  util::lock_guard lock(mutex_);
  return queued_.empty() && in_doubt_.empty();
}

std::optional<std::uint64_t> queue::recovered_run() const {
  util::lock_guard lock(mutex_);
  for (const auto& b : queued_) {
    if (b.recovered) return b.run_id;
  }
  return std::nullopt;
}

void queue::replace_recovered(std::uint64_t run, const std::vector<std::uint64_t>& committed) {
  util::lock_guard lock(mutex_);
  for (auto it = queued_.begin(); it != queued_.end();) {
    store::flush_batch& b = *it;
    // A keyed batch stays whole: its keys tell which of its requests committed.
    const bool keyed = store::keyed_of(b) != nullptr;
    const bool ours = b.recovered && b.run_id == run && !keyed;
    if (keyed && b.run_id == run) b.recovered = false;
    if (ours) b.recovered = false;
    auto parts = ours && !committed.empty() ? uncommitted_parts(b, committed)
                                            : std::vector<store::flush_batch>{};
    if (!ours || committed.empty() || (parts.size() == 1 && parts.front().seq == b.seq)) {
      ++it;
      continue;
    }
    // The committed parts are in the table already and leave the queue; the others
    // take its place.
    log::info("batch ", b.seq, " of run ", b.run_id,
              " was split before the restart and parts of it committed; ", parts.size(),
              " parts left to write");
    queued_held_ -= held_charge(b);
    for (auto& part : parts) {
      queued_held_ += held_charge(part);
      queued_.insert(it, std::move(part));
    }
    std::erase(in_doubt_, &b);
    it = queued_.erase(it);
  }
  held_changed();
}

void queue::begin_round() {
  util::lock_guard lock(mutex_);
  round_stopped_ = false;
}

void queue::stop_round() {
  {
    util::lock_guard lock(mutex_);
    round_stopped_ = true;
  }
  writers_wake_.notify_all();
}

queue::position queue::next_startable() {
  // Only a prefix is looked at: a batch further back waits for a later look, which
  // keeps a pick cheap when an outage left thousands queued. Every batch before the
  // oldest waiting one is in flight (at most max_flush_connections), so the prefix
  // holds that one, which can start once nothing before it is in flight.
  constexpr std::size_t lookahead = 64;
  std::array<batch_span, lookahead> spans;
  std::array<position, lookahead> where;
  std::size_t n = 0;
  for (auto it = queued_.begin(); it != queued_.end() && n < lookahead; ++it, ++n) {
    const bool flying = std::find(in_flight_.begin(), in_flight_.end(), &*it) != in_flight_.end();
    spans[n] = span_of(*it, flying);
    where[n] = it;
  }
  const auto pick = flush::next_startable(std::span<const batch_span>(spans.data(), n));
  return pick ? where[*pick] : queued_.end();
}

std::optional<queue::position> queue::take_next(const stop_deadline& deadline) {
  position it;
  {
    util::unique_lock lock(mutex_);
    for (;;) {
      if (round_stopped_) return std::nullopt;
      // Nothing left that is not in flight: this writer is done (another one's refused
      // batch may still be split; that writer writes its halves).
      if (queued_.size() == in_flight_.size()) return std::nullopt;
      if (deadline.passed()) {
        // Shutting down: what is left stays queued (and in the WAL, when there is one).
        deadline_hit_ = true;
        round_stopped_ = true;
        lock.unlock();
        writers_wake_.notify_all();
        return std::nullopt;
      }
      it = next_startable();
      if (it != queued_.end()) break;
      // Every waiting batch conflicts with one before it: wait for a flight to end.
      ++waiting_;
      lock.wait(writers_wake_);
      --waiting_;
    }
    mark_in_flight(it);
  }
  generation_changed_.notify_all();
  return it;
}

void queue::mark_in_flight(position it) {
  if (in_flight_.empty()) ++generation_;  // odd: a read now may or may not see it
  in_flight_.push_back(&*it);
  if (observer_.in_flight) observer_.in_flight(in_flight_.size());
}

void queue::unmark_in_flight(position it) {
  std::erase(in_flight_, &*it);
  if (in_flight_.empty()) ++generation_;
  if (observer_.in_flight) observer_.in_flight(in_flight_.size());
}

void queue::remove(position it) {
  // Only the writer that took `it` gives it back.
  assert(std::find(in_flight_.begin(), in_flight_.end(), &*it) != in_flight_.end());
  std::erase(in_doubt_, &*it);
  settle_tag(*it);
  // Gone from the queue before the generation turns even: a read that waited for the
  // flight to end finds it in the table and no longer pending.
  unmark_in_flight(it);
  queued_.erase(it);
}

void queue::pop(position it) {
  {
    util::lock_guard lock(mutex_);
    queued_held_ -= held_charge(*it);
    remove(it);
    held_changed();
  }
  wake_all();
}

void queue::replace_with_halves(position it, store::flush_batch&& left,
                                store::flush_batch&& right) {
  // Their nodes are made first: an allocation that fails leaves the queue as it was.
  const auto held = held_charge(left) + held_charge(right);
  batch_list halves;
  halves.push_back(std::move(left));
  halves.push_back(std::move(right));
  {
    util::lock_guard lock(mutex_);
    queued_held_ -= held_charge(*it);
    queued_held_ += held;
    halves.front().wal_tag = halves.back().wal_tag = settle_tag(*it);
    queued_.splice(it, halves);
    remove(it);
    held_changed();
  }
  wake_all();
}

void queue::give_back(position it, bool in_doubt) {
  {
    util::lock_guard lock(mutex_);
    if (in_doubt && std::find(in_doubt_.begin(), in_doubt_.end(), &*it) == in_doubt_.end())
      in_doubt_.push_back(&*it);
    it->wal_tag = settle_tag(*it);
    unmark_in_flight(it);
    round_stopped_ = true;
  }
  wake_all();
}

void queue::mark_deadline_hit() {
  util::lock_guard lock(mutex_);
  deadline_hit_ = true;
}

void queue::clear_deadline_hit() {
  util::lock_guard lock(mutex_);
  deadline_hit_ = false;
}

bool queue::deadline_hit() const {
  util::lock_guard lock(mutex_);
  return deadline_hit_;
}

void queue::set_committing(bool committing) {
  {
    util::lock_guard lock(mutex_);
    assert(in_flight_.empty());  // the parity is the flight's while batches commit
    if ((generation_ % 2 == 1) != committing) ++generation_;
  }
  generation_changed_.notify_all();
}

bool queue::settled() const {
  return generation_ % 2 == 0 && in_doubt_.empty();
}

std::optional<std::uint64_t> queue::wait_settled(std::chrono::milliseconds timeout) {
  util::unique_lock lock(mutex_);
  ++waiting_;
  const bool settles =
      lock.wait_for(generation_changed_, timeout, [this]() REQUIRES(mutex_) { return settled(); });
  --waiting_;
  if (!settles) return std::nullopt;
  return generation_;
}

result<bool> queue::read_pending(
    std::uint64_t before, const std::function<result<void>(const batch_list&)>& add_pending) {
  util::lock_guard lock(mutex_);
  if (auto added = add_pending(queued_); !added) return added.failed();
  return generation_ == before && settled();
}

std::size_t queue::waiting() const {
  util::lock_guard lock(mutex_);
  return waiting_;
}

std::uint64_t queue::generation() const {
  util::lock_guard lock(mutex_);
  return generation_;
}

}  // namespace slotted::flush
