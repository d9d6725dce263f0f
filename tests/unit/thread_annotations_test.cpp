// util::unique_lock (util/thread_annotations.hpp): an annotated lock over util::mutex that
// a std::condition_variable waits on. Checked at run time here; the clang build checks
// its annotations (-Wthread-safety).

#include "util/thread_annotations.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <thread>

namespace slotted::util {
namespace {

using namespace std::chrono_literals;

// Whether another thread can take `m` now (a thread's own try_lock of a mutex it holds
// is undefined).
bool free_elsewhere(mutex& m) {
  return std::async(std::launch::async, [&m] {
           if (!m.try_lock()) return false;
           m.unlock();
           return true;
         }).get();
}

struct shared_state {
  mutex m;
  std::condition_variable cv;
  bool ready GUARDED_BY(m) = false;
  int value GUARDED_BY(m) = 0;

  void publish(int v) {
    {
      lock_guard lock(m);
      value = v;
      ready = true;
    }
    cv.notify_all();
  }
};

TEST(ThreadAnnotations, UniqueLockHoldsUntilUnlockedOrDestroyed) {
  mutex m;
  {
    unique_lock lock(m);
    EXPECT_TRUE(lock.owns_lock());
    EXPECT_FALSE(free_elsewhere(m));
    lock.unlock();
    EXPECT_FALSE(lock.owns_lock());
    EXPECT_TRUE(free_elsewhere(m));
    lock.lock();
    EXPECT_FALSE(free_elsewhere(m));
  }
  EXPECT_TRUE(free_elsewhere(m));  // the destructor unlocked it
  {
    unique_lock lock(m);
    lock.unlock();
  }  // unlocked already: the destructor leaves it alone
  EXPECT_TRUE(free_elsewhere(m));
}

TEST(ThreadAnnotations, DeferredUniqueLockLocksOnlyWhenAsked) {
  mutex m;
  unique_lock lock(m, std::defer_lock);
  EXPECT_FALSE(lock.owns_lock());
  EXPECT_TRUE(free_elsewhere(m));
  if (!lock.try_lock()) FAIL() << "try_lock of a free mutex failed";
  EXPECT_TRUE(lock.owns_lock());
  EXPECT_FALSE(free_elsewhere(m));
  // Held by another thread: try_lock fails and holds nothing.
  lock.unlock();
  std::promise<void> held;
  std::promise<void> release;
  std::thread holder([&] {
    lock_guard other(m);
    held.set_value();
    release.get_future().wait();
  });
  held.get_future().wait();
  if (lock.try_lock()) {
    ADD_FAILURE() << "try_lock of a mutex held elsewhere succeeded";
    lock.unlock();
  }
  EXPECT_FALSE(lock.owns_lock());
  release.set_value();
  holder.join();
  lock.lock();
  EXPECT_TRUE(lock.owns_lock());
}

TEST(ThreadAnnotations, WaitWithPredicateReturnsOnceNotifiedFromAnotherThread) {
  shared_state s;
  std::thread publisher([&] { s.publish(42); });
  {
    unique_lock lock(s.m);
    lock.wait(s.cv, [&]() REQUIRES(s.m) { return s.ready; });
    EXPECT_TRUE(lock.owns_lock());  // held again once the wait returns
    EXPECT_EQ(s.value, 42);
  }
  publisher.join();
}

TEST(ThreadAnnotations, WaitForTimesOutWhileNotReadyAndSeesANotify) {
  shared_state s;
  unique_lock lock(s.m);
  const auto ready = [&]() REQUIRES(s.m) { return s.ready; };
  const auto before = std::chrono::steady_clock::now();
  EXPECT_FALSE(lock.wait_for(s.cv, 20ms, ready));
  EXPECT_GE(std::chrono::steady_clock::now() - before, 20ms);
  EXPECT_TRUE(lock.owns_lock());
  // Released while waiting: the publisher gets the mutex and its notify ends the wait.
  std::thread publisher([&] { s.publish(7); });
  EXPECT_TRUE(lock.wait_for(s.cv, 30s, ready));
  EXPECT_EQ(s.value, 7);
  lock.unlock();
  publisher.join();
}

TEST(ThreadAnnotations, WaitUntilAndPlainWaitSeeANotify) {
  shared_state s;
  std::thread publisher([&] { s.publish(1); });
  {
    unique_lock lock(s.m);
    EXPECT_TRUE(lock.wait_until(s.cv, std::chrono::steady_clock::now() + 30s,
                                [&]() REQUIRES(s.m) { return s.ready; }));
    EXPECT_EQ(s.value, 1);
    s.ready = false;
  }
  publisher.join();
  std::thread second([&] { s.publish(2); });
  {
    unique_lock lock(s.m);
    while (!s.ready) lock.wait(s.cv);  // no predicate: woken spuriously, it looks again
    EXPECT_EQ(s.value, 2);
  }
  second.join();
}

}  // namespace
}  // namespace slotted::util
