/*
 * shmem_lat.c - OpenSHMEM latency and bandwidth between PE 0 and PE 1 (OSU methodology).
 *
 * What it measures (PE 0 is the origin, PE 1 the target; other PEs idle):
 *   put      shmem_putmem of 8 B, 1 KiB, 64 KiB: the blocking call alone (quiet once per
 *            batch) and put+quiet (shmem_quiet after every put: remote completion);
 *   get      shmem_getmem of 8 B, 1 KiB, 64 KiB;
 *   p        shmem_long_p (8 B);
 *   bw       32 x shmem_putmem_nbi of 1 MiB, then shmem_quiet: bandwidth in GB/s (10^9 B/s),
 *            the same 1 MiB source and destination for all 32 (hot cache: bw_1MiB), and
 *            32 different 1 MiB blocks (32 MiB, more than the caches: bw_32MiB); for
 *            bw_1MiB also per second of PE 0's CPU time (bw_1MiB_cpu: the copy rate while
 *            PE 0 runs, whatever time the core gives other processes);
 *   amo      shmem_int64_atomic_fetch_add and shmem_int64_atomic_compare_swap.
 * Method: a warm-up of WARM iterations, then BATCHES batches of ITERS iterations; the
 * figure is the median over the batches of (batch time / ITERS), with the minimum beside
 * it.  Times come from CLOCK_MONOTONIC.  Beside the bandwidths, PE 0's share of its CPU
 * during the batches (thread CPU time / elapsed time) tells whether another process shared
 * the core: at a share of 0.5 a copy-bound figure halves, whatever the library does.
 *
 *   shmem_lat [--bind] [--quick]
 *     --bind   pin PE i to CPU i % (number of CPUs) with sched_setaffinity
 *     --quick  fewer batches (a smoke run)
 *
 * Output: a table on PE 0, then one "RESULT <name> <value> <unit>" line per figure for
 * scripts.  Not a test: nothing is asserted about the figures.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024 * 1024)

static int WARM = 2000, BATCHES = 31, ITERS = 2000;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* PE 0's share of its CPU during the batches of the last measure(), and the median over
 * the batches of PE 0's CPU time per iteration (what an operation costs while it runs: on a
 * loaded machine the copy-bound figures follow this, not the wall clock). */
static double cpu_share, cpu_med;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The symmetric words of the idle PEs' wait: [0] = 1 when PE 0 is done. */
static long *done;

/* Runs `body(arg, iters)` on PE 0: warm-up, then BATCHES timed batches; returns the
 * median seconds per iteration and stores the minimum. */
typedef void (*body_fn)(size_t arg, int iters);
static double measure(body_fn body, size_t arg, int iters, double *min_out) {
    double *t = malloc(sizeof(double) * (size_t)BATCHES);
    double *c = malloc(sizeof(double) * (size_t)BATCHES);
    if (t == NULL || c == NULL) {
        fprintf(stderr, "shmem_lat: out of memory\n");
        shmem_global_exit(1);
    }
    body(arg, WARM < iters ? WARM : iters);
    double wall0 = now(), cpu0 = cpu_now();
    for (int b = 0; b < BATCHES; b++) {
        double t0 = now(), c0 = cpu_now();
        body(arg, iters);
        t[b] = (now() - t0) / iters;
        c[b] = (cpu_now() - c0) / iters;
    }
    cpu_share = (cpu_now() - cpu0) / (now() - wall0);
    qsort(t, (size_t)BATCHES, sizeof(double), cmp_double);
    qsort(c, (size_t)BATCHES, sizeof(double), cmp_double);
    double med = t[BATCHES / 2];
    *min_out = t[0];
    cpu_med = c[BATCHES / 2];
    free(t);
    free(c);
    return med;
}

static char *sym_buf; /* symmetric, 64 KiB + 32 MiB */
static char *local_buf;
static long *sym_long;
static int64_t *sym_i64;

static void put_only(size_t n, int iters) {
    for (int i = 0; i < iters; i++)
        shmem_putmem(sym_buf, local_buf, n, 1);
    shmem_quiet();
}
static void put_quiet(size_t n, int iters) {
    for (int i = 0; i < iters; i++) {
        shmem_putmem(sym_buf, local_buf, n, 1);
        shmem_quiet();
    }
}
static void get_only(size_t n, int iters) {
    for (int i = 0; i < iters; i++)
        shmem_getmem(local_buf, sym_buf, n, 1);
}
static void long_p(size_t n, int iters) {
    (void)n;
    for (int i = 0; i < iters; i++)
        shmem_long_p(sym_long, i, 1);
    shmem_quiet();
}
static void fetch_add(size_t n, int iters) {
    (void)n;
    for (int i = 0; i < iters; i++)
        (void)shmem_int64_atomic_fetch_add(sym_i64, 1, 1);
}
static void cswap(size_t n, int iters) {
    (void)n;
    for (int i = 0; i < iters; i++)
        (void)shmem_int64_atomic_compare_swap(sym_i64, (int64_t)i, (int64_t)i + 1, 1);
}
/* 32 puts of n bytes, then quiet: the same block each time (hot in the caches) ... */
static void bw_hot(size_t n, int iters) {
    for (int i = 0; i < iters; i++) {
        for (int k = 0; k < 32; k++)
            shmem_putmem_nbi(sym_buf + 64 * 1024, local_buf, n, 1);
        shmem_quiet();
    }
}
/* ... or 32 different blocks (32 MiB: more than the caches hold). */
static void bw_distinct(size_t n, int iters) {
    for (int i = 0; i < iters; i++) {
        for (int k = 0; k < 32; k++)
            shmem_putmem_nbi(sym_buf + 64 * 1024 + (size_t)k * n, local_buf + (size_t)k * n, n, 1);
        shmem_quiet();
    }
}

static void row(const char *name, const char *what, double med, double min) {
    printf("%-10s %-28s %12.4f us %12.4f us\n", name, what, med * 1e6, min * 1e6);
    printf("RESULT %s %.6f us\n", name, med * 1e6);
}

int main(int argc, char **argv) {
    int bind = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--bind") == 0)
            bind = 1;
        else if (strcmp(argv[i], "--quick") == 0) {
            WARM = 200;
            BATCHES = 5;
            ITERS = 200;
        } else {
            fprintf(stderr, "usage: shmem_lat [--bind] [--quick]\n");
            return 2;
        }
    }
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    if (npes < 2) {
        if (me == 0)
            fprintf(stderr, "shmem_lat: needs at least 2 PEs\n");
        shmem_finalize();
        return 2;
    }
    if (bind) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET((int)(me % (ncpu > 0 ? ncpu : 1)), &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0)
            perror("shmem_lat: sched_setaffinity");
    }
    sym_buf = shmem_align(4096, 64 * 1024 + 32 * (size_t)MIB);
    sym_long = shmem_calloc(8, sizeof(long));
    sym_i64 = shmem_calloc(8, sizeof(int64_t));
    done = shmem_calloc(1, sizeof(long));
    local_buf = aligned_alloc(4096, 32 * (size_t)MIB);
    if (!sym_buf || !sym_long || !sym_i64 || !done || !local_buf) {
        fprintf(stderr, "shmem_lat: allocation failed on PE %d\n", me);
        shmem_global_exit(1);
    }
    memset(local_buf, 1, 32 * (size_t)MIB);
    memset(sym_buf, 2, 64 * 1024 + 32 * (size_t)MIB);
    /* Start together: PE 0 waits for the others' arrival counts. */
    shmem_long_atomic_inc(&done[0], 0);
    if (me == 0) {
        shmem_long_wait_until(&done[0], SHMEM_CMP_EQ, npes);
        done[0] = 0;
    }
    if (me == 0) {
        char *node = getenv("GSAS_NODE");
        printf("shmem_lat: %d PEs, PE 0 -> PE 1%s%s; %d batches of %d (warm-up %d); median "
               "and minimum per operation\n",
               npes, node ? ", GSAS_NODE of PE 0 = " : "", node ? node : "", BATCHES, ITERS,
               WARM);
        printf("%-10s %-28s %15s %15s\n", "name", "operation", "median", "min");
        double med, min;
        size_t sizes[3] = {8, 1024, 64 * 1024};
        const char *tags[3] = {"8B", "1KiB", "64KiB"};
        char name[64], what[64];
        for (int s = 0; s < 3; s++) {
            int it = sizes[s] >= 65536 ? ITERS / 10 : ITERS;
            med = measure(put_only, sizes[s], it, &min);
            snprintf(name, sizeof name, "put_%s", tags[s]);
            snprintf(what, sizeof what, "shmem_putmem %zu B", sizes[s]);
            row(name, what, med, min);
            med = measure(put_quiet, sizes[s], it, &min);
            snprintf(name, sizeof name, "putq_%s", tags[s]);
            snprintf(what, sizeof what, "shmem_putmem %zu B + quiet", sizes[s]);
            row(name, what, med, min);
            med = measure(get_only, sizes[s], it, &min);
            snprintf(name, sizeof name, "get_%s", tags[s]);
            snprintf(what, sizeof what, "shmem_getmem %zu B", sizes[s]);
            row(name, what, med, min);
        }
        med = measure(long_p, 0, ITERS, &min);
        row("long_p", "shmem_long_p", med, min);
        med = measure(fetch_add, 0, ITERS, &min);
        row("fadd64", "int64 atomic_fetch_add", med, min);
        med = measure(cswap, 0, ITERS, &min);
        row("cswap64", "int64 atomic_compare_swap", med, min);
        int bw_iters = BATCHES > 5 ? 10 : 2;
        med = measure(bw_hot, MIB, bw_iters, &min);
        double gbs = 32.0 * MIB / med / 1e9, gbs_max = 32.0 * MIB / min / 1e9;
        printf("%-10s %-28s %12.3f GB/s %10.3f GB/s (best), CPU share %.2f\n", "bw_1MiB",
               "32 x putmem_nbi 1 MiB + quiet", gbs, gbs_max, cpu_share);
        printf("RESULT bw_1MiB %.3f GB/s\n", gbs);
        printf("RESULT cpu_share_bw_1MiB %.3f ratio\n", cpu_share);
        printf("%-10s %-28s %12.3f GB/s per second of PE 0's CPU time (median)\n", "bw_1MiB",
               "", 32.0 * MIB / cpu_med / 1e9);
        printf("RESULT bw_1MiB_cpu %.3f GB/s\n", 32.0 * MIB / cpu_med / 1e9);
        med = measure(bw_distinct, MIB, bw_iters, &min);
        gbs = 32.0 * MIB / med / 1e9;
        gbs_max = 32.0 * MIB / min / 1e9;
        printf("%-10s %-28s %12.3f GB/s %10.3f GB/s (best), CPU share %.2f\n", "bw_32MiB",
               "32 distinct 1 MiB + quiet", gbs, gbs_max, cpu_share);
        printf("RESULT bw_32MiB %.3f GB/s\n", gbs);
        fflush(stdout);
        for (int pe = 1; pe < npes; pe++)
            shmem_long_atomic_set(&done[0], 1, pe);
        shmem_quiet();
    } else {
        shmem_long_wait_until(&done[0], SHMEM_CMP_EQ, 1);
    }
    shmem_finalize();
    return 0;
}
