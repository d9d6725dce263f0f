#include "integration/load.hpp"

#include <mutex>

namespace slotted::test {

std::vector<key> random_keys(std::size_t n, std::uint64_t max_id, std::uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::map<key, int> seen;
  std::vector<key> keys;
  while (keys.size() < n) {
    const std::uint64_t id = max_id == UINT64_MAX ? rng() : rng() % (max_id + 1);
    const key k{static_cast<std::uint32_t>(1 + rng() % 3), id};
    if (seen.emplace(k, 0).second) keys.push_back(k);
  }
  return keys;
}

namespace {
std::string item_json(const key& k, int delta, bool id_as_string, bool omit_delta) {
  std::string s = "{\"record_type\": " + std::to_string(k.first) + ", \"record_id\": ";
  s += id_as_string ? "\"" + std::to_string(k.second) + "\"" : std::to_string(k.second);
  if (!omit_delta) s += ", \"delta\": " + std::to_string(delta);
  return s + "}";
}
}  // namespace

load_outcome run_load(std::uint16_t port, const load_options& o) {
  load_outcome total;
  std::mutex merge;
  std::vector<std::thread> threads;
  for (unsigned c = 0; c < o.clients; ++c) {
    threads.emplace_back([&, c] {
      std::mt19937 rng(1000 + c);
      http_client client(port);
      sums mine, doubt;
      std::size_t accepted = 0, failed = 0, sent = 0;
      while (sent < o.increments_per_client && !(o.stop && o.stop->load())) {
        const std::size_t n =
            std::min<std::size_t>(o.increments_per_client - sent, 1 + rng() % o.max_batch);
        const int format = static_cast<int>(rng() % 3);  // 0 object, 1 array, 2 ndjson
        const std::size_t count = format == 0 ? 1 : n;
        std::string body = format == 1 ? "[" : "";
        std::vector<std::pair<key, int>> items;
        for (std::size_t i = 0; i < count; ++i) {
          const key& k = o.keys[rng() % o.keys.size()];
          const bool omit = rng() % 10 == 0;
          const int delta =
              omit ? 1 : o.min_delta + static_cast<int>(rng() % (o.max_delta - o.min_delta + 1));
          items.emplace_back(k, delta);
          if (format == 1 && i > 0) body += ",";
          body += item_json(k, delta, rng() % 2 == 0, omit);
          if (format == 2) body += "\n";
        }
        if (format == 1) body += "]";
        const auto reply =
            client.request("POST", "/v1/increments", body,
                           format == 2 ? "application/x-ndjson" : "application/json");
        sent += count;
        if (reply.status == 202) {
          for (const auto& [k, d] : items) mine[k] += d;
          accepted += count;
        } else {
          if (reply.status == 0)
            for (const auto& [k, d] : items) doubt[k] += d;
          ++failed;
        }
      }
      std::lock_guard lock(merge);
      for (const auto& [k, v] : doubt) total.in_doubt[k] += v;
      for (const auto& [k, v] : mine) total.acknowledged[k] += v;
      total.accepted_increments += accepted;
      total.failed_requests += failed;
    });
  }
  for (auto& t : threads) t.join();
  return total;
}

}  // namespace slotted::test

#include "support/db_server.hpp"
#include "support/mariadb_server.hpp"

namespace slotted::test {

namespace {
table_state read_table(db::connection conn, const std::string& table) {
  table_state st;
  for (const auto& r : conn.query("SELECT record_type, record_id, SUM(count) FROM `" + table +
                                  "` GROUP BY record_type, record_id")) {
    st.totals[{static_cast<std::uint32_t>(std::stoul(*r[0])), std::stoull(*r[1])}] =
        std::stoll(*r[2]);
  }
  const auto agg = conn.query(
      "SELECT COALESCE(MIN(slot), 0), COALESCE(MAX(slot), 0), COUNT(*) FROM `" + table + "`");
  st.min_slot = std::stoll(*agg[0][0]);
  st.max_slot = std::stoll(*agg[0][1]);
  st.rows = std::stoll(*agg[0][2]);
  st.totals = without_zeros(st.totals);
  return st;
}
}  // namespace

table_state read_table(const mariadb_server& server, const std::string& database,
                       const std::string& table) {
  return read_table(server.connect(database), table);
}

table_state read_table(const db_server& server, const std::string& database,
                       const std::string& table) {
  return read_table(server.connect(database), table);
}

sums without_zeros(const sums& s) {
  sums out;
  for (const auto& [k, v] : s) {
    if (v != 0) out[k] = v;
  }
  return out;
}

load_options random_load(unsigned clients, std::size_t per_client, std::size_t keys,
                         std::uint32_t seed) {
  load_options o;
  o.clients = clients;
  o.increments_per_client = per_client;
  o.keys = random_keys(keys, UINT64_MAX, seed);
  return o;
}

}  // namespace slotted::test
