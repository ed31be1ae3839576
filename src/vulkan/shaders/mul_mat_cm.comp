#version 450
/*
 * mul_mat_cm.comp - matrix product on the GPU's matrix units
 * (VK_KHR_cooperative_matrix): F16 weights (or Q8_0 / Q4_0 ones, A_Q8_0 /
 * A_Q4_0, dequantized and rounded to F16 as they are staged) times F32
 * activations, rounded to F16 as they are staged (or F16 ones, B_F16, with
 * F16 weights), products accumulated in F32: d[m, n] = sum_k a[k, m] b[k, n].
 *
 * A workgroup of WGM x WGN subgroups (32 invocations each) owns a BM x BN
 * tile of d (BM = WGM * TM * 16, BN = WGN * TN * 16); each subgroup holds
 * TM x TN 16x16 F32 accumulators. K is walked in steps of BK: every
 * invocation fetches its share of the next A and B tiles from device memory
 * into registers (16 bytes per load where the layout allows) while the
 * matrix units work on the current tiles in shared memory, then stores them
 * into the other half of a double buffer: one barrier per step. The
 * registers hold the loaded bits as they came (F32 activations, raw quant
 * words): rounding to F16 and dequantizing happen at the store into shared
 * memory, after the step's products, so no invocation waits on its loads
 * before its matrix work. A workgroup whose tiles lie inside a, b and K with
 * 16-byte layouts (the common case) takes a path with no checks. Staged rows
 * carry 8 halves of padding, which keeps the 16-byte rows that matrix loads
 * gather from different banks.
 *
 * Results go straight from the accumulators to d when the whole tile is
 * inside d and d's layout meets the 16-byte alignment matrix stores need
 * (flags bit 2); otherwise each 16x16 piece passes through shared memory
 * and is written element by element with bounds checks.
 *
 * WGM, WGN, TM, TN, BK are specialization constants (ids 1-5; the
 * workgroup size, id 0, must be 32 * WGM * WGN; id 5 is BK + 256 for a
 * single staging buffer, which halves the staged tiles' shared memory for
 * a second barrier per step: larger tiles within a device's limit, 48 KiB
 * on NVIDIA's Vulkan driver), so tile shapes are tuned
 * per device without new SPIR-V. Built with CM_EMULATE the matrix
 * operations are done by ordinary arithmetic on the same staged tiles and
 * the same lane layout, so the tiling, staging and edge handling are tested
 * on devices without matrix units (lavapipe).
 *
 * Flags: 1 a's rows 16-byte aligned and K % 8 == 0; 2 b dense with 16-byte
 * aligned columns (whole 8-value units for F16 ones); 4 d's columns
 * 16-byte aligned.
 */
#extension GL_EXT_control_flow_attributes : enable
#extension GL_EXT_shader_16bit_storage : require
#if !defined(CM_EMULATE)
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#endif
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256, local_size_x_id = 0) in;
layout(constant_id = 1) const uint WGM = 2u;
layout(constant_id = 2) const uint WGN = 4u;
layout(constant_id = 3) const uint TM = 4u;
layout(constant_id = 4) const uint TN = 2u;
/* BK, plus 256 for one staging buffer instead of two */
layout(constant_id = 5) const uint BKS = 32u;
const uint BK = BKS & 255u;
const uint NBUF = 2u - (BKS >> 8u);

const uint NT = gl_WorkGroupSize.x;
const uint BM = WGM * TM * 16u;
const uint BN = WGN * TN * 16u;
const uint KQ = BK / 8u;        /* 16-byte units (8 halves) per staged row */
const uint SK = KQ + 1u;        /* staged row stride in units: 8 halves of padding */
const uint A_UNITS = BM * KQ;
const uint B_UNITS = BN * KQ;
const uint A_PER = (A_UNITS + NT - 1u) / NT;
const uint B_PER = (B_UNITS + NT - 1u) / NT;

layout(push_constant) uniform P {
    uint M, N, K;
    uint sa1, sa2, sa3;
    uint sb0, sb1, sb2, sb3;
    uint sd1, sd2, sd3;
    uint r2, r3, B2;
    uint oa, ob, od;
    uint flags;
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

#if defined(A_Q4_0)
#include "q4s.glsl"
#endif
#if defined(A_Q8_0) || defined(A_Q4_0)
/* blocks as 16-bit words, the F16 scale first (see dtype.glsl) */
layout(binding = 0) readonly restrict buffer A1 { uint16_t a16[]; };
#if defined(A_Q8_0)
#define BW 17u
#else
#define BW 9u
#endif
#else
layout(binding = 0) readonly restrict buffer A1 { float16_t a1[]; };
layout(binding = 0) readonly restrict buffer A4 { uvec4 a4[]; };
#endif
#if defined(B_F16)
/* F16 activations (with F16 weights): staged as they are */
layout(binding = 1) readonly restrict buffer B1 { float16_t b1[]; };
layout(binding = 1) readonly restrict buffer B8 { uvec4 b8[]; };
#else
layout(binding = 1) readonly restrict buffer B1 { float b1[]; };
layout(binding = 1) readonly restrict buffer B4 { vec4 b4[]; };
#endif
layout(binding = 3) writeonly restrict buffer D { float d[]; };

shared uvec4 As[NBUF * BM * SK];
shared uvec4 Bs[NBUF * BN * SK];
shared float Cs[WGM * WGN * 256u];

#if defined(CM_EMULATE)
/* A fragment is where its 16x16 tile sits in shared memory (the tiles stay
 * put until the products that use them are done); lane l of an accumulator
 * holds row l % 16, columns (l / 16) * 8 .. + 7. */
#define FRAG_A uint
#define FRAG_B uint
struct ACC {
    float v[8];
};
uint cm_lane() { return gl_LocalInvocationIndex % 32u; }
uint cm_warp() { return gl_LocalInvocationIndex / 32u; }
ACC cm_zero() {
    ACC c;
    [[unroll]] for (uint t = 0u; t < 8u; t++) c.v[t] = 0.0;
    return c;
}
float cm_half(uvec4 q, uint h) {
    uint w = q[h >> 1];
    return (h & 1u) != 0u ? unpackHalf2x16(w).y : unpackHalf2x16(w).x;
}
/* a is row-major (row r at a + r * SK), b column-major (column c at b + c * SK) */
ACC cm_mad(uint fa, uint fb, ACC c) {
    const uint l = cm_lane(), r = l % 16u, c0 = (l / 16u) * 8u;
    [[unroll]] for (uint t = 0u; t < 8u; t++) {
        float s = c.v[t];
        for (uint k = 0u; k < 16u; k++)
            s += cm_half(As[fa + r * SK + k / 8u], k % 8u) * cm_half(Bs[fb + (c0 + t) * SK + k / 8u], k % 8u);
        c.v[t] = s;
    }
    return c;
}
#define CM_LOAD_A(f, off) f = (off)
#define CM_LOAD_B(f, off) f = (off)
#define CM_MAD(fa, fb, c) cm_mad(fa, fb, c)
void cm_store_d(ACC c, uint off, uint stride) {
    const uint l = cm_lane(), r = l % 16u, c0 = (l / 16u) * 8u;
    [[unroll]] for (uint t = 0u; t < 8u; t++) d[off + r + (c0 + t) * stride] = c.v[t];
}
void cm_store_s(ACC c, uint off) {
    const uint l = cm_lane(), r = l % 16u, c0 = (l / 16u) * 8u;
    [[unroll]] for (uint t = 0u; t < 8u; t++) Cs[off + r + (c0 + t) * 16u] = c.v[t];
}
#else
#define FRAG_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define FRAG_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define ACC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
uint cm_lane() { return gl_SubgroupInvocationID; }
uint cm_warp() { return gl_SubgroupID; }
ACC cm_zero() { return ACC(0.0); }
#define CM_LOAD_A(f, off) coopMatLoad(f, As, off, SK, gl_CooperativeMatrixLayoutRowMajor)
#define CM_LOAD_B(f, off) coopMatLoad(f, Bs, off, SK, gl_CooperativeMatrixLayoutColumnMajor)
#define CM_MAD(fa, fb, c) coopMatMulAdd(fa, fb, c)
void cm_store_d(ACC c, uint off, uint stride) { coopMatStore(c, d, off, stride, gl_CooperativeMatrixLayoutColumnMajor); }
void cm_store_s(ACC c, uint off) { coopMatStore(c, Cs, off, 16u, gl_CooperativeMatrixLayoutColumnMajor); }
#endif

/* Registers carrying the next tiles from device memory to shared memory.
 * They hold what was loaded, untouched: converting (F32 -> F16) or
 * dequantizing here would make each invocation wait for its loads before
 * the matrix work of the current step; done in stage() the wait falls
 * after it, so the loads' latency hides behind the products. */
/* 8 F16 weights; for block formats the F16 scale's bits, 4 quant words (2
 * a uint) and the Q4_0 nibble shift */
uvec4 ra[A_PER];
#if defined(B_F16)
uvec4 rb[B_PER];
#else
vec4 rbl[B_PER], rbh[B_PER];
#endif

/* Fetch the tiles at k0 into registers: zeros past M, N and K. `full`
 * (the same for the whole workgroup) says the tiles lie inside a, b and K
 * with 16-byte layouts, so no load needs a check. */
void fetch(uint abase, uint bbase, uint m0, uint n0, uint k0, bool full) {
    const uint tid = gl_LocalInvocationIndex;
    [[unroll]] for (uint i = 0u; i < A_PER; i++) {
        const uint unit = tid + i * NT;
        const uint row = unit / KQ, k = k0 + (unit % KQ) * 8u, m = m0 + row;
        uvec4 q = uvec4(0u);
        if ((full && (A_UNITS % NT == 0u || unit < A_UNITS)) || (unit < A_UNITS && m < pc.M && k < pc.K)) {
#if defined(A_Q8_0) || defined(A_Q4_0)
            /* values k .. k+7 of a 32-value block (K is a whole number of
             * blocks) */
            const uint w = abase + m * pc.sa1 + (k / 32u) * BW, j = k % 32u;
#if defined(A_Q8_0)
            const uint o = w + 1u + j / 2u;
            q = uvec4(uint(a16[w]), uint(a16[o]) | (uint(a16[o + 1u]) << 16),
                      uint(a16[o + 2u]) | (uint(a16[o + 3u]) << 16), 0u);
#else
            /* flags 512: the split layout (q4s.glsl) */
            const bool split = (pc.flags & 512u) != 0u;
            const uint o = q4s_quant_at(split, w) + (j % 16u) / 2u;
            q = uvec4(uint(a16[q4s_scale_at(split, w)]), uint(a16[o]) | (uint(a16[o + 1u]) << 16),
                      uint(a16[o + 2u]) | (uint(a16[o + 3u]) << 16), j < 16u ? 0u : 4u);
#endif
#else
            const uint at = abase + m * pc.sa1 + k;
            if (full || (pc.flags & 1u) != 0u) {
                q = a4[at >> 3];
            } else {
                float h[8];
                [[unroll]] for (uint e = 0u; e < 8u; e++) h[e] = k + e < pc.K ? float(a1[at + e]) : 0.0;
                q = uvec4(packHalf2x16(vec2(h[0], h[1])), packHalf2x16(vec2(h[2], h[3])),
                          packHalf2x16(vec2(h[4], h[5])), packHalf2x16(vec2(h[6], h[7])));
            }
#endif
        }
        ra[i] = q;
    }
    [[unroll]] for (uint i = 0u; i < B_PER; i++) {
        const uint unit = tid + i * NT;
        const uint col = unit / KQ, k = k0 + (unit % KQ) * 8u, n = n0 + col;
        const uint cb = bbase + n * pc.sb1;
#if defined(B_F16)
        uvec4 q = uvec4(0u);
        if (full && (B_UNITS % NT == 0u || unit < B_UNITS)) {
            q = b8[(cb + k) >> 3];
        } else if (unit < B_UNITS && n < pc.N && k < pc.K) {
            if ((pc.flags & 2u) != 0u && k + 8u <= pc.K) {
                q = b8[(cb + k) >> 3];
            } else {
                float h[8];
                [[unroll]] for (uint e = 0u; e < 8u; e++) h[e] = k + e < pc.K ? float(b1[cb + (k + e) * pc.sb0]) : 0.0;
                q = uvec4(packHalf2x16(vec2(h[0], h[1])), packHalf2x16(vec2(h[2], h[3])),
                          packHalf2x16(vec2(h[4], h[5])), packHalf2x16(vec2(h[6], h[7])));
            }
        }
        rb[i] = q;
#else
        vec4 lo = vec4(0.0), hi = vec4(0.0);
        if (full && (B_UNITS % NT == 0u || unit < B_UNITS)) {
            lo = b4[(cb + k) >> 2];
            hi = b4[((cb + k) >> 2) + 1u];
        } else if (unit < B_UNITS && n < pc.N && k < pc.K) {
            if ((pc.flags & 2u) != 0u && k + 8u <= pc.K) {
                lo = b4[(cb + k) >> 2];
                hi = b4[((cb + k) >> 2) + 1u];
            } else {
                [[unroll]] for (uint e = 0u; e < 4u; e++) {
                    lo[e] = k + e < pc.K ? float(b1[cb + (k + e) * pc.sb0]) : 0.0;
                    hi[e] = k + 4u + e < pc.K ? float(b1[cb + (k + 4u + e) * pc.sb0]) : 0.0;
                }
            }
        }
        rbl[i] = lo;
        rbh[i] = hi;
#endif
    }
}

#if defined(A_Q8_0) || defined(A_Q4_0)
/* 8 weights from what fetch() loaded, dequantized and rounded to F16 */
uvec4 dequant(uvec4 q) {
    const float sc = unpackHalf2x16(q.x).x;
    uvec4 h;
    [[unroll]] for (uint e = 0u; e < 4u; e++) {
        const uint x = (e < 2u ? q.y : q.z) >> (16u * (e & 1u));
#if defined(A_Q8_0)
        const vec2 v = vec2(float(bitfieldExtract(int(x), 0, 8)), float(bitfieldExtract(int(x), 8, 8))) * sc;
#else
        const uint y = x >> q.w;
        const vec2 v = (vec2(float(y & 0xfu), float((y >> 8) & 0xfu)) - 8.0) * sc;
#endif
        h[e] = packHalf2x16(v);
    }
    return h;
}
#endif

void stage(uint buf) {
    const uint tid = gl_LocalInvocationIndex;
    [[unroll]] for (uint i = 0u; i < A_PER; i++) {
        const uint unit = tid + i * NT;
#if defined(A_Q8_0) || defined(A_Q4_0)
        if (unit < A_UNITS) As[buf * BM * SK + (unit / KQ) * SK + unit % KQ] = dequant(ra[i]);
#else
        if (unit < A_UNITS) As[buf * BM * SK + (unit / KQ) * SK + unit % KQ] = ra[i];
#endif
    }
    [[unroll]] for (uint i = 0u; i < B_PER; i++) {
        const uint unit = tid + i * NT;
#if defined(B_F16)
        if (unit < B_UNITS) Bs[buf * BN * SK + (unit / KQ) * SK + unit % KQ] = rb[i];
#else
        if (unit < B_UNITS)
            Bs[buf * BN * SK + (unit / KQ) * SK + unit % KQ] =
                uvec4(packHalf2x16(rbl[i].xy), packHalf2x16(rbl[i].zw), packHalf2x16(rbh[i].xy),
                      packHalf2x16(rbh[i].zw));
#endif
    }
}

void main() {
    TSL_PROGRESS();
    const uint warp = cm_warp(), lane = cm_lane();
    const uint wm = warp % WGM, wn = warp / WGM;
    /* Tiles in groups of GM rows of tiles, column by column within a
     * group: the workgroups resident at once share GM tiles of a and a few
     * of b, which L2 keeps, instead of streaming all of a per column of
     * tiles (large products, whose a is larger than L2). */
    const uint GM = 8u, gx = gl_NumWorkGroups.x, gy = gl_NumWorkGroups.y;
    const uint lin = gl_WorkGroupID.y * gx + gl_WorkGroupID.x, first = (lin / (GM * gy)) * GM;
    const uint gsz = min(gx - first, GM), in_group = lin % (GM * gy);
    const uint m0 = (first + in_group % gsz) * BM, n0 = (in_group / gsz) * BN;
    const uint i2 = gl_WorkGroupID.z % pc.B2, i3 = gl_WorkGroupID.z / pc.B2;
    const uint abase = pc.oa + (i2 / pc.r2) * pc.sa2 + (i3 / pc.r3) * pc.sa3;
    const uint bbase = pc.ob + i2 * pc.sb2 + i3 * pc.sb3;

    ACC acc[TM * TN];
    [[unroll]] for (uint i = 0u; i < TM * TN; i++) acc[i] = cm_zero();

    /* an interior tile with 16-byte layouts: no load is checked */
#if defined(A_Q8_0) || defined(A_Q4_0)
    const uint wide = 2u;
#else
    const uint wide = 3u;
#endif
    const bool full = (pc.flags & wide) == wide && pc.K % BK == 0u && m0 + BM <= pc.M && n0 + BN <= pc.N;
    const uint nk = (pc.K + BK - 1u) / BK;
    fetch(abase, bbase, m0, n0, 0u, full);
    stage(0u);
    barrier();
    for (uint kt = 0u; kt < nk; kt++) {
        const uint cur = kt % NBUF;
        if (kt + 1u < nk) fetch(abase, bbase, m0, n0, (kt + 1u) * BK, full);
        [[unroll]] for (uint kk = 0u; kk < BK / 16u; kk++) {
            FRAG_A fa[TM];
            FRAG_B fb[TN];
            [[unroll]] for (uint i = 0u; i < TM; i++)
                CM_LOAD_A(fa[i], cur * BM * SK + (wm * TM * 16u + i * 16u) * SK + kk * 2u);
            [[unroll]] for (uint j = 0u; j < TN; j++)
                CM_LOAD_B(fb[j], cur * BN * SK + (wn * TN * 16u + j * 16u) * SK + kk * 2u);
            [[unroll]] for (uint i = 0u; i < TM; i++)
                [[unroll]] for (uint j = 0u; j < TN; j++) acc[i * TN + j] = CM_MAD(fa[i], fb[j], acc[i * TN + j]);
        }
        if (kt + 1u < nk) {
            if (NBUF == 1u) barrier(); /* one buffer: everyone is done reading it */
            stage((kt + 1u) % NBUF);
        }
        barrier();
    }

    const uint dbase = pc.od + i2 * pc.sd2 + i3 * pc.sd3;
    const uint mw = m0 + wm * TM * 16u, nw = n0 + wn * TN * 16u;
    if ((pc.flags & 4u) != 0u && m0 + BM <= pc.M && n0 + BN <= pc.N) {
        [[unroll]] for (uint i = 0u; i < TM; i++)
            [[unroll]] for (uint j = 0u; j < TN; j++)
                cm_store_d(acc[i * TN + j], dbase + mw + i * 16u + (nw + j * 16u) * pc.sd1, pc.sd1);
        return;
    }
    /* an edge tile (or an unaligned d): through shared memory, checked */
    [[unroll]] for (uint i = 0u; i < TM; i++)
        [[unroll]] for (uint j = 0u; j < TN; j++) {
            cm_store_s(acc[i * TN + j], warp * 256u);
            barrier();
            [[unroll]] for (uint e = 0u; e < 8u; e++) {
                const uint idx = lane + 32u * e, r = idx % 16u, c = idx / 16u;
                const uint m = mw + i * 16u + r, n = nw + j * 16u + c;
                if (m < pc.M && n < pc.N) d[dbase + m + n * pc.sd1] = Cs[warp * 256u + c * 16u + r];
            }
            barrier();
        }
}
