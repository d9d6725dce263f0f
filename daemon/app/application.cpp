#include "app/application.hpp"

#include <sys/resource.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <csignal>
#include <cstdlib>
#include <optional>

#include "db/errors.hpp"
#include "db/top.hpp"
#include "db/uniques.hpp"
#include "http/passed_sockets.hpp"
#include "model/buckets.hpp"
#include "util/log.hpp"
#include "util/notify.hpp"

namespace slotted {

namespace net = boost::asio;
using clock = std::chrono::steady_clock;

db::connect_options connect_options_for(const config::mysql_config& m) {
  db::connect_options o;
  o.kind = m.engine == config::database_engine::postgresql ? db::engine::postgresql
                                                           : db::engine::mariadb;
  o.schema = m.schema;
  o.host = m.host;
  o.port = m.port;
  o.socket = m.socket;
  o.user = m.user;
  o.password = m.password;
  o.database = m.database;
  o.connect_timeout = m.connect_timeout;
  for (const auto& h : m.hosts) o.hosts.push_back({h.host, h.port});
  static_assert(static_cast<int>(db::tls_mode::verify_identity) ==
                static_cast<int>(config::tls_mode::verify_identity));
  o.tls.mode = static_cast<db::tls_mode>(m.tls.mode);
  o.tls.ca_file = m.tls.ca_file;
  o.tls.cert_file = m.tls.cert_file;
  o.tls.key_file = m.tls.key_file;
  return o;
}

db::connection connect_once(const config::mysql_config& m) {
  return db::failover_connector(connect_options_for(m)).connect().conn;
}

std::vector<db::rollup_target> rollup_targets_for(const config::daemon_config& c) {
  std::vector<db::rollup_target> targets;
  for (const auto& counter : c.counters) {
    if (counter.rollup) {
      targets.push_back({counter.record_type, counter.rollup->table, counter.rollup->id_column,
                         counter.rollup->count_column, counter.name});
    }
  }
  return targets;
}

namespace {

rollup::settings rollup_settings_for(const config::daemon_config& c) {
  return {c.mysql.table, rollup_targets_for(c), c.rollup.interval, c.rollup.batch_size};
}

flush::settings flush_settings_for(const config::daemon_config& c, ingest::table_limits& limits) {
  flush::settings s;
  s.instance_id = c.instance_id;
  s.table = c.mysql.table;
  s.interval = c.flush.interval;
  s.max_rows_per_statement = c.flush.max_rows_per_statement;
  s.slots = c.flush.slots;
  s.max_retry_backoff = c.flush.max_retry_backoff;
  s.connections = c.flush.connections;
  s.rollups = rollup_targets_for(c);
  s.limits = &limits;
  s.idempotency_window =
      std::chrono::duration_cast<std::chrono::milliseconds>(c.idempotency.window);
  s.buckets = config::bucket_spec_of(c);
  s.top = config::top_spec_of(c);
  s.dedupe = config::dedupe_spec_of(c);
  return s;
}

// Readiness must notice a dead database within seconds even when flush.interval is
// minutes long.
std::chrono::milliseconds probe_period(const config::daemon_config& c) {
  return std::min<std::chrono::milliseconds>(c.flush.interval, std::chrono::seconds(5));
}

unsigned http_threads(const config::daemon_config& c) {
  if (c.http.threads > 0) return c.http.threads;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : hw;
}
// The pending bounds (README: Configuration, flush.max_pending_keys and
// flush.max_pending_bytes), one for every admission path.
store::pending_limits pending_limits_of(const config::daemon_config& cfg) {
  return {cfg.flush.max_pending_keys, cfg.flush.max_pending_bytes};
}

}  // namespace

application::application(config::daemon_config cfg)
    : cfg_(std::move(cfg)),
      store_(cfg_.shards),
      uniques_(store_, cfg_.shards),
      dedupe_(config::dedupe_spec_of(cfg_)),
      pool_(connect_options_for(cfg_.mysql), cfg_.mysql.pool_size),
      keyed_(cfg_.idempotency.window, cfg_.idempotency.max_keys, metrics_, store_),
      wal_(cfg_.wal.dir.empty() ? nullptr
                                : std::make_unique<durable::daemon_log>(cfg_.wal, metrics_)),
      committer_(wal_ ? std::make_unique<durable::committer>(*wal_, store_, pending_limits_of(cfg_))
                      : nullptr),
      flusher_(flush_settings_for(cfg_, limits_), store_, pool_, metrics_),
      probe_(connect_options_for(cfg_.mysql), probe_period(cfg_),
             [this](bool reachable) { flusher_.probe_result(reachable); }),
      roller_(rollup_settings_for(cfg_), pool_, metrics_),
      pruner_({.table = cfg_.mysql.table,
               .buckets = config::bucket_spec_of(cfg_),
               .top = config::top_spec_of(cfg_)},
              pool_, metrics_),
      service_({store_, keyed_, committer_.get(), flusher_, roller_, pool_, metrics_, db_workers_,
                draining_, uniques_, dedupe_},
               pending_limits_of(cfg_)),
      router_(cfg_, service_, metrics_, limits_),
      metrics_router_(cfg_.metrics_listen.empty()
                          ? nullptr
                          : std::make_unique<http::router>(cfg_, service_, metrics_, limits_,
                                                           http::router::scope::metrics_only)),
      db_workers_(cfg_.mysql.pool_size),
      running_(cfg_) {
  // Buckets are fixed for the process's life (a reload does not change them).
  store_.set_buckets(config::bucket_spec_of(cfg_));
  // No PostgreSQL integer holds more than 2^63 - 1: refused at ingest from the start, not
  // only once the first schema check has read the columns (a database down at start).
  if (cfg_.mysql.engine == config::database_engine::postgresql)
    limits_.set(ingest::max_record_type, INT64_MAX);
  for (unsigned i = 0; i < http_threads(cfg_); ++i)
    contexts_.push_back(std::make_unique<net::io_context>(1));
  flusher_.attach_keyed(&keyed_);
  flusher_.attach_uniques(&uniques_);
  if (committer_) committer_->attach_keyed(&keyed_);
  if (committer_) committer_->attach_uniques(&uniques_);
  auto& connector = pool_.connector();
  metrics_.set_database_engine(std::string(cfg_.mysql.section()));
  metrics_.set_mysql_hosts(connector.host_names());
  connector.on_host_change([this, names = connector.host_names()](std::size_t i) {
    metrics_.mysql_host_in_use(i);
    log::info("database host in use: ", names[i]);
  });
}

application::~application() {
  // Its thread uses the flusher's queue (snapshots), destroyed before it.
  if (committer_) committer_->stop();
  if (!io_threads_.empty()) {
    for (auto& c : contexts_) c->stop();
    for (auto& t : io_threads_) t.join();
  }
  db_workers_.join();
}

bool verify_database(const config::daemon_config& cfg) {
  std::optional<db::connection> conn;
  try {
    conn.emplace(connect_once(cfg.mysql));
  } catch (const db::db_error& e) {
    if (e.fatal()) throw;
    return false;
  }
  const auto targets = rollup_targets_for(cfg);
  db::verify_schema(*conn, cfg.mysql.table, !targets.empty());
  for (const auto& t : targets) db::verify_rollup_target(*conn, t);
  // Counters with buckets need their tables (--migrate creates them).
  if (const auto missing =
          db::missing_bucket_tables(*conn, cfg.mysql.table, config::bucket_spec_of(cfg));
      !missing.empty()) {
    throw db::db_error(db::error_class::fatal,
                       "table `" + missing.front() +
                           "` does not exist but counters[].buckets needs it; run "
                           "slotted-counterd --migrate");
  }
  db::verify_totals_tables(*conn, cfg.mysql.table, config::top_spec_of(cfg));
  db::verify_uniques_table(*conn, cfg.mysql.table, config::dedupe_spec_of(cfg));
  if (!cfg.log_sources.empty()) db::verify_positions_table(*conn);
  return true;
}

void application::start() {
  // Before the listener opens: what the log holds is pending again.
  if (wal_) replay_wal({});
  const auto passed = open_listeners();
  start_components();
  for (auto& l : listeners_) l->run();
  start_http_threads();
  log_listening(passed);
  if (metrics_listener_ != nullptr) {
    log::info("/metrics served on metrics.listen (", cfg_.metrics_listen, ", port ",
              metrics_listener_->port(), ") and not on the API's listeners");
  }
  log_durability();
  notify::ready();
  start_watchdog();
}

namespace {
// Client connections must never take the descriptors the daemon needs for itself:
// WAL segments, database connections, /proc reads, the HTTP threads' event loops.
std::size_t max_connections_for(const config::daemon_config& c) {
  const std::size_t fd_reserve = 256 + 2 * c.mysql.pool_size;
  rlimit nofile{};
  getrlimit(RLIMIT_NOFILE, &nofile);
  const std::size_t max_connections =
      http::connection_limit(c.http.max_connections, nofile.rlim_cur, fd_reserve);
  if (max_connections < c.http.max_connections) {
    log::warn("http.max_connections ", c.http.max_connections, " lowered to ", max_connections,
              ": the open-file limit is ", nofile.rlim_cur, " and ", fd_reserve,
              " are kept for the daemon's own files and database connections");
  }
  return max_connections;
}
}  // namespace

std::vector<http::passed_socket> application::open_listeners() {
  const net::ip::tcp::endpoint endpoint(net::ip::make_address(cfg_.listen_address),
                                        cfg_.listen_port);
  http::session_limits limits;
  limits.max_body_bytes = cfg_.http.max_body_bytes;
  limits.idle_timeout = cfg_.http.idle_timeout;
  std::vector<net::io_context*> contexts;
  for (auto& c : contexts_) contexts.push_back(c.get());
  const std::size_t max_connections = max_connections_for(cfg_);
  // Sockets passed by systemd (socket activation) replace the configured listeners.
  std::vector<http::passed_socket> passed;
  try {
    passed = http::take_passed_sockets();
    if (!passed.empty()) {
      // One max_connections for all listeners: the descriptors are the same.
      http::listener::connection_count open;
      for (const auto& p : passed) {
        listeners_.push_back(std::make_shared<http::listener>(
            contexts, p.fd, p.family, router_, limits, max_connections, metrics_, open));
        open = listeners_.back()->open_count();
      }
    } else {
      listeners_.push_back(std::make_shared<http::listener>(contexts, endpoint, router_, limits,
                                                            max_connections, metrics_));
      if (!cfg_.listen_unix_socket.empty()) {
        listeners_.push_back(std::make_shared<http::listener>(
            std::move(contexts), cfg_.listen_unix_socket, cfg_.listen_unix_socket_mode, router_,
            limits, max_connections, metrics_, listeners_.front()->open_count()));
      }
    }
    // Opened by the daemon itself, with or without the socket unit: a scraper or two, so a
    // small connection limit of its own.
    if (const auto at = config::listen_endpoint(cfg_.metrics_listen)) {
      constexpr std::size_t metrics_connections = 64;
      listeners_.push_back(std::make_shared<http::listener>(
          std::vector<net::io_context*>{contexts_.front().get()},
          net::ip::tcp::endpoint(net::ip::make_address(at->address), at->port), *metrics_router_,
          limits, metrics_connections, metrics_));
      metrics_listener_ = listeners_.back().get();
    }
  } catch (...) {
    // The log thread uses the flusher's queue: stop it before anything is torn down.
    if (committer_) committer_->stop();
    throw;
  }
  return passed;
}

// The background components, in the order they start (stop_in_order() stops them).
void application::start_components() {
  flusher_.start();
  probe_.start();
  roller_.start();
  pruner_.start();
  if (!cfg_.log_sources.empty()) {
    logs_ = std::make_unique<logs::log_ingester>(logs::ingest_settings_for(cfg_), pool_, metrics_);
    logs_->start();
  }
}

void application::start_http_threads() {
  const unsigned n = http_threads(cfg_);
  for (unsigned i = 0; i < n; ++i) {
    // Sessions come and go; the context must not run out of work in between.
    io_threads_.emplace_back([ctx = contexts_[i].get()] {
      counter_service::serve_on(ctx);
      http::run_io_context(*ctx);
    });
  }
}

void application::log_listening(const std::vector<http::passed_socket>& passed) const {
  const unsigned n = http_threads(cfg_);
  if (passed.empty()) {
    log::info("slotted-counterd listening on ", cfg_.listen_address, ":", port(), " (instance ",
              cfg_.instance_id, ", ", n, " http threads, ", cfg_.shards, " shards)");
    if (!cfg_.listen_unix_socket.empty()) {
      log::info("listening on unix socket ", cfg_.listen_unix_socket, " (mode 0",
                (cfg_.listen_unix_socket_mode >> 6) & 7, (cfg_.listen_unix_socket_mode >> 3) & 7,
                cfg_.listen_unix_socket_mode & 7, ")");
    }
    return;
  }
  for (const auto& p : passed) {
    log::info("listening on ", p.address, " (socket '", p.name, "' passed by systemd)");
  }
  // A config that listens elsewhere (e.g. one from before the socket unit, upgraded)
  // would silently move the API: say so loudly (docs/production.md, Socket activation).
  const config::daemon_config defaults;
  if (cfg_.listen_address != defaults.listen_address || cfg_.listen_port != defaults.listen_port ||
      !cfg_.listen_unix_socket.empty()) {
    log::warn("the config listens on ", cfg_.listen_address, ":", cfg_.listen_port,
              cfg_.listen_unix_socket.empty() ? "" : " and " + cfg_.listen_unix_socket,
              ", but sockets passed by systemd replace it: only the sockets above are served. "
              "Move those addresses into slotted-counterd.socket (systemctl edit "
              "slotted-counterd.socket) or drop them from the config");
  }
  log::info("slotted-counterd listening on ", passed.size(),
            " passed sockets; the config's listen.address, listen.port and listen.unix_socket "
            "are not used (instance ",
            cfg_.instance_id, ", ", n, " http threads, ", cfg_.shards, " shards)");
}

void application::log_durability() const {
  if (wal_) {
    log::info("WAL in ", cfg_.wal.dir,
              ": every acknowledged increment survives a SIGKILL of the daemon");
    return;
  }
  const std::string state = config::default_wal_dir();
  if (!state.empty()) {
    log::warn(
        "no WAL (wal.dir: \"\"): a SIGKILL or crash loses the increments not yet "
        "flushed; remove wal.dir from the config to keep the WAL in the state directory ",
        state);
    // A WAL left there by a crash with the WAL on is not replayed by this start. Reading
    // it takes as long as a replay: the start's timeout is extended as for one.
    notify::startup_extender extend_start;
    if (durable::holds_something_to_replay(state)) {
      log::warn("the state directory ", state,
                " holds WAL segments with increments not yet "
                "flushed, which a start without a WAL does not replay: start once with wal.dir: ",
                state,
                " (or without wal.dir) to replay and flush them, then turn the WAL off "
                "again (a damaged segment: --wal-salvage first, docs/operations.md, WAL recovery)");
    }
  } else {
    log::warn(
        "no WAL (no wal.dir, and no $STATE_DIRECTORY as the unit sets): a SIGKILL or "
        "crash loses the increments not yet flushed; set wal.dir to keep one");
  }
}

std::uint16_t application::port() const {
  for (const auto& l : listeners_) {
    if (l->port() != 0 && l.get() != metrics_listener_) return l->port();
  }
  return 0;
}

std::uint16_t application::metrics_port() const {
  return metrics_listener_ != nullptr ? metrics_listener_->port() : 0;
}

void application::replay_wal(const durable::recover_options& options) {
  ::signal(SIGXFSZ, SIG_IGN);  // a file-size limit must fail the write, not kill us
  // Replay and snapshot grow with what the WAL holds: under systemd the start timeout is
  // extended while they make progress (see notify::startup_extender).
  notify::startup_extender extend_start;
  durable::recover_options with_buckets = options;
  with_buckets.buckets = store_.buckets();
  auto recovered = durable::recover(wal_->log(), with_buckets);
  // Whether the old segments hold something the start snapshot must log again. A clean
  // stop leaves its last segment with nothing to keep: a start on a full disk then runs
  // (and refuses increments) rather than exiting; the old segments stay until a snapshot.
  const bool to_keep = !recovered.deltas.empty() || !recovered.batches.empty() ||
                       !recovered.keyed.empty() || !recovered.uniques.empty() ||
                       recovered.salvaged > 0;
  store_.add_deltas(recovered.deltas);
  {
    // Keyed requests come back pending, or in their logged batches; the index knows
    // every one of them again (a retry to this instance is answered as a replay).
    std::vector<idempotency::keyed_request> in_batches;
    for (const auto& b : recovered.batches) {
      const auto requests = store::keyed_requests(b);
      in_batches.insert(in_batches.end(), requests.begin(), requests.end());
    }
    keyed_.restore(std::move(recovered.keyed), in_batches);
  }
  // Unique entries come back pending (held once each), or in their logged unique batches,
  // which the ledger tells committed or not as any replayed batch.
  // An entry of a counter that dedupes no more (the config changed across the crash)
  // is dropped; the flush drops those in logged batches, and those too late.
  const auto logged_uniques = recovered.uniques.size();
  std::erase_if(recovered.uniques, [this](const store::unique_entry& e) {
    return dedupe_.window_of(e.record_type) == store::granularity::none;
  });
  if (recovered.uniques.size() < logged_uniques) {
    log::warn("WAL: ", logged_uniques - recovered.uniques.size(),
              " pending unique entries dropped: their counters no longer have dedupe");
  }
  // An entry of a counter whose window changed across the crash (dedupe: hour <-> day)
  // takes the window its time falls in now, as a request would: under its logged window
  // it would not meet its client's entries of the new one, and count twice.
  for (auto& e : recovered.uniques)
    e.window = store::bucket_start(dedupe_.window_of(e.record_type), e.at);
  uniques_.add(recovered.uniques);
  flusher_.enqueue(recovered.batches);
  flusher_.attach_source(committer_.get());
  // Logs what was replayed as one snapshot in a fresh segment and drops the old ones.
  committer_->start(flusher_, to_keep);
  if (recovered.segments > 0) {
    log::info("WAL replayed from ", recovered.segments, " segments: ", recovered.deltas.size(),
              " pending counters and ", recovered.batches.size(), " logged batches");
    if (!recovered.uniques.empty())
      log::info("WAL replayed ", recovered.uniques.size(), " pending unique entries");
  }
}

int application::salvage_wal() {
  if (!wal_) {
    log::error("--wal-salvage: the config sets no wal.dir");
    return 2;
  }
  replay_wal({.salvage = true});
  committer_->stop();
  log::info("WAL salvage done: ", cfg_.wal.dir,
            " holds what was replayed; start the daemon normally to flush it");
  return 0;
}

void application::start_watchdog() {
  const auto interval = notify::watchdog_interval();
  if (!interval) return;
  watchdog_timer_ = std::make_unique<net::steady_timer>(*contexts_.front());
  watchdog_tick(std::chrono::duration_cast<clock::duration>(*interval / 2));
}

// Pinged from the event loop, so a wedged loop stops the pings, and only while the
// flusher is not stuck: every statement it sends is bounded by the connect and I/O
// timeouts, so a cycle with no statement answered and no batch committed for two
// minutes is wedged. A long cycle that keeps making progress (a backlog draining, lock
// waits retried) is not.
void application::watchdog_tick(clock::duration period) {
  if (draining_) return;
  if (flusher_.healthy(std::chrono::minutes(2))) notify::watchdog();
  watchdog_timer_->expires_after(period);
  watchdog_timer_->async_wait([this, period](const boost::system::error_code& ec) {
    if (!ec) watchdog_tick(period);
  });
}

void application::request_stop() {
  {
    util::lock_guard lock(stop_mutex_);
    stop_requested_ = true;
  }
  stop_cv_.notify_all();
}

void application::install_signal_handlers(std::string config_path,
                                          config::mysql_credentials credentials) {
  reload_credentials_ = std::move(credentials);
  signals_.emplace(*contexts_.front(), SIGINT, SIGTERM);
  signals_->async_wait([this](const boost::system::error_code& ec, int signo) {
    if (ec) return;
    log::info("signal ", signo, " received; shutting down");
    request_stop();
  });
  if (!config_path.empty()) {
    reload_signals_.emplace(*contexts_.front(), SIGHUP);
    wait_for_reload_signal(std::move(config_path));
  }
}

int application::run_until_stopped() {
  {
    util::unique_lock lock(stop_mutex_);
    lock.wait(stop_cv_, [&]() REQUIRES(stop_mutex_) { return stop_requested_; });
  }
  return exit_code_for(stop_in_order(clock::now()));
}

// The shutdown order, one step a line. In-flight requests get up to half of
// shutdown_timeout (from `started`); the final flush the rest.
std::size_t application::stop_in_order(clock::time_point started) {
  notify::stopping();
  draining_ = true;
  cancel_signals();
  // Stops accepting. A passed socket stays open in systemd: what arrives from now on
  // waits in its queue for the next daemon.
  for (auto& l : listeners_) l->stop();
  wait_for_sessions(started + cfg_.shutdown_timeout / 2);
  stop_http_threads();
  roller_.stop();
  pruner_.stop();
  // The log reader ends its pass (at most max_batch_bytes of log, one commit) while the
  // flusher writes what HTTP clients were promised; it is joined after that final flush,
  // so it does not take the flusher's share of the shutdown deadline first.
  if (logs_) logs_->request_stop();
  probe_.stop();
  const std::size_t unwritten = flusher_.stop(started + cfg_.shutdown_timeout);
  if (logs_) logs_->stop();
  if (committer_) committer_->stop();
  db_workers_.join();
  return unwritten;
}

void application::cancel_signals() {
  if (!signals_) return;
  net::post(*contexts_.front(), [this] {
    boost::system::error_code ignored;
    signals_->cancel(ignored);
    if (reload_signals_) reload_signals_->cancel(ignored);
  });
}

void application::wait_for_sessions(clock::time_point deadline) {
  const auto busy = [this] {
    std::size_t n = 0;
    for (const auto& l : listeners_) n += l->sessions();
    return n;
  };
  while (busy() > 0 && clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (busy() > 0) {
    log::warn(busy(), " connections still busy at the shutdown deadline; closing them");
  }
}

void application::stop_http_threads() {
  for (auto& c : contexts_) c->stop();
  for (auto& t : io_threads_) t.join();
  io_threads_.clear();
}

int application::exit_code_for(std::size_t unwritten) const {
  if (unwritten > 0) {
    if (wal_) {
      log::warn("shutdown: ", unwritten,
                " counters could not be written to the database; they stay in the WAL "
                "and are flushed at the next start");
      return 0;
    }
    log::error("shutdown: ", unwritten,
               " counters could not be written to the database and are lost");
    return 1;
  }
  log::info("shutdown complete; everything acknowledged was written");
  return 0;
}

}  // namespace slotted
