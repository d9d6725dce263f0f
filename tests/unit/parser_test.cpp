#include "ingest/parser.hpp"

#include <gtest/gtest.h>

namespace slotted::ingest {
namespace {

const type_registry strict({{"repo_downloads", 123}, {"page_views", 7}}, false);
const type_registry open_types({{"repo_downloads", 123}}, true);

struct parsed {
  std::vector<increment> items;
  std::optional<parse_error> error;
};

parsed parse(std::string_view body, body_format f = body_format::json,
             const type_registry& t = strict, std::size_t max_items = 100) {
  parsed p;
  p.error = parse_increments(body, f, t, max_items, p.items);
  return p;
}

void expect_error(std::string_view body, std::string_view message_part,
                  std::optional<std::size_t> index, body_format f = body_format::json,
                  unsigned status = 400) {
  const auto p = parse(body, f);
  ASSERT_TRUE(p.error) << body;
  EXPECT_EQ(p.error->status, status) << body;
  EXPECT_NE(p.error->message.find(message_part), std::string::npos)
      << body << " -> " << p.error->message;
  EXPECT_EQ(p.error->index, index) << body << " -> " << p.error->message;
}

TEST(Parser, SingleObject) {
  const auto p = parse(R"({"record_type": 123, "record_id": 42, "delta": -3})");
  ASSERT_FALSE(p.error) << p.error->message;
  ASSERT_EQ(p.items.size(), 1u);
  EXPECT_EQ(p.items[0].record_type, 123u);
  EXPECT_EQ(p.items[0].record_id, 42u);
  EXPECT_EQ(p.items[0].delta, -3);
}

TEST(Parser, ArrayNamesStringIdsAndDefaultDelta) {
  const auto p = parse(R"([{"record_id": "18446744073709551615", "record_type": "repo_downloads"},
                           {"delta": 2147483647, "record_type": 7, "record_id": 0},
                           {"record_type": 7, "record_id": 5, "delta": -2147483648}])");
  ASSERT_FALSE(p.error) << p.error->message;
  ASSERT_EQ(p.items.size(), 3u);
  EXPECT_EQ(p.items[0].record_type, 123u);
  EXPECT_EQ(p.items[0].record_id, 18446744073709551615ull);
  EXPECT_EQ(p.items[0].delta, 1);
  EXPECT_EQ(p.items[1].delta, 2147483647);
  EXPECT_EQ(p.items[2].delta, -2147483648);
}

TEST(Parser, EmptyArrayAcceptsNothing) {
  const auto p = parse("[]");
  EXPECT_FALSE(p.error);
  EXPECT_TRUE(p.items.empty());
}

TEST(Parser, NdjsonSkipsBlankLinesAndCountsItems) {
  const auto p = parse(
      "{\"record_type\": 7, \"record_id\": 1}\r\n\n   \n{\"record_type\": 7, \"record_id\": 2, "
      "\"delta\": 5}",
      body_format::ndjson);
  ASSERT_FALSE(p.error) << p.error->message;
  ASSERT_EQ(p.items.size(), 2u);
  EXPECT_EQ(p.items[1].record_id, 2u);
  EXPECT_EQ(p.items[1].delta, 5);
  expect_error("{\"record_type\": 7, \"record_id\": 1}\n\n{\"record_type\": 7, \"bad\": 1}\n",
               "unknown field \"bad\"", 1, body_format::ndjson);
  expect_error("{\"record_type\": 7, \"record_id\": 1}\n[{\"record_type\": 7, \"record_id\": 1}]\n",
               "one JSON object", 1, body_format::ndjson);
  expect_error("{\"record_type\": 7, \"record_id\": 1} {\"record_type\": 7, \"record_id\": 1}\n",
               "content after", 0, body_format::ndjson);
  expect_error("\n\n", "empty body", std::nullopt, body_format::ndjson);
}

TEST(Parser, MalformedJson) {
  expect_error("", "empty body", std::nullopt);
  expect_error("{", "malformed JSON", 0);
  expect_error(R"([{"record_type": 7, "record_id": 1}, {"record_type": 7, "record_id": ]])",
               "malformed", 1);
  expect_error(R"([{"record_type": 7, "record_id": 1},])", "malformed", 1);
  expect_error(R"({"record_type": 7, "record_id": 1} x)", "malformed", 0);
  expect_error(R"([{"record_type": 7, "record_id": 1}]])", "content after", 1);
  expect_error(R"({"record_type": 7, "record_id": 01})", "malformed", 0);
  expect_error("\"text\"", "object or an array", std::nullopt);
}

TEST(Parser, WrongTypes) {
  expect_error(R"({"record_type": 7, "record_id": 1.5})", "must be an integer", 0);
  expect_error(R"({"record_type": 7, "record_id": 1e3})", "must be an integer", 0);
  expect_error(R"({"record_type": 7, "record_id": true})", "record_id", 0);
  expect_error(R"({"record_type": 7, "record_id": null})", "record_id", 0);
  expect_error(R"({"record_type": [7], "record_id": 1})", "record_type", 0);
  expect_error(R"({"record_type": 7, "record_id": 1, "delta": "3"})",
               "\"delta\" must be an integer", 0);
  expect_error(R"({"record_type": 7, "record_id": "-1"})", "decimal integer", 0);
  expect_error(R"({"record_type": 7, "record_id": ""})", "decimal integer", 0);
  expect_error(R"({"record_type": 7, "record_id": " 1"})", "decimal integer", 0);
  expect_error(R"([{"record_type": 7, "record_id": 1}, 5])", "must be a JSON object", 1);
}

TEST(Parser, OutOfRange) {
  expect_error(R"({"record_type": -1, "record_id": 1})", "out of range", 0);
  expect_error(R"({"record_type": 2147483648, "record_id": 1})", "out of range", 0);
  expect_error(R"({"record_type": 7, "record_id": -1})", "out of range", 0);
  expect_error(R"({"record_type": 7, "record_id": 18446744073709551616})", "out of range", 0);
  expect_error(R"({"record_type": 7, "record_id": "18446744073709551616"})", "out of range", 0);
  expect_error(R"({"record_type": 7, "record_id": 1, "delta": 2147483648})", "out of range", 0);
  expect_error(R"({"record_type": 7, "record_id": 1, "delta": -2147483649})", "out of range", 0);
}

TEST(Parser, UnknownDuplicateAndMissingFields) {
  expect_error(R"({"record_type": 7, "record_id": 1, "detla": 1})", "unknown field \"detla\"", 0);
  expect_error(R"({"record_type": 7, "record_id": 1, "record_id": 2})", "duplicate field", 0);
  expect_error(R"({"record_id": 1})", "missing field \"record_type\"", 0);
  expect_error(R"({"record_type": 7})", "missing field \"record_id\"", 0);
}

TEST(Parser, LongFieldNamesAreCutOnACharacterBoundary) {
  const std::string key = std::string(63, 'a') + "\xc3\xa9";  // 63 bytes, then a 2-byte character
  const auto p = parse("{\"record_type\": 7, \"record_id\": 1, \"" + key + "\": 1}");
  ASSERT_TRUE(p.error);
  EXPECT_EQ(p.error->message, "unknown field \"" + std::string(63, 'a') + "...\"");
}

TEST(Parser, NamesQuotedInErrorsAreEscapedAsJson) {
  // "a\"b" followed by U+0001: the excerpt keeps the quote and the control character,
  // escaped, so the message is JSON-quoted text and says which name was wrong.
  const auto p = parse(R"({"record_type": 7, "record_id": 1, "a\"b\u0001": 1})");
  ASSERT_TRUE(p.error);
  EXPECT_EQ(p.error->message, R"(unknown field "a\"b\u0001")");
}

TEST(Parser, UndeclaredTypes) {
  expect_error(R"({"record_type": 8, "record_id": 1})", "not declared", 0);
  expect_error(R"({"record_type": "nope", "record_id": 1})", "unknown counter name", 0);
  const auto p = parse(R"({"record_type": 8, "record_id": 1})", body_format::json, open_types);
  EXPECT_FALSE(p.error);
}

TEST(Parser, ItemLimitIs413) {
  std::string body = "[";
  for (int i = 0; i < 4; ++i)
    body += std::string(i ? "," : "") + R"({"record_type": 7, "record_id": 1})";
  body += "]";
  auto p = parse(body, body_format::json, strict, 3);
  ASSERT_TRUE(p.error);
  EXPECT_EQ(p.error->status, 413u);
  EXPECT_EQ(p.error->index, 3u);
  p = parse(body, body_format::json, strict, 4);
  EXPECT_FALSE(p.error);
}

// parse_increments() reads the usual shape with a fast scanner and gives up on the rest;
// on every body it must answer what simdjson alone (the reference) answers. These are
// the edges where a hand-written scanner goes wrong: numbers JSON forbids or simdjson
// types differently, escapes, whitespace, limits, lines.
TEST(Parser, FastPathAgreesWithReference) {
  const std::vector<std::string> objects = {
      R"({"record_type": 7, "record_id": 1})",
      R"({"record_type":7,"record_id":18446744073709551615,"delta":-2147483648})",
      "{\t\"record_id\" :\r 5 ,\"record_type\":7 , \"delta\": 2147483647 }",
      "{\"record_type\":\n7, \"record_id\": 1}",
      R"({"record_type": 7, "record_id": 18446744073709551616})",
      R"({"record_type": 7, "record_id": 99999999999999999999})",
      R"({"record_type": 7, "record_id": "18446744073709551615"})",
      R"({"record_type": 7, "record_id": "18446744073709551616"})",
      R"({"record_type": 7, "record_id": "007"})",
      R"({"record_type": 7, "record_id": "7x"})",
      R"({"record_type": 7, "record_id": ""})",
      R"({"record_type": 7, "record_id": 007})",
      R"({"record_type": 7, "record_id": 0})",
      R"({"record_type": 7, "record_id": -0})",
      R"({"record_type": 7, "record_id": 1, "delta": -0})",
      R"({"record_type": 7, "record_id": 1, "delta": 0})",
      R"({"record_type": 7, "record_id": 1, "delta": 2147483648})",
      R"({"record_type": 7, "record_id": 1, "delta": -2147483649})",
      R"({"record_type": 7, "record_id": 1, "delta": 1.0})",
      R"({"record_type": 7, "record_id": 1e2})",
      R"({"record_type": 7, "record_id": 1E2})",
      R"({"record_type": 7, "record_id": 1, "delta": --1})",
      R"({"record_type": 7, "record_id": 1, "delta": +1})",
      R"({"record_type": 07, "record_id": 1})",
      R"({"record_type": 2147483647, "record_id": 1})",
      R"({"record_type": 2147483648, "record_id": 1})",
      R"({"record_type": 8, "record_id": 1})",
      R"({"record_type": "page_views", "record_id": 1})",
      R"({"record\u005ftype": 7, "record_id": 1})",
      R"({"record_type": 7, "record_id": 1, "record_id": 1})",
      R"({"record_type": 7, "record_id": 1, "delta": 1, "delta": 1})",
      R"({"record_type": 7, "record_type": 7, "record_id": 1})",
      R"({"record_type": 7})",
      R"({"record_id": 1})",
      R"({})",
      R"({"record_type": 7, "record_id": 1,})",
      R"({"record_type": 7 "record_id": 1})",
      R"({"record_type": 7, "record_id": 1})x",
      R"({"record_type": 7, "record_id": 1}})",
      R"({"record_type": 7, "record_id": 1, "other": 1})",
      R"({"record_type": 7, "record_id": tru})",
      "{\"record_type\": 7, \"record_id\": 1}\x0b",
      std::string("{\"record_type\": 7, \"record_id\": 1\0}", 35),
  };
  std::vector<std::string> bodies;
  for (const auto& o : objects) {
    bodies.push_back(o);
    bodies.push_back("[" + o + "]");
    bodies.push_back("[" + o + ", " + objects[0] + "]");
    bodies.push_back(objects[0] + "\n" + o + "\n");
    bodies.push_back("\r\n  " + o + " \r\n\n" + objects[0]);
  }
  for (const std::string b : {"[]", "[ ]", " [\n] ", "[,]", "", " ", "\n", "[{}"})
    bodies.push_back(b);
  bodies.push_back("[" + objects[0]);
  for (const auto& body : bodies) {
    for (const auto f : {body_format::json, body_format::ndjson}) {
      for (const std::size_t max_items : {1, 2, 100}) {
        for (const auto* types : {&strict, &open_types}) {
          std::vector<increment> fast, ref;
          const auto e1 = parse_increments(body, f, *types, max_items, fast);
          const auto e2 = parse_increments_reference(body, f, *types, max_items, ref);
          ASSERT_EQ(e1.has_value(), e2.has_value()) << body;
          if (e1) {
            EXPECT_EQ(e1->status, e2->status) << body;
            EXPECT_EQ(e1->message, e2->message) << body;
            EXPECT_EQ(e1->index, e2->index) << body;
            continue;
          }
          ASSERT_EQ(fast.size(), ref.size()) << body;
          for (std::size_t i = 0; i < fast.size(); ++i) {
            EXPECT_EQ(fast[i].record_type, ref[i].record_type) << body;
            EXPECT_EQ(fast[i].record_id, ref[i].record_id) << body;
            EXPECT_EQ(fast[i].delta, ref[i].delta) << body;
          }
        }
      }
    }
  }
}

TEST(Parser, ContentTypes) {
  EXPECT_EQ(format_for("application/json"), body_format::json);
  EXPECT_EQ(format_for("Application/JSON; charset=utf-8"), body_format::json);
  EXPECT_EQ(format_for("application/x-ndjson"), body_format::ndjson);
  EXPECT_FALSE(format_for("text/plain"));
  EXPECT_FALSE(format_for(""));
  EXPECT_FALSE(format_for("application/jsonx"));
}

}  // namespace
}  // namespace slotted::ingest
