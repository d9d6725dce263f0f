#include "db/errors.hpp"

#include <utility>

namespace slotted::db {

const char* class_name(error_class c) {
  switch (c) {
    case error_class::deadlock:
      return "deadlock";
    case error_class::lock_wait_timeout:
      return "lock_wait_timeout";
    case error_class::connection:
      return "connection";
    case error_class::tls:
      return "tls";
    case error_class::duplicate_key:
      return "duplicate_key";
    case error_class::duplicate_primary_key:
      return "duplicate_primary_key";
    case error_class::data:
      return "data";
    case error_class::too_large:
      return "too_large";
    case error_class::no_such_table:
      return "no_such_table";
    case error_class::statement_timeout:
      return "statement_timeout";
    case error_class::sequence_exhausted:
      return "sequence_exhausted";
    case error_class::fatal:
      return "fatal";
    case error_class::other:
      return "other";
  }
  return "other";
}

db_error::db_error(error_class c, const std::string& message, std::string native_code)
    : std::runtime_error(message), class_(c), native_(std::move(native_code)) {}

error_kind db_error::kind() const {
  switch (class_) {
    case error_class::deadlock:
      return error_kind::deadlock;
    case error_class::lock_wait_timeout:
      return error_kind::lock_wait_timeout;
    case error_class::connection:
      return error_kind::connection;
    case error_class::tls:
      return error_kind::tls;
    default:
      return error_kind::other;
  }
}

}  // namespace slotted::db
