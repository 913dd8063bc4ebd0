/*
 * reinit.c - OpenSHMEM 1.6's initialization cycles: shmem_init and shmem_finalize in
 * matched pairs, several times in one process, with a new initialization after each last
 * finalize (1.5 left that undefined; 1.6 allows it).
 *
 * Three cycles, the second started with shmem_init_thread (another thread level), the
 * third with a nested shmem_init/shmem_finalize pair inside it.  Each cycle checks:
 *   * shmem_query_initialized (1 inside, 0 after the finalize) and the same PE numbers;
 *   * that the last finalize emptied the symmetric heap: the cycle's first block has the
 *     address of the first cycle's first block (a block is left allocated on purpose);
 *   * puts to the right neighbour tagged with the cycle, read back after a barrier;
 *   * atomic adds to a global (the data segment outlives the cycles: the counts add up);
 *   * a broadcast and a sum reduction with a root and values that change with the cycle;
 *   * a strided team split, a reduction on it and its destruction;
 *   * a context: puts through it, its quiet, its destruction.
 * With the argument "implicit" the last cycle does not call shmem_finalize: the library's
 * exit handler finalizes and leaves.  With "leave-early" the last PE exits after the first
 * cycle: the others' shmem_init_thread must fail, naming the cycle (the harness checks the
 * message), not hang.  With "underscore-exit" the last PE ends with _exit(0) after its last
 * shmem_finalize, skipping the library's exit handler, and the others exit a second later
 * (the service has reclaimed the job by then): the job succeeds, and oshrun warns that the
 * PE did not leave the job.  With "fork-child" every PE forks a child after its
 * last shmem_finalize that calls exit(0), running the exit handlers it inherited: the
 * library's must not act for the parent (which then leaves the job cleanly itself).
 */
#define CTEST_NAME "reinit"
#include "ctest.h"
#include <sys/wait.h>
#include <unistd.h>

#define CYCLES 3
#define N 64

static long counter; /* in the data segment: symmetric, and kept across cycles */

static void check_initialized(int expected, const char *when) {
    int initialized = -1;
    SH(query_initialized)(&initialized);
    CHECK((initialized != 0) == (expected != 0), "shmem_query_initialized %s: %d", when,
          initialized);
}

static void start(int cycle) {
    if (cycle == 1) {
        int provided = -1, queried = -1;
        CHECK(SH(init_thread)(SHMEM_THREAD_SERIALIZED, &provided) == 0,
              "shmem_init_thread failed in cycle %d", cycle);
        CHECK(provided >= SHMEM_THREAD_SERIALIZED, "cycle %d: thread level %d provided", cycle,
              provided);
        SH(query_thread)(&queried);
        CHECK(queried == provided, "shmem_query_thread %d, provided %d", queried, provided);
    } else {
        SH(init)();
    }
    if (cycle == 2) {
        SH(init)(); /* nested: counted */
        SH(finalize)(); /* not the last: a barrier */
    }
}

static void one_cycle(int cycle, void **first_block) {
    int me = SH(my_pe)(), npes = SH(n_pes)();
    int right = (me + 1) % npes, left = (me + npes - 1) % npes;
    check_initialized(1, "inside a cycle");
    ctest_begin();
    if (cycle == 0)
        *first_block = ctest_bar_words;
    CHECK(ctest_bar_words == *first_block,
          "cycle %d: the first block is at %p, %p in the first cycle: the last finalize did "
          "not free the symmetric heap",
          cycle, (void *)ctest_bar_words, *first_block);

    long *buf = (long *)SH(malloc)(N * sizeof(long));
    long *src = (long *)SH(malloc)(N * sizeof(long));
    CHECK(buf != NULL && src != NULL, "cycle %d: shmem_malloc returned NULL", cycle);
    for (int i = 0; i < N; i++) {
        src[i] = cycle * 1000000L + me * 1000L + i;
        buf[i] = -1;
    }
    SH(barrier_all)();
    SH(long_put)(buf, src, N, right);
    SH(barrier_all)();
    for (int i = 0; i < N; i++)
        CHECK(buf[i] == cycle * 1000000L + left * 1000L + i, "cycle %d: put [%d] = %ld", cycle,
              i, buf[i]);

    /* Atomics on a global: every PE adds 1 on the cycle's root. */
    int root = cycle % npes;
    SH(long_atomic_add)(&counter, 1, root);
    SH(barrier_all)();
    long expected = 0;
    for (int c = 0; c <= cycle; c++)
        if (c % npes == me)
            expected += npes;
    CHECK(counter == expected, "cycle %d: the global counter is %ld, expected %ld", cycle,
          counter, expected);

    /* Broadcast from the cycle's root, and a sum reduction. */
    for (int i = 0; i < N; i++)
        buf[i] = -1;
    SH(barrier_all)();
    CHECK(SH(long_broadcast)(SHMEM_TEAM_WORLD, buf, src, N, root) == 0,
          "cycle %d: shmem_long_broadcast failed", cycle);
    for (int i = 0; i < N; i++)
        CHECK(buf[i] == cycle * 1000000L + root * 1000L + i,
              "cycle %d: broadcast from %d: [%d] = %ld", cycle, root, i, buf[i]);
    src[0] = me + cycle;
    CHECK(SH(long_sum_reduce)(SHMEM_TEAM_WORLD, buf, src, 1) == 0,
          "cycle %d: shmem_long_sum_reduce failed", cycle);
    long sum = (long)npes * (npes - 1) / 2 + (long)npes * cycle;
    CHECK(buf[0] == sum, "cycle %d: sum %ld, expected %ld", cycle, buf[0], sum);

    /* A team of the even PEs. */
    shmem_team_t evens = SHMEM_TEAM_INVALID;
    int size = (npes + 1) / 2;
    CHECK(SH(team_split_strided)(SHMEM_TEAM_WORLD, 0, 2, size, NULL, 0, &evens) == 0,
          "cycle %d: shmem_team_split_strided failed", cycle);
    if (me % 2 == 0) {
        CHECK(SH(team_my_pe)(evens) == me / 2, "cycle %d: team PE %d", cycle,
              SH(team_my_pe)(evens));
        src[1] = me * 10 + cycle;
        CHECK(SH(long_sum_reduce)(evens, &buf[1], &src[1], 1) == 0,
              "cycle %d: the team's reduction failed", cycle);
        long t = 0;
        for (int pe = 0; pe < npes; pe += 2)
            t += pe * 10 + cycle;
        CHECK(buf[1] == t, "cycle %d: the team's sum is %ld, expected %ld", cycle, buf[1], t);
        SH(team_destroy)(evens);
    } else {
        CHECK(evens == SHMEM_TEAM_INVALID, "cycle %d: an odd PE got a team", cycle);
    }

    /* A context. */
    shmem_ctx_t ctx;
    CHECK(SH(ctx_create)(0, &ctx) == 0, "cycle %d: shmem_ctx_create failed", cycle);
    SH(barrier_all)();
    for (int i = 0; i < N; i++)
        src[i] = -(cycle * 1000000L + me * 1000L + i);
    SH(ctx_long_put)(ctx, buf, src, N, left);
    SH(ctx_quiet)(ctx);
    SH(ctx_destroy)(ctx);
    SH(barrier_all)();
    for (int i = 0; i < N; i++)
        CHECK(buf[i] == -(cycle * 1000000L + right * 1000L + i),
              "cycle %d: context put [%d] = %ld", cycle, i, buf[i]);

    /* The barrier words stay allocated: the finalize frees them. */
    SH(free)(src);
    SH(free)(buf);
}

int main(int argc, char **argv) {
    int implicit = argc > 1 && strcmp(argv[1], "implicit") == 0;
    int leave_early = argc > 1 && strcmp(argv[1], "leave-early") == 0;
    void *first_block = NULL;
    int me = -1, npes = -1;
    check_initialized(0, "before the first shmem_init");
    for (int cycle = 0; cycle < CYCLES; cycle++) {
        start(cycle);
        if (cycle == 0) {
            me = SH(my_pe)();
            npes = SH(n_pes)();
        }
        CHECK(SH(my_pe)() == me && SH(n_pes)() == npes, "cycle %d: PE %d of %d, was %d of %d",
              cycle, SH(my_pe)(), SH(n_pes)(), me, npes);
        one_cycle(cycle, &first_block);
        if (implicit && cycle == CYCLES - 1)
            break;
        SH(finalize)();
        check_initialized(0, "after shmem_finalize");
        if (leave_early && me == npes - 1)
            return 0;
    }
    if (argc > 1 && strcmp(argv[1], "fork-child") == 0) {
        fflush(stdout);
        pid_t child = fork();
        CHECK(child >= 0, "fork failed");
        if (child == 0)
            exit(0); /* runs the inherited exit handlers */
        int status = -1;
        CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) &&
                  WEXITSTATUS(status) == 0,
              "the forked child ended with status %d", status);
    }
    ctest_ok(me, npes);
    if (argc > 1 && strcmp(argv[1], "underscore-exit") == 0) {
        if (me == npes - 1)
            _exit(0);
        /* The others exit after it: its node's service has reclaimed the job by then, and
         * their leaving at exit must not fail for it. */
        ctest_sleep_us(1000000);
    }
    return 0;
}
