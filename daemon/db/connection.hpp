#pragma once
// One MariaDB/MySQL connection (MariaDB Connector/C). Blocking: never call it from an
// HTTP I/O thread.
//
// Failures throw db_error carrying the server/client error number. After an error
// whose connection_lost() is true the connection must be dropped.
// Thread-safety: one thread at a time.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

typedef struct st_mysql MYSQL;

namespace slotted::db {

struct connect_options {
  std::string host = "127.0.0.1";
  std::uint16_t port = 3306;
  std::string socket;
  std::string user;
  std::string password;
  std::string database;
  std::chrono::milliseconds connect_timeout{5000};
  // Bounds a read or write on an established connection, so a silent peer cannot
  // hang the flusher forever.
  std::chrono::milliseconds io_timeout{60000};
};

// Once per process, before any thread uses a connection. Returns false on failure.
bool initialize_client_library();

using result_row = std::vector<std::optional<std::string>>;

class connection {
 public:
  // Connects, sets READ COMMITTED (fewer gap locks between concurrent upserts), a strict
  // sql_mode (STRICT_ALL_TABLES: out-of-range values are errors, whatever the server's
  // global mode) and autocommit on. Throws db_error; a failure after the connect closes
  // the handle.
  explicit connection(const connect_options& options);
  ~connection();
  connection(connection&& other) noexcept;
  connection& operator=(connection&& other) noexcept;
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  void execute(std::string_view sql);
  std::vector<result_row> query(std::string_view sql);
  std::uint64_t affected_rows() const;

  // A quoted SQL string literal for `text` ('...'), escaped for this connection.
  std::string quote(std::string_view text);

 private:
  [[noreturn]] void fail(std::string_view what);
  MYSQL* handle_ = nullptr;
};

}  // namespace slotted::db
