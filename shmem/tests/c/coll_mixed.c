/*
 * coll_mixed.c - team-based and active-set collectives side by side, and the C11 generic
 * interfaces of the collectives (OpenSHMEM 1.5 §9.9, checklist §2.4, §3):
 *   * for each pair (team, active set) with the same members - WORLD and (0, 0, N), the
 *     even PEs split_strided(WORLD, 0, 2) and (0, 1, ceil(N/2)), the odd PEs and (1, 1,
 *     N/2) - broadcast, collect, fcollect, alltoall, alltoalls, sum/max/xor reductions and
 *     sync/barrier run in both forms on the same data, one after the other: the results
 *     agree with each other and with the expected values, except that the team broadcast
 *     writes the root's dest and the active-set broadcast does not;
 *   * the generic names shmem_broadcast, shmem_collect, shmem_fcollect, shmem_alltoall,
 *     shmem_alltoalls, shmem_{and,or,xor,max,min,sum,prod}_reduce and shmem_sync(team) on
 *     WORLD and on a split team, with element types of different sizes (a wrong dispatch
 *     moves the wrong number of bytes and is seen), including long double and double
 *     _Complex.
 * Compiled with -std=c11.  Non-members do not call.
 */
#define CTEST_NAME "coll_mixed"
#include "ctest.h"
#include <complex.h>

#if !defined(__STDC_VERSION__) || __STDC_VERSION__ < 201112L
#error "coll_mixed.c must be compiled as C11 or later"
#endif

enum { NE = 5, GUARD = 8 };

static int me, npes;
static uint64_t *src, *tdst, *adst; /* 64 * NE * 3 elements each */
static long *lsrc, *ltd, *lad;      /* reductions: NE + GUARD */
static long *ps_a, *ps_b;           /* pSyncs, SHMEM_SYNC_SIZE each */
static long *bps[2];                /* barrier pSyncs */
static long *wrk;                   /* pWrk for long reductions */
static int bar_k;

static void fresh(uint64_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = 0;
}

static uint64_t v(int from, int to, size_t i) {
    return (uint64_t)from * 1000003u + (uint64_t)to * 1009u + i * 7u + 1u;
}

struct pair {
    shmem_team_t team;
    int start, logs, size;
    int world[64];
    const char *name;
};

/* Synchronizes the pair's members between steps (the active-set barrier, alternating
 * pSyncs, and a team_sync): dest buffers are ready everywhere before the next call. */
static void step_sync(const struct pair *p) {
    shmem_barrier(p->start, p->logs, p->size, bps[bar_k++ % 2]);
    CHECK(shmem_sync(p->team) == 0, "%s: shmem_sync(team) failed", p->name);
}

static void compare(const struct pair *p, const char *what, size_t n, int root_skip) {
    for (size_t i = 0; i < n; i++) {
        if (root_skip)
            CHECK(adst[i] == 0, "%s %s: the active-set form wrote the root's dest[%zu]", p->name,
                  what, i);
        else
            CHECK(tdst[i] == adst[i],
                  "%s %s: team form gave %llu at %zu, active-set form %llu", p->name, what,
                  (unsigned long long)tdst[i], i, (unsigned long long)adst[i]);
    }
}

static void side_by_side(const struct pair *p) {
    int j = -1, n = p->size;
    for (int k = 0; k < n; k++)
        if (p->world[k] == me)
            j = k;
    if (j < 0)
        return;
    CHECK(shmem_team_my_pe(p->team) == j, "%s: team_my_pe %d, active-set ordinal %d", p->name,
          shmem_team_my_pe(p->team), j);
    size_t cap = (size_t)n * NE * 3 + GUARD;

    /* broadcast, every root */
    for (int root = 0; root < n; root++) {
        fresh(tdst, cap);
        fresh(adst, cap);
        for (size_t i = 0; i < NE; i++)
            src[i] = v(me, root, i);
        step_sync(p);
        CHECK(shmem_broadcast(p->team, tdst, src, NE, root) == 0, "%s: broadcast failed",
              p->name);
        shmem_broadcast64(adst, src, NE, root, p->start, p->logs, p->size, ps_a);
        for (size_t i = 0; i < NE; i++)
            CHECK(tdst[i] == v(p->world[root], root, i),
                  "%s broadcast root %d: team dest[%zu] is %llu, expected %llu", p->name, root,
                  i, (unsigned long long)tdst[i], (unsigned long long)v(p->world[root], root, i));
        compare(p, "broadcast", NE + GUARD, j == root);
    }

    /* collect: member k gives k % 3 + 1 elements */
    size_t total = 0, off = 0;
    for (int k = 0; k < n; k++)
        total += (size_t)(k % 3 + 1);
    fresh(tdst, cap);
    fresh(adst, cap);
    for (size_t i = 0; i < 3; i++)
        src[i] = v(me, 0, i);
    step_sync(p);
    CHECK(shmem_collect(p->team, tdst, src, (size_t)(j % 3 + 1)) == 0, "%s: collect failed",
          p->name);
    shmem_collect64(adst, src, (size_t)(j % 3 + 1), p->start, p->logs, p->size, ps_b);
    for (int k = 0; k < n; k++)
        for (size_t i = 0; i < (size_t)(k % 3 + 1); i++, off++)
            CHECK(tdst[off] == v(p->world[k], 0, i), "%s collect: element %zu is %llu", p->name,
                  off, (unsigned long long)tdst[off]);
    compare(p, "collect", total + GUARD, 0);

    /* fcollect */
    fresh(tdst, cap);
    fresh(adst, cap);
    for (size_t i = 0; i < NE; i++)
        src[i] = v(me, 1, i);
    step_sync(p);
    CHECK(shmem_fcollect(p->team, tdst, src, NE) == 0, "%s: fcollect failed", p->name);
    shmem_fcollect64(adst, src, NE, p->start, p->logs, p->size, ps_a);
    for (int k = 0; k < n; k++)
        for (size_t i = 0; i < NE; i++)
            CHECK(tdst[(size_t)k * NE + i] == v(p->world[k], 1, i),
                  "%s fcollect: block %d element %zu is %llu", p->name, k, i,
                  (unsigned long long)tdst[(size_t)k * NE + i]);
    compare(p, "fcollect", (size_t)n * NE + GUARD, 0);

    /* alltoall and alltoalls (dst 2, sst 3) */
    for (int s = 0; s < 2; s++) {
        size_t ds = s ? 2 : 1, ss = s ? 3 : 1;
        fresh(tdst, cap);
        fresh(adst, cap);
        fresh(src, cap);
        for (int l = 0; l < n; l++)
            for (size_t i = 0; i < 2; i++)
                src[((size_t)l * 2 + i) * ss] = v(me, p->world[l], i);
        step_sync(p);
        if (s) {
            CHECK(shmem_alltoalls(p->team, tdst, src, 2, 3, 2) == 0, "%s: alltoalls failed",
                  p->name);
            shmem_alltoalls64(adst, src, 2, 3, 2, p->start, p->logs, p->size, ps_b);
        } else {
            CHECK(shmem_alltoall(p->team, tdst, src, 2) == 0, "%s: alltoall failed", p->name);
            shmem_alltoall64(adst, src, 2, p->start, p->logs, p->size, ps_b);
        }
        for (int k = 0; k < n; k++)
            for (size_t i = 0; i < 2; i++) {
                size_t at = ((size_t)k * 2 + i) * ds;
                CHECK(tdst[at] == v(p->world[k], me, i),
                      "%s alltoall%s: block %d element %zu is %llu, expected %llu", p->name,
                      s ? "s" : "", k, i, (unsigned long long)tdst[at],
                      (unsigned long long)v(p->world[k], me, i));
            }
        compare(p, s ? "alltoalls" : "alltoall", ((size_t)n * 2 - 1) * ds + 1 + GUARD, 0);
    }

    /* reductions: sum, max, xor of long */
    for (int op = 0; op < 3; op++) {
        for (int i = 0; i < NE + GUARD; i++)
            ltd[i] = lad[i] = 0;
        for (int i = 0; i < NE; i++)
            lsrc[i] = (long)(me * 3 + i) % 17 + 1;
        step_sync(p);
        long *ps = op % 2 ? ps_a : ps_b;
        if (op == 0) {
            CHECK(shmem_sum_reduce(p->team, ltd, lsrc, NE) == 0, "%s: sum_reduce", p->name);
            shmem_long_sum_to_all(lad, lsrc, NE, p->start, p->logs, p->size, wrk, ps);
        } else if (op == 1) {
            CHECK(shmem_max_reduce(p->team, ltd, lsrc, NE) == 0, "%s: max_reduce", p->name);
            shmem_long_max_to_all(lad, lsrc, NE, p->start, p->logs, p->size, wrk, ps);
        } else {
            int64_t *t64 = (int64_t *)(void *)ltd;
            const int64_t *s64 = (const int64_t *)(const void *)lsrc;
            CHECK(shmem_xor_reduce(p->team, t64, s64, NE) == 0, "%s: xor_reduce", p->name);
            shmem_long_xor_to_all(lad, lsrc, NE, p->start, p->logs, p->size, wrk, ps);
        }
        for (int i = 0; i < NE; i++) {
            long want = 0;
            for (int k = 0; k < n; k++) {
                long x = (long)(p->world[k] * 3 + i) % 17 + 1;
                want = op == 0 ? want + x : op == 1 ? (x > want ? x : want) : (want ^ x);
            }
            CHECK(ltd[i] == want && lad[i] == want,
                  "%s reduction %d element %d: team %ld, active set %ld, expected %ld", p->name,
                  op, i, ltd[i], lad[i], want);
        }
        for (int i = NE; i < NE + GUARD; i++)
            CHECK(ltd[i] == 0 && lad[i] == 0, "%s reduction %d wrote past nreduce", p->name, op);
    }
    step_sync(p);
}

/* The generic names with element types of several sizes, on team t (members only). */
static void generics(shmem_team_t t, const char *name) {
    int tn = shmem_team_n_pes(t), tme = shmem_team_my_pe(t);
    if (tme < 0)
        return;
    int world[64];
    for (int k = 0; k < tn; k++)
        world[k] = shmem_team_translate_pe(t, k, SHMEM_TEAM_WORLD);
    void *s = src, *d = tdst;

    /* broadcast: short, long double */
    short *sd = d, *ss = s;
    for (int i = 0; i < 8; i++)
        sd[i] = 0, ss[i] = (short)(me * 10 + i);
    shmem_sync(t);
    CHECK(shmem_broadcast(t, sd, ss, 3, tn - 1) == 0, "%s: generic broadcast(short)", name);
    for (int i = 0; i < 8; i++)
        CHECK(sd[i] == (i < 3 ? (short)(world[tn - 1] * 10 + i) : 0),
              "%s: generic broadcast(short) element %d is %d", name, i, sd[i]);
    long double *ld = d, *ls = s;
    for (int i = 0; i < 4; i++)
        ld[i] = 0, ls[i] = (long double)me + 0.5L * i;
    shmem_sync(t);
    CHECK(shmem_broadcast(t, ld, ls, 2, 0) == 0, "%s: generic broadcast(long double)", name);
    CHECK(ld[0] == (long double)world[0] && ld[1] == (long double)world[0] + 0.5L && ld[2] == 0,
          "%s: generic broadcast(long double) gave %Lg %Lg %Lg", name, ld[0], ld[1], ld[2]);

    /* collect (char, my team number + 1 elements), fcollect (float) */
    char *cd = d, *cs = s;
    memset(cd, 0, 64 * 64);
    for (int i = 0; i <= tme; i++)
        cs[i] = (char)('a' + tme);
    shmem_sync(t);
    CHECK(shmem_collect(t, cd, cs, (size_t)tme + 1) == 0, "%s: generic collect(char)", name);
    size_t off = 0;
    for (int k = 0; k < tn; k++)
        for (int i = 0; i <= k; i++, off++)
            CHECK(cd[off] == (char)('a' + k), "%s: generic collect(char) byte %zu is %d", name,
                  off, cd[off]);
    CHECK(cd[off] == 0, "%s: generic collect(char) wrote past the total", name);
    float *fd = d, *fs = s;
    for (int i = 0; i < 2 * tn + 2; i++)
        fd[i] = 0;
    fs[0] = (float)me;
    fs[1] = (float)me + 0.25f;
    shmem_sync(t);
    CHECK(shmem_fcollect(t, fd, fs, 2) == 0, "%s: generic fcollect(float)", name);
    for (int k = 0; k < tn; k++)
        CHECK(fd[2 * k] == (float)world[k] && fd[2 * k + 1] == (float)world[k] + 0.25f,
              "%s: generic fcollect(float) block %d is %g %g", name, k, fd[2 * k], fd[2 * k + 1]);
    CHECK(fd[2 * tn] == 0, "%s: generic fcollect(float) wrote past the total", name);

    /* alltoall (int16_t), alltoalls (double, dst 2, sst 1) */
    int16_t *hd = d, *hs = s;
    for (int l = 0; l < tn; l++)
        hd[l] = 0, hs[l] = (int16_t)(me * 100 + world[l]);
    hd[tn] = 0;
    shmem_sync(t);
    CHECK(shmem_alltoall(t, hd, hs, 1) == 0, "%s: generic alltoall(int16_t)", name);
    for (int k = 0; k < tn; k++)
        CHECK(hd[k] == (int16_t)(world[k] * 100 + me), "%s: generic alltoall(int16_t) block %d "
              "is %d", name, k, hd[k]);
    CHECK(hd[tn] == 0, "%s: generic alltoall wrote past the blocks", name);
    shmem_sync(t);
    double *dd = d, *ds = s;
    for (int l = 0; l < 2 * tn + 2; l++)
        dd[l] = -1.0;
    for (int l = 0; l < tn; l++)
        ds[l] = me + world[l] / 64.0;
    shmem_sync(t);
    CHECK(shmem_alltoalls(t, dd, ds, 2, 1, 1) == 0, "%s: generic alltoalls(double)", name);
    for (int k = 0; k < tn; k++)
        CHECK(dd[2 * k] == world[k] + me / 64.0 && dd[2 * k + 1] == -1.0,
              "%s: generic alltoalls(double) block %d is %g (gap %g)", name, k, dd[2 * k],
              dd[2 * k + 1]);

    /* reductions through the generic names */
    shmem_sync(t);
    uint8_t *u8 = s, *u8d = d;
    u8[0] = (uint8_t)(1u << (me % 8));
    CHECK(shmem_or_reduce(t, u8d, u8, 1) == 0, "%s: generic or_reduce(uint8_t)", name);
    uint8_t orw = 0;
    for (int k = 0; k < tn; k++)
        orw |= (uint8_t)(1u << (world[k] % 8));
    CHECK(u8d[0] == orw, "%s: generic or_reduce(uint8_t) gave %u, expected %u", name, u8d[0],
          orw);
    unsigned *ud = d, *us = s;
    us[0] = ~(1u << (me % 32));
    CHECK(shmem_and_reduce(t, ud, us, 1) == 0, "%s: generic and_reduce(unsigned)", name);
    unsigned andw = ~0u;
    for (int k = 0; k < tn; k++)
        andw &= ~(1u << (world[k] % 32));
    CHECK(ud[0] == andw, "%s: generic and_reduce(unsigned) gave %#x, expected %#x", name,
          ud[0], andw);
    int64_t *xd = d, *xs = s;
    xs[0] = (int64_t)me * 0x10001 - 5;
    CHECK(shmem_xor_reduce(t, xd, xs, 1) == 0, "%s: generic xor_reduce(int64_t)", name);
    int64_t xw = 0;
    for (int k = 0; k < tn; k++)
        xw ^= (int64_t)world[k] * 0x10001 - 5;
    CHECK(xd[0] == xw, "%s: generic xor_reduce(int64_t)", name);
    long double *lmax = d, *lsrc2 = s;
    lsrc2[0] = -(long double)me - 0.5L;
    CHECK(shmem_max_reduce(t, lmax, lsrc2, 1) == 0, "%s: generic max_reduce(long double)", name);
    CHECK(lmax[0] == -(long double)world[0] - 0.5L, "%s: generic max_reduce(long double) %Lg",
          name, lmax[0]);
    signed char *scd = d, *scs = s;
    scs[0] = (signed char)(me - 3);
    CHECK(shmem_min_reduce(t, scd, scs, 1) == 0, "%s: generic min_reduce(signed char)", name);
    CHECK(scd[0] == (signed char)(world[0] - 3), "%s: generic min_reduce(signed char) %d", name,
          scd[0]);
    int *pd = d, *pss = s;
    pss[0] = me % 4 == 1 ? 2 : 1;
    pss[1] = -1;
    CHECK(shmem_prod_reduce(t, pd, pss, 2) == 0, "%s: generic prod_reduce(int)", name);
    int pw = 1, sign = 1;
    for (int k = 0; k < tn; k++) {
        pw *= world[k] % 4 == 1 ? 2 : 1;
        sign = -sign;
    }
    CHECK(pd[0] == pw && pd[1] == sign, "%s: generic prod_reduce(int) gave %d %d, expected "
          "%d %d", name, pd[0], pd[1], pw, sign);
    double _Complex *zd = d, *zs = s;
    zs[0] = (double)me + 1.0 * I;
    CHECK(shmem_sum_reduce(t, zd, zs, 1) == 0, "%s: generic sum_reduce(double _Complex)", name);
    double re = 0;
    for (int k = 0; k < tn; k++)
        re += world[k];
    CHECK(creal(zd[0]) == re && cimag(zd[0]) == (double)tn,
          "%s: generic sum_reduce(double _Complex) gave %g%+gi, expected %g%+di", name,
          creal(zd[0]), cimag(zd[0]), re, tn);
    CHECK(shmem_sync(t) == 0, "%s: generic shmem_sync(team)", name);
}

int main(void) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    CHECK(npes <= 64, "this program handles up to 64 PEs, not %d", npes);
    size_t cap = 64 * NE * 3 + GUARD;
    src = (uint64_t *)shmem_calloc(cap, sizeof(uint64_t));
    tdst = (uint64_t *)shmem_calloc(cap, sizeof(uint64_t));
    adst = (uint64_t *)shmem_calloc(cap, sizeof(uint64_t));
    lsrc = (long *)shmem_calloc(NE + GUARD, sizeof(long));
    ltd = (long *)shmem_calloc(NE + GUARD, sizeof(long));
    lad = (long *)shmem_calloc(NE + GUARD, sizeof(long));
    wrk = (long *)shmem_calloc(NE + SHMEM_REDUCE_MIN_WRKDATA_SIZE, sizeof(long));
    ps_a = (long *)shmem_calloc(SHMEM_SYNC_SIZE, sizeof(long));
    ps_b = (long *)shmem_calloc(SHMEM_SYNC_SIZE, sizeof(long));
    bps[0] = (long *)shmem_calloc(SHMEM_BARRIER_SYNC_SIZE, sizeof(long));
    bps[1] = (long *)shmem_calloc(SHMEM_BARRIER_SYNC_SIZE, sizeof(long));
    CHECK(src && tdst && adst && lsrc && ltd && lad && wrk && ps_a && ps_b && bps[0] && bps[1],
          "allocation failed");
    CHECK(SHMEM_SYNC_VALUE == 0, "calloc'ed pSyncs need SHMEM_SYNC_VALUE 0");

    struct pair pairs[3];
    int np = 0;
    pairs[np] = (struct pair){SHMEM_TEAM_WORLD, 0, 0, npes, {0}, "WORLD vs (0, 0, N)"};
    np++;
    shmem_team_t even = SHMEM_TEAM_INVALID, odd = SHMEM_TEAM_INVALID;
    CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 2, (npes + 1) / 2, NULL, 0, &even) == 0,
          "split_strided(0, 2) failed");
    pairs[np] = (struct pair){even, 0, 1, (npes + 1) / 2, {0}, "even team vs (0, 1, N/2)"};
    np++;
    if (npes >= 2) {
        CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, 1, 2, npes / 2, NULL, 0, &odd) == 0,
              "split_strided(1, 2) failed");
        pairs[np] = (struct pair){odd, 1, 1, npes / 2, {0}, "odd team vs (1, 1, N/2)"};
        np++;
    }
    for (int i = 0; i < np; i++)
        for (int k = 0; k < pairs[i].size; k++)
            pairs[i].world[k] = pairs[i].start + k * (1 << pairs[i].logs);

    /* The even and odd pairs run at the same time on disjoint PEs. */
    side_by_side(&pairs[0]);
    shmem_barrier_all();
    bar_k = 0;
    for (int i = 1; i < np; i++)
        side_by_side(&pairs[i]);
    shmem_barrier_all();
    bar_k = 0;

    generics(SHMEM_TEAM_WORLD, "WORLD");
    generics(even, "even team");
    if (odd != SHMEM_TEAM_INVALID)
        generics(odd, "odd team");
    shmem_barrier_all();

    shmem_team_destroy(odd);
    shmem_team_destroy(even);
    for (int i = 0; i < 2; i++)
        shmem_free(bps[i]);
    shmem_free(ps_b);
    shmem_free(ps_a);
    shmem_free(wrk);
    shmem_free(lad);
    shmem_free(ltd);
    shmem_free(lsrc);
    shmem_free(adst);
    shmem_free(tdst);
    shmem_free(src);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
