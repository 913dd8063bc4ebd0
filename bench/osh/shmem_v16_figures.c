/*
 * shmem_v16_figures.c - one figure per OpenSHMEM 1.6 family against its 1.5 way, measured by
 * hand (see docs/bench.md, "OpenSHMEM 1.6 routines"):
 *
 *   oshcc -O2 bench/osh/shmem_v16_figures.c -o v16
 *   oshrun -n 2 ./v16                          # one node
 *   oshrun --config cluster.toml -n 2 -- ./v16 # two nodes (one PE each)
 *
 * PE 0 times, against PE 1 (mean of REPS repetitions, three rounds, averaged):
 *   * shmem_long_ibput of 64 blocks of 4 longs (strides 16) + quiet, against 64 putmem calls
 *     of the same blocks + quiet;
 *   * shmem_long_put_nbi of 4 KiB + shmem_pe_quiet(PE 1), against the same + shmem_quiet;
 *   * 64 blocking shmem_long_p + quiet, outside and inside a SHMEM_CTX_SESSION_BATCH session;
 * and every PE times shmem_long_sum_inscan of 8 longs against shmem_long_sum_reduce.
 * Not a test: it checks nothing.
 */
#include <shmem.h>
#include <stdio.h>
#include <time.h>

#define REPS 200
#define BLOCKS 64

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static long src[BLOCKS * 16];

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes(), peer = (me + 1) % n;
    long *dst = (long *)shmem_calloc(BLOCKS * 16, sizeof(long));
    long *s = (long *)shmem_calloc(8, sizeof(long)), *d = (long *)shmem_calloc(8, sizeof(long));
    for (int i = 0; i < BLOCKS * 16; i++)
        src[i] = i;
    enum { IBPUT, PUTMEM, PE_QUIET, QUIET, P, P_SESSION, INSCAN, REDUCE, NFIG };
    double t[NFIG] = {0}, t0;
    for (int round = 0; round < 3; round++) {
        shmem_barrier_all();
        if (me == 0) {
            t0 = now_us();
            for (int r = 0; r < REPS; r++) {
                shmem_long_ibput(dst, src, 16, 16, 4, BLOCKS, peer);
                shmem_quiet();
            }
            t[IBPUT] += (now_us() - t0) / REPS;
            t0 = now_us();
            for (int r = 0; r < REPS; r++) {
                for (int b = 0; b < BLOCKS; b++)
                    shmem_putmem(dst + 16 * b, src + 16 * b, 4 * sizeof(long), peer);
                shmem_quiet();
            }
            t[PUTMEM] += (now_us() - t0) / REPS;
            t0 = now_us();
            for (int r = 0; r < REPS; r++) {
                shmem_long_put_nbi(dst, src, 512, peer);
                shmem_pe_quiet(&peer, 1);
            }
            t[PE_QUIET] += (now_us() - t0) / REPS;
            t0 = now_us();
            for (int r = 0; r < REPS; r++) {
                shmem_long_put_nbi(dst, src, 512, peer);
                shmem_quiet();
            }
            t[QUIET] += (now_us() - t0) / REPS;
            t0 = now_us();
            for (int r = 0; r < REPS; r++) {
                for (int i = 0; i < BLOCKS; i++)
                    shmem_long_p(&dst[i], i, peer);
                shmem_quiet();
            }
            t[P] += (now_us() - t0) / REPS;
            t0 = now_us();
            for (int r = 0; r < REPS; r++) {
                shmem_ctx_session_start(SHMEM_CTX_DEFAULT, SHMEM_CTX_SESSION_BATCH, NULL, 0);
                for (int i = 0; i < BLOCKS; i++)
                    shmem_long_p(&dst[i], i, peer);
                shmem_ctx_session_stop(SHMEM_CTX_DEFAULT);
                shmem_quiet();
            }
            t[P_SESSION] += (now_us() - t0) / REPS;
        }
        shmem_barrier_all();
        t0 = now_us();
        for (int r = 0; r < REPS / 4; r++)
            shmem_long_sum_inscan(SHMEM_TEAM_WORLD, d, s, 8);
        t[INSCAN] += (now_us() - t0) / (REPS / 4);
        t0 = now_us();
        for (int r = 0; r < REPS / 4; r++)
            shmem_long_sum_reduce(SHMEM_TEAM_WORLD, d, s, 8);
        t[REDUCE] += (now_us() - t0) / (REPS / 4);
    }
    if (me == 0)
        printf("%d PEs, us: ibput 64 blocks + quiet %.1f | 64 putmem + quiet %.1f | "
               "put_nbi 4 KiB + pe_quiet %.1f | + quiet %.1f | 64 p + quiet %.1f | "
               "the same in a batch session %.1f | sum_inscan 8 longs %.1f | "
               "sum_reduce 8 longs %.1f\n",
               n, t[IBPUT] / 3, t[PUTMEM] / 3, t[PE_QUIET] / 3, t[QUIET] / 3, t[P] / 3,
               t[P_SESSION] / 3, t[INSCAN] / 3, t[REDUCE] / 3);
    shmem_free(d);
    shmem_free(s);
    shmem_free(dst);
    shmem_finalize();
    return 0;
}
