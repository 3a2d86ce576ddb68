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
 * New sessions (bench/udp_sessions.py): every datagram comes from a client address the proxy
 * has not seen, 127.4.0.0 + FIRST + n (all of 127/8 is loopback), sent from one socket bound
 * to port 0 on lo only, its source address set per datagram with IP_PKTINFO, so the client
 * costs a sendmmsg slot per new source, not a socket. Datagrams go to 127.0.0.1:PORT only;
 * each carries its send time, so answers give the latency.
 *
 *   udp_load fresh PORT WINDOW SECONDS SIZE FIRST
 *       closed loop: WINDOW datagrams in flight, each answer sends the next from a new
 *       address; 200 ms without an answer counts the window lost and starts it again.
 *       Prints "sent N answered M lost L seconds S".
 *   udp_load paced PORT RATE SECONDS SIZE FIRST
 *       open loop: RATE new sources a second for SECONDS (sent every 0.5 ms, on schedule
 *       however the answers come), then answers taken for up to 0.5 s more. Prints
 *       "sent N answered M seconds S rate R p50_us A p99_us B tail_p50_us C max_us D",
 *       tail_p50 the median latency of what was sent in the last quarter (a queue that
 *       grows shows there).
 *   udp_load burst PORT COUNT SIZE FIRST
 *       COUNT datagrams from COUNT new sources as fast as sendmmsg goes, then answers taken
 *       until all came or none for 1 s (5 s at most). Prints
 *       "sent N answered M send_seconds S".
 *
 * A load generator in C because a Python one would be the bottleneck long before the proxy.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
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

/* ---- new sources (fresh, paced, burst) ---- */

#define SRC_SPAN (250u * 65536u) /* 127.4.0.0 .. 127.253.255.255 */

static int fresh_fd(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in any;
    memset(&any, 0, sizeof any);
    any.sin_family = AF_INET;
    int big = 32 << 20, one = 1;
    if (fd < 0) {
        perror("udp_load: socket");
        exit(1);
    }
    /* Only lo's traffic reaches it (it is bound to every address, for the answers to
     * 127.4.x.y); a kernel that refuses keeps the wildcard. */
    setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, "lo", 3);
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big) < 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big) < 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&any, sizeof any) < 0) {
        perror("udp_load: bind");
        exit(1);
    }
    return fd;
}

struct fresh_out {
    struct mmsghdr msgs[BATCH];
    struct iovec iovs[BATCH];
    char bufs[BATCH][2048];
    char ctl[BATCH][CMSG_SPACE(sizeof(struct in_pktinfo))];
    struct sockaddr_in to;
};

static unsigned long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* Sends n (<= BATCH) datagrams from new sources *next, *next + 1, ...; returns how many went. */
static int send_fresh(int fd, struct fresh_out *o, int n, int size, unsigned *next)
{
    unsigned long long t = now_ns();
    for (int i = 0; i < n; i++) {
        unsigned idx = (*next + i) % SRC_SPAN;
        struct in_pktinfo pi;
        memset(&pi, 0, sizeof pi);
        pi.ipi_spec_dst.s_addr = htonl((127u << 24) + (4u << 16) + idx);
        memset(o->bufs[i], 'q', size);
        memcpy(o->bufs[i], &t, sizeof t);
        o->iovs[i].iov_base = o->bufs[i];
        o->iovs[i].iov_len = size;
        memset(&o->msgs[i], 0, sizeof o->msgs[i]);
        struct msghdr *h = &o->msgs[i].msg_hdr;
        h->msg_name = &o->to;
        h->msg_namelen = sizeof o->to;
        h->msg_iov = &o->iovs[i];
        h->msg_iovlen = 1;
        h->msg_control = o->ctl[i];
        h->msg_controllen = sizeof o->ctl[i];
        struct cmsghdr *c = CMSG_FIRSTHDR(h);
        c->cmsg_level = IPPROTO_IP;
        c->cmsg_type = IP_PKTINFO;
        c->cmsg_len = CMSG_LEN(sizeof pi);
        memcpy(CMSG_DATA(c), &pi, sizeof pi);
    }
    int done = 0;
    while (done < n) {
        int r = sendmmsg(fd, o->msgs + done, n - done, 0);
        if (r <= 0) {
            if (r < 0 && errno != EAGAIN && errno != ENOBUFS && errno != EINTR) {
                perror("udp_load: sendmmsg");
                exit(1);
            }
            if (r < 0 && errno == EINTR)
                continue;
            break; /* the socket's send buffer is full: the rest are not sent */
        }
        done += r;
    }
    *next += done;
    return done;
}

struct fresh_in {
    struct mmsghdr msgs[BATCH];
    struct iovec iovs[BATCH];
    char bufs[BATCH][2048];
    char ctl[BATCH][CMSG_SPACE(sizeof(struct in_pktinfo))];
};

/* Takes the answers waiting (nonblocking); returns how many; their send times into ts. */
static int take_answers(int fd, struct fresh_in *in, unsigned long long *ts)
{
    for (int i = 0; i < BATCH; i++) {
        in->iovs[i].iov_base = in->bufs[i];
        in->iovs[i].iov_len = sizeof in->bufs[i];
        memset(&in->msgs[i], 0, sizeof in->msgs[i]);
        in->msgs[i].msg_hdr.msg_iov = &in->iovs[i];
        in->msgs[i].msg_hdr.msg_iovlen = 1;
        in->msgs[i].msg_hdr.msg_control = in->ctl[i];
        in->msgs[i].msg_hdr.msg_controllen = sizeof in->ctl[i];
    }
    int n = recvmmsg(fd, in->msgs, BATCH, MSG_DONTWAIT, NULL);
    if (n < 0)
        return 0;
    for (int i = 0; i < n; i++) {
        ts[i] = 0;
        if (in->msgs[i].msg_len >= sizeof ts[i])
            memcpy(&ts[i], in->bufs[i], sizeof ts[i]);
    }
    return n;
}

static void wait_in(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    poll(&p, 1, ms);
}

static struct fresh_out fo;
static struct fresh_in fi;

static int fresh(int port, int window, double secs, int size, unsigned first)
{
    int fd = fresh_fd();
    fo.to = loopback(port);
    unsigned next = first;
    long sent = 0, answered = 0, lost = 0, in_flight = 0;
    unsigned long long ts[BATCH];
    double t0 = now_s(), end = t0 + secs, t = t0, last = t0;
    while (in_flight < window) {
        int n = send_fresh(fd, &fo, window - in_flight > BATCH ? BATCH : window - in_flight,
                           size, &next);
        sent += n, in_flight += n;
        if (n == 0)
            break;
    }
    while ((t = now_s()) < end) {
        wait_in(fd, 20);
        int got = 0, n;
        while ((n = take_answers(fd, &fi, ts)) > 0) {
            got += n;
            answered += n;
            in_flight -= n;
            last = now_s();
            if (last < end) {
                int s2 = send_fresh(fd, &fo, n, size, &next);
                sent += s2, in_flight += s2;
            }
        }
        t = now_s();
        if (!got && t - last >= 0.2) {
            lost += in_flight;
            in_flight = 0;
            last = t;
            while (in_flight < window) {
                int s2 = send_fresh(fd, &fo, window - in_flight > BATCH ? BATCH
                                                                     : window - in_flight,
                                    size, &next);
                sent += s2, in_flight += s2;
                if (s2 == 0)
                    break;
            }
        }
    }
    printf("sent %ld answered %ld lost %ld seconds %.3f\n", sent, answered, lost, t - t0);
    return 0;
}

static int cmp_ull(const void *a, const void *b)
{
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

static double pct_us(unsigned long long *v, long n, double p)
{
    if (n <= 0)
        return -1;
    long i = (long)(p * (n - 1));
    return v[i] / 1000.0;
}

static int paced(int port, double rate, double secs, int size, unsigned first)
{
    int fd = fresh_fd();
    fo.to = loopback(port);
    unsigned next = first;
    long total = (long)(rate * secs + 0.5);
    unsigned long long *lat = malloc(sizeof *lat * (total + BATCH));
    unsigned long long *tail = malloc(sizeof *tail * (total + BATCH));
    long sent = 0, answered = 0, ntail = 0;
    unsigned long long ts[BATCH];
    unsigned long long t0 = now_ns(), tail_from = t0 + (unsigned long long)(0.75 * secs * 1e9);
    unsigned long long stop = t0 + (unsigned long long)(secs * 1e9), last_send = t0;
    unsigned long long grace = 500000000ull, t = t0;
    for (;;) {
        t = now_ns();
        if (sent < total) {
            long due = (long)((t - t0) / 1e9 * rate) + 1;
            if (due > total)
                due = total;
            while (sent < due) {
                int want = due - sent > BATCH ? BATCH : due - sent;
                int n = send_fresh(fd, &fo, want, size, &next);
                sent += n;
                if (n < want)
                    break;
            }
            last_send = now_ns();
        } else if (answered >= sent || t > (last_send > stop ? last_send : stop) + grace) {
            break;
        }
        int n;
        while ((n = take_answers(fd, &fi, ts)) > 0) {
            unsigned long long at = now_ns();
            for (int i = 0; i < n; i++) {
                if (ts[i] < t0 || ts[i] > at)
                    continue; /* not one of ours */
                lat[answered++] = at - ts[i];
                if (ts[i] >= tail_from)
                    tail[ntail++] = at - ts[i];
            }
        }
        wait_in(fd, 0);
        struct timespec nap = {0, 500000}; /* the next tick: 0.5 ms */
        if (sent >= total)
            wait_in(fd, 1);
        else
            nanosleep(&nap, NULL);
    }
    double took = (last_send - t0) / 1e9;
    qsort(lat, answered, sizeof *lat, cmp_ull);
    qsort(tail, ntail, sizeof *tail, cmp_ull);
    printf("sent %ld answered %ld seconds %.3f rate %.0f p50_us %.0f p99_us %.0f "
           "tail_p50_us %.0f max_us %.0f\n",
           sent, answered, took, took > 0 ? sent / took : 0, pct_us(lat, answered, 0.5),
           pct_us(lat, answered, 0.99), pct_us(tail, ntail, 0.5),
           pct_us(lat, answered, 1.0));
    return 0;
}

static int burst(int port, long count, int size, unsigned first)
{
    int fd = fresh_fd();
    fo.to = loopback(port);
    unsigned next = first;
    long sent = 0, answered = 0;
    unsigned long long ts[BATCH];
    double t0 = now_s();
    while (sent < count) {
        int want = count - sent > BATCH ? BATCH : count - sent;
        int n = send_fresh(fd, &fo, want, size, &next);
        sent += n;
        if (n < want) {
            fprintf(stderr, "udp_load burst: the send buffer filled at %ld\n", sent);
            wait_in(fd, 1);
        }
    }
    double sent_at = now_s(), last = sent_at;
    while (answered < sent) {
        double t = now_s();
        if (t - last > 1.0 || t - sent_at > 5.0)
            break;
        wait_in(fd, 50);
        int n;
        while ((n = take_answers(fd, &fi, ts)) > 0)
            answered += n, last = now_s();
    }
    printf("sent %ld answered %ld send_seconds %.4f\n", sent, answered, sent_at - t0);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 7 && !strcmp(argv[1], "fresh"))
        return fresh(atoi(argv[2]), atoi(argv[3]), atof(argv[4]), atoi(argv[5]),
                     strtoul(argv[6], NULL, 10));
    if (argc == 7 && !strcmp(argv[1], "paced"))
        return paced(atoi(argv[2]), atof(argv[3]), atof(argv[4]), atoi(argv[5]),
                     strtoul(argv[6], NULL, 10));
    if (argc == 6 && !strcmp(argv[1], "burst"))
        return burst(atoi(argv[2]), atol(argv[3]), atoi(argv[4]), strtoul(argv[5], NULL, 10));
    if (argc == 3 && !strcmp(argv[1], "echo"))
        return echo(atoi(argv[2]));
    if (argc == 7 && !strcmp(argv[1], "client"))
        return client(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atof(argv[5]),
                      atoi(argv[6]));
    fprintf(stderr, "usage: udp_load echo PORT | udp_load client PORT SOCKETS WINDOW SECONDS SIZE\n"
                    "       udp_load fresh PORT WINDOW SECONDS SIZE FIRST\n"
                    "       udp_load paced PORT RATE SECONDS SIZE FIRST\n"
                    "       udp_load burst PORT COUNT SIZE FIRST\n");
    return 2;
}
