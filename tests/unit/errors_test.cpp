#include "db/errors.hpp"

#include <gtest/gtest.h>

namespace slotted::db {
namespace {

TEST(ErrorClassification, KindsMatchTheMetricLabels) {
  EXPECT_EQ(kind_of(1213), error_kind::deadlock);
  EXPECT_EQ(kind_of(1205), error_kind::lock_wait_timeout);
  for (unsigned code : {2002u, 2003u, 2006u, 2013u, 1040u})
    EXPECT_EQ(kind_of(code), error_kind::connection) << code;
  EXPECT_EQ(kind_of(1062), error_kind::other);
  // Galera: a node not ready (1047) or losing the cluster at COMMIT (1180), and a
  // read-only server, are hosts to fail over from; a certification failure is a deadlock.
  for (unsigned code : {1047u, 1180u, 1290u, 1836u})
    EXPECT_EQ(kind_of(code), error_kind::connection) << code;
  EXPECT_EQ(kind_of(2026), error_kind::tls);
  EXPECT_FALSE(db_error(2026, "tls").fatal()) << "a TLS failure is retried";
  EXPECT_STREQ(kind_name(error_kind::tls), "tls");
  EXPECT_STREQ(kind_name(error_kind::lock_wait_timeout), "lock_wait_timeout");
}

TEST(ErrorClassification, OperatorProblemsAreFatalAndTransientOnesAreNot) {
  for (unsigned code : {1045u, 1044u, 1049u, 1146u, 1054u})
    EXPECT_TRUE(db_error(code, "x").fatal()) << code;
  for (unsigned code : {1213u, 1205u, 2006u, 2013u, 1040u, 2002u})
    EXPECT_FALSE(db_error(code, "x").fatal()) << code;
  EXPECT_TRUE(db_error(0, "schema", true).fatal());
  EXPECT_TRUE(db_error(2013, "lost").connection_lost());
  EXPECT_FALSE(db_error(1213, "deadlock").connection_lost());
}

TEST(ErrorClassification, AutoIncrementExhaustionIsRecognised) {
  EXPECT_TRUE(is_autoincrement_exhaustion(167, "Out of range value for column 'id' at row 3"));
  EXPECT_TRUE(is_autoincrement_exhaustion(1467, "Failed to read auto-increment value"));
  EXPECT_TRUE(
      is_autoincrement_exhaustion(1062, "query: Duplicate entry '2147483647' for key 'PRIMARY'"));
  EXPECT_FALSE(is_autoincrement_exhaustion(1062, "Duplicate entry '1-2-3' for key 'record_type'"));
  EXPECT_FALSE(is_autoincrement_exhaustion(1264, "Out of range value for column 'count'"));
  EXPECT_FALSE(db_error(167, "x").data_error()) << "never split and dropped as a bad row";
}

// Issue 21, item 1: a statement over max_allowed_packet. The daemon's own refusal (2020,
// nothing sent) splits the batch; the server's (1153) closes the connection, which is
// then lost, never a data error nor retried on it.
TEST(ErrorClassification, AStatementTooLargeIsNeitherDataNorRetriedWhole) {
  EXPECT_TRUE(db_error(2020, "too large").too_large());
  EXPECT_FALSE(db_error(2020, "too large").connection_lost());
  EXPECT_FALSE(db_error(2020, "too large").fatal());
  EXPECT_FALSE(db_error(1153, "packet").too_large());
  EXPECT_TRUE(db_error(1153, "packet").connection_lost());
  EXPECT_FALSE(db_error(1264, "range").too_large());
}

// What callers outside the error tables ask of an error, by name, not by number: a
// guard's row already there, a table missing, a read stopped at its time limit.
TEST(ErrorClassification, CallersAskByNameNotByNumber) {
  EXPECT_TRUE(db_error(1062, "duplicate").duplicate_key());
  EXPECT_FALSE(db_error(1213, "deadlock").duplicate_key());
  EXPECT_TRUE(db_error(1146, "no table").no_such_table());
  EXPECT_TRUE(db_error(statement_timeout_code, "slow").statement_timed_out());
  EXPECT_FALSE(db_error(2013, "lost").statement_timed_out());
  EXPECT_TRUE(db_error(1467, "Failed to read auto-increment value").autoincrement_exhausted());
  EXPECT_FALSE(db_error(1062, "Duplicate entry '1-2-3' for key 'record_type'")
                   .autoincrement_exhausted());
}

}  // namespace
}  // namespace slotted::db
