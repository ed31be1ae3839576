/*
 * test_vk_mulmat.c - every mul_mat kernel of the Vulkan backend, each
 * forced in turn (TSL_VK_MM_VARIANT), against a double-precision reference
 * computed here from the exact values the weights hold (block formats are
 * quantized first and the reference reads their dequantized values, so the
 * comparison measures the kernel, not the format; F16 activations, with F16
 * weights, likewise).
 *
 * Shapes are random and awkward on purpose: odd M, N and K (K a multiple of
 * the block length for block formats), row counts that leave a workgroup's
 * rows half used, batches that broadcast the weights (b's batch (i2, i3)
 * reads a's (i2 / r2, i3 / r3)), weights read through views (a row offset
 * that breaks 16-byte alignment, rows of a wider tensor), activations
 * transposed (not contiguous) or starting one element off alignment, so the
 * 16-byte paths and the element-by-element ones of each kernel both run.
 * Plus the sizes decode uses (4096 x 4096 for every weight type: F32, F16,
 * BF16, Q8_0, Q4_0; a 14336 x 4096 Q4_0) on the default kernels.
 *
 * Tolerance, per output, relative to S = sum_k |a_k b_k|: 3e-5 * S for the
 * kernels that multiply in F32 (accumulation order differs from the
 * reference); 6e-4 * S for cooperative matrices, which round the
 * activations to F16 (at most 2^-11 relative each: 4.9e-4 * S) before
 * multiplying in F32; 1.1e-3 * S for their block-format variants, which
 * round the dequantized weights to F16 too (2^-10 * S).
 *
 * The cooperative-matrix kernels run where the device has cooperative
 * matrices; elsewhere the test says they are not available and runs their
 * emulated twin (same tiling, staging and edge handling, plain arithmetic).
 *
 * --bench [--quick] [--filter s] [--reps n] times the variants instead: the
 * decode shapes (F16, Q8_0, Q4_0, F32, BF16 weights x one F32 column) rotating
 * over >= 1 GiB of weights so the GPU's L2 cannot hold them, the same with
 * 2, 4 and 8 columns, products on cooperative matrices (F16, and Q8_0 / Q4_0
 * weights dequantized to F16; TFLOP/s, the tiled kernel beside them), and a
 * copy kernel over 1 GiB as the bandwidth ceiling of the same run. Times
 * are the GPU's own timestamps around each compute (the median of --reps).
 */
#include <stdio.h>
#include <stdlib.h>

#ifndef TSL_HAVE_VULKAN
#include "vulkan/vk_no_vulkan.h"
#else

#include <glob.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "tensile/backend.h"
#include "tensile/tensile.h"
#include "test.h"
#include "vulkan/vk_harness.h"
#include "vulkan/vk_kernels_mm.h"
#include "vulkan/vk_test.h"

/* lavapipe leaks what it allocated for a pipeline it refuses (test_forcing
 * makes one on purpose); those allocations are the driver's, not ours.
 * Vulkan objects this library forgets to destroy are caught by the
 * validation layer when the device is destroyed (TSL_VULKAN_VALIDATE=1). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libvulkan_lvp.so\n"; }

static tsl_backend *g_vk;
static tsl_vulkan_device_info g_info;
/* validation errors the test provokes on purpose (a broken kernel) */
static uint64_t g_expected_validation_errors;

/* ---- the kernel list ------------------------------------------------------------- */

typedef struct mmk {
    const char *name;
    int family;
    tsl_type type, btype; /* weights, activations */
    uint32_t spec[6];
} mmk;

static const mmk g_kernels[] = {
#define MMK(X, id, nm, e0, e1, blob, fam, t, bt, s0, s1, s2, s3, s4, s5) \
    {nm, VK_MM_##fam, TSL_TYPE_##t, TSL_TYPE_##bt, {s0, s1, s2, s3, s4, s5}},
    VK_MM_LIST(MMK, 0)
#undef MMK
};
#define N_KERNELS (int)(sizeof g_kernels / sizeof g_kernels[0])

static const char *family_name(int f) {
    switch (f) {
    case VK_MM_TILED: return "tiled";
    case VK_MM_VEC: return "mat-vec";
    case VK_MM_VECQ: return "mat-vec (int dot)";
    case VK_MM_VECN: return "small-N";
    case VK_MM_CM: return "coopmat";
    case VK_MM_CM2: return "coopmat (workgroup)";
    default: return "coopmat (emulated)";
    }
}

/* ---- finding a device --------------------------------------------------------- */


/* ---- one case ----------------------------------------------------------------- */

static unsigned long long g_seed = 0x6d6d;
/* TSL_TEST_SEED mixes into the case stream: other shapes and values */
static void seed_from_env(void) {
    const char *e = getenv("TSL_TEST_SEED");
    if (e && *e) g_seed ^= strtoull(e, NULL, 0) * 0x9E3779B97F4A7C15ull;
}

static int64_t rnd(int64_t lo, int64_t hi) { /* [lo, hi] */
    return lo + (int64_t)(test_rand_u64(&g_seed) % (unsigned long long)(hi - lo + 1));
}

typedef struct mmc {
    tsl_type type, btype;
    int64_t K, M, N;
    int64_t a2, a3, r2, r3; /* b has a2 * r2 by a3 * r3 batches */
    int al;                 /* weights: 0 dense, 1 rows 1.. of a taller tensor, 2 rows of a wider tensor */
    int bl;                 /* activations: 0 dense, 1 transposed, 2 one float into a wider tensor */
    bool bq;                /* the kernel sees each column through Q8_0 (the integer-dot mat-vec) */
} mmc;

/* Random values rounded through type t: raw bytes for the tensor, the exact
 * values as floats. */
static bool make_values(tsl_type t, int64_t n, unsigned long long seed, float scale, void **raw, float **val) {
    *raw = malloc(tsl_row_size(t, n));
    *val = malloc((size_t)n * sizeof(float));
    if (!*raw || !*val) return false;
    unsigned long long s = seed * 0x9E3779B97F4A7C15ull + 7;
    for (int64_t i = 0; i < n; i++) (*val)[i] = test_rand_f(&s, -1.0f, 1.0f) * scale;
    tsl_quantize(t, *val, *raw, n);
    tsl_dequantize(t, *raw, *val, n);
    return true;
}

typedef struct mm_result {
    double worst; /* largest error / tolerance */
    double max_err;
} mm_result;

/* Compute case c on the Vulkan backend, with kernel `force` forced (NULL:
 * the backend's own choice), and compare. Returns the compute's status;
 * supported reports whether the backend took the node at all. */
static tsl_status run_case(const char *force, const mmc *c, double tol_rel, mm_result *res, bool *supported,
                           char *why, size_t why_n) {
    tsl_status st = TSL_FAILED;
    why[0] = 0;
    *supported = false;
    const int64_t b2 = c->a2 * c->r2, b3 = c->a3 * c->r3;
    const bool q = tsl_type_is_quantized(c->type);
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    /* weights: parent [pK, pM, a2, a3], the case reads [K, M] from row moff */
    const int64_t pK = c->K + (c->al == 2 ? (q ? 32 : 5) : 0), pM = c->M + (c->al == 1 ? 1 : 0);
    const int64_t moff = c->al == 1 ? 1 : 0;
    tsl_tensor *pa = tsl_new_tensor_4d(ctx, c->type, pK, pM, c->a2, c->a3);
    tsl_tensor *a = c->al == 0 ? pa
                               : tsl_view_4d(ctx, pa, c->K, c->M, c->a2, c->a3, pa->nb[1], pa->nb[2], pa->nb[3],
                                             (size_t)moff * pa->nb[1]);
    /* activations */
    tsl_tensor *pb, *b;
    int64_t pbK = c->K;
    const tsl_type bt = c->btype == TSL_TYPE_F16 ? TSL_TYPE_F16 : TSL_TYPE_F32;
    if (c->bl == 1) {
        pb = tsl_new_tensor_4d(ctx, bt, c->N, c->K, b2, b3);
        b = tsl_transpose(ctx, pb);
    } else if (c->bl == 2) {
        pbK = c->K + 1;
        pb = tsl_new_tensor_4d(ctx, bt, pbK, c->N, b2, b3);
        b = tsl_view_4d(ctx, pb, c->K, c->N, b2, b3, pb->nb[1], pb->nb[2], pb->nb[3], pb->nb[0]);
    } else {
        pb = b = tsl_new_tensor_4d(ctx, bt, c->K, c->N, b2, b3);
    }
    tsl_tensor *out = tsl_mul_mat(ctx, a, b);
    if (!out) {
        snprintf(why, why_n, "graph build: %s", tsl_ctx_error(ctx));
        tsl_ctx_free(ctx);
        return TSL_FAILED;
    }
    tsl_graph *g = tsl_graph_build(ctx, &out, 1);
    tsl_error err;
    tsl_buffer *buf = g ? tsl_buffer_alloc_ctx(g_vk, ctx, &err) : NULL;
    void *araw = NULL, *braw = NULL;
    float *av = NULL, *bv = NULL, *ov = NULL;
    int64_t na = tsl_nelements(pa), nb = tsl_nelements(pb), no = tsl_nelements(out);
    if (!buf) {
        snprintf(why, why_n, "no buffer");
        goto done;
    }
    if (!make_values(c->type, na, g_seed + 1, 1.0f, &araw, &av) ||
        !make_values(bt, nb, g_seed + 2, 1.0f, &braw, &bv) || !(ov = malloc((size_t)no * sizeof *ov))) {
        snprintf(why, why_n, "out of host memory");
        goto done;
    }
    g_seed = test_rand_u64(&g_seed);
    if (tsl_tensor_set(pa, araw, 0, tsl_nbytes(pa), &err) != TSL_SUCCESS ||
        tsl_tensor_set(pb, braw, 0, tsl_nbytes(pb), &err) != TSL_SUCCESS) {
        snprintf(why, why_n, "upload failed");
        goto done;
    }
    if (force) setenv("TSL_VK_MM_VARIANT", force, 1);
    *supported = tsl_backend_supports_op(g_vk, out);
    st = *supported ? tsl_backend_graph_compute(g_vk, g, &err) : TSL_FAILED;
    if (force) unsetenv("TSL_VK_MM_VARIANT");
    if (!*supported) {
        snprintf(why, why_n, "not supported");
        goto done;
    }
    if (st != TSL_SUCCESS) {
        tsl_error_format(&err, why, why_n);
        goto done;
    }
    st = tsl_tensor_get(out, ov, 0, (size_t)no * sizeof *ov, &err);
    if (st != TSL_SUCCESS) {
        snprintf(why, why_n, "download failed");
        goto done;
    }
    int bad = 0;
    /* the column the kernel multiplies: as given, or through Q8_0 as the
     * integer-dot kernels (and the CPU) quantize it */
    double *col = malloc((size_t)c->K * sizeof *col);
    float *colf = malloc((size_t)c->K * sizeof *colf);
    void *colq = malloc(tsl_row_size(TSL_TYPE_Q8_0, c->K + 32));
    if (!col || !colf || !colq) {
        snprintf(why, why_n, "out of host memory");
        free(col), free(colf), free(colq);
        st = TSL_FAILED;
        goto done;
    }
    for (int64_t i3 = 0; i3 < b3; i3++)
        for (int64_t i2 = 0; i2 < b2; i2++)
            for (int64_t n = 0; n < c->N; n++) {
                for (int64_t k = 0; k < c->K; k++) {
                    if (c->bl == 1) colf[k] = bv[((i3 * b2 + i2) * c->K + k) * c->N + n];
                    else if (c->bl == 2) colf[k] = bv[((i3 * b2 + i2) * c->N + n) * pbK + k + 1];
                    else colf[k] = bv[((i3 * b2 + i2) * c->N + n) * c->K + k];
                }
                if (c->bq) {
                    tsl_quantize(TSL_TYPE_Q8_0, colf, colq, c->K);
                    tsl_dequantize(TSL_TYPE_Q8_0, colq, colf, c->K);
                }
                for (int64_t k = 0; k < c->K; k++) col[k] = colf[k];
                for (int64_t m = 0; m < c->M; m++) {
                    const float *ar = av + ((((i3 / c->r3) * c->a2 + i2 / c->r2) * pM + m + moff) * pK);
                    double ref = 0, mag = 0;
                    for (int64_t k = 0; k < c->K; k++) {
                        ref += (double)ar[k] * col[k];
                        mag += fabs((double)ar[k] * col[k]);
                    }
                    double got = ov[((i3 * b2 + i2) * c->N + n) * c->M + m];
                    double e = fabs(got - ref), tol = tol_rel * mag + 1e-30;
                    if (!(e <= tol)) {
                        if (bad++ < 3)
                            fprintf(stderr, "    [m %lld n %lld i2 %lld i3 %lld] got %.9g want %.9g (err %.3g > tol %.3g)\n",
                                    (long long)m, (long long)n, (long long)i2, (long long)i3, got, ref, e, tol);
                    }
                    if (e > res->max_err) res->max_err = e;
                    if (e / tol > res->worst) res->worst = e / tol;
                }
            }
    free(col);
    free(colf);
    free(colq);
    if (bad) {
        snprintf(why, why_n, "%d values out of tolerance", bad);
        st = TSL_FAILED;
    }
done:
    free(araw);
    free(braw);
    free(av);
    free(bv);
    free(ov);
    tsl_buffer_free(buf);
    tsl_ctx_free(ctx);
    return st;
}

static void case_text(const mmc *c, char *s, size_t n) {
    snprintf(s, n, "%s x %s K %lld M %lld N %lld batch %lldx%lld (r %lldx%lld) a%d b%d", tsl_type_name(c->type),
             tsl_type_name(c->btype == TSL_TYPE_F16 ? TSL_TYPE_F16 : TSL_TYPE_F32),
             (long long)c->K, (long long)c->M, (long long)c->N, (long long)(c->a2 * c->r2),
             (long long)(c->a3 * c->r3), (long long)c->r2, (long long)c->r3, c->al, c->bl);
}

/* K for type t around k: a multiple of the block length for block formats,
 * odd for plain types when odd is asked */
static int64_t pick_k(tsl_type t, int64_t k, bool odd) {
    if (tsl_type_is_quantized(t)) return (k + 31) / 32 * 32;
    return odd ? (k | 1) : (k + 7) / 8 * 8;
}

/* The cases a kernel of family f, weight type t and activation type bt runs. */
static int make_cases(int f, tsl_type t, tsl_type bt, mmc *cs) {
    int n = 0;
    for (int i = 0; i < 6; i++) {
        mmc c = {.type = t, .btype = bt, .a2 = 1, .a3 = 1, .r2 = 1, .r3 = 1};
        switch (i) {
        case 0: c.K = pick_k(t, rnd(64, 512), false), c.M = rnd(1, 200); break;
        case 1: c.K = pick_k(t, rnd(1, 300), true), c.M = rnd(1, 150), c.al = 2, c.bl = 1; break;
        case 2: c.K = pick_k(t, rnd(32, 256), false), c.M = rnd(5, 90), c.a2 = 2, c.r2 = 2, c.r3 = 2, c.al = 1, c.bl = 2; break;
        case 3: c.K = pick_k(t, 2048 + (tsl_type_is_quantized(t) ? 32 : 8), false), c.M = rnd(1, 3); break;
        case 4: c.K = pick_k(t, rnd(200, 700), true), c.M = rnd(100, 300), c.a2 = 3, c.a3 = 2, c.al = 1; break;
        default: c.K = 4096, c.M = 257; break;
        }
        switch (f) {
        case VK_MM_VECQ: c.bq = true; /* fall through */
        case VK_MM_VEC: c.N = 1; break;
        case VK_MM_VECN: c.N = i == 5 ? 8 : rnd(1, 8); break;
        case VK_MM_TILED: c.N = i == 0 ? 1 : i == 5 ? 3 : rnd(9, 70); break;
        case VK_MM_CM2: /* whole tiles of every variant (BM, BN up to 256, 4 * BK up to 256) */
            c.M = 256 * rnd(1, 2), c.N = 256 * rnd(1, 2), c.K = 256 * rnd(1, i == 3 ? 8 : 3);
            /* K-contiguous operands with 16-byte strides (a view one row in) */
            c.al = i == 1 || i == 4 ? 1 : 0, c.bl = 0;
            break;
        default: /* cooperative matrices */
            c.N = i == 3 ? rnd(9, 20) : rnd(9, 200);
            if (i == 5) c.K = 1024, c.M = 200, c.N = 130;
            break;
        }
        cs[n++] = c;
    }
    /* block-type mat-vec: rows of every unit the staged kernel loads by
     * (8 bytes: K 896; 16 with a last step of fewer than KS super-blocks:
     * K 2816; 4 with a last super-block of 2 blocks: K 2112), through views
     * and strided or misaligned activations */
    if ((f == VK_MM_VEC || f == VK_MM_VECN || f == VK_MM_VECQ) && tsl_type_is_quantized(t)) {
        mmc c = {.type = t, .btype = bt, .a2 = 1, .a3 = 1, .r2 = 1, .r3 = 1, .N = f == VK_MM_VECN ? rnd(2, 8) : 1,
                 .bq = f == VK_MM_VECQ};
        c.K = 896, c.M = rnd(40, 200), c.bl = 1;
        cs[n++] = c;
        c.K = 2816, c.M = rnd(100, 300), c.bl = 0, c.al = 1, c.a2 = 2, c.r2 = 2;
        cs[n++] = c;
        c.K = 2112, c.M = rnd(1, 60), c.bl = 2, c.al = 1, c.a2 = 1, c.r2 = 1;
        cs[n++] = c;
    }
    return n;
}

/* Shared memory of a mat-vec variant (vk_ops_mm.c's rule): a variant that
 * needs more than the device has is not available there. */
static uint32_t vec_shared(const mmk *k) {
    if (k->family == VK_MM_VECQ) return 4u * k->spec[0] * k->spec[2] + ((k->spec[5] >> 16) ? 0u : 40u * k->spec[5]);
    const uint32_t nc = k->family == VK_MM_VECN ? 8u : 1u;
    uint32_t b = 4u * k->spec[0] * k->spec[2] * nc;
    if (tsl_type_is_quantized(k->type) && k->spec[5])
        b += k->spec[0] * (k->type == TSL_TYPE_Q8_0 ? 272u : 144u) + nc * (k->spec[5] & 0xffu) * 65u * 16u;
    return b;
}

/* Is a cooperative-matrix variant expected to run here? (The device must
 * have cooperative matrices, 32-wide subgroups, the build its SPIR-V, and
 * the variant's tiles must fit the shared memory.) */
static const char *cm_unavailable(const mmk *k) {
    if (k->family == VK_MM_CMEMU) return NULL;
    size_t sz = 0;
    if (k->family == VK_MM_CM2) {
        if (!vk_test_kernel_spirv(k->name, &sz))
            return "this build has no workgroup-scope SPIR-V (no glslang with GL_NV_cooperative_matrix2)";
        if (!g_info.cooperative_matrix2) return "the device has no workgroup-scope cooperative matrices";
        if (g_info.subgroup_size != 32) return "the kernel needs 32-wide subgroups";
        return NULL;
    }
    if (!vk_test_kernel_spirv(k->name, &sz)) return "this build has no cooperative-matrix SPIR-V (no GLSL compiler with GL_KHR_cooperative_matrix)";
    if (!g_info.cooperative_matrix) return "the device has no cooperative matrices";
    if (g_info.subgroup_size != 32) return "the kernel needs 32-wide subgroups";
    /* spec[5]: BK, + 256 for a single staging buffer */
    uint32_t bm = k->spec[1] * k->spec[3] * 16u, bn = k->spec[2] * k->spec[4] * 16u;
    uint32_t sk = (k->spec[5] & 255u) / 8u + 1u;
    uint32_t shared = 16u * (2u - (k->spec[5] >> 8)) * (bm + bn) * sk + 4u * k->spec[1] * k->spec[2] * 256u;
    if (shared > g_info.max_shared_memory) return "its tiles need more shared memory than the device has";
    return NULL;
}

/* ---- tests ------------------------------------------------------------------- */

static void run_family(int fam) {
    for (int i = 0; i < N_KERNELS; i++) {
        const mmk *k = &g_kernels[i];
        if (k->family != fam) continue;
        if (fam == VK_MM_CM || fam == VK_MM_CM2) {
            const char *no = cm_unavailable(k);
            if (no) {
                printf("  %-38s not available on this device: %s\n", k->name, no);
                continue;
            }
        }
        if (fam == VK_MM_VECQ && (k->spec[5] & 0x20000u)) {
            /* a twin for split Q4_0 weights: swapped in, never forced on
             * plain ones (test_vk_ops.c, test_q4_split, runs it) */
            printf("  %-38s reads split Q4_0 weights only: tested in vulkan_test_vk_ops\n", k->name);
            continue;
        }
        if (fam == VK_MM_VECQ && !g_info.integer_dot) {
            printf("  %-38s not available on this device: no integer dot products\n", k->name);
            continue;
        }
        if ((fam == VK_MM_VEC || fam == VK_MM_VECN || fam == VK_MM_VECQ) && vec_shared(k) > g_info.max_shared_memory) {
            printf("  %-38s not available on this device: needs %u bytes of shared memory\n", k->name, vec_shared(k));
            continue;
        }
        mmc cs[10];
        int nc = make_cases(fam, k->type, k->btype, cs);
        double tol = (fam == VK_MM_CM || fam == VK_MM_CMEMU || fam == VK_MM_CM2) ? (k->type == TSL_TYPE_F16 ? 6e-4 : 1.1e-3) : 3e-5;
        mm_result r = {0, 0};
        int fails = 0;
        for (int j = 0; j < nc; j++) {
            char why[600], what[160];
            bool sup;
            tsl_status st = run_case(k->name, &cs[j], tol, &r, &sup, why, sizeof why);
            if (st != TSL_SUCCESS) {
                case_text(&cs[j], what, sizeof what);
                fprintf(stderr, "  %s: %s: %s\n", k->name, what, why);
                fails++;
            }
            if (st == TSL_DEVICE_LOST) {
                /* a kernel that hung the GPU: recover, so the cases and
                 * kernels after it are still tested (and reported) */
                tsl_error rerr;
                CHECKF(tsl_backend_recover(g_vk, &rerr) == TSL_SUCCESS, "recover after %s: %s", k->name,
                       rerr.message);
            }
        }
        CHECKF(fails == 0, "%s: %d of %d cases failed", k->name, fails, nc);
        printf("  %-38s %-18s %d cases, max error %.3g (%.0f%% of tolerance)\n", k->name, family_name(fam), nc,
               r.max_err, 100.0 * r.worst);
    }
}

static void test_tiled(void) { run_family(VK_MM_TILED); }
static void test_vec(void) { run_family(VK_MM_VEC); }
static void test_vecq(void) { run_family(VK_MM_VECQ); }
static void test_small_n(void) { run_family(VK_MM_VECN); }
static void test_coopmat(void) { run_family(VK_MM_CM); }
static void test_coopmat_emulated(void) { run_family(VK_MM_CMEMU); }
static void test_coopmat_workgroup(void) { run_family(VK_MM_CM2); }

/* The decode sizes on the backend's own choice of kernel. */
static void test_large(void) {
    static const tsl_type types[] = {TSL_TYPE_F32, TSL_TYPE_F16, TSL_TYPE_BF16, TSL_TYPE_Q8_0, TSL_TYPE_Q4_0};
    for (int i = 0; i < 6; i++) {
        mmc c = {.type = i < 5 ? types[i] : TSL_TYPE_Q4_0, .btype = TSL_TYPE_F32, .K = 4096,
                 .M = i < 5 ? 4096 : 14336, .N = 1, .a2 = 1, .a3 = 1, .r2 = 1, .r3 = 1};
        /* block weights on a device with integer dot products: the column
         * through Q8_0 */
        c.bq = tsl_type_is_quantized(c.type) && g_info.integer_dot;
        mm_result r = {0, 0};
        char why[600], what[160];
        bool sup;
        tsl_status st = run_case(NULL, &c, 3e-5, &r, &sup, why, sizeof why);
        case_text(&c, what, sizeof what);
        CHECKF(st == TSL_SUCCESS, "%s: %s", what, why);
        printf("  %-38s max error %.3g (%.0f%% of tolerance)\n", what, r.max_err, 100.0 * r.worst);
    }
}

/* The column quantizer of the integer-dot mat-vec, byte for byte against
 * tsl_quantize: with Q8_0 weights that are the identity (row m: quant 1 at
 * m, scale 1), y[m] = d * q of activation m exactly (one nonzero product,
 * exact in float), so y must equal the column through Q8_0 and back
 * exactly (as values: a zero's sign aside). Eight columns (batches) of 4096
 * values: uniform; spread over 50 binary orders of magnitude; multiples of
 * a block's step plus halves (the rounding's ties); blocks of one value;
 * tiny ones (scales that round to 0 in F16) and ones whose scale nears the
 * F16 top. Not here: activations beyond 127 * 65504, whose scale is inf in
 * F16: the CPU then gives inf or NaN per block, this kernel NaN wherever a
 * lane's share of the block is 0. */
static void quantizer_exact(int layout) {
    enum { K = 4096, NCOL = 8 };
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 16, .no_alloc = true});
    tsl_tensor *w = tsl_new_tensor_2d(ctx, TSL_TYPE_Q8_0, K, K);
    /* the column dense and aligned (16-byte loads); stored [1, K, NCOL] and
     * transposed (dense, but rows not 16-byte units: element loads); stored
     * [NCOL, K] and permuted (a stride of NCOL between activations) */
    tsl_tensor *xs = layout == 0 ? tsl_new_tensor_3d(ctx, TSL_TYPE_F32, K, 1, NCOL)
                     : layout == 1 ? tsl_new_tensor_3d(ctx, TSL_TYPE_F32, 1, K, NCOL)
                                   : tsl_new_tensor_2d(ctx, TSL_TYPE_F32, NCOL, K);
    tsl_tensor *x = layout == 0 ? xs : layout == 1 ? tsl_transpose(ctx, xs) : tsl_permute(ctx, xs, 2, 0, 1, 3);
    tsl_tensor *y = tsl_mul_mat(ctx, w, x);
    tsl_graph *g = tsl_graph_build(ctx, &y, 1);
    tsl_error err;
    tsl_buffer *buf = g ? tsl_buffer_alloc_ctx(g_vk, ctx, &err) : NULL;
    tsl_block_q8_0 *wq = calloc((size_t)K * (K / 32), sizeof *wq);
    float *xv = malloc(sizeof(float) * K * NCOL), *want = malloc(sizeof(float) * K * NCOL),
          *got = malloc(sizeof(float) * K * NCOL);
    tsl_block_q8_0 *q = malloc(sizeof *q * (K / 32));
    CHECK(buf && wq && xv && want && got && q);
    if (!buf || !wq || !xv || !want || !got || !q) goto out;
    for (int m = 0; m < K; m++) {
        tsl_block_q8_0 *row = wq + (size_t)m * (K / 32);
        for (int b = 0; b < K / 32; b++) row[b].d = 0x3c00; /* 1.0 */
        row[m / 32].qs[m % 32] = 1;
    }
    unsigned long long sd = 0x51ull;
    for (int c = 0; c < NCOL; c++)
        for (int k = 0; k < K; k++) {
            float u = test_rand_f(&sd, -1.0f, 1.0f), v;
            switch (c) {
            case 0: v = u; break;
            case 1: v = ldexpf(u, (int)(test_rand_u64(&sd) % 51) - 30); break;
            case 2: { /* on the quantization grid of a block whose max is 127 * 2^-3, and halfway */
                int qk = (int)(test_rand_u64(&sd) % 255) - 127;
                v = k % 32 == 0 ? 127.0f * 0.125f : ((float)qk + (k % 2 ? 0.5f : 0.0f)) * 0.125f;
                break;
            }
            case 3: v = (float)((k / 32) % 7 - 3) * 0.37f; break; /* a block of one value */
            case 4: v = ldexpf(u, -100); break;
            case 5: v = ldexpf(u, 22); break; /* a block scale near the F16 top (65504) */
            case 6: v = k % 3 ? 0.0f : u; break;
            default: v = u * (float)(k % 32 + 1); break;
            }
            xv[(size_t)c * K + k] = v;
        }
    for (int c = 0; c < NCOL; c++) {
        tsl_quantize(TSL_TYPE_Q8_0, xv + (size_t)c * K, q, K);
        tsl_dequantize(TSL_TYPE_Q8_0, q, want + (size_t)c * K, K);
    }
    CHECK(tsl_tensor_set(w, wq, 0, tsl_nbytes(w), &err) == TSL_SUCCESS);
    if (layout == 2) { /* xs[k][c] */
        float *t = malloc(sizeof(float) * K * NCOL);
        CHECK(t != NULL);
        if (!t) goto out;
        for (int c = 0; c < NCOL; c++)
            for (int k = 0; k < K; k++) t[(size_t)k * NCOL + c] = xv[(size_t)c * K + k];
        CHECK(tsl_tensor_set(xs, t, 0, tsl_nbytes(xs), &err) == TSL_SUCCESS);
        free(t);
    } else {
        CHECK(tsl_tensor_set(xs, xv, 0, tsl_nbytes(xs), &err) == TSL_SUCCESS);
    }
    tsl_status st = tsl_backend_graph_compute(g_vk, g, &err);
    CHECKF(st == TSL_SUCCESS, "compute: %s", err.message);
    if (st != TSL_SUCCESS) goto out;
    CHECK(tsl_tensor_get(y, got, 0, tsl_nbytes(y), &err) == TSL_SUCCESS);
    for (int c = 0; c < NCOL; c++) {
        int bad = 0, first = -1;
        for (int k = 0; k < K; k++)
            if (!(got[(size_t)c * K + k] == want[(size_t)c * K + k]) && bad++ == 0) first = k;
        CHECKF(bad == 0, "layout %d, column %d: %d of %d values differ from tsl_quantize's (first at %d: got %.9g, want %.9g)", layout, c,
               bad, K, first, first >= 0 ? got[(size_t)c * K + first] : 0.0, first >= 0 ? want[(size_t)c * K + first] : 0.0);
    }
out:
    free(wq);
    free(xv);
    free(want);
    free(got);
    free(q);
    tsl_buffer_free(buf);
    tsl_ctx_free(ctx);
}

static void test_vecq_quantizer_exact(void) {
    if (!g_info.integer_dot) {
        printf("  not run: the device has no integer dot products\n");
        return;
    }
    for (int layout = 0; layout < 3; layout++) quantizer_exact(layout);
}

/* The integer-dot mat-vec quantizes its column once into the backend's
 * scratch and reuses it for the next product of the same column: y1 =
 * w1 a and y2 = w2 a share one quantization; b = 2 a then takes a's memory
 * (the graph allocator puts it in place), so y3 = w3 b reads the same bytes
 * with new values and must quantize again. Each product is checked against
 * its own column through Q8_0; a stale quantization would give y3 = w3 a,
 * half the right values. */
static void test_vecq_column_reuse(void) {
    if (!g_info.integer_dot) {
        printf("  not run: the device has no integer dot products\n");
        return;
    }
    const int64_t K = 512, M = 96;
    tsl_context *wctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 16, .no_alloc = true});
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 16, .no_alloc = true});
    tsl_tensor *w[3];
    for (int i = 0; i < 3; i++) w[i] = tsl_new_tensor_2d(wctx, TSL_TYPE_Q4_0, K, M);
    tsl_tensor *x = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, K);
    x->flags |= TSL_FLAG_INPUT;
    tsl_tensor *a = tsl_add(ctx, x, x);
    tsl_tensor *y1 = tsl_mul_mat(ctx, w[0], a);
    tsl_tensor *y2 = tsl_mul_mat(ctx, w[1], a);
    tsl_tensor *b = tsl_scale(ctx, a, 2.0f);
    tsl_tensor *y3 = tsl_mul_mat(ctx, w[2], b);
    tsl_tensor *outs[3] = {y1, y2, y3};
    for (int i = 0; i < 3; i++) outs[i]->flags |= TSL_FLAG_OUTPUT;
    tsl_graph *g = tsl_graph_build(ctx, outs, 3);
    tsl_error err;
    tsl_buffer *wbuf = tsl_buffer_alloc_ctx(g_vk, wctx, &err);
    tsl_gallocr *ga = tsl_gallocr_new(g_vk);
    CHECK(g && wbuf && ga);
    if (!g || !wbuf || !ga) goto out;
    CHECK(tsl_gallocr_alloc_graph(ga, g, &err) == TSL_SUCCESS);
    /* the case this test is about: b written over a */
    CHECKF(b->data == a->data, "the allocator did not put b in a's place (a %p, b %p)", a->data, b->data);
    void *raw[3];
    float *wv[3], *xv = NULL;
    for (int i = 0; i < 3; i++) {
        CHECK(make_values(TSL_TYPE_Q4_0, K * M, 77 + i, 1.0f, &raw[i], &wv[i]));
        CHECK(tsl_tensor_set(w[i], raw[i], 0, tsl_nbytes(w[i]), &err) == TSL_SUCCESS);
    }
    void *xraw;
    CHECK(make_values(TSL_TYPE_F32, K, 99, 1.0f, &xraw, &xv));
    CHECK(tsl_tensor_set(x, xv, 0, (size_t)K * sizeof(float), &err) == TSL_SUCCESS);
    tsl_vulkan_stats vs0, vs1;
    CHECK(tsl_backend_vulkan_stats(g_vk, &vs0) == TSL_SUCCESS);
    setenv("TSL_VK_MM_VARIANT", "mul_mat_vecq_q4_0_f32", 1);
    tsl_status st = tsl_backend_graph_compute(g_vk, g, &err);
    unsetenv("TSL_VK_MM_VARIANT");
    /* add, quantize, y1, y2 (the same column), scale, quantize, y3 */
    CHECK(tsl_backend_vulkan_stats(g_vk, &vs1) == TSL_SUCCESS);
    CHECKF(vs1.dispatches - vs0.dispatches == 7, "%llu dispatches, want 7",
           (unsigned long long)(vs1.dispatches - vs0.dispatches));
    CHECKF(st == TSL_SUCCESS, "compute: %s", err.message);
    /* the columns through Q8_0: 2x and 4x */
    float col[2][512], got[96];
    void *q = malloc(tsl_row_size(TSL_TYPE_Q8_0, K));
    for (int c = 0; c < 2; c++) {
        for (int64_t k = 0; k < K; k++) col[c][k] = xv[k] * (c == 0 ? 2.0f : 4.0f);
        tsl_quantize(TSL_TYPE_Q8_0, col[c], q, K);
        tsl_dequantize(TSL_TYPE_Q8_0, q, col[c], K);
    }
    free(q);
    for (int i = 0; i < 3 && st == TSL_SUCCESS; i++) {
        CHECK(tsl_tensor_get(outs[i], got, 0, sizeof(float) * (size_t)M, &err) == TSL_SUCCESS);
        int bad = 0;
        for (int64_t m = 0; m < M; m++) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                ref += (double)wv[i][m * K + k] * col[i == 2][k];
                mag += fabs((double)wv[i][m * K + k] * col[i == 2][k]);
            }
            if (!(fabs(got[m] - ref) <= 3e-5 * mag)) bad++;
        }
        CHECKF(bad == 0, "y%d: %d of %lld values off their column's product", i + 1, bad, (long long)M);
    }
    for (int i = 0; i < 3; i++) {
        free(raw[i]);
        free(wv[i]);
    }
    free(xraw);
    free(xv);
out:
    tsl_gallocr_free(ga);
    tsl_buffer_free(wbuf);
    tsl_ctx_free(ctx);
    tsl_ctx_free(wctx);
}

/* A backend of its own whose kernel kname has its SPIR-V with a missing
 * entry point (the driver refuses it), and on it one product of weights of
 * type t [64, 40] by one F32 column. */
typedef struct broken_kernel {
    const char *kname;
    tsl_backend *be;
    tsl_context *ctx;
    tsl_buffer *buf;
    tsl_graph *g;
    tsl_tensor *out;
    tsl_vulkan_stats v0;
} broken_kernel;

static bool broken_kernel_open(broken_kernel *bk, const char *kname, tsl_type t) {
    memset(bk, 0, sizeof *bk);
    bk->kname = kname;
    size_t size = 0;
    const uint32_t *spv = vk_test_kernel_spirv(kname, &size);
    CHECK(spv != NULL && size > 20);
    tsl_error err;
    bk->be = spv ? tsl_backend_vulkan_new(g_info.index, &err) : NULL;
    CHECK(bk->be != NULL);
    if (!bk->be) return false;
    tsl_backend_vulkan_stats(bk->be, &bk->v0);
    CHECK(vk_test_set_kernel(bk->be, kname, spv, size, "no_such_entry", &err) == TSL_SUCCESS);
    bk->ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 16, .no_alloc = true});
    tsl_tensor *a = tsl_new_tensor_2d(bk->ctx, t, 64, 40);
    tsl_tensor *b = tsl_new_tensor_2d(bk->ctx, TSL_TYPE_F32, 64, 1);
    bk->out = tsl_mul_mat(bk->ctx, a, b);
    bk->g = bk->out ? tsl_graph_build(bk->ctx, &bk->out, 1) : NULL;
    bk->buf = bk->g ? tsl_buffer_alloc_ctx(bk->be, bk->ctx, &err) : NULL;
    CHECK(bk->g && bk->buf);
    return bk->g && bk->buf;
}

/* The kernel as built again (kernels are the device's, shared by every
 * backend on it), the validation layer's objections to the broken one
 * expected, everything freed. */
static void broken_kernel_close(broken_kernel *bk) {
    tsl_error err;
    if (bk->be) {
        tsl_vulkan_stats v1;
        tsl_backend_vulkan_stats(bk->be, &v1);
        g_expected_validation_errors += v1.validation_errors - bk->v0.validation_errors;
        CHECK(vk_test_set_kernel(bk->be, bk->kname, NULL, 0, NULL, &err) == TSL_SUCCESS);
    }
    tsl_buffer_free(bk->buf);
    tsl_ctx_free(bk->ctx);
    tsl_backend_free(bk->be);
}

/* The integer-dot mat-vec's quantizer is part of its kernel: when the
 * quantizer cannot be built, the compute fails naming the mat-vec (with the
 * driver's text), and the backend then refuses the node (supports_op), so a
 * scheduler runs it elsewhere; nothing is dispatched with a stale column. */
static void test_vecq_quantizer_broken(void) {
    if (!g_info.integer_dot) {
        printf("  not run: the device has no integer dot products\n");
        return;
    }
    broken_kernel bk;
    if (broken_kernel_open(&bk, "quantize_q8_f32", TSL_TYPE_Q4_0)) {
        tsl_error err;
        CHECK(tsl_backend_supports_op(bk.be, bk.out));
        tsl_status st = tsl_backend_graph_compute(bk.be, bk.g, &err);
        CHECKF(st == TSL_FAILED, "compute: %s, want FAILED", tsl_status_str(st));
        CHECKF(strcmp(err.kernel, "mul_mat_vecq_q4_0_f32") == 0, "the record names kernel '%s'", err.kernel);
        tsl_vulkan_stats v1;
        CHECK(tsl_backend_vulkan_stats(bk.be, &v1) == TSL_SUCCESS);
        CHECKF(v1.dispatches == bk.v0.dispatches, "%llu dispatches recorded by the failed compute",
               (unsigned long long)(v1.dispatches - bk.v0.dispatches));
        CHECK(!tsl_backend_supports_op(bk.be, bk.out));
    }
    broken_kernel_close(&bk);
}

/* Forcing is strict: a forced kernel that does not apply leaves the node
 * without a Vulkan kernel; a name of another weight type leaves it alone;
 * and the forced kernel is the one that runs (a broken copy of it fails
 * the compute, named). */
static void test_forcing(void) {
    mmc c = {.type = TSL_TYPE_F16, .btype = TSL_TYPE_F32, .K = 64, .M = 40, .N = 3,
             .a2 = 1, .a3 = 1, .r2 = 1, .r3 = 1};
    mm_result r = {0, 0};
    char why[600];
    bool sup;
    /* a mat-vec kernel for 3 columns */
    CHECK(run_case("mul_mat_vec_f16_f32_w32s1r1", &c, 3e-5, &r, &sup, why, sizeof why) != TSL_SUCCESS && !sup);
    /* a kernel of another weight type: the node keeps its own */
    CHECK(run_case("mul_mat_vec_q4_0_f32", &c, 3e-5, &r, &sup, why, sizeof why) == TSL_SUCCESS && sup);
    /* the first name of the node's type counts */
    CHECK(run_case("mul_mat_vec_q4_0_f32,mul_mat_f16_f32,mul_mat_vecn_f16_f32", &c, 3e-5, &r, &sup, why,
                   sizeof why) == TSL_SUCCESS);

    /* break one variant on a backend of its own: forced, it fails naming it */
    const char *kname = "mul_mat_vec_f16_f32_w64s1r2";
    broken_kernel bk;
    if (broken_kernel_open(&bk, kname, TSL_TYPE_F16)) {
        tsl_error err;
        setenv("TSL_VK_MM_VARIANT", kname, 1);
        tsl_status st = tsl_backend_graph_compute(bk.be, bk.g, &err);
        unsetenv("TSL_VK_MM_VARIANT");
        CHECK(st == TSL_FAILED);
        CHECK(strcmp(err.kernel, kname) == 0);
        /* unforced, the same graph runs on the default kernel */
        CHECK(tsl_backend_graph_compute(bk.be, bk.g, &err) == TSL_SUCCESS);
    }
    broken_kernel_close(&bk);
}

static void test_validation(void) {
    tsl_vulkan_stats s;
    CHECK(g_vk && tsl_backend_vulkan_stats(g_vk, &s) == TSL_SUCCESS);
    CHECKF(s.validation_errors == g_expected_validation_errors,
           "the validation layer reported %llu errors (%llu of them provoked by the broken kernel)",
           (unsigned long long)s.validation_errors, (unsigned long long)g_expected_validation_errors);
}

/* ---- benchmark ----------------------------------------------------------------- */

typedef struct bench_opts {
    bool quick;
    const char *filter;
    int reps;
    double copy_gbs; /* the ceiling measured in this run */
} bench_opts;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median seconds of reps computes of g (after warm-up runs, which also
 * build the kernel), from the GPU's timestamps when it has them. Negative
 * when a compute fails. */
static double time_graph(tsl_graph *g, int reps, char *why, size_t why_n) {
    tsl_error err;
    double t[64];
    if (reps > 64) reps = 64;
    /* warm-up: two runs, then a tenth of a second of them, so an idle GPU's
     * clocks are up before the timed runs (they were not, and the first
     * variants timed read 2-6x slower than the same kernel later) */
    const double w0 = now_s();
    for (int i = 0; i < 2 || now_s() - w0 < 0.1; i++) {
        if (tsl_backend_graph_compute(g_vk, g, &err) != TSL_SUCCESS) {
            tsl_error_format(&err, why, why_n);
            return -1;
        }
    }
    for (int i = 2; i < 2 + reps; i++) {
        double t0 = now_s();
        if (tsl_backend_graph_compute(g_vk, g, &err) != TSL_SUCCESS) {
            tsl_error_format(&err, why, why_n);
            return -1;
        }
        double wall = now_s() - t0;
        tsl_vulkan_stats s;
        tsl_backend_vulkan_stats(g_vk, &s);
        if (i >= 2) t[i - 2] = s.gpu_timing && s.last_gpu_us > 0 ? s.last_gpu_us * 1e-6 : wall;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    return t[reps / 2];
}

static bool bench_skip(const bench_opts *o, const char *a, const char *b) {
    if (!o->filter) return false;
    return !(a && strstr(a, o->filter)) && !(b && strstr(b, o->filter));
}

/* Fill n tensors of type t with the same valid values (one matrix quantized
 * once, uploaded to each: distinct memory, so nothing is cached between
 * them), scaled to keep chained products finite. */
static bool fill_copies(tsl_tensor **ts, int n, float scale) {
    void *raw;
    float *val;
    int64_t ne = tsl_nelements(ts[0]);
    if (!make_values(ts[0]->type, ne, 99, scale, &raw, &val)) {
        free(raw);
        free(val);
        return false;
    }
    tsl_error err;
    bool ok = true;
    for (int i = 0; i < n && ok; i++) ok = tsl_tensor_set(ts[i], raw, 0, tsl_nbytes(ts[i]), &err) == TSL_SUCCESS;
    free(raw);
    free(val);
    return ok;
}

static void bench_copy(bench_opts *o) {
    const int64_t per = o->quick ? (1 << 20) : (32 << 20); /* floats per tensor */
    const int n = 8;
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    tsl_tensor *src[8], *dst[8], *outs[8];
    for (int i = 0; i < n; i++) {
        src[i] = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, per);
        dst[i] = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, per);
        outs[i] = tsl_cpy(ctx, src[i], dst[i]);
    }
    tsl_graph *g = tsl_graph_build(ctx, outs, n);
    tsl_error err;
    tsl_buffer *buf = g ? tsl_buffer_alloc_ctx(g_vk, ctx, &err) : NULL;
    char why[600] = "";
    double t = buf && fill_copies(src, n, 1.0f) ? time_graph(g, o->reps, why, sizeof why) : -1;
    double bytes = 2.0 * (double)n * (double)per * 4.0;
    if (t > 0) {
        o->copy_gbs = bytes / t / 1e9;
        printf("copy     f32   %4.0f MiB x %d      cpy_f32_f32                            %8.1f GB/s (read + write)\n",
               (double)per * 4 / (1 << 20), n, o->copy_gbs);
    } else {
        printf("copy     failed: %s\n", why[0] ? why : "no buffer");
    }
    tsl_buffer_free(buf);
    tsl_ctx_free(ctx);
}

typedef struct bshape {
    const char *label;
    int64_t M, K;
} bshape;

/* Weights x N columns over >= 1 GiB of weights, for every variant of the
 * type that applies (fam: VK_MM_VEC for N == 1, VK_MM_VECN otherwise). */
static void bench_matvec(bench_opts *o, tsl_type t, const bshape *sh, int64_t N, int fam, double *best_out) {
    char label[96];
    snprintf(label, sizeof label, "%s", sh->label);
    const double target = o->quick ? 16.0 * (1 << 20) : 1024.0 * (1 << 20);
    const double mat_bytes = (double)tsl_row_size(t, sh->K) * (double)sh->M;
    int n = (int)ceil(target / mat_bytes);
    if (n < 1) n = 1;
    if (n > 64) n = 64;
    const bool chain = sh->M == sh->K && N == 1; /* decode-like: each product feeds the next */
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 4u << 20, .no_alloc = true});
    tsl_tensor *w[64], *outs[64];
    tsl_tensor *b = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, sh->K, N);
    tsl_tensor *x = b;
    for (int i = 0; i < n; i++) {
        w[i] = tsl_new_tensor_2d(ctx, t, sh->K, sh->M);
        outs[i] = tsl_mul_mat(ctx, w[i], chain ? x : b);
        x = outs[i];
    }
    tsl_graph *g = tsl_graph_build(ctx, chain ? &outs[n - 1] : outs, chain ? 1 : n);
    tsl_error err;
    tsl_buffer *buf = g ? tsl_buffer_alloc_ctx(g_vk, ctx, &err) : NULL;
    if (!buf || !fill_copies(w, n, 1.0f / sqrtf((float)sh->K)) || !fill_copies(&b, 1, 1.0f)) {
        printf("%-8s %-5s %-26s setup failed (%.0f MiB)\n", N == 1 ? "matvec" : "smallN", tsl_type_name(t), label,
               (double)n * mat_bytes / (1 << 20));
        tsl_buffer_free(buf);
        tsl_ctx_free(ctx);
        return;
    }
    double best = 0;
    for (int pass = -1; pass < N_KERNELS; pass++) {
        const mmk *k = pass < 0 ? NULL : &g_kernels[pass];
        if (k && ((k->family != fam && !(fam == VK_MM_VEC && k->family == VK_MM_VECQ)) || k->type != t ||
                  k->btype != TSL_TYPE_F32))
            continue;
        if (k && k->family == VK_MM_VECQ && !g_info.integer_dot) continue;
        if (k && bench_skip(o, k->name, label)) continue;
        if (k && vec_shared(k) > g_info.max_shared_memory) {
            printf("%-8s %-5s %-26s %-5s %-40s not available: needs %u bytes of shared memory\n",
                   N == 1 ? "matvec" : "smallN", tsl_type_name(t), label, "", k->name, vec_shared(k));
            continue;
        }
        if (k) setenv("TSL_VK_MM_VARIANT", k->name, 1);
        char why[600] = "";
        double s = time_graph(g, o->reps, why, sizeof why);
        if (k) unsetenv("TSL_VK_MM_VARIANT");
        char cols[16];
        snprintf(cols, sizeof cols, "N=%lld", (long long)N);
        if (s <= 0) {
            printf("%-8s %-5s %-26s %-5s %-40s failed: %.200s\n", N == 1 ? "matvec" : "smallN", tsl_type_name(t),
                   label, cols, k ? k->name : "(default choice)", why);
            continue;
        }
        double gbs = (double)n * mat_bytes / s / 1e9;
        if (gbs > best) best = gbs;
        printf("%-8s %-5s %-26s %-5s %-40s %8.1f GB/s %6.1f%% of copy %9.2f us/product%s\n",
               N == 1 ? "matvec" : "smallN", tsl_type_name(t), label, cols, k ? k->name : "(default choice)", gbs,
               o->copy_gbs > 0 ? 100.0 * gbs / o->copy_gbs : 0.0, s * 1e6 / n, chain ? " (chained)" : "");
        fflush(stdout);
    }
    if (best_out) *best_out = best;
    tsl_buffer_free(buf);
    tsl_ctx_free(ctx);
}

/* M x N x K with weights t and activations bt (F32, or F16 with F16
 * weights): the default choice, then every tiled and cooperative-matrix
 * variant of that pair forced in turn. */
static void bench_matmul(bench_opts *o, tsl_type t, tsl_type bt, int64_t M, int64_t N, int64_t K, double *best_out) {
    char label[64];
    snprintf(label, sizeof label, "%lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
    const char *tn = bt == TSL_TYPE_F16 ? "f16/f16" : tsl_type_name(t);
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    tsl_tensor *a = tsl_new_tensor_2d(ctx, t, K, M);
    tsl_tensor *b = tsl_new_tensor_2d(ctx, bt, K, N);
    tsl_tensor *out = tsl_mul_mat(ctx, a, b);
    tsl_graph *g = tsl_graph_build(ctx, &out, 1);
    tsl_error err;
    tsl_buffer *buf = g ? tsl_buffer_alloc_ctx(g_vk, ctx, &err) : NULL;
    if (!buf || !fill_copies(&a, 1, 1.0f) || !fill_copies(&b, 1, 1.0f)) {
        printf("matmul   %-5s %-26s setup failed\n", tn, label);
        tsl_buffer_free(buf);
        tsl_ctx_free(ctx);
        return;
    }
    double best = 0;
    for (int pass = -1; pass < N_KERNELS; pass++) {
        const mmk *k = pass < 0 ? NULL : &g_kernels[pass];
        if (k && (k->type != t || k->btype != bt ||
                  (k->family != VK_MM_CM && k->family != VK_MM_CM2 && k->family != VK_MM_TILED)))
            continue;
        if (k && bench_skip(o, k->name, label)) continue;
        if (k && (k->family == VK_MM_CM || k->family == VK_MM_CM2) && cm_unavailable(k)) {
            printf("matmul   %-5s %-26s %-40s not available: %s\n", tn, label, k->name, cm_unavailable(k));
            continue;
        }
        if (k) setenv("TSL_VK_MM_VARIANT", k->name, 1);
        char why[600] = "";
        double s = time_graph(g, o->reps, why, sizeof why);
        if (k) unsetenv("TSL_VK_MM_VARIANT");
        if (s <= 0) {
            printf("matmul   %-5s %-26s %-40s failed: %.200s\n", tn, label, k ? k->name : "(default choice)", why);
            continue;
        }
        double tf = 2.0 * (double)M * (double)N * (double)K / s / 1e12;
        if (tf > best && (!k || k->family == VK_MM_CM || k->family == VK_MM_CM2)) best = tf;
        printf("matmul   %-5s %-26s %-40s %8.2f TFLOP/s %10.1f us\n", tn, label, k ? k->name : "(default choice)",
               tf, s * 1e6);
        fflush(stdout);
    }
    if (best_out) *best_out = best;
    tsl_buffer_free(buf);
    tsl_ctx_free(ctx);
}

static int bench(int argc, char **argv) {
    bench_opts o = {.reps = 9};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) o.quick = true;
        else if (strcmp(argv[i], "--filter") == 0 && i + 1 < argc) o.filter = argv[++i];
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) o.reps = atoi(argv[++i]);
    }
    if (o.reps < 1) o.reps = 1;
    if (o.quick && o.reps > 3) o.reps = 3;
    /* one command buffer per compute: the GPU's time is the kernels' alone,
     * with no wait between command buffers */
    tsl_error err;
    tsl_backend_vulkan_set_command_buffers(g_vk, 1, &err);
    tsl_vulkan_stats s0;
    tsl_backend_vulkan_stats(g_vk, &s0);
    printf("bench: %s, subgroup %u, cooperative matrices %s, shared memory %u bytes, timing %s%s\n", g_info.name,
           g_info.subgroup_size, g_info.cooperative_matrix ? "yes" : "no", g_info.max_shared_memory,
           s0.gpu_timing ? "GPU timestamps" : "wall clock", o.quick ? " (quick sizes)" : "");
    printf("  mat-vec figures: weight bytes / GPU time of one compute over every rotated matrix (median of %d)\n",
           o.reps);
    bench_copy(&o);

    static const bshape full[] = {
        {"8192x8192", 8192, 8192},           {"4096x4096", 4096, 4096},
        {"896x896 (0.5B attn)", 896, 896},   {"4864x896 (0.5B ffn up)", 4864, 896},
        {"896x4864 (0.5B ffn down)", 896, 4864}, {"14336x4096 (8B ffn up)", 14336, 4096},
        {"4096x14336 (8B ffn down)", 4096, 14336}, {"128256x4096 (8B vocab)", 128256, 4096},
    };
    static const bshape quick[] = {{"512x512", 512, 512}, {"1024x256", 1024, 256}};
    const bshape *shapes = o.quick ? quick : full;
    int nshapes = o.quick ? 2 : (int)(sizeof full / sizeof full[0]);
    static const tsl_type types[] = {TSL_TYPE_F16, TSL_TYPE_Q8_0, TSL_TYPE_Q4_0, TSL_TYPE_F32, TSL_TYPE_BF16};
    double headline[5] = {0};
    for (int ti = 0; ti < 5; ti++)
        for (int si = 0; si < nshapes; si++) {
            /* F32 and BF16 weights only at the two square sizes */
            if (ti > 2 && si > 1) continue;
            double best = 0;
            bench_matvec(&o, types[ti], &shapes[si], 1, VK_MM_VEC, &best);
            if (si == 0) headline[ti] = best;
        }
    for (int ti = 0; ti < 3; ti++)
        for (int64_t N = 2; N <= 8; N *= 2) bench_matvec(&o, types[ti], &shapes[o.quick ? 0 : 1], N, VK_MM_VECN, NULL);
    double cm_best = 0;
    if (o.quick) {
        bench_matmul(&o, TSL_TYPE_F16, TSL_TYPE_F32, 256, 256, 256, &cm_best);
        bench_matmul(&o, TSL_TYPE_F16, TSL_TYPE_F16, 256, 256, 256, &cm_best);
        bench_matmul(&o, TSL_TYPE_Q4_0, TSL_TYPE_F32, 256, 64, 256, NULL);
    } else {
        bench_matmul(&o, TSL_TYPE_F16, TSL_TYPE_F32, 4096, 4096, 4096, &cm_best);
        bench_matmul(&o, TSL_TYPE_F16, TSL_TYPE_F16, 4096, 4096, 4096, &cm_best);
        bench_matmul(&o, TSL_TYPE_F16, TSL_TYPE_F32, 8192, 8192, 8192, NULL);
        bench_matmul(&o, TSL_TYPE_F16, TSL_TYPE_F32, 4096, 512, 4096, NULL);
        bench_matmul(&o, TSL_TYPE_Q8_0, TSL_TYPE_F32, 4096, 4096, 4096, NULL);
        bench_matmul(&o, TSL_TYPE_Q4_0, TSL_TYPE_F32, 4096, 4096, 4096, NULL);
        bench_matmul(&o, TSL_TYPE_Q4_0, TSL_TYPE_F32, 4096, 512, 4096, NULL);
    }
    printf("\nsummary (%s):\n", shapes[0].label);
    for (int ti = 0; ti < 3; ti++)
        printf("  mat-vec %-5s best %8.1f GB/s = %5.1f%% of the copy kernel's %.1f GB/s (target 80%%)\n",
               tsl_type_name(types[ti]), headline[ti], o.copy_gbs > 0 ? 100.0 * headline[ti] / o.copy_gbs : 0.0,
               o.copy_gbs);
    printf("  matmul f16 %s on cooperative matrices: best %.2f TFLOP/s (target 310, 40%% of torch bf16)\n",
           o.quick ? "256^3" : "4096^3", cm_best);
    return 0;
}

int main(int argc, char **argv) {
    bool do_bench = false;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--bench") == 0) do_bench = true;
    int n = vkh_devices();
    tsl_error err;
    if (n <= 0) {
        tsl_backend *be = tsl_backend_vulkan_new(-1, &err);
        char line[512];
        tsl_error_format(&err, line, sizeof line);
        tsl_backend_free(be);
        if (getenv("TSL_REQUIRE_VULKAN")) {
            fprintf(stderr, "FAIL: no Vulkan device and TSL_REQUIRE_VULKAN is set: %s\n", line);
            return 1;
        }
        printf("skipped: no Vulkan device (%s)\n", line);
        return 0;
    }
    g_vk = tsl_backend_vulkan_new(-1, &err);
    if (!g_vk || tsl_backend_vulkan_info(g_vk, &g_info, &err) != TSL_SUCCESS) {
        char line[512];
        tsl_error_format(&err, line, sizeof line);
        fprintf(stderr, "FAIL: could not make the Vulkan backend: %s\n", line);
        return 1;
    }
    unsetenv("TSL_VK_MM_VARIANT");
    int rc;
    if (do_bench) {
        rc = bench(argc, argv);
    } else {
        printf("device: %s (%s), subgroup %u, cooperative matrices %s%s, %d mul_mat kernels\n", g_info.name,
               g_info.type, g_info.subgroup_size, g_info.cooperative_matrix ? "yes" : "no",
               g_info.cooperative_matrix2 ? " (and workgroup scope)" : "", N_KERNELS);
        seed_from_env();
        RUN(test_tiled);
        RUN(test_vec);
        RUN(test_vecq);
        RUN(test_vecq_column_reuse);
        RUN(test_vecq_quantizer_exact);
        RUN(test_vecq_quantizer_broken);
        RUN(test_small_n);
        RUN(test_coopmat);
        RUN(test_coopmat_emulated);
        RUN(test_coopmat_workgroup);
        RUN(test_large);
        RUN(test_forcing);
        RUN(test_validation);
        rc = test_summary();
    }
    tsl_backend_free(g_vk);
    return rc;
}

#endif /* TSL_HAVE_VULKAN */
