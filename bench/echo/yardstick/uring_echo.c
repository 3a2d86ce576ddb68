// Minimal io_uring echo yardstick for bench/echo.py (peer "min-uring"): multishot accept, multishot recv
// from a provided-buffer ring, each received chunk sent back as is (one send in flight per
// connection, later chunks appended to the connection's pending bytes). No framing work.
#include <liburing.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/mman.h>
#define NBUF 4096
#define BSZ 4096
#define BGID 1
#define MAXFD 65536
enum { ACC = 1, RCV = 2, SND = 3 };
struct conn { char *out; int len, cap, busy; char *inflight; int inflen; };
static struct conn conns[MAXFD];
static struct io_uring ring;
static inline __u64 ud(int kind, int fd) { return ((__u64)kind << 32) | (unsigned)fd; }
static void send_pending(int fd) {
  struct conn *c = &conns[fd];
  if (c->busy || c->len == 0) return;
  // swap pending into inflight
  char *t = c->inflight; if (!t) t = malloc(c->cap); 
  c->inflight = c->out; c->inflen = c->len; c->out = t; c->len = 0;
  struct io_uring_sqe *s = io_uring_get_sqe(&ring);
  io_uring_prep_send(s, fd, c->inflight, c->inflen, MSG_NOSIGNAL | MSG_WAITALL); s->user_data = ud(SND, fd);
  c->busy = 1;
}
static void append(int fd, const char *p, int n) {
  struct conn *c = &conns[fd];
  if (!c->out) { c->cap = 1 << 16; c->out = malloc(c->cap); c->inflight = malloc(c->cap); }
  if (c->len + n > c->cap) { fprintf(stderr, "overflow\n"); exit(1); }
  memcpy(c->out + c->len, p, n); c->len += n;
}
int main(int argc, char **argv) {
  char *addr = argc > 1 ? argv[1] : "127.0.0.1:9000"; char host[64]; int port;
  sscanf(addr, "%63[^:]:%d", host, &port);
  int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, host, &a.sin_addr);
  if (bind(lfd, (void *)&a, sizeof a) || listen(lfd, 4096)) { perror("bind"); return 1; }
  struct io_uring_params p = {0};
  p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE; p.cq_entries = 65536;
  if (io_uring_queue_init_params(4096, &ring, &p)) { perror("ring"); return 1; }
  struct io_uring_buf_ring *br = mmap(NULL, NBUF * sizeof(struct io_uring_buf), PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  char *bufs = malloc((size_t)NBUF * BSZ);
  struct io_uring_buf_reg reg = {.ring_addr = (unsigned long)br, .ring_entries = NBUF, .bgid = BGID};
  if (io_uring_register_buf_ring(&ring, &reg, 0)) { perror("bufring"); return 1; }
  io_uring_buf_ring_init(br);
  for (int i = 0; i < NBUF; i++) io_uring_buf_ring_add(br, bufs + (size_t)i * BSZ, BSZ, i, io_uring_buf_ring_mask(NBUF), i);
  io_uring_buf_ring_advance(br, NBUF);
  struct io_uring_sqe *s = io_uring_get_sqe(&ring);
  io_uring_prep_multishot_accept(s, lfd, NULL, NULL, 0); s->user_data = ud(ACC, lfd);
  for (;;) {
    io_uring_submit_and_wait(&ring, 1);
    struct io_uring_cqe *c; unsigned head, n = 0;
    io_uring_for_each_cqe(&ring, head, c) {
      n++;
      int kind = c->user_data >> 32, fd = (int)(c->user_data & 0xffffffff);
      if (kind == ACC) {
        if (c->res >= 0 && c->res < MAXFD) {
          int on = 1; setsockopt(c->res, IPPROTO_TCP, 1 /*TCP_NODELAY*/, &on, sizeof on);
          s = io_uring_get_sqe(&ring);
          io_uring_prep_recv_multishot(s, c->res, NULL, 0, 0);
          s->flags |= IOSQE_BUFFER_SELECT; s->buf_group = BGID; s->user_data = ud(RCV, c->res);
        }
      } else if (kind == RCV) {
        if (c->res <= 0) { if (c->res != -ENOBUFS) { close(fd); conns[fd].len = 0; conns[fd].busy = 0; continue; } }
        else {
          int bid = c->flags >> IORING_CQE_BUFFER_SHIFT; char *b = bufs + (size_t)bid * BSZ;
          append(fd, b, c->res);
          io_uring_buf_ring_add(br, b, BSZ, bid, io_uring_buf_ring_mask(NBUF), 0); io_uring_buf_ring_advance(br, 1);
          send_pending(fd);
        }
        if (!(c->flags & IORING_CQE_F_MORE)) { s = io_uring_get_sqe(&ring); io_uring_prep_recv_multishot(s, fd, NULL, 0, 0);
          s->flags |= IOSQE_BUFFER_SELECT; s->buf_group = BGID; s->user_data = ud(RCV, fd); }
      } else if (kind == SND) {
        conns[fd].busy = 0;
        if (c->res > 0) send_pending(fd);
      }
    }
    io_uring_cq_advance(&ring, n);
  }
}
