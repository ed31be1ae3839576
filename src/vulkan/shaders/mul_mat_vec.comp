#version 450
/*
 * mul_mat_vec.comp - matrix times one column: d[m] = sum_k a[k, m] b[k] for
 * weights of any dtype.glsl type and F32 activations, one workgroup per
 * MV_ROWS weight rows (grid: x and y fold the row groups, z batches).
 *
 * Reading the weights is the whole cost, so every invocation streams a
 * different stretch of the rows (whole blocks for block types, with the
 * block's scale applied once per block) and the partial sums meet in a
 * subgroup reduction, then across subgroups in shared memory. Devices without
 * subgroup arithmetic use the tiled kernel for N == 1 instead.
 *
 * Batches broadcast as mul_mat does: b's batch (i2, i3) reads a's batch
 * (i2 / r2, i3 / r3).
 */
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "dtype.glsl"

#define MV_WG 64u
#define MV_ROWS 2u
layout(local_size_x = 64) in;

layout(push_constant) uniform P {
    uint M, N, K; /* N == 1 */
    uint sa1, sa2, sa3;       /* words for block types, else elements */
    uint sb0, sb1, sb2, sb3;
    uint sd1, sd2, sd3;
    uint r2, r3, B2;
    uint oa, ob, od;
} pc;

layout(binding = 1) readonly buffer Bv { float b[]; };
layout(binding = 3) writeonly buffer D { float d[]; };

shared float red[MV_ROWS][MV_WG];

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint row0 = wg_linear() * MV_ROWS;
    if (row0 >= pc.M) return; /* a padding group of the folded grid: uniform */
    const uint col = 0u;
    const uint i2 = gl_WorkGroupID.z % pc.B2, i3 = gl_WorkGroupID.z / pc.B2;
    const uint abase = pc.oa + (i2 / pc.r2) * pc.sa2 + (i3 / pc.r3) * pc.sa3;
    const uint bbase = pc.ob + col * pc.sb1 + i2 * pc.sb2 + i3 * pc.sb3;

    float acc[MV_ROWS];
    [[unroll]] for (uint r = 0u; r < MV_ROWS; r++) acc[r] = 0.0;

#if !defined(A_QUANT)
    for (uint k = tid; k < pc.K; k += MV_WG) {
        float bv = b[bbase + k * pc.sb0];
        [[unroll]] for (uint r = 0u; r < MV_ROWS; r++) {
            uint row = min(row0 + r, pc.M - 1u);
            acc[r] += a_elem(abase + row * pc.sa1, k) * bv;
        }
    }
#else
    const uint nblk = pc.K / 32u;
    for (uint blk = tid; blk < nblk; blk += MV_WG) {
        float bv[32];
        [[unroll]] for (uint j = 0u; j < 32u; j++) bv[j] = b[bbase + (blk * 32u + j) * pc.sb0];
        [[unroll]] for (uint r = 0u; r < MV_ROWS; r++) {
            uint row = min(row0 + r, pc.M - 1u);
            uint w = abase + row * pc.sa1 + blk * A_BLOCK_WORDS;
            float s = 0.0;
            [[unroll]] for (uint j = 0u; j < 32u; j++) s += a_block_q(w, j) * bv[j];
            acc[r] += s * a_block_scale(w);
        }
    }
#endif

    [[unroll]] for (uint r = 0u; r < MV_ROWS; r++) {
        float s = subgroupAdd(acc[r]);
        if (subgroupElect()) red[r][gl_SubgroupID] = s;
    }
    barrier();
    if (tid < MV_ROWS) {
        uint row = row0 + tid;
        if (row < pc.M) {
            float s = 0.0;
            for (uint g = 0u; g < gl_NumSubgroups; g++) s += red[tid][g];
            d[pc.od + row + col * pc.sd1 + i2 * pc.sd2 + i3 * pc.sd3] = s;
        }
    }
}
