// Rule patterns matched by boost::regex (perl syntax, what log_sources used up to issue
// 39) and by RE2 (linear time), side by side in one run, on realistic rule patterns and
// request paths, and on a backtracking-prone pattern with an 8 KiB path. Each case is
// timed A B B A (boost, RE2, RE2, boost) on the same paths; the figure kept per engine is
// the faster of its two rounds. Built and run by bench/rule_match.sh.
//
//   rule_match_bench [ROUNDS_SCALE]
#include <re2/re2.h>

#include <boost/regex.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct bench_case {
  const char* name;
  const char* pattern;
  std::vector<std::string> paths;
  long iterations;
};

// The first group's text of a match, or "" (both engines find the same one).
std::string boost_first(const boost::regex& re, const std::string& p) {
  boost::smatch m;
  try {
    if (!boost::regex_search(p, m, re) || !m[1].matched) return {};
  } catch (const std::exception&) {
    return "<gave up>";
  }
  return m[1].str();
}

std::string re2_first(const re2::RE2& re, const std::string& p) {
  re2::StringPiece sub[2];
  if (!re.Match(p, 0, p.size(), re2::RE2::UNANCHORED, sub, 2) || sub[1].data() == nullptr)
    return {};
  return std::string(sub[1]);
}

double seconds_boost(const boost::regex& re, const bench_case& c, long& found) {
  const auto t0 = std::chrono::steady_clock::now();
  boost::cmatch m;
  found = 0;
  for (long i = 0; i < c.iterations; ++i) {
    const std::string& p = c.paths[static_cast<std::size_t>(i) % c.paths.size()];
    try {
      if (boost::regex_search(p.data(), p.data() + p.size(), m, re) && m[1].matched) ++found;
    } catch (const std::exception&) {
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double seconds_re2(const re2::RE2& re, const bench_case& c, long& found) {
  const auto t0 = std::chrono::steady_clock::now();
  re2::StringPiece sub[2];
  found = 0;
  for (long i = 0; i < c.iterations; ++i) {
    const std::string& p = c.paths[static_cast<std::size_t>(i) % c.paths.size()];
    if (re.Match(p, 0, p.size(), re2::RE2::UNANCHORED, sub, 2) && sub[1].data() != nullptr)
      ++found;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<std::string> downloads() {
  std::vector<std::string> out;
  for (int i = 0; i < 1000; ++i) {
    // 80% downloads, the rest other paths, as bench/log_parse.sh's log.
    if (i % 5 == 4)
      out.push_back("/static/app." + std::to_string(i) + ".js");
    else
      out.push_back("/downloads/" + std::to_string(i * 7919 % 100000) + "/pkg-1.2.3.tar.gz");
  }
  return out;
}

std::vector<std::string> crates() {
  std::vector<std::string> out;
  for (int i = 0; i < 1000; ++i) {
    if (i % 5 == 4)
      out.push_back("/api/v1/crates?page=" + std::to_string(i));
    else
      out.push_back("/api/v1/crates/serde-json" + std::to_string(i % 37) + "/" +
                    std::to_string(i * 31 % 90000) + "/download");
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const long scale = argc > 1 ? std::atol(argv[1]) : 1;
  const std::string long_path = "/downloads/1/" + std::string(8192 - 13, 'a');
  std::vector<bench_case> cases = {
      {"prefix+digits", "^/downloads/([0-9]+)/", downloads(), 2'000'000 * scale},
      {"crate download", "^/api/v1/crates/[a-z0-9_-]+/([0-9]+)/download$", crates(),
       2'000'000 * scale},
      {"unanchored release", "/releases/download/v[0-9.]+/pkg-([0-9]+)\\.(?:tar\\.gz|zip)$",
       {"/org/repo/releases/download/v1.2.3/pkg-42.tar.gz", "/org/repo/issues/42",
        "/org/repo/releases/download/v10.0/pkg-7.zip", "/favicon.ico"},
       2'000'000 * scale},
      {"8 KiB path, plain rule", "^/downloads/([0-9]+)/", {long_path}, 20'000 * scale},
      {"8 KiB path, (.+)+ rule", "^/downloads/([0-9]+)/(.+)+\\.zip$", {long_path}, 4 * scale},
  };
  std::printf("%-24s %14s %14s %8s\n", "case", "boost ns/path", "RE2 ns/path", "boost/RE2");
  for (const auto& c : cases) {
    const boost::regex b(c.pattern);
    re2::RE2::Options o;
    o.set_log_errors(false);
    const re2::RE2 r(c.pattern, o);
    if (!r.ok()) {
      std::printf("%-24s RE2 refuses: %s\n", c.name, r.error().c_str());
      continue;
    }
    // Both engines find the same first group on every path (a gave-up is no match).
    for (const auto& p : c.paths) {
      const auto x = boost_first(b, p), y = re2_first(r, p);
      if (x != y && x != "<gave up>") {
        std::printf("%-24s disagree on %.60s: boost '%s' RE2 '%s'\n", c.name, p.c_str(),
                    x.c_str(), y.c_str());
        return 1;
      }
    }
    long fb = 0, fr = 0;
    const double b1 = seconds_boost(b, c, fb);
    const double r1 = seconds_re2(r, c, fr);
    const double r2 = seconds_re2(r, c, fr);
    const double b2 = seconds_boost(b, c, fb);
    const double bs = std::min(b1, b2), rs = std::min(r1, r2);
    const double n = static_cast<double>(c.iterations);
    std::printf("%-24s %14.1f %14.1f %8.2f   (boost found %ld, RE2 %ld; rounds %.3f %.3f %.3f %.3f s)\n",
                c.name, bs / n * 1e9, rs / n * 1e9, bs / rs, fb, fr, b1, r1, r2, b2);
  }
  // What RE2 refuses: a config error naming the rule (config/log_sources.cpp).
  re2::RE2::Options o;
  o.set_log_errors(false);
  for (const char* p : {"^/d/([0-9]+)/\\1", "^/d/(?=x)([0-9]+)"}) {
    const re2::RE2 r(p, o);
    std::printf("RE2 on %-22s %s\n", p, r.ok() ? "compiles" : r.error().c_str());
  }
}
