// Transport yardstick for bench/h3.py (peers "floor-udp" and "floor-tcp"): the least CPU a
// server on this machine spends to move what ringx's h3 and h2 move, doing no protocol work at
// all (no TLS, no QUIC, no HTTP): a file as QUIC-sized UDP datagrams and over TCP (a request
// names a byte count, the answer is that many zero bytes), and small requests as single
// datagrams, some answered by one. Measured beside ringx's h3 and h2 on the same workloads, it
// says how much of what h3 costs over h2 is the transport alone on loopback.
//
//   bulk_floor serve udp PORT SEG SEGS WINDOW
//       one UDP socket on 127.0.0.1:PORT (4 MiB send buffer, as ringx gives a QUIC listener).
//       A request datagram ("R" + 4-byte count) starts a transfer to its sender: SEG-byte
//       datagrams sent SEGS at a time in one sendmsg with UDP_SEGMENT (GSO), as ringx sends,
//       at most WINDOW bytes beyond what the client acknowledged ("A" + 8-byte cumulative
//       count), so nothing is lost in a full buffer. Sleeps in poll when it has nothing to send.
//   bulk_floor serve tcp PORT
//       a TCP listener: each request ("R" + count) is answered with that many bytes, sent
//       64 KiB per send until the socket is full, then epoll for room.
//       A datagram "Q" + 2-byte size is answered at once with one datagram of that size, "q"
//       is not answered (the small-request floor below).
//   bulk_floor fetch udp|tcp PORT CONNS SECONDS BYTES ACK_EVERY [RATE]
//       CONNS client sockets each fetching BYTES again and again for SECONDS (at most RATE
//       transfers a second in all, spread over the sockets, when RATE is given); UDP receives with
//       recvmmsg (no GRO, as quic-go's socket) and acknowledges every ACK_EVERY datagrams and at
//       the end of each transfer. A UDP socket that gets nothing for 200 ms asks again (counted
//       as a retry). Prints "transfers N bytes B retries R seconds S".
//   bulk_floor serve udp-sink PORT ACK_EVERY
//       the upload floor: one UDP socket on 127.0.0.1:PORT that receives with UDP_GRO (a
//       blocking recvmsg of up to 64 KiB of coalesced datagrams, as ringx receives) and tells
//       each sender every ACK_EVERY datagrams how many bytes came ("A" + 8-byte count).
//   bulk_floor serve tcp-sink PORT
//       a TCP listener that reads and drops what its connections send (epoll, 256 KiB reads).
//   bulk_floor push udp|tcp PORT CONNS SECONDS BYTES SEG SEGS WINDOW RATE
//       CONNS client sockets each sending BYTES again and again for SECONDS (at most RATE
//       transfers a second in all, 0: no limit): over UDP as SEG-byte datagrams, SEGS to a
//       sendmsg with UDP_SEGMENT, at most WINDOW bytes beyond what the sink acknowledged (200 ms
//       without an acknowledgement and what is outstanding is taken as lost: counted as a
//       retry, and the window starts again); over TCP in 64 KiB sends. Prints "transfers N
//       bytes B retries R seconds S received G": G is what the sink last acknowledged (UDP;
//       over TCP, B).
//   bulk_floor chat PORT CONNS SECONDS DGRAMS_PER_S IN_SIZE ANSWER_PERMILLE OUT_SIZE BURST
//       the small-request floor: CONNS client sockets send IN_SIZE-byte datagrams, DGRAMS_PER_S
//       in all, BURST at a time on one socket (one sendmmsg), bursts evenly spaced (a spinning
//       sender) and round robin over the sockets; ANSWER_PERMILLE of them ask for an
//       OUT_SIZE-byte answer. bench/h3.py sets BURST to the datagrams ringx-h3 took per wake-up
//       in the same round, so the floor wakes as often as ringx-h3 did. Prints "sent N answers
//       A seconds S".
//
// 127.0.0.1 is the address every server binds and every client sends to, unless the
// environment's FLOOR_ADDR names another (server_addr below).
//
// In C, beside udp_load.c, because the floor must cost nothing but the system calls it makes.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#define BATCH 64
#define MAXC 256
#define MAXSEG 1500

static char zeros[64 * 1024];

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what) { perror(what); exit(1); }

// The server's address, PORT at FLOOR_ADDR (an IPv4 address; 127.0.0.1 when unset): where
// a server binds and a client sends. bench/h3.py --veth sets it to the server's end of the
// veth pair, the server then running in its namespace.
static struct sockaddr_in server_addr(int port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  const char *host = getenv("FLOOR_ADDR");
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (host && *host && inet_pton(AF_INET, host, &a.sin_addr) != 1) {
    fprintf(stderr, "bulk_floor: FLOOR_ADDR=%s is not an IPv4 address\n", host);
    exit(2);
  }
  return a;
}

static void big_buffers(int fd) {
  int sz = 4 << 20;
  // SO_*BUFFORCE passes net.core.[rw]mem_max (root); otherwise the plain option, capped.
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof sz))
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof sz))
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
}

// A UDP transfer in progress: to `peer`, `want` bytes, `sent` so far, `acked` by the client.
struct xfer { struct sockaddr_in peer; uint64_t want, sent, acked; int used; };

static struct xfer *find(struct xfer *x, const struct sockaddr_in *a) {
  struct xfer *free_slot = NULL;
  for (int i = 0; i < MAXC; i++) {
    if (x[i].used && x[i].peer.sin_port == a->sin_port && x[i].peer.sin_addr.s_addr == a->sin_addr.s_addr)
      return &x[i];
    if (!x[i].used && !free_slot) free_slot = &x[i];
  }
  if (free_slot) { memset(free_slot, 0, sizeof *free_slot); free_slot->peer = *a; free_slot->used = 1; }
  return free_slot;
}

static void serve_udp(int port, int seg, int segs, uint64_t window) {
  static struct xfer xs[MAXC];
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
  struct sockaddr_in a = server_addr(port);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a)) die("bulk_floor: udp bind");
  big_buffers(fd);
  printf("ready\n"); fflush(stdout);
  // Whole datagrams are read, as a server reads them.
  static char rbuf[BATCH][MAXSEG];
  struct mmsghdr m[BATCH], ans[BATCH];
  struct iovec iov[BATCH], aiov[BATCH];
  struct sockaddr_in from[BATCH];
  for (;;) {
    for (int i = 0; i < BATCH; i++) {
      iov[i] = (struct iovec){rbuf[i], sizeof rbuf[i]};
      m[i].msg_hdr = (struct msghdr){.msg_name = &from[i], .msg_namelen = sizeof from[i], .msg_iov = &iov[i], .msg_iovlen = 1};
    }
    int n = recvmmsg(fd, m, BATCH, MSG_DONTWAIT, NULL), na = 0;
    for (int i = 0; i < n; i++) {
      if (rbuf[i][0] == 'q') continue;
      if (rbuf[i][0] == 'Q' && m[i].msg_len >= 3) {
        uint16_t len; memcpy(&len, rbuf[i] + 1, 2);
        aiov[na] = (struct iovec){zeros, len < MAXSEG ? len : MAXSEG};
        ans[na].msg_hdr = (struct msghdr){.msg_name = &from[i], .msg_namelen = sizeof from[i], .msg_iov = &aiov[na], .msg_iovlen = 1};
        na++;
        continue;
      }
      struct xfer *x = find(xs, &from[i]);
      if (!x) continue;
      if (rbuf[i][0] == 'R' && m[i].msg_len >= 5) {
        uint32_t want; memcpy(&want, rbuf[i] + 1, 4);
        x->want = want; x->sent = 0; x->acked = 0;
      } else if (rbuf[i][0] == 'A' && m[i].msg_len >= 9) {
        uint64_t got; memcpy(&got, rbuf[i] + 1, 8);
        if (got > x->acked) x->acked = got;
        if (x->acked >= x->want) x->used = 0;  // done: the slot is free for the next sender
      }
    }
    // The batch's answers in one system call (a datagram that finds the buffer full is lost,
    // as it would be on the wire: the client counts answers, not requests).
    if (na > 0) sendmmsg(fd, ans, na, 0);
    int sent_any = 0, full = 0;
    for (int i = 0; i < MAXC && !full; i++) {
      struct xfer *x = &xs[i];
      while (x->used && x->sent < x->want && x->sent - x->acked < window) {
        uint64_t len = (uint64_t)seg * segs, room = window - (x->sent - x->acked);
        if (len > room) len = room;
        if (len > x->want - x->sent) len = x->want - x->sent;
        char cbuf[CMSG_SPACE(sizeof(uint16_t))] = {0};
        struct iovec v = {zeros, len};
        struct msghdr h = {.msg_name = &x->peer, .msg_namelen = sizeof x->peer, .msg_iov = &v, .msg_iovlen = 1};
        if (len > (uint64_t)seg) {
          h.msg_control = cbuf; h.msg_controllen = sizeof cbuf;
          struct cmsghdr *c = CMSG_FIRSTHDR(&h);
          c->cmsg_level = SOL_UDP; c->cmsg_type = UDP_SEGMENT; c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
          uint16_t s = seg; memcpy(CMSG_DATA(c), &s, sizeof s);
        }
        if (sendmsg(fd, &h, 0) < 0) {
          if (errno == EAGAIN || errno == ENOBUFS) { full = 1; break; }
          die("bulk_floor: sendmsg");
        }
        x->sent += len; sent_any = 1;
      }
    }
    if (n > 0 || sent_any) continue;
    struct pollfd p = {fd, POLLIN | (full ? POLLOUT : 0), 0};
    poll(&p, 1, -1);
  }
}

// A TCP listener on 127.0.0.1:PORT (its descriptor in *l) in a new epoll set, returned, where
// its readiness comes with data.u64 = -1.
static int tcp_listen(int port, int *l) {
  int one = 1;
  struct sockaddr_in a = server_addr(port);
  *l = socket(AF_INET, SOCK_STREAM, 0);
  setsockopt(*l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (*l < 0 || bind(*l, (struct sockaddr *)&a, sizeof a) || listen(*l, 128)) die("bulk_floor: tcp listen");
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)-1};
  epoll_ctl(ep, EPOLL_CTL_ADD, *l, &ev);
  return ep;
}

static void serve_tcp(int port) {
  int l, ep = tcp_listen(port, &l);
  static uint64_t left[65536];
  printf("ready\n"); fflush(stdout);
  for (;;) {
    struct epoll_event evs[BATCH];
    int n = epoll_wait(ep, evs, BATCH, -1);
    for (int i = 0; i < n; i++) {
      if (evs[i].data.u64 == (uint64_t)-1) {
        int c = accept4(l, NULL, NULL, SOCK_NONBLOCK);
        if (c < 0 || c >= 65536) { if (c >= 0) close(c); continue; }
        left[c] = 0;
        struct epoll_event ce = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.u64 = (uint64_t)c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce);
        continue;
      }
      int c = (int)evs[i].data.u64;
      char req[64];
      ssize_t r;
      while ((r = recv(c, req, sizeof req, 0)) > 0)
        if (req[0] == 'R' && r >= 5) { uint32_t w; memcpy(&w, req + 1, 4); left[c] = w; }
      if (r == 0) { close(c); continue; }
      while (left[c] > 0) {
        size_t len = left[c] < sizeof zeros ? left[c] : sizeof zeros;
        ssize_t s = send(c, zeros, len, MSG_NOSIGNAL);
        if (s <= 0) break;
        left[c] -= (uint64_t)s;
      }
    }
  }
}

// A sender the UDP sink has heard from: bytes and datagrams so far, datagrams at the last ack.
struct sender { struct sockaddr_in peer; uint64_t bytes, dgrams, acked_at; int used; };

static void serve_udp_sink(int port, int ack_every) {
  static struct sender ss[MAXC];
  int fd = socket(AF_INET, SOCK_DGRAM, 0), one = 1;
  struct sockaddr_in a = server_addr(port);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a)) die("bulk_floor: udp bind");
  big_buffers(fd);
  if (setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one)) die("bulk_floor: UDP_GRO");
  printf("ready\n"); fflush(stdout);
  static char buf[65536];
  for (;;) {
    struct sockaddr_in from;
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec v = {buf, sizeof buf};
    struct msghdr h = {.msg_name = &from, .msg_namelen = sizeof from, .msg_iov = &v, .msg_iovlen = 1,
                       .msg_control = cbuf, .msg_controllen = sizeof cbuf};
    ssize_t n = recvmsg(fd, &h, 0);
    if (n <= 0) continue;
    int seg = (int)n;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c))
      if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) memcpy(&seg, CMSG_DATA(c), sizeof seg);
    struct sender *s = NULL, *free_slot = NULL;
    for (int i = 0; i < MAXC && !s; i++) {
      if (ss[i].used && ss[i].peer.sin_port == from.sin_port && ss[i].peer.sin_addr.s_addr == from.sin_addr.s_addr)
        s = &ss[i];
      else if (!ss[i].used && !free_slot) free_slot = &ss[i];
    }
    if (!s && free_slot) { s = free_slot; memset(s, 0, sizeof *s); s->peer = from; s->used = 1; }
    if (!s) continue;
    s->bytes += (uint64_t)n;
    s->dgrams += ((uint64_t)n + (uint64_t)seg - 1) / (uint64_t)(seg > 0 ? seg : 1);
    if (s->dgrams - s->acked_at >= (uint64_t)ack_every) {
      char ack[9] = {'A'};
      memcpy(ack + 1, &s->bytes, 8);
      sendto(fd, ack, sizeof ack, 0, (struct sockaddr *)&from, sizeof from);
      s->acked_at = s->dgrams;
    }
  }
}

static void serve_tcp_sink(int port) {
  int l, ep = tcp_listen(port, &l);
  static char buf[256 * 1024];
  printf("ready\n"); fflush(stdout);
  for (;;) {
    struct epoll_event evs[BATCH];
    int n = epoll_wait(ep, evs, BATCH, -1);
    for (int i = 0; i < n; i++) {
      if (evs[i].data.u64 == (uint64_t)-1) {
        int c = accept4(l, NULL, NULL, SOCK_NONBLOCK);
        if (c < 0) continue;
        struct epoll_event ce = {.events = EPOLLIN, .data.u64 = (uint64_t)c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce);
        continue;
      }
      int c = (int)evs[i].data.u64;
      ssize_t r;
      while ((r = recv(c, buf, sizeof buf, 0)) > 0) {}
      if (r == 0) close(c);
    }
  }
}

static void push(int udp, int port, int conns, double secs, uint64_t bytes, int seg, int segs,
                 uint64_t window, double rate) {
  int ep = epoll_create1(0), fds[MAXC], waiting[MAXC] = {0};
  // acked: what the sink acknowledged plus lost, what was taken as lost after a timeout (the
  // sink counts what it received, so its acknowledgements fall short of what was sent by that).
  uint64_t left[MAXC], sent[MAXC] = {0}, acked[MAXC] = {0}, got[MAXC] = {0}, lost[MAXC] = {0};
  uint64_t transfers = 0, total = 0, retries = 0;
  double last[MAXC], next[MAXC];
  struct sockaddr_in a = server_addr(port);
  // One GSO send is at most one UDP datagram's payload (65,507 bytes), and `zeros`.
  if (conns < 1 || conns > MAXC || seg < 64 || seg > MAXSEG || segs < 1 || (uint64_t)seg * segs > 65507 ||
      window < (uint64_t)seg * segs) {
    fprintf(stderr, "bulk_floor: push needs CONNS 1..%d, SEG 64..%d, SEG x SEGS <= 65507 <= WINDOW\n", MAXC,
            MAXSEG);
    exit(2);
  }
  for (int i = 0; i < conns; i++) {
    fds[i] = socket(AF_INET, (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_NONBLOCK, 0);
    if (udp) big_buffers(fds[i]);
    if (fds[i] < 0 || (connect(fds[i], (struct sockaddr *)&a, sizeof a) && errno != EINPROGRESS))
      die("bulk_floor: connect");
    struct epoll_event ev = {.events = EPOLLIN | (udp ? 0 : EPOLLOUT) | EPOLLET, .data.u32 = (uint32_t)i};
    epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev);
    left[i] = bytes;
    last[i] = next[i] = now_s();
  }
  double t0 = now_s(), end = t0 + secs;
  double t;
  while ((t = now_s()) < end) {
    int progressed = 0;
    for (int i = 0; i < conns; i++) {
      if (waiting[i] && t >= next[i]) { waiting[i] = 0; left[i] = bytes; }
      char ackb[16];
      ssize_t r;
      while (udp && (r = recv(fds[i], ackb, sizeof ackb, MSG_DONTWAIT)) > 0)
        if (ackb[0] == 'A' && r >= 9) {
          uint64_t g; memcpy(&g, ackb + 1, 8);
          if (g > got[i]) { got[i] = g; last[i] = t; }
          if (got[i] + lost[i] > acked[i]) acked[i] = got[i] + lost[i];
        }
      if (udp && sent[i] - acked[i] >= window && t - last[i] > 0.2) {
        retries++; lost[i] = sent[i] - got[i]; acked[i] = sent[i]; last[i] = t;
      }
      // Bounded, so that a sink that drains as fast as this sends cannot keep it past `end`.
      for (int sends = 0; sends < 64 && !waiting[i] && left[i] > 0; sends++) {
        uint64_t len = udp ? (uint64_t)seg * segs : sizeof zeros;
        if (udp && window - (sent[i] - acked[i]) < len) len = window - (sent[i] - acked[i]);
        if (len > left[i]) len = left[i];
        if (len == 0) break;
        char cbuf[CMSG_SPACE(sizeof(uint16_t))] = {0};
        struct iovec v = {zeros, len};
        struct msghdr h = {.msg_iov = &v, .msg_iovlen = 1};
        if (udp && len > (uint64_t)seg) {
          h.msg_control = cbuf; h.msg_controllen = sizeof cbuf;
          struct cmsghdr *c = CMSG_FIRSTHDR(&h);
          c->cmsg_level = SOL_UDP; c->cmsg_type = UDP_SEGMENT; c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
          uint16_t s = (uint16_t)seg; memcpy(CMSG_DATA(c), &s, sizeof s);
        }
        ssize_t s = sendmsg(fds[i], &h, MSG_NOSIGNAL);
        if (s <= 0) {
          if (errno == EAGAIN || errno == ENOBUFS || errno == ENOTCONN) break;
          die("bulk_floor: sendmsg");
        }
        progressed = 1;
        sent[i] += (uint64_t)s; total += (uint64_t)s; left[i] -= (uint64_t)s;
        if (left[i] == 0) {
          transfers++;
          if (rate > 0) {
            // Paced: this socket's next transfer starts CONNS/RATE seconds after its last.
            next[i] = (next[i] > t - 1 ? next[i] : t) + conns / rate;
            if (t < next[i]) { waiting[i] = 1; break; }
          }
          left[i] = bytes;
        }
      }
    }
    // Nothing could go: wait for acknowledgements, room in a socket or a paced start.
    struct epoll_event evs[MAXC];
    epoll_wait(ep, evs, MAXC, progressed ? 0 : 1);
  }
  uint64_t received = 0;
  for (int i = 0; i < conns; i++) received += udp ? got[i] : sent[i];
  printf("transfers %llu bytes %llu retries %llu seconds %.3f received %llu\n", (unsigned long long)transfers,
         (unsigned long long)total, (unsigned long long)retries, now_s() - t0, (unsigned long long)received);
}

static void fetch(int udp, int port, int conns, double secs, uint32_t bytes, int ack_every, double rate) {
  int ep = epoll_create1(0), fds[MAXC];
  uint64_t got[MAXC] = {0}, dgrams[MAXC] = {0}, transfers = 0, total = 0, retries = 0;
  double last[MAXC], next[MAXC];
  int waiting[MAXC] = {0};
  struct sockaddr_in a = server_addr(port);
  char req[5] = {'R'};
  memcpy(req + 1, &bytes, 4);
  for (int i = 0; i < conns; i++) {
    fds[i] = socket(AF_INET, udp ? SOCK_DGRAM : SOCK_STREAM, 0);
    if (udp) big_buffers(fds[i]);
    if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&a, sizeof a)) die("bulk_floor: connect");
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev);
    send(fds[i], req, sizeof req, 0);
    last[i] = next[i] = now_s();
  }
  static char buf[BATCH][MAXSEG], tbuf[256 * 1024];
  struct mmsghdr m[BATCH];
  struct iovec iov[BATCH];
  double t0 = now_s(), end = t0 + secs;
  while (now_s() < end) {
    struct epoll_event evs[MAXC];
    int n = epoll_wait(ep, evs, MAXC, rate > 0 ? 1 : 50);
    double t = now_s();
    for (int i = 0; i < conns; i++)
      if (waiting[i] && t >= next[i]) { waiting[i] = 0; last[i] = t; send(fds[i], req, sizeof req, 0); }
    for (int e = 0; e < n; e++) {
      int i = (int)evs[e].data.u32, fd = fds[i];
      for (;;) {
        uint64_t in = 0;
        int k = 0;
        if (udp) {
          for (int j = 0; j < BATCH; j++) {
            iov[j] = (struct iovec){buf[j], MAXSEG};
            m[j].msg_hdr = (struct msghdr){.msg_iov = &iov[j], .msg_iovlen = 1};
          }
          k = recvmmsg(fd, m, BATCH, MSG_DONTWAIT, NULL);
          if (k <= 0) break;
          for (int j = 0; j < k; j++) in += m[j].msg_len;
        } else {
          ssize_t r = recv(fd, tbuf, sizeof tbuf, MSG_DONTWAIT);
          if (r <= 0) break;
          in = (uint64_t)r;
        }
        last[i] = t;
        got[i] += in; total += in;
        uint64_t before = dgrams[i];
        dgrams[i] += (uint64_t)k;
        int done = got[i] >= bytes;
        if (udp && (done || dgrams[i] / ack_every != before / ack_every)) {
          char ack[9] = {'A'};
          memcpy(ack + 1, &got[i], 8);
          send(fd, ack, sizeof ack, 0);
        }
        if (done) {
          transfers++; got[i] = 0; dgrams[i] = 0;
          if (rate > 0) {
            // Paced: this socket's next transfer starts CONNS/RATE seconds after its last.
            next[i] = (next[i] > t - 1 ? next[i] : t) + conns / rate;
            if (t < next[i]) { waiting[i] = 1; break; }
          }
          send(fd, req, sizeof req, 0);
        }
      }
    }
    for (int i = 0; udp && i < conns; i++)
      if (!waiting[i] && t - last[i] > 0.2) { retries++; got[i] = 0; dgrams[i] = 0; last[i] = t; send(fds[i], req, sizeof req, 0); }
  }
  printf("transfers %llu bytes %llu retries %llu seconds %.3f\n", (unsigned long long)transfers,
         (unsigned long long)total, (unsigned long long)retries, now_s() - t0);
}

static void chat(int port, int conns, double secs, double rate, int in_size, int permille, int out_size,
                 int burst) {
  int ep = epoll_create1(0), fds[MAXC];
  struct sockaddr_in a = server_addr(port);
  if (conns < 1 || conns > MAXC || in_size < 3 || in_size > MAXSEG || burst < 1 || burst > BATCH) {
    fprintf(stderr, "bulk_floor: chat needs CONNS 1..%d, IN_SIZE 3..%d, BURST 1..%d\n", MAXC, MAXSEG, BATCH);
    exit(2);
  }
  for (int i = 0; i < conns; i++) {
    fds[i] = socket(AF_INET, SOCK_DGRAM, 0);
    if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&a, sizeof a)) die("bulk_floor: connect");
    big_buffers(fds[i]);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev);
  }
  static char out[BATCH][MAXSEG], buf[BATCH][MAXSEG];
  struct mmsghdr m[BATCH], o[BATCH];
  struct iovec iov[BATCH], oiov[BATCH];
  uint16_t want = (uint16_t)out_size;
  uint64_t sent = 0, bursts = 0, answers = 0;
  double t0 = now_s(), end = t0 + secs, t;
  while ((t = now_s()) < end) {
    for (uint64_t due = (uint64_t)((t - t0) * rate / burst); bursts < due; bursts++) {
      for (int j = 0; j < burst; j++, sent++) {
        // Of every thousand, ANSWER_PERMILLE (spread by the running count) ask.
        int ask = (sent + 1) * permille / 1000 != sent * permille / 1000;
        out[j][0] = ask ? 'Q' : 'q';
        memcpy(out[j] + 1, &want, 2);
        oiov[j] = (struct iovec){out[j], (size_t)in_size};
        o[j].msg_hdr = (struct msghdr){.msg_iov = &oiov[j], .msg_iovlen = 1};
      }
      sendmmsg(fds[bursts % conns], o, burst, 0);
    }
    struct epoll_event evs[MAXC];
    int n = epoll_wait(ep, evs, MAXC, 0);
    for (int e = 0; e < n; e++) {
      for (int j = 0; j < BATCH; j++) {
        iov[j] = (struct iovec){buf[j], MAXSEG};
        m[j].msg_hdr = (struct msghdr){.msg_iov = &iov[j], .msg_iovlen = 1};
      }
      int k = recvmmsg(fds[evs[e].data.u32], m, BATCH, MSG_DONTWAIT, NULL);
      if (k > 0) answers += (uint64_t)k;
    }
  }
  printf("sent %llu answers %llu seconds %.3f\n", (unsigned long long)sent,
         (unsigned long long)answers, now_s() - t0);
}

int main(int argc, char **argv) {
  if (argc >= 4 && !strcmp(argv[1], "serve") && !strcmp(argv[2], "tcp")) serve_tcp(atoi(argv[3]));
  else if (argc >= 4 && !strcmp(argv[1], "serve") && !strcmp(argv[2], "tcp-sink")) serve_tcp_sink(atoi(argv[3]));
  else if (argc >= 5 && !strcmp(argv[1], "serve") && !strcmp(argv[2], "udp-sink"))
    serve_udp_sink(atoi(argv[3]), atoi(argv[4]) > 0 ? atoi(argv[4]) : 1);
  else if (argc >= 11 && !strcmp(argv[1], "push"))
    push(!strcmp(argv[2], "udp"), atoi(argv[3]), atoi(argv[4]), atof(argv[5]), strtoull(argv[6], NULL, 10),
         atoi(argv[7]), atoi(argv[8]), strtoull(argv[9], NULL, 10), atof(argv[10]));
  else if (argc >= 7 && !strcmp(argv[1], "serve") && !strcmp(argv[2], "udp")) {
    int seg = atoi(argv[4]);
    if (seg < 64 || seg > MAXSEG) { fprintf(stderr, "bulk_floor: SEG must be 64..%d\n", MAXSEG); return 2; }
    serve_udp(atoi(argv[3]), seg, atoi(argv[5]), strtoull(argv[6], NULL, 10));
  } else if (argc >= 8 && !strcmp(argv[1], "fetch"))
    fetch(!strcmp(argv[2], "udp"), atoi(argv[3]), atoi(argv[4]), atof(argv[5]), (uint32_t)strtoul(argv[6], NULL, 10), atoi(argv[7]) > 0 ? atoi(argv[7]) : 1,
          argc >= 9 ? atof(argv[8]) : 0);
  else if (argc >= 10 && !strcmp(argv[1], "chat"))
    chat(atoi(argv[2]), atoi(argv[3]), atof(argv[4]), atof(argv[5]), atoi(argv[6]), atoi(argv[7]), atoi(argv[8]),
         atoi(argv[9]));
  else {
    fprintf(stderr, "usage: bulk_floor serve udp PORT SEG SEGS WINDOW | serve tcp PORT | "
                    "serve udp-sink PORT ACK_EVERY | serve tcp-sink PORT | "
                    "push udp|tcp PORT CONNS SECONDS BYTES SEG SEGS WINDOW RATE | "
                    "fetch udp|tcp PORT CONNS SECONDS BYTES ACK_EVERY [RATE] | "
                    "chat PORT CONNS SECONDS DGRAMS_PER_S IN_SIZE ANSWER_PERMILLE OUT_SIZE BURST\n");
    return 2;
  }
  return 0;
}
