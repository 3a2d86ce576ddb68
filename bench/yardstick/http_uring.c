// HTTP yardstick for bench/http_bench.py (peer "yardstick"): the least a server on io_uring can
// do per keep-alive request on this machine. io_uring as ringx uses it (SINGLE_ISSUER +
// DEFER_TASKRUN, multishot accept, multishot receive from a provided-buffer ring); no HTTP
// parsing: each end of a request head ("\r\n\r\n", found across receive boundaries) owes one
// canned 64-byte response without a Date header. One send in flight per connection carries every
// response owed so far (pipelined requests included). Usage: http_uring HOST:PORT
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
#define BSZ 2048
#define BGID 7
#define MAXFD 65536
#define BATCH 64  // responses one send carries at most
enum { ACC = 1, RCV = 2, SND = 3 };
static const char REPLY[] = "HTTP/1.1 200 OK\r\nServer: yardstick\r\nContent-Type: text/plain\r\n"
                            "Content-Length: 64\r\n\r\n"
                            "yardstick-yardstick-yardstick-yardstick-yardstick-yardstick-0123";
#define RLEN (sizeof REPLY - 1)
// `owed`: responses not yet sent; `matched`: how much of "\r\n\r\n" the last bytes matched.
// A descriptor is closed only once its multishot receive has ended and no send is in flight
// (`closing` marks the wait for the send), so no completion can arrive for a reused number.
struct conn { unsigned owed, sending; int matched, closing; };
static struct conn conns[MAXFD];
static struct io_uring ring;
static struct io_uring_buf_ring *br;
static char *bufs, replies[RLEN * BATCH];

static inline __u64 ud(int kind, int fd) { return ((__u64)kind << 32) | (unsigned)fd; }

static struct io_uring_sqe *sqe(void) {
  struct io_uring_sqe *s = io_uring_get_sqe(&ring);
  if (!s) { io_uring_submit(&ring); s = io_uring_get_sqe(&ring); }
  if (!s) { fprintf(stderr, "submission queue full\n"); exit(1); }
  return s;
}

static void arm_accept(int lfd) {
  struct io_uring_sqe *s = sqe();
  io_uring_prep_multishot_accept(s, lfd, NULL, NULL, 0); s->user_data = ud(ACC, lfd);
}

static void arm_recv(int fd) {
  struct io_uring_sqe *s = sqe();
  io_uring_prep_recv_multishot(s, fd, NULL, 0, 0);
  s->flags |= IOSQE_BUFFER_SELECT; s->buf_group = BGID; s->user_data = ud(RCV, fd);
}

static void flush(int fd) {
  struct conn *c = &conns[fd];
  if (c->sending || c->owed == 0) return;
  c->sending = c->owed < BATCH ? c->owed : BATCH;
  c->owed -= c->sending;
  struct io_uring_sqe *s = sqe();
  // MSG_WAITALL: io_uring retries a short send on a stream socket itself.
  io_uring_prep_send(s, fd, replies, RLEN * c->sending, MSG_NOSIGNAL | MSG_WAITALL);
  s->user_data = ud(SND, fd);
}

// The receive has ended (EOF or error): close now, or once the send in flight completes.
static void recv_ended(int fd) {
  struct conn *c = &conns[fd];
  if (c->sending) { c->closing = 1; return; }
  close(fd); memset(c, 0, sizeof *c);
}

// Counts the request heads that end in these bytes, carrying a partial "\r\n\r\n".
static unsigned heads(struct conn *c, const char *p, int n) {
  static const char END[4] = {'\r', '\n', '\r', '\n'};
  unsigned k = 0; int m = c->matched;
  for (int i = 0; i < n; i++) {
    if (p[i] == END[m]) m++;
    else m = p[i] == '\r' ? 1 : 0;
    if (m == 4) { k++; m = 0; }
  }
  c->matched = m;
  return k;
}

int main(int argc, char **argv) {
  char *addr = argc > 1 ? argv[1] : "127.0.0.1:8090"; char host[64]; int port, one = 1;
  if (sscanf(addr, "%63[^:]:%d", host, &port) != 2) { fprintf(stderr, "usage: %s HOST:PORT\n", argv[0]); return 2; }
  for (int i = 0; i < BATCH; i++) memcpy(replies + i * RLEN, REPLY, RLEN);
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1) { fprintf(stderr, "bad address %s\n", host); return 2; }
  if (bind(lfd, (void *)&a, sizeof a) || listen(lfd, 4096)) { perror("bind"); return 1; }
  struct io_uring_params p = {0};
  p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE; p.cq_entries = 65536;
  if (io_uring_queue_init_params(4096, &ring, &p)) { perror("io_uring_queue_init"); return 1; }
  br = mmap(NULL, NBUF * sizeof(struct io_uring_buf), PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  bufs = malloc((size_t)NBUF * BSZ);
  if (br == MAP_FAILED || !bufs) { perror("buffers"); return 1; }
  struct io_uring_buf_reg reg = {.ring_addr = (unsigned long)br, .ring_entries = NBUF, .bgid = BGID};
  if (io_uring_register_buf_ring(&ring, &reg, 0)) { perror("io_uring_register_buf_ring"); return 1; }
  io_uring_buf_ring_init(br);
  for (int i = 0; i < NBUF; i++) io_uring_buf_ring_add(br, bufs + (size_t)i * BSZ, BSZ, i, io_uring_buf_ring_mask(NBUF), i);
  io_uring_buf_ring_advance(br, NBUF);
  arm_accept(lfd);
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
        if (!(c->flags & IORING_CQE_F_MORE)) arm_accept(lfd);
      } else if (kind == RCV) {
        if (c->res > 0) {
          int bid = c->flags >> IORING_CQE_BUFFER_SHIFT; char *b = bufs + (size_t)bid * BSZ;
          conns[fd].owed += heads(&conns[fd], b, c->res);
          io_uring_buf_ring_add(br, b, BSZ, bid, io_uring_buf_ring_mask(NBUF), 0); io_uring_buf_ring_advance(br, 1);
          flush(fd);
        } else if (c->res != -ENOBUFS) { recv_ended(fd); continue; }  // no MORE follows
        if (!(c->flags & IORING_CQE_F_MORE)) arm_recv(fd);
      } else if (kind == SND) {
        conns[fd].sending = 0;
        if (conns[fd].closing) recv_ended(fd);
        else if (c->res < 0) shutdown(fd, SHUT_RDWR);  // the receive ends, then the close
        else flush(fd);
      }
    }
    io_uring_cq_advance(&ring, n);
  }
}
