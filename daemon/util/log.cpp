#include "util/log.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace slotted::log {
namespace {
std::atomic<int> current_level{static_cast<int>(level::info)};

// JOURNAL_STREAM is "DEVICE:INODE" of the stream systemd connected. It is inherited by
// children whose stderr goes elsewhere, so it counts only when it names our stderr.
bool stderr_is_journal() {
  const char* env = std::getenv("JOURNAL_STREAM");
  if (env == nullptr) return false;
  unsigned long long dev = 0, ino = 0;
  if (std::sscanf(env, "%llu:%llu", &dev, &ino) != 2) return false;
  struct stat st {};
  if (fstat(STDERR_FILENO, &st) != 0) return false;
  return static_cast<unsigned long long>(st.st_dev) == dev &&
         static_cast<unsigned long long>(st.st_ino) == ino;
}

const char* priority_of(level l) {
  switch (l) {
    case level::debug:
      return "<7>";
    case level::info:
      return "<6>";
    case level::warn:
      return "<4>";
    case level::error:
      return "<3>";
  }
  return "<6>";
}

const char* name_of(level l) {
  switch (l) {
    case level::debug:
      return "debug";
    case level::info:
      return "info";
    case level::warn:
      return "warn";
    case level::error:
      return "error";
  }
  return "?";
}
}  // namespace

void set_level(level l) {
  current_level.store(static_cast<int>(l), std::memory_order_relaxed);
}

bool enabled(level l) {
  return static_cast<int>(l) >= current_level.load(std::memory_order_relaxed);
}

void write(level l, std::string_view message) {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const std::time_t secs = system_clock::to_time_t(now);
  const auto millis = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[40];
  const size_t n = std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  static const bool journal = stderr_is_journal();
  std::string line;
  line.reserve(message.size() + 52);
  if (journal) line.append(priority_of(l));
  line.append(stamp, n);
  char ms[8];
  std::snprintf(ms, sizeof ms, ".%03dZ ", static_cast<int>(millis));
  line.append(ms);
  line.append(name_of(l));
  line.push_back(' ');
  for (char c : message) line.push_back(c == '\n' ? ' ' : c);
  line.push_back('\n');
  // A single write keeps lines from different threads whole.
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t w = ::write(STDERR_FILENO, p, left);
    if (w <= 0) break;
    p += w;
    left -= static_cast<size_t>(w);
  }
}

}  // namespace slotted::log
