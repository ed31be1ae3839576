#version 450
/*
 * soft_max.comp - softmax(a * scale + mask) along rows, one workgroup per
 * row, any strides. MASK_F32 / MASK_F16 select a mask type (none otherwise);
 * row (i1, i2, i3) of a reads mask row (i1, i2 % m2, i3 % m3).
 *
 * Three passes over the row: the maximum, the sum of exp(w - max), the
 * normalized write. -INFINITY in the mask excludes an element; a row that
 * excludes everything becomes zeros, not 0/0 (as on the CPU).
 */
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"

#define WG 128u
layout(local_size_x = 128) in;

layout(push_constant) uniform P {
    uint ne0, ne1, ne2, ne3;
    uint sa0, sa1, sa2, sa3;
    uint sd0, sd1, sd2, sd3;
    uint sm0, sm1, sm2, sm3;
    uint m2, m3;
    uint oa, om, od;
    float scale;
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

layout(binding = 0) readonly buffer A { float a[]; };
#if defined(MASK_F32)
layout(binding = 1) readonly buffer Mk { float mk[]; };
#elif defined(MASK_F16)
layout(binding = 1) readonly buffer Mk { float16_t mk[]; };
#endif
layout(binding = 3) writeonly buffer D { float d[]; };

shared float red[WG];

float reduce_max(float v) {
    const uint tid = gl_LocalInvocationID.x;
    red[tid] = v;
    barrier();
    [[unroll]] for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (tid < s) red[tid] = max(red[tid], red[tid + s]);
        barrier();
    }
    float r = red[0];
    barrier();
    return r;
}

float reduce_sum(float v) {
    const uint tid = gl_LocalInvocationID.x;
    red[tid] = v;
    barrier();
    [[unroll]] for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        barrier();
    }
    float r = red[0];
    barrier();
    return r;
}

void main() {
    TSL_PROGRESS();
    const uint row = wg_linear();
    if (row >= pc.ne1 * pc.ne2 * pc.ne3) return;
    const uint tid = gl_LocalInvocationID.x;
    const uint i1 = row % pc.ne1, i2 = (row / pc.ne1) % pc.ne2, i3 = row / (pc.ne1 * pc.ne2);
    const uint xa = pc.oa + i1 * pc.sa1 + i2 * pc.sa2 + i3 * pc.sa3;
    const uint xd = pc.od + i1 * pc.sd1 + i2 * pc.sd2 + i3 * pc.sd3;
#if defined(MASK_F32) || defined(MASK_F16)
    const uint xm = pc.om + i1 * pc.sm1 + (i2 % pc.m2) * pc.sm2 + (i3 % pc.m3) * pc.sm3;
#define W(i) (a[xa + (i) * pc.sa0] * pc.scale + float(mk[xm + (i) * pc.sm0]))
#else
#define W(i) (a[xa + (i) * pc.sa0] * pc.scale)
#endif
    float mx = -1.0 / 0.0;
    for (uint i = tid; i < pc.ne0; i += WG) mx = max(mx, W(i));
    mx = reduce_max(mx);
    if (isinf(mx) && mx < 0.0) { /* everything excluded */
        for (uint i = tid; i < pc.ne0; i += WG) d[xd + i * pc.sd0] = 0.0;
        return;
    }
    float s = 0.0;
    for (uint i = tid; i < pc.ne0; i += WG) s += exp(W(i) - mx);
    const float inv = 1.0 / reduce_sum(s);
    for (uint i = tid; i < pc.ne0; i += WG) d[xd + i * pc.sd0] = exp(W(i) - mx) * inv;
}
