// A rule's pattern compiled by RE2 (config/log_sources.hpp, compile_pattern): used by
// config validation and by the log reader's rules (logs/line_parser.hpp).
#include <re2/re2.h>

#include <string_view>

#include "config/log_sources.hpp"

namespace slotted::config {

namespace {

// The end of the POSIX class "[:name:]" starting at `i` inside a bracket expression (the
// index of its last ']'), or `i` when none starts there.
std::size_t posix_class_end(std::string_view p, std::size_t i) {
  if (i + 1 >= p.size() || p[i] != '[' || p[i + 1] != ':') return i;
  const auto end = p.find(":]", i + 2);
  return end == std::string_view::npos ? i : end + 1;
}

// What boost::regex, the engine before issue 39, read as an assertion or a collating
// element and RE2 takes as something else without an error: a config written for boost
// would count other lines, silently. "" when the pattern has none of them.
std::string boost_only_construct(std::string_view p) {
  bool in_class = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[++i];
      if (n == 'Q') {  // a literal up to \E (or the end)
        const auto e = p.find("\\E", i + 1);
        if (e == std::string_view::npos) return {};
        i = e + 1;
      } else if (!in_class && (n == '<' || n == '>')) {
        return std::string("uses \\") + n + " (a word's " + (n == '<' ? "start" : "end") +
               " to boost::regex, the engine before issue 39; a literal '" + n +
               "' to RE2): write \\b for a word boundary, or " + n + " for the character";
      } else if (!in_class && (n == '`' || n == '\'')) {
        return std::string("uses \\") + n + " (the text's " + (n == '`' ? "start" : "end") +
               " to boost::regex, the engine before issue 39; a literal to RE2): write " +
               (n == '`' ? "\\A" : "\\z") + " for the text's " + (n == '`' ? "start" : "end");
      }
      continue;
    }
    if (!in_class) {
      if (c != '[') continue;
      in_class = true;
      if (i + 1 < p.size() && p[i + 1] == '^') ++i;
      if (i + 1 < p.size() && p[i + 1] == ']') ++i;  // a ']' first is a member
      continue;
    }
    if (const auto end = posix_class_end(p, i); end != i) {
      i = end;  // [:alpha:] and the like mean the same to both
    } else if (c == '[' && i + 1 < p.size() && (p[i + 1] == '.' || p[i + 1] == '=')) {
      return std::string("uses [") + p[i + 1] +
             " in a bracket expression (a collating element or an equivalence class to "
             "boost::regex, the engine before issue 39; to RE2 the characters themselves, "
             "and the class ends at the next ']'): write the characters, e.g. [-a] or \\[";
    } else if (c == ']') {
      in_class = false;
    }
  }
  return {};
}

}  // namespace

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
  if (auto boost_only = boost_only_construct(pattern); !boost_only.empty())
    return {nullptr, std::move(boost_only)};
  if (group && re->NumberOfCapturingGroups() < 1)
    return {nullptr, "has no capture group: its first one, e.g. ([0-9]+), reads the record_id"};
  return {std::move(re), {}};
}

}  // namespace slotted::config
