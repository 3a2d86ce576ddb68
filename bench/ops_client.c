/* Paced open-loop HTTP client for bench/ops.py: one keep-alive connection, a request every
 * 1/rate s, latency from each request's scheduled send time to the end of its response (a
 * late response delays the next send and is charged in full: no coordinated omission).
 * Prints one latency per line, in nanoseconds.
 *
 *   ops_client PORT RATE SECONDS BODY_LEN
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s PORT RATE SECONDS BODY_LEN\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]);
    double rate = atof(argv[2]), secs = atof(argv[3]);
    int body = atoi(argv[4]);
    prctl(PR_SET_TIMERSLACK, 1UL);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
        perror("connect");
        return 1;
    }
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    static const char req[] = "GET /r64 HTTP/1.1\r\nHost: bench\r\n\r\n";
    long long period = (long long)(1e9 / rate);
    long n = (long)(rate * secs);
    long long *lat = malloc(sizeof(long long) * n);
    static char buf[1 << 16];
    size_t have = 0;
    long long start = now_ns() + 20000000LL;
    for (long i = 0; i < n; i++) {
        long long due = start + i * period;
        long long t = now_ns();
        if (due - t > 60000) {  /* sleep to 40 us before, then spin */
            long long until = due - 40000;
            struct timespec ts = {until / 1000000000LL, until % 1000000000LL};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        }
        while (now_ns() < due)
            ;
        if (write(s, req, sizeof req - 1) != (ssize_t)(sizeof req - 1)) {
            perror("write");
            return 1;
        }
        for (;;) {
            char *end = memmem(buf, have, "\r\n\r\n", 4);
            if (end && (size_t)(end - buf) + 4 + body <= have) {
                size_t used = (end - buf) + 4 + body;
                memmove(buf, buf + used, have - used);
                have -= used;
                break;
            }
            ssize_t r = read(s, buf + have, sizeof buf - have);
            if (r <= 0) {
                fprintf(stderr, "server closed the connection\n");
                return 1;
            }
            have += r;
        }
        lat[i] = now_ns() - due;
    }
    for (long i = 0; i < n; i++)
        printf("%lld\n", lat[i]);
    return 0;
}
