/*
 * fault_api.c - the parts of the fault contract every backend shares: the
 * common backend header (its device, kernel-failure cache and injection
 * plan), the availability gate, and the retry policy (FAULTS.md sections 7
 * and 10). The latch and recovery are in recover.c.
 *
 * The retry policy only ever repeats RETRY: it is the one status that says
 * "the same graph would succeed later". FAILED would fail the same way,
 * ALLOC_FAILED needs the caller to free memory first, and DEVICE_LOST needs
 * a recovery, so those return at once.
 */
#include <stdlib.h>
#include <time.h>

#include "backend/backend_impl.h"
#include "fault/fault.h"

tsl_status backend_common_init(tsl_backend *be, const tsl_backend_vtable *vt, tsl_error *err) {
    memset(be, 0, sizeof *be);
    be->vt = vt;
    pthread_mutex_init(&be->kcache.mu, NULL);
    atomic_init(&be->kcache.n, 0);
    be->faults = fault_plan_new();
    be->dev = backend_dev_new();
    if (!be->faults || !be->dev) {
        backend_common_fini(be);
        return error_set(err, TSL_ALLOC_FAILED, NULL, NULL, -1, NULL, NULL, "out of memory");
    }
    const char *spec = getenv("TSL_FAULT");
    if (spec && *spec) {
        tsl_status st = fault_plan_add(be->faults, spec, err);
        if (st != TSL_SUCCESS) {
            backend_common_fini(be);
            return st;
        }
        TSL_LOGI("fault injection from TSL_FAULT: %s", spec);
    }
    return TSL_SUCCESS;
}

void backend_common_fini(tsl_backend *be) {
    if (!be) return;
    fault_plan_free(be->faults);
    be->faults = NULL;
    backend_dev_release(be->dev);
    be->dev = NULL;
    free(be->kcache.e);
    be->kcache.e = NULL;
    be->kcache.cap = 0;
    atomic_store(&be->kcache.n, 0);
    pthread_mutex_destroy(&be->kcache.mu);
}

tsl_status tsl_backend_inject(tsl_backend *be, const char *spec, tsl_error *err) {
    if (!be || !be->faults)
        return error_set(err, TSL_FAILED, NULL, NULL, -1, NULL, NULL, "tsl_backend_inject: no backend");
    return fault_plan_add(be->faults, spec, err);
}

void tsl_backend_inject_clear(tsl_backend *be) {
    if (be) fault_plan_clear(be->faults);
}

uint64_t tsl_backend_injected(const tsl_backend *be, tsl_fault_class c) {
    return be ? fault_plan_fired(be->faults, c) : 0;
}

void tsl_backend_set_gate(tsl_backend *be, tsl_gate_fn fn, void *user) {
    if (!be) return;
    be->gate_fn = fn;
    be->gate_user = user;
}

tsl_retry_policy tsl_retry_default(void) {
    return (tsl_retry_policy){
        .max_attempts = 3, .backoff_ms = 10, .backoff_factor = 4.0, .max_backoff_ms = 1000, .fallback = NULL};
}

static void sleep_ms(double ms) {
    if (ms <= 0) return;
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)((ms - 1000.0 * (double)(time_t)(ms / 1000)) * 1e6)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

tsl_status tsl_graph_compute_retry(tsl_backend *be, tsl_graph *g, const tsl_retry_policy *policy, tsl_error *err) {
    tsl_retry_policy p = policy ? *policy : tsl_retry_default();
    if (p.max_attempts < 1) p.max_attempts = 1;
    if (p.backoff_factor < 1) p.backoff_factor = 1;
    double wait = p.backoff_ms;
    tsl_status st = TSL_RETRY;
    for (int attempt = 1; attempt <= p.max_attempts; attempt++) {
        st = tsl_backend_graph_compute(be, g, err);
        if (st != TSL_RETRY) return st;
        if (attempt < p.max_attempts) {
            TSL_LOGI("compute on %s returned RETRY (attempt %d of %d); waiting %.0f ms", tsl_backend_name(be),
                     attempt, p.max_attempts, wait);
            sleep_ms(wait);
            wait *= p.backoff_factor;
            if (p.max_backoff_ms > 0 && wait > p.max_backoff_ms) wait = p.max_backoff_ms;
        }
    }
    if (p.fallback && p.fallback != be) {
        TSL_LOGW("compute on %s still RETRY after %d attempts; running on %s", tsl_backend_name(be), p.max_attempts,
                 tsl_backend_name(p.fallback));
        st = tsl_backend_graph_compute(p.fallback, g, err);
    }
    return st;
}
