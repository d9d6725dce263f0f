// What the keyed counter hash costs on the ingest path: pending_store::add (the
// store's whole work per request) on requests of 1000 increments, one thread. Build
// it twice, against this tree's store/counter_key.hpp (SipHash-1-3, keyed) and against
// the old unkeyed one, and run them alternately:
//
//   mkdir -p /tmp/old/store && git show 4d25f16:daemon/store/counter_key.hpp >
//   /tmp/old/store/counter_key.hpp
//   for v in new old; do inc=$([ $v = old ] && echo -I/tmp/old); \
//     g++ -O3 -DNDEBUG -std=c++20 $inc -Idaemon bench/hash_cost.cpp daemon/store/pending_store.cpp
//     -o /tmp/hash_cost_$v; done
//   for i in 1 2 3; do /tmp/hash_cost_old; /tmp/hash_cost_new; done

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
