// Access logs: an error reading a rotated file looked for by its name (its first bytes,
// a .gz decompressed) is an error, never "not this file" (docs/known-limits.md). Real
// daemon, real MariaDB; read errors by the io_fault library (tests/support/io_fault.cpp)
// or a damaged .gz.
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "log_fixture.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class LogRotationErrors : public log_fixture {
 protected:
  // The committed position as "inode offset".
  std::string committed() const {
    return std::to_string(shared_mariadb().query_int(
               db_, "SELECT COALESCE(MAX(file_ino), 0) FROM slotted_counterd_log_positions")) +
           " " +
           std::to_string(shared_mariadb().query_int(
               db_, "SELECT COALESCE(MAX(`offset`), 0) FROM slotted_counterd_log_positions"));
  }
  // Ids 1 to 3 counted and committed by a daemon, stopped; then id 4 appended to the log
  // while no daemon runs (counted, when `expect_4`), the log rotated to PATH.1.gz
  // (logrotate's compress), and id 5 written to a new PATH.
  void rotate_while_stopped(bool expect_4) {
    auto d = std::make_unique<daemon_process>(yaml());
    for (std::uint64_t id = 1; id <= 3; ++id) counted(id, log_);
    ASSERT_TRUE(exact());
    stop(d);
    if (expect_4) {
      counted(4, log_);
    } else {
      nginx_append(log_, log_line(4));
    }
    fs::rename(log_, log_ + ".1");
    ASSERT_EQ(std::system(("gzip " + log_ + ".1").c_str()), 0);
    ASSERT_TRUE(fs::exists(log_ + ".1.gz"));
    counted(5, log_);
  }
  // Ids 1 to 3 counted and committed by a daemon, stopped; id 4 appended, the log copied
  // to PATH.1.gz (gzip -c), the log itself (the committed inode) renamed to `moved_to`,
  // and id 5 written to a new PATH.
  void copy_then_move(const std::string& moved_to) {
    auto d = std::make_unique<daemon_process>(yaml());
    for (std::uint64_t id = 1; id <= 3; ++id) counted(id, log_);
    ASSERT_TRUE(exact());
    stop(d);
    counted(4, log_);
    ASSERT_EQ(std::system(("gzip -c " + log_ + " > " + log_ + ".1.gz").c_str()), 0);
    fs::rename(log_, moved_to);
    counted(5, log_);
  }
};

// A damaged .gz at `name` (gzip's header, then a deflate stream cut short: its first
// bytes cannot be decompressed), holding lines of no counted file.
void damaged_gz(const std::string& name) {
  const std::string plain = name.substr(0, name.size() - 3);
  std::ofstream(plain) << std::string(4096, 'x') << "\n";
  ASSERT_EQ(std::system(("gzip -f " + plain).c_str()), 0);
  fs::resize_file(name, 30);
}

// A damaged archive older than the committed file (PATH.2.gz) is not the committed file:
// the search goes past it, finds PATH.1.gz and reads it from the committed position.
TEST_F(LogRotationErrors, ADamagedOlderGzDoesNotStopTheSearchForTheCommittedFile) {
  ASSERT_NO_FATAL_FAILURE(rotate_while_stopped(true));
  ASSERT_NO_FATAL_FAILURE(damaged_gz(log_ + ".2.gz"));
  auto d = std::make_unique<daemon_process>(yaml());
  EXPECT_TRUE(exact()) << d->log();
  EXPECT_EQ(events(*d, "file_lost"), 0);
  stop(d);
}

// The committed file's inode given to a damaged archive, ordered before the compressed
// copy of the committed file: the search reads past it (the copy is the committed file
// by its first bytes), it does not stop the source. Directory order and inode reuse
// made ADamagedOlderGzDoesNotStopTheSearchForTheCommittedFile meet this now and then.
TEST_F(LogRotationErrors, TheCommittedInodeNowADamagedGzDoesNotStopTheSearch) {
  ASSERT_NO_FATAL_FAILURE(damaged_gz(dir_ + "/damaged.gz"));
  std::ifstream in(dir_ + "/damaged.gz", std::ios::binary);
  const std::string damaged((std::istreambuf_iterator<char>(in)), {});
  ASSERT_NO_FATAL_FAILURE(copy_then_move(log_ + ".2.gz"));
  // The committed inode, its bytes now a damaged .gz.
  std::ofstream(log_ + ".2.gz", std::ios::binary | std::ios::trunc) << damaged;
  auto d = std::make_unique<daemon_process>(yaml());
  EXPECT_TRUE(exact()) << d->log();
  EXPECT_EQ(events(*d, "file_lost"), 0);
  stop(d);
}

// The committed file, rotated to PATH.2, cannot be opened (EACCES: a file the daemon's
// user may not read, by the io_fault library), and its compressed copy PATH.1.gz lies
// after it: the search goes on to the copy (the committed file by its first bytes) and
// reads it from the committed position, instead of failing every pass on PATH.2.
TEST_F(LogRotationErrors, AnUnopenableFileOnTheCommittedInodeDoesNotStopTheSearch) {
  ASSERT_NO_FATAL_FAILURE(copy_then_move(log_ + ".2"));
  const std::string control = dir_ + "/fault";
  std::ofstream(control) << "open " << inode(log_ + ".2") << "\n";
  auto d = with_io_fault(control, yaml());
  EXPECT_TRUE(exact()) << d->log();
  EXPECT_EQ(events(*d, "file_lost"), 0);
  stop(d);
}

// As above, but the unopenable committed file holds a line written after the copy was
// taken (the web server had not reopened its log yet): the copy is not all of it, so the
// passes fail (read_error) rather than read the copy and never the line; once the file
// can be opened, it is read from the committed position.
TEST_F(LogRotationErrors, AnUnopenableCommittedFileLongerThanItsCopyIsWaitedFor) {
  ASSERT_NO_FATAL_FAILURE(copy_then_move(log_ + ".2"));
  counted(6, log_ + ".2");
  const std::string control = dir_ + "/fault";
  std::ofstream(control) << "open " << inode(log_ + ".2") << "\n";
  auto d = with_io_fault(control, yaml());
  EXPECT_TRUE(eventually([&] { return events(*d, "read_error") >= 2; }, 20s)) << d->log();
  fs::remove(control);
  EXPECT_TRUE(exact()) << d->log();
  EXPECT_EQ(events(*d, "file_lost"), 0);
  stop(d);
}

// Another instance's position checked at a start (a renamed host): a damaged archive
// among the rotated files is not compared, and does not stop the start; the other
// instance's file, found past it, is, and the start is refused naming both.
TEST_F(LogRotationErrors, ADamagedGzDoesNotStopTheCheckOfAnotherInstance) {
  ASSERT_NO_FATAL_FAILURE(rotate_while_stopped(true));
  ASSERT_NO_FATAL_FAILURE(damaged_gz(log_ + ".2.gz"));
  std::string refused;
  try {
    auto d = std::make_unique<daemon_process>(yaml("", "instance_id: host-b\n"));
    stop(d);
  } catch (const std::runtime_error& e) {
    refused = e.what();
  }
  EXPECT_NE(refused.find("instance_id 'host-b') has no position"), std::string::npos) << refused;
  // The statement that gives the other instance's positions to this one.
  EXPECT_NE(refused.find("move the position: UPDATE slotted_counterd_log_positions SET "
                         "instance_id = 'host-b' WHERE instance_id = '"),
            std::string::npos)
      << refused;
}

// The .gz that holds the committed file fails its first reads (EIO, as NFS may): the
// passes fail and are tried again, reported with the file's name and errno; once it can
// be read, it is read from the committed position. No file_lost, nothing counted twice
// or skipped.
TEST_F(LogRotationErrors, AReadErrorOnARotatedGzIsAnErrorNotAnotherFile) {
  ASSERT_NO_FATAL_FAILURE(rotate_while_stopped(true));
  const std::string gz = log_ + ".1.gz";
  const std::string control = dir_ + "/fault";
  // Its first three reads at offset 0 fail.
  std::ofstream(control) << "1 " << inode(gz) << " 0 3\n";
  auto d = with_io_fault(control, yaml());
  EXPECT_TRUE(eventually([&] { return fs::exists(control + ".fired"); }, 20s));
  EXPECT_TRUE(exact()) << d->log();
  EXPECT_EQ(events(*d, "file_lost"), 0);
  EXPECT_GE(events(*d, "read_error"), 1);
  const std::string log = d->log();
  EXPECT_NE(log.find(gz + ": cannot read its first bytes (decompressing it): Input/output "
                          "error (errno 5)"),
            std::string::npos)
      << log;
  stop(d);
}

// A damaged .gz (cut short: its first bytes cannot be decompressed) that holds the committed file:
// the source stops there, visibly (a read_error each pass, the position kept), instead of reporting
// the file lost and going on. Once the operator moves it away (docs/operations.md), its unread
// lines are lost and the newer files are read.
TEST_F(LogRotationErrors, ADamagedGzStopsTheSourceVisiblyUntilMovedAway) {
  ASSERT_NO_FATAL_FAILURE(rotate_while_stopped(false));
  const std::string gz = log_ + ".1.gz";
  // Cut short before its first bytes' end (gzip's header, with the file's name, and a
  // few bytes of its deflate stream): they cannot be decompressed.
  fs::resize_file(gz, 30);
  const std::string before = committed();
  auto d = std::make_unique<daemon_process>(yaml());
  EXPECT_TRUE(eventually([&] { return events(*d, "read_error") >= 3; }, 30s));
  EXPECT_EQ(events(*d, "file_lost"), 0);
  EXPECT_EQ(committed(), before);
  EXPECT_EQ(counts().at(5), 0);
  EXPECT_NE(d->log().find(gz), std::string::npos) << d->log();
  fs::rename(gz, dir_ + "/damaged.gz");
  EXPECT_TRUE(exact(40s));
  stop(d);
}

// A source whose passes keep failing (its file's first bytes fail with EIO, as on a flaky
// NFS mount, by the io_fault library) backs off alone: the other source's lines are
// counted at its own pace, each by a pass of its own, not by the failing source's next
// attempt (before, one backoff for all: a line waited up to 30 s, a backlog a pass per 30 s).
TEST_F(LogRotationErrors, AFailingSourceBacksOffAloneTheOtherKeepsItsPace) {
  const std::string failing = dir_ + "/failing.log";
  nginx_append(failing, log_line(100, "GET", 200, "/x/"));  // matches no rule
  const std::string control = dir_ + "/fault";
  std::ofstream(control) << "1 " << inode(failing) << " 0 1000000\n";
  const std::string rules = "    rules: [{counter: dl, path: '^/d/([0-9]+)/'}]\n";
  auto d = with_io_fault(
      control, daemon_yaml(shared_mariadb(), db_,
                           "counters: [{name: dl, record_type: 7}]\n"
                           "flush: {interval: 50ms}\n"
                           "log_sources:\n"
                           "  - path: " +
                               failing + "\n" + rules + "  - path: " + log_ + "\n" + rules));
  const auto failures = [&] {
    return metric_value(
        http_client(d->port()).get("/metrics").body,
        "slotted_counterd_log_events_total{kind=\"read_error\",source=\"" + failing + "\"}");
  };
  // Eight failures, 6.35 s of backoff: the next attempt is 6.4 s away.
  ASSERT_TRUE(eventually([&] { return failures() >= 8; }, 60s)) << d->log();
  const double before = failures();
  for (std::uint64_t id = 1; id <= 3; ++id) {
    counted(id, log_);
    ASSERT_TRUE(exact()) << d->log();
  }
  EXPECT_LE(failures() - before, 1) << d->log();
  stop(d);
}

}  // namespace
}  // namespace slotted::test
