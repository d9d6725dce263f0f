// The one JSON string writer (util/json.hpp): whatever bytes a request carries, the
// error bodies quoting them are valid JSON and valid UTF-8.

#include <gtest/gtest.h>
#include <simdjson.h>

#include <string>

#include "http/router.hpp"
#include "support/fake_backend.hpp"
#include "util/json.hpp"

namespace slotted {
namespace {

// What a JSON parser reads back from the literal, or why it refused it.
std::string parsed(const std::string& literal) {
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  if (auto err = p.parse(literal).get(doc))
    return std::string("refused: ") + simdjson::error_message(err);
  std::string_view s;
  if (doc.get(s)) return "not a string";
  return std::string(s);
}

std::string literal(std::string_view s) {
  std::string out;
  json::append_string(out, s);
  return out;
}

TEST(JsonText, WellFormedUtf8AndEscapesRoundTrip) {
  for (const std::string s : {"plain", "quote \" back \\ slash", "tab\tnl\n", "caf\xC3\xA9",
                              "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xF4\x8F\xBF\xBF"})
    EXPECT_EQ(parsed(literal(s)), s);
}

TEST(JsonText, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  const std::string fffd = "\xEF\xBF\xBD";
  // A stray continuation, a byte never in UTF-8, an overlong form, a surrogate, past
  // U+10FFFF, and a sequence cut short by the end or by an ASCII byte.
  EXPECT_EQ(parsed(literal("a\x80"
                           "b")),
            "a" + fffd + "b");
  EXPECT_EQ(parsed(literal("\xFF\xFE")), fffd + fffd);
  EXPECT_EQ(parsed(literal("\xC0\xAF")), fffd + fffd);
  EXPECT_EQ(parsed(literal("\xED\xA0\x80")), fffd + fffd + fffd);
  EXPECT_EQ(parsed(literal("\xF4\x90\x80\x80")), fffd + fffd + fffd + fffd);
  EXPECT_EQ(parsed(literal("x\xE2\x82")), "x" + fffd + fffd);
  EXPECT_EQ(parsed(literal("\xE2"
                           "A")),
            fffd + "A");
}

TEST(JsonText, AnExcerptCutsOnACharacterAndBacksUpAtMostThreeBytes) {
  // 63 ASCII bytes then a 2-byte character straddling the 64-byte cut: the cut moves before it.
  const std::string s = std::string(63, 'a') + "\xC3\xA9" + "zz";
  EXPECT_EQ(parsed(json::excerpt(s)), std::string(63, 'a') + "...");
  // Continuation bytes alone: not UTF-8, so nothing is kept whole, but the excerpt stays
  // near its bound instead of backing up to nothing.
  const std::string junk(200, '\x80');
  std::string fffd61;
  for (int i = 0; i < 61; ++i) fffd61 += "\xEF\xBF\xBD";
  EXPECT_EQ(parsed(json::excerpt(junk)), fffd61 + "...");
}

TEST(JsonText, AnUnknownQueryParameterOfAnyBytesIsAnsweredInValidJson) {
  // The request the HTTP fuzzer found: a query parameter name of bytes that are not
  // UTF-8 was quoted raw into the 400's JSON body.
  config::daemon_config cfg;
  cfg.counters = {{"downloads", 3, std::nullopt}};
  test::fake_backend backend;
  metrics::registry metrics;
  ingest::table_limits limits;
  http::router router{cfg, backend, metrics, limits};
  const std::string target = "/v1/counters/3?42" + std::string(80, '\xFF') + "=1";
  http::request req{boost::beast::http::verb::get, target, 11};
  std::vector<http::response> answers;
  router.handle(std::move(req), [&](http::response&& res) { answers.push_back(std::move(res)); });
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].result_int(), 400u);
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  ASSERT_FALSE(p.parse(answers[0].body()).get(doc)) << answers[0].body();
  std::string_view error;
  ASSERT_FALSE(doc["error"].get(error));
  EXPECT_NE(error.find("unknown query parameter \"42\xEF\xBF\xBD"), std::string_view::npos)
      << error;
}

}  // namespace
}  // namespace slotted
