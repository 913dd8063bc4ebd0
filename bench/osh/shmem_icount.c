/*
 * shmem_icount.c - the instructions one call of shmem_long_p and of an 8-byte shmem_putmem
 * costs, of a shmem_long_atomic_fetch_add, of an idle shmem_quiet and of an 8-byte shmem_putmem
 * followed by shmem_quiet, measured with callgrind (by hand; see docs/bench.md):
 *
 *   oshcc -O2 -g bench/osh/shmem_icount.c -o shmem_icount     # or with -static-shmem
 *   oshrun -n 2 valgrind --tool=callgrind --callgrind-out-file=cg.%p ./shmem_icount 100000
 *   callgrind_annotate --inclusive=yes cg.<pid of PE 0>       # the file with loop_long_p
 *
 * Six loops run N times each, in functions of their own that callgrind counts separately
 * (inclusive cost): loop_long_p calls shmem_long_p, loop_putmem_8 calls shmem_putmem with 8
 * bytes, loop_fadd calls shmem_long_atomic_fetch_add, loop_quiet calls shmem_quiet with
 * nothing in flight, loop_putmem_quiet calls shmem_putmem with 8 bytes and then shmem_quiet,
 * loop_empty calls empty_call, an empty function of the same shape kept out of line.
 * The per-call cost of a routine is (Ir(loop) - Ir(loop_empty)) / N + Ir(empty_call) / N:
 * the loop's own instructions and the call/return of the empty function cancel, what is
 * left is the routine (its call, the PLT jump when linked dynamically, and its body).  The
 * routine's own inclusive cost per call (its line in the annotation, divided by N) is the
 * other figure.
 *
 * Runs as one PE of a job (the target is the PE itself, or PE 1 when there is one: a
 * same-node PE with oshrun -n 2).  Not a test.
 */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) void empty_call(long *dest, long value, int pe) {
    __asm__ volatile("" : : "r"(dest), "r"(value), "r"(pe) : "memory");
}

__attribute__((noinline)) void loop_long_p(long *dest, long n, int pe) {
    for (long i = 0; i < n; i++)
        shmem_long_p(dest, i, pe);
}

__attribute__((noinline)) void loop_putmem_8(long *dest, const long *src, long n, int pe) {
    for (long i = 0; i < n; i++)
        shmem_putmem(dest, src, 8, pe);
}

__attribute__((noinline)) long loop_fadd(long *dest, long n, int pe) {
    long sum = 0;
    for (long i = 0; i < n; i++)
        sum += shmem_long_atomic_fetch_add(dest, 1, pe);
    return sum;
}

__attribute__((noinline)) void loop_quiet(long n) {
    for (long i = 0; i < n; i++)
        shmem_quiet();
}

__attribute__((noinline)) void loop_putmem_quiet(long *dest, const long *src, long n, int pe) {
    for (long i = 0; i < n; i++) {
        shmem_putmem(dest, src, 8, pe);
        shmem_quiet();
    }
}

__attribute__((noinline)) void loop_empty(long *dest, long n, int pe) {
    for (long i = 0; i < n; i++)
        empty_call(dest, i, pe);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000;
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    long *dest = shmem_calloc(4, sizeof(long));
    long *sync = shmem_calloc(1, sizeof(long));
    long src = 42;
    if (dest == NULL || sync == NULL) {
        fprintf(stderr, "shmem_icount: allocation failed\n");
        shmem_global_exit(1);
    }
    if (me == 0) {
        int pe = npes > 1 ? 1 : 0;
        loop_long_p(dest, n, pe);
        loop_putmem_8(dest + 1, &src, n, pe);
        long sum = loop_fadd(dest + 2, n, pe);
        loop_quiet(n);
        loop_putmem_quiet(dest + 3, &src, n, pe);
        loop_empty(dest, n, pe);
        shmem_quiet();
        printf("shmem_icount: %ld calls each of shmem_long_p, shmem_putmem(8 B), "
               "shmem_long_atomic_fetch_add, shmem_quiet, shmem_putmem(8 B) + shmem_quiet, empty_call to PE %d (fetch sum %ld)\n",
               n, pe, sum);
        for (int p = 1; p < npes; p++)
            shmem_long_atomic_set(sync, 1, p);
        shmem_quiet();
    } else {
        shmem_long_wait_until(sync, SHMEM_CMP_EQ, 1);
    }
    shmem_finalize();
    return 0;
}
