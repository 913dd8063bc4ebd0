/*
 * osb_gups.c - an application kernel: GUPS-style random updates of a distributed table.
 *
 * Every PE owns a table of --table-bytes bytes of 64-bit words (symmetric) and applies
 * updates per batch (as many as fill --batch-ms, at most --updates): a pseudo-random 64-bit value picks a PE and a word, and the
 * word is XORed with the value by a non-fetching atomic (shmem_uint64_atomic_xor), as the
 * HPCC RandomAccess benchmark does with remote updates.  A batch ends with shmem_quiet and
 * a barrier; the figure is the aggregate rate of all PEs, MUP/s (10^6 updates per second),
 * median over the batches (min and max beside it).
 *
 * Verification: the same random sequence is applied a second time (untimed); XOR undoes
 * itself, so every table must be back to its start values.  A single wrong word is an error.
 *
 *   osb_gups [--quick] [--table-bytes N] [--updates N] [--batches N] [--batch-ms MS]
 */
#include "osb.h"

static uint64_t *table; /* symmetric */
static uint64_t words, rng;
static long applied; /* updates this PE made so far */
static int me, npes;

static uint64_t next(void) { /* xorshift64 */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void updates(size_t unused, long n) {
    (void)unused;
    applied += n;
    for (long i = 0; i < n; i++) {
        uint64_t r = next();
        int pe = (int)((r >> 40) % (uint64_t)npes);
        shmem_uint64_atomic_xor(&table[r % words], r, pe);
    }
    shmem_quiet();
    shmem_barrier_all();
}

int main(int argc, char **argv) {
    struct osb_opts o;
    osb_parse(argc, argv, &o);
    shmem_init();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    osb_header("osb_gups", me, npes, &o);
    words = (uint64_t)o.table_bytes / 8;
    if (words == 0 || o.updates < 1)
        osb_die("osb_gups: --table-bytes and --updates must be positive");
    table = shmem_malloc(words * 8);
    if (table == NULL)
        osb_die("osb_gups: out of symmetric memory");
    for (uint64_t i = 0; i < words; i++)
        table[i] = i ^ ((uint64_t)me << 48);
    shmem_barrier_all();
    osb_warm_up(&o);

    uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(me + 1);
    double sec[3];
    rng = seed;
    osb_measure(&o, updates, 0, o.updates, sec); /* seconds per update of this PE */
    /* Undo: the same sequence (calibration and warm-up included) once more.  Every PE
     * made the same number of updates (PE 0 chose it), so the barriers inside match. */
    rng = seed;
    updates(0, applied);

    long bad = 0;
    for (uint64_t i = 0; i < words; i++)
        bad += table[i] != (i ^ ((uint64_t)me << 48));
    if (bad)
        osb_die("osb_gups: the table is not back to its start values after the undo pass");
    if (me == 0)
        osb_report("gups", "app", (size_t)o.table_bytes, npes, "MUP/s", sec, npes / 1e6, 1);
    shmem_barrier_all();
    shmem_free(table);
    shmem_finalize();
    return 0;
}
