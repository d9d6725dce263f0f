// The flusher's queue of batches (flush/queue.hpp): its rules, without a database.

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "flush/queue.hpp"
#include "support/eventually.hpp"

namespace slotted::flush {
namespace {

using namespace std::chrono_literals;
using store::flush_batch;
using test::eventually;

// A plain batch `seq` over record ids [first, last] of type 1, one row each.
flush_batch batch(std::uint64_t seq, std::uint64_t first, std::uint64_t last) {
  flush_batch b;
  b.seq = seq;
  for (std::uint64_t id = first; id <= last; ++id) b.rows.push_back({1, id, 0, 1});
  return b;
}

std::vector<flush_batch> batches(std::initializer_list<flush_batch> list) {
  return {list};
}

const stop_deadline never;  // not set: never passes

std::vector<std::uint64_t> seqs(const queue& q) {
  std::vector<std::uint64_t> out;
  for (const auto& b : q.copy()) out.push_back(b.seq);
  return out;
}

TEST(FlushQueue, BatchesAreHandedOutOldestFirstAndLeaveWhenPopped) {
  queue q;
  q.publish(batches({batch(1, 1, 2), batch(2, 3, 4), batch(3, 5, 6)}));
  auto first = q.take_next(never);
  ASSERT_TRUE(first);
  EXPECT_EQ((*first)->seq, 1u);
  q.pop(*first);
  auto second = q.take_next(never);
  ASSERT_TRUE(second);
  EXPECT_EQ((*second)->seq, 2u);
  q.pop(*second);
  EXPECT_EQ(seqs(q), std::vector<std::uint64_t>{3});
}

TEST(FlushQueue, ABatchInFlightIsNotHandedOutAgain) {
  queue q;
  q.publish(batches({batch(1, 1, 2), batch(2, 3, 4)}));
  auto a = q.take_next(never);
  auto b = q.take_next(never);
  ASSERT_TRUE(a && b);
  EXPECT_EQ((*a)->seq, 1u);
  EXPECT_EQ((*b)->seq, 2u);  // disjoint: starts beside the first
  // Every queued batch is in flight: a third writer is done, not given one of them.
  EXPECT_FALSE(q.take_next(never));
  EXPECT_EQ(q.size(), 2u);
}

// Two writers: the first holds [1, 10], the second waits on another thread for [5, 15],
// which shares keys with it.
class FlushQueueConflict : public ::testing::Test {
 protected:
  void SetUp() override {
    q.publish(batches({batch(1, 1, 10), batch(2, 5, 15)}));
    const auto a = q.take_next(never);
    ASSERT_TRUE(a);
    first = *a;
    second = std::async(std::launch::async, [this] { return q.take_next(never); });
  }
  // A failed assertion must not leave the second writer waiting for good.
  void TearDown() override { q.stop_round(); }

  queue q;
  queue::position first;
  std::future<std::optional<queue::position>> second;
};

TEST_F(FlushQueueConflict, TheSecondWaitsForTheFirstToLeave) {
  ASSERT_TRUE(eventually([&] { return q.waiting() == 1; }, 10s)) << "the second never waited";
  EXPECT_EQ(second.wait_for(0ms), std::future_status::timeout);
  q.pop(first);
  // Woken by the pop (not by a timeout of its own: it has none).
  ASSERT_EQ(second.wait_for(10s), std::future_status::ready);
  const auto b = second.get();
  ASSERT_TRUE(b);
  EXPECT_EQ((*b)->seq, 2u);
}

TEST_F(FlushQueueConflict, TheSecondGivesUpWhenTheRoundStops) {
  ASSERT_TRUE(eventually([&] { return q.waiting() == 1; }, 10s)) << "the second never waited";
  q.give_back(first, false);  // a writer failed: the round stops
  ASSERT_EQ(second.wait_for(10s), std::future_status::ready);
  ASSERT_FALSE(second.get());  // (else the next take would wait for it)
  EXPECT_FALSE(q.take_next(never));
  q.begin_round();
  const auto again = q.take_next(never);
  ASSERT_TRUE(again);
  EXPECT_EQ((*again)->seq, 1u);  // still queued, still first
}

TEST(FlushQueue, TheGenerationIsOddWhileABatchIsInFlight) {
  queue q;
  q.publish(batches({batch(1, 1, 2), batch(2, 3, 4)}));
  const auto even = q.wait_settled(0ms);
  ASSERT_TRUE(even);
  EXPECT_EQ(*even % 2, 0u);
  auto a = q.take_next(never);
  auto b = q.take_next(never);
  EXPECT_EQ(q.generation() % 2, 1u);
  EXPECT_FALSE(q.wait_settled(0ms));
  q.pop(*a);
  EXPECT_EQ(q.generation() % 2, 1u);  // b still in flight
  q.pop(*b);
  EXPECT_EQ(q.generation() % 2, 0u);
  EXPECT_GT(q.generation(), *even);
}

TEST(FlushQueue, AReadIsSettledOnlyWhenNothingStartedOrEndedDuringIt) {
  queue q;
  q.publish(batches({batch(1, 1, 2)}));
  const auto before = q.wait_settled(0ms);
  ASSERT_TRUE(before);
  std::size_t seen = 0;
  const auto count = [&](const queue::batch_list& queued) -> result<void> {
    seen = queued.size();
    return {};
  };
  auto unchanged = q.read_pending(*before, count);
  ASSERT_TRUE(unchanged);
  EXPECT_TRUE(*unchanged);
  EXPECT_EQ(seen, 1u);
  // A batch committed during the next read: the read is to be done again.
  auto a = q.take_next(never);
  q.pop(*a);
  auto changed = q.read_pending(*before, count);
  ASSERT_TRUE(changed);
  EXPECT_FALSE(*changed);
  EXPECT_EQ(seen, 0u);  // gone from the queue once the generation is even again
  // A failure of add_pending is the read's.
  const auto refused = q.read_pending(q.generation(), [](const queue::batch_list&) -> result<void> {
    return failure(errc::not_exact_yet, "out of range");
  });
  EXPECT_FALSE(refused);
}

TEST(FlushQueue, AWaitingReadWakesWhenTheFlightEnds) {
  queue q;
  q.publish(batches({batch(1, 1, 2)}));
  auto a = q.take_next(never);
  auto read = std::async(std::launch::async, [&] { return q.wait_settled(30s); });
  ASSERT_TRUE(eventually([&] { return q.waiting() == 1; }, 10s)) << "the read never waited";
  q.pop(*a);
  // Woken by the pop, long before its own timeout.
  EXPECT_EQ(read.wait_for(10s), std::future_status::ready);
  const auto gen = read.get();
  ASSERT_TRUE(gen);
  EXPECT_EQ(*gen % 2, 0u);
}

TEST(FlushQueue, SetCommittingMakesTheGenerationOddUntilUnset) {
  queue q;
  q.set_committing(true);
  EXPECT_EQ(q.generation() % 2, 1u);
  EXPECT_FALSE(q.wait_settled(0ms));
  q.set_committing(true);  // already odd: stays odd
  EXPECT_EQ(q.generation() % 2, 1u);
  q.set_committing(false);
  EXPECT_EQ(q.generation() % 2, 0u);
  EXPECT_TRUE(q.wait_settled(0ms));
}

TEST(FlushQueue, RecoveredBatchesAreInDoubtUntilCommitted) {
  queue q;
  q.enqueue_recovered(batches({batch(1, 1, 2)}));
  EXPECT_FALSE(q.drained());
  EXPECT_FALSE(q.wait_settled(0ms));  // a read could count it twice
  ASSERT_TRUE(q.recovered_run());
  auto a = q.take_next(never);
  ASSERT_TRUE(a);
  EXPECT_TRUE((*a)->recovered);
  q.give_back(*a, false);  // rolled back: its outcome is still unknown
  EXPECT_FALSE(q.wait_settled(0ms));
  q.begin_round();
  a = q.take_next(never);
  q.pop(*a);  // the ledger answered
  EXPECT_TRUE(q.drained());
  EXPECT_TRUE(q.wait_settled(0ms));
}

TEST(FlushQueue, ABatchWhoseConnectionWasLostStaysQueuedInDoubt) {
  queue q;
  q.publish(batches({batch(1, 1, 2)}));
  auto a = q.take_next(never);
  q.give_back(*a, true);
  EXPECT_EQ(q.size(), 1u);
  EXPECT_FALSE(q.drained());
  EXPECT_FALSE(q.wait_settled(0ms));
  q.begin_round();
  a = q.take_next(never);
  ASSERT_TRUE(a);
  q.pop(*a);
  EXPECT_TRUE(q.wait_settled(0ms));
}

TEST(FlushQueue, SplitHalvesTakeTheBatchsPlaceAndRowsFollow) {
  std::vector<std::size_t> rows_told;
  queue q({[&](store::pending_charge held) { rows_told.push_back(held.entries); }, {}});
  q.publish(batches({batch(1, 1, 2), batch(2, 3, 6), batch(3, 7, 8)}));
  EXPECT_EQ(q.rows(), 8u);
  auto a = q.take_next(never);
  auto b = q.take_next(never);
  ASSERT_TRUE(a && b);
  EXPECT_EQ((*b)->seq, 2u);
  q.replace_with_halves(*b, batch(20, 3, 4), batch(21, 5, 7));  // a third row, say
  EXPECT_EQ(seqs(q), (std::vector<std::uint64_t>{1, 20, 21, 3}));
  EXPECT_EQ(q.rows(), 9u);
  EXPECT_EQ(rows_told.back(), 9u);
  q.pop(*a);
  // The halves are not in flight: the next writer takes the left one.
  const auto left = q.take_next(never);
  ASSERT_TRUE(left);
  EXPECT_EQ((*left)->seq, 20u);
}

TEST(FlushQueue, PastTheDeadlineNothingStartsAndTheRoundStops) {
  queue q;
  q.publish(batches({batch(1, 1, 2), batch(2, 3, 4)}));
  stop_deadline passed;
  passed.set(clock::now());
  EXPECT_FALSE(q.take_next(passed));
  EXPECT_TRUE(q.deadline_hit());
  EXPECT_FALSE(q.take_next(never));  // the round stopped with it
  EXPECT_EQ(q.size(), 2u);
  q.clear_deadline_hit();
  EXPECT_FALSE(q.deadline_hit());
}

TEST(FlushQueue, TheInFlightCountIsTold) {
  std::vector<std::size_t> told;
  queue q({{}, [&](std::size_t n) { told.push_back(n); }});
  q.publish(batches({batch(1, 1, 2), batch(2, 3, 4)}));
  auto a = q.take_next(never);
  auto b = q.take_next(never);
  q.pop(*a);
  q.give_back(*b, false);
  EXPECT_EQ(told, (std::vector<std::size_t>{1, 2, 1, 0}));
}

TEST(FlushQueue, RecoveredSplitBatchesAreReplacedByTheirUncommittedParts) {
  queue q;
  q.enqueue_recovered(batches({batch(1, 1, 4)}));
  // Half 2 (the left one, seq node 2 above the low 44 bits) committed before the restart.
  const std::uint64_t left = (std::uint64_t{2} << 44) | 1;
  q.replace_recovered(0, {left});
  const auto left_over = q.copy();
  ASSERT_EQ(left_over.size(), 1u);
  EXPECT_EQ(left_over[0].seq, (std::uint64_t{3} << 44) | 1);
  EXPECT_EQ(left_over[0].rows.size(), 2u);
  EXPECT_EQ(q.rows(), 2u);
  EXPECT_FALSE(q.recovered_run());
  EXPECT_FALSE(q.drained());
  EXPECT_TRUE(q.wait_settled(0ms));  // the parts left are known not committed
}

TEST(FlushQueue, WalTagsAreRetaggedAndTheLeastIsKnown) {
  queue q;
  EXPECT_EQ(q.min_wal_tag(), UINT64_MAX);
  auto b1 = batch(1, 1, 2), b2 = batch(2, 3, 4);
  b1.wal_tag = 7;
  b2.wal_tag = 5;
  q.publish(batches({b1, b2}));
  EXPECT_EQ(q.min_wal_tag(), 5u);
  q.retag_all(9);
  EXPECT_EQ(q.min_wal_tag(), 9u);
  EXPECT_EQ(q.first_seq(), 1u);
}

// A batch in flight is read by its writer without the lock: retag_all leaves it as it
// is (no write races that read) and the tag reaches it when it comes back, or its
// halves when it is split; meanwhile min_wal_tag counts the new tag.
TEST(FlushQueue, ABatchInFlightTakesItsNewTagWhenItComesBackOrIsSplit) {
  queue q;
  auto b1 = batch(1, 1, 2), b2 = batch(2, 3, 6), b3 = batch(3, 7, 8);
  b1.wal_tag = b2.wal_tag = b3.wal_tag = 4;
  q.publish(batches({b1, b2, b3}));
  const auto a = q.take_next(never);
  const auto b = q.take_next(never);
  ASSERT_TRUE(a && b);
  q.retag_all(9);
  EXPECT_EQ((*a)->wal_tag, 4u);  // in flight: not written under its writer
  EXPECT_EQ((*b)->wal_tag, 4u);
  EXPECT_EQ(q.copy().back().wal_tag, 9u);  // batch 3 was queued, not in flight
  EXPECT_EQ(q.min_wal_tag(), 9u);
  q.give_back(*a, false);
  EXPECT_EQ(q.copy().front().wal_tag, 9u);
  auto left = batch(20, 3, 4), right = batch(21, 5, 6);  // what split_batch copies
  left.wal_tag = right.wal_tag = 4;
  q.replace_with_halves(*b, std::move(left), std::move(right));
  for (const auto& queued : q.copy()) EXPECT_EQ(queued.wal_tag, 9u) << "batch " << queued.seq;
  // A later retag reaches a batch that was in flight at an earlier one.
  q.begin_round();
  const auto again = q.take_next(never);
  ASSERT_TRUE(again);
  q.retag_all(11);
  q.retag_all(12);
  EXPECT_EQ(q.min_wal_tag(), 12u);
  q.give_back(*again, false);
  EXPECT_EQ(q.copy().front().wal_tag, 12u);
  EXPECT_EQ(q.min_wal_tag(), 12u);
}

TEST(FlushQueue, RowsAndTheOldestArrivalAreReadTogether) {
  queue q;
  EXPECT_EQ(q.held().rows, 0u);
  EXPECT_FALSE(q.held().oldest_arrival);
  auto b1 = batch(1, 1, 2), b2 = batch(2, 3, 5);
  b1.oldest_arrival = clock::time_point(std::chrono::seconds(5));
  b2.oldest_arrival = clock::time_point(std::chrono::seconds(3));
  q.publish(batches({b1, b2}));
  const auto held = q.held();
  EXPECT_EQ(held.rows, 5u);
  EXPECT_EQ(held.oldest_arrival, clock::time_point(std::chrono::seconds(5)));  // the first's
}

}  // namespace
}  // namespace slotted::flush
