#pragma once
// A thread that is joined on every exit of the scope that owns it. A test body that
// throws (a server that does not come back, an http_client that cannot connect) while a
// plain std::thread is still joinable ends in std::terminate: "Subprocess aborted", no
// message. With this, gtest reports the exception and the test fails with its text.
//
// When built with a stop flag, the flag is set before the join, so a load that runs
// until told ends; without one, the thread's work must end by itself (bounded loads).

#include <atomic>
#include <thread>
#include <utility>

namespace slotted::test {

class joined_thread {
 public:
  template <class F>
  explicit joined_thread(F&& f) : thread_(std::forward<F>(f)) {}
  template <class F>
  joined_thread(std::atomic<bool>& stop, F&& f) : stop_(&stop), thread_(std::forward<F>(f)) {}
  joined_thread(const joined_thread&) = delete;
  joined_thread& operator=(const joined_thread&) = delete;
  ~joined_thread() { join(); }

  // Sets the stop flag (if any) and waits for the thread; a second call does nothing.
  void join() {
    if (stop_ != nullptr) *stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool>* stop_ = nullptr;
  std::thread thread_;
};

}  // namespace slotted::test
