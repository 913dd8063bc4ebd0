// cxx_program.cpp - a C++ program that includes <shmem.h> (through ctest.h, whose helpers
// compile as C++ too) and is built with oshc++: RAII
// around symmetric allocations, templates over the typed C routines, std::vector buffers,
// exceptions and static objects with constructors (they run before shmem_init and live in
// the remapped data segment), contexts, AMOs and point-to-point synchronisation.  Checks
// its own results and exits non-zero with a message on failure.

#define CTEST_NAME "cxx_program"
#include "ctest.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

int me = -1;
int npes = 0;

[[noreturn]] void fail(const std::string &what) {
    std::fflush(stdout);
    std::fprintf(stderr, "cxx_program: PE %d: FAILED: %s\n", me, what.c_str());
    std::exit(1);
}

void check(bool ok, const std::string &what) {
    if (!ok)
        fail(what);
}

// A symmetric array that frees itself (collectively) at the end of its scope.
template <typename T> class SymArray {
  public:
    explicit SymArray(std::size_t n) : n_(n), p_(static_cast<T *>(shmem_calloc(n, sizeof(T)))) {
        if (p_ == nullptr)
            throw std::runtime_error("shmem_calloc failed");
    }
    ~SymArray() { shmem_free(p_); }
    SymArray(const SymArray &) = delete;
    SymArray &operator=(const SymArray &) = delete;
    T *get() const { return p_; }
    T &operator[](std::size_t i) { return p_[i]; }
    std::size_t size() const { return n_; }

  private:
    std::size_t n_;
    T *p_;
};

// The typed C routines behind one overloaded C++ name.
void put(long *d, const long *s, std::size_t n, int pe) { shmem_long_put(d, s, n, pe); }
void put(double *d, const double *s, std::size_t n, int pe) { shmem_double_put(d, s, n, pe); }
void put(short *d, const short *s, std::size_t n, int pe) { shmem_short_put(d, s, n, pe); }
void get(long *d, const long *s, std::size_t n, int pe) { shmem_long_get(d, s, n, pe); }
void get(double *d, const double *s, std::size_t n, int pe) { shmem_double_get(d, s, n, pe); }
void get(short *d, const short *s, std::size_t n, int pe) { shmem_short_get(d, s, n, pe); }

// The right neighbour's data arrives in the own array; the own data is read back from it.
template <typename T> void ring_exchange(const char *name) {
    const int right = (me + 1) % npes, left = (me + npes - 1) % npes;
    SymArray<T> a(64);
    std::vector<T> src(64), back(64);
    for (std::size_t i = 0; i < src.size(); i++)
        src[i] = static_cast<T>(me * 100 + static_cast<int>(i));
    ctest_barrier();
    put(a.get(), src.data(), src.size(), right);
    ctest_barrier();
    for (std::size_t i = 0; i < a.size(); i++)
        check(a[i] == static_cast<T>(left * 100 + static_cast<int>(i)),
              std::string(name) + ": wrong element after put");
    get(back.data(), a.get(), back.size(), right);
    check(back == src, std::string(name) + ": get did not return what was put");
    ctest_barrier();
}

// A static object with a constructor: initialised before main, kept through shmem_init's
// remap of the data segment.
struct Registry {
    Registry() : magic(0x5eed), hits(0) {}
    long magic;
    long hits;
};
Registry registry;

} // namespace

int main() {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    check(registry.magic == 0x5eed, "a static object lost its constructor's value");
    try {
        ring_exchange<long>("long");
        ring_exchange<double>("double");
        ring_exchange<short>("short");

        // Static data member as an AMO target on PE 0.
        shmem_long_atomic_add(&registry.hits, 2, 0);
        ctest_barrier();
        check(shmem_long_atomic_fetch(&registry.hits, 0) == 2L * npes,
              "AMO on a static object: wrong total");

        // A context owned by a scope.
        shmem_ctx_t ctx = SHMEM_CTX_INVALID;
        check(shmem_ctx_create(SHMEM_CTX_PRIVATE, &ctx) == 0, "shmem_ctx_create failed");
        SymArray<std::uint64_t> flag(1);
        SymArray<int> data(16);
        ctest_barrier();
        const int right = (me + 1) % npes, left = (me + npes - 1) % npes;
        std::vector<int> v(16, me + 7);
        shmem_ctx_int_put_signal(ctx, data.get(), v.data(), v.size(), flag.get(), 1,
                                 SHMEM_SIGNAL_SET, right);
        shmem_ctx_quiet(ctx);
        shmem_uint64_wait_until(flag.get(), SHMEM_CMP_EQ, 1);
        for (std::size_t i = 0; i < data.size(); i++)
            check(data[i] == left + 7, "put_signal data");
        shmem_ctx_destroy(ctx);
        ctest_barrier();
        // Exceptions pass through code that called the library.
        bool caught = false;
        try {
            SymArray<char> huge(std::size_t(1) << 46);
        } catch (const std::runtime_error &) {
            caught = true;
        }
        check(caught, "a failed allocation did not throw");
    } catch (const std::exception &e) {
        fail(std::string("exception: ") + e.what());
    }
    ctest_barrier();
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
