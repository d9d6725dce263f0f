#pragma once
// The one table of the config's keys (docs/configuration.md, Keys): per key its dotted
// name, type, default, bounds, whether a reload applies it (live) or it waits for a
// restart, whether it names a secret, and how it is parsed, compared and applied.
// It drives the parser (parse_config walks the YAML by it: a key without a row is an
// "unknown key"), plan_reload (which iterates it, so no key can be left out of a plan),
// the reload's apply step (adopt_live) and the reference check (tests/docs/man_test.py
// compares docs/configuration.md's key table with it, printed by tests/docs/config_keys).

#include <span>
#include <string>
#include <string_view>

#include "config/config.hpp"

namespace YAML {
class Node;
}

namespace slotted::config {
namespace detail {
class checker;
}

// live: a reload applies it; restart: a reload reports it and keeps the running value;
// refused: any value is an error (mysql.password).
enum class reload_kind { live, restart, refused };

struct key_row {
  // As in the YAML and docs/configuration.md: "http.threads", "counters[].name".
  std::string_view key;
  std::string_view type;           // as docs/configuration.md's type column
  std::string_view default_value;  // as its default column, without backquotes
  reload_kind reload = reload_kind::restart;
  // Names a secret (a password or token source): a plan compares the secret and names
  // the key, never the value.
  bool secret = false;
  // The key a reload plan names when this one changes (empty: `key`), e.g. "mysql.tls"
  // for its four keys.
  std::string_view plan_as{};
  // Parses the value at `path` into cfg. nullptr: parsed by the structured key that
  // holds it (counters[].name by counters), which has a row of its own.
  void (*parse)(detail::checker&, const key_row&, const YAML::Node& value, const std::string& path,
                daemon_config& cfg) = nullptr;
  // Whether a and b differ in this key. nullptr: compared as part of `plan_as`.
  bool (*differs)(const daemon_config& a, const daemon_config& b) = nullptr;
  // Makes cfg differ in this key alone (tests: a change of any key is planned).
  void (*change)(const key_row&, daemon_config& cfg) = nullptr;
  // live keys: takes next's value into running (the reload's apply step).
  void (*adopt)(daemon_config& running, const daemon_config& next) = nullptr;
  // Bounds of an integer, or of a duration in milliseconds (lo == hi == 0: none).
  long long lo = 0;
  long long hi = 0;
  // Its line is kept for a problem found after the walk (a secret file, a check
  // across keys).
  bool keep_line = false;
};

// Every key, in the order a reload plan lists them.
std::span<const key_row> config_keys();

// The row of `key` (indexes written as "[]"), or nullptr.
const key_row* find_key(std::string_view key);

// The key a plan names for a change of `row`.
std::string_view plan_name(const key_row& row);

// Takes every live key of `next` into `running` (what a reload applies).
void adopt_live(daemon_config& running, const daemon_config& next);

}  // namespace slotted::config
