// The tagged record (kind 14, durable/record.hpp): what its decoder refuses. Every
// refusal is a malformed record that changes nothing, as an unknown kind is; a record
// of a later version is refused whole, never half read.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "durable/record.hpp"
#include "support/replay_dump.hpp"

namespace slotted::durable {
namespace {

template <typename T>
std::string le(T v) {
  std::string s(sizeof(T), '\0');
  std::memcpy(s.data(), &v, sizeof(T));
  return s;
}

std::string field(std::uint8_t tag, const std::string& body) {
  return std::string(1, static_cast<char>(tag)) + le<std::uint64_t>(body.size()) + body;
}

// A tagged payload of `fields`, whose count says `count` (their number unless given), then
// `tail`.
std::string payload(std::uint8_t role, const std::vector<std::string>& fields,
                    std::uint8_t version = 1, int count = -1, const std::string& tail = "") {
  std::string p{static_cast<char>(14), static_cast<char>(version), static_cast<char>(role)};
  p += le<std::uint32_t>(count < 0 ? static_cast<std::uint32_t>(fields.size())
                                   : static_cast<std::uint32_t>(count));
  for (const auto& f : fields) p += f;
  return p + tail;
}

constexpr std::uint8_t append = 1, cut = 2, snapshot = 3, committed = 4, reset = 5;

std::string key_body(std::uint32_t type, std::uint64_t id) {
  return le(type) + le(id);
}
std::string increments_body(std::uint32_t type, std::uint64_t id, std::int32_t delta) {
  return le<std::uint32_t>(1) + le(type) + le(id) + le(delta);
}
std::string keyed_body() {
  return le<std::uint8_t>(1) + "k" + le<std::uint64_t>(1) + le<std::uint64_t>(2) +
         le<std::int64_t>(0) + le<std::uint32_t>(1) + le<std::uint32_t>(1) + le<std::uint64_t>(9) +
         le<std::int32_t>(1) + le<std::int64_t>(0);
}
std::string unique_body() {
  return le<std::uint32_t>(1) + le<std::uint32_t>(5) + le<std::uint64_t>(1) + le<std::int64_t>(0) +
         le<std::int64_t>(10) + le<std::uint8_t>(1) + "c";
}
// A plain batch with one row; `content`, `slot` and `tail` as given.
std::string batch_body(std::uint8_t content = 0, std::uint16_t slot = 0, std::uint32_t rows = 1,
                       const std::string& tail = "") {
  std::string b = le<std::uint64_t>(7) + le<std::uint64_t>(1) + le(content) + le(slot) + le(rows);
  for (std::uint32_t i = 0; i < rows; ++i)
    b += le<std::uint32_t>(1) + le<std::uint64_t>(10) + le<std::uint16_t>(3) + le<std::int64_t>(4);
  return b + le<std::uint32_t>(0) + tail;
}

// A state holding something, so that "changes nothing" can fail.
replay_state holding_something() {
  replay_state s;
  std::string log{segment_magic};
  append_increments(log, std::vector<ingest::increment>{{1, 10, 5}});
  append_batches(log, std::vector<store::flush_batch>{});
  append_increments(log, std::vector<ingest::increment>{{2, 20, 3}});
  EXPECT_EQ(scan_segment(log, s).outcome, scan_result::status::ok);
  return s;
}

void expect_refused(const std::string& p, const char* what) {
  auto state = holding_something();
  const auto before = test::dump(state);
  EXPECT_FALSE(state.apply(p)) << what;
  EXPECT_EQ(test::dump(state), before) << what;
}

void expect_taken(const std::string& p, const char* what) {
  auto state = holding_something();
  EXPECT_TRUE(state.apply(p)) << what;
}

TEST(WalTagged, WellFormedRecordsOfEachRoleAreTaken) {
  expect_taken(payload(append, {field(1, increments_body(1, 10, 2))}), "increments");
  expect_taken(payload(append, {field(1, increments_body(1, 10, 2)), field(4, unique_body())}),
               "increments and unique entries");
  expect_taken(payload(append, {field(3, keyed_body())}), "a keyed request");
  expect_taken(payload(cut, {field(5, batch_body()), field(5, batch_body())}), "two batches");
  expect_taken(payload(cut, {}), "a cut of no batch");
  expect_taken(
      payload(snapshot, {field(3, keyed_body()), field(3, keyed_body()), field(4, unique_body()),
                         field(5, batch_body()), field(6, le<std::uint64_t>(0))}),
      "a snapshot");
  expect_taken(payload(committed, {}), "committed");
  expect_taken(payload(reset, {field(8, key_body(1, 10))}), "reset");
  expect_taken(payload(cut, {field(5, batch_body(1, 0, 1, le<std::uint32_t>(1) + keyed_body()))}),
               "a keyed batch");
  expect_taken(payload(cut, {field(5, batch_body(2, 9, 0, unique_body()))}), "a unique batch");
}

// Many items in one record: a request of 65,537 `client` items (one field of entries) and
// a snapshot of as many pending totals, bucket counts and entries (one field each).
TEST(WalTagged, LargeRequestsAndSnapshotsRoundTripInOneFieldEach) {
  constexpr std::uint64_t n = 65537;
  std::vector<store::pending_delta> deltas;
  std::vector<store::unique_entry> uniques;
  for (std::uint64_t id = 1; id <= n; ++id) {
    deltas.push_back({{1, id}, 1});
    deltas.push_back({{1, id}, 2, store::granularity::hour, 3600});
    uniques.push_back({5, id, 0, "c", 10});
  }
  const auto fields_of = [](const std::string& log) {
    std::uint32_t fields = 0;
    std::memcpy(&fields, log.data() + segment_magic.size() + record_header_bytes + 3,
                sizeof fields);
    return fields;
  };
  std::string request{segment_magic};
  append_increments(request, std::vector<ingest::increment>{{1, 1, 1}}, uniques);
  EXPECT_EQ(fields_of(request), 2u);
  replay_state from_request;
  ASSERT_EQ(scan_segment(request, from_request).outcome, scan_result::status::ok);
  EXPECT_EQ(from_request.uniques(), uniques);

  std::string snap{segment_magic};
  append_snapshot(snap, {}, deltas, {}, uniques);
  EXPECT_EQ(fields_of(snap), 3u);
  replay_state state;
  ASSERT_EQ(scan_segment(snap, state).outcome, scan_result::status::ok);
  EXPECT_EQ(state.uniques().size(), n);
  std::int64_t totals = 0, buckets = 0;
  for (const auto& d : state.deltas())
    (d.gran == store::granularity::none ? totals : buckets) += d.delta;
  EXPECT_EQ(totals, static_cast<std::int64_t>(n));
  EXPECT_EQ(buckets, static_cast<std::int64_t>(2 * n));
}

// A keyed or unique batch of nothing writes nothing: it is logged as the plain batch it
// is (a keyed batch field of no request, or a unique one of no entry, is malformed).
TEST(WalTagged, AKeyedOrUniqueBatchOfNothingIsLoggedAsThePlainBatchItIs) {
  std::vector<store::flush_batch> batches(2);
  batches[0].seq = 3;
  batches[0].content = store::unique_content{.entries = {}, .slot = 9};
  batches[1].seq = 4;
  batches[1].content = store::keyed_content{};
  std::string log{segment_magic};
  append_batches(log, batches);
  replay_state state;
  ASSERT_EQ(scan_segment(log, state).outcome, scan_result::status::ok);
  ASSERT_EQ(state.batches().size(), 2u);
  for (const auto& b : state.batches())
    EXPECT_TRUE(std::holds_alternative<store::plain_content>(b.content)) << b.seq;
  EXPECT_EQ(state.batches()[1].seq, 4u);
}

TEST(WalTagged, ALaterVersionOrAnUnknownRoleOrTagIsRefusedWhole) {
  expect_refused(payload(reset, {field(8, key_body(1, 10))}, 2), "version 2");
  expect_refused(payload(reset, {field(8, key_body(1, 10))}, 0), "version 0");
  expect_refused(payload(0, {}), "role 0");
  expect_refused(payload(6, {}), "role 6");
  expect_refused(payload(committed, {field(9, "")}), "tag 9");
  expect_refused(payload(committed, {field(0, "")}), "tag 0");
  expect_refused(std::string{static_cast<char>(14)}, "no version");
  expect_refused(std::string{static_cast<char>(14), 1}, "no role");
  expect_refused(std::string{static_cast<char>(14), 1, 4}, "no field count");
}

TEST(WalTagged, AFieldIsReadToExactlyItsLengthAndARecordToExactlyItsCount) {
  const std::string key = key_body(1, 10);
  expect_refused(payload(reset, {field(8, key + "x")}), "a byte more than the body holds");
  expect_refused(payload(reset, {field(8, key.substr(0, key.size() - 1))}), "a byte short");
  // The length says more than the record holds (or more than any record could).
  std::string longer = field(8, key);
  longer[1] = static_cast<char>(key.size() + 1);
  std::string huge = field(8, key);
  huge[8] = static_cast<char>(0x80);
  expect_refused(payload(reset, {huge}), "a length of 2^63 and more");
  expect_refused(payload(reset, {longer}), "a length past the end");
  expect_refused(payload(reset, {field(8, key)}, 1, -1, "\x08"), "a trailing byte");
  // The count: a record cut at a field's end, or one with a field more than it says.
  const auto batch = field(5, batch_body());
  expect_refused(payload(cut, {batch}, 1, 2), "a count of two, one field");
  expect_refused(payload(cut, {batch, batch}, 1, 1), "a count of one, two fields");
  expect_refused(payload(append, {field(1, increments_body(1, 10, 2) + "z")}),
                 "an increments field with a byte to spare");
}

TEST(WalTagged, EachRoleTakesItsFieldsOnlyInTagOrderAndAsOftenAsItAllows) {
  const auto key = field(8, key_body(1, 10));
  expect_refused(payload(reset, {key, key}), "two counters in a reset");
  expect_refused(payload(reset, {}), "a reset without its counter");
  expect_refused(payload(committed, {key}), "a counter in a committed record");
  expect_refused(payload(cut, {field(1, increments_body(1, 10, 2))}), "increments in a cut");
  expect_refused(payload(append, {}), "an append of nothing");
  expect_refused(payload(append, {field(1, increments_body(1, 10, 2)), field(3, keyed_body())}),
                 "increments and a keyed request in one append");
  expect_refused(
      payload(append, {field(1, increments_body(1, 10, 2)), field(2, le<std::uint32_t>(0))}),
      "both forms of increments");
  expect_refused(payload(append, {field(3, keyed_body()), field(4, unique_body())}),
                 "a keyed request with unique entries");
  expect_refused(payload(append, {field(4, unique_body())}), "unique entries alone");
  expect_refused(payload(append, {field(1, increments_body(1, 10, 2)), field(4, unique_body()),
                                  field(4, unique_body())}),
                 "two unique entries fields in a request");
  expect_refused(
      payload(snapshot, {field(6, le<std::uint64_t>(0)), field(6, le<std::uint64_t>(0))}),
      "two totals fields in a snapshot");
  expect_refused(payload(snapshot, {field(5, batch_body()), field(3, keyed_body())}),
                 "a keyed request after a batch");
  expect_refused(
      payload(append, {field(1, increments_body(1, 10, 2)), field(4, le<std::uint32_t>(0))}),
      "a unique entries field of none");
}

// A pending bucket count names an hour or a day; a total (granularity 0) has its own field.
TEST(WalTagged, APendingBucketCountIsOfAnHourOrADay) {
  const auto bucket = [](std::uint8_t g) {
    return le<std::uint64_t>(1) + le<std::uint32_t>(1) + le<std::uint64_t>(10) +
           le<std::int64_t>(2) + le(g) + le<std::int64_t>(3600);
  };
  expect_taken(payload(snapshot, {field(7, bucket(1))}), "an hour");
  expect_taken(payload(snapshot, {field(7, bucket(2))}), "a day");
  expect_refused(payload(snapshot, {field(7, bucket(0))}), "a total among bucket counts");
  expect_refused(payload(snapshot, {field(7, bucket(3))}), "granularity 3");
}

TEST(WalTagged, ABatchHoldsOneKindOfContentAsThatKindAllows) {
  expect_refused(payload(cut, {field(5, batch_body(0, 3))}), "a plain batch with a slot");
  expect_refused(payload(cut, {field(5, batch_body(3))}), "content 3");
  expect_refused(payload(cut, {field(5, batch_body(2, 9, 1, unique_body()))}),
                 "a unique batch with rows");
  expect_refused(payload(cut, {field(5, batch_body(2, 9, 0, le<std::uint32_t>(0)))}),
                 "a unique batch of no entry");
  expect_refused(payload(cut, {field(5, batch_body(1, 0, 1, le<std::uint32_t>(0)))}),
                 "a keyed batch of no request");
  expect_refused(payload(cut, {field(5, batch_body(1, 0, 1, le<std::uint32_t>(2) + keyed_body()))}),
                 "a keyed batch short of a request");
}

}  // namespace
}  // namespace slotted::durable
