/*
 * vk_ops_mm.c - mul_mat on the Vulkan backend: which kernel serves a node,
 * and its push constants and grid.
 *
 * The choice, by the node's shape and the device:
 *   N == 1         mat-vec (mul_mat_vec_*): decode, bound by the weights'
 *                  bytes; for Q8_0 / Q4_0 first the integer-dot kernel
 *                  (mul_mat_vecq_*: the column quantized to Q8_0 as on the
 *                  CPU; K up to 16384, devices with 4x8-bit dot products),
 *                  then the team kernel (F32 activations)
 *   N = 2..8       the same kernel carrying 8 columns (mul_mat_vecn_*):
 *                  each weight read once for every column
 *   N > 8, F16     cooperative matrices (mul_mat_cm_*) where the device
 *                  multiplies 16x16x16 F16 tiles into F32 with 32-wide
 *                  subgroups and the tile fits its shared memory: 64x64
 *                  tiles up to 64 columns, 256x128 (16 warps) above, or
 *                  128x128 where the device's limits refuse it. Activations are
 *                  rounded to F16 on the way (as ggml's F16 paths do):
 *                  results within 2^-11 * sum |a b| of exact
 *   N >= 32, Q8_0 / Q4_0   the same, the weights dequantized to F16 as the
 *                  tiles are staged (one more F16 rounding)
 *   N > 64 (F16), N >= 128 (Q8_0 / Q4_0), F32 activations, whole tiles,
 *                  on devices with workgroup-scope cooperative matrices:
 *                  first those kernels (*_f32c), the activations (and
 *                  block weights) copied to F16 into scratches before the
 *                  product (vk_mm_conv, vk_mm_wconv; the same roundings):
 *                  4096^3 at 216-256 TFLOP/s on the H200 against 119-204
 *   otherwise      the tiled kernel (mul_mat_*), which runs anywhere
 * Activations are F32, or F16 with F16 weights (the *_f16_f16 kernels).
 * each followed by the tiled kernel, taken when the device cannot run the
 * first (no subgroup arithmetic, no cooperative matrices, or a build whose
 * compiler could not make them: vk_pipeline.c marks those not runnable).
 *
 * Layout is not part of the choice (supports_op may ask before tensors have
 * addresses): every kernel reads any strides, and the launch tells it, in
 * flags, where 16-byte loads and stores line up with the actual bindings.
 *
 * Tuning. The variants of vk_kernels_mm.h differ in specialization
 * constants only. TSL_VK_MM_VARIANT=name[,name...] makes the first named
 * kernel of a node's weight type that applies to the node (a mat-vec
 * kernel for one column, a tile for many) that node's only candidate: where
 * it names kernels of the type but none applies (cooperative matrices on a
 * device without them), the node has no Vulkan kernel at all, so a forced
 * run can never silently measure another kernel. Names of other weight
 * types leave a node alone. The benchmark in tests/vulkan/test_vk_mulmat.c
 * (--bench) sweeps every variant this way.
 */
#include <stdlib.h>
#include <string.h>

#include "vulkan/vk.h"

static const vk_mm_info vk_mm_infos[VK_K_COUNT] = {
#define VK_MM_INFO(X, id, name, e0, e1, blob_, fam, t, bt, s0, s1, s2, s3, s4, s5)                       \
    [VK_K_##id] = {.blob = blob_, .family = VK_MM_##fam, .type = TSL_TYPE_##t, .btype = TSL_TYPE_##bt,        \
                   .spec = {s0, s1, s2, s3, s4, s5}},
    VK_MM_LIST(VK_MM_INFO, 0)
#undef VK_MM_INFO
};

const vk_mm_info *vk_mm_info_of(int id) {
    if (id < 0 || id >= VK_K_COUNT || !vk_mm_infos[id].blob) return NULL;
    return &vk_mm_infos[id];
}

bool vk_mm_kernel(int kernel) { return vk_mm_info_of(kernel) != NULL; }

bool vk_mm_conv(int kernel) {
    const vk_mm_info *v = vk_mm_info_of(kernel);
    return v && v->btype == TSL_TYPE_F32 && vk_kernel_descs[kernel].esize[1] == 2;
}

uint64_t vk_mm_conv_bytes(const tsl_tensor *n) { return (uint64_t)tsl_nelements(n->src[1]) * 2u; }

bool vk_mm_wconv(int kernel) {
    return vk_mm_conv(kernel) &&
           (vk_mm_info_of(kernel)->type == TSL_TYPE_Q8_0 || vk_mm_info_of(kernel)->type == TSL_TYPE_Q4_0);
}

uint64_t vk_mm_wconv_bytes(const tsl_tensor *n) { return (uint64_t)tsl_nelements(n->src[0]) * 2u; }

/* Do kernel id's F16 copies of node n's operands (if it makes any) fit
 * their scratches? */
static bool vk_mm_conv_fits(int id, const tsl_tensor *n) {
    return (!vk_mm_conv(id) || vk_mm_conv_bytes(n) <= VK_HSCR_SIZE) &&
           (!vk_mm_wconv(id) || vk_mm_wconv_bytes(n) <= VK_WSCR_SIZE);
}

/* Source j of node n as the dense F16 copy a converting kernel reads. */
static void vk_mm_f16_copy(const tsl_tensor *n, int j, tsl_tensor *h) {
    const tsl_tensor *b = n->src[j];
    memset(h, 0, sizeof *h);
    h->type = TSL_TYPE_F16;
    h->op = TSL_OP_CPY;
    h->src[0] = (tsl_tensor *)b;
    for (int i = 0; i < TSL_MAX_DIMS; i++) {
        h->ne[i] = b->ne[i];
        h->nb[i] = i == 0 ? 2u : h->nb[i - 1] * (size_t)h->ne[i - 1];
    }
}

/* The activations (b) of node n as the F16 copy a converting kernel reads
 * (vk_mm_conv); its weights (a) as their F16 copy (vk_mm_wconv). */
void vk_mm_conv_tensor(const tsl_tensor *n, tsl_tensor *h) { vk_mm_f16_copy(n, 1, h); }
void vk_mm_wconv_tensor(const tsl_tensor *n, tsl_tensor *h) { vk_mm_f16_copy(n, 0, h); }

bool vk_mm_optional(int id) {
    const vk_mm_info *v = vk_mm_info_of(id);
    return v && (v->family == VK_MM_CM || v->family == VK_MM_CM2);
}

/* ---- what a variant needs of the device and the node ------------------------- */

enum {
    VK_MM_NC = 8, /* columns of the VECN kernels */
    /* block-format weights go to the matrix units from this many columns:
     * dequantizing a 128-row tile per K step pays only over enough columns
     * (and fewer stay on the tiled kernel: F32 arithmetic, no F16 rounding) */
    VK_MM_CM_MIN_N_QUANT = 32,
    /* ... and to the workgroup-scope kernels through their F16 copy from
     * this many */
    VK_MM_CM2_MIN_N_QUANT = 128,
    /* fewest workgroups for a tile larger than 128x128 (see vk_mm_candidates) */
    VK_MM_CM_BIG_GRID = 256,
};

static bool vk_mm_quant(int type) { return type == TSL_TYPE_Q8_0 || type == TSL_TYPE_Q4_0; }

/* The integer-dot mat-vec's own family, or one of its fused-only twins'
 * (VECQR, VECQN, VECQS: never a node's candidate, only what vk_backend.c
 * fuses a node into)? */
static bool vk_mm_fused_family(int f) { return f == VK_MM_VECQR || f == VK_MM_VECQN || f == VK_MM_VECQS; }
static bool vk_mm_intdot(const vk_mm_info *v) { return v && (v->family == VK_MM_VECQ || vk_mm_fused_family(v->family)); }

/* A staged mat-vec variant (mv_staged.glsl): spec[5] = KS | PF << 8. */
static bool vk_mm_staged(const vk_mm_info *v) {
    return (v->family == VK_MM_VEC || v->family == VK_MM_VECN) && vk_mm_quant(v->type) && v->spec[5] != 0;
}

/* Shared memory of the staged part: a super-block (8 blocks) per
 * invocation, 256 activations (+4) per split and column. */
static uint32_t vk_mm_staged_shared(const vk_mm_info *v, uint32_t nc) {
    return v->spec[0] * (v->type == TSL_TYPE_Q8_0 ? 272u : 144u) + nc * (v->spec[5] & 0xffu) * 65u * 16u;
}

/* Shared memory a variant declares, bytes. */
static uint32_t vk_mm_shared(const vk_mm_info *v) {
    const uint32_t *s = v->spec;
    switch (v->family) {
    case VK_MM_VEC: return 4u * s[0] * s[2] + (vk_mm_staged(v) ? vk_mm_staged_shared(v, 1) : 0u);
    case VK_MM_VECN: return 4u * s[0] * s[2] * VK_MM_NC + (vk_mm_staged(v) ? vk_mm_staged_shared(v, VK_MM_NC) : 0u);
    /* the team sums, the quantized column (32 bytes a block) and its scales
     * and sums (8) */
    case VK_MM_VECQ:
    case VK_MM_VECQR:
    case VK_MM_VECQN:
    case VK_MM_VECQS: return 4u * s[0] * s[2] + ((s[5] >> 16) ? 0u : 40u * s[5]);
    case VK_MM_CM:
    case VK_MM_CMEMU: {
        /* s[5]: BK, + 256 for one staging buffer instead of two */
        uint32_t bm = s[1] * s[3] * 16u, bn = s[2] * s[4] * 16u, sk = (s[5] & 255u) / 8u + 1u;
        return 16u * (2u - (s[5] >> 8)) * (bm + bn) * sk + 4u * s[1] * s[2] * 256u;
    }
    case VK_MM_CM2: return 0u; /* the driver stages (in memory it reserves) */
    default: return 2u * 32u * 65u * 4u; /* mul_mat.comp's two staged tiles */
    }
}

static bool vk_mm_has_f16_shape(const vk_device *d) {
    for (int i = 0; i < d->f.n_coopmat; i++) {
        const vk_coopmat_shape *s = &d->f.coopmat[i];
        if (s->m == 16 && s->n == 16 && s->k == 16 && s->a == VK_COMPONENT_TYPE_FLOAT16_KHR &&
            s->b == VK_COMPONENT_TYPE_FLOAT16_KHR && s->c == VK_COMPONENT_TYPE_FLOAT32_KHR)
            return true;
    }
    return false;
}

/* Tile sizes of a cooperative-matrix variant. */
static void vk_mm_cm_tile(const vk_mm_info *v, uint32_t *bm, uint32_t *bn) {
    if (v->family == VK_MM_CM2) {
        *bm = v->spec[1];
        *bn = v->spec[2];
        return;
    }
    *bm = v->spec[1] * v->spec[3] * 16u;
    *bn = v->spec[2] * v->spec[4] * 16u;
}

/* Can kernel id compute node n on d (shape, limits, device features)?
 * Capabilities the SPIR-V declares are checked apart (vk_kernel_for). */
static bool vk_mm_applies_as(const vk_device *d, int id, const tsl_tensor *n, bool fused);

static bool vk_mm_applies(const vk_device *d, int id, const tsl_tensor *n) { return vk_mm_applies_as(d, id, n, false); }

bool vk_mm_fused_fits(const vk_device *d, int id, const tsl_tensor *n) {
    const vk_mm_info *v = vk_mm_info_of(id);
    return v && vk_mm_fused_family(v->family) && v->spec[2] == 2 && vk_mm_applies_as(d, id, n, true);
}

/* ... with fused, also the kernels a node is fused into (VECQR, VECQN,
 * VECQS), which are never a plain node's */
static bool vk_mm_applies_as(const vk_device *d, int id, const tsl_tensor *n, bool fused) {
    const vk_mm_info *v = vk_mm_info_of(id);
    const tsl_tensor *a = n->src[0], *b = n->src[1];
    const VkPhysicalDeviceLimits *lim = &d->props.limits;
    if (!v || v->type != (int)a->type || v->btype != (int)b->type) return false;
    if (vk_mm_shared(v) > lim->maxComputeSharedMemorySize) return false;
    if (v->family == VK_MM_TILED) return true;
    const uint32_t w = v->spec[0];
    if (w == 0 || w > lim->maxComputeWorkGroupInvocations || w > lim->maxComputeWorkGroupSize[0]) return false;
    const int64_t N = b->ne[1], M = a->ne[1];
    switch (v->family) {
    case VK_MM_VEC:
    case VK_MM_VECN: {
        if (v->family == VK_MM_VEC ? N != 1 : N > VK_MM_NC) return false;
        uint32_t s = v->spec[1], r = v->spec[2], q = v->spec[3];
        if (s == 0 || r == 0 || w % s != 0) return false;
        if (vk_mm_staged(v) && ((v->spec[5] & 0xffu) == 0 || w % (v->spec[5] & 0xffu) != 0)) return false;
        uint32_t t = w / s;
        if (r * (v->family == VK_MM_VECN ? VK_MM_NC : 1u) > t) return false; /* one lane writes each result */
        if (vk_mm_quant(v->type)) {
            uint32_t qw = v->type == TSL_TYPE_Q8_0 ? 16u : 8u; /* quant words per block */
            if (q == 0 || qw % q != 0 || t % (qw / q) != 0) return false;
        }
        return true;
    }
    case VK_MM_VECQR:
    case VK_MM_VECQN:
    case VK_MM_VECQS:
        if (!fused) return false;
        /* fall through */
    case VK_MM_VECQ: {
        /* {W, S, R, LPB, U, KB}: a lane reads 8 or 16 quant bytes, whole
         * blocks fit the team, K fits the shared column */
        const uint32_t s = v->spec[1], r = v->spec[2], lpb = v->spec[3], kb = v->spec[5];
        const uint32_t qbb = v->type == TSL_TYPE_Q8_0 ? 32u : 16u;
        if (N != 1 || !d->f.int_dot || s == 0 || r == 0 || w % s != 0 || lpb == 0 || v->spec[4] == 0) return false;
        /* split Q4_0 weights: only kernels with a twin for them (swapped in
         * after fusion); the twins themselves are never a node's own */
        if ((kb & 0x20000u) || (backend_q4s(a, NULL, NULL) && vk_mm_q4s_twin(id) < 0)) return false;
        if (qbb % lpb != 0 || (qbb / lpb != 8u && qbb / lpb != 16u)) return false;
        const uint32_t t = w / s;
        if (t % lpb != 0 || r > t) return false;
        return ((kb >> 16) || a->ne[0] / 32 <= (int64_t)kb) && vk_mm_qscr_bytes(n) <= VK_QSCR_SLOT;
    }
    case VK_MM_CM2: {
        /* tiles in whole 32x32 pieces (the granularity NVIDIA reports for
         * 256 invocations; finer for fewer), K steps of 16 */
        const uint32_t bm = v->spec[1], bn = v->spec[2], bk = v->spec[3], u = v->spec[5] ? v->spec[5] : 4u;
        if (!d->f.coopmat2 || w > d->f.coopmat2_max_wg || d->f.subgroup_size != 32 || w % 32u != 0) return false;
        if (bm == 0 || bn == 0 || bm % 32u != 0 || bn % 32u != 0 || bk == 0 || bk % 16u != 0) return false;
        /* whole tiles only, K-contiguous operands with 16-byte strides
         * (mul_mat_cm2.comp has no edge path) */
        const int64_t K = a->ne[0];
        /* activations to convert are read by the conversion, any layout;
         * its dense F16 copy has 16-byte strides where 4 BK divides K */
        const bool cv = vk_mm_conv(id), wcv = vk_mm_wconv(id);
        if (M % bm != 0 || N % bn != 0 || K % ((int64_t)u * bk) != 0 || (!cv && b->nb[0] != 2)) return false;
        if (!vk_mm_conv_fits(id, n)) return false;
        for (int i = 1; i < TSL_MAX_DIMS; i++)
            if ((!wcv && a->nb[i] % 16 != 0) || (!cv && b->nb[i] % 16 != 0) || n->nb[i] % 16 != 0) return false;
        return (uint64_t)(M + bm - 1) / bm <= lim->maxComputeWorkGroupCount[0] &&
               (uint64_t)(N + bn - 1) / bn <= lim->maxComputeWorkGroupCount[1];
    }
    case VK_MM_CM:
        if (!d->f.cooperative_matrix || !vk_mm_has_f16_shape(d) || d->f.subgroup_size != 32) return false;
        /* fall through */
    case VK_MM_CMEMU: {
        uint32_t bm, bn;
        vk_mm_cm_tile(v, &bm, &bn);
        const uint32_t bk = v->spec[5] & 255u;
        if (w != 32u * v->spec[1] * v->spec[2] || bk % 16u != 0 || bk == 0 || v->spec[5] > 511u) return false;
        if (!vk_mm_conv_fits(id, n)) return false;
        return (uint64_t)(M + bm - 1) / bm <= lim->maxComputeWorkGroupCount[0] &&
               (uint64_t)(N + bn - 1) / bn <= lim->maxComputeWorkGroupCount[1];
    }
    default: return false;
    }
}

/* The first kernel TSL_VK_MM_VARIANT names for weight type t and
 * activation type bt that applies to node n; -2 where it names some for
 * the types but none applies (the node then has no kernel), -1 where it
 * names none. */
static int vk_mm_forced(const vk_device *d, const tsl_tensor *n, int t, int bt) {
    const char *s = getenv("TSL_VK_MM_VARIANT");
    if (!s || !*s) return -1;
    int named = -1;
    while (*s) {
        size_t len = strcspn(s, ",");
        for (int id = 0; id < VK_K_COUNT; id++) {
            const vk_mm_info *v = vk_mm_info_of(id);
            const char *name = vk_kernel_descs[id].name;
            if (v && v->type == t && v->btype == bt && strlen(name) == len && strncmp(name, s, len) == 0) {
                if (vk_mm_applies(d, id, n)) return id;
                named = -2;
            }
        }
        s += len;
        if (*s == ',') s++;
    }
    return named;
}

int vk_mm_candidates(const vk_device *d, const tsl_tensor *n, int cand[VK_MAX_CAND]) {
    const tsl_tensor *a = n->src[0], *b = n->src[1];
    const int t = a->type;
    if (t != TSL_TYPE_F32 && t != TSL_TYPE_F16 && t != TSL_TYPE_BF16 && t != TSL_TYPE_Q8_0 && t != TSL_TYPE_Q4_0)
        return 0;
    if (!b || !vk_is_f32(n) || n->nb[0] != sizeof(float)) return 0;
    const int bt = b->type; /* activations: F32, or F16 with F16 weights (as on the CPU) */
    if (bt != TSL_TYPE_F32 && !(bt == TSL_TYPE_F16 && t == TSL_TYPE_F16)) return 0;
    if (a->nb[0] != tsl_type_block_size(a->type) || a->ne[0] != b->ne[0]) return 0;
    if (tsl_type_is_quantized(a->type) && a->ne[0] % tsl_type_block_len(a->type) != 0) return 0;
    if (a->ne[2] <= 0 || a->ne[3] <= 0 || b->ne[2] % a->ne[2] != 0 || b->ne[3] % a->ne[3] != 0) return 0;
    if (n->ne[0] != a->ne[1] || n->ne[1] != b->ne[1] || n->ne[2] != b->ne[2] || n->ne[3] != b->ne[3]) return 0;
    if ((uint64_t)b->ne[2] * (uint64_t)b->ne[3] > d->props.limits.maxComputeWorkGroupCount[2]) return 0;

    const int forced = vk_mm_forced(d, n, t, bt);
    if (forced == -2) return 0;
    if (forced >= 0) {
        cand[0] = forced;
        return 1;
    }

    /* per weight (and activation) type: tiled, mat-vec, small-N */
    static const int fam[][3] = {
        {VK_K_MUL_MAT_F32, VK_K_MUL_MAT_VEC_F32, VK_K_MUL_MAT_VECN_F32},
        {VK_K_MUL_MAT_F16, VK_K_MUL_MAT_VEC_F16, VK_K_MUL_MAT_VECN_F16},
        {VK_K_MUL_MAT_BF16, VK_K_MUL_MAT_VEC_BF16, VK_K_MUL_MAT_VECN_BF16},
        {VK_K_MUL_MAT_Q8_0, VK_K_MUL_MAT_VEC_Q8_0, VK_K_MUL_MAT_VECN_Q8_0},
        {VK_K_MUL_MAT_Q4_0, VK_K_MUL_MAT_VEC_Q4_0, VK_K_MUL_MAT_VECN_Q4_0},
        {VK_K_MUL_MAT_F16_F16, VK_K_MUL_MAT_VEC_F16_F16, VK_K_MUL_MAT_VECN_F16_F16},
    };
    const int *f = fam[bt == TSL_TYPE_F16        ? 5
                       : t == TSL_TYPE_F32  ? 0
                       : t == TSL_TYPE_F16  ? 1
                       : t == TSL_TYPE_BF16 ? 2
                       : t == TSL_TYPE_Q8_0 ? 3
                                            : 4];
    const int tiled = f[0], vec = f[1], vecn = f[2];
    const int64_t N = b->ne[1];
    int k = 0;
    /* block weights, one column: integer dot products where the device has
     * them, else the float team kernel */
    int vecq = t == TSL_TYPE_Q8_0 ? VK_K_MUL_MAT_VECQ_Q8_0 : t == TSL_TYPE_Q4_0 ? VK_K_MUL_MAT_VECQ_Q4_0 : -1;
    /* long rows over few of them (an FFN's down projection): teams of 64
     * lanes, so a row's blocks take half the rounds of loads and the GPU
     * still has enough lanes at work; 4096x14336 Q4_0 ran 17.5 us a product
     * against 20.6 on the H200, and shorter rows slower (bench/RESULTS.md,
     * run 55). With 8192 rows and more the 32-lane teams already fill it:
     * 8192x8192 Q4_0 read at 89-90% of copy with them, 79% with 64 (run 71) */
    if (vecq >= 0 && a->ne[0] >= 8192 && a->ne[1] < 8192)
        vecq = t == TSL_TYPE_Q8_0 ? VK_K_MUL_MAT_VECQ_Q8_0_dw128s2 : VK_K_MUL_MAT_VECQ_Q4_0_dw128s2;
    if (N == 1 && bt == TSL_TYPE_F32 && vecq >= 0 && vk_mm_applies(d, vecq, n) && d->k[vecq].runnable &&
        d->k[VK_K_QUANTIZE_Q8_F32].runnable)
        cand[k++] = vecq;
    if (N == 1 && vk_mm_applies(d, vec, n)) {
        cand[k++] = vec;
    } else if (N <= VK_MM_NC && vk_mm_applies(d, vecn, n)) {
        cand[k++] = vecn;
    } else if (t == TSL_TYPE_F16 || ((t == TSL_TYPE_Q8_0 || t == TSL_TYPE_Q4_0) && N >= VK_MM_CM_MIN_N_QUANT)) {
        /* F16 x F16 in whole tiles: the workgroup-scope kernels first, where
         * the device has them. 128x128 tiles of 4 warps with K steps of 64
         * ran 4096^3 at 306-325 TFLOP/s on the H200 against 230-237 for the
         * same tile with 8 warps (bench/RESULTS.md, runs 117-120), and the 8B
         * model's 512-token prefill (grids of 128 to 896 tiles) at 6327-6331
         * tok/s against 6045-6084: first wherever K is whole steps of 128.
         * Then the 8-warp tile (K in steps of 256), the larger tile where its
         * grid still fills the GPU twice over (264 workgroups; 4096 x 4096
         * gives 512), else the smaller one's wider grid. */
        const bool wide = (a->ne[1] / 128) * (N / 256) * b->ne[2] * b->ne[3] >= 264;
        /* F32 activations: the same kernels, the activations rounded to
         * F16 into a scratch first (vk_mm_conv; the subgroup-scope tile
         * below rounds them as it stages, the same values) */
        /* Q8_0 / Q4_0 weights: the same, the weights dequantized to F16
         * into a scratch first too (vk_mm_wconv), from VK_MM_CM2_MIN_N_QUANT
         * columns, where that pass is small beside the product */
        static const int cm2s[4][4] = {
            {VK_K_MUL_MAT_CM2_F16_F16_128X128K64W128, VK_K_MUL_MAT_CM2_F16_F16_128X128K64, VK_K_MUL_MAT_CM2_F16_F16,
             VK_K_MUL_MAT_CM2_F16_F16_128X128W128},
            {VK_K_MUL_MAT_CM2_F16_F32C_128X128K64W128, VK_K_MUL_MAT_CM2_F16_F32C_128X128K64, VK_K_MUL_MAT_CM2_F16_F32C,
             VK_K_MUL_MAT_CM2_F16_F32C_128X128W128},
            {VK_K_MUL_MAT_CM2_Q8_0_F32C_128X128K64W128, VK_K_MUL_MAT_CM2_Q8_0_F32C_128X128K64, VK_K_MUL_MAT_CM2_Q8_0_F32C,
             VK_K_MUL_MAT_CM2_Q8_0_F32C_128X128W128},
            {VK_K_MUL_MAT_CM2_Q4_0_F32C_128X128K64W128, VK_K_MUL_MAT_CM2_Q4_0_F32C_128X128K64, VK_K_MUL_MAT_CM2_Q4_0_F32C,
             VK_K_MUL_MAT_CM2_Q4_0_F32C_128X128W128},
        };
        const int *c2 = cm2s[bt == TSL_TYPE_F16 ? 0 : t == TSL_TYPE_F16 ? 1 : t == TSL_TYPE_Q8_0 ? 2 : 3];
        const int cm2[] = {c2[0], c2[1], wide ? c2[2] : c2[3], wide ? c2[3] : c2[2]};
        const bool on = t == TSL_TYPE_F16 ? N > 64 : N >= VK_MM_CM2_MIN_N_QUANT;
        for (size_t i = 0; on && i < sizeof cm2 / sizeof cm2[0]; i++) {
            if (vk_mm_applies(d, cm2[i], n) && d->k[cm2[i]].runnable) {
                cand[k++] = cm2[i];
                break;
            }
        }
        /* the first tile in order of preference the device can run: 64x64
         * for few columns, else 256x128 with 16 warps and one staging buffer
         * (47 KiB of shared memory, 512 invocations), then 128x128 tiles
         * that need less */
        static const int pref[][4] = {
            {VK_K_MUL_MAT_CM_F16_64X64, VK_K_MUL_MAT_CM_F16_128X128K16, -1, -1},
            /* 256x128, 16 warps: 220 TFLOP/s at 4096^3 on the H200 against
             * 158 for the 4-warp 128x128 tile (bench/RESULTS.md, run 18) */
            {VK_K_MUL_MAT_CM_F16_256X128W16S1, VK_K_MUL_MAT_CM_F16_128X128W4, VK_K_MUL_MAT_CM_F16,
             VK_K_MUL_MAT_CM_F16_128X128K16},
            /* Q8_0 122 / Q4_0 128 TFLOP/s at 4096^3 on the H200 against 84 /
             * 94 for the 8-warp 256x128 tile (run 25) */
            {VK_K_MUL_MAT_CM_Q8_0_256X128W16S1, VK_K_MUL_MAT_CM_Q8_0_256X128S1, VK_K_MUL_MAT_CM_Q8_0,
             VK_K_MUL_MAT_CM_Q8_0_128X128K16},
            {VK_K_MUL_MAT_CM_Q4_0_256X128W16S1, VK_K_MUL_MAT_CM_Q4_0_256X128S1, VK_K_MUL_MAT_CM_Q4_0,
             VK_K_MUL_MAT_CM_Q4_0_128X128K16},
            {VK_K_MUL_MAT_CM_F16_F16_64X64, VK_K_MUL_MAT_CM_F16_F16_128X128K16, -1, -1},
            {VK_K_MUL_MAT_CM_F16_F16_256X128W16S1, VK_K_MUL_MAT_CM_F16_F16, VK_K_MUL_MAT_CM_F16_F16_128X128K16,
             VK_K_MUL_MAT_CM_F16_F16_64X64},
        };
        const int *p = pref[t == TSL_TYPE_F16 ? (bt == TSL_TYPE_F16 ? 4 : 0) + (N <= 64 ? 0 : 1)
                                              : t == TSL_TYPE_Q8_0 ? 2 : 3];
        for (int i = 0; i < 4 && p[i] >= 0; i++) {
            if (!vk_mm_applies(d, p[i], n) || !d->k[p[i]].runnable) continue;
            /* a 256-row tile only where its grid fills a large GPU about
             * twice (an H200 runs one such workgroup per SM, 132 SMs): on
             * fewer workgroups the smaller tile's wider grid is faster */
            uint32_t bm, bn;
            vk_mm_cm_tile(vk_mm_info_of(p[i]), &bm, &bn);
            const uint64_t grid = (uint64_t)((a->ne[1] + bm - 1) / bm) * (uint64_t)((N + bn - 1) / bn) *
                                  (uint64_t)b->ne[2] * (uint64_t)b->ne[3];
            if (bm * bn > 128u * 128u && grid < VK_MM_CM_BIG_GRID && i + 1 < 4 && p[i + 1] >= 0) continue;
            cand[k++] = p[i];
            break;
        }
    }
    cand[k++] = tiled;
    return k;
}

/* ---- the integer-dot mat-vec's quantized column ------------------------------------ */

int vk_mm_q4s_twin(int id) {
    switch (id) {
    case VK_K_MUL_MAT_VECQ_Q4_0: return VK_K_MUL_MAT_VECQ_Q4_0_Q4S;
    case VK_K_MUL_MAT_VECQ_Q4_0_dw128s2: return VK_K_MUL_MAT_VECQ_Q4_0_dw128s2_Q4S;
    case VK_K_MUL_MAT_VECQ_Q4_0_ROPE: return VK_K_MUL_MAT_VECQ_Q4_0_ROPE_Q4S;
    case VK_K_MUL_MAT_VECQ_Q4_0_NS: return VK_K_MUL_MAT_VECQ_Q4_0_NS_Q4S;
    case VK_K_MUL_MAT_VECQ_Q4_0_ROPE_NS: return VK_K_MUL_MAT_VECQ_Q4_0_ROPE_NS_Q4S;
    case VK_K_MUL_MAT_VECQ_Q4_0_NQ: return VK_K_MUL_MAT_VECQ_Q4_0_NQ_Q4S;
    case VK_K_MUL_MAT_VECQ_Q4_0_NQ_W1024: return VK_K_MUL_MAT_VECQ_Q4_0_NQ_W1024_Q4S;
    default: return -1;
    }
}

bool vk_mm_needs_quant(int kernel) {
    const vk_mm_info *v = vk_mm_info_of(kernel);
    return vk_mm_intdot(v);
}

/* Words of one column: quants (8 a block), then scale and sum (2), rounded
 * up to 16 bytes; times b's batches. */
static uint64_t vk_mm_qcol_words(int64_t K) { return ((uint64_t)(K / 32) * 10u + 3u) / 4u * 4u; }

uint64_t vk_mm_qscr_bytes(const tsl_tensor *n) {
    const tsl_tensor *b = n->src[1];
    return 4u * vk_mm_qcol_words(b->ne[0]) * (uint64_t)b->ne[2] * (uint64_t)b->ne[3];
}

/* ---- launch --------------------------------------------------------------------- */

enum {
    VK_MM_A_WIDE = 1,
    VK_MM_B_WIDE = 2,
    VK_MM_D_WIDE = 4,
    VK_MM_A_U16 = 8,
    VK_MM_A_U8 = 16,
    VK_MM_A_U4 = 32,
    VK_MM_RES = 64,
    VK_MM_ROPE_NEOX = 128, /* mul_mat_vecq.comp's R_NEOX */
    VK_MM_WAIT = 256,      /* mul_mat_vecq.comp's MV_WAIT */
    VK_MM_A_Q4S = 512,     /* Q4_0 weights in the split layout (q4s.glsl) */
};

/* The widest unit (16, 8 or 4 bytes) that every weight row of a block-type
 * node starts at and spans a whole number of, for the staged mat-vec's
 * loads; 0 when not even 4 (an odd block count per row). */
static uint32_t vk_mm_row_unit(const vk_bind *bd, const tsl_tensor *a) {
    const uint64_t start = (uint64_t)bd->eoff * 2u, len = tsl_row_size(a->type, a->ne[0]);
    for (uint32_t u = 16; u >= 4; u /= 2) {
        bool ok = bd->off % 16 == 0 && start % u == 0 && len % u == 0;
        for (int i = 1; i < TSL_MAX_DIMS && ok; i++) ok = a->nb[i] % u == 0;
        if (ok) return u;
    }
    return 0;
}

/* Does binding b of t (read as es-byte elements) start 16-byte aligned, with
 * the tensor and its strides from dimension `from` on in whole units of
 * `unit` elements? */
static bool vk_mm_aligned(const vk_bind *bd, const tsl_tensor *t, int es, int from, uint32_t unit) {
    if (bd->off % 16 != 0 || bd->eoff % unit != 0) return false;
    for (int i = from; i < TSL_MAX_DIMS; i++)
        if ((t->nb[i] / (size_t)es) % unit != 0) return false;
    return true;
}

uint32_t vk_mm_params(const vk_device *d, const vk_exec *x, uint32_t pc[VK_PC_WORDS], uint32_t grid[3]) {
    const tsl_tensor *n = x->node, *a = n->src[0], *b = n->src[1];
    const vk_mm_info *v = vk_mm_info_of(x->kernel);
    const uint8_t *es = vk_kernel_descs[x->kernel].esize;
    uint32_t *p = pc;
    memset(pc, 0, VK_PC_WORDS * sizeof *pc);
    const int64_t M = a->ne[1], N = b->ne[1], K = a->ne[0];
    /* what a converting kernel reads: the activations' dense F16 copy,
     * bound at 1, and the weights' where they are converted too, bound at
     * 0 (vk_encode_node) */
    tsl_tensor hb, ha;
    if (vk_mm_conv(x->kernel)) {
        vk_mm_conv_tensor(n, &hb);
        b = &hb;
    }
    if (vk_mm_wconv(x->kernel)) {
        vk_mm_wconv_tensor(n, &ha);
        a = &ha;
    }
    *p++ = vk_u32(M);
    *p++ = vk_u32(N);
    *p++ = vk_u32(K);
    p = vk_put_strides(p, a, es[0], 1);
    p = vk_put_strides(p, b, es[1], 0);
    p = vk_put_strides(p, n, 4, 1);
    *p++ = vk_u32(b->ne[2] / a->ne[2]);
    *p++ = vk_u32(b->ne[3] / a->ne[3]);
    *p++ = vk_u32(b->ne[2]);
    *p++ = x->b[0].eoff;
    *p++ = x->b[1].eoff;
    *p++ = x->b[3].eoff;
    uint32_t flags = 0;
    if (!tsl_type_is_quantized(a->type)) {
        uint32_t unit = 16u / es[0];
        if (K % unit == 0 && vk_mm_aligned(&x->b[0], a, es[0], 1, unit)) flags |= VK_MM_A_WIDE;
    }
    /* activations: the kernels read 4 at a time (8 F16 ones when staging
     * them for the matrix units) */
    uint32_t bunit = es[1] == 2 && v && (v->family == VK_MM_CM || v->family == VK_MM_CMEMU || v->family == VK_MM_CM2)
                         ? 8u
                         : 4u;
    if (b->nb[0] == es[1] && vk_mm_aligned(&x->b[1], b, es[1], 1, bunit)) flags |= VK_MM_B_WIDE;
    if (vk_mm_aligned(&x->b[3], n, 4, 1, 4)) flags |= VK_MM_D_WIDE;
    const bool q4s = a == n->src[0] && backend_q4s(a, NULL, NULL);
    if (q4s) flags |= VK_MM_A_Q4S;
    /* (the staged kernel's 16-byte rows are the file's blocks: split
     * weights take its team kernel) */
    const bool staged = v && vk_mm_staged(v) && !q4s;
    if (staged) {
        uint32_t u = vk_mm_row_unit(&x->b[0], a);
        flags |= u == 16 ? VK_MM_A_U16 : u == 8 ? VK_MM_A_U8 : u == 4 ? VK_MM_A_U4 : 0u;
    }
    uint32_t *flags_at = p;
    *p++ = flags;
    if (vk_mm_intdot(v)) {
        /* the quantized column: binding 2 (the scratch), words; a fused
         * ADD's residual at binding 1 (the encoder binds it there) */
        *p++ = x->b[2].eoff;
        *p++ = vk_u32((int64_t)(vk_mm_qscr_bytes(n) / 4 / ((uint64_t)b->ne[2] * (uint64_t)b->ne[3])));
        const bool res = x->fused && x->fused->op == TSL_OP_ADD;
        *p++ = res ? x->b[1].eoff : 0u;
        if (res) *flags_at |= VK_MM_RES;
    }
    if (v && v->family == VK_MM_VECQR) {
        /* the ropes' words (vk_backend.c made them when it fused the
         * nodes): five in words the kernel reads for nothing else with one
         * column (the column's strides, the result's row stride), the rest
         * after the residual's */
        for (int i = 0; i < 5; i++) pc[6 + i] = x->rope[i];
        for (int i = 5; i < 13; i++) *p++ = x->rope[i];
        if (x->rope_neox) *flags_at |= VK_MM_ROPE_NEOX;
        if (x->by.blk) { /* the biases, at binding 6 */
            pc[22] = x->by.eoff;
            *flags_at |= VK_MM_RES;
        }
    }
    if (v && v->family == VK_MM_VECQN) {
        /* the column its rows make (binding 5, the scratch) and the norm's
         * weight (binding 6) */
        *p++ = x->bx.eoff;
        *p++ = x->by.eoff;
    }
    if (x->wait_n) {
        /* waiting on the kernel that makes its column (vk_wait_edge): the
         * count in the column count's word and the signal word in the
         * activations' offset (one column, integer dot: neither read) */
        pc[1] = x->wait_n;
        pc[17] = x->wait_word;
        *flags_at |= VK_MM_WAIT;
    }
    if (x->nscale) {
        /* its column is a norm's, unscaled (an _ns kernel): the norm's eps
         * in a word the kernel reads for nothing else (the activations'
         * offset) */
        memcpy(&pc[17], &x->ns_eps, sizeof x->ns_eps);
    }

    uint64_t batches = (uint64_t)b->ne[2] * (uint64_t)b->ne[3];
    switch (v ? v->family : VK_MM_TILED) {
    case VK_MM_VEC:
    case VK_MM_VECN:
    case VK_MM_VECQ:
    case VK_MM_VECQR:
    case VK_MM_VECQN:
    case VK_MM_VECQS: {
        /* teams x rows per team; the staged kernel W / KS rows (where the
         * rows are aligned for it, else it runs as the team kernel) */
        uint64_t rows = (uint64_t)v->spec[1] * v->spec[2];
        if (staged && (flags & (VK_MM_A_U16 | VK_MM_A_U8 | VK_MM_A_U4))) rows = v->spec[0] / (v->spec[5] & 0xffu);
        vk_grid(d, ((uint64_t)M + rows - 1) / rows, grid);
        break;
    }
    case VK_MM_CM:
    case VK_MM_CMEMU:
    case VK_MM_CM2: {
        uint32_t bm, bn;
        vk_mm_cm_tile(v, &bm, &bn);
        grid[0] = (uint32_t)(((uint64_t)M + bm - 1) / bm);
        grid[1] = (uint32_t)(((uint64_t)N + bn - 1) / bn);
        break;
    }
    default:
        grid[0] = (uint32_t)((M + 63) / 64);
        grid[1] = (uint32_t)((N + 63) / 64);
        break;
    }
    grid[2] = (uint32_t)batches;
    return (uint32_t)((p - pc) * sizeof *pc);
}

uint32_t vk_mm_quant_params(const vk_device *d, const vk_exec *x, uint32_t pc[VK_PC_WORDS], uint32_t grid[3]) {
    const tsl_tensor *b = x->node->src[1];
    memset(pc, 0, VK_PC_WORDS * sizeof *pc);
    const int64_t K = b->ne[0];
    pc[0] = vk_u32(K);
    pc[1] = vk_u32((int64_t)(b->nb[0] / 4));
    pc[2] = vk_u32((int64_t)(b->nb[2] / 4));
    pc[3] = vk_u32((int64_t)(b->nb[3] / 4));
    pc[4] = vk_u32(b->ne[2]);
    pc[5] = x->b[1].eoff;
    pc[6] = x->b[2].eoff;
    pc[7] = vk_u32((int64_t)vk_mm_qcol_words(K));
    pc[8] = b->nb[0] == 4 && vk_mm_aligned(&x->b[1], b, 4, 1, 4) ? VK_MM_B_WIDE : 0u;
    vk_grid(d, (uint64_t)(K / 32 + 7) / 8, grid);
    grid[2] = (uint32_t)((uint64_t)b->ne[2] * (uint64_t)b->ne[3]);
    return 9u * sizeof *pc;
}
