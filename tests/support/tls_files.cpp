#include "support/tls_files.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "support/mariadb_server.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {

namespace {
void run(const std::string& dir, const std::vector<std::string>& args) {
  const int status = wait_process(spawn_process(args, dir + "/openssl.log"));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("openssl " + args.at(1) + " failed; see " + dir + "/openssl.log");
}

void make_ca(const std::string& dir, const std::string& name, const std::string& subject) {
  run(dir, {"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-nodes", "-days", "2", "-subj", subject, "-keyout", dir + "/" + name + ".key", "-out",
            dir + "/" + name + ".pem"});
}
}  // namespace

tls_files::tls_files() {
  dir_ = make_temp_dir("tls");
  make_ca(dir_, "ca", "/CN=slotted-counterd test CA");
  make_ca(dir_, "other-ca", "/CN=an unrelated CA");
  run(dir_, {"openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-subj", "/CN=127.0.0.1", "-keyout", server_key(), "-out", dir_ + "/server.csr"});
  {
    std::ofstream ext(dir_ + "/server.ext");
    ext << "subjectAltName=IP:127.0.0.1\n";
  }
  run(dir_, {"openssl", "x509", "-req", "-in", dir_ + "/server.csr", "-CA", ca(), "-CAkey",
             dir_ + "/ca.key", "-CAcreateserial", "-days", "2", "-extfile", dir_ + "/server.ext",
             "-out", server_cert()});
  // mariadbd may run as another user (Galera nodes run as mysql).
  for (const auto& f : {ca(), other_ca(), server_cert(), server_key()})
    std::filesystem::permissions(f, std::filesystem::perms::owner_read |
                                        std::filesystem::perms::group_read |
                                        std::filesystem::perms::others_read);
  std::filesystem::permissions(dir_, std::filesystem::perms::owner_all |
                                         std::filesystem::perms::group_exec |
                                         std::filesystem::perms::others_exec);
}

tls_files::~tls_files() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::vector<std::string> tls_files::server_args() const {
  return {"--ssl-ca=" + ca(), "--ssl-cert=" + server_cert(), "--ssl-key=" + server_key(),
          "--require-secure-transport=ON"};
}

}  // namespace slotted::test
