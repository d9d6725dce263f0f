#pragma once
// The daemon's configuration (README: Configuration), loaded from YAML and validated whole.
//
// load_config() either returns a fully valid config or throws config_error listing
// every problem found, each naming the key and its line ("line 12: flush.slots: ...").
// The password is resolved from password_file or password_env and is never part of
// any message.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "config/duration.hpp"
#include "config/log_sources.hpp"
#include "model/buckets.hpp"
#include "model/top_spec.hpp"
#include "model/uniques.hpp"

namespace slotted::config {

struct rollup_target {
  std::string table;
  std::string id_column;
  std::string count_column;
  bool operator==(const rollup_target&) const = default;
};

// counters[i].buckets: a granularity and its retention (README: Configuration).
struct bucket_decl {
  store::granularity granularity = store::granularity::hour;
  duration retention{0};
  bool operator==(const bucket_decl&) const = default;
};

struct counter_decl {
  std::string name;
  std::uint32_t record_type = 0;
  std::optional<rollup_target> rollup;
  std::vector<bucket_decl> buckets{};  // hour before day, each at most once
  // counters[i].top: keeps the totals tables of top-N (db/top.hpp), off by default.
  bool top = false;
  // counters[i].dedupe: hour or day, the window in which an item with a `client` counts
  // once (model/uniques.hpp); none by default.
  store::granularity dedupe = store::granularity::none;
  // counters[i].dedupe_keep: how long after a window ends its decisions are kept, so
  // that a late item counts once in it (model/uniques.hpp); only with dedupe.
  duration dedupe_keep = std::chrono::seconds(store::default_dedupe_keep_seconds);
  bool operator==(const counter_decl&) const = default;
};

enum class fsync_mode { always, interval, never };
enum class log_level { debug, info, warn, error };

struct http_config {
  unsigned threads = 0;  // 0: hardware threads
  std::size_t max_body_bytes = 1048576;
  std::size_t max_items_per_request = 100000;
  duration idle_timeout = std::chrono::seconds(30);
  std::size_t max_connections = 10000;  // beyond it new connections get 503 and are closed
  std::string auth_token_file;
  std::string auth_token;  // resolved from auth_token_file
};

// mysql.tls (README "Production databases").
enum class tls_mode { disabled, preferred, required, verify_ca, verify_identity };

struct tls_config {
  tls_mode mode = tls_mode::preferred;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  bool operator==(const tls_config&) const = default;
};

struct host_port {
  std::string host;
  std::uint16_t port = 3306;
  bool operator==(const host_port&) const = default;
};

// The server the database section names: `mysql:` a MariaDB (or MySQL) server,
// `postgresql:` a PostgreSQL one (docs/postgresql.md). A config has one of the two; both
// take the same keys, and postgresql.schema besides.
enum class database_engine { mariadb, postgresql };

inline constexpr std::uint16_t mariadb_default_port = 3306;
inline constexpr std::uint16_t postgresql_default_port = 5432;

struct mysql_config {
  database_engine engine = database_engine::mariadb;
  std::string host = "127.0.0.1";
  std::uint16_t port = 3306;
  std::string socket;
  std::string user = "counterd";
  std::string password_file;
  std::string password_env;
  std::string password;  // resolved; never logged
  std::string database = "app";
  std::string table = "slotted_counters";
  duration connect_timeout = std::chrono::seconds(5);
  unsigned pool_size = 2;
  // When not empty, replaces host/port: tried in order, with failover.
  std::vector<host_port> hosts;
  tls_config tls;
  std::string schema = "public";  // postgresql.schema: where the tables are (search_path)

  // The section's name, "mysql" or "postgresql", and one of its keys as the config
  // names it: key("tls.ca_file") is "postgresql.tls.ca_file" in a postgresql: section.
  std::uint16_t default_port() const {
    return engine == database_engine::postgresql ? postgresql_default_port : mariadb_default_port;
  }
  std::string_view section() const {
    return engine == database_engine::postgresql ? "postgresql" : "mysql";
  }
  std::string key(std::string_view name) const {
    return std::string(section()) + "." + std::string(name);
  }
};

// Beyond a few connections a flush gains nothing (bench/RESULTS.md, flushing over
// several connections) and only takes connections from the server.
inline constexpr unsigned max_flush_connections = 16;

struct flush_config {
  duration interval = std::chrono::seconds(1);
  std::size_t max_rows_per_statement = 1000;
  unsigned slots = 100;
  std::size_t max_pending_keys = 5000000;
  // The memory what is pending may take, as charged per entry (store/pending_charge.hpp):
  // 384 MiB, more than the 360 MB 5,000,000 counters are charged, so plain counters meet
  // max_pending_keys first and larger entries (unique items, keyed requests) this.
  std::size_t max_pending_bytes = std::size_t{384} << 20;
  duration max_retry_backoff = std::chrono::seconds(30);
  // Connections the queued batches are written over at once (README: Configuration),
  // 1 to max_flush_connections.
  unsigned connections = 1;
};

struct rollup_config {
  duration interval = std::chrono::seconds(60);
  std::size_t batch_size = 500;
};

struct wal_config {
  std::string dir;
  // never by default: the cheapest mode, and every mode survives a SIGKILL (bench/RESULTS.md,
  // issue 40; docs/guarantees.md says what each loses on a power cut).
  fsync_mode fsync = fsync_mode::never;
  duration fsync_interval = std::chrono::milliseconds(10);
};

// Idempotency-Key (README: HTTP API): keys accepted longer ago are forgotten.
struct idempotency_config {
  duration window = std::chrono::hours(24);
  // Keys the local index remembers at most (oldest forgotten first); the database's
  // keys table is the authority and is bounded by the window alone.
  std::size_t max_keys = 1000000;
};

struct daemon_config {
  std::string instance_id;  // default: hostname
  std::string listen_address = "127.0.0.1";
  std::uint16_t listen_port = 8080;  // 0: any free port (tests)
  // The same API on a Unix socket besides TCP (empty: none), with these permissions.
  std::string listen_unix_socket;
  unsigned listen_unix_socket_mode = 0660;
  // metrics.listen: "ADDRESS:PORT" ("[v6]:PORT") where /metrics is served instead of on
  // the API's listeners (empty: on them, as before). See listen_endpoint().
  std::string metrics_listen;
  http_config http;
  mysql_config mysql;
  std::vector<counter_decl> counters;
  bool accept_undeclared_types = false;
  unsigned shards = 64;
  flush_config flush;
  rollup_config rollup;
  wal_config wal;
  idempotency_config idempotency;
  duration shutdown_timeout = std::chrono::seconds(30);
  log_level log = log_level::info;
  std::vector<log_source> log_sources;  // config/log_sources.hpp
};

// An "ADDRESS:PORT" or "[IPv6]:PORT" text (metrics.listen) as its address and port, or
// nullopt when it is not one (the address must be an IP literal; port 0: any free one).
struct endpoint_text {
  std::string address;
  std::uint16_t port = 0;
};
std::optional<endpoint_text> listen_endpoint(std::string_view text);

// wal.dir when the config does not set it: the first directory of $STATE_DIRECTORY
// (systemd sets it from the unit's StateDirectory=; a container image may set it too),
// or none (no WAL) when it is unset or empty.
std::string default_wal_dir();

class config_error : public std::runtime_error {
 public:
  explicit config_error(std::vector<std::string> problems);
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
};

// The database credentials given on the command line (--mysql-user USER,
// --mysql-password-file FILE), which take the place of the config's, in every mode: an
// administrator runs --migrate (or --check-config, --adopt) with the very config the
// service uses. A user given without a password file connects without a password (the
// config's password is the config user's); a password file given alone is the
// config user's password. Either replaces the config's mysql.password_file and
// mysql.password_env, which are then not read (a systemd credential, say, that only
// the service can read).
struct mysql_credentials {
  std::optional<std::string> user;
  std::optional<std::string> password_file;
  bool operator==(const mysql_credentials&) const = default;
};

// Puts `over` in place of m's user and password source (the one place the command
// line's credentials are applied; load_config and parse_config call it before the
// password is read). Returns the problems of `over` itself (an empty user or path).
std::vector<std::string> apply_credentials(mysql_config& m, const mysql_credentials& over);

// Reads and validates FILE. Throws config_error on any problem (including an
// unreadable file, a missing password file or an unset password variable), naming a
// password file but never its content. With `read_secrets` false (--print-grants, which
// needs neither), the password and the auth token are not read: a shell may not be
// able to read the credentials the service gets.
daemon_config load_config(const std::string& path, const mysql_credentials& over = {},
                          bool read_secrets = true);

// Same, from YAML text; `origin` names the source in messages.
daemon_config parse_config(const std::string& yaml_text, const std::string& origin = "config",
                           const mysql_credentials& over = {}, bool read_secrets = true);

// What a reload (SIGHUP) does with a newly loaded config. Keys are named as in the
// YAML. Applied live: log.level, http.auth_token_file (the token is read again, so a
// changed token in the same file counts), counters (names, record types, rollup
// targets) and accept_undeclared_types. Every other changed key is listed in
// needs_restart and keeps its running value until the next start; so does
// counters[].buckets (reported as "counters[].buckets"): the WAL and the pending
// buckets are formed under the buckets the daemon started with; and counters[].top
// (reported as "counters[].top"): the totals tables are made by --migrate and written by
// every batch under the spec the daemon started with; and counters[].dedupe (reported as
// "counters[].dedupe"): its table is made by --migrate and its windows fixed at start. Secrets are
// compared but never shown: a changed password is reported by its source key.
struct reload_plan {
  std::vector<std::string> live;
  std::vector<std::string> needs_restart;
};
reload_plan plan_reload(const daemon_config& running, const daemon_config& next);

// The counters of `cfg` that keep buckets (counters[].buckets), as the store, the
// router and the flusher take them.
store::bucket_spec bucket_spec_of(const daemon_config& cfg);

// The counters of `cfg` that keep the totals of top-N (counters[].top), as the flusher,
// the log ingester, the pruner, adoption, --migrate and the router take them.
store::top_spec top_spec_of(const daemon_config& cfg);

// The counters of `cfg` that dedupe items with a `client` (counters[].dedupe), as the
// router, the store, the flusher, the pruner and --migrate take them.
store::dedupe_spec dedupe_spec_of(const daemon_config& cfg);

// README, Configuration: ^[A-Za-z_][A-Za-z0-9_]{0,63}$
bool is_valid_identifier(std::string_view name);

}  // namespace slotted::config
