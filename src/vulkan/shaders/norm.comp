#version 450
/*
 * norm.comp - per-row statistics ops, one workgroup per row, any strides:
 * OP_RMS_NORM  x / sqrt(mean(x^2) + eps)
 * OP_NORM      (x - mean) / sqrt(mean((x - mean)^2) + eps)   (two passes, as
 *              the CPU does: the one-pass mean(x^2) - mean^2 cancels badly)
 * OP_SUM_ROWS  the row's sum into dst[0] of the row
 * OP_MEAN      the row's mean
 *
 * Each invocation sums a strided share of the row; the shares meet in a
 * shared-memory tree (no subgroup operations needed, so this runs on every
 * device). In place is safe: the write pass reads each element before
 * writing it, after the statistics are complete.
 */
#include "common.glsl"

#define WG 128u
layout(local_size_x = 128) in;

layout(push_constant) uniform P {
    uint ne0, ne1, ne2, ne3;
    uint sa0, sa1, sa2, sa3;
    uint sd0, sd1, sd2, sd3;
    uint oa, od;
    float eps;
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 3) writeonly buffer D { float d[]; };

shared float red[WG];

float row_sum(float v) {
    const uint tid = gl_LocalInvocationID.x;
    red[tid] = v;
    barrier();
    [[unroll]] for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        barrier();
    }
    float r = red[0];
    barrier(); /* red is reused by the next reduction */
    return r;
}

void main() {
    TSL_PROGRESS();
    const uint row = wg_linear();
    if (row >= pc.ne1 * pc.ne2 * pc.ne3) return; /* uniform per workgroup */
    const uint tid = gl_LocalInvocationID.x;
    const uint i1 = row % pc.ne1, i2 = (row / pc.ne1) % pc.ne2, i3 = row / (pc.ne1 * pc.ne2);
    const uint xa = pc.oa + i1 * pc.sa1 + i2 * pc.sa2 + i3 * pc.sa3;
    const uint xd = pc.od + i1 * pc.sd1 + i2 * pc.sd2 + i3 * pc.sd3;
    const float n = float(pc.ne0);

#if defined(OP_SUM_ROWS) || defined(OP_MEAN)
    float s = 0.0;
    for (uint i = tid; i < pc.ne0; i += WG) s += a[xa + i * pc.sa0];
    s = row_sum(s);
#if defined(OP_MEAN)
    s /= n;
#endif
    if (tid == 0u) d[xd] = s;
#else
    float mean = 0.0;
#if defined(OP_NORM)
    {
        float s = 0.0;
        for (uint i = tid; i < pc.ne0; i += WG) s += a[xa + i * pc.sa0];
        mean = row_sum(s) / n;
    }
#endif
    float s2 = 0.0;
    for (uint i = tid; i < pc.ne0; i += WG) {
        float v = a[xa + i * pc.sa0] - mean;
        s2 += v * v;
    }
    const float scale = inversesqrt(row_sum(s2) / n + pc.eps);
    for (uint i = tid; i < pc.ne0; i += WG) d[xd + i * pc.sd0] = (a[xa + i * pc.sa0] - mean) * scale;
#endif
}
