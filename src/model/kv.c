/*
 * kv.c - the KV cache of an LLM context: keys and values of every position
 * decoded so far, per layer, in one backend buffer.
 *
 * Layout (the one decision here, made for the two attention products):
 *
 *   K[il]  [head_dim * n_head_kv, n_ctx]   one row per position
 *   V[il]  [n_ctx, head_dim_v * n_head_kv] transposed: one row per channel
 *
 * Attention computes kq = K·q (a mul_mat over K's rows: each key row is
 * dense) and then kqv = V^T·softmax(kq), a mul_mat whose weight rows run
 * over positions. Storing V transposed makes those rows dense too, so both
 * products read the cache in place with no per-token transposing copy; the
 * price is a strided write of the new values (n_tokens elements per channel
 * row), which the CPU's cpy kernel does block by block. This is ggml's
 * "v_trans" layout.
 *
 * The cache is plain memory: which positions are valid is the context's
 * business (llm.c keeps n_past and masks everything after it), so rolling a
 * failed batch back, truncating and clearing cost nothing here. F16 halves
 * the memory and the bandwidth of F32 at a precision cost well below the
 * weights' quantization; F32 is there for exact comparisons.
 */
#include <stdio.h>
#include <stdlib.h>

#include "core/core.h"
#include "model/llm_impl.h"

llm_kv *kv_new(const llm_hparams *hp, int32_t n_ctx, tsl_type type, tsl_backend *be, tsl_error *err) {
    if (type != TSL_TYPE_F16 && type != TSL_TYPE_F32) {
        error_set(err, TSL_FAILED, "", "", -1, NULL, NULL, "kv cache: type %s is not supported (f16 or f32)",
                  tsl_type_name(type));
        return NULL;
    }
    if (n_ctx < 1) {
        error_set(err, TSL_FAILED, "", "", -1, NULL, NULL, "kv cache: n_ctx %d must be at least 1", (int)n_ctx);
        return NULL;
    }
    llm_kv *kv = calloc(1, sizeof *kv);
    if (kv) {
        kv->k = calloc((size_t)hp->n_layer, sizeof *kv->k);
        kv->v = calloc((size_t)hp->n_layer, sizeof *kv->v);
    }
    tsl_ctx_params cp = {.mem_size = (size_t)(2 * hp->n_layer + 8) * (sizeof(tsl_tensor) + 256), .no_alloc = true};
    if (kv && kv->k && kv->v) kv->ctx = tsl_ctx_new(cp);
    if (!kv || !kv->k || !kv->v || !kv->ctx) {
        kv_free(kv);
        error_set(err, TSL_ALLOC_FAILED, "", "", -1, NULL, NULL, "kv cache: out of memory");
        return NULL;
    }
    kv->n_layer = hp->n_layer;
    kv->n_ctx = n_ctx;
    kv->type = type;
    kv->head_dim = hp->head_dim;
    kv->head_dim_v = hp->head_dim_v;
    kv->n_head_kv = hp->n_head_kv;
    const int64_t kw = (int64_t)hp->head_dim * hp->n_head_kv, vw = (int64_t)hp->head_dim_v * hp->n_head_kv;
    for (int il = 0; il < hp->n_layer; il++) {
        kv->k[il] = tsl_tensor_format_name(tsl_new_tensor_2d(kv->ctx, type, kw, n_ctx), "cache_k_l%d", il);
        kv->v[il] = tsl_tensor_format_name(tsl_new_tensor_2d(kv->ctx, type, n_ctx, vw), "cache_v_l%d", il);
    }
    if (tsl_ctx_error(kv->ctx)) {
        error_set(err, TSL_FAILED, "", "", -1, NULL, NULL, "kv cache: %s", tsl_ctx_error(kv->ctx));
        kv_free(kv);
        return NULL;
    }
    tsl_error e;
    tsl_error_clear(&e);
    kv->buf = tsl_buffer_alloc_ctx(be, kv->ctx, &e);
    if (!kv->buf) {
        char need[32];
        snprintf(need, sizeof need, "%.1f MiB",
                 (double)hp->n_layer * (double)(kw + vw) * (double)n_ctx *
                     (double)tsl_type_block_size(type) / 1048576.0);
        if (err) {
            *err = e;
            snprintf(err->message, sizeof err->message, "kv cache: could not allocate %s for %d positions (%.120s)",
                     need, (int)n_ctx, e.message);
        }
        kv_free(kv);
        return NULL;
    }
    return kv;
}

void kv_free(llm_kv *kv) {
    if (!kv) return;
    tsl_buffer_free(kv->buf);
    tsl_ctx_free(kv->ctx);
    free(kv->k);
    free(kv->v);
    free(kv);
}

size_t kv_bytes(const llm_kv *kv) { return kv && kv->buf ? tsl_buffer_size(kv->buf) : 0; }

tsl_tensor *kv_k_view(tsl_context *ctx, const llm_kv *kv, int il, int32_t n_kv) {
    const tsl_tensor *k = kv->k[il];
    const size_t es = tsl_type_block_size(kv->type);
    tsl_tensor *t = tsl_view_3d(ctx, kv->k[il], kv->head_dim, n_kv, kv->n_head_kv, k->nb[1], (size_t)kv->head_dim * es, 0);
    return tsl_tensor_format_name(t, "cache_k_l%d (view)", il);
}

tsl_tensor *kv_v_view(tsl_context *ctx, const llm_kv *kv, int il, int32_t n_kv) {
    const tsl_tensor *v = kv->v[il];
    tsl_tensor *t = tsl_view_3d(ctx, kv->v[il], n_kv, kv->head_dim_v, kv->n_head_kv, v->nb[1],
                                v->nb[1] * (size_t)kv->head_dim_v, 0);
    return tsl_tensor_format_name(t, "cache_v_l%d (view)", il);
}

bool kv_store(tsl_context *ctx, const llm_kv *kv, int il, int32_t pos0, tsl_tensor *pos, tsl_tensor *k,
              tsl_tensor *v, tsl_tensor **cpy_k, tsl_tensor **cpy_v) {
    if (!k || !v) return false;
    const int64_t n = k->ne[1];
    if (pos0 < 0 || pos0 + n > kv->n_ctx) {
        tsl_ctx_fail(ctx, "kv_store: positions [%d, %d) outside the cache (%d positions)", (int)pos0,
                     (int)(pos0 + n), (int)kv->n_ctx);
        return false;
    }
    tsl_tensor *K = kv->k[il], *V = kv->v[il];
    if (pos && (kv->type == TSL_TYPE_F16 || kv->type == TSL_TYPE_F32)) {
        /* rows of K at the positions; elements of V's rows (it is stored
         * transposed: a position is a column) */
        *cpy_k = tsl_tensor_format_name(tsl_set_rows(ctx, K, k, pos, 1), "cache_k_l%d (store)", il);
        *cpy_v = tsl_tensor_format_name(tsl_set_rows(ctx, V, tsl_transpose(ctx, v), pos, 0), "cache_v_l%d (store)",
                                        il);
        return *cpy_k && *cpy_v;
    }
    const size_t es = tsl_type_block_size(kv->type);
    tsl_tensor *kdst = tsl_view_2d(ctx, K, K->ne[0], n, K->nb[1], (size_t)pos0 * K->nb[1]);
    /* the new values as [n, channels]: column j of the transpose is token j */
    tsl_tensor *vdst = tsl_view_2d(ctx, V, n, V->ne[1], V->nb[1], (size_t)pos0 * es);
    *cpy_k = tsl_tensor_format_name(tsl_cpy(ctx, k, kdst), "cache_k_l%d (store)", il);
    *cpy_v = tsl_tensor_format_name(tsl_cpy(ctx, tsl_transpose(ctx, v), vdst), "cache_v_l%d (store)", il);
    return *cpy_k && *cpy_v;
}

/* The destination of a cache write and the write's own result are views
 * of the layer's cache at the first position's offset: move both (the data
 * address follows the offset, as tsl_view_* and tsl_cpy set it). */
static void kv_view_move(tsl_tensor *cpy, size_t offs) {
    tsl_tensor *dst = cpy->src[1];
    const tsl_tensor *root = dst->view_src;
    dst->view_offs = offs;
    dst->data = root->data ? (char *)root->data + offs : NULL;
    cpy->view_offs = offs;
    cpy->data = dst->data;
}

void kv_store_move(const llm_kv *kv, int il, int32_t pos0, tsl_tensor *cpy_k, tsl_tensor *cpy_v) {
    if (cpy_k->op == TSL_OP_SET_ROWS) return; /* positions are data */
    /* the offsets kv_store gives its views, for pos0 */
    kv_view_move(cpy_k, (size_t)pos0 * kv->k[il]->nb[1]);
    kv_view_move(cpy_v, (size_t)pos0 * tsl_type_block_size(kv->type));
}

/* Positions a graph attends to but never wrote are masked out, yet they are
 * still multiplied (by a weight of exactly 0): fresh device memory may hold
 * NaN patterns, and 0 * NaN is NaN. So the cache starts as zeros; a
 * recovery hands it back zeroed too. */
tsl_status kv_zero(llm_kv *kv, tsl_error *err) {
    const size_t chunk = (size_t)4 << 20;
    size_t biggest = 0;
    for (int il = 0; il < kv->n_layer; il++) {
        size_t a = tsl_nbytes(kv->k[il]), b = tsl_nbytes(kv->v[il]);
        if (a > biggest) biggest = a;
        if (b > biggest) biggest = b;
    }
    const size_t zn = biggest < chunk ? biggest : chunk;
    void *zeros = calloc(1, zn ? zn : 1);
    if (!zeros) return error_set(err, TSL_ALLOC_FAILED, "", "", -1, NULL, NULL, "kv cache: out of memory");
    tsl_status s = TSL_SUCCESS;
    for (int il = 0; il < kv->n_layer && s == TSL_SUCCESS; il++)
        for (int j = 0; j < 2 && s == TSL_SUCCESS; j++) {
            tsl_tensor *t = j ? kv->v[il] : kv->k[il];
            const size_t n = tsl_nbytes(t);
            for (size_t off = 0; off < n && s == TSL_SUCCESS; off += zn)
                s = tsl_tensor_set(t, zeros, off, n - off < zn ? n - off : zn, err);
        }
    free(zeros);
    return s;
}
