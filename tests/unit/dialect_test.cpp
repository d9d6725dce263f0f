// The statement text each engine writes its own way (db/dialect.hpp): MariaDB's is pinned
// by the builders' own tests (sql_test and the others); here PostgreSQL's, and the one
// notation both share.
#include "db/dialect.hpp"

#include <gtest/gtest.h>

#include <chrono>

#include "db/errors.hpp"
#include "db/sql.hpp"
#include "db/sql_adopt.hpp"
#include "db/top.hpp"
#include "db/uniques.hpp"

namespace slotted::db {
namespace {

const dialect& pg = postgresql_dialect();

TEST(Dialect, PostgreSqlReadsBackquotedIdentifiersDoubleQuoted) {
  EXPECT_EQ(postgresql_text("SELECT `a`, `b` FROM `t` WHERE `c` = 1"),
            "SELECT \"a\", \"b\" FROM \"t\" WHERE \"c\" = 1");
  // A backquote inside a string literal is the value's, whatever the quoting around it:
  // libpq's E'' (a backslash doubled), a quote doubled, a literal next to another.
  EXPECT_EQ(postgresql_text("SELECT 'a`b', `x`"), "SELECT 'a`b', \"x\"");
  EXPECT_EQ(postgresql_text("SELECT 'it''s `q`', `x`"), "SELECT 'it''s `q`', \"x\"");
  EXPECT_EQ(postgresql_text(" E'a\\\\''`b' = `x`"), " E'a\\\\''`b' = \"x\"");
  EXPECT_EQ(postgresql_text("SELECT '`','`' FROM `t`"), "SELECT '`','`' FROM \"t\"");
  // Within a backquoted or a double-quoted identifier, a quote is the name's.
  EXPECT_EQ(postgresql_text("SELECT \"a'`b\", `c'd`"), "SELECT \"a'`b\", \"c'd\"");
  EXPECT_EQ(postgresql_text(""), "");
  // A statement that ends inside a quote: the notation is broken, nothing is sent.
  for (const char* broken : {"SELECT 'a", "SELECT `a", "SELECT \"a", "SELECT 'a''"}) {
    try {
      postgresql_text(broken);
      ADD_FAILURE() << broken;
    } catch (const db_error& e) {
      EXPECT_EQ(e.cls(), error_class::fatal) << broken;
    }
  }
}

// PostgreSQL keeps 63 bytes of a name: a longer table or index name is refused, never cut
// (an index cut to its table's name would be skipped by IF NOT EXISTS).
TEST(Dialect, PostgreSqlRefusesANameItWouldCut) {
  const std::string long_table(57, 't');  // <table>_totals is 64 bytes
  EXPECT_NO_THROW(create_counters_table(pg, long_table));
  try {
    create_totals_table(pg, long_table);
    ADD_FAILURE() << "a 64-byte table name";
  } catch (const db_error& e) {
    EXPECT_EQ(e.cls(), error_class::fatal);
    EXPECT_NE(std::string(e.what()).find("63 bytes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(create_bucket_table(pg, std::string(56, 'b'), store::granularity::hour), db_error)
      << "<table>_hour_by_age past 63 bytes";
  EXPECT_NO_THROW(create_totals_table(mariadb_dialect(), long_table)) << "MariaDB keeps 64";
}

TEST(Dialect, PostgreSqlUpsertsNameTheirKeyAndTheRowThere) {
  const std::vector<counter_row> rows{{1, 2, 3, 4}, {1, 2, 4, -5}};
  EXPECT_EQ(upsert_statement(pg, "c", rows),
            "INSERT INTO `c` (`record_type`, `record_id`, `slot`, `count`) VALUES "
            "(1,2,3,4),(1,2,4,-5) ON CONFLICT (`record_type`, `record_id`, `slot`) "
            "DO UPDATE SET `count` = `c`.`count` + EXCLUDED.`count`");
  const std::vector<store::bucket_row> buckets{{1, 2, store::granularity::day, 86400, 0, 7}};
  EXPECT_EQ(bucket_upsert_statement(pg, "c", store::granularity::day, buckets),
            "INSERT INTO `c_day` (`record_type`, `record_id`, `bucket`, `slot`, `count`) VALUES "
            "(1,2,'1970-01-02',0,7) ON CONFLICT (`record_type`, `record_id`, `bucket`, `slot`) "
            "DO UPDATE SET `count` = `c_day`.`count` + EXCLUDED.`count`");
  EXPECT_EQ(dirty_upsert(pg, "'i'", rows, 9),
            "INSERT INTO `slotted_counterd_dirty` (`record_type`, `record_id`, `instance_id`, "
            "`gen`) VALUES (1,2,'i',9),(1,2,'i',9) ON CONFLICT (`record_type`, `record_id`, "
            "`instance_id`) DO UPDATE SET `gen` = EXCLUDED.`gen`");
}

TEST(Dialect, PostgreSqlTakesOverAnExpiredKeyWithCase) {
  idempotency::keyed_request r;
  r.key = "k";
  r.increments.resize(2);
  const std::vector<idempotency::keyed_request> requests{r};
  const std::vector<std::string> keys{"'k'"};
  const std::string claim =
      idempotency_keys_claim(pg, requests, keys, "'i'", 1, 2, std::chrono::milliseconds(1000), 0);
  EXPECT_NE(claim.find(" ON CONFLICT (`idem_key`) DO UPDATE SET `body_hash` = CASE WHEN "
                       "`slotted_counterd_idempotency_keys`.`created_ms` < EXCLUDED.`created_ms` "
                       "- 1000 THEN EXCLUDED.`body_hash` ELSE "
                       "`slotted_counterd_idempotency_keys`.`body_hash` END, "),
            std::string::npos)
      << claim;
  EXPECT_EQ(claim.find("VALUES("), std::string::npos) << claim;
  EXPECT_NE(claim.find("statement_timestamp()"), std::string::npos) << claim;
  const std::vector<std::string> two{"'a'", "'b'"};
  EXPECT_EQ(idempotency_keys_select_locked(pg, two),
            "SELECT `idem_key`, `body_hash`, `instance_id`, `run_id`, `batch_seq` FROM "
            "`slotted_counterd_idempotency_keys` WHERE `idem_key` IN ('a','b') FOR SHARE");
  EXPECT_EQ(
      idempotency_keys_delete(pg, two, std::chrono::milliseconds(5)),
      "DELETE FROM `slotted_counterd_idempotency_keys` WHERE `idem_key` IN ('a','b') AND "
      "`created_ms` < CAST(FLOOR(EXTRACT(EPOCH FROM statement_timestamp()) * 1000) AS BIGINT) "
      "- 5");
}

TEST(Dialect, PostgreSqlHasNoIndexHintsAndDeletesTheFirstRowsByAddress) {
  const std::vector<std::uint64_t> seqs{4, 5};
  EXPECT_EQ(ledger_delete(pg, "'i'", 1, seqs, 60),
            "DELETE FROM `slotted_counterd_ledger` WHERE `instance_id` = 'i' AND `run_id` = 1 "
            "AND `batch_seq` IN (4,5) AND `committed_at` < CURRENT_TIMESTAMP - "
            "INTERVAL '60 seconds'");
  EXPECT_EQ(bucket_prune_select(pg, "c", store::granularity::hour, 3, 7200, 10),
            "SELECT CAST(EXTRACT(EPOCH FROM `bucket`) AS BIGINT), `record_id` FROM `c_hour` "
            "WHERE `record_type` = 3 AND `bucket` < '1970-01-01 02:00:00' ORDER BY `bucket`, "
            "`record_id` LIMIT 10");
  EXPECT_EQ(uniques_prune(pg, "c", 5, 1000, 50),
            "DELETE FROM `c_uniques` WHERE ctid IN (SELECT ctid FROM `c_uniques` WHERE "
            "`record_type` = 5 AND `window_start` < 1000 ORDER BY `window_start` LIMIT 50)");
}

TEST(Dialect, PostgreSqlRollsUpWithACorrelatedSum) {
  const std::vector<std::uint64_t> ids{7, 9};
  EXPECT_EQ(pg.rollup_update("c", 3, "repos", "id", "downloads", ids),
            "UPDATE `repos` AS o SET `downloads` = COALESCE((SELECT SUM(`count`) FROM `c` AS s "
            "WHERE s.`record_type` = 3 AND s.`record_id` = o.`id`), 0) WHERE o.`id` IN (7,9)");
}

TEST(Dialect, PostgreSqlLeavesARowThereAloneWithDoNothing) {
  const rollup_target t{123, "repositories", "id", "download_count", "repo_downloads"};
  const std::string insert = state_insert(pg, t, "done", "zeros");
  EXPECT_EQ(insert.rfind("INSERT INTO `slotted_counterd_adoptions` ", 0), 0u) << insert;
  EXPECT_NE(insert.find("(CURRENT_TIMESTAMP AT TIME ZONE 'UTC'), (CURRENT_TIMESTAMP AT TIME "
                        "ZONE 'UTC')) ON CONFLICT DO NOTHING"),
            std::string::npos)
      << insert;
  EXPECT_NE(take_batch_insert(pg, "c", t, {std::nullopt, 9})
                .find(" ON CONFLICT (`record_type`, `record_id`, `slot`) DO UPDATE SET `count` = "
                      "`c`.`count` + EXCLUDED.`count`"),
            std::string::npos);
}

// One description of a table (dialect.hpp table_def), each engine's own types and index
// syntax: PostgreSQL has no unsigned integers, no inline KEY, and index names of the
// schema's.
TEST(Dialect, PostgreSqlCreatesBigintsAndNamesIndexesAfterTheirTable) {
  EXPECT_EQ(create_ledger_table(pg),
            "CREATE TABLE IF NOT EXISTS `slotted_counterd_ledger` (\n"
            "  `instance_id` varchar(64) COLLATE \"C\" NOT NULL,\n"
            "  `run_id` bigint NOT NULL,\n"
            "  `batch_seq` bigint NOT NULL,\n"
            "  `row_count` bigint NOT NULL,\n"
            "  `committed_at` timestamptz(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),\n"
            "  PRIMARY KEY (`instance_id`, `run_id`, `batch_seq`)\n"
            "); CREATE INDEX IF NOT EXISTS `slotted_counterd_ledger_by_age` ON "
            "`slotted_counterd_ledger` (`instance_id`, `committed_at`); CREATE INDEX IF NOT EXISTS "
            "`slotted_counterd_ledger_by_time` ON `slotted_counterd_ledger` (`committed_at`)");
  const std::string adoptions = create_adoptions_table(pg);
  EXPECT_NE(adoptions.find("  `state` varchar(16) NOT NULL CHECK (`state` IN ('running', "
                           "'done')),\n"),
            std::string::npos)
      << adoptions;
  EXPECT_NE(adoptions.find("  `last_id` bigint NULL,\n"), std::string::npos) << adoptions;
  EXPECT_NE(create_uniques_table(pg, "c").find("  `client` bytea NOT NULL,\n"), std::string::npos);
  EXPECT_NE(create_bucket_table(pg, "c", store::granularity::hour)
                .find("  `bucket` timestamp(0) NOT NULL,\n"),
            std::string::npos);
  // MariaDB's, as before: the keys inline, InnoDB.
  EXPECT_EQ(create_dirty_table(mariadb_dialect()),
            "CREATE TABLE IF NOT EXISTS `slotted_counterd_dirty` (\n"
            "  `record_type` INT UNSIGNED NOT NULL,\n"
            "  `record_id` BIGINT UNSIGNED NOT NULL,\n"
            "  `instance_id` VARCHAR(64) NOT NULL,\n"
            "  `gen` BIGINT UNSIGNED NOT NULL,\n"
            "  PRIMARY KEY (`record_type`, `record_id`, `instance_id`)\n"
            ") ENGINE=InnoDB");
}

TEST(Dialect, LockedReadsWaitBoundedOnBothEngines) {
  EXPECT_EQ(mariadb_dialect().locked_within("SELECT 1 FROM t", 10),
            "SELECT 1 FROM t FOR UPDATE WAIT 10");
  EXPECT_EQ(pg.locked_within("SELECT 1 FROM t", 10),
            "SET LOCAL lock_timeout = '10s'; SELECT 1 FROM t FOR UPDATE");
  EXPECT_EQ(mariadb_dialect().share_lock(), "LOCK IN SHARE MODE");
  EXPECT_EQ(pg.share_lock(), "FOR SHARE");
}

// A hash or inode past 2^63 - 1 in PostgreSQL's bigint: the same 64 bits, signed, which
// std::stoull reads back to the value (db/log_positions.cpp writes and reads them so).
TEST(Dialect, UnsignedBitsFitPostgresqlsBigintAndReadBack) {
  for (const std::uint64_t v :
       {std::uint64_t{0}, std::uint64_t{42}, std::uint64_t{INT64_MAX}, std::uint64_t{INT64_MAX} + 1,
        std::uint64_t{0xcbf29ce484222325}, UINT64_MAX}) {
    EXPECT_EQ(mariadb_dialect().u64_bits(v), std::to_string(v));
    const std::string text = pg.u64_bits(v);
    EXPECT_GE(std::stoll(text), INT64_MIN);  // a bigint literal: no out_of_range
    EXPECT_EQ(std::stoull(text), v) << text;
  }
  EXPECT_EQ(pg.u64_bits(UINT64_MAX), "-1");
  EXPECT_EQ(pg.u64_bits(std::uint64_t{INT64_MAX} + 1), "-9223372036854775808");
}

}  // namespace
}  // namespace slotted::db
