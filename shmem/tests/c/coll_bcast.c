/*
 * coll_bcast.c - broadcast (OpenSHMEM 1.5 §9.9.4, checklist §2.4):
 *   * the team form shmem_TYPENAME_broadcast for all 24 standard RMA types, 1, 7 and 1000
 *     elements, every root in turn, on SHMEM_TEAM_WORLD and SHMEM_TEAM_SHARED: every
 *     member's dest, the root's included, holds the root's source; nothing past nelems is
 *     written; the source is unchanged; the return value is 0;
 *   * shmem_broadcastmem with 0 (NULL buffers), 1, 12345 and 256 KiB + 3 bytes (far above
 *     the UDP MTU);
 *   * the active-set forms shmem_broadcast32/64 with PE_root an ordinal of the active set:
 *     the root's dest is NOT written, every other member's is; full, strided and
 *     single-PE sets; sizes 0 (NULL), 1, odd and 256 KiB; shrinking sets reusing one
 *     broadcast pSync with two alternating barrier pSyncs (the conformance-suite pattern);
 *     every pSync word back at SHMEM_SYNC_VALUE when a call returns.
 * Buffers are cleared and filled before a synchronization that precedes each broadcast
 * (the specification requires dest to be ready on every PE before any PE calls).
 */
#define CTEST_NAME "coll_bcast"
#include "ctest.h"
#include "coll_common.h"

enum { GUARD = 4, BIGB = 256 * 1024 };

static int me, npes;
static unsigned char *dst_area; /* BIGB + 64 bytes */
static unsigned char *src_area; /* BIGB + 64 bytes */
static long *bcast_ps;          /* SHMEM_BCAST_SYNC_SIZE */
static long *bar_ps[2];         /* SHMEM_BARRIER_SYNC_SIZE each */

/* The value of element i of PE pe's source in round r: 1..100, so it fits every type and
 * differs from the cleared dest (0). */
static int val(int pe, int r, size_t i) {
    return (int)((pe * 13 + r * 7 + (int)(i % 1009) * 3) % 100) + 1;
}

/* ---- team forms, every type ---------------------------------------------------------- */

#define DEF_TEAM_BCAST(T, NAME)                                                               \
    static void team_bcast_##NAME(shmem_team_t team, const char *tname, int r) {              \
        int tn = shmem_team_n_pes(team), tme = shmem_team_my_pe(team);                        \
        static const size_t counts[3] = {1, 7, 1000};                                         \
        T *dest = (T *)(void *)dst_area, *src = (T *)(void *)src_area;                        \
        for (int c = 0; c < 3; c++) {                                                         \
            size_t n = counts[c];                                                             \
            int root = (r + c) % tn;                                                          \
            memset(dest, 0, (n + GUARD) * sizeof(T));                                         \
            for (size_t i = 0; i < n; i++)                                                    \
                src[i] = (T)val(tme, r, i);                                                   \
            CHECK(shmem_team_sync(team) == 0, "team_sync(%s) failed", tname);                 \
            int rc = shmem_##NAME##_broadcast(team, dest, src, n, root);                      \
            CHECK(rc == 0, "shmem_" #NAME "_broadcast(%s, n=%zu, root %d) returned %d", tname, \
                  n, root, rc);                                                               \
            for (size_t i = 0; i < n; i++)                                                    \
                CHECK(dest[i] == (T)val(root, r, i),                                          \
                      "shmem_" #NAME "_broadcast(%s, n=%zu, root %d): dest[%zu] is %g, "      \
                      "expected %g",                                                          \
                      tname, n, root, i, (double)dest[i], (double)(T)val(root, r, i));        \
            for (size_t i = n; i < n + GUARD; i++)                                            \
                CHECK(dest[i] == (T)0,                                                        \
                      "shmem_" #NAME "_broadcast(%s, n=%zu): dest[%zu] past the end is %g",   \
                      tname, n, i, (double)dest[i]);                                          \
            for (size_t i = 0; i < n; i++)                                                    \
                CHECK(src[i] == (T)val(tme, r, i),                                            \
                      "shmem_" #NAME "_broadcast(%s): source[%zu] changed", tname, i);        \
        }                                                                                     \
    }
CTEST_RMA_TYPES(DEF_TEAM_BCAST)

#define CALL_TEAM_BCAST(T, NAME) team_bcast_##NAME(team, tname, r++);
static void team_bcast_all_types(shmem_team_t team, const char *tname) {
    int r = 0;
    CTEST_RMA_TYPES(CALL_TEAM_BCAST)
}

static unsigned char bval(int pe, int r, size_t i) {
    return (unsigned char)(val(pe, r, i) + (int)(i / 1009));
}

/* broadcastmem: 0 bytes with NULL, 1, odd, and far above the MTU. */
static void team_bcastmem(shmem_team_t team, const char *tname) {
    int tn = shmem_team_n_pes(team), tme = shmem_team_my_pe(team);
    const size_t sizes[4] = {0, 1, 12345, BIGB + 3};
    for (int c = 0; c < 4; c++) {
        size_t n = sizes[c];
        int root = (tn - 1 + c) % tn, r = 100 + c;
        if (n == 0) {
            CHECK(shmem_broadcastmem(team, NULL, NULL, 0, root) == 0,
                  "broadcastmem(%s, NULL, NULL, 0) failed", tname);
            CHECK(shmem_int_broadcast(team, NULL, NULL, 0, root) == 0,
                  "int_broadcast(%s, NULL, NULL, 0) failed", tname);
            continue;
        }
        memset(dst_area, 0, n + GUARD);
        for (size_t i = 0; i < n; i++)
            src_area[i] = bval(tme, r, i);
        shmem_team_sync(team);
        CHECK(shmem_broadcastmem(team, dst_area, src_area, n, root) == 0,
              "broadcastmem(%s, %zu bytes) failed", tname, n);
        for (size_t i = 0; i < n; i++)
            CHECK(dst_area[i] == bval(root, r, i),
                  "broadcastmem(%s, %zu bytes, root %d): byte %zu is %u, expected %u", tname, n,
                  root, i, dst_area[i], bval(root, r, i));
        for (size_t i = n; i < n + GUARD; i++)
            CHECK(dst_area[i] == 0, "broadcastmem(%s, %zu bytes): byte %zu past the end written",
                  tname, n, i);
    }
}

/* ---- active-set forms ------------------------------------------------------------------ */

/* Clears dest and fills the source for a broadcast of nb bytes in round r. */
static void prepare(size_t nb, int r) {
    memset(dst_area, 0, nb + 64);
    for (size_t i = 0; i < nb; i++)
        src_area[i] = bval(me, r, i);
}

/* One active-set broadcast of nelems blocks of `bits` on s from ordinal root, prepared by
 * the caller for round r; checks the outcome and the pSync.  Members only. */
static void aset_bcast(struct aset s, int bits, size_t nelems, int root, int r) {
    int j = member_of(s, me);
    size_t nb = nelems * (size_t)bits / 8;
    char what[160];
    snprintf(what, sizeof what,
             "broadcast%d(nelems %zu, root ordinal %d) on (start %d, logstride %d, size %d)",
             bits, nelems, root, s.start, s.logs, s.size);
    if (bits == 32)
        shmem_broadcast32(nb ? dst_area : NULL, nb ? src_area : NULL, nelems, root, s.start,
                          s.logs, s.size, bcast_ps);
    else
        shmem_broadcast64(nb ? dst_area : NULL, nb ? src_area : NULL, nelems, root, s.start,
                          s.logs, s.size, bcast_ps);
    check_psync(bcast_ps, SHMEM_BCAST_SYNC_SIZE, what);
    int from = world_of(s, root);
    if (j == root) {
        for (size_t i = 0; i < nb + 64; i++)
            CHECK(dst_area[i] == 0, "%s: the root's dest was written (byte %zu is %u)", what, i,
                  dst_area[i]);
    } else {
        for (size_t i = 0; i < nb; i++)
            CHECK(dst_area[i] == bval(from, r, i), "%s: byte %zu is %u, expected %u (from PE %d)",
                  what, i, dst_area[i], bval(from, r, i), from);
        for (size_t i = nb; i < nb + 64; i++)
            CHECK(dst_area[i] == 0, "%s: byte %zu past the end written", what, i);
    }
    for (size_t i = 0; i < nb; i++)
        CHECK(src_area[i] == bval(me, r, i), "%s: the source changed at byte %zu", what, i);
}

/* Every root ordinal, sizes 0/1/odd/big, on one set; a barrier of the set after each. */
static void aset_roots(struct aset s, int *round) {
    int j = member_of(s, me);
    if (j < 0)
        return;
    const size_t elems64[4] = {0, 1, 333, BIGB / 8};
    int k = 0;
    for (int root = 0; root < s.size; root++) {
        for (int c = 0; c < 4; c++, k++) {
            int bits = (k % 2) ? 32 : 64;
            size_t nelems = bits == 64 ? elems64[c] : elems64[c] * 2 + (c == 2);
            int r = (*round)++;
            prepare(nelems * (size_t)bits / 8, r);
            shmem_barrier(s.start, s.logs, s.size, bar_ps[k % 2]);
            check_psync(bar_ps[k % 2], SHMEM_BARRIER_SYNC_SIZE, "barrier before a broadcast");
            aset_bcast(s, bits, nelems, root, r);
        }
        /* the largest sizes are the slow ones: a few roots are enough for them */
        if (root == 2 && s.size > 5)
            root = s.size - 3; /* then the last two */
    }
}

/* Shrinking active sets, one broadcast pSync for all, two barrier pSyncs alternating:
 * member of set k: broadcast, check, prepare the next round, barrier(set k). */
static void aset_shrinking(int from_top, int *round) {
    int r0 = *round;
    prepare(4096, r0);
    shmem_barrier_all();
    for (int k = 0; k < npes; k++) {
        struct aset s = from_top ? (struct aset){0, 0, npes - k} : (struct aset){k, 0, npes - k};
        int j = member_of(s, me);
        if (j < 0)
            continue;
        int root = (k * 3 + 1) % s.size;
        int bits = k % 2 ? 32 : 64;
        size_t nelems = (size_t)(4096 * 8 / bits) - (size_t)k;
        aset_bcast(s, bits, nelems, root, r0 + k);
        prepare(4096, r0 + k + 1);
        shmem_barrier(s.start, s.logs, s.size, bar_ps[k % 2]);
        check_psync(bar_ps[k % 2], SHMEM_BARRIER_SYNC_SIZE, "barrier of a shrinking set");
    }
    *round = r0 + npes + 1;
    shmem_barrier_all();
}

int main(void) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();

    dst_area = (unsigned char *)shmem_malloc(BIGB + 64);
    src_area = (unsigned char *)shmem_malloc(BIGB + 64);
    bcast_ps = (long *)shmem_malloc(SHMEM_BCAST_SYNC_SIZE * sizeof(long));
    for (int i = 0; i < 2; i++)
        bar_ps[i] = (long *)shmem_malloc(SHMEM_BARRIER_SYNC_SIZE * sizeof(long));
    CHECK(dst_area && src_area && bcast_ps && bar_ps[0] && bar_ps[1], "allocation failed");
    for (int i = 0; i < SHMEM_BCAST_SYNC_SIZE; i++)
        bcast_ps[i] = SHMEM_SYNC_VALUE;
    for (int i = 0; i < SHMEM_BARRIER_SYNC_SIZE; i++)
        bar_ps[0][i] = bar_ps[1][i] = SHMEM_SYNC_VALUE;
    ctest_barrier();

    team_bcast_all_types(SHMEM_TEAM_WORLD, "WORLD");
    team_bcast_all_types(SHMEM_TEAM_SHARED, "SHARED");
    team_bcastmem(SHMEM_TEAM_WORLD, "WORLD");
    team_bcastmem(SHMEM_TEAM_SHARED, "SHARED");
    shmem_barrier_all();

    /* Zero elements with NULL buffers on the whole set. */
    shmem_broadcast32(NULL, NULL, 0, 0, 0, 0, npes, bcast_ps);
    shmem_broadcast64(NULL, NULL, 0, npes - 1, 0, 0, npes, bcast_ps);
    check_psync(bcast_ps, SHMEM_BCAST_SYNC_SIZE, "zero-length broadcast");
    shmem_barrier_all();

    int round = 1000;
    struct aset sets[5];
    int nsets = coll_basic_sets(sets, npes);
    if (npes >= 5)
        sets[nsets++] = (struct aset){1, 2, (npes + 2) / 4};
    for (int i = 0; i < nsets; i++) {
        /* rounds advance only on members: every set starts from the same number */
        round = 1000 + 200 * i;
        aset_roots(sets[i], &round);
        shmem_barrier_all();
    }
    round = 3000;
    aset_shrinking(0, &round);
    aset_shrinking(1, &round);

    check_psync(bcast_ps, SHMEM_BCAST_SYNC_SIZE, "broadcast pSync at the end");
    shmem_barrier_all();
    shmem_free(bar_ps[1]);
    shmem_free(bar_ps[0]);
    shmem_free(bcast_ps);
    shmem_free(src_area);
    shmem_free(dst_area);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
