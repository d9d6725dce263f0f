// The flusher answers with results whose failures are codes of the daemon's one
// category (model/errc.hpp), the texts as before: a read while a batch is in doubt is
// not_exact_yet, a flush or a reset without the database is database_unavailable (the
// database's message in the detail), and either after stop() is draining; so is a
// rollup.

#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "app/application.hpp"
#include "flush/flusher.hpp"
#include "rollup/rollup.hpp"
#include "support/daemon_process.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

flush::settings flusher_settings() {
  flush::settings s;
  s.instance_id = "results";
  s.table = "slotted_counters";
  s.interval = 1h;
  s.max_retry_backoff = 100ms;
  return s;
}

// A database that is not there: nothing listens on port 1, a connection is refused at
// once.
db::connect_options nowhere() {
  db::connect_options o;
  o.host = "127.0.0.1";
  o.port = 1;
  o.connect_timeout = 2s;
  return o;
}

// What `request` (request_flush, request_reset, a roller's request) answers its
// callback, waited for up to a minute.
template <typename Result, typename Request>
Result answer_of(Request request) {
  std::promise<Result> answered;
  auto answer = answered.get_future();
  request([&answered](const Result& r) { answered.set_value(r); });
  EXPECT_EQ(answer.wait_for(60s), std::future_status::ready);
  return answer.get();
}

TEST(FlushResults, AReadWhileABatchIsInDoubtIsNotExactYet) {
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  metrics::registry metrics;
  store::pending_store store{8};
  db::pool pool(connect_options_for(test_config(server, database).mysql), 2);
  flush::flusher f(flusher_settings(), store, pool, metrics);
  // Recovered from the WAL, the batch is in doubt until the ledger answers for it; the
  // flusher is not started, so it stays in doubt.
  store::flush_batch b;
  b.run_id = 1;
  b.seq = 1;
  b.rows.push_back({1, 7, 0, 5});
  f.enqueue({b});
  const auto reading = f.read_total({1, 7});
  ASSERT_FALSE(reading);
  EXPECT_EQ(reading.error(), errc::not_exact_yet);
  EXPECT_EQ(reading.failed().detail, "the counter is being written; retry");
}

TEST(FlushResults, WithoutTheDatabaseFlushAndResetAreDatabaseUnavailableThenDraining) {
  metrics::registry metrics;
  store::pending_store store{8};
  db::pool pool(nowhere(), 2);
  flush::flusher f(flusher_settings(), store, pool, metrics);
  f.start();
  const auto flush =
      answer_of<flush::flush_result>([&](auto done) { f.request_flush(std::move(done)); });
  ASSERT_FALSE(flush);
  EXPECT_EQ(flush.error(), errc::database_unavailable);
  EXPECT_FALSE(flush.failed().detail.empty()) << "the database's message is kept";

  const auto refused = answer_of<flush::reset_result>([&](auto done) {
    f.request_reset({1, 7}, std::move(done));
  });
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), errc::database_unavailable);
  EXPECT_EQ(refused.failed().detail.rfind("the flush before the reset failed: ", 0), 0u)
      << refused.failed().detail;

  f.stop(steady::now());
  const auto late =
      answer_of<flush::flush_result>([&](auto done) { f.request_flush(std::move(done)); });
  EXPECT_EQ(late.error(), errc::draining);
  EXPECT_EQ(late.failed().detail, "shutting down");
  const auto late_reset = answer_of<flush::reset_result>([&](auto done) {
    f.request_reset({1, 7}, std::move(done));
  });
  EXPECT_EQ(late_reset.error(), errc::draining);
}

TEST(RollupResults, WithoutTheDatabaseARollupIsDatabaseUnavailableThenDraining) {
  metrics::registry metrics;
  db::pool pool(nowhere(), 1);
  rollup::settings s;
  s.counters_table = "slotted_counters";
  s.targets.push_back({1, "owners", "id", "hits", "hits"});
  rollup::roller roller(s, pool, metrics);
  roller.start();
  const auto failed =
      answer_of<rollup::rollup_result>([&](auto done) { roller.request(std::move(done)); });
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error(), errc::database_unavailable);
  EXPECT_FALSE(failed.failed().detail.empty()) << "the database's message is kept";
  roller.stop();
  const auto refused =
      answer_of<rollup::rollup_result>([&](auto done) { roller.request(std::move(done)); });
  EXPECT_EQ(refused.error(), errc::draining);
  EXPECT_EQ(refused.failed().detail, "shutting down");
}

}  // namespace
}  // namespace slotted::test
