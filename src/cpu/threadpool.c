/*
 * threadpool.c - the CPU backend's persistent worker threads and barrier.
 *
 * A graph compute runs every node on every thread, with a barrier after each
 * node, so the costs that matter are (1) waking the workers at the start of a
 * compute and (2) the barrier, which runs once per node. Both are built on
 * spinning, because a futex round trip (several microseconds) per node would
 * dominate graphs of small ops:
 *
 *  - Dispatch: the caller publishes the job and bumps a generation counter.
 *    Idle workers spin on that counter for a while (about a few hundred
 *    microseconds), then sleep on a condition variable. The caller only takes
 *    the mutex to broadcast when some worker declared itself asleep; the
 *    "declare asleep, then re-check the generation" / "bump the generation,
 *    then read the sleeper count" pair is a Dekker handshake on seq_cst
 *    atomics, so a wakeup cannot be lost and a busy pool never touches the
 *    mutex.
 *  - Barrier: a counter plus a generation (the "sense"): the last thread to
 *    arrive resets the counter and bumps the generation; the others spin on
 *    the generation, yielding the CPU after a short spin so an oversubscribed
 *    machine (more threads than cores) still makes progress.
 *  - Completion: workers count themselves done; the caller (thread 0) runs its
 *    own share and then waits for the count.
 *
 * Memory ordering: everything a thread wrote before a barrier (or before
 * finishing a job) is visible to every thread after it: arrivals are
 * acq_rel read-modify-writes on one counter (a release sequence), the
 * generation bump is a release store and the waiters' loads acquire it.
 *
 * The spin budgets trade idle CPU for latency; they are deliberately short
 * because the machine may be shared, and a sleeping pool costs nothing.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"

/* Pause instructions before an idle worker sleeps (~0.25 ms at ~25 ns each),
 * and before a thread waiting at a barrier starts yielding its core. */
#define POOL_IDLE_SPINS 10000
#define POOL_BARRIER_SPINS 256

/* Keep the hot counters on their own cache lines so workers spinning on one
 * do not slow down writers of another. */
#define POOL_LINE 64

typedef struct pool_worker {
    cpu_pool *pool;
    pthread_t thread;
    int ith;
} pool_worker;

struct cpu_pool {
    int n;
    pool_worker *workers; /* n - 1 of them; the caller is thread 0 */

    /* the job of the current run (written before gen is bumped) */
    void (*job)(int ith, int nth, void *arg);
    void *arg;
    _Atomic int stop;

    _Alignas(POOL_LINE) _Atomic unsigned gen; /* bumped once per run */
    _Alignas(POOL_LINE) _Atomic int n_done;   /* workers finished with the current run */
    _Alignas(POOL_LINE) _Atomic int n_sleeping;
    _Alignas(POOL_LINE) _Atomic int bar_count;
    _Alignas(POOL_LINE) _Atomic unsigned bar_gen;

    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static inline void pool_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Wait for gen to move past `seen`: spin, then sleep. Returns the new gen. */
static unsigned pool_wait_run(cpu_pool *pool, unsigned seen) {
    for (int i = 0; i < POOL_IDLE_SPINS; i++) {
        unsigned g = atomic_load_explicit(&pool->gen, memory_order_acquire);
        if (g != seen) return g;
        pool_pause();
    }
    pthread_mutex_lock(&pool->mu);
    /* Declare ourselves asleep before the last look at gen: a caller that
     * bumps gen after this load will see n_sleeping > 0 and broadcast. */
    atomic_fetch_add_explicit(&pool->n_sleeping, 1, memory_order_seq_cst);
    unsigned g;
    while ((g = atomic_load_explicit(&pool->gen, memory_order_seq_cst)) == seen)
        pthread_cond_wait(&pool->cv, &pool->mu);
    atomic_fetch_sub_explicit(&pool->n_sleeping, 1, memory_order_relaxed);
    pthread_mutex_unlock(&pool->mu);
    return g;
}

static void *pool_worker_main(void *arg) {
    pool_worker *w = arg;
    cpu_pool *pool = w->pool;
    unsigned seen = 0;
    for (;;) {
        seen = pool_wait_run(pool, seen);
        if (atomic_load_explicit(&pool->stop, memory_order_acquire)) break;
        pool->job(w->ith, pool->n, pool->arg);
        atomic_fetch_add_explicit(&pool->n_done, 1, memory_order_release);
    }
    return NULL;
}

/* Publish a new generation and wake sleepers if there are any. */
static void pool_kick(cpu_pool *pool) {
    atomic_fetch_add_explicit(&pool->gen, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&pool->n_sleeping, memory_order_seq_cst) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
}

static void pool_stop_workers(cpu_pool *pool, int n_started) {
    atomic_store_explicit(&pool->stop, 1, memory_order_release);
    pool_kick(pool);
    for (int i = 0; i < n_started; i++) pthread_join(pool->workers[i].thread, NULL);
}

cpu_pool *cpu_pool_new(int n_threads) {
    if (n_threads < 1) return NULL;
    cpu_pool *pool = aligned_alloc(POOL_LINE, (sizeof(cpu_pool) + POOL_LINE - 1) / POOL_LINE * POOL_LINE);
    if (!pool) return NULL;
    memset(pool, 0, sizeof *pool);
    pool->n = n_threads;
    atomic_init(&pool->stop, 0);
    atomic_init(&pool->gen, 0);
    atomic_init(&pool->n_done, 0);
    atomic_init(&pool->n_sleeping, 0);
    atomic_init(&pool->bar_count, 0);
    atomic_init(&pool->bar_gen, 0);
    if (pthread_mutex_init(&pool->mu, NULL) != 0) {
        free(pool);
        return NULL;
    }
    if (pthread_cond_init(&pool->cv, NULL) != 0) {
        pthread_mutex_destroy(&pool->mu);
        free(pool);
        return NULL;
    }
    if (n_threads > 1) {
        pool->workers = calloc((size_t)(n_threads - 1), sizeof *pool->workers);
        if (!pool->workers) {
            cpu_pool_free(pool);
            return NULL;
        }
        for (int i = 0; i < n_threads - 1; i++) {
            pool->workers[i].pool = pool;
            pool->workers[i].ith = i + 1;
            if (pthread_create(&pool->workers[i].thread, NULL, pool_worker_main, &pool->workers[i]) != 0) {
                pool_stop_workers(pool, i);
                pthread_cond_destroy(&pool->cv);
                pthread_mutex_destroy(&pool->mu);
                free(pool->workers);
                free(pool);
                return NULL;
            }
        }
    }
    return pool;
}

void cpu_pool_free(cpu_pool *pool) {
    if (!pool) return;
    if (pool->workers) pool_stop_workers(pool, pool->n - 1);
    pthread_cond_destroy(&pool->cv);
    pthread_mutex_destroy(&pool->mu);
    free(pool->workers);
    free(pool);
}

int cpu_pool_size(const cpu_pool *pool) { return pool ? pool->n : 0; }

void cpu_pool_run(cpu_pool *pool, void (*job)(int ith, int nth, void *arg), void *arg) {
    if (pool->n == 1) {
        job(0, 1, arg);
        return;
    }
    pool->job = job;
    pool->arg = arg;
    atomic_store_explicit(&pool->n_done, 0, memory_order_relaxed);
    pool_kick(pool); /* seq_cst: orders job/arg/n_done before the workers' acquire of gen */
    job(0, pool->n, arg);
    int want = pool->n - 1;
    for (int spins = 0; atomic_load_explicit(&pool->n_done, memory_order_acquire) != want; spins++) {
        if (spins < POOL_BARRIER_SPINS)
            pool_pause();
        else
            sched_yield();
    }
}

void cpu_pool_barrier(cpu_pool *pool) {
    int n = pool->n;
    if (n == 1) return;
    /* Read the generation before arriving: this load cannot move past the
     * acq_rel arrival below, so the last arriver's bump is always seen as a
     * change and no waiter can miss it. */
    unsigned g = atomic_load_explicit(&pool->bar_gen, memory_order_relaxed);
    if (atomic_fetch_add_explicit(&pool->bar_count, 1, memory_order_acq_rel) == n - 1) {
        atomic_store_explicit(&pool->bar_count, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&pool->bar_gen, 1, memory_order_release);
        return;
    }
    for (int spins = 0; atomic_load_explicit(&pool->bar_gen, memory_order_acquire) == g; spins++) {
        if (spins < POOL_BARRIER_SPINS)
            pool_pause();
        else
            sched_yield();
    }
}

void cpu_barrier(const cpu_params *p) { cpu_pool_barrier(p->pool); }
