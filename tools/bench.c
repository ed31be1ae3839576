/*
 * bench.c - `tensile bench ops`: how fast the CPU backend runs the ops that
 * matter, next to what this machine can do at best.
 *
 * Every figure is a ratio to a ceiling measured in the same run, because an
 * absolute GFLOP/s means little on a shared, virtualised, frequency-scaling
 * machine, while "82% of the FMA peak we just measured" travels:
 *
 *  - ceiling_copy: a STREAM-style copy over arrays several times the L3 (each
 *    thread copies its own slice with memcpy, whose non-temporal stores at
 *    this size make bytes moved = bytes read + bytes written); the reference
 *    for bandwidth-bound ops (bw_ratio).
 *  - ceiling_fma: independent FMA chains held in registers (16 per thread,
 *    enough to cover latency x pipes), all threads at once; the reference for
 *    compute-bound ops (flops_ratio).
 *
 * Then the ops, built and computed through the public API exactly as a user
 * would (a context with data, a graph, tsl_backend_graph_compute): mul_mat at
 * 1024^3 per weight type (compute-bound), mat-vec on 4096x4096 weights
 * rotating over enough matrices that they cannot sit in the L3 (decode is
 * weight-streaming, so cache-resident figures would flatter it), and the
 * bandwidth-bound element-wise and row ops on tensors several times the L3.
 *
 * Each figure is the median of several timed runs after a warm-up (the
 * minimum is reported too). --quick shrinks everything for a smoke test that
 * finishes in a few seconds; its figures are not meant to be quoted.
 *
 * Output: an aligned table, or with --json exactly one JSON object per line
 * on stdout (ceilings included, as op "ceiling_copy"/"ceiling_fma"); errors
 * go to stderr and, for a row that could not run, into that row's "error".
 */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend_impl.h"
#include "cli.h"
#include "commands.h"
#include "tensile/backend.h"

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define BENCH_X86 1
#include <immintrin.h>
#endif

typedef struct bench_opts {
    bool json, quick;
    bool vulkan;       /* --backend vulkan */
    double ref_tflops; /* --ref-tflops: the matmul rate flops_ratio is against (Vulkan) */
    int threads;
    const char *filter;
    size_t l3;
} bench_opts;

typedef struct bench_row {
    const char *op;
    char type[16];
    char shape[64];
    int threads;
    double seconds, min_seconds; /* NAN when not run */
    double gflops, gbs;          /* NAN when not meaningful */
    double flops_ratio, bw_ratio;
    double ns_per_node, share; /* fault_checks and encode rows only, else NAN */
    const char *timer;         /* Vulkan rows: "gpu" (timestamps) or "wall"; NULL for the CPU */
    char error[200];
} bench_row;

typedef struct bench_state {
    bench_opts o;
    uint64_t rng;
    double copy_gbs, fma_gflops;
    tsl_backend *be;
    int failures;
    bool header_done;
} bench_state;

static double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* median and minimum of n timings (sorts t) */
static void bench_stats(double *t, int n, double *median, double *min) {
    qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
    *min = t[0];
    *median = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* xorshift64*: test data only */
static inline uint64_t bench_rand(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}
static inline float bench_randf(uint64_t *s) { return (float)((bench_rand(s) >> 40) * (2.0 / 16777216.0)) - 1.0f; }

/* ---- output ------------------------------------------------------------------ */

static void bench_json_num(const char *key, double v, bool last) {
    if (isfinite(v))
        printf("\"%s\":%.6g%s", key, v, last ? "" : ",");
    else
        printf("\"%s\":null%s", key, last ? "" : ",");
}

static void bench_json_str(const char *s) { cli_json_str(stdout, s, strlen(s)); }

static void bench_emit(bench_state *st, bench_row *r) {
    if (r->error[0]) {
        st->failures++;
        fprintf(stderr, "bench: %s %s %s: %s\n", r->op, r->type, r->shape, r->error);
    }
    if (st->o.json) {
        printf("{\"op\":");
        bench_json_str(r->op);
        printf(",\"type\":");
        bench_json_str(r->type);
        printf(",\"shape\":");
        bench_json_str(r->shape);
        printf(",\"threads\":%d,", r->threads);
        bench_json_num("seconds", r->seconds, false);
        bench_json_num("min_seconds", r->min_seconds, false);
        bench_json_num("gflops", r->gflops, false);
        bench_json_num("gbs", r->gbs, false);
        bench_json_num("flops_ratio", r->flops_ratio, false);
        if (isfinite(r->ns_per_node)) {
            bench_json_num("ns_per_node", r->ns_per_node, false);
            bench_json_num("share", r->share, false);
        }
        if (r->timer) {
            printf("\"timer\":");
            bench_json_str(r->timer);
            printf(",");
        }
        bench_json_num("bw_ratio", r->bw_ratio, !r->error[0]);
        if (r->error[0]) {
            printf("\"error\":");
            bench_json_str(r->error);
        }
        printf("}\n");
    } else {
        if (!st->header_done) {
            printf("%-13s %-7s %-28s %3s %10s %9s %8s %7s %7s\n", "op", "type", "shape", "thr", "ms", "GFLOP/s",
                   "GB/s", "flops%", "bw%");
            st->header_done = true;
        }
        if (r->error[0]) {
            printf("%-13s %-7s %-28s %3d  failed: %s\n", r->op, r->type, r->shape, r->threads, r->error);
        } else {
            char f[5][16];
            snprintf(f[0], 16, isfinite(r->seconds) ? "%.3f" : "-", r->seconds * 1e3);
            snprintf(f[1], 16, isfinite(r->gflops) ? "%.1f" : "-", r->gflops);
            snprintf(f[2], 16, isfinite(r->gbs) ? "%.1f" : "-", r->gbs);
            snprintf(f[3], 16, isfinite(r->flops_ratio) ? "%.1f" : "-", r->flops_ratio * 100);
            snprintf(f[4], 16, isfinite(r->bw_ratio) ? "%.1f" : "-", r->bw_ratio * 100);
            printf("%-13s %-7s %-28s %3d %10s %9s %8s %7s %7s", r->op, r->type, r->shape, r->threads, f[0], f[1],
                   f[2], f[3], f[4]);
            if (isfinite(r->ns_per_node))
                printf("   %.1f ns/node, %.3f%% of compute", r->ns_per_node, r->share * 100);
            if (r->timer && strcmp(r->timer, "gpu") != 0) printf("   (%s time)", r->timer);
            printf("\n");
        }
    }
    fflush(stdout);
}

static bench_row bench_row_new(const bench_state *st, const char *op, const char *type, const char *shape) {
    bench_row r;
    memset(&r, 0, sizeof r);
    r.op = op;
    snprintf(r.type, sizeof r.type, "%s", type);
    snprintf(r.shape, sizeof r.shape, "%s", shape);
    r.threads = st->o.threads;
    r.seconds = r.min_seconds = r.gflops = r.gbs = r.flops_ratio = r.bw_ratio = NAN;
    r.ns_per_node = r.share = NAN;
    return r;
}

/* Fill in the rates of a timed row: flops and bytes per run. */
static void bench_rates(const bench_state *st, bench_row *r, double flops, double bytes) {
    if (flops > 0) {
        r->gflops = flops / r->seconds * 1e-9;
        if (st->fma_gflops > 0) r->flops_ratio = r->gflops / st->fma_gflops;
    }
    if (bytes > 0) {
        r->gbs = bytes / r->seconds * 1e-9;
        if (st->copy_gbs > 0) r->bw_ratio = r->gbs / st->copy_gbs;
    }
}

static bool bench_selected(const bench_state *st, const char *op, const char *type) {
    if (!st->o.filter) return true;
    char name[64];
    snprintf(name, sizeof name, "%s %s", op, type);
    /* any of the '|'-separated substrings */
    for (const char *f = st->o.filter;;) {
        const size_t n = strcspn(f, "|");
        for (const char *p = name; n > 0 && *p; p++)
            if (strncmp(p, f, n) == 0) return true;
        if (!f[n]) return false;
        f += n + 1;
    }
}

/* ---- ceilings -------------------------------------------------------------- */

typedef struct bench_thread {
    _Atomic int *go; /* 0 wait, 1 run, -1 give up */
    char *dst;
    const char *src;
    size_t n;
    long iters;
    double t_end;
    float sink;
} bench_thread;

/* Workers spin until released, so they all start within microseconds of
 * each other (a condition variable's wake-ups would be staggered). */
static bool bench_wait_go(bench_thread *t) {
    int g;
    while ((g = atomic_load_explicit(t->go, memory_order_acquire)) == 0) sched_yield();
    return g > 0;
}

static void *bench_copy_worker(void *arg) {
    bench_thread *t = arg;
    if (!bench_wait_go(t)) return NULL;
    memcpy(t->dst, t->src, t->n);
    t->t_end = bench_now();
    return NULL;
}

/* Runs fn on n threads released together; returns the time from the release
 * to the last thread's end, or -1 if the threads could not be started. */
static double bench_parallel(int n, bench_thread *th, void *(*fn)(void *)) {
    _Atomic int go = 0;
    pthread_t tid[256];
    int started = 0;
    for (int i = 0; i < n && i < 256; i++) {
        th[i].go = &go;
        th[i].t_end = 0;
        if (pthread_create(&tid[i], NULL, fn, &th[i]) != 0) break;
        started++;
    }
    const bool ok = started == n;
    double t0 = bench_now();
    atomic_store_explicit(&go, ok ? 1 : -1, memory_order_release);
    double t1 = t0;
    for (int i = 0; i < started; i++) {
        pthread_join(tid[i], NULL);
        if (th[i].t_end > t1) t1 = th[i].t_end;
    }
    return ok ? t1 - t0 : -1;
}

static void bench_ceiling_copy(bench_state *st) {
    const int nth = st->o.threads;
    size_t bytes = st->o.quick ? 64u << 20 : 4 * st->o.l3;
    if (!st->o.quick && bytes < (256u << 20)) bytes = 256u << 20;
    bytes = bytes / (size_t)(64 * nth) * (size_t)(64 * nth);
    char shape[64];
    snprintf(shape, sizeof shape, "2x%zu MiB", bytes >> 20);
    bench_row r = bench_row_new(st, "ceiling_copy", "f32", shape);
    char *a = aligned_alloc(64, bytes), *b = aligned_alloc(64, bytes);
    bench_thread *th = calloc((size_t)nth, sizeof *th);
    if (!a || !b || !th) {
        snprintf(r.error, sizeof r.error, "cannot allocate 2 x %zu bytes", bytes);
    } else {
        memset(a, 1, bytes);
        memset(b, 2, bytes);
        const int reps = st->o.quick ? 3 : 7;
        double t[16];
        size_t chunk = bytes / (size_t)nth;
        int n = 0;
        for (int rep = 0; rep < reps + 1; rep++) {
            for (int i = 0; i < nth; i++) {
                th[i].dst = b + (size_t)i * chunk;
                th[i].src = a + (size_t)i * chunk;
                th[i].n = chunk;
            }
            double dt = bench_parallel(nth, th, bench_copy_worker);
            if (dt < 0) {
                snprintf(r.error, sizeof r.error, "cannot start %d threads", nth);
                break;
            }
            if (rep > 0) t[n++] = dt; /* the first run is a warm-up */
        }
        if (!r.error[0]) {
            bench_stats(t, n, &r.seconds, &r.min_seconds);
            r.gbs = 2.0 * (double)bytes / r.seconds * 1e-9;
            r.bw_ratio = 1.0;
            st->copy_gbs = r.gbs;
        }
    }
    free(a);
    free(b);
    free(th);
    bench_emit(st, &r);
}

#define BENCH_CHAINS 16

#ifdef BENCH_X86
/* The chains start from distinct values, or the compiler proves some equal
 * and computes them once (it did: 4 chains left doing the work of 16). */
__attribute__((target("avx512f"))) static float bench_fma_avx512(long iters) {
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
#define B_INIT(i) __m512 c##i = _mm512_set1_ps(0.01f * (float)((i) + 1))
    B_INIT(0); B_INIT(1); B_INIT(2); B_INIT(3); B_INIT(4); B_INIT(5); B_INIT(6); B_INIT(7);
    B_INIT(8); B_INIT(9); B_INIT(10); B_INIT(11); B_INIT(12); B_INIT(13); B_INIT(14); B_INIT(15);
#undef B_INIT
    for (long i = 0; i < iters; i++) {
        c0 = _mm512_fmadd_ps(c0, x, y), c1 = _mm512_fmadd_ps(c1, x, y), c2 = _mm512_fmadd_ps(c2, x, y);
        c3 = _mm512_fmadd_ps(c3, x, y), c4 = _mm512_fmadd_ps(c4, x, y), c5 = _mm512_fmadd_ps(c5, x, y);
        c6 = _mm512_fmadd_ps(c6, x, y), c7 = _mm512_fmadd_ps(c7, x, y), c8 = _mm512_fmadd_ps(c8, x, y);
        c9 = _mm512_fmadd_ps(c9, x, y), c10 = _mm512_fmadd_ps(c10, x, y), c11 = _mm512_fmadd_ps(c11, x, y);
        c12 = _mm512_fmadd_ps(c12, x, y), c13 = _mm512_fmadd_ps(c13, x, y), c14 = _mm512_fmadd_ps(c14, x, y);
        c15 = _mm512_fmadd_ps(c15, x, y);
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                             _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)),
                                       _mm512_add_ps(_mm512_add_ps(c12, c13), _mm512_add_ps(c14, c15))));
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float bench_fma_avx2(long iters) {
    const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
#define B_INIT(i) __m256 c##i = _mm256_set1_ps(0.01f * (float)((i) + 1))
    B_INIT(0); B_INIT(1); B_INIT(2); B_INIT(3); B_INIT(4); B_INIT(5); B_INIT(6); B_INIT(7);
    B_INIT(8); B_INIT(9); B_INIT(10); B_INIT(11);
#undef B_INIT
    for (long i = 0; i < iters; i++) {
        c0 = _mm256_fmadd_ps(c0, x, y), c1 = _mm256_fmadd_ps(c1, x, y), c2 = _mm256_fmadd_ps(c2, x, y);
        c3 = _mm256_fmadd_ps(c3, x, y), c4 = _mm256_fmadd_ps(c4, x, y), c5 = _mm256_fmadd_ps(c5, x, y);
        c6 = _mm256_fmadd_ps(c6, x, y), c7 = _mm256_fmadd_ps(c7, x, y);
        c8 = _mm256_fmadd_ps(c8, x, y), c9 = _mm256_fmadd_ps(c9, x, y), c10 = _mm256_fmadd_ps(c10, x, y);
        c11 = _mm256_fmadd_ps(c11, x, y);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                             _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
    float v[8];
    _mm256_storeu_ps(v, s);
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}
#endif

static float bench_fma_scalar(long iters) {
    float c[BENCH_CHAINS];
    for (int j = 0; j < BENCH_CHAINS; j++) c[j] = 0.1f * (float)(j + 1);
    for (long i = 0; i < iters; i++)
        for (int j = 0; j < BENCH_CHAINS; j++) c[j] = fmaf(c[j], 0.999999f, 1e-7f);
    float s = 0;
    for (int j = 0; j < BENCH_CHAINS; j++) s += c[j];
    return s;
}

/* FLOPs one iteration of the loop in use does, and its name. */
static int bench_fma_width(const char **name) {
#ifdef BENCH_X86
    if (__builtin_cpu_supports("avx512f")) {
        *name = "avx512";
        return 16 * 16 * 2;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        *name = "avx2";
        return 12 * 8 * 2;
    }
#endif
    *name = "scalar";
    return BENCH_CHAINS * 2;
}

static void *bench_fma_worker(void *arg) {
    bench_thread *t = arg;
    if (!bench_wait_go(t)) return NULL;
    const char *name;
    (void)bench_fma_width(&name);
#ifdef BENCH_X86
    if (!strcmp(name, "avx512"))
        t->sink = bench_fma_avx512(t->iters);
    else if (!strcmp(name, "avx2"))
        t->sink = bench_fma_avx2(t->iters);
    else
#endif
        t->sink = bench_fma_scalar(t->iters);
    t->t_end = bench_now();
    return NULL;
}

static void bench_ceiling_fma(bench_state *st) {
    const int nth = st->o.threads;
    const char *name;
    const int flops_per_iter = bench_fma_width(&name);
    bench_row r = bench_row_new(st, "ceiling_fma", "f32", name);
    bench_thread *th = calloc((size_t)nth, sizeof *th);
    if (!th) {
        snprintf(r.error, sizeof r.error, "out of memory");
        bench_emit(st, &r);
        return;
    }
    /* about 0.1 s per run at 100 GFLOP/s per thread */
    long iters = (long)(1e10 / flops_per_iter);
    if (st->o.quick) iters /= 4;
    const int reps = st->o.quick ? 3 : 5;
    double t[16];
    int n = 0;
    for (int rep = 0; rep < reps + 1; rep++) {
        for (int i = 0; i < nth; i++) th[i].iters = iters;
        double dt = bench_parallel(nth, th, bench_fma_worker);
        if (dt < 0) {
            snprintf(r.error, sizeof r.error, "cannot start %d threads", nth);
            break;
        }
        if (rep > 0) t[n++] = dt;
    }
    if (!r.error[0]) {
        bench_stats(t, n, &r.seconds, &r.min_seconds);
        r.gflops = (double)nth * (double)iters * flops_per_iter / r.seconds * 1e-9;
        r.flops_ratio = 1.0;
        st->fma_gflops = r.gflops;
    }
    free(th);
    bench_emit(st, &r);
}

/* ---- graph helpers ----------------------------------------------------------- */

/* Random contents of the right kind: floats in [-1, 1); quantized blocks
 * with small positive scales and random quants (what the kernels see is
 * the same work as for real weights). */
static void bench_fill_bytes(tsl_type type, void *data, size_t n, uint64_t *rng) {
    switch (type) {
    case TSL_TYPE_F32: {
        float *f = data;
        for (size_t i = 0; i < n / 4; i++) f[i] = bench_randf(rng);
        break;
    }
    case TSL_TYPE_F16: {
        tsl_fp16_t *h = data;
        for (size_t i = 0; i < n / 2; i++) h[i] = tsl_fp32_to_fp16(bench_randf(rng));
        break;
    }
    case TSL_TYPE_BF16: {
        tsl_bf16_t *h = data;
        for (size_t i = 0; i < n / 2; i++) h[i] = tsl_fp32_to_bf16(bench_randf(rng));
        break;
    }
    case TSL_TYPE_Q8_0:
    case TSL_TYPE_Q4_0: {
        const size_t bs = tsl_type_block_size(type);
        uint8_t *p = data;
        for (size_t i = 0; i + 8 <= n; i += 8) {
            uint64_t v = bench_rand(rng);
            memcpy(p + i, &v, 8);
        }
        for (size_t i = 0; i + bs <= n; i += bs) {
            tsl_fp16_t d = tsl_fp32_to_fp16(0.001f + 0.01f * (bench_randf(rng) + 1.0f));
            memcpy(p + i, &d, sizeof d);
        }
        break;
    }
    default: memset(data, 0, n); break;
    }
}

static void bench_fill(tsl_tensor *t, uint64_t *rng) { bench_fill_bytes(t->type, t->data, tsl_nbytes(t), rng); }

/* Computes g reps times after a warm-up; fills the row's timings. */
static bool bench_time_graph(bench_state *st, tsl_graph *g, bench_row *r, int reps, int per_run) {
    tsl_error err;
    double t[32];
    if (reps > 31) reps = 31;
    for (int i = 0; i < reps + 1; i++) {
        double t0 = bench_now();
        tsl_status s = tsl_backend_graph_compute(st->be, g, &err);
        double dt = bench_now() - t0;
        if (s != TSL_SUCCESS) {
            tsl_error_format(&err, r->error, sizeof r->error);
            return false;
        }
        if (i > 0) t[i - 1] = dt / per_run;
    }
    bench_stats(t, reps, &r->seconds, &r->min_seconds);
    return true;
}

static tsl_context *bench_ctx(size_t data_bytes, int n_tensors, bench_row *r) {
    tsl_ctx_params cp = {data_bytes + (size_t)n_tensors * 1024 + (4u << 20), false};
    tsl_context *ctx = tsl_ctx_new(cp);
    if (!ctx) snprintf(r->error, sizeof r->error, "cannot allocate a %zu-byte context", cp.mem_size);
    return ctx;
}

static bool bench_ctx_ok(tsl_context *ctx, bench_row *r) {
    if (r->error[0]) return false;
    const char *e = tsl_ctx_error(ctx);
    if (e) {
        snprintf(r->error, sizeof r->error, "%s", e);
        return false;
    }
    return true;
}

/* ---- rows -------------------------------------------------------------------- */

static void bench_mul_mat(bench_state *st, tsl_type type, int64_t M, int64_t N, int64_t K) {
    if (!bench_selected(st, "mul_mat", tsl_type_name(type))) return;
    char shape[64];
    snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
    bench_row r = bench_row_new(st, "mul_mat", tsl_type_name(type), shape);
    size_t abytes = tsl_row_size(type, K) * (size_t)M;
    size_t bytes = abytes + (size_t)(K * N + M * N) * 4;
    tsl_context *ctx = bench_ctx(bytes, 8, &r);
    if (ctx) {
        tsl_tensor *a = tsl_new_tensor_2d(ctx, type, K, M);
        tsl_tensor *b = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, K, N);
        tsl_tensor *c = tsl_mul_mat(ctx, a, b);
        tsl_graph *g = c ? tsl_graph_build(ctx, &c, 1) : NULL;
        if (bench_ctx_ok(ctx, &r) && g) {
            bench_fill(a, &st->rng);
            bench_fill(b, &st->rng);
            if (bench_time_graph(st, g, &r, st->o.quick ? 3 : 9, 1))
                bench_rates(st, &r, 2.0 * (double)M * (double)N * (double)K, (double)bytes);
        }
    }
    tsl_ctx_free(ctx);
    bench_emit(st, &r);
}

/* Decode: y = W x for `count` distinct weight matrices in one graph, so
 * the weights stream from memory rather than from the L3. With ncols > 1,
 * x has that many columns (a batch of sequences decoding together), op
 * "mat_vec_n<ncols>". */
static void bench_mat_vec(bench_state *st, tsl_type type, int64_t M, int64_t K, int64_t ncols) {
    const char *op = ncols == 1 ? "mat_vec" : ncols == 4 ? "mat_vec_n4" : "mat_vec_n";
    if (!bench_selected(st, op, tsl_type_name(type))) return;
    const size_t wbytes = tsl_row_size(type, K) * (size_t)M;
    const size_t want = st->o.quick ? 2 * wbytes : 4 * st->o.l3;
    int count = (int)((want + wbytes - 1) / wbytes);
    if (count < 2) count = 2;
    if (count > 64) count = 64;
    char shape[64];
    if (ncols == 1)
        snprintf(shape, sizeof shape, "%lldx%lld x%d (%zu MiB)", (long long)M, (long long)K, count,
                 (wbytes * (size_t)count) >> 20);
    else
        snprintf(shape, sizeof shape, "%lldx%lldx%lld x%d (%zu MiB)", (long long)M, (long long)K, (long long)ncols,
                 count, (wbytes * (size_t)count) >> 20);
    bench_row r = bench_row_new(st, op, tsl_type_name(type), shape);
    tsl_context *ctx = bench_ctx(wbytes * (size_t)count + (size_t)((K + M * count) * ncols) * 4 + (size_t)count * 128,
                                 3 * count + 4, &r);
    tsl_tensor *outs[64];
    if (ctx) {
        tsl_tensor *x = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, K, ncols);
        if (x) bench_fill(x, &st->rng);
        for (int i = 0; i < count; i++) {
            tsl_tensor *w = tsl_new_tensor_2d(ctx, type, K, M);
            if (w) bench_fill(w, &st->rng);
            outs[i] = tsl_mul_mat(ctx, w, x);
        }
        tsl_graph *g = tsl_ctx_error(ctx) ? NULL : tsl_graph_build(ctx, outs, count);
        if (bench_ctx_ok(ctx, &r) && g && bench_time_graph(st, g, &r, st->o.quick ? 3 : 9, count))
            bench_rates(st, &r, 2.0 * (double)M * (double)K * (double)ncols, (double)wbytes);
    }
    tsl_ctx_free(ctx);
    bench_emit(st, &r);
}

enum { BW_ADD, BW_RMS_NORM, BW_SOFT_MAX, BW_ROPE, BW_GET_ROWS, BW_CPY_F16 };

/* Bandwidth-bound ops on an F32 tensor [ne0, rows] of `bytes` bytes. */
static void bench_bw_op(bench_state *st, int which, size_t bytes) {
    static const char *names[] = {"add", "rms_norm", "soft_max", "rope", "get_rows", "cpy"};
    const char *tname = which == BW_CPY_F16 ? "f16" : "f32";
    if (!bench_selected(st, names[which], tname)) return;
    const int64_t ne0 = 4096, rows = (int64_t)(bytes / (size_t)(ne0 * 4));
    const size_t tb = (size_t)(ne0 * rows) * 4;
    char shape[64];
    if (which == BW_ROPE)
        snprintf(shape, sizeof shape, "128x32x%lld", (long long)rows);
    else
        snprintf(shape, sizeof shape, "%lldx%lld", (long long)ne0, (long long)rows);
    bench_row r = bench_row_new(st, names[which], which == BW_CPY_F16 ? "f32>f16" : "f32", shape);
    tsl_context *ctx = bench_ctx(3 * tb + (size_t)rows * 8, 16, &r);
    double moved = 0;
    if (ctx) {
        tsl_tensor *a = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, ne0, rows), *out = NULL;
        if (a) bench_fill(a, &st->rng);
        switch (which) {
        case BW_ADD: {
            tsl_tensor *b = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, ne0, rows);
            if (b) bench_fill(b, &st->rng);
            out = tsl_add(ctx, a, b);
            moved = 3.0 * (double)tb;
            break;
        }
        case BW_RMS_NORM:
            out = tsl_rms_norm(ctx, a, 1e-6f);
            moved = 2.0 * (double)tb;
            break;
        case BW_SOFT_MAX:
            out = tsl_soft_max(ctx, a, NULL, 1.0f);
            moved = 2.0 * (double)tb;
            break;
        case BW_ROPE: {
            /* the same bytes seen as [head_dim 128, 32 heads, tokens] */
            tsl_tensor *x = tsl_reshape_3d(ctx, a, 128, 32, rows);
            tsl_tensor *pos = tsl_new_tensor_1d(ctx, TSL_TYPE_I32, rows);
            if (pos)
                for (int64_t i = 0; i < rows; i++) ((int32_t *)pos->data)[i] = (int32_t)i;
            tsl_rope_params rp = tsl_rope_default(128);
            out = tsl_rope(ctx, x, pos, NULL, &rp);
            moved = 2.0 * (double)tb;
            break;
        }
        case BW_GET_ROWS: {
            tsl_tensor *idx = tsl_new_tensor_1d(ctx, TSL_TYPE_I32, rows);
            if (idx)
                for (int64_t i = 0; i < rows; i++) ((int32_t *)idx->data)[i] = (int32_t)(bench_rand(&st->rng) % (uint64_t)rows);
            out = tsl_get_rows(ctx, a, idx);
            moved = 2.0 * (double)tb;
            break;
        }
        case BW_CPY_F16: {
            tsl_tensor *h = tsl_new_tensor_2d(ctx, TSL_TYPE_F16, ne0, rows);
            out = tsl_cpy(ctx, a, h);
            moved = 1.5 * (double)tb;
            break;
        }
        }
        tsl_graph *g = out ? tsl_graph_build(ctx, &out, 1) : NULL;
        if (bench_ctx_ok(ctx, &r) && g && bench_time_graph(st, g, &r, st->o.quick ? 3 : 7, 1))
            bench_rates(st, &r, 0, moved);
    }
    tsl_ctx_free(ctx);
    bench_emit(st, &r);
}

/* ---- Vulkan -------------------------------------------------------------------- */

/*
 * `tensile bench ops --backend vulkan`: the same rows on a Vulkan device,
 * each a ratio to a ceiling measured on that device in the same run:
 *
 *  - ceiling_copy: an F32 -> F32 cpy graph over 1 GiB (nodes of at most
 *    256 MiB, so one kernel binding sees each; independent, so they run
 *    together), bytes read + bytes written, the best of several runs, with
 *    whatever kernel the backend runs cpy with: so the ceiling is only as
 *    good as that kernel (a rate above it says the copy kernel is the one
 *    to improve). Beside it, upload and download: tsl_tensor_set / get of
 *    those bytes, host wall time (what loading weights costs).
 *  - mat_vec: y = W x with 8192x8192 weights, as many matrices in one graph
 *    as make 1 GiB, so no cache on the device (an H200's L2 is 60 MB) holds
 *    them between runs; like the CPU rows it counts the bytes of weights
 *    read (x and y are noise), against the copy ceiling.
 *  - mul_mat 4096^3 in GFLOP/s, F16, Q8_0, Q4_0 and F32 weights times F32
 *    activations, then F16 times F16 ("f16/f16", both operands of the
 *    rate torch's bf16 reference has); flops_ratio is against --ref-tflops
 *    when given (a rate measured on the same GPU, e.g. torch's bf16 matmul) and
 *    absent otherwise: there is no FMA ceiling a host program can measure
 *    on a GPU without writing the kernel it is meant to judge.
 *  - encode: host time to encode and submit a 1,000-node graph of small ops
 *    into 9 command buffers (the calling thread and 8 workers), per node
 *    (tsl_vulkan_stats.last_encode_us_per_node), every compute recording its
 *    commands; encode_reused: the same with command-buffer reuse on (the
 *    graph computed again: its commands built and compared, the recorded
 *    command buffers submitted again).
 *
 * Device times are GPU time from timestamps (tsl_vulkan_stats.last_gpu_us)
 * where the device writes them, else wall time; each row says which
 * ("timer"). Medians after warm-up runs, as for the CPU. Everything goes
 * through the public graph API, so whatever kernel the backend picks for a
 * node is what is measured.
 */

#define VKB_MAX_BUFS 160

typedef struct vkb_set {
    tsl_context *ctx;
    tsl_backend *be;
    tsl_buffer *bufs[VKB_MAX_BUFS];
    int n_bufs;
} vkb_set;

static tsl_context *vkb_ctx(vkb_set *v, tsl_backend *be, int n_tensors, bench_row *r) {
    memset(v, 0, sizeof *v);
    v->be = be;
    tsl_ctx_params cp = {(size_t)n_tensors * 1024 + (1u << 20), true};
    v->ctx = tsl_ctx_new(cp);
    if (!v->ctx) snprintf(r->error, sizeof r->error, "cannot allocate a %zu-byte context", cp.mem_size);
    return v->ctx;
}

/* Device memory for every tensor of the set that has none: a buffer of
 * its own for each large one, so no allocation exceeds the device's largest
 * (maxMemoryAllocationSize) however many GiB a row needs, and one buffer
 * for all the small ones. */
static bool vkb_alloc(vkb_set *v, bench_row *r) {
    tsl_error err;
    bool small = false;
    for (tsl_tensor *t = tsl_ctx_first_tensor(v->ctx); t; t = tsl_ctx_next_tensor(v->ctx, t)) {
        if (t->data || t->view_src) continue;
        if (tsl_nbytes(t) < ((size_t)16 << 20)) {
            small = true;
            continue;
        }
        if (v->n_bufs == VKB_MAX_BUFS) {
            snprintf(r->error, sizeof r->error, "more than %d large tensors", VKB_MAX_BUFS - 1);
            return false;
        }
        tsl_buffer *b = tsl_buffer_alloc(v->be, tsl_nbytes(t), &err);
        if (b && tsl_buffer_place(b, t, 0, &err) != TSL_SUCCESS) {
            tsl_buffer_free(b);
            b = NULL;
        }
        if (!b) {
            tsl_error_format(&err, r->error, sizeof r->error);
            return false;
        }
        v->bufs[v->n_bufs++] = b;
    }
    if (small) {
        tsl_buffer *b = v->n_bufs < VKB_MAX_BUFS ? tsl_buffer_alloc_ctx(v->be, v->ctx, &err) : NULL;
        if (!b) {
            tsl_error_format(&err, r->error, sizeof r->error);
            return false;
        }
        v->bufs[v->n_bufs++] = b;
    }
    return true;
}

static void vkb_free(vkb_set *v) {
    for (int i = 0; i < v->n_bufs; i++) tsl_buffer_free(v->bufs[i]);
    tsl_ctx_free(v->ctx);
    memset(v, 0, sizeof *v);
}

static bool vkb_set_data(tsl_tensor *t, const void *src, size_t n, bench_row *r) {
    tsl_error err;
    if (tsl_tensor_set(t, src, 0, n, &err) == TSL_SUCCESS) return true;
    tsl_error_format(&err, r->error, sizeof r->error);
    return false;
}

/* Random contents for t, made on the host and uploaded. */
static bool vkb_fill(bench_state *st, tsl_tensor *t, bench_row *r) {
    size_t n = tsl_nbytes(t);
    void *h = malloc(n ? n : 1);
    if (!h) {
        snprintf(r->error, sizeof r->error, "cannot allocate %zu host bytes", n);
        return false;
    }
    bench_fill_bytes(t->type, h, n, &st->rng);
    bool ok = vkb_set_data(t, h, n, r);
    free(h);
    return ok;
}

/* Computes g twice to warm up (kernel builds, first touches), then reps
 * timed times; seconds per run divided by per_run. GPU time when the
 * backend has timestamps, else wall time. */
static bool vkb_time_graph(bench_state *st, tsl_graph *g, bench_row *r, int reps, int per_run) {
    tsl_error err;
    tsl_vulkan_stats vs;
    double t[32];
    if (reps > 31) reps = 31;
    bool gpu = tsl_backend_vulkan_stats(st->be, &vs) == TSL_SUCCESS && vs.gpu_timing;
    /* Warm-up: at least two runs (the first builds the kernels) and, on a
     * full run, a quarter of a second of them. A GPU left idle while the
     * row's data was uploaded drops its clocks, and the governor takes tens
     * of milliseconds of load to raise them again: timed right away, an
     * arithmetic-bound kernel read at half its rate on the H200 (the
     * memory-bound rows barely moved). */
    const double warm_s = st->o.quick ? 0.0 : 0.25, w0 = bench_now();
    for (int i = 0; i < 2 || bench_now() - w0 < warm_s; i++) {
        if (tsl_backend_graph_compute(st->be, g, &err) != TSL_SUCCESS) {
            tsl_error_format(&err, r->error, sizeof r->error);
            return false;
        }
    }
    for (int i = 2; i < reps + 2; i++) {
        double t0 = bench_now();
        tsl_status s = tsl_backend_graph_compute(st->be, g, &err);
        double dt = bench_now() - t0;
        if (s != TSL_SUCCESS) {
            tsl_error_format(&err, r->error, sizeof r->error);
            return false;
        }
        if (gpu && tsl_backend_vulkan_stats(st->be, &vs) == TSL_SUCCESS && vs.last_gpu_us > 0)
            dt = vs.last_gpu_us * 1e-6;
        else
            gpu = false; /* one run without a timestamp: the row is wall time (set below) */
        if (i >= 2) t[i - 2] = dt / per_run;
    }
    r->timer = gpu ? "gpu" : "wall";
    bench_stats(t, reps, &r->seconds, &r->min_seconds);
    return true;
}

/* A row must also be right: a kernel that skipped work would make any rate.
 * Checks n entries of y (M x N, column-major as mul_mat makes it) against
 * dot products of w's rows (host bytes of type) and x's columns in double,
 * within 2% of the sum of |terms|: loose enough for a kernel that rounds x to
 * 16 or 8 bits, tight enough to catch a wrong or missing result. */
static bool vkb_check(tsl_type type, const void *w, int64_t M, int64_t K, const float *x, int64_t N, const float *y,
                      int n, bench_row *r) {
    const size_t rb = tsl_row_size(type, K);
    float *row = malloc((size_t)K * sizeof *row);
    if (!row) {
        snprintf(r->error, sizeof r->error, "cannot allocate %lld host floats", (long long)K);
        return false;
    }
    bool ok = true;
    for (int k = 0; k < n && ok; k++) {
        int64_t i = k == 0 ? 0 : k == n - 1 ? M - 1 : (int64_t)((uint64_t)k * 2654435761u % (uint64_t)M);
        int64_t j = N == 1 ? 0 : k == n - 1 ? N - 1 : (int64_t)((uint64_t)k * 40503u % (uint64_t)N);
        tsl_dequantize(type, (const char *)w + (size_t)i * rb, row, K);
        double dot = 0, mag = 0;
        for (int64_t e = 0; e < K; e++) {
            double t = (double)row[e] * (double)x[(size_t)j * (size_t)K + (size_t)e];
            dot += t;
            mag += fabs(t);
        }
        double got = y[(size_t)j * (size_t)M + (size_t)i];
        if (!(fabs(got - dot) <= 2e-2 * mag + 1e-6)) {
            snprintf(r->error, sizeof r->error, "wrong result: [%lld, %lld] is %g, the host computes %g", (long long)i,
                     (long long)j, got, dot);
            ok = false;
        }
    }
    free(row);
    return ok;
}

static void vkb_ceiling_copy(bench_state *st, uint64_t max_range) {
    const size_t total = st->o.quick ? (size_t)64 << 20 : (size_t)1 << 30;
    size_t piece = (size_t)256 << 20;
    while (piece > (size_t)1 << 20 && (uint64_t)piece + 4096 > max_range) piece /= 2;
    if (piece > total) piece = total;
    const int count = (int)(total / piece);
    char shape[64];
    snprintf(shape, sizeof shape, "%d x %zu MiB", count, piece >> 20);
    bench_row r = bench_row_new(st, "ceiling_copy", "f32", shape);
    snprintf(shape, sizeof shape, "host > device %zu MiB", total >> 20);
    bench_row up = bench_row_new(st, "upload", "f32", shape);
    snprintf(shape, sizeof shape, "device > host %zu MiB", total >> 20);
    bench_row down = bench_row_new(st, "download", "f32", shape);
    r.threads = up.threads = down.threads = 0;
    up.timer = down.timer = "wall";
    vkb_set v;
    tsl_tensor *src[64], *dst[64], *outs[64];
    float *host = NULL, *back = NULL;
    if (vkb_ctx(&v, st->be, 3 * count + 4, &r)) {
        for (int i = 0; i < count; i++) {
            src[i] = tsl_new_tensor_1d(v.ctx, TSL_TYPE_F32, (int64_t)(piece / 4));
            dst[i] = tsl_new_tensor_1d(v.ctx, TSL_TYPE_F32, (int64_t)(piece / 4));
            outs[i] = tsl_cpy(v.ctx, src[i], dst[i]);
        }
        tsl_graph *g = tsl_ctx_error(v.ctx) ? NULL : tsl_graph_build(v.ctx, outs, count);
        host = malloc(piece);
        back = malloc(piece);
        if (!host || !back) snprintf(r.error, sizeof r.error, "cannot allocate 2 x %zu host bytes", piece);
        if (bench_ctx_ok(v.ctx, &r) && g && vkb_alloc(&v, &r)) {
            bench_fill_bytes(TSL_TYPE_F32, host, piece, &st->rng);
            /* upload: every piece, a few times (host wall time) */
            double t[8];
            const int reps = st->o.quick ? 2 : 3;
            for (int k = 0; k < reps && !r.error[0]; k++) {
                double t0 = bench_now();
                for (int i = 0; i < count && !r.error[0]; i++) vkb_set_data(src[i], host, piece, &r);
                t[k] = bench_now() - t0;
            }
            if (!r.error[0]) {
                bench_stats(t, reps, &up.seconds, &up.min_seconds);
                up.gbs = (double)total / up.seconds * 1e-9;
            }
            if (!r.error[0] && vkb_time_graph(st, g, &r, st->o.quick ? 3 : 7, 1)) {
                r.seconds = r.min_seconds; /* a ceiling is the best the device did */
                r.gbs = 2.0 * (double)total / r.seconds * 1e-9;
                r.bw_ratio = 1.0;
                st->copy_gbs = r.gbs;
            }
            tsl_error err;
            for (int k = 0; k < reps && !r.error[0]; k++) {
                double t0 = bench_now();
                for (int i = 0; i < count && !r.error[0]; i++)
                    if (tsl_tensor_get(dst[i], back, 0, piece, &err) != TSL_SUCCESS)
                        tsl_error_format(&err, r.error, sizeof r.error);
                t[k] = bench_now() - t0;
                /* the copy kernel really copied (a ceiling from a kernel that
                 * skipped work would flatter every ratio) */
                if (!r.error[0] && memcmp(back, host, piece) != 0)
                    snprintf(r.error, sizeof r.error, "the copy's result differs from its source");
            }
            if (!r.error[0]) {
                bench_stats(t, reps, &down.seconds, &down.min_seconds);
                down.gbs = (double)total / down.seconds * 1e-9;
            }
        }
    }
    if (r.error[0]) {
        snprintf(up.error, sizeof up.error, "not measured: %.180s", r.error);
        snprintf(down.error, sizeof down.error, "not measured: %.180s", r.error);
    }
    free(host);
    free(back);
    vkb_free(&v);
    bench_emit(st, &r);
    if (bench_selected(st, "upload", "f32")) bench_emit(st, &up);
    if (bench_selected(st, "download", "f32")) bench_emit(st, &down);
}

/* Decode on the device: y = W x for as many distinct matrices as make
 * `want` bytes, in one graph (independent nodes: the device runs them
 * together, as it would the Q, K and V projections of a layer). */
static void vkb_mat_vec(bench_state *st, tsl_type type) {
    if (!bench_selected(st, "mat_vec", tsl_type_name(type))) return;
    const int64_t M = st->o.quick ? 1024 : 8192, K = M;
    const size_t wbytes = tsl_row_size(type, K) * (size_t)M;
    const size_t want = st->o.quick ? (size_t)16 << 20 : (size_t)1 << 30;
    int count = (int)((want + wbytes - 1) / wbytes);
    if (count < 2) count = 2;
    if (count > 64) count = 64;
    char shape[64];
    snprintf(shape, sizeof shape, "%lldx%lld x%d (%zu MiB)", (long long)M, (long long)K, count,
             (wbytes * (size_t)count) >> 20);
    bench_row r = bench_row_new(st, "mat_vec", tsl_type_name(type), shape);
    r.threads = 0;
    vkb_set v;
    tsl_tensor *w[64], *outs[64];
    if (vkb_ctx(&v, st->be, 2 * count + 4, &r)) {
        tsl_tensor *x = tsl_new_tensor_2d(v.ctx, TSL_TYPE_F32, K, 1);
        for (int i = 0; i < count; i++) {
            w[i] = tsl_new_tensor_2d(v.ctx, type, K, M);
            outs[i] = tsl_mul_mat(v.ctx, w[i], x);
        }
        tsl_graph *g = tsl_ctx_error(v.ctx) ? NULL : tsl_graph_build(v.ctx, outs, count);
        /* one random matrix uploaded into every slot: the device reads
         * `count` distinct buffers all the same */
        void *h = malloc(wbytes);
        float *xh = malloc((size_t)K * sizeof *xh), *y = malloc((size_t)M * sizeof *y);
        if (!h || !xh || !y) snprintf(r.error, sizeof r.error, "cannot allocate %zu host bytes", wbytes);
        if (bench_ctx_ok(v.ctx, &r) && g && vkb_alloc(&v, &r)) {
            bench_fill_bytes(type, h, wbytes, &st->rng);
            bench_fill_bytes(TSL_TYPE_F32, xh, (size_t)K * sizeof *xh, &st->rng);
            vkb_set_data(x, xh, (size_t)K * sizeof *xh, &r);
            for (int i = 0; i < count && !r.error[0]; i++) vkb_set_data(w[i], h, wbytes, &r);
            if (!r.error[0] && vkb_time_graph(st, g, &r, st->o.quick ? 3 : 9, count))
                bench_rates(st, &r, 2.0 * (double)M * (double)K, (double)wbytes);
            /* the first and the last product of the graph, checked */
            tsl_error err;
            for (int c = 0; c < 2 && !r.error[0]; c++) {
                if (tsl_tensor_get(outs[c ? count - 1 : 0], y, 0, (size_t)M * sizeof *y, &err) != TSL_SUCCESS)
                    tsl_error_format(&err, r.error, sizeof r.error);
                else
                    vkb_check(type, h, M, K, xh, 1, y, 16, &r);
            }
        }
        free(h);
        free(xh);
        free(y);
    }
    vkb_free(&v);
    bench_emit(st, &r);
}

/* mul_mat n^3: weights of `type` times activations of `bt` (F32, or F16
 * with F16 weights: the row is then named "f16/f16"). */
static void vkb_mul_mat(bench_state *st, tsl_type type, tsl_type bt, int64_t n) {
    const char *tname = bt == TSL_TYPE_F16 ? "f16/f16" : tsl_type_name(type);
    if (!bench_selected(st, "mul_mat", tname)) return;
    const int64_t M = n, N = n, K = n;
    char shape[64];
    snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
    bench_row r = bench_row_new(st, "mul_mat", tname, shape);
    r.threads = 0;
    const size_t bsz = tsl_type_block_size(bt);
    const size_t bytes = tsl_row_size(type, K) * (size_t)M + (size_t)(K * N) * bsz + (size_t)(M * N) * 4;
    vkb_set v;
    if (vkb_ctx(&v, st->be, 8, &r)) {
        tsl_tensor *a = tsl_new_tensor_2d(v.ctx, type, K, M);
        tsl_tensor *b = tsl_new_tensor_2d(v.ctx, bt, K, N);
        tsl_tensor *c = tsl_mul_mat(v.ctx, a, b);
        tsl_graph *g = c ? tsl_graph_build(v.ctx, &c, 1) : NULL;
        const size_t ab = tsl_row_size(type, K) * (size_t)M, bb = (size_t)(K * N) * bsz;
        void *ah = malloc(ab), *bh = malloc(bb);
        float *bf = malloc((size_t)(K * N) * sizeof *bf), *ch = malloc((size_t)(M * N) * sizeof *ch);
        if (!ah || !bh || !bf || !ch) snprintf(r.error, sizeof r.error, "cannot allocate %zu host bytes", bytes);
        if (bench_ctx_ok(v.ctx, &r) && g && vkb_alloc(&v, &r)) {
            bench_fill_bytes(type, ah, ab, &st->rng);
            bench_fill_bytes(bt, bh, bb, &st->rng);
            for (int64_t e = 0; e < K * N; e++)
                bf[e] = bt == TSL_TYPE_F16 ? tsl_fp16_to_fp32(((const tsl_fp16_t *)bh)[e]) : ((const float *)bh)[e];
            if (vkb_set_data(a, ah, ab, &r) && vkb_set_data(b, bh, bb, &r) &&
                vkb_time_graph(st, g, &r, st->o.quick ? 3 : 7, 1)) {
                bench_rates(st, &r, 2.0 * (double)M * (double)N * (double)K, (double)bytes);
                tsl_error err;
                if (tsl_tensor_get(c, ch, 0, (size_t)(M * N) * sizeof *ch, &err) != TSL_SUCCESS)
                    tsl_error_format(&err, r.error, sizeof r.error);
                else if (!getenv("TSL_BENCH_NOCHECK"))
                    vkb_check(type, ah, M, K, bf, N, ch, 16, &r);
            }
        }
        free(ah);
        free(bh);
        free(bf);
        free(ch);
    }
    vkb_free(&v);
    bench_emit(st, &r);
}

/* Host cost of encoding: a chain of 1,000 adds on 256 floats (the device
 * work is nothing, so the host side is all there is), in 9 command buffers
 * encoded by the calling thread and 8 workers, on a backend of its own. */
static void vkb_encode(bench_state *st, int device_index, bool reuse) {
    const char *op = reuse ? "encode_reused" : "encode";
    if (!bench_selected(st, op, "f32")) return;
    enum { NODES = 1000, CBS = 9 };
    char shape[64];
    snprintf(shape, sizeof shape, "%d nodes x add [256], %d cb", NODES, CBS);
    bench_row r = bench_row_new(st, op, "f32", shape);
    r.threads = CBS;
    r.timer = "wall";
    tsl_error err;
    tsl_backend *be = tsl_backend_vulkan_new(device_index, &err);
    if (!be || tsl_backend_vulkan_set_command_buffers(be, CBS, &err) != TSL_SUCCESS) {
        tsl_error_format(&err, r.error, sizeof r.error);
        tsl_backend_free(be);
        bench_emit(st, &r);
        return;
    }
    /* encode: every compute records its commands; encode_reused: the same
     * graph computed again submits the command buffers recorded before */
    tsl_backend_vulkan_set_reuse(be, reuse);
    vkb_set v;
    if (vkb_ctx(&v, be, NODES + 4, &r)) {
        tsl_tensor *x = tsl_new_tensor_1d(v.ctx, TSL_TYPE_F32, 256), *b = tsl_new_tensor_1d(v.ctx, TSL_TYPE_F32, 256);
        tsl_tensor *out = x;
        for (int i = 0; i < NODES; i++) out = tsl_add(v.ctx, out, b);
        tsl_graph *g = out ? tsl_graph_build(v.ctx, &out, 1) : NULL;
        if (bench_ctx_ok(v.ctx, &r) && g && vkb_alloc(&v, &r) && vkb_fill(st, x, &r) && vkb_fill(st, b, &r)) {
            const int reps = st->o.quick ? 7 : 31;
            double enc[32], wall[32], med_w, min_w;
            tsl_vulkan_stats vs;
            for (int i = 0; i < reps + 3 && !r.error[0]; i++) {
                double t0 = bench_now();
                if (tsl_backend_graph_compute(be, g, &err) != TSL_SUCCESS) {
                    tsl_error_format(&err, r.error, sizeof r.error);
                    break;
                }
                double dt = bench_now() - t0;
                tsl_backend_vulkan_stats(be, &vs);
                if (i >= 3 && reuse != (vs.reused_command_buffers >= (uint64_t)(i - 2) * CBS)) {
                    snprintf(r.error, sizeof r.error, "command buffers %sreused (%llu so far)", reuse ? "not " : "",
                             (unsigned long long)vs.reused_command_buffers);
                    break;
                }
                if (vs.last_command_buffers != CBS) {
                    snprintf(r.error, sizeof r.error, "the graph used %d command buffers, not %d",
                             vs.last_command_buffers, CBS);
                    break;
                }
                if (i >= 3) {
                    enc[i - 3] = vs.last_encode_us_per_node * 1e-6 * NODES;
                    wall[i - 3] = dt;
                }
            }
            if (!r.error[0]) {
                bench_stats(enc, reps, &r.seconds, &r.min_seconds);
                bench_stats(wall, reps, &med_w, &min_w);
                r.ns_per_node = r.seconds / NODES * 1e9;
                r.share = r.seconds / med_w;
            }
        }
    }
    vkb_free(&v);
    tsl_backend_free(be);
    bench_emit(st, &r);
}

static int bench_vulkan(bench_state *st) {
    tsl_error err;
    st->be = tsl_backend_vulkan_new(-1, &err);
    tsl_vulkan_device_info info;
    if (!st->be || tsl_backend_vulkan_info(st->be, &info, &err) != TSL_SUCCESS) {
        char line[512];
        tsl_error_format(&err, line, sizeof line);
        fprintf(stderr, "tensile bench: cannot create the Vulkan backend: %s\n", line);
        tsl_backend_free(st->be);
        return 1;
    }
    tsl_vulkan_stats vs;
    bool gpu = tsl_backend_vulkan_stats(st->be, &vs) == TSL_SUCCESS && vs.gpu_timing;
    /* the header goes to stderr with --json, so stdout stays one object a line */
    fprintf(st->o.json ? stderr : stdout, "tensile bench ops: %s %s (%s, %s), %s time%s%s\n", tsl_backend_name(st->be),
            info.name, info.type, info.driver, gpu ? "GPU timestamp" : "wall", st->o.quick ? " (quick)" : "",
            st->o.ref_tflops > 0 ? "" : "; mul_mat rates alone (no --ref-tflops)");
    st->fma_gflops = st->o.ref_tflops * 1e3; /* flops_ratio against the caller's rate, if any */

    vkb_ceiling_copy(st, info.max_storage_buffer_range);
    const tsl_type mv_types[] = {TSL_TYPE_F32, TSL_TYPE_F16, TSL_TYPE_Q8_0, TSL_TYPE_Q4_0};
    for (int i = 0; i < 4; i++) vkb_mat_vec(st, mv_types[i]);
    const tsl_type mm_types[] = {TSL_TYPE_F16, TSL_TYPE_Q8_0, TSL_TYPE_Q4_0, TSL_TYPE_F32};
    for (int i = 0; i < 4; i++) vkb_mul_mat(st, mm_types[i], TSL_TYPE_F32, st->o.quick ? 256 : 4096);
    vkb_mul_mat(st, TSL_TYPE_F16, TSL_TYPE_F16, st->o.quick ? 256 : 4096);
    vkb_encode(st, info.index, false);
    vkb_encode(st, info.index, true);

    tsl_backend_free(st->be);
    return st->failures ? 1 : 0;
}

/* ---- command ----------------------------------------------------------------- */



/* The cost of the fault contract's per-compute checks: the resolve pass
 * (every buffer lookup, the ledger, the injection and kernel-cache checks)
 * that runs before any node, timed by the backend (resolve_ns), against the
 * compute's own time. This is an upper bound on the checks' cost, since the
 * lookups would be needed anyway. Two graphs: 1,000 small nodes (a chain of
 * adds on 256 floats), where the checks weigh most, and a llama-shaped block
 * (attention + SwiGLU FFN, embd 512, 64 tokens). */
static void bench_fault_checks(bench_state *st, bool llama) {
    const char *shape = llama ? "llama block (embd 512, 64 tok)" : "1000 nodes x add [256]";
    if (!bench_selected(st, "fault_checks", "f32")) return;
    bench_row r = bench_row_new(st, "fault_checks", "f32", shape);
    tsl_context *ctx = bench_ctx((size_t)64 << 20, 4096, &r);
    tsl_graph *g = NULL;
    if (ctx) {
        tsl_tensor *out = NULL;
        if (!llama) {
            tsl_tensor *x = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 256), *b = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 256);
            if (x && b) {
                bench_fill(x, &st->rng);
                bench_fill(b, &st->rng);
            }
            out = x;
            for (int i = 0; i < 1000; i++) out = tsl_add(ctx, out, b);
        } else {
            enum { E = 512, H = 8, D = 64, T = 64, F = 1408 };
            tsl_tensor *x = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, E, T);
            tsl_tensor *nw = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, E);
            tsl_tensor *wq = tsl_new_tensor_2d(ctx, TSL_TYPE_Q8_0, E, E), *wk = tsl_new_tensor_2d(ctx, TSL_TYPE_Q8_0, E, E);
            tsl_tensor *wv = tsl_new_tensor_2d(ctx, TSL_TYPE_Q8_0, E, E), *wo = tsl_new_tensor_2d(ctx, TSL_TYPE_Q8_0, E, E);
            tsl_tensor *wg = tsl_new_tensor_2d(ctx, TSL_TYPE_Q4_0, E, F), *wu = tsl_new_tensor_2d(ctx, TSL_TYPE_Q4_0, E, F);
            tsl_tensor *wd = tsl_new_tensor_2d(ctx, TSL_TYPE_Q4_0, F, E);
            tsl_tensor *pos = tsl_new_tensor_1d(ctx, TSL_TYPE_I32, T), *mask = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, T, T);
            tsl_tensor *all[] = {x, nw, wq, wk, wv, wo, wg, wu, wd};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                if (all[i]) bench_fill(all[i], &st->rng);
            if (pos && mask) {
                for (int i = 0; i < T; i++) ((int32_t *)pos->data)[i] = i;
                for (int i = 0; i < T; i++)
                    for (int j = 0; j < T; j++) ((float *)mask->data)[i * T + j] = j <= i ? 0.0f : -INFINITY;
            }
            tsl_rope_params rp = tsl_rope_default(D);
            tsl_tensor *h = tsl_mul(ctx, tsl_rms_norm(ctx, x, 1e-5f), nw);
            tsl_tensor *q = tsl_rope(ctx, tsl_reshape_3d(ctx, tsl_mul_mat(ctx, wq, h), D, H, T), pos, NULL, &rp);
            tsl_tensor *k = tsl_rope(ctx, tsl_reshape_3d(ctx, tsl_mul_mat(ctx, wk, h), D, H, T), pos, NULL, &rp);
            tsl_tensor *v = tsl_reshape_3d(ctx, tsl_mul_mat(ctx, wv, h), D, H, T);
            tsl_tensor *kq = tsl_soft_max(ctx, tsl_mul_mat(ctx, tsl_cont(ctx, tsl_permute(ctx, k, 0, 2, 1, 3)),
                                                           tsl_permute(ctx, q, 0, 2, 1, 3)),
                                          mask, 0.125f);
            tsl_tensor *kqv = tsl_mul_mat(ctx, tsl_cont(ctx, tsl_permute(ctx, v, 1, 2, 0, 3)), kq);
            tsl_tensor *att = tsl_cont(ctx, tsl_permute(ctx, kqv, 0, 2, 1, 3));
            tsl_tensor *x1 = tsl_add(ctx, x, tsl_mul_mat(ctx, wo, tsl_reshape_2d(ctx, att, E, T)));
            tsl_tensor *h2 = tsl_mul(ctx, tsl_rms_norm(ctx, x1, 1e-5f), nw);
            out = tsl_add(ctx, x1, tsl_mul_mat(ctx, wd, tsl_swiglu(ctx, tsl_mul_mat(ctx, wg, h2), tsl_mul_mat(ctx, wu, h2))));
        }
        g = out ? tsl_graph_build(ctx, &out, 1) : NULL;
    }
    if (ctx && bench_ctx_ok(ctx, &r) && g) {
        const int reps = st->o.quick ? 5 : 31;
        double tc[32], tr[32], med_c, min_c, med_r, min_r;
        tsl_error err;
        for (int i = 0; i <= reps && !r.error[0]; i++) {
            double t0 = bench_now();
            if (tsl_backend_graph_compute(st->be, g, &err) != TSL_SUCCESS) {
                tsl_error_format(&err, r.error, sizeof r.error);
                break;
            }
            double dt = bench_now() - t0;
            if (i > 0) {
                tc[i - 1] = dt;
                tr[i - 1] = (double)atomic_load(&st->be->resolve_ns) * 1e-9;
            }
        }
        if (!r.error[0]) {
            bench_stats(tc, reps, &med_c, &min_c);
            bench_stats(tr, reps, &med_r, &min_r);
            r.seconds = med_c;
            r.min_seconds = min_c;
            r.ns_per_node = med_r * 1e9 / g->n_nodes;
            r.share = med_r / med_c;
            bench_rates(st, &r, tsl_graph_flops(g), 0);
        }
    }
    tsl_ctx_free(ctx);
    bench_emit(st, &r);
}

static void bench_usage(FILE *f) {
    fprintf(f, "usage: tensile bench ops [--backend cpu|vulkan] [--json] [--threads N] [--quick] [--filter SUBSTR]\n"
               "                         [--ref-tflops X]\n"
               "       tensile bench model -m FILE [--threads N] [--json]   (see tensile bench model --help)\n"
               "  Measures a copy and an FMA ceiling, then mul_mat, mat-vec and bandwidth-bound ops on\n"
               "  the CPU backend, each as a ratio to the ceilings measured in the same run.\n"
               "  --json       one JSON object per line (ceilings included)\n"
               "  --threads N  CPU backend threads (default: online cores)\n"
               "  --quick      small sizes, a few seconds (smoke test; figures not meaningful)\n"
               "  --filter S   only rows whose \"op type\" contains S, or any of S1|S2|... (ceilings always run)\n"
               "  --backend vulkan  the same on the Vulkan device (TSL_VULKAN_DEVICE picks it): a copy\n"
               "               ceiling, upload/download, mat-vec 8192x8192 over 1 GiB of weights, mul_mat\n"
               "               4096^3 (and F16 x F16), host encode time per node (1,000 nodes, 9 command\n"
               "               buffers; again with the recorded command buffers reused); GPU time from\n"
               "               timestamps where the device has them\n"
               "  --ref-tflops X  (vulkan) the matmul rate flops_ratio is against, e.g. torch bf16\n"
               "               measured on the same GPU; without it mul_mat rows give the rate alone\n");
}

int cmd_bench(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "model")) return bench_model(argc - 1, argv + 1);
    if (argc < 2 || strcmp(argv[1], "ops") != 0) {
        if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
            bench_usage(stdout);
            return 0;
        }
        bench_usage(stderr);
        return 2;
    }
    bench_state st;
    memset(&st, 0, sizeof st);
    st.rng = 0x9E3779B97F4A7C15ULL;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    st.o.threads = ncpu > 0 ? (int)ncpu : 1;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            st.o.json = true;
        } else if (!strcmp(argv[i], "--quick")) {
            st.o.quick = true;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            char *end;
            long n = strtol(argv[++i], &end, 10);
            if (*end || n < 1 || n > 256) {
                fprintf(stderr, "tensile bench: --threads wants a number from 1 to 256, got '%s'\n", argv[i]);
                return 2;
            }
            st.o.threads = (int)n;
        } else if (!strcmp(argv[i], "--filter") && i + 1 < argc) {
            st.o.filter = argv[++i];
        } else if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            const char *b = argv[++i];
            if (strcmp(b, "cpu") != 0 && strcmp(b, "vulkan") != 0) {
                fprintf(stderr, "tensile bench: --backend wants cpu or vulkan, got '%s'\n", b);
                return 2;
            }
            st.o.vulkan = !strcmp(b, "vulkan");
        } else if (!strcmp(argv[i], "--ref-tflops") && i + 1 < argc) {
            char *end;
            double x = strtod(argv[++i], &end);
            if (*end || !(x > 0) || !isfinite(x)) {
                fprintf(stderr, "tensile bench: --ref-tflops wants a positive number, got '%s'\n", argv[i]);
                return 2;
            }
            st.o.ref_tflops = x;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            bench_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "tensile bench: unknown option '%s'\n", argv[i]);
            bench_usage(stderr);
            return 2;
        }
    }
    st.o.l3 = cli_l3_bytes();
    if (st.o.vulkan) return bench_vulkan(&st);

    tsl_error err;
    st.be = tsl_backend_cpu_new(st.o.threads, &err);
    if (!st.be) {
        char line[512];
        tsl_error_format(&err, line, sizeof line);
        fprintf(stderr, "tensile bench: cannot create the CPU backend: %s\n", line);
        return 1;
    }
    if (!st.o.json)
        printf("tensile bench ops: %s, %d threads, L3 %zu MiB, simd %s%s\n", tsl_backend_device(st.be),
               st.o.threads, st.o.l3 >> 20, tsl_cpu_simd_name(), st.o.quick ? " (quick)" : "");

    bench_ceiling_copy(&st);
    bench_ceiling_fma(&st);

    const tsl_type mm_types[] = {TSL_TYPE_F32, TSL_TYPE_F16, TSL_TYPE_BF16, TSL_TYPE_Q8_0, TSL_TYPE_Q4_0};
    const int64_t mm = st.o.quick ? 256 : 1024;
    for (int i = 0; i < 5; i++) bench_mul_mat(&st, mm_types[i], mm, mm, mm);

    const tsl_type mv_types[] = {TSL_TYPE_F32, TSL_TYPE_F16, TSL_TYPE_Q8_0, TSL_TYPE_Q4_0};
    const int64_t mv = st.o.quick ? 1024 : 4096;
    for (int i = 0; i < 4; i++) bench_mat_vec(&st, mv_types[i], mv, mv, 1);
    for (int i = 1; i < 4; i++) bench_mat_vec(&st, mv_types[i], mv, mv, 4);

    const size_t bw = st.o.quick ? (size_t)8 << 20 : 4 * st.o.l3;
    for (int w = BW_ADD; w <= BW_CPY_F16; w++) bench_bw_op(&st, w, bw);

    bench_fault_checks(&st, false);
    bench_fault_checks(&st, true);

    tsl_backend_free(st.be);
    return st.failures ? 1 : 0;
}
