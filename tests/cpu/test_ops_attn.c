/*
 * test_ops_attn.c - the attention ops on the CPU backend against double
 * references: soft_max (scale, F32 and F16 masks broadcast over dims 2 and
 * 3, fully masked rows), rope (NORMAL and NEOX, n_dims < head_dim,
 * freq_factors, freq_scale != 1, YaRN), and a whole attention block built
 * from views, permutes, rope, mul_mat with a grouped-query batch broadcast,
 * soft_max and cont.
 *
 * The rope reference is written from the math (ref.h: ref_rope), not from a
 * kernel: angles in double with pow() per pair, YaRN correction dims from
 * n_ctx_orig / beta_fast / beta_slow, the ramp between them, and the
 * magnitude gain 1 + 0.1 ln(1/freq_scale).
 *
 * Tolerances, |got - ref| <= atol + rtol * |ref| (+ extra as stated):
 *   soft_max   atol 1e-7, rtol 1e-5: exp in float on arguments |v| <= ~12
 *              (error ~|v| 2^-24 relative) and a float sum.
 *   rope       atol 1e-6, rtol 1e-5, plus (n_dims + 8) 2^-24 |theta|
 *              (|x0| + |x1|) mscale: a float kernel builds theta by
 *              repeated products of base^(-2/n_dims) (up to n_dims/2
 *              roundings), so its angle is off by that much at large
 *              positions. The case with positions up to 5000 shows it.
 *   attention  atol 1e-5, rtol 1e-4: four chained ops, unit-scale values.
 */
#include "ref.h"

#define N_SOFTMAX_CASES 36
#define N_ROPE_CASES 48

/* ---- soft_max ------------------------------------------------------------ */

static void test_soft_max(void) {
    ref_stats st = {.op = "soft_max", .tol = "atol 1e-7, rtol 1e-5"};
    unsigned long long rng = ref_seed(808);
    static const float scales[] = {1.0f, 0.125f, 2.5f, -0.7f};
    for (int c = 0; c < N_SOFTMAX_CASES; c++) {
        tsl_context *ctx = ref_ctx(8);
        if (!ctx) return;
        int64_t ne[4];
        ref_rand_shape(&rng, (int)ref_rand_int(&rng, 1, 4), 1, 30000, ne);
        ref_layout l = (ref_layout)(c % REF_NLAYOUT);
        tsl_tensor *a = ref_tensor(ctx, TSL_TYPE_F32, ne, l, &rng, -4.0f, 4.0f);
        /* mask: none, F32 or F16; [ne0, ne1 + extra, m2, m3], m2 one of
         * {1, ne2, a proper divisor of ne2}, m3 one of {1, ne3} */
        const int mk = c % 3;
        tsl_tensor *mask = NULL;
        int64_t mne[4] = {ne[0], ne[1] + ref_rand_int(&rng, 0, 3), 1, 1};
        if (mk) {
            int64_t divs[8], nd = 0;
            for (int64_t d = 2; d < ne[2]; d++)
                if (ne[2] % d == 0 && nd < 8) divs[nd++] = d;
            const int pick = (int)ref_rand_int(&rng, 0, 2);
            mne[2] = pick == 0 ? 1 : pick == 1 || nd == 0 ? ne[2] : divs[ref_rand_int(&rng, 0, nd - 1)];
            mne[3] = ref_rand_int(&rng, 0, 1) ? ne[3] : 1;
            ref_layout ml = ref_rand_int(&rng, 0, 1) ? REF_CONTIG : REF_STRIDED;
            mask = ref_tensor(ctx, mk == 1 ? TSL_TYPE_F32 : TSL_TYPE_F16, mne, ml, &rng, -2.0f, 2.0f);
            if (mask) {
                for (int64_t i3 = 0; i3 < mne[3]; i3++)
                    for (int64_t i2 = 0; i2 < mne[2]; i2++)
                        for (int64_t i1 = 0; i1 < mne[1]; i1++) {
                            /* some rows fully masked, others ~20% masked, causal in every 4th case */
                            const bool full = c % 4 == 1 && i1 % 4 == 0;
                            for (int64_t i0 = 0; i0 < mne[0]; i0++) {
                                bool off = full || (c % 4 == 3 ? i0 > i1 : ref_rand_int(&rng, 0, 4) == 0);
                                if (off) ref_set(mask, i0, i1, i2, i3, -INFINITY);
                            }
                        }
            }
        }
        const float scale = scales[c % 4];
        ref_describe("soft_max case %d: [%lld,%lld,%lld,%lld] %s, mask %s [%lld,%lld,%lld,%lld], scale %g", c,
                     (long long)ne[0], (long long)ne[1], (long long)ne[2], (long long)ne[3], ref_layout_name(l),
                     mk == 0 ? "none" : mk == 1 ? "f32" : "f16", (long long)mne[0], (long long)mne[1],
                     (long long)mne[2], (long long)mne[3], (double)scale);
        if (!a || (mk && !mask)) {
            CHECKF(0, "%s: cannot make operands: %s", ref_case, tsl_ctx_error(ctx));
            tsl_ctx_free(ctx);
            continue;
        }
        tsl_tensor *out = tsl_soft_max(ctx, a, mask, scale);
        double *av = ref_load(a), *mv = mask ? ref_load(mask) : NULL;
        double *ref = (double *)malloc((size_t)ref_nel(ne) * sizeof(double));
        ref_soft_max(av, ne, mv, mne, (double)scale, ref);
        ref_run(&st, ref_graph(ctx, out), out, ref, NULL, 1e-7, 1e-5, NULL);
        free(av);
        free(mv);
        free(ref);
        tsl_ctx_free(ctx);
    }
    ref_stats_print(&st);
}

/* A fully masked row gives zeros, not NaN, on its own (every row masked). */
static void test_soft_max_all_masked(void) {
    ref_stats st = {.op = "soft_max all -inf", .tol = "exact zeros"};
    for (int f16 = 0; f16 < 2; f16++) {
        tsl_context *ctx = ref_ctx(4);
        if (!ctx) return;
        unsigned long long rng = ref_seed(909);
        int64_t ne[4] = {17, 5, 3, 1}, mne[4] = {17, 5, 1, 1};
        tsl_tensor *a = ref_tensor(ctx, TSL_TYPE_F32, ne, REF_CONTIG, &rng, -1, 1);
        tsl_tensor *mask = ref_tensor(ctx, f16 ? TSL_TYPE_F16 : TSL_TYPE_F32, mne, REF_CONTIG, &rng, 0, 1);
        for (int64_t i1 = 0; i1 < mne[1]; i1++)
            for (int64_t i0 = 0; i0 < mne[0]; i0++) ref_set(mask, i0, i1, 0, 0, -INFINITY);
        ref_describe("soft_max with every element masked (%s mask)", f16 ? "f16" : "f32");
        tsl_tensor *out = tsl_soft_max(ctx, a, mask, 1.0f);
        double ref[17 * 5 * 3];
        memset(ref, 0, sizeof ref);
        ref_run(&st, ref_graph(ctx, out), out, ref, NULL, 0, 0, NULL);
        tsl_ctx_free(ctx);
    }
    ref_stats_print(&st);
}

/* ---- rope ---------------------------------------------------------------- */

/* True when a YaRN corr dim lands within 1e-3 of an integer, where float and
 * double could floor/ceil differently: such parameters are skipped by
 * moving n_ctx_orig. */
static bool corr_dims_borderline(const tsl_rope_params *p) {
    const double d0 = ref_rope_corr_dim(p->n_dims, p->n_ctx_orig, p->beta_fast, p->freq_base);
    const double d1 = ref_rope_corr_dim(p->n_dims, p->n_ctx_orig, p->beta_slow, p->freq_base);
    return fabs(d0 - round(d0)) < 1e-3 || fabs(d1 - round(d1)) < 1e-3;
}

typedef struct rope_case {
    int64_t ne[4];
    tsl_rope_params p;
    bool ff;
    int max_pos;
    ref_layout layout;
} rope_case;

static void rope_one(ref_stats *st, int c, const rope_case *rc, unsigned long long *rng) {
    tsl_context *ctx = ref_ctx(8);
    if (!ctx) return;
    const int64_t *ne = rc->ne;
    const tsl_rope_params *p = &rc->p;
    tsl_tensor *a = ref_tensor(ctx, TSL_TYPE_F32, ne, rc->layout, rng, -1.0f, 1.0f);
    tsl_tensor *pos = tsl_new_tensor_1d(ctx, TSL_TYPE_I32, ne[2]);
    const int64_t nff = p->n_dims / 2 + (c % 3 == 0 ? 3 : 0); /* ff may be longer than n_dims/2 */
    tsl_tensor *ff = rc->ff ? tsl_new_tensor_1d(ctx, TSL_TYPE_F32, nff) : NULL;
    if (!a || !pos || (rc->ff && !ff)) {
        CHECKF(0, "rope: cannot make operands: %s", tsl_ctx_error(ctx));
        tsl_ctx_free(ctx);
        return;
    }
    int32_t *pv = (int32_t *)pos->data;
    for (int64_t i = 0; i < ne[2]; i++) pv[i] = (int32_t)ref_rand_int(rng, 0, rc->max_pos);
    double *ffv = NULL;
    if (ff) {
        ffv = (double *)malloc((size_t)nff * sizeof(double));
        for (int64_t i = 0; i < nff; i++) {
            /* llama3-style: 1 for high frequencies, up to 8 for low ones */
            float v = i < nff / 3 ? 1.0f : test_rand_f(rng, 1.0f, 8.0f);
            ((float *)ff->data)[i] = v;
            ffv[i] = v;
        }
    }
    ref_describe("rope case %d: [%lld,%lld,%lld] %s, %s n_dims %d, base %g, freq_scale %g, ext %g, attn %g, "
                 "n_ctx_orig %d, beta %g/%g, ff %s, pos <= %d",
                 c, (long long)ne[0], (long long)ne[1], (long long)ne[2], ref_layout_name(rc->layout),
                 p->mode == TSL_ROPE_NEOX ? "neox" : "normal", p->n_dims, (double)p->freq_base,
                 (double)p->freq_scale, (double)p->ext_factor, (double)p->attn_factor, p->n_ctx_orig,
                 (double)p->beta_fast, (double)p->beta_slow, ff ? "yes" : "no", rc->max_pos);
    tsl_tensor *out = tsl_rope(ctx, a, pos, ff, p);
    double *av = ref_load(a);
    const int64_t n = ref_nel(ne);
    double *ref = (double *)malloc((size_t)n * sizeof(double)), *mag = (double *)malloc((size_t)n * sizeof(double));
    ref_rope(av, ne, pv, ffv, p, ref, mag);
    /* tol = 1e-6 + 1e-5 |ref| + k |theta| (|x0| + |x1|) mscale, folded into mag for rtol 1e-5 */
    const double k = (double)(p->n_dims + 8) * 0x1p-24;
    for (int64_t i = 0; i < n; i++) mag[i] = fabs(ref[i]) + mag[i] * k / 1e-5;
    ref_run(st, ref_graph(ctx, out), out, ref, mag, 1e-6, 1e-5, NULL);
    free(av);
    free(ref);
    free(mag);
    free(ffv);
    tsl_ctx_free(ctx);
}

static void test_rope(void) {
    ref_stats st = {.op = "rope", .tol = "atol 1e-6, rtol 1e-5, + float angle"};
    unsigned long long rng = ref_seed(1010);
    static const float bases[] = {10000.0f, 1000000.0f, 500000.0f};
    static const float fscales[] = {0.25f, 0.5f, 0.125f};
    for (int c = 0; c < N_ROPE_CASES; c++) {
        rope_case rc;
        /* bit 0: NEOX; bit 1: freq_factors; bit 2: freq_scale != 1; bit 3: YaRN
         * (ext_factor != 0); bit 4: n_dims < head_dim */
        const bool neox = c & 1, ff = c & 2, fscale = c & 4, yarn = c & 8, partial = c & 16;
        int64_t hd = 2 * ref_rand_int(&rng, 1, 40);
        if (c % 7 == 0) hd = 128;
        rc.ne[0] = hd;
        rc.ne[1] = ref_rand_int(&rng, 1, 9);
        rc.ne[2] = ref_rand_int(&rng, 1, 13);
        rc.ne[3] = 1;
        rc.p = tsl_rope_default((int)hd);
        if (partial && hd > 2) rc.p.n_dims = 2 * (int)ref_rand_int(&rng, 1, hd / 2 - 1);
        rc.p.mode = neox ? TSL_ROPE_NEOX : TSL_ROPE_NORMAL;
        rc.p.freq_base = bases[c % 3];
        rc.p.freq_scale = fscale ? fscales[(c / 2) % 3] : 1.0f;
        if (yarn) {
            rc.p.ext_factor = c % 3 == 0 ? 0.5f : 1.0f;
            rc.p.n_ctx_orig = (int)(c % 2 ? 4096 : 2048);
            rc.p.beta_fast = 32.0f;
            rc.p.beta_slow = 1.0f;
            rc.p.attn_factor = c % 5 == 0 ? 0.8f : 1.0f;
            while (corr_dims_borderline(&rc.p)) rc.p.n_ctx_orig += 7;
        }
        rc.ff = ff;
        rc.max_pos = c == N_ROPE_CASES - 1 ? 5000 : 100;
        rc.layout = (ref_layout)ref_rand_int(&rng, 0, REF_NLAYOUT - 1);
        rope_one(&st, c, &rc, &rng);
    }
    ref_stats_print(&st);
}

/* ---- a whole attention block --------------------------------------------- */

/* q [hd, nh, nt], k/v [hd, nkv, nt] with nh = g * nkv (grouped-query); the
 * graph is llama's: rope q and k (NEOX), permute to [hd, nt, heads],
 * kq = mul_mat(k, q) (k broadcast over the g query heads of its group),
 * soft_max with a causal mask and 1/sqrt(hd), kqv = mul_mat(v^T, kq) with
 * v^T = cont(permute(v)), and back to [hd, nh, nt] with permute + cont. The
 * reference is attention computed directly. */
static void test_attention_block(void) {
    ref_stats st = {.op = "attention (composed)", .tol = "atol 1e-5, rtol 1e-4"};
    unsigned long long rng = ref_seed(1111);
    for (int c = 0; c < 8; c++) {
        tsl_context *ctx = ref_ctx(16);
        if (!ctx) return;
        const int64_t hd = 2 * ref_rand_int(&rng, 2, 24), nkv = ref_rand_int(&rng, 1, 3),
                      g = ref_rand_int(&rng, 1, 3), nh = nkv * g, nt = ref_rand_int(&rng, 1, 19);
        const int64_t qne[4] = {hd, nh, nt, 1}, kne[4] = {hd, nkv, nt, 1};
        /* q, k, v as views of one fused qkv tensor [hd * (nh + 2 nkv), nt], as a fused projection gives */
        tsl_tensor *qkv = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, hd * (nh + 2 * nkv), nt);
        tsl_tensor *pos = tsl_new_tensor_1d(ctx, TSL_TYPE_I32, nt);
        tsl_tensor *mask = tsl_new_tensor_2d(ctx, c & 1 ? TSL_TYPE_F16 : TSL_TYPE_F32, nt, nt);
        if (!qkv || !pos || !mask) {
            CHECKF(0, "attention: cannot make operands: %s", tsl_ctx_error(ctx));
            tsl_ctx_free(ctx);
            continue;
        }
        ref_fill(qkv, &rng, -1.0f, 1.0f);
        const size_t es = sizeof(float);
        tsl_tensor *q = tsl_view_3d(ctx, qkv, hd, nh, nt, hd * es, qkv->nb[1], 0);
        tsl_tensor *k = tsl_view_3d(ctx, qkv, hd, nkv, nt, hd * es, qkv->nb[1], (size_t)(hd * nh) * es);
        tsl_tensor *v = tsl_view_3d(ctx, qkv, hd, nkv, nt, hd * es, qkv->nb[1], (size_t)(hd * (nh + nkv)) * es);
        const int p0 = (int)ref_rand_int(&rng, 0, 50);
        for (int64_t i = 0; i < nt; i++) ((int32_t *)pos->data)[i] = p0 + (int32_t)i;
        for (int64_t i1 = 0; i1 < nt; i1++)
            for (int64_t i0 = 0; i0 < nt; i0++) ref_set(mask, i0, i1, 0, 0, i0 <= i1 ? 0.0 : -INFINITY);
        tsl_rope_params rp = tsl_rope_default((int)hd);
        rp.mode = TSL_ROPE_NEOX;
        const float scale = 1.0f / sqrtf((float)hd);
        ref_describe("attention case %d: hd %lld, heads %lld (kv %lld), tokens %lld, %s mask", c, (long long)hd,
                     (long long)nh, (long long)nkv, (long long)nt, c & 1 ? "f16" : "f32");

        tsl_tensor *qr = tsl_rope(ctx, q, pos, NULL, &rp);
        tsl_tensor *kr = tsl_rope(ctx, k, pos, NULL, &rp);
        tsl_tensor *qp = tsl_permute(ctx, qr, 0, 2, 1, 3); /* [hd, nt, nh] */
        tsl_tensor *kp = tsl_permute(ctx, kr, 0, 2, 1, 3); /* [hd, nt, nkv] */
        tsl_tensor *kq = tsl_mul_mat(ctx, kp, qp);         /* [nt_k, nt_q, nh] */
        tsl_tensor *sm = tsl_soft_max(ctx, kq, mask, scale);
        tsl_tensor *vt = tsl_cont(ctx, tsl_permute(ctx, v, 1, 2, 0, 3)); /* [nt, hd, nkv] */
        tsl_tensor *kqv = tsl_mul_mat(ctx, vt, sm);                      /* [hd, nt, nh] */
        tsl_tensor *out = tsl_cont(ctx, tsl_permute(ctx, kqv, 0, 2, 1, 3)); /* [hd, nh, nt] */

        double *qv = ref_load(q), *kv = ref_load(k), *vv = ref_load(v);
        double *qrv = (double *)malloc((size_t)ref_nel(qne) * sizeof(double));
        double *krv = (double *)malloc((size_t)ref_nel(kne) * sizeof(double));
        ref_rope(qv, qne, (const int32_t *)pos->data, NULL, &rp, qrv, NULL);
        ref_rope(kv, kne, (const int32_t *)pos->data, NULL, &rp, krv, NULL);
        double *ref = (double *)calloc((size_t)ref_nel(qne), sizeof(double));
        double *w = (double *)malloc((size_t)nt * sizeof(double));
        for (int64_t h = 0; h < nh; h++)
            for (int64_t tq = 0; tq < nt; tq++) {
                const int64_t hk = h / g;
                double mx = -INFINITY, sum = 0;
                for (int64_t tk = 0; tk < nt; tk++) {
                    double s = 0;
                    for (int64_t d = 0; d < hd; d++)
                        s += qrv[ref_ix(qne, d, h, tq, 0)] * krv[ref_ix(kne, d, hk, tk, 0)];
                    w[tk] = tk <= tq ? s * (double)scale : -INFINITY;
                    if (w[tk] > mx) mx = w[tk];
                }
                for (int64_t tk = 0; tk < nt; tk++) sum += (w[tk] = exp(w[tk] - mx));
                for (int64_t d = 0; d < hd; d++) {
                    double o = 0;
                    for (int64_t tk = 0; tk < nt; tk++) o += w[tk] / sum * vv[ref_ix(kne, d, hk, tk, 0)];
                    ref[ref_ix(qne, d, h, tq, 0)] = o;
                }
            }
        if (out) CHECK(out->ne[0] == hd && out->ne[1] == nh && out->ne[2] == nt);
        ref_run(&st, ref_graph(ctx, out), out, ref, NULL, 1e-5, 1e-4, NULL);
        free(qv);
        free(kv);
        free(vv);
        free(qrv);
        free(krv);
        free(ref);
        free(w);
        tsl_ctx_free(ctx);
    }
    ref_stats_print(&st);
}

int main(void) {
    if (!ref_setup()) return 1;
    printf("attention ops vs double references, %s\n", ref_mode());
    RUN(test_soft_max);
    RUN(test_soft_max_all_masked);
    RUN(test_rope);
    RUN(test_attention_block);
    ref_teardown();
    return test_summary();
}
