/*
 * arch.c - the forward graphs of the llama family: llama, qwen2, qwen3.
 *
 * One builder serves the three architectures, since they differ in a few
 * switches rather than in structure (pre-norm blocks of RMS norm, attention
 * with rotary positions and grouped-query heads, SwiGLU feed-forward):
 *
 *   llama  NORMAL rope (GGUF stores Q/K rows pre-permuted for it), optional
 *          q/k/v biases, llama3's frequency factors (rope_freqs.weight)
 *   qwen2  NEOX rope, q/k/v biases
 *   qwen3  NEOX rope, an RMS norm over each head of q and k before the rope,
 *          head size from attention.key_length (not n_embd / n_head)
 *
 * A batch of n tokens at positions [pos0, pos0 + n) is one graph whatever n
 * is: prefill and single-token decode are the same code, so they cannot
 * drift apart (the test checks they give the same logits).
 *
 * Attention reads the cache in place (see kv.c for the layout). The new
 * keys and values are copied into the cache first; the graph's order makes
 * that happen before the reads: the copy nodes are the first outputs handed
 * to tsl_graph_build, layer by layer, so each layer's copies come before
 * anything that depends on that layer's attention. Attention spans n_kv
 * positions, which the context pads past the last token (to a multiple of
 * 256): a decoded token then changes only the mask's contents, not the
 * graph's shapes, so the memory a graph needs grows once per 256 positions
 * rather than with every token. Grouped-query attention
 * costs nothing extra: mul_mat broadcasts the n_head_kv cache heads over
 * the n_head query heads (query head h uses cache head h / (n_head /
 * n_head_kv), as llama's repeat_kv does). The causal mask is an input
 * [n_kv, n] of 0 and -inf filled by the context from the positions.
 *
 * A single token (decode) on a device whose copy of the weights holds a
 * layer's Q, K and V matrices back to back, or its gate and up matrices,
 * reads each pair or triple as one matrix (llm_layer's wqkv, ffn_gate_up):
 * one mat-vec and views of its output instead of two or three mat-vecs, so
 * three fewer kernels and barriers per layer where each costs the GPU
 * microseconds. Each output row is the same dot product either way. With
 * the Q, K and V matrices one, qwen2's three biases are one row too (bqkv,
 * copied at upload: files keep them apart), a single add the Vulkan
 * backend folds into the product's kernel: the same sums, three dispatches
 * and a level fewer a layer.
 *
 * Only the rows whose logits are wanted go through the last layer's
 * feed-forward and the output projection: for a prompt that is one token
 * in n, and the vocabulary projection is the largest matrix of a small model.
 *
 * Nodes are named after the weights they apply ("blk.3.ffn_up"), so an error
 * record names the place in the model where a compute failed.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "model/llm_impl.h"

size_t arch_graph_mem(const tsl_model *m) {
    /* ~40 tensors per layer, the graph's node and leaf arrays (doubling), slack */
    const size_t per = sizeof(tsl_tensor) + 64;
    const size_t n = (size_t)m->hp.n_layer * 48 + 64;
    return n * per + n * 4 * sizeof(void *) * 4 + (256u << 10);
}

/* x * w over rows, the norm every block starts with. */
static tsl_tensor *arch_norm(tsl_context *ctx, tsl_tensor *x, tsl_tensor *w, float eps, const char *name, int il) {
    tsl_tensor *t = tsl_mul(ctx, tsl_rms_norm(ctx, x, eps), w);
    return il >= 0 ? tsl_tensor_format_name(t, "blk.%d.%s", il, name) : tsl_tensor_set_name(t, name);
}

/* w · x (+ b), named after w. */
static tsl_tensor *arch_linear(tsl_context *ctx, tsl_tensor *w, tsl_tensor *b, tsl_tensor *x, const char *name,
                               int il) {
    tsl_tensor *t = tsl_tensor_format_name(tsl_mul_mat(ctx, w, x), "blk.%d.%s", il, name);
    if (b) t = tsl_tensor_format_name(tsl_add(ctx, t, b), "blk.%d.%s+bias", il, name);
    return t;
}

/* Rows [r0, r0 + nr) of a fused projection's single-token output (+ b),
 * as the separate projection would have given them. */
static tsl_tensor *arch_part(tsl_context *ctx, tsl_tensor *y, int64_t r0, int64_t nr, tsl_tensor *b, const char *name,
                             int il) {
    tsl_tensor *t = y ? tsl_view_2d(ctx, y, nr, 1, y->nb[1], (size_t)r0 * y->nb[0]) : NULL;
    t = tsl_tensor_format_name(t, "blk.%d.%s", il, name);
    if (b) t = tsl_tensor_format_name(tsl_add(ctx, t, b), "blk.%d.%s+bias", il, name);
    return t;
}

static tsl_rope_params arch_rope_params(const llm_hparams *hp) {
    tsl_rope_params rp = tsl_rope_default(hp->n_rot);
    rp.mode = hp->rope_mode;
    rp.freq_base = hp->rope_base;
    rp.freq_scale = hp->rope_freq_scale;
    rp.n_ctx_orig = hp->rope_n_ctx_orig;
    if (hp->rope_scaling == LLM_ROPE_SCALING_YARN) {
        rp.ext_factor = hp->yarn_ext_factor;
        rp.attn_factor = hp->yarn_attn_factor;
        rp.beta_fast = hp->yarn_beta_fast;
        rp.beta_slow = hp->yarn_beta_slow;
    }
    return rp;
}

/* One token's (or one batch's) pass through the layers: x the embeddings
 * [n_embd, n], tokens at positions pos (I32 [n], from pos0) seeing the
 * mask's rows; the cache writes into outs[0, 2 n_layer), the logits of the
 * last token (or of all n) returned. */
static tsl_tensor *arch_pass(const tsl_model *m, const llm_weights *w, const llm_kv *kv, tsl_context *ctx,
                             tsl_tensor *x, int32_t n, int32_t pos0, int32_t n_kv, int32_t n_out, tsl_tensor *pos,
                             tsl_tensor *mask, tsl_tensor **outs) {
    const llm_hparams *hp = &m->hp;
    const int64_t hd = hp->head_dim, hdv = hp->head_dim_v;
    const float kq_scale = 1.0f / sqrtf((float)hd);
    const tsl_rope_params rp = arch_rope_params(hp);
    for (int il = 0; il < hp->n_layer; il++) {
        const llm_layer *L = &w->layers[il];
        const bool last = il == hp->n_layer - 1;
        tsl_tensor *res = x;
        tsl_tensor *cur = arch_norm(ctx, x, L->attn_norm, hp->rms_eps, "attn_norm", il);

        tsl_tensor *q, *k, *v;
        if (n == 1 && L->wqkv) {
            /* one product for the three projections (see llm_layer) */
            tsl_tensor *qkv = tsl_tensor_format_name(tsl_mul_mat(ctx, L->wqkv, cur), "blk.%d.attn_qkv", il);
            /* and the three biases as one row, where the copy has it */
            if (L->bqkv) qkv = tsl_tensor_format_name(tsl_add(ctx, qkv, L->bqkv), "blk.%d.attn_qkv+bias", il);
            const int64_t nq = L->wq->ne[1], nk = L->wk->ne[1], nv = L->wv->ne[1];
            q = arch_part(ctx, qkv, 0, nq, L->bqkv ? NULL : L->bq, "attn_q", il);
            k = arch_part(ctx, qkv, nq, nk, L->bqkv ? NULL : L->bk, "attn_k", il);
            v = arch_part(ctx, qkv, nq + nk, nv, L->bqkv ? NULL : L->bv, "attn_v", il);
        } else {
            q = arch_linear(ctx, L->wq, L->bq, cur, "attn_q", il);
            k = arch_linear(ctx, L->wk, L->bk, cur, "attn_k", il);
            v = arch_linear(ctx, L->wv, L->bv, cur, "attn_v", il);
        }
        q = tsl_reshape_3d(ctx, q, hd, hp->n_head, n);
        k = tsl_reshape_3d(ctx, k, hd, hp->n_head_kv, n);
        if (L->q_norm) q = arch_norm(ctx, q, L->q_norm, hp->rms_eps, "attn_q_norm", il);
        if (L->k_norm) k = arch_norm(ctx, k, L->k_norm, hp->rms_eps, "attn_k_norm", il);
        q = tsl_tensor_format_name(tsl_rope(ctx, q, pos, w->rope_freqs, &rp), "blk.%d.rope_q", il);
        k = tsl_tensor_format_name(tsl_rope(ctx, k, pos, w->rope_freqs, &rp), "blk.%d.rope_k", il);

        tsl_tensor *cpy_k = NULL, *cpy_v = NULL;
        if (!kv_store(ctx, kv, il, pos0, pos, tsl_reshape_2d(ctx, k, hd * hp->n_head_kv, n), v, &cpy_k, &cpy_v))
            return NULL;
        outs[2 * il] = cpy_k;
        outs[2 * il + 1] = cpy_v;

        /* scores [n_kv, n, n_head] = K · q per head, masked softmax, then V */
        tsl_tensor *qp = tsl_permute(ctx, q, 0, 2, 1, 3); /* [hd, n, n_head] */
        tsl_tensor *kq = tsl_mul_mat(ctx, kv_k_view(ctx, kv, il, n_kv), qp);
        kq = tsl_tensor_format_name(kq, "blk.%d.kq", il);
        kq = tsl_tensor_format_name(tsl_soft_max(ctx, kq, mask, kq_scale), "blk.%d.kq_softmax", il);
        tsl_tensor *kqv = tsl_mul_mat(ctx, kv_v_view(ctx, kv, il, n_kv), kq); /* [hdv, n, n_head] */
        kqv = tsl_tensor_format_name(kqv, "blk.%d.kqv", il);
        cur = tsl_permute(ctx, kqv, 0, 2, 1, 3); /* [hdv, n_head, n] */
        if (cur && !tsl_is_contiguous(cur)) cur = tsl_cont(ctx, cur); /* a single token needs no copy */
        cur = tsl_reshape_2d(ctx, cur, hdv * hp->n_head, n);

        if (last && n_out < n) {
            /* only the last token goes on */
            cur = tsl_view_2d(ctx, cur, cur ? cur->ne[0] : 0, 1, cur ? cur->nb[1] : 0,
                              cur ? (size_t)(n - 1) * cur->nb[1] : 0);
            res = tsl_view_2d(ctx, res, res ? res->ne[0] : 0, 1, res ? res->nb[1] : 0,
                              res ? (size_t)(n - 1) * res->nb[1] : 0);
        }
        cur = arch_linear(ctx, L->wo, NULL, cur, "attn_output", il);
        x = tsl_tensor_format_name(tsl_add(ctx, cur, res), "blk.%d.attn_residual", il);

        res = x;
        cur = arch_norm(ctx, x, L->ffn_norm, hp->rms_eps, "ffn_norm", il);
        tsl_tensor *g, *u;
        if (n == 1 && L->ffn_gate_up) {
            tsl_tensor *gu = tsl_tensor_format_name(tsl_mul_mat(ctx, L->ffn_gate_up, cur), "blk.%d.ffn_gate_up", il);
            g = arch_part(ctx, gu, 0, L->ffn_gate->ne[1], NULL, "ffn_gate", il);
            u = arch_part(ctx, gu, L->ffn_gate->ne[1], L->ffn_up->ne[1], NULL, "ffn_up", il);
        } else {
            g = arch_linear(ctx, L->ffn_gate, NULL, cur, "ffn_gate", il);
            u = arch_linear(ctx, L->ffn_up, NULL, cur, "ffn_up", il);
        }
        cur = tsl_tensor_format_name(tsl_swiglu(ctx, g, u), "blk.%d.ffn_swiglu", il);
        cur = arch_linear(ctx, L->ffn_down, NULL, cur, "ffn_down", il);
        x = tsl_tensor_format_name(tsl_add(ctx, cur, res), "blk.%d.ffn_residual", il);
        if (tsl_ctx_error(ctx)) return NULL;
    }
    x = arch_norm(ctx, x, w->output_norm, hp->rms_eps, "output_norm", -1);
    return tsl_tensor_set_name(tsl_mul_mat(ctx, w->output, x), "output");
}

bool arch_build(const tsl_model *m, const llm_weights *w, const llm_kv *kv, tsl_context *ctx, int32_t n,
                int32_t pos0, int32_t n_kv, bool all_logits, bool greedy, int32_t steps, arch_graph *out) {
    const llm_hparams *hp = &m->hp;
    if (steps < 1 || (steps > 1 && (!greedy || n != 1))) {
        tsl_ctx_fail(ctx, "arch_build: %d steps of %d tokens%s: several steps take one token each, greedy",
                     (int)steps, (int)n, greedy ? "" : " (not greedy)");
        return false;
    }
    if (n < 1 || pos0 < 0 || n_kv < pos0 + n + steps - 1 || n_kv > kv->n_ctx) {
        tsl_ctx_fail(ctx, "arch_build: %d tokens at position %d do not fit an attention span of %d (cache %d)",
                     (int)(n + steps - 1), (int)pos0, (int)n_kv, (int)kv->n_ctx);
        return false;
    }
    const int32_t n_out = all_logits && !greedy ? n : 1;
    const int32_t rows = n + steps - 1; /* positions and mask rows: a batch's tokens, or the steps */

    out->n_kv = n_kv;
    out->n_out = n_out;
    out->steps = steps;
    out->tokens = tsl_tensor_set_name(tsl_new_tensor_1d(ctx, TSL_TYPE_I32, n), "inp_tokens");
    out->pos = tsl_tensor_set_name(tsl_new_tensor_1d(ctx, TSL_TYPE_I32, rows), "inp_pos");
    out->mask = tsl_tensor_set_name(tsl_new_tensor_2d(ctx, TSL_TYPE_F32, n_kv, rows), "inp_kq_mask");
    if (!out->tokens || !out->pos || !out->mask) return false;
    out->tokens->flags |= TSL_FLAG_INPUT;
    out->pos->flags |= TSL_FLAG_INPUT;
    out->mask->flags |= TSL_FLAG_INPUT;

    /* per step: the copies into the cache, then the logits (and their
     * argmax), the order the graph runs them; step s + 1 embeds step s's
     * argmax, so it runs after the whole of step s */
    const int per = 2 * hp->n_layer + 1 + (greedy ? 1 : 0);
    const int n_outputs = per * steps;
    tsl_tensor **outs = ctx_arena_alloc(ctx, (size_t)n_outputs * sizeof *outs, 0);
    tsl_tensor **store = ctx_arena_alloc(ctx, (size_t)steps * 2 * (size_t)hp->n_layer * sizeof *store, 0);
    tsl_tensor **bests = greedy ? ctx_arena_alloc(ctx, (size_t)steps * sizeof *bests, 0) : NULL;
    if (!outs || !store || (greedy && !bests)) return false;

    tsl_tensor *tok = out->tokens;
    for (int32_t s = 0; s < steps; s++) {
        tsl_tensor *pos = out->pos, *mask = out->mask;
        if (steps > 1) {
            pos = tsl_view_1d(ctx, out->pos, 1, (size_t)s * sizeof(int32_t));
            mask = tsl_view_2d(ctx, out->mask, n_kv, 1, out->mask->nb[1], (size_t)s * out->mask->nb[1]);
            if (!pos || !mask) return false;
            tsl_tensor_format_name(pos, "inp_pos (step %d)", (int)s);
            tsl_tensor_format_name(mask, "inp_kq_mask (step %d)", (int)s);
        }
        tsl_tensor **o = outs + (size_t)s * (size_t)per;
        tsl_tensor *x = tsl_get_rows(ctx, w->tok_embd, tok);
        x = steps > 1 ? tsl_tensor_format_name(x, "inp_embd (step %d)", (int)s) : tsl_tensor_set_name(x, "inp_embd");
        tsl_tensor *logits = arch_pass(m, w, kv, ctx, x, n, pos0 + s, n_kv, n_out, pos, mask, o);
        if (!logits) return false;
        memcpy(store + (size_t)s * 2 * (size_t)hp->n_layer, o, 2 * (size_t)hp->n_layer * sizeof *o);
        o[2 * hp->n_layer] = logits;
        out->logits = logits;
        out->best = NULL;
        if (greedy) {
            out->best = tsl_tensor_set_name(tsl_argmax(ctx, logits), "output_argmax");
            if (!out->best) return false;
            if (steps > 1) tsl_tensor_format_name(out->best, "output_argmax (step %d)", (int)s);
            o[per - 1] = out->best;
            bests[s] = out->best;
            tok = out->best; /* the next step's token */
        }
    }
    out->bests = bests;
    out->store = store;
    out->pos0 = pos0;
    out->g = tsl_graph_build(ctx, outs, n_outputs);
    return out->g != NULL;
}

void arch_move(const llm_kv *kv, arch_graph *ag, int32_t pos0) {
    for (int32_t s = 0; s < ag->steps; s++)
        for (int il = 0; il < kv->n_layer; il++) {
            tsl_tensor **st = ag->store + 2 * ((size_t)s * (size_t)kv->n_layer + (size_t)il);
            kv_store_move(kv, il, pos0 + s, st[0], st[1]);
        }
    ag->pos0 = pos0;
    /* The activations still hold the addresses the last compute gave them,
     * in an allocator's buffer that may have been replaced since (a longer
     * batch in between): forget them, so they are placed again as in a new
     * graph. What lives elsewhere (weights, the cache and its views, the
     * inputs) keeps its place. */
    const tsl_graph *g = ag->g;
    for (int i = 0; i < g->n_nodes; i++) {
        tsl_tensor *t = g->nodes[i];
        const tsl_tensor *root = t->view_src ? t->view_src : t;
        if (root->op == TSL_OP_NONE) continue;
        t->data = NULL;
        t->buffer = NULL;
    }
}
