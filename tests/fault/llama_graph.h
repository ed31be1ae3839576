/*
 * llama_graph.h - a small llama-shaped graph for the fault tests: token
 * embeddings (get_rows), then per layer rms_norm, Q/K/V projections, rope,
 * masked soft_max attention, output projection and a swiglu FFN, then the
 * output norm and the vocabulary projection. Weight matrices are Q8_0 (the
 * vocabulary projection F32), norms F32, all from a seeded generator, so two
 * models made with the same seed compute the same bytes.
 *
 * Memory is laid out as an application would: the attention weights and the
 * embeddings in one persistent buffer restored from a host image
 * (tsl_buffer_set_host_source), the FFN and output weights in another
 * persistent buffer with no source (the backend keeps a host copy), the
 * inputs (tokens, positions, mask) in a plain buffer, and the activations
 * placed by a graph allocator. Each fault test then injects into this graph
 * and compares the logits with a clean run bit for bit.
 */
#ifndef TSL_TEST_LLAMA_GRAPH_H
#define TSL_TEST_LLAMA_GRAPH_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensile/backend.h"
#include "test.h"

enum { LG_EMBD = 64, LG_HEAD = 4, LG_HDIM = 16, LG_FF = 128, LG_VOCAB = 96, LG_TOK = 8, LG_LAYERS = 2 };

typedef struct lg_model {
    tsl_backend *be;
    tsl_context *wctx_a, *wctx_b, *ictx, *gctx;
    tsl_buffer *wbuf_a, *wbuf_b, *ibuf;
    tsl_gallocr *ga;
    tsl_graph *g;
    tsl_tensor *tokens, *pos, *mask, *out;
    void *image_a; /* host source of wbuf_a */
    size_t image_a_size;
} lg_model;

static inline tsl_tensor *lg_weight(tsl_context *ctx, tsl_type type, int64_t ne0, int64_t ne1, const char *name) {
    tsl_tensor *t = ne1 > 0 ? tsl_new_tensor_2d(ctx, type, ne0, ne1) : tsl_new_tensor_1d(ctx, type, ne0);
    return tsl_tensor_set_name(t, name);
}

/* Seeded values for every tensor of ctx, quantized to its type. */
static inline bool lg_fill_weights(tsl_context *ctx, unsigned long long seed) {
    unsigned long long s = seed;
    for (tsl_tensor *t = tsl_ctx_first_tensor(ctx); t; t = tsl_ctx_next_tensor(ctx, t)) {
        int64_t n = tsl_nelements(t);
        float *f = malloc((size_t)n * sizeof *f);
        void *q = malloc(tsl_nbytes(t));
        if (!f || !q) {
            free(f);
            free(q);
            return false;
        }
        bool norm = strstr(t->name, "norm") != NULL;
        for (int64_t i = 0; i < n; i++) f[i] = norm ? test_rand_f(&s, 0.8f, 1.2f) : test_rand_f(&s, -0.25f, 0.25f);
        size_t nb = tsl_quantize(t->type, f, q, n);
        tsl_status st = nb == tsl_nbytes(t) ? tsl_tensor_set(t, q, 0, nb, NULL) : TSL_FAILED;
        free(f);
        free(q);
        if (st != TSL_SUCCESS) return false;
    }
    return true;
}

/* Inputs: token ids, positions 0..n-1, a causal mask. */
static inline tsl_status lg_set_inputs(lg_model *m, tsl_error *err) {
    int32_t tok[LG_TOK], pos[LG_TOK];
    float mask[LG_TOK * LG_TOK];
    for (int i = 0; i < LG_TOK; i++) {
        tok[i] = (i * 37 + 11) % LG_VOCAB;
        pos[i] = i;
        for (int k = 0; k < LG_TOK; k++) mask[i * LG_TOK + k] = k <= i ? 0.0f : -INFINITY;
    }
    tsl_status s = tsl_tensor_set(m->tokens, tok, 0, sizeof tok, err);
    if (s == TSL_SUCCESS) s = tsl_tensor_set(m->pos, pos, 0, sizeof pos, err);
    if (s == TSL_SUCCESS) s = tsl_tensor_set(m->mask, mask, 0, sizeof mask, err);
    return s;
}

static inline tsl_tensor *lg_name(tsl_tensor *t, const char *fmt, int il) {
    return t ? tsl_tensor_format_name(t, fmt, il) : NULL;
}

/* The graph (in m->gctx) reading the weights of wa/wb and the inputs. */
static inline tsl_tensor *lg_forward(lg_model *m) {
    tsl_context *c = m->gctx;
    char name[64];
#define W(ctx, fmt, il) (snprintf(name, sizeof name, fmt, il), tsl_ctx_get_tensor(ctx, name))
    tsl_tensor *x = tsl_tensor_set_name(tsl_get_rows(c, tsl_ctx_get_tensor(m->wctx_a, "token_embd.weight"), m->tokens),
                                        "inp_embd");
    const float scale = 1.0f / sqrtf((float)LG_HDIM);
    tsl_rope_params rp = tsl_rope_default(LG_HDIM);
    for (int il = 0; il < LG_LAYERS; il++) {
        tsl_tensor *h = lg_name(tsl_rms_norm(c, x, 1e-5f), "norm-%d", il);
        h = lg_name(tsl_mul(c, h, W(m->wctx_a, "blk.%d.attn_norm.weight", il)), "attn_norm-%d", il);
        tsl_tensor *q = lg_name(tsl_mul_mat(c, W(m->wctx_a, "blk.%d.attn_q.weight", il), h), "Qcur-%d", il);
        tsl_tensor *k = lg_name(tsl_mul_mat(c, W(m->wctx_a, "blk.%d.attn_k.weight", il), h), "Kcur-%d", il);
        tsl_tensor *v = lg_name(tsl_mul_mat(c, W(m->wctx_a, "blk.%d.attn_v.weight", il), h), "Vcur-%d", il);
        q = lg_name(tsl_rope(c, tsl_reshape_3d(c, q, LG_HDIM, LG_HEAD, LG_TOK), m->pos, NULL, &rp), "Qrope-%d", il);
        k = lg_name(tsl_rope(c, tsl_reshape_3d(c, k, LG_HDIM, LG_HEAD, LG_TOK), m->pos, NULL, &rp), "Krope-%d", il);
        v = tsl_reshape_3d(c, v, LG_HDIM, LG_HEAD, LG_TOK);
        tsl_tensor *qp = lg_name(tsl_cont(c, tsl_permute(c, q, 0, 2, 1, 3)), "q-%d", il);      /* [hd, tok, head] */
        tsl_tensor *kp = lg_name(tsl_cont(c, tsl_permute(c, k, 0, 2, 1, 3)), "k-%d", il);      /* [hd, kv, head] */
        tsl_tensor *vt = lg_name(tsl_cont(c, tsl_permute(c, v, 1, 2, 0, 3)), "vT-%d", il);     /* [kv, hd, head] */
        tsl_tensor *kq = lg_name(tsl_mul_mat(c, kp, qp), "kq-%d", il);                         /* [kv, tok, head] */
        kq = lg_name(tsl_soft_max(c, kq, m->mask, scale), "kq_soft_max-%d", il);
        tsl_tensor *kqv = lg_name(tsl_mul_mat(c, vt, kq), "kqv-%d", il);                        /* [hd, tok, head] */
        tsl_tensor *merged = tsl_cont(c, tsl_permute(c, kqv, 0, 2, 1, 3));                      /* [hd, head, tok] */
        merged = lg_name(tsl_reshape_2d(c, merged, LG_EMBD, LG_TOK), "kqv_merged-%d", il);
        tsl_tensor *o = lg_name(tsl_mul_mat(c, W(m->wctx_a, "blk.%d.attn_output.weight", il), merged), "attn_out-%d", il);
        x = lg_name(tsl_add(c, x, o), "ffn_inp-%d", il);
        h = lg_name(tsl_rms_norm(c, x, 1e-5f), "ffn_rms-%d", il);
        h = lg_name(tsl_mul(c, h, W(m->wctx_b, "blk.%d.ffn_norm.weight", il)), "ffn_norm-%d", il);
        tsl_tensor *gt = lg_name(tsl_mul_mat(c, W(m->wctx_b, "blk.%d.ffn_gate.weight", il), h), "ffn_gate-%d", il);
        tsl_tensor *up = lg_name(tsl_mul_mat(c, W(m->wctx_b, "blk.%d.ffn_up.weight", il), h), "ffn_up-%d", il);
        tsl_tensor *sw = lg_name(tsl_swiglu(c, gt, up), "ffn_swiglu-%d", il);
        tsl_tensor *dn = lg_name(tsl_mul_mat(c, W(m->wctx_b, "blk.%d.ffn_down.weight", il), sw), "ffn_out-%d", il);
        x = lg_name(tsl_add(c, x, dn), "l_out-%d", il);
    }
    tsl_tensor *h = tsl_tensor_set_name(tsl_rms_norm(c, x, 1e-5f), "result_rms");
    h = tsl_tensor_set_name(tsl_mul(c, h, tsl_ctx_get_tensor(m->wctx_b, "output_norm.weight")), "result_norm");
    return tsl_tensor_set_name(tsl_mul_mat(c, tsl_ctx_get_tensor(m->wctx_b, "output.weight"), h), "result_output");
#undef W
}

static inline void lg_free(lg_model *m) {
    tsl_gallocr_free(m->ga);
    tsl_buffer_free(m->wbuf_a);
    tsl_buffer_free(m->wbuf_b);
    tsl_buffer_free(m->ibuf);
    tsl_ctx_free(m->gctx);
    tsl_ctx_free(m->ictx);
    tsl_ctx_free(m->wctx_a);
    tsl_ctx_free(m->wctx_b);
    free(m->image_a);
    memset(m, 0, sizeof *m);
}

/* Make the model on be (weights from seed, inputs set, graph allocated).
 * False (with a message on stderr) if anything fails. */
static inline bool lg_init(lg_model *m, tsl_backend *be, unsigned long long seed) {
    memset(m, 0, sizeof *m);
    m->be = be;
    tsl_ctx_params mp = {.mem_size = 1 << 20, .no_alloc = true};
    m->wctx_a = tsl_ctx_new(mp);
    m->wctx_b = tsl_ctx_new(mp);
    m->ictx = tsl_ctx_new(mp);
    m->gctx = tsl_ctx_new(mp);
    if (!m->wctx_a || !m->wctx_b || !m->ictx || !m->gctx) goto fail;
    char name[64];
    lg_weight(m->wctx_a, TSL_TYPE_Q8_0, LG_EMBD, LG_VOCAB, "token_embd.weight");
    for (int il = 0; il < LG_LAYERS; il++) {
        static const char *att[] = {"attn_q", "attn_k", "attn_v", "attn_output"};
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", il);
        lg_weight(m->wctx_a, TSL_TYPE_F32, LG_EMBD, 0, name);
        for (int k = 0; k < 4; k++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", il, att[k]);
            lg_weight(m->wctx_a, TSL_TYPE_Q8_0, LG_EMBD, LG_EMBD, name);
        }
        snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", il);
        lg_weight(m->wctx_b, TSL_TYPE_F32, LG_EMBD, 0, name);
        snprintf(name, sizeof name, "blk.%d.ffn_gate.weight", il);
        lg_weight(m->wctx_b, TSL_TYPE_Q8_0, LG_EMBD, LG_FF, name);
        snprintf(name, sizeof name, "blk.%d.ffn_up.weight", il);
        lg_weight(m->wctx_b, TSL_TYPE_Q8_0, LG_EMBD, LG_FF, name);
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", il);
        lg_weight(m->wctx_b, TSL_TYPE_Q8_0, LG_FF, LG_EMBD, name);
    }
    lg_weight(m->wctx_b, TSL_TYPE_F32, LG_EMBD, 0, "output_norm.weight");
    lg_weight(m->wctx_b, TSL_TYPE_F32, LG_EMBD, LG_VOCAB, "output.weight");
    m->tokens = tsl_tensor_set_name(tsl_new_tensor_1d(m->ictx, TSL_TYPE_I32, LG_TOK), "inp_tokens");
    m->pos = tsl_tensor_set_name(tsl_new_tensor_1d(m->ictx, TSL_TYPE_I32, LG_TOK), "inp_pos");
    m->mask = tsl_tensor_set_name(tsl_new_tensor_2d(m->ictx, TSL_TYPE_F32, LG_TOK, LG_TOK), "kq_mask");
    tsl_error err;
    m->wbuf_a = tsl_buffer_alloc_ctx(be, m->wctx_a, &err);
    m->wbuf_b = m->wbuf_a ? tsl_buffer_alloc_ctx(be, m->wctx_b, &err) : NULL;
    m->ibuf = m->wbuf_b ? tsl_buffer_alloc_ctx(be, m->ictx, &err) : NULL;
    if (!m->ibuf) goto fail_err;
    if (!lg_fill_weights(m->wctx_a, seed) || !lg_fill_weights(m->wctx_b, seed * 31 + 7)) goto fail;
    /* buffer A is restored from an image of it; buffer B from the copy the
     * backend keeps (taken now, kept current by tensor_set) */
    m->image_a_size = tsl_buffer_size(m->wbuf_a);
    m->image_a = malloc(m->image_a_size);
    if (!m->image_a) goto fail;
    memcpy(m->image_a, tsl_buffer_host_ptr(m->wbuf_a), m->image_a_size);
    tsl_buffer_set_host_source(m->wbuf_a, m->image_a, m->image_a_size);
    tsl_buffer_set_persistent(m->wbuf_b, true);
    if (lg_set_inputs(m, &err) != TSL_SUCCESS) goto fail_err;
    m->out = lg_forward(m);
    if (!m->out) {
        fprintf(stderr, "lg_init: graph build failed: %s\n", tsl_ctx_error(m->gctx));
        goto fail;
    }
    m->g = tsl_graph_build(m->gctx, &m->out, 1);
    m->ga = tsl_gallocr_new(be);
    if (!m->g || !m->ga) goto fail;
    if (tsl_gallocr_alloc_graph(m->ga, m->g, &err) != TSL_SUCCESS) goto fail_err;
    return true;
fail_err : {
    char line[512];
    tsl_error_format(&err, line, sizeof line);
    fprintf(stderr, "lg_init: %s\n", line);
}
fail:
    lg_free(m);
    return false;
}

static inline size_t lg_out_bytes(void) { return (size_t)LG_VOCAB * LG_TOK * sizeof(float); }

/* Logits into out (lg_out_bytes() bytes). */
static inline tsl_status lg_read(const lg_model *m, float *out, tsl_error *err) {
    return tsl_tensor_get(m->out, out, 0, lg_out_bytes(), err);
}

/* Fill the logits with a sentinel (0x7f7f7f7f, a large finite float) to see
 * whether a compute wrote them. */
static inline tsl_status lg_poison(lg_model *m, tsl_error *err) {
    size_t n = lg_out_bytes();
    unsigned char *p = malloc(n);
    if (!p) return TSL_ALLOC_FAILED;
    memset(p, 0x7f, n);
    tsl_status s = tsl_tensor_set(m->out, p, 0, n, err);
    free(p);
    return s;
}

static inline bool lg_is_poisoned(const lg_model *m) {
    size_t n = lg_out_bytes();
    unsigned char *p = malloc(n);
    bool ok = p && lg_read(m, (float *)p, NULL) == TSL_SUCCESS;
    for (size_t i = 0; ok && i < n; i++) ok = p[i] == 0x7f;
    free(p);
    return ok;
}

/* Index of the graph node named name, or -1. */
static inline int lg_node(const lg_model *m, const char *name) {
    return tsl_graph_node_index(m->g, tsl_ctx_get_tensor(m->gctx, name));
}

/* The logits of a clean run of the model with this seed, on a fresh backend
 * of n_threads threads. False if that run fails. */
static inline bool lg_reference(unsigned long long seed, int n_threads, float *out) {
    tsl_error err;
    tsl_backend *be = tsl_backend_cpu_new(n_threads, &err);
    if (!be) return false;
    lg_model m;
    bool ok = lg_init(&m, be, seed);
    if (ok) ok = tsl_backend_graph_compute(be, m.g, &err) == TSL_SUCCESS && lg_read(&m, out, &err) == TSL_SUCCESS;
    if (ok)
        for (int i = 0; i < LG_VOCAB * LG_TOK && ok; i++) ok = isfinite(out[i]);
    if (m.be) lg_free(&m);
    tsl_backend_free(be);
    return ok;
}

/* The formatted line of a record, for CHECK_STR_CONTAINS. */
static inline const char *lg_line(const tsl_error *e) {
    static char line[1024];
    tsl_error_format(e, line, sizeof line);
    return line;
}

#endif
