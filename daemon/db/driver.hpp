#pragma once
// What one database connection does, whatever the engine: the seam between db/'s
// engine-neutral code (connection, the write path, the repositories) and an engine's
// client library. One implementation per engine (db/driver_mariadb.cpp is the only file
// that includes <mysql.h>). Failures throw db_error, classified by the driver
// (db/errors.hpp). Thread-safety: one thread at a time.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "db/dialect.hpp"

namespace slotted::db {

using result_row = std::vector<std::optional<std::string>>;

// The longest a read of an HTTP request (a many-counter read, a top-N statement) runs
// before the server stops it (error_class::statement_timeout): it never holds a
// connection of the flushes' pool for long.
inline constexpr std::chrono::milliseconds read_time_limit{5000};

class driver {
 public:
  virtual ~driver() = default;

  // A statement that returns no rows (any rows it does return are drained).
  virtual void execute(std::string_view sql) = 0;
  virtual std::vector<result_row> query(std::string_view sql) = 0;
  // Rows the last statement changed, as the engine counts them.
  virtual std::uint64_t affected_rows() const = 0;
  // The TLS cipher in use, or empty on a plaintext connection.
  virtual std::string tls_cipher() const = 0;
  // Whether a transaction is open after the last statement; true when it cannot be told.
  virtual bool in_transaction() const = 0;
  // A quoted SQL string literal for `text`, escaped for this connection.
  virtual std::string quote(std::string_view text) = 0;
  // A literal of a binary column's value (`bytes`, any bytes, NUL too), compared byte for
  // byte.
  virtual std::string quote_bytes(std::string_view bytes) = 0;
  // The longest statement the server takes, as read at connect.
  virtual std::size_t max_statement_bytes() const = 0;

  // `select`, stopped by the server after `limit` (error_class::statement_timeout); the
  // session's own limit is unchanged afterwards.
  virtual std::vector<result_row> query_limited(std::string_view select,
                                                std::chrono::milliseconds limit) = 0;
  // A round trip that proves the connection alive and touches no table.
  virtual void ping() = 0;
  // Throws a db_error of error_class::connection when this server cannot take writes
  // now (read-only, a standby, a Galera node not Synced), so that the failover connector
  // moves on; on a Galera node, also makes reads wait for what the cluster committed.
  virtual void require_writable() = 0;
  // Starts a read-only transaction whose reads all see one snapshot (ended by COMMIT).
  virtual void begin_read_snapshot() = 0;
  // Whether a failed statement aborts its whole transaction (PostgreSQL), rather than
  // being rolled back alone (InnoDB): a transaction that goes on past an expected
  // error must then take a savepoint before the statement.
  virtual bool error_aborts_transaction() const = 0;
  // The engine's statement text (db/dialect.hpp).
  virtual const dialect& sql() const = 0;
};

}  // namespace slotted::db
