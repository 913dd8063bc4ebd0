/*
 * memory.c - symmetric memory management (OpenSHMEM 1.5 §9.3): shmem_malloc, calloc,
 * align, realloc, free and malloc_with_hints.  Checks that blocks are symmetric (a put to
 * the neighbour's copy lands in it) through many allocations and frees, that calloc
 * zeroes, alignment, realloc growth/shrink keeping contents, realloc(NULL, n) and
 * realloc(p, 0), hints, the rules that size 0 and free(NULL) do nothing and are no
 * collective (only PE 0 calls them here: a barrier inside would deadlock the job), and
 * that an impossible request fails with NULL on every PE without harming later ones.
 * shmem_align with a power of two below sizeof(void *) (1, 2, 4) gives a valid block, as
 * other implementations do; a non-power-of-two alignment (0, 3, 12, 24) is refused with
 * NULL on every PE.  A successful call leaves errno as it was.
 */
#define CTEST_NAME "memory"
#include "ctest.h"

#include <errno.h>

/* A value no system call sets, planted in errno before each call. */
#define ERRNO_MARK 4242

/* Checks that the call just made left errno at ERRNO_MARK. */
#define CHECK_ERRNO(what)                                                                     \
    CHECK(errno == ERRNO_MARK, "%s changed errno from %d to %d (%s)", what, ERRNO_MARK, errno, \
          strerror(errno))

static int me, npes, right, left;

/* Writes a marker into the right neighbour's copy of `p` (nbytes >= 8) at both ends and
 * checks the left neighbour's markers in the own copy.  Collective. */
static void check_symmetric(void *p, size_t nbytes, long tag, const char *what) {
    unsigned char *b = (unsigned char *)p;
    long head = tag * 1000 + me, tail = -(tag * 1000 + me);
    ctest_barrier(); /* every PE is done reading its copy before it is overwritten */
    shmem_putmem(b, &head, sizeof head, right);
    shmem_putmem(b + nbytes - sizeof tail, &tail, sizeof tail, right);
    ctest_barrier();
    long got_head, got_tail;
    memcpy(&got_head, b, sizeof got_head);
    memcpy(&got_tail, b + nbytes - sizeof got_tail, sizeof got_tail);
    CHECK(got_head == tag * 1000 + left && got_tail == -(tag * 1000 + left),
          "%s (%zu bytes) is not symmetric: head %ld tail %ld, expected %ld/%ld", what, nbytes,
          got_head, got_tail, tag * 1000 + left, -(tag * 1000 + left));
    ctest_barrier();
}

int main(void) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    right = (me + 1) % npes;
    left = (me + npes - 1) % npes;

    /* Size 0 and free(NULL): no action, NULL, and no barrier (only PE 0 calls them). */
    if (me == 0) {
        CHECK(shmem_malloc(0) == NULL, "shmem_malloc(0) is not NULL");
        CHECK(shmem_calloc(0, 8) == NULL, "shmem_calloc(0, 8) is not NULL");
        CHECK(shmem_calloc(8, 0) == NULL, "shmem_calloc(8, 0) is not NULL");
        CHECK(shmem_align(64, 0) == NULL, "shmem_align(64, 0) is not NULL");
        CHECK(shmem_malloc_with_hints(0, SHMEM_MALLOC_ATOMICS_REMOTE) == NULL,
              "shmem_malloc_with_hints(0) is not NULL");
        shmem_free(NULL);
    }
    ctest_barrier();

    /* A deterministic mix of sizes, frees in between: every block stays symmetric. */
    enum { NBLK = 40 };
    void *blk[NBLK];
    size_t sz[NBLK];
    unsigned seed = 12345;
    for (int i = 0; i < NBLK; i++) {
        seed = seed * 1103515245u + 12345u;
        sz[i] = 8 + (seed >> 8) % 20000;
        blk[i] = shmem_malloc(sz[i]);
        CHECK(blk[i] != NULL, "shmem_malloc(%zu) returned NULL", sz[i]);
        CHECK(((uintptr_t)blk[i] & 7) == 0, "shmem_malloc result %p not 8-aligned", blk[i]);
        if (i % 3 == 1) {
            shmem_free(blk[i - 1]);
            blk[i - 1] = NULL;
        }
    }
    for (int i = 0; i < NBLK; i++)
        if (blk[i] != NULL)
            check_symmetric(blk[i], sz[i], i, "shmem_malloc block");
    for (int i = 0; i < NBLK; i++)
        shmem_free(blk[i]); /* including NULL entries: no-ops on every PE */

    /* calloc zeroes, also memory that held data before. */
    for (int round = 0; round < 2; round++) {
        long *z = (long *)shmem_calloc(1000, sizeof(long));
        CHECK(z != NULL, "shmem_calloc returned NULL");
        for (int i = 0; i < 1000; i++)
            CHECK(z[i] == 0, "shmem_calloc memory not zero at %d (round %d)", i, round);
        check_symmetric(z, 1000 * sizeof(long), 100 + round, "shmem_calloc block");
        for (int i = 0; i < 1000; i++)
            z[i] = -1;
        ctest_barrier();
        shmem_free(z);
    }

    /* align: powers of two that are multiples of sizeof(void *). */
    for (size_t al = sizeof(void *); al <= 65536; al *= 4) {
        void *p = shmem_align(al, 100);
        CHECK(p != NULL, "shmem_align(%zu, 100) returned NULL", al);
        CHECK(((uintptr_t)p & (al - 1)) == 0, "shmem_align(%zu) gave %p", al, p);
        check_symmetric(p, 100, 200 + (long)al, "shmem_align block");
        shmem_free(p);
    }

    /* align below the pointer size: rounded up to it, a valid symmetric block. */
    for (size_t al = 1; al < sizeof(void *); al *= 2) {
        errno = ERRNO_MARK;
        void *p = shmem_align(al, 24);
        CHECK_ERRNO("shmem_align");
        CHECK(p != NULL, "shmem_align(%zu, 24) returned NULL", al);
        CHECK(((uintptr_t)p & (sizeof(void *) - 1)) == 0, "shmem_align(%zu) gave %p", al, p);
        check_symmetric(p, 24, 250 + (long)al, "shmem_align block (small alignment)");
        errno = ERRNO_MARK;
        shmem_free(p);
        CHECK_ERRNO("shmem_free");
    }
    /* Not a power of two: NULL on every PE (no barrier inside: all PEs call it alike). */
    size_t bad_al[] = {0, 3, 12, 24};
    for (size_t i = 0; i < sizeof bad_al / sizeof bad_al[0]; i++)
        CHECK(shmem_align(bad_al[i], 64) == NULL, "shmem_align(%zu, 64) did not fail", bad_al[i]);
    ctest_barrier();

    /* errno after each successful allocation routine. */
    errno = ERRNO_MARK;
    long *e1 = (long *)shmem_malloc(4096);
    CHECK_ERRNO("shmem_malloc");
    errno = ERRNO_MARK;
    long *e2 = (long *)shmem_calloc(512, sizeof(long));
    CHECK_ERRNO("shmem_calloc");
    errno = ERRNO_MARK;
    long *e3 = (long *)shmem_malloc_with_hints(64, SHMEM_MALLOC_ATOMICS_REMOTE);
    CHECK_ERRNO("shmem_malloc_with_hints");
    errno = ERRNO_MARK;
    long *e4 = (long *)shmem_align(4096, 100);
    CHECK_ERRNO("shmem_align");
    errno = ERRNO_MARK;
    e1 = (long *)shmem_realloc(e1, 1 << 20);
    CHECK_ERRNO("shmem_realloc");
    CHECK(e1 != NULL && e2 != NULL && e3 != NULL && e4 != NULL,
          "an allocation for the errno checks returned NULL");
    errno = ERRNO_MARK;
    shmem_free(e4);
    shmem_free(e3);
    shmem_free(e2);
    shmem_free(e1);
    CHECK_ERRNO("shmem_free");

    /* malloc_with_hints: each hint, both, and none. */
    long hints[4] = {0, SHMEM_MALLOC_ATOMICS_REMOTE, SHMEM_MALLOC_SIGNAL_REMOTE,
                     SHMEM_MALLOC_ATOMICS_REMOTE | SHMEM_MALLOC_SIGNAL_REMOTE};
    for (int h = 0; h < 4; h++) {
        long *p = (long *)shmem_malloc_with_hints(64 * sizeof(long), hints[h]);
        CHECK(p != NULL, "shmem_malloc_with_hints(.., %ld) returned NULL", hints[h]);
        p[0] = 0;
        ctest_barrier();
        shmem_long_atomic_add(&p[0], me + 1, 0);
        ctest_barrier();
        if (me == 0)
            CHECK(p[0] == (long)npes * (npes + 1) / 2, "AMOs on a hinted block: %ld", p[0]);
        check_symmetric(p, 64 * sizeof(long), 300 + h, "shmem_malloc_with_hints block");
        shmem_free(p);
    }

    /* realloc: NULL -> malloc, growth keeps contents, shrink keeps the prefix, 0 frees. */
    long *r = (long *)shmem_realloc(NULL, 100 * sizeof(long));
    CHECK(r != NULL, "shmem_realloc(NULL, n) returned NULL");
    for (int i = 0; i < 100; i++)
        r[i] = me * 10000 + i;
    void *blocker = shmem_malloc(64); /* makes in-place growth less likely */
    CHECK(blocker != NULL, "shmem_malloc(64) returned NULL");
    ctest_barrier();
    long *r2 = (long *)shmem_realloc(r, 50000 * sizeof(long));
    CHECK(r2 != NULL, "shmem_realloc growth returned NULL");
    for (int i = 0; i < 100; i++)
        CHECK(r2[i] == me * 10000 + i, "realloc growth lost element %d: %ld", i, r2[i]);
    check_symmetric(r2, 50000 * sizeof(long), 400, "grown shmem_realloc block");
    r2[0] = me * 10000; /* check_symmetric overwrote the ends */
    long *r3 = (long *)shmem_realloc(r2, 20 * sizeof(long));
    CHECK(r3 != NULL, "shmem_realloc shrink returned NULL");
    for (int i = 0; i < 20; i++)
        CHECK(r3[i] == me * 10000 + i, "realloc shrink lost element %d: %ld", i, r3[i]);
    check_symmetric(r3, 20 * sizeof(long), 401, "shrunk shmem_realloc block");
    CHECK(shmem_realloc(r3, 0) == NULL, "shmem_realloc(p, 0) did not return NULL");
    shmem_free(blocker);

    /* A request no heap can satisfy: NULL on every PE, and the heap still works. */
    void *huge = shmem_malloc((size_t)1 << 46);
    CHECK(huge == NULL, "shmem_malloc(64 TiB) did not fail");
    void *huge2 = shmem_realloc(NULL, (size_t)1 << 46);
    CHECK(huge2 == NULL, "shmem_realloc(NULL, 64 TiB) did not fail");
    long *after = (long *)shmem_malloc(1024);
    CHECK(after != NULL, "shmem_malloc after a failed request returned NULL");
    check_symmetric(after, 1024, 500, "block after a failed request");
    long *kept = shmem_realloc(after, (size_t)1 << 46);
    CHECK(kept == NULL, "shmem_realloc to 64 TiB did not fail");
    check_symmetric(after, 1024, 501, "block after a failed realloc (unchanged)");
    shmem_free(after);

    ctest_barrier();
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
