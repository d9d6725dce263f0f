// Replaying records: each kind's decoder reads its payload, then replay_state applies it
// (see record.hpp for what each kind means).
#include <boost/unordered/unordered_flat_map.hpp>
#include <iterator>
#include <map>
#include <stdexcept>
#include <tuple>

#include "durable/codec.hpp"
#include "durable/record.hpp"

namespace slotted::durable {

bool replay_state::apply(std::string_view payload) {
  // A malformed record changes nothing: a salvage keeps exactly the records before it.
  if (payload.empty()) return false;
  codec::reader in(payload.substr(1));
  switch (static_cast<record_kind>(payload[0])) {
    case record_kind::increments:
      return apply_increments(codec::decode_increments(in));
    case record_kind::timed_increments:
      return apply_increments(codec::decode_timed_increments(in));
    case record_kind::keyed:
      return apply_keyed(codec::decode_keyed(in));
    case record_kind::timed_keyed:
      return apply_keyed(codec::decode_timed_keyed(in));
    case record_kind::batches:
      return apply_batches(codec::decode_batches(in));
    case record_kind::bucketed_batches:
      return apply_batches(codec::decode_bucketed_batches(in));
    case record_kind::committed:
      batches_.clear();
      return codec::decode_committed(in);
    case record_kind::reset: {
      const auto key = codec::decode_reset(in);
      if (key) apply_reset(*key);
      return key.has_value();
    }
    case record_kind::snapshot:
      return apply_snapshot(codec::decode_snapshot(in));
    case record_kind::bucketed_snapshot:
      return apply_snapshot(codec::decode_bucketed_snapshot(in));
    case record_kind::unique_increments:
      return apply_unique_increments(codec::decode_unique_increments(in));
    case record_kind::unique_batches:
      return apply_batches(codec::decode_unique_batches(in));
    case record_kind::unique_snapshot:
      return apply_snapshot(codec::decode_unique_snapshot(in));
    case record_kind::tagged:
      return apply_tagged(codec::decode_tagged(in));
  }
  // A kind this version does not know (one a later version wrote): as a malformed record.
  return false;
}

bool replay_state::apply_increments(const std::optional<std::vector<codec::timed_delta>>& read) {
  if (!read) return false;
  std::vector<store::pending_delta> buckets;
  for (const auto& d : *read) {
    delta_log_.push_back({d.key, d.delta});
    if (d.at != codec::no_time) count_in_buckets(d.key, d.delta, d.at, buckets);
  }
  bucket_log_.insert(bucket_log_.end(), buckets.begin(), buckets.end());
  return true;
}

bool replay_state::apply_unique_increments(std::optional<codec::unique_increments_record>&& r) {
  if (!r) return false;
  apply_increments(r->increments);
  std::move(r->uniques.begin(), r->uniques.end(), std::back_inserter(uniques_));
  return true;
}

bool replay_state::apply_tagged(std::optional<codec::tagged_record>&& r) {
  if (!r) return false;
  switch (r->what) {
    case codec::role::append:
      if (!r->state.keyed.empty()) return apply_keyed(std::move(r->state.keyed.front()));
      return apply_unique_increments(
          codec::unique_increments_record{std::move(r->increments), std::move(r->state.uniques)});
    case codec::role::cut:
      return apply_batches(std::move(r->state.batches));
    case codec::role::snapshot:
      return apply_snapshot(std::move(r->state));
    case codec::role::committed:
      batches_.clear();
      return true;
    case codec::role::reset:
      apply_reset(r->key);
      return true;
  }
  return false;
}

bool replay_state::apply_keyed(std::optional<idempotency::keyed_request>&& r) {
  if (!r) return false;
  keyed_.push_back(std::move(*r));
  return true;
}

bool replay_state::apply_batches(std::optional<std::vector<store::flush_batch>>&& logged) {
  if (!logged) return false;
  // Everything logged so far is in these batches now.
  delta_log_.clear();
  bucket_log_.clear();
  keyed_.clear();
  uniques_.clear();  // taken whole into unique batches, in this record or none
  for (auto& b : *logged) batches_.push_back(std::move(b));
  return true;
}

void replay_state::apply_reset(const store::counter_key& key) {
  // What the store held for it was dropped when this was logged: what was logged
  // for it since the last batches or snapshot record. Batches logged before had all
  // committed (a reset writes the queue first), and keyed requests stay whole.
  std::erase_if(delta_log_, [&](const auto& entry) { return entry.first == key; });
  // Its buckets with it, as the store drops them (pending_store::drop).
  std::erase_if(bucket_log_, [&](const auto& d) { return d.key == key; });
}

bool replay_state::apply_snapshot(std::optional<codec::snapshot_record>&& s) {
  if (!s) return false;
  delta_log_ = std::move(s->deltas);
  bucket_log_ = std::move(s->buckets);
  batches_ = std::move(s->batches);
  keyed_ = std::move(s->keyed);
  uniques_ = std::move(s->uniques);
  return true;
}

void replay_state::count_in_buckets(const store::counter_key& key, std::int64_t delta,
                                    std::int64_t at, std::vector<store::pending_delta>& out) const {
  const auto* c = buckets_.find(key.record_type);
  if (c == nullptr) return;
  for (const auto g : store::all_granularities) {
    if (c->keeps(g)) out.push_back({key, delta, g, store::bucket_start(g, at)});
  }
}

std::vector<store::pending_delta> replay_state::deltas() const {
  boost::unordered_flat_map<store::counter_key, std::int64_t, key_hash> sums;
  for (const auto& [key, delta] : delta_log_) {
    auto& sum = sums[key];
    if (__builtin_add_overflow(sum, delta, &sum)) {
      throw std::overflow_error("the logged deltas of counter (" + std::to_string(key.record_type) +
                                ", " + std::to_string(key.record_id) +
                                ") sum past the 64-bit range");
    }
  }
  std::vector<store::pending_delta> out;
  out.reserve(sums.size());
  for (const auto& [key, delta] : sums) {
    if (delta != 0) out.push_back({key, delta});
  }
  // Bucket counts, summed per bucket (a bucket's sum is bounded as a total's is; past
  // int64 the log is corrupt, as above).
  std::map<std::tuple<store::counter_key, store::granularity, std::int64_t>, std::int64_t> buckets;
  for (const auto& d : bucket_log_) {
    auto& sum = buckets[{d.key, d.gran, d.bucket}];
    if (__builtin_add_overflow(sum, d.delta, &sum)) {
      throw std::overflow_error("the logged bucket counts of counter (" +
                                std::to_string(d.key.record_type) + ", " +
                                std::to_string(d.key.record_id) + ") sum past the 64-bit range");
    }
  }
  for (const auto& [k, delta] : buckets) {
    const auto& [key, g, bucket] = k;
    if (delta != 0) out.push_back({key, delta, g, bucket});
  }
  return out;
}

}  // namespace slotted::durable
