#pragma once
// Database error classification, in one place (README: Design, Failures): the client
// library's codes sorted into the kinds of model/errors.hpp (the `kind` label of
// db_errors_total), and db_error.
//
// Retryable: the connection was lost or refused, a deadlock (on Galera also a
// certification failure at COMMIT), a lock wait timeout, too many connections, a TLS
// handshake that failed, or anything unknown (retried with backoff). A server that
// cannot take writes now (a Galera node not Synced, 1047; a read-only server) counts
// as a lost connection: the connection is dropped, the batch's outcome is resolved
// against the ledger, and the failover connector moves on to the next host. Fatal: errors that the
// same statement will meet again until an operator acts (access denied, unknown
// database/table/column, bad schema).

#include <stdexcept>
#include <string>
#include <string_view>

#include "model/errors.hpp"

namespace slotted::db {

error_kind kind_of(unsigned code);
bool is_fatal(unsigned code);
// The rows themselves cannot be stored (out of range for the column, a sum that
// overflows BIGINT): retrying the same statement can never succeed.
bool is_data_error(unsigned code);

// The counters table's AUTO_INCREMENT column has run out of values: 167 (out of range
// for the column, from the storage engine), 1467 (the auto-increment value could not be
// read), or 1062 on the PRIMARY key (the counter stuck at the column's maximum). Only
// meaningful for the upsert into the counters table, whose other duplicates ON DUPLICATE
// KEY UPDATE absorbs. Retrying cannot help until an operator widens the column.
bool is_autoincrement_exhaustion(unsigned code, std::string_view message);

// ER_STATEMENT_TIMEOUT: a statement passed its max_statement_time (the reads of HTTP
// requests are limited, db/sql_text.hpp time_limited).
inline constexpr unsigned statement_timeout_code = 1969;

class db_error : public std::runtime_error {
 public:
  // `code` is the server or client error number; 0 for errors of our own (schema checks).
  db_error(unsigned code, const std::string& message, bool fatal_override = false);

  unsigned code() const { return code_; }
  error_kind kind() const { return kind_of(code_); }
  bool fatal() const { return fatal_; }
  bool data_error() const { return is_data_error(code_); }
  // A statement too large for the server's max_allowed_packet: the same statement can
  // never pass, a smaller one can (the batch is split). CR_NET_PACKET_TOO_LARGE, raised
  // by connection before it sends anything; the server's own ER_NET_PACKET_TOO_LARGE
  // closes the connection and counts as connection_lost() (the next connection reads
  // the new max_allowed_packet and refuses the statement itself).
  bool too_large() const { return code_ == 2020; }
  // ER_NO_SUCH_TABLE: the statement named a table the database does not have.
  bool no_such_table() const { return code_ == 1146; }
  // ER_DUP_ENTRY: an insert met a row of its key (a guard's row already there).
  bool duplicate_key() const { return code_ == 1062; }
  // A read stopped at its time limit (max_statement_time): the database is there, the
  // read was too slow.
  bool statement_timed_out() const { return code_ == statement_timeout_code; }
  // An AUTO_INCREMENT id column at the end of its range (is_autoincrement_exhaustion).
  bool autoincrement_exhausted() const { return is_autoincrement_exhaustion(code_, what()); }
  // The connection is unusable after this error and must be discarded.
  bool connection_lost() const { return kind() == error_kind::connection; }

 private:
  unsigned code_;
  bool fatal_;
};

}  // namespace slotted::db
