#include "support/postgres_server.hpp"

#include <fcntl.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "support/eventually.hpp"
#include "support/mariadb_server.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {

namespace fs = std::filesystem;

std::string postgres_bindir() {
  const char* env = std::getenv("SLOTTED_PG_BINDIR");
  const std::string dir = env != nullptr && *env != '\0' ? env : "/usr/lib/postgresql/15/bin";
  return fs::exists(dir + "/postgres") ? dir : std::string{};
}

namespace {

// The user the server runs as: none when the tests do not run as root (the server then
// runs as they do), else `postgres`, else `nobody`.
std::optional<run_as> server_user() {
  if (::geteuid() != 0) return std::nullopt;
  for (const char* name : {"postgres", "nobody"}) {
    if (const passwd* pw = ::getpwnam(name); pw != nullptr) return run_as{pw->pw_uid, pw->pw_gid};
  }
  throw std::runtime_error("running as root, and neither a postgres nor a nobody user exists");
}

// Gives `path` and everything under it to the server's user.
void give_to(const std::string& path, const std::optional<run_as>& user) {
  if (!user) return;
  const auto own = [&](const fs::path& p) {
    if (::lchown(p.c_str(), user->uid, user->gid) != 0)
      throw std::runtime_error("cannot chown " + p.string());
  };
  own(path);
  if (fs::is_directory(path))
    for (const auto& e : fs::recursive_directory_iterator(path)) own(e.path());
}

std::string tail_of(const std::string& path) {
  std::ifstream log(path);
  const std::string text{std::istreambuf_iterator<char>(log), std::istreambuf_iterator<char>()};
  return text.substr(text.size() > 3000 ? text.size() - 3000 : 0);
}

// initdb takes a second or more; a data dir it made once is copied instead, as
// mariadb_server.cpp's template_datadir does (keyed by the server binary, made under a
// lock, renamed into place when complete).
std::string postgres_template(const std::string& bindir, const std::optional<run_as>& user) {
  struct stat st {};
  const std::string binary = bindir + "/postgres";
  const std::string key = ::stat(binary.c_str(), &st) == 0
                              ? std::to_string(st.st_size) + "-" + std::to_string(st.st_mtime)
                              : "unknown";
  // v1: the initdb arguments below; a change of them is a new version.
  const std::string base = "/tmp/slotted-postgres-template-v1-" + std::to_string(::getuid());
  const std::string ready = base + "-" + key;
  if (fs::exists(ready + "/data")) return ready + "/data";
  const int lock = ::open((base + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock < 0) throw std::runtime_error("cannot open the template lock " + base + ".lock");
  ::flock(lock, LOCK_EX);
  struct unlock_at_exit {
    int fd;
    ~unlock_at_exit() { ::close(fd); }
  } unlock{lock};
  if (fs::exists(ready + "/data")) return ready + "/data";
  const std::string work = ready + ".partial";
  std::error_code ignored;
  fs::remove_all(work, ignored);
  fs::create_directories(work);
  fs::permissions(work, fs::perms::owner_all);
  give_to(work, user);
  const pid_t init = spawn_process({bindir + "/initdb", "-D", work + "/data", "-U", "postgres",
                                    "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"},
                                   work + "/initdb.log", false, user ? &*user : nullptr);
  const int status = wait_process(init);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("initdb failed; the end of " + work + "/initdb.log:\n" +
                             tail_of(work + "/initdb.log"));
  // The template is the test user's again, so that the server's user cannot change what
  // later servers copy.
  give_to(work, run_as{::getuid(), ::getgid()});
  fs::rename(work, ready);
  return ready + "/data";
}

// The processes whose parent is `parent` (from /proc/PID/stat: "pid (comm) state ppid").
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;  // gone since the listing
    const auto paren = line.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(line.substr(paren + 1));
    char state = 0;
    pid_t ppid = 0;
    if (rest >> state >> ppid && ppid == parent) out.push_back(std::stoi(name));
  }
  return out;
}

// Whether `pid` still runs (a zombie has ended: its memory and its sockets are gone).
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z' &&
         line[paren + 2] != 'X';
}

}  // namespace

postgres_server::connection::connection(const std::string& host, std::uint16_t port,
                                        const std::string& database) {
  // Every setting given, none read from the environment (PGSSLMODE, PGOPTIONS, a
  // service file), and the database name taken as a name.
  const std::string port_text = std::to_string(port);
  const char* keys[] = {"host",
                        "port",
                        "user",
                        "dbname",
                        "sslmode",
                        "gssencmode",
                        "channel_binding",
                        "options",
                        "connect_timeout",
                        nullptr};
  const char* values[] = {host.c_str(), port_text.c_str(),
                          "postgres",   database.c_str(),
                          "disable",    "disable",
                          "disable",    "",
                          "2",          nullptr};
  conn_ = PQconnectdbParams(keys, values, 0);
  if (conn_ == nullptr) throw std::runtime_error("PQconnectdbParams: out of memory");
  if (PQstatus(conn_) != CONNECTION_OK) {
    const std::string message = PQerrorMessage(conn_);
    PQfinish(conn_);
    conn_ = nullptr;
    throw std::runtime_error("cannot connect to PostgreSQL at " + host + ":" + port_text + ": " +
                             message);
  }
}

postgres_server::connection::~connection() {
  if (conn_ != nullptr) PQfinish(conn_);
}

postgres_server::connection::connection(connection&& other) noexcept
    : conn_(std::exchange(other.conn_, nullptr)) {}

void postgres_server::connection::execute(const std::string& sql) {
  PGresult* r = PQexec(conn_, sql.c_str());
  const auto status = PQresultStatus(r);
  const std::string message = PQresultErrorMessage(r);
  PQclear(r);
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK)
    throw std::runtime_error(sql + ": " + message);
}

std::int64_t postgres_server::connection::query_int(const std::string& sql) {
  PGresult* r = PQexec(conn_, sql.c_str());
  if (PQresultStatus(r) != PGRES_TUPLES_OK) {
    const std::string message = PQresultErrorMessage(r);
    PQclear(r);
    throw std::runtime_error(sql + ": " + message);
  }
  const std::int64_t value = PQntuples(r) > 0 && PQnfields(r) > 0 && PQgetisnull(r, 0, 0) == 0
                                 ? std::stoll(PQgetvalue(r, 0, 0))
                                 : 0;
  PQclear(r);
  return value;
}

postgres_server::postgres_server(std::vector<std::string> extra_args,
                                 std::optional<server_certificate> tls)
    : extra_args_(std::move(extra_args)), bindir_(postgres_bindir()) {
  if (bindir_.empty())
    throw std::runtime_error(
        "no PostgreSQL server binaries (install postgresql-15, or set "
        "SLOTTED_PG_BINDIR)");
  const auto user = server_user();
  dir_ = make_temp_dir("postgres");
  try {
    port_ = free_loopback_port();
    fs::copy(postgres_template(bindir_, user), dir_ + "/data",
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    fs::permissions(dir_ + "/data", fs::perms::owner_all);  // the server insists on 0700
    if (tls) {
      // Copies the server's user can read; the key 0600, as the server insists.
      fs::copy_file(tls->cert_file, dir_ + "/server.pem");
      fs::copy_file(tls->key_file, dir_ + "/server.key");
      fs::permissions(dir_ + "/server.key", fs::perms::owner_read | fs::perms::owner_write);
      extra_args_.insert(extra_args_.end(),
                         {"-c", "ssl=on", "-c", "ssl_cert_file=" + dir_ + "/server.pem", "-c",
                          "ssl_key_file=" + dir_ + "/server.key"});
    }
    give_to(dir_, user);
    start();
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
    throw;
  }
}

postgres_server::~postgres_server() {
  stop();
  std::error_code ignored;
  fs::remove_all(dir_, ignored);
}

void postgres_server::start() {
  const auto user = server_user();
  std::vector<std::string> args{bindir_ + "/postgres", "-D", dir_ + "/data", "-k", dir_, "-p",
                                std::to_string(port_), "-c", "listen_addresses=127.0.0.1",
                                // A killed server keeps what it committed (the OS has it);
                                // only a crash of the machine would lose it, as
                                // --innodb-flush-log-at-trx-commit=2 does for MariaDB.
                                // Never synchronous_commit=off: that loses commits a
                                // client was told of, and exactly-once tests would fail.
                                "-c", "fsync=off", "-c", "max_connections=500", "-c",
                                "shared_buffers=128MB", "-c", "unix_socket_permissions=0777", "-c",
                                "logging_collector=off"};
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  const std::string log = dir_ + "/postgres.out";
  pid_ = spawn_process(args, log, true, user ? &*user : nullptr);
  // Wait until it accepts connections, or fail with why. Crash recovery on a loaded
  // 2-core machine under the sanitizers can take long: 120 s.
  std::string last_error;
  const bool accepting = eventually(
      [&] {
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          throw std::runtime_error("postgres exited at start (status " + std::to_string(status) +
                                   "); the end of " + log + ":\n" + tail_of(log));
        }
        try {
          connect();
          return true;
        } catch (const std::runtime_error& e) {
          last_error = e.what();
          return false;
        }
      },
      std::chrono::seconds(120), std::chrono::milliseconds(50));
  if (!accepting) {
    stop(true);
    throw std::runtime_error("postgres did not accept connections within 120s (last error: " +
                             last_error + "); the end of " + log + ":\n" + tail_of(log));
  }
}

void postgres_server::stop(bool hard) {
  if (pid_ <= 0) return;
  if (hard) {
    // Each backend leads a process group of its own (PostgreSQL's InitPostmasterChild
    // calls setsid), so the postmaster's group is the postmaster alone: a backend
    // outlives it until it notices, and may answer a query in between. The postmaster is
    // stopped first, so that it forks no more, then its children and it are killed, and
    // the children awaited (they are the test process's no longer: gone or zombies).
    ::kill(pid_, SIGSTOP);
    const auto children = children_of(pid_);
    for (const pid_t c : children) ::kill(c, SIGKILL);
    ::kill(pid_, SIGKILL);
    // Not a throw (a destructor may be here): one still alive after 30 s makes the next
    // start fail, and say why.
    for (const pid_t c : children) eventually([&] { return !alive(c); }, std::chrono::seconds(30));
    wait_process(pid_);
    pid_ = -1;
    return;
  }
  ::kill(pid_, SIGINT);  // fast shutdown: SIGTERM would wait for idle clients to leave
  int status = 0;
  if (eventually([&] { return waitpid(pid_, &status, WNOHANG) == pid_; },
                 std::chrono::seconds(60))) {
    pid_ = -1;
    return;
  }
  stop(true);  // a shutdown that hangs is ended, not waited for
}

postgres_server::connection postgres_server::connect(const std::string& database, bool tcp) const {
  return connection(tcp ? std::string{"127.0.0.1"} : dir_, port_, database);
}

std::string postgres_server::create_database() {
  const std::string name = "test_" + std::to_string(++databases_);
  connect().execute("CREATE DATABASE " + name);
  return name;
}

db::connect_options postgres_server::options(const std::string& database, bool tcp) const {
  db::connect_options o;
  o.kind = db::engine::postgresql;
  o.user = "postgres";
  o.database = database;
  o.port = port_;
  if (tcp) {
    o.host = "127.0.0.1";
    o.tls.mode = db::tls_mode::disabled;
  } else {
    o.socket = dir_;
  }
  o.connect_timeout = std::chrono::seconds(10);
  o.io_timeout = std::chrono::seconds(20);
  return o;
}

std::int64_t postgres_server::query_int(const std::string& database, const std::string& sql) const {
  return connect(database).query_int(sql);
}

postgres_server& shared_postgres() {
  static postgres_server server;
  return server;
}

}  // namespace slotted::test
