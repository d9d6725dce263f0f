#include "util/notify.hpp"

#include <systemd/sd-daemon.h>

namespace slotted::notify {

void ready() {
  sd_notify(0, "READY=1");
}
void stopping() {
  sd_notify(0, "STOPPING=1");
}
void reloading() {
  sd_notify(0, "RELOADING=1");
}
void watchdog() {
  sd_notify(0, "WATCHDOG=1");
}

std::optional<std::chrono::microseconds> watchdog_interval() {
  std::uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) return std::chrono::microseconds(usec);
  return std::nullopt;
}

}  // namespace slotted::notify
