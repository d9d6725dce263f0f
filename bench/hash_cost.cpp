// What the keyed counter hash costs on the ingest path: pending_store::add (the
// store's whole work per request) on requests of 1000 increments, one thread. Built
// against this tree and against the last commit with the unkeyed hash, then run
// alternately; the commands and results are in bench/RESULTS.md ("Keyed counter hash").

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "store/pending_store.hpp"

using slotted::ingest::increment;

int main() {
  std::mt19937_64 rng(42);
  for (const std::size_t distinct : {1000u, 100000u, 1000000u}) {
    std::vector<increment> keys(distinct);
    for (auto& k : keys) k = {static_cast<std::uint32_t>(rng() % 4), rng(), 1};
    std::vector<increment> stream(10'000'000);
    for (auto& k : stream) k = keys[rng() % distinct];
    double best = 1e9;
    for (int round = 0; round < 3; ++round) {
      slotted::store::pending_store store(16);
      const auto t0 = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < stream.size(); i += 1000) {
        store.add(std::span(stream).subspan(i, 1000), ~std::size_t{0});
      }
      const auto t1 = std::chrono::steady_clock::now();
      best =
          std::min(best, std::chrono::duration<double, std::nano>(t1 - t0).count() / stream.size());
    }
    std::printf("%8zu distinct keys: %.1f ns per increment\n", distinct, best);
  }
}
