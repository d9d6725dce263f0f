#pragma once
// A throwaway PostgreSQL for integration tests, the twin of mariadb_server.hpp: a copy of
// a data dir made once by initdb, in a temp dir; `postgres` on a unix socket in that dir
// and a free loopback port, started directly (not by pg_ctl) so that its pid is ours, in
// a process group of its own, and dies with the test process (PR_SET_PDEATHSIG).
//
// PostgreSQL refuses to run as root and the suite runs as root: the server then runs as
// the Debian package's `postgres` user (`nobody` without it), which owns the temp dir.
// Clients connect as role `postgres` over the socket or TCP (trust authentication).

#include <sys/types.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "db/connection.hpp"

struct pg_conn;  // libpq's PGconn (libpq-fe.h), which only postgres_server.cpp includes

namespace slotted::test {

// Where the server's binaries are: $SLOTTED_PG_BINDIR, else Debian's
// /usr/lib/postgresql/15/bin; empty when there is no `postgres` binary there.
std::string postgres_bindir();

// A certificate and its key for the server to serve TLS with (support/tls_files.hpp).
struct server_certificate {
  std::string cert_file;
  std::string key_file;
};

class postgres_server {
 public:
  // A libpq connection (PGconn) that closes itself; throws on failure, with libpq's message.
  class connection {
   public:
    // As role postgres; `host` is a socket directory or an address.
    connection(const std::string& host, std::uint16_t port, const std::string& database);
    ~connection();
    connection(connection&&) noexcept;
    connection& operator=(connection&&) = delete;
    // Runs `sql`; throws std::runtime_error, with the server's message, unless it succeeds.
    void execute(const std::string& sql);
    // The first column of the first row as a number (0 for none or NULL).
    std::int64_t query_int(const std::string& sql);

   private:
    ::pg_conn* conn_ = nullptr;
  };

  // Installs and starts; throws std::runtime_error on failure. `extra_args` go to
  // `postgres` after the defaults (e.g. `-c`, `name=value`). With `tls`, the server
  // serves TLS with a copy of that certificate and key (plaintext stays allowed).
  explicit postgres_server(std::vector<std::string> extra_args = {},
                           std::optional<server_certificate> tls = std::nullopt);
  ~postgres_server();
  postgres_server(const postgres_server&) = delete;
  postgres_server& operator=(const postgres_server&) = delete;

  // The directory of the server's socket (libpq's `host` for a unix socket).
  const std::string& socket_dir() const { return dir_; }
  std::uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }

  // A new, empty database; returns its name.
  std::string create_database();
  // Over the unix socket, or over TCP on 127.0.0.1 with `tcp`.
  connection connect(const std::string& database = "postgres", bool tcp = false) const;
  std::int64_t query_int(const std::string& database, const std::string& sql) const;
  // What the daemon's driver connects with (db/connection.hpp): as role postgres, over
  // the socket, or over TCP to 127.0.0.1 without TLS with `tcp`.
  db::connect_options options(const std::string& database, bool tcp = false) const;

  // Stops (SIGINT, a fast shutdown), or with `hard` SIGKILLs the postmaster and every
  // backend at once (a postmaster killed alone leaves backends that may still answer, and
  // hold its shared memory so that the next start refuses to run); waits until they are
  // gone.
  void stop(bool hard = false);
  // Starts again on the same data dir, socket and port; waits until it accepts.
  void start();
  bool running() const { return pid_ > 0; }

 private:
  std::vector<std::string> extra_args_;
  std::string bindir_;
  std::string dir_;
  std::uint16_t port_ = 0;
  pid_t pid_ = -1;
  int databases_ = 0;
};

// One server per test executable, started on first use.
postgres_server& shared_postgres();

// scripts/test sets SLOTTED_REQUIRE_POSTGRESQL=1: there, missing binaries are a failure,
// never a silent skip.
#define SKIP_WITHOUT_POSTGRESQL()                                                    \
  do {                                                                               \
    if (::slotted::test::postgres_bindir().empty()) {                                \
      const char* required = std::getenv("SLOTTED_REQUIRE_POSTGRESQL");              \
      if (required != nullptr && std::string{required} == "1")                       \
        FAIL() << "no PostgreSQL server binaries, and SLOTTED_REQUIRE_POSTGRESQL=1"; \
      GTEST_SKIP() << "no PostgreSQL server binaries";                               \
    }                                                                                \
  } while (false)

}  // namespace slotted::test
