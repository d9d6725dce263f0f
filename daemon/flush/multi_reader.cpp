// read_totals: many counters of one record type exact in one database statement per
// try, with the pending parts read_total() adds (the store, keyed requests not yet in a
// batch, the queued batches), under the same read_stable rules; and top-N.
#include <algorithm>
#include <unordered_map>

#include "db/top.hpp"
#include "flush/exact_reader.hpp"
#include "flush/internal.hpp"

namespace slotted::flush {

namespace {
failure over_cap(unsigned cap) {
  std::string why = "too many many-counter and top-N reads at once on this instance (at most ";
  why += std::to_string(cap);
  why +=
      ", the database section's pool_size less flush.connections, so that the flushes keep "
      "a connection); "
      "retry shortly";
  return failure(errc::retry_later, std::move(why));
}
}  // namespace

result<totals_reading> exact_reader::read_totals(std::uint32_t record_type,
                                                 std::span<const std::uint64_t> record_ids) {
  const auto slot = heavy_reads_.try_enter();
  if (!slot.held()) return over_cap(heavy_reads_.cap());
  totals_reading reading;
  reading.totals.resize(record_ids.size());
  std::unordered_map<std::uint64_t, std::size_t> index;
  for (std::size_t i = 0; i < record_ids.size(); ++i) {
    reading.totals[i].record_id = record_ids[i];
    index.emplace(record_ids[i], i);
  }
  const auto exact = read_stable(
      [&](db::connection& conn) {
        for (auto& t : reading.totals) t.persisted = 0;
        const auto rows = db::read_counts(conn, settings_.table, record_type, record_ids);
        for (const auto& [id, sum] : rows) {
          if (const auto it = index.find(id); it != index.end())
            reading.totals[it->second].persisted = sum;
        }
      },
      [&](const queue::batch_list& queued) -> result<void> {
        for (auto& t : reading.totals) {
          const store::counter_key key{record_type, t.record_id};
          std::int64_t sum = store_.pending(key) + (keyed_ != nullptr ? keyed_->pending(key) : 0);
          for (const auto& b : queued) {
            const auto it =
                std::lower_bound(b.rows.begin(), b.rows.end(), key,
                                 [](const db::counter_row& r, const store::counter_key& k) {
                                   return store::counter_key{r.record_type, r.record_id} < k;
                                 });
            if (it != b.rows.end() && it->record_type == key.record_type &&
                it->record_id == key.record_id) {
              if (__builtin_add_overflow(sum, it->delta, &sum))
                return failure(errc::not_exact_yet,
                               "a counter's pending sum is out of range; retry after the next "
                               "flush");
            }
          }
          t.pending = sum;
        }
        return result<void>();
      });
  if (!exact) return exact.failed();
  return reading;
}

result<top_reading> exact_reader::read_top(std::uint32_t record_type, std::size_t limit,
                                           std::optional<store::granularity> g, std::int64_t from,
                                           std::int64_t to) {
  if (top_running_.exchange(true))
    return failure(errc::retry_later,
                   "another top-N read is running on this instance; retry shortly");
  const auto slot = heavy_reads_.try_enter();
  if (!slot.held()) {
    top_running_.store(false);
    return over_cap(heavy_reads_.cap());
  }
  top_reading reading;
  struct done_guard {
    std::atomic<bool>& running;
    ~done_guard() { running.store(false); }
  } done{top_running_};
  try {
    reading.items = pool_.acquire().use([&](db::connection& conn) {
      if (!g) return db::read_top(conn, settings_.table, record_type, limit);
      return db::read_top_buckets(conn, settings_.table, *g, record_type, from, to, limit);
    });
  } catch (const db::top_too_costly& e) {
    return failure(errc::too_costly, e.what());  // the same read would stop again: 422
  } catch (const db::db_error& e) {
    metrics_.db_error(e.kind());
    throw;
  }
  return reading;
}

}  // namespace slotted::flush
