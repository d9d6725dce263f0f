#pragma once
// Tests' access to a flush batch's content (model/batch.hpp): copies to compare and
// count, and the content of one kind to fill (a plain batch takes the kind asked for).

#include <cstdint>
#include <variant>
#include <vector>

#include "model/batch.hpp"

namespace slotted::test {

inline std::vector<idempotency::keyed_request> requests_of(const store::flush_batch& b) {
  const auto requests = store::keyed_requests(b);
  return {requests.begin(), requests.end()};
}
inline std::vector<store::unique_entry> uniques_of(const store::flush_batch& b) {
  const auto* u = store::unique_of(b);
  return u != nullptr ? u->entries : std::vector<store::unique_entry>{};
}
inline std::uint16_t unique_slot_of(const store::flush_batch& b) {
  const auto* u = store::unique_of(b);
  return u != nullptr ? u->slot : 0;
}

inline std::vector<idempotency::keyed_request>& requests_in(store::flush_batch& b) {
  if (std::holds_alternative<store::plain_content>(b.content)) b.content = store::keyed_content{};
  return std::get<store::keyed_content>(b.content).requests;
}
inline store::unique_content& unique_in(store::flush_batch& b) {
  if (std::holds_alternative<store::plain_content>(b.content)) b.content = store::unique_content{};
  return std::get<store::unique_content>(b.content);
}

}  // namespace slotted::test
