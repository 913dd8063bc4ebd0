/*
 * coll_direct.c - collectives back to back with data that changes every call, the test of
 * the direct path across nodes (signals and small data sent straight to the waiting PE,
 * see shmem/src/coll/direct/) and of its fallback through the services:
 *   * per iteration i, on a team (WORLD, then the odd PEs split from it) and on the
 *     matching active set: broadcast from root i % n, sum reduction, fcollect, collect
 *     with sizes that change per PE and per call (some zero), alltoall, sync/barrier, and
 *     barrier_all, with no other synchronisation between them (two destination buffers and
 *     two pSyncs alternate, so a PE one call ahead never writes what another still checks);
 *   * sizes of 8 B, 1 KiB, 8 KiB, 8 KiB + 8 B and 64000 B (more than a datagram of the
 *     loopback MTU: several datagrams, in order, the flag with the last); the test runs
 *     once with the defaults and once with SHMEM_COLL_DIRECT_CHUNK=1000 (datagrams that cut
 *     elements in two; 8 KiB in nine) and SHMEM_COLL_DIRECT_MAX=8k (exactly 8 KiB goes
 *     direct, one element more through the services with only the flag direct);
 *   * every result is checked on every PE after every call, and every pSync is back at
 *     SHMEM_SYNC_VALUE at the end.
 * A signal applied twice, lost, applied before its data, or taken for the next call's,
 * gives a wrong value or a hang (SHMEM_WAIT_TIMEOUT ends it with a message).
 */
#define CTEST_NAME "coll_direct"
#include "ctest.h"
#include "coll_common.h"

enum { MAXN = 8000, ITERS = 12 };

static int me, npes;
static long *src, *dst[2], *red[2], *col[2], *fco[2], *a2a[2], *a2s;
static long *ps[2][6], *wrk; /* pSyncs (SHMEM_REDUCE_SYNC_SIZE words: the largest) */

static long val(int pe, int i, size_t k) { return (long)pe * 1000003L + (long)i * 1009L + (long)k; }

/* Elements PE pe contributes to collect call i. */
static size_t csize(int pe, int i, size_t n) { return (size_t)((pe + i) % 3) * n / 2; }

static void check_group(int i, size_t n, int gn, const int *world, int my, int team_form) {
    int root = i % gn;
    for (size_t k = 0; k < n; k++) {
        if (team_form || my != root)
            CHECK(dst[i & 1][k] == val(world[root], i, k), "broadcast %d (n %zu): [%zu] = %ld",
                  i, n, k, dst[i & 1][k]);
        long sum = 0;
        for (int j = 0; j < gn; j++)
            sum += val(world[j], i, k);
        CHECK(red[i & 1][k] == sum, "sum %d (n %zu): [%zu] = %ld, want %ld", i, n, k,
              red[i & 1][k], sum);
    }
    size_t at = 0;
    for (int j = 0; j < gn; j++) {
        for (size_t k = 0; k < n; k++) {
            CHECK(fco[i & 1][(size_t)j * n + k] == val(world[j], i, k), "fcollect %d (n %zu)",
                  i, n);
            CHECK(a2a[i & 1][(size_t)j * n + k] == val(world[j], i, k) + my,
                  "alltoall %d (n %zu): block %d [%zu] = %ld", i, n, j, k,
                  a2a[i & 1][(size_t)j * n + k]);
        }
        for (size_t k = 0; k < csize(world[j], i, n); k++, at++)
            CHECK(col[i & 1][at] == val(world[j], i, k), "collect %d (n %zu): [%zu]", i, n, at);
    }
}

static void fill(int i, size_t n, int gn) {
    for (size_t k = 0; k < n; k++)
        src[k] = val(me, i, k);
    for (int j = 0; j < gn; j++)
        for (size_t k = 0; k < n; k++)
            a2s[(size_t)j * n + k] = val(me, i, k) + j;
}

static void run_team(shmem_team_t t, size_t n, int world_team) {
    int gn = shmem_team_n_pes(t), my = shmem_team_my_pe(t);
    int world[64];
    for (int j = 0; j < gn; j++)
        world[j] = shmem_team_translate_pe(t, j, SHMEM_TEAM_WORLD);
    for (int i = 0; i < ITERS; i++) {
        fill(i, n, gn);
        long *d = dst[i & 1];
        CHECK(shmem_broadcastmem(t, d, src, n * 8, i % gn) == 0, "broadcastmem");
        CHECK(shmem_long_sum_reduce(t, red[i & 1], src, n) == 0, "sum_reduce");
        CHECK(shmem_fcollectmem(t, fco[i & 1], src, n * 8) == 0, "fcollectmem");
        CHECK(shmem_collectmem(t, col[i & 1], src, csize(me, i, n) * 8) == 0, "collectmem");
        CHECK(shmem_alltoallmem(t, a2a[i & 1], a2s, n * 8) == 0, "alltoallmem");
        shmem_team_sync(t);
        check_group(i, n, gn, world, my, 1);
        if (world_team)
            shmem_barrier_all();
    }
}

static void run_set(struct aset s, size_t n) {
    int my = member_of(s, me);
    int world[64];
    for (int j = 0; j < s.size; j++)
        world[j] = world_of(s, j);
    for (int i = 0; i < ITERS; i++) {
        fill(i, n, s.size);
        long **p = ps[i & 1];
        shmem_broadcast64(dst[i & 1], src, n, i % s.size, s.start, s.logs, s.size, p[0]);
        shmem_long_sum_to_all(red[i & 1], src, (int)n, s.start, s.logs, s.size, wrk, p[1]);
        shmem_fcollect64(fco[i & 1], src, n, s.start, s.logs, s.size, p[2]);
        shmem_collect64(col[i & 1], src, csize(me, i, n), s.start, s.logs, s.size, p[3]);
        shmem_alltoall64(a2a[i & 1], a2s, n, s.start, s.logs, s.size, p[4]);
        shmem_barrier(s.start, s.logs, s.size, p[5]);
        check_group(i, n, s.size, world, my, 0);
    }
    for (int a = 0; a < 2; a++)
        for (int k = 0; k < 6; k++)
            check_psync(ps[a][k], SHMEM_REDUCE_SYNC_SIZE, "pSync");
}

int main(void) {
    shmem_init();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    ctest_begin();
    CHECK(npes <= 64, "at most 64 PEs");
    src = shmem_malloc(MAXN * 8);
    a2s = shmem_malloc((size_t)npes * MAXN * 8);
    wrk = shmem_malloc((MAXN / 2 + 1 + SHMEM_REDUCE_MIN_WRKDATA_SIZE) * 8);
    for (int a = 0; a < 2; a++) {
        dst[a] = shmem_calloc(MAXN, 8);
        red[a] = shmem_calloc(MAXN, 8);
        col[a] = shmem_calloc((size_t)npes * MAXN, 8);
        fco[a] = shmem_calloc((size_t)npes * MAXN, 8);
        a2a[a] = shmem_calloc((size_t)npes * MAXN, 8);
        for (int k = 0; k < 6; k++) {
            ps[a][k] = shmem_malloc(SHMEM_REDUCE_SYNC_SIZE * 8);
            for (int w = 0; w < SHMEM_REDUCE_SYNC_SIZE; w++)
                ps[a][k][w] = SHMEM_SYNC_VALUE;
        }
    }
    CHECK(src && a2s && wrk && dst[1] && a2a[1] && ps[1][5], "shmem_malloc");
    shmem_team_t odd = SHMEM_TEAM_INVALID;
    if (npes >= 2)
        shmem_team_split_strided(SHMEM_TEAM_WORLD, 1, 2, npes / 2, NULL, 0, &odd);
    static const size_t sizes[] = {1, 128, 1024, 1025, 8000};
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        size_t n = sizes[z];
        shmem_barrier_all();
        run_team(SHMEM_TEAM_WORLD, n, 1);
        struct aset all = {0, 0, npes};
        run_set(all, n);
        shmem_barrier_all();
        if (odd != SHMEM_TEAM_INVALID) {
            run_team(odd, n, 0);
            struct aset odds = {1, 1, npes / 2};
            run_set(odds, n);
        }
        shmem_barrier_all();
    }
    if (odd != SHMEM_TEAM_INVALID)
        shmem_team_destroy(odd);
    ctest_ok(me, npes);
    shmem_finalize();
    return 0;
}
