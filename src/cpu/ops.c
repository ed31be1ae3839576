/*
 * ops.c - which CPU kernel runs a node, and how much scratch it needs.
 *
 * cpu_kernel_for is the single place that decides whether the CPU can run a
 * node as built: op, the types of the result and of each source, and the
 * layouts a kernel handles. It answers NULL instead of letting a kernel meet
 * a combination it was not written for, so supports_op and the backend's
 * resolve pass (which fails the compute before anything runs) can both rely
 * on it. Kernels themselves live one family per file (ops_elementwise.c,
 * ops_reduce.c, ops_norm.c, ops_rope.c, ops_softmax.c, ops_copy.c,
 * ops_loss.c, ops_mulmat.c); each family also says how much scratch its
 * kernels need, since only the kernel knows its scratch layout.
 */
#include "cpu/ops.h"

/* ---- type checks ---------------------------------------------------------- */

static bool is_f32(const tsl_tensor *t) { return t && t->type == TSL_TYPE_F32; }

/* Types a row can be read from as floats: plain floats and the block formats. */
static bool is_float_or_quant(const tsl_tensor *t) {
    if (!t) return false;
    switch (t->type) {
    case TSL_TYPE_F32:
    case TSL_TYPE_F16:
    case TSL_TYPE_BF16:
    case TSL_TYPE_Q8_0:
    case TSL_TYPE_Q4_0: return true;
    default: return false;
    }
}

/* Every element of a quantized tensor sits in a dense row of whole blocks. */
static bool rows_ok(const tsl_tensor *t) {
    if (!tsl_type_valid((int)t->type)) return false;
    if (tsl_type_is_quantized(t->type))
        return t->nb[0] == tsl_type_block_size(t->type) && t->ne[0] % tsl_type_block_len(t->type) == 0;
    return true;
}

/* Same shape as src0, all F32. */
static bool unary_f32(const tsl_tensor *n) {
    return is_f32(n) && is_f32(n->src[0]) && tsl_nelements(n) == tsl_nelements(n->src[0]) &&
           tsl_same_shape(n, n->src[0]);
}

static bool binary_f32(const tsl_tensor *n) {
    const tsl_tensor *a = n->src[0], *b = n->src[1];
    if (!is_f32(n) || !is_f32(a) || !is_f32(b) || !tsl_same_shape(n, a)) return false;
    for (int i = 0; i < TSL_MAX_DIMS; i++)
        if (b->ne[i] <= 0 ? a->ne[i] != 0 : a->ne[i] % b->ne[i] != 0) return false;
    return true;
}

cpu_kernel_fn cpu_kernel_for(const tsl_tensor *n) {
    if (!n || !tsl_type_valid((int)n->type)) return NULL;
    for (int i = 0; i < TSL_MAX_SRC; i++)
        if (n->src[i] && !rows_ok(n->src[i])) return NULL;
    if (!rows_ok(n)) return NULL;
    const tsl_tensor *a = n->src[0], *b = n->src[1];
    switch (n->op) {
    case TSL_OP_DUP:
    case TSL_OP_CONT:
    case TSL_OP_CPY: return a && cpu_dup_supported(n) ? cpu_op_dup : NULL;
    case TSL_OP_ADD: return binary_f32(n) ? cpu_op_add : NULL;
    case TSL_OP_SUB: return binary_f32(n) ? cpu_op_sub : NULL;
    case TSL_OP_MUL: return binary_f32(n) ? cpu_op_mul : NULL;
    case TSL_OP_DIV: return binary_f32(n) ? cpu_op_div : NULL;
    case TSL_OP_SCALE: return unary_f32(n) ? cpu_op_scale : NULL;
    case TSL_OP_SQR: return unary_f32(n) ? cpu_op_sqr : NULL;
    case TSL_OP_SQRT: return unary_f32(n) ? cpu_op_sqrt : NULL;
    case TSL_OP_SILU: return unary_f32(n) ? cpu_op_silu : NULL;
    case TSL_OP_GELU: return unary_f32(n) ? cpu_op_gelu : NULL;
    case TSL_OP_SWIGLU:
        return unary_f32(n) && is_f32(b) && tsl_same_shape(a, b) ? cpu_op_swiglu : NULL;
    case TSL_OP_SUM: return is_f32(a) && is_f32(n) && tsl_nelements(n) == 1 ? cpu_op_sum : NULL;
    case TSL_OP_SUM_ROWS:
    case TSL_OP_MEAN:
        if (!is_f32(a) || !is_f32(n) || n->ne[0] != 1 || n->ne[1] != a->ne[1] || n->ne[2] != a->ne[2] ||
            n->ne[3] != a->ne[3])
            return NULL;
        return n->op == TSL_OP_SUM_ROWS ? cpu_op_sum_rows : cpu_op_mean;
    case TSL_OP_ARGMAX:
        return is_f32(a) && n->type == TSL_TYPE_I32 && tsl_nelements(n) == tsl_nrows(a) ? cpu_op_argmax : NULL;
    case TSL_OP_GET_ROWS:
        if (!is_float_or_quant(a) || !b || b->type != TSL_TYPE_I32 || !is_f32(n)) return NULL;
        if (n->ne[0] != a->ne[0] || n->ne[1] != b->ne[0] || n->ne[2] != b->ne[1] || n->ne[3] != b->ne[2])
            return NULL;
        if (a->ne[2] != n->ne[2] || a->ne[3] != n->ne[3]) return NULL;
        return cpu_op_get_rows;
    case TSL_OP_SET_ROWS:
        if (!is_f32(a) || !b || b->type != TSL_TYPE_I32 || (n->type != TSL_TYPE_F32 && n->type != TSL_TYPE_F16))
            return NULL;
        return cpu_op_set_rows;
    case TSL_OP_MUL_MAT:
    case TSL_OP_OUT_PROD:
        if (!a || !b || !cpu_mul_mat_supported(n)) return NULL;
        return n->op == TSL_OP_MUL_MAT ? cpu_op_mul_mat : cpu_op_out_prod;
    case TSL_OP_RMS_NORM: return unary_f32(n) ? cpu_op_rms_norm : NULL;
    case TSL_OP_NORM: return unary_f32(n) ? cpu_op_norm : NULL;
    case TSL_OP_ROPE: {
        const tsl_tensor *ff = n->src[2];
        int n_dims = op_get_i32(n, 0);
        if (!unary_f32(n) || !b || b->type != TSL_TYPE_I32 || b->ne[0] < n->ne[2]) return NULL;
        if (n_dims <= 0 || n_dims % 2 != 0 || n_dims > n->ne[0]) return NULL;
        if (ff && (!is_f32(ff) || ff->ne[0] < n_dims / 2)) return NULL;
        return cpu_op_rope;
    }
    case TSL_OP_SOFT_MAX:
        if (!unary_f32(n)) return NULL;
        if (b) {
            if (b->type != TSL_TYPE_F32 && b->type != TSL_TYPE_F16) return NULL;
            if (b->ne[0] != a->ne[0] || b->ne[1] < a->ne[1] || b->ne[2] <= 0 || b->ne[3] <= 0 ||
                a->ne[2] % b->ne[2] != 0 || a->ne[3] % b->ne[3] != 0)
                return NULL;
        }
        return cpu_op_soft_max;
    case TSL_OP_CONCAT: {
        int dim = op_get_i32(n, 0);
        if (!a || !b || dim < 0 || dim >= TSL_MAX_DIMS) return NULL;
        if (a->type != n->type || b->type != n->type || tsl_type_is_quantized(n->type)) return NULL;
        for (int i = 0; i < TSL_MAX_DIMS; i++) {
            int64_t want = i == dim ? a->ne[i] + b->ne[i] : a->ne[i];
            if (n->ne[i] != want || (i != dim && b->ne[i] != a->ne[i])) return NULL;
        }
        return cpu_op_concat;
    }
    case TSL_OP_CROSS_ENTROPY_LOSS:
        return is_f32(a) && is_f32(b) && is_f32(n) && tsl_same_shape(a, b) && tsl_nelements(n) == 1
                   ? cpu_op_cross_entropy_loss
                   : NULL;
    default: return NULL; /* NONE and the metadata-only ops run no kernel */
    }
}

size_t cpu_op_wsize(const tsl_tensor *n, int nth) {
    if (nth < 1) nth = 1;
    switch (n->op) {
    case TSL_OP_DUP:
    case TSL_OP_CONT:
    case TSL_OP_CPY: return cpu_dup_wsize(n, nth);
    case TSL_OP_SUM: return cpu_sum_wsize(n, nth);
    case TSL_OP_MUL_MAT:
    case TSL_OP_OUT_PROD: return cpu_mul_mat_wsize(n, nth);
    case TSL_OP_ROPE: return cpu_rope_wsize(n, nth);
    case TSL_OP_SOFT_MAX: return cpu_soft_max_wsize(n, nth);
    case TSL_OP_CROSS_ENTROPY_LOSS: return cpu_cross_entropy_loss_wsize(n, nth);
    default: return 0;
    }
}
