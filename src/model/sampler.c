/*
 * sampler.c - choosing the next token from logits.
 *
 * The chain is llama.cpp's default order, so a user's settings mean what
 * they mean there: repetition penalty, top-k, top-p, min-p (the three
 * filters judge the temperature-1 distribution), temperature, draw. Each
 * filter at its neutral value is skipped, and temperature <= 0 short-cuts
 * to greedy (argmax after the penalty), so "greedy" is exact, not a very
 * cold softmax.
 *
 * Determinism: the draw uses the sampler's own PRNG (xoshiro256**, seeded
 * from the user's seed through splitmix64; no global state, no libc rand),
 * and every ordering is total (logit, then id), so the same logits and seed
 * give the same token on any machine and with any qsort.
 *
 * Cost: a vocabulary is 32k-256k entries, sampled once a token while the
 * device waits. Greedy and top-k (k smaller than the vocabulary) keep the k
 * best in a heap over one pass of the logits, which looks at 64 of them at
 * a time only through their largest (a loop the compiler vectorizes): once
 * the heap is full almost every block is below its worst and is skipped.
 * The penalized tokens (at most repeat_last_n) are left out of the pass and
 * put in after it with their penalized logits. Otherwise only finite logits
 * become candidates; a full sort happens only for top-p without top-k.
 * Scratch is kept between calls, so sampling allocates nothing after the
 * first token. (A 128k vocabulary on one core of this project's CI machine:
 * greedy 393 -> 35 us, the default chain 951 -> 40 us.)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/llm_impl.h"

typedef struct smp_cand {
    int32_t id;
    float logit;
    float p;
} smp_cand;

struct tsl_sampler {
    tsl_sampler_params p;
    uint64_t rng[4];
    int32_t *window; /* ring of the last repeat_last_n accepted tokens */
    int32_t win_n, win_pos;
    smp_cand *cand;
    size_t cand_cap;
    uint8_t *mark; /* per-vocabulary flags for the penalty, all 0 between calls */
    size_t mark_cap;
};

/* ---- PRNG ------------------------------------------------------------------ */

static uint64_t smp_splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint64_t smp_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t smp_next(tsl_sampler *s) {
    uint64_t *r = s->rng;
    const uint64_t out = smp_rotl(r[1] * 5, 7) * 9, t = r[1] << 17;
    r[2] ^= r[0];
    r[3] ^= r[1];
    r[1] ^= r[2];
    r[0] ^= r[3];
    r[2] ^= t;
    r[3] = smp_rotl(r[3], 45);
    return out;
}

/* Uniform in [0, 1) with 53 random bits. */
static double smp_uniform(tsl_sampler *s) { return (double)(smp_next(s) >> 11) * 0x1.0p-53; }

static void smp_seed(tsl_sampler *s) {
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = smp_splitmix(&x);
}

/* ---- lifecycle ------------------------------------------------------------------ */

tsl_sampler_params tsl_sampler_default_params(void) {
    return (tsl_sampler_params){.temp = 0.8f,
                                .top_k = 40,
                                .top_p = 0.95f,
                                .min_p = 0.05f,
                                .repeat_penalty = 1.0f,
                                .repeat_last_n = 64,
                                .seed = 0};
}

tsl_sampler *tsl_sampler_new(const tsl_sampler_params *params, tsl_error *err) {
    tsl_error_clear(err);
    tsl_sampler_params p = params ? *params : tsl_sampler_default_params();
    const char *bad = NULL;
    if (isnan(p.temp)) bad = "temp is NaN";
    else if (!(p.top_p >= 0.0f && p.top_p <= 1.0f)) bad = "top_p must be in [0, 1]";
    else if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) bad = "min_p must be in [0, 1]";
    else if (!(p.repeat_penalty > 0.0f) || isinf(p.repeat_penalty)) bad = "repeat_penalty must be a positive number";
    else if (p.repeat_last_n < 0) bad = "repeat_last_n must not be negative";
    if (bad) {
        error_set(err, TSL_FAILED, "", "", -1, NULL, NULL, "sampler: %s", bad);
        return NULL;
    }
    tsl_sampler *s = calloc(1, sizeof *s);
    if (s && p.repeat_last_n > 0) s->window = calloc((size_t)p.repeat_last_n, sizeof *s->window);
    if (!s || (p.repeat_last_n > 0 && !s->window)) {
        free(s);
        error_set(err, TSL_ALLOC_FAILED, "", "", -1, NULL, NULL, "sampler: out of memory");
        return NULL;
    }
    s->p = p;
    smp_seed(s);
    return s;
}

void tsl_sampler_free(tsl_sampler *s) {
    if (!s) return;
    free(s->window);
    free(s->cand);
    free(s->mark);
    free(s);
}

void tsl_sampler_accept(tsl_sampler *s, int32_t token) {
    if (!s || s->p.repeat_last_n <= 0 || token < 0) return;
    s->window[s->win_pos] = token;
    s->win_pos = (s->win_pos + 1) % s->p.repeat_last_n;
    if (s->win_n < s->p.repeat_last_n) s->win_n++;
}

void tsl_sampler_reset(tsl_sampler *s) {
    if (!s) return;
    s->win_n = 0;
    s->win_pos = 0;
    smp_seed(s);
}

/* ---- the chain ---------------------------------------------------------------------- */

/* Larger logit first; the smaller id first among equals (a total order). */
static int smp_cmp(const void *a, const void *b) {
    const smp_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static inline bool smp_before(const smp_cand *x, const smp_cand *y) { return smp_cmp(x, y) < 0; }

/* Reorder c[0..n) so that its k best (smp_cmp order) come first, in any order. */
static void smp_select(smp_cand *c, size_t n, size_t k) {
    size_t lo = 0, hi = n; /* the k-th lies in [lo, hi) */
    uint64_t x = 0x243F6A8885A308D3ULL;
    while (hi - lo > 1) {
        /* a pivot from a fixed pseudo-random sequence: no adversarial worst case, same on every run */
        smp_cand pv = c[lo + (size_t)(smp_splitmix(&x) % (hi - lo))];
        size_t i = lo, lt = lo, gt = hi; /* [lo,lt) before pivot, [lt,i) equal, [gt,hi) after */
        while (i < gt) {
            if (smp_before(&c[i], &pv)) {
                smp_cand t = c[i]; c[i] = c[lt]; c[lt] = t;
                lt++, i++;
            } else if (smp_before(&pv, &c[i])) {
                gt--;
                smp_cand t = c[i]; c[i] = c[gt]; c[gt] = t;
            } else {
                i++;
            }
        }
        if (k <= lt) hi = lt;
        else if (k >= gt) lo = gt;
        else return;
    }
}

/* Candidates and penalty flags for a vocabulary of n (grown, never shrunk). */
static bool smp_scratch(tsl_sampler *s, size_t n) {
    if (n > s->cand_cap) {
        smp_cand *c = realloc(s->cand, n * sizeof *c);
        if (!c) return false;
        s->cand = c;
        s->cand_cap = n;
    }
    if (n > s->mark_cap) {
        uint8_t *m = realloc(s->mark, n);
        if (!m) return false;
        memset(m + s->mark_cap, 0, n - s->mark_cap);
        s->mark = m;
        s->mark_cap = n;
    }
    return true;
}

/* Top-p: the smallest prefix, in smp_cmp order, holding top_p of the mass
 * (c[i].p are the unnormalized probabilities, sum their total); reorders c
 * so that prefix comes first, sorted, and returns its length. Sorting a
 * whole vocabulary costs milliseconds, and a real distribution puts top_p
 * of its mass on few tokens: so select the best 64, and only if they do not
 * hold enough select 4 times as many, and so on. */
static size_t smp_top_p(smp_cand *c, size_t n, double sum, float top_p, bool sorted) {
    size_t k = sorted || n < 64 ? n : 64;
    for (;;) {
        if (!sorted) {
            if (k < n) smp_select(c, n, k);
            qsort(c, k, sizeof *c, smp_cmp);
        }
        double cum = 0;
        for (size_t i = 0; i < k; i++) {
            cum += c[i].p / sum;
            if (cum >= top_p) return i + 1;
        }
        if (k == n) return n; /* rounding left the total a hair below top_p */
        k = n / 4 < k ? n : k * 4;
    }
}

/* Offer c to the heap h of at most k candidates (*m of them), the worst at
 * the root: kept while there is room, else in place of the worst when
 * better; *more once a candidate is left out. */
static void smp_offer(smp_cand *h, size_t *m, size_t k, smp_cand c, bool *more) {
    size_t j;
    if (*m < k) {
        for (j = (*m)++; j > 0 && smp_before(&h[(j - 1) / 2], &c); j = (j - 1) / 2) h[j] = h[(j - 1) / 2];
        h[j] = c;
        return;
    }
    *more = true;
    if (!smp_before(&c, &h[0])) return;
    for (j = 0;;) {
        size_t w = j;
        const smp_cand *x = &c;
        for (size_t ch = 2 * j + 1; ch <= 2 * j + 2 && ch < *m; ch++)
            if (smp_before(x, &h[ch])) x = &h[w = ch]; /* the worse of the two goes up */
        if (w == j) break;
        h[j] = h[w];
        j = w;
    }
    h[j] = c;
}

/* The k best candidates (smp_cmp order) of the penalized, finite logits,
 * sorted, into s->cand (s->mark set for the penalized tokens, each put in
 * once and marked 2 then; the caller clears the marks). Returns their
 * number, or 0 where there are no more than k candidates in all (the
 * caller then takes them all, in id order, as the plain pass does: the
 * same tokens in another order). */
static size_t smp_top(tsl_sampler *s, const float *logits, int32_t n_vocab, size_t k, bool penalize) {
    const tsl_sampler_params *p = &s->p;
    smp_cand *h = s->cand;
    size_t m = 0;
    bool more = false;
    enum { B = 64 };
    for (int32_t i0 = 0; i0 < n_vocab; i0 += B) {
        const int32_t i1 = n_vocab - i0 < B ? n_vocab : i0 + B;
        if (m == k) {
            /* the block's largest, in 8 lanes the compiler keeps in one
             * vector (a plain running max is a reduction it will not
             * reorder); NaN never wins */
            float lm[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
            int32_t i = i0;
            for (; i + 8 <= i1; i += 8)
                for (int j = 0; j < 8; j++) lm[j] = logits[i + j] > lm[j] ? logits[i + j] : lm[j];
            for (; i < i1; i++) lm[0] = logits[i] > lm[0] ? logits[i] : lm[0];
            float bm = lm[0];
            for (int j = 1; j < 8; j++) bm = lm[j] > bm ? lm[j] : bm;
            if (!(bm > h[0].logit)) {
                /* nothing here beats the worst kept (an equal logit has a
                 * larger id): skipped; the penalized ones come after */
                more = more || bm > -INFINITY;
                continue;
            }
        }
        for (int32_t i = i0; i < i1; i++) {
            const float l = logits[i];
            if (!(l > -INFINITY) || (penalize && s->mark[i])) continue;
            if (m == k && !(l > h[0].logit)) { /* no better than the worst kept (ties: a larger id) */
                more = true;
                continue;
            }
            smp_offer(h, &m, k, (smp_cand){.id = i, .logit = l}, &more);
        }
    }
    /* the penalized tokens, each once */
    for (int32_t w = 0; penalize && w < s->win_n; w++) {
        const int32_t t = s->window[w];
        if (t >= n_vocab || s->mark[t] != 1) continue;
        s->mark[t] = 2;
        const float l = logits[t] > 0.0f ? logits[t] / p->repeat_penalty : logits[t] * p->repeat_penalty;
        if (l > -INFINITY) smp_offer(h, &m, k, (smp_cand){.id = t, .logit = l}, &more);
    }
    if (!more) return 0;
    qsort(h, m, sizeof *h, smp_cmp);
    return m;
}

/* The distribution the draw would use: candidates c[0..*n) with their
 * probabilities, after every filter. Returns false when no logit is usable. */
static bool smp_chain(tsl_sampler *s, const float *logits, int32_t n_vocab, size_t *n_out) {
    const tsl_sampler_params *p = &s->p;
    if (!smp_scratch(s, (size_t)n_vocab)) return false;
    /* penalty: mark each distinct token of the window once */
    const bool penalize = p->repeat_penalty != 1.0f && s->win_n > 0;
    if (penalize)
        for (int32_t i = 0; i < s->win_n; i++)
            if (s->window[i] < n_vocab) s->mark[s->window[i]] = 1;
    /* greedy (the best one) and top-k: the heap's pass */
    const size_t k = p->temp <= 0.0f                                            ? 1
                     : p->top_k > 0 && (size_t)p->top_k < (size_t)n_vocab ? (size_t)p->top_k
                                                                           : 0;
    size_t n = k ? smp_top(s, logits, n_vocab, k, penalize) : 0;
    bool sorted = n > 0;
    if (n == 0) {
        /* every finite logit a candidate, in id order */
        for (int32_t i = 0; i < n_vocab; i++) {
            float l = logits[i];
            if (penalize && s->mark[i]) l = l > 0.0f ? l / p->repeat_penalty : l * p->repeat_penalty;
            if (!(l > -INFINITY)) continue; /* -inf and NaN never win */
            s->cand[n].id = i;
            s->cand[n].logit = l;
            n++;
        }
    }
    if (penalize)
        for (int32_t i = 0; i < s->win_n; i++)
            if (s->window[i] < n_vocab) s->mark[s->window[i]] = 0;
    if (n == 0) return false;
    smp_cand *c = s->cand;

    if (p->temp <= 0.0f) { /* greedy: the heap's first, or the best of the few */
        size_t best = 0;
        for (size_t i = 1; i < n; i++)
            if (smp_before(&c[i], &c[best])) best = i;
        c[0] = c[best];
        c[0].p = 1.0f;
        *n_out = 1;
        return true;
    }
    if (!sorted && p->top_k > 0 && (size_t)p->top_k < n) {
        smp_select(c, n, (size_t)p->top_k);
        n = (size_t)p->top_k;
        qsort(c, n, sizeof *c, smp_cmp);
        sorted = true;
    }
    /* probabilities at temperature 1 (relative to the best: p_max = 1) */
    float mx = c[0].logit;
    for (size_t i = 1; i < n; i++)
        if (c[i].logit > mx) mx = c[i].logit;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        c[i].p = expf(c[i].logit - mx);
        sum += c[i].p;
    }
    if (p->top_p < 1.0f) n = smp_top_p(c, n, sum, p->top_p, sorted);
    if (p->min_p > 0.0f) { /* p_i >= min_p * p_max, with p_max = exp(0) = 1 */
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (c[i].p >= p->min_p) c[k++] = c[i];
        n = k; /* the largest always stays (p = 1) */
    }
    /* temperature, then normalize */
    mx = c[0].logit;
    for (size_t i = 1; i < n; i++)
        if (c[i].logit > mx) mx = c[i].logit;
    sum = 0;
    for (size_t i = 0; i < n; i++) {
        c[i].p = expf((c[i].logit - mx) / p->temp);
        sum += c[i].p;
    }
    for (size_t i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
    *n_out = n;
    return true;
}

int32_t tsl_sampler_sample(tsl_sampler *s, const float *logits, int32_t n_vocab) {
    if (!s || !logits || n_vocab < 1) return -1;
    size_t n;
    if (!smp_chain(s, logits, n_vocab, &n)) return -1;
    if (n == 1) return s->cand[0].id;
    const double u = smp_uniform(s);
    double cum = 0;
    for (size_t i = 0; i < n; i++) {
        cum += s->cand[i].p;
        if (u < cum) return s->cand[i].id;
    }
    /* u just below 1 and the sum rounded below it: the last one that can be drawn */
    while (n > 1 && s->cand[n - 1].p <= 0.0f) n--;
    return s->cand[n - 1].id;
}

int32_t sampler_dist(tsl_sampler *s, const float *logits, int32_t n_vocab, int32_t *ids, float *probs, int32_t cap) {
    if (!s || !logits || n_vocab < 1) return -1;
    size_t n;
    if (!smp_chain(s, logits, n_vocab, &n)) return 0;
    for (size_t i = 0; i < n && i < (size_t)cap; i++) {
        ids[i] = s->cand[i].id;
        probs[i] = s->cand[i].p;
    }
    return (int32_t)n;
}
