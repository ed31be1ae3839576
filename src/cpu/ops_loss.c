/*
 * ops_loss.c - cross_entropy_loss: the mean over rows of
 * -sum(labels * log_softmax(logits)).
 *
 * log_softmax is formed stably as (x - max) - log(sum exp(x - max)), in
 * double, so logits of any magnitude give a finite loss. Each row's loss is
 * written to scratch and thread 0 adds them in row order after a barrier:
 * the result is the same whatever the thread count. A label of exactly 0
 * contributes nothing, even where the logit is -INFINITY (0 * -inf would
 * otherwise be NaN).
 */
#include <math.h>
#include <string.h>

#include "cpu/ops.h"

/* ops_elementwise.c: the shared vector loops */

static size_t loss_row_bytes(int64_t ne0) { return ((size_t)ne0 * sizeof(float) + 63) / 64 * 64; }
static size_t loss_part_bytes(int64_t nrows) { return ((size_t)nrows * sizeof(double) + 63) / 64 * 64; }

/* Per-row losses, then one work row per thread. */
size_t cpu_cross_entropy_loss_wsize(const tsl_tensor *node, int nth) {
    const tsl_tensor *a = node->src[0];
    return loss_part_bytes(tsl_nrows(a)) + (size_t)nth * loss_row_bytes(a->ne[0]);
}

void cpu_op_cross_entropy_loss(const cpu_params *p, tsl_tensor *dst) {
    const tsl_tensor *x = dst->src[0], *l = dst->src[1];
    const int64_t ne0 = x->ne[0], ne1 = x->ne[1], ne2 = x->ne[2], nr = tsl_nrows(x);
    int isa = cpu_vec_isa();
    double *part = p->wdata;
    float *w = (float *)((char *)p->wdata + loss_part_bytes(nr) + (size_t)p->ith * loss_row_bytes(ne0));

    int64_t r0, r1;
    cpu_split_rows(nr, p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
        const char *xr = (const char *)x->data + i1 * x->nb[1] + i2 * x->nb[2] + i3 * x->nb[3];
        const char *lr = (const char *)l->data + i1 * l->nb[1] + i2 * l->nb[2] + i3 * l->nb[3];
        for (int64_t i = 0; i < ne0; i++) memcpy(&w[i], xr + (size_t)i * x->nb[0], sizeof(float));
        float mx = cpu_vec_ew_max(isa, ne0, w);
        double dot = 0, lsum = 0; /* sum l * (x - max), sum l */
        for (int64_t i = 0; i < ne0; i++) {
            float lv;
            memcpy(&lv, lr + (size_t)i * l->nb[0], sizeof lv);
            if (lv == 0.0f) continue;
            dot += (double)lv * ((double)w[i] - (double)mx);
            lsum += lv;
        }
        cpu_vec_ew_exp_shift(isa, ne0, w, mx, w);
        double lse = log(cpu_vec_ew_sum(isa, ne0, w));
        part[r] = ne0 > 0 ? lse * lsum - dot : 0.0;
    }
    cpu_barrier(p);
    if (p->ith != 0) return;
    double s = 0;
    for (int64_t r = 0; r < nr; r++) s += part[r];
    float f = nr > 0 ? (float)(s / (double)nr) : 0.0f;
    memcpy(dst->data, &f, sizeof f);
}
