/*
 * threads.c - SHMEM_THREAD_MULTIPLE (OpenSHMEM 1.5 §9.2, §9.4): shmem_init_thread grants
 * it and shmem_query_thread reports it; two POSIX threads per PE, each with its own
 * private context, put, get and update counters concurrently on the other PEs; each thread
 * completes its own context with shmem_ctx_quiet; the totals and every transferred
 * element are exact.
 */
#define CTEST_NAME "threads"
#include "ctest.h"

#include <pthread.h>

enum { NTHREADS = 2, ITERS = 200, BLOCK = 256 };

static int me, npes;
static long *slots;   /* symmetric: [writer pe][thread][BLOCK] */
static long *counter; /* symmetric: [thread] on every PE */

static void *worker(void *arg) {
    int t = (int)(intptr_t)arg;
    shmem_ctx_t ctx;
    CHECK(shmem_ctx_create(SHMEM_CTX_PRIVATE, &ctx) == 0, "thread %d: ctx_create failed", t);
    long src[BLOCK], back[BLOCK];
    for (int i = 0; i < ITERS; i++) {
        int pe = (me + 1 + i) % npes;
        for (int k = 0; k < BLOCK; k++)
            src[k] = ((long)me * NTHREADS + t) * 1000000L + (long)i * BLOCK + k;
        long *dst = &slots[((size_t)me * NTHREADS + (size_t)t) * BLOCK];
        shmem_ctx_long_put(ctx, dst, src, BLOCK, pe);
        shmem_ctx_long_atomic_add(ctx, &counter[t], 1, pe);
        long v = shmem_ctx_long_atomic_fetch_inc(ctx, &counter[t], (pe + 1) % npes);
        CHECK(v >= 0, "thread %d: fetch_inc returned %ld", t, v);
        shmem_ctx_quiet(ctx);
        /* What this thread wrote is there now: read it back. */
        shmem_ctx_long_get(ctx, back, dst, BLOCK, pe);
        for (int k = 0; k < BLOCK; k++)
            CHECK(back[k] == src[k], "thread %d iteration %d: element %d read back %ld, not %ld",
                  t, i, k, back[k], src[k]);
    }
    shmem_ctx_quiet(ctx);
    shmem_ctx_destroy(ctx);
    return NULL;
}

int main(void) {
    int provided = -1;
    CHECK(shmem_init_thread(SHMEM_THREAD_MULTIPLE, &provided) == 0, "shmem_init_thread failed");
    CHECK(provided == SHMEM_THREAD_MULTIPLE, "provided %d, not SHMEM_THREAD_MULTIPLE", provided);
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    int queried = -1;
    shmem_query_thread(&queried);
    CHECK(queried == SHMEM_THREAD_MULTIPLE, "query_thread %d", queried);

    slots = (long *)shmem_calloc((size_t)npes * NTHREADS * BLOCK, sizeof(long));
    counter = (long *)shmem_calloc(NTHREADS, sizeof(long));
    CHECK(slots != NULL && counter != NULL, "allocation failed");
    ctest_barrier();

    pthread_t th[NTHREADS];
    for (int t = 0; t < NTHREADS; t++)
        CHECK(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) == 0,
              "pthread_create failed");
    for (int t = 0; t < NTHREADS; t++)
        CHECK(pthread_join(th[t], NULL) == 0, "pthread_join failed");
    ctest_barrier();

    /* Each counter got one add and one fetch_inc per iteration of every thread t of every
     * PE, spread over the PEs: the sum over all PEs is exact. */
    for (int t = 0; t < NTHREADS; t++) {
        long sum = 0;
        for (int pe = 0; pe < npes; pe++)
            sum += shmem_long_g(&counter[t], pe);
        CHECK(sum == 2L * npes * ITERS, "thread %d counters sum to %ld, expected %ld", t, sum,
              2L * npes * ITERS);
    }
    ctest_barrier();
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
