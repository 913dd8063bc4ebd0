/*
 * longdouble.c - the long double arithmetic of the reductions of libshmem.
 *
 * What it is
 *   - gsas_shmem_longdouble_reduce(op, acc, x, n): acc[i] = acc[i] op x[i] for i < n on
 *     long double (x87 80-bit in 16 bytes on x86_64, IEEE binary128 on aarch64, which gcc
 *     implements with libgcc's soft-float routines).  The Rust reductions
 *     (src/coll/ops.rs) call it for the longdouble rows of shmem_longdouble_{max,min,sum,
 *     prod}_reduce and the _to_all forms; Rust has no long double type.  The operation codes
 *     are those of the Rust enum Op: 3 MAX, 4 MIN, 5 SUM, 6 PROD.  MAX and MIN keep the
 *     accumulated value unless the other one compares greater (less), as the Rust kernels
 *     of float and double do.  Returns 0, or -1 for another code (nothing is written).
 *   - gsas_shmem_longdouble_from_double / _to_double: conversions through the C compiler,
 *     for the tests of the reductions, which build long double values without a Rust type.
 *   The arrays may be unaligned: elements are moved with memcpy.
 *
 * What it is not
 *   No communication and no checks: the Rust side validates the operation and the buffers.
 *
 * Thread safety
 *   Pure functions.
 */
#include <stddef.h>
#include <string.h>

int gsas_shmem_longdouble_reduce(int op, void *acc, const void *x, size_t n);
void gsas_shmem_longdouble_from_double(double v, void *out);
double gsas_shmem_longdouble_to_double(const void *v);

enum { OP_MAX = 3, OP_MIN = 4, OP_SUM = 5, OP_PROD = 6 };

int gsas_shmem_longdouble_reduce(int op, void *acc, const void *x, size_t n) {
    if (op != OP_MAX && op != OP_MIN && op != OP_SUM && op != OP_PROD)
        return -1;
    unsigned char *a = acc;
    const unsigned char *b = x;
    for (size_t i = 0; i < n; i++) {
        long double p, q, r;
        memcpy(&p, a + i * sizeof p, sizeof p);
        memcpy(&q, b + i * sizeof q, sizeof q);
        switch (op) {
        case OP_MAX: r = q > p ? q : p; break;
        case OP_MIN: r = q < p ? q : p; break;
        case OP_SUM: r = p + q; break;
        default: r = p * q; break;
        }
        memcpy(a + i * sizeof r, &r, sizeof r);
    }
    return 0;
}

void gsas_shmem_longdouble_from_double(double v, void *out) {
    long double l = v;
    memset(out, 0, sizeof l);
    memcpy(out, &l, sizeof l);
}

double gsas_shmem_longdouble_to_double(const void *v) {
    long double l;
    memcpy(&l, v, sizeof l);
    return (double)l;
}
