// GET /v1/counters/{t}?ids=... and GET /v1/top/{t}: their parameters (pure
// parsing, then through the router against a scripted backend) and their SQL.

#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>

#include "db/top.hpp"
#include "http/query.hpp"
#include "http/router.hpp"
#include "support/fake_backend.hpp"

namespace slotted::http {
namespace {

namespace bh = boost::beast::http;

TEST(IdList, ParsesDecimalIdsSeparatedByCommasEachOnceInOrder) {
  auto ids = parse_id_list("3,1,2");
  ASSERT_TRUE(ids);
  EXPECT_EQ(*ids, (std::vector<std::uint64_t>{3, 1, 2}));
  // A repeated id is read once, where it first stands; "%2C" is a comma too.
  ids = parse_id_list("5%2C7,5%2c18446744073709551615,7");
  ASSERT_TRUE(ids);
  EXPECT_EQ(*ids, (std::vector<std::uint64_t>{5, 7, 18446744073709551615ull}));
}

TEST(IdList, RefusesEmptyNonNumericAndTooManyNamingIds) {
  for (const std::string_view bad : {"", ",", "1,", ",1", "1,,2", "x", "1,-2", "1, 2", "+1",
                                     "18446744073709551616", "1.0", "0x10"}) {
    const auto got = parse_id_list(bad);
    ASSERT_FALSE(got) << bad;
    EXPECT_EQ(got.error(), errc::invalid_input);
    EXPECT_EQ(got.failed().text().rfind("ids ", 0), 0u) << got.failed().text();
  }
  std::string thousand, more;
  for (int i = 0; i < 1000; ++i) thousand += (i ? "," : "") + std::to_string(i);
  const auto all = parse_id_list(thousand);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), 1000u);
  more = thousand + ",1000";
  const auto over = parse_id_list(more);
  ASSERT_FALSE(over);
  EXPECT_NE(over.failed().text().find("more than 1000"), std::string::npos);
  // Duplicates count against the bound: it bounds the request, not the answer.
  EXPECT_FALSE(parse_id_list(thousand + ",0"));
}

TEST(Query, UnknownOrRepeatedParametersAreNamed) {
  auto q = parse_query("/x?limit=3&to=4", {"limit", "to"});
  ASSERT_TRUE(q);
  EXPECT_EQ(q->get("limit"), "3");
  EXPECT_EQ(q->get("to"), "4");
  EXPECT_FALSE(q->get("from"));
  q = parse_query("/x?limit=3&limit=4", {"limit"});
  ASSERT_FALSE(q);
  EXPECT_EQ(q.error(), errc::invalid_input);
  EXPECT_NE(q.failed().text().find("\"limit\" given twice"), std::string::npos);
  q = parse_query("/x?lmit=3", {"limit"});
  ASSERT_FALSE(q);
  EXPECT_NE(q.failed().text().find("lmit"), std::string::npos);
}

TEST(Query, ABucketRangeIsTheBucketsStartingInsideIt) {
  // Days: from mid-day 1 to mid-day 3 holds the starts of days 2 and 3.
  const std::int64_t day = 86400;
  auto r = parse_bucket_range("day", std::to_string(day + 5), std::to_string(3 * day + 5), 400);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->gran, store::granularity::day);
  EXPECT_EQ(r->first, 2 * day);
  EXPECT_EQ(r->last, 3 * day);
  // Inside one day, after its start: no bucket starts there.
  r = parse_bucket_range("day", "5", "6", 400);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->empty());
  // Exactly max_buckets is taken, one more is refused naming the bound.
  EXPECT_TRUE(parse_bucket_range("hour", "0", std::to_string(3 * 3600), 4));
  r = parse_bucket_range("hour", "0", std::to_string(4 * 3600), 4);
  ASSERT_FALSE(r);
  EXPECT_NE(r.failed().text().find("more than 4 hour buckets"), std::string::npos);
  for (const auto& [g, f, t, why] : {std::tuple{"week", "0", "1", "granularity"},
                                     {"day", "x", "1", "from must be"},
                                     {"day", "0", "-1", "to must be"},
                                     {"day", "2", "1", "from must not be after to"}}) {
    r = parse_bucket_range(g, f, t, 400);
    ASSERT_FALSE(r) << g << f << t;
    EXPECT_EQ(r.error(), errc::invalid_input);
    EXPECT_NE(r.failed().text().find(why), std::string::npos) << r.failed().text();
  }
}

class ManyAndTopReads : public ::testing::Test {
 protected:
  static config::daemon_config cfg() {
    config::daemon_config c;
    // downloads and clicks keep top-N totals (counters[].top), views does not.
    c.counters = {{"downloads",
                   3,
                   std::nullopt,
                   {{store::granularity::day, std::chrono::hours(24 * 400)}},
                   true},
                  {"views", 4, std::nullopt, {}},
                  {"clicks", 6, std::nullopt, {}, true}};
    return c;
  }
  std::vector<response> get(std::string target, bh::verb verb = bh::verb::get) {
    request req{verb, target, 11};
    if (auto refused = router_.check_header(req)) return {std::move(*refused)};
    auto answers = std::make_shared<std::vector<response>>();
    router_.handle(std::move(req),
                   [answers](response&& res) { answers->push_back(std::move(res)); });
    last_ = answers;
    return *answers;
  }
  std::string reason(const std::string& target) {
    const auto got = get(target);
    EXPECT_EQ(got.size(), 1u) << target;
    if (got.empty()) return {};
    EXPECT_EQ(got[0].result_int(), 400u) << target;
    return got[0].body();
  }
  config::daemon_config cfg_ = cfg();
  test::fake_backend backend_;
  metrics::registry metrics_;
  ingest::table_limits limits_;
  router router_{cfg_, backend_, metrics_, limits_};
  std::shared_ptr<std::vector<response>> last_;
};

TEST_F(ManyAndTopReads, AManyCounterReadAsksForEachIdOnceAndPrintsThemInOrder) {
  EXPECT_TRUE(get("/v1/counters/downloads?ids=9,2,9").empty());
  EXPECT_EQ(backend_.read_key_.record_type, 3u);
  EXPECT_EQ(backend_.read_ids_, (std::vector<std::uint64_t>{9, 2}));
  backend_result r;
  r.totals = {{9, static_cast<__int128>(INT64_MAX) + 1, 1}, {2, 0, 0}};
  backend_.read_done_(r);
  ASSERT_EQ(last_->size(), 1u);
  EXPECT_EQ((*last_)[0].result_int(), 200u);
  EXPECT_EQ((*last_)[0].body(),
            R"({"record_type": 3, "items": [{"record_id": "9", "count": 9223372036854775809, )"
            R"("persisted": 9223372036854775808, "pending": 1}, )"
            R"({"record_id": "2", "count": 0, "persisted": 0, "pending": 0}]})");
  get("/v1/counters/3?ids=1");
  backend_.read_done_({errc::unavailable, "the counter is being written; retry"});
  EXPECT_EQ(last_->at(0).result_int(), 503u);
  // HEAD is GET without the body (the session drops it); other methods are 405.
  EXPECT_TRUE(get("/v1/counters/3?ids=1", bh::verb::head).empty());
  const auto post = get("/v1/counters/3?ids=1", bh::verb::post);
  ASSERT_EQ(post.size(), 1u);
  EXPECT_EQ(post[0].result_int(), 405u);
  EXPECT_EQ(post[0][bh::field::allow], "GET, HEAD");
  EXPECT_NE(metrics_.serialize().find("route=\"counters_many\""), std::string::npos);
}

TEST_F(ManyAndTopReads, BadManyCounterParametersAre400NamingThem) {
  EXPECT_NE(reason("/v1/counters/3").find("ids\\\" is required"), std::string::npos);
  EXPECT_NE(reason("/v1/counters/3?ids=").find("ids must be"), std::string::npos);
  EXPECT_NE(reason("/v1/counters/3?ids=1,a").find("ids must be"), std::string::npos);
  EXPECT_NE(reason("/v1/counters/3?ids=1&ids=2").find("ids\\\" given twice"), std::string::npos);
  EXPECT_NE(reason("/v1/counters/3?id=1").find("unknown query parameter"), std::string::npos);
  EXPECT_NE(reason("/v1/counters/5?ids=1").find("not declared"), std::string::npos);
  EXPECT_NE(reason("/v1/counters/nope?ids=1").find("record_type"), std::string::npos);
  EXPECT_TRUE(backend_.read_ids_.empty());
}

TEST_F(ManyAndTopReads, ATopReadAsksForTheLimitAndTheBucketsAndPrintsTheItems) {
  EXPECT_TRUE(get("/v1/top/downloads").empty());
  EXPECT_EQ(backend_.read_key_.record_type, 3u);
  EXPECT_EQ(backend_.top_limit_, 10u);  // the default
  EXPECT_FALSE(backend_.top_range_);
  backend_result r;
  r.top = {{7, 12}, {2, 5}};
  backend_.read_done_(r);
  ASSERT_EQ(last_->size(), 1u);
  EXPECT_EQ((*last_)[0].result_int(), 200u);
  EXPECT_EQ((*last_)[0].body(),
            R"({"items": [{"record_id": "7", "count": 12}, {"record_id": "2", "count": 5}]})");
  // Buckets that start in [from, to], as for a series.
  EXPECT_TRUE(get("/v1/top/3?limit=1000&granularity=day&from=86401&to=259200").empty());
  EXPECT_EQ(backend_.top_limit_, 1000u);
  ASSERT_TRUE(backend_.top_range_);
  EXPECT_EQ(backend_.top_range_->gran, store::granularity::day);
  EXPECT_EQ(backend_.top_range_->from, 172800);
  EXPECT_EQ(backend_.top_range_->to, 259200);
  backend_.read_done_({errc::unavailable, "database not reachable"});
  EXPECT_EQ(last_->at(0).result_int(), 503u);
  EXPECT_TRUE(get("/v1/top/3?limit=1", bh::verb::head).empty());
  EXPECT_NE(metrics_.serialize().find("route=\"top\""), std::string::npos);
}

TEST_F(ManyAndTopReads, BadTopParametersAre400NamingThem) {
  for (const char* bad : {"0", "1001", "-1", "x", ""})
    EXPECT_NE(reason(std::string("/v1/top/3?limit=") + bad).find("limit must be"),
              std::string::npos)
        << bad;
  EXPECT_NE(reason("/v1/top/3?granularity=day&from=0").find("go together"), std::string::npos);
  EXPECT_NE(reason("/v1/top/3?granularity=week&from=0&to=1").find("hour or day"),
            std::string::npos);
  EXPECT_NE(reason("/v1/top/3?granularity=day&from=x&to=1").find("from must be"),
            std::string::npos);
  EXPECT_NE(reason("/v1/top/3?granularity=day&from=0&to=x").find("to must be"), std::string::npos);
  EXPECT_NE(reason("/v1/top/3?granularity=day&from=5&to=1").find("must not be after"),
            std::string::npos);
  EXPECT_NE(reason("/v1/top/3?granularity=hour&from=0&to=1").find("keeps no hour"),
            std::string::npos);
  EXPECT_NE(reason("/v1/top/6?granularity=day&from=0&to=1").find("keeps no day"),
            std::string::npos);
  EXPECT_NE(reason("/v1/top/3?granularity=day&from=0&to=" + std::to_string(86400 * 400))
                .find("more than 400 day buckets"),
            std::string::npos);
  EXPECT_NE(reason("/v1/top/3?limt=3").find("unknown query parameter"), std::string::npos);
  EXPECT_NE(reason("/v1/top/5").find("not declared"), std::string::npos);
  EXPECT_EQ(backend_.top_limit_, 0u);
  // No bucket starts in the range: nothing to read.
  const auto empty = get("/v1/top/3?granularity=day&from=1&to=86399");
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_EQ(empty[0].body(), R"({"items": []})");
}

// A top-N whose first round alone passes db::max_top_rows (buckets x max(1.5 x limit,
// 20)) can never be answered, whatever the data: a 400 naming limit and the range at
// parse time, nothing asked of the backend (a 503 would have a client obeying
// Retry-After retry it for ever). One bucket fewer is read. A data-dependent stop (the
// merge passing its bound on tied counts) is a 422, not a 503.
TEST_F(ManyAndTopReads, ATopNThatCanNeverBeAnsweredIs400AndADataDependentStopIs422) {
  // limit 1000: a page of 1500 rows, so at most 133 buckets.
  const auto range = [](int days) {
    return "/v1/top/3?limit=1000&granularity=day&from=0&to=" + std::to_string(86400 * (days - 1));
  };
  const auto refused = reason(range(134));
  EXPECT_NE(refused.find("limit and the range (from, to)"), std::string::npos) << refused;
  EXPECT_NE(refused.find("at most 133 buckets (it holds 134)"), std::string::npos) << refused;
  EXPECT_EQ(backend_.top_limit_, 0u);
  EXPECT_TRUE(get(range(133)).empty());
  EXPECT_EQ(backend_.top_limit_, 1000u);
  backend_result stopped{errc::too_costly, "this top-N would read more than 200000 rows"};
  backend_.read_done_(stopped);
  ASSERT_EQ(last_->size(), 1u);
  EXPECT_EQ(last_->at(0).result_int(), 422u);
  EXPECT_EQ(last_->at(0)[bh::field::retry_after], "");
  EXPECT_NE(last_->at(0).body().find("would read more than"), std::string::npos);
}

// counters[].top off (views): no top-N totals are kept, so there is none to read: a 404
// naming the switch, whatever the parameters, and nothing asked of the backend; the
// many-counter read needs no totals and works as for any counter.
TEST_F(ManyAndTopReads, ATopReadOfACounterWithoutTopIs404NamingTheSwitch) {
  for (const std::string target : {"/v1/top/views", "/v1/top/4?limit=3", "/v1/top/4?limit=0"}) {
    const auto got = get(target);
    ASSERT_EQ(got.size(), 1u) << target;
    EXPECT_EQ(got[0].result_int(), 404u) << target;
    EXPECT_NE(got[0].body().find("keeps no top-N totals: declare its counter with top: true "
                                 "(counters[].top)"),
              std::string::npos)
        << got[0].body();
  }
  EXPECT_EQ(backend_.top_limit_, 0u);
  EXPECT_TRUE(get("/v1/counters/views?ids=1,2").empty());
  EXPECT_EQ(backend_.read_key_.record_type, 4u);
  EXPECT_EQ(backend_.read_ids_, (std::vector<std::uint64_t>{1, 2}));
}

}  // namespace
}  // namespace slotted::http

namespace slotted::db {
namespace {

TEST(TopSql, TotalsUpsertsSumPerCounterAndBucketInKeyOrder) {
  const std::vector<counter_row> rows = {{3, 9, 1, 2}, {3, 9, 2, 5}, {3, 1, 1, 4}, {3, 2, 1, 0}};
  const std::vector<store::bucket_row> buckets = {{3, 9, store::granularity::day, 86400, 1, 2},
                                                  {3, 9, store::granularity::day, 86400, 2, 5},
                                                  {3, 1, store::granularity::hour, 3600, 1, 4}};
  const store::top_spec top({3}, store::no_buckets());
  const auto sql = totals_upserts(mariadb_dialect(), "t", rows, buckets, top, 1 << 20);
  ASSERT_EQ(sql.size(), 3u);
  EXPECT_EQ(sql[0],
            "INSERT INTO `t_totals` (`record_type`, `record_id`, `count`) VALUES (3,1,4),(3,9,7) "
            "ON DUPLICATE KEY UPDATE `count` = `count` + VALUES(`count`)");
  EXPECT_EQ(sql[1],
            "INSERT INTO `t_hour_totals` (`record_type`, `record_id`, `bucket`, `count`) VALUES "
            "(3,1,'1970-01-01 01:00:00',4) ON DUPLICATE KEY UPDATE `count` = `count` + "
            "VALUES(`count`)");
  EXPECT_NE(sql[2].find("`t_day_totals`"), std::string::npos);
  EXPECT_NE(sql[2].find("(3,9,'1970-01-02',7)"), std::string::npos);
  EXPECT_TRUE(totals_upserts(mariadb_dialect(), "t", {}, {}, top, 1 << 20).empty());
}

// counters[].top: only the rows of counters that keep totals are added; with none, no
// statement at all (no totals table exists).
TEST(TopSql, TotalsUpsertsLeaveOutCountersWithoutTop) {
  const std::vector<counter_row> rows = {{3, 9, 1, 2}, {4, 1, 1, 4}};
  const std::vector<store::bucket_row> buckets = {{3, 9, store::granularity::day, 86400, 1, 2},
                                                  {4, 1, store::granularity::day, 86400, 1, 4}};
  EXPECT_TRUE(
      totals_upserts(mariadb_dialect(), "t", rows, buckets, store::no_top(), 1 << 20).empty());
  const auto sql = totals_upserts(mariadb_dialect(), "t", rows, buckets,
                                  store::top_spec({3}, store::no_buckets()), 1 << 20);
  ASSERT_EQ(sql.size(), 2u);
  EXPECT_NE(sql[0].find("VALUES (3,9,2) ON"), std::string::npos) << sql[0];
  EXPECT_NE(sql[1].find("VALUES (3,9,'1970-01-02',2) ON"), std::string::npos) << sql[1];
}

// Cut by bytes as the slot statements are (max_statement_bytes), not by a row count:
// 1,500 totals are one statement under a large budget, and under a small one each
// statement stays within it and together they hold every total once, in key order.
TEST(TopSql, TotalsStatementsAreCutByTheByteBudget) {
  std::vector<counter_row> rows;
  for (std::uint64_t id = 1; id <= 1500; ++id) rows.push_back({3, id, 0, 1});
  const store::top_spec top({3}, store::no_buckets());
  EXPECT_EQ(totals_upserts(mariadb_dialect(), "t", rows, {}, top, 1 << 20).size(), 1u);
  const auto cut = totals_upserts(mariadb_dialect(), "t", rows, {}, top, 1000);
  ASSERT_GT(cut.size(), 10u);
  std::size_t tuples = 0;
  for (const auto& sql : cut) {
    EXPECT_LE(sql.size(), 1000u);
    tuples += static_cast<std::size_t>(std::count(sql.begin(), sql.end(), '('));
    tuples -= 2;  // the column list's and VALUES(`count`)'s are not tuples
  }
  EXPECT_EQ(tuples, 1500u);
  EXPECT_NE(cut.front().find("VALUES (3,1,1),(3,2,1)"), std::string::npos);
}

// A reset's totals in the lock order (repository.hpp, 5): `t_totals` first, even when
// the slots summed to 0 (its DELETE locks the row), then `t_hour_totals`, then
// `t_day_totals`, whatever order the granularities come in.
TEST(TopSql, AResetLocksTheTotalsBeforeTheBucketTotalsEvenAtSumZero) {
  const store::counter_key key{3, 9};
  const std::vector<store::bucket_row> lost = {{3, 9, store::granularity::day, 86400, 0, -2},
                                               {3, 9, store::granularity::hour, 3600, 0, 2}};
  const std::vector<store::granularity> grans = {store::granularity::day, store::granularity::hour};
  const auto tables = [](const std::vector<std::string>& sql) {
    std::vector<std::string> out;
    for (const auto& s : sql) {
      const auto from = s.find('`');
      out.push_back(s.substr(from, s.find('`', from + 1) - from + 1));
    }
    return out;
  };
  const auto at_zero = reset_totals_statements("t", key, 0, lost, grans, 1 << 20);
  EXPECT_EQ(tables(at_zero),
            (std::vector<std::string>{"`t_totals`", "`t_hour_totals`", "`t_hour_totals`",
                                      "`t_day_totals`", "`t_day_totals`"}));
  EXPECT_EQ(at_zero[0],
            "DELETE FROM `t_totals` WHERE `record_type` = 3 AND `record_id` = 9 AND `count` = 0");
  const auto some = reset_totals_statements("t", key, 5, lost, grans, 1 << 20);
  ASSERT_EQ(some.size(), 6u);
  EXPECT_EQ(some[0],
            "UPDATE `t_totals` SET `count` = `count` - 5 WHERE `record_type` = 3 AND "
            "`record_id` = 9");
  EXPECT_EQ(tables(some)[1], "`t_totals`");
}

TEST(TopSql, ManyCountersAreOneStatementThroughThePrimaryKey) {
  const std::vector<std::uint64_t> ids = {5, 1, 18446744073709551615ull};
  EXPECT_EQ(select_counts("t", 3, ids),
            "SELECT `record_id`, COALESCE(SUM(`count`), 0) FROM `t` WHERE `record_type` = 3 AND "
            "`record_id` IN (5,1,18446744073709551615) GROUP BY `record_id`");
}

}  // namespace
}  // namespace slotted::db
