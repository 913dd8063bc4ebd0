/*
 * amo.c - every atomic memory operation of OpenSHMEM 1.5 §9.7 for every type of its table,
 * blocking and _nbi, each also as the shmem_ctx_ twin (on a created context), plus the
 * deprecated names (cswap, finc, inc, fadd, add, fetch, set, swap): all PEs hammer one PE
 * (PE 0, then the last PE) and the results are exact:
 *   standard types:  inc, fetch_inc, add, fetch_add (+ctx, +nbi) and compare-and-swap loops
 *                    give a known total; fetch_inc alone hands out every ticket once;
 *   extended types:  set/fetch per PE slot; swap chains conserve the sum of the tokens;
 *   bitwise types:   and/or/xor (+fetch, +ctx, +nbi) leave exactly the expected bits and
 *                    every fetch shows the own bit in the expected state.
 */
#define CTEST_NAME "amo"
#include "ctest.h"

enum { R = 6, K = 8, SLOTS = 80 };

static int me, npes;
static shmem_ctx_t ctx;
static long *acc;   /* symmetric: [0] sums on PE 0 */
static long *seen;  /* symmetric: ticket marks on the target */
static char *slots; /* symmetric: SLOTS * 16 bytes of operands */

/* Element i of the operand area, as T (16-byte slots fit every type). */
#define SLOT(T, i) ((T *)(void *)(slots + 16 * (i)))

/* Resets `n` slots and the ticket marks on every PE. */
static void reset(void) {
    memset(slots, 0, SLOTS * 16);
    memset(seen, 0, sizeof(long) * (size_t)(npes * R * 3));
    acc[0] = 0;
    ctest_barrier();
}

/* The sum 1 + 2 + ... + n. */
static long tri(long n) { return n * (n + 1) / 2; }

#define GUARD 10000000L

#define DEFINE_AMO_STD(T, NAME)                                                               \
    static void cas_inc_##NAME(T *x, int tgt, int form) {                                     \
        T old = shmem_##NAME##_atomic_fetch(x, tgt);                                          \
        for (long n = 0;; n++) {                                                              \
            CHECK(n < GUARD, #NAME " compare_swap loop does not make progress");              \
            T prev;                                                                           \
            if (form == 0)                                                                    \
                prev = shmem_##NAME##_atomic_compare_swap(x, old, (T)(old + 1), tgt);         \
            else if (form == 1)                                                               \
                prev = shmem_ctx_##NAME##_atomic_compare_swap(ctx, x, old, (T)(old + 1), tgt); \
            else if (form == 2) {                                                             \
                shmem_##NAME##_atomic_compare_swap_nbi(&prev, x, old, (T)(old + 1), tgt);     \
                shmem_quiet();                                                                \
            } else {                                                                          \
                shmem_ctx_##NAME##_atomic_compare_swap_nbi(ctx, &prev, x, old, (T)(old + 1),  \
                                                           tgt);                              \
                shmem_ctx_quiet(ctx);                                                         \
            }                                                                                 \
            if (prev == old)                                                                  \
                return;                                                                       \
            old = prev;                                                                       \
        }                                                                                     \
    }                                                                                         \
    static void std_##NAME(int tgt) {                                                         \
        reset();                                                                              \
        T *x = SLOT(T, 0), *t = SLOT(T, 1);                                                   \
        long total = (long)npes * R * 26;                                                     \
        for (int r = 0; r < R; r++) {                                                         \
            T v[8];                                                                           \
            shmem_##NAME##_atomic_inc(x, tgt);                                                \
            v[0] = shmem_##NAME##_atomic_fetch_inc(x, tgt);                                   \
            shmem_##NAME##_atomic_add(x, (T)2, tgt);                                          \
            v[1] = shmem_##NAME##_atomic_fetch_add(x, (T)3, tgt);                             \
            shmem_ctx_##NAME##_atomic_inc(ctx, x, tgt);                                       \
            v[2] = shmem_ctx_##NAME##_atomic_fetch_inc(ctx, x, tgt);                          \
            shmem_ctx_##NAME##_atomic_add(ctx, x, (T)2, tgt);                                 \
            v[3] = shmem_ctx_##NAME##_atomic_fetch_add(ctx, x, (T)3, tgt);                    \
            shmem_##NAME##_atomic_fetch_inc_nbi(&v[4], x, tgt);                               \
            shmem_##NAME##_atomic_fetch_add_nbi(&v[5], x, (T)3, tgt);                         \
            shmem_ctx_##NAME##_atomic_fetch_inc_nbi(ctx, &v[6], x, tgt);                      \
            shmem_ctx_##NAME##_atomic_fetch_add_nbi(ctx, &v[7], x, (T)3, tgt);                \
            shmem_quiet();                                                                    \
            shmem_ctx_quiet(ctx);                                                             \
            for (int i = 0; i < 8; i++)                                                       \
                CHECK((long)v[i] >= 0 && (long)v[i] < total,                                  \
                      #NAME " fetching AMO %d returned %ld (total %ld)", i, (long)v[i], total); \
            for (int form = 0; form < 4; form++)                                              \
                cas_inc_##NAME(x, tgt, form);                                                 \
        }                                                                                     \
        shmem_ctx_quiet(ctx);                                                                 \
        ctest_barrier();                                                                      \
        T a = shmem_##NAME##_atomic_fetch(x, tgt), b = shmem_ctx_##NAME##_atomic_fetch(ctx, x, tgt); \
        CHECK((long)a == total && (long)b == total, #NAME " on PE %d: %ld/%ld, expected %ld", \
              tgt, (long)a, (long)b, total);                                                  \
        /* Tickets: every value 0 .. npes*R*3-1 is handed out exactly once. */                \
        for (int r = 0; r < R; r++) {                                                         \
            T v3[3];                                                                          \
            v3[0] = shmem_##NAME##_atomic_fetch_inc(t, tgt);                                  \
            v3[1] = shmem_ctx_##NAME##_atomic_fetch_inc(ctx, t, tgt);                         \
            shmem_##NAME##_atomic_fetch_inc_nbi(&v3[2], t, tgt);                              \
            shmem_quiet();                                                                    \
            for (int i = 0; i < 3; i++) {                                                     \
                CHECK((long)v3[i] >= 0 && (long)v3[i] < npes * R * 3, #NAME " ticket %ld",   \
                      (long)v3[i]);                                                           \
                shmem_long_atomic_inc(&seen[(long)v3[i]], tgt);                               \
            }                                                                                 \
        }                                                                                     \
        ctest_barrier();                                                                      \
        if (me == tgt)                                                                        \
            for (int i = 0; i < npes * R * 3; i++)                                            \
                CHECK(seen[i] == 1, #NAME " ticket %d handed out %ld times", i, seen[i]);     \
        ctest_barrier();                                                                      \
    }
CTEST_AMO_STD_TYPES(DEFINE_AMO_STD)

#define DEFINE_AMO_EXT(T, NAME)                                                               \
    static void ext_##NAME(int tgt) {                                                         \
        reset();                                                                              \
        T *x = SLOT(T, 0);                                                                    \
        /* set: each PE its own slot, four forms in turn. */                                  \
        T *mine = SLOT(T, 2 + me);                                                            \
        switch (me % 2) {                                                                     \
        case 0: shmem_##NAME##_atomic_set(mine, (T)(me + 1), tgt); break;                     \
        default: shmem_ctx_##NAME##_atomic_set(ctx, mine, (T)(me + 1), tgt); break;           \
        }                                                                                     \
        shmem_ctx_quiet(ctx);                                                                 \
        ctest_barrier();                                                                      \
        for (int pe = 0; pe < npes; pe++) {                                                   \
            T a = shmem_##NAME##_atomic_fetch(SLOT(T, 2 + pe), tgt);                          \
            T b = shmem_ctx_##NAME##_atomic_fetch(ctx, SLOT(T, 2 + pe), tgt);                 \
            T c, d;                                                                           \
            shmem_##NAME##_atomic_fetch_nbi(&c, SLOT(T, 2 + pe), tgt);                        \
            shmem_ctx_##NAME##_atomic_fetch_nbi(ctx, &d, SLOT(T, 2 + pe), tgt);               \
            shmem_quiet();                                                                    \
            shmem_ctx_quiet(ctx);                                                             \
            CHECK(a == (T)(pe + 1) && b == a && c == a && d == a,                             \
                  #NAME " set/fetch of PE %d's slot on PE %d: %g %g %g %g", pe, tgt,          \
                  (double)a, (double)b, (double)c, (double)d);                                \
        }                                                                                     \
        /* swap chains: what was swapped out plus what is left = all tokens. */              \
        long sum = 0;                                                                         \
        for (int k = 0; k < K; k++) {                                                         \
            T token = (T)(me * K + k + 1), got;                                               \
            switch (k % 4) {                                                                  \
            case 0: got = shmem_##NAME##_atomic_swap(x, token, tgt); break;                   \
            case 1: got = shmem_ctx_##NAME##_atomic_swap(ctx, x, token, tgt); break;          \
            case 2:                                                                           \
                shmem_##NAME##_atomic_swap_nbi(&got, x, token, tgt);                          \
                shmem_quiet();                                                                \
                break;                                                                        \
            default:                                                                          \
                shmem_ctx_##NAME##_atomic_swap_nbi(ctx, &got, x, token, tgt);                 \
                shmem_ctx_quiet(ctx);                                                         \
                break;                                                                        \
            }                                                                                 \
            sum += (long)got;                                                                 \
        }                                                                                     \
        shmem_long_atomic_add(&acc[0], sum, 0);                                               \
        ctest_barrier();                                                                      \
        long left_over = (long)shmem_##NAME##_atomic_fetch(x, tgt);                           \
        long swapped = shmem_long_atomic_fetch(&acc[0], 0);                                   \
        CHECK(swapped + left_over == tri((long)npes * K),                                     \
              #NAME " swaps on PE %d: %ld swapped out + %ld left != %ld", tgt, swapped,       \
              left_over, tri((long)npes * K));                                                \
        ctest_barrier();                                                                      \
    }
CTEST_AMO_EXT_TYPES(DEFINE_AMO_EXT)

#define DEFINE_AMO_BIT(T, NAME)                                                               \
    static void bit_##NAME(int tgt) {                                                         \
        reset();                                                                              \
        T b = (T)((T)1 << me), all = 0;                                                       \
        for (int pe = 0; pe < npes; pe++)                                                     \
            all = (T)(all | (T)((T)1 << pe));                                                 \
        /* Slots: or: 0 (fetch), 1 (plain), 2 (ctx fetch), 3 (ctx), 4 (nbi), 5 (ctx nbi);   \
         * and: 6..11 start at all ones; xor: 12 (three forms), 13 (nbi forms). */            \
        if (me == tgt)                                                                        \
            for (int i = 6; i < 12; i++)                                                      \
                *SLOT(T, i) = (T)~(T)0;                                                       \
        ctest_barrier();                                                                      \
        T v[6];                                                                               \
        v[0] = shmem_##NAME##_atomic_fetch_or(SLOT(T, 0), b, tgt);                            \
        shmem_##NAME##_atomic_or(SLOT(T, 1), b, tgt);                                         \
        v[1] = shmem_ctx_##NAME##_atomic_fetch_or(ctx, SLOT(T, 2), b, tgt);                   \
        shmem_ctx_##NAME##_atomic_or(ctx, SLOT(T, 3), b, tgt);                                \
        shmem_##NAME##_atomic_fetch_or_nbi(&v[2], SLOT(T, 4), b, tgt);                        \
        shmem_ctx_##NAME##_atomic_fetch_or_nbi(ctx, &v[3], SLOT(T, 5), b, tgt);               \
        shmem_quiet();                                                                        \
        shmem_ctx_quiet(ctx);                                                                 \
        for (int i = 0; i < 4; i++)                                                           \
            CHECK((v[i] & b) == 0, #NAME " fetch_or form %d saw the own bit already set", i); \
        v[0] = shmem_##NAME##_atomic_fetch_and(SLOT(T, 6), (T)~b, tgt);                       \
        shmem_##NAME##_atomic_and(SLOT(T, 7), (T)~b, tgt);                                    \
        v[1] = shmem_ctx_##NAME##_atomic_fetch_and(ctx, SLOT(T, 8), (T)~b, tgt);              \
        shmem_ctx_##NAME##_atomic_and(ctx, SLOT(T, 9), (T)~b, tgt);                           \
        shmem_##NAME##_atomic_fetch_and_nbi(&v[2], SLOT(T, 10), (T)~b, tgt);                  \
        shmem_ctx_##NAME##_atomic_fetch_and_nbi(ctx, &v[3], SLOT(T, 11), (T)~b, tgt);         \
        shmem_quiet();                                                                        \
        shmem_ctx_quiet(ctx);                                                                 \
        for (int i = 0; i < 4; i++)                                                           \
            CHECK((v[i] & b) == b, #NAME " fetch_and form %d saw the own bit already clear", i); \
        shmem_##NAME##_atomic_xor(SLOT(T, 12), b, tgt);                                       \
        shmem_quiet(); /* unordered with the next AMO otherwise */                            \
        v[0] = shmem_##NAME##_atomic_fetch_xor(SLOT(T, 12), b, tgt);                          \
        v[1] = shmem_ctx_##NAME##_atomic_fetch_xor(ctx, SLOT(T, 12), b, tgt);                 \
        shmem_ctx_##NAME##_atomic_xor(ctx, SLOT(T, 12), b, tgt);                              \
        shmem_ctx_quiet(ctx);                                                                 \
        shmem_##NAME##_atomic_fetch_xor_nbi(&v[2], SLOT(T, 13), b, tgt);                      \
        shmem_quiet();                                                                        \
        shmem_ctx_##NAME##_atomic_fetch_xor_nbi(ctx, &v[3], SLOT(T, 13), b, tgt);             \
        shmem_ctx_quiet(ctx);                                                                 \
        shmem_##NAME##_atomic_fetch_xor_nbi(&v[4], SLOT(T, 13), b, tgt);                      \
        shmem_quiet();                                                                        \
        CHECK((v[0] & b) == b && (v[1] & b) == 0, #NAME " fetch_xor saw the own bit wrong");  \
        CHECK((v[2] & b) == 0 && (v[3] & b) == b && (v[4] & b) == 0,                          \
              #NAME " fetch_xor_nbi saw the own bit wrong");                                  \
        ctest_barrier();                                                                      \
        for (int i = 0; i < 14; i++) {                                                        \
            T want = i < 6 ? all : i < 12 ? (T)~all : i == 12 ? (T)0 : all;                   \
            T got = shmem_##NAME##_atomic_fetch(SLOT(T, i), tgt);                             \
            CHECK(got == want, #NAME " bitwise slot %d on PE %d: %#llx, expected %#llx", i,   \
                  tgt, (unsigned long long)got, (unsigned long long)want);                    \
        }                                                                                     \
        ctest_barrier();                                                                      \
    }
CTEST_AMO_BIT_TYPES(DEFINE_AMO_BIT)

/* Deprecated names: cswap, finc, inc, fadd, add. */
#define DEFINE_DEPR_STD(T, NAME)                                                              \
    static void depr_std_##NAME(int tgt) {                                                    \
        reset();                                                                              \
        T *x = SLOT(T, 0);                                                                    \
        for (int r = 0; r < R; r++) {                                                         \
            shmem_##NAME##_inc(x, tgt);                                                       \
            T a = shmem_##NAME##_finc(x, tgt);                                                \
            shmem_##NAME##_add(x, (T)2, tgt);                                                 \
            T b = shmem_##NAME##_fadd(x, (T)3, tgt);                                          \
            CHECK(a >= 0 && b >= 0, #NAME " finc/fadd returned a negative value");            \
            T old = shmem_##NAME##_fetch(x, tgt);                                             \
            for (long n = 0;; n++) {                                                          \
                CHECK(n < GUARD, #NAME "_cswap loop does not make progress");                 \
                T prev = shmem_##NAME##_cswap(x, old, (T)(old + 1), tgt);                     \
                if (prev == old)                                                              \
                    break;                                                                    \
                old = prev;                                                                   \
            }                                                                                 \
        }                                                                                     \
        ctest_barrier();                                                                      \
        long total = (long)npes * R * 8;                                                      \
        CHECK((long)shmem_##NAME##_fetch(x, tgt) == total, #NAME " deprecated AMOs: %ld, expected %ld", \
              (long)shmem_##NAME##_fetch(x, tgt), total);                                     \
        ctest_barrier();                                                                      \
    }
CTEST_AMO_DEPR_STD_TYPES(DEFINE_DEPR_STD)

/* Deprecated names: fetch, set, swap. */
#define DEFINE_DEPR_EXT(T, NAME)                                                              \
    static void depr_ext_##NAME(int tgt) {                                                    \
        reset();                                                                              \
        shmem_##NAME##_set(SLOT(T, 2 + me), (T)(me + 1), tgt);                                \
        ctest_barrier();                                                                      \
        for (int pe = 0; pe < npes; pe++)                                                     \
            CHECK(shmem_##NAME##_fetch(SLOT(T, 2 + pe), tgt) == (T)(pe + 1),                  \
                  #NAME "_set/_fetch of PE %d's slot", pe);                                   \
        long sum = 0;                                                                         \
        for (int k = 0; k < K; k++)                                                           \
            sum += (long)shmem_##NAME##_swap(SLOT(T, 0), (T)(me * K + k + 1), tgt);           \
        shmem_long_atomic_add(&acc[0], sum, 0);                                               \
        ctest_barrier();                                                                      \
        long left_over = (long)shmem_##NAME##_fetch(SLOT(T, 0), tgt);                         \
        CHECK(shmem_long_atomic_fetch(&acc[0], 0) + left_over == tri((long)npes * K),         \
              #NAME "_swap chain lost tokens");                                               \
        ctest_barrier();                                                                      \
    }
CTEST_AMO_DEPR_EXT_TYPES(DEFINE_DEPR_EXT)

int main(void) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    CHECK(npes <= 32, "this test supports at most 32 PEs (bit masks)");
    CHECK(shmem_ctx_create(0, &ctx) == 0, "shmem_ctx_create failed");
    acc = (long *)shmem_calloc(4, sizeof(long));
    seen = (long *)shmem_calloc((size_t)(npes * R * 3), sizeof(long));
    slots = (char *)shmem_align(16, SLOTS * 16);
    CHECK(acc != NULL && seen != NULL && slots != NULL, "allocation failed");
    CHECK(2 + npes <= SLOTS, "too many PEs for the slots");

    int targets[2] = {0, npes - 1};
    for (int ti = 0; ti < (npes > 1 ? 2 : 1); ti++) {
        int tgt = targets[ti];
#define RUN_STD(T, NAME) std_##NAME(tgt);
#define RUN_EXT(T, NAME) ext_##NAME(tgt);
#define RUN_BIT(T, NAME) bit_##NAME(tgt);
#define RUN_DSTD(T, NAME) depr_std_##NAME(tgt);
#define RUN_DEXT(T, NAME) depr_ext_##NAME(tgt);
        CTEST_AMO_STD_TYPES(RUN_STD)
        CTEST_AMO_EXT_TYPES(RUN_EXT)
        CTEST_AMO_BIT_TYPES(RUN_BIT)
        CTEST_AMO_DEPR_STD_TYPES(RUN_DSTD)
        CTEST_AMO_DEPR_EXT_TYPES(RUN_DEXT)
    }

    ctest_barrier();
    shmem_ctx_destroy(ctx);
    shmem_free(slots);
    shmem_free(seen);
    shmem_free(acc);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
