// The record frame: header encoding, checksums (see frame.hpp).
#include "wal/frame.hpp"

#include <boost/crc.hpp>
#include <cstring>

namespace slotted::wal {

std::uint32_t crc_of(std::string_view bytes) {
  boost::crc_32_type crc;
  crc.process_bytes(bytes.data(), bytes.size());
  return crc.checksum();
}

std::size_t begin_record(std::string& out) {
  const std::size_t start = out.size();
  out.append(record_header_bytes, '\0');
  return start;
}

void finish_record(std::string& out, std::size_t start) {
  const std::string_view payload(out.data() + start + record_header_bytes,
                                 out.size() - start - record_header_bytes);
  encode_header(out.data() + start, payload.size(), crc_of(payload));
}

void encode_header(char* out, std::uint64_t length, std::uint32_t payload_crc) {
  std::memcpy(out, &length, 8);
  std::memcpy(out + 8, &payload_crc, 4);
  const std::uint32_t header_crc = crc_of(std::string_view(out, 12));
  std::memcpy(out + 12, &header_crc, 4);
}

bool decode_header(const char* in, std::uint64_t& length, std::uint32_t& payload_crc) {
  std::uint32_t header_crc = 0;
  std::memcpy(&header_crc, in + 12, 4);
  if (crc_of(std::string_view(in, 12)) != header_crc) return false;
  std::memcpy(&length, in, 8);
  std::memcpy(&payload_crc, in + 8, 4);
  return true;
}

}  // namespace slotted::wal
