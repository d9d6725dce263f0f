#pragma once
// The PostgreSQL driver, through libpq: the only code that includes <libpq-fe.h>, and
// the one place that knows SQLSTATEs. Statements go by the simple query protocol
// (PQsendQuery), never prepared, so that what the fault proxy sees is the statement's
// text; every wait is bounded by our own deadline (libpq has no read timeout, and its
// connect_timeout has a floor of 2 s).

#include <memory>
#include <string>
#include <string_view>

#include "db/connection.hpp"
#include "db/driver.hpp"
#include "db/errors.hpp"

namespace slotted::db {

// Connects (host/port over TCP, or `socket`, the directory of the server's socket),
// within connect_timeout; sets the session up: UTC, READ COMMITTED, search_path to
// options.schema, a lock_timeout so that a lock wait ends as a retryable error. Throws
// db_error.
std::unique_ptr<driver> connect_postgresql(const connect_options& options);

// A SQLSTATE and its message, classified (db/errors.hpp).
db_error postgresql_error(std::string_view sqlstate, const std::string& message);

}  // namespace slotted::db
