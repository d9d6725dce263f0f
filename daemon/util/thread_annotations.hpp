#pragma once
// Clang's thread-safety analysis (-Wthread-safety): which mutex guards a field
// (GUARDED_BY), which a function needs held (REQUIRES), and a mutex and locks the
// analysis can follow (util::mutex, util::lock_guard, util::unique_lock; std::mutex is
// not annotated in libstdc++). The macros are no-ops for other compilers; the fuzz
// build (scripts/fuzz, clang) compiles the daemon with -Wthread-safety -Werror.
//
// A lambda that runs with a lock held says so too: [&]() REQUIRES(m) { ... } (a
// condition variable's predicate, a task run under the lock). A call through
// std::function is not checked: say in a comment what such a callback may assume.

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define SLOTTED_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define SLOTTED_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) SLOTTED_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY SLOTTED_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) SLOTTED_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) SLOTTED_THREAD_ANNOTATION(pt_guarded_by(x))
// The order of two mutexes ever held at once, on the declaration of either.
#define ACQUIRED_BEFORE(...) SLOTTED_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) SLOTTED_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define REQUIRES(...) SLOTTED_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) SLOTTED_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) SLOTTED_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) SLOTTED_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) SLOTTED_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS SLOTTED_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace slotted::util {

class unique_lock;

// A std::mutex the analysis knows as a capability.
class CAPABILITY("mutex") mutex {
 public:
  void lock() ACQUIRE() { m_.lock(); }
  void unlock() RELEASE() { m_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return m_.try_lock(); }

 private:
  // util::unique_lock holds m_ in a std::unique_lock<std::mutex>, for
  // std::condition_variable (cheaper than condition_variable_any).
  friend class unique_lock;
  std::mutex m_;
};

// std::lock_guard for util::mutex.
class SCOPED_CAPABILITY lock_guard {
 public:
  explicit lock_guard(mutex& m) ACQUIRE(m) : m_(m) { m_.lock(); }
  ~lock_guard() RELEASE() { m_.unlock(); }
  lock_guard(const lock_guard&) = delete;
  lock_guard& operator=(const lock_guard&) = delete;

 private:
  mutex& m_;
};

// std::unique_lock for util::mutex, and the waits of a std::condition_variable on it.
// It holds a std::unique_lock<std::mutex> of the mutex's std::mutex, which it hands to
// the condition variable: to the analysis the mutex stays held through a wait (it is
// again when the wait returns), and a predicate runs with it held, so a predicate
// lambda that reads guarded fields is written [&]() REQUIRES(m) { ... }.
class SCOPED_CAPABILITY unique_lock {
 public:
  explicit unique_lock(mutex& m) ACQUIRE(m) : lock_(m.m_) {}
  // Not locked yet: lock() or try_lock() later.
  unique_lock(mutex& m, std::defer_lock_t) EXCLUDES(m) : lock_(m.m_, std::defer_lock) {}
  // Unlocks if locked.
  ~unique_lock() RELEASE() {}
  unique_lock(const unique_lock&) = delete;
  unique_lock& operator=(const unique_lock&) = delete;

  void lock() ACQUIRE() { lock_.lock(); }
  void unlock() RELEASE() { lock_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return lock_.try_lock(); }
  bool owns_lock() const { return lock_.owns_lock(); }

  // Call only while locked (std::condition_variable's own rule).
  void wait(std::condition_variable& cv) { cv.wait(lock_); }
  template <typename Predicate>
  void wait(std::condition_variable& cv, Predicate ready) {
    cv.wait(lock_, std::move(ready));
  }
  // Returns ready() as the wait ends (false: timed out and still not ready).
  template <typename Rep, typename Period, typename Predicate>
  bool wait_for(std::condition_variable& cv, const std::chrono::duration<Rep, Period>& timeout,
                Predicate ready) {
    return cv.wait_for(lock_, timeout, std::move(ready));
  }
  template <typename Clock, typename Duration, typename Predicate>
  bool wait_until(std::condition_variable& cv,
                  const std::chrono::time_point<Clock, Duration>& deadline, Predicate ready) {
    return cv.wait_until(lock_, deadline, std::move(ready));
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace slotted::util
