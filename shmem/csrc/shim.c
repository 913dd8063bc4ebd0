/*
 * shim.c - the few OpenSHMEM routines of libshmem that Rust cannot define.
 *
 * What it is
 *   - shmem_longdouble_p / _g and their context twins: they pass or return `long double` by
 *     value (x87 80-bit on x86_64, IEEE binary128 on aarch64), which has no Rust type.  Each
 *     is a one-liner that moves the value through memory and calls the byte-level RMA of the
 *     Rust library (gsas_shmem_put_bytes / gsas_shmem_get_bytes), which translates the
 *     symmetric address, checks the PE and reports errors naming the routine.
 *   - shmem_pcontrol(int level, ...): stable Rust cannot define a C-variadic function.  The
 *     profiling control is a no-op in gsas (the library keeps no profiling state), so the
 *     level and the variadic arguments are accepted and ignored.
 *   Every routine is defined once, under its pshmem_ name; its shmem_ name is a weak alias.
 *
 * What it is not
 *   No other logic lives here: the Rust side owns the state, the checks and the errors.
 *
 * Thread safety
 *   As the Rust routines they call: safe under SHMEM_THREAD_MULTIPLE.
 */
#include <stddef.h>

#include "shmem.h"
#include "pshmem.h"

/* Byte-level RMA of the Rust library (src/capi/shim.rs).  `call` names the routine in error
 * messages and must be a string literal. */
void gsas_shmem_put_bytes(shmem_ctx_t ctx, void *dest, const void *source, size_t nbytes,
                          int pe, const char *call);
void gsas_shmem_get_bytes(shmem_ctx_t ctx, void *dest, const void *source, size_t nbytes,
                          int pe, const char *call);

#define GSAS_SHIM_LONGDOUBLE(PREFIX)                                                          \
    void PREFIX##longdouble_p(long double *dest, long double value, int pe) {                 \
        gsas_shmem_put_bytes(SHMEM_CTX_DEFAULT, dest, &value, sizeof value, pe,               \
                             "shmem_longdouble_p");                                         \
    }                                                                                         \
    void PREFIX##ctx_longdouble_p(shmem_ctx_t ctx, long double *dest, long double value,      \
                                  int pe) {                                                   \
        gsas_shmem_put_bytes(ctx, dest, &value, sizeof value, pe, "shmem_ctx_longdouble_p"); \
    }                                                                                         \
    long double PREFIX##longdouble_g(const long double *source, int pe) {                     \
        long double value;                                                                    \
        gsas_shmem_get_bytes(SHMEM_CTX_DEFAULT, &value, source, sizeof value, pe,             \
                             "shmem_longdouble_g");                                         \
        return value;                                                                         \
    }                                                                                         \
    long double PREFIX##ctx_longdouble_g(shmem_ctx_t ctx, const long double *source, int pe) { \
        long double value;                                                                    \
        gsas_shmem_get_bytes(ctx, &value, source, sizeof value, pe,                           \
                             "shmem_ctx_longdouble_g");                                     \
        return value;                                                                         \
    }                                                                                         \
    void PREFIX##pcontrol(int level, ...) { (void)level; }

/* One body each, under the profiling name; the standard name is a weak alias (as for the
 * Rust routines), so that a profiling tool's own shmem_X takes precedence in a static link. */
GSAS_SHIM_LONGDOUBLE(pshmem_)
#pragma weak shmem_longdouble_p = pshmem_longdouble_p
#pragma weak shmem_ctx_longdouble_p = pshmem_ctx_longdouble_p
#pragma weak shmem_longdouble_g = pshmem_longdouble_g
#pragma weak shmem_ctx_longdouble_g = pshmem_ctx_longdouble_g
#pragma weak shmem_pcontrol = pshmem_pcontrol
