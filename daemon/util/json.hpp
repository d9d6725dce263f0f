#pragma once
// Writing JSON strings: the one escaper for every JSON text the daemon builds (error
// bodies, and excerpts of request content quoted in error messages). Pure, no I/O.

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>

namespace slotted::json {

// Length of the well-formed UTF-8 sequence at the front of `s` (RFC 3629: no overlong
// forms, no surrogates, nothing past U+10FFFF), or 0 when it does not start with one.
inline std::size_t utf8_sequence_length(std::string_view s) {
  const auto at = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b = at(0);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the bounds of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    n = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    n = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    n = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (s.size() < n || at(1) < lo || at(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i)
    if ((at(i) & 0xC0) != 0x80) return 0;
  return n;
}

// Appends `s` as a JSON string literal: quotes around it, `"` and `\` backslash-escaped,
// control characters as \u00XX. Well-formed UTF-8 is copied as it is; any other byte
// (request text is not vouched for: a URL's query can hold anything) becomes U+FFFD, so
// the literal is always valid JSON.
inline void append_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x80) {
      const std::size_t n = utf8_sequence_length(s.substr(i));
      if (n == 0) {
        out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
        ++i;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    }
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
    ++i;
  }
  out.push_back('"');
}

// Untrusted text (a field name, a counter name) for an error message: a JSON string of
// at most `max_bytes` of it, cut before a UTF-8 continuation byte (backing up at most
// three) so no character is split, with "..." inside the quotes when it was cut.
inline std::string excerpt(std::string_view s, std::size_t max_bytes = 64) {
  std::size_t cut = std::min(s.size(), max_bytes);
  if (cut < s.size()) {
    for (int back = 0; back < 3 && cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80;
         ++back)
      --cut;
  }
  std::string out;
  append_string(out, s.substr(0, cut));
  if (cut < s.size()) out.insert(out.size() - 1, "...");
  return out;
}

}  // namespace slotted::json
