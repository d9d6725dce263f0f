#pragma once
// Concurrent keep-alive clients sending random increments in mixed formats (single
// object, JSON array, NDJSON), summing client-side what was acknowledged with 202.

#include <atomic>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/http_client.hpp"

namespace slotted::test {

using key = std::pair<std::uint32_t, std::uint64_t>;
using sums = std::map<key, std::int64_t>;

struct load_options {
  unsigned clients = 8;
  std::size_t increments_per_client = 20000;
  std::vector<key> keys;
  int min_delta = -5;
  int max_delta = 20;
  std::size_t max_batch = 50;
  // When set, clients stop early once this turns true (e.g. shutdown tests).
  const std::atomic<bool>* stop = nullptr;
};

struct load_outcome {
  sums acknowledged;
  std::size_t accepted_increments = 0;
  std::size_t failed_requests = 0;  // no reply or a non-202 reply
  // Requests without any reply (the daemon was killed): applied or not, unknown.
  sums in_doubt;
};

std::vector<key> random_keys(std::size_t n, std::uint64_t max_id, std::uint32_t seed);

// `clients` clients posting `per_client` increments each over `keys` random keys (any id).
load_options random_load(unsigned clients, std::size_t per_client, std::size_t keys,
                         std::uint32_t seed);

load_outcome run_load(std::uint16_t port, const load_options& o);

}  // namespace slotted::test

namespace slotted::test {
class mariadb_server;
class db_server;

struct table_state {
  sums totals;  // SUM(count) per counter
  std::int64_t min_slot = 0;
  std::int64_t max_slot = 0;
  std::int64_t rows = 0;
};

table_state read_table(const mariadb_server& server, const std::string& database,
                       const std::string& table = "slotted_counters");
table_state read_table(const db_server& server, const std::string& database,
                       const std::string& table = "slotted_counters");

// Keys whose sum is not zero (the database never holds rows for zero net deltas).
sums without_zeros(const sums& s);

}  // namespace slotted::test
