/*
 * quant.c - conversion of float rows to and from the GGUF storage types
 * (F32, F16, BF16, Q8_0, Q4_0), and row dot products.
 *
 * The quantizers here are the reference: their bytes must equal what
 * llama.cpp's quantize_row_*_ref and the `gguf` Python package write, so a
 * file we produce is the file they produce. That fixes every rounding step:
 *  Q8_0  d = amax / 127 (float), id = 1/d (0 when d is 0), q = round half
 *        away from zero of x * id (the float product, not x / d), stored d
 *        rounded to fp16 (nearest even).
 *  Q4_0  m = the element of largest magnitude (first one on ties) with its
 *        sign, d = m / -8, id = 1/d, q = trunc(x * id + 8.5) (two float
 *        roundings: the product, then the sum) clamped to 15; byte j holds
 *        element j in its low nibble and element j + 16 in its high one.
 * Where those tools leave a case to the hardware (1/d overflowing for a block
 * of subnormals, an inf or NaN input) we give what the Python package gives
 * on x86-64: a non-finite product stores 0 (its int cast yields 0 there).
 * llama.cpp's C reference is undefined behaviour on those inputs.
 *
 * Trade-offs: the quantizers are scalar and written for exactness, not speed;
 * the fast path for activations is cpu_simd_get()->quantize_q8_0, tested to
 * give the same bytes. The float contraction pragma is off for clang (gcc
 * does not contract in ISO C mode) so x * id + 8.5f stays two roundings.
 * F16/BF16 conversions and every dot go through the CPU's SIMD table.
 */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "core/simd.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static void quant_q8_0(const float *x, tsl_block_q8_0 *y, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++, x += TSL_QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < TSL_QK8_0; j++) {
            float a = fabsf(x[j]);
            if (a > amax) amax = a;
        }
        const float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        if (isinf(id)) id = 0.0f; /* every product would be inf or NaN: all store 0 */
        y[ib].d = tsl_fp32_to_fp16(d);
        for (int j = 0; j < TSL_QK8_0; j++) {
            const float v = x[j] * id;
            /* |v| <= 127 (plus an ulp) for finite input; NaN only from inf */
            y[ib].qs[j] = isnan(v) ? 0 : (int8_t)fminf(fmaxf(roundf(v), -127.0f), 127.0f);
        }
    }
}

/* trunc(x * id + 8.5) as a nibble: the value is in [0.49, 16.5] for finite
 * input, so the clamp only removes 16; a non-finite sum stores 0. */
static inline uint8_t quant_nibble(float x, float id) {
    const float p = x * id;
    const float v = p + 8.5f;
    if (!isfinite(v)) return 0;
    float t = truncf(v);
    t = t < 0.0f ? 0.0f : t > 15.0f ? 15.0f : t;
    return (uint8_t)t;
}

static void quant_q4_0(const float *x, tsl_block_q4_0 *y, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++, x += TSL_QK4_0) {
        /* start from x[0], not 0: for an all-zero block the sign of d then
         * follows x[0] (-0.0f gives d = +0), as in the Python package;
         * llama.cpp starts from +0 and always stores -0 there. */
        float amax = fabsf(x[0]), max = x[0];
        for (int j = 1; j < TSL_QK4_0; j++) {
            const float a = fabsf(x[j]);
            if (a > amax) {
                amax = a;
                max = x[j];
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[ib].d = tsl_fp32_to_fp16(d);
        for (int j = 0; j < TSL_QK4_0 / 2; j++) {
            const uint8_t lo = quant_nibble(x[j], id);
            const uint8_t hi = quant_nibble(x[j + TSL_QK4_0 / 2], id);
            y[ib].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

static void dequant_q8_0(const tsl_block_q8_0 *x, float *y, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++, y += TSL_QK8_0) {
        const float d = tsl_fp16_to_fp32(x[ib].d);
        for (int j = 0; j < TSL_QK8_0; j++) y[j] = (float)x[ib].qs[j] * d;
    }
}

static void dequant_q4_0(const tsl_block_q4_0 *x, float *y, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++, y += TSL_QK4_0) {
        const float d = tsl_fp16_to_fp32(x[ib].d);
        for (int j = 0; j < TSL_QK4_0 / 2; j++) {
            y[j] = (float)((int)(x[ib].qs[j] & 0x0f) - 8) * d;
            y[j + TSL_QK4_0 / 2] = (float)((int)(x[ib].qs[j] >> 4) - 8) * d;
        }
    }
}

/* n valid for type t, and t one of the convertible types. */
static bool quant_check(tsl_type t, const void *src, const void *dst, int64_t n) {
    if (!src || !dst || n < 0) return false;
    switch (t) {
    case TSL_TYPE_F32:
    case TSL_TYPE_F16:
    case TSL_TYPE_BF16:
    case TSL_TYPE_Q8_0:
    case TSL_TYPE_Q4_0: return n % tsl_type_block_len(t) == 0;
    default: return false;
    }
}

/* A group of G = CORE_Q4S_BLOCKS blocks: block b's quants at 16 b, its
 * scale at 16 G + 2 b; bytes moved as they are (the scales' byte order is
 * the file's) */
void tsl_q4_0_split(const void *src, void *dst, size_t n) {
    const uint8_t *s = src;
    uint8_t *d = dst;
    for (size_t g = 0; g < n; g++, s += CORE_Q4S_BYTES, d += CORE_Q4S_BYTES)
        for (unsigned b = 0; b < CORE_Q4S_BLOCKS; b++) {
            memcpy(d + 16 * CORE_Q4S_BLOCKS + 2 * b, s + 18 * b, 2);
            memcpy(d + 16 * b, s + 18 * b + 2, 16);
        }
}

void tsl_q4_0_unsplit(const void *src, void *dst, size_t n) {
    const uint8_t *s = src;
    uint8_t *d = dst;
    for (size_t g = 0; g < n; g++, s += CORE_Q4S_BYTES, d += CORE_Q4S_BYTES)
        for (unsigned b = 0; b < CORE_Q4S_BLOCKS; b++) {
            memcpy(d + 18 * b, s + 16 * CORE_Q4S_BLOCKS + 2 * b, 2);
            memcpy(d + 18 * b + 2, s + 16 * b, 16);
        }
}

size_t tsl_quantize(tsl_type t, const float *src, void *dst, int64_t n) {
    if (!quant_check(t, src, dst, n)) return 0;
    const cpu_simd *s = cpu_simd_get();
    switch (t) {
    case TSL_TYPE_F32: memmove(dst, src, (size_t)n * sizeof(float)); break;
    case TSL_TYPE_F16: s->f32_to_f16(n, src, (tsl_fp16_t *)dst); break;
    case TSL_TYPE_BF16: s->f32_to_bf16(n, src, (tsl_bf16_t *)dst); break;
    case TSL_TYPE_Q8_0: quant_q8_0(src, (tsl_block_q8_0 *)dst, n / TSL_QK8_0); break;
    case TSL_TYPE_Q4_0: quant_q4_0(src, (tsl_block_q4_0 *)dst, n / TSL_QK4_0); break;
    default: return 0;
    }
    return tsl_row_size(t, n);
}

size_t tsl_dequantize(tsl_type t, const void *src, float *dst, int64_t n) {
    if (!quant_check(t, src, dst, n)) return 0;
    const cpu_simd *s = cpu_simd_get();
    switch (t) {
    case TSL_TYPE_F32: memmove(dst, src, (size_t)n * sizeof(float)); break;
    case TSL_TYPE_F16: s->f16_to_f32(n, (const tsl_fp16_t *)src, dst); break;
    case TSL_TYPE_BF16: s->bf16_to_f32(n, (const tsl_bf16_t *)src, dst); break;
    case TSL_TYPE_Q8_0: dequant_q8_0((const tsl_block_q8_0 *)src, dst, n / TSL_QK8_0); break;
    case TSL_TYPE_Q4_0: dequant_q4_0((const tsl_block_q4_0 *)src, dst, n / TSL_QK4_0); break;
    default: return 0;
    }
    return (size_t)n * sizeof(float); /* bytes written, as tsl_quantize */
}

tsl_type tsl_vec_dot_type(tsl_type t) {
    switch (t) {
    case TSL_TYPE_F32: return TSL_TYPE_F32;
    case TSL_TYPE_F16: return TSL_TYPE_F16;
    case TSL_TYPE_BF16: return TSL_TYPE_BF16;
    case TSL_TYPE_Q8_0:
    case TSL_TYPE_Q4_0: return TSL_TYPE_Q8_0;
    default: return TSL_TYPE_COUNT; /* no dot product for this type */
    }
}

float tsl_vec_dot(tsl_type t, int64_t n, const void *a, const void *b) {
    if (n == 0) return 0.0f;
    if (!quant_check(t, a, b, n)) return NAN;
    const cpu_simd *s = cpu_simd_get();
    switch (t) {
    case TSL_TYPE_F32: return s->dot_f32(n, (const float *)a, (const float *)b);
    case TSL_TYPE_F16: return s->dot_f16(n, (const tsl_fp16_t *)a, (const tsl_fp16_t *)b);
    case TSL_TYPE_BF16: return s->dot_bf16(n, (const tsl_bf16_t *)a, (const tsl_bf16_t *)b);
    case TSL_TYPE_Q8_0: return s->dot_q8_0_q8_0(n, (const tsl_block_q8_0 *)a, (const tsl_block_q8_0 *)b);
    case TSL_TYPE_Q4_0: return s->dot_q4_0_q8_0(n, (const tsl_block_q4_0 *)a, (const tsl_block_q8_0 *)b);
    default: return NAN;
    }
}
