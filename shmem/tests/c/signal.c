/*
 * signal.c - put-with-signal (OpenSHMEM 1.5 §9.8): the typed forms for all 24 RMA types,
 * the sized forms put8 ... put128 and putmem, each blocking and _nbi and as ctx twins,
 * with SHMEM_SIGNAL_SET and SHMEM_SIGNAL_ADD; shmem_signal_fetch and
 * shmem_signal_wait_until (which returns the value that satisfied it).  The receiver waits
 * only for the signal, never for a barrier, and then checks the data: the signal must not
 * be visible before the data it announces.
 *   SET: every PE sends to its right neighbour with signal value (sender + 1) + 1000*round.
 *   ADD: every PE sends its block to PE 0 and adds 1; PE 0 waits for n_pes.
 * Then putmem_signal at the sizes where the path across nodes changes (sizes()).
 */
#define CTEST_NAME "signal"
#include "ctest.h"

enum { N = 64 };

static int me, npes, right, left;
static shmem_ctx_t ctx;
static uint64_t *sig;  /* symmetric signal words */
static char *area;     /* symmetric data: npes blocks of N * 16 bytes */
static int round_no;

static unsigned char pat(int pe, int r, size_t i) {
    return (unsigned char)(pe * 37 + r * 11 + (int)(i % 97) + 1);
}

/* Checks nbytes bytes at p against what PE `from` sent in round r. */
#define CHECK_BLOCK(p, nbytes, from, r, what)                                                 \
    for (size_t i_ = 0; i_ < (nbytes); i_++)                                                  \
        CHECK(((unsigned char *)(p))[i_] == pat(from, r, i_),                                 \
              "%s round %d: byte %zu from PE %d wrong", what, r, i_, from);

/* One SET and one ADD round for a routine form: SEND(dest, src, nelems, sig_addr, value,
 * op, pe) calls it, ESIZE is its element size, QUIET completes it. */
#define SIGNAL_ROUNDS(WHAT, ESIZE, SEND, QUIET)                                               \
    do {                                                                                      \
        size_t nbytes = (size_t)N * (ESIZE);                                                  \
        unsigned char src[N * 16];                                                            \
        /* SET to the right neighbour. */                                                     \
        int r = round_no++;                                                                   \
        memset(area, 0, (size_t)npes * N * 16);                                               \
        sig[0] = 0;                                                                           \
        for (size_t i = 0; i < nbytes; i++)                                                   \
            src[i] = pat(me, r, i);                                                           \
        ctest_barrier();                                                                      \
        uint64_t want = (uint64_t)(left + 1) + 1000u * (uint64_t)r;                           \
        SEND(area, src, N, &sig[0], (uint64_t)(me + 1) + 1000u * (uint64_t)r,                 \
             SHMEM_SIGNAL_SET, right);                                                        \
        QUIET;                                                                                \
        uint64_t got = shmem_signal_wait_until(&sig[0], SHMEM_CMP_EQ, want);                  \
        CHECK(got == want, "%s SET: signal_wait_until returned %llu, expected %llu", WHAT,    \
              (unsigned long long)got, (unsigned long long)want);                             \
        CHECK(shmem_signal_fetch(&sig[0]) == want, "%s SET: signal_fetch differs", WHAT);     \
        CHECK_BLOCK(area, nbytes, left, r, WHAT " SET data");                                 \
        ctest_barrier();                                                                      \
        /* ADD into PE 0, each sender its own block. */                                       \
        r = round_no++;                                                                       \
        memset(area, 0, (size_t)npes * N * 16);                                               \
        sig[1] = 0;                                                                           \
        for (size_t i = 0; i < nbytes; i++)                                                   \
            src[i] = pat(me, r, i);                                                           \
        ctest_barrier();                                                                      \
        SEND(area + (size_t)me * nbytes, src, N, &sig[1], 1, SHMEM_SIGNAL_ADD, 0);           \
        QUIET;                                                                                \
        if (me == 0) {                                                                        \
            uint64_t v = shmem_signal_wait_until(&sig[1], SHMEM_CMP_GE, (uint64_t)npes);      \
            CHECK(v == (uint64_t)npes, "%s ADD: signal %llu, expected %d", WHAT,              \
                  (unsigned long long)v, npes);                                               \
            for (int pe = 0; pe < npes; pe++)                                                 \
                CHECK_BLOCK(area + (size_t)pe * nbytes, nbytes, pe, r, WHAT " ADD data");     \
        }                                                                                     \
        ctest_barrier();                                                                      \
    } while (0)

#define NOQUIET ((void)0)
#define CTXQUIET shmem_ctx_quiet(ctx)
#define DEFQUIET shmem_quiet()

/* The typed forms, cast at the call: dest and source as T. */
#define TYPED_TEST(T, NAME)                                                                   \
    static void typed_##NAME(void) {                                                          \
        _Static_assert(sizeof(T) <= 16, "element too large");                                 \
        SIGNAL_ROUNDS(#NAME "_put_signal", sizeof(T), SEND_TYPED_##NAME, NOQUIET);            \
        SIGNAL_ROUNDS(#NAME "_put_signal_nbi", sizeof(T), SEND_TYPED_NBI_##NAME, DEFQUIET);   \
        SIGNAL_ROUNDS("ctx_" #NAME "_put_signal", sizeof(T), SEND_CTX_##NAME, NOQUIET);       \
        SIGNAL_ROUNDS("ctx_" #NAME "_put_signal_nbi", sizeof(T), SEND_CTX_NBI_##NAME, CTXQUIET); \
    }
#define DEFINE_SENDERS(T, NAME)                                                               \
    static void SEND_TYPED_##NAME(void *d, const void *s, size_t n, uint64_t *sa, uint64_t v, \
                                  int op, int pe) {                                           \
        shmem_##NAME##_put_signal((T *)d, (const T *)s, n, sa, v, op, pe);                    \
    }                                                                                         \
    static void SEND_TYPED_NBI_##NAME(void *d, const void *s, size_t n, uint64_t *sa,         \
                                      uint64_t v, int op, int pe) {                           \
        shmem_##NAME##_put_signal_nbi((T *)d, (const T *)s, n, sa, v, op, pe);                \
    }                                                                                         \
    static void SEND_CTX_##NAME(void *d, const void *s, size_t n, uint64_t *sa, uint64_t v,   \
                                int op, int pe) {                                             \
        shmem_ctx_##NAME##_put_signal(ctx, (T *)d, (const T *)s, n, sa, v, op, pe);           \
    }                                                                                         \
    static void SEND_CTX_NBI_##NAME(void *d, const void *s, size_t n, uint64_t *sa,           \
                                    uint64_t v, int op, int pe) {                             \
        shmem_ctx_##NAME##_put_signal_nbi(ctx, (T *)d, (const T *)s, n, sa, v, op, pe);       \
    }
CTEST_RMA_TYPES(DEFINE_SENDERS)
CTEST_RMA_TYPES(TYPED_TEST)

#define SIZED_SENDERS(S)                                                                      \
    static void SEND_SIZED_##S(void *d, const void *s, size_t n, uint64_t *sa, uint64_t v,    \
                               int op, int pe) {                                              \
        shmem_put##S##_signal(d, s, n, sa, v, op, pe);                                        \
    }                                                                                         \
    static void SEND_SIZED_NBI_##S(void *d, const void *s, size_t n, uint64_t *sa,            \
                                   uint64_t v, int op, int pe) {                              \
        shmem_put##S##_signal_nbi(d, s, n, sa, v, op, pe);                                    \
    }                                                                                         \
    static void SEND_SIZED_CTX_##S(void *d, const void *s, size_t n, uint64_t *sa,            \
                                   uint64_t v, int op, int pe) {                              \
        shmem_ctx_put##S##_signal(ctx, d, s, n, sa, v, op, pe);                               \
    }                                                                                         \
    static void SEND_SIZED_CTX_NBI_##S(void *d, const void *s, size_t n, uint64_t *sa,        \
                                       uint64_t v, int op, int pe) {                          \
        shmem_ctx_put##S##_signal_nbi(ctx, d, s, n, sa, v, op, pe);                           \
    }                                                                                         \
    static void sized_##S(void) {                                                             \
        SIGNAL_ROUNDS("put" #S "_signal", S / 8, SEND_SIZED_##S, NOQUIET);                    \
        SIGNAL_ROUNDS("put" #S "_signal_nbi", S / 8, SEND_SIZED_NBI_##S, DEFQUIET);           \
        SIGNAL_ROUNDS("ctx_put" #S "_signal", S / 8, SEND_SIZED_CTX_##S, NOQUIET);            \
        SIGNAL_ROUNDS("ctx_put" #S "_signal_nbi", S / 8, SEND_SIZED_CTX_NBI_##S, CTXQUIET);   \
    }
SIZED_SENDERS(8)
SIZED_SENDERS(16)
SIZED_SENDERS(32)
SIZED_SENDERS(64)
SIZED_SENDERS(128)

/* putmem: nelems are bytes; send N * 16 bytes. */
static void SEND_MEM(void *d, const void *s, size_t n, uint64_t *sa, uint64_t v, int op, int pe) {
    shmem_putmem_signal(d, s, n * 16, sa, v, op, pe);
}
static void SEND_MEM_NBI(void *d, const void *s, size_t n, uint64_t *sa, uint64_t v, int op,
                         int pe) {
    shmem_putmem_signal_nbi(d, s, n * 16, sa, v, op, pe);
}
static void SEND_MEM_CTX(void *d, const void *s, size_t n, uint64_t *sa, uint64_t v, int op,
                         int pe) {
    shmem_ctx_putmem_signal(ctx, d, s, n * 16, sa, v, op, pe);
}
static void SEND_MEM_CTX_NBI(void *d, const void *s, size_t n, uint64_t *sa, uint64_t v, int op,
                             int pe) {
    shmem_ctx_putmem_signal_nbi(ctx, d, s, n * 16, sa, v, op, pe);
}

/* A large putmem_signal (above any datagram size) and a series of ADDs that must all
 * count. */
static void large_and_counting(void) {
    size_t big = 3u << 20;
    char *dst = (char *)shmem_malloc(big);
    char *src = (char *)malloc(big);
    CHECK(dst != NULL && src != NULL, "allocation failed");
    int r = round_no++;
    for (size_t i = 0; i < big; i++)
        src[i] = (char)pat(me, r, i);
    sig[2] = 0;
    sig[3] = 0;
    ctest_barrier();
    shmem_putmem_signal(dst, src, big, &sig[2], 7, SHMEM_SIGNAL_SET, right);
    CHECK(shmem_signal_wait_until(&sig[2], SHMEM_CMP_NE, 0) == 7, "large putmem_signal: signal");
    CHECK_BLOCK(dst, big, left, r, "large putmem_signal data");
    /* 50 adds from every PE to PE 0, alternating forms. */
    for (int k = 0; k < 50; k++) {
        if (k % 2 == 0)
            shmem_putmem_signal(area + 8 * me, src, 8, &sig[3], 2, SHMEM_SIGNAL_ADD, 0);
        else
            shmem_ctx_putmem_signal_nbi(ctx, area + 8 * me, src, 8, &sig[3], 2, SHMEM_SIGNAL_ADD,
                                        0);
    }
    shmem_ctx_quiet(ctx);
    if (me == 0) {
        uint64_t v = shmem_signal_wait_until(&sig[3], SHMEM_CMP_EQ, (uint64_t)npes * 100);
        CHECK(v == (uint64_t)npes * 100, "counting signal: %llu", (unsigned long long)v);
    }
    ctest_barrier();
    free(src);
    shmem_free(dst);
}

/* putmem_signal at the sizes where the path changes across nodes: 8 bytes, both sides of
 * the largest write that carries its signal in one datagram (INLINE_MAX bytes of data in
 * the default 61440-byte datagram: less 16 bytes of job-key header, 40 of frame header, 2
 * of packet prefix, 32 of request header and 16 of signal block), and 1 MiB + 3
 * (fragments, the signal on the last, sent once the others are acknowledged). SET to
 * the right neighbour (blocking, no quiet) and ADD from every PE into PE 0 (nbi, then
 * quiet); the receiver waits only for the signal, then checks every byte. */
enum { INLINE_MAX = 61334 };
static void sizes(void) {
    static const size_t lens[] = {8, INLINE_MAX, INLINE_MAX + 1, (1u << 20) + 3};
    size_t most = (1u << 20) + 3;
    /* Blocks 0 .. npes - 1: the ADD data of each PE (on PE 0); block npes: the SET data. */
    char *dst = (char *)shmem_malloc((size_t)(npes + 1) * most);
    unsigned char *src = (unsigned char *)malloc(most);
    CHECK(dst != NULL && src != NULL, "allocation failed");
    char *set_block = dst + (size_t)npes * most;
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
        size_t n = lens[l];
        int r = round_no++;
        for (size_t i = 0; i < n; i++)
            src[i] = pat(me, r, i);
        memset(dst, 0, (size_t)(npes + 1) * most);
        sig[4] = 0;
        sig[5] = 0;
        ctest_barrier();
        uint64_t set = 100u + (uint64_t)r;
        shmem_putmem_signal(set_block, src, n, &sig[4], set, SHMEM_SIGNAL_SET, right);
        shmem_putmem_signal_nbi(dst + (size_t)me * most, src, n, &sig[5], (uint64_t)me + 1,
                                SHMEM_SIGNAL_ADD, 0);
        shmem_quiet();
        uint64_t got = shmem_signal_wait_until(&sig[4], SHMEM_CMP_NE, 0);
        CHECK(got == set, "sizes %zu SET: signal %llu, expected %llu", n, (unsigned long long)got,
              (unsigned long long)set);
        CHECK_BLOCK(set_block, n, left, r, "sizes SET data");
        if (me == 0) {
            uint64_t want = (uint64_t)npes * (uint64_t)(npes + 1) / 2;
            uint64_t v = shmem_signal_wait_until(&sig[5], SHMEM_CMP_EQ, want);
            CHECK(v == want, "sizes %zu ADD: signal %llu, expected %llu", n, (unsigned long long)v,
                  (unsigned long long)want);
            for (int pe = 0; pe < npes; pe++)
                CHECK_BLOCK(dst + (size_t)pe * most, n, pe, r, "sizes ADD data");
        }
        ctest_barrier();
    }
    free(src);
    shmem_free(dst);
}

int main(void) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    right = (me + 1) % npes;
    left = (me + npes - 1) % npes;
    CHECK(shmem_ctx_create(0, &ctx) == 0, "shmem_ctx_create failed");
    sig = (uint64_t *)shmem_calloc(8, sizeof(uint64_t));
    area = (char *)shmem_align(16, (size_t)npes * N * 16);
    CHECK(sig != NULL && area != NULL, "allocation failed");

#define RUN_TYPED(T, NAME) typed_##NAME();
    CTEST_RMA_TYPES(RUN_TYPED)
    sized_8();
    sized_16();
    sized_32();
    sized_64();
    sized_128();
    SIGNAL_ROUNDS("putmem_signal", 16, SEND_MEM, NOQUIET);
    SIGNAL_ROUNDS("putmem_signal_nbi", 16, SEND_MEM_NBI, DEFQUIET);
    SIGNAL_ROUNDS("ctx_putmem_signal", 16, SEND_MEM_CTX, NOQUIET);
    SIGNAL_ROUNDS("ctx_putmem_signal_nbi", 16, SEND_MEM_CTX_NBI, CTXQUIET);
    large_and_counting();
    sizes();

    ctest_barrier();
    shmem_ctx_destroy(ctx);
    shmem_free(area);
    shmem_free(sig);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
