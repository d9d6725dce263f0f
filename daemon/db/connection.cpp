#include "db/connection.hpp"

#include <algorithm>
#include <utility>

#include "db/driver_mariadb.hpp"
#include "db/driver_postgresql.hpp"

namespace slotted::db {

const char* tls_mode_name(tls_mode mode) {
  switch (mode) {
    case tls_mode::disabled:
      return "disabled";
    case tls_mode::preferred:
      return "preferred";
    case tls_mode::required:
      return "required";
    case tls_mode::verify_ca:
      return "verify_ca";
    case tls_mode::verify_identity:
      return "verify_identity";
  }
  return "preferred";
}

std::string endpoint::name() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

connection::connection(const connect_options& o)
    : driver_(o.kind == engine::postgresql ? connect_postgresql(o) : connect_mariadb(o)) {}

connection::connection(std::unique_ptr<driver> d) : driver_(std::move(d)) {}

connection::~connection() = default;
connection::connection(connection&& other) noexcept = default;
connection& connection::operator=(connection&& other) noexcept = default;

void connection::check_size(std::string_view sql) const {
  const std::size_t limit = driver_->max_statement_bytes();
  if (sql.size() <= limit) return;
  throw db_error(error_class::too_large, "query: a statement of " + std::to_string(sql.size()) +
                                             " bytes exceeds the longest the server takes (" +
                                             std::to_string(limit) +
                                             " bytes usable; max_allowed_packet on MariaDB); "
                                             "not sent");
}

void connection::execute(std::string_view sql) {
  check_size(sql);
  driver_->execute(sql);
}

std::vector<result_row> connection::query(std::string_view sql) {
  check_size(sql);
  return driver_->query(sql);
}

std::uint64_t connection::affected_rows() const {
  return driver_->affected_rows();
}

std::string connection::tls_cipher() const {
  return driver_->tls_cipher();
}

std::string connection::quote(std::string_view text) {
  return driver_->quote(text);
}

std::string connection::quote_bytes(std::string_view bytes) {
  return driver_->quote_bytes(bytes);
}

std::vector<result_row> connection::query_limited(std::string_view select,
                                                  std::chrono::milliseconds limit) {
  check_size(select);
  using std::chrono::milliseconds;
  return driver_->query_limited(select, std::clamp(limit, milliseconds(1), read_time_limit));
}

bool connection::in_transaction() const {
  return driver_ == nullptr || driver_->in_transaction();
}

void rollback_after(connection& conn, const db_error& e) noexcept {
  if (e.connection_lost()) return;
  try {
    conn.execute("ROLLBACK");
  } catch (...) {
  }
}

void rolled_back_on_throw(connection& conn, const std::function<void()>& work) {
  try {
    work();
  } catch (const db_error& e) {
    rollback_after(conn, e);
    throw;
  } catch (...) {
    try {
      conn.execute("ROLLBACK");
    } catch (const db_error&) {
    }
    throw;
  }
}

}  // namespace slotted::db
