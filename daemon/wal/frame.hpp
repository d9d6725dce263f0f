#pragma once
// The write-ahead log's bytes: segments, the record frame, checksums, scanning. What a
// record's payload means is durable/'s (durable/record.hpp); this layer sees only bytes,
// as LevelDB's log::Writer and log::Reader do.
//
// A segment starts with the 8-byte segment_magic, then records. A record is
// [u64 payload length][u32 CRC-32 of payload][u32 CRC-32 of the 12 bytes before][payload],
// little endian. The header has its own checksum so that a damaged length is recognised
// as damage rather than taken for a record that runs past the end of the file (a torn
// tail), and the length is 64 bits so that no snapshot outgrows it. Segments written
// before the magic existed (format 1: [u32 length][u32 CRC-32 of payload]) are still
// read.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace slotted::wal {

constexpr std::size_t record_header_bytes = 16;
// The first bytes of every segment this version writes.
constexpr std::string_view segment_magic{"SCWAL02\n", 8};

std::uint32_t crc_of(std::string_view bytes);

// Appends a header placeholder; the payload follows it in `out`, and finish_record()
// fills the header once it is written.
std::size_t begin_record(std::string& out);
void finish_record(std::string& out, std::size_t start);

// Encodes / decodes a format-2 record header; exposed for tests. decode_header() is
// false when the header's own checksum does not match.
void encode_header(char* out, std::uint64_t length, std::uint32_t payload_crc);
bool decode_header(const char* in, std::uint64_t& length, std::uint32_t& payload_crc);

struct scan_result {
  enum class status { ok, torn_tail, corrupt } outcome = status::ok;
  std::size_t valid_bytes = 0;  // records before this offset are whole and valid
  std::string problem;          // for torn_tail and corrupt
  // For corrupt: whole, valid records found after the damage (not applied).
  std::size_t intact_records_after = 0;
};

// Takes one whole, checksum-valid record's payload; false when its content does not
// parse (a malformed record), having changed nothing.
using record_sink = std::function<bool(std::string_view payload)>;

// Walks the records of one segment, handing each payload to `apply` and stopping at the
// first damaged one. Damage is a torn tail (an interrupted append) only when no valid
// record follows it: appends are sequential, so nothing written after a torn append can
// be intact. "Follows" means past the end that the damaged record's header gives it when
// that header's checksum holds (bytes inside a payload that happen to form a record are
// that payload), and anywhere after its first byte when it does not. Anything else (a flipped bit
// in a length or a payload with valid records after it, or a record whose checksums hold but that
// `apply` refuses) is corruption. Whether a torn tail is acceptable (last segment only) is the
// caller's decision.
scan_result scan_segment(std::string_view data, const record_sink& apply);

}  // namespace slotted::wal
