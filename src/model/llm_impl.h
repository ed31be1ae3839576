/*
 * llm_impl.h - private declarations shared by the LLM modules: the loaded
 * model (llm.c), the KV cache (kv.c), the graph builders (arch.c) and the
 * synthetic model writer (synth.c).
 *
 * The split follows what changes together: llm.c knows GGUF keys and tensor
 * names, arch.c knows how the forward pass is wired and nothing about files,
 * kv.c knows the cache layout, which arch.c reads through kv_k_view /
 * kv_v_view / kv_store so the layout is decided in one place.
 */
#ifndef TSL_MODEL_LLM_IMPL_H
#define TSL_MODEL_LLM_IMPL_H

#include "model/tokenizer.h"
#include "tensile/backend.h"
#include "tensile/model.h"

/* ---- the model ---------------------------------------------------------- */

typedef enum llm_rope_scaling {
    LLM_ROPE_SCALING_NONE = 0,
    LLM_ROPE_SCALING_LINEAR,
    LLM_ROPE_SCALING_YARN,
} llm_rope_scaling;

typedef struct llm_hparams {
    tsl_llm_arch arch;
    int32_t n_vocab, n_ctx_train, n_embd, n_layer, n_ff;
    int32_t n_head, n_head_kv, head_dim, head_dim_v, n_rot;
    float rms_eps;
    int rope_mode; /* TSL_ROPE_NORMAL (llama) or TSL_ROPE_NEOX (qwen) */
    float rope_base, rope_freq_scale;
    llm_rope_scaling rope_scaling;
    int32_t rope_n_ctx_orig;
    float yarn_ext_factor, yarn_attn_factor, yarn_beta_fast, yarn_beta_slow;
} llm_hparams;

typedef struct llm_layer {
    tsl_tensor *attn_norm;
    tsl_tensor *wq, *wk, *wv, *wo;
    tsl_tensor *bq, *bk, *bv;        /* qwen2 (optional for llama), else NULL */
    tsl_tensor *q_norm, *k_norm;     /* qwen3, else NULL */
    tsl_tensor *ffn_norm;
    tsl_tensor *ffn_gate, *ffn_up, *ffn_down;
} llm_layer;

struct tsl_model {
    tsl_gguf *gguf;
    tsl_context *wctx; /* tensors pointing into the mapping (no_alloc) */
    llm_hparams hp;
    tsl_tensor *tok_embd, *output_norm, *output; /* output == tok_embd when tied */
    tsl_tensor *rope_freqs;                      /* llama3 frequency factors, or NULL */
    llm_layer *layers;
    tok *tok;
    int32_t eog[16]; /* end-of-generation ids */
    int n_eog;
    tsl_model_info info;
    char name[128];
    char path[512];
};

/* ---- KV cache (kv.c) ------------------------------------------------------
 * Per layer, K is [head_dim * n_head_kv, n_ctx] (one row per position) and V
 * is stored transposed, [n_ctx, head_dim_v * n_head_kv] (one row per value
 * channel, positions along the row), so both attention products read dense
 * rows: K·Q walks key rows, and V·softmax walks each channel's positions. */
typedef struct llm_kv {
    tsl_context *ctx;  /* the cache tensors (metadata) */
    tsl_buffer *buf;   /* their memory, on the context's backend */
    tsl_tensor **k, **v;
    int32_t n_layer, n_ctx;
    tsl_type type;
    int32_t head_dim, head_dim_v, n_head_kv;
} llm_kv;

llm_kv *kv_new(const llm_hparams *hp, int32_t n_ctx, tsl_type type, tsl_backend *be, tsl_error *err);
void kv_free(llm_kv *kv);
size_t kv_bytes(const llm_kv *kv);
/* Keys of positions [0, n_kv) of layer il, as [head_dim, n_kv, n_head_kv]. */
tsl_tensor *kv_k_view(tsl_context *ctx, const llm_kv *kv, int il, int32_t n_kv);
/* Values of positions [0, n_kv), as [n_kv, head_dim_v, n_head_kv] (transposed). */
tsl_tensor *kv_v_view(tsl_context *ctx, const llm_kv *kv, int il, int32_t n_kv);
/* Copy k [head_dim * n_head_kv, n] and v [head_dim_v * n_head_kv, n] into
 * positions [pos0, pos0 + n) of layer il. Returns the two copy nodes, which
 * the graph must contain before any read of the layer's cache. */
bool kv_store(tsl_context *ctx, const llm_kv *kv, int il, int32_t pos0, tsl_tensor *k, tsl_tensor *v,
              tsl_tensor **cpy_k, tsl_tensor **cpy_v);

/* The cache of a context (llm.c), for tests that simulate its loss. */
llm_kv *llm_ctx_kv(tsl_llm_ctx *c);

/* ---- graphs (arch.c) ---------------------------------------------------- */

typedef struct arch_graph {
    tsl_graph *g;
    tsl_tensor *tokens; /* I32 [n] input */
    tsl_tensor *pos;    /* I32 [n] input */
    tsl_tensor *mask;   /* F32 [n_kv, n] input: 0 or -inf */
    tsl_tensor *logits; /* F32 [n_vocab, n_out] output */
    int32_t n_kv, n_out;
} arch_graph;

/* Metadata bytes a compute context needs for one graph of this model. */
size_t arch_graph_mem(const tsl_model *m);
/* Build the forward graph of n tokens at positions [pos0, pos0 + n) in ctx
 * (no_alloc). n_out is 1 (the last token's logits) or n. Returns false with
 * the ctx error set when something does not fit. */
bool arch_build(const tsl_model *m, const llm_kv *kv, tsl_context *ctx, int32_t n, int32_t pos0, bool all_logits,
                arch_graph *out);

/* ---- sampler (sampler.c) -------------------------------------------------- */

/* The distribution tsl_sampler_sample would draw from for these logits: up
 * to cap (id, probability) pairs in the chain's order; returns how many
 * there are (0 when no logit is usable, -1 on bad arguments). For tests. */
int32_t sampler_dist(tsl_sampler *s, const float *logits, int32_t n_vocab, int32_t *ids, float *probs, int32_t cap);

/* ---- synthetic models (synth.c) ---------------------------------------------
 * Random-weight GGUF files of a real model's shape with a synthetic but valid
 * byte-level BPE vocabulary, for tests and benchmarks. */
typedef struct synth_shape {
    const char *name;
    tsl_llm_arch arch;
    int32_t n_vocab, n_ctx, n_embd, n_layer, n_ff, n_head, n_head_kv, head_dim;
    float rope_base, rms_eps;
    bool tied;
} synth_shape;

/* A named shape ("tiny", "qwen2.5-0.5b", "qwen3-0.6b", "llama3-8b"), with
 * arch set to the shape's own; NULL if unknown. */
const synth_shape *synth_find_shape(const char *name);
/* Comma-separated list of shape names, for usage text. */
const char *synth_shape_names(void);

typedef struct synth_params {
    synth_shape shape; /* arch may differ from the named shape's */
    tsl_type type;     /* of the 2-D weights: F32, F16, Q8_0, Q4_0 (norms are F32) */
    uint64_t seed;
    float scale;       /* std of the weights; 0: 0.02 */
    int n_threads;     /* for generating weights; <= 0: online cores */
} synth_params;

/* Write the model to path (atomically, through the GGUF writer). */
tsl_status synth_write(const synth_params *p, const char *path, tsl_error *err);

#endif
