// Proxy yardstick for bench/proxy.py (peer "yardstick"): the least an HTTP/1.1 reverse proxy on
// io_uring can do per keep-alive request on this machine. Each client request is passed to a
// connection taken from a keep-alive pool to one upstream and the response passed back, with
// fixed framing: a message is a head ending in "\r\n\r\n", then Content-Length body bytes (none
// without the header; a response must have it). No routing, no header rewriting, no logging; one
// thread. io_uring as tight as yardstick/http_uring.c serves and ringx runs: SINGLE_ISSUER +
// DEFER_TASKRUN (completions run only inside our io_uring_enter), one io_uring_enter per loop
// submitting all that the completions queued, a registered ring fd, direct descriptors (no file
// lookup per operation), multishot accept, multishot receive into a provided-buffer ring (no
// SQE per read), and each send made straight from the buffer its bytes were received into (no
// copy in user space; MSG_ZEROCOPY costs more than it saves at these sizes). Per proxied request:
// two SQEs (the two sends) and four CQEs. Usage: proxy_uring LISTEN_HOST:PORT UPSTREAM_HOST:PORT
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#define NSLOT 16384  // direct descriptors: an upstream's at its plain fd number, below FIRST;
#define FIRST 1024   // the clients' from FIRST up, picked by the kernel at accept
#define NBUF 256     // receive buffers: few, so the ones in use stay in cache (FIFO reuse)
#define BSZ 4096
#define BGID 1
#define POOL 64      // idle upstream connections kept, as the other peers' `keepalive 64`
enum { ACC = 1, RCV, SND, CON, IGN };  // IGN: cancel and close, whose CQEs come only on failure

// Bytes received and not yet passed on: a FIFO of buffers per connection, linked through nxt[];
// off/len: where a buffer's unsent bytes start, how many. A buffer goes back to the ring once all
// its bytes were sent on (the send's completion says so), or its connection closed.
static int nxt[NBUF], off[NBUF], len[NBUF];
// Per slot. A connection passes on one message at a time with at most one send in flight from
// its buffers (so sends to a socket never overlap); a client is bound to an upstream (`peer`)
// from the first byte of a request until the request and the response are both through. An
// upstream's multishot receive stays armed in the pool too: bytes or an EOF there drop it.
// A slot is closed only once no operation refers to it (`ops`: its armed receive, its connect,
// sends on it or from its buffers), so no completion can arrive for a reused slot; `dead`
// marks the wait (the operations are cancelled).
struct conn {
  int open, up, dead, eof, connecting, starving;  // starving: receive ended on ENOBUFS
  int peer, qh, qt;  // the other connection of the exchange (or -1); the buffer FIFO (or -1)
  int sending, ops;  // bytes of buffer qh in the send in flight; operations in flight
  // Framing of the message being passed on: how much of "\r\n\r\n" and "\ncontent-length:"
  // the last bytes matched, its Content-Length (-1: none yet), body bytes left (-1: in the
  // head), all of it handed to sends.
  int end, clat, done; long cl, left;
};
static struct conn conns[NSLOT];
static int pool[POOL], npool, starved[NSLOT], nstarved;
static struct sockaddr_in upstream;
static struct io_uring ring;
static struct io_uring_buf_ring *br;
static char *bufs;
static int one = 1;
static void drop(int fd);

// user_data: the operation, the slot it acts on, and for a send the slot whose buffer it sends.
static inline __u64 ud(int kind, int fd, int src) { return (__u64)kind << 48 | (__u64)src << 24 | (unsigned)fd; }
static inline int live(int fd) { return conns[fd].open && !conns[fd].dead; }

static struct io_uring_sqe *sqe(void) {
  struct io_uring_sqe *s = io_uring_get_sqe(&ring);
  if (!s) { io_uring_submit(&ring); s = io_uring_get_sqe(&ring); }
  if (!s) { fprintf(stderr, "submission queue full\n"); exit(1); }
  return s;
}
// Queues one SQE: `prep` fills `s` (and clears its flags), then the flags and user_data are set.
#define QUEUE(prep, kind, fd, src, fl) \
  do { struct io_uring_sqe *s = sqe(); prep; s->flags |= (fl); s->user_data = ud(kind, fd, src); } while (0)

static void arm_recv(int fd) {
  QUEUE((io_uring_prep_recv_multishot(s, fd, NULL, 0, 0), s->buf_group = BGID), RCV, fd, 0,
        IOSQE_FIXED_FILE | IOSQE_BUFFER_SELECT);
  conns[fd].ops++;
}

static void reset(struct conn *c) { c->end = c->clat = c->done = 0; c->cl = c->left = -1; }

static void open_conn(int fd, int up) {
  conns[fd] = (struct conn){.open = 1, .up = up, .peer = -1, .qh = -1, .qt = -1};
  reset(&conns[fd]);
}

// A buffer back to the ring; connections whose receive ran out of buffers are re-armed.
static void give(int b) {
  io_uring_buf_ring_add(br, bufs + (size_t)b * BSZ, BSZ, b, io_uring_buf_ring_mask(NBUF), 0);
  io_uring_buf_ring_advance(br, 1);
  while (nstarved) {
    int fd = starved[--nstarved];
    if (conns[fd].starving) { conns[fd].starving = 0; arm_recv(fd); }
  }
}

static void finish_close(int fd) {
  struct conn *c = &conns[fd];
  for (int b = c->qh, n; b >= 0; b = n) { n = nxt[b]; give(b); }
  if (c->up) {  // slot first: its number is free again once the plain fd is closed
    int none = -1;
    io_uring_register_files_update(&ring, fd, &none, 1); close(fd);
  } else QUEUE(io_uring_prep_close_direct(s, fd), IGN, fd, 0, IOSQE_CQE_SKIP_SUCCESS);
  memset(c, 0, sizeof *c);
}

// Ends a connection, and the exchange it is in: its peer is mid-request or mid-response.
static void drop(int fd) {
  struct conn *c = &conns[fd];
  if (!live(fd)) return;
  c->dead = 1; c->starving = 0;
  if (c->up && c->peer < 0)  // idle: in the pool
    for (int i = 0; i < npool; i++)
      if (pool[i] == fd) { pool[i] = pool[--npool]; break; }
  int peer = c->peer;
  c->peer = -1;
  if (peer >= 0) { conns[peer].peer = -1; drop(peer); }
  if (c->ops)  // the armed receive, a connect, sends: their completions end the wait
    QUEUE((io_uring_prep_cancel_fd(s, fd, IORING_ASYNC_CANCEL_ALL), s->cancel_flags |= IORING_ASYNC_CANCEL_FD_FIXED),
          IGN, fd, 0, IOSQE_CQE_SKIP_SUCCESS);
  else finish_close(fd);
}

// After an operation on or from `fd` completed: close a dropped connection once none is left.
static void settle(int fd) {
  if (conns[fd].open && conns[fd].dead && conns[fd].ops == 0) finish_close(fd);
}

// How many of these n received bytes belong to the message being passed on (c->done at its
// last byte), or -1 for a response that gives no length. The head is scanned byte by byte, so
// a head split across any number of receives is framed the same; the body only counted.
static int frame(struct conn *c, const char *p, int n) {
  static const char END[] = "\r\n\r\n", CL[] = "\ncontent-length:";
  int i = 0;
  if (c->left < 0) {  // in the head (the state in locals: stores through c could alias p)
    int end = c->end, clat = c->clat; long cl = c->cl;
    while (i < n && end < 4) {
      if (clat == 0 && end <= 1) {  // mid-line, nothing matching: skip to the line's last byte
        const char *q = memchr(p + i, '\n', n - i);
        if (!q) { end = p[n - 1] == '\r'; i = n; break; }
        if (q - p - 1 > i) i = q - p - 1;  // from here "end" restarts as from any mid-line state
      }
      char ch = p[i++], lc = ch >= 'A' && ch <= 'Z' ? ch + 32 : ch;
      end = ch == END[end] ? end + 1 : ch == '\r';
      if (clat < 16) {  // matching the header's name at a line's start
        clat = lc == CL[clat] ? clat + 1 : ch == '\n';
        if (clat == 16) cl = 0;
      } else if (ch >= '0' && ch <= '9' && cl < (1L << 40)) cl = cl * 10 + ch - '0';
      else if (ch != ' ' && ch != '\t') clat = 0;  // the value ended
    }
    c->end = end; c->clat = clat; c->cl = cl;
    if (end < 4) return n;  // the head goes on in the next bytes
    if (cl < 0 && c->up) return -1;
    c->left = cl < 0 ? 0 : cl;
  }
  long body = c->left < n - i ? c->left : n - i;
  c->left -= body;
  c->done = c->left == 0;
  return i + body;
}

// Pairs client `cl` with an idle upstream connection from the pool, else a new one.
static int take_upstream(int cl) {
  int u;
  if (npool) u = pool[--npool];
  else {
    if ((u = socket(AF_INET, SOCK_STREAM, 0)) < 0) return -1;
    if (u >= FIRST || io_uring_register_files_update(&ring, u, &u, 1) != 1) { close(u); return -1; }
    setsockopt(u, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // clients inherit the listener's
    open_conn(u, 1); conns[u].connecting = 1; conns[u].ops++;
    QUEUE(io_uring_prep_connect(s, u, (struct sockaddr *)&upstream, sizeof upstream), CON, u, 0, IOSQE_FIXED_FILE);
  }
  conns[cl].peer = u; conns[u].peer = cl;
  return u;
}

// Passes on what `x` received, up to the end of the current message, one send at a time,
// straight from the receive buffer. Handles the end of x's bytes after an EOF.
static void pump(int x) {
  struct conn *c = &conns[x];
  if (!live(x) || c->sending) return;
  if (c->qh < 0) {  // all passed on: after an EOF, the end unless mid-exchange with a message complete
    if (c->eof && (c->peer < 0 || !c->done)) drop(x);
    return;
  }
  if (c->done) return;  // the next message waits for this exchange to end
  if (c->peer < 0 && (c->up || take_upstream(x) < 0)) { drop(x); return; }  // an upstream's: unasked for
  if (conns[c->peer].connecting) return;  // pumped again once connected
  int b = c->qh, n = frame(c, bufs + (size_t)b * BSZ + off[b], len[b]);
  if (n < 0) { drop(x); return; }
  // MSG_WAITALL: io_uring retries a short send on a stream socket itself.
  QUEUE(io_uring_prep_send(s, c->peer, bufs + (size_t)b * BSZ + off[b], n, MSG_NOSIGNAL | MSG_WAITALL),
        SND, c->peer, x, IOSQE_FIXED_FILE);
  c->sending = n; c->ops++; conns[c->peer].ops++;
}

// Both messages are through: the upstream connection back to the pool, the client on.
static void end_exchange(int cl, int u) {
  conns[cl].peer = conns[u].peer = -1;
  reset(&conns[cl]); reset(&conns[u]);
  if (conns[u].qh >= 0 || conns[u].eof || npool == POOL) drop(u);  // bytes past the response: drop too
  else pool[npool++] = u;
  pump(cl);  // a pipelined next request, or its EOF
}

// `x`'s first n queued bytes reached its peer.
static void sent(int x, int n) {
  struct conn *c = &conns[x];
  int b = c->qh;
  c->sending = 0; off[b] += n; len[b] -= n;
  if (len[b] == 0) { if ((c->qh = nxt[b]) < 0) c->qt = -1; give(b); }
  int cl = c->up ? c->peer : x, u = c->up ? x : c->peer;
  if (conns[cl].done && conns[u].done && !conns[cl].sending && !conns[u].sending) end_exchange(cl, u);
  else pump(x);
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
  setsockopt(lfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // accepted connections inherit it
  if (bind(lfd, (void *)&a, sizeof a) || listen(lfd, 4096)) { perror("bind"); return 1; }
  struct rlimit rl;  // the direct-descriptor table may not exceed RLIMIT_NOFILE
  if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < NSLOT) { rl.rlim_cur = rl.rlim_max; setrlimit(RLIMIT_NOFILE, &rl); }
  struct io_uring_params p = {0};
  p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_CQSIZE;
  p.cq_entries = 65536;
  if (io_uring_queue_init_params(4096, &ring, &p)) { perror("io_uring_queue_init"); return 1; }
  if (io_uring_register_ring_fd(&ring) != 1 || io_uring_register_files_sparse(&ring, NSLOT) ||
      io_uring_register_file_alloc_range(&ring, FIRST, NSLOT - FIRST)) {
    fprintf(stderr, "io_uring registration failed\n"); return 1;
  }
  br = mmap(NULL, NBUF * sizeof(struct io_uring_buf), PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  bufs = malloc((size_t)NBUF * BSZ);
  if (br == MAP_FAILED || !bufs) { perror("buffers"); return 1; }
  struct io_uring_buf_reg reg = {.ring_addr = (unsigned long)br, .ring_entries = NBUF, .bgid = BGID};
  if (io_uring_register_buf_ring(&ring, &reg, 0)) { perror("io_uring_register_buf_ring"); return 1; }
  io_uring_buf_ring_init(br);
  for (int i = 0; i < NBUF; i++) io_uring_buf_ring_add(br, bufs + (size_t)i * BSZ, BSZ, i, io_uring_buf_ring_mask(NBUF), i);
  io_uring_buf_ring_advance(br, NBUF);
  QUEUE(io_uring_prep_multishot_accept_direct(s, lfd, NULL, NULL, 0), ACC, 0, 0, 0);
  for (;;) {
    io_uring_submit_and_wait(&ring, 1);
    struct io_uring_cqe *cqe; unsigned head, n = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      n++;
      int kind = cqe->user_data >> 48, fd = cqe->user_data & 0xffffff, res = cqe->res;
      int src = (cqe->user_data >> 24) & 0xffffff, more = cqe->flags & IORING_CQE_F_MORE;
      struct conn *c = &conns[fd];
      if (kind == ACC) {
        if (res >= 0) { open_conn(res, 0); arm_recv(res); }
        if (!more) QUEUE(io_uring_prep_multishot_accept_direct(s, lfd, NULL, NULL, 0), ACC, 0, 0, 0);
      } else if (kind == CON) {
        c->connecting = 0; c->ops--;
        if (res < 0) drop(fd);
        else if (live(fd)) { arm_recv(fd); pump(c->peer); }
        settle(fd);
      } else if (kind == SND) {  // res: all the bytes (MSG_WAITALL), else the exchange is lost
        c->ops--; conns[src].ops--;
        if (live(src) && live(fd)) { if (res == conns[src].sending) sent(src, res); else drop(src); }
        settle(fd); settle(src);
      } else if (kind == RCV) {
        if (!more) c->ops--;  // the receive ended
        if (res > 0) {
          int b = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
          if (!live(fd)) give(b);
          else {  // to the connection's FIFO
            off[b] = 0; len[b] = res; nxt[b] = -1;
            if (c->qh < 0) c->qh = b; else nxt[c->qt] = b;
            c->qt = b;
            pump(fd);
          }
        } else if (res == -ENOBUFS && live(fd)) { c->starving = 1; starved[nstarved++] = fd; }
        else if (res == 0 && live(fd)) { c->eof = 1; pump(fd); }
        else drop(fd);  // an error, or the cancellation of a dropped connection's receive
        if (!more && live(fd) && !c->eof && !c->starving) arm_recv(fd);  // it stopped on its own
        settle(fd);
      }
    }
    io_uring_cq_advance(&ring, n);
  }
}
