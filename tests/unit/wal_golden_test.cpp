// Golden WAL logs (tests/data/wal-golden/<commit>/): segments written by the build named
// by their directory, with the replay of each record by that build as text (expected.txt,
// tests/support/replay_dump.hpp, after every record). Every build must replay every one
// of them to the same text: a log written before an upgrade is read after it. The writer
// below is run by hand, once per format change (tests/data/wal-golden/README.md); the
// files are never edited.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "durable/record.hpp"
#include "support/replay_dump.hpp"

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
  ingest::increment i{type, id, delta};
  i.at = t;
  i.at_given = given;
  return i;
}

idempotency::keyed_request request(std::string key, std::vector<ingest::increment> increments) {
  idempotency::keyed_request r;
  r.key = std::move(key);
  r.hash = idempotency::hash_of(increments);
  r.received_ms = 1700000000123;
  r.increments = std::move(increments);
  return r;
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
  b.keyed.push_back(request("in-a-batch", {at(1, 10, 7, 3600, true)}));
  return b;
}

store::flush_batch of_uniques(std::uint64_t seq) {
  store::flush_batch b;
  b.run_id = 41;
  b.seq = seq;
  b.uniques = {entry(1, "a", 90000), entry(1, "b", 90001), entry(2, "a", 200000)};
  b.unique_slot = 7;
  return b;
}

// One segment holding every record kind this build writes, in an order where each
// record changes what the replay holds.
std::string every_kind() {
  std::string s(segment_magic);
  using incs = std::vector<ingest::increment>;
  append_increments(s, incs{{1, 10, 5}, {2, 18446744073709551615ull, -7}});  // 1
  append_keyed(s, request("k-1", {{1, 10, 2}, {3, 4, -1}}));                 // 5
  append_increments(s, incs{at(1, 10, 5, 3600, true), at(2, 3, 1, 0, false),
                            at(1, 11, -1, 90000, true)});  // 7
  append_keyed(s, request(std::string(128, 'x'),
                          {at(1, 10, 2, 3600, true), at(3, 4, -1, 7200, false)}));  // 8
  const std::vector<store::unique_entry> clients{entry(9, "client-a", 90000)};
  append_increments(s, incs{{1, 12, 1}}, clients);                           // 11
  append_reset(s, {2, 18446744073709551615ull});                             // 6
  append_batches(s, std::vector{plain(1), with_buckets_and_keys(2)});        // 9
  append_batches(s, std::vector{plain(3)});                                  // 2
  append_increments(s, incs{}, std::vector{entry(3, "c", 100000)});          // 11
  append_batches(s, std::vector{plain(4), of_uniques(5)});                   // 12
  append_committed(s);                                                       // 4
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
    std::ifstream in(path, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    const std::string data = bytes.str();
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

// Run by hand with SLOTTED_WAL_GOLDEN_OUT=<dir> and --gtest_also_run_disabled_tests
// (tests/data/wal-golden/README.md).
TEST(WalGolden, DISABLED_WriteTheGoldenLogs) {
  const char* to = std::getenv("SLOTTED_WAL_GOLDEN_OUT");
  if (to == nullptr) GTEST_SKIP() << "SLOTTED_WAL_GOLDEN_OUT is not set";
  const fs::path dir = fs::path(to) / "every-kind";
  fs::create_directories(dir);
  std::ofstream(dir / "wal-0000000000000001.log", std::ios::binary) << every_kind();
  std::set<int> kinds;
  const auto text = replayed(dir, kinds);
  std::ofstream(dir / "expected.txt", std::ios::binary) << text;
  EXPECT_EQ(kinds.size(), 13u);
}

TEST(WalGolden, TheLogsOfTheBuildsBeforeReplayToTheirText) {
  const fs::path root = fs::path(SLOTTED_SOURCE_DIR) / "tests/data/wal-golden";
  std::set<int> kinds;
  int logs = 0;
  for (const auto& build : fs::directory_iterator(root)) {
    if (!build.is_directory()) continue;
    for (const auto& log : fs::directory_iterator(build.path())) {
      SCOPED_TRACE(log.path().string());
      std::ifstream in(log.path() / "expected.txt", std::ios::binary);
      ASSERT_TRUE(in) << "no expected.txt";
      std::stringstream expected;
      expected << in.rdbuf();
      EXPECT_EQ(replayed(log.path(), kinds), expected.str());
      ++logs;
    }
  }
  EXPECT_GT(logs, 0);
  for (int k = 1; k <= 13; ++k) EXPECT_TRUE(kinds.count(k)) << "no golden record of kind " << k;
}

}  // namespace golden_wal
}  // namespace slotted::durable
