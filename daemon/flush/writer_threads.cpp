// The flusher's long-lived writer threads (see writer_threads.hpp).
#include "flush/writer_threads.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <system_error>

#include "util/log.hpp"

namespace slotted::flush {

namespace {
std::atomic<std::uint64_t> threads_started{0};
}  // namespace

std::uint64_t writer_threads::started_total() {
  return threads_started.load();
}

writer_threads::~writer_threads() {
  stop();
}

std::size_t writer_threads::start(std::size_t count) {
  threads_.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    try {
      threads_.emplace_back([this] { loop(); });
      threads_started.fetch_add(1);
    } catch (const std::system_error& e) {
      // No thread (a process or memory limit): fewer writers, not a failed flusher.
      log::warn("flush: cannot start another writer thread (", e.what(), "); ", threads_.size() + 1,
                " write each round");
      break;
    }
  }
  return threads_.size();
}

void writer_threads::run_round(std::size_t wanted, const std::function<void()>& job,
                               const std::function<void()>& own) {
  {
    util::lock_guard lock(mutex_);
    job_ = &job;
    ++round_;
    seats_ = std::min(wanted, threads_.size());
  }
  wake_.notify_all();
  try {
    own();
  } catch (...) {
    end_round();
    throw;
  }
  end_round();
}

void writer_threads::end_round() {
  util::unique_lock lock(mutex_);
  // A thread that has not woken yet stays out: the caller's share is done, so what is
  // left (batches in flight, the halves of a split one) is its writers'.
  seats_ = 0;
  lock.wait(done_, [this]() REQUIRES(mutex_) { return running_ == 0; });
  job_ = nullptr;
}

void writer_threads::loop() {
  std::uint64_t joined = 0;  // the last round this thread took part in
  util::unique_lock lock(mutex_);
  for (;;) {
    lock.wait(wake_,
              [&]() REQUIRES(mutex_) { return stopping_ || (seats_ > 0 && round_ != joined); });
    if (stopping_) break;
    --seats_;
    ++running_;
    joined = round_;
    const std::function<void()>* job = job_;
    lock.unlock();
    try {
      (*job)();
    } catch (const std::exception& e) {
      log::error("flush: a writer thread's round failed: ", e.what());
    } catch (...) {
      log::error("flush: a writer thread's round failed");
    }
    lock.lock();
    if (--running_ == 0) done_.notify_all();
  }
}

void writer_threads::stop() {
  {
    util::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

}  // namespace slotted::flush
