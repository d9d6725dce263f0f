#include "db/sql.hpp"

#include <gtest/gtest.h>

#include <chrono>

#include "db/sql_text.hpp"
#include "model/keyed_request.hpp"

namespace slotted::db {
namespace {

TEST(Sql, UpsertIsOneMultiRowStatementWithBackquotedIdentifiers) {
  const std::vector<counter_row> rows{{1, 2, 3, 4},
                                      {2147483647, 18446744073709551615ull, 65535, -9}};
  EXPECT_EQ(upsert_statement(mariadb_dialect(), "slotted_counters", rows),
            "INSERT INTO `slotted_counters` (`record_type`, `record_id`, `slot`, `count`) VALUES "
            "(1,2,3,4),(2147483647,18446744073709551615,65535,-9) "
            "ON DUPLICATE KEY UPDATE `count` = `count` + VALUES(`count`)");
}

// A read cut at what is left of a bound on several statements: milliseconds as decimal
// seconds, never 0 (no limit at all to MariaDB) and never past the 5 s of one statement.
TEST(Sql, ATimeLimitedReadIsCutAtTheTimeLeftInMilliseconds) {
  EXPECT_EQ(sql_text::time_limited("SELECT 1", 2345),
            "SET STATEMENT max_statement_time = 2.345 FOR SELECT 1");
  EXPECT_EQ(sql_text::time_limited("SELECT 1", 7),
            "SET STATEMENT max_statement_time = 0.007 FOR SELECT 1");
  EXPECT_EQ(sql_text::time_limited("SELECT 1", 0),
            "SET STATEMENT max_statement_time = 0.001 FOR SELECT 1");
  EXPECT_EQ(sql_text::time_limited("SELECT 1", 60000),
            "SET STATEMENT max_statement_time = 5.000 FOR SELECT 1");
}

TEST(Sql, IdentifiersAreQuoted) {
  EXPECT_EQ(quote_identifier("t"), "`t`");
  EXPECT_EQ(quote_identifier("a`b"), "`a``b`");
}

TEST(Sql, SchemaStatementsAreIdempotent) {
  EXPECT_NE(create_counters_table(mariadb_dialect(), "c").find("CREATE TABLE IF NOT EXISTS `c`"),
            std::string::npos);
  EXPECT_NE(create_counters_table(mariadb_dialect(), "c")
                .find("PRIMARY KEY (`record_type`, `record_id`, `slot`)"),
            std::string::npos);
  EXPECT_NE(create_ledger_table(mariadb_dialect())
                .find("CREATE TABLE IF NOT EXISTS `slotted_counterd_ledger`"),
            std::string::npos);
}

TEST(Sql, SchemaChecksReadTheCurrentDatabase) {
  EXPECT_EQ(mariadb_dialect().table_exists_select("'t'"),
            "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND "
            "TABLE_NAME = 't'");
  EXPECT_EQ(mariadb_dialect().column_exists_select("'t'", "'c'"),
            "SELECT 1 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND "
            "TABLE_NAME = 't' AND COLUMN_NAME = 'c'");
  EXPECT_NE(mariadb_dialect().unique_index_columns_select("'t'").find(
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
  const auto prune = ledger_prune_select(mariadb_dialect(), "'w'", 7, 100, 3600, 10000);
  EXPECT_NE(prune.find("`instance_id` = 'w'"), std::string::npos);
  EXPECT_NE(prune.find("`run_id` = 7 AND `batch_seq` < 100 AND"), std::string::npos);
  EXPECT_NE(prune.find("ORDER BY `committed_at` LIMIT 10000"), std::string::npos);
  // Every other instance's rows, older than their own age, through `by_time`.
  // Every other run's rows (other instances, earlier runs of this one, another process
  // sharing its instance_id), older than their own age, through `by_time`.
  EXPECT_EQ(ledger_stale_select(mariadb_dialect(), "'w'", 7, 86400, 500),
            "SELECT `instance_id`, `run_id`, `batch_seq` FROM `slotted_counterd_ledger` WHERE "
            "`committed_at` < NOW(3) - INTERVAL 86400 SECOND AND NOT (`instance_id` = 'w' AND "
            "`run_id` = 7) ORDER BY `committed_at` LIMIT 500");
  const std::vector<std::uint64_t> seqs{2, 4};
  EXPECT_EQ(ledger_delete(mariadb_dialect(), "'a'", 1, seqs, 3600),
            "DELETE `slotted_counterd_ledger` FROM `slotted_counterd_ledger` FORCE INDEX "
            "(PRIMARY) WHERE `instance_id` = 'a' AND `run_id` = 1 AND `batch_seq` IN (2,4) AND "
            "`committed_at` < NOW(3) - INTERVAL 3600 SECOND");
  EXPECT_NE(create_ledger_table(mariadb_dialect()).find("KEY `by_time` (`committed_at`)"),
            std::string::npos);
  EXPECT_EQ(select_count("t", 1, 2),
            "SELECT COALESCE(SUM(`count`), 0) FROM `t` WHERE `record_type` = 1 AND "
            "`record_id` = 2");
}

TEST(Sql, DirtyMarksCarryTheBatchGenerationAndAreDeletedOnlyWithIt) {
  const std::vector<counter_row> rows{{1, 2, 3, 4}, {1, 5, 0, 1}};
  EXPECT_EQ(dirty_upsert(mariadb_dialect(), "'a'", rows, 77),
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
  EXPECT_EQ(reset_statements(mariadb_dialect(), "c", 3, 9, slots, "'a'", std::nullopt),
            std::vector<std::string>{"DELETE FROM `c` WHERE `record_type` = 3 AND `record_id` = 9 "
                                     "AND `slot` IN (0,7)"});
  // No slot rows: nothing to delete, but a rolled-up target must still go to 0.
  EXPECT_EQ(reset_statements(mariadb_dialect(), "c", 3, 9, {}, "'a'", 5),
            std::vector<std::string>{
                "INSERT INTO `slotted_counterd_dirty` (`record_type`, `record_id`, "
                "`instance_id`, `gen`) VALUES (3,9,'a',5) ON DUPLICATE KEY UPDATE `gen` = "
                "VALUES(`gen`)"});
}

// Issue 21 item 2: the reset deleted every bucket row of the counter, those of a slot
// another instance inserted after its locking read too. It deletes the bucket rows of
// the slots it read, in the writers' lock order (slot rows, bucket rows, dirty mark).
TEST(Sql, AResetDeletesTheBucketRowsOfTheSlotsItReadOnlyInTheLockOrder) {
  const std::vector<std::int64_t> slots{0, 7};
  const store::granularity grans[] = {store::granularity::hour, store::granularity::day};
  EXPECT_EQ(
      reset_statements(mariadb_dialect(), "c", 3, 9, slots, "'a'", 5, grans),
      (std::vector<std::string>{
          "DELETE FROM `c` WHERE `record_type` = 3 AND `record_id` = 9 AND `slot` IN (0,7)",
          "DELETE FROM `c_hour` WHERE `record_type` = 3 AND `record_id` = 9 AND `slot` IN (0,7)",
          "DELETE FROM `c_day` WHERE `record_type` = 3 AND `record_id` = 9 AND `slot` IN (0,7)",
          "INSERT INTO `slotted_counterd_dirty` (`record_type`, `record_id`, `instance_id`, "
          "`gen`) VALUES (3,9,'a',5) ON DUPLICATE KEY UPDATE `gen` = VALUES(`gen`)"}));
  // No slot row read: no bucket row of it can be there (a batch writes the slot row of
  // every counter it has bucket rows of), and none of a slot inserted since is deleted.
  EXPECT_EQ(reset_statements(mariadb_dialect(), "c", 3, 9, {}, "'a'", std::nullopt, grans),
            std::vector<std::string>{});
}

TEST(Sql, RollupSetsACounterWithoutSlotRowsToZero) {
  const std::vector<std::uint64_t> ids{4, 5};
  EXPECT_EQ(mariadb_dialect().rollup_update("c", 3, "repos", "id", "downloads", ids),
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

namespace slotted::db {
namespace {

// Key times are BIGINT milliseconds on the database's clock: an arrival is its now less
// the request's age (never FROM_UNIXTIME, NULL past 2038, nor an instance's clock).
TEST(Sql, KeyTimesAreTheDatabasesClockLessTheRequestsAge) {
  std::vector<idempotency::keyed_request> requests(2);
  requests[0].key = "a";
  requests[0].received_ms = 4102444800000;  // 2100-01-01: an instance's clock, far ahead
  requests[1].key = "b";
  requests[1].received_ms = 4102444800000 - 1500;
  const std::vector<std::string> quoted{"'a'", "'b'"};
  const auto claim = idempotency_keys_claim(
      mariadb_dialect(), requests, quoted, "'i'", 1, 2, std::chrono::minutes(10),
      4102444800000 - 100);  // received 100 ms in the future: age 0
  EXPECT_EQ(claim.find("FROM_UNIXTIME"), std::string::npos) << claim;
  EXPECT_NE(claim.find(std::string(mariadb_dialect().now_ms()) + " - 0)"), std::string::npos)
      << claim;
  EXPECT_NE(claim.find(std::string(mariadb_dialect().now_ms()) + " - 1400)"), std::string::npos)
      << claim;
  EXPECT_NE(claim.find("IF(`created_ms` < VALUES(`created_ms`) - 600000, "), std::string::npos)
      << claim;
  EXPECT_EQ(std::string(mariadb_dialect().now_ms()),
            "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(3)) DIV 1000)");
  EXPECT_EQ(idempotency_keys_find(mariadb_dialect(), "'a'", 250, std::chrono::seconds(1)),
            "SELECT `body_hash`, `accepted` FROM `slotted_counterd_idempotency_keys` WHERE "
            "`idem_key` = 'a' AND `created_ms` >= " +
                std::string(mariadb_dialect().now_ms()) + " - 250 - 1000");
  EXPECT_EQ(idempotency_keys_prune_select(mariadb_dialect(), std::chrono::seconds(2), 10),
            "SELECT `idem_key` FROM `slotted_counterd_idempotency_keys` WHERE `created_ms` < " +
                std::string(mariadb_dialect().now_ms()) + " - 2000 ORDER BY `created_ms` LIMIT 10");
  EXPECT_EQ(idempotency_keys_delete(mariadb_dialect(), quoted, std::chrono::seconds(2)),
            "DELETE `slotted_counterd_idempotency_keys` FROM `slotted_counterd_idempotency_keys` "
            "FORCE INDEX (PRIMARY) WHERE `idem_key` IN ('a','b') AND "
            "`created_ms` < " +
                std::string(mariadb_dialect().now_ms()) + " - 2000");
  // The conversion of the layout before: each step only once, safe after a cut.
  const auto full = idempotency_keys_upgrade(false, true);
  ASSERT_EQ(full.size(), 3u);
  EXPECT_NE(full[0].find("ADD COLUMN `created_ms` BIGINT"), std::string::npos);
  EXPECT_NE(full[1].find("ROUND(UNIX_TIMESTAMP(`created`) * 1000)"), std::string::npos);
  EXPECT_NE(full[2].find("DROP KEY `by_age`, DROP COLUMN `created`"), std::string::npos);
  EXPECT_EQ(idempotency_keys_upgrade(true, false).size(), 2u);
}

}  // namespace
}  // namespace slotted::db
