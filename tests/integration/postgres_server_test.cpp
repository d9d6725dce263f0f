// The PostgreSQL the tests start (support/postgres_server.hpp): that it runs, as a user
// other than root when the tests run as root, answers over its socket and over TCP, and
// keeps what it committed through a SIGKILL of its whole process group and a restart, as
// the fault tests of the second engine will need.
#include "support/postgres_server.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace slotted::test {
namespace {

TEST(PostgresServer, RunsAsAnotherUserThanRootAndAnswersOverItsSocketAndTcp) {
  SKIP_WITHOUT_POSTGRESQL();
  postgres_server pg;
  struct stat st {};
  ASSERT_EQ(::stat(("/proc/" + std::to_string(pg.pid())).c_str(), &st), 0);
  if (::geteuid() == 0) {
    EXPECT_NE(st.st_uid, 0u) << "the server runs as root";
  } else {
    EXPECT_EQ(st.st_uid, ::geteuid());
  }
  const auto db = pg.create_database();
  auto conn = pg.connect(db);
  conn.execute("CREATE TABLE t (id bigint PRIMARY KEY, n bigint NOT NULL)");
  conn.execute("INSERT INTO t VALUES (1, 41) ON CONFLICT (id) DO UPDATE SET n = t.n + 1");
  conn.execute("INSERT INTO t VALUES (1, 41) ON CONFLICT (id) DO UPDATE SET n = t.n + 1");
  EXPECT_EQ(pg.connect(db, true).query_int("SELECT n FROM t WHERE id = 1"), 42);
  EXPECT_THROW(conn.execute("INSERT INTO t VALUES (1, 0)"), std::runtime_error);
  EXPECT_NE(pg.create_database(), db);
}

TEST(PostgresServer, KeepsWhatItCommittedThroughAHardKillOfItsGroupAndARestart) {
  SKIP_WITHOUT_POSTGRESQL();
  postgres_server pg;
  const auto db = pg.create_database();
  {
    auto conn = pg.connect(db);
    conn.execute("CREATE TABLE t (id bigint PRIMARY KEY, n bigint NOT NULL)");
    conn.execute("INSERT INTO t VALUES (1, 7)");
    // A session left open across the kill: its backend dies with the postmaster.
    auto idle = pg.connect(db);
    pg.stop(true);
    EXPECT_FALSE(pg.running());
    EXPECT_THROW(pg.connect(db), std::runtime_error);
    EXPECT_THROW(idle.execute("SELECT 1"), std::runtime_error);
  }
  pg.start();
  EXPECT_EQ(pg.query_int(db, "SELECT n FROM t WHERE id = 1"), 7);
  pg.connect(db).execute("UPDATE t SET n = n + 1 WHERE id = 1");
  pg.stop();
  pg.start();
  EXPECT_EQ(pg.query_int(db, "SELECT n FROM t WHERE id = 1"), 8);
}

}  // namespace
}  // namespace slotted::test
