/*
 * test_context.c - contexts and tensors: arena accounting, creation-order
 * iteration, names, sizes and contiguity of views and permutes, view-of-view
 * offsets, host element access, and the errors for a full arena or a shape
 * whose byte size overflows.
 */
#include <stdint.h>
#include <unistd.h>

#include "core/core.h"
#include "test.h"

static tsl_context *new_ctx(size_t size, bool no_alloc) {
    tsl_ctx_params p = {size, no_alloc};
    return tsl_ctx_new(p);
}

static void test_arena_accounting(void) {
    tsl_context *ctx = new_ctx(1 << 20, false);
    CHECK(ctx != NULL);
    CHECK(tsl_ctx_size(ctx) == (1 << 20));
    CHECK(tsl_ctx_used(ctx) == 0);
    CHECK(!tsl_ctx_no_alloc(ctx));
    tsl_tensor *a = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 100, 10);
    CHECK(a != NULL);
    size_t u1 = tsl_ctx_used(ctx);
    CHECK(u1 >= sizeof(tsl_tensor) + 4000);
    CHECK(u1 < sizeof(tsl_tensor) + 4000 + 256); /* struct + data + alignment, nothing more */
    CHECK(a->data != NULL);
    CHECK(((uintptr_t)a->data % 64) == 0);
    CHECK(a->ctx == ctx);
    CHECK(a->op == TSL_OP_NONE);
    CHECK(a->flags == 0);
    CHECK(a->view_src == NULL && a->buffer == NULL);
    /* data lies inside the arena and does not overlap the next tensor */
    tsl_tensor *b = tsl_new_tensor_1d(ctx, TSL_TYPE_Q8_0, 64);
    CHECK(b != NULL);
    CHECK((char *)b >= (char *)a->data + 4000);
    CHECK(b->nb[0] == 34 && b->nb[1] == 68);
    CHECK(tsl_nbytes(b) == 68);
    CHECK(((uintptr_t)b->data % 64) == 0);
    CHECK(tsl_ctx_used(ctx) >= u1 + sizeof(tsl_tensor) + 68);
    /* raw arena allocations respect their alignment */
    void *p = ctx_arena_alloc(ctx, 10, 256);
    CHECK(p != NULL && ((uintptr_t)p % 256) == 0);
    void *q = ctx_arena_alloc(ctx, 1, 0);
    CHECK(q != NULL && ((uintptr_t)q % 16) == 0 && (char *)q >= (char *)p + 10);
    /* fresh data reads as zero */
    CHECK(tsl_get_f32_1d(a, 999) == 0.0f);
    CHECK(tsl_ctx_error(ctx) == NULL);
    tsl_ctx_free(ctx);
    tsl_ctx_free(NULL);
}

static void test_no_alloc(void) {
    tsl_context *ctx = new_ctx(4096, true);
    CHECK(tsl_ctx_no_alloc(ctx));
    /* a 1 GiB tensor costs only its struct in a no_alloc context */
    tsl_tensor *a = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 1 << 14, 1 << 14);
    CHECK(a != NULL);
    CHECK(a->data == NULL);
    CHECK(tsl_nbytes(a) == (size_t)1 << 30);
    CHECK(tsl_ctx_used(ctx) < 512);
    tsl_tensor *m = tsl_add(ctx, a, a);
    CHECK(m != NULL && m->data == NULL);
    tsl_ctx_free(ctx);
}

static void test_iteration_and_names(void) {
    tsl_context *ctx = new_ctx(1 << 16, false);
    CHECK(tsl_ctx_first_tensor(ctx) == NULL);
    tsl_tensor *t[5];
    for (int i = 0; i < 5; i++) {
        t[i] = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 4 + i);
        tsl_tensor_format_name(t[i], "t%d", i);
    }
    int n = 0;
    for (tsl_tensor *x = tsl_ctx_first_tensor(ctx); x; x = tsl_ctx_next_tensor(ctx, x)) {
        CHECK(n < 5 && x == t[n]);
        n++;
    }
    CHECK(n == 5);
    CHECK(tsl_ctx_get_tensor(ctx, "t3") == t[3]);
    CHECK(tsl_ctx_get_tensor(ctx, "t9") == NULL);
    CHECK(tsl_ctx_get_tensor(ctx, NULL) == NULL);
    /* first made wins */
    tsl_tensor_set_name(t[4], "t1");
    CHECK(tsl_ctx_get_tensor(ctx, "t1") == t[1]);
    CHECK(strcmp(t[4]->name, "t1") == 0);
    /* long names are truncated to TSL_MAX_NAME-1 bytes */
    char longname[200];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    tsl_tensor_set_name(t[0], longname);
    CHECK(strlen(t[0]->name) == TSL_MAX_NAME - 1);
    CHECK(tsl_tensor_set_name(NULL, "a") == NULL);
    CHECK(tsl_tensor_format_name(NULL, "a%d", 1) == NULL);
    /* views and op results are part of the iteration too */
    tsl_tensor *v = tsl_view_1d(ctx, t[2], 2, 4);
    tsl_tensor *last = NULL;
    for (tsl_tensor *x = tsl_ctx_first_tensor(ctx); x; x = tsl_ctx_next_tensor(ctx, x)) last = x;
    CHECK(last == v);
    /* a tensor of another context does not continue this one's list */
    tsl_context *other = new_ctx(4096, false);
    tsl_tensor *o = tsl_new_tensor_1d(other, TSL_TYPE_F32, 1);
    CHECK(tsl_ctx_next_tensor(ctx, o) == NULL);
    tsl_ctx_free(other);
    tsl_ctx_free(ctx);
}

static void test_sizes_and_contiguity(void) {
    tsl_context *ctx = new_ctx(1 << 20, false);
    tsl_tensor *a = tsl_new_tensor_3d(ctx, TSL_TYPE_F32, 8, 6, 4);
    CHECK(tsl_nelements(a) == 192);
    CHECK(tsl_nrows(a) == 24);
    CHECK(tsl_nbytes(a) == 768);
    CHECK(tsl_n_dims(a) == 3);
    CHECK(a->nb[0] == 4 && a->nb[1] == 32 && a->nb[2] == 192 && a->nb[3] == 768);
    CHECK(tsl_is_contiguous(a) && tsl_rows_contiguous(a));

    /* transpose: same bytes spanned, strides swapped, not contiguous */
    tsl_tensor *t = tsl_transpose(ctx, a);
    CHECK(t->ne[0] == 6 && t->ne[1] == 8 && t->ne[2] == 4);
    CHECK(t->nb[0] == 32 && t->nb[1] == 4);
    CHECK(!tsl_is_contiguous(t) && !tsl_rows_contiguous(t));
    CHECK(tsl_nbytes(t) == 768);
    CHECK(t->data == a->data && t->view_src == a && t->view_offs == 0);

    /* permute (ggml semantics: dim i of a goes to axis_i) */
    tsl_tensor *p = tsl_permute(ctx, a, 2, 0, 1, 3);
    CHECK(p->ne[2] == 8 && p->ne[0] == 6 && p->ne[1] == 4 && p->ne[3] == 1);
    CHECK(p->nb[2] == 4 && p->nb[0] == 32 && p->nb[1] == 192);
    CHECK(tsl_nbytes(p) == 768);
    CHECK(!tsl_is_contiguous(p));
    CHECK(p->op == TSL_OP_PERMUTE && p->op_params[0] == 2 && p->op_params[1] == 0 && p->op_params[2] == 1);
    /* permuting back is contiguous again */
    tsl_tensor *pp = tsl_permute(ctx, p, 1, 2, 0, 3);
    CHECK(tsl_same_shape(pp, a) && tsl_is_contiguous(pp));
    CHECK(pp->view_src == a);

    /* a row slice: rows dense but strided, so only rows_contiguous */
    tsl_tensor *s = tsl_view_2d(ctx, a, 4, 6, a->nb[1], 16);
    CHECK(tsl_rows_contiguous(s) && !tsl_is_contiguous(s));
    CHECK(tsl_nbytes(s) == 5 * 32 + 16);
    /* a view that drops to one row is contiguous whatever its outer stride */
    tsl_tensor *r = tsl_view_2d(ctx, a, 8, 1, 12345, 64);
    CHECK(tsl_is_contiguous(r));

    /* quantized: nb[0] is the block size; bytes count whole blocks */
    tsl_tensor *q = tsl_new_tensor_2d(ctx, TSL_TYPE_Q4_0, 64, 3);
    CHECK(q->nb[0] == 18 && q->nb[1] == 36 && tsl_nbytes(q) == 108 && tsl_is_contiguous(q));
    CHECK(tsl_n_dims(q) == 2);
    tsl_tensor *one = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 1);
    CHECK(tsl_n_dims(one) == 1);
    tsl_tensor *e = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 0, 5);
    CHECK(e != NULL && tsl_nelements(e) == 0 && tsl_nbytes(e) == 0);

    /* shape helpers */
    tsl_tensor *b = tsl_new_tensor_3d(ctx, TSL_TYPE_F32, 8, 1, 2);
    CHECK(tsl_can_repeat(b, a));
    CHECK(!tsl_can_repeat(a, b));
    tsl_tensor *c = tsl_new_tensor_3d(ctx, TSL_TYPE_F32, 8, 4, 4);
    CHECK(!tsl_can_repeat(c, a)); /* 6 % 4 != 0 */
    CHECK(!tsl_same_shape(a, b) && tsl_same_shape(a, pp));
    char buf[64];
    CHECK(strcmp(tsl_shape_str(a, buf, sizeof buf), "[8, 6, 4, 1] f32") == 0);
    CHECK(strcmp(tsl_shape_str(q, buf, sizeof buf), "[64, 3, 1, 1] q4_0") == 0);
    tsl_ctx_free(ctx);
}

static void test_view_of_view(void) {
    tsl_context *ctx = new_ctx(1 << 16, false);
    tsl_tensor *a = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 16, 8);
    for (int i = 0; i < 128; i++) tsl_set_f32_1d(a, i, (float)i);
    tsl_tensor *v1 = tsl_view_2d(ctx, a, 16, 4, a->nb[1], 2 * a->nb[1]); /* rows 2..5 */
    CHECK(v1->view_src == a && v1->view_offs == 128);
    CHECK(v1->data == (char *)a->data + 128);
    CHECK(v1->op == TSL_OP_VIEW && v1->src[0] == a);
    tsl_tensor *v2 = tsl_view_1d(ctx, v1, 4, 1 * v1->nb[1] + 3 * sizeof(float)); /* row 3, cols 3..6 */
    CHECK(v2->view_src == a); /* the root, not v1 */
    CHECK(v2->src[0] == v1);
    CHECK(v2->view_offs == 128 + 64 + 12);
    CHECK(tsl_get_f32_1d(v2, 0) == 51.0f && tsl_get_f32_1d(v2, 3) == 54.0f);
    tsl_tensor *v3 = tsl_reshape_2d(ctx, v2, 2, 2);
    CHECK(v3->view_src == a && v3->view_offs == v2->view_offs);
    CHECK(tsl_get_f32_nd(v3, 1, 1, 0, 0) == 54.0f);
    tsl_tensor *v4 = tsl_transpose(ctx, v3);
    CHECK(v4->view_src == a && tsl_get_f32_nd(v4, 1, 0, 0, 0) == 53.0f);
    /* bounds are checked against the root: the last row fits, one byte more does not */
    CHECK(tsl_view_1d(ctx, v1, 16, 5 * a->nb[1]) != NULL);
    CHECK(tsl_ctx_error(ctx) == NULL);
    CHECK(tsl_view_1d(ctx, v1, 16, 5 * a->nb[1] + 4) == NULL);
    CHECK_STR_CONTAINS(tsl_ctx_error(ctx), "view_1d");
    CHECK_STR_CONTAINS(tsl_ctx_error(ctx), "[16, 4, 1, 1] f32");
    tsl_ctx_free(ctx);

    /* a view of a tensor with no data yet has no data either, and follows it */
    ctx = new_ctx(1 << 16, true);
    tsl_tensor *n = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 10);
    tsl_tensor *nv = tsl_view_1d(ctx, n, 5, 20);
    CHECK(nv != NULL && nv->data == NULL && nv->view_src == n && nv->view_offs == 20);
    tsl_ctx_free(ctx);
}

static void test_get_set(void) {
    tsl_context *ctx = new_ctx(1 << 16, false);
    const tsl_type types[4] = {TSL_TYPE_F32, TSL_TYPE_F16, TSL_TYPE_BF16, TSL_TYPE_I32};
    for (int k = 0; k < 4; k++) {
        tsl_tensor *t = tsl_new_tensor_3d(ctx, types[k], 3, 2, 2);
        for (int i = 0; i < 12; i++) tsl_set_f32_1d(t, i, (float)(i - 5));
        for (int i = 0; i < 12; i++) CHECK(tsl_get_f32_1d(t, i) == (float)(i - 5));
        CHECK(tsl_get_f32_nd(t, 2, 1, 1, 0) == 6.0f); /* flat 2 + 3 + 6 = 11 */
        tsl_set_f32_nd(t, 0, 1, 0, 0, 7.0f);
        CHECK(tsl_get_f32_1d(t, 3) == 7.0f);
        CHECK(isnan(tsl_get_f32_1d(t, 12)));
        CHECK(isnan(tsl_get_f32_1d(t, -1)));
        CHECK(isnan(tsl_get_f32_nd(t, 3, 0, 0, 0)));
        tsl_set_f32_1d(t, 12, 1.0f); /* out of range: ignored, no crash */
    }
    /* rounding of the narrow types */
    tsl_tensor *h = tsl_new_tensor_1d(ctx, TSL_TYPE_F16, 2);
    tsl_set_f32_1d(h, 0, 0.1f);
    CHECK(tsl_get_f32_1d(h, 0) == tsl_fp16_to_fp32(tsl_fp32_to_fp16(0.1f)));
    CHECK(tsl_get_f32_1d(h, 0) != 0.1f);
    /* strided access: flat index walks the view's own order */
    tsl_tensor *a = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 3, 2);
    for (int i = 0; i < 6; i++) tsl_set_f32_1d(a, i, (float)i);
    tsl_tensor *tt = tsl_transpose(ctx, a);
    const float expect[6] = {0, 3, 1, 4, 2, 5};
    for (int i = 0; i < 6; i++) CHECK(tsl_get_f32_1d(tt, i) == expect[i]);
    /* quantized and no-data tensors: get gives NaN, set does nothing */
    tsl_tensor *q = tsl_new_tensor_1d(ctx, TSL_TYPE_Q8_0, 32);
    memset(q->data, 0x11, tsl_nbytes(q));
    CHECK(isnan(tsl_get_f32_1d(q, 0)));
    tsl_set_f32_1d(q, 0, 5.0f);
    CHECK(((unsigned char *)q->data)[0] == 0x11 && ((unsigned char *)q->data)[33] == 0x11);
    tsl_context *na = new_ctx(4096, true);
    tsl_tensor *nd = tsl_new_tensor_1d(na, TSL_TYPE_F32, 4);
    CHECK(isnan(tsl_get_f32_1d(nd, 0)));
    tsl_set_f32_1d(nd, 0, 1.0f);
    tsl_ctx_free(na);
    tsl_ctx_free(ctx);
}

static void test_arena_full(void) {
    tsl_context *ctx = new_ctx(4096, false);
    tsl_tensor *a = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 256);
    CHECK(a != NULL);
    size_t used = tsl_ctx_used(ctx);
    tsl_tensor *b = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 1024);
    CHECK(b == NULL);
    const char *err = tsl_ctx_error(ctx);
    CHECK_STR_CONTAINS(err, "arena full: need ");
    char expect[160];
    snprintf(expect, sizeof expect, " bytes, %zu of 4096 used; create the context with a larger mem_size", used);
    CHECK_STR_CONTAINS(err, expect);
    size_t need = 0;
    CHECK(err && sscanf(err, "arena full: need %zu", &need) == 1 && need >= 4096);
    CHECK(tsl_ctx_used(ctx) == used); /* nothing was taken by the failure */
    /* the list is intact: only a */
    CHECK(tsl_ctx_first_tensor(ctx) == a && tsl_ctx_next_tensor(ctx, a) == NULL);
    /* an op whose result does not fit names the op */
    tsl_ctx_clear_error(ctx);
    CHECK(tsl_ctx_error(ctx) == NULL);
    tsl_tensor *big = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 500);
    CHECK(big != NULL);
    CHECK(tsl_add(ctx, big, big) == NULL);
    CHECK_STR_CONTAINS(tsl_ctx_error(ctx), "add: arena full");
    /* a raw allocation larger than the arena */
    tsl_ctx_clear_error(ctx);
    CHECK(ctx_arena_alloc(ctx, SIZE_MAX - 8, 64) == NULL);
    CHECK_STR_CONTAINS(tsl_ctx_error(ctx), "arena full");
    tsl_ctx_free(ctx);
}

static void test_bad_shapes(void) {
    tsl_context *ctx = new_ctx(1 << 16, true);
    /* byte size overflow */
    CHECK(tsl_new_tensor_4d(ctx, TSL_TYPE_F32, INT64_C(1) << 20, INT64_C(1) << 20, INT64_C(1) << 20, 1 << 10) == NULL);
    CHECK_STR_CONTAINS(tsl_ctx_error(ctx), "overflow");
    CHECK_STR_CONTAINS(tsl_ctx_error(ctx), "[1048576, 1048576, 1048576, 1024] f32");
    tsl_ctx_clear_error(ctx);
    CHECK(tsl_new_tensor_1d(ctx, TSL_TYPE_F32, INT64_MAX) == NULL);
    CHECK_STR_CONTAINS(tsl_ctx_error(ctx), "overflow");
    tsl_ctx_clear_error(ctx);
    /* no overflow just below the limit of what a no_alloc context can describe */
    CHECK(tsl_new_tensor_2d(ctx, TSL_TYPE_F32, INT64_C(1) << 30, INT64_C(1) << 20) != NULL);
    CHECK(tsl_ctx_error(ctx) == NULL);
    /* invalid type, dims, negative extent, partial block */
    CHECK(tsl_new_tensor_1d(ctx, (tsl_type)3, 4) == NULL);
    CHECK_STR_CONTAINS(tsl_ctx_error(ctx), "type 3");
    tsl_ctx_clear_error(ctx);
    int64_t ne[5] = {1, 1, 1, 1, 1};
    CHECK(tsl_new_tensor(ctx, TSL_TYPE_F32, 5, ne) == NULL);
    CHECK_STR_CONTAINS(tsl_ctx_error(ctx), "n_dims 5");
    tsl_ctx_clear_error(ctx);
    CHECK(tsl_new_tensor(ctx, TSL_TYPE_F32, 0, ne) == NULL);
    CHECK_STR_CONTAINS(tsl_ctx_error(ctx), "n_dims 0");
    tsl_ctx_clear_error(ctx);
    CHECK(tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 4, -1) == NULL);
    CHECK_STR_CONTAINS(tsl_ctx_error(ctx), "ne[1] is -1");
    tsl_ctx_clear_error(ctx);
    CHECK(tsl_new_tensor_1d(ctx, TSL_TYPE_Q8_0, 48) == NULL);
    CHECK_STR_CONTAINS(tsl_ctx_error(ctx), "block length 32");
    tsl_ctx_clear_error(ctx);
    /* first error wins */
    CHECK(tsl_new_tensor_1d(ctx, TSL_TYPE_Q4_0, 7) == NULL);
    CHECK(tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 4, -3) == NULL);
    CHECK_STR_CONTAINS(tsl_ctx_error(ctx), "ne[0] 7");
    CHECK(tsl_ctx_fail(ctx, "later %d", 1) == NULL);
    CHECK(strstr(tsl_ctx_error(ctx), "later") == NULL);
    /* NULL context: NULL, no crash */
    CHECK(tsl_new_tensor_1d(NULL, TSL_TYPE_F32, 4) == NULL);
    CHECK(tsl_ctx_fail(NULL, "x") == NULL);
    CHECK(tsl_ctx_error(NULL) == NULL);
    tsl_ctx_free(ctx);
}

static void test_dup_tensor(void) {
    tsl_context *ctx = new_ctx(1 << 16, false);
    tsl_tensor *a = tsl_new_tensor_3d(ctx, TSL_TYPE_BF16, 5, 4, 3);
    tsl_tensor *t = tsl_transpose(ctx, a);
    tsl_tensor *d = tsl_dup_tensor(ctx, t);
    CHECK(d != NULL && d->type == TSL_TYPE_BF16 && tsl_same_shape(d, t));
    CHECK(tsl_is_contiguous(d) && d->view_src == NULL && d->op == TSL_OP_NONE && d->data != a->data);
    CHECK(d->data != NULL);
    CHECK(tsl_dup_tensor(ctx, NULL) == NULL);
    CHECK(tsl_ctx_error(ctx) == NULL);
    tsl_ctx_free(ctx);
}

static int log_count;
static char log_last[256];
static tsl_log_level log_last_level;
static void log_capture(tsl_log_level level, const char *line, void *user) {
    (void)user;
    log_count++;
    log_last_level = level;
    snprintf(log_last, sizeof log_last, "%s", line);
}

static void test_log(void) {
    int user = 0;
    tsl_log_set(log_capture, &user);
    tsl_log(TSL_LOG_WARN, "hello %d", 42);
    CHECK(log_count == 1 && strcmp(log_last, "hello 42") == 0 && log_last_level == TSL_LOG_WARN);
    TSL_LOGE("bad %s", "thing");
    CHECK(log_count == 2 && strcmp(log_last, "bad thing") == 0 && log_last_level == TSL_LOG_ERROR);
    /* a context error is also reported to the logger (debug level) */
    tsl_context *ctx = new_ctx(1024, true);
    tsl_new_tensor_1d(ctx, TSL_TYPE_Q8_0, 3);
    CHECK(log_count == 3 && log_last_level == TSL_LOG_DEBUG);
    CHECK_STR_CONTAINS(log_last, "new_tensor");
    tsl_ctx_free(ctx);
    tsl_log_set(NULL, NULL);
    tsl_log(TSL_LOG_DEBUG, "not captured");
    CHECK(log_count == 3);
}

/* The default sink: stderr, "tensile: " prefix, threshold from TSL_LOG
 * (main sets it to info before the first log call). */
static void test_log_default(void) {
    FILE *tmp = tmpfile();
    CHECK(tmp != NULL);
    if (!tmp) return;
    fflush(stderr);
    int saved = dup(fileno(stderr));
    dup2(fileno(tmp), fileno(stderr));
    tsl_log(TSL_LOG_INFO, "visible %d", 1);
    tsl_log(TSL_LOG_DEBUG, "hidden %d", 2);
    tsl_log(TSL_LOG_ERROR, "also visible");
    fflush(stderr);
    dup2(saved, fileno(stderr));
    close(saved);
    char buf[256] = {0};
    rewind(tmp);
    size_t n = fread(buf, 1, sizeof buf - 1, tmp);
    buf[n] = '\0';
    fclose(tmp);
    CHECK(strcmp(buf, "tensile: visible 1\ntensile: also visible\n") == 0);
}

int main(void) {
    /* before any log call: the threshold is read once, on first use */
    setenv("TSL_LOG", "info", 1);
    RUN(test_log_default);
    RUN(test_arena_accounting);
    RUN(test_no_alloc);
    RUN(test_iteration_and_names);
    RUN(test_sizes_and_contiguity);
    RUN(test_view_of_view);
    RUN(test_get_set);
    RUN(test_arena_full);
    RUN(test_bad_shapes);
    RUN(test_dup_tensor);
    RUN(test_log);
    return test_summary();
}
