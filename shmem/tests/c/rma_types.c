/*
 * rma_types.c - the typed RMA routines (OpenSHMEM 1.5 §9.5, §9.6) for every one of the 24
 * standard RMA types: put, p, iput, get, g, iget, put_nbi, get_nbi, each also as the
 * shmem_ctx_ twin on SHMEM_CTX_DEFAULT and on a created context.  Every PE writes to its
 * right neighbour and reads from it; values depend on the writer, the element and the
 * routine, so a value landing in the wrong place or from the wrong PE is caught.
 */
#define CTEST_NAME "rma_types"
#include "ctest.h"

enum { N = 8, NS = 3 }; /* elements per transfer; strided: NS elements */

static int me, npes, right, left;
static shmem_ctx_t ctx;

/* The value PE `pe` sends as element i of routine number `r` (small integers: exact in
 * every type, char included). */
#define VAL(T, pe, r, i) ((T)((pe) * 20 + (r) * 3 + (i) % 3 + 1))

/* One routine form: F is shmem_TYPENAME_op or a ctx twin bound by a wrapper macro. */
#define DEFINE_RMA_TEST(T, NAME)                                                              \
    static void test_##NAME(void) {                                                           \
        T *sym = (T *)shmem_calloc(4 * N, sizeof(T)); /* [dest | src | strided | scratch] */  \
        CHECK(sym != NULL, #NAME ": shmem_calloc returned NULL");                             \
        T local[N], got[4 * N];                                                               \
        for (int form = 0; form < 3; form++) {                                                \
            shmem_ctx_t c = form == 1 ? SHMEM_CTX_DEFAULT : ctx;                              \
            for (int r = 0; r < 8; r++) {                                                     \
                for (int i = 0; i < 4 * N; i++)                                               \
                    sym[i] = (T)0;                                                            \
                for (int i = 0; i < N; i++) {                                                 \
                    sym[N + i] = VAL(T, me, r, i); /* source others get from */               \
                    local[i] = VAL(T, me, r, i);                                              \
                }                                                                             \
                for (int i = 0; i < 4 * N; i++)                                               \
                    got[i] = (T)0;                                                            \
                ctest_barrier();                                                              \
                switch (r) {                                                                  \
                case 0: /* put */                                                             \
                    if (form == 0)                                                            \
                        shmem_##NAME##_put(sym, local, N, right);                             \
                    else                                                                      \
                        shmem_ctx_##NAME##_put(c, sym, local, N, right);                      \
                    break;                                                                    \
                case 1: /* p */                                                               \
                    for (int i = 0; i < N; i++) {                                             \
                        if (form == 0)                                                        \
                            shmem_##NAME##_p(&sym[i], local[i], right);                       \
                        else                                                                  \
                            shmem_ctx_##NAME##_p(c, &sym[i], local[i], right);                \
                    }                                                                         \
                    break;                                                                    \
                case 2: /* iput: source stride 2, dest stride 3 */                            \
                    if (form == 0)                                                            \
                        shmem_##NAME##_iput(&sym[2 * N], local, 3, 2, NS, right);             \
                    else                                                                      \
                        shmem_ctx_##NAME##_iput(c, &sym[2 * N], local, 3, 2, NS, right);      \
                    break;                                                                    \
                case 3: /* put_nbi */                                                         \
                    if (form == 0)                                                            \
                        shmem_##NAME##_put_nbi(sym, local, N, right);                         \
                    else                                                                      \
                        shmem_ctx_##NAME##_put_nbi(c, sym, local, N, right);                  \
                    break;                                                                    \
                case 4: /* get */                                                             \
                    if (form == 0)                                                            \
                        shmem_##NAME##_get(got, &sym[N], N, right);                           \
                    else                                                                      \
                        shmem_ctx_##NAME##_get(c, got, &sym[N], N, right);                    \
                    break;                                                                    \
                case 5: /* g */                                                               \
                    for (int i = 0; i < N; i++)                                               \
                        got[i] = form == 0 ? shmem_##NAME##_g(&sym[N + i], right)             \
                                           : shmem_ctx_##NAME##_g(c, &sym[N + i], right);     \
                    break;                                                                    \
                case 6: /* iget: source stride 2, dest stride 3 */                            \
                    if (form == 0)                                                            \
                        shmem_##NAME##_iget(got, &sym[N], 3, 2, NS, right);                   \
                    else                                                                      \
                        shmem_ctx_##NAME##_iget(c, got, &sym[N], 3, 2, NS, right);            \
                    break;                                                                    \
                case 7: /* get_nbi: complete at quiet */                                      \
                    if (form == 0) {                                                          \
                        shmem_##NAME##_get_nbi(got, &sym[N], N, right);                       \
                        shmem_quiet();                                                        \
                    } else {                                                                  \
                        shmem_ctx_##NAME##_get_nbi(c, got, &sym[N], N, right);                \
                        shmem_ctx_quiet(c);                                                   \
                    }                                                                         \
                    break;                                                                    \
                }                                                                             \
                if (form != 0)                                                                \
                    shmem_ctx_quiet(c);                                                       \
                ctest_barrier();                                                              \
                for (int i = 0; i < N; i++) {                                                 \
                    T want_put = VAL(T, left, r, i), want_get = VAL(T, right, r, i);          \
                    if (r == 0 || r == 1 || r == 3)                                           \
                        CHECK(sym[i] == want_put, #NAME " routine %d form %d: dest[%d] wrong", \
                              r, form, i);                                                    \
                    if (r == 4 || r == 5 || r == 7)                                           \
                        CHECK(got[i] == want_get, #NAME " routine %d form %d: got[%d] wrong", \
                              r, form, i);                                                    \
                }                                                                             \
                for (int i = 0; i < 3 * NS; i++) {                                            \
                    /* strided: element k lands at 3k, taken from 2k; the rest untouched */   \
                    T want_put = i % 3 == 0 ? VAL(T, left, r, 2 * (i / 3)) : (T)0;            \
                    T want_get = i % 3 == 0 ? VAL(T, right, r, 2 * (i / 3)) : (T)0;           \
                    if (r == 2)                                                               \
                        CHECK(sym[2 * N + i] == want_put, #NAME " iput form %d: [%d] wrong",  \
                              form, i);                                                       \
                    if (r == 6)                                                               \
                        CHECK(got[i] == want_get, #NAME " iget form %d: [%d] wrong", form, i); \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        ctest_barrier();                                                                      \
        shmem_free(sym);                                                                      \
    }
CTEST_RMA_TYPES(DEFINE_RMA_TEST)

int main(void) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    right = (me + 1) % npes;
    left = (me + npes - 1) % npes;
    CHECK(shmem_ctx_create(0, &ctx) == 0 && ctx != SHMEM_CTX_INVALID, "shmem_ctx_create failed");

#define RUN(T, NAME) test_##NAME();
    CTEST_RMA_TYPES(RUN)

    shmem_ctx_destroy(ctx);
    ctest_barrier();
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
