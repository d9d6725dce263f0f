// The pending bound in bytes (flush.max_pending_bytes, issue 44 item 1): every admission
// path charges what it admits (store/pending_charge.hpp) and refuses once the bytes
// pending reach the bound, whatever the entries count; what leaves gives its charge back.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "durable/committer.hpp"
#include "durable/recovery.hpp"
#include "flush/queue.hpp"
#include "idempotency/keyed_store.hpp"
#include "metrics/metrics.hpp"
#include "store/pending_store.hpp"
#include "store/pending_uniques.hpp"
#include "support/batch_content.hpp"
#include "support/temp_dir.hpp"

namespace slotted::store {
namespace {

using namespace std::chrono_literals;
using ingest::increment;

// A 128-byte client or key, the longest, unique to `n`.
std::string long_name(std::uint64_t n) {
  std::string s = std::to_string(n);
  s.resize(128, 'x');
  return s;
}

unique_entry entry(std::uint64_t n) {
  return {5, 1, 86400, long_name(n), 86500};
}

TEST(PendingBytes, StringsPastTheirOwnBufferAreChargedTheirHeapBlock) {
  EXPECT_EQ(string_heap_bytes(0), 0u);
  EXPECT_EQ(string_heap_bytes(15), 0u);
  EXPECT_EQ(string_heap_bytes(16), 32u);  // 17 bytes and malloc's 8: two 16-byte steps
  EXPECT_EQ(string_heap_bytes(128), 144u);
  EXPECT_EQ(charge_of(entry(1)), (pending_charge{1, unique_entry_bytes + 144}));
}

// Plain counters: the bytes bound refuses a request when the store's keys reach it, with
// entries to spare; the flusher's unwritten batches count too.
TEST(PendingBytes, ThePlainPathIsRefusedAtTheByteBound) {
  pending_store s(4);
  const pending_limits limits{1000, 3 * key_bytes};
  ASSERT_EQ(s.add(std::vector<increment>{{1, 1, 1}, {1, 2, 1}}, limits), add_result::applied);
  EXPECT_EQ(s.charged(), (pending_charge{2, 2 * key_bytes}));
  ASSERT_EQ(s.add(std::vector<increment>{{1, 3, 1}}, limits), add_result::applied);
  EXPECT_EQ(s.add(std::vector<increment>{{1, 4, 1}}, limits), add_result::over_limit);
  EXPECT_EQ(s.pending({1, 4}), 0);
  std::vector<pending_delta> out;
  s.take_all(out);
  EXPECT_EQ(s.add(std::vector<increment>{{1, 4, 1}}, limits), add_result::applied);
  s.set_unwritten({1, 2 * key_bytes});  // a queued batch's rows
  EXPECT_EQ(s.add(std::vector<increment>{{1, 5, 1}}, limits), add_result::over_limit);
  s.set_unwritten({});
  EXPECT_EQ(s.add(std::vector<increment>{{1, 5, 1}}, limits), add_result::applied);
}

// Unique entries: each holds its bytes, a long client more than a short one, until taken.
TEST(PendingBytes, UniqueEntriesHoldTheirBytesUntilTaken) {
  pending_store s(4);
  pending_uniques uniques(s, 4);
  std::vector<unique_entry> entries;
  for (std::uint64_t n = 0; n < 10; ++n) entries.push_back(entry(n));
  entries.push_back(entry(3));  // held once
  EXPECT_EQ(uniques.add(entries), 1u);
  const pending_charge each = charge_of(entry(0));
  EXPECT_EQ(s.charged(), (pending_charge{10, 10 * each.bytes}));
  EXPECT_TRUE(s.over_pending_limit({1000, 10 * each.bytes}));
  EXPECT_FALSE(s.over_pending_limit({1000, 10 * each.bytes + 1}));
  std::vector<unique_entry> taken;
  uniques.take_all(taken);
  EXPECT_EQ(s.charged(), pending_charge{});
}

// A client-less request is refused when the bytes pending reach the bound (unique entries
// in this case), as is one with clients.
TEST(PendingBytes, TheStoreCountsWhatOthersHold) {
  pending_store s(4);
  pending_uniques uniques(s, 4);
  const std::vector<unique_entry> two{entry(1), entry(2)};
  uniques.add(two);
  const pending_limits limits{1000, 2 * charge_of(entry(1)).bytes};
  EXPECT_EQ(s.add(std::vector<increment>{{1, 1, 1}}, limits), add_result::over_limit);
}

idempotency::keyed_request keyed(std::uint64_t n, std::size_t increments) {
  idempotency::keyed_request r;
  r.key = long_name(n);
  for (std::size_t i = 0; i < increments; ++i) r.increments.push_back({7, n * 100 + i, 1});
  r.hash = idempotency::hash_of(r.increments);
  return r;
}

// Keyed requests: charged their request and index entry, whether accepted at once (no
// WAL) or reserved (a WAL logs them); an abandoned reservation and a take give it back.
TEST(PendingBytes, KeyedRequestsAreRefusedAtTheByteBoundAndGiveTheirBytesBack) {
  metrics::registry m;
  pending_store bound(1);
  idempotency::keyed_store s(1h, 1000, m, bound);
  const pending_charge each = keyed_charge(128, 2);
  EXPECT_EQ(each, (pending_charge{3, keyed_request_bytes + 2 * 144 + 2 * keyed_increment_bytes}));
  const pending_limits limits{1000, 3 * each.bytes};
  for (std::uint64_t n = 0; n < 3; ++n) {
    auto r = keyed(n, 2);
    ASSERT_EQ(s.admit(r, limits, n != 2).result, idempotency::admit_result::fresh) << n;
  }
  EXPECT_EQ(bound.charged(), (pending_charge{9, 3 * each.bytes}));
  auto refused = keyed(3, 2);
  EXPECT_EQ(s.admit(refused, limits, true).result, idempotency::admit_result::over_limit);
  s.abandon(long_name(2));  // the reservation (n = 2) could not be logged
  EXPECT_EQ(bound.charged(), (pending_charge{6, 2 * each.bytes}));
  EXPECT_EQ(s.admit(refused, limits, true).result, idempotency::admit_result::fresh);
  auto taken = s.take_pending();
  EXPECT_EQ(taken.size(), 3u);
  EXPECT_EQ(bound.charged(), pending_charge{});
  s.put_back(std::move(taken));
  EXPECT_EQ(bound.charged(), (pending_charge{9, 3 * each.bytes}));
}

// The flusher's queue tells the store what its batches hold, in entries and bytes.
TEST(PendingBytes, QueuedBatchesAreChargedTheirRowsKeyedRequestsAndUniqueEntries) {
  pending_store s(1);
  flush::queue q({[&s](pending_charge held) { s.set_unwritten(held); }, {}});
  flush_batch plain;
  plain.seq = 1;
  plain.rows = {{1, 1, 0, 1}, {1, 2, 0, 1}};
  flush_batch keyed_batch;
  keyed_batch.seq = 2;
  test::requests_in(keyed_batch).push_back(keyed(1, 2));
  keyed_batch.rows = {{7, 100, 0, 1}, {7, 101, 0, 1}};
  flush_batch unique_batch;
  unique_batch.seq = 3;
  test::unique_in(unique_batch).entries = {entry(1), entry(2)};
  std::vector<flush_batch> all;
  all.push_back(plain);
  all.push_back(keyed_batch);
  all.push_back(unique_batch);
  q.publish(std::move(all));
  const std::size_t bytes =
      4 * key_bytes + keyed_charge(128, 2).bytes + 2 * charge_of(entry(1)).bytes;
  EXPECT_EQ(s.unwritten(), (pending_charge{2 + 3 + 2, bytes}));
  const flush::stop_deadline never;
  while (const auto it = q.take_next(never)) q.pop(*it);
  EXPECT_EQ(s.unwritten(), pending_charge{});
}

// With a WAL: the committer checks the bytes bound before it logs, counting what it
// logged and not yet applied (plain increments and unique entries).
TEST(PendingBytes, TheCommitterRefusesAtTheByteBoundBeforeLogging) {
  const std::string root = test::make_temp_dir("pending-bytes");
  config::wal_config cfg;
  cfg.dir = root + "/wal";
  cfg.fsync = config::fsync_mode::never;
  metrics::registry m;
  {
    pending_store s(4);
    pending_uniques uniques(s, 4);
    durable::daemon_log log_owner(cfg, m);
    wal::write_ahead_log& log = log_owner.log();
    durable::recover(log);
    durable::committer c(log_owner, s, pending_limits{1000, 4 * key_bytes});
    c.attach_uniques(&uniques);
    struct : batch_queue {
      std::vector<flush_batch> queued_copy() override { return {}; }
      void retag_all(std::uint64_t) override {}
    } queue;
    c.start(queue);
    const auto submit = [&](std::vector<increment> incs, std::vector<unique_entry> entries) {
      std::promise<durable::commit_result> done;
      c.submit(std::move(incs), std::move(entries), nullptr,
               [&](durable::commit_result r) { done.set_value(r); });
      return done.get_future().get();
    };
    EXPECT_EQ(submit({{1, 1, 1}, {1, 2, 1}, {1, 3, 1}}, {}), durable::commit_result::applied);
    EXPECT_EQ(submit({}, {entry(1)}), durable::commit_result::applied);
    EXPECT_EQ(s.charged(), (pending_charge{4, 3 * key_bytes + charge_of(entry(1)).bytes}));
    EXPECT_EQ(submit({{1, 4, 1}}, {}), durable::commit_result::over_limit);
    EXPECT_EQ(s.pending({1, 4}), 0);
    c.stop();
  }
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace slotted::store
