#pragma once
// systemd service notifications (sd_notify). Each call is a no-op when the daemon
// does not run under a notify-type unit (NOTIFY_SOCKET unset).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <optional>
#include <thread>

#include "util/thread_annotations.hpp"

namespace slotted::notify {

void ready();
void stopping();
// A reload starts; ready() again once it is over.
void reloading();
void watchdog();
// The watchdog interval systemd expects pings within, when it is enabled.
std::optional<std::chrono::microseconds> watchdog_interval();

// Start-up work that grows with what the WAL holds (its replay and the snapshot after
// it) may outlast the unit's TimeoutStartSec on a slow disk. While a startup_extender
// lives, it tells systemd "EXTEND_TIMEOUT_USEC=<extension>" at once and then every
// `period`, as long as progress() was called since its last message: a start-up that
// keeps moving is given the time it needs, one that stops (a hung disk) still meets the
// timeout, `extension` after its last progress. Nothing (no thread) without
// NOTIFY_SOCKET.
class startup_extender {
 public:
  explicit startup_extender(std::chrono::microseconds extension = std::chrono::seconds(30),
                            std::chrono::milliseconds period = std::chrono::seconds(5));
  ~startup_extender();
  startup_extender(const startup_extender&) = delete;
  startup_extender& operator=(const startup_extender&) = delete;

 private:
  util::mutex mutex_;
  std::condition_variable wake_;
  bool done_ GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

// The start-up moved on (a chunk of a segment read, a segment replayed, a snapshot
// written). Cheap: one relaxed atomic increment, from any thread.
void progress();

}  // namespace slotted::notify
