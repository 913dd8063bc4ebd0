/*
 * coll_common.h - what the collectives test programs share: active sets (PE_start,
 * logPE_stride, PE_size as the 1.5 active-set routines take them), the list of sets every
 * program walks, and the check that a pSync is back at SHMEM_SYNC_VALUE after a call.
 *
 * Include after ctest.h (it uses CHECK). Everything is static inline, so a program that
 * uses only part of it compiles without unused-function warnings.
 */
#ifndef GSAS_COLL_COMMON_H
#define GSAS_COLL_COMMON_H

/* An active set: PE_start, logPE_stride, PE_size. */
struct aset {
    int start, logs, size;
};

/* The ordinal of world PE `pe` in set s, or -1 when it is not a member. */
static inline int member_of(struct aset s, int pe) {
    int stride = 1 << s.logs;
    if (pe < s.start || (pe - s.start) % stride != 0)
        return -1;
    int j = (pe - s.start) / stride;
    return j < s.size ? j : -1;
}

/* The world PE number of ordinal j of set s. */
static inline int world_of(struct aset s, int j) { return s.start + j * (1 << s.logs); }

/* Fills sets[0..4] with the sets the programs test on npes PEs and returns how many:
 * everyone; the even PEs; the odd PEs (npes >= 2); the last PE alone (npes >= 3). The caller
 * may append one more (sets has room for 5). */
static inline int coll_basic_sets(struct aset sets[5], int npes) {
    int n = 0;
    sets[n++] = (struct aset){0, 0, npes};
    sets[n++] = (struct aset){0, 1, (npes + 1) / 2};
    if (npes >= 2)
        sets[n++] = (struct aset){1, 1, npes / 2};
    if (npes >= 3)
        sets[n++] = (struct aset){npes - 1, 0, 1};
    return n;
}

/* Fails unless every word of the pSync p is SHMEM_SYNC_VALUE. */
static inline void check_psync(const long *p, int words, const char *what) {
    for (int i = 0; i < words; i++)
        CHECK(p[i] == SHMEM_SYNC_VALUE, "%s: pSync[%d] is %ld after return, not %ld", what, i,
              p[i], SHMEM_SYNC_VALUE);
}

#endif
