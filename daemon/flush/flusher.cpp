#include "flush/flusher.hpp"

#include <algorithm>
#include <map>

#include "db/errors.hpp"
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

// The rows a queued batch holds against flush.max_pending_keys: its totals and its
// bucket counts.
std::size_t rows_held(const flush_batch& b) {
  return b.rows.size() + b.bucket_rows.size();
}

// Ledger rows older than this are pruned; a batch's outcome is only ever looked up by
// the run that formed it, while it is still queued.
constexpr std::uint64_t ledger_max_age_seconds = 3600;
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
  return queued_rows_ + store_.keys() + (keyed_ != nullptr ? keyed_->pending_items() : 0);
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
  const auto form = [this](std::vector<store::pending_delta>&& deltas, clock::time_point oldest) {
    auto batches = form_batches(std::move(deltas), settings_.max_rows_per_statement,
                                settings_.slots, run_id_, next_seq_, rng_, oldest);
    next_seq_ += batches.size();
    if (keyed_ != nullptr) {
      // Keyed requests become batches of their own (taken here, on the WAL's thread
      // when there is one, so the batches record covers them as it covers the deltas).
      std::size_t dropped = 0;
      auto keyed = idempotency::form_keyed_batches(
          keyed_->take_pending(), settings_.max_rows_per_statement, settings_.slots, run_id_,
          next_seq_, rng_, clock::now(), dropped, settings_.buckets);
      next_seq_ += keyed.size();
      keyed_->dropped_at_flush(dropped, 0);
      std::move(keyed.begin(), keyed.end(), std::back_inserter(batches));
    }
    return batches;
  };
  bool logged = true;
  if (source_ != nullptr) {
    // The durable path forms and logs them between two groups, then queues them here.
    logged = source_->take(form, [this](std::vector<flush_batch>&& b) { publish(std::move(b)); });
  } else {
    std::vector<store::pending_delta> deltas;
    const auto oldest = store_.take_all(deltas);
    auto batches = form(std::move(deltas), oldest.value_or(clock::now()));
    if (!batches.empty()) publish(std::move(batches));
  }
  {
    std::lock_guard lock(queue_mutex_);
    ++generation_;
  }
  generation_changed_.notify_all();
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
  for (auto& b : batches) b.recovered = true;
  publish(std::move(batches));
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

std::span<const db::counter_row> flusher::rolled_up_rows(std::span<const db::counter_row> rows) {
  dirty_rows_.clear();
  if (settings_.rollups.empty()) return {};
  for (const auto& r : rows) {
    const bool rolled_up =
        std::any_of(settings_.rollups.begin(), settings_.rollups.end(),
                    [&](const db::rollup_target& t) { return t.record_type == r.record_type; });
    if (rolled_up) dirty_rows_.push_back(r);
  }
  return dirty_rows_;
}

void flusher::set_committing(bool committing) {
  {
    std::lock_guard lock(queue_mutex_);
    if ((generation_ % 2 == 1) != committing) ++generation_;
  }
  generation_changed_.notify_all();
}

flusher::commit_attempt flusher::commit_with_retries(db::connection& conn, const flush_batch& b) {
  const db::batch_identity id{settings_.instance_id, b.run_id, b.seq};
  for (int attempt = 0;; ++attempt) {
    try {
      commit_attempt done;
      done.outcome = b.keyed.empty() ? db::commit_batch(conn, settings_.table, id, b.rows,
                                                        rolled_up_rows(b.rows), b.bucket_rows)
                                     : commit_keyed(conn, id, b);
      progress();
      return done;
    } catch (const db::db_error& e) {
      progress();  // an answer, even an error, is a sign of life
      // Not a bad row: no row can be written. Nothing is dropped; the batch stays
      // queued until the column is widened (checked again at each retry).
      if (db::is_autoincrement_exhaustion(e.code(), e.what()))
        throw autoincrement_exhausted(conn, e);
      if (e.data_error()) return {db::commit_outcome{}, e.what()};
      const auto kind = e.kind();
      if (kind == db::error_kind::connection) {
        std::lock_guard lock(queue_mutex_);
        in_doubt_ = true;
      }
      // Past the stop deadline a retry would hold the stop for another lock wait
      // (up to innodb_lock_wait_timeout): the batch stays queued instead.
      if ((kind != db::error_kind::deadlock && kind != db::error_kind::lock_wait_timeout) ||
          attempt + 1 >= lock_retries || past_deadline()) {
        throw;
      }
      metrics_.db_error(kind);
      std::uniform_int_distribution<int> pause_ms(5, 20 << attempt);
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms(rng_)));
    }
  }
}

std::size_t flusher::pop_committed(const commit_attempt& a) {
  const flush_batch& batch = queued_.front();  // only this thread pops
  if (a.refused && splittable(batch)) {
    // Rolled back, so nothing of it was applied: split it to find the rows at fault
    // and let the others through. A keyed batch is split by its requests (a request is
    // applied whole or not at all); its halves' rows may then add up to more than the
    // whole's (a counter in both halves), so the count of queued rows follows them.
    auto [left, right] = split_batch(batch);
    if (!batch.keyed.empty()) idempotency::split_requests(batch, left, right, settings_.buckets);
    std::lock_guard lock(queue_mutex_);
    queued_rows_ = queued_rows_ - rows_held(batch) + rows_held(left) + rows_held(right);
    queued_.pop_front();
    queued_.push_front(std::move(right));
    queued_.push_front(std::move(left));
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
    written = batch.keyed.empty() ? batch.rows.size() : last_keyed_rows_;
    metrics_.flush_rows.Increment(static_cast<double>(written));
    metrics_.flush_statements.Increment();
  } else {
    metrics_.batches_already_applied.Increment();
    log::info("batch ", batch.seq, " of run ", batch.run_id,
              " was already committed (found in the ledger); not applied again");
  }
  std::lock_guard lock(queue_mutex_);
  queued_rows_ -= rows_held(batch);
  queued_.pop_front();
  in_doubt_ = false;
  store_.set_unwritten_rows(queued_rows_);
  return written;
}

std::size_t flusher::write_queued(db::connection& conn) {
  std::size_t written = 0, popped = 0;
  try {
    while (true) {
      const flush_batch* batch = nullptr;
      {
        std::lock_guard lock(queue_mutex_);
        if (queued_.empty()) break;
        batch = &queued_.front();  // only this thread pops, so it stays valid
      }
      if (past_deadline()) {
        // Shutting down: what is left stays queued (and in the WAL, when there is one).
        deadline_hit_ = true;
        break;
      }
      if (batch->recovered) {
        // Committed parts leave the queue: the WAL must hear of it (release below) as
        // of any committed batch, or a later replay could send them again.
        expand_recovered(conn);
        progress();
        ++popped;
        continue;
      }
      // Around each batch the generation is odd: a concurrent read_total() may or may
      // not see it in the database.
      set_committing(true);
      const auto attempt = commit_with_retries(conn, *batch);
      const bool splits = attempt.refused && splittable(*batch);
      written += pop_committed(attempt);
      if (!splits) ++popped;
      set_committing(false);
    }
  } catch (const db::db_error& e) {
    // Rolled back (outcome known) unless the connection went: then the batch stays in
    // doubt (and the generation odd) until a later attempt resolves it.
    if (!e.connection_lost()) set_committing(false);
    if (popped > 0) release_source();
    throw;
  }
  if (popped > 0) release_source();
  return written;
}

db::commit_outcome flusher::commit_keyed(db::connection& conn, const db::batch_identity& id,
                                         const flush_batch& batch) {
  const auto outcome = idempotency::commit_keyed_batch(
      conn, settings_.table, id, batch, settings_.idempotency_window,
      [this](std::span<const db::counter_row> rows) { return rolled_up_rows(rows); },
      settings_.buckets);
  last_keyed_rows_ = outcome.rows;
  if (keyed_ != nullptr && outcome.outcome == db::commit_outcome::applied)
    keyed_->dropped_at_flush(outcome.duplicates, outcome.conflicts);
  if (outcome.duplicates + outcome.conflicts > 0) {
    log::debug("keyed batch ", id.seq, ": ", outcome.duplicates, " requests already committed, ",
               outcome.conflicts, " committed with another body; not applied");
  }
  return outcome.outcome;
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
    if (!schema_verified_ || fatal_) {
      const auto limits = db::verify_schema(**lease, settings_.table, !settings_.rollups.empty());
      if (settings_.limits != nullptr)
        settings_.limits->set(limits.max_record_type, limits.max_record_id);
      for (const auto& target : settings_.rollups) db::verify_rollup_target(**lease, target);
      verify_bucket_tables(**lease);
      check_autoincrement(**lease);
      progress();
      schema_verified_ = true;
      fatal_ = false;  // unless the writes below meet the problem again
      if (keyed_ != nullptr) {
        if (!limits.idempotency_keys && keyed_->table_present()) {
          log::error("table `", db::idempotency_keys_table,
                     "` does not exist: requests with an Idempotency-Key are refused (503) "
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
    if (!deadline_hit_ && clock::now() - last_prune_ > prune_every &&
        (source_ == nullptr || source_->batches_logged_committed())) {
      std::uint64_t keep_from = next_seq_;
      {
        std::lock_guard lock(queue_mutex_);
        if (!queued_.empty()) keep_from = queued_.front().seq;
      }
      db::prune_ledger(**lease, {settings_.instance_id, run_id_, keep_from},
                       ledger_max_age_seconds);
      last_prune_ = clock::now();
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
    if (lease && e.connection_lost()) lease->discard();
    note_failure(e);
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
  // Keyed requests not yet in a batch count by their items, as against the limit.
  const std::size_t keyed = keyed_ != nullptr ? keyed_->pending_items() : 0;
  metrics_.pending_keys.Set(static_cast<double>(store_.keys() + queued_rows + keyed));
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
  auto lease = pool_.acquire();
  counter_reading reading;
  try {
    // Retry until no commit started or ended during the database read and no batch is
    // in doubt; rather than answer a figure that may count a batch twice or not at
    // all, give up (503) after a few tries.
    const auto stable = [&] { return generation_ % 2 == 0 && !in_doubt_; };
    bool exact = false;
    for (int attempt = 0; attempt < 20 && !exact; ++attempt) {
      std::uint64_t before = 0;
      {
        std::unique_lock lock(queue_mutex_);
        if (!generation_changed_.wait_for(lock, std::chrono::milliseconds(200), stable)) continue;
        before = generation_;
      }
      reading.persisted = db::read_count(*lease, settings_.table, key.record_type, key.record_id);
      std::lock_guard lock(queue_mutex_);
      const auto pending = queued_delta();
      if (!pending) {
        reading.retry = "the counter's pending sum is out of range; retry after the next flush";
        return reading;
      }
      reading.pending = *pending;
      exact = generation_ == before && stable();
    }
    if (!exact) reading.retry = "the counter is being written; retry";
  } catch (const db::db_error& e) {
    if (e.connection_lost()) lease.discard();
    metrics_.db_error(e.kind());
    throw;
  }
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
  auto lease = pool_.acquire();
  series_reading reading;
  try {
    // As read_total(): retry until no commit started or ended during the database read
    // and no batch is in doubt, else give up (503).
    const auto stable = [&] { return generation_ % 2 == 0 && !in_doubt_; };
    for (int attempt = 0; attempt < 20; ++attempt) {
      std::uint64_t before = 0;
      {
        std::unique_lock lock(queue_mutex_);
        if (!generation_changed_.wait_for(lock, std::chrono::milliseconds(200), stable)) continue;
        before = generation_;
      }
      const auto persisted =
          db::read_series(*lease, settings_.table, g, key.record_type, key.record_id, from, to);
      std::map<std::int64_t, __int128> sums;
      for (const auto& [bucket, count] : persisted) sums[bucket] += count;
      std::lock_guard lock(queue_mutex_);
      queued_buckets(sums);
      if (generation_ != before || !stable()) continue;
      for (const auto& [bucket, count] : sums) {
        if (count != 0) reading.points.emplace_back(bucket, count);
      }
      return reading;
    }
    reading.retry = "the counter is being written; retry";
  } catch (const db::db_error& e) {
    if (e.connection_lost()) lease.discard();
    metrics_.db_error(e.kind());
    throw;
  }
  return reading;
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

void flusher::expand_recovered(db::connection& conn) {
  std::uint64_t run = 0;
  {
    std::lock_guard lock(queue_mutex_);
    run = queued_.front().run_id;
  }
  // One look at the ledger for every queued batch of that run.
  const auto committed = db::committed_split_parts(conn, settings_.instance_id, run);
  std::lock_guard lock(queue_mutex_);
  std::deque<flush_batch> expanded;
  for (auto& b : queued_) {
    // A keyed batch stays whole: its keys tell which of its requests committed.
    const bool ours = b.recovered && b.run_id == run && b.keyed.empty();
    if (!b.keyed.empty() && b.run_id == run) b.recovered = false;
    if (ours) b.recovered = false;
    auto parts =
        ours && !committed.empty() ? uncommitted_parts(b, committed) : std::vector<flush_batch>{};
    if (!ours || committed.empty() || (parts.size() == 1 && parts.front().seq == b.seq)) {
      expanded.push_back(std::move(b));
      continue;
    }
    // The committed parts are in the table already and leave the queue.
    log::info("batch ", b.seq, " of run ", b.run_id,
              " was split before the restart and parts of it committed; ", parts.size(),
              " parts left to write");
    queued_rows_ -= rows_held(b);
    for (auto& part : parts) {
      queued_rows_ += rows_held(part);
      expanded.push_back(std::move(part));
    }
  }
  queued_.swap(expanded);
  store_.set_unwritten_rows(queued_rows_);
}

}  // namespace slotted::flush
