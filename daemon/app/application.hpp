#pragma once
// Wires the daemon together: config -> metrics, store, pool, flusher, router, listener.
// Data flows one way: HTTP -> parser -> store -> flusher -> database.
//
// start() throws on startup errors (bind). The database may be down at start: the
// daemon accepts into memory and /readyz answers 503 until the flusher connects.

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "db/pool.hpp"
#include "db/probe.hpp"
#include "flush/flusher.hpp"
#include "http/listener.hpp"
#include "http/router.hpp"
#include "metrics/metrics.hpp"
#include "rollup/rollup.hpp"
#include "store/pending_store.hpp"
#include "wal/wal.hpp"

namespace slotted {

db::connect_options connect_options_for(const config::mysql_config& m);

// Connects once and verifies the schema and every rollup target. Returns false when
// the database cannot be reached (the daemon then verifies at its first connection).
// Throws db_error (fatal) when something is missing.
bool verify_database(const config::daemon_config& cfg);

class application final : public http::backend {
 public:
  explicit application(config::daemon_config cfg);
  ~application() override;

  // Replays the WAL (when configured), then binds and starts serving. Throws on
  // startup errors: bind, WAL damage or an unusable WAL directory.
  void start();
  std::uint16_t port() const { return listener_->port(); }

  // Asks run_until_stopped() to shut down. Thread-safe.
  void request_stop();

  // SIGTERM and SIGINT call request_stop(). Call before start().
  void install_signal_handlers();

  // Blocks until request_stop(), then stops accepting, lets in-flight requests
  // finish, flushes what is pending and returns 0, or 1 when something could not be
  // written within shutdown_timeout.
  int run_until_stopped();

  // http::backend
  bool draining() const override { return draining_.load(); }
  bool ready() const override { return flusher_.ready(); }
  store::add_result add(std::span<const ingest::increment> increments) override;
  bool durable() const override { return wal_ != nullptr; }
  void add_durable(std::vector<ingest::increment>&& increments,
                   std::function<void(store::add_result)> done) override;
  void read_counter(
      store::counter_key key,
      std::function<void(std::optional<flush::counter_reading>, std::string)> done) override;
  void flush_now(std::function<void(const flush::flush_result&)> done) override;
  void rollup_now(std::function<void(const rollup::rollup_result&)> done) override;
  std::string metrics_text() override;

 private:
  void start_watchdog();
  void watchdog_tick(std::chrono::steady_clock::duration period);

  config::daemon_config cfg_;
  metrics::registry metrics_;
  store::pending_store store_;
  db::pool pool_;
  ingest::table_limits limits_;
  std::unique_ptr<wal::write_ahead_log> wal_;
  flush::flusher flusher_;
  // Tells the flusher, every min(flush.interval, 5s), whether the database answers.
  db::probe probe_;
  rollup::roller roller_;
  http::router router_;
  // One per HTTP thread, each run by its own thread (see http/session.hpp).
  std::vector<std::unique_ptr<boost::asio::io_context>> contexts_;
  std::shared_ptr<http::listener> listener_;
  std::vector<std::thread> io_threads_;
  boost::asio::thread_pool db_workers_;
  std::atomic<bool> draining_{false};
  std::unique_ptr<boost::asio::steady_timer> watchdog_timer_;
  std::optional<boost::asio::signal_set> signals_;

  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stop_requested_ = false;
};

}  // namespace slotted
