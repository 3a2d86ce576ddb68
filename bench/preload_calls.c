/* The interception overhead of libringx_preload.so (bench/preload.py): N rounds of
 * socket + connect + accept4 + close on one loopback reuseport listener, with the time spent
 * in connect() and in accept4() summed separately (clock_gettime around each call).
 * Usage: preload_calls PORT ROUNDS; prints "connect_ns accept_ns" per call (means). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s PORT ROUNDS\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]), rounds = atoi(argv[2]), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int l = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(l, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 128)) {
        perror("listen");
        return 1;
    }
    long long in_connect = 0, in_accept = 0;
    for (int i = 0; i < rounds; i++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        long long t0 = now_ns();
        if (connect(s, (struct sockaddr *)&a, sizeof a)) {
            perror("connect");
            return 1;
        }
        long long t1 = now_ns();
        int c = accept4(l, NULL, NULL, 0);
        long long t2 = now_ns();
        if (c < 0) {
            perror("accept4");
            return 1;
        }
        in_connect += t1 - t0;
        in_accept += t2 - t1;
        /* The accepted side closes first: TIME_WAIT stays there, the client's port is free. */
        close(c);
        close(s);
    }
    printf("%lld %lld\n", in_connect / rounds, in_accept / rounds);
    return 0;
}
