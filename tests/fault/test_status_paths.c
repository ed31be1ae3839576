/* Every status path of the fault contract on the CPU backend, through
 * injection, on a llama-shaped graph (llama_graph.h): a missing buffer (a
 * weight, an activation as a node, an activation as a source), a kernel that
 * fails to build, a buffer and a scratch allocation that fail, an abort at a
 * node, a refused compute (RETRY), and a lost device. Each gives the right
 * status and a record naming the right node, op, tensor and kernel; the
 * failures found before anything ran leave the output untouched; and the
 * next compute (after the rule is gone, and after recovery where the status
 * asks for it) gives the clean run's logits bit for bit. The TSL_FAULT
 * environment path runs in a child process. Last, the cost of the ledger and
 * the injection checks on a graph where nothing fails. */
#include <spawn.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend_impl.h"
#include "cpu/cpu.h"
#include "fault/fault.h"
#include "llama_graph.h"

extern char **environ;

static const unsigned long long SEED = 1234;
static float g_ref[LG_VOCAB * LG_TOK];

/* Check a record field by field, and its formatted line. node < 0: none;
 * op/tensor/kernel NULL: not checked, "" : must be empty. */
static void check_record(const tsl_error *e, tsl_status st, int node, const char *op, const char *tensor,
                         const char *kernel) {
    CHECKF(e->status == st, "status %s, want %s", tsl_status_str(e->status), tsl_status_str(st));
    CHECKF(e->node == node, "node %d, want %d", (int)e->node, node);
    CHECK(strcmp(e->backend, "cpu") == 0);
    CHECK(e->device[0] != 0);
    CHECK(e->message[0] != 0 && e->hint[0] != 0);
    if (op) CHECKF(strcmp(e->op, op) == 0, "op '%s', want '%s'", e->op, op);
    if (tensor) CHECKF(strcmp(e->tensor, tensor) == 0, "tensor '%s', want '%s'", e->tensor, tensor);
    if (kernel) CHECKF(strcmp(e->kernel, kernel) == 0, "kernel '%s', want '%s'", e->kernel, kernel);
    const char *line = lg_line(e);
    CHECK_STR_CONTAINS(line, "cpu (");
    CHECK_STR_CONTAINS(line, tsl_status_str(st));
    char buf[96];
    if (node >= 0) {
        snprintf(buf, sizeof buf, "at node %d", node);
        CHECK_STR_CONTAINS(line, buf);
    }
    if (op && op[0]) CHECK_STR_CONTAINS(line, op);
    if (tensor && tensor[0]) {
        snprintf(buf, sizeof buf, "'%s'", tensor);
        CHECK_STR_CONTAINS(line, buf);
    }
    if (kernel && kernel[0]) {
        snprintf(buf, sizeof buf, "kernel %s", kernel);
        CHECK_STR_CONTAINS(line, buf);
    }
}

/* The next compute gives the clean run's logits, bit for bit. */
static void check_clean(lg_model *m) {
    tsl_error err;
    float out[LG_VOCAB * LG_TOK];
    tsl_status s = tsl_backend_graph_compute(m->be, m->g, &err);
    CHECKF(s == TSL_SUCCESS, "%s", lg_line(&err));
    CHECK(lg_read(m, out, &err) == TSL_SUCCESS);
    CHECK(memcmp(out, g_ref, sizeof out) == 0);
}

/* A backend of n threads and the model on it, with one clean compute done
 * (compute 1) and checked against the reference. */
static bool setup(lg_model *m, int n_threads) {
    tsl_error err;
    tsl_backend *be = tsl_backend_cpu_new(n_threads, &err);
    CHECK(be != NULL);
    if (!be) return false;
    if (!lg_init(m, be, SEED)) {
        CHECK(!"lg_init");
        tsl_backend_free(be);
        return false;
    }
    check_clean(m);
    return true;
}

static void teardown(lg_model *m) {
    tsl_backend *be = m->be;
    lg_free(m);
    tsl_backend_free(be);
}

/* The first node with this op whose src0 has this type (any type: COUNT). */
static int first_node(const lg_model *m, tsl_op op, tsl_type src0) {
    for (int i = 0; i < m->g->n_nodes; i++) {
        const tsl_tensor *t = m->g->nodes[i];
        if (t->op == op && (src0 == TSL_TYPE_COUNT || (t->src[0] && t->src[0]->type == src0))) return i;
    }
    return -1;
}

/* Inject spec, poison the logits, compute: returns the status, record in err. */
static tsl_status inject_and_compute(lg_model *m, const char *spec, tsl_error *err) {
    tsl_error e2;
    CHECK(tsl_backend_inject(m->be, spec, &e2) == TSL_SUCCESS);
    CHECK(lg_poison(m, &e2) == TSL_SUCCESS);
    return tsl_backend_graph_compute(m->be, m->g, err);
}

/* ---- FAILED: missing buffers ---------------------------------------------------- */

static void test_nobuf_weight(void) {
    lg_model m;
    if (!setup(&m, 2)) return;
    tsl_error err;
    int k1 = lg_node(&m, "Kcur-1");
    CHECK(k1 > 0);
    CHECK(inject_and_compute(&m, "nobuf@tensor=blk.1.attn_k.weight", &err) == TSL_FAILED);
    check_record(&err, TSL_FAILED, k1, "MUL_MAT", "blk.1.attn_k.weight", "");
    CHECK_STR_CONTAINS(err.message, "read by 'Kcur-1'");
    CHECK_STR_CONTAINS(err.message, "no data");
    CHECK(lg_is_poisoned(&m)); /* nothing ran, not even the nodes before Kcur-1 */
    /* the same graph fails the same way while the fault stays */
    CHECK(tsl_backend_graph_compute(m.be, m.g, &err) == TSL_FAILED);
    check_record(&err, TSL_FAILED, k1, "MUL_MAT", "blk.1.attn_k.weight", "");
    CHECK(tsl_backend_injected(m.be, TSL_FAULT_NOBUF) == 2);
    CHECK(!tsl_backend_is_lost(m.be));
    tsl_backend_inject_clear(m.be);
    check_clean(&m);
    teardown(&m);
}

static void test_nobuf_activation(void) {
    lg_model m;
    if (!setup(&m, 2)) return;
    tsl_error err;
    /* the activation's own lookup, at the node that writes it */
    int sw = lg_node(&m, "ffn_swiglu-0");
    CHECK(sw > 0);
    CHECK(inject_and_compute(&m, "nobuf@tensor=ffn_swiglu-0", &err) == TSL_FAILED);
    check_record(&err, TSL_FAILED, sw, "SWIGLU", "ffn_swiglu-0", "");
    CHECK(lg_is_poisoned(&m));
    tsl_backend_inject_clear(m.be);
    check_clean(&m);

    /* an activation looked up as a source: the record names the reader's
     * node and op and the missing tensor */
    char spec[96];
    snprintf(spec, sizeof spec, "nobuf@tensor=ffn_gate-1,node=%d", lg_node(&m, "ffn_swiglu-1"));
    CHECK(inject_and_compute(&m, spec, &err) == TSL_FAILED);
    check_record(&err, TSL_FAILED, lg_node(&m, "ffn_swiglu-1"), "SWIGLU", "ffn_gate-1", "");
    CHECK_STR_CONTAINS(err.message, "read by 'ffn_swiglu-1'");
    CHECK(lg_is_poisoned(&m));
    tsl_backend_inject_clear(m.be);
    check_clean(&m);
    teardown(&m);
}

/* ---- FAILED: kernels ----------------------------------------------------------------- */

static void test_kernel_failure(void) {
    lg_model m;
    if (!setup(&m, 2)) return;
    tsl_error err;
    tsl_tensor *q0 = tsl_ctx_get_tensor(m.gctx, "Qcur-0"), *up1 = tsl_ctx_get_tensor(m.gctx, "ffn_up-1");
    tsl_tensor *outp = tsl_ctx_get_tensor(m.gctx, "result_output");
    CHECK(tsl_backend_supports_op(m.be, q0) && tsl_backend_supports_op(m.be, up1));
    /* the first node that needs the kernel is named */
    int qi = first_node(&m, TSL_OP_MUL_MAT, TSL_TYPE_Q8_0);
    CHECK(qi > 0);
    const char *qname = m.g->nodes[qi]->name;
    CHECK(inject_and_compute(&m, "kernel@name=cpu_mul_mat_q8_0_f32", &err) == TSL_FAILED);
    check_record(&err, TSL_FAILED, qi, "MUL_MAT", qname, "cpu_mul_mat_q8_0_f32");
    CHECK_STR_CONTAINS(err.driver_text, "injected");
    CHECK_STR_CONTAINS(lg_line(&err), "could not be built");
    CHECK(lg_is_poisoned(&m));
    /* cached: every node needing it is refused, others are not */
    CHECK(!tsl_backend_supports_op(m.be, q0));
    CHECK(!tsl_backend_supports_op(m.be, up1));
    CHECK(tsl_backend_supports_op(m.be, outp)); /* F32 weights: cpu_mul_mat_f32_f32 */
    CHECK(tsl_backend_supports_op(m.be, tsl_ctx_get_tensor(m.gctx, "Qrope-0")));

    /* the rule is gone, the kernel stays broken: no new build is attempted */
    tsl_backend_inject_clear(m.be);
    uint64_t fired = tsl_backend_injected(m.be, TSL_FAULT_KERNEL);
    CHECK(fired == 1);
    CHECK(lg_poison(&m, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(m.be, m.g, &err) == TSL_FAILED);
    check_record(&err, TSL_FAILED, qi, "MUL_MAT", qname, "cpu_mul_mat_q8_0_f32");
    CHECK_STR_CONTAINS(err.driver_text, "injected"); /* the original build failure's text */
    CHECK(lg_is_poisoned(&m));
    CHECK(tsl_backend_injected(m.be, TSL_FAULT_KERNEL) == fired);
    CHECK(!tsl_backend_supports_op(m.be, q0));
    CHECK(!tsl_backend_is_lost(m.be)); /* FAILED latches nothing */

    /* recovery rebuilds the kernels */
    CHECK(tsl_backend_recover(m.be, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_supports_op(m.be, q0));
    check_clean(&m);

    /* another kernel, by name: the first node that needs it is named */
    int ri = first_node(&m, TSL_OP_ROPE, TSL_TYPE_COUNT);
    CHECK(ri > 0);
    CHECK(inject_and_compute(&m, "kernel@name=cpu_rope_f32_i32", &err) == TSL_FAILED);
    check_record(&err, TSL_FAILED, ri, "ROPE", m.g->nodes[ri]->name, "cpu_rope_f32_i32");
    CHECK(lg_is_poisoned(&m));
    tsl_backend_inject_clear(m.be);
    CHECK(tsl_backend_recover(m.be, &err) == TSL_SUCCESS);
    check_clean(&m);
    teardown(&m);
}

/* tsl_backend_build_kernels builds every kernel the CPU serves and reports
 * each; a failure is cached and refuses its nodes. */
typedef struct {
    int n, n_failed, saw_q8, saw_rope, saw_dup;
    char failed[64];
    tsl_error rec;
} kreport;

static void on_kernel(const char *name, tsl_status st, const tsl_error *err, void *user) {
    kreport *r = user;
    r->n++;
    if (!strcmp(name, "cpu_mul_mat_q8_0_f32")) r->saw_q8 = 1;
    if (!strcmp(name, "cpu_rope_f32_i32")) r->saw_rope = 1;
    if (!strcmp(name, "cpu_dup_f32_f16")) r->saw_dup = 1;
    CHECK(strncmp(name, "cpu_", 4) == 0);
    CHECK((st == TSL_SUCCESS) == (err == NULL));
    if (st != TSL_SUCCESS) {
        r->n_failed++;
        snprintf(r->failed, sizeof r->failed, "%s", name);
        r->rec = *err;
    }
}

static void test_build_kernels(void) {
    lg_model m;
    if (!setup(&m, 1)) return;
    tsl_error err;
    kreport r;
    memset(&r, 0, sizeof r);
    CHECK(tsl_backend_build_kernels(m.be, on_kernel, &r) == 0);
    CHECK(r.n > 40 && r.n_failed == 0);
    CHECK(r.saw_q8 && r.saw_rope && r.saw_dup);
    int total = r.n;

    CHECK(tsl_backend_inject(m.be, "kernel@name=cpu_swiglu_f32_f32", &err) == TSL_SUCCESS);
    memset(&r, 0, sizeof r);
    CHECK(tsl_backend_build_kernels(m.be, on_kernel, &r) == 1);
    CHECK(r.n == total && r.n_failed == 1 && !strcmp(r.failed, "cpu_swiglu_f32_f32"));
    CHECK(r.rec.status == TSL_FAILED && !strcmp(r.rec.kernel, "cpu_swiglu_f32_f32"));
    CHECK_STR_CONTAINS(r.rec.driver_text, "injected");
    tsl_backend_inject_clear(m.be);
    /* the failure is cached: still failed without the rule */
    memset(&r, 0, sizeof r);
    CHECK(tsl_backend_build_kernels(m.be, NULL, NULL) == 1);
    CHECK(!tsl_backend_supports_op(m.be, tsl_ctx_get_tensor(m.gctx, "ffn_swiglu-0")));
    int si = lg_node(&m, "ffn_swiglu-0");
    CHECK(lg_poison(&m, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(m.be, m.g, &err) == TSL_FAILED);
    check_record(&err, TSL_FAILED, si, "SWIGLU", "ffn_swiglu-0", "cpu_swiglu_f32_f32");
    CHECK(lg_is_poisoned(&m));
    CHECK(tsl_backend_recover(m.be, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_build_kernels(m.be, NULL, NULL) == 0);
    check_clean(&m);
    teardown(&m);
}

/* ---- ALLOC_FAILED ---------------------------------------------------------------------- */

static void test_alloc_buffer(void) {
    lg_model m;
    if (!setup(&m, 2)) return;
    tsl_error err;
    CHECK(tsl_backend_inject(m.be, "alloc@bytes=123456", &err) == TSL_SUCCESS);
    tsl_buffer *b = tsl_buffer_alloc(m.be, 123456, &err);
    CHECK(b == NULL);
    check_record(&err, TSL_ALLOC_FAILED, -1, "", "", "");
    CHECK_STR_CONTAINS(err.message, "123456");
    tsl_buffer *b2 = tsl_buffer_alloc(m.be, 123392, &err); /* other sizes are not hit */
    CHECK(b2 != NULL);
    tsl_buffer_free(b2);
    CHECK(!tsl_backend_is_lost(m.be));
    check_clean(&m); /* the backend is fine */
    tsl_backend_inject_clear(m.be);
    b = tsl_buffer_alloc(m.be, 123456, &err);
    CHECK(b != NULL);
    tsl_buffer_free(b);

    /* through the graph allocator: a second graph needs its own buffer */
    tsl_context *c2 = tsl_ctx_new((tsl_ctx_params){.mem_size = 1 << 16, .no_alloc = true});
    tsl_tensor *x = tsl_ctx_get_tensor(m.wctx_b, "output.weight");
    tsl_tensor *y = tsl_tensor_set_name(tsl_scale(c2, x, 2.0f), "scaled_output");
    tsl_graph *g2 = tsl_graph_build(c2, &y, 1);
    tsl_gallocr *ga2 = tsl_gallocr_new(m.be);
    CHECK(g2 && ga2);
    CHECK(tsl_backend_inject(m.be, "alloc@times=1", &err) == TSL_SUCCESS);
    CHECK(tsl_gallocr_alloc_graph(ga2, g2, &err) == TSL_ALLOC_FAILED);
    CHECK(err.status == TSL_ALLOC_FAILED);
    CHECK_STR_CONTAINS(lg_line(&err), "ALLOC_FAILED");
    CHECK(tsl_gallocr_alloc_graph(ga2, g2, &err) == TSL_SUCCESS); /* fired once: memory is back */
    CHECK(tsl_backend_graph_compute(m.be, g2, &err) == TSL_SUCCESS);
    tsl_gallocr_free(ga2);
    tsl_ctx_free(c2);
    tsl_backend_inject_clear(m.be);
    check_clean(&m);
    teardown(&m);
}

static void test_alloc_scratch(void) {
    /* a fresh backend: its scratch is allocated by its first compute */
    tsl_error err;
    tsl_backend *be = tsl_backend_cpu_new(1, &err);
    lg_model m;
    CHECK(be != NULL);
    if (!be) return;
    if (!lg_init(&m, be, SEED)) {
        CHECK(!"lg_init");
        tsl_backend_free(be);
        return;
    }
    /* the node that needs the most scratch (first of equals) is named */
    int want = -1;
    size_t most = 0;
    for (int i = 0; i < m.g->n_nodes; i++) {
        tsl_tensor *t = m.g->nodes[i];
        if (tsl_op_is_view(t->op) || t->op == TSL_OP_NONE) continue;
        size_t w = cpu_op_wsize(t, 1);
        if (w > most) most = w, want = i;
    }
    CHECK(want >= 0);
    CHECK(inject_and_compute(&m, "alloc@compute=1", &err) == TSL_ALLOC_FAILED);
    check_record(&err, TSL_ALLOC_FAILED, want, tsl_op_name(m.g->nodes[want]->op), m.g->nodes[want]->name, "");
    CHECK_STR_CONTAINS(err.message, "scratch");
    CHECK(lg_is_poisoned(&m));
    CHECK(tsl_backend_injected(be, TSL_FAULT_ALLOC) == 1);
    check_clean(&m); /* compute 2: the rule no longer matches */
    teardown(&m);
}

/* ---- ABORTED, RETRY --------------------------------------------------------------------- */

static void test_abort_at_node(void) {
    lg_model m;
    if (!setup(&m, 2)) return;
    tsl_error err;
    int k = lg_node(&m, "kq_soft_max-1");
    char spec[64];
    snprintf(spec, sizeof spec, "abort@node=%d,times=1", k);
    CHECK(inject_and_compute(&m, spec, &err) == TSL_ABORTED);
    check_record(&err, TSL_ABORTED, k, "SOFT_MAX", "kq_soft_max-1", "");
    /* the last node did not run: the logits are not the clean ones (the
     * nodes before k may have reused the output's memory, as the allocator
     * lets them before the output is written, so the sentinel may be gone) */
    float out[LG_VOCAB * LG_TOK];
    CHECK(lg_read(&m, out, &err) == TSL_SUCCESS);
    CHECK(memcmp(out, g_ref, sizeof out) != 0);
    CHECK(!tsl_backend_is_lost(m.be));
    check_clean(&m);
    teardown(&m);
}

static void test_retry_at_compute(void) {
    lg_model m;
    if (!setup(&m, 2)) return; /* compute 1 */
    tsl_error err;
    CHECK(tsl_backend_inject(m.be, "retry@compute=3", &err) == TSL_SUCCESS);
    check_clean(&m); /* compute 2 */
    CHECK(lg_poison(&m, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(m.be, m.g, &err) == TSL_RETRY); /* compute 3 */
    check_record(&err, TSL_RETRY, -1, "", "", "");
    CHECK_STR_CONTAINS(err.message, "refused");
    CHECK_STR_CONTAINS(err.hint, "retry");
    CHECK(lg_is_poisoned(&m));
    CHECK(!tsl_backend_is_lost(m.be));
    check_clean(&m); /* compute 4: same graph, same bytes; the rule stays but no longer matches */
    tsl_backend_inject_clear(m.be);
    teardown(&m);
}

/* ---- DEVICE_LOST ---------------------------------------------------------------------------- */

static void test_lost_at_compute(void) {
    lg_model m;
    if (!setup(&m, 2)) return; /* compute 1 */
    tsl_error err, first, later;
    CHECK(tsl_backend_inject(m.be, "lost@compute=2", &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(m.be, m.g, &first) == TSL_DEVICE_LOST);
    check_record(&first, TSL_DEVICE_LOST, -1, "", "", "");
    CHECK_STR_CONTAINS(first.message, "compute 2");
    CHECK_STR_CONTAINS(first.hint, "recover");
    CHECK(tsl_backend_is_lost(m.be));
    tsl_backend_inject_clear(m.be);
    /* latched: every later call answers at once with the original cause */
    for (int i = 0; i < 3; i++) {
        CHECK(tsl_backend_graph_compute(m.be, m.g, &later) == TSL_DEVICE_LOST);
        CHECK(!strcmp(later.message, first.message) && !strcmp(later.driver_text, first.driver_text));
        CHECK_STR_CONTAINS(lg_line(&later), "compute 2");
    }
    float out[LG_VOCAB * LG_TOK];
    CHECK(lg_read(&m, out, &later) == TSL_DEVICE_LOST);
    CHECK(!strcmp(later.message, first.message));
    CHECK(lg_set_inputs(&m, &later) == TSL_DEVICE_LOST);
    CHECK(tsl_buffer_alloc(m.be, 1024, &later) == NULL && later.status == TSL_DEVICE_LOST);
    CHECK(tsl_backend_graph_compute_async(m.be, m.g, &later) == TSL_DEVICE_LOST);
    CHECK(tsl_backend_synchronize(m.be, &later) == TSL_DEVICE_LOST);
    CHECK(!strcmp(later.message, first.message));

    CHECK(tsl_backend_recover(m.be, &err) == TSL_SUCCESS);
    CHECK(!tsl_backend_is_lost(m.be));
    CHECK(tsl_buffer_is_lost(m.ibuf)); /* the inputs came back zeroed */
    CHECK(lg_set_inputs(&m, &err) == TSL_SUCCESS);
    tsl_buffer_clear_lost(m.ibuf);
    check_clean(&m);
    teardown(&m);
}

/* ---- TSL_FAULT, in a child process ------------------------------------------------------------ */

static void env_child_body(void) {
    tsl_error err;
    tsl_backend *be = tsl_backend_cpu_new(2, &err); /* reads TSL_FAULT */
    unsetenv("TSL_FAULT");
    CHECK(be != NULL);
    if (!be) return;
    CHECK(lg_reference(SEED, 1, g_ref));
    lg_model m;
    if (!lg_init(&m, be, SEED)) {
        CHECK(!"lg_init");
        tsl_backend_free(be);
        return;
    }
    CHECK(tsl_backend_graph_compute(be, m.g, &err) == TSL_FAILED); /* compute 1 */
    check_record(&err, TSL_FAILED, lg_node(&m, "Vcur-0"), "MUL_MAT", "blk.0.attn_v.weight", "");
    CHECK(tsl_backend_graph_compute(be, m.g, &err) == TSL_RETRY); /* compute 2 */
    check_record(&err, TSL_RETRY, -1, "", "", "");
    CHECK(tsl_backend_graph_compute(be, m.g, &err) == TSL_DEVICE_LOST); /* compute 3 */
    CHECK_STR_CONTAINS(err.message, "compute 3");
    CHECK(tsl_backend_graph_compute(be, m.g, &err) == TSL_DEVICE_LOST); /* latched, not counted */
    CHECK(tsl_backend_recover(be, &err) == TSL_SUCCESS);
    CHECK(lg_set_inputs(&m, &err) == TSL_SUCCESS);
    check_clean(&m); /* compute 4 */
    CHECK(tsl_backend_injected(be, TSL_FAULT_NOBUF) == 1 && tsl_backend_injected(be, TSL_FAULT_RETRY) == 1 &&
          tsl_backend_injected(be, TSL_FAULT_LOST) == 1);
    lg_free(&m);
    tsl_backend_free(be);

    /* a malformed TSL_FAULT refuses the backend, naming the bad part */
    setenv("TSL_FAULT", "retry@compute=3;bogus@x", 1);
    tsl_backend *bad = tsl_backend_cpu_new(1, &err);
    CHECK(bad == NULL);
    CHECK(err.status == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "bogus");
    tsl_backend_free(bad);
}

static int spawn_env_child(const char *self, const char *spec) {
    int n = 0;
    while (environ[n]) n++;
    char **env = calloc((size_t)n + 2, sizeof *env);
    char fault[256];
    snprintf(fault, sizeof fault, "TSL_FAULT=%s", spec);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (strncmp(environ[i], "TSL_FAULT=", 10) != 0) env[k++] = environ[i];
    env[k++] = fault;
    env[k] = NULL;
    char *argv[] = {(char *)self, (char *)"--env-child", NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, env);
    free(env);
    if (rc != 0) return -1;
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static const char *g_self;

static void test_env_path(void) {
    int rc = spawn_env_child(g_self, "nobuf@tensor=blk.0.attn_v.weight,compute=1;retry@compute=2;lost@compute=3");
    CHECKF(rc == 0, "child exited with %d", rc);
}

/* ---- overhead when nothing fails --------------------------------------------------------------- */

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* What the fault contract adds to a compute of g when nothing fails, made
 * of the real calls the CPU backend makes (cpu_backend.c): per compute, the
 * injection-plan and kernel-cache checks (decided once), the ledger and its
 * sink on the calling thread and on each of nth run threads, the ledger
 * test, and the retry and lost injection sites; per node, the branches those
 * decisions leave (a data lookup of each source and of the node, a kernel
 * lookup). Returns ns per node (best of reps). */
static double fault_checks_ns_per_node(tsl_backend *be, const tsl_graph *g, int nth, int reps) {
    double best = 1e30;
    volatile int sink = 0;
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = now_ns();
        bool inject = !fault_plan_empty(be->faults), kfailed = backend_kernel_any_failed(be);
        fault_ledger led;
        ledger_begin(&led, "cpu", tsl_backend_device(be));
        ledger_sink_set(&led);
        bool failed = false;
        for (int i = 0; i < g->n_nodes; i++) {
            const tsl_tensor *node = *(const tsl_tensor *volatile *)&g->nodes[i];
            for (int j = 0; j < TSL_MAX_SRC; j++)
                if (node->src[j] && inject) failed = true;
            if (inject) failed = true;
            if (inject || kfailed) failed = true;
        }
        ledger_sink_clear();
        sink += failed || ledger_failed(&led);
        for (int t = 0; t < nth; t++) {
            ledger_sink_set(&led);
            ledger_sink_clear();
        }
        sink += ledger_failed(&led);
        fault_site site = {.compute = 1, .node = -1};
        sink += fault_plan_fire(be->faults, TSL_FAULT_RETRY, &site);
        sink += fault_plan_fire(be->faults, TSL_FAULT_LOST, &site);
        double dt = (double)(now_ns() - t0) / g->n_nodes;
        if (dt < best) best = dt;
    }
    CHECK(sink == 0);
    return best;
}

static double compute_ns_per_node(tsl_backend *be, tsl_graph *g, int reps, double *resolve_ns) {
    double best = 1e30, best_res = 1e30;
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = now_ns();
        CHECK(tsl_backend_graph_compute(be, g, NULL) == TSL_SUCCESS);
        double dt = (double)(now_ns() - t0) / g->n_nodes;
        double rs = (double)atomic_load(&be->resolve_ns) / g->n_nodes;
        if (dt < best) best = dt;
        if (rs < best_res) best_res = rs;
    }
    *resolve_ns = best_res;
    return best;
}

static void test_overhead(void) {
    tsl_error err;
    tsl_backend *be = tsl_backend_cpu_new(1, &err);
    CHECK(be != NULL);
    if (!be) return;
    /* 1,000 small nodes */
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 4 << 20, .no_alloc = false});
    tsl_tensor *x = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 16);
    for (int i = 0; i < 16; i++) tsl_set_f32_1d(x, i, 0.5f);
    tsl_tensor *y = x;
    for (int i = 0; i < 500; i++) y = tsl_scale(ctx, tsl_add(ctx, y, x), 0.5f);
    tsl_graph *g = tsl_graph_build(ctx, &y, 1);
    CHECK(g && g->n_nodes == 1000);
    if (!g) return;
    double res_small, comp_small = compute_ns_per_node(be, g, 50, &res_small);
    double chk_small = fault_checks_ns_per_node(be, g, 1, 50);

    lg_model m;
    if (!lg_init(&m, be, SEED)) {
        CHECK(!"lg_init");
        tsl_ctx_free(ctx);
        tsl_backend_free(be);
        return;
    }
    double res_llama, comp_llama = compute_ns_per_node(be, m.g, 30, &res_llama);
    double chk_llama = fault_checks_ns_per_node(be, m.g, 1, 50);
    double share = chk_llama / comp_llama;
    printf("     1,000 small nodes: ledger + injection checks %.1f ns/node; resolve pass %.1f ns/node; "
           "compute %.1f ns/node\n",
           chk_small, res_small, comp_small);
    printf("     llama-shaped graph (%d nodes): checks %.1f ns/node, resolve %.1f ns/node, compute %.0f ns/node: "
           "checks are %.3f%% of compute\n",
           m.g->n_nodes, chk_llama, res_llama, comp_llama, 100.0 * share);
#if !defined(__SANITIZE_ADDRESS__)
    CHECKF(share < 0.01, "the fault checks cost %.3f%% of compute", 100.0 * share);
#endif
    CHECK(chk_small < comp_small);
    lg_free(&m);
    tsl_ctx_free(ctx);
    tsl_backend_free(be);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--env-child")) {
        RUN(env_child_body);
        return test_summary();
    }
    g_self = argv[0];
    if (!lg_reference(SEED, 1, g_ref)) {
        fprintf(stderr, "the clean reference run failed\n");
        return 1;
    }
    RUN(test_nobuf_weight);
    RUN(test_nobuf_activation);
    RUN(test_kernel_failure);
    RUN(test_build_kernels);
    RUN(test_alloc_buffer);
    RUN(test_alloc_scratch);
    RUN(test_abort_at_node);
    RUN(test_retry_at_compute);
    RUN(test_lost_at_compute);
    RUN(test_env_path);
    RUN(test_overhead);
    return test_summary();
}
