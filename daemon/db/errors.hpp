#pragma once
// Database errors, by class (README: Design, Failures). Each driver sorts its engine's
// codes into these classes where they arise (db/driver_mariadb.cpp for MariaDB's error
// numbers); everything above the driver asks an error what it is by name, never by an
// engine's number. The kind (the `kind` label of db_errors_total, model/errors.hpp)
// follows from the class.
//
// Retryable: the connection was lost or refused, a deadlock (on Galera also a
// certification failure at COMMIT), a lock wait timeout, too many connections, a TLS
// handshake that failed, or anything unknown (retried with backoff). A server that
// cannot take writes now (a Galera node not Synced; a read-only server) counts as a lost
// connection: the connection is dropped, the batch's outcome is resolved against the
// ledger, and the failover connector moves on to the next host. Fatal: errors that the
// same statement will meet again until an operator acts (access denied, unknown
// database/table/column, bad schema).

#include <stdexcept>
#include <string>

#include "model/errors.hpp"

namespace slotted::db {

enum class error_class {
  deadlock,           // retried: the transaction was rolled back
  lock_wait_timeout,  // retried
  connection,         // the connection is unusable: drop it (and fail over)
  tls,                // the TLS handshake or certificate check failed: retried
  // An insert met a row of its key (a guard's row already there).
  duplicate_key,
  // The same on the table's primary key. On the counters table's AUTO_INCREMENT id this
  // means the id column is stuck at its maximum (sequence_exhausted).
  duplicate_primary_key,
  // The rows themselves cannot be stored (out of range for the column, a sum that
  // overflows BIGINT): retrying the same statement can never succeed.
  data,
  // A statement too large for the server: never sent, the connection stays usable; the
  // same statement can never pass, a smaller one can (the batch is split).
  too_large,
  no_such_table,      // fatal
  statement_timeout,  // a read stopped at its time limit: the database is there, too slow
  // An id column or sequence ran out of values: retrying cannot help until an operator
  // widens the column.
  sequence_exhausted,
  fatal,  // meets the same statement again until an operator acts
  other,  // anything else: retried with backoff
};

const char* class_name(error_class c);

class db_error : public std::runtime_error {
 public:
  // `native_code` is the engine's own code as text (MariaDB's error number, PostgreSQL's
  // SQLSTATE), for logs only; empty for errors of our own (schema checks).
  db_error(error_class c, const std::string& message, std::string native_code = {});

  error_class cls() const { return class_; }
  const std::string& native_code() const { return native_; }
  error_kind kind() const;
  bool fatal() const {
    return class_ == error_class::fatal || class_ == error_class::no_such_table;
  }
  bool data_error() const { return class_ == error_class::data; }
  // A statement too large for the server, refused before it was sent. The server's own
  // refusal of a packet closes the connection and counts as connection_lost() (the next
  // connection reads the new limit and refuses the statement itself).
  bool too_large() const { return class_ == error_class::too_large; }
  // The statement named a table the database does not have.
  bool no_such_table() const { return class_ == error_class::no_such_table; }
  bool duplicate_key() const {
    return class_ == error_class::duplicate_key || class_ == error_class::duplicate_primary_key;
  }
  bool statement_timed_out() const { return class_ == error_class::statement_timeout; }
  // An id column at the end of its range. Only meaningful for the upsert into the
  // counters table, whose other duplicates its upsert absorbs.
  bool autoincrement_exhausted() const {
    return class_ == error_class::sequence_exhausted ||
           class_ == error_class::duplicate_primary_key;
  }
  // The connection is unusable after this error and must be discarded.
  bool connection_lost() const { return class_ == error_class::connection; }

 private:
  error_class class_;
  std::string native_;
};

}  // namespace slotted::db
