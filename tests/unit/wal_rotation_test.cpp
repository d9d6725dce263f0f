// A WAL segment's rotation is durable (issue 44, item 2): a failed fsync of the WAL
// directory when a segment is created is a failed sync. The segment is not used, and
// nothing is acknowledged until a sync of the directory succeeds.

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "durable/committer.hpp"
#include "durable/record.hpp"
#include "durable/recovery.hpp"
#include "metrics/metrics.hpp"
#include "support/temp_dir.hpp"
#include "support/wal_stubs.hpp"

namespace slotted::durable {
namespace {

using test::increments_record;
using test::queue_stub;

namespace fs = std::filesystem;
using clock = std::chrono::steady_clock;

class WalRotation : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = slotted::test::make_temp_dir("wal-rotation");
    cfg_.dir = root_ + "/wal";
  }
  void TearDown() override { fs::remove_all(root_); }

  // The segment files in the WAL directory, by name.
  std::set<std::string> segments() const {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(cfg_.dir)) {
      const auto name = e.path().filename().string();
      if (name.starts_with("wal-")) out.insert(name);
    }
    return out;
  }

  double directory_failures() const { return metrics_.wal_directory_sync_failures.Value(); }

  std::string root_;
  config::wal_config cfg_;
  metrics::registry metrics_;
};

std::vector<store::flush_batch> one_batch(std::uint64_t seq) {
  std::vector<store::flush_batch> batches(1);
  batches[0].run_id = 7;
  batches[0].seq = seq;
  batches[0].rows.push_back({1, 99, 0, 1});
  return batches;
}

// A log closed with records not yet synced syncs them in its destructor, and that last
// sync is in the daemon's metrics like any other: the observer outlives the log.
TEST_F(WalRotation, TheLastSyncOfALogClosedUnsyncedIsInItsMetrics) {
  const auto syncs = [&] {
    return metrics_.wal_fsync_duration_seconds.Collect().histogram.sample_count;
  };
  std::uint64_t before = 0;
  {
    durable::daemon_log owner(cfg_, metrics_);
    recover(owner.log());
    ASSERT_TRUE(owner.log().append(increments_record(1, 2), false));
    ASSERT_TRUE(owner.log().unsynced());
    before = syncs();
  }
  EXPECT_EQ(syncs(), before + 1);
}

// The WAL alone: a rotation whose directory sync fails leaves no new segment and fails
// like a failed data sync; appends are refused while the directory cannot be synced,
// and go on once it can, in the segment that was current.
TEST_F(WalRotation, AFailedDirectorySyncLeavesTheNewSegmentUnusedAndRefusesAppends) {
  {
    durable::daemon_log log_owner(cfg_, metrics_);
    wal::write_ahead_log& log = log_owner.log();
    recover(log);
    ASSERT_TRUE(durable::log_snapshot(log, {}, {}));
    ASSERT_TRUE(log.append(increments_record(1, 2), true));
    const auto before = segments();

    bool failing = true;
    log.set_fault_for_test(
        [&](std::string_view call) { return failing && call == "directory fsync"; });
    auto batches = one_batch(1);
    const auto logged = durable::log_batches(log, batches);
    ASSERT_FALSE(logged) << "a segment whose name may not survive a power cut was used";
    EXPECT_EQ(logged.error(), errc::wal_sync_failed);
    EXPECT_EQ(logged.failed().detail, std::string("sync directory: ") + std::strerror(EIO));
    EXPECT_EQ(segments(), before) << "the new segment must be removed, not left or used";
    EXPECT_EQ(directory_failures(), 1);

    // Until the directory syncs, nothing is acknowledged, in any mode.
    for (const bool synced : {true, false}) {
      const auto refused = log.append(increments_record(2, 5), synced);
      ASSERT_FALSE(refused);
      EXPECT_EQ(refused.error(), errc::wal_sync_failed);
    }
    EXPECT_EQ(directory_failures(), 3);

    failing = false;
    ASSERT_TRUE(log.append(increments_record(3, 7), false));
    EXPECT_EQ(segments(), before) << "appended to the segment that was current";
    log.set_fault_for_test({});
  }
  // Replayed: what was acknowledged, nothing refused, no batch.
  durable::daemon_log log_owner(cfg_, metrics_);
  wal::write_ahead_log& log = log_owner.log();
  const auto r = recover(log);
  std::map<std::uint64_t, std::int64_t> by_id;
  for (const auto& d : r.deltas) by_id[d.key.record_id] += d.delta;
  EXPECT_EQ(by_id, (std::map<std::uint64_t, std::int64_t>{{1, 2}, {3, 7}}));
  EXPECT_TRUE(r.batches.empty());
}

// Through the committer: a take whose rotation cannot sync the directory fails (its
// content stays pending), ingest answers log_unsynced (503) until a sync succeeds, then
// everything acknowledged is taken once.
TEST_F(WalRotation, IngestIsRefusedUntilTheDirectorySyncsAgain) {
  cfg_.fsync = config::fsync_mode::never;  // refused even where appends are not synced
  std::atomic<bool> failing{false};
  store::pending_store store(4);
  durable::daemon_log log_owner(cfg_, metrics_);
  wal::write_ahead_log& log = log_owner.log();
  log.set_fault_for_test(
      [&](std::string_view call) { return call == "directory fsync" && failing.load(); });
  recover(log);
  committer c(log_owner, store, 1000);
  queue_stub queue;
  c.start(queue);
  const auto submit = [&](std::uint64_t id) {
    std::promise<commit_result> done;
    c.submit({{1, id, 1}}, nullptr, [&](commit_result r) { done.set_value(r); });
    return done.get_future().get();
  };
  std::vector<store::flush_batch> published;
  const auto take = [&] {
    published.clear();
    return c.take(
        [&](std::vector<store::pending_delta>&& deltas, clock::time_point) {
          auto b = one_batch(1);
          b[0].rows.clear();
          for (const auto& d : deltas)
            b[0].rows.push_back({d.key.record_type, d.key.record_id, 0, d.delta});
          return b;
        },
        [&](std::vector<store::flush_batch>&& b) { published = std::move(b); });
  };

  EXPECT_EQ(submit(1), commit_result::applied);
  const auto before = segments();
  failing = true;
  EXPECT_FALSE(take()) << "the batches were logged in a segment that may not survive";
  EXPECT_TRUE(published.empty());
  EXPECT_EQ(store.pending({1, 1}), 1) << "what the take could not log stays pending";
  EXPECT_EQ(segments(), before);
  EXPECT_EQ(submit(2), commit_result::log_unsynced);
  EXPECT_EQ(store.pending({1, 2}), 0);
  EXPECT_GE(directory_failures(), 2);

  failing = false;
  EXPECT_EQ(submit(3), commit_result::applied);
  ASSERT_TRUE(take());
  ASSERT_EQ(published.size(), 1u);
  std::map<std::uint64_t, std::int64_t> taken;
  for (const auto& row : published[0].rows) taken[row.record_id] += row.delta;
  EXPECT_EQ(taken, (std::map<std::uint64_t, std::int64_t>{{1, 1}, {3, 1}}));
  c.stop();
  log.set_fault_for_test({});
}

// Issue 40: a start whose snapshot cannot be written (a full disk: no room for a new
// segment) on an empty log leaves the daemon running with no segment open;
// appends are refused until one can be opened, then taken, and replayed after a restart.
TEST_F(WalRotation, AStartWithoutASegmentOpensOneAtTheFirstAppendThatFits) {
  cfg_.fsync = config::fsync_mode::never;
  std::atomic<bool> failing{true};
  {
    store::pending_store store(4);
    durable::daemon_log log_owner(cfg_, metrics_);
    wal::write_ahead_log& log = log_owner.log();
    log.set_fault_for_test(
        [&](std::string_view call) { return call == "create segment" && failing.load(); });
    recover(log);
    committer c(log_owner, store, 1000);
    queue_stub queue;
    ASSERT_NO_THROW(c.start(queue, false));
    EXPECT_TRUE(segments().empty());
    const auto submit = [&](std::uint64_t id) {
      std::promise<commit_result> done;
      c.submit({{1, id, 1}}, nullptr, [&](commit_result r) { done.set_value(r); });
      return done.get_future().get();
    };
    EXPECT_NE(submit(1), commit_result::applied);
    EXPECT_EQ(store.pending({1, 1}), 0);
    failing = false;
    EXPECT_EQ(submit(2), commit_result::applied);
    EXPECT_EQ(store.pending({1, 2}), 1);
    c.stop();
    log.set_fault_for_test({});
  }
  durable::daemon_log log_owner(cfg_, metrics_);
  wal::write_ahead_log& log = log_owner.log();
  const auto r = recover(log);
  std::map<std::uint64_t, std::int64_t> by_id;
  for (const auto& d : r.deltas) by_id[d.key.record_id] += d.delta;
  EXPECT_EQ(by_id, (std::map<std::uint64_t, std::int64_t>{{2, 1}}));
}

// Issue 40: only a full disk is run through at start. Any other error of the start's
// snapshot (here EIO from the directory's fsync) fails the start, naming the directory
// and the error.
TEST_F(WalRotation, AStartWhoseSnapshotFailsOtherThanForRoomFails) {
  store::pending_store store(4);
  durable::daemon_log log_owner(cfg_, metrics_);
  wal::write_ahead_log& log = log_owner.log();
  log.set_fault_for_test([](std::string_view call) { return call == "directory fsync"; });
  recover(log);
  committer c(log_owner, store, 1000);
  queue_stub queue;
  try {
    c.start(queue, false);
    ADD_FAILURE() << "started on a WAL directory that cannot be synced";
  } catch (const wal::wal_error& e) {
    EXPECT_NE(std::string(e.what()).find(cfg_.dir), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::strerror(EIO)), std::string::npos) << e.what();
  }
  log.set_fault_for_test({});
}

// The pid in the lock file: a short write sets no errno, so the warning says "short
// write", not whatever errno an earlier call left; and it is run through as a full disk.
TEST_F(WalRotation, AShortPidWriteSaysSo) {
  durable::daemon_log log_owner(cfg_, metrics_);
  wal::write_ahead_log& log = log_owner.log();
  log.set_fault_for_test([](std::string_view call) { return call == "pid write"; });
  ::testing::internal::CaptureStderr();
  errno = EACCES;  // stale: no call below sets it
  EXPECT_NO_THROW(recover(log));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cannot write the pid into " + cfg_.dir + "/lock: short write"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find(std::strerror(EACCES)), std::string::npos) << err;
  EXPECT_EQ(std::filesystem::file_size(cfg_.dir + "/lock"), 0u)
      << "half a pid left: a second start would name another process";
  log.set_fault_for_test({});
}

}  // namespace
}  // namespace slotted::durable
