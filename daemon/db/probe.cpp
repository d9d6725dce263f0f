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
    : options_(bounded(std::move(options), period)),
      connector_(options_),
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
  try {
    if (!conn_) conn_.emplace(connector_.connect().conn);
    conn_->execute("DO 1");
    report_(true);
    return true;
  } catch (const db_error& e) {
    // Any failure: start from a fresh connection next time.
    conn_.reset();
    log::debug("database probe failed: ", e.what());
    report_(false);
    return false;
  }
}

}  // namespace slotted::db
