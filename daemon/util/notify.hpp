#pragma once
// systemd service notifications (sd_notify). Each call is a no-op when the daemon
// does not run under a notify-type unit (NOTIFY_SOCKET unset).

#include <chrono>
#include <optional>

namespace slotted::notify {

void ready();
void stopping();
// A reload starts; ready() again once it is over.
void reloading();
void watchdog();
// The watchdog interval systemd expects pings within, when it is enabled.
std::optional<std::chrono::microseconds> watchdog_interval();

}  // namespace slotted::notify
