/*
 * osb_coll.c - collective OpenSHMEM benchmarks over all PEs (run it at several PE counts):
 *
 *   barrier     shmem_barrier_all
 *   broadcast   shmem_broadcast64 from PE 0                 (size: bytes broadcast)
 *   collect     shmem_collect64                             (size: bytes per PE)
 *   fcollect    shmem_fcollect64                            (size: bytes per PE)
 *   alltoall    shmem_alltoall64                            (size: bytes per PE pair)
 *   reduce_sum  shmem_long_sum_to_all                       (size: bytes reduced)
 *   sync        shmem_sync over all PEs (active set)
 *   team_sync, team_broadcast, team_collect, team_fcollect, team_alltoall, team_reduce_sum:
 *               the same over SHMEM_TEAM_WORLD with the OpenSHMEM 1.5 team routines
 *               (shmem_team_sync, shmem_int64_broadcast, ..., shmem_int64_sum_reduce);
 *               an implementation of an earlier version reports them skipped (OSB_SKIP)
 *
 *   osb_coll [--quick] [--sizes N,N,...] [--batches N] [--batch-ms MS]  (sizes: multiples
 *                                                           of 8, at most 65536)
 *
 * The active-set routines (OpenSHMEM 1.4, kept in 1.5) build on 1.4 implementations too;
 * the team routines only where SHMEM_MAJOR_VERSION.SHMEM_MINOR_VERSION is at least 1.5.
 * Method (OSU): only the call is timed; a barrier (untimed) follows every call, so
 * that consecutive calls may alternate two pSync arrays.  Every PE takes the median of its
 * batches; the figure is the largest median of all PEs (the slowest PE), with the smallest
 * minimum and the largest maximum beside it.  Every result is checked.
 */
#include "osb.h"

#define MAX_BYTES 65536
#define MAX_PES 256

#define MAX2(a, b) ((a) > (b) ? (a) : (b))
#define PSYNC_LEN                                                                          \
    MAX2(MAX2(SHMEM_REDUCE_SYNC_SIZE, SHMEM_BCAST_SYNC_SIZE),                              \
         MAX2(SHMEM_ALLTOALL_SYNC_SIZE, SHMEM_COLLECT_SYNC_SIZE))
static long psync[2][PSYNC_LEN];
static long pwrk[MAX_BYTES / 8 / 2 + 1 + SHMEM_REDUCE_MIN_WRKDATA_SIZE];
static double gathered[3 * MAX_PES];
static int64_t *src, *dst; /* symmetric */
static int me, npes;
static long call_no;
static double t_acc;

typedef void (*coll_fn)(size_t nelems, long *ps);

static void c_barrier(size_t n, long *ps) {
    (void)n;
    (void)ps;
    shmem_barrier_all();
}
static void c_bcast(size_t n, long *ps) { shmem_broadcast64(dst, src, n, 0, 0, 0, npes, ps); }
static void c_collect(size_t n, long *ps) { shmem_collect64(dst, src, n, 0, 0, npes, ps); }
static void c_fcollect(size_t n, long *ps) { shmem_fcollect64(dst, src, n, 0, 0, npes, ps); }
static void c_alltoall(size_t n, long *ps) { shmem_alltoall64(dst, src, n, 0, 0, npes, ps); }
static void c_reduce(size_t n, long *ps) {
    shmem_long_sum_to_all((long *)dst, (long *)src, (int)n, 0, 0, npes, pwrk, ps);
}

static void c_sync(size_t n, long *ps) {
    (void)n;
    shmem_sync(0, 0, npes, ps);
}

#define HAVE_TEAMS                                                                         \
    (SHMEM_MAJOR_VERSION > 1 || (SHMEM_MAJOR_VERSION == 1 && SHMEM_MINOR_VERSION >= 5))
#if HAVE_TEAMS
static void t_sync(size_t n, long *ps) {
    (void)n;
    (void)ps;
    shmem_team_sync(SHMEM_TEAM_WORLD);
}
static void t_bcast(size_t n, long *ps) {
    (void)ps;
    shmem_int64_broadcast(SHMEM_TEAM_WORLD, dst, src, n, 0);
}
static void t_collect(size_t n, long *ps) {
    (void)ps;
    shmem_int64_collect(SHMEM_TEAM_WORLD, dst, src, n);
}
static void t_fcollect(size_t n, long *ps) {
    (void)ps;
    shmem_int64_fcollect(SHMEM_TEAM_WORLD, dst, src, n);
}
static void t_alltoall(size_t n, long *ps) {
    (void)ps;
    shmem_int64_alltoall(SHMEM_TEAM_WORLD, dst, src, n);
}
static void t_reduce(size_t n, long *ps) {
    (void)ps;
    shmem_int64_sum_reduce(SHMEM_TEAM_WORLD, dst, src, n);
}
#endif

#if !HAVE_TEAMS
static const char *const TEAM_BENCH[6] = {"team_sync",     "team_broadcast", "team_collect",
                                          "team_fcollect", "team_alltoall",  "team_reduce_sum"};
#endif

static coll_fn cur;
static void body(size_t n, long iters) {
    for (long i = 0; i < iters; i++) {
        double t0 = osb_now();
        cur(n, psync[call_no++ & 1]);
        t_acc += osb_now() - t0;
        shmem_barrier_all();
    }
}

/* Like osb_measure, but the batch time is the sum of the timed calls only. */
static void measure(const struct osb_opts *o, size_t n, long iters, double out[3]) {
    double t[1000];
    iters = osb_calibrate(o, body, n, iters);
    body(n, iters);
    for (int b = 0; b < o->batches; b++) {
        t_acc = 0;
        body(n, iters);
        t[b] = t_acc / (double)iters;
    }
    osb_stats(t, o->batches, out);
}

static void check(const char *bench, size_t n) {
    if (strncmp(bench, "team_", 5) == 0)
        bench += 5; /* same data and results as the active-set form */
    for (size_t k = 0; k < n; k++) {
        int64_t want;
        if (strcmp(bench, "broadcast") == 0) {
            if (me == 0)
                return; /* the root's dest is not written */
            want = (int64_t)k;
        } else if (strcmp(bench, "reduce_sum") == 0) {
            want = (int64_t)k * npes + (int64_t)npes * (npes - 1) / 2;
        } else {
            want = -1; /* checked below per block */
        }
        if (want >= 0 && dst[k] != want)
            osb_die("osb_coll: wrong result");
    }
    if (strcmp(bench, "collect") == 0 || strcmp(bench, "fcollect") == 0 ||
        strcmp(bench, "alltoall") == 0) {
        for (int p = 0; p < npes; p++)
            for (size_t k = 0; k < n; k++) {
                int64_t want = strcmp(bench, "alltoall") == 0
                                   ? (int64_t)p * 1000000 + (int64_t)me * 1000 + (int64_t)k
                                   : (int64_t)p * 1000000 + (int64_t)k;
                if (dst[(size_t)p * n + k] != want)
                    osb_die("osb_coll: wrong result");
            }
    }
}

static void fill(const char *bench, size_t n) {
    if (strncmp(bench, "team_", 5) == 0)
        bench += 5;
    for (int p = 0; p < npes; p++)
        for (size_t k = 0; k < n; k++) {
            size_t i = (size_t)p * n + k;
            if (strcmp(bench, "alltoall") == 0)
                src[i] = (int64_t)me * 1000000 + (int64_t)p * 1000 + (int64_t)k;
            else if (strcmp(bench, "broadcast") == 0)
                src[i] = (int64_t)k;
            else if (strcmp(bench, "reduce_sum") == 0)
                src[i] = (int64_t)k + me;
            else
                src[i] = (int64_t)me * 1000000 + (int64_t)k;
        }
}

static void run(const struct osb_opts *o, const char *bench, coll_fn fn, size_t bytes) {
    size_t n = bytes / 8;
    double st[3];
    fill(bench, n);
    cur = fn;
    shmem_barrier_all();
    measure(o, n, osb_iters_for(o, bytes * (size_t)npes), st);
    check(bench, n);
    for (int k = 0; k < 3; k++)
        shmem_double_p(&gathered[3 * me + k], st[k], 0);
    shmem_barrier_all();
    if (me == 0) {
        double agg[3] = {gathered[0], gathered[1], gathered[2]};
        for (int p = 1; p < npes; p++) {
            if (gathered[3 * p] > agg[0])
                agg[0] = gathered[3 * p];
            if (gathered[3 * p + 1] < agg[1])
                agg[1] = gathered[3 * p + 1];
            if (gathered[3 * p + 2] > agg[2])
                agg[2] = gathered[3 * p + 2];
        }
        osb_report(bench, "coll", bytes, npes, "us", agg, 1e6, 0);
    }
    shmem_barrier_all();
}

int main(int argc, char **argv) {
    struct osb_opts o;
    osb_parse(argc, argv, &o);
    for (int a = 0; a < 2; a++)
        for (int i = 0; i < PSYNC_LEN; i++)
            psync[a][i] = SHMEM_SYNC_VALUE;
    shmem_init();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    osb_header("osb_coll", me, npes, &o);
    if (npes > MAX_PES)
        osb_die("osb_coll: at most 256 PEs");
    src = shmem_malloc((size_t)MAX_BYTES * (size_t)npes);
    dst = shmem_malloc((size_t)MAX_BYTES * (size_t)npes);
    if (src == NULL || dst == NULL)
        osb_die("osb_coll: out of symmetric memory");
    shmem_barrier_all();
    osb_warm_up(&o);
    run(&o, "barrier", c_barrier, 0);
    run(&o, "sync", c_sync, 0);
#if HAVE_TEAMS
    run(&o, "team_sync", t_sync, 0);
#else
    if (me == 0)
        for (int k = 0; k < 6; k++)
            osb_skip(TEAM_BENCH[k], "OpenSHMEM before 1.5 has no teams");
#endif
    for (int s = 0; s < o.nsizes; s++) {
        size_t b = o.sizes[s];
        if (b == 0 || b % 8 != 0 || b > MAX_BYTES)
            osb_die("osb_coll: --sizes must be multiples of 8 up to 65536");
        run(&o, "broadcast", c_bcast, b);
        run(&o, "collect", c_collect, b);
        run(&o, "fcollect", c_fcollect, b);
        run(&o, "alltoall", c_alltoall, b);
        run(&o, "reduce_sum", c_reduce, b);
#if HAVE_TEAMS
        run(&o, "team_broadcast", t_bcast, b);
        run(&o, "team_collect", t_collect, b);
        run(&o, "team_fcollect", t_fcollect, b);
        run(&o, "team_alltoall", t_alltoall, b);
        run(&o, "team_reduce_sum", t_reduce, b);
#endif
    }
    shmem_barrier_all();
    shmem_free(src);
    shmem_free(dst);
    shmem_finalize();
    return 0;
}
