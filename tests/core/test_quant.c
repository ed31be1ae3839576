/*
 * test_quant.c - tsl_quantize / tsl_dequantize / tsl_vec_dot and the scalar
 * fp16/bf16 conversions.
 *
 * Checks: known-answer blocks (the rounding rules of each format), round
 * trips within the error each format allows, edge cases (zeros, one large
 * value, subnormal blocks, lengths that are not whole blocks), dot products
 * against a double-precision reference, and conversions of special values.
 * Byte-for-byte agreement with the gguf Python package is checked by
 * tests/python/test_gguf_quant.py through this binary's --emit mode:
 *
 *   core_test_quant --emit q8_0|q4_0|f16|bf16|f32 INFILE OUTFILE
 *
 * reads raw little-endian f32 from INFILE, quantizes it with tsl_quantize
 * and writes the bytes to OUTFILE.
 */
#include <float.h>
#include <stdint.h>

#include "tensile/tensile.h"
#include "test.h"

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Normal-ish random values: sum of uniforms, times scale. */
static float rand_normal(unsigned long long *s, float scale) {
    float v = 0;
    for (int k = 0; k < 4; k++) v += test_rand_f(s, -1.0f, 1.0f);
    return v * scale;
}

/* ---- known answers ------------------------------------------------------ */

static void test_q8_0_known_answer(void) {
    /* amax 127 makes d = 1 and id = 1 exactly, so q = round-half-away(x) */
    float x[32] = {0};
    x[0] = 127.0f;
    x[1] = 0.5f;    /* 1, not 0: halves round away from zero */
    x[2] = -0.5f;   /* -1 */
    x[3] = 2.5f;    /* 3 (nearest-even would give 2) */
    x[4] = -2.5f;   /* -3 */
    x[5] = 0.49999997f; /* 0 */
    x[6] = -126.6f; /* -127 */
    x[7] = 1.4f;    /* 1 */
    x[31] = -7.5f;  /* -8 */
    tsl_block_q8_0 b;
    CHECK(tsl_quantize(TSL_TYPE_Q8_0, x, &b, 32) == sizeof b);
    CHECK(b.d == 0x3c00); /* 1.0 in fp16 */
    const int8_t want[8] = {127, 1, -1, 3, -3, 0, -127, 1};
    for (int j = 0; j < 8; j++) CHECKF(b.qs[j] == want[j], "j=%d got %d want %d", j, b.qs[j], want[j]);
    CHECK(b.qs[31] == -8);
    for (int j = 8; j < 31; j++) CHECK(b.qs[j] == 0);
}

static void test_q4_0_known_answer(void) {
    /* largest magnitude -8 gives d = -8 / -8 = 1, id = 1: q = trunc(x + 8.5) */
    float x[32] = {0};
    x[0] = -8.0f;  /* 0 */
    x[1] = 7.0f;   /* 15 */
    x[2] = 7.9f;   /* 16 -> clamped to 15 */
    x[3] = 0.5f;   /* 9 */
    x[4] = -0.5f;  /* 8 */
    x[5] = -3.2f;  /* 5 */
    x[6] = 0.49f;  /* 8 */
    x[16] = 3.0f;  /* 11, high nibble of byte 0 */
    x[17] = -7.6f; /* 0 (trunc 0.9) */
    x[31] = 1.0f;  /* 9, high nibble of byte 15 */
    tsl_block_q4_0 b;
    CHECK(tsl_quantize(TSL_TYPE_Q4_0, x, &b, 32) == sizeof b);
    CHECK(b.d == 0x3c00);
    CHECK(b.qs[0] == (0x0 | (11 << 4)));
    CHECK(b.qs[1] == (15 | (0 << 4)));
    CHECK(b.qs[2] == (15 | (8 << 4)));
    CHECK(b.qs[3] == (9 | (8 << 4)));
    CHECK(b.qs[4] == (8 | (8 << 4)));
    CHECK(b.qs[5] == (5 | (8 << 4)));
    CHECK(b.qs[6] == (8 | (8 << 4)));
    CHECK(b.qs[15] == (8 | (9 << 4)));

    /* a positive maximum gives a negative d: x = 8 -> q 0, x = -7 -> 15 */
    float y[32] = {0};
    y[0] = 8.0f;
    y[1] = -7.0f;
    y[2] = -8.0f; /* same magnitude as y[0] but later: y[0] sets the sign */
    CHECK(tsl_quantize(TSL_TYPE_Q4_0, y, &b, 32) == sizeof b);
    CHECK(b.d == 0xbc00); /* -1.0 */
    CHECK((b.qs[0] & 15) == 0);
    CHECK((b.qs[1] & 15) == 15);
    CHECK((b.qs[2] & 15) == 15); /* trunc(8 + 8.5) = 16 -> 15 */
    float back[32];
    CHECK(tsl_dequantize(TSL_TYPE_Q4_0, &b, back, 32) == 32 * sizeof(float));
    CHECK(back[0] == 8.0f && back[1] == -7.0f && back[2] == -7.0f && back[3] == 0.0f);
}

/* ---- round trips --------------------------------------------------------- */

/* Error bound of one Q8_0 element: half a step, plus what rounding d to
 * fp16 moved the grid (|q| <= 127 steps), plus float slack. */
static void check_q8_0_block(const float *x, const tsl_block_q8_0 *b, const float *back) {
    double amax = 0;
    for (int j = 0; j < 32; j++)
        if (fabs(x[j]) > amax) amax = fabs(x[j]); /* not fmax: gcc 12 aarch64 -O2 ICEs on that reduction */
    double d = (double)(float)(amax / 127.0), d16 = tsl_fp16_to_fp32(b->d);
    double bound = d / 2 * (1 + 1e-6) + 127 * fabs(d - d16) + amax * 1e-7 + 1e-30;
    for (int j = 0; j < 32; j++)
        CHECKF(fabs((double)x[j] - back[j]) <= bound, "x=%.9g back=%.9g bound=%.3g", x[j], back[j], bound);
}

static void check_q4_0_block(const float *x, const tsl_block_q4_0 *b, const float *back) {
    double amax = 0, max = 0;
    for (int j = 0; j < 32; j++)
        if (fabs(x[j]) > amax) amax = fabs(x[j]), max = x[j];
    double d = fabs(max / 8.0), d16 = fabs(tsl_fp16_to_fp32(b->d));
    double grid = 8 * fabs(d - d16) + amax * 1e-7 + 1e-30;
    for (int j = 0; j < 32; j++) {
        /* x / d above 7.5 steps would need q = 16, which is clamped to 15 */
        double steps = d > 0 ? x[j] / (max / -8.0) : 0;
        double bound = (steps > 7.5 - 1e-5 ? d : d / 2) * (1 + 1e-6) + grid;
        CHECKF(fabs((double)x[j] - back[j]) <= bound, "x=%.9g back=%.9g bound=%.3g", x[j], back[j], bound);
    }
}

static void test_round_trip_quantized(void) {
    unsigned long long s = 42;
    const float scales[] = {1e-6f, 1e-3f, 1.0f, 37.0f, 1e3f, 6e4f};
    enum { N = 32 * 64 };
    static float x[N], back[N];
    static tsl_block_q8_0 q8[N / 32];
    static tsl_block_q4_0 q4[N / 32];
    for (size_t k = 0; k < sizeof scales / sizeof scales[0]; k++) {
        for (int kind = 0; kind < 3; kind++) {
            for (int i = 0; i < N; i++) {
                if (kind == 0) x[i] = rand_normal(&s, scales[k]);
                else if (kind == 1) x[i] = test_rand_f(&s, 0.0f, scales[k]);   /* one-sided */
                else x[i] = -test_rand_f(&s, 0.0f, scales[k]);                 /* all negative */
            }
            CHECK(tsl_quantize(TSL_TYPE_Q8_0, x, q8, N) == sizeof q8);
            CHECK(tsl_dequantize(TSL_TYPE_Q8_0, q8, back, N) == sizeof back);
            for (int ib = 0; ib < N / 32; ib++) check_q8_0_block(x + ib * 32, &q8[ib], back + ib * 32);
            CHECK(tsl_quantize(TSL_TYPE_Q4_0, x, q4, N) == sizeof q4);
            CHECK(tsl_dequantize(TSL_TYPE_Q4_0, q4, back, N) == sizeof back);
            for (int ib = 0; ib < N / 32; ib++) check_q4_0_block(x + ib * 32, &q4[ib], back + ib * 32);
        }
    }
}

static void test_round_trip_float(void) {
    unsigned long long s = 7;
    enum { N = 1000 }; /* not a multiple of any vector width */
    static float x[N], back[N];
    static uint16_t h[N];
    const float scales[] = {1e-4f, 1.0f, 3e3f};
    for (size_t k = 0; k < 3; k++) {
        for (int i = 0; i < N; i++) x[i] = rand_normal(&s, scales[k]);
        x[0] = 0.0f;
        CHECK(tsl_quantize(TSL_TYPE_F16, x, h, N) == N * 2);
        CHECK(tsl_dequantize(TSL_TYPE_F16, h, back, N) == N * 4);
        for (int i = 0; i < N; i++) {
            /* relative 2^-11 in the normal range, half a subnormal step below it */
            double tol = fmax(fabs(x[i]) * 0x1p-11, 0x1p-25);
            CHECKF(fabs((double)x[i] - back[i]) <= tol, "f16 x=%.9g back=%.9g", x[i], back[i]);
        }
        CHECK(tsl_quantize(TSL_TYPE_BF16, x, h, N) == N * 2);
        CHECK(tsl_dequantize(TSL_TYPE_BF16, h, back, N) == N * 4);
        for (int i = 0; i < N; i++)
            CHECKF(fabs((double)x[i] - back[i]) <= fabs(x[i]) * 0x1p-8, "bf16 x=%.9g back=%.9g", x[i], back[i]);
        CHECK(tsl_quantize(TSL_TYPE_F32, x, back, N) == N * 4);
        CHECK(memcmp(x, back, sizeof x) == 0);
    }
}

/* ---- edge cases ---------------------------------------------------------- */

static void test_edge_cases(void) {
    float x[64] = {0}, back[64];
    tsl_block_q8_0 q8[2];
    tsl_block_q4_0 q4[2];

    /* all zeros: d = 0 and every q 0 (Q4_0 stores the +8 bias) */
    CHECK(tsl_quantize(TSL_TYPE_Q8_0, x, q8, 64) == sizeof q8);
    for (int ib = 0; ib < 2; ib++) {
        CHECK(q8[ib].d == 0);
        for (int j = 0; j < 32; j++) CHECK(q8[ib].qs[j] == 0);
    }
    CHECK(tsl_quantize(TSL_TYPE_Q4_0, x, q4, 64) == sizeof q4);
    for (int ib = 0; ib < 2; ib++) {
        CHECK((q4[ib].d & 0x7fff) == 0);
        for (int j = 0; j < 16; j++) CHECK(q4[ib].qs[j] == 0x88);
    }
    CHECK(tsl_dequantize(TSL_TYPE_Q4_0, q4, back, 64) == sizeof back);
    for (int j = 0; j < 64; j++) CHECK(back[j] == 0.0f);

    /* one huge value among small ones: it survives, the rest round to the
     * grid (most to 0) within half a step */
    for (int j = 0; j < 64; j++) x[j] = 0.001f * (float)(j % 7 - 3);
    x[5] = 5000.0f;
    x[40] = -5000.0f;
    CHECK(tsl_quantize(TSL_TYPE_Q8_0, x, q8, 64) == sizeof q8);
    CHECK(tsl_dequantize(TSL_TYPE_Q8_0, q8, back, 64) == sizeof back);
    CHECK(q8[0].qs[5] == 127 && q8[1].qs[8] == -127);
    check_q8_0_block(x, &q8[0], back);
    check_q8_0_block(x + 32, &q8[1], back + 32);
    CHECK(tsl_quantize(TSL_TYPE_Q4_0, x, q4, 64) == sizeof q4);
    CHECK(tsl_dequantize(TSL_TYPE_Q4_0, q4, back, 64) == sizeof back);
    CHECK(back[5] == 5000.0f && back[40] == -5000.0f); /* the extreme maps to q = 0 exactly */
    check_q4_0_block(x, &q4[0], back);
    check_q4_0_block(x + 32, &q4[1], back + 32);

    /* a block so small that 1/d overflows: the reference tools store 0s */
    for (int j = 0; j < 32; j++) x[j] = (j & 1 ? -1e-39f : 2e-39f);
    CHECK(tsl_quantize(TSL_TYPE_Q8_0, x, q8, 32) == sizeof q8[0]);
    CHECK(q8[0].d == 0);
    for (int j = 0; j < 32; j++) CHECK(q8[0].qs[j] == 0);

    /* lengths that are not whole blocks, bad types, NULLs */
    CHECK(tsl_quantize(TSL_TYPE_Q8_0, x, q8, 33) == 0);
    CHECK(tsl_quantize(TSL_TYPE_Q4_0, x, q4, 31) == 0);
    CHECK(tsl_quantize(TSL_TYPE_Q8_0, x, q8, -32) == 0);
    CHECK(tsl_dequantize(TSL_TYPE_Q4_0, q4, back, 16) == 0);
    CHECK(tsl_quantize(TSL_TYPE_I32, x, back, 4) == 0);
    CHECK(tsl_quantize((tsl_type)99, x, back, 4) == 0);
    CHECK(tsl_quantize(TSL_TYPE_F16, NULL, back, 4) == 0);
    CHECK(tsl_dequantize(TSL_TYPE_F16, back, NULL, 4) == 0);
    CHECK(tsl_quantize(TSL_TYPE_F16, x, back, 3) == 6); /* plain types take any n */
    CHECK(tsl_quantize(TSL_TYPE_Q8_0, x, q8, 0) == 0);  /* nothing to write */
}

/* ---- dot products -------------------------------------------------------- */

static void check_dot(tsl_type t, int64_t n, const void *a, const void *b, const float *da, const float *db) {
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        ref += (double)da[i] * db[i];
        mag += fabs((double)da[i] * db[i]);
    }
    float got = tsl_vec_dot(t, n, a, b);
    /* float summation of n terms in at least 16 lanes */
    double tol = ((double)n / 16 + 16) * FLT_EPSILON * mag + 1e-30;
    CHECKF(fabs(got - ref) <= tol, "%s n=%lld got %.9g ref %.9g tol %.3g", tsl_type_name(t), (long long)n,
           got, ref, tol);
}

static void test_vec_dot(void) {
    enum { N = 32 * 130 };
    static float x[N], y[N], dx[N], dy[N];
    static uint16_t hx[N], hy[N];
    static tsl_block_q8_0 ax[N / 32], by[N / 32];
    static tsl_block_q4_0 cx[N / 32];
    unsigned long long s = 99;
    for (int i = 0; i < N; i++) {
        x[i] = rand_normal(&s, 1.0f);
        y[i] = rand_normal(&s, 0.5f) + 0.1f; /* a mean, so cancellation is not total */
    }
    const int64_t lens[] = {1, 7, 16, 31, 64, 100, 1023, N};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        int64_t n = lens[k];
        check_dot(TSL_TYPE_F32, n, x, y, x, y);
        tsl_quantize(TSL_TYPE_F16, x, hx, n);
        tsl_quantize(TSL_TYPE_F16, y, hy, n);
        tsl_dequantize(TSL_TYPE_F16, hx, dx, n);
        tsl_dequantize(TSL_TYPE_F16, hy, dy, n);
        check_dot(TSL_TYPE_F16, n, hx, hy, dx, dy);
        tsl_quantize(TSL_TYPE_BF16, x, hx, n);
        tsl_quantize(TSL_TYPE_BF16, y, hy, n);
        tsl_dequantize(TSL_TYPE_BF16, hx, dx, n);
        tsl_dequantize(TSL_TYPE_BF16, hy, dy, n);
        check_dot(TSL_TYPE_BF16, n, hx, hy, dx, dy);
        if (n % 32) {
            CHECK(isnan(tsl_vec_dot(TSL_TYPE_Q8_0, n, ax, by)));
            continue;
        }
        /* quantized: compare with the dot of the dequantized rows */
        tsl_quantize(TSL_TYPE_Q8_0, y, by, n);
        tsl_dequantize(TSL_TYPE_Q8_0, by, dy, n);
        tsl_quantize(TSL_TYPE_Q8_0, x, ax, n);
        tsl_dequantize(TSL_TYPE_Q8_0, ax, dx, n);
        check_dot(TSL_TYPE_Q8_0, n, ax, by, dx, dy);
        tsl_quantize(TSL_TYPE_Q4_0, x, cx, n);
        tsl_dequantize(TSL_TYPE_Q4_0, cx, dx, n);
        check_dot(TSL_TYPE_Q4_0, n, cx, by, dx, dy);
        /* and the quantized dot is close to the exact float dot */
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < n; i++) ref += (double)x[i] * y[i], mag += fabs((double)x[i] * y[i]);
        CHECK(fabs(tsl_vec_dot(TSL_TYPE_Q8_0, n, ax, by) - ref) <= 0.02 * mag);
    }
    CHECK(tsl_vec_dot(TSL_TYPE_F32, 0, x, y) == 0.0f);
    CHECK(isnan(tsl_vec_dot(TSL_TYPE_I32, 4, x, y)));
    CHECK(isnan(tsl_vec_dot(TSL_TYPE_F32, 4, NULL, y)));
    CHECK(isnan(tsl_vec_dot(TSL_TYPE_F32, -4, x, y)));
    CHECK(tsl_vec_dot_type(TSL_TYPE_F32) == TSL_TYPE_F32);
    CHECK(tsl_vec_dot_type(TSL_TYPE_F16) == TSL_TYPE_F16);
    CHECK(tsl_vec_dot_type(TSL_TYPE_BF16) == TSL_TYPE_BF16);
    CHECK(tsl_vec_dot_type(TSL_TYPE_Q8_0) == TSL_TYPE_Q8_0);
    CHECK(tsl_vec_dot_type(TSL_TYPE_Q4_0) == TSL_TYPE_Q8_0);
    CHECK(!tsl_type_valid((int)tsl_vec_dot_type(TSL_TYPE_I32)));
}

/* ---- scalar conversions ---------------------------------------------------- */

static void test_fp16_special(void) {
    CHECK(tsl_fp32_to_fp16(0.0f) == 0x0000);
    CHECK(tsl_fp32_to_fp16(-0.0f) == 0x8000);
    CHECK(tsl_fp32_to_fp16(1.0f) == 0x3c00);
    CHECK(tsl_fp32_to_fp16(-2.0f) == 0xc000);
    CHECK(tsl_fp32_to_fp16(INFINITY) == 0x7c00);
    CHECK(tsl_fp32_to_fp16(-INFINITY) == 0xfc00);
    tsl_fp16_t hn = tsl_fp32_to_fp16(NAN);
    CHECK((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) != 0);
    CHECK(tsl_fp32_to_fp16(u2f(0x7f800001u)) != 0x7c00); /* NaN payload below fp16's: still NaN */
    CHECK((tsl_fp32_to_fp16(u2f(0x7f800001u)) & 0x3ff) != 0);
    CHECK(tsl_fp32_to_fp16(65504.0f) == 0x7bff);   /* largest finite */
    CHECK(tsl_fp32_to_fp16(65519.99f) == 0x7bff);  /* below the midpoint */
    CHECK(tsl_fp32_to_fp16(65520.0f) == 0x7c00);   /* midpoint: to even = inf */
    CHECK(tsl_fp32_to_fp16(1e10f) == 0x7c00);
    /* ties to even in the normal range: 1 + 2^-11 is halfway to 1 + 2^-10 */
    CHECK(tsl_fp32_to_fp16(1.0f + 0x1p-11f) == 0x3c00);
    CHECK(tsl_fp32_to_fp16(1.0f + 3 * 0x1p-11f) == 0x3c02);
    CHECK(tsl_fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01);
    /* subnormals: units of 2^-24 */
    CHECK(tsl_fp32_to_fp16(0x1p-24f) == 0x0001);
    CHECK(tsl_fp32_to_fp16(0x1p-25f) == 0x0000);      /* tie: to even (0) */
    CHECK(tsl_fp32_to_fp16(3 * 0x1p-25f) == 0x0002);  /* 1.5 units: to even (2) */
    CHECK(tsl_fp32_to_fp16(5 * 0x1p-25f) == 0x0002);  /* 2.5 units: to even (2) */
    CHECK(tsl_fp32_to_fp16(0x1p-25f + 0x1p-40f) == 0x0001);
    CHECK(tsl_fp32_to_fp16(-0x1p-24f) == 0x8001);
    CHECK(tsl_fp32_to_fp16(1023 * 0x1p-24f) == 0x03ff);
    CHECK(tsl_fp32_to_fp16(0x1p-14f) == 0x0400); /* smallest normal */
    CHECK(tsl_fp32_to_fp16(0x1p-14f - 0x1p-25f) == 0x0400); /* 1023.5 units: to even (1024) */
    CHECK(tsl_fp32_to_fp16(1e-10f) == 0x0000);
    CHECK(tsl_fp32_to_fp16(u2f(1)) == 0x0000); /* fp32 subnormal */

    CHECK(tsl_fp16_to_fp32(0x0001) == 0x1p-24f);
    CHECK(tsl_fp16_to_fp32(0x03ff) == 1023 * 0x1p-24f);
    CHECK(tsl_fp16_to_fp32(0x0400) == 0x1p-14f);
    CHECK(tsl_fp16_to_fp32(0x7bff) == 65504.0f);
    CHECK(tsl_fp16_to_fp32(0x7c00) == INFINITY);
    CHECK(tsl_fp16_to_fp32(0xfc00) == -INFINITY);
    CHECK(isnan(tsl_fp16_to_fp32(0x7e00)));
    CHECK(isnan(tsl_fp16_to_fp32(0x7c01)));
    CHECK(f2u(tsl_fp16_to_fp32(0x8000)) == 0x80000000u);
    CHECK(tsl_fp16_to_fp32(0x3555) == 0x1.554p-2f);
    /* every finite fp16 survives fp16 -> fp32 -> fp16 */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;
        if (tsl_fp32_to_fp16(tsl_fp16_to_fp32((tsl_fp16_t)h)) != h) bad++;
    }
    CHECK(bad == 0);
}

static void test_bf16_special(void) {
    CHECK(tsl_fp32_to_bf16(1.0f) == 0x3f80);
    CHECK(tsl_fp32_to_bf16(-0.0f) == 0x8000);
    CHECK(tsl_fp32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);     /* tie to even */
    CHECK(tsl_fp32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82); /* tie to even, up */
    CHECK(tsl_fp32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81);
    CHECK(tsl_fp32_to_bf16(INFINITY) == 0x7f80);
    CHECK(tsl_fp32_to_bf16(-INFINITY) == 0xff80);
    CHECK(tsl_fp32_to_bf16(FLT_MAX) == 0x7f80); /* rounds up past the largest bf16 */
    CHECK(tsl_fp32_to_bf16(u2f(0x7f7f7fffu)) == 0x7f7f);
    CHECK(tsl_fp32_to_bf16(u2f(0x7f800001u)) == 0x7fc0); /* signalling NaN: quiet, not inf */
    CHECK(tsl_fp32_to_bf16(u2f(0xffffffffu)) == 0xffff);
    CHECK(tsl_fp32_to_bf16(u2f(0x00010000u)) == 0x0001); /* subnormal kept */
    CHECK(tsl_fp32_to_bf16(u2f(0x00008000u)) == 0x0000); /* tie to even */
    CHECK(tsl_fp32_to_bf16(u2f(0x00018000u)) == 0x0002);
    CHECK(tsl_bf16_to_fp32(0x3f80) == 1.0f);
    CHECK(tsl_bf16_to_fp32(0x7f80) == INFINITY);
    CHECK(isnan(tsl_bf16_to_fp32(0x7fc0)));
    CHECK(tsl_bf16_to_fp32(0x0001) == 0x1p-133f);
}

/* The row converters (SIMD) against the scalar conversions over a sweep of
 * float bit patterns and every fp16/bf16 value. */
static void test_row_conversions_match_scalar(void) {
    enum { M = 4099 };
    static float f[M], back[M];
    static uint16_t h[M];
    int bad16 = 0, badb = 0, badback = 0;
    for (uint64_t base = 0; base < 0x100000000ull; base += 0x100000000ull / 64) {
        for (int i = 0; i < M; i++) f[i] = u2f((uint32_t)(base + (uint64_t)i * 104729u));
        tsl_quantize(TSL_TYPE_F16, f, h, M);
        for (int i = 0; i < M; i++) bad16 += h[i] != tsl_fp32_to_fp16(f[i]);
        tsl_quantize(TSL_TYPE_BF16, f, h, M);
        for (int i = 0; i < M; i++) badb += h[i] != tsl_fp32_to_bf16(f[i]);
    }
    for (uint32_t start = 0; start < 0x10000; start += M) {
        int m = 0;
        for (; m < M && start + m < 0x10000; m++) h[m] = (uint16_t)(start + m);
        tsl_dequantize(TSL_TYPE_F16, h, back, m);
        for (int i = 0; i < m; i++) {
            float want = tsl_fp16_to_fp32(h[i]);
            badback += isnan(want) ? !isnan(back[i]) : f2u(back[i]) != f2u(want);
        }
        tsl_dequantize(TSL_TYPE_BF16, h, back, m);
        for (int i = 0; i < m; i++) badback += f2u(back[i]) != f2u(tsl_bf16_to_fp32(h[i]));
    }
    CHECKF(bad16 == 0, "%d f16 mismatches", bad16);
    CHECKF(badb == 0, "%d bf16 mismatches", badb);
    CHECKF(badback == 0, "%d widening mismatches", badback);
}

/* ---- --emit for the Python comparison ------------------------------------ */

static int emit(const char *tname, const char *in, const char *out) {
    int t = tsl_type_from_name(tname);
    if (t < 0) {
        fprintf(stderr, "unknown type %s\n", tname);
        return 2;
    }
    FILE *fi = fopen(in, "rb");
    if (!fi) {
        perror(in);
        return 2;
    }
    fseek(fi, 0, SEEK_END);
    long size = ftell(fi);
    fseek(fi, 0, SEEK_SET);
    int64_t n = size / 4;
    float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    size_t outsize = tsl_row_size((tsl_type)t, n);
    void *q = malloc(outsize ? outsize : 1);
    int rc = 2;
    if (!x || !q || fread(x, 4, (size_t)n, fi) != (size_t)n) {
        fprintf(stderr, "cannot read %s\n", in);
    } else if (n > 0 && (outsize == 0 || tsl_quantize((tsl_type)t, x, q, n) != outsize)) {
        fprintf(stderr, "tsl_quantize(%s, n=%lld) refused\n", tname, (long long)n);
    } else {
        FILE *fo = fopen(out, "wb");
        if (fo && fwrite(q, 1, outsize, fo) == outsize && fclose(fo) == 0) rc = 0;
        else perror(out);
    }
    fclose(fi);
    free(x);
    free(q);
    return rc;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "--emit") == 0) {
        if (argc != 5) {
            fprintf(stderr, "usage: %s --emit TYPE INFILE OUTFILE\n", argv[0]);
            return 2;
        }
        return emit(argv[2], argv[3], argv[4]);
    }
    RUN(test_q8_0_known_answer);
    RUN(test_q4_0_known_answer);
    RUN(test_round_trip_quantized);
    RUN(test_round_trip_float);
    RUN(test_edge_cases);
    RUN(test_vec_dot);
    RUN(test_fp16_special);
    RUN(test_bf16_special);
    RUN(test_row_conversions_match_scalar);
    return test_summary();
}
