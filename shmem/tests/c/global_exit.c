/*
 * global_exit.c - shmem_global_exit (OpenSHMEM 1.5 §9.1.4): the last PE calls
 * shmem_global_exit(STATUS) (argv[1], default 42; 0 included) while the others wait
 * (bounded) for an answer that never comes.  The harness (shmem/tests/c_suite.rs) expects
 * the launcher (oshrun, shmemrun, mpiexec.hydra) to exit with STATUS, the other PEs to be
 * ended, and the text the calling PE printed without a newline and without fflush to appear
 * in the output (global_exit flushes stdio).
 */
#define CTEST_NAME "global_exit"
#include "ctest.h"

int main(int argc, char **argv) {
    int status = argc > 1 ? atoi(argv[1]) : 42;
    shmem_init();
    ctest_begin();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    long *never = (long *)shmem_calloc(1, sizeof(long));
    CHECK(never != NULL, "shmem_calloc returned NULL");
    ctest_barrier();
    if (me == npes - 1) {
        printf("global_exit: PE %d calls shmem_global_exit(%d) [unflushed]", me, status);
        shmem_global_exit(status);
    }
    /* The others wait for a value nobody sends; the job must end them first. */
    double t0 = ctest_now();
    while (ctest_now() - t0 < 120) {
        if (shmem_long_test(never, SHMEM_CMP_NE, 0))
            break;
        ctest_sleep_us(1000);
    }
    CHECK(0, "still running 120 s after another PE called shmem_global_exit");
    return 0;
}
