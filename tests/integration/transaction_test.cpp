// db/connection.hpp in_transaction and the pool's lease: whatever ends a transaction
// early (a db_error, or anything else: a malformed row, a bound reached, a bad_alloc),
// no half of it is committed later by the next START TRANSACTION on that connection.

#include <gtest/gtest.h>

#include <stdexcept>

#include "app/application.hpp"
#include "db/pool.hpp"
#include "support/daemon_process.hpp"

namespace slotted::test {
namespace {

struct scratch_table {
  db_server& server;
  std::string database = migrated_database(server);
  explicit scratch_table(db_server& s) : server(s) {
    server.connect(database).execute("CREATE TABLE t (id INT PRIMARY KEY)");
  }
  std::int64_t rows() const { return server.query_int(database, "SELECT COUNT(*) FROM t"); }
  // A pool of one connection to the table's database.
  db::pool pool() const { return {connect_options_for(test_config(server, database).mysql), 1}; }
};

class Transaction : public engine_test {
 protected:
  std::int64_t connection_id(db::connection& c) const {
    return std::stoll(
        *c.query(postgresql() ? "SELECT pg_backend_pid()" : "SELECT CONNECTION_ID()")[0][0]);
  }
};

TEST_P(Transaction, AnyThrowInsideRollsBackOnTheSameConnection) {
  auto& server = this->server();
  scratch_table t(server);
  auto conn = server.connect(t.database);
  EXPECT_THROW(db::in_transaction(conn,
                                  [&] {
                                    conn.execute("INSERT INTO t VALUES (1)");
                                    throw std::runtime_error("a malformed row");
                                  }),
               std::runtime_error);
  EXPECT_FALSE(conn.in_transaction());
  // The next transaction on it commits only its own row.
  const int n = db::in_transaction(conn, [&] {
    conn.execute("INSERT INTO t VALUES (2)");
    conn.execute("COMMIT");
    return 2;
  });
  EXPECT_EQ(n, 2);
  EXPECT_EQ(t.rows(), 1);
  EXPECT_EQ(server.query_int(t.database, "SELECT id FROM t"), 2);
}

// A path that leaves a transaction open by mistake: its lease is not lent again, so
// what it wrote is rolled back rather than committed by the next user's transaction.
TEST_P(Transaction, ALeaseReturnedWithATransactionOpenIsNotLentAgain) {
  auto& server = this->server();
  scratch_table t(server);
  auto pool = t.pool();
  std::int64_t first_id = 0;
  {
    auto lease = pool.acquire();
    first_id = connection_id(*lease);
    lease->execute("START TRANSACTION");
    lease->execute("INSERT INTO t VALUES (1)");
    EXPECT_TRUE(lease->in_transaction());
  }
  {
    auto lease = pool.acquire();
    EXPECT_NE(connection_id(*lease), first_id);
    lease->execute("START TRANSACTION");
    lease->execute("COMMIT");
  }
  EXPECT_EQ(t.rows(), 0) << "the half-done transaction was committed by the next one";
}

// Autocommit statements and finished transactions leave nothing open: the connection
// is reused (a new connection per lease would cost every flush a connect).
TEST_P(Transaction, ALeaseWithNoTransactionOpenIsReused) {
  auto& server = this->server();
  scratch_table t(server);
  auto pool = t.pool();
  std::int64_t first_id = 0;
  {
    auto lease = pool.acquire();
    first_id = connection_id(*lease);
    lease->execute("INSERT INTO t VALUES (1)");
    db::in_transaction(*lease, [&] {
      lease->execute("INSERT INTO t VALUES (2)");
      lease->execute("COMMIT");
    });
    lease->query("SELECT COUNT(*) FROM t");
    EXPECT_FALSE(lease->in_transaction());
  }
  auto lease = pool.acquire();
  EXPECT_EQ(connection_id(*lease), first_id);
  EXPECT_EQ(t.rows(), 2);
}

INSTANTIATE_ENGINES(Transaction);

}  // namespace
}  // namespace slotted::test
