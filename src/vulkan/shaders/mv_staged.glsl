/*
 * mv_staged.glsl - the staged mat-vec of Q8_0 / Q4_0 weights (one column,
 * or up to NC), included by mul_mat_vec.comp when STAGED is defined.
 *
 * With NC 8 (the small-N kernel) each invocation keeps a sum per column;
 * the weights are decoded once for all of them.
 *
 * Why staged: Q8_0 blocks are 34 bytes and Q4_0 ones 18, so a block is
 * only 2-byte aligned and a kernel that reads blocks where they stand
 * issues 16-bit loads; on the H200 those run at about a quarter of the copy
 * rate, however the lanes are arranged. Here the loads ignore the blocks:
 * the workgroup streams each of its rows' byte span with 16-byte loads
 * (8- or 4-byte ones when the rows are only that aligned), consecutive
 * invocations reading consecutive bytes, into shared memory; then each
 * invocation reads back one super-block of G = 8 blocks (144 or 272 bytes:
 * a whole number of 16-byte units, at a stride of an odd number of them,
 * so the 16-byte shared reads hit every bank once) and decodes it with
 * constant offsets.
 *
 * Layout: W invocations = RW rows x KS splits of K, invocation t owning
 * row t / KS and super-blocks t % KS, t % KS + KS, ... of it. A step of
 * the loop covers KS super-blocks of every row (KS * 256 elements of K);
 * the activations of a step are staged too, pre-multiplied by 2^-s where s
 * is the bit position the decode leaves each quant at (see below), once
 * per workgroup rather than once per row. With PF the next step's weights
 * are loaded into registers before the current one is decoded, so a
 * workgroup keeps its loads in flight through its own arithmetic.
 *
 * Decode: a quant is masked in place and OR-ed into the mantissa of 2^23;
 * subtracting 2^23 + offset * 2^s leaves (q - offset) * 2^s exactly, and
 * the activation carries the 2^-s: one logic op, one add and one FMA per
 * weight, all in F32 with exact products.
 *
 * The caller guarantees (flags bit 8, 16 or 32: 16-, 8- or 4-byte units)
 * that every row starts at a multiple of the unit within binding 0 and is
 * a whole number of units long, so no load crosses the tensor's end.
 */

layout(constant_id = 5) const uint KSP = 8u; /* KS | PF << 8 */
const uint KS = KSP & 0xffu;
const bool PF = (KSP >> 8) != 0u;
const uint RW = W / KS;
const uint SG = 8u;               /* blocks per super-block */
const uint SBW = SG * BW / 8u;    /* super-block in 16-byte units: 9 (Q4_0) or 17 (Q8_0) */
const uint SBB = SG * BW * 2u;    /* in bytes: 144 or 272 */

layout(binding = 0) readonly restrict buffer AS16 { uvec4 as16[]; };
layout(binding = 0) readonly restrict buffer AS8 { uvec2 as8[]; };
layout(binding = 0) readonly restrict buffer AS4 { uint as4[]; };

shared uvec4 stage[W * SBW];
/* 256 activations per split and column, padded by 4 so splits fall on other banks */
shared vec4 bst[NC * KS * 65u];

/* 16 bytes at byte p of binding 0 (a multiple of the unit); bytes at or
 * past `end` are not read (rows are whole units, so only whole units are
 * left out) */
uvec4 st_load(uint p, uint end, uint unit) {
    if (unit == 16u) return as16[p >> 4];
    if (unit == 8u) {
        const uvec2 lo = as8[p >> 3];
        const uvec2 hi = p + 8u < end ? as8[(p >> 3) + 1u] : uvec2(0u);
        return uvec4(lo, hi);
    }
    uvec4 v = uvec4(0u);
    [[unroll]] for (uint i = 0u; i < 4u; i++)
        if (p + 4u * i < end) v[i] = as4[(p >> 2) + i];
    return v;
}

/* Word n (32 bits) of this invocation's super-block. With one column it
 * is held in registers and the blocks are unrolled (constant offsets);
 * with several the block loop stays a loop reading shared memory, as the
 * columns multiply the code (and a driver that compiles shaders on the CPU
 * would take a minute over each). */
#if NC == 1
#define SW(n) x[(n) >> 2][(n) & 3u]
#else
#define SW(n) stage[tid * SBW + ((n) >> 2)][(n) & 3u]
#endif

void mv_staged(uint wg) {
    const uint tid = gl_LocalInvocationID.x;
    const uint unit = (pc.flags & 8u) != 0u ? 16u : (pc.flags & 16u) != 0u ? 8u : 4u;
    const uint row0 = wg * RW;
    const uint i2 = gl_WorkGroupID.z % pc.B2, i3 = gl_WorkGroupID.z / pc.B2;
    const uint abase = pc.oa + (i2 / pc.r2) * pc.sa2 + (i3 / pc.r3) * pc.sa3; /* 16-bit words */
    const uint bbase = pc.ob + i2 * pc.sb2 + i3 * pc.sb3;
    const uint ncols = min(pc.N, uint(NC));
    const uint nb = pc.K / 32u;
    const uint rowlen = nb * BW * 2u; /* bytes */
    const uint nsb = (nb + SG - 1u) / SG;
    const uint steps = (nsb + KS - 1u) / KS;
    const uint span = KS * SBW; /* 16-byte units of a row per step */

    /* the rows this invocation loads for the stage: piece j is unit f = j * W + tid of the step */
    uint lrow[SBW];
    [[unroll]] for (uint j = 0u; j < SBW; j++) {
        const uint f = j * W + tid;
        lrow[j] = (abase + min(row0 + f / span, pc.M - 1u) * pc.sa1) * 2u;
    }

    const uint r = tid / KS, s = tid % KS;
    float acc[NC];
    [[unroll]] for (uint c = 0u; c < NC; c++) acc[c] = 0.0;
    uvec4 nx[SBW];
    if (PF) {
        [[unroll]] for (uint j = 0u; j < SBW; j++) {
            const uint off = ((j * W + tid) % span) * 16u;
            nx[j] = off < rowlen ? st_load(lrow[j] + off, lrow[j] + rowlen, unit) : uvec4(0u);
        }
    }
    for (uint step = 0u; step < steps; step++) {
        const uint p0 = step * span * 16u; /* the step's first byte within a row */
        [[unroll]] for (uint j = 0u; j < SBW; j++) {
            const uint f = j * W + tid;
            if (PF) {
                stage[f] = nx[j];
            } else {
                const uint off = p0 + (f % span) * 16u;
                stage[f] = off < rowlen ? st_load(lrow[j] + off, lrow[j] + rowlen, unit) : uvec4(0u);
            }
        }
        /* activations of the step, pre-scaled by 2^-s of the quant each meets */
        for (uint ic = tid; ic < ncols * KS * 64u; ic += W) {
            const uint c = ic / (KS * 64u), i = ic % (KS * 64u);
            const uint bcol = bbase + c * pc.sb1;
            const uint k = step * KS * 256u + 4u * i; /* s-th split's 256 follow each other */
            vec4 v = vec4(0.0);
            if (k < pc.K) {
                if ((pc.flags & 2u) != 0u) v = B_QUAD((bcol + k) >> 2);
                else v = vec4(B_AT(bcol + k * pc.sb0), B_AT(bcol + (k + 1u) * pc.sb0), B_AT(bcol + (k + 2u) * pc.sb0),
                              B_AT(bcol + (k + 3u) * pc.sb0));
            }
#if defined(A_Q4_0)
            /* element e of a block: low nibble of byte e (e < 16) or high nibble of byte e - 16 */
            v *= (i & 4u) == 0u ? vec4(1.0, 1.0 / 256.0, 1.0 / 65536.0, 1.0 / 4096.0)
                                : vec4(1.0 / 16.0, 1.0 / 4096.0, 1.0 / 256.0, 1.0 / 65536.0);
#else
            v *= vec4(1.0, 1.0 / 256.0, 1.0, 1.0 / 256.0);
#endif
            bst[(c * KS + (i >> 6)) * 65u + (i & 63u)] = v;
        }
        barrier();
        if (PF && step + 1u < steps) {
            [[unroll]] for (uint j = 0u; j < SBW; j++) {
                const uint off = p0 + span * 16u + ((j * W + tid) % span) * 16u;
                nx[j] = off < rowlen ? st_load(lrow[j] + off, lrow[j] + rowlen, unit) : uvec4(0u);
            }
        }
        const uint sb = step * KS + s; /* this invocation's super-block */
        if (sb < nsb) {
#if NC == 1
            uvec4 x[SBW];
            [[unroll]] for (uint j = 0u; j < SBW; j++) x[j] = stage[tid * SBW + j];
#endif
            const uint nvalid = min(SG, nb - sb * SG);
            const uint bb = s * 65u;
#if NC == 1
            [[unroll]]
#else
            [[dont_unroll]]
#endif
            for (uint g = 0u; g < SG; g++) {
                if (g >= nvalid) break;
                const uint o = g * BW * 2u; /* the block's byte offset: even */
                uint sc;
                uint qw[QW / 2u];
                if ((o & 3u) == 0u) {
                    sc = SW(o >> 2) & 0xffffu;
                    [[unroll]] for (uint i = 0u; i < QW / 2u; i++)
                        qw[i] = (SW((o >> 2) + i) >> 16) | (SW((o >> 2) + i + 1u) << 16);
                } else {
                    sc = SW(o >> 2) >> 16;
                    [[unroll]] for (uint i = 0u; i < QW / 2u; i++) qw[i] = SW((o >> 2) + 1u + i);
                }
                /* two chains of FMAs per column (no dot(): its sum of
                 * products is a longer dependency and an extra add per 4
                 * weights) */
                float v0[NC], v1[NC];
                [[unroll]] for (uint c = 0u; c < NC; c++) v0[c] = v1[c] = 0.0;
#if defined(A_Q4_0)
                [[unroll]] for (uint i = 0u; i < 4u; i++) {
                    const uint xw = qw[i], yw = xw >> 12;
                    const vec4 lo = vec4(uintBitsToFloat((xw & 0x0000fu) | 0x4b000000u) - 8388616.0,
                                         uintBitsToFloat((xw & 0x00f00u) | 0x4b000000u) - 8390656.0,
                                         uintBitsToFloat((xw & 0xf0000u) | 0x4b000000u) - 8912896.0,
                                         uintBitsToFloat((yw & 0x0f000u) | 0x4b000000u) - 8421376.0);
                    const vec4 hi = vec4(uintBitsToFloat((xw & 0x000f0u) | 0x4b000000u) - 8388736.0,
                                         uintBitsToFloat((xw & 0x0f000u) | 0x4b000000u) - 8421376.0,
                                         uintBitsToFloat((yw & 0x00f00u) | 0x4b000000u) - 8390656.0,
                                         uintBitsToFloat((yw & 0xf0000u) | 0x4b000000u) - 8912896.0);
                    [[unroll]] for (uint c = 0u; c < NC; c++) {
                        if (c >= ncols) break;
                        const uint bi = bb + c * KS * 65u + g * 8u + i;
                        const vec4 bl = bst[bi], bh = bst[bi + 4u];
                        v0[c] = fma(lo.x, bl.x, v0[c]);
                        v1[c] = fma(hi.x, bh.x, v1[c]);
                        v0[c] = fma(lo.y, bl.y, v0[c]);
                        v1[c] = fma(hi.y, bh.y, v1[c]);
                        v0[c] = fma(lo.z, bl.z, v0[c]);
                        v1[c] = fma(hi.z, bh.z, v1[c]);
                        v0[c] = fma(lo.w, bl.w, v0[c]);
                        v1[c] = fma(hi.w, bh.w, v1[c]);
                    }
                }
#else
                [[unroll]] for (uint i = 0u; i < 8u; i++) {
                    const uint xw = qw[i] ^ 0x80808080u, yw = xw >> 16;
                    const vec4 q = vec4(uintBitsToFloat((xw & 0x00ffu) | 0x4b000000u) - 8388736.0,
                                        uintBitsToFloat((xw & 0xff00u) | 0x4b000000u) - 8421376.0,
                                        uintBitsToFloat((yw & 0x00ffu) | 0x4b000000u) - 8388736.0,
                                        uintBitsToFloat((yw & 0xff00u) | 0x4b000000u) - 8421376.0);
                    [[unroll]] for (uint c = 0u; c < NC; c++) {
                        if (c >= ncols) break;
                        const vec4 b = bst[bb + c * KS * 65u + g * 8u + i];
                        v0[c] = fma(q.x, b.x, v0[c]);
                        v1[c] = fma(q.y, b.y, v1[c]);
                        v0[c] = fma(q.z, b.z, v0[c]);
                        v1[c] = fma(q.w, b.w, v1[c]);
                    }
                }
#endif
                const float dv = unpackHalf2x16(sc).x;
                [[unroll]] for (uint c = 0u; c < NC; c++) acc[c] = fma(dv, v0[c] + v1[c], acc[c]);
            }
        }
        barrier();
    }

    /* the KS partial sums of each row and column */
    [[unroll]] for (uint c = 0u; c < NC; c++) red[c * W + tid] = acc[c];
    barrier();
    if (s == 0u && row0 + r < pc.M) {
        [[unroll]] for (uint c = 0u; c < NC; c++) {
            if (c >= ncols) break;
            float t = 0.0;
            for (uint i = 0u; i < KS; i++) t += red[c * W + tid + i];
            d[pc.od + row0 + r + c * pc.sd1 + i2 * pc.sd2 + i3 * pc.sd3] = t;
        }
    }
}
