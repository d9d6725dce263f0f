#include "db/pool.hpp"

namespace slotted::db {

pool::lease::~lease() {
  if (owner_ != nullptr) owner_->give_back(std::move(conn_));
}

pool::pool(connect_options options, unsigned size)
    : options_(std::move(options)), free_slots_(size) {}

pool::lease pool::acquire() {
  {
    std::unique_lock lock(mutex_);
    available_.wait(lock, [&] { return free_slots_ > 0; });
    --free_slots_;
    if (!idle_.empty()) {
      connection conn = std::move(idle_.back());
      idle_.pop_back();
      return lease(this, std::move(conn));
    }
  }
  // Connect outside the lock: it may take up to connect_timeout.
  try {
    return lease(this, connection(options_));
  } catch (...) {
    give_back(std::nullopt);
    throw;
  }
}

void pool::give_back(std::optional<connection> conn) {
  {
    std::lock_guard lock(mutex_);
    if (conn) idle_.push_back(std::move(*conn));
    ++free_slots_;
  }
  available_.notify_one();
}

}  // namespace slotted::db
