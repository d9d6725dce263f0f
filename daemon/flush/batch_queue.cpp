// The batch queue: queued, in flight, in doubt, and the generation that reads follow (see
// flusher.hpp: queue_mutex_).
#include "flush/flusher.hpp"

#include <algorithm>
#include <array>

#include "flush/batch_schedule.hpp"
#include "flush/flusher_internal.hpp"
#include "model/errors.hpp"
#include "util/log.hpp"

namespace slotted::flush {

void flusher::set_committing(bool committing) {
  {
    util::lock_guard lock(queue_mutex_);
    if ((generation_ % 2 == 1) != committing) ++generation_;
  }
  generation_changed_.notify_all();
}

void flusher::publish(std::vector<flush_batch>&& batches) {
  util::lock_guard lock(queue_mutex_);
  for (auto& b : batches) {
    queued_rows_ += rows_held(b);
    queued_.push_back(std::move(b));
  }
  store_.set_unwritten_rows(queued_rows_);
}

void flusher::enqueue(std::vector<flush_batch> batches) {
  // Each may have committed before the restart, its committed record never logged: in
  // doubt, as after a connection lost during its COMMIT, until the ledger answers for it
  // (expand_recovered for the parts of a split one, else its own commit attempt). Until
  // then a read would count it twice, in the table and as queued: reads wait for the
  // answer or say retry (read_stable).
  util::lock_guard lock(queue_mutex_);
  for (auto& b : batches) {
    b.recovered = true;
    queued_rows_ += rows_held(b);
    queued_.push_back(std::move(b));
    in_doubt_.push_back(&queued_.back());
  }
  store_.set_unwritten_rows(queued_rows_);
}

std::vector<flush_batch> flusher::queued_copy() {
  util::lock_guard lock(queue_mutex_);
  return {queued_.begin(), queued_.end()};
}

void flusher::retag_all(std::uint64_t tag) {
  util::lock_guard lock(queue_mutex_);
  for (auto& b : queued_) b.wal_tag = tag;
}

void flusher::release_source() {
  if (source_ == nullptr) return;
  std::uint64_t min_tag = UINT64_MAX;
  {
    util::lock_guard lock(queue_mutex_);
    for (const auto& b : queued_) min_tag = std::min(min_tag, b.wal_tag);
  }
  source_->release(min_tag);
}

void flusher::mark_in_flight(queue_position it) {
  if (in_flight_.empty()) ++generation_;  // odd: a read now may or may not see it
  in_flight_.push_back(&*it);
  metrics_.flush_batches_in_flight.Set(static_cast<double>(in_flight_.size()));
}

void flusher::unmark_in_flight(queue_position it) {
  std::erase(in_flight_, &*it);
  if (in_flight_.empty()) ++generation_;
  metrics_.flush_batches_in_flight.Set(static_cast<double>(in_flight_.size()));
}

bool flusher::deadline_hit() const {
  util::lock_guard lock(queue_mutex_);
  return deadline_hit_;
}

flusher::queue_position flusher::next_batch() {
  // Only a prefix is looked at: a batch further back waits for a later look, which
  // keeps a pick cheap when an outage left thousands queued. Every batch before the
  // oldest waiting one is in flight (at most max_flush_connections), so the prefix
  // holds that one, which can start once nothing before it is in flight.
  constexpr std::size_t lookahead = 64;
  std::array<batch_span, lookahead> spans;
  std::array<queue_position, lookahead> where;
  std::size_t n = 0;
  for (auto it = queued_.begin(); it != queued_.end() && n < lookahead; ++it, ++n) {
    const bool flying = std::find(in_flight_.begin(), in_flight_.end(), &*it) != in_flight_.end();
    spans[n] = span_of(*it, flying);
    where[n] = it;
  }
  const auto pick = next_startable(std::span<const batch_span>(spans.data(), n));
  return pick ? where[*pick] : queued_.end();
}

void flusher::expand_recovered(db::connection& conn, std::uint64_t run) {
  // One look at the ledger for every queued batch of that run.
  const auto committed = db::committed_split_parts(conn, settings_.instance_id, run);
  util::lock_guard lock(queue_mutex_);
  for (auto it = queued_.begin(); it != queued_.end();) {
    flush_batch& b = *it;
    // A keyed batch stays whole: its keys tell which of its requests committed.
    const bool ours = b.recovered && b.run_id == run && b.keyed.empty();
    if (!b.keyed.empty() && b.run_id == run) b.recovered = false;
    if (ours) b.recovered = false;
    auto parts =
        ours && !committed.empty() ? uncommitted_parts(b, committed) : std::vector<flush_batch>{};
    if (!ours || committed.empty() || (parts.size() == 1 && parts.front().seq == b.seq)) {
      ++it;
      continue;
    }
    // The committed parts are in the table already and leave the queue; the others
    // take its place.
    log::info("batch ", b.seq, " of run ", b.run_id,
              " was split before the restart and parts of it committed; ", parts.size(),
              " parts left to write");
    queued_rows_ -= rows_held(b);
    for (auto& part : parts) {
      queued_rows_ += rows_held(part);
      queued_.insert(it, std::move(part));
    }
    std::erase(in_doubt_, &b);
    it = queued_.erase(it);
  }
  store_.set_unwritten_rows(queued_rows_);
}

void flusher::update_gauges() {
  std::optional<clock::time_point> oldest = store_.oldest();
  std::size_t queued_rows = 0;
  {
    util::lock_guard lock(queue_mutex_);
    queued_rows = queued_rows_;
    if (!queued_.empty() && (!oldest || queued_.front().oldest_arrival < *oldest)) {
      oldest = queued_.front().oldest_arrival;
    }
  }
  // The pending entries, as against the limit (keyed requests reserved or pending
  // included).
  metrics_.pending_keys.Set(static_cast<double>(store_.keys() + queued_rows + store_.held()));
  metrics_.pending_oldest_age_seconds.Set(
      oldest ? std::chrono::duration<double>(clock::now() - *oldest).count() : 0.0);
}

}  // namespace slotted::flush
