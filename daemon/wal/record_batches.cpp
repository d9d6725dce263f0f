// The batches and committed records (see record.hpp).
#include "wal/codec.hpp"

namespace slotted::wal {

namespace codec {

bool valid_granularity(std::uint8_t g) {
  return g == static_cast<std::uint8_t>(store::granularity::hour) ||
         g == static_cast<std::uint8_t>(store::granularity::day);
}

namespace {

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

}  // namespace

void put_batches(std::string& out, std::span<const store::flush_batch> batches) {
  put<std::uint32_t>(out, static_cast<std::uint32_t>(batches.size()));
  for (const auto& b : batches) {
    put<std::uint64_t>(out, b.run_id);
    put<std::uint64_t>(out, b.seq);
    const std::uint32_t flag = b.bucket_rows.empty() ? 0 : batch_with_buckets;
    put<std::uint32_t>(out, static_cast<std::uint32_t>(b.rows.size()) | flag);
    put_rows(out, b);
    if (flag != 0) put_bucket_rows(out, b);
  }
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
    if (!read_rows(in, rows, b)) return false;
    if (with_buckets && !read_bucket_rows(in, b)) return false;
    out.push_back(std::move(b));
  }
  return true;
}

std::optional<std::vector<store::flush_batch>> decode_batches(reader& in) {
  std::vector<store::flush_batch> logged;
  std::vector<idempotency::keyed_request> none;
  if (!read_batches(in, logged) || !read_keyed_trailer(in, logged, none) || !none.empty())
    return std::nullopt;
  return logged;
}

bool decode_committed(reader& in) { return in.done(); }

}  // namespace codec

void append_batches(std::string& out, std::span<const store::flush_batch> batches) {
  const std::size_t start = codec::begin_record(out, record_kind::batches);
  codec::put_batches(out, batches);
  codec::put_keyed_trailer(out, batches, {});
  codec::finish_record(out, start);
}

void append_committed(std::string& out) {
  const std::size_t start = codec::begin_record(out, record_kind::committed);
  codec::finish_record(out, start);
}

}  // namespace slotted::wal
