/*
 * rma_sized.c - the sized and untyped RMA routines (OpenSHMEM 1.5 §9.5, §9.6): put8 ...
 * put128, get, iput, iget, put_nbi, get_nbi of each size and putmem/getmem(_nbi), all also
 * as shmem_ctx_ twins; odd lengths and unaligned byte offsets for the mem forms; and every
 * routine called with zero elements and NULL buffers, which must do nothing and never
 * dereference them.
 */
#define CTEST_NAME "rma_sized"
#include "ctest.h"

enum { N = 7, NS = 3, BYTES = 16 * N * 3 };

static int me, npes, right, left;
static shmem_ctx_t ctx;

/* Byte i of what PE `pe` sends in round `r`. */
static unsigned char pat(int pe, int r, size_t i) {
    return (unsigned char)(pe * 61 + r * 17 + (int)(i * 7 % 251) + 1);
}

/* One size: S bits, E bytes per element. */
#define DEFINE_SIZED(S)                                                                       \
    static void test_##S(unsigned char *sym) {                                                \
        const size_t E = S / 8;                                                               \
        unsigned char local[BYTES], got[BYTES];                                               \
        for (int form = 0; form < 3; form++) {                                                \
            shmem_ctx_t c = form == 1 ? SHMEM_CTX_DEFAULT : ctx;                              \
            for (int r = 0; r < 6; r++) {                                                     \
                memset(sym, 0, 2 * BYTES);                                                    \
                for (size_t i = 0; i < BYTES; i++) {                                          \
                    sym[BYTES + i] = pat(me, r, i);                                           \
                    local[i] = pat(me, r, i);                                                 \
                }                                                                             \
                memset(got, 0, sizeof got);                                                   \
                ctest_barrier();                                                              \
                switch (r) {                                                                  \
                case 0:                                                                       \
                    if (form == 0)                                                            \
                        shmem_put##S(sym, local, N, right);                                   \
                    else                                                                      \
                        shmem_ctx_put##S(c, sym, local, N, right);                            \
                    break;                                                                    \
                case 1:                                                                       \
                    if (form == 0)                                                            \
                        shmem_iput##S(sym, local, 3, 2, NS, right);                           \
                    else                                                                      \
                        shmem_ctx_iput##S(c, sym, local, 3, 2, NS, right);                    \
                    break;                                                                    \
                case 2:                                                                       \
                    if (form == 0)                                                            \
                        shmem_put##S##_nbi(sym, local, N, right);                             \
                    else                                                                      \
                        shmem_ctx_put##S##_nbi(c, sym, local, N, right);                      \
                    break;                                                                    \
                case 3:                                                                       \
                    if (form == 0)                                                            \
                        shmem_get##S(got, sym + BYTES, N, right);                             \
                    else                                                                      \
                        shmem_ctx_get##S(c, got, sym + BYTES, N, right);                      \
                    break;                                                                    \
                case 4:                                                                       \
                    if (form == 0)                                                            \
                        shmem_iget##S(got, sym + BYTES, 3, 2, NS, right);                     \
                    else                                                                      \
                        shmem_ctx_iget##S(c, got, sym + BYTES, 3, 2, NS, right);              \
                    break;                                                                    \
                case 5:                                                                       \
                    if (form == 0) {                                                          \
                        shmem_get##S##_nbi(got, sym + BYTES, N, right);                       \
                        shmem_quiet();                                                        \
                    } else {                                                                  \
                        shmem_ctx_get##S##_nbi(c, got, sym + BYTES, N, right);                \
                        shmem_ctx_quiet(c);                                                   \
                    }                                                                         \
                    break;                                                                    \
                }                                                                             \
                if (form != 0)                                                                \
                    shmem_ctx_quiet(c);                                                       \
                ctest_barrier();                                                              \
                const unsigned char *seen = r < 3 ? sym : got;                                \
                int from = r < 3 ? left : right;                                              \
                int strided = r == 1 || r == 4;                                               \
                for (size_t i = 0; i < (strided ? 3 * NS : N) * E; i++) {                     \
                    size_t el = i / E, byte = i % E;                                          \
                    unsigned char want;                                                       \
                    if (!strided)                                                             \
                        want = pat(from, r, i);                                               \
                    else if (el % 3 == 0)                                                     \
                        want = pat(from, r, (el / 3) * 2 * E + byte);                         \
                    else                                                                      \
                        want = 0;                                                             \
                    CHECK(seen[i] == want, "size %d routine %d form %d: byte %zu is %u, not %u", \
                          S, r, form, i, seen[i], want);                                      \
                }                                                                             \
                /* Nothing written past the transfer. */                                      \
                size_t end = (strided ? 3 * NS - 2 : N) * E;                                  \
                if (r < 3)                                                                    \
                    for (size_t i = end; i < BYTES; i++)                                      \
                        CHECK(sym[i] == 0, "size %d routine %d: byte %zu past the end written", \
                              S, r, i);                                                       \
            }                                                                                 \
        }                                                                                     \
    }
DEFINE_SIZED(8)
DEFINE_SIZED(16)
DEFINE_SIZED(32)
DEFINE_SIZED(64)
DEFINE_SIZED(128)

/* putmem/getmem (+ _nbi, + ctx) at odd byte offsets and lengths. */
static void test_mem(unsigned char *sym) {
    unsigned char local[BYTES], got[BYTES];
    size_t lens[4] = {1, 3, 77, BYTES - 5};
    for (int form = 0; form < 2; form++) {
        for (int li = 0; li < 4; li++) {
            size_t len = lens[li];
            for (int r = 0; r < 4; r++) {
                memset(sym, 0, 2 * BYTES);
                for (size_t i = 0; i < BYTES; i++) {
                    sym[BYTES + i] = pat(me, r + 10 * li, i);
                    local[i] = pat(me, r + 10 * li, i);
                }
                memset(got, 0, sizeof got);
                ctest_barrier();
                switch (r) {
                case 0:
                    if (form == 0)
                        shmem_putmem(sym + 3, local + 1, len, right);
                    else
                        shmem_ctx_putmem(ctx, sym + 3, local + 1, len, right);
                    break;
                case 1:
                    if (form == 0)
                        shmem_putmem_nbi(sym + 3, local + 1, len, right);
                    else
                        shmem_ctx_putmem_nbi(ctx, sym + 3, local + 1, len, right);
                    break;
                case 2:
                    if (form == 0)
                        shmem_getmem(got + 3, sym + BYTES + 1, len, right);
                    else
                        shmem_ctx_getmem(ctx, got + 3, sym + BYTES + 1, len, right);
                    break;
                case 3:
                    if (form == 0) {
                        shmem_getmem_nbi(got + 3, sym + BYTES + 1, len, right);
                        shmem_quiet();
                    } else {
                        shmem_ctx_getmem_nbi(ctx, got + 3, sym + BYTES + 1, len, right);
                        shmem_ctx_quiet(ctx);
                    }
                    break;
                }
                shmem_ctx_quiet(ctx);
                ctest_barrier();
                const unsigned char *seen = r < 2 ? sym : got;
                int from = r < 2 ? left : right;
                for (size_t i = 0; i < BYTES; i++) {
                    unsigned char want = i >= 3 && i < 3 + len ? pat(from, r + 10 * li, i - 2) : 0;
                    CHECK(seen[i] == want, "mem routine %d form %d len %zu: byte %zu is %u, not %u",
                          r, form, len, i, seen[i], want);
                }
            }
        }
    }
}

/* Zero elements with NULL buffers: nothing happens, nothing is dereferenced. */
static void test_zero_length(void) {
    int pe = right;
    shmem_putmem(NULL, NULL, 0, pe);
    shmem_getmem(NULL, NULL, 0, pe);
    shmem_putmem_nbi(NULL, NULL, 0, pe);
    shmem_getmem_nbi(NULL, NULL, 0, pe);
    shmem_ctx_putmem(ctx, NULL, NULL, 0, pe);
    shmem_ctx_getmem(ctx, NULL, NULL, 0, pe);
    shmem_ctx_putmem_nbi(ctx, NULL, NULL, 0, pe);
    shmem_ctx_getmem_nbi(ctx, NULL, NULL, 0, pe);
#define ZERO_SIZED(S)                                                                         \
    shmem_put##S(NULL, NULL, 0, pe);                                                          \
    shmem_get##S(NULL, NULL, 0, pe);                                                          \
    shmem_iput##S(NULL, NULL, 1, 1, 0, pe);                                                   \
    shmem_iget##S(NULL, NULL, 1, 1, 0, pe);                                                   \
    shmem_put##S##_nbi(NULL, NULL, 0, pe);                                                    \
    shmem_get##S##_nbi(NULL, NULL, 0, pe);                                                    \
    shmem_ctx_put##S(ctx, NULL, NULL, 0, pe);                                                 \
    shmem_ctx_get##S(ctx, NULL, NULL, 0, pe);                                                 \
    shmem_ctx_iput##S(ctx, NULL, NULL, 1, 1, 0, pe);                                          \
    shmem_ctx_iget##S(ctx, NULL, NULL, 1, 1, 0, pe);                                          \
    shmem_ctx_put##S##_nbi(ctx, NULL, NULL, 0, pe);                                           \
    shmem_ctx_get##S##_nbi(ctx, NULL, NULL, 0, pe);
    ZERO_SIZED(8)
    ZERO_SIZED(16)
    ZERO_SIZED(32)
    ZERO_SIZED(64)
    ZERO_SIZED(128)
#define ZERO_TYPED(T, NAME)                                                                   \
    shmem_##NAME##_put(NULL, NULL, 0, pe);                                                    \
    shmem_##NAME##_get(NULL, NULL, 0, pe);                                                    \
    shmem_##NAME##_iput(NULL, NULL, 1, 1, 0, pe);                                             \
    shmem_##NAME##_iget(NULL, NULL, 1, 1, 0, pe);                                             \
    shmem_##NAME##_put_nbi(NULL, NULL, 0, pe);                                                \
    shmem_##NAME##_get_nbi(NULL, NULL, 0, pe);                                                \
    shmem_ctx_##NAME##_put(ctx, NULL, NULL, 0, pe);                                           \
    shmem_ctx_##NAME##_get(ctx, NULL, NULL, 0, pe);                                           \
    shmem_ctx_##NAME##_put_nbi(ctx, NULL, NULL, 0, pe);                                       \
    shmem_ctx_##NAME##_get_nbi(ctx, NULL, NULL, 0, pe);
    CTEST_RMA_TYPES(ZERO_TYPED)
    shmem_quiet();
    shmem_ctx_quiet(ctx);
    ctest_barrier();
}

int main(void) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    right = (me + 1) % npes;
    left = (me + npes - 1) % npes;
    CHECK(shmem_ctx_create(SHMEM_CTX_PRIVATE, &ctx) == 0, "shmem_ctx_create failed");
    unsigned char *sym = (unsigned char *)shmem_align(16, 2 * BYTES);
    CHECK(sym != NULL, "shmem_align returned NULL");

    test_zero_length();
    test_8(sym);
    test_16(sym);
    test_32(sym);
    test_64(sym);
    test_128(sym);
    test_mem(sym);
    test_zero_length();

    ctest_barrier();
    shmem_free(sym);
    shmem_ctx_destroy(ctx);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
