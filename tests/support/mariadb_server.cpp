#include "support/mariadb_server.hpp"

#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "model/errors.hpp"
#include "support/eventually.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {

pid_t spawn_process(const std::vector<std::string>& args, const std::string& log_path,
                    bool own_group, const run_as* user) {
  // Everything the child needs is made before the fork. A test process has other threads
  // (an in-process daemon, load clients), and the child of a multithreaded process may
  // call only async-signal-safe functions until it execs: a malloc there can wait forever
  // on a lock another thread held at the fork. It did: a mariadbd restarted under load
  // never started (DatabaseKilled.RepeatedSigkillUnderLoadKeepsTotalsExact, "did not
  // accept connections", nothing in its error.log).
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const bool has_path = args.at(0).find('/') != std::string::npos;
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) throw std::runtime_error("cannot open " + log_path);
  const pid_t parent = ::getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    ::close(log);
    throw std::runtime_error("fork failed");
  }
  if (pid == 0) {
    // A change of credentials clears the death signal: the user first, then the signal.
    // Another user may not enter the test's working directory (a clone under /root):
    // the child starts in /, as a daemon would.
    if (user != nullptr && (setgroups(0, nullptr) != 0 || setgid(user->gid) != 0 ||
                            setuid(user->uid) != 0 || chdir("/") != 0))
      _exit(126);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);  // the test process died before the signal was set
    if (own_group) setpgid(0, 0);
    dup2(log, STDOUT_FILENO);  // dup2 leaves close-on-exec off on the copies
    dup2(log, STDERR_FILENO);
    if (has_path) {
      execv(argv[0], argv.data());
    } else {
      execvp(argv[0], argv.data());  // a bare name (glibc searches PATH on the stack)
    }
    _exit(127);
  }
  if (own_group) setpgid(pid, pid);  // as the child does: whichever runs first
  ::close(log);
  return pid;
}

int wait_process(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

namespace {

// Test processes run side by side (ctest -j): a port is also claimed by a lock file that
// this process holds until it exits, so no other test process hands out the same port in
// the time between the bind probe and the server's own bind.
bool claim_port_across_processes(std::uint16_t port) {
  const std::string dir = "/tmp/slotted-test-ports-" + std::to_string(::getuid());
  ::mkdir(dir.c_str(), 0700);
  const std::string path = dir + "/" + std::to_string(port) + ".lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return true;  // no lock directory: fall back to the bind probe alone
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return false;
  }
  return true;  // the descriptor stays open: the lock lasts as long as this process
}

// mariadb-install-db takes a second or more per test; a data dir it made once is copied
// instead. The template is keyed by the server binary (size and mtime), made once under a
// lock by whichever test process first needs it, and renamed into place when complete.
std::string template_datadir() {
  const std::string binary =
      std::filesystem::exists("/usr/sbin/mariadbd") ? "/usr/sbin/mariadbd" : "mariadbd";
  struct stat st {};
  const std::string key = ::stat(binary.c_str(), &st) == 0
                              ? std::to_string(st.st_size) + "-" + std::to_string(st.st_mtime)
                              : "unknown";
  const std::string base = "/tmp/slotted-mariadb-template-" + std::to_string(::getuid());
  const std::string ready = base + "-" + key;
  if (std::filesystem::exists(ready + "/data")) return ready + "/data";
  const int lock = ::open((base + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock < 0) throw std::runtime_error("cannot open the template lock " + base + ".lock");
  ::flock(lock, LOCK_EX);
  struct unlock_at_exit {
    int fd;
    ~unlock_at_exit() { ::close(fd); }
  } unlock{lock};
  if (std::filesystem::exists(ready + "/data")) return ready + "/data";
  const std::string work = ready + ".partial";
  std::error_code ignored;
  std::filesystem::remove_all(work, ignored);
  std::filesystem::create_directories(work + "/tmp");
  const pid_t install =
      spawn_process({"mariadb-install-db", "--no-defaults", "--datadir=" + work + "/data",
                     "--auth-root-authentication-method=normal", "--skip-test-db", "--user=root",
                     "--tmpdir=" + work + "/tmp"},
                    work + "/install.log");
  const int status = wait_process(install);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error("mariadb-install-db failed; see " + work + "/install.log");
  }
  std::filesystem::rename(work, ready);
  return ready + "/data";
}

}  // namespace

std::uint16_t free_loopback_port() {
  // Below the ephemeral range: a port that bind(0) hands out is free only until some
  // outgoing connection (a daemon's, a Galera node's) takes it as its local port, which
  // can happen before the server meant to listen there binds it (seen: a Galera node's
  // SST rsync daemon failing to start). Never the same port twice in one process.
  static std::mutex mutex;
  static std::set<std::uint16_t> given;
  static std::mt19937 rng{std::random_device{}()};
  std::lock_guard lock(mutex);
  int ephemeral_low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_low;
  constexpr int first = 10000;
  std::uniform_int_distribution<int> pick(first, std::max(first + 1000, ephemeral_low) - 1);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const auto port = static_cast<std::uint16_t>(pick(rng));
    if (given.count(port) != 0) continue;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    if (free && claim_port_across_processes(port)) {
      given.insert(port);
      return port;
    }
  }
  throw std::runtime_error("no free loopback port below the ephemeral range");
}

mariadb_server::mariadb_server(std::vector<std::string> extra_args)
    : extra_args_(std::move(extra_args)) {
  db::initialize_client_library();
  dir_ = make_temp_dir("mariadb");
  socket_ = dir_ + "/mysqld.sock";
  port_ = free_loopback_port();
  // Temporary files in our own directory: the bootstrap's temporary tables in a /tmp
  // shared with other servers and cleaners made installs fail now and then.
  std::filesystem::create_directories(dir_ + "/tmp");
  std::filesystem::copy(template_datadir(), dir_ + "/data",
                        std::filesystem::copy_options::recursive);
  start();
}

mariadb_server::~mariadb_server() {
  stop();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

void mariadb_server::start() {
  // Debian keeps mariadbd in /usr/sbin, which is not on an ordinary user's PATH.
  const std::string binary =
      std::filesystem::exists("/usr/sbin/mariadbd") ? "/usr/sbin/mariadbd" : "mariadbd";
  // No --innodb-log-file-size: the template's redo log (mariadb-install-db's size) is used
  // as it is; another size made every start rewrite it first (about 0.25 s a test).
  std::vector<std::string> args{binary,
                                "--no-defaults",
                                "--datadir=" + dir_ + "/data",
                                "--socket=" + socket_,
                                "--port=" + std::to_string(port_),
                                "--bind-address=127.0.0.1",
                                "--user=root",
                                "--pid-file=" + dir_ + "/mysqld.pid",
                                "--innodb-buffer-pool-size=128M",
                                "--innodb-flush-log-at-trx-commit=2",
                                "--skip-name-resolve",
                                "--max-connections=500",
                                "--log-error=" + dir_ + "/error.log",
                                "--tmpdir=" + dir_ + "/tmp"};
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  pid_ = spawn_process(args, dir_ + "/mariadbd.out");
  // Wait until it accepts connections (a condition, polled), or give up. A restart after
  // SIGKILL runs InnoDB's crash recovery, which on a loaded 2-core machine under the
  // sanitizers has taken most of a minute: 120 s, and the failure says why.
  std::string last_error;
  const bool accepting = eventually(
      [&] {
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          throw std::runtime_error("mariadbd exited at start; see " + dir_ + "/error.log");
        }
        try {
          connect();
          return true;
        } catch (const db::db_error& e) {
          last_error = e.what();
          return false;
        }
      },
      std::chrono::seconds(120), std::chrono::milliseconds(50));
  if (!accepting) {
    std::ifstream log(dir_ + "/error.log");
    const std::string text{std::istreambuf_iterator<char>(log), std::istreambuf_iterator<char>()};
    throw std::runtime_error("mariadbd did not accept connections within 120s (last error: " +
                             last_error + "); the end of " + dir_ + "/error.log:\n" +
                             text.substr(text.size() > 3000 ? text.size() - 3000 : 0));
  }
}

void mariadb_server::stop(bool hard) {
  if (pid_ <= 0) return;
  ::kill(pid_, hard ? SIGKILL : SIGTERM);
  wait_process(pid_);
  pid_ = -1;
}

db::connection mariadb_server::connect(const std::string& database) const {
  db::connect_options o;
  o.socket = socket_;
  o.user = "root";
  o.database = database;
  o.connect_timeout = std::chrono::seconds(2);
  return db::connection(o);
}

std::string mariadb_server::create_database() {
  const std::string name = "test_" + std::to_string(++databases_);
  auto conn = connect();
  conn.execute("CREATE DATABASE `" + name + "`");
  return name;
}

std::int64_t mariadb_server::query_int(const std::string& database, const std::string& sql) const {
  auto conn = connect(database);
  const auto rows = conn.query(sql);
  if (rows.empty() || rows[0].empty() || !rows[0][0]) return 0;
  return std::stoll(*rows[0][0]);
}

mariadb_server& shared_mariadb() {
  static mariadb_server server;
  return server;
}

}  // namespace slotted::test
