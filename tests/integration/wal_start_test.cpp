// Issue 40: what a start does with its WAL directory. A full disk is run through (503
// until there is room); any other error of the start's snapshot fails the start; and a
// start without a WAL says when the state directory holds a WAL it does not replay.

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "integration/wal_fixture.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;

// Issue 40: with the WAL on by default in /var/lib, a full /var must not keep the daemon
// from starting: it starts, refuses increments with 503 while nothing fits, and takes
// them again once there is room. A real full filesystem: a small tmpfs (root only).
TEST_F(Wal, ADaemonStartedOnAFullDiskRefusesIncrementsUntilThereIsRoom) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
  const std::string mnt = root_ + "/small";
  fs::create_directories(mnt);
  ASSERT_EQ(std::system(("mount -t tmpfs -o size=64k tmpfs " + mnt).c_str()), 0);
  struct unmount {
    std::string at;
    ~unmount() { static_cast<void>(std::system(("umount -l " + at).c_str())); }
  } unmount_at_end{mnt};
  wal_dir_ = mnt + "/wal";
  fs::create_directories(wal_dir_);
  const auto fill_disk = [&] {
    std::ofstream fill(mnt + "/fill", std::ios::binary);
    const std::string block(4096, 'x');
    for (int i = 0; i < 64 && fill; ++i) fill << block << std::flush;
  };
  fill_disk();
  daemon_process daemon(yaml("never", "1h"));
  http_client c(daemon.port());
  const auto r = c.post_json("/v1/increments", R"({"record_type": 1, "record_id": 7, "delta": 3})");
  EXPECT_EQ(r.status, 503u) << r.body;
  EXPECT_TRUE(r.headers.count("retry-after"));
  fs::remove(mnt + "/fill");
  ASSERT_TRUE(eventually(
      [&] {
        return c.post_json("/v1/increments", R"({"record_type": 1, "record_id": 7, "delta": 4})")
                   .status == 202u;
      },
      20s));
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  EXPECT_EQ(db_total(7), 4);
  EXPECT_NE(daemon.log().find("the WAL's disk is full"), std::string::npos) << daemon.log();
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(30s), 0);

  // A restart on a full disk after a clean stop (its last segment left behind, holding
  // nothing to keep) runs too, and the total stays exact.
  fill_disk();
  ASSERT_FALSE(fs::is_empty(wal_dir_));
  daemon_process again(yaml("never", "1h"));
  http_client c2(again.port());
  EXPECT_EQ(
      c2.post_json("/v1/increments", R"({"record_type": 1, "record_id": 7, "delta": 3})").status,
      503u);
  fs::remove(mnt + "/fill");
  ASSERT_TRUE(eventually(
      [&] {
        return c2.post_json("/v1/increments", R"({"record_type": 1, "record_id": 7, "delta": 5})")
                   .status == 202u;
      },
      20s));
  ASSERT_EQ(c2.request("POST", "/v1/flush").status, 200u);
  EXPECT_EQ(db_total(7), 9);
  again.signal(SIGTERM);
  EXPECT_EQ(again.wait(30s), 0);
}

TEST_F(Wal, DirectoryIsCreatedPrivate) {
  daemon_process daemon(yaml());
  const auto perms = fs::status(wal_dir_).permissions();
  EXPECT_EQ(perms & fs::perms::all, fs::perms::owner_all);
}

// Only ENOSPC and EDQUOT are a full disk. Here the start's snapshot cannot create its
// segment because the directory is immutable (EPERM, even for root), past the checks
// before it (the directory exists, its lock file is there and writable): the start
// fails, naming the directory and the error, rather than running and answering 503.
TEST_F(Wal, AStartWhoseSnapshotFailsForAnotherReasonThanRoomFails) {
  if (::geteuid() != 0) GTEST_SKIP() << "chattr +i needs root";
  fs::create_directories(wal_dir_);
  std::ofstream(wal_dir_ + "/lock") << "1\n";
  if (std::system(("chattr +i " + wal_dir_ + " 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "this file system or container does not take chattr +i";
  struct mutable_again {
    std::string dir;
    ~mutable_again() { static_cast<void>(std::system(("chattr -i " + dir).c_str())); }
  } mutable_at_end{wal_dir_};
  std::string out;
  EXPECT_EQ(run_binary(yaml("never", "1h"), "", out), 1) << out;
  EXPECT_NE(out.find("cannot write to the WAL directory " + wal_dir_), std::string::npos) << out;
  EXPECT_NE(out.find("Operation not permitted"), std::string::npos) << out;
  EXPECT_EQ(out.find("listening on"), std::string::npos) << out;
}

// A WAL left in the state directory by a SIGKILL is not replayed by a start with
// wal.dir: "" (the WAL turned off since): that start says so, naming the directory and
// how to replay it. After a clean stop there is nothing to say.
TEST_F(Wal, AStartWithoutAWalSaysWhenTheStateDirectoryHoldsOneToReplay) {
  ::setenv("SLOTTED_TEST_STATE_DIRECTORY", wal_dir_.c_str(), 1);
  struct unset {
    ~unset() { ::unsetenv("SLOTTED_TEST_STATE_DIRECTORY"); }
  } unset_at_end;
  const std::string stranded = "holds WAL segments with increments not yet flushed";
  const auto run_without_wal = [&] {
    daemon_process off(yaml_with_wal("{dir: \"\"}", "1h"));
    off.signal(SIGTERM);
    EXPECT_EQ(off.wait(30s), 0);
    return off.log();
  };
  const auto post = [](const daemon_process& d) {
    return http_client(d.port())
        .post_json("/v1/increments", R"({"record_type": 1, "record_id": 5, "delta": 2})")
        .status;
  };

  {
    daemon_process clean(yaml("never", "1h"));
    ASSERT_EQ(post(clean), 202u);
    clean.signal(SIGTERM);
    ASSERT_EQ(clean.wait(30s), 0);
  }
  ASSERT_FALSE(fs::is_empty(wal_dir_));
  const std::string after_clean_stop = run_without_wal();
  EXPECT_EQ(after_clean_stop.find(stranded), std::string::npos) << after_clean_stop;

  {
    daemon_process killed(yaml("never", "1h"));
    ASSERT_EQ(post(killed), 202u);
    killed.signal(SIGKILL);
    ASSERT_EQ(killed.wait(30s), -SIGKILL);
  }
  const std::string after_kill = run_without_wal();
  EXPECT_NE(after_kill.find("the state directory " + wal_dir_ + " " + stranded), std::string::npos)
      << after_kill;
  EXPECT_NE(after_kill.find("--wal-salvage"), std::string::npos) << after_kill;
}

}  // namespace
}  // namespace slotted::test
