/*
 * rma_blocks.c - the interleaved block transfers of OpenSHMEM 1.6 (§9.6.1.4 SHMEM_IBPUT,
 * SHMEM_IBGET): shmem_TYPENAME_ibput/ibget for every one of the 24 standard RMA types and
 * shmem_ibput/ibget{8,16,32,64,128}, each also as the shmem_ctx_ twin on
 * SHMEM_CTX_DEFAULT and on a created context, and the C11 generics shmem_ibput/shmem_ibget
 * with and without a context.  Every PE writes to its right neighbour and reads from it
 * (on the two-node cases half of the pairs cross the nodes), over several shapes: blocks
 * of one element (the iput case), contiguous at the destination, contiguous on both
 * sides, gaps on both sides, and sparse blocks far apart (beyond the dense read of
 * ibget).  Every element of the destination is checked: each block element from the
 * right source element, every gap and everything after the last block untouched.  Zero
 * blocks or an empty block do nothing and dereference nothing.  A symmetric source (which
 * an RDMA WRITE over verbs may read in place) of blocks larger than any inline limit is
 * rewritten as soon as shmem_long_ibput returns, many times: the target must get the
 * values of the call, never the later ones.  (The software verbs device reads the source
 * when the write is posted, so there this case cannot catch an ibput that returns before
 * its writes completed: sending them with put_nbi passed it.  On an HCA it can.)
 *
 * With the argument "bad-stride" the program instead calls shmem_int_ibput with a
 * destination stride below the block size, which must be a fatal error naming the routine
 * (c_suite checks the exit status and the message).
 */
#define CTEST_NAME "rma_blocks"
#include "ctest.h"

static int me, npes, right, left;
static shmem_ctx_t ctx;

/* A block shape: bsize elements per block, nblocks blocks, block starts dst and sst
 * elements apart at the destination and at the source. */
struct shape {
    size_t bsize, nblocks;
    ptrdiff_t dst, sst;
};
static const struct shape shapes[] = {
    {1, 5, 3, 2},         /* one element per block: shmem_iput */
    {3, 4, 3, 5},         /* contiguous at the destination */
    {4, 3, 4, 4},         /* contiguous on both sides */
    {2, 6, 7, 3},         /* gaps on both sides */
    {5, 2, 11, 5},        /* contiguous source, gaps at the destination */
    {3, 3, 9000, 20000},  /* sparse: far apart on both sides */
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0], FORMS = 5 };

/* Elements spanned by n blocks of b elements whose starts are s apart, plus 2 after. */
static size_t span(const struct shape *sh, ptrdiff_t s) {
    return (sh->nblocks - 1) * (size_t)s + sh->bsize + 2;
}

/* The destination element d of a shape: the source index it takes, or -1 in a gap. */
static long source_of(const struct shape *sh, size_t d) {
    size_t j = d / (size_t)sh->dst, k = d % (size_t)sh->dst;
    if (j >= sh->nblocks || k >= sh->bsize)
        return -1;
    return (long)(j * (size_t)sh->sst + k);
}

/* The value PE `pe` holds at source index i for shape s (small integers, never 0: exact
 * in every type, char included; 0 marks the gaps). */
#define VAL(T, pe, s, i) ((T)(((pe) * 37 + (s) * 11 + (i)) % 100 + 1))

/* Forms: 0 shmem_TYPENAME_*, 1 shmem_ctx_* on SHMEM_CTX_DEFAULT, 2 shmem_ctx_* on a
 * created context, 3 the generic without a context, 4 the generic with the created one. */
#define DEFINE_BLOCK_TEST(T, NAME)                                                            \
    static void test_##NAME(void) {                                                           \
        for (int s = 0; s < NSHAPES; s++) {                                                   \
            const struct shape *sh = &shapes[s];                                              \
            size_t dlen = span(sh, sh->dst), slen = span(sh, sh->sst);                        \
            size_t len = dlen > slen ? dlen : slen;                                           \
            T *sym = (T *)shmem_calloc(2 * len, sizeof(T)); /* [dest | source] */             \
            T *local = (T *)malloc(len * sizeof(T)), *got = (T *)malloc(len * sizeof(T));     \
            CHECK(sym != NULL && local != NULL && got != NULL, #NAME ": allocation failed");  \
            for (int form = 0; form < FORMS; form++) {                                        \
                shmem_ctx_t c = form == 1 ? SHMEM_CTX_DEFAULT : ctx;                          \
                for (size_t i = 0; i < len; i++) {                                            \
                    sym[i] = (T)0;                                                            \
                    sym[len + i] = VAL(T, me, s, i);                                          \
                    local[i] = VAL(T, me, s, i);                                              \
                    got[i] = (T)0;                                                            \
                }                                                                             \
                ctest_barrier();                                                              \
                switch (form) {                                                               \
                case 0:                                                                       \
                    shmem_##NAME##_ibput(sym, local, sh->dst, sh->sst, sh->bsize,             \
                                         sh->nblocks, right);                                 \
                    shmem_##NAME##_ibget(got, sym + len, sh->dst, sh->sst, sh->bsize,         \
                                         sh->nblocks, right);                                 \
                    break;                                                                    \
                case 1:                                                                       \
                case 2:                                                                       \
                    shmem_ctx_##NAME##_ibput(c, sym, local, sh->dst, sh->sst, sh->bsize,      \
                                             sh->nblocks, right);                             \
                    shmem_ctx_##NAME##_ibget(c, got, sym + len, sh->dst, sh->sst, sh->bsize,  \
                                             sh->nblocks, right);                             \
                    shmem_ctx_quiet(c);                                                       \
                    break;                                                                    \
                case 3:                                                                       \
                    shmem_ibput(sym, local, sh->dst, sh->sst, sh->bsize, sh->nblocks, right); \
                    shmem_ibget(got, sym + len, sh->dst, sh->sst, sh->bsize, sh->nblocks,     \
                                right);                                                       \
                    break;                                                                    \
                default:                                                                      \
                    shmem_ibput(ctx, sym, local, sh->dst, sh->sst, sh->bsize, sh->nblocks,    \
                                right);                                                       \
                    shmem_ibget(ctx, got, sym + len, sh->dst, sh->sst, sh->bsize,             \
                                sh->nblocks, right);                                          \
                    shmem_ctx_quiet(ctx);                                                     \
                    break;                                                                    \
                }                                                                             \
                ctest_barrier();                                                              \
                for (size_t d = 0; d < len; d++) {                                            \
                    long i = source_of(sh, d);                                                \
                    T want_put = i < 0 ? (T)0 : VAL(T, left, s, i);                           \
                    T want_get = i < 0 ? (T)0 : VAL(T, right, s, i);                          \
                    CHECK(sym[d] == want_put,                                                 \
                          #NAME "_ibput shape %d form %d: dest[%zu] wrong (source %ld)", s,   \
                          form, d, i);                                                        \
                    CHECK(got[d] == want_get,                                                 \
                          #NAME "_ibget shape %d form %d: dest[%zu] wrong (source %ld)", s,   \
                          form, d, i);                                                        \
                }                                                                             \
                ctest_barrier();                                                              \
            }                                                                                 \
            free(local);                                                                      \
            free(got);                                                                        \
            shmem_free(sym);                                                                  \
        }                                                                                     \
    }
CTEST_RMA_TYPES(DEFINE_BLOCK_TEST)

/* Byte b of element i that PE `pe` holds for shape s. */
static unsigned char pat(int pe, int s, size_t i, size_t b) {
    return (unsigned char)((pe * 61 + s * 17 + (int)((i * 7 + b * 3) % 251)) % 255 + 1);
}

typedef void (*ib_fn)(void *, const void *, ptrdiff_t, ptrdiff_t, size_t, size_t, int);
typedef void (*ib_ctx_fn)(shmem_ctx_t, void *, const void *, ptrdiff_t, ptrdiff_t, size_t,
                          size_t, int);

/* The sized routines of E-byte elements: plain (form 0) and ctx forms (1, 2). */
static void test_sized(size_t E, const char *name, ib_fn put, ib_fn get, ib_ctx_fn ctx_put,
                       ib_ctx_fn ctx_get) {
    for (int s = 0; s < NSHAPES; s++) {
        const struct shape *sh = &shapes[s];
        size_t dlen = span(sh, sh->dst), slen = span(sh, sh->sst);
        size_t len = dlen > slen ? dlen : slen, bytes = len * E;
        unsigned char *sym = (unsigned char *)shmem_calloc(2 * len, E);
        unsigned char *local = (unsigned char *)malloc(bytes), *got = (unsigned char *)malloc(bytes);
        CHECK(sym != NULL && local != NULL && got != NULL, "%s: allocation failed", name);
        for (int form = 0; form < 3; form++) {
            shmem_ctx_t c = form == 1 ? SHMEM_CTX_DEFAULT : ctx;
            memset(sym, 0, bytes);
            memset(got, 0, bytes);
            for (size_t i = 0; i < len; i++)
                for (size_t b = 0; b < E; b++)
                    sym[bytes + i * E + b] = local[i * E + b] = pat(me, s, i, b);
            ctest_barrier();
            if (form == 0) {
                put(sym, local, sh->dst, sh->sst, sh->bsize, sh->nblocks, right);
                get(got, sym + bytes, sh->dst, sh->sst, sh->bsize, sh->nblocks, right);
            } else {
                ctx_put(c, sym, local, sh->dst, sh->sst, sh->bsize, sh->nblocks, right);
                ctx_get(c, got, sym + bytes, sh->dst, sh->sst, sh->bsize, sh->nblocks, right);
                shmem_ctx_quiet(c);
            }
            ctest_barrier();
            for (size_t d = 0; d < len; d++) {
                long i = source_of(sh, d);
                for (size_t b = 0; b < E; b++) {
                    unsigned char want_put = i < 0 ? 0 : pat(left, s, (size_t)i, b);
                    unsigned char want_get = i < 0 ? 0 : pat(right, s, (size_t)i, b);
                    CHECK(sym[d * E + b] == want_put,
                          "ibput%s shape %d form %d: dest[%zu] byte %zu wrong (source %ld)",
                          name, s, form, d, b, i);
                    CHECK(got[d * E + b] == want_get,
                          "ibget%s shape %d form %d: dest[%zu] byte %zu wrong (source %ld)",
                          name, s, form, d, b, i);
                }
            }
            ctest_barrier();
        }
        free(local);
        free(got);
        shmem_free(sym);
    }
}

/* Zero blocks or an empty block: nothing happens, NULL is never dereferenced, and the
 * strides (even invalid ones) are not looked at. */
static void test_empty(void) {
    int pe = right;
    shmem_int_ibput(NULL, NULL, 0, 0, 3, 0, pe);
    shmem_int_ibget(NULL, NULL, 0, 0, 3, 0, pe);
    shmem_int_ibput(NULL, NULL, 1, 1, 0, 4, pe);
    shmem_int_ibget(NULL, NULL, 1, 1, 0, 4, pe);
    shmem_ctx_double_ibput(ctx, NULL, NULL, -1, -1, 2, 0, pe);
    shmem_ctx_double_ibget(SHMEM_CTX_DEFAULT, NULL, NULL, -1, -1, 0, 2, pe);
    shmem_ibput8(NULL, NULL, 0, 0, 0, 0, pe);
    shmem_ibget16(NULL, NULL, 0, 0, 1, 0, pe);
    shmem_ctx_ibput32(ctx, NULL, NULL, 0, 0, 0, 1, pe);
    shmem_ctx_ibget64(ctx, NULL, NULL, 0, 0, 1, 0, pe);
    shmem_ibput128(NULL, NULL, 0, 0, 0, 0, pe);
    shmem_ctx_ibget128(ctx, NULL, NULL, 0, 0, 0, 0, pe);
}

/* The source may be reused when ibput returns, also when it is symmetric memory (an RDMA
 * WRITE over verbs reads it in place): 8 blocks of 96 longs (768 bytes, above any inline
 * limit) with gaps, from a symmetric array rewritten right after each call. */
static void test_reuse(void) {
    enum { B = 96, N = 8, DST = 100, SST = 96, ROUNDS = 20 };
    long *dst = (long *)shmem_calloc(N * DST, sizeof(long));
    long *src = (long *)shmem_calloc(N * SST, sizeof(long));
    CHECK(dst && src, "shmem_calloc for the reuse test returned NULL");
    for (long r = 1; r <= ROUNDS; r++) {
        for (int i = 0; i < N * SST; i++)
            src[i] = r << 32 | (long)me << 16 | i;
        shmem_long_ibput(dst, src, DST, SST, B, N, right);
        for (int i = 0; i < N * SST; i++)
            src[i] = -1; /* reused at once */
        shmem_quiet();
        shmem_barrier_all();
        for (int j = 0; j < N; j++)
            for (int k = 0; k < B; k++) {
                long want = r << 32 | (long)left << 16 | (j * SST + k);
                CHECK(dst[j * DST + k] == want,
                      "round %ld: block %d element %d is %#lx, expected %#lx (a source "
                      "rewritten after ibput returned was sent)",
                      r, j, k, (unsigned long)dst[j * DST + k], (unsigned long)want);
            }
        shmem_barrier_all();
    }
    shmem_free(src);
    shmem_free(dst);
}

int main(int argc, char **argv) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    right = (me + 1) % npes;
    left = (me + npes - 1) % npes;

    if (argc > 1 && strcmp(argv[1], "bad-stride") == 0) {
        /* A destination stride of 2 with blocks of 3: fatal, naming the routine. */
        int *sym = (int *)shmem_calloc(16, sizeof(int));
        int local[16] = {0};
        shmem_int_ibput(sym, local, 2, 3, 3, 2, right);
        CHECK(0, "shmem_int_ibput with a stride below the block size returned");
    }

    CHECK(shmem_ctx_create(0, &ctx) == 0 && ctx != SHMEM_CTX_INVALID, "shmem_ctx_create failed");

#define RUN(T, NAME) test_##NAME();
    CTEST_RMA_TYPES(RUN)
    test_sized(1, "8", shmem_ibput8, shmem_ibget8, shmem_ctx_ibput8, shmem_ctx_ibget8);
    test_sized(2, "16", shmem_ibput16, shmem_ibget16, shmem_ctx_ibput16, shmem_ctx_ibget16);
    test_sized(4, "32", shmem_ibput32, shmem_ibget32, shmem_ctx_ibput32, shmem_ctx_ibget32);
    test_sized(8, "64", shmem_ibput64, shmem_ibget64, shmem_ctx_ibput64, shmem_ctx_ibget64);
    test_sized(16, "128", shmem_ibput128, shmem_ibget128, shmem_ctx_ibput128,
               shmem_ctx_ibget128);
    test_empty();
    test_reuse();

    shmem_ctx_destroy(ctx);
    ctest_barrier();
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
