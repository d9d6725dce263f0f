#pragma once
// A canonical text of what a WAL replay holds (durable::replay_state): its pending
// deltas (counters, then bucket counts) sorted, its batches in log order with their
// rows, bucket rows, keyed requests and unique entries, its keyed requests and unique
// entries not in a batch. Two replays that hold the same give the same text, whatever
// record kinds they were read from: the golden WAL logs (tests/data/wal-golden) are
// checked against it.

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "durable/record.hpp"
#include "model/keyed_request.hpp"
#include "support/batch_content.hpp"

namespace slotted::test {

inline std::string dump_increment(const ingest::increment& i) {
  return std::to_string(i.record_type) + "/" + std::to_string(i.record_id) + " " +
         std::to_string(i.delta) + (i.at_given ? " at=" : " at~") + std::to_string(i.at) +
         (i.client.empty() ? "" : " client=" + i.client);
}

inline std::string dump_keyed(const idempotency::keyed_request& r) {
  std::string s = "keyed " + r.key + " " + idempotency::hex(r.hash) +
                  " received_ms=" + std::to_string(r.received_ms) + "\n";
  for (const auto& i : r.increments) s += "    " + dump_increment(i) + "\n";
  return s;
}

inline std::string dump_unique(const store::unique_entry& e) {
  return "unique " + std::to_string(e.record_type) + "/" + std::to_string(e.record_id) +
         " window=" + std::to_string(e.window) + " client=" + e.client +
         " at=" + std::to_string(e.at) + "\n";
}

inline std::string dump(const durable::replay_state& state) {
  std::string s;
  auto deltas = state.deltas();
  std::sort(deltas.begin(), deltas.end(), [](const auto& a, const auto& b) {
    return std::tuple(a.gran, a.key.record_type, a.key.record_id, a.bucket, a.delta) <
           std::tuple(b.gran, b.key.record_type, b.key.record_id, b.bucket, b.delta);
  });
  for (const auto& d : deltas) {
    s += "pending " + std::to_string(d.key.record_type) + "/" + std::to_string(d.key.record_id) +
         " " + std::to_string(d.delta);
    if (d.gran != store::granularity::none)
      s += " gran=" + std::to_string(static_cast<int>(d.gran)) +
           " bucket=" + std::to_string(d.bucket);
    s += "\n";
  }
  for (const auto& b : state.batches()) {
    s += "batch run=" + std::to_string(b.run_id) + " seq=" + std::to_string(b.seq) +
         " unique_slot=" + std::to_string(unique_slot_of(b)) + "\n";
    for (const auto& r : b.rows)
      s += "  row " + std::to_string(r.record_type) + "/" + std::to_string(r.record_id) +
           " slot=" + std::to_string(r.slot) + " " + std::to_string(r.delta) + "\n";
    for (const auto& r : b.bucket_rows)
      s += "  bucket_row " + std::to_string(r.record_type) + "/" + std::to_string(r.record_id) +
           " gran=" + std::to_string(static_cast<int>(r.gran)) +
           " bucket=" + std::to_string(r.bucket) + " slot=" + std::to_string(r.slot) + " " +
           std::to_string(r.delta) + "\n";
    for (const auto& k : requests_of(b)) s += "  " + dump_keyed(k);
    for (const auto& e : uniques_of(b)) s += "  " + dump_unique(e);
  }
  for (const auto& k : state.keyed()) s += dump_keyed(k);
  for (const auto& e : state.uniques()) s += dump_unique(e);
  return s;
}

}  // namespace slotted::test
