// The tailer of the log reader (source_state.hpp): which file a pass reads and from
// where, truncation, reading the complete lines, rotation and the position the pass
// ends at.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "logs/source_state.hpp"
#include "util/log.hpp"

namespace slotted::logs {

bool pread_all(int fd, char* buf, std::size_t n, std::uint64_t off, std::size_t& got) {
  got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, buf + got, n - got, static_cast<off_t>(off + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return true;
}

bool identity_of(int fd, std::uint64_t offset, file_identity& out) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  out.dev = static_cast<std::uint64_t>(st.st_dev);
  out.ino = static_cast<std::uint64_t>(st.st_ino);
  char head[head_bytes];
  const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(offset, head_bytes));
  std::size_t got = 0;
  if (!pread_all(fd, head, want, 0, got) || got != want) return false;
  out.head_len = static_cast<std::uint32_t>(want);
  out.head_hash = head_hash(std::string_view(head, want));
  return true;
}

bool snapshot_of(int fd, file_snapshot& out) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  out.dev = static_cast<std::uint64_t>(st.st_dev);
  out.ino = static_cast<std::uint64_t>(st.st_ino);
  out.size = static_cast<std::uint64_t>(st.st_size);
  out.head.resize(static_cast<std::size_t>(std::min<std::uint64_t>(out.size, head_bytes)));
  std::size_t got = 0;
  if (!pread_all(fd, out.head.data(), out.head.size(), 0, got)) return false;
  out.head.resize(got);
  return true;
}

bool still_same_file(const file_snapshot& before, const file_snapshot& after) {
  return after.dev == before.dev && after.ino == before.ino && after.size >= before.size &&
         after.head.size() >= before.head.size() &&
         after.head.compare(0, before.head.size(), before.head) == 0;
}

namespace {

// Opens `path` for reading when it is a regular file (else -1, errno EINVAL): a FIFO at a
// log's path would block the one reader thread, every source with it, and the stop.
int open_log_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    errno = EINVAL;
    return -1;
  }
  return fd;
}

// Opens `path` when it is the file `id` names (device, inode and first bytes).
int open_if_same(const std::string& path, const file_identity& id) {
  const int fd = open_log_file(path);
  if (fd < 0) return -1;
  file_identity now;
  if (identity_of(fd, id.head_len, now) && now == id) return fd;
  ::close(fd);
  return -1;
}

// Whether `log_path` is the inode `id` names (whatever it holds now).
bool is_inode_of(const std::string& log_path, const file_identity& id) {
  struct stat at_path {};
  return ::stat(log_path.c_str(), &at_path) == 0 &&
         static_cast<std::uint64_t>(at_path.st_dev) == id.dev &&
         static_cast<std::uint64_t>(at_path.st_ino) == id.ino;
}

// A copy of the file `id` names, made by a copytruncate rotation, at `path`: another
// inode of the same device with the same first bytes. Looked for only when the file
// itself is nowhere and PATH (`log_path`) is still its inode, cut: that is what a
// copytruncate leaves (a rename rotation leaves another inode at PATH). The first bytes,
// up to 256 and timestamps among them, tell the copy from another file; none committed,
// none told. `short_copy`: it ends before the position (the copy was taken, then lines
// counted from the original, then it was cut): everything in it is counted.
int open_if_copy(const std::string& path, const std::string& log_path, const file_identity& id,
                 std::uint64_t offset, bool& short_copy) {
  short_copy = false;
  if (id.head_len == 0 || !is_inode_of(log_path, id)) return -1;
  const int fd = open_log_file(path);
  if (fd < 0) return -1;
  struct stat st {};
  file_identity now;
  if (::fstat(fd, &st) == 0 && identity_of(fd, id.head_len, now) && now.dev == id.dev &&
      now.ino != id.ino && now.head_len == id.head_len && now.head_hash == id.head_hash) {
    short_copy = static_cast<std::uint64_t>(st.st_size) < offset;
    return fd;
  }
  ::close(fd);
  return -1;
}

// The committed file is gone: PATH.1 (the file after it, rotated while stopped) from its
// start when there is one, then PATH.
void open_after_lost_file(source_state& s) {
  const std::string& path = s.cfg.path;
  const int fd = open_log_file(path + ".1");
  const bool dot1 = fd >= 0;
  if (!(s.lost_warned && *s.lost_warned == s.committed->file)) {
    s.lost_warned = s.committed->file;
    s.files_lost->Increment();
    log::warn("log_sources: ", path, ": the file of the committed position (inode ",
              s.committed->file.ino, ", offset ", s.committed->offset,
              ") is neither at this path nor at ", path, ".1 or ", path,
              ".2; lines after that offset of it are lost; reading ",
              dot1 ? path + ".1" : path, " from its start");
  }
  if (dot1) {
    s.file.reset(fd);
    s.read_from = 0;
    s.on_rotated = true;
  }
}

// The committed file was found cut when it was opened again (at a restart, or after a
// failed commit: a copytruncate, or a cut in place): counted as a `truncated` event, as
// one seen while running is, and once per committed file (a PATH that cannot be opened
// brings the search back every pass; a cut seen while running, then a failed commit,
// brings it back once more: detect_truncation marks that cut as counted).
void note_cut_while_away(source_state& s, const std::string& what) {
  if (s.cut_warned && *s.cut_warned == s.committed->file) return;
  s.cut_warned = s.committed->file;
  s.truncations->Increment();
  log::warn("log_sources: ", s.cfg.path, ": ", what);
}

// PATH from its start; false (and reported once) while it does not exist.
bool open_path(source_state& s) {
  const std::string& path = s.cfg.path;
  const int fd = open_log_file(path);
  if (fd < 0) {
    s.missing->Set(1);
    if (!s.warned_missing) {
      log::warn("log_sources: cannot open ", path, ": ",
                errno == EINVAL ? "not a regular file" : std::strerror(errno),
                "; counted once it is there");
      s.warned_missing = true;
    }
    return false;
  }
  s.file.reset(fd);
  s.read_from = 0;
  return true;
}

// The file of the committed position, at PATH, PATH.1 or PATH.2, from its offset.
void open_committed_file(source_state& s) {
  const std::string& path = s.cfg.path;
  int fd = open_if_same(path, s.committed->file);
  if (fd < 0) {
    fd = open_if_same(path + ".1", s.committed->file);
    s.on_rotated = fd >= 0;
  }
  if (fd < 0) {
    // Two rotations while stopped: the committed file is PATH.2, PATH.1 comes next.
    fd = open_if_same(path + ".2", s.committed->file);
    s.on_rotated = fd >= 0;
    if (fd >= 0) s.next_path = path + ".1";
  }
  for (const char* suffix : {".1", ".2"}) {
    if (fd >= 0) break;
    // copytruncate while stopped (or before the pass after it committed): PATH is the
    // committed inode cut to 0, and its lines up to the position are in the copy. Read
    // from the copy at the position, as the file itself would have been: reading it
    // from its start would count them twice.
    bool short_copy = false;
    fd = open_if_copy(path + suffix, path, s.committed->file, s.committed->offset, short_copy);
    if (fd < 0) continue;
    if (short_copy) {
      // All of it counted: what follows is PATH, cut, from its start (open_source_file).
      ::close(fd);
      note_cut_while_away(s, "the file of the committed position was copied to " + path + suffix +
                                 " (copytruncate) before its last counted lines (lines written "
                                 "to it after offset " +
                                 std::to_string(s.committed->offset) +
                                 " and before the cut, if any, are lost); reading " + path +
                                 " from its start");
      return;
    }
    s.on_rotated = true;
    if (suffix == std::string_view(".2")) s.next_path = path + ".1";
    note_cut_while_away(s, "the file of the committed position was copied to " + path + suffix +
                               " and truncated (copytruncate); reading the copy from offset " +
                               std::to_string(s.committed->offset));
  }
  if (fd >= 0) {
    s.file.reset(fd);
    s.read_from = s.committed->offset;
    return;
  }
  if (is_inode_of(path, s.committed->file)) {
    // PATH is the committed inode, cut in place, and no copy of it is found: what follows
    // the position is PATH from its start (whatever PATH.1 is, it came before). PATH that
    // cannot be opened (EMFILE, say) is no cut: open_path reports it.
    if (!open_path(s)) return;
    note_cut_while_away(s, "the file was cut and no copy of it was found (its lines after offset " +
                               std::to_string(s.committed->offset) +
                               " are lost, if it had any); reading it from its start");
    return;
  }
  open_after_lost_file(s);
}

}  // namespace

bool open_source_file(source_state& s) {
  s.on_rotated = false;
  s.quiet_cycles = 0;
  s.seen_size = 0;
  s.resume_skipping = false;
  s.next_path.clear();
  if (s.committed) open_committed_file(s);
  if (s.file.fd < 0 && !open_path(s)) return false;
  s.missing->Set(0);
  s.warned_missing = false;
  return true;
}

bool detect_truncation(source_state& s, const file_snapshot& before) {
  const auto size = before.size;
  bool truncated = size < s.read_from;
  if (!truncated && s.committed && s.committed->file.dev == before.dev &&
      s.committed->file.ino == before.ino && s.read_from == s.committed->offset) {
    file_identity now;
    truncated = !identity_of(s.file.fd, s.committed->file.head_len, now) ||
                now != s.committed->file;
  }
  if (truncated) {
    s.truncations->Increment();
    // Counted: if this pass's commit fails, the committed file is opened again and found
    // cut, which is this same cut (note_cut_while_away).
    if (s.committed && s.committed->file.dev == before.dev && s.committed->file.ino == before.ino)
      s.cut_warned = s.committed->file;
    log::warn("log_sources: ", s.cfg.path, " was truncated (size ", size,
              " below the position ", s.read_from, "); reading it again from its start");
    s.read_from = 0;
  }
  return truncated;
}

pass_counts read_lines(source_state& s, const ingest_settings& settings, std::uint64_t size,
                       bool truncated) {
  pass_counts pass;
  pass.limit = std::min<std::uint64_t>(size, s.read_from + settings.max_batch_bytes);
  pass.end = s.read_from;
  line_counter counter(s, settings, pass);
  std::vector<char> buf(std::max<std::size_t>(1u << 20, 2 * config::max_log_line_bytes));
  std::size_t held = 0;        // bytes in buf from `end` on
  bool skipping = s.resume_skipping && !truncated;  // inside a line longer than the bound
  std::uint64_t skipped = 0;   // its bytes dropped so far
  std::uint64_t file_pos = s.read_from;
  while (file_pos < pass.limit) {
    const std::size_t want = static_cast<std::size_t>(
        std::min<std::uint64_t>(buf.size() - held, pass.limit - file_pos));
    std::size_t got = 0;
    if (!pread_all(s.file.fd, buf.data() + held, want, file_pos, got))
      throw std::runtime_error(s.cfg.path + ": read failed: " + std::strerror(errno));
    if (got == 0) break;
    file_pos += got;
    held += got;
    std::size_t start = 0;
    for (;;) {
      const void* nl = std::memchr(buf.data() + start, '\n', held - start);
      if (nl == nullptr) break;
      const std::size_t stop = static_cast<std::size_t>(static_cast<const char*>(nl) - buf.data());
      if (skipping) {
        ++pass.tally[too_long];
        skipping = false;
        pass.end += skipped;
        skipped = 0;
      } else if (stop + 1 - start > config::max_log_line_bytes) {
        ++pass.tally[too_long];
      } else {
        counter.count(std::string_view(buf.data() + start, stop - start), pass.end);
      }
      pass.end += stop + 1 - start;
      start = stop + 1;
      if (pass.rows() >= settings.max_batch_rows) break;
    }
    if (pass.rows() >= settings.max_batch_rows) {  // the rest waits for the next pass
      pass.limit = pass.end;
      break;
    }
    // The partial line moves to the front; one past the bound is skipped to its newline.
    const std::size_t rest = held - start;
    if (skipping || rest >= config::max_log_line_bytes) {
      // Its bytes are dropped; `end` stays at the line's start until its newline.
      skipping = true;
      skipped += rest;
      held = 0;
      continue;
    }
    std::memmove(buf.data(), buf.data() + start, rest);
    held = rest;
  }
  // One line longer than the whole batch: skipped as too_long up to here, the rest of it
  // (to its newline) skipped at the next pass.
  if (skipping && file_pos == pass.limit && pass.limit < size) {
    ++pass.tally[too_long];
    pass.end = file_pos;
    pass.resume_skipping = true;
  }
  pass.skipping = skipping;
  s.examined = std::max(s.examined, pass.end);
  return pass;
}

rotation_check check_rotation(source_state& s, const file_snapshot& before, pass_counts& pass) {
  const std::string& path = s.cfg.path;
  const auto size = before.size;
  rotation_check rot;
  struct stat now_st {};
  rot.path_exists = ::stat(path.c_str(), &now_st) == 0;
  rot.path_size = static_cast<std::int64_t>(now_st.st_size);
  rot.rotated = !rot.path_exists || now_st.st_dev != static_cast<dev_t>(before.dev) ||
                now_st.st_ino != static_cast<ino_t>(before.ino);
  if (rot.rotated && pass.limit == size) {
    // The web server may still write to the old file until it reopens its log: it is
    // left only when it has not grown for two passes and the new one exists. Bytes after
    // its last newline (a write cut short, or the inside of an over-long line) are then
    // one malformed (too_long) line.
    s.quiet_cycles = size == s.seen_size ? s.quiet_cycles + 1 : 0;
    const bool next_exists =
        s.next_path.empty() ? rot.path_exists : ::access(s.next_path.c_str(), R_OK) == 0;
    rot.switch_to_new = next_exists && s.quiet_cycles >= 2;
    if (rot.switch_to_new && pass.end < size) {
      ++pass.tally[pass.skipping ? too_long : malformed];
      log::warn("log_sources: ", path, ": the rotated file ends in ", size - pass.end,
                " bytes without a newline; skipped as one ",
                pass.skipping ? "too_long" : "malformed", " line");
      pass.end = size;
    }
  } else {
    s.quiet_cycles = 0;
  }
  s.seen_size = size;
  s.on_rotated = rot.rotated;
  return rot;
}

bool position_after(const source_state& s, const rotation_check& rot, std::uint64_t end,
                    log_position& to) {
  if (rot.switch_to_new) {
    const std::string& next = s.next_path.empty() ? s.cfg.path : s.next_path;
    const int fd = open_log_file(next);
    if (fd < 0) return false;
    fd_guard g;
    g.reset(fd);
    if (!identity_of(fd, 0, to.file)) return false;
    to.offset = 0;
    return true;
  }
  if (!identity_of(s.file.fd, end, to.file)) throw std::runtime_error(s.cfg.path + ": read failed");
  to.offset = end;
  return true;
}

double lag_behind(const rotation_check& rot, std::uint64_t size, std::uint64_t position) {
  double behind = static_cast<double>(size - std::min(size, position));
  if (rot.rotated && rot.path_exists && !rot.switch_to_new)
    behind += static_cast<double>(rot.path_size);
  if (rot.switch_to_new) behind = static_cast<double>(rot.path_size);
  return behind;
}

bool advance_after_commit(source_state& s, const pass_counts& pass, const rotation_check& rot,
                          std::uint64_t size, bool truncated) {
  if (rot.switch_to_new) {
    log::info("log_sources: ", s.cfg.path, " was rotated; the old file is read to its end, ",
              "reading the new one from its start");
    s.file.reset();  // the next pass opens the committed identity: the new PATH
    s.examined = 0;
    return true;
  }
  s.read_from = pass.end;
  s.resume_skipping = pass.resume_skipping;
  if (truncated) s.examined = pass.end;
  return pass.end < size && (!pass.skipping || pass.resume_skipping);
}

}  // namespace slotted::logs
