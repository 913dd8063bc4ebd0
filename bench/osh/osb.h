/*
 * osb.h - the measuring half shared by the OpenSHMEM benchmark programs (osb_*.c).
 *
 * Plain OpenSHMEM 1.4 API (1.5 features behind OSB_HAVE_15), so that any implementation
 * builds the programs with its own oshcc.  Method (OSU style): a warm-up, then `batches`
 * timed batches of operations (as many as fill about --batch-ms, PE 0 decides; at most
 * `iters`, fewer for large messages); a figure is the median over the batches of the time
 * per operation, with the fastest and the slowest batch beside it (the spread).
 *
 * Output, on PE 0 only: a header of "# " lines (the program, the implementation and its
 * OpenSHMEM version, the PEs, the run's kind, the columns; OSU style), then one line per
 * figure, tab-separated, for scripts/bench:
 *   OSB <benchmark> <family> <size-bytes> <pes> <unit> <median> <min> <max>
 *   OSB_SKIP <benchmark> <reason>
 * A program that finds a wrong result prints "OSB_ERROR ..." and exits non-zero.
 * --help prints the options and this format and exits (no OpenSHMEM call).
 */
#ifndef OSB_H
#define OSB_H

#define _GNU_SOURCE
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if SHMEM_MAJOR_VERSION > 1 || (SHMEM_MAJOR_VERSION == 1 && SHMEM_MINOR_VERSION >= 5)
#define OSB_HAVE_15 1
#else
#define OSB_HAVE_15 0
#endif

#define OSB_MAX_LIST 64

struct osb_opts {
    int quick;
    int batches;                 /* timed batches per figure */
    long iters;                  /* operations per batch for small messages */
    long budget;                 /* bytes per batch: large messages run fewer operations */
    size_t sizes[OSB_MAX_LIST];  /* message sizes (bytes) */
    int nsizes;
    long table_bytes;            /* GUPS: table per PE */
    long updates;                /* GUPS: updates per PE per batch (at most) */
    double batch_sec;            /* aimed-at duration of one batch */
};

/* PE 0's choice of operations per batch, shared with every PE (a global: symmetric). */
static long osb_iters_sym;

static inline double osb_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void osb_die(const char *what) {
    fprintf(stderr, "OSB_ERROR %s\n", what);
    fflush(stderr);
    shmem_global_exit(1);
    exit(1);
}

static inline int osb_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median, minimum and maximum of v[0..n) (sorts v). */
static inline void osb_stats(double *v, int n, double out[3]) {
    qsort(v, (size_t)n, sizeof(double), osb_cmp_double);
    out[0] = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    out[1] = v[0];
    out[2] = v[n - 1];
}

/* Defaults of a full run and of --quick: quick, batches, iters, budget, table_bytes,
 * updates, batch_sec. */
static const struct osb_opts osb_defaults[2] = {
    {0, 21, 100000, 64L << 20, {0}, 0, 4L << 20, 20000, 0.02},
    {1, 3, 1000, 1L << 20, {0}, 0, 512L << 10, 1000, 0.002},
};

#define OSB_USAGE                                                                            \
    "[--quick] [--sizes N,N,...] [--batches N] [--batch-ms MS] [--table-bytes N] "            \
    "[--updates N] [--help]"

/* What --help prints. */
static inline void osb_help(const char *program) {
    printf("usage: %s " OSB_USAGE "\n"
           "\n"
           "An OpenSHMEM benchmark of gsas's scripts/bench, built with any implementation's\n"
           "oshcc and run under its launcher (oshrun -n 2 %s ...).\n"
           "\n"
           "  --quick          3 short batches per figure instead of 21 (a smoke run)\n"
           "  --sizes LIST     message sizes in bytes, comma-separated\n"
           "  --batches N      timed batches per figure (1..1000)\n"
           "  --batch-ms MS    aimed-at length of one batch\n"
           "  --table-bytes N  GUPS: table bytes per PE\n"
           "  --updates N      GUPS: updates per PE per batch (at most)\n"
           "  --help           this text\n"
           "\n"
           "Output (PE 0): '# ' header lines, then one tab-separated line per figure,\n"
           "  OSB benchmark family size-bytes pes unit median min max\n"
           "  OSB_SKIP benchmark reason\n"
           "(the median over the batches of the time per operation, the fastest and the\n"
           "slowest batch). A wrong result prints OSB_ERROR and exits non-zero.\n",
           program, program);
}

/* PE 0's header (OSU style): the program, the implementation, the job, the columns. */
static inline void osb_header(const char *program, int me, int npes,
                              const struct osb_opts *o) {
    if (me != 0)
        return;
    char name[SHMEM_MAX_NAME_LEN + 1];
    int major = 0, minor = 0;
    shmem_info_get_name(name);
    shmem_info_get_version(&major, &minor);
    printf("# %s: %s, OpenSHMEM %d.%d, %d PEs, %s run: %d batches of about %.3g ms per "
           "figure\n",
           program, name, major, minor, npes, o->quick ? "quick" : "full", o->batches,
           o->batch_sec * 1e3);
    printf("# OSB\tbenchmark\tfamily\tsize-bytes\tpes\tunit\tmedian\tmin\tmax\n");
    fflush(stdout);
}

/* Parses "--quick" (anywhere: it sets the defaults), "--sizes a,b,c", "--batches N",
 * "--batch-ms MS", "--table-bytes N", "--updates N"; "--help" prints osb_help and exits. */
static inline void osb_parse(int argc, char **argv, struct osb_opts *o) {
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            osb_help(argv[0]);
            exit(0);
        }
        quick |= strcmp(argv[i], "--quick") == 0;
    }
    *o = osb_defaults[quick];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            continue;
        } else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
            char *s = argv[++i];
            o->nsizes = 0;
            while (*s && o->nsizes < OSB_MAX_LIST) {
                char *end;
                o->sizes[o->nsizes++] = (size_t)strtoull(s, &end, 10);
                if (end == s)
                    osb_die("--sizes: expected a comma-separated list of byte counts");
                s = *end == ',' ? end + 1 : end;
            }
        } else if (strcmp(argv[i], "--table-bytes") == 0 && i + 1 < argc) {
            o->table_bytes = atol(argv[++i]);
        } else if (strcmp(argv[i], "--updates") == 0 && i + 1 < argc) {
            o->updates = atol(argv[++i]);
        } else if (strcmp(argv[i], "--batch-ms") == 0 && i + 1 < argc) {
            o->batch_sec = atof(argv[++i]) / 1e3;
        } else if (strcmp(argv[i], "--batches") == 0 && i + 1 < argc) {
            o->batches = atoi(argv[++i]);
        } else {
            fprintf(stderr, "%s: unknown option %s (usage: %s " OSB_USAGE ")\n", argv[0], argv[i],
                    argv[0]);
            exit(2);
        }
    }
    if (o->batches < 1 || o->batches > 1000)
        osb_die("--batches must be 1..1000");
}

/* Operations per batch for messages of `size` bytes: iters, fewer for large messages so that
 * a batch moves about `budget` bytes, at least 2. */
static inline long osb_iters_for(const struct osb_opts *o, size_t size) {
    long n = o->iters;
    if (size > 0 && (long)size * n > o->budget)
        n = o->budget / (long)size;
    return n < 2 ? 2 : n;
}

/* Operations per batch so that a batch lasts about o->batch_sec, between 2 and `most`:
 * PE 0 times 1, 2, 4, ... operations of `once` (`once(size, k)` runs k of them) until a
 * round lasts an eighth of a batch, and tells every PE each step, so that bodies in which
 * all PEs take part run the same counts everywhere.  Every PE must call it. */
typedef void (*osb_body)(size_t size, long iters);
static inline long osb_calibrate(const struct osb_opts *o, osb_body once, size_t size,
                                 long most) {
    long k = 1;
    for (;;) {
        double t0 = osb_now();
        once(size, k);
        double dt = osb_now() - t0;
        if (shmem_my_pe() == 0) {
            long next; /* > 0: the next round's count; < 0: minus the answer */
            if (dt >= o->batch_sec / 8 || k >= most) {
                double want = dt > 0 ? o->batch_sec / (dt / (double)k) : (double)most;
                long n = want > (double)most ? most : (long)want;
                next = -(n < 2 ? 2 : n);
            } else {
                next = 2 * k < most ? 2 * k : most;
            }
            for (int pe = 0; pe < shmem_n_pes(); pe++)
                shmem_long_p(&osb_iters_sym, next, pe);
            shmem_quiet();
        }
        shmem_barrier_all();
        long v = osb_iters_sym;
        shmem_barrier_all(); /* everyone has read it before PE 0 writes the next */
        if (v < 0)
            return -v;
        k = v;
    }
}

/* Times `body(size, n)` on the calling PE, n from osb_calibrate (at most `iters`): one
 * warm-up batch, then o->batches batches; stores median, min, max seconds per operation.
 * Every PE must call it. */
static inline void osb_measure(const struct osb_opts *o, osb_body body, size_t size, long iters,
                               double out[3]) {
    double t[1000];
    long n = osb_calibrate(o, body, size, iters);
    body(size, n);
    for (int b = 0; b < o->batches; b++) {
        double t0 = osb_now();
        body(size, n);
        t[b] = (osb_now() - t0) / (double)n;
    }
    osb_stats(t, o->batches, out);
}

/* Barriers for about five batch times before the first figure, so that the first figure
 * does not time the job's start (measured on gsas over two loopback nodes: the first
 * 40 ms of barriers after start-up ran 7-12 us against 5.1-5.9 after, which showed as the
 * whole program's first figure).  Every PE must call it. */
static void osb_barriers(size_t size, long iters) {
    (void)size;
    for (long i = 0; i < iters; i++)
        shmem_barrier_all();
}
static inline void osb_warm_up(const struct osb_opts *o) {
    long n = osb_calibrate(o, osb_barriers, 0, 1L << 30);
    for (int b = 0; b < 5; b++)
        osb_barriers(0, n);
}

/* Prints one figure line (PE 0 calls it). `scale` turns seconds per operation into the unit:
 * a latency is scale / 1 (us: scale 1e6, rate 0); a rate is scale / seconds (rate 1), so
 * its minimum comes from the slowest batch. */
static inline void osb_report(const char *bench, const char *family, size_t size, int pes,
                       const char *unit, const double sec[3], double scale, int rate) {
    double med, lo, hi;
    if (rate) {
        med = scale / sec[0];
        lo = scale / sec[2];
        hi = scale / sec[1];
    } else {
        med = sec[0] * scale;
        lo = sec[1] * scale;
        hi = sec[2] * scale;
    }
    printf("OSB\t%s\t%s\t%zu\t%d\t%s\t%.6g\t%.6g\t%.6g\n", bench, family, size, pes, unit, med,
           lo, hi);
    fflush(stdout);
}

static inline void osb_skip(const char *bench, const char *reason) {
    printf("OSB_SKIP\t%s\t%s\n", bench, reason);
    fflush(stdout);
}

#endif
