/*
 * llm.c - LLM models and inference contexts: loading a llama-family GGUF
 * file (hyper-parameters, weights, tokenizer), and decoding tokens through
 * the graphs of arch.c with the KV cache of kv.c.
 *
 * Loading trusts nothing in the file: the GGUF reader has already validated
 * the container; here every hyper-parameter is range-checked and every
 * tensor the architecture needs is looked up by llama.cpp's name and checked
 * for type and shape against the hyper-parameters before anything runs, so a
 * bad file fails at load with one message naming the tensor, the shape found
 * and the shape expected, instead of as a mysterious compute failure later.
 *
 * On the CPU weights are never copied: tsl_gguf_load_tensors gives tensors
 * whose data point into the read-only mapping, and the CPU reads them there.
 * Resident memory is then the file's pages (shared with the page cache), the
 * KV cache, and one activation buffer the graph allocator sizes to the
 * largest batch. Loading reads every page once in order (after
 * MADV_WILLNEED) so the first token does not pay for thousands of page
 * faults, and so a progress bar has something true to show. A GPU reads a
 * copy in its own memory, one per model and device (weights.c).
 *
 * Decoding builds a graph per batch in a small metadata context (a graph
 * depends on the batch's length and attention span); a single token's graph
 * is kept for the next token as long as its shape holds: an F32/F16 cache is
 * written at the positions the graph takes as input (set_rows), so nothing
 * in it changes, and a quantized cache's writes are moved to the next
 * position. The graph's inputs (tokens,
 * positions, causal mask) live in a buffer the context keeps on its backend
 * and go up in one copy; the graph is computed on the CPU through the
 * context's graph allocator, on a device through the scheduler, which
 * splits it between the device and a CPU fallback (nothing splits when the
 * device has every kernel) and places activations in device memory.
 * Attention spans the positions in use rounded up to LLM_KV_PAD, so the
 * graph's shapes, and the memory placed for it, stay the same for
 * LLM_KV_PAD tokens at a time: decode neither rebuilds nor reallocates per
 * token.
 *
 * A decode call is all or nothing for the caller: on any failure the
 * position rolls back to where the call started, so the cache entries the
 * failed batch may have written are simply not counted (the mask hides
 * them and the next decode overwrites them). That is what lets a context
 * carry on after RETRY or ABORTED, and rebuild after a lost device from the
 * token history it keeps.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "model/llm_impl.h"

#define LLM_DEFAULT_MAX_CTX 4096
#define LLM_DEFAULT_BATCH 512
#define LLM_MAX_LAYERS 4096
#define LLM_PROGRESS_MIN_BYTES ((uint64_t)64 << 20)

const char *tsl_llm_arch_name(tsl_llm_arch a) {
    switch (a) {
    case TSL_ARCH_LLAMA: return "llama";
    case TSL_ARCH_QWEN2: return "qwen2";
    case TSL_ARCH_QWEN3: return "qwen3";
    }
    return "?";
}

tsl_model_params tsl_model_default_params(void) { return (tsl_model_params){.prefetch = true, .progress = true}; }

/* ---- load errors ----------------------------------------------------------- */

typedef struct llm_loader {
    tsl_model *m;
    const char *path;
    tsl_error *err;
    tsl_tensor **by_index; /* tensor i of the file */
    char arch[32];
} llm_loader;

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static bool
llm_fail(llm_loader *L, tsl_status s, const char *fmt, ...) {
    if (!L->err) return false;
    char msg[sizeof L->err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    error_set(L->err, s, "", "", -1, NULL, NULL, "model '%s': %s", L->path, msg);
    return false;
}

/* ---- hyper-parameters -------------------------------------------------------- */

/* {arch}.suffix as an int in [lo, hi]; missing: *out = def, or an error when
 * required. */
static bool llm_get_i32(llm_loader *L, const char *suffix, bool required, int64_t lo, int64_t hi, int32_t def,
                        int32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", L->arch, suffix);
    tsl_gguf *g = L->m->gguf;
    int64_t idx = tsl_gguf_find_key(g, key);
    if (idx < 0) {
        if (required) return llm_fail(L, TSL_FAILED, "key '%s' is missing", key);
        *out = def;
        return true;
    }
    int64_t v;
    if (tsl_gguf_kv_type(g, idx) == TSL_GGUF_ARRAY) {
        /* per-layer values (some converters write head_count_kv so): all must agree */
        uint64_t n = 0;
        tsl_gguf_get_arr(g, key, NULL, &n, NULL, NULL, NULL);
        if (n == 0) return llm_fail(L, TSL_FAILED, "key '%s' is an empty array", key);
        if (tsl_gguf_get_arr_int(g, key, 0, &v, NULL) != TSL_SUCCESS)
            return llm_fail(L, TSL_FAILED, "key '%s' is not an array of integers", key);
        for (uint64_t i = 1; i < n; i++) {
            int64_t w;
            if (tsl_gguf_get_arr_int(g, key, i, &w, NULL) != TSL_SUCCESS || w != v)
                return llm_fail(L, TSL_FAILED, "key '%s': per-layer values that differ are not supported", key);
        }
    } else {
        tsl_error e;
        if (tsl_gguf_get_int(g, key, &v, &e) != TSL_SUCCESS)
            return llm_fail(L, TSL_FAILED, "key '%s': %s", key, e.message);
    }
    if (v < lo || v > hi)
        return llm_fail(L, TSL_FAILED, "key '%s' is %lld, expected %lld..%lld", key, (long long)v, (long long)lo,
                        (long long)hi);
    *out = (int32_t)v;
    return true;
}

static bool llm_get_f32(llm_loader *L, const char *suffix, bool required, double lo, double hi, float def,
                        float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", L->arch, suffix);
    tsl_gguf *g = L->m->gguf;
    if (tsl_gguf_find_key(g, key) < 0) {
        if (required) return llm_fail(L, TSL_FAILED, "key '%s' is missing", key);
        *out = def;
        return true;
    }
    double v;
    tsl_error e;
    if (tsl_gguf_get_float(g, key, &v, &e) != TSL_SUCCESS)
        return llm_fail(L, TSL_FAILED, "key '%s': %s", key, e.message);
    if (!(v >= lo && v <= hi))
        return llm_fail(L, TSL_FAILED, "key '%s' is %g, expected %g..%g", key, v, lo, hi);
    *out = (float)v;
    return true;
}

static bool llm_read_hparams(llm_loader *L) {
    llm_hparams *hp = &L->m->hp;
    const int32_t BIG = 1 << 30;
    if (!llm_get_i32(L, "context_length", true, 1, BIG, 0, &hp->n_ctx_train) ||
        !llm_get_i32(L, "embedding_length", true, 1, 1 << 20, 0, &hp->n_embd) ||
        !llm_get_i32(L, "block_count", true, 1, LLM_MAX_LAYERS, 0, &hp->n_layer) ||
        !llm_get_i32(L, "feed_forward_length", true, 1, 1 << 22, 0, &hp->n_ff) ||
        !llm_get_i32(L, "attention.head_count", true, 1, 1 << 14, 0, &hp->n_head) ||
        !llm_get_i32(L, "attention.head_count_kv", false, 1, 1 << 14, hp->n_head, &hp->n_head_kv) ||
        !llm_get_f32(L, "attention.layer_norm_rms_epsilon", true, 1e-12, 1.0, 0, &hp->rms_eps) ||
        !llm_get_f32(L, "rope.freq_base", false, 1e-3, 1e12, 10000.0f, &hp->rope_base))
        return false;
    if (hp->n_head % hp->n_head_kv != 0)
        return llm_fail(L, TSL_FAILED, "attention.head_count %d is not a multiple of attention.head_count_kv %d",
                        (int)hp->n_head, (int)hp->n_head_kv);
    const int32_t hd_default = hp->n_embd % hp->n_head == 0 ? hp->n_embd / hp->n_head : 0;
    if (!llm_get_i32(L, "attention.key_length", hd_default == 0, 1, 1 << 16, hd_default, &hp->head_dim) ||
        !llm_get_i32(L, "attention.value_length", false, 1, 1 << 16, hp->head_dim, &hp->head_dim_v) ||
        !llm_get_i32(L, "rope.dimension_count", false, 2, hp->head_dim, hp->head_dim, &hp->n_rot))
        return false;
    if (hp->n_rot % 2 != 0) return llm_fail(L, TSL_FAILED, "rope.dimension_count %d is odd", (int)hp->n_rot);
    hp->rope_mode = hp->arch == TSL_ARCH_LLAMA ? TSL_ROPE_NORMAL : TSL_ROPE_NEOX;

    /* rope scaling: none / linear / yarn, by llama.cpp's keys */
    hp->rope_freq_scale = 1.0f;
    hp->rope_scaling = LLM_ROPE_SCALING_NONE;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", L->arch);
    const char *stype = NULL;
    if (tsl_gguf_find_key(L->m->gguf, key) >= 0 &&
        tsl_gguf_get_str(L->m->gguf, key, &stype, NULL, NULL) != TSL_SUCCESS)
        return llm_fail(L, TSL_FAILED, "key '%s' is not a string", key);
    float factor = 0.0f;
    if (!llm_get_f32(L, "rope.scaling.factor", false, 0.0, 1e6, 0.0f, &factor)) return false;
    if (factor == 0.0f && !llm_get_f32(L, "rope.scale_linear", false, 0.0, 1e6, 0.0f, &factor)) return false;
    if (stype && strcmp(stype, "none") != 0) {
        if (!strcmp(stype, "linear")) {
            hp->rope_scaling = LLM_ROPE_SCALING_LINEAR;
        } else if (!strcmp(stype, "yarn")) {
            hp->rope_scaling = LLM_ROPE_SCALING_YARN;
        } else {
            return llm_fail(L, TSL_FAILED, "rope scaling '%s' (key '%s') is not supported (none, linear, yarn)",
                            stype, key);
        }
    } else if (!stype && factor > 0.0f && factor != 1.0f) {
        hp->rope_scaling = LLM_ROPE_SCALING_LINEAR; /* old files: only rope.scale_linear */
    }
    if (hp->rope_scaling != LLM_ROPE_SCALING_NONE && factor > 0.0f) hp->rope_freq_scale = 1.0f / factor;
    if (!llm_get_i32(L, "rope.scaling.original_context_length", false, 0, BIG, hp->n_ctx_train,
                     &hp->rope_n_ctx_orig) ||
        !llm_get_f32(L, "rope.scaling.attn_factor", false, 0.0, 1e3, 1.0f, &hp->yarn_attn_factor) ||
        !llm_get_f32(L, "rope.scaling.yarn_beta_fast", false, 0.0, 1e4, 32.0f, &hp->yarn_beta_fast) ||
        !llm_get_f32(L, "rope.scaling.yarn_beta_slow", false, 0.0, 1e4, 1.0f, &hp->yarn_beta_slow))
        return false;
    hp->yarn_ext_factor = hp->rope_scaling == LLM_ROPE_SCALING_YARN ? 1.0f : 0.0f;
    return true;
}

/* ---- tensors ------------------------------------------------------------------ */

static bool llm_type_matmul_ok(tsl_type t) {
    return t == TSL_TYPE_F32 || t == TSL_TYPE_F16 || t == TSL_TYPE_BF16 || t == TSL_TYPE_Q8_0 || t == TSL_TYPE_Q4_0;
}

/* The tensor `name` with shape [ne0] (ne1 == 0) or [ne0, ne1]; `what` names
 * the hyper-parameters the shape comes from. vector: 1-D F32 (norms, biases,
 * frequency factors); otherwise a matrix of a type mul_mat/get_rows read.
 * Missing and optional: *out = NULL, true. */
static bool llm_tensor(llm_loader *L, tsl_tensor **out, const char *name, bool required, int64_t ne0, int64_t ne1,
                       const char *what) {
    *out = NULL;
    int64_t idx = tsl_gguf_find_tensor(L->m->gguf, name);
    if (idx < 0) {
        if (!required) return true;
        return llm_fail(L, TSL_FAILED, "tensor '%s' is missing (the %s architecture needs it)", name, L->arch);
    }
    tsl_tensor *t = L->by_index[idx];
    const int want_dims = ne1 ? 2 : 1;
    bool ok = t->ne[0] == ne0 && t->ne[1] == (ne1 ? ne1 : 1) && t->ne[2] == 1 && t->ne[3] == 1;
    if (!ok) {
        char found[96], expect[64];
        tsl_shape_str(t, found, sizeof found);
        if (want_dims == 2)
            snprintf(expect, sizeof expect, "[%lld, %lld]", (long long)ne0, (long long)ne1);
        else
            snprintf(expect, sizeof expect, "[%lld]", (long long)ne0);
        return llm_fail(L, TSL_FAILED, "tensor '%s' has shape %s, expected %s (%s)", name, found, expect, what);
    }
    if (want_dims == 1 && t->type != TSL_TYPE_F32)
        return llm_fail(L, TSL_FAILED, "tensor '%s' is %s; norm weights, biases and rope factors must be f32", name,
                        tsl_type_name(t->type));
    if (want_dims == 2 && !llm_type_matmul_ok(t->type))
        return llm_fail(L, TSL_FAILED, "tensor '%s' has type %s, which no kernel multiplies (f32, f16, bf16, q8_0, q4_0)",
                        name, tsl_type_name(t->type));
    *out = t;
    return true;
}

static bool llm_find_tensors(llm_loader *L) {
    tsl_model *m = L->m;
    const llm_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, V = hp->n_vocab, F = hp->n_ff;
    const int64_t Q = (int64_t)hp->n_head * hp->head_dim, K = (int64_t)hp->n_head_kv * hp->head_dim;
    const int64_t VV = (int64_t)hp->n_head_kv * hp->head_dim_v, O = (int64_t)hp->n_head * hp->head_dim_v;
    if (!llm_tensor(L, &m->w.tok_embd, "token_embd.weight", true, E, V, "n_embd, n_vocab") ||
        !llm_tensor(L, &m->w.output_norm, "output_norm.weight", true, E, 0, "n_embd") ||
        !llm_tensor(L, &m->w.output, "output.weight", false, E, V, "n_embd, n_vocab") ||
        !llm_tensor(L, &m->w.rope_freqs, "rope_freqs.weight", false, hp->n_rot / 2, 0, "rope.dimension_count / 2"))
        return false;
    if (!m->w.output) m->w.output = m->w.tok_embd; /* tied embeddings */

    m->w.layers = calloc((size_t)hp->n_layer, sizeof *m->w.layers);
    if (!m->w.layers) return llm_fail(L, TSL_ALLOC_FAILED, "out of memory");
    const bool qwen2 = hp->arch == TSL_ARCH_QWEN2, qwen3 = hp->arch == TSL_ARCH_QWEN3;
    char n[TSL_MAX_NAME];
#define LLM_T(field, suffix, req, a, b, what)                                                                \
    (snprintf(n, sizeof n, "blk.%d." suffix, il), llm_tensor(L, &ly->field, n, req, a, b, what))
    for (int il = 0; il < hp->n_layer; il++) {
        llm_layer *ly = &m->w.layers[il];
        if (!LLM_T(attn_norm, "attn_norm.weight", true, E, 0, "n_embd") ||
            !LLM_T(wq, "attn_q.weight", true, E, Q, "n_embd, n_head * head_dim") ||
            !LLM_T(wk, "attn_k.weight", true, E, K, "n_embd, n_head_kv * head_dim") ||
            !LLM_T(wv, "attn_v.weight", true, E, VV, "n_embd, n_head_kv * head_dim_v") ||
            !LLM_T(wo, "attn_output.weight", true, O, E, "n_head * head_dim_v, n_embd") ||
            !LLM_T(bq, "attn_q.bias", qwen2, Q, 0, "n_head * head_dim") ||
            !LLM_T(bk, "attn_k.bias", qwen2, K, 0, "n_head_kv * head_dim") ||
            !LLM_T(bv, "attn_v.bias", qwen2, VV, 0, "n_head_kv * head_dim_v") ||
            !LLM_T(ffn_norm, "ffn_norm.weight", true, E, 0, "n_embd") ||
            !LLM_T(ffn_gate, "ffn_gate.weight", true, E, F, "n_embd, n_ff") ||
            !LLM_T(ffn_up, "ffn_up.weight", true, E, F, "n_embd, n_ff") ||
            !LLM_T(ffn_down, "ffn_down.weight", true, F, E, "n_ff, n_embd"))
            return false;
        if (qwen3 && (!LLM_T(q_norm, "attn_q_norm.weight", true, hp->head_dim, 0, "head_dim") ||
                      !LLM_T(k_norm, "attn_k_norm.weight", true, hp->head_dim, 0, "head_dim")))
            return false;
    }
#undef LLM_T
    return true;
}

/* ---- tokenizer ------------------------------------------------------------------ */

static int32_t llm_opt_id(const tsl_gguf *g, const char *key) {
    int64_t v;
    if (tsl_gguf_get_int(g, key, &v, NULL) != TSL_SUCCESS || v < 0 || v > INT32_MAX) return -1;
    return (int32_t)v;
}

static int llm_opt_bool(const tsl_gguf *g, const char *key) {
    bool b;
    if (tsl_gguf_get_bool(g, key, &b, NULL) != TSL_SUCCESS) return -1;
    return b ? 1 : 0;
}

static bool llm_load_tokenizer(llm_loader *L) {
    tsl_model *m = L->m;
    tsl_gguf *g = m->gguf;
    tok_vocab_desc d = tok_vocab_desc_default();
    tsl_error e;
    if (tsl_gguf_get_str(g, "tokenizer.ggml.model", &d.model, NULL, &e) != TSL_SUCCESS)
        return llm_fail(L, TSL_FAILED, "no tokenizer: %s", e.message);
    tsl_gguf_get_str(g, "tokenizer.ggml.pre", &d.pre, NULL, NULL);
    tsl_gguf_type et;
    uint64_t nt = 0;
    if (tsl_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &nt, NULL, NULL, &e) != TSL_SUCCESS)
        return llm_fail(L, TSL_FAILED, "no tokenizer: %s", e.message);
    if (et != TSL_GGUF_STRING) return llm_fail(L, TSL_FAILED, "tokenizer.ggml.tokens is not an array of strings");
    if (nt != (uint64_t)m->hp.n_vocab)
        return llm_fail(L, TSL_FAILED, "tokenizer.ggml.tokens has %llu tokens but token_embd.weight has %d rows",
                        (unsigned long long)nt, (int)m->hp.n_vocab);
    uint64_t nm = 0;
    bool has_merges = tsl_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &nm, NULL, NULL, NULL) == TSL_SUCCESS;
    if (has_merges && et != TSL_GGUF_STRING)
        return llm_fail(L, TSL_FAILED, "tokenizer.ggml.merges is not an array of strings");
    if (nm > INT32_MAX) return llm_fail(L, TSL_FAILED, "tokenizer.ggml.merges has too many entries");

    const char **toks = calloc((size_t)nt, sizeof *toks);
    uint32_t *tlen = calloc((size_t)nt, sizeof *tlen);
    const char **merges = nm ? calloc((size_t)nm, sizeof *merges) : NULL;
    uint32_t *mlen = nm ? calloc((size_t)nm, sizeof *mlen) : NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    bool ok = toks && tlen && (!nm || (merges && mlen));
    for (uint64_t i = 0; ok && i < nt; i++) {
        size_t len;
        ok = tsl_gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &toks[i], &len, NULL) == TSL_SUCCESS &&
             len <= UINT32_MAX;
        if (ok) tlen[i] = (uint32_t)len;
    }
    for (uint64_t i = 0; ok && i < nm; i++) {
        size_t len;
        ok = tsl_gguf_get_arr_str(g, "tokenizer.ggml.merges", i, &merges[i], &len, NULL) == TSL_SUCCESS &&
             len <= UINT32_MAX;
        if (ok) mlen[i] = (uint32_t)len;
    }
    const void *data;
    uint64_t n;
    if (ok && tsl_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n, &data, NULL, NULL) == TSL_SUCCESS) {
        if (et != TSL_GGUF_F32 || n != nt) {
            free(toks), free(tlen), free(merges), free(mlen);
            return llm_fail(L, TSL_FAILED, "tokenizer.ggml.scores must be %llu f32 values",
                            (unsigned long long)nt);
        }
        scores = malloc((size_t)nt * sizeof *scores);
        if (scores) memcpy(scores, data, (size_t)nt * sizeof *scores); /* possibly unaligned in the file */
        ok = scores != NULL;
    }
    if (ok && tsl_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, &data, NULL, NULL) == TSL_SUCCESS) {
        if (et != TSL_GGUF_I32 || n != nt) {
            free(toks), free(tlen), free(merges), free(mlen), free(scores);
            return llm_fail(L, TSL_FAILED, "tokenizer.ggml.token_type must be %llu i32 values",
                            (unsigned long long)nt);
        }
        types = malloc((size_t)nt * sizeof *types);
        if (types) memcpy(types, data, (size_t)nt * sizeof *types);
        ok = types != NULL;
    }
    if (ok) {
        d.n_tokens = (int32_t)nt;
        d.tokens = toks;
        d.token_lens = tlen;
        d.scores = scores;
        d.token_types = types;
        d.n_merges = (int32_t)nm;
        d.merges = merges;
        d.merge_lens = mlen;
        d.bos_id = llm_opt_id(g, "tokenizer.ggml.bos_token_id");
        d.eos_id = llm_opt_id(g, "tokenizer.ggml.eos_token_id");
        d.unk_id = llm_opt_id(g, "tokenizer.ggml.unknown_token_id");
        d.pad_id = llm_opt_id(g, "tokenizer.ggml.padding_token_id");
        d.add_bos = llm_opt_bool(g, "tokenizer.ggml.add_bos_token");
        d.add_eos = llm_opt_bool(g, "tokenizer.ggml.add_eos_token");
        d.add_space_prefix = llm_opt_bool(g, "tokenizer.ggml.add_space_prefix");
        m->tok = tok_new(&d, &e);
    }
    free(toks);
    free(tlen);
    free(merges);
    free(mlen);
    free(scores);
    free(types);
    if (!ok) return llm_fail(L, TSL_ALLOC_FAILED, "out of memory reading the vocabulary");
    if (!m->tok) return llm_fail(L, e.status, "tokenizer: %s", e.message);

    /* end of generation: EOS, EOT, EOM, and the turn-ending control tokens */
    int32_t ids[3] = {tok_eos(m->tok), llm_opt_id(g, "tokenizer.ggml.eot_token_id"),
                      llm_opt_id(g, "tokenizer.ggml.eom_token_id")};
    static const char *const texts[] = {"<|eot_id|>", "<|im_end|>",  "<|endoftext|>", "<|end_of_text|>",
                                        "<|eom_id|>", "<end_of_turn>", "<|end|>"};
    for (int i = 0; i < 3; i++)
        if (ids[i] >= 0 && ids[i] < m->hp.n_vocab) m->eog[m->n_eog++] = ids[i];
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        int32_t id = tok_find(m->tok, texts[i], strlen(texts[i]));
        tok_type ty = tok_token_type(m->tok, id);
        if (id < 0 || (ty != TOK_TYPE_CONTROL && ty != TOK_TYPE_USER_DEFINED)) continue;
        bool seen = false;
        for (int j = 0; j < m->n_eog; j++) seen |= m->eog[j] == id;
        if (!seen && m->n_eog < (int)(sizeof m->eog / sizeof m->eog[0])) m->eog[m->n_eog++] = id;
    }
    return true;
}

/* ---- prefetch and progress ---------------------------------------------------------- */

double llm_now(void) { return (double)core_now_ns() * 1e-9; }

void llm_progress_draw(const char *verb, const char *name, size_t done, size_t total) {
    const int W = 30;
    int fill = total ? (int)((double)done / (double)total * W) : W;
    char bar[32];
    for (int i = 0; i < W; i++) bar[i] = i < fill ? '#' : ' ';
    bar[W] = 0;
    fprintf(stderr, "\r%s %s [%s] %3d%% %.2f/%.2f GB", verb, name, bar, total ? (int)(100.0 * done / total) : 100,
            done / 1e9, total / 1e9);
    fflush(stderr);
}

/* Read every page of the tensor data once, in file order, after asking the
 * kernel to read ahead; the sum keeps the compiler from dropping the reads. */
static void llm_prefetch(tsl_model *m, bool bar) {
    const tsl_gguf *g = m->gguf;
    int64_t nt = tsl_gguf_tensor_count(g);
    if (nt <= 0) return;
    const tsl_gguf_tensor_info *first = tsl_gguf_tensor(g, 0);
    const char *lo = first->data, *hi = lo;
    for (int64_t i = 0; i < nt; i++) {
        const tsl_gguf_tensor_info *ti = tsl_gguf_tensor(g, i);
        const char *a = ti->data, *b = a + ti->size;
        if (a < lo) lo = a;
        if (b > hi) hi = b;
    }
    const long pg = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
    const uintptr_t base = (uintptr_t)lo & ~(uintptr_t)(pg - 1);
    const size_t total = (size_t)((uintptr_t)hi - base);
    madvise((void *)base, total, MADV_WILLNEED);
    const char *name = strrchr(m->path, '/') ? strrchr(m->path, '/') + 1 : m->path;
    volatile unsigned sink = 0;
    unsigned acc = 0;
    const size_t step = (size_t)16 << 20;
    double last = 0;
    for (size_t off = 0; off < total; off += step) {
        size_t end = off + step < total ? off + step : total;
        for (size_t p = off; p < end; p += (size_t)pg) acc += *(const volatile unsigned char *)(base + p);
        if (bar) {
            double t = llm_now();
            if (t - last > 0.05 || end == total) {
                llm_progress_draw("loading", name, end, total);
                last = t;
            }
        }
    }
    sink = acc;
    (void)sink;
    if (bar) fputc('\n', stderr);
}

/* ---- load ------------------------------------------------------------------------- */

static void llm_fill_info(tsl_model *m) {
    tsl_model_info *in = &m->info;
    const llm_hparams *hp = &m->hp;
    in->arch = hp->arch;
    in->arch_name = tsl_llm_arch_name(hp->arch);
    in->name = m->name;
    in->n_vocab = hp->n_vocab;
    in->n_ctx_train = hp->n_ctx_train;
    in->n_embd = hp->n_embd;
    in->n_layer = hp->n_layer;
    in->n_ff = hp->n_ff;
    in->n_head = hp->n_head;
    in->n_head_kv = hp->n_head_kv;
    in->head_dim = hp->head_dim;
    in->head_dim_v = hp->head_dim_v;
    in->n_rot = hp->n_rot;
    in->rms_eps = hp->rms_eps;
    in->rope_base = hp->rope_base;
    in->rope_freq_scale = hp->rope_freq_scale;
    in->rope_scaling = hp->rope_scaling == LLM_ROPE_SCALING_YARN     ? "yarn"
                       : hp->rope_scaling == LLM_ROPE_SCALING_LINEAR ? "linear"
                                                                     : "none";
    in->tied_output = m->w.output == m->w.tok_embd;
    in->file_bytes = tsl_gguf_file_size(m->gguf);
    uint64_t by_type[TSL_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < tsl_gguf_tensor_count(m->gguf); i++) {
        const tsl_gguf_tensor_info *ti = tsl_gguf_tensor(m->gguf, i);
        in->n_params += (uint64_t)(ti->ne[0] * ti->ne[1] * ti->ne[2] * ti->ne[3]);
        in->weight_bytes += ti->size;
        if (ti->type >= 0 && ti->type < TSL_TYPE_COUNT) by_type[ti->type] += ti->size;
    }
    int best = TSL_TYPE_F32;
    for (int t = 0; t < TSL_TYPE_COUNT; t++)
        if (by_type[t] > by_type[best]) best = t;
    in->weight_type = (tsl_type)best;
    in->decode_bytes = in->weight_bytes;
    if (!in->tied_output) in->decode_bytes -= tsl_nbytes(m->w.tok_embd);
}

tsl_model *tsl_model_load(const char *path, const tsl_model_params *params, tsl_error *err) {
    tsl_model_params p = params ? *params : tsl_model_default_params();
    tsl_error_clear(err);
    llm_loader L = {.path = path ? path : "(null)", .err = err};
    if (!path) {
        llm_fail(&L, TSL_FAILED, "no path given");
        return NULL;
    }
    tsl_model *m = calloc(1, sizeof *m);
    if (!m) {
        llm_fail(&L, TSL_ALLOC_FAILED, "out of memory");
        return NULL;
    }
    L.m = m;
    pthread_mutex_init(&m->dev_mu, NULL);
    m->progress = p.progress;
    snprintf(m->path, sizeof m->path, "%s", path);
    m->gguf = tsl_gguf_open(path, err);
    if (!m->gguf) goto fail; /* err names the field and offset */

    const char *arch = NULL;
    tsl_error e;
    if (tsl_gguf_get_str(m->gguf, "general.architecture", &arch, NULL, &e) != TSL_SUCCESS) {
        llm_fail(&L, TSL_FAILED, "%s", e.message);
        goto fail;
    }
    if (!strcmp(arch, "llama")) {
        m->hp.arch = TSL_ARCH_LLAMA;
    } else if (!strcmp(arch, "qwen2")) {
        m->hp.arch = TSL_ARCH_QWEN2;
    } else if (!strcmp(arch, "qwen3")) {
        m->hp.arch = TSL_ARCH_QWEN3;
    } else {
        llm_fail(&L, TSL_FAILED, "architecture '%.64s' is not supported (llama, qwen2, qwen3)", arch);
        goto fail;
    }
    snprintf(L.arch, sizeof L.arch, "%s", arch);
    const char *gname = NULL;
    if (tsl_gguf_get_str(m->gguf, "general.name", &gname, NULL, NULL) == TSL_SUCCESS && gname[0]) {
        snprintf(m->name, sizeof m->name, "%s", gname);
    } else {
        const char *b = strrchr(path, '/');
        snprintf(m->name, sizeof m->name, "%s", b ? b + 1 : path);
    }
    if (!llm_read_hparams(&L)) goto fail;

    /* every tensor of the file, zero-copy */
    const int64_t nt = tsl_gguf_tensor_count(m->gguf);
    tsl_ctx_params cp = {.mem_size = (size_t)(nt + 8) * (sizeof(tsl_tensor) + 128), .no_alloc = true};
    m->wctx = tsl_ctx_new(cp);
    L.by_index = calloc((size_t)(nt > 0 ? nt : 1), sizeof *L.by_index);
    if (!m->wctx || !L.by_index) {
        llm_fail(&L, TSL_ALLOC_FAILED, "out of memory");
        goto fail;
    }
    if (tsl_gguf_load_tensors(m->gguf, m->wctx, err) != TSL_SUCCESS) goto fail;
    int64_t i = 0;
    for (tsl_tensor *t = tsl_ctx_first_tensor(m->wctx); t && i < nt; t = tsl_ctx_next_tensor(m->wctx, t))
        L.by_index[i++] = t;
    int64_t ie = tsl_gguf_find_tensor(m->gguf, "token_embd.weight");
    if (ie < 0) {
        llm_fail(&L, TSL_FAILED, "tensor 'token_embd.weight' is missing (the %s architecture needs it)", arch);
        goto fail;
    }
    int64_t nv = L.by_index[ie]->ne[1];
    if (nv < 1 || nv > INT32_MAX) {
        llm_fail(&L, TSL_FAILED, "token_embd.weight has %lld rows", (long long)nv);
        goto fail;
    }
    m->hp.n_vocab = (int32_t)nv;
    if (!llm_find_tensors(&L)) goto fail;
    if (!llm_load_tokenizer(&L)) goto fail;
    llm_fill_info(m);
    free(L.by_index);
    /* a bar for a file that loads in a blink is noise */
    if (p.prefetch) llm_prefetch(m, p.progress && isatty(2) && m->info.weight_bytes >= LLM_PROGRESS_MIN_BYTES);
    tsl_error_clear(err);
    return m;
fail:
    free(L.by_index);
    tsl_model_free(m);
    return NULL;
}

void tsl_model_free(tsl_model *m) {
    if (!m) return;
    llm_devw_free_all(m); /* before the mapping their recovery source points into */
    pthread_mutex_destroy(&m->dev_mu);
    tok_free(m->tok);
    free(m->w.layers);
    tsl_ctx_free(m->wctx);
    tsl_gguf_close(m->gguf);
    free(m);
}

const tsl_model_info *tsl_model_get_info(const tsl_model *m) { return m ? &m->info : NULL; }

/* ---- tokenizer wrappers --------------------------------------------------------------- */

int32_t tsl_llm_tokenize(const tsl_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                         int32_t *out, int32_t cap) {
    if (!m) return -1;
    return tok_encode(m->tok, text, len, add_special, parse_special, out, cap);
}

int64_t tsl_llm_detokenize(const tsl_model *m, const int32_t *ids, size_t n, bool skip_special, char *out,
                           size_t cap) {
    if (!m) return -1;
    return tok_decode(m->tok, ids, n, skip_special, out, cap);
}

int64_t tsl_llm_token_piece(const tsl_model *m, int32_t id, char *out, size_t cap) {
    if (!m) return -1;
    return tok_token_to_piece(m->tok, id, false, out, cap);
}

int32_t tsl_llm_token_bos(const tsl_model *m) { return m ? tok_bos(m->tok) : -1; }
int32_t tsl_llm_token_eos(const tsl_model *m) { return m ? tok_eos(m->tok) : -1; }

bool tsl_llm_token_is_eog(const tsl_model *m, int32_t id) {
    if (!m || id < 0) return false;
    for (int i = 0; i < m->n_eog; i++)
        if (m->eog[i] == id) return true;
    return false;
}

/* ---- contexts ---------------------------------------------------------------------------- */

/* Attention spans the positions in use rounded up to this (see arch.c): the
 * graph's shapes, and so the memory it needs, change once per this many
 * decoded tokens, not with each. The extra positions cost a little attention
 * work next to reading the weights. */
#define LLM_KV_PAD 256

/* Decode steps in one graph (tsl_llm_generate_greedy; at most
 * TSL_LLM_MAX_STEPS, each step's argmax one read-back output). One by default: on the
 * H200 a token of an 8-step graph costs what a token of one step costs
 * (the host's work a compute grows with the graph's nodes), and the larger
 * graph's first computes cost more (bench/RESULTS.md, run 144). */
#define LLM_DEFAULT_STEPS 1

struct tsl_llm_ctx {
    tsl_model *m;
    tsl_backend *be;      /* computes the graphs: the caller's, or our own CPU backend */
    bool own_be;
    bool host;            /* be's buffers are host memory: weights read from the mapping */
    tsl_backend *cpu;     /* on a device: where what the device cannot run goes (ours) */
    tsl_sched *sched;     /* on a device: splits each graph over [be, cpu] */
    const llm_weights *w; /* the model's weights, or its copy on be's device */
    llm_devw *devw;       /* that copy (NULL on the host) */
    llm_kv *kv;
    tsl_gallocr *ga;      /* on the host: activations */
    tsl_buffer *inbuf;    /* the graph inputs (tokens, positions, mask) in be's memory (llm_inputs_reserve) */
    tsl_context *in_ctx;  /* in_blob's metadata */
    tsl_tensor *in_blob;  /* I8 over all of inbuf: the inputs go up in one copy */
    unsigned char *in_host; /* their bytes, assembled before the copy */
    size_t in_size, in_align;
    tsl_llm_params p;
    tsl_retry_policy retry;
    int32_t n_past;
    int32_t *history; /* n_ctx entries; [0, n_past) valid */
    /* n_ctx entries: 1 where a batch of the history started. A rebuild
     * replays the history in the same batches, so the cache (and every
     * token after it) comes out bit for bit as before: a batch of one token
     * and a batch of many run different kernels (on a GPU with integer dot
     * products the former rounds its activations to Q8_0) */
    unsigned char *hbatch;
    float *logits;    /* n_logits x n_vocab */
    size_t logits_cap; /* floats */
    int32_t n_logits;
    bool need_rebuild; /* the cache was lost (DEVICE_LOST): re-run the history first */
    /* [n > 1]: the last graph of this kind (single-token decode, or a
     * batch; they use different kernels) ran wholly on the device, so the
     * next one does not ask the device about each weight-reading node
     * (llm_host_weights); a kernel failure clears it */
    bool dev_only[2];
    size_t graph_mem; /* metadata bytes to give the next graph's context (0: the bound) */
    /* the last single-token graph, kept for the next token (llm_run_batch) */
    tsl_context *dg_ctx;
    arch_graph dg;
    bool dg_all;
    bool dg_greedy;      /* built with the logits' argmax, its logits not read back */
    int32_t dg_steps;    /* decode steps in it (arch_build) */
    uint64_t dg_in_gen;  /* in_gen when its inputs were placed */
    int dg_host_weights; /* its weight reads pointed at the mapping (llm_host_weights) */
    uint64_t in_gen;     /* bumped each time inbuf is allocated */
    llm_timings tm;
};

tsl_llm_params tsl_llm_default_params(void) {
    return (tsl_llm_params){.n_ctx = 0,
                            .n_batch = LLM_DEFAULT_BATCH,
                            .backend = NULL,
                            .n_threads = 0,
                            .kv_type = TSL_TYPE_F16,
                            .logits_all = false,
                            .retry_attempts = 0,
                            .n_steps = 0};
}

static size_t llm_round(size_t v, size_t a) { return a > 1 ? (v + a - 1) / a * a : v; }

/* Positions the graph of a batch ending at position end (exclusive) attends. */
static int32_t llm_n_kv(const tsl_llm_ctx *c, int32_t end) {
    int64_t k = (int64_t)llm_round((size_t)end, LLM_KV_PAD);
    return k < c->p.n_ctx ? (int32_t)k : c->p.n_ctx;
}

/* The inputs of a batch of n tokens (rows positions and mask rows: n, or
 * the steps of a multi-step decode) attending n_kv positions, in inbuf:
 * tokens at 0, positions at *pos_off, the mask at *mask_off. */
static size_t llm_input_layout(const tsl_llm_ctx *c, int32_t n, int32_t rows, int32_t n_kv, size_t *pos_off,
                               size_t *mask_off) {
    const size_t a = llm_round((size_t)n * sizeof(int32_t), c->in_align);
    const size_t b = llm_round((size_t)rows * sizeof(int32_t), c->in_align);
    *pos_off = a;
    *mask_off = a + b;
    return a + b + (size_t)n_kv * (size_t)rows * sizeof(float);
}

/* Room for `need` bytes of graph inputs: the buffer on the backend, the
 * tensor spanning it (one copy fills all the inputs of a batch) and the
 * host bytes they are assembled in. Grows by half again when too small, so
 * it is reallocated a handful of times in a context's life (the first
 * prompt, then a longer attention span in a batch), never per token, and
 * stays the size of the batches actually run rather than of the largest
 * possible one (n_batch tokens over n_ctx positions). */
static tsl_status llm_inputs_reserve(tsl_llm_ctx *c, size_t need, tsl_error *err) {
    if (need <= c->in_size) return TSL_SUCCESS;
    size_t size = c->in_size + c->in_size / 2;
    if (size < need) size = need;
    size = llm_round(size, 4096);
    tsl_buffer_free(c->inbuf);
    tsl_ctx_free(c->in_ctx);
    c->inbuf = NULL;
    c->in_ctx = NULL;
    c->in_blob = NULL;
    c->in_size = 0;
    unsigned char *h = realloc(c->in_host, size);
    if (!h) return error_set(err, TSL_ALLOC_FAILED, "", "", -1, NULL, NULL, "llm context: out of memory");
    c->in_host = h;
    c->inbuf = tsl_buffer_alloc(c->be, size, err);
    if (!c->inbuf) return err ? err->status : TSL_ALLOC_FAILED;
    c->in_ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 4 * (sizeof(tsl_tensor) + 64), .no_alloc = true});
    if (c->in_ctx) c->in_blob = tsl_new_tensor_1d(c->in_ctx, TSL_TYPE_I8, (int64_t)size);
    if (!c->in_blob) return error_set(err, TSL_ALLOC_FAILED, "", "", -1, NULL, NULL, "llm context: out of memory");
    tsl_tensor_set_name(c->in_blob, "inp (all)");
    c->in_gen++; /* inputs placed in the old buffer are gone */
    tsl_status s = tsl_buffer_place(c->inbuf, c->in_blob, 0, err);
    if (s == TSL_SUCCESS) c->in_size = size;
    return s;
}

tsl_llm_ctx *tsl_llm_ctx_new(tsl_model *m, const tsl_llm_params *params, tsl_error *err) {
    tsl_error_clear(err);
    if (!m) {
        error_set(err, TSL_FAILED, "", "", -1, NULL, NULL, "llm context: no model");
        return NULL;
    }
    tsl_llm_params p = params ? *params : tsl_llm_default_params();
    if (p.n_ctx < 0 || p.n_batch < 0 || p.retry_attempts < 0) {
        error_set(err, TSL_FAILED, "", "", -1, NULL, NULL,
                  "llm context: n_ctx (%d), n_batch (%d) and retry_attempts (%d) must not be negative", (int)p.n_ctx,
                  (int)p.n_batch, (int)p.retry_attempts);
        return NULL;
    }
    if (p.n_steps < 0 || p.n_steps > TSL_LLM_MAX_STEPS) {
        error_set(err, TSL_FAILED, "", "", -1, NULL, NULL, "llm context: n_steps %d is outside 0..%d (0: %d)",
                  (int)p.n_steps, TSL_LLM_MAX_STEPS, LLM_DEFAULT_STEPS);
        return NULL;
    }
    if (p.n_steps == 0) p.n_steps = LLM_DEFAULT_STEPS;
    if (p.n_ctx == 0) p.n_ctx = m->hp.n_ctx_train < LLM_DEFAULT_MAX_CTX ? m->hp.n_ctx_train : LLM_DEFAULT_MAX_CTX;
    if (p.n_ctx > m->hp.n_ctx_train)
        TSL_LOGW("llm context: %d positions, more than the %d the model was trained with; expect worse text past %d",
                 (int)p.n_ctx, (int)m->hp.n_ctx_train, (int)m->hp.n_ctx_train);
    if (p.n_batch == 0) p.n_batch = LLM_DEFAULT_BATCH;
    if (p.n_batch > p.n_ctx) p.n_batch = p.n_ctx;
    if (p.kv_type != TSL_TYPE_F16 && p.kv_type != TSL_TYPE_F32) {
        error_set(err, TSL_FAILED, "", "", -1, NULL, NULL, "llm context: kv_type %s is not supported (f16, f32)",
                  tsl_type_name(p.kv_type));
        return NULL;
    }
    tsl_llm_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        error_set(err, TSL_ALLOC_FAILED, "", "", -1, NULL, NULL, "llm context: out of memory");
        return NULL;
    }
    c->m = m;
    c->p = p;
    c->retry = tsl_retry_default();
    if (p.retry_attempts > 0) c->retry.max_attempts = p.retry_attempts;
    c->be = p.backend;
    if (!c->be) {
        c->be = tsl_backend_cpu_new(p.n_threads, err);
        if (!c->be) {
            free(c);
            return NULL;
        }
        c->own_be = true;
    }
    c->kv = kv_new(&m->hp, p.n_ctx, p.kv_type, c->be, err);
    if (!c->kv) goto fail;
    /* a backend whose buffers the host can address reads the weights where
     * the file is mapped; any other needs them in its own memory */
    c->host = tsl_buffer_host_ptr(c->kv->buf) != NULL && !tsl_backend_is_vulkan(c->be);
    c->w = llm_weights_for(m, c->be, c->host, &c->devw, err);
    c->in_align = tsl_backend_alignment(c->be) ? tsl_backend_alignment(c->be) : 64;
    if (!c->w || kv_zero(c->kv, err) != TSL_SUCCESS) goto fail;
    if (c->host) {
        c->ga = tsl_gallocr_new(c->be);
    } else {
        /* The device runs what it can; the rest (an op or type it lacks, a
         * kernel that failed to build) goes to the CPU and the run goes on.
         * Fault-injection rules from TSL_FAULT address the backend the
         * caller chose, not this internal fallback. */
        c->cpu = tsl_backend_cpu_new(p.n_threads, err);
        if (!c->cpu) goto fail;
        tsl_backend_inject_clear(c->cpu);
        tsl_backend *list[2] = {c->be, c->cpu};
        c->sched = tsl_sched_new(list, 2, (tsl_sched_params){.retry_on_fallback = false}, err);
        if (!c->sched) goto fail;
    }
    c->history = calloc((size_t)p.n_ctx, sizeof *c->history);
    c->hbatch = calloc((size_t)p.n_ctx, 1);
    if ((c->host && !c->ga) || !c->history || !c->hbatch) {
        error_set(err, TSL_ALLOC_FAILED, "", "", -1, NULL, NULL, "llm context: out of memory");
        goto fail;
    }
    return c;
fail:
    tsl_llm_ctx_free(c);
    return NULL;
}

void tsl_llm_ctx_free(tsl_llm_ctx *c) {
    if (!c) return;
    tsl_ctx_free(c->dg_ctx);
    tsl_sched_free(c->sched);
    tsl_gallocr_free(c->ga);
    tsl_buffer_free(c->inbuf);
    tsl_ctx_free(c->in_ctx);
    kv_free(c->kv);
    tsl_backend_free(c->cpu);
    if (c->own_be) tsl_backend_free(c->be);
    free(c->in_host);
    free(c->history);
    free(c->hbatch);
    free(c->logits);
    free(c);
}

static bool llm_grow(void **p, size_t *cap, size_t want, size_t elem) {
    if (want <= *cap) return true;
    void *q = realloc(*p, want * elem);
    if (!q) return false;
    *p = q;
    *cap = want;
    return true;
}

static void llm_sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* A node the device cannot run (an op or type it lacks, a kernel that
 * failed to build) goes to the CPU; reading its weights from the device
 * would copy them back to the host on every compute. The CPU reads the
 * mapping instead: point such a node's weight sources at the model's own
 * tensors. Only nodes reading a weight are asked about. */
static void llm_host_weights(tsl_llm_ctx *c, tsl_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) {
        tsl_tensor *t = g->nodes[i];
        if (tsl_op_is_view(t->op) || t->op == TSL_OP_NONE) continue;
        bool reads = false;
        for (int j = 0; j < TSL_MAX_SRC && !reads; j++) reads = llm_devw_holds(c->devw, t->src[j]);
        if (!reads || tsl_backend_supports_op(c->be, t)) continue;
        for (int j = 0; j < TSL_MAX_SRC; j++) {
            if (!llm_devw_holds(c->devw, t->src[j])) continue;
            tsl_tensor *h = llm_devw_host_twin(c->m, c->devw, t->src[j]);
            if (h) {
                t->src[j] = h;
                c->tm.n_host_weights++;
            }
        }
    }
}

/* A graph on a device, through the scheduler, with the context's retry
 * policy for transient refusals (the same policy tsl_graph_compute_retry
 * applies on one backend). A rerun repeats every split: the cache writes of
 * the first attempt are rewritten with the same values. A kernel that fails
 * to build is found by the compute that first needs it, which fails before
 * submitting anything; the backend then answers supports_op false for it,
 * so the same graph is planned again once, with that op on the CPU, and the
 * decode goes on. */
static tsl_status llm_sched_compute(tsl_llm_ctx *c, tsl_graph *g, tsl_error *err) {
    const tsl_retry_policy *rp = &c->retry;
    double wait = rp->backoff_ms;
    int kernel_retries = 0;
    tsl_error rec;
    for (int attempt = 1;; attempt++) {
        tsl_status s = tsl_sched_compute(c->sched, g, &rec);
        if (s == TSL_FAILED && rec.kernel[0] && kernel_retries++ < 2 && rec.split >= 0 &&
            tsl_sched_split_backend(c->sched, rec.split, NULL, NULL) == c->be) {
            TSL_LOGW("llm decode: kernel %s failed on %s; running that op on %s from now on", rec.kernel,
                     tsl_backend_name(c->be), tsl_backend_name(c->cpu));
            c->tm.n_kernel_retries++;
            llm_host_weights(c, g); /* the op moves: its weights are read from the mapping now */
            attempt--;
            continue;
        }
        if (s != TSL_RETRY || attempt >= rp->max_attempts) {
            if (err) *err = rec;
            return s;
        }
        TSL_LOGI("llm decode: %s refused the compute (RETRY); attempt %d of %d in %.0f ms", tsl_backend_name(c->be),
                 attempt + 1, rp->max_attempts, wait);
        llm_sleep_ms((int)wait);
        wait *= rp->backoff_factor > 1 ? rp->backoff_factor : 1;
        if (wait > rp->max_backoff_ms) wait = rp->max_backoff_ms;
    }
}

/* A new graph for tokens [pos0, pos0 + n) in a context of its own. The
 * metadata arena is calloc'd per graph: it is sized by what the last graph
 * used (a third of the bound arch_graph_mem gives), falling back to the
 * bound if that is ever short. */
static tsl_status llm_graph_new(tsl_llm_ctx *c, int32_t n, int32_t pos0, int32_t n_kv, bool all, bool greedy,
                                int32_t steps, tsl_context **pctx, arch_graph *ag, tsl_error *err) {
    const tsl_model *m = c->m;
    const char *bn = tsl_backend_name(c->be), *bd = tsl_backend_device(c->be);
    const size_t bound = arch_graph_mem(m) * (size_t)steps;
    /* what the last graph used is a guide for one of as many steps */
    const size_t guess = c->graph_mem * (size_t)steps;
    tsl_ctx_params cp = {.mem_size = guess && guess < bound ? guess : bound, .no_alloc = true};
    for (;;) {
        tsl_context *ctx = tsl_ctx_new(cp);
        if (!ctx)
            return error_set(err, TSL_ALLOC_FAILED, bn, bd, -1, NULL, NULL, "llm decode: out of memory for the graph");
        memset(ag, 0, sizeof *ag);
        if (arch_build(m, c->w, c->kv, ctx, n, pos0, n_kv, all, greedy, steps, ag)) {
            size_t want = (tsl_ctx_used(ctx) + tsl_ctx_used(ctx) / 4) / (size_t)steps + ((size_t)64 << 10);
            if (want > c->graph_mem) c->graph_mem = want;
            *pctx = ctx;
            return TSL_SUCCESS;
        }
        if (cp.mem_size < bound) { /* short of room, maybe: once more with the bound */
            tsl_ctx_free(ctx);
            cp.mem_size = bound;
            continue;
        }
        tsl_status s = error_set(err, TSL_FAILED, bn, bd, -1, NULL, NULL, "llm decode: could not build the %s graph: %s",
                                 tsl_llm_arch_name(m->hp.arch), tsl_ctx_error(ctx) ? tsl_ctx_error(ctx) : "unknown error");
        tsl_ctx_free(ctx);
        return s;
    }
}

/* Forget the kept single-token graph. */
static void llm_drop_decode_graph(tsl_llm_ctx *c) {
    tsl_ctx_free(c->dg_ctx);
    c->dg_ctx = NULL;
}

/* One graph: tokens [pos0, pos0 + n), logits of the last token (or all) into
 * dst; or, with best, only the id of the last token's largest logit into
 * *best (the graph's argmax; its logits stay on the device); with steps > 1
 * (n = 1, best) that many greedy decode steps from tokens[0], at positions
 * [pos0, pos0 + steps), step s's choice into best[s]. A single
 * token's graph is kept for the next token (arch_move: its
 * activations placed again, a quantized cache's writes moved), as long as
 * its attention span, the logits
 * wanted and the input buffer stay the same: decoding builds a graph once
 * per LLM_KV_PAD positions, not per token. Any failure drops it. */
static tsl_status llm_run_batch(tsl_llm_ctx *c, const int32_t *tokens, int32_t n, int32_t pos0, bool all,
                                float *dst, int32_t *best, int32_t steps, tsl_error *err) {
    const tsl_model *m = c->m;
    double t0 = llm_now();
    tsl_status s = TSL_SUCCESS;
    const int32_t rows = n + steps - 1;
    const int32_t n_kv = llm_n_kv(c, pos0 + rows);
    size_t pos_off, mask_off;
    const size_t in_bytes = llm_input_layout(c, n, rows, n_kv, &pos_off, &mask_off);
    if ((s = llm_inputs_reserve(c, in_bytes, err)) != TSL_SUCCESS) return s;
    tsl_context *ctx = NULL;
    arch_graph ag;
    const int hw_start = c->tm.n_host_weights;
    const bool greedy = best != NULL;
    if (greedy) all = false;
    const bool reuse = n == 1 && c->dg_ctx && c->dg.n_kv == n_kv && c->dg_all == all && c->dg_greedy == greedy &&
                       c->dg_steps == steps && c->dg_in_gen == c->in_gen;
    if (reuse) {
        ctx = c->dg_ctx;
        arch_move(c->kv, &c->dg, pos0);
        ag = c->dg;
        c->tm.n_host_weights += c->dg_host_weights;
    } else {
        if (n == 1) llm_drop_decode_graph(c);
        if ((s = llm_graph_new(c, n, pos0, n_kv, all, greedy, steps, &ctx, &ag, err)) != TSL_SUCCESS) return s;
        /* read after every compute: the logits, or only their argmax (each step's) */
        if (greedy)
            for (int32_t k = 0; k < steps; k++) ag.bests[k]->flags |= TSL_FLAG_READBACK;
        else
            ag.logits->flags |= TSL_FLAG_READBACK;
        if (c->devw && !c->dev_only[n > 1]) llm_host_weights(c, ag.g);
        if ((s = tsl_buffer_place(c->inbuf, ag.tokens, 0, err)) != TSL_SUCCESS ||
            (s = tsl_buffer_place(c->inbuf, ag.pos, pos_off, err)) != TSL_SUCCESS ||
            (s = tsl_buffer_place(c->inbuf, ag.mask, mask_off, err)) != TSL_SUCCESS)
            goto done;
        if (n == 1) {
            c->dg_ctx = ctx;
            c->dg = ag;
            c->dg_all = all;
            c->dg_greedy = greedy;
            c->dg_steps = steps;
            c->dg_in_gen = c->in_gen;
        }
    }
    double t1 = llm_now();
    c->tm.build_ms += (t1 - t0) * 1e3;
    if (c->ga && (s = tsl_gallocr_alloc_graph(c->ga, ag.g, err)) != TSL_SUCCESS) goto done;
    double t2 = llm_now();
    c->tm.plan_ms += (t2 - t1) * 1e3;

    /* token (or step) i sits at position pos0 + i and sees positions 0..pos0 + i */
    memcpy(c->in_host, tokens, (size_t)n * sizeof(int32_t));
    int32_t *pos = (int32_t *)(c->in_host + pos_off);
    float *mask = (float *)(c->in_host + mask_off);
    for (int32_t i = 0; i < rows; i++) {
        float *row = mask + (size_t)i * (size_t)n_kv;
        const int32_t p = pos0 + i;
        for (int32_t j = 0; j < n_kv; j++) row[j] = j <= p ? 0.0f : -INFINITY;
        pos[i] = p;
    }
    if ((s = tsl_tensor_set(c->in_blob, c->in_host, 0, in_bytes, err)) != TSL_SUCCESS) goto done;
    double t3 = llm_now();
    c->tm.input_ms += (t3 - t2) * 1e3;

    if (c->sched)
        s = llm_sched_compute(c, ag.g, err);
    else if (c->retry.max_attempts > 1)
        s = tsl_graph_compute_retry(c->be, ag.g, &c->retry, err);
    else
        s = tsl_backend_graph_compute(c->be, ag.g, err);
    double t4 = llm_now();
    c->tm.compute_ms += (t4 - t3) * 1e3;
    c->tm.n_nodes = ag.g->n_nodes;
    c->tm.n_compute = 0;
    for (int i = 0; i < ag.g->n_nodes; i++)
        c->tm.n_compute += !tsl_op_is_view(ag.g->nodes[i]->op) && ag.g->nodes[i]->op != TSL_OP_NONE;
    c->tm.n_kv = n_kv;
    c->tm.n_graphs_reused += reuse;
    /* what the kept graph reads from the mapping: its earlier redirects and
     * any a kernel failure in this compute added */
    if (ctx == c->dg_ctx) c->dg_host_weights = c->tm.n_host_weights - hw_start;
    c->tm.n_splits = c->sched ? tsl_sched_n_splits(c->sched) : 1;
    c->tm.n_copies = c->sched ? tsl_sched_n_copies(c->sched) : 0;
    if (c->sched) {
        c->tm.sched_ms += tsl_sched_plan_us(c->sched) * 1e-3;
        c->tm.n_plans_reused = tsl_sched_n_reused(c->sched);
    }
    c->dev_only[n > 1] = s == TSL_SUCCESS && c->tm.n_splits == 1 && c->tm.n_host_weights == 0 &&
                         c->tm.n_kernel_retries == 0;
    if (s != TSL_SUCCESS) goto done;
    c->tm.act_buffer = ag.logits->buffer;
    for (int32_t k = 0; greedy && k < steps && s == TSL_SUCCESS; k++) {
        tsl_tensor *bt = ag.bests[k], *lg = bt->src[0];
        s = tsl_tensor_get(bt, &best[k], 0, sizeof *best, err);
        /* The argmax's rule is the sampler's: the first of equal largest
         * logits, NaN and -inf never chosen; a row with nothing above -inf
         * gives 0. Only then is the row's first logit read, to tell the
         * two apart: the sampler finds no token there. */
        float l0 = 0.0f;
        if (s == TSL_SUCCESS && best[k] == 0 && (s = tsl_tensor_get(lg, &l0, 0, sizeof l0, err)) == TSL_SUCCESS &&
            !(l0 > -INFINITY))
            s = error_set(err, TSL_FAILED, tsl_backend_name(c->be), tsl_backend_device(c->be), -1, lg, NULL,
                          "llm decode: the logits of the token at position %d have no value above -inf (NaN or "
                          "-inf everywhere): no token can be chosen; the weights or the compute are broken",
                          (int)(pos0 + n - 1 + k));
        if (s == TSL_SUCCESS && (best[k] < 0 || best[k] >= m->hp.n_vocab))
            s = error_set(err, TSL_FAILED, tsl_backend_name(c->be), tsl_backend_device(c->be), -1, bt, NULL,
                          "llm decode: the logits' argmax gave %d, outside the vocabulary (%d tokens)", (int)best[k],
                          (int)m->hp.n_vocab);
    }
    if (!greedy) {
        s = tsl_tensor_get(ag.logits, dst, 0, (size_t)ag.n_out * (size_t)m->hp.n_vocab * sizeof(float), err);
    }
    c->tm.output_ms += (llm_now() - t4) * 1e3;
done:
    if (ctx == c->dg_ctx) {
        if (s != TSL_SUCCESS) llm_drop_decode_graph(c);
    } else {
        tsl_ctx_free(ctx);
    }
    return s;
}

static tsl_status llm_rebuild(tsl_llm_ctx *c, tsl_error *err);

/* Before a decode: fresh timings; after a recovery (ours or another
 * context's on the same device), which zeroed the weights it could not
 * restore by itself and the cache, upload the former again and re-run the
 * history into the latter. */
static tsl_status llm_prepare(tsl_llm_ctx *c, tsl_error *err) {
    memset(&c->tm, 0, sizeof c->tm);
    tsl_status ws = llm_devw_ensure(c->m, c->devw, tsl_buffer_is_lost(c->kv->buf), err);
    if (ws != TSL_SUCCESS) return ws;
    if (tsl_buffer_is_lost(c->kv->buf)) c->need_rebuild = true;
    return c->need_rebuild ? llm_rebuild(c, err) : TSL_SUCCESS;
}

static tsl_status llm_decode(tsl_llm_ctx *c, const int32_t *tokens, int32_t n, int32_t *best, tsl_error *err) {
    tsl_error_clear(err);
    if (!c) return error_set(err, TSL_FAILED, "", "", -1, NULL, NULL, "llm decode: no context");
    const char *bn = tsl_backend_name(c->be), *bd = tsl_backend_device(c->be);
    c->n_logits = 0;
    if (!tokens || n < 1)
        return error_set(err, TSL_FAILED, bn, bd, -1, NULL, NULL, "llm decode: no tokens given (n = %d)", (int)n);
    if (n > c->p.n_ctx - c->n_past)
        return error_set(err, TSL_FAILED, bn, bd, -1, NULL, NULL,
                         "llm decode: %d tokens do not fit in the context: %d of %d positions left", (int)n,
                         (int)(c->p.n_ctx - c->n_past), (int)c->p.n_ctx);
    const int32_t nv = c->m->hp.n_vocab;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= nv)
            return error_set(err, TSL_FAILED, bn, bd, -1, NULL, NULL,
                             "llm decode: token %d (at index %d) is outside the vocabulary (%d tokens)",
                             (int)tokens[i], (int)i, (int)nv);
    tsl_status ps = llm_prepare(c, err);
    if (ps != TSL_SUCCESS) return ps;
    const bool all = c->p.logits_all && !best;
    const size_t n_out = all ? (size_t)n : 1;
    if (!best && !llm_grow((void **)&c->logits, &c->logits_cap, n_out * (size_t)nv, sizeof(float)))
        return error_set(err, TSL_ALLOC_FAILED, bn, bd, -1, NULL, NULL,
                         "llm decode: out of memory for %zu x %d logits", n_out, (int)nv);
    const int32_t start = c->n_past;
    for (int32_t off = 0; off < n; off += c->p.n_batch) {
        const int32_t nb = n - off < c->p.n_batch ? n - off : c->p.n_batch;
        float *dst = best ? NULL : all ? c->logits + (size_t)off * (size_t)nv : c->logits;
        tsl_status s = llm_run_batch(c, tokens + off, nb, c->n_past, all, dst, best, 1, err);
        if (s != TSL_SUCCESS) {
            c->n_past = start; /* the batch's cache entries are not counted */
            /* the device's memory (this cache) does not survive its loss */
            if (s == TSL_DEVICE_LOST) c->need_rebuild = true;
            return s;
        }
        memmove(c->history + c->n_past, tokens + off, (size_t)nb * sizeof *tokens); /* rebuild: same place */
        c->hbatch[c->n_past] = 1;
        memset(c->hbatch + c->n_past + 1, 0, (size_t)(nb - 1));
        c->n_past += nb;
    }
    c->n_logits = best ? 0 : (int32_t)n_out;
    return TSL_SUCCESS;
}

tsl_status tsl_llm_decode(tsl_llm_ctx *c, const int32_t *tokens, int32_t n, tsl_error *err) {
    return llm_decode(c, tokens, n, NULL, err);
}

tsl_status tsl_llm_decode_greedy(tsl_llm_ctx *c, const int32_t *tokens, int32_t n, int32_t *next, tsl_error *err) {
    if (!next) {
        tsl_error_clear(err);
        if (c) c->n_logits = 0;
        return error_set(err, TSL_FAILED, c ? tsl_backend_name(c->be) : "", c ? tsl_backend_device(c->be) : "", -1,
                         NULL, NULL, "llm decode_greedy: no place for the next token (next is NULL)");
    }
    *next = -1;
    int32_t id = -1;
    tsl_status s = llm_decode(c, tokens, n, &id, err);
    if (s == TSL_SUCCESS) *next = id;
    return s;
}

tsl_status tsl_llm_generate_greedy(tsl_llm_ctx *c, int32_t token, int32_t n, int32_t *out, tsl_error *err) {
    tsl_error_clear(err);
    if (!c) return error_set(err, TSL_FAILED, "", "", -1, NULL, NULL, "llm generate_greedy: no context");
    const char *bn = tsl_backend_name(c->be), *bd = tsl_backend_device(c->be);
    c->n_logits = 0;
    if (!out)
        return error_set(err, TSL_FAILED, bn, bd, -1, NULL, NULL,
                         "llm generate_greedy: no place for the tokens (out is NULL)");
    if (n < 1)
        return error_set(err, TSL_FAILED, bn, bd, -1, NULL, NULL, "llm generate_greedy: no tokens asked for (n = %d)",
                         (int)n);
    for (int32_t i = 0; i < n; i++) out[i] = -1;
    if (n > c->p.n_ctx - c->n_past)
        return error_set(err, TSL_FAILED, bn, bd, -1, NULL, NULL,
                         "llm generate_greedy: %d tokens do not fit in the context: %d of %d positions left", (int)n,
                         (int)(c->p.n_ctx - c->n_past), (int)c->p.n_ctx);
    if (token < 0 || token >= c->m->hp.n_vocab)
        return error_set(err, TSL_FAILED, bn, bd, -1, NULL, NULL,
                         "llm generate_greedy: token %d is outside the vocabulary (%d tokens)", (int)token,
                         (int)c->m->hp.n_vocab);
    tsl_status s = llm_prepare(c, err);
    if (s != TSL_SUCCESS) return s;
    const int32_t start = c->n_past;
    int32_t cur = token;
    for (int32_t done = 0; done < n;) {
        const int32_t pos = c->n_past;
        int32_t k = n - done < c->p.n_steps ? n - done : c->p.n_steps;
        /* no step attends more positions than its single-token decode
         * would: the chunk stays in pos's attention span */
        const int32_t span = llm_n_kv(c, pos + 1);
        if (pos + k > span) k = span - pos;
        s = llm_run_batch(c, &cur, 1, pos, false, NULL, out + done, k, err);
        if (s != TSL_SUCCESS) {
            c->n_past = start; /* all or nothing, as a decode */
            if (s == TSL_DEVICE_LOST) c->need_rebuild = true;
            for (int32_t i = 0; i < n; i++) out[i] = -1;
            return s;
        }
        for (int32_t i = 0; i < k; i++) {
            c->history[pos + i] = i == 0 ? cur : out[done + i - 1];
            c->hbatch[pos + i] = 1; /* each a batch of one: a rebuild replays it as one */
        }
        c->n_past += k;
        cur = out[done + k - 1];
        done += k;
    }
    return TSL_SUCCESS;
}

const float *tsl_llm_logits(const tsl_llm_ctx *c, int32_t i) {
    if (!c || c->n_logits == 0) return NULL;
    if (i == -1) i = c->n_logits - 1;
    if (i < 0 || i >= c->n_logits) return NULL;
    return c->logits + (size_t)i * (size_t)c->m->hp.n_vocab;
}

int32_t tsl_llm_n_logits(const tsl_llm_ctx *c) { return c ? c->n_logits : 0; }
int32_t tsl_llm_n_ctx(const tsl_llm_ctx *c) { return c ? c->p.n_ctx : 0; }
int32_t tsl_llm_n_steps(const tsl_llm_ctx *c) { return c ? c->p.n_steps : 0; }
int32_t tsl_llm_n_past(const tsl_llm_ctx *c) { return c ? c->n_past : 0; }
const int32_t *tsl_llm_history(const tsl_llm_ctx *c) { return c ? c->history : NULL; }
tsl_backend *tsl_llm_backend(const tsl_llm_ctx *c) { return c ? c->be : NULL; }
const tsl_model *tsl_llm_model(const tsl_llm_ctx *c) { return c ? c->m : NULL; }
llm_kv *llm_ctx_kv(tsl_llm_ctx *c) { return c ? c->kv : NULL; }
llm_devw *llm_ctx_devw(tsl_llm_ctx *c) { return c ? c->devw : NULL; }
const llm_weights *llm_ctx_weights(const tsl_llm_ctx *c) { return c ? c->w : NULL; }
const llm_timings *llm_ctx_timings(const tsl_llm_ctx *c) { return c ? &c->tm : NULL; }
tsl_backend *llm_ctx_fallback(const tsl_llm_ctx *c) { return c ? c->cpu : NULL; }

tsl_status tsl_llm_truncate(tsl_llm_ctx *c, int32_t n_keep, tsl_error *err) {
    if (!c) return error_set(err, TSL_FAILED, "", "", -1, NULL, NULL, "llm truncate: no context");
    if (n_keep < 0 || n_keep > c->n_past)
        return error_set(err, TSL_FAILED, tsl_backend_name(c->be), tsl_backend_device(c->be), -1, NULL, NULL,
                         "llm truncate: n_keep %d is outside 0..%d (the positions in use)", (int)n_keep,
                         (int)c->n_past);
    c->n_past = n_keep;
    c->n_logits = 0;
    if (n_keep == 0) c->need_rebuild = false;
    return TSL_SUCCESS;
}

void tsl_llm_clear(tsl_llm_ctx *c) {
    if (!c) return;
    c->n_past = 0;
    c->n_logits = 0;
    c->need_rebuild = false;
}

/* Re-run the history into the cache. On failure n_past still counts the
 * history and need_rebuild stays set, so the next decode (or rebuild) tries
 * again. */
static tsl_status llm_rebuild(tsl_llm_ctx *c, tsl_error *err) {
    const int32_t n = c->n_past;
    c->n_past = 0;
    c->n_logits = 0;
    c->need_rebuild = false;
    tsl_buffer_clear_lost(c->kv->buf); /* what it holds from here on is rebuilt */
    if (n == 0) return TSL_SUCCESS;
    /* decode reads its tokens from the history it writes: the same entries,
     * rewritten with the same values, one batch behind the reads; batch by
     * batch as they first ran (hbatch). Only the last token's logits are
     * kept, whatever logits_all says: a whole history's worth would be
     * n_ctx x n_vocab floats. */
    const bool all = c->p.logits_all;
    c->p.logits_all = false;
    tsl_status s = TSL_SUCCESS;
    for (int32_t i = 0; i < n && s == TSL_SUCCESS;) {
        int32_t e = i + 1;
        while (e < n && !c->hbatch[e]) e++;
        s = tsl_llm_decode(c, c->history + i, e - i, err);
        i = e;
    }
    c->p.logits_all = all;
    if (s != TSL_SUCCESS) {
        c->n_past = n;
        c->need_rebuild = true;
    }
    return s;
}

tsl_status tsl_llm_rebuild(tsl_llm_ctx *c, tsl_error *err) {
    tsl_error_clear(err);
    if (!c) return error_set(err, TSL_FAILED, "", "", -1, NULL, NULL, "llm rebuild: no context");
    return llm_rebuild(c, err);
}
