// Lines per second read, parsed, matched and counted from a combined access log, the
// CPU side of log_sources (daemon/logs/line_parser.cpp, the same loop as
// logs::log_ingester::run_source without the database): compared with mawk on the same
// file. Built and run by bench/log_parse.sh.
//
//   log_parse_bench FILE PATTERN
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "logs/line_parser.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s FILE PATTERN\n", argv[0]);
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int fd = ::open(argv[1], O_RDONLY);
  if (fd < 0) return 1;
  const slotted::logs::compiled_rule rule(slotted::config::log_rule{"c", argv[2]}, 1);
  std::unordered_map<std::uint64_t, std::int64_t> counts;
  std::vector<char> buf(1 << 20);
  std::size_t held = 0, lines = 0, counted = 0, malformed = 0;
  slotted::logs::parsed_line l;
  for (;;) {
    const ssize_t got = ::read(fd, buf.data() + held, buf.size() - held);
    if (got <= 0) break;
    held += static_cast<std::size_t>(got);
    std::size_t start = 0;
    for (;;) {
      const void* nl = std::memchr(buf.data() + start, '\n', held - start);
      if (nl == nullptr) break;
      const std::size_t stop = static_cast<std::size_t>(static_cast<const char*>(nl) - buf.data());
      ++lines;
      if (!slotted::logs::parse_combined(std::string_view(buf.data() + start, stop - start), l)) {
        ++malformed;
      } else if (const auto id = rule.match(l, UINT64_MAX)) {
        ++counts[*id];
        ++counted;
      }
      start = stop + 1;
    }
    std::memmove(buf.data(), buf.data() + start, held - start);
    held -= start;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("lines %zu counted %zu malformed %zu ids %zu seconds %.3f lines/s %.0f\n", lines,
              counted, malformed, counts.size(), s, static_cast<double>(lines) / s);
}
