/*
 * coll_sync.c - barriers and syncs (OpenSHMEM 1.5 §9.9.1-§9.9.3, checklist §2.4, §2.8):
 *   * shmem_barrier_all completes the default context's puts (blocking, large, _nbi) and
 *     non-fetching AMOs before anyone leaves it;
 *   * shmem_sync_all, shmem_team_sync and the C11 shmem_sync(team) on SHMEM_TEAM_WORLD and
 *     SHMEM_TEAM_SHARED: only what the specification guarantees is checked, i.e. local
 *     stores made before the sync (and remote updates completed by quiet or by a fetching
 *     AMO before it) are seen by every member after it;
 *   * shmem_barrier and shmem_sync on active sets (full, strided, single PE, shrinking from
 *     both ends) with two alternating pSyncs, every pSync word back at SHMEM_SYNC_VALUE
 *     when the call returns, and consecutive calls reusing one pSync on one active set (which
 *     the specification allows for barrier and sync);
 *   * the active-set shmem_sync reached through the C11 generic name and directly;
 *   * a late PE in some rounds, so that a barrier that does not wait would be seen.
 * Non-members of an active set do not call.  Rounds write alternating halves of the
 * buffers, so a PE that runs ahead into the next round cannot spoil a check.
 */
#define CTEST_NAME "coll_sync"
#include "ctest.h"
#include "coll_common.h"

enum { ROUNDS = 24, BIG = 100 * 1024 /* bytes, above the UDP MTU */ };

static int me, npes;

/* pSyncs: two globals (symmetric through the data segment) and two on the heap. */
static long psync_g[2][SHMEM_BARRIER_SYNC_SIZE];
static long *psync_h[2];

static long *slots;    /* [2][npes]: round parity, then the writer */
static long *stamps;   /* [2]: the own stamp per round parity */
static long *counter;  /* [1]: non-fetching AMOs */
static long *fcounter; /* [1]: fetching AMOs */
static unsigned char *big;
static unsigned char *big_src;

static unsigned char pat(int pe, int round, size_t i) {
    return (unsigned char)(pe * 37 + round * 11 + (int)(i % 251) + 1);
}

static void check_psync_call(const long *p, int words, const char *what, int call) {
    for (int i = 0; i < words; i++)
        CHECK(p[i] == SHMEM_SYNC_VALUE, "%s (call %d): pSync[%d] is %ld after return, not %ld",
              what, call, i, p[i], SHMEM_SYNC_VALUE);
}

/* The late PE of a round sleeps before it arrives. */
static void maybe_late(int round) {
    if (round % 5 == 2 && me == round % npes)
        ctest_sleep_us(3000);
}

/* barrier_all: puts (p, blocking large, nbi) and non-fetching AMOs are complete after it. */
static void test_barrier_all(void) {
    long adds_expected = 0;
    for (int r = 0; r < ROUNDS; r++) {
        long *half = slots + (r % 2) * npes;
        int right = (me + 1) % npes;
        for (int pe = 0; pe < npes; pe++)
            shmem_long_p(&half[me], r * 1000L + me, pe);
        shmem_long_atomic_add(counter, me + 1, r % npes);
        if (me == r % npes)
            adds_expected += (long)npes * (npes + 1) / 2;
        if (r % 4 == 0) {
            for (size_t i = 0; i < BIG; i++)
                big_src[i] = pat(me, r, i);
            shmem_putmem(big + (r % 2) * BIG, big_src, BIG, right);
        } else if (r % 4 == 1) {
            for (size_t i = 0; i < BIG; i++)
                big_src[i] = pat(me, r, i);
            shmem_putmem_nbi(big + (r % 2) * BIG, big_src, BIG, right);
        }
        maybe_late(r);
        shmem_barrier_all();
        for (int pe = 0; pe < npes; pe++)
            CHECK(half[pe] == r * 1000L + pe,
                  "barrier_all round %d: PE %d's put says %ld, expected %ld", r, pe, half[pe],
                  r * 1000L + pe);
        if (me == r % npes)
            CHECK(*counter == adds_expected,
                  "barrier_all round %d: the non-fetching adds gave %ld, expected %ld", r,
                  *counter, adds_expected);
        if (r % 4 <= 1) {
            int left = (me + npes - 1) % npes;
            const unsigned char *got = big + (r % 2) * BIG;
            for (size_t i = 0; i < BIG; i++)
                CHECK(got[i] == pat(left, r, i),
                      "barrier_all round %d: byte %zu of the %s put is %u, expected %u", r, i,
                      r % 4 == 0 ? "blocking" : "nbi", got[i], pat(left, r, i));
        }
    }
    shmem_barrier_all();
}

/* One world sync of the kind chosen by k. */
static void world_sync(int k) {
    switch (k % 4) {
    case 0: shmem_sync_all(); break;
    case 1: CHECK(shmem_team_sync(SHMEM_TEAM_WORLD) == 0, "team_sync(WORLD) failed"); break;
    case 2: CHECK(shmem_sync(SHMEM_TEAM_WORLD) == 0, "shmem_sync(WORLD) (C11) failed"); break;
    default: {
        const shmem_team_t world = SHMEM_TEAM_WORLD; /* a qualified handle selects the team form */
        CHECK(shmem_sync(world) == 0, "shmem_sync(const team) failed");
        break;
    }
    }
}

/* sync_all / team_sync(WORLD) / shmem_sync(WORLD): what the specification guarantees. */
static void test_world_sync(void) {
    for (int r = 0; r < ROUNDS; r++) {
        /* A local store before the sync is visible to every PE after it. */
        stamps[r % 2] = 100L * r + me;
        /* A put completed by quiet, and a fetching AMO, are complete before the sync. */
        long *half = slots + (r % 2) * npes;
        shmem_long_p(&half[me], 7L * r + me, (me + 1) % npes);
        shmem_quiet();
        (void)shmem_long_atomic_fetch_add(fcounter, 1, 0);
        maybe_late(r);
        world_sync(r);
        for (int pe = 0; pe < npes; pe++) {
            long v = shmem_long_g(&stamps[r % 2], pe);
            CHECK(v == 100L * r + pe, "sync form %d round %d: PE %d's stamp is %ld, expected %ld",
                  r % 4, r, pe, v, 100L * r + pe);
        }
        int left = (me + npes - 1) % npes;
        CHECK(half[left] == 7L * r + left,
              "sync form %d round %d: the quieted put from PE %d is %ld, expected %ld", r % 4, r,
              left, half[left], 7L * r + left);
        /* Every PE's fetching add of this round is complete; PEs already in the next
         * round may have added theirs (not PE 0 itself). */
        if (me == 0)
            CHECK(*fcounter >= (long)(r + 1) * npes && *fcounter < (long)(r + 2) * npes,
                  "sync form %d round %d: fetching adds gave %ld, expected %ld..%ld", r % 4, r,
                  *fcounter, (long)(r + 1) * npes, (long)(r + 2) * npes - 1);
    }
    shmem_barrier_all();
}

/* team_sync on SHMEM_TEAM_SHARED: the members' local stores are seen through shmem_ptr. */
static void test_shared_sync(void) {
    shmem_team_t shared = SHMEM_TEAM_SHARED;
    int sn = shmem_team_n_pes(shared), sme = shmem_team_my_pe(shared);
    CHECK(sn >= 1 && sme >= 0 && sme < sn, "SHMEM_TEAM_SHARED: my_pe %d of %d", sme, sn);
    for (int r = 0; r < ROUNDS; r++) {
        stamps[r % 2] = 1000L * r + me;
        maybe_late(r);
        int rc = (r % 2 == 0) ? shmem_team_sync(shared) : shmem_sync(shared);
        CHECK(rc == 0, "team_sync(SHARED) returned %d", rc);
        for (int t = 0; t < sn; t++) {
            int pe = shmem_team_translate_pe(shared, t, SHMEM_TEAM_WORLD);
            CHECK(pe >= 0 && pe < npes, "SHARED PE %d translates to %d", t, pe);
            const long *there = (const long *)shmem_ptr(&stamps[r % 2], pe);
            CHECK(there != NULL, "shmem_ptr of SHARED member %d (PE %d) is NULL", t, pe);
            CHECK(*there == 1000L * r + pe,
                  "team_sync(SHARED) round %d: PE %d's stamp is %ld, expected %ld", r, pe, *there,
                  1000L * r + pe);
        }
    }
    shmem_barrier_all();
}

/* An active set: PE_start, logPE_stride, PE_size. */
/* Active-set barrier and sync on set s: rounds of puts to the next member plus stamps,
 * alternating pSyncs (checked back at SYNC_VALUE), then consecutive calls on one pSync. */
static void test_aset(struct aset s, long *const ps[2], const char *label) {
    int j = member_of(s, me);
    if (j < 0)
        return; /* non-members do not call */
    int next = world_of(s, (j + 1) % s.size), prev = world_of(s, (j + s.size - 1) % s.size);
    for (int r = 0; r < 8; r++) {
        long *half = slots + (r % 2) * npes;
        long *p = ps[r % 2];
        shmem_long_p(&half[me], 31L * r + me, next);
        stamps[r % 2] = 51L * r + me;
        maybe_late(r);
        if (r % 3 == 2) {
            /* sync: no completion of the put, so complete it first */
            shmem_quiet();
            if (r % 2)
                shmem_sync(s.start, s.logs, s.size, p); /* C11 generic, int first */
            else
                (shmem_sync)(s.start, s.logs, s.size, p); /* the C routine itself */
        } else {
            shmem_barrier(s.start, s.logs, s.size, p);
        }
        check_psync_call(p, SHMEM_BARRIER_SYNC_SIZE, label, r);
        CHECK(half[prev] == 31L * r + prev,
              "%s round %d: put from member PE %d is %ld, expected %ld", label, r, prev,
              half[prev], 31L * r + prev);
        for (int k = 0; k < s.size; k++) {
            int pe = world_of(s, k);
            long v = shmem_long_g(&stamps[r % 2], pe);
            CHECK(v == 51L * r + pe, "%s round %d: PE %d's stamp is %ld, expected %ld", label, r,
                  pe, v, 51L * r + pe);
        }
    }
    /* Consecutive calls on the same active set may reuse one pSync. */
    for (int r = 0; r < 6; r++) {
        if (r % 2)
            shmem_sync(s.start, s.logs, s.size, ps[0]);
        else
            shmem_barrier(s.start, s.logs, s.size, ps[0]);
    }
}

static void run_sets(long *const ps[2], const char *kind) {
    struct aset sets[64];
    int n = 0;
    sets[n++] = (struct aset){0, 0, npes};
    sets[n++] = (struct aset){0, 1, (npes + 1) / 2};
    if (npes >= 2)
        sets[n++] = (struct aset){1, 1, npes / 2};
    sets[n++] = (struct aset){npes - 1, 0, 1};
    sets[n++] = (struct aset){0, 2, (npes + 3) / 4};
    if (npes >= 3)
        sets[n++] = (struct aset){1, 0, npes - 2};
    for (int i = 0; i < n; i++) {
        char label[96];
        snprintf(label, sizeof label, "%s barrier/sync on (start %d, logstride %d, size %d)",
                 kind, sets[i].start, sets[i].logs, sets[i].size);
        test_aset(sets[i], ps, label);
        /* Every call on both pSyncs is over; nobody touches them until the next set. */
        shmem_barrier_all();
        check_psync_call(ps[0], SHMEM_BARRIER_SYNC_SIZE, label, -1);
        check_psync_call(ps[1], SHMEM_BARRIER_SYNC_SIZE, label, -1);
        shmem_barrier_all();
    }
}

/* Shrinking active sets, alternating two pSyncs from one set to the next (the set of call
 * k + 1 is inside the set of call k, so only the pSync of call k - 1 may be reused). */
static void test_shrinking(long *const ps[2], int from_top) {
    for (int k = 0; k < npes; k++) {
        struct aset s = from_top ? (struct aset){0, 0, npes - k} : (struct aset){k, 0, npes - k};
        int j = member_of(s, me);
        if (j < 0)
            continue;
        long *p = ps[k % 2];
        int next = world_of(s, (j + 1) % s.size), prev = world_of(s, (j + s.size - 1) % s.size);
        long *half = slots + (k % 2) * npes;
        shmem_long_p(&half[me], 77L * k + me, next);
        maybe_late(k);
        shmem_barrier(s.start, s.logs, s.size, p);
        check_psync_call(p, SHMEM_BARRIER_SYNC_SIZE, from_top ? "shrinking (top) barrier"
                                                         : "shrinking (bottom) barrier", k);
        CHECK(half[prev] == 77L * k + prev,
              "shrinking barrier %d (start %d, size %d): put from PE %d is %ld, expected %ld", k,
              s.start, s.size, prev, half[prev], 77L * k + prev);
    }
    shmem_barrier_all();
}

int main(void) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();

    slots = (long *)shmem_calloc(2 * (size_t)npes, sizeof(long));
    stamps = (long *)shmem_calloc(2, sizeof(long));
    counter = (long *)shmem_calloc(1, sizeof(long));
    fcounter = (long *)shmem_calloc(1, sizeof(long));
    big = (unsigned char *)shmem_malloc(2 * BIG);
    big_src = (unsigned char *)malloc(BIG);
    for (int i = 0; i < 2; i++) {
        psync_h[i] = (long *)shmem_malloc(SHMEM_BARRIER_SYNC_SIZE * sizeof(long));
        CHECK(psync_h[i] != NULL, "pSync allocation failed");
        for (int w = 0; w < SHMEM_BARRIER_SYNC_SIZE; w++)
            psync_h[i][w] = SHMEM_SYNC_VALUE;
    }
    CHECK(slots && stamps && counter && fcounter && big && big_src, "allocation failed");
    /* Every pSync is SHMEM_SYNC_VALUE everywhere before its first use. */
    ctest_barrier();

    test_barrier_all();
    test_world_sync();
    test_shared_sync();

    long *const global_ps[2] = {psync_g[0], psync_g[1]};
    long *const heap_ps[2] = {psync_h[0], psync_h[1]};
    run_sets(global_ps, "global pSync");
    run_sets(heap_ps, "heap pSync");
    test_shrinking(global_ps, 0);
    test_shrinking(heap_ps, 1);

    shmem_barrier_all();
    for (int i = 0; i < 2; i++) {
        shmem_free(psync_h[i]);
    }
    shmem_free(big);
    shmem_free(fcounter);
    shmem_free(counter);
    shmem_free(stamps);
    shmem_free(slots);
    free(big_src);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
