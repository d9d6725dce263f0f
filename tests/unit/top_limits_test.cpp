// Top-N and multi-get, the pure parts: mysql.table's bound against
// every table derived from it, the totals tables' scratch names.

#include <gtest/gtest.h>

#include "config/config.hpp"
#include "db/sql.hpp"
#include "db/top.hpp"
#include "support/config_problems.hpp"

namespace slotted {
namespace {

// Every name --migrate makes for `table` under `cfg`, the scratch tables included.
std::vector<std::string> derived_names(const config::daemon_config& cfg) {
  std::vector<std::string> out;
  const auto& t = cfg.mysql.table;
  const auto buckets = config::bucket_spec_of(cfg);
  const auto top = config::top_spec_of(cfg);
  for (const auto g : store::all_granularities) {
    if (buckets.uses(g)) out.push_back(db::bucket_table(t, g));
  }
  if (!top.empty()) {
    out.push_back(db::totals_table(t));
    out.push_back(db::totals_scratch_table(db::totals_table(t)));
  }
  for (const auto g : store::all_granularities) {
    if (!top.uses(g)) continue;
    out.push_back(db::bucket_totals_table(t, g));
    out.push_back(db::totals_scratch_table(db::bucket_totals_table(t, g)));
  }
  return out;
}

// At the longest mysql.table each config accepts, every derived name (the scratch
// names --migrate fills the totals under included) is a valid identifier; one character
// more is a config error naming mysql.table and the bound. With the scratch name
// `<x>_totals_filling` (8 characters more) this fails at 52, 53 and 57 characters.
TEST(TopLimits, EveryDerivedTableFitsAtTheLongestAcceptedTableName) {
  const std::vector<std::pair<std::string, std::size_t>> cases = {
      {"  - {name: a, record_type: 1}\n", 64},
      {"  - {name: a, record_type: 1, buckets: {day: 10d}}\n", 60},
      {"  - {name: a, record_type: 1, buckets: {hour: 1h}}\n", 59},
      {"  - {name: a, record_type: 1, top: true}\n", 57},
      {"  - {name: a, record_type: 1, buckets: {day: 10d}, top: true}\n", 53},
      {"  - {name: a, record_type: 1, buckets: {hour: 1h, day: 10d}, top: true}\n", 52},
      {"  - {name: a, record_type: 1, buckets: {hour: 1h}, top: true}\n"
       "  - {name: b, record_type: 2, buckets: {day: 1d}}\n",
       52},
  };
  for (const auto& [counters, most] : cases) {
    const auto yaml = [&counters = counters](std::size_t n) {
      return "mysql: {table: " + std::string(n, 't') + "}\ncounters:\n" + counters;
    };
    const auto cfg = config::parse_config(yaml(most), "test.yaml");
    for (const auto& name : derived_names(cfg)) {
      EXPECT_TRUE(config::is_valid_identifier(name)) << name << " (" << name.size() << ")";
    }
    if (most == 64) continue;  // past 64 is no identifier at all
    const auto p = test::problems_of(yaml(most + 1));
    ASSERT_EQ(p.size(), 1u) << counters;
    EXPECT_NE(p[0].find("mysql.table"), std::string::npos) << p[0];
    EXPECT_NE(p[0].find("may have at most " + std::to_string(most) + " characters"),
              std::string::npos)
        << p[0];
  }
}

TEST(TopLimits, AScratchTableIsNeverLongerThanTheTableItBecomes) {
  EXPECT_EQ(db::totals_scratch_table("t_totals"), "t_tfill");
  EXPECT_EQ(db::totals_scratch_table("t_hour_totals"), "t_hour_tfill");
  EXPECT_LE(db::totals_scratch_table(db::bucket_totals_table("t", store::granularity::day)).size(),
            db::bucket_totals_table("t", store::granularity::day).size());
}

// A reset lowers its bucket totals by UPDATE, never an upsert: a bucket whose totals
// row is gone (pruned at the retention edge) gets no row of a negative count. Cut to
// the statement budget, one bucket at least a statement.
TEST(TopLimits, AResetLowersBucketTotalsByUpdateNeverAnUpsert) {
  const store::counter_key key{3, 9};
  std::vector<store::bucket_row> lost;
  for (int d = 1; d <= 40; ++d) lost.push_back({3, 9, store::granularity::day, 86400 * d, 0, -d});
  lost.push_back({3, 8, store::granularity::day, 86400, 0, -100});  // another counter's
  const std::vector<store::granularity> grans = {store::granularity::day};
  const auto all = db::reset_totals_statements("t", key, 5, lost, grans, 1 << 20);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[2].rfind("UPDATE `t_day_totals` SET `count` = `count` + CASE `bucket` WHEN ", 0),
            0u)
      << all[2];
  EXPECT_NE(all[2].find(" THEN -40 END WHERE `record_type` = 3 AND `record_id` = 9 AND "
                        "`bucket` IN ("),
            std::string::npos)
      << all[2];
  EXPECT_EQ(all[2].find("-100"), std::string::npos);
  for (const auto& sql : all) EXPECT_EQ(sql.find("INSERT"), std::string::npos) << sql;
  const auto cut = db::reset_totals_statements("t", key, 5, lost, grans, 400);
  ASSERT_GT(cut.size(), 4u);
  std::size_t whens = 0;
  for (std::size_t i = 2; i + 1 < cut.size(); ++i) {
    EXPECT_LE(cut[i].size(), 400u) << cut[i];
    for (auto at = cut[i].find(" WHEN "); at != std::string::npos; at = cut[i].find(" WHEN ", at + 1))
      ++whens;
  }
  EXPECT_EQ(whens, 40u);
}

}  // namespace
}  // namespace slotted
