#pragma once
// log_sources (docs/configuration.md, Counting from access logs): the web server access
// logs the daemon reads increments from, beside HTTP. Plain values, validated by
// parse_log_sources (log_sources_parse.hpp) as part of load_config().

#include <chrono>
#include <string>
#include <vector>

namespace slotted::config {

enum class log_format { combined, json };

// log_sources[].rules[i]: lines whose method and status are listed and whose request
// path (query string cut off, not decoded) `path` finds count one for the counter named
// `counter`, under the record_id its first capture group reads (a decimal number).
struct log_rule {
  std::string counter;
  std::string path;  // a regular expression (Perl syntax, boost::regex), searched
  std::vector<std::string> methods{"GET"};
  std::vector<unsigned> statuses{200};
  bool operator==(const log_rule&) const = default;
};

// log_sources[].json: the names of the fields of a `format: json` line.
struct log_json_fields {
  std::string time = "time";      // ISO 8601 with offset ($time_iso8601) or unix seconds ($msec)
  std::string method = "method";  // $request_method
  std::string path = "path";      // $request_uri (its query string is cut off)
  std::string status = "status";  // $status, a number or a string of digits
  // $remote_addr: the client of a counter with `dedupe` (a line without it, or with "" or
  // "-", counts as an item without a client).
  std::string client = "remote_addr";
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
  std::string rotated_glob;  // rotation: glob: an absolute pattern (glob(7))
  // How long a rotated file is still read after the file that follows it appeared and
  // after it last grew: the web server writes to it until it reopens its log.
  std::chrono::milliseconds rotate_wait{5000};
  bool operator==(const log_source&) const = default;
};

// A line longer than this (its newline included) is skipped, never buffered whole.
inline constexpr std::size_t max_log_line_bytes = 16384;

}  // namespace slotted::config
