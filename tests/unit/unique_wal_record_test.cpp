// The WAL's unique kinds (durable/record.hpp: unique_increments, unique_batches,
// unique_snapshot): what they encode replays to the same entries, replay keeps the rules
// every record follows (a batches record takes what was pending, a committed record
// drops the batches before it, a snapshot replaces everything, a reset keeps the
// entries), and a torn or malformed record of them is refused whole.

#include <gtest/gtest.h>

#include <boost/crc.hpp>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "durable/record.hpp"
#include "support/batch_content.hpp"

namespace slotted::durable {
namespace {

store::unique_entry entry(std::uint64_t id, std::string client, std::int64_t window = 86400) {
  return {5, id, window, std::move(client), window + 17};
}

std::vector<store::unique_entry> some_entries() {
  return {entry(1, "alice"), entry(1, std::string(store::max_client_bytes, 'z')),
          entry(18446744073709551615ull, "b", 0)};
}

store::flush_batch unique_batch(std::uint64_t seq, std::vector<store::unique_entry> entries) {
  store::flush_batch b;
  b.run_id = 7;
  b.seq = seq;
  b.content = store::unique_content{.entries = std::move(entries), .slot = 65535};
  return b;
}

store::flush_batch plain_batch(std::uint64_t seq) {
  store::flush_batch b;
  b.run_id = 7;
  b.seq = seq;
  b.rows = {{1, 10, 3, 7}};
  return b;
}

std::map<std::pair<std::uint32_t, std::uint64_t>, std::int64_t> totals(
    const std::vector<store::pending_delta>& d) {
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::int64_t> m;
  for (const auto& x : d)
    if (x.gran == store::granularity::none) m[{x.key.record_type, x.key.record_id}] += x.delta;
  return m;
}

// The payload of the one record in `framed` (after its frame header).
std::string payload_of(const std::string& framed) {
  return framed.substr(record_header_bytes);
}

std::uint8_t kind_of(const std::string& framed) {
  return static_cast<std::uint8_t>(framed.at(record_header_bytes));
}

replay_state replayed(const std::string& records) {
  replay_state state;
  const auto scan = scan_segment(std::string(segment_magic) + records, state);
  EXPECT_EQ(scan.outcome, scan_result::status::ok) << scan.problem;
  return state;
}

TEST(UniqueWalRecord, ARequestsEntriesAndItsOtherItemsRoundTripInOneRecord) {
  ingest::increment timed{1, 10, 3};
  timed.at = 3600;
  const std::vector<ingest::increment> others{{1, 10, 2}, timed};
  std::string log;
  append_increments(log, others, some_entries());
  EXPECT_EQ(kind_of(log), static_cast<std::uint8_t>(record_kind::tagged));
  // Only entries (a request of `client` items alone) is one record too.
  append_increments(log, {}, std::vector{entry(2, "carol")});

  const auto state = replayed(log);
  EXPECT_EQ(totals(state.deltas()), (std::map<std::pair<std::uint32_t, std::uint64_t>,
                                               std::int64_t>{{{1, 10}, 5}}));
  auto expected = some_entries();
  expected.push_back(entry(2, "carol"));
  EXPECT_EQ(state.uniques(), expected);
}

TEST(UniqueWalRecord, UniqueBatchesAndSnapshotsRoundTrip) {
  const std::vector<store::flush_batch> batches{plain_batch(1), unique_batch(2, some_entries()),
                                                unique_batch(3, {entry(9, "d")})};
  std::string log;
  append_batches(log, batches);
  auto state = replayed(log);
  ASSERT_EQ(state.batches().size(), 3u);
  EXPECT_TRUE(test::uniques_of(state.batches()[0]).empty());
  EXPECT_EQ(state.batches()[0].rows.size(), 1u);
  EXPECT_EQ(test::uniques_of(state.batches()[1]), some_entries());
  EXPECT_EQ(test::unique_slot_of(state.batches()[1]), 65535);
  EXPECT_EQ(state.batches()[1].seq, 2u);
  EXPECT_EQ(test::uniques_of(state.batches()[2]), std::vector{entry(9, "d")});
  // Re-encoded, the same bytes.
  std::string again;
  append_batches(again, state.batches());
  EXPECT_EQ(again, log);

  // A snapshot: the batches, deltas, and the entries still pending.
  std::string snap;
  append_snapshot(snap, batches, std::vector<store::pending_delta>{{{1, 10}, 4}}, {},
                  std::vector{entry(4, "e")});
  state = replayed(snap);
  EXPECT_EQ(state.batches().size(), 3u);
  EXPECT_EQ(test::uniques_of(state.batches()[1]), some_entries());
  EXPECT_EQ(state.uniques(), std::vector{entry(4, "e")});
  EXPECT_EQ(totals(state.deltas()).at({1, 10}), 4);
  std::string snap_again;
  append_snapshot(snap_again, state.batches(), state.deltas(), state.keyed(), state.uniques());
  EXPECT_EQ(snap_again, snap);
  // Pending entries alone.
  std::string only_pending;
  append_snapshot(only_pending, {}, {}, {}, std::vector{entry(4, "e")});
  EXPECT_EQ(replayed(only_pending).uniques(), std::vector{entry(4, "e")});
}

TEST(UniqueWalRecord, ReplayKeepsPendingEntriesUntilABatchesRecordTakesThem) {
  std::string log;
  append_increments(log, {}, std::vector{entry(1, "a")});
  append_increments(log, {}, std::vector{entry(2, "b")});
  EXPECT_EQ(replayed(log).uniques().size(), 2u);
  // A reset clears the counter, not its decisions: the entries stay pending.
  append_reset(log, {5, 1});
  EXPECT_EQ(replayed(log).uniques().size(), 2u);

  // A batches record (of any kind) means everything logged before it is in its batches.
  std::string taken = log;
  append_batches(taken, std::vector{unique_batch(1, {entry(1, "a"), entry(2, "b")})});
  append_increments(taken, {}, std::vector{entry(3, "c")});
  auto state = replayed(taken);
  EXPECT_EQ(state.uniques(), std::vector{entry(3, "c")});
  ASSERT_EQ(state.batches().size(), 1u);
  EXPECT_EQ(test::uniques_of(state.batches()[0]).size(), 2u);
  std::string plain_take = log;
  append_batches(plain_take, std::vector{plain_batch(1)});
  EXPECT_TRUE(replayed(plain_take).uniques().empty());

  // A committed record: the unique batch before it committed, it is not sent again.
  append_committed(taken);
  state = replayed(taken);
  EXPECT_TRUE(state.batches().empty());
  EXPECT_EQ(state.uniques(), std::vector{entry(3, "c")});

  // A snapshot replaces everything before it, pending entries included.
  append_snapshot(taken, std::vector{unique_batch(4, {entry(3, "c")})}, {});
  state = replayed(taken);
  EXPECT_TRUE(state.uniques().empty());
  ASSERT_EQ(state.batches().size(), 1u);
  EXPECT_EQ(test::uniques_of(state.batches()[0]), std::vector{entry(3, "c")});
  append_snapshot(taken, {}, {}, {}, std::vector{entry(5, "f")});
  state = replayed(taken);
  EXPECT_TRUE(state.batches().empty());
  EXPECT_EQ(state.uniques(), std::vector{entry(5, "f")});
  // And a plain snapshot (nothing of uniques pending) leaves none.
  append_snapshot(taken, {}, std::vector<store::pending_delta>{{{1, 1}, 1}});
  EXPECT_TRUE(replayed(taken).uniques().empty());
}

// A record whose checksum holds and whose content does not parse.
std::string reframed(std::string payload) {
  std::string out(record_header_bytes, '\0');
  boost::crc_32_type crc;
  crc.process_bytes(payload.data(), payload.size());
  encode_header(out.data(), payload.size(), crc.checksum());
  return out + payload;
}

TEST(UniqueWalRecord, ATornOrMalformedRecordIsRefusedWhole) {
  std::vector<std::string> records(3);
  append_increments(records[0], std::vector<ingest::increment>{{1, 10, 2}}, some_entries());
  append_batches(records[1], std::vector{plain_batch(1), unique_batch(2, some_entries())});
  append_snapshot(records[2], std::vector{unique_batch(2, some_entries())},
                  std::vector<store::pending_delta>{{{1, 10}, 4}}, {}, some_entries());
  for (const auto& r : records) {
    const std::string payload = payload_of(r);
    replay_state whole;
    EXPECT_TRUE(whole.apply(payload));
    // Cut anywhere (a torn write the frame did not catch), or one byte too many.
    for (std::size_t cut = 1; cut < payload.size(); ++cut) {
      replay_state state;
      EXPECT_FALSE(state.apply(payload.substr(0, cut))) << int(kind_of(r)) << " cut " << cut;
      EXPECT_TRUE(state.uniques().empty());
      EXPECT_TRUE(state.batches().empty());
    }
    replay_state longer;
    EXPECT_FALSE(longer.apply(payload + '\0'));
    // In a segment: a malformed record, the segment corrupt, nothing of it applied.
    std::string log;
    append_increments(log, {}, std::vector{entry(8, "kept")});
    log += reframed(payload.substr(0, payload.size() - 1));
    replay_state state;
    const auto scan = scan_segment(std::string(segment_magic) + log, state);
    EXPECT_EQ(scan.outcome, scan_result::status::corrupt);
    EXPECT_EQ(scan.problem, "malformed record");
    EXPECT_EQ(state.uniques(), std::vector{entry(8, "kept")});
  }

  const auto unique_increments = [](std::string client, std::int64_t window = 86400,
                                    std::int64_t at = 86417) {
    std::string payload(1, static_cast<char>(record_kind::unique_increments));
    const auto put = [&](auto v) { payload.append(reinterpret_cast<const char*>(&v), sizeof v); };
    put(std::uint32_t{0});  // no other item
    put(std::uint32_t{1});
    put(std::uint32_t{5});
    put(std::uint64_t{1});
    put(window);
    put(at);
    put(static_cast<std::uint8_t>(client.size()));
    return payload + client;
  };
  replay_state state;
  EXPECT_TRUE(state.apply(unique_increments("ok")));
  EXPECT_FALSE(state.apply(unique_increments("")));  // a client is 1 to 128 bytes
  EXPECT_FALSE(state.apply(unique_increments(std::string(129, 'x'))));
  // A window or a time this daemon never writes: not on an hour, a time before its
  // window or a day past its start, a negative time, one past the parser's bound.
  for (const auto& [window, at] : {std::pair<std::int64_t, std::int64_t>{86401, 86417},
                                   {86400, 86399},
                                   {86400, 172800},
                                   {-3600, 0},
                                   {0, -1},
                                   {ingest::max_at - ingest::max_at % 3600, ingest::max_at + 1}})
    EXPECT_FALSE(state.apply(unique_increments("ok", window, at))) << window << " " << at;
  EXPECT_TRUE(state.apply(unique_increments("ok", 3600, 3600 + 86399)));
  // No entry at all: the plain kinds log such a request.
  std::string none(1, static_cast<char>(record_kind::unique_increments));
  none.append(8, '\0');
  EXPECT_FALSE(state.apply(none));
  EXPECT_EQ(state.uniques().size(), 2u);

  // Kind 12 (read, no longer written): a uniques field naming a batch that has rows, or
  // none of the record's. Two batches in the bucketed_batches payload, unique batch 0 (no
  // rows) and plain batch 1 (one row), no keyed request, then the uniques field.
  const auto kind12 = [](std::uint32_t index) {
    std::string p(1, static_cast<char>(record_kind::unique_batches));
    const auto put = [&](auto v) { p.append(reinterpret_cast<const char*>(&v), sizeof v); };
    put(std::uint32_t{2});
    put(std::uint64_t{41}), put(std::uint64_t{1}), put(std::uint32_t{0}), put(std::uint32_t{0});
    put(std::uint64_t{41}), put(std::uint64_t{2}), put(std::uint32_t{1});
    put(std::uint32_t{1}), put(std::uint64_t{10}), put(std::uint16_t{3}), put(std::int64_t{4});
    put(std::uint32_t{0});  // its bucket rows
    put(std::uint32_t{0});  // the keyed trailer: none
    put(std::uint32_t{1}), put(index), put(std::uint16_t{65535}), put(std::uint32_t{1});
    put(std::uint32_t{5}), put(std::uint64_t{1}), put(std::int64_t{0}), put(std::int64_t{10});
    put(std::uint8_t{1});
    return p + "a";
  };
  for (const std::uint32_t bad : {1u, 2u}) {
    replay_state s;
    EXPECT_FALSE(s.apply(kind12(bad))) << bad;
  }
  replay_state s;
  EXPECT_TRUE(s.apply(kind12(0)));
  ASSERT_EQ(s.batches().size(), 2u);
  EXPECT_EQ(test::uniques_of(s.batches()[0]).size(), 1u);
  EXPECT_EQ(test::unique_slot_of(s.batches()[0]), 65535);
}

}  // namespace
}  // namespace slotted::durable
