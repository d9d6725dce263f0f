// restart_load: a steady load of single-increment POSTs over a Unix socket, one new
// connection per request (each goes through the listening socket, as a restart would
// see it), for tests/systemd/systemd_test.py (the restart check and --bench).
//
//   restart_load --unix PATH --rate R --threads N --seconds S --stop-file F
//                --record-type T --record-id I [--progress FILE]
//
// Each thread sends R/N requests a second on its own schedule (a late request is sent
// at once, never in a burst to catch up) until S seconds have passed or F exists, and
// writes the number of 2xx answers to FILE every 100 ms. Prints one line:
//   RESTART_LOAD requests=N ok=N refused=N no_answer=N non2xx=N p50_us=.. p99_us=..
//   max_us=.. seconds=..
// refused: connect() failed; no_answer: the connection ended before a status line;
// non2xx: any other status. Latency: connect to the end of the answer.

#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static const char* unix_path;
static const char* stop_file = "";
static const char* progress_file = "";
static double rate = 400;
static int threads = 4, seconds = 30, record_type = 8;
static long record_id = 1;
static char request[512];
static size_t request_len;
static atomic_long ok_total, refused_total, no_answer_total, non2xx_total;
static atomic_int stop;

struct result {
  long* lat;  // microseconds
  size_t n, cap;
};

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void sleep_until(double at_us) {
  double d = at_us - now_us();
  if (d <= 0) return;
  struct timespec t = {(time_t)(d / 1e6), (long)((d - (time_t)(d / 1e6) * 1e6) * 1e3)};
  nanosleep(&t, NULL);
}

// 0 refused, -1 no answer, else the status.
static int one_request(void) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  strncpy(a.sun_path, unix_path, sizeof a.sun_path - 1);
  struct timeval tv = {60, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, (struct sockaddr*)&a, sizeof a) != 0) {
    close(fd);
    return 0;
  }
  size_t sent = 0;
  while (sent < request_len) {
    ssize_t n = send(fd, request + sent, request_len - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      close(fd);
      return -1;
    }
    sent += (size_t)n;
  }
  char buf[2048];
  size_t have = 0;
  ssize_t n;
  while (have < sizeof buf - 1 && (n = recv(fd, buf + have, sizeof buf - 1 - have, 0)) > 0)
    have += (size_t)n;  // Connection: close: the answer ends at EOF
  close(fd);
  buf[have] = 0;
  if (have < 12 || strncmp(buf, "HTTP/1.1 ", 9) != 0) return -1;
  return atoi(buf + 9);
}

static void* worker(void* arg) {
  struct result* r = arg;
  const double interval = 1e6 * threads / rate;
  double next = now_us();
  const double end = next + seconds * 1e6;
  while (!atomic_load(&stop) && now_us() < end) {
    sleep_until(next);
    const double t0 = now_us();
    next = (t0 > next + interval ? t0 : next + interval);
    const int status = one_request();
    const double t1 = now_us();
    if (r->n == r->cap) {
      r->cap = r->cap ? r->cap * 2 : 4096;
      r->lat = realloc(r->lat, r->cap * sizeof *r->lat);
      if (!r->lat) abort();
    }
    r->lat[r->n++] = (long)(t1 - t0);
    if (status == 0) atomic_fetch_add(&refused_total, 1);
    else if (status < 0) atomic_fetch_add(&no_answer_total, 1);
    else if (status < 200 || status > 299) atomic_fetch_add(&non2xx_total, 1);
    else atomic_fetch_add(&ok_total, 1);
  }
  return NULL;
}

static int cmp_long(const void* a, const void* b) {
  long x = *(const long*)a, y = *(const long*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--unix")) unix_path = argv[i + 1];
    else if (!strcmp(argv[i], "--rate")) rate = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--seconds")) seconds = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--stop-file")) stop_file = argv[i + 1];
    else if (!strcmp(argv[i], "--progress")) progress_file = argv[i + 1];
    else if (!strcmp(argv[i], "--record-type")) record_type = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--record-id")) record_id = atol(argv[i + 1]);
    else {
      fprintf(stderr, "restart_load: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (!unix_path || threads < 1 || rate <= 0 || seconds < 1) {
    fprintf(stderr, "usage: restart_load --unix PATH [--rate R --threads N --seconds S ...]\n");
    return 2;
  }
  char body[128];
  int bl = snprintf(body, sizeof body, "{\"record_type\": %d, \"record_id\": %ld, \"delta\": 1}",
                    record_type, record_id);
  request_len = (size_t)snprintf(request, sizeof request,
                                 "POST /v1/increments HTTP/1.1\r\nHost: localhost\r\n"
                                 "Content-Type: application/json\r\nConnection: close\r\n"
                                 "Content-Length: %d\r\n\r\n%s",
                                 bl, body);
  pthread_t* tids = calloc((size_t)threads, sizeof *tids);
  struct result* res = calloc((size_t)threads, sizeof *res);
  const double t0 = now_us();
  for (int i = 0; i < threads; ++i) pthread_create(&tids[i], NULL, worker, &res[i]);
  const double end = t0 + seconds * 1e6;
  while (now_us() < end) {
    struct stat st;
    if (stop_file[0] && stat(stop_file, &st) == 0) break;
    if (progress_file[0]) {
      char tmp[4096];
      snprintf(tmp, sizeof tmp, "%s.new", progress_file);
      FILE* f = fopen(tmp, "w");
      if (f) {
        fprintf(f, "%ld\n", atomic_load(&ok_total));
        fclose(f);
        rename(tmp, progress_file);
      }
    }
    sleep_until(now_us() + 100000);
  }
  atomic_store(&stop, 1);
  size_t total = 0;
  for (int i = 0; i < threads; ++i) {
    pthread_join(tids[i], NULL);
    total += res[i].n;
  }
  long* all = malloc((total ? total : 1) * sizeof *all);
  size_t k = 0;
  for (int i = 0; i < threads; ++i) {
    memcpy(all + k, res[i].lat, res[i].n * sizeof *all);
    k += res[i].n;
  }
  qsort(all, total, sizeof *all, cmp_long);
  printf("RESTART_LOAD requests=%zu ok=%ld refused=%ld no_answer=%ld non2xx=%ld p50_us=%ld "
         "p99_us=%ld max_us=%ld seconds=%.1f\n",
         total, atomic_load(&ok_total), atomic_load(&refused_total),
         atomic_load(&no_answer_total), atomic_load(&non2xx_total),
         total ? all[total / 2] : 0, total ? all[total * 99 / 100] : 0,
         total ? all[total - 1] : 0, (now_us() - t0) / 1e6);
  return 0;
}
