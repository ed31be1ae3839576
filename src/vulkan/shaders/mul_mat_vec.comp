#version 450
/*
 * mul_mat_vec.comp - weights times one column (NC == 1) or a few columns
 * (NC == 8, any N <= 8): d[m, n] = sum_k a[k, m] b[k, n], for weights of
 * one of A_F32, A_F16, A_BF16, A_Q8_0, A_Q4_0 and F32 activations (F16 ones
 * with B_F16).
 *
 * Decode is bound by the weight stream alone, so the kernel is shaped
 * around reading it at the memory's full rate:
 *
 *  - A workgroup of W invocations is S teams of T = W / S lanes; a team owns
 *    R consecutive rows and streams them with all its lanes, each lane
 *    keeping R (x NC) partial sums. With T equal to the subgroup size (32 on
 *    NVIDIA) the team is one subgroup and its sums meet in subgroupAdd alone:
 *    no shared memory, no barrier. Other shapes reduce through shared memory.
 *    W (local_size_x_id 0), S (1) and R (2) are specialization constants,
 *    like Q and U below, so one SPIR-V serves every variant a device is
 *    tuned with (vk_kernels_mm.h lists them).
 *  - Plain types read 16 bytes per lane (8 halves or 4 floats) from rows
 *    consecutive lanes read consecutively (flags bit 0, when the host saw
 *    every row 16-byte aligned); activations likewise (bit 1). Otherwise
 *    the same loop reads element by element.
 *  - Block types (Q8_0: 34-byte blocks, Q4_0: 18-byte) are 17 or 9 16-bit
 *    words with the scale first: no wide load lines up with them. A lane
 *    reads Q consecutive quant words of one block (Q a specialization
 *    constant, id 3) and the block's scale, consecutive lanes the next
 *    words, so a team's loads cover whole blocks back to back, the scale is
 *    applied once per Q words, and the activations those quants multiply
 *    are consecutive too (16-byte loads for even Q).
 *  - Quants become floats without the slow integer-to-float conversion: the
 *    bits are OR-ed into the mantissa of 2^23, whose value is then exactly
 *    2^23 + q * 2^s (s the bit position), and subtracting 2^23 + offset *
 *    2^s leaves (q - offset) * 2^s exactly; the 2^-s goes into the
 *    activation, which is loaded once per step and shared by the R rows.
 *  - U steps (id 4) are loaded before any arithmetic so that enough bytes
 *    are in flight per lane; the loop over the last partial steps is
 *    separate so the main one carries no guards. Teams wider than a
 *    subgroup split each row's K between subgroups: more bytes in flight
 *    per row where there are few rows.
 *
 * With STAGED (block types) the kernel first tries the staged
 * decode of mv_staged.glsl, which reads the weights with 16-byte loads
 * whatever the block alignment; the team kernel here serves the rows the
 * host found not aligned for it (flags 8/16/32 clear).
 *
 * Grid: x and y fold the row groups (S * R rows each; W / KS for the staged
 * kernel), z the batches (b's batch (i2, i3) reads a's batch (i2 / r2,
 * i3 / r3)).
 */
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"

#ifndef NC
#define NC 1
#endif

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint S = 4u;
layout(constant_id = 2) const uint R = 2u;
layout(constant_id = 3) const uint Q = 2u; /* block types: quant words per lane (1, 2 or 4) */
/* steps loaded ahead per lane: bytes in flight are what bound a stream */
#if NC > 1
layout(constant_id = 4) const uint U = 2u;
#elif defined(A_Q8_0) || defined(A_Q4_0)
layout(constant_id = 4) const uint U = 8u;
#else
layout(constant_id = 4) const uint U = 4u;
#endif

const uint W = gl_WorkGroupSize.x;
const uint T = W / S;

layout(push_constant) uniform P {
    uint M, N, K;
    uint sa1, sa2, sa3;       /* words for block types, else elements */
    uint sb0, sb1, sb2, sb3;
    uint sd1, sd2, sd3;
    uint r2, r3, B2;
    uint oa, ob, od;
    uint flags;               /* 1: a rows 16-byte aligned; 2: b dense and 16-byte aligned;
                                 8, 16, 32: block rows whole 16-, 8-, 4-byte units (STAGED);
                                 512: Q4_0 weights in the split layout (q4s.glsl) */
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

#if defined(A_F32)
layout(binding = 0) readonly restrict buffer A1 { float a1[]; };
layout(binding = 0) readonly restrict buffer A4 { vec4 a4[]; };
#define A_UNIT 4u
#define A_AT(i) a1[i]
#elif defined(A_F16)
layout(binding = 0) readonly restrict buffer A1 { float16_t a1[]; };
layout(binding = 0) readonly restrict buffer A4 { uvec4 a4[]; };
#define A_UNIT 8u
#define A_HALVES 1 /* 16-bit values: a 16-byte load holds 8 */
#define A_AT(i) float(a1[i])
#define A_LO(x) vec4(unpackHalf2x16(x.x), unpackHalf2x16(x.y))
#define A_HI(x) vec4(unpackHalf2x16(x.z), unpackHalf2x16(x.w))
#elif defined(A_BF16)
/* bfloat16 is the high half of an f32: a shift or a mask, exact */
layout(binding = 0) readonly restrict buffer A1 { uint16_t a1[]; };
layout(binding = 0) readonly restrict buffer A4 { uvec4 a4[]; };
#define A_UNIT 8u
#define A_HALVES 1
#define A_AT(i) uintBitsToFloat(uint(a1[i]) << 16)
#define A_LO(x) uintBitsToFloat(uvec4(x.x << 16, x.x & 0xffff0000u, x.y << 16, x.y & 0xffff0000u))
#define A_HI(x) uintBitsToFloat(uvec4(x.z << 16, x.z & 0xffff0000u, x.w << 16, x.w & 0xffff0000u))
#elif defined(A_Q8_0) || defined(A_Q4_0)
layout(binding = 0) readonly restrict buffer A1 { uint16_t a1[]; };
#define A_QUANT 1
#if defined(A_Q8_0)
#define QW 16u /* quant words per block (2 values each) */
#define BW 17u /* words per block, the scale first */
#define A_SCALE16(w) (w)
#define A_QUANT16(w) ((w) + 1u)
#else
#define QW 8u  /* 4 values each */
#define BW 9u
/* flags 512: the split layout (q4s.glsl; the host then runs a staged
 * variant as its team kernel) */
#include "q4s.glsl"
#define A_SCALE16(w) q4s_scale_at((pc.flags & 512u) != 0u, w)
#define A_QUANT16(w) q4s_quant_at((pc.flags & 512u) != 0u, w)
#endif
#else
#error "mul_mat_vec.comp: define one of A_F32, A_F16, A_BF16, A_Q8_0, A_Q4_0"
#endif

#if defined(B_F16)
/* F16 activations (with F16 weights) */
layout(binding = 1) readonly restrict buffer B1 { float16_t b1[]; };
layout(binding = 1) readonly restrict buffer B2 { uint b2[]; };
layout(binding = 1) readonly restrict buffer B4 { uvec2 b4[]; };
#define B_AT(i) float(b1[i])
#define B_PAIR(i) unpackHalf2x16(b2[i])
#define B_QUAD(i) vec4(unpackHalf2x16(b4[i].x), unpackHalf2x16(b4[i].y))
#else
layout(binding = 1) readonly restrict buffer B1 { float b1[]; };
layout(binding = 1) readonly restrict buffer B2 { vec2 b2[]; };
layout(binding = 1) readonly restrict buffer B4 { vec4 b4[]; };
#define B_AT(i) b1[i]
#define B_PAIR(i) b2[i]
#define B_QUAD(i) b4[i]
#endif
layout(binding = 3) writeonly restrict buffer D { float d[]; };

shared float red[W * R * NC];

bool b_wide() { return (pc.flags & 2u) != 0u; }

/* activations k, k+1 of the column starting at cb (k even) */
vec2 b_pair(uint cb, uint k) {
    if (b_wide()) return B_PAIR((cb + k) >> 1);
    return vec2(B_AT(cb + k * pc.sb0), B_AT(cb + (k + 1u) * pc.sb0));
}

#if !defined(A_QUANT)
/* activations k .. k+3 (k a multiple of 4) */
vec4 b_quad(uint cb, uint k) {
    if (b_wide()) return B_QUAD((cb + k) >> 2);
    return vec4(B_AT(cb + k * pc.sb0), B_AT(cb + (k + 1u) * pc.sb0), B_AT(cb + (k + 2u) * pc.sb0),
                B_AT(cb + (k + 3u) * pc.sb0));
}
#else
/* The activations that quant words lw * Q .. of a block multiply, from
 * element e (even): Q8_0 word i holds values e + 2i, e + 2i + 1; Q4_0 word i
 * holds e + 2i, e + 2i + 1 (low nibbles) and the same + 16 (high nibbles).
 * Each is pre-scaled by 2^-s, s the bit position of its quant in the word
 * (see q_dot). */
void b_load(uint cb, uint e, out float bl[8], out float bh[8]) {
    [[unroll]] for (uint i = 0u; i < Q; i++) {
        vec2 p;
        if (b_wide() && (Q & 1u) == 0u) {
            const vec4 v = B_QUAD((cb + e + 4u * (i >> 1)) >> 2);
            p = (i & 1u) != 0u ? v.zw : v.xy;
        } else {
            p = b_pair(cb, e + 2u * i);
        }
        bl[2u * i] = p.x;
        bl[2u * i + 1u] = p.y * (1.0 / 256.0);
#if defined(A_Q4_0)
        vec2 h;
        if (b_wide() && (Q & 1u) == 0u) {
            const vec4 v = B_QUAD((cb + e + 16u + 4u * (i >> 1)) >> 2);
            h = (i & 1u) != 0u ? v.zw : v.xy;
        } else {
            h = b_pair(cb, e + 16u + 2u * i);
        }
        bh[2u * i] = h.x * (1.0 / 16.0);
        bh[2u * i + 1u] = h.y * (1.0 / 4096.0);
#else
        bh[2u * i] = 0.0;
        bh[2u * i + 1u] = 0.0;
#endif
    }
}

/* Quant word x (16 bits) times its pre-scaled activations: each quant is
 * OR-ed into the mantissa of 2^23 where it stands, and subtracting 2^23 +
 * offset * 2^s leaves (q - offset) * 2^s exactly. */
float q_dot(uint x, float bl[8], float bh[8], uint i) {
#if defined(A_Q8_0)
    const uint xs = x ^ 0x8080u; /* int8 + 128 */
    const float q0 = uintBitsToFloat((xs & 0x00ffu) | 0x4b000000u) - 8388736.0;
    const float q1 = uintBitsToFloat((xs & 0xff00u) | 0x4b000000u) - 8421376.0;
    return q0 * bl[2u * i] + q1 * bl[2u * i + 1u];
#else
    const float q0 = uintBitsToFloat((x & 0x000fu) | 0x4b000000u) - 8388616.0;
    const float q1 = uintBitsToFloat((x & 0x00f0u) | 0x4b000000u) - 8388736.0;
    const float q2 = uintBitsToFloat((x & 0x0f00u) | 0x4b000000u) - 8390656.0;
    const float q3 = uintBitsToFloat((x & 0xf000u) | 0x4b000000u) - 8421376.0;
    return q0 * bl[2u * i] + q2 * bl[2u * i + 1u] + q1 * bh[2u * i] + q3 * bh[2u * i + 1u];
#endif
}
#endif

#if defined(STAGED)
#if !defined(A_QUANT)
#error "mul_mat_vec.comp: STAGED is for Q8_0 / Q4_0 weights"
#endif
#include "mv_staged.glsl"
#endif

void main() {
    TSL_PROGRESS();
    const uint wg = wg_linear();
#if defined(STAGED)
    /* rows whole units of 16, 8 or 4 bytes (flags 8, 16, 32): the staged
     * kernel; otherwise the team kernel below */
    if ((pc.flags & 56u) != 0u) {
        if (wg * RW >= pc.M) return;
        mv_staged(wg);
        return;
    }
#endif
    if (wg * S * R >= pc.M) return; /* a padding group of the folded grid: uniform */

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
    const uint bbase = pc.ob + i2 * pc.sb2 + i3 * pc.sb3;
    const uint ncols = min(pc.N, uint(NC));

    uint arow[R];
    [[unroll]] for (uint r = 0u; r < R; r++) arow[r] = abase + min(row0 + r, pc.M - 1u) * pc.sa1;
    uint bcol[NC];
    [[unroll]] for (uint c = 0u; c < NC; c++) bcol[c] = bbase + min(c, ncols - 1u) * pc.sb1;

    float acc[R][NC];
    [[unroll]] for (uint r = 0u; r < R; r++)
        [[unroll]] for (uint c = 0u; c < NC; c++) acc[r][c] = 0.0;

#if !defined(A_QUANT)
    if ((pc.flags & 1u) != 0u) {
        /* 16 bytes of each row per lane and step */
        const uint nu = pc.K / A_UNIT;
        uint u = lane;
        for (; u + (U - 1u) * T < nu; u += U * T) {
#if defined(A_HALVES)
            uvec4 w[U][R];
#else
            vec4 w[U][R];
#endif
            [[unroll]] for (uint j = 0u; j < U; j++)
                [[unroll]] for (uint r = 0u; r < R; r++) w[j][r] = a4[arow[r] / A_UNIT + u + j * T];
            [[unroll]] for (uint j = 0u; j < U; j++) {
                const uint k = (u + j * T) * A_UNIT;
                [[unroll]] for (uint c = 0u; c < NC; c++) {
                    if (c >= ncols) break;
                    vec4 bl = b_quad(bcol[c], k);
#if defined(A_HALVES)
                    vec4 bh = b_quad(bcol[c], k + 4u);
                    [[unroll]] for (uint r = 0u; r < R; r++) {
                        const uvec4 x = w[j][r];
                        acc[r][c] += dot(A_LO(x), bl) + dot(A_HI(x), bh);
                    }
#else
                    [[unroll]] for (uint r = 0u; r < R; r++) acc[r][c] += dot(w[j][r], bl);
#endif
                }
            }
        }
        for (; u < nu; u += T) {
            const uint k = u * A_UNIT;
            [[unroll]] for (uint c = 0u; c < NC; c++) {
                if (c >= ncols) break;
                vec4 bl = b_quad(bcol[c], k);
#if defined(A_HALVES)
                vec4 bh = b_quad(bcol[c], k + 4u);
                [[unroll]] for (uint r = 0u; r < R; r++) {
                    const uvec4 x = a4[arow[r] / A_UNIT + u];
                    acc[r][c] += dot(A_LO(x), bl) + dot(A_HI(x), bh);
                }
#else
                [[unroll]] for (uint r = 0u; r < R; r++) acc[r][c] += dot(a4[arow[r] / A_UNIT + u], bl);
#endif
            }
        }
    } else {
        /* any alignment and length: one element per lane and step */
        for (uint k = lane; k < pc.K; k += T) {
            [[unroll]] for (uint c = 0u; c < NC; c++) {
                if (c >= ncols) break;
                float bv = B_AT(bcol[c] + k * pc.sb0);
                [[unroll]] for (uint r = 0u; r < R; r++) acc[r][c] += A_AT(arow[r] + k) * bv;
            }
        }
    }
#else
    /* lane: quant words lw * Q .. + Q - 1 of block lb (LPB = words / Q lanes
     * per block); a step of the team covers bps whole blocks */
    const uint LPB = QW / Q, bps = T / LPB;
    const uint lb = lane / LPB, lw = lane % LPB;
    const uint nb = pc.K / 32u;
    uint blk = lb;
    for (; blk + (U - 1u) * bps < nb; blk += U * bps) {
        uint x[U][R][Q], s[U][R];
        [[unroll]] for (uint j = 0u; j < U; j++)
            [[unroll]] for (uint r = 0u; r < R; r++) {
                const uint w = arow[r] + (blk + j * bps) * BW;
                [[unroll]] for (uint i = 0u; i < Q; i++) x[j][r][i] = uint(a1[A_QUANT16(w) + lw * Q + i]);
                s[j][r] = uint(a1[A_SCALE16(w)]);
            }
        [[unroll]] for (uint j = 0u; j < U; j++) {
            const uint e = (blk + j * bps) * 32u + 2u * Q * lw;
            [[unroll]] for (uint c = 0u; c < NC; c++) {
                if (c >= ncols) break;
                float bl[8], bh[8];
                b_load(bcol[c], e, bl, bh);
                [[unroll]] for (uint r = 0u; r < R; r++) {
                    float v = 0.0;
                    [[unroll]] for (uint i = 0u; i < Q; i++) v += q_dot(x[j][r][i], bl, bh, i);
                    acc[r][c] += unpackHalf2x16(s[j][r]).x * v;
                }
            }
        }
    }
    for (; blk < nb; blk += bps) {
        const uint e = blk * 32u + 2u * Q * lw;
        [[unroll]] for (uint c = 0u; c < NC; c++) {
            if (c >= ncols) break;
            float bl[8], bh[8];
            b_load(bcol[c], e, bl, bh);
            [[unroll]] for (uint r = 0u; r < R; r++) {
                const uint w = arow[r] + blk * BW;
                float v = 0.0;
                [[unroll]] for (uint i = 0u; i < Q; i++) v += q_dot(uint(a1[A_QUANT16(w) + lw * Q + i]), bl, bh, i);
                acc[r][c] += unpackHalf2x16(uint(a1[A_SCALE16(w)])).x * v;
            }
        }
    }
#endif

    /* the team's sums: subgroupAdd when the team is one subgroup, else
     * through shared memory (per subgroup, or per lane when teams are
     * narrower than a subgroup) */
    const uint RC = R * uint(NC);
    if (T == gl_SubgroupSize) {
        [[unroll]] for (uint r = 0u; r < R; r++)
            [[unroll]] for (uint c = 0u; c < NC; c++) {
                const float v = subgroupAdd(acc[r][c]);
                if (lane == r * NC + c && row0 + r < pc.M && c < ncols)
                    d[pc.od + row0 + r + c * pc.sd1 + i2 * pc.sd2 + i3 * pc.sd3] = v;
            }
        return;
    }
    uint parts;
    if (T > gl_SubgroupSize && T % gl_SubgroupSize == 0u) {
        parts = T / gl_SubgroupSize;
        const uint part = lane / gl_SubgroupSize;
        [[unroll]] for (uint r = 0u; r < R; r++)
            [[unroll]] for (uint c = 0u; c < NC; c++) {
                const float v = subgroupAdd(acc[r][c]);
                if (subgroupElect()) red[(team * RC + r * NC + c) * parts + part] = v;
            }
    } else {
        parts = T;
        [[unroll]] for (uint r = 0u; r < R; r++)
            [[unroll]] for (uint c = 0u; c < NC; c++) red[(team * RC + r * NC + c) * parts + lane] = acc[r][c];
    }
    barrier();
    if (lane < RC) {
        const uint r = lane / NC, c = lane % NC;
        float v = 0.0;
        for (uint i = 0u; i < parts; i++) v += red[(team * RC + lane) * parts + i];
        if (row0 + r < pc.M && c < ncols) d[pc.od + row0 + r + c * pc.sd1 + i2 * pc.sd2 + i3 * pc.sd3] = v;
    }
}
