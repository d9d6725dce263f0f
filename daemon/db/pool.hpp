#pragma once
// Connections to the database: a failover connector that picks the host (mysql.hosts),
// and a fixed-size pool of connections (mysql.pool_size), connected lazily through it.
//
// Failover: the connector connects to the current host while it answers and is ready;
// when it is not, it tries the next hosts in order (wrapping around) and the first one
// that answers becomes current. An earlier host is not tried again while the current
// one works, so the daemon does not flap between hosts. "Ready" means, on a Galera
// node, wsrep_ready=ON and wsrep_local_state=4 (Synced): a node that is joining,
// donating or cut off from the primary component counts as unreachable. A connection
// that fails mid-batch leaves the batch in doubt; the flusher resolves it against the
// ledger through whichever host it reaches next (the ledger lives in the cluster).
//
// acquire() blocks while every connection is lent out, and serves its callers in the
// order they came (a fair queue: a loop of reads that gives its connection back and asks
// again at once cannot starve the flusher waiting for one, which must resolve a batch in
// doubt before the reads stop waiting on it); try_acquire() does not wait for one to
// come back, nor take one ahead of a caller waiting in acquire() (opening a new one may
// still take connect_timeout per host tried).
// A lease whose connection met a connection-lost error is discarded and the connection
// is closed; idle connections to a host that is no longer current are closed instead
// of being lent out.
// Thread-safety: connect(), acquire() and try_acquire() may be called from any thread.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "db/connection.hpp"
#include "db/errors.hpp"
#include "util/thread_annotations.hpp"

namespace slotted::db {

class failover_connector {
 public:
  // options.hosts empty: the one server of host/port (or socket).
  explicit failover_connector(connect_options options);

  struct connected {
    connection conn;
    std::size_t host;  // index into host_names()
  };
  // Throws db_error when no host answers: the current host's error (its code and
  // fatality), with every host's reason in the message.
  connected connect();

  // "host:port" for each server (the socket path for a unix socket), in order.
  const std::vector<std::string>& host_names() const { return names_; }
  std::size_t current() const { return current_.load(); }
  // Called with the host's index when a connection succeeds on a host other than the
  // previous one (and at the first success). Set before any connect().
  void on_host_change(std::function<void(std::size_t)> f) { on_change_ = std::move(f); }

 private:
  connection connect_to(std::size_t index);

  connect_options options_;
  std::vector<std::string> names_;
  std::atomic<std::size_t> current_{0};
  std::atomic<std::size_t> announced_{SIZE_MAX};
  std::function<void(std::size_t)> on_change_;
};

class pool {
 public:
  class lease {
   public:
    lease(lease&& other) noexcept
        : owner_(std::exchange(other.owner_, nullptr)),
          conn_(std::move(other.conn_)),
          host_(other.host_) {}
    lease& operator=(lease&&) = delete;
    ~lease();
    connection& operator*() { return *conn_; }
    connection* operator->() { return &*conn_; }
    // Close the connection instead of returning it to the pool.
    void discard() { conn_.reset(); }
    // Runs `work(connection&)` on the lease's connection and returns what it returns. A
    // db_error from it is rethrown, the connection discarded first when it was lost.
    template <typename Work>
    decltype(auto) use(Work&& work) {
      try {
        return work(*conn_);
      } catch (const db_error& e) {
        if (e.connection_lost()) discard();
        throw;
      }
    }

   private:
    friend class pool;
    lease(pool* owner, std::optional<connection> conn, std::size_t host)
        : owner_(owner), conn_(std::move(conn)), host_(host) {}
    pool* owner_;
    std::optional<connection> conn_;
    std::size_t host_;
  };

  pool(connect_options options, unsigned size);

  // Throws db_error when a new connection cannot be made (the slot is returned).
  lease acquire();
  // As acquire(), but nullopt at once when every connection is lent out, instead of
  // waiting for one to come back. Throws db_error as acquire() does.
  std::optional<lease> try_acquire();

  failover_connector& connector() { return connector_; }
  // The number of connections it lends at most (mysql.pool_size).
  unsigned size() const { return size_; }

 private:
  struct idle_connection {
    connection conn;
    std::size_t host;
  };
  void give_back(std::optional<connection> conn, std::size_t host) EXCLUDES(mutex_);
  // With a slot taken: takes the idle connections out, and returns the one to the
  // current host, if any; the others go to `stale`, for the caller to close once it has
  // released mutex_.
  std::optional<idle_connection> take_idle(std::vector<idle_connection>& stale) REQUIRES(mutex_);
  // With a slot taken, mutex_ released: `idle` lent, else a new connection. Returns the
  // slot when connecting throws.
  lease lend(std::optional<idle_connection> idle) EXCLUDES(mutex_);

  failover_connector connector_;
  util::mutex mutex_;
  std::condition_variable available_;
  std::vector<idle_connection> idle_ GUARDED_BY(mutex_);
  unsigned size_;
  unsigned free_slots_ GUARDED_BY(mutex_);
  // acquire()'s queue: the next caller's ticket, and the ticket whose turn it is.
  std::uint64_t next_ticket_ GUARDED_BY(mutex_) = 0;
  std::uint64_t serving_ GUARDED_BY(mutex_) = 0;
};

}  // namespace slotted::db
