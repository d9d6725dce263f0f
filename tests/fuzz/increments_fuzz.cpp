// libFuzzer harness: the increments body parser (JSON and NDJSON) on arbitrary bytes.
//
// Input: one flag byte, then the body. Flag bit 0 picks NDJSON, bit 1 accepts undeclared
// types, bits 2-3 pick max_items (1, 3, 100, 100000). Besides crashes and sanitizer
// reports it checks what callers rely on: an error is 400 or 413 with a message; a
// success yields at most max_items increments (at least one for NDJSON), each of an
// allowed type; parsing the
// same body again (the parser's per-thread state is reused) gives the same answer; and
// each line of an accepted NDJSON body, parsed alone as JSON, yields the same increment
// (NDJSON lines are parsed in place inside the whole body, with the following lines as
// simdjson's padding); and parse_increments_reference() (simdjson without the fast
// scanner) gives the same answer, increments or error.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "ingest/parser.hpp"

using namespace slotted::ingest;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "increments_fuzz: invariant broken: %s\n", what);
  std::abort();
}

bool same(const std::vector<increment>& a, const std::vector<increment>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].record_type != b[i].record_type || a[i].record_id != b[i].record_id ||
        a[i].delta != b[i].delta || a[i].at_given != b[i].at_given || a[i].at != b[i].at)
      return false;
  }
  return true;
}

const type_registry& registry(bool accept_undeclared) {
  static const type_registry strict({{"page_views", 1}, {"likes", 2}, {"x", 2147483647}}, false);
  static const type_registry open({{"page_views", 1}, {"likes", 2}, {"x", 2147483647}}, true);
  return accept_undeclared ? open : strict;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t flags = data[0];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const auto format = (flags & 1) ? body_format::ndjson : body_format::json;
  const auto& types = registry(flags & 2);
  static constexpr std::size_t limits[] = {1, 3, 100, 100000};
  const std::size_t max_items = limits[(flags >> 2) & 3];

  std::vector<increment> out;
  const auto err = parse_increments(body, format, types, max_items, out);
  if (err) {
    if (err->status != 400 && err->status != 413) fail("error status is neither 400 nor 413");
    if (err->message.empty()) fail("error without a message");
  } else {
    // An empty JSON array is accepted with nothing in it (see parser_test); an empty
    // NDJSON body is not.
    if (out.empty() && format == body_format::ndjson) fail("NDJSON success without increments");
    if (out.size() > max_items) fail("more increments than max_items");
    for (const auto& inc : out) {
      if (!types.allows(inc.record_type)) fail("increment of a type the registry refuses");
      if (inc.record_type > 2147483647u) fail("record_type out of range");
    }
  }

  // The fast scanner gives up on whatever it does not handle exactly, so the answer must
  // be the reference parser's (simdjson alone), errors included.
  std::vector<increment> reference;
  const auto ref_err = parse_increments_reference(body, format, types, max_items, reference);
  if (err.has_value() != ref_err.has_value()) fail("the reference parser disagrees on success");
  if (err && (err->status != ref_err->status || err->message != ref_err->message ||
              err->index != ref_err->index))
    fail("the reference parser gives another error");
  if (!err && !same(out, reference)) fail("the reference parser gives other increments");

  std::vector<increment> again;
  const auto err2 = parse_increments(body, format, types, max_items, again);
  if (err.has_value() != err2.has_value()) fail("second parse disagrees on success");
  if (err &&
      (err->status != err2->status || err->message != err2->message || err->index != err2->index))
    fail("second parse gives another error");
  if (!err && !same(out, again)) fail("second parse gives other increments");

  if (!err && format == body_format::ndjson) {
    std::size_t pos = 0, item = 0;
    std::vector<increment> one;
    while (pos < body.size()) {
      std::size_t end = body.find('\n', pos);
      if (end == std::string_view::npos) end = body.size();
      const std::string_view line = body.substr(pos, end - pos);
      pos = end + 1;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      if (parse_increments(line, body_format::json, types, max_items, one))
        fail("an accepted NDJSON line is refused when parsed alone");
      if (item >= out.size() || !same(one, std::vector<increment>{out[item]}))
        fail("an NDJSON line parsed alone yields another increment");
      ++item;
    }
    if (item != out.size()) fail("NDJSON line count differs from the increments");
  }
  return 0;
}
