/*
 * vk_ops.c - which Vulkan kernel serves a node, and how it is launched
 * (push constants and grid).
 *
 * vk_kernel_for is the single place deciding whether this backend can run a
 * node as built: op, the types of the result and of each source, layouts the
 * kernels read (every stride a whole number of the binding's elements; rows
 * of block formats dense), and the device's limits (a tensor must fit one
 * storage-buffer binding, maxStorageBufferRange; element indices are 32-bit).
 * The shape rules repeat the CPU backend's (src/cpu/ops.c), so what one
 * accepts the other computes the same way; anything else is answered false,
 * and the scheduler runs it on the CPU.
 *
 * Strides reach the kernels as element strides (byte strides divided by the
 * element size the binding is read with: 4 for F32/I32, 2 for F16/BF16 and
 * for block formats, which are read as 16-bit words, 1 for I8), and each
 * tensor's first element as an element offset within its binding, so
 * views, permutes and transposes are read in place.
 *
 * Coverage is the CPU's: every op and type combination cpu_kernel_for
 * accepts has a kernel here, on any device with 16-bit storage (I8 copies
 * and concat also need 8-bit storage). The copies fall in three families,
 * told apart by their place in VK_KERNELS_CPY: into a plain float type (per
 * element), into a block format (per block, bit-exact with tsl_quantize),
 * and between tensors of one other type (opaque units: blocks are never
 * requantized, integers never pass through floats).
 */
#include <math.h>
#include <string.h>

#include "vulkan/vk.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* Rows at least this long make cross_entropy.comp share each row across the
 * workgroup; shorter ones go one per invocation. */
#define VK_CE_COOP_ROW 256

/* ---- layout checks ----------------------------------------------------------- */

bool vk_is_f32(const tsl_tensor *t) { return t && t->type == TSL_TYPE_F32; }

/* The smallest element any kernel reads t with (8-byte types are moved as
 * 16-bit words, never read as numbers). */
static int esize_of(tsl_type t) {
    switch (t) {
    case TSL_TYPE_F32:
    case TSL_TYPE_I32: return 4;
    case TSL_TYPE_F16:
    case TSL_TYPE_BF16:
    case TSL_TYPE_I16:
    case TSL_TYPE_I64:
    case TSL_TYPE_F64:
    case TSL_TYPE_Q8_0:
    case TSL_TYPE_Q4_0: return 2;
    case TSL_TYPE_I8: return 1;
    default: return 0;
    }
}

/* Can t be bound and indexed by a kernel reading it as es-byte elements? */
static bool vk_layout_ok(const vk_device *d, const tsl_tensor *t) {
    int es = esize_of(t->type);
    if (!es) return false;
    if (tsl_type_is_quantized(t->type)) {
        if (t->nb[0] != tsl_type_block_size(t->type) || t->ne[0] % tsl_type_block_len(t->type) != 0) return false;
    } else if (t->nb[0] % (size_t)es) {
        return false;
    }
    for (int i = 1; i < TSL_MAX_DIMS; i++)
        if (t->nb[i] % (size_t)es) return false;
    int64_t n = tsl_nelements(t);
    if (n < 0 || n > (int64_t)UINT32_MAX) return false;
    /* the binding starts at most one offset alignment before the tensor */
    uint64_t span = (uint64_t)tsl_nbytes(t) + d->props.limits.minStorageBufferOffsetAlignment + 4;
    return span <= d->props.limits.maxStorageBufferRange;
}

static bool vk_unary_f32(const tsl_tensor *n) {
    return vk_is_f32(n) && vk_is_f32(n->src[0]) && tsl_same_shape(n, n->src[0]);
}

static bool vk_binary_f32(const tsl_tensor *n) {
    const tsl_tensor *a = n->src[0], *b = n->src[1];
    if (!vk_is_f32(n) || !vk_is_f32(a) || !vk_is_f32(b) || !tsl_same_shape(n, a)) return false;
    for (int i = 0; i < TSL_MAX_DIMS; i++)
        if (b->ne[i] <= 0 ? a->ne[i] != 0 : a->ne[i] % b->ne[i] != 0) return false;
    return true;
}

/* Index of a float or block type in the copy table, or -1. */
static int vk_cpy_index(tsl_type t) {
    switch (t) {
    case TSL_TYPE_F32: return 0;
    case TSL_TYPE_F16: return 1;
    case TSL_TYPE_BF16: return 2;
    case TSL_TYPE_Q8_0: return 3;
    case TSL_TYPE_Q4_0: return 4;
    default: return -1;
    }
}

/* The copy kernel from type s to type d, or -1 (the CPU's rule: one type
 * to itself, whatever it is; otherwise between float and block types). */
static int vk_cpy_kernel(tsl_type s, tsl_type d) {
    static const int table[5][5] = {
        {VK_K_CPY_F32_F32, VK_K_CPY_F32_F16, VK_K_CPY_F32_BF16, VK_K_CPY_F32_Q8_0, VK_K_CPY_F32_Q4_0},
        {VK_K_CPY_F16_F32, VK_K_CPY_F16_F16, VK_K_CPY_F16_BF16, VK_K_CPY_F16_Q8_0, VK_K_CPY_F16_Q4_0},
        {VK_K_CPY_BF16_F32, VK_K_CPY_BF16_F16, VK_K_CPY_BF16_BF16, VK_K_CPY_BF16_Q8_0, VK_K_CPY_BF16_Q4_0},
        {VK_K_CPY_Q8_0_F32, VK_K_CPY_Q8_0_F16, VK_K_CPY_Q8_0_BF16, VK_K_CPY_Q8_0_Q8_0, VK_K_CPY_Q8_0_Q4_0},
        {VK_K_CPY_Q4_0_F32, VK_K_CPY_Q4_0_F16, VK_K_CPY_Q4_0_BF16, VK_K_CPY_Q4_0_Q8_0, VK_K_CPY_Q4_0_Q4_0},
    };
    int si = vk_cpy_index(s), di = vk_cpy_index(d);
    if (si >= 0 && di >= 0) return table[si][di];
    if (s != d) return -1;
    switch (s) {
    case TSL_TYPE_I32: return VK_K_CPY_I32_I32;
    case TSL_TYPE_I16: return VK_K_CPY_I16_I16;
    case TSL_TYPE_I64: return VK_K_CPY_I64_I64;
    case TSL_TYPE_F64: return VK_K_CPY_F64_F64;
    case TSL_TYPE_I8: return VK_K_CPY_I8_I8;
    default: return -1;
    }
}

/* The three copy families (vk.h keeps VK_KERNELS_CPY in this order). */
static bool vk_cpy_to_plain(int k) { return k >= VK_K_CPY_F32_F32 && k <= VK_K_CPY_Q4_0_BF16; }
static bool vk_cpy_to_block(int k) { return k >= VK_K_CPY_F32_Q8_0 && k <= VK_K_CPY_Q8_0_Q4_0; }
static bool vk_cpy_units(int k) { return k >= VK_K_CPY_Q8_0_Q8_0 && k <= VK_K_CPY_I8_I8; }
static bool vk_concat_kernel(int k) { return k >= VK_K_CONCAT_F32 && k <= VK_K_CONCAT_I8; }

static int vk_concat_kernel_for(tsl_type t) {
    switch (t) {
    case TSL_TYPE_F32: return VK_K_CONCAT_F32;
    case TSL_TYPE_I32: return VK_K_CONCAT_I32;
    case TSL_TYPE_F16: return VK_K_CONCAT_F16;
    case TSL_TYPE_BF16: return VK_K_CONCAT_BF16;
    case TSL_TYPE_I16: return VK_K_CONCAT_I16;
    case TSL_TYPE_I64: return VK_K_CONCAT_I64;
    case TSL_TYPE_F64: return VK_K_CONCAT_F64;
    case TSL_TYPE_I8: return VK_K_CONCAT_I8;
    default: return -1;
    }
}

/* out_prod's a: the mul_mat weight types (cpu_mul_mat_supported). */
static int vk_out_prod_kernel_for(tsl_type t) {
    switch (t) {
    case TSL_TYPE_F32: return VK_K_OUT_PROD_F32;
    case TSL_TYPE_F16: return VK_K_OUT_PROD_F16;
    case TSL_TYPE_BF16: return VK_K_OUT_PROD_BF16;
    case TSL_TYPE_Q8_0: return VK_K_OUT_PROD_Q8_0;
    case TSL_TYPE_Q4_0: return VK_K_OUT_PROD_Q4_0;
    default: return -1;
    }
}

bool vk_table_type(tsl_type t) {
    return t == TSL_TYPE_F32 || t == TSL_TYPE_F16 || t == TSL_TYPE_Q8_0 || t == TSL_TYPE_Q4_0;
}

/* Candidates for node, best first; returns how many (0: no kernel). */
static int vk_candidates(const vk_device *d, const tsl_tensor *n, int cand[VK_MAX_CAND]) {
    const tsl_tensor *a = n->src[0], *b = n->src[1];
    if (!a) return 0;
    switch (n->op) {
    case TSL_OP_ADD:
    case TSL_OP_SUB:
    case TSL_OP_MUL:
    case TSL_OP_DIV:
        if (!vk_binary_f32(n)) return 0;
        cand[0] = n->op == TSL_OP_ADD ? VK_K_ADD_F32 : n->op == TSL_OP_SUB ? VK_K_SUB_F32
                : n->op == TSL_OP_MUL ? VK_K_MUL_F32 : VK_K_DIV_F32;
        return 1;
    case TSL_OP_SWIGLU:
        if (!vk_unary_f32(n) || !vk_is_f32(b) || !tsl_same_shape(a, b)) return 0;
        cand[0] = VK_K_SWIGLU_F32;
        return 1;
    case TSL_OP_SCALE:
    case TSL_OP_SQR:
    case TSL_OP_SQRT:
    case TSL_OP_SILU:
    case TSL_OP_GELU:
        if (!vk_unary_f32(n)) return 0;
        cand[0] = n->op == TSL_OP_SCALE ? VK_K_SCALE_F32 : n->op == TSL_OP_SQR ? VK_K_SQR_F32
                : n->op == TSL_OP_SQRT ? VK_K_SQRT_F32 : n->op == TSL_OP_SILU ? VK_K_SILU_F32 : VK_K_GELU_F32;
        return 1;
    case TSL_OP_DUP:
    case TSL_OP_CONT:
    case TSL_OP_CPY: {
        if (tsl_nelements(a) != tsl_nelements(n)) return 0;
        int k = vk_cpy_kernel(a->type, n->type);
        if (k < 0) return 0;
        /* the raw block copy would carry the split layout of a Q4_0 weight
         * into a tensor that is not in it (backend_q4s): tsl_tensor_get
         * converts instead, on the scheduler's host path */
        if (k == VK_K_CPY_Q4_0_Q4_0 && backend_q4s(a, NULL, NULL)) return 0;
        cand[0] = k;
        return 1;
    }
    case TSL_OP_GET_ROWS:
        if ((!vk_table_type(a->type) && a->type != TSL_TYPE_BF16) || !b || b->type != TSL_TYPE_I32 || !vk_is_f32(n))
            return 0;
        if (n->ne[0] != a->ne[0] || n->ne[1] != b->ne[0] || n->ne[2] != b->ne[1] || n->ne[3] != b->ne[2]) return 0;
        if (a->ne[2] != n->ne[2] || a->ne[3] != n->ne[3]) return 0;
        if (a->nb[0] != tsl_type_block_size(a->type)) return 0;
        cand[0] = a->type == TSL_TYPE_F32 ? VK_K_GET_ROWS_F32 : a->type == TSL_TYPE_F16 ? VK_K_GET_ROWS_F16
                : a->type == TSL_TYPE_BF16 ? VK_K_GET_ROWS_BF16 : a->type == TSL_TYPE_Q8_0 ? VK_K_GET_ROWS_Q8_0
                : VK_K_GET_ROWS_Q4_0;
        return 1;
    case TSL_OP_SET_ROWS:
        if (!vk_is_f32(a) || !b || b->type != TSL_TYPE_I32 || (n->type != TSL_TYPE_F32 && n->type != TSL_TYPE_F16))
            return 0;
        cand[0] = n->type == TSL_TYPE_F32 ? VK_K_SET_ROWS_F32 : VK_K_SET_ROWS_F16;
        return 1;
    case TSL_OP_OUT_PROD: {
        int k = vk_out_prod_kernel_for(a->type);
        if (k < 0 || !b || !vk_is_f32(b) || !vk_is_f32(n) || n->nb[0] != sizeof(float)) return 0;
        if (a->ne[2] <= 0 || a->ne[3] <= 0 || b->ne[2] % a->ne[2] != 0 || b->ne[3] % a->ne[3] != 0) return 0;
        if (a->ne[1] != b->ne[1] || n->ne[0] != a->ne[0] || n->ne[1] != b->ne[0] || n->ne[2] != b->ne[2] ||
            n->ne[3] != b->ne[3])
            return 0;
        /* a block-format a is read in blocks along m (vk_layout_ok checked its rows) */
        const VkPhysicalDeviceLimits *lim = &d->props.limits;
        if ((uint64_t)(n->ne[0] + 63) / 64 > lim->maxComputeWorkGroupCount[0] ||
            (uint64_t)(n->ne[1] + 63) / 64 > lim->maxComputeWorkGroupCount[1] ||
            (uint64_t)n->ne[2] * (uint64_t)n->ne[3] > lim->maxComputeWorkGroupCount[2])
            return 0;
        cand[0] = k;
        return 1;
    }
    case TSL_OP_CONCAT: {
        int dim = op_get_i32(n, 0), k = vk_concat_kernel_for(n->type);
        if (k < 0 || !b || dim < 0 || dim >= TSL_MAX_DIMS || a->type != n->type || b->type != n->type) return 0;
        for (int i = 0; i < TSL_MAX_DIMS; i++) {
            int64_t want = i == dim ? a->ne[i] + b->ne[i] : a->ne[i];
            if (n->ne[i] != want || (i != dim && b->ne[i] != a->ne[i])) return 0;
        }
        cand[0] = k;
        return 1;
    }
    case TSL_OP_SUM:
        if (!vk_is_f32(a) || !vk_is_f32(n) || tsl_nelements(n) != 1) return 0;
        cand[0] = VK_K_SUM_F32;
        return 1;
    case TSL_OP_ARGMAX:
        if (!vk_is_f32(a) || n->type != TSL_TYPE_I32 || tsl_nelements(n) != tsl_nrows(a)) return 0;
        cand[0] = VK_K_ARGMAX_F32;
        return 1;
    case TSL_OP_CROSS_ENTROPY_LOSS:
        if (!vk_is_f32(a) || !vk_is_f32(b) || !vk_is_f32(n) || !tsl_same_shape(a, b) || tsl_nelements(n) != 1)
            return 0;
        cand[0] = VK_K_CROSS_ENTROPY_LOSS_F32;
        return 1;
    case TSL_OP_MUL_MAT: return vk_mm_candidates(d, n, cand);
    case TSL_OP_RMS_NORM:
    case TSL_OP_NORM:
        if (!vk_unary_f32(n)) return 0;
        cand[0] = n->op == TSL_OP_RMS_NORM ? VK_K_RMS_NORM_F32 : VK_K_NORM_F32;
        return 1;
    case TSL_OP_SUM_ROWS:
    case TSL_OP_MEAN:
        if (!vk_is_f32(a) || !vk_is_f32(n) || n->ne[0] != 1 || n->ne[1] != a->ne[1] || n->ne[2] != a->ne[2] ||
            n->ne[3] != a->ne[3])
            return 0;
        cand[0] = n->op == TSL_OP_SUM_ROWS ? VK_K_SUM_ROWS_F32 : VK_K_MEAN_F32;
        return 1;
    case TSL_OP_SOFT_MAX:
        if (!vk_unary_f32(n)) return 0;
        if (b) {
            if (b->type != TSL_TYPE_F32 && b->type != TSL_TYPE_F16) return 0;
            if (b->ne[0] != a->ne[0] || b->ne[1] < a->ne[1] || b->ne[2] <= 0 || b->ne[3] <= 0 ||
                a->ne[2] % b->ne[2] != 0 || a->ne[3] % b->ne[3] != 0)
                return 0;
            cand[0] = b->type == TSL_TYPE_F32 ? VK_K_SOFT_MAX_F32_MASK_F32 : VK_K_SOFT_MAX_F32_MASK_F16;
        } else {
            cand[0] = VK_K_SOFT_MAX_F32;
        }
        return 1;
    case TSL_OP_ROPE: {
        const tsl_tensor *ff = n->src[2];
        int n_dims = op_get_i32(n, 0), mode = op_get_i32(n, 1);
        if (!vk_unary_f32(n) || !b || b->type != TSL_TYPE_I32 || b->ne[0] < n->ne[2]) return 0;
        if (n_dims <= 0 || n_dims % 2 != 0 || n_dims > n->ne[0]) return 0;
        if (mode != TSL_ROPE_NORMAL && mode != TSL_ROPE_NEOX) return 0;
        if (ff && (!vk_is_f32(ff) || ff->ne[0] < n_dims / 2)) return 0;
        cand[0] = VK_K_ROPE_F32;       /* angles in double */
        cand[1] = VK_K_ROPE_F32_FP32;  /* devices without shaderFloat64 */
        return 2;
    }
    default: return 0;
    }
}

int vk_kernel_for(const vk_device *d, const tsl_tensor *n, tsl_backend *be, bool usable_only) {
    if (!n || !tsl_type_valid((int)n->type) || !vk_layout_ok(d, n)) return -1;
    for (int i = 0; i < TSL_MAX_SRC; i++)
        if (n->src[i] && !vk_layout_ok(d, n->src[i])) return -1;
    /* The first candidate the device can run is the node's kernel. If it
     * failed, the op moves to another backend (FAULTS.md section 6) rather
     * than to a variant of this one: a variant may be slower or less
     * precise (rope without doubles), and the caller asked for this one. */
    int cand[VK_MAX_CAND];
    int nc = vk_candidates(d, n, cand);
    for (int i = 0; i < nc; i++) {
        const vk_kernel *k = &d->k[cand[i]];
        if (!k->runnable) continue;
        bool bad = atomic_load_explicit(&k->state, memory_order_acquire) == VK_KS_FAILED ||
                   (be && backend_kernel_any_failed(be) && backend_kernel_failed(be, vk_kernel_descs[cand[i]].name, NULL));
        /* split Q4_0 weights run the candidate's twin (vk_q4s_twins): its
         * failure is the node's too */
        const int tw = n->op == TSL_OP_MUL_MAT && backend_q4s(n->src[0], NULL, NULL) ? vk_mm_q4s_twin(cand[i]) : -1;
        if (tw >= 0)
            bad = bad || atomic_load_explicit(&d->k[tw].state, memory_order_acquire) == VK_KS_FAILED ||
                  (be && backend_kernel_any_failed(be) && backend_kernel_failed(be, vk_kernel_descs[tw].name, NULL));
        return bad && usable_only ? -1 : cand[i];
    }
    return -1;
}

/* ---- launch parameters --------------------------------------------------------- */

uint32_t vk_u32(int64_t v) { return (uint32_t)v; }

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Strides of t in elements of es bytes, dims from..3, into pc. */
uint32_t *vk_put_strides(uint32_t *pc, const tsl_tensor *t, int es, int from) {
    for (int i = from; i < TSL_MAX_DIMS; i++) *pc++ = vk_u32((int64_t)(t->nb[i] / (size_t)es));
    return pc;
}

static uint32_t *put_ne(uint32_t *pc, const tsl_tensor *t) {
    for (int i = 0; i < TSL_MAX_DIMS; i++) *pc++ = vk_u32(t->ne[i]);
    return pc;
}

/* Decode attention's key ranges: enough (head, column, range) workgroups to
 * fill a large GPU (about 256), at least 32 keys a range, a multiple of 8
 * keys (the kernel's 16-byte loads along V's rows start on range bounds). */
void vk_attn_split(int64_t heads_cols, int64_t n_kv, uint32_t *nsplit, uint32_t *klen) {
    int64_t s = heads_cols > 0 ? (256 + heads_cols - 1) / heads_cols : 1;
    const int64_t most = (n_kv + 31) / 32;
    if (s > most) s = most;
    if (s > 64) s = 64;
    if (s < 1) s = 1;
    int64_t len = (n_kv + s - 1) / s;
    len = (len + 7) / 8 * 8;
    *klen = (uint32_t)len;
    *nsplit = (uint32_t)((n_kv + len - 1) / len);
}

/* groups workgroups folded into x and y within the device's limits. */
void vk_grid(const vk_device *d, uint64_t groups, uint32_t grid[3]) {
    uint64_t mx = d->props.limits.maxComputeWorkGroupCount[0];
    if (groups <= mx) {
        grid[0] = (uint32_t)groups;
        grid[1] = 1;
    } else {
        grid[0] = (uint32_t)mx;
        grid[1] = (uint32_t)((groups + mx - 1) / mx);
    }
    grid[2] = 1;
}

static double rope_corr_dim(int n_dims, int n_ctx_orig, double n_rot, double base) {
    return n_dims * log(n_ctx_orig / (n_rot * 2.0 * M_PI)) / (2.0 * log(base));
}

uint32_t vk_op_params(const vk_device *d, const vk_exec *x, uint32_t pc[VK_PC_WORDS], uint32_t grid[3]) {
    const tsl_tensor *n = x->node, *a = n->src[0], *b = n->src[1];
    const uint8_t *es = vk_kernel_descs[x->kernel].esize;
    uint32_t *p = pc;
    if (vk_mm_kernel(x->kernel)) return vk_mm_params(d, x, pc, grid);
    memset(pc, 0, VK_PC_WORDS * sizeof *pc);
    switch (x->kernel) {
    case VK_K_ADD_F32:
    case VK_K_SUB_F32:
    case VK_K_MUL_F32:
    case VK_K_DIV_F32:
    case VK_K_SWIGLU_F32:
    case VK_K_SWIGLU_Q_F32:
    case VK_K_SCALE_F32:
    case VK_K_SQR_F32:
    case VK_K_SQRT_F32:
    case VK_K_SILU_F32:
    case VK_K_GELU_F32: {
        bool bin = es[1] != 0;
        p = put_ne(p, n);
        p = vk_put_strides(p, a, 4, 0);
        if (bin) p = vk_put_strides(p, b, 4, 0);
        else p += 4;
        p = vk_put_strides(p, n, 4, 0);
        for (int i = 0; i < TSL_MAX_DIMS; i++) *p++ = bin ? vk_u32(b->ne[i]) : 1;
        *p++ = x->b[0].eoff;
        *p++ = bin ? x->b[1].eoff : 0;
        *p++ = x->b[3].eoff;
        *p++ = x->kernel == VK_K_SCALE_F32 ? f2u(op_get_f32(n, 0)) : 0;
        /* the fast paths of eltwise.comp */
        uint32_t flags = 0;
        if (tsl_is_contiguous(a) && tsl_is_contiguous(n)) {
            flags |= 1u;
            if (bin && tsl_is_contiguous(b) && tsl_same_shape(a, b))
                flags |= 2u;
            else if (bin && tsl_is_contiguous(b) && b->ne[0] == n->ne[0] && b->ne[1] == 1 && b->ne[2] == 1 &&
                     b->ne[3] == 1)
                flags |= 4u;
        }
        *p++ = flags;
        *p++ = x->kernel == VK_K_SWIGLU_Q_F32 ? x->b[2].eoff : 0u; /* the quantized column's first word */
        if (x->kernel == VK_K_SWIGLU_Q_F32) {
            p = pc + VK_PC_SWIGLU_SIGNAL;
            *p++ = 0u; /* the signal word, named once a product waits on the column */
        }
        vk_grid(d, ((uint64_t)tsl_nelements(n) + 255) / 256, grid);
        break;
    }
    case VK_K_SET_ROWS_F32:
    case VK_K_SET_ROWS_F16: {
        /* src (binding 0), positions (1), the destination view (3) */
        const int dim = op_get_i32(n, 0);
        p = put_ne(p, a);
        p = vk_put_strides(p, a, 4, 0);
        p = vk_put_strides(p, n, es[3], 0);
        *p++ = vk_u32((int64_t)(b->nb[0] / 4));
        *p++ = x->b[0].eoff;
        *p++ = x->b[1].eoff;
        *p++ = x->b[3].eoff;
        *p++ = (uint32_t)dim;
        *p++ = vk_u32(n->ne[dim]);
        *p++ = (uint32_t)x->index;
        vk_grid(d, ((uint64_t)tsl_nelements(a) + 255) / 256, grid);
        break;
    }
    case VK_K_GET_ROWS_F32:
    case VK_K_GET_ROWS_F16:
    case VK_K_GET_ROWS_BF16:
    case VK_K_GET_ROWS_Q8_0:
    case VK_K_GET_ROWS_Q4_0:
        p = put_ne(p, n);
        p = vk_put_strides(p, n, 4, 0);
        p = vk_put_strides(p, a, es[0], 1);
        p = vk_put_strides(p, b, 4, 0); /* indices: three dims used */
        p--;                         /* (the 4th stride slot is not in the layout) */
        *p++ = x->b[0].eoff;
        *p++ = x->b[1].eoff;
        *p++ = x->b[3].eoff;
        *p++ = vk_u32(a->ne[1]);
        *p++ = (uint32_t)x->index;
        *p++ = backend_q4s(a, NULL, NULL) ? 1u : 0u; /* split Q4_0 (q4s.glsl) */
        vk_grid(d, ((uint64_t)tsl_nelements(n) + 255) / 256, grid);
        break;
    case VK_K_RMS_NORM_F32:
    case VK_K_NORM_F32:
    case VK_K_SUM_ROWS_F32:
    case VK_K_MEAN_F32:
        p = put_ne(p, a);
        p = vk_put_strides(p, a, 4, 0);
        p = vk_put_strides(p, n, 4, 0);
        *p++ = x->b[0].eoff;
        *p++ = x->b[3].eoff;
        *p++ = (x->kernel == VK_K_RMS_NORM_F32 || x->kernel == VK_K_NORM_F32) ? f2u(op_get_f32(n, 0)) : 0;
        vk_grid(d, (uint64_t)tsl_nrows(a), grid);
        break;
    case VK_K_RMS_NORM_MUL_F32:
    case VK_K_RMS_NORM_MUL_W8K_F32: {
        /* mul(rms_norm(x), w) fused (vk_backend.c): x is the norm's source,
         * bound at 0; w the MUL's second source, at 1 */
        const tsl_tensor *xt = x->fused->src[0];
        p = put_ne(p, xt);
        p = vk_put_strides(p, xt, 4, 0);
        p = vk_put_strides(p, n, 4, 0);
        *p++ = x->b[0].eoff;
        *p++ = x->b[3].eoff;
        *p++ = x->b[1].eoff;
        *p++ = vk_u32((int64_t)(b->nb[0] / 4));
        *p++ = f2u(op_get_f32(x->fused, 0));
        *p++ = x->qout ? 1u : 0u;
        *p++ = x->qout ? x->b[2].eoff : 0u;
        p = pc + VK_PC_RMS_SIGNAL;
        *p++ = 0u; /* the signal word, named once a product waits on the row */
        vk_grid(d, (uint64_t)tsl_nrows(xt), grid);
        break;
    }
    case VK_K_ATTN_DEC_F16:
    case VK_K_ATTN_DEC_F16_MASK_F32:
    case VK_K_ATTN_DEC_F16_MASK_F16:
    case VK_K_ATTN_DEC1_F16:
    case VK_K_ATTN_DEC1_F16_MASK_F32:
    case VK_K_ATTN_DEC1_F16_MASK_F16:
    case VK_K_ATTN_COMBINE_F32:
    case VK_K_ATTN_COMBINE_Q_F32: {
        /* mul_mat(V, soft_max(mul_mat(K, q), mask)) fused (vk_backend.c):
         * n is the outer product, x->fused the inner. attn_dec: K and V
         * bound as one span at 0 (V's own binding kept in rb), q at 1, the
         * mask at 2, the partials (the scratch) at 3; attn_combine: the
         * partials at 0, the output at 3 */
        const tsl_tensor *kq = x->fused, *sm = n->src[1], *kt = kq->src[0], *qt = kq->src[1], *vt = n->src[0];
        const tsl_tensor *mt = sm->src[1];
        const int64_t H = qt->ne[2], N = qt->ne[1];
        uint32_t nsplit, klen;
        vk_attn_split(H * N, kt->ne[1], &nsplit, &klen);
        if (x->kernel == VK_K_ATTN_COMBINE_F32 || x->kernel == VK_K_ATTN_COMBINE_Q_F32) {
            *p++ = vk_u32(vt->ne[1]);
            *p++ = vk_u32(H);
            *p++ = vk_u32(N);
            *p++ = nsplit;
            *p++ = x->b[0].eoff;
            *p++ = x->b[3].eoff;
            for (int i = 0; i < 3; i++) *p++ = vk_u32((int64_t)(n->nb[i] / 4));
            *p++ = x->qout ? x->b[2].eoff : 0u; /* the quantized column (attn_combine_q) */
            vk_grid(d, (uint64_t)(H * N), grid);
            break;
        }
        *p++ = vk_u32(kt->ne[1]);
        *p++ = vk_u32(kt->ne[0]);
        *p++ = vk_u32(vt->ne[1]);
        *p++ = vk_u32(H);
        *p++ = vk_u32(H / kt->ne[2]);
        *p++ = vk_u32(N);
        *p++ = nsplit;
        *p++ = klen;
        *p++ = x->b[0].eoff;
        *p++ = vk_u32((int64_t)(kt->nb[1] / 2));
        *p++ = vk_u32((int64_t)(kt->nb[2] / 2));
        *p++ = x->rb.eoff + (uint32_t)((x->rb.off - x->b[0].off) / 2);
        *p++ = vk_u32((int64_t)(vt->nb[1] / 2));
        *p++ = vk_u32((int64_t)(vt->nb[2] / 2));
        *p++ = x->b[1].eoff;
        for (int i = 0; i < 3; i++) *p++ = vk_u32((int64_t)(qt->nb[i] / 4));
        *p++ = mt ? x->b[2].eoff : 0u;
        *p++ = mt ? vk_u32((int64_t)(mt->nb[0] / es[2])) : 0u;
        *p++ = mt ? vk_u32((int64_t)(mt->nb[1] / es[2])) : 0u;
        const bool one = vk_is_attn1(x->kernel);
        *p++ = one ? x->bx.eoff : x->b[3].eoff; /* the partials */
        *p++ = f2u(op_get_f32(sm, 0));
        if (one) {
            /* attn_dec1: the counters and the quantized column in the
             * scratch (binding 5), the output at 3 */
            *p++ = x->bx.eoff + VK_ASCR_CNT_WORD;
            *p++ = x->bx.eoff + VK_ASCR_Q8_WORD;
            *p++ = x->b[3].eoff;
            for (int i = 0; i < 3; i++) *p++ = vk_u32((int64_t)(n->nb[i] / 4));
            *p++ = x->noout ? 1u : 0u;
            p = pc + VK_PC_ATTN1_SIGNAL;
            *p++ = 0u; /* the signal word, named once a product waits on the column */
        }
        vk_grid(d, (uint64_t)(H * N) * nsplit, grid);
        break;
    }
    case VK_K_SOFT_MAX_F32:
    case VK_K_SOFT_MAX_F32_MASK_F32:
    case VK_K_SOFT_MAX_F32_MASK_F16: {
        bool masked = es[1] != 0;
        p = put_ne(p, a);
        p = vk_put_strides(p, a, 4, 0);
        p = vk_put_strides(p, n, 4, 0);
        if (masked) p = vk_put_strides(p, b, es[1], 0);
        else p += 4;
        *p++ = masked ? vk_u32(b->ne[2]) : 1;
        *p++ = masked ? vk_u32(b->ne[3]) : 1;
        *p++ = x->b[0].eoff;
        *p++ = masked ? x->b[1].eoff : 0;
        *p++ = x->b[3].eoff;
        *p++ = f2u(op_get_f32(n, 0));
        vk_grid(d, (uint64_t)tsl_nrows(a), grid);
        break;
    }
    case VK_K_ROPE_F32:
    case VK_K_ROPE_F32_FP32:
    case VK_K_ROPE_SET_ROWS_F16:
    case VK_K_ROPE_NORM_F32:
    case VK_K_ROPE_NORM_F32_FP32:
    case VK_K_ROPE_NORM_SET_ROWS_F16: {
        /* rope_set_rows: the exec is the SET_ROWS node, x->fused its rope
         * (vk_backend.c); the rope's source, positions and factors are bound
         * at 0-2, the cache at 3 */
        const bool store = x->kernel == VK_K_ROPE_SET_ROWS_F16 || x->kernel == VK_K_ROPE_NORM_SET_ROWS_F16;
        const tsl_tensor *cache = n;
        if (store) {
            n = x->fused;
            a = n->src[0];
            b = n->src[1];
        }
        const tsl_tensor *ff = n->src[2];
        int n_dims = op_get_i32(n, 0), mode = op_get_i32(n, 1), n_ctx_orig = op_get_i32(n, 2);
        double base = op_get_f32(n, 3), fscale = op_get_f32(n, 4), ext = op_get_f32(n, 5);
        double attn = op_get_f32(n, 6), beta_fast = op_get_f32(n, 7), beta_slow = op_get_f32(n, 8);
        double corr0 = 0, corr1 = 0;
        if (ext != 0 && n_ctx_orig > 0) {
            double start = floor(rope_corr_dim(n_dims, n_ctx_orig, beta_fast, base));
            double end = ceil(rope_corr_dim(n_dims, n_ctx_orig, beta_slow, base));
            corr0 = start > 0 ? start : 0;
            corr1 = end < n_dims - 1 ? end : n_dims - 1;
        }
        double mscale = attn;
        if (ext != 0) mscale *= 1.0 + 0.1 * log(1.0 / fscale);
        double theta = pow(base, -2.0 / n_dims);
        float hi = (float)theta, lo = (float)(theta - (double)hi);
        /* rope_norm: the norm's source x in the rope input's place (its
         * shape; strides its own) and w, the MUL's weight (the rope's
         * source is that MUL: vk_norm_rope), at binding 2 (no factors then) */
        const tsl_tensor *w = x->norm ? n->src[0]->src[1] : NULL;
        if (x->norm) a = x->norm->src[0];
        p = put_ne(p, a);
        p = vk_put_strides(p, a, 4, 0);
        if (store) {
            /* element (j, head, token) of the rotated k goes to element
             * head ne0 + j of the cache's row pos[token] */
            const uint32_t c0 = vk_u32((int64_t)(cache->nb[0] / 2));
            *p++ = c0;
            *p++ = vk_u32(a->ne[0] * (int64_t)c0);
            *p++ = vk_u32((int64_t)(cache->nb[1] / 2));
            *p++ = 0;
        } else {
            p = vk_put_strides(p, n, 4, 0);
        }
        *p++ = (uint32_t)n_dims;
        *p++ = (mode & TSL_ROPE_NEOX) ? 1u : 0u;
        *p++ = ff ? 1u : 0u;
        *p++ = x->b[0].eoff;
        *p++ = x->b[1].eoff;
        *p++ = ff || w ? x->b[2].eoff : 0;
        *p++ = x->b[3].eoff;
        *p++ = vk_u32((int64_t)(b->nb[0] / 4));
        *p++ = ff ? vk_u32((int64_t)(ff->nb[0] / 4)) : w ? vk_u32((int64_t)(w->nb[0] / 4)) : 0;
        *p++ = f2u((float)fscale);
        *p++ = f2u((float)ext);
        *p++ = f2u((float)mscale);
        *p++ = f2u((float)corr0);
        *p++ = f2u((float)corr1);
        *p++ = f2u(hi);
        *p++ = f2u(lo);
        if (store) {
            *p++ = vk_u32(cache->ne[1]);
            *p++ = (uint32_t)x->index;
        }
        if (x->norm) {
            pc[VK_PC_NODE - 1] = f2u(op_get_f32(x->norm, 0)); /* eps, the word before the progress word's */
            p = pc + VK_PC_NODE;
            vk_grid(d, (uint64_t)tsl_nrows(a), grid); /* a workgroup per row */
            break;
        }
        uint64_t per_row = (uint64_t)(n_dims / 2) + (uint64_t)(a->ne[0] - n_dims);
        vk_grid(d, (per_row * (uint64_t)tsl_nrows(a) + 255) / 256, grid);
        break;
    }
    case VK_K_SUM_F32:
        p = put_ne(p, a);
        p = vk_put_strides(p, a, 4, 0);
        *p++ = x->b[0].eoff;
        *p++ = x->b[3].eoff;
        *p++ = tsl_is_contiguous(a) ? 1u : 0u;
        vk_grid(d, 1, grid); /* one workgroup: sum.comp says why */
        break;
    case VK_K_ARGMAX_F32:
        p = put_ne(p, a);
        p = vk_put_strides(p, a, 4, 0);
        *p++ = vk_u32((int64_t)(n->nb[0] / 4));
        *p++ = x->b[0].eoff;
        *p++ = x->b[3].eoff;
        /* rows read in 16-byte loads: dense, each starting on 16 bytes */
        *p++ = a->nb[0] == 4 && x->b[0].off % 16 == 0 && x->b[0].eoff % 4 == 0 && (a->nb[1] / 4) % 4 == 0 &&
                       (a->nb[2] / 4) % 4 == 0 && (a->nb[3] / 4) % 4 == 0
                   ? 1u
                   : 0u;
        vk_grid(d, (uint64_t)tsl_nrows(a), grid);
        break;
    case VK_K_CROSS_ENTROPY_LOSS_F32:
        p = put_ne(p, a);
        p = vk_put_strides(p, a, 4, 0);
        p = vk_put_strides(p, b, 4, 0);
        *p++ = x->b[0].eoff;
        *p++ = x->b[1].eoff;
        *p++ = x->b[3].eoff;
        *p++ = a->ne[0] >= VK_CE_COOP_ROW ? 1u : 0u;
        vk_grid(d, 1, grid);
        break;
    case VK_K_OUT_PROD_F32:
    case VK_K_OUT_PROD_F16:
    case VK_K_OUT_PROD_BF16:
    case VK_K_OUT_PROD_Q8_0:
    case VK_K_OUT_PROD_Q4_0:
        *p++ = vk_u32(n->ne[0]);
        *p++ = vk_u32(n->ne[1]);
        *p++ = vk_u32(a->ne[1]);
        p = vk_put_strides(p, a, es[0], 0);
        p = vk_put_strides(p, b, 4, 0);
        p = vk_put_strides(p, n, 4, 1);
        *p++ = vk_u32(b->ne[2] / a->ne[2]);
        *p++ = vk_u32(b->ne[3] / a->ne[3]);
        *p++ = vk_u32(b->ne[2]);
        *p++ = x->b[0].eoff;
        *p++ = x->b[1].eoff;
        *p++ = x->b[3].eoff;
        *p++ = backend_q4s(a, NULL, NULL) ? 1u : 0u; /* split Q4_0 (q4s.glsl) */
        grid[0] = (uint32_t)((n->ne[0] + 63) / 64);
        grid[1] = (uint32_t)((n->ne[1] + 63) / 64);
        grid[2] = (uint32_t)(n->ne[2] * n->ne[3]);
        break;
    default:
        if (vk_cpy_to_plain(x->kernel) || vk_cpy_to_block(x->kernel)) {
            /* cpy.comp / cpy_q.comp: shapes in elements, strides in each binding's elements */
            p = put_ne(p, a);
            p = vk_put_strides(p, a, es[0], 0);
            p = put_ne(p, n);
            p = vk_put_strides(p, n, es[3], 0);
            *p++ = x->b[0].eoff;
            *p++ = x->b[3].eoff;
            const bool ca = tsl_is_contiguous(a), cn = tsl_is_contiguous(n);
            /* two elements per invocation: both dense, an even count, 16-bit sides word-aligned */
            const bool pairs = ca && cn && !tsl_type_is_quantized(a->type) && tsl_nelements(n) % 2 == 0 &&
                               (es[0] != 2 || x->b[0].eoff % 2 == 0) && (es[3] != 2 || x->b[3].eoff % 2 == 0);
            /* four: both dense, a count of whole fours, each side starting on a four */
            const bool quads = pairs && tsl_nelements(n) % 4 == 0 && x->b[0].eoff % 4 == 0 && x->b[3].eoff % 4 == 0;
            /* eight (blocks into a plain type): both dense, the destination's
             * runs of eight on 16 bytes (the blocks' 32 elements make the count
             * whole eights) */
            const bool eights = ca && cn && tsl_type_is_quantized(a->type) && vk_cpy_to_plain(x->kernel) &&
                                x->b[3].off % 16 == 0 && x->b[3].eoff % (16u / es[3]) == 0;
            *p++ = (ca ? 1u : 0u) | (cn ? 2u : 0u) | (pairs ? 4u : 0u) | (quads ? 8u : 0u) |
                   (backend_q4s(a, NULL, NULL) ? 16u : 0u) /* split Q4_0 (q4s.glsl) */ | (eights ? 32u : 0u);
            if (vk_cpy_to_block(x->kernel))
                vk_grid(d, ((uint64_t)tsl_nelements(n) / TSL_QK8_0 + 63) / 64, grid);
            else
                vk_grid(d, ((uint64_t)tsl_nelements(n) / (eights ? 8 : quads ? 4 : pairs ? 2 : 1) + 255) / 256,
                        grid);
        } else if (vk_cpy_units(x->kernel)) {
            /* cpy_raw.comp: shapes in units (elements or blocks) */
            const int64_t bl = tsl_type_block_len(n->type);
            *p++ = vk_u32(a->ne[0] / bl);
            for (int i = 1; i < TSL_MAX_DIMS; i++) *p++ = vk_u32(a->ne[i]);
            p = vk_put_strides(p, a, es[0], 0);
            *p++ = vk_u32(n->ne[0] / bl);
            for (int i = 1; i < TSL_MAX_DIMS; i++) *p++ = vk_u32(n->ne[i]);
            p = vk_put_strides(p, n, es[3], 0);
            *p++ = x->b[0].eoff;
            *p++ = x->b[3].eoff;
            vk_grid(d, ((uint64_t)(tsl_nelements(n) / bl) + 255) / 256, grid);
        } else if (vk_concat_kernel(x->kernel)) {
            p = put_ne(p, n);
            p = put_ne(p, a);
            p = vk_put_strides(p, a, es[0], 0);
            p = vk_put_strides(p, b, es[1], 0);
            p = vk_put_strides(p, n, es[3], 0);
            *p++ = x->b[0].eoff;
            *p++ = x->b[1].eoff;
            *p++ = x->b[3].eoff;
            *p++ = (uint32_t)op_get_i32(n, 0);
            vk_grid(d, ((uint64_t)tsl_nelements(n) + 255) / 256, grid);
        } else {
            grid[0] = grid[1] = grid[2] = 0;
        }
        break;
    }
    return (uint32_t)((p - pc) * sizeof *pc);
}
