/*
 * test_backend.c - the backend API on the CPU backend: buffers, placement,
 * tensor copies, the resolve pass (a missing input fails the compute before
 * anything runs), the abort callback, kernel data errors (get_rows out of
 * range), records and their formatted line, thread counts, and the
 * scheduling cost per node. Per-op numerics are checked in test_ops_*.c;
 * here a few values are checked by hand for sanity.
 */
#include <stdint.h>
#include <time.h>

#include "tensile/backend.h"
#include "test.h"

static tsl_context *new_ctx(size_t mb, bool no_alloc) {
    tsl_ctx_params p = {.mem_size = mb << 20, .no_alloc = no_alloc};
    tsl_context *ctx = tsl_ctx_new(p);
    CHECK(ctx != NULL);
    return ctx;
}

static void fill(tsl_tensor *t, unsigned long long seed, float lo, float hi) {
    for (int64_t i = 0; i < tsl_nelements(t); i++) tsl_set_f32_1d(t, i, test_rand_f(&seed, lo, hi));
}

static void fill_const(tsl_tensor *t, float v) {
    for (int64_t i = 0; i < tsl_nelements(t); i++) tsl_set_f32_1d(t, i, v);
}

/* ---- 1 and 3 threads give identical bytes ----------------------------------- */

/* A graph touching most kernels, including strided views and broadcasts.
 * sc scales it: at 1 every node is small (run by thread 0 alone); at 4 the
 * big ones are split across threads and the small ones between them still
 * run alone, so both schedules and their transitions are covered. */
#define MIX_HD 64
static void build_mix(tsl_context *ctx, int sc, tsl_tensor **outs, int *n_out) {
    const int nh = 6 * sc, nt = 5 * sc, nrow = 10 * sc, nid = 7 * sc, nout = 33 * sc;
    tsl_tensor *x = tsl_new_tensor_3d(ctx, TSL_TYPE_F32, MIX_HD, nh, nt); /* [head_dim, heads, tokens] */
    tsl_tensor *w = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, MIX_HD);        /* norm weight */
    tsl_tensor *pos = tsl_new_tensor_1d(ctx, TSL_TYPE_I32, nt);
    tsl_tensor *mask = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, nt, nt);
    tsl_tensor *table = tsl_new_tensor_2d(ctx, TSL_TYPE_F16, MIX_HD, nrow);
    tsl_tensor *ids = tsl_new_tensor_1d(ctx, TSL_TYPE_I32, nid);
    tsl_tensor *wm = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, MIX_HD, nout);
    fill(x, 1, -2, 2);
    fill(w, 2, 0.5f, 1.5f);
    fill(table, 3, -1, 1);
    fill(wm, 4, -0.2f, 0.2f);
    for (int i = 0; i < nt; i++) tsl_set_f32_1d(pos, i, (float)(i * 7 + 3));
    for (int i = 0; i < nt; i++)
        for (int j = 0; j < nt; j++) tsl_set_f32_nd(mask, j, i, 0, 0, j <= i ? 0.0f : -INFINITY);
    for (int i = 0; i < nid; i++) tsl_set_f32_1d(ids, i, (float)((i * 7 + 3) % nrow));

    tsl_tensor *n = tsl_mul(ctx, tsl_rms_norm(ctx, x, 1e-5f), w);
    tsl_rope_params rp = tsl_rope_default(MIX_HD);
    rp.mode = TSL_ROPE_NEOX;
    tsl_tensor *r = tsl_rope(ctx, n, pos, NULL, &rp);
    /* scores over tokens per head: [tokens, tokens, heads] */
    tsl_tensor *q = tsl_cont(ctx, tsl_permute(ctx, r, 0, 2, 1, 3)); /* [64, nt, nh] */
    tsl_tensor *kq = tsl_mul_mat(ctx, q, q);
    tsl_tensor *sm = tsl_soft_max(ctx, kq, mask, 0.125f);
    tsl_tensor *g = tsl_get_rows(ctx, table, ids);                /* [64, nid] f32 */
    tsl_tensor *h = tsl_mul_mat(ctx, wm, g);                       /* [nout, nid] */
    tsl_tensor *act = tsl_swiglu(ctx, tsl_gelu(ctx, h), tsl_silu(ctx, h));
    tsl_tensor *s = tsl_sum_rows(ctx, tsl_sqr(ctx, act));
    tsl_tensor *nrm = tsl_norm(ctx, tsl_transpose(ctx, act), 1e-5f); /* strided input */
    tsl_tensor *cc = tsl_concat(ctx, sm, sm, 1);
    tsl_tensor *f16 = tsl_dup(ctx, nrm, TSL_TYPE_F16);
    outs[0] = cc;
    outs[1] = s;
    outs[2] = f16;
    outs[3] = tsl_mean(ctx, tsl_scale(ctx, tsl_sub(ctx, act, tsl_div(ctx, act, s)), 3.0f));
    *n_out = 4;
}

static void test_threads_identical(void) {
    tsl_backend *be1 = tsl_backend_cpu_new(1, NULL), *be3 = tsl_backend_cpu_new(3, NULL);
    CHECK(be1 && be3);
    CHECK(tsl_backend_cpu_threads(be1) == 1 && tsl_backend_cpu_threads(be3) == 3);
    for (int sc = 1; sc <= 4; sc += 3) {
        const int nt = 5 * sc;
        tsl_context *ctx = new_ctx(16, false);
        tsl_tensor *outs[4];
        int n = 0;
        build_mix(ctx, sc, outs, &n);
        CHECKF(tsl_ctx_error(ctx) == NULL, "%s", tsl_ctx_error(ctx));
        tsl_graph *g = tsl_graph_build(ctx, outs, n);
        CHECK(g != NULL);
        if (!g || !be1 || !be3) return;

        tsl_error err;
        CHECK(tsl_backend_graph_compute(be1, g, &err) == TSL_SUCCESS);
        void *saved[4];
        for (int i = 0; i < n; i++) {
            saved[i] = malloc(tsl_nbytes(outs[i]));
            memcpy(saved[i], outs[i]->data, tsl_nbytes(outs[i]));
            memset(outs[i]->data, 0xff, tsl_nbytes(outs[i]));
        }
        tsl_status s = tsl_backend_graph_compute(be3, g, &err);
        CHECK(s == TSL_SUCCESS);
        for (int i = 0; i < n; i++) {
            CHECKF(memcmp(saved[i], outs[i]->data, tsl_nbytes(outs[i])) == 0,
                   "output %d differs (1 vs 3 threads, scale %d)", i, sc);
            free(saved[i]);
        }
        /* sanity: each row of the causal softmax sums to 1, masked entries are 0 */
        const tsl_tensor *cc = outs[0];
        for (int64_t h = 0; h < cc->ne[2]; h += 5)
            for (int64_t r = 0; r < 2 * nt; r++) {
                double sum = 0;
                for (int64_t j = 0; j < nt; j++) sum += tsl_get_f32_nd(cc, j, r, h, 0);
                CHECK_NEAR(sum, 1.0, 1e-5);
                for (int64_t j = r % nt + 1; j < nt; j++) CHECK(tsl_get_f32_nd(cc, j, r, h, 0) == 0.0f);
            }
        /* first row attends only to itself */
        CHECK_NEAR(tsl_get_f32_nd(cc, 0, 0, 0, 0), 1.0, 1e-6);
        tsl_ctx_free(ctx);
    }
    tsl_backend_free(be1);
    tsl_backend_free(be3);
}

/* Hand-checked values of a few ops. */
static void test_sanity_values(void) {
    tsl_backend *be = tsl_backend_cpu_new(2, NULL);
    tsl_context *ctx = new_ctx(1, false);
    tsl_tensor *a = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 3, 2);
    tsl_tensor *b = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 3);
    float av[6] = {1, 2, 3, 4, 5, 6}, bv[3] = {10, 20, 30};
    for (int i = 0; i < 6; i++) tsl_set_f32_1d(a, i, av[i]);
    for (int i = 0; i < 3; i++) tsl_set_f32_1d(b, i, bv[i]);
    tsl_tensor *add = tsl_add(ctx, a, b);          /* broadcast over rows */
    tsl_tensor *sum = tsl_sum(ctx, a);             /* 21 */
    tsl_tensor *am = tsl_argmax(ctx, a);           /* [2, 2] */
    tsl_tensor *rms = tsl_rms_norm(ctx, a, 1e-6f); /* row 0: x / sqrt(14/3) */
    tsl_tensor *sm = tsl_soft_max(ctx, a, NULL, 1.0f);
    tsl_tensor *outs[5] = {add, sum, am, rms, sm};
    tsl_graph *g = tsl_graph_build(ctx, outs, 5);
    CHECK(g && be);
    if (!g || !be) return;
    CHECK(tsl_backend_graph_compute(be, g, NULL) == TSL_SUCCESS);
    CHECK(tsl_get_f32_nd(add, 0, 1, 0, 0) == 14.0f);
    CHECK(tsl_get_f32_nd(add, 2, 0, 0, 0) == 33.0f);
    CHECK(tsl_get_f32_1d(sum, 0) == 21.0f);
    CHECK(((int32_t *)am->data)[0] == 2 && ((int32_t *)am->data)[1] == 2);
    CHECK_NEAR(tsl_get_f32_nd(rms, 1, 0, 0, 0), 2.0 / sqrt(14.0 / 3.0), 1e-6);
    double e = exp(1.0) + exp(2.0) + exp(3.0);
    CHECK_NEAR(tsl_get_f32_nd(sm, 2, 1, 0, 0), exp(3.0) / e, 1e-6);
    tsl_ctx_free(ctx);
    tsl_backend_free(be);
}

/* ---- the resolve pass --------------------------------------------------------- */

static void test_missing_data_fails_before_running(void) {
    tsl_backend *be = tsl_backend_cpu_new(2, NULL);
    tsl_context *cd = new_ctx(1, false), *cn = new_ctx(1, true);
    tsl_tensor *x = tsl_new_tensor_1d(cd, TSL_TYPE_F32, 16);
    tsl_tensor *z = tsl_tensor_set_name(tsl_new_tensor_1d(cn, TSL_TYPE_F32, 16), "z_missing");
    fill_const(x, 1.0f);
    tsl_tensor *t1 = tsl_tensor_set_name(tsl_scale(cd, x, 2.0f), "t1");
    tsl_tensor *out = tsl_tensor_set_name(tsl_add(cd, t1, z), "out");
    fill_const(t1, -7.0f);
    fill_const(out, -9.0f);
    tsl_graph *g = tsl_graph_build(cd, &out, 1);
    CHECK(g && be);
    if (!g || !be) return;
    CHECK(g->n_nodes == 2);
    CHECK(!tsl_backend_supports_op(be, NULL));
    CHECK(tsl_backend_supports_op(be, out)); /* the op is supported; the data is what is missing */

    tsl_error err;
    tsl_status s = tsl_backend_graph_compute(be, g, &err);
    CHECK(s == TSL_FAILED);
    CHECK(err.status == TSL_FAILED);
    CHECK(err.node == 1);
    CHECK(strcmp(err.op, "ADD") == 0);
    CHECK(strcmp(err.tensor, "z_missing") == 0);
    CHECK(strcmp(err.backend, "cpu") == 0);
    CHECK_STR_CONTAINS(err.message, "no data");
    CHECK_STR_CONTAINS(err.message, "out");
    /* nothing ran: not even node 0, which had everything it needed */
    CHECK(tsl_get_f32_1d(t1, 3) == -7.0f);
    CHECK(tsl_get_f32_1d(out, 3) == -9.0f);
    char line[512];
    tsl_error_format(&err, line, sizeof line);
    CHECK_STR_CONTAINS(line, "cpu");
    CHECK_STR_CONTAINS(line, "FAILED");
    CHECK_STR_CONTAINS(line, "node 1");
    CHECK_STR_CONTAINS(line, "ADD");
    CHECK_STR_CONTAINS(line, "z_missing");

    /* the same failure through async + synchronize; then nothing is latched */
    s = tsl_backend_graph_compute_async(be, g, &err);
    CHECK(s == TSL_FAILED);
    tsl_error err2;
    CHECK(tsl_backend_synchronize(be, &err2) == TSL_FAILED);
    CHECK(err2.node == 1 && strcmp(err2.tensor, "z_missing") == 0);
    CHECK(tsl_backend_synchronize(be, &err2) == TSL_SUCCESS);

    /* give z data: the same graph now runs */
    tsl_buffer *buf = tsl_buffer_alloc(be, tsl_nbytes(z), &err);
    CHECK(buf != NULL);
    CHECK(tsl_buffer_place(buf, z, 0, &err) == TSL_SUCCESS);
    float ones[16];
    for (int i = 0; i < 16; i++) ones[i] = 0.5f;
    CHECK(tsl_tensor_set(z, ones, 0, sizeof ones, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_SUCCESS);
    CHECK(tsl_get_f32_1d(out, 5) == 2.5f);
    tsl_buffer_free(buf);
    tsl_ctx_free(cn);
    tsl_ctx_free(cd);
    tsl_backend_free(be);
}

/* A node no kernel serves fails in the resolve pass with the kernel named. */
static void test_no_kernel(void) {
    tsl_backend *be = tsl_backend_cpu_new(1, NULL);
    tsl_context *ctx = new_ctx(1, false);
    tsl_tensor *x = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 8);
    tsl_tensor *y = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 8);
    tsl_tensor *ok = tsl_scale(ctx, x, 2.0f);
    tsl_tensor *bad = tsl_tensor_set_name(tsl_add(ctx, ok, y), "bad_add");
    fill_const(x, 1.0f);
    fill_const(ok, 0.0f);
    bad->src[1] = tsl_new_tensor_1d(ctx, TSL_TYPE_I32, 8); /* no ADD kernel for I32 operands */
    tsl_graph *g = tsl_graph_build(ctx, &bad, 1);
    CHECK(g && be);
    if (!g || !be) return;
    CHECK(!tsl_backend_supports_op(be, bad));
    CHECK(tsl_backend_supports_op(be, ok));
    tsl_error err;
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_FAILED);
    CHECK(err.node == 1);
    CHECK(strcmp(err.op, "ADD") == 0);
    CHECK(strcmp(err.tensor, "bad_add") == 0);
    CHECK(strcmp(err.kernel, "cpu_add_f32_i32") == 0);
    CHECK_STR_CONTAINS(err.driver_text, "i32");
    CHECK(tsl_get_f32_1d(ok, 0) == 0.0f); /* nothing ran */
    tsl_ctx_free(ctx);
    tsl_backend_free(be);
}

/* ---- abort ---------------------------------------------------------------------- */

typedef struct {
    int calls, stop_after;
} abort_state;

static bool abort_after(void *user) {
    abort_state *a = user;
    return ++a->calls >= a->stop_after;
}

/* ne: 1000 makes every node small (thread 0 runs them alone, polling the
 * callback between them); 20000 splits every node across the threads. */
static void abort_case(int64_t ne) {
    tsl_backend *be = tsl_backend_cpu_new(3, NULL);
    tsl_context *ctx = new_ctx(2, false);
    tsl_tensor *x = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, ne);
    tsl_tensor *one = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 1);
    fill_const(x, 0.0f);
    fill_const(one, 1.0f);
    tsl_tensor *chain[10], *y = x;
    for (int i = 0; i < 10; i++) chain[i] = y = tsl_add(ctx, y, one);
    for (int i = 0; i < 10; i++) fill_const(chain[i], -1.0f);
    tsl_graph *g = tsl_graph_build(ctx, &y, 1);
    CHECK(g && be && g->n_nodes == 10);
    if (!g || !be) return;

    abort_state st = {0, 4};
    tsl_backend_set_abort_callback(be, abort_after, &st);
    tsl_error err;
    tsl_status s = tsl_backend_graph_compute(be, g, &err);
    CHECK(s == TSL_ABORTED);
    CHECK(err.status == TSL_ABORTED);
    CHECK(err.node == 4); /* 4 nodes ran, node 4 is where it stopped */
    CHECK(strcmp(err.op, "ADD") == 0);
    CHECK(st.calls == 4);
    for (int i = 0; i < 10; i++)
        for (int64_t k = 0; k < ne; k += ne / 3 - 1)
            CHECK(tsl_get_f32_1d(chain[i], k) == (i < 4 ? (float)(i + 1) : -1.0f));
    char line[512];
    tsl_error_format(&err, line, sizeof line);
    CHECK_STR_CONTAINS(line, "ABORTED");
    CHECK_STR_CONTAINS(line, "node 4");

    /* the callback is polled between nodes only: stop_after = 10 never fires */
    st.calls = 0;
    st.stop_after = 10;
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_SUCCESS);
    CHECK(st.calls == 9);
    CHECK(tsl_get_f32_1d(y, ne - 1) == 10.0f);

    /* the next compute after an abort starts clean */
    st.calls = 0;
    st.stop_after = 1;
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_ABORTED);
    CHECK(err.node == 1);
    tsl_backend_set_abort_callback(be, NULL, NULL);
    for (int i = 0; i < 10; i++) fill_const(chain[i], -1.0f);
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_SUCCESS);
    CHECK(tsl_get_f32_1d(y, 0) == 10.0f);
    CHECK(tsl_get_f32_1d(chain[6], ne / 2) == 7.0f);
    tsl_ctx_free(ctx);
    tsl_backend_free(be);
}

static void test_abort(void) {
    abort_case(1000);
    abort_case(20000);
}

/* ---- kernel data errors ------------------------------------------------------ */

/* Rows of 4 make small nodes (run by thread 0 alone), rows of 4096 big ones
 * (split across threads): the failure must stop the compute either way. */
static void test_get_rows_out_of_range(void) {
    for (int c = 0; c < 4; c++) {
        int nth = c % 2 ? 3 : 1;
        int64_t ne0 = c < 2 ? 4 : 4096;
        tsl_backend *be = tsl_backend_cpu_new(nth, NULL);
        tsl_context *ctx = new_ctx(2, false);
        tsl_tensor *tab = tsl_tensor_set_name(tsl_new_tensor_2d(ctx, TSL_TYPE_F32, ne0, 3), "emb");
        tsl_tensor *idx = tsl_tensor_set_name(tsl_new_tensor_1d(ctx, TSL_TYPE_I32, 4), "tokens");
        fill(tab, 9, -1, 1);
        int iv[4] = {1, 2, 7, 0};
        for (int i = 0; i < 4; i++) tsl_set_f32_1d(idx, i, (float)iv[i]);
        tsl_tensor *pre = tsl_scale(ctx, tab, 1.0f);
        tsl_tensor *r = tsl_tensor_set_name(tsl_get_rows(ctx, pre, idx), "rows");
        tsl_tensor *post = tsl_scale(ctx, r, 2.0f);
        fill_const(post, -3.0f);
        tsl_graph *g = tsl_graph_build(ctx, &post, 1);
        CHECK(g && be);
        if (!g || !be) return;
        tsl_error err;
        CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_FAILED);
        CHECK(err.node == 1);
        CHECK(strcmp(err.op, "GET_ROWS") == 0);
        CHECK(strcmp(err.tensor, "rows") == 0);
        CHECK_STR_CONTAINS(err.message, "index 7");
        CHECK_STR_CONTAINS(err.message, "3 rows");
        CHECK(tsl_get_f32_1d(post, 0) == -3.0f); /* the nodes after it did not run */
        char line[512];
        tsl_error_format(&err, line, sizeof line);
        CHECK_STR_CONTAINS(line, "cpu");
        CHECK_STR_CONTAINS(line, "FAILED");
        CHECK_STR_CONTAINS(line, "node 1");
        CHECK_STR_CONTAINS(line, "GET_ROWS");
        CHECK_STR_CONTAINS(line, "'rows'");
        CHECK_STR_CONTAINS(line, "index 7");

        /* negative indices too; and a fixed index then computes */
        tsl_set_f32_1d(idx, 2, -1.0f);
        CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_FAILED);
        CHECK_STR_CONTAINS(err.message, "index -1");
        tsl_set_f32_1d(idx, 2, 2.0f);
        CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_SUCCESS);
        CHECK(tsl_get_f32_nd(post, 3, 2, 0, 0) == 2.0f * tsl_get_f32_nd(tab, 3, 2, 0, 0));
        tsl_ctx_free(ctx);
        tsl_backend_free(be);
    }
}

/* ---- buffers and tensor copies --------------------------------------------------- */

static void test_buffers(void) {
    tsl_error err;
    tsl_backend *be = tsl_backend_cpu_new(1, &err);
    CHECK(be != NULL);
    if (!be) return;
    CHECK(strcmp(tsl_backend_name(be), "cpu") == 0);
    CHECK_STR_CONTAINS(tsl_backend_device(be), "1 thread");
    CHECK_STR_CONTAINS(tsl_backend_device(be), tsl_cpu_simd_name());

    tsl_buffer *buf = tsl_buffer_alloc(be, 1000, &err);
    CHECK(buf != NULL);
    if (!buf) return;
    CHECK(tsl_buffer_size(buf) == 1000);
    CHECK(tsl_buffer_alignment(buf) == 64);
    char *base = tsl_buffer_host_ptr(buf);
    CHECK(base != NULL && (uintptr_t)base % 64 == 0);

    tsl_context *ctx = new_ctx(1, true);
    tsl_tensor *a = tsl_tensor_set_name(tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 100), "a"); /* 400 bytes */
    tsl_tensor *b = tsl_tensor_set_name(tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 100), "b");
    tsl_tensor *big = tsl_tensor_set_name(tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 300), "big");
    tsl_tensor *va = tsl_view_1d(ctx, a, 10, 40); /* made before a has data */
    CHECK(va && va->data == NULL);

    CHECK(tsl_buffer_place(buf, a, 4, &err) == TSL_FAILED); /* misaligned */
    CHECK_STR_CONTAINS(err.message, "alignment");
    CHECK(a->data == NULL);
    CHECK(tsl_buffer_place(buf, big, 0, &err) == TSL_FAILED); /* 1200 bytes do not fit in 1000 */
    CHECK_STR_CONTAINS(err.message, "does not fit");
    CHECK(strcmp(err.tensor, "big") == 0);
    CHECK(tsl_buffer_place(buf, b, 640, &err) == TSL_FAILED); /* 400 bytes at 640 do not either */
    CHECK(big->data == NULL && b->data == NULL);
    CHECK(tsl_buffer_place(buf, va, 0, &err) == TSL_FAILED); /* views follow their source */
    CHECK(tsl_buffer_place(NULL, a, 0, &err) == TSL_FAILED);
    CHECK(tsl_buffer_place(buf, NULL, 0, &err) == TSL_FAILED);
    tsl_buffer_free(buf);

    buf = tsl_buffer_alloc(be, 1000, &err);
    CHECK(tsl_buffer_place(buf, a, 0, &err) == TSL_SUCCESS);
    CHECK(a->data == tsl_buffer_host_ptr(buf) && a->buffer == buf);
    CHECK(tsl_buffer_place(buf, b, 448, &err) == TSL_SUCCESS);
    CHECK(tsl_buffer_place(buf, b, 448, &err) == TSL_FAILED); /* already has data */
    CHECK_STR_CONTAINS(err.message, "already");

    /* copies in and out, through the view too (its address resolves lazily) */
    float v[100], back[100];
    for (int i = 0; i < 100; i++) v[i] = (float)i;
    CHECK(tsl_tensor_set(a, v, 0, sizeof v, &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_get(va, back, 0, 10 * sizeof(float), &err) == TSL_SUCCESS);
    CHECK(back[0] == 10.0f && back[9] == 19.0f);
    CHECK(tsl_tensor_set(va, v, 8, 4, &err) == TSL_SUCCESS); /* element 2 of the view = a[12] */
    CHECK(tsl_tensor_get(a, back, 0, sizeof back, &err) == TSL_SUCCESS);
    CHECK(back[12] == 0.0f && back[11] == 11.0f);

    /* out of range, no data, NULL: records, never a crash */
    CHECK(tsl_tensor_set(a, v, 4, sizeof v, &err) == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "outside");
    CHECK(strcmp(err.tensor, "a") == 0);
    CHECK(tsl_tensor_get(a, back, 401, 0, &err) == TSL_FAILED);
    CHECK(tsl_tensor_get(a, back, SIZE_MAX - 2, 8, &err) == TSL_FAILED);
    CHECK(tsl_tensor_get(va, back, 0, 44, &err) == TSL_FAILED);
    CHECK(tsl_tensor_get(big, back, 0, 4, &err) == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "has no data");
    CHECK_STR_CONTAINS(err.message, "big");
    CHECK(tsl_tensor_set(big, v, 0, 4, &err) == TSL_FAILED);
    CHECK(tsl_tensor_set(NULL, v, 0, 4, &err) == TSL_FAILED);
    CHECK(tsl_tensor_get(a, NULL, 0, 4, &err) == TSL_FAILED);
    CHECK(tsl_tensor_get(a, back, 0, 0, &err) == TSL_SUCCESS);
    /* records are optional */
    CHECK(tsl_tensor_get(big, back, 0, 4, NULL) == TSL_FAILED);

    /* arena tensors (no buffer) copy with memcpy */
    tsl_context *cd = new_ctx(1, false);
    tsl_tensor *h = tsl_new_tensor_1d(cd, TSL_TYPE_F32, 4);
    CHECK(tsl_tensor_set(h, v + 1, 0, 16, &err) == TSL_SUCCESS);
    CHECK(tsl_get_f32_1d(h, 3) == 4.0f);
    tsl_ctx_free(cd);

    tsl_buffer_free(buf);
    tsl_ctx_free(ctx);

    /* alloc_ctx: every tensor without data, packed and aligned; views resolved */
    ctx = new_ctx(1, true);
    tsl_tensor *t[5];
    for (int i = 0; i < 5; i++) t[i] = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 10 + 17 * i);
    tsl_tensor *view = tsl_view_1d(ctx, t[3], 5, 8);
    buf = tsl_buffer_alloc_ctx(be, ctx, &err);
    CHECK(buf != NULL);
    if (buf) {
        char *base2 = tsl_buffer_host_ptr(buf);
        for (int i = 0; i < 5; i++) {
            CHECK(t[i]->data != NULL && t[i]->buffer == buf);
            CHECK((uintptr_t)t[i]->data % 64 == 0);
            CHECK((char *)t[i]->data + tsl_nbytes(t[i]) <= base2 + tsl_buffer_size(buf));
            if (i) CHECK((char *)t[i - 1]->data + tsl_nbytes(t[i - 1]) <= (char *)t[i]->data);
        }
        CHECK(view->data == (char *)t[3]->data + 8);
        tsl_set_f32_1d(t[3], 2, 42.0f);
        CHECK(tsl_get_f32_1d(view, 0) == 42.0f);
        tsl_buffer_set_persistent(buf, true);
        tsl_buffer_free(buf);
    }
    tsl_ctx_free(ctx);

    /* allocation failure is a record, not a crash */
    tsl_buffer *huge = tsl_buffer_alloc(be, SIZE_MAX - 100, &err);
    CHECK(huge == NULL);
    CHECK(err.status == TSL_ALLOC_FAILED);
    CHECK_STR_CONTAINS(err.backend, "cpu");
    /* more than any machine has (1 PiB): refused up front, not left to overcommit */
    CHECK(tsl_buffer_alloc(be, (size_t)1 << 50, &err) == NULL);
    CHECK(err.status == TSL_ALLOC_FAILED);
    CHECK_STR_CONTAINS(err.message, "bytes");

    /* NULL arguments */
    CHECK(tsl_buffer_alloc(NULL, 10, &err) == NULL && err.status == TSL_FAILED);
    CHECK(tsl_buffer_alloc_ctx(be, NULL, &err) == NULL && err.status == TSL_FAILED);
    CHECK(tsl_backend_graph_compute(be, NULL, &err) == TSL_FAILED);
    CHECK(tsl_backend_graph_compute(NULL, NULL, &err) == TSL_FAILED);
    CHECK(tsl_buffer_size(NULL) == 0 && tsl_buffer_host_ptr(NULL) == NULL);
    tsl_buffer_free(NULL);
    tsl_backend_free(NULL);
    tsl_backend_free(be);
}

/* A graph whose views were made before their source had data computes once
 * the source is placed: the compute resolves view addresses itself. */
static void test_lazy_views(void) {
    tsl_backend *be = tsl_backend_cpu_new(2, NULL);
    tsl_context *ctx = new_ctx(1, true);
    tsl_tensor *x = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 8, 4);
    tsl_tensor *xt = tsl_transpose(ctx, x);            /* view, no data yet */
    tsl_tensor *y = tsl_cont(ctx, xt);                 /* [4, 8] */
    tsl_tensor *kv = tsl_new_tensor_2d(ctx, TSL_TYPE_F16, 8, 6);
    tsl_tensor *slot = tsl_view_2d(ctx, kv, 8, 4, kv->nb[1], kv->nb[1] * 2);
    tsl_tensor *c = tsl_cpy(ctx, x, slot);             /* rows 2..5 of kv */
    tsl_tensor *outs[2] = {y, c};
    tsl_graph *g = tsl_graph_build(ctx, outs, 2);
    tsl_error err;
    tsl_buffer *buf = tsl_buffer_alloc(be, 4096, &err);
    CHECK(g && be && buf);
    if (!g || !be || !buf) return;
    CHECK(tsl_buffer_place(buf, x, 0, &err) == TSL_SUCCESS);
    CHECK(tsl_buffer_place(buf, kv, 256, &err) == TSL_SUCCESS);
    CHECK(tsl_buffer_place(buf, y, 512, &err) == TSL_SUCCESS);
    float xv[32];
    for (int i = 0; i < 32; i++) xv[i] = (float)i;
    CHECK(tsl_tensor_set(x, xv, 0, sizeof xv, &err) == TSL_SUCCESS);
    tsl_fp16_t zeros[48] = {0};
    CHECK(tsl_tensor_set(kv, zeros, 0, sizeof zeros, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_SUCCESS);
    /* y[j0, j1] = x[j1, j0] = 8 j0 + j1 */
    CHECK(tsl_get_f32_nd(y, 1, 2, 0, 0) == 10.0f);
    CHECK(tsl_get_f32_nd(y, 3, 7, 0, 0) == 31.0f);
    tsl_fp16_t kvb[48];
    CHECK(tsl_tensor_get(kv, kvb, 0, sizeof kvb, &err) == TSL_SUCCESS);
    /* rows 0 and 1 of kv untouched, rows 2..5 hold x */
    CHECK(kvb[0] == 0 && kvb[15] == 0);
    CHECK(tsl_fp16_to_fp32(kvb[16]) == 0.0f && tsl_fp16_to_fp32(kvb[17]) == 1.0f);
    CHECK(tsl_fp16_to_fp32(kvb[40]) == 24.0f && tsl_fp16_to_fp32(kvb[47]) == 31.0f);
    tsl_buffer_free(buf);
    tsl_ctx_free(ctx);
    tsl_backend_free(be);
}

/* Copies whose one side is strided along its rows take the blocked
 * transposing path; check it element by element across block edges (256),
 * for each element width and a converting case. */
static void test_transposing_copies(void) {
    tsl_backend *be = tsl_backend_cpu_new(3, NULL);
    tsl_context *ctx = new_ctx(64, false);
    const int64_t n0 = 300, n1 = 270, n2 = 2;
    tsl_tensor *x = tsl_new_tensor_3d(ctx, TSL_TYPE_F32, n0, n1, n2);
    for (int64_t i = 0; i < tsl_nelements(x); i++) tsl_set_f32_1d(x, i, (float)(i % 2039) - 1000.0f);
    tsl_tensor *xh = tsl_dup(ctx, x, TSL_TYPE_F16);
    tsl_tensor *xi = tsl_new_tensor_3d(ctx, TSL_TYPE_I32, n0, n1, n2);
    for (int64_t i = 0; i < tsl_nelements(xi); i++) ((int32_t *)xi->data)[i] = (int32_t)(i * 7);
    tsl_tensor *t32 = tsl_cont(ctx, tsl_transpose(ctx, x));                 /* 4-byte, k = 1 */
    tsl_tensor *t16 = tsl_cont(ctx, tsl_transpose(ctx, xh));                /* 2-byte */
    tsl_tensor *ti = tsl_cont(ctx, tsl_permute(ctx, xi, 1, 2, 0, 3));       /* [n2, n0, n1]: k = 2 */
    tsl_tensor *vc = tsl_new_tensor_2d(ctx, TSL_TYPE_F16, n1, n0);          /* a "V cache" */
    tsl_tensor *x0 = tsl_view_2d(ctx, x, n0, n1, x->nb[1], 0);
    tsl_tensor *cv = tsl_cpy(ctx, x0, tsl_transpose(ctx, vc));              /* f32 -> strided f16 */
    tsl_tensor *outs[4] = {t32, t16, ti, cv};
    tsl_graph *g = tsl_graph_build(ctx, outs, 4);
    CHECKF(g && be, "%s", tsl_ctx_error(ctx));
    if (!g || !be) return;
    CHECK(tsl_backend_graph_compute(be, g, NULL) == TSL_SUCCESS);
    int bad32 = 0, bad16 = 0, badi = 0, badv = 0;
    for (int64_t i2 = 0; i2 < n2; i2++)
        for (int64_t i1 = 0; i1 < n1; i1++)
            for (int64_t i0 = 0; i0 < n0; i0++) {
                float v = tsl_get_f32_nd(x, i0, i1, i2, 0);
                bad32 += tsl_get_f32_nd(t32, i1, i0, i2, 0) != v;
                bad16 += tsl_get_f32_nd(t16, i1, i0, i2, 0) != tsl_fp16_to_fp32(tsl_fp32_to_fp16(v));
                /* permute(1, 2, 0, 3): dim 0 -> 1, dim 1 -> 2, dim 2 -> 0 */
                int32_t w = ((int32_t *)ti->data)[i2 + n2 * (i0 + n0 * i1)];
                badi += w != ((int32_t *)xi->data)[i0 + n0 * (i1 + n1 * i2)];
                if (i2 == 0) badv += tsl_get_f32_nd(vc, i1, i0, 0, 0) != tsl_fp16_to_fp32(tsl_fp32_to_fp16(v));
            }
    CHECKF(bad32 == 0 && bad16 == 0 && badi == 0 && badv == 0, "mismatches: f32 %d f16 %d i32 %d cpy %d", bad32,
           bad16, badi, badv);
    tsl_ctx_free(ctx);
    tsl_backend_free(be);
}

static void test_set_threads(void) {
    tsl_error err;
    tsl_backend *be = tsl_backend_cpu_new(1, &err);
    tsl_context *ctx = new_ctx(4, false);
    tsl_tensor *x = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 300, 50);
    fill(x, 5, -3, 3);
    tsl_tensor *y = tsl_soft_max(ctx, tsl_gelu(ctx, x), NULL, 0.7f);
    tsl_graph *g = tsl_graph_build(ctx, &y, 1);
    CHECK(g && be);
    if (!g || !be) return;
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_SUCCESS);
    float *ref = malloc(tsl_nbytes(y));
    memcpy(ref, y->data, tsl_nbytes(y));
    for (int n = 2; n <= 4; n++) {
        CHECK(tsl_backend_cpu_set_threads(be, n, &err) == TSL_SUCCESS);
        CHECK(tsl_backend_cpu_threads(be) == n);
        char want[32];
        snprintf(want, sizeof want, "%d threads", n);
        CHECK_STR_CONTAINS(tsl_backend_device(be), want);
        memset(y->data, 0, tsl_nbytes(y));
        CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_SUCCESS);
        CHECK(memcmp(ref, y->data, tsl_nbytes(y)) == 0);
    }
    CHECK(tsl_backend_cpu_set_threads(be, 0, &err) == TSL_SUCCESS); /* one per core */
    CHECK(tsl_backend_cpu_threads(be) >= 1);
    free(ref);
    tsl_ctx_free(ctx);
    tsl_backend_free(be);
}

/* ---- the fault contract's hooks ------------------------------------------------ */

static bool gate_open(void *user) { return *(bool *)user; }

static void test_fault_hooks(void) {
    tsl_error err;
    tsl_backend *be = tsl_backend_cpu_new(2, &err);
    tsl_context *ctx = new_ctx(1, false);
    tsl_tensor *x = tsl_tensor_set_name(tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 64), "x");
    fill_const(x, 1.0f);
    tsl_tensor *y = x;
    for (int i = 0; i < 6; i++) y = tsl_tensor_format_name(tsl_add(ctx, y, x), "y%d", i);
    tsl_graph *g = tsl_graph_build(ctx, &y, 1);
    CHECK(g && be);
    if (!g || !be) return;
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_SUCCESS); /* compute 1 */
    CHECK(tsl_get_f32_1d(y, 0) == 7.0f);

    /* availability gate: RETRY at once, nothing runs; open again and it computes */
    bool open = false;
    tsl_backend_set_gate(be, gate_open, &open);
    fill_const(y, -1.0f);
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_RETRY); /* compute 2 */
    CHECK_STR_CONTAINS(err.message, "gate");
    CHECK(tsl_get_f32_1d(y, 0) == -1.0f);
    open = true;
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_SUCCESS); /* compute 3 */
    CHECK(tsl_get_f32_1d(y, 0) == 7.0f);
    tsl_backend_set_gate(be, NULL, NULL);

    /* injected faults take the real paths and name the right node */
    CHECK(tsl_backend_inject(be, "nobuf@tensor=y2,times=1", &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_FAILED);
    CHECK(err.node == 2 && strcmp(err.tensor, "y2") == 0);
    CHECK_STR_CONTAINS(err.message, "no data");
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_SUCCESS); /* fired once; nothing latched */

    CHECK(tsl_backend_inject(be, "kernel@name=cpu_add_f32_f32,node=4,times=1", &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_FAILED);
    CHECK(err.node == 4 && strcmp(err.kernel, "cpu_add_f32_f32") == 0 && strcmp(err.op, "ADD") == 0);
    /* a failed build stays cached (from the first node needing it) until
     * recovery rebuilds the kernels */
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_FAILED && err.node == 0);
    CHECK(!tsl_backend_supports_op(be, y));
    CHECK(tsl_backend_recover(be, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_supports_op(be, y));

    fill_const(y, -1.0f);
    CHECK(tsl_backend_inject(be, "abort@node=3,times=1", &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_ABORTED);
    CHECK(err.node == 3);
    CHECK(tsl_get_f32_1d(y, 0) == -1.0f);

    CHECK(tsl_backend_inject(be, "retry@times=1", &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_RETRY);
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_SUCCESS);
    CHECK(tsl_get_f32_1d(y, 0) == 7.0f);

    CHECK(tsl_backend_inject(be, "alloc@bytes>100000,times=1", &err) == TSL_SUCCESS);
    tsl_buffer *b1 = tsl_buffer_alloc(be, 200000, &err);
    CHECK(b1 == NULL && err.status == TSL_ALLOC_FAILED);
    tsl_buffer *b2 = tsl_buffer_alloc(be, 200000, &err);
    CHECK(b2 != NULL);
    tsl_buffer_free(b2);

    CHECK(tsl_backend_injected(be, TSL_FAULT_NOBUF) == 1);
    CHECK(tsl_backend_injected(be, TSL_FAULT_KERNEL) == 1);
    CHECK(tsl_backend_injected(be, TSL_FAULT_ABORT) == 1);
    CHECK(tsl_backend_injected(be, TSL_FAULT_RETRY) == 1);
    CHECK(tsl_backend_injected(be, TSL_FAULT_ALLOC) == 1);
    CHECK(tsl_backend_inject(be, "bogus@", &err) == TSL_FAILED);
    tsl_backend_inject_clear(be);
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_SUCCESS);
    tsl_ctx_free(ctx);
    tsl_backend_free(be);
}

/* ---- scheduling cost ----------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_overhead_per_node(void) {
    tsl_backend *be = tsl_backend_cpu_new(2, NULL);
    tsl_context *ctx = new_ctx(8, false);
    tsl_tensor *x = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 16);
    fill_const(x, 0.0f);
    tsl_tensor *y = x;
    for (int i = 0; i < 1000; i++) y = tsl_scale(ctx, tsl_add(ctx, y, x), 1.0f);
    tsl_graph *g = tsl_graph_build(ctx, &y, 1);
    CHECK(g && be && g->n_nodes == 2000);
    if (!g || !be) return;
    double best = 1e9;
    for (int r = 0; r < 20; r++) {
        double t0 = now_s();
        CHECK(tsl_backend_graph_compute(be, g, NULL) == TSL_SUCCESS);
        double dt = (now_s() - t0) / g->n_nodes;
        if (dt < best) best = dt;
    }
    printf("     %.2f us per node (2000 small nodes, 2 threads, best of 20)\n", best * 1e6);
    /* the target is well under 2 us on a quiet machine; this bound only
     * catches a broken (sleeping, locking) schedule on a busy one */
    CHECK(best < 20e-6);
    tsl_ctx_free(ctx);
    tsl_backend_free(be);
}

int main(void) {
    RUN(test_threads_identical);
    RUN(test_sanity_values);
    RUN(test_missing_data_fails_before_running);
    RUN(test_no_kernel);
    RUN(test_abort);
    RUN(test_get_rows_out_of_range);
    RUN(test_buffers);
    RUN(test_lazy_views);
    RUN(test_transposing_copies);
    RUN(test_set_threads);
    RUN(test_fault_hooks);
    RUN(test_overhead_per_node);
    return test_summary();
}
