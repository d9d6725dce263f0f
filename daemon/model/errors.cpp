#include "model/errors.hpp"

namespace slotted::db {

const char* kind_name(error_kind kind) {
  switch (kind) {
    case error_kind::deadlock:
      return "deadlock";
    case error_kind::lock_wait_timeout:
      return "lock_wait_timeout";
    case error_kind::connection:
      return "connection";
    case error_kind::tls:
      return "tls";
    case error_kind::other:
      return "other";
  }
  return "other";
}

}  // namespace slotted::db
