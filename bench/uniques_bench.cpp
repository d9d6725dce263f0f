// What one unique entry (counters[].dedupe, db/uniques.hpp) costs: in memory while it is
// pending (heap bytes asked for, counted by a replaced operator new), and in the database
// (InnoDB's data + index length of `<table>_uniques` per row, after ANALYZE TABLE), and
// how long a unique batch of 1,000 entries takes to commit when all are new and when all
// are duplicates. Against a throwaway MariaDB (tests/support), one process.
//
//   build/asan/tests/uniques_bench [--entries N]
//
// Figures: bench/RESULTS.md, "Unique per client per window".

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "db/repository.hpp"
#include "db/uniques.hpp"
#include "db/write_path.hpp"
#include "store/pending_uniques.hpp"
#include "support/mariadb_server.hpp"

namespace {
std::atomic<std::size_t> heap_bytes{0};
}

void* operator new(std::size_t n) {
  heap_bytes.fetch_add(n, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace {
using namespace slotted;

std::string client_of(std::size_t i, std::size_t length) {
  std::string s = std::to_string(i);
  s.insert(0, length > s.size() ? length - s.size() : 0, 'c');
  return s;
}

std::vector<store::unique_entry> entries_of(std::size_t n, std::size_t client_length,
                                            std::int64_t window) {
  std::vector<store::unique_entry> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    out.push_back({321, i % 1000, window, client_of(i, client_length), window + 5});
  return out;
}

void memory(std::size_t n) {
  for (const std::size_t length : {8, 16, 64}) {
    const auto entries = entries_of(n, length, 86400);
    store::pending_store limit(16);
    store::pending_uniques uniques(limit, 16);
    const std::size_t before = heap_bytes.load();
    uniques.add(entries);
    const std::size_t after = heap_bytes.load();
    std::printf(
        "memory: client of %zu bytes: %.1f heap bytes asked per pending entry (%zu entries)\n",
        length, static_cast<double>(after - before) / static_cast<double>(n), n);
  }
}

void database(std::size_t n) {
  auto& server = test::shared_mariadb();
  const std::string dbname = server.create_database();
  auto conn = server.connect(dbname);
  db::migrate(conn, "slotted_counters");
  store::dedupe_spec dedupe;
  dedupe.declare(321, store::granularity::day);
  db::migrate_uniques(conn, "slotted_counters", dedupe);
  const std::int64_t window = 86400 * 20000;
  auto entries = entries_of(n, 16, window);
  std::sort(entries.begin(), entries.end());
  std::uint64_t seq = 1;
  const auto run = [&](const char* what) {
    const auto t0 = std::chrono::steady_clock::now();
    std::size_t counted = 0, batches = 0;
    for (std::size_t first = 0; first < entries.size(); first += 1000, ++batches) {
      store::flush_batch b;
      b.run_id = 7;
      b.seq = seq++;
      b.content =
          store::unique_content{.entries = {entries.begin() + static_cast<std::ptrdiff_t>(first),
                                            entries.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                                  entries.size(), first + 1000))}};
      counted += db::apply(conn, db::write_set_of({"bench", b.run_id, b.seq}, b),
                           {.table = "slotted_counters"})
                     .counted;
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("database: %s: %zu batches of 1000 entries, %.1f ms a batch, %zu counted\n", what,
                batches, ms / static_cast<double>(batches), counted);
  };
  run("all new");
  run("all duplicates");
  conn.execute("ANALYZE TABLE slotted_counters_uniques");
  const auto rows = conn.query(
      "SELECT data_length, index_length, table_rows FROM information_schema.tables WHERE "
      "table_schema = DATABASE() AND table_name = 'slotted_counters_uniques'");
  const double data = std::stod(rows[0][0].value_or("0")),
               index = std::stod(rows[0][1].value_or("0"));
  const double count = static_cast<double>(
      server.query_int(dbname, "SELECT COUNT(*) FROM slotted_counters_uniques"));
  std::printf(
      "database: %.0f rows (client 16 bytes, instance id 5): data %.0f + index %.0f bytes, %.1f "
      "bytes a row\n",
      count, data, index, (data + index) / count);
  std::vector<std::string> quoted{conn.quote(entries[0].client), conn.quote(entries[1].client)};
  for (const auto& r :
       conn.query("EXPLAIN " + db::uniques_select_ours(db::mariadb_dialect(), "slotted_counters",
                                                       std::span(entries).first(2), quoted,
                                                       "'bench'", 7, 1)))
    std::printf("explain select_ours: type %s key %s rows %s\n", r[3].value_or("-").c_str(),
                r[5].value_or("-").c_str(), r[8].value_or("-").c_str());
}
}  // namespace

int main(int argc, char** argv) {
  std::size_t n = 100000;
  if (argc == 3 && std::string(argv[1]) == "--entries") n = std::stoul(argv[2]);
  memory(n);
  std::fflush(stdout);  // before the server is forked: its copy of the buffer must be empty
  database(n);
  return 0;
}
