#version 450
/*
 * cross_entropy.comp - CROSS_ENTROPY_LOSS: the mean over rows of
 * -sum(labels * log_softmax(logits)) into dst[0], logits and labels F32 of
 * one shape in any strides, by one workgroup (as sum.comp: no scratch to
 * combine several, and a deterministic result).
 *
 * Per row, as the CPU forms it: mx = max(x), dot = sum l (x - mx) and
 * lsum = sum l over the labels that are not 0 (a 0 label adds nothing even
 * where x is -inf), se = sum exp(x - mx); the row's loss is
 * log(se) lsum - dot. Sums are Kahan sums in float (the CPU uses double);
 * the error stays at a few ulp of the terms' magnitudes.
 *
 * Two ways to share the work, chosen by the host (flag coop):
 *  - short rows (coop 0): each invocation takes whole rows (tid, tid + 256,
 *    ...) and keeps its own total; the totals meet in a tree at the end;
 *  - long rows (coop 1, a vocabulary): the workgroup takes the rows one by
 *    one, each invocation a strided share of the row in a single pass (a
 *    running max with its rescaled sum of exp, as online softmax keeps it;
 *    dot = sum l x - mx sum l), then tree reductions; invocation 0 keeps the
 *    total in row order.
 * One workgroup in all, because a node gets one dispatch and no scratch
 * memory to combine several deterministically: an H200 gives a 128000-wide
 * vocabulary over 512 rows ~10 GB/s.
 */
#include "common.glsl"

#define WG 256u
layout(local_size_x = 256) in;

layout(push_constant) uniform P {
    uint ne0, ne1, ne2, ne3;
    uint sx0, sx1, sx2, sx3;
    uint sl0, sl1, sl2, sl3;
    uint ox, ol, od;
    uint coop;
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer L { float l[]; };
layout(binding = 3) writeonly buffer D { float d[]; };

shared float r0[WG], r1[WG], r2[WG], r3[WG];

void kahan(inout float s, inout float c, float v) {
    precise float y = v - c;
    precise float t = s + y;
    c = (t - s) - y;
    s = t;
}

/* one element into a running (max, sum of exp(x - max)) and the label sums */
void online(inout float mx, inout float se, inout float slx, inout float slxc, inout float ls, inout float lsc,
            float xv, float lv) {
    if (xv > mx) {
        se = se * exp(mx - xv) + 1.0; /* exp(-inf) = 0 for the first */
        mx = xv;
    } else if (!isinf(xv)) {
        se += exp(xv - mx);
    }
    if (lv != 0.0) {
        kahan(slx, slxc, lv * xv);
        kahan(ls, lsc, lv);
    }
}

void row_base(uint r, out uint bx, out uint bl) {
    const uint i1 = r % pc.ne1, i2 = (r / pc.ne1) % pc.ne2, i3 = r / (pc.ne1 * pc.ne2);
    bx = pc.ox + i1 * pc.sx1 + i2 * pc.sx2 + i3 * pc.sx3;
    bl = pc.ol + i1 * pc.sl1 + i2 * pc.sl2 + i3 * pc.sl3;
}

void main() {
    TSL_PROGRESS();
    const uint tid = gl_LocalInvocationID.x;
    const uint nr = pc.ne1 * pc.ne2 * pc.ne3;
    float tot = 0.0, totc = 0.0;
    if (pc.coop == 0u) {
        for (uint r = tid; r < nr; r += WG) {
            uint bx, bl;
            row_base(r, bx, bl);
            float mx = -1.0 / 0.0;
            for (uint i = 0u; i < pc.ne0; i++) mx = max(mx, x[bx + i * pc.sx0]);
            float se = 0.0, sec = 0.0, dot = 0.0, dotc = 0.0, ls = 0.0, lsc = 0.0;
            for (uint i = 0u; i < pc.ne0; i++) {
                const float xv = x[bx + i * pc.sx0], lv = l[bl + i * pc.sl0];
                kahan(se, sec, exp(xv - mx));
                if (lv != 0.0) {
                    kahan(dot, dotc, lv * (xv - mx));
                    kahan(ls, lsc, lv);
                }
            }
            if (pc.ne0 > 0u) kahan(tot, totc, log(se) * ls - dot);
        }
    } else {
        for (uint r = 0u; r < nr; r++) {
            uint bx, bl;
            row_base(r, bx, bl);
            /* one pass: a running max with its rescaled sum of exp (online
             * softmax), sum l x and sum l; dot = sum l x - mx sum l after */
            float mx = -1.0 / 0.0, se = 0.0, slx = 0.0, slxc = 0.0, ls = 0.0, lsc = 0.0;
            uint i = tid;
            for (; i + 3u * WG < pc.ne0; i += 4u * WG) {
                float xv[4], lv[4];
                [[unroll]] for (uint k = 0u; k < 4u; k++) {
                    xv[k] = x[bx + (i + k * WG) * pc.sx0];
                    lv[k] = l[bl + (i + k * WG) * pc.sl0];
                }
                [[unroll]] for (uint k = 0u; k < 4u; k++) online(mx, se, slx, slxc, ls, lsc, xv[k], lv[k]);
            }
            for (; i < pc.ne0; i += WG) online(mx, se, slx, slxc, ls, lsc, x[bx + i * pc.sx0], l[bl + i * pc.sl0]);
            r0[tid] = mx;
            r1[tid] = se;
            r2[tid] = slx;
            r3[tid] = ls;
            barrier();
            [[unroll]] for (uint k = WG / 2u; k > 0u; k >>= 1) {
                if (tid < k) {
                    const float m1 = r0[tid], m2 = r0[tid + k], m = max(m1, m2);
                    float s = 0.0;
                    if (!isinf(m)) s = r1[tid] * exp(m1 - m) + r1[tid + k] * exp(m2 - m);
                    r0[tid] = m;
                    r1[tid] = s;
                    r2[tid] += r2[tid + k];
                    r3[tid] += r3[tid + k];
                }
                barrier();
            }
            if (tid == 0u && pc.ne0 > 0u) kahan(tot, totc, log(r1[0]) * r3[0] - (r2[0] - r0[0] * r3[0]));
            barrier(); /* the next row overwrites r0..r3 */
        }
    }
    r0[tid] = tot;
    barrier();
    [[unroll]] for (uint k = WG / 2u; k > 0u; k >>= 1) {
        if (tid < k) r0[tid] += r0[tid + k];
        barrier();
    }
    if (tid == 0u) d[pc.od] = nr > 0u ? r0[0] / float(nr) : 0.0;
}
