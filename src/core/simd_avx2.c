/*
 * simd_avx2.c - the AVX2 + FMA + F16C kernel table (x86-64 from Haswell and
 * Zen 1 on). Built with -mavx2 -mfma -mf16c; simd.c only hands it out when
 * the CPU reports all three.
 *
 * Trade-offs:
 *  - Float dots keep four 8-wide accumulators (32 elements per step) so the
 *    FMA latency (4-5 cycles) is hidden; tails use masked loads rather than a
 *    scalar loop, so short and odd lengths stay vectorized.
 *  - Quantized dots are the inner loop of Q8_0/Q4_0 mat-vec. Without VNNI the
 *    integer products go through vpmaddubsw (u8 x s8 -> s16 pairs) and
 *    vpmaddwd with ones (-> s32). For Q8_0 x Q8_0 both sides are signed, so
 *    |a| and sign(a)*b (the sign trick) make the left side unsigned. For
 *    Q4_0 the nibbles are already unsigned (0..15, stored with +8), so the
 *    +8 bias is taken off afterwards as maddubs(8, b): three instructions
 *    where the sign trick needs four. Four blocks are done per step, with
 *    their four fp16 scale pairs converted by one vcvtph2ps.
 *  - quantize_q8_0 reproduces the reference rounding exactly: round half
 *    away from zero is trunc(v + copysign(0.5 - 2^-25, v)) (exact for every
 *    float in the range the quantizer produces; 0.5 itself would turn
 *    0.49999997 into 1), and the conversion to bytes keeps the low byte, so
 *    a NaN (from an inf input) becomes 0 as it does in the reference.
 */
#include <immintrin.h>
#include <math.h>

#include "core/simd.h"

/* Lanes [0, rem) set, for masked tails (rem in 0..8). */
static inline __m256i avx2_tail_mask(int64_t rem) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline float avx2_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static float avx2_dot_f32(int64_t n, const float *a, const float *b) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    if (i < n) {
        __m256i m = avx2_tail_mask(n - i);
        s1 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), s1);
    }
    return avx2_hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}

static inline __m256 avx2_load_f16(const tsl_fp16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* The last rem (< 8) halves, zero-padded: a masked 16-bit load does not
 * exist, so copy through a small buffer (once per call). */
static inline __m128i avx2_load16_tail(const uint16_t *p, int64_t rem) {
    uint16_t buf[8] = {0};
    memcpy(buf, p, (size_t)rem * sizeof *p);
    return _mm_loadu_si128((const __m128i *)buf);
}

static float avx2_dot_f16(int64_t n, const tsl_fp16_t *a, const tsl_fp16_t *b) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(avx2_load_f16(a + i), avx2_load_f16(b + i), s0);
        s1 = _mm256_fmadd_ps(avx2_load_f16(a + i + 8), avx2_load_f16(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(avx2_load_f16(a + i + 16), avx2_load_f16(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(avx2_load_f16(a + i + 24), avx2_load_f16(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(avx2_load_f16(a + i), avx2_load_f16(b + i), s0);
    if (i < n) {
        __m256 x = _mm256_cvtph_ps(avx2_load16_tail(a + i, n - i));
        __m256 y = _mm256_cvtph_ps(avx2_load16_tail(b + i, n - i));
        s1 = _mm256_fmadd_ps(x, y, s1);
    }
    return avx2_hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}

static inline __m256 avx2_bf16_cvt(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
static inline __m256 avx2_load_bf16(const tsl_bf16_t *p) {
    return avx2_bf16_cvt(_mm_loadu_si128((const __m128i *)p));
}

static float avx2_dot_bf16(int64_t n, const tsl_bf16_t *a, const tsl_bf16_t *b) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(avx2_load_bf16(a + i), avx2_load_bf16(b + i), s0);
        s1 = _mm256_fmadd_ps(avx2_load_bf16(a + i + 8), avx2_load_bf16(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(avx2_load_bf16(a + i + 16), avx2_load_bf16(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(avx2_load_bf16(a + i + 24), avx2_load_bf16(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(avx2_load_bf16(a + i), avx2_load_bf16(b + i), s0);
    if (i < n) {
        __m256 x = avx2_bf16_cvt(avx2_load16_tail(a + i, n - i));
        __m256 y = avx2_bf16_cvt(avx2_load16_tail(b + i, n - i));
        s1 = _mm256_fmadd_ps(x, y, s1);
    }
    return avx2_hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}

/* Four fp16 scales at stride `stride` bytes, as one vector. */
static inline __m128i avx2_gather_d4(const void *p, size_t stride) {
    const uint8_t *q = (const uint8_t *)p;
    uint16_t d0, d1, d2, d3;
    memcpy(&d0, q, 2);
    memcpy(&d1, q + stride, 2);
    memcpy(&d2, q + 2 * stride, 2);
    memcpy(&d3, q + 3 * stride, 2);
    return _mm_setr_epi16((short)d0, (short)d1, (short)d2, (short)d3, 0, 0, 0, 0);
}

/* Products of the four scale pairs, lane k broadcast across the vector. */
static inline __m256 avx2_bcast(__m256 s, int k) { return _mm256_permutevar8x32_ps(s, _mm256_set1_epi32(k)); }

static inline float avx2_scale1(tsl_fp16_t a, tsl_fp16_t b) { return _cvtsh_ss(a) * _cvtsh_ss(b); }

/* Sum over 32 int8 pairs, as 8 int32 lanes. */
static inline __m256i avx2_dot_i8(__m256i x, __m256i y, __m256i ones) {
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p, ones);
}

static float avx2_dot_q8_0_q8_0(int64_t n, const tsl_block_q8_0 *a, const tsl_block_q8_0 *b) {
    const int64_t nb = n / TSL_QK8_0;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t ib = 0;
    for (; ib + 4 <= nb; ib += 4) {
        __m256 d = _mm256_castps128_ps256(_mm_mul_ps(_mm_cvtph_ps(avx2_gather_d4(&a[ib].d, sizeof *a)),
                                                      _mm_cvtph_ps(avx2_gather_d4(&b[ib].d, sizeof *b))));
        __m256i p0 = avx2_dot_i8(_mm256_loadu_si256((const __m256i *)a[ib].qs),
                                 _mm256_loadu_si256((const __m256i *)b[ib].qs), ones);
        __m256i p1 = avx2_dot_i8(_mm256_loadu_si256((const __m256i *)a[ib + 1].qs),
                                 _mm256_loadu_si256((const __m256i *)b[ib + 1].qs), ones);
        __m256i p2 = avx2_dot_i8(_mm256_loadu_si256((const __m256i *)a[ib + 2].qs),
                                 _mm256_loadu_si256((const __m256i *)b[ib + 2].qs), ones);
        __m256i p3 = avx2_dot_i8(_mm256_loadu_si256((const __m256i *)a[ib + 3].qs),
                                 _mm256_loadu_si256((const __m256i *)b[ib + 3].qs), ones);
        s0 = _mm256_fmadd_ps(avx2_bcast(d, 0), _mm256_cvtepi32_ps(p0), s0);
        s1 = _mm256_fmadd_ps(avx2_bcast(d, 1), _mm256_cvtepi32_ps(p1), s1);
        s2 = _mm256_fmadd_ps(avx2_bcast(d, 2), _mm256_cvtepi32_ps(p2), s2);
        s3 = _mm256_fmadd_ps(avx2_bcast(d, 3), _mm256_cvtepi32_ps(p3), s3);
    }
    for (; ib < nb; ib++) {
        __m256i p = avx2_dot_i8(_mm256_loadu_si256((const __m256i *)a[ib].qs),
                                _mm256_loadu_si256((const __m256i *)b[ib].qs), ones);
        s0 = _mm256_fmadd_ps(_mm256_set1_ps(avx2_scale1(a[ib].d, b[ib].d)), _mm256_cvtepi32_ps(p), s0);
    }
    return avx2_hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}

/* sum((nibble - 8) * y) over one block, as 8 int32 lanes. The 32 nibbles
 * come out in element order: low nibbles (elements 0..15), then high. */
static inline __m256i avx2_dot_q4(const uint8_t *qs, const int8_t *ys, __m256i m4, __m256i eight, __m256i ones) {
    __m128i t = _mm_loadu_si128((const __m128i *)qs);
    __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), m4);
    __m256i y = _mm256_loadu_si256((const __m256i *)ys);
    __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(u, y), _mm256_maddubs_epi16(eight, y));
    return _mm256_madd_epi16(p, ones);
}

static float avx2_dot_q4_0_q8_0(int64_t n, const tsl_block_q4_0 *a, const tsl_block_q8_0 *b) {
    const int64_t nb = n / TSL_QK4_0;
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0f), eight = _mm256_set1_epi8(8);
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t ib = 0;
    for (; ib + 4 <= nb; ib += 4) {
        __m256 d = _mm256_castps128_ps256(_mm_mul_ps(_mm_cvtph_ps(avx2_gather_d4(&a[ib].d, sizeof *a)),
                                                      _mm_cvtph_ps(avx2_gather_d4(&b[ib].d, sizeof *b))));
        __m256i p0 = avx2_dot_q4(a[ib].qs, b[ib].qs, m4, eight, ones);
        __m256i p1 = avx2_dot_q4(a[ib + 1].qs, b[ib + 1].qs, m4, eight, ones);
        __m256i p2 = avx2_dot_q4(a[ib + 2].qs, b[ib + 2].qs, m4, eight, ones);
        __m256i p3 = avx2_dot_q4(a[ib + 3].qs, b[ib + 3].qs, m4, eight, ones);
        s0 = _mm256_fmadd_ps(avx2_bcast(d, 0), _mm256_cvtepi32_ps(p0), s0);
        s1 = _mm256_fmadd_ps(avx2_bcast(d, 1), _mm256_cvtepi32_ps(p1), s1);
        s2 = _mm256_fmadd_ps(avx2_bcast(d, 2), _mm256_cvtepi32_ps(p2), s2);
        s3 = _mm256_fmadd_ps(avx2_bcast(d, 3), _mm256_cvtepi32_ps(p3), s3);
    }
    for (; ib < nb; ib++) {
        __m256i p = avx2_dot_q4(a[ib].qs, b[ib].qs, m4, eight, ones);
        s0 = _mm256_fmadd_ps(_mm256_set1_ps(avx2_scale1(a[ib].d, b[ib].d)), _mm256_cvtepi32_ps(p), s0);
    }
    return avx2_hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}

static void avx2_f16_to_f32(int64_t n, const tsl_fp16_t *src, float *dst) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, avx2_load_f16(src + i));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}

static void avx2_f32_to_f16(int64_t n, const float *src, tsl_fp16_t *dst) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) dst[i] = (tsl_fp16_t)_cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

static void avx2_bf16_to_f32(int64_t n, const tsl_bf16_t *src, float *dst) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, avx2_load_bf16(src + i));
    for (; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(dst + i, &u, 4);
    }
}

/* Round to nearest even on the bits; NaN kept quiet (as tsl_fp32_to_bf16). */
static inline __m256i avx2_f2b(__m256 v) {
    __m256i x = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i nanv = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(64));
    __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                       _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_epi8(r, nanv, isnan);
}

static void avx2_f32_to_bf16(int64_t n, const float *src, tsl_bf16_t *dst) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i lo = avx2_f2b(_mm256_loadu_ps(src + i)), hi = avx2_f2b(_mm256_loadu_ps(src + i + 8));
        /* values fit in 16 bits unsigned; packus interleaves 128-bit lanes */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
        _mm256_storeu_si256((__m256i *)(dst + i), p);
    }
    for (; i < n; i++) dst[i] = tsl_fp32_to_bf16(src[i]);
}

/* round half away from zero, then truncate to int32 */
static inline __m256i avx2_round_away(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0x1.fffffep-2f);
    return _mm256_cvttps_epi32(_mm256_add_ps(v, _mm256_or_ps(_mm256_and_ps(v, sign), half)));
}

static void avx2_quantize_q8_0(int64_t n, const float *src, tsl_block_q8_0 *dst) {
    const int64_t nb = n / TSL_QK8_0;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i lowbyte = _mm256_set1_epi16(0xff);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t ib = 0; ib < nb; ib++) {
        const float *x = src + ib * TSL_QK8_0;
        __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
        __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v0, absmask), _mm256_and_ps(v1, absmask)),
                                 _mm256_max_ps(_mm256_and_ps(v2, absmask), _mm256_and_ps(v3, absmask)));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float d = _mm_cvtss_f32(h) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        if (isinf(id)) id = 0.0f; /* d subnormal: every product would be inf/NaN, i.e. 0 */
        dst[ib].d = (tsl_fp16_t)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i i0 = avx2_round_away(_mm256_mul_ps(v0, vid)), i1 = avx2_round_away(_mm256_mul_ps(v1, vid));
        __m256i i2 = avx2_round_away(_mm256_mul_ps(v2, vid)), i3 = avx2_round_away(_mm256_mul_ps(v3, vid));
        /* int32 -> int16 saturating (NaN's 0x80000000 -> 0x8000), then keep
         * the low byte of each (0x8000 -> 0, as the reference's cast). */
        __m256i w01 = _mm256_and_si256(_mm256_packs_epi32(i0, i1), lowbyte);
        __m256i w23 = _mm256_and_si256(_mm256_packs_epi32(i2, i3), lowbyte);
        __m256i b = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(w01, w23), perm);
        _mm256_storeu_si256((__m256i *)dst[ib].qs, b);
    }
}

static void avx2_axpy_f32(int64_t n, float a, const float *x, float *y) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
        _mm256_storeu_ps(y + i + 8, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8)));
    }
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    if (i < n) {
        __m256i m = avx2_tail_mask(n - i);
        __m256 r = _mm256_fmadd_ps(va, _mm256_maskload_ps(x + i, m), _mm256_maskload_ps(y + i, m));
        _mm256_maskstore_ps(y + i, m, r);
    }
}

static void avx2_scale_f32(int64_t n, float s, const float *x, float *y) {
    const __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    if (i < n) {
        __m256i m = avx2_tail_mask(n - i);
        _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(_mm256_maskload_ps(x + i, m), vs));
    }
}

static const cpu_simd avx2_table = {
    .name = "avx2",
    .dot_f32 = avx2_dot_f32,
    .dot_f16 = avx2_dot_f16,
    .dot_bf16 = avx2_dot_bf16,
    .dot_q8_0_q8_0 = avx2_dot_q8_0_q8_0,
    .dot_q4_0_q8_0 = avx2_dot_q4_0_q8_0,
    .f16_to_f32 = avx2_f16_to_f32,
    .f32_to_f16 = avx2_f32_to_f16,
    .bf16_to_f32 = avx2_bf16_to_f32,
    .f32_to_bf16 = avx2_f32_to_bf16,
    .quantize_q8_0 = avx2_quantize_q8_0,
    .axpy_f32 = avx2_axpy_f32,
    .scale_f32 = avx2_scale_f32,
};

const cpu_simd *cpu_simd_avx2(void) { return &avx2_table; }
