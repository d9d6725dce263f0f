// The exact reader (see exact_reader.hpp): read_total and read_series count persisted plus
// pending, never a batch twice or not at all while it commits (read_stable).
#include "flush/exact_reader.hpp"

#include <algorithm>
#include <map>

#include "db/errors.hpp"
#include "flush/internal.hpp"
#include "util/log.hpp"

namespace slotted::flush {

exact_reader::exact_reader(const settings& s, queue& q, store::pending_store& store, db::pool& pool,
                           metrics::registry& metrics)
    : settings_(s),
      queue_(q),
      store_(store),
      pool_(pool),
      metrics_(metrics),
      heavy_reads_(pool.size(), s.connections) {}

result<counter_reading> exact_reader::read_total(const store::counter_key& key) {
  // The pending sum, or nullopt when it is out of range.
  const auto queued_delta = [&](const queue::batch_list& queued) -> std::optional<std::int64_t> {
    std::int64_t sum = store_.pending(key) + (keyed_ != nullptr ? keyed_->pending(key) : 0);
    for (const auto& b : queued) {
      const auto it = std::lower_bound(b.rows.begin(), b.rows.end(), key,
                                       [](const db::counter_row& r, const store::counter_key& k) {
                                         return store::counter_key{r.record_type, r.record_id} < k;
                                       });
      if (it != b.rows.end() && it->record_type == key.record_type &&
          it->record_id == key.record_id) {
        // The store's sum and a queued batch's are each bounded (max_pending_sum), but
        // not their total: no wrap, a retry after the next flush.
        if (__builtin_add_overflow(sum, it->delta, &sum)) return std::nullopt;
      }
    }
    return sum;
  };
  counter_reading reading;
  const auto exact = read_stable(
      [&](db::connection& conn) {
        reading.persisted = db::read_count(conn, settings_.table, key.record_type, key.record_id);
      },
      [&](const queue::batch_list& queued) -> result<void> {
        const auto pending = queued_delta(queued);
        if (!pending) {
          return failure(errc::not_exact_yet,
                         "the counter's pending sum is out of range; retry after the next flush");
        }
        reading.pending = *pending;
        return {};
      });
  if (!exact) return exact.failed();
  return reading;
}

result<series_reading> exact_reader::read_series(const store::counter_key& key,
                                                 store::granularity g, std::int64_t from,
                                                 std::int64_t to) {
  // What is pending for these buckets: the store, keyed requests not yet in a batch,
  // and the queued batches' bucket rows (under the queue's lock).
  const auto queued_buckets = [&](const queue::batch_list& queued,
                                  std::map<std::int64_t, __int128>& sums) {
    std::vector<std::pair<std::int64_t, std::int64_t>> found;
    store_.pending_buckets(key, g, from, to, found);
    if (keyed_ != nullptr) keyed_->pending_buckets(key, g, from, to, found);
    for (const auto& [bucket, delta] : found) sums[bucket] += delta;
    for (const auto& b : queued) {
      // Sorted by counter, granularity, bucket: the counter's rows are one run.
      auto it = std::lower_bound(b.bucket_rows.begin(), b.bucket_rows.end(), key,
                                 [](const store::bucket_row& r, const store::counter_key& k) {
                                   return store::counter_key{r.record_type, r.record_id} < k;
                                 });
      for (; it != b.bucket_rows.end() && it->record_type == key.record_type &&
             it->record_id == key.record_id;
           ++it) {
        if (it->gran == g && it->bucket >= from && it->bucket <= to) sums[it->bucket] += it->delta;
      }
    }
  };
  std::map<std::int64_t, __int128> sums;
  const auto exact = read_stable(
      [&](db::connection& conn) {
        sums.clear();
        for (const auto& [bucket, count] :
             db::read_series(conn, settings_.table, g, key.record_type, key.record_id, from, to))
          sums[bucket] += count;
      },
      [&](const queue::batch_list& queued) {
        queued_buckets(queued, sums);
        return result<void>();
      });
  if (!exact) return exact.failed();
  series_reading reading;
  for (const auto& [bucket, count] : sums) {
    if (count != 0) reading.points.emplace_back(bucket, count);
  }
  return reading;
}

result<void> exact_reader::read_stable(
    const std::function<void(db::connection&)>& read_db,
    const std::function<result<void>(const queue::batch_list&)>& add_pending) {
  auto lease = pool_.acquire();
  try {
    return lease.use([&](db::connection& conn) -> result<void> {
      // Retry until no commit started or ended during the database read and no batch
      // is in doubt; rather than answer a figure that may count a batch twice or not
      // at all, give up (503) after a few tries.
      for (int attempt = 0; attempt < 20; ++attempt) {
        const auto before = queue_.wait_settled(std::chrono::milliseconds(200));
        if (!before) continue;
        read_db(conn);
        const auto settled = queue_.read_pending(*before, add_pending);
        if (!settled) return settled.failed();
        if (*settled) return {};
      }
      return failure(errc::not_exact_yet, "the counter is being written; retry");
    });
  } catch (const db::db_error& e) {
    metrics_.db_error(e.kind());
    throw;
  }
}

}  // namespace slotted::flush
