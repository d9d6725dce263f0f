// Counts per bucket (README: Counts per bucket), the pure parts: the config, the `d`
// unit, `at` in the parser and its validation, UTC bucket boundaries, the store's
// pending buckets, batches, the WAL encodings, the SQL literals, the keyed body hash.

#include "model/buckets.hpp"

#include <gtest/gtest.h>

#include <boost/crc.hpp>
#include <ctime>
#include <map>
#include <random>
#include <tuple>

#include "config/config.hpp"
#include "db/sql.hpp"
#include "durable/record.hpp"
#include "flush/flusher.hpp"
#include "idempotency/keyed_batches.hpp"
#include "ingest/parser.hpp"
#include "model/keyed_request.hpp"
#include "store/pending_store.hpp"

namespace slotted {
namespace {

using store::granularity;

std::vector<std::string> config_problems(const std::string& yaml) {
  try {
    config::parse_config(yaml, "test.yaml");
  } catch (const config::config_error& e) {
    return e.problems();
  }
  return {};
}

TEST(BucketConfig, DurationsTakeADayUnit) {
  EXPECT_EQ(config::parse_duration("400d"), std::chrono::hours(24 * 400));
  EXPECT_EQ(config::parse_duration("1d"), std::chrono::hours(24));
  EXPECT_EQ(config::parse_duration("48h"), std::chrono::hours(48));
  // Overflow is refused, not wrapped.
  EXPECT_FALSE(config::parse_duration("999999999999d"));
  EXPECT_FALSE(config::parse_duration("-1d"));
  EXPECT_FALSE(config::parse_duration("1.5d"));
  // Everywhere a duration is read.
  EXPECT_EQ(config::parse_config("idempotency: {window: 2d}\n").idempotency.window,
            std::chrono::hours(48));
}

TEST(BucketConfig, BucketsParseIntoTheSpec) {
  const auto cfg = config::parse_config(
      "counters:\n"
      "  - {name: repo_downloads, record_type: 123, buckets: {day: 400d, hour: 48h}}\n"
      "  - {name: page_views, record_type: 7}\n");
  ASSERT_EQ(cfg.counters[0].buckets.size(), 2u);
  EXPECT_EQ(cfg.counters[0].buckets[0].granularity, granularity::hour);  // sorted
  EXPECT_TRUE(cfg.counters[1].buckets.empty());
  const auto spec = config::bucket_spec_of(cfg);
  ASSERT_NE(spec.find(123), nullptr);
  EXPECT_EQ(spec.find(7), nullptr);
  EXPECT_EQ(spec.find(123)->retention[1], std::chrono::hours(48));
  EXPECT_EQ(spec.find(123)->longest(), std::chrono::hours(24 * 400));
  EXPECT_TRUE(spec.uses(granularity::day));
}

TEST(BucketConfig, BadBucketsAreClearErrors) {
  const auto one = [](const std::string& buckets) {
    const auto p =
        config_problems("counters:\n  - {name: a, record_type: 1, buckets: " + buckets + "}\n");
    EXPECT_EQ(p.size(), 1u) << buckets;
    return p.empty() ? std::string() : p[0];
  };
  EXPECT_NE(one("{week: 10d}").find("unknown granularity 'week'; expected hour or day"),
            std::string::npos);
  EXPECT_NE(one("{hour: 0h}").find("retention must be between 1s and 36500d"), std::string::npos);
  EXPECT_NE(one("{hour: -5h}").find("a positive duration"), std::string::npos);
  EXPECT_NE(one("{day: 40000d}").find("36500d"), std::string::npos);
  EXPECT_NE(one("{}").find("expected a mapping of granularity"), std::string::npos);
  EXPECT_NE(one("[hour]").find("expected a mapping of granularity"), std::string::npos);
  // The bucket tables' names must stay identifiers.
  const auto p = config_problems("mysql: {table: " + std::string(60, 't') +
                                 "}\ncounters:\n  - {name: a, record_type: 1, buckets: "
                                 "{hour: 1h}}\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("at most 59 characters"), std::string::npos);
}

TEST(BucketConfig, ChangedBucketsNeedARestart) {
  const auto a =
      config::parse_config("counters:\n  - {name: a, record_type: 1, buckets: {hour: 48h}}\n");
  const auto b = config::parse_config(
      "counters:\n  - {name: a, record_type: 1, buckets: {hour: 48h, day: 10d}}\n");
  const auto plan = config::plan_reload(a, b);
  EXPECT_TRUE(plan.live.empty());
  ASSERT_EQ(plan.needs_restart.size(), 1u);
  EXPECT_EQ(plan.needs_restart[0], "counters[].buckets");
  // A renamed counter is still live.
  const auto c =
      config::parse_config("counters:\n  - {name: b, record_type: 1, buckets: {hour: 48h}}\n");
  EXPECT_EQ(config::plan_reload(a, c).live, std::vector<std::string>{"counters"});
  EXPECT_TRUE(config::plan_reload(a, c).needs_restart.empty());
}

TEST(BucketMath, BucketsStartOnUtcHoursAndDays) {
  EXPECT_EQ(store::bucket_start(granularity::hour, 0), 0);
  EXPECT_EQ(store::bucket_start(granularity::hour, 3599), 0);
  EXPECT_EQ(store::bucket_start(granularity::hour, 3600), 3600);
  EXPECT_EQ(store::bucket_start(granularity::day, 86399), 0);
  EXPECT_EQ(store::bucket_start(granularity::day, 86400), 86400);
  // 2024-02-29 23:59:59 UTC and the next second (a leap day).
  EXPECT_EQ(store::bucket_start(granularity::day, 1709251199), 1709164800);
  EXPECT_EQ(store::bucket_start(granularity::day, 1709251200), 1709251200);
  EXPECT_EQ(db::bucket_literal(granularity::day, 1709164800), "'2024-02-29'");
  EXPECT_EQ(db::bucket_literal(granularity::day, 1709251200), "'2024-03-01'");
  EXPECT_EQ(db::bucket_literal(granularity::hour, 1709251200 - 3600), "'2024-02-29 23:00:00'");
  EXPECT_EQ(db::bucket_literal(granularity::hour, 0), "'1970-01-01 00:00:00'");
  EXPECT_EQ(db::bucket_literal(granularity::day, 253402214400), "'9999-12-31'");
}

TEST(BucketSql, StatementsNameTheTablesAndBuckets) {
  const std::vector<store::bucket_row> rows{{1, 2, granularity::hour, 3600, 7, 5}};
  EXPECT_EQ(db::bucket_upsert_statement(db::mariadb_dialect(), "c", granularity::hour, rows),
            "INSERT INTO `c_hour` (`record_type`, `record_id`, `bucket`, `slot`, `count`) "
            "VALUES (1,2,'1970-01-01 01:00:00',7,5) ON DUPLICATE KEY UPDATE `count` = `count` + "
            "VALUES(`count`)");
  const auto create = db::create_bucket_table(db::mariadb_dialect(), "c", granularity::day);
  EXPECT_NE(create.find("`c_day`"), std::string::npos);
  EXPECT_NE(create.find("`bucket` DATE NOT NULL"), std::string::npos);
  EXPECT_NE(create.find("PRIMARY KEY (`record_type`, `record_id`, `bucket`, `slot`)"),
            std::string::npos);
  EXPECT_EQ(db::bucket_prune_select(db::mariadb_dialect(), "c", granularity::day, 9, 86400, 500),
            "SELECT TIMESTAMPDIFF(SECOND, '1970-01-01 00:00:00', `bucket`), `record_id` FROM "
            "`c_day` FORCE INDEX (`by_age`) WHERE `record_type` = 9 AND `bucket` < '1970-01-02' "
            "ORDER BY `bucket`, `record_id` LIMIT 500");
  const std::vector<std::uint64_t> ids{4, 5};
  EXPECT_EQ(db::bucket_prune_delete("c", granularity::hour, 9, 3600, ids),
            "DELETE FROM `c_hour` WHERE `record_type` = 9 AND `bucket` = '1970-01-01 01:00:00' "
            "AND `record_id` IN (4,5)");
}

ingest::type_registry types() {
  return ingest::type_registry({{"a", 1}, {"b", 2}}, false);
}

TEST(BucketParser, AtIsReadByBothParsers) {
  for (const bool reference : {false, true}) {
    std::vector<ingest::increment> out;
    const std::string body =
        "{\"record_type\": 1, \"record_id\": 2, \"at\": 1700000000}\n"
        "{\"record_type\": 1, \"record_id\": 2}\n"
        "{\"at\": 0, \"record_type\": \"a\", \"record_id\": 3}\n";
    const auto err =
        reference ? ingest::parse_increments_reference(body, ingest::body_format::ndjson, types(),
                                                       10, out)
                  : ingest::parse_increments(body, ingest::body_format::ndjson, types(), 10, out);
    ASSERT_FALSE(err) << err->message;
    ASSERT_EQ(out.size(), 3u);
    EXPECT_TRUE(out[0].at_given);
    EXPECT_EQ(out[0].at, 1700000000);
    EXPECT_FALSE(out[1].at_given);
    EXPECT_TRUE(out[2].at_given);
    EXPECT_EQ(out[2].at, 0);
  }
}

TEST(BucketParser, AtMustBeAnInteger) {
  for (const std::string at :
       {"1.5", "\"5\"", "-1", "1e3", "true", "253402300800", "99999999999999999999"}) {
    std::vector<ingest::increment> out;
    const auto err =
        ingest::parse_increments("{\"record_type\": 1, \"record_id\": 2, \"at\": " + at + "}",
                                 ingest::body_format::json, types(), 10, out);
    ASSERT_TRUE(err) << at;
    EXPECT_EQ(err->status, 400u);
    EXPECT_NE(err->message.find("\"at\""), std::string::npos) << at << ": " << err->message;
  }
  std::vector<ingest::increment> out;
  const auto dup =
      ingest::parse_increments("{\"record_type\": 1, \"record_id\": 2, \"at\": 1, \"at\": 2}",
                               ingest::body_format::json, types(), 10, out);
  ASSERT_TRUE(dup);
  EXPECT_EQ(dup->message, "duplicate field \"at\"");
}

TEST(BucketParser, ResolveTimesChecksOnlyCountersWithBuckets) {
  store::bucket_spec spec;
  spec.declare(1, granularity::hour, std::chrono::hours(48));
  spec.declare(1, granularity::day, std::chrono::hours(24 * 10));
  const std::int64_t now = 1'800'000'000;
  std::vector<ingest::increment> incs{{1, 1, 1}, {2, 1, 1}};
  incs[1].at_given = true;
  incs[1].at = 5;  // no buckets: ignored
  ASSERT_FALSE(ingest::resolve_times(incs, spec, now));
  EXPECT_EQ(incs[0].at, now);  // the receive time
  EXPECT_EQ(incs[1].at, 5);
  const auto with_at = [&](std::int64_t at) {
    std::vector<ingest::increment> v{{1, 1, 1}, {1, 2, 1}};
    v[1].at_given = true;
    v[1].at = at;
    return ingest::resolve_times(v, spec, now);
  };
  EXPECT_FALSE(with_at(now - 10 * 86400));  // the longest retention, exactly
  const auto old = with_at(now - 10 * 86400 - 1);
  ASSERT_TRUE(old);
  EXPECT_EQ(old->index, 1u);
  EXPECT_NE(old->message.find("older than the longest retention"), std::string::npos);
  EXPECT_FALSE(with_at(now + 300));
  const auto ahead = with_at(now + 301);
  ASSERT_TRUE(ahead);
  EXPECT_NE(ahead->message.find("in the future"), std::string::npos);
}

store::bucket_spec hour_and_day(std::uint32_t type) {
  store::bucket_spec spec;
  spec.declare(type, granularity::hour, std::chrono::hours(48));
  spec.declare(type, granularity::day, std::chrono::hours(24 * 400));
  return spec;
}

using bucket_sums = std::map<std::tuple<std::uint64_t, granularity, std::int64_t>, std::int64_t>;
bucket_sums sums_of(const std::vector<store::pending_delta>& deltas) {
  bucket_sums out;
  for (const auto& d : deltas) out[{d.key.record_id, d.gran, d.bucket}] += d.delta;
  return out;
}

ingest::increment at(std::uint32_t type, std::uint64_t id, std::int32_t delta, std::int64_t t) {
  ingest::increment inc{type, id, delta};
  inc.at = t;
  return inc;
}

TEST(BucketStore, IncrementsCountInTheirHourAndDayAndAsKeys) {
  store::pending_store s(4);
  s.set_buckets(hour_and_day(1));
  const std::vector<ingest::increment> batch{at(1, 1, 2, 86399), at(1, 1, 3, 86400),
                                             at(1, 1, 4, 90000), at(2, 9, 5, 90000)};
  ASSERT_EQ(s.add(batch, 1000), store::add_result::applied);
  // Single-increment path too.
  ASSERT_EQ(s.add(std::vector{at(1, 1, 1, 3600)}, 1000), store::add_result::applied);
  // Keys: 2 counters, 4 hours (82800, 86400, 90000, 3600) each held for its hour and
  // its part of a day (2 keys each: the limit counts the rows they may become).
  EXPECT_EQ(s.keys(), 2u + 4u * 2);
  std::vector<std::pair<std::int64_t, std::int64_t>> series;
  s.pending_buckets({1, 1}, granularity::day, 0, 86400, series);
  std::map<std::int64_t, std::int64_t> per_day;  // it may come in parts
  for (const auto& [bucket, n] : series) per_day[bucket] += n;
  EXPECT_EQ(per_day, (std::map<std::int64_t, std::int64_t>{{0, 3}, {86400, 7}}));
  std::vector<store::pending_delta> taken;
  s.take_all(taken);
  EXPECT_EQ(s.keys(), 0u);
  const auto sums = sums_of(taken);
  // Each day comes in parts (one per hour); the flusher's batches sum them.
  std::mt19937_64 rng(1);
  const auto batches =
      flush::form_batches(taken, 1000, 10, 1, 1, rng, std::chrono::steady_clock::now());
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].bucket_rows.size(), 4u + 2u);
  EXPECT_EQ((sums.at({1, granularity::none, 0})), 10);
  EXPECT_EQ((sums.at({1, granularity::hour, 82800})), 2);  // 23:59:59 of day 0
  EXPECT_EQ((sums.at({1, granularity::hour, 3600})), 1);
  EXPECT_EQ((sums.at({1, granularity::hour, 86400})), 3);  // 00:00:00 of day 1
  EXPECT_EQ((sums.at({1, granularity::hour, 90000})), 4);
  EXPECT_EQ((sums.at({1, granularity::day, 0})), 3);
  EXPECT_EQ((sums.at({1, granularity::day, 86400})), 7);
  EXPECT_EQ(sums.count({1, granularity::day, 90000}), 0u);
  // Type 2 keeps no buckets: only its total.
  std::size_t of_type_2 = 0;
  for (const auto& d : taken) of_type_2 += d.key.record_type == 2 ? 1 : 0;
  EXPECT_EQ(of_type_2, 1u);
  // Handed back, they are the same again.
  s.add_deltas(taken);
  std::vector<store::pending_delta> again;
  s.copy_all(again);
  EXPECT_EQ(sums_of(again), sums_of(taken));
}

TEST(BucketStore, PendingBucketsCountAgainstTheLimit) {
  store::pending_store s(1);
  s.set_buckets(hour_and_day(1));
  ASSERT_EQ(s.add(std::vector{at(1, 1, 1, 0)}, 3), store::add_result::applied);
  EXPECT_EQ(s.keys(), 3u);  // the counter, its hour, its day
  EXPECT_EQ(s.add(std::vector{at(1, 2, 1, 0)}, 3), store::add_result::over_limit);
}

// A reset (README: HTTP API, Reset) drops a counter's pending buckets with its total,
// in the store and in a WAL replay, or its buckets would outnumber its total.
TEST(BucketStore, AResetDropsTheCountersBucketsWithItsTotal) {
  store::pending_store s(1);
  s.set_buckets(hour_and_day(1));
  ASSERT_EQ(s.add(std::vector{at(1, 1, 2, 0), at(1, 1, 3, 3600), at(1, 2, 4, 0)}, 1000),
            store::add_result::applied);
  EXPECT_EQ(s.keys(), 2u + 3u * 2);
  EXPECT_EQ(s.drop({1, 1}), 5);
  EXPECT_EQ(s.keys(), 1u + 1u * 2);  // counter 2, its hour held for hour and day
  std::vector<std::pair<std::int64_t, std::int64_t>> series;
  s.pending_buckets({1, 1}, granularity::hour, 0, 7200, series);
  EXPECT_TRUE(series.empty());
  std::vector<store::pending_delta> left;
  s.take_all(left);
  for (const auto& d : left) EXPECT_EQ(d.key.record_id, 2u) << "a bucket of the reset counter";
  EXPECT_EQ(s.keys(), 0u);
}

TEST(BucketWal, AResetRecordDropsTheCountersLoggedBucketsToo) {
  std::string log(durable::segment_magic);
  // (A time of 0 is written as no time at all: 100 is in the first hour and day too.)
  durable::append_increments(log, std::vector{at(1, 1, 2, 100), at(1, 2, 3, 100)});
  durable::append_reset(log, {1, 1});
  durable::append_increments(log, std::vector{at(1, 1, 4, 7200)});
  durable::replay_state state(hour_and_day(1));
  ASSERT_EQ(durable::scan_segment(log, state).outcome, durable::scan_result::status::ok);
  EXPECT_EQ(sums_of(state.deltas()), (bucket_sums{{{1, granularity::none, 0}, 4},
                                                  {{1, granularity::hour, 7200}, 4},
                                                  {{1, granularity::day, 0}, 4},
                                                  {{2, granularity::none, 0}, 3},
                                                  {{2, granularity::hour, 0}, 3},
                                                  {{2, granularity::day, 0}, 3}}));
}

TEST(BucketBatches, BucketRowsTravelWithTheirCounterThroughSplits) {
  std::vector<store::pending_delta> deltas{
      {{1, 1}, 5},
      {{1, 1}, 5, granularity::hour, 0},
      {{1, 1}, 5, granularity::day, 0},
      // A total of zero with buckets that are not: its buckets still need a row.
      {{1, 2}, 1, granularity::hour, 0},
      {{1, 2}, -1, granularity::hour, 3600},
      {{1, 3}, 4},
      {{1, 4}, 0, granularity::day, 0},  // zero: dropped
  };
  std::mt19937_64 rng(1);
  const auto batches =
      flush::form_batches(deltas, 2, 100, 1, 1, rng, std::chrono::steady_clock::now());
  ASSERT_EQ(batches.size(), 2u);
  ASSERT_EQ(batches[0].rows.size(), 2u);
  EXPECT_EQ(batches[0].rows[1].record_id, 2u);
  EXPECT_EQ(batches[0].rows[1].delta, 0);
  EXPECT_EQ(batches[0].bucket_rows.size(), 4u);
  for (const auto& r : batches[0].bucket_rows) EXPECT_EQ(r.slot, batches[0].rows[0].slot);
  ASSERT_EQ(batches[1].rows.size(), 1u);
  EXPECT_TRUE(batches[1].bucket_rows.empty());
  const auto [left, right] = flush::split_batch(batches[0]);
  EXPECT_EQ(left.bucket_rows.size(), 2u);
  EXPECT_EQ(right.bucket_rows.size(), 2u);
  for (const auto& r : left.bucket_rows) EXPECT_EQ(r.record_id, 1u);
  for (const auto& r : right.bucket_rows) EXPECT_EQ(r.record_id, 2u);
}

TEST(BucketWal, IncrementsWithTimesReplayIntoTheirBuckets) {
  std::string log(durable::segment_magic);
  durable::append_increments(log,
                             std::vector{at(1, 1, 2, 3599), at(1, 1, 3, 3600), at(2, 1, 1, 5)});
  durable::append_increments(log, std::vector<ingest::increment>{{1, 1, 10}});  // an old record
  durable::replay_state state(hour_and_day(1));
  ASSERT_EQ(durable::scan_segment(log, state).outcome, durable::scan_result::status::ok);
  const auto sums = sums_of(state.deltas());
  EXPECT_EQ((sums.at({1, granularity::none, 0})), 16);
  EXPECT_EQ((sums.at({1, granularity::hour, 0})), 2);
  EXPECT_EQ((sums.at({1, granularity::hour, 3600})), 3);
  EXPECT_EQ((sums.at({1, granularity::day, 0})), 5);
  EXPECT_EQ(sums.size(), 4u);  // nothing for type 2 (no buckets), one total per id
}

// A counter that gains buckets across a restart: what was logged before, without a
// time (it had no buckets), counts in its total only, not in 1970's buckets.
TEST(BucketWal, IncrementsLoggedWithoutATimeCountInNoBucketAfterTheirCounterGainsSome) {
  std::string log(durable::segment_magic);
  // Type 1 had buckets when logged (a time), type 2 had none (0).
  durable::append_increments(log, std::vector{at(1, 1, 2, 7200), at(2, 5, 3, 0)});
  idempotency::keyed_request k{"key-1", {1, 2}, {at(2, 6, 4, 0)}, 99};
  durable::append_keyed(log, k);
  store::bucket_spec both = hour_and_day(1);
  both.declare(2, granularity::hour, std::chrono::hours(48));
  durable::replay_state state(both);
  ASSERT_EQ(durable::scan_segment(log, state).outcome, durable::scan_result::status::ok);
  EXPECT_EQ(sums_of(state.deltas()), (bucket_sums{{{1, granularity::none, 0}, 2},
                                                  {{1, granularity::hour, 7200}, 2},
                                                  {{1, granularity::day, 0}, 2},
                                                  {{5, granularity::none, 0}, 3}}));
  ASSERT_EQ(state.keyed().size(), 1u);
  std::mt19937_64 rng(1);
  std::size_t dropped = 0;
  const auto batches = idempotency::form_keyed_batches(
      state.keyed(), 100, 10, 1, 1, rng, std::chrono::steady_clock::now(), dropped, both);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].rows.size(), 1u);
  EXPECT_TRUE(batches[0].bucket_rows.empty());
}

// `at: 0` (1970-01-01T00:00Z) is a valid time, accepted where a retention reaches that
// far back (36500d): its buckets survive a replay like any other time's, in a plain
// request and in a keyed one, while an increment logged without a time still counts in
// no bucket.
TEST(BucketWal, AnAtOfZeroKeepsItsBucketsThroughAReplay) {
  store::bucket_spec spec;
  spec.declare(1, granularity::hour, std::chrono::hours(24 * 36500));
  spec.declare(1, granularity::day, std::chrono::hours(24 * 36500));
  std::vector<ingest::increment> sent{{1, 1, 2}, {1, 2, 5}};
  ASSERT_FALSE(ingest::resolve_times(sent, spec, 1'800'000'000));  // receive times
  sent[0].at_given = true;
  sent[0].at = 0;
  ASSERT_FALSE(ingest::resolve_times(sent, spec, 1'800'000'000)) << "retention accepts it";
  std::string log(durable::segment_magic);
  durable::append_increments(log, sent);
  durable::append_increments(log, std::vector{at(1, 3, 7, 0)});  // no time: no buckets then
  idempotency::keyed_request k{"key-1", {1, 2}, {sent[0]}, 99};
  durable::append_keyed(log, k);
  durable::replay_state state(spec);
  ASSERT_EQ(durable::scan_segment(log, state).outcome, durable::scan_result::status::ok);
  const std::int64_t day = store::bucket_start(granularity::day, 1'800'000'000);
  EXPECT_EQ(sums_of(state.deltas()),
            (bucket_sums{
                {{1, granularity::none, 0}, 2},
                {{1, granularity::hour, 0}, 2},
                {{1, granularity::day, 0}, 2},
                {{2, granularity::none, 0}, 5},
                {{2, granularity::hour, store::bucket_start(granularity::hour, 1'800'000'000)}, 5},
                {{2, granularity::day, day}, 5},
                {{3, granularity::none, 0}, 7}}));
  ASSERT_EQ(state.keyed().size(), 1u);
  EXPECT_TRUE(state.keyed()[0].increments[0].has_time());
  EXPECT_EQ(state.keyed()[0].increments[0].at, 0);
}

// The encoding earlier versions wrote for increments with times (kind 1, the times
// after the items, 0 for none) still replays into the buckets.
TEST(BucketWal, IncrementsRecordsWithTimesOfEarlierVersionsStillReplay) {
  std::string payload(1, static_cast<char>(durable::record_kind::increments));
  const auto put = [&](const auto v) {
    payload.append(reinterpret_cast<const char*>(&v), sizeof v);
  };
  put(std::uint32_t{2});
  for (const std::uint64_t id : {1, 2}) {
    put(std::uint32_t{1});
    put(id);
    put(static_cast<std::int32_t>(id == 1 ? 4 : 6));
  }
  put(std::int64_t{7200});  // the times, after the items
  put(std::int64_t{0});
  boost::crc_32_type crc;
  crc.process_bytes(payload.data(), payload.size());
  char header[durable::record_header_bytes];
  durable::encode_header(header, payload.size(), crc.checksum());
  std::string log(durable::segment_magic);
  log.append(header, sizeof header);
  log += payload;
  durable::replay_state state(hour_and_day(1));
  ASSERT_EQ(durable::scan_segment(log, state).outcome, durable::scan_result::status::ok);
  EXPECT_EQ(sums_of(state.deltas()), (bucket_sums{{{1, granularity::none, 0}, 4},
                                                  {{1, granularity::hour, 7200}, 4},
                                                  {{1, granularity::day, 0}, 4},
                                                  {{2, granularity::none, 0}, 6}}));
}

TEST(BucketWal, BatchesSnapshotsAndKeyedRequestsKeepTheirBuckets) {
  store::flush_batch b;
  b.run_id = 3;
  b.seq = 4;
  b.rows = {{1, 1, 7, 5}};
  b.bucket_rows = {{1, 1, granularity::hour, 3600, 7, 5}, {1, 1, granularity::day, 0, 7, 5}};
  idempotency::keyed_request k{"key-1", {1, 2}, {at(1, 1, 4, 7200)}, 99};
  k.increments[0].at_given = true;
  std::string log(durable::segment_magic);
  durable::append_batches(log, std::vector{b});
  durable::append_keyed(log, k);
  durable::replay_state state(hour_and_day(1));
  ASSERT_EQ(durable::scan_segment(log, state).outcome, durable::scan_result::status::ok);
  ASSERT_EQ(state.batches().size(), 1u);
  ASSERT_EQ(state.batches()[0].bucket_rows.size(), 2u);
  EXPECT_EQ(state.batches()[0].bucket_rows[0].bucket, 3600);
  EXPECT_EQ(state.batches()[0].bucket_rows[1].gran, granularity::day);
  ASSERT_EQ(state.keyed().size(), 1u);
  EXPECT_EQ(state.keyed()[0].increments[0].at, 7200);
  EXPECT_TRUE(state.keyed()[0].increments[0].at_given);

  std::string snap(durable::segment_magic);
  durable::append_snapshot(
      snap, std::vector{b},
      std::vector<store::pending_delta>{{{1, 2}, 6}, {{1, 2}, 6, granularity::day, 86400}},
      std::vector{k});
  durable::replay_state from_snapshot(hour_and_day(1));
  ASSERT_EQ(durable::scan_segment(snap, from_snapshot).outcome, durable::scan_result::status::ok);
  const auto sums = sums_of(from_snapshot.deltas());
  EXPECT_EQ((sums.at({2, granularity::none, 0})), 6);
  EXPECT_EQ((sums.at({2, granularity::day, 86400})), 6);
  EXPECT_EQ(from_snapshot.batches()[0].bucket_rows.size(), 2u);
  EXPECT_EQ(from_snapshot.keyed()[0].increments[0].at, 7200);
}

TEST(BucketKeyed, AtAsSentIsPartOfTheBodyHash) {
  std::vector<ingest::increment> plain{{1, 1, 1}};
  const auto h = idempotency::hash_of(plain);
  // The receive time is not part of it: a retry later is the same request.
  plain[0].at = 12345;
  EXPECT_EQ(idempotency::hash_of(plain), h);
  auto given = plain;
  given[0].at_given = true;
  EXPECT_NE(idempotency::hash_of(given), h);
  auto other = given;
  other[0].at = 12346;
  EXPECT_NE(idempotency::hash_of(other), idempotency::hash_of(given));
}

// A keyed retry is looked up by the hash of its body whether its times resolve or not
// (README: HTTP API, Idempotency-Key): resolve_times() gives the items without `at` a
// receive time, and may stop at an `at` past the retention, but neither changes the hash.
TEST(BucketKeyed, TheBodyHashIsTheSameWhetherOrNotTheTimesResolve) {
  store::bucket_spec spec;
  spec.declare(1, granularity::hour, std::chrono::hours(1));
  const std::int64_t at = 1'800'000'000;
  std::vector<ingest::increment> sent{{1, 1, 1}, {1, 2, 3}, {1, 3, 1}};
  sent[1].at_given = true;
  sent[1].at = at;
  const auto h = idempotency::hash_of(sent);
  // Pinned: hashes are stored in the WAL and the keys table, and must not change.
  EXPECT_EQ(idempotency::hex(h), "68b1a15036c6a7084aa5382306c49256");
  auto first = sent;  // accepted when it was sent
  ASSERT_FALSE(ingest::resolve_times(first, spec, at + 10));
  EXPECT_EQ(idempotency::hash_of(first), h);
  auto retry = sent;  // retried once `at` had left the hour's retention
  ASSERT_TRUE(ingest::resolve_times(retry, spec, at + 3601));
  EXPECT_EQ(retry[0].at, at + 3601);  // given a time before it stopped
  EXPECT_EQ(idempotency::hash_of(retry), h);
}

TEST(BucketKeyed, KeyedBatchesDeriveTheirBucketRows) {
  idempotency::keyed_request a{"a", {}, {at(1, 1, 2, 3600), at(1, 2, 1, 1), at(1, 2, -1, 7200)}, 0};
  std::mt19937_64 rng(1);
  std::size_t dropped = 0;
  const auto batches = idempotency::form_keyed_batches(
      {a}, 100, 10, 1, 1, rng, std::chrono::steady_clock::now(), dropped, hour_and_day(1));
  ASSERT_EQ(batches.size(), 1u);
  // Counter 2's total is 0, yet its hour buckets are not: it keeps a row of 0.
  ASSERT_EQ(batches[0].rows.size(), 2u);
  EXPECT_EQ(batches[0].rows[1].delta, 0);
  // (1,1): hour 3600, day 0; (1,2): hour 0, hour 7200 (day 0 sums to zero: left out).
  EXPECT_EQ(batches[0].bucket_rows.size(), 4u);
}

// One keyed request of many distinct counters (a 1 MiB body holds about 20,000): its
// bucket rows are derived in n log n, not n^2 (a linear search per bucket row took
// minutes for this under ASan, and ran again at commit inside the transaction).
TEST(BucketKeyed, ManyCountersInOneKeyedRequestDeriveTheirBucketRowsQuickly) {
  idempotency::keyed_request a{"big", {}, {}, 0};
  constexpr int n = 50000;
  for (int i = 0; i < n; ++i)
    a.increments.push_back(at(1, 2 * static_cast<std::uint64_t>(i), 1, 7200));
  // And one whose total is 0: its row is added among the others, in order.
  a.increments.push_back(at(1, 25001, 1, 0));
  a.increments.push_back(at(1, 25001, -1, 3600));
  std::mt19937_64 rng(1);
  std::size_t dropped = 0;
  // This thread's CPU time, not wall time: a loaded machine (tests side by side, other
  // builds) stretches the wall clock, never this thread's CPU seconds.
  const auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
  };
  const auto start = cpu_now();
  const auto batches = idempotency::form_keyed_batches(
      {a}, 100, 10, 1, 1, rng, std::chrono::steady_clock::now(), dropped, hour_and_day(1));
  const auto took = cpu_now() - start;
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].rows.size(), static_cast<std::size_t>(n) + 1);
  EXPECT_TRUE(std::is_sorted(batches[0].rows.begin(), batches[0].rows.end(),
                             [](const db::counter_row& x, const db::counter_row& y) {
                               return x.record_id < y.record_id;
                             }));
  EXPECT_EQ(batches[0].bucket_rows.size(), 2u * n + 2);
  // n^2 / 2 = 1.25e9 comparisons took far longer; n log n takes milliseconds.
  EXPECT_LT(took, std::chrono::seconds(10));
}

}  // namespace
}  // namespace slotted
