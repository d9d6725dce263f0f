#include "config/config_keys.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <iterator>
#include <map>
#include <optional>

#include "config/checker.hpp"
#include "config/key_rows.hpp"
#include "model/increment.hpp"

namespace slotted::config {
namespace {

using namespace rows;

const options<fsync_mode>& fsync_modes() {
  static const options<fsync_mode> o{{"always", fsync_mode::always},
                                     {"interval", fsync_mode::interval},
                                     {"never", fsync_mode::never}};
  return o;
}
const options<log_level>& log_levels() {
  static const options<log_level> o{{"debug", log_level::debug},
                                    {"info", log_level::info},
                                    {"warn", log_level::warn},
                                    {"error", log_level::error}};
  return o;
}

// The keys whose values need more than a bound: parsed here, compared and changed by
// their row's generic functions.

std::optional<std::string> instance_id_text(const std::string& text) {
  if (!detail::is_valid_instance_id(text)) return std::nullopt;
  return text;
}
std::optional<std::string> ip_address(const std::string& text) {
  unsigned char buf[sizeof(in6_addr)];
  if (inet_pton(AF_INET, text.c_str(), buf) != 1 && inet_pton(AF_INET6, text.c_str(), buf) != 1)
    return std::nullopt;
  return text;
}
std::optional<std::string> socket_path(const std::string& text) {
  if (text.empty() || text.front() != '/' || text.size() > 107) return std::nullopt;
  return text;
}
// Octal, as chmod takes it: 0660, or "0660" quoted.
std::optional<unsigned> octal_mode(const std::string& text) {
  unsigned mode = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), mode, 8);
  if (text.empty() || r.ec != std::errc() || r.ptr != text.data() + text.size() || mode > 0777)
    return std::nullopt;
  return mode;
}

std::optional<std::string> endpoint_text_of(const std::string& text) {
  if (!listen_endpoint(text)) return std::nullopt;
  return text;
}

constexpr char ip_address_expected[] = "an IPv4 or IPv6 address";
constexpr char socket_path_expected[] = "an absolute path of at most 107 bytes";
constexpr char octal_mode_expected[] = "an octal mode 0000..0777";
constexpr char endpoint_expected[] = "ADDRESS:PORT with an IP address ([...] for IPv6)";

// A text the key checks itself: `Read` gives its value, or nullopt for a problem
// "expected EXPECTED, got 'TEXT'". With `SkipOther`, a value that is not a single one
// is left to string()'s own problem.
template <auto Read, const char* Expected, bool SkipOther, auto... Path>
void parse_checked(checker& c, const key_row&, const YAML::Node& a, const std::string& ap,
                   daemon_config& cfg) {
  std::string text;
  c.string(a, ap, text);
  if (SkipOther && !a.IsScalar()) return;
  if (const auto value = Read(text)) {
    field<Path...>(cfg) = *value;
  } else {
    c.fail(a, ap, std::string("expected ") + Expected + ", got '" + text + "'");
  }
}
template <auto Read, const char* Expected, bool SkipOther, auto... Path>
constexpr key_row checked(key_row r) {
  r.parse = &parse_checked<Read, Expected, SkipOther, Path...>;
  return r;
}

void parse_counters_key(checker& c, const key_row&, const YAML::Node& v, const std::string& p,
                        daemon_config& cfg) {
  detail::parse_counters(c, v, p, cfg.counters);
}

// Parsed once the counters are known (parse_config).
void defer_log_sources(checker& c, const key_row&, const YAML::Node& v, const std::string& p,
                       daemon_config&) {
  c.defer(p, v);
}

// A changed secret in the same file or variable is a change of the key that names it.
bool token_differs(const daemon_config& a, const daemon_config& b) {
  return a.http.auth_token_file != b.http.auth_token_file || a.http.auth_token != b.http.auth_token;
}
void adopt_token(daemon_config& running, const daemon_config& next) {
  running.http.auth_token_file = next.http.auth_token_file;
  running.http.auth_token = next.http.auth_token;
}
// counters is live but for the buckets and top, which need a restart (config.hpp,
// plan_reload).
std::vector<counter_decl> without_buckets(std::vector<counter_decl> counters) {
  for (auto& c : counters) {
    c.buckets.clear();
    c.top = false;
    c.dedupe = store::granularity::none;
    c.dedupe_keep = std::chrono::seconds(store::default_dedupe_keep_seconds);
  }
  return counters;
}
bool counters_differ(const daemon_config& a, const daemon_config& b) {
  return without_buckets(a.counters) != without_buckets(b.counters);
}
void change_counters(const key_row&, daemon_config& cfg) {
  counter_decl d;
  d.name = "changed";
  d.record_type = 1234567;
  cfg.counters.push_back(d);
}
// The buckets and top stay those the daemon runs with: restart keys (plan_reload).
void adopt_counters(daemon_config& running, const daemon_config& next) {
  auto counters = without_buckets(next.counters);
  for (auto& c : counters) {
    for (const auto& r : running.counters) {
      if (r.record_type == c.record_type) {
        c.buckets = r.buckets;
        c.top = r.top;
        c.dedupe = r.dedupe;
        c.dedupe_keep = r.dedupe_keep;
      }
    }
  }
  running.counters = std::move(counters);
}
bool buckets_differ(const daemon_config& a, const daemon_config& b) {
  return bucket_spec_of(a) != bucket_spec_of(b);
}
// The first counter, one declared if there is none (the change functions' subject).
counter_decl& first_counter(daemon_config& cfg) {
  if (cfg.counters.empty()) {
    counter_decl d;
    d.name = "changed";
    d.record_type = 1;
    cfg.counters.push_back(d);
  }
  return cfg.counters[0];
}
void change_buckets(const key_row&, daemon_config& cfg) {
  first_counter(cfg).buckets.push_back({store::granularity::day, std::chrono::hours(24) * 7});
}
// The totals tables are made by --migrate and written by every batch: a restart key.
bool top_differs(const daemon_config& a, const daemon_config& b) {
  return top_spec_of(a).record_types() != top_spec_of(b).record_types();
}
void change_top(const key_row&, daemon_config& cfg) {
  auto& c = first_counter(cfg);
  c.top = !c.top;
}
// The uniques table is made by --migrate, and the windows are fixed at start: a restart
// key.
bool dedupe_differs(const daemon_config& a, const daemon_config& b) {
  const auto windows = [](const daemon_config& cfg) {
    std::map<std::uint32_t, store::granularity> out;
    for (const auto& c : cfg.counters)
      if (c.dedupe != store::granularity::none) out[c.record_type] = c.dedupe;
    return out;
  };
  return windows(a) != windows(b);
}
void change_dedupe(const key_row&, daemon_config& cfg) {
  auto& c = first_counter(cfg);
  c.dedupe =
      c.dedupe == store::granularity::day ? store::granularity::hour : store::granularity::day;
}
// The keep of each counter's windows: a restart key, as the windows themselves.
bool dedupe_keep_differs(const daemon_config& a, const daemon_config& b) {
  for (const auto& x : a.counters)
    for (const auto& y : b.counters)
      if (x.record_type == y.record_type && x.dedupe_keep != y.dedupe_keep) return true;
  return false;
}
void change_dedupe_keep(const key_row&, daemon_config& cfg) {
  first_counter(cfg).dedupe_keep += std::chrono::hours(1);
}
void change_log_sources(const key_row&, daemon_config& cfg) {
  log_source s;
  s.path = "/var/log/changed.log";
  cfg.log_sources.push_back(s);
}

// The keys a reload applies (and the counters' parts, planned with them).
std::vector<key_row> live_keys() {
  return {
      live(choice<&log_levels, &C::log>("log.level", "info"), &adopt<&C::log>),
      live(secret(text<&C::http, &http_config::auth_token_file>("http.auth_token_file", "path",
                                                                "none", true),
                  &token_differs),
           &adopt_token),
      live(structured({.key = "counters",
                       .type = "list",
                       .default_value = "[]",
                       .parse = &parse_counters_key},
                      &counters_differ, &change_counters),
           &adopt_counters),
      part("counters[].name", "identifier", "(required)", "counters"),
      part("counters[].record_type", "integer", "(required)", "counters"),
      part("counters[].rollup.table", "identifier", "none", "counters"),
      part("counters[].rollup.id_column", "identifier", "none", "counters"),
      part("counters[].rollup.count_column", "identifier", "none", "counters"),
      structured({.key = "counters[].buckets", .type = "mapping", .default_value = "none"},
                 &buckets_differ, &change_buckets),
      part("counters[].buckets.hour", "duration", "none", "counters[].buckets"),
      part("counters[].buckets.day", "duration", "none", "counters[].buckets"),
      structured({.key = "counters[].top", .type = "boolean", .default_value = "false"},
                 &top_differs, &change_top),
      structured({.key = "counters[].dedupe", .type = "enum", .default_value = "none"},
                 &dedupe_differs, &change_dedupe),
      structured({.key = "counters[].dedupe_keep", .type = "duration", .default_value = "48h"},
                 &dedupe_keep_differs, &change_dedupe_keep),
      live(flag<&C::accept_undeclared_types>("accept_undeclared_types", "false"),
           &adopt<&C::accept_undeclared_types>),
  };
}

// Where and how it listens.
std::vector<key_row> listen_http_keys() {
  return {
      checked<&instance_id_text, detail::instance_id_expected, false, &C::instance_id>(
          text<&C::instance_id>("instance_id", "string",
                                "$SLOTTED_COUNTERD_INSTANCE_ID, else the host name")),
      checked<&ip_address, ip_address_expected, false, &C::listen_address>(
          text<&C::listen_address>("listen.address", "IP address", "127.0.0.1")),
      integer<&C::listen_port>("listen.port", 0, 65535, "8080"),
      checked<&socket_path, socket_path_expected, true, &C::listen_unix_socket>(
          text<&C::listen_unix_socket>("listen.unix_socket", "path", "none")),
      checked<&octal_mode, octal_mode_expected, true, &C::listen_unix_socket_mode>(
          typed(integer<&C::listen_unix_socket_mode>("listen.unix_socket_mode", 0, 0777, "0660"),
                "octal string")),
      checked<&endpoint_text_of, endpoint_expected, false, &C::metrics_listen>(
          text<&C::metrics_listen>("metrics.listen", "address:port", "none", true)),
      integer<&C::http, &http_config::max_connections>("http.max_connections", 1, 10'000'000,
                                                       "10000"),
      integer<&C::http, &http_config::threads>("http.threads", 0, 256, "0"),
      integer<&C::http, &http_config::max_body_bytes>("http.max_body_bytes", 64, 1ll << 30,
                                                      "1048576"),
      integer<&C::http, &http_config::max_items_per_request>("http.max_items_per_request", 1,
                                                             10'000'000, "100000"),
      time_key<&C::http, &http_config::idle_timeout>("http.idle_timeout", 100ms, 1h, "30s"),
  };
}

// Shards, flushing, rollup, the WAL, shutdown and idempotency.
std::vector<key_row> runtime_keys() {
  return {
      integer<&C::shards>("shards", 1, 4096, "64"),
      time_key<&C::flush, &flush_config::interval>("flush.interval", 10ms, 1h, "1s"),
      integer<&C::flush, &flush_config::max_rows_per_statement>("flush.max_rows_per_statement", 1,
                                                                100000, "1000"),
      integer<&C::flush, &flush_config::slots>("flush.slots", 1, 65535, "100"),
      integer<&C::flush, &flush_config::max_pending_keys>("flush.max_pending_keys", 1,
                                                          1'000'000'000, "5000000"),
      integer<&C::flush, &flush_config::max_pending_bytes>("flush.max_pending_bytes", 1ll << 20,
                                                           1ll << 40, "402653184"),
      time_key<&C::flush, &flush_config::max_retry_backoff>("flush.max_retry_backoff", 10ms, 1h,
                                                            "30s"),
      // Sizes the flusher's writers against the pool, which is sized at start.
      integer<&C::flush, &flush_config::connections>("flush.connections", 1, max_flush_connections,
                                                     "1", true),
      time_key<&C::rollup, &rollup_config::interval>("rollup.interval", 100ms, 24h, "60s"),
      integer<&C::rollup, &rollup_config::batch_size>("rollup.batch_size", 1, 100000, "500"),
      text<&C::wal, &wal_config::dir>("wal.dir", "path", "$STATE_DIRECTORY, else none"),
      choice<&fsync_modes, &C::wal, &wal_config::fsync>("wal.fsync", "never"),
      time_key<&C::wal, &wal_config::fsync_interval>("wal.fsync_interval", 1ms, 10s, "10ms"),
      time_key<&C::shutdown_timeout>("shutdown_timeout", 100ms, 1h, "30s"),
      time_key<&C::idempotency, &idempotency_config::window>("idempotency.window", 1s, 24h * 30,
                                                             "24h"),
      integer<&C::idempotency, &idempotency_config::max_keys>("idempotency.max_keys", 1,
                                                              100'000'000, "1000000"),
  };
}

// The access logs it counts from.
std::vector<key_row> log_source_keys() {
  return {
      structured({.key = "log_sources",
                  .type = "list",
                  .default_value = "[]",
                  .parse = &defer_log_sources},
                 &differs<&C::log_sources>, &change_log_sources),
      part("log_sources[].path", "path", "(required)", "log_sources"),
      part("log_sources[].format", "enum", "combined", "log_sources"),
      part("log_sources[].rotation", "enum or glob", "numbered", "log_sources"),
      part("log_sources[].rotate_wait", "duration", "5s", "log_sources"),
      part("log_sources[].json.time", "string", "time", "log_sources"),
      part("log_sources[].json.method", "string", "method", "log_sources"),
      part("log_sources[].json.path", "string", "path", "log_sources"),
      part("log_sources[].json.status", "string", "status", "log_sources"),
      part("log_sources[].json.client", "string", "remote_addr", "log_sources"),
      part("log_sources[].json.user_agent", "string", "user_agent", "log_sources"),
      part("log_sources[].rules", "list", "(required)", "log_sources"),
      part("log_sources[].rules[].counter", "string", "(required)", "log_sources"),
      part("log_sources[].rules[].path", "regex", "(required)", "log_sources"),
      part("log_sources[].rules[].methods", "list of strings", "[GET]", "log_sources"),
      part("log_sources[].rules[].statuses", "list of integers", "[200]", "log_sources"),
      part("log_sources[].rules[].user_agent", "regex", "none", "log_sources"),
      part("log_sources[].rules[].not_user_agent", "regex", "none", "log_sources"),
  };
}

// The table. Its order is the order of a reload plan's lists.
const std::vector<key_row>& table() {
  static const std::vector<key_row> rows = [] {
    std::vector<key_row> all;
    for (auto part :
         {live_keys(), listen_http_keys(), database_keys(), runtime_keys(), log_source_keys()})
      all.insert(all.end(), std::make_move_iterator(part.begin()),
                 std::make_move_iterator(part.end()));
    return all;
  }();
  return rows;
}

}  // namespace

std::span<const key_row> config_keys() {
  return table();
}

const key_row* find_key(std::string_view key) {
  for (const auto& r : table()) {
    if (r.key == key) return &r;
  }
  return nullptr;
}

std::string_view plan_name(const key_row& row) {
  return row.plan_as.empty() ? row.key : row.plan_as;
}

void adopt_live(daemon_config& running, const daemon_config& next) {
  for (const auto& r : table()) {
    if (r.adopt != nullptr) r.adopt(running, next);
  }
}

}  // namespace slotted::config
