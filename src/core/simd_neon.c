/*
 * simd_neon.c - the AArch64 Advanced SIMD (NEON) kernel table. NEON is part
 * of the AArch64 base, so this file needs no special flags and simd.c hands
 * it out on every arm64 CPU.
 *
 * Trade-offs:
 *  - Float dots keep four 4-wide FMA accumulators; tails run through a small
 *    zero-padded copy so every element goes down the same vector path.
 *  - Quantized dots use SDOT (vdotq_s32) when the compiler targets the
 *    dot-product extension (-march=armv8.2-a+dotprod and later; Apple M1,
 *    Graviton 2+), and otherwise widening multiplies (int8 x int8 -> int16,
 *    two products summed, then pairwise-added into int32). Two products fit
 *    in int16 because activations never hold -128 (|q| <= 127).
 *  - quantize_q8_0 uses FCVTAS, which rounds half away from zero exactly as
 *    the reference's roundf does, and converts NaN to 0 as the reference
 *    tools store it: the same bytes as tsl_quantize with no extra work.
 *  - fp16 conversions use FCVTL/FCVTN (round to nearest even under the
 *    default FPCR), bit-identical to tsl_fp32_to_fp16 for every input.
 */
#include <arm_neon.h>
#include <math.h>

#include "core/simd.h"

static inline float neon_h2f(tsl_fp16_t h) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* ---- float dots ------------------------------------------------------------ */

static float neon_dot_f32(int64_t n, const float *a, const float *b) {
    float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
        s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
        s2 = vfmaq_f32(s2, vld1q_f32(a + i + 8), vld1q_f32(b + i + 8));
        s3 = vfmaq_f32(s3, vld1q_f32(a + i + 12), vld1q_f32(b + i + 12));
    }
    for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
    if (i < n) {
        float ta[4] = {0}, tb[4] = {0};
        memcpy(ta, a + i, (size_t)(n - i) * sizeof *a);
        memcpy(tb, b + i, (size_t)(n - i) * sizeof *b);
        s1 = vfmaq_f32(s1, vld1q_f32(ta), vld1q_f32(tb));
    }
    return vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
}

static inline void neon_f16x8(const tsl_fp16_t *p, float32x4_t *lo, float32x4_t *hi) {
    float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(p));
    *lo = vcvt_f32_f16(vget_low_f16(h));
    *hi = vcvt_high_f32_f16(h);
}

static inline void neon_bf16x8(const tsl_bf16_t *p, float32x4_t *lo, float32x4_t *hi) {
    uint16x8_t h = vld1q_u16(p);
    *lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
    *hi = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
}

/* 16-bit rows (f16 or bf16): 8 elements per step via `cvt`, tail padded. */
#define NEON_DOT16(name, type, cvt)                                                      \
    static float name(int64_t n, const type *a, const type *b) {                         \
        float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0, s2 = s0, s3 = s0;                   \
        float32x4_t al, ah, bl, bh;                                                      \
        int64_t i = 0;                                                                   \
        for (; i + 16 <= n; i += 16) {                                                   \
            cvt(a + i, &al, &ah), cvt(b + i, &bl, &bh);                                  \
            s0 = vfmaq_f32(s0, al, bl), s1 = vfmaq_f32(s1, ah, bh);                      \
            cvt(a + i + 8, &al, &ah), cvt(b + i + 8, &bl, &bh);                          \
            s2 = vfmaq_f32(s2, al, bl), s3 = vfmaq_f32(s3, ah, bh);                      \
        }                                                                                \
        for (; i + 8 <= n; i += 8) {                                                     \
            cvt(a + i, &al, &ah), cvt(b + i, &bl, &bh);                                  \
            s0 = vfmaq_f32(s0, al, bl), s1 = vfmaq_f32(s1, ah, bh);                      \
        }                                                                                \
        if (i < n) {                                                                     \
            type ta[8] = {0}, tb[8] = {0};                                               \
            memcpy(ta, a + i, (size_t)(n - i) * sizeof *a);                              \
            memcpy(tb, b + i, (size_t)(n - i) * sizeof *b);                              \
            cvt(ta, &al, &ah), cvt(tb, &bl, &bh);                                        \
            s2 = vfmaq_f32(s2, al, bl), s3 = vfmaq_f32(s3, ah, bh);                      \
        }                                                                                \
        return vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));              \
    }

NEON_DOT16(neon_dot_f16, tsl_fp16_t, neon_f16x8)
NEON_DOT16(neon_dot_bf16, tsl_bf16_t, neon_bf16x8)

/* ---- quantized dots ---------------------------------------------------------- */

/* acc + sum of x[i] * y[i] over 16 int8 pairs, in 4 int32 lanes */
static inline int32x4_t neon_dot16(int32x4_t acc, int8x16_t x, int8x16_t y) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, x, y);
#else
    int16x8_t p = vmull_s8(vget_low_s8(x), vget_low_s8(y));
    p = vmlal_high_s8(p, x, y);
    return vpadalq_s16(acc, p);
#endif
}

static float neon_dot_q8_0_q8_0(int64_t n, const tsl_block_q8_0 *a, const tsl_block_q8_0 *b) {
    const int64_t nb = n / TSL_QK8_0;
    float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0;
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2) {
        int32x4_t p0 = neon_dot16(vdupq_n_s32(0), vld1q_s8(a[ib].qs), vld1q_s8(b[ib].qs));
        int32x4_t p1 = neon_dot16(vdupq_n_s32(0), vld1q_s8(a[ib + 1].qs), vld1q_s8(b[ib + 1].qs));
        p0 = neon_dot16(p0, vld1q_s8(a[ib].qs + 16), vld1q_s8(b[ib].qs + 16));
        p1 = neon_dot16(p1, vld1q_s8(a[ib + 1].qs + 16), vld1q_s8(b[ib + 1].qs + 16));
        s0 = vmlaq_n_f32(s0, vcvtq_f32_s32(p0), neon_h2f(a[ib].d) * neon_h2f(b[ib].d));
        s1 = vmlaq_n_f32(s1, vcvtq_f32_s32(p1), neon_h2f(a[ib + 1].d) * neon_h2f(b[ib + 1].d));
    }
    if (ib < nb) {
        int32x4_t p = neon_dot16(vdupq_n_s32(0), vld1q_s8(a[ib].qs), vld1q_s8(b[ib].qs));
        p = neon_dot16(p, vld1q_s8(a[ib].qs + 16), vld1q_s8(b[ib].qs + 16));
        s0 = vmlaq_n_f32(s0, vcvtq_f32_s32(p), neon_h2f(a[ib].d) * neon_h2f(b[ib].d));
    }
    return vaddvq_f32(vaddq_f32(s0, s1));
}

/* The 32 weights of a Q4_0 block as signed int8 (-8..7): low nibbles are
 * elements 0..15, high nibbles 16..31. */
static inline void neon_q4_unpack(const uint8_t *qs, int8x16_t *lo, int8x16_t *hi) {
    const uint8x16_t q = vld1q_u8(qs);
    const int8x16_t eight = vdupq_n_s8(8);
    *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), eight);
    *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), eight);
}

static float neon_dot_q4_0_q8_0(int64_t n, const tsl_block_q4_0 *a, const tsl_block_q8_0 *b) {
    const int64_t nb = n / TSL_QK4_0;
    float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0;
    int8x16_t l0, h0, l1, h1;
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2) {
        neon_q4_unpack(a[ib].qs, &l0, &h0);
        neon_q4_unpack(a[ib + 1].qs, &l1, &h1);
        int32x4_t p0 = neon_dot16(vdupq_n_s32(0), l0, vld1q_s8(b[ib].qs));
        int32x4_t p1 = neon_dot16(vdupq_n_s32(0), l1, vld1q_s8(b[ib + 1].qs));
        p0 = neon_dot16(p0, h0, vld1q_s8(b[ib].qs + 16));
        p1 = neon_dot16(p1, h1, vld1q_s8(b[ib + 1].qs + 16));
        s0 = vmlaq_n_f32(s0, vcvtq_f32_s32(p0), neon_h2f(a[ib].d) * neon_h2f(b[ib].d));
        s1 = vmlaq_n_f32(s1, vcvtq_f32_s32(p1), neon_h2f(a[ib + 1].d) * neon_h2f(b[ib + 1].d));
    }
    if (ib < nb) {
        neon_q4_unpack(a[ib].qs, &l0, &h0);
        int32x4_t p = neon_dot16(vdupq_n_s32(0), l0, vld1q_s8(b[ib].qs));
        p = neon_dot16(p, h0, vld1q_s8(b[ib].qs + 16));
        s0 = vmlaq_n_f32(s0, vcvtq_f32_s32(p), neon_h2f(a[ib].d) * neon_h2f(b[ib].d));
    }
    return vaddvq_f32(vaddq_f32(s0, s1));
}

/* ---- conversions ------------------------------------------------------------- */

static void neon_f16_to_f32(int64_t n, const tsl_fp16_t *src, float *dst) {
    int64_t i = 0;
    float32x4_t lo, hi;
    for (; i + 8 <= n; i += 8) {
        neon_f16x8(src + i, &lo, &hi);
        vst1q_f32(dst + i, lo);
        vst1q_f32(dst + i + 4, hi);
    }
    for (; i < n; i++) dst[i] = neon_h2f(src[i]);
}

static void neon_f32_to_f16(int64_t n, const float *src, tsl_fp16_t *dst) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float16x8_t h = vcvt_high_f16_f32(vcvt_f16_f32(vld1q_f32(src + i)), vld1q_f32(src + i + 4));
        vst1q_u16(dst + i, vreinterpretq_u16_f16(h));
    }
    for (; i < n; i++) dst[i] = vget_lane_u16(vreinterpret_u16_f16(vcvt_f16_f32(vdupq_n_f32(src[i]))), 0);
}

static void neon_bf16_to_f32(int64_t n, const tsl_bf16_t *src, float *dst) {
    int64_t i = 0;
    float32x4_t lo, hi;
    for (; i + 8 <= n; i += 8) {
        neon_bf16x8(src + i, &lo, &hi);
        vst1q_f32(dst + i, lo);
        vst1q_f32(dst + i + 4, hi);
    }
    for (; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(dst + i, &u, 4);
    }
}

/* Round to nearest even on the bits; NaN kept quiet (as tsl_fp32_to_bf16). */
static inline uint16x4_t neon_f2b(float32x4_t v) {
    uint32x4_t x = vreinterpretq_u32_f32(v);
    uint32x4_t lsb = vandq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(1));
    uint32x4_t r = vshrq_n_u32(vaddq_u32(vaddq_u32(x, vdupq_n_u32(0x7fff)), lsb), 16);
    uint32x4_t nanv = vorrq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(64));
    uint32x4_t isnan = vcgtq_u32(vandq_u32(x, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
    return vmovn_u32(vbslq_u32(isnan, nanv, r));
}

static void neon_f32_to_bf16(int64_t n, const float *src, tsl_bf16_t *dst) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(dst + i, neon_f2b(vld1q_f32(src + i)));
    for (; i < n; i++) dst[i] = tsl_fp32_to_bf16(src[i]);
}

/* ---- quantize ------------------------------------------------------------------ */

static void neon_quantize_q8_0(int64_t n, const float *src, tsl_block_q8_0 *dst) {
    const int64_t nb = n / TSL_QK8_0;
    for (int64_t ib = 0; ib < nb; ib++) {
        const float *x = src + ib * TSL_QK8_0;
        float32x4_t v[8];
        float32x4_t m = vdupq_n_f32(0.0f);
        for (int k = 0; k < 8; k++) {
            v[k] = vld1q_f32(x + 4 * k);
            m = vmaxnmq_f32(m, vabsq_f32(v[k])); /* NaN ignored, as fmaxf */
        }
        const float d = vmaxvq_f32(m) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        if (isinf(id)) id = 0.0f; /* d subnormal: every product would be inf/NaN, i.e. 0 */
        dst[ib].d = vget_lane_u16(vreinterpret_u16_f16(vcvt_f16_f32(vdupq_n_f32(d))), 0);
        for (int k = 0; k < 8; k += 2) {
            /* FCVTAS: nearest, ties away from zero; NaN -> 0 */
            int32x4_t i0 = vcvtaq_s32_f32(vmulq_n_f32(v[k], id));
            int32x4_t i1 = vcvtaq_s32_f32(vmulq_n_f32(v[k + 1], id));
            int16x8_t w = vcombine_s16(vmovn_s32(i0), vmovn_s32(i1));
            vst1_s8(dst[ib].qs + 4 * k, vmovn_s16(w));
        }
    }
}

/* ---- axpy / scale ------------------------------------------------------------- */

static void neon_axpy_f32(int64_t n, float a, const float *x, float *y) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), a));
        vst1q_f32(y + i + 4, vfmaq_n_f32(vld1q_f32(y + i + 4), vld1q_f32(x + i + 4), a));
    }
    for (; i < n; i++) y[i] += a * x[i];
}

static void neon_scale_f32(int64_t n, float s, const float *x, float *y) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_n_f32(vld1q_f32(x + i), s));
    for (; i < n; i++) y[i] = x[i] * s;
}

static const cpu_simd neon_table = {
    .name = "neon",
    .dot_f32 = neon_dot_f32,
    .dot_f16 = neon_dot_f16,
    .dot_bf16 = neon_dot_bf16,
    .dot_q8_0_q8_0 = neon_dot_q8_0_q8_0,
    .dot_q4_0_q8_0 = neon_dot_q4_0_q8_0,
    .f16_to_f32 = neon_f16_to_f32,
    .f32_to_f16 = neon_f32_to_f16,
    .bf16_to_f32 = neon_bf16_to_f32,
    .f32_to_bf16 = neon_f32_to_bf16,
    .quantize_q8_0 = neon_quantize_q8_0,
    .axpy_f32 = neon_axpy_f32,
    .scale_f32 = neon_scale_f32,
};

const cpu_simd *cpu_simd_neon(void) { return &neon_table; }
