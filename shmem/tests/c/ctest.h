/*
 * ctest.h - the small self-checking toolkit of the C test programs in shmem/tests/c.
 *
 * What it is:
 *   * CHECK(cond, fmt, ...) prints "<program>: PE i: FAILED at file:line: <message>" on
 *     stderr and ends the process with exit status 1 (the launcher then ends the job with
 *     that status);
 *   * ctest_begin() after initialisation; ctest_barrier(), a barrier made of issue-5
 *     routines only (quiet, AMOs, wait_until), so that no program depends on the
 *     collectives;
 *   * ctest_ok() prints the one success line per PE that the harness
 *     (shmem/tests/c_suite.rs) requires: "<program>: PE i of n: ok";
 *   * ctest_node_of() tells which node every PE runs on (GSAS_NODE, set by the launchers),
 *     for the expectations of shmem_ptr and SHMEM_TEAM_SHARED;
 *   * CTEST_*_TYPES(X): the type tables of the specification (TYPE, TYPENAME), written out
 *     here independently of the X-macro tables inside shmem.h, so that a row missing there
 *     is a link or compile error here.
 *
 * What it is not: a test framework.  The programs are plain OpenSHMEM programs that check
 * their own results.
 *
 * Thread safety: CHECK may be called from any thread (it writes one line and exits);
 * ctest_barrier is for the main thread.
 *
 * With -DTEST_PSHMEM every routine named through SH(...) (and every routine the helpers
 * here call) is called by its profiling name (pshmem_...), which makes the same source a
 * test of the profiling interface.
 */
#ifndef GSAS_CTEST_H
#define GSAS_CTEST_H

/* clock_gettime and nanosleep under -std=c11 (must precede every system header). */
#if !defined(_POSIX_C_SOURCE) && !defined(_GNU_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include <shmem.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef TEST_PSHMEM
#include <pshmem.h>
#define SH(name) pshmem_##name
#else
#define SH(name) shmem_##name
#endif

#ifndef CTEST_NAME
#define CTEST_NAME "ctest"
#endif

#if defined(__GNUC__)
#define CTEST_UNUSED __attribute__((unused))
#define CTEST_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CTEST_UNUSED
#define CTEST_PRINTF(a, b)
#endif

/* The PE number for messages: -1 before ctest_begin. */
static int ctest_pe = -1;

static CTEST_UNUSED CTEST_PRINTF(3, 4) void ctest_fail(const char *file, int line,
                                                       const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "%s: PE %d: FAILED at %s:%d: %s\n", CTEST_NAME, ctest_pe, file, line, msg);
    fflush(stderr);
    exit(1);
}

/* CHECK(condition, printf-style message...). */
#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        if (!(cond))                                                                          \
            ctest_fail(__FILE__, __LINE__, __VA_ARGS__);                                      \
    } while (0)

/* The symmetric words of ctest_barrier: [0] arrivals (on PE 0), [1] release epoch. */
static long *ctest_bar_words;
static long ctest_bar_epoch;

/* Call right after the program's own initialisation (shmem_init, shmem_init_thread or
 * start_pes), again after each new initialisation: records the PE number for messages and
 * allocates the barrier's words (collective). */
static CTEST_UNUSED void ctest_begin(void) {
    ctest_pe = SH(my_pe)();
    ctest_bar_epoch = 0;
    ctest_bar_words = (long *)SH(calloc)(2, sizeof(long));
    CHECK(ctest_bar_words != NULL, "shmem_calloc of the barrier words returned NULL");
}

/* A barrier made of the routines under test in issue 5 (quiet, AMOs, wait_until), so that
 * the programs do not depend on the collectives: completes the default context's
 * operations (like shmem_barrier_all), then every PE arrives at PE 0 with an atomic
 * increment and waits for PE 0 to publish the new epoch.  The arrivals and the releases
 * are not quieted: a blocking AMO reaches a waiting PE by itself. */
static CTEST_UNUSED void ctest_barrier(void) {
    int npes = SH(n_pes)();
    SH(quiet)();
    ctest_bar_epoch++;
    if (npes == 1)
        return;
    if (SH(my_pe)() == 0) {
        SH(long_wait_until)(&ctest_bar_words[0], SHMEM_CMP_GE, ctest_bar_epoch * (npes - 1));
        for (int pe = 1; pe < npes; pe++)
            SH(long_atomic_set)(&ctest_bar_words[1], ctest_bar_epoch, pe);
    } else {
        SH(long_atomic_inc)(&ctest_bar_words[0], 0);
        SH(long_wait_until)(&ctest_bar_words[1], SHMEM_CMP_GE, ctest_bar_epoch);
    }
}

/* The success line of this PE.  Call after shmem_finalize. */
static CTEST_UNUSED void ctest_ok(int pe, int npes) {
    printf("%s: PE %d of %d: ok\n", CTEST_NAME, pe, npes);
    fflush(stdout);
}

/* Node id of every PE (array of n_pes ints, malloc'ed), gathered with puts into a
 * symmetric array: nodes[i] is the GSAS_NODE of PE i, or -1 when a PE has no GSAS_NODE.
 * Collective. */
static CTEST_UNUSED int *ctest_node_of(void) {
    int npes = SH(n_pes)(), me = SH(my_pe)();
    int *sym = (int *)SH(malloc)(sizeof(int) * (size_t)npes);
    CHECK(sym != NULL, "shmem_malloc for the node table returned NULL");
    const char *env = getenv("GSAS_NODE");
    int mine = env != NULL && *env != '\0' ? atoi(env) : -1;
    for (int pe = 0; pe < npes; pe++)
        SH(int_p)(&sym[me], mine, pe);
    ctest_barrier();
    int *nodes = (int *)malloc(sizeof(int) * (size_t)npes);
    CHECK(nodes != NULL, "malloc failed");
    memcpy(nodes, sym, sizeof(int) * (size_t)npes);
    ctest_barrier();
    SH(free)(sym);
    return nodes;
}

/* Standard RMA types (24). */
#define CTEST_RMA_TYPES(X)                                                                    \
    X(float, float) X(double, double) X(long double, longdouble) X(char, char)                \
    X(signed char, schar) X(short, short) X(int, int) X(long, long) X(long long, longlong)    \
    X(unsigned char, uchar) X(unsigned short, ushort) X(unsigned int, uint)                   \
    X(unsigned long, ulong) X(unsigned long long, ulonglong) X(int8_t, int8)                  \
    X(int16_t, int16) X(int32_t, int32) X(int64_t, int64) X(uint8_t, uint8)                   \
    X(uint16_t, uint16) X(uint32_t, uint32) X(uint64_t, uint64) X(size_t, size)               \
    X(ptrdiff_t, ptrdiff)
/* Standard AMO types (12): compare_swap, fetch_inc, inc, fetch_add, add; also p2p. */
#define CTEST_AMO_STD_TYPES(X)                                                                \
    X(int, int) X(long, long) X(long long, longlong) X(unsigned int, uint)                    \
    X(unsigned long, ulong) X(unsigned long long, ulonglong) X(int32_t, int32)                \
    X(int64_t, int64) X(uint32_t, uint32) X(uint64_t, uint64) X(size_t, size)                 \
    X(ptrdiff_t, ptrdiff)
/* Extended AMO types (14): fetch, set, swap. */
#define CTEST_AMO_EXT_TYPES(X) X(float, float) X(double, double) CTEST_AMO_STD_TYPES(X)
/* Bitwise AMO types (7). */
#define CTEST_AMO_BIT_TYPES(X)                                                                \
    X(unsigned int, uint) X(unsigned long, ulong) X(unsigned long long, ulonglong)            \
    X(int32_t, int32) X(int64_t, int64) X(uint32_t, uint32) X(uint64_t, uint64)
/* Deprecated AMO names: fetch/set/swap for these 5, cswap/finc/inc/fadd/add for 3. */
#define CTEST_AMO_DEPR_EXT_TYPES(X) X(float, float) X(double, double) CTEST_AMO_DEPR_STD_TYPES(X)
#define CTEST_AMO_DEPR_STD_TYPES(X) X(int, int) X(long, long) X(long long, longlong)
/* Deprecated point-to-point types of wait_until/test, and of shmem_TYPENAME_wait. */
#define CTEST_P2P_DEPR_TYPES(X) X(short, short) X(unsigned short, ushort)
#define CTEST_WAIT_DEPR_TYPES(X) X(short, short) X(int, int) X(long, long) X(long long, longlong)

/* Monotonic time in seconds. */
static CTEST_UNUSED double ctest_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sleeps for the given number of microseconds. */
static CTEST_UNUSED void ctest_sleep_us(long us) {
    struct timespec ts;
    ts.tv_sec = us / 1000000;
    ts.tv_nsec = (us % 1000000) * 1000;
    nanosleep(&ts, NULL);
}

#endif /* GSAS_CTEST_H */
