#pragma once
// One line per event on stderr: "<utc time> <level> <message>".
// Under journald (JOURNAL_STREAM names stderr's device and inode, see systemd.exec(5))
// each line starts with its syslog priority, "<3>" error, "<4>" warn, "<6>" info,
// "<7>" debug (sd-daemon(3)), so `journalctl -p warning` selects by level. Checked
// once, at the first line.
// Thread-safe: each line is formatted first and written with one write(2).
// Secrets must never be passed here; config values are logged by name only.

#include <sstream>
#include <string>
#include <string_view>

namespace slotted::log {

enum class level { debug = 0, info = 1, warn = 2, error = 3 };

void set_level(level l);
bool enabled(level l);
void write(level l, std::string_view message);

template <typename... Args>
void emit(level l, const Args&... args) {
  if (!enabled(l)) return;
  std::ostringstream out;
  (out << ... << args);
  write(l, out.str());
}

template <typename... Args>
void debug(const Args&... args) {
  emit(level::debug, args...);
}
template <typename... Args>
void info(const Args&... args) {
  emit(level::info, args...);
}
template <typename... Args>
void warn(const Args&... args) {
  emit(level::warn, args...);
}
template <typename... Args>
void error(const Args&... args) {
  emit(level::error, args...);
}

}  // namespace slotted::log
