#version 450
/*
 * cpy_q.comp - dup / cont / cpy into a block format (DST_Q8_0, DST_Q4_0)
 * from any float or other block type (cpy_src.glsl), the source in any
 * strides, the destination in rows of whole blocks (any row strides).
 * Elements are matched in flat row-major order. One invocation per
 * destination block: it gathers the block's 32 source values and
 * quantizes them.
 *
 * The bytes equal tsl_quantize's (src/core/quant.c), step for step:
 *  Q8_0  d = amax / 127, id = 1 / d (0 when d is 0 or 1/d overflows),
 *        q = round half away from zero of x * id, clamped to +-127;
 *  Q4_0  m = the element of largest magnitude (the first on ties) with its
 *        sign, d = m / -8, id = 1 / d, q = trunc(x * id + 8.5) clamped to
 *        15 (two roundings: `precise` keeps the product and the sum apart);
 *  a non-finite product stores 0; d is stored as f16, rounded to nearest
 *  even. Divisions are correctly rounded in integers (conv.glsl), since
 *  Vulkan allows 2.5 ulp for a float division.
 * Every rounding after the product x * id is done on its bits with integer
 * operations (q8_round, q4_nibble): a compiler may fuse a multiply with
 * the add or subtract after it into one FMA, which skips the product's
 * rounding and breaks near-ties (NVIDIA's driver did, on F16 and Q4_0
 * sources, and spirv-opt's unroller drops the NoContraction decoration that
 * `precise` would put there). A product read only as bits has to be a
 * rounded float.
 * One thing the device may still do differently: Vulkan lets a device
 * flush subnormal floats in arithmetic (lavapipe does), so a block whose
 * largest magnitude is below ~2^-118 may quantize its subnormal elements
 * to 0 where the CPU gives +-1 or +-2.
 */
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"
#include "conv.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform P {
    uint na0, na1, na2, na3; /* source shape */
    uint sa0, sa1, sa2, sa3; /* source strides: elements, or 16-bit words for blocks */
    uint nd0, nd1, nd2, nd3; /* destination shape (elements) */
    uint sd0, sd1, sd2, sd3; /* destination strides in 16-bit words (sd0: one block) */
    uint oa, od;
    uint flags;
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

#include "cpy_src.glsl"

layout(binding = 3) writeonly buffer D { uint16_t d[]; };

/* round half away from zero of the float with bits v, clamped to +-127
 * (roundf, then the clamp); NaN gives 0 */
int q8_round(uint v) {
    const uint ax = v & 0x7fffffffu, e = ax >> 23;
    if (ax > 0x7f800000u || e < 126u) return 0; /* NaN, or |v| < 0.5 */
    uint r = 127u;
    if (e < 150u) { /* |v| = m 2^(e - 150): add half a unit, drop the fraction */
        const uint m = (ax & 0x7fffffu) | 0x800000u, sh = 150u - e;
        r = min((m + (1u << (sh - 1u))) >> sh, 127u);
    }
    return (v & 0x80000000u) != 0u ? -int(r) : int(r);
}

/* trunc(p + 8.5) clamped to 0..15 for the float with bits p, the sum
 * rounded to float first (to nearest even), as the CPU computes it; a
 * non-finite sum gives 0. Fixed point in units of 2^-26 (p + 8.5 < 32 fits
 * a uint), a sticky bit for what p has below the unit. */
uint q4_nibble(uint p) {
    const uint ap = p & 0x7fffffffu;
    if (ap >= 0x7f800000u) return 0u;             /* inf or NaN: the sum is not finite */
    const bool neg = (p & 0x80000000u) != 0u;
    if (ap >= 0x42000000u) return neg ? 0u : 15u; /* |p| >= 32: far outside 0..15 */
    uint e = ap >> 23, m = ap & 0x7fffffu;
    if (e == 0u) e = 1u; /* subnormal: no hidden bit */
    else m |= 0x800000u;
    uint P;
    bool sticky;
    if (e >= 124u) {
        P = m << (e - 124u); /* e <= 131: P < 2^31 */
        sticky = false;
    } else {
        const uint sh = 124u - e;
        P = sh >= 32u ? 0u : m >> sh;
        sticky = sh >= 32u ? m != 0u : (m & ((1u << sh) - 1u)) != 0u;
    }
    const uint K = 17u << 25; /* 8.5 */
    uint S;
    bool below = false, above = false; /* the exact sum is S plus (above) or minus (below) a fraction */
    if (!neg) {
        S = K + P;
        above = sticky;
    } else {
        if (P > K || (P == K && sticky)) return 0u; /* negative sum */
        S = K - P;
        below = sticky;
    }
    if (below) S -= 1u; /* X = S + (1 - fraction): a fraction above S */
    const bool frac = above || below;
    if (S < (1u << 25)) return 0u; /* X < 0.5 stays below 1 */
    /* round X to 24 significant bits: its ulp is u units */
    const int b = findMSB(S);
    const uint u = 1u << uint(b - 23), r = S & (u - 1u), hu = u >> 1;
    const bool up = r > hu || (r == hu && (frac || ((S >> uint(b - 23)) & 1u) != 0u));
    const uint R = (S - r) + (up ? u : 0u);
    return min(R >> 26, 15u);
}

void main() {
    TSL_PROGRESS();
    const uint nbr = pc.nd0 >> 5; /* blocks per destination row */
    const uint bi = wg_linear() * 64u + gl_LocalInvocationID.x;
    if (bi >= nbr * pc.nd1 * pc.nd2 * pc.nd3) return;
    const uint b0 = bi % nbr;
    uint r = bi / nbr;
    const uint d1 = r % pc.nd1; r /= pc.nd1;
    const uint d2 = r % pc.nd2, d3 = r / pc.nd2;
    const uint w = pc.od + b0 * pc.sd0 + d1 * pc.sd1 + d2 * pc.sd2 + d3 * pc.sd3;

    /* the source coordinates of the block's first element, then step */
    const uint e0 = (bi / nbr) * pc.nd0 + (b0 << 5);
    uint s = e0;
    uint a0 = s % pc.na0; s /= pc.na0;
    uint a1 = s % pc.na1; s /= pc.na1;
    uint a2 = s % pc.na2, a3 = s / pc.na2;
    float x[32];
    [[unroll]] for (uint j = 0u; j < 32u; j++) {
        x[j] = uintBitsToFloat(src_at(a0, a1, a2, a3));
        if (++a0 == pc.na0) {
            a0 = 0u;
            if (++a1 == pc.na1) {
                a1 = 0u;
                if (++a2 == pc.na2) {
                    a2 = 0u;
                    a3++;
                }
            }
        }
    }

#if defined(DST_Q8_0)
    float amax = 0.0;
    [[unroll]] for (uint j = 0u; j < 32u; j++) {
        const float m = abs(x[j]);
        if (m > amax) amax = m;
    }
    const uint dbits = div_rn_bits(floatBitsToUint(amax), 0x42fe0000u); /* 127.0 */
    uint idbits = dbits != 0u ? div_rn_bits(0x3f800000u, dbits) : 0u;
    if (idbits == 0x7f800000u) idbits = 0u; /* every product would be inf or NaN: all store 0 */
    const float id = uintBitsToFloat(idbits);
    d[w] = uint16_t(f32_to_f16_bits(dbits));
    [[unroll]] for (uint k = 0u; k < 16u; k++) {
        uint pair = 0u;
        [[unroll]] for (uint h = 0u; h < 2u; h++) {
            const int q = q8_round(floatBitsToUint(x[2u * k + h] * id));
            pair |= (uint(q) & 0xffu) << (8u * h);
        }
        d[w + 1u + k] = uint16_t(pair);
    }
#elif defined(DST_Q4_0)
    float amax = abs(x[0]), mx = x[0];
    [[unroll]] for (uint j = 1u; j < 32u; j++) {
        const float m = abs(x[j]);
        if (m > amax) {
            amax = m;
            mx = x[j];
        }
    }
    const uint mb = floatBitsToUint(mx);
    uint dbits, idbits;
    if ((mb & 0x7fffffffu) > 0x7f800000u) {
        /* a NaN first in the block wins the search (nothing compares
         * greater): d and id are that NaN, quieted, as x86 division gives */
        dbits = idbits = mb | 0x400000u;
    } else {
        const uint dabs = div_rn_bits(mb & 0x7fffffffu, 0x41000000u); /* |m| / 8 */
        dbits = dabs | (~mb & 0x80000000u);                            /* the sign of m / -8 */
        idbits = dabs != 0u ? div_rn_bits(0x3f800000u, dabs) | (dbits & 0x80000000u) : 0u;
    }
    const float id = uintBitsToFloat(idbits);
    d[w] = uint16_t(f32_to_f16_bits(dbits));
    [[unroll]] for (uint k = 0u; k < 8u; k++) {
        uint pair = 0u;
        [[unroll]] for (uint h = 0u; h < 2u; h++) {
            const uint j = 2u * k + h;
            uint byte = 0u;
            [[unroll]] for (uint half_ = 0u; half_ < 2u; half_++)
                byte |= q4_nibble(floatBitsToUint(x[j + 16u * half_] * id)) << (4u * half_);
            pair |= byte << (8u * h);
        }
        d[w + 1u + k] = uint16_t(pair);
    }
#else
#error "cpy_q.comp: no DST_ type"
#endif
}
