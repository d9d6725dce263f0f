#pragma once
// The MariaDB/MySQL driver, through MariaDB Connector/C: the only code that includes the
// client library's headers, and the one place that knows its error numbers.

#include <memory>
#include <string>

#include "db/connection.hpp"
#include "db/driver.hpp"
#include "db/errors.hpp"

namespace slotted::db {

// Connects, sets READ COMMITTED (fewer gap locks between concurrent upserts), a strict
// sql_mode (STRICT_ALL_TABLES: out-of-range values are errors, whatever the server's
// global mode), UTC and autocommit, and reads the server's @@max_allowed_packet. Throws
// db_error; a failure after the connect closes the handle.
std::unique_ptr<driver> connect_mariadb(const connect_options& options);

// A server or client error number and its message, classified (db/errors.hpp).
db_error mariadb_error(unsigned code, const std::string& message);

}  // namespace slotted::db
