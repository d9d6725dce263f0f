// Golden WAL logs (tests/data/wal-golden/<commit>/): segments written by the build named
// by their directory, with the replay of each record by that build as text (expected.txt,
// tests/support/replay_dump.hpp, after every record). Every build must replay every one
// of them to the same text: a log written before an upgrade is read after it. The test
// that pins this build's own format writes them when asked, once per format change
// (tests/data/wal-golden/README.md); the files are never edited.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "durable/record.hpp"
#include "support/batch_content.hpp"
#include "support/replay_dump.hpp"
#include "support/wal_stubs.hpp"

namespace slotted::durable {
namespace golden_wal {

namespace fs = std::filesystem;

// The buckets the replays count in: record type 1 keeps hours and days.
store::bucket_spec replay_buckets() {
  store::bucket_spec b;
  b.declare(1, store::granularity::hour, std::chrono::hours(24 * 7));
  b.declare(1, store::granularity::day, std::chrono::hours(24 * 90));
  return b;
}

ingest::increment at(std::uint32_t type, std::uint64_t id, std::int32_t delta, std::int64_t t,
                     bool given) {
  return test::timed_increment(type, id, delta, t, given);
}

idempotency::keyed_request request(std::string key, std::vector<ingest::increment> increments) {
  const auto hash = idempotency::hash_of(increments);
  return test::keyed_request(std::move(key), std::move(increments), hash);
}

store::unique_entry entry(std::uint64_t id, std::string client, std::int64_t t) {
  return {5, id, t - t % 86400, std::move(client), t};
}

store::flush_batch plain(std::uint64_t seq) {
  store::flush_batch b;
  b.run_id = 41;
  b.seq = seq;
  b.rows = {{1, 10, 3, 7}, {2, 18446744073709551615ull, 65535, -9}};
  return b;
}

store::flush_batch with_buckets_and_keys(std::uint64_t seq) {
  store::flush_batch b = plain(seq);
  b.bucket_rows = {{1, 10, store::granularity::hour, 3600, 3, 7},
                   {1, 10, store::granularity::day, 0, 3, 7}};
  test::requests_in(b).push_back(request("in-a-batch", {at(1, 10, 7, 3600, true)}));
  return b;
}

store::flush_batch of_uniques(std::uint64_t seq) {
  store::flush_batch b;
  b.run_id = 41;
  b.seq = seq;
  b.content = store::unique_content{
      .entries = {entry(1, "a", 90000), entry(1, "b", 90001), entry(2, "a", 200000)}, .slot = 7};
  return b;
}

// One segment holding a record of every kind the builds before the tagged kind wrote
// (the kind each wrote is noted; this build writes the tagged kind for each, with the
// same content), in an order where each record acts on what the replay holds: every batches kind and the committed record
// find increments, keyed requests and unique entries pending (which a batches record
// moves into its batches and a committed record keeps), the reset a counter with
// buckets, and a time the client sent as 0 is there.
std::string every_kind() {
  std::string s(segment_magic);
  using incs = std::vector<ingest::increment>;
  const auto pending_of_each = [&](std::uint64_t id) {
    append_increments(s, incs{{1, id, 5}, {2, 18446744073709551615ull, -7}});  // 1
    append_keyed(s, request("k-" + std::to_string(id), {{1, 10, 2}, {3, 4, -1}}));  // 5
    append_increments(s, incs{{1, 12, 1}},
                      std::vector{entry(9, "client-" + std::to_string(id), 90000)});  // 11
  };
  pending_of_each(10);
  append_increments(s, incs{at(1, 10, 5, 3600, true), at(2, 3, 1, 0, false),
                            at(1, 11, -1, 90000, true), at(1, 13, 2, 0, true)});  // 7
  append_keyed(s, request(std::string(128, 'x'), {at(1, 10, 2, 3600, true),
                                                  at(3, 4, -1, 7200, false),
                                                  at(1, 10, 1, 0, true)}));  // 8
  append_reset(s, {1, 11});                                              // 6
  append_batches(s, std::vector{plain(1), with_buckets_and_keys(2)});    // 9
  pending_of_each(20);
  append_batches(s, std::vector{plain(3)});                              // 2
  pending_of_each(30);
  append_batches(s, std::vector{plain(4), of_uniques(5)});               // 12
  pending_of_each(40);
  append_committed(s);                                                   // 4
  append_snapshot(s, std::vector{plain(6)},
                  std::vector<store::pending_delta>{{{1, 10}, 5}, {{2, 3}, -6}});  // 3
  append_snapshot(s, std::vector{with_buckets_and_keys(7)},
                  std::vector<store::pending_delta>{{{1, 10}, 5},
                                                    {{1, 10}, 5, store::granularity::hour, 3600}},
                  std::vector{request("p-key", {at(1, 10, 5, 3600, true)})});  // 10
  append_snapshot(s, std::vector{of_uniques(8)},
                  std::vector<store::pending_delta>{{{4, 1}, 2}}, {},
                  std::vector{entry(4, "d", 100000)});  // 13
  append_increments(s, incs{{4, 1, 3}});                // 1
  return s;
}

std::string file_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// What the segments of `dir` (in name order, as recovery reads them) replay to after
// each record, and the kinds they hold.
std::string replayed(const fs::path& dir, std::set<int>& kinds) {
  std::vector<fs::path> segments;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().starts_with("wal-")) segments.push_back(e.path());
  std::sort(segments.begin(), segments.end());
  replay_state state(replay_buckets());
  std::string out;
  int n = 0;
  for (const auto& path : segments) {
    const std::string data = file_text(path);
    const auto scan = wal::scan_segment(data, [&](std::string_view payload) {
      const bool ok = state.apply(payload);
      if (!payload.empty()) kinds.insert(static_cast<unsigned char>(payload[0]));
      out += "# " + path.filename().string() + " record " + std::to_string(++n) + " kind " +
             (payload.empty() ? "none" : std::to_string(static_cast<unsigned char>(payload[0]))) +
             (ok ? "" : " MALFORMED") + "\n" + test::dump(state);
      return ok;
    });
    out += "# " + path.filename().string() + ": " +
           (scan.outcome == scan_result::status::ok ? "ok" : "NOT OK: " + scan.problem) + "\n";
  }
  return out;
}

// The format this build writes, and where its golden logs are.
constexpr const char* this_format = "tagged-14";
// The format before it, whose log holds the same content in kinds 1-13.
constexpr const char* format_before = "kinds-1-13";

// This build writes its format's golden log byte for byte. With SLOTTED_WAL_GOLDEN_OUT
// set, it writes the log and its text there instead (tests/data/wal-golden/README.md):
// the one way golden logs are made.
TEST(WalGolden, ThisBuildWritesItsFormatsGoldenLog) {
  const auto log = every_kind();
  if (const char* to = std::getenv("SLOTTED_WAL_GOLDEN_OUT")) {
    const fs::path dir = fs::path(to) / "every-kind";
    fs::create_directories(dir);
    std::ofstream(dir / "wal-0000000000000001.log", std::ios::binary) << log;
    std::set<int> kinds;
    std::ofstream(dir / "expected.txt", std::ios::binary) << replayed(dir, kinds);
    EXPECT_EQ(kinds, std::set<int>{static_cast<int>(record_kind::tagged)});
    return;
  }
  const fs::path golden = fs::path(SLOTTED_SOURCE_DIR) / "tests/data/wal-golden" / this_format /
                          "every-kind" / "wal-0000000000000001.log";
  EXPECT_TRUE(file_text(golden) == log)
      << golden << " is not what this build writes: a format change adds a directory";
}

TEST(WalGolden, TheLogsOfTheBuildsBeforeReplayToTheirText) {
  const fs::path root = fs::path(SLOTTED_SOURCE_DIR) / "tests/data/wal-golden";
  std::set<int> kinds;
  int logs = 0;
  for (const auto& build : fs::directory_iterator(root)) {
    if (!build.is_directory()) continue;
    for (const auto& log : fs::directory_iterator(build.path())) {
      SCOPED_TRACE(log.path().string());
      ASSERT_TRUE(fs::exists(log.path() / "expected.txt"));
      EXPECT_EQ(replayed(log.path(), kinds), file_text(log.path() / "expected.txt"));
      ++logs;
    }
  }
  EXPECT_GT(logs, 0);
  for (int k = 1; k <= 14; ++k) EXPECT_TRUE(kinds.count(k)) << "no golden record of kind " << k;
}

// The same content written in kinds 1-13 and in the tagged kind replays to the same state
// after every record: the two texts differ only in the kind each record names.
TEST(WalGolden, TheTaggedKindHoldsWhatKinds1To13Held) {
  const fs::path root = fs::path(SLOTTED_SOURCE_DIR) / "tests/data/wal-golden";
  const auto without_kinds = [](std::string text) {
    std::string out;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (line.starts_with("# ")) line = line.substr(0, line.find(" kind "));
      out += line + "\n";
    }
    return out;
  };
  const auto before = file_text(root / format_before / "every-kind" / "expected.txt");
  const auto now = file_text(root / this_format / "every-kind" / "expected.txt");
  ASSERT_FALSE(before.empty());
  EXPECT_EQ(without_kinds(before), without_kinds(now));
}

}  // namespace golden_wal
}  // namespace slotted::durable
