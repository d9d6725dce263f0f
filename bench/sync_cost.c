// sync_cost: what one synced WAL append costs on a file system, by how it is written.
// Each mode writes N records of 2 KiB one after another, each followed by a sync, as
// `wal.fsync: always` does for a group:
//   0  pwrite at the end (the file grows) + fdatasync   (the WAL today)
//   1  pwrite into a file zero-filled and synced first + fdatasync
//   2  as 1, with pwritev2(RWF_DSYNC) instead of pwrite + fdatasync
//   3  as 0, with pwritev2(RWF_DSYNC)
// Prints wall and CPU time per sync. Build and run (in the directory of the WALs):
//   cc -O2 -o /tmp/sync_cost bench/sync_cost.c && cd DIR && for m in 0 3 1 2; do /tmp/sync_cost $m 3000; done
// Writes and removes ./sync-cost.tmp (64 MiB at most).
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static double cpu(void) {
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: sync_cost MODE(0-3) COUNT\n");
    return 2;
  }
  const int mode = atoi(argv[1]);
  const int n = atoi(argv[2]);
  enum { record = 2048, prefill = 64 << 20 };
  if (mode < 0 || mode > 3 || n <= 0 || (long)n * record > prefill) {
    fprintf(stderr, "sync_cost: MODE 0-3, COUNT 1-%d\n", prefill / record);
    return 2;
  }
  static char buf[record], zeros[1 << 16];
  memset(buf, 'x', sizeof buf);
  const int fd = open("sync-cost.tmp", O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return perror("open"), 1;
  if (mode == 1 || mode == 2) {
    for (int i = 0; i < prefill / (int)sizeof zeros; i++)
      if (write(fd, zeros, sizeof zeros) != (ssize_t)sizeof zeros) return perror("write"), 1;
    if (fsync(fd) != 0) return perror("fsync"), 1;
  }
  const double t0 = now(), c0 = cpu();
  for (int i = 0; i < n; i++) {
    const off_t at = (off_t)i * record;
    struct iovec v = {buf, record};
    const ssize_t w = mode >= 2 ? pwritev2(fd, &v, 1, at, RWF_DSYNC) : pwrite(fd, buf, record, at);
    if (w != record || (mode < 2 && fdatasync(fd) != 0)) return perror("write/sync"), 1;
  }
  const double t1 = now(), c1 = cpu();
  close(fd);
  unlink("sync-cost.tmp");
  printf("mode %d: %.1f us/sync wall, %.1f us CPU\n", mode, (t1 - t0) / n * 1e6, (c1 - c0) / n * 1e6);
  return 0;
}
