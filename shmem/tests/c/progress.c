/*
 * progress.c - updates reach a waiting PE without the origin calling shmem_quiet
 * (OpenSHMEM 1.5 §9.10: shmem_wait_until and shmem_test must see updates made by AMOs and
 * puts of other PEs; §9.11: shmem_fence orders them).  Every PE sends to the PE half the
 * job away (in the two-node runs: a PE on the other node) and receives from the PE half
 * the job back, all PEs at once, so every update crosses the network in both directions
 * at the same time.  No shmem_quiet anywhere between an update and the wait for it.
 *
 * Each round runs these steps; after each step the receiver acknowledges with an
 * atomic set that the sender waits for (also without quiet), so that no sender runs ahead:
 *   1. flag by shmem_long_atomic_set, the receiver spins on shmem_long_test (both PEs set,
 *      both test: the reported deadlock);
 *   2. flag by shmem_long_p, the receiver waits with shmem_long_wait_until;
 *   3. 16 longs by shmem_long_put, shmem_fence, flag by shmem_long_atomic_set; the receiver
 *      spins on shmem_long_test, then the data must be there (the fence ordered it);
 *   4. 96 KiB by shmem_putmem (more than one UDP datagram), shmem_fence, flag by
 *      shmem_long_p; shmem_long_wait_until, then the data;
 *   5. 16 longs by shmem_long_put_nbi, shmem_fence, flag by shmem_long_atomic_set; the
 *      receiver spins on shmem_long_test_any;
 *   6. flag by shmem_long_atomic_set, then both PEs spin on plain loads of their own flag:
 *      neither calls the library until the update arrived (a PE that computes after a
 *      blocking AMO must not hold the AMO back);
 *   7. shmem_putmem_signal; the receiver spins on shmem_signal_fetch, then the data.
 */
#define CTEST_NAME "progress"
#include "ctest.h"

enum { ROUNDS = 10, STEPS = 7, SMALL = 16, BIG = 96 * 1024 };

#define TIMEOUT_S 120.0

static int me, npes, to, from;
static long *flag;     /* [STEPS]: set by `from` */
static long *ack;      /* [STEPS]: set by `to` */
static long *data;     /* SMALL longs from `from` */
static char *big;      /* BIG bytes from `from` */
static uint64_t *sig;  /* the signal word of step 7 */

static long value(int pe, int round, int i) { return (long)pe * 1000000L + round * 1000L + i; }
static char byte(int pe, int round, size_t i) { return (char)((pe * 31 + round * 7 + (int)(i % 251)) & 0x7f); }

/* Spins until `*p >= v` with the given test routine, bounded. */
static void test_until(long *p, long v, int step) {
    double t0 = ctest_now();
    while (!shmem_long_test(p, SHMEM_CMP_GE, v))
        CHECK(ctest_now() - t0 < TIMEOUT_S, "step %d: shmem_long_test never saw %ld (it is %ld)",
              step, v, *(volatile long *)p);
}

/* Spins on plain loads (no library call) until `*p >= v`, bounded. */
static void load_until(long *p, long v, int step) {
    double t0 = ctest_now();
    while (*(volatile long *)p < v)
        CHECK(ctest_now() - t0 < TIMEOUT_S,
              "step %d: the update %ld never arrived while nobody called the library (it is %ld)",
              step, v, *(volatile long *)p);
}

/* The receiver's acknowledgement of step `s` of round `r`, and the sender's wait for it. */
static void handshake(int s, long r) {
    shmem_long_atomic_set(&ack[s], r, from);
    shmem_long_wait_until(&ack[s], SHMEM_CMP_GE, r);
}

static void check_small(int r, int step) {
    for (int i = 0; i < SMALL; i++)
        CHECK(data[i] == value(from, r, i), "step %d round %d: element %d is %ld, expected %ld",
              step, r, i, data[i], value(from, r, i));
}

int main(void) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    to = (me + npes / 2) % npes;
    from = (me + npes - npes / 2) % npes;
    flag = (long *)shmem_calloc(STEPS, sizeof(long));
    ack = (long *)shmem_calloc(STEPS, sizeof(long));
    data = (long *)shmem_calloc(SMALL, sizeof(long));
    big = (char *)shmem_calloc(BIG, 1);
    sig = (uint64_t *)shmem_calloc(1, sizeof(uint64_t));
    long *src = (long *)malloc(SMALL * sizeof(long));
    char *bsrc = (char *)malloc(BIG);
    CHECK(flag && ack && data && big && sig && src && bsrc, "allocation failed");
    ctest_barrier();

    for (long r = 1; r <= ROUNDS; r++) {
        int ri = (int)r;
        /* 1. atomic set, test loop. */
        shmem_long_atomic_set(&flag[0], r, to);
        test_until(&flag[0], r, 1);
        handshake(0, r);

        /* 2. shmem_long_p, wait_until. */
        shmem_long_p(&flag[1], r, to);
        shmem_long_wait_until(&flag[1], SHMEM_CMP_GE, r);
        handshake(1, r);

        /* 3. put, fence, atomic set, test loop; the data came first. */
        for (int i = 0; i < SMALL; i++)
            src[i] = value(me, ri, i);
        shmem_long_put(data, src, SMALL, to);
        shmem_fence();
        shmem_long_atomic_set(&flag[2], r, to);
        test_until(&flag[2], r, 3);
        check_small(ri, 3);
        handshake(2, r);

        /* 4. a large putmem, fence, shmem_long_p, wait_until. */
        for (size_t i = 0; i < BIG; i++)
            bsrc[i] = byte(me, ri, i);
        shmem_putmem(big, bsrc, BIG, to);
        shmem_fence();
        shmem_long_p(&flag[3], r, to);
        shmem_long_wait_until(&flag[3], SHMEM_CMP_GE, r);
        for (size_t i = 0; i < BIG; i++)
            CHECK(big[i] == byte(from, ri, i), "step 4 round %d: byte %zu differs", ri, i);
        handshake(3, r);

        /* 5. put_nbi, fence, atomic set, test_any loop. */
        for (int i = 0; i < SMALL; i++)
            src[i] = value(me, ri, i) + 500;
        shmem_long_put_nbi(data, src, SMALL, to);
        shmem_fence();
        shmem_long_atomic_set(&flag[4], r, to);
        {
            double t0 = ctest_now();
            while (shmem_long_test_any(&flag[4], 1, NULL, SHMEM_CMP_GE, r) == SIZE_MAX)
                CHECK(ctest_now() - t0 < TIMEOUT_S, "step 5: shmem_long_test_any never saw %ld", r);
        }
        for (int i = 0; i < SMALL; i++)
            CHECK(data[i] == value(from, ri, i) + 500, "step 5 round %d: element %d is %ld", ri, i,
                  data[i]);
        handshake(4, r);

        /* 6. atomic set, then no library call until the partner's update is here. */
        shmem_long_atomic_set(&flag[5], r, to);
        load_until(&flag[5], r, 6);
        handshake(5, r);

        /* 7. put with signal, signal_fetch loop, then the data. */
        for (int i = 0; i < SMALL; i++)
            src[i] = value(me, ri, i) + 700;
        shmem_putmem_signal(data, src, SMALL * sizeof(long), sig, (uint64_t)r, SHMEM_SIGNAL_SET,
                            to);
        {
            double t0 = ctest_now();
            while (shmem_signal_fetch(sig) < (uint64_t)r)
                CHECK(ctest_now() - t0 < TIMEOUT_S, "step 7: shmem_signal_fetch never saw %ld", r);
        }
        for (int i = 0; i < SMALL; i++)
            CHECK(data[i] == value(from, ri, i) + 700, "step 7 round %d: element %d is %ld", ri, i,
                  data[i]);
        handshake(6, r);
    }

    ctest_barrier();
    free(src);
    free(bsrc);
    shmem_free(sig);
    shmem_free(big);
    shmem_free(data);
    shmem_free(ack);
    shmem_free(flag);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
