// The unique_increments, unique_batches and unique_snapshot records (kinds 11-13, read
// only), and the unique entry every kind that holds one logs (see record.hpp).
#include <algorithm>

#include "durable/codec.hpp"

namespace slotted::durable {

namespace codec {

namespace {

// The fixed part of a logged unique entry: type, id, window, at, client length.
constexpr std::size_t unique_fixed_bytes = 4 + 8 + 8 + 8 + 1;

bool read_unique(reader& in, store::unique_entry& e) {
  std::uint8_t length = 0;
  if (!in.get(e.record_type) || !in.get(e.record_id) || !in.get(e.window) || !in.get(e.at) ||
      !in.get(length) || length == 0 || length > store::max_client_bytes || !in.has(length))
    return false;
  // A time the parser accepts, inside a window that starts on an hour and is at most a
  // day long: anything else was never written by this daemon.
  if (e.at < 0 || e.at > ingest::max_at || e.window < 0 || e.window % 3600 != 0 ||
      e.at < e.window || e.at - e.window >= 86400)
    return false;
  e.client.resize(length);
  for (auto& c : e.client) in.get(c);
  return true;
}

// A batch that may carry unique entries: a unique batch holds nothing else.
bool holds_nothing_else(const store::flush_batch& b) {
  return b.rows.empty() && b.bucket_rows.empty() &&
         std::holds_alternative<store::plain_content>(b.content);
}

}  // namespace

void put_unique(std::string& out, const store::unique_entry& e) {
  put<std::uint32_t>(out, e.record_type);
  put<std::uint64_t>(out, e.record_id);
  put<std::int64_t>(out, e.window);
  put<std::int64_t>(out, e.at);
  put<std::uint8_t>(out, static_cast<std::uint8_t>(e.client.size()));
  out += e.client;
}

bool read_unique_entries(reader& in, std::vector<store::unique_entry>& out) {
  std::uint32_t n = 0;
  if (!in.get(n) || n > in.remaining() / unique_fixed_bytes) return false;
  for (std::uint32_t i = 0; i < n; ++i) {
    store::unique_entry e;
    if (!read_unique(in, e)) return false;
    out.push_back(std::move(e));
  }
  return true;
}

bool read_uniques(reader& in, std::vector<store::flush_batch>& batches) {
  std::uint32_t m = 0;
  if (!in.get(m)) return false;
  for (std::uint32_t i = 0; i < m; ++i) {
    std::uint32_t index = 0;
    std::uint16_t slot = 0;
    if (!in.get(index) || !in.get(slot) || index >= batches.size()) return false;
    auto& b = batches[index];
    // Each batch once, and only one that holds nothing else; never an empty one.
    if (!holds_nothing_else(b)) return false;
    store::unique_content u{.entries = {}, .slot = slot};
    if (!read_unique_entries(in, u.entries) || u.entries.empty()) return false;
    b.content = std::move(u);
  }
  return true;
}

std::optional<unique_increments_record> decode_unique_increments(reader& in) {
  unique_increments_record r;
  if (!read_timed_increments(in, r.increments) || !read_unique_entries(in, r.uniques) ||
      r.uniques.empty() || !in.done())
    return std::nullopt;
  return r;
}

std::optional<std::vector<store::flush_batch>> decode_unique_batches(reader& in) {
  std::vector<store::flush_batch> logged;
  std::vector<idempotency::keyed_request> none;
  if (!read_batches(in, logged, form::timed) ||
      !read_keyed_trailer(in, logged, none, form::timed, false) || !none.empty() ||
      !read_uniques(in, logged) || !in.done())
    return std::nullopt;
  return logged;
}

std::optional<snapshot_record> decode_unique_snapshot(reader& in) {
  snapshot_record s;
  if (!read_bucketed_snapshot(in, s, false) || !read_uniques(in, s.batches) ||
      !read_unique_entries(in, s.uniques) || !in.done())
    return std::nullopt;
  return s;
}

}  // namespace codec

}  // namespace slotted::durable
