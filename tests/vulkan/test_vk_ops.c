/*
 * test_vk_ops.c - every op and type the Vulkan backend supports, computed on
 * Vulkan and compared with the CPU backend computing the same graph.
 *
 * Each case is a small graph built twice from the same description: once for
 * the CPU (the reference) and once for Vulkan, with the same input values
 * (a PRNG seeded per case and input). Shapes are random (odd sizes, 1s,
 * sizes that are not multiples of the kernels' tiles), inputs are read
 * through views, permutes and transposes, and binary ops broadcast. For
 * block-format weights the CPU reference gets F32 weights holding exactly
 * the dequantized values, so the comparison measures the kernel, not the
 * CPU's own activation quantization. Tolerances are per op family and
 * stated beside the cases; every family prints its largest error.
 *
 * Also here: a llama-shaped block end to end; the same graphs encoded into 1
 * and 9 command buffers giving identical bytes; the descriptor-pool and
 * staging paths (forced by environment) on the same cases; two backends on
 * one device computing from two threads at once; supports_op saying no to
 * what has no kernel.
 *
 * The Vulkan device is whatever the loader finds; on a machine with only
 * Mesa's lavapipe installed (mesa-vulkan-drivers) the test points the loader
 * at its ICD file if nothing else is found. With no device at all it prints
 * why and passes, unless TSL_REQUIRE_VULKAN is set (CI), where it fails.
 */
#include <stdio.h>
#include <stdlib.h>

#ifndef TSL_HAVE_VULKAN
#include "vulkan/vk_no_vulkan.h"
#else

#include <glob.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h" /* ctx_tensor_new: nodes the op constructors do not make */
#include "tensile/backend.h"
#include "test.h"
#include "vulkan/vk_harness.h"
#include "vulkan/vk_test.h"

/* lavapipe leaks what it allocated for a pipeline it refuses (test_fusion
 * breaks swiglu_q_f32 on purpose); those allocations are the driver's.
 * Vulkan objects this library forgets to destroy are reported by the
 * validation layer instead (TSL_VULKAN_VALIDATE=1, test_validation). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libvulkan_lvp.so\n"; }

static tsl_backend *g_cpu, *g_vk;
static bool g_qdot; /* the device has integer dot products: Q8_0/Q4_0 mat-vec quantizes its column */

/* ---- finding a device --------------------------------------------------------- */


/* ---- cases -------------------------------------------------------------------- */

enum { IN_VAL, IN_POSITIVE, IN_INT, IN_MASK, IN_SEQ };

typedef struct vkt_in {
    tsl_tensor *t;
    int kind;
    tsl_type qtype; /* values are rounded through this type (weights) */
    float p;        /* IN_INT: values in [0, p); IN_MASK: share of -inf; IN_VAL: scale; IN_SEQ: p, p + 1, ... */
} vkt_in;

typedef struct vkt_case {
    tsl_tensor *first[2]; /* outputs the graph computes before out, in this order (NULL: none) */
    tsl_tensor *out;  /* what the graph computes */
    tsl_tensor *read; /* what is compared (out when NULL) */
    vkt_in in[24];
    int n_in;
} vkt_case;

/* Build the case into ctx; ref: the CPU reference (block-format weights as
 * F32 holding their dequantized values). */
typedef void (*vkt_build)(tsl_context *ctx, vkt_case *c, const void *arg, bool ref);

static tsl_tensor *vkt_input(tsl_context *ctx, vkt_case *c, int kind, tsl_type type, float p, int64_t ne0,
                             int64_t ne1, int64_t ne2, int64_t ne3) {
    tsl_tensor *t = tsl_new_tensor_4d(ctx, type, ne0, ne1, ne2, ne3);
    c->in[c->n_in++] = (vkt_in){t, kind, type, p};
    return t;
}

/* Weights of type qt, or F32 holding the same values for the reference. */
static tsl_tensor *vkt_weight(tsl_context *ctx, vkt_case *c, tsl_type qt, bool ref, int64_t ne0, int64_t ne1,
                              int64_t ne2, int64_t ne3) {
    tsl_tensor *t = tsl_new_tensor_4d(ctx, ref ? TSL_TYPE_F32 : qt, ne0, ne1, ne2, ne3);
    c->in[c->n_in++] = (vkt_in){t, IN_VAL, qt, 1.0f};
    return t;
}

static bool vkt_fill(const vkt_in *in, unsigned long long seed, tsl_error *err) {
    tsl_tensor *t = in->t;
    int64_t n = tsl_nelements(t);
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    size_t bytes = tsl_nbytes(t);
    void *raw = malloc(bytes ? bytes : 1);
    if (!v || !raw) {
        free(v);
        free(raw);
        return false;
    }
    unsigned long long s = seed * 0x9E3779B97F4A7C15ull + 12345;
    for (int64_t i = 0; i < n; i++) {
        switch (in->kind) {
        case IN_POSITIVE: v[i] = test_rand_f(&s, 0.1f, 2.0f); break;
        case IN_INT: v[i] = (float)(int)test_rand_f(&s, 0.0f, in->p); break;
        case IN_MASK: v[i] = test_rand_f(&s, 0, 1) < in->p ? -INFINITY : test_rand_f(&s, -2.0f, 0.5f); break;
        case IN_SEQ: v[i] = in->p + (float)i; break;
        default: v[i] = test_rand_f(&s, -1.0f, 1.0f) * in->p; break;
        }
    }
    /* round through the weight type first, so F32 references hold exactly
     * the values the block format stores */
    if (in->qtype != TSL_TYPE_F32 && in->qtype != t->type && in->kind == IN_VAL) {
        size_t qb = tsl_row_size(in->qtype, n);
        void *q = malloc(qb ? qb : 1);
        if (q) {
            tsl_quantize(in->qtype, v, q, n);
            tsl_dequantize(in->qtype, q, v, n);
            free(q);
        }
    }
    switch (t->type) {
    case TSL_TYPE_I32:
        for (int64_t i = 0; i < n; i++) ((int32_t *)raw)[i] = (int32_t)v[i];
        break;
    default: tsl_quantize(t->type, v, raw, n); break;
    }
    tsl_status st = tsl_tensor_set(t, raw, 0, bytes, err);
    free(v);
    free(raw);
    return st == TSL_SUCCESS;
}

/* Build and compute a case on be; the compared tensor's values as floats. */
static tsl_status vkt_run(tsl_backend *be, vkt_build fn, const void *arg, bool ref, unsigned long long seed,
                          float **out, int64_t *n_out, tsl_error *err) {
    *out = NULL;
    *n_out = 0;
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 8u << 20, .no_alloc = true});
    vkt_case c;
    memset(&c, 0, sizeof c);
    fn(ctx, &c, arg, ref);
    if (!c.out) {
        fprintf(stderr, "case build failed: %s\n", tsl_ctx_error(ctx));
        tsl_ctx_free(ctx);
        return TSL_FAILED;
    }
    tsl_tensor *outs[3];
    int n_outs = 0;
    for (int i = 0; i < 2; i++)
        if (c.first[i]) outs[n_outs++] = c.first[i];
    outs[n_outs++] = c.out;
    tsl_graph *g = tsl_graph_build(ctx, outs, n_outs);
    tsl_buffer *buf = g ? tsl_buffer_alloc_ctx(be, ctx, err) : NULL;
    tsl_status st = TSL_FAILED;
    if (buf) {
        st = TSL_SUCCESS;
        for (int i = 0; i < c.n_in && st == TSL_SUCCESS; i++)
            if (!vkt_fill(&c.in[i], seed * 31 + (unsigned long long)i, err)) st = TSL_FAILED;
        if (st == TSL_SUCCESS) st = tsl_backend_graph_compute(be, g, err);
        if (st == TSL_SUCCESS) {
            const tsl_tensor *r = c.read ? c.read : c.out;
            int64_t n = tsl_nelements(r);
            size_t bytes = tsl_nbytes(r);
            void *raw = malloc(bytes);
            float *f = malloc((size_t)n * sizeof *f);
            st = raw && f ? tsl_tensor_get(r, raw, 0, bytes, err) : TSL_FAILED;
            if (st == TSL_SUCCESS) tsl_dequantize(r->type, raw, f, n);
            free(raw);
            if (st == TSL_SUCCESS) {
                *out = f;
                *n_out = n;
            } else {
                free(f);
            }
        }
        tsl_buffer_free(buf);
    }
    tsl_ctx_free(ctx);
    return st;
}

typedef struct vkt_stat {
    const char *name;
    int cases;
    double worst; /* largest |err| / tolerance seen */
    double max_err;
} vkt_stat;

static void vkt_print(const vkt_stat *s) {
    printf("  %-22s %3d cases, max error %.3g (%.0f%% of tolerance)\n", s->name, s->cases, s->max_err,
           100.0 * s->worst);
}

/* Run the case on the CPU (reference) and on Vulkan and compare. */
static void vkt_check(vkt_stat *st, vkt_build fn, const void *arg, unsigned long long seed, double atol, double rtol,
                      const char *what) {
    float *r = NULL, *v = NULL;
    int64_t nr = 0, nv = 0;
    tsl_error e1, e2;
    tsl_status s1 = vkt_run(g_cpu, fn, arg, true, seed, &r, &nr, &e1);
    tsl_status s2 = vkt_run(g_vk, fn, arg, false, seed, &v, &nv, &e2);
    char line[640];
    if (s1 != TSL_SUCCESS) tsl_error_format(&e1, line, sizeof line);
    CHECKF(s1 == TSL_SUCCESS, "%s %s: cpu: %s", st->name, what, s1 == TSL_SUCCESS ? "" : line);
    if (s2 != TSL_SUCCESS) tsl_error_format(&e2, line, sizeof line);
    CHECKF(s2 == TSL_SUCCESS, "%s %s: vulkan: %s", st->name, what, s2 == TSL_SUCCESS ? "" : line);
    if (s1 == TSL_SUCCESS && s2 == TSL_SUCCESS) {
        CHECK(nr == nv);
        int bad = 0;
        for (int64_t i = 0; i < nr && i < nv; i++) {
            double a = r[i], b = v[i];
            if (isinf(a) || isinf(b) || isnan(a) || isnan(b)) {
                if (!(a == b || (isnan(a) && isnan(b)))) {
                    if (bad++ < 3) fprintf(stderr, "  %s %s: [%lld] cpu %g vulkan %g\n", st->name, what, (long long)i, a, b);
                }
                continue;
            }
            double err = fabs(a - b), tol = atol + rtol * fabs(a);
            if (err > st->max_err) st->max_err = err;
            if (err / tol > st->worst) st->worst = err / tol;
            if (err > tol && bad++ < 3)
                fprintf(stderr, "  %s %s: [%lld] cpu %.9g vulkan %.9g (err %.3g > tol %.3g)\n", st->name, what,
                        (long long)i, a, b, err, tol);
        }
        CHECKF(bad == 0, "%s %s: %d values out of tolerance", st->name, what, bad);
    }
    st->cases++;
    free(r);
    free(v);
}

/* vkt_check, and the Vulkan dispatches it took must be want; returns the
 * validation errors it drew (a case that breaks a kernel on purpose draws
 * them). */
static uint64_t vkt_check_disp(vkt_stat *st, vkt_build fn, const void *arg, unsigned long long seed, double atol,
                               double rtol, const char *what, uint64_t want) {
    tsl_vulkan_stats s0, s1;
    CHECK(tsl_backend_vulkan_stats(g_vk, &s0) == TSL_SUCCESS);
    vkt_check(st, fn, arg, seed, atol, rtol, what);
    CHECK(tsl_backend_vulkan_stats(g_vk, &s1) == TSL_SUCCESS);
    CHECKF(s1.dispatches - s0.dispatches == want, "%s: %llu dispatches, want %llu", what,
           (unsigned long long)(s1.dispatches - s0.dispatches), (unsigned long long)want);
    return s1.validation_errors - s0.validation_errors;
}

static unsigned long long g_seed = 0x5EED;

static int64_t rnd(int64_t lo, int64_t hi) { /* [lo, hi] */
    return lo + (int64_t)(test_rand_u64(&g_seed) % (unsigned long long)(hi - lo + 1));
}

/* ---- element-wise ------------------------------------------------------------- */

typedef struct ew_arg {
    tsl_op op;
    int64_t ne[4];
    int64_t bne[4];
    int layout; /* 0 dense, 1 a is a transposed view, 2 a is a view into a wider tensor */
} ew_arg;

/* a, in the layout asked for: same logical shape ne. */
static tsl_tensor *ew_src(tsl_context *ctx, vkt_case *c, const ew_arg *a, int kind) {
    switch (a->layout) {
    case 1: { /* stored transposed: [ne1, ne0] then transposed back */
        tsl_tensor *t = vkt_input(ctx, c, kind, TSL_TYPE_F32, 1, a->ne[1], a->ne[0], a->ne[2], a->ne[3]);
        return tsl_transpose(ctx, t);
    }
    case 2: { /* rows of a wider tensor, starting 3 elements in */
        tsl_tensor *t = vkt_input(ctx, c, kind, TSL_TYPE_F32, 1, a->ne[0] + 5, a->ne[1], a->ne[2], a->ne[3]);
        return tsl_view_4d(ctx, t, a->ne[0], a->ne[1], a->ne[2], a->ne[3], t->nb[1], t->nb[2], t->nb[3],
                           3 * sizeof(float));
    }
    default: return vkt_input(ctx, c, kind, TSL_TYPE_F32, 1, a->ne[0], a->ne[1], a->ne[2], a->ne[3]);
    }
}

static void build_ew(tsl_context *ctx, vkt_case *c, const void *arg, bool ref) {
    const ew_arg *a = arg;
    int kind = a->op == TSL_OP_SQRT ? IN_POSITIVE : IN_VAL;
    tsl_tensor *x = ew_src(ctx, c, a, kind);
    tsl_tensor *b = NULL;
    if (a->op == TSL_OP_ADD || a->op == TSL_OP_SUB || a->op == TSL_OP_MUL || a->op == TSL_OP_DIV)
        b = vkt_input(ctx, c, a->op == TSL_OP_DIV ? IN_POSITIVE : IN_VAL, TSL_TYPE_F32, 1, a->bne[0], a->bne[1],
                      a->bne[2], a->bne[3]);
    if (a->op == TSL_OP_SWIGLU) b = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->ne[0], a->ne[1], a->ne[2], a->ne[3]);
    switch (a->op) {
    case TSL_OP_ADD: c->out = tsl_add(ctx, x, b); break;
    case TSL_OP_SUB: c->out = tsl_sub(ctx, x, b); break;
    case TSL_OP_MUL: c->out = tsl_mul(ctx, x, b); break;
    case TSL_OP_DIV: c->out = tsl_div(ctx, x, b); break;
    case TSL_OP_SCALE: c->out = tsl_scale(ctx, x, -1.75f); break;
    case TSL_OP_SQR: c->out = tsl_sqr(ctx, x); break;
    case TSL_OP_SQRT: c->out = tsl_sqrt(ctx, x); break;
    case TSL_OP_SILU: c->out = tsl_silu(ctx, tsl_scale(ctx, x, 6.0f)); break;
    case TSL_OP_GELU: c->out = tsl_gelu(ctx, tsl_scale(ctx, x, 6.0f)); break;
    case TSL_OP_SWIGLU: c->out = tsl_swiglu(ctx, tsl_scale(ctx, x, 6.0f), b); break;
    default: break;
    }
}

static void test_elementwise(void) {
    static const tsl_op ops[] = {TSL_OP_ADD,  TSL_OP_SUB,  TSL_OP_MUL,  TSL_OP_DIV,  TSL_OP_SCALE,
                                 TSL_OP_SQR,  TSL_OP_SQRT, TSL_OP_SILU, TSL_OP_GELU, TSL_OP_SWIGLU};
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        vkt_stat st = {.name = tsl_op_name(ops[o])};
        for (int it = 0; it < 6; it++) {
            ew_arg a = {.op = ops[o], .layout = it % 3};
            a.ne[0] = rnd(1, 70), a.ne[1] = rnd(1, 9), a.ne[2] = rnd(1, 4), a.ne[3] = rnd(1, 2);
            for (int i = 0; i < 4; i++) a.bne[i] = a.ne[i];
            /* broadcasts: a row, a column, a plane, a scalar */
            switch (it % 4) {
            case 1: a.bne[1] = a.bne[2] = a.bne[3] = 1; break;
            case 2: a.bne[0] = 1; break;
            case 3: a.bne[0] = a.bne[1] = a.bne[2] = a.bne[3] = 1; break;
            default: break;
            }
            char what[64];
            snprintf(what, sizeof what, "case %d", it);
            /* exp/tanh forms differ between the CPU's and the driver's math
             * by a few ulp */
            vkt_check(&st, build_ew, &a, (unsigned long long)it + 100 * o, 1e-6, 2e-5, what);
        }
        vkt_print(&st);
    }
}

/* ---- norms and reductions ------------------------------------------------------- */

typedef struct row_arg {
    tsl_op op;
    int64_t ne[4];
    bool permuted;
} row_arg;

static void build_rows(tsl_context *ctx, vkt_case *c, const void *arg, bool ref) {
    const row_arg *a = arg;
    tsl_tensor *x;
    if (a->permuted) { /* stored [ne0, ne2, ne1]: rows read through a permute */
        tsl_tensor *t = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->ne[0], a->ne[2], a->ne[1], a->ne[3]);
        x = tsl_permute(ctx, t, 0, 2, 1, 3);
    } else {
        x = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->ne[0], a->ne[1], a->ne[2], a->ne[3]);
    }
    x = tsl_add(ctx, x, x); /* a computed input, so in-place reuse is possible too */
    switch (a->op) {
    case TSL_OP_RMS_NORM: c->out = tsl_rms_norm(ctx, x, 1e-5f); break;
    case TSL_OP_NORM: c->out = tsl_norm(ctx, x, 1e-5f); break;
    case TSL_OP_SUM_ROWS: c->out = tsl_sum_rows(ctx, x); break;
    case TSL_OP_MEAN: c->out = tsl_mean(ctx, x); break;
    default: break;
    }
}

static void test_rows(void) {
    static const tsl_op ops[] = {TSL_OP_RMS_NORM, TSL_OP_NORM, TSL_OP_SUM_ROWS, TSL_OP_MEAN};
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        vkt_stat st = {.name = tsl_op_name(ops[o])};
        for (int it = 0; it < 6; it++) {
            row_arg a = {.op = ops[o], .permuted = it % 2 == 1};
            a.ne[0] = it == 5 ? 4096 : rnd(1, 300), a.ne[1] = rnd(1, 7), a.ne[2] = rnd(1, 3), a.ne[3] = 1;
            char what[64];
            snprintf(what, sizeof what, "[%lld,%lld,%lld]%s", (long long)a.ne[0], (long long)a.ne[1],
                     (long long)a.ne[2], a.permuted ? " permuted" : "");
            /* float tree sums vs the CPU's double accumulation */
            vkt_check(&st, build_rows, &a, (unsigned long long)it + 10 * o, 1e-5, 1e-5, what);
        }
        vkt_print(&st);
    }
}

/* ---- soft_max ------------------------------------------------------------------- */

typedef struct sm_arg {
    int64_t ne[4];
    int mask; /* 0 none, 1 F32, 2 F16 */
    int64_t m2, m3;
    float scale;
} sm_arg;

static void build_soft_max(tsl_context *ctx, vkt_case *c, const void *arg, bool ref) {
    const sm_arg *a = arg;
    tsl_tensor *x = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 4, a->ne[0], a->ne[1], a->ne[2], a->ne[3]);
    tsl_tensor *m = NULL;
    if (a->mask)
        m = vkt_input(ctx, c, IN_MASK, a->mask == 1 ? TSL_TYPE_F32 : TSL_TYPE_F16, 0.3f, a->ne[0], a->ne[1] + 2, a->m2,
                      a->m3);
    c->out = tsl_soft_max(ctx, x, m, a->scale);
}

static void test_soft_max(void) {
    vkt_stat st = {.name = "SOFT_MAX"};
    for (int it = 0; it < 9; it++) {
        sm_arg a = {.mask = it % 3, .scale = it % 2 ? 0.125f : 1.0f};
        a.ne[0] = it == 8 ? 1 : rnd(1, 200), a.ne[1] = rnd(1, 6), a.ne[2] = 2 * rnd(1, 2), a.ne[3] = rnd(1, 2);
        a.m2 = it % 2 ? 1 : a.ne[2];
        a.m3 = 1;
        char what[64];
        snprintf(what, sizeof what, "ne0 %lld mask %d", (long long)a.ne[0], a.mask);
        vkt_check(&st, build_soft_max, &a, (unsigned long long)it, 1e-6, 1e-5, what);
    }
    vkt_print(&st);
}

/* ---- rope ----------------------------------------------------------------------- */

typedef struct rope_arg {
    int64_t head, n_head, n_tok;
    int n_dims, mode;
    bool ff, yarn, permuted;
    float pos_max;
} rope_arg;

static void build_rope(tsl_context *ctx, vkt_case *c, const void *arg, bool ref) {
    const rope_arg *a = arg;
    tsl_tensor *x;
    if (a->permuted) { /* [head, n_tok, n_head] stored, read as [head, n_head, n_tok] */
        tsl_tensor *t = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->head, a->n_tok, a->n_head, 1);
        x = tsl_permute(ctx, t, 0, 2, 1, 3);
    } else {
        x = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->head, a->n_head, a->n_tok, 1);
    }
    tsl_tensor *pos = vkt_input(ctx, c, IN_INT, TSL_TYPE_I32, a->pos_max, a->n_tok, 1, 1, 1);
    tsl_tensor *ff = a->ff ? vkt_input(ctx, c, IN_POSITIVE, TSL_TYPE_F32, 1, a->n_dims / 2, 1, 1, 1) : NULL;
    tsl_rope_params p = tsl_rope_default(a->n_dims);
    p.mode = a->mode;
    p.freq_base = a->mode == TSL_ROPE_NEOX ? 1e6f : 10000.0f;
    if (a->yarn) {
        p.n_ctx_orig = 4096;
        p.freq_scale = 0.25f;
        p.ext_factor = 1.0f;
        p.attn_factor = 1.0f;
        p.beta_fast = 32.0f;
        p.beta_slow = 1.0f;
    }
    c->out = tsl_rope(ctx, x, pos, ff, &p);
}

static void test_rope(void) {
    vkt_stat st = {.name = "ROPE"};
    for (int it = 0; it < 10; it++) {
        rope_arg a = {.mode = it % 2 ? TSL_ROPE_NEOX : TSL_ROPE_NORMAL, .ff = it % 3 == 1, .yarn = it % 4 == 3,
                      .permuted = it % 5 == 2};
        a.head = 2 * rnd(2, 40);
        a.n_dims = it % 3 == 2 ? (int)(a.head / 2) / 2 * 2 : (int)a.head;
        if (a.n_dims < 2) a.n_dims = 2;
        a.n_head = rnd(1, 4);
        a.n_tok = rnd(1, 6);
        /* long contexts: angles of 1e5 radians and more must still agree */
        a.pos_max = it >= 6 ? 200000.0f : 64.0f;
        char what[96];
        snprintf(what, sizeof what, "%s dims %d/%lld%s%s pos<%g", a.mode ? "neox" : "normal", a.n_dims,
                 (long long)a.head, a.ff ? " ff" : "", a.yarn ? " yarn" : "", a.pos_max);
        vkt_check(&st, build_rope, &a, (unsigned long long)it, 2e-6, 1e-5, what);
    }
    vkt_print(&st);
}

/* ---- copies --------------------------------------------------------------------- */

typedef struct cpy_arg {
    int kind; /* 0 dup, 1 cont of a transpose, 2 cpy into a strided slot of a cache */
    tsl_type from, to;
    int64_t ne0, ne1, ne2;
} cpy_arg;

static void build_cpy(tsl_context *ctx, vkt_case *c, const void *arg, bool ref) {
    const cpy_arg *a = arg;
    tsl_tensor *x = vkt_input(ctx, c, IN_VAL, a->from, 1, a->ne0, a->ne1, a->ne2, 1);
    switch (a->kind) {
    case 0: c->out = tsl_dup(ctx, x, a->to); break;
    case 1: {
        tsl_tensor *t = tsl_cont(ctx, tsl_transpose(ctx, x));
        c->out = a->to == a->from ? t : tsl_dup(ctx, t, a->to);
        break;
    }
    default: {
        /* a KV-cache-like [ne0, 3 * ne1, ne2] tensor; x goes into rows
         * ne1 .. 2 ne1 of every plane, transposed */
        tsl_tensor *cache = vkt_input(ctx, c, IN_VAL, a->to, 1, a->ne1, 3 * a->ne0, a->ne2, 1);
        tsl_tensor *slot = tsl_view_3d(ctx, cache, a->ne1, a->ne0, a->ne2, cache->nb[1], cache->nb[2],
                                       (size_t)a->ne0 * cache->nb[1]);
        c->out = tsl_cpy(ctx, tsl_transpose(ctx, x), slot);
        c->read = cache;
        break;
    }
    }
}

static void test_copies(void) {
    static const tsl_type ty[] = {TSL_TYPE_F32, TSL_TYPE_F16};
    vkt_stat st = {.name = "CPY/DUP/CONT"};
    for (int kind = 0; kind < 3; kind++)
        for (int f = 0; f < 2; f++)
            for (int t = 0; t < 2; t++) {
                cpy_arg a = {.kind = kind, .from = ty[f], .to = ty[t], .ne0 = rnd(1, 67), .ne1 = rnd(1, 13),
                             .ne2 = rnd(1, 3)};
                char what[64];
                snprintf(what, sizeof what, "kind %d %s->%s", kind, tsl_type_name(a.from), tsl_type_name(a.to));
                /* exact: conversions are rounded on the bits, as the CPU does */
                vkt_check(&st, build_cpy, &a, (unsigned long long)(kind * 4 + f * 2 + t), 0, 0, what);
            }
    vkt_print(&st);
}

/* ---- get_rows ------------------------------------------------------------------- */

typedef struct gr_arg {
    tsl_type type;
    int64_t ne0, rows, n, ne2;
} gr_arg;

static void build_get_rows(tsl_context *ctx, vkt_case *c, const void *arg, bool ref) {
    const gr_arg *a = arg;
    tsl_tensor *tab = vkt_weight(ctx, c, a->type, false, a->ne0, a->rows, a->ne2, 1);
    tsl_tensor *idx = vkt_input(ctx, c, IN_INT, TSL_TYPE_I32, (float)a->rows, a->n, a->ne2, 1, 1);
    c->out = tsl_get_rows(ctx, tab, idx);
}

static void test_get_rows(void) {
    static const tsl_type ty[] = {TSL_TYPE_F32, TSL_TYPE_F16, TSL_TYPE_Q8_0, TSL_TYPE_Q4_0};
    vkt_stat st = {.name = "GET_ROWS"};
    for (int t = 0; t < 4; t++)
        for (int it = 0; it < 3; it++) {
            gr_arg a = {.type = ty[t], .ne0 = 32 * rnd(1, 6), .rows = rnd(1, 40), .n = rnd(1, 9), .ne2 = rnd(1, 2)};
            char what[64];
            snprintf(what, sizeof what, "%s [%lld x %lld]", tsl_type_name(a.type), (long long)a.ne0, (long long)a.rows);
            vkt_check(&st, build_get_rows, &a, (unsigned long long)(t * 10 + it), 0, 1e-6, what);
        }
    vkt_print(&st);
}

/* ---- mul_mat -------------------------------------------------------------------- */

typedef struct mm_arg {
    tsl_type type;
    int64_t M, N, K, a2, b2, b3;
    bool b_permuted;
} mm_arg;

/* mul_mat(w, x) as the device computes it: with block weights of type qt
 * and one column, on a device with integer dot products, x is seen through
 * Q8_0 (as on the CPU's dot path); the F32 reference rounds it so too. */
static tsl_tensor *vkt_mm(tsl_context *ctx, tsl_tensor *w, tsl_type qt, tsl_tensor *x, bool ref) {
    if (ref && g_qdot && (qt == TSL_TYPE_Q8_0 || qt == TSL_TYPE_Q4_0) && x->ne[1] == 1)
        x = tsl_dup(ctx, tsl_dup(ctx, x, TSL_TYPE_Q8_0), TSL_TYPE_F32);
    return tsl_mul_mat(ctx, w, x);
}

static void build_mul_mat(tsl_context *ctx, vkt_case *c, const void *arg, bool ref) {
    const mm_arg *a = arg;
    tsl_tensor *w = vkt_weight(ctx, c, a->type, ref, a->K, a->M, a->a2, 1);
    tsl_tensor *x;
    if (a->b_permuted) { /* stored [K, b2, N]: columns read through a permute */
        tsl_tensor *t = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->K, a->b2, a->N, a->b3);
        x = tsl_permute(ctx, t, 0, 2, 1, 3);
    } else {
        x = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->K, a->N, a->b2, a->b3);
    }
    c->out = vkt_mm(ctx, w, a->type, x, ref);
}

static void test_mul_mat(void) {
    static const tsl_type ty[] = {TSL_TYPE_F32, TSL_TYPE_F16, TSL_TYPE_Q8_0, TSL_TYPE_Q4_0};
    tsl_vulkan_device_info info;
    tsl_error ierr;
    const bool coopmat = tsl_backend_vulkan_info(g_vk, &info, &ierr) == TSL_SUCCESS && info.cooperative_matrix;
    for (int t = 0; t < 4; t++) {
        vkt_stat st = {.name = "MUL_MAT"};
        char label[32];
        snprintf(label, sizeof label, "MUL_MAT %s", tsl_type_name(ty[t]));
        st.name = label;
        bool quant = ty[t] == TSL_TYPE_Q8_0 || ty[t] == TSL_TYPE_Q4_0;
        for (int it = 0; it < 7; it++) {
            mm_arg a = {.type = ty[t]};
            a.K = quant ? 32 * rnd(1, 10) : rnd(1, 300);
            a.M = rnd(1, 150);
            a.N = it < 3 ? 1 : rnd(2, 80); /* mat-vec, then tiled */
            a.a2 = 1 + it % 2;
            a.b2 = a.a2 * (it % 3 == 2 ? 2 : 1);
            a.b3 = it == 6 ? 2 : 1;
            a.b_permuted = it == 4 || it == 1;
            char what[96];
            snprintf(what, sizeof what, "M %lld N %lld K %lld batch %lldx%lld/%lld%s", (long long)a.M, (long long)a.N,
                     (long long)a.K, (long long)a.b2, (long long)a.b3, (long long)a.a2, a.b_permuted ? " permuted" : "");
            /* same products, summed in another order in float; on cooperative
             * matrices (more than 8 columns of non-F32 weights) the activations
             * are rounded to F16 first: |error| <= 2^-11 sum|ab| <= 2^-11 K for
             * inputs in [-1, 1] */
            double atol = 2e-5 * sqrt((double)a.K);
            if (coopmat && ty[t] != TSL_TYPE_F32 && a.N > 8) atol = ldexp((double)a.K, -11);
            vkt_check(&st, build_mul_mat, &a, (unsigned long long)(t * 10 + it), atol, 1e-5, what);
        }
        /* one column of long block rows, as a decoder's products have them
         * (4096; 14336, Llama 3 8B's feed-forward width; 4224 and 4128, whole
         * steps of a 32-lane team's blocks and four or one more), in batches
         * so rows start further in */
        static const int64_t longk[] = {4096, 4224, 14336, 4128};
        for (int i = 0; quant && i < 4; i++) {
            mm_arg a = {.type = ty[t], .K = longk[i], .M = 37 + 8 * i, .N = 1, .a2 = 1 + i % 2, .b2 = 1 + i % 2, .b3 = 1};
            char what[96];
            snprintf(what, sizeof what, "M %lld N 1 K %lld batch %lld", (long long)a.M, (long long)a.K, (long long)a.b2);
            vkt_check(&st, build_mul_mat, &a, (unsigned long long)(t * 10 + 7 + i), 2e-5 * sqrt((double)a.K), 1e-5, what);
        }
        vkt_print(&st);
    }
}

/* ---- Q4_0 weights in the split layout -------------------------------------------- */

/* A weight flagged TSL_FLAG_WEIGHT is kept by the Vulkan backend in groups
 * of 64 blocks, quants before scales (backend_impl.h, backend_q4s): every
 * kernel that reads Q4_0 must read it so, tensor copies convert, and what
 * cannot be right (a copy or a view inside a group, a kernel writing it)
 * fails with a record. */
typedef struct q4s_arg {
    int op; /* 0 mul_mat, 1 get_rows, 2 dup to F32, 3 dup to F16, 4 out_prod */
    int64_t K, M, N;
    bool split;
    bool float_col; /* a float kernel forced: the column as it is in the reference */
} q4s_arg;

static void build_q4s(tsl_context *ctx, vkt_case *c, const void *arg, bool ref) {
    const q4s_arg *a = arg;
    tsl_tensor *w = vkt_weight(ctx, c, TSL_TYPE_Q4_0, ref, a->K, a->M, 1, 1);
    if (!ref && a->split) w->flags |= TSL_FLAG_WEIGHT;
    switch (a->op) {
    case 0: {
        tsl_tensor *x = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->K, a->N, 1, 1);
        c->out = a->float_col ? tsl_mul_mat(ctx, w, x) : vkt_mm(ctx, w, TSL_TYPE_Q4_0, x, ref);
        break;
    }
    case 1: c->out = tsl_get_rows(ctx, w, vkt_input(ctx, c, IN_INT, TSL_TYPE_I32, (float)a->M, a->N, 1, 1, 1)); break;
    case 2: c->out = tsl_dup(ctx, w, TSL_TYPE_F32); break;
    case 3: c->out = tsl_dup(ctx, w, TSL_TYPE_F16); break;
    default: c->out = tsl_out_prod(ctx, w, vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->N, a->M, 1, 1)); break;
    }
}

/* The case against the CPU, and (same_bits) split against file layout on
 * Vulkan: the same arithmetic, so the same bits. */
static void q4s_case(vkt_stat *st, q4s_arg a, unsigned long long seed, double atol, bool same_bits, const char *what) {
    /* a weight of whole groups, or it is not split and nothing is tested */
    CHECKF(a.K * a.M % (CORE_Q4S_BLOCKS * TSL_QK4_0) == 0, "%s: the weight is not whole groups", what);
    a.split = true;
    vkt_check(st, build_q4s, &a, seed, atol, 1e-5, what);
    if (!same_bits) return;
    float *p = NULL, *q = NULL;
    int64_t np = 0, nq = 0;
    tsl_error e1, e2;
    tsl_status s1 = vkt_run(g_vk, build_q4s, &a, false, seed, &p, &np, &e1);
    a.split = false;
    tsl_status s2 = vkt_run(g_vk, build_q4s, &a, false, seed, &q, &nq, &e2);
    CHECKF(s1 == TSL_SUCCESS && s2 == TSL_SUCCESS && np == nq && np > 0 && memcmp(p, q, (size_t)np * sizeof *p) == 0,
           "%s: the split layout's results are not the file layout's", what);
    free(p);
    free(q);
}

static void test_q4_split(void) {
    vkt_stat st = {.name = "Q4_0 split layout"};
    /* every product path: the integer-dot mat-vec (its twin), the small-N
     * kernel, the tiled one, and more columns (cooperative matrices or
     * their F16 copies where the device has them); rows of 896 (28
     * blocks: groups straddle rows), 4096 and 8192 (the long-row kernel) */
    static const int64_t shapes[][3] = {{256, 64, 1}, {896, 32, 1}, {4096, 40, 1}, {8192, 16, 1}, {256, 64, 3},
                                        {896, 32, 8}, {256, 64, 20}, {512, 128, 130}, {896, 32, 40}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        q4s_arg a = {.op = 0, .K = shapes[i][0], .M = shapes[i][1], .N = shapes[i][2]};
        char what[96];
        snprintf(what, sizeof what, "mul_mat K %lld M %lld N %lld", (long long)a.K, (long long)a.M, (long long)a.N);
        q4s_case(&st, a, 900 + i, a.N > 8 ? ldexp((double)a.K, -11) : 2e-5 * sqrt((double)a.K), true, what);
    }
    /* the other kernels that read Q4_0 weights, forced (a staged one runs
     * its team kernel on split weights: other sums, so other bits) */
    static const char *forced[][2] = {{"mul_mat_vec_q4_0_f32", "1"},    {"mul_mat_vec_q4_0_f32_st", "1"},
                                      {"mul_mat_vecn_q4_0_f32_st", "5"}, {"mul_mat_q4_0_f32", "1"},
                                      {"mul_mat_cmemu_q4_0_f32", "33"}};
    for (size_t i = 0; i < sizeof forced / sizeof forced[0]; i++) {
        setenv("TSL_VK_MM_VARIANT", forced[i][0], 1);
        q4s_arg a = {.op = 0, .K = 896, .M = 32, .N = atoi(forced[i][1]), .float_col = true};
        char what[96];
        snprintf(what, sizeof what, "%s N %lld", forced[i][0], (long long)a.N);
        q4s_case(&st, a, 950 + i, a.N > 8 ? ldexp((double)a.K, -11) : 2e-5 * sqrt((double)a.K),
                 strstr(forced[i][0], "_st") == NULL, what);
        unsetenv("TSL_VK_MM_VARIANT");
    }
    static const int64_t others[][4] = {{1, 256, 64, 9}, {1, 896, 32, 5}, {2, 896, 32, 0}, {3, 256, 64, 0},
                                        {4, 64, 64, 7}};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        q4s_arg a = {.op = (int)others[i][0], .K = others[i][1], .M = others[i][2], .N = others[i][3]};
        char what[96];
        snprintf(what, sizeof what, "op %d [%lld x %lld]", a.op, (long long)a.K, (long long)a.M);
        q4s_case(&st, a, 970 + i, a.op == 4 ? 1e-4 : 0, true, what);
    }
    vkt_print(&st);

    /* copies: the bytes on the device are the split ones; tsl_tensor_get
     * gives the file's back; ranges inside a group are refused, whole
     * groups anywhere taken */
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    tsl_tensor *w = tsl_new_tensor_2d(ctx, TSL_TYPE_Q4_0, 128, 128); /* 4 blocks a row, 8 groups */
    tsl_tensor *raw = tsl_new_tensor_1d(ctx, TSL_TYPE_I8, (int64_t)tsl_nbytes(w));
    w->flags |= TSL_FLAG_WEIGHT;
    tsl_error err;
    tsl_buffer *buf = tsl_buffer_alloc(g_vk, 16384, &err);
    CHECK(buf && tsl_buffer_place(buf, w, 0, &err) == TSL_SUCCESS && tsl_buffer_place(buf, raw, 0, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_relays_weight(g_vk, w) && !tsl_backend_relays_weight(g_cpu, w));
    const size_t nb = tsl_nbytes(w);
    unsigned char *src = malloc(nb), *want = malloc(nb), *got = malloc(nb);
    unsigned long long seed = 77;
    for (size_t i = 0; i < nb; i++) src[i] = (unsigned char)(test_rand_f(&seed, 0, 255.99f));
    const size_t G = CORE_Q4S_BYTES; /* 16 rows */
    tsl_q4_0_split(src, want, nb / G);
    CHECK(nb == 8 * G && memcmp(src, want, nb) != 0);
    CHECK(tsl_tensor_set(w, src, 0, nb, &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_get(raw, got, 0, nb, &err) == TSL_SUCCESS && memcmp(got, want, nb) == 0);
    CHECK(tsl_tensor_get(w, got, 0, nb, &err) == TSL_SUCCESS && memcmp(got, src, nb) == 0);
    CHECK(tsl_tensor_set(w, src, 18, 18, &err) == TSL_FAILED && strstr(err.message, "not whole groups"));
    CHECK(tsl_tensor_get(w, got, G, 100, &err) == TSL_FAILED && strstr(err.message, "groups of 64 blocks"));
    memset(got, 0, nb);
    CHECK(tsl_tensor_set(w, src + 2 * G, 2 * G, 3 * G, &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_get(w, got, 2 * G, 3 * G, &err) == TSL_SUCCESS && memcmp(got, src + 2 * G, 3 * G) == 0);
    /* the host memory of the conversion not had (injected): both ways fail
     * with ALLOC_FAILED naming the weight, and the device's bytes are left
     * as they were */
    CHECK(tsl_backend_inject(g_vk, "alloc@bytes=9216", &err) == TSL_SUCCESS && nb == 9216);
    tsl_tensor_set_name(w, "w_q4s");
    CHECK(tsl_tensor_set(w, want, 0, nb, &err) == TSL_ALLOC_FAILED &&
          strstr(err.message, "convert Q4_0 weight 'w_q4s'") && strcmp(err.tensor, "w_q4s") == 0);
    CHECK(tsl_tensor_get(w, got, 0, nb, &err) == TSL_ALLOC_FAILED && strstr(err.message, "tensor_get"));
    tsl_backend_inject_clear(g_vk);
    CHECK(tsl_tensor_get(w, got, 0, nb, &err) == TSL_SUCCESS && memcmp(got, src, nb) == 0);

    /* a view from a group's start reads right; one from inside a group
     * fails its compute with a record naming the weight; a kernel writing
     * the weight fails too */
    tsl_context *g2 = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    tsl_tensor *x = tsl_new_tensor_1d(g2, TSL_TYPE_F32, 128);
    tsl_tensor *ok_v = tsl_view_2d(g2, w, 128, 112, w->nb[1], 16 * w->nb[1]); /* from row 16: byte 1152 */
    tsl_tensor *bad_v = tsl_view_2d(g2, w, 128, 127, w->nb[1], w->nb[1]);     /* from row 1: byte 72 */
    tsl_tensor *y_ok = tsl_mul_mat(g2, ok_v, x), *y_bad = tsl_mul_mat(g2, bad_v, x);
    tsl_tensor *y_all = tsl_mul_mat(g2, w, x);
    tsl_tensor *wr = tsl_cpy(g2, tsl_new_tensor_2d(g2, TSL_TYPE_F32, 128, 128), w);
    tsl_graph *ga = tsl_graph_build(g2, (tsl_tensor *[]){y_ok, y_all}, 2);
    tsl_graph *gb = tsl_graph_build(g2, &y_bad, 1);
    tsl_graph *gc = tsl_graph_build(g2, &wr, 1);
    tsl_buffer *b2 = tsl_buffer_alloc_ctx(g_vk, g2, &err);
    CHECK(ga && gb && gc && b2);
    float xv[128], r_ok[112], r_all[128];
    for (int i = 0; i < 128; i++) xv[i] = test_rand_f(&seed, -1, 1);
    CHECK(tsl_tensor_set(w, src, 0, nb, &err) == TSL_SUCCESS && tsl_tensor_set(x, xv, 0, sizeof xv, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(g_vk, ga, &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_get(y_ok, r_ok, 0, sizeof r_ok, &err) == TSL_SUCCESS &&
          tsl_tensor_get(y_all, r_all, 0, sizeof r_all, &err) == TSL_SUCCESS);
    CHECK(memcmp(r_ok, r_all + 16, sizeof r_ok) == 0);
    tsl_error_clear(&err);
    CHECK(tsl_backend_graph_compute(g_vk, gb, &err) == TSL_FAILED && strstr(err.message, "inside a group"));
    tsl_error_clear(&err);
    CHECK(tsl_backend_graph_compute(g_vk, gc, &err) == TSL_FAILED && strstr(err.message, "only through tsl_tensor_set"));
    tsl_error_clear(&err);
    CHECK(tsl_backend_graph_compute(g_vk, ga, &err) == TSL_SUCCESS); /* the failures latched nothing */
    if (g_qdot) {
        /* the integer-dot twin that reads the layout failing to build: the
         * compute fails naming it, supports_op then says no to the product
         * (the scheduler moves it), and recovery builds it again */
        CHECK(tsl_backend_inject(g_vk, "kernel@name=mul_mat_vecq_q4_0_f32_q4s", &err) == TSL_SUCCESS);
        tsl_error_clear(&err);
        CHECK(tsl_backend_graph_compute(g_vk, ga, &err) == TSL_FAILED &&
              strcmp(err.kernel, "mul_mat_vecq_q4_0_f32_q4s") == 0);
        CHECK(!tsl_backend_supports_op(g_vk, y_all));
        tsl_backend_inject_clear(g_vk);
        CHECK(tsl_backend_recover(g_vk, &err) == TSL_SUCCESS && tsl_backend_supports_op(g_vk, y_all));
        CHECK(tsl_backend_graph_compute(g_vk, ga, &err) == TSL_SUCCESS);
        CHECK(tsl_tensor_get(y_all, r_ok, 0, sizeof r_ok, &err) == TSL_SUCCESS && memcmp(r_ok, r_all, sizeof r_ok) == 0);
    }
    tsl_buffer_free(b2);
    tsl_ctx_free(g2);
    tsl_buffer_free(buf);
    tsl_ctx_free(ctx);
    free(src);
    free(want);
    free(got);
}

/* ---- a llama-shaped block ------------------------------------------------------- */

typedef struct blk_arg {
    tsl_type wtype;
    int64_t n_embd, n_head, n_head_kv, n_ff, n_tok, n_vocab;
} blk_arg;

static void build_block(tsl_context *ctx, vkt_case *c, const void *arg, bool ref) {
    const blk_arg *a = arg;
    const int64_t hd = a->n_embd / a->n_head, nt = a->n_tok, kvd = hd * a->n_head_kv;
    tsl_tensor *tok_embd = vkt_weight(ctx, c, TSL_TYPE_Q8_0, ref, a->n_embd, a->n_vocab, 1, 1);
    tsl_tensor *tokens = vkt_input(ctx, c, IN_INT, TSL_TYPE_I32, (float)a->n_vocab, nt, 1, 1, 1);
    tsl_tensor *pos = vkt_input(ctx, c, IN_INT, TSL_TYPE_I32, 100.0f, nt, 1, 1, 1);
    tsl_tensor *mask = vkt_input(ctx, c, IN_MASK, TSL_TYPE_F16, 0.2f, nt, nt, 1, 1);
    tsl_tensor *attn_norm = vkt_input(ctx, c, IN_POSITIVE, TSL_TYPE_F32, 1, a->n_embd, 1, 1, 1);
    tsl_tensor *wq = vkt_weight(ctx, c, a->wtype, ref, a->n_embd, a->n_embd, 1, 1);
    tsl_tensor *wk = vkt_weight(ctx, c, a->wtype, ref, a->n_embd, kvd, 1, 1);
    tsl_tensor *wv = vkt_weight(ctx, c, a->wtype, ref, a->n_embd, kvd, 1, 1);
    tsl_tensor *wo = vkt_weight(ctx, c, a->wtype, ref, a->n_embd, a->n_embd, 1, 1);
    tsl_tensor *ffn_norm = vkt_input(ctx, c, IN_POSITIVE, TSL_TYPE_F32, 1, a->n_embd, 1, 1, 1);
    tsl_tensor *wg = vkt_weight(ctx, c, a->wtype, ref, a->n_embd, a->n_ff, 1, 1);
    tsl_tensor *wu = vkt_weight(ctx, c, a->wtype, ref, a->n_embd, a->n_ff, 1, 1);
    tsl_tensor *wd = vkt_weight(ctx, c, TSL_TYPE_F16, ref, a->n_ff, a->n_embd, 1, 1);

    tsl_tensor *x = tsl_get_rows(ctx, tok_embd, tokens); /* [n_embd, nt] */
    tsl_tensor *h = tsl_mul(ctx, tsl_rms_norm(ctx, x, 1e-5f), attn_norm);
    tsl_tensor *q = tsl_reshape_3d(ctx, vkt_mm(ctx, wq, a->wtype, h, ref), hd, a->n_head, nt);
    tsl_tensor *k = tsl_reshape_3d(ctx, vkt_mm(ctx, wk, a->wtype, h, ref), hd, a->n_head_kv, nt);
    tsl_tensor *v = tsl_reshape_3d(ctx, vkt_mm(ctx, wv, a->wtype, h, ref), hd, a->n_head_kv, nt);
    tsl_rope_params rp = tsl_rope_default((int)hd);
    rp.mode = TSL_ROPE_NEOX;
    q = tsl_rope(ctx, q, pos, NULL, &rp);
    k = tsl_rope(ctx, k, pos, NULL, &rp);
    /* a KV cache in F16, as a decoder keeps one */
    k = tsl_dup(ctx, k, TSL_TYPE_F16);
    k = tsl_dup(ctx, k, TSL_TYPE_F32);
    tsl_tensor *qp = tsl_permute(ctx, q, 0, 2, 1, 3);               /* [hd, nt, n_head] */
    tsl_tensor *kp = tsl_cont(ctx, tsl_permute(ctx, k, 0, 2, 1, 3)); /* [hd, nt, n_head_kv] */
    tsl_tensor *kq = tsl_mul_mat(ctx, kp, qp);                        /* [nt(k), nt(q), n_head] */
    kq = tsl_soft_max(ctx, kq, mask, 1.0f / sqrtf((float)hd));
    tsl_tensor *vt = tsl_cont(ctx, tsl_permute(ctx, v, 1, 2, 0, 3)); /* [nt, hd, n_head_kv] */
    tsl_tensor *kqv = tsl_mul_mat(ctx, vt, kq);                       /* [hd, nt, n_head] */
    tsl_tensor *o = tsl_cont(ctx, tsl_permute(ctx, kqv, 0, 2, 1, 3)); /* [hd, n_head, nt] */
    o = tsl_reshape_2d(ctx, o, a->n_embd, nt);
    x = tsl_add(ctx, x, vkt_mm(ctx, wo, a->wtype, o, ref));
    h = tsl_mul(ctx, tsl_rms_norm(ctx, x, 1e-5f), ffn_norm);
    tsl_tensor *f = tsl_swiglu(ctx, vkt_mm(ctx, wg, a->wtype, h, ref), vkt_mm(ctx, wu, a->wtype, h, ref));
    x = tsl_add(ctx, x, tsl_mul_mat(ctx, wd, f));
    c->out = tsl_norm(ctx, x, 1e-5f);
}

/* ---- fusion: mul(rms_norm(x), w) as one dispatch ------------------------------ */

typedef struct fuse_arg {
    int64_t n, rows;
    int mode; /* 0: y = mul(rms_norm(x), w); 1: the norm read twice; 2: the norm a graph output; 3: x a
                 view with wider rows; 4: y = add(r, mul_mat(w, x)), w Q4_0, one column; 5: add(mul_mat(w, x),
                 r); 6: the product read twice; 7: the product a graph output; 8: add(mul_mat(w4, h),
                 mul_mat(w8, h)), h = mul(rms_norm(x), w) one row, w4 Q4_0 and w8 Q8_0 (the norm writes their
                 quantized column when n <= 8192); 9: the same with h = swiglu(g, u), two rows of n */
} fuse_arg;

static void build_fuse(tsl_context *ctx, vkt_case *c, const void *arg, bool ref) {
    const fuse_arg *a = arg;
    if (a->mode >= 8) {
        tsl_tensor *x = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->n, 1, 1, 1);
        tsl_tensor *w = vkt_input(ctx, c, a->mode == 8 ? IN_POSITIVE : IN_VAL, TSL_TYPE_F32, 1, a->n, 1, 1, 1);
        tsl_tensor *w4 = vkt_weight(ctx, c, TSL_TYPE_Q4_0, ref, a->n, a->rows, 1, 1);
        tsl_tensor *w8 = vkt_weight(ctx, c, TSL_TYPE_Q8_0, ref, a->n, a->rows, 1, 1);
        tsl_tensor *h = a->mode == 8 ? tsl_mul(ctx, tsl_rms_norm(ctx, x, 1e-5f), w) : tsl_swiglu(ctx, x, w);
        c->out = tsl_add(ctx, vkt_mm(ctx, w4, TSL_TYPE_Q4_0, h, ref), vkt_mm(ctx, w8, TSL_TYPE_Q8_0, h, ref));
        return;
    }
    if (a->mode >= 4) {
        tsl_tensor *w = vkt_weight(ctx, c, TSL_TYPE_Q4_0, ref, a->n, a->rows, 1, 1);
        tsl_tensor *x = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->n, 1, 1, 1);
        tsl_tensor *r = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->rows, 1, 1, 1);
        tsl_tensor *p = vkt_mm(ctx, w, TSL_TYPE_Q4_0, x, ref);
        tsl_tensor *y = a->mode == 5 ? tsl_add(ctx, p, r) : tsl_add(ctx, r, p);
        if (a->mode == 6) y = tsl_add(ctx, y, p);
        if (a->mode == 7) p->flags |= TSL_FLAG_OUTPUT;
        c->out = y;
        return;
    }
    tsl_tensor *x = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->n + (a->mode == 3 ? 5 : 0), a->rows, 1, 1);
    if (a->mode == 3) x = tsl_view_2d(ctx, x, a->n, a->rows, x->nb[1], 2 * sizeof(float));
    tsl_tensor *w = vkt_input(ctx, c, IN_POSITIVE, TSL_TYPE_F32, 1, a->n, 1, 1, 1);
    tsl_tensor *t = tsl_rms_norm(ctx, x, 1e-5f);
    tsl_tensor *y = tsl_mul(ctx, t, w);
    if (a->mode == 1) y = tsl_add(ctx, y, t);
    if (a->mode == 2) t->flags |= TSL_FLAG_OUTPUT;
    c->out = y;
}

/* The backend fuses the pair where nothing else reads the norm (one
 * dispatch), and leaves it alone where something does (the norm read again,
 * or a graph output the caller or another backend reads); the results
 * equal the CPU's either way. Rows longer than the kernel keeps in
 * registers (8192) and short ones; strided rows. The same for the
 * residual add an integer-dot mat-vec takes into its store, in either
 * operand order. */
/* errors the validation layer reports on purpose (a kernel broken by a test) */
static uint64_t g_expected_validation_errors;

static void test_fusion(void) {
    vkt_stat st = {.name = "fusions"};
    static const fuse_arg cases[] = {{4096, 1, 0}, {4096 + 300, 3, 0}, {7, 5, 0},   {896, 2, 1},  {896, 2, 2},
                                     {1000, 4, 3}, {4096, 300, 4},     {896, 77, 5}, {512, 64, 6}, {512, 64, 7},
                                     {4096, 40, 8}, {896, 33, 8},      {4096 + 32, 40, 8}, {14336, 24, 9},
                                     {896, 20, 9}, {8192, 40, 8},      {8192 + 32, 40, 8}, {8192 + 300, 2, 0}};
    /* with integer dot products the product is a quantizer and the mat-vec:
     * 2 dispatches, the ADD in the latter; without, the F32 mat-vec and the
     * ADD apart. Mode 8: the norm, the first product, the second with the
     * ADD; the quantizer apart only for rows over 8192. Mode 9: the
     * swiglu (any length), then the same */
    const uint64_t q = g_qdot ? 1 : 0;
    const uint64_t want[] = {1, 1, 1, 3, 2, 1, 2, 2, 3 + q, 2 + q, 4 - q, 4 - q, 4 - q, 4 - q, 4 - q, 4 - q, 4, 1};
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        char what[64];
        snprintf(what, sizeof what, "n %lld rows %lld mode %d", (long long)cases[i].n, (long long)cases[i].rows,
                 cases[i].mode);
        /* the products: sums of n terms in another order (as test_mul_mat) */
        const double atol = cases[i].mode >= 4 ? 2e-5 * sqrt((double)cases[i].n) : 1e-6;
        vkt_check_disp(&st, build_fuse, &cases[i], (unsigned long long)(300 + i), atol, 1e-5, what, want[i]);
    }
    vkt_print(&st);
    /* The quantized column the norm or the swiglu writes is the quantizer's,
     * byte for byte: the same products, bit for bit, on a backend that
     * leaves the quantizer apart */
    setenv("TSL_VULKAN_FUSE_QUANT", "0", 1);
    tsl_error err;
    tsl_backend *plain = tsl_backend_vulkan_new(-1, &err);
    unsetenv("TSL_VULKAN_FUSE_QUANT");
    CHECK(plain != NULL);
    static const int exact[] = {10, 11, 12, 13, 14, 15};
    for (int e = 0; e < 6 && plain; e++) {
        const int i = exact[e];
        const uint64_t want_plain = 4; /* with integer dot: the quantizer, and the ADD in the second product */
        float *r[2] = {0};
        int64_t nr[2] = {0};
        tsl_vulkan_stats s0, s1;
        CHECK(tsl_backend_vulkan_stats(plain, &s0) == TSL_SUCCESS);
        CHECK(vkt_run(g_vk, build_fuse, &cases[i], false, 900 + i, &r[0], &nr[0], &err) == TSL_SUCCESS);
        CHECK(vkt_run(plain, build_fuse, &cases[i], false, 900 + i, &r[1], &nr[1], &err) == TSL_SUCCESS);
        CHECK(tsl_backend_vulkan_stats(plain, &s1) == TSL_SUCCESS);
        CHECKF(s1.dispatches - s0.dispatches == want_plain, "unfused: %llu dispatches, want %llu",
               (unsigned long long)(s1.dispatches - s0.dispatches), (unsigned long long)want_plain);
        CHECK(nr[0] == cases[i].rows && nr[1] == nr[0]);
        if (r[0] && r[1] && nr[0] == nr[1])
            CHECKF(memcmp(r[0], r[1], (size_t)nr[0] * sizeof(float)) == 0, "n %lld: fused and unfused products differ",
                   (long long)cases[i].n);
        free(r[0]);
        free(r[1]);
    }
    tsl_backend_free(plain);
    /* the quantizing swiglu failing to build (an entry point its module
     * lacks): the plain swiglu and the quantizer apart run instead, and the
     * results still equal the CPU's */
    CHECK(vk_test_set_kernel(g_vk, "swiglu_q_f32", NULL, 0, "no_such_entry", &err) == TSL_SUCCESS);
    vkt_stat sb = {.name = "fusions, a quantizing kernel broken"};
    /* the validation layer, when on, objects to the broken pipeline: expected */
    g_expected_validation_errors += vkt_check_disp(&sb, build_fuse, &cases[13], 913, 2e-5 * sqrt((double)cases[13].n),
                                                   1e-5, "n 14336, swiglu_q broken", 4);
    CHECK(vk_test_set_kernel(g_vk, "swiglu_q_f32", NULL, 0, NULL, &err) == TSL_SUCCESS);
    /* likewise the long-row norm (rows of 4096 .. 8192): the norm without
     * its column and the quantizer apart */
    CHECK(vk_test_set_kernel(g_vk, "rms_norm_mul_w8k_f32", NULL, 0, "no_such_entry", &err) == TSL_SUCCESS);
    g_expected_validation_errors += vkt_check_disp(&sb, build_fuse, &cases[15], 915, 2e-5 * sqrt((double)cases[15].n),
                                                   1e-5, "n 8192, rms_norm_mul_w8k broken", 4);
    CHECK(vk_test_set_kernel(g_vk, "rms_norm_mul_w8k_f32", NULL, 0, NULL, &err) == TSL_SUCCESS);
    vkt_print(&sb);
}

/* ---- products on F16 copies of their activations -------------------------------- */

typedef struct cv_arg {
    tsl_type wt;
    int64_t k, m, n;
    int mode; /* 0: add(mul_mat(w1, x), mul_mat(w2, x)); 1: between the two, rows 1 and 3 of x set anew
                 (set_rows into x itself) */
} cv_arg;

static void build_cv(tsl_context *ctx, vkt_case *c, const void *arg, bool ref) {
    (void)ref;
    const cv_arg *a = arg;
    tsl_tensor *x = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->k, a->n, 1, 1);
    tsl_tensor *w1 = vkt_weight(ctx, c, a->wt, false, a->k, a->m, 1, 1);
    tsl_tensor *w2 = vkt_weight(ctx, c, a->wt, false, a->k, a->m, 1, 1);
    tsl_tensor *p1 = tsl_mul_mat(ctx, w1, x);
    tsl_tensor *x2 = x;
    if (a->mode == 1) {
        tsl_tensor *rows = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 4, a->k, 2, 1, 1);
        tsl_tensor *idx = vkt_input(ctx, c, IN_SEQ, TSL_TYPE_I32, 1, 2, 1, 1, 1);
        x2 = tsl_set_rows(ctx, x, rows, idx, 1);
    }
    c->out = tsl_add(ctx, p1, tsl_mul_mat(ctx, w2, x2));
}

/* F16, Q8_0 and Q4_0 weights times F32 activations through a kernel that
 * reads F16 ones (the workgroup-scope kernels on devices that have them;
 * here the emulated tile, forced): the activations are copied to F16 once
 * for the products that read them, again after something writes over
 * them; block weights are dequantized to F16 before each product; a
 * compute that needs more scratch than the last gets it; and the results
 * are the CPU's (which rounds the activations to F16 for F16 weights, and
 * quantizes them to Q8_0 for block weights: tolerances to match). */
static void test_conv_products(void) {
    vkt_stat st = {.name = "products on F16 copies"};
    setenv("TSL_VK_MM_VARIANT", "mul_mat_cmemu_f16_f32c,mul_mat_cmemu_q8_0_f32c,mul_mat_cmemu_q4_0_f32c", 1);
    static const cv_arg cases[] = {
        {TSL_TYPE_F16, 96, 80, 70, 0},   {TSL_TYPE_F16, 256, 64, 130, 0},  {TSL_TYPE_F16, 96, 80, 70, 1},
        {TSL_TYPE_Q4_0, 96, 80, 70, 0},  {TSL_TYPE_Q8_0, 256, 64, 130, 1}, {TSL_TYPE_F16, 1024, 64, 600, 0},
        {TSL_TYPE_Q4_0, 1024, 64, 600, 1},
    };
    /* the copy, two products, the ADD; a second copy after the set_rows;
     * block weights: their copy before each product */
    static const uint64_t want[] = {4, 4, 6, 6, 8, 4, 8};
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        char what[64];
        snprintf(what, sizeof what, "%s k %lld m %lld n %lld mode %d", tsl_type_name(cases[i].wt),
                 (long long)cases[i].k, (long long)cases[i].m, (long long)cases[i].n, cases[i].mode);
        const double tol = (cases[i].wt == TSL_TYPE_F16 ? 1e-3 : 1e-2) * sqrt((double)cases[i].k);
        vkt_check_disp(&st, build_cv, &cases[i], (unsigned long long)(2400 + i), tol, 2e-3, what, want[i]);
    }
    /* no memory for the weights' copy (an injected allocation fault where
     * the scratch is made): the compute fails ALLOC_FAILED naming the
     * product, nothing runs; the rule gone, the next compute has the CPU's
     * values */
    {
        tsl_error err;
        tsl_backend *fresh = tsl_backend_vulkan_new(-1, &err);
        CHECK(fresh != NULL);
        if (fresh) {
            CHECK(tsl_backend_inject(fresh, "alloc@name=mul_mat_cmemu_q4_0_f32c", &err) == TSL_SUCCESS);
            float *r = NULL;
            int64_t nr = 0;
            tsl_vulkan_stats s0, s1;
            CHECK(tsl_backend_vulkan_stats(fresh, &s0) == TSL_SUCCESS);
            const tsl_status st2 = vkt_run(fresh, build_cv, &cases[3], false, 2450, &r, &nr, &err);
            CHECK(tsl_backend_vulkan_stats(fresh, &s1) == TSL_SUCCESS);
            CHECKF(st2 == TSL_ALLOC_FAILED, "scratch refused: status %s", tsl_status_str(st2));
            CHECK(tsl_backend_injected(fresh, TSL_FAULT_ALLOC) >= 1);
            CHECKF(strstr(err.message, "mul_mat_cmemu_q4_0_f32c") != NULL, "the record names the kernel: %s",
                   err.message);
            CHECKF(s1.dispatches == s0.dispatches, "scratch refused: %llu dispatches ran",
                   (unsigned long long)(s1.dispatches - s0.dispatches));
            free(r);
            tsl_backend_inject_clear(fresh);
            vkt_stat sf = {.name = "products on F16 copies, after a refused scratch"};
            tsl_backend *keep = g_vk;
            g_vk = fresh;
            vkt_check_disp(&sf, build_cv, &cases[3], 2451, 1e-2 * sqrt((double)cases[3].k), 2e-3, "scratch made",
                           want[3]);
            g_vk = keep;
            vkt_print(&sf);
            tsl_backend_free(fresh);
        }
    }
    /* the weights' copy kernel failing to build (an entry point its module
     * lacks): the product fails FAILED naming its own kernel with the
     * driver's text, nothing submitted */
    {
        tsl_error err;
        CHECK(vk_test_set_kernel(g_vk, "cpy_q4_0_f16", NULL, 0, "no_such_entry", &err) == TSL_SUCCESS);
        tsl_backend *fresh = tsl_backend_vulkan_new(-1, &err);
        CHECK(fresh != NULL);
        if (fresh) {
            tsl_vulkan_stats s0, s1;
            CHECK(tsl_backend_vulkan_stats(fresh, &s0) == TSL_SUCCESS);
            float *r = NULL;
            int64_t nr = 0;
            const tsl_status st3 = vkt_run(fresh, build_cv, &cases[3], false, 2460, &r, &nr, &err);
            CHECK(tsl_backend_vulkan_stats(fresh, &s1) == TSL_SUCCESS);
            CHECKF(st3 == TSL_FAILED, "copy kernel broken: status %s", tsl_status_str(st3));
            CHECKF(strcmp(err.kernel, "mul_mat_cmemu_q4_0_f32c") == 0, "the record names %s", err.kernel);
            CHECKF(strstr(err.driver_text, "no_such_entry") != NULL, "driver text: %s", err.driver_text);
            CHECK(s1.submits == s0.submits);
            g_expected_validation_errors += s1.validation_errors - s0.validation_errors;
            free(r);
            tsl_backend_free(fresh);
        }
        CHECK(vk_test_set_kernel(g_vk, "cpy_q4_0_f16", NULL, 0, NULL, &err) == TSL_SUCCESS);
    }
    unsetenv("TSL_VK_MM_VARIANT");
    vkt_print(&st);
}

/* ---- fusion: rotated keys straight into the cache ------------------------------------ */

typedef struct rr_arg {
    int64_t hd, n_head, n_tok, pos0, n_ctx;
    int rope_mode, n_dims;
    bool ff;
    int variant; /* 0: fused; 1: the rotated keys a graph output; 2: an F32 cache; 3: a view of the rotated keys
                    read again */
} rr_arg;

/* set_rows(cache, reshape_2d(rope(k, pos)), pos, 1): a decoder's store of
 * its keys. The result read is the whole cache. */
static void build_rope_rows(tsl_context *ctx, vkt_case *c, const void *arg, bool ref) {
    (void)ref;
    const rr_arg *a = arg;
    tsl_tensor *k = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->hd, a->n_head, a->n_tok, 1);
    tsl_tensor *pos = vkt_input(ctx, c, IN_SEQ, TSL_TYPE_I32, (float)a->pos0, a->n_tok, 1, 1, 1);
    tsl_tensor *cache = vkt_input(ctx, c, IN_VAL, a->variant == 2 ? TSL_TYPE_F32 : TSL_TYPE_F16, 1,
                                  a->hd * a->n_head, a->n_ctx, 1, 1);
    tsl_tensor *ff = a->ff ? vkt_input(ctx, c, IN_POSITIVE, TSL_TYPE_F32, 1, a->n_dims / 2, 1, 1, 1) : NULL;
    tsl_rope_params rp = tsl_rope_default(a->n_dims);
    rp.mode = a->rope_mode;
    rp.freq_base = 500000.0f;
    tsl_tensor *r = tsl_rope(ctx, k, pos, ff, &rp);
    if (a->variant == 1) r->flags |= TSL_FLAG_OUTPUT;
    tsl_tensor *rows = tsl_reshape_2d(ctx, r, a->hd * a->n_head, a->n_tok);
    c->out = tsl_set_rows(ctx, cache, rows, pos, 1);
    if (a->variant == 3) c->out = tsl_set_rows(ctx, c->out, rows, pos, 1); /* the same rows stored again */
}

/* The backend writes the rotated keys into their cache rows in one
 * dispatch where nothing else reads them (each of the two nodes apart
 * otherwise), with the CPU's results either way; a position past the cache
 * fails the compute naming the set_rows node, as set_rows apart does. */
static void test_rope_rows(void) {
    vkt_stat st = {.name = "rope into the cache"};
    static const rr_arg cases[] = {
        {128, 8, 1, 37, 64, TSL_ROPE_NORMAL, 128, true, 0},  {64, 2, 5, 3, 40, TSL_ROPE_NEOX, 32, false, 0},
        {128, 4, 1, 63, 64, TSL_ROPE_NEOX, 128, false, 0},   {64, 2, 3, 10, 20, TSL_ROPE_NORMAL, 64, false, 1},
        {64, 2, 3, 10, 20, TSL_ROPE_NORMAL, 64, false, 2},   {64, 2, 3, 10, 20, TSL_ROPE_NORMAL, 64, false, 3},
    };
    static const uint64_t want[] = {1, 1, 1, 2, 2, 3};
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        const rr_arg *a = &cases[i];
        char what[96];
        snprintf(what, sizeof what, "hd %lld x %lld, %lld tokens at %lld, variant %d", (long long)a->hd,
                 (long long)a->n_head, (long long)a->n_tok, (long long)a->pos0, a->variant);
        vkt_check_disp(&st, build_rope_rows, a, (unsigned long long)(1700 + i), 2e-3, 2e-3, what, want[i]);
    }
    /* positions 62, 63, 64 of a 64-row cache: the third is out of range,
     * fused, and with the set_rows apart (F16 and F32 caches) */
    tsl_error err;
    for (int v = 0; v < 3; v++) {
        const rr_arg bad = {64, 2, 3, 62, 64, TSL_ROPE_NORMAL, 64, false, v};
        float *r = NULL;
        int64_t nr = 0;
        CHECK(vkt_run(g_vk, build_rope_rows, &bad, false, 1790, &r, &nr, &err) == TSL_FAILED);
        char line[640];
        tsl_error_format(&err, line, sizeof line);
        CHECKF(err.node >= 0 && strstr(err.message, "set_rows: index 64 at position 2") != NULL, "variant %d: %s", v,
               line);
        free(r);
    }
    /* the compute after it is clean */
    vkt_check(&st, build_rope_rows, &cases[0], 1791, 2e-3, 2e-3, "after the index error");
    /* the fused kernel failing to build (an entry point its module lacks):
     * the rope and the set_rows apart run instead, with the same results */
    CHECK(vk_test_set_kernel(g_vk, "rope_set_rows_f16", NULL, 0, "no_such_entry", &err) == TSL_SUCCESS);
    /* the layer objects: expected */
    g_expected_validation_errors +=
        vkt_check_disp(&st, build_rope_rows, &cases[0], 1792, 2e-3, 2e-3, "rope_set_rows_f16 broken", 2);
    CHECK(vk_test_set_kernel(g_vk, "rope_set_rows_f16", NULL, 0, NULL, &err) == TSL_SUCCESS);
    vkt_print(&st);
}

/* ---- fusion: the q/k/v product with its ropes and cache stores ------------------- */

typedef struct qkv_arg {
    tsl_type wt;
    int64_t K, hd, nh, nkh, pos, n_ctx;
    int rope_mode, n_dims;
    int read;    /* 0 the attention's output, 1 the K cache, 2 the V cache, 3 the rotated q */
    int variant; /* 0 plain; 1 the unrotated k a graph output too; 2 frequency factors; 3 YaRN */
} qkv_arg;

/* One decoder token's attention as src/model/arch.c builds it from one q/k/v
 * product: its views rotated (q) and stored (k rotated into the K cache's
 * row pos, v into the transposed V cache's column pos), in that graph order
 * (the stores are outputs ahead of the attention, which reads the caches
 * through views of them). */
static void build_qkv(tsl_context *ctx, vkt_case *c, const void *arg, bool ref) {
    const qkv_arg *a = arg;
    const int64_t nq = a->hd * a->nh, nk = a->hd * a->nkh, M = nq + 2 * nk;
    const int64_t n_kv = a->pos < a->n_ctx ? a->pos + 1 : a->n_ctx; /* (a position past the cache: its error case) */
    tsl_tensor *w = vkt_weight(ctx, c, a->wt, ref, a->K, M, 1, 1);
    tsl_tensor *x = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->K, 1, 1, 1);
    tsl_tensor *pos = vkt_input(ctx, c, IN_SEQ, TSL_TYPE_I32, (float)a->pos, 1, 1, 1, 1);
    tsl_tensor *kc = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F16, 1, nk, a->n_ctx, 1, 1);
    tsl_tensor *vc = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F16, 1, a->n_ctx, nk, 1, 1);
    tsl_tensor *ff = a->variant == 2 ? vkt_input(ctx, c, IN_POSITIVE, TSL_TYPE_F32, 1, a->n_dims / 2, 1, 1, 1) : NULL;
    tsl_tensor *qkv = vkt_mm(ctx, w, a->wt, x, ref);
    tsl_tensor *q = tsl_reshape_3d(ctx, tsl_view_2d(ctx, qkv, nq, 1, qkv->nb[1], 0), a->hd, a->nh, 1);
    tsl_tensor *kv = tsl_view_2d(ctx, qkv, nk, 1, qkv->nb[1], (size_t)nq * 4);
    if (a->variant == 1) kv->flags |= TSL_FLAG_OUTPUT;
    tsl_tensor *k = tsl_reshape_3d(ctx, kv, a->hd, a->nkh, 1);
    tsl_tensor *v = tsl_view_2d(ctx, qkv, nk, 1, qkv->nb[1], (size_t)(nq + nk) * 4);
    tsl_rope_params rp = tsl_rope_default(a->n_dims);
    rp.mode = a->rope_mode;
    rp.freq_base = 500000.0f;
    rp.freq_scale = 0.5f;
    rp.attn_factor = 1.25f;
    if (a->variant == 3) {
        rp.ext_factor = 1.0f;
        rp.n_ctx_orig = 32;
    }
    tsl_tensor *rq = tsl_rope(ctx, q, pos, ff, &rp), *rk = tsl_rope(ctx, k, pos, ff, &rp);
    tsl_tensor *ks = tsl_set_rows(ctx, kc, tsl_reshape_2d(ctx, rk, nk, 1), pos, 1);
    tsl_tensor *vs = tsl_set_rows(ctx, vc, tsl_transpose(ctx, v), pos, 0);
    c->first[0] = ks;
    c->first[1] = vs;
    tsl_tensor *kview = tsl_view_3d(ctx, ks, a->hd, n_kv, a->nkh, ks->nb[1], (size_t)a->hd * 2, 0);
    tsl_tensor *vview = tsl_view_3d(ctx, vs, n_kv, a->hd, a->nkh, vs->nb[1], vs->nb[1] * (size_t)a->hd, 0);
    tsl_tensor *kq = tsl_mul_mat(ctx, kview, tsl_permute(ctx, rq, 0, 2, 1, 3));
    tsl_tensor *sm = tsl_soft_max(ctx, kq, NULL, 1.0f / sqrtf((float)a->hd));
    c->out = tsl_mul_mat(ctx, vview, sm);
    c->read = a->read == 1 ? ks : a->read == 2 ? vs : a->read == 3 ? rq : NULL;
}

/* The q/k/v product of one token rotates and stores its own rows (one
 * dispatch for the product and the three nodes after it, besides its
 * column's quantizer) where the device has the kernel and nothing else
 * reads the product: with the CPU's values, and bit for bit those of the
 * nodes apart (TSL_VULKAN_FUSE_ROPE=0), NORMAL and NEOX pairs, partial
 * rotary dims, Q8_0 and Q4_0 weights; apart where the unrotated k is read
 * too, with frequency factors or YaRN. A position past the caches is the k
 * store's error, as apart; the fused kernel failing to build leaves the
 * nodes apart, with the same values. */
static void test_qkv_rope(void) {
    vkt_stat st = {.name = "q/k/v rope and stores"};
    tsl_vulkan_device_info info;
    tsl_error err;
    CHECK(tsl_backend_vulkan_info(g_vk, &info, &err) == TSL_SUCCESS);
    static const qkv_arg cases[] = {
        {TSL_TYPE_Q4_0, 256, 64, 4, 2, 37, 64, TSL_ROPE_NORMAL, 64, 0, 0},
        {TSL_TYPE_Q4_0, 256, 64, 4, 2, 37, 64, TSL_ROPE_NORMAL, 64, 1, 0},
        {TSL_TYPE_Q4_0, 256, 64, 4, 2, 37, 64, TSL_ROPE_NORMAL, 64, 2, 0},
        {TSL_TYPE_Q4_0, 256, 64, 4, 2, 37, 64, TSL_ROPE_NORMAL, 64, 3, 0},
        {TSL_TYPE_Q8_0, 128, 32, 8, 2, 5, 16, TSL_ROPE_NEOX, 32, 0, 0},
        {TSL_TYPE_Q8_0, 128, 32, 8, 2, 5, 16, TSL_ROPE_NEOX, 16, 1, 0},
        {TSL_TYPE_Q8_0, 128, 32, 8, 2, 5, 16, TSL_ROPE_NEOX, 16, 3, 0},
        {TSL_TYPE_Q4_0, 512, 128, 2, 1, 0, 8, TSL_ROPE_NORMAL, 96, 1, 0},
        {TSL_TYPE_Q4_0, 512, 128, 2, 1, 0, 8, TSL_ROPE_NORMAL, 96, 2, 0},
        {TSL_TYPE_Q4_0, 256, 64, 4, 2, 37, 64, TSL_ROPE_NORMAL, 64, 0, 1},
        {TSL_TYPE_Q4_0, 256, 64, 4, 2, 37, 64, TSL_ROPE_NORMAL, 64, 0, 2},
        {TSL_TYPE_Q8_0, 128, 32, 8, 2, 5, 16, TSL_ROPE_NEOX, 32, 0, 3},
    };
    enum { N_CASES = sizeof cases / sizeof cases[0] };
    /* the quantizer, the fused product and the attention's two passes;
     * apart the product and the three nodes (rope_set_rows for k) */
    const uint64_t apart_n = info.integer_dot ? 7 : 6, fused = info.integer_dot ? 4 : apart_n;
    for (int i = 0; i < N_CASES; i++) {
        const qkv_arg *a = &cases[i];
        char what[128];
        snprintf(what, sizeof what, "%s hd %lld x %lld/%lld, %d dims, %s, pos %lld, read %d, variant %d",
                 a->wt == TSL_TYPE_Q4_0 ? "q4_0" : "q8_0", (long long)a->hd, (long long)a->nh, (long long)a->nkh,
                 a->n_dims, a->rope_mode == TSL_ROPE_NEOX ? "neox" : "normal", (long long)a->pos, a->read, a->variant);
        vkt_check_disp(&st, build_qkv, a, (unsigned long long)(2400 + i), 2e-3, 2e-3, what,
                       a->variant ? apart_n : fused);
    }
    /* bit for bit the nodes apart */
    setenv("TSL_VULKAN_FUSE_ROPE", "0", 1);
    tsl_backend *apart = tsl_backend_vulkan_new(info.index, &err);
    unsetenv("TSL_VULKAN_FUSE_ROPE");
    CHECK(apart != NULL);
    for (int i = 0; apart && i < N_CASES; i++) {
        float *r[2] = {0};
        int64_t nr[2] = {0};
        tsl_vulkan_stats s0, s1;
        CHECK(tsl_backend_vulkan_stats(apart, &s0) == TSL_SUCCESS);
        CHECK(vkt_run(g_vk, build_qkv, &cases[i], false, 2450 + i, &r[0], &nr[0], &err) == TSL_SUCCESS);
        CHECK(vkt_run(apart, build_qkv, &cases[i], false, 2450 + i, &r[1], &nr[1], &err) == TSL_SUCCESS);
        CHECK(tsl_backend_vulkan_stats(apart, &s1) == TSL_SUCCESS);
        CHECKF(s1.dispatches - s0.dispatches == apart_n, "case %d apart: %llu dispatches", i,
               (unsigned long long)(s1.dispatches - s0.dispatches));
        CHECK(nr[0] > 0 && nr[0] == nr[1]);
        if (r[0] && r[1] && nr[0] == nr[1])
            CHECKF(memcmp(r[0], r[1], (size_t)nr[0] * sizeof(float)) == 0, "case %d: fused and apart differ", i);
        free(r[0]);
        free(r[1]);
    }
    tsl_backend_free(apart);
    /* position 8 of an 8-row cache: the k store's error, nothing stored */
    const qkv_arg bad = {TSL_TYPE_Q4_0, 512, 128, 2, 1, 8, 8, TSL_ROPE_NORMAL, 96, 1, 0};
    float *r = NULL;
    int64_t nr = 0;
    CHECK(vkt_run(g_vk, build_qkv, &bad, false, 2490, &r, &nr, &err) == TSL_FAILED);
    char line[640];
    tsl_error_format(&err, line, sizeof line);
    CHECKF(err.node >= 0 && strstr(err.message, "set_rows: index 8 at position 0") != NULL &&
               strstr(line, "SET_ROWS") != NULL,
           "%s", line);
    free(r);
    vkt_check(&st, build_qkv, &cases[0], 2491, 2e-3, 2e-3, "after the index error");
    /* the fused kernel failing to build: the nodes apart, the same values */
    const char *names[] = {"mul_mat_vecq_q4_0_f32_rope", "mul_mat_vecq_q8_0_f32_rope"};
    for (int v = 0; v < 2 && info.integer_dot; v++) {
        CHECK(vk_test_set_kernel(g_vk, names[v], NULL, 0, "no_such_entry", &err) == TSL_SUCCESS);
        g_expected_validation_errors +=
            vkt_check_disp(&st, build_qkv, &cases[v ? 4 : 0], 2492 + v, 2e-3, 2e-3, names[v], apart_n);
        CHECK(vk_test_set_kernel(g_vk, names[v], NULL, 0, NULL, &err) == TSL_SUCCESS);
    }
    vkt_print(&st);
}

/* ---- fusion: a norm between two products -------------------------------------- */

typedef struct np_arg {
    tsl_type wt;     /* the first product's weights (the second's: the other block type) */
    int64_t K, M, N; /* x = add(r, mul_mat(W1 [K, M], a)); the second product W2 [M, N] */
    int variant;     /* 0 one product after the norm; 1 two (their sum); 2 the normed row read again; 3 the
                        normed row a graph output; 4 no residual add */
} np_arg;

/* mul_mat(W2, mul(rms_norm(add(r, mul_mat(W1, a))), w)): a decoder's output
 * projection (or down projection), its residual, the next norm and the
 * product after it, one column. */
static void build_norm_prod(tsl_context *ctx, vkt_case *c, const void *arg, bool ref) {
    const np_arg *a = arg;
    const tsl_type w2t = a->wt == TSL_TYPE_Q4_0 ? TSL_TYPE_Q8_0 : TSL_TYPE_Q4_0;
    tsl_tensor *w1 = vkt_weight(ctx, c, a->wt, ref, a->K, a->M, 1, 1);
    tsl_tensor *w2 = vkt_weight(ctx, c, w2t, ref, a->M, a->N, 1, 1);
    tsl_tensor *w3 = vkt_weight(ctx, c, a->wt, ref, a->M, a->N, 1, 1);
    tsl_tensor *in = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->K, 1, 1, 1);
    tsl_tensor *r = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->M, 1, 1, 1);
    tsl_tensor *nw = vkt_input(ctx, c, IN_POSITIVE, TSL_TYPE_F32, 1, a->M, 1, 1, 1);
    tsl_tensor *x = vkt_mm(ctx, w1, a->wt, in, ref);
    if (a->variant != 4) x = tsl_add(ctx, r, x);
    tsl_tensor *y = tsl_mul(ctx, tsl_rms_norm(ctx, x, 1e-5f), nw);
    if (a->variant == 3) y->flags |= TSL_FLAG_OUTPUT;
    tsl_tensor *o = vkt_mm(ctx, w2, w2t, y, ref);
    if (a->variant == 1) o = tsl_add(ctx, o, vkt_mm(ctx, w3, a->wt, y, ref));
    if (a->variant == 2) o = tsl_add(ctx, o, tsl_view_1d(ctx, y, a->N, 0));
    c->out = o;
}

static bool vk_remake(int index, const char *const *env);

/* Largest |a - b| over n values, and the largest |b|. */
static void vkt_maxdiff(const float *a, const float *b, int64_t n, double *diff, double *big) {
    *diff = 0;
    *big = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)b[i]);
        if (d > *diff || isnan(d)) *diff = isnan(d) ? INFINITY : d;
        if (fabs((double)b[i]) > *big) *big = fabs((double)b[i]);
    }
}

/* The norm between a product (with its residual) and the products reading
 * its row runs in them (the first writes the norm's column, 32 rows a
 * workgroup, unscaled; the others scale its block scales): Q4_0 and Q8_0
 * weights, rows of 4096 and longer (the 64-lane teams), one and two
 * products after it; apart where the normed row is read otherwise, is an
 * output, or is longer than the norm's column takes (4096); by default
 * only for rows of at most 2048 values (TSL_VULKAN_FUSE_NORM=1 here for the
 * rest). The values:
 * those of the norm apart (TSL_VULKAN_FUSE_NORM=0) within 0.2% of the
 * largest (the column's quants and F16 scales are the norm's but where x s
 * w and x w round across a boundary, a few blocks at most: each such block
 * moves every value by ~2^-11 of its part), and the CPU's within 1%. The
 * fused kernels failing to build leave the norm apart, with its values. */
static void test_norm_products(void) {
    vkt_stat st = {.name = "norm between products"};
    static const np_arg cases[] = {
        {TSL_TYPE_Q4_0, 512, 4096, 96, 0},   {TSL_TYPE_Q8_0, 256, 1024, 64, 0}, {TSL_TYPE_Q4_0, 8192, 512, 64, 0},
        {TSL_TYPE_Q8_0, 256, 1024, 64, 1},   {TSL_TYPE_Q4_0, 256, 1024, 64, 2}, {TSL_TYPE_Q4_0, 256, 1024, 64, 3},
        {TSL_TYPE_Q4_0, 256, 4096 + 32, 64, 0}, {TSL_TYPE_Q8_0, 256, 2048, 64, 4}, {TSL_TYPE_Q4_0, 256, 8192 + 32, 64, 0},
    };
    enum { N_CASES = sizeof cases / sizeof cases[0] };
    /* with integer dot products: the first product's quantizer, the product
     * (with its residual), the products after the norm (an ADD taken into
     * the last); apart the norm too: for a row of 4096 .. 8192 the norm's
     * long-row variant, which quantizes the column itself; for a row over
     * 8192 the second product's quantizer too. Without integer dot: every
     * product, norm and ADD its own dispatch, nothing quantized */
    static const uint64_t qdot[] = {3, 3, 3, 4, 4, 4, 4, 3, 5}, plain[] = {4, 4, 4, 6, 5, 4, 4, 3, 4};
    tsl_vulkan_device_info info;
    tsl_error err;
    CHECK(tsl_backend_vulkan_info(g_vk, &info, &err) == TSL_SUCCESS);
    /* by default only rows of at most 2048 values (VK_NFUSE_AUTO_MAX) */
    if (g_qdot) {
        vkt_check_disp(&st, build_norm_prod, &cases[0], 2598, 2e-5 * sqrt(4096.0), 1e-4, "auto, 4096", 4);
        vkt_check_disp(&st, build_norm_prod, &cases[1], 2599, 2e-5 * sqrt(1024.0), 1e-4, "auto, 1024", 3);
    }
    /* TSL_VULKAN_FUSE_NORM=1: any length */
    if (!vk_remake(info.index, (const char *[]){"TSL_VULKAN_FUSE_NORM", "1", NULL})) return;
    setenv("TSL_VULKAN_FUSE_NORM", "0", 1);
    tsl_backend *apart = tsl_backend_vulkan_new(info.index, &err);
    unsetenv("TSL_VULKAN_FUSE_NORM");
    CHECK(apart != NULL);
    for (int i = 0; apart && i < N_CASES; i++) {
        const np_arg *a = &cases[i];
        char what[96];
        snprintf(what, sizeof what, "%s K %lld M %lld N %lld, variant %d", a->wt == TSL_TYPE_Q4_0 ? "q4_0" : "q8_0",
                 (long long)a->K, (long long)a->M, (long long)a->N, a->variant);
        float *r[3] = {0};
        int64_t nr[3] = {0};
        tsl_vulkan_stats s0, s1;
        CHECK(tsl_backend_vulkan_stats(g_vk, &s0) == TSL_SUCCESS);
        const bool ok = vkt_run(g_vk, build_norm_prod, a, false, 2600 + i, &r[0], &nr[0], &err) == TSL_SUCCESS &&
                        vkt_run(apart, build_norm_prod, a, false, 2600 + i, &r[1], &nr[1], &err) == TSL_SUCCESS &&
                        vkt_run(g_cpu, build_norm_prod, a, true, 2600 + i, &r[2], &nr[2], &err) == TSL_SUCCESS &&
                        nr[0] == a->N && nr[1] == a->N && nr[2] == a->N;
        CHECKF(ok, "%s: %s", what, err.message);
        CHECK(tsl_backend_vulkan_stats(g_vk, &s1) == TSL_SUCCESS);
        const uint64_t want = g_qdot ? qdot[i] : plain[i];
        CHECKF(s1.dispatches - s0.dispatches == want, "%s: %llu dispatches, want %llu", what,
               (unsigned long long)(s1.dispatches - s0.dispatches), (unsigned long long)want);
        if (ok) {
            double d, big, dc, bc;
            vkt_maxdiff(r[0], r[1], a->N, &d, &big);
            vkt_maxdiff(r[0], r[2], a->N, &dc, &bc);
            CHECKF(d <= 2e-3 * big && dc <= 1e-2 * bc, "%s: %.3g from the norm apart, %.3g from the CPU (largest %.3g)",
                   what, d, dc, bc);
            if (d / (2e-3 * big) > st.worst) st.worst = d / (2e-3 * big);
            if (d > st.max_err) st.max_err = d;
        }
        st.cases++;
        for (int j = 0; j < 3; j++) free(r[j]);
    }
    tsl_backend_free(apart);
    /* the fused kernels failing to build: the norm apart, the same values */
    const char *names[] = {"mul_mat_vecq_q4_0_f32_nq", "mul_mat_vecq_q4_0_f32_nq_w1024", "mul_mat_vecq_q8_0_f32_ns"};
    for (int v = 0; v < 3 && g_qdot; v++) {
        CHECK(vk_test_set_kernel(g_vk, names[v], NULL, 0, "no_such_entry", &err) == TSL_SUCCESS);
        g_expected_validation_errors += vkt_check_disp(&st, build_norm_prod, &cases[v == 1 ? 2 : 0], 2690 + v,
                                                       2e-5 * sqrt(4096.0), 1e-4, names[v], 4);
        CHECK(vk_test_set_kernel(g_vk, names[v], NULL, 0, NULL, &err) == TSL_SUCCESS);
    }
    vk_remake(info.index, (const char *[]){NULL});
    vkt_print(&st);
}

/* ---- fusion: a per-head norm into the rope ---------------------------------------- */

static bool vk_remake(int index, const char *const *env);

typedef struct nr_arg {
    int64_t hd, n_head, n_tok, pos0, n_ctx;
    int rope_mode, n_dims;
    int variant; /* 0: rope out (F32); 1: into an F16 cache (set_rows); 2: the normed rows a graph output too;
                    3: the rope with frequency factors */
} nr_arg;

/* rope(mul(rms_norm(x), w), pos), x a view of the heads inside wider rows
 * (as qwen3's q and k are views of one product): its q and k norms. */
static void build_norm_rope(tsl_context *ctx, vkt_case *c, const void *arg, bool ref) {
    (void)ref;
    const nr_arg *a = arg;
    tsl_tensor *rows = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->hd * (a->n_head + 3), a->n_tok, 1, 1);
    tsl_tensor *x = tsl_view_3d(ctx, rows, a->hd, a->n_head, a->n_tok, (size_t)a->hd * 4, rows->nb[1],
                                (size_t)a->hd * 4 * 2);
    tsl_tensor *w = vkt_input(ctx, c, IN_POSITIVE, TSL_TYPE_F32, 1, a->hd, 1, 1, 1);
    tsl_tensor *pos = vkt_input(ctx, c, IN_SEQ, TSL_TYPE_I32, (float)a->pos0, a->n_tok, 1, 1, 1);
    tsl_tensor *ff = a->variant == 3 ? vkt_input(ctx, c, IN_POSITIVE, TSL_TYPE_F32, 1, a->n_dims / 2, 1, 1, 1) : NULL;
    tsl_tensor *nx = tsl_mul(ctx, tsl_rms_norm(ctx, x, 1e-6f), w);
    if (a->variant == 2) nx->flags |= TSL_FLAG_OUTPUT;
    tsl_rope_params rp = tsl_rope_default(a->n_dims);
    rp.mode = a->rope_mode;
    rp.freq_base = 1000000.0f;
    tsl_tensor *r = tsl_rope(ctx, nx, pos, ff, &rp);
    c->out = r;
    if (a->variant == 1) {
        tsl_tensor *cache = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F16, 1, a->hd * a->n_head, a->n_ctx, 1, 1);
        c->out = tsl_set_rows(ctx, cache, tsl_reshape_2d(ctx, r, a->hd * a->n_head, a->n_tok), pos, 1);
    }
}

/* The norm runs inside the rope's dispatch (one dispatch for norm, weight
 * and rope; with the store into the cache as well) where nothing else reads
 * the normed rows and the rope has no frequency factors; apart otherwise.
 * Values against the CPU's nodes either way; a position past the cache is
 * the set_rows node's error, as apart; the fused kernel failing to build
 * leaves the nodes apart, with the same results; on a device without
 * shaderFloat64 the float variant takes the norm the same way. */
static void test_norm_rope(void) {
    vkt_stat st = {.name = "norm into the rope"};
    static const nr_arg cases[] = {
        {128, 16, 1, 37, 64, TSL_ROPE_NEOX, 128, 0},  {128, 8, 1, 37, 64, TSL_ROPE_NEOX, 128, 1},
        {64, 4, 5, 3, 40, TSL_ROPE_NORMAL, 64, 0},    {64, 4, 5, 3, 40, TSL_ROPE_NORMAL, 32, 1},
        {96, 3, 2, 9, 20, TSL_ROPE_NEOX, 64, 0},      {64, 2, 3, 10, 20, TSL_ROPE_NEOX, 64, 2},
        {64, 2, 3, 10, 20, TSL_ROPE_NORMAL, 64, 3},   {320, 2, 1, 5, 20, TSL_ROPE_NEOX, 320, 1},
    };
    static const uint64_t want[] = {1, 1, 1, 1, 1, 2, 2, 1};
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        const nr_arg *a = &cases[i];
        char what[96];
        snprintf(what, sizeof what, "hd %lld x %lld, %lld tokens at %lld, %d dims, variant %d", (long long)a->hd,
                 (long long)a->n_head, (long long)a->n_tok, (long long)a->pos0, a->n_dims, a->variant);
        vkt_check_disp(&st, build_norm_rope, a, (unsigned long long)(1900 + i), 2e-3, 2e-3, what, want[i]);
    }
    /* positions 62, 63, 64 of a 64-row cache: the third is out of range */
    tsl_error err;
    const nr_arg bad = {64, 2, 3, 62, 64, TSL_ROPE_NEOX, 64, 1};
    float *r = NULL;
    int64_t nr = 0;
    CHECK(vkt_run(g_vk, build_norm_rope, &bad, false, 1990, &r, &nr, &err) == TSL_FAILED);
    char line[640];
    tsl_error_format(&err, line, sizeof line);
    CHECKF(err.node >= 0 && strstr(err.message, "set_rows: index 64 at position 2") != NULL, "%s", line);
    free(r);
    vkt_check(&st, build_norm_rope, &cases[1], 1991, 2e-3, 2e-3, "after the index error");
    /* the fused kernels failing to build: the nodes apart (rms_norm_mul,
     * then the rope, or rope_set_rows), the same results */
    const char *names[] = {"rope_norm_f32", "rope_norm_set_rows_f16"};
    for (int v = 0; v < 2; v++) {
        CHECK(vk_test_set_kernel(g_vk, names[v], NULL, 0, "no_such_entry", &err) == TSL_SUCCESS);
        /* the layer objects: expected */
        g_expected_validation_errors += vkt_check_disp(&st, build_norm_rope, &cases[v], 1992 + v, 2e-3, 2e-3, names[v], 2);
        CHECK(vk_test_set_kernel(g_vk, names[v], NULL, 0, NULL, &err) == TSL_SUCCESS);
    }
    /* on a device without shaderFloat64 (TSL_VULKAN_NO_FLOAT64): the float
     * variant takes the norm the same way (rope_norm_f32_fp32); the store
     * into the cache, fused only with angles in double, apart */
    tsl_vulkan_device_info info;
    CHECK(tsl_backend_vulkan_info(g_vk, &info, &err) == TSL_SUCCESS);
    if (vk_remake(info.index, (const char *[]){"TSL_VULKAN_NO_FLOAT64", "1", NULL})) {
        vkt_check_disp(&st, build_norm_rope, &cases[2], 1995, 2e-3, 2e-3, "no float64", 1);
        vkt_check_disp(&st, build_norm_rope, &cases[1], 1996, 2e-3, 2e-3, "no float64, into the cache", 2);
    }
    vk_remake(info.index, (const char *[]){NULL});
    vkt_print(&st);
}

/* ---- fusion: attention for a few query columns ----------------------------------- */

typedef struct attn_arg {
    int64_t hd, hdv, H, hk, N, n_kv, n_ctx;
    int mask;  /* 0 none, 1 F32, 2 F16, 3 F32 all -inf */
    int inner; /* 1: q made in the graph and the result read by another node: the graph's memory plan may
                  put the result where q was; 2: the result, one column, projected by Q4_0 weights (an
                  integer-dot mat-vec, whose column the combine pass may write quantized) */
} attn_arg;

/* mul_mat(V, soft_max(mul_mat(K, q), mask, 1/sqrt(hd))) over views of an F16
 * cache as a decoder keeps it: K rows by position, V transposed (rows by
 * dimension, contiguous along the positions); q permuted to [hd, N, H]. */
static void build_attn(tsl_context *ctx, vkt_case *c, const void *arg, bool ref) {
    const attn_arg *a = arg;
    (void)ref;
    tsl_tensor *kc = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F16, 1, a->hd * a->hk, a->n_ctx, 1, 1);
    tsl_tensor *vc = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F16, 1, a->n_ctx, a->hdv * a->hk, 1, 1);
    tsl_tensor *q = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->hd, a->H, a->N, 1);
    tsl_tensor *m = NULL;
    if (a->mask)
        m = vkt_input(ctx, c, IN_MASK, a->mask == 2 ? TSL_TYPE_F16 : TSL_TYPE_F32, a->mask == 3 ? 1.0f : 0.2f, a->n_kv,
                      a->N, 1, 1);
    tsl_tensor *k = tsl_view_3d(ctx, kc, a->hd, a->n_kv, a->hk, kc->nb[1], (size_t)a->hd * 2, 0);
    tsl_tensor *v = tsl_view_3d(ctx, vc, a->n_kv, a->hdv, a->hk, vc->nb[1], vc->nb[1] * (size_t)a->hdv, 0);
    if (a->inner == 1) q = tsl_scale(ctx, q, 0.5f);
    tsl_tensor *kq = tsl_mul_mat(ctx, k, tsl_permute(ctx, q, 0, 2, 1, 3));
    kq = tsl_soft_max(ctx, kq, m, 1.0f / sqrtf((float)a->hd));
    c->out = tsl_mul_mat(ctx, v, kq);
    if (a->inner == 1) c->out = tsl_scale(ctx, c->out, 2.0f);
    if (a->inner == 2) {
        tsl_tensor *wo = vkt_weight(ctx, c, TSL_TYPE_Q4_0, ref, a->hdv * a->H, 96, 1, 1);
        tsl_tensor *cur = tsl_reshape_2d(ctx, tsl_permute(ctx, c->out, 0, 2, 1, 3), a->hdv * a->H, a->N);
        c->out = vkt_mm(ctx, wo, TSL_TYPE_Q4_0, cur, ref);
    }
}

/* The three nodes run as two dispatches (the key ranges' partials, then
 * their combination) for up to 8 query columns (three for more), with
 * grouped heads or not, one key range or many, a range over several of the
 * kernel's chunks (256 heads x columns: one range of 600 keys), F32, F16 or no mask, head sizes that are no multiple of
 * the subgroup; a column whose keys are all masked gives zeros as
 * soft_max's row of zeros does. Values against the CPU's three nodes (which round q
 * and the weights to F16 for their F16 products: 2^-11 of the terms), and,
 * tighter, against the three Vulkan kernels apart (TSL_VULKAN_FUSE=0: F32
 * throughout, so only the order of sums and the running maximum differ). */
static void test_attention(void) {
    vkt_stat st = {.name = "attention"};
    setenv("TSL_VULKAN_FUSE", "0", 1);
    tsl_error perr;
    tsl_backend *plain = tsl_backend_vulkan_new(-1, &perr);
    unsetenv("TSL_VULKAN_FUSE");
    CHECK(plain != NULL);
    static const attn_arg cases[] = {
        {64, 64, 8, 2, 1, 37, 64, 1, 0},        {128, 128, 32, 8, 1, 600, 640, 1, 0},
        {64, 64, 4, 4, 3, 300, 320, 2, 0},      {80, 48, 6, 3, 2, 1, 8, 0, 0},
        {64, 64, 8, 2, 1, 37, 64, 3, 0},        {256, 256, 2, 1, 8, 513, 520, 1, 0},
        {64, 64, 8, 2, 9, 37, 64, 1, 0},        {64, 64, 32, 8, 8, 600, 640, 1, 0},
        {128, 128, 32, 8, 1, 300, 320, 1, 1},   {64, 64, 8, 2, 3, 37, 64, 1, 1},
    };
    /* the last two: q made in the graph, whose memory plan may put the
     * result where q was (model_test_llm_vk's decode graphs do: the combine
     * pass writes it only once every key range has read q) */
    static const uint64_t want[] = {2, 2, 2, 2, 2, 2, 3, 2, 0, 0};
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        const attn_arg *a = &cases[i];
        char what[96];
        snprintf(what, sizeof what, "hd %lld/%lld heads %lld/%lld cols %lld keys %lld mask %d%s", (long long)a->hd,
                 (long long)a->hdv, (long long)a->H, (long long)a->hk, (long long)a->N, (long long)a->n_kv, a->mask,
                 a->inner ? " inner q" : "");
        tsl_vulkan_stats s0, s1;
        CHECK(tsl_backend_vulkan_stats(g_vk, &s0) == TSL_SUCCESS);
        vkt_check(&st, build_attn, a, (unsigned long long)(500 + i), 2e-4, 1e-3, what);
        CHECK(tsl_backend_vulkan_stats(g_vk, &s1) == TSL_SUCCESS);
        if (want[i])
            CHECKF(s1.dispatches - s0.dispatches == want[i], "%s: %llu dispatches, want %llu", what,
                   (unsigned long long)(s1.dispatches - s0.dispatches), (unsigned long long)want[i]);
        float *r[2] = {0};
        int64_t nr[2] = {0};
        tsl_error err;
        CHECK(vkt_run(g_vk, build_attn, a, false, 700 + i, &r[0], &nr[0], &err) == TSL_SUCCESS);
        CHECK(!plain || vkt_run(plain, build_attn, a, false, 700 + i, &r[1], &nr[1], &err) == TSL_SUCCESS);
        int bad = 0;
        for (int64_t e = 0; r[0] && r[1] && nr[0] == nr[1] && e < nr[0]; e++)
            if (!(fabs(r[0][e] - r[1][e]) <= 1e-6 + 2e-5 * fabs(r[1][e])) && bad++ < 3)
                fprintf(stderr, "  %s: [%lld] fused %.9g apart %.9g\n", what, (long long)e, r[0][e], r[1][e]);
        CHECKF(bad == 0 && nr[0] == nr[1], "%s: fused and unfused differ in %d values", what, bad);
        free(r[0]);
        free(r[1]);
    }
    tsl_backend_free(plain);
    /* no memory for the partials (an injected allocation fault where the
     * scratch is made): the three nodes run apart, the graph succeeds */
    {
        tsl_error err;
        tsl_backend *fresh = tsl_backend_vulkan_new(-1, &err);
        CHECK(fresh != NULL);
        if (fresh) {
            CHECK(tsl_backend_inject(fresh, "alloc@name=attn_dec_f16_mask_f32", &err) == TSL_SUCCESS);
            tsl_vulkan_stats s0, s1;
            CHECK(tsl_backend_vulkan_stats(fresh, &s0) == TSL_SUCCESS);
            float *r[2] = {0};
            int64_t nr[2] = {0};
            CHECK(vkt_run(fresh, build_attn, &cases[1], false, 650, &r[0], &nr[0], &err) == TSL_SUCCESS);
            CHECK(tsl_backend_vulkan_stats(fresh, &s1) == TSL_SUCCESS);
            CHECK(tsl_backend_injected(fresh, TSL_FAULT_ALLOC) >= 1);
            CHECKF(s1.dispatches - s0.dispatches == 3, "scratch refused: %llu dispatches, want 3",
                   (unsigned long long)(s1.dispatches - s0.dispatches));
            /* the rule gone, the next compute makes the scratch and fuses */
            tsl_backend_inject_clear(fresh);
            CHECK(tsl_backend_vulkan_stats(fresh, &s0) == TSL_SUCCESS);
            CHECK(vkt_run(fresh, build_attn, &cases[1], false, 650, &r[1], &nr[1], &err) == TSL_SUCCESS);
            CHECK(tsl_backend_vulkan_stats(fresh, &s1) == TSL_SUCCESS);
            CHECKF(s1.dispatches - s0.dispatches == 2, "scratch made: %llu dispatches, want 2",
                   (unsigned long long)(s1.dispatches - s0.dispatches));
            int bad = 0;
            for (int64_t e = 0; r[0] && r[1] && nr[0] == nr[1] && e < nr[0]; e++)
                bad += !(fabs(r[0][e] - r[1][e]) <= 1e-6 + 2e-5 * fabs(r[0][e]));
            CHECKF(bad == 0 && nr[0] == nr[1], "scratch refused and made differ in %d values", bad);
            free(r[0]);
            free(r[1]);
            tsl_backend_free(fresh);
        }
    }
    /* the projected output: with integer dot products the attention runs
     * in one dispatch (attn_dec1: the last key range of each head joins the
     * ranges) and writes the projection's quantized column (the projection
     * 1 dispatch, no quantizer), byte for byte the quantizer's: the same
     * products, bit for bit, as a backend that leaves the quantizer apart
     * (two attention passes, the quantizer, the projection); and as the two
     * passes with the quantizing combine, where attn_dec1 fails to build */
    {
        static const attn_arg pa = {128, 128, 32, 8, 1, 300, 320, 1, 2};
        tsl_vulkan_stats s0, s1;
        CHECK(tsl_backend_vulkan_stats(g_vk, &s0) == TSL_SUCCESS);
        /* against the CPU loosely: each side quantizes its own attention
         * output to Q8_0, and outputs 2^-11 apart can round to quants one
         * step apart (the byte-exact check is the one below) */
        vkt_stat sp = {.name = "attention, projected"};
        vkt_check(&sp, build_attn, &pa, 660, 3e-2, 3e-2, "projected");
        CHECK(tsl_backend_vulkan_stats(g_vk, &s1) == TSL_SUCCESS);
        const uint64_t want_p = g_qdot ? 2 : 3; /* attn_dec1 and the mat-vec; or two passes and the F32 mat-vec */
        CHECKF(s1.dispatches - s0.dispatches == want_p, "projected: %llu dispatches, want %llu",
               (unsigned long long)(s1.dispatches - s0.dispatches), (unsigned long long)want_p);
        if (g_qdot) {
            tsl_error err;
            setenv("TSL_VULKAN_FUSE_QUANT", "0", 1);
            tsl_backend *noq = tsl_backend_vulkan_new(-1, &err);
            unsetenv("TSL_VULKAN_FUSE_QUANT");
            CHECK(noq != NULL);
            float *r[2] = {0};
            int64_t nr[2] = {0};
            CHECK(vkt_run(g_vk, build_attn, &pa, false, 661, &r[0], &nr[0], &err) == TSL_SUCCESS);
            CHECK(!noq || vkt_run(noq, build_attn, &pa, false, 661, &r[1], &nr[1], &err) == TSL_SUCCESS);
            CHECK(nr[0] == nr[1] && r[0] && r[1]);
            if (r[0] && r[1] && nr[0] == nr[1])
                CHECKF(memcmp(r[0], r[1], (size_t)nr[0] * sizeof(float)) == 0,
                       "projected: the quantizing combine and the quantizer apart differ");
            /* attn_dec1 refused by the driver: the two passes, the combine
             * quantizing, the same bytes */
            CHECK(vk_test_set_kernel(g_vk, "attn_dec1_f16_mask_f32", NULL, 0, "no_such_entry", &err) == TSL_SUCCESS);
            tsl_vulkan_stats t0, t1;
            CHECK(tsl_backend_vulkan_stats(g_vk, &t0) == TSL_SUCCESS);
            const uint64_t v0 = t0.validation_errors;
            float *r2 = NULL;
            int64_t n2 = 0;
            CHECK(vkt_run(g_vk, build_attn, &pa, false, 661, &r2, &n2, &err) == TSL_SUCCESS);
            CHECK(tsl_backend_vulkan_stats(g_vk, &t1) == TSL_SUCCESS);
            CHECKF(t1.dispatches - t0.dispatches == 3, "attn_dec1 broken: %llu dispatches, want 3",
                   (unsigned long long)(t1.dispatches - t0.dispatches));
            CHECKF(n2 == nr[0] && r[0] && r2 && memcmp(r[0], r2, (size_t)n2 * sizeof(float)) == 0,
                   "projected: one dispatch and two passes differ");
            g_expected_validation_errors += t1.validation_errors - v0;
            CHECK(vk_test_set_kernel(g_vk, "attn_dec1_f16_mask_f32", NULL, 0, NULL, &err) == TSL_SUCCESS);
            free(r2);
            free(r[0]);
            free(r[1]);
            tsl_backend_free(noq);
        }
        vkt_print(&sp);
    }
    /* either kernel failing to build: the three nodes run apart */
    static const char *const broken[] = {"attn_dec_f16_mask_f32", "attn_combine_f32"};
    for (int b = 0; b < 2; b++) {
        tsl_error err;
        CHECK(vk_test_set_kernel(g_vk, broken[b], NULL, 0, "no_such_entry", &err) == TSL_SUCCESS);
        tsl_vulkan_stats s0, s1;
        CHECK(tsl_backend_vulkan_stats(g_vk, &s0) == TSL_SUCCESS);
        const uint64_t v0 = s0.validation_errors;
        char what[64];
        snprintf(what, sizeof what, "%s broken", broken[b]);
        vkt_check(&st, build_attn, &cases[1], 600 + (unsigned long long)b, 2e-4, 1e-3, what);
        CHECK(tsl_backend_vulkan_stats(g_vk, &s1) == TSL_SUCCESS);
        CHECKF(s1.dispatches - s0.dispatches == 3, "%s: %llu dispatches, want 3", what,
               (unsigned long long)(s1.dispatches - s0.dispatches));
        g_expected_validation_errors += s1.validation_errors - v0;
        CHECK(vk_test_set_kernel(g_vk, broken[b], NULL, 0, NULL, &err) == TSL_SUCCESS);
    }
    vkt_print(&st);
}

static void test_block(void) {
    vkt_stat st = {.name = "llama block"};
    static const tsl_type ty[] = {TSL_TYPE_Q4_0, TSL_TYPE_Q8_0, TSL_TYPE_F16};
    for (int t = 0; t < 3; t++)
        for (int nt = 1; nt <= 7; nt += 6) {
            blk_arg a = {.wtype = ty[t], .n_embd = 128, .n_head = 4, .n_head_kv = 2, .n_ff = 320, .n_tok = nt,
                         .n_vocab = 50};
            char what[64];
            snprintf(what, sizeof what, "%s, %d tokens", tsl_type_name(a.wtype), nt);
            vkt_check(&st, build_block, &a, (unsigned long long)(t * 7 + nt), 2e-4, 2e-4, what);
        }
    vkt_print(&st);
}

/* ---- command buffers -------------------------------------------------------------- */

/* The same graphs give the same bytes with 1 and 9 command buffers. */
static void test_command_buffers(void) {
    blk_arg a = {.wtype = TSL_TYPE_Q4_0, .n_embd = 128, .n_head = 4, .n_head_kv = 2, .n_ff = 256, .n_tok = 5,
                 .n_vocab = 40};
    float *r[3] = {0};
    int64_t n[3] = {0};
    const int cbs[3] = {1, 9, 3};
    for (int i = 0; i < 3; i++) {
        tsl_error err;
        CHECK(tsl_backend_vulkan_set_command_buffers(g_vk, cbs[i], &err) == TSL_SUCCESS);
        CHECK(vkt_run(g_vk, build_block, &a, false, 77, &r[i], &n[i], &err) == TSL_SUCCESS);
        tsl_vulkan_stats s;
        CHECK(tsl_backend_vulkan_stats(g_vk, &s) == TSL_SUCCESS);
        CHECKF(s.last_command_buffers == cbs[i], "asked for %d command buffers, used %d", cbs[i], s.last_command_buffers);
        printf("  %d command buffer(s): %.1f us/node encode+submit, %llu barriers so far\n", s.last_command_buffers,
               s.last_encode_us_per_node, (unsigned long long)s.barriers);
    }
    for (int i = 1; i < 3; i++) {
        CHECK(n[i] == n[0] && n[0] > 0);
        if (r[0] && r[i] && n[i] == n[0])
            CHECKF(memcmp(r[0], r[i], (size_t)n[0] * sizeof(float)) == 0, "%d and %d command buffers differ", cbs[0],
                   cbs[i]);
    }
    for (int i = 0; i < 3; i++) free(r[i]);
    tsl_error err;
    tsl_backend_vulkan_set_command_buffers(g_vk, 4, &err);
    CHECK(tsl_backend_vulkan_set_command_buffers(g_vk, 0, &err) == TSL_FAILED);
    CHECK(tsl_backend_vulkan_set_command_buffers(g_vk, 10, &err) == TSL_FAILED);
}

/* Independent nodes share a barrier interval (and a checkpoint); dependent ones do not. */
static void test_barriers(void) {
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    tsl_tensor *x = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 1024);
    tsl_tensor *outs[8];
    for (int i = 0; i < 8; i++) outs[i] = tsl_scale(ctx, x, (float)(i + 1)); /* 8 independent reads of x */
    tsl_tensor *chain = x;
    for (int i = 0; i < 8; i++) chain = tsl_scale(ctx, chain, 0.5f); /* 8 dependent nodes */
    tsl_graph *g = tsl_graph_build(ctx, outs, 8);
    tsl_graph_expand(g, chain);
    tsl_error err;
    tsl_buffer *buf = tsl_buffer_alloc_ctx(g_vk, ctx, &err);
    CHECK(buf != NULL);
    float v[1024];
    for (int i = 0; i < 1024; i++) v[i] = (float)i;
    CHECK(tsl_tensor_set(x, v, 0, sizeof v, &err) == TSL_SUCCESS);
    tsl_backend_vulkan_set_command_buffers(g_vk, 1, &err);
    tsl_vulkan_stats s0, s1;
    tsl_backend_vulkan_stats(g_vk, &s0);
    CHECK(tsl_backend_graph_compute(g_vk, g, &err) == TSL_SUCCESS);
    tsl_backend_vulkan_stats(g_vk, &s1);
    uint64_t bars = s1.barriers - s0.barriers;
    /* the 8 independent scales need none among themselves; the chain needs
     * one before each of its last 7 nodes (the first may or may not need
     * one, depending on where the graph order puts it) */
    CHECKF(bars >= 7 && bars <= 8, "barriers %llu", (unsigned long long)bars);
    CHECK(s1.dispatches - s0.dispatches == 16);
    /* the levels a hang is placed in: one where each barrier ends the last,
     * so the 8 independent scales share one and together the spans cover
     * all 16 nodes in order */
    int cf[32], cl[32];
    int ncp = vk_test_levels(g_vk, 0, cf, cl, 32);
    CHECKF(ncp == (int)bars + 1, "%d levels for %llu barriers", ncp, (unsigned long long)bars);
    if (ncp == (int)bars + 1) {
        int widest = 0, covered = 0;
        for (int i = 0; i < ncp; i++) {
            CHECKF(cl[i] >= cf[i], "level %d: span %d..%d", i, cf[i], cl[i]);
            if (i > 0) CHECKF(cf[i] == cl[i - 1] + 1, "level %d starts at %d, the last span ended at %d", i, cf[i], cl[i - 1]);
            covered += cl[i] - cf[i] + 1;
            if (cl[i] - cf[i] + 1 > widest) widest = cl[i] - cf[i] + 1;
        }
        CHECKF(covered == 16, "the spans cover %d nodes", covered);
        CHECKF(widest >= 8, "the widest span has %d nodes", widest);
        /* every kernel raised the progress word: the last node */
        CHECKF(vk_test_progress(g_vk) == cl[ncp - 1], "progress word %d, last node %d", vk_test_progress(g_vk),
               cl[ncp - 1]);
    }
    CHECK(tsl_tensor_get(chain, v, 0, sizeof v, &err) == TSL_SUCCESS);
    CHECK_NEAR(v[512], 512.0 / 256.0, 1e-6);
    CHECK(tsl_tensor_get(outs[7], v, 0, sizeof v, &err) == TSL_SUCCESS);
    CHECK_NEAR(v[3], 24.0, 1e-6);
    tsl_backend_vulkan_set_command_buffers(g_vk, 4, &err);
    tsl_buffer_free(buf);
    tsl_ctx_free(ctx);
}

/* ---- two backends on one device, from two threads ----------------------------------- */

typedef struct conc_arg {
    tsl_backend *be;
    unsigned long long seed;
    int bad;
    float *first;
    int64_t n;
} conc_arg;

static void *conc_main(void *p) {
    conc_arg *a = p;
    mm_arg m = {.type = TSL_TYPE_Q4_0, .M = 96, .N = 33, .K = 256, .a2 = 1, .b2 = 2, .b3 = 1};
    for (int i = 0; i < 6; i++) {
        float *r = NULL;
        int64_t n = 0;
        tsl_error err;
        if (vkt_run(a->be, build_mul_mat, &m, false, a->seed, &r, &n, &err) != TSL_SUCCESS) {
            a->bad++;
            continue;
        }
        if (!a->first) {
            a->first = r;
            a->n = n;
        } else {
            if (n != a->n || memcmp(r, a->first, (size_t)n * sizeof *r) != 0) a->bad++;
            free(r);
        }
    }
    return NULL;
}

/* A graph computed again in the same buffers records the same commands:
 * its command buffers are submitted again as they are (reused_command_
 * buffers), with the new inputs' results. Anything that changes the
 * commands or frees what they name records afresh: another graph shape, a
 * memory block given back to the driver. */
/* A chain of adds and halvings on 4096 floats in a buffer of g_vk: y =
 * ((((x + x) / 2 + x) / 2) + x) / 2 = x, exactly, for the values the
 * tests use. NULL graph (and a failed check) when it cannot be made. */
static tsl_graph *halving_chain(tsl_context *ctx, tsl_tensor **x, tsl_tensor **y, tsl_buffer **buf) {
    *x = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 4096);
    *y = *x;
    for (int i = 0; i < 6; i++) *y = i % 2 ? tsl_scale(ctx, *y, 0.5f) : tsl_add(ctx, *y, *x);
    tsl_graph *g = tsl_graph_build(ctx, y, 1);
    tsl_error err;
    *buf = tsl_buffer_alloc_ctx(g_vk, ctx, &err);
    CHECK(g && *buf);
    return g && *buf ? g : NULL;
}

static void test_reuse(void) {
    tsl_backend_vulkan_set_reuse(g_vk, true); /* whatever TSL_VULKAN_REUSE says */
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    tsl_tensor *x, *y;
    tsl_buffer *buf;
    tsl_graph *g = halving_chain(ctx, &x, &y, &buf);
    tsl_error err;
    if (!g) goto out;
    float xv[4096], yv[4096];
    tsl_vulkan_stats s0, s1;
    /* y = ((((x + x) / 2 + x) / 2) + x) / 2 = x, exactly, for these values */
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < 4096; i++) xv[i] = (float)(round * 4096 + i) * 0.25f;
        if (round == 2) {
            /* a block of its own, given back: the device's epoch moves */
            tsl_context *c2 = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 16, .no_alloc = true});
            tsl_new_tensor_1d(c2, TSL_TYPE_F32, (int64_t)257 << 18); /* 257 MiB: more than a block (256) */
            tsl_buffer *big = tsl_buffer_alloc_ctx(g_vk, c2, &err);
            CHECKF(big != NULL, "a 257 MiB buffer: %s", err.message);
            tsl_buffer_free(big);
            tsl_ctx_free(c2);
        }
        CHECK(tsl_backend_vulkan_stats(g_vk, &s0) == TSL_SUCCESS);
        CHECK(tsl_tensor_set(x, xv, 0, sizeof xv, &err) == TSL_SUCCESS);
        CHECK(tsl_backend_graph_compute(g_vk, g, &err) == TSL_SUCCESS);
        CHECK(tsl_tensor_get(y, yv, 0, sizeof yv, &err) == TSL_SUCCESS);
        CHECK(tsl_backend_vulkan_stats(g_vk, &s1) == TSL_SUCCESS);
        int bad = 0;
        for (int i = 0; i < 4096; i++) bad += yv[i] != xv[i];
        CHECKF(bad == 0, "round %d: %d values wrong", round, bad);
        const uint64_t reused = s1.reused_command_buffers - s0.reused_command_buffers;
        /* round 0 records, 1 reuses, 2 records again (the epoch), 3 reuses */
        if (round % 2 == 0) CHECKF(reused == 0, "round %d: %llu command buffers reused, want 0", round, (unsigned long long)reused);
        else CHECKF(reused >= 1, "round %d: no command buffer reused", round);
    }
    /* turned off, the same compute records again */
    tsl_backend_vulkan_set_reuse(g_vk, false);
    CHECK(tsl_backend_vulkan_stats(g_vk, &s0) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(g_vk, g, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_vulkan_stats(g_vk, &s1) == TSL_SUCCESS);
    CHECK(s1.reused_command_buffers == s0.reused_command_buffers);
    tsl_backend_vulkan_set_reuse(g_vk, true);
    printf("  reuse: record, reuse, record after a block went, reuse; off: record\n");
out:
    tsl_buffer_free(buf);
    tsl_ctx_free(ctx);
}

/* A graph stamped unchanged (tsl_graph.stamp, as the scheduler stamps its
 * kept plans) is submitted again as recorded, without resolving or
 * encoding, and computes its new inputs; it is resolved and encoded afresh
 * after tensor memory came or went, with a fault rule set, after a failed
 * compute or a recovery, and always without a stamp. */
static void test_replay(void) {
    tsl_backend_vulkan_set_reuse(g_vk, true);
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    tsl_tensor *x, *y;
    tsl_buffer *buf;
    tsl_graph *g = halving_chain(ctx, &x, &y, &buf);
    tsl_error err;
    if (!g) goto out;
    static float xv[4096], yv[4096];
    /* what happens before each round, and whether it replays */
    enum { NOTHING, UNSTAMP, RESTAMP, MEMORY, RULE, FAIL, RECOVER };
    static const struct {
        int before;
        bool replay;
    } plan[] = {{NOTHING, false}, {NOTHING, true}, {NOTHING, true}, {MEMORY, false}, {NOTHING, true},
                {UNSTAMP, false}, {NOTHING, false}, {RESTAMP, false}, {NOTHING, true}, {RULE, false},
                {NOTHING, true},  {FAIL, false},    {NOTHING, true},  {RECOVER, false}, {NOTHING, true}};
    g->stamp = 0x7e57;
    for (size_t round = 0; round < sizeof plan / sizeof plan[0]; round++) {
        const int before = plan[round].before;
        if (before == UNSTAMP) g->stamp = 0;
        if (before == RESTAMP) g->stamp = 0x7e57;
        if (before == MEMORY) {
            tsl_context *c2 = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 16, .no_alloc = true});
            tsl_new_tensor_1d(c2, TSL_TYPE_F32, 64);
            tsl_buffer *small = tsl_buffer_alloc_ctx(g_vk, c2, &err);
            CHECK(small != NULL);
            tsl_buffer_free(small);
            tsl_ctx_free(c2);
        }
        /* a rule that never fires still turns replay off while it is set */
        if (before == RULE) CHECK(tsl_backend_inject(g_vk, "retry@compute=999999999", &err) == TSL_SUCCESS);
        if (before == FAIL) {
            CHECK(tsl_backend_inject(g_vk, "retry@times=1", &err) == TSL_SUCCESS);
            CHECK(tsl_backend_graph_compute(g_vk, g, &err) == TSL_RETRY);
            tsl_backend_inject_clear(g_vk);
        }
        if (before == RECOVER) CHECK(tsl_backend_recover(g_vk, &err) == TSL_SUCCESS);
        for (int i = 0; i < 4096; i++) xv[i] = (float)((int)round * 4096 + i) * 0.25f;
        tsl_vulkan_stats s0, s1;
        CHECK(tsl_backend_vulkan_stats(g_vk, &s0) == TSL_SUCCESS);
        CHECK(tsl_tensor_set(x, xv, 0, sizeof xv, &err) == TSL_SUCCESS);
        CHECKF(tsl_backend_graph_compute(g_vk, g, &err) == TSL_SUCCESS, "round %zu: %s", round, err.message);
        CHECK(tsl_tensor_get(y, yv, 0, sizeof yv, &err) == TSL_SUCCESS);
        CHECK(tsl_backend_vulkan_stats(g_vk, &s1) == TSL_SUCCESS);
        if (before == RULE) tsl_backend_inject_clear(g_vk);
        int bad = 0;
        for (int i = 0; i < 4096; i++) bad += yv[i] != xv[i];
        CHECKF(bad == 0, "round %zu: %d values wrong", round, bad);
        const uint64_t rp = s1.replays - s0.replays;
        CHECKF(rp == (plan[round].replay ? 1u : 0u), "round %zu: %llu replays, want %d", round,
               (unsigned long long)rp, plan[round].replay);
        /* a replay submits what was recorded: every command buffer reused */
        if (rp) CHECK(s1.reused_command_buffers - s0.reused_command_buffers == s1.submits - s0.submits);
    }
    printf("  replay: a stamped graph submitted again as recorded; not after memory, a rule, a failure, "
           "a recovery, or without its stamp\n");
out:
    tsl_buffer_free(buf);
    tsl_ctx_free(ctx);
}

static void test_two_backends(void) {
    tsl_error err;
    tsl_vulkan_device_info info;
    CHECK(tsl_backend_vulkan_info(g_vk, &info, &err) == TSL_SUCCESS);
    tsl_backend *other = tsl_backend_vulkan_new(info.index, &err);
    CHECK(other != NULL);
    if (!other) return;
    CHECK(strcmp(tsl_backend_name(other), tsl_backend_name(g_vk)) == 0);
    conc_arg a[2] = {{.be = g_vk, .seed = 1}, {.be = other, .seed = 2}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, conc_main, &a[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK(a[0].bad == 0 && a[1].bad == 0);
    CHECK(a[0].first && a[1].first && a[0].n == a[1].n);
    if (a[0].first && a[1].first) CHECK(memcmp(a[0].first, a[1].first, (size_t)a[0].n * sizeof(float)) != 0);
    free(a[0].first);
    free(a[1].first);
    tsl_backend_free(other);
}

/* ---- the ops with exact results, byte for byte against the CPU ---------------------- */

/* A case whose inputs are the roots in[] (filled here) and whose output is
 * compared as bytes. */
typedef void (*raw_build)(tsl_context *ctx, tsl_tensor **in, int *n_in, tsl_tensor **out, const void *arg);

/* Fill t with values its type holds: floats at magnitudes 2^-40 .. 2^14
 * (a different one per 32 values, so block scales span f16's subnormals and
 * normals, and F32 -> F16 rounds into subnormals) rounded or quantized to
 * t's type; integers; doubles. Finite values only: test_nonfinite_quant
 * has infinities and NaN. */
static bool raw_fill(tsl_tensor *t, unsigned long long seed, tsl_error *err) {
    const int64_t n = tsl_nelements(t);
    const size_t bytes = tsl_nbytes(t);
    float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof *f);
    unsigned char *raw = calloc(bytes ? bytes : 1, 1);
    unsigned long long s = seed * 0x9E3779B97F4A7C15ull + 99;
    float scale = 1.0f;
    for (int64_t i = 0; i < n; i++) {
        if (i % 32 == 0) scale = ldexpf(1.0f, (int)(test_rand_u64(&s) % 55) - 40);
        f[i] = test_rand_f(&s, -1.0f, 1.0f) * scale;
    }
    switch (t->type) {
    case TSL_TYPE_I8:
    case TSL_TYPE_I16:
    case TSL_TYPE_I32:
    case TSL_TYPE_I64:
    case TSL_TYPE_F64:
        for (size_t i = 0; i < bytes; i++) raw[i] = (unsigned char)test_rand_u64(&s);
        break;
    default: tsl_quantize(t->type, f, raw, n); break;
    }
    tsl_status st = tsl_tensor_set(t, raw, 0, bytes, err);
    free(f);
    free(raw);
    return st == TSL_SUCCESS;
}

static tsl_status raw_run(tsl_backend *be, raw_build fn, const void *arg, unsigned long long seed, unsigned char **out,
                          size_t *n_out, tsl_error *err) {
    *out = NULL;
    *n_out = 0;
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 4u << 20, .no_alloc = true});
    tsl_tensor *in[8], *o = NULL;
    int n_in = 0;
    fn(ctx, in, &n_in, &o, arg);
    if (!o) {
        fprintf(stderr, "case build failed: %s\n", tsl_ctx_error(ctx));
        tsl_ctx_free(ctx);
        return TSL_FAILED;
    }
    tsl_graph *g = tsl_graph_build(ctx, &o, 1);
    tsl_buffer *buf = g ? tsl_buffer_alloc_ctx(be, ctx, err) : NULL;
    tsl_status st = buf ? TSL_SUCCESS : TSL_FAILED;
    for (int i = 0; i < n_in && st == TSL_SUCCESS; i++)
        if (!raw_fill(in[i], seed * 7 + (unsigned long long)i, err)) st = TSL_FAILED;
    if (st == TSL_SUCCESS) st = tsl_backend_graph_compute(be, g, err);
    if (st == TSL_SUCCESS) {
        const tsl_tensor *r = o->view_src ? o->view_src : o; /* a cpy: the whole destination */
        *n_out = tsl_nbytes(r);
        *out = malloc(*n_out ? *n_out : 1);
        st = tsl_tensor_get(r, *out, 0, *n_out, err);
    }
    tsl_buffer_free(buf);
    tsl_ctx_free(ctx);
    return st;
}

static void raw_check(int *cases, raw_build fn, const void *arg, unsigned long long seed, const char *what) {
    unsigned char *r = NULL, *v = NULL;
    size_t nr = 0, nv = 0;
    tsl_error e1, e2;
    tsl_status s1 = raw_run(g_cpu, fn, arg, seed, &r, &nr, &e1);
    tsl_status s2 = raw_run(g_vk, fn, arg, seed, &v, &nv, &e2);
    char line[640] = "";
    if (s1 != TSL_SUCCESS) tsl_error_format(&e1, line, sizeof line);
    CHECKF(s1 == TSL_SUCCESS, "%s: cpu: %s", what, line);
    if (s2 != TSL_SUCCESS) tsl_error_format(&e2, line, sizeof line);
    CHECKF(s2 == TSL_SUCCESS, "%s: vulkan: %s", what, line);
    if (s1 == TSL_SUCCESS && s2 == TSL_SUCCESS) {
        size_t diff = 0, first = 0;
        for (size_t i = 0; i < nr && i < nv; i++)
            if (r[i] != v[i] && diff++ == 0) first = i;
        CHECKF(nr == nv && diff == 0, "%s: %zu of %zu bytes differ from the CPU's (first at byte %zu)", what, diff, nr,
               first);
    }
    (*cases)++;
    free(r);
    free(v);
}

typedef struct conv_arg {
    tsl_type from, to;
    int64_t ne0, ne1;
    int layout; /* 0 dup of a dense tensor, 1 dup of a transposed view (plain types), 2 cpy into a strided view */
} conv_arg;

static void build_conv(tsl_context *ctx, tsl_tensor **in, int *n_in, tsl_tensor **out, const void *arg) {
    const conv_arg *a = arg;
    if (a->layout == 1) {
        tsl_tensor *x = tsl_new_tensor_2d(ctx, a->from, a->ne1, a->ne0);
        in[(*n_in)++] = x;
        *out = tsl_dup(ctx, tsl_transpose(ctx, x), a->to);
    } else if (a->layout == 2) {
        tsl_tensor *x = tsl_new_tensor_2d(ctx, a->from, a->ne0, a->ne1);
        tsl_tensor *dst = tsl_new_tensor_2d(ctx, a->to, a->ne0 + 64, a->ne1);
        in[(*n_in)++] = x;
        in[(*n_in)++] = dst;
        tsl_tensor *view = tsl_view_2d(ctx, dst, a->ne0, a->ne1, dst->nb[1], tsl_row_size(a->to, 32));
        *out = tsl_cpy(ctx, x, view);
    } else {
        tsl_tensor *x = tsl_new_tensor_2d(ctx, a->from, a->ne0, a->ne1);
        in[(*n_in)++] = x;
        *out = tsl_dup(ctx, x, a->to);
    }
}

/* Every conversion among F32, F16, BF16, Q8_0 and Q4_0 at a size where
 * every rounding case comes up (values across f16's range and beyond):
 * the bytes equal the CPU's. */
static void test_conversions_exact(void) {
    static const tsl_type ty[5] = {TSL_TYPE_F32, TSL_TYPE_F16, TSL_TYPE_BF16, TSL_TYPE_Q8_0, TSL_TYPE_Q4_0};
    int cases = 0;
    for (int f = 0; f < 5; f++)
        for (int t = 0; t < 5; t++)
            for (int layout = 0; layout < 3; layout++) {
                const bool q = tsl_type_is_quantized(ty[f]) || tsl_type_is_quantized(ty[t]);
                if (layout == 1 && tsl_type_is_quantized(ty[f])) continue; /* blocks cannot be transposed */
                conv_arg a = {.from = ty[f], .to = ty[t], .ne0 = q ? 32 * rnd(20, 130) : rnd(100, 4000),
                              .ne1 = rnd(3, 40), .layout = layout};
                char what[96];
                snprintf(what, sizeof what, "%s %s -> %s [%lld, %lld]",
                         layout == 0 ? "dup" : layout == 1 ? "dup transposed" : "cpy into a view",
                         tsl_type_name(a.from), tsl_type_name(a.to), (long long)a.ne0, (long long)a.ne1);
                raw_check(&cases, build_conv, &a, (unsigned long long)(f * 100 + t * 10 + layout), what);
            }
    printf("  conversions            %3d cases, byte-exact\n", cases);
}

/* Blocks holding infinities, NaN, overflowing scales, zeros and -0: the
 * Vulkan quantizers give tsl_quantize's bytes (the codec, src/core/quant.c). */
static void test_nonfinite_quant(void) {
    enum { NB = 12 };
    float v[NB * 32];
    unsigned long long s = 4242;
    for (int b = 0; b < NB; b++)
        for (int j = 0; j < 32; j++) v[b * 32 + j] = test_rand_f(&s, -1.0f, 1.0f) * ldexpf(1.0f, 4 * b - 20);
    v[0 * 32 + 5] = INFINITY;
    v[1 * 32 + 0] = -INFINITY;
    v[2 * 32 + 7] = NAN;
    v[3 * 32 + 0] = NAN; /* a NaN first: the Q4_0 scale search starts from it */
    for (int j = 0; j < 32; j++) v[4 * 32 + j] = 0.0f;
    for (int j = 0; j < 32; j++) v[5 * 32 + j] = -0.0f;
    for (int j = 0; j < 32; j++) v[6 * 32 + j] = 70000.0f * (j % 2 ? 1.0f : -1.0f); /* scale past f16 */
    v[7 * 32 + 3] = 1e-42f;                                                        /* a subnormal among normals */
    static const tsl_type qt[2] = {TSL_TYPE_Q8_0, TSL_TYPE_Q4_0};
    for (int t = 0; t < 2; t++) {
        tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
        tsl_tensor *x = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, NB * 32);
        tsl_tensor *q = tsl_dup(ctx, x, qt[t]);
        tsl_graph *g = tsl_graph_build(ctx, &q, 1);
        tsl_error err;
        tsl_buffer *buf = g ? tsl_buffer_alloc_ctx(g_vk, ctx, &err) : NULL;
        unsigned char want[NB * 34], got[NB * 34];
        const size_t n = tsl_row_size(qt[t], NB * 32);
        CHECK(tsl_quantize(qt[t], v, want, NB * 32) == n);
        CHECK(buf && tsl_tensor_set(x, v, 0, sizeof v, &err) == TSL_SUCCESS);
        CHECK(buf && tsl_backend_graph_compute(g_vk, g, &err) == TSL_SUCCESS);
        CHECK(buf && tsl_tensor_get(q, got, 0, n, &err) == TSL_SUCCESS);
        for (int b = 0; buf && b < NB; b++) {
            const size_t bs = tsl_type_block_size(qt[t]);
            CHECKF(memcmp(want + b * bs, got + b * bs, bs) == 0, "%s block %d differs from tsl_quantize",
                   tsl_type_name(qt[t]), b);
        }
        tsl_buffer_free(buf);
        tsl_ctx_free(ctx);
    }
}

typedef struct cat_arg {
    tsl_type type;
    int dim;
    int64_t ne[4];
    int64_t extra; /* b's size along dim */
} cat_arg;

/* concat built by hand, so every type the CPU kernel takes is reached (the
 * op's constructor admits F32, F16 and I32), b read through a permute. */
static void build_concat(tsl_context *ctx, tsl_tensor **in, int *n_in, tsl_tensor **out, const void *arg) {
    const cat_arg *a = arg;
    int64_t bne[4], one[4];
    for (int i = 0; i < 4; i++) {
        bne[i] = i == a->dim ? a->extra : a->ne[i];
        one[i] = i == a->dim ? a->ne[i] + a->extra : a->ne[i];
    }
    tsl_tensor *x = tsl_new_tensor_4d(ctx, a->type, a->ne[0], a->ne[1], a->ne[2], a->ne[3]);
    tsl_tensor *yb = tsl_new_tensor_4d(ctx, a->type, bne[0], bne[2], bne[1], bne[3]);
    in[(*n_in)++] = x;
    in[(*n_in)++] = yb;
    tsl_tensor *y = tsl_permute(ctx, yb, 0, 2, 1, 3);
    tsl_tensor *n = ctx_tensor_new(ctx, "concat", a->type, one, NULL, true);
    if (!n || !y) return;
    n->op = TSL_OP_CONCAT;
    n->src[0] = x;
    n->src[1] = y;
    n->op_params[0] = a->dim;
    *out = n;
}

typedef struct same_arg {
    tsl_type type;
    int64_t ne0, ne1, ne2;
} same_arg;

/* cont of a transposed tensor of a type that is only moved, never read as
 * numbers. */
static void build_same(tsl_context *ctx, tsl_tensor **in, int *n_in, tsl_tensor **out, const void *arg) {
    const same_arg *a = arg;
    tsl_tensor *x = tsl_new_tensor_3d(ctx, a->type, a->ne1, a->ne0, a->ne2);
    in[(*n_in)++] = x;
    *out = tsl_cont(ctx, tsl_permute(ctx, x, 1, 0, 2, 3));
}

static void test_moves_exact(void) {
    static const tsl_type ty[8] = {TSL_TYPE_F32, TSL_TYPE_I32, TSL_TYPE_F16, TSL_TYPE_BF16,
                                   TSL_TYPE_I16, TSL_TYPE_I64, TSL_TYPE_F64, TSL_TYPE_I8};
    int cases = 0;
    for (int t = 0; t < 8; t++)
        for (int dim = 0; dim < 4; dim++) {
            cat_arg a = {.type = ty[t], .dim = dim, .ne = {rnd(1, 40), rnd(1, 9), rnd(1, 4), rnd(1, 3)},
                         .extra = rnd(1, 5)};
            char what[64];
            snprintf(what, sizeof what, "concat %s dim %d", tsl_type_name(a.type), dim);
            raw_check(&cases, build_concat, &a, (unsigned long long)(t * 4 + dim), what);
        }
    for (int t = 1; t < 8; t++) {
        same_arg a = {.type = ty[t], .ne0 = rnd(1, 300), .ne1 = rnd(1, 50), .ne2 = rnd(1, 3)};
        char what[64];
        snprintf(what, sizeof what, "cont of a permute, %s", tsl_type_name(a.type));
        raw_check(&cases, build_same, &a, (unsigned long long)(50 + t), what);
    }
    printf("  concat, moves          %3d cases, byte-exact\n", cases);
}

typedef struct am_arg {
    int64_t ne0, ne1;
    bool ties;
    int special; /* 1: sqrt(x), NaN where x < 0; 2: sqrt(x) times -3e38 twice, rows of NaN and -inf only */
} am_arg;

static void build_argmax(tsl_context *ctx, tsl_tensor **in, int *n_in, tsl_tensor **out, const void *arg) {
    const am_arg *a = arg;
    tsl_tensor *x = tsl_new_tensor_2d(ctx, a->ties ? TSL_TYPE_F16 : TSL_TYPE_F32, a->ne0, a->ne1);
    in[(*n_in)++] = x;
    /* F16 values through a copy: few distinct values, so ties at the maximum */
    tsl_tensor *y = a->ties ? tsl_dup(ctx, x, TSL_TYPE_F32) : x;
    /* NaN never wins, nor -inf: a row with nothing above -inf gives 0 */
    if (a->special) y = tsl_sqrt(ctx, y);
    if (a->special == 2) y = tsl_scale(ctx, tsl_scale(ctx, y, -3e38f), 3e38f); /* overflows to -inf */
    *out = tsl_argmax(ctx, y);
}

/* ---- reductions over many elements, and out_prod at GEMM sizes ------------------------ */

typedef struct red_arg {
    tsl_op op;
    int64_t ne[4];
    bool permuted;
} red_arg;

static void build_red(tsl_context *ctx, vkt_case *c, const void *arg, bool ref) {
    const red_arg *a = arg;
    tsl_tensor *x;
    if (a->permuted) {
        tsl_tensor *t = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 4, a->ne[0], a->ne[2], a->ne[1], a->ne[3]);
        x = tsl_permute(ctx, t, 0, 2, 1, 3);
    } else {
        x = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 4, a->ne[0], a->ne[1], a->ne[2], a->ne[3]);
    }
    if (a->op == TSL_OP_SUM) {
        c->out = tsl_sum(ctx, x);
    } else {
        tsl_tensor *l = vkt_input(ctx, c, IN_POSITIVE, TSL_TYPE_F32, 1, a->ne[0], a->ne[1], a->ne[2], a->ne[3]);
        c->out = tsl_cross_entropy_loss(ctx, x, l);
    }
}

typedef struct op_arg {
    tsl_type type;
    int64_t M, N, K, a2, b2;
    bool b_transposed;
} op_arg;

static void build_out_prod(tsl_context *ctx, vkt_case *c, const void *arg, bool ref) {
    const op_arg *a = arg;
    tsl_tensor *w = vkt_weight(ctx, c, a->type, ref, a->M, a->K, a->a2, 1);
    tsl_tensor *x;
    if (a->b_transposed) {
        tsl_tensor *t = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->K, a->N, a->b2, 1);
        x = tsl_transpose(ctx, t);
    } else {
        x = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, a->N, a->K, a->b2, 1);
    }
    c->out = tsl_out_prod(ctx, w, x);
}

static void test_training_ops(void) {
    int cases = 0;
    /* argmax over vocabulary-sized rows, exact; from it 8 rows that start on
     * 16 bytes (read in 16-byte loads): whole quads, and one row with three
     * elements past its last quad */
    for (int it = 0; it < 12; it++) {
        am_arg a = {.ne0 = it < 2 || (it >= 6 && it < 8) ? 50000 + rnd(0, 999) : it < 8 ? rnd(1, 300)
                           : it < 11                    ? 4 * rnd(12500, 12800)
                                                        : 4 * rnd(12500, 12800) + 3,
                    .ne1 = it == 11 ? 1 : it >= 4 ? rnd(4, 12) : rnd(1, 6),
                    .ties = it % 2 == 1,
                    .special = it < 4 ? 0 : 1 + it % 2};
        char what[64];
        snprintf(what, sizeof what, "argmax [%lld, %lld]%s%s", (long long)a.ne0, (long long)a.ne1,
                 a.ties ? " ties" : "", a.special == 1 ? " NaN" : a.special == 2 ? " NaN/-inf" : "");
        raw_check(&cases, build_argmax, &a, (unsigned long long)(70 + it), what);
    }
    printf("  ARGMAX                 %3d cases, exact\n", cases);
    vkt_stat ss = {.name = "SUM"}, sc = {.name = "CROSS_ENTROPY_LOSS"};
    for (int it = 0; it < 4; it++) {
        red_arg a = {.op = TSL_OP_SUM, .ne = {rnd(1000, 5000), rnd(50, 300), 1 + it % 2, 1}, .permuted = it % 2 == 1};
        const double n = (double)(a.ne[0] * a.ne[1] * a.ne[2]);
        char what[64];
        snprintf(what, sizeof what, "%.0f values%s", n, a.permuted ? " permuted" : "");
        /* both sums are good to a few ulp of sum |x| <= 4 n */
        vkt_check(&ss, build_red, &a, (unsigned long long)(80 + it), 4.0 * n * 1e-6, 0, what);
    }
    vkt_print(&ss);
    for (int it = 0; it < 4; it++) {
        /* rows of 3000+ share a workgroup (cross_entropy.comp); shorter ones one invocation each */
        red_arg a = {.op = TSL_OP_CROSS_ENTROPY_LOSS, .ne = {it < 2 ? rnd(3000, 9000) : rnd(2, 200), rnd(1, 40),
                                                             1 + it % 2, 1},
                     .permuted = it % 2 == 1};
        char what[64];
        snprintf(what, sizeof what, "[%lld, %lld, %lld]%s", (long long)a.ne[0], (long long)a.ne[1], (long long)a.ne[2],
                 a.permuted ? " permuted" : "");
        vkt_check(&sc, build_red, &a, (unsigned long long)(90 + it), 1e-5, 1e-5, what);
    }
    vkt_print(&sc);
    static const tsl_type ty[5] = {TSL_TYPE_F32, TSL_TYPE_F16, TSL_TYPE_BF16, TSL_TYPE_Q8_0, TSL_TYPE_Q4_0};
    for (int t = 0; t < 5; t++) {
        char label[32];
        snprintf(label, sizeof label, "OUT_PROD %s", tsl_type_name(ty[t]));
        vkt_stat so = {.name = label};
        for (int it = 0; it < 2; it++) {
            op_arg a = {.type = ty[t], .M = tsl_type_is_quantized(ty[t]) ? 32 * rnd(2, 8) : rnd(65, 260),
                        .N = rnd(65, 200), .K = rnd(17, 300), .a2 = 1 + it, .b2 = 2 + 2 * it, .b_transposed = it == 1};
            char what[64];
            snprintf(what, sizeof what, "M %lld N %lld K %lld", (long long)a.M, (long long)a.N, (long long)a.K);
            vkt_check(&so, build_out_prod, &a, (unsigned long long)(t * 10 + it), 2e-5 * sqrt((double)a.K), 1e-5, what);
        }
        vkt_print(&so);
    }
}

/* ---- what has no kernel ---------------------------------------------------------------- */

static void test_unsupported(void) {
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    tsl_tensor *a = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 64, 4);
    tsl_tensor *b = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 64, 4);
    tsl_tensor *cat = tsl_concat(ctx, a, b, 1);
    tsl_tensor *am = tsl_argmax(ctx, a);
    tsl_tensor *ok = tsl_add(ctx, a, b);
    CHECK(tsl_backend_supports_op(g_vk, cat));
    CHECK(tsl_backend_supports_op(g_vk, am));
    CHECK(tsl_backend_supports_op(g_vk, ok));
    CHECK(tsl_backend_supports_op(g_vk, tsl_transpose(ctx, a)));
    /* an F16 operand slipped past add's type rule (an F32-only op on both
     * backends): no kernel for it */
    tsl_tensor *h = tsl_new_tensor_2d(ctx, TSL_TYPE_F16, 64, 4);
    tsl_tensor *bad = tsl_add(ctx, a, b);
    bad->src[1] = h;
    CHECK(!tsl_backend_supports_op(g_vk, bad));
    CHECK(!tsl_backend_supports_op(g_cpu, bad));
    /* a graph with such a node fails before anything runs, naming it */
    tsl_graph *g = tsl_graph_build(ctx, &bad, 1);
    tsl_error err;
    tsl_buffer *buf = tsl_buffer_alloc_ctx(g_vk, ctx, &err);
    CHECK(buf != NULL);
    tsl_vulkan_stats s0, s1;
    tsl_backend_vulkan_stats(g_vk, &s0);
    CHECK(tsl_backend_graph_compute(g_vk, g, &err) == TSL_FAILED);
    tsl_backend_vulkan_stats(g_vk, &s1);
    CHECK(s1.submits == s0.submits);
    CHECK_STR_CONTAINS(err.message, "no Vulkan kernel for ADD");
    CHECK(strcmp(err.op, "ADD") == 0);
    tsl_buffer_free(buf);
    tsl_ctx_free(ctx);
}

/* ---- the other paths: descriptor pools and staging copies ----------------------------- */

/* g_vk made again on device index with the environment pairs env (name,
 * value, ..., NULL) set while it is made (the device object is made again
 * only when no backend holds it); false, checked, when it cannot be. */
static bool vk_remake(int index, const char *const *env) {
    tsl_error err;
    tsl_backend_free(g_vk);
    for (int i = 0; env[i]; i += 2) setenv(env[i], env[i + 1], 1);
    g_vk = tsl_backend_vulkan_new(index, &err);
    for (int i = 0; env[i]; i += 2) unsetenv(env[i]);
    CHECK(g_vk != NULL);
    return g_vk != NULL;
}

/* A long chain of small nodes. */
static void build_chain(tsl_context *ctx, vkt_case *c, const void *arg, bool ref) {
    int len = *(const int *)arg;
    tsl_tensor *x = vkt_input(ctx, c, IN_VAL, TSL_TYPE_F32, 1, 33, 3, 1, 1);
    tsl_tensor *y = x;
    for (int i = 0; i < len; i++) y = i % 2 ? tsl_scale(ctx, y, 0.999f) : tsl_add(ctx, y, x);
    c->out = y;
}

static void test_pools_and_staging(void) {
    tsl_error err;
    tsl_vulkan_device_info info;
    CHECK(tsl_backend_vulkan_info(g_vk, &info, &err) == TSL_SUCCESS);
    if (!vk_remake(info.index,
                   (const char *[]){"TSL_VULKAN_NO_PUSH_DESCRIPTORS", "1", "TSL_VULKAN_STAGING", "1", NULL}))
        return;
    tsl_vulkan_stats s0, s1;
    tsl_backend_vulkan_stats(g_vk, &s0);
    vkt_stat st = {.name = "pools+staging"};
    for (int t = 0; t < 2; t++) {
        blk_arg a = {.wtype = t ? TSL_TYPE_Q8_0 : TSL_TYPE_Q4_0, .n_embd = 64, .n_head = 2, .n_head_kv = 1,
                     .n_ff = 160, .n_tok = 4 + t, .n_vocab = 30};
        vkt_check(&st, build_block, &a, 900 + (unsigned long long)t, 2e-4, 2e-4, "llama block");
    }
    /* more kernels than one descriptor pool holds, in one command buffer */
    tsl_backend_vulkan_set_command_buffers(g_vk, 1, &err);
    int len = 600;
    vkt_check(&st, build_chain, &len, 950, 1e-5, 1e-5, "600 nodes in one command buffer");
    tsl_backend_vulkan_stats(g_vk, &s1);
    CHECKF(s1.transfers > s0.transfers, "staging copies were expected (%llu)", (unsigned long long)s1.transfers);
    vkt_print(&st);
    tsl_backend_vulkan_set_command_buffers(g_vk, 4, &err);

    /* Small uploads return before their copy is done (a decode step's
     * inputs): what runs or reads next must still see them. Each round
     * writes new values with the caller's array reused at once, computes
     * y = 2 x from them, reads y and x back, and frees a buffer written
     * just before, all without waiting in between. */
    tsl_ctx_params cp = {1u << 16, true};
    tsl_context *ctx = tsl_ctx_new(cp);
    tsl_tensor *x = ctx ? tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 4096) : NULL;
    tsl_tensor *y = x ? tsl_scale(ctx, x, 2.0f) : NULL;
    if (y) y->flags |= TSL_FLAG_READBACK; /* copied back by the compute itself */
    tsl_graph *g = y ? tsl_graph_build(ctx, &y, 1) : NULL;
    tsl_buffer *buf = g ? tsl_buffer_alloc(g_vk, 2 * 4096 * sizeof(float) + 256, &err) : NULL;
    CHECK(buf != NULL && tsl_buffer_place(buf, x, 0, &err) == TSL_SUCCESS &&
          tsl_buffer_place(buf, y, 4096 * sizeof(float) + 256, &err) == TSL_SUCCESS);
    static float in[4096], out[4096], back[4096];
    int bad = 0;
    tsl_vulkan_stats r0, r1;
    tsl_backend_vulkan_stats(g_vk, &r0);
    for (int round = 0; buf && round < 50; round++) {
        for (int i = 0; i < 4096; i++) in[i] = (float)(round * 4096 + i);
        CHECK(tsl_tensor_set(x, in, 0, sizeof in, &err) == TSL_SUCCESS);
        memset(in, 0, sizeof in); /* the caller's memory is free again */
        CHECK(tsl_backend_graph_compute(g_vk, g, &err) == TSL_SUCCESS);
        CHECK(tsl_tensor_get(y, out, 0, sizeof out, &err) == TSL_SUCCESS);
        CHECK(tsl_tensor_get(x, back, 0, sizeof back, &err) == TSL_SUCCESS);
        for (int i = 0; i < 4096; i++)
            bad += out[i] != 2.0f * (float)(round * 4096 + i) || back[i] != (float)(round * 4096 + i);
        tsl_tensor *z = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 256);
        tsl_buffer *tmp = z ? tsl_buffer_alloc(g_vk, 1024, &err) : NULL;
        CHECK(tmp != NULL && tsl_buffer_place(tmp, z, 0, &err) == TSL_SUCCESS &&
              tsl_tensor_set(z, in, 0, 1024, &err) == TSL_SUCCESS);
        tsl_buffer_free(tmp); /* freed with its copy maybe still in flight */
    }
    CHECKF(bad == 0, "small uploads: %d values wrong", bad);
    /* every y was read from the compute's own copy (the command buffer
     * submitted again as recorded copies it again: the values above) */
    tsl_backend_vulkan_stats(g_vk, &r1);
    CHECKF(r1.readback_reads - r0.readback_reads == 50, "%llu of 50 reads of y served by the compute's copy",
           (unsigned long long)(r1.readback_reads - r0.readback_reads));
    /* a part of it; then y written by the host: the copy is stale and the
     * next read goes to the device */
    if (buf) {
        CHECK(tsl_tensor_get(y, out, 100 * sizeof(float), 8 * sizeof(float), &err) == TSL_SUCCESS);
        CHECK(out[0] == 2.0f * (float)(49 * 4096 + 100) && out[7] == 2.0f * (float)(49 * 4096 + 107));
        for (int i = 0; i < 4096; i++) in[i] = -1.0f - (float)i;
        CHECK(tsl_tensor_set(y, in, 0, sizeof in, &err) == TSL_SUCCESS);
        CHECK(tsl_tensor_get(y, out, 0, sizeof out, &err) == TSL_SUCCESS);
        int stale = 0;
        for (int i = 0; i < 4096; i++) stale += out[i] != -1.0f - (float)i;
        CHECKF(stale == 0, "a read after the host wrote y returned %d values of the compute's copy", stale);
        tsl_vulkan_stats r2;
        tsl_backend_vulkan_stats(g_vk, &r2);
        CHECK(r2.readback_reads == r1.readback_reads + 1);
        /* a compute that fails (a transient rejection at submit) leaves no
         * copy to read: the next read goes to the device */
        CHECK(tsl_backend_inject(g_vk, "retry@times=1", &err) == TSL_SUCCESS);
        CHECK(tsl_backend_graph_compute(g_vk, g, &err) == TSL_RETRY);
        tsl_backend_inject_clear(g_vk);
        CHECK(tsl_tensor_get(y, out, 0, sizeof out, &err) == TSL_SUCCESS);
        tsl_vulkan_stats r3;
        tsl_backend_vulkan_stats(g_vk, &r3);
        CHECK(r3.readback_reads == r2.readback_reads);
        /* and the next one that succeeds has its copy read again */
        CHECK(tsl_backend_graph_compute(g_vk, g, &err) == TSL_SUCCESS);
        CHECK(tsl_tensor_get(y, out, 0, sizeof out, &err) == TSL_SUCCESS);
        tsl_backend_vulkan_stats(g_vk, &r3);
        CHECK(r3.readback_reads == r2.readback_reads + 1);
    }
    tsl_buffer_free(buf);
    tsl_ctx_free(ctx);
}

/* Kernels bound through ordinary descriptor sets on a device with push
 * descriptors (vk_kernel.sets; TSL_VULKAN_SET_KERNELS names them here):
 * the two kinds of binding alternate within one command buffer, over more
 * sets than one pool holds, and the results are the CPU's. */
static void test_mixed_binding(void) {
    tsl_error err;
    tsl_vulkan_device_info info;
    CHECK(tsl_backend_vulkan_info(g_vk, &info, &err) == TSL_SUCCESS);
    CHECKF(info.push_descriptors, "the test needs a device with push descriptors (lavapipe has them)");
    if (!vk_remake(info.index,
                   (const char *[]){"TSL_VULKAN_SET_KERNELS", "add_f32,rms_norm_mul_f32,soft_max_f32_mask_f32", NULL}))
        return;
    tsl_vulkan_stats s0, s1;
    tsl_backend_vulkan_stats(g_vk, &s0);
    vkt_stat st = {.name = "mixed binding"};
    blk_arg a = {.wtype = TSL_TYPE_Q4_0, .n_embd = 64, .n_head = 2, .n_head_kv = 1, .n_ff = 160, .n_tok = 5,
                 .n_vocab = 30};
    vkt_check(&st, build_block, &a, 1900, 2e-4, 2e-4, "llama block");
    /* 300 ADDs bound through sets between 300 SCALEs pushed, one command buffer */
    tsl_backend_vulkan_set_command_buffers(g_vk, 1, &err);
    int len = 600;
    vkt_check(&st, build_chain, &len, 1950, 1e-5, 1e-5, "600 nodes in one command buffer");
    tsl_backend_vulkan_stats(g_vk, &s1);
    const uint64_t sets = s1.set_dispatches - s0.set_dispatches, all = s1.dispatches - s0.dispatches;
    CHECKF(sets >= 300 && sets < all, "dispatches bound through sets: %llu of %llu (expected 300 or more, not all)",
           (unsigned long long)sets, (unsigned long long)all);
    /* a device lost and recovered: the sets' layouts are made again with
     * the new device, and the kernels bound through them still compute */
    CHECK(tsl_backend_inject(g_vk, "lost@times=1", &err) == TSL_SUCCESS);
    float *v = NULL;
    int64_t nv = 0;
    CHECK(vkt_run(g_vk, build_chain, &len, false, 1951, &v, &nv, &err) == TSL_DEVICE_LOST);
    free(v);
    tsl_backend_inject_clear(g_vk);
    CHECK(tsl_backend_recover(g_vk, &err) == TSL_SUCCESS);
    tsl_vulkan_stats s2;
    tsl_backend_vulkan_stats(g_vk, &s2);
    vkt_check(&st, build_chain, &len, 1952, 1e-5, 1e-5, "600 nodes after recovery");
    tsl_backend_vulkan_stats(g_vk, &s1);
    CHECKF(s1.set_dispatches - s2.set_dispatches >= 300, "after recovery %llu dispatches bound through sets",
           (unsigned long long)(s1.set_dispatches - s2.set_dispatches));
    vkt_print(&st);
    tsl_backend_vulkan_set_command_buffers(g_vk, 4, &err);
    /* the default backend again: nothing of this test's kernels bound so */
    vk_remake(info.index, (const char *[]){NULL});
}

/* A stamped graph computed again (the scheduler's kept plan) goes into one
 * command buffer: recorded once more if the first compute split it, then
 * replayed from that one; results right throughout. With command buffers
 * asked for (tsl_backend_vulkan_set_command_buffers) it keeps them. */
static void test_replay_one_buffer(void) {
    tsl_error err;
    tsl_vulkan_device_info info;
    CHECK(tsl_backend_vulkan_info(g_vk, &info, &err) == TSL_SUCCESS);
    if (!vk_remake(info.index, (const char *[]){NULL})) return; /* the default command buffers */
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 4u << 20, .no_alloc = true});
    tsl_tensor *x = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 4096), *y = x;
    for (int i = 0; i < 300; i++) y = i % 2 ? tsl_scale(ctx, y, 0.5f) : tsl_add(ctx, y, x); /* = x again */
    tsl_graph *g = tsl_graph_build(ctx, &y, 1);
    tsl_buffer *buf = g ? tsl_buffer_alloc_ctx(g_vk, ctx, &err) : NULL;
    CHECK(g && buf);
    static float xv[4096], yv[4096];
    /* {4 command buffers asked for before this round (and a new stamp),
     * command buffers used (0: more than one), replayed} */
    static const int want[][3] = {{0, 0, 0}, {0, 1, 0}, {0, 1, 1}, {0, 1, 1}, {1, 4, 0}, {0, 4, 1}};
    g->stamp = 0x0b1;
    for (size_t r = 0; g && buf && r < sizeof want / sizeof want[0]; r++) {
        if (want[r][0]) {
            CHECK(tsl_backend_vulkan_set_command_buffers(g_vk, 4, &err) == TSL_SUCCESS);
            g->stamp++; /* a new plan */
        }
        for (int i = 0; i < 4096; i++) xv[i] = (float)((int)r * 4096 + i) * 0.25f;
        tsl_vulkan_stats s0, s1;
        tsl_backend_vulkan_stats(g_vk, &s0);
        CHECK(tsl_tensor_set(x, xv, 0, sizeof xv, &err) == TSL_SUCCESS);
        CHECKF(tsl_backend_graph_compute(g_vk, g, &err) == TSL_SUCCESS, "round %zu: %s", r, err.message);
        CHECK(tsl_tensor_get(y, yv, 0, sizeof yv, &err) == TSL_SUCCESS);
        tsl_backend_vulkan_stats(g_vk, &s1);
        int bad = 0;
        for (int i = 0; i < 4096; i++) bad += yv[i] != xv[i];
        CHECKF(bad == 0, "round %zu: %d values wrong", r, bad);
        if (want[r][1]) CHECKF(s1.last_command_buffers == want[r][1], "round %zu: %d command buffers, want %d", r,
                               s1.last_command_buffers, want[r][1]);
        else CHECKF(s1.last_command_buffers > 1, "round %zu: %d command buffer(s), want several", r,
                    s1.last_command_buffers);
        CHECKF(s1.replays - s0.replays == (uint64_t)want[r][2], "round %zu: %llu replays, want %d", r,
               (unsigned long long)(s1.replays - s0.replays), want[r][2]);
    }
    printf("  replay: a repeated 300-node graph re-recorded into one command buffer, then replayed\n");
    tsl_buffer_free(buf);
    tsl_ctx_free(ctx);
    vk_remake(info.index, (const char *[]){NULL});
}

/* With TSL_VULKAN_VALIDATE=1 the Khronos layer watched everything above. */
static void test_validation(void) {
    tsl_vulkan_stats s;
    CHECK(g_vk && tsl_backend_vulkan_stats(g_vk, &s) == TSL_SUCCESS);
    CHECKF(s.validation_errors == g_expected_validation_errors,
           "the validation layer reported %llu errors, %llu of them expected (the broken swiglu_q)",
           (unsigned long long)s.validation_errors, (unsigned long long)g_expected_validation_errors);
}

int main(void) {
    int n = vkh_devices();
    if (n <= 0) {
        tsl_error err;
        tsl_backend *be = tsl_backend_vulkan_new(-1, &err);
        char line[512];
        tsl_error_format(&err, line, sizeof line);
        tsl_backend_free(be);
        if (getenv("TSL_REQUIRE_VULKAN")) {
            fprintf(stderr, "FAIL: no Vulkan device and TSL_REQUIRE_VULKAN is set: %s\n", line);
            return 1;
        }
        printf("skipped: no Vulkan device (%s)\n", line);
        return 0;
    }
    tsl_error err;
    /* every flagged Q4_0 weight split, long rows too (test_q4_split) */
    setenv("TSL_VULKAN_Q4_SPLIT_MAX_K", "1000000", 1);
    g_cpu = tsl_backend_cpu_new(2, &err);
    g_vk = tsl_backend_vulkan_new(-1, &err);
    if (!g_vk || !g_cpu) {
        char line[512];
        tsl_error_format(&err, line, sizeof line);
        fprintf(stderr, "FAIL: could not make the backends: %s\n", line);
        return 1;
    }
    tsl_vulkan_device_info info;
    tsl_backend_vulkan_info(g_vk, &info, &err);
    g_qdot = info.integer_dot;
    printf("device: %s %s (%s), subgroup %u, 16-bit storage %d, float64 %d, push descriptors %d\n",
           tsl_backend_name(g_vk), info.name, info.type, info.subgroup_size, info.storage_16bit, info.float64,
           info.push_descriptors);
    RUN(test_elementwise);
    RUN(test_rows);
    RUN(test_soft_max);
    RUN(test_rope);
    RUN(test_copies);
    RUN(test_get_rows);
    RUN(test_mul_mat);
    RUN(test_q4_split);
    RUN(test_conversions_exact);
    RUN(test_nonfinite_quant);
    RUN(test_moves_exact);
    RUN(test_training_ops);
    RUN(test_block);
    RUN(test_fusion);
    RUN(test_conv_products);
    RUN(test_rope_rows);
    RUN(test_norm_rope);
    RUN(test_qkv_rope);
    RUN(test_norm_products);
    RUN(test_attention);
    RUN(test_command_buffers);
    RUN(test_barriers);
    RUN(test_reuse);
    RUN(test_replay);
    RUN(test_two_backends);
    RUN(test_unsupported);
    RUN(test_pools_and_staging);
    RUN(test_mixed_binding);
    RUN(test_replay_one_buffer);
    RUN(test_validation);
    tsl_backend_free(g_vk);
    tsl_backend_free(g_cpu);
    return test_summary();
}

#endif /* TSL_HAVE_VULKAN */
