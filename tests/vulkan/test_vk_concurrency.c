/*
 * test_vk_concurrency.c - two computes at the same time on one Vulkan
 * device never see each other's faults (FAULTS.md section 5), the Vulkan
 * form of tests/fault/test_concurrency.c.
 *
 * Two threads, each with its own Vulkan backend (context) made on the SAME
 * device (tsl_backend_vulkan_new twice with one index: they share the
 * VkDevice, its queue and its kernels), its own context, graph and buffer,
 * compute 2,000 times each at once. One has a buffer-lookup fault on its
 * weight on every 7th compute ("nobuf@compute%7,tensor=w"): it must fail
 * exactly on computes 7, 14, 21, ... with FAILED and a record naming that
 * weight, its reader node and the backend, and give the fault-free result,
 * bit for bit, on every other compute. The clean one never fails and gives
 * the fault-free result every time. The resolve pass of each compute fills
 * its own ledger through thread-local sinks that are live on both threads
 * together, and the queue is shared, so this is where cross-talk would show.
 *
 * The graph is tiny (a Q8_0 product, a bias, silu and a scale: four
 * dispatches) so that 4,000 computes stay quick on lavapipe, Mesa's CPU
 * device, even under the sanitizers: what is tested is the bookkeeping
 * around each compute, not the kernels.
 *
 * The Khronos validation layer watches the whole run: the test turns
 * TSL_VULKAN_VALIDATE on itself unless the environment sets it, and ends by
 * asserting that the layer reported no error (device teardown included).
 * With TSL_REQUIRE_VULKAN set (CI), a missing device, or a layer that was
 * asked for and did not load, is a failure rather than a skip.
 */
#include <stdio.h>
#include <stdlib.h>

#ifndef TSL_HAVE_VULKAN
#include "vulkan/vk_no_vulkan.h"
#else

#include <glob.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "tensile/backend.h"
#include "test.h"
#include "vulkan/vk_harness.h"

/* lavapipe keeps allocations of its own past the last device (the same
 * suppression as test_vk_faults.c); they are the driver's, not ours. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libvulkan_lvp.so\n"; }

enum { N_COMPUTES = 2000, EVERY = 7, K = 64, M = 32, N_COLS = 2 };

static int g_index;
static float g_ref[M * N_COLS];

/* ---- the validation layer ------------------------------------------------------ */





/* ---- the graph ------------------------------------------------------------------ */

typedef struct cg {
    tsl_context *ctx;
    tsl_graph *g;
    tsl_buffer *buf;
    tsl_tensor *w, *x, *b, *mm, *out;
    int mm_node;
} cg;

static void cg_free(cg *c) {
    tsl_buffer_free(c->buf);
    tsl_ctx_free(c->ctx);
    memset(c, 0, sizeof *c);
}

/* out = 0.5 * silu(mul_mat(w, x) + b), everything in one buffer of be,
 * filled from a fixed seed (both workers and the reference compute the
 * same function of the same data). */
static bool cg_make(cg *c, tsl_backend *be) {
    memset(c, 0, sizeof *c);
    c->ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 16, .no_alloc = true});
    if (!c->ctx) return false;
    c->w = tsl_tensor_set_name(tsl_new_tensor_2d(c->ctx, TSL_TYPE_Q8_0, K, M), "w");
    c->x = tsl_tensor_set_name(tsl_new_tensor_2d(c->ctx, TSL_TYPE_F32, K, N_COLS), "x");
    c->b = tsl_tensor_set_name(tsl_new_tensor_1d(c->ctx, TSL_TYPE_F32, M), "b");
    c->mm = tsl_tensor_set_name(tsl_mul_mat(c->ctx, c->w, c->x), "mm");
    tsl_tensor *y = tsl_silu(c->ctx, tsl_add(c->ctx, c->mm, c->b));
    c->out = tsl_tensor_set_name(tsl_scale(c->ctx, y, 0.5f), "out");
    if (!c->out) return false;
    c->g = tsl_graph_build(c->ctx, &c->out, 1);
    if (!c->g) return false;
    c->mm_node = tsl_graph_node_index(c->g, c->mm);
    tsl_error err;
    c->buf = tsl_buffer_alloc_ctx(be, c->ctx, &err);
    if (!c->buf) return false;
    float v[K * M];
    unsigned char q[sizeof v];
    unsigned long long s = 1234;
    for (int i = 0; i < K * M; i++) v[i] = test_rand_f(&s, -1, 1);
    size_t qb = tsl_quantize(TSL_TYPE_Q8_0, v, q, K * M);
    bool ok = qb == tsl_nbytes(c->w) && tsl_tensor_set(c->w, q, 0, qb, &err) == TSL_SUCCESS;
    for (int i = 0; i < K * N_COLS; i++) v[i] = test_rand_f(&s, -1, 1);
    ok = ok && tsl_tensor_set(c->x, v, 0, sizeof(float) * K * N_COLS, &err) == TSL_SUCCESS;
    for (int i = 0; i < M; i++) v[i] = test_rand_f(&s, -1, 1);
    ok = ok && tsl_tensor_set(c->b, v, 0, sizeof(float) * M, &err) == TSL_SUCCESS;
    return ok;
}

/* ---- the workers ---------------------------------------------------------------- */

typedef struct worker {
    bool faulty;
    bool ready;          /* backend and graph were made */
    int n_done;          /* computes run */
    int n_failed;        /* computes that did not return SUCCESS */
    int n_wrong_status;  /* a failure where none was due, or success where one was */
    int n_wrong_record;  /* a failure whose record does not name the weight, its node, the backend */
    int n_wrong_output;  /* a success whose output differs from the reference */
    uint64_t n_injected; /* nobuf faults that fired on its backend */
    double seconds;
    char first_problem[512];
    pthread_barrier_t *start;
} worker;

static void note(worker *w, int c, const char *what, const tsl_error *e) {
    if (w->first_problem[0]) return;
    char line[400] = "";
    if (e) tsl_error_format(e, line, sizeof line);
    snprintf(w->first_problem, sizeof w->first_problem, "compute %d: %s: %s", c, what, line);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *run_worker(void *arg) {
    worker *w = arg;
    tsl_error err;
    tsl_error_clear(&err);
    tsl_backend *be = tsl_backend_vulkan_new(g_index, &err);
    cg c;
    memset(&c, 0, sizeof c);
    w->ready = be && cg_make(&c, be);
    if (w->ready && w->faulty) w->ready = tsl_backend_inject(be, "nobuf@compute%7,tensor=w", &err) == TSL_SUCCESS;
    if (!w->ready) note(w, 0, "setup failed", &err);
    pthread_barrier_wait(w->start); /* both compute at the same time */
    float out[M * N_COLS];
    double t0 = now_s();
    for (int i = 1; w->ready && i <= N_COMPUTES; i++) {
        tsl_error_clear(&err);
        tsl_status s = tsl_backend_graph_compute(be, c.g, &err);
        bool due = w->faulty && i % EVERY == 0;
        w->n_done++;
        if (s != TSL_SUCCESS) w->n_failed++;
        if ((s == TSL_FAILED) != due || (s != TSL_SUCCESS && s != TSL_FAILED)) {
            w->n_wrong_status++;
            note(w, i, due ? "no failure where one was injected" : "unexpected status", &err);
            continue;
        }
        if (due) {
            if (strcmp(err.tensor, "w") != 0 || err.node != c.mm_node || strcmp(err.op, "MUL_MAT") != 0 ||
                strcmp(err.backend, tsl_backend_name(be)) != 0 || err.status != TSL_FAILED) {
                w->n_wrong_record++;
                note(w, i, "wrong record", &err);
            }
            continue;
        }
        if (tsl_tensor_get(c.out, out, 0, sizeof out, &err) != TSL_SUCCESS || memcmp(out, g_ref, sizeof out) != 0) {
            w->n_wrong_output++;
            note(w, i, "wrong output", &err);
        }
    }
    w->seconds = now_s() - t0;
    w->n_injected = be ? tsl_backend_injected(be, TSL_FAULT_NOBUF) : 0;
    cg_free(&c);
    tsl_backend_free(be);
    return NULL;
}

/* The fault-free result, computed alone on a backend of the same device
 * before the workers start (and checked for being a real result). */
static bool reference(void) {
    tsl_error err;
    tsl_backend *be = tsl_backend_vulkan_new(g_index, &err);
    cg c;
    bool ok = be && cg_make(&c, be) && tsl_backend_graph_compute(be, c.g, &err) == TSL_SUCCESS &&
              tsl_tensor_get(c.out, g_ref, 0, sizeof g_ref, &err) == TSL_SUCCESS;
    double mag = 0;
    for (int i = 0; ok && i < M * N_COLS; i++) {
        if (!isfinite(g_ref[i])) ok = false;
        mag += fabs((double)g_ref[i]);
    }
    if (be) cg_free(&c);
    tsl_backend_free(be);
    return ok && mag > 0;
}

static void test_two_contexts_one_device_one_faulty(void) {
    CHECK(reference());
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    worker w[2];
    memset(w, 0, sizeof w);
    w[1].faulty = true;
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        w[i].start = &start;
        CHECK(pthread_create(&th[i], NULL, run_worker, &w[i]) == 0);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < 2; i++) {
        CHECKF(w[i].ready, "%s: %s", i ? "faulty" : "clean", w[i].first_problem);
        CHECKF(w[i].n_done == N_COMPUTES, "%s: %d computes", i ? "faulty" : "clean", w[i].n_done);
        CHECKF(w[i].n_wrong_status == 0 && w[i].n_wrong_record == 0 && w[i].n_wrong_output == 0,
               "%s: %d wrong statuses, %d wrong records, %d wrong outputs; first: %s", i ? "faulty" : "clean",
               w[i].n_wrong_status, w[i].n_wrong_record, w[i].n_wrong_output, w[i].first_problem);
    }
    CHECK(w[0].n_failed == 0);
    CHECK(w[1].n_failed == N_COMPUTES / EVERY);
    CHECK(w[0].n_injected == 0 && w[1].n_injected == N_COMPUTES / EVERY);
    printf("     clean: %d of %d failed (%.2f s); faulty: %d of %d failed, every %dth (%.2f s)\n", w[0].n_failed,
           N_COMPUTES, w[0].seconds, w[1].n_failed, N_COMPUTES, EVERY, w[1].seconds);
}

/* Every backend is gone (so the device was destroyed and the layer has
 * checked for objects left behind); a new backend only reads the counter,
 * which is process-wide. */
static void test_validation(void) {
    tsl_error err;
    tsl_backend *be = tsl_backend_vulkan_new(g_index, &err);
    CHECK(be != NULL);
    tsl_vulkan_stats s;
    CHECK(be && tsl_backend_vulkan_stats(be, &s) == TSL_SUCCESS);
    if (be)
        CHECKF(s.validation_errors == 0, "the validation layer reported %llu errors (see the log above)",
               (unsigned long long)s.validation_errors);
    tsl_backend_free(be);
    bool asked = vkh_env_on("TSL_VULKAN_VALIDATE");
    printf("     validation layer: %s\n", !asked ? "off (TSL_VULKAN_VALIDATE=0)"
                                          : atomic_load(&vkh_layer_on) ? "on, no errors"
                                                                     : "asked for, not loaded");
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
    tsl_backend *be = tsl_backend_vulkan_new(-1, &err);
    tsl_vulkan_device_info info;
    if (!be || tsl_backend_vulkan_info(be, &info, &err) != TSL_SUCCESS) {
        char line[512];
        tsl_error_format(&err, line, sizeof line);
        fprintf(stderr, "FAIL: could not make a Vulkan backend: %s\n", line);
        tsl_backend_free(be);
        return 1;
    }
    g_index = info.index;
    printf("device: %s %s\n", tsl_backend_name(be), info.name);
    tsl_backend_free(be);
    RUN(test_two_contexts_one_device_one_faulty);
    RUN(test_validation);
    tsl_log_set(NULL, NULL);
    return test_summary();
}

#endif /* TSL_HAVE_VULKAN */
