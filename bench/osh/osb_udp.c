/*
 * osb_udp.c - the raw UDP round trip on loopback, the floor a cross-node collective is
 * measured against (no OpenSHMEM: plain sockets, built with cc).
 *
 *   osb_udp [--quick] [--batches N]
 *
 * Two processes (a fork), each with one non-blocking UDP socket on 127.0.0.1, bounce an
 * 8-byte datagram; both sides busy-poll recv() (no blocking, no yielding), as a waiting PE
 * spins.  Method as osb_*: a batch of round trips timed as a whole, the median of the
 * batches, the fastest and the slowest beside it.  Printed as osb lines (family coll):
 * udp_rtt (the round trip) and udp_half_rtt (half of it: one message one way).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
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

static void die(const char *what) {
    fprintf(stderr, "OSB_ERROR udp_rtt: %s: %s\n", what, strerror(errno));
    exit(1);
}

static int sock(struct sockaddr_in *a) {
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    if (s < 0)
        die("socket");
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof *a;
    if (bind(s, (struct sockaddr *)a, len) != 0 || getsockname(s, (struct sockaddr *)a, &len) != 0)
        die("bind");
    return s;
}

/* Spins until an 8-byte datagram arrives (at most `limit` seconds). */
static void recv8(int s, double limit) {
    char b[8];
    double t0 = 0;
    for (long k = 0;; k++) {
        ssize_t n = recv(s, b, sizeof b, 0);
        if (n == 8)
            return;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            die("recv");
        if ((k & 1023) == 0) {
            if (t0 == 0)
                t0 = now();
            else if (now() - t0 > limit) {
                errno = ETIMEDOUT;
                die("no answer");
            }
        }
    }
}

static void send8(int s, const struct sockaddr_in *to) {
    char b[8] = {0};
    if (sendto(s, b, sizeof b, 0, (const struct sockaddr *)to, sizeof *to) != 8)
        die("sendto");
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int batches = 21, quick = 0;
    long iters = 2000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            batches = 3;
            iters = 200;
            quick = 1;
        } else if (strcmp(argv[i], "--batches") == 0 && i + 1 < argc) {
            batches = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
            i++; /* accepted (the suite passes its size list to every program); always 8 B */
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: %s [--quick] [--batches N] [--help]\n"
                   "\n"
                   "The raw UDP round trip on loopback (no OpenSHMEM: two processes, plain\n"
                   "sockets, both busy-polling), the floor a cross-node collective of gsas's\n"
                   "scripts/bench is measured against.\n"
                   "\n"
                   "  --quick      3 short batches instead of 21 (a smoke run)\n"
                   "  --batches N  timed batches (1..1000)\n"
                   "  --help       this text\n"
                   "\n"
                   "Output: '# ' header lines, then one tab-separated line per figure,\n"
                   "  OSB benchmark family size-bytes pes unit median min max\n",
                   argv[0]);
            return 0;
        } else {
            fprintf(stderr, "%s: unknown option %s (usage: %s [--quick] [--batches N] [--help])\n",
                    argv[0], argv[i], argv[0]);
            return 2;
        }
    }
    if (batches < 1 || batches > 1000)
        batches = 21;
    /* The header of every osb program (OSU style). */
    printf("# osb_udp: raw UDP on loopback, 2 processes, %s run: %d batches of %ld round "
           "trips\n",
           quick ? "quick" : "full", batches, iters);
    printf("# OSB\tbenchmark\tfamily\tsize-bytes\tpes\tunit\tmedian\tmin\tmax\n");
    fflush(stdout);
    struct sockaddr_in pa, qa;
    int ps = sock(&pa), qs = sock(&qa);
    long total = (long)batches * iters + iters; /* one warm-up batch */
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        for (long k = 0; k < total; k++) {
            recv8(qs, 30.0);
            send8(qs, &pa);
        }
        _exit(0);
    }
    double t[1000];
    for (int b = -1; b < batches; b++) {
        double t0 = now();
        for (long k = 0; k < iters; k++) {
            send8(ps, &qa);
            recv8(ps, 30.0);
        }
        if (b >= 0)
            t[b] = (now() - t0) / (double)iters;
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "OSB_ERROR udp_rtt: the echo process failed\n");
        return 1;
    }
    qsort(t, (size_t)batches, sizeof(double), cmp);
    double med = batches % 2 ? t[batches / 2] : 0.5 * (t[batches / 2 - 1] + t[batches / 2]);
    printf("OSB\tudp_rtt\tcoll\t8\t2\tus\t%.6g\t%.6g\t%.6g\n", med * 1e6, t[0] * 1e6,
           t[batches - 1] * 1e6);
    printf("OSB\tudp_half_rtt\tcoll\t8\t2\tus\t%.6g\t%.6g\t%.6g\n", med * 0.5e6, t[0] * 0.5e6,
           t[batches - 1] * 0.5e6);
    return 0;
}
