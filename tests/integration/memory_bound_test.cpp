// The pending bound holds in bytes (issue 44, item 1): with the database away, one client
// with no token floods the daemon with one kind of entry (plain counters, unique items
// with 128-byte clients, keyed requests with 128-byte keys), WAL off and on. Ingest
// answers 503 before the daemon's RSS (/proc/PID/status) grows past the figure
// docs/operations.md gives for flush.max_pending_bytes, and once the database is back
// everything accepted is flushed, exactly.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "support/daemon_process.hpp"
#include "support/fault_proxy.hpp"
#include "support/http_client.hpp"
#include "support/mariadb_server.hpp"
#include "support/temp_dir.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define SLOTTED_BOUND_ASAN 1
#elif defined(__SANITIZE_THREAD__)
#define SLOTTED_BOUND_TSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLOTTED_BOUND_ASAN 1
#elif __has_feature(thread_sanitizer)
#define SLOTTED_BOUND_TSAN 1
#endif
#endif

namespace slotted::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// The configured bound: small, so that a flood under ASan on two cores takes seconds.
constexpr std::size_t bound = 8u << 20;

// What RSS may grow by, by docs/operations.md (Sizing): the bound, plus one request's
// entries admitted while under it (one connection here: one request at a time), plus
// what the process itself moves by (a request's buffers, allocator arenas), measured
// well below this.
constexpr std::size_t slack = 6u << 20;

// The sanitizers' allocators charge more per block than glibc's (ASan: redzones and
// 1/8 of shadow, its quarantine off below; TSan: shadow several times the heap), so RSS
// grows by that factor of what a Release build's does. The figure itself is the Release
// build's (bench/sizing.py).
#if defined(SLOTTED_BOUND_TSAN)
constexpr double allocator_factor = 8.0;
#elif defined(SLOTTED_BOUND_ASAN)
constexpr double allocator_factor = 2.0;
#else
constexpr double allocator_factor = 1.0;
#endif

// A field of /proc/PID/status in bytes ("VmRSS", "VmHWM"); 0 when unreadable.
std::size_t status_bytes(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;
  }
  return 0;
}

// While it lives, daemons started get ASAN_OPTIONS with ASan's quarantine off: freed
// blocks would otherwise stay resident (up to 256 MB) and RSS would measure them.
class no_quarantine {
 public:
  no_quarantine() {
    if (const char* v = getenv("ASAN_OPTIONS")) saved_ = v;
    const std::string with = saved_ ? *saved_ + ":quarantine_size_mb=0" : "quarantine_size_mb=0";
    setenv("ASAN_OPTIONS", with.c_str(), 1);
  }
  ~no_quarantine() {
    if (saved_) {
      setenv("ASAN_OPTIONS", saved_->c_str(), 1);
    } else {
      unsetenv("ASAN_OPTIONS");
    }
  }
  no_quarantine(const no_quarantine&) = delete;
  no_quarantine& operator=(const no_quarantine&) = delete;

 private:
  std::optional<std::string> saved_;
};

enum class kind { plain, unique, keyed };

// One request of the flood: its body and headers, and the increments it carries.
struct flood_request {
  std::string body;
  std::map<std::string, std::string> headers;
  std::int64_t increments = 0;
};

// A 128-character string unique to `n` (clients and Idempotency-Keys take it).
std::string long_name(const char* prefix, std::uint64_t n) {
  std::string s = prefix + std::to_string(n);
  s.resize(128, 'x');
  return s;
}

// The n-th request of a flood of `k`: every counter, client and key in it new.
flood_request nth(kind k, std::uint64_t n) {
  flood_request r;
  r.body = "[";
  const auto item = [&](std::uint64_t id, const std::string& client) {
    if (r.increments > 0) r.body += ',';
    r.body += "{\"record_type\":" + std::string(client.empty() ? "322" : "321") +
              ",\"record_id\":" + std::to_string(id);
    if (!client.empty()) r.body += ",\"client\":\"" + client + "\"";
    r.body += "}";
    ++r.increments;
  };
  switch (k) {
    case kind::plain:  // 2,000 new counters
      for (std::uint64_t i = 0; i < 2000; ++i) item(n * 2000 + i + 1, "");
      break;
    case kind::unique:  // 500 new (record, client) pairs
      for (std::uint64_t i = 0; i < 500; ++i) item(i % 7 + 1, long_name("c", n * 500 + i));
      break;
    case kind::keyed:  // a new 128-character key, 8 new counters
      for (std::uint64_t i = 0; i < 8; ++i) item(n * 8 + i + 1, "");
      r.headers["Idempotency-Key"] = long_name("k", n);
      break;
  }
  r.body += "]";
  return r;
}

std::int64_t sum_of_type(const mariadb_server& server, const std::string& database, int type) {
  return server.query_int(database,
                          "SELECT CAST(COALESCE(SUM(count), 0) AS SIGNED) FROM slotted_counters "
                          "WHERE record_type = " +
                              std::to_string(type));
}

class MemoryBound : public ::testing::TestWithParam<std::tuple<kind, bool>> {};

TEST_P(MemoryBound, AFloodStopsAt503BeforeRssPassesTheFigureAndAllAcceptedIsFlushed) {
  const kind k = std::get<0>(GetParam());
  const bool with_wal = std::get<1>(GetParam());
  auto& server = shared_mariadb();
  const auto database = migrated_database(server);
  fault_proxy proxy(server.port());
  std::string wal_root, wal;
  if (with_wal) {
    wal_root = make_temp_dir("memory-bound");
    wal = "wal: {dir: " + wal_root + "/wal, fsync: never}\n";
  }
  const std::string yaml =
      "listen: {address: 127.0.0.1, port: 0}\n"
      "http: {threads: 2}\n"
      "mysql: {host: 127.0.0.1, port: " +
      std::to_string(proxy.port()) + ", user: root, database: " + database +
      "}\n"
      "counters:\n"
      "  - {name: u, record_type: 321, dedupe: day}\n"
      "  - {name: plain, record_type: 322}\n"
      "flush: {interval: 1h, max_pending_bytes: " +
      std::to_string(bound) + "}\n" + wal;
  std::string migrated;
  ASSERT_EQ(run_binary(yaml, "--migrate", migrated), 0) << migrated;  // the uniques table
  const no_quarantine quarantine_off;
  daemon_process d(yaml);
  http_client c(d.port());
  ASSERT_EQ(d.settle(), 200u) << d.log();
  const int type = k == kind::unique ? 321 : 322;
  const auto send = [&](std::uint64_t n) {
    const auto r = nth(k, n);
    return std::make_pair(
        c.request("POST", "/v1/increments", r.body, "application/json", r.headers), r.increments);
  };

  // One request first, flushed: the connection, the allocator's arenas and the key
  // table's statements exist before the baseline.
  std::int64_t accepted = 0;
  std::uint64_t n = 0;
  {
    const auto [reply, increments] = send(n++);
    ASSERT_EQ(reply.status, 202u) << reply.body;
    accepted += increments;
    ASSERT_TRUE(flush_until_ok(c));
  }
  proxy.set_down(true);
  ASSERT_EQ(c.request("POST", "/v1/flush").status, 503u) << "the database must be away";

  const std::size_t baseline = status_bytes(d.pid(), "VmRSS");
  ASSERT_GT(baseline, 0u);
  const auto allowed =
      static_cast<std::size_t>(allocator_factor * static_cast<double>(bound)) + slack;
  bool refused = false;
  // Far more requests than the bound admits: without it, RSS passes the figure first.
  for (int i = 0; i < 200000 && !refused; ++i) {
    const auto [reply, increments] = send(n++);
    if (reply.status == 202u) {
      accepted += increments;
    } else {
      ASSERT_EQ(reply.status, 503u) << reply.body;
      EXPECT_NE(reply.body.find("flush.max_pending_bytes"), std::string::npos) << reply.body;
      refused = true;
    }
    if (i % 16 == 0) {
      const std::size_t rss = status_bytes(d.pid(), "VmRSS");
      ASSERT_LE(rss - std::min(rss, baseline), allowed)
          << "RSS grew past the figure for flush.max_pending_bytes before any 503, after "
          << accepted << " increments";
    }
  }
  ASSERT_TRUE(refused) << "the flood was never refused";
  // Refused from now on, whatever the kind.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(send(n++).first.status, 503u);
  const std::size_t peak = status_bytes(d.pid(), "VmHWM");
  EXPECT_LE(peak - std::min(peak, baseline), allowed)
      << "peak RSS " << peak << ", baseline " << baseline;
  const auto metrics = c.get("/metrics").body;
  const double charged = metric_value(metrics, "slotted_counterd_pending_bytes");
  EXPECT_GE(charged, static_cast<double>(bound));
  EXPECT_LE(charged, static_cast<double>(bound + slack));
  RecordProperty("rss_growth_bytes", std::to_string(peak - std::min(peak, baseline)));
  RecordProperty("pending_bytes", std::to_string(static_cast<std::size_t>(charged)));
  RecordProperty("increments_accepted", std::to_string(accepted));

  // Back: everything accepted is written once, and nothing refused.
  proxy.set_down(false);
  ASSERT_TRUE(flush_until_ok(c, 120s));
  EXPECT_EQ(sum_of_type(server, database, type), accepted);
  if (k == kind::unique) {
    EXPECT_EQ(server.query_int(database, "SELECT COUNT(*) FROM slotted_counters_uniques"),
              accepted);
  }
  if (k == kind::keyed) {
    EXPECT_EQ(
        server.query_int(database, "SELECT COUNT(*) FROM slotted_counterd_idempotency_keys") * 8,
        accepted);
  }
  EXPECT_EQ(c.post_json("/v1/increments", nth(kind::plain, 1000000).body).status, 202u);
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(60s), 0) << d.log();
  if (!wal_root.empty()) fs::remove_all(wal_root);
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, MemoryBound,
    ::testing::Combine(::testing::Values(kind::plain, kind::unique, kind::keyed),
                       ::testing::Bool()),
    [](const auto& info) {
      const kind k = std::get<0>(info.param);
      const std::string name = k == kind::plain ? "Plain" : k == kind::unique ? "Unique" : "Keyed";
      return name + (std::get<1>(info.param) ? "WalOn" : "WalOff");
    });

}  // namespace
}  // namespace slotted::test
