// cxx_usage.cpp - C++ use of the gsas OpenSHMEM headers (check.sh builds it as C++11, C++14
// and C++17 and runs it against the generated stubs).  C++ has no generics: programs call
// the typed C names.  Each call checks, through the stubs, which routine it reached.
#include <shmem.h>
#include <shmemx.h>
#include <pshmem.h>
#include <mpp/shmem.h>
#include <mpp/shmemx.h>

#include <complex>
#include <cstdio>
#include <cstring>

#include "stub_record.h"

static_assert(SHMEM_MAJOR_VERSION == 1 && SHMEM_MINOR_VERSION == 6, "OpenSHMEM 1.6");
static_assert(SHMEM_CMP_EQ != SHMEM_CMP_NE, "distinct comparison operators");
static_assert(sizeof(SHMEM_VENDOR_STRING) - 1 <= SHMEM_MAX_NAME_LEN, "vendor string length");

// Handles are address constants, usable in static initialization.
static shmem_ctx_t default_ctx = SHMEM_CTX_DEFAULT;
static shmem_team_t world = SHMEM_TEAM_WORLD;
static long psync[SHMEM_BARRIER_SYNC_SIZE];

static int checks = 0;
static int failures = 0;

static void expect(const char *want, int line)
{
    ++checks;
    if (gsas_stub_last == nullptr || std::strcmp(gsas_stub_last, want) != 0) {
        ++failures;
        std::fprintf(stderr, "cxx_usage.cpp:%d: reached %s, expected %s\n", line,
                     gsas_stub_last != nullptr ? gsas_stub_last : "nothing", want);
    }
}
#define EXPECT(want) expect(want, __LINE__)

// shmem_global_exit is [[noreturn]]: with -Werror this function would not compile if it
// were not (-Winvalid-noreturn).
[[noreturn]] static void fail_fast(int code)
{
    shmem_global_exit(code);
}

int main(int argc, char **)
{
    long dst[4] = {0, 0, 0, 0};
    const long src[4] = {1, 2, 3, 4};
    shmem_long_put(dst, src, 4, 0);
    EXPECT("shmem_long_put");
    shmem_ctx_long_put(default_ctx, dst, src, 4, 0);
    EXPECT("shmem_ctx_long_put");
    (void)shmem_int64_g(reinterpret_cast<const int64_t *>(src), 0);
    EXPECT("shmem_int64_g");
    (void)shmem_ulonglong_atomic_fetch_xor(reinterpret_cast<unsigned long long *>(dst), 1ULL, 0);
    EXPECT("shmem_ulonglong_atomic_fetch_xor");

    // Complex reductions take double _Complex / float _Complex, which g++ accepts; a
    // std::complex array has the same layout.
    double _Complex zd[2] = {0, 0};
    (void)shmem_complexd_sum_reduce(world, zd, zd, 2);
    EXPECT("shmem_complexd_sum_reduce");
    std::complex<float> zf[2];
    (void)shmem_complexf_prod_reduce(SHMEM_TEAM_WORLD, reinterpret_cast<float _Complex *>(zf),
                                     reinterpret_cast<const float _Complex *>(zf), 2);
    EXPECT("shmem_complexf_prod_reduce");
    long double ld[2] = {0, 0};
    (void)shmem_longdouble_max_reduce(SHMEM_TEAM_SHARED, ld, ld, 2);
    EXPECT("shmem_longdouble_max_reduce");

    // The deprecated long routines that share a name with a C11 generic are plain C
    // routines in C++.
    long flag = 0;
    shmem_wait_until(&flag, SHMEM_CMP_EQ, 0);
    EXPECT("shmem_wait_until");
    shmem_sync(0, 0, 1, psync);
    EXPECT("shmem_sync");
    (void)shmem_team_sync(SHMEM_TEAM_WORLD);
    EXPECT("shmem_team_sync");

    // Profiling names, legacy names, variadic pcontrol.
    pshmem_long_put(dst, src, 4, 0);
    EXPECT("pshmem_long_put");
    (void)p_my_pe();
    EXPECT("p_my_pe");
    shmem_pcontrol(1, "region");
    EXPECT("shmem_pcontrol");

    shmem_ctx_t ctx = SHMEM_CTX_INVALID;
    (void)shmem_ctx_create(SHMEM_CTX_PRIVATE | SHMEM_CTX_NOSTORE, &ctx);
    EXPECT("shmem_ctx_create");
    shmem_team_t team = SHMEM_TEAM_INVALID;
    shmem_team_config_t config = {GSAS_VERSION_MAJOR};
    (void)shmem_team_split_strided(world, 0, 1, 1, &config, SHMEM_TEAM_NUM_CONTEXTS, &team);
    EXPECT("shmem_team_split_strided");

    if (argc > 1000) {
        fail_fast(3);
    }
    std::printf("%d C++ checks, %d failures\n", checks, failures);
    return failures != 0 ? 1 : 0;
}
