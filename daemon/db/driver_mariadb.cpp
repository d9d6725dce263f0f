#include "db/driver_mariadb.hpp"

#include <errmsg.h>
#include <mysql.h>
#include <mysqld_error.h>

#include <map>

#include "db/sql.hpp"
#include "db/sql_text.hpp"

namespace slotted::db {

namespace {
unsigned seconds_at_least_one(std::chrono::milliseconds d) {
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(d).count();
  return s < 1 ? 1u : static_cast<unsigned>(s);
}

// mysql.tls onto Connector/C 3.3. MYSQL_OPT_SSL_ENFORCE asks for TLS, but 3.3 still
// goes on in plaintext when the server offers none (only a hostname check refuses
// that), so modes above `preferred` are checked after connecting (tls_shortfall). A
// CA makes the client verify the server's chain; MYSQL_OPT_SSL_VERIFY_SERVER_CERT
// adds the check of its name (or IP address) against the host connected to.
void apply_tls_options(MYSQL* h, const tls_options& t) {
  if (t.mode == tls_mode::disabled) return;
  const my_bool on = 1;
  mysql_optionsv(h, MYSQL_OPT_SSL_ENFORCE, &on);
  if (!t.cert_file.empty()) mysql_optionsv(h, MYSQL_OPT_SSL_CERT, t.cert_file.c_str());
  if (!t.key_file.empty()) mysql_optionsv(h, MYSQL_OPT_SSL_KEY, t.key_file.c_str());
  if (t.mode == tls_mode::verify_ca || t.mode == tls_mode::verify_identity)
    mysql_optionsv(h, MYSQL_OPT_SSL_CA, t.ca_file.c_str());
  if (t.mode == tls_mode::verify_identity) mysql_optionsv(h, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &on);
}

// Why an established connection does not meet mysql.tls.mode, or empty.
std::string tls_shortfall(MYSQL* h, const tls_options& t) {
  const bool required = t.mode != tls_mode::disabled && t.mode != tls_mode::preferred;
  if (!required || mysql_get_ssl_cipher(h) != nullptr) return {};
  return std::string("connect: the server did not negotiate TLS and mysql.tls.mode is ") +
         tls_mode_name(t.mode) + ": refusing a plaintext connection";
}

// The server's own words are misleading in two cases; say what the operator should check.
std::string connect_hint(unsigned code, const connect_options& o) {
  if (code == CR_SSL_CONNECTION_ERROR)
    return std::string(" (TLS failed, mysql.tls.mode ") + tls_mode_name(o.tls.mode) +
           ": check mysql.tls.ca_file and the server's certificate)";
  if (code == ER_ACCESS_DENIED_ERROR && o.tls.mode == tls_mode::disabled && o.socket.empty())
    return " (mysql.tls.mode is disabled: a server that requires secure transport refuses "
           "plaintext connections with this error)";
  return {};
}

// The client library's error numbers by class (db/errors.hpp).
error_class class_of(unsigned code, const std::string& message) {
  switch (code) {
    case ER_LOCK_DEADLOCK:  // 1213; on Galera also a certification failure
      return error_class::deadlock;
    case ER_LOCK_WAIT_TIMEOUT:  // 1205
      return error_class::lock_wait_timeout;
    case CR_CONNECTION_ERROR:      // 2002
    case CR_CONN_HOST_ERROR:       // 2003
    case CR_SERVER_GONE_ERROR:     // 2006
    case CR_SERVER_LOST:           // 2013
    case CR_SERVER_LOST_EXTENDED:  // 2055
    case CR_COMMANDS_OUT_OF_SYNC:  // 2014: the protocol state is unknown
    case ER_CON_COUNT_ERROR:       // 1040 too many connections
    case ER_SERVER_SHUTDOWN:       // 1053
    case ER_CONNECTION_KILLED:     // 1927
    case ER_QUERY_INTERRUPTED:     // 1317
    case 1152:                     // ER_ABORTING_CONNECTION
    case 4031:                     // client disconnected for inactivity
    // The server refused a packet above its max_allowed_packet and closed the connection.
    case ER_NET_PACKET_TOO_LARGE:  // 1153
    // Galera: the node is not part of the primary component or not Synced ("WSREP has
    // not yet prepared node for application use"); another node may take the write.
    case ER_UNKNOWN_COM_ERROR:  // 1047
    // Galera: the node lost the cluster during COMMIT; the outcome is unknown until
    // the ledger is read again.
    case ER_ERROR_DURING_COMMIT:  // 1180
    // A read-only server (a replica after a switchover): this host cannot take writes.
    case ER_OPTION_PREVENTS_STATEMENT:  // 1290
    case ER_READ_ONLY_MODE:             // 1836
      return error_class::connection;
    case CR_SSL_CONNECTION_ERROR:  // 2026: handshake or certificate check failed
      return error_class::tls;
    case ER_ACCESS_DENIED_ERROR:        // 1045
    case ER_DBACCESS_DENIED_ERROR:      // 1044
    case ER_TABLEACCESS_DENIED_ERROR:   // 1142
    case ER_COLUMNACCESS_DENIED_ERROR:  // 1143
    case ER_BAD_DB_ERROR:               // 1049
    case ER_BAD_FIELD_ERROR:            // 1054
    case ER_PARSE_ERROR:                // 1064
    case ER_WRONG_VALUE_COUNT_ON_ROW:   // 1136
      return error_class::fatal;
    case ER_NO_SUCH_TABLE:  // 1146
      return error_class::no_such_table;
    case ER_WARN_DATA_OUT_OF_RANGE:           // 1264
    case ER_DATA_OUT_OF_RANGE:                // 1690 (BIGINT overflow)
    case ER_TRUNCATED_WRONG_VALUE_FOR_FIELD:  // 1366
    case ER_TRUNCATED_WRONG_VALUE:            // 1292
    case ER_DATA_TOO_LONG:                    // 1406
    case ER_BAD_NULL_ERROR:                   // 1048
    case ER_CONSTRAINT_FAILED:                // 4025: a CHECK of the table
      return error_class::data;
    case 167:                     // HA_ERR_AUTOINC_ERANGE: out of range value for column
    case ER_AUTOINC_READ_FAILED:  // 1467
      return error_class::sequence_exhausted;
    case ER_DUP_ENTRY:  // 1062
      return message.find("for key 'PRIMARY'") != std::string::npos
                 ? error_class::duplicate_primary_key
                 : error_class::duplicate_key;
    case CR_NET_PACKET_TOO_LARGE:  // 2020
      return error_class::too_large;
    case ER_STATEMENT_TIMEOUT:  // 1969: max_statement_time
      return error_class::statement_timeout;
    default:
      return error_class::other;
  }
}

class mariadb_driver final : public driver {
 public:
  explicit mariadb_driver(const connect_options& o);
  ~mariadb_driver() override { mysql_close(handle_); }
  mariadb_driver(const mariadb_driver&) = delete;
  mariadb_driver& operator=(const mariadb_driver&) = delete;

  void execute(std::string_view sql) override;
  std::vector<result_row> query(std::string_view sql) override;
  std::uint64_t affected_rows() const override { return mysql_affected_rows(handle_); }
  std::string tls_cipher() const override;
  bool in_transaction() const override;
  std::string quote(std::string_view text) override;
  // A string literal: VARBINARY takes its escaped bytes as they are.
  std::string quote_bytes(std::string_view bytes) override { return quote(bytes); }
  std::size_t max_statement_bytes() const override { return max_statement_; }
  std::vector<result_row> query_limited(std::string_view select,
                                        std::chrono::milliseconds limit) override {
    return query(sql_text::time_limited(select, limit.count()));
  }
  void ping() override { execute(ping_statement); }
  void require_writable() override;
  bool error_aborts_transaction() const override { return false; }
  const dialect& sql() const override { return mariadb_dialect(); }
  void begin_read_snapshot() override {
    execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
    execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY");
  }

 private:
  [[noreturn]] void fail(std::string_view what);
  MYSQL* handle_ = nullptr;
  std::size_t max_statement_ = 1 << 20;
};

mariadb_driver::mariadb_driver(const connect_options& o) {
  handle_ = mysql_init(nullptr);
  if (handle_ == nullptr) throw mariadb_error(CR_OUT_OF_MEMORY, "mysql_init failed");
  const unsigned connect_secs = seconds_at_least_one(o.connect_timeout);
  const unsigned io_secs = seconds_at_least_one(o.io_timeout);
  mysql_optionsv(handle_, MYSQL_OPT_CONNECT_TIMEOUT, &connect_secs);
  mysql_optionsv(handle_, MYSQL_OPT_READ_TIMEOUT, &io_secs);
  mysql_optionsv(handle_, MYSQL_OPT_WRITE_TIMEOUT, &io_secs);
  const my_bool no_reconnect = 0;  // a silent reconnect would hide a lost transaction
  mysql_optionsv(handle_, MYSQL_OPT_RECONNECT, &no_reconnect);
  mysql_optionsv(handle_, MYSQL_SET_CHARSET_NAME, "utf8mb4");
  const bool use_socket = !o.socket.empty();
  if (!use_socket) {
    const unsigned protocol = MYSQL_PROTOCOL_TCP;
    mysql_optionsv(handle_, MYSQL_OPT_PROTOCOL, &protocol);
    apply_tls_options(handle_, o.tls);
  }
  const bool connected =
      mysql_real_connect(handle_, use_socket ? nullptr : o.host.c_str(), o.user.c_str(),
                         o.password.c_str(), o.database.c_str(), use_socket ? 0 : o.port,
                         use_socket ? o.socket.c_str() : nullptr, 0) != nullptr;
  // Never a silent downgrade to plaintext (see tls_shortfall).
  const std::string shortfall = connected && !use_socket ? tls_shortfall(handle_, o.tls) : "";
  if (!connected || !shortfall.empty()) {
    const unsigned code = connected ? CR_SSL_CONNECTION_ERROR : mysql_errno(handle_);
    const std::string message =
        connected ? shortfall
                  : std::string("connect: ") + mysql_error(handle_) + connect_hint(code, o);
    mysql_close(handle_);
    throw mariadb_error(code, message);
  }
  try {
    for (const char* sql : session_setup) execute(sql);
    // Read at every connect: an operator may lower it, and new sessions see the change.
    const auto rows = query("SELECT @@max_allowed_packet");
    if (!rows.empty() && !rows[0].empty() && rows[0][0]) {
      const std::size_t packet = std::stoull(*rows[0][0]);
      // The header and command byte, with room to spare.
      max_statement_ = packet > 2048 ? packet - 1024 : packet / 2;
    }
  } catch (...) {
    // The destructor does not run for a constructor that throws.
    mysql_close(handle_);
    throw;
  }
}

void mariadb_driver::fail(std::string_view what) {
  throw mariadb_error(mysql_errno(handle_), std::string(what) + ": " + mysql_error(handle_));
}

void mariadb_driver::execute(std::string_view sql) {
  if (mysql_real_query(handle_, sql.data(), sql.size()) != 0) fail("query");
  // Statements run here return no rows; drain any result to keep the protocol in step.
  if (MYSQL_RES* res = mysql_store_result(handle_))
    mysql_free_result(res);
  else if (mysql_field_count(handle_) != 0)
    fail("store result");
}

std::vector<result_row> mariadb_driver::query(std::string_view sql) {
  if (mysql_real_query(handle_, sql.data(), sql.size()) != 0) fail("query");
  MYSQL_RES* res = mysql_store_result(handle_);
  if (res == nullptr) {
    if (mysql_field_count(handle_) != 0) fail("store result");
    return {};
  }
  std::vector<result_row> rows;
  const unsigned fields = mysql_num_fields(res);
  while (MYSQL_ROW row = mysql_fetch_row(res)) {
    const unsigned long* lengths = mysql_fetch_lengths(res);
    result_row out(fields);
    for (unsigned i = 0; i < fields; ++i) {
      if (row[i] != nullptr) out[i] = std::string(row[i], lengths[i]);
    }
    rows.push_back(std::move(out));
  }
  mysql_free_result(res);
  return rows;
}

std::string mariadb_driver::tls_cipher() const {
  const char* cipher = mysql_get_ssl_cipher(handle_);
  return cipher == nullptr ? std::string() : std::string(cipher);
}

std::string mariadb_driver::quote(std::string_view text) {
  std::string out(text.size() * 2 + 3, '\0');
  out[0] = '\'';
  const unsigned long n =
      mysql_real_escape_string(handle_, out.data() + 1, text.data(), text.size());
  out.resize(n + 1);
  out.push_back('\'');
  return out;
}

// Read-only (a replica after a switchover), or a Galera node that is not Synced and
// ready or rejects queries (wsrep_reject_queries): a host to move on from. Sets causal
// reads (wsrep_sync_wait=1) on Galera nodes, so a read after a failover sees what the
// cluster committed.
void mariadb_driver::require_writable() {
  std::map<std::string, std::string> v;
  try {
    // Variables and status any MySQL or MariaDB answers; the wsrep ones exist only on
    // a server built with Galera, and wsrep_local_state only while a provider is
    // loaded (a plain MariaDB reports wsrep_ready OFF, so that alone says nothing).
    for (const char* sql : node_state_selects) {
      for (const auto& row : query(sql))
        if (row.size() >= 2 && row[0] && row[1]) v[*row[0]] = *row[1];
    }
  } catch (const db_error& e) {
    // A proxy in front of the servers (Vitess) may not answer these; its own routing
    // then decides where writes go.
    if (e.connection_lost()) throw;
    return;
  }
  if (v["read_only"] == "ON")
    throw db_error(error_class::connection, "the server is read-only; treated as unreachable");
  const auto state = v.find("wsrep_local_state");
  if (state == v.end()) return;  // not a Galera node
  const std::string& reject = v["wsrep_reject_queries"];
  if (v["wsrep_ready"] != "ON" || state->second != "4" || (!reject.empty() && reject != "NONE")) {
    throw db_error(error_class::connection,
                   "the Galera node is not ready (wsrep_ready=" + v["wsrep_ready"] +
                       ", wsrep_local_state=" + state->second + " " +
                       v["wsrep_local_state_comment"] + ", wsrep_reject_queries=" + reject +
                       "); treated as unreachable");
  }
  execute(galera_sync_reads);
}

bool mariadb_driver::in_transaction() const {
  unsigned int status = 0;
  if (mariadb_get_infov(handle_, MARIADB_CONNECTION_SERVER_STATUS, &status)) return true;
  return (status & SERVER_STATUS_IN_TRANS) != 0;
}
}  // namespace

bool initialize_client_library() {
  return mysql_library_init(0, nullptr, nullptr) == 0;
}

db_error mariadb_error(unsigned code, const std::string& message) {
  return db_error(class_of(code, message), message, std::to_string(code));
}

std::unique_ptr<driver> connect_mariadb(const connect_options& options) {
  return std::make_unique<mariadb_driver>(options);
}

}  // namespace slotted::db
