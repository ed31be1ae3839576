/*
 * synth.c - random-weight GGUF models of real models' shapes, for tests and
 * benchmarks (`tensile gen-model`, tests/model/test_llm.c).
 *
 * Benchmarks need files the size of real models on machines where nothing
 * can be downloaded and no Python is installed, so this writes them in C, in
 * seconds, straight through the GGUF writer's fill callback (no tensor is
 * ever held whole in memory: a Llama-3-8B-shaped Q4_0 file is 4.3 GB):
 *
 *  - Weights: each row comes from its own PRNG stream (seeded by the seed,
 *    the tensor's name and the row index), so a row is the same whatever
 *    chunk the writer asks for and the file is the same for the same seed.
 *    Values are uniform with the requested standard deviation (0.02 by
 *    default: activations stay finite and well scaled through any number of
 *    layers, since every block starts with an RMS norm); norm weights are
 *    1 +- 0.1, so a norm applied to the wrong tensor still changes results.
 *    Rows are generated as floats and quantized with tsl_quantize, the same
 *    quantizer files from llama.cpp and the gguf package are made with.
 *    Chunks are split across threads by rows.
 *  - Vocabulary: a GPT-2-style byte-level BPE that the tokenizer accepts
 *    and uses for real: the 256 byte tokens in the GPT-2 printable alphabet,
 *    then merges that build word-like tokens (a space marker plus letters,
 *    letter pairs, then longer words grown from earlier tokens, each merge
 *    after the merges of its parts, as BPE requires), then the model
 *    family's special tokens. Text tokenizes into multi-byte tokens and
 *    detokenizes back exactly; the weights are random, so what a model
 *    generates is not language.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "model/llm_impl.h"

static const synth_shape SYNTH_SHAPES[] = {
    {"tiny", TSL_ARCH_LLAMA, 512, 512, 64, 2, 128, 4, 2, 16, 10000.0f, 1e-5f, false},
    {"qwen2.5-0.5b", TSL_ARCH_QWEN2, 151936, 32768, 896, 24, 4864, 14, 2, 64, 1000000.0f, 1e-6f, true},
    {"qwen3-0.6b", TSL_ARCH_QWEN3, 151936, 40960, 1024, 28, 3072, 16, 8, 128, 1000000.0f, 1e-6f, true},
    {"llama3.2-1b", TSL_ARCH_LLAMA, 128256, 131072, 2048, 16, 8192, 32, 8, 64, 500000.0f, 1e-5f, true},
    {"llama3-8b", TSL_ARCH_LLAMA, 128256, 8192, 4096, 32, 14336, 32, 8, 128, 500000.0f, 1e-5f, false},
    {"llama3-70b", TSL_ARCH_LLAMA, 128256, 8192, 8192, 80, 28672, 64, 8, 128, 500000.0f, 1e-5f, false},
};
#define SYNTH_N_SHAPES (int)(sizeof SYNTH_SHAPES / sizeof SYNTH_SHAPES[0])

const synth_shape *synth_find_shape(const char *name) {
    for (int i = 0; name && i < SYNTH_N_SHAPES; i++)
        if (!strcmp(SYNTH_SHAPES[i].name, name)) return &SYNTH_SHAPES[i];
    return NULL;
}

const char *synth_shape_names(void) { return "tiny, qwen2.5-0.5b, qwen3-0.6b, llama3.2-1b, llama3-8b, llama3-70b"; }

/* ---- PRNG ------------------------------------------------------------------- */

static uint64_t synth_mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static uint64_t synth_hash_str(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ULL;
    return h;
}

/* n floats uniform in [-a, a) from the stream `seed` (xorshift64*, two
 * 24-bit draws per step: cheap and plenty for weights). */
static void synth_uniform(uint64_t seed, float a, float *out, int64_t n) {
    uint64_t x = synth_mix(seed) | 1;
    const float k = 2.0f * a / 16777216.0f;
    int64_t i = 0;
    for (; i + 1 < n; i += 2) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        uint64_t r = x * 0x2545F4914F6CDD1DULL;
        out[i] = (float)(r >> 40) * k - a;
        out[i + 1] = (float)((r >> 8) & 0xFFFFFF) * k - a;
    }
    if (i < n) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        out[i] = (float)((x * 0x2545F4914F6CDD1DULL) >> 40) * k - a;
    }
}

/* ---- vocabulary ---------------------------------------------------------------- */

typedef struct synth_vocab {
    char **tok;   /* n strings (byte-level spelling) */
    int32_t *type;
    int32_t n, cap;
    char **merge; /* "left right" */
    int32_t n_merge;
    /* open-addressing set of token strings -> id */
    int32_t *slot;
    size_t n_slot;
    int32_t bos, eos;
} synth_vocab;

static size_t synth_vocab_probe(const synth_vocab *v, const char *s) {
    size_t h = (size_t)synth_hash_str(s) & (v->n_slot - 1);
    while (v->slot[h] >= 0 && strcmp(v->tok[v->slot[h]], s) != 0) h = (h + 1) & (v->n_slot - 1);
    return h;
}

/* Add s (taking ownership) unless present; returns its id, -1 if present or on OOM. */
static int32_t synth_vocab_add(synth_vocab *v, char *s, int32_t type) {
    if (!s) return -1;
    size_t h = synth_vocab_probe(v, s);
    if (v->slot[h] >= 0 || v->n >= v->cap) {
        free(s);
        return -1;
    }
    v->tok[v->n] = s;
    v->type[v->n] = type;
    v->slot[h] = v->n;
    return v->n++;
}

static bool synth_vocab_has(const synth_vocab *v, const char *s) { return v->slot[synth_vocab_probe(v, s)] >= 0; }

/* The UTF-8 spelling of byte b in GPT-2's printable alphabet. */
static void synth_byte_char(int b, char out[4]) {
    int cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
        cp = b;
    } else { /* the unprintable ones, in byte order, from U+0100 on */
        int k = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = 0;
    }
}

static char *synth_cat(const char *a, const char *b, char sep) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 2);
    if (!s) return NULL;
    memcpy(s, a, la);
    size_t o = la;
    if (sep) s[o++] = sep;
    memcpy(s + o, b, lb + 1);
    return s;
}

static void synth_vocab_free(synth_vocab *v) {
    for (int32_t i = 0; i < v->n; i++) free(v->tok[i]);
    for (int32_t i = 0; i < v->n_merge; i++) free(v->merge[i]);
    free(v->tok);
    free(v->type);
    free(v->merge);
    free(v->slot);
}

/* Merge token ids a and b into a new token; true if added. */
static bool synth_merge(synth_vocab *v, int32_t a, int32_t b, int32_t limit) {
    if (v->n >= limit || strlen(v->tok[a]) + strlen(v->tok[b]) > 24) return false;
    char *s = synth_cat(v->tok[a], v->tok[b], 0);
    if (!s || synth_vocab_has(v, s)) {
        free(s);
        return false;
    }
    char *m = synth_cat(v->tok[a], v->tok[b], ' ');
    if (!m) {
        free(s);
        return false;
    }
    if (synth_vocab_add(v, s, TOK_TYPE_NORMAL) < 0) {
        free(m);
        return false;
    }
    v->merge[v->n_merge++] = m;
    return true;
}

static bool synth_vocab_build(synth_vocab *v, tsl_llm_arch arch, int32_t n_vocab, uint64_t seed) {
    static const char *const qwen_sp[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    static const char *const llama_sp[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"};
    const char *const *sp = arch == TSL_ARCH_LLAMA ? llama_sp : qwen_sp;
    const int32_t n_sp = 3;
    memset(v, 0, sizeof *v);
    if (n_vocab < 256 + n_sp) return false;
    v->cap = n_vocab;
    v->tok = calloc((size_t)n_vocab, sizeof *v->tok);
    v->type = calloc((size_t)n_vocab, sizeof *v->type);
    v->merge = calloc((size_t)n_vocab, sizeof *v->merge);
    v->n_slot = 1;
    while (v->n_slot < (size_t)n_vocab * 2) v->n_slot <<= 1;
    v->slot = malloc(v->n_slot * sizeof *v->slot);
    if (!v->tok || !v->type || !v->merge || !v->slot) return false;
    for (size_t i = 0; i < v->n_slot; i++) v->slot[i] = -1;

    int32_t byte_id[256];
    for (int b = 0; b < 256; b++) {
        char c[4];
        synth_byte_char(b, c);
        byte_id[b] = synth_vocab_add(v, strdup(c), TOK_TYPE_NORMAL);
        if (byte_id[b] < 0) return false;
    }
    const int32_t limit = n_vocab - n_sp;
    const int32_t space = byte_id[' '];
    /* space + letter, then letter pairs: the words' beginnings */
    for (int c = 'a'; c <= 'z'; c++) synth_merge(v, space, byte_id[c], limit);
    for (int a = 'a'; a <= 'z'; a++)
        for (int b = 'a'; b <= 'z'; b++) synth_merge(v, byte_id[a], byte_id[b], limit);
    /* then words grown from earlier tokens: an earlier multi-byte token
     * followed by a letter or a letter pair */
    uint64_t x = synth_mix(seed ^ 0x5EED);
    const int32_t first_multi = 256;
    int misses = 0;
    while (v->n < limit && misses < 1000000) {
        x = synth_mix(x);
        int32_t a = first_multi + (int32_t)((x >> 8) % (uint64_t)(v->n - first_multi));
        int32_t b = (x & 1) ? byte_id['a' + (int)((x >> 40) % 26)]
                            : first_multi + 26 + (int32_t)((x >> 40) % 676); /* a letter pair */
        if (b >= v->n) b = byte_id['e'];
        if (!synth_merge(v, a, b, limit)) misses++;
    }
    /* a vocabulary too large for the word grower: pad with distinct plain tokens */
    for (int32_t i = 0; v->n < limit; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "\xc4\xa0w%d", (int)i); /* "Ġw<i>", never produced by merges */
        synth_vocab_add(v, strdup(buf), TOK_TYPE_NORMAL);
    }
    int32_t ids[3];
    for (int i = 0; i < n_sp; i++) ids[i] = synth_vocab_add(v, strdup(sp[i]), TOK_TYPE_CONTROL);
    if (v->n != n_vocab) return false;
    v->bos = ids[0];
    v->eos = arch == TSL_ARCH_LLAMA ? ids[1] : ids[2];
    return true;
}

/* ---- tensors ------------------------------------------------------------------------ */

typedef struct synth_tensor {
    char name[TSL_MAX_NAME];
    tsl_type type;
    int64_t ne0, ne1;
    float a;      /* half-width of the uniform distribution */
    float center; /* 1 for norm weights, 0 otherwise */
    uint64_t seed;
    size_t row_bytes;
    int n_threads;
} synth_tensor;

typedef struct synth_job {
    const synth_tensor *t;
    uint8_t *dst;
    size_t offset, n; /* bytes of the tensor wanted */
    int64_t r0, r1;   /* rows this worker makes */
    bool ok;
} synth_job;

/* Rows [r0, r1) of the tensor, each generated whole and the part of it that
 * falls in [offset, offset + n) copied to dst. */
static void *synth_rows(void *arg) {
    synth_job *j = arg;
    const synth_tensor *t = j->t;
    float *f = malloc((size_t)t->ne0 * sizeof *f);
    uint8_t *q = malloc(t->row_bytes);
    j->ok = f && q;
    for (int64_t r = j->r0; j->ok && r < j->r1; r++) {
        synth_uniform(t->seed ^ synth_mix((uint64_t)r), t->a, f, t->ne0);
        if (t->center != 0.0f)
            for (int64_t i = 0; i < t->ne0; i++) f[i] += t->center;
        if (tsl_quantize(t->type, f, q, t->ne0) != t->row_bytes) {
            j->ok = false;
            break;
        }
        const size_t rs = (size_t)r * t->row_bytes, re = rs + t->row_bytes;
        const size_t a = rs > j->offset ? rs : j->offset, b = re < j->offset + j->n ? re : j->offset + j->n;
        if (a < b) memcpy(j->dst + (a - j->offset), q + (a - rs), b - a);
    }
    free(f);
    free(q);
    return NULL;
}

static tsl_status synth_fill(void *user, void *dst, size_t offset, size_t n, tsl_error *err) {
    const synth_tensor *t = user;
    const int64_t r0 = (int64_t)(offset / t->row_bytes), r1 = (int64_t)((offset + n + t->row_bytes - 1) / t->row_bytes);
    int nth = t->n_threads;
    if (nth > r1 - r0) nth = (int)(r1 - r0);
    if (nth < 1) nth = 1;
    synth_job jobs[64];
    pthread_t tid[64];
    bool started[64] = {false};
    if (nth > 64) nth = 64;
    const int64_t per = (r1 - r0 + nth - 1) / nth;
    for (int i = 0; i < nth; i++) {
        jobs[i] = (synth_job){.t = t, .dst = dst, .offset = offset, .n = n, .r0 = r0 + per * i, .r1 = r0 + per * (i + 1)};
        if (jobs[i].r1 > r1) jobs[i].r1 = r1;
        if (jobs[i].r0 > r1) jobs[i].r0 = r1;
        if (i > 0) started[i] = pthread_create(&tid[i], NULL, synth_rows, &jobs[i]) == 0;
        if (i > 0 && !started[i]) synth_rows(&jobs[i]); /* no thread: do it here */
    }
    synth_rows(&jobs[0]);
    bool ok = jobs[0].ok;
    for (int i = 1; i < nth; i++) {
        if (started[i]) pthread_join(tid[i], NULL);
        ok = ok && jobs[i].ok;
    }
    if (!ok)
        return error_set(err, TSL_ALLOC_FAILED, "", "", -1, NULL, NULL,
                         "gen-model: out of memory generating '%s'", t->name);
    return TSL_SUCCESS;
}

/* ---- the file ----------------------------------------------------------------------- */

static int synth_file_type(tsl_type t) {
    switch (t) {
    case TSL_TYPE_F32: return 0;
    case TSL_TYPE_F16: return 1;
    case TSL_TYPE_Q4_0: return 2;
    case TSL_TYPE_Q8_0: return 7;
    default: return 0;
    }
}

tsl_status synth_write(const synth_params *p, const char *path, tsl_error *err) {
    tsl_error_clear(err);
    const synth_shape *s = &p->shape;
    const tsl_type wt = p->type;
    if (wt != TSL_TYPE_F32 && wt != TSL_TYPE_F16 && wt != TSL_TYPE_Q8_0 && wt != TSL_TYPE_Q4_0)
        return error_set(err, TSL_FAILED, "", "", -1, NULL, NULL, "gen-model: type %s is not one of f32, f16, q8_0, q4_0",
                         tsl_type_name(wt));
    const int64_t blk = tsl_type_block_len(wt);
    if (s->n_embd < 1 || s->n_layer < 1 || s->n_ff < 1 || s->n_head < 1 || s->n_head_kv < 1 ||
        s->n_head % s->n_head_kv != 0 || s->head_dim < 2 || s->head_dim % 2 != 0 || s->n_vocab < 259 ||
        s->n_embd % blk != 0 || s->n_ff % blk != 0 || ((int64_t)s->n_head * s->head_dim) % blk != 0)
        return error_set(err, TSL_FAILED, "", "", -1, NULL, NULL,
                         "gen-model: shape '%s' is not valid for %s (dimensions must be positive, heads a multiple of "
                         "kv heads, head_dim even, row lengths multiples of %lld, vocabulary >= 259)",
                         s->name ? s->name : "?", tsl_type_name(wt), (long long)blk);
    const char *an = tsl_llm_arch_name(s->arch);
    int n_threads = p->n_threads;
    if (n_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)c : 1;
    }
    const float a = (p->scale > 0 ? p->scale : 0.02f) * sqrtf(3.0f);

    synth_vocab v;
    memset(&v, 0, sizeof v);
    tsl_gguf_writer *w = tsl_gguf_writer_new();
    const int per_layer = 14;
    const int n_tensors = 4 + s->n_layer * per_layer;
    synth_tensor *ts = calloc((size_t)n_tensors, sizeof *ts);
    if (!w || !ts || !synth_vocab_build(&v, s->arch, s->n_vocab, p->seed)) {
        synth_vocab_free(&v);
        tsl_gguf_writer_free(w);
        free(ts);
        return error_set(err, TSL_ALLOC_FAILED, "", "", -1, NULL, NULL, "gen-model: out of memory");
    }

    char key[128];
#define SK(suffix) (snprintf(key, sizeof key, "%s." suffix, an), key)
    char gname[96];
    snprintf(gname, sizeof gname, "synthetic %s (%s)", s->name ? s->name : "model", tsl_type_name(wt));
    tsl_gguf_writer_set_str(w, "general.architecture", an);
    tsl_gguf_writer_set_str(w, "general.name", gname);
    tsl_gguf_writer_set_u32(w, "general.file_type", (uint32_t)synth_file_type(wt));
    if (p->alignment) tsl_gguf_writer_set_alignment(w, p->alignment);
    tsl_gguf_writer_set_u32(w, SK("vocab_size"), (uint32_t)s->n_vocab);
    tsl_gguf_writer_set_u32(w, SK("context_length"), (uint32_t)s->n_ctx);
    tsl_gguf_writer_set_u32(w, SK("embedding_length"), (uint32_t)s->n_embd);
    tsl_gguf_writer_set_u32(w, SK("block_count"), (uint32_t)s->n_layer);
    tsl_gguf_writer_set_u32(w, SK("feed_forward_length"), (uint32_t)s->n_ff);
    tsl_gguf_writer_set_u32(w, SK("attention.head_count"), (uint32_t)s->n_head);
    tsl_gguf_writer_set_u32(w, SK("attention.head_count_kv"), (uint32_t)s->n_head_kv);
    tsl_gguf_writer_set_u32(w, SK("attention.key_length"), (uint32_t)s->head_dim);
    tsl_gguf_writer_set_u32(w, SK("attention.value_length"), (uint32_t)s->head_dim);
    tsl_gguf_writer_set_f32(w, SK("attention.layer_norm_rms_epsilon"), s->rms_eps);
    tsl_gguf_writer_set_f32(w, SK("rope.freq_base"), s->rope_base);
    tsl_gguf_writer_set_u32(w, SK("rope.dimension_count"), (uint32_t)s->head_dim);
#undef SK
    tsl_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    tsl_gguf_writer_set_str(w, "tokenizer.ggml.pre", s->arch == TSL_ARCH_LLAMA ? "llama-bpe" : "qwen2");
    tsl_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, (uint64_t)v.n);
    tsl_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", TSL_GGUF_I32, v.type, (uint64_t)v.n);
    tsl_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merge, (uint64_t)v.n_merge);
    tsl_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v.bos);
    tsl_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v.eos);
    tsl_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", s->arch == TSL_ARCH_LLAMA);

    const int64_t E = s->n_embd, F = s->n_ff, HD = s->head_dim;
    const int64_t Q = s->n_head * HD, KV = s->n_head_kv * HD;
    int nt = 0;
    /* matrix or vector (ne1 == 0); center 1 marks a norm weight */
#define ST(nm, t_, e0, e1, c_)                                                                                  \
    do {                                                                                                        \
        synth_tensor *t = &ts[nt++];                                                                            \
        snprintf(t->name, sizeof t->name, "%s", nm);                                                            \
        t->type = (t_), t->ne0 = (e0), t->ne1 = (e1) ? (e1) : 1, t->center = (c_);                            \
        t->a = (c_) != 0.0f ? 0.1f : a;                                                                         \
    } while (0)
    char nm[TSL_MAX_NAME];
    ST("token_embd.weight", wt, E, s->n_vocab, 0.0f);
    for (int il = 0; il < s->n_layer; il++) {
#define LN(suffix) (snprintf(nm, sizeof nm, "blk.%d." suffix, il), nm)
        ST(LN("attn_norm.weight"), TSL_TYPE_F32, E, 0, 1.0f);
        ST(LN("attn_q.weight"), wt, E, Q, 0.0f);
        ST(LN("attn_k.weight"), wt, E, KV, 0.0f);
        ST(LN("attn_v.weight"), wt, E, KV, 0.0f);
        if (s->arch == TSL_ARCH_QWEN2) {
            ST(LN("attn_q.bias"), TSL_TYPE_F32, Q, 0, 0.0f);
            ST(LN("attn_k.bias"), TSL_TYPE_F32, KV, 0, 0.0f);
            ST(LN("attn_v.bias"), TSL_TYPE_F32, KV, 0, 0.0f);
        }
        if (s->arch == TSL_ARCH_QWEN3) {
            ST(LN("attn_q_norm.weight"), TSL_TYPE_F32, HD, 0, 1.0f);
            ST(LN("attn_k_norm.weight"), TSL_TYPE_F32, HD, 0, 1.0f);
        }
        ST(LN("attn_output.weight"), wt, Q, E, 0.0f);
        ST(LN("ffn_norm.weight"), TSL_TYPE_F32, E, 0, 1.0f);
        ST(LN("ffn_gate.weight"), wt, E, F, 0.0f);
        ST(LN("ffn_up.weight"), wt, E, F, 0.0f);
        ST(LN("ffn_down.weight"), wt, F, E, 0.0f);
#undef LN
    }
    ST("output_norm.weight", TSL_TYPE_F32, E, 0, 1.0f);
    if (!s->tied) ST("output.weight", wt, E, s->n_vocab, 0.0f);
#undef ST
    for (int i = 0; i < nt; i++) {
        synth_tensor *t = &ts[i];
        t->seed = synth_mix(p->seed) ^ synth_hash_str(t->name);
        t->row_bytes = tsl_row_size(t->type, t->ne0);
        t->n_threads = n_threads;
        const int64_t ne[2] = {t->ne0, t->ne1};
        tsl_gguf_writer_add_tensor_fn(w, t->name, t->type, t->ne1 > 1 ? 2 : 1, ne, synth_fill, t);
    }
    tsl_status st = tsl_gguf_writer_status(w, err);
    if (st == TSL_SUCCESS) st = tsl_gguf_writer_write(w, path, err);
    tsl_gguf_writer_free(w);
    synth_vocab_free(&v);
    free(ts);
    return st;
}
