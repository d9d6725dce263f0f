#pragma once

#include <cstdint>
#include <string>

namespace slotted::ingest {

// What an increment's fields may hold (README: HTTP API), checked wherever one enters:
// the body parser, GET /v1/counters/{type}/{id}, counters[].record_type in the config.
// db::verify_schema may narrow the first two to what the counters table's columns hold.
//
// record_type: a non-negative signed 32-bit INT, the column type of the seed table.
inline constexpr std::uint32_t max_record_type = 2147483647;  // INT32_MAX
// record_id: anything a BIGINT UNSIGNED holds.
inline constexpr std::uint64_t max_record_id = 18446744073709551615ull;  // UINT64_MAX
// delta: a signed 32-bit value per item, so that no one item comes near the bound on a
// counter's pending sum (2^62, store/pending_store.cpp).
inline constexpr std::int32_t min_delta = -2147483647 - 1;  // INT32_MIN
inline constexpr std::int32_t max_delta = 2147483647;       // INT32_MAX
// at: unix seconds, 0 up to the end of year 9999 (what a DATETIME holds).
inline constexpr std::int64_t max_at = 253402300799;
// How far past the receive time an `at` may be, for a counter with buckets: clocks
// disagree by seconds, not by more.
inline constexpr std::int64_t max_at_ahead_seconds = 300;
// The same bounds as error messages print them.
inline constexpr const char* record_type_range = "[0, 2147483647]";
inline constexpr const char* record_id_range = "[0, 18446744073709551615]";
inline constexpr const char* delta_range = "[-2147483648, 2147483647]";
inline constexpr const char* at_range = "[0, 253402300799]";

// One validated event: add `delta` to counter (record_type, record_id).
struct increment {
  std::uint32_t record_type = 0;  // 0..max_record_type
  std::uint64_t record_id = 0;
  std::int32_t delta = 1;
  // When the event happened, unix seconds: as the client sent it (`at_given`), else the
  // time the daemon received it (set by resolve_times, before anything is applied).
  // Only counters with buckets use it.
  bool at_given = false;
  std::int64_t at = 0;
  // Whether `at` holds a time. Not when the counter had no buckets on arrival
  // (resolve_times left it 0) and the increment comes back from the WAL after its
  // counter gained some: it was never in a bucket, and is not counted in 1970's.
  bool has_time() const { return at_given || at != 0; }
  // `client` (README: HTTP API): 1 to 128 bytes when given, for a counter with
  // counters[].dedupe; empty: the item counts as every item does.
  std::string client{};
};

}  // namespace slotted::ingest
