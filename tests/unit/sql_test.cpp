#include "db/sql.hpp"

#include <gtest/gtest.h>

namespace slotted::db {
namespace {

TEST(Sql, UpsertIsOneMultiRowStatementWithBackquotedIdentifiers) {
  const std::vector<counter_row> rows{{1, 2, 3, 4},
                                      {2147483647, 18446744073709551615ull, 65535, -9}};
  EXPECT_EQ(upsert_statement("slotted_counters", rows),
            "INSERT INTO `slotted_counters` (`record_type`, `record_id`, `slot`, `count`) VALUES "
            "(1,2,3,4),(2147483647,18446744073709551615,65535,-9) "
            "ON DUPLICATE KEY UPDATE `count` = `count` + VALUES(`count`)");
}

TEST(Sql, IdentifiersAreQuoted) {
  EXPECT_EQ(quote_identifier("t"), "`t`");
  EXPECT_EQ(quote_identifier("a`b"), "`a``b`");
}

TEST(Sql, SchemaStatementsAreIdempotent) {
  EXPECT_NE(create_counters_table("c").find("CREATE TABLE IF NOT EXISTS `c`"), std::string::npos);
  EXPECT_NE(create_counters_table("c").find("PRIMARY KEY (`record_type`, `record_id`, `slot`)"),
            std::string::npos);
  EXPECT_NE(create_ledger_table().find("CREATE TABLE IF NOT EXISTS `slotted_counterd_ledger`"),
            std::string::npos);
}

TEST(Sql, SchemaChecksReadTheCurrentDatabase) {
  EXPECT_EQ(table_exists_select("'t'"),
            "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND "
            "TABLE_NAME = 't'");
  EXPECT_EQ(column_exists_select("'t'", "'c'"),
            "SELECT 1 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND "
            "TABLE_NAME = 't' AND COLUMN_NAME = 'c'");
  EXPECT_NE(unique_index_columns_select("'t'").find(
                "TABLE_NAME = 't' AND NON_UNIQUE = 0 ORDER BY INDEX_NAME, SEQ_IN_INDEX"),
            std::string::npos);
  EXPECT_EQ(ledger_seqs_select("'w'", 7, 9),
            "SELECT `batch_seq` FROM `slotted_counterd_ledger` WHERE `instance_id` = 'w' AND "
            "`run_id` = 7 AND `batch_seq` >= 9");
}

TEST(Sql, LedgerStatements) {
  EXPECT_EQ(ledger_insert("'web-01'", 7, 9, 1000),
            "INSERT INTO `slotted_counterd_ledger` (`instance_id`, `run_id`, `batch_seq`, "
            "`row_count`) VALUES "
            "('web-01',7,9,1000)");
  const auto prune = ledger_prune("'w'", 7, 100, 3600, 10000);
  EXPECT_NE(prune.find("`instance_id` = 'w'"), std::string::npos);
  EXPECT_NE(prune.find("NOT (`run_id` = 7 AND `batch_seq` >= 100)"), std::string::npos);
  EXPECT_NE(prune.find("LIMIT 10000"), std::string::npos);
  EXPECT_EQ(select_count("t", 1, 2),
            "SELECT COALESCE(SUM(`count`), 0) FROM `t` WHERE `record_type` = 1 AND "
            "`record_id` = 2");
}

TEST(Sql, DirtyMarksCarryTheBatchGenerationAndAreDeletedOnlyWithIt) {
  const std::vector<counter_row> rows{{1, 2, 3, 4}, {1, 5, 0, 1}};
  EXPECT_EQ(dirty_upsert("'a'", rows, 77),
            "INSERT INTO `slotted_counterd_dirty` (`record_type`, `record_id`, `instance_id`, "
            "`gen`) VALUES "
            "(1,2,'a',77),(1,5,'a',77) ON DUPLICATE KEY UPDATE `gen` = VALUES(`gen`)");
  const std::vector<dirty_mark> marks{{2, "'a'", 77}, {5, "'b'", 9}};
  EXPECT_EQ(dirty_delete(1, marks),
            "DELETE FROM `slotted_counterd_dirty` WHERE `record_type` = 1 AND (`record_id`, "
            "`instance_id`, `gen`) IN "
            "((2,'a',77),(5,'b',9))");
}

TEST(Sql, AResetDeletesExactlyTheSlotRowsItReadAndMarksARolledUpCounter) {
  EXPECT_EQ(reset_rows_select_locked("c", 3, 18446744073709551615ull),
            "SELECT `slot`, `count` FROM `c` WHERE `record_type` = 3 AND `record_id` = "
            "18446744073709551615 FOR UPDATE");
  const std::vector<std::int64_t> slots{0, 7};
  EXPECT_EQ(reset_statements("c", 3, 9, slots, "'a'", std::nullopt),
            std::vector<std::string>{"DELETE FROM `c` WHERE `record_type` = 3 AND `record_id` = 9 "
                                     "AND `slot` IN (0,7)"});
  // No slot rows: nothing to delete, but a rolled-up target must still go to 0.
  EXPECT_EQ(reset_statements("c", 3, 9, {}, "'a'", 5),
            std::vector<std::string>{
                "INSERT INTO `slotted_counterd_dirty` (`record_type`, `record_id`, "
                "`instance_id`, `gen`) VALUES (3,9,'a',5) ON DUPLICATE KEY UPDATE `gen` = "
                "VALUES(`gen`)"});
}

TEST(Sql, RollupSetsACounterWithoutSlotRowsToZero) {
  const std::vector<std::uint64_t> ids{4, 5};
  EXPECT_EQ(rollup_update("c", 3, "repos", "id", "downloads", ids),
            "UPDATE `repos` AS o LEFT JOIN (SELECT `record_id`, SUM(`count`) AS total FROM `c` "
            "WHERE `record_type` = 3 AND `record_id` IN (4,5) GROUP BY `record_id`) AS s ON "
            "o.`id` = s.`record_id` SET o.`downloads` = COALESCE(s.total, 0) WHERE o.`id` IN "
            "(4,5)");
}

TEST(Sql, DirtySelectReadsAfterTheCursorUpToTheRunsBound) {
  dirty_cursor cursor;
  cursor.max_record_id = 90;
  EXPECT_EQ(dirty_select(1, 10, cursor),
            "SELECT `record_id`, `instance_id`, `gen` FROM `slotted_counterd_dirty` WHERE "
            "`record_type` = 1 AND `record_id` <= 90 ORDER BY `record_id`, `instance_id` LIMIT 10");
  cursor.started = true;
  cursor.last_record_id = 7;
  cursor.last_quoted_instance = "'a'";
  EXPECT_EQ(dirty_select(1, 10, cursor),
            "SELECT `record_id`, `instance_id`, `gen` FROM `slotted_counterd_dirty` WHERE "
            "`record_type` = 1 AND `record_id` <= 90 AND (`record_id` > 7 OR (`record_id` = 7 AND "
            "`instance_id` > 'a')) ORDER BY `record_id`, `instance_id` LIMIT 10");
}

}  // namespace
}  // namespace slotted::db
