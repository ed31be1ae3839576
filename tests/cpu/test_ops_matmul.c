/*
 * test_ops_matmul.c - mul_mat and out_prod on the CPU backend, one light
 * pass per weight type through the full graph path (the exhaustive GEMM
 * test is test_mulmat.c): F32, F16, BF16, Q8_0, Q4_0 weights (and F16 x F16),
 * a batch broadcast case (A2=2 -> B2=6, A3=1 -> B3=2, each weight matrix
 * serving consecutive activation matrices as ggml does), activations in
 * every layout of ref.h and weights as strided/permuted views with dense
 * rows, at 1, 2 and 3 threads.
 *
 * A kernel may convert the activations to the weight's vec_dot type (F16,
 * BF16, Q8_0 for the quantized weights) or keep them in F32 (a GEMM path);
 * both are right. So the reference is a band: r_raw with b as given and
 * r_conv with b's rows rounded through tsl_vec_dot_type(a->type) (with
 * tsl_quantize/tsl_dequantize), weights exactly as tsl_dequantize gives them.
 * A value passes when its distance to the band [r_raw, r_conv] is at most
 *   atol 1e-6 + rtol 2e-5 * sum_k |a_k b_k|
 * (float accumulation over K <= 200 in any order, per-block scale products).
 * out_prod has no activation conversion: one reference, same tolerance.
 */
#include "ref.h"

static const tsl_type WTYPES[5] = {TSL_TYPE_F32, TSL_TYPE_F16, TSL_TYPE_BF16, TSL_TYPE_Q8_0, TSL_TYPE_Q4_0};

static void mul_mat_case(ref_stats *st, tsl_type wt, tsl_type bt, int c, unsigned long long *rng) {
    tsl_context *ctx = ref_ctx(16);
    if (!ctx) return;
    const bool q = tsl_type_is_quantized(wt);
    const int64_t K = q ? 32 * ref_rand_int(rng, 1, 6) : ref_rand_int(rng, 1, 200);
    const int64_t M = ref_rand_int(rng, 1, 41), N = c == 2 ? 1 : ref_rand_int(rng, 1, 19);
    int64_t ane[4] = {K, M, 1, 1}, bne[4] = {K, N, 1, 1};
    if (c == 1) {
        ane[2] = 2;
        bne[2] = 6;
        bne[3] = 2;
    }
    ref_layout al = c == 0 ? REF_CONTIG : (ref_layout)ref_rand_int(rng, 1, 2); /* rows dense */
    ref_layout bl = c == 0 ? REF_CONTIG : (ref_layout)ref_rand_int(rng, 1, REF_NLAYOUT - 1);
    tsl_tensor *a = ref_tensor(ctx, wt, ane, al, rng, -1.0f, 1.0f);
    tsl_tensor *b = ref_tensor(ctx, bt, bne, bl, rng, -1.0f, 1.0f);
    ref_describe("mul_mat %s x %s case %d: a [%lld,%lld,%lld,%lld] %s, b [%lld,%lld,%lld,%lld] %s", tsl_type_name(wt),
                 tsl_type_name(bt), c, (long long)ane[0], (long long)ane[1], (long long)ane[2], (long long)ane[3],
                 ref_layout_name(al), (long long)bne[0], (long long)bne[1], (long long)bne[2], (long long)bne[3],
                 b && b->nb[0] != tsl_type_block_size(bt) ? "transposed" : ref_layout_name(bl));
    if (!a || !b) {
        CHECKF(0, "%s: cannot make operands: %s", ref_case, tsl_ctx_error(ctx));
        tsl_ctx_free(ctx);
        return;
    }
    tsl_tensor *out = tsl_mul_mat(ctx, a, b);
    const int64_t one[4] = {M, N, bne[2], bne[3]};
    if (out)
        CHECK(out->type == TSL_TYPE_F32 && out->ne[0] == M && out->ne[1] == N && out->ne[2] == bne[2] &&
              out->ne[3] == bne[3]);
    double *av = ref_load(a), *bv = ref_load(b), *bc = ref_load(b);
    const tsl_type vdt = tsl_vec_dot_type(wt);
    if (vdt != TSL_TYPE_F32 && vdt != bt) ref_round_rows(vdt, bc, K, bne[1] * bne[2] * bne[3]);
    const int64_t n = ref_nel(one);
    double *r_raw = (double *)malloc((size_t)n * sizeof(double)), *r_conv = (double *)malloc((size_t)n * sizeof(double));
    double *mag = (double *)malloc((size_t)n * sizeof(double));
    ref_mul_mat(av, ane, bv, bne, r_raw, mag);
    ref_mul_mat(av, ane, bc, bne, r_conv, NULL);
    ref_run_band(st, ref_graph(ctx, out), out, r_raw, r_conv, mag, 1e-6, 2e-5, NULL);
    free(av);
    free(bv);
    free(bc);
    free(r_raw);
    free(r_conv);
    free(mag);
    tsl_ctx_free(ctx);
}

static void test_mul_mat(void) {
    unsigned long long rng = ref_seed(1919);
    for (int ti = 0; ti < 5; ti++) {
        char name[48];
        snprintf(name, sizeof name, "mul_mat %s x f32", tsl_type_name(WTYPES[ti]));
        ref_stats st = {.op = name, .tol = "band + atol 1e-6, rtol 2e-5 sum|ab|"};
        for (int c = 0; c < 6; c++) mul_mat_case(&st, WTYPES[ti], TSL_TYPE_F32, c % 3, &rng);
        ref_stats_print(&st);
    }
    ref_stats st = {.op = "mul_mat f16 x f16", .tol = "atol 1e-6, rtol 2e-5 sum|ab|"};
    for (int c = 0; c < 6; c++) mul_mat_case(&st, TSL_TYPE_F16, TSL_TYPE_F16, c % 3, &rng);
    ref_stats_print(&st);
}

static void out_prod_case(ref_stats *st, tsl_type at, int c, unsigned long long *rng) {
    tsl_context *ctx = ref_ctx(16);
    if (!ctx) return;
    const bool q = tsl_type_is_quantized(at);
    const int64_t M = q ? 32 * ref_rand_int(rng, 1, 3) : ref_rand_int(rng, 1, 60);
    const int64_t K = ref_rand_int(rng, 1, 50), N = ref_rand_int(rng, 1, 30);
    int64_t ane[4] = {M, K, 1, 1}, bne[4] = {N, K, 1, 1};
    if (c == 1) {
        ane[2] = 2;
        bne[2] = 6;
        bne[3] = 2;
    }
    ref_layout al = c == 0 ? REF_CONTIG : (ref_layout)ref_rand_int(rng, 1, 2);
    ref_layout bl = c == 0 ? REF_CONTIG : (ref_layout)ref_rand_int(rng, 1, REF_NLAYOUT - 1);
    tsl_tensor *a = ref_tensor(ctx, at, ane, al, rng, -1.0f, 1.0f);
    tsl_tensor *b = ref_tensor(ctx, TSL_TYPE_F32, bne, bl, rng, -1.0f, 1.0f);
    ref_describe("out_prod %s case %d: a [%lld,%lld,%lld,%lld] %s, b [%lld,%lld,%lld,%lld] %s", tsl_type_name(at), c,
                 (long long)ane[0], (long long)ane[1], (long long)ane[2], (long long)ane[3], ref_layout_name(al),
                 (long long)bne[0], (long long)bne[1], (long long)bne[2], (long long)bne[3],
                 b && b->nb[0] != sizeof(float) ? "transposed" : ref_layout_name(bl));
    if (!a || !b) {
        CHECKF(0, "%s: cannot make operands: %s", ref_case, tsl_ctx_error(ctx));
        tsl_ctx_free(ctx);
        return;
    }
    tsl_tensor *out = tsl_out_prod(ctx, a, b);
    const int64_t one[4] = {M, N, bne[2], bne[3]};
    if (out)
        CHECK(out->type == TSL_TYPE_F32 && out->ne[0] == M && out->ne[1] == N && out->ne[2] == bne[2] &&
              out->ne[3] == bne[3]);
    double *av = ref_load(a), *bv = ref_load(b);
    const int64_t n = ref_nel(one);
    double *ref = (double *)malloc((size_t)n * sizeof(double)), *mag = (double *)malloc((size_t)n * sizeof(double));
    ref_out_prod(av, ane, bv, bne, ref, mag);
    ref_run(st, ref_graph(ctx, out), out, ref, mag, 1e-6, 2e-5, NULL);
    free(av);
    free(bv);
    free(ref);
    free(mag);
    tsl_ctx_free(ctx);
}

static void test_out_prod(void) {
    static const tsl_type ATYPES[5] = {TSL_TYPE_F32, TSL_TYPE_F16, TSL_TYPE_BF16, TSL_TYPE_Q8_0, TSL_TYPE_Q4_0};
    unsigned long long rng = ref_seed(2020);
    for (int ti = 0; ti < 5; ti++) {
        char name[48];
        snprintf(name, sizeof name, "out_prod %s x f32", tsl_type_name(ATYPES[ti]));
        ref_stats st = {.op = name, .tol = "atol 1e-6, rtol 2e-5 sum|ab|"};
        for (int c = 0; c < 6; c++) out_prod_case(&st, ATYPES[ti], c % 3, &rng);
        ref_stats_print(&st);
    }
}

int main(void) {
    if (!ref_setup()) return 1;
    printf("mul_mat / out_prod vs double references, %s\n", ref_mode());
    RUN(test_mul_mat);
    RUN(test_out_prod);
    ref_teardown();
    return test_summary();
}
