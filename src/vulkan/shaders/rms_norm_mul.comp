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
 *
 * With pc.qout set (one row of at most 4096 values, a multiple of 32, read
 * next by integer-dot mat-vecs), the kernel also writes the row quantized
 * to Q8_0 into the mat-vec's column scratch (binding 2, from word pc.oq),
 * byte for byte what quant_q8.comp would make of it (q8.glsl): the
 * quantizer's dispatch, and the level it waits in, are saved.
 */
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "q8.glsl"

#define WG 512u
#define NV 8u
layout(local_size_x = 512) in;

layout(push_constant) uniform P {
    uint ne0, ne1, ne2, ne3;
    uint sa0, sa1, sa2, sa3;
    uint sd0, sd1, sd2, sd3;
    uint oa, od, ow, sw0;
    float eps;
    uint qout, oq; /* qout 1: the row quantized to words oq.. of binding 2 too */
} pc;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer W { float w[]; };
layout(binding = 2) writeonly buffer Q { uint qd[]; };
layout(binding = 3) writeonly buffer D { float d[]; };

shared float red[WG];
shared int ssum[WG];
shared float ys[NV * WG]; /* qout: the row written, for its quantization */

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
            precise const float o = y * wv[j];
            d[xd + i * pc.sd0] = o;
            if (pc.qout != 0u) ys[i] = o;
        }
    }
    if (pc.qout != 0u) {
        /* uniform: one row, ne0 <= NV * WG and a multiple of 32 (the host
         * checks). Eight invocations a block, four values each, as in
         * quant_q8.comp. */
        barrier();
        const uint nb = pc.ne0 / 32u, part = tid % 8u;
        for (uint b0 = 0u; b0 < nb; b0 += WG / 8u) {
            const uint blk = b0 + tid / 8u;
            const bool live = blk < nb;
            vec4 x = vec4(0.0);
            if (live) {
                const uint k = blk * 32u + part * 4u;
                x = vec4(ys[k], ys[k + 1u], ys[k + 2u], ys[k + 3u]);
            }
            red[tid] = max(max(abs(x.x), abs(x.y)), max(abs(x.z), abs(x.w)));
            barrier();
            float amax = 0.0;
            [[unroll]] for (uint i = 0u; i < 8u; i++) amax = max(amax, red[tid - part + i]);
            float dq, id;
            q8_scale(amax, dq, id);
            int sum;
            const uint word = q8_word(x, id, sum);
            ssum[tid] = sum;
            barrier();
            if (live) Q8_STORE(qd, pc.oq, nb, blk, part, word, dq, ssum, tid)
            barrier(); /* red and ssum are used again by the next blocks */
        }
    }
    for (uint i = tid + NV * WG; i < pc.ne0; i += WG) {
        precise const float y = a[xa + i * pc.sa0] * scale;
        d[xd + i * pc.sd0] = y * w[pc.ow + i * pc.sw0];
    }
}
