#version 450
/*
 * quant_q8.comp - the column of an integer-dot mat-vec (mul_mat_vecq.comp)
 * quantized to Q8_0, once per column and not once per workgroup: a
 * workgroup that quantized the whole column for its few rows spent more
 * than its share of the weights' stream on it (measured on the H200: the
 * quantization alone took as long as the products).
 *
 * The arithmetic, exactly tsl_quantize's, and the column's layout are in
 * q8.glsl. Eight invocations share a block, four activations each; each
 * column (batch z) goes to word pc.od + z * pc.cw of binding 3.
 */
#include "common.glsl"
#include "q8.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform P {
    uint K;
    uint sb0, sb2, sb3; /* element strides of the column: k, and the batches */
    uint B2;            /* batches along dim 2 */
    uint ob, od;        /* first activation; first output word */
    uint cw;            /* words per column */
    uint flags;         /* 2: the column dense and 16-byte aligned */
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

layout(binding = 1) readonly restrict buffer B1 { float b1[]; };
layout(binding = 1) readonly restrict buffer B4 { vec4 b4[]; };
layout(binding = 3) writeonly restrict buffer D { uint d[]; };

shared float smax[64];
shared int ssum[64];

void main() {
    TSL_PROGRESS();
    const uint nb = pc.K / 32u;
    const uint lid = gl_LocalInvocationID.x, part = lid % 8u;
    const uint blk = wg_linear() * 8u + lid / 8u;
    const uint i2 = gl_WorkGroupID.z % pc.B2, i3 = gl_WorkGroupID.z / pc.B2;
    const uint cb = pc.ob + i2 * pc.sb2 + i3 * pc.sb3;
    const bool live = blk < nb;

    vec4 x = vec4(0.0);
    if (live) {
        const uint k = blk * 32u + part * 4u;
        if ((pc.flags & 2u) != 0u) {
            x = b4[(cb + k) >> 2];
        } else {
            x = vec4(b1[cb + k * pc.sb0], b1[cb + (k + 1u) * pc.sb0], b1[cb + (k + 2u) * pc.sb0],
                     b1[cb + (k + 3u) * pc.sb0]);
        }
    }
    smax[lid] = max(max(abs(x.x), abs(x.y)), max(abs(x.z), abs(x.w)));
    barrier();
    float amax = 0.0;
    [[unroll]] for (uint i = 0u; i < 8u; i++) amax = max(amax, smax[lid - part + i]);
    float dq, id;
    q8_scale(amax, dq, id);
    int sum;
    const uint word = q8_word(x, id, sum);
    ssum[lid] = sum;
    barrier();
    if (!live) return;
    const uint base = pc.od + gl_WorkGroupID.z * pc.cw;
    Q8_STORE(d, base, nb, blk, part, word, dq, ssum, lid)
}
