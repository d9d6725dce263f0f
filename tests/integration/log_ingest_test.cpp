// Counting from access logs (log_sources) against the real MariaDB: every matching line
// counted exactly once through appends, a line written in two parts, garbage, rename
// rotation while running and while the daemon is SIGKILLed, and copytruncate.
#include "logs/log_ingest.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "app/application.hpp"
#include "db/top.hpp"
#include "db/uniques.hpp"
#include "log_fixture.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// The shared access-log fixture (log_fixture.hpp), its source with a short rotate_wait.
class LogIngest : public log_fixture {
 protected:
  std::string yaml() const { return log_fixture::yaml("    rotate_wait: 200ms\n"); }

  // Starts a daemon until every expected count is there, stops it, and checks that
  // nothing more was counted by then (every pass over). Returns the daemon's count of
  // copytruncates and cuts noticed (log_events_total{kind="truncated"}) before the stop.
  double start_until_exact_then_stop() {
    auto d = std::make_unique<daemon_process>(yaml());
    EXPECT_TRUE(exact());
    const double truncations = metric_value(
        http_client(d->port()).get("/metrics").body,
        "slotted_counterd_log_events_total{kind=\"truncated\",source=\"" + log_ + "\"}");
    stop(d);
    EXPECT_EQ(counts(), expected_);
    return truncations;
  }
};

// The tests of reading, rotations, kills and copies, on each engine: the positions table
// (a bytea path and bigints holding the device, inode and hash's 64 bits on PostgreSQL)
// written in the batch's transaction.
class LogIngestOnEngines : public LogIngest, public ::testing::WithParamInterface<db::engine> {
 protected:
  db::engine engine() const override { return GetParam(); }
};

TEST_P(LogIngestOnEngines, EveryMatchingLineCountsOnceThroughRotationsKillsAndTruncation) {
  auto d = std::make_unique<daemon_process>(yaml());
  // A log that is not there yet: no crash, counted once it appears.
  for (std::uint64_t id = 1; id <= 5; ++id) counted(id, log_);
  nginx_append(log_, log_line(1, "HEAD") + log_line(2, "GET", 404) + log_line(3, "GET", 206) +
                         log_line(4, "GET", 200, "/other/") + "garbage\n" + log_line(99, "POST"));
  counted(2, log_);
  ASSERT_TRUE(exact());

  // A line written in two parts: counted once its newline is there.
  const std::string l = log_line(6);
  nginx_append(log_, l.substr(0, 20));
  std::this_thread::sleep_for(300ms);  // several passes see the half line
  nginx_append(log_, l.substr(20));
  ++expected_[6];
  ASSERT_TRUE(exact());

  // Rename rotation while running: the old file still written to (the web server has
  // not reopened yet), then the new one.
  fs::rename(log_, log_ + ".1");
  counted(7, log_ + ".1");
  counted(8, log_);
  counted(8, log_);
  ASSERT_TRUE(exact());

  // SIGKILL, then a rotation while it is down: the rest of the old file, then the new.
  counted(9, log_);
  d->signal(SIGKILL);
  EXPECT_EQ(d->wait(10s), -SIGKILL);
  d.reset();
  counted(10, log_);
  fs::rename(log_, log_ + ".1");
  counted(11, log_);
  d = std::make_unique<daemon_process>(yaml());
  ASSERT_TRUE(exact());

  // Killed again while lines keep coming: nothing lost, nothing doubled.
  for (int i = 0; i < 200; ++i) counted(20 + i % 7, log_);
  d->signal(SIGKILL);
  EXPECT_EQ(d->wait(10s), -SIGKILL);
  d = std::make_unique<daemon_process>(yaml());
  ASSERT_TRUE(exact());

  // copytruncate: the file cut to 0 under the reader, then written again.
  fs::resize_file(log_, 0);
  counted(12, log_);
  counted(13, log_);
  ASSERT_TRUE(exact());
  d->signal(SIGTERM);
  EXPECT_EQ(d->wait(20s), 0);
  // A restart reads nothing twice.
  d = std::make_unique<daemon_process>(yaml());
  std::this_thread::sleep_for(300ms);
  EXPECT_TRUE(exact());
  const auto positions =
      server().query_int(db_, "SELECT COUNT(*) FROM slotted_counterd_log_positions");
  EXPECT_EQ(positions, 1);
  // The totals of top-N hold every counted line too (written in the same transaction):
  // one row per counter, equal to the sum of its slots.
  EXPECT_EQ(
      server().query_int(db_,
                         "SELECT COUNT(*) FROM (SELECT record_type, record_id, SUM(`count`) AS s "
                         "FROM slotted_counters GROUP BY record_type, record_id) c LEFT JOIN "
                         "slotted_counters_totals t USING (record_type, record_id) "
                         "WHERE t.`count` IS NULL OR t.`count` <> c.s"),
      0);
  EXPECT_EQ(server().query_int(db_, "SELECT COUNT(*) FROM slotted_counters_totals"),
            static_cast<std::int64_t>(expected_.size()));
}

TEST_P(LogIngestOnEngines, RotatedFileEndingInAPartialLineIsLeft) {
  daemon_process d(yaml());
  counted(1, log_);
  nginx_append(log_, log_line(2).substr(0, 30));  // a write cut short: no newline, ever
  ASSERT_TRUE(exact());
  fs::rename(log_, log_ + ".1");
  counted(3, log_);
  counted(3, log_);
  // The old file is left (its tail one malformed line) and the new one read.
  ASSERT_TRUE(exact());
}

TEST_P(LogIngestOnEngines, RestartAfterTwoRotationsReadsPathDot1) {
  auto d = std::make_unique<daemon_process>(yaml());
  counted(1, log_);
  ASSERT_TRUE(exact());
  stop(d);
  counted(2, log_);  // the committed file A, then rotated twice: PATH.2
  fs::rename(log_, log_ + ".1");
  counted(3, log_);  // B: PATH.1
  fs::rename(log_ + ".1", log_ + ".2");
  fs::rename(log_, log_ + ".1");
  counted(4, log_);  // C: PATH
  d = std::make_unique<daemon_process>(yaml());
  ASSERT_TRUE(exact());
}

// copytruncate while the daemon is stopped: PATH keeps the committed inode, cut to 0, and
// the lines up to the position are in the copy (another inode) at PATH.1. The copy is
// found by its first bytes and read from the position, not from its start.
TEST_P(LogIngestOnEngines, RestartAfterACopytruncateReadsTheCopyFromThePosition) {
  auto d = std::make_unique<daemon_process>(yaml());
  counted(1, log_);
  counted(2, log_);
  ASSERT_TRUE(exact());
  stop(d);
  counted(3, log_);  // after the position: only in the copy once the rotation is done
  fs::copy_file(log_, log_ + ".1");
  fs::resize_file(log_, 0);
  counted(4, log_);
  EXPECT_EQ(start_until_exact_then_stop(), 1);  // a cut noticed at the restart
}

// A position at offset 0 of a file that holds bytes (here part of a line), then a
// copytruncate while the daemon is stopped: the position told the file by none of its
// bytes, so the cut file passed for the same one read from 0 and the copy's lines were
// never read (RealLogrotate.CopytruncateIsExactToTheFilesItLeaves, under load).
TEST_P(LogIngestOnEngines, ACopytruncateOfAFileCommittedAtOffsetZeroReadsTheCopy) {
  const std::string first = log_line(1);
  nginx_append(log_, first.substr(0, 70));  // no newline yet: the pass commits offset 0
  auto d = std::make_unique<daemon_process>(yaml());
  ASSERT_TRUE(eventually(
      [&] {
        return server().query_int(db_, "SELECT COUNT(*) FROM slotted_counterd_log_positions") == 1;
      },
      20s));
  stop(d);
  nginx_append(log_, first.substr(70));
  ++expected_[1];
  counted(2, log_);
  fs::copy_file(log_, log_ + ".1");
  fs::resize_file(log_, 0);
  counted(3, log_);
  EXPECT_EQ(start_until_exact_then_stop(), 1);  // the cut noticed, the copy read from 0
}

// copytruncate with the copy taken before the last counted lines were written (they were
// counted from the original, then the original was cut): the copy holds nothing left to
// count, and PATH is read from its start.
TEST_P(LogIngestOnEngines, RestartAfterACopyShorterThanThePositionReadsOnlyPath) {
  auto d = std::make_unique<daemon_process>(yaml());
  for (const std::uint64_t id : {1, 2, 3, 6}) counted(id, log_);
  ASSERT_TRUE(exact());
  stop(d);
  // The copy: lines 1-3 (their 256 first bytes identify the file), line 6 came after it.
  std::ofstream(log_ + ".1", std::ios::binary) << log_line(1) + log_line(2) + log_line(3);
  fs::resize_file(log_, 0);
  counted(4, log_);
  EXPECT_EQ(start_until_exact_then_stop(), 1);  // a cut noticed at the restart
}

// A rename rotation while stopped, the committed file gone (compressed, say), and PATH.1
// a new file that starts with the same lines: not a copy (PATH is another inode), so it
// is read from its start, not from the old file's position.
TEST_P(LogIngestOnEngines, ANewFileStartingWithTheSameLinesIsNoCopy) {
  auto d = std::make_unique<daemon_process>(yaml());
  counted(1, log_);
  counted(2, log_);
  ASSERT_TRUE(exact());
  stop(d);
  // The new files exist before the old one is deleted: neither reuses its inode.
  fs::rename(log_, dir_ + "/old");
  counted(1, log_ + ".1");  // the same two lines, byte for byte, then one more
  counted(2, log_ + ".1");
  counted(3, log_ + ".1");
  counted(5, log_);
  fs::remove(dir_ + "/old");
  EXPECT_EQ(start_until_exact_then_stop(), 0);  // no cut
}

// PATH cut in place while stopped (`: > access.log`, an application that truncates its
// log when it starts), with no copy of it, and an older rotated file at PATH.1 already
// counted: PATH is read from its start, PATH.1 not again.
TEST_P(LogIngestOnEngines, AFileCutWhileStoppedIsReadFromItsStartNotAnOlderOne) {
  auto d = std::make_unique<daemon_process>(yaml());
  counted(1, log_);
  ASSERT_TRUE(exact());
  fs::rename(log_, log_ + ".1");
  counted(2, log_);
  ASSERT_TRUE(exact());  // the new PATH is the committed file now
  stop(d);
  fs::resize_file(log_, 0);
  counted(3, log_);
  EXPECT_EQ(start_until_exact_then_stop(), 1);  // a cut noticed at the restart
}

// A copytruncate seen while running, by a pass whose commit then fails (the counts table
// gone for a while): the next pass opens the committed file again and finds the same cut
// and its copy. One cut, one `truncated` event, and every line counted once.
TEST_F(LogIngest, ACutSeenByAPassThatFailedToCommitCountsOnce) {
  auto d = std::make_unique<daemon_process>(yaml());
  counted(1, log_);
  counted(2, log_);
  ASSERT_TRUE(exact());
  http_client c(d->port());
  const auto events = [&](const std::string& kind) {
    return metric_value(c.get("/metrics").body, "slotted_counterd_log_events_total{kind=\"" + kind +
                                                    "\",source=\"" + log_ + "\"}");
  };
  auto admin = shared_mariadb().connect(db_);
  admin.execute("RENAME TABLE slotted_counters TO slotted_counters_away");
  fs::copy_file(log_, log_ + ".1");
  fs::resize_file(log_, 0);
  counted(3, log_);
  // The pass that saw the cut failed, and at least one after it, which opened the
  // committed file again.
  ASSERT_TRUE(eventually([&] { return events("commit_error") >= 2; }, 20s));
  admin.execute("RENAME TABLE slotted_counters_away TO slotted_counters");
  ASSERT_TRUE(exact());
  EXPECT_EQ(events("truncated"), 1);
  EXPECT_EQ(events("file_lost"), 0);  // the cut file, read after its copy, lost nothing
  stop(d);
}

// In-process readers (log_ingester::run_once) with test hooks, for the moments a real
// rotation can land in only under load (RealLogrotate found both).
class LogIngestRaces : public LogIngest {
 protected:
  void SetUp() override {
    LogIngest::SetUp();
    pool_ = std::make_unique<db::pool>(
        connect_options_for(test_config(shared_mariadb(), db_).mysql), 1);
  }
  std::unique_ptr<logs::log_ingester> reader() {
    return std::make_unique<logs::log_ingester>(
        logs::ingest_settings_for(config::parse_config(yaml(), "t.yaml")), *pool_, registry_);
  }
  // Passes until every expected count is there (a switch to the next file waits out
  // rotate_wait, a pass meanwhile has nothing to do).
  ::testing::AssertionResult exact_by_passes(logs::log_ingester& r) {
    if (eventually(
            [&] {
              while (r.run_once()) {
              }
              return counts() == expected_;
            },
            20s))
      return ::testing::AssertionSuccess();
    return exact(0s);  // the counts, in the failure
  }
  double events(const std::string& kind) const {
    return metric_value(registry_.serialize(), "slotted_counterd_log_events_total{kind=\"" + kind +
                                                   "\",source=\"" + log_ + "\"}");
  }
  std::unique_ptr<db::pool> pool_;
  metrics::registry registry_;
};

// copytruncate while the first pass over a file reads it (nothing committed yet): the
// pass commits nothing, and its lines, cut from PATH, are in the copy alone. The copy is
// read first, then PATH from its start; before, the next pass read PATH alone and the
// copy's lines were lost.
TEST_F(LogIngestRaces, ACopytruncateDuringTheFirstPassReadsTheCopy) {
  for (std::uint64_t id = 1; id <= 5; ++id) counted(id, log_);
  auto r = reader();
  bool cut = false;
  r->set_hooks_for_test({.after_read =
                             [&] {
                               if (cut) return;
                               cut = true;
                               counted(6, log_);  // after the pass read: in the copy only
                               fs::copy_file(log_, log_ + ".1");
                               fs::resize_file(log_, 0);
                               counted(7, log_);
                             },
                         .after_listing = {}});
  ASSERT_TRUE(exact_by_passes(*r));
  EXPECT_EQ(events("truncated"), 1);
  EXPECT_EQ(events("file_lost"), 0);
  EXPECT_EQ(events("read_error"), 0);
}

// A rotation between the look at the rotated files and the open of the committed file
// by the name that look found: the name now names the next file. The look is made again
// (the names moved); before, the committed file was taken for lost, its unread lines
// with it (RealLogrotate.OlddirWithAGlobIsExact, under load).
TEST_F(LogIngestRaces, ARotationWhileTheCommittedFileIsLookedForLosesNothing) {
  counted(1, log_);
  {
    auto first = reader();
    ASSERT_TRUE(exact_by_passes(*first));
  }
  counted(2, log_);  // after the position: read from the rotated file
  fs::rename(log_, log_ + ".1");
  counted(3, log_);
  auto r = reader();
  bool rotated = false;
  r->set_hooks_for_test({.after_read = {}, .after_listing = [&] {
                           if (rotated) return;
                           rotated = true;
                           fs::rename(log_ + ".1", log_ + ".2");
                           fs::rename(log_, log_ + ".1");
                           counted(4, log_);
                         }});
  ASSERT_TRUE(exact_by_passes(*r));
  EXPECT_TRUE(rotated);
  EXPECT_EQ(events("file_lost"), 0);
  EXPECT_EQ(events("read_error"), 0);
}

// A FIFO at the log's path is no log: it is reported missing, and neither blocks the
// reader thread (an open of a FIFO waits for a writer) nor the stop.
TEST_F(LogIngest, AFifoAtThePathBlocksNothing) {
  ASSERT_EQ(::mkfifo(log_.c_str(), 0600), 0);
  daemon_process d(yaml());
  http_client c(d.port());
  ASSERT_TRUE(eventually(
      [&] {
        return metric_value(c.get("/metrics").body,
                            "slotted_counterd_log_file_missing{source=\"" + log_ + "\"}") == 1;
      },
      20s));
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(20s), 0);
}

// Rules are matched by RE2, in linear time: a backtracking-prone pattern and 8 KiB
// request paths, which cost boost::regex about a second a line on the one reader thread
// (then gave up: not counted), are counted at once, while a second source keeps moving.
// With boost the 40 paths that do not match held that thread for about 50 s, past this
// test's 20 s wait for source B's lines.
TEST_F(LogIngest, ABacktrackingProneRuleOnLongPathsStallsNoSource) {
  const std::string other = dir_ + "/other.log";
  const std::string config =
      daemon_yaml(shared_mariadb(), db_,
                  "counters: [{name: dl, record_type: 7, top: true}]\n"
                  "flush: {interval: 50ms}\n"
                  "log_sources:\n"
                  "  - path: " +
                      log_ +
                      "\n    rules: [{counter: dl, path: '^/z/([0-9]+)/(.+)+\\.zip$'}]\n"
                      "  - path: " +
                      other + "\n    rules: [{counter: dl, path: '^/d/([0-9]+)/'}]\n");
  daemon_process d(config);
  // GET /z/ID/aaa...a[.zip], 8 KiB.
  const auto request = [](std::uint64_t id, const char* end) {
    std::string l = log_line(id, "GET", 200, "/z/");
    return l.replace(l.find("/f.tgz"), 6, "/" + std::string(8000, 'a') + end);
  };
  std::string hostile;
  for (int i = 0; i < 40; ++i) hostile += request(1, "");
  for (int i = 0; i < 10; ++i) {
    hostile += request(2, ".zip");
    ++expected_[2];
  }
  nginx_append(log_, hostile);
  for (int i = 0; i < 10; ++i) counted(3, other);
  ASSERT_TRUE(exact());
  // Tallied as the pass commits (just after its counts show).
  http_client c(d.port());
  EXPECT_TRUE(eventually(
      [&] {
        return metric_value(c.get("/metrics").body,
                            "slotted_counterd_log_lines_total{outcome=\"not_matched\",source=\"" +
                                log_ + "\"}") == 40;
      },
      20s));
}

// Traffic classes: rules tried in order, the first that matches counts the line, by
// its user agent (combined: the last quoted field; json: a configured field). Package
// managers count in one counter, bots in another, the rest in a third, and no line
// counts twice.
TEST_F(LogIngest, RulesByUserAgentCountEachLineForTheFirstClassThatMatches) {
  const std::string json = dir_ + "/access.json";
  const std::string config = daemon_yaml(
      shared_mariadb(), db_,
      "counters: [{name: installs, record_type: 7}, {name: bots, record_type: 8}, "
      "{name: other, record_type: 9}]\n"
      "flush: {interval: 50ms}\n"
      "log_sources:\n"
      "  - path: " +
          log_ +
          "\n"
          "    rules:\n"
          "      - {counter: bots, path: '^/d/([0-9]+)/', user_agent: '(?i)bot|crawl|^curl/'}\n"
          "      - {counter: installs, path: '^/d/([0-9]+)/', user_agent: '^(cargo|pip)/'}\n"
          "      - {counter: other, path: '^/d/([0-9]+)/'}\n"
          "  - path: " +
          json +
          "\n"
          "    format: json\n"
          "    json: {user_agent: ua}\n"
          "    rules:\n"
          "      - {counter: installs, path: '^/d/([0-9]+)/', user_agent: '^(cargo|pip)/'}\n"
          "      - {counter: bots, path: '^/d/([0-9]+)/', not_user_agent: '^(cargo|pip)/'}\n");
  daemon_process d(config);
  const auto with_agent = [](const std::string& ua) {
    std::string l = log_line(1);
    return l.replace(l.rfind("\"curl/8\""), 8, ua);
  };
  nginx_append(
      log_, with_agent("\"cargo/1.75.0 (x86_64-unknown-linux-gnu)\"") +
                with_agent("\"pip/24.0 {\\\"installer\\\":{\\\"name\\\":\\\"pip\\\"}}\"") +
                with_agent("\"Googlebot/2.1 (+http://www.google.com/bot.html)\"") +
                with_agent("\"pip/24.0 (crawler)\"") + with_agent("\"curl/8.5.0\"") +
                with_agent("\"Mozilla/5.0 (X11; Linux x86_64)\"") +
                with_agent("\"" + std::string(12000, 'x') + "\"") +
                "192.0.2.1 - - [26/Nov/2026:10:00:00 +0000] \"GET /d/1/f.tgz HTTP/1.1\" 200 5\n");
  const std::string j =
      R"({"time":"2026-11-26T10:00:00Z","method":"GET","path":"/d/1/f","status":200)";
  nginx_append(json, j + R"(,"ua":"cargo/1.80"})" + "\n" + j + R"(,"ua":"Wget/1.21"})" + "\n" + j +
                         "}\n" + j + R"(,"ua":"pip/23"})" + "\n");
  const auto sums = [&] {
    std::map<std::int64_t, std::int64_t> out;
    for (const std::int64_t t : {7, 8, 9})
      out[t] = shared_mariadb().query_int(
          db_, "SELECT COALESCE(SUM(`count`), 0) FROM slotted_counters WHERE record_type = " +
                   std::to_string(t));
    return out;
  };
  // installs: cargo, pip (combined), cargo, pip (json); bots: Googlebot, pip (crawler),
  // curl (combined), Wget and no user agent (json); other: Mozilla, the long agent and
  // the line without a user agent.
  const std::map<std::int64_t, std::int64_t> want{{7, 4}, {8, 5}, {9, 3}};
  ASSERT_TRUE(eventually([&] { return sums() == want; }, 20s))
      << sums()[7] << " " << sums()[8] << " " << sums()[9];
}

// A combined line of `client` (the remote address; "-" for none) fetching `id` at unix
// time `at`.
std::string line_from(const std::string& client, std::uint64_t id, std::int64_t at) {
  const std::time_t t = static_cast<std::time_t>(at);
  std::tm tm{};
  gmtime_r(&t, &tm);
  static constexpr const char* months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                           "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  char when[32];
  std::snprintf(when, sizeof when, "%02d/%s/%04d:%02d:%02d:%02d +0000", tm.tm_mday,
                months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return client + " - - [" + when + "] \"GET /d/" + std::to_string(id) +
         "/f.tgz HTTP/1.1\" 200 123 \"-\" \"curl/8\"\n";
}

// counters[].dedupe with log sources: a line's remote address is its client, so each
// (id, address, day) counts once across lines, passes, two log files, a SIGKILL and the
// HTTP items of the same client; lines without an address count as they are; a line of
// a window past its keep is not counted.
TEST_P(LogIngestOnEngines, ALinesRemoteAddressIsItsClientForACounterWithDedupe) {
  {
    auto conn = server().connect(db_);
    store::dedupe_spec dedupe;
    dedupe.declare(7, store::granularity::day);
    db::migrate_uniques(conn, "slotted_counters", dedupe);
  }
  const std::string second = dir_ + "/other.log";
  const std::string config =
      daemon_yaml(server(), db_,
                  "counters: [{name: dl, record_type: 7, top: true, dedupe: day}]\n"
                  "flush: {interval: 50ms}\n"
                  "log_sources:\n"
                  "  - path: " +
                      log_ +
                      "\n    rules: [{counter: dl, path: '^/d/([0-9]+)/'}]\n"
                      "  - path: " +
                      second + "\n    rules: [{counter: dl, path: '^/d/([0-9]+)/'}]\n");
  const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  auto d = std::make_unique<daemon_process>(config);
  // id 1: A three times in one file and once in the other, B once, two lines without an
  // address; id 2: A once; a line of a window that ended more than the keep (48 h)
  // ago: none.
  nginx_append(log_, line_from("192.0.2.1", 1, now) + line_from("192.0.2.1", 1, now) +
                         line_from("-", 1, now) + line_from("192.0.2.2", 1, now) +
                         line_from("192.0.2.1", 2, now) +
                         line_from("192.0.2.3", 1, now - 4 * 86400));
  nginx_append(second, line_from("192.0.2.1", 1, now) + line_from("-", 1, now));
  expected_ = {{1, 4}, {2, 1}};
  ASSERT_TRUE(exact());
  // The old line is told apart (its counter is this process's: checked before the kill).
  EXPECT_EQ(metric_value(http_client(d->port()).get("/metrics").body,
                         "slotted_counterd_log_lines_total{outcome=\"too_late_for_dedupe\","
                         "source=\"" +
                             log_ + "\"}"),
            1);

  // Later passes, a SIGKILL and a restart count none of those pairs again; a new pair and
  // an address-less line do count (read after the repeats: when they show, so would a
  // repeat).
  nginx_append(log_, line_from("192.0.2.1", 1, now) + line_from("192.0.2.2", 1, now));
  d->signal(SIGKILL);
  EXPECT_EQ(d->wait(10s), -SIGKILL);
  nginx_append(second, line_from("192.0.2.2", 1, now) + line_from("192.0.2.1", 2, now));
  d = std::make_unique<daemon_process>(config);
  nginx_append(log_, line_from("192.0.2.9", 3, now) + line_from("-", 3, now));
  expected_ = {{1, 4}, {2, 1}, {3, 2}};
  ASSERT_TRUE(exact());

  // An HTTP item of a client a line counted already is a duplicate; a new one counts.
  http_client c(d->port());
  ASSERT_EQ(
      c.post_json(
           "/v1/increments",
           "[{\"record_type\": \"dl\", \"record_id\": 2, \"client\": \"192.0.2.1\", \"at\": " +
               std::to_string(now) +
               "},"
               " {\"record_type\": \"dl\", \"record_id\": 2, \"client\": \"192.0.2.5\", \"at\": " +
               std::to_string(now) + "}]")
          .status,
      202);
  ASSERT_TRUE(flush_until_ok(c));
  expected_ = {{1, 4}, {2, 2}, {3, 2}};
  ASSERT_TRUE(exact());
  // Each counted pair is one row of the uniques table.
  EXPECT_EQ(server().query_int(db_, "SELECT COUNT(*) FROM slotted_counters_uniques"), 5);
  // The totals of top-N agree.
  EXPECT_EQ(
      server().query_int(db_,
                         "SELECT `count` FROM slotted_counters_totals WHERE record_type = 7 AND "
                         "record_id = 1"),
      4);
}

INSTANTIATE_ENGINES(LogIngestOnEngines);

// A backlog naming more records than one commit may write is committed in several
// passes, each ending at the line that reaches the bound, every line counted once.
TEST_F(LogIngest, APassEndsAtItsRowBoundAndTheNextGoesOnFromThere) {
  auto cfg = config::parse_config(yaml(), "t.yaml");
  auto settings = logs::ingest_settings_for(cfg);
  settings.max_batch_rows = 3;
  db::pool pool(connect_options_for(test_config(shared_mariadb(), db_).mysql), 1);
  metrics::registry registry;
  logs::log_ingester reader(settings, pool, registry);
  for (std::uint64_t id = 1; id <= 10; ++id) {
    counted(id, log_);
    counted(id, log_);
  }
  int passes = 1;
  while (reader.run_once()) ++passes;
  // Each pass ends at the line of its third record: (1, 1, 2, 2, 3), (3, 4, 4, 5),
  // (5, 6, 6, 7), (7, 8, 8, 9), (9, 10, 10).
  EXPECT_EQ(passes, 5);
  EXPECT_EQ(counts(), expected_);
  counted(11, log_);
  EXPECT_FALSE(reader.run_once());
  EXPECT_EQ(counts(), expected_);
  // No pass failed: a failure is backed off, not thrown, and would end the loop above
  // (or skip the last pass) as if the source had nothing more.
  const auto text = registry.serialize();
  for (const char* kind : {"commit_error", "read_error"}) {
    EXPECT_EQ(metric_value(text, std::string("slotted_counterd_log_events_total{kind=\"") + kind +
                                     "\",source=\"" + log_ + "\"}"),
              0)
        << text;
  }
}

// The reader thread runs at nice 10, so that a backlog takes little of the CPU the HTTP
// threads want (bench/RESULTS.md, POSTs while a source catches up).
TEST_F(LogIngest, TheReaderThreadYieldsTheCpu) {
  daemon_process d(yaml());
  counted(1, log_);
  ASSERT_TRUE(exact());
  int found = 0;
  for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(d.pid()) + "/task")) {
    std::string comm;
    std::getline(std::ifstream(task.path() / "comm"), comm);
    if (comm != "slotted-logs") continue;
    ++found;
    std::string stat;
    std::getline(std::ifstream(task.path() / "stat"), stat);
    // After "(comm) ": state is field 3; nice is field 19.
    std::istringstream fields(stat.substr(stat.rfind(')') + 2));
    std::string field;
    for (int i = 3; i <= 19 && fields >> field; ++i) {
    }
    EXPECT_EQ(field, "10") << stat;
  }
  EXPECT_EQ(found, 1);
}

TEST_F(LogIngest, MissingPositionsTableIsAFatalError) {
  shared_mariadb().query_int(db_, "SELECT 1");
  auto c = shared_mariadb().connect(db_);
  c.execute("DROP TABLE slotted_counterd_log_positions");
  std::string out;
  EXPECT_NE(run_binary(yaml(), "", out), 0);
  EXPECT_NE(out.find("slotted_counterd_log_positions"), std::string::npos) << out;
}

}  // namespace
}  // namespace slotted::test
