/*
 * team_ptr.c - shmem_team_ptr (OpenSHMEM 1.6: shmem_ptr with the PE numbered in a team).
 * Checks, for the world team, SHMEM_TEAM_SHARED and a strided team of a subset (the odd PEs,
 * or PE 0 alone in a job of one PE):
 *   * the pointer of team PE t is shmem_ptr of its world PE: non-NULL exactly for PEs of
 *     this node (GSAS_NODE), for heap blocks and for a global;
 *   * a PE number outside the team (-1, n) gives NULL, and so do SHMEM_TEAM_INVALID and a
 *     non-symmetric address;
 *   * the pointers work: every member stores into each same-node member's heap block and
 *     global through them, and after a barrier each finds exactly the values its same-node
 *     members stored, and loads them back through the pointer.
 */
#define CTEST_NAME "team_ptr"
#include "ctest.h"

static long global_slot[64];

static int me, npes;
static int *node_of;

/* Checks shmem_team_ptr on `team`, whose team PE t is world PE members[t] (n members). */
static void check_team(shmem_team_t team, const int *members, int n, long *heap,
                       const char *what) {
    CHECK(shmem_team_n_pes(team) == n, "%s: %d PEs, expected %d", what, shmem_team_n_pes(team),
          n);
    for (int t = 0; t < n; t++) {
        int w = members[t];
        void *hp = shmem_team_ptr(team, heap, t);
        void *gp = shmem_team_ptr(team, global_slot, t);
        CHECK(hp == shmem_ptr(heap, w), "%s: team PE %d (world %d): %p, shmem_ptr gives %p",
              what, t, w, hp, shmem_ptr(heap, w));
        CHECK(gp == shmem_ptr(global_slot, w), "%s: team PE %d: global %p, shmem_ptr gives %p",
              what, t, gp, shmem_ptr(global_slot, w));
        int same_node = node_of[w] == node_of[me];
        CHECK((hp != NULL) == same_node && (gp != NULL) == same_node,
              "%s: team PE %d (world %d, node %d; this PE on node %d): heap %p global %p", what,
              t, w, node_of[w], node_of[me], hp, gp);
        CHECK(w != me || (hp == heap && gp == global_slot),
              "%s: the pointer to this PE's own block is not the block itself", what);
    }
    CHECK(shmem_team_ptr(team, heap, -1) == NULL, "%s: team PE -1 gave a pointer", what);
    CHECK(shmem_team_ptr(team, heap, n) == NULL, "%s: team PE %d (= size) gave a pointer", what,
          n);

    /* Stores through the pointers: slot [me] of every same-node member's block and global. */
    shmem_barrier_all();
    for (int i = 0; i < npes; i++)
        heap[i] = global_slot[i] = -1;
    shmem_barrier_all();
    for (int t = 0; t < n; t++) {
        long *hp = (long *)shmem_team_ptr(team, heap, t);
        long *gp = (long *)shmem_team_ptr(team, global_slot, t);
        if (hp != NULL) {
            hp[me] = 1000L * me + t;
            gp[me] = 2000L * me + t;
        }
    }
    shmem_barrier_all();
    int my_t = shmem_team_my_pe(team);
    if (my_t >= 0) {
        for (int t = 0; t < n; t++) {
            int w = members[t];
            long want_h = node_of[w] == node_of[me] ? 1000L * w + my_t : -1;
            long want_g = node_of[w] == node_of[me] ? 2000L * w + my_t : -1;
            CHECK(heap[w] == want_h && global_slot[w] == want_g,
                  "%s: slot of world PE %d: heap %ld global %ld, expected %ld / %ld", what, w,
                  heap[w], global_slot[w], want_h, want_g);
            /* Loads through the pointer see the member's memory. */
            long *hp = (long *)shmem_team_ptr(team, heap, t);
            if (hp != NULL)
                CHECK(hp[me] == 1000L * me + t, "%s: load through team PE %d's pointer: %ld",
                      what, t, hp[me]);
        }
    }
    shmem_barrier_all();
}

int main(void) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    CHECK(npes <= 64, "at most 64 PEs (the global's size)");
    node_of = ctest_node_of();
    long *heap = (long *)shmem_malloc(sizeof(long) * (size_t)npes);
    CHECK(heap != NULL, "shmem_malloc returned NULL");

    CHECK(shmem_team_ptr(SHMEM_TEAM_INVALID, heap, 0) == NULL,
          "SHMEM_TEAM_INVALID gave a pointer");
    long not_symmetric = 0;
    CHECK(shmem_team_ptr(SHMEM_TEAM_WORLD, &not_symmetric, me) == NULL,
          "a stack address gave a pointer");

    int *members = (int *)malloc(sizeof(int) * (size_t)npes);
    CHECK(members != NULL, "malloc failed");

    /* The world team. */
    for (int i = 0; i < npes; i++)
        members[i] = i;
    check_team(SHMEM_TEAM_WORLD, members, npes, heap, "SHMEM_TEAM_WORLD");

    /* SHMEM_TEAM_SHARED: the PEs of this node, in world order. */
    int nshared = 0;
    for (int i = 0; i < npes; i++)
        if (node_of[i] == node_of[me])
            members[nshared++] = i;
    check_team(SHMEM_TEAM_SHARED, members, nshared, heap, "SHMEM_TEAM_SHARED");

    /* A team of a subset: the odd PEs (PE 0 alone in a job of one PE). */
    int start = npes > 1 ? 1 : 0, size = npes > 1 ? npes / 2 : 1;
    shmem_team_t odd = SHMEM_TEAM_INVALID;
    CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, start, 2, size, NULL, 0, &odd) == 0,
          "shmem_team_split_strided refused");
    int member = (me - start) % 2 == 0 && me >= start;
    CHECK((odd != SHMEM_TEAM_INVALID) == member, "split: team handle %p for PE %d", (void *)odd,
          me);
    if (member) {
        for (int t = 0; t < size; t++)
            members[t] = start + 2 * t;
        check_team(odd, members, size, heap, "odd PEs");
        shmem_team_destroy(odd);
    } else {
        /* A non-member holds SHMEM_TEAM_INVALID: NULL; it still joins the barriers. */
        CHECK(shmem_team_ptr(odd, heap, 0) == NULL, "the non-member's handle gave a pointer");
        for (int b = 0; b < 4; b++)
            shmem_barrier_all();
    }

    free(members);
    free(node_of);
    shmem_free(heap);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
