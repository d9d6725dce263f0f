// Access logs followed through rotations by the files' identity (docs/guarantees.md,
// Counting from access logs): rotations while the reader is behind or the database is
// out, under every naming scheme, and a renamed instance. Real daemon, real MariaDB,
// lines appended as nginx writes them.
#include <sys/stat.h>

#include <fstream>
#include <thread>

#include "log_fixture.hpp"
#include "logs/log_ingest.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class LogRotation : public log_fixture {
 protected:
  std::int64_t committed_inode() const {
    return shared_mariadb().query_int(
        db_, "SELECT COALESCE(MAX(file_ino), 0) FROM slotted_counterd_log_positions");
  }
  // The reader's commit waiting behind the test's lock on its position row (its locking
  // read of the row, shown while it waits).
  std::int64_t lock_waits() const {
    return shared_mariadb().query_int(
        db_,
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND "
        "DB = DATABASE() AND INFO LIKE '%slotted_counterd_log_positions%FOR UPDATE'");
  }
};

// Issue 39, case 1: two rotations while the reader is behind (here: its commit waits on
// a lock the test holds, as behind a backlog or a slow database). The file between them
// (B, renamed PATH.1 by the second rotation, never seen at PATH by the reader) is read
// after the first one and before the new PATH, not skipped.
TEST_F(LogRotation, TwoRotationsWhileTheReaderIsBehindSkipNoFile) {
  auto d = std::make_unique<daemon_process>(yaml("    rotate_wait: 200ms\n"));
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
// not look for (dateext, RHEL's default, with the source left at `rotation: numbered`):
// the open file is kept across the failed commits and read to its end, then the new PATH.
TEST_F(LogRotation, AnOutageSpanningADateextRotationLosesNothing) {
  auto d = std::make_unique<daemon_process>(yaml("    rotate_wait: 200ms\n"));
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

// Another instance's position at byte 0 of the file it switched to, rotated since (to
// PATH.1, with a line that instance never counted): a new instance_id with no position
// would read PATH alone from its start and never PATH.1, losing that line. Refused as a
// renamed instance is (the check skipped every position at byte 0); the old name, started
// again, reads on and counts every line once. The position names its file by its first
// bytes (the web server had begun a line when it was taken): one taken while the file was
// empty names it by its inode alone, and does not refuse (a file made since may have it).
TEST_F(LogRotation, AnotherInstanceAtByteZeroOfARotatedFileIsRefused) {
  const std::string source = "    rotate_wait: 200ms\n";
  auto d = std::make_unique<daemon_process>(yaml(source, "instance_id: host-a\n"));
  counted(1, log_);
  ASSERT_TRUE(exact());
  fs::rename(log_, log_ + ".1");
  // The web server reopened its log and is writing a line: no newline yet, so host-a's
  // position stays at byte 0 of it, named by those first bytes.
  const std::string line = log_line(2);
  nginx_append(log_, line.substr(0, 40));
  // Named by those 40 bytes, not only by its inode (a pass may have opened it empty).
  ASSERT_TRUE(eventually(
      [&] {
        return committed_inode() == static_cast<std::int64_t>(inode(log_)) &&
               shared_mariadb().query_int(
                   db_, "SELECT COALESCE(MAX(head_len), 0) FROM slotted_counterd_log_positions") ==
                   40;
      },
      20s));
  stop(d);
  nginx_append(log_, line.substr(40));  // the line ends after host-a stopped
  ++expected_[2];
  fs::rename(log_ + ".1", log_ + ".2");
  fs::rename(log_, log_ + ".1");
  counted(3, log_);
  std::string refused;
  try {
    d = std::make_unique<daemon_process>(yaml(source, "instance_id: host-b\n"));
  } catch (const std::runtime_error& e) {
    refused = e.what();
  }
  if (d) stop(d);
  EXPECT_NE(refused.find("host-b"), std::string::npos) << refused;
  EXPECT_NE(refused.find("host-a"), std::string::npos) << refused;
  d = std::make_unique<daemon_process>(yaml(source, "instance_id: host-a\n"));
  EXPECT_TRUE(exact());
  EXPECT_EQ(events(*d, "file_lost"), 0);
  stop(d);
}

// The same file read by another instance through another path (a symlink to the log
// directory; a container's bind mount is alike): refused as a renamed instance is, by
// the file's device and inode, not its path's text.
TEST_F(LogRotation, AnotherInstanceThroughASymlinkIsRefused) {
  auto d = std::make_unique<daemon_process>(yaml("", "instance_id: host-a\n"));
  for (std::uint64_t id = 1; id <= 3; ++id) counted(id, log_);
  ASSERT_TRUE(exact());
  stop(d);
  const std::string link = dir_ + "-link";
  fs::create_directory_symlink(dir_, link);
  std::string config = yaml("", "instance_id: host-b\n");
  config.replace(config.find("path: " + log_), 6 + log_.size(), "path: " + link + "/access.log");
  std::string refused;
  try {
    d = std::make_unique<daemon_process>(config);
  } catch (const std::runtime_error& e) {
    refused = e.what();
  }
  if (d) {
    EXPECT_FALSE(eventually([&] { return counts().at(1) > 1; }, 3s))
        << "host-b read the file again from byte 0 through " << link;
    stop(d);
  }
  fs::remove(link);
  EXPECT_NE(refused.find("host-a"), std::string::npos) << refused;
  EXPECT_NE(refused.find("host-b"), std::string::npos) << refused;
  EXPECT_TRUE(exact());
}

// Issue 39, case 2: the rotation window is time, not passes. With a pass every 50 ms, a
// line the web server writes to the renamed file 600 ms after the rename (a postrotate
// through invoke-rc.d) is still counted.
TEST_F(LogRotation, TheRotationWindowIsTimeNotPasses) {
  auto d = std::make_unique<daemon_process>(yaml("    rotate_wait: 2s\n"));
  counted(1, log_);
  ASSERT_TRUE(exact());
  fs::rename(log_, log_ + ".1");
  counted(2, log_);
  std::this_thread::sleep_for(600ms);  // the web server reopens its log late (the scenario)
  counted(3, log_ + ".1");
  EXPECT_TRUE(exact());
  stop(d);
}

// Issue 39, case 5: an I/O error is an error, never a cut. Each read at offset 0 of the
// log in a pass (its identity, its first bytes) fails once in turn (an NFS or FUSE read
// error, by an LD_PRELOAD library): the pass fails and is read again, nothing is counted
// twice and no cut is reported.
TEST_F(LogRotation, AnIoErrorIsNeverTakenForACut) {
  const std::string control = dir_ + "/fault";
  auto d = with_io_fault(control, yaml());
  counted(1, log_);
  counted(2, log_);
  ASSERT_TRUE(exact());
  for (int skip = 0; skip < 6; ++skip) {
    fs::remove(control + ".fired");
    std::ofstream(control + ".new") << skip + 1 << " " << inode(log_) << " " << skip << " 1\n";
    fs::rename(control + ".new", control);
    counted(10 + static_cast<std::uint64_t>(skip), log_);
    ASSERT_TRUE(eventually([&] { return fs::exists(control + ".fired"); }, 20s)) << skip;
    ASSERT_TRUE(exact()) << "with read " << skip + 1 << " at offset 0 failing";
  }
  fs::remove(control);
  EXPECT_GE(events(*d, "read_error"), 1);
  EXPECT_EQ(events(*d, "truncated"), 0);
  stop(d);
}

// Issue 39, case 6: a line longer than a whole batch (64 MiB) is committed inside it; the
// rest of it is skipped to its newline also after a failed pass and after a restart, not
// counted as a line of its own (here its last bytes are a valid line).
TEST_F(LogRotation, AnOverLongLineIsSkippedWholeAcrossAFailureAndARestart) {
  const std::size_t batch = logs::ingest_settings{}.max_batch_bytes;
  const std::string valid = log_line(9);
  const auto offset = [&] {
    return shared_mariadb().query_int(db_, "SELECT `offset` FROM slotted_counterd_log_positions");
  };
  // A batch of garbage, then a valid line's first byte: committed inside the line.
  const auto start_long_line = [&] {
    const auto inside = static_cast<std::int64_t>(fs::file_size(log_) + batch);
    nginx_append(log_, std::string(batch, 'x') + valid.substr(0, 1));
    return eventually([&] { return offset() == inside; }, 60s);
  };
  auto d = std::make_unique<daemon_process>(yaml());
  counted(1, log_);
  ASSERT_TRUE(exact());
  // Failed passes: the rest arrives while the positions table is away.
  ASSERT_TRUE(start_long_line());
  auto admin = shared_mariadb().connect(db_);
  admin.execute("RENAME TABLE slotted_counterd_log_positions TO positions_away");
  nginx_append(log_, valid.substr(1));
  ASSERT_TRUE(eventually([&] { return events(*d, "commit_error") >= 2; }, 20s));
  admin.execute("RENAME TABLE positions_away TO slotted_counterd_log_positions");
  counted(2, log_);
  EXPECT_TRUE(exact());
  // A restart: the rest arrives while the daemon is stopped.
  ASSERT_TRUE(start_long_line());
  stop(d);
  nginx_append(log_, valid.substr(1));
  d = std::make_unique<daemon_process>(yaml());
  counted(3, log_);
  EXPECT_TRUE(exact());
  EXPECT_EQ(metric_value(
                http_client(d->port()).get("/metrics").body,
                "slotted_counterd_log_lines_total{outcome=\"too_long\",source=\"" + log_ + "\"}"),
            1);
  stop(d);
}

}  // namespace
}  // namespace slotted::test
