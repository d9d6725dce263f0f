// The PostgreSQL driver (db/driver_postgresql.hpp) against the PostgreSQL 15 the suite
// starts: statements and rows over the socket and TCP, the session it sets up, each
// error class provoked for real, and every wait bounded (a server that goes away, one
// that never answers a statement, one that never answers a connect).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "db/connection.hpp"
#include "support/postgres_server.hpp"
#include "support/tls_files.hpp"

namespace slotted::db {
namespace {

using namespace std::chrono_literals;

connect_options pg_options(const test::postgres_server& pg, const std::string& database,
                           bool tcp = false) {
  auto o = pg.options(database, tcp);
  o.connect_timeout = 5s;
  return o;
}

// The error `work` throws, or nullopt when it throws none.
std::optional<db_error> error_of(const std::function<void()>& work) {
  try {
    work();
  } catch (const db_error& e) {
    return e;
  }
  return std::nullopt;
}

class PgDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_POSTGRESQL();
    pg_ = &test::shared_postgres();
    database_ = pg_->create_database();
  }
  connection connect(bool tcp = false) { return connection(pg_options(*pg_, database_, tcp)); }

  test::postgres_server* pg_ = nullptr;
  std::string database_;
};

TEST_F(PgDriver, RunsStatementsAndReadsRowsOverItsSocketAndTcp) {
  auto c = connect();
  c.execute("CREATE TABLE t (id bigint PRIMARY KEY, n bigint NOT NULL, s text)");
  const std::string odd = "it's a \\ back'slash, \"quoted\"";
  c.execute("INSERT INTO t VALUES (1, 5, NULL), (2, 7, " + c.quote(odd) + ")");
  EXPECT_EQ(c.affected_rows(), 2u);
  const auto rows = c.query("SELECT id, n, s FROM t ORDER BY id");
  ASSERT_EQ(rows.size(), 2u);
  ASSERT_EQ(rows[0].size(), 3u);
  EXPECT_EQ(rows[0][1], "5");
  EXPECT_FALSE(rows[0][2].has_value()) << "NULL is not the empty string";
  EXPECT_EQ(rows[1][2], odd) << "quote() round-trips quotes and backslashes";
  c.execute("INSERT INTO t VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET n = t.n + EXCLUDED.n");
  EXPECT_EQ(c.affected_rows(), 1u);
  EXPECT_EQ(c.query("SELECT n FROM t WHERE id = 1")[0][0], "6");
  EXPECT_TRUE(c.query("SELECT n FROM t WHERE id = 3").empty());
  // The session: UTC, the schema on the search_path, lock waits bounded.
  EXPECT_EQ(c.query("SHOW TIME ZONE")[0][0], "UTC");
  EXPECT_EQ(c.query("SHOW lock_timeout")[0][0], "50s");
  EXPECT_EQ(c.query("SELECT current_schema()")[0][0], "public");

  auto tcp = connect(true);
  EXPECT_EQ(tcp.query("SELECT sum(n) FROM t")[0][0], "13");
  EXPECT_TRUE(tcp.tls_cipher().empty()) << "tls.mode disabled";

  EXPECT_FALSE(c.in_transaction());
  c.execute("START TRANSACTION");
  EXPECT_TRUE(c.in_transaction());
  c.execute("COMMIT");
  EXPECT_FALSE(c.in_transaction());
}

TEST_F(PgDriver, TablesAreFoundInTheConfiguredSchema) {
  connect().execute("CREATE SCHEMA counters; CREATE TABLE counters.t (n bigint)");
  auto o = pg_options(*pg_, database_);
  o.schema = "counters";
  connection c(o);
  c.execute("INSERT INTO t VALUES (3)");
  EXPECT_EQ(connect().query("SELECT n FROM counters.t")[0][0], "3");
  // Quoted as an identifier: nothing is injected; a schema that is not there is said at
  // connect, naming the key, not taken for missing tables.
  o.schema = "no \"such\" schema";
  const auto e = error_of([&] { connection odd(o); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->fatal()) << e->what();
  EXPECT_NE(std::string(e->what()).find("does not exist or the role may not use it "
                                        "(postgresql.schema)"),
            std::string::npos)
      << e->what();
}

TEST_F(PgDriver, ErrorsComeClassifiedBySqlstateAndLeaveTheConnectionUsable) {
  auto c = connect();
  c.execute("CREATE TABLE t (id bigint PRIMARY KEY, n bigint NOT NULL)");
  c.execute("INSERT INTO t VALUES (1, 9223372036854775000)");
  const auto dup = error_of([&] { c.execute("INSERT INTO t VALUES (1, 0)"); });
  ASSERT_TRUE(dup);
  EXPECT_TRUE(dup->duplicate_key()) << dup->what();
  EXPECT_FALSE(dup->autoincrement_exhausted());
  EXPECT_EQ(dup->native_code(), "23505");

  const auto overflow = error_of([&] { c.execute("UPDATE t SET n = n + 1000"); });
  ASSERT_TRUE(overflow);
  EXPECT_TRUE(overflow->data_error()) << overflow->what();
  const auto null = error_of([&] { c.execute("INSERT INTO t VALUES (2, NULL)"); });
  ASSERT_TRUE(null);
  EXPECT_TRUE(null->data_error()) << null->what();

  // A CHECK refuses a row's value (data); a missing partition is the table's to fix, with
  // the row held and retried (both 23514).
  c.execute("CREATE TABLE checked (n bigint CHECK (n >= 0))");
  const auto check = error_of([&] { c.execute("INSERT INTO checked VALUES (-1)"); });
  ASSERT_TRUE(check);
  EXPECT_TRUE(check->data_error()) << check->what();
  c.execute("CREATE TABLE parted (n bigint) PARTITION BY RANGE (n)");
  c.execute("CREATE TABLE parted_low PARTITION OF parted FOR VALUES FROM (0) TO (10)");
  const auto unparted = error_of([&] { c.execute("INSERT INTO parted VALUES (20)"); });
  ASSERT_TRUE(unparted);
  EXPECT_EQ(unparted->native_code(), "23514") << unparted->what();
  EXPECT_FALSE(unparted->data_error()) << unparted->what();
  EXPECT_FALSE(unparted->fatal());

  const auto missing = error_of([&] { c.query("SELECT 1 FROM no_such_table"); });
  ASSERT_TRUE(missing);
  EXPECT_TRUE(missing->no_such_table());
  EXPECT_TRUE(missing->fatal());
  const auto syntax = error_of([&] { c.execute("SELEC 1"); });
  ASSERT_TRUE(syntax);
  EXPECT_TRUE(syntax->fatal());
  const auto twice = error_of([&] {
    c.execute("INSERT INTO t VALUES (5, 1), (5, 2) ON CONFLICT (id) DO UPDATE SET n = 0");
  });
  ASSERT_TRUE(twice);
  EXPECT_TRUE(twice->fatal()) << "a key twice in one upsert is a bug, never retried";

  c.execute("CREATE SEQUENCE s MAXVALUE 2");
  c.query("SELECT nextval('s')");
  c.query("SELECT nextval('s')");
  const auto exhausted = error_of([&] { c.query("SELECT nextval('s')"); });
  ASSERT_TRUE(exhausted);
  EXPECT_TRUE(exhausted->autoincrement_exhausted()) << exhausted->what();

  c.execute("SET statement_timeout = '50ms'");
  const auto slow = error_of([&] { c.query("SELECT pg_sleep(5)"); });
  ASSERT_TRUE(slow);
  EXPECT_TRUE(slow->statement_timed_out()) << slow->what();
  EXPECT_FALSE(slow->connection_lost());
  c.execute("RESET statement_timeout");

  // A transaction that failed: its COMMIT answers ROLLBACK, which must not pass for a
  // commit.
  c.execute("START TRANSACTION");
  c.execute("INSERT INTO t VALUES (3, 3)");
  EXPECT_TRUE(error_of([&] { c.execute("INSERT INTO t VALUES (1, 0)"); }));
  const auto commit = error_of([&] { c.execute("COMMIT"); });
  ASSERT_TRUE(commit) << "a COMMIT that rolled back was taken for a commit";
  EXPECT_FALSE(commit->connection_lost());
  EXPECT_FALSE(c.in_transaction());
  EXPECT_EQ(c.query("SELECT count(*) FROM t")[0][0], "1") << "nothing of it was kept";
}

TEST_F(PgDriver, ALimitedReadIsStoppedAndLeavesTheSessionAsItWas) {
  auto c = connect();
  c.execute("CREATE TABLE t (n bigint)");
  c.execute("INSERT INTO t VALUES (4)");
  EXPECT_EQ(c.query_limited("SELECT n FROM t", 1s).at(0)[0], "4");
  EXPECT_EQ(c.query("SHOW statement_timeout")[0][0], "0") << "the limit outlived its read";
  const auto slow = error_of([&] { c.query_limited("SELECT pg_sleep(10)", 50ms); });
  ASSERT_TRUE(slow);
  EXPECT_TRUE(slow->statement_timed_out()) << slow->what();
  EXPECT_EQ(c.query("SHOW statement_timeout")[0][0], "0") << "the limit outlived its failure";
  // Within a transaction (a top-N's snapshot): the same.
  c.begin_read_snapshot();
  EXPECT_EQ(c.query_limited("SELECT n FROM t", 1s).at(0)[0], "4");
  EXPECT_EQ(c.query("SHOW statement_timeout")[0][0], "0");
  EXPECT_EQ(c.query("SHOW transaction_isolation")[0][0], "repeatable read");
  EXPECT_TRUE(error_of([&] { c.execute("INSERT INTO t VALUES (5)"); })) << "read only";
  c.execute("ROLLBACK");
  c.ping();
}

TEST_F(PgDriver, AReadSnapshotSeesOneMoment) {
  auto c = connect(), other = connect();
  c.execute("CREATE TABLE t (n bigint)");
  c.execute("INSERT INTO t VALUES (1)");
  c.begin_read_snapshot();
  EXPECT_EQ(c.query("SELECT sum(n) FROM t")[0][0], "1");
  other.execute("INSERT INTO t VALUES (2)");
  EXPECT_EQ(c.query("SELECT sum(n) FROM t")[0][0], "1") << "a later commit seen in the snapshot";
  c.execute("COMMIT");
  EXPECT_EQ(c.query("SELECT sum(n) FROM t")[0][0], "3");
}

TEST_F(PgDriver, AReadOnlyServerIsNoPlaceToWrite) {
  connect().require_writable();
  connect().execute("ALTER DATABASE " + database_ + " SET default_transaction_read_only = on");
  auto c = connect();
  const auto e = error_of([&] { c.require_writable(); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->connection_lost()) << "the failover connector moves on from it: " << e->what();
}

TEST_F(PgDriver, ADeadlockAndALockWaitAreRetryableKinds) {
  auto a = connect(), b = connect();
  a.execute("CREATE TABLE t (id bigint PRIMARY KEY, n bigint NOT NULL)");
  a.execute("INSERT INTO t VALUES (1, 0), (2, 0)");
  a.execute("START TRANSACTION");
  a.execute("UPDATE t SET n = 1 WHERE id = 1");
  b.execute("START TRANSACTION");
  b.execute("SET LOCAL lock_timeout = '100ms'");
  const auto wait = error_of([&] { b.execute("UPDATE t SET n = 2 WHERE id = 1"); });
  ASSERT_TRUE(wait);
  EXPECT_EQ(wait->kind(), error_kind::lock_wait_timeout) << wait->what();
  b.execute("ROLLBACK");

  b.execute("START TRANSACTION");
  b.execute("UPDATE t SET n = 2 WHERE id = 2");
  // The victim's transaction holds its locks until its ROLLBACK: each side ends its own.
  std::optional<db_error> in_a;
  std::thread waiter([&] {
    in_a = error_of([&] { a.execute("UPDATE t SET n = 1 WHERE id = 2"); });
    if (in_a) a.execute("ROLLBACK");
  });
  // One of the two is chosen as the victim once deadlock_timeout (1 s) passes.
  const auto in_b = error_of([&] { b.execute("UPDATE t SET n = 2 WHERE id = 1"); });
  b.execute(in_b ? "ROLLBACK" : "COMMIT");
  waiter.join();
  if (!in_a) a.execute("COMMIT");
  ASSERT_NE(in_a.has_value(), in_b.has_value()) << "exactly one victim";
  const db_error& victim = in_a ? *in_a : *in_b;
  EXPECT_EQ(victim.kind(), error_kind::deadlock) << victim.what();
  EXPECT_EQ(victim.native_code(), "40P01");
}

TEST_F(PgDriver, AServerThatGoesAwayOrFallsSilentEndsAsALostConnection) {
  auto c = connect();
  const auto pid = c.query("SELECT pg_backend_pid()")[0][0].value();
  connect().query("SELECT pg_terminate_backend(" + pid + ")");
  const auto gone = error_of([&] { c.query("SELECT 1"); });
  ASSERT_TRUE(gone);
  EXPECT_TRUE(gone->connection_lost()) << gone->what();
  const auto again = error_of([&] { c.query("SELECT 1"); });
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->connection_lost()) << "a lost connection stays lost";

  // A statement that never answers: ended by io_timeout, not by the server.
  auto o = pg_options(*pg_, database_);
  o.io_timeout = 2s;
  connection slow(o);
  const auto started = std::chrono::steady_clock::now();
  const auto silent = error_of([&] { slow.query("SELECT pg_sleep(60)"); });
  ASSERT_TRUE(silent);
  EXPECT_TRUE(silent->connection_lost()) << silent->what();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 30s) << "waited for the server";
}

TEST_F(PgDriver, AStatementTheServerDoesNotReadEndsAtTheIoTimeout) {
  // A backend stopped (as a host that froze): the statement fills the socket's buffers and
  // the send must not wait for it without a bound.
  auto o = pg_options(*pg_, database_);
  o.io_timeout = 2s;
  connection c(o);
  const pid_t backend = std::stoi(c.query("SELECT pg_backend_pid()")[0][0].value());
  ASSERT_EQ(::kill(backend, SIGSTOP), 0);
  // Continued however the test leaves, so a stopped backend never stalls the server.
  struct continued {
    pid_t pid;
    ~continued() { ::kill(pid, SIGCONT); }
  } guard{backend};
  const std::string big = "SELECT length('" + std::string(8 << 20, 'a') + "')";
  const auto started = std::chrono::steady_clock::now();
  const auto stuck = error_of([&] { c.query(big); });
  ASSERT_TRUE(stuck);
  EXPECT_TRUE(stuck->connection_lost()) << stuck->what();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 30s) << "the send waited unbounded";
}

TEST_F(PgDriver, ABackendThatEndsOrACopyLeavesTheConnectionLost) {
  // A FATAL error (here the server's idle-in-transaction timeout) ends the backend: the
  // connection is lost, not a statement to retry on it.
  auto c = connect();
  const auto pid = c.query("SELECT pg_backend_pid()")[0][0].value();
  c.execute("SET idle_in_transaction_session_timeout = '100ms'");
  c.execute("START TRANSACTION");
  auto watcher = connect();
  const auto gone_by = std::chrono::steady_clock::now() + 30s;
  while (watcher.query("SELECT 1 FROM pg_stat_activity WHERE pid = " + pid).size() == 1 &&
         std::chrono::steady_clock::now() < gone_by)
    std::this_thread::sleep_for(20ms);  // polls a condition: the backend is gone
  const auto ended = error_of([&] { c.query("SELECT 1"); });
  ASSERT_TRUE(ended);
  EXPECT_TRUE(ended->connection_lost()) << ended->what();
  // A COPY is never driven by the daemon: the connection is given up, not left mid-COPY.
  auto copy = connect();
  const auto e = error_of([&] { copy.query("COPY (SELECT 1) TO STDOUT"); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->connection_lost()) << e->what();
  // Rows a statement returned with RETURNING are its affected rows.
  auto r = connect();
  r.execute("CREATE TABLE t (n bigint)");
  EXPECT_EQ(r.query("INSERT INTO t VALUES (1), (2) RETURNING n").size(), 2u);
  EXPECT_EQ(r.affected_rows(), 2u);
}

TEST_F(PgDriver, ANulByteIsRefusedNeverCutShort) {
  auto c = connect();
  const auto quoted = error_of([&] { c.quote(std::string("a\0b", 3)); });
  ASSERT_TRUE(quoted);
  EXPECT_TRUE(quoted->data_error());
  const auto sent = error_of([&] { c.query(std::string("SELECT 1\0; SELECT 2", 19)); });
  ASSERT_TRUE(sent);
  EXPECT_FALSE(sent->connection_lost());
  EXPECT_EQ(c.query("SELECT 3")[0][0], "3") << "the connection is still usable";
  // Class 22 of the statement's own making is not a bad row.
  const auto zero = error_of([&] { c.query("SELECT 1 / 0"); });
  ASSERT_TRUE(zero);
  EXPECT_FALSE(zero->data_error()) << zero->what();
  EXPECT_FALSE(zero->fatal());
}

TEST_F(PgDriver, AConnectIsBoundedAndSaysWhetherToRetry) {
  // A peer that takes the TCP connection and never speaks: our deadline ends it.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  auto o = pg_options(*pg_, database_, true);
  o.port = ntohs(addr.sin_port);
  o.connect_timeout = 300ms;
  const auto started = std::chrono::steady_clock::now();
  const auto mute = error_of([&] { connection c(o); });
  ::close(fd);
  ASSERT_TRUE(mute);
  EXPECT_TRUE(mute->connection_lost()) << mute->what();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 15s);

  // Nothing listening: retried. An unknown role or database: the operator's to fix.
  const auto refused = error_of([&] { connection c(o); });
  ASSERT_TRUE(refused);
  EXPECT_TRUE(refused->connection_lost()) << refused->what();
  auto role = pg_options(*pg_, database_);
  role.user = "nobody_here";
  const auto denied = error_of([&] { connection c(role); });
  ASSERT_TRUE(denied);
  EXPECT_TRUE(denied->fatal()) << denied->what();
  auto db = pg_options(*pg_, "no_such_database");
  const auto unknown = error_of([&] { connection c(db); });
  ASSERT_TRUE(unknown);
  EXPECT_TRUE(unknown->fatal()) << unknown->what();
}

// tls.mode onto libpq's sslmode, against a PostgreSQL serving a certificate for IP
// 127.0.0.1 from a throwaway CA: as the MariaDB twin (tls_test.cpp), each mode checks
// what it promises, and a failure is a tls error (retried), never a silent plaintext.
struct pg_tls_setup {
  test::tls_files files;
  test::postgres_server server{{},
                               test::server_certificate{files.server_cert(), files.server_key()}};
};

connect_options tls_options(const test::postgres_server& server, tls_mode mode,
                            const std::string& ca, const std::string& host = "127.0.0.1") {
  auto o = server.options("postgres", true);
  o.host = host;
  o.tls.mode = mode;
  o.tls.ca_file = ca;
  return o;
}

TEST(PgDriverTls, EachModeChecksWhatItPromises) {
  SKIP_WITHOUT_POSTGRESQL();
  static pg_tls_setup t;
  {
    connection c(tls_options(t.server, tls_mode::verify_identity, t.files.ca()));
    EXPECT_FALSE(c.tls_cipher().empty());
    EXPECT_EQ(c.query("SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()")[0][0],
              "true");
  }
  const auto name = error_of([&] {
    connection c(tls_options(t.server, tls_mode::verify_identity, t.files.ca(), "localhost"));
  });
  ASSERT_TRUE(name) << "the name 'localhost' is not in the certificate";
  EXPECT_EQ(name->cls(), error_class::tls) << name->what();
  EXPECT_NE(std::string(name->what()).find("postgresql.tls.mode verify_identity"),
            std::string::npos);
  // verify_ca: the chain only, so another name for the same server passes; another CA not.
  EXPECT_FALSE(connection(tls_options(t.server, tls_mode::verify_ca, t.files.ca(), "localhost"))
                   .tls_cipher()
                   .empty());
  const auto other = error_of(
      [&] { connection c(tls_options(t.server, tls_mode::verify_ca, t.files.other_ca())); });
  ASSERT_TRUE(other);
  EXPECT_EQ(other->cls(), error_class::tls) << other->what();
  // required: encrypted, not verified.
  EXPECT_FALSE(connection(tls_options(t.server, tls_mode::required, t.files.other_ca()))
                   .tls_cipher()
                   .empty());
  // disabled: plaintext, which this server allows.
  EXPECT_TRUE(connection(tls_options(t.server, tls_mode::disabled, "")).tls_cipher().empty());

  // A server without TLS: no silent downgrade above `preferred`.
  auto& plain = test::shared_postgres();
  for (auto mode : {tls_mode::required, tls_mode::verify_ca}) {
    const auto e = error_of([&] { connection c(tls_options(plain, mode, t.files.ca())); });
    ASSERT_TRUE(e) << tls_mode_name(mode);
    EXPECT_EQ(e->cls(), error_class::tls) << e->what();
  }
  EXPECT_TRUE(connection(tls_options(plain, tls_mode::preferred, "")).tls_cipher().empty());
}

}  // namespace
}  // namespace slotted::db
