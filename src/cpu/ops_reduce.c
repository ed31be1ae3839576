/*
 * ops_reduce.c - reductions: sum (of everything), sum_rows, mean, argmax.
 *
 * Sums accumulate in double, so a sum over millions of floats keeps float
 * precision, and they are deterministic: the total of SUM is formed from
 * partial sums over fixed pieces (rows cut into fixed-size chunks, not into
 * one piece per thread), added in order by thread 0 after a barrier, so the
 * result does not depend on the thread count. Inputs may have any strides.
 */
#include <math.h>
#include <string.h>

#include "cpu/ops.h"

/* ops_elementwise.c: the shared vector loops */

/* Elements per partial sum of SUM: fixed, so results do not depend on nth. */
#define RED_CHUNK 16384

static inline const char *red_row(const tsl_tensor *t, int64_t r) {
    int64_t i1 = r % t->ne[1], i2 = (r / t->ne[1]) % t->ne[2], i3 = r / (t->ne[1] * t->ne[2]);
    return (const char *)t->data + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
}

/* Sum of elements [c0, c1) of a row with element stride s, in double. */
static double red_sum(int isa, const char *row, size_t s, int64_t c0, int64_t c1) {
    if (s == sizeof(float)) return cpu_vec_ew_sum(isa, c1 - c0, (const float *)row + c0);
    double acc = 0;
    for (int64_t i = c0; i < c1; i++) {
        float v;
        memcpy(&v, row + (size_t)i * s, sizeof v);
        acc += v;
    }
    return acc;
}

static int64_t red_nchunks(const tsl_tensor *a) { return a->ne[0] > 0 ? (a->ne[0] + RED_CHUNK - 1) / RED_CHUNK : 1; }

size_t cpu_sum_wsize(const tsl_tensor *node, int nth) {
    const tsl_tensor *a = node->src[0];
    return (size_t)(tsl_nrows(a) * red_nchunks(a)) * sizeof(double) + 64;
}

void cpu_op_sum(const cpu_params *p, tsl_tensor *dst) {
    const tsl_tensor *a = dst->src[0];
    int isa = cpu_vec_isa();
    int64_t nc = red_nchunks(a), nu = tsl_nrows(a) * nc;
    double *part = p->wdata;
    int64_t u0, u1;
    cpu_split_rows(nu, p->ith, p->nth, &u0, &u1);
    for (int64_t u = u0; u < u1; u++) {
        int64_t c0 = (u % nc) * RED_CHUNK, c1 = c0 + RED_CHUNK < a->ne[0] ? c0 + RED_CHUNK : a->ne[0];
        part[u] = red_sum(isa, red_row(a, u / nc), a->nb[0], c0, c1);
    }
    cpu_barrier(p);
    if (p->ith != 0) return;
    double s = 0;
    for (int64_t u = 0; u < nu; u++) s += part[u];
    float f = (float)s;
    memcpy(dst->data, &f, sizeof f);
}

static void red_rows(const cpu_params *p, tsl_tensor *dst, bool mean) {
    const tsl_tensor *a = dst->src[0];
    int isa = cpu_vec_isa();
    int64_t r0, r1;
    cpu_split_rows(tsl_nrows(a), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        double s = red_sum(isa, red_row(a, r), a->nb[0], 0, a->ne[0]);
        if (mean) s = a->ne[0] > 0 ? s / (double)a->ne[0] : NAN;
        float f = (float)s;
        int64_t i1 = r % a->ne[1], i2 = (r / a->ne[1]) % a->ne[2], i3 = r / (a->ne[1] * a->ne[2]);
        memcpy((char *)dst->data + i1 * dst->nb[1] + i2 * dst->nb[2] + i3 * dst->nb[3], &f, sizeof f);
    }
}

void cpu_op_sum_rows(const cpu_params *p, tsl_tensor *dst) { red_rows(p, dst, false); }
void cpu_op_mean(const cpu_params *p, tsl_tensor *dst) { red_rows(p, dst, true); }

/* Index of the largest element of each row; the first wins ties; NaN and
 * -inf never win (a row with nothing above -inf gives 0): the sampler's
 * greedy rule, so a graph's argmax is its choice. */
void cpu_op_argmax(const cpu_params *p, tsl_tensor *dst) {
    const tsl_tensor *a = dst->src[0];
    const size_t s = a->nb[0];
    int64_t r0, r1;
    cpu_split_rows(tsl_nrows(a), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const char *row = red_row(a, r);
        int64_t best = 0;
        float bv = -INFINITY;
        for (int64_t i = 0; i < a->ne[0]; i++) {
            float v;
            memcpy(&v, row + (size_t)i * s, sizeof v);
            if (v > bv) {
                bv = v;
                best = i;
            }
        }
        int32_t idx = (int32_t)best;
        memcpy((char *)dst->data + (size_t)r * dst->nb[0], &idx, sizeof idx);
    }
}
