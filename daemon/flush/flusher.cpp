#include "flush/flusher.hpp"

#include <algorithm>
#include <array>
#include <exception>
#include <map>
#include <system_error>

#include "db/errors.hpp"
#include "flush/batch_schedule.hpp"
#include "idempotency/keyed_batches.hpp"
#include "util/log.hpp"

namespace slotted::flush {

namespace {
using clock = std::chrono::steady_clock;

// A batch the database refused for its data can be split to find what is at fault: a
// plain batch by its rows, a keyed batch by its requests (each applied whole or not).
bool splittable(const flush_batch& b) {
  return b.keyed.empty() ? b.rows.size() > 1 : b.keyed.size() > 1;
}

// The entries a queued batch holds against flush.max_pending_keys (see
// store::pending_store::pending_entries): its totals, its bucket counts and, for a keyed
// batch, its keys (a request without increments holds its key all the same).
std::size_t rows_held(const flush_batch& b) {
  return b.rows.size() + b.bucket_rows.size() + b.keyed.size();
}

// The most bytes a row adds to a plain batch's statements: its upsert's tuple (about 60)
// and its dirty mark's (about 190, with a 64-character instance id escaped).
constexpr std::size_t max_row_bytes = 256;

// This run's own ledger rows older than this are pruned, but for those of batches still
// queued (and all while the WAL has not logged every batch committed).
constexpr std::uint64_t ledger_max_age_seconds = 3600;
// ... and the rows of every other run older than this, whoever wrote them (other
// instances, an earlier run of this one, another process sharing its instance_id).
// Longer: only the run that wrote them knows which of its rows it still needs (a batch
// in doubt while it cannot reach the database, a WAL not yet replayed after a crash), so
// they are kept for an outage of up to a day; what an instance that never comes back (a
// container under a new hostname) leaves goes after that.
constexpr std::uint64_t ledger_others_max_age_seconds = 86400;
constexpr auto prune_every = std::chrono::minutes(1);
// Deadlocks and lock wait timeouts are retried within the cycle this many times.
constexpr int lock_retries = 3;
// Below this fraction of its column's range left, the AUTO_INCREMENT headroom is
// logged as a warning (for a seed-style INT id: about 107 million values).
constexpr double autoincrement_warn_fraction = 0.05;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

std::vector<flush_batch> form_batches(std::vector<store::pending_delta> deltas,
                                      std::size_t max_rows, unsigned slots, std::uint64_t run_id,
                                      std::uint64_t first_seq, std::mt19937_64& rng,
                                      clock::time_point oldest_arrival) {
  // Totals and bucket counts arrive mixed (see store::pending_delta); buckets sort after
  // their counter's total. A total of 0 stays when the counter has bucket counts (a
  // +1 in one hour and a -1 in another), so that its buckets have a row to travel with.
  std::sort(deltas.begin(), deltas.end(), [](const auto& a, const auto& b) {
    return std::tie(a.key, a.gran, a.bucket) < std::tie(b.key, b.gran, b.bucket);
  });
  // One bucket may come in parts (a day from each of its hours in the store): summed.
  // The parts' sum stays within what the store's clamp allows (README, Counts per
  // bucket); a total comes once.
  std::size_t kept = 0;
  for (std::size_t i = 0; i < deltas.size(); ++i) {
    if (kept > 0 && deltas[i].gran != store::granularity::none &&
        deltas[kept - 1].key == deltas[i].key && deltas[kept - 1].gran == deltas[i].gran &&
        deltas[kept - 1].bucket == deltas[i].bucket) {
      if (__builtin_add_overflow(deltas[kept - 1].delta, deltas[i].delta, &deltas[kept - 1].delta))
        deltas[kept - 1].delta = deltas[i].delta < 0 ? INT64_MIN : INT64_MAX;
      continue;
    }
    deltas[kept++] = deltas[i];
  }
  deltas.resize(kept);
  std::erase_if(deltas, [](const store::pending_delta& d) { return d.delta == 0; });
  std::vector<flush_batch> batches;
  std::size_t in_batch = max_rows;  // rows of the last batch: a new one first
  std::uint16_t slot = 0;
  for (std::size_t i = 0; i < deltas.size(); ++i) {
    const auto& d = deltas[i];
    const bool total = d.gran == store::granularity::none;
    const bool new_counter = i == 0 || !(deltas[i - 1].key == d.key);
    if (new_counter) {
      if (in_batch >= max_rows) {
        flush_batch b;
        b.run_id = run_id;
        b.seq = first_seq + batches.size();
        b.oldest_arrival = oldest_arrival;
        // One slot for the whole batch, drawn afresh per batch: two writers' batches then
        // share a row only when they drew the same slot (1 in `slots`), instead of almost
        // surely somewhere when each row draws its own. Fewer lock waits on one server,
        // fewer certification failures on Galera (bench/RESULTS.md, Galera).
        slot = static_cast<std::uint16_t>(rng() % slots);
        batches.push_back(std::move(b));
        in_batch = 0;
      }
      batches.back().rows.push_back(
          {d.key.record_type, d.key.record_id, slot, total ? d.delta : 0});
      ++in_batch;
    }
    if (!total) {
      batches.back().bucket_rows.push_back(
          {d.key.record_type, d.key.record_id, d.gran, d.bucket, slot, d.delta});
    }
  }
  return batches;
}

namespace {
// A batch's seq keeps the formed sequence number in its low 44 bits and a heap index of
// the split (1 for the whole batch, 2h and 2h+1 for the halves of h) above them.
constexpr std::uint64_t split_low_bits = 44;
std::uint64_t formed_seq(std::uint64_t seq) {
  return seq & ((std::uint64_t{1} << split_low_bits) - 1);
}
std::uint64_t split_node(std::uint64_t seq) {
  return std::max<std::uint64_t>(1, seq >> split_low_bits);
}
}  // namespace

std::pair<flush_batch, flush_batch> split_batch(const flush_batch& b) {
  const std::uint64_t formed = formed_seq(b.seq);
  const std::uint64_t node = split_node(b.seq);
  flush_batch left = b, right = b;
  const auto middle = b.rows.begin() + static_cast<std::ptrdiff_t>(b.rows.size() / 2);
  left.rows.assign(b.rows.begin(), middle);
  right.rows.assign(middle, b.rows.end());
  // Each counter's bucket rows go with its row.
  left.bucket_rows.clear();
  right.bucket_rows.clear();
  for (const auto& r : b.bucket_rows) {
    const bool to_left =
        middle != b.rows.end() && store::counter_key{r.record_type, r.record_id} <
                                      store::counter_key{middle->record_type, middle->record_id};
    (to_left ? left : right).bucket_rows.push_back(r);
  }
  left.seq = ((node * 2) << split_low_bits) | formed;
  right.seq = ((node * 2 + 1) << split_low_bits) | formed;
  return {std::move(left), std::move(right)};
}

flusher::flusher(settings s, store::pending_store& store, db::pool& pool,
                 metrics::registry& metrics)
    : settings_(std::move(s)),
      store_(store),
      pool_(pool),
      metrics_(metrics),
      worker_([this] { return cycle(); },
              [this](const flush_result& r) { return r.ok ? settings_.interval : next_backoff(); },
              // The first cycle runs at once: it connects, verifies the schema and so
              // makes /readyz true without waiting a whole interval.
              std::chrono::milliseconds(0)) {
  std::random_device rd;
  // A fresh random run id per process: batch ids of different runs never collide,
  // whatever the clock does.
  run_id_ = ((static_cast<std::uint64_t>(rd()) << 32) | rd()) & 0x7fffffffffffffffull;
  rng_.seed((static_cast<std::uint64_t>(rd()) << 32) | rd());
}

flusher::~flusher() = default;

void flusher::start() {
  worker_.start();
}

void flusher::request_flush(std::function<void(const flush_result&)> done) {
  if (!worker_.request(done)) done(flush_result{false, 0, "shutting down"});
}

std::size_t flusher::stop(clock::time_point deadline) {
  stopping_.store(true);
  // Before the join: a cycle already draining a long backlog must stop at it too.
  deadline_.store(deadline.time_since_epoch().count());
  auto waiters = worker_.stop();
  flush_result result = cycle();
  while (!result.ok && !fatal_ && !past_deadline()) {
    const auto pause = std::min<clock::duration>(next_backoff(), deadline - clock::now());
    std::this_thread::sleep_for(std::max<clock::duration>(pause, clock::duration::zero()));
    result = cycle();
  }
  for (auto& w : waiters) w(result);
  std::lock_guard lock(queue_mutex_);
  return queued_rows_ + store_.keys() + (keyed_ != nullptr ? keyed_->pending_entries() : 0);
}

void flusher::request_reset(const store::counter_key& key,
                            std::function<void(const reset_result&)> done) {
  // A waiter of the worker: it runs on the flusher thread right after the cycle that
  // starts after this request, before any later cycle can take from the store.
  const bool queued = worker_.request(
      [this, key, done](const flush_result& flushed) { done(reset_now(key, flushed)); });
  if (!queued) {
    metrics_.resets_error.Increment();
    reset_result r;
    r.error = "shutting down";
    done(r);
  }
}

reset_result flusher::reset_now(const store::counter_key& key, const flush_result& flushed) {
  reset_result r;
  const auto refuse = [&](std::string why) {
    metrics_.resets_error.Increment();
    r.error = std::move(why);
    return r;
  };
  if (stopping_.load()) return refuse("shutting down");
  // Every batch formed before the reset must commit before it, or it would bring back
  // what the reset cleared: the cycle wrote them all, or the reset does not happen.
  if (!flushed.ok) return refuse("the flush before the reset failed: " + flushed.error);
  {
    std::lock_guard lock(queue_mutex_);
    if (!queued_.empty() || !in_doubt_.empty())
      return refuse("batches formed before the reset are not yet written; retry");
  }
  // An id from the batches' sequence: the ledger answers "did it commit" after a lost
  // connection, as for a batch.
  const db::batch_identity id{settings_.instance_id, run_id_, next_seq_++};
  const bool rolled_up =
      std::any_of(settings_.rollups.begin(), settings_.rollups.end(),
                  [&](const db::rollup_target& t) { return t.record_type == key.record_type; });
  // Its bucket rows go with it (README: Counts per bucket): the buckets it keeps now.
  std::vector<store::granularity> bucket_grans;
  if (const auto* c = settings_.buckets.find(key.record_type)) {
    for (const auto g : store::all_granularities)
      if (c->keeps(g)) bucket_grans.push_back(g);
  }
  // The connection first, as a cycle does: a read holds its connection while it waits
  // for an even generation, so a reset that went odd first could wait for a connection
  // held by reads that wait for it (each answering 503 after its retries).
  std::optional<db::pool::lease> lease;
  try {
    lease.emplace(pool_.acquire());
  } catch (const db::db_error& e) {
    metrics_.db_error(e.kind());
    return refuse(std::string("database: ") + e.what());
  }
  // Odd throughout: a concurrent read_total() retries rather than see the slot rows
  // gone and the pending delta not yet dropped.
  set_committing(true);
  db::reset_progress known;  // the figures of the attempt that committed (or may have)
  bool in_doubt = false;
  auto pause = std::chrono::milliseconds(100);
  for (int attempt = 0;; ++attempt) {
    db::reset_progress p;
    try {
      // Kept across retries; taken again only after a lost connection.
      if (!lease) lease.emplace(pool_.acquire());
      const auto outcome =
          db::reset_counter(**lease, settings_.table, id, key, rolled_up, bucket_grans, p);
      progress();
      // already_applied: an earlier attempt whose COMMIT reply was lost had committed.
      if (outcome == db::commit_outcome::applied) known = p;
      break;
    } catch (const db::db_error& e) {
      progress();
      if (lease && e.connection_lost()) {
        lease->discard();
        lease.reset();
      }
      metrics_.db_error(e.kind());
      if (e.connection_lost() && p.commit_sent) {
        known = p;
        in_doubt = true;
      }
      const bool lock_conflict =
          e.kind() == db::error_kind::deadlock || e.kind() == db::error_kind::lock_wait_timeout;
      if (in_doubt && !past_deadline()) {
        // Resolved only by the ledger: re-sent under the same id until an attempt gets
        // an answer (its ledger insert finds the row, or takes the id over and commits).
        // Nothing else is flushed meanwhile, so the order stays as it was.
        log::warn("reset of counter (", key.record_type, ", ", key.record_id,
                  "): connection lost during its COMMIT; asking the ledger: ", e.what());
        // Never past the stop deadline (a stop waits for this job).
        const auto deadline = clock::time_point(clock::duration(deadline_.load()));
        std::this_thread::sleep_for(std::min<clock::duration>(pause, deadline - clock::now()));
        pause = std::min<std::chrono::milliseconds>(pause * 2, settings_.max_retry_backoff);
        continue;
      }
      if (!in_doubt && lock_conflict && attempt + 1 < lock_retries && !past_deadline()) continue;
      set_committing(false);
      if (in_doubt)
        return refuse(
            "the reset's outcome is unknown (connection lost during its COMMIT, "
            "not resolved before the shutdown deadline): " +
            std::string(e.what()));
      return refuse(std::string("database: ") + e.what());
    }
  }
  // The cut: what this instance holds pending for the counter now arrived after the
  // cycle above took the store, i.e. concurrently with the reset; it is dropped (and
  // counted in `cleared`). With a WAL the drop is logged, synced, before the answer.
  std::int64_t dropped = 0;
  if (source_ != nullptr) {
    if (const auto d = source_->drop_pending(key)) {
      dropped = *d;
    } else {
      // The reset committed; only the drop could not be made durable, so it is not made:
      // what is pending (concurrent increments) lands after the reset, a valid order.
      log::warn("reset of counter (", key.record_type, ", ", key.record_id,
                "): the WAL cannot log it; increments pending for it land after the reset");
    }
  } else {
    dropped = store_.drop(key);
  }
  set_committing(false);
  metrics_.resets_ok.Increment();
  r.ok = true;
  r.persisted = known.persisted;
  r.pending = dropped;
  log::debug("counter (", key.record_type, ", ", key.record_id, ") reset: ", known.rows,
             " slot rows deleted, ", dropped, " pending dropped");
  return r;
}

void flusher::set_committing(bool committing) {
  {
    std::lock_guard lock(queue_mutex_);
    if ((generation_ % 2 == 1) != committing) ++generation_;
  }
  generation_changed_.notify_all();
}

std::chrono::milliseconds flusher::next_backoff() {
  if (consecutive_failures_ == 0) return settings_.interval;
  const auto cap = settings_.max_retry_backoff;
  auto base = std::chrono::milliseconds(100);
  for (unsigned i = 1; i < consecutive_failures_ && base < cap; ++i) base *= 2;
  base = std::min(base, cap);
  // Full jitter in [base/2, base]: instances that lost the database together do not
  // come back in step.
  std::uniform_int_distribution<long> jitter(base.count() / 2, base.count());
  return std::chrono::milliseconds(jitter(rng_));
}

bool flusher::take_from_store() {
  // Odd while deltas move from the store into batches: read_total() waits it out
  // instead of missing them in between.
  {
    std::lock_guard lock(queue_mutex_);
    ++generation_;
  }
  // Every statement of a batch must stay within the server's max_allowed_packet (as the
  // cycle's connection read it): a plain batch's upserts take up to max_row_bytes a row.
  const std::size_t budget = statement_budget_.load();
  const std::size_t max_rows = std::clamp<std::size_t>(
      budget > 1024 ? (budget - 1024) / max_row_bytes : 1, 1, settings_.max_rows_per_statement);
  const auto form = [this, budget, max_rows](std::vector<store::pending_delta>&& deltas,
                                             clock::time_point oldest) {
    auto batches =
        form_batches(std::move(deltas), max_rows, settings_.slots, run_id_, next_seq_, rng_, oldest);
    next_seq_ += batches.size();
    if (keyed_ != nullptr) {
      // Keyed requests become batches of their own (taken here, on the WAL's thread
      // when there is one, so the batches record covers them as it covers the deltas).
      std::size_t dropped = 0;
      auto keyed = idempotency::form_keyed_batches(
          keyed_->take_pending(), settings_.max_rows_per_statement, settings_.slots, run_id_,
          next_seq_, rng_, clock::now(), dropped, settings_.buckets, budget,
          settings_.idempotency_window);
      next_seq_ += keyed.size();
      keyed_->dropped_at_flush(dropped, 0);
      std::move(keyed.begin(), keyed.end(), std::back_inserter(batches));
    }
    return batches;
  };
  const auto even_again = [this] {
    {
      std::lock_guard lock(queue_mutex_);
      ++generation_;
    }
    generation_changed_.notify_all();
  };
  bool logged = true;
  try {
    if (source_ != nullptr) {
      // The durable path forms and logs them between two groups, then queues them here.
      logged =
          source_->take(form, [this](std::vector<flush_batch>&& b) { publish(std::move(b)); });
    } else {
      std::vector<store::pending_delta> deltas;
      const auto oldest = store_.take_all(deltas);
      auto batches = form(std::move(deltas), oldest.value_or(clock::now()));
      if (!batches.empty()) publish(std::move(batches));
    }
  } catch (...) {
    // Forming ran out of memory (cycle() reports it): reads must not wait for good.
    even_again();
    throw;
  }
  even_again();
  return logged;
}

void flusher::publish(std::vector<flush_batch>&& batches) {
  std::lock_guard lock(queue_mutex_);
  for (auto& b : batches) {
    queued_rows_ += rows_held(b);
    queued_.push_back(std::move(b));
  }
  store_.set_unwritten_rows(queued_rows_);
}

void flusher::enqueue(std::vector<flush_batch> batches) {
  // Each may have committed before the restart, its committed record never logged: in
  // doubt, as after a connection lost during its COMMIT, until the ledger answers for it
  // (expand_recovered for the parts of a split one, else its own commit attempt). Until
  // then a read would count it twice, in the table and as queued: reads wait for the
  // answer or say retry (read_stable).
  std::lock_guard lock(queue_mutex_);
  for (auto& b : batches) {
    b.recovered = true;
    queued_rows_ += rows_held(b);
    queued_.push_back(std::move(b));
    in_doubt_.push_back(&queued_.back());
  }
  store_.set_unwritten_rows(queued_rows_);
}

std::vector<flush_batch> flusher::queued_copy() {
  std::lock_guard lock(queue_mutex_);
  return {queued_.begin(), queued_.end()};
}

void flusher::retag_all(std::uint64_t tag) {
  std::lock_guard lock(queue_mutex_);
  for (auto& b : queued_) b.wal_tag = tag;
}

void flusher::release_source() {
  if (source_ == nullptr) return;
  std::uint64_t min_tag = UINT64_MAX;
  {
    std::lock_guard lock(queue_mutex_);
    for (const auto& b : queued_) min_tag = std::min(min_tag, b.wal_tag);
  }
  source_->release(min_tag);
}

void flusher::set_rollups(std::vector<db::rollup_target> rollups) {
  std::lock_guard lock(rollups_mutex_);
  next_rollups_ = std::move(rollups);
}

std::span<const db::counter_row> flusher::rolled_up_rows(std::span<const db::counter_row> rows,
                                                         std::vector<db::counter_row>& out) {
  out.clear();
  if (settings_.rollups.empty()) return {};
  for (const auto& r : rows) {
    const bool rolled_up =
        std::any_of(settings_.rollups.begin(), settings_.rollups.end(),
                    [&](const db::rollup_target& t) { return t.record_type == r.record_type; });
    if (rolled_up) out.push_back(r);
  }
  return out;
}

void flusher::mark_in_flight(queue_position it) {
  if (in_flight_.empty()) ++generation_;  // odd: a read now may or may not see it
  in_flight_.push_back(&*it);
  metrics_.flush_batches_in_flight.Set(static_cast<double>(in_flight_.size()));
}

void flusher::unmark_in_flight(queue_position it) {
  std::erase(in_flight_, &*it);
  if (in_flight_.empty()) ++generation_;
  metrics_.flush_batches_in_flight.Set(static_cast<double>(in_flight_.size()));
}

flusher::queue_position flusher::next_batch() {
  // Only a prefix is looked at: a batch further back waits for a later look, which
  // keeps a pick cheap when an outage left thousands queued. Every batch before the
  // oldest waiting one is in flight (at most max_flush_connections), so the prefix
  // holds that one, which can start once nothing before it is in flight.
  constexpr std::size_t lookahead = 64;
  std::array<batch_span, lookahead> spans;
  std::array<queue_position, lookahead> where;
  std::size_t n = 0;
  for (auto it = queued_.begin(); it != queued_.end() && n < lookahead; ++it, ++n) {
    const bool flying = std::find(in_flight_.begin(), in_flight_.end(), &*it) != in_flight_.end();
    spans[n] = span_of(*it, flying);
    where[n] = it;
  }
  const auto pick = next_startable(std::span<const batch_span>(spans.data(), n));
  return pick ? where[*pick] : queued_.end();
}

flusher::commit_attempt flusher::commit_with_retries(db::connection& conn, const flush_batch& b,
                                                     std::vector<db::counter_row>& dirty) {
  const db::batch_identity id{settings_.instance_id, b.run_id, b.seq};
  // Each writer thread pauses by a generator of its own.
  thread_local std::minstd_rand jitter_rng{std::random_device{}()};
  for (int attempt = 0;; ++attempt) {
    try {
      commit_attempt done;
      if (b.keyed.empty()) {
        done.outcome = db::commit_batch(conn, settings_.table, id, b.rows,
                                        rolled_up_rows(b.rows, dirty), b.bucket_rows);
      } else {
        done = commit_keyed(conn, id, b, dirty);
      }
      progress();
      return done;
    } catch (const db::db_error& e) {
      progress();  // an answer, even an error, is a sign of life
      // Not a bad row: no row can be written. Nothing is dropped; the batch stays
      // queued until the column is widened (checked again at each retry).
      if (db::is_autoincrement_exhaustion(e.code(), e.what()))
        throw autoincrement_exhausted(conn, e);
      if (e.data_error()) return {db::commit_outcome{}, e.what()};
      // A statement too large for max_allowed_packet (the connection refused to send
      // it, the transaction is rolled back): the batch is split like one refused for its
      // data, never resent whole.
      if (e.too_large()) return {db::commit_outcome{}, e.what()};
      const auto kind = e.kind();
      // Past the stop deadline a retry would hold the stop for another lock wait
      // (up to innodb_lock_wait_timeout): the batch stays queued instead.
      if ((kind != db::error_kind::deadlock && kind != db::error_kind::lock_wait_timeout) ||
          attempt + 1 >= lock_retries || past_deadline()) {
        throw;
      }
      metrics_.db_error(kind);
      std::uniform_int_distribution<int> pause_ms(5, 20 << attempt);
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms(jitter_rng)));
    }
  }
}

std::size_t flusher::pop_committed(queue_position it, const commit_attempt& a) {
  const flush_batch& batch = *it;  // in flight: only this writer removes it
  if (a.refused && splittable(batch)) {
    // Rolled back, so nothing of it was applied: split it to find the rows at fault
    // and let the others through. A keyed batch is split by its requests (a request is
    // applied whole or not at all); its halves' rows may then add up to more than the
    // whole's (a counter in both halves), so the count of queued rows follows them.
    // The halves take its place in the queue (the left one first), so they keep its
    // order against the batches before and after it.
    auto [left, right] = split_batch(batch);
    if (!batch.keyed.empty()) idempotency::split_requests(batch, left, right, settings_.buckets);
    std::lock_guard lock(queue_mutex_);
    queued_rows_ = queued_rows_ - rows_held(batch) + rows_held(left) + rows_held(right);
    queued_.insert(it, std::move(left));
    queued_.insert(it, std::move(right));
    std::erase(in_doubt_, &*it);
    unmark_in_flight(it);
    queued_.erase(it);
    store_.set_unwritten_rows(queued_rows_);
    return 0;
  }
  std::size_t written = 0;
  if (a.refused && !batch.keyed.empty()) {
    // One keyed request the table cannot hold: dropped like a row (its key stays
    // uncommitted, so a retry is refused the same way).
    metrics_.rows_refused.Increment(static_cast<double>(batch.rows.size()));
    log::error("the database refuses the increments of the request with Idempotency-Key ",
               batch.keyed.front().key, ": ", *a.refused, "; they are dropped");
  } else if (a.refused) {
    // One row the table cannot hold (e.g. an id above a seed-style INT column, or a
    // total past BIGINT): dropped, loudly, so that it does not block every later
    // batch forever.
    const auto& r = batch.rows.front();
    metrics_.rows_refused.Increment();
    log::error("the database refuses the delta ", r.delta, " of counter (", r.record_type, ", ",
               r.record_id, "): ", *a.refused, "; it is dropped");
  } else if (a.outcome == db::commit_outcome::applied) {
    // A keyed batch writes only the rows of the requests whose keys were new.
    written = batch.keyed.empty() ? batch.rows.size() : a.keyed_rows;
    metrics_.flush_rows.Increment(static_cast<double>(written));
    metrics_.flush_statements.Increment();
  } else {
    metrics_.batches_already_applied.Increment();
    log::info("batch ", batch.seq, " of run ", batch.run_id,
              " was already committed (found in the ledger); not applied again");
  }
  std::lock_guard lock(queue_mutex_);
  queued_rows_ -= rows_held(batch);
  std::erase(in_doubt_, &*it);
  // Gone from the queue before the generation turns even: a read that waited for the
  // flight to end finds it in the table and no longer pending.
  unmark_in_flight(it);
  queued_.erase(it);
  store_.set_unwritten_rows(queued_rows_);
  return written;
}

bool flusher::write_batches(db::connection& conn, write_round& round,
                            std::vector<db::counter_row>& dirty) {
  bool lost = false;
  for (;;) {
    queue_position it;
    {
      std::unique_lock lock(queue_mutex_);
      for (;;) {
        if (round.stop) return lost;
        // Nothing left that is not in flight: this writer is done (another one's
        // refused batch may still be split; that writer writes its halves).
        if (queued_.size() == in_flight_.size()) return lost;
        if (past_deadline()) {
          // Shutting down: what is left stays queued (and in the WAL, when there is one).
          deadline_hit_ = true;
          round.stop = true;
          writers_wake_.notify_all();
          return lost;
        }
        it = next_batch();
        if (it != queued_.end()) break;
        // Every waiting batch conflicts with one before it: wait for a flight to end.
        writers_wake_.wait(lock);
      }
      mark_in_flight(it);
    }
    generation_changed_.notify_all();
    try {
      const auto attempt = commit_with_retries(conn, *it, dirty);
      const std::size_t written = pop_committed(it, attempt);
      std::lock_guard lock(queue_mutex_);
      round.written += written;
      round.popped = true;
    } catch (...) {
      // Rolled back (outcome known) unless the connection went: then the batch stays
      // in doubt until a later attempt resolves it. Either way it stays queued, and the
      // round stops: the other writers finish the batch they hold and start no other.
      try {
        throw;
      } catch (const db::db_error& e) {
        lost = e.connection_lost();
      } catch (...) {
        // Not a database error (bad_alloc): rethrown by write_queued all the same. The
        // transaction may be open on `conn`: it is closed (which rolls it back) as after
        // a lost connection, and the batch resolved against the ledger.
        lost = true;
      }
      std::lock_guard lock(queue_mutex_);
      if (lost && std::find(in_doubt_.begin(), in_doubt_.end(), &*it) == in_doubt_.end())
        in_doubt_.push_back(&*it);
      unmark_in_flight(it);
      round.stop = true;
      if (!round.error) round.error = std::current_exception();
    }
    writers_wake_.notify_all();
    generation_changed_.notify_all();
  }
}

void flusher::write_batches_on_lease(write_round& round) {
  std::vector<db::counter_row> dirty;
  try {
    std::optional<db::pool::lease> lease;
    try {
      // Never waits for a lease to come back: a read or a rollup run may hold one for
      // long, and the round (and a stop's deadline) would wait for this writer.
      if (auto free = pool_.try_acquire()) lease.emplace(std::move(*free));
    } catch (const db::db_error& e) {
      // Refused a connection (the server's max_connections, the account's
      // max_user_connections, or it is down): one writer fewer, not a failed flush. The
      // cycle's own connection writes what this one would have, and meets the database
      // itself if it is gone.
      metrics_.db_error(e.kind());
      if (!helper_refused_.exchange(true)) {
        log::warn("flush: an extra connection for flush.connections was refused (", e.what(),
                  "); flushing over fewer connections");
      }
      return;
    }
    if (!lease) {
      // Every connection of the pool is lent out (to reads, the rollup or the pruner):
      // one writer fewer this round, as above.
      log::debug("flush: no free connection in the pool for an extra writer");
      return;
    }
    helper_refused_.store(false);
    progress();
    // A lease whose connection was lost is closed rather than lent out again.
    if (write_batches(**lease, round, dirty)) lease->discard();
  } catch (...) {
    // Not a database error (a refused connection is handled above): the round stops as
    // after any writer's error.
    std::lock_guard lock(queue_mutex_);
    round.stop = true;
    if (!round.error) round.error = std::current_exception();
    writers_wake_.notify_all();
  }
}

std::size_t flusher::write_queued(db::connection& conn) {
  write_round round;
  // Batches replayed from the WAL first, one run at a time, before any batch is in
  // flight: their committed parts leave the queue (the WAL must hear of it, below, as
  // of any committed batch, or a later replay could send them again).
  for (;;) {
    std::optional<std::uint64_t> run;
    {
      std::lock_guard lock(queue_mutex_);
      for (const auto& b : queued_) {
        if (b.recovered) {
          run = b.run_id;
          break;
        }
      }
    }
    if (!run) break;
    if (past_deadline()) {
      std::lock_guard lock(queue_mutex_);
      deadline_hit_ = true;
      return 0;
    }
    try {
      expand_recovered(conn, *run);
    } catch (const db::db_error&) {
      if (round.popped) release_source();
      throw;
    }
    progress();
    round.popped = true;
  }
  // Writers beside this thread's: one per extra connection, as far as batches wait
  // for them. They start with the round and end with it.
  std::size_t helpers = 0;
  {
    std::lock_guard lock(queue_mutex_);
    const std::size_t waiting = queued_.size();
    helpers = std::min<std::size_t>(settings_.connections - 1, waiting > 0 ? waiting - 1 : 0);
  }
  std::vector<std::thread> writers;
  writers.reserve(helpers);
  for (std::size_t i = 0; i < helpers; ++i) {
    try {
      writers.emplace_back([this, &round] { write_batches_on_lease(round); });
    } catch (const std::system_error& e) {
      // No thread (a process or memory limit): fewer writers, not a failed flush, and
      // never std::terminate with the started ones still joinable.
      log::warn("flush: cannot start another writer thread (", e.what(), "); ", writers.size() + 1,
                " write this round");
      break;
    }
  }
  // Its connection, when lost, is discarded by cycle() as the error comes out, even
  // when the error rethrown below is another writer's.
  conn_lost_ = write_batches(conn, round, dirty_rows_);
  for (auto& w : writers) w.join();
  if (round.popped) release_source();
  if (round.error) std::rethrow_exception(round.error);
  return round.written;
}

flusher::commit_attempt flusher::commit_keyed(db::connection& conn, const db::batch_identity& id,
                                              const flush_batch& batch,
                                              std::vector<db::counter_row>& dirty) {
  const auto outcome = idempotency::commit_keyed_batch(
      conn, settings_.table, id, batch, settings_.idempotency_window,
      [this, &dirty](std::span<const db::counter_row> rows) { return rolled_up_rows(rows, dirty); },
      settings_.buckets);
  if (keyed_ != nullptr && outcome.outcome == db::commit_outcome::applied)
    keyed_->dropped_at_flush(outcome.duplicates, outcome.conflicts);
  if (outcome.duplicates + outcome.conflicts > 0) {
    log::debug("keyed batch ", id.seq, ": ", outcome.duplicates, " requests already committed, ",
               outcome.conflicts, " committed with another body; not applied");
  }
  commit_attempt done;
  done.outcome = outcome.outcome;
  done.keyed_rows = outcome.rows;
  return done;
}

void flusher::progress() {
  last_progress_.store(clock::now().time_since_epoch().count());
}

bool flusher::past_deadline() const {
  return clock::now().time_since_epoch().count() >= deadline_.load();
}

bool flusher::healthy(clock::duration limit) const {
  if (!in_cycle_.load()) return true;
  const auto last = clock::time_point(clock::duration(last_progress_.load()));
  return clock::now() - last < limit;
}

void flusher::publish_ready() {
  metrics_.ready.Set(ready() ? 1 : 0);
}

void flusher::probe_result(bool reachable) {
  const bool was = reachable_.exchange(reachable);
  if (was != reachable) {
    if (reachable) {
      log::info("database probe: reachable again");
    } else {
      log::warn("database probe: the database does not answer; /readyz is 503");
    }
  }
  publish_ready();
  // Back: flush now instead of at the end of the backoff (only on the change, so a
  // schema problem keeps its backoff). Once stopping, the request is refused: fine.
  if (reachable && !was) {
    worker_.request([](const flush_result&) {});
  }
}

void flusher::check_autoincrement(db::connection& conn) {
  const auto st = db::read_autoincrement(conn, settings_.table);
  if (!st) {
    metrics_.set_autoincrement_remaining(std::nullopt);
    return;
  }
  const auto remaining = st->remaining();
  metrics_.set_autoincrement_remaining(static_cast<double>(remaining));
  const bool low = static_cast<double>(remaining) <
                   autoincrement_warn_fraction * static_cast<double>(st->max / st->increment);
  if (low && !autoincrement_warned_) {
    log::warn("table `", settings_.table, "`: its AUTO_INCREMENT column `", st->column, "` (",
              st->column_type, ") has ", remaining, " values left (every flushed row uses one, ",
              "even an update); widen it before it runs out: ALTER TABLE `", settings_.table,
              "` MODIFY `", st->column, "` BIGINT UNSIGNED NOT NULL AUTO_INCREMENT");
  }
  autoincrement_warned_ = low;
}

db::db_error flusher::autoincrement_exhausted(db::connection& conn, const db::db_error& cause) {
  std::string column = "id", type = "its type";
  try {
    if (const auto st = db::read_autoincrement(conn, settings_.table)) {
      column = st->column;
      type = st->column_type;
      metrics_.set_autoincrement_remaining(0.0);
    }
  } catch (const db::db_error&) {
    // The message still names the table and the remedy.
  }
  return db::db_error(cause.code(),
                      "table `" + settings_.table + "`: its AUTO_INCREMENT column `" + column +
                          "` (" + type + ") is exhausted (" + cause.what() +
                          "); no counter row can be written until it is widened: ALTER TABLE `" +
                          settings_.table + "` MODIFY `" + column +
                          "` BIGINT UNSIGNED NOT NULL AUTO_INCREMENT. Nothing is dropped: the "
                          "batches stay queued and flushing resumes by itself once it is wider",
                      true);
}

flush_result flusher::cycle() {
  const auto started = clock::now();
  progress();
  in_cycle_.store(true);
  deadline_hit_ = false;
  conn_lost_ = false;
  {
    std::lock_guard lock(rollups_mutex_);
    if (next_rollups_) {
      settings_.rollups = std::move(*next_rollups_);
      next_rollups_.reset();
      schema_verified_ = false;
    }
  }
  flush_result result;
  bool wal_failed = false;
  std::optional<db::pool::lease> lease;
  try {
    lease.emplace(pool_.acquire());
    progress();
    statement_budget_.store((*lease)->max_statement_bytes());
    if (!schema_verified_ || fatal_) {
      const auto limits = db::verify_schema(**lease, settings_.table, !settings_.rollups.empty());
      if (settings_.limits != nullptr)
        settings_.limits->set(limits.max_record_type, limits.max_record_id);
      // Rollup targets are not checked here: the flusher writes only the dirty marks,
      // never an owning table, so a missing one must not stop the flush (the roller
      // checks each target at each run, see rollup::roller).
      verify_bucket_tables(**lease);
      check_autoincrement(**lease);
      progress();
      schema_verified_ = true;
      fatal_ = false;  // unless the writes below meet the problem again
      if (keyed_ != nullptr) {
        if (!limits.idempotency_keys && keyed_->table_present()) {
          log::error("table `", db::idempotency_keys_table,
                     limits.idempotency_keys_unmigrated
                         ? "` has the layout of an earlier version (`created` TIMESTAMP, no "
                           "`created_ms`): requests with an Idempotency-Key are refused (503) "
                           "until slotted-counterd --migrate converts it; the others flush as "
                           "ever"
                         : "` does not exist: requests with an Idempotency-Key are refused (503) "
                           "until slotted-counterd --migrate creates it; the others flush as ever");
        }
        keyed_->set_table_present(limits.idempotency_keys);
        // Looked for again at every cycle until --migrate has made it.
        if (!limits.idempotency_keys) schema_verified_ = false;
      }
    }
    // The backlog first, oldest first; only then anything new from the store.
    result.rows = write_queued(**lease);
    if (!deadline_hit_) {
      wal_failed = !take_from_store();
      progress();
      result.rows += write_queued(**lease);
    }
    if (result.rows == 0) {
      (*lease)->execute(db::ping);  // proves the connection is alive
    } else {
      check_autoincrement(**lease);
    }
    progress();
    // A committed batch the WAL still holds (its committed record not yet logged, or
    // unloggable on a full disk) is replayed after a crash, and only its ledger row
    // makes that a no-op: prune only once the WAL has logged every batch committed.
    // In bounded chunks, once a minute, and at every cycle while the last run could not
    // delete all that was due (a backlog catches up).
    if (!deadline_hit_ && (ledger_prune_behind_ || clock::now() - last_prune_ > prune_every) &&
        (source_ == nullptr || source_->batches_logged_committed())) {
      std::uint64_t keep_from = next_seq_;
      {
        std::lock_guard lock(queue_mutex_);
        if (!queued_.empty()) keep_from = queued_.front().seq;
      }
      last_prune_ = clock::now();
      try {
        ledger_prune_behind_ =
            db::prune_ledger(**lease, {settings_.instance_id, run_id_, keep_from},
                             ledger_max_age_seconds, ledger_others_max_age_seconds)
                .behind;
      } catch (const db::db_error& e) {
        // Instances prune the same rows: a lock conflict there is not a failed flush.
        if (e.connection_lost() ||
            (e.kind() != db::error_kind::deadlock && e.kind() != db::error_kind::lock_wait_timeout))
          throw;
        metrics_.db_error(e.kind());
      }
    }
    // Keys past two windows, of every instance (any may do it), in bounded chunks: at
    // least once per min(1 minute, window), and at every cycle while the last prune
    // found more than its chunks could take (a keyed rate above what one prune a
    // minute deletes), so that the table stays about two windows of keys.
    if (!deadline_hit_ && keyed_ != nullptr && keyed_->table_present() &&
        (keys_prune_behind_ ||
         clock::now() - last_key_prune_ >
             std::min<clock::duration>(prune_every, settings_.idempotency_window))) {
      last_key_prune_ = clock::now();
      constexpr std::size_t chunk = 10000;
      constexpr int chunks = 10;
      try {
        keys_prune_behind_ = idempotency::prune_keys(**lease, settings_.idempotency_window, chunk,
                                                     chunks) == chunk * chunks;
      } catch (const db::db_error& e) {
        // Instances prune the same rows: a lock conflict there is not a failed flush.
        if (e.connection_lost() ||
            (e.kind() != db::error_kind::deadlock && e.kind() != db::error_kind::lock_wait_timeout))
          throw;
        metrics_.db_error(e.kind());
      }
    }
    result.ok = true;
  } catch (const db::db_error& e) {
    if (lease && (e.connection_lost() || conn_lost_)) lease->discard();
    note_failure(e);
    result.error = e.what();
  } catch (const std::exception& e) {
    // Not a database error: forming or writing a batch ran out of memory (bad_alloc),
    // or a bug. The cycle fails and is retried with backoff; the process goes on, and
    // what is queued stays queued. The connection may be mid-statement: closed.
    if (lease) lease->discard();
    note_failure(db::db_error(0, std::string("flush cycle failed: ") + e.what()));
    result.error = e.what();
  }
  lease.reset();
  in_cycle_.store(false);

  if (result.ok) {
    if (consecutive_failures_ > 0 || !ready_.load()) {
      log::info("database reachable and the schema valid; flushing");
    }
    consecutive_failures_ = 0;
    last_error_.clear();
    ready_.store(true);
    reachable_.store(true);  // the cycle just reached it
    publish_ready();
    metrics_.last_flush_success_timestamp_seconds.Set(unix_now());
    if (result.rows > 0) {
      metrics_.flush_duration_seconds.Observe(
          std::chrono::duration<double>(clock::now() - started).count());
      log::debug("flushed ", result.rows, " rows");
    }
  }
  if (result.ok && deadline_hit_) {
    result.ok = false;
    result.error = "the shutdown deadline passed before the backlog was written";
  }
  if (result.ok && wal_failed) {
    // The database is fine, but what is pending could not be logged as batches: it
    // stays in memory and in the log for the next cycle, and this flush did not do
    // what it was asked.
    result.ok = false;
    result.error = "the write-ahead log cannot be written";
  }
  if (result.ok) {
    metrics_.flushes_ok.Increment();
  } else {
    metrics_.flushes_error.Increment();
  }
  update_gauges();
  return result;
}

void flusher::verify_bucket_tables(db::connection& conn) {
  // Missing bucket tables stop the flush of everything (a fatal schema error, checked
  // again at every cycle, so --migrate resumes it): writing the totals without their
  // buckets would leave the two disagreeing for good. Nothing is dropped meanwhile:
  // what is pending stays in memory (and the WAL) up to flush.max_pending_keys.
  const auto missing = db::missing_bucket_tables(conn, settings_.table, settings_.buckets);
  if (missing.empty()) return;
  std::string names;
  for (const auto& t : missing) names += (names.empty() ? "`" : ", `") + t + "`";
  throw db::db_error(0,
                     "table " + names +
                         " does not exist but counters[].buckets needs it; run "
                         "slotted-counterd --migrate (nothing is flushed until then, nothing "
                         "is dropped)",
                     true);
}

void flusher::note_failure(const db::db_error& e) {
  ++consecutive_failures_;
  ready_.store(false);
  publish_ready();
  metrics_.db_error(e.kind());
  if (e.fatal()) fatal_ = true;
  // Logged once per distinct problem, not once per cycle.
  if (e.what() != last_error_) {
    last_error_ = e.what();
    if (e.fatal()) {
      log::error("flush stopped: ", e.what(), " (fatal: fix it and the flusher resumes; ",
                 "increments are kept in memory up to flush.max_pending_keys)");
    } else {
      log::warn("flush failed, retrying with backoff: ", e.what(), " (error ", e.code(), ", ",
                db::kind_name(e.kind()), ")");
    }
  }
}

void flusher::update_gauges() {
  std::optional<clock::time_point> oldest = store_.oldest();
  std::size_t queued_rows = 0;
  {
    std::lock_guard lock(queue_mutex_);
    queued_rows = queued_rows_;
    if (!queued_.empty() && (!oldest || queued_.front().oldest_arrival < *oldest)) {
      oldest = queued_.front().oldest_arrival;
    }
  }
  // The pending entries, as against the limit (keyed requests reserved or pending
  // included).
  metrics_.pending_keys.Set(static_cast<double>(store_.keys() + queued_rows + store_.held()));
  metrics_.pending_oldest_age_seconds.Set(
      oldest ? std::chrono::duration<double>(clock::now() - *oldest).count() : 0.0);
}

counter_reading flusher::read_total(const store::counter_key& key) {
  // The pending sum, or nullopt when it is out of range.
  const auto queued_delta = [&]() -> std::optional<std::int64_t> {
    std::int64_t sum = store_.pending(key) + (keyed_ != nullptr ? keyed_->pending(key) : 0);
    for (const auto& b : queued_) {
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
  reading.retry = read_stable(
      [&](db::connection& conn) {
        reading.persisted = db::read_count(conn, settings_.table, key.record_type, key.record_id);
      },
      [&]() -> std::string {
        const auto pending = queued_delta();
        if (!pending)
          return "the counter's pending sum is out of range; retry after the next flush";
        reading.pending = *pending;
        return {};
      });
  return reading;
}

series_reading flusher::read_series(const store::counter_key& key, store::granularity g,
                                    std::int64_t from, std::int64_t to) {
  // What is pending for these buckets: the store, keyed requests not yet in a batch,
  // and the queued batches' bucket rows (under queue_mutex_).
  const auto queued_buckets = [&](std::map<std::int64_t, __int128>& sums) {
    std::vector<std::pair<std::int64_t, std::int64_t>> found;
    store_.pending_buckets(key, g, from, to, found);
    if (keyed_ != nullptr) keyed_->pending_buckets(key, g, from, to, found);
    for (const auto& [bucket, delta] : found) sums[bucket] += delta;
    for (const auto& b : queued_) {
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
  series_reading reading;
  reading.retry = read_stable(
      [&](db::connection& conn) {
        sums.clear();
        for (const auto& [bucket, count] :
             db::read_series(conn, settings_.table, g, key.record_type, key.record_id, from, to))
          sums[bucket] += count;
      },
      [&] {
        queued_buckets(sums);
        return std::string();
      });
  if (!reading.retry.empty()) return reading;
  for (const auto& [bucket, count] : sums) {
    if (count != 0) reading.points.emplace_back(bucket, count);
  }
  return reading;
}

std::string flusher::read_stable(const std::function<void(db::connection&)>& read_db,
                                 const std::function<std::string()>& add_pending) {
  auto lease = pool_.acquire();
  try {
    return lease.use([&](db::connection& conn) -> std::string {
      // Retry until no commit started or ended during the database read and no batch
      // is in doubt; rather than answer a figure that may count a batch twice or not
      // at all, give up (503) after a few tries.
      const auto stable = [&] { return generation_ % 2 == 0 && in_doubt_.empty(); };
      for (int attempt = 0; attempt < 20; ++attempt) {
        std::uint64_t before = 0;
        {
          std::unique_lock lock(queue_mutex_);
          if (!generation_changed_.wait_for(lock, std::chrono::milliseconds(200), stable)) continue;
          before = generation_;
        }
        read_db(conn);
        std::lock_guard lock(queue_mutex_);
        if (auto why = add_pending(); !why.empty()) return why;
        if (generation_ == before && stable()) return {};
      }
      return "the counter is being written; retry";
    });
  } catch (const db::db_error& e) {
    metrics_.db_error(e.kind());
    throw;
  }
}

std::vector<flush_batch> uncommitted_parts(const flush_batch& b,
                                           const std::vector<std::uint64_t>& committed) {
  const std::uint64_t formed = formed_seq(b.seq);
  std::vector<std::uint64_t> nodes;  // split indices of committed parts of b
  for (const auto seq : committed) {
    if (formed_seq(seq) == formed) nodes.push_back(split_node(seq));
  }
  std::vector<flush_batch> out;
  const auto walk = [&](auto& self, const flush_batch& part) -> void {
    const std::uint64_t node = split_node(part.seq);
    if (part.rows.empty() || std::find(nodes.begin(), nodes.end(), node) != nodes.end()) return;
    // Nodes are at least 1, so halving m stops at node or below it.
    const bool below = std::any_of(nodes.begin(), nodes.end(), [&](std::uint64_t m) {
      while (m > node) m >>= 1;
      return m == node;
    });
    // Split indices are heap positions in 20 bits; deeper ones cannot come from a split.
    if (!below || node >= (std::uint64_t{1} << (63 - split_low_bits))) return out.push_back(part);
    auto [left, right] = split_batch(part);
    self(self, left);
    self(self, right);
  };
  walk(walk, b);
  return out;
}

void flusher::expand_recovered(db::connection& conn, std::uint64_t run) {
  // One look at the ledger for every queued batch of that run.
  const auto committed = db::committed_split_parts(conn, settings_.instance_id, run);
  std::lock_guard lock(queue_mutex_);
  for (auto it = queued_.begin(); it != queued_.end();) {
    flush_batch& b = *it;
    // A keyed batch stays whole: its keys tell which of its requests committed.
    const bool ours = b.recovered && b.run_id == run && b.keyed.empty();
    if (!b.keyed.empty() && b.run_id == run) b.recovered = false;
    if (ours) b.recovered = false;
    auto parts =
        ours && !committed.empty() ? uncommitted_parts(b, committed) : std::vector<flush_batch>{};
    if (!ours || committed.empty() || (parts.size() == 1 && parts.front().seq == b.seq)) {
      ++it;
      continue;
    }
    // The committed parts are in the table already and leave the queue; the others
    // take its place.
    log::info("batch ", b.seq, " of run ", b.run_id,
              " was split before the restart and parts of it committed; ", parts.size(),
              " parts left to write");
    queued_rows_ -= rows_held(b);
    for (auto& part : parts) {
      queued_rows_ += rows_held(part);
      queued_.insert(it, std::move(part));
    }
    std::erase(in_doubt_, &b);
    it = queued_.erase(it);
  }
  store_.set_unwritten_rows(queued_rows_);
}

}  // namespace slotted::flush
