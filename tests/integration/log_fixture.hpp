#pragma once
// What the access-log tests share: lines written as nginx writes them (one write(2) of
// whole lines to a descriptor opened with O_APPEND), a daemon reading one source, and the
// counts it committed compared with the lines written.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "db/top.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {

// A combined line of a GET of /d/<id>/f.tgz answered `status`.
inline std::string log_line(std::uint64_t id, const char* method = "GET", unsigned status = 200,
                            const std::string& prefix = "/d/") {
  return "192.0.2.1 - - [26/Nov/2026:10:00:00 +0000] \"" + std::string(method) + " " + prefix +
         std::to_string(id) + "/f.tgz?x=1 HTTP/1.1\" " + std::to_string(status) +
         " 123 \"-\" \"curl/8\"\n";
}

// Appends `text` (whole lines) as nginx does: one write(2) on a descriptor opened with
// O_APPEND (created 0640 when missing).
inline void nginx_append(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) throw std::runtime_error("open " + path + ": " + std::strerror(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      throw std::runtime_error("write " + path + ": " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

class log_fixture : public ::testing::Test {
 protected:
  // MariaDB here; a suite on both engines overrides it (LogIngestOnEngines).
  virtual db::engine engine() const { return db::engine::mariadb; }
  db_server& server() const { return shared_server(engine()); }

  void SetUp() override {
    db_ = migrated_database(server());
    auto conn = server().connect(db_);
    db::migrate_totals(conn, "slotted_counters", store::top_spec({7}, store::no_buckets()));
    dir_ = make_temp_dir("logs");
    log_ = dir_ + "/access.log";
  }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  // One source at log_ (with `source_extra` keys, each line indented as a source key),
  // counting /d/<id>/ for dl; `top_extra` keys follow at the top level.
  std::string yaml(const std::string& source_extra = "", const std::string& top_extra = "") const {
    return daemon_yaml(server(), db_,
                       "counters: [{name: dl, record_type: 7, top: true}]\n"
                       "flush: {interval: 50ms}\n" +
                           top_extra +
                           "log_sources:\n"
                           "  - path: " +
                           log_ +
                           "\n"
                           "    rules: [{counter: dl, path: '^/d/([0-9]+)/'}]\n" +
                           source_extra);
  }

  // Appends a counted line for `id` to `path` and remembers it.
  void counted(std::uint64_t id, const std::string& path) {
    nginx_append(path, log_line(id));
    ++expected_[id];
  }

  std::map<std::uint64_t, std::int64_t> counts() const {
    std::map<std::uint64_t, std::int64_t> out;
    for (const auto& [id, n] : expected_) {
      out[id] = server().query_int(
          db_,
          "SELECT COALESCE(SUM(`count`), 0) FROM slotted_counters WHERE record_type = 7 "
          "AND record_id = " +
              std::to_string(id));
    }
    const auto total =
        server().query_int(db_, "SELECT COALESCE(SUM(`count`), 0) FROM slotted_counters");
    std::int64_t want = 0;
    for (const auto& [id, n] : expected_) want += n;
    if (total != want) out[0] = total;  // the whole table: a count for an id no line had
    return out;
  }

  ::testing::AssertionResult exact(std::chrono::seconds limit = std::chrono::seconds(20)) const {
    if (eventually([&] { return counts() == expected_; }, limit))
      return ::testing::AssertionSuccess();
    auto r = ::testing::AssertionFailure();
    std::int64_t want_total = 0;
    for (const auto& [id, n] : expected_) want_total += n;
    for (const auto& [id, n] : counts()) {
      if (expected_.count(id) != 0)
        r << " id " << id << ": " << n << " (want " << expected_.at(id) << ")";
      else
        r << " the whole table: " << n << " (want " << want_total << ")";
    }
    return r;
  }

  // The daemon's log_events_total of `kind` for this source.
  double events(const daemon_process& d, const std::string& kind) const {
    return metric_value(
        http_client(d.port()).get("/metrics").body,
        "slotted_counterd_log_events_total{kind=\"" + kind + "\",source=\"" + log_ + "\"}");
  }

  // The inode of `path`.
  static std::uint64_t inode(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return 0;
    return static_cast<std::uint64_t>(st.st_ino);
  }

  // A daemon with `config` and the io_fault library preloaded (tests/support/io_fault.cpp),
  // the reads it fails named by the control file `control`.
  static std::unique_ptr<daemon_process> with_io_fault(const std::string& control,
                                                       const std::string& config) {
    // Each variable as it was before, also for the suite's next test (one process).
    struct restore {
      const char* name;
      bool had;
      std::string before;
      explicit restore(const char* n) : name(n) {
        const char* v = std::getenv(n);
        had = v != nullptr;
        before = v ? v : "";
      }
      ~restore() { had ? ::setenv(name, before.c_str(), 1) : ::unsetenv(name); }
    };
    const restore preload("LD_PRELOAD"), fault("SLOTTED_IO_FAULT"), asan("ASAN_OPTIONS");
    ::setenv("LD_PRELOAD", SLOTTED_IO_FAULT_LIB, 1);
    ::setenv("SLOTTED_IO_FAULT", control.c_str(), 1);
    // The library comes before the sanitizer's runtime in the preload order.
    ::setenv("ASAN_OPTIONS", (asan.before + ":verify_asan_link_order=0").c_str(), 1);
    return std::make_unique<daemon_process>(config);
  }

  // Stops `d` cleanly (SIGTERM: its last pass commits) and forgets it.
  static void stop(std::unique_ptr<daemon_process>& d) {
    d->signal(SIGTERM);
    EXPECT_EQ(d->wait(std::chrono::seconds(20)), 0);
    d.reset();
  }

  std::string db_, dir_, log_;
  std::map<std::uint64_t, std::int64_t> expected_;
};

}  // namespace slotted::test
