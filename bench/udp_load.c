/* The UDP stream benchmark's two ends (bench/udp.py):
 *
 *   udp_load echo PORT
 *       a UDP echo server on 127.0.0.1:PORT (the upstream): recvmmsg/sendmmsg in batches of
 *       64, so it costs little beside the proxy under test. Runs until killed.
 *
 *   udp_load client PORT SOCKETS WINDOW SECONDS SIZE
 *       SOCKETS client sockets (each its own source port: one proxy session each) connected
 *       to 127.0.0.1:PORT, each keeping WINDOW datagrams of SIZE bytes in flight: every
 *       answer sends the next datagram (closed loop, so the proxy sets the pace). A socket
 *       with no answer for 200 ms (datagrams lost in a full buffer) counts what it had in
 *       flight as lost and starts its window again. Prints one line:
 *       "sent N answered M lost L seconds S".
 *
 * A load generator in C because a Python one would be the bottleneck long before the proxy.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct sockaddr_in loopback(int port)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static int echo(int port)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = loopback(port);
    int big = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        perror("udp_load echo: bind");
        return 1;
    }
    static char bufs[BATCH][2048];
    struct mmsghdr msgs[BATCH];
    struct iovec iovs[BATCH];
    struct sockaddr_in peers[BATCH];
    for (;;) {
        for (int i = 0; i < BATCH; i++) {
            iovs[i].iov_base = bufs[i];
            iovs[i].iov_len = sizeof bufs[i];
            memset(&msgs[i], 0, sizeof msgs[i]);
            msgs[i].msg_hdr.msg_iov = &iovs[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_name = &peers[i];
            msgs[i].msg_hdr.msg_namelen = sizeof peers[i];
        }
        int n = recvmmsg(fd, msgs, BATCH, MSG_WAITFORONE, NULL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            perror("udp_load echo: recvmmsg");
            return 1;
        }
        for (int i = 0; i < n; i++)
            iovs[i].iov_len = msgs[i].msg_len;
        sendmmsg(fd, msgs, n, 0);
    }
}

struct client_sock {
    int fd;
    int in_flight;
    double last_answer;
};

static int client(int port, int nsock, int window, double secs, int size)
{
    struct sockaddr_in a = loopback(port);
    struct client_sock *cs = calloc(nsock, sizeof *cs);
    char *payload = malloc(size > 0 ? size : 1);
    char rbuf[65536];
    memset(payload, 'q', size);
    int ep = epoll_create1(0);
    long sent = 0, answered = 0, lost = 0;
    double t0 = now_s(), end = t0 + secs;
    for (int i = 0; i < nsock; i++) {
        cs[i].fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
        if (cs[i].fd < 0 || connect(cs[i].fd, (struct sockaddr *)&a, sizeof a) < 0) {
            perror("udp_load client: socket");
            return 1;
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
        epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev);
        for (int w = 0; w < window; w++)
            if (send(cs[i].fd, payload, size, 0) == size)
                cs[i].in_flight++, sent++;
        cs[i].last_answer = t0;
    }
    struct epoll_event evs[256];
    double t = t0;
    while ((t = now_s()) < end) {
        int n = epoll_wait(ep, evs, 256, 20);
        t = now_s();
        for (int k = 0; k < n; k++) {
            struct client_sock *c = &cs[evs[k].data.u32];
            for (;;) {
                ssize_t r = recv(c->fd, rbuf, sizeof rbuf, 0);
                if (r < 0)
                    break; /* EAGAIN, or ECONNREFUSED from a dead proxy: the window restarts */
                answered++;
                c->in_flight--;
                c->last_answer = t;
                if (t < end && send(c->fd, payload, size, 0) == size)
                    c->in_flight++, sent++;
            }
        }
        for (int i = 0; i < nsock; i++) {
            struct client_sock *c = &cs[i];
            if (t - c->last_answer < 0.2)
                continue;
            lost += c->in_flight;
            c->in_flight = 0;
            c->last_answer = t;
            for (int w = 0; w < window; w++)
                if (send(c->fd, payload, size, 0) == size)
                    c->in_flight++, sent++;
        }
    }
    printf("sent %ld answered %ld lost %ld seconds %.3f\n", sent, answered, lost, t - t0);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "echo"))
        return echo(atoi(argv[2]));
    if (argc == 7 && !strcmp(argv[1], "client"))
        return client(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atof(argv[5]),
                      atoi(argv[6]));
    fprintf(stderr, "usage: udp_load echo PORT | udp_load client PORT SOCKETS WINDOW SECONDS SIZE\n");
    return 2;
}
