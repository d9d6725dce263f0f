#pragma once
// The kinds of database error (the `kind` label of db_errors_total; README: Design,
// Failures): which error codes fall in each kind, and db_error itself, are db/'s
// (db/errors.hpp), which alone knows the client library's codes.

namespace slotted::db {

enum class error_kind { deadlock, lock_wait_timeout, connection, tls, other };
inline constexpr int error_kind_count = 5;

const char* kind_name(error_kind kind);

}  // namespace slotted::db
