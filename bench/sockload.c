// sockload: a closed-loop HTTP/1.1 load generator for one daemon, over TCP or a Unix
// socket, so that the two transports are measured with the same client (wrk has no Unix
// sockets). Each of --threads threads drives --conns/--threads keep-alive connections
// with epoll; every connection sends one single-event POST /v1/increments (the body
// bench/wrk/single.lua sends, record_id uniform in 1..--keys), waits for the whole
// answer, and sends the next. Runs --seconds, then prints one line:
//   SOCKLOAD requests=N duration_us=D errors=E
// Built by bench/run with `cc -O2`; loopback / a local socket only.

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define NREQ 4096

static const char* unix_path;
static int tcp_port;
static int conns = 64, threads = 2, seconds = 10, keys = 100000;
static char* reqs[NREQ];
static size_t req_len[NREQ];
static atomic_long done_total, errors_total;
static atomic_int stop;

struct conn {
  int fd;
  int next;  // request index
  size_t sent, len;
  char buf[4096];
  size_t have;
};

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int open_conn(void) {
  int fd;
  if (unix_path) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strncpy(a.sun_path, unix_path, sizeof a.sun_path - 1);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr*)&a, sizeof a) != 0) return -1;
  } else {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(tcp_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr*)&a, sizeof a) != 0) return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

// Sends what is left of the current request; 0 when all is sent, -1 on error.
static int send_more(struct conn* c) {
  while (c->sent < req_len[c->next]) {
    ssize_t w = send(c->fd, reqs[c->next] + c->sent, req_len[c->next] - c->sent, MSG_NOSIGNAL);
    if (w < 0) return errno == EAGAIN ? 1 : -1;
    c->sent += (size_t)w;
  }
  return 0;
}

// Whole answers in c->buf: their count (each removed), or -1 on a malformed one.
static int take_answers(struct conn* c) {
  int n = 0;
  for (;;) {
    char* end = memmem(c->buf, c->have, "\r\n\r\n", 4);
    if (!end) return n;
    size_t head = (size_t)(end - c->buf) + 4, body = 0;
    for (char* p = c->buf; p < end; p++) {
      if ((p == c->buf || p[-1] == '\n') && strncasecmp(p, "content-length:", 15) == 0)
        body = strtoul(p + 15, NULL, 10);
    }
    if (c->have < head + body) return n;
    if (strncmp(c->buf, "HTTP/1.1 2", 10) != 0) atomic_fetch_add(&errors_total, 1);
    memmove(c->buf, c->buf + head + body, c->have - head - body);
    c->have -= head + body;
    n++;
  }
}

static void* run(void* arg) {
  int per = (int)(long)arg;
  int ep = epoll_create1(0);
  struct conn* cs = calloc((size_t)per, sizeof *cs);
  unsigned seed = (unsigned)(long)&cs;
  for (int i = 0; i < per; i++) {
    cs[i].fd = open_conn();
    if (cs[i].fd < 0) {
      perror("connect");
      exit(1);
    }
    cs[i].next = rand_r(&seed) % NREQ;
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = &cs[i]};
    epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &e);
    if (send_more(&cs[i]) < 0) exit(1);
  }
  long done = 0;
  struct epoll_event evs[256];
  while (!atomic_load(&stop)) {
    int n = epoll_wait(ep, evs, 256, 100);
    for (int i = 0; i < n; i++) {
      struct conn* c = evs[i].data.ptr;
      ssize_t r = recv(c->fd, c->buf + c->have, sizeof c->buf - c->have, 0);
      if (r <= 0) {
        fprintf(stderr, "sockload: connection closed by the server\n");
        exit(1);
      }
      c->have += (size_t)r;
      int got = take_answers(c);
      if (got > 0) {
        done += got;
        c->next = rand_r(&seed) % NREQ;
        c->sent = 0;
        if (send_more(c) < 0) exit(1);
      }
    }
  }
  atomic_fetch_add(&done_total, done);
  return NULL;
}

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--unix")) unix_path = argv[i + 1];
    else if (!strcmp(argv[i], "--tcp-port")) tcp_port = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--conns")) conns = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--seconds")) seconds = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--keys")) keys = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "sockload: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (!unix_path && !tcp_port) {
    fprintf(stderr, "usage: sockload (--unix PATH | --tcp-port N) [--conns N] [--threads N] "
                    "[--seconds N] [--keys N]\n");
    return 2;
  }
  srand(1000);
  for (int i = 0; i < NREQ; i++) {
    char body[96];
    int bl = snprintf(body, sizeof body, "{\"record_type\": 1, \"record_id\": %d}",
                      1 + rand() % keys);
    reqs[i] = malloc(512);
    req_len[i] = (size_t)snprintf(reqs[i], 512,
                                  "POST /v1/increments HTTP/1.1\r\nHost: localhost\r\n"
                                  "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                                  bl, body);
  }
  pthread_t ts[64];
  if (threads > 64) threads = 64;
  double t0 = now_us();
  for (int t = 0; t < threads; t++)
    pthread_create(&ts[t], NULL, run, (void*)(long)(conns / threads + (t < conns % threads)));
  struct timespec d = {.tv_sec = seconds};
  nanosleep(&d, NULL);
  atomic_store(&stop, 1);
  for (int t = 0; t < threads; t++) pthread_join(ts[t], NULL);
  double t1 = now_us();
  printf("SOCKLOAD requests=%ld duration_us=%.0f errors=%ld\n", atomic_load(&done_total), t1 - t0,
         atomic_load(&errors_total));
  return 0;
}
