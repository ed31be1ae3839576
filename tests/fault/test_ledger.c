/* The per-compute ledger and its thread-local sinks (FAULTS.md section 5):
 * records land in the sink of the block that made them, the first failure
 * wins, and lookups outside a block touch no ledger. */
#include <pthread.h>

#include "fault/fault.h"
#include "test.h"

static void test_first_failure_wins(void) {
    fault_ledger l;
    ledger_begin(&l, "cpu", "test device");
    CHECK(!ledger_failed(&l));
    tsl_error e;
    CHECK(ledger_result(&l, &e) == TSL_SUCCESS);
    tsl_tensor node, w;
    memset(&node, 0, sizeof node);
    memset(&w, 0, sizeof w);
    node.op = TSL_OP_MUL_MAT;
    snprintf(node.name, sizeof node.name, "ffn_out");
    snprintf(w.name, sizeof w.name, "blk.0.ffn_up.weight");
    ledger_sink_set(&l);
    ledger_record_nobuf(4, &node, &w);
    ledger_record_kernel(5, &node, "mul_mat_q4_0_f32", "VkResult", -13, "entry point not found");
    ledger_sink_clear();
    CHECK(ledger_failed(&l));
    CHECK(atomic_load(&l.n_nobuf) == 1 && atomic_load(&l.n_kernel) == 1);
    CHECK(ledger_result(&l, &e) == TSL_FAILED);
    CHECK(e.node == 4);
    CHECK(!strcmp(e.op, "MUL_MAT"));
    CHECK(!strcmp(e.tensor, "blk.0.ffn_up.weight"));
    CHECK(!strcmp(e.backend, "cpu"));
    CHECK_STR_CONTAINS(e.message, "no buffer");
}

static void test_kernel_record_has_driver_text(void) {
    fault_ledger l;
    ledger_begin(&l, "vulkan0", "lavapipe");
    tsl_tensor node;
    memset(&node, 0, sizeof node);
    node.op = TSL_OP_MUL_MAT;
    ledger_sink_set(&l);
    ledger_record_kernel(17, &node, "mul_mat_q4_0_f32", "VkResult", -13, "entry point not found");
    ledger_sink_clear();
    tsl_error e;
    CHECK(ledger_result(&l, &e) == TSL_FAILED);
    CHECK(e.node == 17 && !strcmp(e.kernel, "mul_mat_q4_0_f32"));
    CHECK(e.driver_code == -13 && !strcmp(e.driver_domain, "VkResult"));
    char line[512];
    tsl_error_format(&e, line, sizeof line);
    CHECK_STR_CONTAINS(line, "kernel mul_mat_q4_0_f32");
    CHECK_STR_CONTAINS(line, "entry point not found");
}

static void test_outside_a_block_only_logs(void) {
    fault_ledger l;
    ledger_begin(&l, "cpu", "");
    ledger_sink_clear();
    tsl_tensor w;
    memset(&w, 0, sizeof w);
    ledger_record_nobuf(0, &w, &w); /* no sink: logged, charged to nobody */
    CHECK(ledger_sink() == NULL);
    CHECK(!ledger_failed(&l));
}

/* Two threads, each its own ledger; one records on every 7th "compute". */
typedef struct {
    int faulty;
    int n_failed;
    int wrong;
} worker_arg;

static void *worker(void *p) {
    worker_arg *a = p;
    tsl_tensor w;
    memset(&w, 0, sizeof w);
    snprintf(w.name, sizeof w.name, a->faulty ? "faulty" : "clean");
    for (int c = 1; c <= 5000; c++) {
        fault_ledger l;
        ledger_begin(&l, "cpu", "");
        ledger_sink_set(&l);
        if (a->faulty && c % 7 == 0) ledger_record_nobuf(c, &w, &w);
        ledger_sink_clear();
        tsl_error e;
        tsl_status st = ledger_result(&l, &e);
        bool should_fail = a->faulty && c % 7 == 0;
        if (st != TSL_SUCCESS) a->n_failed++;
        if ((st != TSL_SUCCESS) != should_fail) a->wrong++;
        if (st != TSL_SUCCESS && (e.node != c || strcmp(e.tensor, "faulty"))) a->wrong++;
    }
    return NULL;
}

static void test_two_threads_never_mix(void) {
    worker_arg a = {.faulty = 1}, b = {.faulty = 0};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, worker, &a);
    pthread_create(&tb, NULL, worker, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK(a.n_failed == 5000 / 7);
    CHECK(a.wrong == 0);
    CHECK(b.n_failed == 0 && b.wrong == 0);
}

int main(void) {
    RUN(test_first_failure_wins);
    RUN(test_kernel_record_has_driver_text);
    RUN(test_outside_a_block_only_logs);
    RUN(test_two_threads_never_mix);
    return test_summary();
}
