/*
 * test_llm.c - LLM models and contexts: loading, the three architectures'
 * graphs, the KV cache, and the fault contract of decode.
 *
 * Models are written in-process by the synthetic generator (random weights,
 * tiny shapes), then rewritten with the GGUF writer where a test needs a
 * broken or extended file. The central property: the same tokens give the
 * same logits however they are batched (prefill at once, one by one, in
 * batches of 3 or 7), which checks the cache writes, the positions, the
 * mask and the views of the cache against each other.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/llm_impl.h"
#include "test.h"
#include "model/llm_test.h"

static synth_params tiny_params(tsl_llm_arch arch, tsl_type type) {
    synth_params p;
    memset(&p, 0, sizeof p);
    p.shape = *synth_find_shape("tiny");
    p.shape.arch = arch;
    if (arch == TSL_ARCH_QWEN3) p.shape.head_dim = 32; /* key_length != n_embd / n_head */
    if (arch == TSL_ARCH_QWEN2) p.shape.tied = true;
    p.type = type;
    p.seed = 7;
    p.n_threads = 2;
    return p;
}

static bool write_model(const synth_params *p, const char *path) {
    tsl_error err;
    tsl_status s = synth_write(p, path, &err);
    if (s != TSL_SUCCESS) fprintf(stderr, "synth_write: %s\n", err.message);
    return s == TSL_SUCCESS;
}

/* Copy a GGUF file, optionally dropping a tensor or a key, swapping a
 * tensor's two dimensions, renaming the architecture, or adding a llama3
 * rope_freqs.weight. */
typedef struct rw_opts {
    const char *skip_tensor, *swap_tensor, *drop_key, *arch;
    bool add_rope_freqs;
    int n_rot;
} rw_opts;

static bool rewrite(const char *src, const char *dst, const rw_opts *o) {
    tsl_error err;
    tsl_gguf *g = tsl_gguf_open(src, &err);
    if (!g) return false;
    tsl_gguf_writer *w = tsl_gguf_writer_new();
    for (int64_t i = 0; i < tsl_gguf_kv_count(g); i++) {
        const char *key = tsl_gguf_key(g, i);
        if (o->drop_key && !strcmp(key, o->drop_key)) continue;
        if (o->arch && !strcmp(key, "general.architecture"))
            tsl_gguf_writer_set_str(w, key, o->arch);
        else
            tsl_gguf_writer_copy_kv(w, g, key);
    }
    for (int64_t i = 0; i < tsl_gguf_tensor_count(g); i++) {
        const tsl_gguf_tensor_info *t = tsl_gguf_tensor(g, i);
        if (o->skip_tensor && !strcmp(t->name, o->skip_tensor)) continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (o->swap_tensor && !strcmp(t->name, o->swap_tensor)) {
            int64_t x = ne[0];
            ne[0] = ne[1];
            ne[1] = x;
        }
        tsl_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, ne, t->data);
    }
    float ff[256];
    if (o->add_rope_freqs) {
        for (int i = 0; i < o->n_rot / 2; i++) ff[i] = 1.0f + (float)(i % 4); /* 1, 2, 3, 4, 1, ... */
        int64_t ne[1] = {o->n_rot / 2};
        tsl_gguf_writer_add_tensor(w, "rope_freqs.weight", TSL_TYPE_F32, 1, ne, ff);
    }
    tsl_status s = tsl_gguf_writer_write(w, dst, &err);
    tsl_gguf_writer_free(w);
    tsl_gguf_close(g);
    return s == TSL_SUCCESS;
}

static tsl_llm_ctx *new_ctx(tsl_model *m, tsl_backend *be, int n_ctx, int n_batch, tsl_type kv, bool all) {
    tsl_llm_params p = tsl_llm_default_params();
    p.backend = be;
    p.n_ctx = n_ctx;
    p.n_batch = n_batch;
    p.kv_type = kv;
    p.logits_all = all;
    tsl_error err;
    tsl_llm_ctx *c = tsl_llm_ctx_new(m, &p, &err);
    if (!c) fprintf(stderr, "ctx: %s\n", err.message);
    return c;
}

static bool all_finite(const float *x, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

static const int32_t PROMPT[] = {3, 77, 141, 9, 300, 42, 500, 17, 260, 88, 5, 411};
#define N_PROMPT (int)(sizeof PROMPT / sizeof PROMPT[0])

/* The logits of every prompt token, decoding in batches of nb with a graph
 * of at most gb tokens each; out holds N_PROMPT * n_vocab floats. */
static bool logits_batched(tsl_model *m, tsl_backend *be, tsl_type kv, int nb, int gb, float *out) {
    const int nv = tsl_model_get_info(m)->n_vocab;
    tsl_llm_ctx *c = new_ctx(m, be, 64, gb, kv, true);
    if (!c) return false;
    bool ok = true;
    for (int i = 0; ok && i < N_PROMPT; i += nb) {
        int n = N_PROMPT - i < nb ? N_PROMPT - i : nb;
        tsl_error err;
        ok = tsl_llm_decode(c, PROMPT + i, n, &err) == TSL_SUCCESS;
        if (!ok) fprintf(stderr, "decode: %s\n", err.message);
        for (int j = 0; ok && j < n; j++) memcpy(out + (size_t)(i + j) * nv, tsl_llm_logits(c, j), (size_t)nv * 4);
        ok = ok && tsl_llm_n_past(c) == i + n;
    }
    tsl_llm_ctx_free(c);
    return ok;
}

/* Prefill at once, one at a time, and in graphs of 3 and 7 tokens all give
 * the same logits for every token. With an F32 cache they agree to float
 * rounding (1e-4). An F16 cache is looser by nature: mul_mat takes other
 * code paths for 1 and for n columns, whose F32 results differ in the last
 * bits, and now and then such a value sits on an F16 rounding boundary and
 * is cached one half-ulp (5e-4 relative) apart; a random tiny model can
 * amplify that to a few 1e-3 in its small logits. A wrong position, mask or
 * cache slot changes logits by tens of percent. */
static void check_batching(tsl_llm_arch arch, tsl_type wtype, tsl_type kv, const char *file) {
    const double tol = kv == TSL_TYPE_F32 ? 1e-4 : 2e-2;
    synth_params sp = tiny_params(arch, wtype);
    CHECK(write_model(&sp, tpath(file)));
    tsl_model *m = load(tpath(file));
    CHECK(m != NULL);
    if (!m) return;
    tsl_backend *be = tsl_backend_cpu_new(2, NULL);
    const int nv = tsl_model_get_info(m)->n_vocab;
    float *ref = malloc((size_t)N_PROMPT * nv * 4), *got = malloc((size_t)N_PROMPT * nv * 4);
    CHECK(logits_batched(m, be, kv, N_PROMPT, N_PROMPT, ref)); /* the whole prompt in one graph */
    CHECK(all_finite(ref, N_PROMPT * nv));
    double spread = 0; /* the logits must depend on the tokens, or nothing is tested */
    for (int i = 0; i < nv; i++) spread += fabs(ref[i] - ref[(size_t)(N_PROMPT - 1) * nv + i]);
    CHECK(spread > 1e-3);
    const int cases[][2] = {{1, 1}, {3, 3}, {7, 7}, {N_PROMPT, 3}, {N_PROMPT, 7}, {5, 2}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        memset(got, 0, (size_t)N_PROMPT * nv * 4);
        CHECK(logits_batched(m, be, kv, cases[k][0], cases[k][1], got));
        for (int t = 0; t < N_PROMPT; t++) {
            double d = rel_diff(got + (size_t)t * nv, ref + (size_t)t * nv, nv);
            CHECKF(d <= tol, "%s %s kv %s: calls of %d, graphs of %d: token %d differs by %.3g",
                   tsl_llm_arch_name(arch), tsl_type_name(wtype), tsl_type_name(kv), cases[k][0], cases[k][1], t, d);
        }
    }
    free(ref);
    free(got);
    tsl_backend_free(be);
    tsl_model_free(m);
}

static void test_batching_llama(void) { check_batching(TSL_ARCH_LLAMA, TSL_TYPE_F32, TSL_TYPE_F32, "llama.gguf"); }
static void test_batching_qwen2(void) { check_batching(TSL_ARCH_QWEN2, TSL_TYPE_F32, TSL_TYPE_F32, "qwen2.gguf"); }
static void test_batching_qwen3(void) { check_batching(TSL_ARCH_QWEN3, TSL_TYPE_F32, TSL_TYPE_F32, "qwen3.gguf"); }
static void test_batching_f16_cache(void) {
    check_batching(TSL_ARCH_QWEN2, TSL_TYPE_F32, TSL_TYPE_F16, "qwen2_kv16.gguf");
}
static void test_batching_q8_0(void) {
    check_batching(TSL_ARCH_LLAMA, TSL_TYPE_Q8_0, TSL_TYPE_F32, "llama_q8.gguf");
    check_batching(TSL_ARCH_LLAMA, TSL_TYPE_Q8_0, TSL_TYPE_F16, "llama_q8.gguf");
}
static void test_batching_q4_0(void) {
    check_batching(TSL_ARCH_QWEN3, TSL_TYPE_Q4_0, TSL_TYPE_F32, "qwen3_q4.gguf");
    check_batching(TSL_ARCH_QWEN3, TSL_TYPE_Q4_0, TSL_TYPE_F16, "qwen3_q4.gguf");
}

/* A long prompt (past the GEMM switch of mul_mat) against token-by-token decode. */
static void test_long_prefill(void) {
    synth_params sp = tiny_params(TSL_ARCH_QWEN2, TSL_TYPE_F32);
    CHECK(write_model(&sp, tpath("long.gguf")));
    tsl_model *m = load(tpath("long.gguf"));
    if (!m) {
        CHECK(m != NULL);
        return;
    }
    tsl_backend *be = tsl_backend_cpu_new(2, NULL);
    const int n = 100, nv = tsl_model_get_info(m)->n_vocab;
    int32_t toks[100];
    for (int i = 0; i < n; i++) toks[i] = (i * 37 + 11) % nv;
    tsl_llm_ctx *a = new_ctx(m, be, 128, 128, TSL_TYPE_F32, false);
    tsl_llm_ctx *b = new_ctx(m, be, 128, 128, TSL_TYPE_F32, false);
    tsl_error err;
    CHECK(tsl_llm_decode(a, toks, n, &err) == TSL_SUCCESS);
    for (int i = 0; i < n; i++) CHECK(tsl_llm_decode(b, toks + i, 1, &err) == TSL_SUCCESS);
    CHECK(tsl_llm_n_logits(a) == 1 && tsl_llm_n_logits(b) == 1);
    CHECK(tsl_llm_logits(a, 0) == tsl_llm_logits(a, -1));
    CHECK(tsl_llm_logits(a, 1) == NULL);
    double d = rel_diff(tsl_llm_logits(a, -1), tsl_llm_logits(b, -1), nv);
    CHECKF(d <= 1e-4, "prefill of %d vs %d decodes: %.3g", n, n, d);
    tsl_llm_ctx_free(a);
    tsl_llm_ctx_free(b);
    tsl_backend_free(be);
    tsl_model_free(m);
}

/* llama3's rope frequency factors are read and change the result. */
static void test_rope_freqs(void) {
    synth_params sp = tiny_params(TSL_ARCH_LLAMA, TSL_TYPE_F32);
    CHECK(write_model(&sp, tpath("plain.gguf")));
    rw_opts o = {.add_rope_freqs = true, .n_rot = sp.shape.head_dim};
    CHECK(rewrite(tpath("plain.gguf"), tpath("freqs.gguf"), &o));
    tsl_model *a = load(tpath("plain.gguf")), *b = load(tpath("freqs.gguf"));
    CHECK(a && b);
    if (!a || !b) {
        tsl_model_free(a);
        tsl_model_free(b);
        return;
    }
    CHECK(a->w.rope_freqs == NULL && b->w.rope_freqs != NULL);
    tsl_backend *be = tsl_backend_cpu_new(2, NULL);
    const int nv = tsl_model_get_info(a)->n_vocab;
    float *la = malloc((size_t)N_PROMPT * nv * 4), *lb = malloc((size_t)N_PROMPT * nv * 4),
          *lb1 = malloc((size_t)N_PROMPT * nv * 4);
    CHECK(logits_batched(a, be, TSL_TYPE_F32, N_PROMPT, N_PROMPT, la));
    CHECK(logits_batched(b, be, TSL_TYPE_F32, N_PROMPT, N_PROMPT, lb));
    CHECK(logits_batched(b, be, TSL_TYPE_F32, 1, 1, lb1));
    /* token 0 is at position 0, where rope is the identity: same logits */
    CHECK(rel_diff(la, lb, nv) <= 1e-5);
    const size_t last = (size_t)(N_PROMPT - 1) * nv;
    CHECK(rel_diff(la + last, lb + last, nv) > 1e-4);
    CHECK(rel_diff(lb1 + last, lb + last, nv) <= 1e-4);
    free(la);
    free(lb);
    free(lb1);
    tsl_backend_free(be);
    tsl_model_free(a);
    tsl_model_free(b);
}

static void test_info_and_tokenizer(void) {
    synth_params sp = tiny_params(TSL_ARCH_QWEN3, TSL_TYPE_Q8_0);
    CHECK(write_model(&sp, tpath("info.gguf")));
    tsl_model *m = load(tpath("info.gguf"));
    if (!m) {
        CHECK(m != NULL);
        return;
    }
    const tsl_model_info *in = tsl_model_get_info(m);
    CHECK(in->arch == TSL_ARCH_QWEN3 && !strcmp(in->arch_name, "qwen3"));
    CHECK(in->n_embd == 64 && in->n_layer == 2 && in->n_head == 4 && in->n_head_kv == 2);
    CHECK(in->head_dim == 32 && in->head_dim_v == 32 && in->n_rot == 32);
    CHECK(in->n_vocab == 512 && in->n_ff == 128);
    CHECK(in->weight_type == TSL_TYPE_Q8_0);
    CHECK(!in->tied_output);
    /* decode reads every tensor but the embedding table */
    const tsl_tensor *e = m->w.tok_embd;
    CHECK(in->decode_bytes == in->weight_bytes - tsl_nbytes(e));
    CHECK(in->weight_bytes < in->file_bytes);

    const char *text = "hello world, the quick fox";
    int32_t ids[64];
    int32_t n = tsl_llm_tokenize(m, text, strlen(text), false, false, ids, 64);
    CHECK(n > 0 && n < (int32_t)strlen(text)); /* merges made multi-byte tokens */
    char back[128];
    CHECK(tsl_llm_detokenize(m, ids, (size_t)n, false, back, sizeof back) == (int64_t)strlen(text));
    CHECK(!strcmp(back, text));
    int32_t eos = tsl_llm_token_eos(m);
    CHECK(eos >= 0 && tsl_llm_token_is_eog(m, eos));
    CHECK(!tsl_llm_token_is_eog(m, ids[0]));
    /* special tokens are parsed when asked */
    n = tsl_llm_tokenize(m, "<|im_end|>", 10, false, true, ids, 64);
    CHECK(n == 1 && tsl_llm_token_is_eog(m, ids[0]));
    tsl_model_free(m);
}

/* Greedy generation is deterministic, and so is sampling with a seed. */
static void generate(tsl_model *m, tsl_backend *be, const tsl_sampler_params *sp, int32_t *out, int n) {
    tsl_llm_ctx *c = new_ctx(m, be, 64, 16, TSL_TYPE_F16, false);
    tsl_sampler *s = tsl_sampler_new(sp, NULL);
    tsl_error err;
    CHECK(c && s && tsl_llm_decode(c, PROMPT, 4, &err) == TSL_SUCCESS);
    for (int i = 0; c && s && i < n; i++) {
        out[i] = tsl_sampler_sample(s, tsl_llm_logits(c, -1), tsl_model_get_info(m)->n_vocab);
        tsl_sampler_accept(s, out[i]);
        CHECK(out[i] >= 0 && tsl_llm_decode(c, &out[i], 1, &err) == TSL_SUCCESS);
    }
    tsl_sampler_free(s);
    tsl_llm_ctx_free(c);
}

static void test_generation_deterministic(void) {
    synth_params sp = tiny_params(TSL_ARCH_LLAMA, TSL_TYPE_Q8_0);
    CHECK(write_model(&sp, tpath("gen.gguf")));
    tsl_model *m = load(tpath("gen.gguf"));
    if (!m) {
        CHECK(m != NULL);
        return;
    }
    tsl_backend *be1 = tsl_backend_cpu_new(1, NULL), *be2 = tsl_backend_cpu_new(2, NULL);
    tsl_sampler_params g = tsl_sampler_default_params();
    g.temp = 0;
    int32_t a[16], b[16], c[16], d[16];
    generate(m, be1, &g, a, 16);
    generate(m, be2, &g, b, 16);
    CHECK(!memcmp(a, b, sizeof a));
    tsl_sampler_params r = tsl_sampler_default_params();
    r.temp = 1.5f;
    r.top_k = 0;
    r.top_p = 1;
    r.min_p = 0;
    r.seed = 1234;
    generate(m, be2, &r, c, 16);
    generate(m, be2, &r, d, 16);
    CHECK(!memcmp(c, d, sizeof c));
    CHECK(memcmp(a, c, sizeof a) != 0); /* hot sampling is not greedy */
    tsl_backend_free(be1);
    tsl_backend_free(be2);
    tsl_model_free(m);
}

/* tsl_llm_decode_greedy: the graph's argmax is the sampler's greedy choice,
 * token by token, over a prompt in several batches and single tokens; it
 * keeps no logits; the logits come back with the next plain decode; a model
 * whose logits are all NaN gets a clear error instead of a token. */
static void greedy_tokens(tsl_llm_ctx *c, int nv, bool graph, int32_t *out, int n) {
    tsl_sampler_params g = tsl_sampler_default_params();
    g.temp = 0;
    tsl_sampler *s = tsl_sampler_new(&g, NULL);
    tsl_error err;
    int32_t id = -1;
    CHECK(s && (graph ? tsl_llm_decode_greedy(c, PROMPT, 11, &id, &err)
                      : tsl_llm_decode(c, PROMPT, 11, &err)) == TSL_SUCCESS);
    for (int i = 0; s && i < n; i++) {
        if (!graph) id = tsl_sampler_sample(s, tsl_llm_logits(c, -1), nv);
        else CHECK(tsl_llm_logits(c, -1) == NULL && tsl_llm_n_logits(c) == 0);
        out[i] = id;
        CHECKF(id >= 0 && id < nv, "token %d: %d", i, (int)id);
        if (id < 0) break;
        tsl_status st = graph ? tsl_llm_decode_greedy(c, &out[i], 1, &id, &err) : tsl_llm_decode(c, &out[i], 1, &err);
        CHECKF(st == TSL_SUCCESS, "token %d: %s", i, err.message);
        if (st != TSL_SUCCESS) break;
    }
    tsl_sampler_free(s);
}

/* Overwrite an F32 tensor of a GGUF file with NaN, in place. */
static bool nan_tensor(const char *path, const char *name) {
    tsl_error err;
    tsl_gguf *g = tsl_gguf_open(path, &err);
    if (!g) return false;
    const int64_t i = tsl_gguf_find_tensor(g, name);
    const tsl_gguf_tensor_info *ti = i >= 0 ? tsl_gguf_tensor(g, i) : NULL;
    const long at = ti && ti->type == TSL_TYPE_F32 ? (long)(tsl_gguf_data_offset(g) + ti->offset) : -1;
    const size_t n = ti ? ti->size / sizeof(float) : 0;
    tsl_gguf_close(g);
    FILE *f = at >= 0 ? fopen(path, "r+b") : NULL;
    bool ok = f && fseek(f, at, SEEK_SET) == 0;
    const float v = NAN;
    for (size_t k = 0; ok && k < n; k++) ok = fwrite(&v, sizeof v, 1, f) == 1;
    if (f) ok = fclose(f) == 0 && ok;
    return ok;
}

static void test_decode_greedy(void) {
    synth_params sp = tiny_params(TSL_ARCH_QWEN2, TSL_TYPE_Q8_0);
    CHECK(write_model(&sp, tpath("greedy.gguf")));
    tsl_model *m = load(tpath("greedy.gguf"));
    if (!m) {
        CHECK(m != NULL);
        return;
    }
    const int nv = tsl_model_get_info(m)->n_vocab;
    tsl_backend *be = tsl_backend_cpu_new(2, NULL);
    /* batches of 4 for the prompt; logits_all is ignored by the greedy call */
    tsl_llm_ctx *a = new_ctx(m, be, 64, 4, TSL_TYPE_F16, false), *b = new_ctx(m, be, 64, 4, TSL_TYPE_F16, true);
    int32_t ta[20], tb[20];
    greedy_tokens(a, nv, false, ta, 20);
    greedy_tokens(b, nv, true, tb, 20);
    CHECK(!memcmp(ta, tb, sizeof ta));
    /* a plain decode after greedy ones: the logits again, the same as a's */
    tsl_error err;
    tsl_llm_truncate(a, 30, &err);
    tsl_llm_truncate(b, 30, &err);
    CHECK(tsl_llm_decode(a, &ta[19], 1, &err) == TSL_SUCCESS && tsl_llm_decode(b, &ta[19], 1, &err) == TSL_SUCCESS);
    CHECK(tsl_llm_n_logits(b) == 1 && rel_diff(tsl_llm_logits(a, -1), tsl_llm_logits(b, -1), nv) <= 1e-6);
    /* bad arguments */
    int32_t next = 5;
    CHECK(tsl_llm_decode_greedy(b, NULL, 1, &next, &err) == TSL_FAILED && next == -1);
    CHECK_STR_CONTAINS(err.message, "no tokens given");
    CHECK(tsl_llm_decode_greedy(b, PROMPT, 1, NULL, &err) == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "next is NULL");
    CHECK(tsl_llm_n_past(b) == 31);
    tsl_llm_ctx_free(a);
    tsl_llm_ctx_free(b);
    tsl_model_free(m);

    /* an output projection of NaN: no logit above -inf, so no token */
    sp = tiny_params(TSL_ARCH_LLAMA, TSL_TYPE_F32);
    CHECK(write_model(&sp, tpath("greedy_nan.gguf")) && nan_tensor(tpath("greedy_nan.gguf"), "output.weight"));
    m = load(tpath("greedy_nan.gguf"));
    tsl_llm_ctx *c = m ? new_ctx(m, be, 64, 4, TSL_TYPE_F16, false) : NULL;
    if (c) {
        next = 5;
        CHECK(tsl_llm_decode_greedy(c, PROMPT, 3, &next, &err) == TSL_FAILED && next == -1);
        CHECK_STR_CONTAINS(err.message, "no value above -inf");
        CHECK(tsl_llm_n_past(c) == 0); /* a failed call changes nothing */
        CHECK(tsl_llm_decode(c, PROMPT, 3, &err) == TSL_SUCCESS);
        tsl_sampler *s = tsl_sampler_new(NULL, NULL);
        CHECK(tsl_sampler_sample(s, tsl_llm_logits(c, -1), nv) == -1); /* the sampler agrees */
        tsl_sampler_free(s);
    } else {
        CHECK(c != NULL);
    }
    tsl_llm_ctx_free(c);
    tsl_model_free(m);
    tsl_backend_free(be);
}

/* tsl_llm_generate_greedy: several decode steps to a graph give the tokens,
 * history and cache of one tsl_llm_decode_greedy call per token, bit for
 * bit, whatever the steps per graph and however the calls are cut, across
 * an attention span's boundary (256 positions); bad arguments, a device
 * lost in the middle and a rebuild after it. */
static tsl_llm_ctx *steps_ctx(tsl_model *m, tsl_backend *be, int n_ctx, int steps) {
    tsl_llm_params p = tsl_llm_default_params();
    p.backend = be;
    p.n_ctx = n_ctx;
    p.n_batch = 4;
    p.n_steps = steps;
    tsl_error err;
    tsl_llm_ctx *c = tsl_llm_ctx_new(m, &p, &err);
    if (!c) fprintf(stderr, "ctx: %s\n", err.message);
    return c;
}

enum { GEN_N = 262 }; /* from position 11 past 256 */

static void test_generate_greedy(void) {
    /* qwen2's tiny shape ties its output to the embeddings: greedy repeats the token */
    synth_params sp = tiny_params(TSL_ARCH_QWEN3, TSL_TYPE_Q8_0);
    CHECK(write_model(&sp, tpath("gen.gguf")));
    tsl_model *m = load(tpath("gen.gguf"));
    if (!m) {
        CHECK(m != NULL);
        return;
    }
    const int nv = tsl_model_get_info(m)->n_vocab;
    tsl_backend *be = tsl_backend_cpu_new(2, NULL);
    tsl_error err;
    /* the reference: one decode_greedy call a token */
    static int32_t ref[GEN_N], got[GEN_N];
    tsl_llm_ctx *r = steps_ctx(m, be, 300, 1);
    int32_t first = -1;
    CHECK(r && tsl_llm_decode_greedy(r, PROMPT, 11, &first, &err) == TSL_SUCCESS);
    int32_t id = first;
    for (int i = 0; r && i < GEN_N; i++) {
        CHECK(tsl_llm_decode_greedy(r, &id, 1, &ref[i], &err) == TSL_SUCCESS);
        id = ref[i];
    }
    int distinct = 0;
    for (int i = 0; i < 20; i++) {
        bool seen = false;
        for (int j = 0; j < i; j++) seen = seen || ref[j] == ref[i];
        distinct += !seen;
    }
    CHECKF(distinct >= 4, "the reference repeats itself: %d distinct tokens in 20", distinct);
    CHECK(r && tsl_llm_decode(r, &ref[GEN_N - 1], 1, &err) == TSL_SUCCESS);

    /* several steps a graph; calls cut at 3, then 17, then the rest */
    const int steps[] = {8, 5, 32, 1};
    const int cuts[] = {3, 20, GEN_N};
    for (int k = 0; k < 4; k++) {
        tsl_llm_ctx *c = steps_ctx(m, be, 300, steps[k]);
        int32_t f = -1;
        CHECK(c && tsl_llm_decode_greedy(c, PROMPT, 11, &f, &err) == TSL_SUCCESS && f == first);
        int at = 0;
        for (int j = 0; c && j < 3; j++) {
            const int32_t tok = at == 0 ? f : got[at - 1];
            const tsl_status st = tsl_llm_generate_greedy(c, tok, cuts[j] - at, got + at, &err);
            CHECKF(st == TSL_SUCCESS, "steps %d, tokens %d..%d: %s", steps[k], at, cuts[j], err.message);
            at = cuts[j];
            CHECK(tsl_llm_n_past(c) == 11 + at && tsl_llm_n_logits(c) == 0);
        }
        CHECKF(!memcmp(got, ref, sizeof ref), "steps %d: the tokens differ from one decode a token", steps[k]);
        CHECK(c && !memcmp(tsl_llm_history(c), tsl_llm_history(r), (11 + GEN_N) * sizeof(int32_t)));
        /* the cache too: the next token's logits, bit for bit */
        CHECK(c && tsl_llm_decode(c, &got[GEN_N - 1], 1, &err) == TSL_SUCCESS);
        CHECKF(c && !memcmp(tsl_llm_logits(c, -1), tsl_llm_logits(r, -1), (size_t)nv * sizeof(float)),
               "steps %d: the logits after generation differ", steps[k]);
        tsl_llm_ctx_free(c);
    }

    /* bad arguments change nothing */
    tsl_llm_ctx *c = steps_ctx(m, be, 40, 0);
    CHECK(c && tsl_llm_decode(c, PROMPT, 11, &err) == TSL_SUCCESS);
    int32_t out[40];
    CHECK(tsl_llm_generate_greedy(c, 5, 4, NULL, &err) == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "out is NULL");
    out[0] = 7;
    CHECK(tsl_llm_generate_greedy(c, 5, 0, out, &err) == TSL_FAILED && out[0] == 7);
    CHECK_STR_CONTAINS(err.message, "n = 0");
    CHECK(tsl_llm_generate_greedy(c, nv, 2, out, &err) == TSL_FAILED && out[0] == -1 && out[1] == -1);
    CHECK_STR_CONTAINS(err.message, "outside the vocabulary");
    CHECK(tsl_llm_generate_greedy(c, 5, 30, out, &err) == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "29 of 40 positions left");
    CHECK(tsl_llm_generate_greedy(NULL, 5, 3, out, &err) == TSL_FAILED);
    CHECK(tsl_llm_n_past(c) == 11);
    CHECK(tsl_llm_generate_greedy(c, first, 29, out, &err) == TSL_SUCCESS && tsl_llm_n_past(c) == 40);
    CHECK(!memcmp(out, ref, 29 * sizeof(int32_t)));
    tsl_llm_ctx_free(c);
    tsl_llm_params bp = tsl_llm_default_params();
    bp.backend = be;
    bp.n_steps = 33;
    CHECK(tsl_llm_ctx_new(m, &bp, &err) == NULL);
    CHECK_STR_CONTAINS(err.message, "n_steps 33 is outside 0..32");

    /* a device lost in the middle (the third graph): nothing counted;
     * after recovery the same call rebuilds the cache and gives the same
     * tokens; a rebuild after generation replays it bit for bit */
    tsl_backend *lbe = tsl_backend_cpu_new(2, NULL);
    c = steps_ctx(m, lbe, 300, 8);
    int32_t f = -1;
    /* the prompt's three batches are computes 1 to 3 */
    CHECK(c && tsl_llm_decode_greedy(c, PROMPT, 11, &f, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_inject(lbe, "lost@compute=6", &err) == TSL_SUCCESS);
    for (int i = 0; i < 40; i++) got[i] = 9;
    CHECK(tsl_llm_generate_greedy(c, f, 40, got, &err) == TSL_DEVICE_LOST);
    CHECK(tsl_llm_n_past(c) == 11 && got[0] == -1 && got[39] == -1);
    CHECK(tsl_backend_injected(lbe, TSL_FAULT_LOST) == 1);
    tsl_backend_inject_clear(lbe);
    CHECK(tsl_backend_recover(lbe, &err) == TSL_SUCCESS);
    CHECK(tsl_llm_generate_greedy(c, f, 40, got, &err) == TSL_SUCCESS && tsl_llm_n_past(c) == 51);
    CHECK(!memcmp(got, ref, 40 * sizeof(int32_t)));
    CHECK(tsl_llm_rebuild(c, &err) == TSL_SUCCESS && tsl_llm_n_past(c) == 51);
    CHECK(tsl_llm_truncate(r, 51, &err) == TSL_SUCCESS);
    CHECK(tsl_llm_decode(c, &got[39], 1, &err) == TSL_SUCCESS && tsl_llm_decode(r, &ref[39], 1, &err) == TSL_SUCCESS);
    CHECK(!memcmp(tsl_llm_logits(c, -1), tsl_llm_logits(r, -1), (size_t)nv * sizeof(float)));
    tsl_llm_ctx_free(c);

    /* a compute that fails in the second graph (a buffer lookup finds
     * nothing): FAILED naming it, nothing counted though the first graph
     * ran, the history as it was; the same call then gives the tokens. A
     * transient refusal is retried by the context's policy: the same
     * tokens, no error */
    tsl_backend *fbe = tsl_backend_cpu_new(2, NULL);
    c = steps_ctx(m, fbe, 300, 8);
    CHECK(c && tsl_llm_decode_greedy(c, PROMPT, 11, &f, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_inject(fbe, "nobuf@compute=5", &err) == TSL_SUCCESS);
    for (int i = 0; i < 20; i++) got[i] = 9;
    CHECK(tsl_llm_generate_greedy(c, f, 20, got, &err) == TSL_FAILED);
    CHECK(tsl_backend_injected(fbe, TSL_FAULT_NOBUF) > 0 && err.node >= 0);
    CHECK_STR_CONTAINS(err.message, "has no data");
    CHECK(tsl_llm_n_past(c) == 11 && got[0] == -1 && got[19] == -1);
    CHECK(!memcmp(tsl_llm_history(c), tsl_llm_history(r), 11 * sizeof(int32_t)));
    tsl_backend_inject_clear(fbe);
    CHECK(tsl_llm_generate_greedy(c, f, 20, got, &err) == TSL_SUCCESS && tsl_llm_n_past(c) == 31);
    CHECK(!memcmp(got, ref, 20 * sizeof(int32_t)));
    CHECK(tsl_backend_inject(fbe, "retry@times=1", &err) == TSL_SUCCESS);
    CHECKF(tsl_llm_generate_greedy(c, got[19], 20, got + 20, &err) == TSL_SUCCESS, "%s", err.message);
    CHECK(tsl_backend_injected(fbe, TSL_FAULT_RETRY) == 1);
    CHECK(tsl_llm_n_past(c) == 51 && !memcmp(got, ref, 40 * sizeof(int32_t)));
    tsl_backend_inject_clear(fbe);
    tsl_llm_ctx_free(c);
    tsl_backend_free(fbe);
    tsl_llm_ctx_free(r);
    tsl_backend_free(lbe);
    tsl_backend_free(be);
    tsl_model_free(m);
}

static void expect_load_error(const char *path, const char *must1, const char *must2) {
    tsl_error err;
    tsl_model_params mp = tsl_model_default_params();
    mp.progress = false;
    tsl_model *m = tsl_model_load(path, &mp, &err);
    CHECK(m == NULL);
    tsl_model_free(m);
    CHECK(err.status == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, must1);
    if (must2) CHECK_STR_CONTAINS(err.message, must2);
}

static void test_bad_files(void) {
    synth_params sp = tiny_params(TSL_ARCH_QWEN2, TSL_TYPE_F32);
    char good[256];
    snprintf(good, sizeof good, "%s", tpath("good.gguf"));
    CHECK(write_model(&sp, good));
    rw_opts o1 = {.skip_tensor = "blk.1.ffn_up.weight"};
    CHECK(rewrite(good, tpath("missing.gguf"), &o1));
    expect_load_error(tpath("missing.gguf"), "'blk.1.ffn_up.weight' is missing", NULL);

    rw_opts o2 = {.swap_tensor = "blk.0.attn_k.weight"};
    CHECK(rewrite(good, tpath("shape.gguf"), &o2));
    expect_load_error(tpath("shape.gguf"), "'blk.0.attn_k.weight' has shape [32, 64", "expected [64, 32]");

    rw_opts o3 = {.skip_tensor = "blk.0.attn_q.bias"}; /* qwen2 needs its biases */
    CHECK(rewrite(good, tpath("bias.gguf"), &o3));
    expect_load_error(tpath("bias.gguf"), "'blk.0.attn_q.bias' is missing", NULL);

    rw_opts o4 = {.arch = "gpt2"};
    CHECK(rewrite(good, tpath("arch.gguf"), &o4));
    expect_load_error(tpath("arch.gguf"), "architecture 'gpt2' is not supported", NULL);

    rw_opts o5 = {.drop_key = "qwen2.block_count"};
    CHECK(rewrite(good, tpath("key.gguf"), &o5));
    expect_load_error(tpath("key.gguf"), "'qwen2.block_count' is missing", NULL);

    rw_opts o6 = {.drop_key = "tokenizer.ggml.tokens"};
    CHECK(rewrite(good, tpath("notok.gguf"), &o6));
    expect_load_error(tpath("notok.gguf"), "tokenizer", NULL);

    /* a truncated file: the GGUF reader's error, no crash */
    FILE *f = fopen(good, "rb"), *g = fopen(tpath("trunc.gguf"), "wb");
    CHECK(f && g);
    if (f && g) {
        char buf[4096];
        size_t n = fread(buf, 1, sizeof buf, f);
        fwrite(buf, 1, n / 2, g);
    }
    if (f) fclose(f);
    if (g) fclose(g);
    expect_load_error(tpath("trunc.gguf"), "trunc.gguf", NULL);
    expect_load_error(tpath("does-not-exist.gguf"), "does-not-exist.gguf", NULL);
}

/* Bad decode arguments fail cleanly and change nothing. */
static void test_decode_arguments(void) {
    synth_params sp = tiny_params(TSL_ARCH_LLAMA, TSL_TYPE_F32);
    CHECK(write_model(&sp, tpath("args.gguf")));
    tsl_model *m = load(tpath("args.gguf"));
    if (!m) {
        CHECK(m != NULL);
        return;
    }
    tsl_llm_ctx *c = new_ctx(m, NULL, 8, 4, TSL_TYPE_F16, false); /* its own CPU backend */
    CHECK(c != NULL && tsl_llm_n_ctx(c) == 8);
    tsl_error err;
    int32_t bad[2] = {1, 512};
    CHECK(tsl_llm_decode(c, bad, 2, &err) == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "outside the vocabulary");
    CHECK(tsl_llm_decode(c, PROMPT, 0, &err) == TSL_FAILED);
    CHECK(tsl_llm_n_past(c) == 0);
    CHECK(tsl_llm_decode(c, PROMPT, 6, &err) == TSL_SUCCESS); /* two graphs of 4 and 2 */
    CHECK(tsl_llm_decode(c, PROMPT, 3, &err) == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "2 of 8 positions left");
    CHECK(tsl_llm_n_past(c) == 6 && !memcmp(tsl_llm_history(c), PROMPT, 6 * sizeof(int32_t)));
    CHECK(tsl_llm_truncate(c, 7, &err) == TSL_FAILED);
    CHECK(tsl_llm_truncate(c, 2, &err) == TSL_SUCCESS && tsl_llm_n_past(c) == 2);
    CHECK(tsl_llm_logits(c, -1) == NULL);
    tsl_llm_ctx_free(c);
    tsl_llm_params p = tsl_llm_default_params();
    p.kv_type = TSL_TYPE_Q8_0;
    CHECK(tsl_llm_ctx_new(m, &p, &err) == NULL);
    CHECK_STR_CONTAINS(err.message, "kv_type");
    /* n_ctx 0: the model's context length (512 for tiny) */
    p = tsl_llm_default_params();
    c = tsl_llm_ctx_new(m, &p, &err);
    CHECK(c && tsl_llm_n_ctx(c) == 512);
    tsl_llm_ctx_free(c);
    tsl_model_free(m);
}

/* ---- faults ---------------------------------------------------------------------------- */

typedef struct abort_state {
    int calls, stop_after;
} abort_state;

static bool abort_cb(void *user) {
    abort_state *a = user;
    return ++a->calls > a->stop_after;
}

/* A compute that fails returns its status from decode with the record; the
 * failed tokens are not counted and the context goes on as if they were
 * never sent. */
static void test_fault_paths(void) {
    synth_params sp = tiny_params(TSL_ARCH_QWEN2, TSL_TYPE_F32);
    CHECK(write_model(&sp, tpath("fault.gguf")));
    tsl_model *m = load(tpath("fault.gguf"));
    if (!m) {
        CHECK(m != NULL);
        return;
    }
    const int nv = tsl_model_get_info(m)->n_vocab;
    tsl_backend *be = tsl_backend_cpu_new(2, NULL), *ref_be = tsl_backend_cpu_new(2, NULL);
    tsl_llm_ctx *ref = new_ctx(m, ref_be, 64, 16, TSL_TYPE_F16, false);
    tsl_llm_params p = tsl_llm_default_params();
    p.backend = be;
    p.n_ctx = 64;
    p.retry_attempts = 1; /* RETRY comes back to the caller */
    tsl_error err;
    tsl_llm_ctx *c = tsl_llm_ctx_new(m, &p, &err);
    CHECK(c && ref);
    if (!c || !ref) goto done;
    CHECK(tsl_llm_decode(ref, PROMPT, 5, &err) == TSL_SUCCESS);
    CHECK(tsl_llm_decode(c, PROMPT, 3, &err) == TSL_SUCCESS);

    /* aborted in the middle of the graph */
    abort_state ab = {0, 20};
    tsl_backend_set_abort_callback(be, abort_cb, &ab);
    CHECK(tsl_llm_decode(c, PROMPT + 3, 2, &err) == TSL_ABORTED);
    CHECK(err.status == TSL_ABORTED && err.node >= 0);
    CHECK(tsl_llm_n_past(c) == 3 && tsl_llm_logits(c, -1) == NULL);
    tsl_backend_set_abort_callback(be, NULL, NULL);

    /* refused (transient): nothing ran */
    CHECK(tsl_backend_inject(be, "retry@times=1", &err) == TSL_SUCCESS);
    CHECK(tsl_llm_decode(c, PROMPT + 3, 2, &err) == TSL_RETRY);
    CHECK(tsl_llm_n_past(c) == 3);

    /* a buffer lookup that finds nothing: FAILED naming the tensor */
    tsl_backend_inject_clear(be);
    CHECK(tsl_backend_inject(be, "nobuf@tensor=blk.1.ffn_up.weight,times=1", &err) == TSL_SUCCESS);
    CHECK(tsl_llm_decode(c, PROMPT + 3, 2, &err) == TSL_FAILED);
    CHECK(!strcmp(err.tensor, "blk.1.ffn_up.weight"));
    CHECK(!strcmp(err.op, "MUL_MAT"));
    char line[1024];
    tsl_error_format(&err, line, sizeof line);
    CHECK_STR_CONTAINS(line, "FAILED");
    CHECK(tsl_llm_n_past(c) == 3);

    /* memory that cannot be had: the activation buffer must grow for 2 tokens */
    tsl_backend_inject_clear(be);
    tsl_llm_ctx *c2 = new_ctx(m, be, 64, 16, TSL_TYPE_F16, false);
    CHECK(c2 && tsl_llm_decode(c2, PROMPT, 1, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_inject(be, "alloc@times=1", &err) == TSL_SUCCESS);
    CHECK(c2 && tsl_llm_decode(c2, PROMPT + 1, 8, &err) == TSL_ALLOC_FAILED);
    CHECK(c2 && tsl_llm_n_past(c2) == 1);
    tsl_llm_ctx_free(c2);
    tsl_backend_inject_clear(be);

    /* after all that, the same tokens give the fault-free result */
    CHECK(tsl_llm_decode(c, PROMPT + 3, 2, &err) == TSL_SUCCESS);
    CHECK(tsl_llm_n_past(c) == 5);
    CHECK(tsl_llm_logits(c, -1) && rel_diff(tsl_llm_logits(c, -1), tsl_llm_logits(ref, -1), nv) <= 1e-5);

    /* with the default policy a RETRY is retried inside decode */
    tsl_llm_ctx *c3 = new_ctx(m, be, 64, 16, TSL_TYPE_F16, false);
    CHECK(tsl_backend_inject(be, "retry@times=2", &err) == TSL_SUCCESS);
    uint64_t before = tsl_backend_injected(be, TSL_FAULT_RETRY);
    CHECK(c3 && tsl_llm_decode(c3, PROMPT, 5, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_injected(be, TSL_FAULT_RETRY) == before + 2);
    CHECK(c3 && rel_diff(tsl_llm_logits(c3, -1), tsl_llm_logits(ref, -1), nv) <= 1e-5);
    tsl_llm_ctx_free(c3);
    tsl_backend_inject_clear(be);
done:
    tsl_llm_ctx_free(c);
    tsl_llm_ctx_free(ref);
    tsl_backend_free(be);
    tsl_backend_free(ref_be);
    tsl_model_free(m);
}

/* Single tokens, a longer batch in between (its graph needs more
 * activation memory, so the allocator replaces its buffer), single tokens
 * again: the kept single-token graph must be placed anew, not computed
 * into the buffer freed under it (ASan sees it), and every token's logits
 * match a context that ran the same tokens as one prompt. */
static void test_decode_graph_reuse(void) {
    synth_params sp = tiny_params(TSL_ARCH_LLAMA, TSL_TYPE_F32);
    CHECK(write_model(&sp, tpath("reuse.gguf")));
    tsl_model *m = load(tpath("reuse.gguf"));
    if (!m) {
        CHECK(m != NULL);
        return;
    }
    const int nv = tsl_model_get_info(m)->n_vocab;
    int32_t toks[120];
    for (int i = 0; i < 120; i++) toks[i] = (i * 37 + 11) % nv;
    tsl_backend *be = tsl_backend_cpu_new(2, NULL);
    tsl_llm_ctx *ref = new_ctx(m, be, 256, 128, TSL_TYPE_F32, true), *c = new_ctx(m, be, 256, 128, TSL_TYPE_F32, false);
    tsl_error err;
    CHECK(ref && c && tsl_llm_decode(ref, toks, 120, &err) == TSL_SUCCESS);
    /* 4, then 1 x 6, then 100 at once, then 1 x 10 */
    const int steps[] = {4, 1, 1, 1, 1, 1, 1, 100, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    int at = 0;
    for (size_t k = 0; c && ref && k < sizeof steps / sizeof steps[0]; k++) {
        CHECK(tsl_llm_decode(c, toks + at, steps[k], &err) == TSL_SUCCESS);
        at += steps[k];
        if (steps[k] == 1 && k > 1 && k != 8) CHECK(llm_ctx_timings(c)->n_graphs_reused == 1);
        double d = rel_diff(tsl_llm_logits(c, -1), tsl_llm_logits(ref, at - 1), nv);
        CHECKF(d <= 1e-4, "after %d tokens: %.3g", at, d);
    }
    tsl_llm_ctx_free(ref);
    tsl_llm_ctx_free(c);
    tsl_backend_free(be);
    tsl_model_free(m);
}

/* A lost cache (as after device recovery: buffers come back zeroed) is
 * rebuilt from the token history and generation carries on unchanged. */
static void test_rebuild(void) {
    synth_params sp = tiny_params(TSL_ARCH_LLAMA, TSL_TYPE_F32);
    CHECK(write_model(&sp, tpath("rebuild.gguf")));
    tsl_model *m = load(tpath("rebuild.gguf"));
    if (!m) {
        CHECK(m != NULL);
        return;
    }
    const int nv = tsl_model_get_info(m)->n_vocab;
    tsl_backend *be = tsl_backend_cpu_new(2, NULL);
    tsl_llm_ctx *ref = new_ctx(m, be, 64, 4, TSL_TYPE_F16, false), *c = new_ctx(m, be, 64, 4, TSL_TYPE_F16, false);
    tsl_error err;
    CHECK(tsl_llm_decode(ref, PROMPT, 10, &err) == TSL_SUCCESS);
    CHECK(tsl_llm_decode(c, PROMPT, 9, &err) == TSL_SUCCESS);
    llm_kv *kv = llm_ctx_kv(c);
    void *mem = tsl_buffer_host_ptr(kv->buf);
    CHECK(mem != NULL);
    memset(mem, 0, tsl_buffer_size(kv->buf)); /* the cache is gone */

    /* without a rebuild the next token sees a zeroed cache: a different result */
    tsl_llm_ctx *lost = new_ctx(m, be, 64, 4, TSL_TYPE_F16, false);
    CHECK(tsl_llm_decode(lost, PROMPT, 9, &err) == TSL_SUCCESS);
    memset(tsl_buffer_host_ptr(llm_ctx_kv(lost)->buf), 0, tsl_buffer_size(llm_ctx_kv(lost)->buf));
    CHECK(tsl_llm_decode(lost, PROMPT + 9, 1, &err) == TSL_SUCCESS);
    CHECK(rel_diff(tsl_llm_logits(lost, -1), tsl_llm_logits(ref, -1), nv) > 1e-3);
    tsl_llm_ctx_free(lost);

    CHECK(tsl_llm_rebuild(c, &err) == TSL_SUCCESS);
    CHECK(tsl_llm_n_past(c) == 9 && !memcmp(tsl_llm_history(c), PROMPT, 9 * sizeof(int32_t)));
    CHECK(tsl_llm_decode(c, PROMPT + 9, 1, &err) == TSL_SUCCESS);
    CHECK(rel_diff(tsl_llm_logits(c, -1), tsl_llm_logits(ref, -1), nv) <= 1e-5);
    tsl_llm_ctx_free(ref);
    tsl_llm_ctx_free(c);
    tsl_backend_free(be);
    tsl_model_free(m);
}

/* An injected device loss: decode returns DEVICE_LOST (and keeps returning
 * it while the device is latched); after tsl_backend_recover the next
 * decode re-runs the history into the zeroed cache by itself, and the
 * result equals the fault-free one. */
static void test_device_lost(void) {
    synth_params sp = tiny_params(TSL_ARCH_QWEN3, TSL_TYPE_Q8_0);
    CHECK(write_model(&sp, tpath("lost.gguf")));
    tsl_model *m = load(tpath("lost.gguf"));
    if (!m) {
        CHECK(m != NULL);
        return;
    }
    const int nv = tsl_model_get_info(m)->n_vocab;
    tsl_backend *be = tsl_backend_cpu_new(2, NULL), *ref_be = tsl_backend_cpu_new(2, NULL);
    tsl_llm_ctx *ref = new_ctx(m, ref_be, 64, 4, TSL_TYPE_F16, false), *c = new_ctx(m, be, 64, 4, TSL_TYPE_F16, false);
    tsl_error err;
    CHECK(tsl_llm_decode(ref, PROMPT, 11, &err) == TSL_SUCCESS);
    CHECK(tsl_llm_decode(c, PROMPT, 9, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_inject(be, "lost@times=1", &err) == TSL_SUCCESS);
    CHECK(tsl_llm_decode(c, PROMPT + 9, 1, &err) == TSL_DEVICE_LOST);
    CHECK(err.status == TSL_DEVICE_LOST);
    CHECK(tsl_llm_n_past(c) == 9);
    CHECK(tsl_backend_is_lost(be));
    CHECK(tsl_llm_decode(c, PROMPT + 9, 1, &err) == TSL_DEVICE_LOST); /* latched until recovered */
    CHECK(tsl_llm_n_past(c) == 9);
    CHECK(tsl_backend_recover(be, &err) == TSL_SUCCESS);
    CHECK(!tsl_backend_is_lost(be));
    CHECK(tsl_buffer_is_lost(llm_ctx_kv(c)->buf)); /* the cache came back zeroed */
    CHECK(tsl_llm_decode(c, PROMPT + 9, 2, &err) == TSL_SUCCESS);
    CHECK(!tsl_buffer_is_lost(llm_ctx_kv(c)->buf));
    CHECK(tsl_llm_n_past(c) == 11 && !memcmp(tsl_llm_history(c), PROMPT, 11 * sizeof(int32_t)));
    CHECK(rel_diff(tsl_llm_logits(c, -1), tsl_llm_logits(ref, -1), nv) <= 1e-5);
    tsl_backend_inject_clear(be);
    tsl_llm_ctx_free(ref);
    tsl_llm_ctx_free(c);
    tsl_backend_free(be);
    tsl_backend_free(ref_be);
    tsl_model_free(m);
}

/* ---- memory ---------------------------------------------------------------------------- */

/* Running a Q8_0 model keeps resident memory within file size + KV cache +
 * 64 MiB. The model is ~100 MB, so a copy of the weights would break it. */
static void test_rss(void) {
    synth_params sp;
    memset(&sp, 0, sizeof sp);
    sp.shape = (synth_shape){"rss", TSL_ARCH_LLAMA, 32000, 2048, 512, 24, 1536, 8, 4, 64, 10000.0f, 1e-5f, false};
    sp.type = TSL_TYPE_Q8_0;
    sp.seed = 3;
    sp.n_threads = 2;
    const char *path = tpath("rss.gguf");
    CHECK(write_model(&sp, path));
    const long long base = rss_bytes();
    tsl_model *m = load(path);
    if (!m) {
        CHECK(m != NULL);
        return;
    }
    const tsl_model_info *in = tsl_model_get_info(m);
    CHECK(in->file_bytes > (100u << 20));
    tsl_llm_ctx *c = new_ctx(m, NULL, 1024, 64, TSL_TYPE_F16, false);
    tsl_error err;
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = (i * 7919) % in->n_vocab;
    CHECK(c && tsl_llm_decode(c, toks, 64, &err) == TSL_SUCCESS);
    for (int i = 0; c && i < 8; i++) CHECK(tsl_llm_decode(c, toks + i, 1, &err) == TSL_SUCCESS);
    const long long rss = rss_bytes();
    const long long kv = (long long)kv_bytes(llm_ctx_kv(c));
    const long long budget = (long long)in->file_bytes + kv + (64ll << 20);
    printf("  rss: %.1f MiB (at start %.1f), file %.1f MiB, kv %.1f MiB, budget %.1f MiB\n", rss / 1048576.0,
           base / 1048576.0, in->file_bytes / 1048576.0, kv / 1048576.0, budget / 1048576.0);
    CHECK(rss > 0 && base > 0);
    /* every page of the weights was read (prefetch), so the file is resident */
    CHECK(rss - base >= (long long)in->weight_bytes);
#ifdef TEST_ASAN
    CHECK(rss - base <= budget); /* the instrumented allocator's own memory is not ours */
#else
    CHECK(rss <= budget);
#endif
    tsl_llm_ctx_free(c);
    tsl_model_free(m);
    unlink(path);
}

int main(void) {
    snprintf(test_dir, sizeof test_dir, "/tmp/tsl_test_llm_XXXXXX");
    if (!mkdtemp(test_dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_batching_llama);
    RUN(test_batching_qwen2);
    RUN(test_batching_qwen3);
    RUN(test_batching_f16_cache);
    RUN(test_batching_q8_0);
    RUN(test_batching_q4_0);
    RUN(test_long_prefill);
    RUN(test_rope_freqs);
    RUN(test_info_and_tokenizer);
    RUN(test_generation_deterministic);
    RUN(test_decode_greedy);
    RUN(test_generate_greedy);
    RUN(test_bad_files);
    RUN(test_decode_arguments);
    RUN(test_fault_paths);
    RUN(test_decode_graph_reuse);
    RUN(test_rebuild);
    RUN(test_device_lost);
    RUN(test_rss);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", test_dir);
    return test_summary();
}
