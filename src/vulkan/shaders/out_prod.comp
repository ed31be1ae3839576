#version 450
/*
 * out_prod.comp - OUT_PROD, the backward op of mul_mat:
 * a [M, K, A2, A3] (A_F32, A_F16, A_BF16, A_Q8_0, A_Q4_0; dtype.glsl),
 * b [N, K, B2, B3] F32 -> dst [M, N, B2, B3] F32 (dense rows),
 * dst[m, n] = sum_k a[m, k] b[n, k], b's batch (i2, i3) using a's batch
 * (i2 / (B2/A2), i3 / (B3/A3)) as mul_mat does.
 *
 * A block-format a is stored in blocks along m (its rows are the k's), so
 * each element is decoded where it is loaded; plain types may have any
 * element stride (a transposed view). b any strides.
 *
 * Tiled: a workgroup of 16 x 16 invocations computes a 64 x 64 tile of dst,
 * each invocation 4 x 4 values (m = tx + 16 i, n = ty + 16 j, so the tile
 * loads are coalesced along m and n), stepping K by 16 through shared
 * memory. Accumulation is in F32 in k order, as a GEMM does.
 */
#include "common.glsl"
#include "dtype.glsl"

layout(local_size_x = 16, local_size_y = 16) in;

layout(push_constant) uniform P {
    uint M, N, K;
    uint sa0, sa1, sa2, sa3; /* a's strides: elements, or 16-bit words (sa0 unused) for blocks */
    uint sb0, sb1, sb2, sb3;
    uint sd1, sd2, sd3;
    uint r2, r3, B2;         /* B2/A2, B3/A3, B2 */
    uint oa, ob, od;
    uint flags;              /* 1: Q4_0 weights in the split layout (q4s.glsl) */
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

layout(binding = 1) readonly buffer B { float b[]; };
layout(binding = 3) writeonly buffer D { float d[]; };

#define TM 64u
#define TN 64u
#define TK 16u
shared float As[TK][TM];
shared float Bs[TK][TN];

float load_a(uint m, uint k, uint abase) {
#if defined(A_QUANT)
    return a_elem(abase + k * pc.sa1, m);
#else
    return a_at(abase + m * pc.sa0 + k * pc.sa1);
#endif
}

void main() {
#if defined(A_Q4_0)
    a_q4s = (pc.flags & 1u) != 0u;
#endif
    TSL_PROGRESS();
    const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
    const uint tid = ty * 16u + tx;
    const uint m0 = gl_WorkGroupID.x * TM, n0 = gl_WorkGroupID.y * TN;
    const uint z = gl_WorkGroupID.z, i2 = z % pc.B2, i3 = z / pc.B2;
    const uint abase = pc.oa + (i2 / pc.r2) * pc.sa2 + (i3 / pc.r3) * pc.sa3;
    const uint bbase = pc.ob + i2 * pc.sb2 + i3 * pc.sb3;

    float acc[4][4];
    [[unroll]] for (uint i = 0u; i < 4u; i++)
        [[unroll]] for (uint j = 0u; j < 4u; j++) acc[i][j] = 0.0;

    for (uint k0 = 0u; k0 < pc.K; k0 += TK) {
        [[unroll]] for (uint q = 0u; q < 4u; q++) {
            const uint l = tid + 256u * q, kk = l / TM, mm = l % TM;
            const uint m = m0 + mm, k = k0 + kk;
            As[kk][mm] = m < pc.M && k < pc.K ? load_a(m, k, abase) : 0.0;
            const uint n = n0 + mm;
            Bs[kk][mm] = n < pc.N && k < pc.K ? b[bbase + n * pc.sb0 + k * pc.sb1] : 0.0;
        }
        barrier();
        [[unroll]] for (uint kk = 0u; kk < TK; kk++) {
            float av[4], bv[4];
            [[unroll]] for (uint i = 0u; i < 4u; i++) av[i] = As[kk][tx + 16u * i];
            [[unroll]] for (uint j = 0u; j < 4u; j++) bv[j] = Bs[kk][ty + 16u * j];
            [[unroll]] for (uint i = 0u; i < 4u; i++)
                [[unroll]] for (uint j = 0u; j < 4u; j++) acc[i][j] += av[i] * bv[j];
        }
        barrier();
    }
    const uint dbase = pc.od + i2 * pc.sd2 + i3 * pc.sd3;
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
        const uint n = n0 + ty + 16u * j;
        if (n >= pc.N) continue;
        [[unroll]] for (uint i = 0u; i < 4u; i++) {
            const uint m = m0 + tx + 16u * i;
            if (m < pc.M) d[dbase + m + n * pc.sd1] = acc[i][j];
        }
    }
}
