// The batches and committed records (see record.hpp).
#include <algorithm>

#include "durable/codec.hpp"

namespace slotted::durable {

namespace codec {

bool valid_granularity(std::uint8_t g) {
  return g == static_cast<std::uint8_t>(store::granularity::hour) ||
         g == static_cast<std::uint8_t>(store::granularity::day);
}

void put_rows(std::string& out, const store::flush_batch& b) {
  for (const auto& r : b.rows) {
    put<std::uint32_t>(out, r.record_type);
    put<std::uint64_t>(out, r.record_id);
    put<std::uint16_t>(out, r.slot);
    put<std::int64_t>(out, r.delta);
  }
}

void put_bucket_rows(std::string& out, const store::flush_batch& b) {
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

bool read_rows(reader& in, std::uint32_t rows, store::flush_batch& b) {
  if (!in.has(std::size_t{rows} * 22)) return false;
  b.rows.resize(rows);
  for (auto& r : b.rows) {
    if (!in.get(r.record_type) || !in.get(r.record_id) || !in.get(r.slot) || !in.get(r.delta))
      return false;
  }
  return true;
}

bool read_bucket_rows(reader& in, store::flush_batch& b) {
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
  return true;
}

bool read_batches(reader& in, std::vector<store::flush_batch>& out, form f) {
  std::uint32_t n = 0;
  if (!in.get(n)) return false;
  for (std::uint32_t i = 0; i < n; ++i) {
    store::flush_batch b;
    std::uint32_t rows = 0;
    if (!in.get(b.run_id) || !in.get(b.seq) || !in.get(rows)) return false;
    // Old logs: bucket rows marked in the row count's top bit.
    bool with_buckets = f == form::timed;
    if (f == form::plain && (rows & old_batch_with_buckets) != 0) {
      with_buckets = true;
      rows &= ~old_batch_with_buckets;
    }
    if (!read_rows(in, rows, b)) return false;
    if (with_buckets && !read_bucket_rows(in, b)) return false;
    out.push_back(std::move(b));
  }
  return true;
}

namespace {
// The batches and their keyed trailer (which holds no request not in a batch), in `f`.
std::optional<std::vector<store::flush_batch>> batches_in(reader& in, form f) {
  std::vector<store::flush_batch> logged;
  std::vector<idempotency::keyed_request> none;
  if (!read_batches(in, logged, f) || !read_keyed_trailer(in, logged, none, f) || !none.empty())
    return std::nullopt;
  return logged;
}
}  // namespace

// A batches record: plain, or (old logs) with the marks of bucket rows and `at`s.
std::optional<std::vector<store::flush_batch>> decode_batches(reader& in) {
  return batches_in(in, form::plain);
}

std::optional<std::vector<store::flush_batch>> decode_bucketed_batches(reader& in) {
  return batches_in(in, form::timed);
}

bool decode_committed(reader& in) {
  return in.done();
}

}  // namespace codec

}  // namespace slotted::durable
