/*
 * coll_collect.c - collect and fcollect (OpenSHMEM 1.5 §9.9.5, §9.9.6, checklist §2.4):
 *   * the team forms shmem_TYPENAME_collect (nelems differing per PE, some PEs giving 0)
 *     and shmem_TYPENAME_fcollect for all 24 standard RMA types, on SHMEM_TEAM_WORLD and
 *     SHMEM_TEAM_SHARED: every member's dest holds the members' blocks in team order,
 *     nothing past the total is written, the source is unchanged, the return value is 0;
 *   * shmem_collectmem / shmem_fcollectmem with 0 bytes and NULL buffers, odd sizes and
 *     blocks whose total is far above the UDP MTU (61440 bytes);
 *   * the active-set forms shmem_collect32/64 and shmem_fcollect32/64 on full, strided,
 *     single-PE and inner sets, sizes 0 (NULL), 1, odd and large, one collect pSync reused
 *     from call to call with two alternating barrier pSyncs between calls, and on shrinking
 *     sets (the conformance-suite pattern); every pSync word back at SHMEM_SYNC_VALUE when
 *     a call returns.
 * dest is cleared before a synchronization that precedes each call (the specification
 * requires dest to be ready on every PE before any PE calls).  Non-members do not call.
 */
#define CTEST_NAME "coll_collect"
#include "ctest.h"
#include "coll_common.h"

enum { GUARD = 64, MAXPER = 72 * 1024 /* bytes one PE contributes at most */ };

static int me, npes;
static unsigned char *dst_area; /* npes * MAXPER + GUARD bytes */
static unsigned char *src_area; /* MAXPER bytes */
static long *coll_ps;           /* SHMEM_COLLECT_SYNC_SIZE */
static long *bar_ps[2];         /* SHMEM_BARRIER_SYNC_SIZE each */

/* Element i of PE pe's source in round r: 1..100 (fits every type, differs from 0). */
static int val(int pe, int r, size_t i) {
    return (int)((pe * 29 + r * 7 + (int)(i % 997) * 3) % 100) + 1;
}

static unsigned char bval(int pe, int r, size_t i) {
    return (unsigned char)(val(pe, r, i) + (int)(i / 997));
}

/* How many elements member j of n contributes to collect case c of round r (c = 0: 1 + j,
 * c = 1: 0 or 7 alternately, c = 2: 300 - 37 j, at least 1). */
static size_t count_of(int c, int j, int r) {
    switch (c) {
    case 0: return (size_t)(1 + j);
    case 1: return (size_t)(((j + r) % 2) * 7);
    default: return (size_t)(300 - 37 * (j % 8));
    }
}

/* ---- team forms, every type -------------------------------------------------------------- */

#define DEF_TEAM_COLLECT(T, NAME)                                                             \
    static void team_collect_##NAME(shmem_team_t team, const char *tname, int r) {            \
        int tn = shmem_team_n_pes(team), tme = shmem_team_my_pe(team);                        \
        T *dest = (T *)(void *)dst_area, *src = (T *)(void *)src_area;                        \
        for (int c = 0; c < 5; c++) {                                                         \
            int fixed = c >= 3; /* fcollect */                                                \
            size_t total = 0, mine = fixed ? (size_t)(c == 3 ? 1 : 29) : count_of(c, tme, r); \
            for (int j = 0; j < tn; j++)                                                      \
                total += fixed ? mine : count_of(c, j, r);                                    \
            memset(dest, 0, (total + GUARD) * sizeof(T));                                     \
            for (size_t i = 0; i < mine; i++)                                                 \
                src[i] = (T)val(tme, r, i);                                                   \
            CHECK(shmem_team_sync(team) == 0, "team_sync(%s) failed", tname);                 \
            int rc = fixed ? shmem_##NAME##_fcollect(team, dest, src, mine)                   \
                           : shmem_##NAME##_collect(team, dest, src, mine);                   \
            CHECK(rc == 0, "shmem_" #NAME "_%s(%s, case %d) returned %d",                     \
                  fixed ? "fcollect" : "collect", tname, c, rc);                              \
            size_t off = 0;                                                                   \
            for (int j = 0; j < tn; j++) {                                                    \
                size_t nj = fixed ? mine : count_of(c, j, r);                                 \
                for (size_t i = 0; i < nj; i++)                                               \
                    CHECK(dest[off + i] == (T)val(j, r, i),                                   \
                          "shmem_" #NAME "_%s(%s, case %d): element %zu of member %d "        \
                          "(dest[%zu]) is %g, expected %g",                                   \
                          fixed ? "fcollect" : "collect", tname, c, i, j, off + i,            \
                          (double)dest[off + i], (double)(T)val(j, r, i));                    \
                off += nj;                                                                    \
            }                                                                                 \
            for (size_t i = total; i < total + GUARD; i++)                                    \
                CHECK(dest[i] == (T)0, "shmem_" #NAME "_%s(%s, case %d): dest[%zu] past the " \
                      "total %zu written", fixed ? "fcollect" : "collect", tname, c, i, total); \
            for (size_t i = 0; i < mine; i++)                                                 \
                CHECK(src[i] == (T)val(tme, r, i), "shmem_" #NAME "_collect(%s): source "     \
                      "changed at %zu", tname, i);                                            \
            CHECK(shmem_team_sync(team) == 0, "team_sync(%s) failed", tname);                 \
        }                                                                                     \
    }
CTEST_RMA_TYPES(DEF_TEAM_COLLECT)

#define CALL_TEAM_COLLECT(T, NAME) team_collect_##NAME(team, tname, r++);
static void team_collect_all_types(shmem_team_t team, const char *tname) {
    int r = 0;
    CTEST_RMA_TYPES(CALL_TEAM_COLLECT)
}

/* collectmem and fcollectmem: 0 bytes with NULL, odd sizes, totals far above the MTU. */
static void team_mem(shmem_team_t team, const char *tname) {
    int tn = shmem_team_n_pes(team), tme = shmem_team_my_pe(team);
    CHECK(shmem_collectmem(team, NULL, NULL, 0) == 0, "collectmem(%s, NULL, NULL, 0) failed",
          tname);
    CHECK(shmem_fcollectmem(team, NULL, NULL, 0) == 0, "fcollectmem(%s, NULL, NULL, 0) failed",
          tname);
    CHECK(shmem_long_collect(team, NULL, NULL, 0) == 0, "long_collect(%s, NULL, 0) failed",
          tname);
    for (int c = 0; c < 4; c++) {
        int fixed = c % 2, r = 200 + c;
        /* c 0: collect odd sizes; 1: fcollect 4097 B; 2: collect ~70 KiB each; 3: fcollect
         * 64 KiB + 1 each (every single block above the MTU). */
        size_t sizes[64];
        size_t total = 0;
        for (int j = 0; j < tn; j++) {
            size_t s = c == 0 ? (size_t)(13 * j + 1) : c == 1 ? 4097 : c == 2
                                                                  ? (size_t)(70000 + 11 * j)
                                                                  : 65537;
            sizes[j % 64] = s;
            total += s;
        }
        size_t mine = sizes[tme % 64];
        memset(dst_area, 0, total + GUARD);
        for (size_t i = 0; i < mine; i++)
            src_area[i] = bval(tme, r, i);
        CHECK(shmem_team_sync(team) == 0, "team_sync(%s) failed", tname);
        int rc = fixed ? shmem_fcollectmem(team, dst_area, src_area, mine)
                       : shmem_collectmem(team, dst_area, src_area, mine);
        CHECK(rc == 0, "%s(%s, case %d) returned %d", fixed ? "fcollectmem" : "collectmem",
              tname, c, rc);
        size_t off = 0;
        for (int j = 0; j < tn; j++) {
            size_t nj = sizes[j % 64];
            for (size_t i = 0; i < nj; i++)
                CHECK(dst_area[off + i] == bval(j, r, i),
                      "%s(%s, case %d): byte %zu of member %d is %u, expected %u",
                      fixed ? "fcollectmem" : "collectmem", tname, c, i, j, dst_area[off + i],
                      bval(j, r, i));
            off += nj;
        }
        for (size_t i = total; i < total + GUARD; i++)
            CHECK(dst_area[i] == 0, "%s(%s, case %d): byte %zu past the total %zu written",
                  fixed ? "fcollectmem" : "collectmem", tname, c, i, total);
        CHECK(shmem_team_sync(team) == 0, "team_sync(%s) failed", tname);
    }
}

/* ---- active-set forms -------------------------------------------------------------------- */

/* Elements (of `bits`) that ordinal j gives in case c. */
static size_t aset_count(int c, int j, int fixed) {
    static const size_t base[4] = {0, 1, 333, 9000};
    if (fixed)
        return base[c];
    return c == 0 ? (size_t)(j % 2) * 3 : base[c] + (size_t)(5 * j);
}

/* One active-set collect/fcollect of `bits` on s, case c, round r (members only): prepares,
 * barriers (pSync k % 2), calls with the shared collect pSync, checks. */
static void aset_collect(struct aset s, int bits, int fixed, int c, int r, int k) {
    int j = member_of(s, me);
    size_t eb = (size_t)bits / 8, total = 0;
    for (int m = 0; m < s.size; m++)
        total += aset_count(c, m, fixed) * eb;
    size_t mine = aset_count(c, j, fixed);
    char what[160];
    snprintf(what, sizeof what, "%scollect%d(case %d, nelems %zu) on (start %d, logstride %d, "
             "size %d)", fixed ? "f" : "", bits, c, mine, s.start, s.logs, s.size);
    memset(dst_area, 0, total + GUARD);
    for (size_t i = 0; i < mine * eb; i++)
        src_area[i] = bval(me, r, i);
    shmem_barrier(s.start, s.logs, s.size, bar_ps[k % 2]);
    check_psync(bar_ps[k % 2], SHMEM_BARRIER_SYNC_SIZE, "barrier before a collect");
    void *d = total ? (void *)dst_area : NULL;
    const void *src = mine ? (const void *)src_area : NULL;
    if (fixed && bits == 32)
        shmem_fcollect32(d, src, mine, s.start, s.logs, s.size, coll_ps);
    else if (fixed)
        shmem_fcollect64(d, src, mine, s.start, s.logs, s.size, coll_ps);
    else if (bits == 32)
        shmem_collect32(d, src, mine, s.start, s.logs, s.size, coll_ps);
    else
        shmem_collect64(d, src, mine, s.start, s.logs, s.size, coll_ps);
    check_psync(coll_ps, SHMEM_COLLECT_SYNC_SIZE, what);
    size_t off = 0;
    for (int m = 0; m < s.size; m++) {
        size_t nb = aset_count(c, m, fixed) * eb;
        int from = world_of(s, m);
        for (size_t i = 0; i < nb; i++)
            CHECK(dst_area[off + i] == bval(from, r, i),
                  "%s: byte %zu of ordinal %d (PE %d) is %u, expected %u", what, i, m, from,
                  dst_area[off + i], bval(from, r, i));
        off += nb;
    }
    for (size_t i = total; i < total + GUARD; i++)
        CHECK(dst_area[i] == 0, "%s: byte %zu past the total %zu written", what, i, total);
}

static void aset_cases(struct aset s, int *round) {
    if (member_of(s, me) < 0)
        return;
    int k = 0;
    for (int c = 0; c < 4; c++)
        for (int v = 0; v < 4; v++, k++)
            aset_collect(s, v % 2 ? 32 : 64, v / 2, c, (*round)++, k);
    /* nobody reuses the collect pSync before every member has returned */
    shmem_barrier(s.start, s.logs, s.size, bar_ps[k % 2]);
}

/* Shrinking sets: one collect pSync for all, two barrier pSyncs alternating (the barrier of
 * set k + 1 inside aset_collect follows every member's return from the collect of set k). */
static void aset_shrinking(int from_top, int *round) {
    shmem_barrier_all();
    for (int k = 0; k < npes; k++) {
        struct aset s = from_top ? (struct aset){0, 0, npes - k} : (struct aset){k, 0, npes - k};
        if (member_of(s, me) < 0)
            continue;
        aset_collect(s, k % 2 ? 32 : 64, k % 3 == 1, 1 + k % 3, *round + k, k);
    }
    *round += npes;
    shmem_barrier_all();
}

int main(void) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();

    dst_area = (unsigned char *)shmem_malloc((size_t)npes * MAXPER + GUARD);
    src_area = (unsigned char *)shmem_malloc(MAXPER);
    coll_ps = (long *)shmem_malloc(SHMEM_COLLECT_SYNC_SIZE * sizeof(long));
    for (int i = 0; i < 2; i++)
        bar_ps[i] = (long *)shmem_malloc(SHMEM_BARRIER_SYNC_SIZE * sizeof(long));
    CHECK(dst_area && src_area && coll_ps && bar_ps[0] && bar_ps[1], "allocation failed");
    for (int i = 0; i < SHMEM_COLLECT_SYNC_SIZE; i++)
        coll_ps[i] = SHMEM_SYNC_VALUE;
    for (int i = 0; i < SHMEM_BARRIER_SYNC_SIZE; i++)
        bar_ps[0][i] = bar_ps[1][i] = SHMEM_SYNC_VALUE;
    ctest_barrier();

    team_collect_all_types(SHMEM_TEAM_WORLD, "WORLD");
    team_collect_all_types(SHMEM_TEAM_SHARED, "SHARED");
    team_mem(SHMEM_TEAM_WORLD, "WORLD");
    team_mem(SHMEM_TEAM_SHARED, "SHARED");
    shmem_barrier_all();

    /* Zero elements with NULL buffers on the whole set. */
    shmem_collect32(NULL, NULL, 0, 0, 0, npes, coll_ps);
    shmem_barrier_all();
    shmem_fcollect64(NULL, NULL, 0, 0, 0, npes, coll_ps);
    check_psync(coll_ps, SHMEM_COLLECT_SYNC_SIZE, "zero-length collect");
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

    check_psync(coll_ps, SHMEM_COLLECT_SYNC_SIZE, "collect pSync at the end");
    shmem_barrier_all();
    shmem_free(bar_ps[1]);
    shmem_free(bar_ps[0]);
    shmem_free(coll_ps);
    shmem_free(src_area);
    shmem_free(dst_area);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
