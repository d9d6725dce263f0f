#pragma once
// The cap on the heavier reads that hold a connection of the pool the flushes need: the
// many-counter reads (GET /v1/counters/{t}?ids=) and top-N (GET /v1/top/{t}) together
// take at most cap() connections at once, cap() being mysql.pool_size less
// flush.connections (at least 1), so the flush writers always find theirs; one over the
// cap is refused at once (retry_later: 503 with Retry-After) rather than queued, so no
// number of them can starve the flushes, the rollup, a reset or the retention.
// Thread-safe.

#include <atomic>

namespace slotted::flush {

class read_gate {
 public:
  // pool_size connections, `writers` of them for the flush (flush.connections).
  read_gate(unsigned pool_size, unsigned writers)
      : cap_(pool_size > writers ? pool_size - writers : 1) {}

  // Held while a read runs; empty (held() false) when the cap was reached.
  class slot {
   public:
    explicit slot(read_gate* gate) : gate_(gate) {}
    slot(slot&& o) noexcept : gate_(o.gate_) { o.gate_ = nullptr; }
    slot(const slot&) = delete;
    slot& operator=(const slot&) = delete;
    slot& operator=(slot&&) = delete;
    ~slot() {
      if (gate_ != nullptr) gate_->in_.fetch_sub(1);
    }
    bool held() const { return gate_ != nullptr; }

   private:
    read_gate* gate_;
  };

  slot try_enter() {
    unsigned n = in_.load();
    while (n < cap_) {
      if (in_.compare_exchange_weak(n, n + 1)) return slot(this);
    }
    return slot(nullptr);
  }
  unsigned cap() const { return cap_; }

 private:
  const unsigned cap_;
  std::atomic<unsigned> in_{0};
};

}  // namespace slotted::flush
