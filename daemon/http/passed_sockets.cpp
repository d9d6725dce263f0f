#include "http/passed_sockets.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace slotted::http {

namespace {

std::string describe(int fd, int family) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char text[INET6_ADDRSTRLEN] = {};
  if (family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    return std::string(text) + ":" + std::to_string(ntohs(a->sin_port));
  }
  if (family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    // Appended, not "[" + std::string(...): see db/sql_adopt.cpp (gcc 12 false -Wrestrict).
    std::string s(1, '[');
    s.append(text).append("]:").append(std::to_string(ntohs(a->sin6_port)));
    return s;
  }
  const auto* u = reinterpret_cast<const sockaddr_un*>(&ss);
  const std::size_t path_len = len > offsetof(sockaddr_un, sun_path)
                                   ? static_cast<std::size_t>(len) - offsetof(sockaddr_un, sun_path)
                                   : 0;
  if (path_len == 0) return "(unnamed unix socket)";
  if (u->sun_path[0] == '\0') {
    std::string s(1, '@');
    s.append(u->sun_path + 1, path_len - 1);
    return s;
  }
  return std::string(u->sun_path, ::strnlen(u->sun_path, path_len));
}

}  // namespace

std::vector<passed_socket> take_passed_sockets() {
  char** names = nullptr;
  // 1: LISTEN_* are unset, so nothing the daemon starts takes them for its own.
  const int n = ::sd_listen_fds_with_names(1, &names);
  if (n < 0) {
    throw std::runtime_error(std::string("LISTEN_FDS: cannot take the passed sockets: ") +
                             std::strerror(-n));
  }
  std::vector<passed_socket> out;
  for (int i = 0; i < n; ++i) {
    passed_socket s;
    s.fd = SD_LISTEN_FDS_START + i;
    s.name = names != nullptr && names[i] != nullptr ? names[i] : "unknown";
    out.push_back(std::move(s));
  }
  if (names != nullptr) {
    for (int i = 0; i < n; ++i) std::free(names[i]);
    std::free(names);
  }
  for (auto& s : out) {
    const auto bad = [&](const std::string& why) {
      return std::runtime_error("LISTEN_FDS: descriptor " + std::to_string(s.fd) + " ('" + s.name +
                                "') " + why);
    };
    if (::sd_is_socket(s.fd, AF_UNSPEC, SOCK_STREAM, 1) <= 0) {
      throw bad("is not a listening stream socket (the socket unit wants ListenStream=)");
    }
    int family = 0;
    socklen_t len = sizeof family;
    if (::getsockopt(s.fd, SOL_SOCKET, SO_DOMAIN, &family, &len) != 0) {
      throw bad(std::string("cannot be inspected: ") + std::strerror(errno));
    }
    if (family != AF_INET && family != AF_INET6 && family != AF_UNIX) {
      throw bad("is of address family " + std::to_string(family) +
                "; only TCP (IPv4, IPv6) and Unix sockets are served");
    }
    s.family = family;
    s.address = describe(s.fd, family);
  }
  return out;
}

}  // namespace slotted::http
