/*
 * udp_pingpong.c - the raw UDP round trip on loopback between two processes pinned to two
 * CPUs, both busy-polling (recv with MSG_DONTWAIT): the physical limit of the UDP transport
 * on this machine, printed beside the shmem figures across two atomic services.
 *
 *   udp_pingpong [--quick]     (8-byte messages; median of batches, OSU style)
 *
 * Output: a line for people and "RESULT udp_rtt_8B <us> us".  Not a test.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void pin(int cpu) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 2)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu % (int)n, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        perror("udp_pingpong: sched_setaffinity");
}

static int bound_socket(struct sockaddr_in *addr) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) {
        perror("udp_pingpong: socket");
        exit(1);
    }
    memset(addr, 0, sizeof *addr);
    addr->sin_family = AF_INET;
    addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof *addr;
    if (bind(fd, (struct sockaddr *)addr, sizeof *addr) != 0 ||
        getsockname(fd, (struct sockaddr *)addr, &len) != 0) {
        perror("udp_pingpong: bind");
        exit(1);
    }
    return fd;
}

/* Busy-polls for one datagram; gives up after 10 s. */
static void recv_one(int fd, char *buf, size_t n) {
    double t0 = now();
    for (;;) {
        ssize_t r = recv(fd, buf, n, MSG_DONTWAIT);
        if (r >= 0)
            return;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            perror("udp_pingpong: recv");
            exit(1);
        }
        if (now() - t0 > 10.0) {
            fprintf(stderr, "udp_pingpong: no datagram for 10 s\n");
            exit(1);
        }
    }
}

int main(int argc, char **argv) {
    int warm = 2000, batches = 31, iters = 2000;
    if (argc > 1 && strcmp(argv[1], "--quick") == 0) {
        warm = 200;
        batches = 5;
        iters = 200;
    }
    struct sockaddr_in a, b;
    int fa = bound_socket(&a), fb = bound_socket(&b);
    char buf[8] = {0};
    pid_t child = fork();
    if (child < 0) {
        perror("udp_pingpong: fork");
        return 1;
    }
    if (child == 0) {
        /* The echo side: CPU 1. */
        pin(1);
        int total = warm + batches * iters;
        for (int i = 0; i < total; i++) {
            recv_one(fb, buf, sizeof buf);
            if (sendto(fb, buf, sizeof buf, 0, (struct sockaddr *)&a, sizeof a) < 0) {
                perror("udp_pingpong: sendto");
                _exit(1);
            }
        }
        _exit(0);
    }
    pin(0);
    double *t = malloc(sizeof(double) * (size_t)batches);
    if (t == NULL)
        return 1;
    for (int b2 = -1; b2 < batches; b2++) {
        int n = b2 < 0 ? warm : iters;
        double t0 = now();
        for (int i = 0; i < n; i++) {
            if (sendto(fa, buf, sizeof buf, 0, (struct sockaddr *)&b, sizeof b) < 0) {
                perror("udp_pingpong: sendto");
                kill(child, SIGKILL);
                return 1;
            }
            recv_one(fa, buf, sizeof buf);
        }
        if (b2 >= 0)
            t[b2] = (now() - t0) / n;
    }
    int status = 0;
    waitpid(child, &status, 0);
    qsort(t, (size_t)batches, sizeof(double), cmp_double);
    printf("udp_pingpong: raw UDP round trip, 8 B, loopback, both sides busy-polling: median "
           "%.2f us, min %.2f us\n",
           t[batches / 2] * 1e6, t[0] * 1e6);
    printf("RESULT udp_rtt_8B %.4f us\n", t[batches / 2] * 1e6);
    free(t);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
