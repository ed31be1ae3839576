/*
 * ref.h - double-precision references for every op, and the harness the
 * per-op numerical tests (tests/cpu/test_ops_*.c) share.
 *
 * The references are written from the op definitions in tensile.h (ggml
 * semantics), never from the kernels: naive loops over dense double arrays.
 * Inputs reach them through ref_load(), which reads a tensor element by
 * element through its own byte strides (nb[]), so a view, a permute or a
 * transpose is read exactly as its metadata says, and a kernel that assumes
 * contiguity disagrees with the reference. Quantized values are decoded with
 * tsl_dequantize one block at a time, so "exact" for a quantized type means
 * exact against the library's own codec (which has bit-exact tests of its
 * own against the gguf package).
 *
 * Every case runs on three CPU backends, with 1, 2 and 3 threads: the backend
 * splits rows between threads, and an off-by-one in a split shows up only at
 * some counts (3 threads over a prime number of rows leaves a short tail).
 * Before each run the output is poisoned with NaN bits, or an in-place input
 * is restored, so a thread that skipped its share cannot pass with the values
 * an earlier run left behind.
 *
 * With TSL_TEST_BACKEND=vulkan the same cases run once each on the Vulkan
 * backend instead (tests/vulkan/op_tests.cmake registers those runs), with
 * the same references and tolerances. The tensors are built in host memory
 * as always; for each compute the harness copies every host range the graph
 * touches into one Vulkan buffer, points the tensors there (views, aliases
 * and in-place outputs keep their relative placement, so an in-place case
 * still runs in place on the device), computes, copies everything back and
 * restores the host pointers. The graph goes straight to the Vulkan backend,
 * never through the scheduler, so nothing can fall back to the CPU quietly:
 * each compute node must be supported (else the case fails, unless its op
 * and types are in REF_VK_GAPS, the stated list of what Vulkan does not run,
 * each with its reason and checked to be refused) and the backend must have
 * recorded at least one dispatch per compute node. At the end the Khronos
 * validation layer's error count (TSL_VULKAN_VALIDATE=1) must be 0. Without
 * a Vulkan device the run is skipped (exit code 77), or fails when
 * TSL_REQUIRE_VULKAN is set, as CI sets it. Tensors the graph allocator
 * placed on the device are read and poisoned through tsl_tensor_get/set.
 *
 * A value passes when |got - ref| <= atol + rtol * m, where m is |ref| for
 * most ops and a condition magnitude (sum of |terms|) for reductions and dot
 * products, whose float rounding error scales with the terms and not with
 * the result (a sum that cancels to ~0 is still computed to ~eps * sum|x|).
 * Each test file states its (atol, rtol) per op and type beside the cases,
 * and every op prints one summary line: cases, values, largest error seen and
 * how close it came to the tolerance, so a drift shows before it fails.
 *
 * Trade-offs: cases are small (a few thousand to ~60k values) so the whole
 * suite runs in seconds on two cores under sanitizers; coverage comes from
 * many random shapes (odd sizes, 1s, primes) and layouts rather than size.
 * Large-size behaviour (blocked GEMM paths) is the mul_mat test's job.
 */
#ifndef TSL_TEST_REF_H
#define TSL_TEST_REF_H

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensile/backend.h"
#include "tensile/tensile.h"
#include "test.h"

#define REF_PI 3.14159265358979323846

/* ------------------------------------------------------------------------ */
/* Backends: one per thread count, or the Vulkan backend                     */
/* ------------------------------------------------------------------------ */

#define REF_MAXB 3           /* CPU backends with 1, 2 and 3 threads */
#define REF_NB (ref_nb)      /* backends every case runs on: 3, or 1 on Vulkan */
#define REF_NTH(bi) ((bi) + 1)
#define REF_SKIP 77          /* exit code of a skipped run (ctest SKIP_RETURN_CODE) */

static tsl_backend *ref_be[REF_MAXB];
static int ref_nb = REF_MAXB;
static bool ref_vk;             /* TSL_TEST_BACKEND=vulkan */
static bool ref_vk_coopmat;     /* ... on a device with cooperative matrices */
static tsl_buffer *ref_vk_buf;  /* the device buffer the host tensors visit for a compute */
/* What the current case is, printed with every failure. */
static char ref_case[384];

static inline void ref_describe(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
static inline void ref_describe(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ref_case, sizeof ref_case, fmt, ap);
    va_end(ap);
}

/* Where run nth (REF_NTH(bi)) computed, for messages: "2 threads" or
 * "vulkan0". */
static inline const char *ref_where(int nth) {
    static char buf[48];
    if (ref_vk) return ref_be[0] ? tsl_backend_name(ref_be[0]) : "vulkan";
    snprintf(buf, sizeof buf, "%d thread%s", nth, nth == 1 ? "" : "s");
    return buf;
}

/* "at 1, 2 and 3 threads" or "on vulkan0", for the line a test starts with. */
static inline const char *ref_mode(void) {
    static char buf[64];
    if (!ref_vk) return "at 1, 2 and 3 threads";
    snprintf(buf, sizeof buf, "on %s", ref_be[0] ? tsl_backend_name(ref_be[0]) : "vulkan");
    return buf;
}

/* The seed of a test's case stream: base, mixed with the environment
 * variable TSL_TEST_SEED when it is set, so a run with another seed explores
 * other shapes and values while the default run stays reproducible. */
static inline unsigned long long ref_seed(unsigned long long base) {
    const char *e = getenv("TSL_TEST_SEED");
    unsigned long long s = (base + 1) * 0x9e3779b97f4a7c15ULL;
    if (e && *e) s ^= (strtoull(e, NULL, 10) + 1) * 0xbf58476d1ce4e5b9ULL;
    return s ? s : 1;
}

/* (op, src0 type, src1 type) combinations the Vulkan backend does not run,
 * each with the reason. TSL_TYPE_COUNT matches any type; the list ends at
 * an entry with op TSL_OP_COUNT. A node matching an entry must be refused
 * by supports_op (its case is then counted "not on vulkan" and skipped); an
 * entry that turns out supported fails the run, so the list never claims
 * more than is true. It is empty now: every (op, types) the CPU backend
 * runs has a Vulkan kernel (on a device with 16-bit storage; I8 copies and
 * concat also need 8-bit storage). An entry looks like
 *   {TSL_OP_MUL_MAT, TSL_TYPE_BF16, TSL_TYPE_COUNT, "no BF16-weight kernel: ...", 0, 0}, */
typedef struct ref_vk_gap {
    tsl_op op;
    tsl_type t0, t1;
    const char *why;
    int refused, supported; /* how often it was met each way */
} ref_vk_gap;
static ref_vk_gap REF_VK_GAPS[] = {
    {TSL_OP_COUNT, TSL_TYPE_COUNT, TSL_TYPE_COUNT, NULL, 0, 0}, /* the end */
};

static inline ref_vk_gap *ref_vk_gap_of(const tsl_tensor *n) {
    for (int i = 0; REF_VK_GAPS[i].op != TSL_OP_COUNT; i++) {
        ref_vk_gap *g = &REF_VK_GAPS[i];
        if (g->op != n->op) continue;
        if (g->t0 != TSL_TYPE_COUNT && (!n->src[0] || n->src[0]->type != g->t0)) continue;
        if (g->t1 != TSL_TYPE_COUNT && (!n->src[1] || n->src[1]->type != g->t1)) continue;
        return g;
    }
    return NULL;
}

/* Count the usable Vulkan devices; a machine with only Mesa's lavapipe
 * installed (mesa-vulkan-drivers) gets the loader pointed at its ICD file
 * when nothing else is found, as tests/vulkan/test_vk_ops.c does. */
static inline int ref_vk_devices(void) {
    int n = tsl_vulkan_device_count();
    if (n > 0 || getenv("VK_ICD_FILENAMES") || getenv("VK_DRIVER_FILES")) return n;
    static const char *icd[] = {"/usr/share/vulkan/icd.d/lvp_icd.x86_64.json",
                                "/usr/share/vulkan/icd.d/lvp_icd.aarch64.json"};
    for (size_t i = 0; i < sizeof icd / sizeof icd[0]; i++) {
        FILE *f = fopen(icd[i], "r");
        if (!f) continue;
        fclose(f);
        setenv("VK_DRIVER_FILES", icd[i], 1);
        setenv("VK_ICD_FILENAMES", icd[i], 1);
        return tsl_vulkan_device_count();
    }
    return n;
}

static inline bool ref_require_vulkan(void) {
    const char *e = getenv("TSL_REQUIRE_VULKAN");
    return e && *e && strcmp(e, "0") != 0;
}

/* Start the backends TSL_TEST_BACKEND names (cpu, the default: three CPU
 * backends; vulkan: one Vulkan backend). False (with a message) if they
 * cannot start. With no Vulkan device the process exits with REF_SKIP, or
 * fails when TSL_REQUIRE_VULKAN is set. */
static inline bool ref_setup(void) {
    const char *seed = getenv("TSL_TEST_SEED");
    if (seed && *seed) printf("TSL_TEST_SEED=%s\n", seed);
    const char *which = getenv("TSL_TEST_BACKEND");
    if (which && *which && strcmp(which, "cpu") != 0) {
        if (strcmp(which, "vulkan") != 0) {
            fprintf(stderr, "TSL_TEST_BACKEND=%s: unknown backend (cpu or vulkan)\n", which);
            return false;
        }
        ref_vk = true;
        ref_nb = 1;
        tsl_error err;
        tsl_error_clear(&err);
        int n = ref_vk_devices();
        ref_be[0] = n > 0 ? tsl_backend_vulkan_new(-1, &err) : NULL;
        if (!ref_be[0]) {
            char line[512] = "no Vulkan device found";
            if (n > 0 || err.message[0]) tsl_error_format(&err, line, sizeof line);
            if (ref_require_vulkan()) {
                fprintf(stderr, "FAIL: TSL_REQUIRE_VULKAN is set and there is no Vulkan backend: %s\n", line);
                return false;
            }
            printf("skipped: no Vulkan backend (%s)\n", line);
            exit(REF_SKIP);
        }
        tsl_vulkan_device_info info;
        if (tsl_backend_vulkan_info(ref_be[0], &info, &err) == TSL_SUCCESS) {
            printf("backend %s: %s (%s)%s%s\n", tsl_backend_name(ref_be[0]), info.name, info.type,
                   getenv("TSL_VULKAN_VALIDATE") && strcmp(getenv("TSL_VULKAN_VALIDATE"), "0") ? ", validation layer on" : "",
                   info.cooperative_matrix ? ", cooperative matrices" : "");
            ref_vk_coopmat = info.cooperative_matrix;
        }
        return true;
    }
    for (int bi = 0; bi < REF_NB; bi++) {
        tsl_error err;
        tsl_error_clear(&err);
        ref_be[bi] = tsl_backend_cpu_new(REF_NTH(bi), &err);
        if (!ref_be[bi]) {
            char line[512];
            tsl_error_format(&err, line, sizeof line);
            fprintf(stderr, "cannot start a CPU backend with %d threads: %s\n", REF_NTH(bi), line);
            return false;
        }
    }
    return true;
}

/* Free the backends. On Vulkan, first the checks that belong to the whole
 * run: no validation-layer error, and REF_VK_GAPS exact (an entry met as
 * supported is stale). A failure there counts as a failed test. */
static inline void ref_teardown(void) {
    if (ref_vk && ref_be[0]) {
        tsl_vulkan_stats vs;
        if (tsl_backend_vulkan_stats(ref_be[0], &vs) == TSL_SUCCESS) {
            printf("%s: %llu computes, %llu dispatches, %llu validation errors\n", tsl_backend_name(ref_be[0]),
                   (unsigned long long)vs.computes, (unsigned long long)vs.dispatches,
                   (unsigned long long)vs.validation_errors);
            if (vs.validation_errors) {
                fprintf(stderr, "FAIL: the validation layer reported %llu errors\n",
                        (unsigned long long)vs.validation_errors);
                test_n_failed++;
            }
        } else {
            fprintf(stderr, "FAIL: tsl_backend_vulkan_stats failed\n");
            test_n_failed++;
        }
        for (int i = 0; REF_VK_GAPS[i].op != TSL_OP_COUNT; i++) {
            const ref_vk_gap *g = &REF_VK_GAPS[i];
            if (g->refused)
                printf("not on %s (%d nodes): %s %s x %s: %s\n", tsl_backend_name(ref_be[0]), g->refused,
                       tsl_op_name(g->op), g->t0 == TSL_TYPE_COUNT ? "any" : tsl_type_name(g->t0),
                       g->t1 == TSL_TYPE_COUNT ? "any" : tsl_type_name(g->t1), g->why);
            if (g->supported) {
                fprintf(stderr, "FAIL: REF_VK_GAPS is stale: %s %s x %s is supported now (%d nodes); remove it\n",
                        tsl_op_name(g->op), g->t0 == TSL_TYPE_COUNT ? "any" : tsl_type_name(g->t0),
                        g->t1 == TSL_TYPE_COUNT ? "any" : tsl_type_name(g->t1), g->supported);
                test_n_failed++;
            }
        }
    }
    tsl_buffer_free(ref_vk_buf);
    ref_vk_buf = NULL;
    for (int bi = 0; bi < REF_MAXB; bi++) {
        tsl_backend_free(ref_be[bi]);
        ref_be[bi] = NULL;
    }
}

/* ------------------------------------------------------------------------ */
/* Per-op statistics, printed as one line                                    */
/* ------------------------------------------------------------------------ */

typedef struct ref_stats {
    const char *op;
    const char *tol;    /* the tolerance as stated, for the summary line */
    int cases;          /* graphs built */
    int runs;           /* computes checked (cases x thread counts) */
    int failed_runs;    /* computes that failed or disagreed */
    int rejected;       /* cases the op refused at build time, as its documentation allows */
    int not_on_vk;      /* runs skipped: an (op, type) of REF_VK_GAPS, refused by supports_op */
    long long values;   /* values compared */
    double max_err;     /* largest |got - ref| */
    double max_ratio;   /* largest |got - ref| / tolerance */
} ref_stats;

static inline void ref_stats_print(const ref_stats *st) {
    char rej[48] = "", gap[48] = "";
    if (st->rejected) snprintf(rej, sizeof rej, ", %d refused", st->rejected);
    if (st->not_on_vk) snprintf(gap, sizeof gap, ", %d not on vulkan", st->not_on_vk);
    printf("  %-26s %4d cases%s%s, %5d runs, %9lld values, max |err| %-9.3g (%.3f of tol %s)%s\n", st->op,
           st->cases, rej, gap, st->runs, st->values, st->max_err, st->max_ratio, st->tol ? st->tol : "",
           st->failed_runs ? "  FAILED" : "");
    CHECKF(st->runs > 0 || st->not_on_vk > 0, "%s: no case ran", st->op);
}

/* ------------------------------------------------------------------------ */
/* Random shapes and tensors                                                 */
/* ------------------------------------------------------------------------ */

/* Uniform integer in [lo, hi]. */
static inline int64_t ref_rand_int(unsigned long long *rng, int64_t lo, int64_t hi) {
    return lo + (int64_t)(test_rand_u64(rng) % (unsigned long long)(hi - lo + 1));
}

static inline int64_t ref_nel(const int64_t ne[4]) { return ne[0] * ne[1] * ne[2] * ne[3]; }

/* Dense index of (i0, i1, i2, i3) in an array of shape ne (ne[0] fastest). */
static inline int64_t ref_ix(const int64_t ne[4], int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return i0 + ne[0] * (i1 + ne[1] * (i2 + ne[2] * i3));
}

/* A random shape of n_dims dimensions (the rest 1): ne[0] in 1..70 (or
 * mult * 1..3 when mult > 1, for block types), ne[1] in 1..70, ne[2] 1..7,
 * ne[3] 1..3, then shrunk until it holds at most max_elems values. */
static inline void ref_rand_shape(unsigned long long *rng, int n_dims, int64_t mult, int64_t max_elems,
                                  int64_t ne[4]) {
    ne[0] = mult > 1 ? mult * ref_rand_int(rng, 1, 3) : ref_rand_int(rng, 1, 70);
    ne[1] = n_dims > 1 ? ref_rand_int(rng, 1, 70) : 1;
    ne[2] = n_dims > 2 ? ref_rand_int(rng, 1, 7) : 1;
    ne[3] = n_dims > 3 ? ref_rand_int(rng, 1, 3) : 1;
    while (ref_nel(ne) > max_elems) {
        int big = 1;
        for (int i = 2; i < 4; i++)
            if (ne[i] > ne[big]) big = i;
        if (ne[big] > 1)
            ne[big] = (ne[big] + 1) / 2;
        else if (mult <= 1 && ne[0] > 1)
            ne[0] = (ne[0] + 1) / 2;
        else
            break;
    }
}

/* How a test tensor is laid out in memory. Every layout but CONTIG is a view
 * of a larger root tensor, whose padding holds random values too, so a
 * kernel that reads past a row or ignores a stride reads garbage. */
typedef enum ref_layout {
    REF_CONTIG,     /* a plain contiguous tensor */
    REF_STRIDED,    /* view_4d of a padded root: rows dense, row/plane strides larger */
    REF_PERMUTED,   /* dims 1..3 permuted (tsl_permute) of a padded root: rows dense */
    REF_TRANSPOSED, /* dim 0 taken from another dim (nb[0] != element size); not for block types */
    REF_NLAYOUT
} ref_layout;

static inline const char *ref_layout_name(ref_layout l) {
    switch (l) {
    case REF_CONTIG: return "contig";
    case REF_STRIDED: return "strided";
    case REF_PERMUTED: return "permuted";
    case REF_TRANSPOSED: return "transposed";
    default: return "?";
    }
}

static inline tsl_tensor *ref_root(const tsl_tensor *t) { return t->view_src ? t->view_src : (tsl_tensor *)t; }

/* Fill every byte of t's root with random values in [lo, hi): floats
 * converted to the root's type (quantized with tsl_quantize), integers
 * rounded down (I8, I16, I32, I64), doubles for F64. */
static inline void ref_fill(tsl_tensor *t, unsigned long long *rng, float lo, float hi) {
    tsl_tensor *r = ref_root(t);
    int64_t n = tsl_nelements(r);
    float *f = (float *)malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) f[i] = test_rand_f(rng, lo, hi);
    switch (r->type) {
    case TSL_TYPE_I32:
        for (int64_t i = 0; i < n; i++) ((int32_t *)r->data)[i] = (int32_t)floorf(f[i]);
        break;
    case TSL_TYPE_I16:
        for (int64_t i = 0; i < n; i++) ((int16_t *)r->data)[i] = (int16_t)floorf(f[i]);
        break;
    case TSL_TYPE_I8:
        for (int64_t i = 0; i < n; i++) ((int8_t *)r->data)[i] = (int8_t)floorf(f[i]);
        break;
    case TSL_TYPE_I64:
        for (int64_t i = 0; i < n; i++) ((int64_t *)r->data)[i] = (int64_t)floorf(f[i]) * 1000003;
        break;
    case TSL_TYPE_F64:
        for (int64_t i = 0; i < n; i++) ((double *)r->data)[i] = (double)f[i] / 3.0;
        break;
    default:
        if (tsl_quantize(r->type, f, r->data, n) == 0 && n > 0) CHECKF(0, "ref_fill: cannot fill a %s tensor", tsl_type_name(r->type));
        break;
    }
    free(f);
}

/* A tensor of shape ne in layout l, filled with uniform values in [lo, hi)
 * (the root's padding included). Block types ask for a multiple of the block
 * length in ne[0]; REF_TRANSPOSED of a block type falls back to PERMUTED. */
static inline tsl_tensor *ref_tensor(tsl_context *ctx, tsl_type type, const int64_t ne[4], ref_layout l,
                                     unsigned long long *rng, float lo, float hi) {
    const int64_t bl = tsl_type_block_len(type);
    if (l == REF_TRANSPOSED && bl > 1) l = REF_PERMUTED;
    int perm[4] = {0, 1, 2, 3}; /* dim i of the stored tensor becomes dim perm[i] of the result */
    if (l == REF_PERMUTED || l == REF_TRANSPOSED) {
        int first = l == REF_PERMUTED ? 1 : 0;
        for (;;) {
            for (int i = 3; i > first; i--) {
                int j = first + (int)ref_rand_int(rng, 0, i - first);
                int tmp = perm[i];
                perm[i] = perm[j];
                perm[j] = tmp;
            }
            if (l == REF_TRANSPOSED ? perm[0] != 0 : (perm[1] != 1 || perm[2] != 2 || perm[3] != 3)) break;
        }
    }
    int64_t sne[4], pad[4] = {0, 0, 0, 0}, off[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) sne[i] = ne[perm[i]];
    if (l != REF_CONTIG) {
        /* pad[0] > 0 makes the rows strided even when dims 2, 3 are 1 */
        pad[0] = (l == REF_STRIDED || ref_rand_int(rng, 0, 1)) ? bl * ref_rand_int(rng, 1, 2) : 0;
        pad[1] = ref_rand_int(rng, 0, 2);
        pad[2] = ref_rand_int(rng, 0, 1);
        pad[3] = ref_rand_int(rng, 0, 1);
        for (int i = 0; i < 4; i++) off[i] = (i == 0 ? bl : 1) * ref_rand_int(rng, 0, pad[i] / (i == 0 ? bl : 1));
    }
    tsl_tensor *root = tsl_new_tensor_4d(ctx, type, sne[0] + pad[0], sne[1] + pad[1], sne[2] + pad[2], sne[3] + pad[3]);
    if (!root) return NULL;
    ref_fill(root, rng, lo, hi);
    tsl_tensor *t = root;
    if (pad[0] || pad[1] || pad[2] || pad[3]) {
        /* the lowest-rank view call that can express it, so every view_Nd is exercised */
        size_t offs = (size_t)(off[0] / bl) * root->nb[0] + (size_t)off[1] * root->nb[1] +
                      (size_t)off[2] * root->nb[2] + (size_t)off[3] * root->nb[3];
        if (sne[1] == 1 && sne[2] == 1 && sne[3] == 1)
            t = tsl_view_1d(ctx, root, sne[0], offs);
        else if (sne[2] == 1 && sne[3] == 1)
            t = tsl_view_2d(ctx, root, sne[0], sne[1], root->nb[1], offs);
        else if (sne[3] == 1)
            t = tsl_view_3d(ctx, root, sne[0], sne[1], sne[2], root->nb[1], root->nb[2], offs);
        else
            t = tsl_view_4d(ctx, root, sne[0], sne[1], sne[2], sne[3], root->nb[1], root->nb[2], root->nb[3], offs);
    }
    if (t && (perm[0] != 0 || perm[1] != 1 || perm[2] != 2 || perm[3] != 3))
        t = tsl_permute(ctx, t, perm[0], perm[1], perm[2], perm[3]);
    if (t) {
        for (int i = 0; i < 4; i++)
            CHECKF(t->ne[i] == ne[i], "ref_tensor: %s layout gave ne[%d] = %lld, wanted %lld", ref_layout_name(l), i,
                   (long long)t->ne[i], (long long)ne[i]);
    }
    return t;
}

/* A contiguous context with data; mb megabytes of arena. */
static inline tsl_context *ref_ctx(size_t mb) {
    tsl_ctx_params p = {mb << 20, false};
    tsl_context *ctx = tsl_ctx_new(p);
    CHECKF(ctx != NULL, "tsl_ctx_new(%zu MB) failed", mb);
    return ctx;
}

/* ------------------------------------------------------------------------ */
/* Reading and writing through strides                                       */
/* ------------------------------------------------------------------------ */

/* Address of element (or, for block types, of the block holding) i0.. */
static inline char *ref_addr(const tsl_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const int64_t bl = tsl_type_block_len(t->type);
    return (char *)t->data + (size_t)(i0 / bl) * t->nb[0] + (size_t)i1 * t->nb[1] + (size_t)i2 * t->nb[2] +
           (size_t)i3 * t->nb[3];
}

static inline double ref_get(const tsl_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const char *p = ref_addr(t, i0, i1, i2, i3);
    switch (t->type) {
    case TSL_TYPE_F32: { float v; memcpy(&v, p, 4); return v; }
    case TSL_TYPE_F16: { tsl_fp16_t h; memcpy(&h, p, 2); return tsl_fp16_to_fp32(h); }
    case TSL_TYPE_BF16: { tsl_bf16_t h; memcpy(&h, p, 2); return tsl_bf16_to_fp32(h); }
    case TSL_TYPE_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    default:
        if (tsl_type_is_quantized(t->type)) {
            float blk[64];
            const int64_t bl = tsl_type_block_len(t->type);
            if (bl > 64 || tsl_dequantize(t->type, p, blk, bl) == 0) return NAN;
            return blk[i0 % bl];
        }
        return NAN;
    }
}

static inline void ref_set(tsl_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3, double v) {
    char *p = ref_addr(t, i0, i1, i2, i3);
    switch (t->type) {
    case TSL_TYPE_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
    case TSL_TYPE_F16: { tsl_fp16_t h = tsl_fp32_to_fp16((float)v); memcpy(p, &h, 2); break; }
    case TSL_TYPE_BF16: { tsl_bf16_t h = tsl_fp32_to_bf16((float)v); memcpy(p, &h, 2); break; }
    case TSL_TYPE_I32: { int32_t i = (int32_t)v; memcpy(p, &i, 4); break; }
    default: CHECKF(0, "ref_set: type %s not settable per element", tsl_type_name(t->type)); break;
    }
}

/* A dense double copy of t (shape t->ne, ne[0] fastest), read through t's
 * strides. The caller frees it. */
static inline double *ref_load(const tsl_tensor *t) {
    const int64_t n = tsl_nelements(t);
    double *v = (double *)malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    const int64_t bl = tsl_type_block_len(t->type);
    float blk[64];
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < t->ne[0]; i0++) {
                    double x;
                    if (bl > 1) {
                        if (i0 % bl == 0) tsl_dequantize(t->type, ref_addr(t, i0, i1, i2, i3), blk, bl);
                        x = blk[i0 % bl];
                    } else {
                        x = ref_get(t, i0, i1, i2, i3);
                    }
                    v[ref_ix(t->ne, i0, i1, i2, i3)] = x;
                }
    return v;
}

/* Is t's memory readable from the host (arena or a host buffer)? Tensors
 * the graph allocator placed on a device are not. */
static inline bool ref_on_host(const tsl_tensor *t) {
    const tsl_buffer *b = t->buffer ? t->buffer : ref_root(t)->buffer;
    return !b || tsl_buffer_host_ptr(b) != NULL;
}

/* t itself when it is host memory; otherwise *shadow, a copy of t's
 * metadata whose data points at a host copy of the bytes t spans (*mem, to
 * free), so ref_get / ref_addr read it as they read any host tensor. */
static inline const tsl_tensor *ref_readable(const tsl_tensor *t, tsl_tensor *shadow, void **mem) {
    *mem = NULL;
    if (ref_on_host(t)) return t;
    const size_t n = tsl_nbytes(t);
    *mem = calloc(n ? n : 1, 1);
    tsl_error err;
    tsl_error_clear(&err);
    if (tsl_tensor_get(t, *mem, 0, n, &err) != TSL_SUCCESS) {
        char line[512];
        tsl_error_format(&err, line, sizeof line);
        CHECKF(0, "%s: cannot read '%s' back from its device: %s", ref_case, t->name, line);
    }
    *shadow = *t;
    shadow->data = *mem;
    shadow->buffer = NULL;
    shadow->view_src = NULL;
    return shadow;
}

/* Overwrite every element (block) t covers with all-ones bits: NaN for the
 * float types and for a block's fp16 scale, -1 for I32. */
static inline void ref_poison(tsl_tensor *t) {
    const int64_t bl = tsl_type_block_len(t->type);
    const size_t bs = tsl_type_block_size(t->type);
    tsl_tensor shadow;
    void *mem;
    tsl_tensor *h = (tsl_tensor *)ref_readable(t, &shadow, &mem);
    for (int64_t i3 = 0; i3 < h->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < h->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < h->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < h->ne[0]; i0 += bl) memset(ref_addr(h, i0, i1, i2, i3), 0xff, bs);
    if (mem) {
        tsl_error err;
        CHECKF(tsl_tensor_set(t, mem, 0, tsl_nbytes(t), &err) == TSL_SUCCESS, "%s: cannot poison '%s' on its device",
               ref_case, t->name);
        free(mem);
    }
}

/* The value v as the given type stores it (F32, F16, BF16 round to nearest
 * even through the library's scalar conversions). */
static inline double ref_round(tsl_type type, double v) {
    switch (type) {
    case TSL_TYPE_F16: return tsl_fp16_to_fp32(tsl_fp32_to_fp16((float)v));
    case TSL_TYPE_BF16: return tsl_bf16_to_fp32(tsl_fp32_to_bf16((float)v));
    default: return (float)v;
    }
}

/* Round rows of n values (n a multiple of the block length) through a type:
 * quantize + dequantize for block types, scalar rounding otherwise. */
static inline void ref_round_rows(tsl_type type, double *v, int64_t n, int64_t nrows) {
    float *f = (float *)malloc((size_t)n * sizeof(float));
    void *q = malloc(tsl_row_size(type, n) + 64);
    for (int64_t r = 0; r < nrows; r++) {
        double *row = v + r * n;
        for (int64_t i = 0; i < n; i++) f[i] = (float)row[i];
        if (tsl_quantize(type, f, q, n) == 0 || tsl_dequantize(type, q, f, n) == 0)
            CHECKF(0, "ref_round_rows: cannot round through %s", tsl_type_name(type));
        for (int64_t i = 0; i < n; i++) row[i] = f[i];
    }
    free(f);
    free(q);
}

/* ------------------------------------------------------------------------ */
/* Building, computing, comparing                                            */
/* ------------------------------------------------------------------------ */

/* The graph computing out, or NULL (with a failed check naming the ctx
 * error) when the op refused to build. */
static inline tsl_graph *ref_graph(tsl_context *ctx, tsl_tensor *out) {
    if (!out) {
        const char *e = tsl_ctx_error(ctx);
        CHECKF(0, "%s: op returned NULL: %s", ref_case, e ? e : "(no ctx error set)");
        return NULL;
    }
    tsl_graph *g = tsl_graph_build(ctx, &out, 1);
    if (!g) {
        const char *e = tsl_ctx_error(ctx);
        CHECKF(0, "%s: graph_build failed: %s", ref_case, e ? e : "(no ctx error set)");
    }
    return g;
}

/* ---- computing on Vulkan ------------------------------------------------ */

/* A tensor the Vulkan run touches, with the placement it had. */
typedef struct ref_vk_t {
    tsl_tensor *t;
    void *data;
    tsl_buffer *buf;
} ref_vk_t;

/* A run of host bytes copied to the device: [lo, hi) at offset off. */
typedef struct ref_vk_span {
    char *lo, *hi;
    size_t off;
} ref_vk_span;

static inline int ref_vk_span_cmp(const void *a, const void *b) {
    const ref_vk_span *x = (const ref_vk_span *)a, *y = (const ref_vk_span *)b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Every tensor g reaches (nodes, leafs, their sources and view sources),
 * each once. The caller frees the list. */
static inline ref_vk_t *ref_vk_tensors(const tsl_graph *g, int *n_out) {
    int cap = 2 * (g->n_nodes + g->n_leafs) + 16, n = 0;
    ref_vk_t *v = (ref_vk_t *)malloc((size_t)cap * sizeof *v);
    for (int i = 0; i < g->n_nodes + g->n_leafs; i++) {
        tsl_tensor *t = i < g->n_nodes ? g->nodes[i] : g->leafs[i - g->n_nodes];
        bool seen = false;
        for (int k = 0; k < n && !seen; k++) seen = v[k].t == t;
        if (!t || seen) continue;
        v[n++] = (ref_vk_t){t, t->data, t->buffer};
    }
    for (int k = 0; k < n; k++) { /* the list grows while it is walked: a closure */
        tsl_tensor *more[TSL_MAX_SRC + 1];
        for (int j = 0; j < TSL_MAX_SRC; j++) more[j] = v[k].t->src[j];
        more[TSL_MAX_SRC] = v[k].t->view_src;
        for (int j = 0; j <= TSL_MAX_SRC; j++) {
            tsl_tensor *t = more[j];
            bool seen = !t;
            for (int q = 0; q < n && !seen; q++) seen = v[q].t == t;
            if (seen) continue;
            if (n == cap) {
                cap *= 2;
                v = (ref_vk_t *)realloc(v, (size_t)cap * sizeof *v);
            }
            v[n++] = (ref_vk_t){t, t->data, t->buffer};
        }
    }
    *n_out = n;
    return v;
}

/* A one-off I8 tensor over bytes [off, off + n) of buf, whose byte 0 is at
 * base (tensor data addresses of a device buffer are opaque: base + offset). */
static inline tsl_tensor ref_vk_bytes(tsl_buffer *buf, char *base, size_t off, size_t n) {
    tsl_tensor t;
    memset(&t, 0, sizeof t);
    t.type = TSL_TYPE_I8;
    t.ne[0] = (int64_t)n;
    t.ne[1] = t.ne[2] = t.ne[3] = 1;
    t.nb[0] = 1;
    t.nb[1] = t.nb[2] = t.nb[3] = n;
    t.data = base + off;
    t.buffer = buf;
    return t;
}

/* Compute g on the Vulkan backend, the graph's host memory moved to one
 * device buffer for the run and back (see the top of this file). Tensors
 * already in a device buffer stay where they are. */
static inline tsl_status ref_vk_run(tsl_graph *g, tsl_error *err) {
    tsl_backend *be = ref_be[0];
    int n = 0;
    ref_vk_t *ts = ref_vk_tensors(g, &n);
    ref_vk_span *sp = (ref_vk_span *)malloc((size_t)(n + 1) * sizeof *sp);
    int ns = 0;
    for (int k = 0; k < n; k++) {
        const tsl_tensor *t = ts[k].t;
        if (!t->data || (t->buffer && !tsl_buffer_host_ptr(t->buffer))) continue;
        const size_t nb = tsl_nbytes(t);
        sp[ns++] = (ref_vk_span){(char *)t->data, (char *)t->data + (nb ? nb : 1), 0};
    }
    /* overlapping ranges (a view and its root, an in-place output and its
     * input) become one, so they share device memory as they share host memory */
    qsort(sp, (size_t)ns, sizeof *sp, ref_vk_span_cmp);
    int nm = 0;
    for (int k = 0; k < ns; k++) {
        if (nm && sp[k].lo < sp[nm - 1].hi) {
            if (sp[k].hi > sp[nm - 1].hi) sp[nm - 1].hi = sp[k].hi;
        } else {
            sp[nm++] = sp[k];
        }
    }
    /* each range keeps its host address modulo 256, so every tensor keeps
     * the element alignment it had */
    size_t total = 0;
    for (int k = 0; k < nm; k++) {
        total = (total + 255) / 256 * 256 + (size_t)((uintptr_t)sp[k].lo % 256);
        sp[k].off = total;
        total += (size_t)(sp[k].hi - sp[k].lo);
    }
    tsl_status s = TSL_SUCCESS;
    /* one buffer serves every run, grown when a graph needs more */
    if (ref_vk_buf && tsl_buffer_size(ref_vk_buf) < total) {
        tsl_buffer_free(ref_vk_buf);
        ref_vk_buf = NULL;
    }
    if (!ref_vk_buf) ref_vk_buf = tsl_buffer_alloc(be, total > ((size_t)1 << 20) ? total : ((size_t)1 << 20), err);
    tsl_buffer *buf = ref_vk_buf;
    char *base = NULL;
    if (!buf) s = err ? err->status : TSL_ALLOC_FAILED;
    if (buf) {
        /* where byte 0 of the buffer is: place a one-byte tensor there */
        tsl_tensor probe;
        memset(&probe, 0, sizeof probe);
        probe.type = TSL_TYPE_I8;
        probe.ne[0] = probe.ne[1] = probe.ne[2] = probe.ne[3] = 1;
        probe.nb[0] = probe.nb[1] = probe.nb[2] = probe.nb[3] = 1;
        s = tsl_buffer_place(buf, &probe, 0, err);
        base = (char *)probe.data;
    }
    for (int k = 0; k < nm && s == TSL_SUCCESS; k++) {
        tsl_tensor t = ref_vk_bytes(buf, base, sp[k].off, (size_t)(sp[k].hi - sp[k].lo));
        s = tsl_tensor_set(&t, sp[k].lo, 0, (size_t)(sp[k].hi - sp[k].lo), err);
    }
    if (s == TSL_SUCCESS) {
        for (int k = 0; k < n; k++) {
            tsl_tensor *t = ts[k].t;
            if (!t->data || (t->buffer && !tsl_buffer_host_ptr(t->buffer))) continue;
            for (int q = 0; q < nm; q++)
                if ((char *)t->data >= sp[q].lo && (char *)t->data < sp[q].hi) {
                    t->data = base + sp[q].off + ((char *)t->data - sp[q].lo);
                    t->buffer = buf;
                    break;
                }
        }
        s = tsl_backend_graph_compute(be, g, err);
        tsl_error gerr;
        for (int k = 0; k < nm && s == TSL_SUCCESS; k++) {
            tsl_tensor t = ref_vk_bytes(buf, base, sp[k].off, (size_t)(sp[k].hi - sp[k].lo));
            tsl_status gs = tsl_tensor_get(&t, sp[k].lo, 0, (size_t)(sp[k].hi - sp[k].lo), &gerr);
            if (gs != TSL_SUCCESS) {
                if (err) *err = gerr;
                s = gs;
            }
        }
    }
    /* every tensor back as it was (a view the backend resolved included) */
    for (int k = 0; k < n; k++) {
        ts[k].t->data = ts[k].data;
        ts[k].t->buffer = ts[k].buf;
    }
    free(sp);
    free(ts);
    return s;
}

/* Compute g on backend bi: its status, err filled. On Vulkan, through
 * ref_vk_run. Nothing checks what ran where: for cases that expect a
 * failure. */
static inline tsl_status ref_compute_status(int bi, tsl_graph *g, tsl_error *err) {
    if (!ref_vk) return tsl_backend_graph_compute(ref_be[bi], g, err);
    return ref_vk_run(g, err);
}

enum { REF_NOT_ON_VK = -1, REF_FAILED = 0, REF_RAN = 1 };

/* Compute g on backend bi, with a failed check (the error line) when it
 * does not succeed. On Vulkan, first: every compute node must be supported
 * by the backend, or be of an (op, types) in REF_VK_GAPS, and after the
 * compute the backend must have recorded a dispatch for every compute node.
 * Returns REF_RAN; REF_FAILED (a check failed); or REF_NOT_ON_VK when a node
 * is a listed gap refused by supports_op (nothing ran; counted in st when
 * st is given). */
static inline int ref_compute_st(ref_stats *st, int bi, tsl_graph *g) {
    int n_compute = 0;
    uint64_t d0 = 0;
    if (ref_vk) {
        bool bad = false, gap_hit = false;
        for (int i = 0; i < g->n_nodes; i++) {
            const tsl_tensor *nd = g->nodes[i];
            if (!nd || nd->op == TSL_OP_NONE || tsl_op_is_view(nd->op) || tsl_nelements(nd) == 0) continue;
            n_compute++;
            const bool ok = tsl_backend_supports_op(ref_be[0], nd);
            ref_vk_gap *gap = ref_vk_gap_of(nd);
            if (gap) {
                if (ok) {
                    gap->supported++;
                } else {
                    gap->refused++;
                    gap_hit = true;
                }
                continue;
            }
            if (!ok) {
                CHECKF(0, "%s: node %d %s (%s from %s, %s) is not supported by %s: under the scheduler it would run "
                       "on the CPU",
                       ref_case, i, tsl_op_name(nd->op), tsl_type_name(nd->type),
                       nd->src[0] ? tsl_type_name(nd->src[0]->type) : "-",
                       nd->src[1] ? tsl_type_name(nd->src[1]->type) : "-", tsl_backend_name(ref_be[0]));
                bad = true;
            }
        }
        if (bad) return REF_FAILED;
        if (gap_hit) {
            if (st) st->not_on_vk++;
            return REF_NOT_ON_VK;
        }
        tsl_vulkan_stats vs;
        if (tsl_backend_vulkan_stats(ref_be[0], &vs) == TSL_SUCCESS) d0 = vs.dispatches;
    }
    tsl_error err;
    tsl_error_clear(&err);
    tsl_status s = ref_compute_status(bi, g, &err);
    if (s != TSL_SUCCESS) {
        char line[640];
        tsl_error_format(&err, line, sizeof line);
        CHECKF(0, "%s: compute on %s returned %s: %s", ref_case, ref_where(REF_NTH(bi)), tsl_status_str(s), line);
        return REF_FAILED;
    }
    if (ref_vk) {
        tsl_vulkan_stats vs;
        uint64_t d1 = tsl_backend_vulkan_stats(ref_be[0], &vs) == TSL_SUCCESS ? vs.dispatches : 0;
        if (d1 - d0 < (uint64_t)n_compute) {
            CHECKF(0, "%s: %d compute nodes but %s recorded %llu dispatches", ref_case, n_compute,
                   tsl_backend_name(ref_be[0]), (unsigned long long)(d1 - d0));
            return REF_FAILED;
        }
    }
    return REF_RAN;
}

/* ref_compute_st without stats: true when g ran (a gap counts as not). */
static inline bool ref_compute(int bi, tsl_graph *g) { return ref_compute_st(NULL, bi, g) == REF_RAN; }
/* Compare out (read through its strides) with a reference band, dense in
 * out's shape: [min(ref, ref2), max(ref, ref2)] when ref2 is given (two
 * results are both right, e.g. activations converted or not), else ref.
 * A value passes when its distance to the band is <= atol + rtol * m,
 * m = mag[i] when mag is given, else |ref[i]|. The first few misses are
 * printed with their index. */
static inline bool ref_compare_band(ref_stats *st, const tsl_tensor *out, const double *ref, const double *ref2,
                                    const double *mag, double atol, double rtol, int nth) {
    long long bad = 0, n = 0;
    double worst_err = 0, worst_ratio = 0;
    tsl_tensor shadow;
    void *mem;
    out = ref_readable(out, &shadow, &mem);
    for (int64_t i3 = 0; i3 < out->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < out->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < out->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < out->ne[0]; i0++) {
                    const int64_t ix = ref_ix(out->ne, i0, i1, i2, i3);
                    const double got = ref_get(out, i0, i1, i2, i3), r = ref[ix];
                    const double lo = ref2 && ref2[ix] < r ? ref2[ix] : r, hi = ref2 && ref2[ix] > r ? ref2[ix] : r;
                    const double tol = atol + rtol * (mag ? mag[ix] : fabs(r));
                    const double err = got < lo ? lo - got : got > hi ? got - hi : (got == got ? 0.0 : NAN);
                    const bool ok = got == r || err <= tol;
                    n++;
                    const double e = isnan(err) ? INFINITY : err;
                    const double ratio = tol > 0 ? e / tol : (e > 0 ? INFINITY : 0);
                    if (e > worst_err) worst_err = e;
                    if (ratio > worst_ratio) worst_ratio = ratio;
                    if (!ok && ++bad <= 5)
                        fprintf(stderr, "    %s, %s: at [%lld,%lld,%lld,%lld] got %.9g, ref %.9g%s, |err| %.3g > tol %.3g\n",
                                ref_case, ref_where(nth), (long long)i0, (long long)i1, (long long)i2, (long long)i3, got,
                                r, ref2 ? " (band)" : "", err, tol);
                }
    free(mem);
    st->values += n;
    st->runs++;
    if (worst_err > st->max_err) st->max_err = worst_err;
    if (worst_ratio > st->max_ratio) st->max_ratio = worst_ratio;
    if (bad) st->failed_runs++;
    CHECKF(bad == 0, "%s: %lld of %lld values out of tolerance on %s", ref_case, bad, n, ref_where(nth));
    return bad == 0;
}

static inline bool ref_compare(ref_stats *st, const tsl_tensor *out, const double *ref, const double *mag,
                               double atol, double rtol, int nth) {
    return ref_compare_band(st, out, ref, NULL, mag, atol, rtol, nth);
}

/* Compare a quantized tensor's blocks with the bytes tsl_quantize gives for
 * vals (dense, out's shape): exact, block by block. */
static inline bool ref_compare_quant(ref_stats *st, const tsl_tensor *out, const double *vals, int nth) {
    const int64_t bl = tsl_type_block_len(out->type);
    const size_t bs = tsl_type_block_size(out->type);
    float f[64];
    unsigned char q[64];
    long long bad = 0, n = 0;
    tsl_tensor shadow;
    void *mem;
    out = ref_readable(out, &shadow, &mem);
    for (int64_t i3 = 0; i3 < out->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < out->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < out->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < out->ne[0]; i0 += bl) {
                    for (int64_t k = 0; k < bl; k++) f[k] = (float)vals[ref_ix(out->ne, i0 + k, i1, i2, i3)];
                    tsl_quantize(out->type, f, q, bl);
                    n += bl;
                    if (memcmp(q, ref_addr(out, i0, i1, i2, i3), bs) != 0 && ++bad <= 5)
                        fprintf(stderr, "    %s, %s: block at [%lld,%lld,%lld,%lld] differs from tsl_quantize\n",
                                ref_case, ref_where(nth), (long long)i0, (long long)i1, (long long)i2, (long long)i3);
                }
    free(mem);
    st->values += n;
    st->runs++;
    if (bad) {
        st->failed_runs++;
        st->max_ratio = INFINITY;
    }
    CHECKF(bad == 0, "%s: %lld blocks differ from tsl_quantize on %s", ref_case, bad, ref_where(nth));
    return bad == 0;
}

/* Check out against ref after a run: quantized outputs block-exact against
 * tsl_quantize of ref (ref_compare_quant), others within tolerance. */
static inline bool ref_check_out(ref_stats *st, const tsl_tensor *out, const double *ref, const double *mag,
                                 double atol, double rtol, int nth) {
    if (tsl_type_is_quantized(out->type)) return ref_compare_quant(st, out, ref, nth);
    return ref_compare(st, out, ref, mag, atol, rtol, nth);
}

/* Bytes to copy back into place before each run (an in-place op's input). */
typedef struct ref_restore {
    void *dst;
    const void *src;
    size_t n;
} ref_restore;

/* Run g on every backend; before each run poison out (or, with rs, restore
 * the input the op overwrites in place), then compare with ref (or with the
 * band between ref and ref2 when ref2 is given). */
static inline void ref_run_band(ref_stats *st, tsl_graph *g, tsl_tensor *out, const double *ref, const double *ref2,
                                const double *mag, double atol, double rtol, const ref_restore *rs) {
    st->cases++;
    if (!g) {
        st->failed_runs++;
        return;
    }
    for (int bi = 0; bi < REF_NB; bi++) {
        if (rs)
            memcpy(rs->dst, rs->src, rs->n);
        else
            ref_poison(out);
        const int r = ref_compute_st(st, bi, g);
        if (r != REF_RAN) {
            if (r == REF_FAILED) {
                st->runs++;
                st->failed_runs++;
            }
            continue;
        }
        if (ref2)
            ref_compare_band(st, out, ref, ref2, mag, atol, rtol, REF_NTH(bi));
        else
            ref_check_out(st, out, ref, mag, atol, rtol, REF_NTH(bi));
    }
}

static inline void ref_run(ref_stats *st, tsl_graph *g, tsl_tensor *out, const double *ref, const double *mag,
                           double atol, double rtol, const ref_restore *rs) {
    ref_run_band(st, g, out, ref, NULL, mag, atol, rtol, rs);
}

/* ------------------------------------------------------------------------ */
/* The references (dense double arrays, ne[0] fastest)                        */
/* ------------------------------------------------------------------------ */

enum { REF_ADD, REF_SUB, REF_MUL, REF_DIV };

/* out = a (op) b, b repeated to a's shape (a->ne[i] % b->ne[i] == 0). */
static inline void ref_binary(int op, const double *a, const int64_t ane[4], const double *b, const int64_t bne[4],
                              double *out) {
    for (int64_t i3 = 0; i3 < ane[3]; i3++)
        for (int64_t i2 = 0; i2 < ane[2]; i2++)
            for (int64_t i1 = 0; i1 < ane[1]; i1++)
                for (int64_t i0 = 0; i0 < ane[0]; i0++) {
                    const int64_t ia = ref_ix(ane, i0, i1, i2, i3);
                    const double y = b[ref_ix(bne, i0 % bne[0], i1 % bne[1], i2 % bne[2], i3 % bne[3])];
                    const double x = a[ia];
                    out[ia] = op == REF_ADD ? x + y : op == REF_SUB ? x - y : op == REF_MUL ? x * y : x / y;
                }
}

static inline double ref_silu(double x) { return x / (1.0 + exp(-x)); }
/* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
static inline double ref_gelu(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / REF_PI) * (x + 0.044715 * x * x * x)));
}

/* Per row: x / sqrt(mean(x^2) + eps). */
static inline void ref_rms_norm(const double *x, const int64_t ne[4], double eps, double *out) {
    const int64_t nr = ne[1] * ne[2] * ne[3];
    for (int64_t r = 0; r < nr; r++) {
        const double *row = x + r * ne[0];
        double ss = 0;
        for (int64_t i = 0; i < ne[0]; i++) ss += row[i] * row[i];
        const double s = 1.0 / sqrt(ss / (double)ne[0] + eps);
        for (int64_t i = 0; i < ne[0]; i++) out[r * ne[0] + i] = row[i] * s;
    }
}

/* Per row: (x - mean) / sqrt(var + eps), var the mean squared deviation.
 * cond (may be NULL) gets (|x| + |mean|) / sqrt(var + eps): x - mean in
 * float is exact only to ~2^-24 of |x| + |mean|, so a row whose mean dwarfs
 * its spread has an output accurate to that scale, not to |out|. */
static inline void ref_norm(const double *x, const int64_t ne[4], double eps, double *out, double *cond) {
    const int64_t nr = ne[1] * ne[2] * ne[3];
    for (int64_t r = 0; r < nr; r++) {
        const double *row = x + r * ne[0];
        double mean = 0, var = 0;
        for (int64_t i = 0; i < ne[0]; i++) mean += row[i];
        mean /= (double)ne[0];
        for (int64_t i = 0; i < ne[0]; i++) var += (row[i] - mean) * (row[i] - mean);
        var /= (double)ne[0];
        const double s = 1.0 / sqrt(var + eps);
        for (int64_t i = 0; i < ne[0]; i++) {
            out[r * ne[0] + i] = (row[i] - mean) * s;
            if (cond) cond[r * ne[0] + i] = (fabs(row[i]) + fabs(mean)) * s;
        }
    }
}

/* softmax(x * scale + mask) per row; row (i1, i2, i3) of x uses mask row
 * (i1, i2 % m2, i3 % m3). A row whose every term is -inf gives zeros. */
static inline void ref_soft_max(const double *x, const int64_t ne[4], const double *mask, const int64_t mne[4],
                                double scale, double *out) {
    double *v = (double *)malloc((size_t)ne[0] * sizeof(double));
    for (int64_t i3 = 0; i3 < ne[3]; i3++)
        for (int64_t i2 = 0; i2 < ne[2]; i2++)
            for (int64_t i1 = 0; i1 < ne[1]; i1++) {
                double mx = -INFINITY;
                for (int64_t i0 = 0; i0 < ne[0]; i0++) {
                    double m = mask ? mask[ref_ix(mne, i0, i1, i2 % mne[2], i3 % mne[3])] : 0.0;
                    v[i0] = x[ref_ix(ne, i0, i1, i2, i3)] * scale + m;
                    if (v[i0] > mx) mx = v[i0];
                }
                double sum = 0;
                for (int64_t i0 = 0; i0 < ne[0]; i0++) {
                    v[i0] = mx == -INFINITY ? 0.0 : exp(v[i0] - mx);
                    sum += v[i0];
                }
                for (int64_t i0 = 0; i0 < ne[0]; i0++) out[ref_ix(ne, i0, i1, i2, i3)] = sum > 0 ? v[i0] / sum : 0.0;
            }
    free(v);
}

/* YaRN correction dims, from the math: dimension pair index where a
 * rotation completes n_rot turns over the original context,
 *   corr(n_rot) = n_dims * ln(n_ctx_orig / (2 pi n_rot)) / (2 ln base),
 * start = floor(corr(beta_fast)) clamped at 0, end = ceil(corr(beta_slow))
 * clamped at n_dims - 1. */
static inline double ref_rope_corr_dim(int n_dims, int n_ctx_orig, double n_rot, double base) {
    return n_dims * log((double)n_ctx_orig / (n_rot * 2.0 * REF_PI)) / (2.0 * log(base));
}
static inline void ref_rope_corr_dims(const tsl_rope_params *p, double dims[2]) {
    double start = floor(ref_rope_corr_dim(p->n_dims, p->n_ctx_orig, p->beta_fast, p->freq_base));
    double end = ceil(ref_rope_corr_dim(p->n_dims, p->n_ctx_orig, p->beta_slow, p->freq_base));
    dims[0] = start > 0 ? start : 0;
    dims[1] = end < p->n_dims - 1 ? end : p->n_dims - 1;
}

/* RoPE of x [head_dim, n_head, n_tokens, 1] at positions pos[n_tokens].
 * Pair i (i < n_dims/2) turns by theta = pos * base^(-2i/n_dims) / ff[i],
 * interpolated by freq_scale; with ext_factor != 0 the YaRN ramp mixes in the
 * unscaled angle (ramp 1 below corr dim 0, 0 above corr dim 1) and the
 * magnitude gains 1 + 0.1 ln(1/freq_scale). cos and sin are scaled by
 * attn_factor (times that gain). NORMAL pairs (2i, 2i+1), NEOX (i, i + n_dims/2);
 * dims from n_dims on pass through. amag (may be NULL) gets, per output value,
 * (|x0| + |x1|) * mscale * |theta|: the scale of the error a float angle makes. */
static inline void ref_rope(const double *x, const int64_t ne[4], const int32_t *pos, const double *ff,
                            const tsl_rope_params *p, double *out, double *amag) {
    const int nd = p->n_dims;
    double corr[2];
    ref_rope_corr_dims(p, corr);
    double mscale = p->attn_factor;
    if (p->ext_factor != 0.0f) mscale *= 1.0 + 0.1 * log(1.0 / (double)p->freq_scale);
    for (int64_t i3 = 0; i3 < ne[3]; i3++)
        for (int64_t i2 = 0; i2 < ne[2]; i2++)
            for (int64_t i1 = 0; i1 < ne[1]; i1++) {
                const double *row = x + ref_ix(ne, 0, i1, i2, i3);
                double *o = out + ref_ix(ne, 0, i1, i2, i3);
                double *am = amag ? amag + ref_ix(ne, 0, i1, i2, i3) : NULL;
                for (int64_t i0 = 0; i0 < ne[0]; i0++) {
                    o[i0] = row[i0];
                    if (am) am[i0] = 0;
                }
                for (int i = 0; i < nd / 2; i++) {
                    double theta_extrap = (double)pos[i2] * pow((double)p->freq_base, -2.0 * i / nd);
                    if (ff) theta_extrap /= ff[i];
                    const double theta_interp = (double)p->freq_scale * theta_extrap;
                    double theta = theta_interp;
                    if (p->ext_factor != 0.0f) {
                        double y = (i - corr[0]) / fmax(0.001, corr[1] - corr[0]);
                        double ramp = 1.0 - fmin(1.0, fmax(0.0, y));
                        double mix = ramp * p->ext_factor;
                        theta = theta_interp * (1.0 - mix) + theta_extrap * mix;
                    }
                    const double c = cos(theta) * mscale, s = sin(theta) * mscale;
                    const int j0 = p->mode == TSL_ROPE_NEOX ? i : 2 * i;
                    const int j1 = p->mode == TSL_ROPE_NEOX ? i + nd / 2 : 2 * i + 1;
                    const double x0 = row[j0], x1 = row[j1];
                    o[j0] = x0 * c - x1 * s;
                    o[j1] = x0 * s + x1 * c;
                    if (am) am[j0] = am[j1] = (fabs(x0) + fabs(x1)) * fabs(mscale) * fabs(theta);
                }
            }
}

/* mul_mat: a [K, M, A2, A3], b [K, N, B2, B3] -> [M, N, B2, B3],
 * r[m, n] = sum_k a[k, m] b[k, n]; b batch (i2, i3) uses a batch
 * (i2 / (B2/A2), i3 / (B3/A3)) (ggml: each a matrix serves consecutive b
 * matrices, as grouped-query attention needs). mag gets sum_k |a||b|. */
static inline void ref_mul_mat(const double *a, const int64_t ane[4], const double *b, const int64_t bne[4],
                               double *out, double *mag) {
    const int64_t K = ane[0], M = ane[1], N = bne[1];
    const int64_t r2 = bne[2] / ane[2], r3 = bne[3] / ane[3];
    const int64_t one[4] = {M, N, bne[2], bne[3]};
    for (int64_t i3 = 0; i3 < bne[3]; i3++)
        for (int64_t i2 = 0; i2 < bne[2]; i2++)
            for (int64_t n = 0; n < N; n++)
                for (int64_t m = 0; m < M; m++) {
                    const double *ar = a + ref_ix(ane, 0, m, i2 / r2, i3 / r3);
                    const double *br = b + ref_ix(bne, 0, n, i2, i3);
                    double s = 0, sa = 0;
                    for (int64_t k = 0; k < K; k++) {
                        s += ar[k] * br[k];
                        sa += fabs(ar[k] * br[k]);
                    }
                    out[ref_ix(one, m, n, i2, i3)] = s;
                    if (mag) mag[ref_ix(one, m, n, i2, i3)] = sa;
                }
}

/* out_prod: a [M, K, A2, A3], b [N, K, B2, B3] -> [M, N, B2, B3],
 * r[m, n] = sum_k a[m, k] b[n, k], broadcast as mul_mat. */
static inline void ref_out_prod(const double *a, const int64_t ane[4], const double *b, const int64_t bne[4],
                                double *out, double *mag) {
    const int64_t M = ane[0], K = ane[1], N = bne[0];
    const int64_t r2 = bne[2] / ane[2], r3 = bne[3] / ane[3];
    const int64_t one[4] = {M, N, bne[2], bne[3]};
    for (int64_t i3 = 0; i3 < bne[3]; i3++)
        for (int64_t i2 = 0; i2 < bne[2]; i2++)
            for (int64_t n = 0; n < N; n++)
                for (int64_t m = 0; m < M; m++) {
                    double s = 0, sa = 0;
                    for (int64_t k = 0; k < K; k++) {
                        const double t = a[ref_ix(ane, m, k, i2 / r2, i3 / r3)] * b[ref_ix(bne, n, k, i2, i3)];
                        s += t;
                        sa += fabs(t);
                    }
                    out[ref_ix(one, m, n, i2, i3)] = s;
                    if (mag) mag[ref_ix(one, m, n, i2, i3)] = sa;
                }
}

/* concat along dim: out[i] = a[i] where i[dim] < a.ne[dim], else
 * b[i with i[dim] - a.ne[dim]]. one is the result shape. */
static inline void ref_concat(const double *a, const int64_t ane[4], const double *b, const int64_t bne[4], int dim,
                              double *out, int64_t one[4]) {
    for (int i = 0; i < 4; i++) one[i] = i == dim ? ane[i] + bne[i] : ane[i];
    for (int64_t i3 = 0; i3 < one[3]; i3++)
        for (int64_t i2 = 0; i2 < one[2]; i2++)
            for (int64_t i1 = 0; i1 < one[1]; i1++)
                for (int64_t i0 = 0; i0 < one[0]; i0++) {
                    int64_t ix[4] = {i0, i1, i2, i3};
                    double v;
                    if (ix[dim] < ane[dim]) {
                        v = a[ref_ix(ane, i0, i1, i2, i3)];
                    } else {
                        ix[dim] -= ane[dim];
                        v = b[ref_ix(bne, ix[0], ix[1], ix[2], ix[3])];
                    }
                    out[ref_ix(one, i0, i1, i2, i3)] = v;
                }
}

/* Mean over rows of -sum_i labels_i * log_softmax(logits)_i. *mag gets the
 * same mean of sum_i |labels_i * log_softmax_i| (its condition scale). */
static inline double ref_cross_entropy(const double *logits, const double *labels, const int64_t ne[4],
                                       double *mag) {
    const int64_t nr = ne[1] * ne[2] * ne[3];
    double total = 0, tmag = 0;
    for (int64_t r = 0; r < nr; r++) {
        const double *x = logits + r * ne[0], *y = labels + r * ne[0];
        double mx = -INFINITY, se = 0;
        for (int64_t i = 0; i < ne[0]; i++) mx = x[i] > mx ? x[i] : mx;
        for (int64_t i = 0; i < ne[0]; i++) se += exp(x[i] - mx);
        const double lse = mx + log(se);
        for (int64_t i = 0; i < ne[0]; i++) {
            total -= y[i] * (x[i] - lse);
            tmag += fabs(y[i] * (x[i] - lse));
        }
    }
    if (mag) *mag = tmag / (double)nr;
    return total / (double)nr;
}

#endif /* TSL_TEST_REF_H */
