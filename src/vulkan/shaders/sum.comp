#version 450
/*
 * sum.comp - SUM: the sum of every element of a (F32, any strides) into
 * dst[0], by one workgroup.
 *
 * One workgroup, because a node gets one dispatch and no scratch memory to
 * combine the partial sums of several (and float atomics would make the
 * result depend on timing): each of the 256 invocations walks a strided
 * share of the flat index space, then the shares meet in a shared-memory
 * tree. The result is deterministic. Each share is four Kahan sums (four
 * loads in flight), so the error stays at a few ulp of sum |x| whatever the
 * length (the CPU sums in double; this keeps the same tolerance). A sum over
 * a whole tensor is rare in a model's forward pass (losses, statistics);
 * one workgroup streams it at a fraction of the device's bandwidth (an H200:
 * ~5 GB/s), the price of the single dispatch.
 */
#include "common.glsl"

#define WG 256u
layout(local_size_x = 256) in;

layout(push_constant) uniform P {
    uint ne0, ne1, ne2, ne3;
    uint sa0, sa1, sa2, sa3;
    uint oa, od;
    uint contig;
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 3) writeonly buffer D { float d[]; };

shared float red[WG];

uint elem(uint e) {
    if (pc.contig != 0u) return pc.oa + e;
    uint r = e;
    const uint i0 = r % pc.ne0; r /= pc.ne0;
    const uint i1 = r % pc.ne1; r /= pc.ne1;
    return pc.oa + i0 * pc.sa0 + i1 * pc.sa1 + (r % pc.ne2) * pc.sa2 + (r / pc.ne2) * pc.sa3;
}

void kahan(inout float s, inout float c, float v) {
    precise float y = v - c;
    precise float t = s + y;
    c = (t - s) - y;
    s = t;
}

void main() {
    TSL_PROGRESS();
    const uint tid = gl_LocalInvocationID.x;
    const uint n = pc.ne0 * pc.ne1 * pc.ne2 * pc.ne3;
    /* four independent Kahan sums, so four loads are in flight at a time */
    float s[4] = float[4](0.0, 0.0, 0.0, 0.0), c[4] = float[4](0.0, 0.0, 0.0, 0.0);
    uint e = tid;
    for (; e + 3u * WG < n; e += 4u * WG) {
        float v[4];
        [[unroll]] for (uint k = 0u; k < 4u; k++) v[k] = a[elem(e + k * WG)];
        [[unroll]] for (uint k = 0u; k < 4u; k++) kahan(s[k], c[k], v[k]);
    }
    for (uint k = 0u; e < n; e += WG, k++) kahan(s[k], c[k], a[elem(e)]);
    precise float t = (s[0] + s[1]) + (s[2] + s[3]);
    red[tid] = t;
    barrier();
    [[unroll]] for (uint k = WG / 2u; k > 0u; k >>= 1) {
        if (tid < k) red[tid] += red[tid + k];
        barrier();
    }
    if (tid == 0u) d[pc.od] = red[0];
}
