// Scanning a segment: record by record, telling a torn tail from corruption (see
// frame.hpp).
#include <cstring>

#include "wal/frame.hpp"

namespace slotted::wal {

namespace {

// Format 1 (no segment magic): [u32 length][u32 CRC-32 of payload]. The length is not
// covered by a checksum, so damage that reaches the end of the data counts as torn.
scan_result scan_format1(std::string_view data, const record_sink& apply) {
  constexpr std::size_t header = 8;
  scan_result r;
  std::size_t pos = 0;
  while (pos < data.size()) {
    const auto damaged = [&](std::string what, bool reaches_end) {
      r.outcome = reaches_end ? scan_result::status::torn_tail : scan_result::status::corrupt;
      r.valid_bytes = pos;
      r.problem = std::move(what);
      return r;
    };
    if (data.find_first_not_of('\0', pos) == std::string_view::npos)
      return damaged("zero-filled tail", true);
    if (data.size() - pos < header) return damaged("partial record header", true);
    std::uint32_t length = 0, crc = 0;
    std::memcpy(&length, data.data() + pos, 4);
    std::memcpy(&crc, data.data() + pos + 4, 4);
    const std::size_t end = pos + header + length;
    if (end > data.size()) return damaged("record runs past the end of the file", true);
    const std::string_view payload = data.substr(pos + header, length);
    if (crc_of(payload) != crc) return damaged("checksum mismatch", end == data.size());
    if (!apply(payload)) return damaged("malformed record", false);
    pos = end;
  }
  r.valid_bytes = pos;
  return r;
}

// The length of the whole, checksum-valid record at `pos`, or 0.
std::size_t valid_record_at(std::string_view data, std::size_t pos) {
  if (data.size() - pos < record_header_bytes) return 0;
  std::uint64_t length = 0;
  std::uint32_t crc = 0;
  // The cheap test first: most offsets hold no length that fits.
  std::memcpy(&length, data.data() + pos, 8);
  if (length == 0 || length > data.size() - pos - record_header_bytes) return 0;
  if (!decode_header(data.data() + pos, length, crc)) return 0;
  if (crc_of(data.substr(pos + record_header_bytes, length)) != crc) return 0;
  return record_header_bytes + length;
}

// Whole, valid records that start after `from` (a forward search byte by byte, then
// record by record).
std::size_t count_valid_after(std::string_view data, std::size_t from) {
  std::size_t count = 0;
  for (std::size_t pos = from + 1; pos + record_header_bytes <= data.size();) {
    if (const std::size_t n = valid_record_at(data, pos)) {
      ++count;
      pos += n;
    } else {
      ++pos;
    }
  }
  return count;
}

// The format-2 records from `pos` on.
scan_result scan_records(std::string_view data, std::size_t pos, const record_sink& apply) {
  scan_result r;
  while (pos < data.size()) {
    // `searched_from`: where whole records after the damage may start. A record whose
    // header checks out ends where its length says; a valid record inside its payload
    // (a unique entry's client can hold any bytes) is that payload, not a later append.
    const auto damaged = [&](std::string what, std::size_t searched_from) {
      r.intact_records_after = count_valid_after(data, searched_from);
      r.outcome = r.intact_records_after == 0 ? scan_result::status::torn_tail
                                              : scan_result::status::corrupt;
      // A zero-filled tail is space the file system allocated for an append that
      // never landed.
      if (r.outcome == scan_result::status::torn_tail &&
          data.find_first_not_of('\0', pos) == std::string_view::npos)
        what = "zero-filled tail";
      r.valid_bytes = pos;
      r.problem = std::move(what);
      return r;
    };
    if (data.size() - pos < record_header_bytes) return damaged("partial record header", pos);
    std::uint64_t length = 0;
    std::uint32_t crc = 0;
    if (!decode_header(data.data() + pos, length, crc))
      return damaged("header checksum mismatch", pos);
    if (length > data.size() - pos - record_header_bytes)
      return damaged("record runs past the end of the file", data.size());
    const std::size_t end = pos + record_header_bytes + length;
    const std::string_view payload = data.substr(pos + record_header_bytes, length);
    if (crc_of(payload) != crc) return damaged("checksum mismatch", end - 1);
    if (!apply(payload)) {
      // Whole and checksummed, yet unreadable: never a torn append.
      r.outcome = scan_result::status::corrupt;
      r.valid_bytes = pos;
      r.problem = "malformed record";
      r.intact_records_after = count_valid_after(data, end - 1);
      return r;
    }
    pos = end;
  }
  r.valid_bytes = pos;
  return r;
}

}  // namespace

scan_result scan_segment(std::string_view data, const record_sink& apply) {
  scan_result r;
  if (!data.starts_with(segment_magic)) {
    if (data.empty()) return r;
    // A segment created just before a crash, its magic never (wholly) written.
    if (data.size() < segment_magic.size() &&
        (segment_magic.starts_with(data) ||
         data.find_first_not_of('\0') == std::string_view::npos)) {
      r.outcome = scan_result::status::torn_tail;
      r.problem = "partial segment header";
      return r;
    }
    // A damaged magic in front of whole format-2 records: read as format 1, its first
    // bytes would be a length past the end of the file and the whole segment a "torn
    // tail". A format-1 segment has a valid format-2 header there only by a 2^-32 chance.
    if (data.size() > segment_magic.size() && valid_record_at(data, segment_magic.size()) != 0) {
      r = scan_records(data, segment_magic.size(), apply);
      r.outcome = scan_result::status::corrupt;
      if (r.problem.empty()) r.problem = "damaged segment header";
      return r;
    }
    return scan_format1(data, apply);
  }
  return scan_records(data, segment_magic.size(), apply);
}

}  // namespace slotted::wal
