#pragma once
// Clang's thread-safety analysis (-Wthread-safety): which mutex guards a field
// (GUARDED_BY), which a function needs held (REQUIRES), and a mutex and lock the
// analysis can follow (util::mutex, util::lock_guard, util::unique_lock; std::mutex is
// not annotated in libstdc++). The macros are no-ops for other compilers; the fuzz
// build (scripts/fuzz, clang) compiles the daemon with -Wthread-safety -Werror.

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
#define REQUIRES(...) SLOTTED_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) SLOTTED_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) SLOTTED_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define EXCLUDES(...) SLOTTED_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS SLOTTED_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace slotted::util {

// A std::mutex the analysis knows as a capability.
class CAPABILITY("mutex") mutex {
 public:
  void lock() ACQUIRE() { m_.lock(); }
  void unlock() RELEASE() { m_.unlock(); }
  bool try_lock() SLOTTED_THREAD_ANNOTATION(try_acquire_capability(true)) { return m_.try_lock(); }
  // For std::condition_variable: wait on a std::unique_lock of this.
  std::mutex& native() { return m_; }

 private:
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

}  // namespace slotted::util
