#include "util/notify.hpp"

#include <systemd/sd-daemon.h>

#include <atomic>
#include <cstdlib>
#include <string>

namespace slotted::notify {

namespace {
std::atomic<std::uint64_t> progress_count{0};
}  // namespace

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

void progress() {
  progress_count.fetch_add(1, std::memory_order_relaxed);
}

startup_extender::startup_extender(std::chrono::microseconds extension,
                                   std::chrono::milliseconds period) {
  if (std::getenv("NOTIFY_SOCKET") == nullptr) return;
  const std::string message = "EXTEND_TIMEOUT_USEC=" + std::to_string(extension.count());
  sd_notify(0, message.c_str());
  thread_ = std::thread([this, message, period] {
    std::uint64_t seen = progress_count.load(std::memory_order_relaxed);
    util::unique_lock lock(mutex_);
    while (!lock.wait_for(wake_, period, [this]() REQUIRES(mutex_) { return done_; })) {
      const std::uint64_t now = progress_count.load(std::memory_order_relaxed);
      if (now == seen) continue;  // no progress: let the last extension run out
      seen = now;
      sd_notify(0, message.c_str());
    }
  });
}

startup_extender::~startup_extender() {
  {
    util::lock_guard lock(mutex_);
    done_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

}  // namespace slotted::notify
