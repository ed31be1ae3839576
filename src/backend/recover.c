/*
 * recover.c - device loss and recovery (FAULTS.md sections 1 and 8), and the
 * cache of kernels that failed to build (section 6).
 *
 * The latch. DEVICE_LOST is the one status that outlives its compute: once a
 * device is lost, every later compute, buffer allocation and copy on it
 * returns DEVICE_LOST at once with the ORIGINAL cause, so a caller that
 * missed the first report still learns what happened, and nothing runs on a
 * device whose state cannot be trusted. The latch lives in the device object
 * (backend_dev), not in a backend, because a GPU device is shared by several
 * contexts and loss is device-wide. Checking it costs one acquire load.
 *
 * Recovery. tsl_backend_recover asks the backend to recreate its device
 * objects, then walks the device's buffer list (every live buffer registers
 * itself there when allocated) and gives each fresh memory behind the SAME
 * base address. Tensors hold base + offset and the backend cannot find every
 * tensor that points into a buffer (they live in the callers' contexts), so
 * keeping the address is what lets "tensors keep their placement" hold
 * without walking anything: a GPU backend's base is an opaque address it can
 * keep while replacing the memory object behind it; the CPU keeps its host
 * allocation and wipes it (cpu_backend.c). Every recreated buffer starts
 * zeroed, so whatever is in it afterwards was really restored:
 *
 *  - persistent buffers (weights) are restored from their host source (e.g.
 *    the memory-mapped model file, tsl_buffer_set_host_source) or, failing
 *    that, from a host copy kept for them: the copy is taken when the buffer
 *    is marked persistent and kept current by every tsl_tensor_set into the
 *    buffer. Trade-off: that copy doubles the host memory of such buffers,
 *    and writes made by graphs (not through tsl_tensor_set) do not reach it;
 *    a host source avoids both.
 *  - every other buffer (KV cache, activations, inputs) stays zeroed and is
 *    flagged lost (tsl_buffer_is_lost) so its owner rebuilds it.
 *
 * Recovery also forgets every cached kernel failure: it rebuilds the kernels,
 * and a kernel that is still broken fails again on its next build. That is
 * also the one way to clear the cache without a loss: recover on a device
 * that is not lost drops the kernel failures and touches no buffer. Its time
 * is measured either way (tsl_backend_last_recovery_ms).
 *
 * The kernel-failure cache is per backend: a name ("cpu_mul_mat_q4_0_f32")
 * and the record of its failed build. Failures are rare, so it is a small
 * array searched linearly under a mutex; an atomic count lets every lookup
 * skip it with one load while it is empty, the normal case.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend_impl.h"
#include "core/core.h"

/* ---- the device ----------------------------------------------------------- */

backend_dev *backend_dev_new(void) {
    backend_dev *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    pthread_mutex_init(&d->mu, NULL);
    atomic_init(&d->lost, 0);
    tsl_error_clear(&d->cause);
    d->refs = 1;
    return d;
}

void backend_dev_release(backend_dev *d) {
    if (!d) return;
    pthread_mutex_lock(&d->mu);
    int left = --d->refs;
    pthread_mutex_unlock(&d->mu);
    if (left > 0) return;
    pthread_mutex_destroy(&d->mu);
    free(d);
}

void backend_set_dev(tsl_backend *be, backend_dev *d) {
    if (!be || !d || be->dev == d) return;
    pthread_mutex_lock(&d->mu);
    d->refs++;
    pthread_mutex_unlock(&d->mu);
    backend_dev_release(be->dev);
    be->dev = d;
}

void backend_dev_latch(backend_dev *d, const tsl_error *cause) {
    if (!d) return;
    pthread_mutex_lock(&d->mu);
    if (!atomic_load_explicit(&d->lost, memory_order_relaxed)) {
        if (cause)
            d->cause = *cause;
        else
            error_set(&d->cause, TSL_DEVICE_LOST, NULL, NULL, -1, NULL, NULL, "the device was lost");
        d->cause.status = TSL_DEVICE_LOST;
        error_default_hint(&d->cause);
        atomic_store_explicit(&d->lost, 1, memory_order_release);
        char line[512];
        tsl_error_format(&d->cause, line, sizeof line);
        TSL_LOGE("%s", line);
    }
    pthread_mutex_unlock(&d->mu);
}

tsl_status backend_dev_check(const backend_dev *d, tsl_error *err) {
    if (!d || !atomic_load_explicit(&((backend_dev *)d)->lost, memory_order_acquire)) return TSL_SUCCESS;
    if (err) {
        backend_dev *m = (backend_dev *)d;
        pthread_mutex_lock(&m->mu);
        *err = m->cause;
        pthread_mutex_unlock(&m->mu);
    }
    return TSL_DEVICE_LOST;
}

void backend_dev_add_buffer(backend_dev *d, tsl_buffer *buf) {
    pthread_mutex_lock(&d->mu);
    buf->dev_prev = NULL;
    buf->dev_next = d->buffers;
    if (d->buffers) d->buffers->dev_prev = buf;
    d->buffers = buf;
    pthread_mutex_unlock(&d->mu);
}

void backend_dev_remove_buffer(backend_dev *d, tsl_buffer *buf) {
    pthread_mutex_lock(&d->mu);
    if (buf->dev_prev)
        buf->dev_prev->dev_next = buf->dev_next;
    else if (d->buffers == buf)
        d->buffers = buf->dev_next;
    if (buf->dev_next) buf->dev_next->dev_prev = buf->dev_prev;
    buf->dev_prev = buf->dev_next = NULL;
    pthread_mutex_unlock(&d->mu);
}

bool tsl_backend_is_lost(const tsl_backend *be) {
    return be && be->dev && atomic_load_explicit(&be->dev->lost, memory_order_acquire) != 0;
}

double tsl_backend_last_recovery_ms(const tsl_backend *be) {
    if (!be || !be->dev) return 0.0;
    pthread_mutex_lock(&be->dev->mu);
    double ms = be->dev->last_recovery_ms;
    pthread_mutex_unlock(&be->dev->mu);
    return ms;
}

/* ---- persistent buffers ----------------------------------------------------- */

/* Copy the buffer's current contents into a new host copy; NULL (logged) if
 * the memory or the contents cannot be had. */
static void *recover_take_copy(tsl_buffer *buf) {
    tsl_backend *be = buf->be;
    void *copy = malloc(buf->size ? buf->size : 1);
    if (!copy) {
        TSL_LOGW("%s: no host memory for a %zu-byte copy of a persistent buffer; after a device loss it "
                 "will come back zeroed and reported lost (give it a host source instead)",
                 be->vt->name(be), buf->size);
        return NULL;
    }
    tsl_error e;
    tsl_status s = TSL_SUCCESS;
    if (be->vt->buffer_get)
        s = be->vt->buffer_get(be, buf->handle, 0, copy, buf->size, NULL, &e);
    else if (be->vt->buffer_is_host)
        memcpy(copy, buf->base, buf->size);
    else
        s = TSL_FAILED;
    if (s != TSL_SUCCESS) {
        TSL_LOGW("%s: could not read a persistent buffer for its host copy; after a device loss it will come "
                 "back zeroed and reported lost",
                 be->vt->name(be));
        free(copy);
        return NULL;
    }
    return copy;
}

void tsl_buffer_set_persistent(tsl_buffer *buf, bool on) {
    if (!buf) return;
    if (!on) {
        free(buf->host_copy);
        buf->host_copy = NULL;
        buf->host_src = NULL;
        buf->host_src_size = 0;
        buf->persistent = false;
        return;
    }
    buf->persistent = true;
    /* a source, or an existing copy, already covers it; the contents of a
     * lost device cannot be copied (recovery will report it lost) */
    if (buf->host_src || buf->host_copy || tsl_backend_is_lost(buf->be)) return;
    buf->host_copy = recover_take_copy(buf);
}

void tsl_buffer_set_host_source(tsl_buffer *buf, const void *src, size_t size) {
    if (!buf) return;
    if (!src) {
        /* no source: fall back to a kept copy */
        buf->host_src = NULL;
        buf->host_src_size = 0;
        tsl_buffer_set_persistent(buf, true);
        return;
    }
    free(buf->host_copy);
    buf->host_copy = NULL;
    buf->host_src = src;
    buf->host_src_size = size < buf->size ? size : buf->size;
    buf->persistent = true;
}

void backend_buffer_wrote(tsl_buffer *buf, size_t offset, const void *src, size_t n) {
    /* the copy is only kept for persistent buffers without a source */
    if (buf->host_copy && n) memcpy((char *)buf->host_copy + offset, src, n);
}

bool tsl_buffer_is_lost(const tsl_buffer *buf) {
    return buf && atomic_load_explicit(&((tsl_buffer *)buf)->lost, memory_order_acquire) != 0;
}

void tsl_buffer_clear_lost(tsl_buffer *buf) {
    if (buf) atomic_store_explicit(&buf->lost, 0, memory_order_release);
}

/* ---- recovery -------------------------------------------------------------- */

static double recover_now_ms(void) { return (double)core_now_ns() * 1e-6; }

/* Fresh, zeroed memory behind buf's base: the backend's recreate, or, for a
 * backend without one, zeros written through its copy-in. */
static tsl_status recover_recreate(tsl_buffer *buf, tsl_error *err) {
    tsl_backend *be = buf->be;
    if (be->vt->buffer_recreate) return be->vt->buffer_recreate(be, &buf->handle, buf->size, err);
    if (!be->vt->buffer_set) {
        if (!be->vt->buffer_is_host)
            return error_set(err, TSL_DEVICE_LOST, be->vt->name(be), be->vt->device(be), -1, NULL, NULL,
                             "recover: the backend cannot rewrite its buffers");
        memset(buf->base, 0, buf->size);
        return TSL_SUCCESS;
    }
    enum { CHUNK = 1 << 16 };
    void *zero = calloc(1, CHUNK);
    if (!zero)
        return error_set(err, TSL_ALLOC_FAILED, be->vt->name(be), be->vt->device(be), -1, NULL, NULL,
                         "recover: out of host memory");
    tsl_status s = TSL_SUCCESS;
    for (size_t off = 0; off < buf->size && s == TSL_SUCCESS; off += CHUNK) {
        size_t n = buf->size - off < CHUNK ? buf->size - off : CHUNK;
        s = be->vt->buffer_set(be, buf->handle, off, zero, n, NULL, err);
    }
    free(zero);
    return s;
}

/* Recreate one buffer and restore it if persistent. Sets its lost flag. */
static tsl_status recover_buffer(tsl_buffer *buf, int *n_restored, int *n_zeroed, tsl_error *err) {
    tsl_backend *be = buf->be;
    tsl_status s = recover_recreate(buf, err);
    if (s != TSL_SUCCESS) return s;
    const void *src = buf->host_src ? buf->host_src : buf->host_copy;
    size_t n = buf->host_src ? buf->host_src_size : buf->size;
    bool restore = buf->persistent && src;
    if (restore && n) {
        if (be->vt->buffer_set)
            s = be->vt->buffer_set(be, buf->handle, 0, src, n, NULL, err);
        else
            memcpy(buf->base, src, n);
        if (s != TSL_SUCCESS) return s;
    }
    atomic_store_explicit(&buf->lost, restore ? 0 : 1, memory_order_release);
    if (restore)
        (*n_restored)++;
    else
        (*n_zeroed)++;
    return TSL_SUCCESS;
}

tsl_status tsl_backend_recover(tsl_backend *be, tsl_error *err) {
    if (!be) return error_set(err, TSL_FAILED, "", "", -1, NULL, NULL, "recover: backend is NULL");
    if (err) tsl_error_clear(err);
    double t0 = recover_now_ms();
    backend_dev *d = be->dev;
    bool lost = atomic_load_explicit(&d->lost, memory_order_acquire) != 0;
    if (be->vt->recover) {
        tsl_status s = be->vt->recover(be, lost, err);
        if (s != TSL_SUCCESS) return s; /* the hook says why; the latch stays */
    }
    int n_restored = 0, n_zeroed = 0;
    if (lost) {
        tsl_status s = TSL_SUCCESS;
        pthread_mutex_lock(&d->mu);
        for (tsl_buffer *buf = d->buffers; buf && s == TSL_SUCCESS; buf = buf->dev_next)
            s = recover_buffer(buf, &n_restored, &n_zeroed, err);
        pthread_mutex_unlock(&d->mu);
        if (s != TSL_SUCCESS) {
            if (err) {
                char msg[sizeof err->message];
                snprintf(msg, sizeof msg, "recovery failed, the device stays lost: %.200s", err->message);
                memcpy(err->message, msg, sizeof msg);
            }
            TSL_LOGE("%s: recovery failed (%s); the device stays lost", be->vt->name(be), tsl_status_str(s));
            return s;
        }
    }
    /* kernels are rebuilt on next use; one still broken fails again then */
    backend_kernel_cache_clear(be);
    atomic_fetch_add_explicit(&be->support_gen, 1, memory_order_release);
    double ms = recover_now_ms() - t0;
    pthread_mutex_lock(&d->mu);
    if (lost) {
        tsl_error_clear(&d->cause);
        atomic_store_explicit(&d->lost, 0, memory_order_release);
    }
    d->last_recovery_ms = ms;
    pthread_mutex_unlock(&d->mu);
    if (lost)
        TSL_LOGW("%s: device recovered in %.3f ms: %d persistent buffer(s) restored, %d zeroed and reported lost",
                 be->vt->name(be), ms, n_restored, n_zeroed);
    return TSL_SUCCESS;
}

/* ---- the kernel-failure cache ------------------------------------------------ */

bool backend_kernel_failed(tsl_backend *be, const char *name, tsl_error *rec) {
    if (!be || !name || !backend_kernel_any_failed(be)) return false;
    backend_kcache *c = &be->kcache;
    bool found = false;
    pthread_mutex_lock(&c->mu);
    int n = atomic_load_explicit(&c->n, memory_order_relaxed);
    for (int i = 0; i < n && !found; i++)
        if (strcmp(c->e[i].name, name) == 0) {
            found = true;
            if (rec) *rec = c->e[i].rec;
        }
    pthread_mutex_unlock(&c->mu);
    return found;
}

void backend_kernel_fail(tsl_backend *be, const char *name, const tsl_error *rec) {
    if (!be || !name) return;
    backend_kcache *c = &be->kcache;
    pthread_mutex_lock(&c->mu);
    int n = atomic_load_explicit(&c->n, memory_order_relaxed);
    for (int i = 0; i < n; i++)
        if (strcmp(c->e[i].name, name) == 0) {
            pthread_mutex_unlock(&c->mu);
            return; /* the first failure's record is kept */
        }
    if (n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 8;
        backend_kfail *e = realloc(c->e, (size_t)cap * sizeof *e);
        if (!e) {
            pthread_mutex_unlock(&c->mu);
            /* not cached: the kernel is built (and fails) again on its next use */
            TSL_LOGW("%s: out of memory caching the failure of kernel %s", be->vt->name(be), name);
            return;
        }
        c->e = e;
        c->cap = cap;
    }
    backend_kfail *k = &c->e[n];
    snprintf(k->name, sizeof k->name, "%s", name);
    if (rec)
        k->rec = *rec;
    else
        error_set(&k->rec, TSL_FAILED, be->vt->name(be), be->vt->device(be), -1, NULL, name,
                  "could not be built");
    atomic_store_explicit(&c->n, n + 1, memory_order_release);
    pthread_mutex_unlock(&c->mu);
    atomic_fetch_add_explicit(&be->support_gen, 1, memory_order_release);
}

void backend_kernel_cache_clear(tsl_backend *be) {
    if (!be) return;
    pthread_mutex_lock(&be->kcache.mu);
    atomic_store_explicit(&be->kcache.n, 0, memory_order_release);
    pthread_mutex_unlock(&be->kcache.mu);
    atomic_fetch_add_explicit(&be->support_gen, 1, memory_order_release);
}

int tsl_backend_build_kernels(tsl_backend *be, tsl_kernel_fn fn, void *user) {
    if (!be) return -1;
    if (tsl_backend_is_lost(be)) return -1;
    if (!be->vt->build_kernels) return 0; /* nothing to build ahead of use */
    return be->vt->build_kernels(be, fn, user);
}
