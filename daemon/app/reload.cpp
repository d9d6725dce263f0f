// SIGHUP: re-reads the config and applies what can change live (see application.hpp).

#include <boost/asio/post.hpp>
#include <cstdlib>

#include "app/application.hpp"
#include "config/config_keys.hpp"
#include "db/errors.hpp"
#include "util/log.hpp"
#include "util/notify.hpp"

namespace slotted {

namespace {
// The buckets stay those the process started with (see config::plan_reload): a later
// reload compares against them, and reports a change again until a restart.
void keep_started_buckets(std::vector<config::counter_decl>& counters,
                          const std::vector<config::counter_decl>& started) {
  for (auto& c : counters) {
    c.buckets.clear();
    for (const auto& s : started) {
      if (s.record_type == c.record_type) c.buckets = s.buckets;
    }
  }
}
}  // namespace

namespace net = boost::asio;

log::level log_level_for(config::log_level l) {
  switch (l) {
    case config::log_level::debug:
      return log::level::debug;
    case config::log_level::info:
      return log::level::info;
    case config::log_level::warn:
      return log::level::warn;
    case config::log_level::error:
      return log::level::error;
  }
  return log::level::info;
}

// Reloads run on a database worker: reading files and checking rollup targets must
// not hold up the HTTP thread the signal arrives on.
void application::wait_for_reload_signal(std::string config_path) {
  reload_signals_->async_wait(
      [this, path = std::move(config_path)](const boost::system::error_code& ec, int) mutable {
        if (ec || draining_) return;
        log::info("SIGHUP received; reloading ", path);
        net::post(db_workers_, [this, path] { reload(path); });
        wait_for_reload_signal(std::move(path));
      });
}

bool application::reload(const std::string& config_path) {
  util::lock_guard lock(reload_mutex_);
  notify::reloading();
  // Whatever the outcome, the service runs on (with the old or the new config).
  // (Unless it is stopping by now: STOPPING=1 must stay the last word.)
  struct ready_again {
    const std::atomic<bool>& draining;
    ~ready_again() {
      if (!draining) notify::ready();
    }
  } ready_again{draining_};
  config::daemon_config next;
  try {
    // With the command line's credentials, as at the start: without them the
    // reload would read the config's own password source (perhaps unreadable to this
    // process) and report mysql.user as changed.
    next = config::load_config(config_path, reload_credentials_);
  } catch (const config::config_error& e) {
    for (const auto& p : e.problems()) log::error("reload: config error: ", p);
    log::error("reload refused; the running configuration stays");
    return false;
  } catch (const std::exception& e) {
    // A programming error (a config key parsed without a row in the key table), or out
    // of memory: the reload is refused rather than ending a running daemon.
    log::error("reload: internal error reading the config: ", e.what());
    log::error("reload refused; the running configuration stays");
    return false;
  }
  // A token given by LoadCredential= is the copy systemd made at start: reading it again
  // finds the old token. Said at each reload, so whoever rotated it learns how.
  if (const char* creds = std::getenv("CREDENTIALS_DIRECTORY");
      creds != nullptr && *creds != '\0' &&
      next.http.auth_token_file.starts_with(std::string(creds) + "/")) {
    log::info(
        "reload: http.auth_token_file is a systemd credential, copied only when the "
        "service starts; a new token takes `systemctl restart slotted-counterd`");
  }
  const auto plan = config::plan_reload(running_, next);
  const bool counters_changed = running_.counters != next.counters;
  const auto targets = rollup_targets_for(next);
  if (counters_changed && !targets.empty()) {
    // With the running connection settings: those keys are not reloaded.
    auto probe = running_;
    probe.counters = next.counters;
    keep_started_buckets(probe.counters, cfg_.counters);
    try {
      if (!verify_database(probe)) {
        log::warn(
            "reload: database not reachable; the rollup targets are checked at each "
            "rollup run (a missing one fails its own rollup, nothing else)");
      }
    } catch (const db::db_error& e) {
      log::error("reload refused: ", e.what(), "; the running configuration stays");
      return false;
    }
  }
  std::string restart_keys;
  for (const auto& k : plan.needs_restart) restart_keys += (restart_keys.empty() ? "" : ", ") + k;
  if (!restart_keys.empty()) {
    log::warn("reload: changed keys that take effect only after a restart (not applied): ",
              restart_keys);
  }
  router_.reconfigure(next);
  if (counters_changed) {
    flusher_.set_rollups(targets);
    roller_.set_targets(targets);
  }
  // The live keys of the key table (config/config_keys.cpp), the log level among them.
  const auto was = running_.log;
  config::adopt_live(running_, next);
  keep_started_buckets(running_.counters, cfg_.counters);
  std::string applied;
  for (const auto& k : plan.live) applied += (applied.empty() ? "" : ", ") + k;
  // Said at the more verbose of the two levels, so a change of level is itself logged.
  const auto level = log_level_for(next.log);
  if (level <= log_level_for(was)) log::set_level(level);
  log::info("reload: applied ", applied.empty() ? std::string("no changes") : applied);
  log::set_level(level);
  return true;
}

}  // namespace slotted
