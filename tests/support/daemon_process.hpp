#pragma once
// Runs the daemon for integration tests: in-process (an application object on its own
// thread) or as the real binary in a child process.

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "support/db_server.hpp"
#include "support/mariadb_server.hpp"

namespace slotted {
class application;  // app/application.hpp: parsed only by daemon_process.cpp
}

namespace slotted::test {

// A config for tests: loopback port 0, the shared server's socket, the given database,
// every type accepted, a short flush interval.
config::daemon_config test_config(const mariadb_server& server, const std::string& database);
config::daemon_config test_config(const db_server& server, const std::string& database);

// A new database with the daemon's schema in it; returns its name.
std::string migrated_database(mariadb_server& server);
std::string migrated_database(db_server& server);

// The YAML every test daemon starts from (loopback port 0, 2 HTTP threads, the shared
// server's socket, `database`, then `mysql_extra` keys such as "pool_size: 5"), followed
// by `rest`.
std::string daemon_yaml(const mariadb_server& server, const std::string& database,
                        const std::string& rest, const std::string& mysql_extra = "");
std::string daemon_yaml(const db_server& server, const std::string& database,
                        const std::string& rest, const std::string& extra = "");

// Creates the schema in `database` with the daemon's own migration.
void migrate(const mariadb_server& server, const std::string& database,
             const std::string& table = "slotted_counters");
void migrate(const db_server& server, const std::string& database,
             const std::string& table = "slotted_counters");

// Runs the built binary on `yaml` with `flags` (e.g. "--check-config") to its end;
// returns its exit code (137 when killed after 120 s) and leaves stdout and stderr in
// `output`.
int run_binary(const std::string& yaml, const std::string& flags, std::string& output);

// The seed's table as `slotted_counters`: AUTO_INCREMENT id + UNIQUE key, INT columns;
// `auto_increment` > 0 sets the next id (e.g. near the INT maximum).
void create_seed_table(const mariadb_server& server, const std::string& database,
                       std::uint64_t auto_increment = 0);
// PostgreSQL's twin: a serial id, integer columns.
void create_seed_table(const db_server& server, const std::string& database,
                       std::uint64_t auto_increment = 0);

class in_process_daemon {
 public:
  // Starts and returns once the flusher's first cycle (run at start) is over.
  explicit in_process_daemon(config::daemon_config cfg);
  ~in_process_daemon();  // stops if still running

  std::uint16_t port() const;
  std::uint16_t metrics_port() const;
  // Graceful stop; returns run_until_stopped()'s exit code.
  int stop();

 private:
  std::unique_ptr<application> app_;
  std::thread runner_;
  int exit_code_ = -1;
};

// A listening socket handed to the daemon as systemd does (socket activation): at
// descriptor 3, 4, ... with LISTEN_FDS, LISTEN_PID and LISTEN_FDNAMES set.
struct passed_fd {
  int fd = -1;
  std::string name;
};

class daemon_process {
 public:
  // Writes `yaml` to a temp file and starts the built binary on it; waits for its
  // "listening on" log line and reads the port from it.
  // `file_size_limit` (bytes) sets RLIMIT_FSIZE for the daemon: a disk that fills up.
  // `journal_stream`: JOURNAL_STREAM names the log file's device and inode, as when
  // systemd connects stderr to journald. `passed`: sockets passed as systemd passes
  // them (the caller keeps its own descriptors, as systemd does). `extra_args` follow
  // `--config FILE` on its command line. Its $STATE_DIRECTORY is unset, or
  // $SLOTTED_TEST_STATE_DIRECTORY when that is set.
  explicit daemon_process(const std::string& yaml, std::size_t file_size_limit = 0,
                          bool journal_stream = false, const std::vector<passed_fd>& passed = {},
                          const std::vector<std::string>& extra_args = {});
  ~daemon_process();

  std::uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  // Returns once a flush cycle started after the call is over, with its HTTP status.
  // The first cycle runs at start and takes whatever arrived by then: a test that
  // flushes only when it asks (a long flush.interval) calls this before its first
  // request, or that request may be flushed by the first cycle.
  unsigned settle();
  void signal(int signo);
  // Waits for exit; returns the exit code, or -signal when killed, or -1000 on timeout.
  int wait(std::chrono::milliseconds timeout);
  std::string log() const;
  // Replaces the config file the daemon was started on (for a SIGHUP reload).
  void write_config(const std::string& yaml);

 private:
  std::string dir_;
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
};

// How many times `needle` is in `text` (a daemon's log, say), overlaps counted.
inline std::size_t occurrences(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace slotted::test
