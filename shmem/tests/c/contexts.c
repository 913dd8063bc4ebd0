/*
 * contexts.c - communication contexts (OpenSHMEM 1.5 §9.4): shmem_ctx_create with each
 * option (none, PRIVATE, SERIALIZED, NOSTORE, combined), shmem_team_create_ctx on the world
 * team, shmem_ctx_get_team, RMA and AMOs on several contexts at once, shmem_ctx_quiet
 * completing the operations of its own context, shmem_ctx_destroy completing them too,
 * many contexts created and destroyed, and the INVALID handle rules (destroy, fence and
 * quiet are no-ops; get_team reports SHMEM_TEAM_INVALID).
 */
#define CTEST_NAME "contexts"
#include "ctest.h"

enum { N = 4096, NCTX = 5 };

static int me, npes, right, left;

int main(void) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    right = (me + 1) % npes;
    left = (me + npes - 1) % npes;

    long options[NCTX] = {0, SHMEM_CTX_PRIVATE, SHMEM_CTX_SERIALIZED, SHMEM_CTX_NOSTORE,
                          SHMEM_CTX_PRIVATE | SHMEM_CTX_SERIALIZED};
    shmem_ctx_t ctx[NCTX + 1];
    for (int i = 0; i < NCTX; i++) {
        ctx[i] = SHMEM_CTX_INVALID;
        CHECK(shmem_ctx_create(options[i], &ctx[i]) == 0, "ctx_create(%ld) failed", options[i]);
        CHECK(ctx[i] != SHMEM_CTX_INVALID && ctx[i] != SHMEM_CTX_DEFAULT,
              "ctx_create(%ld) gave an invalid or the default handle", options[i]);
        for (int j = 0; j < i; j++)
            CHECK(ctx[i] != ctx[j], "two contexts share a handle");
    }
    CHECK(shmem_team_create_ctx(SHMEM_TEAM_WORLD, 0, &ctx[NCTX]) == 0,
          "team_create_ctx(WORLD) failed");
    CHECK(ctx[NCTX] != SHMEM_CTX_INVALID, "team_create_ctx gave SHMEM_CTX_INVALID");

    shmem_team_t team = SHMEM_TEAM_INVALID;
    CHECK(shmem_ctx_get_team(SHMEM_CTX_DEFAULT, &team) == 0 && team == SHMEM_TEAM_WORLD,
          "the default context's team is not SHMEM_TEAM_WORLD");
    for (int i = 0; i <= NCTX; i++) {
        team = SHMEM_TEAM_INVALID;
        CHECK(shmem_ctx_get_team(ctx[i], &team) == 0 && team == SHMEM_TEAM_WORLD,
              "context %d's team is not SHMEM_TEAM_WORLD", i);
    }
    team = SHMEM_TEAM_WORLD;
    CHECK(shmem_ctx_get_team(SHMEM_CTX_INVALID, &team) != 0 && team == SHMEM_TEAM_INVALID,
          "ctx_get_team(SHMEM_CTX_INVALID) must fail and report SHMEM_TEAM_INVALID");

    /* Every context its own region and counter; nbi puts on all of them, then each context
     * quieted separately before its flag is raised on the default context. */
    long *data = (long *)shmem_calloc((size_t)(NCTX + 1) * N, sizeof(long));
    long *flags = (long *)shmem_calloc(NCTX + 1, sizeof(long));
    long *counts = (long *)shmem_calloc(NCTX + 1, sizeof(long));
    long *src = (long *)malloc((size_t)(NCTX + 1) * N * sizeof(long));
    CHECK(data && flags && counts && src, "allocation failed");
    for (int i = 0; i <= NCTX; i++)
        for (int k = 0; k < N; k++)
            src[i * N + k] = me * 100000L + i * 10000L + k;
    ctest_barrier();
    for (int i = 0; i <= NCTX; i++) {
        shmem_ctx_long_put_nbi(ctx[i], &data[i * N], &src[i * N], N, right);
        shmem_ctx_long_atomic_add(ctx[i], &counts[i], i + 1, 0);
    }
    for (int i = NCTX; i >= 0; i--) {
        shmem_ctx_quiet(ctx[i]);
        shmem_long_atomic_set(&flags[i], 1, right);
    }
    shmem_quiet();
    for (int i = 0; i <= NCTX; i++) {
        shmem_long_wait_until(&flags[i], SHMEM_CMP_EQ, 1);
        for (int k = 0; k < N; k++)
            CHECK(data[i * N + k] == left * 100000L + i * 10000L + k,
                  "context %d: element %d missing after its quiet", i, k);
    }
    ctest_barrier();
    if (me == 0)
        for (int i = 0; i <= NCTX; i++)
            CHECK(counts[i] == (long)npes * (i + 1), "context %d AMOs: %ld", i, counts[i]);
    /* Gets and fetching AMOs return with their values on every context. */
    for (int i = 0; i <= NCTX; i++) {
        CHECK(shmem_ctx_long_g(ctx[i], &data[i * N + 7], right) == me * 100000L + i * 10000L + 7,
              "context %d: g", i);
        CHECK(shmem_ctx_long_atomic_fetch(ctx[i], &counts[i], 0) == (long)npes * (i + 1),
              "context %d: atomic fetch", i);
    }
    ctest_barrier();

    /* ctx_destroy completes the context's operations. */
    for (int i = 0; i <= NCTX; i++)
        flags[i] = 0;
    for (int k = 0; k < N; k++)
        data[k] = 0;
    ctest_barrier();
    shmem_ctx_long_put_nbi(ctx[1], data, src, N, right);
    shmem_ctx_destroy(ctx[1]);
    shmem_long_atomic_set(&flags[0], 2, right);
    shmem_quiet();
    shmem_long_wait_until(&flags[0], SHMEM_CMP_EQ, 2);
    for (int k = 0; k < N; k++)
        CHECK(data[k] == left * 100000L + k, "put_nbi not complete after ctx_destroy (%d)", k);
    ctest_barrier();
    for (int i = 0; i <= NCTX; i++)
        if (i != 1)
            shmem_ctx_destroy(ctx[i]);

    /* Many short-lived contexts. */
    for (int round = 0; round < 64; round++) {
        shmem_ctx_t c;
        CHECK(shmem_ctx_create(round % 2 ? SHMEM_CTX_PRIVATE : 0, &c) == 0,
              "ctx_create failed in round %d", round);
        shmem_ctx_long_atomic_inc(c, &counts[0], right);
        shmem_ctx_destroy(c);
    }
    ctest_barrier();
    CHECK(counts[0] == 64 + (me == 0 ? (long)npes : 0), "short-lived contexts: %ld", counts[0]);

    /* INVALID: no-ops. */
    shmem_ctx_destroy(SHMEM_CTX_INVALID);
    shmem_ctx_quiet(SHMEM_CTX_INVALID);
    shmem_ctx_fence(SHMEM_CTX_INVALID);

    ctest_barrier();
    free(src);
    shmem_free(counts);
    shmem_free(flags);
    shmem_free(data);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
