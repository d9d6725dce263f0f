#pragma once
// The row builders of the config's key table (config_keys.cpp, database_keys.cpp): a
// row per key in a few lines, each kind of value parsed, compared, changed and adopted
// by one generic function, reached through the fields the row names.

#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "config/checker.hpp"
#include "config/config_keys.hpp"

namespace slotted::config::rows {

using namespace std::chrono_literals;
using detail::checker;
using rk = reload_kind;

// clang-format 14 writes the fold over member pointers below as `.*....*`.
// clang-format off
// A key's value in a config: field<&daemon_config::http, &http_config::threads>(cfg).
template <auto... Path>
auto& field(daemon_config& c) {
  return (c .* ... .* Path);
}
template <auto... Path>
const auto& field(const daemon_config& c) {
  return (c .* ... .* Path);
}
// clang-format on

template <auto... Path>
bool differs(const daemon_config& a, const daemon_config& b) {
  return field<Path...>(a) != field<Path...>(b);
}
// Live keys: the reload takes the new value.
template <auto... Path>
void adopt(daemon_config& running, const daemon_config& next) {
  field<Path...>(running) = field<Path...>(next);
}

// The generic parse and change of each kind of value, bounds from the row.
template <auto... Path>
void parse_integer(checker& c, const key_row& r, const YAML::Node& v, const std::string& p,
                   daemon_config& cfg) {
  auto& out = field<Path...>(cfg);
  using T = std::remove_reference_t<decltype(out)>;
  c.integer<T>(v, p, static_cast<T>(r.lo), static_cast<T>(r.hi), out);
  if (r.keep_line) c.remember_line(p, v);
}
template <auto... Path>
void change_integer(const key_row& r, daemon_config& cfg) {
  auto& f = field<Path...>(cfg);
  using T = std::remove_reference_t<decltype(f)>;
  f = f == static_cast<T>(r.lo) ? static_cast<T>(r.hi) : static_cast<T>(r.lo);
}
template <auto... Path>
void parse_duration_key(checker& c, const key_row& r, const YAML::Node& v, const std::string& p,
                        daemon_config& cfg) {
  c.time_span(v, p, duration(r.lo), duration(r.hi), field<Path...>(cfg));
}
template <auto... Path>
void change_duration(const key_row& r, daemon_config& cfg) {
  auto& f = field<Path...>(cfg);
  f = f == duration(r.lo) ? duration(r.hi) : duration(r.lo);
}
// A string, identifier or boolean: read by the checker's `Read` (checker::string, ...).
template <auto Read, auto... Path>
void parse_with(checker& c, const key_row& r, const YAML::Node& v, const std::string& p,
                daemon_config& cfg) {
  (c.*Read)(v, p, field<Path...>(cfg));
  if (r.keep_line) c.remember_line(p, v);
}
template <auto... Path>
void change_string(const key_row&, daemon_config& cfg) {
  field<Path...>(cfg) += "x";
}
template <auto... Path>
void change_boolean(const key_row&, daemon_config& cfg) {
  field<Path...>(cfg) = !field<Path...>(cfg);
}
template <typename Enum>
using options = std::vector<std::pair<std::string, Enum>>;
template <auto Options, auto... Path>
void parse_choice(checker& c, const key_row& r, const YAML::Node& v, const std::string& p,
                  daemon_config& cfg) {
  c.choice(v, p, Options(), field<Path...>(cfg));
  if (r.keep_line) c.remember_line(p, v);
}
template <auto Options, auto... Path>
void change_choice(const key_row&, daemon_config& cfg) {
  auto& f = field<Path...>(cfg);
  f = Options().front().second == f ? Options().back().second : Options().front().second;
}

// A row of each kind; `key`, `type` and `def` as in docs/configuration.md.
// The row builders keep a row to a few lines, as the table reads them.
// clang-format off
template <auto... Path>
constexpr key_row integer(std::string_view key, long long lo, long long hi, std::string_view def,
                          bool keep_line = false) {
  return {.key = key, .type = "integer", .default_value = def, .parse = &parse_integer<Path...>,
          .differs = &differs<Path...>, .change = &change_integer<Path...>, .lo = lo, .hi = hi,
          .keep_line = keep_line};
}
template <auto... Path>
constexpr key_row time_key(std::string_view key, duration lo, duration hi, std::string_view def) {
  return {.key = key, .type = "duration", .default_value = def,
          .parse = &parse_duration_key<Path...>, .differs = &differs<Path...>,
          .change = &change_duration<Path...>, .lo = lo.count(), .hi = hi.count()};
}
template <auto... Path>
constexpr key_row text(std::string_view key, std::string_view type, std::string_view def,
                       bool keep_line = false) {
  return {.key = key, .type = type, .default_value = def, .parse = &parse_with<&checker::string, Path...>,
          .differs = &differs<Path...>, .change = &change_string<Path...>,
          .keep_line = keep_line};
}
template <auto... Path>
constexpr key_row identifier(std::string_view key, std::string_view def) {
  return {.key = key, .type = "identifier", .default_value = def,
          .parse = &parse_with<&checker::identifier, Path...>, .differs = &differs<Path...>,
          .change = &change_string<Path...>};
}
template <auto Options, auto... Path>
constexpr key_row choice(std::string_view key, std::string_view def, bool keep_line = false) {
  return {.key = key, .type = "enum", .default_value = def, .parse = &parse_choice<Options, Path...>,
          .differs = &differs<Path...>, .change = &change_choice<Options, Path...>,
          .keep_line = keep_line};
}
// A key parsed by the structured key `whole` that holds it, planned as part of it.
constexpr key_row part(std::string_view key, std::string_view type, std::string_view def,
                       std::string_view whole) {
  return {.key = key, .type = type, .default_value = def, .plan_as = whole};
}
template <auto... Path>
constexpr key_row flag(std::string_view key, std::string_view def) {
  return {.key = key, .type = "boolean", .default_value = def, .parse = &parse_with<&checker::boolean, Path...>,
          .differs = &differs<Path...>, .change = &change_boolean<Path...>};
}
// clang-format on
// A key a reload applies: `adopt` takes the new value.
constexpr key_row live(key_row r, decltype(key_row::adopt) adopt) {
  r.reload = rk::live;
  r.adopt = adopt;
  return r;
}
constexpr key_row typed(key_row r, std::string_view type) {
  r.type = type;
  return r;
}
// One of several keys a plan names as one (`whole`).
constexpr key_row planned_as(key_row r, std::string_view whole) {
  r.plan_as = whole;
  return r;
}

constexpr auto structured(key_row r, decltype(key_row::differs) differs,
                          decltype(key_row::change) change) {
  r.differs = differs;
  r.change = change;
  return r;
}
inline key_row secret(key_row r, bool (*differs)(const daemon_config&, const daemon_config&)) {
  r.secret = true;
  r.differs = differs;
  return r;
}

using C = daemon_config;

// The database's keys: the mysql: section's, then the postgresql: section's.
std::vector<key_row> database_keys();

}  // namespace slotted::config::rows
