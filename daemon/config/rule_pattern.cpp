// A rule's pattern compiled by RE2 (config/log_sources.hpp, compile_pattern): used by
// config validation and by the log reader's rules (logs/line_parser.hpp).
#include <re2/re2.h>

#include "config/log_sources.hpp"

namespace slotted::config {

compiled_pattern compile_pattern(const std::string& pattern, bool group) {
  re2::RE2::Options o;
  o.set_log_errors(false);  // the error is returned, and said by config validation
  // Bytes, as a log holds them (a path is not decoded, a user agent may hold any byte):
  // `.` matches any byte, and a UTF-8 literal of the pattern still matches its bytes.
  o.set_encoding(re2::RE2::Options::EncodingLatin1);
  auto re = std::make_shared<const re2::RE2>(pattern, o);
  if (!re->ok()) {
    return {nullptr, "is not a pattern RE2 takes (" + re->error() +
                         "): rules are matched in linear time, so a backreference, a "
                         "lookaround or an atomic group cannot be used"};
  }
  if (group && re->NumberOfCapturingGroups() < 1)
    return {nullptr, "has no capture group: its first one, e.g. ([0-9]+), reads the record_id"};
  return {std::move(re), {}};
}

}  // namespace slotted::config
