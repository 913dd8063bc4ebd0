/*
 * coll_alltoall.c - alltoall and alltoalls (OpenSHMEM 1.5 §9.9.7, §9.9.8, checklist §2.4):
 * block l of member k's source lands in block k of member l's dest; alltoalls strides the
 * elements of the whole (flattened) arrays by sst in the source and dst in the dest:
 *   * the team forms shmem_TYPENAME_alltoall and shmem_TYPENAME_alltoalls for all 24
 *     standard RMA types on SHMEM_TEAM_WORLD and SHMEM_TEAM_SHARED (return value 0, the
 *     gaps between strided destination elements and everything past the extent untouched,
 *     the source unchanged);
 *   * shmem_alltoallmem / shmem_alltoallsmem with 0 bytes and NULL buffers, odd sizes and
 *     blocks above the UDP MTU (61440 bytes);
 *   * the active-set forms shmem_alltoall32/64 and shmem_alltoalls32/64 on full, strided,
 *     single-PE and inner sets and on shrinking sets, one alltoall pSync reused with two
 *     alternating barrier pSyncs between calls; every pSync word back at SHMEM_SYNC_VALUE
 *     when a call returns.
 * dest is cleared before a synchronization that precedes each call.  Non-members do not
 * call.
 */
#define CTEST_NAME "coll_alltoall"
#include "ctest.h"
#include "coll_common.h"

enum { GUARD = 64, BIGBLK = 65 * 1024 + 3 /* bytes: one block above the MTU */ };

static int me, npes;
static unsigned char *dst_area; /* npes * (BIGBLK + 64) + GUARD bytes */
static unsigned char *src_area; /* the same */
static size_t area;
static long *a2a_ps;    /* SHMEM_ALLTOALLS_SYNC_SIZE (>= SHMEM_ALLTOALL_SYNC_SIZE) */
static long *bar_ps[2]; /* SHMEM_BARRIER_SYNC_SIZE each */

/* Element i of the block that `from` sends to `to` in round r: 1..100. */
static int val(int from, int to, int r, size_t i) {
    return (int)((from * 31 + to * 17 + r * 7 + (int)(i % 991) * 3) % 100) + 1;
}

static unsigned char bval(int from, int to, int r, size_t i) {
    return (unsigned char)(val(from, to, r, i) + (int)(i / 991));
}

/* ---- team forms, every type -------------------------------------------------------------- */

/* Cases: {nelems, dst, sst}; dst = sst = 1 uses shmem_TYPENAME_alltoall. */
static const size_t team_cases[5][3] = {{1, 1, 1}, {5, 1, 1}, {3, 2, 3}, {4, 1, 2}, {2, 3, 1}};

#define DEF_TEAM_A2A(T, NAME)                                                                 \
    static void team_a2a_##NAME(shmem_team_t team, const char *tname, int r) {                \
        int tn = shmem_team_n_pes(team), tme = shmem_team_my_pe(team);                        \
        T *dest = (T *)(void *)dst_area, *src = (T *)(void *)src_area;                        \
        for (int c = 0; c < 5; c++) {                                                         \
            size_t ne = team_cases[c][0], ds = team_cases[c][1], ss = team_cases[c][2];       \
            size_t dext = ((size_t)tn * ne - 1) * ds + 1, sext = ((size_t)tn * ne - 1) * ss + 1; \
            memset(dest, 0, (dext + GUARD) * sizeof(T));                                      \
            memset(src, 0, sext * sizeof(T));                                                 \
            for (int l = 0; l < tn; l++)                                                      \
                for (size_t i = 0; i < ne; i++)                                               \
                    src[((size_t)l * ne + i) * ss] = (T)val(tme, l, r, i);                    \
            CHECK(shmem_team_sync(team) == 0, "team_sync(%s) failed", tname);                 \
            int rc = ds == 1 && ss == 1 ? shmem_##NAME##_alltoall(team, dest, src, ne)        \
                                        : shmem_##NAME##_alltoalls(team, dest, src,           \
                                                                   (ptrdiff_t)ds,             \
                                                                   (ptrdiff_t)ss, ne);        \
            CHECK(rc == 0, "shmem_" #NAME "_alltoall[s](%s, case %d) returned %d", tname, c,  \
                  rc);                                                                        \
            for (size_t g = 0; g < dext + GUARD; g++) {                                       \
                T want = (T)0;                                                                \
                if (g < dext && g % ds == 0) {                                                \
                    size_t e = g / ds;                                                        \
                    want = (T)val((int)(e / ne), tme, r, e % ne);                             \
                }                                                                             \
                CHECK(dest[g] == want,                                                        \
                      "shmem_" #NAME "_alltoall%s(%s, nelems %zu, dst %zu, sst %zu): "        \
                      "dest[%zu] is %g, expected %g",                                         \
                      ds == 1 && ss == 1 ? "" : "s", tname, ne, ds, ss, g, (double)dest[g],   \
                      (double)want);                                                          \
            }                                                                                 \
            for (int l = 0; l < tn; l++)                                                      \
                for (size_t i = 0; i < ne; i++)                                               \
                    CHECK(src[((size_t)l * ne + i) * ss] == (T)val(tme, l, r, i),             \
                          "shmem_" #NAME "_alltoall[s](%s): the source changed", tname);      \
            CHECK(shmem_team_sync(team) == 0, "team_sync(%s) failed", tname);                 \
        }                                                                                     \
    }
CTEST_RMA_TYPES(DEF_TEAM_A2A)

#define CALL_TEAM_A2A(T, NAME) team_a2a_##NAME(team, tname, r++);
static void team_a2a_all_types(shmem_team_t team, const char *tname) {
    int r = 0;
    CTEST_RMA_TYPES(CALL_TEAM_A2A)
}

/* Checks dest after a byte exchange of nb-byte blocks with destination stride ds (bytes)
 * from the n members whose world numbers are world[]; mine is this PE's world number. */
static void check_bytes(const char *what, int n, const int *world, int mine, size_t nb,
                        size_t ds, int r) {
    size_t dext = nb ? ((size_t)n * nb - 1) * ds + 1 : 0;
    for (size_t g = 0; g < dext + GUARD; g++) {
        unsigned char want = 0;
        if (g < dext && g % ds == 0) {
            size_t e = g / ds;
            want = bval(world[e / nb], mine, r, e % nb);
        }
        CHECK(dst_area[g] == want, "%s: dest byte %zu is %u, expected %u", what, g, dst_area[g],
              want);
    }
}

/* Fills the source of a byte exchange to the n members (world numbers). */
static void fill_bytes(int n, const int *world, size_t nb, size_t ss, size_t ds, int r) {
    size_t sext = nb ? ((size_t)n * nb - 1) * ss + 1 : 0;
    size_t dext = nb ? ((size_t)n * nb - 1) * ds + 1 : 0;
    memset(src_area, 0, sext);
    memset(dst_area, 0, dext + GUARD);
    for (int l = 0; l < n; l++)
        for (size_t i = 0; i < nb; i++)
            src_area[((size_t)l * nb + i) * ss] = bval(me, world[l], r, i);
}

/* alltoallmem / alltoallsmem: 0 bytes with NULL, odd sizes, blocks above the MTU. */
static void team_mem(shmem_team_t team, const char *tname) {
    int tn = shmem_team_n_pes(team);
    int world[64];
    for (int t = 0; t < tn && t < 64; t++)
        world[t] = shmem_team_translate_pe(team, t, SHMEM_TEAM_WORLD);
    CHECK(shmem_alltoallmem(team, NULL, NULL, 0) == 0, "alltoallmem(%s, NULL, NULL, 0) failed",
          tname);
    CHECK(shmem_alltoallsmem(team, NULL, NULL, 1, 1, 0) == 0,
          "alltoallsmem(%s, NULL, NULL, 1, 1, 0) failed", tname);
    static const size_t cases[5][3] = {{1, 1, 1}, {777, 1, 1}, {BIGBLK, 1, 1}, {100, 3, 2},
                                       {4001, 1, 5}};
    for (int c = 0; c < 5; c++) {
        size_t nb = cases[c][0], ds = cases[c][1], ss = cases[c][2];
        if (((size_t)tn * nb - 1) * (ds > ss ? ds : ss) + 1 + GUARD > area)
            continue;
        int r = 300 + c;
        fill_bytes(tn, world, nb, ss, ds, r);
        CHECK(shmem_team_sync(team) == 0, "team_sync(%s) failed", tname);
        int rc = ds == 1 && ss == 1
                     ? shmem_alltoallmem(team, dst_area, src_area, nb)
                     : shmem_alltoallsmem(team, dst_area, src_area, (ptrdiff_t)ds,
                                          (ptrdiff_t)ss, nb);
        char what[128];
        snprintf(what, sizeof what, "alltoall%smem(%s, %zu bytes, dst %zu, sst %zu)",
                 ds == 1 && ss == 1 ? "" : "s", tname, nb, ds, ss);
        CHECK(rc == 0, "%s returned %d", what, rc);
        check_bytes(what, tn, world, me, nb, ds, r);
        CHECK(shmem_team_sync(team) == 0, "team_sync(%s) failed", tname);
    }
}

/* ---- active-set forms -------------------------------------------------------------------- */

/* One active-set exchange (members only): bits 32/64, nelems, strides in elements (1, 1 =
 * alltoall), round r, barrier pSync k % 2. */
static void aset_a2a(struct aset s, int bits, size_t nelems, size_t ds, size_t ss, int r,
                     int k) {
    int world[64];
    for (int j = 0; j < s.size && j < 64; j++)
        world[j] = s.start + j * (1 << s.logs);
    size_t eb = (size_t)bits / 8;
    char what[160];
    snprintf(what, sizeof what,
             "alltoall%s%d(nelems %zu, dst %zu, sst %zu) on (start %d, logstride %d, size %d)",
             ds == 1 && ss == 1 ? "" : "s", bits, nelems, ds, ss, s.start, s.logs, s.size);
    /* Element-wise strides: fill and check element by element, one byte pattern per
     * element byte (nelems * eb bytes per block, stride ds * eb between elements). */
    size_t sext = nelems ? ((size_t)s.size * nelems - 1) * ss * eb + eb : 0;
    size_t dext = nelems ? ((size_t)s.size * nelems - 1) * ds * eb + eb : 0;
    memset(src_area, 0, sext);
    memset(dst_area, 0, dext + GUARD);
    for (int l = 0; l < s.size; l++)
        for (size_t e = 0; e < nelems; e++)
            for (size_t b = 0; b < eb; b++)
                src_area[((size_t)l * nelems + e) * ss * eb + b] = bval(me, world[l], r,
                                                                        e * eb + b);
    shmem_barrier(s.start, s.logs, s.size, bar_ps[k % 2]);
    void *d = nelems ? (void *)dst_area : NULL;
    const void *src = nelems ? (const void *)src_area : NULL;
    if (ds == 1 && ss == 1) {
        if (bits == 32)
            shmem_alltoall32(d, src, nelems, s.start, s.logs, s.size, a2a_ps);
        else
            shmem_alltoall64(d, src, nelems, s.start, s.logs, s.size, a2a_ps);
    } else if (bits == 32) {
        shmem_alltoalls32(d, src, (ptrdiff_t)ds, (ptrdiff_t)ss, nelems, s.start, s.logs, s.size,
                          a2a_ps);
    } else {
        shmem_alltoalls64(d, src, (ptrdiff_t)ds, (ptrdiff_t)ss, nelems, s.start, s.logs, s.size,
                          a2a_ps);
    }
    check_psync(a2a_ps, SHMEM_ALLTOALLS_SYNC_SIZE, what);
    for (size_t g = 0; g < dext + GUARD; g++) {
        unsigned char want = 0;
        size_t el = g / eb, b = g % eb;
        if (g < dext && el % ds == 0) {
            size_t e = el / ds;
            want = bval(world[e / nelems], me, r, (e % nelems) * eb + b);
        }
        CHECK(dst_area[g] == want, "%s: dest byte %zu is %u, expected %u", what, g, dst_area[g],
              want);
    }
}

static void aset_cases(struct aset s, int *round) {
    if (member_of(s, me) < 0)
        return;
    static const size_t cases[6][3] = {{0, 1, 1}, {1, 1, 1}, {33, 1, 1},
                                       {(BIGBLK / 8) + 1, 1, 1}, {7, 2, 3}, {5, 1, 4}};
    int k = 0;
    for (int c = 0; c < 6; c++)
        for (int bits = 32; bits <= 64; bits += 32, k++) {
            size_t ne = cases[c][0] * (bits == 32 ? 2 : 1);
            size_t st = cases[c][1] > cases[c][2] ? cases[c][1] : cases[c][2];
            size_t need = ne ? ((size_t)s.size * ne - 1) * st * (size_t)bits / 8 + 64 : 0;
            if (need + GUARD > area)
                ne = cases[1][0];
            aset_a2a(s, bits, ne, cases[c][1], cases[c][2], (*round)++, k);
        }
    shmem_barrier(s.start, s.logs, s.size, bar_ps[k % 2]);
}

/* Shrinking sets: one alltoall pSync for all, two barrier pSyncs alternating (the barrier
 * of set k + 1 inside aset_a2a follows every member's return from the call on set k). */
static void aset_shrinking(int from_top, int *round) {
    shmem_barrier_all();
    for (int k = 0; k < npes; k++) {
        struct aset s = from_top ? (struct aset){0, 0, npes - k} : (struct aset){k, 0, npes - k};
        if (member_of(s, me) < 0)
            continue;
        aset_a2a(s, k % 2 ? 32 : 64, (size_t)(3 + k), k % 3 == 2 ? 2 : 1, 1, *round + k, k);
    }
    *round += npes;
    shmem_barrier_all();
}

int main(void) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    CHECK(npes <= 64, "this program handles up to 64 PEs, not %d", npes);

    area = (size_t)npes * (BIGBLK + 64) * 2 + GUARD;
    dst_area = (unsigned char *)shmem_malloc(area);
    src_area = (unsigned char *)shmem_malloc(area * 3);
    a2a_ps = (long *)shmem_malloc(SHMEM_ALLTOALLS_SYNC_SIZE * sizeof(long));
    for (int i = 0; i < 2; i++)
        bar_ps[i] = (long *)shmem_malloc(SHMEM_BARRIER_SYNC_SIZE * sizeof(long));
    CHECK(dst_area && src_area && a2a_ps && bar_ps[0] && bar_ps[1], "allocation failed");
    for (int i = 0; i < SHMEM_ALLTOALLS_SYNC_SIZE; i++)
        a2a_ps[i] = SHMEM_SYNC_VALUE;
    for (int i = 0; i < SHMEM_BARRIER_SYNC_SIZE; i++)
        bar_ps[0][i] = bar_ps[1][i] = SHMEM_SYNC_VALUE;
    ctest_barrier();

    team_a2a_all_types(SHMEM_TEAM_WORLD, "WORLD");
    team_a2a_all_types(SHMEM_TEAM_SHARED, "SHARED");
    team_mem(SHMEM_TEAM_WORLD, "WORLD");
    team_mem(SHMEM_TEAM_SHARED, "SHARED");
    shmem_barrier_all();

    int round = 1000;
    struct aset sets[5];
    int nsets = coll_basic_sets(sets, npes);
    if (npes >= 4)
        sets[nsets++] = (struct aset){1, 0, npes - 2};
    for (int i = 0; i < nsets; i++) {
        /* rounds advance only on members: every set starts from the same number */
        round = 1000 + 200 * i;
        aset_cases(sets[i], &round);
        shmem_barrier_all();
    }
    round = 3000;
    aset_shrinking(0, &round);
    aset_shrinking(1, &round);

    check_psync(a2a_ps, SHMEM_ALLTOALLS_SYNC_SIZE, "alltoall pSync at the end");
    shmem_barrier_all();
    shmem_free(bar_ps[1]);
    shmem_free(bar_ps[0]);
    shmem_free(a2a_ps);
    shmem_free(src_area);
    shmem_free(dst_area);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
