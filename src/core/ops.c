/*
 * ops.c - op constructors: the shape and type rules of every op.
 *
 * Nothing is computed here. Each constructor checks its operands, makes the
 * result tensor (or, for views, a tensor that aliases its source) and
 * records the op, its sources and its op_params in the layout core.h fixes
 * for the backends. That is where all graph-build errors are found, so the
 * messages are written for a person: one sentence that names the op, the
 * operands with their shapes and types, and what is wrong, e.g.
 *   mul_mat: a [64, 32, 1, 1] f32 and b [48, 8, 1, 1] f32 differ in ne[0] (64 vs 48)
 *
 * The error protocol is ggml's graph-building style without its asserts: a
 * failing op sets the context's error (first one wins) and returns NULL; an op
 * given NULL returns NULL silently, so a chain of ops after a failure costs
 * nothing and the caller checks once at the end.
 *
 * The rules are deliberately strict where a backend would otherwise have to
 * guess (element-wise ops accept F32 only for now; mul_mat's b must be F32,
 * or F16 against an F16 a), so that every graph that builds is one the CPU
 * backend can run; loosening a rule is a local change here plus a kernel.
 *
 * Views point at the ROOT tensor (the one with no view_src) with the offsets
 * summed, so a backend or the allocator resolves any view in one step.
 */
#include <math.h>
#include <stdio.h>

#include "core/core.h"

/* ---- names and classification -------------------------------------------- */

static const char *const OP_NAMES[TSL_OP_COUNT] = {
    [TSL_OP_NONE] = "NONE",
    [TSL_OP_DUP] = "DUP",
    [TSL_OP_CPY] = "CPY",
    [TSL_OP_SET_ROWS] = "SET_ROWS",
    [TSL_OP_ADD] = "ADD",
    [TSL_OP_SUB] = "SUB",
    [TSL_OP_MUL] = "MUL",
    [TSL_OP_DIV] = "DIV",
    [TSL_OP_SCALE] = "SCALE",
    [TSL_OP_SQR] = "SQR",
    [TSL_OP_SQRT] = "SQRT",
    [TSL_OP_SUM] = "SUM",
    [TSL_OP_SUM_ROWS] = "SUM_ROWS",
    [TSL_OP_MEAN] = "MEAN",
    [TSL_OP_ARGMAX] = "ARGMAX",
    [TSL_OP_GET_ROWS] = "GET_ROWS",
    [TSL_OP_MUL_MAT] = "MUL_MAT",
    [TSL_OP_OUT_PROD] = "OUT_PROD",
    [TSL_OP_RMS_NORM] = "RMS_NORM",
    [TSL_OP_NORM] = "NORM",
    [TSL_OP_ROPE] = "ROPE",
    [TSL_OP_SOFT_MAX] = "SOFT_MAX",
    [TSL_OP_SILU] = "SILU",
    [TSL_OP_GELU] = "GELU",
    [TSL_OP_SWIGLU] = "SWIGLU",
    [TSL_OP_CONCAT] = "CONCAT",
    [TSL_OP_CROSS_ENTROPY_LOSS] = "CROSS_ENTROPY_LOSS",
    [TSL_OP_VIEW] = "VIEW",
    [TSL_OP_RESHAPE] = "RESHAPE",
    [TSL_OP_PERMUTE] = "PERMUTE",
    [TSL_OP_TRANSPOSE] = "TRANSPOSE",
    [TSL_OP_CONT] = "CONT",
};

const char *tsl_op_name(tsl_op op) {
    if ((int)op < 0 || op >= TSL_OP_COUNT || !OP_NAMES[op]) return "?";
    return OP_NAMES[op];
}

bool tsl_op_is_view(tsl_op op) {
    return op == TSL_OP_VIEW || op == TSL_OP_RESHAPE || op == TSL_OP_PERMUTE || op == TSL_OP_TRANSPOSE;
}

bool core_op_can_inplace(tsl_op op) {
    switch (op) {
    case TSL_OP_ADD:
    case TSL_OP_SUB:
    case TSL_OP_MUL:
    case TSL_OP_DIV:
    case TSL_OP_SCALE:
    case TSL_OP_SQR:
    case TSL_OP_SQRT:
    case TSL_OP_SILU:
    case TSL_OP_GELU:
    case TSL_OP_SWIGLU:
    case TSL_OP_RMS_NORM:
    case TSL_OP_NORM:
    case TSL_OP_SOFT_MAX:
    case TSL_OP_ROPE: return true;
    default: return false;
    }
}

double core_node_flops(const tsl_tensor *t) {
    if (!t || t->op == TSL_OP_NONE || tsl_op_is_view(t->op)) return 0.0;
    double n = (double)tsl_nelements(t);
    switch (t->op) {
    case TSL_OP_MUL_MAT: /* each output is a K-long dot product: K multiplies and K adds */
        return t->src[0] ? 2.0 * n * (double)t->src[0]->ne[0] : 0.0;
    case TSL_OP_OUT_PROD: return t->src[0] ? 2.0 * n * (double)t->src[0]->ne[1] : 0.0;
    case TSL_OP_SUM:
    case TSL_OP_SUM_ROWS:
    case TSL_OP_MEAN:
    case TSL_OP_ARGMAX:
    case TSL_OP_CROSS_ENTROPY_LOSS: /* reductions touch every input element */
        return t->src[0] ? (double)tsl_nelements(t->src[0]) : 0.0;
    default: return n;
    }
}

/* ---- message helpers ------------------------------------------------------ */

/* Shape text by value so several can appear in one printf; the temporary
 * lives until the end of the full expression (C11 6.2.4p8). */
typedef struct {
    char s[112];
} shape_txt;
static shape_txt S(const tsl_tensor *t) {
    shape_txt r;
    core_shape_str(t, r.s, sizeof r.s);
    return r;
}

/* Float or block-quantized types (what a kernel can read as numbers). */
static bool op_type_numeric(tsl_type t) {
    return t == TSL_TYPE_F32 || t == TSL_TYPE_F16 || t == TSL_TYPE_BF16 || t == TSL_TYPE_Q8_0 ||
           t == TSL_TYPE_Q4_0;
}

/* First dimension i where b cannot be broadcast to a, or -1. */
static int op_repeat_dim(const tsl_tensor *b, const tsl_tensor *a) {
    for (int i = 0; i < TSL_MAX_DIMS; i++) {
        if (b->ne[i] == 0 ? a->ne[i] != 0 : a->ne[i] % b->ne[i] != 0) return i;
    }
    return -1;
}

/* A new result tensor with data (unless no_alloc), op and sources set. */
static tsl_tensor *op_new(tsl_context *ctx, const char *who, tsl_op op, tsl_type type, int64_t ne0, int64_t ne1,
                          int64_t ne2, int64_t ne3, tsl_tensor *s0, tsl_tensor *s1, tsl_tensor *s2) {
    int64_t ne[4] = {ne0, ne1, ne2, ne3};
    tsl_tensor *t = ctx_tensor_new(ctx, who, type, ne, NULL, true);
    if (!t) return NULL;
    t->op = op;
    t->src[0] = s0;
    t->src[1] = s1;
    t->src[2] = s2;
    return t;
}

static tsl_tensor *op_new_like(tsl_context *ctx, const char *who, tsl_op op, tsl_type type, const tsl_tensor *a,
                               tsl_tensor *s0, tsl_tensor *s1, tsl_tensor *s2) {
    return op_new(ctx, who, op, type, a->ne[0], a->ne[1], a->ne[2], a->ne[3], s0, s1, s2);
}

/* ---- views ------------------------------------------------------------------ */

/* Bytes spanned by ne/nb of type (last element's offset + one element or
 * block); false on overflow. 0 for an empty tensor. */
static bool op_span(tsl_type type, const int64_t ne[4], const size_t nb[4], size_t *out) {
    for (int i = 0; i < 4; i++)
        if (ne[i] <= 0) {
            *out = 0;
            return true;
        }
    int64_t bl = tsl_type_block_len(type);
    if (bl <= 0) return false; /* unknown type */
    size_t n = bl == 1 ? tsl_type_block_size(type) : 0;
    for (int i = 0; i < 4; i++) {
        size_t cnt = (size_t)(i == 0 && bl != 1 ? ne[0] / bl : ne[i] - 1);
        if (nb[i] != 0 && cnt > SIZE_MAX / nb[i]) return false;
        size_t step = cnt * nb[i];
        if (n > SIZE_MAX - step) return false;
        n += step;
    }
    *out = n;
    return true;
}

/* The view tensor: aliases a's root at a's offset + offs. Checks that it lies
 * within the root's bytes, so a view can never reach outside its source. */
static tsl_tensor *op_view_make(tsl_context *ctx, const char *who, tsl_op op, tsl_tensor *a, const int64_t ne[4],
                                const size_t nb[4], size_t offs) {
    tsl_tensor *root = a->view_src ? a->view_src : a;
    size_t base = a->view_src ? a->view_offs : 0;
    size_t span, root_bytes = tsl_nbytes(root);
    if (offs > SIZE_MAX - base || !op_span(a->type, ne, nb, &span) || base + offs > SIZE_MAX - span)
        return tsl_ctx_fail(ctx, "%s: view [%lld, %lld, %lld, %lld] of a %s at offset %zu overflows its byte size", who,
                            (long long)ne[0], (long long)ne[1], (long long)ne[2], (long long)ne[3], S(a).s, offs);
    if (base + offs + span > root_bytes)
        return tsl_ctx_fail(ctx,
                            "%s: view [%lld, %lld, %lld, %lld] of a %s at offset %zu spans bytes %zu..%zu, past the "
                            "%zu bytes of its source",
                            who, (long long)ne[0], (long long)ne[1], (long long)ne[2], (long long)ne[3], S(a).s, offs,
                            base + offs, base + offs + span, root_bytes);
    tsl_tensor *t = ctx_tensor_new(ctx, who, a->type, ne, nb, false);
    if (!t) return NULL;
    t->op = op;
    t->src[0] = a;
    t->view_src = root;
    t->view_offs = base + offs;
    t->buffer = root->buffer;
    if (root->data) t->data = (char *)root->data + t->view_offs;
    return t;
}

/* Checks shared by view_Nd: no negative extent, whole blocks in ne[0]. */
static bool op_view_shape_ok(tsl_context *ctx, const char *who, const tsl_tensor *a, const int64_t ne[4]) {
    for (int i = 0; i < 4; i++)
        if (ne[i] < 0) {
            tsl_ctx_fail(ctx, "%s: view of a %s has ne[%d] = %lld; dimensions must be >= 0", who, S(a).s, i,
                         (long long)ne[i]);
            return false;
        }
    int64_t bl = tsl_type_block_len(a->type);
    if (bl <= 0 || ne[0] % bl != 0) {
        tsl_ctx_fail(ctx, "%s: view of a %s has ne[0] = %lld, not a multiple of the %s block length %lld", who,
                     S(a).s, (long long)ne[0], tsl_type_name(a->type), (long long)bl);
        return false;
    }
    return true;
}

static tsl_tensor *op_view(tsl_context *ctx, const char *who, tsl_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2,
                           int64_t ne3, size_t nb1, size_t nb2, size_t nb3, size_t offset) {
    if (!ctx || !a) return NULL;
    int64_t ne[4] = {ne0, ne1, ne2, ne3};
    if (!op_view_shape_ok(ctx, who, a, ne)) return NULL;
    size_t nb[4] = {tsl_type_block_size(a->type), nb1, nb2, nb3};
    return op_view_make(ctx, who, TSL_OP_VIEW, a, ne, nb, offset);
}

tsl_tensor *tsl_view_1d(tsl_context *ctx, tsl_tensor *a, int64_t ne0, size_t offset) {
    if (!ctx || !a) return NULL;
    size_t row = tsl_row_size(a->type, ne0);
    return op_view(ctx, "view_1d", a, ne0, 1, 1, 1, row, row, row, offset);
}

tsl_tensor *tsl_view_2d(tsl_context *ctx, tsl_tensor *a, int64_t ne0, int64_t ne1, size_t nb1, size_t offset) {
    return op_view(ctx, "view_2d", a, ne0, ne1, 1, 1, nb1, nb1 * (size_t)(ne1 > 0 ? ne1 : 0),
                   nb1 * (size_t)(ne1 > 0 ? ne1 : 0), offset);
}

tsl_tensor *tsl_view_3d(tsl_context *ctx, tsl_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1,
                        size_t nb2, size_t offset) {
    return op_view(ctx, "view_3d", a, ne0, ne1, ne2, 1, nb1, nb2, nb2 * (size_t)(ne2 > 0 ? ne2 : 0), offset);
}

tsl_tensor *tsl_view_4d(tsl_context *ctx, tsl_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                        size_t nb1, size_t nb2, size_t nb3, size_t offset) {
    return op_view(ctx, "view_4d", a, ne0, ne1, ne2, ne3, nb1, nb2, nb3, offset);
}

static tsl_tensor *op_reshape(tsl_context *ctx, const char *who, tsl_tensor *a, int64_t ne0, int64_t ne1,
                              int64_t ne2, int64_t ne3) {
    if (!ctx || !a) return NULL;
    int64_t ne[4] = {ne0, ne1, ne2, ne3};
    if (!tsl_type_valid((int)a->type)) return tsl_ctx_fail(ctx, "%s: a %s has an unknown type", who, S(a).s);
    if (!tsl_is_contiguous(a))
        return tsl_ctx_fail(ctx, "%s: a %s is not contiguous (take tsl_cont of it first)", who, S(a).s);
    for (int i = 0; i < 4; i++)
        if (ne[i] < 0)
            return tsl_ctx_fail(ctx, "%s: a %s to [%lld, %lld, %lld, %lld]: ne[%d] is negative", who, S(a).s,
                                (long long)ne0, (long long)ne1, (long long)ne2, (long long)ne3, i);
    /* compare counts without overflowing: divide a's count down by each dim */
    int64_t n = tsl_nelements(a), rem = n;
    bool ok = true;
    for (int i = 0; i < 4 && ok; i++) {
        if (ne[i] == 0) {
            ok = n == 0;
            rem = 0;
            break;
        }
        ok = rem % ne[i] == 0;
        rem /= ne[i];
    }
    if (!ok || (n != 0 && rem != 1))
        return tsl_ctx_fail(ctx, "%s: a %s has %lld elements, [%lld, %lld, %lld, %lld] needs a different count", who,
                            S(a).s, (long long)n, (long long)ne0, (long long)ne1, (long long)ne2, (long long)ne3);
    int64_t bl = tsl_type_block_len(a->type);
    if (ne0 % bl != 0)
        return tsl_ctx_fail(ctx, "%s: a %s to ne[0] = %lld, not a multiple of the %s block length %lld", who, S(a).s,
                            (long long)ne0, tsl_type_name(a->type), (long long)bl);
    size_t nb[4];
    nb[0] = tsl_type_block_size(a->type);
    nb[1] = nb[0] * (size_t)(ne0 / bl);
    nb[2] = nb[1] * (size_t)ne1;
    nb[3] = nb[2] * (size_t)ne2;
    return op_view_make(ctx, who, TSL_OP_RESHAPE, a, ne, nb, 0);
}

tsl_tensor *tsl_reshape_1d(tsl_context *ctx, tsl_tensor *a, int64_t ne0) {
    return op_reshape(ctx, "reshape_1d", a, ne0, 1, 1, 1);
}
tsl_tensor *tsl_reshape_2d(tsl_context *ctx, tsl_tensor *a, int64_t ne0, int64_t ne1) {
    return op_reshape(ctx, "reshape_2d", a, ne0, ne1, 1, 1);
}
tsl_tensor *tsl_reshape_3d(tsl_context *ctx, tsl_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2) {
    return op_reshape(ctx, "reshape_3d", a, ne0, ne1, ne2, 1);
}
tsl_tensor *tsl_reshape_4d(tsl_context *ctx, tsl_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    return op_reshape(ctx, "reshape_4d", a, ne0, ne1, ne2, ne3);
}

tsl_tensor *tsl_permute(tsl_context *ctx, tsl_tensor *a, int axis0, int axis1, int axis2, int axis3) {
    if (!ctx || !a) return NULL;
    int ax[4] = {axis0, axis1, axis2, axis3};
    bool seen[4] = {false, false, false, false};
    for (int i = 0; i < 4; i++) {
        if (ax[i] < 0 || ax[i] > 3 || seen[ax[i]])
            return tsl_ctx_fail(ctx, "permute: axes (%d, %d, %d, %d) of a %s are not a permutation of 0..3", axis0,
                                axis1, axis2, axis3, S(a).s);
        seen[ax[i]] = true;
    }
    if (tsl_type_is_quantized(a->type) && ax[0] != 0)
        return tsl_ctx_fail(ctx, "permute: a %s is block-quantized; its dimension 0 cannot move (axes %d, %d, %d, %d)",
                            S(a).s, axis0, axis1, axis2, axis3);
    int64_t ne[4];
    size_t nb[4];
    for (int i = 0; i < 4; i++) {
        ne[ax[i]] = a->ne[i];
        nb[ax[i]] = a->nb[i];
    }
    tsl_tensor *t = op_view_make(ctx, "permute", TSL_OP_PERMUTE, a, ne, nb, 0);
    if (t)
        for (int i = 0; i < 4; i++) t->op_params[i] = ax[i];
    return t;
}

tsl_tensor *tsl_transpose(tsl_context *ctx, tsl_tensor *a) {
    if (!ctx || !a) return NULL;
    if (tsl_type_is_quantized(a->type))
        return tsl_ctx_fail(ctx, "transpose: a %s is block-quantized; its dimension 0 cannot move", S(a).s);
    int64_t ne[4] = {a->ne[1], a->ne[0], a->ne[2], a->ne[3]};
    size_t nb[4] = {a->nb[1], a->nb[0], a->nb[2], a->nb[3]};
    tsl_tensor *t = op_view_make(ctx, "transpose", TSL_OP_TRANSPOSE, a, ne, nb, 0);
    if (t) {
        t->op_params[0] = 1;
        t->op_params[1] = 0;
        t->op_params[2] = 2;
        t->op_params[3] = 3;
    }
    return t;
}

tsl_tensor *tsl_cont(tsl_context *ctx, tsl_tensor *a) {
    if (!ctx || !a) return NULL;
    if (tsl_type_is_quantized(a->type) && !tsl_rows_contiguous(a))
        return tsl_ctx_fail(ctx, "cont: a %s is block-quantized with strided blocks; only whole rows can be copied",
                            S(a).s);
    return op_new_like(ctx, "cont", TSL_OP_CONT, a->type, a, a, NULL, NULL);
}

/* ---- copies ----------------------------------------------------------------- */

tsl_tensor *tsl_dup(tsl_context *ctx, tsl_tensor *a, tsl_type type) {
    if (!ctx || !a) return NULL;
    if (!op_type_numeric(a->type))
        return tsl_ctx_fail(ctx, "dup: a %s is not a float or quantized type", S(a).s);
    if (!op_type_numeric(type))
        return tsl_ctx_fail(ctx, "dup: a %s to type %s: the target must be f32, f16, bf16, q8_0 or q4_0", S(a).s,
                            tsl_type_name(type));
    int64_t bl = tsl_type_block_len(type);
    if (a->ne[0] % bl != 0)
        return tsl_ctx_fail(ctx, "dup: a %s to %s: ne[0] %lld is not a multiple of the block length %lld", S(a).s,
                            tsl_type_name(type), (long long)a->ne[0], (long long)bl);
    if (tsl_type_is_quantized(a->type) && !tsl_rows_contiguous(a))
        return tsl_ctx_fail(ctx, "dup: a %s is block-quantized with strided blocks", S(a).s);
    return op_new_like(ctx, "dup", TSL_OP_DUP, type, a, a, NULL, NULL);
}

/* The result of an op that writes into dst (cpy, set_rows): a view of dst,
 * dst's shape and strides, at its data. */
static tsl_tensor *op_write_view(tsl_context *ctx, const char *who, tsl_op op, tsl_tensor *dst) {
    tsl_tensor *root = dst->view_src ? dst->view_src : dst;
    tsl_tensor *t = ctx_tensor_new(ctx, who, dst->type, dst->ne, dst->nb, false);
    if (!t) return NULL;
    t->op = op;
    t->view_src = root;
    t->view_offs = dst->view_src ? dst->view_offs : 0;
    t->buffer = root->buffer;
    t->data = dst->data;
    return t;
}

tsl_tensor *tsl_cpy(tsl_context *ctx, tsl_tensor *a, tsl_tensor *b) {
    if (!ctx || !a || !b) return NULL;
    if (tsl_nelements(a) != tsl_nelements(b))
        return tsl_ctx_fail(ctx, "cpy: a %s and b %s differ in element count (%lld vs %lld)", S(a).s, S(b).s,
                            (long long)tsl_nelements(a), (long long)tsl_nelements(b));
    if (a->type != b->type && !(op_type_numeric(a->type) && op_type_numeric(b->type)))
        return tsl_ctx_fail(ctx, "cpy: a %s and b %s: no conversion between these types", S(a).s, S(b).s);
    if ((tsl_type_is_quantized(a->type) && !tsl_rows_contiguous(a)) ||
        (tsl_type_is_quantized(b->type) && !tsl_rows_contiguous(b)))
        return tsl_ctx_fail(ctx, "cpy: a %s and b %s: a block-quantized side has strided blocks", S(a).s, S(b).s);
    bool qa = tsl_type_is_quantized(a->type), qb = tsl_type_is_quantized(b->type);
    if (qa || qb) {
        /* Blocks are converted whole, row by row of a: either a's rows map
         * onto b's rows, or both are dense and every row holds whole blocks
         * (a [head_dim, n_head, n_tokens] into a flat quantized cache view). */
        int64_t bl = qa ? tsl_type_block_len(a->type) : tsl_type_block_len(b->type);
        bool flat = tsl_is_contiguous(a) && tsl_is_contiguous(b) && a->ne[0] % bl == 0 && b->ne[0] % bl == 0;
        if (a->ne[0] != b->ne[0] && !flat)
            return tsl_ctx_fail(ctx,
                                "cpy: a %s and b %s differ in ne[0] (%lld vs %lld); a quantized copy needs equal row "
                                "lengths, or both contiguous with rows of whole %lld-element blocks",
                                S(a).s, S(b).s, (long long)a->ne[0], (long long)b->ne[0], (long long)bl);
    }
    tsl_tensor *t = op_write_view(ctx, "cpy", TSL_OP_CPY, b);
    if (!t) return NULL;
    t->src[0] = a;
    t->src[1] = b;
    return t;
}

/* ---- element-wise ------------------------------------------------------------ */

static tsl_tensor *op_unary(tsl_context *ctx, const char *who, tsl_op op, tsl_tensor *a) {
    if (!ctx || !a) return NULL;
    if (a->type != TSL_TYPE_F32) return tsl_ctx_fail(ctx, "%s: a %s: only f32 is supported", who, S(a).s);
    return op_new_like(ctx, who, op, TSL_TYPE_F32, a, a, NULL, NULL);
}

static tsl_tensor *op_binary(tsl_context *ctx, const char *who, tsl_op op, tsl_tensor *a, tsl_tensor *b) {
    if (!ctx || !a || !b) return NULL;
    if (a->type != TSL_TYPE_F32 || b->type != TSL_TYPE_F32)
        return tsl_ctx_fail(ctx, "%s: a %s and b %s: only f32 operands are supported", who, S(a).s, S(b).s);
    int d = op_repeat_dim(b, a);
    if (d >= 0)
        return tsl_ctx_fail(ctx, "%s: b %s cannot be broadcast to a %s (ne[%d]: %lld does not divide %lld)", who,
                            S(b).s, S(a).s, d, (long long)b->ne[d], (long long)a->ne[d]);
    return op_new_like(ctx, who, op, TSL_TYPE_F32, a, a, b, NULL);
}

tsl_tensor *tsl_add(tsl_context *ctx, tsl_tensor *a, tsl_tensor *b) { return op_binary(ctx, "add", TSL_OP_ADD, a, b); }
tsl_tensor *tsl_sub(tsl_context *ctx, tsl_tensor *a, tsl_tensor *b) { return op_binary(ctx, "sub", TSL_OP_SUB, a, b); }
tsl_tensor *tsl_mul(tsl_context *ctx, tsl_tensor *a, tsl_tensor *b) { return op_binary(ctx, "mul", TSL_OP_MUL, a, b); }
tsl_tensor *tsl_div(tsl_context *ctx, tsl_tensor *a, tsl_tensor *b) { return op_binary(ctx, "div", TSL_OP_DIV, a, b); }

tsl_tensor *tsl_scale(tsl_context *ctx, tsl_tensor *a, float s) {
    if (!ctx || !a) return NULL;
    if (!isfinite(s)) return tsl_ctx_fail(ctx, "scale: a %s: scale %g is not finite", S(a).s, (double)s);
    tsl_tensor *t = op_unary(ctx, "scale", TSL_OP_SCALE, a);
    if (t) op_set_f32(t, 0, s);
    return t;
}

tsl_tensor *tsl_sqr(tsl_context *ctx, tsl_tensor *a) { return op_unary(ctx, "sqr", TSL_OP_SQR, a); }
tsl_tensor *tsl_sqrt(tsl_context *ctx, tsl_tensor *a) { return op_unary(ctx, "sqrt", TSL_OP_SQRT, a); }
tsl_tensor *tsl_silu(tsl_context *ctx, tsl_tensor *a) { return op_unary(ctx, "silu", TSL_OP_SILU, a); }
tsl_tensor *tsl_gelu(tsl_context *ctx, tsl_tensor *a) { return op_unary(ctx, "gelu", TSL_OP_GELU, a); }

tsl_tensor *tsl_swiglu(tsl_context *ctx, tsl_tensor *gate, tsl_tensor *up) {
    if (!ctx || !gate || !up) return NULL;
    if (gate->type != TSL_TYPE_F32 || up->type != TSL_TYPE_F32)
        return tsl_ctx_fail(ctx, "swiglu: gate %s and up %s: only f32 operands are supported", S(gate).s, S(up).s);
    if (!tsl_same_shape(gate, up))
        return tsl_ctx_fail(ctx, "swiglu: gate %s and up %s differ in shape", S(gate).s, S(up).s);
    return op_new_like(ctx, "swiglu", TSL_OP_SWIGLU, TSL_TYPE_F32, gate, gate, up, NULL);
}

/* ---- reductions --------------------------------------------------------------- */

tsl_tensor *tsl_sum(tsl_context *ctx, tsl_tensor *a) {
    if (!ctx || !a) return NULL;
    if (a->type != TSL_TYPE_F32) return tsl_ctx_fail(ctx, "sum: a %s: only f32 is supported", S(a).s);
    return op_new(ctx, "sum", TSL_OP_SUM, TSL_TYPE_F32, 1, 1, 1, 1, a, NULL, NULL);
}

static tsl_tensor *op_rows_reduce(tsl_context *ctx, const char *who, tsl_op op, tsl_tensor *a) {
    if (!ctx || !a) return NULL;
    if (a->type != TSL_TYPE_F32) return tsl_ctx_fail(ctx, "%s: a %s: only f32 is supported", who, S(a).s);
    return op_new(ctx, who, op, TSL_TYPE_F32, 1, a->ne[1], a->ne[2], a->ne[3], a, NULL, NULL);
}

tsl_tensor *tsl_sum_rows(tsl_context *ctx, tsl_tensor *a) { return op_rows_reduce(ctx, "sum_rows", TSL_OP_SUM_ROWS, a); }
tsl_tensor *tsl_mean(tsl_context *ctx, tsl_tensor *a) { return op_rows_reduce(ctx, "mean", TSL_OP_MEAN, a); }

tsl_tensor *tsl_argmax(tsl_context *ctx, tsl_tensor *a) {
    if (!ctx || !a) return NULL;
    if (a->type != TSL_TYPE_F32) return tsl_ctx_fail(ctx, "argmax: a %s: only f32 is supported", S(a).s);
    if (a->ne[2] != 1 || a->ne[3] != 1) return tsl_ctx_fail(ctx, "argmax: a %s is not 2-D", S(a).s);
    if (a->ne[0] < 1) return tsl_ctx_fail(ctx, "argmax: a %s has empty rows", S(a).s);
    return op_new(ctx, "argmax", TSL_OP_ARGMAX, TSL_TYPE_I32, a->ne[1], 1, 1, 1, a, NULL, NULL);
}

tsl_tensor *tsl_cross_entropy_loss(tsl_context *ctx, tsl_tensor *logits, tsl_tensor *labels) {
    if (!ctx || !logits || !labels) return NULL;
    if (logits->type != TSL_TYPE_F32 || labels->type != TSL_TYPE_F32)
        return tsl_ctx_fail(ctx, "cross_entropy_loss: logits %s and labels %s: only f32 is supported", S(logits).s,
                            S(labels).s);
    if (!tsl_same_shape(logits, labels))
        return tsl_ctx_fail(ctx, "cross_entropy_loss: logits %s and labels %s differ in shape", S(logits).s,
                            S(labels).s);
    return op_new(ctx, "cross_entropy_loss", TSL_OP_CROSS_ENTROPY_LOSS, TSL_TYPE_F32, 1, 1, 1, 1, logits, labels,
                  NULL);
}

/* ---- matrix ops -------------------------------------------------------------- */

tsl_tensor *tsl_get_rows(tsl_context *ctx, tsl_tensor *a, tsl_tensor *idx) {
    if (!ctx || !a || !idx) return NULL;
    if (!op_type_numeric(a->type))
        return tsl_ctx_fail(ctx, "get_rows: a %s is not a float or quantized type", S(a).s);
    if (!tsl_rows_contiguous(a))
        return tsl_ctx_fail(ctx, "get_rows: a %s does not have dense rows (nb[0] %zu)", S(a).s, a->nb[0]);
    if (idx->type != TSL_TYPE_I32)
        return tsl_ctx_fail(ctx, "get_rows: a %s and idx %s: idx must be i32", S(a).s, S(idx).s);
    if (idx->ne[1] != a->ne[2] || idx->ne[2] != a->ne[3] || idx->ne[3] != 1)
        return tsl_ctx_fail(ctx,
                            "get_rows: a %s and idx %s: idx must be [n, %lld, %lld, 1] (its ne[1], ne[2] match a's "
                            "ne[2], ne[3])",
                            S(a).s, S(idx).s, (long long)a->ne[2], (long long)a->ne[3]);
    return op_new(ctx, "get_rows", TSL_OP_GET_ROWS, TSL_TYPE_F32, a->ne[0], idx->ne[0], a->ne[2], a->ne[3], a, idx,
                  NULL);
}

tsl_tensor *tsl_set_rows(tsl_context *ctx, tsl_tensor *dst, tsl_tensor *src, tsl_tensor *idx, int dim) {
    if (!ctx || !dst || !src || !idx) return NULL;
    if (dim != 0 && dim != 1) return tsl_ctx_fail(ctx, "set_rows: dim %d is not 0 or 1", dim);
    if (src->type != TSL_TYPE_F32 || (dst->type != TSL_TYPE_F32 && dst->type != TSL_TYPE_F16))
        return tsl_ctx_fail(ctx, "set_rows: src %s and dst %s: src must be f32, dst f32 or f16", S(src).s, S(dst).s);
    if (idx->type != TSL_TYPE_I32 || idx->ne[1] != 1 || idx->ne[2] != 1 || idx->ne[3] != 1)
        return tsl_ctx_fail(ctx, "set_rows: idx %s must be a 1-D i32 tensor", S(idx).s);
    for (int i = 0; i < TSL_MAX_DIMS; i++)
        if (src->ne[i] != (i == dim ? idx->ne[0] : dst->ne[i]))
            return tsl_ctx_fail(ctx,
                                "set_rows: src %s, dst %s, idx %s along dim %d: src must be dst's shape with idx's "
                                "length (%lld) along dim %d",
                                S(src).s, S(dst).s, S(idx).s, dim, (long long)idx->ne[0], dim);
    tsl_tensor *t = op_write_view(ctx, "set_rows", TSL_OP_SET_ROWS, dst);
    if (!t) return NULL;
    t->op_params[0] = dim;
    t->src[0] = src;
    t->src[1] = idx;
    t->src[2] = dst;
    return t;
}

/* The batch broadcast rule shared by mul_mat and out_prod: b's dims 2, 3
 * are whole multiples of a's. */
static bool op_batch_ok(tsl_context *ctx, const char *who, const tsl_tensor *a, const tsl_tensor *b) {
    for (int i = 2; i < 4; i++) {
        if (a->ne[i] == 0 || b->ne[i] % a->ne[i] != 0) {
            tsl_ctx_fail(ctx, "%s: a %s and b %s: b's ne[%d] (%lld) is not a multiple of a's (%lld)", who, S(a).s,
                         S(b).s, i, (long long)b->ne[i], (long long)a->ne[i]);
            return false;
        }
    }
    return true;
}

tsl_tensor *tsl_mul_mat(tsl_context *ctx, tsl_tensor *a, tsl_tensor *b) {
    if (!ctx || !a || !b) return NULL;
    if (!op_type_numeric(a->type))
        return tsl_ctx_fail(ctx, "mul_mat: a %s and b %s: a must be f32, f16, bf16, q8_0 or q4_0", S(a).s, S(b).s);
    if (!(b->type == TSL_TYPE_F32 || (b->type == TSL_TYPE_F16 && a->type == TSL_TYPE_F16)))
        return tsl_ctx_fail(ctx, "mul_mat: a %s and b %s: b must be f32 (or f16 when a is f16)", S(a).s, S(b).s);
    if (!tsl_rows_contiguous(a))
        return tsl_ctx_fail(ctx, "mul_mat: a %s and b %s: a's rows are not dense (nb[0] %zu)", S(a).s, S(b).s,
                            a->nb[0]);
    if (a->ne[0] != b->ne[0])
        return tsl_ctx_fail(ctx, "mul_mat: a %s and b %s differ in ne[0] (%lld vs %lld)", S(a).s, S(b).s,
                            (long long)a->ne[0], (long long)b->ne[0]);
    if (!op_batch_ok(ctx, "mul_mat", a, b)) return NULL;
    return op_new(ctx, "mul_mat", TSL_OP_MUL_MAT, TSL_TYPE_F32, a->ne[1], b->ne[1], b->ne[2], b->ne[3], a, b, NULL);
}

tsl_tensor *tsl_out_prod(tsl_context *ctx, tsl_tensor *a, tsl_tensor *b) {
    if (!ctx || !a || !b) return NULL;
    if (!op_type_numeric(a->type))
        return tsl_ctx_fail(ctx, "out_prod: a %s and b %s: a must be f32, f16, bf16, q8_0 or q4_0", S(a).s, S(b).s);
    if (b->type != TSL_TYPE_F32)
        return tsl_ctx_fail(ctx, "out_prod: a %s and b %s: b must be f32", S(a).s, S(b).s);
    if (!tsl_rows_contiguous(a))
        return tsl_ctx_fail(ctx, "out_prod: a %s and b %s: a's rows are not dense (nb[0] %zu)", S(a).s, S(b).s,
                            a->nb[0]);
    if (a->ne[1] != b->ne[1])
        return tsl_ctx_fail(ctx, "out_prod: a %s and b %s differ in ne[1] (%lld vs %lld)", S(a).s, S(b).s,
                            (long long)a->ne[1], (long long)b->ne[1]);
    if (!op_batch_ok(ctx, "out_prod", a, b)) return NULL;
    return op_new(ctx, "out_prod", TSL_OP_OUT_PROD, TSL_TYPE_F32, a->ne[0], b->ne[0], b->ne[2], b->ne[3], a, b,
                  NULL);
}

/* ---- normalisation, rope, softmax -------------------------------------------- */

static tsl_tensor *op_norm(tsl_context *ctx, const char *who, tsl_op op, tsl_tensor *a, float eps) {
    if (!ctx || !a) return NULL;
    if (!(eps > 0.0f) || !isfinite(eps))
        return tsl_ctx_fail(ctx, "%s: a %s: eps %g must be positive and finite", who, S(a).s, (double)eps);
    tsl_tensor *t = op_unary(ctx, who, op, a);
    if (t) op_set_f32(t, 0, eps);
    return t;
}

tsl_tensor *tsl_rms_norm(tsl_context *ctx, tsl_tensor *a, float eps) {
    return op_norm(ctx, "rms_norm", TSL_OP_RMS_NORM, a, eps);
}
tsl_tensor *tsl_norm(tsl_context *ctx, tsl_tensor *a, float eps) { return op_norm(ctx, "norm", TSL_OP_NORM, a, eps); }

tsl_rope_params tsl_rope_default(int n_dims) {
    tsl_rope_params p;
    p.n_dims = n_dims;
    p.mode = TSL_ROPE_NORMAL;
    p.n_ctx_orig = 0;
    p.freq_base = 10000.0f;
    p.freq_scale = 1.0f;
    p.ext_factor = 0.0f;
    p.attn_factor = 1.0f;
    p.beta_fast = 32.0f;
    p.beta_slow = 1.0f;
    return p;
}

tsl_tensor *tsl_rope(tsl_context *ctx, tsl_tensor *a, tsl_tensor *pos, tsl_tensor *freq_factors,
                     const tsl_rope_params *p) {
    if (!ctx || !a || !pos) return NULL;
    if (!p) return tsl_ctx_fail(ctx, "rope: a %s: the parameters are NULL (use tsl_rope_default)", S(a).s);
    if (a->type != TSL_TYPE_F32) return tsl_ctx_fail(ctx, "rope: a %s: only f32 is supported", S(a).s);
    if (a->ne[3] != 1)
        return tsl_ctx_fail(ctx, "rope: a %s must be [head_dim, n_head, n_tokens, 1]", S(a).s);
    if (pos->type != TSL_TYPE_I32 || pos->ne[1] != 1 || pos->ne[2] != 1 || pos->ne[3] != 1 || pos->ne[0] != a->ne[2])
        return tsl_ctx_fail(ctx, "rope: a %s and pos %s: pos must be i32 [%lld] (one position per token)", S(a).s,
                            S(pos).s, (long long)a->ne[2]);
    if (p->n_dims <= 0 || p->n_dims % 2 != 0 || p->n_dims > a->ne[0])
        return tsl_ctx_fail(ctx, "rope: a %s: n_dims %d must be even and in 1..%lld", S(a).s, p->n_dims,
                            (long long)a->ne[0]);
    if (p->mode != TSL_ROPE_NORMAL && p->mode != TSL_ROPE_NEOX)
        return tsl_ctx_fail(ctx, "rope: a %s: mode %d is neither NORMAL (0) nor NEOX (2)", S(a).s, p->mode);
    if (!(p->freq_base > 0.0f) || !isfinite(p->freq_base))
        return tsl_ctx_fail(ctx, "rope: a %s: freq_base %g must be positive and finite", S(a).s, (double)p->freq_base);
    if (!(p->freq_scale > 0.0f) || !isfinite(p->freq_scale))
        return tsl_ctx_fail(ctx, "rope: a %s: freq_scale %g must be positive and finite", S(a).s,
                            (double)p->freq_scale);
    if (!isfinite(p->ext_factor) || !isfinite(p->attn_factor) || !isfinite(p->beta_fast) || !isfinite(p->beta_slow))
        return tsl_ctx_fail(ctx, "rope: a %s: ext_factor, attn_factor, beta_fast and beta_slow must be finite",
                            S(a).s);
    if (p->n_ctx_orig < 0)
        return tsl_ctx_fail(ctx, "rope: a %s: n_ctx_orig %d is negative", S(a).s, p->n_ctx_orig);
    if (freq_factors &&
        (freq_factors->type != TSL_TYPE_F32 || freq_factors->ne[0] < p->n_dims / 2 || !tsl_is_contiguous(freq_factors)))
        return tsl_ctx_fail(ctx, "rope: a %s and freq_factors %s: freq_factors must be contiguous f32 with ne[0] >= %d",
                            S(a).s, S(freq_factors).s, p->n_dims / 2);
    tsl_tensor *t = op_new_like(ctx, "rope", TSL_OP_ROPE, TSL_TYPE_F32, a, a, pos, freq_factors);
    if (!t) return NULL;
    t->op_params[0] = p->n_dims;
    t->op_params[1] = p->mode;
    t->op_params[2] = p->n_ctx_orig;
    op_set_f32(t, 3, p->freq_base);
    op_set_f32(t, 4, p->freq_scale);
    op_set_f32(t, 5, p->ext_factor);
    op_set_f32(t, 6, p->attn_factor);
    op_set_f32(t, 7, p->beta_fast);
    op_set_f32(t, 8, p->beta_slow);
    return t;
}

tsl_tensor *tsl_soft_max(tsl_context *ctx, tsl_tensor *a, tsl_tensor *mask, float scale) {
    if (!ctx || !a) return NULL;
    if (a->type != TSL_TYPE_F32) return tsl_ctx_fail(ctx, "soft_max: a %s: only f32 is supported", S(a).s);
    if (!isfinite(scale)) return tsl_ctx_fail(ctx, "soft_max: a %s: scale %g is not finite", S(a).s, (double)scale);
    if (mask) {
        if (mask->type != TSL_TYPE_F32 && mask->type != TSL_TYPE_F16)
            return tsl_ctx_fail(ctx, "soft_max: a %s and mask %s: the mask must be f32 or f16", S(a).s, S(mask).s);
        if (mask->ne[0] != a->ne[0] || mask->ne[1] < a->ne[1] || mask->ne[2] == 0 || mask->ne[3] == 0 ||
            a->ne[2] % mask->ne[2] != 0 || a->ne[3] % mask->ne[3] != 0)
            return tsl_ctx_fail(ctx,
                                "soft_max: a %s and mask %s: the mask must be [%lld, >= %lld, m2, m3] with m2, m3 "
                                "dividing a's ne[2], ne[3]",
                                S(a).s, S(mask).s, (long long)a->ne[0], (long long)a->ne[1]);
    }
    tsl_tensor *t = op_new_like(ctx, "soft_max", TSL_OP_SOFT_MAX, TSL_TYPE_F32, a, a, mask, NULL);
    if (t) op_set_f32(t, 0, scale);
    return t;
}

tsl_tensor *tsl_concat(tsl_context *ctx, tsl_tensor *a, tsl_tensor *b, int dim) {
    if (!ctx || !a || !b) return NULL;
    if (dim < 0 || dim > 3)
        return tsl_ctx_fail(ctx, "concat: a %s and b %s: dim %d is not in 0..3", S(a).s, S(b).s, dim);
    if (a->type != b->type)
        return tsl_ctx_fail(ctx, "concat: a %s and b %s differ in type", S(a).s, S(b).s);
    if (a->type != TSL_TYPE_F32 && a->type != TSL_TYPE_F16 && a->type != TSL_TYPE_I32)
        return tsl_ctx_fail(ctx, "concat: a %s and b %s: only f32, f16 and i32 are supported", S(a).s, S(b).s);
    for (int i = 0; i < 4; i++)
        if (i != dim && a->ne[i] != b->ne[i])
            return tsl_ctx_fail(ctx, "concat: a %s and b %s differ in ne[%d] (%lld vs %lld), not the joined dim %d",
                                S(a).s, S(b).s, i, (long long)a->ne[i], (long long)b->ne[i], dim);
    int64_t ne[4] = {a->ne[0], a->ne[1], a->ne[2], a->ne[3]};
    ne[dim] += b->ne[dim];
    tsl_tensor *t = op_new(ctx, "concat", TSL_OP_CONCAT, a->type, ne[0], ne[1], ne[2], ne[3], a, b, NULL);
    if (t) t->op_params[0] = dim;
    return t;
}
