/*
 * test_ops_reduce.c - the reductions on the CPU backend against double
 * references: sum, sum_rows, mean, argmax, cross_entropy_loss.
 *
 * Inputs come in every layout of ref.h (views of padded tensors, permutes,
 * transposes), so a reduction that walks memory instead of the tensor's
 * strides, or sums padding, disagrees.
 *
 * Tolerances, |got - ref| <= atol + rtol * m, where m is the condition
 * magnitude, not |ref|: a float sum of n terms is accurate to ~eps * sum|x|
 * (pairwise or double accumulation gets well under that), and a sum that
 * cancels to ~0 cannot be checked relative to itself.
 *   sum, sum_rows     m = sum |x|            atol 1e-6, rtol 1e-5
 *   mean              m = sum |x| / ne0      atol 1e-6, rtol 1e-5
 *   cross_entropy     m = mean over rows of sum |label * log_softmax|,
 *                     atol 1e-6, rtol 1e-5 (exp/log in float add ~1e-7)
 *   argmax            exact, first index wins ties (values drawn from a
 *                     small set of integers in half the cases so ties occur)
 */
#include "ref.h"

#define N_CASES 24

static void print_case(const char *name, int c, const int64_t ne[4], ref_layout l) {
    ref_describe("%s case %d: [%lld,%lld,%lld,%lld] %s", name, c, (long long)ne[0], (long long)ne[1],
                 (long long)ne[2], (long long)ne[3], ref_layout_name(l));
}

static void test_sum(void) {
    ref_stats st = {.op = "sum", .tol = "m=sum|x|, atol 1e-6, rtol 1e-5"};
    unsigned long long rng = ref_seed(101);
    for (int c = 0; c < N_CASES; c++) {
        tsl_context *ctx = ref_ctx(8);
        if (!ctx) return;
        int64_t ne[4];
        ref_rand_shape(&rng, (int)ref_rand_int(&rng, 1, 4), 1, 60000, ne);
        ref_layout l = (ref_layout)(c % REF_NLAYOUT);
        /* a positive offset in half the cases, so a large sum's rounding is exercised */
        tsl_tensor *a = ref_tensor(ctx, TSL_TYPE_F32, ne, l, &rng, c & 1 ? -1.0f : 0.5f, c & 1 ? 1.0f : 3.0f);
        print_case("sum", c, ne, l);
        tsl_tensor *out = a ? tsl_sum(ctx, a) : NULL;
        double ref = 0, mag = 0;
        double *av = a ? ref_load(a) : NULL;
        for (int64_t i = 0; av && i < ref_nel(ne); i++) {
            ref += av[i];
            mag += fabs(av[i]);
        }
        if (out) CHECK(out->ne[0] == 1 && tsl_nelements(out) == 1);
        ref_run(&st, ref_graph(ctx, out), out, &ref, &mag, 1e-6, 1e-5, NULL);
        free(av);
        tsl_ctx_free(ctx);
    }
    ref_stats_print(&st);
}

static void rows_cases(bool mean) {
    ref_stats st = {.op = mean ? "mean" : "sum_rows",
                    .tol = mean ? "m=sum|x|/ne0, atol 1e-6, rtol 1e-5" : "m=sum|x|, atol 1e-6, rtol 1e-5"};
    unsigned long long rng = ref_seed(mean ? 202 : 303);
    for (int c = 0; c < N_CASES; c++) {
        tsl_context *ctx = ref_ctx(8);
        if (!ctx) return;
        int64_t ne[4];
        ref_rand_shape(&rng, (int)ref_rand_int(&rng, 1, 4), 1, 40000, ne);
        ref_layout l = (ref_layout)(c % REF_NLAYOUT);
        tsl_tensor *a = ref_tensor(ctx, TSL_TYPE_F32, ne, l, &rng, -1.0f, 2.0f);
        print_case(mean ? "mean" : "sum_rows", c, ne, l);
        tsl_tensor *out = a ? (mean ? tsl_mean(ctx, a) : tsl_sum_rows(ctx, a)) : NULL;
        if (out)
            CHECK(out->ne[0] == 1 && out->ne[1] == ne[1] && out->ne[2] == ne[2] && out->ne[3] == ne[3] &&
                  out->type == TSL_TYPE_F32);
        const int64_t nr = ne[1] * ne[2] * ne[3];
        double *av = a ? ref_load(a) : NULL;
        double *ref = (double *)calloc((size_t)nr, sizeof(double)), *mag = (double *)calloc((size_t)nr, sizeof(double));
        for (int64_t r = 0; av && r < nr; r++) {
            for (int64_t i = 0; i < ne[0]; i++) {
                ref[r] += av[r * ne[0] + i];
                mag[r] += fabs(av[r * ne[0] + i]);
            }
            if (mean) {
                ref[r] /= (double)ne[0];
                mag[r] /= (double)ne[0];
            }
        }
        ref_run(&st, ref_graph(ctx, out), out, ref, mag, 1e-6, 1e-5, NULL);
        free(av);
        free(ref);
        free(mag);
        tsl_ctx_free(ctx);
    }
    ref_stats_print(&st);
}

static void test_sum_rows(void) { rows_cases(false); }
static void test_mean(void) { rows_cases(true); }

static void test_argmax(void) {
    ref_stats st = {.op = "argmax", .tol = "exact, first wins ties"};
    unsigned long long rng = ref_seed(404);
    for (int c = 0; c < N_CASES; c++) {
        tsl_context *ctx = ref_ctx(8);
        if (!ctx) return;
        int64_t ne[4];
        ref_rand_shape(&rng, 2, 1, 40000, ne);
        ref_layout l = (ref_layout)(c % REF_NLAYOUT);
        const bool ties = c & 1;
        tsl_tensor *a = ref_tensor(ctx, TSL_TYPE_F32, ne, l, &rng, ties ? -3.0f : -5.0f, ties ? 4.0f : 5.0f);
        if (!a) {
            CHECKF(0, "argmax: cannot make operand: %s", tsl_ctx_error(ctx));
            tsl_ctx_free(ctx);
            continue;
        }
        for (int64_t i1 = 0; i1 < ne[1]; i1++)
            for (int64_t i0 = 0; i0 < ne[0]; i0++) {
                double v = ref_get(a, i0, i1, 0, 0);
                if (ties) ref_set(a, i0, i1, 0, 0, floor(v)); /* few distinct values: ties */
                if (c % 4 == 2 && i1 % 3 == 0) ref_set(a, i0, i1, 0, 0, -7.5); /* a row of equal values */
                /* NaN and -inf never win: NaN at the start of a row and here
                 * and there, a row of NaN and -inf only (gives 0) */
                if (c % 4 == 3 && (i0 == 0 || (i0 * 7 + i1) % 5 == 0)) ref_set(a, i0, i1, 0, 0, NAN);
                if (c % 4 == 3 && i1 % 2 == 1 && i0 != 0 && (i0 * 7 + i1) % 5 != 0)
                    ref_set(a, i0, i1, 0, 0, -INFINITY);
            }
        print_case("argmax", c, ne, l);
        tsl_tensor *out = tsl_argmax(ctx, a);
        if (out) CHECK(out->type == TSL_TYPE_I32 && out->ne[0] == ne[1] && tsl_nelements(out) == ne[1]);
        double *av = ref_load(a);
        double *ref = (double *)malloc((size_t)ne[1] * sizeof(double));
        for (int64_t i1 = 0; i1 < ne[1]; i1++) {
            int64_t best = -1;
            for (int64_t i0 = 0; i0 < ne[0]; i0++)
                if (av[i1 * ne[0] + i0] > (best < 0 ? -INFINITY : av[i1 * ne[0] + best])) best = i0;
            ref[i1] = best < 0 ? 0.0 : (double)best;
        }
        ref_run(&st, ref_graph(ctx, out), out, ref, NULL, 0, 0, NULL);
        free(av);
        free(ref);
        tsl_ctx_free(ctx);
    }
    ref_stats_print(&st);
}

static void test_cross_entropy_loss(void) {
    ref_stats st = {.op = "cross_entropy_loss", .tol = "m=mean sum|y*lsm|, atol 1e-6, rtol 1e-5"};
    unsigned long long rng = ref_seed(505);
    for (int c = 0; c < N_CASES; c++) {
        tsl_context *ctx = ref_ctx(8);
        if (!ctx) return;
        int64_t ne[4];
        ref_rand_shape(&rng, (int)ref_rand_int(&rng, 1, 4), 1, 30000, ne);
        ref_layout ll = (ref_layout)(c % REF_NLAYOUT), ly = (ref_layout)ref_rand_int(&rng, 0, REF_NLAYOUT - 1);
        const float span = c % 3 == 0 ? 12.0f : 4.0f; /* wide logits test the max subtraction */
        tsl_tensor *logits = ref_tensor(ctx, TSL_TYPE_F32, ne, ll, &rng, -span, span);
        tsl_tensor *labels = ref_tensor(ctx, TSL_TYPE_F32, ne, ly, &rng, 0.0f, 1.0f);
        if (!logits || !labels) {
            CHECKF(0, "cross_entropy_loss: cannot make operands: %s", tsl_ctx_error(ctx));
            tsl_ctx_free(ctx);
            continue;
        }
        /* labels are probabilities: normalize each row; every 4th case one-hot */
        for (int64_t i3 = 0; i3 < ne[3]; i3++)
            for (int64_t i2 = 0; i2 < ne[2]; i2++)
                for (int64_t i1 = 0; i1 < ne[1]; i1++) {
                    double s = 0;
                    int64_t hot = ref_rand_int(&rng, 0, ne[0] - 1);
                    for (int64_t i0 = 0; i0 < ne[0]; i0++) s += ref_get(labels, i0, i1, i2, i3);
                    for (int64_t i0 = 0; i0 < ne[0]; i0++) {
                        double v = c % 4 == 1 ? (i0 == hot ? 1.0 : 0.0)
                                              : (s > 0 ? ref_get(labels, i0, i1, i2, i3) / s : 1.0 / (double)ne[0]);
                        ref_set(labels, i0, i1, i2, i3, v);
                    }
                }
        ref_describe("cross_entropy_loss case %d: [%lld,%lld,%lld,%lld] logits %s, labels %s", c, (long long)ne[0],
                     (long long)ne[1], (long long)ne[2], (long long)ne[3], ref_layout_name(ll), ref_layout_name(ly));
        tsl_tensor *out = tsl_cross_entropy_loss(ctx, logits, labels);
        if (out) CHECK(tsl_nelements(out) == 1 && out->type == TSL_TYPE_F32);
        double *xv = ref_load(logits), *yv = ref_load(labels);
        double mag = 0;
        double ref = ref_cross_entropy(xv, yv, ne, &mag);
        ref_run(&st, ref_graph(ctx, out), out, &ref, &mag, 1e-6, 1e-5, NULL);
        free(xv);
        free(yv);
        tsl_ctx_free(ctx);
    }
    ref_stats_print(&st);
}

int main(void) {
    if (!ref_setup()) return 1;
    printf("reductions vs double references, %s\n", ref_mode());
    RUN(test_sum);
    RUN(test_sum_rows);
    RUN(test_mean);
    RUN(test_argmax);
    RUN(test_cross_entropy_loss);
    ref_teardown();
    return test_summary();
}
