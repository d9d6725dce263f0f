#pragma once
// Private to logs/: the files of a source (source_state.hpp). A file is read through a
// descriptor held open, plain (pread) or gzip (zlib, offsets of the uncompressed text),
// so a rename, a compression or a deletion of its name changes nothing for the reader;
// the names a rotation gives it (config log_sources[].rotation) are looked at only to
// find a file the reader does not hold: at a start, after the committed position moved
// under it, or when PATH changed more than once between two looks.

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/log_sources.hpp"
#include "db/log_positions.hpp"
#include "logs/log_ingest.hpp"

namespace slotted::logs {

// The committed read positions are the database's (db/log_positions.hpp); the reader
// names them as its own.
using db::file_identity;
using db::file_inode;
using db::head_bytes;
using db::head_hash;
using db::log_position;
using db::other_position;
using db::positions_of_others;
using db::read_position;

// An I/O error on a log file (EIO from NFS, a FUSE daemon gone): never taken for a cut or
// another file; the pass fails, is reported (log_events_total{kind="read_error"}) and is
// tried again, the files kept open.
class log_io_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An open log file.
class log_file {
 public:
  virtual ~log_file() = default;
  // Device, inode, size (of the uncompressed text) and first bytes (up to head_bytes),
  // and its modification time. False on an I/O error (errno set).
  virtual bool snapshot(file_snapshot& out, std::int64_t* mtime_ns = nullptr) = 0;
  // Up to `n` bytes at `off`; fewer only at its end. False on an I/O error.
  virtual bool read_at(char* buf, std::size_t n, std::uint64_t off, std::size_t& got) = 0;
  virtual bool compressed() const = 0;
};

// Opens `path` when it is a regular file; nullptr with errno set otherwise (EINVAL for
// another kind of file: a FIFO would block the reader thread). A name ending in ".gz" is
// read as gzip.
std::unique_ptr<log_file> open_log(const std::string& path);

// The identity of `f` over its first min(offset, head_bytes) bytes. Throws log_io_error.
file_identity identity_at(log_file& f, std::uint64_t offset, const std::string& name);
// Whether `f` is the file `id` names: the same device and inode (for a gzip file: the
// same uncompressed first bytes, whatever its inode) and the same first bytes. Throws
// log_io_error (an error is never "another file").
bool is_file(log_file& f, const file_identity& id, const std::string& name);

// A rotated file of a source as a look at its directory finds it (not opened).
struct rotated_file {
  std::string name;
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  long number = -1;  // numbered: the N of PATH.N[.gz]
  bool gz = false;
};

// The rotated files of `src` (its rotation scheme's names; PATH itself never), regular
// files only, oldest first: numbered by N (the larger first), dateext by name (the
// dates of logrotate's dateformats sort as text), a glob by modification time (logrotate
// keeps it when it compresses), then by name.
std::vector<rotated_file> rotated_files(const config::log_source& src);

// The names of a source's rotated files moved (a rotation ran) between a look at its
// directory and an open by one of the names that look found: the look is made again
// (log_open.cpp, with_still_names). Never an error of its own.
struct names_moved {};

// The rotated file `r` opened by its name, when that name still names the file listed
// (its device and inode); throws names_moved when it does not (renamed, removed or
// replaced since); nullptr with errno set on any other error.
std::unique_ptr<log_file> open_listed(const rotated_file& r);
// The first bytes of `f` (up to head_bytes; of a gzip file, its text's, without reading
// it through). Throws log_io_error when they cannot be read (a damaged .gz included).
std::string first_bytes(log_file& f, const std::string& name);
// Whether two looks at the rotated files found the same names for the same files (sizes
// and times aside: a rotated file the web server still writes grows).
bool same_names(const std::vector<rotated_file>& a, const std::vector<rotated_file>& b);

// `name` opened; nullptr when it is not there any more (removed, or not a regular file,
// since it was listed). Any other error throws log_io_error: an error reading a file
// looked for by its name is never "not this file".
std::unique_ptr<log_file> open_if_there(const std::string& name);
// The device and inode of PATH (when it is there) and of each of its rotated files:
// what another instance's position names when it reads them through other paths.
std::vector<file_inode> inodes_of(const config::log_source& src);

// The first bytes of the file at `name` (up to head_bytes; of a gzip file, its text's,
// without reading it through); false when it is not there (open_if_there). Throws
// log_io_error when it cannot be opened or read (a damaged .gz included).
bool head_of(const std::string& name, std::string& head);
// "NAME: WHAT: <strerror> (errno N)", the text of a log_io_error.
std::string io_failure(const std::string& name, const char* what, int err);
// Whether `head` (a file's first bytes) starts with the bytes `id` names.
bool head_matches(const std::string& head, const file_identity& id);

// Whether two files start with the same bytes: neither empty, and the shorter head a
// prefix of the longer (a copy or a compressed copy of a file, taken at another size).
bool same_start(const std::string& a, const std::string& b);

std::int64_t mtime_ns_of(const struct stat& st);

}  // namespace slotted::logs
