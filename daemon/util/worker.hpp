#pragma once
// A task on its own thread, run every period and at once on request. Each requester
// is answered with the result of the first run that started after its request.
//
// Thread-safety: request() from any thread; start() and stop() from one owner.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "util/thread_annotations.hpp"

namespace slotted::util {

template <typename Result>
class worker {
 public:
  using callback = std::function<void(const Result&)>;

  // `run` does the work; `delay` says how long to wait after a run before the next.
  worker(std::function<Result()> run, std::function<std::chrono::milliseconds(const Result&)> delay,
         std::chrono::milliseconds first_delay)
      : run_(std::move(run)), delay_(std::move(delay)), first_delay_(first_delay) {}
  ~worker() { stop(); }
  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;

  void start() {
    thread_ = std::thread([this] { loop(); });
  }

  // Stops the thread after the run in progress, if any. Returns the requesters not
  // yet answered, for the owner to answer.
  std::vector<callback> stop() {
    {
      lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
    lock_guard lock(mutex_);
    return std::exchange(waiters_, {});
  }

  // False once stopping: the caller must answer `done` itself.
  bool request(callback done) {
    lock_guard lock(mutex_);
    if (stopping_) return false;
    waiters_.push_back(std::move(done));
    wake_.notify_one();
    return true;
  }

 private:
  void loop() {
    auto next = std::chrono::steady_clock::now() + first_delay_;
    unique_lock lock(mutex_);
    while (true) {
      lock.wait_until(wake_, next,
                      [&]() REQUIRES(mutex_) { return stopping_ || !waiters_.empty(); });
      if (stopping_) return;
      auto waiters = std::exchange(waiters_, {});
      lock.unlock();
      const Result result = run_();
      for (auto& w : waiters) w(result);
      lock.lock();
      next = std::chrono::steady_clock::now() + delay_(result);
    }
  }

  std::function<Result()> run_;
  std::function<std::chrono::milliseconds(const Result&)> delay_;
  std::chrono::milliseconds first_delay_;
  mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::vector<callback> waiters_ GUARDED_BY(mutex_);
  std::thread thread_;
};

}  // namespace slotted::util
