#pragma once
// What the HTTP layer needs from the rest of the daemon, and nothing more: the router
// includes this header, not the flusher, the WAL or the database layer (README: Design).
// Every call answers with one result type; its failures are one error category (errc),
// mapped to an HTTP status in one function (router::failure_response).
//
// Thread-safety: every member may be called from any HTTP thread at once; each `done`
// is called exactly once, from any thread.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "model/buckets.hpp"
#include "model/counter_key.hpp"
#include "model/errc.hpp"
#include "model/increment.hpp"
#include "model/increment_request.hpp"
#include "model/keyed_request.hpp"

namespace slotted::http {

// The expected failures are the daemon's one error category (model/errc.hpp: what the
// client can retry or correct). router::failure_response is the one place they become an
// HTTP status; anything else the backend cannot handle where it happens is an exception
// (a 500, see router.cpp: guarded).
using slotted::errc;

struct backend_result {
  // What happened, one code of errc: none (false) when the call did what it was asked
  // (applied, and with a WAL logged first; flushed; rolled up; read; reset), else why not:
  // over_limit or out_of_range (increments: nothing applied), conflict (keyed increments:
  // the key was accepted before with another body; nothing applied), or a code that says
  // retry (the WAL, the database, a read not exact yet, a key being logged).
  std::error_code code{};
  std::string error{};      // the failure's own text, told to the client when not empty
  std::uint64_t count = 0;  // rows flushed, records rolled up; a replay's first count
  // A counter read: the database's total and what is pending in memory.
  __int128 persisted = 0;  // SUM(count) may pass int64
  std::int64_t pending = 0;
  // A reset: what the counter had (persisted + pending here), now cleared.
  __int128 cleared = 0;
  // A counter's series: (bucket start in unix seconds, persisted + pending), in bucket
  // order, buckets whose count is 0 left out.
  std::vector<std::pair<std::int64_t, __int128>> points{};
  // Keyed increments, code none: this key was accepted before with this body; nothing
  // applied again, `count` is what the first answer said.
  bool replayed = false;

  std::error_code failure() const noexcept { return code; }
  // Done, with `count` (rows flushed, records rolled up).
  static backend_result counted(std::uint64_t n) {
    backend_result r;
    r.count = n;
    return r;
  }
  // Many counters (read_counters): one per id asked for, in that order.
  struct counter_total {
    std::uint64_t record_id = 0;
    __int128 persisted = 0;
    std::int64_t pending = 0;
  };
  std::vector<counter_total> totals{};
  // Top-N (read_top): (record_id, count), largest first, ties by smaller record_id.
  std::vector<std::pair<std::uint64_t, __int128>> top{};
};

class backend {
 public:
  using done_fn = std::function<void(backend_result)>;
  virtual ~backend() = default;
  virtual bool draining() const = 0;
  virtual bool ready() const = 0;
  // How submit() answers, exactly once: now(), before submit() returns and on its
  // thread; or else through the done_fn that later() builds, called once from any thread
  // (the request is logged first, or its key looked up). Only later() copies what the
  // answer needs into a callback, and allocates: a request without WAL and key, the most
  // common, is answered now without one.
  class submit_answer {
   public:
    virtual void now(backend_result r) const = 0;
    virtual done_fn later() const = 0;

   protected:
    ~submit_answer() = default;
  };
  // The one way in for increments the router validated (README: HTTP API). The backend
  // decides how they are taken: without a WAL applied at once, with one acknowledged
  // only once logged. With an Idempotency-Key (request.keyed()) the key is looked up
  // first (replayed, conflict, or unavailable while its first copy is being logged);
  // a new one is logged when there is a WAL and kept apart from the store until its
  // flush. The backend may move request.increments out when it answers later.
  virtual void submit(ingest::increment_request& request, const submit_answer& answer) = 0;
  // A keyed request that cannot be admitted as new (an `at` it cannot file): whether key
  // `key` was accepted with body `hash` within idempotency.window of `received_ms` (unix
  // milliseconds), by this instance's index or else the database's keys table. Answers
  // replayed (`count`), conflict, unavailable (its first copy is being logged, or the
  // database cannot be asked), or done: the key is not known, the caller answers the
  // request's own error. Never applies or remembers anything.
  virtual void find_keyed(std::string key, idempotency::body_hash hash, std::int64_t received_ms,
                          done_fn done) = 0;
  virtual void read_counter(store::counter_key key, done_fn done) = 0;
  // read_counter of each of `record_ids` (distinct, 1 to 1000, validated by the router)
  // in one database round trip: `totals`, or unavailable.
  virtual void read_counters(std::uint32_t record_type, std::vector<std::uint64_t> record_ids,
                             done_fn done) = 0;
  // The `limit` largest persisted totals of `record_type` (README: HTTP API, Top-N):
  // `top`, or unavailable. With `range` (granularity and bucket-aligned [from, to],
  // validated by the router) the sums of the buckets starting in it.
  struct top_range {
    store::granularity gran = store::granularity::day;
    std::int64_t from = 0;
    std::int64_t to = 0;
  };
  virtual void read_top(std::uint32_t record_type, std::optional<top_range> range,
                        std::size_t limit, done_fn done) = 0;
  // Sets one counter to zero (README: HTTP API, Reset): done with `cleared`, or
  // unavailable (nothing changed: the database or the WAL cannot be written, or
  // draining).
  virtual void reset_counter(store::counter_key key, done_fn done) = 0;
  // The counter's buckets of granularity `g` whose start is in [from, to] (both
  // bucket-aligned, validated by the router): `points` of the result, exact like
  // read_counter's total, or unavailable.
  virtual void read_series(store::counter_key key, store::granularity g, std::int64_t from,
                           std::int64_t to, done_fn done) = 0;
  virtual void flush_now(done_fn done) = 0;
  virtual void rollup_now(done_fn done) = 0;
  virtual std::string metrics_text() = 0;
};

}  // namespace slotted::http
