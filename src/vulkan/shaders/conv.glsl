/*
 * conv.glsl - scalar conversions between F32, F16 and BF16 done on the bits,
 * with the exact rounding of the CPU codec (src/core/types.c), and the
 * correctly rounded float division the block quantizers need.
 *
 * Why not the GPU's own conversions: Vulkan leaves the rounding of an
 * f32 -> f16 conversion and of packHalf2x16 to the implementation, lets a
 * device flush subnormals in any float operation, and allows 2.5 ulp for a
 * division. A copy or a quantizer that must produce the bytes the CPU
 * produces cannot rest on any of that, so the values travel as uint bits
 * and are rounded here with integer operations (a few per element; these
 * kernels are bound by memory, not by arithmetic).
 *
 *   f32_to_f16_bits(x)   round to nearest even; NaN stays NaN (quieted,
 *                        payload kept), overflow gives inf, subnormals exact
 *   f16_to_f32_bits(h)   exact
 *   f32_to_bf16_bits(x)  round to nearest even; NaN quieted
 *   bf16_to_f32_bits(h)  exact (a shift)
 *   div_rn_bits(a, b)    a / b rounded to nearest even, for a >= 0 (finite
 *                        or +inf) and b > 0 (finite or +inf: then 0), as
 *                        IEEE division gives it, subnormals included
 */

uint f32_to_f16_bits(uint x) {
    const uint sign = (x >> 16) & 0x8000u;
    const uint ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00u | ((ax >> 13) & 0x3ffu);
    if (ax >= 0x477ff000u) return sign | 0x7c00u;
    if (ax < 0x38800000u) {
        /* an f16 subnormal or zero: round(|x| * 2^24) to nearest even */
        const uint e = ax >> 23;
        if (e == 0u) return sign; /* an f32 subnormal is below half of 2^-24 */
        const uint m = (ax & 0x7fffffu) | 0x800000u;
        const uint s = 126u - e; /* >= 14 */
        if (s > 24u) return sign;
        uint q = m >> s;
        const uint rem = m & ((1u << s) - 1u), hb = 1u << (s - 1u);
        if (rem > hb || (rem == hb && (q & 1u) != 0u)) q++;
        return sign | q;
    }
    uint h = (((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13);
    const uint rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) h++; /* a carry into the exponent is right */
    return sign | h;
}

uint f16_to_f32_bits(uint h) {
    const uint sign = (h & 0x8000u) << 16;
    const uint e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0u) {
        if (m == 0u) return sign;
        const int p = findMSB(m); /* m * 2^-24 = 1.f * 2^(p - 24) */
        return sign | (uint(p + 103) << 23) | ((m << uint(23 - p)) & 0x7fffffu);
    }
    if (e == 31u) return sign | 0x7f800000u | (m << 13);
    return sign | ((e + 112u) << 23) | (m << 13);
}

uint f32_to_bf16_bits(uint x) {
    if ((x & 0x7fffffffu) > 0x7f800000u) return ((x >> 16) | 64u) & 0xffffu;
    return ((x + 0x7fffu + ((x >> 16) & 1u)) >> 16) & 0xffffu;
}

uint bf16_to_f32_bits(uint h) { return h << 16; }

uint div_rn_bits(uint a, uint b) {
    if ((a & 0x7fffffffu) == 0u || b >= 0x7f800000u) return 0u;
    if (a >= 0x7f800000u) return 0x7f800000u;
    int ea = int(a >> 23), eb = int(b >> 23);
    uint ma = a & 0x7fffffu, mb = b & 0x7fffffu;
    /* normalize subnormal operands to 1.f form */
    if (ea == 0) {
        const int p = findMSB(ma);
        ma = (ma << uint(23 - p)) & 0x7fffffu;
        ea = p - 22;
    }
    if (eb == 0) {
        const int p = findMSB(mb);
        mb = (mb << uint(23 - p)) & 0x7fffffu;
        eb = p - 22;
    }
    ma |= 0x800000u;
    mb |= 0x800000u;
    int e = ea - eb + 127;
    if (ma < mb) {
        ma <<= 1;
        e--;
    }
    /* ma / mb in [1, 2): 24 significant bits and a guard bit by long
     * division, the remainder as the sticky bit (r < 2 mb < 2^25) */
    uint r = ma, q = 0u;
    for (int i = 0; i < 25; i++) {
        q <<= 1;
        if (r >= mb) {
            r -= mb;
            q |= 1u;
        }
        r <<= 1;
    }
    bool sticky = r != 0u;
    if (e <= 0) { /* subnormal result: shift out below the smallest unit first */
        const uint s = uint(1 - e);
        if (s > 25u) return 0u;
        sticky = sticky || (q & ((1u << s) - 1u)) != 0u;
        q >>= s;
        e = 0;
    }
    uint m = q >> 1;
    if ((q & 1u) != 0u && (sticky || (m & 1u) != 0u)) m++;
    /* normal: the hidden bit adds one to the exponent field; a rounding
     * carry moves it on by one more, which is right */
    const uint bits = e == 0 ? m : (uint(e - 1) << 23) + m;
    return bits >= 0x7f800000u ? 0x7f800000u : bits;
}
