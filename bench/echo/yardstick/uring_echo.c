// Minimal io_uring echo yardstick for bench/echo.py (peer "min-uring"): io_uring as ringx uses
// it (SINGLE_ISSUER + DEFER_TASKRUN, multishot accept, multishot receive from a provided-buffer
// ring), each received chunk sent back as is: one send in flight per connection, later chunks
// appended to the connection's pending bytes. No framing work. Usage: uring_echo HOST:PORT
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
#define OUTCAP (1 << 16)
enum { ACC = 1, RCV = 2, SND = 3 };
// A descriptor is closed only once its multishot receive has ended and no send is in flight
// (`closing` marks the wait for the send), so its number cannot be reused while a completion
// for it is still to come. A failed send shuts the socket down, which ends the receive.
struct conn { char *out, *inflight; int len, busy, closing; };
static struct conn conns[MAXFD];
static struct io_uring ring;
static struct io_uring_buf_ring *br;
static char *bufs;

static inline __u64 ud(int kind, int fd) { return ((__u64)kind << 32) | (unsigned)fd; }

static struct io_uring_sqe *sqe(void) {
  struct io_uring_sqe *s = io_uring_get_sqe(&ring);
  if (!s) { io_uring_submit(&ring); s = io_uring_get_sqe(&ring); }
  if (!s) { fprintf(stderr, "submission queue full\n"); exit(1); }
  return s;
}

static void arm_recv(int fd) {
  struct io_uring_sqe *s = sqe();
  io_uring_prep_recv_multishot(s, fd, NULL, 0, 0);
  s->flags |= IOSQE_BUFFER_SELECT; s->buf_group = BGID; s->user_data = ud(RCV, fd);
}

// The receive has ended: close now, or when the send in flight completes.
static void recv_ended(int fd) {
  struct conn *c = &conns[fd];
  if (c->busy) { c->closing = 1; return; }
  close(fd); c->len = 0; c->closing = 0;
}

static void send_pending(int fd) {
  struct conn *c = &conns[fd];
  if (c->busy || c->len == 0) return;
  char *t = c->inflight; c->inflight = c->out; c->out = t;
  struct io_uring_sqe *s = sqe();
  // MSG_WAITALL: io_uring itself retries a short send on a stream socket.
  io_uring_prep_send(s, fd, c->inflight, c->len, MSG_NOSIGNAL | MSG_WAITALL); s->user_data = ud(SND, fd);
  c->len = 0; c->busy = 1;
}

// Appends n received bytes. The benchmark's client keeps one message in flight per
// connection, so 64 KB behind a send means something is wrong: stop rather than measure it.
static void append(int fd, const char *p, int n) {
  struct conn *c = &conns[fd];
  if (!c->out) { c->out = malloc(OUTCAP); c->inflight = malloc(OUTCAP); }
  if (c->len + n > OUTCAP) { fprintf(stderr, "more than %d bytes pending on fd %d\n", OUTCAP, fd); exit(1); }
  memcpy(c->out + c->len, p, n); c->len += n;
}

int main(int argc, char **argv) {
  char *addr = argc > 1 ? argv[1] : "127.0.0.1:9000"; char host[64]; int port;
  if (sscanf(addr, "%63[^:]:%d", host, &port) != 2) { fprintf(stderr, "usage: %s HOST:PORT\n", argv[0]); return 2; }
  int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, host, &a.sin_addr);
  if (bind(lfd, (void *)&a, sizeof a) || listen(lfd, 4096)) { perror("bind"); return 1; }
  struct io_uring_params p = {0};
  p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE; p.cq_entries = 65536;
  if (io_uring_queue_init_params(4096, &ring, &p)) { perror("ring"); return 1; }
  br = mmap(NULL, NBUF * sizeof(struct io_uring_buf), PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  bufs = malloc((size_t)NBUF * BSZ);
  struct io_uring_buf_reg reg = {.ring_addr = (unsigned long)br, .ring_entries = NBUF, .bgid = BGID};
  if (io_uring_register_buf_ring(&ring, &reg, 0)) { perror("bufring"); return 1; }
  io_uring_buf_ring_init(br);
  for (int i = 0; i < NBUF; i++) io_uring_buf_ring_add(br, bufs + (size_t)i * BSZ, BSZ, i, io_uring_buf_ring_mask(NBUF), i);
  io_uring_buf_ring_advance(br, NBUF);
  struct io_uring_sqe *s = sqe();
  io_uring_prep_multishot_accept(s, lfd, NULL, NULL, 0); s->user_data = ud(ACC, lfd);
  for (;;) {
    io_uring_submit_and_wait(&ring, 1);
    struct io_uring_cqe *c; unsigned head, n = 0;
    io_uring_for_each_cqe(&ring, head, c) {
      n++;
      int kind = c->user_data >> 32, fd = (int)(c->user_data & 0xffffffff);
      if (kind == ACC) {
        if (c->res >= MAXFD) close(c->res);
        else if (c->res >= 0) {
          setsockopt(c->res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          arm_recv(c->res);
        }
        if (!(c->flags & IORING_CQE_F_MORE)) {
          s = sqe(); io_uring_prep_multishot_accept(s, lfd, NULL, NULL, 0); s->user_data = ud(ACC, lfd);
        }
      } else if (kind == RCV) {
        if (c->res > 0) {
          int bid = c->flags >> IORING_CQE_BUFFER_SHIFT; char *b = bufs + (size_t)bid * BSZ;
          append(fd, b, c->res);
          io_uring_buf_ring_add(br, b, BSZ, bid, io_uring_buf_ring_mask(NBUF), 0); io_uring_buf_ring_advance(br, 1);
          send_pending(fd);
        } else if (c->res != -ENOBUFS) { recv_ended(fd); continue; }  // EOF or error: no MORE
        if (!(c->flags & IORING_CQE_F_MORE)) arm_recv(fd);
      } else if (kind == SND) {
        conns[fd].busy = 0;
        if (conns[fd].closing) recv_ended(fd);
        else if (c->res < 0) shutdown(fd, SHUT_RDWR);  // the receive ends, then the close
        else send_pending(fd);
      }
    }
    io_uring_cq_advance(&ring, n);
  }
}
