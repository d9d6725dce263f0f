#include "wal/wal.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>

#include "util/log.hpp"
#include "util/notify.hpp"

namespace slotted::wal {

namespace {
using clock = std::chrono::steady_clock;

// While nothing can be flushed, a snapshot replaces the segments once they hold this
// much more than the last snapshot did.
constexpr std::size_t checkpoint_slack_bytes = 64u << 20;

bool parse_segment_name(const char* name, std::uint64_t& n) {
  unsigned long long value = 0;
  int consumed = 0;
  if (std::sscanf(name, "wal-%16llu.log%n", &value, &consumed) != 1 || name[consumed] != '\0')
    return false;
  n = value;
  return true;
}

// Makes a directory entry change (a created, renamed or deleted name) durable.
void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw wal_error("cannot open directory " + dir + ": " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw wal_error("cannot sync directory " + dir + ": " + std::strerror(err));
}

std::string parent_of(const std::string& dir) {
  auto parent = std::filesystem::path(dir).lexically_normal().parent_path();
  if (parent.empty()) return ".";
  return parent.string();
}
}  // namespace

std::string read_segment(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw wal_error("cannot open WAL segment " + path + ": " + std::strerror(errno));
  std::string data;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw wal_error("cannot read WAL segment " + path + ": " + std::strerror(err));
    }
    if (n == 0) break;
    data.append(buf, static_cast<std::size_t>(n));
    notify::progress();  // a slow disk reads on: start-up is not stuck
  }
  ::close(fd);
  return data;
}

std::set<std::uint64_t> segment_numbers_in(const std::string& dir) {
  std::set<std::uint64_t> segments;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      std::uint64_t n = 0;
      if (parse_segment_name(e->d_name, n)) segments.insert(n);
    }
    ::closedir(d);
  }
  return segments;
}

std::string segment_path_in(const std::string& dir, std::uint64_t n) {
  char name[40];
  std::snprintf(name, sizeof name, "/wal-%016llu.log", static_cast<unsigned long long>(n));
  return dir + name;
}

write_ahead_log::write_ahead_log(std::string dir, observer& obs)
    : dir_(std::move(dir)), observer_(&obs) {}

write_ahead_log::~write_ahead_log() {
  if (unsynced_ && fd_ >= 0) static_cast<void>(sync());  // a failure is logged
  if (fd_ >= 0) ::close(fd_);
  if (dir_fd_ >= 0) ::close(dir_fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
}

void write_ahead_log::lock_directory() {
  const std::string path = dir_ + "/lock";
  const auto in_use = [&](int holder_fd) {
    char buf[32] = {};
    const ssize_t n = holder_fd < 0 ? 0 : ::pread(holder_fd, buf, sizeof buf - 1, 0);
    std::string holder = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    return wal_error("WAL directory " + dir_ + " is in use by another process (pid " +
                     (holder.empty() ? "unknown" : holder) +
                     "): two daemons must never share a wal.dir; stop that one or give this one "
                     "its own wal.dir");
  };
  // The directory itself first: an operator who deletes a "stale" lock file (or a
  // cleanup job) must not let a second copy in. The file lock below stays for the pid
  // it names and for older versions, which lock only the file.
  if (::flock(dir_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) throw wal_error("cannot lock " + dir_ + ": " + std::strerror(err));
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    const auto error = in_use(fd);
    if (fd >= 0) ::close(fd);
    throw error;
  }
  // O_CREAT without O_TRUNC: opening the holder's lock file changes nothing in it.
  // O_NOFOLLOW and a regular file only: the pid is written into it, and a planted
  // symlink must not make this process truncate a file it points to.
  lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) {
    const int err = errno;
    throw wal_error("cannot open " + path + ": " +
                    (err == ELOOP ? std::string("it is a symbolic link; remove it")
                                  : std::string(std::strerror(err))));
  }
  struct stat st {};
  if (::fstat(lock_fd_, &st) != 0 || !S_ISREG(st.st_mode))
    throw wal_error("cannot use " + path + ": not a regular file; remove it");
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) throw wal_error("cannot lock " + path + ": " + std::strerror(err));
    throw in_use(lock_fd_);
  }
  write_pid(path);
}

void write_ahead_log::write_pid(const std::string& path) {
  const std::string pid = std::to_string(::getpid()) + "\n";
  // errno is the call's only when it returned -1: a short write sets none (as in
  // rotate(), a file that takes less than asked for is out of room).
  std::string why;
  int err = 0;
  if (::ftruncate(lock_fd_, 0) != 0) {
    err = errno;
  } else {
    const bool short_write = fault_ && fault_("pid write");
    const ssize_t w = ::pwrite(lock_fd_, pid.data(), short_write ? pid.size() / 2 : pid.size(), 0);
    if (w < 0)
      err = errno;
    else if (w != static_cast<ssize_t>(pid.size()))
      why = "short write (" + std::to_string(w) + " of " + std::to_string(pid.size()) + " bytes)";
  }
  if (err != 0) why = std::strerror(err);
  if (why.empty()) return;
  // The pid only names the holder; the locks above are what keep a second copy out. A
  // full disk must not stop the start: ingest then answers 503 until appends fit.
  if (err != 0 && err != ENOSPC && err != EDQUOT)
    throw wal_error("cannot write " + path + ": " + why);
  // Not a part of the pid: a second start would name another process as the holder.
  if (::ftruncate(lock_fd_, 0) != 0) why += ", and what was written of it stays";
  log::warn("cannot write the pid into ", path, ": ", why,
            "; the WAL's disk is full: increments are refused (503) until there is room");
}

std::string write_ahead_log::segment_path(std::uint64_t n) const {
  return segment_path_in(dir_, n);
}

void write_ahead_log::open_directory() {
  if (::mkdir(dir_.c_str(), 0700) == 0) {
    sync_directory(parent_of(dir_));  // the new directory's name must survive a crash
  } else if (errno != EEXIST) {
    throw wal_error("cannot create WAL directory " + dir_ + ": " + std::strerror(errno));
  }
  // Before anything in the directory is read: a second copy must not replay, and then
  // delete, the log of a daemon that is running on it.
  dir_fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0)
    throw wal_error("cannot open WAL directory " + dir_ + ": " + std::strerror(errno));
  lock_directory();
}

std::set<std::uint64_t> write_ahead_log::segment_numbers() const {
  return segment_numbers_in(dir_);
}

void write_ahead_log::cut_torn_tail(const std::string& path, const scan_result& scan) {
  log::warn("WAL segment ", path, " ends in an incomplete record at offset ", scan.valid_bytes,
            " (", scan.problem, "): cut off; it was never acknowledged");
  observer_->torn_tail_cut();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(scan.valid_bytes)) != 0 || ::fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    throw wal_error("cannot truncate " + path + ": " + std::strerror(err));
  }
  ::close(fd);
  if (::fsync(dir_fd_) != 0)
    throw wal_error("cannot sync WAL directory " + dir_ + ": " + std::strerror(errno));
}

void write_ahead_log::salvage_damaged(const std::string& path, const std::string& data,
                                      const scan_result& scan, bool salvage) {
  const std::string where = "WAL segment " + path + " is damaged at offset " +
                            std::to_string(scan.valid_bytes) + " of " +
                            std::to_string(data.size()) + " (" + scan.problem + ")";
  if (!salvage) {
    throw wal_error(where +
                    ". To keep the records before that offset, run once with --wal-salvage "
                    "(it moves the file aside); or move that file out of " +
                    dir_ + ": the increments logged in it from that offset on are lost");
  }
  // The records before the damage are applied, in memory only: the file goes aside
  // (kept for a post mortem, under a name replay ignores) once start()'s snapshot
  // holds them. A salvage that stops before that leaves it for the next try.
  const std::string aside =
      path + ".damaged-" + std::to_string(static_cast<long long>(std::time(nullptr)));
  salvaged_.push_back({path, aside});
  log::warn(where, ": salvaged, keeping the ", scan.valid_bytes,
            " bytes of whole records before the damage; dropped bytes ", scan.valid_bytes, " to ",
            data.size(), " (", data.size() - scan.valid_bytes, " bytes, ",
            scan.intact_records_after,
            " intact records after the damage not applied: their increments are lost, and "
            "kept increments that a dropped batches record had moved into committed "
            "batches are applied again); the file becomes ",
            aside, " once a snapshot holds what was kept");
}

opened write_ahead_log::open(const record_sink& apply, const open_options& options) {
  open_directory();
  const std::set<std::uint64_t> segments = segment_numbers();
  opened out;
  for (const auto n : segments) {
    const std::string path = segment_path(n);
    const std::string data = read_segment(path);
    const auto scan = scan_segment(data, apply);
    notify::progress();
    const bool last = n == *segments.rbegin();
    segment_ = n;
    if (scan.outcome == scan_result::status::torn_tail && last) {
      cut_torn_tail(path, scan);
    } else if (scan.outcome != scan_result::status::ok) {
      salvage_damaged(path, data, scan, options.salvage);
      ++out.salvaged;
      ++out.segments;
      continue;
    }
    closed_.push_back({n, scan.valid_bytes});
    closed_bytes_ += scan.valid_bytes;
    ++out.segments;
  }
  return out;
}

result<void> write_ahead_log::log_batches(
    const std::function<std::string(std::uint64_t tag)>& record) {
  if (auto rotated = rotate(); !rotated) return rotated;
  if (auto appended = append(record(segment_), true); !appended) return appended;
  covering_.push_back(segment_);
  uncommitted_batches_logged_ = true;
  return {};
}

result<void> write_ahead_log::append(std::string_view bytes, bool synced) {
  // No current segment: the start's snapshot could not create one (a full disk, see
  // committer::start). The first append that fits opens it.
  if (fd_ < 0) {
    if (auto opened = rotate(); !opened) return opened;
  }
  // After a failed sync of the directory nothing is acknowledged until one succeeds.
  if (directory_unsynced_) {
    if (auto named = sync_wal_directory(); !named) return named;
  }
  const std::size_t before = segment_bytes_;
  std::size_t done = 0;
  writes_.fetch_add(1, std::memory_order_relaxed);
  while (done < bytes.size()) {
    std::size_t want = bytes.size() - done;
    if (fault_ && want > 1 && fault_("short write")) want /= 2;
    const ssize_t w = fault_ && fault_("write") ? (errno = ENOSPC, -1)
                                                : ::pwrite(fd_, bytes.data() + done, want,
                                                           static_cast<off_t>(before + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      auto why = failed("write", w < 0 ? errno : ENOSPC);
      // Cut the partial append back: what follows must start at a record boundary, and
      // whole records of it must not replay. (Nothing of it written: nothing to cut.)
      if (done > 0) cut_back(before);
      return why;
    }
    done += static_cast<std::size_t>(w);
  }
  segment_bytes_ = before + bytes.size();
  unsynced_ = true;
  if (auto synced_now = synced ? sync() : result<void>(); !synced_now) {
    segment_bytes_ = before;
    cut_back(before);
    return synced_now;
  }
  update_size_gauge();  // the size follows every append
  if (!last_logged_.empty()) {
    log::info("WAL writable again");
    last_logged_.clear();
  }
  return {};
}

void write_ahead_log::cut_back(std::size_t length) {
  assert(segment_bytes_ == length);  // the sync below covers what is kept
  // Interrupted or failed: tried again a few times (a passing error), then given up.
  constexpr int tries = 3;
  int rc = -1;
  for (int i = 0; i < tries && rc != 0; ++i) {
    do {
      rc = fault_ && fault_("truncate") ? (errno = EIO, -1)
                                        : ::ftruncate(fd_, static_cast<off_t>(length));
    } while (rc != 0 && errno == EINTR);
    if (rc != 0 && i + 1 < tries) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (rc == 0) {
    // The cut is metadata that the next good sync makes durable; until then a power loss
    // could bring the refused records back. Synced now if the disk lets it (a failure is
    // the one already reported; the next sync tries again).
    static_cast<void>(sync());
    return;
  }
  // The refused records may stay in the file (in the page cache at least) while their
  // requests are answered refused: a replay would then apply what a client was told was
  // not taken, and count it twice once the client retries. Nothing answered, they are in
  // doubt instead, as after a SIGKILL.
  const int err = errno;
  log::error("WAL: cannot cut ", segment_path(segment_), " back to ", length,
             " bytes after a failed append (", std::strerror(err),
             "); terminating so that no record refused by it is answered or replayed");
  std::terminate();
}

result<void> write_ahead_log::sync() {
  const auto started = clock::now();
  const std::size_t covered = segment_bytes_;
  syncs_.fetch_add(1, std::memory_order_relaxed);
  const int rc = fault_ && fault_("fdatasync") ? (errno = EIO, -1) : ::fdatasync(fd_);
  observer_->synced(clock::now() - started);
  last_sync_ = clock::now();
  if (rc != 0) {
    const int err = errno;
    observer_->data_sync_failed();
    return failed("fdatasync", err, errc::wal_sync_failed);
  }
  unsynced_ = false;
  synced_bytes_.store(covered, std::memory_order_release);
  return {};
}

result<void> write_ahead_log::rotate() {
  // An empty current segment is as good as a new one (after a failed append, say):
  // reusing it keeps failures from piling up empty files.
  if (fd_ >= 0 && segment_bytes_ <= segment_magic.size()) return {};
  // The segment being closed must be on disk before a later one exists: replay takes
  // damage in any segment but the last for corruption.
  if (fd_ >= 0 && unsynced_) {
    if (auto synced = sync(); !synced) return synced;
  }
  const std::uint64_t next = segment_ + 1;
  const int fd =
      fault_ && fault_("create segment")
          ? (errno = ENOSPC, -1)
          : ::open(segment_path(next).c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return failed("create segment", errno);
  }
  // Synced with the segment's first record.
  if (const ssize_t w = ::pwrite(fd, segment_magic.data(), segment_magic.size(), 0);
      w != static_cast<ssize_t>(segment_magic.size())) {
    auto why = failed("write segment header", w < 0 ? errno : ENOSPC);
    ::close(fd);
    ::unlink(segment_path(next).c_str());
    return why;
  }
  // The new name must survive a power cut before anything is acknowledged in it: a
  // directory that cannot be synced is a failed sync. The segment is not used (the
  // current one, whose name was synced when it was created, stays current) and ingest
  // is refused until a sync of the directory succeeds (see append()).
  if (auto named = sync_wal_directory(); !named) {
    ::close(fd);
    ::unlink(segment_path(next).c_str());
    return named;
  }
  if (fd_ >= 0) {
    ::close(fd_);
    closed_.push_back({segment_, segment_bytes_});
    closed_bytes_ += segment_bytes_;
  }
  fd_ = fd;
  segment_ = next;
  segment_bytes_ = segment_magic.size();
  synced_bytes_.store(0, std::memory_order_release);
  unsynced_ = true;
  return {};
}

result<void> write_ahead_log::sync_wal_directory() {
  const int rc = fault_ && fault_("directory fsync") ? (errno = EIO, -1) : ::fsync(dir_fd_);
  if (rc != 0) {
    const int err = errno;
    directory_unsynced_ = true;
    observer_->directory_sync_failed();
    return failed("sync directory", err, errc::wal_sync_failed);
  }
  directory_unsynced_ = false;
  return {};
}

result<std::uint64_t> write_ahead_log::snapshot(std::string_view record, bool holds_batches) {
  // A failed snapshot (a full disk) is not due again on every request group.
  next_snapshot_try_ = clock::now() + std::chrono::seconds(1);
  if (auto rotated = rotate(); !rotated) return rotated.failed();
  notify::progress();
  if (auto appended = append(record, true); !appended) return appended.failed();
  notify::progress();
  covering_.push_back(segment_);
  uncommitted_batches_logged_ = holds_batches;
  last_snapshot_bytes_ = record.size();
  next_snapshot_try_ = {};
  // Everything before a snapshot is superseded by it, salvaged segments too. A crash
  // before they are moved leaves them in place: a salvage run again reads their prefix,
  // then this snapshot replaces it.
  for (const auto& [path, aside] : std::exchange(salvaged_, {})) {
    if (::rename(path.c_str(), aside.c_str()) != 0) {
      log::error("WAL: cannot move the salvaged segment ", path, " to ", aside, ": ",
                 std::strerror(errno), "; move it out of ", dir_, " by hand");
    }
  }
  for (const auto& [n, size] : closed_) ::unlink(segment_path(n).c_str());
  closed_.clear();
  closed_bytes_ = 0;
  ::fsync(dir_fd_);
  update_size_gauge();
  return segment_;
}

bool write_ahead_log::snapshot_due() const {
  const std::size_t total = segment_bytes_ + closed_bytes_;
  return total > checkpoint_slack_bytes + 2 * last_snapshot_bytes_ &&
         clock::now() >= next_snapshot_try_;
}

void write_ahead_log::release(std::uint64_t min_tag, std::string_view committed_record) {
  // Nothing queued: every batch logged so far has committed. Say so in the log, or a
  // replay long after (the current segment stays until the next rotation) would send
  // them again when their ledger rows are already pruned. The committer runs takes and
  // releases on one thread in the order the flusher asked for them, so no batch was
  // logged after this release.
  if (min_tag == UINT64_MAX && uncommitted_batches_logged_) {
    if (append(committed_record, true)) uncommitted_batches_logged_ = false;
  }
  bool deleted = false;
  // Oldest first: a segment goes once a later segment logs batches (or a snapshot)
  // covering its increments and every batch it logged itself has committed.
  while (!closed_.empty()) {
    const auto n = closed_.front().first;
    const bool covered =
        std::any_of(covering_.begin(), covering_.end(), [&](std::uint64_t c) { return c > n; });
    if (!covered || min_tag <= n) break;
    ::unlink(segment_path(n).c_str());
    closed_bytes_ -= closed_.front().second;
    closed_.erase(closed_.begin());
    deleted = true;
  }
  std::erase_if(covering_, [&](std::uint64_t c) {
    return !closed_.empty() ? c < closed_.front().first : c < segment_;
  });
  if (deleted) ::fsync(dir_fd_);
  update_size_gauge();
}

void write_ahead_log::update_size_gauge() {
  observer_->size_changed(segment_bytes_ + closed_bytes_);
}

failure write_ahead_log::failed(const std::string& what, int err, errc code) {
  last_errno_ = err;
  std::string message = what + ": " + std::strerror(err);
  if (message != last_logged_) {
    log::error("WAL ", dir_, ": ", message, "; ingest answers 503 until it can write again");
    last_logged_ = message;
  }
  return {code, std::move(message)};
}

}  // namespace slotted::wal
