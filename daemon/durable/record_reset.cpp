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

void append_reset(std::string& out, const store::counter_key& key) {
  const std::size_t start = codec::begin_record(out, record_kind::reset);
  codec::put<std::uint32_t>(out, key.record_type);
  codec::put<std::uint64_t>(out, key.record_id);
  codec::finish_record(out, start);
}

}  // namespace slotted::durable
