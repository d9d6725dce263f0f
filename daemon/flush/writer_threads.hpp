#pragma once
// The flusher's extra writer threads (flush.connections - 1 of them): started once with
// the flusher and stopped with it, rather than a thread per write round. Each waits for
// a round, runs the round's job for it once, and says it is done; the round's driver
// returns only once every thread that joined its round is done (as a join would).

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "util/thread_annotations.hpp"

namespace slotted::flush {

class writer_threads {
 public:
  writer_threads() = default;
  ~writer_threads();  // stop()
  writer_threads(const writer_threads&) = delete;
  writer_threads& operator=(const writer_threads&) = delete;

  // Starts `count` threads waiting for rounds. One that cannot start (a process or
  // memory limit) means fewer writers: logged, never std::terminate. Returns how many
  // run. Call once, before any round.
  std::size_t start(std::size_t count);

  // One round: offers `job` to up to `wanted` of the threads (each runs it at most
  // once), runs `own` on the calling thread, then withdraws the offer from threads that
  // have not taken it yet and returns once each that did has returned from `job`. So
  // `job` may use what lives on the caller's stack. `job` must not throw (a throw is
  // logged and dropped); a throw from `own` comes out after the wait.
  void run_round(std::size_t wanted, const std::function<void()>& job,
                 const std::function<void()>& own);

  // Stops and joins the threads (not during a round). Idempotent.
  void stop();

  // Writer threads started in this process so far (every flusher): for tests.
  static std::uint64_t started_total();

 private:
  void loop();
  void end_round();

  util::mutex mutex_;
  // A round offered, or stop().
  std::condition_variable wake_;
  // A thread finished the round's job.
  std::condition_variable done_;
  const std::function<void()>* job_ GUARDED_BY(mutex_) = nullptr;
  std::uint64_t round_ GUARDED_BY(mutex_) = 0;  // counts the rounds offered
  std::size_t seats_ GUARDED_BY(mutex_) = 0;    // threads that may still join it
  std::size_t running_ GUARDED_BY(mutex_) = 0;  // threads that joined it, not yet done
  bool stopping_ GUARDED_BY(mutex_) = false;
  // Changed by start() and stop() only (the flusher's lifecycle, never during a round).
  std::vector<std::thread> threads_;
};

}  // namespace slotted::flush
