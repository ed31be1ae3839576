/*
 * ops_softmax.c - soft_max(a * scale + mask) along rows.
 *
 * One row at a time, in a float work row (the destination row itself when
 * it is dense, else per-thread scratch): w = x * scale + mask, subtract the
 * row maximum, exponentiate, divide by the sum (accumulated in double). A
 * mask of -INFINITY excludes an element (its exp is exactly 0); a row that
 * excludes everything becomes zeros instead of 0/0. The mask (F32 or F16,
 * at least as many rows as a) is broadcast over dims 2 and 3: row (i1, i2,
 * i3) of a reads mask row (i1, i2 % m2, i3 % m3). Rows are split across
 * threads; in place is safe since each element is read before the work row
 * overwrites it.
 */
#include <math.h>
#include <string.h>

#include "cpu/ops.h"

/* ops_elementwise.c: the shared vector loops */

static size_t sm_row_bytes(int64_t ne0) { return ((size_t)ne0 * sizeof(float) + 63) / 64 * 64; }

/* Per thread: a work row and a mask row. */
size_t cpu_soft_max_wsize(const tsl_tensor *node, int nth) {
    return (size_t)nth * 2 * sm_row_bytes(node->ne[0]);
}

void cpu_op_soft_max(const cpu_params *p, tsl_tensor *dst) {
    const tsl_tensor *a = dst->src[0], *mask = dst->src[1];
    const float scale = op_get_f32(dst, 0);
    const int64_t ne0 = a->ne[0], ne1 = a->ne[1], ne2 = a->ne[2];
    const size_t sa = a->nb[0], sd = dst->nb[0];
    if (ne0 == 0) return;
    int isa = cpu_vec_isa();
    const cpu_simd *simd = cpu_simd_get();
    char *ws = (char *)p->wdata + (size_t)p->ith * 2 * sm_row_bytes(ne0);
    float *tmp = (float *)ws, *mtmp = (float *)(ws + sm_row_bytes(ne0));

    int64_t r0, r1;
    cpu_split_rows(tsl_nrows(a), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
        const char *x = (const char *)a->data + i1 * a->nb[1] + i2 * a->nb[2] + i3 * a->nb[3];
        char *y = (char *)dst->data + i1 * dst->nb[1] + i2 * dst->nb[2] + i3 * dst->nb[3];
        float *w = sd == sizeof(float) ? (float *)y : tmp;

        if (sa == sizeof(float)) {
            cpu_vec_ew_scale(isa, ne0, (const float *)x, scale, w);
        } else {
            for (int64_t i = 0; i < ne0; i++) {
                float v;
                memcpy(&v, x + (size_t)i * sa, sizeof v);
                w[i] = v * scale;
            }
        }
        if (mask) {
            const char *m = (const char *)mask->data + i1 * mask->nb[1] + (i2 % mask->ne[2]) * mask->nb[2] +
                            (i3 % mask->ne[3]) * mask->nb[3];
            const float *mf = mtmp;
            if (mask->type == TSL_TYPE_F32) {
                if (mask->nb[0] == sizeof(float))
                    mf = (const float *)m;
                else
                    for (int64_t i = 0; i < ne0; i++) memcpy(&mtmp[i], m + (size_t)i * mask->nb[0], sizeof(float));
            } else if (mask->nb[0] == sizeof(tsl_fp16_t)) {
                simd->f16_to_f32(ne0, (const tsl_fp16_t *)m, mtmp);
            } else {
                for (int64_t i = 0; i < ne0; i++) {
                    tsl_fp16_t h;
                    memcpy(&h, m + (size_t)i * mask->nb[0], sizeof h);
                    mtmp[i] = tsl_fp16_to_fp32(h);
                }
            }
            cpu_vec_ew_add(isa, ne0, w, mf, w);
        }
        float mx = cpu_vec_ew_max(isa, ne0, w);
        if (mx == -INFINITY) {
            memset(w, 0, (size_t)ne0 * sizeof(float)); /* everything excluded */
        } else {
            cpu_vec_ew_exp_shift(isa, ne0, w, mx, w);
            double sum = cpu_vec_ew_sum(isa, ne0, w);
            cpu_vec_ew_scale(isa, ne0, w, (float)(1.0 / sum), w);
        }
        if (w == tmp)
            for (int64_t i = 0; i < ne0; i++) memcpy(y + (size_t)i * sd, &w[i], sizeof(float));
    }
}
