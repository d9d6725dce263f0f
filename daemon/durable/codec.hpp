#pragma once
// What the record encoders and decoders share (internal to durable/): little-endian put and
// get, the record frame around a payload, the extension marks, and one decoder per
// record kind (each in the file of its kind). The decoders read a payload after its kind
// byte and change nothing but their output; replay_state applies what they read.

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "durable/record.hpp"

namespace slotted::durable::codec {

template <typename T>
void put(std::string& out, T value) {
  char buf[sizeof(T)];
  std::memcpy(buf, &value, sizeof(T));
  out.append(buf, sizeof(T));
}

class reader {
 public:
  explicit reader(std::string_view data) : data_(data) {}
  template <typename T>
  bool get(T& value) {
    if (data_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(&value, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool has(std::size_t bytes) const { return data_.size() - pos_ >= bytes; }
  // The next `bytes` bytes as a reader of their own (a tagged record's field).
  bool take(std::size_t bytes, reader& out) {
    if (!has(bytes)) return false;
    out = reader(data_.substr(pos_, bytes));
    pos_ += bytes;
    return true;
  }
  std::size_t remaining() const { return data_.size() - pos_; }
  bool done() const { return pos_ == data_.size(); }

 private:
  std::string_view data_;
  std::size_t pos_ = 0;
};

// Appends a frame's header placeholder and the kind byte; finish_record() fills the
// header once the payload is written.
inline std::size_t begin_record(std::string& out, record_kind kind) {
  const std::size_t start = wal::begin_record(out);
  out.push_back(static_cast<char>(kind));
  return start;
}
using wal::finish_record;

// The bits earlier versions borrowed to mark their bucket extensions (see record.hpp):
// read in old logs only, never written.
constexpr std::uint8_t old_keyed_with_at = 0x80;
constexpr std::uint32_t old_batch_with_buckets = 0x80000000u;
constexpr std::uint64_t old_snapshot_with_buckets = std::uint64_t{1} << 63;
// A timed_increments record's time of one increment: its `at`, or no_time.
constexpr std::int64_t no_time = -1;
// A keyed trailer's batch index of a request not yet in a batch.
constexpr std::uint32_t not_in_batch = 0xffffffff;

using logged_delta = std::pair<store::counter_key, std::int64_t>;

// Reads n (record_type, record_id, Delta) triples into `log`.
template <typename Delta>
bool read_deltas(reader& in, std::uint64_t n, std::vector<logged_delta>& log) {
  if (n > in.remaining() / (12 + sizeof(Delta))) return false;  // also no n * size overflow
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint32_t type = 0;
    std::uint64_t id = 0;
    Delta delta = 0;
    in.get(type);
    in.get(id);
    in.get(delta);
    log.push_back({{type, id}, delta});
  }
  return true;
}

// One logged increment: its counter, delta and time (no_time for none).
struct timed_delta {
  store::counter_key key;
  std::int64_t delta = 0;
  std::int64_t at = no_time;
};

struct snapshot_record {
  std::vector<store::flush_batch> batches;
  std::vector<logged_delta> deltas;               // counters' totals
  std::vector<store::pending_delta> buckets;      // bucket counts
  std::vector<idempotency::keyed_request> keyed;  // not yet in a batch
  std::vector<store::unique_entry> uniques{};     // not yet in a batch
};

// A unique_increments record: the request's other items, and its unique entries.
struct unique_increments_record {
  std::vector<timed_delta> increments;
  std::vector<store::unique_entry> uniques;
};

// The two encodings of a keyed request, and of everything that holds keyed requests, in
// kinds 1-13 (read only): `plain` as the keyed, batches and snapshot kinds (no bucket
// counts, no `at`; read with the borrowed bits of old logs), `timed` as the timed_keyed,
// bucketed_batches and bucketed_snapshot kinds (every `at` and every bucket count, in
// fields of their own). The tagged kind's fields are in the timed form.
enum class form { plain, timed };

// record_keyed.cpp
bool any_at(std::span<const ingest::increment> increments);
// In the timed form.
void put_keyed(std::string& out, const idempotency::keyed_request& r);
bool read_keyed(reader& in, idempotency::keyed_request& r, form f);
// `last`: the record ends with the trailer (else more follows: the unique kinds).
bool read_keyed_trailer(reader& in, std::vector<store::flush_batch>& batches,
                        std::vector<idempotency::keyed_request>& pending, form f, bool last = true);
std::optional<idempotency::keyed_request> decode_keyed(reader& in);
std::optional<idempotency::keyed_request> decode_timed_keyed(reader& in);

// record_batches.cpp
bool valid_granularity(std::uint8_t g);
// A batch's rows (`rows` of them), and its bucket rows with their count before them.
void put_rows(std::string& out, const store::flush_batch& b);
void put_bucket_rows(std::string& out, const store::flush_batch& b);
bool read_rows(reader& in, std::uint32_t rows, store::flush_batch& b);
bool read_bucket_rows(reader& in, store::flush_batch& b);
bool read_batches(reader& in, std::vector<store::flush_batch>& out, form f);
std::optional<std::vector<store::flush_batch>> decode_batches(reader& in);
std::optional<std::vector<store::flush_batch>> decode_bucketed_batches(reader& in);
bool decode_committed(reader& in);

// record_increments.cpp
std::optional<std::vector<timed_delta>> decode_increments(reader& in);
std::optional<std::vector<timed_delta>> decode_timed_increments(reader& in);
// The timed_increments payload, more possibly following it.
bool read_timed_increments(reader& in, std::vector<timed_delta>& out);

// record_snapshot.cpp
std::optional<snapshot_record> decode_snapshot(reader& in);
std::optional<snapshot_record> decode_bucketed_snapshot(reader& in);
// The bucketed_snapshot payload, more possibly following it (`last` false).
bool read_bucketed_snapshot(reader& in, snapshot_record& s, bool last);
// n deltas of a snapshot with buckets: granularity 0 a counter's total (into s.deltas),
// else a bucket count (into s.buckets).
bool read_deltas_with_buckets(reader& in, std::uint64_t n, snapshot_record& s);

// record_uniques.cpp
void put_unique(std::string& out, const store::unique_entry& e);
bool read_unique_entries(reader& in, std::vector<store::unique_entry>& out);
// The uniques field of kinds 12 and 13 (record.hpp) into `batches`.
bool read_uniques(reader& in, std::vector<store::flush_batch>& batches);
std::optional<unique_increments_record> decode_unique_increments(reader& in);
std::optional<std::vector<store::flush_batch>> decode_unique_batches(reader& in);
std::optional<snapshot_record> decode_unique_snapshot(reader& in);

// record_reset.cpp
std::optional<store::counter_key> decode_reset(reader& in);

// record_tagged.cpp: the tagged kind (14), the one every append_* writes.
enum class role : std::uint8_t { append = 1, cut = 2, snapshot = 3, committed = 4, reset = 5 };
struct tagged_record {
  role what = role::committed;
  std::vector<timed_delta> increments;  // append: a request's items
  snapshot_record state;                // append: keyed[0] or uniques; cut: batches; snapshot
  store::counter_key key;               // reset
};
std::optional<tagged_record> decode_tagged(reader& in);

}  // namespace slotted::durable::codec
