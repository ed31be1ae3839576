/*
 * demo.c - `tensile demo`: the main job on the bundled default.
 *
 * Until models land, the demo builds one llama-shaped transformer block
 * (RMS norm, attention with RoPE and a causal mask, SwiGLU feed-forward) with
 * seeded random weights in Q8_0, places its activations with the graph
 * allocator, computes it on the CPU backend, and prints a checksum of the
 * result, the timing and the memory the allocator needed. The same seed gives
 * the same checksum on every machine up to float reassociation.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "tensile/backend.h"

enum { D_EMBD = 512, D_HEAD = 64, D_NHEAD = 8, D_FF = 1408, D_TOK = 64 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static unsigned long long rng = 0x9e3779b97f4a7c15ULL;
static float frand(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (float)(((rng * 2685821657736338717ULL) >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* A weight of `type` filled with values in [-scale, scale). */
static tsl_tensor *weight(tsl_context *ctx, tsl_type type, int64_t k, int64_t m, float scale, const char *name) {
    tsl_tensor *w = tsl_new_tensor_2d(ctx, type, k, m);
    if (!w) return NULL;
    float *tmp = malloc(sizeof(float) * (size_t)(k * m));
    if (!tmp) return NULL;
    for (int64_t i = 0; i < k * m; i++) tmp[i] = frand() * scale;
    tsl_quantize(type, tmp, w->data, k * m);
    free(tmp);
    return tsl_tensor_set_name(w, name);
}

static int usage(void) {
    fprintf(stderr, "usage: tensile demo [--threads N]\n");
    return 2;
}

int cmd_demo(int argc, char **argv) {
    int n_threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else return usage();
    }
    int rc = 1;
    tsl_error err;
    tsl_error_clear(&err);
    tsl_backend *cpu = tsl_backend_cpu_new(n_threads, &err);
    tsl_context *wctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 16u << 20, .no_alloc = false});
    tsl_context *gctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 4u << 20, .no_alloc = true});
    tsl_gallocr *ga = cpu ? tsl_gallocr_new(cpu) : NULL;
    if (!cpu || !wctx || !gctx || !ga) {
        char line[512];
        tsl_error_format(&err, line, sizeof line);
        fprintf(stderr, "tensile demo: could not start: %s\n", line);
        goto out;
    }

    /* weights and inputs */
    const float ws = 1.0f / sqrtf((float)D_EMBD);
    tsl_tensor *norm1 = tsl_new_tensor_1d(wctx, TSL_TYPE_F32, D_EMBD);
    tsl_tensor *norm2 = tsl_new_tensor_1d(wctx, TSL_TYPE_F32, D_EMBD);
    for (int i = 0; norm1 && norm2 && i < D_EMBD; i++) {
        tsl_set_f32_1d(norm1, i, 1.0f + 0.1f * frand());
        tsl_set_f32_1d(norm2, i, 1.0f + 0.1f * frand());
    }
    tsl_tensor *wq = weight(wctx, TSL_TYPE_Q8_0, D_EMBD, D_EMBD, ws, "attn_q");
    tsl_tensor *wk = weight(wctx, TSL_TYPE_Q8_0, D_EMBD, D_EMBD, ws, "attn_k");
    tsl_tensor *wv = weight(wctx, TSL_TYPE_Q8_0, D_EMBD, D_EMBD, ws, "attn_v");
    tsl_tensor *wo = weight(wctx, TSL_TYPE_Q8_0, D_EMBD, D_EMBD, ws, "attn_output");
    tsl_tensor *wg = weight(wctx, TSL_TYPE_Q4_0, D_EMBD, D_FF, ws, "ffn_gate");
    tsl_tensor *wu = weight(wctx, TSL_TYPE_Q4_0, D_EMBD, D_FF, ws, "ffn_up");
    tsl_tensor *wd = weight(wctx, TSL_TYPE_Q4_0, D_FF, D_EMBD, 1.0f / sqrtf((float)D_FF), "ffn_down");
    tsl_tensor *x = tsl_new_tensor_2d(wctx, TSL_TYPE_F32, D_EMBD, D_TOK);
    tsl_tensor *pos = tsl_new_tensor_1d(wctx, TSL_TYPE_I32, D_TOK);
    tsl_tensor *mask = tsl_new_tensor_2d(wctx, TSL_TYPE_F32, D_TOK, D_TOK);
    if (!x || !pos || !mask) goto build_failed;
    for (int64_t i = 0; i < D_EMBD * D_TOK; i++) ((float *)x->data)[i] = frand();
    for (int i = 0; i < D_TOK; i++) ((int32_t *)pos->data)[i] = i;
    for (int i = 0; i < D_TOK; i++)
        for (int j = 0; j < D_TOK; j++) ((float *)mask->data)[i * D_TOK + j] = j <= i ? 0.0f : -INFINITY;

    /* the block */
    tsl_context *c = gctx;
    tsl_rope_params rp = tsl_rope_default(D_HEAD);
    tsl_tensor *h = tsl_mul(c, tsl_rms_norm(c, x, 1e-5f), norm1);
    tsl_tensor *q = tsl_rope(c, tsl_reshape_3d(c, tsl_mul_mat(c, wq, h), D_HEAD, D_NHEAD, D_TOK), pos, NULL, &rp);
    tsl_tensor *k = tsl_rope(c, tsl_reshape_3d(c, tsl_mul_mat(c, wk, h), D_HEAD, D_NHEAD, D_TOK), pos, NULL, &rp);
    tsl_tensor *v = tsl_reshape_3d(c, tsl_mul_mat(c, wv, h), D_HEAD, D_NHEAD, D_TOK);
    tsl_tensor *qp = tsl_permute(c, q, 0, 2, 1, 3);                 /* [head, tok, nhead] */
    tsl_tensor *kp = tsl_permute(c, k, 0, 2, 1, 3);
    tsl_tensor *vt = tsl_cont(c, tsl_permute(c, v, 1, 2, 0, 3));    /* [tok, head, nhead] */
    tsl_tensor *kq = tsl_soft_max(c, tsl_mul_mat(c, tsl_cont(c, kp), qp), mask, 1.0f / sqrtf((float)D_HEAD));
    tsl_tensor *kqv = tsl_mul_mat(c, vt, kq);                       /* [head, tok, nhead] */
    tsl_tensor *att = tsl_cont(c, tsl_permute(c, kqv, 0, 2, 1, 3)); /* [head, nhead, tok] */
    tsl_tensor *x1 = tsl_add(c, x, tsl_mul_mat(c, wo, tsl_reshape_2d(c, att, D_EMBD, D_TOK)));
    tsl_tensor *h2 = tsl_mul(c, tsl_rms_norm(c, x1, 1e-5f), norm2);
    tsl_tensor *ff = tsl_mul_mat(c, wd, tsl_swiglu(c, tsl_mul_mat(c, wg, h2), tsl_mul_mat(c, wu, h2)));
    tsl_tensor *out = tsl_add(c, x1, ff);
    tsl_graph *g = out ? tsl_graph_build(c, &out, 1) : NULL;
    if (!g) goto build_failed;

    if (tsl_gallocr_alloc_graph(ga, g, &err) != TSL_SUCCESS) goto compute_failed;
    /* one warm-up, then time the best of five */
    double best = 1e30;
    for (int it = 0; it < 6; it++) {
        double t0 = now_s();
        if (tsl_backend_graph_compute(cpu, g, &err) != TSL_SUCCESS) goto compute_failed;
        double dt = now_s() - t0;
        if (it > 0 && dt < best) best = dt;
    }
    float *o = malloc(sizeof(float) * D_EMBD * D_TOK);
    if (!o) goto out;
    if (tsl_tensor_get(out, o, 0, sizeof(float) * D_EMBD * D_TOK, &err) != TSL_SUCCESS) {
        free(o);
        goto compute_failed;
    }
    double sum = 0, sumsq = 0;
    for (int i = 0; i < D_EMBD * D_TOK; i++) {
        sum += o[i];
        sumsq += (double)o[i] * o[i];
    }
    printf("tensile %s demo: one llama-shaped block (embd %d, %d heads, ffn %d, %d tokens; Q8_0 attention, Q4_0 "
           "ffn weights)\n",
           TSL_VERSION_STRING, D_EMBD, D_NHEAD, D_FF, D_TOK);
    printf("backend  %s: %s\n", tsl_backend_name(cpu), tsl_backend_device(cpu));
    printf("graph    %d nodes, %.1f MFLOP\n", g->n_nodes, tsl_graph_flops(g) * 1e-6);
    printf("memory   activations %.2f MiB with reuse (%.2f MiB without)\n", tsl_gallocr_peak(ga) / 1048576.0,
           tsl_gallocr_total(ga) / 1048576.0);
    printf("result   out[0, 0..3] = %.5f %.5f %.5f %.5f   mean %.6f   rms %.6f\n", o[0], o[1], o[2], o[3],
           sum / (D_EMBD * D_TOK), sqrt(sumsq / (D_EMBD * D_TOK)));
    printf("timing   %.3f ms per compute (best of 5), %.2f GFLOP/s\n", best * 1e3, tsl_graph_flops(g) / best * 1e-9);
    free(o);
    rc = 0;
    goto out;

build_failed:
    fprintf(stderr, "tensile demo: graph build failed: %s\n", tsl_ctx_error(gctx) ? tsl_ctx_error(gctx)
                                                          : tsl_ctx_error(wctx) ? tsl_ctx_error(wctx) : "unknown");
    goto out;
compute_failed: {
    char line[512];
    tsl_error_format(&err, line, sizeof line);
    fprintf(stderr, "tensile demo: %s\n", line);
}
out:
    if (ga) tsl_gallocr_free(ga);
    tsl_ctx_free(gctx);
    tsl_ctx_free(wctx);
    tsl_backend_free(cpu);
    return rc;
}
