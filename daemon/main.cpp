// slotted-counterd: flags in, application out. Startup errors are reported here once.

#include <sys/resource.h>

#include <cstring>
#include <iostream>
#include <optional>
#include <string>

#include "adopt/adopt.hpp"
#include "app/application.hpp"
#include "config/config.hpp"
#include "db/connection.hpp"
#include "db/errors.hpp"
#include "db/grants.hpp"
#include "db/repository.hpp"
#include "db/top.hpp"
#include "db/uniques.hpp"
#include "logs/log_ingest.hpp"
#include "util/log.hpp"
#include "version.hpp"

namespace {

constexpr const char* usage =
    "usage:\n"
    "  slotted-counterd --config FILE                 run the daemon\n"
    "  slotted-counterd --config FILE --check-config  validate the config, exit 0 or 2\n"
    "  slotted-counterd --config FILE --migrate       create the tables, exit\n"
    "  slotted-counterd --config FILE --wal-salvage   keep the valid part of a damaged WAL, exit\n"
    "  slotted-counterd --config FILE --adopt NAME [--no-history]\n"
    "                                    take the owning column's counts into counter NAME\n"
    "  slotted-counterd --config FILE --print-grants [--grant-host HOST]\n"
    "                                                 print the GRANTs mysql.user needs, exit\n"
    "  slotted-counterd --version | --help\n"
    "Every mode takes --mysql-user USER and --mysql-password-file FILE in place of the\n"
    "config's mysql.user (or postgresql.user) and password (e.g. an administrator's,\n"
    "for --migrate).\n";

// Thousands of idle keep-alive connections are normal for this daemon.
void raise_open_file_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

// The command line, parsed.
struct flags {
  std::string config_path;
  bool check_only = false, migrate = false, salvage = false, grants = false;
  std::optional<std::string> grant_host;
  slotted::config::mysql_credentials credentials;
  slotted::adopt::options adopt;
};

// Parses the command line into `f`; returns an exit code when the process ends here
// (--help, --version: 0; a bad command line: 2, after the usage).
std::optional<int> parse_flags(int argc, char** argv, flags& f) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << usage;
      return 0;
    } else if (arg == "--version") {
      std::cout << "slotted-counterd " << slotted::version << "\n";
      return 0;
    } else if (arg == "--config" && i + 1 < argc) {
      f.config_path = argv[++i];
    } else if (arg.starts_with("--config=")) {
      f.config_path = arg.substr(9);
    } else if (arg == "--check-config") {
      f.check_only = true;
    } else if (arg == "--migrate") {
      f.migrate = true;
    } else if (arg == "--wal-salvage") {
      f.salvage = true;
    } else if (arg == "--adopt" && i + 1 < argc) {
      f.adopt.counter = argv[++i];
    } else if (arg.starts_with("--adopt=")) {
      f.adopt.counter = arg.substr(8);
      if (f.adopt.counter.empty()) {  // `--adopt=$NAME` with NAME unset: not a daemon start
        std::cerr << "slotted-counterd: --adopt needs a counter's name\n" << usage;
        return 2;
      }
    } else if (arg == "--no-history") {
      f.adopt.no_history = true;
    } else if (arg == "--print-grants") {
      f.grants = true;
    } else if (arg == "--grant-host" && i + 1 < argc) {
      f.grant_host = argv[++i];
    } else if (arg.starts_with("--grant-host=")) {
      f.grant_host = arg.substr(13);
    } else if (arg == "--mysql-user" && i + 1 < argc) {
      f.credentials.user = argv[++i];
    } else if (arg.starts_with("--mysql-user=")) {
      f.credentials.user = arg.substr(13);
    } else if (arg == "--mysql-password-file" && i + 1 < argc) {
      f.credentials.password_file = argv[++i];
    } else if (arg.starts_with("--mysql-password-file=")) {
      f.credentials.password_file = arg.substr(22);
    } else {
      std::cerr << "slotted-counterd: unknown argument '" << arg << "'\n" << usage;
      return 2;
    }
  }
  if (f.config_path.empty() ||
      int{f.check_only} + int{f.migrate} + int{f.salvage} + int{f.grants} +
              int{!f.adopt.counter.empty()} >
          1 ||
      (f.adopt.no_history && f.adopt.counter.empty()) || (f.grant_host && !f.grants)) {
    std::cerr << usage;
    return 2;
  }
  return std::nullopt;
}

// --check-config: the database too, when it can be reached: schema and rollup targets.
// A renamed instance (logs::other_instance_error) at start, with the database reachable.
void check_log_positions(const slotted::config::daemon_config& cfg) {
  if (cfg.log_sources.empty()) return;
  auto conn = slotted::connect_once(cfg.mysql);
  slotted::logs::check_other_instances(conn, cfg.instance_id, cfg.log_sources);
}

int check_config(const flags& f, const slotted::config::daemon_config& cfg) {
  try {
    if (slotted::verify_database(cfg)) {
      check_log_positions(cfg);
      std::cout << f.config_path << ": OK (database schema and rollup targets verified)\n";
    } else {
      std::cout << f.config_path
                << ": OK (database not reachable; schema and rollup targets not checked)\n";
    }
    return 0;
  } catch (const slotted::db::db_error& e) {
    std::cerr << "config error: " << f.config_path << ": " << e.what() << "\n";
    return 2;
  } catch (const slotted::logs::other_instance_error& e) {
    std::cerr << "config error: " << f.config_path << ": " << e.what() << "\n";
    return 2;
  }
}

int migrate(const slotted::config::daemon_config& cfg) {
  auto conn = slotted::connect_once(cfg.mysql);
  slotted::db::migrate(conn, cfg.mysql.table);
  slotted::db::migrate_buckets(conn, cfg.mysql.table, slotted::config::bucket_spec_of(cfg));
  slotted::db::migrate_totals(conn, cfg.mysql.table, slotted::config::top_spec_of(cfg));
  slotted::db::migrate_uniques(conn, cfg.mysql.table, slotted::config::dedupe_spec_of(cfg));
  slotted::db::verify_schema(conn, cfg.mysql.table, true);
  slotted::log::info("migrated: table `", cfg.mysql.table, "` and its ledger are ready");
  return 0;
}

int run_daemon(const flags& f, slotted::config::daemon_config&& cfg) {
  // A reachable database with a missing table or rollup target is a startup error;
  // an unreachable one is not (G3): the flusher verifies at its first connection.
  if (!slotted::verify_database(cfg)) {
    slotted::log::warn("database not reachable at start; accepting into memory until it is");
  } else {
    check_log_positions(cfg);
  }
  raise_open_file_limit();
  slotted::application app(std::move(cfg));
  app.install_signal_handlers(f.config_path, f.credentials);
  app.start();
  return app.run_until_stopped();
}

// The mode the flags name, on a loaded config.
int run_mode(const flags& f, slotted::config::daemon_config&& cfg) {
  // Offline: the config alone, no database.
  if (f.grants)
    return slotted::db::print_grants(cfg, f.grant_host.value_or("%"), std::cout, std::cerr);
  slotted::log::set_level(slotted::log_level_for(cfg.log));
  if (!slotted::db::initialize_client_library()) {
    slotted::log::error("cannot initialise the MySQL client library");
    return 1;
  }
  if (!f.adopt.counter.empty()) {
    return slotted::adopt::run(
        cfg, f.adopt, [&] { return slotted::connect_once(cfg.mysql); }, std::cout, std::cerr);
  }
  if (f.check_only) return check_config(f, cfg);
  try {
    if (f.salvage) {
      // Offline: the WAL alone, no database, no listener.
      slotted::application app(std::move(cfg));
      return app.salvage_wal();
    }
    if (f.migrate) return migrate(cfg);
    return run_daemon(f, std::move(cfg));
  } catch (const slotted::logs::other_instance_error& e) {
    // Like a config error: starting again cannot fix it.
    slotted::log::error(e.what());
    return 2;
  } catch (const std::exception& e) {
    slotted::log::error("fatal: ", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  flags f;
  if (const auto exit_code = parse_flags(argc, argv, f)) return *exit_code;
  slotted::config::daemon_config cfg;
  try {
    cfg = slotted::config::load_config(f.config_path, f.credentials, !f.grants);
  } catch (const slotted::config::config_error& e) {
    for (const auto& p : e.problems()) std::cerr << "config error: " << p << "\n";
    return 2;
  }
  return run_mode(f, std::move(cfg));
}
