/*
 * simd_generic.c - the portable kernel table: plain C that any compiler can
 * build for any target, and the reference every other table is tested
 * against.
 *
 * Trade-offs:
 *  - Readability first, then speed. The float loops keep 16 independent
 *    partial sums in a small array, a shape gcc and clang turn into vector
 *    code at -O2/-O3 without -ffast-math (each lane of the array is its own
 *    accumulator, so no reassociation is needed), and which shortens the
 *    dependency chain when they do not.
 *  - fp16 and bf16 conversions are written branch-free (selects instead of
 *    ifs) so they vectorize too; they give the same bits as tsl_fp32_to_fp16
 *    and friends for every input (checked exhaustively while developing; the
 *    tests sample it).
 *  - The quantized dots accumulate each block in int32 (exact) and apply the
 *    block's scale product in float, the same order of operations as the
 *    reference dot in llama.cpp, so results match it to the last bit for the
 *    same inputs.
 *  - quantize_q8_0 is the reference quantizer itself (round half away from
 *    zero of x * (1/d) in float), so its bytes equal tsl_quantize's.
 */
#include <math.h>

#include "core/simd.h"

static inline uint32_t gen_f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float gen_u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* fp16 -> fp32. Normal and inf/NaN values only need their exponent
 * re-biased (15 -> 127, and all-ones stays all-ones); zero and subnormals are
 * an integer count of 2^-24, which float holds exactly. */
static inline float gen_h2f(tsl_fp16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    uint32_t norm = (em << 13) + 0x38000000u;
    norm += em >= 0x7c00u ? 0x38000000u : 0u;
    float sub = (float)em * 0x1p-24f;
    uint32_t bits = em < 0x400u ? gen_f2u(sub) : norm;
    return gen_u2f(sign | bits);
}

/* fp32 -> fp16, round to nearest even. In the normal range, rounding is an
 * integer add on the re-biased bits (a carry into the exponent is the right
 * answer). Below 2^-14 the result is subnormal: adding 0.5f makes the FPU
 * round |x| to a multiple of 2^-24 (the ulp of [0.5, 1)), and the low bits of
 * the sum are the count. Overflow gives inf, NaN stays a quiet NaN. */
static inline tsl_fp16_t gen_f2h(float f) {
    uint32_t x = gen_f2u(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    uint32_t norm = (ax - 0x38000000u + 0xfffu + ((ax >> 13) & 1u)) >> 13;
    uint32_t sub = gen_f2u(gen_u2f(ax) + 0.5f) - 0x3f000000u;
    uint32_t r = ax < 0x38800000u ? sub : norm;
    r = ax >= 0x477ff000u ? 0x7c00u : r;
    r = ax > 0x7f800000u ? (0x7e00u | ((ax >> 13) & 0x3ffu)) : r;
    return (tsl_fp16_t)(sign | r);
}

static inline float gen_b2f(tsl_bf16_t h) { return gen_u2f((uint32_t)h << 16); }

/* fp32 -> bf16, round to nearest even; NaN is kept quiet (a carry could
 * otherwise turn a NaN with low payload bits into inf). */
static inline tsl_bf16_t gen_f2b(float f) {
    uint32_t x = gen_f2u(f);
    uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    r = (x & 0x7fffffffu) > 0x7f800000u ? ((x >> 16) | 64u) : r;
    return (tsl_bf16_t)r;
}

#define GEN_LANES 16

static float gen_dot_f32(int64_t n, const float *a, const float *b) {
    float acc[GEN_LANES] = {0};
    int64_t i = 0;
    for (; i + GEN_LANES <= n; i += GEN_LANES)
        for (int j = 0; j < GEN_LANES; j++) acc[j] += a[i + j] * b[i + j];
    float s = 0.0f;
    for (; i < n; i++) s += a[i] * b[i];
    for (int j = 0; j < GEN_LANES; j++) s += acc[j];
    return s;
}

static float gen_dot_f16(int64_t n, const tsl_fp16_t *a, const tsl_fp16_t *b) {
    float acc[GEN_LANES] = {0};
    int64_t i = 0;
    for (; i + GEN_LANES <= n; i += GEN_LANES)
        for (int j = 0; j < GEN_LANES; j++) acc[j] += gen_h2f(a[i + j]) * gen_h2f(b[i + j]);
    float s = 0.0f;
    for (; i < n; i++) s += gen_h2f(a[i]) * gen_h2f(b[i]);
    for (int j = 0; j < GEN_LANES; j++) s += acc[j];
    return s;
}

static float gen_dot_bf16(int64_t n, const tsl_bf16_t *a, const tsl_bf16_t *b) {
    float acc[GEN_LANES] = {0};
    int64_t i = 0;
    for (; i + GEN_LANES <= n; i += GEN_LANES)
        for (int j = 0; j < GEN_LANES; j++) acc[j] += gen_b2f(a[i + j]) * gen_b2f(b[i + j]);
    float s = 0.0f;
    for (; i < n; i++) s += gen_b2f(a[i]) * gen_b2f(b[i]);
    for (int j = 0; j < GEN_LANES; j++) s += acc[j];
    return s;
}

static float gen_dot_q8_0_q8_0(int64_t n, const tsl_block_q8_0 *a, const tsl_block_q8_0 *b) {
    int64_t nb = n / TSL_QK8_0;
    float s = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        int32_t isum = 0;
        for (int j = 0; j < TSL_QK8_0; j++) isum += (int32_t)a[ib].qs[j] * (int32_t)b[ib].qs[j];
        s += (float)isum * (gen_h2f(a[ib].d) * gen_h2f(b[ib].d));
    }
    return s;
}

/* Q4_0 byte j holds element j in its low nibble and element j + 16 in its
 * high nibble; both are stored with +8. Unpacking a block into 32 int8
 * first leaves the same int8 x int8 loop as Q8_0, which compilers
 * vectorize; the fused form does not (about 3x slower). */
static float gen_dot_q4_0_q8_0(int64_t n, const tsl_block_q4_0 *a, const tsl_block_q8_0 *b) {
    int64_t nb = n / TSL_QK4_0;
    float s = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        int8_t w[TSL_QK4_0];
        for (int j = 0; j < TSL_QK4_0 / 2; j++) {
            w[j] = (int8_t)((a[ib].qs[j] & 0x0f) - 8);
            w[j + TSL_QK4_0 / 2] = (int8_t)((a[ib].qs[j] >> 4) - 8);
        }
        int32_t isum = 0;
        for (int j = 0; j < TSL_QK4_0; j++) isum += (int32_t)w[j] * (int32_t)b[ib].qs[j];
        s += (float)isum * (gen_h2f(a[ib].d) * gen_h2f(b[ib].d));
    }
    return s;
}

static void gen_f16_to_f32(int64_t n, const tsl_fp16_t *src, float *dst) {
    for (int64_t i = 0; i < n; i++) dst[i] = gen_h2f(src[i]);
}
static void gen_f32_to_f16(int64_t n, const float *src, tsl_fp16_t *dst) {
    for (int64_t i = 0; i < n; i++) dst[i] = gen_f2h(src[i]);
}
static void gen_bf16_to_f32(int64_t n, const tsl_bf16_t *src, float *dst) {
    for (int64_t i = 0; i < n; i++) dst[i] = gen_b2f(src[i]);
}
static void gen_f32_to_bf16(int64_t n, const float *src, tsl_bf16_t *dst) {
    for (int64_t i = 0; i < n; i++) dst[i] = gen_f2b(src[i]);
}

/* The reference Q8_0 quantizer: d = amax / 127, q = round-half-away(x / d)
 * computed as x * (1/d) in float (the product, not a division, is what the
 * reference tools round). Where 1/d overflows (a block of subnormals) every
 * product would be inf or NaN, which the reference tools store as 0; so does
 * a NaN product (an inf input, whose d is inf and 1/d 0). */
static void gen_quantize_q8_0(int64_t n, const float *src, tsl_block_q8_0 *dst) {
    int64_t nb = n / TSL_QK8_0;
    for (int64_t ib = 0; ib < nb; ib++) {
        const float *x = src + ib * TSL_QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < TSL_QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        id = isinf(id) ? 0.0f : id;
        dst[ib].d = gen_f2h(d);
        for (int j = 0; j < TSL_QK8_0; j++) {
            float v = x[j] * id;
            dst[ib].qs[j] = isnan(v) ? 0 : (int8_t)fminf(fmaxf(roundf(v), -127.0f), 127.0f);
        }
    }
}

static void gen_axpy_f32(int64_t n, float a, const float *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}
static void gen_scale_f32(int64_t n, float s, const float *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s;
}

const cpu_simd cpu_simd_generic = {
    .name = "generic",
    .dot_f32 = gen_dot_f32,
    .dot_f16 = gen_dot_f16,
    .dot_bf16 = gen_dot_bf16,
    .dot_q8_0_q8_0 = gen_dot_q8_0_q8_0,
    .dot_q4_0_q8_0 = gen_dot_q4_0_q8_0,
    .f16_to_f32 = gen_f16_to_f32,
    .f32_to_f16 = gen_f32_to_f16,
    .bf16_to_f32 = gen_bf16_to_f32,
    .f32_to_bf16 = gen_f32_to_bf16,
    .quantize_q8_0 = gen_quantize_q8_0,
    .axpy_f32 = gen_axpy_f32,
    .scale_f32 = gen_scale_f32,
};
