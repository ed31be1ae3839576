/*
 * ops_elementwise.c - element-wise kernels (add sub mul div, scale sqr sqrt,
 * silu gelu swiglu) and the vector loops the other kernel families share
 * (exp, max, sums in double).
 *
 * Speed. These ops stream memory, so the loops must keep up with it. Each
 * vector loop is written once as plain C that the compiler vectorizes, and
 * compiled three times: baseline x86-64 (or whatever the target is), AVX2
 * and AVX-512, through function target attributes; the variant is chosen
 * per kernel call from the SIMD table in use (cpu_simd_get(), which honours
 * TSL_SIMD). No global state is kept for the choice. exp is a polynomial
 * (Cephes' expf coefficients, ~1 ulp) rather than libm's so that it
 * vectorizes; silu and gelu are written through it (gelu's tanh form as
 * x * sigmoid(2u), which is the same function without the cancellation of
 * 1 + tanh(u) for negative u).
 *
 * Sums accumulate in double across 16 independent lanes: exact enough for
 * norms and losses over long rows, vectorizable without reassociation
 * (compiled without -ffast-math, the compiler may not reorder a single
 * accumulator), and independent of the thread count.
 *
 * Layout. Every kernel takes arbitrary byte strides on its inputs and
 * output; dense rows take a fast path, others go through small on-stack
 * tiles (gather, compute, scatter). Work is split by rows, and by column
 * chunks when there are fewer rows than threads, so one long row still
 * uses every thread. b is broadcast to a by repetition (a->ne[i] %
 * b->ne[i] == 0). In place (dst->data == src0->data with the same layout)
 * is safe: every element is read before it is written.
 */
#include <math.h>
#include <string.h>

#include "cpu/ops.h"

#define EW_TILE 1024 /* floats per on-stack tile */

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define EW_X86 1
#define EW_AVX2 __attribute__((target("avx2,fma,f16c")))
#define EW_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#else
#define EW_X86 0
#endif
#define EW_INLINE static inline __attribute__((always_inline))

enum { EW_ISA_GENERIC = 0, EW_ISA_AVX2 = 1, EW_ISA_AVX512 = 2 };

/* Which compiled variant to use, from the SIMD table in use. */
int cpu_vec_isa(void) {
#if EW_X86
    const char *n = cpu_simd_get()->name;
    if (strncmp(n, "avx512", 6) == 0) return EW_ISA_AVX512;
    if (strncmp(n, "avx2", 4) == 0) return EW_ISA_AVX2;
#endif
    return EW_ISA_GENERIC;
}

/* Instantiate BODY for every ISA and define the exported dispatcher. */
#if EW_X86
#define EW_VARIANTS(ret, name, params, args)                                                                  \
    static ret name##_generic params { return name##_body args; }                                            \
    EW_AVX2 static ret name##_avx2 params { return name##_body args; }                                       \
    EW_AVX512 static ret name##_avx512 params { return name##_body args; }                                   \
    ret cpu_vec_##name(int isa, EW_UNPAREN params);                                                            \
    ret cpu_vec_##name(int isa, EW_UNPAREN params) {                                                           \
        return isa == EW_ISA_AVX512 ? name##_avx512 args : isa == EW_ISA_AVX2 ? name##_avx2 args : name##_generic args; \
    }
#else
#define EW_VARIANTS(ret, name, params, args)                                                                  \
    static ret name##_generic params { return name##_body args; }                                            \
    ret cpu_vec_##name(int isa, EW_UNPAREN params);                                                            \
    ret cpu_vec_##name(int isa, EW_UNPAREN params) { return name##_generic args; }
#endif
#define EW_UNPAREN(...) __VA_ARGS__ /* EW_UNPAREN (a, b) -> a, b */

/* ---- scalar building blocks (inlined into each variant) ------------------ */

EW_INLINE float ew_exp(float x) {
    /* Clamp into the range where 2^n is a normal float; NaN goes through the
     * clamps as a finite value so the integer conversion stays defined, and
     * is restored at the end. */
    float xc = x > -87.3f ? x : -87.3f;
    xc = xc < 88.3f ? xc : 88.3f;
    float t = xc * 1.44269504088896341f;
    float nf = (t + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = xc - nf * 0.693359375f;
    r = r - nf * -2.12194440e-4f;
    float r2 = r * r;
    float q = 1.9875691500e-4f;
    q = q * r + 1.3981999507e-3f;
    q = q * r + 8.3334519073e-3f;
    q = q * r + 4.1665795894e-2f;
    q = q * r + 1.6666665459e-1f;
    q = q * r + 5.0000001201e-1f;
    q = q * r2 + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)nf + 127) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    float y = q * s;
    return x != x ? x : y;
}

EW_INLINE float ew_silu(float x) { return x / (1.0f + ew_exp(-x)); }

EW_INLINE float ew_gelu(float x) {
    /* 0.5 x (1 + tanh(u)) == x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3) */
    float u = 0.79788456080286536f * x * (1.0f + 0.044715f * x * x);
    return x / (1.0f + ew_exp(-2.0f * u));
}

/* ---- vector bodies -------------------------------------------------------- */

EW_INLINE int ew_add_body(int64_t n, const float *x, const float *y, float *z) {
    for (int64_t i = 0; i < n; i++) z[i] = x[i] + y[i];
    return 0;
}
EW_INLINE int ew_sub_body(int64_t n, const float *x, const float *y, float *z) {
    for (int64_t i = 0; i < n; i++) z[i] = x[i] - y[i];
    return 0;
}
EW_INLINE int ew_mul_body(int64_t n, const float *x, const float *y, float *z) {
    for (int64_t i = 0; i < n; i++) z[i] = x[i] * y[i];
    return 0;
}
EW_INLINE int ew_div_body(int64_t n, const float *x, const float *y, float *z) {
    for (int64_t i = 0; i < n; i++) z[i] = x[i] / y[i];
    return 0;
}
EW_INLINE int ew_swiglu_body(int64_t n, const float *x, const float *y, float *z) {
    for (int64_t i = 0; i < n; i++) z[i] = ew_silu(x[i]) * y[i];
    return 0;
}
EW_INLINE int ew_scale_body(int64_t n, const float *x, float s, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s;
    return 0;
}
/* y = (x + shift) * s */
EW_INLINE int ew_shift_scale_body(int64_t n, const float *x, float shift, float s, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] + shift) * s;
    return 0;
}
EW_INLINE int ew_sqr_body(int64_t n, const float *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * x[i];
    return 0;
}
EW_INLINE int ew_sqrt_body(int64_t n, const float *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = sqrtf(x[i]);
    return 0;
}
EW_INLINE int ew_silu_body(int64_t n, const float *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = ew_silu(x[i]);
    return 0;
}
EW_INLINE int ew_gelu_body(int64_t n, const float *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = ew_gelu(x[i]);
    return 0;
}
/* y = exp(x - shift), exactly 0 where x - shift is below float range (so
 * -INFINITY, a masked element, gives 0) */
EW_INLINE int ew_exp_shift_body(int64_t n, const float *x, float shift, float *y) {
    for (int64_t i = 0; i < n; i++) {
        float d = x[i] - shift;
        float e = ew_exp(d);
        y[i] = d < -87.3f ? 0.0f : e;
    }
    return 0;
}
/* largest element, ignoring NaN; -INFINITY for n == 0 */
EW_INLINE float ew_max_body(int64_t n, const float *x) {
    float acc[16];
    for (int j = 0; j < 16; j++) acc[j] = -INFINITY;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
    float m = -INFINITY;
    for (int j = 0; j < 16; j++) m = acc[j] > m ? acc[j] : m;
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}
EW_INLINE double ew_sum_body(int64_t n, const float *x) {
    double acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += (double)x[i + j];
    double s = 0;
    for (int j = 0; j < 16; j++) s += acc[j];
    for (; i < n; i++) s += (double)x[i];
    return s;
}
EW_INLINE double ew_sumsq_body(int64_t n, const float *x) {
    double acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += (double)x[i + j] * (double)x[i + j];
    double s = 0;
    for (int j = 0; j < 16; j++) s += acc[j];
    for (; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}
/* sum of (x - mean)^2 */
EW_INLINE double ew_sumsq_dev_body(int64_t n, const float *x, double mean) {
    double acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) {
            double d = (double)x[i + j] - mean;
            acc[j] += d * d;
        }
    double s = 0;
    for (int j = 0; j < 16; j++) s += acc[j];
    for (; i < n; i++) {
        double d = (double)x[i] - mean;
        s += d * d;
    }
    return s;
}
/* sum of x * y */
EW_INLINE double ew_dot_body(int64_t n, const float *x, const float *y) {
    double acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += (double)x[i + j] * (double)y[i + j];
    double s = 0;
    for (int j = 0; j < 16; j++) s += acc[j];
    for (; i < n; i++) s += (double)x[i] * (double)y[i];
    return s;
}

EW_VARIANTS(int, ew_add, (int64_t n, const float *x, const float *y, float *z), (n, x, y, z))
EW_VARIANTS(int, ew_sub, (int64_t n, const float *x, const float *y, float *z), (n, x, y, z))
EW_VARIANTS(int, ew_mul, (int64_t n, const float *x, const float *y, float *z), (n, x, y, z))
EW_VARIANTS(int, ew_div, (int64_t n, const float *x, const float *y, float *z), (n, x, y, z))
EW_VARIANTS(int, ew_swiglu, (int64_t n, const float *x, const float *y, float *z), (n, x, y, z))
EW_VARIANTS(int, ew_scale, (int64_t n, const float *x, float s, float *y), (n, x, s, y))
EW_VARIANTS(int, ew_shift_scale, (int64_t n, const float *x, float shift, float s, float *y), (n, x, shift, s, y))
EW_VARIANTS(int, ew_sqr, (int64_t n, const float *x, float *y), (n, x, y))
EW_VARIANTS(int, ew_sqrt, (int64_t n, const float *x, float *y), (n, x, y))
EW_VARIANTS(int, ew_silu, (int64_t n, const float *x, float *y), (n, x, y))
EW_VARIANTS(int, ew_gelu, (int64_t n, const float *x, float *y), (n, x, y))
EW_VARIANTS(int, ew_exp_shift, (int64_t n, const float *x, float shift, float *y), (n, x, shift, y))
EW_VARIANTS(float, ew_max, (int64_t n, const float *x), (n, x))
EW_VARIANTS(double, ew_sum, (int64_t n, const float *x), (n, x))
EW_VARIANTS(double, ew_sumsq, (int64_t n, const float *x), (n, x))
EW_VARIANTS(double, ew_sumsq_dev, (int64_t n, const float *x, double mean), (n, x, mean))
EW_VARIANTS(double, ew_dot, (int64_t n, const float *x, const float *y), (n, x, y))

/* ---- work split ----------------------------------------------------------- */

/* Units of work: every row, cut into column chunks when rows are too few to
 * keep all threads busy. Chunks are multiples of 64 elements. */
typedef struct ew_iter {
    int64_t ne1, ne2;
    int64_t chunk, nchunk;
    int64_t u, u1;          /* current unit, end */
    int64_t i1, i2, i3, ic; /* row indices and chunk index of unit u */
} ew_iter;

static void ew_iter_init(ew_iter *it, const tsl_tensor *dst, int ith, int nth) {
    int64_t ne0 = dst->ne[0], nr = dst->ne[1] * dst->ne[2] * dst->ne[3];
    it->ne1 = dst->ne[1];
    it->ne2 = dst->ne[2];
    it->chunk = ne0 > 0 ? ne0 : 1;
    it->nchunk = 1;
    if (nth > 1 && nr < 4 * (int64_t)nth && ne0 >= 4096) {
        int64_t want = (4 * (int64_t)nth + nr - 1) / nr;
        int64_t c = (ne0 + want - 1) / want;
        c = (c + 63) / 64 * 64;
        it->chunk = c;
        it->nchunk = (ne0 + c - 1) / c;
    }
    int64_t u0, u1;
    cpu_split_rows(nr * it->nchunk, ith, nth, &u0, &u1);
    it->u = u0;
    it->u1 = u1;
    int64_t row = u0 / it->nchunk;
    it->ic = u0 % it->nchunk;
    it->i3 = row / (it->ne1 * it->ne2);
    it->i2 = (row / it->ne1) % it->ne2;
    it->i1 = row % it->ne1;
}

static void ew_iter_next(ew_iter *it) {
    it->u++;
    if (++it->ic < it->nchunk) return;
    it->ic = 0;
    if (++it->i1 < it->ne1) return;
    it->i1 = 0;
    if (++it->i2 < it->ne2) return;
    it->i2 = 0;
    it->i3++;
}

static inline char *ew_row(const tsl_tensor *t, int64_t i1, int64_t i2, int64_t i3) {
    return (char *)t->data + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
}

/* ---- unary driver --------------------------------------------------------- */

enum { EW_SCALE, EW_SQR, EW_SQRT, EW_SILU, EW_GELU };

static void ew_unary_vec(int isa, int kind, int64_t n, const float *x, float *y, float s) {
    switch (kind) {
    case EW_SCALE: cpu_vec_ew_scale(isa, n, x, s, y); break;
    case EW_SQR: cpu_vec_ew_sqr(isa, n, x, y); break;
    case EW_SQRT: cpu_vec_ew_sqrt(isa, n, x, y); break;
    case EW_SILU: cpu_vec_ew_silu(isa, n, x, y); break;
    case EW_GELU: cpu_vec_ew_gelu(isa, n, x, y); break;
    }
}

static void ew_unary(const cpu_params *p, tsl_tensor *dst, int kind, float s) {
    const tsl_tensor *a = dst->src[0];
    if (tsl_nelements(dst) == 0) return;
    int isa = cpu_vec_isa();
    const int64_t ne0 = dst->ne[0];
    const size_t sa = a->nb[0], sd = dst->nb[0];
    const bool dense = sa == sizeof(float) && sd == sizeof(float);
    float tx[EW_TILE];
    ew_iter it;
    for (ew_iter_init(&it, dst, p->ith, p->nth); it.u < it.u1; ew_iter_next(&it)) {
        int64_t c0 = it.ic * it.chunk, c1 = c0 + it.chunk < ne0 ? c0 + it.chunk : ne0;
        const char *xr = ew_row(a, it.i1, it.i2, it.i3);
        char *yr = ew_row(dst, it.i1, it.i2, it.i3);
        if (dense) {
            ew_unary_vec(isa, kind, c1 - c0, (const float *)xr + c0, (float *)yr + c0, s);
            continue;
        }
        for (int64_t k = c0; k < c1; k += EW_TILE) {
            int64_t n = c1 - k < EW_TILE ? c1 - k : EW_TILE;
            for (int64_t i = 0; i < n; i++) memcpy(&tx[i], xr + (size_t)(k + i) * sa, sizeof(float));
            ew_unary_vec(isa, kind, n, tx, tx, s);
            for (int64_t i = 0; i < n; i++) memcpy(yr + (size_t)(k + i) * sd, &tx[i], sizeof(float));
        }
    }
}

void cpu_op_scale(const cpu_params *p, tsl_tensor *dst) { ew_unary(p, dst, EW_SCALE, op_get_f32(dst, 0)); }
void cpu_op_sqr(const cpu_params *p, tsl_tensor *dst) { ew_unary(p, dst, EW_SQR, 0.0f); }
void cpu_op_sqrt(const cpu_params *p, tsl_tensor *dst) { ew_unary(p, dst, EW_SQRT, 0.0f); }
void cpu_op_silu(const cpu_params *p, tsl_tensor *dst) { ew_unary(p, dst, EW_SILU, 0.0f); }
void cpu_op_gelu(const cpu_params *p, tsl_tensor *dst) { ew_unary(p, dst, EW_GELU, 0.0f); }

/* ---- binary driver -------------------------------------------------------- */

enum { EW_ADD, EW_SUB, EW_MUL, EW_DIV, EW_SWIGLU };

static void ew_binary_vec(int isa, int kind, int64_t n, const float *x, const float *y, float *z) {
    switch (kind) {
    case EW_ADD: cpu_vec_ew_add(isa, n, x, y, z); break;
    case EW_SUB: cpu_vec_ew_sub(isa, n, x, y, z); break;
    case EW_MUL: cpu_vec_ew_mul(isa, n, x, y, z); break;
    case EW_DIV: cpu_vec_ew_div(isa, n, x, y, z); break;
    case EW_SWIGLU: cpu_vec_ew_swiglu(isa, n, x, y, z); break;
    }
}

/* z[c0..c1) = x op b, where the dense b row has period nb0 (b->ne[0]) and is
 * read at (k % nb0). Short periods are unrolled into a tile so the vector
 * loop still sees long runs. */
static void ew_binary_dense(int isa, int kind, int64_t c0, int64_t c1, const float *x, const float *b, int64_t p0,
                            float *z, float *tile) {
    if (p0 >= c1) { /* no repetition within this range (p0 == ne0) */
        ew_binary_vec(isa, kind, c1 - c0, x + c0, b + c0, z + c0);
        return;
    }
    if (p0 <= EW_TILE / 2) {
        int64_t per = EW_TILE / 2 / p0 * p0; /* a multiple of the period */
        for (int64_t i = 0; i < per + p0; i++) tile[i] = b[i % p0];
        int64_t j = c0 % p0;
        for (int64_t k = c0; k < c1; k += per) {
            int64_t n = c1 - k < per ? c1 - k : per;
            ew_binary_vec(isa, kind, n, x + k, tile + j, z + k);
        }
        return;
    }
    for (int64_t k = c0; k < c1;) {
        int64_t j = k % p0, n = p0 - j < c1 - k ? p0 - j : c1 - k;
        ew_binary_vec(isa, kind, n, x + k, b + j, z + k);
        k += n;
    }
}

static void ew_binary(const cpu_params *p, tsl_tensor *dst, int kind) {
    const tsl_tensor *a = dst->src[0], *b = dst->src[1];
    if (tsl_nelements(dst) == 0) return;
    int isa = cpu_vec_isa();
    const int64_t ne0 = dst->ne[0], nb_0 = b->ne[0];
    const size_t sa = a->nb[0], sb = b->nb[0], sd = dst->nb[0];
    const bool dense = sa == sizeof(float) && sb == sizeof(float) && sd == sizeof(float);
    float tx[EW_TILE], ty[EW_TILE];
    ew_iter it;
    for (ew_iter_init(&it, dst, p->ith, p->nth); it.u < it.u1; ew_iter_next(&it)) {
        int64_t c0 = it.ic * it.chunk, c1 = c0 + it.chunk < ne0 ? c0 + it.chunk : ne0;
        const char *xr = ew_row(a, it.i1, it.i2, it.i3);
        const char *br = ew_row(b, it.i1 % b->ne[1], it.i2 % b->ne[2], it.i3 % b->ne[3]);
        char *zr = ew_row(dst, it.i1, it.i2, it.i3);
        if (dense) {
            ew_binary_dense(isa, kind, c0, c1, (const float *)xr, (const float *)br, nb_0, (float *)zr, tx);
            continue;
        }
        for (int64_t k = c0; k < c1; k += EW_TILE) {
            int64_t n = c1 - k < EW_TILE ? c1 - k : EW_TILE;
            for (int64_t i = 0; i < n; i++) {
                memcpy(&tx[i], xr + (size_t)(k + i) * sa, sizeof(float));
                memcpy(&ty[i], br + (size_t)((k + i) % nb_0) * sb, sizeof(float));
            }
            ew_binary_vec(isa, kind, n, tx, ty, tx);
            for (int64_t i = 0; i < n; i++) memcpy(zr + (size_t)(k + i) * sd, &tx[i], sizeof(float));
        }
    }
}

void cpu_op_add(const cpu_params *p, tsl_tensor *dst) { ew_binary(p, dst, EW_ADD); }
void cpu_op_sub(const cpu_params *p, tsl_tensor *dst) { ew_binary(p, dst, EW_SUB); }
void cpu_op_mul(const cpu_params *p, tsl_tensor *dst) { ew_binary(p, dst, EW_MUL); }
void cpu_op_div(const cpu_params *p, tsl_tensor *dst) { ew_binary(p, dst, EW_DIV); }
/* swiglu(gate, up): same shapes, so the broadcast path never repeats */
void cpu_op_swiglu(const cpu_params *p, tsl_tensor *dst) { ew_binary(p, dst, EW_SWIGLU); }
