// The durable path's cut (durable::committer): a take covers exactly what was logged
// before it, with the applies spread over other threads, and replay agrees with it.

#include "durable/committer.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>

#include "metrics/metrics.hpp"

namespace slotted::durable {
namespace {

namespace fs = std::filesystem;
namespace net = boost::asio;
using clock = std::chrono::steady_clock;

// The flusher's queue as the committer sees it: only what snapshots copy.
struct queue_stub : store::batch_queue {
  std::vector<store::flush_batch> queued_copy() override { return {}; }
  void retag_all(std::uint64_t) override {}
};

class Committer : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/slotted-committer-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
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
    const auto deadline = clock::now() + std::chrono::seconds(20);
    while (wal_bytes() <= before && clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_GT(wal_bytes(), before);
  }

  void takes_between_applies(config::fsync_mode mode);

  std::string root_;
  config::wal_config cfg_;
  metrics::registry metrics_;
};

TEST_F(Committer, ATakeCoversWhatWasLoggedEvenIfItsHttpThreadHasNotAppliedItYet) {
  std::vector<store::flush_batch> first, second;
  {
    store::pending_store store(4);
    wal::write_ahead_log log(cfg_, metrics_);
    log.open();
    committer c(log, store, 1000);
    queue_stub queue;
    c.start(queue);
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
  wal::write_ahead_log log(cfg_, metrics_);
  const auto recovered = log.open();
  EXPECT_TRUE(recovered.deltas.empty());
  EXPECT_EQ(batched(recovered.batches, 42), 8);
  ASSERT_EQ(recovered.batches.size(), 2u);
}

// Takes run while three HTTP loops submit (and, per mode, apply at once or once their
// group is synced); every increment ends up taken or pending, once, and replay agrees.
void Committer::takes_between_applies(config::fsync_mode mode) {
  cfg_.fsync = mode;
  constexpr int threads = 3, per_thread = 400;
  std::vector<store::flush_batch> taken;
  std::int64_t left_in_store = 0;
  {
    store::pending_store store(8);
    wal::write_ahead_log log(cfg_, metrics_);
    log.open();
    committer c(log, store, 1'000'000);
    queue_stub queue;
    c.start(queue);
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
  wal::write_ahead_log log(cfg_, metrics_);
  const auto recovered = log.open();
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
  auto log = std::make_unique<wal::write_ahead_log>(cfg_, metrics_);
  log->open();
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
  wal::write_ahead_log again(cfg_, metrics_);
  const auto recovered = again.open();
  ASSERT_EQ(recovered.deltas.size(), 1u);
  EXPECT_EQ(recovered.deltas[0].delta, 5);
}

// The same with a real asio object in the callback, as a session holds: ASan reports a
// heap-use-after-free when the committer destroys it after its loop.
TEST_F(Committer, StopLetsNoSessionOutliveItsIoContext) {
  cfg_.fsync = config::fsync_mode::always;
  store::pending_store store(4);
  wal::write_ahead_log log(cfg_, metrics_);
  log.open();
  auto c = std::make_unique<committer>(log, store, 1000);
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
  store::pending_store store(8);
  wal::write_ahead_log log(cfg_, metrics_);
  log.open();
  committer c(log, store, 10'000'000);
  queue_stub queue;
  c.start(queue);
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
    store::pending_store store(4);
    wal::write_ahead_log log(cfg_, metrics_);
    log.open();
    committer c(log, store, 1000);
    queue_stub queue;
    c.start(queue);
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
    while (!in_take) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const auto started = clock::now();
    c.submit({{1, 2, 1}}, nullptr, count);  // an HTTP loop
    const auto waited = clock::now() - started;
    disk_done = true;
    flusher.join();
    EXPECT_LT(waited, std::chrono::seconds(1)) << "the HTTP thread waited for the take";
    const auto deadline = clock::now() + std::chrono::seconds(20);
    while (answered < 2 && clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
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
    store::pending_store store(4);
    wal::write_ahead_log log(cfg_, metrics_);
    log.open();
    committer c(log, store, 1000);
    queue_stub queue;
    c.start(queue);
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
  store::pending_store store(4);
  wal::write_ahead_log log(cfg_, metrics_);
  log.open();
  committer c(log, store, 1000);
  queue_stub queue;
  c.start(queue);
  std::atomic<bool> answered{false};
  c.submit({{1, 42, 5}}, nullptr, [&](commit_result) { answered = true; });
  const auto deadline = clock::now() + std::chrono::seconds(20);
  while (!answered && clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
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
}

}  // namespace
}  // namespace slotted::durable
