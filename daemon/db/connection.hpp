#pragma once
// One database connection: a value (pools move it) over the engine's driver
// (db/driver.hpp). Blocking: never call it from an HTTP I/O thread.
//
// Failures throw db_error, classified by the driver (db/errors.hpp). After an error
// whose connection_lost() is true the connection must be dropped.
// Thread-safety: one thread at a time.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "db/driver.hpp"
#include "db/errors.hpp"

namespace slotted::db {

// mysql.tls.mode, mapped onto the client library's options by the driver
// (db/driver_mariadb.cpp). Modes above `preferred` never fall back to plaintext: a
// connection that did not negotiate TLS is closed and reported (error_class::tls).
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

// Which server a connection talks to, and so which driver it uses.
enum class engine { mariadb, postgresql };

struct connect_options {
  engine kind = engine::mariadb;
  std::string host = "127.0.0.1";
  std::uint16_t port = 3306;
  std::string socket;
  std::string user;
  std::string password;
  std::string database;
  // PostgreSQL: the schema the tables are in (the session's search_path).
  std::string schema = "public";
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

class connection {
 public:
  // Connects with the driver of options.kind and sets the session up
  // (db/driver_mariadb.hpp, db/driver_postgresql.hpp). Throws db_error.
  explicit connection(const connect_options& options);
  // Over a driver already connected (tests give one of their own).
  explicit connection(std::unique_ptr<driver> d);
  ~connection();
  connection(connection&& other) noexcept;
  connection& operator=(connection&& other) noexcept;
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  // A statement longer than max_statement_bytes() is not sent: it throws db_error
  // error_class::too_large (see db_error::too_large), the connection stays usable.
  void execute(std::string_view sql);
  std::vector<result_row> query(std::string_view sql);
  std::uint64_t affected_rows() const;
  // The TLS cipher in use, or empty on a plaintext connection.
  std::string tls_cipher() const;
  // Whether the server reported a transaction open after the last statement; true when
  // it cannot be told.
  bool in_transaction() const;

  // A quoted SQL string literal for `text` ('...'), escaped for this connection.
  std::string quote(std::string_view text);
  // A literal of a binary column's value: any bytes (db/driver.hpp).
  std::string quote_bytes(std::string_view bytes);
  // What the engine's driver does its own way (db/driver.hpp). query_limited cuts
  // `select` at `limit`, at least 1 ms and at most read_time_limit.
  std::vector<result_row> query_limited(std::string_view select,
                                        std::chrono::milliseconds limit = read_time_limit);
  void ping() { driver_->ping(); }
  void require_writable() { driver_->require_writable(); }
  void begin_read_snapshot() { driver_->begin_read_snapshot(); }
  bool error_aborts_transaction() const { return driver_->error_aborts_transaction(); }
  // The engine's statement text, for the SQL builders (db/dialect.hpp).
  const dialect& sql() const { return driver_->sql(); }

  // The longest statement this connection sends: the server's max_allowed_packet as
  // read at connect, less room for the packet's header. A server refuses a longer one
  // and closes the connection, which would leave a batch in doubt and resent whole.
  std::size_t max_statement_bytes() const { return driver_->max_statement_bytes(); }

 private:
  void check_size(std::string_view sql) const;
  std::unique_ptr<driver> driver_;
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
