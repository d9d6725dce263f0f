#pragma once
// Writing JSON strings: the one escaper for every JSON text the daemon builds (error
// bodies, and excerpts of request content quoted in error messages). Pure, no I/O.

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>

namespace slotted::json {

// Appends `s` as a JSON string literal: quotes around it, `"` and `\` backslash-escaped,
// control characters as \u00XX. Bytes from 0x80 on are copied as they are (the caller
// vouches for UTF-8, or cuts on a character boundary as excerpt() does).
inline void append_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

// Untrusted text (a field name, a counter name) for an error message: a JSON string of
// at most `max_bytes` of it, cut before a UTF-8 continuation byte so the message stays
// valid UTF-8, with "..." inside the quotes when it was cut.
inline std::string excerpt(std::string_view s, std::size_t max_bytes = 64) {
  std::size_t cut = std::min(s.size(), max_bytes);
  if (cut < s.size()) {
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  }
  std::string out;
  append_string(out, s.substr(0, cut));
  if (cut < s.size()) out.insert(out.size() - 1, "...");
  return out;
}

}  // namespace slotted::json
