#pragma once
// Wires the daemon together: config -> metrics, store, WAL and committer, pool, flusher,
// router, listener. The application builds, starts and stops these; the work behind the
// HTTP routes is counter_service's (app/counter_service.hpp). Data flows one way: HTTP ->
// parser -> store (through the committer and the WAL when wal.dir is set) -> flusher ->
// database -> rollup (README: Design).
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
#include <thread>
#include <vector>

#include "app/counter_service.hpp"
#include "config/config.hpp"
#include "db/log_positions.hpp"
#include "db/pool.hpp"
#include "db/probe.hpp"
#include "durable/committer.hpp"
#include "durable/recovery.hpp"
#include "flush/flusher.hpp"
#include "http/listener.hpp"
#include "http/passed_sockets.hpp"
#include "http/router.hpp"
#include "idempotency/keyed_store.hpp"
#include "logs/log_ingest.hpp"
#include "metrics/metrics.hpp"
#include "retention/pruner.hpp"
#include "rollup/rollup.hpp"
#include "store/pending_store.hpp"
#include "util/log.hpp"
#include "util/thread_annotations.hpp"
#include "wal/wal.hpp"

namespace slotted {

db::connect_options connect_options_for(const config::mysql_config& m);

// One connection to the configured database, through failover (the first of
// mysql.hosts that answers and takes writes). Throws db::db_error when none does.
db::connection connect_once(const config::mysql_config& m);

// Connects once and verifies the schema and every rollup target. Returns false when
// the database cannot be reached (the daemon then verifies at its first connection).
// Throws db_error (fatal) when something is missing.
bool verify_database(const config::daemon_config& cfg);

// The counters of `cfg` that are rolled up, as the flusher and the roller take them.
std::vector<db::rollup_target> rollup_targets_for(const config::daemon_config& cfg);

log::level log_level_for(config::log_level l);

class application final {
 public:
  explicit application(config::daemon_config cfg);
  ~application();

  // Replays the WAL (when configured), then binds and starts serving. Throws on
  // startup errors: bind, WAL damage or an unusable WAL directory.
  void start();
  // The first TCP listener's port (0 when it listens on Unix sockets only).
  std::uint16_t port() const;
  // The metrics.listen listener's port (0 without metrics.listen).
  std::uint16_t metrics_port() const;

  // --wal-salvage: replays the WAL keeping the valid records before any damage (each
  // damaged segment is moved aside, what was dropped is logged), writes what was kept
  // as a fresh snapshot and returns 0; needs no database. Throws wal_error like
  // start() for anything but damage (e.g. another process holds wal.dir).
  int salvage_wal();

  // Asks run_until_stopped() to shut down. Thread-safe.
  void request_stop();

  // SIGTERM and SIGINT call request_stop(). With a config path, SIGHUP calls reload()
  // on it (on a database worker thread). `credentials`: the command line's
  // (--mysql-user, --mysql-password-file), which every reload applies again as the
  // start did. Call before start().
  void install_signal_handlers(std::string config_path = {},
                               config::mysql_credentials credentials = {});

  // Reads `config_path` again and applies what can change live (see
  // config::plan_reload), logging the changed keys that need a restart. A config with
  // errors, or new rollup targets the reachable database lacks, is refused whole: the
  // errors are logged and the running config stays. Returns false when refused.
  // Tells systemd RELOADING=1, then READY=1. Thread-safe; blocks on the database.
  bool reload(const std::string& config_path);

  // Blocks until request_stop(), then stops accepting, lets in-flight requests
  // finish, flushes what is pending and returns 0, or 1 when something could not be
  // written within shutdown_timeout.
  int run_until_stopped();

 private:
  void replay_wal(const durable::recover_options& options);
  // start(), in order.
  std::vector<http::passed_socket> open_listeners();
  void start_components();
  void start_http_threads();
  void log_listening(const std::vector<http::passed_socket>& passed) const;
  // Says whether acknowledged increments survive a crash (the WAL, or its absence).
  void log_durability() const;
  // run_until_stopped(): the shutdown order, and what it returns for the unwritten count.
  std::size_t stop_in_order(std::chrono::steady_clock::time_point started);
  void cancel_signals();
  void wait_for_sessions(std::chrono::steady_clock::time_point deadline);
  void stop_http_threads();
  int exit_code_for(std::size_t unwritten) const;
  void start_watchdog();
  void watchdog_tick(std::chrono::steady_clock::duration period);

  config::daemon_config cfg_;
  metrics::registry metrics_;
  store::pending_store store_;
  // Items with a `client` (counters[].dedupe), apart from store_ until their flush.
  store::pending_uniques uniques_;
  const store::dedupe_spec dedupe_;
  db::pool pool_;
  ingest::table_limits limits_;
  // Requests with an Idempotency-Key, apart from store_ until their flush.
  idempotency::keyed_store keyed_;
  std::unique_ptr<durable::daemon_log> wal_;
  // Log, then apply, then answer (with wal_ only). Declared before the flusher and the
  // HTTP loops: its thread is stopped before they go (see ~application).
  std::unique_ptr<durable::committer> committer_;
  flush::flusher flusher_;
  // Tells the flusher, every min(flush.interval, 5s), whether the database answers.
  db::probe probe_;
  rollup::roller roller_;
  // Deletes buckets past their retention (counters[].buckets).
  retention::pruner pruner_;
  // Counts from access logs (log_sources), when configured.
  std::unique_ptr<logs::log_ingester> logs_;
  // The routes' work (http::backend) on the parts above.
  counter_service service_;
  http::router router_;
  // /metrics (and /healthz) alone, on metrics.listen when it is set.
  std::unique_ptr<http::router> metrics_router_;
  // One per HTTP thread, each run by its own thread (see http/session.hpp).
  std::vector<std::unique_ptr<boost::asio::io_context>> contexts_;
  // The sockets systemd passed (socket activation), or else the configured TCP listener
  // and, with listen.unix_socket, the Unix one.
  // Last, the metrics.listen one (also metrics_listener_).
  std::vector<std::shared_ptr<http::listener>> listeners_;
  http::listener* metrics_listener_ = nullptr;
  std::vector<std::thread> io_threads_;
  boost::asio::thread_pool db_workers_;
  // Set once shutting down (run_until_stopped): /readyz answers 503, resets are refused,
  // the watchdog and reloads stop.
  std::atomic<bool> draining_{false};
  std::unique_ptr<boost::asio::steady_timer> watchdog_timer_;
  std::optional<boost::asio::signal_set> signals_;
  std::optional<boost::asio::signal_set> reload_signals_;
  void wait_for_reload_signal(std::string config_path);

  // The config reloads compare against: cfg_ with the live keys of the last reload.
  // Held through a reload, while the router, the flusher and the roller take their own
  // mutexes to swap in the new settings (private to each, never the other way round).
  util::mutex reload_mutex_;
  config::daemon_config running_ GUARDED_BY(reload_mutex_);
  // Set before the first reload can run (install_signal_handlers), read-only after.
  config::mysql_credentials reload_credentials_;

  util::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stop_requested_ GUARDED_BY(stop_mutex_) = false;
};

}  // namespace slotted
