// Idempotency-Key pieces without a database: key syntax, the body hash, the local
// index, keyed batch forming and splitting, and keyed requests in WAL records.

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "db/sql.hpp"
#include "durable/record.hpp"
#include "idempotency/keyed_batches.hpp"
#include "idempotency/keyed_store.hpp"
#include "support/batch_content.hpp"

namespace slotted::idempotency {
namespace {

using namespace std::chrono_literals;

keyed_request req(std::string key, std::vector<ingest::increment> incs) {
  keyed_request r;
  r.key = std::move(key);
  r.hash = hash_of(incs);
  r.increments = std::move(incs);
  return r;
}

TEST(IdempotencyKey, SyntaxIsOneTo128OfTheAllowedCharacters) {
  EXPECT_TRUE(valid_key("a"));
  EXPECT_TRUE(valid_key("AZaz09._:-"));
  EXPECT_TRUE(valid_key(std::string(128, 'k')));
  EXPECT_FALSE(valid_key(""));
  EXPECT_FALSE(valid_key(std::string(129, 'k')));
  for (const char* bad : {"a b", "a/b", "a;b", "a\"b", "a\tb", "\xc3\xbc", "a,b", "a'b"}) {
    EXPECT_FALSE(valid_key(bad)) << bad;
  }
}

TEST(IdempotencyKey, TheBodyHashIsFixedAcrossProcessesAndTellsBodiesApart) {
  const std::vector<ingest::increment> a{{7, 42, 1}};
  // Pinned: two instances (and a restarted one) must compute the same value.
  EXPECT_EQ(hex(hash_of(a)), hex(hash_of(std::vector<ingest::increment>{{7, 42, 1}})));
  EXPECT_EQ(hex(hash_of(a)).size(), 32u);
  EXPECT_NE(hash_of(a), hash_of(std::vector<ingest::increment>{{7, 42, 2}}));
  EXPECT_NE(hash_of(a), hash_of(std::vector<ingest::increment>{{7, 43, 1}}));
  EXPECT_NE(hash_of(a), hash_of(std::vector<ingest::increment>{{8, 42, 1}}));
  EXPECT_NE(hash_of(a), hash_of(std::vector<ingest::increment>{{7, 42, 1}, {7, 42, 1}}));
  // Pinned: a change of the hash makes every key committed before it a conflict.
  EXPECT_EQ(hex(hash_of(a)), "af8d468453a557e1555ec26fc63761ea");
}

TEST(KeyedStore, AnswersRetriesConflictsAndTheLimit) {
  metrics::registry m;
  store::pending_store bound(1);
  keyed_store s(1h, 100, m, bound);
  auto first = req("k1", {{7, 1, 2}, {7, 2, 3}});
  auto retry = first;
  auto other = req("k1", {{7, 1, 9}});
  EXPECT_EQ(s.admit(first, 1000, true).result, admit_result::fresh);
  EXPECT_EQ(s.pending_entries(), 3u);  // its key and its two increments
  EXPECT_EQ(bound.pending_entries(), 3u);
  EXPECT_EQ(s.pending({7, 1}), 2);
  const auto again = s.admit(retry, 1000, true);
  EXPECT_EQ(again.result, admit_result::replay);
  EXPECT_EQ(again.accepted, 2u);
  EXPECT_EQ(s.admit(other, 1000, true).result, admit_result::conflict);
  EXPECT_EQ(s.pending_entries(), 3u);  // neither was added
  // The pending limit counts everything pending: the keyed requests and the rest.
  auto k2 = req("k2", {{7, 3, 1}});
  bound.set_unwritten({997, 0});
  EXPECT_EQ(s.admit(k2, 1000, true).result, admit_result::over_limit);
  bound.set_unwritten({996, 0});
  EXPECT_EQ(s.admit(k2, 1000, true).result, admit_result::fresh);
  EXPECT_EQ(bound.pending_entries(), 996u + 3u + 2u);
  // Taken for a flush: still known, no longer pending (the flusher's queue counts
  // them from then on).
  EXPECT_EQ(s.take_pending().size(), 2u);
  EXPECT_EQ(s.pending_entries(), 0u);
  EXPECT_EQ(bound.held(), 0u);
  EXPECT_EQ(s.admit(retry, 1000, true).result, admit_result::replay);
  EXPECT_EQ(s.indexed_keys(), 2u);
}

TEST(KeyedStore, AReservationIsInProgressUntilAcceptedOrAbandoned) {
  metrics::registry m;
  store::pending_store bound(1);
  keyed_store s(1h, 100, m, bound);
  auto r = req("k", {{1, 1, 1}});
  auto copy = r;
  EXPECT_EQ(s.admit(r, 1000, false).result, admit_result::fresh);
  EXPECT_EQ(s.pending_entries(), 0u);
  EXPECT_EQ(bound.held(), 2u);  // reserved: held against the limit while it is logged
  EXPECT_EQ(s.admit(copy, 1000, false).result, admit_result::in_progress);
  s.abandon("k");  // the log could not be written: as if never seen
  EXPECT_EQ(bound.held(), 0u);
  EXPECT_EQ(s.admit(copy, 1000, false).result, admit_result::fresh);
  s.accept(std::move(copy));
  EXPECT_EQ(s.pending_entries(), 2u);
  EXPECT_EQ(bound.held(), 2u);
  auto again = r;
  EXPECT_EQ(s.admit(again, 1000, false).result, admit_result::replay);
}

// For a request that is not admitted (its `at` cannot be filed): what the index knows,
// and nothing remembered or pending because of the look-up.
TEST(KeyedStore, ALookUpAnswersAsAdmitButAdmitsNothing) {
  metrics::registry m;
  store::pending_store bound(1);
  keyed_store s(1h, 100, m, bound);
  auto r = req("k", {{7, 1, 2}, {7, 2, 3}});
  const auto h = r.hash;
  EXPECT_EQ(s.lookup("k", h).result, admit_result::fresh);
  EXPECT_EQ(s.indexed_keys(), 0u);
  EXPECT_EQ(s.pending_entries(), 0u);
  ASSERT_EQ(s.admit(r, 1000, false).result, admit_result::fresh);
  EXPECT_EQ(s.lookup("k", h).result, admit_result::in_progress);
  s.accept(std::move(r));
  const auto found = s.lookup("k", h);
  EXPECT_EQ(found.result, admit_result::replay);
  EXPECT_EQ(found.accepted, 2u);
  EXPECT_EQ(s.lookup("k", hash_of(std::vector<ingest::increment>{{7, 1, 9}})).result,
            admit_result::conflict);
  EXPECT_EQ(s.pending_entries(), 3u);
  EXPECT_EQ(s.indexed_keys(), 1u);
  EXPECT_NE(m.serialize().find("slotted_counterd_idempotency_replays_total 1\n"),
            std::string::npos);
}

TEST(KeyedStore, ForgetsKeysPastTheWindowAndBeyondItsBound) {
  metrics::registry m;
  {
    store::pending_store bound(1);
    keyed_store s(50ms, 100, m, bound);
    auto r = req("old", {{1, 1, 1}});
    auto retry = r;
    ASSERT_EQ(s.admit(r, 1000, true).result, admit_result::fresh);
    std::this_thread::sleep_for(60ms);  // the window is the condition
    EXPECT_EQ(s.admit(retry, 1000, true).result, admit_result::fresh);
  }
  metrics::registry m2;
  // 16 shards, one key each: every shard forgets its oldest beyond its share.
  store::pending_store bound(1);
  keyed_store s(1h, 16, m2, bound);
  for (int i = 0; i < 200; ++i) {
    auto r = req("k" + std::to_string(i), {{1, 1, 1}});
    ASSERT_EQ(s.admit(r, 1000, true).result, admit_result::fresh);
  }
  s.take_pending();
  EXPECT_LE(s.indexed_keys(), 16u);
  auto newest = req("k199", {{1, 1, 1}});
  EXPECT_EQ(s.admit(newest, 1000, true).result, admit_result::replay);
  auto oldest = req("k0", {{1, 1, 1}});
  EXPECT_EQ(s.admit(oldest, 1000, true).result, admit_result::fresh);
}

// Issue 21, item 1: a keyed request without increments is a pending entry (its key), so
// fresh keys with `[]` cannot pile up past the limit.
TEST(KeyedStore, RequestsWithoutIncrementsCountAgainstThePendingLimit) {
  metrics::registry m;
  store::pending_store bound(1);
  keyed_store s(1h, 100000, m, bound);
  std::size_t fresh = 0;
  for (int i = 0; i < 1000; ++i) {
    auto r = req("empty-" + std::to_string(i), {});
    const auto a = s.admit(r, 100, true).result;
    if (a == admit_result::fresh)
      ++fresh;
    else
      EXPECT_EQ(a, admit_result::over_limit) << i;
  }
  EXPECT_EQ(fresh, 100u);
  EXPECT_EQ(bound.pending_entries(), 100u);
  EXPECT_EQ(s.take_pending().size(), 100u);
  EXPECT_EQ(bound.pending_entries(), 0u);
}

// Issue 21, item 9: one bound for everything pending. Keyed requests not yet in a batch
// count against the limit of plain increments, and the other way round.
TEST(KeyedStore, PendingKeyedRequestsCountAgainstTheLimitOfPlainIncrements) {
  metrics::registry m;
  store::pending_store bound(4);
  keyed_store s(1h, 100000, m, bound);
  auto r = req("k", {{7, 1, 1}, {7, 2, 1}, {7, 3, 1}, {7, 4, 1}});  // 5 entries
  ASSERT_EQ(s.admit(r, 10, true).result, admit_result::fresh);
  std::size_t applied = 0;
  for (std::uint64_t id = 100; id < 120; ++id) {
    const std::vector<ingest::increment> inc{{1, id, 1}};
    if (bound.add(inc, 10) == store::add_result::applied) ++applied;
  }
  EXPECT_EQ(applied, 5u);  // 5 keyed entries + 5 counters reach the limit of 10
  auto other = req("k2", {{7, 9, 1}});
  EXPECT_EQ(s.admit(other, 10, true).result, admit_result::over_limit);
}

// Whether `s` remembers `key` (with the body {1, 1, 1}), without changing what it
// remembers: an unknown key asked with no pending room left is refused, not remembered.
bool remembers(keyed_store& s, const std::string& key) {
  auto probe = req(key, {{1, 1, 1}});
  const auto r = s.admit(probe, 0, true).result;
  EXPECT_NE(r, admit_result::fresh);
  return r != admit_result::over_limit;
}

// The index holds each key once, in an age list (oldest first) beside the hash set:
// expiry must drop from the old end, stop at an entry in flight until it is accepted,
// and keep the list and the set the same entries.
TEST(KeyedStore, ExpiryDropsTheOldestFirstAndNeverAnEntryInFlight) {
  metrics::registry m;
  // A window long enough that the keys admitted after the sleep outlive the test on a
  // loaded machine.
  store::pending_store bound(1);
  keyed_store s(1s, 100000, m, bound);
  auto held = req("held", {{1, 1, 1}});
  auto held_copy = held;
  ASSERT_EQ(s.admit(held, 1000, false).result, admit_result::fresh);  // in flight
  for (int i = 0; i < 40; ++i) {
    auto r = req("a" + std::to_string(i), {{1, 1, 1}});
    ASSERT_EQ(s.admit(r, 1000, true).result, admit_result::fresh);
  }
  std::this_thread::sleep_for(1100ms);  // the window is the condition
  for (int i = 0; i < 40; ++i) {
    auto r = req("b" + std::to_string(i), {{1, 1, 1}});
    ASSERT_EQ(s.admit(r, 1000, true).result, admit_result::fresh);
  }
  s.take_pending();  // expires every shard
  // Past its window, but in flight: still answered as being logged.
  EXPECT_EQ(s.admit(held_copy, 1000, false).result, admit_result::in_progress);
  for (int i = 0; i < 40; ++i) EXPECT_TRUE(remembers(s, "b" + std::to_string(i))) << i;
  // The "a" keys behind "held" in its shard wait for it; every other one is gone.
  std::size_t a_left = 0;
  for (int i = 0; i < 40; ++i) a_left += remembers(s, "a" + std::to_string(i)) ? 1 : 0;
  EXPECT_LT(a_left, 40u);
  EXPECT_EQ(s.indexed_keys(), 1 + 40 + a_left);
  s.accept(std::move(held));
  s.take_pending();
  EXPECT_EQ(s.indexed_keys(), 40u);
  for (int i = 0; i < 40; ++i) EXPECT_FALSE(remembers(s, "a" + std::to_string(i))) << i;
  EXPECT_FALSE(remembers(s, "held"));
}

TEST(KeyedStore, BeyondMaxKeysTheOldestGoButNeverAReservation) {
  metrics::registry m;
  store::pending_store bound(1);
  keyed_store s(1h, 16, m, bound);  // 16 shards: one key each
  auto held = req("held", {{1, 1, 1}});
  auto held_copy = held;
  ASSERT_EQ(s.admit(held, 1000, false).result, admit_result::fresh);  // in flight
  // A reservation abandoned in the middle of a shard's age list: unlinked at once.
  auto gone = req("gone", {{1, 1, 1}});
  for (int i = 0; i < 200; ++i) {
    auto r = req("k" + std::to_string(i), {{1, 1, 1}});
    ASSERT_EQ(s.admit(r, 1000, true).result, admit_result::fresh);
    if (i == 100) {
      ASSERT_EQ(s.admit(gone, 1000, false).result, admit_result::fresh);
    }
  }
  s.abandon("gone");
  s.take_pending();
  EXPECT_EQ(s.admit(held_copy, 1000, false).result, admit_result::in_progress);
  EXPECT_FALSE(remembers(s, "gone"));
  EXPECT_TRUE(remembers(s, "k199"));  // the newest of its shard
  std::size_t left = 0;
  for (int i = 0; i < 200; ++i) left += remembers(s, "k" + std::to_string(i)) ? 1 : 0;
  // Each shard keeps its newest; the one of "held" also what came after it.
  EXPECT_EQ(s.indexed_keys(), 1 + left);
  EXPECT_LT(left, 200u);
  s.accept(std::move(held));
  s.take_pending();
  EXPECT_LE(s.indexed_keys(), 16u);
  EXPECT_FALSE(remembers(s, "k0"));
  EXPECT_TRUE(remembers(s, "k199"));
}

// A key remembered again (restore() after a WAL replay) moves to the newest end: expiry
// then drops the entries before it in its shard and stops at it.
TEST(KeyedStore, AKeyRememberedAgainMovesToTheNewestEnd) {
  metrics::registry m;
  store::pending_store bound(1);
  keyed_store s(1s, 100000, m, bound);
  std::vector<keyed_request> first;
  for (int i = 0; i < 100; ++i) first.push_back(req("k" + std::to_string(i), {{1, 1, 1}}));
  s.restore({}, first);                 // k0 the oldest of its shard, behind it about 6 others
  std::this_thread::sleep_for(1100ms);  // the window is the condition
  s.restore({}, {req("k0", {{1, 1, 1}})});
  s.take_pending();  // expires every shard
  EXPECT_TRUE(remembers(s, "k0"));
  EXPECT_EQ(s.indexed_keys(), 1u);
  for (int i = 1; i < 100; ++i) EXPECT_FALSE(remembers(s, "k" + std::to_string(i))) << i;
}

// Keys a WAL replay brings back are remembered as of when they were received (logged
// with them), not as of the restart: a window after that they are forgotten. Given in
// any order (batches first, fresh keys before expired ones), the index still forgets
// the expired ones, and every pending request is pending again, forgotten key or not.
TEST(KeyedStore, KeysRestoredFromTheWalAreForgottenAWindowAfterTheyWereReceived) {
  metrics::registry m;
  store::pending_store bound(1);
  keyed_store s(1h, 100000, m, bound);
  const std::int64_t now = now_ms();
  const auto at = [](keyed_request r, std::int64_t received_ms) {
    r.received_ms = received_ms;
    return r;
  };
  std::vector<keyed_request> in_batches, pending;
  for (int i = 0; i < 50; ++i) {
    in_batches.push_back(at(req("fresh-b" + std::to_string(i), {{1, 1, 1}}), now - 59 * 60'000));
    in_batches.push_back(at(req("old-b" + std::to_string(i), {{1, 1, 1}}), now - 3'601'000));
    pending.push_back(at(req("fresh-p" + std::to_string(i), {{1, 1, 1}}), now - 1000));
    pending.push_back(at(req("old-p" + std::to_string(i), {{1, 1, 1}}), now - 2 * 3'600'000));
  }
  s.restore(std::move(pending), in_batches);
  EXPECT_EQ(s.indexed_keys(), 100u);
  for (int i = 0; i < 50; ++i) {
    const auto n = std::to_string(i);
    EXPECT_TRUE(remembers(s, "fresh-b" + n));
    EXPECT_TRUE(remembers(s, "fresh-p" + n));
    EXPECT_FALSE(remembers(s, "old-b" + n));
    EXPECT_FALSE(remembers(s, "old-p" + n));
  }
  // 100 requests pending again, each its key and its one increment.
  EXPECT_EQ(s.pending_entries(), 200u);
  EXPECT_EQ(bound.pending_entries(), 200u);
}

// Issue 21, item 1: batches are bounded by keys and by the bytes of their claim, not by
// items alone: keyed requests without increments used to form one batch of them all.
TEST(KeyedBatches, CutByKeysAndByTheBytesOfTheirClaim) {
  std::mt19937_64 rng(1);
  std::vector<keyed_request> empty;
  for (int i = 0; i < 1000; ++i) empty.push_back(req("e" + std::to_string(10000 + i), {}));
  std::size_t dropped = 0;
  auto batches = form_keyed_batches(empty, 100, 10, 77, 1, rng, {}, dropped);
  ASSERT_EQ(batches.size(), 10u);
  for (const auto& b : batches) EXPECT_EQ(test::requests_of(b).size(), 100u);

  std::vector<keyed_request> long_keys;
  for (int i = 0; i < 1000; ++i) {
    std::string key = "k" + std::to_string(10000 + i);
    long_keys.push_back(req(key + std::string(128 - key.size(), 'x'), {{1, 1, 1}}));
  }
  constexpr std::size_t budget = 64 * 1024;
  batches = form_keyed_batches(long_keys, 100000, 10, 77, 1, rng, {}, dropped, store::no_buckets(),
                               budget);
  EXPECT_GT(batches.size(), 1u);
  std::size_t keys = 0;
  for (const auto& b : batches) {
    keys += test::requests_of(b).size();
    std::size_t bytes = claim_fixed_bytes;
    for (const auto& r : test::requests_of(b)) bytes += claim_bytes(r);
    EXPECT_LE(bytes, budget);
    // The bound holds for the statement itself.
    std::vector<std::string> quoted;
    for (const auto& r : test::requests_of(b)) quoted.push_back("'" + r.key + "'");
    EXPECT_LE(db::idempotency_keys_claim(db::mariadb_dialect(), test::requests_of(b), quoted,
                                         "'" + std::string(64, 'i') + "'", UINT64_MAX >> 1,
                                         UINT64_MAX >> 1, std::chrono::hours(24), INT64_MAX >> 1)
                  .size(),
              budget);
  }
  EXPECT_EQ(keys, 1000u);
}

TEST(KeyedBatches, SortedByKeyCutByItemsAndAKeyTwiceKeptOnce) {
  std::mt19937_64 rng(1);
  std::vector<keyed_request> rs{req("c", {{1, 1, 1}, {1, 2, 1}}), req("a", {{1, 1, 2}}),
                                req("b", {{1, 1, 4}, {1, 1, -4}}), req("a", {{1, 9, 9}})};
  std::size_t dropped = 0;
  const auto batches = form_keyed_batches(rs, 2, 10, 77, 5, rng, {}, dropped);
  EXPECT_EQ(dropped, 1u);
  // a (1 item) | b (2: with a it would make 3) | c (2).
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].seq, 5u);
  EXPECT_EQ(batches[2].seq, 7u);
  ASSERT_EQ(test::requests_of(batches[0]).size(), 1u);
  EXPECT_EQ(test::requests_of(batches[0])[0].key, "a");
  EXPECT_EQ(test::requests_of(batches[0])[0].increments[0].delta, 2);  // the first "a" stays
  ASSERT_EQ(batches[0].rows.size(), 1u);
  EXPECT_EQ(batches[0].rows[0].delta, 2);
  ASSERT_EQ(test::requests_of(batches[1]).size(), 1u);
  EXPECT_EQ(test::requests_of(batches[1])[0].key, "b");
  EXPECT_TRUE(batches[1].rows.empty());  // b sums to zero
  EXPECT_EQ(test::requests_of(batches[2])[0].key, "c");
  EXPECT_EQ(batches[2].rows.size(), 2u);
  // "c" has two items and starts a batch of its own.
  std::vector<keyed_request> one{req("c", {{1, 1, 1}, {1, 2, 1}})};
  const auto alone = form_keyed_batches(one, 1, 10, 77, 1, rng, {}, dropped);
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_EQ(alone[0].rows.size(), 2u);
}

// One key twice in a take, the second received more than a window after the first
// (the index forgot the first, as after a database outage longer than the window): the
// second takes the key over, so both are applied, the first in an earlier batch. A
// third inside the second's window is its retry and dropped.
TEST(KeyedBatches, AKeyTwiceMoreThanAWindowApartGoesIntoALaterBatchNotDropped) {
  std::mt19937_64 rng(1);
  constexpr std::chrono::milliseconds window = 10s;
  auto first = req("k", {{1, 1, 1}});
  first.received_ms = 1'000'000;
  auto second = req("k", {{1, 1, 2}});
  second.received_ms = first.received_ms + 2 * window.count();
  auto retry = req("k", {{1, 1, 2}});
  retry.received_ms = second.received_ms + window.count();  // inside: a retry
  auto other = req("j", {{1, 2, 4}});
  other.received_ms = second.received_ms;
  std::size_t dropped = 0;
  const auto batches =
      form_keyed_batches({first, second, retry, other}, 100, 10, 1, 5, rng, {}, dropped,
                         store::no_buckets(), std::size_t{1} << 20, window);
  EXPECT_EQ(dropped, 1u);
  ASSERT_EQ(batches.size(), 2u);
  ASSERT_EQ(test::requests_of(batches[0]).size(), 2u);  // j and the first k
  EXPECT_EQ(test::requests_of(batches[0])[1].key, "k");
  EXPECT_EQ(test::requests_of(batches[0])[1].received_ms, first.received_ms);
  ASSERT_EQ(test::requests_of(batches[1]).size(), 1u);
  EXPECT_EQ(test::requests_of(batches[1])[0].key, "k");
  EXPECT_EQ(test::requests_of(batches[1])[0].received_ms, second.received_ms);
  EXPECT_EQ(batches[1].seq, 6u);
  ASSERT_EQ(batches[1].rows.size(), 1u);
  EXPECT_EQ(batches[1].rows[0].delta, 2);
}

TEST(KeyedBatches, ASplitDividesRequestsNotRows) {
  std::mt19937_64 rng(1);
  std::size_t dropped = 0;
  auto b = form_keyed_batches(
               {req("a", {{1, 1, 1}}), req("b", {{1, 1, 2}, {1, 2, 3}}), req("c", {{1, 3, 4}})},
               100, 10, 1, 1, rng, {}, dropped)
               .front();
  store::flush_batch left = b, right = b;
  split_requests(b, left, right);
  ASSERT_EQ(test::requests_of(left).size(), 1u);
  ASSERT_EQ(test::requests_of(right).size(), 2u);
  EXPECT_EQ(left.rows.size(), 1u);
  EXPECT_EQ(right.rows.size(), 3u);
  EXPECT_EQ(right.rows.front().slot, b.rows.front().slot);
}

TEST(KeyedWal, KeyedRecordsAndBatchesReplay) {
  using namespace slotted::durable;
  std::mt19937_64 rng(1);
  std::size_t dropped = 0;
  std::string log{segment_magic};
  append_keyed(log, req("k1", {{1, 1, 5}}));
  append_increments(log, std::vector<ingest::increment>{{2, 2, 1}});
  // The swap: k1 and the increments go into batches.
  auto batches = form_keyed_batches({req("k1", {{1, 1, 5}})}, 10, 10, 3, 2, rng, {}, dropped);
  store::flush_batch plain;
  plain.run_id = 3;
  plain.seq = 1;
  plain.rows = {{2, 2, 0, 1}};
  batches.insert(batches.begin(), plain);
  append_batches(log, batches);
  append_keyed(log, req("k2", {{1, 2, 7}, {1, 3, 8}}));
  replay_state state;
  ASSERT_EQ(scan_segment(log, state).outcome, scan_result::status::ok);
  ASSERT_EQ(state.batches().size(), 2u);
  EXPECT_TRUE(test::requests_of(state.batches()[0]).empty());
  ASSERT_EQ(test::requests_of(state.batches()[1]).size(), 1u);
  EXPECT_EQ(test::requests_of(state.batches()[1])[0].key, "k1");
  EXPECT_EQ(test::requests_of(state.batches()[1])[0].hash,
            hash_of(std::vector<ingest::increment>{{1, 1, 5}}));
  ASSERT_EQ(state.keyed().size(), 1u);  // k2 is not in a batch yet
  EXPECT_EQ(state.keyed()[0].key, "k2");
  EXPECT_EQ(state.keyed()[0].increments.size(), 2u);
  EXPECT_TRUE(state.deltas().empty());

  // A snapshot keeps both the batched and the pending keyed requests.
  std::string snap{segment_magic};
  append_snapshot(snap, state.batches(), {}, state.keyed());
  replay_state after;
  ASSERT_EQ(scan_segment(snap, after).outcome, scan_result::status::ok);
  ASSERT_EQ(after.batches().size(), 2u);
  EXPECT_EQ(test::requests_of(after.batches()[1]).size(), 1u);
  ASSERT_EQ(after.keyed().size(), 1u);
  EXPECT_EQ(after.keyed()[0].key, "k2");
  // A committed record ends the batches; the pending keyed request stays.
  append_committed(snap);
  replay_state committed;
  ASSERT_EQ(scan_segment(snap, committed).outcome, scan_result::status::ok);
  EXPECT_TRUE(committed.batches().empty());
  EXPECT_EQ(committed.keyed().size(), 1u);
}

TEST(KeyedWal, AMalformedKeyedRecordIsRefused) {
  std::string good;
  durable::append_keyed(good, req("k1", {{1, 1, 5}}));
  const std::string payload = good.substr(durable::record_header_bytes);
  durable::replay_state state;
  EXPECT_TRUE(state.apply(payload));
  std::string bad_key = payload;
  bad_key[2] = '/';  // not a key character
  EXPECT_FALSE(state.apply(bad_key));
  EXPECT_FALSE(state.apply(payload.substr(0, payload.size() - 1)));
  std::string zero = payload;
  zero[1] = 0;  // the longest key, 128 characters, where there are 2
  EXPECT_FALSE(state.apply(zero));
  EXPECT_EQ(state.keyed().size(), 1u);
}

}  // namespace
}  // namespace slotted::idempotency
