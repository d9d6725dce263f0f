// The files of a log source (logs/log_files.hpp): log_sources[].rotation and rotate_wait
// parsed and refused, gzip files read as their text, the rotated files a scheme names in
// its order, and the positions table brought up to this version.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "config/config.hpp"
#include "logs/log_files.hpp"
#include "logs/source_state.hpp"
#include "support/temp_dir.hpp"

namespace slotted::logs {
namespace {

namespace fs = std::filesystem;

const std::string source_head =
    "counters:\n  - {name: dl, record_type: 7}\n"
    "log_sources:\n  - path: /var/log/nginx/access.log\n"
    "    rules: [{counter: dl, path: '^/d/([0-9]+)/'}]\n";

config::log_source source_with(const std::string& keys) {
  return config::parse_config(source_head + keys, "test.yaml").log_sources.at(0);
}

std::string problem_of(const std::string& keys) {
  try {
    config::parse_config(source_head + keys, "test.yaml");
  } catch (const config::config_error& e) {
    return e.problems().empty() ? "" : e.problems()[0];
  }
  return "";
}

TEST(LogRotationConfig, DefaultsAreDebiansNumberedNamesAndFiveSeconds) {
  const auto s = source_with("");
  EXPECT_EQ(s.rotation, config::rotation_scheme::numbered);
  EXPECT_EQ(s.rotate_wait, std::chrono::seconds(5));
  EXPECT_EQ(source_with("    rotation: dateext\n").rotation, config::rotation_scheme::dateext);
  const auto g = source_with("    rotation: /var/log/nginx/old/access.log.*\n    rotate_wait: 0s\n");
  EXPECT_EQ(g.rotation, config::rotation_scheme::glob);
  EXPECT_EQ(g.rotated_glob, "/var/log/nginx/old/access.log.*");
  EXPECT_EQ(g.rotate_wait, std::chrono::milliseconds(0));
}

TEST(LogRotationConfig, BadValuesAreNamedWithTheirKey) {
  for (const char* bad : {"weekly", "access.log.*", "/var/log/nginx/access.log.1"}) {
    const auto p = problem_of(std::string("    rotation: ") + bad + "\n");
    EXPECT_NE(p.find("log_sources[0].rotation"), std::string::npos) << p;
    EXPECT_NE(p.find("numbered, dateext or an absolute glob"), std::string::npos) << p;
  }
  for (const char* bad : {"2h", "5", "-1s"}) {
    const auto p = problem_of(std::string("    rotate_wait: ") + bad + "\n");
    EXPECT_NE(p.find("log_sources[0].rotate_wait"), std::string::npos) << p;
  }
}

// A rotation glob that also names another source's files would count their lines twice
// (or wait behind a PATH that keeps growing): refused, naming both; disjoint globs pass.
TEST(LogRotationConfig, AGlobNamingAnotherSourcesFilesIsRefused) {
  const auto sources = [](const std::string& a, const std::string& b) {
    const std::string rules = "    rules: [{counter: dl, path: '^/d/([0-9]+)/'}]\n";
    const std::string yaml = "counters:\n  - {name: dl, record_type: 7}\nlog_sources:\n" + a +
                             rules + b + rules;
    try {
      config::parse_config(yaml, "test.yaml");
    } catch (const config::config_error& e) {
      return e.problems().empty() ? std::string("?") : e.problems()[0];
    }
    return std::string();
  };
  const std::string a = "  - path: /var/log/nginx/a.log\n";
  const std::string b = "  - path: /var/log/nginx/b.log\n";
  // The same olddir glob for both, either way round.
  const auto same = sources(a + "    rotation: /var/log/nginx/old/*\n",
                            b + "    rotation: /var/log/nginx/old/*\n");
  EXPECT_NE(same.find("log_sources[1].rotation"), std::string::npos) << same;
  EXPECT_NE(same.find("counted twice"), std::string::npos) << same;
  EXPECT_NE(sources(a + "    rotation: /var/log/nginx/old/*\n",
                    b + "    rotation: /var/log/nginx/old/b.log.*\n")
                .find("log_sources[1].path"),
            std::string::npos);
  // A glob that takes in another source's PATH, or its numbered rotated files.
  EXPECT_NE(sources(a + "    rotation: /var/log/nginx/*.log*\n", b).find("'/var/log/nginx/b.log'"),
            std::string::npos);
  EXPECT_NE(sources(b, a + "    rotation: /var/log/nginx/b.log.*\n").find("b.log.1"),
            std::string::npos);
  // Globs of their own files pass.
  EXPECT_EQ(sources(a + "    rotation: /var/log/nginx/old/a.log.*\n",
                    b + "    rotation: /var/log/nginx/old/b.log.*\n"),
            "");
  EXPECT_EQ(sources(a + "    rotation: /var/log/nginx/old/a.log.*\n", b), "");
}

void write_gzip(const std::string& path, const std::vector<std::string>& members) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& text : members) {
    // One gzip member each (gzip -c a b writes two).
    z_stream zs{};
    ASSERT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
    std::string packed(deflateBound(&zs, static_cast<uLong>(text.size())) + 64, '\0');
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
    zs.avail_in = static_cast<uInt>(text.size());
    zs.next_out = reinterpret_cast<Bytef*>(packed.data());
    zs.avail_out = static_cast<uInt>(packed.size());
    ASSERT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
    packed.resize(zs.total_out);
    deflateEnd(&zs);
    out << packed;
  }
}

std::string read_at(log_file& f, std::uint64_t off, std::size_t n) {
  std::string out(n, '\0');
  std::size_t got = 0;
  EXPECT_TRUE(f.read_at(out.data(), n, off, got));
  out.resize(got);
  return out;
}

TEST(LogFiles, AGzipFileIsReadAsItsTextAtAnyOffset) {
  const std::string dir = test::make_temp_dir("gz");
  std::string a, b;
  for (int i = 0; i < 5000; ++i) a += "line " + std::to_string(i) + " of the first member\n";
  for (int i = 0; i < 3000; ++i) b += "line " + std::to_string(i) + " of the second\n";
  write_gzip(dir + "/access.log.2.gz", {a, b});
  const std::string text = a + b;
  auto f = open_log(dir + "/access.log.2.gz");
  ASSERT_TRUE(f);
  EXPECT_TRUE(f->compressed());
  file_snapshot snap;
  ASSERT_TRUE(f->snapshot(snap));
  EXPECT_EQ(snap.size, text.size());
  EXPECT_EQ(snap.head, text.substr(0, head_bytes));
  // Forward in batches, a little back (a pass starts again at its last line), far back.
  EXPECT_EQ(read_at(*f, 1000, 70000), text.substr(1000, 70000));
  EXPECT_EQ(read_at(*f, 70000, 50000), text.substr(70000, 50000));
  EXPECT_EQ(read_at(*f, 119000, 110000), text.substr(119000));  // to its end
  EXPECT_EQ(read_at(*f, 10, 20), text.substr(10, 20));
  EXPECT_EQ(read_at(*f, text.size() + 5, 10), "");
  std::string head;
  ASSERT_TRUE(head_of(dir + "/access.log.2.gz", head));
  EXPECT_EQ(head, text.substr(0, head_bytes));
  // Cut inside a member: an error, never an end.
  std::string whole;
  {
    std::ifstream in(dir + "/access.log.2.gz", std::ios::binary);
    whole.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::ofstream(dir + "/cut.gz", std::ios::binary) << whole.substr(0, whole.size() / 2);
  auto cut = open_log(dir + "/cut.gz");
  ASSERT_TRUE(cut);
  EXPECT_FALSE(cut->snapshot(snap));
  // Its first bytes unreadable: an error, never "not this file"; gone: not there.
  std::ofstream(dir + "/short.gz", std::ios::binary) << whole.substr(0, 12);
  EXPECT_THROW(head_of(dir + "/short.gz", head), log_io_error);
  EXPECT_FALSE(head_of(dir + "/gone.gz", head));
  fs::remove_all(dir);
}

void touch_at(const std::string& path, const std::string& text, std::int64_t mtime_s) {
  std::ofstream(path) << text;
  const timespec times[2] = {{mtime_s, 0}, {mtime_s, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

std::vector<std::string> names(const std::vector<rotated_file>& files) {
  std::vector<std::string> out;
  for (const auto& f : files) out.push_back(fs::path(f.name).filename().string());
  return out;
}

TEST(LogFiles, EachSchemeNamesItsRotatedFilesOldestFirst) {
  const std::string dir = test::make_temp_dir("rot");
  config::log_source src;
  src.path = dir + "/access.log";
  touch_at(src.path, "now\n", 5000);
  // Numbered: by N, whatever the times (a file renamed twice can be written last).
  touch_at(dir + "/access.log.1", "b\n", 1000);
  touch_at(dir + "/access.log.2", "a\n", 2000);
  write_gzip(dir + "/access.log.10.gz", {"z\n"});
  touch_at(dir + "/access.log.1.bak", "x\n", 10);
  touch_at(dir + "/access.log.3.xz", "x\n", 10);
  touch_at(dir + "/access.log-20261201", "d\n", 3000);
  EXPECT_EQ(names(rotated_files(src)),
            (std::vector<std::string>{"access.log.10.gz", "access.log.2", "access.log.1"}));
  // dateext: by the name (its date), a .gz and its plain name side by side.
  src.rotation = config::rotation_scheme::dateext;
  touch_at(dir + "/access.log-20261130.gz", "c\n", 4000);
  EXPECT_EQ(names(rotated_files(src)),
            (std::vector<std::string>{"access.log-20261130.gz", "access.log-20261201"}));
  // A glob: by modification time.
  src.rotation = config::rotation_scheme::glob;
  src.rotated_glob = dir + "/access.log.[0-9]";
  EXPECT_EQ(names(rotated_files(src)), (std::vector<std::string>{"access.log.1", "access.log.2"}));
  fs::remove_all(dir);
}

TEST(LogFiles, APositionsTableOfAnEarlierVersionGainsItsColumns) {
  const std::vector<std::string> old{"instance_id", "path", "file_dev", "file_ino", "head_len",
                                     "head_hash", "offset", "committed_at"};
  const auto sql = db::positions_table_upgrade(old);
  ASSERT_EQ(sql.size(), 1u);
  EXPECT_NE(sql[0].find("ADD COLUMN `in_long_line`"), std::string::npos) << sql[0];
  EXPECT_NE(sql[0].find("ADD COLUMN `file_mtime_ns`"), std::string::npos) << sql[0];
  auto now = old;
  now.insert(now.end(), {"in_long_line", "file_mtime_ns"});
  EXPECT_TRUE(db::positions_table_upgrade(now).empty());
}

// The move of a position an error message shows an operator (a renamed host), built in
// db/ with the other statements of the table, reads as it always did.
TEST(LogFiles, TheMoveOfAPositionShownToAnOperatorGivesTheOldInstancesRowsToTheNew) {
  EXPECT_EQ(db::positions_move_statement("old-host", "new-host"),
            "UPDATE slotted_counterd_log_positions SET instance_id = 'new-host' WHERE "
            "instance_id = 'old-host'");
}

// A position is told by the first bytes its file held when the pass looked at it: bytes
// written since are not in a copy taken meanwhile (copytruncate), which must still be
// found by them; and at offset 0 the file is told by more than no bytes.
TEST(LogFiles, APositionIsToldByTheBytesThePassSawNotThoseWrittenSince) {
  const std::string dir = test::make_temp_dir("logfiles");
  const std::string path = dir + "/access.log";
  const std::string seen(90, 'a'), later(180, 'b');
  std::ofstream(path, std::ios::binary) << seen;
  source_state s;
  held_file h;
  h.file = open_log(path);
  ASSERT_TRUE(h.file);
  h.name = path;
  h.size = seen.size();  // what this pass's look at the file saw
  s.files.push_back(std::move(h));
  std::ofstream(path, std::ios::binary | std::ios::app) << later;  // written since
  pass_counts pass;
  pass.end = 0;  // part of a line: the position stays at 0
  log_position to;
  position_after(s, rotation_check{}, pass, to);
  EXPECT_EQ(to.offset, 0u);
  EXPECT_EQ(to.file.head_len, seen.size());
  EXPECT_TRUE(head_matches(seen + later.substr(0, 10), to.file));  // a copy taken then
  EXPECT_FALSE(head_matches(std::string(90, 'c'), to.file));      // another file's bytes
  fs::remove_all(dir);
}

}  // namespace
}  // namespace slotted::logs
