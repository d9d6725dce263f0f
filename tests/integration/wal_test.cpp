// Crash durability with the write-ahead log (README: Guarantees, exactly once): SIGKILL at random
// moments under load loses nothing acknowledged and doubles nothing; damaged logs behave as
// documented; a full disk answers 503 and recovers.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <regex>

#include "durable/record.hpp"
#include "flush/flusher.hpp"
#include "integration/load.hpp"
#include "integration/wal_fixture.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/notify_socket.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;

TEST_P(WalOnEngines, SigkillAtRandomMomentsLosesNothingAcknowledgedAndDoublesNothing) {
  constexpr int keys = 40;
  std::vector<std::int64_t> acknowledged(keys), unanswered(keys);
  std::mt19937 rng(42);
  // From the log of each start: what replay found that only the WAL held.
  std::int64_t replayed_counters = 0, replayed_batches = 0;
  const auto count_replay = [&](const std::string& log) {
    static const std::regex replayed(
        R"(WAL replayed from \d+ segments: (\d+) pending counters and (\d+) logged batches)");
    std::smatch m;
    if (!std::regex_search(log, m, replayed)) return;
    replayed_counters += std::stoll(m[1]);
    replayed_batches += std::stoll(m[2]);
  };
  for (int round = 0; round < 20; ++round) {
    daemon_process daemon(yaml(round % 2 ? "always" : "interval"));
    std::atomic<bool> stop{false};
    std::mutex merge;
    std::vector<std::thread> clients;
    for (int c = 0; c < 4; ++c) {
      clients.emplace_back([&, c] {
        std::mt19937 r(round * 10 + c);
        http_client client(daemon.port(), 5s);
        std::vector<std::int64_t> ack(keys), lost(keys);
        while (!stop) {
          const int k = static_cast<int>(r() % keys);
          const int delta = 1 + static_cast<int>(r() % 5);
          const auto reply = client.post_json(
              "/v1/increments", R"({"record_type": 1, "record_id": )" + std::to_string(k) +
                                    R"(, "delta": )" + std::to_string(delta) + "}");
          if (reply.status == 202)
            ack[k] += delta;
          else if (reply.status == 0)
            lost[k] += delta;            // no answer: may or may not be applied
          if (reply.status == 0) break;  // the daemon is gone
        }
        std::lock_guard lock(merge);
        for (int k = 0; k < keys; ++k) {
          acknowledged[k] += ack[k];
          unanswered[k] += lost[k];
        }
      });
    }
    // A random moment: anywhere from before the first flush to several flushes in.
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng() % 400));
    daemon.signal(SIGKILL);
    EXPECT_EQ(daemon.wait(10s), -SIGKILL);
    count_replay(daemon.log());
    stop = true;
    for (auto& t : clients) t.join();
  }
  daemon_process last(yaml());
  http_client c(last.port());
  ASSERT_TRUE(flush_until_ok(c));
  last.signal(SIGTERM);
  EXPECT_EQ(last.wait(30s), 0) << last.log();
  count_replay(last.log());

  // The kills landed mid-write: some requests were in flight (sent, never answered),
  // and restarts replayed increments that only the WAL held (acknowledged, not yet
  // flushed). Without these the totals below would prove nothing about the WAL.
  std::int64_t in_flight = 0;
  for (const auto v : unanswered) in_flight += v;
  EXPECT_GT(in_flight, 0) << "no kill landed while a request was in flight";
  EXPECT_GT(replayed_counters, 0) << "no restart replayed an increment from the WAL";
  std::printf("kills: 20; unanswered deltas %lld; replayed %lld counters, %lld batches\n",
              static_cast<long long>(in_flight), static_cast<long long>(replayed_counters),
              static_cast<long long>(replayed_batches));
  std::int64_t total_ack = 0;
  for (int k = 0; k < keys; ++k) {
    const auto in_db = db_total(k);
    EXPECT_LE(acknowledged[k], in_db) << "key " << k << ": an acknowledged increment was lost";
    EXPECT_LE(in_db, acknowledged[k] + unanswered[k])
        << "key " << k << ": something was applied twice";
    total_ack += acknowledged[k];
  }
  EXPECT_GT(total_ack, 1000);
}

TEST_P(WalOnEngines, CommittedBatchesAreNotReplayedLongAfter) {
  // The ledger forgets old batches (pruning); the log must not hold on to committed
  // ones and send them again at the next start.
  {
    daemon_process first(yaml("always", "1h"));
    http_client c(first.port());
    ASSERT_EQ(
        c.post_json("/v1/increments", R"({"record_type": 1, "record_id": 90, "delta": 4})").status,
        202u);
    ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
    // The committed mark is logged by the log thread after the flush answered (queued
    // before the answer, written before any later increment): once a later increment
    // is acknowledged, it is on disk. Without this the kill can land before the mark,
    // which pruning within that moment would turn into a double apply (seen under TSan).
    ASSERT_EQ(
        c.post_json("/v1/increments", R"({"record_type": 1, "record_id": 91, "delta": 1})").status,
        202u);
    first.signal(SIGKILL);
    first.wait(10s);
  }
  server().connect(database_).execute("DELETE FROM slotted_counterd_ledger");  // as pruning would
  daemon_process second(yaml("always", "1h"));
  http_client c(second.port());
  EXPECT_NE(second.log().find("1 pending counters and 0 logged batches"), std::string::npos)
      << second.log();
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  EXPECT_EQ(db_total(90), 4);
}

TEST_F(Wal, TornTailIsCutWithAWarningAndTheRestReplayed) {
  std::string bytes;
  durable::append_increments(bytes, std::vector<ingest::increment>{{1, 77, 5}, {1, 78, 2}});
  std::string partial;
  durable::append_increments(partial, std::vector<ingest::increment>{{1, 77, 1000}});
  write_segment(bytes + partial.substr(0, partial.size() - 3));

  daemon_process daemon(yaml("always", "1h"));
  http_client c(daemon.port());
  EXPECT_NE(daemon.log().find("ends in an incomplete record at offset " +
                              std::to_string(durable::segment_magic.size() + bytes.size())),
            std::string::npos)
      << daemon.log();
  EXPECT_NE(c.get("/metrics").body.find("slotted_counterd_wal_torn_tails_total 1"),
            std::string::npos);
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  EXPECT_EQ(db_total(77), 5);
  EXPECT_EQ(db_total(78), 2);
}

TEST_F(Wal, CorruptionInTheMiddleStopsStartupNamingFileAndOffset) {
  std::string one, two, three;
  durable::append_increments(one, std::vector<ingest::increment>{{1, 80, 1}});
  durable::append_increments(two, std::vector<ingest::increment>{{1, 81, 1}});
  durable::append_increments(three, std::vector<ingest::increment>{{1, 82, 1}});
  two[durable::record_header_bytes + 2] ^= 0x01;
  write_segment(one + two + three);
  const std::string segment = wal_dir_ + "/wal-0000000000000001.log";
  try {
    daemon_process daemon(yaml());
    FAIL() << "the daemon started on a corrupt WAL";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("status 256"), std::string::npos) << message;  // exit code 1
    EXPECT_NE(message.find(segment + " is damaged at offset " +
                           std::to_string(durable::segment_magic.size() + one.size())),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("move that file out of"), std::string::npos) << message;
  }
  // The documented way on: move the file aside.
  fs::rename(segment, root_ + "/damaged.log");
  daemon_process daemon(yaml());
  http_client c(daemon.port());
  EXPECT_EQ(c.get("/healthz").status, 200u);
  EXPECT_EQ(db_total(80), 0);
}

TEST_F(Wal, LengthBitFlipMidSegmentIsCorruptionAndSalvageKeepsThePrefix) {
  std::string one, two, three;
  durable::append_increments(one, std::vector<ingest::increment>{{1, 83, 3}});
  durable::append_increments(two, std::vector<ingest::increment>{{1, 84, 1}});
  durable::append_increments(three, std::vector<ingest::increment>{{1, 85, 1}});
  // A high bit of the middle record's length: it now seems to run past the end of the
  // file, as a torn append would, but acknowledged records follow it.
  two[3] ^= 0x10;
  write_segment(one + two + three);
  const std::string segment = wal_dir_ + "/wal-0000000000000001.log";
  const std::string offset = std::to_string(durable::segment_magic.size() + one.size());
  std::string out;
  EXPECT_EQ(run_binary(yaml(), "", out), 1) << out;
  EXPECT_NE(out.find(segment + " is damaged at offset " + offset), std::string::npos) << out;
  EXPECT_NE(out.find("--wal-salvage"), std::string::npos) << out;
  EXPECT_EQ(wal_files().size(), 1u);  // refused, nothing cut

  // Salvage keeps the record before the damage and moves the file aside.
  ASSERT_EQ(run_binary(yaml(), "--wal-salvage", out), 0) << out;
  EXPECT_NE(out.find("dropped bytes " + offset), std::string::npos) << out;
  EXPECT_NE(out.find("1 intact records after the damage not applied"), std::string::npos) << out;
  bool moved_aside = false;
  for (const auto& [name, content] : wal_files())
    moved_aside |= name.starts_with("wal-0000000000000001.log.damaged-");
  EXPECT_TRUE(moved_aside);

  daemon_process daemon(yaml("always", "1h"));
  http_client c(daemon.port());
  EXPECT_NE(daemon.log().find("1 pending counters"), std::string::npos) << daemon.log();
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  EXPECT_EQ(db_total(83), 3);
  EXPECT_EQ(db_total(84), 0);
  EXPECT_EQ(db_total(85), 0);
}

TEST_F(Wal, SalvageThatFailsHalfwayKeepsTheDamagedSegmentForTheNextTry) {
  // The damaged segment may only go aside once a snapshot holds the prefix kept from
  // it: a salvage that stops before that (here an unreadable later segment; a crash or
  // a full disk alike) must leave it, or the next try has lost that prefix.
  std::string one, two, three;
  durable::append_increments(one, std::vector<ingest::increment>{{1, 86, 3}});
  durable::append_increments(two, std::vector<ingest::increment>{{1, 87, 1}});
  durable::append_increments(three, std::vector<ingest::increment>{{1, 88, 1}});
  two[3] ^= 0x10;
  write_segment(one + two + three);
  const std::string blocker = wal_dir_ + "/wal-0000000000000002.log";
  fs::create_directory(blocker);
  std::string out;
  EXPECT_NE(run_binary(yaml(), "--wal-salvage", out), 0) << out;
  EXPECT_TRUE(fs::exists(wal_dir_ + "/wal-0000000000000001.log")) << out;

  fs::remove(blocker);
  ASSERT_EQ(run_binary(yaml(), "--wal-salvage", out), 0) << out;
  daemon_process daemon(yaml("always", "1h"));
  http_client c(daemon.port());
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  EXPECT_EQ(db_total(86), 3);
  EXPECT_EQ(db_total(87), 0);
}

TEST_F(Wal, ALockFileThatIsASymlinkIsRefusedAndItsTargetLeftAlone) {
  // Whoever can plant wal.dir/lock must not make the daemon truncate another file
  // (it runs with write access to files its operator cares about).
  fs::create_directories(wal_dir_);
  const std::string victim = root_ + "/victim";
  std::ofstream(victim) << "precious\n";
  fs::create_symlink(victim, wal_dir_ + "/lock");
  std::string out;
  EXPECT_EQ(run_binary(yaml(), "--wal-salvage", out), 1) << out;
  EXPECT_NE(out.find(wal_dir_ + "/lock"), std::string::npos) << out;
  std::ifstream in(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "precious\n");
}

TEST_P(WalOnEngines, TheLedgerRowOfABatchTheWalStillHoldsIsNotPruned) {
  // A batch committed, but the WAL could not log that it did (a full disk): replay will
  // send it again, and only its ledger row makes that a no-op. The hourly prune of old
  // ledger rows must not delete that row while the WAL still holds the batch.
  // One request of 200 counters. Per file: the cut record's segment (4467 bytes: magic,
  // frame, the record's head and one batch field of 200 rows) and the restarted daemon's
  // snapshot of that batch (the same 4467) fit; a committed record (23 more) after
  // either does not. The daemon's own log stays far below it.
  constexpr std::size_t file_limit = 4475;
  std::string body = "[";
  for (int i = 0; i < 200; ++i)
    body += std::string(i ? "," : "") + R"({"record_type": 1, "record_id": )" +
            std::to_string(1000 + i) + "}";
  body += "]";
  const auto total = [&] {
    return server().query_int(database_,
                              "SELECT COALESCE(SUM(count), 0) FROM slotted_counters "
                              "WHERE record_type = 1 AND record_id BETWEEN 1000 AND 1199");
  };
  std::optional<daemon_process> daemon(std::in_place, yaml("always", "1h"), file_limit);
  {
    http_client c(daemon->port());
    ASSERT_EQ(c.post_json("/v1/increments", body).status, 202u);
    ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  }
  ASSERT_EQ(total(), 200);
  daemon->signal(SIGKILL);
  ASSERT_EQ(daemon->wait(10s), -SIGKILL);
  daemon.reset();
  // The daemon stayed down for longer than the ledger's retention of another run's rows
  // (a day: the restarted daemon is another run).
  server().connect(database_).execute("UPDATE slotted_counterd_ledger SET committed_at = " +
                                      two_days_ago());

  // Restarted, the disk still full: the replayed batch is found in the ledger, its
  // committed record cannot be logged, and the first cycle prunes the ledger.
  daemon.emplace(yaml("always", "1h"), file_limit);
  {
    http_client c(daemon->port());
    ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  }
  EXPECT_EQ(total(), 200);
  daemon->signal(SIGKILL);
  ASSERT_EQ(daemon->wait(10s), -SIGKILL);
  daemon.reset();

  // Room again: the batch is replayed once more and must still be a no-op. Its
  // committed record is logged now, so the prune goes ahead and deletes the old row.
  daemon.emplace(yaml("always", "1h"));
  http_client c(daemon->port());
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  EXPECT_EQ(total(), 200) << daemon->log();
  EXPECT_EQ(server().query_int(database_, "SELECT COUNT(*) FROM slotted_counterd_ledger"), 0);
}

TEST_F(Wal, SecondCopyOnTheSameDirectoryExits1AndTouchesNothing) {
  std::int64_t acknowledged = 0;
  std::optional<daemon_process> first(std::in_place, yaml("always", "1h"));
  {
    http_client c(first->port());
    // The first daemon's own first cycle (it runs at start; on a loaded machine it can
    // come after the increments below) takes the log and cuts a new segment: done here,
    // before the files are compared, so any change after is the second copy's.
    ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
    for (int i = 0; i < 20; ++i) {
      ASSERT_EQ(c.post_json("/v1/increments", R"({"record_type": 1, "record_id": 70})").status,
                202u);
      ++acknowledged;
    }
  }
  const auto before = wal_files();
  try {
    daemon_process second(yaml("always", "1h"));
    FAIL() << "a second daemon started on the same wal.dir";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("status 256"), std::string::npos) << message;  // exit code 1
    EXPECT_NE(message.find("WAL directory " + wal_dir_ + " is in use by another process (pid " +
                           std::to_string(first->pid()) + ")"),
              std::string::npos)
        << message;
  }
  EXPECT_EQ(wal_files(), before) << "the second copy changed the first one's log";
  // An operator who deletes the "stale" lock file does not let a second copy in either.
  fs::remove(wal_dir_ + "/lock");
  try {
    daemon_process second(yaml("always", "1h"));
    FAIL() << "a second daemon started on the same wal.dir once its lock file was deleted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("WAL directory " + wal_dir_ +
                                         " is in use by another "
                                         "process (pid unknown)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(wal_files(), before) << "the second copy changed the first one's log";

  // The first one's log is whole: more increments, a SIGKILL, and a restart replays
  // every acknowledged one exactly.
  {
    http_client c(first->port());
    for (int i = 0; i < 20; ++i) {
      ASSERT_EQ(c.post_json("/v1/increments", R"({"record_type": 1, "record_id": 70})").status,
                202u);
      ++acknowledged;
    }
  }
  first->signal(SIGKILL);
  EXPECT_EQ(first->wait(10s), -SIGKILL);
  first.reset();
  daemon_process third(yaml("always", "1h"));
  http_client c(third.port());
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  EXPECT_EQ(db_total(70), acknowledged);
}

TEST_P(WalOnEngines, SplitBatchReplayedAfterTheErrorWentAwayAppliesOnlyItsUncommittedParts) {
  // Before a crash the database refused batch 1 for its values and the flusher split
  // it; its left half (split index 2) committed. The column has been widened since, so
  // the replayed batch would now commit whole: only its right half may.
  constexpr std::uint64_t run = 4242;
  flush::flush_batch batch;
  batch.run_id = run;
  batch.seq = 1;
  batch.rows = {{1, 101, 0, 1}, {1, 102, 0, 2}, {1, 103, 0, 3}, {1, 104, 0, 4}};
  std::string records;
  durable::append_batches(records, std::vector{batch});
  write_segment(records);
  auto conn = server().connect(database_);
  conn.execute(
      "INSERT INTO slotted_counterd_ledger (instance_id, run_id, batch_seq, row_count) "
      "VALUES ('wal-test', " +
      std::to_string(run) + ", " + std::to_string((std::uint64_t{2} << 44) | 1) + ", 2)");
  conn.execute("INSERT INTO slotted_counters VALUES (1, 101, 0, 1), (1, 102, 0, 2)");

  daemon_process daemon(yaml("always", "1h"));
  http_client c(daemon.port());
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  EXPECT_EQ(db_total(101), 1);
  EXPECT_EQ(db_total(102), 2);
  EXPECT_EQ(db_total(103), 3);
  EXPECT_EQ(db_total(104), 4);
  EXPECT_NE(daemon.log().find("was split before the restart"), std::string::npos) << daemon.log();
}

TEST_P(WalOnEngines, ReplayedSplitBatchWhosePartsAllCommittedIsNeverSentAgain) {
  // Both halves of batch 1 committed before the crash: nothing is left to write, and
  // the log must record that, or a replay after the ledger is pruned would send the
  // whole batch again.
  constexpr std::uint64_t run = 4343;
  flush::flush_batch batch;
  batch.run_id = run;
  batch.seq = 1;
  batch.rows = {{1, 111, 0, 1}, {1, 112, 0, 2}};
  std::string records;
  durable::append_batches(records, std::vector{batch});
  write_segment(records);
  auto conn = server().connect(database_);
  for (const std::uint64_t node : {2, 3}) {
    conn.execute(
        "INSERT INTO slotted_counterd_ledger (instance_id, run_id, batch_seq, row_count) "
        "VALUES ('wal-test', " +
        std::to_string(run) + ", " + std::to_string((node << 44) | 1) + ", 1)");
  }
  conn.execute("INSERT INTO slotted_counters VALUES (1, 111, 0, 1), (1, 112, 0, 2)");
  {
    daemon_process daemon(yaml("always", "1h"));
    http_client c(daemon.port());
    ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
    daemon.signal(SIGTERM);
    EXPECT_EQ(daemon.wait(30s), 0) << daemon.log();
  }
  conn.execute("DELETE FROM slotted_counterd_ledger");  // as pruning would, an hour on
  daemon_process daemon(yaml("always", "1h"));
  http_client c(daemon.port());
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  EXPECT_EQ(db_total(111), 1);
  EXPECT_EQ(db_total(112), 2);
}

TEST_P(WalOnEngines, AReplayedBatchThatHadCommittedIsNeverCountedTwiceByReads) {
  // SIGKILLed right after batch 1 committed, before the WAL logged that it had: the
  // batch is in the table (and the ledger) and replays as queued. Reads must not add it
  // twice while no cycle gets as far as writing it (here: the bucket table of another
  // counter is missing, so every cycle stops before it writes; reads still work).
  constexpr std::uint64_t run = 4545;
  flush::flush_batch batch;
  batch.run_id = run;
  batch.seq = 1;
  batch.rows = {{1, 120, 0, 5}};
  std::string records;
  durable::append_batches(records, std::vector{batch});
  write_segment(records);
  auto conn = server().connect(database_);
  conn.execute(
      "INSERT INTO slotted_counterd_ledger (instance_id, run_id, batch_seq, row_count) "
      "VALUES ('wal-test', " +
      std::to_string(run) + ", 1, 1)");
  conn.execute("INSERT INTO slotted_counters VALUES (1, 120, 0, 5)");
  const std::string text = daemon_yaml(server(), database_,
                                       "instance_id: wal-test\n"
                                       "accept_undeclared_types: true\n"
                                       "counters:\n"
                                       "  - {name: timed, record_type: 2, buckets: {hour: 48h}}\n"
                                       "flush: {interval: 1h, max_retry_backoff: 1h}\n"
                                       "wal: {dir: " +
                                           wal_dir_ + ", fsync: always}\n");
  // In process: the binary refuses to start on a reachable database without the table.
  in_process_daemon daemon(config::parse_config(text));
  http_client c(daemon.port());
  EXPECT_EQ(c.request("POST", "/v1/flush").status, 503u);
  const auto read = c.get("/v1/counters/1/120");
  if (read.status == 200u) {
    EXPECT_EQ(json_int(read.body, "count"), 5) << read.body;
  } else {
    EXPECT_EQ(read.status, 503u) << read.body;
  }
  // The table made, the batch is resent, the ledger says it had committed: exact again.
  std::string out;
  ASSERT_EQ(run_binary(text, "--migrate", out), 0) << out;
  ASSERT_TRUE(eventually([&] { return c.request("POST", "/v1/flush").status == 200u; }, 30s));
  const auto after = c.get("/v1/counters/1/120");
  ASSERT_EQ(after.status, 200u) << after.body;
  EXPECT_EQ(json_int(after.body, "count"), 5) << after.body;
  EXPECT_EQ(db_total(120), 5);
}

TEST_F(Wal, UnderSystemdStartUpExtendsTheStartTimeoutWhileItReplays) {
  // A replay of millions of pending keys on a slow disk can outlast TimeoutStartSec:
  // the daemon asks systemd for more time (EXTEND_TIMEOUT_USEC) while it replays and
  // snapshots, before READY=1.
  std::string records;
  durable::append_increments(records, std::vector<ingest::increment>{{1, 130, 3}});
  write_segment(records);
  notify_socket systemd(root_ + "/notify");  // NOTIFY_SOCKET for the daemon
  daemon_process daemon(yaml());
  std::vector<std::string> messages;
  ASSERT_TRUE(eventually(
      [&] {
        if (auto m = systemd.next(1s); !m.empty()) messages.push_back(std::move(m));
        return !messages.empty() && messages.back() == "READY=1";
      },
      30s))
      << daemon.log();
  ASSERT_GE(messages.size(), 2u);
  EXPECT_EQ(messages.front(), "EXTEND_TIMEOUT_USEC=30000000");
  http_client c(daemon.port());
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  EXPECT_EQ(db_total(130), 3);
}

TEST_F(Wal, IncrementPastThePendingSumBoundIsRefusedWholeAndNeverLogged) {
  // A pending sum 10 short of 2^62, as a long outage under hostile deltas could leave;
  // the database is down, so it stays pending.
  constexpr std::int64_t bound = std::int64_t{1} << 62;
  std::string records;
  durable::append_snapshot(records, {}, std::vector<store::pending_delta>{{{1, 60}, bound - 10}});
  write_segment(records);
  std::string database_down = yaml("always", "1h");
  database_down.replace(database_down.find(shared_mariadb().socket()),
                        shared_mariadb().socket().size(), root_ + "/no-such.sock");
  {
    daemon_process daemon(database_down);
    http_client c(daemon.port());
    const auto refused =
        c.post_json("/v1/increments", R"([{"record_type": 1, "record_id": 61, "delta": 5},)"
                                      R"( {"record_type": 1, "record_id": 60, "delta": 11}])");
    EXPECT_EQ(refused.status, 422u) << refused.body;
    EXPECT_NE(refused.body.find("2^62"), std::string::npos) << refused.body;
    EXPECT_EQ(
        c.post_json("/v1/increments", R"({"record_type": 1, "record_id": 60, "delta": 10})").status,
        202u);
    EXPECT_EQ(
        c.post_json("/v1/increments", R"({"record_type": 1, "record_id": 60, "delta": 1})").status,
        422u);
    daemon.signal(SIGKILL);
    daemon.wait(10s);
  }
  // The refused requests were never logged: a restart replays the accepted one only.
  daemon_process daemon(yaml("always", "1h"));
  http_client c(daemon.port());
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  EXPECT_EQ(db_total(60), bound);
  EXPECT_EQ(db_total(61), 0);
}

TEST_F(Wal, FullDiskAnswers503AndRecovers) {
  // A file-size limit makes the current segment "full" at 256 KiB.
  daemon_process daemon(yaml("always", "1h"), 256 * 1024);
  http_client c(daemon.port());
  std::vector<std::int64_t> acknowledged(50);
  std::string body;
  const auto make_body = [&](int salt) {
    body = "[";
    for (int i = 0; i < 200; ++i)
      body += std::string(i ? "," : "") + R"({"record_type": 1, "record_id": )" +
              std::to_string((i + salt) % 50) + "}";
    body += "]";
  };
  int refused = 0;
  for (int n = 0; n < 400 && refused == 0; ++n) {
    make_body(n);
    const auto r = c.post_json("/v1/increments", body);
    if (r.status == 202) {
      for (int i = 0; i < 200; ++i) acknowledged[(i + n) % 50] += 1;
    } else {
      EXPECT_EQ(r.status, 503u) << r.body;
      EXPECT_TRUE(r.headers.count("retry-after"));
      ++refused;
    }
  }
  ASSERT_EQ(refused, 1) << "the full segment never answered 503";
  EXPECT_NE(
      c.get("/metrics")
          .body.find("slotted_counterd_increments_rejected_total{reason=\"wal_unavailable\"} 200"),
      std::string::npos);
  // A flush moves on to a fresh segment and drops the full one: ingest recovers.
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  make_body(7);
  ASSERT_EQ(c.post_json("/v1/increments", body).status, 202u);
  for (int i = 0; i < 200; ++i) acknowledged[(i + 7) % 50] += 1;
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 200u);
  for (int k = 0; k < 50; ++k) EXPECT_EQ(db_total(k), acknowledged[k]) << k;
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(30s), 0);
}

INSTANTIATE_ENGINES(WalOnEngines);

}  // namespace
}  // namespace slotted::test
