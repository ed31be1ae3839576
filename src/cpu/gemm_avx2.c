/*
 * gemm_avx2.c - the AVX2/FMA micro-kernel and packing transpose of the GEMM
 * (gemm.c explains the blocking and the packed layouts).
 *
 * With 16 ymm registers the tile is 16x6: 12 accumulators, two A vectors
 * and one broadcast. Edge tiles go through a small stack tile, since AVX2
 * has no cheap masked float stores of arbitrary width that would make the
 * edge path simpler than a copy.
 */
#include <immintrin.h>
#include <stdint.h>

void gemm_avx2_kernel(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, int mr, int nr,
                      int acc);
void gemm_avx2_transpose(const float *const *rows, int nvalid, int width, int64_t kc, float *out);

#define MR 16
#define NR 6

void gemm_avx2_kernel(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, int mr, int nr,
                      int acc) {
    __m256 a0_0 = _mm256_setzero_ps(), a1_0 = a0_0, a0_1 = a0_0, a1_1 = a0_0, a0_2 = a0_0, a1_2 = a0_0;
    __m256 a0_3 = a0_0, a1_3 = a0_0, a0_4 = a0_0, a1_4 = a0_0, a0_5 = a0_0, a1_5 = a0_0;

#define GEMM_STEP(j)                                   \
    do {                                               \
        __m256 b_ = _mm256_broadcast_ss(bp + (j));     \
        a0_##j = _mm256_fmadd_ps(x0, b_, a0_##j);      \
        a1_##j = _mm256_fmadd_ps(x1, b_, a1_##j);      \
    } while (0)

    for (int64_t k = 0; k < kc; k++) {
        const __m256 x0 = _mm256_load_ps(ap), x1 = _mm256_load_ps(ap + 8);
        GEMM_STEP(0);
        GEMM_STEP(1);
        GEMM_STEP(2);
        GEMM_STEP(3);
        GEMM_STEP(4);
        GEMM_STEP(5);
        ap += MR;
        bp += NR;
    }
#undef GEMM_STEP

    if (mr == MR && nr == NR) {
#define GEMM_STORE(j)                                                              \
    do {                                                                           \
        float *cj = c + (j) * ldc;                                                 \
        if (acc) {                                                                 \
            a0_##j = _mm256_add_ps(a0_##j, _mm256_loadu_ps(cj));                   \
            a1_##j = _mm256_add_ps(a1_##j, _mm256_loadu_ps(cj + 8));               \
        }                                                                          \
        _mm256_storeu_ps(cj, a0_##j);                                              \
        _mm256_storeu_ps(cj + 8, a1_##j);                                          \
    } while (0)
        GEMM_STORE(0);
        GEMM_STORE(1);
        GEMM_STORE(2);
        GEMM_STORE(3);
        GEMM_STORE(4);
        GEMM_STORE(5);
#undef GEMM_STORE
        return;
    }
    float t[NR][MR];
    _mm256_storeu_ps(t[0], a0_0), _mm256_storeu_ps(t[0] + 8, a1_0);
    _mm256_storeu_ps(t[1], a0_1), _mm256_storeu_ps(t[1] + 8, a1_1);
    _mm256_storeu_ps(t[2], a0_2), _mm256_storeu_ps(t[2] + 8, a1_2);
    _mm256_storeu_ps(t[3], a0_3), _mm256_storeu_ps(t[3] + 8, a1_3);
    _mm256_storeu_ps(t[4], a0_4), _mm256_storeu_ps(t[4] + 8, a1_4);
    _mm256_storeu_ps(t[5], a0_5), _mm256_storeu_ps(t[5] + 8, a1_5);
    for (int j = 0; j < nr; j++) {
        float *cj = c + j * ldc;
        if (acc)
            for (int i = 0; i < mr; i++) cj[i] += t[j][i];
        else
            for (int i = 0; i < mr; i++) cj[i] = t[j][i];
    }
}

/* r[i] holds row i (8 floats); afterwards r[j] holds column j. */
static inline void gemm_tr8(__m256 r[8]) {
    __m256 t[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 2; g++) {
        __m256d t0 = _mm256_castps_pd(t[4 * g]), t1 = _mm256_castps_pd(t[4 * g + 1]);
        __m256d t2 = _mm256_castps_pd(t[4 * g + 2]), t3 = _mm256_castps_pd(t[4 * g + 3]);
        r[4 * g + 0] = _mm256_castpd_ps(_mm256_unpacklo_pd(t0, t2));
        r[4 * g + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(t0, t2));
        r[4 * g + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(t1, t3));
        r[4 * g + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(t1, t3));
    }
    /* r[4g + c]: 128-bit lane L holds column 4L + c of rows 4g..4g+3 */
    for (int cc = 0; cc < 4; cc++) {
        __m256 lo = _mm256_permute2f128_ps(r[cc], r[4 + cc], 0x20);
        __m256 hi = _mm256_permute2f128_ps(r[cc], r[4 + cc], 0x31);
        t[cc] = lo;
        t[cc + 4] = hi;
    }
    for (int i = 0; i < 8; i++) r[i] = t[i];
}

void gemm_avx2_transpose(const float *const *rows, int nvalid, int width, int64_t kc, float *out) {
    for (int g0 = 0; g0 < width; g0 += 8) {
        const int lanes = width - g0 < 8 ? width - g0 : 8;
        int64_t k = 0;
        for (; k + 8 <= kc; k += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++) {
                int row = g0 + i;
                r[i] = row < nvalid && i < lanes ? _mm256_loadu_ps(rows[row] + k) : _mm256_setzero_ps();
            }
            gemm_tr8(r);
            if (lanes == 8) {
                for (int t = 0; t < 8; t++) _mm256_storeu_ps(out + (k + t) * width + g0, r[t]);
            } else {
                for (int t = 0; t < 8; t++) {
                    float v[8];
                    _mm256_storeu_ps(v, r[t]);
                    for (int i = 0; i < lanes; i++) out[(k + t) * width + g0 + i] = v[i];
                }
            }
        }
        for (; k < kc; k++)
            for (int i = 0; i < lanes; i++) {
                int row = g0 + i;
                out[k * width + g0 + i] = row < nvalid ? rows[row][k] : 0.0f;
            }
    }
}
