/*
 * pshmem.c - the profiling interface (OpenSHMEM 1.5 §9.12, <pshmem.h>).  The harness
 * compiles it with -DTEST_PSHMEM, so every call written SH(name) below, and every call of
 * the ctest.h helpers, goes to the pshmem_ name: setup and query, memory management
 * (including the legacy p twins), RMA, AMOs, signals, point-to-point, ordering, locks,
 * contexts and shmem_pcontrol.  It also plays a profiling tool: it defines its own
 * shmem_putmem and shmem_long_atomic_fetch_add that count their calls and forward to the
 * pshmem_ entry points, and checks that the calls were counted and did their work.
 *
 * The harness runs it against the shared library and against libshmem.a (-static-shmem):
 * the library defines each routine once, as pshmem_X, with shmem_X a weak alias of it, so
 * the program's own shmem_putmem takes precedence in a static link as well.
 */
#define CTEST_NAME "pshmem"
#include "ctest.h"

#ifndef TEST_PSHMEM
#error "pshmem.c is compiled with -DTEST_PSHMEM"
#endif

static long putmem_calls, fadd_calls;

/* The "tool": wrappers over the profiling entry points. */
void shmem_putmem(void *dest, const void *source, size_t nelems, int pe) {
    putmem_calls++;
    pshmem_putmem(dest, source, nelems, pe);
}

long shmem_long_atomic_fetch_add(long *dest, long value, int pe) {
    fadd_calls++;
    return pshmem_long_atomic_fetch_add(dest, value, pe);
}

int main(void) {
    SH(init)();
    ctest_begin();
    int me = SH(my_pe)(), npes = SH(n_pes)();
    CHECK(p_my_pe() == me && p_num_pes() == npes, "p_my_pe/p_num_pes differ");
    int right = (me + 1) % npes, left = (me + npes - 1) % npes;
    int major = 0, minor = 0;
    SH(info_get_version)(&major, &minor);
    CHECK(major == SHMEM_MAJOR_VERSION && minor == SHMEM_MINOR_VERSION, "pshmem version");
    char name[SHMEM_MAX_NAME_LEN];
    SH(info_get_name)(name);
    CHECK(strcmp(name, SHMEM_VENDOR_STRING) == 0, "pshmem name %s", name);
    CHECK(SH(pe_accessible)(right) == 1, "pshmem_pe_accessible");
    SH(pcontrol)(1);
    shmem_pcontrol(0, "ignored");

    long *a = (long *)SH(malloc)(16 * sizeof(long));
    long *b = (long *)pshmalloc(16 * sizeof(long));
    CHECK(a != NULL && b != NULL, "pshmem_malloc/pshmalloc returned NULL");
    CHECK(SH(addr_accessible)(a, right) == 1, "pshmem_addr_accessible");
    CHECK(SH(ptr)(a, me) != NULL, "pshmem_ptr(own PE) is NULL");
    long src[16];
    for (int i = 0; i < 16; i++) {
        src[i] = me * 100 + i;
        a[i] = b[i] = 0;
    }
    ctest_barrier();

    SH(long_put)(a, src, 16, right);
    shmem_putmem(b, src, 16 * sizeof(long), right); /* the tool's wrapper */
    ctest_barrier();
    for (int i = 0; i < 16; i++)
        CHECK(a[i] == left * 100 + i && b[i] == left * 100 + i, "pshmem put/putmem data %d", i);
    CHECK(putmem_calls == 1, "the wrapper counted %ld putmem calls", putmem_calls);
    long g = SH(long_g)(&a[3], right);
    CHECK(g == me * 100 + 3, "pshmem_long_g returned %ld", g);

    /* AMOs through both paths on PE 0. */
    long *ctr = (long *)SH(calloc)(2, sizeof(long));
    CHECK(ctr != NULL, "pshmem_calloc returned NULL");
    ctest_barrier();
    SH(long_atomic_inc)(&ctr[0], 0);
    long before = shmem_long_atomic_fetch_add(&ctr[0], 10, 0); /* counted */
    CHECK(before >= 0 && before < 11L * npes, "fetch_add through the wrapper returned %ld", before);
    CHECK(fadd_calls == 1, "the wrapper counted %ld fetch_add calls", fadd_calls);
    ctest_barrier();
    CHECK(SH(long_atomic_fetch)(&ctr[0], 0) == 11L * npes, "pshmem AMO total");

    /* Contexts, signals and point-to-point. */
    shmem_ctx_t ctx;
    CHECK(SH(ctx_create)(0, &ctx) == 0, "pshmem_ctx_create failed");
    uint64_t *sig = (uint64_t *)SH(calloc)(1, sizeof(uint64_t));
    CHECK(sig != NULL, "pshmem_calloc returned NULL");
    ctest_barrier();
    SH(ctx_long_put_signal)(ctx, a, src, 16, sig, 5, SHMEM_SIGNAL_SET, right);
    SH(ctx_quiet)(ctx);
    CHECK(SH(signal_wait_until)(sig, SHMEM_CMP_EQ, 5) == 5, "pshmem_signal_wait_until");
    CHECK(SH(signal_fetch)(sig) == 5, "pshmem_signal_fetch");
    SH(ctx_destroy)(ctx);
    SH(long_atomic_set)(&ctr[1], 1, right);
    SH(fence)();
    SH(quiet)();
    SH(long_wait_until)(&ctr[1], SHMEM_CMP_EQ, 1);
    CHECK(SH(long_test)(&ctr[1], SHMEM_CMP_EQ, 1) == 1, "pshmem_long_test");
    ctest_barrier();

    /* Locks. */
    long *lock = (long *)SH(calloc)(1, sizeof(long));
    CHECK(lock != NULL, "pshmem_calloc returned NULL");
    ctest_barrier();
    for (int i = 0; i < 10; i++) {
        SH(set_lock)(lock);
        long v = SH(long_g)(&ctr[0], 0);
        SH(long_p)(&ctr[0], v + 1, 0);
        SH(clear_lock)(lock);
    }
    while (SH(test_lock)(lock) != 0)
        ;
    SH(clear_lock)(lock);
    ctest_barrier();
    CHECK(SH(long_g)(&ctr[0], 0) == 11L * npes + 10L * npes, "pshmem lock counter");

    /* Legacy twins. */
    long *r = (long *)pshrealloc(b, 1024 * sizeof(long));
    CHECK(r != NULL && r[2] == left * 100 + 2, "pshrealloc lost data");
    void *al = pshmemalign(128, 64);
    CHECK(al != NULL && ((uintptr_t)al & 127) == 0, "pshmemalign");
    ctest_barrier();
    pshfree(al);
    pshfree(r);
    SH(free)(lock);
    SH(free)(sig);
    SH(free)(ctr);
    SH(free)(a);
    SH(quiet)();
    SH(finalize)();
    ctest_ok(me, npes);
    return 0;
}
