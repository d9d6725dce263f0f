// The SQL of an adoption (daemon/db/sql_adopt.hpp): the statements --adopt sends,
// exactly, so that a change to what a batch locks or takes is a visible change here.

#include <gtest/gtest.h>

#include "db/sql_adopt.hpp"

namespace slotted::db {
namespace {

const rollup_target target{123, "repositories", "id", "download_count", "repo_downloads"};

TEST(AdoptSql, ABatchTakesItsRangeIntoSlotZeroInIdOrderAddingToWhatIsThere) {
  EXPECT_EQ(take_batch_insert(mariadb_dialect(), "slotted_counters", target, {41, 90}),
            "INSERT INTO `slotted_counters` (`record_type`, `record_id`, `slot`, `count`) "
            "SELECT 123, o.`id`, 0, o.`download_count` FROM `repositories` AS o "
            "WHERE o.`id` > 41 AND o.`id` <= 90 AND o.`download_count` > 0 ORDER BY o.`id` "
            "ON DUPLICATE KEY UPDATE `count` = `slotted_counters`.`count` + VALUES(`count`)");
  // The first batch has no lower bound, the last no upper one.
  EXPECT_NE(take_batch_insert(mariadb_dialect(), "c", target, {std::nullopt, 9})
                .find("WHERE o.`id` <= 9 AND"),
            std::string::npos);
  EXPECT_NE(take_batch_insert(mariadb_dialect(), "c", target, {9, std::nullopt})
                .find("WHERE o.`id` > 9 AND"),
            std::string::npos);
  EXPECT_NE(take_batch_insert(mariadb_dialect(), "c", target, {}).find("WHERE TRUE AND"),
            std::string::npos);
}

TEST(AdoptSql, ABatchReadsEveryRowOfItsRangeOnceInIdOrder) {
  EXPECT_EQ(batch_rows_select(target, {41, 90}),
            "SELECT o.`id`, o.`download_count` FROM `repositories` AS o "
            "WHERE o.`id` > 41 AND o.`id` <= 90 ORDER BY o.`id`");
  // The first batch has no lower bound, the last no upper one.
  EXPECT_NE(batch_rows_select(target, {std::nullopt, 9}).find("WHERE o.`id` <= 9 ORDER"),
            std::string::npos);
  EXPECT_NE(batch_rows_select(target, {9, std::nullopt}).find("WHERE o.`id` > 9 ORDER"),
            std::string::npos);
  EXPECT_NE(batch_rows_select(target, {}).find("WHERE TRUE ORDER"), std::string::npos);
}

TEST(AdoptSql, TheAdoptionRowIsLockedAndAdvancedByItsKey) {
  EXPECT_EQ(state_select(target, true),
            "SELECT `state`, `mode`, `last_id`, `rows_taken`, `total_taken` FROM "
            "`slotted_counterd_adoptions` WHERE `record_type` = 123 AND `owner_table` = "
            "'repositories' AND LOWER(`count_column`) = LOWER('download_count') FOR UPDATE");
  EXPECT_EQ(state_select(target, false).find("FOR UPDATE"), std::string::npos);
  EXPECT_EQ(state_advance(mariadb_dialect(), target, 90, 12, "3456", false),
            "UPDATE `slotted_counterd_adoptions` SET `last_id` = 90, `rows_taken` = `rows_taken` "
            "+ 12, `total_taken` = `total_taken` + 3456 WHERE `record_type` = 123 AND "
            "`owner_table` = 'repositories' AND LOWER(`count_column`) = LOWER('download_count')");
  EXPECT_NE(state_advance(mariadb_dialect(), target, std::nullopt, 0, "0", true)
                .find("SET `rows_taken` = `rows_taken` + 0, `total_taken` = `total_taken` + 0, "
                      "`state` = 'done', `finished` = UTC_TIMESTAMP()"),
            std::string::npos);
  EXPECT_EQ(state_insert(mariadb_dialect(), target, "running", "history"),
            "INSERT IGNORE INTO `slotted_counterd_adoptions` (`record_type`, `owner_table`, "
            "`count_column`, `id_column`, `state`, `mode`, `started`, `finished`) VALUES (123, "
            "'repositories', 'download_count', 'id', 'running', 'history', UTC_TIMESTAMP(), "
            "NULL)");
  EXPECT_NE(state_insert(mariadb_dialect(), target, "done", "zeros")
                .find("'done', 'zeros', UTC_TIMESTAMP(), UTC_TIMESTAMP())"),
            std::string::npos);
}

TEST(AdoptSql, BadRowsAreFoundByTheServerInOneScan) {
  const row_limits limits{2147483647, 9223372036854775807ull};
  const std::string bad =
      "(o.`id` IS NULL OR o.`id` < 0 OR o.`id` > 2147483647 OR o.`download_count` IS NULL OR "
      "o.`download_count` < 0 OR o.`download_count` > 9223372036854775807)";
  EXPECT_EQ(bad_row_condition(target, limits), bad);
  EXPECT_EQ(validation_select(target, limits, {5, std::nullopt}),
            "SELECT COUNT(*), COUNT(CASE WHEN " + bad +
                " THEN 1 END) FROM `repositories` AS o WHERE o.`id` > 5");
  EXPECT_EQ(first_bad_row_select(target, limits, {}),
            "SELECT o.`id`, o.`download_count` FROM `repositories` AS o WHERE TRUE AND " + bad +
                " ORDER BY o.`id` LIMIT 1");
  EXPECT_EQ(
      batch_check_select(target, limits, {1, 2}),
      "SELECT COUNT(CASE WHEN " + bad +
          " THEN 1 END), COUNT(CASE WHEN o.`download_count` > 0 THEN 1 END), COALESCE(SUM(CASE "
          "WHEN o.`download_count` > 0 THEN o.`download_count` END), 0), MAX(o.`id`) FROM "
          "`repositories` AS o WHERE o.`id` > 1 AND o.`id` <= 2");
}

TEST(AdoptSql, TheBatchBoundIsTheNthIdAfterTheCursor) {
  EXPECT_EQ(batch_upper_select(target, 41, 10000),
            "SELECT o.`id` FROM `repositories` AS o WHERE o.`id` > 41 ORDER BY o.`id` LIMIT 1 "
            "OFFSET 9999");
  EXPECT_EQ(batch_upper_select(target, std::nullopt, 1),
            "SELECT o.`id` FROM `repositories` AS o WHERE TRUE ORDER BY o.`id` LIMIT 1 OFFSET 0");
  EXPECT_EQ(nonzero_select(target),
            "SELECT 1 FROM `repositories` AS o WHERE o.`download_count` <> 0 LIMIT 1");
}

}  // namespace
}  // namespace slotted::db
