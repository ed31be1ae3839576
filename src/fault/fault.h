/*
 * fault.h - private interface of the fault layer: classification tables,
 * the per-compute ledger and fault injection (FAULTS.md sections 4, 5, 10).
 *
 * Every backend reports through these, so a new backend gets the whole
 * contract by calling them: it classifies driver codes with fault_classify
 * (never ad hoc), records missing buffers and kernels into the ledger sink of
 * the compute it is encoding, and asks fault_plan_fire at each injection
 * boundary whether to behave as if the driver had answered with a fault.
 */
#ifndef TSL_FAULT_H
#define TSL_FAULT_H

#include <stdatomic.h>

#include "core/core.h"
#include "tensile/backend.h"

/* ---- classification (section 4) ---------------------------------------- */

typedef struct fault_class_row {
    const char *domain;   /* "VkResult", "MTLCommandBufferErrorDomain", "IOGPU", "CUresult", "nvrtcResult" */
    int64_t code;
    const char *name;     /* "VK_ERROR_DEVICE_LOST" */
    tsl_fault_phase phase; /* TSL_PHASE_ANY matches every phase */
    tsl_status status;
} fault_class_row;

/* The tables, for tests that walk every row. n receives the row count. */
const fault_class_row *fault_class_table(size_t *n);

/* ---- ledger (section 5) -------------------------------------------------- */

typedef struct fault_ledger {
    _Atomic uint32_t n_nobuf;    /* buffer lookups that found nothing */
    _Atomic uint32_t n_kernel;   /* kernels that could not be had */
    _Atomic uint32_t n_other;    /* other failures recorded while encoding */
    _Atomic int claimed;         /* 1 once a thread owns `first` */
    _Atomic int published;       /* 1 once `first` is complete */
    tsl_error first;             /* the first failure, written by its claimer */
    char backend[32];
    char device[96];
} fault_ledger;

/* Start a compute's ledger (counters zero, no failure). */
void ledger_begin(fault_ledger *l, const char *backend, const char *device);
/* Point this thread's sink at l for the duration of an encode block. */
void ledger_sink_set(fault_ledger *l);
/* End the encode block. Lookups made after this land in no sink and are only
 * logged: they belong to no compute, so there is no one to fail. */
void ledger_sink_clear(void);
fault_ledger *ledger_sink(void);

/* Record into the current sink (or log, outside any block). node_t is the
 * graph node being encoded, tensor the one whose buffer was missing (may be
 * node_t or one of its sources). */
void ledger_record_nobuf(int node, const tsl_tensor *node_t, const tsl_tensor *tensor);
void ledger_record_kernel(int node, const tsl_tensor *node_t, const char *kernel, const char *driver_domain,
                          int64_t driver_code, const char *driver_text);
void ledger_record(tsl_status s, int node, const tsl_tensor *node_t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* Did anything record? (Cheap: one atomic load.) */
static inline bool ledger_failed(fault_ledger *l) { return atomic_load_explicit(&l->claimed, memory_order_acquire) != 0; }
/* The compute's status: SUCCESS, or the first failure copied to out. Call
 * after every encoder has left its block (a join or barrier orders it). */
tsl_status ledger_result(fault_ledger *l, tsl_error *out);

/* ---- injection (section 10) ----------------------------------------------- */

/* Where an injection point is and what it is about. Unused fields: -1/NULL/0. */
typedef struct fault_site {
    uint64_t compute;        /* 1-based count of computes on this backend */
    int node;                /* node index, -1 if none */
    const tsl_tensor *tensor;
    const char *kernel;
    size_t bytes;
    uint64_t copy;           /* 1-based count of copy completions on this backend, 0 if none */
    const char *tensor_name; /* the tensor's name where only that is kept (a copy in
                                flight outlives its caller's tensor), else NULL */
} fault_site;

typedef struct fault_plan fault_plan;

fault_plan *fault_plan_new(void);
void fault_plan_free(fault_plan *p);
/* Parse spec (the TSL_FAULT grammar) and add its rules. Returns FAILED with a
 * message naming the bad part, adding nothing, on a syntax error. */
tsl_status fault_plan_add(fault_plan *p, const char *spec, tsl_error *err);
void fault_plan_clear(fault_plan *p);
bool fault_plan_empty(const fault_plan *p);
/* Should a fault of class cls fire at this site? Counts the firing. Cheap
 * when the plan is empty (one relaxed load). Thread-safe. */
bool fault_plan_fire(fault_plan *p, tsl_fault_class cls, const fault_site *site);
/* How many times rules of class cls fired since the plan was made. */
uint64_t fault_plan_fired(const fault_plan *p, tsl_fault_class cls);

#endif /* TSL_FAULT_H */
