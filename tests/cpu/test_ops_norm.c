/*
 * test_ops_norm.c - rms_norm and norm on the CPU backend against double
 * references, on random shapes and layouts, at 1, 2 and 3 threads.
 *
 * Rows are drawn at very different magnitudes (1e-3 .. 1e3) in some cases:
 * both norms are scale-invariant up to eps, so a kernel that accumulates the
 * sum of squares badly, or adds eps in the wrong place, shows there; eps is
 * drawn from {1e-6, 1e-5, 0.1} so it matters in some rows.
 *
 * Tolerances, |got - ref| <= atol + rtol * |ref| (outputs are ~unit scale):
 *   rms_norm   atol 1e-6, rtol 1e-5: a float sum of squares over <= 300
 *              terms and one rsqrt.
 *   norm       atol 1e-5, rtol 1e-5, plus 2^-22 (|x| + |mean|) / sqrt(var + eps):
 *              x - mean in float is exact only to ~2^-24 of |x| + |mean|, so
 *              a row whose mean dwarfs its spread (two values near 1e3) is
 *              accurate to that scale, not to its output.
 * In-place runs are in test_ops_inplace.c.
 */
#include "ref.h"

#define N_CASES 32

static void norm_cases(bool rms) {
    ref_stats st = {.op = rms ? "rms_norm" : "norm", .tol = rms ? "atol 1e-6, rtol 1e-5" : "atol 1e-5, rtol 1e-5"};
    unsigned long long rng = ref_seed(rms ? 606 : 707);
    static const float epss[] = {1e-6f, 1e-5f, 0.1f};
    for (int c = 0; c < N_CASES; c++) {
        tsl_context *ctx = ref_ctx(8);
        if (!ctx) return;
        int64_t ne[4];
        ref_rand_shape(&rng, (int)ref_rand_int(&rng, 1, 4), 1, 30000, ne);
        if (c % 5 == 4) ne[0] = ref_rand_int(&rng, 100, 300); /* longer rows: a vectorized main loop and a tail */
        while (ref_nel(ne) > 30000 && ne[1] > 1) ne[1] = (ne[1] + 1) / 2;
        ref_layout l = (ref_layout)(c % REF_NLAYOUT);
        tsl_tensor *a = ref_tensor(ctx, TSL_TYPE_F32, ne, l, &rng, -2.0f, 3.0f);
        if (!a) {
            CHECKF(0, "%s: cannot make operand: %s", st.op, tsl_ctx_error(ctx));
            tsl_ctx_free(ctx);
            continue;
        }
        if (c % 3 == 2) {
            /* rows at magnitudes 1e-3 .. 1e3 */
            for (int64_t i3 = 0; i3 < ne[3]; i3++)
                for (int64_t i2 = 0; i2 < ne[2]; i2++)
                    for (int64_t i1 = 0; i1 < ne[1]; i1++) {
                        const double s = pow(10.0, (double)((i1 + i2) % 7) - 3.0);
                        for (int64_t i0 = 0; i0 < ne[0]; i0++)
                            ref_set(a, i0, i1, i2, i3, ref_get(a, i0, i1, i2, i3) * s);
                    }
        }
        const float eps = epss[c % 3];
        ref_describe("%s case %d: [%lld,%lld,%lld,%lld] %s eps %g", st.op, c, (long long)ne[0], (long long)ne[1],
                     (long long)ne[2], (long long)ne[3], ref_layout_name(l), (double)eps);
        tsl_tensor *out = rms ? tsl_rms_norm(ctx, a, eps) : tsl_norm(ctx, a, eps);
        double *av = ref_load(a);
        const int64_t n = ref_nel(ne);
        double *ref = (double *)malloc((size_t)n * sizeof(double)), *mag = NULL;
        if (rms) {
            ref_rms_norm(av, ne, (double)eps, ref);
        } else {
            /* m = |ref| + 2^-22 (|x| + |mean|) / sqrt(var + eps) / rtol: see the tolerances above */
            mag = (double *)malloc((size_t)n * sizeof(double));
            ref_norm(av, ne, (double)eps, ref, mag);
            for (int64_t i = 0; i < n; i++) mag[i] = fabs(ref[i]) + mag[i] * 0x1p-22 / 1e-5;
        }
        ref_run(&st, ref_graph(ctx, out), out, ref, mag, rms ? 1e-6 : 1e-5, 1e-5, NULL);
        free(av);
        free(ref);
        free(mag);
        tsl_ctx_free(ctx);
    }
    ref_stats_print(&st);
}

static void test_rms_norm(void) { norm_cases(true); }
static void test_norm(void) { norm_cases(false); }

int main(void) {
    if (!ref_setup()) return 1;
    printf("norms vs double references, %s\n", ref_mode());
    RUN(test_rms_norm);
    RUN(test_norm);
    ref_teardown();
    return test_summary();
}
