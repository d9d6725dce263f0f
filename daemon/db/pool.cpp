#include "db/pool.hpp"

#include <mysqld_error.h>

#include "db/errors.hpp"

namespace slotted::db {

void require_ready_node(connection& conn) {
  // wsrep_local_state exists only while a Galera provider is loaded; a plain MariaDB
  // reports wsrep_ready OFF, so that alone does not tell a node from a plain server.
  const auto rows = conn.query(
      "SHOW GLOBAL STATUS WHERE Variable_name IN "
      "('wsrep_ready', 'wsrep_local_state', 'wsrep_local_state_comment')");
  std::string ready, state, comment;
  for (const auto& row : rows) {
    if (row.size() < 2 || !row[0] || !row[1]) continue;
    if (*row[0] == "wsrep_ready") ready = *row[1];
    if (*row[0] == "wsrep_local_state") state = *row[1];
    if (*row[0] == "wsrep_local_state_comment") comment = *row[1];
  }
  if (state.empty()) return;  // not a Galera node
  if (ready != "ON" || state != "4") {
    throw db_error(ER_UNKNOWN_COM_ERROR, "the Galera node is not ready (wsrep_ready=" + ready +
                                             ", wsrep_local_state=" + state + " " + comment +
                                             "); treated as unreachable");
  }
  conn.execute("SET SESSION wsrep_sync_wait = 1");
}

failover_connector::failover_connector(connect_options options) : options_(std::move(options)) {
  if (!options_.socket.empty()) {
    options_.hosts.clear();
    names_.push_back(options_.socket);
  } else {
    if (options_.hosts.empty()) options_.hosts.push_back({options_.host, options_.port});
    for (const auto& h : options_.hosts) names_.push_back(h.name());
  }
}

connection failover_connector::connect_to(std::size_t index) {
  connect_options o = options_;
  if (o.socket.empty()) {
    o.host = options_.hosts[index].host;
    o.port = options_.hosts[index].port;
  }
  connection conn(o);
  require_ready_node(conn);
  return conn;
}

failover_connector::connected failover_connector::connect() {
  const std::size_t start = current_.load();
  const std::size_t n = names_.size();
  std::optional<db_error> first;
  std::string reasons;
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = (start + k) % n;
    try {
      connection conn = connect_to(i);
      // Only this caller's starting point is replaced: a concurrent connect that
      // already moved on wins, so two threads cannot move the daemon back and forth.
      std::size_t expected = start;
      if (i != start) current_.compare_exchange_strong(expected, i);
      if (announced_.exchange(current_.load()) != current_.load() && on_change_)
        on_change_(current_.load());
      return {std::move(conn), i};
    } catch (const db_error& e) {
      if (n == 1) throw;
      if (!first) first.emplace(e);
      reasons += (reasons.empty() ? "" : "; ") + names_[i] + ": " + e.what();
    }
  }
  throw db_error(first->code(), "no database host is usable: " + reasons, first->fatal());
}

pool::lease::~lease() {
  if (owner_ != nullptr) owner_->give_back(std::move(conn_), host_);
}

pool::pool(connect_options options, unsigned size)
    : options_(options), connector_(std::move(options)), free_slots_(size) {}

pool::lease pool::acquire() {
  std::vector<idle_connection> stale;  // closed outside the lock
  {
    std::unique_lock lock(mutex_);
    available_.wait(lock, [&] { return free_slots_ > 0; });
    --free_slots_;
    const std::size_t current = connector_.current();
    while (!idle_.empty()) {
      idle_connection c = std::move(idle_.back());
      idle_.pop_back();
      if (c.host == current) return lease(this, std::move(c.conn), c.host);
      stale.push_back(std::move(c));
    }
  }
  // Connect outside the lock: it may take up to connect_timeout per host tried.
  try {
    auto c = connector_.connect();
    return lease(this, std::move(c.conn), c.host);
  } catch (...) {
    give_back(std::nullopt, 0);
    throw;
  }
}

void pool::give_back(std::optional<connection> conn, std::size_t host) {
  {
    std::lock_guard lock(mutex_);
    if (conn) idle_.push_back({std::move(*conn), host});
    ++free_slots_;
  }
  available_.notify_one();
}

}  // namespace slotted::db
