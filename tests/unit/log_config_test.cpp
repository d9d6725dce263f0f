// log_sources (config/log_sources.hpp): parsed with defaults, and every bad value named
// with its key and line.
#include <gtest/gtest.h>

#include <algorithm>

#include "config/config.hpp"
#include "db/grants.hpp"
#include "support/config_problems.hpp"

namespace slotted::config {
namespace {

const char* counters = "counters:\n  - {name: repo_downloads, record_type: 7}\n";

// A config of `counters` and `yaml`'s sections.
std::vector<std::string> log_problems_of(const std::string& yaml) {
  return test::problems_of(std::string(counters) + yaml);
}
std::string only_log_problem(const std::string& yaml) {
  return test::only_problem(std::string(counters) + yaml);
}

TEST(LogConfig, ASourceParsesWithItsDefaults) {
  const auto c = parse_config(std::string(counters) +
                                  "log_sources:\n"
                                  "  - path: /var/log/nginx/access.log\n"
                                  "    rules:\n"
                                  "      - counter: repo_downloads\n"
                                  "        path: '^/downloads/([0-9]+)/'\n",
                              "test.yaml");
  ASSERT_EQ(c.log_sources.size(), 1u);
  const auto& s = c.log_sources[0];
  EXPECT_EQ(s.path, "/var/log/nginx/access.log");
  EXPECT_EQ(s.format, log_format::combined);
  ASSERT_EQ(s.rules.size(), 1u);
  EXPECT_EQ(s.rules[0].counter, "repo_downloads");
  EXPECT_EQ(s.rules[0].path, "^/downloads/([0-9]+)/");
  EXPECT_EQ(s.rules[0].methods, std::vector<std::string>{"GET"});
  EXPECT_EQ(s.rules[0].statuses, std::vector<unsigned>{200});
}

TEST(LogConfig, JsonFieldsMethodsAndStatusesAreTaken) {
  const auto c = parse_config(std::string(counters) +
                                  "log_sources:\n"
                                  "  - path: /logs//a/../access.json\n"
                                  "    format: json\n"
                                  "    json: {time: ts, path: uri}\n"
                                  "    rules:\n"
                                  "      - {counter: repo_downloads, path: '/d/(\\d+)', "
                                  "methods: [GET, HEAD], statuses: [200, 206]}\n",
                              "test.yaml");
  const auto& s = c.log_sources.at(0);
  EXPECT_EQ(s.path, "/logs/access.json");
  EXPECT_EQ(s.format, log_format::json);
  EXPECT_EQ(s.json.time, "ts");
  EXPECT_EQ(s.json.path, "uri");
  EXPECT_EQ(s.json.method, "method");
  EXPECT_EQ(s.json.status, "status");
  EXPECT_EQ(s.rules[0].methods, (std::vector<std::string>{"GET", "HEAD"}));
  EXPECT_EQ(s.rules[0].statuses, (std::vector<unsigned>{200, 206}));
}

TEST(LogConfig, UserAgentRulesAndFieldAreTaken) {
  const auto c = parse_config(std::string(counters) +
                                  "log_sources:\n"
                                  "  - path: /l/a.json\n"
                                  "    format: json\n"
                                  "    json: {user_agent: http_user_agent}\n"
                                  "    rules:\n"
                                  "      - {counter: repo_downloads, path: '/d/(\\d+)', "
                                  "user_agent: '^(cargo|pip)/', not_user_agent: '(?i)bot'}\n"
                                  "      - {counter: repo_downloads, path: '/e/(\\d+)'}\n",
                              "test.yaml");
  const auto& s = c.log_sources.at(0);
  EXPECT_EQ(s.json.user_agent, "http_user_agent");
  EXPECT_EQ(s.rules.at(0).user_agent, "^(cargo|pip)/");
  EXPECT_EQ(s.rules.at(0).not_user_agent, "(?i)bot");
  EXPECT_EQ(s.rules.at(1).user_agent, "");
  EXPECT_EQ(s.rules.at(1).not_user_agent, "");
  EXPECT_EQ(log_json_fields{}.user_agent, "user_agent");
}

TEST(LogConfig, BadUserAgentRulesAreNamed) {
  const std::string head = "log_sources:\n  - path: /l/a.log\n    rules:\n      - {counter: "
                           "repo_downloads, path: '/d/([0-9]+)', ";
  EXPECT_NE(only_log_problem(head + "user_agent: '(cargo'}\n")
                .find("test.yaml:6: log_sources[0].rules[0].user_agent: '(cargo' is not a pattern "
                      "RE2 takes (missing ): (cargo)"),
            std::string::npos);
  EXPECT_NE(only_log_problem(head + "not_user_agent: '(a)\\1'}\n")
                .find("log_sources[0].rules[0].not_user_agent: '(a)\\1' is not a pattern RE2 takes"),
            std::string::npos);
  EXPECT_NE(only_log_problem(head + "user_agent: ''}\n")
                .find("log_sources[0].rules[0].user_agent: expected a non-empty value"),
            std::string::npos);
  EXPECT_NE(only_log_problem(head + "user_agent: [cargo]}\n")
                .find("log_sources[0].rules[0].user_agent: expected a non-empty value"),
            std::string::npos);
  EXPECT_NE(only_log_problem(head + "user_agent: '" + std::string(1001, 'a') + "'}\n")
                .find("log_sources[0].rules[0].user_agent: the pattern is longer than 1000"),
            std::string::npos);
  // A user agent needs no capture group.
  EXPECT_TRUE(log_problems_of(head + "user_agent: cargo}\n").empty());
  EXPECT_NE(only_log_problem("log_sources:\n  - {path: /a.log, json: {user_agent: ua}, rules: "
                         "[{counter: repo_downloads, path: '(1)'}]}\n")
                .find("log_sources[0].json: only with format: json"),
            std::string::npos);
}

// Escapes and bracket items boost::regex (before issue 39) read as assertions or
// collating elements, and RE2 compiles without an error as other things (\> is a literal
// '>' to RE2): a config written for boost would count other lines, silently. Each is a
// config error saying what to write; what both engines read alike still passes.
TEST(LogConfig, PatternsBoostReadOtherwiseAreRefused) {
  const auto rule = [](const std::string& key, const std::string& pattern) {
    std::string quoted;  // YAML's single quotes: a quote inside is doubled
    for (const char c : pattern) quoted += c == '\'' ? std::string("''") : std::string(1, c);
    return "log_sources:\n  - path: /l/a.log\n    rules:\n      - {counter: repo_downloads, " +
           (key == "path" ? std::string() : std::string("path: '/d/([0-9]+)', ")) + key +
           ": '" + quoted + "'}\n";
  };
  const auto refused = [&](const std::string& key, const std::string& pattern,
                           const std::string& says) {
    const auto p = only_log_problem(rule(key, pattern));
    EXPECT_NE(p.find("log_sources[0].rules[0]." + key + ": '" + pattern + "' uses " + says),
              std::string::npos)
        << p;
  };
  refused("path", "^/d/([0-9]+)\\>", "\\> (a word's end to boost::regex");
  refused("path", "\\</d/([0-9]+)", "\\< (a word's start to boost::regex");
  refused("path", "\\`/d/([0-9]+)", "\\` (the text's start to boost::regex");
  refused("path", "^/d/([0-9]+)\\'", "\\' (the text's end to boost::regex");
  refused("path", "^/d/([0-9]+)[[.hyphen.]]", "[. in a bracket expression");
  refused("user_agent", "^[[=a=]]", "[= in a bracket expression");
  refused("not_user_agent", "(?i)\\<bot\\>", "\\< (a word's start");
  for (const std::string same :
       {"^/d/([0-9]+)\\b", "^/d/([[:digit:]]+)[[:alpha:]<>]", "^/d/([0-9]+)[\\<\\>]",
        "^/d/([0-9]+)\\Q\\>\\E", "^/d/([]0-9[]+)", "^/d/([^].=]+)", "\\A/d/([0-9]+)\\z",
        "^/d/([0-9]+)<>"})
    EXPECT_TRUE(log_problems_of(rule("path", same)).empty()) << same;
}

TEST(LogConfig, BadSourcesAreNamedWithTheirKeyAndLine) {
  const std::string head = "log_sources:\n  - path: /l/a.log\n    rules:\n      - counter: ";
  EXPECT_NE(only_log_problem(head + "nope\n        path: '/d/([0-9]+)'\n")
                .find("test.yaml:6: log_sources[0].rules[0].counter: 'nope' is not a declared "
                      "counter"),
            std::string::npos);
  EXPECT_NE(only_log_problem(head + "repo_downloads\n        path: '/d/([0-9+'\n")
                .find("log_sources[0].rules[0].path: '/d/([0-9+' is not a pattern RE2 takes"),
            std::string::npos);
  // What only a backtracking engine can do (rules match in linear time), naming the rule.
  const auto back = only_log_problem(head + "repo_downloads\n        path: '/d/([0-9]+)/\\1'\n");
  EXPECT_NE(back.find("test.yaml:7: log_sources[0].rules[0].path: '/d/([0-9]+)/\\1' is not a "
                      "pattern RE2 takes (invalid escape sequence: \\1)"),
            std::string::npos)
      << back;
  EXPECT_NE(only_log_problem(head + "repo_downloads\n        path: '/d/(?=1)([0-9]+)'\n")
                .find("log_sources[0].rules[0].path: '/d/(?=1)([0-9]+)' is not a pattern RE2 takes "
                      "(invalid perl operator: (?=)"),
            std::string::npos);
  EXPECT_NE(only_log_problem(head + "repo_downloads\n        path: '/d/[0-9]+'\n")
                .find("log_sources[0].rules[0].path: '/d/[0-9]+' has no capture group"),
            std::string::npos);
  EXPECT_NE(only_log_problem("log_sources:\n  - {path: /l/a.log, format: clf, rules: "
                         "[{counter: repo_downloads, path: '(1)'}]}\n")
                .find("log_sources[0].format: expected one of combined | json, got 'clf'"),
            std::string::npos);
  EXPECT_NE(only_log_problem("log_sources:\n"
                         "  - {path: /l/a.log, rules: [{counter: repo_downloads, path: '(1)'}]}\n"
                         "  - {path: /l/./a.log, rules: [{counter: repo_downloads, path: '(1)'}]}\n")
                .find("test.yaml:5: log_sources[1].path: '/l/a.log' is listed twice"),
            std::string::npos);
  EXPECT_NE(only_log_problem("log_sources:\n  - {path: a.log, rules: [{counter: repo_downloads, "
                         "path: '(1)'}]}\n")
                .find("log_sources[0].path: expected an absolute path"),
            std::string::npos);
  EXPECT_NE(only_log_problem("log_sources:\n  - {path: /a.log, rules: [{counter: repo_downloads, "
                         "path: '(1)', statuses: [99]}]}\n")
                .find("log_sources[0].rules[0].statuses[0]: expected an HTTP status"),
            std::string::npos);
  EXPECT_NE(only_log_problem("log_sources:\n  - {path: /a.log, rules: [{counter: repo_downloads, "
                         "path: '(1)', methods: [get]}]}\n")
                .find("log_sources[0].rules[0].methods[0]: 'get' is not a method"),
            std::string::npos);
  EXPECT_NE(only_log_problem("log_sources:\n  - {path: /a.log, json: {time: t}, rules: [{counter: "
                         "repo_downloads, path: '(1)'}]}\n")
                .find("log_sources[0].json: only with format: json"),
            std::string::npos);
  EXPECT_NE(only_log_problem("log_sources:\n  - {path: /a.log, rules: [{counter: repo_downloads, "
                         "path: '(1)', host: x}]}\n")
                .find("log_sources[0].rules[0].host: unknown key"),
            std::string::npos);
  EXPECT_NE(only_log_problem("log_sources:\n  - {path: /a.log}\n").find("log_sources[0].rules: missing"),
            std::string::npos);
}

TEST(LogConfig, AChangedSourceNeedsARestart) {
  auto a = parse_config(counters, "a");
  auto b = a;
  b.log_sources.push_back({"/x.log", log_format::combined, {}, {{"repo_downloads", "(1)"}}});
  const auto plan = plan_reload(a, b);
  EXPECT_EQ(plan.needs_restart, std::vector<std::string>{"log_sources"});
}

TEST(LogConfig, ThePositionsTableIsGrantedOnlyWithLogSources) {
  const std::string grant =
      "GRANT SELECT, INSERT, UPDATE ON `app`.`slotted_counterd_log_positions` TO 'counterd'@'%'";
  auto c = parse_config(counters, "a", {}, false);
  auto has = [&](const daemon_config& cfg) {
    const auto all = db::grant_statements(cfg, "%");
    return std::find(all.begin(), all.end(), grant) != all.end();
  };
  EXPECT_FALSE(has(c));
  c.log_sources.push_back({"/x.log", log_format::combined, {}, {{"repo_downloads", "(1)"}}});
  EXPECT_TRUE(has(c));
}

}  // namespace
}  // namespace slotted::config
