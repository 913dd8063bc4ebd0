/*
 * osb_p2p.c - point-to-point OpenSHMEM benchmarks between PE 0 (origin) and PE 1 (target):
 *
 *   put_lat  put+quiet, put+fence, put+barrier (both PEs), put_nbi+quiet   (us per put)
 *   get_lat  get, get_nbi+quiet                                             (us per get)
 *   put_bw   WINDOW puts (blocking, nbi) then quiet                         (MB/s, 10^6 B/s)
 *   get_bw   WINDOW get_nbi then quiet                                      (MB/s)
 *   signal   put-with-signal ping-pong, half the round trip                 (us; OpenSHMEM 1.5)
 *   msgrate  WINDOW put_nbi of one size then quiet                          (Mmsg/s)
 *   amo      fetch-add, add+quiet, compare-swap, fetch of a 64-bit long     (us)
 *   flag     flag ping-pong, the round trip: PE 0 sets a long on PE 1 with shmem_long_p
 *            and waits for PE 1 to set one back, PE 1 the same way round      (us)
 *              flag_quiet   p + shmem_quiet, the waiter in shmem_long_wait_until
 *              flag_p_wait  p alone, the waiter in shmem_long_wait_until
 *              flag_p_test  p alone, the waiter polling shmem_long_test
 *
 *   osb_p2p [--quick] [--sizes N,N,...] [--batches N] [--batch-ms MS]   (2 PEs or more;
 *                                                          PEs from 2 on idle)
 *
 * Where PE 1 runs (same node or another node) is the launcher's choice: scripts/bench
 * names it in the target.  Output: see osb.h.  A benchmark, not a test: nothing is
 * asserted about the figures, but a put or a fetch-add that delivers the wrong value ends
 * the program with an error.
 */
#include "osb.h"

#define MAX_MSG (4L << 20)
#define WINDOW 32

static char *dst;      /* symmetric, MAX_MSG */
static char *src;      /* private, MAX_MSG */
static long *word;     /* symmetric AMO target */
static uint64_t *sig;  /* symmetric signal word */
#if OSB_HAVE_15
static uint64_t sig_seq;
#endif
static int me;
static long fadds; /* fetch-adds PE 0 made */
static long *flag;     /* symmetric ping-pong flag */
static long flag_seq;  /* the value of the last round, the same on both PEs */
static int flag_mode;  /* 0: p + quiet, wait_until; 1: p, wait_until; 2: p, test loop */

static void b_put_quiet(size_t n, long iters) {
    if (me != 0)
        return;
    for (long i = 0; i < iters; i++) {
        shmem_putmem(dst, src, n, 1);
        shmem_quiet();
    }
}
static void b_put_fence(size_t n, long iters) {
    if (me != 0)
        return;
    for (long i = 0; i < iters; i++) {
        shmem_putmem(dst, src, n, 1);
        shmem_fence();
    }
    shmem_quiet();
}
static void b_put_barrier(size_t n, long iters) {
    for (long i = 0; i < iters; i++) {
        if (me == 0)
            shmem_putmem(dst, src, n, 1);
        shmem_barrier_all();
    }
}
static void b_put_nbi(size_t n, long iters) {
    if (me != 0)
        return;
    for (long i = 0; i < iters; i++) {
        shmem_putmem_nbi(dst, src, n, 1);
        shmem_quiet();
    }
}
static void b_get(size_t n, long iters) {
    if (me != 0)
        return;
    for (long i = 0; i < iters; i++)
        shmem_getmem(src, dst, n, 1);
}
static void b_get_nbi(size_t n, long iters) {
    if (me != 0)
        return;
    for (long i = 0; i < iters; i++) {
        shmem_getmem_nbi(src, dst, n, 1);
        shmem_quiet();
    }
}
/* Throughput bodies: one "operation" is a window of WINDOW messages and its quiet. */
static void b_put_bw(size_t n, long iters) {
    if (me != 0)
        return;
    for (long i = 0; i < iters; i++) {
        for (int w = 0; w < WINDOW; w++)
            shmem_putmem(dst, src, n, 1);
        shmem_quiet();
    }
}
static void b_put_nbi_bw(size_t n, long iters) {
    if (me != 0)
        return;
    for (long i = 0; i < iters; i++) {
        for (int w = 0; w < WINDOW; w++)
            shmem_putmem_nbi(dst, src, n, 1);
        shmem_quiet();
    }
}
static void b_get_nbi_bw(size_t n, long iters) {
    if (me != 0)
        return;
    for (long i = 0; i < iters; i++) {
        for (int w = 0; w < WINDOW; w++)
            shmem_getmem_nbi(src, dst, n, 1);
        shmem_quiet();
    }
}
#if OSB_HAVE_15
/* Ping-pong: PE 0 puts with a signal, PE 1 waits for it and answers the same way. */
static void b_put_signal(size_t n, long iters) {
    for (long i = 0; i < iters; i++) {
        sig_seq++;
        if (me == 0) {
            shmem_putmem_signal(dst, src, n, sig, sig_seq, SHMEM_SIGNAL_SET, 1);
            shmem_signal_wait_until(sig, SHMEM_CMP_GE, sig_seq);
        } else if (me == 1) {
            shmem_signal_wait_until(sig, SHMEM_CMP_GE, sig_seq);
            shmem_putmem_signal(dst, src, n, sig, sig_seq, SHMEM_SIGNAL_SET, 0);
        }
    }
}
#endif
static void b_fadd(size_t n, long iters) {
    (void)n;
    if (me != 0)
        return;
    for (long i = 0; i < iters; i++)
        (void)shmem_long_atomic_fetch_add(word, 1, 1);
    fadds += iters;
}
static void b_add(size_t n, long iters) {
    (void)n;
    if (me != 0)
        return;
    for (long i = 0; i < iters; i++) {
        shmem_long_atomic_add(word, 1, 1);
        shmem_quiet();
    }
}
static void b_cswap(size_t n, long iters) {
    (void)n;
    if (me != 0)
        return;
    long v = shmem_long_atomic_fetch(word, 1);
    for (long i = 0; i < iters; i++)
        v = shmem_long_atomic_compare_swap(word, v, v + 1, 1) + 1;
}
static void b_fetch(size_t n, long iters) {
    (void)n;
    if (me != 0)
        return;
    for (long i = 0; i < iters; i++)
        (void)shmem_long_atomic_fetch(word, 1);
}

/* Flag ping-pong: one operation is a round trip (both PEs call it; others idle). */
static void flag_wait(long v) {
    if (flag_mode == 2) {
        while (!shmem_long_test(flag, SHMEM_CMP_GE, v))
            ;
    } else {
        shmem_long_wait_until(flag, SHMEM_CMP_GE, v);
    }
}
static void flag_set(long v, int pe) {
    shmem_long_p(flag, v, pe);
    if (flag_mode == 0)
        shmem_quiet();
}
static void b_flag(size_t n, long iters) {
    (void)n;
    if (me > 1)
        return;
    for (long i = 0; i < iters; i++) {
        flag_seq++;
        if (me == 0) {
            flag_set(flag_seq, 1);
            flag_wait(flag_seq);
        } else {
            flag_wait(flag_seq);
            flag_set(flag_seq, 0);
        }
    }
}

static const struct osb_opts *O;
static int npes;

/* Runs one benchmark on every PE (the bodies decide who works) and reports on PE 0. */
static void run(const char *bench, const char *family, osb_body body, size_t n, long ops,
                const char *unit, double scale, int rate) {
    double sec[3];
    shmem_barrier_all();
    osb_measure(O, body, n, ops, sec);
    shmem_barrier_all();
    if (me == 0)
        osb_report(bench, family, n, npes, unit, sec, scale, rate);
}

int main(int argc, char **argv) {
    struct osb_opts o;
    osb_parse(argc, argv, &o);
    O = &o;
    shmem_init();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    osb_header("osb_p2p", me, npes, &o);
    if (npes < 2)
        osb_die("osb_p2p needs at least 2 PEs");
    if (o.nsizes == 0)
        osb_die("osb_p2p needs --sizes");
    dst = shmem_malloc(MAX_MSG);
    word = shmem_malloc(sizeof(long));
    sig = shmem_malloc(sizeof(uint64_t));
    flag = shmem_malloc(sizeof(long));
    src = malloc(MAX_MSG);
    if (dst == NULL || word == NULL || sig == NULL || flag == NULL || src == NULL)
        osb_die("osb_p2p: out of memory (symmetric heap too small for 4 MiB?)");
    for (long i = 0; i < MAX_MSG; i++)
        src[i] = (char)(i * 7 + 1);
    memset(dst, 0, MAX_MSG);
    *word = 0;
    *sig = 0;
    *flag = 0;
    shmem_barrier_all();
    osb_warm_up(&o);

    for (int s = 0; s < o.nsizes; s++) {
        size_t n = o.sizes[s];
        if (n > (size_t)MAX_MSG)
            osb_die("--sizes: at most 4 MiB");
        long it = osb_iters_for(&o, n);
        long itw = osb_iters_for(&o, n * WINDOW);
        run("put_quiet", "put_lat", b_put_quiet, n, it, "us", 1e6, 0);
        run("put_fence", "put_lat", b_put_fence, n, it, "us", 1e6, 0);
        run("put_barrier", "put_lat", b_put_barrier, n, it, "us", 1e6, 0);
        run("put_nbi_quiet", "put_lat", b_put_nbi, n, it, "us", 1e6, 0);
        run("get", "get_lat", b_get, n, it, "us", 1e6, 0);
        run("get_nbi_quiet", "get_lat", b_get_nbi, n, it, "us", 1e6, 0);
        run("put", "put_bw", b_put_bw, n, itw, "MB/s", (double)n * WINDOW / 1e6, 1);
        run("put_nbi", "put_bw", b_put_nbi_bw, n, itw, "MB/s", (double)n * WINDOW / 1e6, 1);
        run("get_nbi", "get_bw", b_get_nbi_bw, n, itw, "MB/s", (double)n * WINDOW / 1e6, 1);
        run("put_nbi_rate", "msgrate", b_put_nbi_bw, n, itw, "Mmsg/s", WINDOW / 1e6, 1);
#if OSB_HAVE_15
        run("put_signal", "signal", b_put_signal, n, it, "us", 0.5e6, 0);
#else
        if (me == 0 && s == 0)
            osb_skip("put_signal", "shmem_putmem_signal needs OpenSHMEM 1.5");
#endif
        /* The last put of PE 0 must have landed whole on PE 1. */
        shmem_barrier_all();
        if (me == 1 && n > 0 && (dst[0] != src[0] || dst[n - 1] != src[n - 1]))
            osb_die("osb_p2p: PE 1 holds the wrong bytes after the puts");
    }
    long amo_it = o.iters;
    shmem_barrier_all();
    *word = 0;
    shmem_barrier_all();
    run("fetch_add", "amo", b_fadd, 8, amo_it, "us", 1e6, 0);
    if (me == 0 && shmem_long_atomic_fetch(word, 1) != fadds)
        osb_die("osb_p2p: the fetch-adds did not all land");
    run("add", "amo", b_add, 8, amo_it, "us", 1e6, 0);
    run("compare_swap", "amo", b_cswap, 8, amo_it, "us", 1e6, 0);
    run("fetch", "amo", b_fetch, 8, amo_it, "us", 1e6, 0);
    static const char *flag_names[3] = {"flag_quiet", "flag_p_wait", "flag_p_test"};
    /* Open MPI 4.1's shmem_test does not drive progress over UCX, so its test loop never
     * sees the partner's update (docs: peers.md); the others run everywhere. */
    char name[SHMEM_MAX_NAME_LEN];
    shmem_info_get_name(name);
    for (flag_mode = 0; flag_mode < 3; flag_mode++) {
        /* Open MPI's name is its vendor string, "http://www.open-mpi.org/". */
        if (flag_mode == 2 && (strstr(name, "Open MPI") != NULL || strstr(name, "open-mpi") != NULL)) {
            if (me == 0)
                osb_skip(flag_names[2], "shmem_test does not progress in this implementation");
            continue;
        }
        run(flag_names[flag_mode], "flag", b_flag, 8, amo_it, "us", 1e6, 0);
    }

    shmem_barrier_all();
    shmem_free(dst);
    shmem_free(word);
    shmem_free(sig);
    shmem_free(flag);
    free(src);
    shmem_finalize();
    return 0;
}
