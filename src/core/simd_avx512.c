/*
 * simd_avx512.c - the AVX-512 kernel table (F, BW, VL, DQ and VNNI: Ice
 * Lake, Sapphire Rapids, Zen 4 and later). Built with the AVX-512 flags;
 * simd.c only hands it out when the CPU and the OS support all of them.
 *
 * Trade-offs:
 *  - Float dots: four 16-wide FMA accumulators (64 elements per step) and a
 *    masked load for the tail, so every length runs vector code and never
 *    reads past the end.
 *  - Quantized dots use vpdpbusd (u8 x s8 -> s32, sums of 4), four blocks
 *    per step, two independent float accumulators.
 *    Q8_0 x Q8_0: two blocks per register; both sides are signed, so the
 *    sign of a moves onto b (|a| . sign(a)*b), a mask register doing the
 *    conditional negate.
 *    Q4_0 x Q8_0: one block per 128-bit lane. The nibbles (0..15, stored
 *    with +8) are the unsigned operand as they are: low nibbles against
 *    activation bytes 0..15, high nibbles against 16..31, which a word
 *    shuffle gathers into the same lanes; the +8 comes off as 8 * sum(y), a
 *    second vpdpbusd pair. No sign trick, no per-byte shuffle of weights.
 *    Measured on Zen 5 (one core, in L2): 0.59 ns per Q4_0 block, 0.58 per
 *    Q8_0 block; streaming weights from memory it runs at memory speed.
 *  - fp16 scales of four blocks are converted by one vcvtph2ps and
 *    multiplied once, then spread over their lanes by one permute.
 *  - quantize_q8_0 does four blocks per step (one fold of their maxima, two
 *    exact vector divisions for d and 1/d) and gives the reference's bytes:
 *    round half away from zero as trunc(v + copysign(0.5 - 2^-25, v)), and
 *    vpmovdb keeps the low byte of each int32, so a NaN (from an inf input)
 *    stores 0 as the reference does.
 */
#include <immintrin.h>
#include <math.h>

#include "core/simd.h"

static inline __mmask16 avx512_tail16(int64_t rem) { return (__mmask16)((1u << rem) - 1u); }

static float avx512_dot_f32(int64_t n, const float *a, const float *b) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), s3);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    if (i < n) {
        __mmask16 m = avx512_tail16(n - i);
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

static inline __m512 avx512_load_f16(const tsl_fp16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
static inline __m512 avx512_load_f16_tail(const tsl_fp16_t *p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

static float avx512_dot_f16(int64_t n, const tsl_fp16_t *a, const tsl_fp16_t *b) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(avx512_load_f16(a + i), avx512_load_f16(b + i), s0);
        s1 = _mm512_fmadd_ps(avx512_load_f16(a + i + 16), avx512_load_f16(b + i + 16), s1);
        s2 = _mm512_fmadd_ps(avx512_load_f16(a + i + 32), avx512_load_f16(b + i + 32), s2);
        s3 = _mm512_fmadd_ps(avx512_load_f16(a + i + 48), avx512_load_f16(b + i + 48), s3);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(avx512_load_f16(a + i), avx512_load_f16(b + i), s0);
    if (i < n) {
        __mmask16 m = avx512_tail16(n - i);
        s1 = _mm512_fmadd_ps(avx512_load_f16_tail(a + i, m), avx512_load_f16_tail(b + i, m), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

static inline __m512 avx512_bf16_cvt(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
static inline __m512 avx512_load_bf16(const tsl_bf16_t *p) {
    return avx512_bf16_cvt(_mm256_loadu_si256((const __m256i *)p));
}

static float avx512_dot_bf16(int64_t n, const tsl_bf16_t *a, const tsl_bf16_t *b) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(avx512_load_bf16(a + i), avx512_load_bf16(b + i), s0);
        s1 = _mm512_fmadd_ps(avx512_load_bf16(a + i + 16), avx512_load_bf16(b + i + 16), s1);
        s2 = _mm512_fmadd_ps(avx512_load_bf16(a + i + 32), avx512_load_bf16(b + i + 32), s2);
        s3 = _mm512_fmadd_ps(avx512_load_bf16(a + i + 48), avx512_load_bf16(b + i + 48), s3);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(avx512_load_bf16(a + i), avx512_load_bf16(b + i), s0);
    if (i < n) {
        __mmask16 m = avx512_tail16(n - i);
        s1 = _mm512_fmadd_ps(avx512_bf16_cvt(_mm256_maskz_loadu_epi16(m, a + i)),
                             avx512_bf16_cvt(_mm256_maskz_loadu_epi16(m, b + i)), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

/* ---- quantized dots -------------------------------------------------------
 * Blocks are 18 (Q4_0) and 34 (Q8_0) bytes, both even, so every field of
 * four consecutive Q8_0 blocks sits at a fixed 16-bit position inside two
 * 64-byte loads of them, and one vpermt2w (a two-register word shuffle)
 * gathers what a step needs from the activations: the four fp16 scales, or
 * the four blocks' quant bytes in the order vpdpbusd wants. These loads
 * overlap each other but never reach past the last of the four blocks.
 * The weights, which stream from memory in a mat-vec, are read with plain
 * 16- or 32-byte loads instead: 64-byte loads that straddle cache lines on
 * the weight stream measured at half the memory throughput (Zen 5), though
 * they were faster from L2. */

/* One 32-entry word index per gather, kept as data because gcc 12 has no
 * _mm512_setr_epi16. Entries >= 32 select from the second register. */
#define W2 32
/* Q8_0 x4, from loads at +0 and +64: bytes 0..15 of each block's quants */
static const uint16_t avx512_idx_q8lo[32] = {
    1,      2,      3,      4,      5,      6,      7,      8,      18,     19,     20,
    21,     22,     23,     24,     25,     W2 + 3, W2 + 4, W2 + 5, W2 + 6, W2 + 7, W2 + 8,
    W2 + 9, W2 + 10, W2 + 20, W2 + 21, W2 + 22, W2 + 23, W2 + 24, W2 + 25, W2 + 26, W2 + 27};
/* Q8_0 x4, from loads at +8 and +72: bytes 16..31 of each block's quants */
static const uint16_t avx512_idx_q8hi[32] = {
    5,      6,      7,      8,      9,       10,      11,      12,      22,      23,      24,
    25,     26,     27,     28,     29,      W2 + 7,  W2 + 8,  W2 + 9,  W2 + 10, W2 + 11, W2 + 12,
    W2 + 13, W2 + 14, W2 + 24, W2 + 25, W2 + 26, W2 + 27, W2 + 28, W2 + 29, W2 + 30, W2 + 31};
/* scales of four Q8_0 blocks (loads at +0 and +64) into words 0..3 */
static const uint16_t avx512_idx_d8[32] = {0, 17, W2 + 2, W2 + 19};
#undef W2

static inline __m512i avx512_idx(const uint16_t *t) { return _mm512_loadu_si512((const void *)t); }

/* da*db of four blocks in lanes 0..3, from the words gathered above */
static inline __m128 avx512_scale4(__m512i da, __m512i db) {
    return _mm_mul_ps(_mm_cvtph_ps(_mm512_castsi512_si128(da)), _mm_cvtph_ps(_mm512_castsi512_si128(db)));
}

static inline __m512i avx512_load_2x32(const int8_t *p0, const int8_t *p1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0)),
                              _mm256_loadu_si256((const __m256i *)p1), 1);
}

/* Two Q8_0 x Q8_0 blocks: 16 int32 partial sums, lanes 0..7 block 0. */
static inline __m512i avx512_dot_q8_pair(const tsl_block_q8_0 *a, const tsl_block_q8_0 *b) {
    __m512i x = avx512_load_2x32(a[0].qs, a[1].qs);
    __m512i y = avx512_load_2x32(b[0].qs, b[1].qs);
    __mmask64 neg = _mm512_movepi8_mask(x);
    __m512i sy = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(x), sy);
}

/* One block of either kind, the scalar way, for the last 0..3 blocks. */
static inline int32_t avx512_hsum_i32(__m256i p) {
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 1));
    return _mm_cvtsi128_si32(h);
}

static float avx512_dot_q8_0_q8_0(int64_t n, const tsl_block_q8_0 *a, const tsl_block_q8_0 *b) {
    const int64_t nb = n / TSL_QK8_0;
    const __m512i idd = avx512_idx(avx512_idx_d8);
    const __m512i idx01 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i idx23 = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    int64_t ib = 0;
    for (; ib + 4 <= nb; ib += 4) {
        const uint8_t *pa = (const uint8_t *)(a + ib), *pb = (const uint8_t *)(b + ib);
        __m512i da = _mm512_permutex2var_epi16(_mm512_loadu_si512(pa), idd, _mm512_loadu_si512(pa + 64));
        __m512i db = _mm512_permutex2var_epi16(_mm512_loadu_si512(pb), idd, _mm512_loadu_si512(pb + 64));
        __m128 d = avx512_scale4(da, db);
        __m512i p0 = avx512_dot_q8_pair(a + ib, b + ib);
        __m512i p1 = avx512_dot_q8_pair(a + ib + 2, b + ib + 2);
        s0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx01, _mm512_castps128_ps512(d)), _mm512_cvtepi32_ps(p0), s0);
        s1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx23, _mm512_castps128_ps512(d)), _mm512_cvtepi32_ps(p1), s1);
    }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
    for (; ib < nb; ib++) {
        __m256i x = _mm256_loadu_si256((const __m256i *)a[ib].qs);
        __m256i y = _mm256_loadu_si256((const __m256i *)b[ib].qs);
        __mmask32 neg = _mm256_movepi8_mask(x);
        __m256i sy = _mm256_mask_sub_epi8(y, neg, _mm256_setzero_si256(), y);
        __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(x), sy);
        s += (float)avx512_hsum_i32(p) * (_cvtsh_ss(a[ib].d) * _cvtsh_ss(b[ib].d));
    }
    return s;
}

typedef struct {
    __m512i q8lo, q8hi, d8, m4, eight, expand;
} avx512_q4_consts;

/* Four Q4_0 blocks against four Q8_0 blocks, with block k in 128-bit lane k:
 * the low nibbles meet quant bytes 0..15, the high ones bytes 16..31, and
 * the +8 bias comes off as 8 * sum(y) (a second vpdpbusd pair). Returns acc
 * plus the scaled partial sums. */
static inline __m512 avx512_dot_q4_quad(const tsl_block_q4_0 *a, const uint8_t *pb, const avx512_q4_consts *k,
                                        __m512 acc) {
    __m512i w = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)a[0].qs));
    w = _mm512_inserti32x4(w, _mm_loadu_si128((const __m128i *)a[1].qs), 1);
    w = _mm512_inserti32x4(w, _mm_loadu_si128((const __m128i *)a[2].qs), 2);
    w = _mm512_inserti32x4(w, _mm_loadu_si128((const __m128i *)a[3].qs), 3);
    __m512i y0 = _mm512_loadu_si512(pb), y1 = _mm512_loadu_si512(pb + 64);
    __m512i ylo = _mm512_permutex2var_epi16(y0, k->q8lo, y1);
    __m512i yhi = _mm512_permutex2var_epi16(_mm512_loadu_si512(pb + 8), k->q8hi, _mm512_loadu_si512(pb + 72));
    __m512i ulo = _mm512_and_si512(w, k->m4), uhi = _mm512_and_si512(_mm512_srli_epi16(w, 4), k->m4);
    __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ulo, ylo);
    p = _mm512_dpbusd_epi32(p, uhi, yhi);
    __m512i c = _mm512_dpbusd_epi32(_mm512_setzero_si512(), k->eight, ylo);
    c = _mm512_dpbusd_epi32(c, k->eight, yhi);
    __m512i da = _mm512_castsi128_si512(
        _mm_setr_epi16((short)a[0].d, (short)a[1].d, (short)a[2].d, (short)a[3].d, 0, 0, 0, 0));
    __m512i db = _mm512_permutex2var_epi16(y0, k->d8, y1);
    __m512 d = _mm512_permutexvar_ps(k->expand, _mm512_castps128_ps512(avx512_scale4(da, db)));
    return _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(p, c)), acc);
}

static float avx512_dot_q4_0_q8_0(int64_t n, const tsl_block_q4_0 *a, const tsl_block_q8_0 *b) {
    const int64_t nb = n / TSL_QK4_0;
    const avx512_q4_consts k = {
        avx512_idx(avx512_idx_q8lo), avx512_idx(avx512_idx_q8hi), avx512_idx(avx512_idx_d8),
        _mm512_set1_epi8(0x0f),      _mm512_set1_epi8(8),
        _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
    };
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    int64_t ib = 0;
    for (; ib + 8 <= nb; ib += 8) {
        s0 = avx512_dot_q4_quad(a + ib, (const uint8_t *)(b + ib), &k, s0);
        s1 = avx512_dot_q4_quad(a + ib + 4, (const uint8_t *)(b + ib + 4), &k, s1);
    }
    if (ib + 4 <= nb) {
        s0 = avx512_dot_q4_quad(a + ib, (const uint8_t *)(b + ib), &k, s0);
        ib += 4;
    }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
    for (; ib < nb; ib++) {
        __m128i t = _mm_loadu_si128((const __m128i *)a[ib].qs);
        __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0f));
        __m256i y = _mm256_loadu_si256((const __m256i *)b[ib].qs);
        __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, y);
        p = _mm256_sub_epi32(p, _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(8), y));
        s += (float)avx512_hsum_i32(p) * (_cvtsh_ss(a[ib].d) * _cvtsh_ss(b[ib].d));
    }
    return s;
}

static void avx512_f16_to_f32(int64_t n, const tsl_fp16_t *src, float *dst) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, avx512_load_f16(src + i));
    if (i < n) {
        __mmask16 m = avx512_tail16(n - i);
        _mm512_mask_storeu_ps(dst + i, m, avx512_load_f16_tail(src + i, m));
    }
}

static void avx512_f32_to_f16(int64_t n, const float *src, tsl_fp16_t *dst) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (i < n) {
        __mmask16 m = avx512_tail16(n - i);
        __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_mask_storeu_epi16(dst + i, m, h);
    }
}

static void avx512_bf16_to_f32(int64_t n, const tsl_bf16_t *src, float *dst) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, avx512_load_bf16(src + i));
    if (i < n) {
        __mmask16 m = avx512_tail16(n - i);
        _mm512_mask_storeu_ps(dst + i, m, avx512_bf16_cvt(_mm256_maskz_loadu_epi16(m, src + i)));
    }
}

/* Round to nearest even on the bits; NaN kept quiet (as tsl_fp32_to_bf16). */
static inline __m256i avx512_f2b(__m512 v) {
    __m512i x = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(x, 16), _mm512_set1_epi32(64));
    return _mm512_cvtepi32_epi16(r);
}

static void avx512_f32_to_bf16(int64_t n, const float *src, tsl_bf16_t *dst) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i *)(dst + i), avx512_f2b(_mm512_loadu_ps(src + i)));
    if (i < n) {
        __mmask16 m = avx512_tail16(n - i);
        _mm256_mask_storeu_epi16(dst + i, m, avx512_f2b(_mm512_maskz_loadu_ps(m, src + i)));
    }
}

/* Round half away from zero of v, to 16 int8 (the low byte of each int32).
 * half | (v & sign) is one ternary-logic op (truth table 0xea). */
static inline __m128i avx512_round_i8(__m512 v) {
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    const __m512i half = _mm512_castps_si512(_mm512_set1_ps(0x1.fffffep-2f));
    __m512 h = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(v), sign, half, 0xea));
    return _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(_mm512_add_ps(v, h)));
}

/* The largest |x| of each of four blocks, block k's in lanes 4k..4k+3; m_k
 * holds the 16 lane-wise maxima of block k. Folding four blocks together
 * shares the shuffles and leaves one vector for the divisions. */
static inline __m512 avx512_absmax4(__m512 m0, __m512 m1, __m512 m2, __m512 m3) {
    __m512 a = _mm512_max_ps(_mm512_shuffle_f32x4(m0, m1, 0x44), _mm512_shuffle_f32x4(m0, m1, 0xee));
    __m512 b = _mm512_max_ps(_mm512_shuffle_f32x4(m2, m3, 0x44), _mm512_shuffle_f32x4(m2, m3, 0xee));
    __m512 c = _mm512_max_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xdd));
    c = _mm512_max_ps(c, _mm512_permute_ps(c, 0x4e));
    return _mm512_max_ps(c, _mm512_permute_ps(c, 0xb1));
}

/* Blocks [0, nb) of x, one at a time (the tail of the loop below). */
static void avx512_quantize_q8_0_blocks(int64_t nb, const float *x, tsl_block_q8_0 *dst) {
    for (int64_t ib = 0; ib < nb; ib++, x += TSL_QK8_0) {
        __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        if (isinf(id)) id = 0.0f; /* d subnormal: every product would be inf/NaN, i.e. 0 */
        dst[ib].d = (tsl_fp16_t)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m512 vid = _mm512_set1_ps(id);
        _mm_storeu_si128((__m128i *)dst[ib].qs, avx512_round_i8(_mm512_mul_ps(v0, vid)));
        _mm_storeu_si128((__m128i *)(dst[ib].qs + 16), avx512_round_i8(_mm512_mul_ps(v1, vid)));
    }
}

/* Four blocks per step: d = amax / 127 and id = 1 / d for all four by two
 * vector divisions (IEEE-exact, as the scalar ones; never the rcp14
 * approximation, which would change bytes). */
static void avx512_quantize_q8_0(int64_t n, const float *src, tsl_block_q8_0 *dst) {
    const int64_t nb = n / TSL_QK8_0;
    int64_t ib = 0;
    for (; ib + 4 <= nb; ib += 4) {
        const float *x = src + ib * TSL_QK8_0;
        __m512 v[8];
        for (int k = 0; k < 8; k++) v[k] = _mm512_loadu_ps(x + 16 * k);
        __m512 m = avx512_absmax4(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])),
                                  _mm512_max_ps(_mm512_abs_ps(v[2]), _mm512_abs_ps(v[3])),
                                  _mm512_max_ps(_mm512_abs_ps(v[4]), _mm512_abs_ps(v[5])),
                                  _mm512_max_ps(_mm512_abs_ps(v[6]), _mm512_abs_ps(v[7])));
        __m512 d = _mm512_div_ps(m, _mm512_set1_ps(127.0f));
        __mmask16 nz = _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_OQ);
        __m512 id = _mm512_maskz_div_ps(nz, _mm512_set1_ps(1.0f), d);
        /* 1/d overflowed (d subnormal): store 0s, as the reference does */
        id = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_abs_ps(id), _mm512_set1_ps(INFINITY), _CMP_LT_OQ), id);
        uint16_t dh[16];
        _mm256_storeu_si256((__m256i *)dh, _mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        /* block k's 1/d in every lane (the shuffle takes an immediate) */
        const __m512 ik[4] = {_mm512_shuffle_f32x4(id, id, 0x00), _mm512_shuffle_f32x4(id, id, 0x55),
                              _mm512_shuffle_f32x4(id, id, 0xaa), _mm512_shuffle_f32x4(id, id, 0xff)};
        for (int k = 0; k < 4; k++) {
            dst[ib + k].d = dh[4 * k];
            _mm_storeu_si128((__m128i *)dst[ib + k].qs, avx512_round_i8(_mm512_mul_ps(v[2 * k], ik[k])));
            _mm_storeu_si128((__m128i *)(dst[ib + k].qs + 16), avx512_round_i8(_mm512_mul_ps(v[2 * k + 1], ik[k])));
        }
    }
    avx512_quantize_q8_0_blocks(nb - ib, src + ib * TSL_QK8_0, dst + ib);
}

static void avx512_axpy_f32(int64_t n, float a, const float *x, float *y) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
        _mm512_storeu_ps(y + i + 16, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16)));
    }
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 m = avx512_tail16(n - i);
        __m512 r = _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
        _mm512_mask_storeu_ps(y + i, m, r);
    }
}

static void avx512_scale_f32(int64_t n, float s, const float *x, float *y) {
    const __m512 vs = _mm512_set1_ps(s);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), vs));
    if (i < n) {
        __mmask16 m = avx512_tail16(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs));
    }
}

static const cpu_simd avx512_table = {
    .name = "avx512",
    .dot_f32 = avx512_dot_f32,
    .dot_f16 = avx512_dot_f16,
    .dot_bf16 = avx512_dot_bf16,
    .dot_q8_0_q8_0 = avx512_dot_q8_0_q8_0,
    .dot_q4_0_q8_0 = avx512_dot_q4_0_q8_0,
    .f16_to_f32 = avx512_f16_to_f32,
    .f32_to_f16 = avx512_f32_to_f16,
    .bf16_to_f32 = avx512_bf16_to_f32,
    .f32_to_bf16 = avx512_f32_to_bf16,
    .quantize_q8_0 = avx512_quantize_q8_0,
    .axpy_f32 = avx512_axpy_f32,
    .scale_f32 = avx512_scale_f32,
};

const cpu_simd *cpu_simd_avx512(void) { return &avx512_table; }
