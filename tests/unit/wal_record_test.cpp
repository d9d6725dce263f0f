#include <gtest/gtest.h>

#include "wal/record.hpp"

namespace slotted::wal {
namespace {

flush::flush_batch batch(std::uint64_t run, std::uint64_t seq, std::vector<db::counter_row> rows) {
  flush::flush_batch b;
  b.run_id = run;
  b.seq = seq;
  b.rows = std::move(rows);
  return b;
}

std::map<std::pair<std::uint32_t, std::uint64_t>, std::int64_t> as_map(
    const std::vector<store::pending_delta>& d) {
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::int64_t> m;
  for (const auto& x : d) m[{x.key.record_type, x.key.record_id}] += x.delta;
  return m;
}

TEST(WalRecord, IncrementsAggregateAndBatchesReplaceThem) {
  std::string log;
  const std::vector<ingest::increment> a{{1, 10, 5}, {1, 10, -2}, {2, 18446744073709551615ull, 7}};
  append_increments(log, a);
  append_batches(log,
                 std::vector{batch(9, 1, {{1, 10, 3, 3}, {2, 18446744073709551615ull, 0, 7}})});
  const std::vector<ingest::increment> b{{1, 10, 1}, {3, 3, -4}};
  append_increments(log, b);

  replay_state state;
  const auto scan = scan_segment(log, state);
  EXPECT_EQ(scan.outcome, scan_result::status::ok);
  EXPECT_EQ(scan.valid_bytes, log.size());
  EXPECT_EQ(as_map(state.deltas()), (decltype(as_map({})){{{1, 10}, 1}, {{3, 3}, -4}}));
  ASSERT_EQ(state.batches().size(), 1u);
  EXPECT_EQ(state.batches()[0].run_id, 9u);
  EXPECT_EQ(state.batches()[0].rows[1].record_id, 18446744073709551615ull);
  EXPECT_EQ(state.batches()[0].rows[0].slot, 3);
}

TEST(WalRecord, SnapshotSupersedesEverythingBefore) {
  std::string log;
  append_increments(log, std::vector<ingest::increment>{{1, 1, 1}});
  append_batches(log, std::vector{batch(1, 1, {{1, 1, 0, 1}})});
  append_snapshot(log, std::vector{batch(2, 5, {{4, 4, 1, 40}})},
                  std::vector<store::pending_delta>{{{5, 5}, 50}});
  replay_state state;
  EXPECT_EQ(scan_segment(log, state).outcome, scan_result::status::ok);
  ASSERT_EQ(state.batches().size(), 1u);
  EXPECT_EQ(state.batches()[0].seq, 5u);
  EXPECT_EQ(as_map(state.deltas()), (decltype(as_map({})){{{5, 5}, 50}}));
}

TEST(WalRecord, CommittedRecordDropsTheBatchesBeforeIt) {
  std::string log;
  append_batches(log, std::vector{batch(1, 1, {{1, 1, 0, 1}})});
  append_committed(log);
  append_increments(log, std::vector<ingest::increment>{{2, 2, 2}});
  append_batches(log, std::vector{batch(1, 2, {{2, 2, 0, 2}})});
  replay_state state;
  EXPECT_EQ(scan_segment(log, state).outcome, scan_result::status::ok);
  ASSERT_EQ(state.batches().size(), 1u);
  EXPECT_EQ(state.batches()[0].seq, 2u);
  EXPECT_TRUE(state.deltas().empty());
}

TEST(WalRecord, TornTailVersusCorruptionInTheMiddle) {
  std::string one, two;
  append_increments(one, std::vector<ingest::increment>{{1, 1, 1}});
  append_increments(two, std::vector<ingest::increment>{{1, 2, 2}});

  for (std::size_t cut = 1; cut < two.size(); ++cut) {
    replay_state state;
    const auto scan = scan_segment(one + two.substr(0, cut), state);
    EXPECT_EQ(scan.outcome, scan_result::status::torn_tail) << cut;
    EXPECT_EQ(scan.valid_bytes, one.size());
    EXPECT_EQ(as_map(state.deltas()).size(), 1u);
  }
  {
    replay_state state;
    const auto scan = scan_segment(one + std::string(100, '\0'), state);
    EXPECT_EQ(scan.outcome, scan_result::status::torn_tail);
  }
  std::string damaged = one + two + one;
  damaged[one.size() + record_header_bytes + 3] ^= 0x40;  // a flipped bit in the middle record
  replay_state state;
  const auto scan = scan_segment(damaged, state);
  EXPECT_EQ(scan.outcome, scan_result::status::corrupt);
  EXPECT_EQ(scan.valid_bytes, one.size());
  EXPECT_EQ(scan.problem, "checksum mismatch");
}

}  // namespace
}  // namespace slotted::wal
