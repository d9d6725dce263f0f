#pragma once
// Throwaway TLS material for tests, made with the openssl command line tool in a temp
// directory: a CA, a server certificate signed by it for IP 127.0.0.1 (and nothing
// else), and a second, unrelated CA that must not verify that certificate. EC P-256
// keys: quick to make on a loaded machine.

#include <string>
#include <vector>

namespace slotted::test {

class tls_files {
 public:
  tls_files();  // throws std::runtime_error when openssl fails
  ~tls_files();
  tls_files(const tls_files&) = delete;
  tls_files& operator=(const tls_files&) = delete;

  const std::string& dir() const { return dir_; }
  std::string ca() const { return dir_ + "/ca.pem"; }
  std::string other_ca() const { return dir_ + "/other-ca.pem"; }
  std::string server_cert() const { return dir_ + "/server.pem"; }
  std::string server_key() const { return dir_ + "/server.key"; }

  // mariadbd arguments serving this certificate and refusing plaintext TCP clients.
  std::vector<std::string> server_args() const;

 private:
  std::string dir_;
};

}  // namespace slotted::test
