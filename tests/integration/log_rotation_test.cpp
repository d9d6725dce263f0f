// Access logs followed through rotations by the files' identity (docs/guarantees.md,
// Counting from access logs): rotations while the reader is behind or the database is
// out, under every naming scheme, and a renamed instance. Real daemon, real MariaDB,
// lines appended as nginx writes them.
#include <sys/stat.h>

#include <thread>

#include "log_fixture.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class LogRotation : public log_fixture {
 protected:
  // The inode of `path`.
  static std::uint64_t inode(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return 0;
    return static_cast<std::uint64_t>(st.st_ino);
  }
  std::int64_t committed_inode() const {
    return shared_mariadb().query_int(
        db_, "SELECT COALESCE(MAX(file_ino), 0) FROM slotted_counterd_log_positions");
  }
  // Transactions waiting for a lock (the reader's commit behind the test's lock).
  std::int64_t lock_waits() const {
    return shared_mariadb().query_int(
        db_, "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'");
  }
};

// Issue 39, case 1: two rotations while the reader is behind (here: its commit waits on
// a lock the test holds, as behind a backlog or a slow database). The file between them
// (B, renamed PATH.1 by the second rotation, never seen at PATH by the reader) is read
// after the first one and before the new PATH, not skipped.
TEST_F(LogRotation, TwoRotationsWhileTheReaderIsBehindSkipNoFile) {
  auto d = std::make_unique<daemon_process>(yaml());
  counted(1, log_);
  ASSERT_TRUE(exact());
  const auto a = inode(log_);
  auto holder = shared_mariadb().connect(db_);
  holder.execute("START TRANSACTION");
  holder.query("SELECT * FROM slotted_counterd_log_positions FOR UPDATE");
  counted(2, log_);  // read by a pass whose commit now waits
  ASSERT_TRUE(eventually([&] { return lock_waits() >= 1; }, 20s));
  fs::rename(log_, log_ + ".1");  // A
  counted(3, log_);               // B
  counted(3, log_ + ".1");        // A, before the web server reopened its log
  fs::rename(log_ + ".1", log_ + ".2");
  fs::rename(log_, log_ + ".1");
  counted(4, log_);  // C
  holder.execute("ROLLBACK");
  EXPECT_TRUE(exact());
  EXPECT_EQ(committed_inode(), static_cast<std::int64_t>(inode(log_)));
  EXPECT_NE(a, inode(log_));
  EXPECT_EQ(events(*d, "file_lost"), 0);
  stop(d);
}

// Issue 39, case 3: a database outage that spans a rotation under a name the reader does
// not look for (dateext, RHEL's default): the open file is kept across the failed
// commits and read to its end, then the new PATH.
TEST_F(LogRotation, AnOutageSpanningADateextRotationLosesNothing) {
  auto d = std::make_unique<daemon_process>(yaml());
  counted(1, log_);
  ASSERT_TRUE(exact());
  auto admin = shared_mariadb().connect(db_);
  admin.execute("RENAME TABLE slotted_counters TO slotted_counters_away");
  counted(2, log_);
  ASSERT_TRUE(eventually([&] { return events(*d, "commit_error") >= 1; }, 20s));
  const std::string rotated = log_ + "-20261201";
  fs::rename(log_, rotated);
  counted(3, rotated);  // before the web server reopened its log
  counted(4, log_);
  const double errors = events(*d, "commit_error");
  // Passes after the rotation failed too (each one used to reopen the file by name).
  ASSERT_TRUE(eventually([&] { return events(*d, "commit_error") >= errors + 2; }, 30s));
  admin.execute("RENAME TABLE slotted_counters_away TO slotted_counters");
  EXPECT_TRUE(exact());
  EXPECT_EQ(events(*d, "file_lost"), 0);
  stop(d);
}

// Issue 39, case 4: the same files read under another instance_id (a renamed host, a
// new container) are not read again from byte 0. The daemon refuses to start, naming
// both instance_ids; started again under the old name, it goes on where it was.
TEST_F(LogRotation, ARenamedInstanceDoesNotCountTheLogAgain) {
  auto d = std::make_unique<daemon_process>(yaml("", "instance_id: host-a\n"));
  for (std::uint64_t id = 1; id <= 5; ++id) counted(id, log_);
  ASSERT_TRUE(exact());
  stop(d);
  counted(6, log_);
  std::string refused;
  try {
    d = std::make_unique<daemon_process>(yaml("", "instance_id: host-b\n"));
  } catch (const std::runtime_error& e) {
    refused = e.what();
  }
  if (d) {
    // Started: it must not count the file again.
    EXPECT_FALSE(eventually([&] { return counts().at(1) > 1; }, 3s))
        << "host-b read the file again from byte 0";
    stop(d);
  }
  EXPECT_NE(refused.find("host-b"), std::string::npos) << refused;
  EXPECT_NE(refused.find("host-a"), std::string::npos) << refused;
  d = std::make_unique<daemon_process>(yaml("", "instance_id: host-a\n"));
  EXPECT_TRUE(exact());
  stop(d);
}

}  // namespace
}  // namespace slotted::test
