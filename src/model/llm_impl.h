/*
 * llm_impl.h - private declarations shared by the LLM modules: the loaded
 * model (llm.c), its weights' device copies (weights.c), the KV cache
 * (kv.c), the graph builders (arch.c) and the synthetic model writer
 * (synth.c).
 *
 * The split follows what changes together: llm.c knows GGUF keys and tensor
 * names, arch.c knows how the forward pass is wired and nothing about files,
 * kv.c knows the cache layout, which arch.c reads through kv_k_view /
 * kv_v_view / kv_store so the layout is decided in one place.
 */
#ifndef TSL_MODEL_LLM_IMPL_H
#define TSL_MODEL_LLM_IMPL_H

#include <pthread.h>

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
    /* Device copies only, NULL otherwise: wq, wk and wv (or ffn_gate and
     * ffn_up) seen as one matrix, where the copy holds them back to back
     * in one buffer (weights.c); single-token graphs use them (arch.c). */
    tsl_tensor *wqkv, *ffn_gate_up;
    tsl_tensor *bq, *bk, *bv;        /* qwen2 (optional for llama), else NULL */
    tsl_tensor *bqkv;                /* device copies with wqkv: bq, bk, bv as one row (weights.c), else NULL */
    tsl_tensor *q_norm, *k_norm;     /* qwen3, else NULL */
    tsl_tensor *ffn_norm;
    tsl_tensor *ffn_gate, *ffn_up, *ffn_down;
} llm_layer;

/* One complete set of the weights a forward graph reads. The model's own
 * set points into the file's mapping (host memory); a device copy
 * (weights.c) is a second set of tensors with the same names, types and
 * shapes, placed in that device's buffers. arch.c builds from either. */
typedef struct llm_weights {
    tsl_tensor *tok_embd, *output_norm, *output; /* output == tok_embd when tied */
    tsl_tensor *rope_freqs;                      /* llama3 frequency factors, or NULL */
    llm_layer *layers;
} llm_weights;

struct llm_devw;

struct tsl_model {
    tsl_gguf *gguf;
    tsl_context *wctx; /* tensors pointing into the mapping (no_alloc) */
    llm_hparams hp;
    llm_weights w;     /* in the mapping: what host-memory backends read */
    bool progress;     /* tsl_model_params.progress: bars for loading and uploads */
    /* device copies of the weights, one per device, made by the first
     * context on that device and kept until tsl_model_free (weights.c) */
    pthread_mutex_t dev_mu;
    struct llm_devw *devw;
    tok *tok;
    int32_t eog[16]; /* end-of-generation ids */
    int n_eog;
    tsl_model_info info;
    char name[128];
    char path[512];
};

/* ---- progress bars (llm.c) ----------------------------------------------------
 * "\rVERB NAME [####      ]  40% 0.12/0.30 GB" on stderr; the caller decides
 * whether stderr is a terminal. */
void llm_progress_draw(const char *verb, const char *name, size_t done, size_t total);
double llm_now(void);

/* ---- device copies of the weights (weights.c) ------------------------------------
 * A backend whose buffers are not host memory cannot read the mapping: the
 * weights are copied into buffers of its device once per model and device,
 * shared by every context there, and restored after a device loss (see the
 * top of weights.c). */
typedef struct llm_devw llm_devw;

/* The weights for contexts on backend be: the model's own (host) set when
 * be's buffers are host memory (host is true), else the copy on be's
 * device, made now (uploading, with a progress bar) if this is the first
 * context there. Returns NULL with err filled when be is neither host
 * memory nor a Vulkan device, or the copy cannot be made. Thread-safe. */
const llm_weights *llm_weights_for(tsl_model *m, tsl_backend *be, bool host, llm_devw **out, tsl_error *err);
/* Before a compute on the device: if a recovery zeroed buffers whose
 * contents recovery cannot restore itself (a layout that is not the file's),
 * upload them again from the mapping. recovered: the caller saw a recovery
 * (its cache came back lost), so the mapping's pages the backend read to
 * restore the rest are released again. SUCCESS when nothing was lost, or
 * after restoring. Thread-safe. */
tsl_status llm_devw_ensure(tsl_model *m, llm_devw *d, bool recovered, tsl_error *err);
/* Free every device copy (tsl_model_free). */
void llm_devw_free_all(tsl_model *m);
/* Is t one of the device copy's weight tensors? */
bool llm_devw_holds(const llm_devw *d, const tsl_tensor *t);
/* The same weight in host memory (the mapping), for a node the device
 * cannot run; NULL if there is none. */
tsl_tensor *llm_devw_host_twin(const tsl_model *m, const llm_devw *d, const tsl_tensor *t);

/* What a device copy is, for tests and benchmarks. */
typedef struct llm_devw_info {
    int device;          /* Vulkan device index */
    int n_buffers;       /* buffers holding the weights (one unless the device caps allocations) */
    int n_file_layout;   /* of those, laid out as the file (recovery restores them from the mapping) */
    uint64_t bytes;      /* device bytes of weights */
    uint64_t uploads;    /* times the weights were uploaded (1, +1 per restore by the model) */
    tsl_backend *owner;  /* the model's backend that owns the buffers */
    const tsl_buffer *buffer0;
} llm_devw_info;
void llm_devw_get_info(const llm_devw *d, llm_devw_info *out);
/* The device copy a context reads (NULL for host weights), and the
 * weights its graphs are built from (the model's, or that copy's). */
llm_devw *llm_ctx_devw(tsl_llm_ctx *c);
const llm_weights *llm_ctx_weights(const tsl_llm_ctx *c);

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
/* Write k [head_dim * n_head_kv, n] and v [head_dim_v * n_head_kv, n] into
 * positions [pos0, pos0 + n) of layer il. An F32 or F16 cache takes them at
 * the positions `pos` holds (I32 [n], pos0 .. pos0 + n - 1: set_rows, so the
 * graph does not depend on pos0 and a device can submit a decode step's
 * commands again); a quantized one through copies into views at pos0.
 * Returns the two write nodes, which the graph must contain before any read
 * of the layer's cache. */
bool kv_store(tsl_context *ctx, const llm_kv *kv, int il, int32_t pos0, tsl_tensor *pos, tsl_tensor *k,
              tsl_tensor *v, tsl_tensor **cpy_k, tsl_tensor **cpy_v);

/* Write zeros over the whole cache (positions never written must still be
 * finite numbers: attention reads up to a padded length, see llm.c). */
tsl_status kv_zero(llm_kv *kv, tsl_error *err);

/* Point the two cache writes kv_store made for positions [p, p + n) of
 * layer il at positions [pos0, pos0 + n) instead: a single-token graph is
 * reused for the next position this way (llm.c) rather than built again.
 * Writes by position (set_rows) need nothing: their positions are data. */
void kv_store_move(const llm_kv *kv, int il, int32_t pos0, tsl_tensor *cpy_k, tsl_tensor *cpy_v);
/* The cache of a context (llm.c), for tests that simulate its loss. */
llm_kv *llm_ctx_kv(tsl_llm_ctx *c);

/* Where the host time of the last decode call went, for `tensile bench
 * model` (summed over its batches). */
typedef struct llm_timings {
    double build_ms;   /* building the graphs */
    double plan_ms;    /* placing them (graph allocator or scheduler planning is inside compute) */
    double input_ms;   /* filling and uploading tokens, positions and mask */
    double compute_ms; /* the compute calls (scheduler: planning, copies and every split) */
    double sched_ms;   /* of compute_ms, the scheduler's planning (assignment, splits, placement) */
    double output_ms;  /* reading the logits back */
    int n_nodes;       /* nodes of the last graph */
    int n_compute;     /* of those, nodes that run a kernel (not views) */
    int n_splits;      /* scheduler splits of the last graph (1 without a scheduler) */
    int n_copies;      /* scheduler copies made by the last compute */
    int n_kv;          /* attention length of the last graph */
    int n_kernel_retries; /* computes run again after a kernel failed to build (moved to the CPU) */
    int n_host_weights;   /* weight reads of nodes the device cannot run, pointed at the mapping */
    int n_graphs_reused;  /* single-token graphs moved to the next position rather than built */
    uint64_t n_plans_reused; /* computes that ran the scheduler's kept plan (tsl_sched_n_reused) */
    const tsl_buffer *act_buffer; /* the buffer holding the last graph's logits (activations) */
} llm_timings;
const llm_timings *llm_ctx_timings(const tsl_llm_ctx *c);
/* The CPU backend a context on a device falls back to (NULL on the CPU). */
tsl_backend *llm_ctx_fallback(const tsl_llm_ctx *c);

/* ---- graphs (arch.c) ---------------------------------------------------- */

typedef struct arch_graph {
    tsl_graph *g;
    tsl_tensor *tokens; /* I32 [n] input */
    tsl_tensor *pos;    /* I32 [n + steps - 1] input */
    tsl_tensor *mask;   /* F32 [n_kv, n + steps - 1] input: 0 or -inf */
    tsl_tensor *logits; /* F32 [n_vocab, n_out] output */
    tsl_tensor *best;   /* I32 [1]: the (last step's) logits' argmax, when built greedy (else NULL) */
    tsl_tensor **bests; /* greedy: each step's argmax, steps of them (bests[steps - 1] is best) */
    tsl_tensor **store; /* the cache writes: cpy_k, cpy_v of each layer (kv_store), step by step */
    int32_t n_kv, n_out, pos0;
    int32_t steps; /* decode steps in the graph (arch_build) */
} arch_graph;

/* Metadata bytes a compute context needs for one graph (one step) of this model. */
size_t arch_graph_mem(const tsl_model *m);
/* Build the forward graph of n tokens at positions [pos0, pos0 + n) in ctx
 * (no_alloc), reading weights w (the model's or a device copy). Attention
 * spans the first n_kv cache positions (pos0 + n <= n_kv <= the cache's
 * size; positions past pos0 + n are masked out by the caller's mask). n_out
 * is 1 (the last token's logits) or n. greedy adds the argmax of the last
 * token's logits (out->best; n_out is then 1). steps > 1 (greedy, n = 1)
 * chains that many decode steps in one graph: step s at position pos0 + s
 * embeds step s - 1's argmax (the first, the tokens input), reads row s of
 * the positions and the mask (both then have n + steps - 1 rows; n_kv >=
 * pos0 + steps), and writes the cache at its position; each step's argmax
 * is out->bests[s]. Returns false with the ctx error set when something
 * does not fit. */
bool arch_build(const tsl_model *m, const llm_weights *w, const llm_kv *kv, tsl_context *ctx, int32_t n,
                int32_t pos0, int32_t n_kv, bool all_logits, bool greedy, int32_t steps, arch_graph *out);
/* Make graph ag (built for some position) the graph of the same number of
 * tokens at pos0, with the same attention span: only where its tokens'
 * keys and values are written changes (kv_store_move). */
void arch_move(const llm_kv *kv, arch_graph *ag, int32_t pos0);

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

/* A named shape ("tiny", "qwen2.5-0.5b", "qwen3-0.6b", "llama3.2-1b",
 * "llama3-8b", "llama3-70b"), with
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
    uint32_t alignment; /* of the tensor data (general.alignment); 0: GGUF's default, 32 */
} synth_params;

/* Write the model to path (atomically, through the GGUF writer). */
tsl_status synth_write(const synth_params *p, const char *path, tsl_error *err);

#endif
