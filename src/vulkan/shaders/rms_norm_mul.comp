#version 450
/*
 * rms_norm_mul.comp - mul(rms_norm(x), w) in one kernel, for the pair a
 * transformer puts before every matrix product: y = (x / sqrt(mean(x^2) +
 * eps)) * w, w one row broadcast over x's rows. The Vulkan backend fuses
 * the two nodes when nothing else reads the norm's output (vk_backend.c):
 * one dispatch and one barrier fewer, and the row read once.
 *
 * The same roundings as the two kernels apart: x * scale, then * w. One
 * workgroup of 512 per row: each invocation keeps its share of the row (up
 * to 8 values) in registers between the statistics and the write; the
 * shares meet in subgroupAdd and one shared-memory step. Rows longer than
 * 4096 read their tail again. In place is safe (every element is read
 * before the statistics' barrier, then written by the invocation that read
 * it).
 */
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

#define WG 512u
#define NV 8u
layout(local_size_x = 512) in;

layout(push_constant) uniform P {
    uint ne0, ne1, ne2, ne3;
    uint sa0, sa1, sa2, sa3;
    uint sd0, sd1, sd2, sd3;
    uint oa, od, ow, sw0;
    float eps;
} pc;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer W { float w[]; };
layout(binding = 3) writeonly buffer D { float d[]; };

shared float red[WG];

void main() {
    const uint row = wg_linear();
    if (row >= pc.ne1 * pc.ne2 * pc.ne3) return; /* uniform per workgroup */
    const uint tid = gl_LocalInvocationID.x;
    const uint i1 = row % pc.ne1, i2 = (row / pc.ne1) % pc.ne2, i3 = row / (pc.ne1 * pc.ne2);
    const uint xa = pc.oa + i1 * pc.sa1 + i2 * pc.sa2 + i3 * pc.sa3;
    const uint xd = pc.od + i1 * pc.sd1 + i2 * pc.sd2 + i3 * pc.sd3;

    /* the row and the weights it meets, loaded together: the weights' load
     * is not another round trip after the statistics */
    float v[NV], wv[NV];
    float s2 = 0.0;
    [[unroll]] for (uint j = 0u; j < NV; j++) {
        const uint i = tid + j * WG;
        v[j] = i < pc.ne0 ? a[xa + i * pc.sa0] : 0.0;
        wv[j] = i < pc.ne0 ? w[pc.ow + i * pc.sw0] : 0.0;
        s2 += v[j] * v[j];
    }
    for (uint i = tid + NV * WG; i < pc.ne0; i += WG) {
        const float x = a[xa + i * pc.sa0];
        s2 += x * x;
    }
    /* the row's sum: per subgroup, then over the subgroups */
    s2 = subgroupAdd(s2);
    if (subgroupElect()) red[gl_SubgroupID] = s2;
    barrier();
    if (tid == 0u) {
        float t = 0.0;
        for (uint g = 0u; g < gl_NumSubgroups; g++) t += red[g];
        red[WG - 1u] = t;
    }
    barrier();
    const float scale = inversesqrt(red[WG - 1u] / float(pc.ne0) + pc.eps);
    [[unroll]] for (uint j = 0u; j < NV; j++) {
        const uint i = tid + j * WG;
        if (i < pc.ne0) {
            precise const float y = v[j] * scale;
            d[xd + i * pc.sd0] = y * wv[j];
        }
    }
    for (uint i = tid + NV * WG; i < pc.ne0; i += WG) {
        precise const float y = a[xa + i * pc.sa0] * scale;
        d[xd + i * pc.sd0] = y * w[pc.ow + i * pc.sw0];
    }
}
