#pragma once
// The largest record_type and record_id the counters table can store, learnt when the
// flusher verifies the schema (an existing seed-style table has INT columns). Until
// then the API's own ranges apply. Increments beyond them are refused at ingest (400)
// rather than acknowledged and then refused by the database.
//
// Thread-safety: set() from the flusher, check() from any HTTP thread.

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "model/increment.hpp"

namespace slotted::ingest {

class table_limits {
 public:
  void set(std::uint64_t max_record_type, std::uint64_t max_record_id) {
    max_record_type_.store(max_record_type, std::memory_order_relaxed);
    max_record_id_.store(max_record_id, std::memory_order_relaxed);
  }

  struct violation {
    std::size_t index;
    std::string message;
  };

  std::optional<violation> check(std::span<const increment> increments) const {
    const auto max_type = max_record_type_.load(std::memory_order_relaxed);
    const auto max_id = max_record_id_.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < increments.size(); ++i) {
      if (increments[i].record_id > max_id) {
        return violation{i, "record_id " + std::to_string(increments[i].record_id) +
                                " does not fit the counters table's record_id column (at most " +
                                std::to_string(max_id) + ")"};
      }
      if (increments[i].record_type > max_type) {
        return violation{i, "record_type " + std::to_string(increments[i].record_type) +
                                " does not fit the counters table's record_type column (at most " +
                                std::to_string(max_type) + ")"};
      }
    }
    return std::nullopt;
  }

 private:
  std::atomic<std::uint64_t> max_record_type_{ingest::max_record_type};
  std::atomic<std::uint64_t> max_record_id_{ingest::max_record_id};
};

}  // namespace slotted::ingest
