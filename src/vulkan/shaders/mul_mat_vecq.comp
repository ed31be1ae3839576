#version 450
/*
 * mul_mat_vecq.comp - Q8_0 / Q4_0 weights times one F32 column (decode)
 * with integer dot products: d[m] = sum_k a[k, m] b[k].
 *
 * Why a second mat-vec kernel for block formats. A Q4_0 weight is 0.5625
 * bytes; its F32 activation 4. Read straight from the activation vector,
 * the activations are 7x the weight bytes a row streams, all through the
 * first-level cache, and unpacking each quant to a float costs 3-4
 * instructions: on a GPU whose memory outruns its arithmetic (the H200:
 * 4.8 TB/s against 67 TFLOP/s of FP32) the kernel is bound by those, not by
 * memory. Here, as on the CPU (and in ggml), the column comes quantized to
 * Q8_0 (quant_q8.comp, dispatched before this kernel: binding 2), 1 byte
 * per activation, staged in shared memory for the rows of the whole
 * workgroup. A 32-bit word of weight quants then takes one 4x8-bit signed
 * dot product (Q4_0: two, after two masks), and each block one conversion
 * and one multiply-add: d_w * d_b * sum(q_w q_b), exact integer sums, the
 * CPU's arithmetic. Q4_0's offset 8 is taken out per block with the sum of
 * the activation quants: sum((q - 8) b) = sum(q b) - 8 sum(b).
 *
 * Layout of the work:
 *  - the weights of the first steps are requested, then the workgroup
 *    copies the quantized column into shared memory;
 *  - a workgroup of W invocations is S teams of T = W / S lanes; a team
 *    owns R consecutive rows; a block is split between LPB lanes (spec
 *    constant 3), each reading QB = 16 (Q4_0) or 32 (Q8_0) / LPB quant
 *    bytes as 32-bit words. Blocks are 18 or 34 bytes, so a lane's bytes
 *    start on a 2-byte boundary: it loads one word more and takes the
 *    middle when they straddle. Consecutive lanes read consecutive bytes.
 *  - the team's sums meet in subgroupAdd when a team is one subgroup, else
 *    through shared memory.
 *
 * Spec constants: W (local_size_x_id 0), S (1), R (2), LPB (3), U steps
 * loaded ahead (4), KB the most blocks per row the shared quantized column
 * holds (5; the host checks K / 32 <= KB; with bit 16 set, the column is
 * not staged: each lane reads its activations from binding 2 through the
 * caches, and K is not bounded).
 *
 * Needs VK_KHR_shader_integer_dot_product (OpSDot, declared below through
 * GL_EXT_spirv_intrinsics: the GLSL compilers of Debian 12 predate
 * GL_EXT_integer_dot_product). The host uses the kernel only where the
 * device has the feature.
 */
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_spirv_intrinsics : require
#include "common.glsl"

/* OpSDot (4450) on two 32-bit words read as 4 signed bytes (packed format 0) */
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4(int a, int b, spirv_literal int packed_format);
#define DOT4(x, y) sdot4(int(x), int(y), 0)

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint S = 4u;
layout(constant_id = 2) const uint R = 2u;
layout(constant_id = 3) const uint LPB = 1u;
layout(constant_id = 4) const uint U = 4u;
layout(constant_id = 5) const uint KBF = 512u;
const uint KB = (KBF >> 16) != 0u ? 0u : KBF; /* KBF bit 16: no staging (KB 0) */

const uint W = gl_WorkGroupSize.x;
const uint T = W / S;

layout(push_constant) uniform P {
    uint M, N, K;
    uint sa1, sa2, sa3;       /* 16-bit words */
    uint sb0, sb1, sb2, sb3;
    uint sd1, sd2, sd3;
    uint r2, r3, B2;
    uint oa, ob, od;
    uint flags;               /* 64: add the residual (binding 1) to each result */
    uint oq, cq;              /* the quantized column (binding 2): first word, words per batch (multiples of 4) */
    uint ores;                /* the residual's first element; its strides are the result's */
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

#if defined(A_Q8_0)
#define BW 17u  /* 16-bit words per block, the scale first */
#define QBB 32u /* quant bytes per block */
#elif defined(A_Q4_0)
#define BW 9u
#define QBB 16u
#else
#error "mul_mat_vecq.comp: define A_Q8_0 or A_Q4_0"
#endif
const uint QB = QBB / LPB; /* quant bytes per lane */
const uint QW = QB / 4u;   /* ... as words */

layout(binding = 0) readonly restrict buffer A1 { uint16_t a1[]; };
layout(binding = 0) readonly restrict buffer A2 { uint a2[]; };
layout(binding = 2) readonly restrict buffer Q1 { uint q1[]; };
layout(binding = 2) readonly restrict buffer Q4 { uvec4 q4[]; };
layout(binding = 2) readonly restrict buffer Q2 { uvec2 q2[]; };
layout(binding = 1) readonly buffer RES { float res[]; };
layout(binding = 3) writeonly buffer D { float d[]; };

/* Result v of row m, batch (i2, i3), stored: plus the residual when the
 * backend fused add(residual, this product) into the kernel (flags 64). In
 * place over the residual is safe: one invocation reads and writes each
 * element. */
void store(uint m, uint i2, uint i3, float v) {
    const uint o = m + i2 * pc.sd2 + i3 * pc.sd3;
    d[pc.od + o] = (pc.flags & 64u) != 0u ? res[pc.ores + o] + v : v;
}

/* the quantized column: block b's activations 0..15 at qs[2b], qs[2b+1]
 * (8 bytes each), 16..31 at qs[2 (KB + b)], ...; its scale (F16-rounded)
 * and the sum of its quants in qd[b] */
const uint KBS = KB == 0u ? 1u : KB; /* KB 0: no staging, the column read where it is */
shared uvec2 qs[4u * KBS];
shared vec2 qd[KBS];
shared float red[W * R];

/* The quantized column into shared memory: 16-byte copies */
void stage_column(uint nb, uint z) {
    const uint base = (pc.oq >> 2) + z * (pc.cq >> 2); /* uvec4 units */
    for (uint u = gl_LocalInvocationID.x; u < 2u * nb; u += W) {
        const uvec4 v = q4[base + u];
        const uint half_ = u / nb, b = u % nb;
        qs[2u * (half_ * KB + b)] = v.xy;
        qs[2u * (half_ * KB + b) + 1u] = v.zw;
    }
    for (uint b = gl_LocalInvocationID.x; b < nb; b += W)
        qd[b] = uintBitsToFloat(uvec2(q1[pc.oq + z * pc.cq + 8u * nb + 2u * b], q1[pc.oq + z * pc.cq + 8u * nb + 2u * b + 1u]));
}

/* 8 bytes s (0, 1) of half h (activations 0..15, 16..31) of block b of
 * the quantized column, and the block's scale and quant sum: from shared
 * memory, or (KB 0) from the column itself, whose base cb2 is in 8-byte
 * units */
uvec2 act(uint cb2, uint nb, uint h, uint b, uint s) {
    return KB == 0u ? q2[cb2 + 2u * (h * nb + b) + s] : qs[2u * (h * KBS + b) + s];
}
vec2 act_scale(uint cb2, uint nb, uint b) {
    return KB == 0u ? uintBitsToFloat(q2[cb2 + 4u * nb + b]) : qd[b];
}

/* Word i of the quants a lane reads, from the 32-bit words w it loaded: the
 * middle of two when its bytes start on an odd 16-bit word */
#define QUANT_WORD(w, i, odd) ((odd) ? ((w)[i] >> 16) | ((w)[(i) + 1u] << 16) : (w)[i])

void main() {
    TSL_PROGRESS();
    const uint wg = wg_linear();
    const uint nb = pc.K / 32u;
    /* a padding group of the folded grid: uniform, and before any barrier */
    if (wg * S * R >= pc.M) return;

    uint team, lane;
    if (T == gl_SubgroupSize) {
        team = gl_SubgroupID;
        lane = gl_SubgroupInvocationID;
    } else if (T > gl_SubgroupSize && T % gl_SubgroupSize == 0u) {
        const uint per = T / gl_SubgroupSize;
        team = gl_SubgroupID / per;
        lane = (gl_SubgroupID % per) * gl_SubgroupSize + gl_SubgroupInvocationID;
    } else {
        team = gl_LocalInvocationID.x / T;
        lane = gl_LocalInvocationID.x % T;
    }

    const uint row0 = (wg * S + team) * R;
    const uint i2 = gl_WorkGroupID.z % pc.B2, i3 = gl_WorkGroupID.z / pc.B2;
    const uint abase = pc.oa + (i2 / pc.r2) * pc.sa2 + (i3 / pc.r3) * pc.sa3;

    uint arow[R];
    [[unroll]] for (uint r = 0u; r < R; r++) arow[r] = abase + min(row0 + r, pc.M - 1u) * pc.sa1;

    /* lane: bytes lp * QB .. of block lb of each step; a step is bps blocks */
    const uint bps = T / LPB, lb = lane / LPB, lp = lane % LPB;
    const uint qoff = 1u + lp * (QB / 2u); /* 16-bit words from the block's start */
    const uint nsteps = (nb + bps - 1u) / bps;

    /* the weights of the first U steps are requested before the column is
     * quantized, so the stream starts while phase 1 runs */
    uint w[U][R][QW + 1u];
    uint sc[U][R];
    [[unroll]] for (uint j = 0u; j < U; j++) {
        const uint blk = j * bps + lb;
        [[unroll]] for (uint r = 0u; r < R; r++) {
            const uint h = arow[r] + min(blk, nb - 1u) * BW;
            const uint hq = h + qoff;
            [[unroll]] for (uint i = 0u; i < QW; i++) w[j][r][i] = a2[(hq >> 1) + i];
            w[j][r][QW] = (hq & 1u) != 0u ? a2[(hq >> 1) + QW] : 0u;
            sc[j][r] = uint(a1[h]);
        }
    }

    const uint cb2 = (pc.oq + gl_WorkGroupID.z * pc.cq) >> 1;
    if (KB != 0u) {
        stage_column(nb, gl_WorkGroupID.z);
        barrier();
    }

    float acc[R];
    [[unroll]] for (uint r = 0u; r < R; r++) acc[r] = 0.0;

    for (uint s = 0u; s < nsteps; s += U) {
        [[unroll]] for (uint j = 0u; j < U; j++) {
            const uint blk = (s + j) * bps + lb;
            if (blk < nb) {
                /* this lane's activation quants: Q8_0 bytes lp*QB.. of the
                 * block; Q4_0 the low (elements lp*QB..) and high (+16) ones */
#if defined(A_Q8_0)
                const uint half_ = (lp * QB) / 16u, o8 = ((lp * QB) % 16u) / 8u;
                uvec2 xa[(QW + 1u) / 2u];
                [[unroll]] for (uint i = 0u; i < (QW + 1u) / 2u; i++) xa[i] = act(cb2, nb, half_, blk, o8 + i);
#else
                const uint o8 = (lp * QB) / 8u;
                uvec2 xl[(QW + 1u) / 2u], xh[(QW + 1u) / 2u];
                [[unroll]] for (uint i = 0u; i < (QW + 1u) / 2u; i++) {
                    xl[i] = act(cb2, nb, 0u, blk, o8 + i);
                    xh[i] = act(cb2, nb, 1u, blk, o8 + i);
                }
#endif
                const vec2 qb = act_scale(cb2, nb, blk);
                [[unroll]] for (uint r = 0u; r < R; r++) {
                    const bool odd = ((arow[r] + blk * BW + qoff) & 1u) != 0u;
                    int isum = 0;
                    [[unroll]] for (uint i = 0u; i < QW; i++) {
                        const uint q = QUANT_WORD(w[j][r], i, odd);
#if defined(A_Q8_0)
                        isum += DOT4(q, (i & 1u) != 0u ? xa[i >> 1].y : xa[i >> 1].x);
#else
                        const uint lo = (i & 1u) != 0u ? xl[i >> 1].y : xl[i >> 1].x;
                        const uint hi = (i & 1u) != 0u ? xh[i >> 1].y : xh[i >> 1].x;
                        isum += DOT4(q & 0x0f0f0f0fu, lo) + DOT4((q >> 4) & 0x0f0f0f0fu, hi);
#endif
                    }
#if defined(A_Q4_0)
                    /* the offset 8, once per block */
                    float f = float(isum);
                    if (lp == 0u) f -= 8.0 * qb.y;
#else
                    const float f = float(isum);
#endif
                    acc[r] += f * (unpackHalf2x16(sc[j][r]).x * qb.x);
                }
            }
        }
        /* the next U steps */
        if (s + U < nsteps) {
            [[unroll]] for (uint j = 0u; j < U; j++) {
                const uint blk = (s + U + j) * bps + lb;
                [[unroll]] for (uint r = 0u; r < R; r++) {
                    const uint h = arow[r] + min(blk, nb - 1u) * BW;
                    const uint hq = h + qoff;
                    [[unroll]] for (uint i = 0u; i < QW; i++) w[j][r][i] = a2[(hq >> 1) + i];
                    w[j][r][QW] = (hq & 1u) != 0u ? a2[(hq >> 1) + QW] : 0u;
                    sc[j][r] = uint(a1[h]);
                }
            }
        }
    }

    /* the team's sums */
    if (T == gl_SubgroupSize) {
        [[unroll]] for (uint r = 0u; r < R; r++) {
            const float v = subgroupAdd(acc[r]);
            if (lane == r && row0 + r < pc.M) store(row0 + r, i2, i3, v);
        }
        return;
    }
    uint parts;
    if (T > gl_SubgroupSize && T % gl_SubgroupSize == 0u) {
        parts = T / gl_SubgroupSize;
        const uint part = lane / gl_SubgroupSize;
        [[unroll]] for (uint r = 0u; r < R; r++) {
            const float v = subgroupAdd(acc[r]);
            if (subgroupElect()) red[(team * R + r) * parts + part] = v;
        }
    } else {
        parts = T;
        [[unroll]] for (uint r = 0u; r < R; r++) red[(team * R + r) * parts + lane] = acc[r];
    }
    barrier();
    if (lane < R) {
        float v = 0.0;
        for (uint i = 0u; i < parts; i++) v += red[(team * R + lane) * parts + i];
        if (row0 + lane < pc.M) store(row0 + lane, i2, i3, v);
    }
}
