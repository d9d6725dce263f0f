#pragma once
// The fixture of the WAL's integration tests (wal_test.cpp, wal_start_test.cpp): a
// migrated database, a temp directory with the WAL's directory in it, and the config
// of a daemon that logs there.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "durable/record.hpp"
#include "support/daemon_process.hpp"
#include "support/temp_dir.hpp"

namespace slotted::test {

namespace fs = std::filesystem;

class Wal : public ::testing::Test {
 protected:
  // The engine of the database the daemon writes to: MariaDB's here, each engine in
  // WalOnEngines.
  virtual db::engine engine() const { return db::engine::mariadb; }
  db_server& server() const { return shared_server(engine()); }

  void SetUp() override {
    database_ = migrated_database(server());
    root_ = make_temp_dir("wal-test");
    wal_dir_ = root_ + "/wal";
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string yaml(const std::string& fsync = "always",
                   const std::string& flush_interval = "100ms") const {
    return yaml_with_wal("{dir: " + wal_dir_ + ", fsync: " + fsync + "}", flush_interval);
  }
  // `wal` is the wal key's value ("{dir: \"\"}": none).
  std::string yaml_with_wal(const std::string& wal, const std::string& flush_interval) const {
    return daemon_yaml(server(), database_,
                       "instance_id: wal-test\n"
                       "accept_undeclared_types: true\n"
                       "flush: {interval: " +
                           flush_interval + "}\nwal: " + wal + "\n");
  }

  std::int64_t db_total(std::uint64_t id) const {
    return server().query_int(database_,
                              "SELECT COALESCE(SUM(count), 0) FROM slotted_counters "
                              "WHERE record_type = 1 AND record_id = " +
                                  std::to_string(id));
  }
  // The database's time two days ago.
  std::string two_days_ago() const {
    return engine() == db::engine::postgresql ? "statement_timestamp() - INTERVAL '2 DAY'"
                                              : "NOW(3) - INTERVAL 2 DAY";
  }

  // Writes a segment holding `records` (after the segment header).
  void write_segment(const std::string& records) const {
    fs::create_directories(wal_dir_);
    std::ofstream(wal_dir_ + "/wal-0000000000000001.log", std::ios::binary)
        << durable::segment_magic << records;
  }

  // Every file in wal.dir but the lock, with its content.
  std::map<std::string, std::string> wal_files() const {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::directory_iterator(wal_dir_)) {
      if (e.path().filename() == "lock") continue;
      std::ifstream in(e.path(), std::ios::binary);
      files[e.path().filename().string()].assign(std::istreambuf_iterator<char>(in), {});
    }
    return files;
  }

  std::string database_, root_, wal_dir_;
};

// The tests whose outcome is the database's: on each engine.
class WalOnEngines : public Wal, public ::testing::WithParamInterface<db::engine> {
 protected:
  db::engine engine() const override { return GetParam(); }
};

}  // namespace slotted::test
