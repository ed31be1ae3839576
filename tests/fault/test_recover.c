/* Device loss and recovery on the CPU backend (FAULTS.md sections 1 and 8).
 * A lost device latches: every later compute, on any graph, and every buffer
 * allocation and copy returns DEVICE_LOST at once with the original cause.
 * tsl_backend_recover then gives every buffer fresh (zeroed) memory behind
 * the same addresses, restores the persistent ones (weights) from their host
 * source or from the host copy the backend kept, leaves the others zeroed
 * and reports them lost, and reports its time; after the inputs are set
 * again the graph gives the clean run's logits bit for bit. The latch is per
 * device (another CPU backend is unaffected), a recovery that cannot get its
 * memory back leaves the device lost, and a recovery with nothing lost
 * touches no buffer. */
#include "llama_graph.h"

static const unsigned long long SEED = 4242;
static float g_ref[LG_VOCAB * LG_TOK];

static bool all_zero(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i]) return false;
    return true;
}

static bool logits_clean(lg_model *m, tsl_error *err) {
    float out[LG_VOCAB * LG_TOK];
    return tsl_backend_graph_compute(m->be, m->g, err) == TSL_SUCCESS && lg_read(m, out, err) == TSL_SUCCESS &&
           memcmp(out, g_ref, sizeof out) == 0;
}

/* Byte offset of a tensor in its (host) buffer. */
static size_t offset_in(const lg_model *m, const tsl_tensor *t) {
    return (size_t)((const char *)t->data - (const char *)tsl_buffer_host_ptr(t->buffer));
}

static void test_lost_then_recover(void) {
    tsl_error err, cause, later;
    tsl_backend *be = tsl_backend_cpu_new(2, &err);
    lg_model m;
    CHECK(be != NULL);
    if (!be || !lg_init(&m, be, SEED)) {
        CHECK(!"setup");
        tsl_backend_free(be);
        return;
    }
    CHECK(logits_clean(&m, &err)); /* compute 1 */
    CHECK(!tsl_backend_is_lost(be));
    CHECK(!tsl_buffer_is_lost(m.wbuf_a) && !tsl_buffer_is_lost(m.ibuf));

    /* the backend keeps a copy of B, current with every tensor_set: change
     * one weight now and the recovered buffer must hold the new value */
    tsl_tensor *onorm = tsl_ctx_get_tensor(m.wctx_b, "output_norm.weight");
    float old_v, new_v = 1.5f;
    CHECK(tsl_tensor_get(onorm, &old_v, 0, sizeof old_v, &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_set(onorm, &new_v, 0, sizeof new_v, &err) == TSL_SUCCESS);
    size_t nb_b = tsl_buffer_size(m.wbuf_b);
    unsigned char *snap_b = malloc(nb_b);
    memcpy(snap_b, tsl_buffer_host_ptr(m.wbuf_b), nb_b);

    /* lose the device where a GPU's fence would report it */
    CHECK(tsl_backend_inject(be, "lost@compute=2", &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(be, m.g, &cause) == TSL_DEVICE_LOST);
    CHECK(cause.status == TSL_DEVICE_LOST && cause.node == -1);
    CHECK_STR_CONTAINS(cause.message, "lost while compute 2 ran");
    CHECK_STR_CONTAINS(cause.driver_text, "injected");
    CHECK_STR_CONTAINS(lg_line(&cause), "cpu (");
    CHECK_STR_CONTAINS(lg_line(&cause), "DEVICE_LOST");
    CHECK_STR_CONTAINS(lg_line(&cause), "recover");
    CHECK(tsl_backend_is_lost(be));
    tsl_backend_inject_clear(be); /* the latch does not depend on the rule */

    /* every later compute, on any graph, answers at once with the original cause */
    tsl_context *c2 = tsl_ctx_new((tsl_ctx_params){.mem_size = 1 << 16, .no_alloc = false});
    tsl_tensor *x = tsl_new_tensor_1d(c2, TSL_TYPE_F32, 8);
    for (int i = 0; i < 8; i++) tsl_set_f32_1d(x, i, 1.0f);
    tsl_tensor *y = tsl_scale(c2, x, 3.0f);
    tsl_set_f32_1d(y, 0, -1.0f);
    tsl_graph *g2 = tsl_graph_build(c2, &y, 1);
    for (int i = 0; i < 4; i++) {
        tsl_graph *g = i % 2 ? g2 : m.g;
        CHECK(tsl_backend_graph_compute(be, g, &later) == TSL_DEVICE_LOST);
        CHECK(later.status == TSL_DEVICE_LOST && !strcmp(later.message, cause.message) &&
              !strcmp(later.driver_text, cause.driver_text) && later.node == cause.node);
    }
    CHECK(tsl_get_f32_1d(y, 0) == -1.0f); /* nothing ran */
    CHECK(tsl_buffer_alloc(be, 4096, &later) == NULL);
    CHECK(later.status == TSL_DEVICE_LOST && !strcmp(later.message, cause.message));
    float v;
    CHECK(tsl_tensor_get(onorm, &v, 0, sizeof v, &later) == TSL_DEVICE_LOST);
    CHECK(tsl_tensor_set(onorm, &v, 0, sizeof v, &later) == TSL_DEVICE_LOST);
    CHECK(!strcmp(later.message, cause.message));
    CHECK(tsl_backend_build_kernels(be, NULL, NULL) == -1);

    /* the host source is what recovery reads: change a byte of the image
     * (the "file") now and the recovered buffer must have it */
    tsl_tensor *anorm = tsl_ctx_get_tensor(m.wctx_a, "blk.1.attn_norm.weight");
    size_t aoff = offset_in(&m, anorm);
    float src_old, src_new = 0.75f;
    memcpy(&src_old, (char *)m.image_a + aoff, sizeof src_old);
    memcpy((char *)m.image_a + aoff, &src_new, sizeof src_new);

    CHECK(tsl_backend_recover(be, &err) == TSL_SUCCESS);
    CHECK(!tsl_backend_is_lost(be));
    double ms = tsl_backend_last_recovery_ms(be);
    CHECK(ms > 0.0);
    printf("     recovery took %.3f ms\n", ms);

    /* persistent: restored, not lost */
    CHECK(!tsl_buffer_is_lost(m.wbuf_a) && !tsl_buffer_is_lost(m.wbuf_b));
    CHECK(memcmp(tsl_buffer_host_ptr(m.wbuf_a), m.image_a, m.image_a_size) == 0);
    CHECK(memcmp(tsl_buffer_host_ptr(m.wbuf_b), snap_b, nb_b) == 0);
    CHECK(tsl_tensor_get(onorm, &v, 0, sizeof v, &err) == TSL_SUCCESS && v == new_v);
    CHECK(tsl_tensor_get(anorm, &v, 0, sizeof v, &err) == TSL_SUCCESS && v == src_new);
    /* not persistent: zeroed and reported lost (inputs, and the activations
     * of the graph allocator) */
    CHECK(tsl_buffer_is_lost(m.ibuf));
    CHECK(all_zero(tsl_buffer_host_ptr(m.ibuf), tsl_buffer_size(m.ibuf)));
    float out[LG_VOCAB * LG_TOK];
    CHECK(lg_read(&m, out, &err) == TSL_SUCCESS && all_zero(out, sizeof out));
    CHECK(tsl_buffer_is_lost(m.out->buffer));

    /* put the two changed weights back, re-set the inputs: the clean logits */
    memcpy((char *)m.image_a + aoff, &src_old, sizeof src_old);
    CHECK(tsl_tensor_set(anorm, &src_old, 0, sizeof src_old, &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_set(onorm, &old_v, 0, sizeof old_v, &err) == TSL_SUCCESS);
    CHECK(lg_set_inputs(&m, &err) == TSL_SUCCESS);
    tsl_buffer_clear_lost(m.ibuf);
    CHECK(!tsl_buffer_is_lost(m.ibuf));
    CHECK(logits_clean(&m, &err));
    /* the graph that was refused runs too */
    CHECK(tsl_backend_graph_compute(be, g2, &err) == TSL_SUCCESS && tsl_get_f32_1d(y, 0) == 3.0f);

    free(snap_b);
    tsl_ctx_free(c2);
    lg_free(&m);
    tsl_backend_free(be);
}

/* A recovery that cannot get its memory back leaves the device lost; the
 * next one succeeds. */
static void test_recovery_can_fail(void) {
    tsl_error err;
    tsl_backend *be = tsl_backend_cpu_new(1, &err);
    lg_model m;
    if (!be || !lg_init(&m, be, SEED)) {
        CHECK(!"setup");
        tsl_backend_free(be);
        return;
    }
    CHECK(tsl_backend_inject(be, "lost@compute=1", &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(be, m.g, &err) == TSL_DEVICE_LOST);
    tsl_backend_inject_clear(be);
    CHECK(tsl_backend_inject(be, "alloc@times=1", &err) == TSL_SUCCESS);
    CHECK(tsl_backend_recover(be, &err) == TSL_ALLOC_FAILED);
    CHECK_STR_CONTAINS(err.message, "stays lost");
    CHECK_STR_CONTAINS(lg_line(&err), "ALLOC_FAILED");
    CHECK(tsl_backend_is_lost(be));
    CHECK(tsl_backend_graph_compute(be, m.g, &err) == TSL_DEVICE_LOST);
    CHECK_STR_CONTAINS(err.message, "compute 1"); /* still the original cause */
    CHECK(tsl_backend_recover(be, &err) == TSL_SUCCESS);
    CHECK(lg_set_inputs(&m, &err) == TSL_SUCCESS);
    CHECK(logits_clean(&m, &err));
    lg_free(&m);
    tsl_backend_free(be);
}

/* A CPU backend is its own device: losing one leaves another untouched. */
static void test_loss_is_per_device(void) {
    tsl_error err;
    tsl_backend *a = tsl_backend_cpu_new(1, &err), *b = tsl_backend_cpu_new(1, &err);
    lg_model ma, mb;
    bool ok = a && b && lg_init(&ma, a, SEED);
    if (ok && !lg_init(&mb, b, SEED)) {
        lg_free(&ma);
        ok = false;
    }
    CHECK(ok);
    if (!ok) {
        tsl_backend_free(a);
        tsl_backend_free(b);
        return;
    }
    CHECK(tsl_backend_inject(a, "lost", &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(a, ma.g, &err) == TSL_DEVICE_LOST);
    CHECK(tsl_backend_is_lost(a) && !tsl_backend_is_lost(b));
    for (int i = 0; i < 3; i++) CHECK(logits_clean(&mb, &err));
    CHECK(!tsl_buffer_is_lost(mb.ibuf));
    tsl_backend_inject_clear(a);
    CHECK(tsl_backend_recover(a, &err) == TSL_SUCCESS);
    CHECK(lg_set_inputs(&ma, &err) == TSL_SUCCESS);
    CHECK(logits_clean(&ma, &err));
    lg_free(&ma);
    lg_free(&mb);
    tsl_backend_free(a);
    tsl_backend_free(b);
}

/* Recovery with nothing lost rebuilds kernels only: no buffer is touched. */
static void test_recover_when_not_lost(void) {
    tsl_error err;
    tsl_backend *be = tsl_backend_cpu_new(1, &err);
    lg_model m;
    if (!be || !lg_init(&m, be, SEED)) {
        CHECK(!"setup");
        tsl_backend_free(be);
        return;
    }
    CHECK(logits_clean(&m, &err));
    float before[LG_VOCAB * LG_TOK], after[LG_VOCAB * LG_TOK];
    CHECK(lg_read(&m, before, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_recover(be, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_last_recovery_ms(be) >= 0.0);
    CHECK(!tsl_buffer_is_lost(m.ibuf) && !tsl_buffer_is_lost(m.wbuf_a));
    CHECK(lg_read(&m, after, &err) == TSL_SUCCESS && memcmp(before, after, sizeof after) == 0);
    CHECK(logits_clean(&m, &err)); /* inputs were kept: no re-set needed */
    CHECK(tsl_backend_recover(NULL, &err) == TSL_FAILED);
    lg_free(&m);
    tsl_backend_free(be);
}

/* A persistent buffer without a source and one not persistent at all, on
 * their own: the first comes back with what tensor_set last wrote, the
 * second zeroed and lost; turning persistence off drops the copy. */
static void test_host_copy(void) {
    tsl_error err;
    tsl_backend *be = tsl_backend_cpu_new(1, &err);
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1 << 16, .no_alloc = true});
    tsl_tensor *p = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 64), *q = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 64);
    tsl_buffer *bp = tsl_buffer_alloc(be, tsl_nbytes(p), &err), *bq = tsl_buffer_alloc(be, tsl_nbytes(q), &err);
    CHECK(be && bp && bq);
    if (!be || !bp || !bq) return;
    CHECK(tsl_buffer_place(bp, p, 0, &err) == TSL_SUCCESS && tsl_buffer_place(bq, q, 0, &err) == TSL_SUCCESS);
    float v[64], r[64];
    for (int i = 0; i < 64; i++) v[i] = (float)i;
    CHECK(tsl_tensor_set(p, v, 0, sizeof v, &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_set(q, v, 0, sizeof v, &err) == TSL_SUCCESS);
    tsl_buffer_set_persistent(bp, true);
    v[10] = -10.0f; /* a partial write after the copy was taken */
    CHECK(tsl_tensor_set(p, &v[10], 10 * sizeof(float), sizeof(float), &err) == TSL_SUCCESS);
    /* a graph on the backend, only to have its device lost */
    tsl_context *gc = tsl_ctx_new((tsl_ctx_params){.mem_size = 1 << 16, .no_alloc = false});
    CHECK(tsl_backend_inject(be, "lost@compute=1", &err) == TSL_SUCCESS);
    tsl_tensor *s = tsl_scale(gc, p, 1.0f);
    tsl_graph *g = tsl_graph_build(gc, &s, 1);
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_DEVICE_LOST);
    CHECK(tsl_backend_recover(be, &err) == TSL_SUCCESS);
    CHECK(!tsl_buffer_is_lost(bp) && tsl_buffer_is_lost(bq));
    CHECK(tsl_tensor_get(p, r, 0, sizeof r, &err) == TSL_SUCCESS && memcmp(r, v, sizeof r) == 0);
    CHECK(tsl_tensor_get(q, r, 0, sizeof r, &err) == TSL_SUCCESS && all_zero(r, sizeof r));
    /* persistence off: the next loss zeroes it too */
    tsl_buffer_set_persistent(bp, false);
    tsl_backend_inject_clear(be);
    CHECK(tsl_backend_inject(be, "lost", &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(be, g, &err) == TSL_DEVICE_LOST);
    tsl_backend_inject_clear(be);
    CHECK(tsl_backend_recover(be, &err) == TSL_SUCCESS);
    CHECK(tsl_buffer_is_lost(bp));
    CHECK(tsl_tensor_get(p, r, 0, sizeof r, &err) == TSL_SUCCESS && all_zero(r, sizeof r));
    tsl_buffer_free(bp);
    tsl_buffer_free(bq);
    tsl_ctx_free(gc);
    tsl_ctx_free(ctx);
    tsl_backend_free(be);
}

int main(void) {
    if (!lg_reference(SEED, 1, g_ref)) {
        fprintf(stderr, "the clean reference run failed\n");
        return 1;
    }
    RUN(test_lost_then_recover);
    RUN(test_recovery_can_fail);
    RUN(test_loss_is_per_device);
    RUN(test_recover_when_not_lost);
    RUN(test_host_copy);
    return test_summary();
}
