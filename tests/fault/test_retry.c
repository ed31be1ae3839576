/* Transient outcomes on the CPU backend (FAULTS.md sections 7 and 9): a
 * RETRY and an ABORTED each followed by a rerun that gives the clean logits
 * bit for bit; tsl_graph_compute_retry doing the reruns by policy, with the
 * expected number of attempts, falling back to a second backend when every
 * attempt is refused, and never repeating a FAILED; and the availability
 * gate, which answers RETRY at once without running or counting a compute.
 *
 * Attempts are counted with an availability gate that is always open: the
 * backend asks it once per compute it is given. */
#include "llama_graph.h"

static const unsigned long long SEED = 777;
static float g_ref[LG_VOCAB * LG_TOK];

typedef struct gate {
    int calls;
    int closed_for; /* answer "not available" to the first closed_for calls */
} gate;

static bool gate_fn(void *user) {
    gate *g = user;
    return ++g->calls > g->closed_for;
}

static bool make(lg_model *m, tsl_backend **be, int n_threads) {
    tsl_error err;
    *be = tsl_backend_cpu_new(n_threads, &err);
    if (!*be) return false;
    if (!lg_init(m, *be, SEED)) {
        tsl_backend_free(*be);
        *be = NULL;
        return false;
    }
    return true;
}

static void unmake(lg_model *m, tsl_backend *be) {
    lg_free(m);
    tsl_backend_free(be);
}

static bool logits_clean(const lg_model *m) {
    float out[LG_VOCAB * LG_TOK];
    return lg_read(m, out, NULL) == TSL_SUCCESS && memcmp(out, g_ref, sizeof out) == 0;
}

static tsl_retry_policy fast_policy(int attempts) {
    tsl_retry_policy p = tsl_retry_default();
    p.max_attempts = attempts;
    p.backoff_ms = 1;
    p.backoff_factor = 2.0;
    p.max_backoff_ms = 4;
    return p;
}

static void test_retry_then_rerun(void) {
    lg_model m;
    tsl_backend *be;
    if (!make(&m, &be, 2)) {
        CHECK(!"setup");
        return;
    }
    tsl_error err;
    CHECK(tsl_backend_inject(be, "retry@times=1", &err) == TSL_SUCCESS);
    CHECK(lg_poison(&m, &err) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(be, m.g, &err) == TSL_RETRY);
    CHECK(err.status == TSL_RETRY && err.node == -1 && !strcmp(err.backend, "cpu"));
    CHECK_STR_CONTAINS(lg_line(&err), "cpu (");
    CHECK_STR_CONTAINS(lg_line(&err), "RETRY");
    CHECK_STR_CONTAINS(lg_line(&err), "retry later");
    CHECK(lg_is_poisoned(&m)); /* nothing ran */
    CHECK(!tsl_backend_is_lost(be)); /* nothing latched */
    CHECK(tsl_backend_graph_compute(be, m.g, &err) == TSL_SUCCESS);
    CHECK(logits_clean(&m));
    CHECK(tsl_backend_injected(be, TSL_FAULT_RETRY) == 1);
    unmake(&m, be);
}

typedef struct {
    int calls, stop_at;
} stopper;

static bool stop_fn(void *user) {
    stopper *s = user;
    return ++s->calls == s->stop_at;
}

static void test_abort_then_rerun(void) {
    lg_model m;
    tsl_backend *be;
    if (!make(&m, &be, 2)) {
        CHECK(!"setup");
        return;
    }
    /* the callback is polled before each compute node after the first: the
     * 5th poll stops before compute node 5 (0-based) */
    int want = -1;
    for (int i = 0, k = 0; i < m.g->n_nodes && want < 0; i++) {
        tsl_tensor *t = m.g->nodes[i];
        if (tsl_op_is_view(t->op) || t->op == TSL_OP_NONE) continue;
        if (k++ == 5) want = i;
    }
    stopper st = {0, 5};
    tsl_backend_set_abort_callback(be, stop_fn, &st);
    tsl_error err;
    CHECK(tsl_backend_graph_compute(be, m.g, &err) == TSL_ABORTED);
    CHECK(err.status == TSL_ABORTED && err.node == want);
    CHECK(!strcmp(err.op, tsl_op_name(m.g->nodes[want]->op)) && !strcmp(err.tensor, m.g->nodes[want]->name));
    char at[32];
    snprintf(at, sizeof at, "at node %d", want);
    CHECK_STR_CONTAINS(lg_line(&err), at);
    CHECK_STR_CONTAINS(lg_line(&err), "ABORTED");
    CHECK_STR_CONTAINS(lg_line(&err), m.g->nodes[want]->name);
    CHECK(!logits_clean(&m)); /* the output node did not run */
    CHECK(tsl_backend_graph_compute(be, m.g, &err) == TSL_SUCCESS); /* stop_at passed: runs through */
    CHECK(logits_clean(&m));
    tsl_backend_set_abort_callback(be, NULL, NULL);
    unmake(&m, be);
}

/* tsl_graph_compute_retry: spec refuses some computes; returns the status,
 * and the attempts made (gate calls) in *attempts. */
static tsl_status retry_case(const char *spec, int max_attempts, int *attempts, lg_model *m, tsl_backend *be,
                             tsl_error *err) {
    gate gt = {0, 0};
    tsl_backend_set_gate(be, gate_fn, &gt);
    CHECK(tsl_backend_inject(be, spec, err) == TSL_SUCCESS);
    CHECK(lg_poison(m, err) == TSL_SUCCESS);
    tsl_retry_policy p = fast_policy(max_attempts);
    tsl_status s = tsl_graph_compute_retry(be, m->g, &p, err);
    *attempts = gt.calls;
    tsl_backend_set_gate(be, NULL, NULL);
    return s;
}

static void test_retry_policy(void) {
    tsl_error err;
    int attempts;
    lg_model m;
    tsl_backend *be;
    /* refused once: the second attempt succeeds */
    if (!make(&m, &be, 2)) {
        CHECK(!"setup");
        return;
    }
    CHECK(retry_case("retry@compute=1", 3, &attempts, &m, be, &err) == TSL_SUCCESS);
    CHECK(attempts == 2);
    CHECK(logits_clean(&m));
    unmake(&m, be);
    /* refused twice: the third */
    if (!make(&m, &be, 2)) {
        CHECK(!"setup");
        return;
    }
    CHECK(retry_case("retry@compute=1;retry@compute=2", 3, &attempts, &m, be, &err) == TSL_SUCCESS);
    CHECK(attempts == 3);
    CHECK(logits_clean(&m));
    CHECK(tsl_backend_injected(be, TSL_FAULT_RETRY) == 2);
    unmake(&m, be);
    /* refused more often than the policy allows: RETRY, the last attempt's record */
    if (!make(&m, &be, 2)) {
        CHECK(!"setup");
        return;
    }
    CHECK(retry_case("retry@compute<3", 2, &attempts, &m, be, &err) == TSL_RETRY);
    CHECK(attempts == 2);
    CHECK(err.status == TSL_RETRY && err.split == -1);
    CHECK_STR_CONTAINS(lg_line(&err), "RETRY");
    CHECK(lg_is_poisoned(&m));
    CHECK(tsl_backend_graph_compute(be, m.g, &err) == TSL_SUCCESS); /* compute 3 */
    CHECK(logits_clean(&m));
    unmake(&m, be);
    /* FAILED is not retried: the same graph would fail the same way */
    if (!make(&m, &be, 2)) {
        CHECK(!"setup");
        return;
    }
    CHECK(retry_case("nobuf@tensor=blk.0.ffn_up.weight", 3, &attempts, &m, be, &err) == TSL_FAILED);
    CHECK(attempts == 1);
    CHECK(!strcmp(err.tensor, "blk.0.ffn_up.weight") && err.node == lg_node(&m, "ffn_up-0"));
    tsl_backend_inject_clear(be);
    unmake(&m, be);
}

/* Every attempt refused: the graph runs once on the fallback backend. */
static void test_retry_fallback(void) {
    tsl_error err;
    lg_model m;
    tsl_backend *be;
    if (!make(&m, &be, 2)) {
        CHECK(!"setup");
        return;
    }
    tsl_backend *cpu2 = tsl_backend_cpu_new(1, &err);
    CHECK(cpu2 != NULL);
    if (!cpu2) {
        unmake(&m, be);
        return;
    }
    gate g1 = {0, 0}, g2 = {0, 0};
    tsl_backend_set_gate(be, gate_fn, &g1);
    tsl_backend_set_gate(cpu2, gate_fn, &g2);
    CHECK(tsl_backend_inject(be, "retry", &err) == TSL_SUCCESS);
    CHECK(lg_poison(&m, &err) == TSL_SUCCESS);
    tsl_retry_policy p = fast_policy(3);
    p.fallback = cpu2;
    CHECK(tsl_graph_compute_retry(be, m.g, &p, &err) == TSL_SUCCESS);
    CHECK(g1.calls == 3 && g2.calls == 1);
    CHECK(logits_clean(&m));
    CHECK(tsl_backend_injected(be, TSL_FAULT_RETRY) == 3);
    /* the fallback refusing too: RETRY, its record */
    CHECK(tsl_backend_inject(cpu2, "retry", &err) == TSL_SUCCESS);
    CHECK(tsl_graph_compute_retry(be, m.g, &p, &err) == TSL_RETRY);
    CHECK(g1.calls == 6 && g2.calls == 2);
    CHECK(err.status == TSL_RETRY);
    CHECK(!tsl_backend_is_lost(be) && !tsl_backend_is_lost(cpu2));
    tsl_backend_inject_clear(be);
    tsl_backend_inject_clear(cpu2);
    CHECK(tsl_backend_graph_compute(be, m.g, &err) == TSL_SUCCESS);
    CHECK(logits_clean(&m));
    tsl_backend_set_gate(be, NULL, NULL);
    tsl_backend_set_gate(cpu2, NULL, NULL);
    tsl_backend_free(cpu2);
    unmake(&m, be);
}

static void test_gate(void) {
    tsl_error err;
    lg_model m;
    tsl_backend *be;
    if (!make(&m, &be, 2)) {
        CHECK(!"setup");
        return;
    }
    CHECK(tsl_backend_graph_compute(be, m.g, &err) == TSL_SUCCESS); /* compute 1 */
    gate gt = {0, 1000};
    tsl_backend_set_gate(be, gate_fn, &gt);
    CHECK(lg_poison(&m, &err) == TSL_SUCCESS);
    for (int i = 0; i < 3; i++) {
        CHECK(tsl_backend_graph_compute(be, m.g, &err) == TSL_RETRY);
        CHECK(err.status == TSL_RETRY && err.node == -1);
        CHECK_STR_CONTAINS(err.message, "gate");
        CHECK_STR_CONTAINS(lg_line(&err), "RETRY");
    }
    CHECK(tsl_backend_graph_compute_async(be, m.g, &err) == TSL_RETRY);
    CHECK(lg_is_poisoned(&m)); /* nothing ran */
    CHECK(gt.calls == 4);
    /* none of the refused computes was counted: the next one the backend
     * runs is compute 2, which this rule refuses (a counted gate would make
     * it compute 6) */
    CHECK(tsl_backend_inject(be, "retry@compute=2", &err) == TSL_SUCCESS);
    gt.closed_for = 0;
    CHECK(tsl_backend_graph_compute(be, m.g, &err) == TSL_RETRY);
    CHECK_STR_CONTAINS(err.message, "refused");
    CHECK(tsl_backend_injected(be, TSL_FAULT_RETRY) == 1);
    CHECK(tsl_backend_graph_compute(be, m.g, &err) == TSL_SUCCESS); /* compute 3 */
    CHECK(logits_clean(&m));
    tsl_backend_inject_clear(be);
    /* the retry policy waits out a gate that opens after two refusals */
    gt.calls = 0;
    gt.closed_for = 2;
    CHECK(lg_poison(&m, &err) == TSL_SUCCESS);
    tsl_retry_policy p = fast_policy(4);
    CHECK(tsl_graph_compute_retry(be, m.g, &p, &err) == TSL_SUCCESS);
    CHECK(gt.calls == 3);
    CHECK(logits_clean(&m));
    tsl_backend_set_gate(be, NULL, NULL);
    unmake(&m, be);
}

int main(void) {
    if (!lg_reference(SEED, 1, g_ref)) {
        fprintf(stderr, "the clean reference run failed\n");
        return 1;
    }
    RUN(test_retry_then_rerun);
    RUN(test_abort_then_rerun);
    RUN(test_retry_policy);
    RUN(test_retry_fallback);
    RUN(test_gate);
    return test_summary();
}
