/*
 * test_shapes.c - the shape and type rules of every op.
 *
 * For each op: a valid call gives the documented result (shape, type, op,
 * sources, op_params); each wrong shape, type or parameter gives NULL and one
 * context error that names the op and an operand's shape; a NULL operand
 * gives NULL and sets nothing. Then the error protocol as a whole: a chain
 * after a failure stays NULL and the first failure is what the context
 * reports, and graph_build says so when handed the NULL.
 */
#include <stdint.h>

#include "core/core.h"
#include "test.h"

static tsl_context *ctx;

/* The message opens with "<op>: ", as every shape error does. */
static bool starts_with_op(const char *err, const char *op) {
    size_t n = strlen(op);
    return err && strncmp(err, op, n) == 0 && err[n] == ':' && err[n + 1] == ' ';
}

/* The call returns NULL and leaves an error naming `op` and containing `shape`. */
#define EXPECT_FAIL(expr, op, shape)                                                                \
    do {                                                                                            \
        tsl_ctx_clear_error(ctx);                                                                   \
        tsl_tensor *r_ = (expr);                                                                    \
        CHECKF(r_ == NULL, "%s", #expr);                                                            \
        CHECKF(starts_with_op(tsl_ctx_error(ctx), op), "error \"%s\" does not start with \"%s: \"",      \
               tsl_ctx_error(ctx) ? tsl_ctx_error(ctx) : "(null)", op);                             \
        CHECK_STR_CONTAINS(tsl_ctx_error(ctx), shape);                                              \
        tsl_ctx_clear_error(ctx);                                                                   \
    } while (0)

/* The call returns NULL and sets no error (a NULL operand). */
#define EXPECT_SILENT_NULL(expr)                                                                    \
    do {                                                                                            \
        tsl_ctx_clear_error(ctx);                                                                   \
        CHECKF((expr) == NULL, "%s", #expr);                                                        \
        CHECKF(tsl_ctx_error(ctx) == NULL, "%s set \"%s\"", #expr, tsl_ctx_error(ctx));             \
    } while (0)

/* The call succeeds without error. */
#define EXPECT_OK(var, expr)                                                                        \
    tsl_tensor *var = (expr);                                                                       \
    CHECKF(var != NULL, "%s failed: %s", #expr, tsl_ctx_error(ctx) ? tsl_ctx_error(ctx) : "(no error)")

static bool shape_is(const tsl_tensor *t, tsl_type type, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    return t && t->type == type && t->ne[0] == n0 && t->ne[1] == n1 && t->ne[2] == n2 && t->ne[3] == n3;
}

/* A freshly made op result: contiguous, in ctx, op and sources as given. */
static bool result_ok(const tsl_tensor *t, tsl_op op, const tsl_tensor *s0, const tsl_tensor *s1) {
    return t && t->op == op && t->src[0] == s0 && t->src[1] == s1 && t->ctx == ctx && tsl_is_contiguous(t) &&
           t->view_src == NULL;
}

static tsl_tensor *T(tsl_type type, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    return tsl_new_tensor_4d(ctx, type, n0, n1, n2, n3);
}

static void test_names(void) {
    CHECK(strcmp(tsl_op_name(TSL_OP_MUL_MAT), "MUL_MAT") == 0);
    CHECK(strcmp(tsl_op_name(TSL_OP_NONE), "NONE") == 0);
    CHECK(strcmp(tsl_op_name(TSL_OP_CROSS_ENTROPY_LOSS), "CROSS_ENTROPY_LOSS") == 0);
    CHECK(strcmp(tsl_op_name(TSL_OP_CONT), "CONT") == 0);
    CHECK(strcmp(tsl_op_name(TSL_OP_COUNT), "?") == 0);
    CHECK(strcmp(tsl_op_name((tsl_op)-1), "?") == 0);
    for (int op = 0; op < TSL_OP_COUNT; op++) CHECKF(strcmp(tsl_op_name((tsl_op)op), "?") != 0, "op %d", op);
    CHECK(tsl_op_is_view(TSL_OP_VIEW) && tsl_op_is_view(TSL_OP_RESHAPE) && tsl_op_is_view(TSL_OP_PERMUTE) &&
          tsl_op_is_view(TSL_OP_TRANSPOSE));
    CHECK(!tsl_op_is_view(TSL_OP_CONT) && !tsl_op_is_view(TSL_OP_CPY) && !tsl_op_is_view(TSL_OP_NONE));
    const tsl_op inplace[] = {TSL_OP_ADD,  TSL_OP_SUB,  TSL_OP_MUL,    TSL_OP_DIV,      TSL_OP_SCALE,
                              TSL_OP_SQR,  TSL_OP_SQRT, TSL_OP_SILU,   TSL_OP_GELU,     TSL_OP_SWIGLU,
                              TSL_OP_NORM, TSL_OP_ROPE, TSL_OP_RMS_NORM, TSL_OP_SOFT_MAX};
    int n_inplace = 0;
    for (int op = 0; op < TSL_OP_COUNT; op++) n_inplace += core_op_can_inplace((tsl_op)op);
    CHECK(n_inplace == (int)(sizeof inplace / sizeof inplace[0]));
    for (size_t i = 0; i < sizeof inplace / sizeof inplace[0]; i++) CHECK(core_op_can_inplace(inplace[i]));
    CHECK(!core_op_can_inplace(TSL_OP_MUL_MAT) && !core_op_can_inplace(TSL_OP_CPY) &&
          !core_op_can_inplace(TSL_OP_GET_ROWS) && !core_op_can_inplace(TSL_OP_VIEW));
}

static void test_views(void) {
    tsl_tensor *a = T(TSL_TYPE_F32, 8, 6, 4, 2); /* 1536 bytes */
    EXPECT_OK(v1, tsl_view_1d(ctx, a, 10, 8));
    CHECK(shape_is(v1, TSL_TYPE_F32, 10, 1, 1, 1) && v1->op == TSL_OP_VIEW && v1->view_offs == 8);
    EXPECT_OK(v2, tsl_view_2d(ctx, a, 4, 3, 32, 64));
    CHECK(shape_is(v2, TSL_TYPE_F32, 4, 3, 1, 1) && v2->nb[1] == 32 && v2->src[0] == a);
    EXPECT_OK(v3, tsl_view_3d(ctx, a, 8, 6, 2, 32, 192, 0));
    CHECK(shape_is(v3, TSL_TYPE_F32, 8, 6, 2, 1) && v3->nb[2] == 192 && tsl_is_contiguous(v3));
    EXPECT_OK(v4, tsl_view_4d(ctx, a, 8, 6, 4, 2, 32, 192, 768, 0));
    CHECK(shape_is(v4, TSL_TYPE_F32, 8, 6, 4, 2) && tsl_nbytes(v4) == tsl_nbytes(a));
    /* out of bounds, negative extent, partial block */
    EXPECT_FAIL(tsl_view_1d(ctx, a, 385, 0), "view_1d", "[8, 6, 4, 2] f32");
    EXPECT_FAIL(tsl_view_2d(ctx, a, 8, 7, 32, 1536 - 6 * 32), "view_2d", "[8, 6, 4, 2] f32");
    EXPECT_FAIL(tsl_view_3d(ctx, a, 8, 6, 3, 32, 768, 0), "view_3d", "[8, 6, 4, 2] f32");
    EXPECT_FAIL(tsl_view_4d(ctx, a, 8, 6, 4, 2, 32, 192, 768, 4), "view_4d", "[8, 6, 4, 2] f32");
    EXPECT_FAIL(tsl_view_2d(ctx, a, 8, -1, 32, 0), "view_2d", "ne[1] = -1");
    EXPECT_FAIL(tsl_view_1d(ctx, a, 4, SIZE_MAX - 2), "view_1d", "[8, 6, 4, 2] f32");
    tsl_tensor *q = T(TSL_TYPE_Q8_0, 64, 4, 1, 1);
    EXPECT_OK(qv, tsl_view_1d(ctx, q, 32, 34));
    CHECK(shape_is(qv, TSL_TYPE_Q8_0, 32, 1, 1, 1) && qv->nb[0] == 34 && tsl_nbytes(qv) == 34);
    EXPECT_FAIL(tsl_view_1d(ctx, q, 16, 0), "view_1d", "[64, 4, 1, 1] q8_0");
    EXPECT_SILENT_NULL(tsl_view_1d(ctx, NULL, 4, 0));
    EXPECT_SILENT_NULL(tsl_view_2d(ctx, NULL, 4, 1, 16, 0));
    EXPECT_SILENT_NULL(tsl_view_3d(ctx, NULL, 4, 1, 1, 16, 16, 0));
    EXPECT_SILENT_NULL(tsl_view_4d(ctx, NULL, 4, 1, 1, 1, 16, 16, 16, 0));
}

static void test_reshape(void) {
    tsl_tensor *a = T(TSL_TYPE_F32, 8, 6, 4, 2);
    EXPECT_OK(r1, tsl_reshape_1d(ctx, a, 384));
    CHECK(shape_is(r1, TSL_TYPE_F32, 384, 1, 1, 1) && r1->op == TSL_OP_RESHAPE && r1->src[0] == a &&
          r1->view_src == a && tsl_is_contiguous(r1));
    EXPECT_OK(r2, tsl_reshape_2d(ctx, a, 48, 8));
    CHECK(shape_is(r2, TSL_TYPE_F32, 48, 8, 1, 1) && r2->nb[1] == 192);
    EXPECT_OK(r3, tsl_reshape_3d(ctx, a, 2, 4, 48));
    CHECK(shape_is(r3, TSL_TYPE_F32, 2, 4, 48, 1));
    EXPECT_OK(r4, tsl_reshape_4d(ctx, r3, 4, 4, 4, 6));
    CHECK(shape_is(r4, TSL_TYPE_F32, 4, 4, 4, 6) && r4->view_src == a && r4->src[0] == r3);
    EXPECT_FAIL(tsl_reshape_2d(ctx, a, 48, 9), "reshape_2d", "[8, 6, 4, 2] f32");
    EXPECT_FAIL(tsl_reshape_1d(ctx, a, 383), "reshape_1d", "[8, 6, 4, 2] f32");
    EXPECT_FAIL(tsl_reshape_3d(ctx, a, -2, -4, 48), "reshape_3d", "[8, 6, 4, 2] f32");
    EXPECT_FAIL(tsl_reshape_4d(ctx, a, INT64_C(1) << 40, INT64_C(1) << 40, 1, 1), "reshape_4d", "[8, 6, 4, 2] f32");
    tsl_tensor *t = tsl_transpose(ctx, a);
    EXPECT_FAIL(tsl_reshape_1d(ctx, t, 384), "reshape_1d", "[6, 8, 4, 2] f32");
    tsl_tensor *q = T(TSL_TYPE_Q4_0, 64, 2, 1, 1);
    EXPECT_OK(q1, tsl_reshape_2d(ctx, q, 32, 4));
    CHECK(q1->nb[1] == 18);
    EXPECT_FAIL(tsl_reshape_2d(ctx, q, 16, 8), "reshape_2d", "[64, 2, 1, 1] q4_0");
    EXPECT_SILENT_NULL(tsl_reshape_1d(ctx, NULL, 4));
    EXPECT_SILENT_NULL(tsl_reshape_2d(ctx, NULL, 4, 1));
    EXPECT_SILENT_NULL(tsl_reshape_3d(ctx, NULL, 4, 1, 1));
    EXPECT_SILENT_NULL(tsl_reshape_4d(ctx, NULL, 4, 1, 1, 1));
}

static void test_permute_transpose_cont(void) {
    tsl_tensor *a = T(TSL_TYPE_F16, 8, 6, 4, 2);
    EXPECT_OK(p, tsl_permute(ctx, a, 0, 2, 1, 3));
    CHECK(shape_is(p, TSL_TYPE_F16, 8, 4, 6, 2) && p->op == TSL_OP_PERMUTE && p->nb[1] == a->nb[2] &&
          p->nb[2] == a->nb[1]);
    CHECK(p->op_params[0] == 0 && p->op_params[1] == 2 && p->op_params[2] == 1 && p->op_params[3] == 3);
    EXPECT_OK(p2, tsl_permute(ctx, a, 3, 2, 1, 0));
    CHECK(shape_is(p2, TSL_TYPE_F16, 2, 4, 6, 8) && p2->nb[0] == a->nb[3] && p2->nb[3] == a->nb[0]);
    /* a 3-cycle, which is not its own inverse: dim i goes TO axis_i */
    EXPECT_OK(p3, tsl_permute(ctx, a, 1, 2, 0, 3));
    CHECK(shape_is(p3, TSL_TYPE_F16, 4, 8, 6, 2) && p3->nb[0] == 96 && p3->nb[1] == 2 && p3->nb[2] == 16);
    EXPECT_FAIL(tsl_permute(ctx, a, 0, 1, 1, 3), "permute", "[8, 6, 4, 2] f16");
    EXPECT_FAIL(tsl_permute(ctx, a, 0, 1, 2, 4), "permute", "[8, 6, 4, 2] f16");
    EXPECT_FAIL(tsl_permute(ctx, a, -1, 1, 2, 3), "permute", "[8, 6, 4, 2] f16");
    tsl_tensor *q = T(TSL_TYPE_Q8_0, 32, 2, 1, 1);
    EXPECT_FAIL(tsl_permute(ctx, q, 1, 0, 2, 3), "permute", "[32, 2, 1, 1] q8_0");
    EXPECT_OK(qp, tsl_permute(ctx, q, 0, 2, 1, 3));
    CHECK(shape_is(qp, TSL_TYPE_Q8_0, 32, 1, 2, 1));
    EXPECT_OK(t, tsl_transpose(ctx, a));
    CHECK(shape_is(t, TSL_TYPE_F16, 6, 8, 4, 2) && t->op == TSL_OP_TRANSPOSE && t->src[0] == a);
    EXPECT_FAIL(tsl_transpose(ctx, q), "transpose", "[32, 2, 1, 1] q8_0");
    EXPECT_OK(c, tsl_cont(ctx, t));
    CHECK(shape_is(c, TSL_TYPE_F16, 6, 8, 4, 2) && result_ok(c, TSL_OP_CONT, t, NULL));
    EXPECT_SILENT_NULL(tsl_permute(ctx, NULL, 0, 1, 2, 3));
    EXPECT_SILENT_NULL(tsl_transpose(ctx, NULL));
    EXPECT_SILENT_NULL(tsl_cont(ctx, NULL));
}

static void test_dup_cpy(void) {
    tsl_tensor *a = T(TSL_TYPE_F32, 64, 3, 1, 1);
    const tsl_type targets[] = {TSL_TYPE_F32, TSL_TYPE_F16, TSL_TYPE_BF16, TSL_TYPE_Q8_0, TSL_TYPE_Q4_0};
    for (int i = 0; i < 5; i++) {
        EXPECT_OK(d, tsl_dup(ctx, a, targets[i]));
        CHECK(shape_is(d, targets[i], 64, 3, 1, 1) && result_ok(d, TSL_OP_DUP, a, NULL));
    }
    tsl_tensor *odd = T(TSL_TYPE_F32, 48, 2, 1, 1);
    EXPECT_FAIL(tsl_dup(ctx, odd, TSL_TYPE_Q8_0), "dup", "[48, 2, 1, 1] f32");
    EXPECT_FAIL(tsl_dup(ctx, a, TSL_TYPE_I32), "dup", "[64, 3, 1, 1] f32");
    tsl_tensor *ia = T(TSL_TYPE_I32, 4, 1, 1, 1);
    EXPECT_FAIL(tsl_dup(ctx, ia, TSL_TYPE_F32), "dup", "[4, 1, 1, 1] i32");
    EXPECT_SILENT_NULL(tsl_dup(ctx, NULL, TSL_TYPE_F32));

    /* cpy into a strided view (a KV-cache slot) */
    tsl_tensor *cache = T(TSL_TYPE_F16, 64, 16, 1, 1);
    tsl_tensor *slot = tsl_view_2d(ctx, cache, 64, 3, cache->nb[1], 5 * cache->nb[1]);
    EXPECT_OK(c, tsl_cpy(ctx, a, slot));
    CHECK(shape_is(c, TSL_TYPE_F16, 64, 3, 1, 1) && c->op == TSL_OP_CPY && c->src[0] == a && c->src[1] == slot);
    CHECK(c->view_src == cache && c->view_offs == 5 * cache->nb[1] && c->data == slot->data);
    CHECK(c->nb[1] == slot->nb[1]);
    /* same element count, other shape: allowed between float types */
    tsl_tensor *flat = T(TSL_TYPE_F32, 192, 1, 1, 1);
    EXPECT_OK(c2, tsl_cpy(ctx, a, flat));
    CHECK(shape_is(c2, TSL_TYPE_F32, 192, 1, 1, 1) && c2->view_src == flat && c2->view_offs == 0);
    EXPECT_FAIL(tsl_cpy(ctx, a, T(TSL_TYPE_F32, 64, 2, 1, 1)), "cpy", "[64, 2, 1, 1] f32");
    EXPECT_FAIL(tsl_cpy(ctx, a, T(TSL_TYPE_I32, 64, 3, 1, 1)), "cpy", "[64, 3, 1, 1] i32");
    /* into blocks: rows that line up, or both dense with whole blocks per row */
    EXPECT_OK(cq, tsl_cpy(ctx, flat, T(TSL_TYPE_Q8_0, 64, 3, 1, 1)));
    CHECK(cq->type == TSL_TYPE_Q8_0);
    EXPECT_FAIL(tsl_cpy(ctx, T(TSL_TYPE_F32, 48, 4, 1, 1), T(TSL_TYPE_Q8_0, 64, 3, 1, 1)), "cpy", "[48, 4, 1, 1] f32");
    tsl_tensor *qc = T(TSL_TYPE_Q8_0, 64, 8, 1, 1);
    tsl_tensor *qs = tsl_view_2d(ctx, qc, 32, 6, 68, 0); /* half of each row: strided */
    EXPECT_FAIL(tsl_cpy(ctx, a, qs), "cpy", "[32, 6, 1, 1] q8_0");
    EXPECT_OK(cqs, tsl_cpy(ctx, T(TSL_TYPE_F32, 32, 6, 1, 1), qs));
    CHECK(cqs->view_src == qc && cqs->nb[1] == 68);
    EXPECT_FAIL(tsl_cpy(ctx, T(TSL_TYPE_Q4_0, 32, 6, 1, 1), T(TSL_TYPE_F32, 16, 12, 1, 1)), "cpy",
                "[32, 6, 1, 1] q4_0");
    EXPECT_OK(c3, tsl_cpy(ctx, a, T(TSL_TYPE_Q8_0, 64, 3, 1, 1)));
    CHECK(c3->type == TSL_TYPE_Q8_0);
    EXPECT_OK(c4, tsl_cpy(ctx, ia, T(TSL_TYPE_I32, 2, 2, 1, 1)));
    CHECK(c4->type == TSL_TYPE_I32);
    EXPECT_SILENT_NULL(tsl_cpy(ctx, NULL, flat));
    EXPECT_SILENT_NULL(tsl_cpy(ctx, a, NULL));
}

typedef tsl_tensor *(*binary_fn)(tsl_context *, tsl_tensor *, tsl_tensor *);

static void test_binary(void) {
    const struct {
        binary_fn fn;
        const char *name;
        tsl_op op;
    } ops[] = {{tsl_add, "add", TSL_OP_ADD}, {tsl_sub, "sub", TSL_OP_SUB}, {tsl_mul, "mul", TSL_OP_MUL},
               {tsl_div, "div", TSL_OP_DIV}};
    tsl_tensor *a = T(TSL_TYPE_F32, 8, 6, 4, 2);
    tsl_tensor *row = T(TSL_TYPE_F32, 8, 1, 1, 1);
    tsl_tensor *b = T(TSL_TYPE_F32, 8, 3, 1, 2);
    tsl_tensor *bad = T(TSL_TYPE_F32, 8, 4, 1, 1);
    tsl_tensor *h = T(TSL_TYPE_F16, 8, 6, 4, 2);
    tsl_tensor *ta = tsl_transpose(ctx, T(TSL_TYPE_F32, 6, 8, 4, 2)); /* non-contiguous a */
    for (int i = 0; i < 4; i++) {
        char shape[64];
        EXPECT_OK(r, ops[i].fn(ctx, a, row));
        CHECK(shape_is(r, TSL_TYPE_F32, 8, 6, 4, 2) && result_ok(r, ops[i].op, a, row));
        EXPECT_OK(r2, ops[i].fn(ctx, a, b));
        CHECK(shape_is(r2, TSL_TYPE_F32, 8, 6, 4, 2));
        EXPECT_OK(r3, ops[i].fn(ctx, ta, a));
        CHECK(shape_is(r3, TSL_TYPE_F32, 8, 6, 4, 2) && tsl_is_contiguous(r3));
        snprintf(shape, sizeof shape, "[8, 4, 1, 1] f32");
        EXPECT_FAIL(ops[i].fn(ctx, a, bad), ops[i].name, shape);
        EXPECT_FAIL(ops[i].fn(ctx, row, a), ops[i].name, "[8, 6, 4, 2] f32");
        EXPECT_FAIL(ops[i].fn(ctx, h, a), ops[i].name, "[8, 6, 4, 2] f16");
        EXPECT_FAIL(ops[i].fn(ctx, a, h), ops[i].name, "[8, 6, 4, 2] f16");
        EXPECT_SILENT_NULL(ops[i].fn(ctx, NULL, a));
        EXPECT_SILENT_NULL(ops[i].fn(ctx, a, NULL));
        EXPECT_SILENT_NULL(ops[i].fn(NULL, a, a));
    }
}

typedef tsl_tensor *(*unary_fn)(tsl_context *, tsl_tensor *);
static tsl_tensor *scale2(tsl_context *c, tsl_tensor *a) { return tsl_scale(c, a, 2.5f); }
static tsl_tensor *rms_norm_eps(tsl_context *c, tsl_tensor *a) { return tsl_rms_norm(c, a, 1e-6f); }
static tsl_tensor *norm_eps(tsl_context *c, tsl_tensor *a) { return tsl_norm(c, a, 1e-5f); }

static void test_unary(void) {
    const struct {
        unary_fn fn;
        const char *name;
        tsl_op op;
    } ops[] = {{tsl_sqr, "sqr", TSL_OP_SQR},      {tsl_sqrt, "sqrt", TSL_OP_SQRT},
               {tsl_silu, "silu", TSL_OP_SILU},   {tsl_gelu, "gelu", TSL_OP_GELU},
               {scale2, "scale", TSL_OP_SCALE},   {rms_norm_eps, "rms_norm", TSL_OP_RMS_NORM},
               {norm_eps, "norm", TSL_OP_NORM}};
    tsl_tensor *a = T(TSL_TYPE_F32, 5, 4, 3, 2);
    tsl_tensor *q = T(TSL_TYPE_Q8_0, 32, 4, 1, 1);
    tsl_tensor *bf = T(TSL_TYPE_BF16, 5, 4, 1, 1);
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        EXPECT_OK(r, ops[i].fn(ctx, a));
        CHECK(shape_is(r, TSL_TYPE_F32, 5, 4, 3, 2) && result_ok(r, ops[i].op, a, NULL));
        EXPECT_FAIL(ops[i].fn(ctx, q), ops[i].name, "[32, 4, 1, 1] q8_0");
        EXPECT_FAIL(ops[i].fn(ctx, bf), ops[i].name, "[5, 4, 1, 1] bf16");
        EXPECT_SILENT_NULL(ops[i].fn(ctx, NULL));
    }
    EXPECT_OK(s, tsl_scale(ctx, a, -0.125f));
    CHECK(op_get_f32(s, 0) == -0.125f);
    EXPECT_FAIL(tsl_scale(ctx, a, INFINITY), "scale", "[5, 4, 3, 2] f32");
    EXPECT_OK(rn, tsl_rms_norm(ctx, a, 1e-6f));
    CHECK(op_get_f32(rn, 0) == 1e-6f);
    EXPECT_OK(nn, tsl_norm(ctx, a, 1e-5f));
    CHECK(op_get_f32(nn, 0) == 1e-5f);
    EXPECT_FAIL(tsl_rms_norm(ctx, a, 0.0f), "rms_norm", "[5, 4, 3, 2] f32");
    EXPECT_FAIL(tsl_rms_norm(ctx, a, -1e-6f), "rms_norm", "[5, 4, 3, 2] f32");
    EXPECT_FAIL(tsl_rms_norm(ctx, a, NAN), "rms_norm", "[5, 4, 3, 2] f32");
    EXPECT_FAIL(tsl_norm(ctx, a, INFINITY), "norm", "[5, 4, 3, 2] f32");
    EXPECT_FAIL(tsl_norm(ctx, a, 0.0f), "norm", "[5, 4, 3, 2] f32");
}

static void test_swiglu_concat(void) {
    tsl_tensor *g = T(TSL_TYPE_F32, 16, 4, 2, 1);
    tsl_tensor *u = T(TSL_TYPE_F32, 16, 4, 2, 1);
    EXPECT_OK(s, tsl_swiglu(ctx, g, u));
    CHECK(shape_is(s, TSL_TYPE_F32, 16, 4, 2, 1) && result_ok(s, TSL_OP_SWIGLU, g, u));
    EXPECT_FAIL(tsl_swiglu(ctx, g, T(TSL_TYPE_F32, 16, 1, 1, 1)), "swiglu", "[16, 1, 1, 1] f32");
    EXPECT_FAIL(tsl_swiglu(ctx, g, T(TSL_TYPE_F16, 16, 4, 2, 1)), "swiglu", "[16, 4, 2, 1] f16");
    EXPECT_SILENT_NULL(tsl_swiglu(ctx, NULL, u));
    EXPECT_SILENT_NULL(tsl_swiglu(ctx, g, NULL));

    tsl_tensor *a = T(TSL_TYPE_F32, 4, 3, 2, 1);
    for (int dim = 0; dim < 4; dim++) {
        int64_t ne[4] = {4, 3, 2, 1};
        ne[dim] = 5;
        tsl_tensor *b = T(TSL_TYPE_F32, ne[0], ne[1], ne[2], ne[3]);
        int64_t want[4] = {4, 3, 2, 1};
        want[dim] += 5;
        EXPECT_OK(c, tsl_concat(ctx, a, b, dim));
        CHECK(shape_is(c, TSL_TYPE_F32, want[0], want[1], want[2], want[3]) && result_ok(c, TSL_OP_CONCAT, a, b));
        CHECK(c->op_params[0] == dim);
    }
    tsl_tensor *ih = T(TSL_TYPE_I32, 4, 3, 1, 1);
    EXPECT_OK(ci, tsl_concat(ctx, ih, ih, 1));
    CHECK(shape_is(ci, TSL_TYPE_I32, 4, 6, 1, 1));
    tsl_tensor *hh = T(TSL_TYPE_F16, 4, 3, 1, 1);
    EXPECT_OK(ch, tsl_concat(ctx, hh, hh, 0));
    CHECK(shape_is(ch, TSL_TYPE_F16, 8, 3, 1, 1));
    EXPECT_FAIL(tsl_concat(ctx, a, T(TSL_TYPE_F32, 4, 4, 2, 1), 0), "concat", "[4, 4, 2, 1] f32");
    EXPECT_FAIL(tsl_concat(ctx, a, a, 4), "concat", "[4, 3, 2, 1] f32");
    EXPECT_FAIL(tsl_concat(ctx, a, a, -1), "concat", "[4, 3, 2, 1] f32");
    EXPECT_FAIL(tsl_concat(ctx, a, T(TSL_TYPE_F16, 4, 3, 2, 1), 2), "concat", "[4, 3, 2, 1] f16");
    tsl_tensor *q = T(TSL_TYPE_Q8_0, 32, 1, 1, 1);
    EXPECT_FAIL(tsl_concat(ctx, q, q, 1), "concat", "[32, 1, 1, 1] q8_0");
    EXPECT_SILENT_NULL(tsl_concat(ctx, NULL, a, 0));
    EXPECT_SILENT_NULL(tsl_concat(ctx, a, NULL, 0));
}

static void test_reductions(void) {
    tsl_tensor *a = T(TSL_TYPE_F32, 7, 5, 3, 2);
    tsl_tensor *h = T(TSL_TYPE_F16, 7, 5, 1, 1);
    EXPECT_OK(s, tsl_sum(ctx, a));
    CHECK(shape_is(s, TSL_TYPE_F32, 1, 1, 1, 1) && result_ok(s, TSL_OP_SUM, a, NULL));
    EXPECT_OK(sr, tsl_sum_rows(ctx, a));
    CHECK(shape_is(sr, TSL_TYPE_F32, 1, 5, 3, 2) && result_ok(sr, TSL_OP_SUM_ROWS, a, NULL));
    EXPECT_OK(m, tsl_mean(ctx, a));
    CHECK(shape_is(m, TSL_TYPE_F32, 1, 5, 3, 2) && result_ok(m, TSL_OP_MEAN, a, NULL));
    EXPECT_FAIL(tsl_sum(ctx, h), "sum", "[7, 5, 1, 1] f16");
    EXPECT_FAIL(tsl_sum_rows(ctx, h), "sum_rows", "[7, 5, 1, 1] f16");
    EXPECT_FAIL(tsl_mean(ctx, h), "mean", "[7, 5, 1, 1] f16");
    EXPECT_SILENT_NULL(tsl_sum(ctx, NULL));
    EXPECT_SILENT_NULL(tsl_sum_rows(ctx, NULL));
    EXPECT_SILENT_NULL(tsl_mean(ctx, NULL));

    tsl_tensor *logits = T(TSL_TYPE_F32, 100, 9, 1, 1);
    EXPECT_OK(am, tsl_argmax(ctx, logits));
    CHECK(shape_is(am, TSL_TYPE_I32, 9, 1, 1, 1) && result_ok(am, TSL_OP_ARGMAX, logits, NULL));
    EXPECT_FAIL(tsl_argmax(ctx, a), "argmax", "[7, 5, 3, 2] f32");
    EXPECT_FAIL(tsl_argmax(ctx, h), "argmax", "[7, 5, 1, 1] f16");
    EXPECT_SILENT_NULL(tsl_argmax(ctx, NULL));

    tsl_tensor *labels = T(TSL_TYPE_F32, 100, 9, 1, 1);
    EXPECT_OK(ce, tsl_cross_entropy_loss(ctx, logits, labels));
    CHECK(shape_is(ce, TSL_TYPE_F32, 1, 1, 1, 1) && result_ok(ce, TSL_OP_CROSS_ENTROPY_LOSS, logits, labels));
    EXPECT_FAIL(tsl_cross_entropy_loss(ctx, logits, T(TSL_TYPE_F32, 100, 8, 1, 1)), "cross_entropy_loss",
                "[100, 8, 1, 1] f32");
    EXPECT_FAIL(tsl_cross_entropy_loss(ctx, logits, T(TSL_TYPE_F16, 100, 9, 1, 1)), "cross_entropy_loss",
                "[100, 9, 1, 1] f16");
    EXPECT_SILENT_NULL(tsl_cross_entropy_loss(ctx, NULL, labels));
    EXPECT_SILENT_NULL(tsl_cross_entropy_loss(ctx, logits, NULL));
}

static void test_get_rows(void) {
    const tsl_type types[] = {TSL_TYPE_F32, TSL_TYPE_F16, TSL_TYPE_BF16, TSL_TYPE_Q8_0, TSL_TYPE_Q4_0};
    tsl_tensor *idx = T(TSL_TYPE_I32, 5, 1, 1, 1);
    for (int i = 0; i < 5; i++) {
        tsl_tensor *emb = T(types[i], 64, 1000, 1, 1);
        EXPECT_OK(r, tsl_get_rows(ctx, emb, idx));
        CHECK(shape_is(r, TSL_TYPE_F32, 64, 5, 1, 1) && result_ok(r, TSL_OP_GET_ROWS, emb, idx));
    }
    tsl_tensor *a3 = T(TSL_TYPE_F32, 16, 10, 3, 2);
    tsl_tensor *idx3 = T(TSL_TYPE_I32, 4, 3, 2, 1);
    EXPECT_OK(r3, tsl_get_rows(ctx, a3, idx3));
    CHECK(shape_is(r3, TSL_TYPE_F32, 16, 4, 3, 2));
    EXPECT_FAIL(tsl_get_rows(ctx, a3, T(TSL_TYPE_I32, 4, 2, 2, 1)), "get_rows", "[4, 2, 2, 1] i32");
    EXPECT_FAIL(tsl_get_rows(ctx, a3, T(TSL_TYPE_I32, 4, 3, 1, 1)), "get_rows", "[16, 10, 3, 2] f32");
    EXPECT_FAIL(tsl_get_rows(ctx, a3, T(TSL_TYPE_F32, 4, 3, 2, 1)), "get_rows", "[4, 3, 2, 1] f32");
    tsl_tensor *ia = T(TSL_TYPE_I32, 16, 10, 1, 1);
    EXPECT_FAIL(tsl_get_rows(ctx, ia, idx), "get_rows", "[16, 10, 1, 1] i32");
    EXPECT_SILENT_NULL(tsl_get_rows(ctx, NULL, idx));
    EXPECT_SILENT_NULL(tsl_get_rows(ctx, a3, NULL));
}

static void test_mul_mat(void) {
    const tsl_type types[] = {TSL_TYPE_F32, TSL_TYPE_F16, TSL_TYPE_BF16, TSL_TYPE_Q8_0, TSL_TYPE_Q4_0};
    tsl_tensor *b = T(TSL_TYPE_F32, 64, 8, 1, 1);
    for (int i = 0; i < 5; i++) {
        tsl_tensor *w = T(types[i], 64, 32, 1, 1);
        EXPECT_OK(r, tsl_mul_mat(ctx, w, b));
        CHECK(shape_is(r, TSL_TYPE_F32, 32, 8, 1, 1) && result_ok(r, TSL_OP_MUL_MAT, w, b));
        CHECK(core_node_flops(r) == 2.0 * 32 * 8 * 64);
    }
    /* the message of the brief's example, word for word */
    tsl_tensor *a = T(TSL_TYPE_F32, 64, 32, 1, 1);
    tsl_ctx_clear_error(ctx);
    CHECK(tsl_mul_mat(ctx, a, T(TSL_TYPE_F32, 48, 8, 1, 1)) == NULL);
    CHECK(tsl_ctx_error(ctx) &&
          strcmp(tsl_ctx_error(ctx), "mul_mat: a [64, 32, 1, 1] f32 and b [48, 8, 1, 1] f32 differ in ne[0] (64 vs 48)") ==
              0);
    /* batch broadcast: b's dims 2, 3 multiples of a's */
    tsl_tensor *a4 = T(TSL_TYPE_F32, 16, 8, 2, 3);
    EXPECT_OK(rb, tsl_mul_mat(ctx, a4, T(TSL_TYPE_F32, 16, 5, 4, 6)));
    CHECK(shape_is(rb, TSL_TYPE_F32, 8, 5, 4, 6));
    EXPECT_FAIL(tsl_mul_mat(ctx, a4, T(TSL_TYPE_F32, 16, 5, 3, 3)), "mul_mat", "[16, 5, 3, 3] f32");
    EXPECT_FAIL(tsl_mul_mat(ctx, a4, T(TSL_TYPE_F32, 16, 5, 2, 4)), "mul_mat", "[16, 8, 2, 3] f32");
    /* b types */
    tsl_tensor *h = T(TSL_TYPE_F16, 64, 32, 1, 1);
    tsl_tensor *bh = T(TSL_TYPE_F16, 64, 8, 1, 1);
    EXPECT_OK(rh, tsl_mul_mat(ctx, h, bh));
    CHECK(shape_is(rh, TSL_TYPE_F32, 32, 8, 1, 1));
    EXPECT_FAIL(tsl_mul_mat(ctx, a, bh), "mul_mat", "[64, 8, 1, 1] f16");
    EXPECT_FAIL(tsl_mul_mat(ctx, T(TSL_TYPE_Q8_0, 64, 32, 1, 1), T(TSL_TYPE_Q8_0, 64, 8, 1, 1)), "mul_mat",
                "[64, 8, 1, 1] q8_0");
    EXPECT_FAIL(tsl_mul_mat(ctx, T(TSL_TYPE_I32, 64, 32, 1, 1), b), "mul_mat", "[64, 32, 1, 1] i32");
    /* a with strided rows is refused; b may be non-contiguous */
    tsl_tensor *at = tsl_transpose(ctx, T(TSL_TYPE_F32, 32, 64, 1, 1));
    EXPECT_FAIL(tsl_mul_mat(ctx, at, b), "mul_mat", "[64, 32, 1, 1] f32");
    tsl_tensor *bt = tsl_permute(ctx, T(TSL_TYPE_F32, 64, 2, 8, 1), 0, 2, 1, 3);
    EXPECT_OK(rp, tsl_mul_mat(ctx, a, bt));
    CHECK(shape_is(rp, TSL_TYPE_F32, 32, 8, 2, 1));
    EXPECT_SILENT_NULL(tsl_mul_mat(ctx, NULL, b));
    EXPECT_SILENT_NULL(tsl_mul_mat(ctx, a, NULL));
}

static void test_out_prod(void) {
    tsl_tensor *a = T(TSL_TYPE_F32, 10, 7, 1, 1);
    tsl_tensor *b = T(TSL_TYPE_F32, 4, 7, 1, 1);
    EXPECT_OK(r, tsl_out_prod(ctx, a, b));
    CHECK(shape_is(r, TSL_TYPE_F32, 10, 4, 1, 1) && result_ok(r, TSL_OP_OUT_PROD, a, b));
    CHECK(core_node_flops(r) == 2.0 * 10 * 4 * 7);
    tsl_tensor *q = T(TSL_TYPE_Q4_0, 32, 7, 2, 1);
    EXPECT_OK(rq, tsl_out_prod(ctx, q, T(TSL_TYPE_F32, 4, 7, 6, 3)));
    CHECK(shape_is(rq, TSL_TYPE_F32, 32, 4, 6, 3));
    EXPECT_FAIL(tsl_out_prod(ctx, a, T(TSL_TYPE_F32, 4, 6, 1, 1)), "out_prod", "[4, 6, 1, 1] f32");
    EXPECT_FAIL(tsl_out_prod(ctx, q, T(TSL_TYPE_F32, 4, 7, 3, 1)), "out_prod", "[4, 7, 3, 1] f32");
    EXPECT_FAIL(tsl_out_prod(ctx, a, T(TSL_TYPE_F16, 4, 7, 1, 1)), "out_prod", "[4, 7, 1, 1] f16");
    EXPECT_SILENT_NULL(tsl_out_prod(ctx, NULL, b));
    EXPECT_SILENT_NULL(tsl_out_prod(ctx, a, NULL));
}

static void test_rope(void) {
    tsl_tensor *a = T(TSL_TYPE_F32, 64, 8, 5, 1);
    tsl_tensor *pos = T(TSL_TYPE_I32, 5, 1, 1, 1);
    tsl_tensor *ff = T(TSL_TYPE_F32, 32, 1, 1, 1);
    tsl_rope_params p = tsl_rope_default(64);
    CHECK(p.n_dims == 64 && p.mode == TSL_ROPE_NORMAL && p.freq_base == 10000.0f && p.freq_scale == 1.0f &&
          p.ext_factor == 0.0f && p.attn_factor == 1.0f);
    EXPECT_OK(r, tsl_rope(ctx, a, pos, NULL, &p));
    CHECK(shape_is(r, TSL_TYPE_F32, 64, 8, 5, 1) && result_ok(r, TSL_OP_ROPE, a, pos) && r->src[2] == NULL);
    CHECK(r->op_params[0] == 64 && r->op_params[1] == TSL_ROPE_NORMAL && op_get_f32(r, 3) == 10000.0f &&
          op_get_f32(r, 4) == 1.0f && op_get_f32(r, 6) == 1.0f && op_get_f32(r, 7) == 32.0f &&
          op_get_f32(r, 8) == 1.0f);
    tsl_rope_params pn = p;
    pn.mode = TSL_ROPE_NEOX;
    pn.n_dims = 32;
    pn.freq_base = 1e6f;
    pn.n_ctx_orig = 4096;
    pn.ext_factor = 0.5f;
    EXPECT_OK(rn, tsl_rope(ctx, a, pos, ff, &pn));
    CHECK(rn->src[2] == ff && rn->op_params[0] == 32 && rn->op_params[1] == TSL_ROPE_NEOX &&
          rn->op_params[2] == 4096 && op_get_f32(rn, 3) == 1e6f && op_get_f32(rn, 5) == 0.5f);
    const char *as = "[64, 8, 5, 1] f32";
    tsl_rope_params bad = p;
    bad.n_dims = 63;
    EXPECT_FAIL(tsl_rope(ctx, a, pos, NULL, &bad), "rope", as);
    bad.n_dims = 66;
    EXPECT_FAIL(tsl_rope(ctx, a, pos, NULL, &bad), "rope", as);
    bad.n_dims = 0;
    EXPECT_FAIL(tsl_rope(ctx, a, pos, NULL, &bad), "rope", as);
    bad = p;
    bad.mode = 1;
    EXPECT_FAIL(tsl_rope(ctx, a, pos, NULL, &bad), "rope", as);
    bad = p;
    bad.freq_base = 0.0f;
    EXPECT_FAIL(tsl_rope(ctx, a, pos, NULL, &bad), "rope", as);
    bad = p;
    bad.freq_scale = NAN;
    EXPECT_FAIL(tsl_rope(ctx, a, pos, NULL, &bad), "rope", as);
    EXPECT_FAIL(tsl_rope(ctx, a, pos, NULL, NULL), "rope", as);
    EXPECT_FAIL(tsl_rope(ctx, a, T(TSL_TYPE_I32, 4, 1, 1, 1), NULL, &p), "rope", "[4, 1, 1, 1] i32");
    EXPECT_FAIL(tsl_rope(ctx, a, T(TSL_TYPE_F32, 5, 1, 1, 1), NULL, &p), "rope", "[5, 1, 1, 1] f32");
    EXPECT_FAIL(tsl_rope(ctx, a, T(TSL_TYPE_I32, 5, 2, 1, 1), NULL, &p), "rope", "[5, 2, 1, 1] i32");
    EXPECT_FAIL(tsl_rope(ctx, a, pos, T(TSL_TYPE_F32, 31, 1, 1, 1), &p), "rope", "[31, 1, 1, 1] f32");
    EXPECT_FAIL(tsl_rope(ctx, a, pos, T(TSL_TYPE_F16, 32, 1, 1, 1), &p), "rope", "[32, 1, 1, 1] f16");
    EXPECT_FAIL(tsl_rope(ctx, T(TSL_TYPE_F16, 64, 8, 5, 1), pos, NULL, &p), "rope", "[64, 8, 5, 1] f16");
    EXPECT_FAIL(tsl_rope(ctx, T(TSL_TYPE_F32, 64, 8, 5, 2), pos, NULL, &p), "rope", "[64, 8, 5, 2] f32");
    EXPECT_SILENT_NULL(tsl_rope(ctx, NULL, pos, NULL, &p));
    EXPECT_SILENT_NULL(tsl_rope(ctx, a, NULL, NULL, &p));
}

static void test_soft_max(void) {
    tsl_tensor *a = T(TSL_TYPE_F32, 32, 7, 8, 2);
    EXPECT_OK(r, tsl_soft_max(ctx, a, NULL, 0.125f));
    CHECK(shape_is(r, TSL_TYPE_F32, 32, 7, 8, 2) && result_ok(r, TSL_OP_SOFT_MAX, a, NULL) &&
          op_get_f32(r, 0) == 0.125f);
    tsl_tensor *m = T(TSL_TYPE_F16, 32, 16, 1, 1); /* padded rows, broadcast heads */
    EXPECT_OK(rm, tsl_soft_max(ctx, a, m, 1.0f));
    CHECK(result_ok(rm, TSL_OP_SOFT_MAX, a, m));
    EXPECT_OK(rm2, tsl_soft_max(ctx, a, T(TSL_TYPE_F32, 32, 7, 4, 2), 1.0f));
    CHECK(rm2->src[1] != NULL);
    const char *as = "[32, 7, 8, 2] f32";
    EXPECT_FAIL(tsl_soft_max(ctx, a, T(TSL_TYPE_F32, 31, 7, 1, 1), 1.0f), "soft_max", "[31, 7, 1, 1] f32");
    EXPECT_FAIL(tsl_soft_max(ctx, a, T(TSL_TYPE_F32, 32, 6, 1, 1), 1.0f), "soft_max", "[32, 6, 1, 1] f32");
    EXPECT_FAIL(tsl_soft_max(ctx, a, T(TSL_TYPE_F32, 32, 7, 3, 1), 1.0f), "soft_max", "[32, 7, 3, 1] f32");
    EXPECT_FAIL(tsl_soft_max(ctx, a, T(TSL_TYPE_F32, 32, 7, 1, 4), 1.0f), "soft_max", as);
    EXPECT_FAIL(tsl_soft_max(ctx, a, T(TSL_TYPE_BF16, 32, 7, 1, 1), 1.0f), "soft_max", "[32, 7, 1, 1] bf16");
    EXPECT_FAIL(tsl_soft_max(ctx, T(TSL_TYPE_F16, 32, 7, 1, 1), NULL, 1.0f), "soft_max", "[32, 7, 1, 1] f16");
    EXPECT_FAIL(tsl_soft_max(ctx, a, NULL, NAN), "soft_max", as);
    EXPECT_SILENT_NULL(tsl_soft_max(ctx, NULL, m, 1.0f));
}

/* The error protocol across ops: the first failure is what stays. */
static void test_first_error_wins(void) {
    tsl_ctx_clear_error(ctx);
    tsl_tensor *w = T(TSL_TYPE_F32, 64, 32, 1, 1);
    tsl_tensor *x = T(TSL_TYPE_F32, 48, 8, 1, 1);
    tsl_tensor *y = tsl_mul_mat(ctx, w, x); /* fails */
    CHECK(y == NULL);
    const char *first = tsl_ctx_error(ctx);
    CHECK_STR_CONTAINS(first, "mul_mat: a [64, 32, 1, 1] f32");
    char saved[512];
    snprintf(saved, sizeof saved, "%s", first ? first : "");
    tsl_tensor *z = tsl_silu(ctx, y);
    z = tsl_add(ctx, z, w);
    z = tsl_soft_max(ctx, z, NULL, 1.0f);
    z = tsl_reshape_1d(ctx, z, 10);
    CHECK(z == NULL);
    /* a later, independent failure does not replace the first */
    CHECK(tsl_add(ctx, w, x) == NULL);
    CHECK(tsl_ctx_error(ctx) && strcmp(tsl_ctx_error(ctx), saved) == 0);
    /* graph_build on the NULL: NULL, and the first failure still reported */
    tsl_tensor *outs[2] = {w, z};
    CHECK(tsl_graph_build(ctx, outs, 2) == NULL);
    CHECK(tsl_ctx_error(ctx) && strcmp(tsl_ctx_error(ctx), saved) == 0);
    /* without an earlier failure in this context, graph_build writes its own message */
    tsl_ctx_clear_error(ctx);
    CHECK(tsl_graph_build(ctx, outs, 2) == NULL);
    CHECK_STR_CONTAINS(tsl_ctx_error(ctx), "graph_build: output 1 is NULL");
    tsl_ctx_clear_error(ctx);
    CHECK(tsl_graph_build(ctx, outs, 0) == NULL);
    CHECK_STR_CONTAINS(tsl_ctx_error(ctx), "graph_build");
    tsl_ctx_clear_error(ctx);
    CHECK(tsl_graph_build(ctx, NULL, 1) == NULL);
    CHECK_STR_CONTAINS(tsl_ctx_error(ctx), "graph_build");
    tsl_ctx_clear_error(ctx);
}

/* Operands may live in another context (weights), results are made here. */
static void test_cross_context(void) {
    tsl_ctx_params wp = {1 << 16, false};
    tsl_context *wctx = tsl_ctx_new(wp);
    tsl_tensor *w = tsl_new_tensor_2d(wctx, TSL_TYPE_Q8_0, 64, 16);
    tsl_tensor *x = T(TSL_TYPE_F32, 64, 3, 1, 1);
    EXPECT_OK(y, tsl_mul_mat(ctx, w, x));
    CHECK(y->ctx == ctx && y->src[0] == w);
    tsl_tensor *wv = tsl_view_2d(ctx, w, 64, 4, w->nb[1], 2 * w->nb[1]);
    CHECK(wv && wv->ctx == ctx && wv->view_src == w && wv->data == (char *)w->data + 2 * w->nb[1]);
    /* a mistake with a foreign operand is reported on the building context */
    tsl_ctx_clear_error(wctx);
    CHECK(tsl_mul_mat(ctx, w, T(TSL_TYPE_F32, 32, 3, 1, 1)) == NULL);
    CHECK(tsl_ctx_error(wctx) == NULL);
    CHECK_STR_CONTAINS(tsl_ctx_error(ctx), "mul_mat");
    tsl_ctx_clear_error(ctx);
    tsl_ctx_free(wctx);
}

int main(void) {
    tsl_ctx_params p = {16 << 20, true};
    ctx = tsl_ctx_new(p);
    RUN(test_names);
    RUN(test_views);
    RUN(test_reshape);
    RUN(test_permute_transpose_cont);
    RUN(test_dup_cpy);
    RUN(test_binary);
    RUN(test_unary);
    RUN(test_swiglu_concat);
    RUN(test_reductions);
    RUN(test_get_rows);
    RUN(test_mul_mat);
    RUN(test_out_prod);
    RUN(test_rope);
    RUN(test_soft_max);
    RUN(test_first_error_wins);
    RUN(test_cross_context);
    tsl_ctx_free(ctx);
    return test_summary();
}
