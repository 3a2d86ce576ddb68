// Minimal epoll echo yardstick for bench/echo.py (peer "min-epoll"): level-triggered epoll, one read per
// ready connection, the bytes written straight back (a short write is buffered and finished on
// EPOLLOUT). No framing work.
#include <sys/epoll.h>
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
struct conn { char *pend; int len; };
static struct conn conns[MAXFD];
int main(int argc, char **argv) {
  char *addr = argc > 1 ? argv[1] : "127.0.0.1:9000"; char host[64]; int port;
  sscanf(addr, "%63[^:]:%d", host, &port);
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, host, &a.sin_addr);
  if (bind(lfd, (void *)&a, sizeof a) || listen(lfd, 4096)) { perror("bind"); return 1; }
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd}; epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  static char buf[1 << 16]; struct epoll_event evs[512];
  for (;;) {
    int n = epoll_wait(ep, evs, 512, -1);
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == lfd) {
        for (;;) { int c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK); if (c < 0) break;
          setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          struct epoll_event e = {.events = EPOLLIN, .data.fd = c}; epoll_ctl(ep, EPOLL_CTL_ADD, c, &e); }
        continue;
      }
      struct conn *c = &conns[fd];
      if (evs[i].events & EPOLLOUT) {
        int w = write(fd, c->pend, c->len);
        if (w > 0) { memmove(c->pend, c->pend + w, c->len - w); c->len -= w; }
        if (c->len == 0) { struct epoll_event e = {.events = EPOLLIN, .data.fd = fd}; epoll_ctl(ep, EPOLL_CTL_MOD, fd, &e); }
        continue;
      }
      int r = read(fd, buf, sizeof buf);
      if (r <= 0) { if (r < 0 && errno == EAGAIN) continue; close(fd); c->len = 0; continue; }
      if (c->len) { if (!c->pend) c->pend = malloc(1 << 20); memcpy(c->pend + c->len, buf, r); c->len += r; continue; }
      int w = write(fd, buf, r);
      if (w < 0) w = 0;
      if (w < r) { if (!c->pend) c->pend = malloc(1 << 20); memcpy(c->pend, buf + w, r - w); c->len = r - w;
        struct epoll_event e = {.events = EPOLLIN | EPOLLOUT, .data.fd = fd}; epoll_ctl(ep, EPOLL_CTL_MOD, fd, &e); }
    }
  }
}
