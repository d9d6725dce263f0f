#pragma once
// log_sources (docs/configuration.md, Counting from access logs): the web server access
// logs the daemon reads increments from, beside HTTP. Plain values, validated by
// parse_log_sources (log_sources_parse.hpp) as part of load_config().

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace re2 {
class RE2;
}

namespace slotted::config {

enum class log_format { combined, json };

// log_sources[].rules[i]: lines whose method and status are listed and whose request
// path (query string cut off, not decoded) `path` finds count one for the counter named
// `counter`, under the record_id its first capture group reads (a decimal number), when
// `user_agent` (if set) finds their user agent and `not_user_agent` (if set) does not.
// A source's rules are tried in order: a line counts for the first that matches it.
struct log_rule {
  std::string counter;
  std::string path;  // a regular expression (RE2 syntax, compile_pattern), searched
  std::vector<std::string> methods{"GET"};
  std::vector<unsigned> statuses{200};
  std::string user_agent{};      // a regular expression searched in the user agent; "": any
  std::string not_user_agent{};  // ... that must not find it; "": none
  bool operator==(const log_rule&) const = default;
};

// A rule's pattern compiled by RE2: matched in time linear in the text, whatever the
// pattern (no backtracking; bench/RESULTS.md, Linear-time matching). Null, with `error`
// saying why, when RE2 does not take it (a backreference, a lookaround: what only a
// backtracking engine can do), when it uses what boost::regex (the engine before issue
// 39) read otherwise and RE2 takes silently (\< \> \` \' and [[.x.]] [[=x=]]: a
// config written for boost would count other lines), or when it has no capture group.
using shared_pattern = std::shared_ptr<const re2::RE2>;
struct compiled_pattern {
  shared_pattern re;
  std::string error;
};
compiled_pattern compile_pattern(const std::string& pattern, bool group = true);

// log_sources[].json: the names of the fields of a `format: json` line.
struct log_json_fields {
  std::string time = "time";      // ISO 8601 with offset ($time_iso8601) or unix seconds ($msec)
  std::string method = "method";  // $request_method
  std::string path = "path";      // $request_uri (its query string is cut off)
  std::string status = "status";  // $status, a number or a string of digits
  // $remote_addr: the client of a counter with `dedupe` (a line without it, or with "" or
  // "-", counts as an item without a client).
  std::string client = "remote_addr";
  std::string user_agent = "user_agent";  // $http_user_agent: for rules[].user_agent
  bool operator==(const log_json_fields&) const = default;
};

// log_sources[].rotation: where the rotated files of PATH are (logrotate's names), looked
// at for the file of the committed position and the files after it.
enum class rotation_scheme {
  numbered,  // PATH.1, PATH.2.gz, ... (logrotate's default; Debian's nginx)
  dateext,   // PATH-<digits>[...], PATH-20261201.gz (logrotate dateext; RHEL's default)
  glob,      // the files `rotated_glob` names (olddir, another dateformat)
};

struct log_source {
  std::string path;  // absolute
  log_format format = log_format::combined;
  log_json_fields json;
  std::vector<log_rule> rules;
  rotation_scheme rotation = rotation_scheme::numbered;
  std::string rotated_glob{};  // rotation: glob: an absolute pattern (glob(7))
  // How long a rotated file is still read after the file that follows it appeared and
  // after it last grew: the web server writes to it until it reopens its log.
  std::chrono::milliseconds rotate_wait{5000};
  bool operator==(const log_source&) const = default;
};

// A line longer than this (its newline included) is skipped, never buffered whole.
inline constexpr std::size_t max_log_line_bytes = 16384;

}  // namespace slotted::config
