/*
 * test_alloc_compute.c - graphs placed by the graph allocator compute the
 * same bits as graphs whose every tensor has its own memory.
 *
 * Reuse and in-place placement are only correct if no kernel ever reads a
 * value that a later tensor has overwritten; comparing a whole llama forward
 * pass bit for bit against an unshared reference catches any such clash (a
 * freed block handed out one node too early, an in-place op over a source
 * still needed, a view that lost its root). The same allocator then takes a
 * larger graph (its buffer must grow) and a graph too large for any machine
 * (ALLOC_FAILED with a record, no crash, and the allocator still works).
 */
#include <stdint.h>

#include "core/core.h"
#include "tensile/backend.h"
#include "test.h"

/* Failing allocations must come back as NULL under AddressSanitizer too
 * (its default is to abort on a request it cannot serve). */
#if defined(__SANITIZE_ADDRESS__)
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif
#endif

#include "lm_graph.h"

/* ---- running it ---------------------------------------------------------- */

static void lm_model_fill(lm_model *m, unsigned long long seed) {
    for (tsl_tensor *t = tsl_ctx_first_tensor(m->ctx); t; t = tsl_ctx_next_tensor(m->ctx, t)) {
        int64_t n = tsl_nelements(t);
        bool is_norm = t->ne[1] == 1;
        float r = is_norm ? 0.2f : 1.0f / sqrtf((float)t->ne[0]);
        for (int64_t i = 0; i < n; i++) {
            float v = test_rand_f(&seed, -r, r);
            ((float *)t->data)[i] = is_norm ? 1.0f + v : v;
        }
    }
}

/* Token ids, positions and the causal mask for T tokens. */
static void lm_inputs(const lm_dims *d, int32_t *tokens, int32_t *pos, float *mask, unsigned long long seed) {
    int T = d->n_tokens;
    for (int i = 0; i < T; i++) {
        tokens[i] = (int32_t)(test_rand_u64(&seed) % (unsigned long long)d->vocab);
        pos[i] = i;
        for (int j = 0; j < T; j++) mask[i * T + j] = j <= i ? 0.0f : -INFINITY;
    }
}

static size_t lm_graph_mem(const lm_dims *d, bool with_data) {
    size_t meta = 2 * 1024 * 1024;
    if (!with_data) return meta;
    /* generous: every activation of every layer, no reuse */
    size_t T = (size_t)d->n_tokens, E = (size_t)d->n_embd;
    size_t per_layer = T * (12 * E + 4 * (size_t)d->n_ff) + 3 * T * T * (size_t)d->n_head;
    return meta + 4 * ((size_t)d->n_layer * per_layer + T * (size_t)d->vocab + 4 * T * E + T * T) + 256 * 1024;
}

static void print_err(const char *what, const tsl_error *e) {
    char line[600];
    tsl_error_format(e, line, sizeof line);
    fprintf(stderr, "  %s: %s\n", what, line);
}

/* Reference: the graph in a context with data, every tensor its own memory. */
static float *lm_run_reference(tsl_backend *be, const lm_model *m, unsigned long long seed) {
    const lm_dims *d = &m->d;
    lm_graph G;
    float *out = NULL;
    if (!lm_graph_build(&G, m, (tsl_ctx_params){lm_graph_mem(d, true), false})) goto done;
    lm_inputs(d, G.tokens->data, G.pos->data, G.mask->data, seed);
    tsl_error err;
    tsl_status s = tsl_backend_graph_compute(be, G.g, &err);
    if (s != TSL_SUCCESS) {
        print_err("reference compute", &err);
        goto done;
    }
    size_t n = tsl_nbytes(G.logits);
    out = malloc(n);
    memcpy(out, G.logits->data, n);
done:
    tsl_ctx_free(G.ctx);
    return out;
}

typedef struct run_info {
    size_t peak, total, buf_size;
} run_info;

/* The same graph in a no_alloc context, placed by ga. */
static float *lm_run_allocated(tsl_backend *be, tsl_gallocr *ga, const lm_model *m, unsigned long long seed,
                               run_info *info) {
    const lm_dims *d = &m->d;
    lm_graph G;
    float *out = NULL;
    int32_t *tokens = calloc((size_t)d->n_tokens, sizeof *tokens), *pos = calloc((size_t)d->n_tokens, sizeof *pos);
    float *mask = calloc((size_t)d->n_tokens * (size_t)d->n_tokens, sizeof *mask);
    if (!lm_graph_build(&G, m, (tsl_ctx_params){lm_graph_mem(d, false), true})) goto done;
    tsl_error err;
    tsl_status s = tsl_gallocr_alloc_graph(ga, G.g, &err);
    if (s != TSL_SUCCESS) {
        print_err("alloc_graph", &err);
        goto done;
    }
    info->peak = tsl_gallocr_peak(ga);
    info->total = tsl_gallocr_total(ga);
    info->buf_size = tsl_buffer_size(G.logits->buffer);
    lm_inputs(d, tokens, pos, mask, seed);
    s = tsl_tensor_set(G.tokens, tokens, 0, tsl_nbytes(G.tokens), &err);
    if (s == TSL_SUCCESS) s = tsl_tensor_set(G.pos, pos, 0, tsl_nbytes(G.pos), &err);
    if (s == TSL_SUCCESS) s = tsl_tensor_set(G.mask, mask, 0, tsl_nbytes(G.mask), &err);
    if (s == TSL_SUCCESS) s = tsl_backend_graph_compute(be, G.g, &err);
    if (s != TSL_SUCCESS) {
        print_err("compute", &err);
        goto done;
    }
    size_t n = tsl_nbytes(G.logits);
    out = malloc(n);
    if (tsl_tensor_get(G.logits, out, 0, n, &err) != TSL_SUCCESS) {
        print_err("tensor_get", &err);
        free(out);
        out = NULL;
    }
done:
    free(tokens);
    free(pos);
    free(mask);
    tsl_ctx_free(G.ctx);
    return out;
}

static size_t logits_bytes(const lm_dims *d) { return (size_t)d->vocab * (size_t)d->n_tokens * sizeof(float); }

/* Finite and not all alike: a pass that computed nothing would compare
 * equal too. */
static bool plausible(const float *v, size_t n) {
    float lo = v[0], hi = v[0];
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(v[i])) return false;
        lo = v[i] < lo ? v[i] : lo;
        hi = v[i] > hi ? v[i] : hi;
    }
    return hi - lo > 1e-3f;
}

static void test_bit_identical_and_growth(void) {
    tsl_error err;
    tsl_backend *be = tsl_backend_cpu_new(2, &err);
    CHECK(be != NULL);
    if (!be) return;
    lm_dims small = {64, 4, 2, 160, 8, 100, 2};
    lm_dims large = {64, 4, 2, 160, 24, 100, 3};
    lm_model ms, ml;
    CHECK(lm_model_init(&ms, small));
    CHECK(lm_model_init(&ml, large));
    lm_model_fill(&ms, 11);
    lm_model_fill(&ml, 12);
    tsl_gallocr *ga = tsl_gallocr_new(be);

    float *ref_s = lm_run_reference(be, &ms, 5);
    float *ref_l = lm_run_reference(be, &ml, 6);
    CHECK(ref_s && ref_l);
    run_info a = {0}, b = {0}, c = {0};
    float *got_s = lm_run_allocated(be, ga, &ms, 5, &a);
    CHECK(got_s != NULL);
    if (ref_s && got_s) {
        CHECK(plausible(ref_s, logits_bytes(&small) / 4));
        CHECK(memcmp(ref_s, got_s, logits_bytes(&small)) == 0);
    }
    printf("  small: peak %zu, total %zu, buffer %zu\n", a.peak, a.total, a.buf_size);
    CHECK(a.peak > 0 && a.peak < a.total && a.buf_size >= a.peak);

    /* a larger graph on the same allocator: the buffer grows */
    float *got_l = lm_run_allocated(be, ga, &ml, 6, &b);
    CHECK(got_l != NULL);
    if (ref_l && got_l) {
        CHECK(plausible(ref_l, logits_bytes(&large) / 4));
        CHECK(memcmp(ref_l, got_l, logits_bytes(&large)) == 0);
    }
    printf("  large: peak %zu, total %zu, buffer %zu\n", b.peak, b.total, b.buf_size);
    CHECK(b.peak > a.buf_size);
    CHECK(b.buf_size >= b.peak);

    /* the small graph again: it fits, the buffer is kept, results the same */
    float *again = lm_run_allocated(be, ga, &ms, 5, &c);
    CHECK(again != NULL);
    if (ref_s && again) CHECK(memcmp(ref_s, again, logits_bytes(&small)) == 0);
    CHECK(c.peak == a.peak);
    CHECK(c.buf_size == b.buf_size);

    free(ref_s);
    free(ref_l);
    free(got_s);
    free(got_l);
    free(again);
    tsl_gallocr_free(ga);
    tsl_ctx_free(ms.ctx);
    tsl_ctx_free(ml.ctx);
    tsl_backend_free(be);
}

/* A graph no machine can hold: ALLOC_FAILED with a record naming the bytes,
 * nothing placed, and the allocator still serves the next graph. */
static void test_alloc_failure(void) {
    tsl_error err;
    tsl_backend *be = tsl_backend_cpu_new(1, &err);
    CHECK(be != NULL);
    if (!be) return;
    tsl_gallocr *ga = tsl_gallocr_new(be);
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){64 * 1024, true});

    /* 2^48 floats = 1 PiB each, past any address space */
    tsl_tensor *x = tsl_tensor_set_name(tsl_new_tensor_1d(ctx, TSL_TYPE_F32, (int64_t)1 << 48), "huge_in");
    x->flags |= TSL_FLAG_INPUT;
    tsl_tensor *y = tsl_tensor_set_name(tsl_scale(ctx, x, 2.0f), "huge_out");
    tsl_graph *g = tsl_graph_build(ctx, &y, 1);
    CHECK(g != NULL);
    if (g) {
        tsl_error_clear(&err);
        tsl_status s = tsl_gallocr_alloc_graph(ga, g, &err);
        CHECK(s == TSL_ALLOC_FAILED);
        CHECK(err.status == TSL_ALLOC_FAILED);
        size_t want = (size_t)2 << 50; /* x and y: INPUT is never reused */
        CHECK(tsl_gallocr_peak(ga) == want);
        char num[32];
        snprintf(num, sizeof num, "%zu", want);
        CHECK_STR_CONTAINS(err.message, num);
        CHECK_STR_CONTAINS(err.backend, "cpu");
        CHECK(err.hint[0] != '\0');
        print_err("expected failure", &err);
        CHECK(x->data == NULL && y->data == NULL);
    }

    /* the next graph works */
    lm_dims small = {64, 4, 2, 160, 8, 100, 1};
    lm_model m;
    CHECK(lm_model_init(&m, small));
    lm_model_fill(&m, 21);
    float *ref = lm_run_reference(be, &m, 9);
    run_info info = {0};
    float *got = lm_run_allocated(be, ga, &m, 9, &info);
    CHECK(ref && got);
    if (ref && got) CHECK(memcmp(ref, got, logits_bytes(&small)) == 0);
    free(ref);
    free(got);
    tsl_ctx_free(m.ctx);
    tsl_ctx_free(ctx);
    tsl_gallocr_free(ga);
    tsl_backend_free(be);
}

int main(void) {
    RUN(test_bit_identical_and_growth);
    RUN(test_alloc_failure);
    return test_summary();
}
