// Unique per client per window (db/uniques.hpp, model/uniques.hpp): the config key, the
// router's checks of `client`, the windows, the pending set, the SQL text and the rows a
// committed unique batch adds.

#include "db/uniques.hpp"

#include <gtest/gtest.h>

#include "config/config.hpp"
#include "flush/batch_schedule.hpp"
#include "flush/flusher.hpp"
#include "flush/internal.hpp"
#include "http/router.hpp"
#include "ingest/clients.hpp"
#include "store/pending_uniques.hpp"
#include "support/batch_content.hpp"
#include "support/config_problems.hpp"
#include "support/fake_backend.hpp"

namespace slotted {
namespace {

namespace bh = boost::beast::http;

using test::problems_of;

bool any_has(const std::vector<std::string>& problems, const std::string& text) {
  for (const auto& p : problems)
    if (p.find(text) != std::string::npos) return true;
  return false;
}

TEST(DedupeConfig, HourOrDayPerCounterAndNothingElse) {
  const auto c = config::parse_config(
      "counters:\n  - {name: dl, record_type: 5, dedupe: day}\n"
      "  - {name: views, record_type: 6, dedupe: hour}\n  - {name: plain, record_type: 7}\n",
      "test.yaml");
  const auto spec = config::dedupe_spec_of(c);
  EXPECT_EQ(spec.window_of(5), store::granularity::day);
  EXPECT_EQ(spec.window_of(6), store::granularity::hour);
  EXPECT_EQ(spec.window_of(7), store::granularity::none);
  EXPECT_TRUE(any_has(problems_of("counters:\n  - {name: dl, record_type: 5, dedupe: week}\n"),
                      "expected one of hour | day"));
}

TEST(DedupeConfig, TheKeepIsADurationOfACounterWithDedupe) {
  const auto c = config::parse_config(
      "counters:\n  - {name: dl, record_type: 5, dedupe: day}\n"
      "  - {name: views, record_type: 6, dedupe: hour, dedupe_keep: 3h}\n",
      "test.yaml");
  const auto spec = config::dedupe_spec_of(c);
  EXPECT_EQ(spec.keep_of(5), 48 * 3600);
  EXPECT_EQ(spec.keep_of(6), 3 * 3600);
  EXPECT_TRUE(any_has(problems_of("counters:\n  - {name: dl, record_type: 5, dedupe_keep: 3h}\n"),
                      "counters[0].dedupe_keep: only with counters[].dedupe"));
  EXPECT_TRUE(any_has(problems_of("counters:\n  - {name: dl, record_type: 5, dedupe: day, "
                                  "dedupe_keep: 1m}\n"),
                      "counters[0].dedupe_keep: expected a duration in [300s, 2678400s]"));
  EXPECT_TRUE(any_has(problems_of("counters:\n  - {name: dl, record_type: 5, dedupe: day, "
                                  "dedupe_keep: 745h}\n"),
                      "counters[0].dedupe_keep: expected a duration in [300s, 2678400s]"));
  // A restart key of its own.
  const auto b = config::parse_config(
      "counters:\n  - {name: dl, record_type: 5, dedupe: day, dedupe_keep: 24h}\n"
      "  - {name: views, record_type: 6, dedupe: hour, dedupe_keep: 3h}\n",
      "b.yaml");
  EXPECT_EQ(config::plan_reload(c, b).needs_restart,
            std::vector<std::string>{"counters[].dedupe_keep"});
}

TEST(DedupeConfig, WithAWalAndTheUniquesTableNameMustFit) {
  // The WAL logs unique entries (durable/record.hpp): the two run together.
  EXPECT_TRUE(problems_of("wal: {dir: /tmp/x}\ncounters:\n"
                          "  - {name: dl, record_type: 5, dedupe: day}\n")
                  .empty());
  const std::string long_table(57, 't');
  EXPECT_TRUE(any_has(problems_of("mysql: {table: " + long_table +
                                  "}\ncounters:\n  - {name: dl, record_type: 5, dedupe: day}\n"),
                      "at most 56 characters"));
  EXPECT_TRUE(problems_of("mysql: {table: " + std::string(56, 't') +
                          "}\ncounters:\n  - {name: dl, record_type: 5, dedupe: day}\n")
                  .empty());
  // Without dedupe the same table name and WAL are fine.
  EXPECT_TRUE(problems_of("wal: {dir: /tmp/x}\nmysql: {table: " + long_table + "}\n").empty());
}

TEST(DedupeConfig, AChangeNeedsARestart) {
  const auto a = config::parse_config("counters:\n  - {name: dl, record_type: 5}\n", "a.yaml");
  const auto b =
      config::parse_config("counters:\n  - {name: dl, record_type: 5, dedupe: day}\n", "b.yaml");
  const auto plan = config::plan_reload(a, b);
  EXPECT_EQ(plan.needs_restart, std::vector<std::string>{"counters[].dedupe"});
  EXPECT_TRUE(plan.live.empty());
}

// Type 5 dedupes by day, type 6 by hour, type 7 not at all.
class DedupeRouter : public ::testing::Test {
 protected:
  static config::daemon_config cfg() {
    config::daemon_config c;
    c.counters = {{"dl", 5, std::nullopt, {}, false, store::granularity::day},
                  {"views", 6, std::nullopt, {}, false, store::granularity::hour},
                  {"plain", 7, std::nullopt, {}}};
    return c;
  }
  std::vector<http::response> post(std::string body, bool keyed = false) {
    http::request req{bh::verb::post, "/v1/increments", 11};
    req.set(bh::field::content_type, "application/json");
    if (keyed) req.set("Idempotency-Key", "k1");
    req.body() = std::move(body);
    req.prepare_payload();
    if (auto refused = router_.check_header(req)) return {std::move(*refused)};
    std::vector<http::response> out;
    router_.handle(std::move(req), [&out](http::response&& r) { out.push_back(std::move(r)); });
    return out;
  }
  // The status and body of a request that must be answered at once.
  std::pair<unsigned, std::string> answer(std::string body, bool keyed = false) {
    const auto got = post(std::move(body), keyed);
    EXPECT_EQ(got.size(), 1u);
    if (got.empty()) return {0, ""};
    return {got[0].result_int(), got[0].body()};
  }

  config::daemon_config cfg_ = cfg();
  test::fake_backend backend_;
  metrics::registry metrics_;
  ingest::table_limits limits_;
  http::router router_{cfg_, backend_, metrics_, limits_};
};

TEST_F(DedupeRouter, AClientOnACounterWithoutDedupeIs400NamingTheItemAndNothingApplied) {
  const auto [status, body] = answer(
      R"([{"record_type": 5, "record_id": 1, "client": "a"}, )"
      R"({"record_type": 7, "record_id": 1}, {"record_type": 7, "record_id": 2, "client": "a"}])");
  EXPECT_EQ(status, 400u);
  EXPECT_NE(body.find("only accepted for a counter with dedupe"), std::string::npos) << body;
  EXPECT_NE(body.find("\"index\": 2"), std::string::npos) << body;
  EXPECT_TRUE(backend_.added_.empty());
}

TEST_F(DedupeRouter, AClientWithADeltaOtherThanOneIs400) {
  for (const char* delta : {"2", "0", "-1"}) {
    const auto [status, body] = answer(std::string(R"([{"record_type": 5, "record_id": 1}, )") +
                                       R"({"record_type": "dl", "record_id": 1, "delta": )" +
                                       delta + R"(, "client": "a"}])");
    EXPECT_EQ(status, 400u) << delta;
    EXPECT_NE(body.find("must have a delta of 1"), std::string::npos) << body;
    EXPECT_NE(body.find("\"index\": 1"), std::string::npos) << body;
  }
  EXPECT_TRUE(backend_.added_.empty());
}

TEST_F(DedupeRouter, AClientHasOneTo128Bytes) {
  for (const auto& client : {std::string(), std::string(129, 'c')}) {
    const auto [status, body] =
        answer(R"({"record_type": 5, "record_id": 1, "client": ")" + client + "\"}");
    EXPECT_EQ(status, 400u) << client.size();
    EXPECT_NE(body.find("1 to 128 bytes"), std::string::npos) << body;
  }
  EXPECT_EQ(answer(R"({"record_type": 5, "record_id": 1, "client": 7})").first, 400u);
  EXPECT_EQ(answer(R"({"record_type": 5, "record_id": 1, "client": "a", "client": "b"})").first,
            400u);
  EXPECT_TRUE(backend_.added_.empty());
  const std::string longest(128, 'c');
  EXPECT_EQ(answer(R"([{"record_type": 5, "record_id": 1, "client": ")" + longest +
                   R"("}, {"record_type": 7, "record_id": 3, "delta": 4}])")
                .first,
            202u);
  ASSERT_EQ(backend_.added_.size(), 1u);
  ASSERT_EQ(backend_.added_[0].size(), 2u);
  EXPECT_EQ(backend_.added_[0][0].client, longest);
  EXPECT_TRUE(backend_.added_[0][1].client.empty());
  EXPECT_EQ(backend_.added_[0][1].delta, 4);
}

TEST_F(DedupeRouter, AClientWithAnIdempotencyKeyIsRefusedForNow) {
  const auto [status, body] = answer(R"({"record_type": 5, "record_id": 1, "client": "a"})", true);
  EXPECT_EQ(status, 400u);
  EXPECT_NE(body.find("Idempotency-Key"), std::string::npos) << body;
  EXPECT_TRUE(backend_.added_.empty());
}

TEST(UniqueWindows, ARequestSplitsIntoItsPlainItemsAndTheEntriesOfItsClients) {
  store::dedupe_spec spec;
  spec.declare(5, store::granularity::day);
  const std::int64_t now = 1'700'000'000;
  std::vector<ingest::increment> items(4);
  for (std::size_t i = 0; i < items.size(); ++i) {
    items[i].record_type = 5;
    items[i].record_id = i + 1;
    items[i].at = now;
    items[i].delta = i % 2 == 0 ? 1 : 3;
  }
  items[0].client = "a";
  items[2].client = "b";
  const auto [plain, entries] = ingest::split_clients(items, spec);
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_EQ(plain[0].record_id, 2u);
  EXPECT_EQ(plain[1].record_id, 4u);
  EXPECT_EQ(plain[1].delta, 3);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].record_id, 1u);
  EXPECT_EQ(entries[0].client, "a");
  EXPECT_EQ(entries[1].record_id, 3u);
  EXPECT_EQ(entries[1].client, "b");
  EXPECT_EQ(entries[1].window, 1'699'920'000);
}

TEST(UniqueWindows, FromAtOrTheReceiveTimeInUtcHoursAndDays) {
  store::dedupe_spec spec;
  spec.declare(5, store::granularity::day);
  spec.declare(6, store::granularity::hour);
  const std::int64_t now = 1'700'000'000;  // 2023-11-14 22:13:20 UTC
  std::vector<ingest::increment> items(3);
  items[0].record_type = 5;
  items[0].client = "a";
  items[1].record_type = 6;
  items[1].client = "b";
  items[1].at_given = true;
  items[1].at = now - 100;  // this hour, 22:00 UTC
  items[2].record_type = 5;
  items[2].client = "c";
  items[2].at_given = true;
  items[2].at = now + 200;  // a clock slightly ahead
  ASSERT_FALSE(ingest::check_clients(items, spec, now));
  EXPECT_EQ(items[0].at, now);                                               // the receive time
  EXPECT_EQ(ingest::unique_entry_of(items[0], spec).window, 1'699'920'000);  // 00:00 UTC
  EXPECT_EQ(ingest::unique_entry_of(items[1], spec).window, 1'699'999'200);
  EXPECT_EQ(ingest::unique_entry_of(items[1], spec).at, now - 100);
  EXPECT_EQ(ingest::unique_entry_of(items[2], spec).window, 1'699'920'000);
  // An hour that ended 3 h ago: within the keep (48 h), a late item of its own window.
  items[1].at = now - 900 - 3 * 3600;
  ASSERT_FALSE(ingest::check_clients(items, spec, now));
  EXPECT_EQ(ingest::unique_entry_of(items[1], spec).window, 1'699'999'200 - 4 * 3600);
  // One that ended more than the keep ago; an `at` too far ahead: refused.
  items[1].at = now - 900 - store::default_dedupe_keep_seconds;
  auto bad = ingest::check_clients(items, spec, now);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->index, 1u);
  EXPECT_NE(bad->message.find("ended more than 172800 s (counters[].dedupe_keep) before now"),
            std::string::npos)
      << bad->message;
  items[1].at = now - 100;
  items[2].at = now + ingest::max_at_ahead_seconds + 1;
  bad = ingest::check_clients(items, spec, now);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->index, 2u);
}

TEST(PendingUniques, HoldsEachEntryOnceAndCountsItAgainstThePendingLimit) {
  store::pending_store store(4);
  store::pending_uniques uniques(store, 4);
  const std::vector<store::unique_entry> entries{{5, 1, 86400, "a", 86500},
                                                 {5, 1, 86400, "a", 90000},  // the same, later
                                                 {5, 1, 86400, "b", 86500},
                                                 {5, 1, 172800, "a", 172900},
                                                 {5, 2, 86400, "a", 86500}};
  EXPECT_EQ(uniques.add(entries), 1u);
  EXPECT_EQ(uniques.add(std::span(entries).first(1)), 1u);
  EXPECT_EQ(uniques.size(), 4u);
  EXPECT_EQ(store.pending_entries(), 4u);
  EXPECT_TRUE(store.over_pending_limit(4));
  std::vector<store::unique_entry> taken;
  uniques.take_all(taken);
  EXPECT_EQ(taken.size(), 4u);
  EXPECT_EQ(uniques.size(), 0u);
  EXPECT_EQ(store.pending_entries(), 0u);
  // The first one seen keeps its time.
  for (const auto& e : taken)
    if (e.client == "a" && e.window == 86400 && e.record_id == 1) {
      EXPECT_EQ(e.at, 86500);
    }
}

TEST(UniquesSql, PinnedText) {
  EXPECT_EQ(db::create_uniques_table(db::mariadb_dialect(), "t"),
            "CREATE TABLE IF NOT EXISTS `t_uniques` (\n"
            "  `record_type` INT UNSIGNED NOT NULL,\n"
            "  `window_start` BIGINT NOT NULL,\n"
            "  `record_id` BIGINT UNSIGNED NOT NULL,\n"
            "  `client` VARBINARY(128) NOT NULL,\n"
            "  `instance_id` VARCHAR(64) NOT NULL,\n"
            "  `run_id` BIGINT UNSIGNED NOT NULL,\n"
            "  `batch_seq` BIGINT UNSIGNED NOT NULL,\n"
            "  PRIMARY KEY (`record_type`, `window_start`, `record_id`, `client`)\n"
            ") ENGINE=InnoDB");
  const std::vector<store::unique_entry> e{{5, 1, 86400, "a", 0}, {5, 2, 86400, "b", 0}};
  const std::vector<std::string> q{"'a'", "'b'"};
  EXPECT_EQ(db::uniques_insert(db::mariadb_dialect(), "t", e, q, "'i1'", 7, 9),
            "INSERT IGNORE INTO `t_uniques` (`record_type`, `window_start`, `record_id`, "
            "`client`, `instance_id`, `run_id`, `batch_seq`) VALUES "
            "(5,86400,1,'a','i1',7,9),(5,86400,2,'b','i1',7,9)");
  EXPECT_EQ(db::uniques_select_ours(db::mariadb_dialect(), "t", e, q, "'i1'", 7, 9),
            "SELECT `record_type`, `window_start`, `record_id`, HEX(`client`) FROM `t_uniques` "
            "WHERE (`record_type`, `window_start`, `record_id`, `client`) IN "
            "((5,86400,1,'a'),(5,86400,2,'b')) AND `instance_id` = 'i1' AND `run_id` = 7 AND "
            "`batch_seq` = 9");
  EXPECT_EQ(db::uniques_prune(db::mariadb_dialect(), "t", 5, 1000, 50),
            "DELETE FROM `t_uniques` WHERE `record_type` = 5 AND `window_start` < 1000 "
            "ORDER BY `window_start` LIMIT 50");
  EXPECT_EQ(db::uniques_types_select("t"), "SELECT DISTINCT `record_type` FROM `t_uniques`");
}

// An item is accepted up to its counter's keep after its window ends (48 h by default);
// a batch decides the entries whose windows ended at or after what was pruned of their
// record type and of every type.
TEST(UniqueBatches, LateEntriesAreAcceptedWithinTheKeepAndDecidedUnlessPruned) {
  store::dedupe_spec dedupe;
  dedupe.declare(5, store::granularity::day);
  dedupe.declare(6, store::granularity::hour, 3 * 3600);
  const std::int64_t day = 86400, keep = store::default_dedupe_keep_seconds;
  EXPECT_EQ(keep, 48 * 3600);
  EXPECT_EQ(dedupe.keep_of(5), keep);
  EXPECT_EQ(dedupe.keep_of(6), 3 * 3600);
  EXPECT_EQ(dedupe.keep_of(7), keep);  // dedupes no more: the longest keep
  EXPECT_TRUE(dedupe.accepts(5, day, 2 * day + keep));
  EXPECT_FALSE(dedupe.accepts(5, day, 2 * day + keep + 1));
  EXPECT_TRUE(dedupe.accepts(6, day, day + 3600 + 3 * 3600));
  EXPECT_FALSE(dedupe.accepts(6, day, day + 3600 + 3 * 3600 + 1));
  EXPECT_FALSE(dedupe.accepts(7, day, day));
  const std::vector<store::unique_entry> e{{5, 1, day, "a", day},   // ends at 2 * day
                                           {6, 1, day, "a", day},   // ends at day + 3600
                                           {7, 1, day, "a", day}};  // dedupes no more
  // Nothing pruned: both that still dedupe.
  EXPECT_EQ(db::not_pruned(e, dedupe, {}, 0).size(), 2u);
  // Type 6 pruned up to the end of its window (inclusive end: kept), then past it.
  EXPECT_EQ(db::not_pruned(e, dedupe, {{6, day + 3600}}, 0).size(), 2u);
  const auto past_hour = db::not_pruned(e, dedupe, {{6, day + 3601}}, 0);
  ASSERT_EQ(past_hour.size(), 1u);
  EXPECT_EQ(past_hour[0].record_type, 5u);
  // Every type's row (an earlier version's prune, recorded by --migrate) counts for all.
  EXPECT_EQ(db::not_pruned(e, dedupe, {{5, 0}}, day + 3601).size(), 1u);
  EXPECT_TRUE(db::not_pruned(e, dedupe, {}, 2 * day + 1).empty());
}

TEST(UniqueBatches, CountedEntriesBecomeRowsAndBucketRowsUnderTheBatchSlot) {
  store::bucket_spec buckets;
  buckets.declare(5, store::granularity::hour, std::chrono::hours(48));
  buckets.declare(5, store::granularity::day, std::chrono::hours(24 * 30));
  const std::vector<store::unique_entry> counted{{5, 1, 86400, "a", 86400 + 10},
                                                 {5, 1, 86400, "b", 86400 + 3700},
                                                 {5, 2, 86400, "a", 86400 + 20},
                                                 {6, 3, 86400, "a", 86400 + 20}};
  std::vector<db::counter_row> rows;
  std::vector<store::bucket_row> bucket_rows;
  db::rows_of_counted(counted, 17, buckets, rows, bucket_rows);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].record_id, 1u);
  EXPECT_EQ(rows[0].delta, 2);
  EXPECT_EQ(rows[0].slot, 17);
  EXPECT_EQ(rows[1].delta, 1);
  EXPECT_EQ(rows[2].record_type, 6u);
  // Counter 1: two hours and one day; counter 2: one hour and one day; type 6 none.
  ASSERT_EQ(bucket_rows.size(), 5u);
  EXPECT_EQ(bucket_rows[0].gran, store::granularity::hour);
  EXPECT_EQ(bucket_rows[0].bucket, 86400);
  EXPECT_EQ(bucket_rows[1].bucket, 86400 + 3600);
  EXPECT_EQ(bucket_rows[2].gran, store::granularity::day);
  EXPECT_EQ(bucket_rows[2].delta, 2);
}

TEST(UniqueBatches, SplitByEntriesHeldAsEntriesAndScheduledAlone) {
  store::flush_batch b;
  b.run_id = 3;
  b.seq = 5;
  test::unique_in(b).entries = {{5, 1, 0, "a", 0}, {5, 1, 0, "b", 0}, {5, 2, 0, "a", 0}};
  EXPECT_TRUE(flush::splittable(b));
  EXPECT_EQ(flush::rows_held(b), 3u);
  const auto [left, right] = flush::split_batch(b);
  EXPECT_EQ(test::uniques_of(left).size() + test::uniques_of(right).size(), 3u);
  EXPECT_EQ(test::uniques_of(left).front().client, "a");
  EXPECT_EQ(test::uniques_of(right).back().record_id, 2u);
  EXPECT_NE(left.seq, right.seq);
  // A unique batch waits for every batch before it, and holds back every one after it.
  store::flush_batch plain;
  plain.rows = {{9, 9, 0, 1}};
  EXPECT_TRUE(flush::conflict(flush::span_of(b, false), flush::span_of(plain, false)));
  EXPECT_TRUE(flush::conflict(flush::span_of(plain, false), flush::span_of(b, false)));
}

}  // namespace
}  // namespace slotted
