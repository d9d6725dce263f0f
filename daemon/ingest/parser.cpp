#include "ingest/parser.hpp"

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <utility>

#include "util/json.hpp"

// simdjson's On-Demand API was chosen over its DOM API by measurement: on a 1,000-item
// body it parsed 55 ns/item against 78 ns/item for DOM on this machine (see bench/),
// and it reports where it stopped, which gives the index of the first bad item.

namespace slotted::ingest {
namespace {

using namespace simdjson;

std::string malformed(error_code e) {
  return std::string("malformed JSON: ") + error_message(e);
}

enum class int_status { ok, not_integer, out_of_range, malformed };

int_status read_signed(ondemand::value& v, std::int64_t lo, std::int64_t hi, std::int64_t& out) {
  ondemand::number_type nt;
  if (v.get_number_type().get(nt)) return int_status::malformed;
  if (nt == ondemand::number_type::floating_point_number) return int_status::not_integer;
  if (nt == ondemand::number_type::unsigned_integer) return int_status::out_of_range;
  const auto e = v.get_int64().get(out);
  if (e == NUMBER_ERROR) return int_status::malformed;
  if (e || out < lo || out > hi) return int_status::out_of_range;
  return int_status::ok;
}

int_status read_unsigned(ondemand::value& v, std::uint64_t& out) {
  ondemand::number_type nt;
  if (v.get_number_type().get(nt)) return int_status::malformed;
  if (nt == ondemand::number_type::floating_point_number) return int_status::not_integer;
  if (nt == ondemand::number_type::signed_integer) {
    std::int64_t i = 0;
    const auto e = v.get_int64().get(i);
    if (e == NUMBER_ERROR) return int_status::malformed;
    if (e || i < 0) return int_status::out_of_range;
    out = static_cast<std::uint64_t>(i);
    return int_status::ok;
  }
  const auto e = v.get_uint64().get(out);
  if (e == NUMBER_ERROR) return int_status::malformed;
  return e ? int_status::out_of_range : int_status::ok;
}

std::string int_problem(int_status s, std::string_view field, std::string_view range) {
  // Appended, not `"..." + std::string(field)`: GCC 12 at -O3 warns on that (-Wrestrict),
  // a known false positive in its inlined std::string code.
  std::string out;
  switch (s) {
    case int_status::not_integer:
      out.append("\"").append(field).append("\" must be an integer");
      break;
    case int_status::out_of_range:
      out.append("\"").append(field).append("\" is out of range ").append(range);
      break;
    default:
      out.append("malformed JSON: bad number in \"").append(field).append("\"");
  }
  return out;
}

class object_reader {
 public:
  explicit object_reader(const type_registry& types) : types_(types) {}

  // Fills `out` from one JSON object; returns an empty string on success.
  std::string read(ondemand::object obj, increment& out) {
    bool have_type = false, have_id = false, have_delta = false, have_at = false, have_cl = false;
    out = increment{};
    for (auto field_result : obj) {
      ondemand::field field;
      if (const auto e = std::move(field_result).get(field)) return malformed(e);
      // The raw key compares without unescaping (the common case); a key with escapes
      // is unescaped first, so "record\u005ftype" still means record_type.
      std::string_view key;
      const auto raw = field.key();
      if (raw == "record_type")
        key = "record_type";
      else if (raw == "record_id")
        key = "record_id";
      else if (raw == "delta")
        key = "delta";
      else if (raw == "at")
        key = "at";
      else if (const auto e = field.unescaped_key().get(key))
        return malformed(e);
      ondemand::value value = field.value();
      std::string problem;
      if (key == "record_type") {
        if (have_type) return "duplicate field \"record_type\"";
        have_type = true;
        problem = read_type(value, out.record_type);
      } else if (key == "record_id") {
        if (have_id) return "duplicate field \"record_id\"";
        have_id = true;
        problem = read_id(value, out.record_id);
      } else if (key == "delta") {
        if (have_delta) return "duplicate field \"delta\"";
        have_delta = true;
        problem = read_delta(value, out.delta);
      } else if (key == "at") {
        if (have_at) return "duplicate field \"at\"";
        have_at = true;
        problem = read_at(value, out.at);
        out.at_given = true;
      } else if (key == "client") {  // model/uniques.hpp; its counter is checked later
        if (std::exchange(have_cl, true)) return "duplicate field \"client\"";
        std::string_view text;
        if (value.get_string().get(text) || text.empty() || text.size() > store::max_client_bytes)
          return "\"client\" must be a string of 1 to 128 bytes";
        out.client = text;
      } else {
        return "unknown field " + json::excerpt(key);
      }
      if (!problem.empty()) return problem;
    }
    if (!have_type) return "missing field \"record_type\"";
    if (!have_id) return "missing field \"record_id\"";
    if (!types_.allows(out.record_type)) {
      return "record_type " + std::to_string(out.record_type) +
             " is not declared under counters (accept_undeclared_types is false)";
    }
    return {};
  }

 private:
  std::string read_type(ondemand::value& v, std::uint32_t& out) {
    ondemand::json_type t;
    if (const auto e = v.type().get(t)) return malformed(e);
    if (t == ondemand::json_type::string) {
      std::string_view name;
      if (const auto e = v.get_string().get(name)) return malformed(e);
      const auto found = types_.by_name(name);
      if (!found) return "unknown counter name " + json::excerpt(name) + " in \"record_type\"";
      out = *found;
      return {};
    }
    if (t != ondemand::json_type::number) {
      return "\"record_type\" must be an integer or a declared counter name";
    }
    std::int64_t value = 0;
    const auto s = read_signed(v, 0, max_record_type, value);
    if (s != int_status::ok) return int_problem(s, "record_type", record_type_range);
    out = static_cast<std::uint32_t>(value);
    return {};
  }

  std::string read_id(ondemand::value& v, std::uint64_t& out) {
    ondemand::json_type t;
    if (const auto e = v.type().get(t)) return malformed(e);
    if (t == ondemand::json_type::string) {
      std::string_view text;
      if (const auto e = v.get_string().get(text)) return malformed(e);
      const char* end = text.data() + text.size();
      const bool digits_only = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
        return c >= '0' && c <= '9';
      });
      if (!digits_only)
        return "\"record_id\" string must hold a decimal integer, got " + json::excerpt(text);
      const auto r = std::from_chars(text.data(), end, out);
      if (r.ec != std::errc() || r.ptr != end) {
        return std::string("\"record_id\" is out of range ") + record_id_range;
      }
      return {};
    }
    if (t != ondemand::json_type::number) {
      return "\"record_id\" must be an integer or a decimal string";
    }
    const auto s = read_unsigned(v, out);
    if (s != int_status::ok) return int_problem(s, "record_id", record_id_range);
    return {};
  }

  std::string read_delta(ondemand::value& v, std::int32_t& out) {
    ondemand::json_type t;
    if (const auto e = v.type().get(t)) return malformed(e);
    if (t != ondemand::json_type::number) return "\"delta\" must be an integer";
    std::int64_t value = 0;
    const auto s = read_signed(v, min_delta, max_delta, value);
    if (s != int_status::ok) return int_problem(s, "delta", delta_range);
    out = static_cast<std::int32_t>(value);
    return {};
  }

  std::string read_at(ondemand::value& v, std::int64_t& out) {
    ondemand::json_type t;
    if (const auto e = v.type().get(t)) return malformed(e);
    if (t != ondemand::json_type::number) return "\"at\" must be an integer (unix seconds)";
    const auto s = read_signed(v, 0, max_at, out);
    if (s != int_status::ok) return int_problem(s, "at", at_range);
    return {};
  }

  const type_registry& types_;
};

// ---------------------------------------------------------------------------------
// The fast path: a hand-written scanner for the shape nearly every client sends,
// {"record_type": N, "record_id": N or "digits", "delta": N, "at": N} with plain field names and
// integers. It only ever accepts: anything it does not handle exactly (an escape, a
// counter name, a fraction, an exponent, "-0", a leading zero, a number out of range, an
// unknown or duplicate field, an undeclared type, a missing field, any other byte) makes
// it give up, and simdjson's reader above parses the same text again, which yields the
// same increments or the error. The scanner accepts a strict subset of JSON, so it never
// accepts what the reader refuses; increments_fuzz checks that parse_increments() and
// parse_increments_reference() agree on every input. simdjson's per-document setup
// (stage 1 over each NDJSON line) was about a third of the CPU of an NDJSON request of
// 1,000 lines; see bench/RESULTS.md.
class fast_scanner {
 public:
  fast_scanner(const char* p, const char* end, const type_registry& types)
      : p_(p), end_(end), types_(types) {}

  const char* position() const { return p_; }

  // JSON whitespace; with `newline` false a '\n' ends the line instead.
  void skip_space(bool newline) {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\r' || (newline && *p_ == '\n')))
      ++p_;
  }
  bool at_end() const { return p_ == end_; }
  bool peek(char c) const { return p_ != end_ && *p_ == c; }
  bool eat(char c) {
    if (!peek(c)) return false;
    ++p_;
    return true;
  }

  // One object, fields in any order; false to give up. Whitespace inside the object may
  // include '\n' only when `newline` (JSON bodies; an NDJSON object sits on one line).
  bool object(increment& out, bool newline) {
    if (!eat('{')) return false;
    bool have_type = false, have_id = false, have_delta = false, have_at = false;
    out = increment{};
    for (;;) {
      skip_space(newline);
      if (!eat('"')) return false;
      const char* key = p_;
      while (p_ != end_ && *p_ != '"' && *p_ != '\\') ++p_;
      if (!peek('"')) return false;
      const std::string_view name(key, static_cast<std::size_t>(p_ - key));
      ++p_;
      skip_space(newline);
      if (!eat(':')) return false;
      skip_space(newline);
      std::uint64_t v = 0;
      if (name == "record_type") {
        if (have_type || !unsigned_number(v) || v > static_cast<std::uint64_t>(max_record_type))
          return false;
        out.record_type = static_cast<std::uint32_t>(v);
        have_type = true;
      } else if (name == "record_id") {
        if (have_id) return false;
        if (peek('"') ? !digit_string(v) : !unsigned_number(v)) return false;
        out.record_id = v;
        have_id = true;
      } else if (name == "delta") {
        const bool negative = eat('-');
        if (have_delta || !unsigned_number(v)) return false;
        if (negative ? (v == 0 || v > 2147483648u) : v > 2147483647u) return false;
        out.delta = static_cast<std::int32_t>(negative ? -static_cast<std::int64_t>(v)
                                                       : static_cast<std::int64_t>(v));
        have_delta = true;
      } else if (name == "at") {
        if (have_at || !unsigned_number(v) || v > static_cast<std::uint64_t>(max_at)) return false;
        out.at = static_cast<std::int64_t>(v);
        out.at_given = true;
        have_at = true;
      } else {
        return false;
      }
      skip_space(newline);
      if (eat('}')) break;
      if (!eat(',')) return false;
    }
    return have_type && have_id && types_.allows(out.record_type);
  }

 private:
  static bool digit(char c) { return c >= '0' && c <= '9'; }

  // A JSON integer without sign: "0" or no leading zero; neither fraction nor exponent
  // may follow; at most UINT64_MAX.
  bool unsigned_number(std::uint64_t& out) {
    if (p_ == end_ || !digit(*p_)) return false;
    if (*p_ == '0') {
      ++p_;
      out = 0;
    } else if (!digits(out)) {
      return false;
    }
    return p_ == end_ || !(digit(*p_) || *p_ == '.' || *p_ == 'e' || *p_ == 'E');
  }

  // "digits": a record_id as a decimal string (leading zeros allowed, as the reader does).
  bool digit_string(std::uint64_t& out) {
    ++p_;  // the opening quote
    if (p_ == end_ || !digit(*p_) || !digits(out)) return false;
    return eat('"');
  }

  bool digits(std::uint64_t& out) {
    std::uint64_t v = 0;
    while (p_ != end_ && digit(*p_)) {
      if (__builtin_mul_overflow(v, 10, &v) ||
          __builtin_add_overflow(v, static_cast<std::uint64_t>(*p_ - '0'), &v))
        return false;
      ++p_;
    }
    out = v;
    return true;
  }

  const char* p_;
  const char* end_;
  const type_registry& types_;
};

// The whole JSON body through the fast scanner: one object, or an array of at most
// `max_items` objects. False to give up (`out` then holds anything).
bool fast_json(std::string_view body, const type_registry& types, std::size_t max_items,
               std::vector<increment>& out) {
  fast_scanner s(body.data(), body.data() + body.size(), types);
  s.skip_space(true);
  increment inc;
  if (s.peek('{')) {
    if (!s.object(inc, true)) return false;
    out.push_back(inc);
  } else {
    if (!s.eat('[')) return false;
    s.skip_space(true);
    if (!s.eat(']')) {
      for (;;) {
        if (out.size() >= max_items || !s.object(inc, true)) return false;
        out.push_back(inc);
        s.skip_space(true);
        if (s.eat(']')) break;
        if (!s.eat(',')) return false;
        s.skip_space(true);
      }
    }
  }
  s.skip_space(true);
  return s.at_end();
}

// True when nothing but whitespace follows the value just read.
bool at_document_end(ondemand::document& doc) {
  const char* where = nullptr;
  return doc.current_location().get(where) == OUT_OF_BOUNDS;
}

struct parser_state {
  ondemand::parser parser;
  std::vector<char> buffer;

  padded_string_view pad(std::string_view body) {
    if (buffer.size() < body.size() + SIMDJSON_PADDING)
      buffer.resize(body.size() + SIMDJSON_PADDING);
    std::memcpy(buffer.data(), body.data(), body.size());
    std::memset(buffer.data() + body.size(), 0, SIMDJSON_PADDING);
    return padded_string_view(buffer.data(), body.size(), buffer.size());
  }
};

parser_state& thread_state() {
  thread_local parser_state state;
  return state;
}

std::optional<parse_error> too_many(std::size_t max_items) {
  return parse_error{413, "more than " + std::to_string(max_items) + " items in one request",
                     max_items};
}

std::optional<parse_error> parse_json(std::string_view body, const type_registry& types,
                                      std::size_t max_items, std::vector<increment>& out) {
  auto& state = thread_state();
  object_reader reader(types);
  ondemand::document doc;
  if (const auto e = state.parser.iterate(state.pad(body)).get(doc)) {
    return parse_error{400, e == EMPTY ? "empty body" : malformed(e), std::nullopt};
  }
  ondemand::json_type t;
  if (const auto e = doc.type().get(t)) return parse_error{400, malformed(e), 0};
  if (t == ondemand::json_type::object) {
    ondemand::object obj;
    if (const auto e = doc.get_object().get(obj)) return parse_error{400, malformed(e), 0};
    increment inc;
    if (auto problem = reader.read(obj, inc); !problem.empty()) return parse_error{400, problem, 0};
    if (!at_document_end(doc))
      return parse_error{400, "malformed JSON: content after the object", 0};
    out.push_back(inc);
    return std::nullopt;
  }
  if (t != ondemand::json_type::array) {
    return parse_error{400, "body must be a JSON object or an array of objects", std::nullopt};
  }
  ondemand::array arr;
  if (const auto e = doc.get_array().get(arr)) return parse_error{400, malformed(e), 0};
  for (auto element : arr) {
    const std::size_t index = out.size();
    ondemand::value value;
    if (const auto e = std::move(element).get(value)) return parse_error{400, malformed(e), index};
    if (index >= max_items) return too_many(max_items);
    ondemand::json_type item_type;
    if (const auto e = value.type().get(item_type)) return parse_error{400, malformed(e), index};
    if (item_type != ondemand::json_type::object) {
      return parse_error{400, "item must be a JSON object", index};
    }
    ondemand::object obj;
    if (const auto e = value.get_object().get(obj)) return parse_error{400, malformed(e), index};
    increment inc;
    if (auto problem = reader.read(obj, inc); !problem.empty())
      return parse_error{400, problem, index};
    out.push_back(inc);
  }
  if (!at_document_end(doc)) {
    return parse_error{400, "malformed JSON: content after the array", out.size()};
  }
  return std::nullopt;
}

// `fast`: try each line with the fast scanner first (false for the reference parser).
std::optional<parse_error> parse_ndjson(std::string_view body, const type_registry& types,
                                        std::size_t max_items, std::vector<increment>& out,
                                        bool fast) {
  auto& state = thread_state();
  object_reader reader(types);
  // One padded copy of the whole body, made only when a line needs simdjson; every such
  // line is parsed in place inside it.
  std::optional<padded_string_view> all;
  const char* const begin = body.data();
  const char* const end = begin + body.size();
  std::size_t pos = 0;
  while (pos < body.size()) {
    if (fast) {
      fast_scanner s(begin + pos, end, types);
      s.skip_space(false);
      if (s.at_end() || s.peek('\n')) {  // a blank line
        pos = static_cast<std::size_t>(s.position() - begin) + 1;
        continue;
      }
      if (out.size() >= max_items) return too_many(max_items);
      increment inc;
      if (s.object(inc, false)) {
        s.skip_space(false);
        if (s.at_end() || s.peek('\n')) {
          out.push_back(inc);
          pos = static_cast<std::size_t>(s.position() - begin) + 1;
          continue;
        }
      }
    }
    std::size_t line_end = body.find('\n', pos);
    if (line_end == std::string_view::npos) line_end = body.size();
    std::string_view line = body.substr(pos, line_end - pos);
    const std::size_t line_start = pos;
    pos = line_end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::size_t index = out.size();
    if (index >= max_items) return too_many(max_items);
    if (!all) all = state.pad(body);
    padded_string_view padded(all->data() + line_start, line.size(), all->capacity() - line_start);
    ondemand::document doc;
    if (const auto e = state.parser.iterate(padded).get(doc))
      return parse_error{400, malformed(e), index};
    ondemand::object obj;
    if (const auto e = doc.get_object().get(obj)) {
      return parse_error{
          400, e == INCORRECT_TYPE ? "each line must be one JSON object" : malformed(e), index};
    }
    increment inc;
    if (auto problem = reader.read(obj, inc); !problem.empty())
      return parse_error{400, problem, index};
    if (!at_document_end(doc)) {
      return parse_error{400, "malformed NDJSON: content after the object on its line", index};
    }
    out.push_back(inc);
  }
  if (out.empty()) return parse_error{400, "empty body", std::nullopt};
  return std::nullopt;
}

// Media types compare ASCII case folded, inline (no locale, no call per character).
bool iequals(std::string_view a, std::string_view b) {
  const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
  return std::ranges::equal(a, b, [&](char x, char y) { return lower(x) == lower(y); });
}

}  // namespace

std::optional<body_format> format_for(std::string_view content_type) {
  const auto semi = content_type.find(';');
  std::string_view media = content_type.substr(0, semi);
  while (!media.empty() && (media.back() == ' ' || media.back() == '\t')) media.remove_suffix(1);
  while (!media.empty() && (media.front() == ' ' || media.front() == '\t')) media.remove_prefix(1);
  if (iequals(media, "application/json")) return body_format::json;
  if (iequals(media, "application/x-ndjson")) return body_format::ndjson;
  return std::nullopt;
}

type_registry::type_registry(std::vector<std::pair<std::string, std::uint32_t>> declared,
                             bool accept_undeclared)
    : accept_undeclared_(accept_undeclared) {
  for (auto& [name, type] : declared) {
    declared_.insert(type);
    by_name_.emplace(std::move(name), type);
  }
}

std::optional<std::uint32_t> type_registry::by_name(std::string_view name) const {
  const auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

bool type_registry::allows(std::uint32_t record_type) const {
  return accept_undeclared_ || declared_.contains(record_type);
}

std::optional<parse_error> parse_increments(std::string_view body, body_format format,
                                            const type_registry& types, std::size_t max_items,
                                            std::vector<increment>& out) {
  out.clear();
  if (format == body_format::ndjson) return parse_ndjson(body, types, max_items, out, true);
  if (fast_json(body, types, max_items, out)) return std::nullopt;
  out.clear();
  return parse_json(body, types, max_items, out);
}

std::optional<parse_error> parse_increments_reference(std::string_view body, body_format format,
                                                      const type_registry& types,
                                                      std::size_t max_items,
                                                      std::vector<increment>& out) {
  out.clear();
  return format == body_format::json ? parse_json(body, types, max_items, out)
                                     : parse_ndjson(body, types, max_items, out, false);
}

std::optional<parse_error> resolve_times(std::span<increment> increments,
                                         const store::bucket_spec& buckets, std::int64_t now) {
  if (buckets.empty()) return std::nullopt;
  // A request's items are nearly always of one type: its entry is looked up once.
  std::uint32_t last_type = 0;
  const store::bucket_spec::counter* counter = nullptr;
  for (std::size_t i = 0; i < increments.size(); ++i) {
    auto& inc = increments[i];
    if (i == 0 || inc.record_type != last_type) {
      counter = buckets.find(inc.record_type);
      last_type = inc.record_type;
    }
    if (counter == nullptr) continue;
    if (!inc.at_given) {
      inc.at = now;
      continue;
    }
    const std::int64_t oldest = now - counter->longest().count();
    if (inc.at < oldest) {
      return parse_error{400,
                         "\"at\" " + std::to_string(inc.at) +
                             " is older than the longest retention of "
                             "record_type " +
                             std::to_string(inc.record_type) + "'s buckets (" +
                             std::to_string(counter->longest().count()) + " s before now, " +
                             std::to_string(now) + "); nothing of this request was applied",
                         i};
    }
    if (inc.at > now + max_at_ahead_seconds) {
      return parse_error{400,
                         "\"at\" " + std::to_string(inc.at) + " is more than " +
                             std::to_string(max_at_ahead_seconds) + " s in the future (now " +
                             std::to_string(now) + "); nothing of this request was applied",
                         i};
    }
  }
  return std::nullopt;
}

}  // namespace slotted::ingest
