#pragma once
// One MariaDB/MySQL connection (MariaDB Connector/C). Blocking: never call it from an
// HTTP I/O thread.
//
// Failures throw db_error carrying the server/client error number. After an error
// whose connection_lost() is true the connection must be dropped.
// Thread-safety: one thread at a time.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "db/errors.hpp"

typedef struct st_mysql MYSQL;

namespace slotted::db {

// mysql.tls.mode, mapped onto MariaDB Connector/C's options (see connection.cpp). Modes
// above `preferred` never fall back to plaintext: a connection that did not negotiate
// TLS is closed and reported (CR_SSL_CONNECTION_ERROR).
enum class tls_mode { disabled, preferred, required, verify_ca, verify_identity };

struct tls_options {
  tls_mode mode = tls_mode::preferred;
  std::string ca_file;    // verify_ca, verify_identity: the CA that signed the server's cert
  std::string cert_file;  // optional client certificate, with key_file
  std::string key_file;
};

const char* tls_mode_name(tls_mode mode);

// One database server, as listed in mysql.hosts.
struct endpoint {
  std::string host;
  std::uint16_t port = 3306;
  // "host:port" ("[v6]:port"), the name logs and metrics use.
  std::string name() const;
};

struct connect_options {
  std::string host = "127.0.0.1";
  std::uint16_t port = 3306;
  std::string socket;
  std::string user;
  std::string password;
  std::string database;
  std::chrono::milliseconds connect_timeout{5000};
  // Bounds a read or write on an established connection, so a silent peer cannot
  // hang the flusher forever.
  std::chrono::milliseconds io_timeout{60000};
  // TCP connections only: a unix socket is local and never encrypted.
  tls_options tls;
  // mysql.hosts: when not empty, the servers a failover_connector tries in order (a
  // connection itself always uses host/port or socket).
  std::vector<endpoint> hosts;
};

// Once per process, before any thread uses a connection. Returns false on failure.
bool initialize_client_library();

using result_row = std::vector<std::optional<std::string>>;

class connection {
 public:
  // Connects, sets READ COMMITTED (fewer gap locks between concurrent upserts), a strict
  // sql_mode (STRICT_ALL_TABLES: out-of-range values are errors, whatever the server's
  // global mode) and autocommit on, and reads the server's @@max_allowed_packet (see
  // max_statement_bytes). Throws db_error; a failure after the connect closes the handle.
  explicit connection(const connect_options& options);
  ~connection();
  connection(connection&& other) noexcept;
  connection& operator=(connection&& other) noexcept;
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  // A statement longer than max_statement_bytes() is not sent: it throws db_error
  // CR_NET_PACKET_TOO_LARGE (see db_error::too_large), the connection stays usable.
  void execute(std::string_view sql);
  std::vector<result_row> query(std::string_view sql);
  std::uint64_t affected_rows() const;
  // The TLS cipher in use, or empty on a plaintext connection.
  std::string tls_cipher() const;
  // Whether the server reported a transaction open after the last statement (its
  // SERVER_STATUS_IN_TRANS flag); true when it cannot be told.
  bool in_transaction() const;

  // A quoted SQL string literal for `text` ('...'), escaped for this connection.
  std::string quote(std::string_view text);

  // The longest statement this connection sends: the server's max_allowed_packet as
  // read at connect, less room for the packet's header. A server refuses a longer one
  // and closes the connection, which would leave a batch in doubt and resent whole.
  std::size_t max_statement_bytes() const { return max_statement_; }

 private:
  [[noreturn]] void fail(std::string_view what);
  void check_size(std::string_view sql) const;
  MYSQL* handle_ = nullptr;
  std::size_t max_statement_ = 1 << 20;
};

// After `e` ended a transaction on `conn` early: a ROLLBACK, unless the connection is
// gone (the server rolled back itself); a failing ROLLBACK is ignored, `e` being the
// error worth reporting. The caller rethrows.
void rollback_after(connection& conn, const db_error& e) noexcept;

// Runs `work` (which starts a transaction on `conn` and commits it); whatever it throws,
// the connection is left with no transaction open (rollback_after for a db_error, a
// ROLLBACK for anything else: a bad_alloc, a bound reached, a malformed row), and it is
// rethrown.
void rolled_back_on_throw(connection& conn, const std::function<void()>& work);

// The one transaction idiom of db/: `begin` (START TRANSACTION), then `work()`, which
// ends the transaction itself (COMMIT, or a ROLLBACK for an early return such as a batch
// already applied), under rolled_back_on_throw. Returns what `work` returns.
template <typename Work>
auto in_transaction(connection& conn, Work&& work, std::string_view begin = "START TRANSACTION")
    -> std::invoke_result_t<Work&> {
  using result = std::invoke_result_t<Work&>;
  if constexpr (std::is_void_v<result>) {
    rolled_back_on_throw(conn, [&] {
      conn.execute(begin);
      work();
    });
  } else {
    std::optional<result> out;
    rolled_back_on_throw(conn, [&] {
      conn.execute(begin);
      out.emplace(work());
    });
    return std::move(*out);
  }
}

}  // namespace slotted::db
