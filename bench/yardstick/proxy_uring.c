// Proxy yardstick for bench/proxy.py (peer "yardstick"): the least an HTTP/1.1 reverse proxy on
// io_uring can do per keep-alive request on this machine. Each client request is copied to a
// connection taken from a keep-alive pool to one upstream and the response copied back, with
// fixed framing known in advance: a request is a head ending in "\r\n\r\n" with no body (the
// benchmark's GETs), a response is a head with a Content-Length and that many body bytes. No
// routing, no header rewriting, no logging; one thread. io_uring the simple way: SINGLE_ISSUER +
// DEFER_TASKRUN as ringx, multishot accept, one SQE per connect, receive and send, each into or
// from the connection's own buffer. Usage: proxy_uring LISTEN_HOST:PORT UPSTREAM_HOST:PORT
#define _GNU_SOURCE  // memmem
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <string.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#define MAXFD 65536
#define CBUF 4096   // a client's buffer: a request head must fit
#define UBUF 16384  // an upstream's buffer: a response head must fit
#define POOL 64     // idle upstream connections kept, as the other peers' `keepalive 64`
enum { ACC = 1, RCV, SND, CON };

// One exchange at a time per connection: a client either has a receive in flight (idle) or is
// bound to an upstream (`peer`) until the response is through. An upstream has a receive in
// flight whenever it is not sending a response chunk to its client, in the pool too: that
// receive takes the next response, and an EOF there drops an idle connection from the pool.
// A descriptor is closed only once no SQE for it is in flight (`ops`), so its number cannot be
// reused while a completion for it is still to come; `dead` marks the wait (shutdown ends it).
struct conn {
  char *buf; int len;  // bytes received and not yet passed on
  int peer;            // the other connection of the exchange in progress, or -1
  int ops, dead, up;   // SQEs in flight; closing; an upstream connection
  int head;            // client: the length of the request head being forwarded
  long total, sent;    // upstream: response length (0 until its head is in), bytes passed on
};
static struct conn conns[MAXFD];
static int pool[POOL], npool;
static struct sockaddr_in upstream;
static struct io_uring ring;
static const int one = 1;

// user_data: the byte count a send must reach (32 bits), the operation, the descriptor.
static inline __u64 ud(int kind, int fd, unsigned n) { return ((__u64)n << 32) | ((__u64)kind << 24) | (unsigned)fd; }

static struct io_uring_sqe *sqe(void) {
  struct io_uring_sqe *s = io_uring_get_sqe(&ring);
  if (!s) { io_uring_submit(&ring); s = io_uring_get_sqe(&ring); }
  if (!s) { fprintf(stderr, "submission queue full\n"); exit(1); }
  return s;
}

static void arm_accept(int lfd) {
  struct io_uring_sqe *s = sqe();
  io_uring_prep_multishot_accept(s, lfd, NULL, NULL, 0); s->user_data = ud(ACC, lfd, 0);
}

static void op_recv(int fd) {
  struct conn *c = &conns[fd];
  struct io_uring_sqe *s = sqe();
  io_uring_prep_recv(s, fd, c->buf + c->len, (c->up ? UBUF : CBUF) - c->len, 0);
  s->user_data = ud(RCV, fd, 0); c->ops++;
}

static void op_send(int fd, const char *p, unsigned n) {
  struct io_uring_sqe *s = sqe();
  // MSG_WAITALL: io_uring retries a short send on a stream socket itself.
  io_uring_prep_send(s, fd, p, n, MSG_NOSIGNAL | MSG_WAITALL);
  s->user_data = ud(SND, fd, n); conns[fd].ops++;
}

static int open_conn(int fd, int up) {
  if (fd >= MAXFD) { close(fd); return -1; }
  struct conn *c = &conns[fd];
  *c = (struct conn){.buf = malloc(up ? UBUF : CBUF), .peer = -1, .up = up};
  if (!c->buf) { perror("malloc"); exit(1); }
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

static void finish_close(int fd) {
  close(fd); free(conns[fd].buf); memset(&conns[fd], 0, sizeof conns[fd]);
}

// Ends a connection, and the exchange it is in: its peer is mid-request or mid-response.
static void drop(int fd) {
  struct conn *c = &conns[fd];
  if (!c->buf || c->dead) return;
  c->dead = 1;
  if (c->up && c->peer < 0)  // idle: in the pool
    for (int i = 0; i < npool; i++)
      if (pool[i] == fd) { pool[i] = pool[--npool]; break; }
  int peer = c->peer;
  c->peer = -1;
  if (peer >= 0) { conns[peer].peer = -1; drop(peer); }
  shutdown(fd, SHUT_RDWR);  // completes the receive in flight, if any
  if (c->ops == 0) finish_close(fd);
}

// An idle upstream connection from the pool, else a new one (`*fresh`: its connect is in flight).
static int take_upstream(int *fresh) {
  *fresh = 0;
  if (npool) return pool[--npool];
  int u = socket(AF_INET, SOCK_STREAM, 0);
  if (u < 0 || open_conn(u, 1) < 0) return -1;
  struct io_uring_sqe *s = sqe();
  io_uring_prep_connect(s, u, (struct sockaddr *)&upstream, sizeof upstream);
  s->user_data = ud(CON, u, 0); conns[u].ops++;
  *fresh = 1;
  return u;
}

// The client's bytes so far: forward a complete request head, else read on.
static void client_data(int fd) {
  struct conn *c = &conns[fd];
  char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
  if (!end) {
    if (c->len == CBUF) drop(fd); else op_recv(fd);
    return;
  }
  c->head = end + 4 - c->buf;
  int fresh, u = take_upstream(&fresh);
  if (u < 0) { drop(fd); return; }
  c->peer = u; conns[u].peer = fd;
  if (!fresh) op_send(u, c->buf, c->head);  // else once connected
}

// The length of the body that a response head (`n` bytes) announces, or -1.
static long content_length(const char *p, int n) {
  for (const char *q = p, *end = p + n - 17; q < end; q++)
    if (q[0] == '\n' && !strncasecmp(q + 1, "content-length:", 15))
      return strtol(q + 16, NULL, 10);  // skips blanks, stops at the "\r" that ends the line
  return -1;
}

// The upstream's bytes so far: pass them on to the client once the response head is in.
static void upstream_data(int u) {
  struct conn *c = &conns[u];
  if (c->peer < 0) { drop(u); return; }  // bytes on an idle connection
  if (c->total == 0) {
    char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
    if (!end) {
      if (c->len == UBUF) drop(u); else op_recv(u);
      return;
    }
    long head = end + 4 - c->buf, body = content_length(c->buf, head);
    if (body < 0) { drop(u); return; }
    c->total = head + body;
  }
  if (c->sent + c->len > c->total) { drop(u); return; }  // more than the response: not HTTP/1.1 as framed
  op_send(c->peer, c->buf, c->len);
}

// A chunk of the response reached the client: read the rest, or end the exchange.
static void client_sent(int fd) {
  struct conn *c = &conns[fd];
  int u = c->peer;
  struct conn *uc = &conns[u];
  uc->sent += uc->len; uc->len = 0;
  if (uc->sent < uc->total) { op_recv(u); return; }
  uc->total = uc->sent = 0; uc->peer = c->peer = -1;
  if (npool < POOL) { pool[npool++] = u; op_recv(u); }
  else drop(u);
  c->len -= c->head;
  memmove(c->buf, c->buf + c->head, c->len);  // a pipelined next request, if any
  c->head = 0;
  client_data(fd);
}

static int parse_addr(const char *s, struct sockaddr_in *a) {
  char host[64]; int port;
  *a = (struct sockaddr_in){.sin_family = AF_INET};
  if (sscanf(s, "%63[^:]:%d", host, &port) != 2 || inet_pton(AF_INET, host, &a->sin_addr) != 1) return -1;
  a->sin_port = htons(port);
  return 0;
}

int main(int argc, char **argv) {
  struct sockaddr_in a;
  if (argc != 3 || parse_addr(argv[1], &a) || parse_addr(argv[2], &upstream)) {
    fprintf(stderr, "usage: %s LISTEN_HOST:PORT UPSTREAM_HOST:PORT\n", argv[0]); return 2;
  }
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(lfd, (void *)&a, sizeof a) || listen(lfd, 4096)) { perror("bind"); return 1; }
  struct io_uring_params p = {0};
  p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE; p.cq_entries = 65536;
  if (io_uring_queue_init_params(4096, &ring, &p)) { perror("io_uring_queue_init"); return 1; }
  arm_accept(lfd);
  for (;;) {
    io_uring_submit_and_wait(&ring, 1);
    struct io_uring_cqe *cqe; unsigned head, n = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      n++;
      int kind = (cqe->user_data >> 24) & 0xff, fd = cqe->user_data & 0xffffff, res = cqe->res;
      if (kind == ACC) {
        if (res >= 0 && open_conn(res, 0) >= 0) op_recv(res);
        if (!(cqe->flags & IORING_CQE_F_MORE)) arm_accept(lfd);
        continue;
      }
      struct conn *c = &conns[fd];
      c->ops--;
      if (c->dead) { if (c->ops == 0) finish_close(fd); continue; }
      if (kind == CON) {
        if (res < 0) { drop(fd); continue; }
        op_recv(fd);
        op_send(fd, conns[c->peer].buf, conns[c->peer].head);
      } else if (kind == SND) {
        if (res != (int)(cqe->user_data >> 32)) drop(fd);
        else if (!c->up) client_sent(fd);  // an upstream's request sent: its receive takes the response
      } else if (res <= 0) {
        drop(fd);  // EOF or error on a receive
      } else {
        c->len += res;
        if (c->up) upstream_data(fd); else client_data(fd);
      }
    }
    io_uring_cq_advance(&ring, n);
  }
}
