/*
 * backend.c - the device-independent half of backend.h: argument checks,
 * error records, buffers, tensor copies, and dispatch through the vtable.
 *
 * A backend supplies only device work (backend_impl.h); everything a caller
 * can get wrong is checked here once, for every backend, and answered with a
 * status and a record instead of a crash: a NULL argument, a tensor with no
 * data, a copy outside a tensor, a misaligned placement.
 *
 * Views and lazy placement. A view's data is its source's data plus an
 * offset, fixed when the view is made. A view made while its source had no
 * data yet (a graph built in a no_alloc context before the allocator placed
 * anything) keeps data == NULL; rather than chase every such view when the
 * source is placed, its address is resolved on first use: here for
 * tensor_set/get, and in each backend's resolve pass before a compute
 * (backend_tensor_resolve). This keeps placement O(1) and lets the graph
 * allocator place only roots.
 *
 * Compute: graph_compute is compute_async followed by synchronize, and
 * returns the first failure (FAULTS.md section 3): a failure found before
 * any work started comes back from compute_async, one found while the work
 * ran comes back from synchronize; both fill the caller's record.
 *
 * Two refusals come before the backend sees the graph, in this order: a lost
 * device answers DEVICE_LOST with the original cause (the latch, recover.c),
 * and a closed availability gate answers RETRY (FAULTS.md section 7). Neither
 * counts as a compute: the count is what "compute=N" injection rules match,
 * and it counts computes the backend actually started. Any DEVICE_LOST a
 * backend returns latches its device here too, so no backend can forget to.
 *
 * Buffers register with their device, so recovery can find and restore
 * every one of them, and every copy into a buffer keeps the host copy of a
 * persistent buffer current (recover.c).
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "core/core.h"
#include "fault/fault.h"

/* Views nest at most this deep; anything deeper is a malformed cycle. */
#define BACKEND_MAX_VIEW_DEPTH 32

/* ---- views ---------------------------------------------------------------- */

/* Where t's bytes are, following views whose data was never set, without
 * changing t. Returns false if no tensor along the chain has data. */
static bool backend_tensor_addr(const tsl_tensor *t, void **data, tsl_buffer **buf) {
    size_t offs = 0;
    const tsl_tensor *v = t;
    for (int depth = 0; v && !v->data; depth++) {
        if (!v->view_src || depth >= BACKEND_MAX_VIEW_DEPTH) return false;
        offs += v->view_offs;
        v = v->view_src;
    }
    if (!v) return false;
    *data = (char *)v->data + offs;
    /* a view made before its source was placed has no buffer either */
    tsl_buffer *b = t->buffer ? t->buffer : v->buffer;
    if (!b && t->view_src) b = t->view_src->buffer;
    *buf = b;
    return true;
}

/* Give t (and the views between t and its source) their data and buffer
 * from the first source along the chain that has data. Used by the
 * backends' resolve pass; returns false when nothing along the chain has
 * data. Declared in the backends that use it. */
bool backend_tensor_resolve(tsl_tensor *t) {
    if (!t) return false;
    if (t->data) return true;
    tsl_tensor *chain[BACKEND_MAX_VIEW_DEPTH];
    int n = 0;
    tsl_tensor *v = t;
    while (v && !v->data) {
        if (!v->view_src || n == BACKEND_MAX_VIEW_DEPTH) return false;
        chain[n++] = v;
        v = v->view_src;
    }
    for (int i = n - 1; i >= 0; i--) {
        chain[i]->data = (char *)chain[i]->view_src->data + chain[i]->view_offs;
        if (!chain[i]->buffer) chain[i]->buffer = chain[i]->view_src->buffer;
    }
    return true;
}

/* ---- backends ------------------------------------------------------------- */

void tsl_backend_free(tsl_backend *be) {
    if (!be) return;
    int alive = __atomic_load_n(&be->n_buffers_alive, __ATOMIC_ACQUIRE);
    if (alive > 0) {
        /* A caller bug: the buffers would point into a freed backend. Keep
         * the backend alive (leaked) rather than turn it into a crash later. */
        TSL_LOGE("tsl_backend_free: backend %s still has %d live buffer(s); free them first (backend not freed)",
                 be->vt->name(be), alive);
        assert(!"tsl_backend_free with live buffers");
        return;
    }
    be->vt->free(be);
}

const char *tsl_backend_name(const tsl_backend *be) { return be ? be->vt->name(be) : "(no backend)"; }

const char *tsl_backend_device(const tsl_backend *be) { return be ? be->vt->device(be) : ""; }

size_t tsl_backend_alignment(const tsl_backend *be) {
    return be && be->vt->buffer_alignment ? be->vt->buffer_alignment(be) : 0;
}

bool tsl_backend_supports_op(const tsl_backend *be, const tsl_tensor *node) {
    if (!be || !node) return false;
    if (!be->vt->supports_op(be, node)) return false;
    /* a kernel that failed to build stays refused until recovery rebuilds it,
     * so a scheduler sends the op elsewhere from the next graph on */
    tsl_backend *b = (tsl_backend *)be;
    if (backend_kernel_any_failed(b) && be->vt->kernel_name && !tsl_op_is_view(node->op) &&
        node->op != TSL_OP_NONE) {
        char name[64];
        be->vt->kernel_name(be, node, name, sizeof name);
        if (backend_kernel_failed(b, name, NULL)) return false;
    }
    return true;
}

void tsl_backend_set_abort_callback(tsl_backend *be, tsl_abort_fn fn, void *user) {
    if (!be) return;
    be->abort_fn = fn;
    be->abort_user = user;
}

static tsl_status backend_check_compute(tsl_backend *be, tsl_graph *g, const char *what, tsl_error *err) {
    if (!be) return error_set(err, TSL_FAILED, "", "", -1, NULL, NULL, "%s: backend is NULL", what);
    if (!g)
        return error_set(err, TSL_FAILED, be->vt->name(be), be->vt->device(be), -1, NULL, NULL,
                         "%s: graph is NULL (did graph_build fail? check tsl_ctx_error)", what);
    if (g->n_nodes < 0 || (g->n_nodes > 0 && !g->nodes))
        return error_set(err, TSL_FAILED, be->vt->name(be), be->vt->device(be), -1, NULL, NULL,
                         "%s: graph is malformed (%d nodes)", what, g->n_nodes);
    return TSL_SUCCESS;
}

/* The latch, then the gate; only then is the compute counted. Returns
 * DEVICE_LOST (original cause) or RETRY with the record filled. */
static tsl_status backend_begin_compute(tsl_backend *be, tsl_error *err) {
    tsl_status s = backend_dev_check(be->dev, err);
    if (s != TSL_SUCCESS) return s;
    if (be->gate_fn && !be->gate_fn(be->gate_user))
        return error_set(err, TSL_RETRY, be->vt->name(be), be->vt->device(be), -1, NULL, NULL,
                         "the device is not available now (availability gate closed); nothing was submitted");
    atomic_fetch_add_explicit(&be->n_computes, 1, memory_order_relaxed);
    return TSL_SUCCESS;
}

/* Whatever returned DEVICE_LOST, the device is latched from now on. */
static tsl_status backend_after(tsl_backend *be, tsl_status s, const tsl_error *rec) {
    if (s == TSL_DEVICE_LOST) backend_dev_latch(be->dev, rec);
    return s;
}

tsl_status tsl_backend_graph_compute_async(tsl_backend *be, tsl_graph *g, tsl_error *err) {
    tsl_status s = backend_check_compute(be, g, "graph_compute_async", err);
    if (s != TSL_SUCCESS) return s;
    if (err) tsl_error_clear(err);
    s = backend_begin_compute(be, err);
    if (s != TSL_SUCCESS) return s;
    tsl_error rec;
    tsl_error_clear(&rec);
    s = be->vt->graph_compute_async(be, g, &rec);
    if (err && s != TSL_SUCCESS) *err = rec;
    return backend_after(be, s, &rec);
}

tsl_status tsl_backend_synchronize(tsl_backend *be, tsl_error *err) {
    if (!be) return error_set(err, TSL_FAILED, "", "", -1, NULL, NULL, "synchronize: backend is NULL");
    if (err) tsl_error_clear(err);
    tsl_error rec;
    tsl_error_clear(&rec);
    tsl_status s = be->vt->synchronize(be, &rec);
    backend_after(be, s, &rec);
    /* a device lost before or while this work ran cannot vouch for it */
    if (s != TSL_DEVICE_LOST && backend_dev_check(be->dev, &rec) == TSL_DEVICE_LOST) s = TSL_DEVICE_LOST;
    if (err && s != TSL_SUCCESS) *err = rec;
    return s;
}

tsl_status tsl_backend_graph_compute(tsl_backend *be, tsl_graph *g, tsl_error *err) {
    tsl_status s = backend_check_compute(be, g, "graph_compute", err);
    if (s != TSL_SUCCESS) return s;
    if (err) tsl_error_clear(err);
    s = backend_begin_compute(be, err);
    if (s != TSL_SUCCESS) return s;
    tsl_error rec, late;
    tsl_error_clear(&rec);
    tsl_error_clear(&late);
    s = be->vt->graph_compute_async(be, g, &rec);
    backend_after(be, s, &rec);
    /* Always drain, so the backend holds no pending status for the next
     * compute; when the submit already failed its record is the one kept. */
    tsl_status s2 = be->vt->synchronize(be, &late);
    backend_after(be, s2, &late);
    if (s == TSL_SUCCESS && s2 != TSL_SUCCESS) {
        s = s2;
        rec = late;
    }
    if (err && s != TSL_SUCCESS) *err = rec;
    return s;
}

/* ---- buffers -------------------------------------------------------------- */

tsl_buffer *tsl_buffer_alloc(tsl_backend *be, size_t size, tsl_error *err) {
    if (!be) {
        error_set(err, TSL_FAILED, "", "", -1, NULL, NULL, "buffer_alloc: backend is NULL");
        return NULL;
    }
    tsl_status ls = backend_dev_check(be->dev, err);
    if (ls != TSL_SUCCESS) return NULL; /* the original cause is in err */
    tsl_buffer *buf = calloc(1, sizeof *buf);
    if (!buf) {
        error_set(err, TSL_ALLOC_FAILED, be->vt->name(be), be->vt->device(be), -1, NULL, NULL,
                  "buffer_alloc: out of host memory for the buffer record");
        return NULL;
    }
    void *base = NULL;
    tsl_error rec;
    tsl_error_clear(&rec);
    void *handle = be->vt->buffer_alloc(be, size, &base, &rec);
    if (!handle) {
        free(buf);
        backend_after(be, rec.status, &rec);
        if (err) *err = rec;
        return NULL; /* the backend filled the record (ALLOC_FAILED, or DEVICE_LOST) */
    }
    buf->be = be;
    buf->handle = handle;
    buf->base = base;
    buf->size = size;
    buf->persistent = false;
    atomic_init(&buf->lost, 0);
    backend_dev_add_buffer(be->dev, buf);
    __atomic_fetch_add(&be->n_buffers_alive, 1, __ATOMIC_ACQ_REL);
    __atomic_fetch_add(&be->bytes_alive, size, __ATOMIC_ACQ_REL);
    return buf;
}

void tsl_buffer_free(tsl_buffer *buf) {
    if (!buf) return;
    tsl_backend *be = buf->be;
    backend_dev_remove_buffer(be->dev, buf);
    be->vt->buffer_free(be, buf->handle);
    free(buf->host_copy);
    __atomic_fetch_sub(&be->n_buffers_alive, 1, __ATOMIC_ACQ_REL);
    __atomic_fetch_sub(&be->bytes_alive, buf->size, __ATOMIC_ACQ_REL);
    free(buf);
}

int tsl_backend_n_buffers(const tsl_backend *be, size_t *bytes) {
    if (bytes) *bytes = be ? __atomic_load_n(&be->bytes_alive, __ATOMIC_ACQUIRE) : 0;
    return be ? __atomic_load_n(&be->n_buffers_alive, __ATOMIC_ACQUIRE) : 0;
}

size_t tsl_buffer_size(const tsl_buffer *buf) { return buf ? buf->size : 0; }

size_t tsl_buffer_alignment(const tsl_buffer *buf) {
    return buf ? buf->be->vt->buffer_alignment(buf->be) : 0;
}

void *tsl_buffer_host_ptr(const tsl_buffer *buf) {
    return buf && buf->be->vt->buffer_is_host ? buf->base : NULL;
}

static const char *tensor_label(const tsl_tensor *t) { return t && t->name[0] ? t->name : "(unnamed)"; }

tsl_status tsl_buffer_place(tsl_buffer *buf, tsl_tensor *t, size_t offset, tsl_error *err) {
    if (!buf) return error_set(err, TSL_FAILED, "", "", -1, t, NULL, "buffer_place: buffer is NULL");
    tsl_backend *be = buf->be;
    const char *bn = be->vt->name(be), *dev = be->vt->device(be);
    if (!t) return error_set(err, TSL_FAILED, bn, dev, -1, NULL, NULL, "buffer_place: tensor is NULL");
    if (t->view_src)
        return error_set(err, TSL_FAILED, bn, dev, -1, t, NULL,
                         "buffer_place: '%s' is a view; views are placed by their source", tensor_label(t));
    if (t->data)
        return error_set(err, TSL_FAILED, bn, dev, -1, t, NULL, "buffer_place: '%s' already has data",
                         tensor_label(t));
    size_t align = be->vt->buffer_alignment(be);
    if (align && (offset % align != 0 || ((uintptr_t)buf->base % align) != 0))
        return error_set(err, TSL_FAILED, bn, dev, -1, t, NULL,
                         "buffer_place: offset %zu for '%s' is not a multiple of the buffer alignment %zu", offset,
                         tensor_label(t), align);
    size_t nb = tsl_nbytes(t);
    if (offset > buf->size || nb > buf->size - offset)
        return error_set(err, TSL_FAILED, bn, dev, -1, t, NULL,
                         "buffer_place: '%s' (%zu bytes) does not fit at offset %zu of a %zu-byte buffer",
                         tensor_label(t), nb, offset, buf->size);
    t->buffer = buf;
    t->data = (char *)buf->base + offset;
    return TSL_SUCCESS;
}

tsl_buffer *tsl_buffer_alloc_ctx(tsl_backend *be, tsl_context *ctx, tsl_error *err) {
    if (!be || !ctx) {
        error_set(err, TSL_FAILED, be ? be->vt->name(be) : "", be ? be->vt->device(be) : "", -1, NULL, NULL,
                  "buffer_alloc_ctx: %s is NULL", be ? "context" : "backend");
        return NULL;
    }
    size_t align = be->vt->buffer_alignment(be);
    if (!align) align = 1;
    /* Pass 1: the packed size, in creation order. */
    size_t total = 0;
    for (tsl_tensor *t = tsl_ctx_first_tensor(ctx); t; t = tsl_ctx_next_tensor(ctx, t)) {
        if (t->data || t->view_src) continue;
        size_t off = (total + align - 1) / align * align;
        size_t nb = tsl_nbytes(t);
        if (off < total || nb > SIZE_MAX - off) {
            error_set(err, TSL_ALLOC_FAILED, be->vt->name(be), be->vt->device(be), -1, t, NULL,
                      "buffer_alloc_ctx: the context's tensors overflow the address space");
            return NULL;
        }
        total = off + nb;
    }
    tsl_buffer *buf = tsl_buffer_alloc(be, total, err);
    if (!buf) return NULL;
    /* Pass 2: place the same tensors at the same offsets. */
    size_t off = 0;
    for (tsl_tensor *t = tsl_ctx_first_tensor(ctx); t; t = tsl_ctx_next_tensor(ctx, t)) {
        if (t->data || t->view_src) continue;
        off = (off + align - 1) / align * align;
        tsl_status s = tsl_buffer_place(buf, t, off, err);
        if (s != TSL_SUCCESS) {
            /* cannot happen with the sizes of pass 1; undo what was placed */
            for (tsl_tensor *u = tsl_ctx_first_tensor(ctx); u && u != t; u = tsl_ctx_next_tensor(ctx, u))
                if (u->buffer == buf && !u->view_src) u->data = NULL, u->buffer = NULL;
            tsl_buffer_free(buf);
            return NULL;
        }
        off += tsl_nbytes(t);
    }
    /* Views of what was just placed can be used on the host right away. */
    for (tsl_tensor *t = tsl_ctx_first_tensor(ctx); t; t = tsl_ctx_next_tensor(ctx, t))
        if (!t->data && t->view_src) backend_tensor_resolve(t);
    return buf;
}

/* ---- the split layout of Q4_0 weights (backend_impl.h) ---------------------- */

bool backend_q4s_would(const tsl_backend *be, const tsl_tensor *t) {
    return be && be->vt->q4_split && t && (t->flags & TSL_FLAG_WEIGHT) && t->type == TSL_TYPE_Q4_0 &&
           tsl_is_contiguous(t) && tsl_nelements(t) % (CORE_Q4S_BLOCKS * TSL_QK4_0) == 0 && be->vt->q4_split(be, t);
}

bool tsl_backend_relays_weight(const tsl_backend *be, const tsl_tensor *t) { return backend_q4s_would(be, t); }

bool backend_q4s(const tsl_tensor *t, const tsl_tensor **root, size_t *roff) {
    if (!t || t->type != TSL_TYPE_Q4_0) return false;
    size_t off = 0;
    const tsl_tensor *r = t;
    for (int depth = 0; r->view_src; depth++) {
        if (depth >= BACKEND_MAX_VIEW_DEPTH) return false;
        off += r->view_offs;
        r = r->view_src;
    }
    const tsl_buffer *b = r->buffer;
    if (!b || !r->data || !backend_q4s_would(b->be, r)) return false;
    if ((size_t)((uintptr_t)r->data - (uintptr_t)b->base) % 16 != 0) return false;
    if (root) *root = r;
    if (roff) *roff = off;
    return true;
}

/* tensor_set/get of a split tensor: the range whole groups of its root,
 * converted through a bounded host buffer */
static tsl_status backend_q4s_io(tsl_backend *be, tsl_buffer *buf, const tsl_tensor *t, const tsl_tensor *root,
                                 size_t pos, size_t boff, void *host, size_t size, bool write, tsl_error *err) {
    const char *what = write ? "tensor_set" : "tensor_get";
    const size_t G = CORE_Q4S_BYTES;
    if (pos % G != 0 || size % G != 0)
        return error_set(err, TSL_FAILED, be->vt->name(be), be->vt->device(be), -1, t, NULL,
                         "%s: %s keeps Q4_0 weight '%s' in groups of %u blocks (%u bytes); bytes [%zu, %zu) of it "
                         "are not whole groups (copy whole groups, or the whole tensor)",
                         what, be->vt->name(be), root->name, CORE_Q4S_BLOCKS, (unsigned)G, pos, pos + size);
    const size_t cap = size < ((size_t)4 << 20) / G * G ? size : ((size_t)4 << 20) / G * G;
    /* host memory, where an allocation fault is injected too (alloc@) */
    fault_site site = {.compute = atomic_load_explicit(&be->n_computes, memory_order_relaxed),
                       .node = -1,
                       .tensor = t,
                       .bytes = cap};
    uint8_t *tmp = fault_plan_fire(be->faults, TSL_FAULT_ALLOC, &site) ? NULL : malloc(cap);
    if (!tmp)
        return error_set(err, TSL_ALLOC_FAILED, be->vt->name(be), be->vt->device(be), -1, t, NULL,
                         "%s: no host memory (%zu bytes) to convert Q4_0 weight '%s'", what, cap, root->name);
    tsl_status s = TSL_SUCCESS;
    for (size_t done = 0; done < size && s == TSL_SUCCESS;) {
        const size_t n = size - done < cap ? size - done : cap;
        uint8_t *h = (uint8_t *)host + done;
        if (write) {
            tsl_q4_0_split(h, tmp, n / G);
            s = be->vt->buffer_set(be, buf->handle, boff + done, tmp, n, t, err);
            if (s == TSL_SUCCESS) backend_buffer_wrote(buf, boff + done, tmp, n);
        } else {
            s = be->vt->buffer_get(be, buf->handle, boff + done, tmp, n, t, err);
            if (s == TSL_SUCCESS) tsl_q4_0_unsplit(tmp, h, n / G);
        }
        done += n;
    }
    free(tmp);
    return s;
}

/* ---- tensor copies -------------------------------------------------------- */

static tsl_status backend_tensor_io(const tsl_tensor *t, void *host, size_t offset, size_t size, bool write,
                                    tsl_error *err) {
    const char *what = write ? "tensor_set" : "tensor_get";
    if (!t) return error_set(err, TSL_FAILED, "", "", -1, NULL, NULL, "%s: tensor is NULL", what);
    void *data = NULL;
    tsl_buffer *buf = NULL;
    bool have = backend_tensor_addr(t, &data, &buf);
    const char *bn = buf ? buf->be->vt->name(buf->be) : "host";
    const char *dev = buf ? buf->be->vt->device(buf->be) : "";
    if (!have)
        return error_set(err, TSL_FAILED, bn, dev, -1, t, NULL,
                         "%s: tensor '%s' has no data (place it in a buffer or allocate the graph first)", what,
                         tensor_label(t));
    if (!host && size > 0)
        return error_set(err, TSL_FAILED, bn, dev, -1, t, NULL, "%s: host pointer is NULL for tensor '%s'", what,
                         tensor_label(t));
    size_t nb = tsl_nbytes(t);
    if (offset > nb || size > nb - offset)
        return error_set(err, TSL_FAILED, bn, dev, -1, t, NULL,
                         "%s: bytes [%zu, %zu) are outside tensor '%s' (%zu bytes)", what, offset,
                         offset + (size > SIZE_MAX - offset ? 0 : size), tensor_label(t), nb);
    if (size == 0) return TSL_SUCCESS;
    if (!buf) {
        /* host memory from a context's arena */
        if (write)
            memcpy((char *)data + offset, host, size);
        else
            memcpy(host, (const char *)data + offset, size);
        return TSL_SUCCESS;
    }
    /* (integer arithmetic: base may be an opaque device address) */
    uintptr_t a = (uintptr_t)data, b0 = (uintptr_t)buf->base;
    size_t boff = (size_t)(a - b0);
    if (a < b0 || boff > buf->size || nb > buf->size - boff)
        return error_set(err, TSL_FAILED, bn, dev, -1, t, NULL,
                         "%s: tensor '%s' lies outside its %zu-byte buffer (offset %zu, %zu bytes)", what,
                         tensor_label(t), buf->size, boff, nb);
    tsl_backend *be = buf->be;
    /* a lost device's memory cannot be trusted, nor written usefully */
    tsl_status s = backend_dev_check(be->dev, err);
    if (s != TSL_SUCCESS) return s;
    const tsl_tensor *root;
    size_t roff;
    if (be->vt->buffer_set && be->vt->buffer_get && backend_q4s(t, &root, &roff))
        return backend_q4s_io(be, buf, t, root, roff + offset, boff + offset, host, size, write, err);
    if (write && be->vt->buffer_set) {
        s = be->vt->buffer_set(be, buf->handle, boff + offset, host, size, t, err);
    } else if (!write && be->vt->buffer_get) {
        s = be->vt->buffer_get(be, buf->handle, boff + offset, host, size, t, err);
    } else if (!be->vt->buffer_is_host) {
        return error_set(err, TSL_FAILED, bn, dev, -1, t, NULL, "%s: backend %s cannot copy tensor '%s'", what, bn,
                         tensor_label(t));
    } else if (write) {
        memcpy((char *)data + offset, host, size);
    } else {
        memcpy(host, (const char *)data + offset, size);
    }
    if (s == TSL_SUCCESS && write) backend_buffer_wrote(buf, boff + offset, host, size);
    return s;
}

tsl_status tsl_tensor_set(tsl_tensor *t, const void *src, size_t offset, size_t size, tsl_error *err) {
    return backend_tensor_io(t, (void *)(uintptr_t)src, offset, size, true, err);
}

tsl_status tsl_tensor_get(const tsl_tensor *t, void *dst, size_t offset, size_t size, tsl_error *err) {
    return backend_tensor_io(t, dst, offset, size, false, err);
}
