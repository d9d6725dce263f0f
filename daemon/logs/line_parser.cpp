#include "logs/line_parser.hpp"

#include <re2/re2.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/increment.hpp"

namespace slotted::logs {
namespace {

bool digits(std::string_view s, std::size_t pos, std::size_t n, unsigned& out) {
  if (pos + n > s.size()) return false;
  unsigned v = 0;
  for (std::size_t i = pos; i < pos + n; ++i) {
    const char c = s[i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  out = v;
  return true;
}

// 1 to 12, 0 for no month: the three letters as one number, compared once each.
int month_of(std::string_view m) {
  if (m.size() != 3) return 0;
  const auto key = [](const char* t) {
    return static_cast<unsigned>(static_cast<unsigned char>(t[0])) << 16 |
           static_cast<unsigned>(static_cast<unsigned char>(t[1])) << 8 |
           static_cast<unsigned>(static_cast<unsigned char>(t[2]));
  };
  static constexpr const char* names[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                          "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const unsigned k = key(m.data());
  for (int i = 0; i < 12; ++i)
    if (k == key(names[i])) return i + 1;
  return 0;
}

// "+hhmm" / "-hhmm" / "+hh:mm" at `pos` (`colon`: the ISO form): seconds east of UTC.
bool offset_at(std::string_view s, std::size_t pos, bool colon, std::int64_t& out) {
  if (pos >= s.size() || (s[pos] != '+' && s[pos] != '-')) return false;
  unsigned hh = 0, mm = 0;
  if (!digits(s, pos + 1, 2, hh)) return false;
  const std::size_t mpos = pos + 3 + (colon ? 1 : 0);
  if (colon && (pos + 3 >= s.size() || s[pos + 3] != ':')) return false;
  if (!digits(s, mpos, 2, mm) || mpos + 2 != s.size()) return false;
  const std::int64_t off = static_cast<std::int64_t>(hh) * 3600 + mm * 60;
  out = s[pos] == '-' ? -off : off;
  return true;
}

bool valid_civil(unsigned year, unsigned mon, unsigned day, unsigned h, unsigned mi, unsigned sec) {
  return year >= 1970 && year <= 9999 && mon >= 1 && mon <= 12 && day >= 1 && day <= 31 && h < 24 &&
         mi < 60 && sec < 61;
}

// "10/Oct/2000:13:55:36 -0700"
bool clf_time_parsed(std::string_view t, std::int64_t& at) {
  if (t.size() != 26 || t[2] != '/' || t[6] != '/' || t[11] != ':' || t[14] != ':' ||
      t[17] != ':' || t[20] != ' ')
    return false;
  unsigned day = 0, year = 0, h = 0, mi = 0, sec = 0;
  const int mon = month_of(t.substr(3, 3));
  std::int64_t off = 0;
  if (!digits(t, 0, 2, day) || !digits(t, 7, 4, year) || !digits(t, 12, 2, h) ||
      !digits(t, 15, 2, mi) || !digits(t, 18, 2, sec) || mon == 0 || !offset_at(t, 21, false, off))
    return false;
  if (!valid_civil(year, static_cast<unsigned>(mon), day, h, mi, sec)) return false;
  at = unix_seconds(static_cast<int>(year), static_cast<unsigned>(mon), day, h, mi, sec) - off;
  return at >= 0;
}

// The same, remembering the last time parsed on this thread: the lines of a log come in
// order, many in the same second, so most are one compare of 26 bytes.
bool clf_time(std::string_view t, std::int64_t& at) {
  thread_local char last[26] = {};
  thread_local std::int64_t last_at = -1;
  if (t.size() == sizeof last && last_at >= 0 && std::memcmp(t.data(), last, sizeof last) == 0) {
    at = last_at;
    return true;
  }
  if (!clf_time_parsed(t, at)) return false;
  if (t.size() == sizeof last) {
    std::memcpy(last, t.data(), sizeof last);
    last_at = at;
  }
  return true;
}

// "2000-10-10T13:55:36-07:00", "...Z", an optional fraction; or "1700000000.123".
bool json_time(std::string_view t, std::int64_t& at) {
  if (!t.empty() && t.find('-') == std::string_view::npos &&
      t.find('T') == std::string_view::npos) {
    std::int64_t v = 0;
    const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
    if (r.ec != std::errc() || v < 0) return false;
    if (r.ptr != t.data() + t.size()) {
      if (*r.ptr != '.') return false;
      for (const char* p = r.ptr + 1; p < t.data() + t.size(); ++p)
        if (*p < '0' || *p > '9') return false;
    }
    at = v;
    return true;
  }
  if (t.size() < 20 || t[4] != '-' || t[7] != '-' || (t[10] != 'T' && t[10] != ' ') ||
      t[13] != ':' || t[16] != ':')
    return false;
  unsigned year = 0, mon = 0, day = 0, h = 0, mi = 0, sec = 0;
  if (!digits(t, 0, 4, year) || !digits(t, 5, 2, mon) || !digits(t, 8, 2, day) ||
      !digits(t, 11, 2, h) || !digits(t, 14, 2, mi) || !digits(t, 17, 2, sec))
    return false;
  std::size_t pos = 19;
  if (pos < t.size() && t[pos] == '.') {
    ++pos;
    while (pos < t.size() && t[pos] >= '0' && t[pos] <= '9') ++pos;
  }
  std::int64_t off = 0;
  if (pos < t.size() && t[pos] == 'Z') {
    if (pos + 1 != t.size()) return false;
  } else if (!offset_at(t, pos, true, off)) {
    return false;
  }
  if (!valid_civil(year, mon, day, h, mi, sec)) return false;
  at = unix_seconds(static_cast<int>(year), mon, day, h, mi, sec) - off;
  return at >= 0;
}

// METHOD SP URI [SP PROTOCOL]: the path is the URI up to '?'.
void split_request(std::string_view req, parsed_line& out) {
  const auto sp = req.find(' ');
  if (sp == std::string_view::npos) {
    out.method = req;
    out.path = {};
    return;
  }
  out.method = req.substr(0, sp);
  std::string_view uri = req.substr(sp + 1);
  // The path ends at the query or a fragment (servers serve the path before either).
  // The first of the three, by memchr each (find_first_of looks every byte up in the set).
  std::size_t end = uri.size();
  for (const char c : {' ', '?', '#'}) {
    if (const void* at = std::memchr(uri.data(), c, end))
      end = static_cast<std::size_t>(static_cast<const char*>(at) - uri.data());
  }
  out.path = uri.substr(0, end);
}

bool status_of(std::string_view s, unsigned& out) {
  return s.size() == 3 && digits(s, 0, 3, out) && out >= 100;
}

}  // namespace

std::int64_t unix_seconds(int y, unsigned m, unsigned d, unsigned hour, unsigned minute,
                          unsigned second) {
  // days_from_civil (H. Hinnant)
  y -= m <= 2;
  const int era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const std::int64_t days = static_cast<std::int64_t>(era) * 146097 + doe - 719468;
  return days * 86400 + hour * 3600 + minute * 60 + second;
}

namespace {
// The index of the '"' closing a quoted field whose text starts at `start`: the first
// one not escaped by a backslash (Apache writes \"; nginx writes \x22); npos if none.
std::size_t closing_quote(std::string_view line, std::size_t start) {
  std::size_t pos = start;
  for (;;) {
    const void* q = std::memchr(line.data() + pos, '"', line.size() - pos);
    if (q == nullptr) return std::string_view::npos;
    const std::size_t at = static_cast<std::size_t>(static_cast<const char*>(q) - line.data());
    std::size_t backslashes = 0;
    while (at - backslashes > start && line[at - backslashes - 1] == '\\') ++backslashes;
    if (backslashes % 2 == 0) return at;
    pos = at + 1;
  }
}

// After the status: ` $body_bytes_sent "$http_referer" "$http_user_agent"`, from `pos`
// (the space after the status). Empty when the line has another shape there.
std::string_view user_agent_after(std::string_view line, std::size_t pos) {
  const auto sp = line.find(' ', pos + 1);  // after the bytes
  if (sp == std::string_view::npos || sp + 1 >= line.size() || line[sp + 1] != '"') return {};
  const auto ref_end = closing_quote(line, sp + 2);
  if (ref_end == std::string_view::npos || ref_end + 2 >= line.size() || line[ref_end + 1] != ' ' ||
      line[ref_end + 2] != '"')
    return {};
  const auto ua_end = closing_quote(line, ref_end + 3);
  if (ua_end == std::string_view::npos) return {};
  return line.substr(ref_end + 3, ua_end - ref_end - 3);
}
}  // namespace

bool parse_combined(std::string_view line, parsed_line& out, bool user_agent) {
  out.client = line.substr(0, line.find(' '));
  if (out.client == "-") out.client = {};
  out.user_agent = {};
  const auto open = line.find('[');
  if (open == std::string_view::npos || open + 27 >= line.size() || line[open + 27] != ']')
    return false;
  if (!clf_time(line.substr(open + 1, 26), out.at)) return false;
  std::size_t pos = open + 28;
  if (pos + 1 >= line.size() || line[pos] != ' ' || line[pos + 1] != '"') return false;
  pos += 2;
  const std::size_t req_start = pos;
  pos = closing_quote(line, req_start);
  if (pos == std::string_view::npos) return false;
  split_request(line.substr(req_start, pos - req_start), out);
  if (pos + 5 > line.size() || line[pos + 1] != ' ') return false;
  if (!status_of(line.substr(pos + 2, 3), out.status)) return false;
  if (pos + 5 == line.size()) return true;
  if (line[pos + 5] != ' ') return false;
  if (user_agent) out.user_agent = user_agent_after(line, pos + 5);
  return true;
}

namespace {

// A JSON string starting at s[pos] == '"': its raw content (escapes kept), pos past it.
bool json_string(std::string_view s, std::size_t& pos, std::string_view& raw, bool& escaped) {
  if (pos >= s.size() || s[pos] != '"') return false;
  const std::size_t start = ++pos;
  escaped = false;
  while (pos < s.size()) {
    const char c = s[pos];
    if (c == '"') {
      raw = s.substr(start, pos - start);
      ++pos;
      return true;
    }
    if (c == '\\') {
      escaped = true;
      pos += 2;
      continue;
    }
    if (static_cast<unsigned char>(c) < 0x20) return false;
    ++pos;
  }
  return false;
}

void skip_space(std::string_view s, std::size_t& pos) {
  while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t' || s[pos] == '\r')) ++pos;
}

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// JSON escapes undone (\uXXXX as UTF-8). False on a bad escape.
bool unescape(std::string_view raw, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\') {
      out.push_back(raw[i]);
      continue;
    }
    if (++i >= raw.size()) return false;
    switch (raw[i]) {
      case '"':
        out.push_back('"');
        break;
      case '\\':
        out.push_back('\\');
        break;
      case '/':
        out.push_back('/');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'u': {
        unsigned cp = 0;
        for (int k = 1; k <= 4; ++k) {
          const std::size_t at = i + static_cast<std::size_t>(k);
          const int h = at < raw.size() ? hex(raw[at]) : -1;
          if (h < 0) return false;
          cp = cp * 16 + static_cast<unsigned>(h);
        }
        i += 4;
        if (cp < 0x80) {
          out.push_back(static_cast<char>(cp));
        } else if (cp < 0x800) {
          out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
          out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
        } else {
          out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
          out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
          out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
        }
        break;
      }
      default:
        return false;
    }
  }
  return true;
}

}  // namespace

bool parse_json(std::string_view line, const config::log_json_fields& fields, parsed_line& out,
                std::string& scratch) {
  std::size_t pos = 0;
  skip_space(line, pos);
  if (pos >= line.size() || line[pos] != '{') return false;
  ++pos;
  bool has_time = false, has_method = false, has_path = false, has_status = false;
  out.client = {};
  out.user_agent = {};
  std::string_view path_raw;
  bool path_escaped = false;
  skip_space(line, pos);
  if (pos < line.size() && line[pos] == '}') return false;
  for (;;) {
    skip_space(line, pos);
    std::string_view key, value;
    bool escaped = false, is_string = false;
    if (!json_string(line, pos, key, escaped)) return false;
    skip_space(line, pos);
    if (pos >= line.size() || line[pos] != ':') return false;
    ++pos;
    skip_space(line, pos);
    if (pos < line.size() && line[pos] == '"') {
      if (!json_string(line, pos, value, escaped)) return false;
      is_string = true;
    } else {
      const std::size_t start = pos;
      while (pos < line.size() && line[pos] != ',' && line[pos] != '}' && line[pos] != ' ') ++pos;
      value = line.substr(start, pos - start);
      if (value.empty() || value.front() == '{' || value.front() == '[') return false;
    }
    if (key == fields.time) {
      if (!json_time(value, out.at)) return false;
      has_time = true;
    } else if (key == fields.method) {
      if (!is_string || escaped) return false;
      out.method = value;
      has_method = true;
    } else if (key == fields.path) {
      if (!is_string) return false;
      path_raw = value;
      path_escaped = escaped;
      has_path = true;
    } else if (key == fields.status) {
      if (!status_of(value, out.status)) return false;
      has_status = true;
    } else if (key == fields.client) {
      // Only a string is a client (null, a number: none); never a reason to refuse the
      // line, which counts for counters without dedupe as before.
      out.client = !is_string || value == "-" ? std::string_view{} : value;
    } else if (key == fields.user_agent) {
      out.user_agent = is_string ? value : std::string_view{};
    }
    skip_space(line, pos);
    if (pos >= line.size()) return false;
    if (line[pos] == ',') {
      ++pos;
      continue;
    }
    if (line[pos] != '}') return false;
    ++pos;
    skip_space(line, pos);
    if (pos != line.size()) return false;
    break;
  }
  if (!has_time || !has_method || !has_path || !has_status) return false;
  if (path_escaped) {
    if (!unescape(path_raw, scratch)) return false;
    path_raw = scratch;
  }
  const auto q = path_raw.find_first_of("?#");
  out.path = q == std::string_view::npos ? path_raw : path_raw.substr(0, q);
  return true;
}

std::string literal_prefix(std::string_view pattern) {
  if (pattern.empty() || pattern.front() != '^') return {};
  std::string out;
  for (std::size_t i = 1; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (std::strchr(".[]{}()*+?|^$\\", c) != nullptr) {
      // A quantifier applies to the literal before it, which is then not certain.
      if ((c == '*' || c == '+' || c == '?' || c == '{') && !out.empty()) out.pop_back();
      // An alternation at the top level makes the prefix uncertain altogether.
      if (pattern.find('|') != std::string_view::npos) return {};
      break;
    }
    out.push_back(c);
  }
  if (pattern.find('|') != std::string_view::npos) return {};
  return out;
}

compiled_rule::compiled_rule(const config::log_rule& rule, std::uint32_t record_type)
    : record_type_(record_type),
      pattern_(rule.path),
      prefix_(literal_prefix(rule.path)),
      methods_(rule.methods),
      statuses_(rule.statuses) {
  const auto compiled = [](const std::string& pattern, bool group) {
    auto c = config::compile_pattern(pattern, group);
    if (!c.re) throw std::invalid_argument("'" + pattern + "' " + c.error);
    return std::move(c.re);
  };
  re_ = compiled(rule.path, true);
  if (!rule.user_agent.empty()) ua_ = compiled(rule.user_agent, false);
  if (!rule.not_user_agent.empty()) not_ua_ = compiled(rule.not_user_agent, false);
}

namespace {
// A path the server may have served as another: a "." or ".." segment, an empty one, or a
// '%' (an encoded dot or slash may make one).
bool may_differ_when_served(std::string_view path) {
  const char* p = path.data();
  const char* end = p + path.size();
  if (std::memchr(p, '%', path.size()) != nullptr) return true;
  for (;;) {
    const void* slash = std::memchr(p, '/', static_cast<std::size_t>(end - p));
    if (slash == nullptr) return false;
    p = static_cast<const char*>(slash) + 1;
    if (p < end && (*p == '.' || *p == '/')) return true;
  }
}

// The path the server served (what nginx and Apache map to a file): %2e and %2f decoded,
// empty segments merged ("//", nginx's merge_slashes and Apache's MergeSlashes, on by
// default), then the "." and ".." segments resolved (RFC 3986, 5.2.4). A line of
// "/d/999/../1/f.tgz" fetched /d/1/f.tgz, and counts for 1, not 999.
std::string served_path(std::string_view raw) {
  std::string p;
  p.reserve(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '%' && raw.size() - i >= 3 && raw[i + 1] == '2') {
      const char c = static_cast<char>(raw[i + 2] | 0x20);
      if (c == 'e' || c == 'f') {
        p.push_back(c == 'e' ? '.' : '/');
        i += 2;
        continue;
      }
    }
    p.push_back(raw[i]);
  }
  std::vector<std::string_view> kept;
  std::string_view rest = p;
  const bool absolute = rest.starts_with('/');
  if (absolute) rest.remove_prefix(1);
  bool trailing = false;
  for (;;) {
    const auto slash = rest.find('/');
    const std::string_view seg = rest.substr(0, slash);
    const bool last = slash == std::string_view::npos;
    if (seg == "..") {
      if (!kept.empty()) kept.pop_back();
    } else if (seg != "." && !seg.empty()) {
      kept.push_back(seg);
    }
    if (last) {
      trailing = seg == "." || seg == ".." || seg.empty();
      break;
    }
    rest.remove_prefix(slash + 1);
  }
  std::string out = absolute ? "/" : "";
  for (std::size_t i = 0; i < kept.size(); ++i) {
    if (i > 0) out.push_back('/');
    out.append(kept[i]);
  }
  if (trailing && !kept.empty()) out.push_back('/');
  return out;
}
}  // namespace

bool line_time_accepted(std::int64_t at, std::int64_t now) {
  return at >= 0 && at <= now + ingest::max_at_ahead_seconds;
}

std::optional<std::uint64_t> compiled_rule::match_request(const parsed_line& line,
                                                          std::uint64_t max_id) const noexcept {
  if (std::find(statuses_.begin(), statuses_.end(), line.status) == statuses_.end())
    return std::nullopt;
  if (std::find(methods_.begin(), methods_.end(), line.method) == methods_.end())
    return std::nullopt;
  std::string resolved;  // the served path, when it may differ from the logged one
  std::string_view path = line.path;
  re2::StringPiece group[2];
  try {
    if (may_differ_when_served(path)) path = resolved = served_path(path);
  } catch (const std::exception&) {  // no memory for the resolved path: no match
    return std::nullopt;
  }
  if (path.size() < prefix_.size() || path.compare(0, prefix_.size(), prefix_) != 0)
    return std::nullopt;
  if (!re_->Match(re2::StringPiece(path.data(), path.size()), 0, path.size(), re2::RE2::UNANCHORED,
                  group, 2))
    return std::nullopt;
  const char* b = group[1].data();
  if (b == nullptr) return std::nullopt;  // the group took no part in the match
  const char* e = b + group[1].size();
  std::uint64_t id = 0;
  const auto r = std::from_chars(b, e, id);
  if (b == e || r.ec != std::errc() || r.ptr != e || *b == '+' || id > max_id) return std::nullopt;
  return id;
}

bool compiled_rule::match_agent(const parsed_line& line) const noexcept {
  const re2::StringPiece ua(line.user_agent.data(), line.user_agent.size());
  if (ua_ && !re2::RE2::PartialMatch(ua, *ua_)) return false;
  return !(not_ua_ && re2::RE2::PartialMatch(ua, *not_ua_));
}

std::optional<std::uint64_t> compiled_rule::match(const parsed_line& line,
                                                  std::uint64_t max_id) const noexcept {
  const auto id = match_request(line, max_id);
  return id && match_agent(line) ? id : std::nullopt;
}

bool compiled_rule::same_request_test(const compiled_rule& o) const {
  return pattern_ == o.pattern_ && methods_ == o.methods_ && statuses_ == o.statuses_;
}

}  // namespace slotted::logs
