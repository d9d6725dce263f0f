#include "db/errors.hpp"

#include <gtest/gtest.h>

#include "db/driver_mariadb.hpp"
#include "db/driver_postgresql.hpp"

namespace slotted::db {
namespace {

// MariaDB's error numbers as its driver classifies them (db/driver_mariadb.cpp).
db_error m(unsigned code, const std::string& message = "x") {
  return mariadb_error(code, message);
}

TEST(ErrorClassification, KindsMatchTheMetricLabels) {
  EXPECT_EQ(m(1213).kind(), error_kind::deadlock);
  EXPECT_EQ(m(1205).kind(), error_kind::lock_wait_timeout);
  for (unsigned code : {2002u, 2003u, 2006u, 2013u, 1040u})
    EXPECT_EQ(m(code).kind(), error_kind::connection) << code;
  EXPECT_EQ(m(1062).kind(), error_kind::other);
  // Galera: a node not ready (1047) or losing the cluster at COMMIT (1180), and a
  // read-only server, are hosts to fail over from; a certification failure is a deadlock.
  for (unsigned code : {1047u, 1180u, 1290u, 1836u})
    EXPECT_EQ(m(code).kind(), error_kind::connection) << code;
  EXPECT_EQ(m(2026).kind(), error_kind::tls);
  EXPECT_FALSE(m(2026).fatal()) << "a TLS failure is retried";
  EXPECT_STREQ(kind_name(error_kind::tls), "tls");
  EXPECT_STREQ(kind_name(error_kind::lock_wait_timeout), "lock_wait_timeout");
}

TEST(ErrorClassification, OperatorProblemsAreFatalAndTransientOnesAreNot) {
  for (unsigned code : {1045u, 1044u, 1049u, 1146u, 1054u}) EXPECT_TRUE(m(code).fatal()) << code;
  for (unsigned code : {1213u, 1205u, 2006u, 2013u, 1040u, 2002u})
    EXPECT_FALSE(m(code).fatal()) << code;
  EXPECT_TRUE(db_error(error_class::fatal, "schema").fatal());
  EXPECT_FALSE(db_error(error_class::other, "ours").fatal());
  EXPECT_TRUE(m(2013).connection_lost());
  EXPECT_FALSE(m(1213).connection_lost());
}

TEST(ErrorClassification, AutoIncrementExhaustionIsRecognised) {
  EXPECT_TRUE(m(167, "Out of range value for column 'id' at row 3").autoincrement_exhausted());
  EXPECT_TRUE(m(1467, "Failed to read auto-increment value").autoincrement_exhausted());
  const auto primary = m(1062, "query: Duplicate entry '2147483647' for key 'PRIMARY'");
  EXPECT_TRUE(primary.autoincrement_exhausted());
  EXPECT_TRUE(primary.duplicate_key()) << "a guard's row on its primary key is still a duplicate";
  EXPECT_FALSE(m(1062, "Duplicate entry '1-2-3' for key 'record_type'").autoincrement_exhausted());
  EXPECT_FALSE(m(1264, "Out of range value for column 'count'").autoincrement_exhausted());
  EXPECT_FALSE(m(167).data_error()) << "never split and dropped as a bad row";
  EXPECT_TRUE(m(1264).data_error());
  EXPECT_TRUE(m(1690).data_error());
}

// Every MariaDB number the driver names, and its class: a table, so that a code moved to
// another class (and so retried, refused or failed over differently) shows here.
TEST(ErrorClassification, EveryMariadbCodeHasItsClass) {
  const std::pair<unsigned, error_class> table[] = {
      {1213, error_class::deadlock},
      {1205, error_class::lock_wait_timeout},
      {2002, error_class::connection},
      {2003, error_class::connection},
      {2006, error_class::connection},
      {2013, error_class::connection},
      {2055, error_class::connection},
      {2014, error_class::connection},
      {1040, error_class::connection},
      {1053, error_class::connection},
      {1927, error_class::connection},
      {1317, error_class::connection},
      {1152, error_class::connection},
      {4031, error_class::connection},
      {1153, error_class::connection},
      {1047, error_class::connection},
      {1180, error_class::connection},
      {1290, error_class::connection},
      {1836, error_class::connection},
      {2026, error_class::tls},
      {1045, error_class::fatal},
      {1044, error_class::fatal},
      {1142, error_class::fatal},
      {1143, error_class::fatal},
      {1049, error_class::fatal},
      {1054, error_class::fatal},
      {1064, error_class::fatal},
      {1136, error_class::fatal},
      {1146, error_class::no_such_table},
      {1264, error_class::data},
      {1690, error_class::data},
      {1366, error_class::data},
      {1292, error_class::data},
      {1406, error_class::data},
      {1048, error_class::data},
      {4025, error_class::data},
      {167, error_class::sequence_exhausted},
      {1467, error_class::sequence_exhausted},
      {1062, error_class::duplicate_key},
      {2020, error_class::too_large},
      {1969, error_class::statement_timeout},
      {2008, error_class::other},
      {9999, error_class::other},
  };
  for (const auto& [code, cls] : table)
    EXPECT_STREQ(class_name(m(code).cls()), class_name(cls)) << code;
}

// Issue 21, item 1: a statement over max_allowed_packet. The daemon's own refusal (2020,
// nothing sent) splits the batch; the server's (1153) closes the connection, which is
// then lost, never a data error nor retried on it.
TEST(ErrorClassification, AStatementTooLargeIsNeitherDataNorRetriedWhole) {
  EXPECT_TRUE(m(2020).too_large());
  EXPECT_FALSE(m(2020).connection_lost());
  EXPECT_FALSE(m(2020).fatal());
  EXPECT_FALSE(m(1153).too_large());
  EXPECT_TRUE(m(1153).connection_lost());
  EXPECT_FALSE(m(1264).too_large());
}

// What callers outside the driver ask of an error, by class, never by an engine's
// number: a guard's row already there, a table missing, a read stopped at its time limit.
TEST(ErrorClassification, CallersAskByClassNotByNumber) {
  EXPECT_TRUE(m(1062, "duplicate").duplicate_key());
  EXPECT_FALSE(m(1213).duplicate_key());
  EXPECT_TRUE(m(1146).no_such_table());
  EXPECT_TRUE(m(1969).statement_timed_out());
  EXPECT_TRUE(db_error(error_class::statement_timeout, "slow").statement_timed_out());
  EXPECT_FALSE(m(2013).statement_timed_out());
  EXPECT_EQ(m(1213).native_code(), "1213") << "the engine's own code, for logs";
  EXPECT_EQ(db_error(error_class::other, "ours").native_code(), "");
  EXPECT_STREQ(class_name(m(1062, "Duplicate entry 'x' for key 'PRIMARY'").cls()),
               "duplicate_primary_key");
}

// The same questions answered for PostgreSQL's SQLSTATEs (db/driver_postgresql.cpp):
// the same classes, so everything above the driver behaves the same on both engines.
TEST(ErrorClassification, PostgresqlSqlstatesFallInTheSameClasses) {
  auto p = [](const char* state) { return postgresql_error(state, "x"); };
  EXPECT_EQ(p("40P01").kind(), error_kind::deadlock);
  EXPECT_EQ(p("40001").kind(), error_kind::deadlock) << "a serialization failure is retried";
  EXPECT_EQ(p("55P03").kind(), error_kind::lock_wait_timeout);
  for (const char* lost : {"08006", "08003", "57P01", "57P02", "57P03", "53300", "25006"})
    EXPECT_TRUE(p(lost).connection_lost()) << lost;
  EXPECT_TRUE(p("23505").duplicate_key());
  EXPECT_FALSE(p("23505").autoincrement_exhausted());
  EXPECT_TRUE(p("2200H").autoincrement_exhausted());
  EXPECT_FALSE(p("2200H").data_error());
  for (const char* data : {"22003", "22001", "22P02", "22021", "23502", "23514"})
    EXPECT_TRUE(p(data).data_error()) << data;
  // Class 22 of our own statement's making is retried, never a row refused for it.
  for (const char* ours : {"22012", "22023", "22008", "22007"})
    EXPECT_FALSE(p(ours).data_error()) << ours;
  EXPECT_TRUE(p("42P01").no_such_table());
  EXPECT_TRUE(p("57014").statement_timed_out());
  for (const char* fatal : {"28P01", "42501", "42601", "42703", "3D000", "21000"})
    EXPECT_TRUE(p(fatal).fatal()) << fatal;
  for (const char* retried : {"40P01", "08006", "23505", "22003", "XX000"})
    EXPECT_FALSE(p(retried).fatal()) << retried;
  EXPECT_EQ(p("XX000").kind(), error_kind::other);
  EXPECT_EQ(p("40P01").native_code(), "40P01");
}

}  // namespace
}  // namespace slotted::db
