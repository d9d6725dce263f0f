// The WAL's bytes on disk, pinned: one record of each role encoded in the tagged kind (14)
// and compared with the bytes this version writes; the same content as kinds 1-10 wrote
// it, and the borrowed-bit encodings of versions before those, replayed to the same
// state. A change to the encoding fails here; a format change is a new version of the
// tagged kind, a new tag or a new segment magic (see durable/record.hpp), with a new
// expected string here and a new golden log (tests/data/wal-golden).
#include <gtest/gtest.h>

#include <boost/crc.hpp>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "durable/record.hpp"
#include "support/batch_content.hpp"
#include "support/replay_dump.hpp"
#include "support/wal_stubs.hpp"

namespace slotted::durable {
namespace {

std::string hex(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

constexpr auto* timed = &test::timed_increment;

idempotency::keyed_request keyed(std::string key, std::vector<ingest::increment> increments) {
  return test::keyed_request(std::move(key), std::move(increments),
                             {0x0123456789abcdefull, 0xfedcba9876543210ull});
}

store::flush_batch batch(std::uint64_t run, std::uint64_t seq) {
  store::flush_batch b;
  b.run_id = run;
  b.seq = seq;
  b.rows = {{1, 10, 3, 7}, {2, 18446744073709551615ull, 65535, -9}};
  return b;
}

store::flush_batch batch_with_buckets_and_keys() {
  store::flush_batch b = batch(5, 6);
  b.bucket_rows = {{1, 10, store::granularity::hour, 3600, 3, 7},
                   {1, 10, store::granularity::day, 86400, 3, 7}};
  test::requests_in(b).push_back(keyed("b-key", {{1, 10, 7}}));
  return b;
}

struct golden {
  const char* name;
  std::string bytes;     // as this version writes it
  const char* expected;  // the same, in hex: the tagged kind
  const char* legacy;    // the same content as kinds 1-10 wrote it (before the tagged kind)
};

std::vector<golden> encoded() {
  std::vector<golden> out;
  const auto add = [&](const char* name, auto&& encode, const char* legacy,
                       const char* expected) {
    std::string bytes;
    encode(bytes);
    out.push_back({name, std::move(bytes), expected, legacy});
  };
  add("increments", [](std::string& s) {
    append_increments(s, std::vector<ingest::increment>{{1, 10, 5}, {2, 18446744073709551615ull, -7}});
  },
      "25000000000000002d43a2e35443f17e0102000000010000000a000000000000"
      "000500000002000000fffffffffffffffff9ffffff",
      "340000000000000051d5c753cf15d0e20e010101000000012400000000000000"
      "02000000010000000a000000000000000500000002000000ffffffffffffffff"
      "f9ffffff");
  add("timed_increments", [](std::string& s) {
    append_increments(s, std::vector{timed(1, 10, 5, 3600, true), timed(2, 3, 1, 0, false),
                                     timed(3, 4, -1, 0, true), timed(4, 5, 2, 7200, false)});
  },
      "650000000000000004098a1585e526e70704000000010000000a000000000000"
      "0005000000100e00000000000002000000030000000000000001000000ffffff"
      "ffffffffff030000000400000000000000ffffffff0000000000000000040000"
      "00050000000000000002000000201c000000000000",
      "7400000000000000deee59b3cf4b7f000e010101000000026400000000000000"
      "04000000010000000a0000000000000005000000100e00000000000002000000"
      "030000000000000001000000ffffffffffffffff030000000400000000000000"
      "ffffffff000000000000000004000000050000000000000002000000201c0000"
      "00000000");
  add("keyed", [](std::string& s) { append_keyed(s, keyed("k-1", {{1, 10, 2}, {3, 4, -1}})); },
      "4100000000000000ef33123431b3622105036b2d31efcdab8967452301103254"
      "7698badcfe7b68e5cf8b01000002000000010000000a00000000000000020000"
      "00030000000400000000000000ffffffff",
      "6000000000000000bb7c1d5e27e2a0b70e010101000000035000000000000000"
      "036b2d31efcdab89674523011032547698badcfe7b68e5cf8b01000002000000"
      "010000000a000000000000000200000000000000000000000300000004000000"
      "00000000ffffffff0000000000000000");
  add("timed_keyed_longest_key", [](std::string& s) {
    append_keyed(s, keyed(std::string(128, 'x'), {timed(1, 10, 2, 3600, true),
                                                  timed(3, 4, -1, 7200, false)}));
  },
      "ce000000000000005d3ee1412f616c9308807878787878787878787878787878"
      "7878787878787878787878787878787878787878787878787878787878787878"
      "7878787878787878787878787878787878787878787878787878787878787878"
      "7878787878787878787878787878787878787878787878787878787878787878"
      "787878787878787878787878787878787878efcdab89674523011032547698ba"
      "dcfe7b68e5cf8b01000002000000010000000a0000000000000002000000eff1"
      "ffffffffffff030000000400000000000000ffffffff201c000000000000",
      "dd00000000000000167fb59cd15012f30e01010100000003cd00000000000000"
      "8078787878787878787878787878787878787878787878787878787878787878"
      "7878787878787878787878787878787878787878787878787878787878787878"
      "7878787878787878787878787878787878787878787878787878787878787878"
      "7878787878787878787878787878787878787878787878787878787878787878"
      "78efcdab89674523011032547698badcfe7b68e5cf8b01000002000000010000"
      "000a0000000000000002000000eff1ffffffffffff0300000004000000000000"
      "00ffffffff201c000000000000");
  add("batches", [](std::string& s) { append_batches(s, std::vector{batch(1, 2)}); },
      "4500000000000000eed7aaaf2bf9f27f02010000000100000000000000020000"
      "000000000002000000010000000a000000000000000300070000000000000002"
      "000000fffffffffffffffffffff7ffffffffffffff",
      "57000000000000001f609766b5214ae90e010201000000054700000000000000"
      "0100000000000000020000000000000000000002000000010000000a00000000"
      "0000000300070000000000000002000000fffffffffffffffffffff7ffffffff"
      "ffffff00000000");
  add("bucketed_batches", [](std::string& s) {
    append_batches(s, std::vector{batch(1, 2), batch_with_buckets_and_keys()});
  },
      "0d01000000000000af259b5386c6ad6f09020000000100000000000000020000"
      "000000000002000000010000000a000000000000000300070000000000000002"
      "000000fffffffffffffffffffff7ffffffffffffff0000000005000000000000"
      "00060000000000000002000000010000000a0000000000000003000700000000"
      "00000002000000fffffffffffffffffffff7ffffffffffffff02000000010000"
      "000a0000000000000001100e0000000000000300070000000000000001000000"
      "0a00000000000000028051010000000000030007000000000000000100000001"
      "00000005622d6b6579efcdab89674523011032547698badcfe7b68e5cf8b0100"
      "0001000000010000000a00000000000000070000000000000000000000",
      "23010000000000008488bf24552db7070e010202000000054700000000000000"
      "0100000000000000020000000000000000000002000000010000000a00000000"
      "0000000300070000000000000002000000fffffffffffffffffffff7ffffffff"
      "ffffff0000000005c30000000000000005000000000000000600000000000000"
      "01000002000000010000000a0000000000000003000700000000000000020000"
      "00fffffffffffffffffffff7ffffffffffffff02000000010000000a00000000"
      "00000001100e00000000000003000700000000000000010000000a0000000000"
      "0000028051010000000000030007000000000000000100000005622d6b6579ef"
      "cdab89674523011032547698badcfe7b68e5cf8b01000001000000010000000a"
      "00000000000000070000000000000000000000");
  add("snapshot", [](std::string& s) {
    append_snapshot(s, std::vector{batch(1, 2)},
                    std::vector<store::pending_delta>{{{1, 10}, 5}, {{2, 3}, -6}});
  },
      "7500000000000000be422e3f9d74eef403010000000100000000000000020000"
      "000000000002000000010000000a000000000000000300070000000000000002"
      "000000fffffffffffffffffffff7ffffffffffffff0200000000000000010000"
      "000a000000000000000500000000000000020000000300000000000000faffff"
      "ffffffffff",
      "9000000000000000c6a79790d53114560e010302000000054700000000000000"
      "0100000000000000020000000000000000000002000000010000000a00000000"
      "0000000300070000000000000002000000fffffffffffffffffffff7ffffffff"
      "ffffff000000000630000000000000000200000000000000010000000a000000"
      "000000000500000000000000020000000300000000000000faffffffffffffff");
  add("bucketed_snapshot", [](std::string& s) {
    append_snapshot(s, std::vector{batch_with_buckets_and_keys()},
                    std::vector<store::pending_delta>{
                        {{1, 10}, 5}, {{1, 10}, 5, store::granularity::hour, 3600}},
                    std::vector{keyed("p-key", {timed(1, 10, 5, 3600, true)})});
  },
      "490100000000000065fad224b526372c0a010000000500000000000000060000"
      "000000000002000000010000000a000000000000000300070000000000000002"
      "000000fffffffffffffffffffff7ffffffffffffff02000000010000000a0000"
      "000000000001100e00000000000003000700000000000000010000000a000000"
      "0000000002805101000000000003000700000000000000020000000000000001"
      "0000000a00000000000000050000000000000000000000000000000001000000"
      "0a00000000000000050000000000000001100e00000000000002000000000000"
      "0005622d6b6579efcdab89674523011032547698badcfe7b68e5cf8b01000001"
      "000000010000000a00000000000000070000000000000000000000ffffffff05"
      "702d6b6579efcdab89674523011032547698badcfe7b68e5cf8b010000010000"
      "00010000000a0000000000000005000000eff1ffffffffffff",
      "6901000000000000c9879eb692525f2d0e010304000000033a00000000000000"
      "05702d6b6579efcdab89674523011032547698badcfe7b68e5cf8b0100000100"
      "0000010000000a0000000000000005000000eff1ffffffffffff05c300000000"
      "0000000500000000000000060000000000000001000002000000010000000a00"
      "0000000000000300070000000000000002000000fffffffffffffffffffff7ff"
      "ffffffffffff02000000010000000a0000000000000001100e00000000000003"
      "000700000000000000010000000a000000000000000280510100000000000300"
      "07000000000000000100000005622d6b6579efcdab89674523011032547698ba"
      "dcfe7b68e5cf8b01000001000000010000000a00000000000000070000000000"
      "000000000000061c000000000000000100000000000000010000000a00000000"
      "0000000500000000000000072500000000000000010000000000000001000000"
      "0a00000000000000050000000000000001100e000000000000");
  add("committed", [](std::string& s) { append_committed(s); },
      "0100000000000000942b6fd5c10496f204",
      "070000000000000046d18ff32450d6a50e010400000000");
  add("reset", [](std::string& s) { append_reset(s, {7, 18446744073709551615ull}); },
      "0d00000000000000a5706f9f5bbfeb490607000000ffffffffffffffff",
      "1c000000000000002ef7d7483041df340e010501000000080c00000000000000"
      "07000000ffffffffffffffff");
  return out;
}

// Logs of earlier versions, which marked bucket counts and `at`s with bits borrowed from
// other fields (see wal/record.hpp): still read, never written. Each is the record of the
// same name above (timed_keyed_longest_key, bucketed_batches, bucketed_snapshot) as those
// versions wrote it.
struct old_golden {
  const char* name;   // the golden above holding the same content
  const char* bytes;  // hex
};

const std::vector<old_golden>& old_encodings() {
  static const std::vector<old_golden> out{
      // keyed, 0x80 in the key length byte (alone: the 128-character key, with `at`s).
      {"timed_keyed_longest_key",
      "ce00000000000000b3cded74821148e805807878787878787878787878787878"
      "7878787878787878787878787878787878787878787878787878787878787878"
      "7878787878787878787878787878787878787878787878787878787878787878"
      "7878787878787878787878787878787878787878787878787878787878787878"
      "787878787878787878787878787878787878efcdab89674523011032547698ba"
      "dcfe7b68e5cf8b01000002000000010000000a0000000000000002000000eff1"
      "ffffffffffff030000000400000000000000ffffffff201c000000000000"},
      // batches, 0x80000000 in the second batch's row count; its keyed trailer as keyed.
      {"bucketed_batches",
      "0101000000000000823ba9bc06d982f302020000000100000000000000020000"
      "000000000002000000010000000a000000000000000300070000000000000002"
      "000000fffffffffffffffffffff7ffffffffffffff0500000000000000060000"
      "000000000002000080010000000a000000000000000300070000000000000002"
      "000000fffffffffffffffffffff7ffffffffffffff02000000010000000a0000"
      "000000000001100e00000000000003000700000000000000010000000a000000"
      "0000000002805101000000000003000700000000000000010000000100000005"
      "622d6b6579efcdab89674523011032547698badcfe7b68e5cf8b010000010000"
      "00010000000a0000000000000007000000"},
      // snapshot, the top bit of u64 n; its batch's row count and its keyed trailer marked.
      {"bucketed_snapshot",
      "410100000000000095fb8c23a2c9c31703010000000500000000000000060000"
      "000000000002000080010000000a000000000000000300070000000000000002"
      "000000fffffffffffffffffffff7ffffffffffffff02000000010000000a0000"
      "000000000001100e00000000000003000700000000000000010000000a000000"
      "0000000002805101000000000003000700000000000000020000000000008001"
      "0000000a00000000000000050000000000000000000000000000000001000000"
      "0a00000000000000050000000000000001100e00000000000002000000000000"
      "0005622d6b6579efcdab89674523011032547698badcfe7b68e5cf8b01000001"
      "000000010000000a0000000000000007000000ffffffff85702d6b6579efcdab"
      "89674523011032547698badcfe7b68e5cf8b01000001000000010000000a0000"
      "000000000005000000eff1ffffffffffff"},
  };
  return out;
}

// Re-encodes what `state` replayed from the record `name`: false for a kind whose replay
// keeps no record to encode again.
bool reencode(const std::string& name, const replay_state& state, std::string& out) {
  if (name.starts_with("keyed") || name.starts_with("timed_keyed")) {
    if (state.keyed().size() != 1u) return false;
    append_keyed(out, state.keyed()[0]);
  } else if (name.starts_with("batches") || name.starts_with("bucketed_batches")) {
    append_batches(out, state.batches());
  } else if (name.starts_with("snapshot") || name.starts_with("bucketed_snapshot")) {
    auto deltas = state.deltas();  // in no particular order: as they were encoded
    std::sort(deltas.begin(), deltas.end(), [](const auto& a, const auto& b) {
      return std::tuple(a.gran, a.key.record_type, a.key.record_id) <
             std::tuple(b.gran, b.key.record_type, b.key.record_id);
    });
    append_snapshot(out, state.batches(), deltas, state.keyed());
  } else {
    return false;
  }
  return true;
}

std::string unhex(std::string_view h) {
  std::string out;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2)
    out += static_cast<char>(std::stoi(std::string(h.substr(i, 2)), nullptr, 16));
  return out;
}

std::uint32_t crc_of_payload(std::string_view payload) {
  boost::crc_32_type crc;
  crc.process_bytes(payload.data(), payload.size());
  return crc.checksum();
}

TEST(WalFormat, EachRecordEncodesToItsBytes) {
  for (const auto& g : encoded()) {
    EXPECT_EQ(hex(g.bytes), g.expected) << g.name;
  }
}

// A log written before the tagged kind replays after an upgrade: each record as kinds
// 1-10 wrote it replays to what the tagged record of the same content replays to.
TEST(WalFormat, TheKindsBeforeReplayAsTheTaggedRecordOfTheSameContent) {
  for (const auto& g : encoded()) {
    replay_state old_state, new_state;
    const auto old_scan = scan_segment(std::string(segment_magic) + unhex(g.legacy), old_state);
    ASSERT_EQ(old_scan.outcome, scan_result::status::ok) << g.name << ": " << old_scan.problem;
    ASSERT_EQ(scan_segment(std::string(segment_magic) + g.bytes, new_state).outcome,
              scan_result::status::ok)
        << g.name;
    EXPECT_EQ(test::dump(old_state), test::dump(new_state)) << g.name;
  }
}

// The decoders read back what the encoders wrote: re-encoding a replayed keyed, batches
// or snapshot record gives its bytes again.
TEST(WalFormat, ReplayedRecordsEncodeToTheSameBytes) {
  for (const auto& g : encoded()) {
    const std::string name = g.name;
    replay_state state;
    ASSERT_EQ(scan_segment(std::string(segment_magic) + g.bytes, state).outcome,
              scan_result::status::ok)
        << name;
    std::string again;
    if (!reencode(name, state, again)) continue;
    EXPECT_EQ(hex(again), hex(g.bytes)) << name;
  }
}

// Every log an earlier version wrote replays: each borrowed-bit encoding replays to what
// the record of the same content in this version's kind replays to (re-encoded, both
// give this version's bytes).
TEST(WalFormat, OldFlaggedEncodingsReplayToTheSameState) {
  const auto goldens = encoded();
  for (const auto& old : old_encodings()) {
    const std::string name = old.name;
    SCOPED_TRACE(name);
    const auto g = std::find_if(goldens.begin(), goldens.end(),
                                [&](const golden& x) { return x.name == name; });
    ASSERT_NE(g, goldens.end());
    replay_state old_state;
    const auto scan = scan_segment(std::string(segment_magic) + unhex(old.bytes), old_state);
    ASSERT_EQ(scan.outcome, scan_result::status::ok) << scan.problem;
    std::string again;
    ASSERT_TRUE(reencode(name, old_state, again));
    EXPECT_EQ(hex(again), hex(g->bytes));
  }
}

// Every record this version writes is the tagged kind, version 1; no mark is borrowed
// from a field.
TEST(WalFormat, EveryRecordIsWrittenInTheTaggedKind) {
  const auto goldens = encoded();
  for (const auto& g : goldens) {
    EXPECT_EQ(static_cast<std::uint8_t>(g.bytes.at(record_header_bytes)),
              static_cast<std::uint8_t>(record_kind::tagged))
        << g.name;
    EXPECT_EQ(static_cast<std::uint8_t>(g.bytes.at(record_header_bytes + 1)), 1u) << g.name;
  }
  // The 128-character key is written as 128 (after kind, version, role, field count,
  // field tag and field length), not as 0x80.
  const auto g = std::find_if(goldens.begin(), goldens.end(), [](const golden& x) {
    return std::string_view(x.name) == "timed_keyed_longest_key";
  });
  ASSERT_NE(g, goldens.end());
  EXPECT_EQ(static_cast<std::uint8_t>(g->bytes.at(record_header_bytes + 1 + 1 + 1 + 4 + 1 + 8)), 128u);
}

// A reader that does not know a kind (an earlier version reading this version's tagged
// records: those versions knew kinds 1 to 13) refuses the record as malformed and the
// segment as corrupt, counting the intact records after it; it never skips it. Shown
// here with kind 15, which this version does not know, framed as a valid record.
TEST(WalFormat, AnUnknownRecordKindIsACorruptSegment) {
  for (const auto& g : encoded()) {
    std::string unknown = g.bytes;
    unknown[record_header_bytes] = 15;
    encode_header(unknown.data(), unknown.size() - record_header_bytes,
                  crc_of_payload(std::string_view(unknown).substr(record_header_bytes)));
    std::string log{segment_magic};
    append_committed(log);
    log += unknown;
    append_committed(log);
    replay_state state;
    const auto scan = scan_segment(log, state);
    EXPECT_EQ(scan.outcome, scan_result::status::corrupt) << g.name;
    EXPECT_EQ(scan.problem, "malformed record") << g.name;
    std::string committed;
    append_committed(committed);
    EXPECT_EQ(scan.valid_bytes, segment_magic.size() + committed.size()) << g.name;
    EXPECT_EQ(scan.intact_records_after, 1u) << g.name;
  }
}

TEST(WalFormat, TheSegmentMagicIsUnchanged) {
  EXPECT_EQ(hex(segment_magic), "534357414c30320a");
}

}  // namespace
}  // namespace slotted::durable
