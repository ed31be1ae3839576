/*
 * gemm_avx512.c - the AVX-512 micro-kernel and packing transpose of the GEMM
 * (gemm.c explains the blocking and the packed layouts).
 *
 * The micro-kernel keeps a 32x12 tile of C in 24 zmm registers: per k it
 * loads two vectors of packed A (32 consecutive m) and broadcasts 12 values
 * of packed B, 24 FMAs for 14 loads. 24 independent accumulators cover the
 * FMA latency of two pipes (4 cycles x 2 pipes needs at least 8), and the
 * two A vectors plus one broadcast fit in the remaining registers. Taller
 * tiles (e.g. 16x28) would load less A but leave no room for the broadcast
 * operands; 32x12 is the usual sweet spot for 32 registers.
 *
 * Edge tiles (m < 32 or n < 12) run the same loop on zero-padded panels
 * and store through masks, so there is no second kernel to get wrong.
 *
 * The transpose turns up to 32 row streams into the [k][width] panel layout
 * 16x16 at a time in registers (unpack, then 128-bit lane shuffles), which
 * is several times faster than a scalar gather for the weight panels.
 */
#include <immintrin.h>
#include <stdint.h>

void gemm_avx512_kernel(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, int mr, int nr,
                        int acc);
void gemm_avx512_transpose(const float *const *rows, int nvalid, int width, int64_t kc, float *out);

#define MR 32
#define NR 12

void gemm_avx512_kernel(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, int mr, int nr,
                        int acc) {
    __m512 a0_0 = _mm512_setzero_ps(), a1_0 = a0_0, a0_1 = a0_0, a1_1 = a0_0, a0_2 = a0_0, a1_2 = a0_0;
    __m512 a0_3 = a0_0, a1_3 = a0_0, a0_4 = a0_0, a1_4 = a0_0, a0_5 = a0_0, a1_5 = a0_0;
    __m512 a0_6 = a0_0, a1_6 = a0_0, a0_7 = a0_0, a1_7 = a0_0, a0_8 = a0_0, a1_8 = a0_0;
    __m512 a0_9 = a0_0, a1_9 = a0_0, a0_10 = a0_0, a1_10 = a0_0, a0_11 = a0_0, a1_11 = a0_0;

#define GEMM_STEP(j)                                   \
    do {                                               \
        __m512 b_ = _mm512_set1_ps(bp[j]);             \
        a0_##j = _mm512_fmadd_ps(x0, b_, a0_##j);      \
        a1_##j = _mm512_fmadd_ps(x1, b_, a1_##j);      \
    } while (0)

    for (int64_t k = 0; k < kc; k++) {
        const __m512 x0 = _mm512_load_ps(ap), x1 = _mm512_load_ps(ap + 16);
        GEMM_STEP(0);
        GEMM_STEP(1);
        GEMM_STEP(2);
        GEMM_STEP(3);
        GEMM_STEP(4);
        GEMM_STEP(5);
        GEMM_STEP(6);
        GEMM_STEP(7);
        GEMM_STEP(8);
        GEMM_STEP(9);
        GEMM_STEP(10);
        GEMM_STEP(11);
        ap += MR;
        bp += NR;
    }
#undef GEMM_STEP

    const __mmask16 k0 = mr >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << mr) - 1);
    const __mmask16 k1 = mr >= 32 ? (__mmask16)0xFFFF : mr > 16 ? (__mmask16)((1u << (mr - 16)) - 1) : 0;

#define GEMM_STORE(j)                                                                         \
    do {                                                                                      \
        if ((j) < nr) {                                                                       \
            float *cj = c + (j) * ldc;                                                        \
            if (acc) {                                                                        \
                a0_##j = _mm512_add_ps(a0_##j, _mm512_maskz_loadu_ps(k0, cj));                \
                a1_##j = _mm512_add_ps(a1_##j, _mm512_maskz_loadu_ps(k1, cj + 16));           \
            }                                                                                 \
            _mm512_mask_storeu_ps(cj, k0, a0_##j);                                            \
            _mm512_mask_storeu_ps(cj + 16, k1, a1_##j);                                       \
        }                                                                                     \
    } while (0)

    GEMM_STORE(0);
    GEMM_STORE(1);
    GEMM_STORE(2);
    GEMM_STORE(3);
    GEMM_STORE(4);
    GEMM_STORE(5);
    GEMM_STORE(6);
    GEMM_STORE(7);
    GEMM_STORE(8);
    GEMM_STORE(9);
    GEMM_STORE(10);
    GEMM_STORE(11);
#undef GEMM_STORE
}

/* r[i] holds row i (16 floats); afterwards r[j] holds column j. */
static inline void gemm_tr16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* r[4g + c]: lane L holds column 4L + c of rows 4g..4g+3 */
    for (int g = 0; g < 4; g++) {
        __m512d t0 = _mm512_castps_pd(t[4 * g]), t1 = _mm512_castps_pd(t[4 * g + 1]);
        __m512d t2 = _mm512_castps_pd(t[4 * g + 2]), t3 = _mm512_castps_pd(t[4 * g + 3]);
        r[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
    for (int cc = 0; cc < 4; cc++) {
        t[4 * cc + 0] = _mm512_shuffle_f32x4(r[cc], r[4 + cc], 0x88);
        t[4 * cc + 1] = _mm512_shuffle_f32x4(r[cc], r[4 + cc], 0xDD);
        t[4 * cc + 2] = _mm512_shuffle_f32x4(r[8 + cc], r[12 + cc], 0x88);
        t[4 * cc + 3] = _mm512_shuffle_f32x4(r[8 + cc], r[12 + cc], 0xDD);
    }
    for (int cc = 0; cc < 4; cc++) {
        r[cc] = _mm512_shuffle_f32x4(t[4 * cc + 0], t[4 * cc + 2], 0x88);
        r[cc + 8] = _mm512_shuffle_f32x4(t[4 * cc + 0], t[4 * cc + 2], 0xDD);
        r[cc + 4] = _mm512_shuffle_f32x4(t[4 * cc + 1], t[4 * cc + 3], 0x88);
        r[cc + 12] = _mm512_shuffle_f32x4(t[4 * cc + 1], t[4 * cc + 3], 0xDD);
    }
}

void gemm_avx512_transpose(const float *const *rows, int nvalid, int width, int64_t kc, float *out) {
    for (int g0 = 0; g0 < width; g0 += 16) {
        const int lanes = width - g0 < 16 ? width - g0 : 16;
        const __mmask16 smask = (__mmask16)((1u << lanes) - 1);
        for (int64_t k = 0; k < kc; k += 16) {
            const int64_t kn = kc - k < 16 ? kc - k : 16;
            const __mmask16 lmask = (__mmask16)((1u << kn) - 1);
            __m512 r[16];
            for (int i = 0; i < 16; i++) {
                int row = g0 + i;
                r[i] = row < nvalid && i < lanes ? _mm512_maskz_loadu_ps(lmask, rows[row] + k) : _mm512_setzero_ps();
            }
            gemm_tr16(r);
            for (int64_t t = 0; t < kn; t++) _mm512_mask_storeu_ps(out + (k + t) * width + g0, smask, r[t]);
        }
    }
}

/* ---- register-tiled row dots --------------------------------------------
 * The few-column path of mul_mat (ops_mulmat.c) computes dot products of
 * weight rows with activation columns. Doing them one pair at a time reloads
 * (and for Q4_0 re-unpacks) each weight block once per column; a 4 x C tile
 * loads each weight vector once for C columns and each column vector once
 * for 4 rows, and keeps the 4 x C partial sums in registers.
 *
 * Numerics match the single dots of the SIMD table up to summation order:
 * float rows accumulate in F32 with FMA; quantized rows take the integer dot
 * of each 32-block with the column's Q8_0 block (exact), times the product of
 * the two block scales, accumulated in F32.
 *
 * Quantized blocks use vpdpbusd (VNNI), which wants one unsigned operand:
 * the weight quants are made unsigned (Q4_0 nibbles as stored, 0..15; Q8_0
 * plus 128) and the bias comes off as bias * sum(column quants), computed
 * once per column block and used as the accumulator's starting value, so a
 * row x column pair costs one vpdpbusd plus the float scale-and-add. Two
 * blocks share a zmm (lanes 0-7 and 8-15 hold partial sums of each). */

#include "tensile/tensile.h"

void gemm_avx512_dot_tile(tsl_type t, int64_t k, const void *const *rows, const void *const *cols, int nc,
                          const void *pf, int64_t pf_len, float *out);

#define TILE_AI static inline __attribute__((always_inline))
#define TILE_VNNI __attribute__((target("avx512vnni")))

/* A 16-float chunk of a row of F32 / F16 / BF16, masked for the tail. */
TILE_AI __m512 tile_ld(tsl_type t, const void *p, int64_t i, __mmask16 m, int full) {
    switch (t) {
    case TSL_TYPE_F16: {
        const tsl_fp16_t *h = (const tsl_fp16_t *)p + i;
        __m256i x = full ? _mm256_loadu_si256((const __m256i *)h) : _mm256_maskz_loadu_epi16(m, h);
        return _mm512_cvtph_ps(x);
    }
    case TSL_TYPE_BF16: {
        const tsl_bf16_t *h = (const tsl_bf16_t *)p + i;
        __m256i x = full ? _mm256_loadu_si256((const __m256i *)h) : _mm256_maskz_loadu_epi16(m, h);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
    }
    default: {
        const float *f = (const float *)p + i;
        return full ? _mm512_loadu_ps(f) : _mm512_maskz_loadu_ps(m, f);
    }
    }
}

/* Prefetch the part of [pf, pf + len) that matches progress done/total, so
 * the next tile's rows arrive in order while this tile computes. Four rows
 * read side by side are four streams, which the hardware prefetcher follows
 * at well under memory speed (measured: half); one sequential software
 * stream over the next rows restores it. */
TILE_AI void tile_prefetch(const char *pf, int64_t len, int64_t done, int64_t total, int64_t *pos) {
    if (!pf) return;
    const int64_t target = len * done / total;
    for (; *pos < target; *pos += 64) _mm_prefetch(pf + *pos, _MM_HINT_T0);
}

TILE_AI void tile_float(tsl_type t, int64_t n, const void *const *r, const void *const *c, const int nc,
                        const char *pf, int64_t pf_len, float *out) {
    __m512 acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = _mm512_setzero_ps();
    int64_t k = 0, pos = 0;
    for (; k + 16 <= n; k += 16) {
        tile_prefetch(pf, pf_len, k + 16, n, &pos);
        __m512 b[4];
        for (int j = 0; j < nc; j++) b[j] = tile_ld(t, c[j], k, 0xFFFF, 1);
        for (int i = 0; i < 4; i++) {
            const __m512 a = tile_ld(t, r[i], k, 0xFFFF, 1);
            for (int j = 0; j < nc; j++) acc[i][j] = _mm512_fmadd_ps(a, b[j], acc[i][j]);
        }
    }
    if (k < n) {
        const __mmask16 m = (__mmask16)((1u << (n - k)) - 1);
        __m512 b[4];
        for (int j = 0; j < nc; j++) b[j] = tile_ld(t, c[j], k, m, 0);
        for (int i = 0; i < 4; i++) {
            const __m512 a = tile_ld(t, r[i], k, m, 0);
            for (int j = 0; j < nc; j++) acc[i][j] = _mm512_fmadd_ps(a, b[j], acc[i][j]);
        }
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < nc; j++) out[i * 4 + j] = _mm512_reduce_add_ps(acc[i][j]);
}

/* Scales of blocks ib and ib+1 (0 for a missing second block) as
 * [d0 x 8 | d1 x 8]. Both block types start with their fp16 scale. */
TILE_AI __m512 tile_scales(const void *blk, size_t bs, int two) {
    const float d0 = _cvtsh_ss(*(const tsl_fp16_t *)blk);
    const float d1 = two ? _cvtsh_ss(*(const tsl_fp16_t *)((const char *)blk + bs)) : 0.0f;
    return _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1);
}

/* The 64 quants of Q8_0 blocks ib, ib+1 (zeros for a missing second). */
TILE_AI __m512i tile_q8(const tsl_block_q8_0 *x, int two) {
    const __m256i lo = _mm256_loadu_si256((const __m256i *)x[0].qs);
    const __m256i hi = two ? _mm256_loadu_si256((const __m256i *)x[1].qs) : _mm256_setzero_si256();
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* The 64 nibbles of Q4_0 blocks ib, ib+1 as unsigned bytes 0..15, in element
 * order: each block is low nibbles (elements 0-15) then high (16-31). */
TILE_AI __m512i tile_q4(const tsl_block_q4_0 *x, int two) {
    const __m128i q0 = _mm_loadu_si128((const __m128i *)x[0].qs);
    const __m128i q1 = two ? _mm_loadu_si128((const __m128i *)x[1].qs) : _mm_setzero_si128();
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
    const __m256i m = _mm256_set1_epi8(0x0f);
    const __m256i lo = _mm256_and_si256(v, m), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); /* lo0 lo1 hi0 hi1 */
    return _mm512_shuffle_i64x2(z, z, 0xD8);                                 /* lo0 hi0 lo1 hi1 */
}

TILE_AI TILE_VNNI void tile_quant_step(int q4, int64_t ib, int two, const void *const *r, const void *const *c, const int nc,
                             __m512 acc[4][4]) {
    const __m512i bias = _mm512_set1_epi8(q4 ? 8 : (char)0x80);
    __m512i bq[4], corr[4];
    __m512 db[4];
    for (int j = 0; j < nc; j++) {
        const tsl_block_q8_0 *y = (const tsl_block_q8_0 *)c[j] + ib;
        bq[j] = tile_q8(y, two);
        /* -bias * sum(quants), per 4-byte lane, as the starting sum */
        corr[j] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, bq[j]));
        db[j] = tile_scales(y, sizeof *y, two);
    }
    for (int i = 0; i < 4; i++) {
        __m512i au;
        __m512 da;
        if (q4) {
            const tsl_block_q4_0 *x = (const tsl_block_q4_0 *)r[i] + ib;
            au = tile_q4(x, two);
            da = tile_scales(x, sizeof *x, two);
        } else {
            const tsl_block_q8_0 *x = (const tsl_block_q8_0 *)r[i] + ib;
            au = _mm512_xor_si512(tile_q8(x, two), bias);
            da = tile_scales(x, sizeof *x, two);
        }
        for (int j = 0; j < nc; j++) {
            const __m512i p = _mm512_dpbusd_epi32(corr[j], au, bq[j]);
            acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(da, db[j]), acc[i][j]);
        }
    }
}

TILE_AI TILE_VNNI void tile_quant(int q4, int64_t n, const void *const *r, const void *const *c, const int nc,
                                  const char *pf, int64_t pf_len, float *out) {
    __m512 acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = _mm512_setzero_ps();
    const int64_t nb = n / 32;
    int64_t ib = 0, pos = 0;
    for (; ib + 2 <= nb; ib += 2) {
        tile_prefetch(pf, pf_len, ib + 2, nb, &pos);
        tile_quant_step(q4, ib, 1, r, c, nc, acc);
    }
    if (ib < nb) tile_quant_step(q4, ib, 0, r, c, nc, acc);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < nc; j++) out[i * 4 + j] = _mm512_reduce_add_ps(acc[i][j]);
}

/* One function per (type, column count) so the tile lives in registers. */
#define TILE_FLOAT_FN(name, T, NC)                                                                       \
    static void name(int64_t n, const void *const *r, const void *const *c, const char *pf, int64_t pfl, \
                     float *out) {                                                                       \
        tile_float(T, n, r, c, NC, pf, pfl, out);                                                        \
    }
#define TILE_QUANT_FN(name, Q4, NC)                                                                      \
    TILE_VNNI static void name(int64_t n, const void *const *r, const void *const *c, const char *pf,    \
                               int64_t pfl, float *out) {                                                \
        tile_quant(Q4, n, r, c, NC, pf, pfl, out);                                                       \
    }

TILE_FLOAT_FN(tile_f32_1, TSL_TYPE_F32, 1)
TILE_FLOAT_FN(tile_f32_2, TSL_TYPE_F32, 2)
TILE_FLOAT_FN(tile_f32_3, TSL_TYPE_F32, 3)
TILE_FLOAT_FN(tile_f32_4, TSL_TYPE_F32, 4)
TILE_FLOAT_FN(tile_f16_1, TSL_TYPE_F16, 1)
TILE_FLOAT_FN(tile_f16_2, TSL_TYPE_F16, 2)
TILE_FLOAT_FN(tile_f16_3, TSL_TYPE_F16, 3)
TILE_FLOAT_FN(tile_f16_4, TSL_TYPE_F16, 4)
TILE_FLOAT_FN(tile_bf16_1, TSL_TYPE_BF16, 1)
TILE_FLOAT_FN(tile_bf16_2, TSL_TYPE_BF16, 2)
TILE_FLOAT_FN(tile_bf16_3, TSL_TYPE_BF16, 3)
TILE_FLOAT_FN(tile_bf16_4, TSL_TYPE_BF16, 4)
TILE_QUANT_FN(tile_q8_1, 0, 1)
TILE_QUANT_FN(tile_q8_2, 0, 2)
TILE_QUANT_FN(tile_q8_3, 0, 3)
TILE_QUANT_FN(tile_q8_4, 0, 4)
TILE_QUANT_FN(tile_q4_1, 1, 1)
TILE_QUANT_FN(tile_q4_2, 1, 2)
TILE_QUANT_FN(tile_q4_3, 1, 3)
TILE_QUANT_FN(tile_q4_4, 1, 4)

typedef void (*tile_fn)(int64_t n, const void *const *r, const void *const *c, const char *pf, int64_t pfl,
                        float *out);

/* out[i*4 + j] = dot(rows[i], cols[j]) for i < 4, j < nc (1..4). rows holds
 * four pointers (repeat one to fill a short tile); quantized types need
 * AVX512-VNNI, which the caller checks. [pf, pf + pf_len), when pf is not
 * NULL, is prefetched along the way (the next tile's rows). */
void gemm_avx512_dot_tile(tsl_type t, int64_t k, const void *const *rows, const void *const *cols, int nc,
                          const void *pf, int64_t pf_len, float *out) {
    static const tile_fn fns[5][4] = {
        {tile_f32_1, tile_f32_2, tile_f32_3, tile_f32_4},     {tile_f16_1, tile_f16_2, tile_f16_3, tile_f16_4},
        {tile_bf16_1, tile_bf16_2, tile_bf16_3, tile_bf16_4}, {tile_q8_1, tile_q8_2, tile_q8_3, tile_q8_4},
        {tile_q4_1, tile_q4_2, tile_q4_3, tile_q4_4},
    };
    int ti;
    switch (t) {
    case TSL_TYPE_F32: ti = 0; break;
    case TSL_TYPE_F16: ti = 1; break;
    case TSL_TYPE_BF16: ti = 2; break;
    case TSL_TYPE_Q8_0: ti = 3; break;
    case TSL_TYPE_Q4_0: ti = 4; break;
    default: return;
    }
    fns[ti][nc - 1](k, rows, cols, (const char *)pf, pf_len, out);
}
