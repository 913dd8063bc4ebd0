/*
 * shmem.h - the OpenSHMEM 1.5 C interface of gsas.
 *
 * What it is
 *   The complete C binding of OpenSHMEM 1.5 as implemented by the gsas library: every one of
 *   the 1610 C routines of the specification (current and deprecated, including the legacy
 *   names start_pes, _my_pe, shmalloc, ...), the library constants and handles, and the C11
 *   type-generic interfaces for the 67 generic names.  Besides, of OpenSHMEM 1.6:
 *   shmem_team_ptr, the 116 interleaved block transfers (shmem_TYPENAME_ibput/ibget,
 *   shmem_ibput/ibget{8,16,32,64,128} and their shmem_ctx_ forms; §9.6.1.4 SHMEM_IBPUT,
 *   SHMEM_IBGET) with the generics shmem_ibput and shmem_ibget, shmem_query_initialized,
 *   shmem_[ctx_]signal_add and _signal_set (with their generics), shmem_[ctx_]pe_quiet, the
 *   sessions (shmem_ctx_session_start/_stop, shmem_ctx_session_config_t,
 *   SHMEM_CTX_SESSION_*) and the team scans shmem_TYPENAME_sum_inscan and _sum_exscan (with
 *   their generics); and the six cache management routines that 1.5
 *   removed (shmem_clear_cache_inv, ..., shmem_udcflush_line: no-ops, declared deprecated, so
 *   that older programs compile with a warning and link).  The list of routines is the
 *   contract in docs/spec/openshmem-1.5-c-symbols.tsv plus docs/spec/gsas-beyond-1.5-c-symbols.tsv;
 *   shmem/tests/c/headers/check.sh verifies that this header declares exactly that set, with
 *   the specification's signatures.
 *
 * What it is not
 *   It contains no code: every routine is implemented by the gsas library (libshmem), which
 *   also exports the three handle objects below.  It declares no extensions (those live in
 *   <shmemx.h>) and no profiling names (those live in <pshmem.h>).  It provides no C++
 *   overloads: C++ programs call the typed C names, as the specification prescribes.
 *
 * Thread safety
 *   A header has no state.  Which routines may be called concurrently is decided at run time
 *   by the thread level granted by shmem_init_thread (SHMEM_THREAD_SINGLE ... MULTIPLE).
 *
 * Languages
 *   C99, C11, C17 and C2x; C++98 and later (extern "C", no generics).  The C11 generics are
 *   defined only for C11 or later (__STDC_VERSION__ >= 201112L) and never for C++.  The header
 *   is clean under -Wall -Wextra -pedantic -Werror in all of these modes; C++ compilers
 *   (g++, clang++) accept `double _Complex` and `float _Complex` in the prototypes of the
 *   complex reductions as a documented extension without any diagnostic, so no warning has to
 *   be tolerated.  shmem_global_exit is `_Noreturn` in C11, `[[noreturn]]` in C++11 and C23,
 *   and __attribute__((__noreturn__)) for other GNU-compatible compilers.
 *
 * How the declarations are generated
 *   One X-macro type table per operation class (GSAS_SHMEM_RMA_TYPES, GSAS_SHMEM_AMO_STD_TYPES,
 *   ...), transcribed from the type tables of the specification.  A table is invoked as
 *   TABLE(X, A, B) and calls X(A, B, TYPE, TYPENAME, ARMKIND) once per row; A and B are passed
 *   through unchanged.  For declarations A is the name prefix (`shmem_`, or `pshmem_` in
 *   <pshmem.h>) and B an operation suffix; for the generics A is the prefix of the selected
 *   routine (`shmem_` or `shmem_ctx_`) and B its suffix.  Every signature of the specification
 *   is written exactly once, in one of the GSAS_SHMEM_D_* class macros, and
 *   GSAS_SHMEM_DECLARE_ALL(prefix) expands all of them.
 *
 * The C11 generics
 *   A generic with an optional leading context dispatches with _Generic on its first argument:
 *   a shmem_ctx_t selects the shmem_ctx_TYPENAME_* routine from the type of the second
 *   argument, anything else selects shmem_TYPENAME_* from the first.  Arguments that are
 *   always pointers are evaluated as &*(arg) (arrays decay, scalars are rejected); arguments
 *   that may be scalars are evaluated as (arg)+0.  The controlling expressions are not
 *   evaluated, so every argument is evaluated exactly once, by the call itself.  A type
 *   outside the table selects the `default:` arm, the function
 *   gsas_shmem_generic_called_with_unsupported_argument_type(void), so a bad type is a
 *   compile error at the call ("too many arguments to function ...").  The generics for
 *   shmem_g, shmem_atomic_fetch and shmem_fetch, whose selecting argument is `const TYPE *`
 *   in the specification, also accept pointers to const.  Deprecated generics (shmem_fetch,
 *   shmem_set, shmem_cswap, shmem_swap, shmem_finc, shmem_inc, shmem_fadd, shmem_add) take no
 *   context and dispatch to the current shmem_TYPENAME_atomic_* routines over the full 1.5
 *   type lists.  shmem_wait_until and shmem_test, and their _all, _any and _some forms,
 *   also accept the deprecated short and unsigned short.  shmem_sync(team) calls
 *   shmem_team_sync; shmem_sync with the active-set arguments calls the C routine
 *   shmem_sync.  The generics of OpenSHMEM 1.6: shmem_ibput and shmem_ibget (optional
 *   context, as shmem_iput), shmem_sum_inscan and shmem_sum_exscan (team first, as
 *   shmem_sum_reduce), and shmem_signal_add and shmem_signal_set (a leading shmem_ctx_t
 *   selects shmem_ctx_signal_*, anything else the C routine of the same name).
 *
 * ABI assumption of the generics (LP64 Linux: x86_64 and aarch64)
 *   _Generic may list only distinct types, and the <stdint.h>/<stddef.h> typedefs alias basic
 *   types.  The ARMKIND column of each table records, for that table, whether a row gets its
 *   own _Generic association (DISTINCT) or is already covered by another row of the same
 *   table because its typedef names the same type (ALIAS).  The marks rely on:
 *       int8_t = signed char     int16_t = short            int32_t = int     int64_t = long
 *       uint8_t = unsigned char  uint16_t = unsigned short  uint32_t = unsigned int
 *       uint64_t = unsigned long size_t = unsigned long     ptrdiff_t = long
 *   _Static_assert checks below make a different ABI fail when the header is included, with a
 *   message naming the typedef, instead of failing or mis-dispatching at some later call.
 *   Associations are written with the typedef names, so a DISTINCT int32_t row in a table
 *   without `int` (the bitwise AMOs) dispatches `int *` to shmem_int32_*.
 *
 * Special cases
 *   shmem_wait_until (deprecated, long) and shmem_sync (deprecated, active set) are both real
 *   C routines and generic names.  Their prototypes are declared before the generic macros
 *   (a function-like macro never re-expands its own name) and stay visible in every language
 *   mode: this header has no C++ overloads that could clash with them, and C and C++ programs
 *   written against the 1.4 interface keep compiling.  The specification has no C routine
 *   named shmem_swap in 1.5 (only the deprecated generic), so none is declared.
 */
#ifndef GSAS_SHMEM_H
#define GSAS_SHMEM_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------------------------
 * Library constants (OpenSHMEM 1.5, section "Library Constants").  All are integer constant
 * expressions except SHMEM_VENDOR_STRING, a string literal.
 * ---------------------------------------------------------------------------------------- */

/** Version of the specification implemented (1.6: every routine, and initialization again
 *  after the last shmem_finalize). */
#define SHMEM_MAJOR_VERSION 1
#define SHMEM_MINOR_VERSION 6
/** Maximum length of the vendor string, as returned by shmem_info_get_name. */
#define SHMEM_MAX_NAME_LEN 256
/** The vendor string; equal to the name returned by shmem_info_get_name. */
#define SHMEM_VENDOR_STRING "gsas"

/** Thread levels for shmem_init_thread / shmem_query_thread, in increasing order. */
#define SHMEM_THREAD_SINGLE 0
#define SHMEM_THREAD_FUNNELED 1
#define SHMEM_THREAD_SERIALIZED 2
#define SHMEM_THREAD_MULTIPLE 3

/** Context options for shmem_ctx_create / shmem_team_create_ctx (long bit flags). */
#define SHMEM_CTX_PRIVATE (1L << 0)
#define SHMEM_CTX_SERIALIZED (1L << 1)
#define SHMEM_CTX_NOSTORE (1L << 2)

/** Session option for shmem_ctx_session_start (OpenSHMEM 1.6, long bit flags). */
#define SHMEM_CTX_SESSION_BATCH (1L << 0)
/** Session configuration mask bit: shmem_ctx_session_config_t.total_ops is valid (1.6). */
#define SHMEM_CTX_SESSION_TOTAL_OPS (1L << 0)

/** Team configuration mask bit: shmem_team_config_t.num_contexts is valid. */
#define SHMEM_TEAM_NUM_CONTEXTS (1L << 0)

/** Hints for shmem_malloc_with_hints (long bit flags). */
#define SHMEM_MALLOC_ATOMICS_REMOTE (1L << 0)
#define SHMEM_MALLOC_SIGNAL_REMOTE (1L << 1)

/** Signal operators for the put-with-signal routines. */
#define SHMEM_SIGNAL_SET 0
#define SHMEM_SIGNAL_ADD 1

/** Comparison operators for the point-to-point synchronization routines. */
#define SHMEM_CMP_EQ 1
#define SHMEM_CMP_NE 2
#define SHMEM_CMP_GT 3
#define SHMEM_CMP_GE 4
#define SHMEM_CMP_LT 5
#define SHMEM_CMP_LE 6

/** Initial value of every pSync word (deprecated in 1.5, still required). */
#define SHMEM_SYNC_VALUE 0L

/* ==== BEGIN pSync/pWrk sizes ===============================================================
 * Lengths (in longs, or elements of TYPE for pWrk) of the work arrays of the deprecated
 * active-set collectives.  The collectives implementation owns these values and may change
 * them; keep SHMEM_SYNC_SIZE equal to the largest of the *_SYNC_SIZE values (check.sh
 * asserts it).  All are deprecated since 1.5.
 */
#define SHMEM_BARRIER_SYNC_SIZE 16
#define SHMEM_BCAST_SYNC_SIZE 16
#define SHMEM_COLLECT_SYNC_SIZE 18
#define SHMEM_REDUCE_SYNC_SIZE 35
#define SHMEM_ALLTOALL_SYNC_SIZE 16
#define SHMEM_ALLTOALLS_SYNC_SIZE 16
#define SHMEM_SYNC_SIZE 35
#define SHMEM_REDUCE_MIN_WRKDATA_SIZE 1
/* ==== END pSync/pWrk sizes ================================================================= */

/* Deprecated spellings (deprecated since 1.3), kept because the specification still requires
 * them. */
#define _SHMEM_SYNC_VALUE SHMEM_SYNC_VALUE
#define _SHMEM_BARRIER_SYNC_SIZE SHMEM_BARRIER_SYNC_SIZE
#define _SHMEM_BCAST_SYNC_SIZE SHMEM_BCAST_SYNC_SIZE
#define _SHMEM_COLLECT_SYNC_SIZE SHMEM_COLLECT_SYNC_SIZE
#define _SHMEM_REDUCE_SYNC_SIZE SHMEM_REDUCE_SYNC_SIZE
#define _SHMEM_REDUCE_MIN_WRKDATA_SIZE SHMEM_REDUCE_MIN_WRKDATA_SIZE
#define _SHMEM_MAJOR_VERSION SHMEM_MAJOR_VERSION
#define _SHMEM_MINOR_VERSION SHMEM_MINOR_VERSION
#define _SHMEM_MAX_NAME_LEN SHMEM_MAX_NAME_LEN
#define _SHMEM_VENDOR_STRING SHMEM_VENDOR_STRING
#define _SHMEM_CMP_EQ SHMEM_CMP_EQ
#define _SHMEM_CMP_NE SHMEM_CMP_NE
#define _SHMEM_CMP_GT SHMEM_CMP_GT
#define _SHMEM_CMP_GE SHMEM_CMP_GE
#define _SHMEM_CMP_LT SHMEM_CMP_LT
#define _SHMEM_CMP_LE SHMEM_CMP_LE

/* ------------------------------------------------------------------------------------------
 * Types and handles (sections "Library Handles" and "Team Management").
 * ---------------------------------------------------------------------------------------- */

/** A communication context.  A pointer to a library-private object, so that _Generic can
 *  tell a context from a buffer pointer. */
typedef struct shmem_impl_ctx *shmem_ctx_t;
/** A team.  A pointer to a library-private object, distinct from shmem_ctx_t. */
typedef struct shmem_impl_team *shmem_team_t;
/** Team configuration for the split and get_config routines. */
typedef struct {
    int num_contexts;
} shmem_team_config_t;
/** Session configuration for shmem_ctx_session_start (OpenSHMEM 1.6). */
typedef struct {
    size_t total_ops;
} shmem_ctx_session_config_t;

#ifdef __cplusplus
extern "C" {
#endif
/* The predefined handles are the addresses of these objects, which the library exports.
 * Their contents are private; only their addresses are meaningful. */
extern struct shmem_impl_ctx gsas_shmem_ctx_default;
extern struct shmem_impl_team gsas_shmem_team_world;
extern struct shmem_impl_team gsas_shmem_team_shared;
#ifdef __cplusplus
}
#endif

/** The default context (an address constant: usable in static initializers). */
#define SHMEM_CTX_DEFAULT (&gsas_shmem_ctx_default)
/** The team of all PEs. */
#define SHMEM_TEAM_WORLD (&gsas_shmem_team_world)
/** The team of the PEs that share memory with the calling PE. */
#define SHMEM_TEAM_SHARED (&gsas_shmem_team_shared)
/** The invalid context and team: null pointers of the handle types. */
#if defined(__cplusplus) && __cplusplus >= 201103L
#define SHMEM_CTX_INVALID (static_cast<shmem_ctx_t>(nullptr))
#define SHMEM_TEAM_INVALID (static_cast<shmem_team_t>(nullptr))
#else
#define SHMEM_CTX_INVALID ((shmem_ctx_t)0)
#define SHMEM_TEAM_INVALID ((shmem_team_t)0)
#endif

/* ------------------------------------------------------------------------------------------
 * Attributes.
 * ---------------------------------------------------------------------------------------- */

/* GSAS_SHMEM_NORETURN: the "does not return" marker of shmem_global_exit in each language. */
#if defined(__cplusplus)
#if __cplusplus >= 201103L
#define GSAS_SHMEM_NORETURN [[noreturn]]
#elif defined(__GNUC__)
#define GSAS_SHMEM_NORETURN __attribute__((__noreturn__))
#else
#define GSAS_SHMEM_NORETURN
#endif
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ > 201710L && defined(__has_c_attribute)
#if __has_c_attribute(__noreturn__)
#define GSAS_SHMEM_NORETURN [[__noreturn__]]
#else
#define GSAS_SHMEM_NORETURN _Noreturn
#endif
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define GSAS_SHMEM_NORETURN _Noreturn
#elif defined(__GNUC__)
#define GSAS_SHMEM_NORETURN __attribute__((__noreturn__))
#else
#define GSAS_SHMEM_NORETURN
#endif

/* GSAS_SHMEM_DEPRECATED(MSG): marks a routine the specification has removed, so that a call
 * compiles (and links) with a deprecation warning. */
#if defined(__GNUC__)
#define GSAS_SHMEM_DEPRECATED(MSG) __attribute__((__deprecated__(MSG)))
#elif defined(__cplusplus) && __cplusplus >= 201402L
#define GSAS_SHMEM_DEPRECATED(MSG) [[deprecated(MSG)]]
#else
#define GSAS_SHMEM_DEPRECATED(MSG)
#endif

/* ------------------------------------------------------------------------------------------
 * Type tables.  X(A, B, TYPE, TYPENAME, ARMKIND) per row; see the file comment.  TYPENAME is
 * only ever pasted, never expanded, so user macros such as `size` cannot disturb it.
 * ---------------------------------------------------------------------------------------- */

/* Standard RMA types (Table "Standard RMA Types and Names"): 24 rows.  Also the types of
 * put_signal, broadcast, collect, fcollect, alltoall and alltoalls. */
#define GSAS_SHMEM_RMA_TYPES(X, A, B)                                                         \
    X(A, B, float, float, DISTINCT)                                                           \
    X(A, B, double, double, DISTINCT)                                                         \
    X(A, B, long double, longdouble, DISTINCT)                                                \
    X(A, B, char, char, DISTINCT)                                                             \
    X(A, B, signed char, schar, DISTINCT)                                                     \
    X(A, B, short, short, DISTINCT)                                                           \
    X(A, B, int, int, DISTINCT)                                                               \
    X(A, B, long, long, DISTINCT)                                                             \
    X(A, B, long long, longlong, DISTINCT)                                                    \
    X(A, B, unsigned char, uchar, DISTINCT)                                                   \
    X(A, B, unsigned short, ushort, DISTINCT)                                                 \
    X(A, B, unsigned int, uint, DISTINCT)                                                     \
    X(A, B, unsigned long, ulong, DISTINCT)                                                   \
    X(A, B, unsigned long long, ulonglong, DISTINCT)                                          \
    X(A, B, int8_t, int8, ALIAS)                                                              \
    X(A, B, int16_t, int16, ALIAS)                                                            \
    X(A, B, int32_t, int32, ALIAS)                                                            \
    X(A, B, int64_t, int64, ALIAS)                                                            \
    X(A, B, uint8_t, uint8, ALIAS)                                                            \
    X(A, B, uint16_t, uint16, ALIAS)                                                          \
    X(A, B, uint32_t, uint32, ALIAS)                                                          \
    X(A, B, uint64_t, uint64, ALIAS)                                                          \
    X(A, B, size_t, size, ALIAS)                                                              \
    X(A, B, ptrdiff_t, ptrdiff, ALIAS)

/* Block sizes in bits of the sized RMA routines (put8 ... put128): X(A, B, SIZE). */
#define GSAS_SHMEM_RMA_SIZES(X, A, B) X(A, B, 8) X(A, B, 16) X(A, B, 32) X(A, B, 64) X(A, B, 128)

/* Standard AMO types: 12 rows.  compare_swap, fetch_inc, inc, fetch_add, add (+ _nbi). */
#define GSAS_SHMEM_AMO_STD_TYPES(X, A, B)                                                     \
    X(A, B, int, int, DISTINCT)                                                               \
    X(A, B, long, long, DISTINCT)                                                             \
    X(A, B, long long, longlong, DISTINCT)                                                    \
    X(A, B, unsigned int, uint, DISTINCT)                                                     \
    X(A, B, unsigned long, ulong, DISTINCT)                                                   \
    X(A, B, unsigned long long, ulonglong, DISTINCT)                                          \
    X(A, B, int32_t, int32, ALIAS)                                                            \
    X(A, B, int64_t, int64, ALIAS)                                                            \
    X(A, B, uint32_t, uint32, ALIAS)                                                          \
    X(A, B, uint64_t, uint64, ALIAS)                                                          \
    X(A, B, size_t, size, ALIAS)                                                              \
    X(A, B, ptrdiff_t, ptrdiff, ALIAS)

/* Extended AMO types: the standard AMO types plus float and double, 14 rows.  fetch, set,
 * swap (+ _nbi). */
#define GSAS_SHMEM_AMO_EXT_TYPES(X, A, B)                                                     \
    X(A, B, float, float, DISTINCT)                                                           \
    X(A, B, double, double, DISTINCT)                                                         \
    GSAS_SHMEM_AMO_STD_TYPES(X, A, B)

/* Bitwise AMO types: 7 rows.  int and long are absent, so int32_t and int64_t need their own
 * associations. */
#define GSAS_SHMEM_AMO_BIT_TYPES(X, A, B)                                                     \
    X(A, B, unsigned int, uint, DISTINCT)                                                     \
    X(A, B, unsigned long, ulong, DISTINCT)                                                   \
    X(A, B, unsigned long long, ulonglong, DISTINCT)                                          \
    X(A, B, int32_t, int32, DISTINCT)                                                         \
    X(A, B, int64_t, int64, DISTINCT)                                                         \
    X(A, B, uint32_t, uint32, ALIAS)                                                          \
    X(A, B, uint64_t, uint64, ALIAS)

/* Deprecated pre-1.4 AMO names: fetch, set and swap exist for these 5 types ... */
#define GSAS_SHMEM_AMO_DEPR_EXT_TYPES(X, A, B)                                                \
    X(A, B, float, float, DISTINCT)                                                           \
    X(A, B, double, double, DISTINCT)                                                         \
    GSAS_SHMEM_AMO_DEPR_STD_TYPES(X, A, B)
/* ... and cswap, finc, inc, fadd and add for these 3. */
#define GSAS_SHMEM_AMO_DEPR_STD_TYPES(X, A, B)                                                \
    X(A, B, int, int, DISTINCT)                                                               \
    X(A, B, long, long, DISTINCT)                                                             \
    X(A, B, long long, longlong, DISTINCT)

/* Point-to-point synchronization types: since 1.5 the standard AMO types. */
#define GSAS_SHMEM_P2P_TYPES(X, A, B) GSAS_SHMEM_AMO_STD_TYPES(X, A, B)
/* The 1.4 point-to-point types that 1.5 deprecated: wait_until and test only. */
#define GSAS_SHMEM_P2P_DEPR_TYPES(X, A, B)                                                    \
    X(A, B, short, short, DISTINCT)                                                           \
    X(A, B, unsigned short, ushort, DISTINCT)
/* Deprecated shmem_TYPENAME_wait. */
#define GSAS_SHMEM_WAIT_DEPR_TYPES(X, A, B)                                                   \
    X(A, B, short, short, DISTINCT)                                                           \
    X(A, B, int, int, DISTINCT)                                                               \
    X(A, B, long, long, DISTINCT)                                                             \
    X(A, B, long long, longlong, DISTINCT)

/* Team reductions AND/OR/XOR: 14 rows.  No signed basic type is listed, so int8_t ...
 * int64_t need their own associations. */
#define GSAS_SHMEM_TEAM_BIT_TYPES(X, A, B)                                                    \
    X(A, B, unsigned char, uchar, DISTINCT)                                                   \
    X(A, B, unsigned short, ushort, DISTINCT)                                                 \
    X(A, B, unsigned int, uint, DISTINCT)                                                     \
    X(A, B, unsigned long, ulong, DISTINCT)                                                   \
    X(A, B, unsigned long long, ulonglong, DISTINCT)                                          \
    X(A, B, int8_t, int8, DISTINCT)                                                           \
    X(A, B, int16_t, int16, DISTINCT)                                                         \
    X(A, B, int32_t, int32, DISTINCT)                                                         \
    X(A, B, int64_t, int64, DISTINCT)                                                         \
    X(A, B, uint8_t, uint8, ALIAS)                                                            \
    X(A, B, uint16_t, uint16, ALIAS)                                                          \
    X(A, B, uint32_t, uint32, ALIAS)                                                          \
    X(A, B, uint64_t, uint64, ALIAS)                                                          \
    X(A, B, size_t, size, ALIAS)

/* Team reductions MAX/MIN: the 24 standard RMA types. */
#define GSAS_SHMEM_TEAM_MINMAX_TYPES(X, A, B) GSAS_SHMEM_RMA_TYPES(X, A, B)

/* Team reductions SUM/PROD: the 24 standard RMA types plus the two complex types. */
#define GSAS_SHMEM_TEAM_ARITH_TYPES(X, A, B)                                                  \
    GSAS_SHMEM_RMA_TYPES(X, A, B)                                                             \
    X(A, B, double _Complex, complexd, DISTINCT)                                              \
    X(A, B, float _Complex, complexf, DISTINCT)

/* Deprecated active-set reductions (shmem_TYPENAME_OP_to_all): AND/OR/XOR ... */
#define GSAS_SHMEM_ASET_BIT_TYPES(X, A, B)                                                    \
    X(A, B, short, short, DISTINCT)                                                           \
    X(A, B, int, int, DISTINCT)                                                               \
    X(A, B, long, long, DISTINCT)                                                             \
    X(A, B, long long, longlong, DISTINCT)
/* ... MAX/MIN ... */
#define GSAS_SHMEM_ASET_MINMAX_TYPES(X, A, B)                                                 \
    GSAS_SHMEM_ASET_BIT_TYPES(X, A, B)                                                        \
    X(A, B, float, float, DISTINCT)                                                           \
    X(A, B, double, double, DISTINCT)                                                         \
    X(A, B, long double, longdouble, DISTINCT)
/* ... SUM/PROD. */
#define GSAS_SHMEM_ASET_ARITH_TYPES(X, A, B)                                                  \
    GSAS_SHMEM_ASET_MINMAX_TYPES(X, A, B)                                                     \
    X(A, B, double _Complex, complexd, DISTINCT)                                              \
    X(A, B, float _Complex, complexf, DISTINCT)

/* Block sizes in bits of the deprecated active-set data-movement collectives. */
#define GSAS_SHMEM_ASET_SIZES(X, A, B) X(A, B, 32) X(A, B, 64)

/* ------------------------------------------------------------------------------------------
 * Declaration class macros.  P is the name prefix: `shmem_` here, `pshmem_` in <pshmem.h>.
 * ---------------------------------------------------------------------------------------- */

/* One routine, and the same routine with a context twin (leading shmem_ctx_t ctx). */
#define GSAS_SHMEM_DECL(RET, P, NAME, ...) RET P##NAME(__VA_ARGS__);
#define GSAS_SHMEM_DECL_CTX(RET, P, NAME, ...)                                                \
    RET P##NAME(__VA_ARGS__);                                                                 \
    RET P##ctx_##NAME(shmem_ctx_t ctx, __VA_ARGS__);

/* RMA over the standard RMA types (put, p, iput, get, g, iget, put_nbi, get_nbi; ibput and
 * ibget of OpenSHMEM 1.6). */
#define GSAS_SHMEM_D_RMA(P, B, T, N, K)                                                       \
    GSAS_SHMEM_DECL_CTX(void, P, N##_put, T *dest, const T *source, size_t nelems, int pe)    \
    GSAS_SHMEM_DECL_CTX(void, P, N##_p, T *dest, T value, int pe)                             \
    GSAS_SHMEM_DECL_CTX(void, P, N##_iput, T *dest, const T *source, ptrdiff_t dst,           \
                        ptrdiff_t sst, size_t nelems, int pe)                                 \
    GSAS_SHMEM_DECL_CTX(void, P, N##_get, T *dest, const T *source, size_t nelems, int pe)    \
    GSAS_SHMEM_DECL_CTX(T, P, N##_g, const T *source, int pe)                                 \
    GSAS_SHMEM_DECL_CTX(void, P, N##_iget, T *dest, const T *source, ptrdiff_t dst,           \
                        ptrdiff_t sst, size_t nelems, int pe)                                 \
    GSAS_SHMEM_DECL_CTX(void, P, N##_ibput, T *dest, const T *source, ptrdiff_t dst,          \
                        ptrdiff_t sst, size_t bsize, size_t nblocks, int pe)                  \
    GSAS_SHMEM_DECL_CTX(void, P, N##_ibget, T *dest, const T *source, ptrdiff_t dst,          \
                        ptrdiff_t sst, size_t bsize, size_t nblocks, int pe)                  \
    GSAS_SHMEM_DECL_CTX(void, P, N##_put_nbi, T *dest, const T *source, size_t nelems,        \
                        int pe)                                                               \
    GSAS_SHMEM_DECL_CTX(void, P, N##_get_nbi, T *dest, const T *source, size_t nelems,        \
                        int pe)

/* Sized RMA (put8 ... put128 and friends, ibput8 ... ibget128 of 1.6) and put-with-signal,
 * per block size S. */
#define GSAS_SHMEM_D_RMA_SIZED(P, B, S)                                                       \
    GSAS_SHMEM_DECL_CTX(void, P, put##S, void *dest, const void *source, size_t nelems,       \
                        int pe)                                                               \
    GSAS_SHMEM_DECL_CTX(void, P, iput##S, void *dest, const void *source, ptrdiff_t dst,      \
                        ptrdiff_t sst, size_t nelems, int pe)                                 \
    GSAS_SHMEM_DECL_CTX(void, P, get##S, void *dest, const void *source, size_t nelems,       \
                        int pe)                                                               \
    GSAS_SHMEM_DECL_CTX(void, P, iget##S, void *dest, const void *source, ptrdiff_t dst,      \
                        ptrdiff_t sst, size_t nelems, int pe)                                 \
    GSAS_SHMEM_DECL_CTX(void, P, ibput##S, void *dest, const void *source, ptrdiff_t dst,     \
                        ptrdiff_t sst, size_t bsize, size_t nblocks, int pe)                  \
    GSAS_SHMEM_DECL_CTX(void, P, ibget##S, void *dest, const void *source, ptrdiff_t dst,     \
                        ptrdiff_t sst, size_t bsize, size_t nblocks, int pe)                  \
    GSAS_SHMEM_DECL_CTX(void, P, put##S##_nbi, void *dest, const void *source,                \
                        size_t nelems, int pe)                                                \
    GSAS_SHMEM_DECL_CTX(void, P, get##S##_nbi, void *dest, const void *source,                \
                        size_t nelems, int pe)                                                \
    GSAS_SHMEM_DECL_CTX(void, P, put##S##_signal, void *dest, const void *source,             \
                        size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op,       \
                        int pe)                                                               \
    GSAS_SHMEM_DECL_CTX(void, P, put##S##_signal_nbi, void *dest, const void *source,         \
                        size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op,       \
                        int pe)

/* Put-with-signal over the standard RMA types. */
#define GSAS_SHMEM_D_SIGNAL(P, B, T, N, K)                                                    \
    GSAS_SHMEM_DECL_CTX(void, P, N##_put_signal, T *dest, const T *source, size_t nelems,     \
                        uint64_t *sig_addr, uint64_t signal, int sig_op, int pe)              \
    GSAS_SHMEM_DECL_CTX(void, P, N##_put_signal_nbi, T *dest, const T *source,                \
                        size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op,       \
                        int pe)

/* AMOs over the extended AMO types (fetch, set, swap; fetch_nbi, swap_nbi). */
#define GSAS_SHMEM_D_AMO_EXT(P, B, T, N, K)                                                   \
    GSAS_SHMEM_DECL_CTX(T, P, N##_atomic_fetch, const T *source, int pe)                      \
    GSAS_SHMEM_DECL_CTX(void, P, N##_atomic_set, T *dest, T value, int pe)                    \
    GSAS_SHMEM_DECL_CTX(T, P, N##_atomic_swap, T *dest, T value, int pe)                      \
    GSAS_SHMEM_DECL_CTX(void, P, N##_atomic_fetch_nbi, T *fetch, const T *source, int pe)     \
    GSAS_SHMEM_DECL_CTX(void, P, N##_atomic_swap_nbi, T *fetch, T *dest, T value, int pe)

/* AMOs over the standard AMO types (compare_swap, fetch_inc, inc, fetch_add, add; nbi). */
#define GSAS_SHMEM_D_AMO_STD(P, B, T, N, K)                                                   \
    GSAS_SHMEM_DECL_CTX(T, P, N##_atomic_compare_swap, T *dest, T cond, T value, int pe)      \
    GSAS_SHMEM_DECL_CTX(T, P, N##_atomic_fetch_inc, T *dest, int pe)                          \
    GSAS_SHMEM_DECL_CTX(void, P, N##_atomic_inc, T *dest, int pe)                             \
    GSAS_SHMEM_DECL_CTX(T, P, N##_atomic_fetch_add, T *dest, T value, int pe)                 \
    GSAS_SHMEM_DECL_CTX(void, P, N##_atomic_add, T *dest, T value, int pe)                    \
    GSAS_SHMEM_DECL_CTX(void, P, N##_atomic_compare_swap_nbi, T *fetch, T *dest, T cond,      \
                        T value, int pe)                                                      \
    GSAS_SHMEM_DECL_CTX(void, P, N##_atomic_fetch_inc_nbi, T *fetch, T *dest, int pe)         \
    GSAS_SHMEM_DECL_CTX(void, P, N##_atomic_fetch_add_nbi, T *fetch, T *dest, T value,        \
                        int pe)

/* AMOs over the bitwise AMO types (fetch_and, and, fetch_or, or, fetch_xor, xor; nbi). */
#define GSAS_SHMEM_D_AMO_BIT(P, B, T, N, K)                                                   \
    GSAS_SHMEM_DECL_CTX(T, P, N##_atomic_fetch_and, T *dest, T value, int pe)                 \
    GSAS_SHMEM_DECL_CTX(void, P, N##_atomic_and, T *dest, T value, int pe)                    \
    GSAS_SHMEM_DECL_CTX(T, P, N##_atomic_fetch_or, T *dest, T value, int pe)                  \
    GSAS_SHMEM_DECL_CTX(void, P, N##_atomic_or, T *dest, T value, int pe)                     \
    GSAS_SHMEM_DECL_CTX(T, P, N##_atomic_fetch_xor, T *dest, T value, int pe)                 \
    GSAS_SHMEM_DECL_CTX(void, P, N##_atomic_xor, T *dest, T value, int pe)                    \
    GSAS_SHMEM_DECL_CTX(void, P, N##_atomic_fetch_and_nbi, T *fetch, T *dest, T value,        \
                        int pe)                                                               \
    GSAS_SHMEM_DECL_CTX(void, P, N##_atomic_fetch_or_nbi, T *fetch, T *dest, T value,         \
                        int pe)                                                               \
    GSAS_SHMEM_DECL_CTX(void, P, N##_atomic_fetch_xor_nbi, T *fetch, T *dest, T value,        \
                        int pe)

/* Deprecated (1.4) AMO names; no context twins. */
#define GSAS_SHMEM_D_AMO_DEPR_EXT(P, B, T, N, K)                                              \
    GSAS_SHMEM_DECL(T, P, N##_fetch, const T *source, int pe)                                 \
    GSAS_SHMEM_DECL(void, P, N##_set, T *dest, T value, int pe)                               \
    GSAS_SHMEM_DECL(T, P, N##_swap, T *dest, T value, int pe)
#define GSAS_SHMEM_D_AMO_DEPR_STD(P, B, T, N, K)                                              \
    GSAS_SHMEM_DECL(T, P, N##_cswap, T *dest, T cond, T value, int pe)                        \
    GSAS_SHMEM_DECL(T, P, N##_finc, T *dest, int pe)                                          \
    GSAS_SHMEM_DECL(void, P, N##_inc, T *dest, int pe)                                        \
    GSAS_SHMEM_DECL(T, P, N##_fadd, T *dest, T value, int pe)                                 \
    GSAS_SHMEM_DECL(void, P, N##_add, T *dest, T value, int pe)

/* Point-to-point synchronization over the 1.5 point-to-point types. */
#define GSAS_SHMEM_D_P2P(P, B, T, N, K)                                                       \
    GSAS_SHMEM_DECL(void, P, N##_wait_until, T *ivar, int cmp, T cmp_value)                   \
    GSAS_SHMEM_DECL(int, P, N##_test, T *ivar, int cmp, T cmp_value)                          \
    GSAS_SHMEM_D_P2P_MULTI(P, T, N)                                                           \
    GSAS_SHMEM_DECL(void, P, N##_wait_until_all_vector, T *ivars, size_t nelems,              \
                    const int *status, int cmp, const T *cmp_values)                          \
    GSAS_SHMEM_DECL(size_t, P, N##_wait_until_any_vector, T *ivars, size_t nelems,            \
                    const int *status, int cmp, const T *cmp_values)                          \
    GSAS_SHMEM_DECL(size_t, P, N##_wait_until_some_vector, T *ivars, size_t nelems,           \
                    size_t *indices, const int *status, int cmp, const T *cmp_values)         \
    GSAS_SHMEM_DECL(int, P, N##_test_all_vector, T *ivars, size_t nelems, const int *status,  \
                    int cmp, const T *cmp_values)                                             \
    GSAS_SHMEM_DECL(size_t, P, N##_test_any_vector, T *ivars, size_t nelems,                  \
                    const int *status, int cmp, const T *cmp_values)                          \
    GSAS_SHMEM_DECL(size_t, P, N##_test_some_vector, T *ivars, size_t nelems,                 \
                    size_t *indices, const int *status, int cmp, const T *cmp_values)

/* Deprecated point-to-point routines: wait_until/test for short and ushort, and wait. */
#define GSAS_SHMEM_D_P2P_DEPR(P, B, T, N, K)                                                  \
    GSAS_SHMEM_DECL(void, P, N##_wait_until, T *ivar, int cmp, T cmp_value)                   \
    GSAS_SHMEM_DECL(int, P, N##_test, T *ivar, int cmp, T cmp_value)                          \
    GSAS_SHMEM_D_P2P_MULTI(P, T, N)
/* The multi-variable forms with one comparison value, over the 1.5 point-to-point types and
 * short and unsigned short (for these not OpenSHMEM routines; Sandia OpenSHMEM and Open MPI
 * have them, and programs written for them call the generics below with short arguments). */
#define GSAS_SHMEM_D_P2P_MULTI(P, T, N)                                                       \
    GSAS_SHMEM_DECL(void, P, N##_wait_until_all, T *ivars, size_t nelems, const int *status,  \
                    int cmp, T cmp_value)                                                     \
    GSAS_SHMEM_DECL(size_t, P, N##_wait_until_any, T *ivars, size_t nelems,                   \
                    const int *status, int cmp, T cmp_value)                                  \
    GSAS_SHMEM_DECL(size_t, P, N##_wait_until_some, T *ivars, size_t nelems, size_t *indices, \
                    const int *status, int cmp, T cmp_value)                                  \
    GSAS_SHMEM_DECL(int, P, N##_test_all, T *ivars, size_t nelems, const int *status,         \
                    int cmp, T cmp_value)                                                     \
    GSAS_SHMEM_DECL(size_t, P, N##_test_any, T *ivars, size_t nelems, const int *status,      \
                    int cmp, T cmp_value)                                                     \
    GSAS_SHMEM_DECL(size_t, P, N##_test_some, T *ivars, size_t nelems, size_t *indices,       \
                    const int *status, int cmp, T cmp_value)
#define GSAS_SHMEM_D_WAIT_DEPR(P, B, T, N, K)                                                 \
    GSAS_SHMEM_DECL(void, P, N##_wait, T *ivar, T cmp_value)

/* Team-based data-movement collectives over the standard RMA types. */
#define GSAS_SHMEM_D_COLL(P, B, T, N, K)                                                      \
    GSAS_SHMEM_DECL(int, P, N##_broadcast, shmem_team_t team, T *dest, const T *source,       \
                    size_t nelems, int PE_root)                                               \
    GSAS_SHMEM_DECL(int, P, N##_collect, shmem_team_t team, T *dest, const T *source,         \
                    size_t nelems)                                                            \
    GSAS_SHMEM_DECL(int, P, N##_fcollect, shmem_team_t team, T *dest, const T *source,        \
                    size_t nelems)                                                            \
    GSAS_SHMEM_DECL(int, P, N##_alltoall, shmem_team_t team, T *dest, const T *source,        \
                    size_t nelems)                                                            \
    GSAS_SHMEM_DECL(int, P, N##_alltoalls, shmem_team_t team, T *dest, const T *source,       \
                    ptrdiff_t dst, ptrdiff_t sst, size_t nelems)

/* Deprecated active-set data-movement collectives, per block size S (32, 64). */
#define GSAS_SHMEM_D_COLL_SIZED(P, B, S)                                                      \
    GSAS_SHMEM_DECL(void, P, broadcast##S, void *dest, const void *source, size_t nelems,     \
                    int PE_root, int PE_start, int logPE_stride, int PE_size, long *pSync)    \
    GSAS_SHMEM_DECL(void, P, collect##S, void *dest, const void *source, size_t nelems,       \
                    int PE_start, int logPE_stride, int PE_size, long *pSync)                 \
    GSAS_SHMEM_DECL(void, P, fcollect##S, void *dest, const void *source, size_t nelems,      \
                    int PE_start, int logPE_stride, int PE_size, long *pSync)                 \
    GSAS_SHMEM_DECL(void, P, alltoall##S, void *dest, const void *source, size_t nelems,      \
                    int PE_start, int logPE_stride, int PE_size, long *pSync)                 \
    GSAS_SHMEM_DECL(void, P, alltoalls##S, void *dest, const void *source, ptrdiff_t dst,     \
                    ptrdiff_t sst, size_t nelems, int PE_start, int logPE_stride,             \
                    int PE_size, long *pSync)

/* Team reduction B (`_and_reduce`, ...) for one type. */
#define GSAS_SHMEM_D_REDUCE(P, B, T, N, K)                                                    \
    GSAS_SHMEM_DECL(int, P, N##B, shmem_team_t team, T *dest, const T *source, size_t nreduce)

/* Team scan B (`_sum_inscan`, `_sum_exscan`; OpenSHMEM 1.6) for one type. */
#define GSAS_SHMEM_D_SCAN(P, B, T, N, K)                                                      \
    GSAS_SHMEM_DECL(int, P, N##B, shmem_team_t team, T *dest, const T *source, size_t nelems)

/* Deprecated active-set reduction B (`_and_to_all`, ...) for one type. */
#define GSAS_SHMEM_D_TO_ALL(P, B, T, N, K)                                                    \
    GSAS_SHMEM_DECL(void, P, N##B, T *dest, const T *source, int nreduce, int PE_start,       \
                    int logPE_stride, int PE_size, T *pWrk, long *pSync)

/* Everything that is not per type: setup, threads, memory, teams, contexts, the mem forms of
 * RMA/signal/collectives, signal fetch/wait, barriers and sync, deprecated wait routines,
 * ordering, locks and profiling. */
#define GSAS_SHMEM_D_UNTYPED(P)                                                               \
    GSAS_SHMEM_DECL(void, P, init, void)                                                      \
    GSAS_SHMEM_DECL(void, P, finalize, void)                                                  \
    GSAS_SHMEM_DECL(int, P, my_pe, void)                                                      \
    GSAS_SHMEM_DECL(int, P, n_pes, void)                                                      \
    GSAS_SHMEM_NORETURN GSAS_SHMEM_DECL(void, P, global_exit, int status)                     \
    GSAS_SHMEM_DECL(int, P, pe_accessible, int pe)                                            \
    GSAS_SHMEM_DECL(int, P, addr_accessible, const void *addr, int pe)                        \
    GSAS_SHMEM_DECL(void *, P, ptr, const void *dest, int pe)                                 \
    GSAS_SHMEM_DECL(void, P, info_get_version, int *major, int *minor)                        \
    GSAS_SHMEM_DECL(void, P, info_get_name, char *name)                                       \
    GSAS_SHMEM_DECL(int, P, init_thread, int requested, int *provided)                        \
    GSAS_SHMEM_DECL(void, P, query_thread, int *provided)                                     \
    GSAS_SHMEM_DECL(void, P, query_initialized, int *initialized)                             \
    GSAS_SHMEM_DECL(void *, P, malloc, size_t size)                                           \
    GSAS_SHMEM_DECL(void, P, free, void *ptr)                                                 \
    GSAS_SHMEM_DECL(void *, P, realloc, void *ptr, size_t size)                               \
    GSAS_SHMEM_DECL(void *, P, align, size_t alignment, size_t size)                          \
    GSAS_SHMEM_DECL(void *, P, malloc_with_hints, size_t size, long hints)                    \
    GSAS_SHMEM_DECL(void *, P, calloc, size_t count, size_t size)                             \
    GSAS_SHMEM_DECL(int, P, team_my_pe, shmem_team_t team)                                    \
    GSAS_SHMEM_DECL(int, P, team_n_pes, shmem_team_t team)                                    \
    GSAS_SHMEM_DECL(int, P, team_get_config, shmem_team_t team, long config_mask,             \
                    shmem_team_config_t *config)                                              \
    GSAS_SHMEM_DECL(int, P, team_translate_pe, shmem_team_t src_team, int src_pe,             \
                    shmem_team_t dest_team)                                                   \
    GSAS_SHMEM_DECL(void *, P, team_ptr, shmem_team_t team, const void *dest, int pe)         \
    GSAS_SHMEM_DECL(int, P, team_split_strided, shmem_team_t parent_team, int start,          \
                    int stride, int size, const shmem_team_config_t *config,                  \
                    long config_mask, shmem_team_t *new_team)                                 \
    GSAS_SHMEM_DECL(int, P, team_split_2d, shmem_team_t parent_team, int xrange,              \
                    const shmem_team_config_t *xaxis_config, long xaxis_mask,                 \
                    shmem_team_t *xaxis_team, const shmem_team_config_t *yaxis_config,        \
                    long yaxis_mask, shmem_team_t *yaxis_team)                                \
    GSAS_SHMEM_DECL(void, P, team_destroy, shmem_team_t team)                                 \
    GSAS_SHMEM_DECL(int, P, ctx_create, long options, shmem_ctx_t *ctx)                       \
    GSAS_SHMEM_DECL(int, P, team_create_ctx, shmem_team_t team, long options,                 \
                    shmem_ctx_t *ctx)                                                         \
    GSAS_SHMEM_DECL(void, P, ctx_destroy, shmem_ctx_t ctx)                                    \
    GSAS_SHMEM_DECL(int, P, ctx_get_team, shmem_ctx_t ctx, shmem_team_t *team)                \
    GSAS_SHMEM_DECL(void, P, ctx_session_start, shmem_ctx_t ctx, long options,                \
                    const shmem_ctx_session_config_t *config, long config_mask)               \
    GSAS_SHMEM_DECL(void, P, ctx_session_stop, shmem_ctx_t ctx)                               \
    GSAS_SHMEM_DECL_CTX(void, P, putmem, void *dest, const void *source, size_t nelems,       \
                        int pe)                                                               \
    GSAS_SHMEM_DECL_CTX(void, P, getmem, void *dest, const void *source, size_t nelems,       \
                        int pe)                                                               \
    GSAS_SHMEM_DECL_CTX(void, P, putmem_nbi, void *dest, const void *source, size_t nelems,   \
                        int pe)                                                               \
    GSAS_SHMEM_DECL_CTX(void, P, getmem_nbi, void *dest, const void *source, size_t nelems,   \
                        int pe)                                                               \
    GSAS_SHMEM_DECL_CTX(void, P, putmem_signal, void *dest, const void *source,               \
                        size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op,       \
                        int pe)                                                               \
    GSAS_SHMEM_DECL_CTX(void, P, putmem_signal_nbi, void *dest, const void *source,           \
                        size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op,       \
                        int pe)                                                               \
    GSAS_SHMEM_DECL(uint64_t, P, signal_fetch, const uint64_t *sig_addr)                      \
    GSAS_SHMEM_DECL_CTX(void, P, signal_add, uint64_t *sig_addr, uint64_t signal, int pe)     \
    GSAS_SHMEM_DECL_CTX(void, P, signal_set, uint64_t *sig_addr, uint64_t signal, int pe)     \
    GSAS_SHMEM_DECL(uint64_t, P, signal_wait_until, uint64_t *sig_addr, int cmp,              \
                    uint64_t cmp_value)                                                       \
    GSAS_SHMEM_DECL(void, P, barrier_all, void)                                               \
    GSAS_SHMEM_DECL(void, P, barrier, int PE_start, int logPE_stride, int PE_size,            \
                    long *pSync)                                                              \
    GSAS_SHMEM_DECL(void, P, sync_all, void)                                                  \
    GSAS_SHMEM_DECL(int, P, team_sync, shmem_team_t team)                                     \
    GSAS_SHMEM_DECL(void, P, sync, int PE_start, int logPE_stride, int PE_size, long *pSync)  \
    GSAS_SHMEM_DECL(int, P, broadcastmem, shmem_team_t team, void *dest, const void *source,  \
                    size_t nelems, int PE_root)                                               \
    GSAS_SHMEM_DECL(int, P, collectmem, shmem_team_t team, void *dest, const void *source,    \
                    size_t nelems)                                                            \
    GSAS_SHMEM_DECL(int, P, fcollectmem, shmem_team_t team, void *dest, const void *source,   \
                    size_t nelems)                                                            \
    GSAS_SHMEM_DECL(int, P, alltoallmem, shmem_team_t team, void *dest, const void *source,   \
                    size_t nelems)                                                            \
    GSAS_SHMEM_DECL(int, P, alltoallsmem, shmem_team_t team, void *dest, const void *source,  \
                    ptrdiff_t dst, ptrdiff_t sst, size_t nelems)                              \
    GSAS_SHMEM_DECL(void, P, wait_until, long *ivar, int cmp, long cmp_value)                 \
    GSAS_SHMEM_DECL(void, P, wait, long *ivar, long cmp_value)                                \
    GSAS_SHMEM_DECL(void, P, fence, void)                                                     \
    GSAS_SHMEM_DECL(void, P, ctx_fence, shmem_ctx_t ctx)                                      \
    GSAS_SHMEM_DECL(void, P, quiet, void)                                                     \
    GSAS_SHMEM_DECL(void, P, ctx_quiet, shmem_ctx_t ctx)                                      \
    GSAS_SHMEM_DECL_CTX(void, P, pe_quiet, const int *target_pes, size_t npes)                \
    GSAS_SHMEM_DECL(void, P, set_lock, long *lock)                                            \
    GSAS_SHMEM_DECL(void, P, clear_lock, long *lock)                                          \
    GSAS_SHMEM_DECL(int, P, test_lock, long *lock)                                            \
    GSAS_SHMEM_DECL(void, P, pcontrol, int level, ...)

/* Legacy names without the shmem_ prefix (deprecated since 1.2).  Their profiling names put
 * a `p` in front of the whole name (pstart_pes, p_my_pe, pshmalloc, ...). */
#define GSAS_SHMEM_D_LEGACY(P) GSAS_SHMEM_D_LEGACY_##P
#define GSAS_SHMEM_D_LEGACY_shmem_                                                            \
    void start_pes(int npes);                                                                 \
    int _my_pe(void);                                                                         \
    int _num_pes(void);                                                                       \
    void *shmalloc(size_t size);                                                              \
    void shfree(void *ptr);                                                                   \
    void *shrealloc(void *ptr, size_t size);                                                  \
    void *shmemalign(size_t alignment, size_t size);
#define GSAS_SHMEM_D_LEGACY_pshmem_                                                           \
    void pstart_pes(int npes);                                                                \
    int p_my_pe(void);                                                                        \
    int p_num_pes(void);                                                                      \
    void *pshmalloc(size_t size);                                                             \
    void pshfree(void *ptr);                                                                  \
    void *pshrealloc(void *ptr, size_t size);                                                 \
    void *pshmemalign(size_t alignment, size_t size);

/* The cache management routines (deprecated in 1.3, removed in 1.5), so that older programs
 * link: no-ops in gsas (PEs of a node share cache-coherent memory; data from other nodes is
 * written by the node's atomic service with ordinary stores), declared deprecated so that a
 * call compiles with a warning. */
#define GSAS_SHMEM_CACHE_REMOVED "removed in OpenSHMEM 1.5; a no-op in gsas"
#define GSAS_SHMEM_D_CACHE(P)                                                                 \
    GSAS_SHMEM_DEPRECATED(GSAS_SHMEM_CACHE_REMOVED)                                           \
    GSAS_SHMEM_DECL(void, P, clear_cache_inv, void)                                           \
    GSAS_SHMEM_DEPRECATED(GSAS_SHMEM_CACHE_REMOVED)                                           \
    GSAS_SHMEM_DECL(void, P, set_cache_inv, void)                                             \
    GSAS_SHMEM_DEPRECATED(GSAS_SHMEM_CACHE_REMOVED)                                           \
    GSAS_SHMEM_DECL(void, P, clear_cache_line_inv, void *dest)                                \
    GSAS_SHMEM_DEPRECATED(GSAS_SHMEM_CACHE_REMOVED)                                           \
    GSAS_SHMEM_DECL(void, P, set_cache_line_inv, void *dest)                                  \
    GSAS_SHMEM_DEPRECATED(GSAS_SHMEM_CACHE_REMOVED)                                           \
    GSAS_SHMEM_DECL(void, P, udcflush, void)                                                  \
    GSAS_SHMEM_DEPRECATED(GSAS_SHMEM_CACHE_REMOVED)                                           \
    GSAS_SHMEM_DECL(void, P, udcflush_line, void *dest)

/* All 1610 routines of OpenSHMEM 1.5, those of 1.6 gsas has and the six cache routines of
 * 1.4, with the name prefix P (`shmem_` or `pshmem_`). */
#define GSAS_SHMEM_DECLARE_ALL(P)                                                             \
    GSAS_SHMEM_D_UNTYPED(P)                                                                   \
    GSAS_SHMEM_D_LEGACY(P)                                                                    \
    GSAS_SHMEM_D_CACHE(P)                                                                     \
    GSAS_SHMEM_RMA_TYPES(GSAS_SHMEM_D_RMA, P, )                                               \
    GSAS_SHMEM_RMA_SIZES(GSAS_SHMEM_D_RMA_SIZED, P, )                                         \
    GSAS_SHMEM_RMA_TYPES(GSAS_SHMEM_D_SIGNAL, P, )                                            \
    GSAS_SHMEM_AMO_EXT_TYPES(GSAS_SHMEM_D_AMO_EXT, P, )                                       \
    GSAS_SHMEM_AMO_STD_TYPES(GSAS_SHMEM_D_AMO_STD, P, )                                       \
    GSAS_SHMEM_AMO_BIT_TYPES(GSAS_SHMEM_D_AMO_BIT, P, )                                       \
    GSAS_SHMEM_AMO_DEPR_EXT_TYPES(GSAS_SHMEM_D_AMO_DEPR_EXT, P, )                             \
    GSAS_SHMEM_AMO_DEPR_STD_TYPES(GSAS_SHMEM_D_AMO_DEPR_STD, P, )                             \
    GSAS_SHMEM_P2P_TYPES(GSAS_SHMEM_D_P2P, P, )                                               \
    GSAS_SHMEM_P2P_DEPR_TYPES(GSAS_SHMEM_D_P2P_DEPR, P, )                                     \
    GSAS_SHMEM_WAIT_DEPR_TYPES(GSAS_SHMEM_D_WAIT_DEPR, P, )                                   \
    GSAS_SHMEM_RMA_TYPES(GSAS_SHMEM_D_COLL, P, )                                              \
    GSAS_SHMEM_ASET_SIZES(GSAS_SHMEM_D_COLL_SIZED, P, )                                       \
    GSAS_SHMEM_TEAM_BIT_TYPES(GSAS_SHMEM_D_REDUCE, P, _and_reduce)                            \
    GSAS_SHMEM_TEAM_BIT_TYPES(GSAS_SHMEM_D_REDUCE, P, _or_reduce)                             \
    GSAS_SHMEM_TEAM_BIT_TYPES(GSAS_SHMEM_D_REDUCE, P, _xor_reduce)                            \
    GSAS_SHMEM_TEAM_MINMAX_TYPES(GSAS_SHMEM_D_REDUCE, P, _max_reduce)                         \
    GSAS_SHMEM_TEAM_MINMAX_TYPES(GSAS_SHMEM_D_REDUCE, P, _min_reduce)                         \
    GSAS_SHMEM_TEAM_ARITH_TYPES(GSAS_SHMEM_D_REDUCE, P, _sum_reduce)                          \
    GSAS_SHMEM_TEAM_ARITH_TYPES(GSAS_SHMEM_D_REDUCE, P, _prod_reduce)                         \
    GSAS_SHMEM_TEAM_ARITH_TYPES(GSAS_SHMEM_D_SCAN, P, _sum_inscan)                            \
    GSAS_SHMEM_TEAM_ARITH_TYPES(GSAS_SHMEM_D_SCAN, P, _sum_exscan)                            \
    GSAS_SHMEM_ASET_BIT_TYPES(GSAS_SHMEM_D_TO_ALL, P, _and_to_all)                            \
    GSAS_SHMEM_ASET_BIT_TYPES(GSAS_SHMEM_D_TO_ALL, P, _or_to_all)                             \
    GSAS_SHMEM_ASET_BIT_TYPES(GSAS_SHMEM_D_TO_ALL, P, _xor_to_all)                            \
    GSAS_SHMEM_ASET_MINMAX_TYPES(GSAS_SHMEM_D_TO_ALL, P, _max_to_all)                         \
    GSAS_SHMEM_ASET_MINMAX_TYPES(GSAS_SHMEM_D_TO_ALL, P, _min_to_all)                         \
    GSAS_SHMEM_ASET_ARITH_TYPES(GSAS_SHMEM_D_TO_ALL, P, _sum_to_all)                          \
    GSAS_SHMEM_ASET_ARITH_TYPES(GSAS_SHMEM_D_TO_ALL, P, _prod_to_all)

#ifdef __cplusplus
extern "C" {
#endif

/* The prototypes.  This must precede the generic macros: shmem_sync and shmem_wait_until are
 * also generic names. */
GSAS_SHMEM_DECLARE_ALL(shmem_)

#ifdef __cplusplus
}
#endif

/* ------------------------------------------------------------------------------------------
 * C11 type-generic interfaces (OpenSHMEM 1.5: 67 names, 8 of them deprecated; OpenSHMEM 1.6:
 * shmem_ibput and shmem_ibget).
 * ---------------------------------------------------------------------------------------- */
#if !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L

/* The ABI mapping the ARMKIND columns rely on (see the file comment). */
#define GSAS_SHMEM_SAME_TYPE(A, B) _Generic((A *)0, B *: 1, default: 0)
_Static_assert(GSAS_SHMEM_SAME_TYPE(int8_t, signed char),
               "shmem.h generics assume int8_t is signed char (LP64 Linux ABI)");
_Static_assert(GSAS_SHMEM_SAME_TYPE(int16_t, short),
               "shmem.h generics assume int16_t is short (LP64 Linux ABI)");
_Static_assert(GSAS_SHMEM_SAME_TYPE(int32_t, int),
               "shmem.h generics assume int32_t is int (LP64 Linux ABI)");
_Static_assert(GSAS_SHMEM_SAME_TYPE(int64_t, long),
               "shmem.h generics assume int64_t is long (LP64 Linux ABI)");
_Static_assert(GSAS_SHMEM_SAME_TYPE(uint8_t, unsigned char),
               "shmem.h generics assume uint8_t is unsigned char (LP64 Linux ABI)");
_Static_assert(GSAS_SHMEM_SAME_TYPE(uint16_t, unsigned short),
               "shmem.h generics assume uint16_t is unsigned short (LP64 Linux ABI)");
_Static_assert(GSAS_SHMEM_SAME_TYPE(uint32_t, unsigned int),
               "shmem.h generics assume uint32_t is unsigned int (LP64 Linux ABI)");
_Static_assert(GSAS_SHMEM_SAME_TYPE(uint64_t, unsigned long),
               "shmem.h generics assume uint64_t is unsigned long (LP64 Linux ABI)");
_Static_assert(GSAS_SHMEM_SAME_TYPE(size_t, unsigned long),
               "shmem.h generics assume size_t is unsigned long (LP64 Linux ABI)");
_Static_assert(GSAS_SHMEM_SAME_TYPE(ptrdiff_t, long),
               "shmem.h generics assume ptrdiff_t is long (LP64 Linux ABI)");

/* The target of every `default:` association.  It is never defined: any use is a call with
 * arguments, which is a compile error naming it. */
void gsas_shmem_generic_called_with_unsupported_argument_type(void);
#define GSAS_SHMEM_NO_MATCH gsas_shmem_generic_called_with_unsupported_argument_type

/* Association builders: X-macros for the type tables.  A is the routine prefix, B its
 * suffix.  ARMC also accepts a pointer to const (for `const TYPE *` selecting arguments). */
#define GSAS_SHMEM_ARM(A, B, T, N, K) GSAS_SHMEM_ARM_##K(T, A##N##B)
#define GSAS_SHMEM_ARM_DISTINCT(T, F) T *: F,
#define GSAS_SHMEM_ARM_ALIAS(T, F)
#define GSAS_SHMEM_ARMC(A, B, T, N, K) GSAS_SHMEM_ARMC_##K(T, A##N##B)
#define GSAS_SHMEM_ARMC_DISTINCT(T, F) T *: F, const T *: F,
#define GSAS_SHMEM_ARMC_ALIAS(T, F)

/* Argument selectors.  The trailing zeros keep at least one argument in every `...`. */
#define GSAS_SHMEM_ARG0(...) GSAS_SHMEM_ARG0_(__VA_ARGS__, 0)
#define GSAS_SHMEM_ARG0_(a0, ...) a0
#define GSAS_SHMEM_ARG1(...) GSAS_SHMEM_ARG1_(__VA_ARGS__, 0, 0)
#define GSAS_SHMEM_ARG1_(a0, a1, ...) a1
#define GSAS_SHMEM_PTR0(...) (&*(GSAS_SHMEM_ARG0(__VA_ARGS__)))
#define GSAS_SHMEM_PTR1(...) (&*(GSAS_SHMEM_ARG1(__VA_ARGS__)))
#define GSAS_SHMEM_VAL1(...) ((GSAS_SHMEM_ARG1(__VA_ARGS__)) + 0)

/* Select over TABLE with associations ARM, routine prefix `shmem_` and suffix B. */
#define GSAS_SHMEM_SELECT(TABLE, ARM, B, SEL)                                                 \
    _Generic(SEL, TABLE(ARM, shmem_, B) default: GSAS_SHMEM_NO_MATCH)
/* Optional leading context: FIRST is the first argument; a shmem_ctx_t selects
 * shmem_ctx_TYPENAME B by CTXSEL (the second argument), anything else shmem_TYPENAME B by
 * SEL (the first argument). */
#define GSAS_SHMEM_SELECT_CTX(TABLE, ARM, B, FIRST, CTXSEL, SEL)                              \
    _Generic(FIRST,                                                                           \
        shmem_ctx_t: _Generic(CTXSEL, TABLE(ARM, shmem_ctx_, B) default: GSAS_SHMEM_NO_MATCH), \
        default: GSAS_SHMEM_SELECT(TABLE, ARM, B, SEL))

/* Generic kinds.  CTX_PTR: optional context, the second argument of the form without context
 * is a pointer.  CTX_VAL: optional context, that argument may be a scalar.  PLAIN: no
 * context, select on the first argument.  TEAM: first argument a team, select on the second. */
#define GSAS_SHMEM_GEN_CTX_PTR(TABLE, ARM, B, ...)                                            \
    GSAS_SHMEM_SELECT_CTX(TABLE, ARM, B, GSAS_SHMEM_ARG0(__VA_ARGS__),                        \
                          GSAS_SHMEM_PTR1(__VA_ARGS__), GSAS_SHMEM_PTR0(__VA_ARGS__))         \
    (__VA_ARGS__)
#define GSAS_SHMEM_GEN_CTX_VAL(TABLE, ARM, B, ...)                                            \
    GSAS_SHMEM_SELECT_CTX(TABLE, ARM, B, GSAS_SHMEM_ARG0(__VA_ARGS__),                        \
                          GSAS_SHMEM_VAL1(__VA_ARGS__), GSAS_SHMEM_PTR0(__VA_ARGS__))         \
    (__VA_ARGS__)
#define GSAS_SHMEM_GEN_PLAIN(TABLE, ARM, B, ...)                                              \
    GSAS_SHMEM_SELECT(TABLE, ARM, B, GSAS_SHMEM_PTR0(__VA_ARGS__))(__VA_ARGS__)
#define GSAS_SHMEM_GEN_TEAM(TABLE, B, ...)                                                    \
    GSAS_SHMEM_SELECT(TABLE, GSAS_SHMEM_ARM, B, GSAS_SHMEM_PTR1(__VA_ARGS__))(__VA_ARGS__)

/* wait_until and test also take the deprecated short and unsigned short. */
#define GSAS_SHMEM_WAIT_UNTIL_TYPES(X, A, B)                                                  \
    GSAS_SHMEM_P2P_TYPES(X, A, B) GSAS_SHMEM_P2P_DEPR_TYPES(X, A, B)

/* RMA: shmem_put([ctx,] dest, source, nelems, pe) and friends. */
#define shmem_put(...) GSAS_SHMEM_GEN_CTX_PTR(GSAS_SHMEM_RMA_TYPES, GSAS_SHMEM_ARM, _put, __VA_ARGS__)
#define shmem_p(...) GSAS_SHMEM_GEN_CTX_VAL(GSAS_SHMEM_RMA_TYPES, GSAS_SHMEM_ARM, _p, __VA_ARGS__)
#define shmem_iput(...) GSAS_SHMEM_GEN_CTX_PTR(GSAS_SHMEM_RMA_TYPES, GSAS_SHMEM_ARM, _iput, __VA_ARGS__)
#define shmem_get(...) GSAS_SHMEM_GEN_CTX_PTR(GSAS_SHMEM_RMA_TYPES, GSAS_SHMEM_ARM, _get, __VA_ARGS__)
#define shmem_g(...) GSAS_SHMEM_GEN_CTX_VAL(GSAS_SHMEM_RMA_TYPES, GSAS_SHMEM_ARMC, _g, __VA_ARGS__)
#define shmem_iget(...) GSAS_SHMEM_GEN_CTX_PTR(GSAS_SHMEM_RMA_TYPES, GSAS_SHMEM_ARM, _iget, __VA_ARGS__)
#define shmem_ibput(...)                                                                      \
    GSAS_SHMEM_GEN_CTX_PTR(GSAS_SHMEM_RMA_TYPES, GSAS_SHMEM_ARM, _ibput, __VA_ARGS__)
#define shmem_ibget(...)                                                                      \
    GSAS_SHMEM_GEN_CTX_PTR(GSAS_SHMEM_RMA_TYPES, GSAS_SHMEM_ARM, _ibget, __VA_ARGS__)
#define shmem_put_nbi(...)                                                                    \
    GSAS_SHMEM_GEN_CTX_PTR(GSAS_SHMEM_RMA_TYPES, GSAS_SHMEM_ARM, _put_nbi, __VA_ARGS__)
#define shmem_get_nbi(...)                                                                    \
    GSAS_SHMEM_GEN_CTX_PTR(GSAS_SHMEM_RMA_TYPES, GSAS_SHMEM_ARM, _get_nbi, __VA_ARGS__)

/* AMO, blocking: shmem_atomic_*([ctx,] dest, ...). */
#define shmem_atomic_fetch(...)                                                               \
    GSAS_SHMEM_GEN_CTX_VAL(GSAS_SHMEM_AMO_EXT_TYPES, GSAS_SHMEM_ARMC, _atomic_fetch, __VA_ARGS__)
#define shmem_atomic_set(...)                                                                 \
    GSAS_SHMEM_GEN_CTX_VAL(GSAS_SHMEM_AMO_EXT_TYPES, GSAS_SHMEM_ARM, _atomic_set, __VA_ARGS__)
#define shmem_atomic_compare_swap(...)                                                        \
    GSAS_SHMEM_GEN_CTX_VAL(GSAS_SHMEM_AMO_STD_TYPES, GSAS_SHMEM_ARM, _atomic_compare_swap,    \
                           __VA_ARGS__)
#define shmem_atomic_swap(...)                                                                \
    GSAS_SHMEM_GEN_CTX_VAL(GSAS_SHMEM_AMO_EXT_TYPES, GSAS_SHMEM_ARM, _atomic_swap, __VA_ARGS__)
#define shmem_atomic_fetch_inc(...)                                                           \
    GSAS_SHMEM_GEN_CTX_VAL(GSAS_SHMEM_AMO_STD_TYPES, GSAS_SHMEM_ARM, _atomic_fetch_inc,       \
                           __VA_ARGS__)
#define shmem_atomic_inc(...)                                                                 \
    GSAS_SHMEM_GEN_CTX_VAL(GSAS_SHMEM_AMO_STD_TYPES, GSAS_SHMEM_ARM, _atomic_inc, __VA_ARGS__)
#define shmem_atomic_fetch_add(...)                                                           \
    GSAS_SHMEM_GEN_CTX_VAL(GSAS_SHMEM_AMO_STD_TYPES, GSAS_SHMEM_ARM, _atomic_fetch_add,       \
                           __VA_ARGS__)
#define shmem_atomic_add(...)                                                                 \
    GSAS_SHMEM_GEN_CTX_VAL(GSAS_SHMEM_AMO_STD_TYPES, GSAS_SHMEM_ARM, _atomic_add, __VA_ARGS__)
#define shmem_atomic_fetch_and(...)                                                           \
    GSAS_SHMEM_GEN_CTX_VAL(GSAS_SHMEM_AMO_BIT_TYPES, GSAS_SHMEM_ARM, _atomic_fetch_and,       \
                           __VA_ARGS__)
#define shmem_atomic_and(...)                                                                 \
    GSAS_SHMEM_GEN_CTX_VAL(GSAS_SHMEM_AMO_BIT_TYPES, GSAS_SHMEM_ARM, _atomic_and, __VA_ARGS__)
#define shmem_atomic_fetch_or(...)                                                            \
    GSAS_SHMEM_GEN_CTX_VAL(GSAS_SHMEM_AMO_BIT_TYPES, GSAS_SHMEM_ARM, _atomic_fetch_or,        \
                           __VA_ARGS__)
#define shmem_atomic_or(...)                                                                  \
    GSAS_SHMEM_GEN_CTX_VAL(GSAS_SHMEM_AMO_BIT_TYPES, GSAS_SHMEM_ARM, _atomic_or, __VA_ARGS__)
#define shmem_atomic_fetch_xor(...)                                                           \
    GSAS_SHMEM_GEN_CTX_VAL(GSAS_SHMEM_AMO_BIT_TYPES, GSAS_SHMEM_ARM, _atomic_fetch_xor,       \
                           __VA_ARGS__)
#define shmem_atomic_xor(...)                                                                 \
    GSAS_SHMEM_GEN_CTX_VAL(GSAS_SHMEM_AMO_BIT_TYPES, GSAS_SHMEM_ARM, _atomic_xor, __VA_ARGS__)

/* AMO, nonblocking fetching: shmem_atomic_*_nbi([ctx,] fetch, dest-or-source, ...). */
#define shmem_atomic_fetch_nbi(...)                                                           \
    GSAS_SHMEM_GEN_CTX_PTR(GSAS_SHMEM_AMO_EXT_TYPES, GSAS_SHMEM_ARM, _atomic_fetch_nbi,       \
                           __VA_ARGS__)
#define shmem_atomic_compare_swap_nbi(...)                                                    \
    GSAS_SHMEM_GEN_CTX_PTR(GSAS_SHMEM_AMO_STD_TYPES, GSAS_SHMEM_ARM, _atomic_compare_swap_nbi, \
                           __VA_ARGS__)
#define shmem_atomic_swap_nbi(...)                                                            \
    GSAS_SHMEM_GEN_CTX_PTR(GSAS_SHMEM_AMO_EXT_TYPES, GSAS_SHMEM_ARM, _atomic_swap_nbi,        \
                           __VA_ARGS__)
#define shmem_atomic_fetch_inc_nbi(...)                                                       \
    GSAS_SHMEM_GEN_CTX_PTR(GSAS_SHMEM_AMO_STD_TYPES, GSAS_SHMEM_ARM, _atomic_fetch_inc_nbi,   \
                           __VA_ARGS__)
#define shmem_atomic_fetch_add_nbi(...)                                                       \
    GSAS_SHMEM_GEN_CTX_PTR(GSAS_SHMEM_AMO_STD_TYPES, GSAS_SHMEM_ARM, _atomic_fetch_add_nbi,   \
                           __VA_ARGS__)
#define shmem_atomic_fetch_and_nbi(...)                                                       \
    GSAS_SHMEM_GEN_CTX_PTR(GSAS_SHMEM_AMO_BIT_TYPES, GSAS_SHMEM_ARM, _atomic_fetch_and_nbi,   \
                           __VA_ARGS__)
#define shmem_atomic_fetch_or_nbi(...)                                                        \
    GSAS_SHMEM_GEN_CTX_PTR(GSAS_SHMEM_AMO_BIT_TYPES, GSAS_SHMEM_ARM, _atomic_fetch_or_nbi,    \
                           __VA_ARGS__)
#define shmem_atomic_fetch_xor_nbi(...)                                                       \
    GSAS_SHMEM_GEN_CTX_PTR(GSAS_SHMEM_AMO_BIT_TYPES, GSAS_SHMEM_ARM, _atomic_fetch_xor_nbi,   \
                           __VA_ARGS__)

/* AMO, deprecated generic names (no context; they call the current atomic_* routines). */
#define shmem_fetch(...)                                                                      \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_AMO_EXT_TYPES, GSAS_SHMEM_ARMC, _atomic_fetch, __VA_ARGS__)
#define shmem_set(...)                                                                        \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_AMO_EXT_TYPES, GSAS_SHMEM_ARM, _atomic_set, __VA_ARGS__)
#define shmem_cswap(...)                                                                      \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_AMO_STD_TYPES, GSAS_SHMEM_ARM, _atomic_compare_swap,      \
                         __VA_ARGS__)
#define shmem_swap(...)                                                                       \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_AMO_EXT_TYPES, GSAS_SHMEM_ARM, _atomic_swap, __VA_ARGS__)
#define shmem_finc(...)                                                                       \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_AMO_STD_TYPES, GSAS_SHMEM_ARM, _atomic_fetch_inc,         \
                         __VA_ARGS__)
#define shmem_inc(...)                                                                        \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_AMO_STD_TYPES, GSAS_SHMEM_ARM, _atomic_inc, __VA_ARGS__)
#define shmem_fadd(...)                                                                       \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_AMO_STD_TYPES, GSAS_SHMEM_ARM, _atomic_fetch_add,         \
                         __VA_ARGS__)
#define shmem_add(...)                                                                        \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_AMO_STD_TYPES, GSAS_SHMEM_ARM, _atomic_add, __VA_ARGS__)

/* Put with signal: shmem_put_signal[_nbi]([ctx,] dest, source, nelems, sig_addr, signal,
 * sig_op, pe). */
#define shmem_put_signal(...)                                                                 \
    GSAS_SHMEM_GEN_CTX_PTR(GSAS_SHMEM_RMA_TYPES, GSAS_SHMEM_ARM, _put_signal, __VA_ARGS__)
#define shmem_put_signal_nbi(...)                                                             \
    GSAS_SHMEM_GEN_CTX_PTR(GSAS_SHMEM_RMA_TYPES, GSAS_SHMEM_ARM, _put_signal_nbi, __VA_ARGS__)

/* Signals (OpenSHMEM 1.6): shmem_signal_add(ctx, sig_addr, signal, pe) is
 * shmem_ctx_signal_add; without the context it is the C routine shmem_signal_add (a macro
 * does not re-expand its own name).  Selected on the first argument as is (shmem_ctx_t is a
 * pointer to an incomplete struct), as shmem_sync below. */
#define shmem_signal_add(...)                                                                 \
    _Generic((GSAS_SHMEM_ARG0(__VA_ARGS__)), shmem_ctx_t: shmem_ctx_signal_add,              \
             default: shmem_signal_add)(__VA_ARGS__)
#define shmem_signal_set(...)                                                                 \
    _Generic((GSAS_SHMEM_ARG0(__VA_ARGS__)), shmem_ctx_t: shmem_ctx_signal_set,              \
             default: shmem_signal_set)(__VA_ARGS__)

/* Team synchronization: shmem_sync(team) is shmem_team_sync(team); with the active-set
 * arguments it is the C routine shmem_sync (a macro does not re-expand its own name).  The
 * first argument is selected on as is, not as (arg)+0: the team struct is incomplete, so
 * team+0 would not compile.  C11 lvalue conversion already drops qualifiers (a const
 * shmem_team_t still selects shmem_team_sync), and every non-team type goes to the
 * active-set routine, whose prototype then checks the arguments. */
#define shmem_sync(...)                                                                       \
    _Generic((GSAS_SHMEM_ARG0(__VA_ARGS__)), shmem_team_t: shmem_team_sync,                  \
             default: shmem_sync)(__VA_ARGS__)

/* Team collectives: shmem_broadcast(team, dest, source, nelems, PE_root) and friends. */
#define shmem_alltoall(...) GSAS_SHMEM_GEN_TEAM(GSAS_SHMEM_RMA_TYPES, _alltoall, __VA_ARGS__)
#define shmem_alltoalls(...) GSAS_SHMEM_GEN_TEAM(GSAS_SHMEM_RMA_TYPES, _alltoalls, __VA_ARGS__)
#define shmem_broadcast(...) GSAS_SHMEM_GEN_TEAM(GSAS_SHMEM_RMA_TYPES, _broadcast, __VA_ARGS__)
#define shmem_collect(...) GSAS_SHMEM_GEN_TEAM(GSAS_SHMEM_RMA_TYPES, _collect, __VA_ARGS__)
#define shmem_fcollect(...) GSAS_SHMEM_GEN_TEAM(GSAS_SHMEM_RMA_TYPES, _fcollect, __VA_ARGS__)

/* Team reductions: shmem_OP_reduce(team, dest, source, nreduce). */
#define shmem_and_reduce(...)                                                                 \
    GSAS_SHMEM_GEN_TEAM(GSAS_SHMEM_TEAM_BIT_TYPES, _and_reduce, __VA_ARGS__)
#define shmem_or_reduce(...) GSAS_SHMEM_GEN_TEAM(GSAS_SHMEM_TEAM_BIT_TYPES, _or_reduce, __VA_ARGS__)
#define shmem_xor_reduce(...)                                                                 \
    GSAS_SHMEM_GEN_TEAM(GSAS_SHMEM_TEAM_BIT_TYPES, _xor_reduce, __VA_ARGS__)
#define shmem_max_reduce(...)                                                                 \
    GSAS_SHMEM_GEN_TEAM(GSAS_SHMEM_TEAM_MINMAX_TYPES, _max_reduce, __VA_ARGS__)
#define shmem_min_reduce(...)                                                                 \
    GSAS_SHMEM_GEN_TEAM(GSAS_SHMEM_TEAM_MINMAX_TYPES, _min_reduce, __VA_ARGS__)
#define shmem_sum_reduce(...)                                                                 \
    GSAS_SHMEM_GEN_TEAM(GSAS_SHMEM_TEAM_ARITH_TYPES, _sum_reduce, __VA_ARGS__)
#define shmem_prod_reduce(...)                                                                \
    GSAS_SHMEM_GEN_TEAM(GSAS_SHMEM_TEAM_ARITH_TYPES, _prod_reduce, __VA_ARGS__)

/* Team scans (OpenSHMEM 1.6): shmem_sum_inscan(team, dest, source, nelems), _exscan. */
#define shmem_sum_inscan(...)                                                                 \
    GSAS_SHMEM_GEN_TEAM(GSAS_SHMEM_TEAM_ARITH_TYPES, _sum_inscan, __VA_ARGS__)
#define shmem_sum_exscan(...)                                                                 \
    GSAS_SHMEM_GEN_TEAM(GSAS_SHMEM_TEAM_ARITH_TYPES, _sum_exscan, __VA_ARGS__)

/* Point-to-point synchronization: shmem_wait_until(ivar, cmp, value) and friends. */
#define shmem_wait_until(...)                                                                 \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_WAIT_UNTIL_TYPES, GSAS_SHMEM_ARM, _wait_until, __VA_ARGS__)
#define shmem_wait_until_all(...)                                                             \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_WAIT_UNTIL_TYPES, GSAS_SHMEM_ARM, _wait_until_all, __VA_ARGS__)
#define shmem_wait_until_any(...)                                                             \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_WAIT_UNTIL_TYPES, GSAS_SHMEM_ARM, _wait_until_any, __VA_ARGS__)
#define shmem_wait_until_some(...)                                                            \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_WAIT_UNTIL_TYPES, GSAS_SHMEM_ARM, _wait_until_some, __VA_ARGS__)
#define shmem_wait_until_all_vector(...)                                                      \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_P2P_TYPES, GSAS_SHMEM_ARM, _wait_until_all_vector,        \
                         __VA_ARGS__)
#define shmem_wait_until_any_vector(...)                                                      \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_P2P_TYPES, GSAS_SHMEM_ARM, _wait_until_any_vector,        \
                         __VA_ARGS__)
#define shmem_wait_until_some_vector(...)                                                     \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_P2P_TYPES, GSAS_SHMEM_ARM, _wait_until_some_vector,       \
                         __VA_ARGS__)
#define shmem_test(...)                                                                       \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_WAIT_UNTIL_TYPES, GSAS_SHMEM_ARM, _test, __VA_ARGS__)
#define shmem_test_all(...)                                                                   \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_WAIT_UNTIL_TYPES, GSAS_SHMEM_ARM, _test_all, __VA_ARGS__)
#define shmem_test_any(...)                                                                   \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_WAIT_UNTIL_TYPES, GSAS_SHMEM_ARM, _test_any, __VA_ARGS__)
#define shmem_test_some(...)                                                                  \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_WAIT_UNTIL_TYPES, GSAS_SHMEM_ARM, _test_some, __VA_ARGS__)
#define shmem_test_all_vector(...)                                                            \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_P2P_TYPES, GSAS_SHMEM_ARM, _test_all_vector, __VA_ARGS__)
#define shmem_test_any_vector(...)                                                            \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_P2P_TYPES, GSAS_SHMEM_ARM, _test_any_vector, __VA_ARGS__)
#define shmem_test_some_vector(...)                                                           \
    GSAS_SHMEM_GEN_PLAIN(GSAS_SHMEM_P2P_TYPES, GSAS_SHMEM_ARM, _test_some_vector, __VA_ARGS__)

#endif /* C11 generics */

#endif /* GSAS_SHMEM_H */
