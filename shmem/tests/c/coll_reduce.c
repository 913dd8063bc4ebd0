/*
 * coll_reduce.c - reductions (OpenSHMEM 1.5 §9.9.9, checklist §1.1, §2.4): EVERY operator on
 * EVERY type of its table, with exact expected results:
 *   * team forms shmem_TYPENAME_OP_reduce: AND/OR/XOR on the 14 T-bit types, MAX/MIN on the
 *     24 T-mm types, SUM/PROD on the 26 T-sp types (with float and double _Complex), on
 *     SHMEM_TEAM_WORLD (nreduce 0 with NULL, 1, 7, and for a rotating quarter of the
 *     (type, operator) pairs a count whose bytes exceed the UDP MTU) and on
 *     SHMEM_TEAM_SHARED (0, 1, 7), in place (dest == source) and disjoint; return value 0;
 *   * active-set forms shmem_TYPENAME_OP_to_all: AND/OR/XOR on the 4 A-bit types, MAX/MIN on
 *     the 7 A-mm types (with long double), SUM/PROD on the 9 A-sp types, on the full set, a
 *     strided set and an inner set, with pWrk of max(nreduce/2 + 1,
 *     SHMEM_REDUCE_MIN_WRKDATA_SIZE) elements and three pSyncs of SHMEM_REDUCE_SYNC_SIZE
 *     in rotation, no barrier between calls (each pSync back at SHMEM_SYNC_VALUE on
 *     return).  Three, not the usual two: a zero-length call need not synchronize, so
 *     with two a PE could be one real call ahead on the pSync being checked;
 *   * nothing past nreduce is written.
 * Inputs are small integers (or Gaussian integers), so sums and products are exact in every
 * floating type and fit the 8-bit types; signed types also get negative inputs.  The
 * expected value is folded in the element type in member order.  Non-members do not call.
 */
#define CTEST_NAME "coll_reduce"
#include "ctest.h"
#include <complex.h>

enum { GUARD = 16, BIGBYTES = 61440 + 1000 /* above the UDP MTU */ };

static int me, npes;
static unsigned char *dst_area; /* BIGBYTES + 64 * GUARD */
static unsigned char *src_area; /* the same */
static unsigned char *wrk_area; /* pWrk: (BIGBYTES / 2 + 64) elements of 16 bytes at most */
static long *red_ps[3];         /* SHMEM_REDUCE_SYNC_SIZE each */
static int red_calls;           /* active-set calls so far: selects the pSync */

enum { OP_AND, OP_OR, OP_XOR, OP_MAX, OP_MIN, OP_SUM, OP_PROD };

/* Where a reduction runs: a team, or an active set; members are world PEs world[0..n). */
struct target {
    int is_team;
    shmem_team_t team;
    int start, logs, size;
    int n;
    int world[64];
    int large; /* whether the large counts run here */
    const char *name;
};

/* Input of world PE pe at index i for an operator (sgn: the type is signed). */
static long long gen(int op, int pe, size_t i, int sgn) {
    long long x;
    switch (op) {
    case OP_AND: x = 127 - (1LL << ((pe + (int)i) % 7)); break;
    case OP_OR: x = 1LL << ((pe * 3 + (int)i) % 7); break;
    case OP_XOR: x = (pe * 37 + (long long)i * 11 + 5) % 128; break;
    case OP_MAX:
    case OP_MIN: return (pe * 7 + (long long)i * 3) % 50 + 1 - (sgn ? 25 : 0);
    case OP_SUM: return sgn ? (long long)((pe + (int)i) % 8) - 2 : (pe + (long long)i) % 5 + 1;
    default: /* PROD: at most two 2s among 8 PEs, and -1s for signed types */
        if ((pe + 2 * (int)i) % 4 == 0)
            return 2;
        return sgn && (pe + (int)i) % 5 == 1 ? -1 : 1;
    }
    /* bitwise: negative inputs on some PEs of signed types (sign bits in play) */
    if (sgn && (pe + (int)i) % 3 == 0)
        x = -x - 1;
    return x;
}

/* Complex input of world PE pe at index i. */
static double _Complex cgen(int op, int pe, size_t i) {
    int k = (pe + (int)i) % 5;
    if (op == OP_SUM)
        return (double)k + (double)((pe * 3 + (int)i) % 4 - 1) * I;
    switch (k) {
    case 0: return 1.0;
    case 1: return I;
    case 2: return -1.0;
    case 3: return 1.0 + 1.0 * I;
    default: return 1.0 - 1.0 * I;
    }
}

#define FOLD_and(a, x) ((a) & (x))
#define FOLD_or(a, x) ((a) | (x))
#define FOLD_xor(a, x) ((a) ^ (x))
#define FOLD_max(a, x) ((x) > (a) ? (x) : (a))
#define FOLD_min(a, x) ((x) < (a) ? (x) : (a))
#define FOLD_sum(a, x) ((a) + (x))
#define FOLD_prod(a, x) ((a) * (x))

#define RGEN(T, OPI, pe, i) ((T)gen(OPI, pe, i, (T)-1 < (T)1))
#define CGEN(T, OPI, pe, i) ((T)cgen(OPI, pe, i))
#define RRE(v) ((double)(v))
#define RIM(v) 0.0
#define CRE(v) ((double)creal(v))
#define CIM(v) ((double)cimag(v))

/* Picks the large counts for a rotating quarter of the (type, operator) pairs. */
static int large_here(const struct target *tg, int type_index, int op) {
    return tg->large && (type_index + op) % 4 == 0;
}

/* The body of one (type, operator) test on target tg: CALL is the reduction call with d,
 * s, n in scope (it sets rc). */
#define RED_BODY(T, NAME, OP, OPI, GEN, RE, IM, CALL)                                         \
    {                                                                                         \
        T *dest = (T *)(void *)dst_area, *src = (T *)(void *)src_area;                        \
        size_t sizes[4] = {0, 1, 7, BIGBYTES / sizeof(T) + 3};                                \
        int ncases = large_here(tg, type_index, OPI) ? 4 : 3;                                 \
        for (int c = 0; c < ncases; c++) {                                                    \
            for (int inplace = 0; inplace < 2; inplace++) {                                   \
                size_t n = sizes[c];                                                          \
                if (n == 0 && inplace)                                                        \
                    continue;                                                                 \
                memset(dest, 0, (n + GUARD) * sizeof(T));                                     \
                memset(src, 0, (n + GUARD) * sizeof(T));                                      \
                for (size_t i = 0; i < n; i++)                                                \
                    src[i] = GEN(T, OPI, me, i);                                              \
                T *d = n == 0 ? NULL : inplace ? src : dest;                                  \
                const T *s = n == 0 ? NULL : src;                                             \
                int rc = 0;                                                                   \
                CALL;                                                                         \
                CHECK(rc == 0, "%s: " #NAME " " #OP " n=%zu returned %d", tg->name, n, rc);   \
                T *out = inplace ? src : dest;                                                \
                for (size_t i = 0; i < n; i++) {                                              \
                    T want = GEN(T, OPI, tg->world[0], i);                                    \
                    for (int m = 1; m < tg->n; m++)                                           \
                        want = (T)FOLD_##OP(want, GEN(T, OPI, tg->world[m], i));              \
                    CHECK(out[i] == want,                                                     \
                          "%s: " #NAME "_" #OP " n=%zu %s: element %zu is %g%+gi, "           \
                          "expected %g%+gi",                                                  \
                          tg->name, n, inplace ? "in place" : "disjoint", i, RE(out[i]),      \
                          IM(out[i]), RE(want), IM(want));                                    \
                }                                                                             \
                for (size_t i = n; i < n + GUARD; i++)                                        \
                    CHECK(out[i] == (T)0,                                                     \
                          "%s: " #NAME "_" #OP " n=%zu: element %zu past nreduce written",    \
                          tg->name, n, i);                                                    \
                if (!inplace)                                                                 \
                    for (size_t i = 0; i < n; i++)                                            \
                        CHECK(src[i] == GEN(T, OPI, me, i),                                   \
                              "%s: " #NAME "_" #OP " n=%zu: source[%zu] changed", tg->name,   \
                              n, i);                                                          \
            }                                                                                 \
        }                                                                                     \
    }

#define TEAM_CALL(NAME, OP) rc = shmem_##NAME##_##OP##_reduce(tg->team, d, s, n)
#define ASET_CALL(NAME, OP)                                                                   \
    do {                                                                                      \
        long *ps = red_ps[red_calls++ % 3];                                                   \
        shmem_##NAME##_##OP##_to_all(d, s, (int)n, tg->start, tg->logs, tg->size,             \
                                     (void *)wrk_area, ps);                                   \
        for (int w = 0; w < SHMEM_REDUCE_SYNC_SIZE; w++)                                      \
            CHECK(ps[w] == SHMEM_SYNC_VALUE, "%s: " #NAME "_" #OP "_to_all n=%zu: pSync[%d] " \
                  "is %ld after return", tg->name, n, w, ps[w]);                              \
    } while (0)

/* Team tests: one function per (type, operator). */
#define DEF_T(T, NAME, OP, OPI, GEN, RE, IM)                                                  \
    static void team_##NAME##_##OP(const struct target *tg, int type_index)                   \
        RED_BODY(T, NAME, OP, OPI, GEN, RE, IM, TEAM_CALL(NAME, OP))
#define DEF_A(T, NAME, OP, OPI, GEN, RE, IM)                                                  \
    static void aset_##NAME##_##OP(const struct target *tg, int type_index)                   \
        RED_BODY(T, NAME, OP, OPI, GEN, RE, IM, ASET_CALL(NAME, OP))

/* The tables of the specification, written out here (checklist §1.1). */
#define T_BIT_TYPES(X)                                                                        \
    X(unsigned char, uchar) X(unsigned short, ushort) X(unsigned int, uint)                   \
    X(unsigned long, ulong) X(unsigned long long, ulonglong) X(int8_t, int8)                  \
    X(int16_t, int16) X(int32_t, int32) X(int64_t, int64) X(uint8_t, uint8)                   \
    X(uint16_t, uint16) X(uint32_t, uint32) X(uint64_t, uint64) X(size_t, size)
#define T_MM_TYPES(X) CTEST_RMA_TYPES(X)
#define T_CPLX_TYPES(X) X(double _Complex, complexd) X(float _Complex, complexf)
#define A_BIT_TYPES(X) X(short, short) X(int, int) X(long, long) X(long long, longlong)
#define A_MM_TYPES(X)                                                                         \
    A_BIT_TYPES(X) X(float, float) X(double, double) X(long double, longdouble)

#define DEF_T_BIT(T, NAME)                                                                    \
    DEF_T(T, NAME, and, OP_AND, RGEN, RRE, RIM)                                               \
    DEF_T(T, NAME, or, OP_OR, RGEN, RRE, RIM) DEF_T(T, NAME, xor, OP_XOR, RGEN, RRE, RIM)
#define DEF_T_MM(T, NAME)                                                                     \
    DEF_T(T, NAME, max, OP_MAX, RGEN, RRE, RIM) DEF_T(T, NAME, min, OP_MIN, RGEN, RRE, RIM)   \
    DEF_T(T, NAME, sum, OP_SUM, RGEN, RRE, RIM) DEF_T(T, NAME, prod, OP_PROD, RGEN, RRE, RIM)
#define DEF_T_CPLX(T, NAME)                                                                   \
    DEF_T(T, NAME, sum, OP_SUM, CGEN, CRE, CIM) DEF_T(T, NAME, prod, OP_PROD, CGEN, CRE, CIM)
T_BIT_TYPES(DEF_T_BIT)
T_MM_TYPES(DEF_T_MM)
T_CPLX_TYPES(DEF_T_CPLX)

#define DEF_A_BIT(T, NAME)                                                                    \
    DEF_A(T, NAME, and, OP_AND, RGEN, RRE, RIM)                                               \
    DEF_A(T, NAME, or, OP_OR, RGEN, RRE, RIM) DEF_A(T, NAME, xor, OP_XOR, RGEN, RRE, RIM)
#define DEF_A_MM(T, NAME)                                                                     \
    DEF_A(T, NAME, max, OP_MAX, RGEN, RRE, RIM) DEF_A(T, NAME, min, OP_MIN, RGEN, RRE, RIM)   \
    DEF_A(T, NAME, sum, OP_SUM, RGEN, RRE, RIM) DEF_A(T, NAME, prod, OP_PROD, RGEN, RRE, RIM)
#define DEF_A_CPLX(T, NAME)                                                                   \
    DEF_A(T, NAME, sum, OP_SUM, CGEN, CRE, CIM) DEF_A(T, NAME, prod, OP_PROD, CGEN, CRE, CIM)
A_BIT_TYPES(DEF_A_BIT)
A_MM_TYPES(DEF_A_MM)
T_CPLX_TYPES(DEF_A_CPLX)

/* Counts of the (type, operator) pairs run, to check the tables' sizes. */
static int pairs_bit, pairs_mm, pairs_sp;

#define RUN_T_BIT(T, NAME)                                                                    \
    team_##NAME##_and(tg, ti); team_##NAME##_or(tg, ti); team_##NAME##_xor(tg, ti);            \
    ti++; pairs_bit++;
#define RUN_T_MM(T, NAME)                                                                     \
    team_##NAME##_max(tg, ti); team_##NAME##_min(tg, ti); team_##NAME##_sum(tg, ti);           \
    team_##NAME##_prod(tg, ti); ti++; pairs_mm++; pairs_sp++;
#define RUN_T_CPLX(T, NAME)                                                                   \
    team_##NAME##_sum(tg, ti); team_##NAME##_prod(tg, ti); ti++; pairs_sp++;
#define RUN_A_BIT(T, NAME)                                                                    \
    aset_##NAME##_and(tg, ti); aset_##NAME##_or(tg, ti); aset_##NAME##_xor(tg, ti);            \
    ti++; pairs_bit++;
#define RUN_A_MM(T, NAME)                                                                     \
    aset_##NAME##_max(tg, ti); aset_##NAME##_min(tg, ti); aset_##NAME##_sum(tg, ti);           \
    aset_##NAME##_prod(tg, ti); ti++; pairs_mm++; pairs_sp++;
#define RUN_A_CPLX(T, NAME)                                                                   \
    aset_##NAME##_sum(tg, ti); aset_##NAME##_prod(tg, ti); ti++; pairs_sp++;

static void run_team(const struct target *tg) {
    int ti = 0;
    pairs_bit = pairs_mm = pairs_sp = 0;
    T_BIT_TYPES(RUN_T_BIT)
    T_MM_TYPES(RUN_T_MM)
    T_CPLX_TYPES(RUN_T_CPLX)
    CHECK(pairs_bit == 14 && pairs_mm == 24 && pairs_sp == 26,
          "%s: ran %d/%d/%d types of the bit/minmax/arith tables, expected 14/24/26", tg->name,
          pairs_bit, pairs_mm, pairs_sp);
}

static void run_aset(const struct target *tg) {
    int ti = 0;
    pairs_bit = pairs_mm = pairs_sp = 0;
    A_BIT_TYPES(RUN_A_BIT)
    A_MM_TYPES(RUN_A_MM)
    T_CPLX_TYPES(RUN_A_CPLX)
    CHECK(pairs_bit == 4 && pairs_mm == 7 && pairs_sp == 9,
          "%s: ran %d/%d/%d types of the bit/minmax/arith tables, expected 4/7/9", tg->name,
          pairs_bit, pairs_mm, pairs_sp);
}

static void team_target(struct target *tg, shmem_team_t team, const char *name, int large) {
    memset(tg, 0, sizeof *tg);
    tg->is_team = 1;
    tg->team = team;
    tg->n = shmem_team_n_pes(team);
    CHECK(tg->n >= 1 && tg->n <= 64, "%s has %d PEs", name, tg->n);
    for (int t = 0; t < tg->n; t++)
        tg->world[t] = shmem_team_translate_pe(team, t, SHMEM_TEAM_WORLD);
    tg->large = large;
    tg->name = name;
}

/* Runs the active-set tests on (start, logs, size), members only. */
static void aset_target(int start, int logs, int size, const char *name) {
    struct target tg;
    memset(&tg, 0, sizeof tg);
    tg.start = start;
    tg.logs = logs;
    tg.size = size;
    tg.n = size;
    int member = 0;
    for (int j = 0; j < size; j++) {
        tg.world[j] = start + j * (1 << logs);
        member |= tg.world[j] == me;
    }
    tg.large = start == 0 && logs == 0;
    tg.name = name;
    if (member)
        run_aset(&tg);
    /* the next set starts its pSync alternation afresh, after everyone is done */
    shmem_barrier_all();
    red_calls = 0;
}

int main(void) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    CHECK(npes <= 64, "this program handles up to 64 PEs, not %d", npes);

    size_t area = BIGBYTES + 64 * GUARD;
    dst_area = (unsigned char *)shmem_malloc(area);
    src_area = (unsigned char *)shmem_malloc(area);
    wrk_area = (unsigned char *)shmem_malloc((BIGBYTES / 2 + 64) * 16);
    for (int i = 0; i < 3; i++)
        red_ps[i] = (long *)shmem_malloc(SHMEM_REDUCE_SYNC_SIZE * sizeof(long));
    CHECK(dst_area && src_area && wrk_area && red_ps[0] && red_ps[1] && red_ps[2],
          "allocation failed");
    for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++)
        red_ps[0][i] = red_ps[1][i] = red_ps[2][i] = SHMEM_SYNC_VALUE;
    ctest_barrier();

    struct target tg;
    team_target(&tg, SHMEM_TEAM_WORLD, "team WORLD", 1);
    run_team(&tg);
    team_target(&tg, SHMEM_TEAM_SHARED, "team SHARED", 0);
    run_team(&tg);
    shmem_barrier_all();

    aset_target(0, 0, npes, "active set (0, 0, all)");
    aset_target(0, 1, (npes + 1) / 2, "active set (0, 1, even PEs)");
    if (npes >= 3)
        aset_target(1, 0, npes - 2, "active set (1, 0, inner PEs)");

    shmem_barrier_all();
    for (int i = 0; i < 3; i++)
        shmem_free(red_ps[i]);
    shmem_free(wrk_area);
    shmem_free(src_area);
    shmem_free(dst_area);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
