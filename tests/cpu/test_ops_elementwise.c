/*
 * test_ops_elementwise.c - the element-wise ops on the CPU backend against
 * double-precision references: add, sub, mul, div (with broadcasting), scale,
 * sqr, sqrt, silu, gelu, swiglu.
 *
 * Every case draws a random 1..4-D shape (odd sizes, 1s) and a random layout
 * for each operand (contiguous, a strided view of a padded tensor, a permute
 * of the batch dims, a transpose that moves dim 0), and runs at 1, 2 and 3
 * threads (ref.h). Broadcasting walks every subset of dims where b has 1s,
 * and b->ne[i] a proper divisor of a->ne[i] (repeats 2..3) in other dims, so
 * a kernel that broadcasts only 1s, or only in rows, disagrees.
 *
 * Tolerances, |got - ref| <= atol + rtol * |ref| (F32 results):
 *   add sub mul div   atol 0, rtol 1e-6: IEEE gives one rounding (2^-24 |ref|);
 *                     1e-6 leaves room for a reciprocal-multiply divide
 *                     (~2 ulp) and nothing more.
 *   scale sqr sqrt    atol 0, rtol 1e-6, for the same reason.
 *   silu swiglu       atol 1e-6, rtol 1e-5: exp in float (a SIMD exp is
 *                     ~2 ulp) and a division.
 *   gelu (tanh form)  atol 1e-6, rtol 1e-4: 1 + tanh(u) cancels for x < -2,
 *                     so only an absolute error ~|x| * 2^-24 is meaningful.
 * In-place runs of these ops are in test_ops_inplace.c.
 */
#include "ref.h"

#define N_BINARY_CASES 64
#define N_UNARY_CASES 24

/* Move values of an F32 tensor's root out of (-0.25, 0.25), keeping the
 * sign, so a divisor is never near zero. */
static void away_from_zero(tsl_tensor *t) {
    tsl_tensor *r = ref_root(t);
    float *f = (float *)r->data;
    for (int64_t i = 0; i < tsl_nelements(r); i++)
        if (fabsf(f[i]) < 0.25f) f[i] = f[i] < 0 ? f[i] - 0.25f : f[i] + 0.25f;
}

/* Shapes of a and b for broadcast case c: dims in the bit mask c % 16 get
 * b->ne = 1; the others get b->ne = a->ne, or (every third group of 16
 * cases) a proper divisor with a->ne = b->ne * (2 or 3). */
static void broadcast_shapes(unsigned long long *rng, int c, int64_t ane[4], int64_t bne[4]) {
    static const int64_t amax[4] = {70, 40, 6, 3};
    static const int64_t bmax_div[4] = {23, 13, 3, 2};
    const bool divisor_mode = (c / 16) % 3 == 1;
    for (int i = 0; i < 4; i++) {
        if ((c >> i) & 1) {
            bne[i] = 1;
            ane[i] = ref_rand_int(rng, 1, amax[i]);
        } else if (divisor_mode) {
            bne[i] = ref_rand_int(rng, i == 3 ? 2 : 1, bmax_div[i]);
            ane[i] = bne[i] * ref_rand_int(rng, 2, 3);
        } else {
            ane[i] = bne[i] = ref_rand_int(rng, 1, amax[i]);
        }
    }
}

static void binary_cases(int op, const char *name) {
    ref_stats st = {.op = name, .tol = "atol 0, rtol 1e-6"};
    unsigned long long rng = ref_seed(0x9e3779b97f4a7c15ULL ^ (unsigned long long)(op + 1));
    for (int c = 0; c < N_BINARY_CASES; c++) {
        tsl_context *ctx = ref_ctx(16);
        if (!ctx) return;
        int64_t ane[4], bne[4];
        broadcast_shapes(&rng, c, ane, bne);
        ref_layout la = (ref_layout)ref_rand_int(&rng, 0, REF_NLAYOUT - 1);
        ref_layout lb = (ref_layout)ref_rand_int(&rng, 0, REF_NLAYOUT - 1);
        tsl_tensor *a = ref_tensor(ctx, TSL_TYPE_F32, ane, la, &rng, -2.0f, 2.0f);
        tsl_tensor *b = ref_tensor(ctx, TSL_TYPE_F32, bne, lb, &rng, -2.0f, 2.0f);
        if (!a || !b) {
            CHECKF(0, "%s: cannot make operands: %s", name, tsl_ctx_error(ctx));
            tsl_ctx_free(ctx);
            continue;
        }
        if (op == REF_DIV) away_from_zero(b);
        ref_describe("%s case %d: a [%lld,%lld,%lld,%lld] %s, b [%lld,%lld,%lld,%lld] %s", name, c,
                     (long long)ane[0], (long long)ane[1], (long long)ane[2], (long long)ane[3], ref_layout_name(la),
                     (long long)bne[0], (long long)bne[1], (long long)bne[2], (long long)bne[3], ref_layout_name(lb));
        tsl_tensor *out = op == REF_ADD   ? tsl_add(ctx, a, b)
                          : op == REF_SUB ? tsl_sub(ctx, a, b)
                          : op == REF_MUL ? tsl_mul(ctx, a, b)
                                          : tsl_div(ctx, a, b);
        double *av = ref_load(a), *bv = ref_load(b);
        double *ref = (double *)malloc((size_t)ref_nel(ane) * sizeof(double));
        ref_binary(op, av, ane, bv, bne, ref);
        ref_run(&st, ref_graph(ctx, out), out, ref, NULL, 0.0, 1e-6, NULL);
        free(av);
        free(bv);
        free(ref);
        tsl_ctx_free(ctx);
    }
    ref_stats_print(&st);
}

static void test_add(void) { binary_cases(REF_ADD, "add"); }
static void test_sub(void) { binary_cases(REF_SUB, "sub"); }
static void test_mul(void) { binary_cases(REF_MUL, "mul"); }
static void test_div(void) { binary_cases(REF_DIV, "div"); }

/* The same broadcast rule must hold for a b of the same shape whose rows
 * are all one value, and for b a single element: catches a kernel that
 * special-cases ne[0] == 1 wrongly. */
static void test_binary_scalar_b(void) {
    ref_stats st = {.op = "add/mul scalar b", .tol = "atol 0, rtol 1e-6"};
    unsigned long long rng = ref_seed(77);
    for (int c = 0; c < 8; c++) {
        tsl_context *ctx = ref_ctx(8);
        if (!ctx) return;
        int64_t ane[4], bne[4] = {1, 1, 1, 1};
        ref_rand_shape(&rng, 4, 1, 20000, ane);
        tsl_tensor *a = ref_tensor(ctx, TSL_TYPE_F32, ane, (ref_layout)(c % REF_NLAYOUT), &rng, -3, 3);
        tsl_tensor *b = ref_tensor(ctx, TSL_TYPE_F32, bne, REF_CONTIG, &rng, -3, 3);
        const int op = c & 1 ? REF_MUL : REF_ADD;
        ref_describe("%s scalar b case %d: a [%lld,%lld,%lld,%lld] %s", op == REF_MUL ? "mul" : "add", c,
                     (long long)ane[0], (long long)ane[1], (long long)ane[2], (long long)ane[3],
                     ref_layout_name((ref_layout)(c % REF_NLAYOUT)));
        tsl_tensor *out = op == REF_MUL ? tsl_mul(ctx, a, b) : tsl_add(ctx, a, b);
        double *av = a ? ref_load(a) : NULL, *bv = b ? ref_load(b) : NULL;
        double *ref = (double *)malloc((size_t)ref_nel(ane) * sizeof(double));
        if (av && bv) ref_binary(op, av, ane, bv, bne, ref);
        ref_run(&st, av && bv ? ref_graph(ctx, out) : NULL, out, ref, NULL, 0.0, 1e-6, NULL);
        free(av);
        free(bv);
        free(ref);
        tsl_ctx_free(ctx);
    }
    ref_stats_print(&st);
}

/* ---- unary ops ----------------------------------------------------------- */

static void unary_cases(tsl_op op, const char *name, float lo, float hi, double atol, double rtol, const char *tol) {
    ref_stats st = {.op = name, .tol = tol};
    unsigned long long rng = ref_seed(0x51ed2701ULL + (unsigned long long)op * 7919);
    static const float scales[] = {0.5f, -1.75f, 3.1f, 0.0f, 1e-3f, -0.333f};
    for (int c = 0; c < N_UNARY_CASES; c++) {
        tsl_context *ctx = ref_ctx(8);
        if (!ctx) return;
        int64_t ne[4];
        ref_rand_shape(&rng, (int)ref_rand_int(&rng, 1, 4), 1, 20000, ne);
        ref_layout l = (ref_layout)(c % REF_NLAYOUT);
        tsl_tensor *a = ref_tensor(ctx, TSL_TYPE_F32, ne, l, &rng, lo, hi);
        if (!a) {
            CHECKF(0, "%s: cannot make operand: %s", name, tsl_ctx_error(ctx));
            tsl_ctx_free(ctx);
            continue;
        }
        /* exact zeros and the range ends are worth a look for sqrt/gelu/silu */
        ref_set(a, 0, 0, 0, 0, 0.0);
        ref_set(a, ne[0] - 1, ne[1] - 1, ne[2] - 1, ne[3] - 1, lo);
        const float s = scales[c % 6];
        ref_describe("%s case %d: [%lld,%lld,%lld,%lld] %s%s", name, c, (long long)ne[0], (long long)ne[1],
                     (long long)ne[2], (long long)ne[3], ref_layout_name(l), op == TSL_OP_SCALE ? " (scale)" : "");
        tsl_tensor *out = NULL;
        switch (op) {
        case TSL_OP_SCALE: out = tsl_scale(ctx, a, s); break;
        case TSL_OP_SQR: out = tsl_sqr(ctx, a); break;
        case TSL_OP_SQRT: out = tsl_sqrt(ctx, a); break;
        case TSL_OP_SILU: out = tsl_silu(ctx, a); break;
        case TSL_OP_GELU: out = tsl_gelu(ctx, a); break;
        default: break;
        }
        double *av = ref_load(a);
        const int64_t n = ref_nel(ne);
        double *ref = (double *)malloc((size_t)n * sizeof(double));
        for (int64_t i = 0; i < n; i++) {
            const double x = av[i];
            switch (op) {
            case TSL_OP_SCALE: ref[i] = x * (double)s; break;
            case TSL_OP_SQR: ref[i] = x * x; break;
            case TSL_OP_SQRT: ref[i] = sqrt(x); break;
            case TSL_OP_SILU: ref[i] = ref_silu(x); break;
            case TSL_OP_GELU: ref[i] = ref_gelu(x); break;
            default: ref[i] = NAN; break;
            }
        }
        ref_run(&st, ref_graph(ctx, out), out, ref, NULL, atol, rtol, NULL);
        free(av);
        free(ref);
        tsl_ctx_free(ctx);
    }
    ref_stats_print(&st);
}

static void test_scale(void) { unary_cases(TSL_OP_SCALE, "scale", -3, 3, 0, 1e-6, "atol 0, rtol 1e-6"); }
static void test_sqr(void) { unary_cases(TSL_OP_SQR, "sqr", -3, 3, 0, 1e-6, "atol 0, rtol 1e-6"); }
static void test_sqrt(void) { unary_cases(TSL_OP_SQRT, "sqrt", 0, 4, 0, 1e-6, "atol 0, rtol 1e-6"); }
static void test_silu(void) { unary_cases(TSL_OP_SILU, "silu", -8, 8, 1e-6, 1e-5, "atol 1e-6, rtol 1e-5"); }
static void test_gelu(void) { unary_cases(TSL_OP_GELU, "gelu", -6, 6, 1e-6, 1e-4, "atol 1e-6, rtol 1e-4"); }

/* swiglu(gate, up) = silu(gate) * up, both operands in random layouts. */
static void test_swiglu(void) {
    ref_stats st = {.op = "swiglu", .tol = "atol 1e-6, rtol 1e-5"};
    unsigned long long rng = ref_seed(4242);
    for (int c = 0; c < N_UNARY_CASES; c++) {
        tsl_context *ctx = ref_ctx(8);
        if (!ctx) return;
        int64_t ne[4];
        ref_rand_shape(&rng, (int)ref_rand_int(&rng, 1, 4), 1, 20000, ne);
        ref_layout lg = (ref_layout)(c % REF_NLAYOUT), lu = (ref_layout)ref_rand_int(&rng, 0, REF_NLAYOUT - 1);
        tsl_tensor *gate = ref_tensor(ctx, TSL_TYPE_F32, ne, lg, &rng, -8, 8);
        tsl_tensor *up = ref_tensor(ctx, TSL_TYPE_F32, ne, lu, &rng, -3, 3);
        if (!gate || !up) {
            CHECKF(0, "swiglu: cannot make operands: %s", tsl_ctx_error(ctx));
            tsl_ctx_free(ctx);
            continue;
        }
        ref_describe("swiglu case %d: [%lld,%lld,%lld,%lld] gate %s, up %s", c, (long long)ne[0], (long long)ne[1],
                     (long long)ne[2], (long long)ne[3], ref_layout_name(lg), ref_layout_name(lu));
        tsl_tensor *out = tsl_swiglu(ctx, gate, up);
        double *gv = ref_load(gate), *uv = ref_load(up);
        const int64_t n = ref_nel(ne);
        double *ref = (double *)malloc((size_t)n * sizeof(double));
        for (int64_t i = 0; i < n; i++) ref[i] = ref_silu(gv[i]) * uv[i];
        ref_run(&st, ref_graph(ctx, out), out, ref, NULL, 1e-6, 1e-5, NULL);
        free(gv);
        free(uv);
        free(ref);
        tsl_ctx_free(ctx);
    }
    ref_stats_print(&st);
}

int main(void) {
    if (!ref_setup()) return 1;
    printf("element-wise ops vs double references, %s\n", ref_mode());
    RUN(test_add);
    RUN(test_sub);
    RUN(test_mul);
    RUN(test_div);
    RUN(test_binary_scalar_b);
    RUN(test_scale);
    RUN(test_sqr);
    RUN(test_sqrt);
    RUN(test_silu);
    RUN(test_gelu);
    RUN(test_swiglu);
    ref_teardown();
    return test_summary();
}
