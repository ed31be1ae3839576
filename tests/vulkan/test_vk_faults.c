/*
 * test_vk_faults.c - the fault contract (FAULTS.md) on the Vulkan backend,
 * with real faults where the driver can produce them and injected ones at
 * the real boundaries otherwise.
 *
 *  (a) A kernel whose SPIR-V lacks its entry point: the driver refuses the
 *      pipeline; the graph returns FAILED naming the kernel with the
 *      driver's answer, nothing is submitted, the failure is cached (the same
 *      graph fails the same way without a rebuild) and supports_op answers
 *      false for that op and type from then on.
 *  (b) A tensor with no buffer (and one in another backend's buffer) fails
 *      the graph before any command buffer is submitted (the submit counter
 *      does not move).
 *  (c) Injected retry (at the first and at a later command buffer), alloc (a
 *      buffer, and a compute's own scratch),
 *      abort, nobuf, kernel and lost, each through fault rules, each with the
 *      right status and record, and the backend usable afterwards (except
 *      after lost, which latches for every backend on the device).
 *  (d) A hang: a kernel that runs far longer than the watchdog allows turns
 *      into DEVICE_LOST "GPU hang: no progress in N s", latched for both
 *      backends on the device, with every later compute answering at once.
 *  (e) Injected copylost through staging copies: a device lost where a
 *      copy's completion is waited for, found by the next compute, read or
 *      set for a small upload left in flight, by the copy's own call
 *      otherwise; latched, recovered, and the result as before.
 *  Also: a get_rows index out of range is reported by the compute (FAILED,
 *  naming the index) from inside the kernel; the asynchronous pair
 *  (compute_async, then synchronize) reports on the call that learns it;
 *  two backends on one device, one faulty and one clean, computing at once,
 *  never see each other's failures; recovery after a hang and after a loss
 *  (new device at once, persistent buffers restored, the rest zeroed and
 *  flagged, results as before the fault).
 *
 * The Khronos validation layer runs too: the test turns TSL_VULKAN_VALIDATE
 * on itself unless the environment sets it, and the only errors the layer
 * may report, device teardown included, are the deliberately broken
 * pipeline's of (a). With TSL_REQUIRE_VULKAN set (CI), a layer that was
 * asked for and did not load is a failure.
 */
#include <stdio.h>
#include <stdlib.h>

#ifndef TSL_HAVE_VULKAN
#include "vulkan/vk_no_vulkan.h"
#else

#include <glob.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensile/backend.h"
#include "test.h"
#include "vulkan/vk_harness.h"
#include "vulkan/vk_test.h"
#include "spin_spv.h"

/* lavapipe leaks what it allocated for a pipeline it refuses (test (a)
 * makes one on purpose); those allocations are the driver's, not ours.
 * Vulkan objects this library forgets to destroy are caught another way:
 * the validation layer reports them when the device is destroyed
 * (TSL_VULKAN_VALIDATE=1, test_validation). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libvulkan_lvp.so\n"; }

static tsl_backend *g_vk, *g_cpu;
static int g_index;
static uint64_t g_expected_validation_errors;



static uint64_t submits(tsl_backend *be) {
    tsl_vulkan_stats s;
    return tsl_backend_vulkan_stats(be, &s) == TSL_SUCCESS ? s.submits : 0;
}

static void print_record(const char *what, const tsl_error *e) {
    char line[640];
    tsl_error_format(e, line, sizeof line);
    printf("  %s: %s\n", what, line);
}

/* ---- a small graph with a quantized weight -------------------------------------- */

typedef struct fg {
    tsl_context *ctx;
    tsl_graph *g;
    tsl_buffer *buf;
    tsl_tensor *w, *x, *bias, *mm, *out;
    int mm_node;
} fg;

/* out = silu(mul_mat(w, x) + bias) over a chain of extra scales, long
 * enough to be cut into several command buffers. */
static bool fg_make(fg *f, tsl_backend *be, int n_cols, int chain) {
    memset(f, 0, sizeof *f);
    f->ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 2u << 20, .no_alloc = true});
    f->w = tsl_tensor_set_name(tsl_new_tensor_2d(f->ctx, TSL_TYPE_Q4_0, 64, 48), "w");
    f->x = tsl_tensor_set_name(tsl_new_tensor_2d(f->ctx, TSL_TYPE_F32, 64, n_cols), "x");
    f->bias = tsl_tensor_set_name(tsl_new_tensor_1d(f->ctx, TSL_TYPE_F32, 48), "bias");
    f->mm = tsl_tensor_set_name(tsl_mul_mat(f->ctx, f->w, f->x), "mm");
    tsl_tensor *y = tsl_silu(f->ctx, tsl_add(f->ctx, f->mm, f->bias));
    for (int i = 0; i < chain; i++) y = tsl_scale(f->ctx, y, 1.0f + 0.01f * (float)i);
    f->out = tsl_tensor_set_name(y, "out");
    f->g = tsl_graph_build(f->ctx, &f->out, 1);
    if (!f->g) return false;
    f->mm_node = tsl_graph_node_index(f->g, f->mm);
    tsl_error err;
    f->buf = tsl_buffer_alloc_ctx(be, f->ctx, &err);
    if (!f->buf) return false;
    float v[64 * 48];
    unsigned char q[sizeof v];
    unsigned long long s = 42;
    for (int i = 0; i < 64 * 48; i++) v[i] = test_rand_f(&s, -1, 1);
    size_t qb = tsl_quantize(TSL_TYPE_Q4_0, v, q, 64 * 48);
    bool ok = tsl_tensor_set(f->w, q, 0, qb, &err) == TSL_SUCCESS;
    for (int i = 0; i < 64 * n_cols; i++) v[i] = test_rand_f(&s, -1, 1);
    ok = ok && tsl_tensor_set(f->x, v, 0, (size_t)64 * n_cols * sizeof(float), &err) == TSL_SUCCESS;
    for (int i = 0; i < 48; i++) v[i] = test_rand_f(&s, -1, 1);
    ok = ok && tsl_tensor_set(f->bias, v, 0, 48 * sizeof(float), &err) == TSL_SUCCESS;
    return ok;
}

static void fg_free(fg *f) {
    tsl_buffer_free(f->buf);
    tsl_ctx_free(f->ctx);
    memset(f, 0, sizeof *f);
}

/* The output after a compute, or NULL. */
static float *fg_out(fg *f) {
    size_t n = tsl_nbytes(f->out);
    float *r = malloc(n);
    tsl_error err;
    if (r && tsl_tensor_get(f->out, r, 0, n, &err) != TSL_SUCCESS) {
        free(r);
        return NULL;
    }
    return r;
}

static bool fg_same(fg *f, const float *want) {
    float *got = fg_out(f);
    bool same = got && want && memcmp(got, want, tsl_nbytes(f->out)) == 0;
    free(got);
    return same;
}

/* A fault-free result of the graph. */
static float *fg_reference(fg *f, tsl_backend *be) {
    tsl_error err;
    if (tsl_backend_graph_compute(be, f->g, &err) != TSL_SUCCESS) return NULL;
    return fg_out(f);
}

/* ---- (a) a kernel the driver refuses --------------------------------------------- */

static void test_broken_kernel(void) {
    const char *kname = "mul_mat_q4_0_f32";
    size_t size = 0;
    const uint32_t *spv = vk_test_kernel_spirv(kname, &size);
    CHECK(spv != NULL && size > 20);
    tsl_vulkan_stats v0;
    tsl_backend_vulkan_stats(g_vk, &v0);
    tsl_error err;
    CHECK(vk_test_set_kernel(g_vk, kname, spv, size, "no_such_entry", &err) == TSL_SUCCESS);
    CHECK(vk_test_set_kernel(g_vk, "no_such_kernel", spv, size, NULL, &err) == TSL_FAILED);

    fg f;
    CHECK(fg_make(&f, g_vk, 9, 0)); /* 9 columns: the tiled kernel */
    CHECK(tsl_backend_supports_op(g_vk, f.mm));
    uint64_t s0 = submits(g_vk);
    tsl_status st = tsl_backend_graph_compute(g_vk, f.g, &err);
    CHECK(st == TSL_FAILED);
    print_record("broken kernel", &err);
    CHECK(submits(g_vk) == s0);
    CHECK(strcmp(err.kernel, kname) == 0);
    CHECK(err.node == f.mm_node);
    CHECK(strcmp(err.op, "MUL_MAT") == 0);
    CHECK(strcmp(err.driver_domain, "VkResult") == 0);
    CHECK(err.driver_code < 0);
    CHECK_STR_CONTAINS(err.driver_text, "entry point 'no_such_entry' not found");
    CHECK_STR_CONTAINS(err.message, "could not be built");
    /* supports_op turns false for this op and type */
    CHECK(!tsl_backend_supports_op(g_vk, f.mm));
    /* the same graph fails the same way, from the cache */
    tsl_error err2;
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err2) == TSL_FAILED);
    CHECK(strcmp(err2.kernel, kname) == 0 && strcmp(err2.driver_text, err.driver_text) == 0);
    CHECK(submits(g_vk) == s0);
    /* another backend on the same device sees the failure too: the driver
     * would refuse it there as well */
    tsl_backend *other = tsl_backend_vulkan_new(g_index, &err2);
    CHECK(other && !tsl_backend_supports_op(other, f.mm));
    tsl_backend_free(other);
    /* tsl_backend_build_kernels-style report: the failure with its text */
    tsl_vulkan_stats v1;
    tsl_backend_vulkan_stats(g_vk, &v1);
    g_expected_validation_errors = v1.validation_errors - v0.validation_errors; /* the layer, when on, objects */
    if (g_expected_validation_errors) printf("  the validation layer reported the broken pipeline (%llu)\n",
                                             (unsigned long long)g_expected_validation_errors);
    fg_free(&f);

    /* a matrix-vector product of the same type uses another kernel and runs */
    CHECK(fg_make(&f, g_vk, 1, 0));
    CHECK(tsl_backend_supports_op(g_vk, f.mm));
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS);
    fg_free(&f);

    /* the embedded kernel back: the failure stays cached until recovery
     * (without a loss) rebuilds the kernels; then it builds and runs */
    CHECK(vk_test_set_kernel(g_vk, kname, NULL, 0, NULL, &err) == TSL_SUCCESS);
    CHECK(fg_make(&f, g_vk, 9, 0));
    CHECK(!tsl_backend_supports_op(g_vk, f.mm));
    CHECK(tsl_backend_recover(g_vk, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_supports_op(g_vk, f.mm));
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS);
    fg_free(&f);
}

/* (a), through the scheduler: the first compute fails naming the kernel;
 * from the next one on the op runs on the CPU and the graph succeeds, with
 * the CPU's result for the product. */
static void test_broken_kernel_sched(void) {
    const char *kname = "mul_mat_q4_0_f32";
    size_t size = 0;
    const uint32_t *spv = vk_test_kernel_spirv(kname, &size);
    tsl_error err;
    CHECK(vk_test_set_kernel(g_vk, kname, spv, size, "no_such_entry", &err) == TSL_SUCCESS);
    /* weights and inputs in Vulkan memory; the graph's nodes are placed by
     * the scheduler */
    tsl_context *cw = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    tsl_tensor *w = tsl_tensor_set_name(tsl_new_tensor_2d(cw, TSL_TYPE_Q4_0, 64, 48), "w");
    tsl_tensor *x = tsl_tensor_set_name(tsl_new_tensor_2d(cw, TSL_TYPE_F32, 64, 9), "x");
    tsl_buffer *wb = tsl_buffer_alloc_ctx(g_vk, cw, &err);
    CHECK(wb != NULL);
    float v[64 * 48];
    unsigned char q[sizeof v];
    unsigned long long seed = 7;
    for (int i = 0; i < 64 * 48; i++) v[i] = test_rand_f(&seed, -1, 1);
    size_t qb = tsl_quantize(TSL_TYPE_Q4_0, v, q, 64 * 48);
    CHECK(tsl_tensor_set(w, q, 0, qb, &err) == TSL_SUCCESS);
    for (int i = 0; i < 64 * 9; i++) v[i] = test_rand_f(&seed, -1, 1);
    CHECK(tsl_tensor_set(x, v, 0, 64 * 9 * sizeof(float), &err) == TSL_SUCCESS);
    tsl_context *cg = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    tsl_tensor *mm = tsl_mul_mat(cg, w, x);
    tsl_tensor *out = tsl_scale(cg, mm, 0.5f);
    tsl_graph *g = tsl_graph_build(cg, &out, 1);
    tsl_backend *list[2] = {g_vk, g_cpu};
    tsl_sched *s = tsl_sched_new(list, 2, (tsl_sched_params){0}, &err);
    CHECK(s != NULL);
    tsl_vulkan_stats v0, v1;
    tsl_backend_vulkan_stats(g_vk, &v0);
    CHECK(tsl_sched_compute(s, g, &err) == TSL_FAILED);
    tsl_backend_vulkan_stats(g_vk, &v1);
    g_expected_validation_errors += v1.validation_errors - v0.validation_errors; /* the broken pipeline again */
    print_record("scheduler, first compute", &err);
    CHECK(strcmp(err.kernel, kname) == 0);
    CHECK(err.split >= 0);
    CHECK(tsl_sched_compute(s, g, &err) == TSL_SUCCESS);
    int first = 0, nn = 0;
    bool mm_on_cpu = false;
    int mm_node = tsl_graph_node_index(g, mm);
    for (int k = 0; k < tsl_sched_n_splits(s); k++) {
        tsl_backend *be = tsl_sched_split_backend(s, k, &first, &nn);
        if (mm_node >= first && mm_node < first + nn) mm_on_cpu = be == g_cpu;
    }
    CHECK(mm_on_cpu);
    /* the CPU's product, scaled on whichever backend took the scale */
    float got[48 * 9], want[48 * 9];
    CHECK(tsl_tensor_get(out, got, 0, sizeof got, &err) == TSL_SUCCESS);
    tsl_context *cc = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    tsl_tensor *w2 = tsl_new_tensor_2d(cc, TSL_TYPE_Q4_0, 64, 48), *x2 = tsl_new_tensor_2d(cc, TSL_TYPE_F32, 64, 9);
    tsl_tensor *o2 = tsl_scale(cc, tsl_mul_mat(cc, w2, x2), 0.5f);
    tsl_graph *g2 = tsl_graph_build(cc, &o2, 1);
    tsl_buffer *cb = tsl_buffer_alloc_ctx(g_cpu, cc, &err);
    CHECK(tsl_tensor_set(w2, q, 0, qb, &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_set(x2, v, 0, 64 * 9 * sizeof(float), &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(g_cpu, g2, &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_get(o2, want, 0, sizeof want, &err) == TSL_SUCCESS);
    double maxerr = 0;
    for (int i = 0; i < 48 * 9; i++) maxerr = fmax(maxerr, fabs((double)got[i] - want[i]));
    CHECKF(maxerr < 1e-5, "max difference from the CPU %g", maxerr);
    tsl_buffer_free(cb);
    tsl_ctx_free(cc);
    tsl_sched_free(s);
    tsl_ctx_free(cg);
    tsl_buffer_free(wb);
    tsl_ctx_free(cw);
    /* put the kernel back for the tests that follow */
    CHECK(vk_test_set_kernel(g_vk, kname, NULL, 0, NULL, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_recover(g_vk, &err) == TSL_SUCCESS);
}

/* ---- (b) tensors with no buffer ---------------------------------------------------- */

static void test_no_buffer(void) {
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    tsl_tensor *a = tsl_tensor_set_name(tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 256), "a");
    tsl_tensor *b = tsl_tensor_set_name(tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 256), "b");
    tsl_tensor *c = tsl_scale(ctx, tsl_add(ctx, a, a), 2.0f);
    tsl_tensor *d = tsl_tensor_set_name(tsl_mul(ctx, c, b), "d");
    tsl_graph *g = tsl_graph_build(ctx, &d, 1);
    tsl_error err;
    /* everything but b gets a buffer */
    tsl_buffer *buf = tsl_buffer_alloc(g_vk, 4096, &err);
    CHECK(buf != NULL);
    CHECK(tsl_buffer_place(buf, a, 0, &err) == TSL_SUCCESS);
    size_t off = 1024;
    for (int i = 0; i < g->n_nodes; i++) {
        tsl_tensor *t = g->nodes[i];
        if (t->data || t->view_src) continue;
        CHECK(tsl_buffer_place(buf, t, off, &err) == TSL_SUCCESS);
        off += 1024;
    }
    uint64_t s0 = submits(g_vk);
    CHECK(tsl_backend_graph_compute(g_vk, g, &err) == TSL_FAILED);
    print_record("no buffer", &err);
    CHECK(submits(g_vk) == s0);
    CHECK(strcmp(err.tensor, "b") == 0);
    CHECK(err.node == tsl_graph_node_index(g, d));
    CHECK_STR_CONTAINS(err.message, "no buffer holds it");
    /* b in a CPU buffer: readable by the CPU, not by this device */
    tsl_buffer *cbuf = tsl_buffer_alloc(g_cpu, 1024, &err);
    CHECK(tsl_buffer_place(cbuf, b, 0, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(g_vk, g, &err) == TSL_FAILED);
    print_record("foreign buffer", &err);
    CHECK(submits(g_vk) == s0);
    CHECK_STR_CONTAINS(err.message, "cpu buffer");
    /* tensor_get on a tensor with no data fails with a record, never aborts */
    tsl_tensor *lone = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 4);
    float tmp[4];
    CHECK(tsl_tensor_get(lone, tmp, 0, sizeof tmp, &err) == TSL_FAILED);
    tsl_buffer_free(cbuf);
    tsl_buffer_free(buf);
    tsl_ctx_free(ctx);
}

/* ---- a data error found by a kernel ------------------------------------------------ */

static void test_get_rows_index(void) {
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    tsl_tensor *tab = tsl_tensor_set_name(tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 32, 10), "table");
    tsl_tensor *idx = tsl_tensor_set_name(tsl_new_tensor_1d(ctx, TSL_TYPE_I32, 5), "ids");
    tsl_tensor *r = tsl_get_rows(ctx, tab, idx);
    tsl_graph *g = tsl_graph_build(ctx, &r, 1);
    tsl_error err;
    tsl_buffer *buf = tsl_buffer_alloc_ctx(g_vk, ctx, &err);
    float t[320];
    for (int i = 0; i < 320; i++) t[i] = (float)i;
    CHECK(tsl_tensor_set(tab, t, 0, sizeof t, &err) == TSL_SUCCESS);
    int32_t bad[5] = {1, 2, 10, 3, 4};
    CHECK(tsl_tensor_set(idx, bad, 0, sizeof bad, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(g_vk, g, &err) == TSL_FAILED);
    print_record("index out of range", &err);
    CHECK_STR_CONTAINS(err.message, "index 10 at position 2");
    CHECK(strcmp(err.op, "GET_ROWS") == 0);
    /* nothing latched: good indices work at once */
    int32_t good[5] = {9, 0, 4, 4, 1};
    CHECK(tsl_tensor_set(idx, good, 0, sizeof good, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(g_vk, g, &err) == TSL_SUCCESS);
    float out[160];
    CHECK(tsl_tensor_get(r, out, 0, sizeof out, &err) == TSL_SUCCESS);
    CHECK(out[0] == 288.0f && out[32] == 0.0f && out[159] == 63.0f);
    tsl_buffer_free(buf);
    tsl_ctx_free(ctx);
}

/* ---- (c) injected faults ------------------------------------------------------------ */

static void test_inject_retry(void) {
    fg f;
    CHECK(fg_make(&f, g_vk, 3, 40));
    float *want = fg_reference(&f, g_vk);
    CHECK(want != NULL);
    tsl_error err;
    char rule[64];
    tsl_backend_inject_clear(g_vk);
    CHECK(tsl_backend_vulkan_set_command_buffers(g_vk, 4, &err) == TSL_SUCCESS);
    for (int where = 0; where < 2; where++) {
        /* 0: at the first command buffer; 1: at the second (whose first
         * node is past node 0, where the first one starts) */
        snprintf(rule, sizeof rule, where == 0 ? "retry@times=1" : "retry@node>0,times=1");
        CHECK(tsl_backend_inject(g_vk, rule, &err) == TSL_SUCCESS);
        uint64_t s0 = submits(g_vk);
        tsl_status st = tsl_backend_graph_compute(g_vk, f.g, &err);
        CHECKF(st == TSL_RETRY, "%s: status %s", rule, tsl_status_str(st));
        print_record(rule, &err);
        CHECK(strcmp(err.driver_text, "VK_ERROR_OUT_OF_DEVICE_MEMORY") == 0);
        CHECK_STR_CONTAINS(err.message, "submitting command buffer");
        if (where == 0) CHECK(submits(g_vk) == s0);
        else CHECK(submits(g_vk) > s0); /* the first ones ran; the rest did not */
        CHECK(tsl_backend_injected(g_vk, TSL_FAULT_RETRY) == (uint64_t)where + 1);
        tsl_backend_inject_clear(g_vk);
        /* nothing latched: the same graph gives the fault-free result */
        CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS);
        CHECK(fg_same(&f, want));
    }
    free(want);
    fg_free(&f);
}

static void test_inject_alloc(void) {
    tsl_error err;
    CHECK(tsl_backend_inject(g_vk, "alloc@bytes>100000", &err) == TSL_SUCCESS);
    tsl_buffer *b = tsl_buffer_alloc(g_vk, 200000, &err);
    CHECK(b == NULL);
    CHECK(err.status == TSL_ALLOC_FAILED);
    print_record("injected alloc", &err);
    CHECK(strcmp(err.driver_text, "VK_ERROR_OUT_OF_DEVICE_MEMORY") == 0);
    b = tsl_buffer_alloc(g_vk, 1000, &err);
    CHECK(b != NULL);
    tsl_buffer_free(b);
    tsl_backend_inject_clear(g_vk);
    /* real refusals: past the device's largest allocation, past its memory */
    b = tsl_buffer_alloc(g_vk, (size_t)1 << 50, &err);
    CHECK(b == NULL && err.status == TSL_ALLOC_FAILED);
    print_record("1 PiB", &err);
    tsl_vulkan_device_info info;
    tsl_backend_vulkan_info(g_vk, &info, &err);
    if (info.max_allocation_bytes && info.max_allocation_bytes < ((uint64_t)1 << 40)) {
        b = tsl_buffer_alloc(g_vk, (size_t)info.max_allocation_bytes + 4096, &err);
        CHECK(b == NULL && err.status == TSL_ALLOC_FAILED);
        CHECK_STR_CONTAINS(err.message, "largest allocation");
    }
    /* the backend is fine afterwards */
    fg f;
    CHECK(fg_make(&f, g_vk, 2, 0));
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS);
    fg_free(&f);
}

/* A compute's own scratch refused: the quantized column's of a one-column
 * product, allocated by the first compute that needs it (injected there,
 * as an allocation the driver refused). The compute fails as
 * ALLOC_FAILED naming the product's node and kernel, submits nothing, and
 * latches nothing: the next compute allocates it and gives the result of
 * a backend that never failed, bit for bit. */
static void test_inject_scratch(void) {
    tsl_error err;
    tsl_backend *be = tsl_backend_vulkan_new(g_index, &err);
    CHECK(be != NULL);
    fg f, r;
    CHECK(fg_make(&f, be, 1, 2));
    CHECK(fg_make(&r, g_vk, 1, 2)); /* the same seeded values, a backend of its own */
    float *want = fg_reference(&r, g_vk);
    CHECK(want != NULL);
    CHECK(tsl_backend_inject(be, "alloc@times=1", &err) == TSL_SUCCESS);
    const uint64_t s0 = submits(be);
    tsl_status st = tsl_backend_graph_compute(be, f.g, &err);
    CHECKF(st == TSL_ALLOC_FAILED, "status %s", tsl_status_str(st));
    print_record("scratch refused", &err);
    CHECK(tsl_backend_injected(be, TSL_FAULT_ALLOC) == 1);
    CHECK(err.node == f.mm_node);
    CHECK_STR_CONTAINS(err.message, "scratch");
    CHECK_STR_CONTAINS(err.message, "mul_mat_vecq_q4_0");
    CHECK(submits(be) == s0);
    tsl_backend_inject_clear(be);
    CHECK(tsl_backend_graph_compute(be, f.g, &err) == TSL_SUCCESS);
    CHECK(fg_same(&f, want));
    free(want);
    fg_free(&r);
    fg_free(&f);
    tsl_backend_free(be);
}

static int abort_calls;
static bool abort_first(void *user) {
    abort_calls++;
    return true;
}

static void test_abort(void) {
    fg f;
    CHECK(fg_make(&f, g_vk, 3, 40));
    float *want = fg_reference(&f, g_vk);
    tsl_error err;
    CHECK(tsl_backend_vulkan_set_command_buffers(g_vk, 4, &err) == TSL_SUCCESS);
    tsl_backend_set_abort_callback(g_vk, abort_first, NULL);
    uint64_t s0 = submits(g_vk);
    abort_calls = 0;
    tsl_status st = tsl_backend_graph_compute(g_vk, f.g, &err);
    CHECK(st == TSL_ABORTED);
    print_record("abort", &err);
    CHECK(abort_calls == 1);
    CHECK(submits(g_vk) == s0 + 1); /* the first command buffer only */
    CHECK(err.node > 0);
    tsl_backend_set_abort_callback(g_vk, NULL, NULL);
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS);
    CHECK(fg_same(&f, want));
    /* the same through a rule */
    CHECK(tsl_backend_inject(g_vk, "abort@times=1", &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_ABORTED);
    tsl_backend_inject_clear(g_vk);
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS);
    CHECK(fg_same(&f, want));
    /* one command buffer: nothing to abort between */
    CHECK(tsl_backend_vulkan_set_command_buffers(g_vk, 1, &err) == TSL_SUCCESS);
    tsl_backend_set_abort_callback(g_vk, abort_first, NULL);
    abort_calls = 0;
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS);
    CHECK(abort_calls == 0);
    tsl_backend_set_abort_callback(g_vk, NULL, NULL);
    tsl_backend_vulkan_set_command_buffers(g_vk, 4, &err);
    free(want);
    fg_free(&f);
}

static void test_inject_nobuf_kernel(void) {
    fg f;
    CHECK(fg_make(&f, g_vk, 3, 2));
    float *want = fg_reference(&f, g_vk);
    tsl_error err;
    uint64_t s0 = submits(g_vk);
    CHECK(tsl_backend_inject(g_vk, "nobuf@tensor=bias", &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_FAILED);
    print_record("injected nobuf", &err);
    CHECK(strcmp(err.tensor, "bias") == 0);
    CHECK(submits(g_vk) == s0);
    tsl_backend_inject_clear(g_vk);
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS);
    CHECK(fg_same(&f, want));

    /* kernel: fails the graph naming it, and the op moves elsewhere from
     * then on (supports_op false here; another backend on the device keeps it) */
    tsl_tensor *silu = f.out->src[0];
    while (silu && silu->op != TSL_OP_SILU) silu = silu->src[0];
    CHECK(silu && tsl_backend_supports_op(g_vk, silu));
    s0 = submits(g_vk);
    CHECK(tsl_backend_inject(g_vk, "kernel@name=silu_f32", &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_FAILED);
    print_record("injected kernel", &err);
    CHECK(strcmp(err.kernel, "silu_f32") == 0);
    CHECK(strcmp(err.op, "SILU") == 0);
    CHECK(submits(g_vk) == s0);
    tsl_backend_inject_clear(g_vk);
    CHECK(!tsl_backend_supports_op(g_vk, silu));
    tsl_backend *other = tsl_backend_vulkan_new(g_index, &err);
    CHECK(other && tsl_backend_supports_op(other, silu));
    tsl_backend_free(other);
    /* still refused with the rule gone; recovery rebuilds the kernels */
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_FAILED);
    CHECK(strcmp(err.kernel, "silu_f32") == 0);
    CHECK(tsl_backend_recover(g_vk, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_supports_op(g_vk, silu));
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS);
    CHECK(fg_same(&f, want));
    free(want);
    fg_free(&f);
}

/* The asynchronous pair: a failure found while the work ran comes back from
 * synchronize, on the compute that submitted it. */
static void test_async(void) {
    fg f;
    CHECK(fg_make(&f, g_vk, 4, 10));
    float *want = fg_reference(&f, g_vk);
    tsl_error err;
    CHECK(tsl_backend_graph_compute_async(g_vk, f.g, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_synchronize(g_vk, &err) == TSL_SUCCESS);
    CHECK(fg_same(&f, want));
    /* reading before synchronize waits for the work, not for the status */
    CHECK(tsl_backend_graph_compute_async(g_vk, f.g, &err) == TSL_SUCCESS);
    CHECK(fg_same(&f, want));
    CHECK(tsl_backend_synchronize(g_vk, &err) == TSL_SUCCESS);
    /* a failure before submission: from compute_async, and once more from
     * synchronize, then forgotten */
    CHECK(tsl_backend_inject(g_vk, "nobuf@tensor=x,times=1", &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute_async(g_vk, f.g, &err) == TSL_FAILED);
    CHECK(tsl_backend_synchronize(g_vk, &err) == TSL_FAILED);
    CHECK(strcmp(err.tensor, "x") == 0);
    CHECK(tsl_backend_synchronize(g_vk, &err) == TSL_SUCCESS);
    tsl_backend_inject_clear(g_vk);
    free(want);
    fg_free(&f);
}

/* Two backends on one device computing at once, one with a missing buffer
 * injected every time and one clean: each compute's ledger is its own, so
 * the clean one succeeds every time and the faulty one fails every time,
 * naming its own tensor. */
typedef struct conc {
    tsl_backend *be;
    bool faulty;
    int ok, failed, wrong;
    float *want;
} conc;

static void *conc_main(void *p) {
    conc *c = p;
    fg f;
    if (!fg_make(&f, c->be, 3, 30)) {
        c->wrong++;
        fg_free(&f);
        return NULL;
    }
    for (int i = 0; i < 25; i++) {
        tsl_error err;
        tsl_status st = tsl_backend_graph_compute(c->be, f.g, &err);
        if (c->faulty) {
            if (st == TSL_FAILED && strcmp(err.tensor, "bias") == 0) c->failed++;
            else c->wrong++;
        } else if (st == TSL_SUCCESS && fg_same(&f, c->want)) {
            c->ok++;
        } else {
            c->wrong++;
        }
    }
    fg_free(&f);
    return NULL;
}

static void test_concurrent_faulty_clean(void) {
    tsl_error err;
    tsl_backend *a = tsl_backend_vulkan_new(g_index, &err), *b = tsl_backend_vulkan_new(g_index, &err);
    CHECK(a && b);
    if (!a || !b) {
        tsl_backend_free(a);
        tsl_backend_free(b);
        return;
    }
    fg f;
    CHECK(fg_make(&f, b, 3, 30));
    float *want = fg_reference(&f, b);
    fg_free(&f);
    CHECK(tsl_backend_inject(a, "nobuf@tensor=bias", &err) == TSL_SUCCESS);
    conc ca = {.be = a, .faulty = true}, cb = {.be = b, .faulty = false, .want = want};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, conc_main, &ca);
    pthread_create(&tb, NULL, conc_main, &cb);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECKF(ca.failed == 25 && ca.wrong == 0, "faulty: %d failed, %d otherwise", ca.failed, ca.wrong);
    CHECKF(cb.ok == 25 && cb.wrong == 0, "clean: %d right, %d wrong", cb.ok, cb.wrong);
    free(want);
    tsl_backend_free(a);
    tsl_backend_free(b);
}

/* ---- (d) a hang, and loss --------------------------------------------------------- */

/* tests/vulkan/shaders_test/spin.comp (spin_spv.h, generated at build
 * time), registered in place of sqr_f32, whose grid has one workgroup per
 * 256 elements: every workgroup spins a[0] times. llvmpipe stops any
 * shader after 65535 loop iterations, so the work is made long by the
 * number of workgroups: long-running work the watchdog has to call a
 * hang. */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Free both backends and make fresh ones (the device object goes with the
 * last backend that holds it). */
static void renew_backends(void) {
    tsl_error err;
    tsl_backend_free(g_vk);
    g_vk = tsl_backend_vulkan_new(g_index, &err);
    CHECK(g_vk != NULL);
}

static void test_hang(void) {
    tsl_error err;
    tsl_backend *other = tsl_backend_vulkan_new(g_index, &err);
    CHECK(other != NULL);
    float *want = NULL; /* a fault-free result, for after the recovery */
    {
        fg r;
        CHECK(fg_make(&r, other, 3, 2));
        want = fg_reference(&r, other);
        fg_free(&r);
    }
    CHECK(vk_test_set_kernel(g_vk, "sqr_f32", spin_spv, sizeof spin_spv, NULL, &err) == TSL_SUCCESS);
    /* time 64 workgroups (after a first run that builds the kernel), then
     * size the grid for about 2 s of work */
    const float spins = 60000.0f;
    double per = 0;
    int64_t n = 256 * 64;
    tsl_context *ctx = NULL;
    tsl_buffer *buf = NULL;
    tsl_tensor *a = NULL;
    tsl_graph *g = NULL;
    for (int pass = 0; pass < 3; pass++) {
        if (pass == 2) n = (int64_t)(2.0 / (per > 1e-7 ? per : 1e-7)) * 256;
        if (n > ((int64_t)64 << 20)) n = (int64_t)64 << 20;
        tsl_buffer_free(buf);
        tsl_ctx_free(ctx);
        ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
        a = tsl_tensor_set_name(tsl_new_tensor_1d(ctx, TSL_TYPE_F32, n), "spins");
        /* the spin between two scales: a level before it and one after */
        tsl_tensor *y = tsl_tensor_set_name(tsl_sqr(ctx, tsl_scale(ctx, a, 1.0f)), "spin");
        y = tsl_scale(ctx, y, 1.0f);
        g = tsl_graph_build(ctx, &y, 1);
        buf = tsl_buffer_alloc_ctx(g_vk, ctx, &err);
        CHECK(buf != NULL);
        CHECK(tsl_tensor_set(a, &spins, 0, sizeof spins, &err) == TSL_SUCCESS);
        if (pass == 2) break;
        double t0 = now_s();
        CHECK(tsl_backend_graph_compute(g_vk, g, &err) == TSL_SUCCESS);
        per = (now_s() - t0) / 64;
    }
    printf("  spin: %.3g ms per workgroup, %lld workgroups\n", per * 1e3, (long long)(n / 256));
    tsl_backend_vulkan_set_watchdog_ms(g_vk, 300);
    /* one command buffer: its first node is the scale before the spin */
    tsl_backend_vulkan_set_command_buffers(g_vk, 1, &err);
    double t0 = now_s();
    tsl_status st = tsl_backend_graph_compute(g_vk, g, &err);
    double took = now_s() - t0;
    CHECK(st == TSL_DEVICE_LOST);
    print_record("hang", &err);
    printf("  watchdog 300 ms: DEVICE_LOST after %.2f s (the kernel needs ~2 s)\n", took);
    CHECK(took < 1.5);
    CHECK_STR_CONTAINS(err.message, "GPU hang: no progress in");
    /* named by the progress word: the spin (node 1), not its command
     * buffer's first node */
    CHECK(strcmp(err.op, "SQR") == 0);
    CHECK(err.node == 1);
    CHECK_STR_CONTAINS(err.message, "node 1 was running");
    CHECK(strcmp(err.driver_text, "VK_TIMEOUT") == 0);
    /* latched, device-wide, with the original cause, answered at once */
    tsl_error e2;
    t0 = now_s();
    CHECK(tsl_backend_graph_compute(g_vk, g, &e2) == TSL_DEVICE_LOST);
    CHECK(now_s() - t0 < 0.1);
    CHECK_STR_CONTAINS(e2.message, "GPU hang");
    t0 = now_s();
    CHECK(tsl_backend_graph_compute(other, g, &e2) == TSL_DEVICE_LOST);
    CHECK(now_s() - t0 < 0.1);
    CHECK_STR_CONTAINS(e2.message, "GPU hang");
    fg f;
    CHECK(!fg_make(&f, other, 2, 0)); /* no new buffers on a lost device */
    fg_free(&f);
    float tmp;
    CHECK(tsl_tensor_get(a, &tmp, 0, sizeof tmp, &e2) == TSL_DEVICE_LOST);

    /* recovery: a new device at once, without waiting for the spinning one;
     * both backends on the device are back */
    tsl_backend_vulkan_set_watchdog_ms(g_vk, 0);
    t0 = now_s();
    CHECK(tsl_backend_recover(other, &err) == TSL_SUCCESS);
    double rec_s = now_s() - t0;
    printf("  recovered from the hang in %.1f ms (tsl_backend_last_recovery_ms %.1f)\n", rec_s * 1e3,
           tsl_backend_last_recovery_ms(other));
    CHECK(rec_s < 0.5 * (per * (double)(n / 256))); /* well before the old work ends */
    CHECK(!tsl_backend_is_lost(g_vk) && !tsl_backend_is_lost(other));
    /* (the spin pipeline went with the old device; the next build of
     * sqr_f32 uses the embedded SPIR-V again) */
    CHECK(vk_test_set_kernel(g_vk, "sqr_f32", NULL, 0, NULL, &err) == TSL_SUCCESS);
    /* the spin's buffer was not persistent: it came back zeroed and flagged */
    CHECK(tsl_buffer_is_lost(buf));
    CHECK(tsl_tensor_get(a, &tmp, 0, sizeof tmp, &e2) == TSL_SUCCESS && tmp == 0.0f);
    /* the next compute gives the fault-free result (on lavapipe it also
     * waits for the old spin, which shares the CPU's threads) */
    CHECK(fg_make(&f, other, 3, 2));
    CHECK(tsl_backend_graph_compute(other, f.g, &err) == TSL_SUCCESS);
    CHECK(fg_same(&f, want));
    free(want);
    fg_free(&f);
    tsl_backend_vulkan_set_command_buffers(g_vk, 4, &err);
    tsl_buffer_free(buf);
    tsl_ctx_free(ctx);
    tsl_backend_free(other);
}

static void test_inject_lost(void) {
    tsl_error err;
    fg f;
    CHECK(fg_make(&f, g_vk, 3, 20));
    float *want = fg_reference(&f, g_vk);
    /* weights and inputs are persistent: recovery restores them */
    tsl_buffer_set_persistent(f.buf, true);
    /* a buffer that is not: it comes back zeroed, flagged lost */
    tsl_buffer *scratch = tsl_buffer_alloc(g_vk, 4096, &err);
    float ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    CHECK(scratch != NULL);
    tsl_context *sc = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 16, .no_alloc = true});
    tsl_tensor *st = tsl_new_tensor_1d(sc, TSL_TYPE_F32, 16);
    CHECK(tsl_buffer_place(scratch, st, 0, &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_set(st, ones, 0, sizeof ones, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_inject(g_vk, "lost@times=1", &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_DEVICE_LOST);
    print_record("injected lost", &err);
    CHECK(strcmp(err.driver_text, "VK_ERROR_DEVICE_LOST") == 0);
    CHECK(err.node >= 0);
    tsl_backend_inject_clear(g_vk);
    tsl_error e2;
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &e2) == TSL_DEVICE_LOST);
    CHECK(strcmp(e2.message, err.message) == 0); /* the original cause */
    tsl_backend *other = tsl_backend_vulkan_new(g_index, &e2);
    CHECK(other != NULL);
    CHECK(tsl_backend_is_lost(other));
    tsl_buffer *b = other ? tsl_buffer_alloc(other, 1024, &e2) : NULL;
    CHECK(b == NULL && e2.status == TSL_DEVICE_LOST);
    tsl_backend_free(other);
    /* recovery: new device objects; persistent buffers restored, the rest
     * zeroed and flagged; the same graph gives the fault-free result */
    CHECK(tsl_backend_recover(g_vk, &e2) == TSL_SUCCESS);
    printf("  recovered in %.2f ms\n", tsl_backend_last_recovery_ms(g_vk));
    CHECK(!tsl_backend_is_lost(g_vk));
    CHECK(!tsl_buffer_is_lost(f.buf));
    CHECK(tsl_buffer_is_lost(scratch));
    float back[16];
    CHECK(tsl_tensor_get(st, back, 0, sizeof back, &err) == TSL_SUCCESS);
    CHECK(back[0] == 0.0f && back[15] == 0.0f);
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS);
    CHECK(fg_same(&f, want));
    /* and once more, through a second loss */
    CHECK(tsl_backend_inject(g_vk, "lost@times=1", &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_DEVICE_LOST);
    tsl_backend_inject_clear(g_vk);
    CHECK(tsl_backend_recover(g_vk, &e2) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS);
    CHECK(fg_same(&f, want));
    tsl_buffer_free(scratch);
    tsl_ctx_free(sc);
    fg_free(&f);
    free(want);
    renew_backends(); /* a device made afresh works too */
    CHECK(fg_make(&f, g_vk, 3, 20));
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS);
    fg_free(&f);
}

/* ---- a device lost where a copy's completion is waited for ------------------------ */

/* The record of a loss found at a copy's completion: op "copy", the tensor
 * the copy was for, no node, the driver's VK_ERROR_DEVICE_LOST marked as
 * injected; and the loss latched. */
static void check_copy_record(const char *what, const tsl_error *e, const char *tensor, bool deferred) {
    print_record(what, e);
    CHECKF(e->status == TSL_DEVICE_LOST, "%s: status %s", what, tsl_status_str(e->status));
    CHECKF(strcmp(e->op, "copy") == 0, "%s: op '%s'", what, e->op);
    CHECKF(strcmp(e->tensor, tensor) == 0, "%s: tensor '%s', not '%s'", what, e->tensor, tensor);
    CHECK(e->node == -1);
    CHECK(strcmp(e->driver_domain, "VkResult") == 0 && e->driver_code == -4);
    CHECK_STR_CONTAINS(e->driver_text, "VK_ERROR_DEVICE_LOST");
    CHECK_STR_CONTAINS(e->driver_text, "injected");
    CHECKF((strstr(e->message, "left in flight") != NULL) == deferred, "%s: message '%s'", what, e->message);
    CHECK(tsl_backend_is_lost(g_vk));
}

/* After a copy loss: every later compute and copy answers DEVICE_LOST at
 * once with the original cause; recovery brings the backend back. */
static void check_latched_and_recover(fg *f, const tsl_error *cause) {
    tsl_error e2;
    float tmp[4] = {0};
    double t0 = now_s();
    CHECK(tsl_backend_graph_compute(g_vk, f->g, &e2) == TSL_DEVICE_LOST);
    CHECK(now_s() - t0 < 0.1);
    CHECK(strcmp(e2.message, cause->message) == 0 && strcmp(e2.tensor, cause->tensor) == 0);
    CHECK(tsl_backend_graph_compute(g_vk, f->g, &e2) == TSL_DEVICE_LOST);
    CHECK(tsl_tensor_set(f->bias, tmp, 0, sizeof tmp, &e2) == TSL_DEVICE_LOST);
    CHECK(tsl_tensor_get(f->out, tmp, 0, sizeof tmp, &e2) == TSL_DEVICE_LOST);
    CHECK(strcmp(e2.message, cause->message) == 0);
    tsl_backend_inject_clear(g_vk);
    CHECK(tsl_backend_recover(g_vk, &e2) == TSL_SUCCESS);
    CHECK(!tsl_backend_is_lost(g_vk));
    CHECK(!tsl_buffer_is_lost(f->buf));
}

/* Through staging (TSL_VULKAN_STAGING=1: the path a discrete GPU takes), a
 * small tsl_tensor_set returns once its copy is submitted; "copylost"
 * makes that copy's completion answer VK_ERROR_DEVICE_LOST, and whichever
 * call waits for it next reports the loss naming the copy: a compute, a
 * read, another set. Also a copy waited for at once (a read, a large
 * upload). Each time the loss latches, recovery restores the persistent
 * buffer (and zeroes the other), and after uploading again the graph gives
 * the fault-free result. "lost" rules do not fire at copies. */
static void test_copy_lost(void) {
    tsl_error err;
    tsl_backend_free(g_vk);
    setenv("TSL_VULKAN_STAGING", "1", 1); /* read when the device is made, and by recovery */
    g_vk = tsl_backend_vulkan_new(g_index, &err);
    CHECK(g_vk != NULL);
    if (!g_vk) {
        unsetenv("TSL_VULKAN_STAGING");
        renew_backends();
        return;
    }
    fg f;
    CHECK(fg_make(&f, g_vk, 3, 4));
    float *want = fg_reference(&f, g_vk);
    CHECK(want != NULL);
    tsl_buffer_set_persistent(f.buf, true);
    float xv[64 * 3], bv[48];
    CHECK(tsl_tensor_get(f.x, xv, 0, sizeof xv, &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_get(f.bias, bv, 0, sizeof bv, &err) == TSL_SUCCESS);
    /* a buffer that is not persistent, with a large tensor (copied
     * synchronously: over the 256 KiB a set leaves in flight) */
    enum { BIG = 128 * 1024 };
    tsl_context *bc = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 16, .no_alloc = true});
    tsl_tensor *big = tsl_tensor_set_name(tsl_new_tensor_1d(bc, TSL_TYPE_F32, BIG), "big");
    tsl_buffer *scratch = tsl_buffer_alloc(g_vk, BIG * sizeof(float), &err);
    CHECK(scratch != NULL && tsl_buffer_place(scratch, big, 0, &err) == TSL_SUCCESS);
    float *bigv = calloc(BIG, sizeof(float));
    CHECK(bigv != NULL);
    if (!scratch || !bigv) goto done;
    for (int i = 0; i < BIG; i++) bigv[i] = (float)i;

    /* "lost" rules keep firing only at a compute's fence */
    CHECK(tsl_backend_inject(g_vk, "lost", &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_set(f.x, xv, 0, sizeof xv, &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_set(big, bigv, 0, BIG * sizeof(float), &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_get(f.bias, bv, 0, sizeof bv, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_injected(g_vk, TSL_FAULT_LOST) == 0 && !tsl_backend_is_lost(g_vk));
    tsl_backend_inject_clear(g_vk);
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS && fg_same(&f, want));

    /* 1. found by the next compute. The rule is in place before the set:
     * the set returns without waiting for its copy, so it does not fire */
    uint64_t fired0 = tsl_backend_injected(g_vk, TSL_FAULT_COPYLOST);
    CHECK(tsl_backend_inject(g_vk, "copylost@times=1", &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_set(f.x, xv, 0, sizeof xv, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_injected(g_vk, TSL_FAULT_COPYLOST) == fired0);
    CHECK(!tsl_backend_is_lost(g_vk));
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_DEVICE_LOST);
    CHECK(tsl_backend_injected(g_vk, TSL_FAULT_COPYLOST) == fired0 + 1);
    check_copy_record("found by the next compute", &err, "x", true);
    check_latched_and_recover(&f, &err);
    CHECK(tsl_buffer_is_lost(scratch)); /* not persistent: zeroed, flagged */
    float back = -1;
    CHECK(tsl_tensor_get(big, &back, 4 * (BIG - 1), sizeof back, &err) == TSL_SUCCESS && back == 0.0f);
    tsl_buffer_clear_lost(scratch);
    CHECK(tsl_tensor_set(f.x, xv, 0, sizeof xv, &err) == TSL_SUCCESS); /* uploaded again */
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS);
    CHECK(fg_same(&f, want));

    /* 2. found by the next read, of another tensor; the rule names the
     * tensor the copy in flight was for */
    float out[48 * 3];
    CHECK(tsl_backend_inject(g_vk, "copylost@tensor=bias", &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_set(f.x, xv, 0, sizeof xv, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS); /* x's copy: no match */
    CHECK(tsl_tensor_set(f.bias, bv, 0, sizeof bv, &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_get(f.out, out, 0, sizeof out, &err) == TSL_DEVICE_LOST);
    check_copy_record("found by the next read", &err, "bias", true);
    check_latched_and_recover(&f, &err);
    CHECK(tsl_tensor_set(f.bias, bv, 0, sizeof bv, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS);
    CHECK(fg_same(&f, want));

    /* 3. found by the next set */
    CHECK(tsl_tensor_set(f.x, xv, 0, sizeof xv, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_inject(g_vk, "copylost@times=1", &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_set(f.bias, bv, 0, sizeof bv, &err) == TSL_DEVICE_LOST);
    check_copy_record("found by the next set", &err, "x", true);
    check_latched_and_recover(&f, &err);
    CHECK(tsl_tensor_set(f.x, xv, 0, sizeof xv, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS);
    CHECK(fg_same(&f, want));

    /* 4. copies waited for at once report to their own call: a read... */
    CHECK(tsl_backend_inject(g_vk, "copylost@times=1", &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_get(f.out, out, 0, sizeof out, &err) == TSL_DEVICE_LOST);
    check_copy_record("a read", &err, "out", false);
    CHECK_STR_CONTAINS(err.message, "out of the device");
    check_latched_and_recover(&f, &err);
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS);
    CHECK(fg_same(&f, want));
    /* ...and a large upload */
    CHECK(tsl_backend_inject(g_vk, "copylost@bytes>262144,times=1", &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_set(big, bigv, 0, BIG * sizeof(float), &err) == TSL_DEVICE_LOST);
    check_copy_record("a large upload", &err, "big", false);
    check_latched_and_recover(&f, &err);
    CHECK(tsl_buffer_is_lost(scratch));
    tsl_buffer_clear_lost(scratch);
    CHECK(tsl_tensor_set(big, bigv, 0, BIG * sizeof(float), &err) == TSL_SUCCESS);
    CHECK(tsl_tensor_get(big, &back, 4 * (BIG - 1), sizeof back, &err) == TSL_SUCCESS && back == (float)(BIG - 1));
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS);
    CHECK(fg_same(&f, want));
    /* the plain lost site is unchanged: it fires at the compute's fence */
    CHECK(tsl_backend_inject(g_vk, "lost@times=1", &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_DEVICE_LOST);
    CHECK(err.node >= 0 && strcmp(err.op, "copy") != 0);
    check_latched_and_recover(&f, &err);
    CHECK(tsl_backend_graph_compute(g_vk, f.g, &err) == TSL_SUCCESS);
    CHECK(fg_same(&f, want));
done:
    tsl_backend_inject_clear(g_vk);
    free(bigv);
    tsl_buffer_free(scratch);
    tsl_ctx_free(bc);
    fg_free(&f);
    free(want);
    unsetenv("TSL_VULKAN_STAGING");
    renew_backends();
}

/* Run with every backend freed, so the device was destroyed and the layer
 * has checked for objects left behind; a new backend only reads the
 * counter, which is process-wide. */
static void test_validation(void) {
    tsl_error err;
    tsl_backend *be = tsl_backend_vulkan_new(g_index, &err);
    CHECK(be != NULL);
    tsl_vulkan_stats s;
    CHECK(be && tsl_backend_vulkan_stats(be, &s) == TSL_SUCCESS);
    if (be)
        CHECKF(s.validation_errors == g_expected_validation_errors,
               "the validation layer reported %llu errors (%llu expected: the broken pipeline)",
               (unsigned long long)s.validation_errors, (unsigned long long)g_expected_validation_errors);
    tsl_backend_free(be);
    const char *v = getenv("TSL_VULKAN_VALIDATE");
    bool asked = v && *v && strcmp(v, "0") != 0;
    printf("  validation layer: %s\n", !asked ? "off (TSL_VULKAN_VALIDATE=0)"
                                       : atomic_load(&vkh_layer_on) ? "on" : "asked for, not loaded");
    if (asked && getenv("TSL_REQUIRE_VULKAN"))
        CHECKF(vkh_layer_loaded(),
               "TSL_REQUIRE_VULKAN is set and the Khronos validation layer did not load "
               "(Debian: vulkan-validationlayers)");
}

int main(void) {
    /* the layer watches everything, unless the environment says otherwise;
     * set before the first Vulkan call, which makes the instance */
    setenv("TSL_VULKAN_VALIDATE", "1", 0);
    tsl_log_set(vkh_log, NULL);
    if (vkh_devices() <= 0) {
        if (getenv("TSL_REQUIRE_VULKAN")) {
            fprintf(stderr, "FAIL: no Vulkan device and TSL_REQUIRE_VULKAN is set\n");
            return 1;
        }
        printf("skipped: no Vulkan device\n");
        return 0;
    }
    tsl_error err;
    g_cpu = tsl_backend_cpu_new(1, &err);
    g_vk = tsl_backend_vulkan_new(-1, &err);
    tsl_vulkan_device_info info;
    if (!g_vk || !g_cpu || tsl_backend_vulkan_info(g_vk, &info, &err) != TSL_SUCCESS) {
        char line[512];
        tsl_error_format(&err, line, sizeof line);
        fprintf(stderr, "FAIL: could not make the backends: %s\n", line);
        return 1;
    }
    g_index = info.index;
    printf("device: %s %s\n", tsl_backend_name(g_vk), info.name);
    RUN(test_broken_kernel);
    RUN(test_broken_kernel_sched);
    RUN(test_no_buffer);
    RUN(test_get_rows_index);
    RUN(test_inject_retry);
    RUN(test_inject_alloc);
    RUN(test_inject_scratch);
    RUN(test_abort);
    RUN(test_inject_nobuf_kernel);
    RUN(test_async);
    RUN(test_concurrent_faulty_clean);
    RUN(test_hang);
    RUN(test_inject_lost);
    RUN(test_copy_lost);
    tsl_backend_free(g_vk);
    tsl_backend_free(g_cpu);
    RUN(test_validation);
    tsl_log_set(NULL, NULL);
    return test_summary();
}

#endif /* TSL_HAVE_VULKAN */
