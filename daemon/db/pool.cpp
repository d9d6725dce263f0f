#include "db/pool.hpp"

#include "db/errors.hpp"

namespace slotted::db {

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
  conn.require_writable();
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
  throw db_error(first->cls(), "no database host is usable: " + reasons, first->native_code());
}

pool::lease::~lease() {
  if (owner_ == nullptr) return;
  // A transaction left open (a path that ended early without its ROLLBACK) is not lent
  // again: the next START TRANSACTION would commit half of it. Closing the connection
  // makes the server roll it back.
  if (conn_ && conn_->in_transaction()) conn_.reset();
  owner_->give_back(std::move(conn_), host_);
}

pool::pool(connect_options options, unsigned size)
    : connector_(std::move(options)), size_(size), free_slots_(size) {}

pool::lease pool::acquire() {
  std::vector<idle_connection> stale;  // closed after the lock is released
  util::unique_lock lock(mutex_);
  // First come, first served: a caller that gives a connection back and asks again at
  // once (a loop of reads) queues behind those already waiting.
  const std::uint64_t ticket = next_ticket_++;
  lock.wait(available_, [&]() REQUIRES(mutex_) { return serving_ == ticket && free_slots_ > 0; });
  ++serving_;
  --free_slots_;
  // The next in line may find a slot free too.
  if (free_slots_ > 0 && serving_ != next_ticket_) available_.notify_all();
  auto idle = take_idle(stale);
  lock.unlock();
  return lend(std::move(idle));
}

std::optional<pool::lease> pool::try_acquire() {
  std::vector<idle_connection> stale;  // closed after the lock is released
  util::unique_lock lock(mutex_);
  // Never ahead of a caller waiting in acquire().
  if (free_slots_ == 0 || serving_ != next_ticket_) return std::nullopt;
  --free_slots_;
  auto idle = take_idle(stale);
  lock.unlock();
  return lend(std::move(idle));
}

std::optional<pool::idle_connection> pool::take_idle(std::vector<idle_connection>& stale) {
  const std::size_t current = connector_.current();
  while (!idle_.empty()) {
    idle_connection c = std::move(idle_.back());
    idle_.pop_back();
    if (c.host == current) return c;
    stale.push_back(std::move(c));
  }
  return std::nullopt;
}

pool::lease pool::lend(std::optional<idle_connection> idle) {
  if (idle) return lease(this, std::move(idle->conn), idle->host);
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
    util::lock_guard lock(mutex_);
    if (conn) idle_.push_back({std::move(*conn), host});
    ++free_slots_;
  }
  // All: notify_one could wake a waiter whose turn it is not.
  available_.notify_all();
}

}  // namespace slotted::db
