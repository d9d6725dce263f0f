#include <gtest/gtest.h>

#include <set>

#include "flush/flusher.hpp"
#include "support/batch_content.hpp"

namespace slotted::flush {
namespace {

TEST(FormBatches, SortsChunksDropsZerosAndKeepsSlotsInRange) {
  std::vector<store::pending_delta> deltas;
  for (std::uint64_t i = 0; i < 2500; ++i) {
    deltas.push_back(
        {{static_cast<std::uint32_t>(i % 3), 10000 - i}, static_cast<std::int64_t>(i % 5)});
  }
  std::mt19937_64 rng(1);
  const auto batches = form_batches(deltas, 1000, 7, 99, 40, rng, std::chrono::steady_clock::now());
  // 2500 deltas, every fifth is zero: 2000 rows in batches of at most 1000.
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].seq, 40u);
  EXPECT_EQ(batches[1].seq, 41u);
  EXPECT_EQ(batches[1].run_id, 99u);
  std::size_t rows = 0;
  const db::counter_row* prev = nullptr;
  for (const auto& b : batches) {
    EXPECT_LE(b.rows.size(), 1000u);
    for (const auto& r : b.rows) {
      ++rows;
      EXPECT_NE(r.delta, 0);
      EXPECT_LT(r.slot, 7);
      if (prev) {
        EXPECT_LT((store::counter_key{prev->record_type, prev->record_id}),
                  (store::counter_key{r.record_type, r.record_id}));
      }
      prev = &r;
    }
  }
  EXPECT_EQ(rows, 2000u);
}

TEST(FormBatches, EachBatchWritesOneSlotDrawnPerBatch) {
  // Two writers' batches collide only when they drew the same slot, not on some row
  // almost surely (certification failures on Galera, lock waits on one server).
  std::vector<store::pending_delta> deltas;
  for (std::uint64_t i = 0; i < 5000; ++i) deltas.push_back({{1, i}, 1});
  std::mt19937_64 rng(3);
  const auto batches = form_batches(deltas, 100, 1000, 1, 1, rng, {});
  ASSERT_EQ(batches.size(), 50u);
  std::set<std::uint16_t> batch_slots;
  for (const auto& b : batches) {
    for (const auto& r : b.rows) EXPECT_EQ(r.slot, b.rows.front().slot);
    batch_slots.insert(b.rows.front().slot);
  }
  EXPECT_GT(batch_slots.size(), 30u) << "slots still spread over batches";
}

TEST(FormBatches, NothingToWriteMakesNoBatch) {
  std::mt19937_64 rng(1);
  EXPECT_TRUE(form_batches({{{1, 1}, 0}}, 10, 5, 1, 1, rng, {}).empty());
  EXPECT_TRUE(form_batches({}, 10, 5, 1, 1, rng, {}).empty());
}

TEST(SplitBatch, HalvesKeepRowsAndGetIdsDerivedFromTheParent) {
  flush_batch b;
  b.run_id = 7;
  b.seq = 42;
  for (std::uint64_t i = 0; i < 5; ++i) b.rows.push_back({1, i, 0, 1});
  const auto [left, right] = split_batch(b);
  EXPECT_EQ(left.rows.size(), 2u);
  EXPECT_EQ(right.rows.size(), 3u);
  EXPECT_EQ(right.rows.front().record_id, 2u);
  EXPECT_EQ(left.run_id, 7u);
  EXPECT_NE(left.seq, right.seq);
  EXPECT_EQ(left.seq & ((1ull << 44) - 1), 42u);
  // The same split gives the same ids (a replay finds the halves that committed),
  // and splitting again never repeats an id.
  EXPECT_EQ(split_batch(b).first.seq, left.seq);
  const auto [ll, lr] = split_batch(left);
  const auto [rl, rr] = split_batch(right);
  const std::set<std::uint64_t> ids{b.seq, left.seq, right.seq, ll.seq, lr.seq, rl.seq, rr.seq};
  EXPECT_EQ(ids.size(), 7u);
}

TEST(UncommittedParts, ReplayedSplitBatchLeavesOnlyWhatDidNotCommit) {
  flush_batch b;
  b.run_id = 7;
  b.seq = 5;
  for (std::uint64_t i = 0; i < 8; ++i) b.rows.push_back({1, i, 0, static_cast<std::int64_t>(i)});
  const auto seq_of = [](std::uint64_t node) { return (node << 44) | 5; };
  const auto ids = [](const std::vector<flush_batch>& parts) {
    std::vector<std::pair<std::uint64_t, std::size_t>> out;
    for (const auto& p : parts) out.push_back({p.seq >> 44, p.rows.size()});
    return out;
  };
  // Nothing of it committed (another batch's parts do not count): the batch itself.
  auto parts = uncommitted_parts(b, {(std::uint64_t{2} << 44) | 6});
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].seq, 5u);
  // Left half committed: the right half, under the id the split gave it.
  EXPECT_EQ(ids(uncommitted_parts(b, {seq_of(2)})),
            (std::vector<std::pair<std::uint64_t, std::size_t>>{{3, 4}}));
  // A quarter deep in the right half (node 6): the left half, and node 7.
  parts = uncommitted_parts(b, {seq_of(6)});
  EXPECT_EQ(ids(parts), (std::vector<std::pair<std::uint64_t, std::size_t>>{{2, 4}, {7, 2}}));
  EXPECT_EQ(parts[1].rows.front().record_id, 6u);
  // Both halves committed: nothing left.
  EXPECT_TRUE(uncommitted_parts(b, {seq_of(2), seq_of(3)}).empty());
  // A replay of a half (itself node 3) with its own left half committed.
  const auto right = split_batch(b).second;
  EXPECT_EQ(ids(uncommitted_parts(right, {seq_of(6)})),
            (std::vector<std::pair<std::uint64_t, std::size_t>>{{7, 2}}));
}

// A unique batch (entries, no rows) replayed from the WAL is looked up in the ledger as
// any batch: kept whole while nothing of it committed, its uncommitted half after a
// split, nothing once all of it committed.
TEST(UncommittedParts, AReplayedUniqueBatchIsKeptUntilItCommitted) {
  flush_batch b;
  b.run_id = 7;
  b.seq = 5;
  for (std::uint64_t i = 0; i < 4; ++i) test::unique_in(b).entries.push_back({1, i, 0, "c", 0});
  const auto seq_of = [](std::uint64_t node) { return (node << 44) | 5; };
  // Another batch of its run committed, not this one: the batch itself.
  auto parts = uncommitted_parts(b, {(std::uint64_t{1} << 44) | 4});
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].seq, 5u);
  EXPECT_EQ(test::uniques_of(parts[0]).size(), 4u);
  // Its left half committed: the right half's entries.
  parts = uncommitted_parts(b, {seq_of(2)});
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].seq, seq_of(3));
  ASSERT_EQ(test::uniques_of(parts[0]).size(), 2u);
  EXPECT_EQ(test::uniques_of(parts[0])[0].record_id, 2u);
  EXPECT_TRUE(uncommitted_parts(b, {seq_of(1)}).empty());
  // One entry, and the ledger names the right half of a split of it (a lookup as any
  // batch's): the left half holds nothing and is no part to send again.
  flush_batch one = b;
  test::unique_in(one).entries.resize(1);
  EXPECT_TRUE(uncommitted_parts(one, {seq_of(3)}).empty());
}

}  // namespace
}  // namespace slotted::flush
