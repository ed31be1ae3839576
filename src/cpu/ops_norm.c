/*
 * ops_norm.c - rms_norm and norm, per row.
 *
 * Both are two passes over a row: statistics, then the scaled write. The
 * statistics accumulate in double (a row of 8192 floats summed in float
 * loses about three digits), and norm's variance is the two-pass form
 * mean((x - mean)^2), which does not cancel catastrophically the way
 * mean(x^2) - mean^2 does. Rows are split across threads; inputs may have
 * any strides; in place is safe (the write pass reads each element before
 * writing it).
 */
#include <math.h>
#include <string.h>

#include "cpu/ops.h"

/* ops_elementwise.c: the shared vector loops */

static inline float norm_ld(const char *row, size_t s, int64_t i) {
    float v;
    memcpy(&v, row + (size_t)i * s, sizeof v);
    return v;
}

static void norm_rows(const cpu_params *p, tsl_tensor *dst, bool rms) {
    const tsl_tensor *a = dst->src[0];
    const double eps = (double)op_get_f32(dst, 0);
    const int64_t ne0 = a->ne[0], ne1 = a->ne[1], ne2 = a->ne[2];
    const size_t sa = a->nb[0], sd = dst->nb[0];
    const bool dense = sa == sizeof(float) && sd == sizeof(float);
    if (ne0 == 0) return;
    int isa = cpu_vec_isa();
    int64_t r0, r1;
    cpu_split_rows(tsl_nrows(a), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
        const char *x = (const char *)a->data + i1 * a->nb[1] + i2 * a->nb[2] + i3 * a->nb[3];
        char *y = (char *)dst->data + i1 * dst->nb[1] + i2 * dst->nb[2] + i3 * dst->nb[3];
        double mean = 0, ms;
        if (dense) {
            if (rms) {
                ms = cpu_vec_ew_sumsq(isa, ne0, (const float *)x) / (double)ne0;
            } else {
                mean = cpu_vec_ew_sum(isa, ne0, (const float *)x) / (double)ne0;
                ms = cpu_vec_ew_sumsq_dev(isa, ne0, (const float *)x, mean) / (double)ne0;
            }
        } else {
            double s = 0, s2 = 0;
            if (!rms) {
                for (int64_t i = 0; i < ne0; i++) s += norm_ld(x, sa, i);
                mean = s / (double)ne0;
            }
            for (int64_t i = 0; i < ne0; i++) {
                double d = (double)norm_ld(x, sa, i) - mean;
                s2 += d * d;
            }
            ms = s2 / (double)ne0;
        }
        float scale = (float)(1.0 / sqrt(ms + eps));
        float shift = (float)-mean;
        if (dense) {
            cpu_vec_ew_shift_scale(isa, ne0, (const float *)x, shift, scale, (float *)y);
        } else {
            for (int64_t i = 0; i < ne0; i++) {
                float v = (norm_ld(x, sa, i) + shift) * scale;
                memcpy(y + (size_t)i * sd, &v, sizeof v);
            }
        }
    }
}

void cpu_op_rms_norm(const cpu_params *p, tsl_tensor *dst) { norm_rows(p, dst, true); }
void cpu_op_norm(const cpu_params *p, tsl_tensor *dst) { norm_rows(p, dst, false); }
