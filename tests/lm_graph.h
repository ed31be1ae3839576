/*
 * lm_graph.h - a llama-shaped forward graph for the graph-allocator tests
 * (tests/core/test_alloc.c plans it; tests/cpu/test_alloc_compute.c computes
 * it with and without the allocator).
 */
#ifndef TSL_TEST_LM_GRAPH_H
#define TSL_TEST_LM_GRAPH_H

#include <stdint.h>

#include "core/core.h"
#include "tensile/backend.h"

typedef struct lm_dims {
    int n_embd, n_head, n_kv_head, n_ff, n_tokens, vocab, n_layer;
} lm_dims;

typedef struct lm_layer {
    tsl_tensor *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *gate, *up, *down;
} lm_layer;

typedef struct lm_model {
    lm_dims d;
    tsl_context *ctx; /* with data */
    tsl_tensor *tok_embd, *out_norm, *output;
    lm_layer l[8];
} lm_model;

typedef struct lm_graph {
    tsl_context *ctx;
    tsl_tensor *tokens, *pos, *mask, *logits;
    tsl_graph *g;
} lm_graph;

static tsl_tensor *lm_weight(lm_model *m, int64_t ne0, int64_t ne1, const char *name, int il) {
    tsl_tensor *t = ne1 ? tsl_new_tensor_2d(m->ctx, TSL_TYPE_F32, ne0, ne1) : tsl_new_tensor_1d(m->ctx, TSL_TYPE_F32, ne0);
    if (il >= 0) tsl_tensor_format_name(t, "blk.%d.%s", il, name);
    else tsl_tensor_set_name(t, name);
    return t;
}

static bool lm_model_init(lm_model *m, lm_dims d) {
    memset(m, 0, sizeof *m);
    m->d = d;
    int hd = d.n_embd / d.n_head, n_kv = hd * d.n_kv_head;
    size_t n = (size_t)d.vocab * d.n_embd * 2 + (size_t)d.n_embd;
    n += (size_t)d.n_layer * ((size_t)d.n_embd * (2 * d.n_embd + 2 * n_kv + 3 * d.n_ff + 2));
    tsl_ctx_params p = {n * sizeof(float) + 64 * 1024 + (size_t)d.n_layer * 16 * 1024, false};
    m->ctx = tsl_ctx_new(p);
    if (!m->ctx) return false;
    m->tok_embd = lm_weight(m, d.n_embd, d.vocab, "token_embd", -1);
    for (int il = 0; il < d.n_layer; il++) {
        lm_layer *l = &m->l[il];
        l->attn_norm = lm_weight(m, d.n_embd, 0, "attn_norm", il);
        l->wq = lm_weight(m, d.n_embd, d.n_embd, "attn_q", il);
        l->wk = lm_weight(m, d.n_embd, n_kv, "attn_k", il);
        l->wv = lm_weight(m, d.n_embd, n_kv, "attn_v", il);
        l->wo = lm_weight(m, d.n_embd, d.n_embd, "attn_output", il);
        l->ffn_norm = lm_weight(m, d.n_embd, 0, "ffn_norm", il);
        l->gate = lm_weight(m, d.n_embd, d.n_ff, "ffn_gate", il);
        l->up = lm_weight(m, d.n_embd, d.n_ff, "ffn_up", il);
        l->down = lm_weight(m, d.n_ff, d.n_embd, "ffn_down", il);
    }
    m->out_norm = lm_weight(m, d.n_embd, 0, "output_norm", -1);
    m->output = lm_weight(m, d.n_embd, d.vocab, "output", -1);
    if (tsl_ctx_error(m->ctx)) fprintf(stderr, "model: %s\n", tsl_ctx_error(m->ctx));
    return tsl_ctx_error(m->ctx) == NULL;
}

/* The forward pass of a llama block stack, as llama.cpp builds it. K and V
 * have n_kv_head heads and are broadcast over the query heads by mul_mat
 * (grouped-query attention without a repeat op). */
static bool lm_graph_build(lm_graph *G, const lm_model *m, tsl_ctx_params p) {
    const lm_dims d = m->d;
    const int hd = d.n_embd / d.n_head, T = d.n_tokens;
    const float eps = 1e-5f;
    memset(G, 0, sizeof *G);
    G->ctx = tsl_ctx_new(p);
    if (!G->ctx) return false;
    tsl_context *c = G->ctx;
    G->tokens = tsl_tensor_set_name(tsl_new_tensor_1d(c, TSL_TYPE_I32, T), "tokens");
    G->pos = tsl_tensor_set_name(tsl_new_tensor_1d(c, TSL_TYPE_I32, T), "pos");
    G->mask = tsl_tensor_set_name(tsl_new_tensor_2d(c, TSL_TYPE_F32, T, T), "kq_mask");
    if (!G->tokens || !G->pos || !G->mask) return false;
    G->tokens->flags |= TSL_FLAG_INPUT;
    G->pos->flags |= TSL_FLAG_INPUT;
    G->mask->flags |= TSL_FLAG_INPUT;
    tsl_rope_params rp = tsl_rope_default(hd);

    tsl_tensor *inpL = tsl_get_rows(c, m->tok_embd, G->tokens);
    for (int il = 0; il < d.n_layer; il++) {
        const lm_layer *l = &m->l[il];
        tsl_tensor *cur = tsl_mul(c, tsl_rms_norm(c, inpL, eps), l->attn_norm);
        tsl_tensor *q = tsl_mul_mat(c, l->wq, cur);
        tsl_tensor *k = tsl_mul_mat(c, l->wk, cur);
        tsl_tensor *v = tsl_mul_mat(c, l->wv, cur);
        q = tsl_rope(c, tsl_reshape_3d(c, q, hd, d.n_head, T), G->pos, NULL, &rp);
        k = tsl_rope(c, tsl_reshape_3d(c, k, hd, d.n_kv_head, T), G->pos, NULL, &rp);
        tsl_tensor *Q = tsl_permute(c, q, 0, 2, 1, 3);                 /* [hd, T, n_head] */
        tsl_tensor *K = tsl_permute(c, k, 0, 2, 1, 3);                 /* [hd, T, n_kv_head] */
        tsl_tensor *kq = tsl_mul_mat(c, K, Q);                         /* [T, T, n_head] */
        kq = tsl_soft_max(c, kq, G->mask, 1.0f / sqrtf((float)hd));
        tsl_tensor *vT = tsl_cont(c, tsl_permute(c, tsl_reshape_3d(c, v, hd, d.n_kv_head, T), 1, 2, 0, 3)); /* [T, hd, n_kv] */
        tsl_tensor *kqv = tsl_mul_mat(c, vT, kq);                      /* [hd, T, n_head] */
        cur = tsl_cont(c, tsl_permute(c, kqv, 0, 2, 1, 3));            /* [hd, n_head, T] */
        cur = tsl_reshape_2d(c, cur, d.n_embd, T);
        cur = tsl_mul_mat(c, l->wo, cur);
        tsl_tensor *ffn_inp = tsl_add(c, cur, inpL);
        cur = tsl_mul(c, tsl_rms_norm(c, ffn_inp, eps), l->ffn_norm);
        tsl_tensor *gate = tsl_mul_mat(c, l->gate, cur);
        tsl_tensor *up = tsl_mul_mat(c, l->up, cur);
        cur = tsl_mul_mat(c, l->down, tsl_swiglu(c, gate, up));
        inpL = tsl_add(c, cur, ffn_inp);
    }
    tsl_tensor *cur = tsl_mul(c, tsl_rms_norm(c, inpL, eps), m->out_norm);
    G->logits = tsl_tensor_set_name(tsl_mul_mat(c, m->output, cur), "logits");
    if (!G->logits) {
        fprintf(stderr, "graph: %s\n", tsl_ctx_error(c));
        return false;
    }
    G->g = tsl_graph_build(c, &G->logits, 1);
    if (!G->g) fprintf(stderr, "graph: %s\n", tsl_ctx_error(c));
    return G->g != NULL;
}

#endif /* TSL_TEST_LM_GRAPH_H */
