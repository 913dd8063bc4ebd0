/*
 * generics.c - a C11 program that uses only the type-generic interfaces of OpenSHMEM 1.5
 * (§9.5 - §9.10: shmem_put, shmem_p, shmem_g, shmem_get, shmem_iput, shmem_iget, the _nbi
 * forms, shmem_atomic_*, shmem_put_signal, shmem_wait_until, shmem_test and the multi
 * forms), with and without a leading context, on several types, and checks the results.
 * Compiled with -std=c11.
 */
#define CTEST_NAME "generics"
#include "ctest.h"

#if !defined(__STDC_VERSION__) || __STDC_VERSION__ < 201112L
#error "generics.c must be compiled as C11 or later"
#endif

int main(void) {
    shmem_init();
    ctest_begin();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    int right = (me + 1) % npes, left = (me + npes - 1) % npes;
    shmem_ctx_t ctx;
    CHECK(shmem_ctx_create(0, &ctx) == 0, "shmem_ctx_create failed");

    int *ia = shmem_calloc(8, sizeof(int));
    double *da = shmem_calloc(8, sizeof(double));
    long *la = shmem_calloc(8, sizeof(long));
    uint64_t *ua = shmem_calloc(8, sizeof(uint64_t));
    float *fa = shmem_calloc(8, sizeof(float));
    CHECK(ia && da && la && ua && fa, "allocation failed");
    int isrc[8];
    double dsrc[8];
    for (int i = 0; i < 8; i++) {
        isrc[i] = me * 10 + i;
        dsrc[i] = me + i / 4.0;
    }
    ctest_barrier();

    shmem_put(ia, isrc, 8, right);
    shmem_put(ctx, da, dsrc, 8, right);
    shmem_ctx_quiet(ctx);
    ctest_barrier();
    for (int i = 0; i < 8; i++) {
        CHECK(ia[i] == left * 10 + i, "generic put (int): %d", ia[i]);
        CHECK(da[i] == left + i / 4.0, "generic ctx put (double): %g", da[i]);
    }
    ctest_barrier();

    shmem_p(&la[0], (long)me + 100, right);
    shmem_p(ctx, &fa[0], 1.5f * (float)me, right);
    shmem_ctx_quiet(ctx);
    ctest_barrier();
    CHECK(la[0] == left + 100 && fa[0] == 1.5f * (float)left, "generic p");
    CHECK(shmem_g(&la[0], right) == me + 100, "generic g");
    CHECK(shmem_g(ctx, (const float *)&fa[0], right) == 1.5f * (float)me, "generic ctx g");

    int iget[8] = {0};
    shmem_get(iget, ia, 8, right);
    for (int i = 0; i < 8; i++)
        CHECK(iget[i] == me * 10 + i, "generic get: %d", iget[i]);
    double dget[8] = {0};
    shmem_get_nbi(ctx, dget, da, 8, right);
    shmem_ctx_quiet(ctx);
    for (int i = 0; i < 8; i++)
        CHECK(dget[i] == me + i / 4.0, "generic ctx get_nbi: %g", dget[i]);
    int strided[8] = {0};
    shmem_iget(strided, ia, 2, 3, 3, right); /* strided[0,2,4] = ia[0,3,6] of right */
    CHECK(strided[0] == me * 10 && strided[2] == me * 10 + 3 && strided[4] == me * 10 + 6 &&
              strided[1] == 0,
          "generic iget");
    ctest_barrier();
    shmem_iput(ia, isrc, 3, 2, 2, right); /* ia[0,3] = isrc[0,2] */
    shmem_put_nbi(ctx, &la[1], &la[0], 1, me);
    shmem_ctx_quiet(ctx);
    ctest_barrier();
    CHECK(ia[0] == left * 10 && ia[3] == left * 10 + 2, "generic iput");
    CHECK(la[1] == la[0], "generic ctx put_nbi to self");
    ctest_barrier();

    /* Atomics on PE 0. */
    ua[0] = 0;
    la[2] = 0;
    ctest_barrier();
    shmem_atomic_add(&ua[0], (uint64_t)1, 0);
    shmem_atomic_inc(ctx, &ua[0], 0);
    uint64_t before = shmem_atomic_fetch_add(&ua[0], (uint64_t)10, 0);
    CHECK(before < 12u * (uint64_t)npes, "generic fetch_add returned %llu",
          (unsigned long long)before);
    long old = shmem_atomic_fetch(&la[2], 0);
    while (shmem_atomic_compare_swap(&la[2], old, old + 5, 0) != old)
        old = shmem_atomic_fetch(&la[2], 0);
    shmem_atomic_fetch_inc_nbi(&la[3], &la[2], 0);
    shmem_atomic_or(ctx, &ua[1], (uint64_t)1 << me, 0);
    shmem_ctx_quiet(ctx);
    ctest_barrier();
    CHECK(shmem_atomic_fetch(&ua[0], 0) == 12u * (uint64_t)npes, "generic atomics: %llu",
          (unsigned long long)shmem_atomic_fetch(&ua[0], 0));
    CHECK(shmem_atomic_fetch(ctx, &la[2], 0) == 6L * npes, "generic cswap/fetch_inc_nbi");
    CHECK(shmem_atomic_fetch(&ua[1], 0) == (npes >= 64 ? ~0ull : (1ull << npes) - 1),
          "generic atomic or");
    double d = shmem_atomic_swap(&da[7], 2.5, me);
    CHECK(d == left + 7 / 4.0 && da[7] == 2.5, "generic swap (double)");
    ctest_barrier();

    /* Signals and point-to-point: put_signal to the right, wait with the generics. */
    uint64_t *sig = shmem_calloc(1, sizeof(uint64_t));
    CHECK(sig != NULL, "allocation failed");
    ctest_barrier();
    shmem_put_signal(ia, isrc, 8, sig, (uint64_t)(me + 1), SHMEM_SIGNAL_SET, right);
    shmem_wait_until(sig, SHMEM_CMP_EQ, (uint64_t)(left + 1));
    for (int i = 0; i < 8; i++)
        CHECK(ia[i] == left * 10 + i, "generic put_signal data");
    CHECK(shmem_test(sig, SHMEM_CMP_EQ, (uint64_t)(left + 1)) == 1, "generic test");
    ctest_barrier();
    la[4] = la[5] = 0;
    ctest_barrier();
    shmem_atomic_set(&la[4], 1L, right);
    shmem_atomic_set(&la[5], 1L, right);
    shmem_quiet();
    shmem_wait_until_all(&la[4], 2, NULL, SHMEM_CMP_EQ, 1L);
    CHECK(shmem_test_all(&la[4], 2, NULL, SHMEM_CMP_EQ, 1L) == 1, "generic test_all");
    size_t idx[2];
    CHECK(shmem_test_some(&la[4], 2, idx, NULL, SHMEM_CMP_EQ, 1L) == 2, "generic test_some");
    CHECK(shmem_wait_until_any(&la[4], 2, NULL, SHMEM_CMP_EQ, 1L) < 2, "generic wait_until_any");

    ctest_barrier();
    shmem_ctx_destroy(ctx);
    shmem_free(sig);
    shmem_free(fa);
    shmem_free(ua);
    shmem_free(la);
    shmem_free(da);
    shmem_free(ia);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
