/*
 * ledger.c - the per-compute ledger and the thread-local encode sink
 * (FAULTS.md section 5).
 *
 * A compute's encoding runs on the calling thread and on worker threads. Each
 * encode block points this thread's sink at its own compute's ledger, so a
 * failed lookup is charged to the compute that made it and to no other: two
 * threads computing on two contexts never see each other's counts. The first
 * failure is claimed with a compare-and-swap and written by its claimer only;
 * later failures just count. The owner reads the result after every encoder
 * has left its block (a join or a barrier orders the writes before the read).
 */
#include <stdarg.h>
#include <stdio.h>

#include "fault/fault.h"

static _Thread_local fault_ledger *sink;

void ledger_begin(fault_ledger *l, const char *backend, const char *device) {
    atomic_store_explicit(&l->n_nobuf, 0, memory_order_relaxed);
    atomic_store_explicit(&l->n_kernel, 0, memory_order_relaxed);
    atomic_store_explicit(&l->n_other, 0, memory_order_relaxed);
    atomic_store_explicit(&l->claimed, 0, memory_order_relaxed);
    atomic_store_explicit(&l->published, 0, memory_order_relaxed);
    tsl_error_clear(&l->first);
    snprintf(l->backend, sizeof l->backend, "%s", backend ? backend : "");
    snprintf(l->device, sizeof l->device, "%s", device ? device : "");
}

void ledger_sink_set(fault_ledger *l) { sink = l; }

/* After this, a lookup on this thread lands in no sink and is only logged
 * (see ledger_claim): it is not part of any compute's encoding. */
void ledger_sink_clear(void) { sink = NULL; }

fault_ledger *ledger_sink(void) { return sink; }

/* Claim the first-failure slot of the current sink; returns the ledger if
 * this caller must fill `first`, else NULL (no sink, or already claimed). */
static fault_ledger *ledger_claim(void) {
    fault_ledger *l = sink;
    if (!l) return NULL;
    int expect = 0;
    if (!atomic_compare_exchange_strong_explicit(&l->claimed, &expect, 1, memory_order_acq_rel,
                                                 memory_order_relaxed))
        return NULL;
    return l;
}

static void ledger_publish(fault_ledger *l) {
    atomic_store_explicit(&l->published, 1, memory_order_release);
}

void ledger_record_nobuf(int node, const tsl_tensor *node_t, const tsl_tensor *tensor) {
    const char *tname = tensor && tensor->name[0] ? tensor->name : "(unnamed)";
    if (!sink) {
        TSL_LOGW("buffer lookup outside any compute found no buffer for tensor '%s'", tname);
        return;
    }
    atomic_fetch_add_explicit(&sink->n_nobuf, 1, memory_order_relaxed);
    fault_ledger *l = ledger_claim();
    if (!l) return;
    /* the reader is named too: the same weight missing under two nodes reads
     * differently from a node whose own output has nowhere to go */
    if (tensor && node_t && tensor != node_t)
        error_set(&l->first, TSL_FAILED, l->backend, l->device, node, node_t, NULL,
                  "tensor '%s', read by '%s', has no data: no buffer holds it (place it in a buffer or run the "
                  "graph allocator); nothing of this graph was submitted",
                  tname, node_t->name[0] ? node_t->name : "(unnamed)");
    else
        error_set(&l->first, TSL_FAILED, l->backend, l->device, node, node_t, NULL,
                  "tensor '%s' has no data: no buffer holds it (place it in a buffer or run the graph "
                  "allocator); nothing of this graph was submitted",
                  tname);
    if (tensor && tensor != node_t) {
        /* name the tensor whose buffer is missing; the op stays the node's */
        snprintf(l->first.tensor, sizeof l->first.tensor, "%s", tname);
    }
    ledger_publish(l);
}

void ledger_record_kernel(int node, const tsl_tensor *node_t, const char *kernel, const char *driver_domain,
                          int64_t driver_code, const char *driver_text) {
    if (!sink) {
        TSL_LOGW("kernel %s could not be had outside any compute", kernel ? kernel : "?");
        return;
    }
    atomic_fetch_add_explicit(&sink->n_kernel, 1, memory_order_relaxed);
    fault_ledger *l = ledger_claim();
    if (!l) return;
    error_set(&l->first, TSL_FAILED, l->backend, l->device, node, node_t, kernel,
              "could not be built or found; nothing of this graph was submitted");
    /* what the caller does next differs from other FAILED records: the graph
     * is fine, this backend just cannot run the op until it rebuilds kernels */
    snprintf(l->first.hint, sizeof l->first.hint, "%s",
             "supports_op now answers false for it, so a scheduler runs the op on another backend; "
             "recovery rebuilds kernels");
    snprintf(l->first.driver_domain, sizeof l->first.driver_domain, "%s", driver_domain ? driver_domain : "");
    l->first.driver_code = driver_code;
    snprintf(l->first.driver_text, sizeof l->first.driver_text, "%s", driver_text ? driver_text : "");
    ledger_publish(l);
}

void ledger_record(tsl_status s, int node, const tsl_tensor *node_t, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!sink) {
        TSL_LOGW("%s (outside any compute)", msg);
        return;
    }
    atomic_fetch_add_explicit(&sink->n_other, 1, memory_order_relaxed);
    fault_ledger *l = ledger_claim();
    if (!l) return;
    error_set(&l->first, s, l->backend, l->device, node, node_t, NULL, "%s", msg);
    ledger_publish(l);
}

tsl_status ledger_result(fault_ledger *l, tsl_error *out) {
    if (!atomic_load_explicit(&l->claimed, memory_order_acquire)) return TSL_SUCCESS;
    /* the claimer publishes before its block ends; the caller joined all
     * encoders, so this is complete */
    while (!atomic_load_explicit(&l->published, memory_order_acquire)) {
    }
    if (out) *out = l->first;
    return l->first.status;
}
