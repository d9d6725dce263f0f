// An LD_PRELOAD library for the log reader's tests (log_rotation_test.cpp): makes reads
// of one file fail with EIO, as a flaky NFS or FUSE file system does, to check that an
// I/O error is never taken for a cut or another file.
//
// SLOTTED_IO_FAULT names a control file holding "GEN INODE SKIP COUNT": of the pread(2)
// calls at offset 0 on the file with inode INODE (its identity and first bytes), the
// first SKIP after the control file's generation GEN was seen succeed and the next
// COUNT fail with EIO; then "<control>.fired" is created. Without the control file,
// nothing fails. A control file holding "open INODE" instead makes every open(2) of the
// file with inode INODE fail with EACCES (a file the daemon's user may not read). Built
// without sanitizers; calls through to the next pread or open (the sanitizer's or libc's).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {
unsigned long long last_gen;
unsigned long long seen;

int should_fail(int fd, off_t off) {
  const char* control = std::getenv("SLOTTED_IO_FAULT");
  if (control == nullptr || off != 0) return 0;
  FILE* f = std::fopen(control, "re");
  if (f == nullptr) return 0;
  unsigned long long gen = 0, ino = 0, skip = 0, count = 0;
  const int n = std::fscanf(f, "%llu %llu %llu %llu", &gen, &ino, &skip, &count);
  std::fclose(f);
  if (n != 4) return 0;
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<unsigned long long>(st.st_ino) != ino) return 0;
  if (gen != last_gen) {
    last_gen = gen;
    seen = 0;
  }
  ++seen;
  if (seen <= skip || seen > skip + count) return 0;
  if (seen == skip + count) {
    char fired[4096];
    std::snprintf(fired, sizeof fired, "%s.fired", control);
    const int m = open(fired, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (m >= 0) close(m);
  }
  return 1;
}

using pread_fn = ssize_t (*)(int, void*, size_t, off_t);

ssize_t read_or_fail(const char* name, pread_fn& next, int fd, void* buf, size_t n, off_t off) {
  if (should_fail(fd, off)) {
    errno = EIO;
    return -1;
  }
  if (next == nullptr) next = reinterpret_cast<pread_fn>(dlsym(RTLD_NEXT, name));
  return next(fd, buf, n, off);
}

// Whether the control file says "open INODE" and `path` is that inode.
int open_fails(const char* path) {
  const char* control = std::getenv("SLOTTED_IO_FAULT");
  if (control == nullptr) return 0;
  FILE* f = std::fopen(control, "re");
  if (f == nullptr) return 0;
  char word[8] = {};
  unsigned long long ino = 0;
  const int n = std::fscanf(f, "%7s %llu", word, &ino);
  std::fclose(f);
  if (n != 2 || std::strcmp(word, "open") != 0) return 0;
  struct stat st;
  return stat(path, &st) == 0 && static_cast<unsigned long long>(st.st_ino) == ino;
}

using open_fn = int (*)(const char*, int, ...);

int open_or_fail(const char* name, open_fn& next, const char* path, int flags, mode_t mode) {
  if (open_fails(path)) {
    errno = EACCES;
    return -1;
  }
  if (next == nullptr) next = reinterpret_cast<open_fn>(dlsym(RTLD_NEXT, name));
  return next(path, flags, mode);
}

mode_t mode_of(int flags, va_list ap) {
  // glibc's __OPEN_NEEDS_MODE: O_TMPFILE holds O_DIRECTORY, which alone takes no mode.
  const bool needs_mode = (flags & O_CREAT) != 0 || (flags & __O_TMPFILE) == __O_TMPFILE;
  return needs_mode ? static_cast<mode_t>(va_arg(ap, int)) : 0;
}

}  // namespace

extern "C" int open(const char* path, int flags, ...) {
  static open_fn next;
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_of(flags, ap);
  va_end(ap);
  return open_or_fail("open", next, path, flags, mode);
}

// The same function on x86-64 (off_t is 64 bits): calls through to the next open.
extern "C" int open64(const char* path, int flags, ...) __attribute__((alias("open")));

extern "C" ssize_t pread(int fd, void* buf, size_t n, off_t off) {
  static pread_fn next;
  return read_or_fail("pread", next, fd, buf, n, off);
}

extern "C" ssize_t pread64(int fd, void* buf, size_t n, off_t off) {
  static pread_fn next;
  return read_or_fail("pread64", next, fd, buf, n, off);
}
