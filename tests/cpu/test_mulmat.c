/*
 * test_mulmat.c - mul_mat and out_prod on the CPU backend against a naive
 * double-precision reference.
 *
 * Everything goes through the public API (a context with data, tsl_mul_mat /
 * tsl_out_prod, a graph, tsl_backend_graph_compute) on backends with 1, 2 and
 * 3 threads, so the thread splits, the scratch planning and the barriers of
 * the two-phase kernels are exercised along with the arithmetic; the thread
 * counts' results must be the same bytes. With
 * TSL_TEST_BACKEND=vulkan every case runs once on the Vulkan backend
 * instead, through ref.h's harness (the host tensors copied to the device
 * for the compute, every node checked to have run there, the (op, type)
 * pairs Vulkan lacks listed in ref.h's REF_VK_GAPS and checked refused), with
 * the same references and tolerances.
 *
 * Coverage: every weight type (F32, F16, BF16, Q8_0, Q4_0, and F16 x F16)
 * x column counts on both sides of the row-dot/GEMM switch (1, 2, 3, 7, 16,
 * 33, 100, 150) x odd M and K (multiples of 32 for quantized blocks) x batch
 * broadcast (A2=2 over B2=6, A3=1 over B3=2) x b laid out contiguously, as a
 * transposed view of a bigger tensor (k strided) and as a permuted view (k
 * dense, batches interleaved); then GEMM-sized products whose dimensions are
 * not multiples of any tile, and products built to land on edge tiles and
 * partial K blocks.
 *
 * The reference reads every input element through its own byte strides and
 * decodes quantized blocks with tsl_dequantize, so it shares no layout
 * assumption with the kernels. Errors are measured relative to sum |a||b|
 * over the dot product (float rounding scales with the terms, not with a
 * result that may cancel). Tolerances per weight type:
 *   F32 1e-5; F16 1e-3 and BF16 1e-2 (b may be rounded to the weight type on
 *   the row-dot path, as ggml does); Q8_0/Q4_0: within 1e-4 of either the
 *   reference with b quantized to Q8_0 exactly as the kernels' integer dot
 *   sees it, or the float reference (the GEMM path dequantizes the weights
 *   and keeps b in F32), and always within 1e-2 of the float reference.
 * Outputs are poisoned with NaN before each compute, so a thread that skipped
 * its share cannot pass on values left by an earlier run.
 */
#include <stdint.h>

#include "cpu/cpu.h"
#include "ref.h" /* the backends: ref_be[], 1, 2 and 3 CPU threads or Vulkan */
#include "tensile/backend.h"
#include "tensile/tensile.h"
#include "test.h"

static unsigned long long g_seed = 0x1234567ULL;
static int g_cases, g_reported, g_not_on_vk;

enum { LAYOUT_CONTIG, LAYOUT_TRANSPOSED, LAYOUT_PERMUTED, LAYOUT_COUNT };

typedef struct mm_case {
    tsl_op op;
    tsl_type ta, tb;
    int64_t M, N, K;
    int64_t A2, A3, B2, B3;
    int layout;
} mm_case;

/* ---- reading tensors through their strides ------------------------------ */

/* Element (i0, i1, i2, i3) of a float tensor. */
static double rd(const tsl_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const char *p = (const char *)t->data + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
    switch (t->type) {
    case TSL_TYPE_F32: return *(const float *)p;
    case TSL_TYPE_F16: return tsl_fp16_to_fp32(*(const tsl_fp16_t *)p);
    case TSL_TYPE_BF16: return tsl_bf16_to_fp32(*(const tsl_bf16_t *)p);
    default: return NAN;
    }
}

/* Row (i1, i2, i3) of any tensor as doubles (quantized rows decoded). */
static void rd_row(const tsl_tensor *t, int64_t i1, int64_t i2, int64_t i3, double *out) {
    if (tsl_type_is_quantized(t->type)) {
        const char *row = (const char *)t->data + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
        float *f = malloc((size_t)t->ne[0] * sizeof *f);
        CHECK(tsl_dequantize(t->type, row, f, t->ne[0]) > 0);
        for (int64_t i = 0; i < t->ne[0]; i++) out[i] = f[i];
        free(f);
    } else {
        for (int64_t i = 0; i < t->ne[0]; i++) out[i] = rd(t, i, i1, i2, i3);
    }
}

/* ---- building the inputs ------------------------------------------------ */

static void fill_floats(float *f, int64_t n) {
    for (int64_t i = 0; i < n; i++) f[i] = test_rand_f(&g_seed, -1.0f, 1.0f);
}

/* A weight tensor of type t with random contents (quantized through
 * tsl_quantize, so the blocks are what a real file would hold). */
static tsl_tensor *make_weights(tsl_context *ctx, tsl_type t, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    tsl_tensor *w = tsl_new_tensor_4d(ctx, t, ne0, ne1, ne2, ne3);
    if (!w) return NULL;
    const int64_t rows = ne1 * ne2 * ne3;
    float *f = malloc((size_t)ne0 * sizeof *f);
    for (int64_t r = 0; r < rows; r++) {
        fill_floats(f, ne0);
        /* vary the row scale so per-block scales differ */
        float s = 0.25f + 2.0f * (float)(r % 7) / 7.0f;
        for (int64_t i = 0; i < ne0; i++) f[i] *= s;
        CHECK(tsl_quantize(t, f, (char *)w->data + (size_t)r * w->nb[1], ne0) == w->nb[1]);
    }
    free(f);
    return w;
}

/* b with logical shape [ne0, ne1, ne2, ne3] laid out as asked. */
static tsl_tensor *make_acts(tsl_context *ctx, tsl_type t, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                             int layout) {
    tsl_tensor *base = NULL, *b = NULL;
    switch (layout) {
    case LAYOUT_CONTIG:
        base = b = tsl_new_tensor_4d(ctx, t, ne0, ne1, ne2, ne3);
        break;
    case LAYOUT_TRANSPOSED: {
        /* a window of a bigger [ne1+3, ne0+2, ne2, ne3] tensor, transposed:
         * element stride along ne0 is a whole row of the base */
        base = tsl_new_tensor_4d(ctx, t, ne1 + 3, ne0 + 2, ne2, ne3);
        if (!base) return NULL;
        size_t es = tsl_type_block_size(t);
        tsl_tensor *v = tsl_view_4d(ctx, base, ne1, ne0, ne2, ne3, base->nb[1], base->nb[2], base->nb[3],
                                    base->nb[1] + 2 * es);
        b = tsl_transpose(ctx, v);
        break;
    }
    case LAYOUT_PERMUTED: {
        /* [ne0+5, ne2, ne1, ne3] with dims 1 and 2 swapped, windowed to ne0:
         * rows dense, but padded, and columns and batches interleaved */
        base = tsl_new_tensor_4d(ctx, t, ne0 + 5, ne2, ne1, ne3);
        if (!base) return NULL;
        tsl_tensor *v = tsl_view_4d(ctx, base, ne0, ne2, ne1, ne3, base->nb[1], base->nb[2], base->nb[3],
                                    tsl_type_block_size(t));
        b = tsl_permute(ctx, v, 0, 2, 1, 3);
        break;
    }
    }
    if (!base || !b) return NULL;
    const int64_t n = tsl_nelements(base);
    if (t == TSL_TYPE_F32) {
        fill_floats(base->data, n);
    } else {
        for (int64_t i = 0; i < n; i++)
            ((tsl_fp16_t *)base->data)[i] = tsl_fp32_to_fp16(test_rand_f(&g_seed, -1.0f, 1.0f));
    }
    return b;
}

/* ---- one case ------------------------------------------------------------- */

static const char *case_str(const mm_case *c, char *buf, size_t n) {
    snprintf(buf, n, "%s a %s b %s M=%lld N=%lld K=%lld batch a[%lld,%lld] b[%lld,%lld] layout %d",
             tsl_op_name(c->op), tsl_type_name(c->ta), tsl_type_name(c->tb), (long long)c->M, (long long)c->N,
             (long long)c->K, (long long)c->A2, (long long)c->A3, (long long)c->B2, (long long)c->B3, c->layout);
    return buf;
}

static void run_case(const mm_case *c, int be_first, int be_last) {
    const bool quant = tsl_type_is_quantized(c->ta);
    const size_t abytes = tsl_row_size(c->ta, c->op == TSL_OP_MUL_MAT ? c->K : c->M) *
                          (size_t)((c->op == TSL_OP_MUL_MAT ? c->M : c->K) * c->A2 * c->A3);
    const size_t bbytes = (size_t)((c->K + 3) * (c->N + 3) * c->B2 * c->B3) * 4;
    const size_t dbytes = (size_t)(c->M * c->N * c->B2 * c->B3) * 4;
    tsl_ctx_params cp = {abytes + bbytes + dbytes + (1u << 20), false};
    tsl_context *ctx = tsl_ctx_new(cp);
    CHECK(ctx != NULL);
    if (!ctx) return;
    tsl_tensor *a, *b, *d;
    if (c->op == TSL_OP_MUL_MAT) {
        a = make_weights(ctx, c->ta, c->K, c->M, c->A2, c->A3);
        b = make_acts(ctx, c->tb, c->K, c->N, c->B2, c->B3, c->layout);
        d = tsl_mul_mat(ctx, a, b);
    } else {
        a = make_weights(ctx, c->ta, c->M, c->K, c->A2, c->A3);
        b = make_acts(ctx, c->tb, c->N, c->K, c->B2, c->B3, c->layout);
        d = tsl_out_prod(ctx, a, b);
    }
    tsl_graph *g = d ? tsl_graph_build(ctx, &d, 1) : NULL;
    char desc[256];
    case_str(c, desc, sizeof desc);
    CHECKF(g != NULL, "%s: %s", desc, tsl_ctx_error(ctx) ? tsl_ctx_error(ctx) : "?");
    if (!g) {
        tsl_ctx_free(ctx);
        return;
    }
    /* (a single dense column is contiguous whatever its view says) */
    if (c->layout != LAYOUT_CONTIG && (b->nb[0] != tsl_type_block_size(b->type) || tsl_nrows(b) > 1))
        CHECKF(!tsl_is_contiguous(b), "%s: b should be a strided view", desc);
    CHECK(d->ne[0] == c->M && d->ne[1] == c->N && d->ne[2] == c->B2 && d->ne[3] == c->B3);

    /* references: rf with b as given, rq with b's columns through Q8_0 */
    const int64_t M = c->M, N = c->N, K = c->K, nout = M * N * c->B2 * c->B3;
    double *rf = calloc((size_t)nout, sizeof *rf), *rq = calloc((size_t)nout, sizeof *rq);
    double *mag = calloc((size_t)nout, sizeof *mag);
    double *am = malloc((size_t)(M * K) * sizeof *am); /* a batch as [m][k] */
    double *bn = malloc((size_t)(N * K) * sizeof *bn); /* b batch as [n][k] */
    double *bq = malloc((size_t)(N * K) * sizeof *bq);
    double *row = malloc((size_t)(M > K ? M : K) * sizeof *row);
    float *fcol = malloc((size_t)K * sizeof *fcol);
    tsl_block_q8_0 *qcol = malloc((size_t)(K / 32 + 1) * sizeof *qcol);
    const bool use_q = quant && c->op == TSL_OP_MUL_MAT;
    for (int64_t i3 = 0; i3 < c->B3; i3++) {
        for (int64_t i2 = 0; i2 < c->B2; i2++) {
            const int64_t a2 = i2 / (c->B2 / c->A2), a3 = i3 / (c->B3 / c->A3);
            if (c->op == TSL_OP_MUL_MAT) {
                for (int64_t m = 0; m < M; m++) {
                    rd_row(a, m, a2, a3, row);
                    for (int64_t k = 0; k < K; k++) am[m * K + k] = row[k];
                }
                for (int64_t n = 0; n < N; n++)
                    for (int64_t k = 0; k < K; k++) bn[n * K + k] = rd(b, k, n, i2, i3);
            } else {
                for (int64_t k = 0; k < K; k++) {
                    rd_row(a, k, a2, a3, row);
                    for (int64_t m = 0; m < M; m++) am[m * K + k] = row[m];
                }
                for (int64_t n = 0; n < N; n++)
                    for (int64_t k = 0; k < K; k++) bn[n * K + k] = rd(b, n, k, i2, i3);
            }
            if (use_q) {
                for (int64_t n = 0; n < N; n++) {
                    for (int64_t k = 0; k < K; k++) fcol[k] = (float)bn[n * K + k];
                    CHECK(tsl_quantize(TSL_TYPE_Q8_0, fcol, qcol, K) > 0);
                    CHECK(tsl_dequantize(TSL_TYPE_Q8_0, qcol, fcol, K) > 0);
                    for (int64_t k = 0; k < K; k++) bq[n * K + k] = fcol[k];
                }
            }
            for (int64_t n = 0; n < N; n++) {
                for (int64_t m = 0; m < M; m++) {
                    double sf = 0, sq = 0, sm = 0;
                    for (int64_t k = 0; k < K; k++) {
                        sf += am[m * K + k] * bn[n * K + k];
                        sm += fabs(am[m * K + k] * bn[n * K + k]);
                        if (use_q) sq += am[m * K + k] * bq[n * K + k];
                    }
                    const int64_t o = ((i3 * c->B2 + i2) * N + n) * M + m;
                    rf[o] = sf;
                    rq[o] = sq;
                    mag[o] = sm;
                }
            }
        }
    }

    double tol;
    switch (c->ta) {
    case TSL_TYPE_F32: tol = 1e-5; break;
    case TSL_TYPE_F16: tol = 1e-3; break;
    case TSL_TYPE_BF16: tol = 1e-2; break;
    default: tol = 1e-4; break;
    }
    /* A device with cooperative matrices multiplies F16, BF16 and block
     * weights over more than 8 columns in F16: the activations are rounded
     * to F16 (relative error 2^-11 per product, 2^-10 with a block's F16
     * scale) instead of to the CPU's Q8_0, so the bound is that share of
     * sum|ab|. Lavapipe has none, so CI keeps the tight bounds. */
    if (ref_vk && ref_vk_coopmat && c->op == TSL_OP_MUL_MAT && c->ta != TSL_TYPE_F32 && N > 8)
        tol = fmax(tol, quant ? 1.1e-3 : 6e-4);
    /* on Vulkan the one backend stands for every thread count */
    if (ref_vk) be_first = be_last = 0;
    /* the CPU computes the same bytes with any thread count: the first
     * backend's result, to compare the others' with */
    void *first = NULL;
    for (int bi = be_first; bi <= be_last; bi++) {
        /* poison, so a share of the output nobody wrote cannot pass */
        memset(d->data, 0xff, tsl_nbytes(d));
        ref_describe("%s", desc);
        const int r = ref_compute_st(NULL, bi, g);
        if (r == REF_NOT_ON_VK) g_not_on_vk++;
        if (r != REF_RAN) continue;
        double worst = 0, worst_loose = 0;
        int64_t worst_i = 0;
        for (int64_t o = 0; o < nout; o++) {
            const int64_t m = o % M, n = (o / M) % N, i2 = (o / (M * N)) % c->B2, i3 = o / (M * N * c->B2);
            const double got = *(const float *)((const char *)d->data + m * d->nb[0] + n * d->nb[1] +
                                                i2 * d->nb[2] + i3 * d->nb[3]);
            const double scale = mag[o] > 0 ? mag[o] : 1.0;
            double e = fabs(got - rf[o]) / scale;
            const double ef = e;
            if (use_q) {
                const double eq = fabs(got - rq[o]) / scale;
                if (eq < e) e = eq;
            }
            if (!(e <= worst)) { /* also catches NaN */
                worst = isnan(e) ? INFINITY : e;
                worst_i = o;
            }
            if (!(ef <= worst_loose)) worst_loose = isnan(ef) ? INFINITY : ef;
        }
        const bool ok = worst <= tol && (!quant || worst_loose <= 1e-2);
        if (!ok && g_reported < 20) {
            g_reported++;
            fprintf(stderr, "  %s, %s: worst rel err %.3g (tol %.1g), float-ref err %.3g at flat %lld\n", desc,
                    ref_where(REF_NTH(bi)), worst, tol, worst_loose, (long long)worst_i);
        }
        CHECK(ok);
        if (!first && (first = malloc(tsl_nbytes(d)))) {
            memcpy(first, d->data, tsl_nbytes(d));
        } else if (first) {
            char on[64]; /* ref_where's buffer is reused */
            snprintf(on, sizeof on, "%s", ref_where(REF_NTH(bi)));
            CHECKF(memcmp(first, d->data, tsl_nbytes(d)) == 0, "%s: %s differs from %s", desc, on,
                   ref_where(REF_NTH(be_first)));
        }
        g_cases++;
    }
    free(first);
    free(rf), free(rq), free(mag), free(am), free(bn), free(bq), free(row), free(fcol), free(qcol);
    tsl_ctx_free(ctx);
}

/* ---- the sweeps ------------------------------------------------------------ */

/* 150 reaches the GEMM for every weight type (the switch is at 64..128
 * columns with AVX-512, 8..16 without) */
static const int64_t SWEEP_N[] = {1, 2, 3, 7, 16, 33, 100, 150};
#define N_SWEEP (int)(sizeof SWEEP_N / sizeof SWEEP_N[0])

static void sweep(tsl_op op, tsl_type ta, tsl_type tb) {
    const bool quant = tsl_type_is_quantized(ta);
    for (int ni = 0; ni < N_SWEEP; ni++) {
        for (int bc = 0; bc < 2; bc++) {
            for (int layout = 0; layout < LAYOUT_COUNT; layout++) {
                mm_case c;
                memset(&c, 0, sizeof c);
                c.op = op;
                c.ta = ta;
                c.tb = tb;
                c.N = SWEEP_N[ni];
                /* odd sizes; quantized blocks run along K (mul_mat) or M (out_prod) */
                if (op == TSL_OP_MUL_MAT) {
                    c.M = 37 + 2 * ni;
                    c.K = quant ? 96 : 45 + 2 * layout;
                } else {
                    c.M = quant ? 64 : 37 + 2 * ni;
                    c.K = 45 + 2 * layout;
                }
                c.A2 = bc ? 2 : 1;
                c.B2 = bc ? 6 : 1;
                c.A3 = 1;
                c.B3 = bc ? 2 : 1;
                c.layout = layout;
                run_case(&c, 0, REF_MAXB - 1);
            }
        }
    }
}

static void test_mul_mat_f32(void) { sweep(TSL_OP_MUL_MAT, TSL_TYPE_F32, TSL_TYPE_F32); }
static void test_mul_mat_f16(void) { sweep(TSL_OP_MUL_MAT, TSL_TYPE_F16, TSL_TYPE_F32); }
static void test_mul_mat_bf16(void) { sweep(TSL_OP_MUL_MAT, TSL_TYPE_BF16, TSL_TYPE_F32); }
static void test_mul_mat_q8_0(void) { sweep(TSL_OP_MUL_MAT, TSL_TYPE_Q8_0, TSL_TYPE_F32); }
static void test_mul_mat_q4_0(void) { sweep(TSL_OP_MUL_MAT, TSL_TYPE_Q4_0, TSL_TYPE_F32); }
static void test_mul_mat_f16_f16(void) { sweep(TSL_OP_MUL_MAT, TSL_TYPE_F16, TSL_TYPE_F16); }
static void test_out_prod_f32(void) { sweep(TSL_OP_OUT_PROD, TSL_TYPE_F32, TSL_TYPE_F32); }
static void test_out_prod_f16(void) { sweep(TSL_OP_OUT_PROD, TSL_TYPE_F16, TSL_TYPE_F32); }
static void test_out_prod_bf16(void) { sweep(TSL_OP_OUT_PROD, TSL_TYPE_BF16, TSL_TYPE_F32); }
static void test_out_prod_q8_0(void) { sweep(TSL_OP_OUT_PROD, TSL_TYPE_Q8_0, TSL_TYPE_F32); }
static void test_out_prod_q4_0(void) { sweep(TSL_OP_OUT_PROD, TSL_TYPE_Q4_0, TSL_TYPE_F32); }

/* GEMM-sized products, no dimension a multiple of any tile or block size
 * (the quantized K must stay a multiple of 32). 2 and 3 threads: the
 * split-M path with its shared packed B. */
static void test_gemm_sizes(void) {
    const tsl_type types[] = {TSL_TYPE_F32, TSL_TYPE_F16, TSL_TYPE_BF16, TSL_TYPE_Q8_0, TSL_TYPE_Q4_0};
    for (int op = 0; op < 2; op++) {
        for (int ti = 0; ti < 5; ti++) {
            mm_case c;
            memset(&c, 0, sizeof c);
            c.op = op ? TSL_OP_OUT_PROD : TSL_OP_MUL_MAT;
            c.ta = types[ti];
            c.tb = TSL_TYPE_F32;
            const bool quant = tsl_type_is_quantized(c.ta);
            c.M = op && quant ? 224 : 257;
            c.N = 211;
            c.K = !op && quant ? 288 : 301;
            c.A2 = c.A3 = c.B2 = c.B3 = 1;
            c.layout = ti % LAYOUT_COUNT;
            run_case(&c, 1, 2);
        }
    }
    /* F16 x F16 at GEMM size too */
    mm_case c = {TSL_OP_MUL_MAT, TSL_TYPE_F16, TSL_TYPE_F16, 203, 97, 261, 1, 1, 1, 1, LAYOUT_TRANSPOSED};
    run_case(&c, 0, 2);
}

/* Shapes that leave one row / column / k past a tile or block boundary
 * (GEMM tiles are 32x12, 16x6 or 8x4 with 256-deep K blocks; row-dot tiles
 * 4x4), tiny M with many columns (the split-N path), many small batches
 * (whole batches per thread), and few-column products whose row and column
 * counts leave partial 4x4 dot tiles. */
static void test_edge_tiles(void) {
    const struct {
        int64_t M, N, K, A2, B2, B3;
    } shapes[] = {
        {33, 73, 257, 1, 1, 1}, {65, 97, 513, 1, 1, 1}, {31, 71, 255, 1, 1, 1}, {1, 80, 40, 1, 1, 1},
        {5, 120, 33, 1, 1, 1},  {7, 70, 20, 2, 8, 1},   {17, 45, 64, 3, 6, 2},  {64, 36, 256, 1, 1, 1},
        {13, 5, 301, 1, 1, 1},  {6, 3, 17, 1, 4, 1},    {31, 13, 255, 1, 1, 1},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        for (int layout = 0; layout < LAYOUT_COUNT; layout++) {
            mm_case c = {TSL_OP_MUL_MAT, TSL_TYPE_F32, TSL_TYPE_F32, shapes[i].M, shapes[i].N, shapes[i].K,
                         shapes[i].A2, 1, shapes[i].B2, shapes[i].B3, layout};
            run_case(&c, 0, 2);
            c.op = TSL_OP_OUT_PROD;
            run_case(&c, 0, 2);
        }
    }
    /* a quantized GEMM whose K crosses a 256-deep block by one block */
    mm_case q = {TSL_OP_MUL_MAT, TSL_TYPE_Q4_0, TSL_TYPE_F32, 45, 157, 288, 1, 1, 1, 1, LAYOUT_CONTIG};
    run_case(&q, 0, 2);
    q.ta = TSL_TYPE_Q8_0;
    q.K = 544;
    run_case(&q, 0, 2);
    /* K = 0 is not expressible for quantized types; for F32 it gives zeros */
    mm_case z = {TSL_OP_MUL_MAT, TSL_TYPE_F32, TSL_TYPE_F32, 9, 20, 0, 1, 1, 1, 1, LAYOUT_CONTIG};
    run_case(&z, 0, 2);
    /* decode's shape: one column, enough work to be split over threads (the
     * sweep's single columns are small enough to run on one), odd M */
    const tsl_type dtypes[] = {TSL_TYPE_F32, TSL_TYPE_F16, TSL_TYPE_BF16, TSL_TYPE_Q8_0, TSL_TYPE_Q4_0};
    for (int ti = 0; ti < 5; ti++) {
        mm_case v = {TSL_OP_MUL_MAT, dtypes[ti], TSL_TYPE_F32, 301, 1, 320, 1, 1, 1, 1, LAYOUT_CONTIG};
        run_case(&v, 0, 2);
    }
}

/* The kernel must refuse (FAILED with a message), never crash, on a node it
 * cannot serve; supports_op must say no beforehand. */
static void test_unsupported(void) {
    tsl_ctx_params cp = {1u << 20, false};
    tsl_context *ctx = tsl_ctx_new(cp);
    tsl_tensor *a = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 32, 8);
    tsl_tensor *b = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 32, 4);
    tsl_tensor *d = tsl_mul_mat(ctx, a, b);
    CHECK(d != NULL);
    if (d) {
        CHECK(tsl_backend_supports_op(ref_be[0], d));
        /* an I32 weight tensor slipped past the shape rules */
        a->type = TSL_TYPE_I32;
        CHECK(!tsl_backend_supports_op(ref_be[0], d));
        tsl_graph *g = tsl_graph_build(ctx, &d, 1);
        tsl_error err;
        tsl_error_clear(&err);
        CHECK(g && ref_compute_status(REF_NB - 1, g, &err) == TSL_FAILED);
        CHECK(err.status == TSL_FAILED && strcmp(err.op, "MUL_MAT") == 0);
        a->type = TSL_TYPE_F32;
    }
    tsl_ctx_free(ctx);
}

/* cpu_gemm_f32, the plain entry point of cpu.h, with padded leading
 * dimensions, on one thread (it needs no pool then). */
static void test_gemm_f32_direct(void) {
    if (ref_vk) {
        printf("  (cpu_gemm_f32 is the CPU's own entry point: checked in the CPU runs)\n");
        return;
    }
    const int64_t M = 70, N = 53, K = 300;
    const size_t lda = K + 3, ldb = K + 5, ldc = M + 2;
    float *A = malloc(sizeof(float) * lda * M), *B = malloc(sizeof(float) * ldb * N);
    float *C = malloc(sizeof(float) * ldc * N);
    fill_floats(A, (int64_t)(lda * M));
    fill_floats(B, (int64_t)(ldb * N));
    for (size_t i = 0; i < ldc * N; i++) C[i] = 12345.0f; /* padding must stay */
    size_t ws = cpu_gemm_f32_wsize(M, N, K, 1);
    void *w = aligned_alloc(64, (ws + 63) / 64 * 64 + 64);
    _Atomic int fail = 0;
    char msg[256] = "";
    cpu_params p = {0, 1, w, ws, NULL, &fail, msg};
    cpu_gemm_f32(&p, M, N, K, A, lda, B, ldb, C, ldc);
    double worst = 0;
    for (int64_t n = 0; n < N; n++) {
        for (int64_t m = 0; m < M; m++) {
            double s = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                s += (double)A[m * lda + k] * B[n * ldb + k];
                mag += fabs((double)A[m * lda + k] * B[n * ldb + k]);
            }
            double e = fabs(C[n * ldc + m] - s) / mag;
            if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
        }
        CHECK(C[n * ldc + M] == 12345.0f && C[n * ldc + M + 1] == 12345.0f);
    }
    CHECKF(worst <= 1e-5, "worst rel err %.3g", worst);
    CHECK(atomic_load(&fail) == 0);
    free(A), free(B), free(C), free(w);
}

int main(void) {
    if (!ref_setup()) return 1;
    printf("mul_mat / out_prod sweeps, %s\n", ref_mode());
    RUN(test_mul_mat_f32);
    RUN(test_mul_mat_f16);
    RUN(test_mul_mat_bf16);
    RUN(test_mul_mat_q8_0);
    RUN(test_mul_mat_q4_0);
    RUN(test_mul_mat_f16_f16);
    RUN(test_out_prod_f32);
    RUN(test_out_prod_f16);
    RUN(test_out_prod_bf16);
    RUN(test_out_prod_q8_0);
    RUN(test_out_prod_q4_0);
    RUN(test_gemm_sizes);
    RUN(test_edge_tiles);
    RUN(test_unsupported);
    RUN(test_gemm_f32_direct);
    printf("%d case-backend combinations checked", g_cases);
    if (g_not_on_vk) printf(", %d not on vulkan (ref.h: REF_VK_GAPS)", g_not_on_vk);
    printf("\n");
    ref_teardown();
    return test_summary();
}
