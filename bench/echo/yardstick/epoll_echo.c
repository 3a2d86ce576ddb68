// Minimal epoll echo yardstick for bench/echo.py (peer "min-epoll"): level-triggered epoll, one
// read per ready connection, the bytes sent straight back (a short send is kept and finished on
// EPOLLOUT). No framing work. Usage: epoll_echo HOST:PORT
#define _GNU_SOURCE
#include <sys/epoll.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <errno.h>
#include <fcntl.h>
#define MAXFD 65536
#define PEND (1 << 20)
struct conn { char *pend; int len; };
static struct conn conns[MAXFD];
static int ep;

static void drop(int fd) { close(fd); conns[fd].len = 0; }

static void want_out(int fd, int on) {
  struct epoll_event e = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.fd = fd};
  epoll_ctl(ep, EPOLL_CTL_MOD, fd, &e);
}

// Keeps n bytes for EPOLLOUT; false (connection dropped) if they do not fit.
static int keep(int fd, const char *p, int n) {
  struct conn *c = &conns[fd];
  if (!c->pend) c->pend = malloc(PEND);
  if (c->len + n > PEND) { drop(fd); return 0; }
  memcpy(c->pend + c->len, p, n); c->len += n;
  return 1;
}

int main(int argc, char **argv) {
  char *addr = argc > 1 ? argv[1] : "127.0.0.1:9000"; char host[64]; int port;
  if (sscanf(addr, "%63[^:]:%d", host, &port) != 2) { fprintf(stderr, "usage: %s HOST:PORT\n", argv[0]); return 2; }
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, host, &a.sin_addr);
  if (bind(lfd, (void *)&a, sizeof a) || listen(lfd, 4096)) { perror("bind"); return 1; }
  ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  static char buf[1 << 16];
  struct epoll_event evs[512];
  for (;;) {
    int n = epoll_wait(ep, evs, 512, -1);
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == lfd) {
        for (;;) {
          int c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
          if (c < 0) break;
          if (c >= MAXFD) { close(c); continue; }
          setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          struct epoll_event e = {.events = EPOLLIN, .data.fd = c};
          epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
        }
        continue;
      }
      struct conn *c = &conns[fd];
      if (evs[i].events & (EPOLLERR | EPOLLHUP)) { drop(fd); continue; }
      if (evs[i].events & EPOLLOUT) {
        int w = send(fd, c->pend, c->len, MSG_NOSIGNAL);
        if (w < 0) { if (errno != EAGAIN) drop(fd); continue; }
        memmove(c->pend, c->pend + w, c->len - w); c->len -= w;
        if (c->len == 0) want_out(fd, 0);
        continue;
      }
      int r = read(fd, buf, sizeof buf);
      if (r <= 0) { if (r < 0 && errno == EAGAIN) continue; drop(fd); continue; }
      if (c->len) { keep(fd, buf, r); continue; }  // behind bytes still waiting for EPOLLOUT
      int w = send(fd, buf, r, MSG_NOSIGNAL);
      if (w < 0) { if (errno != EAGAIN) { drop(fd); continue; } w = 0; }
      if (w < r && keep(fd, buf + w, r - w)) want_out(fd, 1);
    }
  }
}
