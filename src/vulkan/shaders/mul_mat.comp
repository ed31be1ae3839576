#version 450
/*
 * mul_mat.comp - tiled matrix product d[m, n] = sum_k a[k, m] b[k, n] for
 * weights of any dtype.glsl type and F32 activations of any strides (F16
 * ones with B_F16).
 *
 * A workgroup of 256 invocations owns a 64 x 64 tile of d and walks K in
 * steps of 32 (one block of the block types): each step stages 64 weight rows
 * (dequantized to floats) and 64 activation columns in shared memory, then
 * every invocation accumulates a 4 x 4 patch, reading each staged value from
 * shared memory instead of device memory 64 times over. Edges are guarded
 * (zeros past K, no writes past M or N). Cooperative-matrix kernels for GPUs
 * that have them are a separate variant; this one runs everywhere.
 *
 * Grid: x tiles of M, y tiles of N, z batches (b's batch (i2, i3) reads a's
 * batch (i2 / r2, i3 / r3)).
 */
#include "common.glsl"
#include "dtype.glsl"

#define BM 64u
#define BN 64u
#define BK 32u
layout(local_size_x = 256) in;

layout(push_constant) uniform P {
    uint M, N, K;
    uint sa1, sa2, sa3;
    uint sb0, sb1, sb2, sb3;
    uint sd1, sd2, sd3;
    uint r2, r3, B2;
    uint oa, ob, od;
    uint flags;               /* 512: Q4_0 weights in the split layout (q4s.glsl) */
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

#if defined(B_F16)
layout(binding = 1) readonly buffer Bv { float16_t b[]; }; /* F16 activations, with F16 weights */
#else
layout(binding = 1) readonly buffer Bv { float b[]; };
#endif
layout(binding = 3) writeonly buffer D { float d[]; };

shared float As[BK][BM + 1u];
shared float Bs[BK][BN + 1u];

void main() {
#if defined(A_Q4_0)
    a_q4s = (pc.flags & 512u) != 0u;
#endif
    TSL_PROGRESS();
    const uint tid = gl_LocalInvocationID.x;
    const uint m0 = gl_WorkGroupID.x * BM, n0 = gl_WorkGroupID.y * BN;
    const uint i2 = gl_WorkGroupID.z % pc.B2, i3 = gl_WorkGroupID.z / pc.B2;
    const uint abase = pc.oa + (i2 / pc.r2) * pc.sa2 + (i3 / pc.r3) * pc.sa3;
    const uint bbase = pc.ob + i2 * pc.sb2 + i3 * pc.sb3;

    /* staging: invocation t loads 8 consecutive k of row/column t / 4 */
    const uint lr = tid / 4u, lk = (tid % 4u) * 8u;
    const uint arow = min(m0 + lr, pc.M - 1u);
    const bool bcol_ok = n0 + lr < pc.N;
    const uint bcol = bbase + min(n0 + lr, pc.N - 1u) * pc.sb1;

    const uint tx = tid % 16u, ty = tid / 16u;
    float acc[4][4];
    [[unroll]] for (uint i = 0u; i < 4u; i++)
        [[unroll]] for (uint j = 0u; j < 4u; j++) acc[i][j] = 0.0;

    for (uint k0 = 0u; k0 < pc.K; k0 += BK) {
#if !defined(A_QUANT)
        [[unroll]] for (uint j = 0u; j < 8u; j++) {
            uint k = k0 + lk + j;
            As[lk + j][lr] = k < pc.K ? a_elem(abase + arow * pc.sa1, k) : 0.0;
        }
#else
        {
            uint w = abase + arow * pc.sa1 + (k0 / 32u) * A_BLOCK_WORDS;
            float sc = a_block_scale(w);
            [[unroll]] for (uint j = 0u; j < 8u; j++) As[lk + j][lr] = sc * a_block_q(w, lk + j);
        }
#endif
        [[unroll]] for (uint j = 0u; j < 8u; j++) {
            uint k = k0 + lk + j;
            Bs[lk + j][lr] = (k < pc.K && bcol_ok) ? float(b[bcol + k * pc.sb0]) : 0.0;
        }
        barrier();
        for (uint k = 0u; k < BK; k++) {
            float av[4], bv[4];
            [[unroll]] for (uint i = 0u; i < 4u; i++) av[i] = As[k][tx + 16u * i];
            [[unroll]] for (uint j = 0u; j < 4u; j++) bv[j] = Bs[k][ty + 16u * j];
            [[unroll]] for (uint i = 0u; i < 4u; i++)
                [[unroll]] for (uint j = 0u; j < 4u; j++) acc[i][j] += av[i] * bv[j];
        }
        barrier();
    }

    [[unroll]] for (uint j = 0u; j < 4u; j++) {
        uint n = n0 + ty + 16u * j;
        if (n >= pc.N) continue;
        [[unroll]] for (uint i = 0u; i < 4u; i++) {
            uint m = m0 + tx + 16u * i;
            if (m < pc.M) d[pc.od + m + n * pc.sd1 + i2 * pc.sd2 + i3 * pc.sd3] = acc[i][j];
        }
    }
}
