#pragma once
// A throwaway MariaDB for integration tests: a copy of a data dir made once by
// mariadb-install-db, in a temp dir;
// mariadbd on a unix socket and a free loopback port, stopped by pid. Dies with the
// test process (PR_SET_PDEATHSIG).

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "db/connection.hpp"

namespace slotted::test {

class mariadb_server {
 public:
  // Installs and starts; throws std::runtime_error on failure. `extra_args` go to
  // mariadbd after the defaults (e.g. TLS settings).
  explicit mariadb_server(std::vector<std::string> extra_args = {});
  ~mariadb_server();

  const std::string& socket() const { return socket_; }
  std::uint16_t port() const { return port_; }

  // A new, empty database; returns its name.
  std::string create_database();
  db::connection connect(const std::string& database = "") const;
  std::int64_t query_int(const std::string& database, const std::string& sql) const;

  // Stops (SIGTERM, or SIGKILL when `hard`) and waits for the process to exit.
  void stop(bool hard = false);
  // Starts again on the same data dir, socket and port; waits until it accepts.
  void start();
  bool running() const { return pid_ > 0; }

 private:
  std::vector<std::string> extra_args_;
  std::string dir_;
  std::string socket_;
  std::uint16_t port_ = 0;
  pid_t pid_ = -1;
  int databases_ = 0;
};

// One server per test executable, started on first use.
mariadb_server& shared_mariadb();

std::uint16_t free_loopback_port();

// A user to run a spawned process as (PostgreSQL's server refuses to run as root).
struct run_as {
  uid_t uid;
  gid_t gid;
};

// Forks and execs `args` with stdout and stderr appended to `log_path`; the child dies
// with the test process (PR_SET_PDEATHSIG) and, with `own_group`, leads its own process
// group (so that what it spawns can be stopped with it); with `user`, it drops its
// supplementary groups and takes that uid and gid before it execs. Throws on fork failure.
pid_t spawn_process(const std::vector<std::string>& args, const std::string& log_path,
                    bool own_group = false, const run_as* user = nullptr);
// Waits for `pid` to exit; returns its wait status.
int wait_process(pid_t pid);

}  // namespace slotted::test
