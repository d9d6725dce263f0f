// The reset record (see record.hpp).
#include "durable/codec.hpp"

namespace slotted::durable {

namespace codec {

std::optional<store::counter_key> decode_reset(reader& in) {
  store::counter_key key;
  if (!in.get(key.record_type) || !in.get(key.record_id) || !in.done()) return std::nullopt;
  return key;
}

}  // namespace codec

}  // namespace slotted::durable
