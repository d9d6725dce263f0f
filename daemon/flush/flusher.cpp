// The flusher: its cycle, its lifecycle and its health.
#include "flush/flusher.hpp"

#include <algorithm>
#include <thread>

#include "db/errors.hpp"
#include "flush/internal.hpp"
#include "idempotency/keyed_batches.hpp"
#include "util/log.hpp"

namespace slotted::flush {

flusher::flusher(settings s, store::pending_store& store, db::pool& pool,
                 metrics::registry& metrics)
    : settings_(std::move(s)),
      store_(store),
      pool_(pool),
      metrics_(metrics),
      queue_({[&store](store::pending_charge held) { store.set_unwritten(held); },
              [&metrics](std::size_t n) {
                metrics.flush_batches_in_flight.Set(static_cast<double>(n));
              }}),
      housekeeping_(settings_, queue_, metrics, [this] { progress(); }),
      reader_(settings_, queue_, store, pool, metrics),
      reset_job_(settings_, queue_, store, pool, metrics, deadline_, [this] { progress(); }),
      writer_(settings_, queue_, pool, metrics, housekeeping_, deadline_, [this] { progress(); }),
      worker_([this] { return cycle(); },
              [this](const flush_result& r) { return r ? settings_.interval : next_backoff(); },
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
  writer_.start();
  worker_.start();
}

void flusher::request_flush(std::function<void(const flush_result&)> done) {
  if (!worker_.request(done)) done(flush_result(errc::draining, "shutting down"));
}

void flusher::request_reset(const store::counter_key& key,
                            std::function<void(const reset_result&)> done) {
  // A waiter of the worker: it runs on the flusher thread right after the cycle that
  // starts after this request, before any later cycle can take from the store.
  const bool queued = worker_.request([this, key, done](const flush_result& flushed) {
    done(reset_job_.run(key, flushed, stopping_.load(), run_id_, next_seq_));
  });
  if (!queued) done(reset_job_.refused({errc::draining, "shutting down"}));
}

std::size_t flusher::stop(clock::time_point deadline) {
  stopping_.store(true);
  // Before the join: a cycle already draining a long backlog must stop at it too.
  deadline_.set(deadline);
  auto waiters = worker_.stop();
  flush_result result = cycle();
  while (!result && !fatal_ && !deadline_.passed()) {
    const auto pause = std::min<clock::duration>(next_backoff(), deadline - clock::now());
    std::this_thread::sleep_for(std::max<clock::duration>(pause, clock::duration::zero()));
    result = cycle();
  }
  // The final flush is over: no round comes after it.
  writer_.stop();
  for (auto& w : waiters) w(result);
  // Unique entries not taken yet are unwritten too (a stop that cannot reach the
  // database must not report everything written).
  return queue_.rows() + store_.keys() + (keyed_ != nullptr ? keyed_->pending_entries() : 0) +
         (uniques_ != nullptr ? uniques_->size() : 0);
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
  queue_.set_committing(true);
  // Every statement of a batch must stay within the server's max_allowed_packet (as the
  // cycle's connection read it): a plain batch's upserts take up to max_row_bytes a row.
  const std::size_t budget = statement_budget_.load();
  const std::size_t max_rows = std::clamp<std::size_t>(
      budget > 1024 ? (budget - 1024) / max_row_bytes : 1, 1, settings_.max_rows_per_statement);
  const auto form = [this, budget, max_rows](std::vector<store::pending_delta>&& deltas,
                                             clock::time_point oldest) {
    auto batches = form_batches(std::move(deltas), max_rows, settings_.slots, run_id_, next_seq_,
                                rng_, oldest);
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
    // Unique entries become batches of their own (db/uniques.hpp).
    auto unique = form_unique_batches(max_rows);
    std::move(unique.begin(), unique.end(), std::back_inserter(batches));
    return batches;
  };
  const auto even_again = [this] { queue_.set_committing(false); };
  bool logged = true;
  try {
    if (source_ != nullptr) {
      // The durable path forms and logs them between two groups, then queues them here.
      logged = source_->take(
          form, [this](std::vector<flush_batch>&& b) { queue_.publish(std::move(b)); });
    } else {
      std::vector<store::pending_delta> deltas;
      const auto oldest = store_.take_all(deltas);
      auto batches = form(std::move(deltas), oldest.value_or(clock::now()));
      if (!batches.empty()) queue_.publish(std::move(batches));
    }
  } catch (...) {
    // Forming ran out of memory (cycle() reports it): reads must not wait for good.
    even_again();
    throw;
  }
  even_again();
  return logged;
}

void flusher::enqueue(std::vector<flush_batch> batches) {
  queue_.enqueue_recovered(std::move(batches));
}

std::vector<flush_batch> flusher::queued_copy() {
  return queue_.copy();
}

void flusher::retag_all(std::uint64_t tag) {
  queue_.retag_all(tag);
}

void flusher::update_gauges() {
  std::optional<clock::time_point> oldest = store_.oldest();
  const auto queued = queue_.held();
  if (queued.oldest_arrival && (!oldest || *queued.oldest_arrival < *oldest))
    oldest = queued.oldest_arrival;
  // The pending entries, as against the limit (keyed requests reserved or pending
  // included), and their bytes, as against flush.max_pending_bytes.
  metrics_.pending_keys.Set(static_cast<double>(store_.keys() + queued.rows + store_.held()));
  metrics_.pending_bytes.Set(static_cast<double>(store_.charged().bytes));
  metrics_.pending_oldest_age_seconds.Set(
      oldest ? std::chrono::duration<double>(clock::now() - *oldest).count() : 0.0);
}

void flusher::set_rollups(std::vector<db::rollup_target> rollups) {
  util::lock_guard lock(rollups_mutex_);
  next_rollups_ = std::move(rollups);
}

void flusher::progress() {
  last_progress_.store(clock::now().time_since_epoch().count());
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

// One flush, as a sequence of named steps: take the config's latest rollups, connect,
// verify the schema when due, write the backlog and then what is new, prove the
// connection and prune (housekeeping.hpp), and publish the outcome.
flush_result flusher::cycle() {
  const auto started = clock::now();
  begin_cycle();
  flush_result result = std::size_t{0};
  bool wal_failed = false;
  std::optional<db::pool::lease> lease;
  bool writing = false;  // writer_.conn_lost() speaks of this cycle
  try {
    lease.emplace(pool_.acquire());
    progress();
    statement_budget_.store((*lease)->max_statement_bytes());
    // fatal_ stays set unless the writes meet the problem again.
    if (housekeeping_.verify_when_due(**lease, fatal_)) fatal_ = false;
    writing = true;
    const std::size_t rows = write_backlog_then_new(**lease, wal_failed);
    housekeeping_.after_writes(**lease, rows, run_id_, next_seq_);
    result = rows;
  } catch (const db::db_error& e) {
    if (lease && (e.connection_lost() || (writing && writer_.conn_lost()))) lease->discard();
    note_failure(e);
    result = failure(errc::database_unavailable, e.what());
  } catch (const std::exception& e) {
    // Not a database error: forming or writing a batch ran out of memory (bad_alloc),
    // or a bug. The cycle fails and is retried with backoff; the process goes on, and
    // what is queued stays queued. The connection may be mid-statement: closed.
    if (lease) lease->discard();
    note_failure(
        db::db_error(db::error_class::other, std::string("flush cycle failed: ") + e.what()));
    result = failure(errc::unavailable, e.what());
  }
  lease.reset();
  in_cycle_.store(false);
  finish_cycle(result, started, wal_failed);
  return result;
}

void flusher::begin_cycle() {
  progress();
  in_cycle_.store(true);
  queue_.clear_deadline_hit();
  util::lock_guard lock(rollups_mutex_);
  if (next_rollups_) {
    settings_.rollups = std::move(*next_rollups_);
    next_rollups_.reset();
    housekeeping_.schema_changed();
  }
}

std::size_t flusher::write_backlog_then_new(db::connection& conn, bool& wal_failed) {
  // The backlog first, oldest first; only then anything new from the store.
  std::size_t rows = writer_.write_queued(conn);
  if (!queue_.deadline_hit()) {
    wal_failed = !take_from_store();
    progress();
    rows += writer_.write_queued(conn);
  }
  return rows;
}

void flusher::finish_cycle(flush_result& result, clock::time_point started, bool wal_failed) {
  if (result) publish_success(result, started);
  if (result && queue_.deadline_hit()) {
    result = failure(errc::deadline_passed,
                     "the shutdown deadline passed before the backlog was written");
  }
  if (result && wal_failed) {
    // The database is fine, but what is pending could not be logged as batches: it
    // stays in memory and in the log for the next cycle, and this flush did not do
    // what it was asked.
    result = failure(errc::wal_write_failed, "the write-ahead log cannot be written");
  }
  if (result) {
    metrics_.flushes_ok.Increment();
  } else {
    metrics_.flushes_error.Increment();
  }
  update_gauges();
}

void flusher::publish_success(const flush_result& result, clock::time_point started) {
  if (consecutive_failures_ > 0 || !ready_.load()) {
    log::info("database reachable and the schema valid; flushing");
  }
  consecutive_failures_ = 0;
  last_error_.clear();
  ready_.store(true);
  reachable_.store(true);  // the cycle just reached it
  publish_ready();
  metrics_.last_flush_success_timestamp_seconds.Set(unix_now());
  if (*result > 0) {
    metrics_.flush_duration_seconds.Observe(
        std::chrono::duration<double>(clock::now() - started).count());
    log::debug("flushed ", *result, " rows");
  }
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
                 "increments are kept in memory up to flush.max_pending_keys and "
                 "flush.max_pending_bytes)");
    } else {
      log::warn("flush failed, retrying with backoff: ", e.what(), " (error ",
                e.native_code().empty() ? "-" : e.native_code(), ", ", db::kind_name(e.kind()),
                ")");
    }
  }
}

}  // namespace slotted::flush
