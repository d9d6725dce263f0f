#pragma once
// A loopback TCP proxy between the daemon and its database that understands just enough
// of the protocol (MySQL: packet framing, COM_QUERY; PostgreSQL: the untyped startup
// messages, then typed messages, 'Q' for a statement, as the driver sends them all) to
// cut a connection at a chosen point: before a statement reaches the server, or after
// the server executed it but before its reply reaches the client (for COMMIT: the
// outcome is unknown to the client). Each rule fires a given number of times.
// PostgreSQL's connections must not use TLS (the proxy reads the statements), which a
// server without ssl, as the tests', refuses anyway.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace slotted::test {

class fault_proxy {
 public:
  enum class cut { before_statement, after_statement };
  enum class protocol { mysql, postgresql };

  explicit fault_proxy(std::uint16_t upstream_port, protocol p = protocol::mysql);
  ~fault_proxy();

  std::uint16_t port() const { return port_; }

  // Cuts the next `times` statements whose text starts with `prefix`.
  void arm(const std::string& prefix, cut where, int times = 1);
  // While down, the proxy closes its open connections and every new one at once: the
  // daemon sees a server that has gone (a host to fail over from).
  void set_down(bool down);
  // How many cuts happened so far.
  int cuts() const { return cuts_.load(); }

 private:
  struct connection;
  void accept_loop();
  void pump_client(std::shared_ptr<connection> c);
  void pump_server(std::shared_ptr<connection> c);

  // The statement of the client's next message, or false when the connection ends.
  bool next_message(int fd, bool& startup, std::vector<char>& message, std::string_view& sql);

  std::uint16_t upstream_port_;
  protocol protocol_;
  std::uint16_t port_ = 0;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> down_{false};
  std::atomic<int> cuts_{0};
  std::mutex mutex_;
  std::string prefix_;
  cut where_ = cut::before_statement;
  int remaining_ = 0;
  std::vector<std::thread> threads_;
  std::vector<std::shared_ptr<connection>> connections_;
  std::thread acceptor_;
};

}  // namespace slotted::test
