#include "app/counter_service.hpp"

#include <boost/asio/post.hpp>
#include <optional>

#include "db/errors.hpp"
#include "db/keys.hpp"
#include "ingest/clients.hpp"

namespace slotted {

namespace net = boost::asio;

namespace {

// The HTTP loop running on this thread (null elsewhere), set by serve_on().
thread_local net::io_context* this_thread_loop = nullptr;

// Not done: `why` (a code of errc) and the text the answer tells.
http::backend_result unavailable(std::error_code why, std::string detail) {
  return {why ? why : make_error_code(errc::unavailable), std::move(detail)};
}

http::backend_result unavailable(const failure& f) {
  return unavailable(f.code, f.text());
}

// An increment's outcome, from the store (store::add_result) or the committer
// (durable::commit_result): anything but the three shared outcomes is `unavailable`.
template <typename Outcome>
http::backend_result from_outcome(Outcome r, errc why, std::string detail) {
  if (r == Outcome::applied) return {};
  if (r == Outcome::over_limit) return {errc::over_limit};
  if (r == Outcome::out_of_range) return {errc::out_of_range};
  return unavailable(why, std::move(detail));
}

http::backend_result from_commit(durable::commit_result r) {
  using durable::commit_result;
  if (r == commit_result::stopping) return unavailable(errc::draining, "draining");
  if (r == commit_result::log_unsynced) {
    return unavailable(errc::wal_sync_failed, "the write-ahead log cannot be synced; retry later");
  }
  return from_outcome(r, errc::wal_write_failed,
                      "the write-ahead log cannot be written; retry later");
}

// What the key index's answer means for the request, or nullopt when the index leaves it
// open (fresh: not known here; over_limit, which only admit() can say).
std::optional<http::backend_result> from_index(const idempotency::admission& a) {
  using idempotency::admit_result;
  switch (a.result) {
    case admit_result::replay: {
      http::backend_result r;
      r.replayed = true;
      r.count = a.accepted;
      return r;
    }
    case admit_result::conflict:
      return http::backend_result{errc::conflict};
    case admit_result::in_progress:
      return unavailable(errc::retry_later,
                         "a request with this Idempotency-Key is being logged; retry");
    case admit_result::fresh:
    case admit_result::over_limit:
      break;
  }
  return std::nullopt;
}

http::backend_result no_keys_table() {
  return unavailable(errc::database_unavailable,
                     "the database has no Idempotency-Key table yet (slotted-counterd --migrate "
                     "creates it); nothing of this request was applied");
}

// Runs `read` (which answers a backend_result) on a database worker and answers `done`
// with its result, or unavailable when the database cannot be reached.
template <typename Read>
void read_on(net::thread_pool& workers, Read read, http::backend::done_fn done) {
  net::post(workers, [read = std::move(read), done = std::move(done)] {
    http::backend_result r;
    try {
      r = read();
    } catch (const db::db_error& e) {
      // max_statement_time: the database is there, this read was too slow.
      r = e.statement_timed_out()
              ? unavailable(errc::read_timed_out,
                            std::string("the read took too long and was stopped at its "
                                        "time limit (") +
                                e.what() + ")")
              : unavailable(errc::database_unavailable,
                            std::string("database not reachable: ") + e.what());
    }
    done(std::move(r));
  });
}

}  // namespace

counter_service::counter_service(parts p, const store::pending_limits& limits)
    : p_(p), limits_(limits) {}

void counter_service::serve_on(net::io_context* loop) {
  this_thread_loop = loop;
}

void counter_service::submit(ingest::increment_request& request, const submit_answer& answer) {
  // A keyed request stays pending until its flush, charged by its number of increments
  // (store::charge_of): it takes a copy sized to them, never the HTTP thread's reused
  // vector, whose capacity the largest request read on that thread has set.
  if (request.keyed()) return add_keyed(idempotency::keyed_request(request), answer.later());
  if (p_.committer) return add_durable(std::move(request.increments), answer.later());
  answer.now(add(request.increments));
}

http::backend_result counter_service::add(std::span<const ingest::increment> increments) {
  if (!ingest::has_clients(increments)) {
    return from_outcome(p_.store.add(increments, limits_), errc::unavailable, "internal error");
  }
  // Items with a `client` (checked by the router: their counters dedupe) are held apart
  // as unique entries; the others go to the store as always. The pending bounds are
  // checked once for the whole request, before anything is applied.
  if (p_.store.over_pending_limit(limits_)) return {errc::over_limit};
  auto [plain, entries] = ingest::split_clients(increments, p_.dedupe);
  if (!plain.empty()) {
    const auto r = p_.store.add(plain, SIZE_MAX);
    if (r != store::add_result::applied)
      return from_outcome(r, errc::unavailable, "internal error");
  }
  const std::size_t duplicates = p_.uniques.add(entries);
  p_.metrics.unique_items_accepted.Increment(static_cast<double>(entries.size()));
  p_.metrics.unique_items_duplicate.Increment(static_cast<double>(duplicates));
  return {};
}

void counter_service::add_durable(std::vector<ingest::increment>&& increments, done_fn done) {
  auto answer = [done = std::move(done)](durable::commit_result r) { done(from_commit(r)); };
  if (!ingest::has_clients(increments))
    return p_.committer->submit(std::move(increments), this_thread_loop, std::move(answer));
  // Items with a `client`: their unique entries are logged with the other items, in one
  // record, and held apart once logged (as add() does without a WAL).
  auto [plain, entries] = ingest::split_clients(increments, p_.dedupe);
  p_.committer->submit(std::move(plain), std::move(entries), this_thread_loop, std::move(answer));
}

void counter_service::add_keyed(idempotency::keyed_request&& request, done_fn done) {
  if (!p_.keyed.table_present()) return done(no_keys_table());
  // Without a WAL a fresh request is pending at once; with one, only once logged.
  const auto a = p_.keyed.admit(request, limits_, p_.committer == nullptr);
  if (auto known = from_index(a)) return done(std::move(*known));
  if (a.result == idempotency::admit_result::over_limit) return done({errc::over_limit});
  if (p_.committer) {
    return p_.committer->submit_keyed(
        std::move(request), this_thread_loop,
        [done = std::move(done)](durable::commit_result r) { done(from_commit(r)); });
  }
  done({});
}

void counter_service::find_keyed(std::string key, idempotency::body_hash hash,
                                 std::int64_t received_ms, done_fn done) {
  // The index first: it knows what this instance accepted, flushed or not.
  if (auto known = from_index(p_.keyed.lookup(key, hash))) return done(std::move(*known));
  if (!p_.keyed.table_present()) return done(no_keys_table());
  // Then the keys table: what any instance committed (this one's index may have forgotten
  // it, or never seen it). A read on a database worker, like a counter's.
  const auto window = std::chrono::duration_cast<std::chrono::milliseconds>(p_.keyed.window());
  net::post(p_.db_workers,
            [this, key = std::move(key), hash, received_ms, window, done = std::move(done)] {
              done(find_committed(key, hash, received_ms, window));
            });
}

http::backend_result counter_service::find_committed(const std::string& key,
                                                     idempotency::body_hash hash,
                                                     std::int64_t received_ms,
                                                     std::chrono::milliseconds window) {
  try {
    const auto found = p_.pool.acquire().use([&](db::connection& conn) {
      return db::find_committed_key(conn, key, received_ms, window);
    });
    if (!found) return {};
    if (found->body_hash != idempotency::hex(hash)) return {errc::conflict};
    p_.keyed.count_replay();
    http::backend_result r;
    r.replayed = true;
    r.count = found->accepted;
    return r;
  } catch (const db::db_error& e) {
    p_.metrics.db_error(e.kind());
    return unavailable(
        errc::database_unavailable,
        std::string("this Idempotency-Key cannot be looked up, the database is not reachable (") +
            e.what() + "); nothing of this request was applied");
  }
}

void counter_service::read_counter(store::counter_key key, done_fn done) {
  read_on(
      p_.db_workers,
      [this, key] {
        const auto reading = p_.flusher.read_total(key);
        if (!reading) return unavailable(reading.failed());
        http::backend_result r;
        r.persisted = reading->persisted;
        r.pending = reading->pending;
        return r;
      },
      std::move(done));
}

void counter_service::read_counters(std::uint32_t record_type,
                                    std::vector<std::uint64_t> record_ids, done_fn done) {
  read_on(
      p_.db_workers,
      [this, record_type, ids = std::move(record_ids)] {
        const auto reading = p_.flusher.read_totals(record_type, ids);
        if (!reading) return unavailable(reading.failed());
        http::backend_result r;
        for (const auto& t : reading->totals)
          r.totals.push_back({t.record_id, t.persisted, t.pending});
        return r;
      },
      std::move(done));
}

void counter_service::read_top(std::uint32_t record_type, std::optional<top_range> range,
                               std::size_t limit, done_fn done) {
  read_on(
      p_.db_workers,
      [this, record_type, range, limit] {
        auto reading =
            range ? p_.flusher.read_top(record_type, limit, range->gran, range->from, range->to)
                  : p_.flusher.read_top(record_type, limit);
        if (!reading) return unavailable(reading.failed());
        http::backend_result r;
        r.top = std::move(reading->items);
        return r;
      },
      std::move(done));
}

void counter_service::reset_counter(store::counter_key key, done_fn done) {
  // Ordered with the flusher's batches, on its thread (see flush::flusher::request_reset).
  p_.flusher.request_reset(key, [done = std::move(done)](const flush::reset_result& f) {
    if (!f) return done(unavailable(f.failed()));
    http::backend_result r;
    r.cleared = f->persisted + f->pending;
    done(std::move(r));
  });
}

void counter_service::read_series(store::counter_key key, store::granularity g, std::int64_t from,
                                  std::int64_t to, done_fn done) {
  read_on(
      p_.db_workers,
      [this, key, g, from, to] {
        auto reading = p_.flusher.read_series(key, g, from, to);
        if (!reading) return unavailable(reading.failed());
        http::backend_result r;
        r.points = std::move(reading->points);
        return r;
      },
      std::move(done));
}

void counter_service::flush_now(done_fn done) {
  p_.flusher.request_flush([done = std::move(done)](const flush::flush_result& f) {
    if (!f) return done(unavailable(f.failed()));
    done(http::backend_result::counted(*f));
  });
}

void counter_service::rollup_now(done_fn done) {
  p_.roller.request([done = std::move(done)](const rollup::rollup_result& r) {
    if (!r) return done(unavailable(r.failed()));
    done(http::backend_result::counted(*r));
  });
}

std::string counter_service::metrics_text() {
  p_.flusher.update_gauges();
  return p_.metrics.serialize();
}

}  // namespace slotted
