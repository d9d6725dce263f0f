// The committer's work on the log thread between two groups (see committer.hpp): the
// flusher's takes, the releases, the resets and the snapshots; and the unique entries of
// the requests it applies.
#include <future>
#include <iterator>
#include <type_traits>

#include "durable/committer.hpp"
#include "durable/recovery.hpp"
#include "metrics/metrics.hpp"

namespace slotted::durable {

using clock = std::chrono::steady_clock;

template <typename Task>
auto committer::on_log_thread(Task task) {
  using result_type = decltype(task());
  std::promise<result_type> result;
  {
    util::lock_guard lock(mutex_);
    // Checked as it is queued: the log thread exits only once stopping_ is set and
    // tasks_ is empty, so a task queued before runs. Run here instead, a take could
    // overtake a release still queued, which would then log the take's batches as
    // committed.
    if (stopping_) return result_type{};
    tasks_.push_back([&]() REQUIRES(log_mutex_) {
      // An exception (bad_alloc forming batches) goes to the caller, not out of the log
      // thread (which would end the process).
      try {
        if constexpr (std::is_void_v<decltype(task())>) {
          task();
          result.set_value();
        } else {
          result.set_value(task());
        }
      } catch (...) {
        result.set_exception(std::current_exception());
      }
    });
  }
  wake_.notify_one();
  return result.get_future().get();
}

bool committer::take(const former& form, const publisher& publish) {
  // Once stop() began: false, nothing taken, the store keeps it.
  return on_log_thread([&]() REQUIRES(log_mutex_) {
    // The cut: everything logged before the batches record is in the store, and
    // nothing logged after it can be (no group is written until this returns).
    drain();
    std::vector<store::pending_delta> deltas;
    const auto oldest = store_.take_all(deltas);
    // `form` takes the keyed requests and the unique entries too (they may be all
    // there is).
    auto batches = form(std::move(deltas), oldest.value_or(clock::now()));
    if (batches.empty()) return true;  // nothing, or only zero net deltas
    if (!durable::log_batches(log_, batches)) {
      // Nothing of these batches may commit unlogged: back where they came from.
      std::vector<store::pending_delta> back;
      std::vector<idempotency::keyed_request> keyed_back;
      std::vector<store::unique_entry> uniques_back;
      for (auto& b : batches) {
        std::visit(
            store::overloaded{
                [&](store::plain_content&) {
                  for (const auto& r : b.rows)
                    back.push_back({{r.record_type, r.record_id}, r.delta});
                  for (const auto& r : b.bucket_rows)
                    back.push_back({{r.record_type, r.record_id}, r.delta, r.gran, r.bucket});
                },
                [&](store::keyed_content& k) {
                  std::move(k.requests.begin(), k.requests.end(), std::back_inserter(keyed_back));
                },
                [&](store::unique_content& u) {
                  std::move(u.entries.begin(), u.entries.end(), std::back_inserter(uniques_back));
                }},
            b.content);
      }
      store_.add_deltas(back);
      if (!keyed_back.empty()) keyed_->put_back(std::move(keyed_back));
      if (!uniques_back.empty()) uniques_->add(uniques_back);
      return false;
    }
    // Published before the next snapshot can copy the queue.
    publish(std::move(batches));
    return true;
  });
}

void committer::release(std::uint64_t min_queued_tag) {
  {
    util::lock_guard lock(mutex_);
    min_queued_tag_ = min_queued_tag;
    tasks_.push_back([this]() REQUIRES(log_mutex_) {
      std::uint64_t min_tag = 0;
      {
        util::lock_guard l(mutex_);
        min_tag = min_queued_tag_;
      }
      durable::release(log_, min_tag);
    });
  }
  wake_.notify_one();
}

bool committer::batches_logged_committed() {
  // Once stop() began: false (stop() runs what is queued, nothing after it).
  return on_log_thread([this]() REQUIRES(log_mutex_) {
    std::uint64_t min_tag = 0;
    {
      util::lock_guard l(mutex_);
      min_tag = min_queued_tag_;
    }
    durable::release(log_, min_tag);  // logs the committed record if nothing is queued
    return log_.batches_logged_committed();
  });
}

std::optional<std::int64_t> committer::drop_pending(const store::counter_key& key) {
  // Once stop() began: nullopt, nothing dropped.
  return on_log_thread([&]() REQUIRES(log_mutex_) -> std::optional<std::int64_t> {
    // The cut, as for a take: everything logged so far is in the store, and nothing
    // logged after the record can be (no group is written until this returns).
    drain();
    std::string record;
    append_reset(record, key);
    // Synced in every wal.fsync mode: the reset is answered only once it holds.
    if (!log_.append(record, true)) return std::nullopt;
    return store_.drop(key);
  });
}

result<void> committer::snapshot() {
  drain();  // a snapshot holds everything logged, so it must all be in the store
  std::vector<store::pending_delta> deltas;
  store_.copy_all(deltas);
  const auto batches = queue_->queued_copy();
  const auto keyed =
      keyed_ != nullptr ? keyed_->pending_copy() : std::vector<idempotency::keyed_request>{};
  std::vector<store::unique_entry> uniques;
  if (uniques_ != nullptr) uniques_->copy_all(uniques);
  const auto tag = durable::log_snapshot(log_, batches, deltas, keyed, uniques);
  if (!tag) return tag.failed();
  // Only now that the snapshot holds them do the queued batches belong to it.
  queue_->retag_all(*tag);
  return {};
}

void committer::apply_uniques(std::span<const store::unique_entry> entries) {
  // Held once each, as without a WAL (app/counter_service.cpp); whether another instance
  // counted one already is known only as its batch commits.
  const std::size_t duplicates = uniques_->add(entries);
  log_metrics_.unique_items_accepted.Increment(static_cast<double>(entries.size()));
  log_metrics_.unique_items_duplicate.Increment(static_cast<double>(duplicates));
}

}  // namespace slotted::durable
