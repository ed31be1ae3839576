/*
 * simd.h - the row kernels: dot products, conversions and the Q8_0
 * quantizer for activations, one table per instruction set.
 *
 * They belong to the core (types and quantization): tsl_quantize,
 * tsl_dequantize and tsl_vec_dot run on them, and every CPU kernel calls them
 * for its inner loops. The table is chosen once, at first use, from what the
 * CPU reports (simd.c); the per-ISA files are compiled with their own flags,
 * so one binary runs on any x86-64.
 */
#ifndef TSL_SIMD_H
#define TSL_SIMD_H

#include "core/core.h"

/* ---- SIMD function table ----------------------------------------------
 * One table per instruction set (simd_generic.c, simd_avx2.c, simd_avx512.c,
 * simd_neon.c), chosen once at start from what the CPU reports. Every entry
 * computes the same result as the generic one up to float reassociation. */
typedef struct cpu_simd {
    const char *name;
    /* dot products over n elements (n a multiple of 32 for the quantized ones) */
    float (*dot_f32)(int64_t n, const float *a, const float *b);
    float (*dot_f16)(int64_t n, const tsl_fp16_t *a, const tsl_fp16_t *b);
    float (*dot_bf16)(int64_t n, const tsl_bf16_t *a, const tsl_bf16_t *b);
    float (*dot_q8_0_q8_0)(int64_t n, const tsl_block_q8_0 *a, const tsl_block_q8_0 *b);
    float (*dot_q4_0_q8_0)(int64_t n, const tsl_block_q4_0 *a, const tsl_block_q8_0 *b);
    /* conversions of n elements */
    void (*f16_to_f32)(int64_t n, const tsl_fp16_t *src, float *dst);
    void (*f32_to_f16)(int64_t n, const float *src, tsl_fp16_t *dst);
    void (*bf16_to_f32)(int64_t n, const tsl_bf16_t *src, float *dst);
    void (*f32_to_bf16)(int64_t n, const float *src, tsl_bf16_t *dst);
    /* quantize activations for the integer dot products (same bytes as
     * tsl_quantize(TSL_TYPE_Q8_0, ...)) */
    void (*quantize_q8_0)(int64_t n, const float *src, tsl_block_q8_0 *dst);
    /* y += a * x ; y = x * s */
    void (*axpy_f32)(int64_t n, float a, const float *x, float *y);
    void (*scale_f32)(int64_t n, float s, const float *x, float *y);
} cpu_simd;

/* The table in use (selected on first call; TSL_SIMD=generic|avx2|avx512
 * forces one the CPU supports). */
const cpu_simd *cpu_simd_get(void);
/* Tables compiled in. Each returns its table whenever its file is built for
 * this target, even if this CPU cannot run it; only cpu_simd_get checks what
 * the CPU supports. */
extern const cpu_simd cpu_simd_generic;
const cpu_simd *cpu_simd_avx2(void);
const cpu_simd *cpu_simd_avx512(void);
const cpu_simd *cpu_simd_neon(void);

#endif /* TSL_SIMD_H */
