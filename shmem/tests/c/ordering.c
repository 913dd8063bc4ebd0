/*
 * ordering.c - memory ordering (OpenSHMEM 1.5 §9.9): shmem_fence orders the delivery of a
 * flag after the data put before it to the same PE (blocking puts, _nbi puts, p, AMOs, on
 * the default context and on a created one with shmem_ctx_fence); shmem_quiet completes
 * puts (the data is there when a flag sent afterwards arrives) and get_nbi (the data is in
 * the local buffer when quiet returns).  The receiver waits only for the flag, and the
 * sender does not quiet before it waits for its own flag: the canonical fence-then-flag
 * pattern relies on the flag being delivered without a quiet.
 */
#define CTEST_NAME "ordering"
#include "ctest.h"

enum { ROUNDS = 40, SMALL = 8, BIG = 96 * 1024 };

static int me, npes, right, left;

static long val(int pe, int round, size_t i) { return (long)pe * 1000003L + round * 7919L + (long)i; }

int main(void) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    right = (me + 1) % npes;
    left = (me + npes - 1) % npes;
    shmem_ctx_t ctx;
    CHECK(shmem_ctx_create(0, &ctx) == 0, "shmem_ctx_create failed");

    long *data = (long *)shmem_malloc(BIG * sizeof(long));
    long *flag = (long *)shmem_calloc(1, sizeof(long));
    long *src = (long *)malloc(BIG * sizeof(long));
    CHECK(data != NULL && flag != NULL && src != NULL, "allocation failed");
    ctest_barrier();

    /* Flag value r+1 announces round r; data of alternating sizes and routines. */
    for (int r = 0; r < ROUNDS; r++) {
        size_t n = r % 3 == 0 ? BIG : r % 3 == 1 ? SMALL : 1000;
        for (size_t i = 0; i < n; i++)
            src[i] = val(me, r, i);
        int how = r % 6;
        switch (how) {
        case 0: /* blocking put, fence, p */
            shmem_long_put(data, src, n, right);
            shmem_fence();
            shmem_long_p(flag, r + 1, right);
            break;
        case 1: /* nbi put, fence, AMO flag */
            shmem_long_put_nbi(data, src, n, right);
            shmem_fence();
            shmem_long_atomic_set(flag, r + 1, right);
            break;
        case 2: /* element-wise p, fence, AMO add (flag goes from r to r+1) */
            for (size_t i = 0; i < n && i < 64; i++)
                shmem_long_p(&data[i], src[i], right);
            if (n > 64)
                shmem_long_put(&data[64], &src[64], n - 64, right);
            shmem_fence();
            shmem_long_atomic_add(flag, 1, right);
            break;
        case 3: /* created context: ctx put, ctx fence, ctx flag */
            shmem_ctx_long_put(ctx, data, src, n, right);
            shmem_ctx_fence(ctx);
            shmem_ctx_long_p(ctx, flag, r + 1, right);
            break;
        case 4: /* quiet instead of fence */
            shmem_long_put_nbi(data, src, n, right);
            shmem_quiet();
            shmem_long_p(flag, r + 1, right);
            break;
        default: /* ctx nbi, ctx quiet, flag on the default context */
            shmem_ctx_long_put_nbi(ctx, data, src, n, right);
            shmem_ctx_quiet(ctx);
            shmem_long_atomic_set(flag, r + 1, right);
            break;
        }
        shmem_long_wait_until(flag, SHMEM_CMP_GE, r + 1);
        CHECK(*(volatile long *)flag == r + 1, "round %d: flag %ld", r, *(volatile long *)flag);
        for (size_t i = 0; i < n; i++)
            CHECK(data[i] == val(left, r, i),
                  "round %d (method %d, %zu longs): data[%zu] = %ld arrived after the flag", r,
                  how, n, i, data[i]);
        /* Everyone has read its data before anyone overwrites it in the next round. */
        shmem_ctx_quiet(ctx);
        ctest_barrier();
    }

    /* quiet completes get_nbi into the local buffer. */
    for (size_t i = 0; i < BIG; i++)
        data[i] = val(me, ROUNDS, i);
    ctest_barrier();
    for (size_t i = 0; i < BIG; i++)
        src[i] = -1;
    shmem_long_get_nbi(src, data, BIG, right);
    shmem_long_get_nbi(src, data, 16, right); /* a second one to the same buffer */
    shmem_quiet();
    for (size_t i = 0; i < BIG; i++)
        CHECK(src[i] == val(right, ROUNDS, i), "get_nbi: element %zu not there after quiet", i);
    for (size_t i = 0; i < BIG; i++)
        src[i] = -1;
    shmem_ctx_long_get_nbi(ctx, src, data, BIG, right);
    shmem_ctx_quiet(ctx);
    for (size_t i = 0; i < BIG; i++)
        CHECK(src[i] == val(right, ROUNDS, i), "ctx get_nbi: element %zu not there after quiet",
              i);
    ctest_barrier();

    /* fence and quiet on SHMEM_CTX_INVALID are no-ops. */
    shmem_ctx_fence(SHMEM_CTX_INVALID);
    shmem_ctx_quiet(SHMEM_CTX_INVALID);
    shmem_ctx_fence(SHMEM_CTX_DEFAULT);
    shmem_ctx_quiet(SHMEM_CTX_DEFAULT);

    ctest_barrier();
    shmem_ctx_destroy(ctx);
    free(src);
    shmem_free(flag);
    shmem_free(data);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
