/*
 * p2p.c - point-to-point synchronization (OpenSHMEM 1.5 §9.10) for every type:
 *   * wait_until and test with each comparison (EQ, NE, GT, GE, LT, LE), for the 12
 *     standard AMO types and the deprecated short and unsigned short; the update comes from
 *     the left neighbour (an AMO, or shmem_p for the deprecated types) while the PE waits,
 *     with no barrier and no quiet in between (the update must arrive by itself);
 *   * wait_until_all/any/some, test_all/any/some and their _vector forms: status masks
 *     (an excluded element never counts, even when it is set), NULL status, empty sets
 *     (nelems 0 with NULL pointers, and a mask that excludes everything), _some returning
 *     every satisfied index, test forms before and after the update;
 *   * the deprecated shmem_wait, shmem_TYPENAME_wait and shmem_wait_until (long).
 */
#define CTEST_NAME "p2p"
#include "ctest.h"

static int me, npes, right;
static char *area; /* symmetric scratch, 16-byte aligned */

#define TIMEOUT_S 120.0

/* The six comparisons: wait for `cmpv` after the variable went from 10 to `newv`. */
static const int cmps[6] = {SHMEM_CMP_EQ, SHMEM_CMP_NE, SHMEM_CMP_GT,
                            SHMEM_CMP_GE, SHMEM_CMP_LT, SHMEM_CMP_LE};
static const int cmpv[6] = {20, 10, 15, 15, 5, 5};
static const int newv[6] = {20, 11, 16, 15, 4, 5};

/* The writers do not quiet: a waiting PE sees a blocking AMO or put by itself. */
#define AMO_SET(T, NAME)                                                                      \
    static void set_##NAME(T *p, T v, int pe) { shmem_##NAME##_atomic_set(p, v, pe); }
#define P_SET(T, NAME)                                                                        \
    static void set_##NAME(T *p, T v, int pe) { shmem_##NAME##_p(p, v, pe); }
CTEST_AMO_STD_TYPES(AMO_SET)
CTEST_P2P_DEPR_TYPES(P_SET)

#define DEFINE_SINGLE(T, NAME)                                                                \
    static void single_##NAME(void) {                                                         \
        T *ivar = (T *)(void *)area;                                                          \
        for (int c = 0; c < 6; c++) {                                                         \
            *ivar = (T)10;                                                                    \
            ctest_barrier();                                                                  \
            CHECK(shmem_##NAME##_test(ivar, cmps[c], (T)cmpv[c]) == 0,                        \
                  #NAME "_test cmp %d satisfied before the update", cmps[c]);                 \
            ctest_barrier();                                                                  \
            set_##NAME(ivar, (T)newv[c], right);                                              \
            if (c % 2 == 0) {                                                                 \
                shmem_##NAME##_wait_until(ivar, cmps[c], (T)cmpv[c]);                         \
            } else {                                                                          \
                double t0 = ctest_now();                                                      \
                while (!shmem_##NAME##_test(ivar, cmps[c], (T)cmpv[c]))                       \
                    CHECK(ctest_now() - t0 < TIMEOUT_S, #NAME "_test cmp %d never satisfied", \
                          cmps[c]);                                                           \
            }                                                                                 \
            CHECK(*(volatile T *)ivar == (T)newv[c], #NAME " cmp %d: value %lld after the wait", \
                  cmps[c], (long long)*(volatile T *)ivar);                                   \
            ctest_barrier();                                                                  \
        }                                                                                     \
    }
CTEST_AMO_STD_TYPES(DEFINE_SINGLE)
CTEST_P2P_DEPR_TYPES(DEFINE_SINGLE)

/* Sets elements of the right neighbour's array: `mask` bit i -> iv[i] = vals[i]. */
#define DEFINE_MULTI(T, NAME)                                                                 \
    static void set_some_##NAME(T *iv, unsigned mask, const T *vals) {                        \
        for (int i = 0; i < 5; i++)                                                           \
            if (mask & (1u << i)) {                                                           \
                shmem_##NAME##_atomic_set(&iv[i], vals[i], right);                            \
                shmem_fence();                                                                \
            }                                                                                 \
    }                                                                                         \
    static void multi_##NAME(void) {                                                          \
        T *iv = (T *)(void *)area;                                                            \
        const int status[5] = {0, 1, 0, 0, 0}; /* element 1 excluded */                       \
        const int none[5] = {1, 1, 1, 1, 1};                                                  \
        const T ones[5] = {1, 1, 1, 1, 1};                                                    \
        T vec[5] = {1, 2, 3, 4, 5};                                                           \
        size_t idx[5];                                                                        \
        for (int vector = 0; vector < 2; vector++) {                                          \
            const T *vals = vector ? vec : ones;                                              \
            /* _all */                                                                        \
            for (int i = 0; i < 5; i++)                                                       \
                iv[i] = 0;                                                                    \
            ctest_barrier();                                                                  \
            if (vector) {                                                                     \
                CHECK(shmem_##NAME##_test_all_vector(iv, 5, status, SHMEM_CMP_EQ, vec) == 0,  \
                      #NAME "_test_all_vector before the update");                            \
                CHECK(shmem_##NAME##_test_any_vector(iv, 5, status, SHMEM_CMP_EQ, vec) == SIZE_MAX, \
                      #NAME "_test_any_vector before the update");                            \
                CHECK(shmem_##NAME##_test_some_vector(iv, 5, idx, status, SHMEM_CMP_EQ, vec) == 0, \
                      #NAME "_test_some_vector before the update");                           \
            } else {                                                                          \
                CHECK(shmem_##NAME##_test_all(iv, 5, status, SHMEM_CMP_EQ, 1) == 0,           \
                      #NAME "_test_all before the update");                                   \
                CHECK(shmem_##NAME##_test_any(iv, 5, status, SHMEM_CMP_EQ, 1) == SIZE_MAX,    \
                      #NAME "_test_any before the update");                                   \
                CHECK(shmem_##NAME##_test_some(iv, 5, idx, status, SHMEM_CMP_EQ, 1) == 0,     \
                      #NAME "_test_some before the update");                                  \
            }                                                                                 \
            ctest_barrier();                                                                  \
            set_some_##NAME(iv, 0x1d, vals); /* all but the excluded element 1 */             \
            if (vector) {                                                                     \
                shmem_##NAME##_wait_until_all_vector(iv, 5, status, SHMEM_CMP_EQ, vec);       \
                CHECK(shmem_##NAME##_test_all_vector(iv, 5, status, SHMEM_CMP_EQ, vec) == 1,  \
                      #NAME "_test_all_vector after the update");                             \
            } else {                                                                          \
                shmem_##NAME##_wait_until_all(iv, 5, status, SHMEM_CMP_EQ, 1);                \
                CHECK(shmem_##NAME##_test_all(iv, 5, status, SHMEM_CMP_EQ, 1) == 1,           \
                      #NAME "_test_all after the update");                                    \
            }                                                                                 \
            for (int i = 0; i < 5; i++)                                                       \
                CHECK(iv[i] == (i == 1 ? (T)0 : vals[i]), #NAME " _all: element %d", i);      \
            ctest_barrier();                                                                  \
            /* _any: the excluded element is set first and must never be reported. */        \
            for (int i = 0; i < 5; i++)                                                       \
                iv[i] = 0;                                                                    \
            ctest_barrier();                                                                  \
            set_some_##NAME(iv, 0x2, vals);                                                   \
            set_some_##NAME(iv, 0x8, vals);                                                   \
            size_t got = vector                                                               \
                ? shmem_##NAME##_wait_until_any_vector(iv, 5, status, SHMEM_CMP_EQ, vec)      \
                : shmem_##NAME##_wait_until_any(iv, 5, status, SHMEM_CMP_EQ, 1);              \
            CHECK(got == 3, #NAME " wait_until_any%s returned %zu, expected 3",               \
                  vector ? "_vector" : "", got);                                              \
            got = vector ? shmem_##NAME##_test_any_vector(iv, 5, status, SHMEM_CMP_EQ, vec)   \
                         : shmem_##NAME##_test_any(iv, 5, status, SHMEM_CMP_EQ, 1);           \
            CHECK(got == 3, #NAME " test_any%s returned %zu, expected 3", vector ? "_vector" : "", \
                  got);                                                                       \
            ctest_barrier();                                                                  \
            /* _some: elements 0 and 4 (and the excluded 1); every one reported. */           \
            for (int i = 0; i < 5; i++)                                                       \
                iv[i] = 0;                                                                    \
            ctest_barrier();                                                                  \
            set_some_##NAME(iv, 0x13, vals);                                                  \
            int seen0 = 0, seen4 = 0;                                                         \
            double t0 = ctest_now();                                                          \
            while (!(seen0 && seen4)) {                                                       \
                CHECK(ctest_now() - t0 < TIMEOUT_S, #NAME " _some never reported both");      \
                size_t n = vector ? shmem_##NAME##_wait_until_some_vector(                    \
                                        iv, 5, idx, status, SHMEM_CMP_EQ, vec)                \
                                  : shmem_##NAME##_wait_until_some(iv, 5, idx, status,        \
                                                                   SHMEM_CMP_EQ, 1);          \
                CHECK(n >= 1 && n <= 2, #NAME " wait_until_some returned %zu", n);            \
                for (size_t k = 0; k < n; k++) {                                              \
                    CHECK(idx[k] == 0 || idx[k] == 4, #NAME " _some reported index %zu",      \
                          idx[k]);                                                            \
                    seen0 |= idx[k] == 0;                                                     \
                    seen4 |= idx[k] == 4;                                                     \
                }                                                                             \
            }                                                                                 \
            size_t n = vector                                                                 \
                ? shmem_##NAME##_test_some_vector(iv, 5, idx, status, SHMEM_CMP_EQ, vec)      \
                : shmem_##NAME##_test_some(iv, 5, idx, status, SHMEM_CMP_EQ, 1);              \
            CHECK(n == 2 && ((idx[0] == 0 && idx[1] == 4) || (idx[0] == 4 && idx[1] == 0)),   \
                  #NAME " test_some%s after both updates: %zu", vector ? "_vector" : "", n);  \
            ctest_barrier();                                                                  \
        }                                                                                     \
        /* NULL status: every element counts. */                                              \
        for (int i = 0; i < 5; i++)                                                           \
            iv[i] = 0;                                                                        \
        ctest_barrier();                                                                      \
        set_some_##NAME(iv, 0x1f, ones);                                                      \
        shmem_##NAME##_wait_until_all(iv, 5, NULL, SHMEM_CMP_EQ, 1);                          \
        CHECK(shmem_##NAME##_test_all(iv, 5, NULL, SHMEM_CMP_EQ, 1) == 1,                     \
              #NAME "_test_all with NULL status");                                            \
        CHECK(shmem_##NAME##_test_some(iv, 5, idx, NULL, SHMEM_CMP_EQ, 1) == 5,               \
              #NAME "_test_some with NULL status");                                           \
        ctest_barrier();                                                                      \
        /* Empty sets: nothing to wait for. */                                                \
        shmem_##NAME##_wait_until_all(NULL, 0, NULL, SHMEM_CMP_EQ, 1);                        \
        shmem_##NAME##_wait_until_all_vector(NULL, 0, NULL, SHMEM_CMP_EQ, NULL);              \
        CHECK(shmem_##NAME##_wait_until_any(NULL, 0, NULL, SHMEM_CMP_EQ, 1) == SIZE_MAX,      \
              #NAME "_wait_until_any on an empty set");                                       \
        CHECK(shmem_##NAME##_wait_until_any_vector(NULL, 0, NULL, SHMEM_CMP_EQ, NULL) == SIZE_MAX, \
              #NAME "_wait_until_any_vector on an empty set");                                \
        CHECK(shmem_##NAME##_wait_until_some(NULL, 0, NULL, NULL, SHMEM_CMP_EQ, 1) == 0,      \
              #NAME "_wait_until_some on an empty set");                                      \
        CHECK(shmem_##NAME##_wait_until_some_vector(NULL, 0, NULL, NULL, SHMEM_CMP_EQ, NULL) == 0, \
              #NAME "_wait_until_some_vector on an empty set");                               \
        CHECK(shmem_##NAME##_test_all(NULL, 0, NULL, SHMEM_CMP_EQ, 1) == 1,                   \
              #NAME "_test_all on an empty set");                                             \
        CHECK(shmem_##NAME##_test_all_vector(NULL, 0, NULL, SHMEM_CMP_EQ, NULL) == 1,         \
              #NAME "_test_all_vector on an empty set");                                      \
        CHECK(shmem_##NAME##_test_any(NULL, 0, NULL, SHMEM_CMP_EQ, 1) == SIZE_MAX,            \
              #NAME "_test_any on an empty set");                                             \
        CHECK(shmem_##NAME##_test_any_vector(NULL, 0, NULL, SHMEM_CMP_EQ, NULL) == SIZE_MAX,  \
              #NAME "_test_any_vector on an empty set");                                      \
        CHECK(shmem_##NAME##_test_some(NULL, 0, NULL, NULL, SHMEM_CMP_EQ, 1) == 0,            \
              #NAME "_test_some on an empty set");                                            \
        CHECK(shmem_##NAME##_test_some_vector(NULL, 0, NULL, NULL, SHMEM_CMP_EQ, NULL) == 0,  \
              #NAME "_test_some_vector on an empty set");                                     \
        /* A mask that excludes everything is an empty set too (values unsatisfied). */      \
        for (int i = 0; i < 5; i++)                                                           \
            iv[i] = 0;                                                                        \
        shmem_##NAME##_wait_until_all(iv, 5, none, SHMEM_CMP_EQ, 1);                          \
        CHECK(shmem_##NAME##_wait_until_any(iv, 5, none, SHMEM_CMP_EQ, 1) == SIZE_MAX,        \
              #NAME "_wait_until_any with everything excluded");                              \
        CHECK(shmem_##NAME##_wait_until_some(iv, 5, idx, none, SHMEM_CMP_EQ, 1) == 0,         \
              #NAME "_wait_until_some with everything excluded");                             \
        CHECK(shmem_##NAME##_test_all(iv, 5, none, SHMEM_CMP_EQ, 1) == 1,                     \
              #NAME "_test_all with everything excluded");                                    \
        ctest_barrier();                                                                      \
    }
CTEST_AMO_STD_TYPES(DEFINE_MULTI)

/* The deprecated waits. */
#define DEFINE_WAIT_DEPR(T, NAME)                                                             \
    static void wait_depr_##NAME(void) {                                                      \
        T *ivar = (T *)(void *)area;                                                          \
        *ivar = 0;                                                                            \
        ctest_barrier();                                                                      \
        shmem_##NAME##_p(ivar, (T)9, right);                                                  \
        shmem_##NAME##_wait(ivar, (T)0);                                                      \
        CHECK(*(volatile T *)ivar == (T)9, "shmem_" #NAME "_wait returned early");            \
        ctest_barrier();                                                                      \
    }
CTEST_WAIT_DEPR_TYPES(DEFINE_WAIT_DEPR)

static void long_wait_depr(void) {
    long *ivar = (long *)(void *)area;
    *ivar = 0;
    ctest_barrier();
    shmem_long_atomic_set(ivar, 3, right);
    shmem_wait(ivar, 0);
    CHECK(*(volatile long *)ivar == 3, "shmem_wait returned early");
    ctest_barrier();
    shmem_long_atomic_add(ivar, 4, right);
    shmem_wait_until(ivar, SHMEM_CMP_GE, 7);
    CHECK(*(volatile long *)ivar == 7, "shmem_wait_until returned early");
    ctest_barrier();
}

int main(void) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    right = (me + 1) % npes;
    area = (char *)shmem_align(16, 16 * 8);
    CHECK(area != NULL, "shmem_align returned NULL");

#define RUN_SINGLE(T, NAME) single_##NAME();
#define RUN_MULTI(T, NAME) multi_##NAME();
#define RUN_WAIT(T, NAME) wait_depr_##NAME();
    CTEST_AMO_STD_TYPES(RUN_SINGLE)
    CTEST_P2P_DEPR_TYPES(RUN_SINGLE)
    CTEST_AMO_STD_TYPES(RUN_MULTI)
    CTEST_WAIT_DEPR_TYPES(RUN_WAIT)
    long_wait_depr();

    ctest_barrier();
    shmem_free(area);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
