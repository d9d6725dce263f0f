#include <gtest/gtest.h>

#include <boost/crc.hpp>
#include <cstring>
#include <map>
#include <stdexcept>

#include "durable/record.hpp"

namespace slotted::durable {
namespace {

store::flush_batch batch(std::uint64_t run, std::uint64_t seq,
                         std::vector<store::counter_row> rows) {
  store::flush_batch b;
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

  log.insert(0, segment_magic);
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
  std::string log(segment_magic);
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
  std::string log(segment_magic);
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

// A reset drops what was logged for its counter since the last batches record, and
// nothing else: the counter's later increments, other counters, logged batches and keyed
// requests stay (README: HTTP API, Reset).
TEST(WalRecord, AResetDropsItsCountersUnbatchedIncrementsLoggedBeforeIt) {
  std::string log(segment_magic);
  append_increments(log, std::vector<ingest::increment>{{1, 7, 5}, {1, 8, 2}});
  append_batches(log, std::vector{batch(1, 1, {{1, 7, 0, 5}, {1, 8, 0, 2}})});
  append_increments(log, std::vector<ingest::increment>{{1, 7, 3}, {1, 8, 4}});
  idempotency::keyed_request keyed{"k1", {1, 2}, {{1, 7, 9}}, 1000};
  append_keyed(log, keyed);
  append_increments(log, std::vector<ingest::increment>{{1, 7, 10}});
  append_reset(log, {1, 7});
  append_increments(log, std::vector<ingest::increment>{{1, 7, 100}});
  replay_state state;
  EXPECT_EQ(scan_segment(log, state).outcome, scan_result::status::ok);
  EXPECT_EQ(as_map(state.deltas()), (decltype(as_map({})){{{1, 7}, 100}, {{1, 8}, 4}}));
  ASSERT_EQ(state.batches().size(), 1u);
  ASSERT_EQ(state.keyed().size(), 1u);
  EXPECT_EQ(state.keyed()[0].increments.at(0).delta, 9);

  // Its payload is exactly the counter: anything more or less is malformed.
  std::string reset;
  append_reset(reset, {1, 7});
  std::string payload = reset.substr(record_header_bytes);
  // Kind, version, role, field count, then the counter's field: tag, length, body.
  EXPECT_EQ(payload.size(), 1u + 1 + 1 + 4 + 1 + 8 + 4 + 8);
  replay_state other;
  EXPECT_TRUE(other.apply(payload));
  EXPECT_FALSE(other.apply(payload + "x"));
  EXPECT_FALSE(other.apply(payload.substr(0, payload.size() - 1)));
}

TEST(WalRecord, TornTailVersusCorruptionInTheMiddle) {
  const std::string magic(segment_magic);
  std::string one, two;
  append_increments(one, std::vector<ingest::increment>{{1, 1, 1}});
  append_increments(two, std::vector<ingest::increment>{{1, 2, 2}});

  for (std::size_t cut = 1; cut < two.size(); ++cut) {
    replay_state state;
    const auto scan = scan_segment(magic + one + two.substr(0, cut), state);
    EXPECT_EQ(scan.outcome, scan_result::status::torn_tail) << cut;
    EXPECT_EQ(scan.valid_bytes, magic.size() + one.size());
    EXPECT_EQ(as_map(state.deltas()).size(), 1u);
  }
  for (std::size_t cut = 0; cut < magic.size(); ++cut) {
    replay_state state;
    EXPECT_EQ(scan_segment(magic.substr(0, cut), state).outcome,
              cut == 0 ? scan_result::status::ok : scan_result::status::torn_tail);
  }
  {
    replay_state state;
    const auto scan = scan_segment(magic + one + std::string(100, '\0'), state);
    EXPECT_EQ(scan.outcome, scan_result::status::torn_tail);
    EXPECT_EQ(scan.problem, "zero-filled tail");
  }
  std::string damaged = magic + one + two + one;
  damaged[magic.size() + one.size() + record_header_bytes + 3] ^= 0x40;  // in the middle payload
  replay_state state;
  const auto scan = scan_segment(damaged, state);
  EXPECT_EQ(scan.outcome, scan_result::status::corrupt);
  EXPECT_EQ(scan.valid_bytes, magic.size() + one.size());
  EXPECT_EQ(scan.problem, "checksum mismatch");
  EXPECT_EQ(scan.intact_records_after, 1u);
}

TEST(WalRecord, ATornRecordWhosePayloadHoldsAWholeRecordIsATornTail) {
  // A unique entry's client is the sender's bytes: it can hold a whole, checksummed
  // record. An append of it cut after that inner record is still a torn append (found by
  // wal_fuzz), not corruption that stops the next start.
  const std::string magic(segment_magic);
  std::string one, inner, outer;
  append_increments(one, std::vector<ingest::increment>{{1, 1, 1}});
  append_increments(inner, std::vector<ingest::increment>{{1, 2, 1000}});
  ASSERT_LE(inner.size(), store::max_client_bytes);
  store::unique_entry entry{.record_type = 1, .record_id = 3, .window = 3600, .client = inner,
                            .at = 3601};
  append_increments(outer, {}, std::vector{entry});
  const std::size_t inner_at = outer.find(inner);
  ASSERT_NE(inner_at, std::string::npos);
  for (std::size_t cut = inner_at + inner.size(); cut < outer.size(); ++cut) {
    replay_state state;
    const auto scan = scan_segment(magic + one + outer.substr(0, cut), state);
    EXPECT_EQ(scan.outcome, scan_result::status::torn_tail) << cut;
    EXPECT_EQ(scan.valid_bytes, magic.size() + one.size()) << cut;
    EXPECT_EQ(scan.intact_records_after, 0u) << cut;
    EXPECT_EQ(as_map(state.deltas()), (decltype(as_map({})){{{1, 1}, 1}})) << cut;
  }
  // Whole but for a damaged payload byte past the inner record: nothing follows its end.
  std::string damaged = magic + one + outer;
  damaged.back() ^= 0x01;
  replay_state state;
  auto scan = scan_segment(damaged, state);
  EXPECT_EQ(scan.outcome, scan_result::status::torn_tail);
  EXPECT_EQ(scan.problem, "checksum mismatch");
  // A whole record after it is: corruption, with that record counted.
  replay_state again;
  scan = scan_segment(damaged + one, again);
  EXPECT_EQ(scan.outcome, scan_result::status::corrupt);
  EXPECT_EQ(scan.intact_records_after, 1u);
}

TEST(WalRecord, AFlippedLengthBitMidSegmentIsCorruptionNotATornTail) {
  const std::string magic(segment_magic);
  std::string one, two, three;
  append_increments(one, std::vector<ingest::increment>{{1, 1, 1}});
  append_increments(two, std::vector<ingest::increment>{{1, 2, 2}});
  append_increments(three, std::vector<ingest::increment>{{1, 3, 3}});
  // Every bit of the length: too long (past the end of the file), too short, zero.
  for (int bit = 0; bit < 64; ++bit) {
    std::string damaged = magic + one + two + three;
    damaged[magic.size() + one.size() + bit / 8] ^= static_cast<char>(1 << (bit % 8));
    replay_state state;
    const auto scan = scan_segment(damaged, state);
    EXPECT_EQ(scan.outcome, scan_result::status::corrupt) << bit;
    EXPECT_EQ(scan.valid_bytes, magic.size() + one.size()) << bit;
    EXPECT_EQ(scan.problem, "header checksum mismatch") << bit;
    EXPECT_EQ(scan.intact_records_after, 1u) << bit;
    EXPECT_EQ(as_map(state.deltas()).size(), 1u);  // the prefix was applied
  }
  // The same flip in the last record, with nothing after it, cannot be told from a
  // torn append: a torn tail.
  std::string last = magic + one + two;
  last[magic.size() + one.size() + 3] ^= 0x10;
  replay_state state;
  EXPECT_EQ(scan_segment(last, state).outcome, scan_result::status::torn_tail);
}

TEST(WalRecord, AFlippedBitInTheSegmentMagicIsCorruptionNotATornTail) {
  // A damaged magic must not send a format-2 segment to the format-1 reader: its first
  // four bytes read as a 1 GiB length, "past the end of the file", and the whole (last)
  // segment, every record acknowledged and synced, would be cut off as a torn tail.
  const std::string magic(segment_magic);
  std::string one, two;
  append_increments(one, std::vector<ingest::increment>{{1, 1, 1}});
  append_increments(two, std::vector<ingest::increment>{{1, 2, 2}});
  for (std::size_t bit = 0; bit < 8 * magic.size(); ++bit) {
    std::string damaged = magic + one + two;
    damaged[bit / 8] ^= static_cast<char>(1 << (bit % 8));
    replay_state state;
    const auto scan = scan_segment(damaged, state);
    EXPECT_EQ(scan.outcome, scan_result::status::corrupt) << bit;
    EXPECT_EQ(scan.problem, "damaged segment header") << bit;
    // The records after it are whole and checksummed: kept by a salvage.
    EXPECT_EQ(scan.valid_bytes, damaged.size()) << bit;
    EXPECT_EQ(as_map(state.deltas()).size(), 2u) << bit;
  }
}

TEST(WalRecord, AMalformedRecordChangesNothingInTheReplay) {
  // Checksums hold, content does not parse (a writer's bug, a newer format): corrupt,
  // and what precedes it must stay as it was for a salvage to keep it.
  std::string log;
  append_increments(log, std::vector<ingest::increment>{{1, 7, 5}});
  std::vector<store::flush_batch> batches{batch(9, 1, {{1, 8, 0, 2}})};
  append_batches(log, batches);
  append_increments(log, std::vector<ingest::increment>{{1, 7, 3}});
  const std::string magic(segment_magic);
  const auto bad_tail = [&](std::string record) {
    // One byte more, header rewritten to match: whole and checksummed, yet malformed.
    record.push_back('\0');
    const std::string_view payload(record.data() + record_header_bytes,
                                   record.size() - record_header_bytes);
    boost::crc_32_type crc;
    crc.process_bytes(payload.data(), payload.size());
    encode_header(record.data(), payload.size(), crc.checksum());
    return record;
  };
  std::string snapshot, increments;
  append_snapshot(snapshot, {}, std::vector<store::pending_delta>{{{1, 7}, 100}});
  append_increments(increments, std::vector<ingest::increment>{{1, 7, 1000}});
  for (const auto& bad : {bad_tail(snapshot), bad_tail(increments)}) {
    replay_state state;
    const auto scan = scan_segment(magic + log + bad, state);
    EXPECT_EQ(scan.outcome, scan_result::status::corrupt);
    EXPECT_EQ(scan.problem, "malformed record");
    const auto d = as_map(state.deltas());
    EXPECT_EQ(d.size(), 1u);
    EXPECT_EQ(d.count({1, 7}) ? d.at({1, 7}) : 0, 3);
    ASSERT_EQ(state.batches().size(), 1u);
    EXPECT_EQ(state.batches().front().run_id, 9u);
  }
}

TEST(WalRecord, LengthsPast4GiBFitTheHeader) {
  // A snapshot can pass 4 GiB; its length must survive the header.
  char header[record_header_bytes];
  const std::uint64_t length = (std::uint64_t{5} << 30) + 7;
  encode_header(header, length, 0xdeadbeef);
  std::uint64_t got = 0;
  std::uint32_t crc = 0;
  ASSERT_TRUE(decode_header(header, got, crc));
  EXPECT_EQ(got, length);
  EXPECT_EQ(crc, 0xdeadbeefu);
  header[4] ^= 0x01;  // bit 32 of the length
  EXPECT_FALSE(decode_header(header, got, crc));
  // A segment whose only record claims 5 GiB ends in a torn tail, not a short record.
  std::string segment(segment_magic);
  encode_header(header, length, 0);
  segment.append(header, record_header_bytes);
  segment.append("\x01", 1);
  replay_state state;
  const auto scan = scan_segment(segment, state);
  EXPECT_EQ(scan.outcome, scan_result::status::torn_tail);
  EXPECT_EQ(scan.problem, "record runs past the end of the file");
}

TEST(WalRecord, Format1SegmentsAreStillRead) {
  // [u32 length][u32 CRC-32 of payload][payload], no segment header.
  const auto format1 = [](std::string payload) {
    boost::crc_32_type crc;
    crc.process_bytes(payload.data(), payload.size());
    std::string out(8, '\0');
    const auto length = static_cast<std::uint32_t>(payload.size());
    const std::uint32_t sum = crc.checksum();
    std::memcpy(out.data(), &length, 4);
    std::memcpy(out.data() + 4, &sum, 4);
    return out + payload;
  };
  std::string v2;
  append_increments(v2, std::vector<ingest::increment>{{1, 9, 4}});
  replay_state state;
  const std::string segment = format1(v2.substr(record_header_bytes));
  const auto scan = scan_segment(segment, state);
  EXPECT_EQ(scan.outcome, scan_result::status::ok);
  EXPECT_EQ(as_map(state.deltas()), (decltype(as_map({})){{{1, 9}, 4}}));
}

TEST(WalRecord, DeltasSummingPastInt64AreCorruptionNotAWrap) {
  std::string log(segment_magic);
  append_snapshot(log, {},
                  std::vector<store::pending_delta>{{{1, 1}, INT64_MAX - 1}, {{1, 2}, INT64_MIN}});
  append_increments(log, std::vector<ingest::increment>{{1, 1, 1}});
  replay_state state;
  ASSERT_EQ(scan_segment(log, state).outcome, scan_result::status::ok);
  EXPECT_EQ((as_map(state.deltas())[{1, 1}]), INT64_MAX);
  append_increments(log, std::vector<ingest::increment>{{1, 2, -1}});
  replay_state again;
  ASSERT_EQ(scan_segment(log, again).outcome, scan_result::status::ok);
  EXPECT_THROW(again.deltas(), std::overflow_error);
}

TEST(WalRecord, AHugeCountInAWellFormedRecordIsMalformedNotAnAllocation) {
  // A snapshot claiming 2^62 deltas in a few bytes (checksums valid; 2^62 x 20 bytes
  // wraps to 0): rejected by size, not read into memory.
  std::string log(segment_magic);
  std::string payload(1, static_cast<char>(record_kind::snapshot));
  payload.append(4, '\0');  // no batches
  const std::uint64_t n = std::uint64_t{1} << 62;
  payload.append(reinterpret_cast<const char*>(&n), 8);
  payload.append(20, '\x01');
  boost::crc_32_type crc;
  crc.process_bytes(payload.data(), payload.size());
  char header[record_header_bytes];
  encode_header(header, payload.size(), crc.checksum());
  log.append(header, record_header_bytes);
  log += payload;
  replay_state state;
  const auto scan = scan_segment(log, state);
  EXPECT_EQ(scan.outcome, scan_result::status::corrupt);
  EXPECT_EQ(scan.problem, "malformed record");
}

}  // namespace
}  // namespace slotted::durable
