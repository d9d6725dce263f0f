// The tailer of the log reader (source_state.hpp): truncation, reading the complete
// lines of the read file, when it is done with, and the position the pass ends at.

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "logs/source_state.hpp"
#include "util/log.hpp"

namespace slotted::logs {

bool still_same_file(const file_snapshot& before, const file_snapshot& after) {
  return after.dev == before.dev && after.ino == before.ino && after.size >= before.size &&
         after.head.size() >= before.head.size() &&
         after.head.compare(0, before.head.size(), before.head) == 0;
}

truncation detect_truncation(source_state& s, const file_snapshot& before) {
  const auto size = before.size;
  bool truncated = size < s.read_from;
  if (!truncated && s.committed && s.committed->file.dev == before.dev &&
      s.committed->file.ino == before.ino && s.read_from == s.committed->offset &&
      !s.files.front().file->compressed()) {
    // An error reading its first bytes throws: it is no cut (log_io_error).
    truncated = !is_file(*s.files.front().file, s.committed->file, s.files.front().name);
  }
  if (!truncated) return truncation::none;
  s.truncations->Increment();
  const bool committed_file =
      s.committed && s.committed->file.dev == before.dev && s.committed->file.ino == before.ino;
  // Counted: if this pass's commit fails, the committed file is opened again and found
  // cut, which is this same cut (note_cut_while_away).
  if (committed_file) s.cut_warned = s.committed->file;
  if (committed_file && hold_copy_of_cut(s)) {
    // The cut file now waits its turn after the copy: held as it is after the cut, so
    // that the look at the waiting files does not find this same cut again (a second
    // `truncated`, and its bytes reported lost).
    auto& after_copy = s.files[1];
    after_copy.size = size;
    after_copy.head = before.head;
    return truncation::copy_first;
  }
  log::warn("log_sources: ", s.cfg.path, " was truncated (size ", size, " below the position ",
            s.read_from, ", or its first bytes changed); reading it again from its start");
  s.read_from = 0;
  return truncation::cut;
}

pass_counts read_lines(source_state& s, const ingest_settings& settings, std::uint64_t size,
                       bool truncated) {
  pass_counts pass;
  pass.limit = std::min<std::uint64_t>(size, s.read_from + settings.max_batch_bytes);
  pass.end = s.read_from;
  line_counter counter(s, settings, pass);
  std::vector<char> buf(std::max<std::size_t>(1u << 20, 2 * config::max_log_line_bytes));
  std::size_t held = 0;                             // bytes in buf from `end` on
  bool skipping = s.resume_skipping && !truncated;  // inside a line longer than the bound
  pass.end_in_long_line = skipping;
  std::uint64_t skipped = 0;  // its bytes dropped so far
  std::uint64_t file_pos = s.read_from;
  while (file_pos < pass.limit) {
    const std::size_t want =
        static_cast<std::size_t>(std::min<std::uint64_t>(buf.size() - held, pass.limit - file_pos));
    std::size_t got = 0;
    if (!s.files.front().file->read_at(buf.data() + held, want, file_pos, got))
      throw log_io_error(s.files.front().name + ": read failed: " + std::strerror(errno));
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
      pass.end_in_long_line = false;
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
    pass.end_in_long_line = true;
  }
  pass.skipping = skipping;
  s.examined = std::max(s.examined, pass.end);
  return pass;
}

rotation_check check_rotation(source_state& s, const file_snapshot& before, pass_counts& pass) {
  const auto size = before.size;
  const auto now = std::chrono::steady_clock::now();
  auto& read = s.files.front();
  if (size != read.size) {
    read.size = size;
    read.grew = now;
  }
  rotation_check rot;
  rot.rotated = s.files.size() > 1;
  if (rot.rotated && pass.limit == size) {
    // The web server may still write to the old file until it reopens its log: it is
    // left once it has neither grown nor the file after it been found for rotate_wait.
    // Bytes after its last newline (a write cut short, or the inside of an over-long
    // line) are then one malformed (too_long) line.
    const auto quiet_since = std::max(read.grew, s.files[1].opened);
    rot.switch_to_new = now - quiet_since >= s.cfg.rotate_wait;
    if (rot.switch_to_new && pass.end < size) {
      ++pass.tally[pass.skipping ? too_long : malformed];
      log::warn("log_sources: ", read.name, ": the rotated file ends in ", size - pass.end,
                " bytes without a newline; skipped as one ",
                pass.skipping ? "too_long" : "malformed", " line");
      pass.end = size;
    }
  }
  return rot;
}

void position_after(source_state& s, const rotation_check& rot, const pass_counts& pass,
                    log_position& to) {
  auto& h = s.files[rot.switch_to_new ? 1 : 0];
  const std::uint64_t offset = rot.switch_to_new ? 0 : pass.end;
  // The file is told by the first bytes it held when this pass looked at it (up to
  // head_bytes), not only by those before the offset: a position at offset 0 (the next
  // file at a switch, or a file holding part of a line) told by none would take a
  // copytruncate of that file for the same file read from 0, and never read the copy.
  // Not by bytes written since: a copy taken during the pass may not hold them.
  to.file = identity_at(*h.file, std::max<std::uint64_t>(offset, h.size), h.name);
  to.offset = offset;
  to.in_long_line = !rot.switch_to_new && pass.end_in_long_line;
  file_snapshot snap;
  if (!h.file->snapshot(snap, &to.file_mtime_ns))
    throw log_io_error(h.name + ": " + std::strerror(errno));
}

double lag_behind(const source_state& s, std::uint64_t size, std::uint64_t position) {
  double behind = static_cast<double>(size - std::min(size, position));
  for (std::size_t i = 1; i < s.files.size(); ++i) behind += static_cast<double>(s.files[i].size);
  return behind;
}

bool advance_after_commit(source_state& s, const pass_counts& pass, const rotation_check& rot,
                          std::uint64_t size, bool truncated) {
  if (rot.switch_to_new) {
    log::info("log_sources: ", s.cfg.path, ": ", s.files.front().name,
              " was read to its end; reading ", s.files[1].name, " from its start");
    s.files.pop_front();
    s.read_from = 0;
    s.resume_skipping = false;
    s.examined = 0;
    return true;
  }
  s.read_from = pass.end;
  s.resume_skipping = pass.end_in_long_line;
  if (truncated) s.examined = pass.end;
  return pass.end < size && (!pass.skipping || pass.resume_skipping);
}

}  // namespace slotted::logs
