/*
 * sched.c - the scheduler: one graph computed over several backends.
 *
 * A compute is planned in five steps (or the last plan is reused: see
 * Reuse below):
 *
 *  1. Assign. Each compute node goes to the first backend, in the caller's
 *     order, that supports it (tsl_backend_supports_op, which turns false
 *     for a kernel that failed to build, so a broken kernel moves its op
 *     elsewhere from the next compute on). Among those, the backend whose
 *     buffer holds the node's weight (src[0], a leaf in a backend buffer)
 *     wins, so weights are not copied every compute. Memory belongs to the
 *     device, not to the backend that allocated it: a buffer of another
 *     backend on the same device counts as the scheduler's backend there.
 *     Nodes that run no kernel (views) go where their source's memory is,
 *     and a node that writes into memory it does not own (CPY into a cache:
 *     its result is a view of the destination) may only go to a backend
 *     that can use that memory. The last backend is the fallback: a node no backend takes goes
 *     there and that backend reports what it lacks.
 *  2. Split. Consecutive nodes of the same backend form a split.
 *  3. Shadow. The caller's tensors are not touched while planning: every node
 *     gets a shadow (a plain copy of the tensor struct) whose sources point
 *     at other shadows or at the copies below. Only the shadows are placed,
 *     rewired and computed; at the end each node's data and buffer are set
 *     from its shadow so the caller reads results as with the graph
 *     allocator. Sources are never rewired on the caller's tensors, so a
 *     failure half way leaves the graph as it was built.
 *  4. Copy. A split reads a tensor its backend cannot use directly - memory
 *     of another non-host backend, or host memory when the split's backend
 *     is not host memory - through a copy in its own memory (a tensor with
 *     the same type, shape and strides, so kernels see the same bytes),
 *     filled through host staging (tsl_tensor_get then tsl_tensor_set)
 *     right before the split runs. Host-memory backends (the CPU) read each
 *     other's memory and need no copies.
 *  5. Place and run. Activations are placed by one graph allocator per
 *     backend, except that all host-memory backends share the first one's:
 *     they read each other's results directly, so one plan in execution
 *     order is what gets the liveness right across them. A result copied
 *     into another backend is flagged OUTPUT in its producer's plan (its
 *     reader is not in that plan, and a later node must not reuse it before
 *     the copy is taken). Each split is then a graph of its shadows,
 *     computed with tsl_backend_graph_compute.
 *
 * Records. A failure keeps the backend's record and adds the split index;
 * node indices are mapped back to the caller's graph (a split's node k is
 * node first + k), so "node 17" means the same thing with and without the
 * scheduler.
 *
 * Fallback on RETRY (params.retry_on_fallback). A split on a host-memory
 * backend simply runs again on the fallback: every tensor it touches is host
 * memory. A split on a device runs on the fallback through a second set of
 * shadows in the fallback's memory: inputs it cannot use are copied in, the
 * split is computed, and its results are written back into the device memory
 * the rest of the plan expects them in. That path is slow and only taken
 * after a refusal.
 *
 * Placement. As with the graph allocator, a node its owner placed (arena
 * memory of a context with data, or a buffer of the owner's) keeps its
 * memory and runs on a backend that can use it; every other node is placed
 * by the scheduler, and its results live until the next compute. A node
 * still holding an address from an earlier compute may point into an
 * allocator buffer freed since (allocators free their buffer when they
 * grow), so a node's buffer is only compared with the live buffers of the
 * scheduler's devices, never followed, before it is trusted.
 *
 * Reuse. Planning costs one supports_op per node and backend plus one
 * allocator plan per backend: a third of a millisecond for a 0.5B model's
 * decode token, as much as its kernels' host work. After a compute that
 * succeeded, its plan is kept with a copy of every node of the graph and of
 * every tensor the nodes read from outside it (and that tensor's buffer's
 * backend), and each backend's support count (tsl_backend.support_gen, and
 * the backend's own, vtable support_gen: kernels failed or forgiven,
 * recovery). The next compute of a graph whose nodes and outside tensors
 * compare equal, byte for byte, while no count has moved, runs the kept
 * plan as it is (its shadows, copies and placement); anything else -- a
 * node changed, another graph, a kernel failure, a recovery, a failed
 * compute -- plans afresh. So a kernel failure still reroutes the very next
 * compute. The comparison reads the graph's metadata once (tens of
 * microseconds for a thousand nodes). The split graphs carry the plan's
 * stamp (tsl_graph.stamp), new with every plan and the same while it is
 * kept: a backend may submit again what it recorded for them without
 * resolving them (the Vulkan backend does).
 *
 * Trade-offs. Copies are made per split and kept for the whole compute (no reuse
 * among copies), which costs memory only when a graph bounces between
 * devices many times. A scheduler serves one thread at a time.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stdatomic.h>

#include "backend/backend_impl.h"
#include "core/core.h"

/* Where a tensor's bytes are, for deciding who can use them. Values >= 0
 * are the memory of that (non-host) backend of the scheduler. */
#define SCHED_LOC_HOST (-1)    /* host memory: an arena or a host buffer */
#define SCHED_LOC_FOREIGN (-2) /* a non-host buffer of a backend not in the scheduler */
#define SCHED_LOC_NONE (-3)    /* no data anywhere: the backend that reads it reports it */

#define SCHED_MAX_VIEW_DEPTH 64
#define SCHED_MAX_BACKENDS 16

typedef struct sched_split {
    int backend;       /* index into s->be */
    int first, n;      /* node range in the caller's graph */
    int copy0, n_copy; /* its copies: s->copies[copy0, copy0 + n_copy) */
} sched_split;

typedef struct sched_copy {
    tsl_tensor *from; /* what the split reads: a shadow or a caller's tensor */
    tsl_tensor *to;   /* the copy in the split's backend memory (in s->cctx) */
    int reader;       /* first node reading it, in the caller's graph (records) */
} sched_copy;

typedef struct sched_slot {
    const tsl_tensor *t; /* a node of the caller's graph; NULL: empty */
    int node;
} sched_slot;

struct tsl_sched {
    tsl_backend **be;
    int n_be;
    int host0; /* first host-memory backend, -1 if none */
    tsl_sched_params params;
    tsl_gallocr **ga;   /* per backend; host backends all use ga[host0] */
    tsl_gallocr *fb_ga; /* fallback runs of device splits; made on first use */

    /* the last plan */
    int cap_nodes;
    int *assign;         /* backend of each node */
    tsl_tensor *shadow;  /* shadow of each node */
    tsl_tensor **order;  /* &shadow[i]: the node arrays of the split graphs */
    bool *pre;           /* node placed by its owner (sched_preplaced) */
    bool *ours;          /* node whose memory the plan places (its shadow's address cleared) */
    tsl_tensor **plan_nodes, **plan_leafs;
    int *plan_index;     /* plan graph node -> caller's node index */
    const tsl_buffer *own[SCHED_MAX_BACKENDS]; /* each allocator's buffer, as last seen */
    sched_slot *map;     /* caller's node -> index */
    size_t map_cap;
    sched_split *splits;
    int n_splits, cap_splits;
    sched_copy *copies;
    int n_copies, cap_copies;
    int n_copied; /* copies made by the last compute */
    uint64_t plan_ns; /* host time of the last compute's planning */

    /* The plan kept for the next compute (see "Reuse" above): the caller's
     * nodes and the tensors they read from outside the graph, as they were
     * when the last compute succeeded, and what each backend's supports_op
     * rested on then. */
    bool kept;
    int kept_n;
    tsl_tensor **kept_ptr; /* cap_nodes */
    tsl_tensor *kept_node; /* cap_nodes */
    const tsl_tensor **kept_leaf;
    tsl_tensor *kept_leaf_val;
    const tsl_backend **kept_leaf_be;
    int n_kept_leaf, cap_kept_leaf;
    int kept_splits, kept_copies;
    uint64_t kept_gen[SCHED_MAX_BACKENDS];
    uint64_t n_reused; /* computes that ran the kept plan */
    uint64_t stamp;    /* the split graphs' tsl_graph.stamp: new with every plan */
    tsl_context *cctx;

    unsigned char *staging;
    size_t staging_cap;
};

/* ---- small helpers -------------------------------------------------------- */

static bool sched_is_host(const tsl_sched *s, int b) { return s->be[b]->vt->buffer_is_host; }

/* The allocator group of a backend: host backends share one. */
static int sched_group(const tsl_sched *s, int b) { return sched_is_host(s, b) ? s->host0 : b; }

/* The scheduler's backend that can use memory of be's buffers: be itself,
 * or else one on the same device (backends on one device share its memory,
 * so a model's weights, allocated once through a backend of its own, are
 * read in place by every context's backend there). -1 if none. */
static int sched_backend_index(const tsl_sched *s, const tsl_backend *be) {
    for (int i = 0; i < s->n_be; i++)
        if (s->be[i] == be) return i;
    for (int i = 0; i < s->n_be; i++)
        if (be->dev && s->be[i]->dev == be->dev && s->be[i]->vt == be->vt) return i;
    return -1;
}

static const char *sched_label(const tsl_tensor *t) { return t && t->name[0] ? t->name : "(unnamed)"; }

/* Runs no kernel: its bytes are another tensor's (views) or already there. */
static bool sched_no_kernel(const tsl_tensor *t) { return tsl_op_is_view(t->op) || t->op == TSL_OP_NONE; }

static const tsl_tensor *sched_root(const tsl_tensor *t) {
    for (int d = 0; t->view_src && d < SCHED_MAX_VIEW_DEPTH; d++) t = t->view_src;
    return t;
}

static size_t sched_hash(const tsl_tensor *t, size_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)t;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return (size_t)h & (cap - 1);
}

/* Index of t among the caller's nodes, or -1. */
static int sched_node_of(const tsl_sched *s, const tsl_tensor *t) {
    size_t i = sched_hash(t, s->map_cap);
    for (;;) {
        if (s->map[i].t == t) return s->map[i].node;
        if (!s->map[i].t) return -1;
        i = (i + 1) & (s->map_cap - 1);
    }
}

/* A node computed by this plan, whose memory the scheduler places (not one
 * its owner placed for good: sched_preplaced). */
static bool sched_is_activation(const tsl_sched *s, const tsl_tensor *t) {
    if (sched_no_kernel(t)) return false;
    int k = sched_node_of(s, t);
    return k >= 0 && !s->pre[k];
}

/* One of the buffers our allocators hold now? */
static bool sched_own_buffer(const tsl_sched *s, const tsl_buffer *b) {
    for (int i = 0; i < s->n_be; i++)
        if (b == s->own[i]) return true;
    return false;
}

/* Is t->buffer a live buffer of one of the scheduler's devices, holding t's
 * bytes? Compares pointers only: t->buffer may have been freed. */
static bool sched_buffer_live(const tsl_sched *s, const tsl_tensor *t) {
    const tsl_buffer *buf = t->buffer;
    bool live = false;
    for (int i = 0; i < s->n_be && !live; i++) {
        backend_dev *d = s->be[i]->dev;
        bool seen = false; /* backends sharing a device share its list */
        for (int j = 0; j < i && !seen; j++) seen = s->be[j]->dev == d;
        if (!d || seen) continue;
        pthread_mutex_lock(&d->mu);
        for (const tsl_buffer *b = d->buffers; b && !live; b = b->dev_next) {
            if (b != buf) continue;
            uintptr_t a = (uintptr_t)t->data, b0 = (uintptr_t)b->base;
            live = a >= b0 && a - b0 <= b->size && tsl_nbytes(t) <= b->size - (a - b0);
        }
        pthread_mutex_unlock(&d->mu);
    }
    return live;
}

/* Did the caller place this compute node for good: arena memory of a
 * context with data, or a live buffer of one of the scheduler's devices
 * that is not the scheduler's own? Data left by an earlier compute points
 * into one of our allocators' buffers, possibly one freed since (an
 * allocator that grows frees its old buffer), so t->buffer is only compared,
 * never followed, until it is found among the live buffers of a device. (A
 * buffer of a backend the scheduler does not have cannot be checked that
 * way; such a node is placed anew.) */
static bool sched_preplaced(const tsl_sched *s, const tsl_tensor *t) {
    if (!t->data) return false;
    if (!t->buffer) return true;
    if (sched_own_buffer(s, t->buffer)) return false;
    return sched_buffer_live(s, t);
}

/* Location of memory that is already there (a tensor with data, or a view
 * of one), from its buffer. */
static int sched_loc_placed(const tsl_sched *s, const tsl_tensor *t) {
    const tsl_tensor *v = t;
    for (int d = 0; v && !v->data; d++) {
        if (d >= SCHED_MAX_VIEW_DEPTH) return SCHED_LOC_NONE;
        v = v->view_src;
    }
    if (!v) return SCHED_LOC_NONE;
    const tsl_buffer *b = v->buffer ? v->buffer : t->buffer;
    if (!b || b->be->vt->buffer_is_host) return SCHED_LOC_HOST;
    int i = sched_backend_index(s, b->be);
    return i >= 0 ? i : SCHED_LOC_FOREIGN;
}

/* Location of t's bytes while planning: an activation of this plan lives
 * where its node was assigned (nodes are assigned in order, so any source
 * of the node being planned already has its backend). */
static int sched_loc(const tsl_sched *s, const tsl_tensor *t) {
    const tsl_tensor *r = sched_root(t);
    int k = sched_is_activation(s, r) ? sched_node_of(s, r) : -1;
    if (k >= 0) return sched_is_host(s, s->assign[k]) ? SCHED_LOC_HOST : s->assign[k];
    return sched_loc_placed(s, t);
}

static bool sched_usable(const tsl_sched *s, int b, int loc) {
    if (loc == SCHED_LOC_NONE) return true;
    if (loc == SCHED_LOC_HOST) return sched_is_host(s, b);
    return loc == b;
}

static const char *sched_loc_name(const tsl_sched *s, int loc) {
    if (loc == SCHED_LOC_HOST) return "host memory";
    if (loc == SCHED_LOC_FOREIGN) return "memory of a backend the scheduler does not have";
    if (loc == SCHED_LOC_NONE) return "no memory";
    return tsl_backend_name(s->be[loc]);
}

/* Fill err for a failure in split `split` (or -1), node in the caller's graph. */
static tsl_status sched_fail(tsl_sched *s, tsl_error *err, tsl_status st, int split, int backend, int node,
                             const tsl_tensor *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 8, 9)))
#endif
    ;
static tsl_status sched_fail(tsl_sched *s, tsl_error *err, tsl_status st, int split, int backend, int node,
                             const tsl_tensor *t, const char *fmt, ...) {
    if (!err) return st;
    char msg[sizeof err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const tsl_backend *be = backend >= 0 ? s->be[backend] : NULL;
    error_set(err, st, be ? tsl_backend_name(be) : "sched", be ? tsl_backend_device(be) : "", node, t, NULL,
              "%s", msg);
    err->split = split;
    return st;
}

/* Take over a record from a backend or an allocator: add the split, map a
 * node index of the split's graph (or of a plan graph) to the caller's. */
static tsl_status sched_adopt(tsl_sched *s, tsl_error *err, const tsl_error *rec, int split, int backend,
                              int node) {
    if (!err) return rec->status;
    *err = *rec;
    err->split = split;
    err->node = node;
    if (!err->backend[0] && backend >= 0) {
        snprintf(err->backend, sizeof err->backend, "%s", tsl_backend_name(s->be[backend]));
        snprintf(err->device, sizeof err->device, "%s", tsl_backend_device(s->be[backend]));
    }
    return rec->status;
}

/* Room for one more split / copy. */
static bool sched_grow_splits(tsl_sched *s) {
    if (s->n_splits < s->cap_splits) return true;
    int nc = s->cap_splits ? 2 * s->cap_splits : 16;
    sched_split *p = realloc(s->splits, (size_t)nc * sizeof *p);
    if (!p) return false;
    s->splits = p;
    s->cap_splits = nc;
    return true;
}

static bool sched_grow_copies(tsl_sched *s) {
    if (s->n_copies < s->cap_copies) return true;
    int nc = s->cap_copies ? 2 * s->cap_copies : 16;
    sched_copy *p = realloc(s->copies, (size_t)nc * sizeof *p);
    if (!p) return false;
    s->copies = p;
    s->cap_copies = nc;
    return true;
}

/* ---- creation ------------------------------------------------------------- */

tsl_sched *tsl_sched_new(tsl_backend **backends, int n, tsl_sched_params params, tsl_error *err) {
    if (!backends || n < 1 || n > SCHED_MAX_BACKENDS) {
        if (err)
            error_set(err, TSL_FAILED, "sched", "", -1, NULL, NULL, "sched_new: %s (%d)",
                      !backends ? "the backend list is NULL" : "between 1 and 16 backends are supported", n);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        if (!backends[i]) {
            if (err) error_set(err, TSL_FAILED, "sched", "", -1, NULL, NULL, "sched_new: backend %d is NULL", i);
            return NULL;
        }
        for (int j = 0; j < i; j++)
            if (backends[j] == backends[i]) {
                if (err)
                    error_set(err, TSL_FAILED, "sched", "", -1, NULL, NULL,
                              "sched_new: backend %d (%s) is listed twice", i, tsl_backend_name(backends[i]));
                return NULL;
            }
    }
    tsl_sched *s = calloc(1, sizeof *s);
    if (s) {
        s->be = malloc((size_t)n * sizeof *s->be);
        s->ga = calloc((size_t)n, sizeof *s->ga);
    }
    if (!s || !s->be || !s->ga) goto oom;
    memcpy(s->be, backends, (size_t)n * sizeof *s->be);
    s->n_be = n;
    s->params = params;
    s->host0 = -1;
    for (int i = 0; i < n && s->host0 < 0; i++)
        if (sched_is_host(s, i)) s->host0 = i;
    for (int i = 0; i < n; i++) {
        if (sched_group(s, i) != i) continue;
        s->ga[i] = tsl_gallocr_new(s->be[i]);
        if (!s->ga[i]) goto oom;
    }
    return s;
oom:
    if (err) error_set(err, TSL_ALLOC_FAILED, "sched", "", -1, NULL, NULL, "sched_new: out of host memory");
    tsl_sched_free(s);
    return NULL;
}

void tsl_sched_free(tsl_sched *s) {
    if (!s) return;
    if (s->ga)
        for (int i = 0; i < s->n_be; i++) tsl_gallocr_free(s->ga[i]);
    tsl_gallocr_free(s->fb_ga);
    tsl_ctx_free(s->cctx);
    free(s->ga);
    free(s->be);
    free(s->assign);
    free(s->pre);
    free(s->ours);
    free(s->shadow);
    free(s->order);
    free(s->plan_nodes);
    free(s->plan_leafs);
    free(s->plan_index);
    free(s->kept_ptr);
    free(s->kept_node);
    free(s->kept_leaf);
    free(s->kept_leaf_val);
    free(s->kept_leaf_be);
    free(s->map);
    free(s->splits);
    free(s->copies);
    free(s->staging);
    free(s);
}

int tsl_sched_n_splits(const tsl_sched *s) { return s ? s->n_splits : 0; }

tsl_backend *tsl_sched_split_backend(const tsl_sched *s, int split, int *first_node, int *n_nodes) {
    if (!s || split < 0 || split >= s->n_splits) return NULL;
    const sched_split *sp = &s->splits[split];
    if (first_node) *first_node = sp->first;
    if (n_nodes) *n_nodes = sp->n;
    return s->be[sp->backend];
}

int tsl_sched_n_copies(const tsl_sched *s) { return s ? s->n_copied : 0; }

double tsl_sched_plan_us(const tsl_sched *s) { return s ? (double)s->plan_ns / 1e3 : 0; }

uint64_t tsl_sched_n_reused(const tsl_sched *s) { return s ? s->n_reused : 0; }


/* ---- planning ------------------------------------------------------------- */

static tsl_status sched_reserve(tsl_sched *s, const tsl_graph *g, tsl_error *err) {
    int n = g->n_nodes;
    if (n > s->cap_nodes) {
        int cap = n < 64 ? 64 : n;
        int *assign = realloc(s->assign, (size_t)cap * sizeof *assign);
        if (assign) s->assign = assign;
        bool *pre = realloc(s->pre, (size_t)cap * sizeof *pre);
        if (pre) s->pre = pre;
        tsl_tensor *shadow = realloc(s->shadow, (size_t)cap * sizeof *shadow);
        if (shadow) s->shadow = shadow;
        tsl_tensor **order = realloc(s->order, (size_t)cap * sizeof *order);
        if (order) s->order = order;
        tsl_tensor **pn = realloc(s->plan_nodes, (size_t)cap * sizeof *pn);
        if (pn) s->plan_nodes = pn;
        int *pi = realloc(s->plan_index, (size_t)cap * sizeof *pi);
        if (pi) s->plan_index = pi;
        tsl_tensor **kp = realloc(s->kept_ptr, (size_t)cap * sizeof *kp);
        if (kp) s->kept_ptr = kp;
        tsl_tensor *kn = realloc(s->kept_node, (size_t)cap * sizeof *kn);
        if (kn) s->kept_node = kn;
        bool *ours = realloc(s->ours, (size_t)cap * sizeof *ours);
        if (ours) s->ours = ours;
        if (!assign || !pre || !shadow || !order || !pn || !pi || !kp || !kn || !ours)
            return sched_fail(s, err, TSL_ALLOC_FAILED, -1, -1, -1, NULL,
                              "out of host memory planning a graph of %d nodes", n);
        s->cap_nodes = cap;
    }
    size_t mcap = 64;
    while (mcap < (size_t)n * 2) mcap *= 2;
    if (mcap > s->map_cap) {
        sched_slot *m = malloc(mcap * sizeof *m);
        if (!m)
            return sched_fail(s, err, TSL_ALLOC_FAILED, -1, -1, -1, NULL,
                              "out of host memory planning a graph of %d nodes", n);
        free(s->map);
        s->map = m;
        s->map_cap = mcap;
    }
    memset(s->map, 0, s->map_cap * sizeof *s->map);
    for (int i = 0; i < n; i++) {
        size_t h = sched_hash(g->nodes[i], s->map_cap);
        while (s->map[h].t && s->map[h].t != g->nodes[i]) h = (h + 1) & (s->map_cap - 1);
        s->map[h].t = g->nodes[i];
        s->map[h].node = i;
    }
    for (int i = 0; i < n; i++) s->pre[i] = !sched_no_kernel(g->nodes[i]) && sched_preplaced(s, g->nodes[i]);
    return TSL_SUCCESS;
}

/* Step 1: the backend of node i. */
static tsl_status sched_assign_node(tsl_sched *s, const tsl_graph *g, int i, tsl_error *err) {
    const tsl_tensor *node = g->nodes[i];
    int last = s->n_be - 1;
    if (sched_no_kernel(node)) {
        /* no kernel: go where the bytes are */
        const tsl_tensor *r = sched_root(node);
        if (r != node && sched_is_activation(s, r)) {
            s->assign[i] = s->assign[sched_node_of(s, r)];
            return TSL_SUCCESS;
        }
        int loc = sched_loc_placed(s, node);
        int prev = i > 0 ? s->assign[i - 1] : -1;
        if (loc >= 0) {
            s->assign[i] = loc;
        } else if (loc == SCHED_LOC_HOST) {
            if (s->host0 < 0)
                return sched_fail(s, err, TSL_FAILED, -1, -1, i, node,
                                  "'%s' is in host memory and no backend of the scheduler computes in host memory",
                                  sched_label(node));
            s->assign[i] = prev >= 0 && sched_is_host(s, prev) ? prev : s->host0;
        } else if (loc == SCHED_LOC_NONE) {
            s->assign[i] = prev >= 0 ? prev : last;
        } else {
            return sched_fail(s, err, TSL_FAILED, -1, -1, i, node, "'%s' is in %s", sched_label(node),
                              sched_loc_name(s, loc));
        }
        return TSL_SUCCESS;
    }
    /* A kernel writing into memory it does not own (CPY into a cache, a node
     * its owner placed) must run where that memory can be used; anything
     * else is placed by us. */
    int need = node->view_src ? sched_loc(s, node) : s->pre[i] ? sched_loc_placed(s, node) : SCHED_LOC_NONE;
    int pick = -1, weight_be = -1;
    if (node->src[0]) {
        const tsl_tensor *w = sched_root(node->src[0]);
        if (sched_node_of(s, w) < 0 && w->data && w->buffer) weight_be = sched_backend_index(s, w->buffer->be);
    }
    for (int b = 0; b < s->n_be; b++) {
        if (!sched_usable(s, b, need) || !tsl_backend_supports_op(s->be[b], node)) continue;
        if (pick < 0) pick = b;
        if (b == weight_be) {
            pick = b;
            break;
        }
    }
    if (pick < 0) {
        if (!sched_usable(s, last, need))
            return sched_fail(s, err, TSL_FAILED, -1, -1, i, node,
                              "no backend can compute %s '%s' into its destination (%s)", tsl_op_name(node->op),
                              sched_label(node), sched_loc_name(s, need));
        pick = last; /* it reports the kernel it lacks */
    }
    s->assign[i] = pick;
    return TSL_SUCCESS;
}

/* Step 3: shadows. Sources that are nodes point at their shadows; memory
 * the scheduler places is cleared so the allocator places it afresh. */
static void sched_make_shadows(tsl_sched *s, const tsl_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) {
        const tsl_tensor *o = g->nodes[i];
        tsl_tensor *t = &s->shadow[i];
        *t = *o;
        for (int j = 0; j < TSL_MAX_SRC; j++) {
            int k = o->src[j] ? sched_node_of(s, o->src[j]) : -1;
            if (k >= 0) t->src[j] = &s->shadow[k];
        }
        bool ours;
        if (o->view_src) {
            int k = sched_node_of(s, o->view_src);
            if (k >= 0) t->view_src = &s->shadow[k];
            ours = sched_is_activation(s, sched_root(o));
        } else {
            ours = !sched_no_kernel(o) && !s->pre[i];
        }
        if (ours) {
            t->data = NULL;
            t->buffer = NULL;
            t->extra = NULL;
        }
        s->ours[i] = ours;
        s->order[i] = t;
    }
}

/* Step 2 and the copy decisions of step 4. Copies get their tensors later,
 * once their number is known (sched_make_copies). */
static tsl_status sched_make_splits(tsl_sched *s, const tsl_graph *g, tsl_error *err) {
    s->n_splits = 0;
    s->n_copies = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (s->n_splits == 0 || s->splits[s->n_splits - 1].backend != s->assign[i]) {
            if (!sched_grow_splits(s))
                return sched_fail(s, err, TSL_ALLOC_FAILED, -1, -1, -1, NULL, "out of host memory for the splits");
            sched_split *sp = &s->splits[s->n_splits++];
            sp->backend = s->assign[i];
            sp->first = i;
            sp->n = 0;
            sp->copy0 = s->n_copies;
            sp->n_copy = 0;
        }
        sched_split *sp = &s->splits[s->n_splits - 1];
        sp->n++;
        const tsl_tensor *o = g->nodes[i];
        for (int j = 0; j < TSL_MAX_SRC; j++) {
            const tsl_tensor *x = o->src[j];
            if (!x || sched_usable(s, sp->backend, sched_loc(s, x))) continue;
            tsl_tensor *from = s->shadow[i].src[j]; /* the shadow of x, or x itself */
            int c = sp->copy0;
            while (c < s->n_copies && s->copies[c].from != from) c++;
            if (c == s->n_copies) {
                if (!sched_grow_copies(s))
                    return sched_fail(s, err, TSL_ALLOC_FAILED, -1, -1, -1, NULL,
                                      "out of host memory for the copies");
                s->copies[c].from = from;
                s->copies[c].to = NULL;
                s->copies[c].reader = i;
                s->n_copies++;
                sp->n_copy++;
                /* its producer's plan must not reuse it before the copy is taken */
                const tsl_tensor *r = sched_root(x);
                if (sched_is_activation(s, r)) s->shadow[sched_node_of(s, r)].flags |= TSL_FLAG_OUTPUT;
            }
            /* set below, once the copy tensor exists: remember which src */
        }
    }
    return TSL_SUCCESS;
}

/* Step 4: the copy tensors, and the sources that read them. */
static tsl_status sched_make_copies(tsl_sched *s, const tsl_graph *g, tsl_error *err) {
    tsl_ctx_free(s->cctx);
    s->cctx = NULL;
    if (s->n_copies == 0) return TSL_SUCCESS;
    size_t per = sizeof(tsl_tensor) + 64;
    s->cctx = tsl_ctx_new((tsl_ctx_params){.mem_size = per * (size_t)(s->n_copies + 1), .no_alloc = true});
    if (!s->cctx) return sched_fail(s, err, TSL_ALLOC_FAILED, -1, -1, -1, NULL, "out of host memory for the copies");
    for (int c = 0; c < s->n_copies; c++) {
        const tsl_tensor *x = s->copies[c].from;
        tsl_tensor *t = ctx_new_tensor_meta(s->cctx, x->type, x->ne, x->nb);
        if (!t)
            return sched_fail(s, err, TSL_FAILED, -1, -1, s->copies[c].reader, x, "could not make a copy of '%s': %s",
                              sched_label(x), tsl_ctx_error(s->cctx) ? tsl_ctx_error(s->cctx) : "");
        /* the same name, so records and fault rules name the same tensor */
        tsl_tensor_set_name(t, x->name);
        t->flags = TSL_FLAG_INPUT;
        s->copies[c].to = t;
    }
    for (int k = 0; k < s->n_splits; k++) {
        const sched_split *sp = &s->splits[k];
        if (sp->n_copy == 0) continue;
        for (int i = sp->first; i < sp->first + sp->n; i++)
            for (int j = 0; j < TSL_MAX_SRC; j++) {
                tsl_tensor *from = s->shadow[i].src[j];
                if (!from) continue;
                for (int c = sp->copy0; c < sp->copy0 + sp->n_copy; c++)
                    if (s->copies[c].from == from) {
                        s->shadow[i].src[j] = s->copies[c].to;
                        break;
                    }
            }
    }
    (void)g;
    return TSL_SUCCESS;
}

/* Step 5a: place the activations and copies of each allocator group. */
static tsl_status sched_place(tsl_sched *s, const tsl_graph *g, tsl_error *err) {
    int cap_leafs = s->n_copies > 0 ? s->n_copies : 1;
    tsl_tensor **leafs = realloc(s->plan_leafs, (size_t)cap_leafs * sizeof *leafs);
    if (!leafs) return sched_fail(s, err, TSL_ALLOC_FAILED, -1, -1, -1, NULL, "out of host memory for the plan");
    s->plan_leafs = leafs;
    for (int grp = 0; grp < s->n_be; grp++) {
        if (sched_group(s, grp) != grp) continue;
        int nn = 0, nl = 0, first_split = -1;
        for (int i = 0; i < g->n_nodes; i++) {
            if (sched_group(s, s->assign[i]) != grp) continue;
            s->plan_nodes[nn] = &s->shadow[i];
            s->plan_index[nn++] = i;
        }
        for (int k = 0; k < s->n_splits; k++) {
            const sched_split *sp = &s->splits[k];
            if (sched_group(s, sp->backend) != grp) continue;
            if (first_split < 0) first_split = k;
            for (int c = sp->copy0; c < sp->copy0 + sp->n_copy; c++) s->plan_leafs[nl++] = s->copies[c].to;
        }
        if (nn == 0) continue;
        tsl_graph pg = {.n_nodes = nn, .n_leafs = nl, .nodes = s->plan_nodes, .leafs = s->plan_leafs,
                        .capacity = nn, .ctx = g->ctx};
        tsl_error rec;
        tsl_error_clear(&rec);
        tsl_status st = tsl_gallocr_alloc_graph(s->ga[grp], &pg, &rec);
        if (st != TSL_SUCCESS) {
            int node = rec.node >= 0 && rec.node < nn ? s->plan_index[rec.node] : -1;
            return sched_adopt(s, err, &rec, first_split, grp, node);
        }
        /* the allocator's buffer now (it replaces it when it grows): data
         * found there by the next compute was placed by us */
        for (int k = 0; k < nn; k++) {
            const tsl_tensor *t = s->plan_nodes[k];
            if (!t->view_src && !sched_no_kernel(t) && !s->pre[s->plan_index[k]] && t->buffer) {
                s->own[grp] = t->buffer;
                break;
            }
        }
    }
    return TSL_SUCCESS;
}

/* ---- running -------------------------------------------------------------- */

static bool sched_staging(tsl_sched *s, size_t n) {
    if (n <= s->staging_cap) return true;
    unsigned char *p = realloc(s->staging, n);
    if (!p) return false;
    s->staging = p;
    s->staging_cap = n;
    return true;
}

/* Copy the bytes of `from` into `to` (same type, shape and strides) through
 * host staging. The record names `what` and the reading node. */
static tsl_status sched_copy_bytes(tsl_sched *s, tsl_tensor *to, const tsl_tensor *from, int split, int backend,
                                   int reader, tsl_error *err) {
    size_t nb = tsl_nbytes(from);
    if (nb == 0) return TSL_SUCCESS;
    if (!sched_staging(s, nb))
        return sched_fail(s, err, TSL_ALLOC_FAILED, split, backend, reader, from,
                          "out of host memory staging a %zu-byte copy of '%s'", nb, sched_label(from));
    tsl_error rec;
    tsl_error_clear(&rec);
    tsl_status st = tsl_tensor_get(from, s->staging, 0, nb, &rec);
    if (st == TSL_SUCCESS) st = tsl_tensor_set(to, s->staging, 0, nb, &rec);
    if (st != TSL_SUCCESS) {
        sched_adopt(s, err, &rec, split, backend, reader);
        if (err && !err->tensor[0]) snprintf(err->tensor, sizeof err->tensor, "%s", from->name);
        return st;
    }
    s->n_copied++;
    return TSL_SUCCESS;
}

/* Map a tensor read by a fallback run: a shadow of the split itself becomes
 * its fallback twin; memory the fallback cannot use becomes a copy in its
 * memory (deduplicated through hs/hf). */
typedef struct sched_fb {
    tsl_tensor *base; /* &s->shadow[first] */
    int n;
    tsl_tensor *twin; /* n twins */
    tsl_context *ctx;
    tsl_tensor **hf, **ht; /* copies: from, to */
    int nh, caph;
    int fallback;
} sched_fb;

static tsl_tensor *sched_fb_map(tsl_sched *s, sched_fb *f, tsl_tensor *x, bool *oom) {
    if (!x) return NULL;
    if (x >= f->base && x < f->base + f->n) return &f->twin[x - f->base];
    if (sched_usable(s, f->fallback, sched_loc_placed(s, x))) return x;
    for (int i = 0; i < f->nh; i++)
        if (f->hf[i] == x) return f->ht[i];
    tsl_tensor *t = f->nh < f->caph ? ctx_new_tensor_meta(f->ctx, x->type, x->ne, x->nb) : NULL;
    if (!t) {
        *oom = true;
        return x;
    }
    tsl_tensor_set_name(t, x->name);
    t->flags = TSL_FLAG_INPUT;
    f->hf[f->nh] = x;
    f->ht[f->nh++] = t;
    return t;
}

/* Run split k, whose backend answered RETRY, on the fallback backend. */
static tsl_status sched_run_fallback(tsl_sched *s, int k, tsl_error *err) {
    const sched_split *sp = &s->splits[k];
    int fb = s->n_be - 1;
    tsl_error rec;
    tsl_error_clear(&rec);
    tsl_graph sg = {.n_nodes = sp->n, .nodes = &s->order[sp->first], .capacity = sp->n};
    if (sched_is_host(s, sp->backend) && sched_is_host(s, fb)) {
        /* everything the split touches is host memory: run it as it is */
        tsl_status st = tsl_backend_graph_compute(s->be[fb], &sg, &rec);
        if (st != TSL_SUCCESS)
            return sched_adopt(s, err, &rec, k, fb, rec.node >= 0 ? sp->first + rec.node : -1);
        return TSL_SUCCESS;
    }
    sched_fb f = {.base = &s->shadow[sp->first], .n = sp->n, .fallback = fb};
    f.caph = sp->n * (TSL_MAX_SRC + 1);
    f.twin = calloc((size_t)sp->n, sizeof *f.twin);
    f.hf = malloc((size_t)f.caph * sizeof *f.hf);
    f.ht = malloc((size_t)f.caph * sizeof *f.ht);
    tsl_tensor **nodes = malloc((size_t)sp->n * sizeof *nodes);
    f.ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = (sizeof(tsl_tensor) + 64) * (size_t)(f.caph + 1), .no_alloc = true});
    if (!s->fb_ga) s->fb_ga = tsl_gallocr_new(s->be[fb]);
    tsl_status st = TSL_SUCCESS;
    bool oom = !f.twin || !f.hf || !f.ht || !nodes || !f.ctx || !s->fb_ga;
    for (int i = 0; i < sp->n && !oom; i++) {
        const tsl_tensor *sh = &f.base[i];
        tsl_tensor *t = &f.twin[i];
        *t = *sh;
        for (int j = 0; j < TSL_MAX_SRC; j++) t->src[j] = sched_fb_map(s, &f, sh->src[j], &oom);
        if (sh->view_src) {
            t->view_src = sched_fb_map(s, &f, sh->view_src, &oom);
            t->data = NULL; /* found again from the (mapped) view source */
            t->buffer = NULL;
        } else if (!sched_no_kernel(sh)) {
            t->data = NULL; /* placed in the fallback's memory below */
            t->buffer = NULL;
        }
        /* every result is written back after the run, so none may be
         * reused by a later twin (the device plan's readers are not here) */
        if (!sched_no_kernel(sh)) t->flags |= TSL_FLAG_OUTPUT;
        t->extra = NULL;
        nodes[i] = t;
    }
    if (oom) {
        st = sched_fail(s, err, TSL_ALLOC_FAILED, k, fb, sp->first, NULL,
                        "out of host memory preparing the fallback run of split %d", k);
        goto out;
    }
    tsl_graph fg = {.n_nodes = sp->n, .n_leafs = f.nh, .nodes = nodes, .leafs = f.ht, .capacity = sp->n};
    st = tsl_gallocr_alloc_graph(s->fb_ga, &fg, &rec);
    if (st != TSL_SUCCESS) {
        sched_adopt(s, err, &rec, k, fb, rec.node >= 0 ? sp->first + rec.node : -1);
        goto out;
    }
    for (int i = 0; i < f.nh && st == TSL_SUCCESS; i++)
        st = sched_copy_bytes(s, f.ht[i], f.hf[i], k, fb, sp->first, err);
    if (st != TSL_SUCCESS) goto out;
    st = tsl_backend_graph_compute(s->be[fb], &fg, &rec);
    if (st != TSL_SUCCESS) {
        sched_adopt(s, err, &rec, k, fb, rec.node >= 0 ? sp->first + rec.node : -1);
        goto out;
    }
    /* results back where the rest of the plan reads them (CPY writes its
     * destination: copy its span back too) */
    for (int i = 0; i < sp->n && st == TSL_SUCCESS; i++) {
        tsl_tensor *sh = &f.base[i];
        if (sched_no_kernel(sh)) continue;
        st = sched_copy_bytes(s, sh, &f.twin[i], k, sp->backend, sp->first + i, err);
    }
out:
    tsl_ctx_free(f.ctx);
    free(f.twin);
    free(f.hf);
    free(f.ht);
    free(nodes);
    return st;
}

static tsl_status sched_run(tsl_sched *s, tsl_error *err) {
    for (int k = 0; k < s->n_splits; k++) {
        const sched_split *sp = &s->splits[k];
        for (int c = sp->copy0; c < sp->copy0 + sp->n_copy; c++) {
            tsl_status st = sched_copy_bytes(s, s->copies[c].to, s->copies[c].from, k, sp->backend,
                                             s->copies[c].reader, err);
            if (st != TSL_SUCCESS) return st;
        }
        tsl_graph sg = {.n_nodes = sp->n, .nodes = &s->order[sp->first], .capacity = sp->n, .stamp = s->stamp};
        tsl_error rec;
        tsl_error_clear(&rec);
        tsl_status st = tsl_backend_graph_compute(s->be[sp->backend], &sg, &rec);
        if (st == TSL_RETRY && s->params.retry_on_fallback && sp->backend != s->n_be - 1) {
            TSL_LOGI("sched: split %d on %s returned RETRY; running it on %s", k,
                     tsl_backend_name(s->be[sp->backend]), tsl_backend_name(s->be[s->n_be - 1]));
            st = sched_run_fallback(s, k, err);
            if (st != TSL_SUCCESS) return st;
            continue;
        }
        if (st != TSL_SUCCESS)
            return sched_adopt(s, err, &rec, k, sp->backend, rec.node >= 0 ? sp->first + rec.node : -1);
    }
    return TSL_SUCCESS;
}

/* The caller reads results through its own tensors. */
/* ---- reuse ------------------------------------------------------------------ */

/* What backend b's supports_op answers rest on (kernel failures, recovery). */
static uint64_t sched_support_gen(const tsl_sched *s, int b) { return backend_support_gen(s->be[b]); }

/* A leaf's buffer's backend: the planner follows a leaf's buffer (its
 * weights decide where an op runs), so it is compared too. */
static const tsl_backend *sched_leaf_be(const tsl_tensor *x) { return x->buffer ? x->buffer->be : NULL; }

/* Keep the plan of g, which just computed successfully: its nodes, and each
 * tensor they read from outside the graph once. */
static void sched_keep(tsl_sched *s, const tsl_graph *g) {
    s->kept = false;
    size_t refs = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j <= TSL_MAX_SRC; j++) refs += (j < TSL_MAX_SRC ? g->nodes[i]->src[j] : g->nodes[i]->view_src) != NULL;
    size_t cap = 64;
    while (cap < 2 * refs) cap *= 2;
    const tsl_tensor **seen = calloc(cap, sizeof *seen);
    if (!seen) return; /* planned afresh next time */
    int k = 0;
    bool oom = false;
    for (int i = 0; i < g->n_nodes && !oom; i++)
        for (int j = 0; j <= TSL_MAX_SRC && !oom; j++) {
            const tsl_tensor *x = j < TSL_MAX_SRC ? g->nodes[i]->src[j] : g->nodes[i]->view_src;
            if (!x || sched_node_of(s, x) >= 0) continue;
            size_t h = sched_hash(x, cap);
            while (seen[h] && seen[h] != x) h = (h + 1) & (cap - 1);
            if (seen[h]) continue;
            seen[h] = x;
            if (k == s->cap_kept_leaf) {
                int nc = s->cap_kept_leaf ? 2 * s->cap_kept_leaf : 64;
                const tsl_tensor **l = realloc((void *)s->kept_leaf, (size_t)nc * sizeof *l);
                if (l) s->kept_leaf = l;
                tsl_tensor *v = realloc(s->kept_leaf_val, (size_t)nc * sizeof *v);
                if (v) s->kept_leaf_val = v;
                const tsl_backend **lb = realloc((void *)s->kept_leaf_be, (size_t)nc * sizeof *lb);
                if (lb) s->kept_leaf_be = lb;
                if (!l || !v || !lb) {
                    oom = true;
                    break;
                }
                s->cap_kept_leaf = nc;
            }
            s->kept_leaf[k] = x;
            memcpy(&s->kept_leaf_val[k], x, sizeof(tsl_tensor));
            s->kept_leaf_be[k] = sched_leaf_be(x);
            k++;
        }
    free(seen);
    if (oom) return;
    for (int i = 0; i < g->n_nodes; i++) {
        s->kept_ptr[i] = g->nodes[i];
        memcpy(&s->kept_node[i], g->nodes[i], sizeof(tsl_tensor));
    }
    s->n_kept_leaf = k;
    s->kept_n = g->n_nodes;
    s->kept_splits = s->n_splits;
    s->kept_copies = s->n_copies;
    for (int b = 0; b < s->n_be; b++) s->kept_gen[b] = sched_support_gen(s, b);
    s->kept = true;
}

/* Is node i as kept? An activation the plan placed may have had its
 * address cleared since (so that it is placed again): the same plan. The
 * bytes around the address, then the address (a decoder clears every
 * activation's before each step: no copy of the node to patch). */
_Static_assert(offsetof(tsl_tensor, ctx) == offsetof(tsl_tensor, data) + sizeof(void *) + sizeof(struct tsl_buffer *),
               "sched_node_same: data and buffer lie together before ctx");
static bool sched_node_same(const tsl_sched *s, int i, const tsl_tensor *t) {
    const tsl_tensor *k = &s->kept_node[i];
    const size_t a = offsetof(tsl_tensor, data), b = offsetof(tsl_tensor, ctx);
    if (memcmp(t, k, a) != 0 || memcmp((const char *)t + b, (const char *)k + b, sizeof *t - b) != 0) return false;
    if (t->data == k->data && t->buffer == k->buffer) return true;
    return s->ours[i] && !t->data && !t->buffer;
}

/* Is the kept plan g's: the same nodes, each as it was (so with the same
 * sources), reading the same outside tensors as they were, on backends
 * whose answers have not moved? */
static bool sched_kept_fits(const tsl_sched *s, const tsl_graph *g) {
    if (!s->kept || g->n_nodes != s->kept_n) return false;
    for (int b = 0; b < s->n_be; b++)
        if (sched_support_gen(s, b) != s->kept_gen[b]) return false;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i] != s->kept_ptr[i] || !sched_node_same(s, i, g->nodes[i])) return false;
    for (int k = 0; k < s->n_kept_leaf; k++) {
        const tsl_tensor *x = s->kept_leaf[k];
        if (s->kept_leaf_be[k] != sched_leaf_be(x) || memcmp(x, &s->kept_leaf_val[k], sizeof(tsl_tensor)) != 0)
            return false;
    }
    return true;
}

static void sched_publish(tsl_sched *s, tsl_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) {
        const tsl_tensor *t = &s->shadow[i];
        if (!t->data) continue;
        g->nodes[i]->data = t->data;
        g->nodes[i]->buffer = t->buffer;
    }
}

tsl_status tsl_sched_compute(tsl_sched *s, tsl_graph *g, tsl_error *err) {
    if (err) tsl_error_clear(err);
    if (!s) {
        if (err) error_set(err, TSL_FAILED, "sched", "", -1, NULL, NULL, "sched_compute: scheduler is NULL");
        return TSL_FAILED;
    }
    s->n_splits = 0;
    s->n_copies = 0;
    s->n_copied = 0;
    s->plan_ns = 0;
    if (!g)
        return sched_fail(s, err, TSL_FAILED, -1, -1, -1, NULL,
                          "sched_compute: graph is NULL (did graph_build fail? check tsl_ctx_error)");
    if (g->n_nodes < 0 || (g->n_nodes > 0 && !g->nodes))
        return sched_fail(s, err, TSL_FAILED, -1, -1, -1, NULL, "sched_compute: graph is malformed (%d nodes)",
                          g->n_nodes);
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i]) return sched_fail(s, err, TSL_FAILED, -1, -1, i, NULL, "graph node %d is NULL", i);
    if (g->n_nodes == 0) return TSL_SUCCESS;

    const uint64_t t0 = core_now_ns();
    if (sched_kept_fits(s, g)) {
        s->n_splits = s->kept_splits;
        s->n_copies = s->kept_copies;
        s->plan_ns = core_now_ns() - t0;
        s->n_reused++;
        tsl_status st = sched_run(s, err);
        sched_publish(s, g);
        if (st != TSL_SUCCESS) s->kept = false;
        return st;
    }
    s->kept = false;
    tsl_status st = sched_reserve(s, g, err);
    for (int i = 0; i < g->n_nodes && st == TSL_SUCCESS; i++) st = sched_assign_node(s, g, i, err);
    if (st != TSL_SUCCESS) return st;
    sched_make_shadows(s, g);
    st = sched_make_splits(s, g, err);
    if (st == TSL_SUCCESS) st = sched_make_copies(s, g, err);
    if (st == TSL_SUCCESS) st = sched_place(s, g, err);
    s->plan_ns = core_now_ns() - t0;
    if (st != TSL_SUCCESS) return st;
    /* a stamp no earlier plan of any scheduler had: the backends learn that
     * these split graphs are new, and (kept) the same from then on */
    static _Atomic uint64_t stamps;
    s->stamp = atomic_fetch_add(&stamps, 1) + 1;
    st = sched_run(s, err);
    sched_publish(s, g);
    if (st == TSL_SUCCESS) sched_keep(s, g);
    return st;
}
