// TLS to the database (README "Production databases"): a MariaDB started with a
// certificate for 127.0.0.1 from a throwaway CA and require_secure_transport=ON, so a
// plaintext TCP client is refused. The modes map onto the client as documented, the
// daemon flushes exactly with verify_identity, a wrong CA is a retried 503 that loses
// nothing once the CA file is fixed, and `disabled` is refused with a clear message.

#include <gtest/gtest.h>

#include <filesystem>

#include "db/errors.hpp"
#include "integration/load.hpp"
#include "support/daemon_process.hpp"
#include "support/http_client.hpp"
#include "support/tls_files.hpp"

namespace slotted::test {
namespace {

using namespace std::chrono_literals;

struct tls_setup {
  tls_files files;
  mariadb_server server{files.server_args()};
};

tls_setup& tls() {
  static tls_setup setup;
  return setup;
}

db::connect_options tcp_options(std::uint16_t port, db::tls_mode mode, const std::string& ca = "",
                                const std::string& host = "127.0.0.1") {
  db::connect_options o;
  o.host = host;
  o.port = port;
  o.user = "root";
  o.connect_timeout = 5s;
  o.tls.mode = mode;
  o.tls.ca_file = ca;
  return o;
}

// MariaDB's error number for a failed connect ("" when it connected).
std::string connect_error(const db::connect_options& o, std::string* message = nullptr) {
  try {
    db::connection conn(o);
    return "";
  } catch (const db::db_error& e) {
    if (message != nullptr) *message = e.what();
    return e.native_code();
  }
}

std::string tls_yaml(const std::string& database, std::uint16_t port, const std::string& mode,
                     const std::string& ca) {
  return "listen: {address: 127.0.0.1, port: 0}\n"
         "http: {threads: 2}\n"
         "instance_id: tls\n"
         "accept_undeclared_types: true\n"
         "flush: {interval: 200ms, max_retry_backoff: 300ms}\n"
         "mysql:\n"
         "  hosts: [\"127.0.0.1:" +
         std::to_string(port) + "\"]\n  user: root\n  database: " + database +
         "\n  tls: {mode: " + mode + (ca.empty() ? "" : ", ca_file: " + ca) + "}\n";
}

TEST(Tls, ModesMapOntoTheClient) {
  auto& t = tls();
  const auto port = t.server.port();
  // verify_identity: the chain and the name; the certificate names IP 127.0.0.1 only.
  {
    db::connection conn(tcp_options(port, db::tls_mode::verify_identity, t.files.ca()));
    EXPECT_FALSE(conn.tls_cipher().empty());
  }
  std::string why;
  EXPECT_EQ(connect_error(
                tcp_options(port, db::tls_mode::verify_identity, t.files.ca(), "localhost"), &why),
            "2026")
      << "the name 'localhost' is not in the certificate";
  EXPECT_NE(why.find("mysql.tls.mode verify_identity"), std::string::npos) << why;
  // verify_ca: the chain only, so another name for the same server passes.
  EXPECT_EQ(connect_error(tcp_options(port, db::tls_mode::verify_ca, t.files.ca(), "localhost")),
            "");
  EXPECT_EQ(connect_error(tcp_options(port, db::tls_mode::verify_ca, t.files.other_ca())), "2026");
  // required: encrypted, not verified.
  EXPECT_EQ(connect_error(tcp_options(port, db::tls_mode::required, t.files.other_ca())), "");
  // disabled: plaintext, which this server refuses (MariaDB says 1045, access denied).
  EXPECT_EQ(connect_error(tcp_options(port, db::tls_mode::disabled), &why), "1045");
  EXPECT_NE(why.find("mysql.tls.mode is disabled"), std::string::npos) << why;

  // A server without TLS: no silent downgrade above `preferred`.
  auto& plain = shared_mariadb();
  for (auto mode : {db::tls_mode::required, db::tls_mode::verify_ca}) {
    EXPECT_EQ(connect_error(tcp_options(plain.port(), mode, t.files.ca()), &why), "2026")
        << db::tls_mode_name(mode);
    EXPECT_NE(why.find("did not negotiate TLS"), std::string::npos) << why;
  }
  db::connection preferred(tcp_options(plain.port(), db::tls_mode::preferred));
  EXPECT_TRUE(preferred.tls_cipher().empty());
}

TEST(Tls, ACaFileThatVanishedIsAFailureNeverAnUnverifiedConnection) {
  // --check-config saw the file; it may be gone (a rotated secret, an unmounted volume)
  // by the time a connection is made. The client must then refuse, not connect
  // unverified.
  auto& t = tls();
  const std::string gone = t.files.dir() + "/vanished-ca.pem";
  for (auto mode : {db::tls_mode::verify_ca, db::tls_mode::verify_identity}) {
    std::string why;
    EXPECT_EQ(connect_error(tcp_options(t.server.port(), mode, gone), &why), "2026")
        << db::tls_mode_name(mode) << ": " << why;
  }
}

TEST(Tls, DaemonFlushesExactlyWithVerifyIdentity) {
  auto& t = tls();
  const auto database = migrated_database(t.server);
  auto cfg = test_config(t.server, database);
  cfg.mysql.socket.clear();
  cfg.mysql.hosts = {{"127.0.0.1", t.server.port()}};
  cfg.mysql.tls.mode = config::tls_mode::verify_identity;
  cfg.mysql.tls.ca_file = t.files.ca();
  in_process_daemon daemon(cfg);
  http_client client(daemon.port());
  ASSERT_TRUE(flush_until_ok(client, 30s));
  EXPECT_EQ(client.get("/readyz").status, 200u);

  const auto o = random_load(4, 3000, 400, 21);
  const auto load = run_load(daemon.port(), o);
  ASSERT_EQ(load.failed_requests, 0u);
  ASSERT_TRUE(flush_until_ok(client, 30s));
  EXPECT_EQ(read_table(t.server, database).totals, without_zeros(load.acknowledged));
  const auto m = client.get("/metrics").body;
  EXPECT_EQ(metric_value(m, "slotted_counterd_mysql_host_info{host=\"127.0.0.1:" +
                                std::to_string(t.server.port()) + "\"}"),
            1);
  EXPECT_EQ(daemon.stop(), 0);
}

TEST(Tls, WrongCaIsRetried503AndLosesNothingOnceFixed) {
  auto& t = tls();
  const auto database = migrated_database(t.server);
  // The daemon reads the CA at each connection: an operator fixes the file in place.
  const std::string ca = t.files.dir() + "/daemon-ca.pem";
  std::filesystem::copy_file(t.files.other_ca(), ca,
                             std::filesystem::copy_options::overwrite_existing);
  daemon_process daemon(tls_yaml(database, t.server.port(), "verify_identity", ca));
  http_client client(daemon.port());

  const auto o = random_load(2, 2000, 200, 22);
  const auto load = run_load(daemon.port(), o);
  ASSERT_EQ(load.failed_requests, 0u) << "ingest answers 202 into memory meanwhile";
  EXPECT_EQ(client.get("/readyz").status, 503u);
  EXPECT_EQ(client.request("POST", "/v1/flush").status, 503u);
  const auto log = daemon.log();
  EXPECT_NE(log.find("TLS/SSL error"), std::string::npos) << log;
  EXPECT_NE(log.find("check mysql.tls.ca_file"), std::string::npos) << log;
  EXPECT_EQ(read_table(t.server, database).rows, 0);
  EXPECT_GT(
      metric_value(client.get("/metrics").body, "slotted_counterd_db_errors_total{kind=\"tls\"}"),
      0);

  std::filesystem::copy_file(t.files.ca(), ca, std::filesystem::copy_options::overwrite_existing);
  ASSERT_TRUE(flush_until_ok(client, 30s));
  EXPECT_EQ(client.get("/readyz").status, 200u);
  EXPECT_EQ(read_table(t.server, database).totals, without_zeros(load.acknowledged));
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(30s), 0);
}

TEST(Tls, DisabledAgainstASecureTransportServerIsRefusedClearly) {
  auto& t = tls();
  const auto database = migrated_database(t.server);
  // Refused plaintext is access denied (1045): at start, with the server reachable,
  // the daemon stops (exit 1), as for any access denied, saying why.
  try {
    daemon_process daemon(tls_yaml(database, t.server.port(), "disabled", ""));
    ADD_FAILURE() << "the daemon started in plaintext against a server refusing it";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("status 256"), std::string::npos) << "exit 1: " << what;
    EXPECT_NE(what.find("Access denied"), std::string::npos) << what;
    EXPECT_NE(what.find("mysql.tls.mode is disabled"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace slotted::test
