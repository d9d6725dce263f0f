// The durable path's cut (durable::committer): a take covers exactly what was logged
// before it, with the applies spread over other threads, and replay agrees with it.

#include "durable/committer.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "durable/record.hpp"
#include "durable/recovery.hpp"
#include "metrics/metrics.hpp"
#include "support/batch_content.hpp"
#include "support/eventually.hpp"
#include "support/temp_dir.hpp"
#include "support/wal_stubs.hpp"

namespace slotted::durable {
namespace {

using test::increments_record;
using test::queue_stub;

namespace fs = std::filesystem;
namespace net = boost::asio;
using clock = std::chrono::steady_clock;

class Committer : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = slotted::test::make_temp_dir("committer-test");
    cfg_.dir = root_ + "/wal";
  }
  void TearDown() override { fs::remove_all(root_); }

  // Every batch row's delta for one key, over the batches `take` published.
  static std::int64_t batched(const std::vector<store::flush_batch>& batches, std::uint64_t id) {
    std::int64_t sum = 0;
    for (const auto& b : batches) {
      for (const auto& r : b.rows) {
        if (r.record_id == id) sum += r.delta;
      }
    }
    return sum;
  }

  // Takes the store's content through `c` as the flusher does (one batch, seq `seq`).
  static std::vector<store::flush_batch> take(committer& c, std::uint64_t seq) {
    std::vector<store::flush_batch> published;
    const bool ok = c.take(
        [&](std::vector<store::pending_delta>&& deltas, clock::time_point oldest) {
          store::flush_batch b;
          b.run_id = 7;
          b.seq = seq;
          b.oldest_arrival = oldest;
          for (const auto& d : deltas)
            b.rows.push_back({d.key.record_type, d.key.record_id, 0, d.delta});
          return std::vector<store::flush_batch>{std::move(b)};
        },
        [&](std::vector<store::flush_batch>&& b) { published = std::move(b); });
    EXPECT_TRUE(ok);
    return published;
  }

  // Bytes in the WAL's segments.
  std::uintmax_t wal_bytes() const {
    std::uintmax_t n = 0;
    for (const auto& e : fs::directory_iterator(cfg_.dir)) {
      if (e.path().filename().string().starts_with("wal-")) n += e.file_size();
    }
    return n;
  }

  // Waits until the WAL has grown past `before` (a group was written and synced).
  void await_logged(std::uintmax_t before) const {
    slotted::test::eventually([&] { return wal_bytes() > before; }, std::chrono::seconds(20),
                              std::chrono::milliseconds(1));
    ASSERT_GT(wal_bytes(), before);
  }

  // A pending store, its WAL (opened) and a committer over them, started with a stub of
  // the flusher's queue: where most tests here begin. Stops in the reverse order.
  // Tests name its parts as references (store, log, queue, c), not through a structured
  // binding: clang 14, which builds the TSan stage, cannot capture one in a lambda.
  struct started {
    started(const config::wal_config& cfg, metrics::registry& metrics, std::size_t shards,
            std::size_t max_pending_keys)
        : store(shards), owner(cfg, metrics), c(opened(owner), store, max_pending_keys) {
      c.start(queue);
    }
    static durable::daemon_log& opened(durable::daemon_log& owner) {
      recover(owner.log());
      return owner;
    }
    store::pending_store store;
    durable::daemon_log owner;
    wal::write_ahead_log& log = owner.log();
    queue_stub queue;
    committer c;
  };

  void takes_between_applies(config::fsync_mode mode);

  // While it lives, a file this process writes cannot grow past `bytes`: a write past
  // it fails with EFBIG (SIGXFSZ ignored meanwhile).
  class file_size_limit {
   public:
    explicit file_size_limit(std::uintmax_t bytes) {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      EXPECT_EQ(sigaction(SIGXFSZ, &ignore, &old_action_), 0);
      EXPECT_EQ(getrlimit(RLIMIT_FSIZE, &saved_), 0);
      rlimit limited = saved_;
      limited.rlim_cur = static_cast<rlim_t>(bytes);
      EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
    }
    ~file_size_limit() {
      setrlimit(RLIMIT_FSIZE, &saved_);
      sigaction(SIGXFSZ, &old_action_, nullptr);
    }
    file_size_limit(const file_size_limit&) = delete;
    file_size_limit& operator=(const file_size_limit&) = delete;

   private:
    struct sigaction old_action_ {};
    rlimit saved_{};
  };

  std::string root_;
  // always unless a test says otherwise (the tests were written when it was the default).
  config::wal_config cfg_{.dir = {},
                          .fsync = config::fsync_mode::always,
                          .fsync_interval = std::chrono::milliseconds(10)};
  metrics::registry metrics_;
};

TEST_F(Committer, ATakeCoversWhatWasLoggedEvenIfItsHttpThreadHasNotAppliedItYet) {
  std::vector<store::flush_batch> first, second;
  {
    started rig(cfg_, metrics_, 4, 1000);
    [[maybe_unused]] auto& store = rig.store;
    [[maybe_unused]] auto& log = rig.log;
    [[maybe_unused]] auto& queue = rig.queue;
    auto& c = rig.c;
    // An HTTP loop that does not run (as one busy elsewhere, or stopped at shutdown):
    // the apply posted to it waits, and the request is never answered.
    net::io_context http_loop;
    std::atomic<int> answered{0};
    auto before = wal_bytes();
    c.submit({{1, 42, 5}}, &http_loop, [&](commit_result) { ++answered; });
    await_logged(before);
    EXPECT_EQ(store.pending({1, 42}), 0) << "applied on the log thread, not the HTTP loop";
    // The batches record follows the logged increment: it must cover it.
    first = take(c, 1);
    EXPECT_EQ(batched(first, 42), 5) << "the take missed an increment logged before it";
    // Logged after the cut: not in what it covers.
    before = wal_bytes();
    c.submit({{1, 42, 3}}, &http_loop, [&](commit_result) { ++answered; });
    await_logged(before);
    // The HTTP loop runs late: answers both (the second once its group is handed
    // over, just after the write), applies nothing twice.
    const auto deadline = clock::now() + std::chrono::seconds(20);
    while (answered < 2 && clock::now() < deadline) {
      http_loop.restart();
      http_loop.run_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(answered, 2);
    EXPECT_EQ(store.pending({1, 42}), 3);
    second = take(c, 2);
    EXPECT_EQ(batched(second, 42), 3);
    c.stop();
  }
  // A crash now: replay holds each increment once, in the batch that covers it.
  store::pending_store store(4);
  durable::daemon_log log_owner(cfg_, metrics_);
  wal::write_ahead_log& log = log_owner.log();
  const auto recovered = recover(log);
  EXPECT_TRUE(recovered.deltas.empty());
  EXPECT_EQ(batched(recovered.batches, 42), 8);
  ASSERT_EQ(recovered.batches.size(), 2u);
}

// A request's items with a `client` (counters[].dedupe): their unique entries are logged
// with its other items before it is answered, held once each, taken by the next take into
// the batches it logs; replay gives back the batches and what was pending after them, and
// the snapshot of the next start holds the same.
TEST_F(Committer, AClientsUniqueEntriesAreLoggedBeforeTheAnswerAndReplayOnce) {
  const auto entry = [](std::uint64_t id, std::string client) {
    return store::unique_entry{5, id, 86400, std::move(client), 86401};
  };
  struct queue_of : store::batch_queue {
    std::vector<store::flush_batch> batches;
    std::vector<store::flush_batch> queued_copy() override { return batches; }
    void retag_all(std::uint64_t) override {}
  };
  const auto submit = [](committer& c, std::vector<ingest::increment> increments,
                         std::vector<store::unique_entry> entries) {
    std::promise<commit_result> done;
    c.submit(std::move(increments), std::move(entries), nullptr,
             [&](commit_result r) { done.set_value(r); });
    return done.get_future().get();
  };
  {
    store::pending_store store(4);
    store::pending_uniques uniques(store, 4);
    durable::daemon_log log_owner(cfg_, metrics_);
    wal::write_ahead_log& log = log_owner.log();
    recover(log);
    committer c(log_owner, store, 1000);
    c.attach_uniques(&uniques);
    queue_stub queue;
    c.start(queue);
    EXPECT_EQ(submit(c, {{1, 42, 5}}, {entry(1, "a"), entry(1, "a"), entry(2, "b")}),
              commit_result::applied);
    EXPECT_EQ(uniques.size(), 2u);
    EXPECT_EQ(store.pending({1, 42}), 5);
    // The take forms a unique batch of the entries as the flusher does.
    std::vector<store::flush_batch> published;
    ASSERT_TRUE(c.take(
        [&](std::vector<store::pending_delta>&&, clock::time_point) {
          store::flush_batch b;
          b.run_id = 7;
          b.seq = 1;
          auto& entries = test::unique_in(b).entries;
          uniques.take_all(entries);
          std::sort(entries.begin(), entries.end());
          return std::vector<store::flush_batch>{std::move(b)};
        },
        [&](std::vector<store::flush_batch>&& b) { published = std::move(b); }));
    ASSERT_EQ(published.size(), 1u);
    EXPECT_EQ(uniques.size(), 0u);
    EXPECT_EQ(submit(c, {}, {entry(3, "c")}), commit_result::applied);
    c.stop();
  }
  const auto expect_replayed = [&](const recovered& r) {
    EXPECT_EQ(r.uniques, std::vector{entry(3, "c")});
    ASSERT_EQ(r.batches.size(), 1u);
    EXPECT_EQ(test::uniques_of(r.batches[0]), (std::vector{entry(1, "a"), entry(2, "b")}));
  };
  {
    // A crash: replayed, then started again (its snapshot holds what was replayed).
    store::pending_store store(4);
    store::pending_uniques uniques(store, 4);
    durable::daemon_log log_owner(cfg_, metrics_);
    wal::write_ahead_log& log = log_owner.log();
    const auto r = recover(log);
    expect_replayed(r);
    uniques.add(r.uniques);
    committer c(log_owner, store, 1000);
    c.attach_uniques(&uniques);
    queue_of queue;
    queue.batches = r.batches;
    c.start(queue);
    c.stop();
  }
  durable::daemon_log log_owner(cfg_, metrics_);
  wal::write_ahead_log& log = log_owner.log();
  expect_replayed(recover(log));
}

// Takes run while three HTTP loops submit (and, per mode, apply at once or once their
// group is synced); every increment ends up taken or pending, once, and replay agrees.
void Committer::takes_between_applies(config::fsync_mode mode) {
  cfg_.fsync = mode;
  constexpr int threads = 3, per_thread = 400;
  std::vector<store::flush_batch> taken;
  std::int64_t left_in_store = 0;
  {
    started rig(cfg_, metrics_, 8, 1'000'000);
    [[maybe_unused]] auto& store = rig.store;
    [[maybe_unused]] auto& log = rig.log;
    [[maybe_unused]] auto& queue = rig.queue;
    auto& c = rig.c;
    std::vector<std::unique_ptr<net::io_context>> loops;
    std::vector<std::thread> runners, clients;
    for (int t = 0; t < threads; ++t) loops.push_back(std::make_unique<net::io_context>(1));
    for (int t = 0; t < threads; ++t) {
      runners.emplace_back([&, t] {
        auto guard = net::make_work_guard(*loops[t]);
        loops[t]->run();
      });
    }
    std::atomic<int> answered{0};
    for (int t = 0; t < threads; ++t) {
      clients.emplace_back([&, t] {
        for (int i = 0; i < per_thread; ++i) {
          // Submitted from the loop's own thread, as a session does.
          net::post(*loops[t], [&, t, i] {
            c.submit({{1, static_cast<std::uint64_t>(i % 10), 1}}, loops[t].get(),
                     [&](commit_result r) {
                       EXPECT_EQ(r, commit_result::applied);
                       ++answered;
                     });
          });
        }
      });
    }
    std::uint64_t seq = 1;
    while (answered < threads * per_thread) {
      auto b = take(c, seq++);
      taken.insert(taken.end(), b.begin(), b.end());
    }
    for (auto& t : clients) t.join();
    for (auto& l : loops) l->stop();
    for (auto& t : runners) t.join();
    auto b = take(c, seq++);
    taken.insert(taken.end(), b.begin(), b.end());
    for (std::uint64_t id = 0; id < 10; ++id) left_in_store += store.pending({1, id});
    c.stop();
  }
  std::int64_t total = 0;
  for (std::uint64_t id = 0; id < 10; ++id) total += batched(taken, id);
  EXPECT_EQ(total + left_in_store, threads * per_thread);
  // Replay agrees with what was taken: every batch as logged, nothing pending twice.
  durable::daemon_log log_owner(cfg_, metrics_);
  wal::write_ahead_log& log = log_owner.log();
  const auto recovered = recover(log);
  std::int64_t replayed = 0;
  for (const auto& d : recovered.deltas) replayed += d.delta;
  for (std::uint64_t id = 0; id < 10; ++id) replayed += batched(recovered.batches, id);
  EXPECT_EQ(replayed, threads * per_thread);
}

TEST_F(Committer, TakesBetweenGroupsAppliedOnSeveralThreadsLoseAndDoubleNothing) {
  takes_between_applies(config::fsync_mode::always);
}

TEST_F(Committer, TakesBetweenInlineAppendsOnSeveralThreadsLoseAndDoubleNothing) {
  takes_between_applies(config::fsync_mode::never);
}

// A group written after its HTTP loop stopped (a sync that stalled past the shutdown
// deadline) is posted to that loop and never run there. ~application destroys the loops
// before the committer: stop() must leave nothing of that group's answer callbacks (a
// session: its socket and timer belong to the loop) for the committer to destroy later.
TEST_F(Committer, StopKeepsNoAnswerCallbackOfAStoppedLoop) {
  cfg_.fsync = config::fsync_mode::always;
  store::pending_store store(4);
  auto log = std::make_unique<durable::daemon_log>(cfg_, metrics_);
  recover(log->log());
  auto c = std::make_unique<committer>(*log, store, 1000);
  queue_stub queue;
  c->start(queue);
  auto loop = std::make_unique<net::io_context>(1);
  loop->stop();  // run_until_stopped: the HTTP loops stop first
  std::weak_ptr<int> held;
  {
    auto session = std::make_shared<int>(0);
    held = session;
    const auto before = wal_bytes();
    c->submit({{1, 42, 5}}, loop.get(), [session](commit_result) {});
    await_logged(before);
  }
  c->stop();  // the final flush found the database down: no take, no drain
  EXPECT_EQ(store.pending({1, 42}), 5) << "stop() applies what is logged";
  loop.reset();  // ~application: contexts_ go before committer_
  EXPECT_TRUE(held.expired()) << "the committer still holds a request's answer callback "
                                 "after stop(), past the life of its HTTP loop";
  c.reset();
  log.reset();
  // Never answered: it replays from the WAL.
  durable::daemon_log again_owner(cfg_, metrics_);
  wal::write_ahead_log& again = again_owner.log();
  const auto recovered = recover(again);
  ASSERT_EQ(recovered.deltas.size(), 1u);
  EXPECT_EQ(recovered.deltas[0].delta, 5);
}

// The same with a real asio object in the callback, as a session holds: ASan reports a
// heap-use-after-free when the committer destroys it after its loop.
TEST_F(Committer, StopLetsNoSessionOutliveItsIoContext) {
  cfg_.fsync = config::fsync_mode::always;
  store::pending_store store(4);
  durable::daemon_log log_owner(cfg_, metrics_);
  wal::write_ahead_log& log = log_owner.log();
  recover(log);
  auto c = std::make_unique<committer>(log_owner, store, 1000);
  queue_stub queue;
  c->start(queue);
  auto loop = std::make_unique<net::io_context>(1);
  loop->stop();
  {
    auto timer = std::make_shared<net::steady_timer>(*loop);  // a session's deadline timer
    const auto before = wal_bytes();
    c->submit({{1, 42, 5}}, loop.get(), [timer](commit_result) {});
    await_logged(before);
  }
  c->stop();
  loop.reset();
  c.reset();
}

// wal.fsync never: the HTTP threads append and nothing else wakes the log thread while
// nothing is taken (a database outage, the case snapshots exist for); it must still
// replace the segments with a snapshot once they grow past the slack, or the WAL grows
// without bound (README: Durability).
TEST_F(Committer, NeverModeSnapshotsDuringAnOutage) {
  cfg_.fsync = config::fsync_mode::never;
  started rig(cfg_, metrics_, 8, 10'000'000);
  [[maybe_unused]] auto& store = rig.store;
  [[maybe_unused]] auto& log = rig.log;
  [[maybe_unused]] auto& queue = rig.queue;
  auto& c = rig.c;
  std::vector<ingest::increment> one;
  for (std::uint64_t id = 0; id < 100'000; ++id) one.push_back({1, id, 1});
  // 45 x 100k increments: about 72 MB logged (past the 64 MiB slack), 2 MB pending.
  std::atomic<int> applied{0};
  for (int i = 0; i < 45; ++i) {
    auto copy = one;
    c.submit(std::move(copy), nullptr, [&](commit_result r) {
      EXPECT_EQ(r, commit_result::applied);
      ++applied;
    });
  }
  const auto deadline = clock::now() + std::chrono::seconds(20);
  while ((applied < 45 || wal_bytes() > (64u << 20)) && clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(applied, 45);
  EXPECT_LT(wal_bytes(), 64u << 20) << "no snapshot: the WAL only grows";
  c.stop();
  EXPECT_EQ(store.pending({1, 99'999}), 45);
}

// wal.fsync never/interval: the log thread holds the log through a whole take (rotate,
// the old segment's fsync, the synced batches record) and snapshot. An HTTP thread must
// not wait for that (its loop serves /healthz and the watchdog ping): it queues, and the
// cut still covers each request exactly once. form() stands in for the slow disk.
TEST_F(Committer, InlineSubmitDoesNotWaitForATakeOnTheLogThread) {
  for (auto mode : {config::fsync_mode::never, config::fsync_mode::interval}) {
    SCOPED_TRACE(mode == config::fsync_mode::never ? "never" : "interval");
    fs::remove_all(cfg_.dir);
    cfg_.fsync = mode;
    started rig(cfg_, metrics_, 4, 1000);
    [[maybe_unused]] auto& store = rig.store;
    [[maybe_unused]] auto& log = rig.log;
    [[maybe_unused]] auto& queue = rig.queue;
    auto& c = rig.c;
    std::atomic<int> answered{0};
    const auto count = [&](commit_result r) {
      EXPECT_EQ(r, commit_result::applied);
      ++answered;
    };
    c.submit({{1, 1, 1}}, nullptr, count);
    std::atomic<bool> in_take{false}, disk_done{false};
    std::vector<store::flush_batch> first;
    std::thread flusher([&] {
      EXPECT_TRUE(c.take(
          [&](std::vector<store::pending_delta>&& deltas, clock::time_point) {
            in_take = true;
            const auto until = clock::now() + std::chrono::seconds(5);
            while (!disk_done && clock::now() < until)  // a slow fsync
              std::this_thread::sleep_for(std::chrono::milliseconds(1));
            store::flush_batch b;
            b.run_id = 7;
            b.seq = 1;
            for (const auto& d : deltas)
              b.rows.push_back({d.key.record_type, d.key.record_id, 0, d.delta});
            return std::vector<store::flush_batch>{std::move(b)};
          },
          [&](std::vector<store::flush_batch>&& b) { first = std::move(b); }));
    });
    EXPECT_TRUE(slotted::test::eventually([&] { return in_take.load(); }, std::chrono::seconds(20),
                                          std::chrono::milliseconds(1)));
    const auto started = clock::now();
    c.submit({{1, 2, 1}}, nullptr, count);  // an HTTP loop
    const auto waited = clock::now() - started;
    disk_done = true;
    flusher.join();
    EXPECT_LT(waited, std::chrono::seconds(1)) << "the HTTP thread waited for the take";
    slotted::test::eventually([&] { return answered >= 2; }, std::chrono::seconds(20),
                              std::chrono::milliseconds(1));
    EXPECT_EQ(answered, 2);
    // Queued during the take: after its cut, in the next one.
    EXPECT_EQ(batched(first, 1), 1);
    EXPECT_EQ(batched(first, 2), 0);
    const auto second = take(c, 2);
    EXPECT_EQ(batched(second, 1), 0);
    EXPECT_EQ(batched(second, 2), 1);
    c.stop();
  }
}

// slotted_counterd_wal_bytes follows the appends, not only snapshots and releases:
// during a database outage (no release) it must show the segments growing.
TEST_F(Committer, WalBytesGaugeFollowsAppends) {
  for (auto mode : {config::fsync_mode::always, config::fsync_mode::never}) {
    SCOPED_TRACE(mode == config::fsync_mode::always ? "always" : "never");
    fs::remove_all(cfg_.dir);
    cfg_.fsync = mode;
    started rig(cfg_, metrics_, 4, 1000);
    [[maybe_unused]] auto& store = rig.store;
    [[maybe_unused]] auto& log = rig.log;
    [[maybe_unused]] auto& queue = rig.queue;
    auto& c = rig.c;
    const auto after_start = wal_bytes();
    EXPECT_EQ(metrics_.wal_bytes.Value(), static_cast<double>(after_start));
    std::atomic<int> answered{0};
    for (int i = 0; i < 100; ++i)
      c.submit({{1, 42, 1}}, nullptr, [&](commit_result) { ++answered; });
    const auto deadline = clock::now() + std::chrono::seconds(20);
    while (answered < 100 && clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(answered, 100);
    EXPECT_GT(wal_bytes(), after_start);
    EXPECT_EQ(metrics_.wal_bytes.Value(), static_cast<double>(wal_bytes()));
    c.stop();
  }
}

// Once stop() began nothing may be logged but what was queued before: a take that ran
// anyway (on its caller's thread) could overtake a release still queued, which would
// then log the take's batches as committed, and a replay would drop them. It takes
// nothing and leaves the store as it was.
TEST_F(Committer, ATakeAfterStopTakesNothing) {
  started rig(cfg_, metrics_, 4, 1000);
  [[maybe_unused]] auto& store = rig.store;
  [[maybe_unused]] auto& log = rig.log;
  [[maybe_unused]] auto& queue = rig.queue;
  auto& c = rig.c;
  std::atomic<bool> answered{false};
  c.submit({{1, 42, 5}}, nullptr, [&](commit_result) { answered = true; });
  ASSERT_TRUE(slotted::test::eventually([&] { return answered.load(); }, std::chrono::seconds(20)));
  c.stop();
  bool formed = false;
  EXPECT_FALSE(c.take(
      [&](std::vector<store::pending_delta>&&, clock::time_point) {
        formed = true;
        return std::vector<store::flush_batch>{};
      },
      [](std::vector<store::flush_batch>&&) {}));
  EXPECT_FALSE(formed);
  EXPECT_EQ(store.pending({1, 42}), 5);
  EXPECT_FALSE(c.batches_logged_committed());
  // A request submitted now is answered at once, as a stop (HTTP: 503 draining), not as
  // a WAL that cannot be written; nothing of it is applied.
  std::optional<commit_result> late;
  c.submit({{1, 43, 1}}, nullptr, [&](commit_result r) { late = r; });
  EXPECT_EQ(late, commit_result::stopping);
  EXPECT_EQ(store.pending({1, 43}), 0);
}


// Group commit with a leader (README: Design, Durable path): the requests submitted in
// one turn of an HTTP loop, and those queued while another loop writes, go to the log
// with one pwrite, written by an HTTP thread, not the log thread.
class CommitterGroup : public Committer {
 protected:
  // The segment being appended to (the newest).
  std::string current_segment() const {
    std::string newest;
    for (const auto& e : fs::directory_iterator(cfg_.dir)) {
      const auto name = e.path().filename().string();
      if (name.starts_with("wal-") && name.ends_with(".log") && e.path().string() > newest)
        newest = e.path().string();
    }
    return newest;
  }
  static std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  // The record ids of the single-increment records in `data` (whole records only).
  static std::set<std::uint64_t> ids_in(std::string_view data, durable::scan_result* scan = nullptr) {
    durable::replay_state state;
    const auto result = durable::scan_segment(data, state);
    if (scan != nullptr) *scan = result;
    std::set<std::uint64_t> ids;
    for (const auto& d : state.deltas()) {
      if (d.delta != 0) ids.insert(d.key.record_id);
    }
    return ids;
  }

  // HTTP loops on their own threads, as application runs them.
  struct loops {
    explicit loops(int n) {
      for (int i = 0; i < n; ++i) contexts.push_back(std::make_unique<net::io_context>(1));
      for (auto& c : contexts) {
        threads.emplace_back([ctx = c.get()] {
          auto guard = net::make_work_guard(*ctx);
          ctx->run();
        });
      }
    }
    ~loops() {
      for (auto& c : contexts) c->stop();
      for (auto& t : threads) t.join();
    }
    std::vector<std::unique_ptr<net::io_context>> contexts;
    std::vector<std::thread> threads;
  };

  static void await(const std::atomic<int>& n, int target) {
    slotted::test::eventually([&] { return n >= target; }, std::chrono::seconds(30),
                              std::chrono::milliseconds(1));
    ASSERT_EQ(n, target);
  }
};

// Three loops submit bursts at once (wal.fsync always). Each answer comes only once the
// request's record is in the part of the file the last fdatasync covered; and the loops'
// requests share writes: fewer pwrites and syncs than requests, none by the log thread.
// Without grouping (a write per request) writes == requests; answered before the sync,
// the record is not yet in the synced prefix.
TEST_F(CommitterGroup, ConcurrentAppendsAreAnsweredOnlyOnceWrittenAndSyncedAndShareWrites) {
  cfg_.fsync = config::fsync_mode::always;
  constexpr int threads = 3, bursts = 5, per_burst = 16;
  constexpr int total = threads * bursts * per_burst;
  started rig(cfg_, metrics_, 8, 1'000'000);
  [[maybe_unused]] auto& store = rig.store;
  [[maybe_unused]] auto& log = rig.log;
  [[maybe_unused]] auto& queue = rig.queue;
  auto& c = rig.c;
  const auto segment = current_segment();
  const auto writes_before = log.writes();
  const auto syncs_before = log.syncs();
  std::atomic<int> answered{0}, unsynced_answers{0};
  {
    loops http(threads);
    for (int b = 0; b < bursts; ++b) {
      for (int t = 0; t < threads; ++t) {
        // One handler submitting a burst: one loop turn, as several connections' requests.
        net::post(*http.contexts[t], [&, t, b] {
          for (int i = 0; i < per_burst; ++i) {
            const std::uint64_t id = static_cast<std::uint64_t>((t * bursts + b) * per_burst + i);
            c.submit({{1, id, 1}}, http.contexts[t].get(), [&, id](commit_result r) {
              EXPECT_EQ(r, commit_result::applied);
              const auto synced = log.synced_bytes();
              const auto data = read_all(segment);
              if (synced > data.size() ||
                  !ids_in(std::string_view(data).substr(0, synced)).contains(id))
                ++unsynced_answers;
              ++answered;
            });
          }
        });
      }
    }
    await(answered, total);
  }
  EXPECT_EQ(unsynced_answers, 0) << "answered before its record was written and synced";
  const auto writes = log.writes() - writes_before;
  const auto syncs = log.syncs() - syncs_before;
  EXPECT_LT(writes, static_cast<std::uint64_t>(total) / 4) << "no grouping";
  EXPECT_LE(syncs, writes);
  EXPECT_EQ(c.grouped_requests(), static_cast<std::uint64_t>(total));
  EXPECT_EQ(c.groups(), writes);
  // The log thread's safety net (a queue seen twice, 250 ms apart, with no progress) may
  // write a group when a sanitized build on a loaded machine is slow (seen once under
  // TSan); a hand-off per group would be most of them.
  EXPECT_LE(c.log_thread_groups(), 2u) << "the log thread wrote groups: a hand-off per group";
  c.stop();
  for (std::uint64_t id = 0; id < total; ++id) ASSERT_EQ(store.pending({1, id}), 1) << id;
}

// The requests of one loop turn go out with one write, done by that loop's thread, which
// also answers them: no other thread takes part (wal.fsync never and always).
TEST_F(CommitterGroup, ALoopTurnIsOneWriteByTheLoopItself) {
  for (auto mode : {config::fsync_mode::never, config::fsync_mode::always}) {
    SCOPED_TRACE(mode == config::fsync_mode::never ? "never" : "always");
    fs::remove_all(cfg_.dir);
    cfg_.fsync = mode;
    started rig(cfg_, metrics_, 4, 1000);
    [[maybe_unused]] auto& store = rig.store;
    [[maybe_unused]] auto& log = rig.log;
    [[maybe_unused]] auto& queue = rig.queue;
    auto& c = rig.c;
    const auto writes_before = log.writes();
    std::atomic<int> answered{0}, elsewhere{0};
    {
      loops http(1);
      const auto loop_thread = http.threads[0].get_id();
      net::post(*http.contexts[0], [&] {
        for (std::uint64_t id = 0; id < 50; ++id) {
          c.submit({{1, id, 1}}, http.contexts[0].get(), [&](commit_result r) {
            EXPECT_EQ(r, commit_result::applied);
            if (std::this_thread::get_id() != loop_thread) ++elsewhere;
            ++answered;
          });
        }
      });
      await(answered, 50);
    }
    EXPECT_EQ(elsewhere, 0) << "answered on another thread than the loop's";
    EXPECT_EQ(log.writes() - writes_before, 1u) << "a turn's requests took several writes";
    EXPECT_EQ(c.groups(), 1u);
    EXPECT_EQ(c.log_thread_groups(), 0u);
    EXPECT_EQ(store.pending({1, 49}), 1);
    c.stop();
  }
}

// A leader whose pwrite fails (here: a file size limit cuts it after part of the group)
// fails its whole group: none of it is answered applied, none applied, the segment cut
// back to where the group began; the next group is written again.
TEST_F(CommitterGroup, AFailedWriteFailsTheWholeGroup) {
  cfg_.fsync = config::fsync_mode::always;
  started rig(cfg_, metrics_, 4, 1000);
  [[maybe_unused]] auto& store = rig.store;
  [[maybe_unused]] auto& log = rig.log;
  [[maybe_unused]] auto& queue = rig.queue;
  auto& c = rig.c;
  const auto segment = current_segment();
  loops http(1);
  std::atomic<int> answered{0}, applied{0};
  const auto burst = [&](std::uint64_t first, int n) {
    net::post(*http.contexts[0], [&, first, n] {
      for (int i = 0; i < n; ++i) {
        c.submit({{1, first + static_cast<std::uint64_t>(i), 1}}, http.contexts[0].get(),
                 [&](commit_result r) {
                   if (r == commit_result::applied) ++applied;
                   ++answered;
                 });
      }
    });
  };
  const auto empty = fs::file_size(segment);
  burst(1000, 1);
  await(answered, 1);
  const auto before = fs::file_size(segment);
  const auto record = before - empty;
  ASSERT_GT(record, 0u);
  // Room for one and a half records of the next group: the pwrite writes part, then fails.
  const auto groups_before = c.groups();
  {
    const file_size_limit limit(before + record + record / 2);
    burst(0, 10);
    await(answered, 11);
  }
  EXPECT_EQ(applied, 1) << "a request of the failed group was answered applied";
  EXPECT_EQ(c.groups() - groups_before, 1u) << "the ten were not one group";
  for (std::uint64_t id = 0; id < 10; ++id) EXPECT_EQ(store.pending({1, id}), 0) << id;
  EXPECT_EQ(fs::file_size(segment), before) << "the partial group was not cut back";
  burst(2000, 3);
  await(answered, 14);
  EXPECT_EQ(applied, 4);
  c.stop();
  const auto ids = ids_in(read_all(segment));
  EXPECT_EQ(ids, (std::set<std::uint64_t>{1000, 2000, 2001, 2002}));
}

// A crash in the middle of a group's pwrite leaves any prefix of its bytes. Replay keeps
// the whole records of that prefix and cuts the rest; every request answered before
// (earlier groups, all of them whole) is kept.
TEST_F(CommitterGroup, AGroupCutMidWriteReplaysWholeRecordsOnly) {
  cfg_.fsync = config::fsync_mode::always;
  constexpr int per_group = 10;
  std::string segment;
  std::uintmax_t acked_end = 0, group_end = 0;
  {
    started rig(cfg_, metrics_, 4, 1000);
    [[maybe_unused]] auto& store = rig.store;
    [[maybe_unused]] auto& log = rig.log;
    [[maybe_unused]] auto& queue = rig.queue;
    auto& c = rig.c;
    segment = current_segment();
    loops http(1);
    std::atomic<int> answered{0};
    for (std::uint64_t g = 0; g < 2; ++g) {
      net::post(*http.contexts[0], [&, g] {
        for (std::uint64_t i = 0; i < per_group; ++i) {
          c.submit({{1, g * 100 + i, 1}}, http.contexts[0].get(), [&](commit_result r) {
            EXPECT_EQ(r, commit_result::applied);
            ++answered;
          });
        }
      });
      await(answered, per_group * static_cast<int>(g + 1));
      if (g == 0) acked_end = fs::file_size(segment);
    }
    group_end = fs::file_size(segment);
    EXPECT_EQ(c.groups(), 2u);
    c.stop();
  }
  ASSERT_GT(group_end, acked_end);
  const auto record = (group_end - acked_end) / per_group;
  ASSERT_EQ(record * per_group, group_end - acked_end);
  const auto whole = read_all(segment);
  const std::string copy_dir = root_ + "/cut";
  // Each record boundary, and every fifth offset in between.
  for (auto cut = acked_end; cut < group_end;) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    fs::remove_all(copy_dir);
    fs::create_directories(copy_dir);
    {
      std::ofstream out(copy_dir + "/" + fs::path(segment).filename().string(), std::ios::binary);
      out.write(whole.data(), static_cast<std::streamsize>(cut));
    }
    config::wal_config cut_cfg = cfg_;
    cut_cfg.dir = copy_dir;
    durable::daemon_log replay_owner(cut_cfg, metrics_);
    wal::write_ahead_log& replay = replay_owner.log();
    const auto recovered = recover(replay);
    std::set<std::uint64_t> ids;
    for (const auto& d : recovered.deltas) {
      ASSERT_EQ(d.delta, 1);
      ids.insert(d.key.record_id);
    }
    const auto kept = (cut - acked_end) / record;
    ASSERT_EQ(ids.size(), per_group + kept) << "replay kept a part record, or lost a whole one";
    for (std::uint64_t i = 0; i < per_group; ++i) ASSERT_TRUE(ids.contains(i)) << "acknowledged " << i;
    for (std::uint64_t i = 0; i < kept; ++i) ASSERT_TRUE(ids.contains(100 + i));
    EXPECT_EQ(fs::file_size(copy_dir + "/" + fs::path(segment).filename().string()),
              acked_end + kept * record)
        << "the torn tail was not cut back to the last whole record";
    const auto in_record = (cut - acked_end) % record;
    cut += (in_record == 0 || in_record >= record - 2) ? 1 : 5;
  }
}

// An exception while a leader leads (here injected before its group's write; in the
// daemon a bad_alloc queuing, dispatching or applying) ends the process with a log line.
// Left to propagate, it left leading_ set for good: no later lead wrote anything, stop()
// waited for ever, the group's requests were never answered.
TEST_F(CommitterGroup, ALeaderExceptionDoesNotWedgeTheQueue) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  cfg_.fsync = config::fsync_mode::never;
  store::pending_store store(2);
  durable::daemon_log log_owner(cfg_, metrics_);
  wal::write_ahead_log& log = log_owner.log();
  recover(log);
  committer c(log_owner, store, 1000);
  c.set_group_hook_for_test([] { throw std::runtime_error("injected"); });
  queue_stub queue;
  c.start(queue);
  // Submitted off any loop: this thread leads at once.
  EXPECT_DEATH(c.submit({{1, 1, 1}}, nullptr, [](commit_result) {}),
               "exception while writing a group, terminating: injected");
  c.set_group_hook_for_test({});
  c.stop();
}

// Closed-loop load on two HTTP loops, with more queued at any time than one group takes
// (max_group_bytes), while a take's form() holds the log 50 ms: the loops' leaders find
// the log held and leave their groups to the log thread. The log thread must not stay
// leader for as long as there is load: a second take (a task on the log thread) returns
// within seconds, and with wal.fsync interval the periodic sync goes on.
TEST_F(CommitterGroup, ATakeIsNotStarvedWhileTheLogThreadLeads) {
  for (auto mode : {config::fsync_mode::always, config::fsync_mode::interval}) {
    SCOPED_TRACE(mode == config::fsync_mode::always ? "always" : "interval");
    fs::remove_all(cfg_.dir);
    cfg_.fsync = mode;
    started rig(cfg_, metrics_, 4, 1'000'000);
    [[maybe_unused]] auto& store = rig.store;
    [[maybe_unused]] auto& log = rig.log;
    [[maybe_unused]] auto& queue = rig.queue;
    auto& c = rig.c;
    // Requests of about 0.4 max_group_bytes (two to a group: few end-of-turn leads that
    // could take the lead back between two groups), four outstanding per loop: more
    // queued at any time than one group takes.
    std::vector<ingest::increment> probe;
    for (std::uint64_t i = 0; i < 1000; ++i) probe.push_back({1, i, 1});
    std::string probe_record;
    durable::append_increments(probe_record, probe);
    const std::uint64_t per_request = committer::max_group_bytes * 2 / 5 * 1000 / probe_record.size();
    std::vector<ingest::increment> one;
    for (std::uint64_t i = 0; i < per_request; ++i) one.push_back({1, i, 1});
    constexpr int outstanding = 4;
    std::atomic<bool> load{true};
    std::atomic<int> in_flight{0};
    loops http(2);
    std::function<void(int)> submit_one = [&](int t) {
      ++in_flight;
      c.submit(std::vector<ingest::increment>(one), http.contexts[t].get(),
               [&, t](commit_result r) {
                 EXPECT_EQ(r, commit_result::applied);
                 --in_flight;
                 if (load) submit_one(t);
               });
    };
    for (int t = 0; t < 2; ++t) {
      net::post(*http.contexts[t], [&, t] {
        for (int i = 0; i < outstanding; ++i) submit_one(t);
      });
    }
    const auto groups_started = [&] { return c.groups() >= 4; };
    for (auto deadline = clock::now() + std::chrono::seconds(20);
         !groups_started() && clock::now() < deadline;)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(groups_started());
    const auto noop_publish = [](std::vector<store::flush_batch>&&) {};
    // A loop may win the lead back as the take ends: tried until the log thread leads.
    for (int attempt = 0; attempt < 40 && c.log_thread_groups() == 0; ++attempt) {
      ASSERT_TRUE(c.take(
          [](std::vector<store::pending_delta>&&, clock::time_point) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            return std::vector<store::flush_batch>{};
          },
          noop_publish));
      for (auto deadline = clock::now() + std::chrono::milliseconds(100);
           c.log_thread_groups() == 0 && clock::now() < deadline;)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const auto log_thread_groups = c.log_thread_groups();
    const auto syncs = log.syncs();
    auto second = std::async(std::launch::async, [&] {
      return c.take([](std::vector<store::pending_delta>&&,
                       clock::time_point) { return std::vector<store::flush_batch>{}; },
                    noop_publish);
    });
    const bool in_time = second.wait_for(std::chrono::seconds(3)) == std::future_status::ready;
    // Interval syncs go on under the load (checked before the load stops).
    bool synced = false;
    for (auto deadline = clock::now() + std::chrono::seconds(2);
         !synced && clock::now() < deadline;) {
      synced = log.syncs() > syncs;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    load = false;
    EXPECT_TRUE(in_time) << "the second take waited for the load to stop";
    EXPECT_TRUE(second.get());
    EXPECT_TRUE(synced) << "no sync under the load after the take";
    EXPECT_GT(log_thread_groups, 0u) << "the log thread never led: the test tests nothing";
    for (auto deadline = clock::now() + std::chrono::seconds(20);
         in_flight > 0 && clock::now() < deadline;)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(in_flight, 0);
    c.stop();
  }
}

// A request queued on its loop whose end-of-turn lead never runs (the loop stopped in
// that turn, as at shutdown) is not left queued until the next task or stop(): the log
// thread looks at the queue at least every 250 ms and writes what no leader took
// (wal.fsync always and never, where nothing else wakes it).
TEST_F(CommitterGroup, ARequestStrandedOnAStoppedLoopIsWrittenByTheLogThread) {
  for (auto mode : {config::fsync_mode::never, config::fsync_mode::always}) {
    SCOPED_TRACE(mode == config::fsync_mode::never ? "never" : "always");
    fs::remove_all(cfg_.dir);
    cfg_.fsync = mode;
    started rig(cfg_, metrics_, 2, 1000);
    [[maybe_unused]] auto& store = rig.store;
    [[maybe_unused]] auto& log = rig.log;
    [[maybe_unused]] auto& queue = rig.queue;
    auto& c = rig.c;
    {
      loops http(1);
      net::post(*http.contexts[0], [&] {
        c.submit({{1, 7, 1}}, http.contexts[0].get(), [](commit_result) {});
        http.contexts[0]->stop();  // the posted lead never runs
      });
      for (auto deadline = clock::now() + std::chrono::seconds(5);
           c.groups() == 0 && clock::now() < deadline;)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      EXPECT_EQ(c.groups(), 1u) << "the request stayed queued";
      EXPECT_EQ(c.log_thread_groups(), c.groups());
      c.stop();  // applies what the stopped loop did not
    }
    EXPECT_EQ(store.pending({1, 7}), 1);
  }
}

// The WAL reports a failure as a code of the daemon's category (model/errc.hpp) with
// the call and errno's text as its detail: a write it cannot make is wal_write_failed, a
// sync wal_sync_failed, and a batches record that does not fit (a file size limit) is
// wal_write_failed too, the log then writable again.
TEST_F(Committer, WalFailuresAreTheirCodesWithTheCause) {
  durable::daemon_log log_owner(cfg_, metrics_);
  wal::write_ahead_log& log = log_owner.log();
  recover(log);
  const auto tag = durable::log_snapshot(log, {}, {});
  ASSERT_TRUE(tag) << tag.failed().detail;
  log.set_fault_for_test([](std::string_view call) { return call == "write" || call == "fdatasync"; });
  const auto appended = log.append("x", false);
  ASSERT_FALSE(appended);
  EXPECT_EQ(appended.error(), errc::wal_write_failed);
  EXPECT_EQ(appended.failed().detail, std::string("write: ") + std::strerror(ENOSPC));
  const auto synced = log.sync();
  ASSERT_FALSE(synced);
  EXPECT_EQ(synced.error(), errc::wal_sync_failed);
  EXPECT_EQ(synced.failed().detail, std::string("fdatasync: ") + std::strerror(EIO));
  log.set_fault_for_test({});

  std::vector<store::flush_batch> batches(1);
  batches[0].run_id = 7;
  batches[0].seq = 1;
  for (std::uint64_t id = 0; id < 20; ++id) batches[0].rows.push_back({1, id, 0, 1});
  const auto logged = [&] {
    const file_size_limit limit(64);  // the new segment's header fits, its record does not
    return durable::log_batches(log, batches);
  }();
  ASSERT_FALSE(logged);
  EXPECT_EQ(logged.error(), errc::wal_write_failed);
  EXPECT_EQ(logged.failed().detail, std::string("write: ") + std::strerror(EFBIG));
  const auto again = durable::log_batches(log, batches);
  EXPECT_TRUE(again) << again.failed().detail;
}

// What a replay of `log` applies, summed by record_id.
std::map<std::uint64_t, std::int64_t> replayed_by_id(wal::write_ahead_log& log) {
  std::map<std::uint64_t, std::int64_t> by_id;
  for (const auto& d : recover(log).deltas) by_id[d.key.record_id] += d.delta;
  return by_id;
}

// A failed sync cuts its append back, so the record of a request answered refused never
// replays; when the cut fails too, the process ends (no answer) rather than leave such a
// record in the file.
TEST_F(Committer, AFailedSyncCutsItsRecordBackOrEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  {
    durable::daemon_log log_owner(cfg_, metrics_);
    wal::write_ahead_log& log = log_owner.log();
    recover(log);
    ASSERT_TRUE(durable::log_snapshot(log, {}, {}));  // a segment to append to
    ASSERT_TRUE(log.append(increments_record(1, 2), true));
    log.set_fault_for_test([](std::string_view call) { return call == "fdatasync"; });
    const auto refused = log.append(increments_record(2, 5), true);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error(), errc::wal_sync_failed);
    log.set_fault_for_test(
        [](std::string_view call) { return call == "fdatasync" || call == "truncate"; });
    EXPECT_DEATH(static_cast<void>(log.append(increments_record(3, 7), true)),
                 "cannot cut .* back to [0-9]+ bytes after a failed append");
    log.set_fault_for_test({});
  }
  // Replayed: the record appended before, not the refused one.
  durable::daemon_log log_owner(cfg_, metrics_);
  wal::write_ahead_log& log = log_owner.log();
  EXPECT_EQ(replayed_by_id(log), (std::map<std::uint64_t, std::int64_t>{{1, 2}}));
}

TEST_F(Committer, TheCutAfterAFailedSyncIsSyncedItself) {
  durable::daemon_log log_owner(cfg_, metrics_);
  wal::write_ahead_log& log = log_owner.log();
  recover(log);
  ASSERT_TRUE(durable::log_snapshot(log, {}, {}));
  const std::string one = increments_record(1, 1);
  ASSERT_TRUE(log.append(one, true));
  std::vector<std::string> calls;
  int syncs = 0;
  log.set_fault_for_test([&](std::string_view call) {
    calls.emplace_back(call);
    return call == "fdatasync" && ++syncs == 1;  // the append's own sync fails, no other
  });
  ASSERT_FALSE(log.append(one, true));
  log.set_fault_for_test({});
  // Until a sync covers the cut, a power loss could bring the refused record back.
  EXPECT_EQ(calls, (std::vector<std::string>{"short write", "write", "fdatasync", "truncate",
                                             "fdatasync"}));
}

TEST_F(Committer, APartWrittenAppendIsCutBackAndTheCutSynced) {
  {
    durable::daemon_log log_owner(cfg_, metrics_);
    wal::write_ahead_log& log = log_owner.log();
    recover(log);
    ASSERT_TRUE(durable::log_snapshot(log, {}, {}));
    ASSERT_TRUE(log.append(increments_record(1, 3), true));
    std::vector<std::string> calls;
    int writes = 0;
    log.set_fault_for_test([&](std::string_view call) {
      calls.emplace_back(call);
      if (call == "short write") return true;   // half of what is left, each time
      return call == "write" && ++writes == 2;  // the disk fills after the first half
    });
    const auto refused = log.append(increments_record(2, 5), false);
    log.set_fault_for_test({});
    ASSERT_FALSE(refused);
    EXPECT_EQ(calls, (std::vector<std::string>{"short write", "write", "short write", "write",
                                               "truncate", "fdatasync"}));
  }
  // Replayed: the first record, nothing of the half-written one.
  durable::daemon_log log_owner(cfg_, metrics_);
  wal::write_ahead_log& log = log_owner.log();
  EXPECT_EQ(replayed_by_id(log), (std::map<std::uint64_t, std::int64_t>{{1, 3}}));
}

}  // namespace
}  // namespace slotted::durable
