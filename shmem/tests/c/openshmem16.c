/*
 * openshmem16.c - the OpenSHMEM 1.6 routines of gsas besides shmem_team_ptr (team_ptr.c),
 * through the C ABI, the C11 generics and the constants of shmem.h:
 *   * shmem_query_initialized: 0 before shmem_init, nonzero after, 0 after shmem_finalize;
 *   * shmem_signal_add / shmem_ctx_signal_add: every PE adds (1 + its number) to a signal
 *     word of every PE, 20 times with each form (and the generic with and without a
 *     context); each PE waits for the exact sum with shmem_signal_wait_until;
 *   * shmem_signal_set / shmem_ctx_signal_set: each PE sets a word of the next PE to a value
 *     naming both; checked after a barrier with shmem_signal_fetch;
 *   * shmem_pe_quiet / shmem_ctx_pe_quiet: each PE puts 64 KiB non-blocking to the next PE,
 *     completes it with pe_quiet of that PE only, then announces the round with an atomic
 *     set on a created context (a path not ordered with the put); the next PE waits for
 *     the announcement and checks every word. npes = 0 with a NULL array returns at once;
 *   * shmem_ctx_session_start / _stop with SHMEM_CTX_SESSION_BATCH (and the TOTAL_OPS mask)
 *     on the default and a created context: 500 blocking shmem_long_p and 500 8-byte
 *     shmem_long_put from one rewritten buffer, per PE, to the next PE; a start on
 *     SHMEM_CTX_INVALID and a stop without a session do nothing; checked after quiet and a
 *     barrier;
 *   * the vector waits take `const TYPE *cmp_values` (compiled with -Werror);
 *   * shmem_TYPENAME_sum_inscan / _sum_exscan on SHMEM_TEAM_WORLD: long (typed name, out of
 *     place), double and double _Complex (the C11 generic, in place), long double (typed):
 *     each PE k contributes k + 1 (times 1 + element index); checked against the sums;
 *   * the C11 generics shmem_test_all / shmem_wait_until_any take short and unsigned short
 *     (the multi-variable forms gsas exports for them, as Sandia OpenSHMEM and Open MPI do):
 *     the previous PE sets the second of two unsigned shorts; this PE waits for it.
 */
#define CTEST_NAME "openshmem16"
#include "ctest.h"

#include <complex.h>

#define ROUNDS 20
#define WORDS 8192
#define PUTS 500

int main(void) {
    int initialized = -1;
    shmem_query_initialized(&initialized);
    CHECK(initialized == 0, "shmem_query_initialized before shmem_init: %d", initialized);

    shmem_init();
    ctest_begin();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    int next = (me + 1) % npes, prev = (me + npes - 1) % npes;
    shmem_query_initialized(&initialized);
    CHECK(initialized != 0, "shmem_query_initialized after shmem_init: %d", initialized);

    uint64_t *sig = (uint64_t *)shmem_calloc(2, sizeof(uint64_t));
    long *data = (long *)shmem_calloc(WORDS, sizeof(long));
    long *announce = (long *)shmem_calloc(1, sizeof(long));
    long *words = (long *)shmem_calloc(2 * PUTS, sizeof(long));
    CHECK(sig && data && announce && words, "shmem_calloc returned NULL");
    shmem_ctx_t ctx = SHMEM_CTX_INVALID;
    CHECK(shmem_ctx_create(0, &ctx) == 0, "shmem_ctx_create failed");
    shmem_barrier_all();

    /* signal_add: four forms, ROUNDS times each, to every PE. */
    uint64_t mine = 1 + (uint64_t)me;
    for (int r = 0; r < ROUNDS; r++) {
        for (int pe = 0; pe < npes; pe++) {
            shmem_signal_add(&sig[0], mine, pe);
            shmem_ctx_signal_add(ctx, &sig[0], mine, pe);
            shmem_signal_add(SHMEM_CTX_DEFAULT, &sig[0], mine, pe); /* the generic, ctx */
            shmem_ctx_signal_add(SHMEM_CTX_DEFAULT, &sig[0], mine, pe);
        }
    }
    uint64_t total = 0;
    for (int s = 0; s < npes; s++)
        total += 4 * ROUNDS * (1 + (uint64_t)s);
    uint64_t got = shmem_signal_wait_until(&sig[0], SHMEM_CMP_EQ, total);
    CHECK(got == total, "signal_add: %llu, expected %llu", (unsigned long long)got,
          (unsigned long long)total);

    /* signal_set: one word of the next PE, by this PE alone. */
    uint64_t named = (uint64_t)next << 32 | (uint64_t)me | (uint64_t)1 << 62;
    if (me % 2 == 0)
        shmem_signal_set(&sig[1], named, next);
    else
        shmem_ctx_signal_set(ctx, &sig[1], named, next);
    shmem_ctx_quiet(ctx);
    shmem_barrier_all();
    uint64_t want = (uint64_t)me << 32 | (uint64_t)prev | (uint64_t)1 << 62;
    uint64_t seen = shmem_signal_fetch(&sig[1]);
    CHECK(seen == want, "signal_set: %#llx, expected %#llx", (unsigned long long)seen,
          (unsigned long long)want);

    /* pe_quiet: completes the non-blocking put to `next`, which then sees all of it. */
    static long payload[WORDS];
    shmem_pe_quiet(NULL, 0);
    for (long r = 1; r <= ROUNDS; r++) {
        for (int i = 0; i < WORDS; i++)
            payload[i] = r << 32 | (long)me << 16 | i;
        shmem_long_put_nbi(data, payload, WORDS, next);
        if (r % 2)
            shmem_pe_quiet(&next, 1);
        else
            shmem_ctx_pe_quiet(SHMEM_CTX_DEFAULT, &next, 1);
        shmem_ctx_long_atomic_set(ctx, announce, r, next);
        shmem_long_wait_until(announce, SHMEM_CMP_GE, r);
        int wrong = 0;
        for (int i = 0; i < WORDS; i++)
            wrong += data[i] != (r << 32 | (long)prev << 16 | i);
        CHECK(wrong == 0, "round %ld: %d of %d words not delivered at PE %d's pe_quiet", r,
              wrong, WORDS, prev);
        shmem_barrier_all();
    }

    /* Sessions: batched blocking puts, on the default context and a created one. */
    shmem_ctx_session_config_t config = {.total_ops = 2 * PUTS};
    shmem_ctx_session_start(SHMEM_CTX_INVALID, SHMEM_CTX_SESSION_BATCH, &config,
                            SHMEM_CTX_SESSION_TOTAL_OPS);
    shmem_ctx_session_stop(ctx); /* no session open: no effect */
    shmem_ctx_session_start(SHMEM_CTX_DEFAULT, SHMEM_CTX_SESSION_BATCH, &config,
                            SHMEM_CTX_SESSION_TOTAL_OPS);
    shmem_ctx_session_start(ctx, SHMEM_CTX_SESSION_BATCH, NULL, 0);
    long buf;
    for (int i = 0; i < PUTS; i++) {
        shmem_long_p(&words[i], (long)me << 32 | i, next);
        buf = (long)me << 32 | (PUTS + i);
        shmem_ctx_long_put(ctx, &words[PUTS + i], &buf, 1, next);
        buf = -1;
    }
    shmem_ctx_session_stop(SHMEM_CTX_DEFAULT);
    shmem_ctx_session_stop(ctx);
    shmem_ctx_session_stop(ctx);
    shmem_quiet();
    shmem_ctx_quiet(ctx);
    shmem_barrier_all();
    for (int i = 0; i < 2 * PUTS; i++)
        CHECK(words[i] == ((long)prev << 32 | i), "session: word %d is %#lx", i,
              (unsigned long)words[i]);
    /* const cmp_values (1.6): a const array is taken without a warning (-Werror). */
    const long expected[2] = {(long)prev << 32, (long)prev << 32 | 1};
    CHECK(shmem_long_test_all_vector(words, 2, NULL, SHMEM_CMP_EQ, expected) == 1,
          "test_all_vector with const cmp_values");

    /* Scans over the world team. */
    long *lsrc = (long *)shmem_calloc(4, sizeof(long));
    long *ldst = (long *)shmem_calloc(4, sizeof(long));
    double *dv = (double *)shmem_calloc(4, sizeof(double));
    double _Complex *zv = (double _Complex *)shmem_calloc(4, sizeof(double _Complex));
    long double *qv = (long double *)shmem_calloc(4, sizeof(long double));
    CHECK(lsrc && ldst && dv && zv && qv, "shmem_calloc for the scans returned NULL");
    for (int ex = 0; ex < 2; ex++) {
        long upto = ex ? me : me + 1; /* PEs 0 .. upto-1 are summed */
        long tri = upto * (upto + 1) / 2; /* sum of k + 1 over them */
        for (int j = 0; j < 4; j++) {
            lsrc[j] = (long)(me + 1) * (j + 1);
            dv[j] = (double)(me + 1) * (j + 1);
            zv[j] = (double)(me + 1) + (double)(j + 1) * I;
            qv[j] = (long double)(me + 1) * (j + 1);
        }
        int rc = ex ? shmem_long_sum_exscan(SHMEM_TEAM_WORLD, ldst, lsrc, 4)
                    : shmem_long_sum_inscan(SHMEM_TEAM_WORLD, ldst, lsrc, 4);
        CHECK(rc == 0, "long scan returned %d", rc);
        rc = ex ? shmem_sum_exscan(SHMEM_TEAM_WORLD, dv, dv, 4)
                : shmem_sum_inscan(SHMEM_TEAM_WORLD, dv, dv, 4);
        CHECK(rc == 0, "double scan returned %d", rc);
        rc = ex ? shmem_sum_exscan(SHMEM_TEAM_WORLD, zv, zv, 4)
                : shmem_sum_inscan(SHMEM_TEAM_WORLD, zv, zv, 4);
        CHECK(rc == 0, "complex scan returned %d", rc);
        rc = ex ? shmem_longdouble_sum_exscan(SHMEM_TEAM_WORLD, qv, qv, 4)
                : shmem_longdouble_sum_inscan(SHMEM_TEAM_WORLD, qv, qv, 4);
        CHECK(rc == 0, "long double scan returned %d", rc);
        for (int j = 0; j < 4; j++) {
            CHECK(ldst[j] == tri * (j + 1), "%s long[%d] = %ld, expected %ld",
                  ex ? "exscan" : "inscan", j, ldst[j], tri * (j + 1));
            CHECK(lsrc[j] == (long)(me + 1) * (j + 1), "the long source changed");
            CHECK(dv[j] == (double)(tri * (j + 1)), "%s double[%d] = %g", ex ? "exscan" : "inscan",
                  j, dv[j]);
            CHECK(creal(zv[j]) == (double)tri && cimag(zv[j]) == (double)(upto * (j + 1)),
                  "%s complex[%d] = %g%+gi", ex ? "exscan" : "inscan", j, creal(zv[j]),
                  cimag(zv[j]));
            CHECK(qv[j] == (long double)(tri * (j + 1)), "%s long double[%d]",
                  ex ? "exscan" : "inscan", j);
        }
        shmem_barrier_all();
    }
    shmem_free(qv);
    shmem_free(zv);
    shmem_free(dv);
    shmem_free(ldst);
    shmem_free(lsrc);

    /* short and unsigned short through the multi-variable generics. */
    short *sflags = (short *)shmem_calloc(2, sizeof(short));
    unsigned short *uflags = (unsigned short *)shmem_calloc(2, sizeof(unsigned short));
    CHECK(sflags && uflags, "shmem_calloc for the short flags returned NULL");
    CHECK(shmem_test_all(sflags, 2, NULL, SHMEM_CMP_EQ, 0) == 1, "short test_all");
    CHECK(shmem_test_any(uflags, 2, NULL, SHMEM_CMP_NE, 0) == SIZE_MAX,
          "unsigned short test_any before the update");
    shmem_barrier_all();
    shmem_ushort_p(&uflags[1], 7, next);
    size_t which = shmem_wait_until_any(uflags, 2, NULL, SHMEM_CMP_EQ, 7);
    CHECK(which == 1, "unsigned short wait_until_any: index %zu", which);
    shmem_barrier_all();
    shmem_free(uflags);
    shmem_free(sflags);

    shmem_ctx_destroy(ctx);
    shmem_free(words);
    shmem_free(announce);
    shmem_free(data);
    shmem_free(sig);
    shmem_finalize();
    shmem_query_initialized(&initialized);
    CHECK(initialized == 0, "shmem_query_initialized after shmem_finalize: %d", initialized);
    ctest_ok(me, npes);
    return 0;
}
