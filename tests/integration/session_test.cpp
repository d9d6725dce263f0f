// The daemon's database session: what it sets at connect (a strict sql_mode whatever the
// server's global one), and that a failure while setting it up leaks nothing.

#include <gtest/gtest.h>

#include "db/errors.hpp"
#include "support/daemon_process.hpp"
#include "support/fault_proxy.hpp"
#include "support/http_client.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define SLOTTED_HAVE_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLOTTED_HAVE_LSAN 1
#endif
#endif
#ifdef SLOTTED_HAVE_LSAN
#include <sanitizer/lsan_interface.h>
#endif

namespace slotted::test {
namespace {

using namespace std::chrono_literals;

// A connection whose session setup fails after the connect (here: the link is cut at
// the first SET SESSION) throws and closes its handle. Under ASan the leak check below
// finds the handle otherwise; without ASan the test checks only the error.
TEST(Session, FailingSessionSetupThrowsAndLeaksNothing) {
  auto& server = shared_mariadb();
  fault_proxy proxy(server.port());
  db::connect_options o;
  o.host = "127.0.0.1";
  o.port = proxy.port();
  o.user = "root";
  o.connect_timeout = 2s;
  proxy.arm("SET SESSION", fault_proxy::cut::before_statement, 3);
  for (int i = 0; i < 3; ++i) {
    try {
      db::connection conn(o);
      ADD_FAILURE() << "the session setup was cut; the constructor must throw";
    } catch (const db::db_error& e) {
      EXPECT_TRUE(e.connection_lost()) << e.what();
    }
  }
  EXPECT_EQ(proxy.cuts(), 3);
#ifdef SLOTTED_HAVE_LSAN
  EXPECT_EQ(__lsan_do_recoverable_leak_check(), 0) << "leaked memory (see the report above)";
#endif
}

// With the server's global sql_mode empty, MariaDB would clamp an out-of-range value to
// the column's maximum with a mere warning. The daemon's session is strict: the row is
// refused (reported, counted), never silently clamped.
TEST(Session, OverflowIsAnErrorEvenWhenTheServerIsNotStrict) {
  auto& server = shared_mariadb();
  const auto database = server.create_database();
  create_seed_table(server, database);
  migrate(server, database);
  auto admin = server.connect();
  const auto old_mode = admin.query("SELECT @@GLOBAL.sql_mode");
  admin.execute("SET GLOBAL sql_mode = ''");
  struct restore {
    db::connection& c;
    std::string mode;
    ~restore() { c.execute("SET GLOBAL sql_mode = " + c.quote(mode)); }
  } restore_mode{admin, old_mode.at(0).at(0).value_or("")};

  auto cfg = test_config(server, database);
  cfg.flush.interval = 1h;
  cfg.flush.slots = 1;
  in_process_daemon daemon(cfg);
  http_client client(daemon.port());
  // 2 x (2^31 - 1) does not fit the seed-style INT count.
  ASSERT_EQ(client
                .post_json("/v1/increments",
                           R"([{"record_type": 1, "record_id": 7, "delta": 2147483647},
                               {"record_type": 1, "record_id": 7, "delta": 2147483647},
                               {"record_type": 1, "record_id": 8, "delta": 3}])")
                .status,
            202u);
  const auto flushed = client.request("POST", "/v1/flush");
  ASSERT_EQ(flushed.status, 200u) << flushed.body;
  EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counters WHERE record_id = 7"),
            0)
      << "clamped to "
      << server.query_int(database, "SELECT count FROM slotted_counters WHERE record_id = 7");
  EXPECT_EQ(server.query_int(database, "SELECT count FROM slotted_counters WHERE record_id = 8"),
            3);
  EXPECT_EQ(metric_value(client.get("/metrics").body, "slotted_counterd_flush_rows_refused_total"),
            1);
}

}  // namespace
}  // namespace slotted::test
