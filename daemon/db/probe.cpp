#include "db/probe.hpp"

#include "db/errors.hpp"
#include "util/log.hpp"

namespace slotted::db {

namespace {
// A probe that waits longer than its period for an answer reports too late to matter.
connect_options bounded(connect_options o, std::chrono::milliseconds period) {
  const auto bound = std::max<std::chrono::milliseconds>(period, std::chrono::seconds(1));
  o.connect_timeout = std::min(o.connect_timeout, bound);
  o.io_timeout = std::min(o.io_timeout, bound);
  return o;
}
}  // namespace

probe::probe(connect_options options, std::chrono::milliseconds period,
             std::function<void(bool)> report)
    : connector_(bounded(std::move(options), period)),
      report_(std::move(report)),
      worker_([this] { return attempt(); }, [period](bool) { return period; },
              std::chrono::milliseconds(0)) {}

probe::~probe() {
  stop();
}

void probe::start() {
  started_ = true;
  worker_.start();
}

void probe::stop() {
  if (started_) worker_.stop();
  started_ = false;
}

bool probe::attempt() {
  for (bool retried = false;; retried = true) {
    const bool reused = conn_.has_value();
    const auto started = std::chrono::steady_clock::now();
    try {
      if (!conn_) conn_.emplace(connector_.connect().conn);
      conn_->ping();
      report_(true);
      return true;
    } catch (const db_error& e) {
      // Any failure: start from a fresh connection next time.
      conn_.reset();
      log::debug("database probe failed: ", e.what());
      // A kept connection can die on its own (wait_timeout, a proxy's idle close, a
      // restart quicker than the period) while the database answers: when it failed at
      // once, ask once more on a fresh one before calling the database lost. A silent
      // peer (a timeout) is reported at once, so the bound above still holds.
      const bool quick = std::chrono::steady_clock::now() - started < std::chrono::seconds(1);
      if (!reused || retried || !quick) {
        report_(false);
        return false;
      }
    }
  }
}

}  // namespace slotted::db
