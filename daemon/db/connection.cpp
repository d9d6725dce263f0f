#include "db/connection.hpp"

#include <errmsg.h>
#include <mysql.h>

#include <utility>

#include "db/errors.hpp"

namespace slotted::db {

namespace {
unsigned seconds_at_least_one(std::chrono::milliseconds d) {
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(d).count();
  return s < 1 ? 1u : static_cast<unsigned>(s);
}
}  // namespace

bool initialize_client_library() {
  return mysql_library_init(0, nullptr, nullptr) == 0;
}

connection::connection(const connect_options& o) {
  handle_ = mysql_init(nullptr);
  if (handle_ == nullptr) throw db_error(CR_OUT_OF_MEMORY, "mysql_init failed");
  const unsigned connect_secs = seconds_at_least_one(o.connect_timeout);
  const unsigned io_secs = seconds_at_least_one(o.io_timeout);
  mysql_optionsv(handle_, MYSQL_OPT_CONNECT_TIMEOUT, &connect_secs);
  mysql_optionsv(handle_, MYSQL_OPT_READ_TIMEOUT, &io_secs);
  mysql_optionsv(handle_, MYSQL_OPT_WRITE_TIMEOUT, &io_secs);
  const my_bool no_reconnect = 0;  // a silent reconnect would hide a lost transaction
  mysql_optionsv(handle_, MYSQL_OPT_RECONNECT, &no_reconnect);
  mysql_optionsv(handle_, MYSQL_SET_CHARSET_NAME, "utf8mb4");
  const bool use_socket = !o.socket.empty();
  if (!use_socket) {
    const unsigned protocol = MYSQL_PROTOCOL_TCP;
    mysql_optionsv(handle_, MYSQL_OPT_PROTOCOL, &protocol);
  }
  if (mysql_real_connect(handle_, use_socket ? nullptr : o.host.c_str(), o.user.c_str(),
                         o.password.c_str(), o.database.c_str(), use_socket ? 0 : o.port,
                         use_socket ? o.socket.c_str() : nullptr, 0) == nullptr) {
    const unsigned code = mysql_errno(handle_);
    const std::string message = std::string("connect: ") + mysql_error(handle_);
    mysql_close(handle_);
    handle_ = nullptr;
    throw db_error(code, message);
  }
  try {
    execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
    // Strict whatever the server's global sql_mode: a value that does not fit its column
    // is an error (the flusher isolates and reports the row), never a silent clamp.
    execute(
        "SET SESSION sql_mode = "
        "'STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ZERO_DATE,NO_ENGINE_SUBSTITUTION'");
  } catch (...) {
    // The destructor does not run for a constructor that throws.
    mysql_close(handle_);
    handle_ = nullptr;
    throw;
  }
}

connection::~connection() {
  if (handle_ != nullptr) mysql_close(handle_);
}

connection::connection(connection&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)) {}

connection& connection::operator=(connection&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) mysql_close(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void connection::fail(std::string_view what) {
  throw db_error(mysql_errno(handle_), std::string(what) + ": " + mysql_error(handle_));
}

void connection::execute(std::string_view sql) {
  if (mysql_real_query(handle_, sql.data(), sql.size()) != 0) fail("query");
  // Statements run here return no rows; drain any result to keep the protocol in step.
  if (MYSQL_RES* res = mysql_store_result(handle_))
    mysql_free_result(res);
  else if (mysql_field_count(handle_) != 0)
    fail("store result");
}

std::vector<result_row> connection::query(std::string_view sql) {
  if (mysql_real_query(handle_, sql.data(), sql.size()) != 0) fail("query");
  MYSQL_RES* res = mysql_store_result(handle_);
  if (res == nullptr) {
    if (mysql_field_count(handle_) != 0) fail("store result");
    return {};
  }
  std::vector<result_row> rows;
  const unsigned fields = mysql_num_fields(res);
  while (MYSQL_ROW row = mysql_fetch_row(res)) {
    const unsigned long* lengths = mysql_fetch_lengths(res);
    result_row out(fields);
    for (unsigned i = 0; i < fields; ++i) {
      if (row[i] != nullptr) out[i] = std::string(row[i], lengths[i]);
    }
    rows.push_back(std::move(out));
  }
  mysql_free_result(res);
  return rows;
}

std::uint64_t connection::affected_rows() const {
  return mysql_affected_rows(handle_);
}

std::string connection::quote(std::string_view text) {
  std::string out(text.size() * 2 + 3, '\0');
  out[0] = '\'';
  const unsigned long n =
      mysql_real_escape_string(handle_, out.data() + 1, text.data(), text.size());
  out.resize(n + 1);
  out.push_back('\'');
  return out;
}

}  // namespace slotted::db
