// Which queued batch a free flush connection may start (flush/batch_schedule.hpp).

#include "flush/batch_schedule.hpp"
#include "support/batch_content.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace slotted::flush {
namespace {

// A plain batch over record ids [first, last] of type 1.
batch_span plain(std::uint64_t first, std::uint64_t last, bool in_flight = false) {
  return {{1, first}, {1, last}, false, false, in_flight};
}

batch_span keyed(std::uint64_t first, std::uint64_t last, bool in_flight = false) {
  auto s = plain(first, last, in_flight);
  s.keyed = true;
  return s;
}

std::optional<std::size_t> next(const std::vector<batch_span>& q) {
  return next_startable(q);
}

TEST(BatchSchedule, TheOldestBatchStartsWhenNothingIsInFlight) {
  EXPECT_EQ(next({plain(1, 10), plain(11, 20)}), 0u);
  EXPECT_EQ(next({plain(5, 10), plain(1, 20)}), 0u);  // overlapping: the older first
  EXPECT_EQ(next({keyed(1, 10), keyed(1, 10)}), 0u);
  EXPECT_EQ(next({}), std::nullopt);
}

TEST(BatchSchedule, DisjointBatchesStartBesideOneInFlight) {
  // One cycle's batches: contiguous, disjoint ranges; each connection takes the next.
  EXPECT_EQ(next({plain(1, 10, true), plain(11, 20), plain(21, 30)}), 1u);
  EXPECT_EQ(next({plain(1, 10, true), plain(11, 20, true), plain(21, 30)}), 2u);
  EXPECT_EQ(next({plain(1, 10, true), plain(11, 20, true)}), std::nullopt);
}

TEST(BatchSchedule, ABatchOverlappingOneInFlightWaitsAndALaterDisjointOneGoesFirst) {
  // Queued over two cycles: [5, 15] shares keys with [1, 10], which is being written.
  EXPECT_EQ(next({plain(1, 10, true), plain(5, 15), plain(20, 30)}), 2u);
  // Sharing only the boundary key is sharing.
  EXPECT_EQ(next({plain(1, 10, true), plain(10, 15)}), std::nullopt);
  // Record types order before ids: (1, 900) < (2, 5).
  std::vector<batch_span> q{plain(1, 900, true), {{2, 5}, {2, 9}, false, false, false}};
  EXPECT_EQ(next(q), 1u);
  q[1] = {{1, 800}, {2, 9}, false, false, false};
  EXPECT_EQ(next(q), std::nullopt);
}

TEST(BatchSchedule, ABatchOverlappingAnOlderWaitingOneWaitsForIt) {
  // [5, 15] waits for [1, 10] (in flight); [12, 20] overlaps [5, 15], which is older
  // and not yet written: it waits too, or the two would commit out of order.
  EXPECT_EQ(next({plain(1, 10, true), plain(5, 15), plain(12, 20)}), std::nullopt);
  EXPECT_EQ(next({plain(1, 10, true), plain(5, 15), plain(12, 20), plain(21, 30)}), 3u);
}

TEST(BatchSchedule, KeyedBatchesRunOneAtATimeInQueueOrder) {
  // Two keyed batches of one instance may carry the same Idempotency-Key.
  EXPECT_EQ(next({keyed(1, 10, true), keyed(50, 60)}), std::nullopt);
  EXPECT_EQ(next({keyed(1, 10, true), keyed(50, 60), plain(70, 80)}), 2u);
  // A keyed batch waits for an older keyed one that waits itself.
  EXPECT_EQ(next({plain(1, 10, true), keyed(5, 6), keyed(50, 60)}), std::nullopt);
  // Beside plain batches, a keyed batch goes by its key range like any other.
  EXPECT_EQ(next({plain(1, 10, true), keyed(50, 60)}), 1u);
  EXPECT_EQ(next({plain(1, 10, true), keyed(3, 4)}), std::nullopt);
}

TEST(BatchSchedule, AKeyedBatchWithoutRowsConflictsOnlyWithKeyedOnes) {
  batch_span none;
  none.keyed = true;
  EXPECT_EQ(next({plain(1, 10, true), none}), 1u);
  EXPECT_EQ(next({keyed(1, 10, true), none}), std::nullopt);
}

TEST(BatchSchedule, TheSpanOfABatchIsItsFirstAndLastRow) {
  store::flush_batch b;
  b.rows = {{1, 3, 0, 1}, {1, 7, 0, 1}, {2, 1, 0, 1}};
  const auto s = span_of(b, true);
  EXPECT_EQ(s.first, (store::counter_key{1, 3}));
  EXPECT_EQ(s.last, (store::counter_key{2, 1}));
  EXPECT_FALSE(s.empty);
  EXPECT_FALSE(s.keyed);
  EXPECT_TRUE(s.in_flight);
  b.rows.clear();
  test::requests_in(b).resize(1);
  EXPECT_TRUE(span_of(b, false).empty);
  EXPECT_TRUE(span_of(b, false).keyed);
}

}  // namespace
}  // namespace slotted::flush
