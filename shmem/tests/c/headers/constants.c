/*
 * constants.c - compile-time checks of the library constants and handles of shmem.h.
 * Built as C99, C11, C17 and C2x (check.sh); linked against the stubs for the handle
 * objects and run.  Every check is a compile-time assertion except the vendor-string
 * comparison in main.
 */
#include <string.h>
#include <shmem.h>
#include <shmemx.h>

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define CHECK(cond, tag) _Static_assert(cond, #tag)
#else
#define CHECK(cond, tag) typedef char check_##tag[(cond) ? 1 : -1]
#endif

/* Comparison operators: integer constants, the values 1..6 in spec order, all distinct. */
CHECK(SHMEM_CMP_EQ == 1 && SHMEM_CMP_NE == 2 && SHMEM_CMP_GT == 3 && SHMEM_CMP_GE == 4 &&
          SHMEM_CMP_LT == 5 && SHMEM_CMP_LE == 6,
      cmp_values);
CHECK(SHMEM_CMP_EQ != SHMEM_CMP_NE && SHMEM_CMP_EQ != SHMEM_CMP_GT &&
          SHMEM_CMP_EQ != SHMEM_CMP_GE && SHMEM_CMP_EQ != SHMEM_CMP_LT &&
          SHMEM_CMP_EQ != SHMEM_CMP_LE && SHMEM_CMP_NE != SHMEM_CMP_GT &&
          SHMEM_CMP_NE != SHMEM_CMP_GE && SHMEM_CMP_NE != SHMEM_CMP_LT &&
          SHMEM_CMP_NE != SHMEM_CMP_LE && SHMEM_CMP_GT != SHMEM_CMP_GE &&
          SHMEM_CMP_GT != SHMEM_CMP_LT && SHMEM_CMP_GT != SHMEM_CMP_LE &&
          SHMEM_CMP_GE != SHMEM_CMP_LT && SHMEM_CMP_GE != SHMEM_CMP_LE &&
          SHMEM_CMP_LT != SHMEM_CMP_LE,
      cmp_distinct);
CHECK(_SHMEM_CMP_EQ == SHMEM_CMP_EQ && _SHMEM_CMP_NE == SHMEM_CMP_NE &&
          _SHMEM_CMP_GT == SHMEM_CMP_GT && _SHMEM_CMP_GE == SHMEM_CMP_GE &&
          _SHMEM_CMP_LT == SHMEM_CMP_LT && _SHMEM_CMP_LE == SHMEM_CMP_LE,
      cmp_deprecated_spellings);

/* Thread levels increase; the values are the MPI ones. */
CHECK(SHMEM_THREAD_SINGLE == 0 && SHMEM_THREAD_SINGLE < SHMEM_THREAD_FUNNELED &&
          SHMEM_THREAD_FUNNELED < SHMEM_THREAD_SERIALIZED &&
          SHMEM_THREAD_SERIALIZED < SHMEM_THREAD_MULTIPLE && SHMEM_THREAD_MULTIPLE == 3,
      thread_levels);

/* Version and vendor. */
CHECK(SHMEM_MAJOR_VERSION == 1 && SHMEM_MINOR_VERSION == 6, version_1_6);
CHECK(_SHMEM_MAJOR_VERSION == 1 && _SHMEM_MINOR_VERSION == 6, version_deprecated);
CHECK(sizeof(SHMEM_VENDOR_STRING) - 1 <= SHMEM_MAX_NAME_LEN, vendor_fits);
CHECK(sizeof(_SHMEM_VENDOR_STRING) == sizeof(SHMEM_VENDOR_STRING), vendor_deprecated);
CHECK(SHMEM_MAX_NAME_LEN == 256 && _SHMEM_MAX_NAME_LEN == 256, max_name_len);

/* Option and hint bits: the values of the brief, one bit each, distinct within a group. */
CHECK(SHMEM_CTX_PRIVATE == (1L << 0) && SHMEM_CTX_SERIALIZED == (1L << 1) &&
          SHMEM_CTX_NOSTORE == (1L << 2),
      ctx_options);
CHECK(SHMEM_TEAM_NUM_CONTEXTS == (1L << 0), team_mask);
CHECK(SHMEM_MALLOC_ATOMICS_REMOTE == (1L << 0) && SHMEM_MALLOC_SIGNAL_REMOTE == (1L << 1),
      malloc_hints);
CHECK(SHMEM_SIGNAL_SET == 0 && SHMEM_SIGNAL_ADD == 1, signal_ops);

/* pSync/pWrk sizes: SHMEM_SYNC_SIZE is the largest, deprecated spellings agree. */
CHECK(SHMEM_SYNC_SIZE >= SHMEM_BARRIER_SYNC_SIZE && SHMEM_SYNC_SIZE >= SHMEM_BCAST_SYNC_SIZE &&
          SHMEM_SYNC_SIZE >= SHMEM_COLLECT_SYNC_SIZE &&
          SHMEM_SYNC_SIZE >= SHMEM_REDUCE_SYNC_SIZE &&
          SHMEM_SYNC_SIZE >= SHMEM_ALLTOALL_SYNC_SIZE &&
          SHMEM_SYNC_SIZE >= SHMEM_ALLTOALLS_SYNC_SIZE,
      sync_size_is_max);
CHECK(SHMEM_SYNC_SIZE == SHMEM_BARRIER_SYNC_SIZE || SHMEM_SYNC_SIZE == SHMEM_BCAST_SYNC_SIZE ||
          SHMEM_SYNC_SIZE == SHMEM_COLLECT_SYNC_SIZE ||
          SHMEM_SYNC_SIZE == SHMEM_REDUCE_SYNC_SIZE ||
          SHMEM_SYNC_SIZE == SHMEM_ALLTOALL_SYNC_SIZE ||
          SHMEM_SYNC_SIZE == SHMEM_ALLTOALLS_SYNC_SIZE,
      sync_size_is_one_of_them);
CHECK(_SHMEM_BARRIER_SYNC_SIZE == SHMEM_BARRIER_SYNC_SIZE &&
          _SHMEM_BCAST_SYNC_SIZE == SHMEM_BCAST_SYNC_SIZE &&
          _SHMEM_COLLECT_SYNC_SIZE == SHMEM_COLLECT_SYNC_SIZE &&
          _SHMEM_REDUCE_SYNC_SIZE == SHMEM_REDUCE_SYNC_SIZE &&
          _SHMEM_REDUCE_MIN_WRKDATA_SIZE == SHMEM_REDUCE_MIN_WRKDATA_SIZE &&
          SHMEM_REDUCE_MIN_WRKDATA_SIZE >= 1,
      sync_deprecated_spellings);
CHECK(SHMEM_SYNC_VALUE == 0 && _SHMEM_SYNC_VALUE == SHMEM_SYNC_VALUE &&
          sizeof(SHMEM_SYNC_VALUE) == sizeof(long),
      sync_value_is_long_zero);

/* The constants work in preprocessor conditions too. */
#if SHMEM_MAJOR_VERSION != 1 || SHMEM_MINOR_VERSION != 6 || SHMEM_REDUCE_SYNC_SIZE < 1
#error "version or sync size not usable in #if"
#endif

/* Work arrays sized by the constants, and handles in static initializers (address
 * constants). */
static long psync_all[SHMEM_SYNC_SIZE] = {SHMEM_SYNC_VALUE};
static long psync_reduce[SHMEM_REDUCE_SYNC_SIZE];
static long pwrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
static shmem_ctx_t default_ctx = SHMEM_CTX_DEFAULT;
static shmem_ctx_t invalid_ctx = SHMEM_CTX_INVALID;
static shmem_team_t teams[3] = {SHMEM_TEAM_WORLD, SHMEM_TEAM_SHARED, SHMEM_TEAM_INVALID};
static const shmem_team_config_t config = {0};

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
/* The handles have the handle types, and contexts and teams are distinct types. */
CHECK(_Generic(SHMEM_CTX_DEFAULT, shmem_ctx_t: 1, default: 0), ctx_default_type);
CHECK(_Generic(SHMEM_CTX_INVALID, shmem_ctx_t: 1, default: 0), ctx_invalid_type);
CHECK(_Generic(SHMEM_TEAM_WORLD, shmem_team_t: 1, default: 0), team_world_type);
CHECK(_Generic(SHMEM_TEAM_INVALID, shmem_team_t: 1, default: 0), team_invalid_type);
CHECK(_Generic(SHMEM_TEAM_WORLD, shmem_ctx_t: 0, default: 1), team_is_not_ctx);
CHECK(_Generic(SHMEM_SYNC_VALUE, long: 1, default: 0), sync_value_type);
CHECK(_Generic(SHMEM_CTX_PRIVATE, long: 1, default: 0), ctx_option_type);
#endif

static int cmp_name(int cmp)
{
    /* Usable as case labels: integer constant expressions. */
    switch (cmp) {
    case SHMEM_CMP_EQ: return 'e';
    case SHMEM_CMP_NE: return 'n';
    case SHMEM_CMP_GT: return 'g';
    case SHMEM_CMP_GE: return 'G';
    case SHMEM_CMP_LT: return 'l';
    case SHMEM_CMP_LE: return 'L';
    default: return 0;
    }
}

int main(void)
{
    int failures = 0;
    failures += strcmp(SHMEM_VENDOR_STRING, "gsas") != 0;
    failures += cmp_name(SHMEM_CMP_LE) != 'L';
    failures += default_ctx == invalid_ctx || teams[0] == teams[1] || teams[2] != 0;
    failures += psync_all[0] != SHMEM_SYNC_VALUE || psync_reduce[0] != 0 || pwrk[0] != 0;
    failures += config.num_contexts != 0;
    failures += GSAS_VERSION_MAJOR < 0 || GSAS_VERSION_MINOR < 0 || GSAS_VERSION_PATCH < 0;
    return failures;
}
