/*
 * ops_rope.c - rotary position embedding (NORMAL and NEOX), with
 * freq_factors and YaRN scaling.
 *
 * The math is ggml's rope_yarn: for rotated pair i (0 <= i < n_dims/2) of a
 * token at position pos,
 *   theta_extrap = pos * base^(-2i/n_dims) / freq_factor[i]
 *   theta_interp = freq_scale * theta_extrap
 *   theta        = theta_interp, or with ext_factor != 0 the mix
 *                  theta_interp (1 - r) + theta_extrap r, r = ramp(i) ext_factor,
 *                  and mscale *= 1 + 0.1 ln(1 / freq_scale)
 *   (cos, sin)   = (cos theta, sin theta) * attn_factor * mscale
 * where ramp falls from 1 to 0 between the "correction dims" computed from
 * n_ctx_orig, beta_fast and beta_slow. NORMAL rotates (x[2i], x[2i+1]),
 * NEOX rotates (x[i], x[i + n_dims/2]); dims past n_dims pass through.
 *
 * Angles are formed in double (pos * base^-2i/n reaches 1e5 and more at long
 * contexts, where a float angle is off by whole hundredths of a radian) and
 * the cos/sin of one token are computed once and shared by all its heads:
 * each thread keeps a table for the token it is on. Rows (heads of tokens)
 * are split across threads. In place is safe: both elements of a pair are
 * read before either is written.
 */
#include <math.h>
#include <string.h>

#include "cpu/ops.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

typedef struct rope_cfg {
    int n_dims, mode, n_ctx_orig;
    double freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow;
    double corr0, corr1; /* YaRN correction dims */
} rope_cfg;

static double rope_corr_dim(int n_dims, int n_ctx_orig, double n_rot, double base) {
    return n_dims * log(n_ctx_orig / (n_rot * 2.0 * M_PI)) / (2.0 * log(base));
}

static void rope_read_cfg(const tsl_tensor *dst, rope_cfg *c) {
    c->n_dims = op_get_i32(dst, 0);
    c->mode = op_get_i32(dst, 1);
    c->n_ctx_orig = op_get_i32(dst, 2);
    c->freq_base = op_get_f32(dst, 3);
    c->freq_scale = op_get_f32(dst, 4);
    c->ext_factor = op_get_f32(dst, 5);
    c->attn_factor = op_get_f32(dst, 6);
    c->beta_fast = op_get_f32(dst, 7);
    c->beta_slow = op_get_f32(dst, 8);
    c->corr0 = 0;
    c->corr1 = 0;
    if (c->ext_factor != 0 && c->n_ctx_orig > 0) {
        double start = floor(rope_corr_dim(c->n_dims, c->n_ctx_orig, c->beta_fast, c->freq_base));
        double end = ceil(rope_corr_dim(c->n_dims, c->n_ctx_orig, c->beta_slow, c->freq_base));
        c->corr0 = start > 0 ? start : 0;
        c->corr1 = end < c->n_dims - 1 ? end : c->n_dims - 1;
    }
}

/* 1 below the low correction dim, 0 above the high one, linear between. */
static double rope_ramp(double low, double high, int i) {
    double d = high - low;
    double y = (i - low) / (d > 0.001 ? d : 0.001);
    y = y < 0 ? 0 : y > 1 ? 1 : y;
    return 1.0 - y;
}

/* Per thread: theta_base[n_dims/2] doubles, then cos/sin[n_dims] floats. */
static size_t rope_thread_bytes(int n_dims) {
    size_t half = (size_t)(n_dims > 0 ? n_dims / 2 : 0);
    size_t b = half * sizeof(double) + 2 * half * sizeof(float);
    return (b + 63) / 64 * 64;
}

size_t cpu_rope_wsize(const tsl_tensor *node, int nth) {
    return (size_t)nth * rope_thread_bytes(op_get_i32(node, 0));
}

void cpu_op_rope(const cpu_params *p, tsl_tensor *dst) {
    const tsl_tensor *a = dst->src[0], *pos = dst->src[1], *ff = dst->src[2];
    rope_cfg c;
    rope_read_cfg(dst, &c);
    const int half = c.n_dims / 2;
    const int64_t ne0 = a->ne[0], ne1 = a->ne[1], ne2 = a->ne[2];
    const size_t sa = a->nb[0], sd = dst->nb[0];
    const bool dense = sa == sizeof(float) && sd == sizeof(float);
    const bool neox = (c.mode & TSL_ROPE_NEOX) != 0;

    char *ws = (char *)p->wdata + (size_t)p->ith * rope_thread_bytes(c.n_dims);
    double *theta_base = (double *)ws;
    float *cs = (float *)(ws + (size_t)half * sizeof(double)); /* cos, sin interleaved */

    double mscale = c.attn_factor;
    if (c.ext_factor != 0) mscale *= 1.0 + 0.1 * log(1.0 / c.freq_scale);
    for (int i = 0; i < half; i++) {
        double f = pow(c.freq_base, -2.0 * i / c.n_dims);
        if (ff) {
            float v;
            memcpy(&v, (const char *)ff->data + (size_t)i * ff->nb[0], sizeof v);
            f /= v;
        }
        theta_base[i] = f;
    }

    int64_t r0, r1, cached = -1;
    cpu_split_rows(tsl_nrows(a), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
        int64_t tok = r / ne1; /* (i2, i3) */
        if (tok != cached) {
            int32_t pv;
            memcpy(&pv, (const char *)pos->data + (size_t)i2 * pos->nb[0], sizeof pv);
            for (int i = 0; i < half; i++) {
                double te = (double)pv * theta_base[i];
                double ti = c.freq_scale * te, theta = ti;
                if (c.ext_factor != 0) {
                    double mix = rope_ramp(c.corr0, c.corr1, i) * c.ext_factor;
                    theta = ti * (1 - mix) + te * mix;
                }
                cs[2 * i] = (float)(cos(theta) * mscale);
                cs[2 * i + 1] = (float)(sin(theta) * mscale);
            }
            cached = tok;
        }
        const char *x = (const char *)a->data + i1 * a->nb[1] + i2 * a->nb[2] + i3 * a->nb[3];
        char *y = (char *)dst->data + i1 * dst->nb[1] + i2 * dst->nb[2] + i3 * dst->nb[3];
        const int64_t step = neox ? 1 : 2, other = neox ? half : 1;
        if (dense) {
            const float *xf = (const float *)x;
            float *yf = (float *)y;
            for (int i = 0; i < half; i++) {
                int64_t j = i * step;
                float x0 = xf[j], x1 = xf[j + other];
                float cv = cs[2 * i], sv = cs[2 * i + 1];
                yf[j] = x0 * cv - x1 * sv;
                yf[j + other] = x0 * sv + x1 * cv;
            }
            if (yf != xf)
                for (int64_t i = c.n_dims; i < ne0; i++) yf[i] = xf[i];
        } else {
            for (int i = 0; i < half; i++) {
                int64_t j = i * step;
                float x0, x1;
                memcpy(&x0, x + (size_t)j * sa, sizeof x0);
                memcpy(&x1, x + (size_t)(j + other) * sa, sizeof x1);
                float cv = cs[2 * i], sv = cs[2 * i + 1];
                float y0 = x0 * cv - x1 * sv, y1 = x0 * sv + x1 * cv;
                memcpy(y + (size_t)j * sd, &y0, sizeof y0);
                memcpy(y + (size_t)(j + other) * sd, &y1, sizeof y1);
            }
            for (int64_t i = c.n_dims; i < ne0; i++) memmove(y + (size_t)i * sd, x + (size_t)i * sa, sizeof(float));
        }
    }
}
