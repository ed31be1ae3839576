/*
 * backend_impl.h - the backend vtable every backend implements, and the
 * state of the fault contract every backend shares.
 *
 * The public calls in backend.h dispatch through this table and keep the
 * contract common to all backends (argument checks, error records, the abort
 * callback slot, the device-loss latch, the kernel-failure cache, buffer
 * tracking for recovery); a backend supplies only the device work. A new
 * backend (Vulkan, Metal, CUDA) fills one of these.
 *
 * Two objects carry the fault state, because their scopes differ:
 *
 *  - backend_dev: one per device. DEVICE_LOST latches here (FAULTS.md 8), so
 *    every backend (context) on the same device sees the loss at once, and
 *    the device's buffers are listed here, so recovery can reallocate and
 *    restore all of them. A CPU backend is its own device; a GPU backend that
 *    shares a VkDevice between contexts points them at one backend_dev
 *    (backend_set_dev).
 *  - backend_kcache, in the backend: kernels that failed to build, each with
 *    its record (FAULTS.md 6). supports_op answers false for them and no
 *    compute binds them until recovery rebuilds the kernels.
 */
#ifndef TSL_BACKEND_IMPL_H
#define TSL_BACKEND_IMPL_H

#include <pthread.h>
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
    /* Copies in and out. t is the tensor the copy is for (tsl_tensor_set/
     * get), NULL for recovery's own copies: for the error record only; it
     * need not outlive the call (a copy still in flight keeps its name). */
    tsl_status (*buffer_set)(tsl_backend *be, void *handle, size_t offset, const void *src, size_t n,
                             const tsl_tensor *t, tsl_error *err);
    tsl_status (*buffer_get)(tsl_backend *be, void *handle, size_t offset, void *dst, size_t n,
                             const tsl_tensor *t, tsl_error *err);
    /* Recovery: give the buffer fresh memory of the same size behind the
     * same base address (tensors hold base + offset and are never walked),
     * its contents zero. The backend may keep the handle or replace *handle.
     * Returns ALLOC_FAILED (err filled) when the memory cannot be had; the
     * buffer is then unusable until a later recovery succeeds. */
    tsl_status (*buffer_recreate)(tsl_backend *be, void **handle, size_t size, tsl_error *err);
    /* Keeps Q4_0 weight t (TSL_FLAG_WEIGHT, its other conditions met) in
     * the split layout (backend_q4s): tensor copies convert, the kernels
     * read it. NULL: never. The answer must depend on t's shape alone. */
    bool (*q4_split)(const tsl_backend *be, const tsl_tensor *t);

    bool (*supports_op)(const tsl_backend *be, const tsl_tensor *node);
    tsl_status (*graph_compute_async)(tsl_backend *be, tsl_graph *g, tsl_error *err);
    tsl_status (*synchronize)(tsl_backend *be, tsl_error *err);

    /* Kernels. kernel_name: the name of the kernel a node needs ("cpu_
     * mul_mat_q4_0_f32"), used to look it up in the failure cache; build_
     * kernels: build every kernel the backend has, reporting each (see
     * tsl_backend_build_kernels). Either may be NULL. */
    void (*kernel_name)(const tsl_backend *be, const tsl_tensor *node, char *buf, size_t n);
    int (*build_kernels)(tsl_backend *be, tsl_kernel_fn fn, void *user);
    /* Recreate the device objects (device, queues, pipelines) after a loss
     * (lost true), or only drop built kernels (lost false). Called by
     * tsl_backend_recover before the buffers are recreated; may be NULL. */
    tsl_status (*recover)(tsl_backend *be, bool lost, tsl_error *err);
    /* A count that moves whenever supports_op may answer differently for
     * reasons of the backend's own (beyond tsl_backend.support_gen): a
     * kernel that failed on another backend of a shared device. May be
     * NULL. A scheduler keeps its plan while it stays the same. */
    uint64_t (*support_gen)(const tsl_backend *be);
} tsl_backend_vtable;

/* ---- the device: loss latch and buffer list ------------------------------ */

typedef struct backend_dev {
    pthread_mutex_t mu;      /* guards cause, buffers, refs, last_recovery_ms */
    _Atomic int lost;        /* 1 while DEVICE_LOST is latched */
    tsl_error cause;         /* the original failure, returned by every later call */
    struct tsl_buffer *buffers; /* every live buffer on the device */
    int refs;                /* backends pointing here */
    double last_recovery_ms;
} backend_dev;

/* A new device (refs 1), or NULL when out of memory. */
backend_dev *backend_dev_new(void);
/* Drop a reference; the last one frees the device. NULL is a no-op. */
void backend_dev_release(backend_dev *d);
/* Point be at a device shared with other backends (takes a reference, drops
 * be's old one). Only before be has buffers. */
void backend_set_dev(tsl_backend *be, backend_dev *d);
/* Latch the loss with its cause; the first cause wins. Thread-safe. */
void backend_dev_latch(backend_dev *d, const tsl_error *cause);
/* DEVICE_LOST with the original cause copied into err (may be NULL) while
 * the device is lost, else SUCCESS. One acquire load when not lost. */
tsl_status backend_dev_check(const backend_dev *d, tsl_error *err);

/* ---- the kernel-failure cache -------------------------------------------- */

typedef struct backend_kfail {
    char name[64];
    tsl_error rec; /* the build failure, with the driver's text */
} backend_kfail;

typedef struct backend_kcache {
    pthread_mutex_t mu;
    _Atomic int n; /* entries; 0 lets every lookup skip the cache with one load */
    int cap;
    backend_kfail *e;
} backend_kcache;

/* Is kernel `name` cached as failed? Copies its record into rec (may be NULL). */
bool backend_kernel_failed(tsl_backend *be, const char *name, tsl_error *rec);
/* Cache a build failure (the first record for a name is kept). */
void backend_kernel_fail(tsl_backend *be, const char *name, const tsl_error *rec);
/* What be's supports_op answers rest on: its support_gen and the
 * backend's own (vtable support_gen). A scheduler's kept plan and a
 * backend's recorded commands hold while it stays the same. */
static inline uint64_t backend_support_gen(const tsl_backend *be);
/* Forget every failure (kernels are rebuilt on next use): recovery. */
void backend_kernel_cache_clear(tsl_backend *be);
/* (backend_kernel_any_failed, below the header: is the cache non-empty?) */

/* ---- the backend header ---------------------------------------------------- */

/* Every backend struct starts with this header. */
struct tsl_backend {
    const tsl_backend_vtable *vt;
    tsl_abort_fn abort_fn;
    void *abort_user;
    int n_buffers_alive; /* freeing a backend with live buffers is a bug */
    size_t bytes_alive;  /* their total size (tsl_backend_n_buffers) */
    /* the fault contract's common state (src/backend/fault_api.c, recover.c) */
    tsl_gate_fn gate_fn;        /* availability gate, or NULL */
    void *gate_user;
    struct fault_plan *faults;  /* injection rules (TSL_FAULT and tsl_backend_inject) */
    _Atomic uint64_t n_computes; /* computes started (the gate and the latch refuse
                                    before counting), 1-based at the injection sites */
    backend_dev *dev;           /* the device: loss latch, buffer list */
    backend_kcache kcache;      /* kernels that failed to build */
    _Atomic uint64_t resolve_ns; /* time the last compute spent in its resolve pass
                                    (lookups, ledger, injection checks), for benchmarks */
    _Atomic uint64_t support_gen; /* bumped when supports_op may answer differently:
                                     a kernel failure cached or forgotten, a recovery */
};

static inline uint64_t backend_support_gen(const tsl_backend *be) {
    return atomic_load_explicit(&be->support_gen, memory_order_acquire) + (be->vt->support_gen ? be->vt->support_gen(be) : 0);
}

static inline bool backend_kernel_any_failed(tsl_backend *be) {
    return atomic_load_explicit(&be->kcache.n, memory_order_acquire) != 0;
}

/* Set up / tear down the common header: zero it, set vt, make the backend's
 * own device, and read TSL_FAULT from the environment into the backend's
 * injection plan (a malformed TSL_FAULT is reported in err and fails the
 * init). Every backend's constructor calls backend_common_init first and its
 * free calls backend_common_fini last. */
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
    /* recovery (recover.c) */
    const void *host_src;   /* restore from here (tsl_buffer_set_host_source) */
    size_t host_src_size;
    void *host_copy;        /* or from this copy, kept for persistent buffers without a source */
    _Atomic int lost;       /* zeroed by the last recovery; owner has not rebuilt it */
    struct tsl_buffer *dev_prev, *dev_next; /* the device's buffer list */
};

/* The split layout of Q4_0 weights. Blocks go in groups of 64 (1152 bytes:
 * CORE_Q4S_BLOCKS, CORE_Q4S_BYTES in core.h): the 64 blocks' 16 quant bytes
 * each, then their 64 F16 scales, so a block's quants are one aligned
 * 16-byte load and its scale a 2-byte one, instead of an 18-byte block's
 * five loads, and a warp's 32 neighbouring blocks four whole 128-byte lines
 * of quants and one of scales. Same size as the file's layout, converted
 * group by group (tsl_q4_0_split / _unsplit, core.h). A tensor is held so
 * when its root (view source) is flagged TSL_FLAG_WEIGHT, is Q4_0,
 * contiguous, of a whole number of groups, 16-byte aligned in its buffer,
 * and its buffer's backend's q4_split takes it; t itself must be Q4_0 (a
 * view of the root). Returns the root and t's byte offset in it. */
bool backend_q4s(const tsl_tensor *t, const tsl_tensor **root, size_t *roff);
/* Would a root tensor t flagged TSL_FLAG_WEIGHT be held split on be (its
 * placement aside, which buffers align)? For owners choosing how to restore
 * a buffer: its raw bytes are not the tensor's bytes then. */
bool backend_q4s_would(const tsl_backend *be, const tsl_tensor *t);

/* Offset of a tensor's data within its buffer. */
static inline size_t buffer_offset_of(const tsl_buffer *b, const tsl_tensor *t) {
    return (size_t)((const char *)t->data - (const char *)b->base);
}

/* Buffer list of the device (recover.c): called by tsl_buffer_alloc/free. */
void backend_dev_add_buffer(backend_dev *d, tsl_buffer *buf);
void backend_dev_remove_buffer(backend_dev *d, tsl_buffer *buf);
/* tsl_tensor_set wrote [offset, offset+n) of buf: keep its host copy current. */
void backend_buffer_wrote(tsl_buffer *buf, size_t offset, const void *src, size_t n);

#endif /* TSL_BACKEND_IMPL_H */
