/*
 * q8.glsl - Q8_0 quantization of activations exactly as tsl_quantize does
 * it, for the kernels that write an integer-dot mat-vec's column
 * (quant_q8.comp; rms_norm_mul.comp when the backend fuses the quantizer
 * into the norm):
 *
 * d = amax / 127 and q = round-half-away(x * (1 / d)) clamped to +-127, the
 * division and the reciprocal correctly rounded (rn_div: the GPU's float
 * division is allowed 2.5 ulp); a NaN product and a reciprocal that
 * overflows give 0. The scale kept is d rounded to F16, ties to even (not
 * packHalf2x16, whose rounding is the implementation's choice).
 *
 * The column's layout (what mul_mat_vecq.comp reads), per column: the
 * quants of elements 0..15 of every block (4 words each), then those of
 * 16..31, then per block its scale and the sum of its quants (two floats).
 */
#ifndef TSL_Q8_GLSL
#define TSL_Q8_GLSL

/* v (> 0) rounded to the nearest F16 value, ties to even, in integer
 * arithmetic on its bits (ldexp and the conversion instructions may not be
 * exact on every GPU): the mantissa cut to 10 bits, or below 2^-14 to
 * multiples of 2^-24; beyond the largest F16, inf. */
float f16_round(float v) {
    if (!(v > 0.0) || isinf(v)) return v;
    const uint u = floatBitsToUint(v), e = u >> 23;
    if (e >= 113u) {
        const uint r = (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u;
        return r > floatBitsToUint(65504.0) ? uintBitsToFloat(0x7f800000u) : uintBitsToFloat(r);
    }
    /* v = m 2^(e - 150) = (m >> s) 2^-24 with s = 126 - e (>= 14) */
    const uint m = (u & 0x7fffffu) | (e > 0u ? 0x800000u : 0u), s = (e > 0u ? 126u : 125u) - e;
    if (s > 24u) return 0.0;
    const uint q = m >> s, rest = m & ((1u << s) - 1u), half_ = 1u << (s - 1u);
    const uint qr = q + ((rest > half_ || (rest == half_ && (q & 1u) != 0u)) ? 1u : 0u);
    return float(qr) * (1.0 / 16777216.0);
}

/* a / b (a >= 0, b > 0) correctly rounded: GPU division may be 2.5 ulp
 * off, so the quotient's neighbours within 3 ulp are tried and the one
 * whose residual c b - a (exact in one fma: small, on the grid of c's ulp)
 * is least is kept. a / b is never halfway between two floats here (b is
 * 127 or a float's reciprocal's inverse), so there is no tie to break. */
float rn_div(float a, float b) {
    const float q = a / b;
    if (!(q > 0.0) || isinf(q)) return q;
    const uint u = floatBitsToUint(q);
    float best = q;
    float err = abs(fma(q, b, -a));
    [[unroll]] for (int k = -3; k <= 3; k++) {
        if (k == 0) continue;
        const float c = uintBitsToFloat(uint(int(u) + k));
        const float e = abs(fma(c, b, -a));
        if (e < err) {
            err = e;
            best = c;
        }
    }
    return best;
}

/* The quant of x * id: round half away from zero, clamped to +-127, 0 for a
 * NaN product. The product is rounded to float first, as on the CPU, and
 * then rounded to an integer on its bits: a compiler that fused the
 * multiply into a following add or subtract (x * id - trunc) would round
 * the exact product instead, and a product that rounds to k + 0.5 would go
 * the other way. (With the float rounding, `precise` and all, the H200 gave
 * a quant one off tsl_quantize's in a few columns of the tests; on the bits
 * it gives none.) */
int quant_of(float x, float id) {
    const uint vb = floatBitsToUint(x * id);
    const uint ex = (vb >> 23) & 0xffu;
    if (ex == 0xffu) return (vb & 0x7fffffu) != 0u ? 0 : ((vb >> 31) != 0u ? -127 : 127);
    int q = 0;
    if (ex >= 126u) { /* |v| >= 0.5 */
        const uint m = (vb & 0x7fffffu) | 0x800000u;
        const uint sh = 150u - ex; /* |v| = m 2^-sh; sh in 1..24 here, fewer bits above 2^23 */
        q = ex >= 150u ? 127 : int(min((m >> sh) + ((m >> (sh - 1u)) & 1u), 127u));
    }
    return (vb >> 31) != 0u ? -q : q;
}

/* The scale of a block whose largest magnitude is amax, and the reciprocal
 * its quants are made with (0 for an all-zero block or an overflow). */
void q8_scale(float amax, out float dq, out float id) {
    dq = rn_div(amax, 127.0);
    id = 0.0;
    if (dq != 0.0) {
        id = rn_div(1.0, dq);
        if (isinf(id)) id = 0.0;
    }
}

/* Four activations' quants packed in one word (element j in byte j), and
 * their sum. */
uint q8_word(vec4 x, float id, out int sum) {
    uint word = 0u;
    sum = 0;
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
        const int q = quant_of(x[j], id);
        sum += q;
        word |= (uint(q) & 0xffu) << (8u * j);
    }
    return word;
}

/* Word `part` (0..7, four quants each) of block blk into column array Q
 * (from word base; nb blocks in the column): words 0..3 hold elements 0..15
 * of the block, 4..7 the rest. And the block's scale dq, rounded to F16,
 * with the sum of its quants. Macros: a GLSL function cannot take a
 * buffer. */
#define Q8_STORE_WORD(Q, base, nb, blk, part, word) \
    Q[(base) + ((part) < 4u ? 0u : 4u * (nb)) + (blk) * 4u + ((part) % 4u)] = (word)
#define Q8_STORE_SCALE(Q, base, nb, blk, dq, total)                                  \
    {                                                                                \
        Q[(base) + 8u * (nb) + 2u * (blk)] = floatBitsToUint(f16_round(dq));         \
        Q[(base) + 8u * (nb) + 2u * (blk) + 1u] = floatBitsToUint(float(total));     \
    }

/* Invocation `part` (0..7) of block blk stores its word; part 0 also the
 * scale and the sum of the eight parts' sums, in shared array S at s0 ..
 * s0 + 7. */
#define Q8_STORE(Q, base, nb, blk, part, word, dq, S, s0)                              \
    {                                                                                  \
        Q8_STORE_WORD(Q, base, nb, blk, part, word);                                   \
        if ((part) == 0u) {                                                            \
            int q8_t = 0;                                                              \
            [[unroll]] for (uint q8_i = 0u; q8_i < 8u; q8_i++) q8_t += S[(s0) + q8_i]; \
            Q8_STORE_SCALE(Q, base, nb, blk, dq, q8_t);                                \
        }                                                                              \
    }

#endif
