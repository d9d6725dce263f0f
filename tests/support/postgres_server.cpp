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
#include <stdexcept>
#include <utility>

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
  const std::string base = "/tmp/slotted-postgres-template-" + std::to_string(::getuid());
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
  fs::rename(work, ready);
  return ready + "/data";
}

}  // namespace

postgres_server::connection::connection(const std::string& conninfo)
    : conn_(PQconnectdb(conninfo.c_str())) {
  if (conn_ == nullptr) throw std::runtime_error("PQconnectdb: out of memory");
  if (PQstatus(conn_) != CONNECTION_OK) {
    const std::string message = PQerrorMessage(conn_);
    PQfinish(conn_);
    throw std::runtime_error("cannot connect to PostgreSQL (" + conninfo + "): " + message);
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

postgres_server::postgres_server(std::vector<std::string> extra_args)
    : extra_args_(std::move(extra_args)), bindir_(postgres_bindir()) {
  if (bindir_.empty())
    throw std::runtime_error(
        "no PostgreSQL server binaries (install postgresql-15, or set "
        "SLOTTED_PG_BINDIR)");
  const auto user = server_user();
  dir_ = make_temp_dir("postgres");
  port_ = free_loopback_port();
  fs::copy(postgres_template(bindir_, user), dir_ + "/data", fs::copy_options::recursive);
  fs::permissions(dir_ + "/data", fs::perms::owner_all);  // the server insists on 0700
  give_to(dir_, user);
  start();
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
  // After a hard stop the killed backends may still hold the old shared memory for a
  // moment, and the postmaster then refuses to start: it is started again until it
  // accepts or the time is up. Crash recovery on a loaded 2-core machine under the
  // sanitizers can take long: 120 s, and the failure says why.
  std::string last_error;
  const bool accepting = eventually(
      [&] {
        if (pid_ <= 0) pid_ = spawn_process(args, log, true, user ? &*user : nullptr);
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          last_error = "postgres exited at start";
          return false;
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
    ::kill(-pid_, SIGKILL);  // the postmaster and every backend, at once
  } else {
    ::kill(pid_, SIGINT);  // fast shutdown: SIGTERM would wait for idle clients to leave
  }
  wait_process(pid_);
  pid_ = -1;
}

postgres_server::connection postgres_server::connect(const std::string& database, bool tcp) const {
  return connection("host=" + (tcp ? std::string{"127.0.0.1"} : dir_) +
                    " port=" + std::to_string(port_) + " user=postgres dbname=" + database +
                    " connect_timeout=2");
}

std::string postgres_server::create_database() {
  const std::string name = "test_" + std::to_string(++databases_);
  connect().execute("CREATE DATABASE " + name);
  return name;
}

std::int64_t postgres_server::query_int(const std::string& database, const std::string& sql) const {
  return connect(database).query_int(sql);
}

postgres_server& shared_postgres() {
  static postgres_server server;
  return server;
}

}  // namespace slotted::test
