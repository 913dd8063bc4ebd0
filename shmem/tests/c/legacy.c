/*
 * legacy.c - the names deprecated since OpenSHMEM 1.2 that 1.5 still requires: start_pes
 * (a second call is a no-op), _my_pe, _num_pes, shmalloc, shfree, shrealloc, shmemalign.
 * The program never calls shmem_finalize, as programs written for start_pes do: the
 * library must finish the PE cleanly when main returns.  It also calls the cache routines
 * that 1.5 removed (shmem_clear_cache_inv ... shmem_udcflush_line): they link and do
 * nothing (the data written before them is still there after them).  shmem.h declares them
 * deprecated; the warning is silenced here because the suite compiles with -Werror
 * (shmem/tests/c/headers/check.sh checks that each call warns).
 */
#define CTEST_NAME "legacy"
#include "ctest.h"

int main(void) {
    start_pes(0);
    ctest_begin();
    int me = _my_pe(), npes = _num_pes();
    CHECK(me == shmem_my_pe() && npes == shmem_n_pes(), "_my_pe/_num_pes %d/%d, shmem_ %d/%d",
          me, npes, shmem_my_pe(), shmem_n_pes());
    start_pes(0); /* again: no effect */
    CHECK(_my_pe() == me && _num_pes() == npes, "a second start_pes changed the job");
    int right = (me + 1) % npes, left = (me + npes - 1) % npes;

    long *a = (long *)shmalloc(16 * sizeof(long));
    CHECK(a != NULL, "shmalloc returned NULL");
    for (int i = 0; i < 16; i++)
        a[i] = me * 100 + i;
    ctest_barrier();
    CHECK(shmem_long_g(&a[5], right) == right * 100 + 5, "shmalloc block is not symmetric");

    long *b = (long *)shrealloc(a, 4096 * sizeof(long));
    CHECK(b != NULL, "shrealloc returned NULL");
    for (int i = 0; i < 16; i++)
        CHECK(b[i] == me * 100 + i, "shrealloc lost element %d: %ld", i, b[i]);
    b[4000] = me;
    ctest_barrier();
    CHECK(shmem_long_g(&b[4000], left) == left, "shrealloc block is not symmetric");

    double *c = (double *)shmemalign(256, 10 * sizeof(double));
    CHECK(c != NULL, "shmemalign returned NULL");
    CHECK(((uintptr_t)c & 255) == 0, "shmemalign(256) gave %p", (void *)c);
    shmem_double_p(&c[9], 0.5 + me, right);
    ctest_barrier();
    CHECK(c[9] == 0.5 + left, "shmemalign block: c[9] = %g", c[9]);

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    shmem_clear_cache_inv();
    shmem_set_cache_inv();
    shmem_clear_cache_line_inv(&c[9]);
    shmem_set_cache_line_inv(&c[9]);
    shmem_udcflush();
    shmem_udcflush_line(&c[9]);
#pragma GCC diagnostic pop
    CHECK(c[9] == 0.5 + left && b[4000] == me, "the cache routines changed memory");

    ctest_barrier();
    shfree(c);
    shfree(b);
    ctest_barrier();
    ctest_ok(me, npes);
    return 0;
}
