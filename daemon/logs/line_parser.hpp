#pragma once
// The access log line parsers (config/log_sources.hpp formats) and the rules that turn a
// parsed line into counts. Pure, no I/O, no allocation per line for `combined`.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/log_sources.hpp"

namespace slotted::logs {

// What a line says, as views into the line (or into `scratch` for an unescaped json path).
struct parsed_line {
  std::string_view method;
  std::string_view path;  // the request path, its query string cut off, not decoded
  unsigned status = 0;
  std::int64_t at = 0;      // unix seconds
  std::string_view client;  // the remote address; empty when the line has none (or "-")
  // The user agent as written (escapes kept), when the parser was asked for it; empty
  // when the line has none.
  std::string_view user_agent{};
};

// nginx/Apache combined:
//   $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent ...
// The client is the text before the first space ($remote_addr).
// The time "10/Oct/2000:13:55:36 -0700"; the request "METHOD URI PROTOCOL" (a request
// that is no such line, "-" say, gives its whole text as the method and an empty path).
// False: the line is not of that shape (malformed). `line` excludes its newline.
// With `user_agent`, the user agent is the quoted field after the referer's
// (... $status $body_bytes_sent "$http_referer" "$http_user_agent"), empty when the line
// ends before it (common log format) or has another shape there.
bool parse_combined(std::string_view line, parsed_line& out, bool user_agent = false);

// One flat JSON object (nginx log_format ... escape=json), its fields named by `fields`.
// The time: ISO 8601 with an offset or Z ($time_iso8601), or unix seconds with an
// optional fraction ($msec). A path with escapes is unescaped into `scratch`. The client
// field, when a string, is taken as written (escapes kept: it is an opaque identity);
// any other value is no client. The user agent likewise (a string, escapes kept), from
// the field fields.user_agent.
bool parse_json(std::string_view line, const config::log_json_fields& fields, parsed_line& out,
                std::string& scratch);

// Unix seconds of a civil UTC date and time.
std::int64_t unix_seconds(int year, unsigned month, unsigned day, unsigned hour, unsigned minute,
                          unsigned second);

// Whether a line's time can be counted at `now` (unix seconds): from 1970 up to
// now + ingest::max_at_ahead_seconds, the bound HTTP increments have. A later time is a
// malformed line (its bucket could be one the database refuses).
bool line_time_accepted(std::int64_t at, std::int64_t now);

// One configured rule, compiled.
class compiled_rule {
 public:
  // Throws std::invalid_argument when the pattern does not compile (config validation
  // refuses such a config first).
  compiled_rule(const config::log_rule& rule, std::uint32_t record_type);
  // The record_id the line counts for under this rule, or nullopt: another method or
  // status, a path the pattern does not find, a first group that is not a decimal
  // number of at most `max_id`, or a user agent `user_agent` does not find or
  // `not_user_agent` finds (the line parsed with its user agent, see wants_user_agent).
  std::optional<std::uint64_t> match(const parsed_line& line, std::uint64_t max_id) const noexcept;
  // match() in its two parts: the method, status and path (the record_id), then the
  // user agent.
  std::optional<std::uint64_t> match_request(const parsed_line& line,
                                             std::uint64_t max_id) const noexcept;
  bool match_agent(const parsed_line& line) const noexcept;
  // Whether match_request() gives the same for every line as `o`'s: traffic classes
  // repeat one path test under several user agent tests, tested once a line.
  bool same_request_test(const compiled_rule& o) const;
  std::uint32_t record_type() const { return record_type_; }
  bool wants_user_agent() const { return ua_ != nullptr || not_ua_ != nullptr; }

 private:
  std::uint32_t record_type_;
  std::string pattern_;
  config::shared_pattern re_;           // immutable, matched by any thread
  config::shared_pattern ua_, not_ua_;  // null: no condition
  std::string prefix_;  // a literal the path must start with ("^/downloads/" -> "/downloads/")
  std::vector<std::string> methods_;
  std::vector<unsigned> statuses_;
};

// The literal every path the pattern finds starts with (empty: none known).
std::string literal_prefix(std::string_view pattern);

}  // namespace slotted::logs
