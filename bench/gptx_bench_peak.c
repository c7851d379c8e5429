/*
 * gptx-bench-peak: this machine's fused-multiply-add peak, the figure every
 * CPU benchmark reports its GFLOP/s against ("% of peak", docs/benchmarks.md).
 *
 * fp32: the widest vector FMA the CPU has, chosen at run time with
 * __builtin_cpu_supports: AVX-512 (zmm, 16 lanes) if avx512f, else AVX2+FMA
 * (ymm, 8 lanes), else SSE (xmm, 4 lanes, a multiply and an add: no FMA).
 * Each kernel runs independent accumulator chains acc = acc * m + c, enough
 * of them to cover the FMA latency times the FMA ports (4-5 cycles x 2 ports
 * on current x86 cores: 10 in flight; 12 chains on 16 registers, 16 on
 * AVX-512's 32), so the loop is bound by FMA throughput alone. Counting: 2
 * flops (a multiply and an add) per lane per FMA.
 *
 * bf16: where the CPU has AVX512_BF16, vdpbf16ps (_mm512_dpbf16_ps): each of
 * the 16 fp32 lanes adds two bf16 products, counted as 4 flops per lane per
 * instruction (2 multiply-adds: the convention of a bf16 matmul's 2*M*N*K, so
 * the figures compare with gptx-bench-bf16gemm's). AMX-BF16 is not measured
 * (the output says whether it is present).
 *
 * Every figure is measured on all threads at once (--threads, default every
 * CPU the process may run on, one thread pinned to each) and on one thread;
 * each is the best of three trials of --seconds / 3 (the first trial also
 * lets the clock settle). The rate of a trial is all threads' flops over the
 * wall time from the first thread's start to the last one's end. The
 * accumulators' sum is printed as a checksum, so no kernel can be optimised
 * away.
 */
#define _GNU_SOURCE /* sched_getaffinity, pthread_setaffinity_np */

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PEAK_X86 1
#else
#define PEAK_X86 0
#endif

#include "bench_common.h"
#include "prog_flags.h"

/* loop iterations per kernel call: ~10-50 us, so the clock is read rarely */
enum { CHUNK = 16384, TRIALS = 3 };

/* Each kernel runs iters iterations of its chains and returns their sum. */
typedef float (*peak_kernel_fn)(long iters);

typedef struct {
    const char *isa;   /* "avx512f", "avx2", "sse", "scalar"; "avx512_bf16" */
    const char *reg;   /* "zmm", ... */
    int lanes, chains; /* fp32 lanes per register, independent chains */
    int flops_per_lane; /* per instruction: 2 (FMA), 4 (vdpbf16ps) */
    peak_kernel_fn fn;
} peak_kernel;

#define REP12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define REP16(X) REP12(X) X(12) X(13) X(14) X(15)

/* m slightly below 1 and c small: every chain converges to c / (1 - m) = 1,
 * no overflow, no subnormals */
#define PEAK_M 0.999999f
#define PEAK_C 1e-6f

#if PEAK_X86
#define ZDECL(i) __m512 a##i = _mm512_set1_ps(1.0f + (float)(i) * 1e-3f);
#define ZFMA(i) a##i = _mm512_fmadd_ps(a##i, m, c);
#define ZSUM(i) s = _mm512_add_ps(s, a##i);
__attribute__((target("avx512f"), noinline)) static float fp32_avx512(long iters) {
    const __m512 m = _mm512_set1_ps(PEAK_M), c = _mm512_set1_ps(PEAK_C);
    REP16(ZDECL)
    for (long i = 0; i < iters; i++) {
        REP16(ZFMA)
    }
    __m512 s = _mm512_setzero_ps();
    REP16(ZSUM)
    return _mm512_reduce_add_ps(s);
}

/* two bf16 pairs per fp32 lane: x = (1, 1), y = (2^-20, 2^-20); the chains
 * grow by 2^-19 per instruction (no overflow in any trial's length) */
#define BDP(i) a##i = _mm512_dpbf16_ps(a##i, x, y);
__attribute__((target("avx512bf16,avx512f"), noinline)) static float bf16_avx512(long iters) {
    const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1.0f), _mm512_set1_ps(1.0f));
    const __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0x1p-20f), _mm512_set1_ps(0x1p-20f));
    REP16(ZDECL)
    for (long i = 0; i < iters; i++) {
        REP16(BDP)
    }
    __m512 s = _mm512_setzero_ps();
    REP16(ZSUM)
    return _mm512_reduce_add_ps(s);
}

#define YDECL(i) __m256 a##i = _mm256_set1_ps(1.0f + (float)(i) * 1e-3f);
#define YFMA(i) a##i = _mm256_fmadd_ps(a##i, m, c);
#define YSUM(i) s = _mm256_add_ps(s, a##i);
__attribute__((target("avx2,fma"), noinline)) static float fp32_avx2(long iters) {
    const __m256 m = _mm256_set1_ps(PEAK_M), c = _mm256_set1_ps(PEAK_C);
    REP12(YDECL)
    for (long i = 0; i < iters; i++) {
        REP12(YFMA)
    }
    __m256 s = _mm256_setzero_ps();
    REP12(YSUM)
    float v[8];
    _mm256_storeu_ps(v, s);
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

/* SSE has no FMA: a multiply and an add, the same 2 flops per lane */
#define XDECL(i) __m128 a##i = _mm_set1_ps(1.0f + (float)(i) * 1e-3f);
#define XFMA(i) a##i = _mm_add_ps(_mm_mul_ps(a##i, m), c);
#define XSUM(i) s = _mm_add_ps(s, a##i);
__attribute__((target("sse2"), noinline)) static float fp32_sse(long iters) {
    const __m128 m = _mm_set1_ps(PEAK_M), c = _mm_set1_ps(PEAK_C);
    REP12(XDECL)
    for (long i = 0; i < iters; i++) {
        REP12(XFMA)
    }
    __m128 s = _mm_setzero_ps();
    REP12(XSUM)
    float v[4];
    _mm_storeu_ps(v, s);
    return v[0] + v[1] + v[2] + v[3];
}
#else
/* other architectures: 12 scalar chains (what the compiler makes of them) */
#define SDECL(i) float a##i = 1.0f + (float)(i) * 1e-3f;
#define SFMA(i) a##i = a##i * PEAK_M + PEAK_C;
#define SSUM(i) s += a##i;
__attribute__((noinline)) static float fp32_scalar(long iters) {
    REP12(SDECL)
    for (long i = 0; i < iters; i++) {
        REP12(SFMA)
    }
    float s = 0.0f;
    REP12(SSUM)
    return s;
}
#endif

/* The fp32 kernel for isa ("auto": the widest the CPU has); NULL kernel
 * (fn == NULL) when the CPU lacks the one asked for. */
static peak_kernel fp32_kernel(const char *isa) {
    peak_kernel k = {NULL, NULL, 0, 0, 0, NULL};
#if PEAK_X86
    int auto_ = strcmp(isa, "auto") == 0;
    if ((auto_ || !strcmp(isa, "avx512f")) && __builtin_cpu_supports("avx512f"))
        return (peak_kernel){"avx512f", "zmm", 16, 16, 2, fp32_avx512};
    if ((auto_ || !strcmp(isa, "avx2")) && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma"))
        return (peak_kernel){"avx2", "ymm", 8, 12, 2, fp32_avx2};
    if (auto_ || !strcmp(isa, "sse")) return (peak_kernel){"sse", "xmm", 4, 12, 2, fp32_sse};
#else
    if (!strcmp(isa, "auto") || !strcmp(isa, "scalar"))
        return (peak_kernel){"scalar", "scalar", 1, 12, 2, fp32_scalar};
#endif
    return k;
}

static peak_kernel bf16_kernel(void) {
    peak_kernel k = {NULL, NULL, 0, 0, 0, NULL};
#if PEAK_X86
    if (__builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f"))
        return (peak_kernel){"avx512_bf16", "zmm", 16, 16, 4, bf16_avx512};
#endif
    return k;
}

/* --- threads ------------------------------------------------------------ */

typedef struct {
    const peak_kernel *k;
    double seconds;
    int cpu; /* pin to this CPU; -1 = not pinned */
    pthread_barrier_t *start;
    double t0, t1, flops;
    float sum;
    int pin_failed;
} worker;

static void *worker_main(void *p) {
    worker *w = p;
    if (w->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(w->cpu, &set);
        w->pin_failed = pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0;
    }
    pthread_barrier_wait(w->start);
    long calls = 0;
    float sum = 0.0f;
    double t0 = bench_now_s(), t = t0;
    do {
        sum += w->k->fn(CHUNK);
        calls++;
        t = bench_now_s();
    } while (t - t0 < w->seconds);
    w->t0 = t0;
    w->t1 = t;
    w->sum = sum;
    w->flops = (double)calls * CHUNK * w->k->chains * w->k->lanes * w->k->flops_per_lane;
    return NULL;
}

typedef struct {
    int n;       /* CPUs the process may run on */
    int cpus[1024];
} cpu_list;

static void allowed_cpus(cpu_list *l) {
    cpu_set_t set;
    l->n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE && l->n < 1024; c++)
            if (CPU_ISSET(c, &set)) l->cpus[l->n++] = c;
    if (l->n == 0) { /* unknown: the online count, unpinned */
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        l->n = n > 0 ? (int)(n < 1024 ? n : 1024) : 1;
        for (int c = 0; c < l->n; c++) l->cpus[c] = -1;
    }
}

/* One figure: the best of TRIALS trials of k on n threads. Returns GFLOP/s,
 * or -1 after a message (thread creation failed); *checksum accumulates. */
static double measure(const peak_kernel *k, int n, double seconds, const cpu_list *cpus, int pin,
                      int *pin_failed, double *checksum) {
    worker *w = calloc((size_t)n, sizeof *w);
    pthread_t *tid = calloc((size_t)n, sizeof *tid);
    double best = -1.0;
    if (!w || !tid) {
        fprintf(stderr, "gptx-bench-peak: out of host memory\n");
        goto done;
    }
    for (int trial = 0; trial < TRIALS; trial++) {
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, (unsigned)n);
        int made = 0;
        for (int i = 0; i < n; i++) {
            w[i] = (worker){.k = k, .seconds = seconds / TRIALS,
                            .cpu = pin ? cpus->cpus[i % cpus->n] : -1, .start = &start};
            if (pthread_create(&tid[i], NULL, worker_main, &w[i]) != 0) break;
            made++;
        }
        if (made < n) { /* the started ones wait at the barrier forever: give up */
            fprintf(stderr, "gptx-bench-peak: cannot start %d threads (%d started)\n", n, made);
            exit(PROG_EXIT_FAILURE);
        }
        double t0 = 1e300, t1 = -1e300, flops = 0.0;
        for (int i = 0; i < n; i++) {
            pthread_join(tid[i], NULL);
            t0 = w[i].t0 < t0 ? w[i].t0 : t0;
            t1 = w[i].t1 > t1 ? w[i].t1 : t1;
            flops += w[i].flops;
            *checksum += w[i].sum;
            *pin_failed |= w[i].pin_failed;
        }
        pthread_barrier_destroy(&start);
        double rate = flops / (t1 - t0) * 1e-9;
        if (rate > best) best = rate;
    }
done:
    free(w);
    free(tid);
    return best;
}

/* /proc/cpuinfo's first "model name" (what lscpu prints; "unknown" without
 * one) and whether its first "flags" line has amx_bf16: 1, 0, or -1 when
 * there is no flags line (not x86, or no /proc). */
static int cpu_model(char *out, size_t cap) {
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return -1;
    static char line[1 << 16]; /* a flags line is ~1.5 kB */
    int amx = -1, named = 0;
    while (fgets(line, sizeof line, f) && (amx < 0 || !named)) {
        const char *v = strchr(line, ':');
        if (!v) continue;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        if (!named && strncmp(line, "model name", 10) == 0) {
            snprintf(out, cap, "%s", v);
            out[strcspn(out, "\n")] = '\0';
            named = 1;
        } else if (amx < 0 && strncmp(line, "flags", 5) == 0) {
            line[strcspn(line, "\n")] = ' ';
            amx = strstr(line, " amx_bf16 ") != NULL;
        }
    }
    fclose(f);
    return amx;
}

/* A JSON string: model names hold no quotes or backslashes, but be safe. */
static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++)
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s >= 0x20) fputc(*s, f);
    fputc('"', f);
}

typedef struct {
    int threads, pin;
    double seconds;
    const char *json, *isa;
} peak_args;

#define ROW(field, name, kind, lo, hi, choices, arg, help, bits) \
    PROG_FLAG_ROW(peak_args, field, name, kind, lo, hi, choices, arg, help, bits, 0)
static const prog_flag rows[] = {
    ROW(threads, "--threads", PROG_FLAG_INT, 0, 1024, NULL, NULL,
        "threads of the all-thread figures (0 = every CPU the process may run on)", 0),
    ROW(seconds, "--seconds", PROG_FLAG_DOUBLE, 0, 60, NULL, "S",
        "time of each figure (best of 3 trials of S/3): fp32 on all threads and on\n"
        "one, the same for bf16 where present", PROG_FLAG_OPEN_LO),
    ROW(isa, "--isa", PROG_FLAG_CHOICE, 0, 0, "auto|avx512f|avx2|sse|scalar", "ISA",
        "the fp32 kernel (auto = the widest the CPU has; one it lacks exits 1)", 0),
    ROW(pin, "--pin", PROG_FLAG_INT, 0, 1, NULL, "0|1",
        "1 = pin thread i to the i-th CPU the process may run on", 0),
    ROW(json, "--json", PROG_FLAG_STR, 0, 0, NULL, "FILE", "also write the figures to FILE", 0),
};
#undef ROW

static void print_json_rate(FILE *f, double v) {
    if (v > 0) fprintf(f, "%.4f", v);
    else fprintf(f, "null");
}

int main(int argc, char **argv) {
    static const peak_args defaults = {0, 1, 0.25, NULL, "auto"};
    static const prog_cli cli = {
        "gptx-bench-peak",
        "usage: gptx-bench-peak [options]\n"
        "Measures the machine's FMA peak: fp32 at the widest vector width, bf16 dot\n"
        "products where the CPU has AVX512_BF16; all threads and one (docs/benchmarks.md).\n",
        rows, sizeof rows / sizeof rows[0], NULL};
    peak_args a = defaults;
    int rc = prog_flags_parse(&cli, &a, NULL, argc, argv, &defaults);
    if (rc) return rc > 0 ? PROG_EXIT_OK : PROG_EXIT_USAGE;

    peak_kernel f32 = fp32_kernel(a.isa), b16 = bf16_kernel();
    if (!f32.fn) {
        fprintf(stderr, "gptx-bench-peak: --isa %s: this CPU does not have it\n", a.isa);
        return PROG_EXIT_FAILURE;
    }
    cpu_list cpus;
    allowed_cpus(&cpus);
    int pin = a.pin && cpus.cpus[0] >= 0;
    int n = a.threads > 0 ? a.threads : cpus.n;
    char model[256];
    int amx = cpu_model(model, sizeof model); /* 1, 0, -1 unknown */
    const char *amx_text = amx > 0 ? "present, not measured" : amx == 0 ? "not present" : "unknown";

    double sum = 0.0;
    int pin_failed = 0;
    double f32_all = measure(&f32, n, a.seconds, &cpus, pin, &pin_failed, &sum);
    double f32_one = n == 1 ? f32_all : measure(&f32, 1, a.seconds, &cpus, pin, &pin_failed, &sum);
    double b16_all = -1.0, b16_one = -1.0;
    if (b16.fn) {
        b16_all = measure(&b16, n, a.seconds, &cpus, pin, &pin_failed, &sum);
        b16_one = n == 1 ? b16_all : measure(&b16, 1, a.seconds, &cpus, pin, &pin_failed, &sum);
    }
    if (f32_all <= 0 || f32_one <= 0) return PROG_EXIT_FAILURE;

    printf("gptx-bench-peak: %s, %d thread%s (%s), %d of %ld online CPUs usable\n", model, n,
           n == 1 ? "" : "s",
           pin ? (pin_failed ? "pinning FAILED on some" : "one pinned per CPU") : "not pinned",
           cpus.n, sysconf(_SC_NPROCESSORS_ONLN));
    printf("timing      : each figure the best of %d trials of %.3g s; rate = all threads' flops "
           "/ wall time\n", TRIALS, a.seconds / TRIALS);
    printf("fp32 FMA    : %s (%s, %d lanes, %d independent chains; 2 flops per lane per FMA)\n",
           f32.isa, f32.reg, f32.lanes, f32.chains);
    printf("  %d thread%s  : %.2f GFLOP/s total, %.2f per thread\n", n, n == 1 ? " " : "s",
           f32_all, f32_all / n);
    printf("  1 thread   : %.2f GFLOP/s\n", f32_one);
    if (b16.fn) {
        printf("bf16 dot    : %s vdpbf16ps (%s, %d fp32 lanes, %d chains; 4 flops per lane per "
               "instruction: 2 multiply-adds)\n", b16.isa, b16.reg, b16.lanes, b16.chains);
        printf("  %d thread%s  : %.2f GFLOP/s total, %.2f per thread\n", n, n == 1 ? " " : "s",
               b16_all, b16_all / n);
        printf("  1 thread   : %.2f GFLOP/s\n", b16_one);
    } else {
        printf("bf16: not present (no avx512_bf16)\n");
    }
    printf("amx-bf16    : %s\n", amx_text);
    printf("checksum    : %.6g\n", sum);

    if (!a.json) return PROG_EXIT_OK;
    FILE *f = fopen(a.json, "w");
    if (!f) {
        fprintf(stderr, "gptx-bench-peak: cannot write %s: %s\n", a.json, strerror(errno));
        return PROG_EXIT_FAILURE;
    }
    fprintf(f, "{\n  \"model\": ");
    json_string(f, model);
    fprintf(f, ",\n  \"threads\": %d, \"pinned\": %s, \"seconds\": %.4f, \"trials\": %d,\n", n,
            pin && !pin_failed ? "true" : "false", a.seconds, TRIALS);
    fprintf(f, "  \"fp32_isa\": \"%s\", \"fp32_lanes\": %d, \"fp32_chains\": %d, "
               "\"fp32_flops_per_lane\": 2,\n", f32.isa, f32.lanes, f32.chains);
    fprintf(f, "  \"fp32_peak_gflops\": %.4f, \"fp32_peak_1t_gflops\": %.4f,\n", f32_all,
            f32_one);
    fprintf(f, "  \"bf16_isa\": %s, \"bf16_flops_per_lane\": 4,\n",
            b16.fn ? "\"avx512_bf16\"" : "null");
    fprintf(f, "  \"bf16_peak_gflops\": ");
    print_json_rate(f, b16_all);
    fprintf(f, ", \"bf16_peak_1t_gflops\": ");
    print_json_rate(f, b16_one);
    fprintf(f, ",\n  \"amx_bf16\": \"%s\", \"checksum\": %.6g\n}\n", amx_text, sum);
    if (fclose(f) != 0) {
        fprintf(stderr, "gptx-bench-peak: writing %s failed\n", a.json);
        return PROG_EXIT_FAILURE;
    }
    return PROG_EXIT_OK;
}
