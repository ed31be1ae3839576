/* Two computes at the same time never see each other's faults (FAULTS.md
 * section 5). Two threads, each with its own CPU backend (one thread each),
 * its own contexts and its own llama-shaped graph, compute 2,000 times each.
 * One has a buffer-lookup fault on a weight on every 7th compute: it fails
 * exactly on computes 7, 14, 21, ... with a record naming that weight, and
 * gives the clean logits, bit for bit, on every other compute. The clean one
 * never fails. Both run at once, so their ledgers' thread-local sinks are
 * live on both threads together. */
#include <pthread.h>

#include "llama_graph.h"

enum { N_COMPUTES = 2000 };
static const unsigned long long SEED = 99;
static float g_ref[LG_VOCAB * LG_TOK];

typedef struct worker {
    bool faulty;
    bool ready;          /* the model was made */
    int n_failed;        /* computes that did not return SUCCESS */
    int n_wrong_status;  /* a failure where none was due, or success where one was */
    int n_wrong_record;  /* a failure whose record does not name the weight and its node */
    int n_wrong_output;  /* a success whose logits differ from the clean run's */
    uint64_t n_injected; /* nobuf faults that fired on its backend */
    char first_problem[512];
    pthread_barrier_t *start;
} worker;

static void note(worker *w, int c, const char *what, const tsl_error *e) {
    if (w->first_problem[0]) return;
    char line[400];
    tsl_error_format(e, line, sizeof line);
    snprintf(w->first_problem, sizeof w->first_problem, "compute %d: %s: %s", c, what, line);
}

static void *run_worker(void *arg) {
    worker *w = arg;
    tsl_error err;
    tsl_backend *be = tsl_backend_cpu_new(1, &err);
    lg_model m;
    w->ready = be && lg_init(&m, be, SEED);
    if (w->ready && w->faulty)
        w->ready = tsl_backend_inject(be, "nobuf@compute%7,tensor=blk.0.attn_q.weight", &err) == TSL_SUCCESS;
    int qnode = w->ready ? lg_node(&m, "Qcur-0") : -1;
    pthread_barrier_wait(w->start); /* both compute at the same time */
    float *out = malloc(lg_out_bytes());
    for (int c = 1; w->ready && out && c <= N_COMPUTES; c++) {
        tsl_status s = tsl_backend_graph_compute(be, m.g, &err);
        bool due = w->faulty && c % 7 == 0;
        if (s != TSL_SUCCESS) w->n_failed++;
        if ((s == TSL_FAILED) != due || (s != TSL_SUCCESS && s != TSL_FAILED)) {
            w->n_wrong_status++;
            note(w, c, "unexpected status", &err);
            continue;
        }
        if (due) {
            if (err.node != qnode || strcmp(err.tensor, "blk.0.attn_q.weight") != 0 ||
                strcmp(err.op, "MUL_MAT") != 0 || strcmp(err.backend, "cpu") != 0) {
                w->n_wrong_record++;
                note(w, c, "wrong record", &err);
            }
            continue;
        }
        if (lg_read(&m, out, &err) != TSL_SUCCESS || memcmp(out, g_ref, lg_out_bytes()) != 0) {
            w->n_wrong_output++;
            note(w, c, "wrong output", &err);
        }
    }
    free(out);
    w->n_injected = tsl_backend_injected(be, TSL_FAULT_NOBUF);
    if (w->ready) lg_free(&m);
    tsl_backend_free(be);
    return NULL;
}

static void test_two_contexts_one_faulty(void) {
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    worker w[2];
    memset(w, 0, sizeof w);
    w[0].faulty = false;
    w[1].faulty = true;
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        w[i].start = &start;
        CHECK(pthread_create(&th[i], NULL, run_worker, &w[i]) == 0);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < 2; i++) {
        CHECK(w[i].ready);
        CHECKF(w[i].n_wrong_status == 0 && w[i].n_wrong_record == 0 && w[i].n_wrong_output == 0,
               "%s: %d wrong statuses, %d wrong records, %d wrong outputs; first: %s", i ? "faulty" : "clean",
               w[i].n_wrong_status, w[i].n_wrong_record, w[i].n_wrong_output, w[i].first_problem);
    }
    CHECK(w[0].n_failed == 0);
    CHECK(w[1].n_failed == N_COMPUTES / 7);
    CHECK(w[0].n_injected == 0 && w[1].n_injected == N_COMPUTES / 7);
    printf("     clean: %d of %d failed; faulty: %d of %d failed (every 7th)\n", w[0].n_failed, N_COMPUTES,
           w[1].n_failed, N_COMPUTES);
}

int main(void) {
    if (!lg_reference(SEED, 1, g_ref)) {
        fprintf(stderr, "the clean reference run failed\n");
        return 1;
    }
    RUN(test_two_contexts_one_faulty);
    return test_summary();
}
