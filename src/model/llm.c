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
 * Weights are never copied: tsl_gguf_load_tensors gives tensors whose data
 * point into the read-only mapping, and the CPU reads them there. Resident
 * memory is then the file's pages (shared with the page cache), the KV
 * cache, and one activation buffer the graph allocator sizes to the largest
 * batch. Loading reads every page once in order (after MADV_WILLNEED) so
 * the first token does not pay for thousands of page faults, and so a
 * progress bar has something true to show.
 *
 * Decoding builds a fresh graph per batch in a small metadata context (a
 * graph depends on the batch's positions and length; building one costs
 * microseconds next to computing it), places it with the context's graph
 * allocator, fills the inputs (tokens, positions, causal mask) and computes.
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
    if (!llm_tensor(L, &m->tok_embd, "token_embd.weight", true, E, V, "n_embd, n_vocab") ||
        !llm_tensor(L, &m->output_norm, "output_norm.weight", true, E, 0, "n_embd") ||
        !llm_tensor(L, &m->output, "output.weight", false, E, V, "n_embd, n_vocab") ||
        !llm_tensor(L, &m->rope_freqs, "rope_freqs.weight", false, hp->n_rot / 2, 0, "rope.dimension_count / 2"))
        return false;
    if (!m->output) m->output = m->tok_embd; /* tied embeddings */

    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return llm_fail(L, TSL_ALLOC_FAILED, "out of memory");
    const bool qwen2 = hp->arch == TSL_ARCH_QWEN2, qwen3 = hp->arch == TSL_ARCH_QWEN3;
    char n[TSL_MAX_NAME];
#define LLM_T(field, suffix, req, a, b, what)                                                                \
    (snprintf(n, sizeof n, "blk.%d." suffix, il), llm_tensor(L, &ly->field, n, req, a, b, what))
    for (int il = 0; il < hp->n_layer; il++) {
        llm_layer *ly = &m->layers[il];
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

static double llm_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void llm_progress_draw(const char *name, size_t done, size_t total) {
    const int W = 30;
    int fill = total ? (int)((double)done / (double)total * W) : W;
    char bar[32];
    for (int i = 0; i < W; i++) bar[i] = i < fill ? '#' : ' ';
    bar[W] = 0;
    fprintf(stderr, "\rloading %s [%s] %3d%% %.2f/%.2f GB", name, bar, total ? (int)(100.0 * done / total) : 100,
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
                llm_progress_draw(name, end, total);
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
    in->tied_output = m->output == m->tok_embd;
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
    if (!in->tied_output) in->decode_bytes -= tsl_nbytes(m->tok_embd);
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
    tok_free(m->tok);
    free(m->layers);
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

struct tsl_llm_ctx {
    tsl_model *m;
    tsl_backend *be;
    bool own_be;
    llm_kv *kv;
    tsl_gallocr *ga;
    tsl_llm_params p;
    tsl_retry_policy retry;
    int32_t n_past;
    int32_t *history; /* n_ctx entries; [0, n_past) valid */
    float *logits;    /* n_logits x n_vocab */
    size_t logits_cap; /* floats */
    int32_t n_logits;
    float *mask;      /* host staging for the mask input */
    size_t mask_cap;  /* floats */
    int32_t *pos;     /* host staging for the positions, n_batch entries */
    bool need_rebuild; /* the cache was lost (DEVICE_LOST): re-run the history first */
};

tsl_llm_params tsl_llm_default_params(void) {
    return (tsl_llm_params){.n_ctx = 0,
                            .n_batch = LLM_DEFAULT_BATCH,
                            .backend = NULL,
                            .n_threads = 0,
                            .kv_type = TSL_TYPE_F16,
                            .logits_all = false,
                            .retry_attempts = 0};
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
    c->ga = tsl_gallocr_new(c->be);
    c->history = calloc((size_t)p.n_ctx, sizeof *c->history);
    c->pos = calloc((size_t)p.n_batch, sizeof *c->pos);
    if (!c->ga || !c->history || !c->pos) {
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
    tsl_gallocr_free(c->ga);
    kv_free(c->kv);
    if (c->own_be) tsl_backend_free(c->be);
    free(c->history);
    free(c->logits);
    free(c->mask);
    free(c->pos);
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

/* One graph: tokens [pos0, pos0 + n), logits of the last token (or all) into dst. */
static tsl_status llm_run_batch(tsl_llm_ctx *c, const int32_t *tokens, int32_t n, int32_t pos0, bool all,
                                float *dst, tsl_error *err) {
    const tsl_model *m = c->m;
    tsl_ctx_params cp = {.mem_size = arch_graph_mem(m), .no_alloc = true};
    tsl_context *ctx = tsl_ctx_new(cp);
    if (!ctx) return error_set(err, TSL_ALLOC_FAILED, tsl_backend_name(c->be), tsl_backend_device(c->be), -1, NULL,
                               NULL, "llm decode: out of memory for the graph");
    arch_graph ag;
    memset(&ag, 0, sizeof ag);
    tsl_status s = TSL_SUCCESS;
    if (!arch_build(m, c->kv, ctx, n, pos0, all, &ag)) {
        s = error_set(err, TSL_FAILED, tsl_backend_name(c->be), tsl_backend_device(c->be), -1, NULL, NULL,
                      "llm decode: could not build the %s graph: %s", tsl_llm_arch_name(m->hp.arch),
                      tsl_ctx_error(ctx) ? tsl_ctx_error(ctx) : "unknown error");
        goto done;
    }
    s = tsl_gallocr_alloc_graph(c->ga, ag.g, err);
    if (s != TSL_SUCCESS) goto done;

    const int32_t n_kv = ag.n_kv;
    if (!llm_grow((void **)&c->mask, &c->mask_cap, (size_t)n_kv * (size_t)n, sizeof(float))) {
        s = error_set(err, TSL_ALLOC_FAILED, tsl_backend_name(c->be), tsl_backend_device(c->be), -1, NULL, NULL,
                      "llm decode: out of memory for the attention mask");
        goto done;
    }
    /* token i sits at position pos0 + i and sees positions 0..pos0 + i */
    for (int32_t i = 0; i < n; i++) {
        float *row = c->mask + (size_t)i * (size_t)n_kv;
        const int32_t p = pos0 + i;
        for (int32_t j = 0; j < n_kv; j++) row[j] = j <= p ? 0.0f : -INFINITY;
        c->pos[i] = p;
    }
    if ((s = tsl_tensor_set(ag.tokens, tokens, 0, (size_t)n * sizeof(int32_t), err)) != TSL_SUCCESS ||
        (s = tsl_tensor_set(ag.pos, c->pos, 0, (size_t)n * sizeof(int32_t), err)) != TSL_SUCCESS ||
        (s = tsl_tensor_set(ag.mask, c->mask, 0, (size_t)n_kv * (size_t)n * sizeof(float), err)) != TSL_SUCCESS)
        goto done;

    if (c->retry.max_attempts > 1)
        s = tsl_graph_compute_retry(c->be, ag.g, &c->retry, err);
    else
        s = tsl_backend_graph_compute(c->be, ag.g, err);
    if (s != TSL_SUCCESS) goto done;
    s = tsl_tensor_get(ag.logits, dst, 0, (size_t)ag.n_out * (size_t)m->hp.n_vocab * sizeof(float), err);
done:
    tsl_ctx_free(ctx);
    return s;
}

static tsl_status llm_rebuild(tsl_llm_ctx *c, tsl_error *err);

tsl_status tsl_llm_decode(tsl_llm_ctx *c, const int32_t *tokens, int32_t n, tsl_error *err) {
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
    /* a recovery (ours or another context's on the same device) zeroed the
     * cache: re-run the history before going on */
    if (tsl_buffer_is_lost(c->kv->buf)) c->need_rebuild = true;
    if (c->need_rebuild) {
        tsl_status s = llm_rebuild(c, err);
        if (s != TSL_SUCCESS) return s;
    }
    const bool all = c->p.logits_all;
    const size_t n_out = all ? (size_t)n : 1;
    if (!llm_grow((void **)&c->logits, &c->logits_cap, n_out * (size_t)nv, sizeof(float)))
        return error_set(err, TSL_ALLOC_FAILED, bn, bd, -1, NULL, NULL,
                         "llm decode: out of memory for %zu x %d logits", n_out, (int)nv);
    const int32_t start = c->n_past;
    for (int32_t off = 0; off < n; off += c->p.n_batch) {
        const int32_t nb = n - off < c->p.n_batch ? n - off : c->p.n_batch;
        float *dst = all ? c->logits + (size_t)off * (size_t)nv : c->logits;
        tsl_status s = llm_run_batch(c, tokens + off, nb, c->n_past, all, dst, err);
        if (s != TSL_SUCCESS) {
            c->n_past = start; /* the batch's cache entries are not counted */
            /* the device's memory (this cache) does not survive its loss */
            if (s == TSL_DEVICE_LOST) c->need_rebuild = true;
            return s;
        }
        memmove(c->history + c->n_past, tokens + off, (size_t)nb * sizeof *tokens); /* rebuild: same place */
        c->n_past += nb;
    }
    c->n_logits = (int32_t)n_out;
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
int32_t tsl_llm_n_past(const tsl_llm_ctx *c) { return c ? c->n_past : 0; }
const int32_t *tsl_llm_history(const tsl_llm_ctx *c) { return c ? c->history : NULL; }
tsl_backend *tsl_llm_backend(const tsl_llm_ctx *c) { return c ? c->be : NULL; }
const tsl_model *tsl_llm_model(const tsl_llm_ctx *c) { return c ? c->m : NULL; }
llm_kv *llm_ctx_kv(tsl_llm_ctx *c) { return c ? c->kv : NULL; }

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
     * rewritten with the same values, one batch behind the reads. Only the
     * last token's logits are kept, whatever logits_all says: a whole
     * history's worth would be n_ctx x n_vocab floats. */
    const bool all = c->p.logits_all;
    c->p.logits_all = false;
    tsl_status s = tsl_llm_decode(c, c->history, n, err);
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
