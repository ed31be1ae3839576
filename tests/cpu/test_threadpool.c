/*
 * test_threadpool.c - the CPU backend's thread pool: every thread runs every
 * job exactly once with distinct indices, barriers separate phases (no thread
 * sees a phase before all threads finished the previous one), pools of one
 * thread work, sleeping workers wake up, and create/free cycles leak nothing
 * (checked by LSan in the sanitizer build).
 */
#include <stdatomic.h>
#include <time.h>

#include "cpu/cpu.h"
#include "test.h"

typedef struct {
    cpu_pool *pool;
    _Atomic long sum;      /* sum of (ith + 1) over all calls */
    _Atomic unsigned mask; /* bit ith set by thread ith */
    _Atomic int bad_nth;
    int n;
} count_arg;

static void count_job(int ith, int nth, void *arg) {
    count_arg *a = arg;
    atomic_fetch_add(&a->sum, ith + 1);
    atomic_fetch_or(&a->mask, 1u << ith);
    if (nth != a->n) atomic_fetch_add(&a->bad_nth, 1);
}

static void test_runs_count(void) {
    for (int n = 1; n <= 4; n++) {
        cpu_pool *pool = cpu_pool_new(n);
        CHECK(pool != NULL);
        if (!pool) continue;
        CHECK(cpu_pool_size(pool) == n);
        count_arg a = {.pool = pool, .n = n};
        const int runs = n <= 2 ? 2000 : 300; /* threads beyond the cores only wait */
        for (int r = 0; r < runs; r++) cpu_pool_run(pool, count_job, &a);
        CHECKF(atomic_load(&a.sum) == (long)runs * n * (n + 1) / 2, "n=%d sum=%ld", n, atomic_load(&a.sum));
        CHECK(atomic_load(&a.mask) == (1u << n) - 1);
        CHECK(atomic_load(&a.bad_nth) == 0);
        cpu_pool_free(pool);
    }
}

/* Phase test: in phase k every thread adds 1 to counter; after the barrier
 * every thread must see exactly n*(k+1). A second barrier keeps a fast
 * thread from starting phase k+1 before the others have checked. */
typedef struct {
    cpu_pool *pool;
    int phases;
    _Atomic int counter;
    _Atomic int errors;
    int slots[8];
} phase_arg;

static void phase_job(int ith, int nth, void *arg) {
    phase_arg *a = arg;
    for (int k = 0; k < a->phases; k++) {
        atomic_fetch_add_explicit(&a->counter, 1, memory_order_relaxed);
        a->slots[ith] = k; /* plain write: the barrier must publish it */
        cpu_pool_barrier(a->pool);
        if (atomic_load_explicit(&a->counter, memory_order_relaxed) != nth * (k + 1))
            atomic_fetch_add(&a->errors, 1);
        for (int j = 0; j < nth; j++)
            if (a->slots[j] != k) atomic_fetch_add(&a->errors, 1);
        cpu_pool_barrier(a->pool);
    }
}

static void test_barrier_phases(void) {
    for (int n = 1; n <= 4; n++) {
        cpu_pool *pool = cpu_pool_new(n);
        CHECK(pool != NULL);
        if (!pool) continue;
        /* fewer phases once threads outnumber the 2 cores of a test machine */
        phase_arg a = {.pool = pool, .phases = n <= 2 ? 3000 : 300};
        cpu_pool_run(pool, phase_job, &a);
        CHECKF(atomic_load(&a.errors) == 0, "n=%d errors=%d", n, atomic_load(&a.errors));
        CHECK(atomic_load(&a.counter) == n * a.phases);
        /* many short runs with barriers inside, back to back */
        atomic_store(&a.counter, 0);
        a.phases = 3;
        for (int r = 0; r < (n <= 2 ? 500 : 100); r++) {
            atomic_store(&a.counter, 0);
            cpu_pool_run(pool, phase_job, &a);
        }
        CHECK(atomic_load(&a.errors) == 0);
        cpu_pool_free(pool);
    }
}

/* cpu_barrier through cpu_params, the way kernels call it. */
typedef struct {
    cpu_pool *pool;
    long data[4][64];
    _Atomic int errors;
} params_arg;

static void params_job(int ith, int nth, void *arg) {
    params_arg *a = arg;
    cpu_params p = {.ith = ith, .nth = nth, .pool = a->pool};
    for (int i = 0; i < 64; i++) a->data[ith][i] = (long)ith * 1000 + i;
    cpu_barrier(&p);
    /* read another thread's plain writes */
    int other = (ith + 1) % nth;
    for (int i = 0; i < 64; i++)
        if (a->data[other][i] != (long)other * 1000 + i) atomic_fetch_add(&a->errors, 1);
}

static void test_cpu_barrier(void) {
    cpu_pool *pool = cpu_pool_new(3);
    CHECK(pool != NULL);
    if (!pool) return;
    params_arg a = {.pool = pool};
    for (int r = 0; r < 200; r++) {
        memset(a.data, 0, sizeof a.data);
        cpu_pool_run(pool, params_job, &a);
    }
    CHECK(atomic_load(&a.errors) == 0);
    cpu_pool_free(pool);
}

/* Workers that went to sleep (idle past the spin budget) wake for the next run. */
static void test_sleep_wake(void) {
    cpu_pool *pool = cpu_pool_new(3);
    CHECK(pool != NULL);
    if (!pool) return;
    count_arg a = {.pool = pool, .n = 3};
    for (int r = 0; r < 5; r++) {
        cpu_pool_run(pool, count_job, &a);
        struct timespec ts = {0, 30 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    CHECK(atomic_load(&a.sum) == 5L * 6);
    CHECK(atomic_load(&a.mask) == 7u);
    cpu_pool_free(pool);
}

static void test_create_free_cycles(void) {
    int ok = 0;
    for (int i = 0; i < 100; i++) {
        cpu_pool *pool = cpu_pool_new(1 + i % 4);
        if (!pool) continue;
        count_arg a = {.pool = pool, .n = 1 + i % 4};
        if (i % 2) cpu_pool_run(pool, count_job, &a); /* free with and without a run */
        if (atomic_load(&a.sum) == (i % 2 ? (long)a.n * (a.n + 1) / 2 : 0)) ok++;
        cpu_pool_free(pool);
    }
    CHECK(ok == 100);
    CHECK(cpu_pool_new(0) == NULL);
    CHECK(cpu_pool_new(-3) == NULL);
    cpu_pool_free(NULL);
    CHECK(cpu_pool_size(NULL) == 0);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    cpu_pool *pool;
    int n;
} bar_arg;

static void bar_job(int ith, int nth, void *arg) {
    bar_arg *a = arg;
    for (int i = 0; i < a->n; i++) cpu_pool_barrier(a->pool);
}

/* Not a pass/fail figure (the machine is shared), but printed so a slow
 * barrier shows up: the compute loop pays one per node. */
static void test_barrier_speed(void) {
    cpu_pool *pool = cpu_pool_new(2);
    CHECK(pool != NULL);
    if (!pool) return;
    bar_arg a = {.pool = pool, .n = 20000};
    double best = 1e9;
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
        cpu_pool_run(pool, bar_job, &a);
        double dt = (now_s() - t0) / a.n;
        if (dt < best) best = dt;
    }
    printf("     barrier, 2 threads: %.0f ns\n", best * 1e9);
    /* generous: even a loaded 2-core machine must not take 100 us per barrier */
    CHECK(best < 100e-6);
    cpu_pool_free(pool);
}

int main(void) {
    RUN(test_runs_count);
    RUN(test_barrier_phases);
    RUN(test_cpu_barrier);
    RUN(test_sleep_wake);
    RUN(test_create_free_cycles);
    RUN(test_barrier_speed);
    return test_summary();
}
