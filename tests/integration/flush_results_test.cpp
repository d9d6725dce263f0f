// The flusher answers with results whose failures are codes of the daemon's one
// category (model/errc.hpp), the texts as before: a read while a batch is in doubt is
// not_exact_yet, a flush or a reset without the database is database_unavailable (the
// database's message in the detail), and either after stop() is draining.

#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "app/application.hpp"
#include "flush/flusher.hpp"
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

// What request_flush or request_reset answers.
template <typename Result>
Result answered(std::future<Result>& f) {
  EXPECT_EQ(f.wait_for(60s), std::future_status::ready);
  return f.get();
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
  db::connect_options nowhere;
  nowhere.host = "127.0.0.1";
  nowhere.port = 1;  // nothing listens: refused at once
  nowhere.connect_timeout = 2s;
  metrics::registry metrics;
  store::pending_store store{8};
  db::pool pool(nowhere, 2);
  flush::flusher f(flusher_settings(), store, pool, metrics);
  f.start();
  std::promise<flush::flush_result> flushed;
  f.request_flush([&](const flush::flush_result& r) { flushed.set_value(r); });
  std::future<flush::flush_result> flush_answer = flushed.get_future();
  const auto flush = answered(flush_answer);
  ASSERT_FALSE(flush);
  EXPECT_EQ(flush.error(), errc::database_unavailable);
  EXPECT_FALSE(flush.failed().detail.empty()) << "the database's message is kept";

  std::promise<flush::reset_result> reset;
  f.request_reset({1, 7}, [&](const flush::reset_result& r) { reset.set_value(r); });
  std::future<flush::reset_result> reset_answer = reset.get_future();
  const auto refused = answered(reset_answer);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), errc::database_unavailable);
  EXPECT_EQ(refused.failed().detail.rfind("the flush before the reset failed: ", 0), 0u)
      << refused.failed().detail;

  f.stop(steady::now());
  std::promise<flush::flush_result> late_flush;
  f.request_flush([&](const flush::flush_result& r) { late_flush.set_value(r); });
  std::future<flush::flush_result> late_flush_answer = late_flush.get_future();
  const auto late = answered(late_flush_answer);
  EXPECT_EQ(late.error(), errc::draining);
  EXPECT_EQ(late.failed().detail, "shutting down");
  std::promise<flush::reset_result> late_reset;
  f.request_reset({1, 7}, [&](const flush::reset_result& r) { late_reset.set_value(r); });
  std::future<flush::reset_result> late_reset_answer = late_reset.get_future();
  EXPECT_EQ(answered(late_reset_answer).error(), errc::draining);
}

}  // namespace
}  // namespace slotted::test
