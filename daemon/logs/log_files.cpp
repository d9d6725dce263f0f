// The files of a source (log_files.hpp): plain and gzip files held open, what identifies
// them, and the rotated files a rotation scheme names.

#include "logs/log_files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <tuple>

namespace slotted::logs {

std::int64_t mtime_ns_of(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

namespace {

class descriptor {
 public:
  explicit descriptor(int fd) : fd_(fd) {}
  descriptor(const descriptor&) = delete;
  descriptor& operator=(const descriptor&) = delete;
  ~descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

bool pread_full(int fd, char* buf, std::size_t n, std::uint64_t off, std::size_t& got) {
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

bool stat_into(int fd, file_snapshot& out, std::int64_t* mtime_ns) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  out.dev = static_cast<std::uint64_t>(st.st_dev);
  out.ino = static_cast<std::uint64_t>(st.st_ino);
  out.size = static_cast<std::uint64_t>(st.st_size);
  if (mtime_ns) *mtime_ns = mtime_ns_of(st);
  return true;
}

bool snapshot_into(int fd, file_snapshot& out, std::int64_t* mtime_ns) {
  if (!stat_into(fd, out, mtime_ns)) return false;
  out.head.resize(static_cast<std::size_t>(std::min<std::uint64_t>(out.size, head_bytes)));
  std::size_t got = 0;
  if (!pread_full(fd, out.head.data(), out.head.size(), 0, got)) return false;
  out.head.resize(got);
  return true;
}

class plain_file final : public log_file {
 public:
  explicit plain_file(int fd) : fd_(fd) {}
  bool snapshot(file_snapshot& out, std::int64_t* mtime_ns) override {
    return snapshot_into(fd_.get(), out, mtime_ns);
  }
  bool read_at(char* buf, std::size_t n, std::uint64_t off, std::size_t& got) override {
    return pread_full(fd_.get(), buf, n, off, got);
  }
  bool compressed() const override { return false; }

 private:
  descriptor fd_;
};

// A gzip file (one member or several, as gzip -c a b writes) read as its uncompressed
// text. A rotated file is final: its size is found once, by reading it through. Reads
// go on from where the last one ended; one before it starts again from the beginning.
class gzip_file final : public log_file {
 public:
  explicit gzip_file(int fd) : fd_(fd) {}
  ~gzip_file() override {
    if (started_) inflateEnd(&zs_);
  }
  bool snapshot(file_snapshot& out, std::int64_t* mtime_ns) override {
    if (!stat_into(fd_.get(), out, mtime_ns)) return false;
    if (!measured_) {
      std::vector<char> sink(64 * 1024);
      std::size_t got = 0;
      do {
        if (!read_at(sink.data(), sink.size(), pos_, got)) return false;
      } while (got == sink.size());
      size_ = pos_;
      head_.resize(static_cast<std::size_t>(std::min<std::uint64_t>(size_, head_bytes)));
      if (!read_at(head_.data(), head_.size(), 0, got) || got != head_.size()) return false;
      measured_ = true;
    }
    out.size = size_;
    out.head = head_;
    return true;
  }
  bool read_at(char* buf, std::size_t n, std::uint64_t off, std::size_t& got) override {
    got = 0;
    if (started_ && off < pos_ && off >= recent_at_ && recent_at_ + recent_.size() == pos_) {
      // A pass reads again from the start of the line the last one ended in.
      const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(n, pos_ - off));
      std::memcpy(buf, recent_.data() + (off - recent_at_), k);
      got = k;
      off += k;
      if (got == n) return true;
    }
    if (!started_ || off < pos_) {
      if (!restart()) return false;
    }
    char skip[8192];
    while (pos_ < off) {
      std::size_t g = 0;
      if (!inflate_into(
              skip, static_cast<std::size_t>(std::min<std::uint64_t>(sizeof skip, off - pos_)), g))
        return false;
      if (g == 0) return true;  // past its end
    }
    while (got < n) {
      std::size_t g = 0;
      if (!inflate_into(buf + got, n - got, g)) return false;
      if (g == 0) break;
      keep_recent(buf + got, g);
      got += g;
    }
    return true;
  }
  bool compressed() const override { return true; }

 private:
  bool restart() {
    if (started_) inflateEnd(&zs_);
    zs_ = z_stream{};
    started_ = inflateInit2(&zs_, 16 + MAX_WBITS) == Z_OK;
    if (!started_) {
      errno = ENOMEM;
      return false;
    }
    in_off_ = 0;
    pos_ = 0;
    ended_ = false;
    recent_.clear();
    recent_at_ = 0;
    return true;
  }
  // The text last read (up to 2 * keep bytes), so that reading again from a line's start
  // a little before where the last read ended does not start the file again.
  void keep_recent(const char* text, std::size_t n) {
    constexpr std::size_t keep = 64 * 1024;
    if (recent_at_ + recent_.size() != pos_ - n) {
      recent_.clear();
      recent_at_ = pos_ - n;
    }
    recent_.append(text, n);
    if (recent_.size() > 2 * keep) {
      const std::size_t drop = recent_.size() - keep;
      recent_.erase(0, drop);
      recent_at_ += drop;
    }
  }
  // Up to `n` bytes of text; 0 at its end. False on a read error or a damaged (or not
  // yet whole) file: EIO.
  bool inflate_into(char* out, std::size_t n, std::size_t& got) {
    got = 0;
    zs_.next_out = reinterpret_cast<Bytef*>(out);
    zs_.avail_out = static_cast<uInt>(n);
    while (zs_.avail_out > 0) {
      if (zs_.avail_in == 0) {
        std::size_t r = 0;
        if (!pread_full(fd_.get(), reinterpret_cast<char*>(in_), sizeof in_, in_off_, r))
          return false;
        if (r == 0) {
          if (ended_) break;  // the end of its last member
          errno = EIO;        // cut inside a member
          return false;
        }
        in_off_ += r;
        zs_.next_in = in_;
        zs_.avail_in = static_cast<uInt>(r);
      }
      if (ended_) {
        // Another member follows.
        inflateReset(&zs_);
        ended_ = false;
      }
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        ended_ = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        errno = EIO;
        return false;
      }
    }
    got = n - zs_.avail_out;
    pos_ += got;
    return true;
  }

  descriptor fd_;
  z_stream zs_{};
  bool started_ = false;
  bool ended_ = false;
  Bytef in_[64 * 1024];
  std::uint64_t in_off_ = 0;
  std::uint64_t pos_ = 0;
  bool measured_ = false;
  std::uint64_t size_ = 0;
  std::string head_;
  std::string recent_;
  std::uint64_t recent_at_ = 0;
};

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool is_gz(const std::string& name) {
  return ends_with(name, ".gz");
}

// Compressed in a way this reader cannot read: not one of its files.
bool other_compression(const std::string& name) {
  for (const char* ext : {".xz", ".bz2", ".zst", ".lz4", ".Z", ".lzma"})
    if (ends_with(name, ext)) return true;
  return false;
}

bool all_digits(std::string_view s) {
  return !s.empty() && s.size() <= 9 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// At most this many rotated files are looked at (the newest kept): a directory holding
// more is not a log directory a rotation keeps.
constexpr std::size_t max_rotated = 10000;

// The names in PATH's directory that `src`'s scheme gives its rotated files, with N for
// numbered.
std::vector<std::pair<std::string, long>> scheme_names(const config::log_source& src) {
  std::vector<std::pair<std::string, long>> out;
  if (src.rotation == config::rotation_scheme::glob) {
    glob_t g{};
    if (::glob(src.rotated_glob.c_str(), GLOB_NOSORT, nullptr, &g) == 0) {
      for (std::size_t i = 0; i < g.gl_pathc; ++i)
        if (g.gl_pathv[i] != src.path) out.emplace_back(g.gl_pathv[i], -1);
    }
    ::globfree(&g);
    return out;
  }
  const std::filesystem::path p(src.path);
  const std::string dir = p.parent_path().string();
  const std::string base = p.filename().string();
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= base.size() + 1 || name.compare(0, base.size(), base) != 0) continue;
    std::string rest = name.substr(base.size());
    if (src.rotation == config::rotation_scheme::numbered) {
      if (rest[0] != '.') continue;
      rest = rest.substr(1);
      if (ends_with(rest, ".gz")) rest.resize(rest.size() - 3);
      if (!all_digits(rest)) continue;
      out.emplace_back(dir + "/" + name, std::stol(rest));
    } else {
      if (rest[0] != '-' || rest.size() < 2 || rest[1] < '0' || rest[1] > '9') continue;
      out.emplace_back(dir + "/" + name, -1);
    }
  }
  ::closedir(d);
  return out;
}

}  // namespace

bool snapshot_of(int fd, file_snapshot& out) {
  return snapshot_into(fd, out, nullptr);
}

namespace {
// open_log, and the device and inode of what it opened in `st`.
std::unique_ptr<log_file> open_log_stat(const std::string& path, struct stat& st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  const bool stated = ::fstat(fd, &st) == 0;
  if (!stated || !S_ISREG(st.st_mode)) {
    const int e = errno;
    ::close(fd);
    errno = stated ? EINVAL : e;  // EINVAL: not a regular file
    return nullptr;
  }
  if (is_gz(path)) return std::make_unique<gzip_file>(fd);
  return std::make_unique<plain_file>(fd);
}
}  // namespace

std::unique_ptr<log_file> open_log(const std::string& path) {
  struct stat st {};
  return open_log_stat(path, st);
}

file_identity identity_at(log_file& f, std::uint64_t offset, const std::string& name) {
  file_snapshot snap;
  if (!f.snapshot(snap)) throw log_io_error(io_failure(name, "cannot read its first bytes", errno));
  file_identity id;
  id.dev = snap.dev;
  id.ino = snap.ino;
  const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(offset, head_bytes));
  // Shorter than `offset`'s first bytes (cut): its head_len tells it from such a file.
  const std::size_t len = std::min(want, snap.head.size());
  id.head_len = static_cast<std::uint32_t>(len);
  id.head_hash = head_hash(std::string_view(snap.head).substr(0, len));
  return id;
}

bool is_file(log_file& f, const file_identity& id, const std::string& name) {
  const file_identity now = identity_at(f, id.head_len, name);
  if (f.compressed() && !(now.dev == id.dev && now.ino == id.ino)) {
    // A compressed copy of the file: its first bytes alone tell it (none: not told).
    return id.head_len > 0 && now.head_len == id.head_len && now.head_hash == id.head_hash;
  }
  return now == id;
}

std::vector<rotated_file> rotated_files(const config::log_source& src) {
  std::vector<rotated_file> out;
  for (auto& [name, number] : scheme_names(src)) {
    if (other_compression(name)) continue;
    struct stat st {};
    if (::stat(name.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    rotated_file r;
    r.name = name;
    r.dev = static_cast<std::uint64_t>(st.st_dev);
    r.ino = static_cast<std::uint64_t>(st.st_ino);
    r.size = static_cast<std::uint64_t>(st.st_size);
    r.mtime_ns = mtime_ns_of(st);
    r.number = number;
    r.gz = is_gz(name);
    out.push_back(std::move(r));
  }
  // The scheme's own order where it has one: a file renamed twice in a row can have
  // been written last after the one renamed once was (until the web server reopened).
  const auto scheme = src.rotation;
  const auto stem = [](const std::string& n) { return is_gz(n) ? n.substr(0, n.size() - 3) : n; };
  std::sort(out.begin(), out.end(), [&](const rotated_file& a, const rotated_file& b) {
    if (scheme == config::rotation_scheme::numbered && a.number != b.number)
      return a.number > b.number;
    if (scheme == config::rotation_scheme::dateext && stem(a.name) != stem(b.name))
      return stem(a.name) < stem(b.name);
    if (a.mtime_ns != b.mtime_ns) return a.mtime_ns < b.mtime_ns;
    return a.name < b.name;
  });
  if (out.size() > max_rotated) out.erase(out.begin(), out.end() - max_rotated);
  return out;
}

std::vector<file_inode> inodes_of(const config::log_source& src) {
  std::vector<file_inode> out;
  struct stat st {};
  if (::stat(src.path.c_str(), &st) == 0)
    out.push_back({static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)});
  for (const auto& r : rotated_files(src)) out.push_back({r.dev, r.ino});
  return out;
}

std::string io_failure(const std::string& name, const char* what, int err) {
  return name + ": " + what + ": " + std::strerror(err) + " (errno " + std::to_string(err) + ")";
}

std::unique_ptr<log_file> open_if_there(const std::string& name) {
  auto f = open_log(name);
  if (f || errno == ENOENT || errno == ENOTDIR || errno == EINVAL) return f;
  throw log_io_error(io_failure(name, "cannot open it", errno));
}

std::unique_ptr<log_file> open_listed(const rotated_file& r) {
  struct stat st {};
  auto f = open_log_stat(r.name, st);
  if (!f) {
    if (errno == ENOENT || errno == ENOTDIR || errno == EINVAL) throw names_moved{};
    return nullptr;
  }
  if (static_cast<std::uint64_t>(st.st_dev) != r.dev ||
      static_cast<std::uint64_t>(st.st_ino) != r.ino)
    throw names_moved{};
  return f;
}

bool same_names(const std::vector<rotated_file>& a, const std::vector<rotated_file>& b) {
  const auto key = [](const std::vector<rotated_file>& v) {
    std::vector<std::tuple<std::string, std::uint64_t, std::uint64_t>> out;
    out.reserve(v.size());
    for (const auto& r : v) out.emplace_back(r.name, r.dev, r.ino);
    std::sort(out.begin(), out.end());
    return out;
  };
  return key(a) == key(b);
}

std::string first_bytes(log_file& f, const std::string& name) {
  std::string head(head_bytes, '\0');
  std::size_t got = 0;
  if (!f.read_at(head.data(), head.size(), 0, got)) {
    throw log_io_error(io_failure(name,
                                  f.compressed() ? "cannot read its first bytes (decompressing it)"
                                                 : "cannot read its first bytes",
                                  errno));
  }
  head.resize(got);
  return head;
}

bool head_of(const std::string& name, std::string& head) {
  const auto f = open_if_there(name);
  if (!f) return false;
  head = first_bytes(*f, name);
  return true;
}

bool head_matches(const std::string& head, const file_identity& id) {
  return head.size() >= id.head_len &&
         head_hash(std::string_view(head).substr(0, id.head_len)) == id.head_hash;
}

bool same_start(const std::string& a, const std::string& b) {
  const std::size_t n = std::min(a.size(), b.size());
  return n > 0 && a.compare(0, n, b, 0, n) == 0;
}

}  // namespace slotted::logs
