/*
 * backend_impl.h - the backend vtable every backend implements.
 *
 * The public calls in backend.h dispatch through this table and keep the
 * contract common to all backends (argument checks, error records, the abort
 * callback slot); a backend supplies only the device work. A new backend
 * (Vulkan, Metal, CUDA) fills one of these.
 */
#ifndef TSL_BACKEND_IMPL_H
#define TSL_BACKEND_IMPL_H

#include <stdatomic.h>

#include "tensile/backend.h"

struct fault_plan;

typedef struct tsl_backend_vtable {
    const char *(*name)(const tsl_backend *be);
    const char *(*device)(const tsl_backend *be);
    void (*free)(tsl_backend *be);

    /* Buffers. alloc returns the backend-private handle and the base address
     * placed in tensor->data (host address, or an opaque device base). */
    void *(*buffer_alloc)(tsl_backend *be, size_t size, void **base, tsl_error *err);
    void (*buffer_free)(tsl_backend *be, void *handle);
    size_t (*buffer_alignment)(const tsl_backend *be);
    bool buffer_is_host;
    tsl_status (*buffer_set)(tsl_backend *be, void *handle, size_t offset, const void *src, size_t n,
                             tsl_error *err);
    tsl_status (*buffer_get)(tsl_backend *be, void *handle, size_t offset, void *dst, size_t n,
                             tsl_error *err);

    bool (*supports_op)(const tsl_backend *be, const tsl_tensor *node);
    tsl_status (*graph_compute_async)(tsl_backend *be, tsl_graph *g, tsl_error *err);
    tsl_status (*synchronize)(tsl_backend *be, tsl_error *err);
} tsl_backend_vtable;

/* Every backend struct starts with this header. */
struct tsl_backend {
    const tsl_backend_vtable *vt;
    tsl_abort_fn abort_fn;
    void *abort_user;
    int n_buffers_alive; /* freeing a backend with live buffers is a bug */
    /* the fault contract's common state (src/backend/fault_api.c) */
    tsl_gate_fn gate_fn;        /* availability gate, or NULL */
    void *gate_user;
    struct fault_plan *faults;  /* injection rules (TSL_FAULT and tsl_backend_inject) */
    _Atomic uint64_t n_computes; /* computes started, 1-based at the injection sites */
};

/* Set up / tear down the common header: zero it, set vt, and read TSL_FAULT
 * from the environment into the backend's injection plan (a malformed
 * TSL_FAULT is reported in err and fails the init). Every backend's
 * constructor calls backend_common_init first and its free calls
 * backend_common_fini last. */
tsl_status backend_common_init(tsl_backend *be, const tsl_backend_vtable *vt, tsl_error *err);
void backend_common_fini(tsl_backend *be);

/* Give a view with NULL data its source's address (view_src->data +
 * view_offs, and its buffer); false if nothing along the chain has data.
 * Every backend's resolve pass calls it (backend.c). */
bool backend_tensor_resolve(tsl_tensor *t);

struct tsl_buffer {
    tsl_backend *be;
    void *handle;  /* backend-private */
    void *base;    /* address of byte 0 (host or opaque) */
    size_t size;
    bool persistent;
};

/* Offset of a tensor's data within its buffer. */
static inline size_t buffer_offset_of(const tsl_buffer *b, const tsl_tensor *t) {
    return (size_t)((const char *)t->data - (const char *)b->base);
}

#endif /* TSL_BACKEND_IMPL_H */
