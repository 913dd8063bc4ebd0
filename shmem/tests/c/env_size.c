/*
 * env_size.c - the symmetric heap size from SHMEM_SYMMETRIC_SIZE / SMA_SYMMETRIC_SIZE
 * (OpenSHMEM 1.5 §8, "Environment Variables").
 *
 *   env_size BYTES     the harness set a valid size worth BYTES (e.g. "1.5M" -> 1572864):
 *                      3/4 of it can be allocated, 4 and 8 times it cannot (NULL on every
 *                      PE, and the heap stays usable), the block is symmetric.
 *   env_size invalid   the harness set an invalid value: shmem_init_thread must refuse to
 *                      initialise (return nonzero) or end the program with a message; this
 *                      program reports a successful initialisation as a failure.  The
 *                      harness checks that the library's message names the variable.
 */
#define CTEST_NAME "env_size"
#include "ctest.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: env_size BYTES | env_size invalid\n");
        return 2;
    }
    if (strcmp(argv[1], "invalid") == 0) {
        int provided = -1;
        int rc = shmem_init_thread(SHMEM_THREAD_SINGLE, &provided);
        CHECK(rc != 0, "shmem_init_thread accepted SHMEM_SYMMETRIC_SIZE=\"%s\"",
              getenv("SHMEM_SYMMETRIC_SIZE") ? getenv("SHMEM_SYMMETRIC_SIZE") : "(unset)");
        printf("env_size: shmem_init_thread refused the invalid size (rc %d): ok\n", rc);
        return 0;
    }
    char *end = NULL;
    unsigned long long bytes = strtoull(argv[1], &end, 10);
    if (end == argv[1] || *end != '\0' || bytes < 4096) {
        fprintf(stderr, "env_size: bad BYTES argument '%s'\n", argv[1]);
        return 2;
    }

    shmem_init();
    ctest_begin();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    size_t fits = (size_t)(bytes / 4 * 3);
    char *p = (char *)shmem_malloc(fits);
    CHECK(p != NULL, "shmem_malloc(%zu) failed with a %llu-byte heap", fits, bytes);
    p[fits - 1] = (char)me;
    ctest_barrier();
    CHECK(shmem_char_g(&p[fits - 1], (me + 1) % npes) == (char)((me + 1) % npes),
          "the large block is not symmetric");
    ctest_barrier();
    shmem_free(p);
    void *q = shmem_malloc((size_t)bytes * 4);
    CHECK(q == NULL, "shmem_malloc(%llu) succeeded with a %llu-byte heap", bytes * 4, bytes);
    /* A second refusal: the library reports only the job's first. */
    void *q2 = shmem_malloc((size_t)bytes * 8);
    CHECK(q2 == NULL, "shmem_malloc(%llu) succeeded with a %llu-byte heap", bytes * 8, bytes);
    char *s = (char *)shmem_malloc(fits);
    CHECK(s != NULL, "shmem_malloc(%zu) failed after a refused request", fits);
    ctest_barrier();
    shmem_free(s);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
