// The files of the log reader (source_state.hpp): the file of the committed position
// wherever its rotation put it (PATH, a rotated name, compressed), the files written after
// it, and PATH watched for a new file.

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <optional>

#include "logs/source_state.hpp"
#include "util/log.hpp"

namespace slotted::logs {

namespace {

// The rotated files newest first.
std::vector<rotated_file> reversed(std::vector<rotated_file> v) {
  std::reverse(v.begin(), v.end());
  return v;
}

// At most this many files are held per source; more (a very long stop of the reading
// with frequent rotations) are found again by their names when their turn comes.
constexpr std::size_t max_held = 100;

held_file hold(std::unique_ptr<log_file> f, const std::string& name) {
  file_snapshot snap;
  if (!f->snapshot(snap)) throw log_io_error(io_failure(name, "cannot read it", errno));
  held_file h;
  h.file = std::move(f);
  h.dev = snap.dev;
  h.ino = snap.ino;
  h.name = name;
  h.size = snap.size;
  h.head = std::move(snap.head);
  h.opened = h.grew = std::chrono::steady_clock::now();
  return h;
}

// The rotated file `r` opened by the name a look found it under (open_listed: names_moved
// when that name has moved on since). Throws log_io_error when it cannot be opened.
std::unique_ptr<log_file> open_rotated(const rotated_file& r) {
  auto f = open_listed(r);
  if (!f) throw log_io_error(io_failure(r.name, "cannot open it", errno));
  return f;
}

// At most this many looks at a source's rotated files in a row find their names moving
// (a rotation running meanwhile) before the pass fails (tried again at the next).
constexpr int max_looks = 5;

[[noreturn]] void names_kept_moving(const source_state& s) {
  throw log_io_error(s.cfg.path + ": its rotated files were renamed while they were looked at, " +
                     std::to_string(max_looks) + " times in a row; looked at again");
}

// Throws names_moved when a look at the rotated files now finds other names than
// `rotated` did: a rotation ran while they were looked at, and a file may have been
// missed (listed under no name) or taken for another.
void check_names_still(const source_state& s, const std::vector<rotated_file>& rotated) {
  if (!same_names(rotated, rotated_files(s.cfg))) throw names_moved{};
}

// `look()` made again while the rotated files' names move under it (names_moved), at
// most max_looks times in a row; `undo()` takes back what a look that failed changed,
// before it is made again or its error goes on.
template <class Look, class Undo>
auto again_while_names_move(const source_state& s, Look&& look, Undo&& undo) {
  for (int n = 1;; ++n) {
    try {
      return look();
    } catch (const names_moved&) {
      undo();
      if (n == max_looks) names_kept_moving(s);
    } catch (...) {
      undo();
      throw;
    }
  }
}

// `look(rotated)` with a look at the rotated files, made again while their names move
// under it (names_moved, or another look after it finding other names). `look` changes
// nothing it would have to undo: what it returns is applied by the caller.
template <class Look>
auto with_still_names(const source_state& s, Look&& look) {
  return again_while_names_move(
      s,
      [&] {
        const auto rotated = rotated_files(s.cfg);
        auto result = look(rotated);
        check_names_still(s, rotated);
        return result;
      },
      [] {});
}

// The rotated file `r` opened and held when it starts with the bytes `id` names (a copy
// or a renamed file of the committed position); nullopt otherwise.
std::optional<held_file> hold_if_copy(const rotated_file& r, const file_identity& id) {
  auto f = open_rotated(r);
  if (!head_matches(first_bytes(*f, r.name), id)) return std::nullopt;
  return hold(std::move(f), r.name);
}

bool holds(const source_state& s, std::uint64_t dev, std::uint64_t ino) {
  return std::any_of(s.files.begin(), s.files.end(),
                     [&](const held_file& h) { return h.dev == dev && h.ino == ino; });
}

// Why PATH cannot be opened, reported when it changes: missing (the gauge
// log_file_missing), denied (log_file_denied and one open_denied event), another error.
void report_open_problem(source_state& s, int err) {
  const open_problem p = err == EACCES || err == EPERM                      ? open_problem::denied
                         : err == EINVAL || err == ENOENT || err == ENOTDIR ? open_problem::missing
                                                                            : open_problem::other;
  s.missing->Set(p == open_problem::denied ? 0 : 1);
  s.denied->Set(p == open_problem::denied ? 1 : 0);
  if (p == s.reported) return;
  s.reported = p;
  const std::string& path = s.cfg.path;
  if (p == open_problem::denied) {
    s.open_denied->Increment();
    log::warn("log_sources: cannot open ", path, ": ", std::strerror(err),
              "; the daemon's user needs read access to it (Debian's nginx and Apache logs "
              "are root:adm 0640: give the service SupplementaryGroups=adm, see "
              "docs/production.md); counted once it can be read");
  } else {
    log::warn("log_sources: cannot open ", path, ": ",
              err == EINVAL ? "not a regular file" : std::strerror(err),
              "; counted once it is there");
  }
}

// PATH opened, or nullptr (reported).
std::unique_ptr<log_file> open_path_file(source_state& s) {
  auto f = open_log(s.cfg.path);
  if (!f) {
    report_open_problem(s, errno);
    return nullptr;
  }
  if (s.reported != open_problem::none) log::info("log_sources: ", s.cfg.path, " can be read");
  s.reported = open_problem::none;
  s.missing->Set(0);
  s.denied->Set(0);
  return f;
}

std::string head_held(held_file& h) {
  file_snapshot snap;
  if (!h.file->snapshot(snap)) throw log_io_error(io_failure(h.name, "cannot read it", errno));
  return snap.head;
}

// Holds the rotated files written after `after` (an index into `rotated`, or, when
// none, those modified after `after_mtime_ns`), then PATH (opened beforehand as `path`,
// when it is no held file): a rotated file that is empty, held, or a copy of a held
// file (a copytruncate's copy, a compressed file of one held) is none of them.
void hold_files_after(source_state& s, const std::vector<rotated_file>& rotated,
                      std::optional<std::size_t> after, std::int64_t after_mtime_ns,
                      std::unique_ptr<log_file> path) {
  std::vector<std::string> heads;
  for (auto& h : s.files) heads.push_back(head_held(h));
  for (std::size_t i = after ? *after + 1 : 0; i < rotated.size(); ++i) {
    const auto& r = rotated[i];
    if (s.files.size() >= max_held) break;
    if (!after && r.mtime_ns <= after_mtime_ns) continue;
    // An empty one is held too (the web server may not have reopened yet), not an empty
    // compressed one.
    if ((r.gz && r.size == 0) || holds(s, r.dev, r.ino)) continue;
    // Renamed or removed since it was listed: names_moved, the look is made again. An
    // error reading it throws (log_io_error): the pass fails and is tried again, nothing
    // skipped.
    auto f = open_rotated(r);
    const std::string head = first_bytes(*f, r.name);
    if (std::any_of(heads.begin(), heads.end(),
                    [&](const std::string& h) { return same_start(h, head); }))
      continue;
    s.files.push_back(hold(std::move(f), r.name));
    heads.push_back(head);
    log::info("log_sources: ", s.cfg.path, ": ", r.name, " (written after the file read) is ",
              "read after it");
  }
  if (path && s.files.size() < max_held) {
    auto h = hold(std::move(path), s.cfg.path);
    if (!holds(s, h.dev, h.ino)) s.files.push_back(std::move(h));
  }
}

// The index in `rotated` of the held file `h` (by its inode; when it is gone, a
// compressed copy of it); none when it is in neither.
std::optional<std::size_t> index_of(held_file& h, const std::vector<rotated_file>& rotated) {
  for (std::size_t i = 0; i < rotated.size(); ++i)
    if (rotated[i].dev == h.dev && rotated[i].ino == h.ino) return i;
  const std::string head = head_held(h);
  for (std::size_t i = rotated.size(); i-- > 0;) {
    if (!rotated[i].gz) continue;
    auto f = open_rotated(rotated[i]);
    if (same_start(head, first_bytes(*f, rotated[i].name))) return i;
  }
  return std::nullopt;
}

// PATH opened when it exists (a missing PATH is not reported: the file read may be a
// rotated one, and PATH is watched for).
std::unique_ptr<log_file> open_path_if_there(source_state& s) {
  struct stat st {};
  if (::stat(s.cfg.path.c_str(), &st) != 0 && errno == ENOENT) return nullptr;
  return open_path_file(s);
}

// The committed file was found cut when it was opened again (at a restart, or after a
// failed commit: a copytruncate, or a cut in place): counted as a `truncated` event, as
// one seen while running is, and once per committed file (a cut seen while running, then
// a failed commit, brings it back once more: detect_truncation marks that cut as counted).
void note_cut_while_away(source_state& s, const std::string& what) {
  if (s.cut_warned && *s.cut_warned == s.committed->file) return;
  s.cut_warned = s.committed->file;
  s.truncations->Increment();
  log::warn("log_sources: ", s.cfg.path, ": ", what);
}

// PATH (`path`) is the committed inode, with other first bytes: a copytruncate while
// the reader was away, or a new file that reuses the inode of the committed file, deleted
// after it was rotated and compressed (logrotate's delaycompress, then create). Either way
// the lines after the position are in a rotated file with the committed first bytes
// (another inode, compressed or not): read it from the position (from its start it
// would count them twice), then the rotated files after it (none after a copytruncate),
// then PATH. One shorter than the position is a copy taken before the last counted
// lines: all of it counted.
void follow_cut(source_state& s, const std::vector<rotated_file>& rotated,
                std::unique_ptr<log_file> path) {
  const auto& pos = *s.committed;
  const std::string offset = std::to_string(pos.offset);
  for (std::size_t i = rotated.size(); i-- > 0 && pos.file.head_len > 0;) {
    const auto& r = rotated[i];
    auto held = hold_if_copy(r, pos.file);
    if (!held) continue;
    auto& copy = *held;
    if (copy.size < pos.offset) {
      check_names_still(s, rotated);
      note_cut_while_away(s, "the file of the committed position was copied to " + r.name +
                                 " (copytruncate) before its last counted lines (lines written "
                                 "to it after offset " +
                                 offset + " and before the cut, if any, are lost); reading " +
                                 s.cfg.path + " from its start");
      break;
    }
    s.files.push_back(std::move(copy));
    s.read_from = pos.offset;
    s.resume_skipping = pos.in_long_line;
    hold_files_after(s, rotated, i, 0, std::move(path));
    check_names_still(s, rotated);
    const bool rotated_after =
        s.files.size() > 2 || (s.files.size() == 2 && s.files.back().name != s.cfg.path);
    if (rotated_after) {
      log::info("log_sources: ", s.cfg.path, ": the file of the committed position is ", r.name,
                " (rotated while the reader was away; PATH is a newer file that has ",
                "its inode); reading it from offset ", offset);
    } else {
      note_cut_while_away(s, "the file of the committed position was copied to " + r.name +
                                 " and truncated (copytruncate); reading the copy from offset " +
                                 offset);
    }
    return;
  }
  check_names_still(s, rotated);
  if (s.files.empty()) {
    note_cut_while_away(s, "the file was cut and no copy of it was found (its lines after offset " +
                               offset + " are lost, if it had any); reading it from its start");
  }
  s.files.push_back(hold(std::move(path), s.cfg.path));
}

// The committed file is nowhere (deleted, or rotated to a name the scheme does not give):
// its unread lines are lost, reported once. The files modified after it was last
// committed are read from their start, then PATH.
void follow_lost(source_state& s, const std::vector<rotated_file>& rotated,
                 std::unique_ptr<log_file> path) {
  const auto& pos = *s.committed;
  hold_files_after(s, rotated, std::nullopt, pos.file_mtime_ns > 0 ? pos.file_mtime_ns : INT64_MAX,
                   std::move(path));
  if (s.lost_warned && *s.lost_warned == pos.file) return;
  s.lost_warned = pos.file;
  s.files_lost->Increment();
  log::warn("log_sources: ", s.cfg.path, ": the file of the committed position (device ",
            pos.file.dev, ", inode ", pos.file.ino,
            ") is neither at this path nor among its "
            "rotated files (rotation: ",
            s.cfg.rotation == config::rotation_scheme::glob      ? s.cfg.rotated_glob
            : s.cfg.rotation == config::rotation_scheme::dateext ? "dateext"
                                                                 : "numbered",
            "); its bytes from offset ", pos.offset, " to its end are lost; reading ",
            s.files.empty() ? std::string("nothing yet") : s.files.front().name, " from its start");
}

// An error that ends the search for the committed file at once: the pass fails.
struct search_stopped {
  log_io_error error;
};

// Whether `r` has the committed file's inode (that file, or another given its number).
bool on_committed_inode(const rotated_file& r, const log_position& pos) {
  return r.dev == pos.file.dev && r.ino == pos.file.ino;
}

// Rotated file `r`, opened, when it is the file of `pos`: the same inode and first bytes,
// or a compressed copy with the same first bytes; null when it is not. Throws
// log_io_error when it cannot tell (it may not be opened, or cannot be read): the
// committed file's inode may since have been given to another file (an unreadable or
// damaged one), so the caller goes on with the others and fails only if none is the
// one. Any other error opening the committed inode (EMFILE, EIO...) throws
// search_stopped.
std::unique_ptr<log_file> committed_file_if(const rotated_file& r, const log_position& pos) {
  const bool same_inode = on_committed_inode(r, pos);
  // Else a compressed file of it: the same first bytes (none committed: none told).
  if (!same_inode && (!r.gz || pos.file.head_len == 0)) return nullptr;
  // Renamed or removed since it was listed: names_moved, the look is made again.
  auto f = open_listed(r);
  if (!f) {
    const int err = errno;
    if (!same_inode) throw log_io_error(io_failure(r.name, "cannot open it", err));
    log_io_error e(io_failure(r.name, "cannot open the file of the committed position", err));
    if (err != EACCES && err != EPERM) throw search_stopped{std::move(e)};
    throw e;
  }
  if (!same_inode && !head_matches(first_bytes(*f, r.name), pos.file)) return nullptr;
  if (!is_file(*f, pos.file, r.name)) return nullptr;
  return f;
}

// The file of the committed position, from its offset, then the files after it.
void open_committed(source_state& s) {
  const auto& pos = *s.committed;
  const std::string& path_name = s.cfg.path;
  // PATH first, then the rotated names: a rotation between the two looks leaves the
  // file opened as PATH among the rotated ones, not between them.
  auto path = open_path_if_there(s);
  const auto rotated = rotated_files(s.cfg);
  if (s.after_listing && *s.after_listing) (*s.after_listing)();
  struct stat st {};
  const bool path_is_it = ::stat(path_name.c_str(), &st) == 0 &&
                          static_cast<std::uint64_t>(st.st_dev) == pos.file.dev &&
                          static_cast<std::uint64_t>(st.st_ino) == pos.file.ino;
  if (path_is_it && !path) return;  // it cannot be opened (reported): nothing is lost
  if (path_is_it) {
    if (is_file(*path, pos.file, path_name)) {
      s.files.push_back(hold(std::move(path), path_name));
      s.read_from = pos.offset;
      s.resume_skipping = pos.in_long_line;
      return;
    }
    follow_cut(s, rotated, std::move(path));
    return;
  }
  // A rotated file whose first bytes cannot be read may be the committed one: an error
  // (the pass fails, retried), unless the committed file is found among the others.
  // A copy is the committed file only if it holds all of such a file on the committed
  // inode (which a web server may still be writing): else nothing past the copy's end
  // would ever be read.
  std::optional<log_io_error> unreadable;
  std::uint64_t unreadable_size = 0;
  for (std::size_t i = 0; i < rotated.size(); ++i) {
    const auto& r = rotated[i];
    std::unique_ptr<log_file> f;
    try {
      f = committed_file_if(r, pos);
    } catch (const search_stopped& e) {
      throw e.error;
    } catch (const log_io_error& e) {
      if (!unreadable) unreadable = e;
      if (on_committed_inode(r, pos)) unreadable_size = std::max(unreadable_size, r.size);
      continue;
    }
    if (!f) continue;
    file_snapshot snap;
    if (!f->snapshot(snap)) throw log_io_error(io_failure(r.name, "cannot read it", errno));
    if (snap.size < pos.offset || snap.size < unreadable_size) continue;
    s.files.push_back(hold(std::move(f), r.name));
    s.read_from = pos.offset;
    s.resume_skipping = pos.in_long_line;
    hold_files_after(s, rotated, i, 0, std::move(path));
    check_names_still(s, rotated);
    return;
  }
  if (unreadable) throw *unreadable;
  check_names_still(s, rotated);
  follow_lost(s, rotated, std::move(path));
}

// The newest rotated file that no held file is and whose first bytes `is_copy` takes for
// a copy's (of a file held and cut), opened.
template <class IsCopy>
std::optional<held_file> find_copy(const source_state& s, IsCopy&& is_copy) {
  return with_still_names(s, [&](const std::vector<rotated_file>& rotated) {
    std::optional<held_file> copy;
    // A .gz that cannot be read may be one still being written (copytruncate with
    // compress: PATH.1 is compressed to PATH.1.gz right after the cut): the copy may be
    // the file it is made from. Its error is thrown only when no other file is the copy.
    std::optional<log_io_error> unreadable;
    for (const auto& r : reversed(rotated)) {
      if ((r.gz && r.size == 0) || holds(s, r.dev, r.ino)) continue;
      try {
        auto f = open_rotated(r);
        if (!is_copy(first_bytes(*f, r.name))) continue;
        copy = hold(std::move(f), r.name);
        break;
      } catch (const log_io_error& e) {
        if (!r.gz) throw;
        if (!unreadable) unreadable = e;
      }
    }
    if (!copy && unreadable) throw *unreadable;
    return copy;
  });
}

// A file held after the read one, cut before its turn came (copytruncate of PATH while
// an earlier file is still read): its lines until the cut are in its copy, which is read
// before it (from its start: none of it was read). Without a copy they are lost,
// reported.
void watch_waiting(source_state& s, std::size_t& i) {
  auto& h = s.files[i];
  file_snapshot snap;
  if (!h.file->snapshot(snap)) throw log_io_error(io_failure(h.name, "cannot read it", errno));
  const bool cut = snap.size < h.size || (!h.head.empty() && !same_start(h.head, snap.head));
  if (cut) {
    auto copy = find_copy(s, [&](const std::string& head) { return same_start(head, h.head); });
    s.truncations->Increment();
    if (copy) {
      log::warn("log_sources: ", h.name, " was copied to ", copy->name,
                " and truncated (copytruncate) before its turn; the copy is read first");
      s.files.insert(s.files.begin() + static_cast<std::ptrdiff_t>(i), std::move(*copy));
      ++i;
    } else {
      s.files_lost->Increment();
      log::warn("log_sources: ", h.name, " was truncated before its turn and no copy of it ",
                "was found: its bytes from 0 to ", h.size, " are lost");
    }
  }
  auto& now = s.files[i];
  if (snap.size != now.size) now.grew = std::chrono::steady_clock::now();
  now.size = snap.size;
  now.head = std::move(snap.head);
}

}  // namespace

bool open_source_files(source_state& s) {
  // A rotation running while the files are looked for: looked for again, from nothing
  // held (all opened again by the next pass if the look fails, none skipped).
  again_while_names_move(
      s,
      [&] {
        s.files.clear();
        s.read_from = 0;
        s.resume_skipping = false;
        if (s.committed) open_committed(s);
      },
      [&] { s.files.clear(); });
  if (s.files.empty()) {
    auto f = open_path_file(s);
    if (!f) return false;
    s.files.push_back(hold(std::move(f), s.cfg.path));
    s.read_from = 0;
  }
  return true;
}

void align_with_committed(source_state& s) {
  if (s.files.empty()) return;
  if (!s.committed) {
    // Nothing committed yet: the first file from its start.
    s.read_from = 0;
    s.resume_skipping = false;
    return;
  }
  for (std::size_t k = 0; k < s.files.size(); ++k) {
    auto& h = s.files[k];
    if (!(h.dev == s.committed->file.dev && h.ino == s.committed->file.ino) &&
        !h.file->compressed())
      continue;
    if (!is_file(*h.file, s.committed->file, h.name)) continue;
    s.files.erase(s.files.begin(), s.files.begin() + static_cast<std::ptrdiff_t>(k));
    s.read_from = s.committed->offset;
    s.resume_skipping = s.committed->in_long_line;
    return;
  }
  s.files.clear();  // opened again by their names
}

bool hold_copy_of_cut(source_state& s) {
  if (!s.committed || s.committed->file.head_len == 0 || s.files.empty()) return false;
  const auto& pos = *s.committed;
  return hold_copy_first(
      s, [&](const std::string& head) { return head_matches(head, pos.file); }, pos.offset,
      pos.in_long_line);
}

bool hold_copy_first(source_state& s, const std::function<bool(const std::string&)>& is_copy,
                     std::uint64_t offset, bool in_long_line) {
  auto copy = find_copy(s, is_copy);
  if (!copy) return false;
  if (copy->size < offset) {
    log::warn("log_sources: ", s.cfg.path, ": its copy ", copy->name, " (copytruncate) ends at ",
              copy->size, ", before the position ", offset,
              ": lines written after that and before the cut, if any, are lost");
    return false;
  }
  log::warn("log_sources: ", s.cfg.path, " was copied to ", copy->name, " and truncated ",
            "(copytruncate); reading the copy from offset ", offset, ", then ", s.cfg.path,
            " from its start");
  s.files.push_front(std::move(*copy));
  s.read_from = offset;
  s.resume_skipping = in_long_line;
  return true;
}

namespace {
// For where_is: a file whose first bytes cannot be read is not taken for another
// instance's (said once in the log): it must not stop this instance's start.
bool head_for_others(const std::string& name, std::string& head) {
  try {
    return head_of(name, head);
  } catch (const log_io_error& e) {
    log::warn("log_sources: ", e.what(), "; not compared with another instance's position");
    return false;
  }
}
}  // namespace

std::string where_is(const config::log_source& src, const log_position& pos) {
  struct stat st {};
  if (::stat(src.path.c_str(), &st) == 0 && static_cast<std::uint64_t>(st.st_dev) == pos.file.dev &&
      static_cast<std::uint64_t>(st.st_ino) == pos.file.ino) {
    std::string head;
    if (head_for_others(src.path, head) && head_matches(head, pos.file)) return src.path;
  }
  for (const auto& r : rotated_files(src)) {
    if (!(r.dev == pos.file.dev && r.ino == pos.file.ino) && !(r.gz && pos.file.head_len > 0))
      continue;
    std::string head;
    if (head_for_others(r.name, head) && head_matches(head, pos.file)) return r.name;
  }
  return "";
}

void watch_path(source_state& s) {
  for (std::size_t i = 1; i < s.files.size(); ++i) watch_waiting(s, i);
  if (s.files.empty() || s.files.size() >= max_held) return;
  struct stat st {};
  if (::stat(s.cfg.path.c_str(), &st) != 0) return;  // gone: the next one is not there yet
  if (holds(s, static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)))
    return;
  // A new file at PATH: first any rotated file written between the last held one and it.
  // PATH opened before the rotated files are looked at: a rotation between the two leaves
  // the file opened as PATH among them.
  const std::size_t held = s.files.size();
  again_while_names_move(
      s,
      [&] {
        auto path = open_path_file(s);
        if (!path) return;
        const auto rotated = rotated_files(s.cfg);
        auto& last = s.files.back();
        const auto at = index_of(last, rotated);
        std::int64_t last_mtime = 0;
        if (!at) {
          file_snapshot snap;
          if (!last.file->snapshot(snap, &last_mtime))
            throw log_io_error(io_failure(last.name, "cannot read it", errno));
        }
        hold_files_after(s, rotated, at, last_mtime, std::move(path));
        check_names_still(s, rotated);
      },
      [&] { s.files.erase(s.files.begin() + static_cast<std::ptrdiff_t>(held), s.files.end()); });
}

}  // namespace slotted::logs
