#pragma once
// Listening sockets handed over by a service manager (systemd socket activation:
// LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES; sd_listen_fds(3) semantics). When there are
// any, they replace the listeners the config describes (listen.address, listen.port,
// listen.unix_socket, listen.unix_socket_mode): the daemon serves the same API on each.
// Systemd keeps its own copy of every one, so connections that arrive while no daemon
// runs (a restart) wait in the socket's queue for the next one.

#include <string>
#include <vector>

namespace slotted::http {

struct passed_socket {
  int fd = -1;
  std::string name;     // FileDescriptorName= (systemd's default: the socket unit's name)
  int family = 0;       // AF_INET, AF_INET6 or AF_UNIX
  std::string address;  // "127.0.0.1:8080", "[::1]:8080" or the socket's path
};

// Takes the passed sockets (descriptors 3, 4, ...) and removes the LISTEN_* variables
// from the environment. Empty when none were passed to this process (no LISTEN_FDS, or
// LISTEN_PID names another process). Throws std::runtime_error naming the descriptor
// when one is not a listening stream socket of a family the daemon serves.
std::vector<passed_socket> take_passed_sockets();

}  // namespace slotted::http
