#include "support/db_server.hpp"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <stdexcept>

#include "support/fault_proxy.hpp"
#include "support/mariadb_server.hpp"
#include "support/postgres_server.hpp"

namespace slotted::test {
namespace {

class mariadb final : public db_server {
 public:
  db::engine engine() const override { return db::engine::mariadb; }
  std::string create_database() override { return server().create_database(); }
  db::connection connect(const std::string& database) const override {
    return server().connect(database);
  }
  std::string config_section(const std::string& database, const std::string& extra) const override {
    return "mysql: {socket: " + server().socket() + ", user: root, database: " + database +
           (extra.empty() ? "" : ", " + extra) + "}\n";
  }
  void configure(config::mysql_config& m, const std::string& database) const override {
    m.engine = config::database_engine::mariadb;
    m.socket = server().socket();
    m.user = "root";
    m.database = database;
  }
  void stop(bool hard) override { server().stop(hard); }
  void start() override { server().start(); }
  bool running() const override { return server().running(); }

 private:
  static mariadb_server& server() { return shared_mariadb(); }
};

class postgresql final : public db_server {
 public:
  db::engine engine() const override { return db::engine::postgresql; }
  std::string create_database() override { return server().create_database(); }
  db::connection connect(const std::string& database) const override {
    return db::connection(server().options(database));
  }
  std::string config_section(const std::string& database, const std::string& extra) const override {
    return "postgresql: {socket: " + server().socket_dir() +
           ", port: " + std::to_string(server().port()) +
           ", user: postgres, database: " + database + (extra.empty() ? "" : ", " + extra) + "}\n";
  }
  void configure(config::mysql_config& m, const std::string& database) const override {
    m.engine = config::database_engine::postgresql;
    m.socket = server().socket_dir();
    m.port = server().port();
    m.user = "postgres";
    m.database = database;
  }
  void stop(bool hard) override { server().stop(hard); }
  void start() override { server().start(); }
  bool running() const override { return server().running(); }

 private:
  static postgres_server& server() { return shared_postgres(); }
};

}  // namespace

std::int64_t db_server::query_int(const std::string& database, const std::string& sql) const {
  auto conn = connect(database);
  const auto rows = conn.query(sql);
  if (rows.empty() || rows[0].empty() || !rows[0][0]) return 0;
  return std::stoll(*rows[0][0]);
}

std::unique_ptr<fault_proxy> proxy_to(db::engine e) {
  if (e == db::engine::postgresql)
    return std::make_unique<fault_proxy>(shared_postgres().port(),
                                         fault_proxy::protocol::postgresql);
  return std::make_unique<fault_proxy>(shared_mariadb().port());
}

std::string as_sent(db::engine e, std::string text) {
  if (e == db::engine::postgresql) std::replace(text.begin(), text.end(), '`', '"');
  return text;
}

config::daemon_config through(config::daemon_config cfg, std::uint16_t port) {
  cfg.mysql.socket.clear();
  cfg.mysql.host = "127.0.0.1";
  cfg.mysql.port = port;
  return cfg;
}

const char* engine_name(db::engine e) {
  return e == db::engine::postgresql ? "PostgreSQL" : "MariaDB";
}

db_server& shared_server(db::engine e) {
  if (e == db::engine::postgresql) {
    static postgresql server;
    return server;
  }
  static mariadb server;
  return server;
}

std::vector<db::engine> test_engines() {
  std::vector<db::engine> engines{db::engine::mariadb};
  const char* required = std::getenv("SLOTTED_REQUIRE_POSTGRESQL");
  if (!postgres_bindir().empty() || (required != nullptr && std::string(required) == "1"))
    engines.push_back(db::engine::postgresql);
  return engines;
}

}  // namespace slotted::test
