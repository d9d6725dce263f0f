#pragma once
// The database servers the integration tests run on, one interface for both engines, so
// that a suite is written once and runs on each (docs/plans/issue-42-postgresql.md, §3):
//
//   class Pipeline : public test::engine_test {};
//   TEST_P(Pipeline, ...) { auto& server = this->server(); ... }
//   INSTANTIATE_ENGINES(Pipeline);
//
// names the instances `.../MariaDB` and `.../PostgreSQL` (one engine's alone:
// integration_tests --gtest_filter='Pipeline.*/PostgreSQL').
// Statements a test writes go through the daemon's own driver (db::connection), so
// backquoted names read the same on both (the PostgreSQL driver sends them double-quoted).

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "db/connection.hpp"

namespace slotted::test {

class db_server {
 public:
  virtual ~db_server() = default;
  virtual db::engine engine() const = 0;
  // A new, empty database; returns its name.
  virtual std::string create_database() = 0;
  // Through the daemon's driver, as the server's administrator.
  virtual db::connection connect(const std::string& database) const = 0;
  // The config's database section for `database` (`mysql: {...}` or `postgresql: {...}`,
  // one line), with `extra` keys ("pool_size: 5") inside the braces.
  virtual std::string config_section(const std::string& database,
                                     const std::string& extra = "") const = 0;
  // The same as fields: engine, socket, port, user.
  virtual void configure(config::mysql_config& m, const std::string& database) const = 0;
  // Stops (hard: SIGKILL) and starts again on the same data, socket and port.
  virtual void stop(bool hard = false) = 0;
  virtual void start() = 0;
  virtual bool running() const = 0;

  // The first column of the first row as a number (0 for none or NULL).
  std::int64_t query_int(const std::string& database, const std::string& sql) const;
};

// Starts `server` (a db_server, mariadb_server or postgres_server) again at the end of
// the scope if it is stopped then: a test that stops the server its suite shares and
// fails an ASSERT before starting it leaves it running for the suite's next test.
template <class Server>
struct started_at_exit {
  Server& server;
  explicit started_at_exit(Server& s) : server(s) {}
  started_at_exit(const started_at_exit&) = delete;
  started_at_exit& operator=(const started_at_exit&) = delete;
  ~started_at_exit() {
    if (server.running()) return;
    try {
      server.start();
    } catch (...) {  // the next test says so, if it needs the server
    }
  }
};

class fault_proxy;

// A fault proxy (support/fault_proxy.hpp) in front of the engine's shared server over
// TCP, speaking its protocol.
std::unique_ptr<fault_proxy> proxy_to(db::engine e);
// A statement's beginning as the engine's driver sends it (PostgreSQL's: names
// double-quoted), for fault_proxy::arm.
std::string as_sent(db::engine e, std::string text);
// `cfg` connecting through the proxy listening on `port` instead, over TCP.
config::daemon_config through(config::daemon_config cfg, std::uint16_t port);

// "MariaDB" or "PostgreSQL".
const char* engine_name(db::engine e);

// One server per engine and test executable, started on first use.
db_server& shared_server(db::engine e);

// The engines a suite runs on: MariaDB, and PostgreSQL when its binaries are there or
// SLOTTED_REQUIRE_POSTGRESQL=1 (scripts/test) says they must be.
std::vector<db::engine> test_engines();

class engine_test : public ::testing::TestWithParam<db::engine> {
 protected:
  db_server& server() const { return shared_server(GetParam()); }
  bool postgresql() const { return GetParam() == db::engine::postgresql; }
};

struct engine_param_name {
  std::string operator()(const ::testing::TestParamInfo<db::engine>& info) const {
    return engine_name(info.param);
  }
};

#define INSTANTIATE_ENGINES(suite)                                                        \
  INSTANTIATE_TEST_SUITE_P(, suite, ::testing::ValuesIn(::slotted::test::test_engines()), \
                           ::slotted::test::engine_param_name())

}  // namespace slotted::test
