// Keyed WAL records with the longest key the contract allows (README: HTTP API,
// Idempotency-Key: 1 to 128 characters). Earlier versions also carried the "items have
// an `at`" mark in the top bit of the key length byte, which a length of 128 needs itself;
// this version logs such a request as a timed_keyed record instead (see wal/record.hpp).

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "idempotency/keyed_batches.hpp"
#include "durable/record.hpp"
#include "support/batch_content.hpp"

namespace slotted::idempotency {
namespace {

keyed_request longest(char c, bool with_at) {
  keyed_request r;
  r.key = std::string(max_key_length, c);
  ingest::increment inc{1, 7, 5};
  if (with_at) {
    inc.at_given = true;
    inc.at = 1763856000;
  }
  r.increments = {inc};
  r.hash = hash_of(r.increments);
  r.received_ms = 1763856000123;
  return r;
}

// A key of 128 characters was logged as the length byte 0x80, which
// replay reads as "length 0, with `at`": the record is malformed, so the WAL of any
// instance that accepted such a request (one valid client request) stops the next
// start as corrupt, and --wal-salvage cuts it and everything logged after it.
TEST(KeyedWalRecord, AKeyOf128CharactersReplaysWithAndWithoutAt) {
  using namespace slotted::durable;
  for (const bool with_at : {false, true}) {
    SCOPED_TRACE(with_at ? "with at" : "without at");
    std::mt19937_64 rng(1);
    std::size_t dropped = 0;
    std::string log{segment_magic};
    append_keyed(log, longest('a', with_at));
    append_batches(log,
                   form_keyed_batches({longest('a', with_at)}, 10, 10, 3, 2, rng, {}, dropped));
    append_keyed(log, longest('b', with_at));
    replay_state state;
    ASSERT_EQ(scan_segment(log, state).outcome, scan_result::status::ok);
    ASSERT_EQ(state.batches().size(), 1u);
    ASSERT_EQ(test::requests_of(state.batches()[0]).size(), 1u);
    EXPECT_EQ(test::requests_of(state.batches()[0])[0].key, std::string(128, 'a'));
    ASSERT_EQ(state.keyed().size(), 1u);
    const auto& pending = state.keyed()[0];
    EXPECT_EQ(pending.key, std::string(128, 'b'));
    EXPECT_EQ(pending.hash, longest('b', with_at).hash);
    EXPECT_EQ(pending.received_ms, 1763856000123);
    ASSERT_EQ(pending.increments.size(), 1u);
    EXPECT_EQ(pending.increments[0].at_given, with_at);
    EXPECT_EQ(pending.increments[0].delta, 5);

    // And in a snapshot record.
    std::string snap{segment_magic};
    append_snapshot(snap, state.batches(), {}, state.keyed());
    replay_state after;
    ASSERT_EQ(scan_segment(snap, after).outcome, scan_result::status::ok);
    ASSERT_EQ(after.keyed().size(), 1u);
    EXPECT_EQ(after.keyed()[0].key, std::string(128, 'b'));
    ASSERT_EQ(after.batches().size(), 1u);
    EXPECT_EQ(test::requests_of(after.batches()[0]).size(), 1u);
  }
}

// One shorter than the longest still reads as before (the encoding of keys up to 127
// characters is what every existing log holds).
TEST(KeyedWalRecord, AKeyOf127CharactersReplaysAsBefore) {
  using namespace slotted::durable;
  for (const bool with_at : {false, true}) {
    auto r = longest('c', with_at);
    r.key.pop_back();
    std::string log{segment_magic};
    append_keyed(log, r);
    // The tagged kind; after its version, role, field count, field tag and field length,
    // the key's length byte: 127, no mark in it.
    const std::size_t payload = segment_magic.size() + record_header_bytes;
    EXPECT_EQ(static_cast<unsigned char>(log[payload]),
              static_cast<unsigned char>(record_kind::tagged));
    EXPECT_EQ(static_cast<unsigned char>(log[payload + 1 + 1 + 1 + 4 + 1 + 8]), 127u);
    replay_state state;
    ASSERT_EQ(scan_segment(log, state).outcome, scan_result::status::ok);
    ASSERT_EQ(state.keyed().size(), 1u);
    EXPECT_EQ(state.keyed()[0].key, r.key);
    EXPECT_EQ(state.keyed()[0].increments.at(0).at_given, with_at);
  }
}

}  // namespace
}  // namespace slotted::idempotency
