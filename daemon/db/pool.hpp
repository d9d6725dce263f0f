#pragma once
// A fixed-size pool of connections (mysql.pool_size), connected lazily.
//
// acquire() blocks while every connection is lent out. A lease whose connection met a
// connection-lost error is marked broken and the connection is closed on return.
// Thread-safety: acquire() may be called from any thread.

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "db/connection.hpp"

namespace slotted::db {

class pool {
 public:
  class lease {
   public:
    lease(lease&& other) noexcept
        : owner_(std::exchange(other.owner_, nullptr)), conn_(std::move(other.conn_)) {}
    lease& operator=(lease&&) = delete;
    ~lease();
    connection& operator*() { return *conn_; }
    connection* operator->() { return &*conn_; }
    // Close the connection instead of returning it to the pool.
    void discard() { conn_.reset(); }

   private:
    friend class pool;
    lease(pool* owner, std::optional<connection> conn) : owner_(owner), conn_(std::move(conn)) {}
    pool* owner_;
    std::optional<connection> conn_;
  };

  pool(connect_options options, unsigned size);

  // Throws db_error when a new connection cannot be made (the slot is returned).
  lease acquire();

  const connect_options& options() const { return options_; }

 private:
  void give_back(std::optional<connection> conn);

  connect_options options_;
  std::mutex mutex_;
  std::condition_variable available_;
  std::vector<connection> idle_;
  unsigned free_slots_;
};

}  // namespace slotted::db
