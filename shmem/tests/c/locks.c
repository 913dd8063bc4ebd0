/*
 * locks.c - distributed locks (OpenSHMEM 1.5 §9.11) under contention:
 *   * mutual exclusion: every PE increments a counter on PE 0 with a plain get and put
 *     (not atomic) while holding the lock, through set_lock and through test_lock loops;
 *     the total is exact;
 *   * test_lock returns 1 while another PE holds the lock and 0 when it acquires it;
 *   * FIFO fairness ("waiting PEs set the lock in a first-come, first-served manner"):
 *     PE 0 holds the lock while PEs 1, 2, ... request it one after another, each well after
 *     the previous one started waiting (it announces the request first, and the next waits
 *     for that announcement plus a grace period); the order in which they then get the lock
 *     must be the order of the requests.  A lock that is not FIFO (a test-and-set spin
 *     lock, say) passes this only by chance, and not for 4 PEs.
 *   * the lock words are a global (.bss) and a heap object.
 */
#define CTEST_NAME "locks"
#include "ctest.h"

enum { ITERS = 60 };

long global_lock; /* symmetric, zero before first use */

static int me, npes;

int main(void) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();

    long *heap_lock = (long *)shmem_calloc(1, sizeof(long));
    long *counter = (long *)shmem_calloc(4, sizeof(long)); /* [0] count, [1] log length */
    int *order = (int *)shmem_calloc((size_t)npes + 1, sizeof(int));
    long *announce = (long *)shmem_calloc((size_t)npes, sizeof(long));
    CHECK(heap_lock && counter && order && announce, "allocation failed");
    ctest_barrier();

    /* Mutual exclusion, both lock words, both acquisition styles. */
    for (int which = 0; which < 2; which++) {
        long *lock = which == 0 ? &global_lock : heap_lock;
        for (int i = 0; i < ITERS; i++) {
            if (i % 2 == 0) {
                shmem_set_lock(lock);
            } else {
                double t0 = ctest_now();
                while (shmem_test_lock(lock) != 0)
                    CHECK(ctest_now() - t0 < 120, "test_lock never acquired the lock");
            }
            long v = shmem_long_g(&counter[0], 0);
            if (i % 7 == 0)
                ctest_sleep_us(200); /* widen the window for a broken lock */
            shmem_long_p(&counter[0], v + 1, 0);
            shmem_clear_lock(lock); /* quiets the put first */
        }
        ctest_barrier();
        long total = shmem_long_g(&counter[0], 0);
        CHECK(total == (long)npes * ITERS * (which + 1), "lock %d: counter %ld, expected %ld",
              which, total, (long)npes * ITERS * (which + 1));
        ctest_barrier();
    }

    /* test_lock on a held lock returns 1 and does not acquire it. */
    if (me == 0)
        shmem_set_lock(heap_lock);
    ctest_barrier();
    if (me != 0)
        CHECK(shmem_test_lock(heap_lock) == 1, "test_lock acquired a lock PE 0 holds");
    ctest_barrier();
    if (me == 0)
        shmem_clear_lock(heap_lock);
    ctest_barrier();

    /* FIFO: PE 0 holds; PEs 1..n-1 request in rank order, spaced by announcements. */
    if (npes >= 3) {
        const long grace_us = 300000;
        if (me == 0) {
            shmem_set_lock(&global_lock);
            /* Wait until the last PE has announced its request, then a grace period. */
            shmem_long_wait_until(&announce[npes - 1], SHMEM_CMP_EQ, 1);
            ctest_sleep_us(grace_us);
            shmem_clear_lock(&global_lock);
        } else {
            if (me > 1) {
                shmem_long_wait_until(&announce[me - 1], SHMEM_CMP_EQ, 1);
                ctest_sleep_us(grace_us);
            }
            /* Tell everyone this PE is about to request (it is queued well before the
             * next PE requests); the announcements arrive without a quiet. */
            for (int pe = 0; pe < npes; pe++)
                shmem_long_atomic_set(&announce[me], 1, pe);
            shmem_set_lock(&global_lock);
            int pos = shmem_int_atomic_fetch_inc(&order[npes], 0);
            shmem_int_p(&order[pos], me, 0);
            shmem_clear_lock(&global_lock);
        }
        ctest_barrier();
        if (me == 0) {
            for (int i = 0; i < npes - 1; i++)
                CHECK(order[i] == i + 1, "lock not FIFO: acquisition %d went to PE %d, not %d",
                      i, order[i], i + 1);
            printf("locks: FIFO order of %d queued requests confirmed\n", npes - 1);
        }
        ctest_barrier();
    }

    ctest_barrier();
    shmem_free(announce);
    shmem_free(order);
    shmem_free(counter);
    shmem_free(heap_lock);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
