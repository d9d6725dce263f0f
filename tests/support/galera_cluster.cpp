#include "support/galera_cluster.hpp"

#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "db/errors.hpp"
#include "support/eventually.hpp"
#include "support/mariadb_server.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {

namespace {
namespace fs = std::filesystem;

std::string mariadbd_binary() {
  // Debian keeps mariadbd in /usr/sbin, which is not on an ordinary user's PATH.
  return fs::exists("/usr/sbin/mariadbd") ? "/usr/sbin/mariadbd" : "mariadbd";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool as_root() {
  return geteuid() == 0;
}

// The nodes' directories belong to the user mariadbd runs as.
void give_to_mysql(const std::string& path) {
  if (!as_root()) return;
  const passwd* pw = getpwnam("mysql");
  if (pw == nullptr) throw std::runtime_error("galera_cluster: no 'mysql' user to run nodes as");
  for (const auto& entry : fs::recursive_directory_iterator(path))
    if (::lchown(entry.path().c_str(), pw->pw_uid, pw->pw_gid) != 0)
      throw std::runtime_error("galera_cluster: chown " + entry.path().string() + " failed");
  if (::chown(path.c_str(), pw->pw_uid, pw->pw_gid) != 0)
    throw std::runtime_error("galera_cluster: chown " + path + " failed");
}
}  // namespace

galera_cluster::galera_cluster(int count) {
  db::initialize_client_library();
  if (!fs::exists("/usr/lib/galera/libgalera_smm.so"))
    throw std::runtime_error("galera_cluster: /usr/lib/galera/libgalera_smm.so missing (galera-4)");
  dir_ = make_temp_dir("galera");
  // mysql must traverse it to reach its node directory.
  fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);

  struct ports {
    std::uint16_t client, group, ist, sst;
  };
  std::vector<ports> p;
  for (int i = 0; i < count; ++i)
    p.push_back(
        {free_loopback_port(), free_loopback_port(), free_loopback_port(), free_loopback_port()});
  std::string members;
  for (const auto& x : p)
    members += (members.empty() ? "" : ",") + std::string("127.0.0.1:") + std::to_string(x.group);

  for (int i = 0; i < count; ++i) {
    node n;
    n.dir = dir_ + "/node" + std::to_string(i);
    n.socket = n.dir + "/mysqld.sock";
    n.port = p[i].client;
    fs::create_directories(n.dir + "/data");
    fs::create_directories(n.dir + "/tmp");  // not the shared /tmp (see mariadb_server)
    std::ofstream cnf(n.dir + "/my.cnf");
    cnf << "[mysqld]\n"
        << "datadir=" << n.dir << "/data\n"
        << "socket=" << n.socket << "\n"
        << "port=" << n.port << "\n"
        << "bind-address=127.0.0.1\n"
        << "pid-file=" << n.dir << "/mysqld.pid\n"
        << "log-error=" << n.dir << "/error.log\n"
        << "tmpdir=" << n.dir << "/tmp\n"
        << (as_root() ? "user=mysql\n" : "") << "skip-name-resolve\n"
        << "max-connections=300\n"
        << "innodb-buffer-pool-size=64M\n"
        << "innodb-log-file-size=32M\n"
        << "innodb-flush-log-at-trx-commit=2\n"
        << "binlog-format=ROW\n"
        << "innodb-autoinc-lock-mode=2\n"
        << "wsrep-on=ON\n"
        << "wsrep-provider=/usr/lib/galera/libgalera_smm.so\n"
        << "wsrep-cluster-name=slotted-test\n"
        << "wsrep-cluster-address=gcomm://" << members << "\n"
        << "wsrep-node-address=127.0.0.1:" << p[i].group << "\n"
        << "wsrep-node-incoming-address=127.0.0.1:" << n.port << "\n"
        << "wsrep-node-name=node" << i << "\n"
        << "wsrep-sst-method=rsync\n"
        << "wsrep-sst-receive-address=127.0.0.1:" << p[i].sst << "\n"
        << "wsrep-provider-options=\"gmcast.listen_addr=tcp://127.0.0.1:" << p[i].group
        << ";ist.recv_addr=127.0.0.1:" << p[i].ist
        << ";evs.suspect_timeout=PT3S;evs.inactive_timeout=PT6S;gcache.size=64M\"\n";
    cnf.close();
    nodes_.push_back(n);
  }
  for (const auto& n : nodes_) give_to_mysql(n.dir);
  // Only the first node is installed; the others receive its data by SST.
  const int status = wait_process(
      spawn_process({"mariadb-install-db", "--no-defaults", "--datadir=" + nodes_[0].dir + "/data",
                     "--auth-root-authentication-method=normal", "--skip-test-db",
                     "--tmpdir=" + nodes_[0].dir + "/tmp",
                     std::string("--user=") + (as_root() ? "mysql" : getpwuid(geteuid())->pw_name)},
                    dir_ + "/install.log"));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("mariadb-install-db failed; see " + dir_ + "/install.log");

  start_node(0, {"--wsrep-new-cluster"});
  wait_synced(0, std::chrono::seconds(60));
  // One joiner at a time: each takes a full SST from a donor.
  for (int i = 1; i < count; ++i) {
    start_node(i, {});
    wait_synced(i, std::chrono::seconds(120));
  }
}

galera_cluster::~galera_cluster() {
  for (int i = 0; i < size(); ++i) kill(i);
  std::error_code ignored;
  fs::remove_all(dir_, ignored);
}

void galera_cluster::start_node(int i, const std::vector<std::string>& extra) {
  auto& n = nodes_[i];
  std::vector<std::string> args{mariadbd_binary(), "--defaults-file=" + n.dir + "/my.cnf"};
  args.insert(args.end(), extra.begin(), extra.end());
  n.pid = spawn_process(args, n.dir + "/mariadbd.out", /*own_group=*/true);
}

void galera_cluster::wait_synced(int i, std::chrono::seconds limit) {
  auto& n = nodes_[i];
  const bool is_synced = eventually(
      [&] {
        int st = 0;
        if (waitpid(n.pid, &st, WNOHANG) == n.pid) {
          n.pid = -1;
          throw std::runtime_error("galera node " + std::to_string(i) + " exited; see " + n.dir +
                                   "/error.log");
        }
        try {
          return synced(i);
        } catch (const db::db_error&) {
          return false;
        }
      },
      limit, std::chrono::milliseconds(100));
  if (!is_synced)
    throw std::runtime_error("galera node " + std::to_string(i) + " not Synced within " +
                             std::to_string(limit.count()) + "s; see " + n.dir + "/error.log");
}

db::connection galera_cluster::connect(int i, const std::string& database) const {
  db::connect_options o;
  o.socket = nodes_[i].socket;
  o.user = "root";
  o.database = database;
  o.connect_timeout = std::chrono::seconds(2);
  db::connection conn(o);
  conn.execute("SET SESSION wsrep_sync_wait = 1");
  return conn;
}

std::int64_t galera_cluster::query_int(int i, const std::string& database,
                                       const std::string& sql) const {
  auto conn = connect(i, database);
  const auto rows = conn.query(sql);
  if (rows.empty() || rows[0].empty() || !rows[0][0]) return 0;
  return std::stoll(*rows[0][0]);
}

std::int64_t galera_cluster::status(int i, const std::string& variable) const {
  db::connect_options o;
  o.socket = nodes_[i].socket;
  o.user = "root";
  o.connect_timeout = std::chrono::seconds(2);
  db::connection conn(o);
  const auto rows = conn.query("SHOW GLOBAL STATUS LIKE '" + variable + "'");
  if (rows.empty() || !rows[0][1]) return -1;
  try {
    return std::stoll(*rows[0][1]);
  } catch (const std::exception&) {
    return *rows[0][1] == "ON" ? 1 : 0;
  }
}

bool galera_cluster::synced(int i) const {
  return status(i, "wsrep_local_state") == 4 && status(i, "wsrep_ready") == 1;
}

void galera_cluster::kill(int i) {
  auto& n = nodes_[i];
  if (n.pid <= 0) return;
  ::kill(-n.pid, SIGKILL);
  wait_process(n.pid);
  n.pid = -1;
}

void galera_cluster::restart(int i) {
  auto& n = nodes_[i];
  if (n.pid > 0) throw std::runtime_error("galera node " + std::to_string(i) + " is running");
  const std::string log = n.dir + "/recover.log";
  const int st =
      wait_process(spawn_process({mariadbd_binary(), "--defaults-file=" + n.dir + "/my.cnf",
                                  "--wsrep-recover", "--log-error=" + log},
                                 n.dir + "/recover.out", true));
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    throw std::runtime_error("mariadbd --wsrep-recover failed; see " + log);
  std::smatch m;
  const std::string text = read_file(log);
  static const std::regex recovered("Recovered position: ([0-9a-f-]+:-?[0-9]+)");
  std::string position;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), recovered);
       it != std::sregex_iterator(); ++it)
    position = (*it)[1];
  if (position.empty()) throw std::runtime_error("no recovered position in " + log);
  start_node(i, {"--wsrep-start-position=" + position});
  wait_synced(i, std::chrono::seconds(120));
}

}  // namespace slotted::test
