#include "store/pending_store.hpp"

#include <gtest/gtest.h>

#include <map>
#include <thread>

namespace slotted::store {
namespace {

using ingest::increment;

TEST(PendingStore, AccumulatesPerKeyAndTakesEverythingOut) {
  pending_store s(4);
  const std::vector<increment> incs{{1, 10, 5}, {1, 10, -2}, {2, 10, 1}, {1, 11, 7}};
  ASSERT_EQ(s.add(incs, 100), add_result::applied);
  EXPECT_EQ(s.keys(), 3u);
  EXPECT_EQ(s.pending({1, 10}), 3);
  EXPECT_EQ(s.pending({9, 9}), 0);
  EXPECT_TRUE(s.oldest());

  std::vector<pending_delta> out;
  EXPECT_TRUE(s.take_all(out));
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::int64_t> got;
  for (const auto& d : out) got[{d.key.record_type, d.key.record_id}] = d.delta;
  EXPECT_EQ(got, (decltype(got){{{1, 10}, 3}, {{2, 10}, 1}, {{1, 11}, 7}}));
  EXPECT_EQ(s.keys(), 0u);
  EXPECT_FALSE(s.oldest());
  out.clear();
  EXPECT_FALSE(s.take_all(out));
  EXPECT_TRUE(out.empty());
}

TEST(PendingStore, DropRemovesOneKeyAndReturnsItsDelta) {
  pending_store s(4);
  ASSERT_EQ(s.add(std::vector<increment>{{1, 10, 5}, {1, 10, -2}, {1, 11, 7}}, 100),
            add_result::applied);
  EXPECT_EQ(s.drop({1, 10}), 3);
  EXPECT_EQ(s.keys(), 1u);
  EXPECT_EQ(s.pending({1, 10}), 0);
  EXPECT_EQ(s.drop({1, 10}), 0) << "dropped once";
  EXPECT_EQ(s.drop({9, 9}), 0);
  // The key starts again from zero; the other is untouched.
  ASSERT_EQ(s.add(std::vector<increment>{{1, 10, 4}}, 100), add_result::applied);
  std::vector<pending_delta> out;
  s.take_all(out);
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::int64_t> got;
  for (const auto& d : out) got[{d.key.record_type, d.key.record_id}] = d.delta;
  EXPECT_EQ(got, (decltype(got){{{1, 10}, 4}, {{1, 11}, 7}}));
  EXPECT_EQ(s.keys(), 0u);
}

TEST(PendingStore, LimitRefusesAWholeRequestAndCountsUnwrittenRows) {
  pending_store s(2);
  const std::vector<increment> two{{1, 1, 1}, {1, 2, 1}};
  ASSERT_EQ(s.add(two, 2), add_result::applied);
  const std::vector<increment> more{{1, 3, 1}};
  EXPECT_EQ(s.add(more, 2), add_result::over_limit);
  EXPECT_EQ(s.pending({1, 3}), 0);
  std::vector<pending_delta> out;
  s.take_all(out);
  EXPECT_EQ(s.add(more, 2), add_result::applied);
  s.set_unwritten({5, 0});  // rows the flusher still holds count against the limit
  EXPECT_EQ(s.add(more, 6), add_result::over_limit);
  s.set_unwritten({});
  EXPECT_EQ(s.add(more, 6), add_result::applied);
}

TEST(PendingStore, AnAddPastThePendingSumBoundIsRefusedWholeInEitherDirection) {
  pending_store s(4);
  const std::vector<pending_delta> near{{{1, 1}, max_pending_sum - 10},
                                        {{1, 2}, -max_pending_sum + 3}};
  s.add_deltas(near);
  const auto keys = s.keys();
  // One increment, then a request whose other items are harmless: nothing applied.
  EXPECT_EQ(s.add(std::vector<increment>{{1, 1, 11}}, 100), add_result::out_of_range);
  EXPECT_EQ(s.add(std::vector<increment>{{1, 3, 5}, {1, 1, 6}, {1, 1, 5}}, 100),
            add_result::out_of_range);
  EXPECT_EQ(s.add(std::vector<increment>{{1, 2, -4}}, 100), add_result::out_of_range);
  EXPECT_EQ(s.pending({1, 1}), max_pending_sum - 10);
  EXPECT_EQ(s.pending({1, 2}), -max_pending_sum + 3);
  EXPECT_EQ(s.pending({1, 3}), 0);
  EXPECT_EQ(s.keys(), keys);
  // Up to the bound exactly is fine, and so is moving back from it.
  EXPECT_EQ(s.add(std::vector<increment>{{1, 3, 5}, {1, 1, 4}, {1, 1, 6}}, 100),
            add_result::applied);
  EXPECT_EQ(s.pending({1, 1}), max_pending_sum);
  EXPECT_EQ(s.add(std::vector<increment>{{1, 2, -3}, {1, 1, -1}}, 100), add_result::applied);
  EXPECT_EQ(s.pending({1, 2}), -max_pending_sum);
  // A flush takes the sums out: the counters start again from zero.
  std::vector<pending_delta> out;
  s.take_all(out);
  EXPECT_EQ(s.add(std::vector<increment>{{1, 1, 2147483647}}, 100), add_result::applied);
}

TEST(PendingStore, FitsIsExactNearTheBoundAndCheapFarFromIt) {
  pending_store s(4);
  const std::vector<increment> small{{1, 1, 1}, {1, 2, 1}};
  EXPECT_EQ(s.fits(small, 0), pending_store::fit::yes);
  EXPECT_EQ(s.fits(small, 1000), pending_store::fit::yes);
  s.add_deltas(std::vector<pending_delta>{{{1, 1}, max_pending_sum - 2}});
  // Some unapplied change could reach the bound: apply it first, then ask exactly.
  EXPECT_EQ(s.fits(small, 5), pending_store::fit::maybe);
  EXPECT_EQ(s.fits(small, 0), pending_store::fit::yes);
  EXPECT_EQ(s.fits(std::vector<increment>{{1, 1, 2}, {1, 1, 1}}, 0), pending_store::fit::no);
}

TEST(PendingStore, ConcurrentAddsAndTakesLoseNothing) {
  pending_store s(8);
  std::atomic<bool> done{false};
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::int64_t> taken;
  std::thread taker([&] {
    std::vector<pending_delta> out;
    while (!done.load()) {
      s.take_all(out);
    }
    s.take_all(out);
    for (const auto& d : out) taken[{d.key.record_type, d.key.record_id}] += d.delta;
  });
  std::vector<std::thread> adders;
  for (int t = 0; t < 4; ++t) {
    adders.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        const std::vector<increment> inc{
            {static_cast<std::uint32_t>(t), static_cast<std::uint64_t>(i % 100), 1},
            {9, static_cast<std::uint64_t>(i % 7), 2}};
        ASSERT_EQ(s.add(inc, 1'000'000), add_result::applied);
      }
    });
  }
  for (auto& a : adders) a.join();
  done = true;
  taker.join();
  std::int64_t total = 0;
  for (const auto& [k, v] : taken) total += v;
  EXPECT_EQ(total, 4 * 20000 * 3);
  EXPECT_EQ((taken[{0, 5}]), 200);
}

}  // namespace
}  // namespace slotted::store
