/*
 * exanet_pio.c - one kind of 8-byte request from PE 0 to PE 1, N times, timed: put + quiet,
 * get, or fetch-add (`exanet_pio put|get|fadd N [WARMUP]`).  Used for the NI operations,
 * instructions and latency per request over the Exanet emulator (docs/exanet.md, "Small
 * requests by PIO"); the loops are functions of their own for callgrind's
 * --toggle-collect='loop_*'.  Run it with PE 1 on another node (oshrun --ppn 1).  Not a
 * test.
 */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
__attribute__((noinline)) void loop_put(long *d, const long *s, long n, int pe) {
    for (long i = 0; i < n; i++) { shmem_putmem(d, s, 8, pe); shmem_quiet(); }
}
__attribute__((noinline)) long loop_get(long *d, long n, int pe) {
    long x = 0, acc = 0;
    for (long i = 0; i < n; i++) { shmem_getmem(&x, d, 8, pe); acc += x; }
    return acc;
}
__attribute__((noinline)) long loop_fadd(long *d, long n, int pe) {
    long acc = 0;
    for (long i = 0; i < n; i++) acc += shmem_long_atomic_fetch_add(d, 1, pe);
    return acc;
}
int main(int argc, char **argv) {
    const char *op = argc > 1 ? argv[1] : "put";
    long n = argc > 2 ? atol(argv[2]) : 1000;
    long warm = argc > 3 ? atol(argv[3]) : 0;
    shmem_init();
    int me = shmem_my_pe();
    long *d = shmem_calloc(4, sizeof(long));
    long src = 42, acc = 0;
    shmem_barrier_all();
    if (me == 0) {
        if (warm) { loop_put(d, &src, warm, 1); loop_get(d, warm, 1); loop_fadd(d + 1, warm, 1); }
        double t0 = now_us();
        if (!strcmp(op, "put")) loop_put(d, &src, n, 1);
        else if (!strcmp(op, "get")) acc = loop_get(d, n, 1);
        else acc = loop_fadd(d + 1, n, 1);
        double t1 = now_us();
        if (n) printf("%s n %ld: %.2f us/op (acc %ld)\n", op, n, (t1 - t0) / n, acc);
    }
    shmem_barrier_all();
    shmem_finalize();
    return 0;
}
