#include "wal/record.hpp"

#include <algorithm>
#include <boost/crc.hpp>
#include <boost/unordered/unordered_flat_map.hpp>
#include <cstring>
#include <map>
#include <stdexcept>
#include <tuple>

namespace slotted::wal {

namespace {

template <typename T>
void put(std::string& out, T value) {
  char buf[sizeof(T)];
  std::memcpy(buf, &value, sizeof(T));
  out.append(buf, sizeof(T));
}

std::uint32_t crc_of(std::string_view payload) {
  boost::crc_32_type crc;
  crc.process_bytes(payload.data(), payload.size());
  return crc.checksum();
}

// Appends a header placeholder; finish_record() fills it once the payload is written.
std::size_t begin_record(std::string& out, record_kind kind) {
  const std::size_t start = out.size();
  out.append(record_header_bytes, '\0');
  out.push_back(static_cast<char>(kind));
  return start;
}

void finish_record(std::string& out, std::size_t start) {
  const std::string_view payload(out.data() + start + record_header_bytes,
                                 out.size() - start - record_header_bytes);
  encode_header(out.data() + start, payload.size(), crc_of(payload));
}

// The marks of the bucket extensions (see record.hpp).
constexpr std::uint8_t keyed_with_at = 0x80;
constexpr std::uint32_t batch_with_buckets = 0x80000000u;
constexpr std::uint64_t snapshot_with_buckets = std::uint64_t{1} << 63;

void put_batches(std::string& out, std::span<const store::flush_batch> batches) {
  put<std::uint32_t>(out, static_cast<std::uint32_t>(batches.size()));
  for (const auto& b : batches) {
    put<std::uint64_t>(out, b.run_id);
    put<std::uint64_t>(out, b.seq);
    const std::uint32_t flag = b.bucket_rows.empty() ? 0 : batch_with_buckets;
    put<std::uint32_t>(out, static_cast<std::uint32_t>(b.rows.size()) | flag);
    for (const auto& r : b.rows) {
      put<std::uint32_t>(out, r.record_type);
      put<std::uint64_t>(out, r.record_id);
      put<std::uint16_t>(out, r.slot);
      put<std::int64_t>(out, r.delta);
    }
    if (flag == 0) continue;
    put<std::uint32_t>(out, static_cast<std::uint32_t>(b.bucket_rows.size()));
    for (const auto& r : b.bucket_rows) {
      put<std::uint32_t>(out, r.record_type);
      put<std::uint64_t>(out, r.record_id);
      put<std::uint8_t>(out, static_cast<std::uint8_t>(r.gran));
      put<std::int64_t>(out, r.bucket);
      put<std::uint16_t>(out, r.slot);
      put<std::int64_t>(out, r.delta);
    }
  }
}

// Whether any of `increments` carries a time to log (see record.hpp).
bool any_at(std::span<const ingest::increment> increments) {
  return std::any_of(increments.begin(), increments.end(),
                     [](const ingest::increment& inc) { return inc.has_time(); });
}

// A timed_increments record's time of one increment: its `at`, or no_time.
constexpr std::int64_t no_time = -1;

void put_keyed(std::string& out, const idempotency::keyed_request& r) {
  const bool with_at = any_at(r.increments);
  // The length's top bit is the `at` mark, so a length of 128 (the longest key) is
  // written as 0, which no key has. (128 itself was the mark alone: "empty key".)
  const std::size_t length = r.key.size() == idempotency::max_key_length ? 0 : r.key.size();
  put<std::uint8_t>(out, static_cast<std::uint8_t>(length | (with_at ? keyed_with_at : 0)));
  out += r.key;
  put<std::uint64_t>(out, r.hash[0]);
  put<std::uint64_t>(out, r.hash[1]);
  put<std::int64_t>(out, r.received_ms);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(r.increments.size()));
  for (const auto& inc : r.increments) {
    put<std::uint32_t>(out, inc.record_type);
    put<std::uint64_t>(out, inc.record_id);
    put<std::int32_t>(out, inc.delta);
    if (with_at) put<std::int64_t>(out, inc.at_given ? -inc.at - 1 : inc.at);
  }
}

// A logged time: >= 0 the receive time, < 0 a time the client sent (-at - 1), which
// the body hash covers (see idempotency::hash_of).
void set_logged_at(ingest::increment& inc, std::int64_t logged) {
  inc.at_given = logged < 0;
  inc.at = logged < 0 ? -(logged + 1) : logged;
}

constexpr std::uint32_t not_in_batch = 0xffffffff;

// The keyed requests of a batches or snapshot record: those of `batches`, then `pending`.
void put_keyed_trailer(std::string& out, std::span<const store::flush_batch> batches,
                       std::span<const idempotency::keyed_request> pending) {
  std::uint32_t m = static_cast<std::uint32_t>(pending.size());
  for (const auto& b : batches) m += static_cast<std::uint32_t>(b.keyed.size());
  if (m == 0) return;  // as earlier versions wrote it
  put<std::uint32_t>(out, m);
  for (std::size_t i = 0; i < batches.size(); ++i) {
    for (const auto& r : batches[i].keyed) {
      put<std::uint32_t>(out, static_cast<std::uint32_t>(i));
      put_keyed(out, r);
    }
  }
  for (const auto& r : pending) {
    put<std::uint32_t>(out, not_in_batch);
    put_keyed(out, r);
  }
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
  std::size_t remaining() const { return data_.size() - pos_; }
  bool done() const { return pos_ == data_.size(); }

 private:
  std::string_view data_;
  std::size_t pos_ = 0;
};

bool read_keyed(reader& in, idempotency::keyed_request& r) {
  std::uint8_t len = 0;
  std::uint32_t n = 0;
  if (!in.get(len)) return false;
  const bool with_at = (len & keyed_with_at) != 0;
  len &= static_cast<std::uint8_t>(~keyed_with_at);
  const std::size_t length = len == 0 ? idempotency::max_key_length : len;
  if (!in.has(length)) return false;
  r.key.resize(length);
  for (auto& c : r.key) in.get(c);
  if (!idempotency::valid_key(r.key)) return false;
  if (!in.get(r.hash[0]) || !in.get(r.hash[1]) || !in.get(r.received_ms) || !in.get(n) ||
      n > in.remaining() / 16)
    return false;
  r.increments.resize(n);
  for (auto& inc : r.increments) {
    if (!in.get(inc.record_type) || !in.get(inc.record_id) || !in.get(inc.delta)) return false;
    if (with_at) {
      std::int64_t at = 0;
      if (!in.get(at)) return false;
      set_logged_at(inc, at);
    }
  }
  return true;
}

bool valid_granularity(std::uint8_t g) {
  return g == static_cast<std::uint8_t>(store::granularity::hour) ||
         g == static_cast<std::uint8_t>(store::granularity::day);
}

// Reads a keyed trailer (nothing when the record ends here) into `batches` and `pending`.
bool read_keyed_trailer(reader& in, std::vector<store::flush_batch>& batches,
                        std::vector<idempotency::keyed_request>& pending) {
  if (in.done()) return true;
  std::uint32_t m = 0;
  if (!in.get(m) || m == 0) return false;
  for (std::uint32_t i = 0; i < m; ++i) {
    std::uint32_t index = 0;
    idempotency::keyed_request r;
    if (!in.get(index) || !read_keyed(in, r)) return false;
    if (index == not_in_batch) {
      pending.push_back(std::move(r));
    } else if (index < batches.size()) {
      batches[index].keyed.push_back(std::move(r));
    } else {
      return false;
    }
  }
  return in.done();
}

bool read_batches(reader& in, std::vector<store::flush_batch>& out) {
  std::uint32_t n = 0;
  if (!in.get(n)) return false;
  for (std::uint32_t i = 0; i < n; ++i) {
    store::flush_batch b;
    std::uint32_t rows = 0;
    if (!in.get(b.run_id) || !in.get(b.seq) || !in.get(rows)) return false;
    const bool with_buckets = (rows & batch_with_buckets) != 0;
    rows &= ~batch_with_buckets;
    if (!in.has(std::size_t{rows} * 22)) return false;
    b.rows.resize(rows);
    for (auto& r : b.rows) {
      if (!in.get(r.record_type) || !in.get(r.record_id) || !in.get(r.slot) || !in.get(r.delta))
        return false;
    }
    if (with_buckets) {
      std::uint32_t k = 0;
      if (!in.get(k) || !in.has(std::size_t{k} * 31)) return false;
      b.bucket_rows.resize(k);
      for (auto& r : b.bucket_rows) {
        std::uint8_t g = 0;
        if (!in.get(r.record_type) || !in.get(r.record_id) || !in.get(g) || !valid_granularity(g) ||
            !in.get(r.bucket) || !in.get(r.slot) || !in.get(r.delta))
          return false;
        r.gran = static_cast<store::granularity>(g);
      }
    }
    out.push_back(std::move(b));
  }
  return true;
}

// Reads n (record_type, record_id, Delta) triples into `log`.
template <typename Delta>
bool read_deltas(reader& in, std::uint64_t n,
                 std::vector<std::pair<store::counter_key, std::int64_t>>& log) {
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
}  // namespace

void append_increments(std::string& out, std::span<const ingest::increment> increments) {
  // With a time: a record kind of its own, whose encoding tells "no time" from `at: 0`.
  const bool timed = any_at(increments);
  const std::size_t start =
      begin_record(out, timed ? record_kind::timed_increments : record_kind::increments);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(increments.size()));
  for (const auto& inc : increments) {
    put<std::uint32_t>(out, inc.record_type);
    put<std::uint64_t>(out, inc.record_id);
    put<std::int32_t>(out, inc.delta);
    if (timed) put<std::int64_t>(out, inc.has_time() ? inc.at : no_time);
  }
  finish_record(out, start);
}

void append_batches(std::string& out, std::span<const store::flush_batch> batches) {
  const std::size_t start = begin_record(out, record_kind::batches);
  put_batches(out, batches);
  put_keyed_trailer(out, batches, {});
  finish_record(out, start);
}

void append_keyed(std::string& out, const idempotency::keyed_request& request) {
  const std::size_t start = begin_record(out, record_kind::keyed);
  put_keyed(out, request);
  finish_record(out, start);
}

void append_snapshot(std::string& out, std::span<const store::flush_batch> batches,
                     std::span<const store::pending_delta> deltas,
                     std::span<const idempotency::keyed_request> keyed) {
  const std::size_t start = begin_record(out, record_kind::snapshot);
  put_batches(out, batches);
  const bool with_buckets = std::any_of(deltas.begin(), deltas.end(), [](const auto& d) {
    return d.gran != store::granularity::none;
  });
  put<std::uint64_t>(out, deltas.size() | (with_buckets ? snapshot_with_buckets : 0));
  for (const auto& d : deltas) {
    put<std::uint32_t>(out, d.key.record_type);
    put<std::uint64_t>(out, d.key.record_id);
    put<std::int64_t>(out, d.delta);
    if (with_buckets) {
      put<std::uint8_t>(out, static_cast<std::uint8_t>(d.gran));
      put<std::int64_t>(out, d.bucket);
    }
  }
  put_keyed_trailer(out, batches, keyed);
  finish_record(out, start);
}

void append_committed(std::string& out) {
  const std::size_t start = begin_record(out, record_kind::committed);
  finish_record(out, start);
}

void append_reset(std::string& out, const store::counter_key& key) {
  const std::size_t start = begin_record(out, record_kind::reset);
  put<std::uint32_t>(out, key.record_type);
  put<std::uint64_t>(out, key.record_id);
  finish_record(out, start);
}

bool replay_state::apply(std::string_view payload) {
  // A malformed record changes nothing: a salvage keeps exactly the records before it.
  if (payload.empty()) return false;
  reader in(payload.substr(1));
  switch (static_cast<record_kind>(payload[0])) {
    case record_kind::increments: {
      std::uint32_t n = 0;
      std::vector<std::pair<store::counter_key, std::int64_t>> read;
      if (!in.get(n) || !read_deltas<std::int32_t>(in, n, read)) return false;
      std::vector<store::pending_delta> buckets;
      if (!in.done()) {
        // Their times (see record.hpp): counted in the buckets of their counters.
        if (in.remaining() != std::size_t{n} * 8) return false;
        for (const auto& [key, delta] : read) {
          std::int64_t at = 0;
          in.get(at);
          // 0: no time (its counter had no buckets when it was logged). This encoding
          // cannot tell `at: 0` from that; timed_increments records can.
          if (at > 0) count_in_buckets(key, delta, at, buckets);
        }
      }
      delta_log_.insert(delta_log_.end(), read.begin(), read.end());
      bucket_log_.insert(bucket_log_.end(), buckets.begin(), buckets.end());
      return true;
    }
    case record_kind::timed_increments: {
      std::uint32_t n = 0;
      if (!in.get(n) || n > in.remaining() / 24) return false;
      std::vector<std::pair<store::counter_key, std::int64_t>> read;
      std::vector<store::pending_delta> buckets;
      read.reserve(n);
      for (std::uint32_t i = 0; i < n; ++i) {
        store::counter_key key;
        std::int32_t delta = 0;
        std::int64_t at = 0;
        in.get(key.record_type);
        in.get(key.record_id);
        in.get(delta);
        in.get(at);
        if (at < no_time || at > ingest::max_at) return false;
        read.push_back({key, delta});
        if (at != no_time) count_in_buckets(key, delta, at, buckets);
      }
      if (!in.done()) return false;
      delta_log_.insert(delta_log_.end(), read.begin(), read.end());
      bucket_log_.insert(bucket_log_.end(), buckets.begin(), buckets.end());
      return true;
    }
    case record_kind::keyed: {
      idempotency::keyed_request r;
      if (!read_keyed(in, r) || !in.done()) return false;
      keyed_.push_back(std::move(r));
      return true;
    }
    case record_kind::batches: {
      std::vector<store::flush_batch> logged;
      std::vector<idempotency::keyed_request> none;
      if (!read_batches(in, logged) || !read_keyed_trailer(in, logged, none) || !none.empty())
        return false;
      // Everything logged so far is in these batches now.
      delta_log_.clear();
      bucket_log_.clear();
      keyed_.clear();
      for (auto& b : logged) batches_.push_back(std::move(b));
      return true;
    }
    case record_kind::committed:
      batches_.clear();
      return in.done();
    case record_kind::reset: {
      store::counter_key key;
      if (!in.get(key.record_type) || !in.get(key.record_id) || !in.done()) return false;
      // What the store held for it was dropped when this was logged: what was logged
      // for it since the last batches or snapshot record. Batches logged before had all
      // committed (a reset writes the queue first), and keyed requests stay whole.
      std::erase_if(delta_log_, [&](const auto& entry) { return entry.first == key; });
      // Its buckets with it, as the store drops them (pending_store::drop).
      std::erase_if(bucket_log_, [&](const auto& d) { return d.key == key; });
      return true;
    }
    case record_kind::snapshot: {
      std::vector<store::flush_batch> logged;
      std::vector<std::pair<store::counter_key, std::int64_t>> read;
      std::vector<store::pending_delta> buckets;
      std::uint64_t n = 0;
      std::vector<idempotency::keyed_request> keyed;
      if (!read_batches(in, logged) || !in.get(n)) return false;
      if ((n & snapshot_with_buckets) != 0) {
        n &= ~snapshot_with_buckets;
        if (n > in.remaining() / 29) return false;
        for (std::uint64_t i = 0; i < n; ++i) {
          store::pending_delta d;
          std::uint8_t g = 0;
          in.get(d.key.record_type);
          in.get(d.key.record_id);
          in.get(d.delta);
          in.get(g);
          in.get(d.bucket);
          if (g == 0) {
            read.push_back({d.key, d.delta});
          } else if (valid_granularity(g)) {
            d.gran = static_cast<store::granularity>(g);
            buckets.push_back(d);
          } else {
            return false;
          }
        }
      } else if (!read_deltas<std::int64_t>(in, n, read)) {
        return false;
      }
      if (!read_keyed_trailer(in, logged, keyed)) return false;
      delta_log_ = std::move(read);
      bucket_log_ = std::move(buckets);
      batches_ = std::move(logged);
      keyed_ = std::move(keyed);
      return true;
    }
  }
  return false;
}

void replay_state::count_in_buckets(const store::counter_key& key, std::int64_t delta,
                                    std::int64_t at, std::vector<store::pending_delta>& out) const {
  const auto* c = buckets_.find(key.record_type);
  if (c == nullptr) return;
  for (const auto g : store::all_granularities) {
    if (c->keeps(g)) out.push_back({key, delta, g, store::bucket_start(g, at)});
  }
}

std::vector<store::pending_delta> replay_state::deltas() const {
  boost::unordered_flat_map<store::counter_key, std::int64_t, key_hash> sums;
  for (const auto& [key, delta] : delta_log_) {
    auto& sum = sums[key];
    if (__builtin_add_overflow(sum, delta, &sum)) {
      throw std::overflow_error("the logged deltas of counter (" + std::to_string(key.record_type) +
                                ", " + std::to_string(key.record_id) +
                                ") sum past the 64-bit range");
    }
  }
  std::vector<store::pending_delta> out;
  out.reserve(sums.size());
  for (const auto& [key, delta] : sums) {
    if (delta != 0) out.push_back({key, delta});
  }
  // Bucket counts, summed per bucket (a bucket's sum is bounded as a total's is; past
  // int64 the log is corrupt, as above).
  std::map<std::tuple<store::counter_key, store::granularity, std::int64_t>, std::int64_t> buckets;
  for (const auto& d : bucket_log_) {
    auto& sum = buckets[{d.key, d.gran, d.bucket}];
    if (__builtin_add_overflow(sum, d.delta, &sum)) {
      throw std::overflow_error("the logged bucket counts of counter (" +
                                std::to_string(d.key.record_type) + ", " +
                                std::to_string(d.key.record_id) + ") sum past the 64-bit range");
    }
  }
  for (const auto& [k, delta] : buckets) {
    const auto& [key, g, bucket] = k;
    if (delta != 0) out.push_back({key, delta, g, bucket});
  }
  return out;
}

namespace {

// Format 1 (no segment magic): [u32 length][u32 CRC-32 of payload]. The length is not
// covered by a checksum, so damage that reaches the end of the data counts as torn.
scan_result scan_format1(std::string_view data, replay_state& state) {
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
    if (!state.apply(payload)) return damaged("malformed record", false);
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

}  // namespace

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

namespace {

// The format-2 records from `pos` on.
scan_result scan_records(std::string_view data, std::size_t pos, replay_state& state) {
  scan_result r;
  while (pos < data.size()) {
    const auto damaged = [&](std::string what) {
      r.intact_records_after = count_valid_after(data, pos);
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
    if (data.size() - pos < record_header_bytes) return damaged("partial record header");
    std::uint64_t length = 0;
    std::uint32_t crc = 0;
    if (!decode_header(data.data() + pos, length, crc)) return damaged("header checksum mismatch");
    if (length > data.size() - pos - record_header_bytes)
      return damaged("record runs past the end of the file");
    const std::string_view payload = data.substr(pos + record_header_bytes, length);
    if (crc_of(payload) != crc) return damaged("checksum mismatch");
    if (!state.apply(payload)) {
      // Whole and checksummed, yet unreadable: never a torn append.
      r.outcome = scan_result::status::corrupt;
      r.valid_bytes = pos;
      r.problem = "malformed record";
      r.intact_records_after = count_valid_after(data, pos + record_header_bytes + length - 1);
      return r;
    }
    pos += record_header_bytes + length;
  }
  r.valid_bytes = pos;
  return r;
}

}  // namespace

scan_result scan_segment(std::string_view data, replay_state& state) {
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
      r = scan_records(data, segment_magic.size(), state);
      r.outcome = scan_result::status::corrupt;
      if (r.problem.empty()) r.problem = "damaged segment header";
      return r;
    }
    return scan_format1(data, state);
  }
  return scan_records(data, segment_magic.size(), state);
}

}  // namespace slotted::wal
