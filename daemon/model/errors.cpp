#include "model/errors.hpp"

#include <errmsg.h>
#include <mysqld_error.h>

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

error_kind kind_of(unsigned code) {
  switch (code) {
    case ER_LOCK_DEADLOCK:  // 1213
      return error_kind::deadlock;
    case ER_LOCK_WAIT_TIMEOUT:  // 1205
      return error_kind::lock_wait_timeout;
    case CR_CONNECTION_ERROR:      // 2002
    case CR_CONN_HOST_ERROR:       // 2003
    case CR_SERVER_GONE_ERROR:     // 2006
    case CR_SERVER_LOST:           // 2013
    case CR_SERVER_LOST_EXTENDED:  // 2055
    case CR_COMMANDS_OUT_OF_SYNC:  // 2014: the protocol state is unknown
    case ER_CON_COUNT_ERROR:       // 1040 too many connections
    case ER_SERVER_SHUTDOWN:       // 1053
    case ER_CONNECTION_KILLED:     // 1927
    case ER_QUERY_INTERRUPTED:     // 1317
    case 1152:                     // ER_ABORTING_CONNECTION
    case 4031:                     // client disconnected for inactivity
    // The server refused a packet above its max_allowed_packet and closed the connection.
    case ER_NET_PACKET_TOO_LARGE:  // 1153
    // Galera: the node is not part of the primary component or not Synced ("WSREP has
    // not yet prepared node for application use"); another node may take the write.
    case ER_UNKNOWN_COM_ERROR:  // 1047
    // Galera: the node lost the cluster during COMMIT; the outcome is unknown until
    // the ledger is read again.
    case ER_ERROR_DURING_COMMIT:  // 1180
    // A read-only server (a replica after a switchover): this host cannot take writes.
    case ER_OPTION_PREVENTS_STATEMENT:  // 1290
    case ER_READ_ONLY_MODE:             // 1836
      return error_kind::connection;
    case CR_SSL_CONNECTION_ERROR:  // 2026: handshake or certificate check failed
      return error_kind::tls;
    default:
      return error_kind::other;
  }
}

bool is_fatal(unsigned code) {
  switch (code) {
    case ER_ACCESS_DENIED_ERROR:        // 1045
    case ER_DBACCESS_DENIED_ERROR:      // 1044
    case ER_TABLEACCESS_DENIED_ERROR:   // 1142
    case ER_COLUMNACCESS_DENIED_ERROR:  // 1143
    case ER_BAD_DB_ERROR:               // 1049
    case ER_NO_SUCH_TABLE:              // 1146
    case ER_BAD_FIELD_ERROR:            // 1054
    case ER_PARSE_ERROR:                // 1064
    case ER_WRONG_VALUE_COUNT_ON_ROW:   // 1136
      return true;
    default:
      return false;
  }
}

bool is_data_error(unsigned code) {
  switch (code) {
    case ER_WARN_DATA_OUT_OF_RANGE:           // 1264
    case ER_DATA_OUT_OF_RANGE:                // 1690 (BIGINT overflow)
    case ER_TRUNCATED_WRONG_VALUE_FOR_FIELD:  // 1366
    case ER_TRUNCATED_WRONG_VALUE:            // 1292
    case ER_DATA_TOO_LONG:                    // 1406
    case ER_BAD_NULL_ERROR:                   // 1048
      return true;
    default:
      return false;
  }
}

bool is_autoincrement_exhaustion(unsigned code, std::string_view message) {
  switch (code) {
    case 167:                     // HA_ERR_AUTOINC_ERANGE: out of range value for column
    case ER_AUTOINC_READ_FAILED:  // 1467
      return true;
    case ER_DUP_ENTRY:  // 1062
      return message.find("for key 'PRIMARY'") != std::string_view::npos;
    default:
      return false;
  }
}

db_error::db_error(unsigned code, const std::string& message, bool fatal_override)
    : std::runtime_error(message), code_(code), fatal_(fatal_override || is_fatal(code)) {}

}  // namespace slotted::db
