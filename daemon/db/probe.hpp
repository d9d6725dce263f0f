#pragma once
// Checks every `period` that the database answers, on a connection of its own (never
// one of the pool's, which a long flush or many reads may all hold), so readiness
// notices a dead database while the flusher is idle between long flush intervals.
//
// Each attempt connects if needed (through its own failover_connector: mysql.hosts are
// tried as the pool tries them, so "reachable" means some host is usable) and pings it
// (`DO 1` on MariaDB, `SELECT 1` on PostgreSQL); `report(true|false)` is called on the
// probe's thread after every attempt. A kept connection that fails at once (closed by
// the server or a proxy) is retried once on a fresh connection before reporting false.
// A statement or a connect is bounded by `period` (at least 1 s), so a silent peer
// cannot stall the probe.
// Thread-safety: start() and stop() from one owner.

#include <chrono>
#include <functional>
#include <optional>

#include "db/connection.hpp"
#include "db/pool.hpp"
#include "util/worker.hpp"

namespace slotted::db {

class probe {
 public:
  probe(connect_options options, std::chrono::milliseconds period,
        std::function<void(bool reachable)> report);
  ~probe();
  probe(const probe&) = delete;
  probe& operator=(const probe&) = delete;

  void start();
  // Stops after the attempt in progress, if any. Idempotent.
  void stop();

 private:
  bool attempt();

  failover_connector connector_;
  std::function<void(bool)> report_;
  std::optional<connection> conn_;
  bool started_ = false;
  // Last member: its thread must stop before anything it uses is destroyed.
  util::worker<bool> worker_;
};

}  // namespace slotted::db
