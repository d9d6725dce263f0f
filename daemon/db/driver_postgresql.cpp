#include "db/driver_postgresql.hpp"

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <vector>

namespace slotted::db {

namespace {
using clock = std::chrono::steady_clock;

const char* sslmode_of(tls_mode mode) {
  switch (mode) {
    case tls_mode::disabled:
      return "disable";
    case tls_mode::preferred:
      return "prefer";
    case tls_mode::required:
      return "require";
    case tls_mode::verify_ca:
      return "verify-ca";
    case tls_mode::verify_identity:
      return "verify-full";
  }
  return "prefer";
}

// SQLSTATEs by class (db/errors.hpp; PostgreSQL's Appendix A).
error_class class_of(std::string_view s) {
  if (s == "40P01" || s == "40001") return error_class::deadlock;  // or a serialization failure
  if (s == "55P03") return error_class::lock_wait_timeout;         // lock_not_available
  // Connection exceptions; the server shutting down or starting; too many connections;
  // a standby or a read-only transaction (a replica after a switchover: fail over); a
  // COMMIT whose outcome is unknown.
  if (s.starts_with("08") || s == "57P01" || s == "57P02" || s == "57P03" || s == "53300" ||
      s == "25006" || s == "40003")
    return error_class::connection;
  if (s == "23505") return error_class::duplicate_key;
  if (s == "2200H") return error_class::sequence_exhausted;
  // A row's own values the table cannot hold: out of range or overflow, too long, not a
  // number, not valid in the encoding, a NULL where none may be, a CHECK of the table (an
  // owning column's `download_count >= 0`). Only these: the batch
  // is split and the row refused, so a class-22 error of our own statement's making
  // (a division by zero, a bad date) is retried, never taken for a bad row.
  if (s == "22003" || s == "22001" || s == "22P02" || s == "22021" || s == "23502" || s == "23514")
    return error_class::data;
  if (s == "42P01") return error_class::no_such_table;
  if (s == "57014") return error_class::statement_timeout;  // statement_timeout, cancel
  // Access denied, bad login, syntax, unknown column, unknown database or schema, and a
  // key twice in one ON CONFLICT statement (a bug of ours, never fixed by a retry).
  if (s.starts_with("28") || s.starts_with("42") || s == "3D000" || s == "3F000" || s == "21000")
    return error_class::fatal;
  return error_class::other;
}

// A failed connect carries no SQLSTATE, only libpq's message: what an operator must fix
// is fatal, a TLS failure is tls, the rest is a connection to retry.
db_error connect_failure(const std::string& message, const connect_options& o) {
  const std::string text = "connect: " + message;
  // Checked first: a refusal of a TLS connection (no pg_hba.conf entry for it, a client
  // certificate refused) is the operator's to fix, not a handshake to retry.
  const auto has = [&](const char* words) { return message.find(words) != std::string::npos; };
  if (has("authentication failed") || has("pg_hba.conf") || has("no password supplied") ||
      has("permission denied for database") ||
      ((has("role \"") || has("database \"")) && has("does not exist")))
    return db_error(error_class::fatal, text, "28000");
  const bool tls_required =
      o.socket.empty() && o.tls.mode != tls_mode::disabled && o.tls.mode != tls_mode::preferred;
  if (tls_required && (message.find("SSL") != std::string::npos ||
                       message.find("certificate") != std::string::npos))
    return db_error(error_class::tls,
                    text + " (TLS failed, postgresql.tls.mode " + tls_mode_name(o.tls.mode) +
                        ": check postgresql.tls.ca_file and the server's certificate)",
                    "08006");
  return db_error(error_class::connection, text, "08001");
}

// Waits until `fd` is ready for `events` or `deadline` passes; false on the deadline.
bool wait_for(int fd, short events, clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // libpq's next call reports the socket's error
  }
}

void ignore_notice(void*, const char*) {}

struct connection_deleter {
  void operator()(PGconn* c) const { PQfinish(c); }
};

struct result_deleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using result_ptr = std::unique_ptr<PGresult, result_deleter>;

class postgresql_driver final : public driver {
 public:
  explicit postgresql_driver(const connect_options& o);
  postgresql_driver(const postgresql_driver&) = delete;
  postgresql_driver& operator=(const postgresql_driver&) = delete;

  void execute(std::string_view sql) override { run(sql); }
  std::vector<result_row> query(std::string_view sql) override;
  std::uint64_t affected_rows() const override { return affected_; }
  std::string tls_cipher() const override;
  bool in_transaction() const override;
  std::string quote(std::string_view text) override;
  std::string quote_bytes(std::string_view bytes) override;
  // PostgreSQL would take up to 1 GB (its allocation limit), but a batch that large
  // costs the server and us several copies of it in memory: batches are cut at 16 MiB,
  // MariaDB's default max_allowed_packet, less room for the message header.
  std::size_t max_statement_bytes() const override { return (std::size_t{16} << 20) - 1024; }
  // One string, so one implicit transaction (or within the caller's): when `select`
  // fails, the SET is rolled back with it; when it succeeds, RESET undoes it.
  std::vector<result_row> query_limited(std::string_view select,
                                        std::chrono::milliseconds limit) override {
    std::string sql = "SET statement_timeout = " + std::to_string(limit.count()) + "; ";
    sql.append(select).append("; RESET statement_timeout");
    return query(sql);
  }
  void ping() override { run("SELECT 1"); }
  void require_writable() override;
  bool error_aborts_transaction() const override { return true; }
  const dialect& sql() const override { return postgresql_dialect(); }
  void begin_read_snapshot() override {
    run("START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY");
  }

 private:
  result_ptr run(std::string_view sql);
  // The connection is gone (or in a state we do not drive): later calls fail at once.
  [[noreturn]] void gone(std::string message, const char* sqlstate = "08006");
  // gone(), with libpq's message.
  [[noreturn]] void lost(const std::string& what);
  std::unique_ptr<PGconn, connection_deleter> conn_;
  std::chrono::milliseconds io_timeout_;
  std::uint64_t affected_ = 0;
  bool broken_ = false;
  bool tls_ = false;
};

postgresql_driver::postgresql_driver(const connect_options& o) : io_timeout_(o.io_timeout) {
  const std::string port = std::to_string(o.port);
  const bool use_socket = !o.socket.empty();
  std::vector<const char*> keys, values;
  auto set = [&](const char* key, const std::string& value) {
    if (value.empty()) return;
    keys.push_back(key);
    values.push_back(value.c_str());
  };
  set("host", use_socket ? o.socket : o.host);
  set("port", port);
  set("user", o.user);
  set("password", o.password);
  set("dbname", o.database);
  const std::string sslmode = use_socket ? "disable" : sslmode_of(o.tls.mode);
  set("sslmode", sslmode);
  if (!use_socket) {
    // Only the verifying modes name the CA: given a root certificate, libpq verifies the
    // chain even in `require`, which promises encryption only.
    if (o.tls.mode == tls_mode::verify_ca || o.tls.mode == tls_mode::verify_identity)
      set("sslrootcert", o.tls.ca_file);
    set("sslcert", o.tls.cert_file);
    set("sslkey", o.tls.key_file);
  }
  const std::string encoding = "UTF8", name = "slotted-counterd";
  set("client_encoding", encoding);
  set("application_name", name);
  // A peer gone without a word (a partition, a host that froze) is noticed by TCP within
  // about a minute, on both sides: the server ends the backend and frees its locks.
  const std::string keepalive = "1", idle = "30", interval = "10", count = "3";
  if (!use_socket) {
    set("keepalives", keepalive);
    set("keepalives_idle", idle);
    set("keepalives_interval", interval);
    set("keepalives_count", count);
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);

  conn_.reset(PQconnectStartParams(keys.data(), values.data(), 0));
  if (conn_ == nullptr) throw db_error(error_class::other, "connect: libpq is out of memory");
  // Our own deadline: libpq's connect_timeout counts whole seconds, at least 2.
  const auto deadline = clock::now() + o.connect_timeout;
  PostgresPollingStatusType state =
      PQstatus(conn_.get()) == CONNECTION_BAD ? PGRES_POLLING_FAILED : PGRES_POLLING_WRITING;
  while (state != PGRES_POLLING_OK) {
    if (state == PGRES_POLLING_FAILED) throw connect_failure(PQerrorMessage(conn_.get()), o);
    // During a TLS handshake OpenSSL may hold bytes the socket no longer shows: slices.
    const auto until = sslmode == "disable"
                           ? deadline
                           : std::min(deadline, clock::now() + std::chrono::milliseconds(50));
    if (!wait_for(PQsocket(conn_.get()), state == PGRES_POLLING_READING ? POLLIN : POLLOUT,
                  until) &&
        clock::now() >= deadline) {
      throw db_error(
          error_class::connection,
          "connect: no answer within " + std::to_string(o.connect_timeout.count()) + " ms",
          "08001");
    }
    state = PQconnectPoll(conn_.get());
  }
  // libpq would print the server's notices ("relation already exists, skipping") on
  // stderr.
  PQsetNoticeProcessor(conn_.get(), ignore_notice, nullptr);
  // Sends never block (PQsendQuery would otherwise write a whole statement with no
  // bound while the server does not read): run() waits for the socket itself.
  if (PQsetnonblocking(conn_.get(), 1) != 0)
    throw db_error(error_class::connection, "connect: cannot make the connection non-blocking",
                   "08001");
  tls_ = PQsslInUse(conn_.get()) != 0;
  char* schema = PQescapeIdentifier(conn_.get(), o.schema.data(), o.schema.size());
  if (schema == nullptr) throw db_error(error_class::fatal, "connect: a bad schema name");
  const std::string path = std::string("SET search_path TO ") + schema;
  PQfreemem(schema);
  // UTC, as MariaDB's sessions (db/sql.hpp session_setup); READ COMMITTED, the default,
  // said; a lock wait that ends as lock_wait_timeout (retried), as InnoDB's 50 s do.
  // Literals as the dialect writes them: a backslash is a character, whatever the
  // database's or role's setting.
  run("SET standard_conforming_strings = on; SET TIME ZONE 'UTC'; SET SESSION CHARACTERISTICS AS "
      "TRANSACTION ISOLATION LEVEL "
      "READ COMMITTED; SET lock_timeout = '50s'; " +
      path);
  // A schema that does not exist, or that the role may not use, leaves none current:
  // every table would read as missing and --migrate would have nowhere to create them.
  const result_ptr current = run("SELECT current_schema()");
  if (current == nullptr || PQntuples(current.get()) != 1 || PQgetisnull(current.get(), 0, 0))
    throw db_error(error_class::fatal,
                   "connect: schema \"" + o.schema +
                       "\" does not exist or the role may not use it (postgresql.schema)",
                   "3F000");
  // A backend whose client closed the connection (a statement we stopped waiting for)
  // notices within a second and ends, freeing its locks for the retry. PostgreSQL 14
  // and later, where the platform supports it: nothing is lost without it.
  if (PQserverVersion(conn_.get()) >= 140000) {
    try {
      run("SET client_connection_check_interval = '1s'");
    } catch (const db_error& e) {
      if (e.connection_lost()) throw;
    }
  }
}

void postgresql_driver::gone(std::string message, const char* sqlstate) {
  broken_ = true;
  throw db_error(error_class::connection, std::move(message), sqlstate);
}

void postgresql_driver::lost(const std::string& what) {
  std::string message = PQerrorMessage(conn_.get());
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  gone(what + ": " + message);
}

result_ptr postgresql_driver::run(std::string_view sql) {
  if (broken_) gone("query: the connection was lost");
  affected_ = 0;
  // libpq sends a C string: a NUL would cut the statement short, silently.
  if (sql.find('\0') != std::string_view::npos)
    throw db_error(error_class::data, "query: a statement with a NUL byte; not sent");
  const std::string text = postgresql_text(sql);
  if (PQsendQuery(conn_.get(), text.c_str()) == 0) lost("query");
  const auto deadline = clock::now() + io_timeout_;
  const int fd = PQsocket(conn_.get());
  // The non-blocking send: what is left goes out as the server reads.
  for (int r; (r = PQflush(conn_.get())) != 0;) {
    if (r < 0) lost("query");
    if (!wait_for(fd, POLLOUT | POLLIN, deadline))
      gone("query: the server did not take the statement within " +
           std::to_string(io_timeout_.count()) + " ms");
    if (PQconsumeInput(conn_.get()) == 0) lost("query");
  }
  // The last result with rows (a SELECT, or RETURNING), the first error, and the last
  // statement's command tag (for COMMIT) and row count.
  result_ptr rows, error;
  std::string tag;
  std::uint64_t affected = 0;
  for (;;) {
    while (PQisBusy(conn_.get()) != 0) {
      // Over TLS, OpenSSL may hold the rest of a record that the socket no longer
      // shows: poll in slices and let PQconsumeInput read what is pending.
      const auto until =
          tls_ ? std::min(deadline, clock::now() + std::chrono::milliseconds(50)) : deadline;
      if (!wait_for(fd, POLLIN, until) && clock::now() >= deadline)
        gone("query: no answer within " + std::to_string(io_timeout_.count()) + " ms");
      if (PQconsumeInput(conn_.get()) == 0) lost("query");
    }
    result_ptr r(PQgetResult(conn_.get()));
    if (r == nullptr) break;
    const auto status = PQresultStatus(r.get());
    if (status == PGRES_COPY_IN || status == PGRES_COPY_OUT || status == PGRES_COPY_BOTH) {
      // Never sent by the daemon; the protocol is now in a state we do not drive.
      gone("query: the server started a COPY", "08P01");
    }
    if (status == PGRES_FATAL_ERROR || status == PGRES_BAD_RESPONSE ||
        status == PGRES_NONFATAL_ERROR) {
      if (error == nullptr) error = std::move(r);
    } else {
      tag = PQcmdStatus(r.get());
      const char* tuples = PQcmdTuples(r.get());
      affected = tuples != nullptr && *tuples != '\0' ? std::stoull(tuples) : 0;
      if (status == PGRES_TUPLES_OK) rows = std::move(r);
    }
  }
  if (error != nullptr) {
    const char* state = PQresultErrorField(error.get(), PG_DIAG_SQLSTATE);
    // The message alone, as MariaDB's reads: no "ERROR:  " before it, no statement after.
    const char* primary = PQresultErrorField(error.get(), PG_DIAG_MESSAGE_PRIMARY);
    std::string message = primary != nullptr ? primary : PQresultErrorMessage(error.get());
    while (!message.empty() && message.back() == '\n') message.pop_back();
    // No SQLSTATE, a FATAL error (the backend ends: an idle timeout, its database
    // dropped) or a connection libpq now reports bad: the server went away.
    const char* severity = PQresultErrorField(error.get(), PG_DIAG_SEVERITY_NONLOCALIZED);
    const bool ends = severity != nullptr && (std::string_view(severity) == "FATAL" ||
                                              std::string_view(severity) == "PANIC");
    if (state == nullptr || ends || PQstatus(conn_.get()) == CONNECTION_BAD)
      gone("query: " + message, state ? state : "08006");
    // 23514 is a CHECK's (a row's value: data) or a partition's (no partition for the
    // row: held and retried, never a row dropped); only a CHECK names its constraint.
    if (std::string_view(state) == "23514" &&
        PQresultErrorField(error.get(), PG_DIAG_CONSTRAINT_NAME) == nullptr)
      throw db_error(error_class::other, "query: " + message, state);
    throw postgresql_error(state, "query: " + message);
  }
  affected_ = affected;
  // A COMMIT of a transaction that had failed answers ROLLBACK without an error: say it.
  if (tag == "ROLLBACK" && (sql.starts_with("COMMIT") || sql.starts_with("commit")))
    throw db_error(error_class::other,
                   "query: COMMIT rolled back: the transaction had failed before it", "25P02");
  return rows;
}

std::vector<result_row> postgresql_driver::query(std::string_view sql) {
  const result_ptr r = run(sql);
  std::vector<result_row> rows;
  if (r == nullptr || PQresultStatus(r.get()) != PGRES_TUPLES_OK) return rows;
  const int n = PQntuples(r.get()), fields = PQnfields(r.get());
  rows.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    result_row out(static_cast<std::size_t>(fields));
    for (int f = 0; f < fields; ++f) {
      if (PQgetisnull(r.get(), i, f) == 0)
        out[static_cast<std::size_t>(f)] = std::string(
            PQgetvalue(r.get(), i, f), static_cast<std::size_t>(PQgetlength(r.get(), i, f)));
    }
    rows.push_back(std::move(out));
  }
  return rows;
}

std::string postgresql_driver::tls_cipher() const {
  if (PQsslInUse(conn_.get()) == 0) return {};
  const char* cipher = PQsslAttribute(conn_.get(), "cipher");
  return cipher == nullptr ? std::string() : std::string(cipher);
}

// A standby (pg_is_in_recovery) or a server whose sessions start read-only
// (default_transaction_read_only, as after a switchover that fenced the old primary).
void postgresql_driver::require_writable() {
  const result_ptr r =
      run("SELECT pg_is_in_recovery(), current_setting('default_transaction_read_only')");
  if (r == nullptr || PQntuples(r.get()) != 1 || PQnfields(r.get()) != 2) return;
  const std::string_view recovery = PQgetvalue(r.get(), 0, 0);
  const std::string_view read_only = PQgetvalue(r.get(), 0, 1);
  if (recovery == "t")
    throw db_error(error_class::connection, "the server is a standby; treated as unreachable",
                   "25006");
  if (read_only == "on")
    throw db_error(error_class::connection, "the server is read-only; treated as unreachable",
                   "25006");
}

bool postgresql_driver::in_transaction() const {
  return broken_ || PQtransactionStatus(conn_.get()) != PQTRANS_IDLE;
}

// bytea's hex input ('\x...'): a text literal would pass a backslash to bytea's escape
// format, and a byte sequence that is not UTF-8 would be refused as text.
std::string postgresql_driver::quote_bytes(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out = "'\\x";
  out.reserve(bytes.size() * 2 + 12);
  for (const unsigned char ch : bytes) {
    out.push_back(digits[ch >> 4]);
    out.push_back(digits[ch & 15]);
  }
  out += "'::bytea";
  return out;
}

std::string postgresql_driver::quote(std::string_view text) {
  if (text.find('\0') != std::string_view::npos)
    throw db_error(error_class::data, "quote: a value with a NUL byte");
  char* quoted = PQescapeLiteral(conn_.get(), text.data(), text.size());
  if (quoted == nullptr)
    throw db_error(error_class::data, std::string("quote: ") + PQerrorMessage(conn_.get()));
  std::string out(quoted);
  PQfreemem(quoted);
  return out;
}
}  // namespace

db_error postgresql_error(std::string_view sqlstate, const std::string& message) {
  return db_error(class_of(sqlstate), message, std::string(sqlstate));
}

std::unique_ptr<driver> connect_postgresql(const connect_options& options) {
  return std::make_unique<postgresql_driver>(options);
}

}  // namespace slotted::db
