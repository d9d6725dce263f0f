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
  s.set_unwritten_rows(5);  // rows the flusher still holds count against the limit
  EXPECT_EQ(s.add(more, 6), add_result::over_limit);
  s.set_unwritten_rows(0);
  EXPECT_EQ(s.add(more, 6), add_result::applied);
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
