// The tagged record, kind 14 (see record.hpp): one versioned layout for every role,
// each field tagged and sized, so that a later change is a new version or a new tag,
// not a new kind for each combination of features. Field bodies are the encodings of
// kinds 1-13 (record_*.cpp).
#include <algorithm>
#include <array>
#include <cstring>

#include "durable/codec.hpp"

namespace slotted::durable {

namespace codec {

namespace {

constexpr std::uint8_t tagged_version = 1;
// A field's u64 length is taken as a size_t (reader::take).
static_assert(sizeof(std::size_t) == sizeof(std::uint64_t));

enum class tag : std::uint8_t {
  increments = 1,        // u32 n, n x inc                      (no item has a time)
  timed_increments = 2,  // u32 n, n x (inc, i64 at | -1)
  keyed_request = 3,     // the timed_keyed payload
  unique_entries = 4,    // u32 n >= 1, n x unique
  batch = 5,             // see put_batch_fields
  pending_totals = 6,    // u64 n, n x total
  pending_buckets = 7,   // u64 n, n x (total, u8 granularity 1|2, i64 bucket start)
  counter_key = 8,       // u32 record_type, u64 record_id
};
constexpr std::size_t tag_count = 9;

// A batch field's content byte.
enum class content : std::uint8_t { plain = 0, keyed = 1, unique = 2 };

// A field's tag and length placeholder; end_field() fills the length once the body is in.
// The length is a u64, as the frame's: a batch's bucket rows or a snapshot's pending
// items can pass 4 GiB in one field.
std::size_t begin_field(std::string& out, tag t) {
  out.push_back(static_cast<char>(t));
  const std::size_t at = out.size();
  put<std::uint64_t>(out, 0);
  return at;
}
void end_field(std::string& out, std::size_t at) {
  const std::uint64_t length = out.size() - at - sizeof length;
  std::memcpy(out.data() + at, &length, sizeof length);
}

// Which tags a role takes, and how many times (0 none, 1 at most once, many: any number).
constexpr std::uint8_t many = 2;
std::array<std::uint8_t, tag_count> allowed(role r) {
  std::array<std::uint8_t, tag_count> a{};
  const auto set = [&](tag t, std::uint8_t n) { a[static_cast<std::size_t>(t)] = n; };
  switch (r) {
    case role::append:
      set(tag::increments, 1);
      set(tag::timed_increments, 1);
      set(tag::keyed_request, 1);
      set(tag::unique_entries, 1);
      break;
    case role::cut:
      set(tag::batch, many);
      break;
    case role::snapshot:
      set(tag::keyed_request, many);
      set(tag::unique_entries, 1);
      set(tag::batch, many);
      set(tag::pending_totals, 1);
      set(tag::pending_buckets, 1);
      break;
    case role::reset:
      set(tag::counter_key, 1);
      break;
    case role::committed:
      break;
  }
  return a;
}

bool read_untimed_increments(reader& in, std::vector<timed_delta>& out) {
  std::uint32_t n = 0;
  std::vector<logged_delta> read;
  if (!in.get(n) || !read_deltas<std::int32_t>(in, n, read)) return false;
  for (const auto& [key, delta] : read) out.push_back({key, delta, no_time});
  return true;
}

bool read_batch(reader& in, std::vector<store::flush_batch>& out) {
  store::flush_batch b;
  std::uint8_t kind = 0;
  std::uint16_t slot = 0;
  std::uint32_t rows = 0;
  if (!in.get(b.run_id) || !in.get(b.seq) || !in.get(kind) || !in.get(slot) || !in.get(rows) ||
      !read_rows(in, rows, b) || !read_bucket_rows(in, b))
    return false;
  switch (static_cast<content>(kind)) {
    case content::plain:
      if (slot != 0) return false;
      break;
    case content::keyed: {
      std::uint32_t m = 0;
      // A keyed batch of no request is written as the plain batch it is.
      if (slot != 0 || !in.get(m) || m == 0) return false;
      store::keyed_content k;
      for (std::uint32_t i = 0; i < m; ++i) {
        idempotency::keyed_request r;
        if (!read_keyed(in, r, form::timed)) return false;
        k.requests.push_back(std::move(r));
      }
      b.content = std::move(k);
      break;
    }
    case content::unique: {
      // Its rows are known only as it commits (db/uniques.hpp).
      store::unique_content u{.entries = {}, .slot = slot};
      if (!b.rows.empty() || !b.bucket_rows.empty() || !read_unique_entries(in, u.entries) ||
          u.entries.empty())
        return false;
      b.content = std::move(u);
      break;
    }
    default:
      return false;
  }
  out.push_back(std::move(b));
  return true;
}

// Reads one field's body, all of it, into `r`.
bool read_field(tag t, reader& in, tagged_record& r) {
  bool ok = false;
  switch (t) {
    case tag::increments:
      ok = read_untimed_increments(in, r.increments);
      break;
    case tag::timed_increments:
      ok = read_timed_increments(in, r.increments);
      break;
    case tag::keyed_request: {
      idempotency::keyed_request k;
      ok = read_keyed(in, k, form::timed);
      r.state.keyed.push_back(std::move(k));
      break;
    }
    case tag::unique_entries:
      ok = read_unique_entries(in, r.state.uniques) && !r.state.uniques.empty();
      break;
    case tag::batch:
      ok = read_batch(in, r.state.batches);
      break;
    case tag::pending_totals: {
      std::uint64_t n = 0;
      ok = in.get(n) && read_deltas<std::int64_t>(in, n, r.state.deltas);
      break;
    }
    case tag::pending_buckets: {
      // Kind 10's encoding, whose granularity 0 (a total) this field does not take.
      std::uint64_t n = 0;
      const auto totals = r.state.deltas.size();
      ok = in.get(n) && read_deltas_with_buckets(in, n, r.state) && r.state.deltas.size() == totals;
      break;
    }
    case tag::counter_key:
      ok = in.get(r.key.record_type) && in.get(r.key.record_id);
      break;
  }
  return ok && in.done();
}

}  // namespace

std::optional<tagged_record> decode_tagged(reader& in) {
  std::uint8_t version = 0, what = 0;
  std::uint32_t fields = 0;
  // A later version's record is refused whole, never half read (as an unknown kind).
  if (!in.get(version) || version != tagged_version || !in.get(what) || what < 1 || what > 5 ||
      !in.get(fields))
    return std::nullopt;
  tagged_record r;
  r.what = static_cast<role>(what);
  const auto limits = allowed(r.what);
  std::array<std::uint32_t, tag_count> seen{};
  std::uint8_t last = 0;
  // The count makes a record cut at a field's end malformed, as a cut anywhere else is.
  for (std::uint32_t i = 0; i < fields; ++i) {
    std::uint8_t t = 0;
    std::uint64_t length = 0;
    reader body{{}};
    // Fields in tag order, each as often as its role allows.
    if (!in.get(t) || t == 0 || t >= tag_count || t < last || !in.get(length) ||
        !in.take(length, body) || limits[t] == 0 || (limits[t] == 1 && seen[t] > 0) ||
        !read_field(static_cast<tag>(t), body, r))
      return std::nullopt;
    ++seen[t];
    last = t;
  }
  if (!in.done()) return std::nullopt;
  const auto has = [&](tag t) { return seen[static_cast<std::size_t>(t)] > 0; };
  switch (r.what) {
    case role::append: {
      // One request: its items (and its unique entries), or one keyed request.
      const int forms = has(tag::increments) + has(tag::timed_increments) + has(tag::keyed_request);
      if (forms != 1 || (has(tag::keyed_request) && has(tag::unique_entries))) return std::nullopt;
      break;
    }
    case role::reset:
      if (!has(tag::counter_key)) return std::nullopt;
      break;
    default:
      break;
  }
  return r;
}

namespace {

// The record's header up to its field count, which finish_tagged() fills.
constexpr std::size_t fields_at = wal::record_header_bytes + 1 + 1 + 1;
std::size_t begin_tagged(std::string& out, role r) {
  const std::size_t start = begin_record(out, record_kind::tagged);
  put<std::uint8_t>(out, tagged_version);
  put<std::uint8_t>(out, static_cast<std::uint8_t>(r));
  put<std::uint32_t>(out, 0);
  return start;
}

// Counts the fields written since begin_tagged() (walking their lengths), then frames the
// record.
void finish_tagged(std::string& out, std::size_t start) {
  std::uint32_t fields = 0;
  for (std::size_t at = start + fields_at + sizeof fields; at < out.size(); ++fields) {
    std::uint64_t length = 0;
    std::memcpy(&length, out.data() + at + 1, sizeof length);
    at += 1 + sizeof length + length;
  }
  std::memcpy(out.data() + start + fields_at, &fields, sizeof fields);
  finish_record(out, start);
}

void put_increments_field(std::string& out, std::span<const ingest::increment> increments) {
  const bool timed = any_at(increments);
  const std::size_t at = begin_field(out, timed ? tag::timed_increments : tag::increments);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(increments.size()));
  for (const auto& inc : increments) {
    put<std::uint32_t>(out, inc.record_type);
    put<std::uint64_t>(out, inc.record_id);
    put<std::int32_t>(out, inc.delta);
    if (timed) put<std::int64_t>(out, inc.has_time() ? inc.at : no_time);
  }
  end_field(out, at);
}

void put_keyed_field(std::string& out, const idempotency::keyed_request& r) {
  const std::size_t at = begin_field(out, tag::keyed_request);
  put_keyed(out, r);
  end_field(out, at);
}

void put_uniques_field(std::string& out, std::span<const store::unique_entry> entries) {
  if (entries.empty()) return;
  const std::size_t at = begin_field(out, tag::unique_entries);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(entries.size()));
  for (const auto& e : entries) put_unique(out, e);
  end_field(out, at);
}

// A batch: u64 run_id, u64 seq, u8 content (0 plain, 1 keyed, 2 unique), u16 slot (a
// unique batch's, else 0), u32 r, r x row, u32 k, k x bucket row, then for a keyed batch
// u32 m, m x timed_keyed payload, for a unique batch u32 n >= 1, n x unique.
void put_batch_fields(std::string& out, std::span<const store::flush_batch> batches) {
  for (const auto& b : batches) {
    const std::size_t at = begin_field(out, tag::batch);
    put<std::uint64_t>(out, b.run_id);
    put<std::uint64_t>(out, b.seq);
    // A keyed or unique content of nothing is logged as the plain batch it is.
    const auto* u = store::unique_of(b);
    if (u != nullptr && u->entries.empty()) u = nullptr;
    const auto kind = !store::keyed_requests(b).empty() ? content::keyed
                      : u != nullptr                    ? content::unique
                                                        : content::plain;
    put<std::uint8_t>(out, static_cast<std::uint8_t>(kind));
    put<std::uint16_t>(out, u != nullptr ? u->slot : 0);
    put<std::uint32_t>(out, static_cast<std::uint32_t>(b.rows.size()));
    put_rows(out, b);
    put_bucket_rows(out, b);
    if (kind == content::keyed) {
      const auto requests = store::keyed_requests(b);
      put<std::uint32_t>(out, static_cast<std::uint32_t>(requests.size()));
      for (const auto& r : requests) put_keyed(out, r);
    } else if (kind == content::unique) {
      put<std::uint32_t>(out, static_cast<std::uint32_t>(u->entries.size()));
      for (const auto& e : u->entries) put_unique(out, e);
    }
    end_field(out, at);
  }
}

void put_pending_fields(std::string& out, std::span<const store::pending_delta> deltas) {
  const auto is_total = [](const store::pending_delta& d) {
    return d.gran == store::granularity::none;
  };
  const auto totals =
      static_cast<std::uint64_t>(std::count_if(deltas.begin(), deltas.end(), is_total));
  if (totals > 0) {
    const std::size_t at = begin_field(out, tag::pending_totals);
    put<std::uint64_t>(out, totals);
    for (const auto& d : deltas) {
      if (!is_total(d)) continue;
      put<std::uint32_t>(out, d.key.record_type);
      put<std::uint64_t>(out, d.key.record_id);
      put<std::int64_t>(out, d.delta);
    }
    end_field(out, at);
  }
  if (totals < deltas.size()) {
    const std::size_t at = begin_field(out, tag::pending_buckets);
    put<std::uint64_t>(out, deltas.size() - totals);
    for (const auto& d : deltas) {
      if (is_total(d)) continue;
      put<std::uint32_t>(out, d.key.record_type);
      put<std::uint64_t>(out, d.key.record_id);
      put<std::int64_t>(out, d.delta);
      put<std::uint8_t>(out, static_cast<std::uint8_t>(d.gran));
      put<std::int64_t>(out, d.bucket);
    }
    end_field(out, at);
  }
}

void put_key_field(std::string& out, const store::counter_key& key) {
  const std::size_t at = begin_field(out, tag::counter_key);
  put<std::uint32_t>(out, key.record_type);
  put<std::uint64_t>(out, key.record_id);
  end_field(out, at);
}

}  // namespace

}  // namespace codec

// Every record this version writes is tagged (kinds 1-13 are read, never written).
void append_increments(std::string& out, std::span<const ingest::increment> increments,
                       std::span<const store::unique_entry> uniques) {
  // Room for the whole record at once: one allocation on the path every request with a
  // WAL takes (header, kind, version, role, field count, field header, item count, at
  // most 24 bytes an item; unique entries, rare, may grow it once more).
  out.reserve(out.size() + wal::record_header_bytes + 20 + increments.size() * 24);
  const std::size_t start = codec::begin_tagged(out, codec::role::append);
  codec::put_increments_field(out, increments);
  codec::put_uniques_field(out, uniques);
  codec::finish_tagged(out, start);
}

void append_keyed(std::string& out, const idempotency::keyed_request& request) {
  const std::size_t start = codec::begin_tagged(out, codec::role::append);
  codec::put_keyed_field(out, request);
  codec::finish_tagged(out, start);
}

void append_batches(std::string& out, std::span<const store::flush_batch> batches) {
  const std::size_t start = codec::begin_tagged(out, codec::role::cut);
  codec::put_batch_fields(out, batches);
  codec::finish_tagged(out, start);
}

void append_snapshot(std::string& out, std::span<const store::flush_batch> batches,
                     std::span<const store::pending_delta> deltas,
                     std::span<const idempotency::keyed_request> keyed,
                     std::span<const store::unique_entry> uniques) {
  const std::size_t start = codec::begin_tagged(out, codec::role::snapshot);
  for (const auto& r : keyed) codec::put_keyed_field(out, r);
  codec::put_uniques_field(out, uniques);
  codec::put_batch_fields(out, batches);
  codec::put_pending_fields(out, deltas);
  codec::finish_tagged(out, start);
}

void append_committed(std::string& out) {
  codec::finish_tagged(out, codec::begin_tagged(out, codec::role::committed));
}

void append_reset(std::string& out, const store::counter_key& key) {
  const std::size_t start = codec::begin_tagged(out, codec::role::reset);
  codec::put_key_field(out, key);
  codec::finish_tagged(out, start);
}

}  // namespace slotted::durable
