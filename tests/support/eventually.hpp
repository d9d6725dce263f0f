#pragma once
// Waiting for something the daemon does asynchronously: poll a condition until it holds
// or a deadline passes. The tests' one way to wait (never a bare sleep standing in for a
// condition, never a loop without a deadline).

#include <chrono>
#include <thread>

namespace slotted::test {

// Calls `done` until it returns true (true) or `limit` has passed (false), `period`
// apart; `done` is called once more at the deadline, so a slow machine is not a failure
// when the condition holds by then.
template <typename F>
bool eventually(F done, std::chrono::steady_clock::duration limit,
                std::chrono::milliseconds period = std::chrono::milliseconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(period);
  }
}

}  // namespace slotted::test
