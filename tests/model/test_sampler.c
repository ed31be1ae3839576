/*
 * test_sampler.c - the sampler: each filter's exact effect on a known
 * distribution (through sampler_dist, the distribution a draw uses), the
 * order of the chain, determinism, and the degenerate cases.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "model/llm_impl.h"
#include "test.h"

/* logits whose softmax is p */
static void logits_of(const double *p, int n, float *out) {
    for (int i = 0; i < n; i++) out[i] = p[i] > 0 ? (float)log(p[i]) : -INFINITY;
}

static tsl_sampler_params neutral(void) {
    tsl_sampler_params p = tsl_sampler_default_params();
    p.temp = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    return p;
}

/* The kept ids (in the chain's order) and their probabilities. */
static int dist(const tsl_sampler_params *p, const float *logits, int n, int32_t *ids, float *probs) {
    tsl_sampler *s = tsl_sampler_new(p, NULL);
    CHECK(s != NULL);
    int k = s ? sampler_dist(s, logits, n, ids, probs, 64) : -1;
    tsl_sampler_free(s);
    return k;
}

static bool has(const int32_t *ids, int n, int32_t id) {
    for (int i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

static const double P5[5] = {0.05, 0.5, 0.15, 0.3, 0.0}; /* id 4 is -inf */

static void test_neutral_is_softmax(void) {
    float l[5];
    logits_of(P5, 5, l);
    tsl_sampler_params p = neutral();
    int32_t ids[64];
    float pr[64];
    int k = dist(&p, l, 5, ids, pr);
    CHECK(k == 4); /* -inf is never a candidate */
    for (int i = 0; i < k; i++) CHECK_NEAR(pr[i], P5[ids[i]], 1e-6);
    CHECK(!has(ids, k, 4));
}

static void test_greedy(void) {
    float l[6] = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f, -INFINITY};
    tsl_sampler_params p = tsl_sampler_default_params();
    p.temp = 0.0f;
    tsl_sampler *s = tsl_sampler_new(&p, NULL);
    for (int i = 0; i < 10; i++) CHECK(tsl_sampler_sample(s, l, 6) == 1); /* first of the tied maxima */
    p.temp = -1.0f; /* any temp <= 0 is greedy */
    tsl_sampler_free(s);
    s = tsl_sampler_new(&p, NULL);
    CHECK(tsl_sampler_sample(s, l, 6) == 1);
    tsl_sampler_free(s);
    /* top_k 1 at any temperature is greedy too */
    p = neutral();
    p.temp = 5.0f;
    p.top_k = 1;
    s = tsl_sampler_new(&p, NULL);
    for (int i = 0; i < 50; i++) CHECK(tsl_sampler_sample(s, l, 6) == 1);
    tsl_sampler_free(s);
}

static void test_top_k(void) {
    float l[5];
    logits_of(P5, 5, l);
    tsl_sampler_params p = neutral();
    int32_t ids[64];
    float pr[64];
    p.top_k = 2;
    int k = dist(&p, l, 5, ids, pr);
    CHECK(k == 2 && ids[0] == 1 && ids[1] == 3); /* sorted, best first */
    CHECK_NEAR(pr[0], 0.5 / 0.8, 1e-6);
    CHECK_NEAR(pr[1], 0.3 / 0.8, 1e-6);
    p.top_k = 3;
    k = dist(&p, l, 5, ids, pr);
    CHECK(k == 3 && ids[2] == 2);
    p.top_k = 10; /* more than there are: all finite ones */
    CHECK(dist(&p, l, 5, ids, pr) == 4);
    p.top_k = 0; /* off */
    CHECK(dist(&p, l, 5, ids, pr) == 4);
    /* a large vocabulary: the quickselect keeps exactly the k best, ties by id */
    enum { N = 5000 };
    static float big[N];
    for (int i = 0; i < N; i++) big[i] = (float)((i * 7919) % 1000) * 0.01f; /* each value 5 times */
    p.top_k = 12;
    k = dist(&p, big, N, ids, pr);
    CHECK(k == 12);
    /* the best value 9.99 is held by the 5 smallest ids with (i*7919)%1000 == 999, then 9.98 */
    int n999 = 0;
    for (int i = 0; i < k; i++) {
        float v = big[ids[i]];
        CHECK(v > 9.965f); /* 9.99 x5, 9.98 x5, 9.97 x2 */
        if (i > 0) CHECK(big[ids[i - 1]] > v || (big[ids[i - 1]] == v && ids[i - 1] < ids[i]));
        n999 += v > 9.985f;
    }
    CHECK(n999 == 5);
}

static void test_top_p(void) {
    float l[5];
    logits_of(P5, 5, l); /* sorted: 0.5, 0.3, 0.15, 0.05 */
    tsl_sampler_params p = neutral();
    int32_t ids[64];
    float pr[64];
    p.top_p = 0.75f; /* 0.5 < 0.75 <= 0.8: two */
    int k = dist(&p, l, 5, ids, pr);
    CHECK(k == 2 && ids[0] == 1 && ids[1] == 3);
    CHECK_NEAR(pr[0], 0.625, 1e-6);
    p.top_p = 0.9f; /* 0.8 < 0.9 <= 0.95: three */
    k = dist(&p, l, 5, ids, pr);
    CHECK(k == 3 && has(ids, k, 2) && !has(ids, k, 0));
    p.top_p = 0.4f; /* the best alone already holds 0.5 */
    k = dist(&p, l, 5, ids, pr);
    CHECK(k == 1 && ids[0] == 1 && pr[0] == 1.0f);
    p.top_p = 1.0f; /* off */
    CHECK(dist(&p, l, 5, ids, pr) == 4);
}

static int cmp_desc(const void *a, const void *b) {
    const float *x = a, *y = b;
    return (x[0] < y[0]) - (x[0] > y[0]);
}

/* top-p over a large, flat vocabulary (most of it must be kept) equals the
 * definition: sort everything, keep the smallest prefix holding top_p. */
static void test_top_p_large(void) {
    enum { N = 6000 };
    static float l[N], sorted[N][2];
    for (int i = 0; i < N; i++) {
        l[i] = (float)sin(i * 12.9898) * 0.5f; /* nearly flat */
        sorted[i][0] = l[i];
        sorted[i][1] = (float)i;
    }
    qsort(sorted, N, sizeof sorted[0], cmp_desc);
    double mx = sorted[0][0], sum = 0;
    for (int i = 0; i < N; i++) sum += exp(sorted[i][0] - mx);
    const float tops[3] = {0.05f, 0.5f, 0.97f};
    for (int t = 0; t < 3; t++) {
        int want = N;
        double cum = 0;
        for (int i = 0; i < N; i++) {
            cum += exp(sorted[i][0] - mx) / sum;
            if (cum >= tops[t]) {
                want = i + 1;
                break;
            }
        }
        tsl_sampler_params p = neutral();
        p.top_p = tops[t];
        tsl_sampler *s = tsl_sampler_new(&p, NULL);
        static int32_t ids[N];
        static float pr[N];
        int k = sampler_dist(s, l, N, ids, pr, N);
        /* float against double sums may move the cut by one where it falls on a tie of the mass */
        CHECKF(abs(k - want) <= 1, "top_p %.2f: kept %d, expected %d", tops[t], k, want);
        CHECK(want > 64 || tops[t] < 0.1f); /* the large cases need more than one selection round */
        for (int i = 0; i < k && i < want; i++) CHECK(ids[i] == (int32_t)sorted[i][1]);
        tsl_sampler_free(s);
    }
}

static void test_min_p(void) {
    float l[5];
    logits_of(P5, 5, l);
    tsl_sampler_params p = neutral();
    int32_t ids[64];
    float pr[64];
    p.min_p = 0.2f; /* keep p >= 0.1: 0.5, 0.3, 0.15 */
    int k = dist(&p, l, 5, ids, pr);
    CHECK(k == 3 && !has(ids, k, 0));
    CHECK_NEAR(pr[0] + pr[1] + pr[2], 1.0, 1e-6);
    p.min_p = 0.5f; /* keep p >= 0.25: 0.5, 0.3 */
    k = dist(&p, l, 5, ids, pr);
    CHECK(k == 2 && has(ids, k, 1) && has(ids, k, 3));
    p.min_p = 1.0f; /* only the best */
    k = dist(&p, l, 5, ids, pr);
    CHECK(k == 1 && ids[0] == 1);
}

static void test_temperature(void) {
    float l[3] = {1.0f, 2.0f, 0.0f};
    tsl_sampler_params p = neutral();
    int32_t ids[64];
    float pr[64];
    p.temp = 2.0f;
    int k = dist(&p, l, 3, ids, pr);
    CHECK(k == 3);
    double z = exp(0.5) + exp(1.0) + exp(0.0);
    for (int i = 0; i < k; i++) CHECK_NEAR(pr[i], exp(l[ids[i]] / 2.0) / z, 1e-6);
    /* filters judge the temperature-1 distribution: min_p 0.3 keeps p1 >= 0.3 p_max
     * at T = 1 (e^-1 = 0.37: ids 0 and 1), though at T = 2 id 2 would pass too */
    p.min_p = 0.3f;
    k = dist(&p, l, 3, ids, pr);
    CHECK(k == 2 && !has(ids, k, 2));
    CHECK_NEAR(pr[0] + pr[1], 1.0, 1e-6);
}

static void test_repeat_penalty(void) {
    float l[4] = {2.0f, 1.0f, -1.0f, 0.5f};
    tsl_sampler_params p = neutral();
    p.repeat_penalty = 4.0f;
    p.repeat_last_n = 2;
    tsl_sampler *s = tsl_sampler_new(&p, NULL);
    int32_t ids[64];
    float pr[64];
    tsl_sampler_accept(s, 0);
    tsl_sampler_accept(s, 2);
    tsl_sampler_accept(s, 2); /* counted once */
    /* window {2, 2}: id 2 -> -4; id 0 no longer in the window */
    int k = sampler_dist(s, l, 4, ids, pr, 64);
    CHECK(k == 4);
    double e[4] = {exp(2.0), exp(1.0), exp(-4.0), exp(0.5)}, z = e[0] + e[1] + e[2] + e[3];
    for (int i = 0; i < k; i++) CHECK_NEAR(pr[i], e[ids[i]] / z, 1e-6);
    tsl_sampler_accept(s, 0); /* window {2, 0}: id 0 -> 2 / 4 = 0.5 */
    k = sampler_dist(s, l, 4, ids, pr, 64);
    double f[4] = {exp(0.5), exp(1.0), exp(-4.0), exp(0.5)}, y = f[0] + f[1] + f[2] + f[3];
    for (int i = 0; i < k; i++) CHECK_NEAR(pr[i], f[ids[i]] / y, 1e-6);
    /* greedy sees the penalty: id 1 now leads */
    tsl_sampler_free(s);
    p.temp = 0.0f;
    s = tsl_sampler_new(&p, NULL);
    CHECK(tsl_sampler_sample(s, l, 4) == 0);
    tsl_sampler_accept(s, 0);
    CHECK(tsl_sampler_sample(s, l, 4) == 1);
    tsl_sampler_reset(s); /* the window is emptied */
    CHECK(tsl_sampler_sample(s, l, 4) == 0);
    tsl_sampler_free(s);
}

/* The k best of a large vocabulary (the heap's pass, which skips blocks of
 * logits) against a full sort: ties in every block, NaN, +-inf, the
 * penalty either way (a penalized token may rise above the ones it was
 * skipped with), vocabularies around k. */
typedef struct ref_cand {
    int32_t id;
    float logit;
} ref_cand;

static int ref_cmp(const void *a, const void *b) {
    const ref_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static void test_top_k_large(void) {
    enum { NV = 20000, CAP = 512 };
    static float l[NV];
    static ref_cand r[NV];
    static int32_t ids[CAP];
    static float pr[CAP];
    uint64_t x = 0x9E3779B97F4A7C15ull;
    int bad = 0;
    for (int it = 0; it < 60; it++) {
        const int nv = it % 5 == 0 ? 1 + it : NV - it * 97;
        const int k = 1 + (it * 37) % 300;
        const float pen = it % 3 == 0 ? 1.0f : it % 3 == 1 ? 1.7f : 0.4f;
        for (int i = 0; i < nv; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            const int v = (int)(x % 1000);
            /* coarse values: many equal logits */
            l[i] = v < 3 ? NAN : v < 6 ? -INFINITY : v < 7 ? INFINITY : (float)(int)(x >> 40 & 255) / 16.0f - 8.0f;
        }
        tsl_sampler_params p = neutral();
        p.top_k = k;
        p.repeat_penalty = pen;
        p.repeat_last_n = 64;
        tsl_sampler *s = tsl_sampler_new(&p, NULL);
        CHECK(s != NULL);
        if (!s) return;
        /* a window of recent tokens, some repeated */
        for (int w = 0; w < 50; w++) tsl_sampler_accept(s, (int32_t)((w * 7919 + it) % nv));
        int n = 0;
        for (int i = 0; i < nv; i++) {
            float v = l[i];
            bool in = false;
            for (int w = 0; w < 50; w++) in = in || (w * 7919 + it) % nv == i;
            if (in && pen != 1.0f) v = v > 0.0f ? v / pen : v * pen;
            if (v > -INFINITY) r[n++] = (ref_cand){i, v};
        }
        /* more candidates than k: the k best, best first; else all, by id */
        if (n > k) qsort(r, (size_t)n, sizeof *r, ref_cmp);
        const int want = n > k ? k : n;
        const int got = sampler_dist(s, l, nv, ids, pr, CAP);
        if (got != want) {
            if (bad++ < 3) fprintf(stderr, "  iteration %d: %d candidates, want %d\n", it, got, want);
        } else {
            for (int i = 0; i < got; i++)
                if (ids[i] != r[i].id) {
                    if (bad++ < 3) fprintf(stderr, "  iteration %d: candidate %d is %d, want %d\n", it, i, ids[i], r[i].id);
                    break;
                }
        }
        /* greedy: the first of the full sort */
        tsl_sampler_free(s);
        p.temp = 0.0f;
        s = tsl_sampler_new(&p, NULL);
        for (int w = 0; w < 50; w++) tsl_sampler_accept(s, (int32_t)((w * 7919 + it) % nv));
        if (n > 1 && n <= k) qsort(r, (size_t)n, sizeof *r, ref_cmp);
        const int32_t g = tsl_sampler_sample(s, l, nv);
        if (n > 0 && g != r[0].id && bad++ < 3) fprintf(stderr, "  iteration %d: greedy %d, want %d\n", it, g, r[0].id);
        tsl_sampler_free(s);
    }
    CHECKF(bad == 0, "%d iterations differ from the full sort", bad);
}

/* Draws follow the distribution (a fixed seed makes this exact to rerun). */
static void test_frequencies(void) {
    float l[5];
    logits_of(P5, 5, l);
    tsl_sampler_params p = neutral();
    p.seed = 99;
    tsl_sampler *s = tsl_sampler_new(&p, NULL);
    int count[5] = {0};
    const int n = 40000;
    for (int i = 0; i < n; i++) {
        int32_t t = tsl_sampler_sample(s, l, 5);
        CHECK(t >= 0 && t < 4);
        if (t >= 0 && t < 5) count[t]++;
    }
    for (int i = 0; i < 4; i++) {
        double sd = sqrt(n * P5[i] * (1 - P5[i]));
        CHECKF(fabs(count[i] - n * P5[i]) < 5 * sd, "id %d: %d draws, expected %.0f", i, count[i], n * P5[i]);
    }
    CHECK(count[4] == 0);
    tsl_sampler_free(s);
}

/* The PRNG is xoshiro256** seeded through splitmix64; with four equal
 * logits a draw is floor(4u). The expected ids were computed by an
 * independent Python implementation of those two generators. */
static void test_seed_determinism(void) {
    const float l[4] = {0, 0, 0, 0};
    static const int32_t want0[16] = {2, 2, 0, 1, 2, 3, 1, 2, 3, 3, 0, 0, 0, 2, 1, 1};
    static const int32_t want42[16] = {0, 1, 2, 3, 3, 3, 2, 3, 3, 2, 2, 1, 3, 1, 2, 3};
    tsl_sampler_params p = neutral();
    p.seed = 0;
    tsl_sampler *a = tsl_sampler_new(&p, NULL);
    p.seed = 42;
    tsl_sampler *b = tsl_sampler_new(&p, NULL);
    int32_t ga[16], gb[16];
    for (int i = 0; i < 16; i++) {
        ga[i] = tsl_sampler_sample(a, l, 4);
        gb[i] = tsl_sampler_sample(b, l, 4);
    }
    CHECK(!memcmp(ga, want0, sizeof ga));
    CHECK(!memcmp(gb, want42, sizeof gb));
    tsl_sampler_reset(b); /* reseeds: the same sequence again */
    for (int i = 0; i < 16; i++) CHECK(tsl_sampler_sample(b, l, 4) == want42[i]);
    tsl_sampler_free(a);
    tsl_sampler_free(b);
    /* the full default chain is deterministic too */
    float v[300];
    for (int i = 0; i < 300; i++) v[i] = (float)sin(i * 0.7) * 3.0f;
    tsl_sampler_params d = tsl_sampler_default_params();
    d.seed = 5;
    d.repeat_penalty = 1.3f;
    tsl_sampler *x = tsl_sampler_new(&d, NULL), *y = tsl_sampler_new(&d, NULL);
    for (int i = 0; i < 200; i++) {
        int32_t tx = tsl_sampler_sample(x, v, 300), ty = tsl_sampler_sample(y, v, 300);
        CHECK(tx == ty && tx >= 0);
        tsl_sampler_accept(x, tx);
        tsl_sampler_accept(y, ty);
    }
    tsl_sampler_free(x);
    tsl_sampler_free(y);
}

static void test_degenerate(void) {
    float l[6] = {-INFINITY, -INFINITY, 3.0f, -INFINITY, NAN, -INFINITY};
    tsl_sampler_params configs[4] = {neutral(), tsl_sampler_default_params(), neutral(), neutral()};
    configs[2].temp = 0.0f;
    configs[3].top_p = 0.01f;
    configs[3].min_p = 0.9f;
    configs[3].top_k = 1;
    for (int c = 0; c < 4; c++) {
        tsl_sampler *s = tsl_sampler_new(&configs[c], NULL);
        for (int i = 0; i < 20; i++) CHECK(tsl_sampler_sample(s, l, 6) == 2);
        tsl_sampler_free(s);
    }
    /* nothing usable */
    float none[3] = {-INFINITY, NAN, -INFINITY};
    tsl_sampler *s = tsl_sampler_new(NULL, NULL);
    CHECK(s != NULL);
    CHECK(tsl_sampler_sample(s, none, 3) == -1);
    CHECK(tsl_sampler_sample(s, NULL, 3) == -1);
    CHECK(tsl_sampler_sample(s, l, 0) == -1);
    CHECK(tsl_sampler_sample(NULL, l, 6) == -1);
    float one = 0.0f;
    CHECK(tsl_sampler_sample(s, &one, 1) == 0);
    tsl_sampler_accept(s, 1000000); /* a token past the vocabulary is ignored by the penalty */
    CHECK(tsl_sampler_sample(s, &one, 1) == 0);
    tsl_sampler_free(s);
    /* very large logits do not overflow */
    float hot[3] = {1e30f, 1e30f, -1e30f};
    tsl_sampler_params p = neutral();
    s = tsl_sampler_new(&p, NULL);
    int32_t ids[64];
    float pr[64];
    int k = sampler_dist(s, hot, 3, ids, pr, 64);
    CHECK(k == 3);
    for (int i = 0; i < k; i++) CHECK(isfinite(pr[i]));
    CHECK(tsl_sampler_sample(s, hot, 3) != 2);
    tsl_sampler_free(s);
}

static void test_bad_params(void) {
    tsl_error err;
    tsl_sampler_params p = neutral();
    p.top_p = 1.5f;
    CHECK(tsl_sampler_new(&p, &err) == NULL && err.status == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "top_p");
    p = neutral();
    p.min_p = -0.1f;
    CHECK(tsl_sampler_new(&p, &err) == NULL);
    CHECK_STR_CONTAINS(err.message, "min_p");
    p = neutral();
    p.repeat_penalty = 0.0f;
    CHECK(tsl_sampler_new(&p, &err) == NULL);
    CHECK_STR_CONTAINS(err.message, "repeat_penalty");
    p = neutral();
    p.temp = NAN;
    CHECK(tsl_sampler_new(&p, &err) == NULL);
    p = neutral();
    p.repeat_last_n = -1;
    CHECK(tsl_sampler_new(&p, &err) == NULL);
    p = neutral();
    p.repeat_last_n = 0; /* no window: accept is a no-op */
    tsl_sampler *s = tsl_sampler_new(&p, &err);
    CHECK(s != NULL && err.status == TSL_SUCCESS);
    tsl_sampler_accept(s, 1);
    tsl_sampler_free(s);
    tsl_sampler_free(NULL);
}

int main(void) {
    RUN(test_neutral_is_softmax);
    RUN(test_greedy);
    RUN(test_top_k);
    RUN(test_top_p);
    RUN(test_top_p_large);
    RUN(test_top_k_large);
    RUN(test_min_p);
    RUN(test_temperature);
    RUN(test_repeat_penalty);
    RUN(test_frequencies);
    RUN(test_seed_determinism);
    RUN(test_degenerate);
    RUN(test_bad_params);
    return test_summary();
}
