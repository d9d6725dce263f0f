#pragma once
// The unique entries (model/uniques.hpp) this instance accepted and has not yet handed to
// the flusher: a set per shard keyed by (counter, window, client), so that an item seen
// twice here is held once. Whether another instance, or an earlier flush, counted it
// already is decided as its batch commits (db/uniques.hpp), not here.
//
// Each entry held counts against the pending bounds like any pending entry (through
// pending_store::hold/release: one entry, and its bytes, store/pending_charge.hpp), and
// in the flusher's queue as the rows of its batch.
//
// Thread-safety: every member function may be called concurrently; each locks only the
// shards it touches.

#include <atomic>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "model/uniques.hpp"
#include "store/pending_store.hpp"

namespace slotted::store {

class pending_uniques {
 public:
  // `limit`: the store whose pending entries these count among; outlives this object.
  pending_uniques(pending_store& limit, unsigned shards);
  ~pending_uniques();
  pending_uniques(const pending_uniques&) = delete;
  pending_uniques& operator=(const pending_uniques&) = delete;

  // Holds each entry not held yet; returns how many were (local duplicates, counted once).
  std::size_t add(std::span<const unique_entry> entries);

  // Moves every entry out (appended to `out`, unordered), leaving the set empty.
  void take_all(std::vector<unique_entry>& out);

  // Copies every entry (appended to `out`, unordered), leaving the set as it is: for a
  // WAL snapshot.
  void copy_all(std::vector<unique_entry>& out) const;

  // Entries held now.
  std::size_t size() const { return size_.load(std::memory_order_relaxed); }

 private:
  struct shard;
  pending_store& limit_;
  std::size_t shard_count_;
  std::unique_ptr<shard[]> shards_;
  std::atomic<std::size_t> size_{0};
};

}  // namespace slotted::store
