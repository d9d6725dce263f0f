// The access log line parsers and rules (logs/line_parser.hpp).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "logs/line_parser.hpp"
#include "logs/log_ingest.hpp"

namespace slotted::logs {
namespace {

TEST(LogLine, CombinedLineParses) {
  parsed_line l;
  ASSERT_TRUE(parse_combined(
      R"(203.0.113.7 - - [10/Oct/2000:13:55:36 -0700] "GET /downloads/42/x.tar.gz?mirror=1 HTTP/1.1" 200 2326 "http://example.com/" "curl/8.0")",
      l));
  EXPECT_EQ(l.method, "GET");
  EXPECT_EQ(l.path, "/downloads/42/x.tar.gz");
  EXPECT_EQ(l.status, 200u);
  EXPECT_EQ(l.at, 971211336);  // 2000-10-10T20:55:36Z
}

TEST(LogLine, CombinedEdgeCases) {
  parsed_line l;
  // Apache escapes a quote in the request as \".
  ASSERT_TRUE(parse_combined(
      R"(::1 - bob [01/Jan/2024:00:00:00 +0000] "GET /a\"b HTTP/1.1" 404 0 "-" "-")", l));
  EXPECT_EQ(l.path, R"(/a\"b)");
  EXPECT_EQ(l.status, 404u);
  EXPECT_EQ(l.at, 1704067200);
  // A request that is no request line (nginx logs "-" for a 400): method only.
  ASSERT_TRUE(parse_combined(R"(1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "-" 400 0 "-" "-")", l));
  EXPECT_EQ(l.method, "-");
  EXPECT_EQ(l.path, "");
  // Without referer and user agent (common log format).
  ASSERT_TRUE(
      parse_combined(R"(1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "HEAD / HTTP/1.0" 200 0)", l));
  EXPECT_EQ(l.method, "HEAD");
}

TEST(LogLine, TheClientIsTheRemoteAddressOrNone) {
  parsed_line l;
  ASSERT_TRUE(parse_combined(
      R"(2001:db8::7 - - [01/Jan/2024:00:00:00 +0000] "GET / HTTP/1.1" 200 0 "-" "-")", l));
  EXPECT_EQ(l.client, "2001:db8::7");
  // "-" (no address known) is no client; a later line without one does not keep the last.
  ASSERT_TRUE(parse_combined(R"(- - - [01/Jan/2024:00:00:00 +0000] "GET / HTTP/1.1" 200 0)", l));
  EXPECT_EQ(l.client, "");
  std::string scratch;
  config::log_json_fields f;
  const std::string with = R"({"time":"2024-01-01T00:00:00Z","remote_addr":"192.0.2.9",)"
                           R"("method":"GET","path":"/","status":200})";
  ASSERT_TRUE(parse_json(with, f, l, scratch));
  EXPECT_EQ(l.client, "192.0.2.9");
  ASSERT_TRUE(parse_json(
      R"({"time":"2024-01-01T00:00:00Z","method":"GET","path":"/","status":200})", f, l, scratch));
  EXPECT_EQ(l.client, "");
  // Renamed; a client that is not a string is none, the line still parses.
  f.client = "ip";
  ASSERT_TRUE(parse_json(
      R"({"time":"2024-01-01T00:00:00Z","ip":"h:1","method":"GET","path":"/","status":200})", f, l,
      scratch));
  EXPECT_EQ(l.client, "h:1");
  ASSERT_TRUE(
      parse_json(R"({"time":"2024-01-01T00:00:00Z","ip":7,"method":"GET","path":"/","status":200})",
                 f, l, scratch));
  EXPECT_EQ(l.client, "");
  ASSERT_TRUE(parse_json(
      R"({"time":"2024-01-01T00:00:00Z","ip":null,"method":"GET","path":"/","status":200})", f, l,
      scratch));
  EXPECT_EQ(l.client, "");
}

TEST(LogLine, MalformedCombinedLinesAreRefused) {
  parsed_line l;
  for (const char* bad : {
           "",
           "garbage",
           R"(1.2.3.4 - - [01/Jan/2024:00:00:00] "GET / HTTP/1.1" 200 0)",
           R"(1.2.3.4 - - [01/Foo/2024:00:00:00 +0000] "GET / HTTP/1.1" 200 0)",
           R"(1.2.3.4 - - [01/Jan/2024:25:00:00 +0000] "GET / HTTP/1.1" 200 0)",
           R"(1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "GET / HTTP/1.1 200 0)",
           R"(1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "GET / HTTP/1.1" 20 0)",
           R"(1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "GET / HTTP/1.1" 2000 0)",
           R"(1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "GET / HTTP/1.1")",
       }) {
    EXPECT_FALSE(parse_combined(bad, l)) << bad;
  }
}

TEST(LogLine, JsonLineParses) {
  parsed_line l;
  std::string scratch;
  const config::log_json_fields f;
  ASSERT_TRUE(parse_json(
      R"({"time":"2000-10-10T13:55:36-07:00","remote":"1.2.3.4","method":"GET","path":"/downloads/7/\u0041?x=\"1\"","status":200,"bytes":12})",
      f, l, scratch));
  EXPECT_EQ(l.method, "GET");
  EXPECT_EQ(l.path, "/downloads/7/A");
  EXPECT_EQ(l.status, 200u);
  EXPECT_EQ(l.at, 971211336);
  ASSERT_TRUE(
      parse_json(R"({"time": "1700000000.123", "method": "HEAD", "path": "/", "status": "206"})", f,
                 l, scratch));
  EXPECT_EQ(l.at, 1700000000);
  EXPECT_EQ(l.status, 206u);
  ASSERT_TRUE(parse_json(
      R"({"time":"2024-01-01T00:00:00Z","method":"GET","path":"/","status":200})", f, l, scratch));
  EXPECT_EQ(l.at, 1704067200);
  config::log_json_fields named;
  named.path = "uri";
  ASSERT_TRUE(
      parse_json(R"({"time":"2024-01-01T00:00:00Z","method":"GET","uri":"/u","status":200})", named,
                 l, scratch));
  EXPECT_EQ(l.path, "/u");
}

TEST(LogLine, MalformedJsonLinesAreRefused) {
  parsed_line l;
  std::string scratch;
  const config::log_json_fields f;
  for (const char* bad : {
           "",
           "{}",
           "not json",
           R"({"time":"2024-01-01T00:00:00Z","method":"GET","path":"/"})",
           R"({"time":"yesterday","method":"GET","path":"/","status":200})",
           R"({"time":"2024-01-01T00:00:00Z","method":"GET","path":"/","status":200)",
           R"({"time":"2024-01-01T00:00:00Z","method":"GET","path":"/","status":200} x)",
           R"({"time":"2024-01-01T00:00:00Z","method":"GET","path":"/\q","status":200})",
       }) {
    EXPECT_FALSE(parse_json(bad, f, l, scratch)) << bad;
  }
}

TEST(LogLine, RulesMatchMethodStatusAndPath) {
  config::log_rule r{"c", "^/downloads/([0-9]+)/"};
  const compiled_rule rule(r, 7);
  parsed_line l{"GET", "/downloads/42/f.tgz", 200, 0, {}};
  EXPECT_EQ(rule.match(l, UINT64_MAX), 42u);
  EXPECT_EQ(rule.record_type(), 7u);
  l.method = "HEAD";
  EXPECT_FALSE(rule.match(l, UINT64_MAX));
  l.method = "GET";
  l.status = 206;
  EXPECT_FALSE(rule.match(l, UINT64_MAX));
  l.status = 200;
  l.path = "/other/42/";
  EXPECT_FALSE(rule.match(l, UINT64_MAX));
  l.path = "/downloads/18446744073709551616/";  // past UINT64_MAX
  EXPECT_FALSE(rule.match(l, UINT64_MAX));
  l.path = "/downloads/100/";
  EXPECT_FALSE(rule.match(l, 99));
  // A pattern that may match an empty group: no id.
  const compiled_rule loose(config::log_rule{"c", "/d/([0-9]*)"}, 1);
  EXPECT_FALSE(loose.match(parsed_line{"GET", "/d/x", 200, 0, {}}, UINT64_MAX));
  EXPECT_EQ(loose.match(parsed_line{"GET", "/a/d/5", 200, 0, {}}, UINT64_MAX), 5u);
}

// nginx and Apache resolve dot segments (also percent-encoded ones) before they serve a
// path, and log it as it was asked: the line counts for what was served.
TEST(LogLine, APathCountsAsTheServerServedIt) {
  const compiled_rule rule(config::log_rule{"c", "^/downloads/([0-9]+)/"}, 7);
  const auto id = [&](const char* path) {
    return rule.match(parsed_line{"GET", path, 200, 0, {}}, UINT64_MAX);
  };
  EXPECT_EQ(id("/downloads/999/../1/f.tgz"), 1u);
  EXPECT_EQ(id("/downloads/999/%2e%2E/1/f.tgz"), 1u);
  EXPECT_EQ(id("/downloads/999%2F..%2f1/f.tgz"), 1u);
  EXPECT_EQ(id("/downloads/./5/f.tgz"), 5u);
  EXPECT_EQ(id("/x/../downloads/6/f.tgz"), 6u);
  EXPECT_EQ(id("/../downloads/9/f.tgz"), 9u);    // nothing above the root
  EXPECT_FALSE(id("/downloads/7/../../f.tgz"));  // served /f.tgz
  EXPECT_FALSE(id("/downloads/7/.."));           // served /downloads/
  EXPECT_EQ(id("/downloads/8/a%20b..tgz"), 8u);  // other escapes and dots stay as they are
  EXPECT_EQ(id("/downloads/10/f.tgz%2"), 10u);   // a cut escape too
  // Empty segments merge before ".." goes up (merge_slashes, MergeSlashes).
  EXPECT_EQ(id("/downloads/1//../999/f.tgz"), 999u);
  EXPECT_EQ(id("/downloads/1/%2f../999/f.tgz"), 999u);
  EXPECT_EQ(id("/downloads//11/f.tgz"), 11u);
}

// The user agent: the quoted field after the referer, as written, only when asked for.
TEST(LogLine, TheUserAgentIsTheFieldAfterTheReferer) {
  parsed_line l;
  const std::string_view nginx =
      R"L(203.0.113.7 - - [10/Oct/2000:13:55:36 -0700] "GET /d/1/f HTTP/1.1" 200 2326 "https://x/?q=\x22a b\x22" "cargo/1.75.0 (x86_64)")L";
  ASSERT_TRUE(parse_combined(nginx, l));
  EXPECT_EQ(l.user_agent, "");  // not asked for: not looked for
  ASSERT_TRUE(parse_combined(nginx, l, true));
  EXPECT_EQ(l.user_agent, "cargo/1.75.0 (x86_64)");
  // Apache's \" inside the referer and the user agent; an empty user agent; "-".
  ASSERT_TRUE(parse_combined(
      R"(::1 - - [01/Jan/2024:00:00:00 +0000] "GET /d/1/f HTTP/1.1" 200 0 "a \"b\" c" "pip/24 \"x\"")",
      l, true));
  EXPECT_EQ(l.user_agent, R"(pip/24 \"x\")");
  ASSERT_TRUE(parse_combined(
      R"(::1 - - [01/Jan/2024:00:00:00 +0000] "GET /d/1/f HTTP/1.1" 200 0 "-" "")", l, true));
  EXPECT_EQ(l.user_agent, "");
  // The common log format (no referer, no user agent), or another shape there: none,
  // and the line still parses.
  for (const char* tail : {"", " 0", " 0 \"-\"", " 0 \"-\" \"unterminated", " 0 - cargo/1"}) {
    ASSERT_TRUE(parse_combined(
        std::string(R"(::1 - - [01/Jan/2024:00:00:00 +0000] "GET /d/1/f HTTP/1.1" 200)") + tail, l,
        true))
        << tail;
    EXPECT_EQ(l.user_agent, "") << tail;
  }
  // json: the configured field, a string as written; another value is none.
  std::string scratch;
  config::log_json_fields f;
  ASSERT_TRUE(parse_json(
      R"({"time":"2024-01-01T00:00:00Z","method":"GET","path":"/d/1/f","status":200,"user_agent":"pip/24.0 \"x\""})",
      f, l, scratch));
  EXPECT_EQ(l.user_agent, R"(pip/24.0 \"x\")");
  f.user_agent = "ua";
  ASSERT_TRUE(parse_json(
      R"({"time":"2024-01-01T00:00:00Z","method":"GET","path":"/d/1/f","status":200,"ua":null,"user_agent":"x"})",
      f, l, scratch));
  EXPECT_EQ(l.user_agent, "");
}

// user_agent must find the user agent, not_user_agent must not.
TEST(LogLine, ARuleMatchesTheUserAgent) {
  config::log_rule r{"c", "^/d/([0-9]+)/"};
  r.user_agent = "^(cargo|pip)/";
  r.not_user_agent = "(?i)bot";
  const compiled_rule rule(r, 7);
  EXPECT_TRUE(rule.wants_user_agent());
  EXPECT_FALSE(compiled_rule(config::log_rule{"c", "^/d/([0-9]+)/"}, 7).wants_user_agent());
  parsed_line l{"GET", "/d/5/f", 200, 0, {}, "cargo/1.75"};
  EXPECT_EQ(rule.match(l, UINT64_MAX), 5u);
  l.user_agent = "pip/24.0 CPython/3.12";
  EXPECT_EQ(rule.match(l, UINT64_MAX), 5u);
  l.user_agent = "pip/24.0 (RoBot)";
  EXPECT_FALSE(rule.match(l, UINT64_MAX));
  l.user_agent = "curl/8 cargo/1";
  EXPECT_FALSE(rule.match(l, UINT64_MAX));
  l.user_agent = "";
  EXPECT_FALSE(rule.match(l, UINT64_MAX));
  // Rules testing the same request under other user agents share that test (a line's
  // path is matched once for them); another path, method or status does not.
  EXPECT_TRUE(rule.same_request_test(compiled_rule(config::log_rule{"c", "^/d/([0-9]+)/"}, 8)));
  EXPECT_FALSE(rule.same_request_test(compiled_rule(config::log_rule{"c", "^/e/([0-9]+)/"}, 7)));
  config::log_rule head{"c", "^/d/([0-9]+)/"};
  head.methods = {"GET", "HEAD"};
  EXPECT_FALSE(rule.same_request_test(compiled_rule(head, 7)));
  // A huge user agent (what a 16 KiB line leaves) is searched in linear time.
  const std::string huge = "cargo/" + std::string(16000, 'b');
  l.user_agent = huge;
  EXPECT_EQ(rule.match(l, UINT64_MAX), 5u);
}

TEST(LogLine, ThePathEndsAtAFragment) {
  // Served /downloads/1/f.tgz: what follows '#' is no part of the path.
  parsed_line l;
  ASSERT_TRUE(parse_combined(
      "192.0.2.1 - - [26/Nov/2026:10:00:00 +0000] \"GET /downloads/1/f.tgz#/../../999/ "
      "HTTP/1.1\" 200 123 \"-\" \"curl/8\"",
      l));
  EXPECT_EQ(l.path, "/downloads/1/f.tgz");
  const compiled_rule rule(config::log_rule{"c", "^/downloads/([0-9]+)/"}, 7);
  EXPECT_EQ(rule.match(l, UINT64_MAX), 1u);
  std::string scratch;
  const config::log_json_fields f;
  ASSERT_TRUE(parse_json(
      R"({"time":"2024-01-01T00:00:00Z","method":"GET","path":"/downloads/2/f#/../../9/","status":200})",
      f, l, scratch));
  EXPECT_EQ(rule.match(l, UINT64_MAX), 2u);
}

TEST(LogLine, LiteralPrefixIsOnlyWhatIsCertain) {
  EXPECT_EQ(literal_prefix("^/downloads/([0-9]+)/"), "/downloads/");
  EXPECT_EQ(literal_prefix("^/files?/([0-9]+)"), "/file");
  EXPECT_EQ(literal_prefix("/downloads/([0-9]+)"), "");
  EXPECT_EQ(literal_prefix("^/a/(1)|^/b/(2)"), "");
  EXPECT_EQ(literal_prefix("^/a\\.b/(1)"), "/a");
}

TEST(LogLine, UnixSecondsOfCivilDates) {
  EXPECT_EQ(unix_seconds(1970, 1, 1, 0, 0, 0), 0);
  EXPECT_EQ(unix_seconds(2000, 2, 29, 12, 0, 0), 951825600);
  EXPECT_EQ(unix_seconds(2024, 12, 31, 23, 59, 59), 1735689599);
}

// Rules are matched by RE2, in time linear in the path: the backtracking-prone pattern
// and the 8 KiB path that cost boost::regex about a second each (and then gave up, the
// line a rule_error) are decided at once, 500 times in well under the test's timeout
// (about 0.2 ms each here; boost: 500 s), and such a line still counts.
TEST(LogLine, ABacktrackingPronePatternIsMatchedInLinearTime) {
  const compiled_rule rule(config::log_rule{"c", R"(^/downloads/([0-9]+)/(.+)+\.zip$)"}, 1);
  const std::string no = "/downloads/1/" + std::string(8192 - 13, 'a');
  const std::string yes = no.substr(0, no.size() - 4) + ".zip";
  for (int i = 0; i < 250; ++i) {
    ASSERT_FALSE(rule.match(parsed_line{"GET", no, 200, 0, {}}, UINT64_MAX));
    ASSERT_EQ(rule.match(parsed_line{"GET", yes, 200, 0, {}}, UINT64_MAX), 1u);
  }
  EXPECT_EQ(rule.match(parsed_line{"GET", "/downloads/3/a.zip", 200, 0, {}}, UINT64_MAX), 3u);
}

// What only a backtracking engine can do is refused when the rule is compiled (config
// validation says so first, naming the rule: LogConfig).
TEST(LogLine, ThePatternIsCompiledByRe2) {
  EXPECT_TRUE(config::compile_pattern("^/d/([0-9]+)/").re);
  const auto back = config::compile_pattern(R"(^/d/([0-9]+)/\1)");
  EXPECT_FALSE(back.re);
  EXPECT_NE(back.error.find("RE2"), std::string::npos) << back.error;
  EXPECT_NE(back.error.find("backreference"), std::string::npos) << back.error;
  EXPECT_FALSE(config::compile_pattern("^/d/(?=1)([0-9]+)").re);  // lookahead
  EXPECT_FALSE(config::compile_pattern("^/d/[0-9]+").re);         // no group
  EXPECT_THROW(compiled_rule(config::log_rule{"c", R"(^/d/([0-9]+)\1)"}, 1), std::invalid_argument);
}

TEST(LogLine, FarFutureTimeIsMalformed) {
  parsed_line l;
  std::string scratch;
  const config::log_json_fields f;
  // Year 10000: parses, but is no time a count can have.
  ASSERT_TRUE(
      parse_json(R"({"time":"253402300800","method":"GET","path":"/downloads/1/a","status":200})",
                 f, l, scratch));
  const std::int64_t now = 1'700'000'000;
  EXPECT_FALSE(line_time_accepted(l.at, now));
  EXPECT_TRUE(line_time_accepted(now + 300, now));  // the HTTP bound, max_at_ahead_seconds
  EXPECT_FALSE(line_time_accepted(now + 301, now));
  EXPECT_TRUE(line_time_accepted(0, now));
  EXPECT_FALSE(line_time_accepted(-1, now));
}

TEST(LogFile, TruncationDuringAPassIsDetected) {
  const std::string path = ::testing::TempDir() + "log_file_snapshot_test.log";
  std::ofstream(path, std::ios::trunc) << "line one\nline two\n";
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  file_snapshot before, after;
  ASSERT_TRUE(snapshot_of(fd, before));
  std::ofstream(path, std::ios::app) << "line three\n";  // appended: the same file
  ASSERT_TRUE(snapshot_of(fd, after));
  EXPECT_TRUE(still_same_file(before, after));
  // copytruncate, then written again past the old size: other first bytes.
  std::ofstream(path, std::ios::trunc) << "other content, longer than before\n";
  ASSERT_TRUE(snapshot_of(fd, after));
  EXPECT_FALSE(still_same_file(before, after));
  // Cut shorter.
  std::ofstream(path, std::ios::trunc) << "line";
  ASSERT_TRUE(snapshot_of(fd, after));
  EXPECT_FALSE(still_same_file(before, after));
  ::close(fd);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace slotted::logs
