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

}  // namespace
}  // namespace slotted::db
