#include "support/daemon_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "app/application.hpp"
#include "db/repository.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {

namespace {
config::daemon_config test_config_without_server() {
  config::daemon_config cfg;
  cfg.instance_id = "test";
  cfg.listen_address = "127.0.0.1";
  cfg.listen_port = 0;
  cfg.http.threads = 2;
  cfg.mysql.connect_timeout = std::chrono::seconds(2);
  cfg.accept_undeclared_types = true;
  cfg.shards = 16;
  cfg.flush.interval = std::chrono::milliseconds(200);
  cfg.flush.max_retry_backoff = std::chrono::milliseconds(500);
  cfg.shutdown_timeout = std::chrono::seconds(20);
  return cfg;
}

const std::string daemon_yaml_head = "listen: {address: 127.0.0.1, port: 0}\nhttp: {threads: 2}\n";
}  // namespace

config::daemon_config test_config(const mariadb_server& server, const std::string& database) {
  auto cfg = test_config_without_server();
  cfg.mysql.socket = server.socket();
  cfg.mysql.user = "root";
  cfg.mysql.database = database;
  return cfg;
}

config::daemon_config test_config(const db_server& server, const std::string& database) {
  auto cfg = test_config_without_server();
  server.configure(cfg.mysql, database);
  return cfg;
}

void migrate(const mariadb_server& server, const std::string& database, const std::string& table) {
  auto conn = server.connect(database);
  db::migrate(conn, table);
}

void migrate(const db_server& server, const std::string& database, const std::string& table) {
  auto conn = server.connect(database);
  db::migrate(conn, table);
}

void create_seed_table(const mariadb_server& server, const std::string& database,
                       std::uint64_t auto_increment) {
  server.connect(database).execute(
      "CREATE TABLE slotted_counters (id INT AUTO_INCREMENT PRIMARY KEY, record_type INT, "
      "record_id INT, slot INT, count INT, UNIQUE KEY (record_type, record_id, slot))" +
      (auto_increment > 0 ? " AUTO_INCREMENT=" + std::to_string(auto_increment) : std::string()));
}

void create_seed_table(const db_server& server, const std::string& database,
                       std::uint64_t auto_increment) {
  if (server.engine() == db::engine::mariadb) {
    create_seed_table(shared_mariadb(), database, auto_increment);
    return;
  }
  auto conn = server.connect(database);
  conn.execute(
      "CREATE TABLE slotted_counters (id serial PRIMARY KEY, record_type integer, record_id "
      "integer, slot integer, count integer, UNIQUE (record_type, record_id, slot))");
  if (auto_increment > 0)
    conn.execute("ALTER SEQUENCE slotted_counters_id_seq RESTART WITH " +
                 std::to_string(auto_increment));
}

std::string migrated_database(mariadb_server& server) {
  const auto database = server.create_database();
  migrate(server, database);
  return database;
}

std::string migrated_database(db_server& server) {
  const auto database = server.create_database();
  migrate(server, database);
  return database;
}

std::string daemon_yaml(const mariadb_server& server, const std::string& database,
                        const std::string& rest, const std::string& mysql_extra) {
  return daemon_yaml_head + "mysql: {socket: " + server.socket() +
         ", user: root, database: " + database + (mysql_extra.empty() ? "" : ", " + mysql_extra) +
         "}\n" + rest;
}

std::string daemon_yaml(const db_server& server, const std::string& database,
                        const std::string& rest, const std::string& extra) {
  return daemon_yaml_head + server.config_section(database, extra) + rest;
}

int run_binary(const std::string& yaml, const std::string& flags, std::string& output) {
  const std::string dir = make_temp_dir("check");
  const std::string cfg = dir + "/c.yaml", out = dir + "/out";
  std::ofstream(cfg) << yaml;
  // Bounded: a binary that wrongly starts serving instead of exiting fails the test.
  const int status = std::system((std::string("timeout -s KILL 120 ") + SLOTTED_DAEMON_BINARY +
                                  " --config " + cfg + " " + flags + " >" + out + " 2>&1")
                                     .c_str());
  std::ifstream in(out);
  output.assign(std::istreambuf_iterator<char>(in), {});
  std::filesystem::remove_all(dir);
  return WEXITSTATUS(status);
}

in_process_daemon::in_process_daemon(config::daemon_config cfg)
    : app_(std::make_unique<application>(cfg)) {
  app_->start();
  runner_ = std::thread([this] { exit_code_ = app_->run_until_stopped(); });
  // The flusher's first cycle runs at start; a flush request is answered only by a
  // cycle that starts after it, so once this returns the first cycle is over and a
  // test controls every later flush (given a long flush.interval).
  std::map<std::string, std::string> headers;
  if (!cfg.http.auth_token.empty()) headers["Authorization"] = "Bearer " + cfg.http.auth_token;
  http_client(port()).request("POST", "/v1/flush", "", "", headers);
}

std::uint16_t in_process_daemon::port() const {
  return app_->port();
}
std::uint16_t in_process_daemon::metrics_port() const {
  return app_->metrics_port();
}

in_process_daemon::~in_process_daemon() {
  stop();
}

int in_process_daemon::stop() {
  if (runner_.joinable()) {
    app_->request_stop();
    runner_.join();
  }
  return exit_code_;
}

daemon_process::daemon_process(const std::string& yaml, std::size_t file_size_limit,
                               bool journal_stream, const std::vector<passed_fd>& passed,
                               const std::vector<std::string>& extra_args) {
  dir_ = make_temp_dir("daemon");
  std::ofstream(dir_ + "/config.yaml") << yaml;
  const std::string log_path = dir_ + "/daemon.log";
  // Everything the child needs is formed before the fork: the test process may have other
  // threads allocating (load clients, a log writer), and the child of a multithreaded
  // process may call only async-signal-safe functions until it execs (see spawn_process).
  const std::string config = dir_ + "/config.yaml";
  std::vector<const char*> argv{SLOTTED_DAEMON_BINARY, "--config", config.c_str()};
  for (const auto& a : extra_args) argv.push_back(a.c_str());
  argv.push_back(nullptr);
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) throw std::runtime_error("cannot open " + log_path);
  // The environment: this process's, without what the test decides. A test run inside a
  // unit with StateDirectory= must not put every test daemon's WAL in that one directory
  // (wal.dir's default); a test that wants one names it.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view v(*e);
    if (!v.starts_with("STATE_DIRECTORY=") && !v.starts_with("JOURNAL_STREAM=") &&
        !v.starts_with("LISTEN_"))
      env.emplace_back(v);
  }
  if (const char* state = getenv("SLOTTED_TEST_STATE_DIRECTORY"))
    env.push_back(std::string("STATE_DIRECTORY=") + state);
  struct stat st {};
  if (journal_stream && fstat(log_fd, &st) == 0)
    env.push_back("JOURNAL_STREAM=" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino));
  // LISTEN_PID is the child's own pid: written by the child into this buffer.
  char listen_pid[32] = "LISTEN_PID=";
  constexpr std::size_t listen_pid_prefix = 11;
  if (!passed.empty()) {
    std::string names;
    for (std::size_t i = 0; i < passed.size(); ++i) names += (i == 0 ? "" : ":") + passed[i].name;
    env.push_back("LISTEN_FDS=" + std::to_string(passed.size()));
    env.push_back("LISTEN_FDNAMES=" + names);
  }
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  if (!passed.empty()) envp.push_back(listen_pid);
  envp.push_back(nullptr);
  std::vector<int> high(passed.size(), -1);
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(log_fd, STDERR_FILENO);
    if (file_size_limit > 0) {
      const rlimit lim{file_size_limit, file_size_limit};
      setrlimit(RLIMIT_FSIZE, &lim);
    }
    if (!passed.empty()) {
      // Out of the way first (the caller's descriptors may be 3, 4, ...), then in place;
      // dup2 leaves close-on-exec off.
      for (std::size_t i = 0; i < passed.size(); ++i)
        high[i] = fcntl(passed[i].fd, F_DUPFD_CLOEXEC, 100);
      for (std::size_t i = 0; i < passed.size(); ++i) {
        if (high[i] < 0 || dup2(high[i], 3 + static_cast<int>(i)) < 0) _exit(126);
      }
      char digits[20];
      int n = 0;
      for (pid_t p = getpid(); p > 0; p /= 10) digits[n++] = static_cast<char>('0' + p % 10);
      std::size_t at = listen_pid_prefix;
      while (n > 0) listen_pid[at++] = digits[--n];
      listen_pid[at] = '\0';
    }
    execve(SLOTTED_DAEMON_BINARY, const_cast<char* const*>(argv.data()), envp.data());
    _exit(127);
  }
  ::close(log_fd);
  if (pid_ < 0) throw std::runtime_error("fork failed");
  // The port of the first TCP listener; none when it listens on Unix sockets only.
  const std::regex listening("listening on [0-9.]+:([0-9]+)");
  const bool started = eventually(
      [&] {
        std::smatch m;
        const std::string text = log();
        if (text.find("slotted-counterd listening on") != std::string::npos) {
          if (std::regex_search(text, m, listening)) {
            port_ = static_cast<std::uint16_t>(std::stoi(m[1]));
          }
          return true;
        }
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          throw std::runtime_error("daemon exited at start with status " + std::to_string(status) +
                                   ": " + log());
        }
        return false;
      },
      std::chrono::seconds(30), std::chrono::milliseconds(20));
  if (!started) throw std::runtime_error("daemon did not start listening: " + log());
}

daemon_process::~daemon_process() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

unsigned daemon_process::settle() {
  return http_client(port()).request("POST", "/v1/flush").status;
}

void daemon_process::signal(int signo) {
  ::kill(pid_, signo);
}

int daemon_process::wait(std::chrono::milliseconds timeout) {
  int status = 0;
  const bool exited = eventually([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, timeout,
                                 std::chrono::milliseconds(10));
  if (!exited) return -1000;
  pid_ = -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return -WTERMSIG(status);
}

void daemon_process::write_config(const std::string& yaml) {
  // Written aside and renamed, so the daemon never reads half a file.
  std::ofstream(dir_ + "/config.yaml.new") << yaml;
  std::filesystem::rename(dir_ + "/config.yaml.new", dir_ + "/config.yaml");
}

std::string daemon_process::log() const {
  std::ifstream in(dir_ + "/daemon.log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace slotted::test
