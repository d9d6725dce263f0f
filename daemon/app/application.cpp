#include "app/application.hpp"

#include <sys/resource.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <csignal>
#include <optional>

#include "http/passed_sockets.hpp"
#include "idempotency/keyed_batches.hpp"
#include "model/errors.hpp"
#include "util/log.hpp"
#include "util/notify.hpp"

namespace slotted {

namespace net = boost::asio;
using clock = std::chrono::steady_clock;

db::connect_options connect_options_for(const config::mysql_config& m) {
  db::connect_options o;
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
  return s;
}

// Readiness must notice a dead database within seconds even when flush.interval is
// minutes long.
std::chrono::milliseconds probe_period(const config::daemon_config& c) {
  return std::min<std::chrono::milliseconds>(c.flush.interval, std::chrono::seconds(5));
}

// The HTTP loop running on this thread (null elsewhere): a durable request is applied
// and answered on the loop that received it.
thread_local net::io_context* this_thread_loop = nullptr;

unsigned http_threads(const config::daemon_config& c) {
  if (c.http.threads > 0) return c.http.threads;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : hw;
}
}  // namespace

application::application(config::daemon_config cfg)
    : cfg_(std::move(cfg)),
      store_(cfg_.shards),
      pool_(connect_options_for(cfg_.mysql), cfg_.mysql.pool_size),
      keyed_(cfg_.idempotency.window, cfg_.idempotency.max_keys, metrics_, store_),
      wal_(cfg_.wal.dir.empty() ? nullptr
                                : std::make_unique<wal::write_ahead_log>(cfg_.wal, metrics_)),
      committer_(
          wal_ ? std::make_unique<durable::committer>(*wal_, store_, cfg_.flush.max_pending_keys)
               : nullptr),
      flusher_(flush_settings_for(cfg_, limits_), store_, pool_, metrics_),
      probe_(connect_options_for(cfg_.mysql), probe_period(cfg_),
             [this](bool reachable) { flusher_.probe_result(reachable); }),
      roller_(rollup_settings_for(cfg_), pool_, metrics_),
      pruner_({cfg_.mysql.table, config::bucket_spec_of(cfg_)}, pool_, metrics_),
      router_(cfg_, *this, metrics_, limits_),
      db_workers_(cfg_.mysql.pool_size),
      running_(cfg_) {
  // Buckets are fixed for the process's life (a reload does not change them).
  store_.set_buckets(config::bucket_spec_of(cfg_));
  for (unsigned i = 0; i < http_threads(cfg_); ++i)
    contexts_.push_back(std::make_unique<net::io_context>(1));
  flusher_.attach_keyed(&keyed_);
  if (committer_) committer_->attach_keyed(&keyed_);
  auto& connector = pool_.connector();
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
    throw db::db_error(0,
                       "table `" + missing.front() +
                           "` does not exist but counters[].buckets needs it; run "
                           "slotted-counterd --migrate",
                       true);
  }
  if (!cfg.log_sources.empty()) logs::verify_positions_table(*conn);
  return true;
}

void application::start() {
  // Before the listener opens: what the log holds is pending again.
  if (wal_) replay_wal({});
  const net::ip::tcp::endpoint endpoint(net::ip::make_address(cfg_.listen_address),
                                        cfg_.listen_port);
  http::session_limits limits;
  limits.max_body_bytes = cfg_.http.max_body_bytes;
  limits.idle_timeout = cfg_.http.idle_timeout;
  std::vector<net::io_context*> contexts;
  for (auto& c : contexts_) contexts.push_back(c.get());
  // Client connections must never take the descriptors the daemon needs for itself:
  // WAL segments, database connections, /proc reads, the HTTP threads' event loops.
  const std::size_t fd_reserve = 256 + 2 * cfg_.mysql.pool_size;
  rlimit nofile{};
  getrlimit(RLIMIT_NOFILE, &nofile);
  const std::size_t max_connections =
      http::connection_limit(cfg_.http.max_connections, nofile.rlim_cur, fd_reserve);
  if (max_connections < cfg_.http.max_connections) {
    log::warn("http.max_connections ", cfg_.http.max_connections, " lowered to ", max_connections,
              ": the open-file limit is ", nofile.rlim_cur, " and ", fd_reserve,
              " are kept for the daemon's own files and database connections");
  }
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
  } catch (...) {
    // The log thread uses the flusher's queue: stop it before anything is torn down.
    if (committer_) committer_->stop();
    throw;
  }
  flusher_.start();
  probe_.start();
  roller_.start();
  pruner_.start();
  if (!cfg_.log_sources.empty()) {
    logs_ = std::make_unique<logs::log_ingester>(logs::ingest_settings_for(cfg_), pool_,
                                                 metrics_.prometheus_registry());
    logs_->start();
  }
  for (auto& l : listeners_) l->run();
  const unsigned n = http_threads(cfg_);
  for (unsigned i = 0; i < n; ++i) {
    // Sessions come and go; the context must not run out of work in between.
    io_threads_.emplace_back([ctx = contexts_[i].get()] {
      this_thread_loop = ctx;
      http::run_io_context(*ctx);
    });
  }
  if (!passed.empty()) {
    for (const auto& p : passed) {
      log::info("listening on ", p.address, " (socket '", p.name, "' passed by systemd)");
    }
    // A config that listens elsewhere (e.g. one from before the socket unit, upgraded)
    // would silently move the API: say so loudly (docs/production.md, Socket activation).
    const config::daemon_config defaults;
    if (cfg_.listen_address != defaults.listen_address ||
        cfg_.listen_port != defaults.listen_port || !cfg_.listen_unix_socket.empty()) {
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
  } else {
    log::info("slotted-counterd listening on ", cfg_.listen_address, ":", port(), " (instance ",
              cfg_.instance_id, ", ", n, " http threads, ", cfg_.shards, " shards)");
    if (!cfg_.listen_unix_socket.empty()) {
      log::info("listening on unix socket ", cfg_.listen_unix_socket, " (mode 0",
                (cfg_.listen_unix_socket_mode >> 6) & 7, (cfg_.listen_unix_socket_mode >> 3) & 7,
                cfg_.listen_unix_socket_mode & 7, ")");
    }
  }
  notify::ready();
  start_watchdog();
}

std::uint16_t application::port() const {
  for (const auto& l : listeners_) {
    if (l->port() != 0) return l->port();
  }
  return 0;
}

void application::replay_wal(const wal::open_options& options) {
  ::signal(SIGXFSZ, SIG_IGN);  // a file-size limit must fail the write, not kill us
  // Replay and snapshot grow with what the WAL holds: under systemd the start timeout is
  // extended while they make progress (see notify::startup_extender).
  notify::startup_extender extend_start;
  wal::open_options with_buckets = options;
  with_buckets.buckets = store_.buckets();
  auto recovered = wal_->open(with_buckets);
  store_.add_deltas(recovered.deltas);
  {
    // Keyed requests come back pending, or in their logged batches; the index knows
    // every one of them again (a retry to this instance is answered as a replay).
    std::vector<idempotency::keyed_request> in_batches;
    for (const auto& b : recovered.batches)
      in_batches.insert(in_batches.end(), b.keyed.begin(), b.keyed.end());
    keyed_.restore(std::move(recovered.keyed), in_batches);
  }
  flusher_.enqueue(recovered.batches);
  flusher_.attach_source(committer_.get());
  // Logs what was replayed as one snapshot in a fresh segment and drops the old ones.
  committer_->start(flusher_);
  if (recovered.segments > 0) {
    log::info("WAL replayed from ", recovered.segments, " segments: ", recovered.deltas.size(),
              " pending counters and ", recovered.batches.size(), " logged batches");
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
    std::lock_guard lock(stop_mutex_);
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
    std::unique_lock lock(stop_mutex_);
    stop_cv_.wait(lock, [&] { return stop_requested_; });
  }
  const auto started = clock::now();
  const auto deadline = started + cfg_.shutdown_timeout;
  notify::stopping();
  draining_ = true;
  if (signals_) {
    net::post(*contexts_.front(), [this] {
      boost::system::error_code ignored;
      signals_->cancel(ignored);
      if (reload_signals_) reload_signals_->cancel(ignored);
    });
  }
  // Stops accepting. A passed socket stays open in systemd: what arrives from now on
  // waits in its queue for the next daemon.
  for (auto& l : listeners_) l->stop();
  // In-flight requests get up to half the shutdown budget; the final flush the rest.
  const auto requests_deadline = started + cfg_.shutdown_timeout / 2;
  const auto busy = [this] {
    std::size_t n = 0;
    for (const auto& l : listeners_) n += l->sessions();
    return n;
  };
  while (busy() > 0 && clock::now() < requests_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (busy() > 0) {
    log::warn(busy(), " connections still busy at the shutdown deadline; closing them");
  }
  for (auto& c : contexts_) c->stop();
  for (auto& t : io_threads_) t.join();
  io_threads_.clear();

  roller_.stop();
  pruner_.stop();
  // The log reader ends its pass (at most max_batch_bytes of log, one commit) while the
  // flusher writes what HTTP clients were promised; it is joined after that final flush,
  // so it does not take the flusher's share of the shutdown deadline first.
  if (logs_) logs_->request_stop();
  probe_.stop();
  const std::size_t unwritten = flusher_.stop(deadline);
  if (logs_) logs_->stop();
  if (committer_) committer_->stop();
  db_workers_.join();
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

namespace {
http::backend_result from_store(store::add_result r) {
  using status = http::backend_result::status;
  switch (r) {
    case store::add_result::applied:
      return {status::done, {}};
    case store::add_result::over_limit:
      return {status::over_limit, {}};
    case store::add_result::out_of_range:
      return {status::out_of_range, {}};
  }
  return {status::unavailable, "internal error"};
}

http::backend_result from_commit(durable::commit_result r) {
  using status = http::backend_result::status;
  switch (r) {
    case durable::commit_result::applied:
      return {status::done, {}};
    case durable::commit_result::over_limit:
      return {status::over_limit, {}};
    case durable::commit_result::out_of_range:
      return {status::out_of_range, {}};
    case durable::commit_result::log_unavailable:
      break;
  }
  return {status::unavailable, "the write-ahead log cannot be written; retry later"};
}

// What the key index's answer means for the request, or nullopt when the index leaves it
// open (fresh: not known here; over_limit, which only admit() can say).
std::optional<http::backend_result> from_index(const idempotency::admission& a) {
  using idempotency::admit_result;
  using status = http::backend_result::status;
  switch (a.result) {
    case admit_result::replay: {
      http::backend_result r{status::replayed, {}};
      r.count = a.accepted;
      return r;
    }
    case admit_result::conflict:
      return http::backend_result{status::conflict, {}};
    case admit_result::in_progress:
      return http::backend_result{status::unavailable,
                                  "a request with this Idempotency-Key is being logged; retry"};
    case admit_result::fresh:
    case admit_result::over_limit:
      break;
  }
  return std::nullopt;
}
}  // namespace

http::backend_result application::add(std::span<const ingest::increment> increments) {
  return from_store(store_.add(increments, cfg_.flush.max_pending_keys));
}

void application::add_durable(std::vector<ingest::increment>&& increments, done_fn done) {
  committer_->submit(std::move(increments), this_thread_loop,
                     [done = std::move(done)](durable::commit_result r) { done(from_commit(r)); });
}

void application::add_keyed(idempotency::keyed_request&& request, done_fn done) {
  using idempotency::admit_result;
  using status = http::backend_result::status;
  if (!keyed_.table_present()) {
    return done({status::unavailable,
                 "the database has no Idempotency-Key table yet (slotted-counterd --migrate "
                 "creates it); nothing of this request was applied"});
  }
  // Without a WAL a fresh request is pending at once; with one, only once logged.
  const auto a = keyed_.admit(request, cfg_.flush.max_pending_keys, committer_ == nullptr);
  if (auto known = from_index(a)) return done(std::move(*known));
  if (a.result == admit_result::over_limit) return done({status::over_limit, {}});
  if (committer_) {
    return committer_->submit_keyed(
        std::move(request), this_thread_loop,
        [done = std::move(done)](durable::commit_result r) { done(from_commit(r)); });
  }
  done({status::done, {}});
}

void application::find_keyed(std::string key, idempotency::body_hash hash, std::int64_t received_ms,
                             done_fn done) {
  using status = http::backend_result::status;
  // The index first: it knows what this instance accepted, flushed or not.
  if (auto known = from_index(keyed_.lookup(key, hash))) return done(std::move(*known));
  if (!keyed_.table_present()) {
    return done({status::unavailable,
                 "the database has no Idempotency-Key table yet (slotted-counterd --migrate "
                 "creates it); nothing of this request was applied"});
  }
  // Then the keys table: what any instance committed (this one's index may have forgotten
  // it, or never seen it). A read on a database worker, like a counter's.
  const auto window = std::chrono::duration_cast<std::chrono::milliseconds>(keyed_.window());
  net::post(db_workers_, [this, key = std::move(key), hash, received_ms, window,
                          done = std::move(done)] {
    http::backend_result r;
    try {
      const auto found = pool_.acquire().use([&](db::connection& conn) {
        return idempotency::find_committed_key(conn, key, received_ms, window);
      });
      if (!found) {
        r = {status::done, {}};
      } else if (found->body_hash != idempotency::hex(hash)) {
        r = {status::conflict, {}};
      } else {
        keyed_.count_replay();
        r = {status::replayed, {}};
        r.count = found->accepted;
      }
    } catch (const db::db_error& e) {
      metrics_.db_error(e.kind());
      r = {
          status::unavailable,
          std::string("this Idempotency-Key cannot be looked up, the database is not reachable (") +
              e.what() + "); nothing of this request was applied"};
    }
    done(std::move(r));
  });
}

void application::read_counter(store::counter_key key, done_fn done) {
  net::post(db_workers_, [this, key, done = std::move(done)] {
    http::backend_result r;
    try {
      const auto reading = flusher_.read_total(key);
      if (!reading.retry.empty()) {
        r = {http::backend_result::status::unavailable, reading.retry};
      } else {
        r.persisted = reading.persisted;
        r.pending = reading.pending;
      }
    } catch (const db::db_error& e) {
      r = {http::backend_result::status::unavailable,
           std::string("database not reachable: ") + e.what()};
    }
    done(std::move(r));
  });
}

void application::reset_counter(store::counter_key key, done_fn done) {
  // Ordered with the flusher's batches, on its thread (see flush::flusher::request_reset).
  flusher_.request_reset(key, [done = std::move(done)](const flush::reset_result& f) {
    if (!f.ok) return done({http::backend_result::status::unavailable, f.error});
    http::backend_result r;
    r.cleared = f.persisted + f.pending;
    done(std::move(r));
  });
}

void application::read_series(store::counter_key key, store::granularity g, std::int64_t from,
                              std::int64_t to, done_fn done) {
  net::post(db_workers_, [this, key, g, from, to, done = std::move(done)] {
    http::backend_result r;
    try {
      auto reading = flusher_.read_series(key, g, from, to);
      if (!reading.retry.empty()) {
        r = {http::backend_result::status::unavailable, reading.retry};
      } else {
        r.points = std::move(reading.points);
      }
    } catch (const db::db_error& e) {
      r = {http::backend_result::status::unavailable,
           std::string("database not reachable: ") + e.what()};
    }
    done(std::move(r));
  });
}

void application::flush_now(done_fn done) {
  flusher_.request_flush([done = std::move(done)](const flush::flush_result& f) {
    if (!f.ok) return done({http::backend_result::status::unavailable, f.error});
    done({http::backend_result::status::done, {}, f.rows});
  });
}

void application::rollup_now(done_fn done) {
  roller_.request([done = std::move(done)](const rollup::rollup_result& r) {
    if (!r.ok) return done({http::backend_result::status::unavailable, r.error});
    done({http::backend_result::status::done, {}, r.records});
  });
}

std::string application::metrics_text() {
  flusher_.update_gauges();
  return metrics_.serialize();
}

}  // namespace slotted
