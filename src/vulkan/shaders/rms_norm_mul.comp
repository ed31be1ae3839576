#version 450
/*
 * rms_norm_mul.comp - mul(rms_norm(x), w) in one kernel, for the pair a
 * transformer puts before every matrix product: y = (x / sqrt(mean(x^2) +
 * eps)) * w, w one row broadcast over x's rows. The Vulkan backend fuses
 * the two nodes when nothing else reads the norm's output (vk_backend.c):
 * one dispatch and one barrier fewer, and the row read once.
 *
 * The same roundings as the two kernels apart: x * scale, then * w. One
 * workgroup of 512 per row: invocation t (counted along subgroup lanes)
 * keeps elements 8t .. 8t+7 in registers between the statistics and the
 * write (16-byte loads and stores where the row is dense and aligned), and
 * in the W8K variant (rms_norm_mul_w8k_f32) 4096 + 8t .. 4096 + 8t+7 too;
 * the shares meet in subgroupAdd and one shared-memory step. Rows longer
 * than the registers hold (4096, W8K 8192) read their tail again. In place
 * is safe (every element is read before the statistics' barrier, then
 * written by the invocation that read it). The backend takes W8K only for
 * the rows of 4096 .. 8192 it quantizes (Llama 3 70B's 8192): with a
 * second chunk in its registers a row of 4096 ran ~4.7 us slower on the
 * H200 (bench/RESULTS.md, run 148).
 *
 * With pc.qout set (one row of at most 4096 values, W8K 8192, a multiple of 32, read
 * next by integer-dot mat-vecs), the kernel also writes the row quantized
 * to Q8_0 into the mat-vec's column scratch (binding 2, from word pc.oq),
 * byte for byte what quant_q8.comp would make of it (q8.glsl): the
 * quantizer's dispatch, and the level it waits in, are saved. A block of
 * 32 is four neighbouring lanes' values, so its largest magnitude and the
 * sum of its quants come from two lane shuffles each: no shared memory, no
 * barrier (8.4 -> 7.9 us a row of 4096 on the H200, bench/RESULTS.md).
 */
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"
#include "q8.glsl"

#define WG 512u
#define NV 8u
#ifdef W8K
#define NC 2u /* chunks of NV * WG values in registers */
#else
#define NC 1u
#endif
layout(local_size_x = 512) in;

layout(push_constant) uniform P {
    uint ne0, ne1, ne2, ne3;
    uint sa0, sa1, sa2, sa3;
    uint sd0, sd1, sd2, sd3;
    uint oa, od, ow, sw0;
    float eps;
    uint qout, oq; /* qout 1: the row quantized to words oq.. of binding 2 too */
    uint sync;     /* nonzero: a word of binding 2 this workgroup counts itself into when done */
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(binding = 1) readonly buffer W { float w[]; };
layout(binding = 1) readonly buffer W4 { vec4 w4[]; };
layout(binding = 2) coherent writeonly buffer Q { uint qd[]; };
layout(binding = 2) coherent buffer QS { uint qsig[]; };
layout(binding = 3) writeonly buffer D { float d[]; };
layout(binding = 3) writeonly buffer D4 { vec4 d4[]; };

shared float red[WG];

void main() {
    TSL_PROGRESS();
    const uint row = wg_linear();
    if (row >= pc.ne1 * pc.ne2 * pc.ne3) return; /* uniform per workgroup */
    const uint tid = gl_LocalInvocationID.x;
    /* the element mapping follows subgroup lanes, so a block's four
     * invocations are neighbouring lanes of one subgroup whatever order
     * the device puts invocations into subgroups */
    const uint lane = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
    const uint i1 = row % pc.ne1, i2 = (row / pc.ne1) % pc.ne2, i3 = row / (pc.ne1 * pc.ne2);
    const uint xa = pc.oa + i1 * pc.sa1 + i2 * pc.sa2 + i3 * pc.sa3;
    const uint xd = pc.od + i1 * pc.sd1 + i2 * pc.sd2 + i3 * pc.sd3;

    /* the row and the weights it meets, loaded together: the weights' load
     * is not another round trip after the statistics */
    float v[NC][NV], wv[NC][NV];
    float s2 = 0.0;
    /* dense, 16-byte aligned rows (the usual case): two 16-byte loads per
     * invocation and chunk, neighbouring lanes reading neighbouring bytes */
    const bool vec = pc.sa0 == 1u && pc.sw0 == 1u && pc.sd0 == 1u && ((xa | xd | pc.ow) & 3u) == 0u;
    [[unroll]] for (uint c = 0u; c < NC; c++) {
        const uint e0 = c * NV * WG + lane * NV; /* the chunk's first element of this invocation */
        if (vec && e0 + NV <= pc.ne0) {
            [[unroll]] for (uint h = 0u; h < 2u; h++) {
                const vec4 x = a4[((xa + e0) >> 2) + h], y = w4[((pc.ow + e0) >> 2) + h];
                [[unroll]] for (uint e = 0u; e < 4u; e++) {
                    v[c][4u * h + e] = x[e];
                    wv[c][4u * h + e] = y[e];
                }
            }
        } else {
            [[unroll]] for (uint j = 0u; j < NV; j++) {
                const uint i = e0 + j;
                v[c][j] = i < pc.ne0 ? a[xa + i * pc.sa0] : 0.0;
                wv[c][j] = i < pc.ne0 ? w[pc.ow + i * pc.sw0] : 0.0;
            }
        }
        [[unroll]] for (uint j = 0u; j < NV; j++) s2 += v[c][j] * v[c][j];
    }
    for (uint i = tid + NC * NV * WG; i < pc.ne0; i += WG) {
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
    [[unroll]] for (uint c = 0u; c < NC; c++) {
        const uint e0 = c * NV * WG + lane * NV;
        float o[NV];
        [[unroll]] for (uint j = 0u; j < NV; j++) {
            precise const float y = v[c][j] * scale;
            precise const float p = y * wv[c][j];
            o[j] = p;
        }
        if (vec && e0 + NV <= pc.ne0) {
            d4[(xd + e0) >> 2] = vec4(o[0], o[1], o[2], o[3]);
            d4[((xd + e0) >> 2) + 1u] = vec4(o[4], o[5], o[6], o[7]);
        } else {
            [[unroll]] for (uint j = 0u; j < NV; j++)
                if (e0 + j < pc.ne0) d[xd + (e0 + j) * pc.sd0] = o[j];
        }
        if (pc.qout != 0u) {
            /* uniform: one row, ne0 <= NC * NV * WG and a multiple of 32
             * (the host checks), so a block is whole invocations tid - part
             * .. + 3 of one chunk; past the row its values are 0 and its
             * block is not stored */
            const uint nb = pc.ne0 / 32u, blk = e0 / 32u, part = lane % 4u;
            float m = 0.0;
            [[unroll]] for (uint j = 0u; j < NV; j++) m = max(m, abs(o[j]));
            m = max(m, subgroupShuffleXor(m, 1u));
            const float amax = max(m, subgroupShuffleXor(m, 2u));
            float dq, id;
            q8_scale(amax, dq, id);
            int s0, s1;
            const uint w0 = q8_word(vec4(o[0], o[1], o[2], o[3]), id, s0);
            const uint w1 = q8_word(vec4(o[4], o[5], o[6], o[7]), id, s1);
            int t = s0 + s1;
            t += subgroupShuffleXor(t, 1u);
            const int total = t + subgroupShuffleXor(t, 2u);
            if (blk < nb) {
                Q8_STORE_WORD(qd, pc.oq, nb, blk, 2u * part, w0);
                Q8_STORE_WORD(qd, pc.oq, nb, blk, 2u * part + 1u, w1);
                if (part == 0u) Q8_STORE_SCALE(qd, pc.oq, nb, blk, dq, total);
            }
        }
    }
    for (uint i = tid + NC * NV * WG; i < pc.ne0; i += WG) {
        precise const float y = a[xa + i * pc.sa0] * scale;
        d[xd + i * pc.sd0] = y * w[pc.ow + i * pc.sw0];
    }
    TSL_COUNT_IN(qsig, pc.sync) /* a product waiting for this row's column */
}
