// Values more than the key table reads: a listening endpoint's text, the instance id's
// default (the environment, else the host name) and the WAL directory's ($STATE_DIRECTORY).
#include <arpa/inet.h>
#include <unistd.h>

#include <array>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "config/checker.hpp"
#include "config/config.hpp"

namespace slotted::config {

std::optional<endpoint_text> listen_endpoint(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == text.size()) return std::nullopt;
  std::string_view address = text.substr(0, colon);
  const std::string_view port = text.substr(colon + 1);
  const bool bracketed = address.starts_with('[') && address.ends_with(']');
  if (bracketed) address = address.substr(1, address.size() - 2);
  unsigned char buf[sizeof(in6_addr)];
  const std::string a(address);
  const bool v4 = inet_pton(AF_INET, a.c_str(), buf) == 1;
  const bool v6 = inet_pton(AF_INET6, a.c_str(), buf) == 1;
  if (!(v4 && !bracketed) && !(v6 && bracketed)) return std::nullopt;
  unsigned value = 0;
  const auto r = std::from_chars(port.data(), port.data() + port.size(), value);
  if (r.ec != std::errc() || r.ptr != port.data() + port.size() || value > 65535)
    return std::nullopt;
  return endpoint_text{a, static_cast<std::uint16_t>(value)};
}

namespace detail {

namespace {
struct ip_address {
  std::array<unsigned char, 16> bytes{};  // IPv4 as ::ffff:a.b.c.d
  bool v4 = false;
  bool wildcard = false;  // 0.0.0.0, or :: (dual-stack: every IPv4 address too)
};
std::optional<ip_address> parse_ip(const std::string& text) {
  ip_address a;
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    a.bytes[10] = a.bytes[11] = 0xff;
    std::memcpy(&a.bytes[12], &v4, sizeof v4);
    a.v4 = true;
    a.wildcard = v4.s_addr == htonl(INADDR_ANY);
    return a;
  }
  if (inet_pton(AF_INET6, text.c_str(), a.bytes.data()) != 1) return std::nullopt;
  a.wildcard = a.bytes == std::array<unsigned char, 16>{};
  return a;
}
// Binding one of them on a port makes binding the other on that port fail.
bool overlap(const ip_address& a, const ip_address& b) {
  const auto covers = [](const ip_address& any, const ip_address& other) {
    return any.wildcard && (!any.v4 || other.v4);
  };
  return a.bytes == b.bytes || covers(a, b) || covers(b, a);
}
}  // namespace

void check_metrics_listen(const daemon_config& cfg, checker& c) {
  const auto metrics = listen_endpoint(cfg.metrics_listen);
  if (!metrics || metrics->port == 0 || metrics->port != cfg.listen_port) return;
  const auto api = parse_ip(cfg.listen_address);
  const auto own = parse_ip(metrics->address);
  if (api && own && overlap(*api, *own)) {
    c.fail_plain("metrics.listen",
                 "'" + cfg.metrics_listen + "' takes the port of the API's listen.address " +
                     cfg.listen_address + " and listen.port " + std::to_string(cfg.listen_port) +
                     ": give /metrics another port");
  }
}

bool is_valid_instance_id(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string default_instance_id() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) return "slotted-counterd";
  std::string id;
  for (char c : std::string_view(host)) {
    if (id.size() == 64) break;
    id.push_back(is_valid_instance_id(std::string_view(&c, 1)) ? c : '_');
  }
  return id.empty() ? "slotted-counterd" : id;
}

void resolve_instance_id(daemon_config& cfg, checker& c) {
  if (!cfg.instance_id.empty()) return;
  const char* env = std::getenv(instance_id_env);
  if (env == nullptr || *env == '\0') {
    cfg.instance_id = default_instance_id();
  } else if (is_valid_instance_id(env)) {
    cfg.instance_id = env;
  } else {
    c.fail_flag(std::string(instance_id_env) + " (the default instance_id): '" + env + "' is not " +
                instance_id_expected);
  }
}

}  // namespace detail

std::string default_wal_dir() {
  const char* dirs = std::getenv("STATE_DIRECTORY");
  if (dirs == nullptr) return {};
  const std::string_view all(dirs);
  return std::string(all.substr(0, all.find(':')));
}

}  // namespace slotted::config
