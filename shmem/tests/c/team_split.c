/*
 * team_split.c - team management (OpenSHMEM 1.5 §9.4, checklist §2.5):
 *   * the predefined teams: my_pe/n_pes of SHMEM_TEAM_WORLD, of SHMEM_TEAM_INVALID (-1),
 *     get_config; SHMEM_TEAM_SHARED holds exactly the PEs for which shmem_ptr of a heap
 *     object is non-NULL (and, when the launcher says which node every PE is on, the PEs
 *     of this PE's node);
 *   * shmem_team_split_strided with several (start, stride, size): full, even, odd, a
 *     negative stride, size 1 (stride 0 and 1), the last PE; members numbered in stride
 *     order, non-members get SHMEM_TEAM_INVALID and 0;
 *   * shmem_team_split_2d with xrange 1, 2, 3 and > N (clamped), the x-team with a
 *     num_contexts configuration (get_config reports it, the y-team reports the default 0);
 *   * nested splits (a split of a split, and a 2-D split of a split);
 *   * shmem_team_translate_pe between WORLD, SHARED and the splits in both directions (-1
 *     when absent, for an out-of-range PE and for SHMEM_TEAM_INVALID);
 *   * collectives on every split team: team_sync, broadcast from every root (the root's
 *     dest written), sum and max reductions, fcollect of the members' world numbers;
 *   * team contexts: shmem_team_create_ctx, ctx_get_team, RMA and AMO through the context
 *     with team-relative PE numbers, shmem_team_destroy of a team with live contexts.
 * Non-members of a team do not call its collectives.
 */
#define CTEST_NAME "team_split"
#include "ctest.h"

static int me, npes;
static long *bsrc, *bdst; /* broadcast buffers (1 element + guard) */
static int *fdst;         /* fcollect result: npes ints + guard */
static long *slot;        /* context puts: [2] */
static long *counter;     /* context AMOs */
static int *nodes;        /* GSAS_NODE of every PE, or -1 */

/* Checks a team against the expected members (world numbers, in team order); members
 * only (non-members check SHMEM_TEAM_INVALID with check_not_member). */
static void check_team(shmem_team_t t, const int *members, int n, const char *label) {
    int idx = -1;
    for (int i = 0; i < n; i++)
        if (members[i] == me)
            idx = i;
    if (idx < 0) {
        CHECK(t == SHMEM_TEAM_INVALID, "%s: a non-member got a team handle", label);
        return;
    }
    CHECK(t != SHMEM_TEAM_INVALID, "%s: member PE got SHMEM_TEAM_INVALID", label);
    CHECK(shmem_team_my_pe(t) == idx, "%s: team_my_pe is %d, expected %d", label,
          shmem_team_my_pe(t), idx);
    CHECK(shmem_team_n_pes(t) == n, "%s: team_n_pes is %d, expected %d", label,
          shmem_team_n_pes(t), n);
    for (int i = 0; i < n; i++) {
        int w = shmem_team_translate_pe(t, i, SHMEM_TEAM_WORLD);
        CHECK(w == members[i], "%s: translate_pe(team %d -> WORLD) is %d, expected %d", label,
              i, w, members[i]);
    }
    for (int pe = 0; pe < npes; pe++) {
        int want = -1;
        for (int i = 0; i < n; i++)
            if (members[i] == pe)
                want = i;
        int got = shmem_team_translate_pe(SHMEM_TEAM_WORLD, pe, t);
        CHECK(got == want, "%s: translate_pe(WORLD %d -> team) is %d, expected %d", label, pe,
              got, want);
    }
    CHECK(shmem_team_translate_pe(t, n, SHMEM_TEAM_WORLD) == -1,
          "%s: translate_pe of team PE %d (out of range) is not -1", label, n);
    CHECK(shmem_team_translate_pe(t, -1, SHMEM_TEAM_WORLD) == -1,
          "%s: translate_pe of team PE -1 is not -1", label);
    CHECK(shmem_team_translate_pe(t, 0, SHMEM_TEAM_INVALID) == -1,
          "%s: translate_pe to SHMEM_TEAM_INVALID is not -1", label);
    /* team -> SHARED: the world PE's SHARED number, or -1 */
    for (int i = 0; i < n; i++) {
        int via = shmem_team_translate_pe(SHMEM_TEAM_WORLD, members[i], SHMEM_TEAM_SHARED);
        int got = shmem_team_translate_pe(t, i, SHMEM_TEAM_SHARED);
        CHECK(got == via, "%s: translate_pe(team %d -> SHARED) is %d, expected %d", label, i,
              got, via);
    }
}

/* Collectives on team t with members (world numbers) in team order; members only. */
static void team_collectives(shmem_team_t t, const int *members, int n, const char *label) {
    int tme = shmem_team_my_pe(t);
    CHECK(shmem_team_sync(t) == 0, "%s: team_sync failed", label);
    for (int root = 0; root < n; root++) {
        bsrc[0] = 1000L * root + me + 7;
        bdst[0] = -1;
        bdst[1] = -2;
        CHECK(shmem_team_sync(t) == 0, "%s: team_sync failed", label);
        CHECK(shmem_long_broadcast(t, bdst, bsrc, 1, root) == 0, "%s: broadcast failed", label);
        long want = 1000L * root + members[root] + 7;
        CHECK(bdst[0] == want, "%s: broadcast from root %d gave %ld, expected %ld (team PE %d)",
              label, root, bdst[0], want, tme);
        CHECK(bdst[1] == -2, "%s: broadcast wrote past its one element", label);
    }
    CHECK(shmem_team_sync(t) == 0, "%s: team_sync failed", label);
    long sum = 0, mx = 0;
    bsrc[0] = me + 1;
    CHECK(shmem_team_sync(t) == 0, "%s: team_sync failed", label);
    CHECK(shmem_long_sum_reduce(t, bdst, bsrc, 1) == 0, "%s: sum_reduce failed", label);
    for (int i = 0; i < n; i++)
        sum += members[i] + 1;
    CHECK(bdst[0] == sum, "%s: sum_reduce gave %ld, expected %ld", label, bdst[0], sum);
    CHECK(shmem_long_max_reduce(t, bdst, bsrc, 1) == 0, "%s: max_reduce failed", label);
    for (int i = 0; i < n; i++)
        mx = members[i] + 1 > mx ? members[i] + 1 : mx;
    CHECK(bdst[0] == mx, "%s: max_reduce gave %ld, expected %ld", label, bdst[0], mx);
    for (int i = 0; i <= npes; i++)
        fdst[i] = -1;
    int *me_sym = (int *)(void *)&bsrc[1];
    *me_sym = me;
    CHECK(shmem_team_sync(t) == 0, "%s: team_sync failed", label);
    CHECK(shmem_int_fcollect(t, fdst, me_sym, 1) == 0, "%s: fcollect failed", label);
    for (int i = 0; i < n; i++)
        CHECK(fdst[i] == members[i], "%s: fcollect element %d is %d, expected PE %d", label, i,
              fdst[i], members[i]);
    CHECK(fdst[n] == -1, "%s: fcollect wrote past %d elements", label, n);
    CHECK(shmem_team_sync(t) == 0, "%s: team_sync failed", label);
}

/* Team contexts: puts to the next team PE and adds to team PE 0 through a context of t,
 * with team-relative numbers.  Members only. */
static void team_ctx_ops(shmem_team_t t, const int *members, int n, const char *label) {
    int tme = shmem_team_my_pe(t);
    shmem_ctx_t ctx;
    CHECK(shmem_team_create_ctx(t, 0, &ctx) == 0, "%s: team_create_ctx failed", label);
    shmem_team_t back = SHMEM_TEAM_INVALID;
    CHECK(shmem_ctx_get_team(ctx, &back) == 0 && back == t,
          "%s: ctx_get_team does not give the team back", label);
    slot[0] = -1;
    *counter = 0;
    CHECK(shmem_team_sync(t) == 0, "%s: team_sync failed", label);
    int next = (tme + 1) % n, prev = (tme + n - 1) % n;
    shmem_ctx_long_p(ctx, &slot[0], 500L + me, next);
    shmem_ctx_long_atomic_add(ctx, counter, me + 1, 0);
    shmem_ctx_quiet(ctx);
    CHECK(shmem_team_sync(t) == 0, "%s: team_sync failed", label);
    long total = 0;
    for (int i = 0; i < n; i++)
        total += members[i] + 1;
    long f = shmem_ctx_long_atomic_fetch(ctx, counter, 0);
    CHECK(f == total, "%s: ctx fetch of team PE 0's counter gave %ld, expected %ld", label, f,
          total);
    CHECK(slot[0] == 500L + members[prev],
          "%s: the ctx put from team PE %d (world %d) gave %ld, expected %ld", label, prev,
          members[prev], slot[0], 500L + members[prev]);
    if (tme == 0)
        CHECK(*counter == total, "%s: ctx adds to team PE 0 gave %ld, expected %ld", label,
              *counter, total);
    long g = shmem_ctx_long_g(ctx, &slot[0], next);
    CHECK(g == 500L + me, "%s: ctx get from team PE %d gave %ld, expected %ld", label, next, g,
          500L + me);
    CHECK(shmem_team_sync(t) == 0, "%s: team_sync failed", label);
    shmem_ctx_destroy(ctx);
}

/* A strided split of WORLD and its checks; returns after destroying the team. */
static void strided(int start, int stride, int size, int with_ctx) {
    char label[96];
    snprintf(label, sizeof label, "split_strided(WORLD, %d, %d, %d)", start, stride, size);
    int members[64] = {0};
    for (int i = 0; i < size; i++)
        members[i] = start + i * stride;
    shmem_team_config_t cfg = {.num_contexts = 3};
    shmem_team_t t = SHMEM_TEAM_INVALID;
    int rc = shmem_team_split_strided(SHMEM_TEAM_WORLD, start, stride, size, &cfg,
                                      with_ctx ? SHMEM_TEAM_NUM_CONTEXTS : 0, &t);
    CHECK(rc == 0, "%s returned %d", label, rc);
    check_team(t, members, size, label);
    if (t != SHMEM_TEAM_INVALID) {
        shmem_team_config_t got = {.num_contexts = -7};
        CHECK(shmem_team_get_config(t, SHMEM_TEAM_NUM_CONTEXTS, &got) == 0,
              "%s: get_config failed", label);
        CHECK(got.num_contexts == (with_ctx ? 3 : 0), "%s: num_contexts is %d, expected %d",
              label, got.num_contexts, with_ctx ? 3 : 0);
        team_collectives(t, members, size, label);
        if (with_ctx)
            team_ctx_ops(t, members, size, label);
        shmem_team_destroy(t);
    } else {
        CHECK(shmem_team_my_pe(t) == -1 && shmem_team_n_pes(t) == -1,
              "%s: my_pe/n_pes of the INVALID handle are not -1", label);
    }
    shmem_barrier_all();
}

/* split_2d of parent (members pm[0..pn) in world numbers) with xrange; the x-team gets
 * num_contexts 2 and a context that stays alive across shmem_team_destroy. */
static void two_d(shmem_team_t parent, const int *pm, int pn, int xrange, const char *pname) {
    char lx[96], ly[96];
    snprintf(lx, sizeof lx, "split_2d(%s, xrange %d) x-team", pname, xrange);
    snprintf(ly, sizeof ly, "split_2d(%s, xrange %d) y-team", pname, xrange);
    int pme = shmem_team_my_pe(parent);
    int xr = xrange > pn ? pn : xrange;
    int yr = (pn + xr - 1) / xr;
    shmem_team_config_t xc = {.num_contexts = 2}, yc = {.num_contexts = 5};
    shmem_team_t xt = SHMEM_TEAM_INVALID, yt = SHMEM_TEAM_INVALID;
    int rc = shmem_team_split_2d(parent, xrange, &xc, SHMEM_TEAM_NUM_CONTEXTS, &xt, &yc, 0, &yt);
    CHECK(rc == 0, "split_2d(%s, %d) returned %d", pname, xrange, rc);
    int x = pme % xr, y = pme / xr;
    int xm[64] = {0}, xn = 0, ym[64] = {0}, yn = 0;
    for (int p = 0; p < pn; p++) {
        if (p / xr == y)
            xm[xn++] = pm[p];
        if (p % xr == x)
            ym[yn++] = pm[p];
    }
    CHECK(xn >= 1 && xn <= xr && yn >= 1 && yn <= yr, "%s: bad expectation", lx);
    check_team(xt, xm, xn, lx);
    check_team(yt, ym, yn, ly);
    CHECK(shmem_team_my_pe(xt) == x && shmem_team_my_pe(yt) == y,
          "%s: (x, y) is (%d, %d), expected (%d, %d)", lx, shmem_team_my_pe(xt),
          shmem_team_my_pe(yt), x, y);
    shmem_team_config_t got;
    CHECK(shmem_team_get_config(xt, SHMEM_TEAM_NUM_CONTEXTS, &got) == 0 &&
              got.num_contexts == 2,
          "%s: num_contexts is %d, expected 2", lx, got.num_contexts);
    CHECK(shmem_team_get_config(yt, SHMEM_TEAM_NUM_CONTEXTS, &got) == 0 &&
              got.num_contexts == 0,
          "%s: num_contexts is %d, expected the default 0", ly, got.num_contexts);
    /* The x-teams of different rows run their collectives at the same time. */
    team_collectives(xt, xm, xn, lx);
    team_ctx_ops(xt, xm, xn, lx);
    team_collectives(yt, ym, yn, ly);
    /* A context left alive: team_destroy destroys it. */
    shmem_ctx_t keep;
    CHECK(shmem_team_create_ctx(xt, 0, &keep) == 0, "%s: team_create_ctx failed", lx);
    shmem_ctx_long_p(keep, &slot[1], me, shmem_team_my_pe(xt));
    shmem_ctx_quiet(keep);
    CHECK(slot[1] == me, "%s: a ctx put to myself gave %ld", lx, slot[1]);
    CHECK(shmem_team_sync(xt) == 0, "%s: team_sync failed", lx);
    shmem_team_destroy(xt);
    shmem_team_destroy(yt);
}

/* SHMEM_TEAM_SHARED: exactly the PEs with a non-NULL shmem_ptr of a heap object. */
static void check_shared(void) {
    shmem_team_t sh = SHMEM_TEAM_SHARED;
    int sn = shmem_team_n_pes(sh), count = 0;
    for (int pe = 0; pe < npes; pe++) {
        int in = shmem_team_translate_pe(SHMEM_TEAM_WORLD, pe, sh);
        void *p = shmem_ptr(counter, pe);
        CHECK((in >= 0) == (p != NULL),
              "SHARED: PE %d is %s the team but shmem_ptr of a heap object is %s", pe,
              in >= 0 ? "in" : "not in", p ? "non-NULL" : "NULL");
        if (nodes[pe] >= 0 && nodes[me] >= 0)
            CHECK((in >= 0) == (nodes[pe] == nodes[me]),
                  "SHARED: PE %d (node %d) %s the team of PE %d (node %d)", pe, nodes[pe],
                  in >= 0 ? "is in" : "is not in", me, nodes[me]);
        if (in >= 0) {
            CHECK(in == count, "SHARED: world PE %d is team PE %d, expected %d (world order)",
                  pe, in, count);
            CHECK(shmem_team_translate_pe(sh, in, SHMEM_TEAM_WORLD) == pe,
                  "SHARED: team PE %d does not translate back to PE %d", in, pe);
            count++;
        }
    }
    CHECK(count == sn, "SHARED: %d members found, team_n_pes says %d", count, sn);
    CHECK(shmem_team_translate_pe(SHMEM_TEAM_WORLD, me, sh) == shmem_team_my_pe(sh),
          "SHARED: my own number does not translate");
    CHECK(shmem_team_translate_pe(sh, sn, SHMEM_TEAM_WORLD) == -1,
          "SHARED: an out-of-range PE translates");
}

int main(void) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    CHECK(npes <= 64, "this program handles up to 64 PEs, not %d", npes);
    nodes = ctest_node_of();
    bsrc = (long *)shmem_calloc(4, sizeof(long));
    bdst = (long *)shmem_calloc(4, sizeof(long));
    fdst = (int *)shmem_calloc((size_t)npes + 1, sizeof(int));
    slot = (long *)shmem_calloc(2, sizeof(long));
    counter = (long *)shmem_calloc(1, sizeof(long));
    CHECK(bsrc && bdst && fdst && slot && counter, "allocation failed");

    /* Predefined teams. */
    CHECK(shmem_team_my_pe(SHMEM_TEAM_WORLD) == me && shmem_team_n_pes(SHMEM_TEAM_WORLD) == npes,
          "WORLD: my_pe %d of %d", shmem_team_my_pe(SHMEM_TEAM_WORLD),
          shmem_team_n_pes(SHMEM_TEAM_WORLD));
    CHECK(shmem_team_my_pe(SHMEM_TEAM_INVALID) == -1 && shmem_team_n_pes(SHMEM_TEAM_INVALID) == -1,
          "INVALID: my_pe/n_pes are %d/%d, expected -1/-1", shmem_team_my_pe(SHMEM_TEAM_INVALID),
          shmem_team_n_pes(SHMEM_TEAM_INVALID));
    CHECK(shmem_team_translate_pe(SHMEM_TEAM_INVALID, 0, SHMEM_TEAM_WORLD) == -1,
          "translate_pe from INVALID is not -1");
    shmem_team_config_t wc = {.num_contexts = -7};
    CHECK(shmem_team_get_config(SHMEM_TEAM_WORLD, SHMEM_TEAM_NUM_CONTEXTS, &wc) == 0 &&
              wc.num_contexts >= 0,
          "get_config(WORLD) gave num_contexts %d", wc.num_contexts);
    CHECK(shmem_team_get_config(SHMEM_TEAM_INVALID, SHMEM_TEAM_NUM_CONTEXTS, &wc) != 0,
          "get_config(INVALID) succeeded");
    /* Contexts from shmem_ctx_create belong to WORLD. */
    shmem_ctx_t wctx;
    shmem_team_t wt = SHMEM_TEAM_INVALID;
    CHECK(shmem_ctx_create(0, &wctx) == 0, "ctx_create failed");
    CHECK(shmem_ctx_get_team(wctx, &wt) == 0 && wt == SHMEM_TEAM_WORLD,
          "ctx_get_team of a shmem_ctx_create context is not WORLD");
    shmem_ctx_destroy(wctx);
    shmem_team_destroy(SHMEM_TEAM_INVALID); /* a no-op */
    check_shared();
    int world_m[64];
    for (int i = 0; i < npes; i++)
        world_m[i] = i;
    team_collectives(SHMEM_TEAM_WORLD, world_m, npes, "WORLD");
    shmem_barrier_all();

    /* Strided splits of WORLD. */
    strided(0, 1, npes, 1);
    strided(0, 2, (npes + 1) / 2, 0);
    if (npes >= 2)
        strided(1, 2, npes / 2, 1);
    strided(npes - 1, -1, npes, 1); /* reversed */
    strided(npes - 1, 0, 1, 0);     /* size 1, stride 0 */
    strided(0, 1, 1, 1);            /* size 1 */
    if (npes >= 3)
        strided(1, 1, npes - 2, 0);
    if (npes >= 4)
        strided(npes - 1, -2, npes / 2, 0);

    /* 2-D splits of WORLD. */
    int xs[4] = {1, 2, 3, npes + 3};
    for (int i = 0; i < 4; i++) {
        two_d(SHMEM_TEAM_WORLD, world_m, npes, xs[i], "WORLD");
        shmem_barrier_all();
    }

    /* Nested: A = even PEs of WORLD; B = A without its first member; 2-D of A. */
    int am[64] = {0}, an = (npes + 1) / 2;
    for (int i = 0; i < an; i++)
        am[i] = 2 * i;
    shmem_team_t a = SHMEM_TEAM_INVALID;
    CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 2, an, NULL, 0, &a) == 0,
          "split_strided(WORLD, 0, 2, %d) failed", an);
    check_team(a, am, an, "A = split_strided(WORLD, 0, 2)");
    if (a != SHMEM_TEAM_INVALID) {
        if (an >= 2) {
            shmem_team_t b = SHMEM_TEAM_INVALID;
            CHECK(shmem_team_split_strided(a, 1, 1, an - 1, NULL, 0, &b) == 0,
                  "split_strided(A, 1, 1, %d) failed", an - 1);
            int bm[64] = {0};
            for (int i = 0; i < an - 1; i++)
                bm[i] = am[i + 1];
            check_team(b, bm, an - 1, "B = split_strided(A, 1, 1)");
            if (b != SHMEM_TEAM_INVALID) {
                for (int i = 0; i < an - 1; i++) {
                    int in_a = shmem_team_translate_pe(b, i, a);
                    CHECK(in_a == i + 1, "translate_pe(B %d -> A) is %d, expected %d", i, in_a,
                          i + 1);
                }
                CHECK(shmem_team_translate_pe(a, 0, b) == -1,
                      "translate_pe(A 0 -> B) is not -1 (A's first PE is not in B)");
                team_collectives(b, bm, an - 1, "B");
                team_ctx_ops(b, bm, an - 1, "B");
                shmem_team_destroy(b);
            } else {
                CHECK(me == 0, "PE %d should be in B", me);
            }
        }
        two_d(a, am, an, 2, "A");
        team_collectives(a, am, an, "A");
        shmem_team_destroy(a);
    }
    shmem_barrier_all();

    free(nodes);
    shmem_free(counter);
    shmem_free(slot);
    shmem_free(fdst);
    shmem_free(bdst);
    shmem_free(bsrc);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
