// mysql.hosts and mysql.tls: the parts of the mysql section beyond single values.

#include <algorithm>
#include <cctype>
#include <set>

#include "config/checker.hpp"

namespace slotted::config::detail {

result<host_port> parse_host_port(const std::string& text, std::uint16_t default_port) {
  const auto bad = [](const char* why) -> failure { return {errc::invalid_input, why}; };
  host_port out;
  out.port = default_port;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos) return bad("unterminated [");
    out.host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') return bad("expected ':' after ']'");
      port = text.substr(close + 2);
      if (port.empty()) return bad("empty port");
    }
  } else {
    const auto colon = text.rfind(':');
    if (colon != std::string::npos && text.find(':') != colon)
      return bad("an IPv6 address needs brackets: [addr]:port");
    out.host = text.substr(0, colon);
    if (colon != std::string::npos) {
      port = text.substr(colon + 1);
      if (port.empty()) return bad("empty port");
    }
  }
  if (out.host.empty()) return bad("empty host");
  for (char c : out.host) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '/' || c == '@' || c == ',')
      return bad("not a host name or address");
  }
  if (!port.empty()) {
    unsigned value = 0;
    const auto r = std::from_chars(port.data(), port.data() + port.size(), value);
    if (r.ec != std::errc() || r.ptr != port.data() + port.size() || value < 1 || value > 65535)
      return bad("port must be an integer in [1, 65535]");
    out.port = static_cast<std::uint16_t>(value);
  }
  return out;
}

// mysql.tls: consistent modes and files, and the files readable now (the client reads
// them at each connect, so an operator may replace them while the daemon runs).
void check_tls(const daemon_config& cfg, checker& c) {
  const auto& m = cfg.mysql;
  const auto& t = m.tls;
  const bool verify = t.mode == tls_mode::verify_ca || t.mode == tls_mode::verify_identity;
  const bool required = t.mode != tls_mode::disabled && t.mode != tls_mode::preferred;
  if (verify && t.ca_file.empty())
    c.fail_plain(m.key("tls.ca_file"), "required for mode verify_ca and verify_identity");
  if (t.cert_file.empty() != t.key_file.empty())
    c.fail_plain(m.key(t.cert_file.empty() ? "tls.cert_file" : "tls.key_file"),
                 "set cert_file and key_file together");
  if (required && !m.socket.empty())
    c.fail_plain(m.key("tls.mode"), "TLS applies to TCP connections and " + m.key("socket") +
                                        " is set: use host or hosts, or mode preferred");
  const std::pair<const char*, const std::string*> files[] = {
      {"tls.ca_file", &t.ca_file}, {"tls.cert_file", &t.cert_file}, {"tls.key_file", &t.key_file}};
  for (const auto& [key, path] : files) {
    if (path->empty()) continue;
    if (const auto read = read_whole_file(*path); !read)
      c.fail_plain(m.key(key), "cannot read '" + *path + "': " + read.failed().text());
  }
}

void parse_mysql_hosts(checker& c, const YAML::Node& a, const std::string& ap,
                       std::vector<host_port>& hosts, std::uint16_t default_port) {
  if (!c.list(a, ap, "expected a list of \"host:port\"")) return;
  if (a.size() > 16) c.fail(a, ap, "at most 16 hosts");
  std::set<std::string> seen;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::string ip = ap + "[" + std::to_string(i) + "]";
    std::string text;
    if (!c.scalar(a[i], ip, text)) continue;
    const auto hp = parse_host_port(text, default_port);
    if (!hp) {
      c.fail(a[i], ip, "expected \"host:port\", got '" + text + "': " + hp.failed().text());
    } else if (!seen.insert(hp->host + ":" + std::to_string(hp->port)).second) {
      c.fail(a[i], ip, "'" + text + "' is listed twice");
    } else {
      hosts.push_back(*hp);
    }
  }
  c.remember_line(ap, a);
}

void check_hosts_and_socket(const daemon_config& cfg, checker& c) {
  const auto& m = cfg.mysql;
  if (!m.hosts.empty() && !m.socket.empty())
    c.fail_plain(m.key("hosts"), "set hosts or socket, not both");
  // libpq reads an empty host as its environment's, one starting with '/' as a socket's
  // directory (no TLS, whatever tls.mode says) and a comma as a list of its own.
  if (m.engine == database_engine::postgresql &&
      (m.host.empty() || m.host.front() == '/' || m.host.find(',') != std::string::npos))
    c.fail_plain(m.key("host"), "'" + m.host +
                                    "' is not a host name or address (a socket's directory goes in "
                                    "postgresql.socket, several hosts in postgresql.hosts)");
}

// The flusher holds flush.connections connections while it writes; reads (GET
// /v1/counters) and the rollup need one more, or they wait for the whole flush.
void check_flush_connections(const daemon_config& cfg, checker& c) {
  if (cfg.flush.connections > 1 && cfg.mysql.pool_size < cfg.flush.connections + 1) {
    c.fail_plain("flush.connections", std::to_string(cfg.flush.connections) + " connections need " +
                                          cfg.mysql.key("pool_size") +
                                          " >= " + std::to_string(cfg.flush.connections + 1) +
                                          " (one more for reads and the rollup), but " +
                                          cfg.mysql.key("pool_size") + " is " +
                                          std::to_string(cfg.mysql.pool_size));
  }
}

}  // namespace slotted::config::detail
