#pragma once

#include <cstdint>

namespace slotted::ingest {

// One validated event: add `delta` to counter (record_type, record_id).
struct increment {
  std::uint32_t record_type = 0;  // 0..2147483647
  std::uint64_t record_id = 0;
  std::int32_t delta = 1;
};

}  // namespace slotted::ingest
