#pragma once
// The HTTP backend (http/backend.hpp): the work behind the routes, on the components
// the application built. Increments go to the store (through the committer and the WAL
// when wal.dir is set), keyed requests to the key index; reads, resets and the key
// table's lookups run on the database workers; flush and rollup are asked of the
// flusher and the roller. It builds, starts and stops nothing: the application does.
//
// Thread-safety: as http::backend.

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cstddef>

#include "db/pool.hpp"
#include "durable/committer.hpp"
#include "flush/flusher.hpp"
#include "http/backend.hpp"
#include "idempotency/keyed_store.hpp"
#include "metrics/metrics.hpp"
#include "rollup/rollup.hpp"
#include "store/pending_store.hpp"
#include "store/pending_uniques.hpp"

namespace slotted {

class counter_service final : public http::backend {
 public:
  // What the service works on; each outlives its use. `committer` is null without a WAL.
  // `db_workers` and `draining` are members of application declared after the service:
  // the service keeps only references to them, used once started (the pool is joined in
  // application::stop_in_order before anything is destroyed).
  struct parts {
    store::pending_store& store;
    idempotency::keyed_store& keyed;
    durable::committer* committer;
    flush::flusher& flusher;
    rollup::roller& roller;
    db::pool& pool;
    metrics::registry& metrics;
    boost::asio::thread_pool& db_workers;
    // Set by the application when it starts shutting down.
    const std::atomic<bool>& draining;
    // Items with a `client` (counters[].dedupe): held here until their flush.
    store::pending_uniques& uniques;
    // Which counters dedupe (counters[].dedupe), fixed at start.
    const store::dedupe_spec& dedupe;
  };
  // `limits`: the pending bounds (flush.max_pending_keys, flush.max_pending_bytes).
  counter_service(parts p, const store::pending_limits& limits);

  // The HTTP loop run by the calling thread: a durable request is applied and answered
  // on the loop that received it. Each HTTP thread calls it once, before it runs.
  static void serve_on(boost::asio::io_context* loop);

  bool draining() const override { return p_.draining.load(); }
  bool ready() const override { return p_.flusher.ready(); }
  void submit(ingest::increment_request& request, const submit_answer& answer) override;
  void find_keyed(std::string key, idempotency::body_hash hash, std::int64_t received_ms,
                  done_fn done) override;
  void read_counter(store::counter_key key, done_fn done) override;
  void read_counters(std::uint32_t record_type, std::vector<std::uint64_t> record_ids,
                     done_fn done) override;
  void read_top(std::uint32_t record_type, std::optional<top_range> range, std::size_t limit,
                done_fn done) override;
  void reset_counter(store::counter_key key, done_fn done) override;
  void read_series(store::counter_key key, store::granularity g, std::int64_t from, std::int64_t to,
                   done_fn done) override;
  void flush_now(done_fn done) override;
  void rollup_now(done_fn done) override;
  std::string metrics_text() override;

 private:
  // submit()'s three ways: without a WAL applied and answered at once; with one, logged
  // first; with an Idempotency-Key, through the key index (and the WAL when there is one).
  http::backend_result add(std::span<const ingest::increment> increments);
  void add_durable(std::vector<ingest::increment>&& increments, done_fn done);
  void add_keyed(idempotency::keyed_request&& request, done_fn done);
  // The keys table's answer for `key` (find_keyed), on a database worker.
  http::backend_result find_committed(const std::string& key, idempotency::body_hash hash,
                                      std::int64_t received_ms, std::chrono::milliseconds window);

  parts p_;
  const store::pending_limits limits_;
};

}  // namespace slotted
