/*
 * weights.c - a model's weights in a device's memory.
 *
 * On the CPU the weights are read where the file is mapped. A GPU backend
 * can only read its own buffers, so for contexts on a device the model
 * keeps a second set of weight tensors there: same names, types and shapes,
 * placed in buffers of that device, uploaded from the mapping once. The
 * decisions:
 *
 *  - One copy per model and device, made by the first context on the device
 *    and shared by every later one (two contexts on one GPU do not upload
 *    twice), kept until tsl_model_free: a server that makes a context per
 *    request must not re-upload gigabytes each time. Contexts on the CPU
 *    keep reading the mapping, so a model serves CPU and GPU contexts at
 *    once. Devices are told apart by their Vulkan index; a backend whose
 *    memory is neither host memory nor a Vulkan device's is refused.
 *  - The copy's buffers belong to a backend the model makes for itself on
 *    that device (backends on one device share the VkDevice, its memory and
 *    its loss). Contexts borrow their backends from the caller, who may free
 *    them in any order; a buffer must not outlive its backend, so the
 *    buffers cannot belong to any context's backend.
 *  - As few buffers as the device allows: one, unless the weights exceed
 *    the largest single allocation the device grants (NVIDIA's is 4 GiB, a
 *    Llama-3-8B Q4_0 is 4.3 GB); then consecutive runs of tensors, each as
 *    large as allowed.
 *  - Weights are flagged TSL_FLAG_WEIGHT: the backend may keep them in a
 *    layout its kernels read faster (Vulkan: Q4_0 in groups of 64 blocks,
 *    quants before scales), converting as they are uploaded. A run of
 *    tensors holding such a weight is packed, not laid out as the file:
 *    the file's bytes could not restore it.
 *  - File layout when it can be had: a buffer holds a byte range of the
 *    file's data section as it is (each tensor at its file offset minus the
 *    range's start), which needs every such offset to be a multiple of the
 *    buffer alignment (256 on Vulkan; GGUF files say 32 unless they set
 *    general.alignment, as `tensile gen-model` does). Such a buffer is
 *    persistent with the mapping as its host source, so a recovery after
 *    DEVICE_LOST restores it by itself, without a host copy. Otherwise the
 *    tensors are packed at aligned offsets and the buffer is not marked
 *    persistent: recovery hands it back zeroed and flagged lost, and the
 *    next decode uploads it again from the mapping (llm_devw_ensure). That
 *    is the same work the backend would do, without a host copy of the
 *    weights (which would double resident memory for every real file).
 *  - Resident memory holds the weights once: uploading reads the mapping
 *    sequentially (kernel readahead), and the pages read are dropped from
 *    this process (MADV_DONTNEED; the file stays in the page cache, and a
 *    CPU context reading them again simply faults them back in).
 *  - A progress bar, as loading has, for uploads of 64 MB and more when
 *    stderr is a terminal; uploads go in 64 MiB pieces so it moves.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/core.h"
#include "model/llm_impl.h"

#define DEVW_CHUNK ((size_t)64 << 20)
/* a tensor's pieces: whole groups of a split Q4_0 weight (core.h) */
#define DEVW_TCHUNK (DEVW_CHUNK / CORE_Q4S_BYTES * CORE_Q4S_BYTES)
#define DEVW_PROGRESS_MIN_BYTES ((uint64_t)64 << 20)

typedef struct devw_tensor {
    tsl_tensor *t;   /* the copy on the device */
    const char *src; /* its bytes in the mapping */
    size_t size;
    size_t foff;     /* offset in the file's data section */
    int seg;         /* the buffer it is placed in (d->seg), and where */
    size_t boff;
} devw_tensor;

typedef struct devw_seg {
    tsl_buffer *buf;
    tsl_tensor *blob; /* file layout: an I8 tensor over the whole buffer, to upload it in one range */
    const char *src;  /* file layout: the bytes the buffer mirrors */
    size_t size;
    bool file_layout;
    int first, n; /* its tensors: d->t[first, first + n), in file order */
} devw_seg;

/* A fused matrix on the device and the same rows in the mapping, for a
 * node that the device cannot run and the CPU then reads from the host. */
typedef struct devw_fused {
    tsl_tensor *dev, *host;
} devw_fused;

struct llm_devw {
    llm_devw *next;
    devw_fused *fused; /* 3 per layer at most */
    int n_fused;
    int device;
    tsl_backend *be; /* the model's own backend on the device: owns the buffers */
    tsl_context *ctx;
    llm_weights w;
    devw_tensor *t;
    int n_t;
    devw_seg *seg;
    int n_seg;
    int w_layers;
    uint64_t bytes, uploads;
    /* the layers' q, k and v biases one row each (devw_bias): a buffer of
     * their own, persistent with bias_host as its source */
    tsl_buffer *bias_buf;
    float *bias_host;
};

static size_t devw_round(size_t v, size_t a) { return a > 1 ? (v + a - 1) / a * a : v; }

static int devw_cmp_off(const void *a, const void *b) {
    const devw_tensor *x = a, *y = b;
    return (x->foff > y->foff) - (x->foff < y->foff);
}

/* madvise the pages holding [p, p + n), a range of the mapping. Rounding
 * out to whole pages stays inside the mapping; dropping (MADV_DONTNEED) a
 * page that also holds header bytes is harmless, as the mapping is a
 * read-only file mapping and a later read faults the page back in. */
static void devw_advise(const char *p, size_t n, int advice) {
    const uintptr_t pg = sysconf(_SC_PAGESIZE) > 0 ? (uintptr_t)sysconf(_SC_PAGESIZE) : 4096;
    uintptr_t a = (uintptr_t)p / pg * pg, b = devw_round((uintptr_t)p + n, (size_t)pg);
    if (b > a) madvise((void *)a, b - a, advice);
}

static const char *devw_file_name(const tsl_model *m) {
    const char *b = strrchr(m->path, '/');
    return b ? b + 1 : m->path;
}

typedef struct devw_bar {
    bool on;
    char verb[64];
    const char *name;
    size_t done, total;
    double last;
} devw_bar;

static void devw_bar_add(devw_bar *b, size_t n) {
    b->done += n;
    if (!b->on) return;
    double t = llm_now();
    if (t - b->last > 0.05 || b->done == b->total) {
        llm_progress_draw(b->verb, b->name, b->done, b->total);
        b->last = t;
    }
}

/* Upload segment k (all of it) from the mapping. */
static tsl_status devw_upload_seg(llm_devw *d, int k, devw_bar *bar, tsl_error *err) {
    devw_seg *s = &d->seg[k];
    tsl_status st = TSL_SUCCESS;
    if (s->file_layout) {
        for (size_t off = 0; off < s->size && st == TSL_SUCCESS; off += DEVW_CHUNK) {
            size_t c = s->size - off < DEVW_CHUNK ? s->size - off : DEVW_CHUNK;
            st = tsl_tensor_set(s->blob, s->src + off, off, c, err);
            if (st == TSL_SUCCESS) devw_bar_add(bar, c);
        }
        if (st == TSL_SUCCESS) devw_advise(s->src, s->size, MADV_DONTNEED);
        return st;
    }
    for (int i = s->first; i < s->first + s->n && st == TSL_SUCCESS; i++) {
        const devw_tensor *t = &d->t[i];
        for (size_t off = 0; off < t->size && st == TSL_SUCCESS; off += DEVW_TCHUNK) {
            size_t c = t->size - off < DEVW_TCHUNK ? t->size - off : DEVW_TCHUNK;
            st = tsl_tensor_set(t->t, t->src + off, off, c, err);
            if (st == TSL_SUCCESS) devw_bar_add(bar, c);
        }
        if (st == TSL_SUCCESS) devw_advise(t->src, t->size, MADV_DONTNEED);
    }
    return st;
}

static void devw_free(llm_devw *d) {
    if (!d) return;
    for (int k = 0; k < d->n_seg; k++) tsl_buffer_free(d->seg[k].buf);
    tsl_buffer_free(d->bias_buf);
    free(d->bias_host);
    tsl_ctx_free(d->ctx);
    tsl_backend_free(d->be);
    free(d->w.layers);
    free(d->fused);
    free(d->t);
    free(d->seg);
    free(d);
}

/* The copy of host tensor h (NULL stays NULL). */
static tsl_tensor *devw_twin(const tsl_model *m, tsl_tensor **by_index, const tsl_tensor *h) {
    if (!h) return NULL;
    int64_t i = tsl_gguf_find_tensor(m->gguf, h->name);
    return i >= 0 ? by_index[i] : NULL;
}

static const devw_tensor *devw_entry(const llm_devw *d, const tsl_tensor *t) {
    for (int i = 0; t && i < d->n_t; i++)
        if (d->t[i].t == t) return &d->t[i];
    return NULL;
}

/* Matrices a, b (and c) with the same type and row length, placed back to
 * back in one buffer in that order, are one matrix of their rows together:
 * a tensor over the same bytes, which a single-token graph multiplies
 * once instead of two or three times (arch.c). Files written by `tensile
 * gen-model`, and llama.cpp's for the gate and up matrices, store them so.
 * NULL when the layout does not allow it (then the graphs use a, b, c). */
static tsl_tensor *devw_fuse(llm_devw *d, tsl_tensor *a, tsl_tensor *b, tsl_tensor *c, const char *fmt, int il) {
    const tsl_tensor *m[3] = {a, b, c};
    const devw_tensor *e[3] = {devw_entry(d, a), devw_entry(d, b), c ? devw_entry(d, c) : NULL};
    const int n = c ? 3 : 2;
    int64_t rows = 0;
    for (int i = 0; i < n; i++) {
        if (!e[i] || m[i]->type != a->type || m[i]->ne[0] != a->ne[0] || m[i]->ne[2] != 1 || m[i]->ne[3] != 1 ||
            !tsl_is_contiguous(m[i]))
            return NULL;
        if (i > 0 && (e[i]->seg != e[0]->seg || e[i]->boff != e[i - 1]->boff + tsl_nbytes(m[i - 1]))) return NULL;
        /* the parts all in the backend's own layout or all not, and the
         * whole then in it too (a layout of whole groups: each part's
         * groups are the whole's) */
        if (tsl_backend_relays_weight(d->be, m[i]) != tsl_backend_relays_weight(d->be, a)) return NULL;
        rows += m[i]->ne[1];
    }
    /* Back to back on the device means back to back in the file as well
     * (the copy keeps the file's order, and a size that is a multiple of
     * the device's alignment is one of the file's): the host twin is the
     * same rows in the mapping, a tensor that points there as the model's
     * own weights do (data set, no buffer: host memory, read-only). */
    tsl_tensor *f = tsl_new_tensor_2d(d->ctx, a->type, a->ne[0], rows);
    tsl_tensor *h = tsl_new_tensor_2d(d->ctx, a->type, a->ne[0], rows);
    if (!f || !h || d->n_fused >= 3 * d->w_layers) return NULL;
    for (int i = 1; i < n; i++)
        if (e[i]->src != e[i - 1]->src + e[i - 1]->size) return NULL;
    f->flags |= TSL_FLAG_PERSISTENT | TSL_FLAG_WEIGHT;
    if (tsl_backend_relays_weight(d->be, f) != tsl_backend_relays_weight(d->be, a)) return NULL;
    if (tsl_buffer_place(d->seg[e[0]->seg].buf, f, e[0]->boff, NULL) != TSL_SUCCESS) return NULL;
    h->data = (void *)(uintptr_t)e[0]->src;
    tsl_tensor_format_name(h, fmt, il);
    d->fused[d->n_fused++] = (devw_fused){.dev = f, .host = h};
    return tsl_tensor_format_name(f, fmt, il);
}

/* Layer il's q, k and v biases as one row on the device (devw_bias): its
 * bytes there (a multiple of align), 0 where it takes none. */
static size_t devw_bias_size(const tsl_model *m, const llm_devw *d, int il, size_t align) {
    const llm_layer *h = &m->w.layers[il];
    const tsl_tensor *b[3] = {h->bq, h->bk, h->bv};
    if (!d->w.layers[il].wqkv) return 0;
    int64_t n = 0;
    for (int j = 0; j < 3; j++) {
        if (!b[j] || b[j]->type != TSL_TYPE_F32 || !tsl_is_contiguous(b[j]) || tsl_nelements(b[j]) != b[j]->ne[0] ||
            !b[j]->data)
            return 0;
        n += b[j]->ne[0];
    }
    return devw_round((size_t)n * sizeof(float), align);
}

/* Where a layer's Q, K and V matrices are one (wqkv) and it has the three
 * biases (qwen2), the biases one row as well (bqkv): a single-token graph
 * then adds them to the product at once, which the Vulkan backend folds
 * into the product's kernel (a level and three dispatches fewer a layer).
 * The files keep the biases apart, so the rows are copied: into one small
 * buffer for all layers, persistent with a host copy as its source (a
 * recovery restores it by itself), and each row with a host twin for a
 * node the device cannot run. Nothing when no layer has them; false with
 * err set when memory runs out. */
static bool devw_bias(tsl_model *m, llm_devw *d, size_t align, tsl_error *err) {
    size_t total = 0;
    for (int il = 0; il < m->hp.n_layer; il++) total += devw_bias_size(m, d, il, align);
    if (!total) return true;
    const char *bname = tsl_backend_name(d->be);
    tsl_error e;
    error_set(&e, TSL_ALLOC_FAILED, bname, tsl_backend_device(d->be), -1, NULL, NULL, "out of host memory");
    d->bias_host = calloc(1, total);
    d->bias_buf = d->bias_host ? tsl_buffer_alloc(d->be, total, &e) : NULL;
    if (!d->bias_buf) {
        if (err) {
            *err = e;
            snprintf(err->message, sizeof err->message,
                     "model '%.64s': could not allocate %zu bytes of %s memory for its q/k/v biases (%.96s)",
                     devw_file_name(m), total, bname, e.message);
        }
        return false;
    }
    size_t off = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const size_t size = devw_bias_size(m, d, il, align);
        if (!size) continue;
        llm_layer *L = &d->w.layers[il];
        const llm_layer *h = &m->w.layers[il];
        const int64_t nq = h->bq->ne[0], nk = h->bk->ne[0], nv = h->bv->ne[0];
        float *row = (float *)((char *)d->bias_host + off);
        memcpy(row, h->bq->data, (size_t)nq * sizeof(float));
        memcpy(row + nq, h->bk->data, (size_t)nk * sizeof(float));
        memcpy(row + nq + nk, h->bv->data, (size_t)nv * sizeof(float));
        tsl_tensor *t = tsl_new_tensor_1d(d->ctx, TSL_TYPE_F32, nq + nk + nv);
        tsl_tensor *ht = tsl_new_tensor_1d(d->ctx, TSL_TYPE_F32, nq + nk + nv);
        if (!t || !ht || d->n_fused >= 3 * d->w_layers) break;
        if (tsl_buffer_place(d->bias_buf, t, off, err) != TSL_SUCCESS) return false;
        t->flags |= TSL_FLAG_PERSISTENT;
        ht->data = row;
        tsl_tensor_format_name(t, "blk.%d.attn_qkv.bias", il);
        tsl_tensor_format_name(ht, "blk.%d.attn_qkv.bias", il);
        d->fused[d->n_fused++] = (devw_fused){.dev = t, .host = ht};
        L->bqkv = t;
        off += size;
    }
    /* the rows to the device, then the host copy as the buffer's source */
    tsl_tensor *blob = tsl_new_tensor_1d(d->ctx, TSL_TYPE_I8, (int64_t)total);
    if (tsl_ctx_error(d->ctx) || !blob) {
        error_set(err, TSL_FAILED, bname, tsl_backend_device(d->be), -1, NULL, NULL, "model weights: %s",
                  tsl_ctx_error(d->ctx) ? tsl_ctx_error(d->ctx) : "out of metadata memory");
        return false;
    }
    if (tsl_buffer_place(d->bias_buf, blob, 0, err) != TSL_SUCCESS ||
        tsl_tensor_set(blob, d->bias_host, 0, total, err) != TSL_SUCCESS)
        return false;
    tsl_buffer_set_host_source(d->bias_buf, d->bias_host, total);
    d->bytes += total;
    return true;
}

/* Split the tensors (sorted by file offset) into runs that each fit one
 * allocation, and choose each run's layout. */
static tsl_status devw_segments(tsl_model *m, llm_devw *d, size_t align, size_t max_alloc, const char *base,
                                const char *bname, tsl_error *err) {
    d->seg = calloc((size_t)(d->n_t > 0 ? d->n_t : 1), sizeof *d->seg);
    if (!d->seg) return error_set(err, TSL_ALLOC_FAILED, bname, "", -1, NULL, NULL, "model weights: out of memory");
    int i = 0;
    while (i < d->n_t) {
        devw_seg *s = &d->seg[d->n_seg++];
        s->first = i;
        const size_t lo = d->t[i].foff;
        size_t packed = 0;
        bool aligned = true;
        for (; i < d->n_t; i++) {
            const devw_tensor *t = &d->t[i];
            size_t span = t->foff + t->size - lo, pk = devw_round(packed, align) + t->size;
            if (i > s->first && (span > max_alloc || pk > max_alloc)) break;
            if (t->size > max_alloc)
                return error_set(err, TSL_ALLOC_FAILED, bname, "", -1, t->t, NULL,
                                 "model '%s': tensor '%s' (%zu bytes) is larger than the largest buffer the device "
                                 "allows (%zu bytes)",
                                 devw_file_name(m), t->t->name, t->size, max_alloc);
            packed = pk;
            if ((t->foff - lo) % align || tsl_backend_relays_weight(d->be, t->t)) aligned = false;
        }
        s->n = i - s->first;
        const devw_tensor *last = &d->t[i - 1];
        s->file_layout = aligned;
        s->src = base + lo;
        s->size = s->file_layout ? last->foff + last->size - lo : packed;
    }
    return TSL_SUCCESS;
}

static llm_devw *devw_new(tsl_model *m, int device, tsl_error *err) {
    llm_devw *d = calloc(1, sizeof *d);
    tsl_error e;
    tsl_error_clear(&e);
    if (!d) {
        error_set(err, TSL_ALLOC_FAILED, "", "", -1, NULL, NULL, "model weights: out of memory");
        return NULL;
    }
    d->device = device;
    d->be = tsl_backend_vulkan_new(device, err);
    if (!d->be) {
        free(d);
        return NULL;
    }
    const char *bname = tsl_backend_name(d->be), *bdev = tsl_backend_device(d->be);
    tsl_vulkan_device_info info;
    if (tsl_backend_vulkan_info(d->be, &info, err) != TSL_SUCCESS) goto fail;

    const tsl_gguf *g = m->gguf;
    const int64_t nt = tsl_gguf_tensor_count(g);
    d->n_t = (int)nt;
    d->t = calloc((size_t)(nt > 0 ? nt : 1), sizeof *d->t);
    tsl_tensor **by_index = calloc((size_t)(nt > 0 ? nt : 1), sizeof *by_index);
    d->ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = (size_t)(nt + 4 * m->hp.n_layer + 16) * (sizeof(tsl_tensor) + 128),
                                          .no_alloc = true});
    d->w.layers = calloc((size_t)m->hp.n_layer, sizeof *d->w.layers);
    d->w_layers = m->hp.n_layer;
    d->fused = calloc((size_t)(3 * m->hp.n_layer), sizeof *d->fused);
    if (!d->t || !by_index || !d->ctx || !d->w.layers || !d->fused) {
        free(by_index);
        error_set(err, TSL_ALLOC_FAILED, bname, bdev, -1, NULL, NULL, "model weights: out of memory");
        goto fail;
    }
    const char *base = NULL;
    for (int64_t i = 0; i < nt; i++) {
        const tsl_gguf_tensor_info *ti = tsl_gguf_tensor(g, i);
        tsl_tensor *c = tsl_new_tensor(d->ctx, ti->type, ti->n_dims, ti->ne);
        if (!c) break;
        tsl_tensor_set_name(c, ti->name);
        c->flags |= TSL_FLAG_PERSISTENT | TSL_FLAG_WEIGHT;
        by_index[i] = c;
        d->t[i] = (devw_tensor){.t = c, .src = ti->data, .size = ti->size, .foff = (size_t)ti->offset};
        if (i == 0) base = (const char *)ti->data - ti->offset;
    }
    if (tsl_ctx_error(d->ctx)) {
        error_set(err, TSL_FAILED, bname, bdev, -1, NULL, NULL, "model weights: %s", tsl_ctx_error(d->ctx));
        free(by_index);
        goto fail;
    }
    /* the forward graph's view of the copies */
    d->w.tok_embd = devw_twin(m, by_index, m->w.tok_embd);
    d->w.output_norm = devw_twin(m, by_index, m->w.output_norm);
    d->w.output = devw_twin(m, by_index, m->w.output);
    d->w.rope_freqs = devw_twin(m, by_index, m->w.rope_freqs);
    for (int il = 0; il < m->hp.n_layer; il++) {
        const llm_layer *h = &m->w.layers[il];
        llm_layer *L = &d->w.layers[il];
        L->attn_norm = devw_twin(m, by_index, h->attn_norm);
        L->wq = devw_twin(m, by_index, h->wq);
        L->wk = devw_twin(m, by_index, h->wk);
        L->wv = devw_twin(m, by_index, h->wv);
        L->wo = devw_twin(m, by_index, h->wo);
        L->bq = devw_twin(m, by_index, h->bq);
        L->bk = devw_twin(m, by_index, h->bk);
        L->bv = devw_twin(m, by_index, h->bv);
        L->q_norm = devw_twin(m, by_index, h->q_norm);
        L->k_norm = devw_twin(m, by_index, h->k_norm);
        L->ffn_norm = devw_twin(m, by_index, h->ffn_norm);
        L->ffn_gate = devw_twin(m, by_index, h->ffn_gate);
        L->ffn_up = devw_twin(m, by_index, h->ffn_up);
        L->ffn_down = devw_twin(m, by_index, h->ffn_down);
    }
    free(by_index);

    qsort(d->t, (size_t)d->n_t, sizeof *d->t, devw_cmp_off);
    const size_t align = tsl_backend_alignment(d->be) ? tsl_backend_alignment(d->be) : 1;
    size_t max_alloc = info.max_allocation_bytes ? (size_t)info.max_allocation_bytes : SIZE_MAX;
    max_alloc = max_alloc / align * align;
    if (devw_segments(m, d, align, max_alloc, base, bname, err) != TSL_SUCCESS) goto fail;

    /* buffers and placement */
    for (int k = 0; k < d->n_seg; k++) {
        devw_seg *s = &d->seg[k];
        s->buf = tsl_buffer_alloc(d->be, s->size ? s->size : 1, &e);
        if (!s->buf) {
            if (err) {
                *err = e;
                snprintf(err->message, sizeof err->message,
                         "model '%.64s': could not allocate %.1f MiB of %s memory for its weights (%.120s)",
                         devw_file_name(m), (double)s->size / 1048576.0, bname, e.message);
            }
            goto fail;
        }
        d->bytes += s->size;
        size_t off = 0;
        tsl_status st = TSL_SUCCESS;
        for (int i = s->first; i < s->first + s->n && st == TSL_SUCCESS; i++) {
            devw_tensor *t = &d->t[i];
            off = s->file_layout ? t->foff - (size_t)(s->src - base) : devw_round(off, align);
            st = tsl_buffer_place(s->buf, t->t, off, err);
            t->seg = k;
            t->boff = off;
            if (!s->file_layout) off += t->size;
        }
        if (st == TSL_SUCCESS && s->file_layout) {
            s->blob = tsl_new_tensor_1d(d->ctx, TSL_TYPE_I8, (int64_t)s->size);
            st = s->blob ? tsl_buffer_place(s->buf, s->blob, 0, err)
                         : error_set(err, TSL_FAILED, bname, bdev, -1, NULL, NULL, "model weights: %s",
                                     tsl_ctx_error(d->ctx) ? tsl_ctx_error(d->ctx) : "out of metadata memory");
        }
        if (st != TSL_SUCCESS) goto fail;
    }

    for (int il = 0; il < m->hp.n_layer; il++) {
        llm_layer *L = &d->w.layers[il];
        L->wqkv = devw_fuse(d, L->wq, L->wk, L->wv, "blk.%d.attn_qkv.weight", il);
        L->ffn_gate_up = devw_fuse(d, L->ffn_gate, L->ffn_up, NULL, "blk.%d.ffn_gate_up.weight", il);
    }
    if (!devw_bias(m, d, align, err)) goto fail;

    /* upload */
    devw_bar bar = {.on = m->progress && isatty(2) && d->bytes >= DEVW_PROGRESS_MIN_BYTES,
                    .name = devw_file_name(m),
                    .total = (size_t)d->bytes};
    snprintf(bar.verb, sizeof bar.verb, "uploading to %s", bname);
    for (int k = 0; k < d->n_seg; k++) {
        devw_advise(d->seg[k].src, d->seg[k].size, MADV_SEQUENTIAL);
        if (devw_upload_seg(d, k, &bar, err) != TSL_SUCCESS) {
            if (bar.on) fputc('\n', stderr);
            goto fail;
        }
    }
    if (bar.on) fputc('\n', stderr);
    d->uploads = 1;
    /* only now: a host source marks the buffer persistent, and nothing
     * must restore a half-uploaded copy */
    for (int k = 0; k < d->n_seg; k++)
        if (d->seg[k].file_layout) tsl_buffer_set_host_source(d->seg[k].buf, d->seg[k].src, d->seg[k].size);
    int n_file = 0;
    for (int k = 0; k < d->n_seg; k++) n_file += d->seg[k].file_layout;
    TSL_LOGI("model '%s': weights on %s (%s): %.1f MiB in %d buffer%s, %d laid out as the file", devw_file_name(m),
             bname, bdev, (double)d->bytes / 1048576.0, d->n_seg, d->n_seg == 1 ? "" : "s", n_file);
    return d;
fail:
    devw_free(d);
    return NULL;
}

const llm_weights *llm_weights_for(tsl_model *m, tsl_backend *be, bool host, llm_devw **out, tsl_error *err) {
    *out = NULL;
    if (host) return &m->w;
    tsl_vulkan_device_info info;
    if (!tsl_backend_is_vulkan(be) || tsl_backend_vulkan_info(be, &info, NULL) != TSL_SUCCESS) {
        error_set(err, TSL_FAILED, tsl_backend_name(be), tsl_backend_device(be), -1, NULL, NULL,
                  "model '%s': %s keeps tensors in memory the host cannot read and is not a Vulkan device; the "
                  "weights can go to host memory or a Vulkan device",
                  devw_file_name(m), tsl_backend_name(be));
        return NULL;
    }
    pthread_mutex_lock(&m->dev_mu);
    llm_devw *d = m->devw;
    while (d && d->device != info.index) d = d->next;
    if (!d) {
        d = devw_new(m, info.index, err);
        if (d) {
            d->next = m->devw;
            m->devw = d;
        }
    }
    pthread_mutex_unlock(&m->dev_mu);
    if (!d) return NULL;
    *out = d;
    return &d->w;
}

tsl_status llm_devw_ensure(tsl_model *m, llm_devw *d, bool recovered, tsl_error *err) {
    if (!d) return TSL_SUCCESS;
    if (recovered)
        for (int k = 0; k < d->n_seg; k++)
            if (d->seg[k].file_layout && !tsl_buffer_is_lost(d->seg[k].buf))
                devw_advise(d->seg[k].src, d->seg[k].size, MADV_DONTNEED);
    bool any = false;
    for (int k = 0; k < d->n_seg && !any; k++) any = tsl_buffer_is_lost(d->seg[k].buf);
    if (!any) return TSL_SUCCESS;
    pthread_mutex_lock(&m->dev_mu);
    tsl_status st = TSL_SUCCESS;
    size_t total = 0;
    for (int k = 0; k < d->n_seg; k++)
        if (tsl_buffer_is_lost(d->seg[k].buf)) total += d->seg[k].size;
    devw_bar bar = {.on = total && m->progress && isatty(2) && total >= DEVW_PROGRESS_MIN_BYTES,
                    .name = devw_file_name(m),
                    .total = total};
    snprintf(bar.verb, sizeof bar.verb, "restoring on %s", tsl_backend_name(d->be));
    for (int k = 0; k < d->n_seg && st == TSL_SUCCESS; k++) {
        if (!tsl_buffer_is_lost(d->seg[k].buf)) continue; /* another context restored it */
        st = devw_upload_seg(d, k, &bar, err);
        if (st == TSL_SUCCESS) tsl_buffer_clear_lost(d->seg[k].buf);
    }
    if (bar.on) fputc('\n', stderr);
    if (total && st == TSL_SUCCESS) {
        d->uploads++;
        TSL_LOGI("model '%s': %.1f MiB of weights uploaded again to %s after a recovery", devw_file_name(m),
                 (double)total / 1048576.0, tsl_backend_name(d->be));
    }
    pthread_mutex_unlock(&m->dev_mu);
    return st;
}

void llm_devw_free_all(tsl_model *m) {
    llm_devw *d = m->devw;
    while (d) {
        llm_devw *n = d->next;
        devw_free(d);
        d = n;
    }
    m->devw = NULL;
}

void llm_devw_get_info(const llm_devw *d, llm_devw_info *out) {
    memset(out, 0, sizeof *out);
    if (!d) return;
    out->device = d->device;
    out->n_buffers = d->n_seg;
    for (int k = 0; k < d->n_seg; k++) out->n_file_layout += d->seg[k].file_layout;
    out->bytes = d->bytes;
    out->uploads = d->uploads;
    out->owner = d->be;
    out->buffer0 = d->n_seg ? d->seg[0].buf : NULL;
}

tsl_tensor *llm_devw_host_twin(const tsl_model *m, const llm_devw *d, const tsl_tensor *t) {
    if (!d || !t) return NULL;
    for (int i = 0; i < d->n_fused; i++)
        if (d->fused[i].dev == t) return d->fused[i].host;
    tsl_tensor *h = tsl_ctx_get_tensor(m->wctx, t->name);
    return h && h->type == t->type && tsl_same_shape(h, t) ? h : NULL;
}

bool llm_devw_holds(const llm_devw *d, const tsl_tensor *t) {
    if (!d || !t || !t->buffer) return false;
    if (d->bias_buf && t->buffer == d->bias_buf) return true;
    for (int k = 0; k < d->n_seg; k++)
        if (t->buffer == d->seg[k].buf) return true;
    return false;
}
