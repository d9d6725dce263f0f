// The database connection's keys: the mysql: section, and the postgresql: section that
// takes the same keys into the same fields (config.hpp, mysql_config), plus its schema.

#include <deque>
#include <string>
#include <vector>

#include "config/key_rows.hpp"

namespace slotted::config::rows {
namespace {

const options<tls_mode>& tls_modes() {
  static const options<tls_mode> o{{"disabled", tls_mode::disabled},
                                   {"preferred", tls_mode::preferred},
                                   {"required", tls_mode::required},
                                   {"verify_ca", tls_mode::verify_ca},
                                   {"verify_identity", tls_mode::verify_identity}};
  return o;
}

void refuse_password(checker& c, const key_row&, const YAML::Node& a, const std::string& ap,
                     daemon_config&) {
  c.fail(a, ap, "passwords do not belong in the config file: use password_file or password_env");
}

void parse_hosts(checker& c, const key_row&, const YAML::Node& a, const std::string& ap,
                 daemon_config& cfg) {
  detail::parse_mysql_hosts(c, a, ap, cfg.mysql.hosts, cfg.mysql.default_port());
}

template <std::string mysql_config::*Source>
bool password_differs(const daemon_config& a, const daemon_config& b) {
  const std::string &was = a.mysql.*Source, &is = b.mysql.*Source;
  return was != is || (!is.empty() && a.mysql.password != b.mysql.password);
}

void change_hosts(const key_row&, daemon_config& cfg) {
  cfg.mysql.hosts.push_back({"changed.example", 3307});
}

// A file of mysql.tls, planned as the whole of it.
template <auto File>
key_row tls_file(std::string_view key) {
  return planned_as(text<&C::mysql, &mysql_config::tls, File>(key, "path", "none", true),
                    "mysql.tls");
}

// The database connection.
std::vector<key_row> mysql_keys() {
  return {
      text<&C::mysql, &mysql_config::host>("mysql.host", "string", "127.0.0.1"),
      integer<&C::mysql, &mysql_config::port>("mysql.port", 1, 65535, "3306"),
      text<&C::mysql, &mysql_config::socket>("mysql.socket", "path", "none"),
      structured({.key = "mysql.hosts",
                  .type = "list of host:port",
                  .default_value = "[]",
                  .parse = &parse_hosts},
                 &differs<&C::mysql, &mysql_config::hosts>, &change_hosts),
      planned_as(choice<&tls_modes, &C::mysql, &mysql_config::tls, &tls_config::mode>(
                     "mysql.tls.mode", "preferred", true),
                 "mysql.tls"),
      tls_file<&tls_config::ca_file>("mysql.tls.ca_file"),
      tls_file<&tls_config::cert_file>("mysql.tls.cert_file"),
      tls_file<&tls_config::key_file>("mysql.tls.key_file"),
      text<&C::mysql, &mysql_config::user>("mysql.user", "string", "counterd"),
      {.key = "mysql.password",
       .type = "(refused)",
       .default_value = "",
       .reload = rk::refused,
       .secret = true,
       .parse = &refuse_password},
      secret(text<&C::mysql, &mysql_config::password_file>("mysql.password_file", "path", "none",
                                                           true),
             &password_differs<&mysql_config::password_file>),
      secret(text<&C::mysql, &mysql_config::password_env>("mysql.password_env", "string", "none",
                                                          true),
             &password_differs<&mysql_config::password_env>),
      identifier<&C::mysql, &mysql_config::database>("mysql.database", "app"),
      identifier<&C::mysql, &mysql_config::table>("mysql.table", "slotted_counters"),
      time_key<&C::mysql, &mysql_config::connect_timeout>("mysql.connect_timeout", 100ms, 5min,
                                                          "5s"),
      integer<&C::mysql, &mysql_config::pool_size>("mysql.pool_size", 1, 64, "2"),
  };
}

// The postgresql: section: mysql:'s keys into the same fields, and postgresql.schema. Its
// rows parse; the mysql rows compare (plan_reload names a change by the new config's section).
std::vector<key_row> postgresql_keys() {
  static std::deque<std::string> names;  // what the rows' keys view; the table is built once
  std::vector<key_row> rows;
  for (auto r : mysql_keys()) {
    r.plan_as = r.key;
    r.key = names.emplace_back("postgresql" + std::string(r.key.substr(r.key.find('.'))));
    r.differs = nullptr;
    r.change = nullptr;
    if (r.key == "postgresql.port") r.default_value = "5432";
    rows.push_back(r);
  }
  rows.push_back(identifier<&C::mysql, &mysql_config::schema>("postgresql.schema", "public"));
  return rows;
}

}  // namespace

std::vector<key_row> database_keys() {
  auto rows = mysql_keys();
  for (auto& r : postgresql_keys()) rows.push_back(r);
  return rows;
}

}  // namespace slotted::config::rows
