/*
 * rma_large.c - transfers far larger than a datagram (OpenSHMEM 1.5 §9.5, §9.6): 1 MiB and
 * 4 MiB putmem/getmem, their _nbi forms completed by quiet, the ctx twins, lengths and
 * offsets that are not multiples of anything, and globals and function-scope statics of
 * the executable (1 MiB in .bss, 64 KiB in .data) as targets and sources.  Built both with
 * the shared and with the static library.
 */
#define CTEST_NAME "rma_large"
#include "ctest.h"

#define MIB (1024 * 1024)

/* 1 MiB of .bss and 64 KiB of .data (initialised, so that it is not .bss). */
char global_bss[MIB];
unsigned char global_data[64 * 1024] = {1, 2, 3};

static int me, npes, right, left;

static unsigned char pat(int pe, int round, size_t i) {
    return (unsigned char)((size_t)pe * 131 + (size_t)round * 29 + (i ^ (i >> 9)) % 253 + 1);
}

static void fill(unsigned char *p, size_t n, int pe, int round) {
    for (size_t i = 0; i < n; i++)
        p[i] = pat(pe, round, i);
}

static void expect(const unsigned char *p, size_t n, int pe, int round, const char *what) {
    for (size_t i = 0; i < n; i++)
        CHECK(p[i] == pat(pe, round, i), "%s (round %d, %zu bytes from PE %d): byte %zu is %u, not %u",
              what, round, n, pe, i, p[i], pat(pe, round, i));
}

int main(void) {
    static long function_static[16 * 1024]; /* 128 KiB */

    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    right = (me + 1) % npes;
    left = (me + npes - 1) % npes;
    shmem_ctx_t ctx;
    CHECK(shmem_ctx_create(0, &ctx) == 0, "shmem_ctx_create failed");

    size_t sizes[3] = {MIB, 4 * MIB, 3 * MIB + 12345};
    unsigned char *sym = (unsigned char *)shmem_malloc(2 * 4 * MIB + 64);
    unsigned char *local = (unsigned char *)malloc(4 * MIB + 64);
    CHECK(sym != NULL && local != NULL, "allocation failed");
    unsigned char *dst = sym, *src = sym + 4 * MIB + 32;
    int round = 0;
    for (int si = 0; si < 3; si++) {
        size_t n = sizes[si];
        for (int r = 0; r < 6; r++, round++) {
            memset(dst, 0, n);
            fill(src, n, me, round);
            fill(local, n, me, round);
            ctest_barrier();
            switch (r) {
            case 0: shmem_putmem(dst, local, n, right); break;
            case 1: shmem_putmem_nbi(dst, local, n, right); shmem_quiet(); break;
            case 2: shmem_ctx_putmem_nbi(ctx, dst, local, n, right); shmem_ctx_quiet(ctx); break;
            case 3: memset(local, 0, n); shmem_getmem(local, src, n, right); break;
            case 4: memset(local, 0, n); shmem_getmem_nbi(local, src, n, right); shmem_quiet(); break;
            case 5:
                memset(local, 0, n);
                shmem_ctx_getmem(ctx, local, src, n, right);
                break;
            }
            ctest_barrier();
            if (r < 3)
                expect(dst, n, left, round, "heap put");
            else
                expect(local, n, right, round, "heap get");
        }
    }

    /* Globals and statics as targets (puts) and sources (gets). */
    for (int r = 0; r < 4; r++, round++) {
        memset(global_bss, 0, sizeof global_bss);
        memset(global_data, 0, sizeof global_data);
        memset(function_static, 0, sizeof function_static);
        fill(local, MIB, me, round);
        ctest_barrier();
        if (r == 0) {
            shmem_putmem(global_bss, local, sizeof global_bss, right);
            shmem_putmem(global_data, local, sizeof global_data, right);
            shmem_putmem(function_static, local, sizeof function_static, right);
        } else if (r == 1) {
            shmem_putmem_nbi(global_bss, local, sizeof global_bss, right);
            shmem_putmem_nbi(global_data, local, sizeof global_data, right);
            shmem_putmem_nbi(function_static, local, sizeof function_static, right);
        } else {
            /* Gets: fill the own globals, fetch the right neighbour's. */
            fill((unsigned char *)global_bss, sizeof global_bss, me, round);
            fill(global_data, sizeof global_data, me, round);
            fill((unsigned char *)function_static, sizeof function_static, me, round);
        }
        ctest_barrier();
        if (r < 2) {
            expect((unsigned char *)global_bss, sizeof global_bss, left, round, "put into .bss");
            expect(global_data, sizeof global_data, left, round, "put into .data");
            expect((unsigned char *)function_static, sizeof function_static, left, round,
                   "put into a function static");
        } else {
            unsigned char *g = local;
            memset(g, 0, MIB);
            if (r == 2)
                shmem_getmem(g, global_bss, sizeof global_bss, right);
            else {
                shmem_getmem_nbi(g, global_bss, sizeof global_bss, right);
                shmem_quiet();
            }
            expect(g, sizeof global_bss, right, round, "get from .bss");
            shmem_getmem(g, global_data, sizeof global_data, right);
            expect(g, sizeof global_data, right, round, "get from .data");
            shmem_getmem(g, function_static, sizeof function_static, right);
            expect(g, sizeof function_static, right, round, "get from a function static");
        }
        ctest_barrier();
    }

    /* Heap to global in one call: a source in the data segment, a target in the heap. */
    fill((unsigned char *)global_bss, sizeof global_bss, me, round);
    memset(dst, 0, MIB);
    ctest_barrier();
    shmem_putmem(dst, global_bss, sizeof global_bss, right);
    ctest_barrier();
    expect(dst, MIB, left, round, "put from .bss into the heap");

    ctest_barrier();
    free(local);
    shmem_free(sym);
    shmem_ctx_destroy(ctx);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
