/*
 * observer.c - the concurrent-observer test: every put lands exactly once.
 *
 * The target of a put waits for the value, reads it, checks the exact sequence number of
 * the round and clears the location, then answers; a put path that writes a byte twice (a
 * memcpy that stores overlapping chunks, a copy repeated by a retransmission) brings an old
 * value back after the clear, and the next round sees a byte that is neither zero nor the
 * new value.  Every byte of every message depends on the round, so a stale byte anywhere is
 * caught; a word-sized message carries the round in both halves.
 *
 * Pairs: PE p talks to PE p ^ (npes / 2) (npes a power of two), so that with the launcher's
 * contiguous blocks per node the pairs cross nodes whenever the job spans two.  In round k
 * the lower PE of a pair sends message k, the upper one waits, checks, clears and echoes
 * it, and the lower one waits, checks and clears the echo.  The collective modes use every
 * PE.
 *
 *   observer [ROUNDS [MODE...]]    ROUNDS default 10000 (OBSERVER_ROUNDS overrides);
 *                                  MODE default: all but the bulk ones, in the order of
 *                                  MODES below.
 *
 * Modes: p (shmem_long_p to the heap), p_static (to a static variable: the data segment),
 * p_ctx (through a created context), put1 (shmem_long_put of 1 element), putn (shmem_int_put
 * of 5), putmem (shmem_putmem of 1..64 bytes, the size cycling with the round), putmem_static
 * (8/16/32/64 bytes into a static array), putmem_4k (4 KiB), iput (shmem_long_iput, stride 2),
 * ibput (shmem_long_ibput of 3 blocks of 2, destination stride 3: the gaps stay 0),
 * put_nbi (shmem_long_put_nbi of 3 + shmem_quiet), put_signal (shmem_putmem_signal, 1..64
 * bytes, signal SET to the round), amo_set, amo_swap (the swap must fetch 0: the target
 * cleared it), bcast (shmem_long_broadcast of 4 elements, root rotating), collect
 * (shmem_long_fcollect and shmem_long_collect into a flag array).
 *
 * The bulk modes (run only when named; issue 25 item 4) move arrays of uint64_t words of
 * 40 KiB to 256 KiB (128 KiB every other round), several packets each between nodes, and
 * check every word with one 8-byte load: a word is either entirely old (0, cleared) or
 * entirely new, never a mix of the two (a word split between two packets, written half by
 * each).  Every byte of a new word is non-zero, so a torn word always shows.
 *   put_bulk: shmem_putmem of the words; the target watches them while they arrive.
 *   get_bulk: shmem_getmem of the peer's words into a cleared symmetric buffer while a
 *             thread of the getting PE watches that buffer (the reply packets land in it);
 *             the source alternates between two arrays, so that a late copy of the
 *             previous round's data shows too.  Needs -pthread.
 *
 * Each wait has a deadline of 60 s; a failure names the mode, the round,
 * the byte and what it held.
 */
#define CTEST_NAME "observer"
#include "ctest.h"

#include <pthread.h>
#include <sched.h>

enum { MAXMSG = 4096, NELEM_BCAST = 4, NELEM_COLLECT = 2 };
/* The largest bulk transfer, in bytes and in words. */
enum { BULK_MAX = 256 * 1024, BULK_WORDS = BULK_MAX / 8 };

static int me, npes, peer, lower;
static long rounds;
static const char *mode;

static long *word;                 /* heap: the long of the word modes */
static long static_word;           /* data segment */
static unsigned char static_buf[64] __attribute__((aligned(8)));
static unsigned char *msg;         /* heap: MAXMSG bytes */
static long *arr;                  /* heap: 8 longs (iput, put_nbi) */
static uint64_t *sig;              /* heap: the signal word */
static long *bdest, *bsrc;         /* heap: broadcast */
static long *cdest, *csrc;         /* heap: collect, flag array of npes * NELEM_COLLECT */
static int *dummy;                 /* heap: polled by shmem_int_test for progress */
static uint64_t *bulk;             /* heap: put_bulk's destination, get_bulk's two sources */
static uint64_t *bget;             /* heap: get_bulk's destination */
static shmem_ctx_t ctx;

/* The word of round k: the round in both halves. */
static long wval(long k) { return (long)(((unsigned long)k << 32) | (unsigned long)k); }

/* Byte i of the message of round k: never 0, different from round k - 1 and k + 1. */
static unsigned char pat(long k, size_t i) { return (unsigned char)((k * 7 + (long)i * 13) % 255 + 1); }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* One step of a polling wait that read `weight` words: a tight poll most of the time (the
 * window in which a second store can bring an old value back is short), library progress
 * every 16 words read, and the core for the others every 1024 (jobs with more PEs than
 * cores). */
static void poll_step(unsigned long *spins, unsigned long weight, double *t0, const char *what, long k) {
    unsigned long before = *spins;
    *spins += weight;
    if (*spins / 16 != before / 16)
        (void)shmem_int_test(dummy, SHMEM_CMP_EQ, 1);
    if (*spins / 1024 != before / 1024) {
        sched_yield();
        if (*t0 == 0)
            *t0 = now();
        else
            CHECK(now() - *t0 < 60.0, "%s round %ld: nothing arrived for 60 s", what, k);
    }
}

/* Waits until the n bytes at p hold the message of round k, checking every byte seen on
 * the way (a byte is 0 or pat(k, i), nothing else), then clears them. */
static void await_bytes(volatile unsigned char *p, size_t n, long k) {
    unsigned long spins = 0;
    double t0 = 0;
    for (;;) {
        size_t have = 0;
        for (size_t i = 0; i < n; i++) {
            unsigned char b = p[i];
            if (b == 0)
                continue;
            CHECK(b == pat(k, i), "%s round %ld (%zu bytes): byte %zu is %u, expected 0 or %u%s", mode,
                  k, n, i, b, pat(k, i), b == pat(k - 1, i) ? " (the previous round's value came back)" : "");
            have++;
        }
        if (have == n)
            break;
        poll_step(&spins, 1 + n / 8, &t0, mode, k);
    }
    for (size_t i = 0; i < n; i++)
        p[i] = 0;
}

/* Waits for the word of round k at w (a symmetric long), checks it exactly, clears it. */
static void await_word(long *w, long k) {
    shmem_long_wait_until(w, SHMEM_CMP_NE, 0);
    long v = *(volatile long *)w;
    CHECK(v == wval(k), "%s round %ld: got %#lx, expected %#lx%s", mode, k, (unsigned long)v,
          (unsigned long)wval(k), v == wval(k - 1) ? " (the previous round's value came back)" : "");
    *(volatile long *)w = 0;
}

static void fill(unsigned char *b, size_t n, long k) {
    for (size_t i = 0; i < n; i++)
        b[i] = pat(k, i);
}

/* One exchange of round k: `send` puts message k to the peer, `await` checks and clears the
 * local copy; the lower PE sends first, the upper PE echoes. */
typedef void (*send_fn)(long k);
typedef void (*await_fn)(long k);

static void exchange(send_fn send, await_fn await_msg) {
    for (long k = 1; k <= rounds; k++) {
        if (lower) {
            send(k);
            await_msg(k);
        } else {
            await_msg(k);
            send(k);
        }
    }
}

/* --- the word modes ----------------------------------------------------------------- */
static void send_p(long k) { shmem_long_p(word, wval(k), peer); }
static void await_heap_word(long k) { await_word(word, k); }
static void send_p_static(long k) { shmem_long_p(&static_word, wval(k), peer); }
static void await_static_word(long k) { await_word(&static_word, k); }
static void send_p_ctx(long k) { shmem_ctx_long_p(ctx, word, wval(k), peer); }
static void send_put1(long k) {
    long v = wval(k);
    shmem_long_put(word, &v, 1, peer);
}
static void send_amo_set(long k) { shmem_long_atomic_set(word, wval(k), peer); }
static void send_amo_swap(long k) {
    long old = shmem_long_atomic_swap(word, wval(k), peer);
    CHECK(old == 0, "amo_swap round %ld: fetched %#lx, expected 0 (cleared by the target)", k,
          (unsigned long)old);
}

/* --- the byte modes ----------------------------------------------------------------- */
static size_t sweep_len(long k) { return (size_t)((k - 1) % 64) + 1; }

static void send_bytes(void *dest, size_t n, long k) {
    unsigned char src[MAXMSG];
    fill(src, n, k);
    shmem_putmem(dest, src, n, peer);
}
static void send_putmem(long k) { send_bytes(msg, sweep_len(k), k); }
static void await_putmem(long k) { await_bytes(msg, sweep_len(k), k); }
static size_t static_len(long k) { return (size_t)8 << (k % 4); }
static void send_putmem_static(long k) { send_bytes(static_buf, static_len(k), k); }
static void await_putmem_static(long k) { await_bytes(static_buf, static_len(k), k); }
static void send_putmem_4k(long k) { send_bytes(msg, MAXMSG, k); }
static void await_putmem_4k(long k) { await_bytes(msg, MAXMSG, k); }
static void send_putn(long k) {
    int src[5];
    fill((unsigned char *)src, sizeof src, k);
    shmem_int_put((int *)msg, src, 5, peer);
}
static void await_putn(long k) { await_bytes(msg, 5 * sizeof(int), k); }

/* put_signal: data of 1..64 bytes, then the signal SET to k. */
static void send_put_signal(long k) {
    unsigned char src[64];
    size_t n = sweep_len(k);
    fill(src, n, k);
    shmem_putmem_signal(msg, src, n, sig, (uint64_t)k, SHMEM_SIGNAL_SET, peer);
}
static void await_put_signal(long k) {
    uint64_t s = shmem_signal_wait_until(sig, SHMEM_CMP_NE, 0);
    CHECK(s == (uint64_t)k, "put_signal round %ld: signal %llu, expected %ld%s", k, (unsigned long long)s,
          k, s == (uint64_t)(k - 1) ? " (the previous round's signal came back)" : "");
    /* The data precedes the signal: it must all be there. */
    size_t n = sweep_len(k);
    for (size_t i = 0; i < n; i++)
        CHECK(msg[i] == pat(k, i), "put_signal round %ld: byte %zu of %zu is %u after the signal, expected %u",
              k, i, n, msg[i], pat(k, i));
    await_bytes(msg, n, k);
    *(volatile uint64_t *)sig = 0;
}

/* --- strided and non-blocking ------------------------------------------------------- */
static void send_iput(long k) {
    long src[4];
    for (int i = 0; i < 4; i++)
        src[i] = wval(k) + i;
    shmem_long_iput(arr, src, 2, 1, 4, peer);
}
static void await_iput(long k) {
    /* The last element comes last from every path; wait for it, then check all. */
    shmem_long_wait_until(&arr[6], SHMEM_CMP_NE, 0);
    unsigned long spins = 0;
    double t0 = 0;
    for (int i = 0; i < 8; i++) {
        volatile long *e = &arr[i];
        if (i % 2) {
            CHECK(*e == 0, "iput round %ld: the gap element %d was written (%#lx)", k, i, (unsigned long)*e);
            continue;
        }
        while (*e == 0)
            poll_step(&spins, 1, &t0, "iput", k);
        CHECK(*e == wval(k) + i / 2, "iput round %ld: element %d is %#lx, expected %#lx", k, i,
              (unsigned long)*e, (unsigned long)(wval(k) + i / 2));
        *e = 0;
    }
}
static void send_ibput(long k) {
    long src[6];
    for (int i = 0; i < 6; i++)
        src[i] = wval(k) + i;
    shmem_long_ibput(arr, src, 3, 2, 2, 3, peer);
}
static void await_ibput(long k) {
    /* Blocks at 0-1, 3-4, 6-7; the last element comes last from every path. */
    shmem_long_wait_until(&arr[7], SHMEM_CMP_NE, 0);
    unsigned long spins = 0;
    double t0 = 0;
    for (int i = 0; i < 8; i++) {
        volatile long *e = &arr[i];
        if (i % 3 == 2) {
            CHECK(*e == 0, "ibput round %ld: the gap element %d was written (%#lx)", k, i,
                  (unsigned long)*e);
            continue;
        }
        long want = wval(k) + (i / 3) * 2 + i % 3;
        while (*e == 0)
            poll_step(&spins, 1, &t0, "ibput", k);
        CHECK(*e == want, "ibput round %ld: element %d is %#lx, expected %#lx", k, i,
              (unsigned long)*e, (unsigned long)want);
        *e = 0;
    }
}
static void send_put_nbi(long k) {
    long src[3] = {wval(k), wval(k) + 1, wval(k) + 2};
    shmem_long_put_nbi(arr, src, 3, peer);
    shmem_quiet();
}
static void await_put_nbi(long k) {
    shmem_long_wait_until(&arr[2], SHMEM_CMP_NE, 0);
    for (int i = 0; i < 3; i++) {
        unsigned long spins = 0;
        double t0 = 0;
        volatile long *e = &arr[i];
        while (*e == 0)
            poll_step(&spins, 1, &t0, "put_nbi", k);
        CHECK(*e == wval(k) + i, "put_nbi round %ld: element %d is %#lx, expected %#lx", k, i,
              (unsigned long)*e, (unsigned long)(wval(k) + i));
        *e = 0;
    }
}

/* --- bulk: words split between packets ---------------------------------------------- */
/* Bytes of the bulk transfer of round k: 128 KiB every other round, else 40 KiB + 8,
 * 96 KiB + 8 or 256 KiB - 8 (all whole words, several packets at every MTU). */
static size_t bulk_len(long k) {
    static const size_t sizes[] = {131072, 40968, 131072, 98312, 131072, 262136};
    return sizes[(size_t)(k - 1) % (sizeof sizes / sizeof sizes[0])];
}

/* Word i of round k: every byte non-zero (a word that is partly 0 is torn), different
 * from word i of the rounds around it. */
static uint64_t bword(long k, size_t i) {
    uint64_t z = ((uint64_t)k << 32) + (uint64_t)i + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (z ^ (z >> 31)) | 0x0101010101010101ull;
}

static void bwords(uint64_t *w, size_t n, long k) {
    for (size_t i = 0; i < n; i++)
        w[i] = bword(k, i);
}

/* Which bytes of v are those of `want` (N), 0 (o) or neither (?), lowest byte first. */
static const char *bytes_of(uint64_t v, uint64_t want, char out[9]) {
    for (int j = 0; j < 8; j++) {
        unsigned b = (unsigned)(v >> (8 * j)) & 0xff, w = (unsigned)(want >> (8 * j)) & 0xff;
        out[j] = b == w ? 'N' : b == 0 ? 'o' : '?';
    }
    out[8] = 0;
    return out;
}

/* Checks one word seen at word i of a bulk destination: 0 or exactly `want`. */
static inline void check_word(const char *what, long k, size_t n, size_t i, uint64_t v,
                              uint64_t want, uint64_t previous) {
    char b[9];
    if (v != 0 && v != want)
        CHECK(0, "%s round %ld (%zu bytes): word %zu (bytes %zu..%zu) is %#llx, expected 0 or %#llx: "
                 "bytes (lowest first) %s (N new, o old, ? neither)%s",
              what, k, n, i, 8 * i, 8 * i + 7, (unsigned long long)v, (unsigned long long)want,
              bytes_of(v, want, b), v == previous ? " (the previous round's value came back)" : "");
}

static uint64_t bsrc_words[BULK_WORDS], bwant[BULK_WORDS], bprev[BULK_WORDS];

static void send_put_bulk(long k) {
    size_t n = bulk_len(k);
    bwords(bsrc_words, n / 8, k);
    shmem_putmem(bulk, bsrc_words, n, peer);
}

/* One pass of a watch over the nw words at w of round k while they land, every word read
 * with one 8-byte load and checked by check_word: first the frontier (from word lo, the
 * first not yet seen new, on while the words are new: where in-order packets land, so
 * that the short time in which a word split between two packets is half written is
 * seen), then the FRONT words past it, and with `full` every word from the frontier on
 * (packets that arrive out of order).  Returns the new frontier (nw: all new). */
enum { FRONT = 64, FULL_EVERY = 1024 };
static size_t watch_pass(const char *what, long k, const uint64_t *w, size_t nw,
                         const uint64_t *want, const uint64_t *prev, size_t lo, int full) {
    for (; lo < nw; lo++) {
        uint64_t v = __atomic_load_n(&w[lo], __ATOMIC_RELAXED);
        if (v != want[lo]) {
            check_word(what, k, nw * 8, lo, v, want[lo], prev[lo]);
            break;
        }
    }
    size_t end = full || nw - lo < FRONT ? nw : lo + FRONT;
    for (size_t i = lo; i < end; i++)
        check_word(what, k, nw * 8, i, __atomic_load_n(&w[i], __ATOMIC_RELAXED), want[i], prev[i]);
    return lo;
}

/* Watches the words of round k while they arrive until all are there; then checks and
 * clears them. */
static void await_put_bulk(long k) {
    size_t n = bulk_len(k), nw = n / 8, lo = 0;
    bwords(bwant, nw, k);
    bwords(bprev, nw, k - 1);
    unsigned long spins = 0, pass = 0;
    double t0 = 0;
    while ((lo = watch_pass(mode, k, bulk, nw, bwant, bprev, lo, ++pass % FULL_EVERY == 0)) < nw)
        if (pass % FULL_EVERY == 0)
            poll_step(&spins, 1024, &t0, mode, k);
    for (size_t i = 0; i < nw; i++) {
        uint64_t v = __atomic_load_n(&bulk[i], __ATOMIC_RELAXED);
        CHECK(v == bwant[i], "put_bulk round %ld (%zu bytes): word %zu is %#llx once all arrived, expected %#llx",
              k, n, i, (unsigned long long)v, (unsigned long long)bwant[i]);
        __atomic_store_n(&bulk[i], 0, __ATOMIC_RELAXED);
    }
}

/* get_bulk's observer thread and the main thread: round `obs_round` starts when the main
 * thread sets it (the buffer cleared, `obs_words`, `obs_want` and `obs_prev` set); the
 * observer watches until it has seen `obs_stop` == the round (the get returned) before a
 * pass, makes that pass a full one, then sets `obs_done`.  obs_round -1 ends the thread. */
static long obs_round, obs_stop, obs_done;
static size_t obs_words;
static const uint64_t *obs_want, *obs_prev;

static void *get_observer(void *arg) {
    (void)arg;
    const char *what = "get_bulk (observer thread)";
    long seen = 0;
    for (;;) {
        long k = __atomic_load_n(&obs_round, __ATOMIC_ACQUIRE);
        if (k < 0)
            return NULL;
        if (k == seen) {
            sched_yield();
            continue;
        }
        size_t nw = obs_words, lo = 0;
        for (unsigned long pass = 1;; pass++) {
            int stop = __atomic_load_n(&obs_stop, __ATOMIC_ACQUIRE) == k;
            int full = stop || pass % FULL_EVERY == 0;
            lo = watch_pass(what, k, bget, nw, obs_want, obs_prev, lo, full);
            if (stop)
                break;
            if (full)
                sched_yield();
        }
        seen = k;
        __atomic_store_n(&obs_done, k, __ATOMIC_RELEASE);
    }
}

static void run_get_bulk(void) {
    /* Source r (0 or 1) of every PE is bulk + r * BULK_WORDS, holding the words of round
     * 1000 + r; round k reads source k % 2. */
    static uint64_t want[2][BULK_WORDS];
    for (int r = 0; r < 2; r++) {
        bwords(want[r], BULK_WORDS, 1000 + r);
        for (size_t i = 0; i < BULK_WORDS; i++)
            bulk[(size_t)r * BULK_WORDS + i] = want[r][i];
    }
    memset(bget, 0, BULK_MAX);
    shmem_barrier_all();
    pthread_t th;
    CHECK(pthread_create(&th, NULL, get_observer, NULL) == 0, "get_bulk: pthread_create failed");
    for (long k = 1; k <= rounds; k++) {
        size_t n = bulk_len(k), nw = n / 8;
        int r = (int)(k % 2);
        obs_words = nw;
        obs_want = want[r];
        obs_prev = want[1 - r];
        __atomic_store_n(&obs_round, k, __ATOMIC_RELEASE);
        shmem_getmem(bget, bulk + (size_t)r * BULK_WORDS, n, peer);
        __atomic_store_n(&obs_stop, k, __ATOMIC_RELEASE);
        unsigned long spins = 0;
        double t0 = 0;
        while (__atomic_load_n(&obs_done, __ATOMIC_ACQUIRE) != k)
            poll_step(&spins, 1024, &t0, "get_bulk (waiting for the observer)", k);
        for (size_t i = 0; i < nw; i++) {
            CHECK(bget[i] == want[r][i], "get_bulk round %ld (%zu bytes): word %zu is %#llx after the get, expected %#llx",
                  k, n, i, (unsigned long long)bget[i], (unsigned long long)want[r][i]);
            bget[i] = 0;
        }
    }
    __atomic_store_n(&obs_round, -1, __ATOMIC_RELEASE);
    CHECK(pthread_join(th, NULL) == 0, "get_bulk: pthread_join failed");
}

/* --- collectives: every PE ---------------------------------------------------------- */
/* A collective's destination is checked at return and cleared; a barrier makes every
 * destination ready for the next round (the caller's duty, OpenSHMEM 1.5 §9.9.7), and at
 * the start of the next round it must still be zero or already hold that round's data. */
static void check_clear_longs(long *d, size_t n, const long *want, long k, int cleared_only) {
    for (size_t i = 0; i < n; i++) {
        long v = ((volatile long *)d)[i];
        if (cleared_only) {
            CHECK(v == 0 || v == want[i], "%s before round %ld: element %zu is %#lx, neither 0 nor the new %#lx",
                  mode, k, i, (unsigned long)v, (unsigned long)want[i]);
        } else {
            CHECK(v == want[i], "%s round %ld: element %zu is %#lx, expected %#lx", mode, k, i,
                  (unsigned long)v, (unsigned long)want[i]);
        }
    }
}

static void run_bcast(void) {
    long want[NELEM_BCAST];
    for (long k = 1; k <= rounds; k++) {
        int root = (int)(k % npes);
        for (int i = 0; i < NELEM_BCAST; i++)
            want[i] = wval(k) + i;
        check_clear_longs(bdest, NELEM_BCAST, want, k, 1);
        if (me == root)
            for (int i = 0; i < NELEM_BCAST; i++)
                bsrc[i] = want[i];
        CHECK(shmem_long_broadcast(SHMEM_TEAM_WORLD, bdest, bsrc, NELEM_BCAST, root) == 0,
              "bcast round %ld: shmem_long_broadcast failed", k);
        check_clear_longs(bdest, NELEM_BCAST, want, k, 0);
        for (int i = 0; i < NELEM_BCAST; i++)
            ((volatile long *)bdest)[i] = 0;
        shmem_barrier_all();
    }
}

static void run_collect(void) {
    size_t total = (size_t)npes * NELEM_COLLECT;
    long *want = malloc(total * sizeof(long));
    CHECK(want != NULL, "collect: out of memory");
    for (long k = 1; k <= rounds; k++) {
        for (size_t i = 0; i < total; i++)
            want[i] = wval(k) + (long)i;
        check_clear_longs(cdest, total, want, k, 1);
        for (int i = 0; i < NELEM_COLLECT; i++)
            csrc[i] = wval(k) + me * NELEM_COLLECT + i;
        int rc = (k % 2) ? shmem_long_fcollect(SHMEM_TEAM_WORLD, cdest, csrc, NELEM_COLLECT)
                         : shmem_long_collect(SHMEM_TEAM_WORLD, cdest, csrc, NELEM_COLLECT);
        CHECK(rc == 0, "collect round %ld: the collective failed (%d)", k, rc);
        check_clear_longs(cdest, total, want, k, 0);
        for (size_t i = 0; i < total; i++)
            ((volatile long *)cdest)[i] = 0;
        shmem_barrier_all();
    }
    free(want);
}

/* --- the table ---------------------------------------------------------------------- */
struct mode {
    const char *name;
    send_fn send;
    await_fn await_msg;
    void (*run)(void); /* collectives, get_bulk */
    int named_only;    /* not in the default list: the bulk modes */
};

static const struct mode MODES[] = {
    {"p", send_p, await_heap_word, NULL, 0},
    {"p_static", send_p_static, await_static_word, NULL, 0},
    {"p_ctx", send_p_ctx, await_heap_word, NULL, 0},
    {"put1", send_put1, await_heap_word, NULL, 0},
    {"putn", send_putn, await_putn, NULL, 0},
    {"putmem", send_putmem, await_putmem, NULL, 0},
    {"putmem_static", send_putmem_static, await_putmem_static, NULL, 0},
    {"putmem_4k", send_putmem_4k, await_putmem_4k, NULL, 0},
    {"iput", send_iput, await_iput, NULL, 0},
    {"ibput", send_ibput, await_ibput, NULL, 0},
    {"put_nbi", send_put_nbi, await_put_nbi, NULL, 0},
    {"put_signal", send_put_signal, await_put_signal, NULL, 0},
    {"amo_set", send_amo_set, await_heap_word, NULL, 0},
    {"amo_swap", send_amo_swap, await_heap_word, NULL, 0},
    {"bcast", NULL, NULL, run_bcast, 0},
    {"collect", NULL, NULL, run_collect, 0},
    {"put_bulk", send_put_bulk, await_put_bulk, NULL, 1},
    {"get_bulk", NULL, NULL, run_get_bulk, 1},
};
enum { NMODES = sizeof MODES / sizeof MODES[0] };

static void run_mode(const struct mode *m) {
    mode = m->name;
    double t = now();
    if (m->run)
        m->run();
    else
        exchange(m->send, m->await_msg);
    shmem_barrier_all();
    if (me == 0)
        printf("observer: %-13s %ld rounds, %d PEs: ok (%.2f s)\n", m->name, rounds, npes, now() - t);
}

int main(int argc, char **argv) {
    shmem_init();
    ctest_begin();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    CHECK(npes >= 2 && (npes & (npes - 1)) == 0, "needs a power-of-two number of PEs, not %d", npes);
    peer = me ^ (npes / 2);
    lower = me < peer;
    rounds = argc > 1 ? atol(argv[1]) : 10000;
    const char *env = getenv("OBSERVER_ROUNDS");
    if (env && *env)
        rounds = atol(env);
    CHECK(rounds > 0, "ROUNDS must be a positive number");

    word = shmem_calloc(1, sizeof(long));
    msg = shmem_calloc(MAXMSG, 1);
    arr = shmem_calloc(8, sizeof(long));
    sig = shmem_calloc(1, sizeof(uint64_t));
    bdest = shmem_calloc(NELEM_BCAST, sizeof(long));
    bsrc = shmem_calloc(NELEM_BCAST, sizeof(long));
    cdest = shmem_calloc((size_t)npes * NELEM_COLLECT, sizeof(long));
    csrc = shmem_calloc(NELEM_COLLECT, sizeof(long));
    dummy = shmem_calloc(1, sizeof(int));
    bulk = shmem_calloc(2 * BULK_WORDS, sizeof(uint64_t));
    bget = shmem_calloc(BULK_WORDS, sizeof(uint64_t));
    CHECK(word && msg && arr && sig && bdest && bsrc && cdest && csrc && dummy && bulk && bget,
          "shmem_calloc failed");
    CHECK(shmem_ctx_create(0, &ctx) == 0, "shmem_ctx_create failed");
    shmem_barrier_all();

    for (int a = 2; a < argc; a++) {
        int known = 0;
        for (int i = 0; i < NMODES; i++)
            known |= strcmp(argv[a], MODES[i].name) == 0;
        CHECK(known, "unknown mode '%s'", argv[a]);
    }
    int ran = 0;
    for (int i = 0; i < NMODES; i++) {
        int wanted = argc <= 2 && !MODES[i].named_only;
        for (int a = 2; a < argc; a++)
            wanted |= strcmp(argv[a], MODES[i].name) == 0;
        if (wanted) {
            run_mode(&MODES[i]);
            ran++;
        }
    }
    CHECK(ran > 0, "no mode ran");
    shmem_ctx_destroy(ctx);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
