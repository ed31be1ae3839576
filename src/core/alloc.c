/*
 * alloc.c - the graph allocator: every tensor of a graph that has no data is
 * placed in ONE backend buffer, and memory is reused by liveness.
 *
 * How it works. A graph is a fixed execution order, so the lifetime of each
 * intermediate is known before anything runs: it is born at the node that
 * computes it and dies after the last node that reads it. We simulate the
 * execution once (the plan), running a best-fit free list over an unbounded
 * address range, and record each tensor's offset and the high-water mark. Only then do we allocate a buffer of that many bytes
 * (or keep the current one if it is large enough) and hand out addresses.
 * Planning before allocating means one allocation per graph shape instead of
 * one per tensor, and the buffer is sized exactly, which matters on a GPU
 * where a buffer is a driver object and memory is the scarce resource.
 *
 * Liveness is counted on roots. A view (VIEW, RESHAPE, PERMUTE, TRANSPOSE, and
 * the result of CPY, which views its destination) owns no memory: every read
 * of it is a read of the tensor it aliases, so the root stays live while any
 * view of it still has a reader to come. Counting on roots rather than on
 * each view keeps the bookkeeping to one counter per allocation.
 *
 * Tensors that must outlive the plan are pinned: leafs without data and
 * tensors flagged INPUT (the caller writes them before compute) are placed
 * first, OUTPUT tensors (the caller reads them after) are never freed.
 * Tensors that already have data (weights in their own buffer, tensors in a
 * context with data) are left exactly as they are.
 *
 * In place. An element-wise op (core_op_can_inplace) whose first source is
 * an unpinned, non-view intermediate of the same size, read by nobody after
 * this node, writes its result over that source's block instead of taking a
 * new one. That is what keeps a residual stream of adds and norms at one
 * activation's worth of memory. It is refused when another operand of the
 * node aliases the same block, since a broadcast read of that operand could
 * see elements the kernel has already overwritten.
 *
 * Trade-offs. Best fit with coalescing is not optimal (placement is
 * NP-hard in general), but on a llama-shaped forward graph its peak equals
 * the largest live set, the lower bound; the test allows a 25% margin. The
 * free list is a sorted array with linear scans: graphs have thousands of
 * nodes, not millions, and planning stays far below compute time. Every tensor this allocator placed is placed again on the next call
 * (its old address is forgotten): activations do not survive from one
 * alloc_graph to the next, and when the buffer grows, addresses handed out
 * for earlier graphs become invalid, as the old buffer is freed before the
 * new one is allocated (so peak device memory is one buffer, not two).
 * An allocator serves one thread at a time. The buffer alignment is read
 * from the backend's vtable, since it is needed before any buffer exists.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend_impl.h"
#include "core/core.h"

/* Longest chain of view_src links we follow; the core keeps view_src at the
 * root, so anything longer than a handful is a cycle or a corrupt tensor. */
#define GALLOC_MAX_VIEW_DEPTH 64
#define GALLOC_DEFAULT_ALIGN 64

/* What the plan knows about one tensor of the graph. */
typedef struct galloc_info {
    const tsl_tensor *t;   /* key; NULL marks an empty slot */
    tsl_tensor *root;      /* the tensor owning the memory (t itself if not a view) */
    size_t root_offs;      /* byte offset of t within root */
    size_t size;           /* bytes reserved (roots we place), aligned */
    size_t offs;           /* offset in the buffer (roots we place) */
    int n_readers;         /* reads still to come, through any view (roots) */
    bool in_graph;         /* a node or leaf of the graph */
    bool ours;             /* a root that the plan places (no data, or data from us) */
    bool pinned;           /* never freed: leaf, INPUT, OUTPUT (or a view of one is) */
    bool placed;           /* holds a block in the plan */
    bool donated;          /* its block was taken over in place by a reader */
    bool freed;
} galloc_info;

/* A free range [offs, offs + size) below the current end of the arena. */
typedef struct galloc_block {
    size_t offs, size;
} galloc_block;

struct tsl_gallocr {
    tsl_backend *be;
    tsl_buffer *buf;
    size_t align;
    size_t peak, total;

    /* open-addressing hash table, pointer -> info; reused across calls */
    galloc_info *map;
    size_t map_cap, map_used;

    /* free list sorted by offset; `end` is where untouched space begins */
    galloc_block *free_list;
    size_t n_free, free_cap;
    size_t end, high_water;
};

/* ---- small helpers ------------------------------------------------------- */

static size_t galloc_align_up(size_t n, size_t a) {
    size_t r = n % a;
    return r ? n + (a - r) : n;
}

static const char *galloc_be_name(const tsl_gallocr *ga) {
    return ga && ga->be ? tsl_backend_name(ga->be) : "";
}
static const char *galloc_be_device(const tsl_gallocr *ga) {
    return ga && ga->be ? tsl_backend_device(ga->be) : "";
}

/* A tensor the plan must give memory to: no data, or data that this
 * allocator placed in an earlier call (which is forgotten now). */
static bool galloc_is_ours(const tsl_gallocr *ga, const tsl_tensor *t) {
    if (!t->data) return true;
    return ga->buf && t->buffer == ga->buf;
}

/* ---- the tensor map ------------------------------------------------------ */

static size_t galloc_hash(const tsl_tensor *t, size_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)t;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return (size_t)h & (cap - 1);
}

static bool galloc_map_reset(tsl_gallocr *ga, size_t expect) {
    size_t cap = 64;
    while (cap < expect * 2) cap *= 2;
    if (cap > ga->map_cap) {
        galloc_info *m = malloc(cap * sizeof *m);
        if (!m) return false;
        free(ga->map);
        ga->map = m;
        ga->map_cap = cap;
    }
    memset(ga->map, 0, ga->map_cap * sizeof *ga->map);
    ga->map_used = 0;
    return true;
}

static galloc_info *galloc_find(const tsl_gallocr *ga, const tsl_tensor *t) {
    size_t i = galloc_hash(t, ga->map_cap);
    for (;;) {
        if (ga->map[i].t == t) return &ga->map[i];
        if (!ga->map[i].t) return NULL;
        i = (i + 1) & (ga->map_cap - 1);
    }
}

static bool galloc_map_grow(tsl_gallocr *ga) {
    size_t cap = ga->map_cap * 2;
    galloc_info *m = calloc(cap, sizeof *m);
    if (!m) return false;
    for (size_t j = 0; j < ga->map_cap; j++) {
        if (!ga->map[j].t) continue;
        size_t i = galloc_hash(ga->map[j].t, cap);
        while (m[i].t) i = (i + 1) & (cap - 1);
        m[i] = ga->map[j];
    }
    free(ga->map);
    ga->map = m;
    ga->map_cap = cap;
    return true;
}

/* The entry for t, created empty if new; NULL only when memory runs out. */
static galloc_info *galloc_get(tsl_gallocr *ga, const tsl_tensor *t) {
    galloc_info *e = galloc_find(ga, t);
    if (e) return e;
    if ((ga->map_used + 1) * 2 > ga->map_cap && !galloc_map_grow(ga)) return NULL;
    size_t i = galloc_hash(t, ga->map_cap);
    while (ga->map[i].t) i = (i + 1) & (ga->map_cap - 1);
    ga->map[i].t = t;
    ga->map_used++;
    return &ga->map[i];
}

/* ---- the free list ------------------------------------------------------- */

static void galloc_plan_reset(tsl_gallocr *ga) {
    ga->n_free = 0;
    ga->end = 0;
    ga->high_water = 0;
}

/* Best fit: the smallest free block that holds size bytes; if none does,
 * fresh space at the end. Ties go to the lowest offset, which keeps the
 * layout deterministic. */
static size_t galloc_block_alloc(tsl_gallocr *ga, size_t size) {
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < ga->n_free; i++) {
        if (ga->free_list[i].size >= size && (best == SIZE_MAX || ga->free_list[i].size < ga->free_list[best].size))
            best = i;
    }
    if (best != SIZE_MAX) {
        galloc_block *b = &ga->free_list[best];
        size_t offs = b->offs;
        b->offs += size;
        b->size -= size;
        if (b->size == 0) {
            memmove(b, b + 1, (ga->n_free - best - 1) * sizeof *b);
            ga->n_free--;
        }
        return offs;
    }
    size_t offs = ga->end;
    ga->end += size;
    if (ga->end > ga->high_water) ga->high_water = ga->end;
    return offs;
}

/* Return a block, merging it with free neighbours; a block that reaches the
 * end of the used range gives its space back to the end, so a later large
 * request can grow from there instead of leaving a hole behind it. */
static bool galloc_block_free(tsl_gallocr *ga, size_t offs, size_t size) {
    size_t i = 0;
    while (i < ga->n_free && ga->free_list[i].offs < offs) i++;
    bool join_prev = i > 0 && ga->free_list[i - 1].offs + ga->free_list[i - 1].size == offs;
    bool join_next = i < ga->n_free && offs + size == ga->free_list[i].offs;
    if (join_prev && join_next) {
        ga->free_list[i - 1].size += size + ga->free_list[i].size;
        memmove(&ga->free_list[i], &ga->free_list[i + 1], (ga->n_free - i - 1) * sizeof *ga->free_list);
        ga->n_free--;
        i--;
    } else if (join_prev) {
        ga->free_list[i - 1].size += size;
        i--;
    } else if (join_next) {
        ga->free_list[i].offs = offs;
        ga->free_list[i].size += size;
    } else {
        if (ga->n_free == ga->free_cap) {
            size_t cap = ga->free_cap ? ga->free_cap * 2 : 64;
            galloc_block *fl = realloc(ga->free_list, cap * sizeof *fl);
            if (!fl) return false;
            ga->free_list = fl;
            ga->free_cap = cap;
        }
        memmove(&ga->free_list[i + 1], &ga->free_list[i], (ga->n_free - i) * sizeof *ga->free_list);
        ga->free_list[i].offs = offs;
        ga->free_list[i].size = size;
        ga->n_free++;
    }
    /* free_list[i] now holds the merged block; if it touches the end, fold it back */
    if (ga->free_list[i].offs + ga->free_list[i].size == ga->end) {
        ga->end = ga->free_list[i].offs;
        ga->n_free--; /* it is the last block: nothing after it can lie below end */
    }
    return true;
}

/* ---- public API ---------------------------------------------------------- */

tsl_gallocr *tsl_gallocr_new(tsl_backend *be) {
    if (!be) return NULL;
    tsl_gallocr *ga = calloc(1, sizeof *ga);
    if (!ga) return NULL;
    ga->be = be;
    size_t a = be->vt && be->vt->buffer_alignment ? be->vt->buffer_alignment(be) : 0;
    ga->align = a ? a : GALLOC_DEFAULT_ALIGN;
    return ga;
}

void tsl_gallocr_free(tsl_gallocr *ga) {
    if (!ga) return;
    tsl_buffer_free(ga->buf);
    free(ga->map);
    free(ga->free_list);
    free(ga);
}

size_t tsl_gallocr_peak(const tsl_gallocr *ga) { return ga ? ga->peak : 0; }
size_t tsl_gallocr_total(const tsl_gallocr *ga) { return ga ? ga->total : 0; }

/* ---- planning ------------------------------------------------------------ */

/* How a tensor is named in messages: its name, or its op and shape when it
 * has none (most intermediates of a graph are unnamed). */
typedef struct galloc_label_t {
    char s[128];
} galloc_label_t;

static galloc_label_t galloc_label(const tsl_tensor *t) {
    galloc_label_t l;
    if (t->name[0]) {
        snprintf(l.s, sizeof l.s, "'%s'", t->name);
    } else {
        char shape[80];
        snprintf(l.s, sizeof l.s, "an unnamed %s %s", tsl_op_name(t->op), core_shape_str(t, shape, sizeof shape));
    }
    return l;
}

static tsl_status galloc_fail(tsl_gallocr *ga, tsl_error *err, int node, const tsl_tensor *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
static tsl_status galloc_fail(tsl_gallocr *ga, tsl_error *err, int node, const tsl_tensor *t, const char *fmt, ...) {
    char msg[224];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return error_set(err, TSL_FAILED, galloc_be_name(ga), galloc_be_device(ga), node, t, NULL, "graph allocator: %s",
                     msg);
}

static tsl_status galloc_oom(tsl_gallocr *ga, tsl_error *err) {
    return error_set(err, TSL_ALLOC_FAILED, galloc_be_name(ga), galloc_be_device(ga), -1, NULL, NULL,
                     "graph allocator: out of host memory for its bookkeeping");
}

/* Enter t (and the tensor it views) into the map, resolving its root and
 * offset. Checks what the plan relies on: a known type, sane extents, an
 * acyclic view chain, and a view that lies inside the root it aliases. */
static tsl_status galloc_enter(tsl_gallocr *ga, const tsl_tensor *t, int node, tsl_error *err,
                               galloc_info **out) {
    galloc_info *e = galloc_get(ga, t);
    if (!e) return galloc_oom(ga, err);
    *out = e;
    if (e->root) return TSL_SUCCESS;

    if (!tsl_type_valid((int)t->type))
        return galloc_fail(ga, err, node, t, "tensor %s has an unknown type", galloc_label(t).s);
    for (int d = 0; d < TSL_MAX_DIMS; d++)
        if (t->ne[d] < 0) return galloc_fail(ga, err, node, t, "tensor %s has a negative extent", galloc_label(t).s);

    const tsl_tensor *r = t;
    size_t offs = 0;
    int depth = 0;
    while (r->view_src) {
        if (++depth > GALLOC_MAX_VIEW_DEPTH)
            return galloc_fail(ga, err, node, t, "the view chain of %s is cyclic or deeper than the limit",
                               galloc_label(t).s);
        offs += r->view_offs;
        r = r->view_src;
    }
    if (r != t) {
        galloc_info *re;
        tsl_status s = galloc_enter(ga, r, node, err, &re); /* may move the map */
        if (s != TSL_SUCCESS) return s;
        if (galloc_is_ours(ga, r)) {
            size_t nb = tsl_nbytes(t), rb = tsl_nbytes(r);
            if (offs > rb || nb > rb - offs) {
                return galloc_fail(ga, err, node, t,
                                   "view %s (%zu bytes at offset %zu) does not lie within %s (%zu bytes), "
                                   "the tensor it aliases",
                                   galloc_label(t).s, nb, offs, galloc_label(r).s, rb);
            }
        }
        e = galloc_find(ga, t);
    }
    e->root = (tsl_tensor *)r;
    e->root_offs = offs;
    *out = e;
    return TSL_SUCCESS;
}

static galloc_info *galloc_root_of(const tsl_gallocr *ga, const tsl_tensor *t) {
    galloc_info *e = galloc_find(ga, t);
    return e ? galloc_find(ga, e->root) : NULL;
}

/* Give root r a block (if the plan owns it and it has none yet). */
static void galloc_place_root(tsl_gallocr *ga, galloc_info *re) {
    if (!re->ours || re->placed) return;
    size_t nb = tsl_nbytes(re->t);
    re->size = galloc_align_up(nb ? nb : 1, ga->align);
    re->offs = galloc_block_alloc(ga, re->size);
    re->placed = true;
    ga->total += re->size;
}

/* Can node write its result over src0's block? See the header comment. */
static galloc_info *galloc_inplace_donor(tsl_gallocr *ga, const tsl_tensor *node) {
    const tsl_tensor *s0 = node->src[0];
    if (!s0 || !core_op_can_inplace(node->op) || s0->view_src) return NULL;
    if (s0->flags & (TSL_FLAG_INPUT | TSL_FLAG_OUTPUT)) return NULL;
    if (node->flags & TSL_FLAG_INPUT) return NULL;
    galloc_info *se = galloc_find(ga, s0);
    if (!se || !se->ours || !se->placed || se->pinned || se->donated || se->freed) return NULL;
    if (s0->type != node->type || tsl_nbytes(s0) != tsl_nbytes(node)) return NULL;
    /* Reads are counted per operand, so when another operand of this node
     * aliases the same block (a view of src0 broadcast as b) two reads are
     * still pending and this refuses too, as it must: the kernel would
     * overwrite elements it has yet to read through that operand. */
    if (se->n_readers != 1) return NULL;
    return se;
}

/* The plan: offsets for every root the allocator owns, and the peak. */
static tsl_status galloc_plan(tsl_gallocr *ga, const tsl_graph *g, tsl_error *err) {
    size_t expect = (size_t)g->n_leafs + (size_t)g->n_nodes * (1 + TSL_MAX_SRC) + 16;
    if (!galloc_map_reset(ga, expect)) return galloc_oom(ga, err);
    galloc_plan_reset(ga);
    ga->total = 0;

    /* enter every tensor the graph touches; mark membership */
    for (int i = 0; i < g->n_leafs; i++) {
        galloc_info *e;
        if (!g->leafs[i]) return galloc_fail(ga, err, -1, NULL, "leaf %d is NULL", i);
        tsl_status s = galloc_enter(ga, g->leafs[i], -1, err, &e);
        if (s != TSL_SUCCESS) return s;
        e->in_graph = true;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        galloc_info *e;
        tsl_tensor *n = g->nodes[i];
        if (!n) return galloc_fail(ga, err, i, NULL, "node %d is NULL", i);
        tsl_status s = galloc_enter(ga, n, i, err, &e);
        if (s != TSL_SUCCESS) return s;
        e->in_graph = true;
        for (int j = 0; j < TSL_MAX_SRC; j++) {
            if (!n->src[j]) continue;
            s = galloc_enter(ga, n->src[j], i, err, &e);
            if (s != TSL_SUCCESS) return s;
        }
    }

    /* ownership, pins and reader counts, all on roots */
    for (size_t k = 0; k < ga->map_cap; k++) {
        galloc_info *e = &ga->map[k];
        if (!e->t || e->root != e->t) continue;
        e->ours = galloc_is_ours(ga, e->t);
    }
    for (size_t k = 0; k < ga->map_cap; k++) {
        galloc_info *e = &ga->map[k];
        if (!e->t) continue;
        bool pin = (e->t->flags & (TSL_FLAG_INPUT | TSL_FLAG_OUTPUT)) || (e->in_graph && e->t->op == TSL_OP_NONE);
        if (pin) galloc_find(ga, e->root)->pinned = true;
    }
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < TSL_MAX_SRC; j++)
            if (g->nodes[i]->src[j]) galloc_root_of(ga, g->nodes[i]->src[j])->n_readers++;

    /* pinned inputs first: they are written before the compute starts */
    for (int i = 0; i < g->n_leafs; i++) {
        galloc_info *re = galloc_root_of(ga, g->leafs[i]);
        if (re->ours && !re->in_graph)
            return galloc_fail(ga, err, -1, g->leafs[i], "leaf %s aliases %s, which has no data and is not in the graph",
                               galloc_label(g->leafs[i]).s, galloc_label(re->t).s);
        galloc_place_root(ga, re);
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const tsl_tensor *n = g->nodes[i];
        if (!(n->flags & TSL_FLAG_INPUT)) continue;
        galloc_info *re = galloc_root_of(ga, n);
        if (re->in_graph) galloc_place_root(ga, re);
    }

    /* the simulated execution */
    for (int i = 0; i < g->n_nodes; i++) {
        tsl_tensor *n = g->nodes[i];
        galloc_info *ne = galloc_find(ga, n);
        galloc_info *re = galloc_find(ga, ne->root);

        /* every operand must have memory by now, or have data of its own */
        for (int j = 0; j < TSL_MAX_SRC; j++) {
            const tsl_tensor *s = n->src[j];
            if (!s) continue;
            galloc_info *sr = galloc_root_of(ga, s);
            if (sr->ours && !sr->placed) {
                if (!sr->in_graph)
                    return galloc_fail(ga, err, i, n, "source %s has no data and %s, whose memory it is, is not "
                                       "in the graph", galloc_label(s).s, galloc_label(sr->t).s);
                return galloc_fail(ga, err, i, n, "source %s is read before %s is computed (the node order is "
                                   "not topological)", galloc_label(s).s, galloc_label(sr->t).s);
            }
            if (sr->ours && (sr->freed || sr->donated))
                return galloc_fail(ga, err, i, n, "source %s is read after the memory of %s was released (the "
                                   "node order is not topological)", galloc_label(s).s, galloc_label(sr->t).s);
        }

        if (re != ne) {
            /* a view: its root must already be there (or not be ours) */
            if (re->ours && !re->placed) {
                if (!re->in_graph)
                    return galloc_fail(ga, err, i, n, "view %s aliases %s, which has no data and is not in the graph",
                                       galloc_label(n).s, galloc_label(re->t).s);
                return galloc_fail(ga, err, i, n, "view %s comes before %s, the tensor it aliases", galloc_label(n).s,
                                   galloc_label(re->t).s);
            }
        } else if (ne->ours && !ne->placed) {
            galloc_info *donor = galloc_inplace_donor(ga, n);
            if (donor) {
                ne->size = donor->size;
                ne->offs = donor->offs;
                ne->placed = true;
                donor->donated = true;
                ga->total += galloc_align_up(tsl_nbytes(n) ? tsl_nbytes(n) : 1, ga->align);
            } else {
                galloc_place_root(ga, ne);
            }
        }

        /* release what this node was the last to read */
        for (int j = 0; j < TSL_MAX_SRC; j++) {
            const tsl_tensor *s = n->src[j];
            if (!s) continue;
            galloc_info *sr = galloc_root_of(ga, s);
            sr->n_readers--;
            if (sr->n_readers == 0 && sr->ours && sr->placed && !sr->pinned && !sr->donated && !sr->freed) {
                sr->freed = true;
                if (!galloc_block_free(ga, sr->offs, sr->size)) return galloc_oom(ga, err);
            }
        }
    }
    ga->peak = ga->high_water;
    return TSL_SUCCESS;
}

/* ---- placement ----------------------------------------------------------- */

/* Forget addresses in our buffer for every tensor the graph touches (they
 * are about to be re-planned, or the buffer is about to go away). */
static void galloc_forget(tsl_gallocr *ga) {
    if (!ga->buf) return;
    for (size_t k = 0; k < ga->map_cap; k++) {
        tsl_tensor *t = (tsl_tensor *)ga->map[k].t;
        if (t && t->buffer == ga->buf) {
            t->data = NULL;
            t->buffer = NULL;
        }
    }
}

static tsl_status galloc_ensure_buffer(tsl_gallocr *ga, const tsl_graph *g, tsl_error *err) {
    if (ga->peak == 0) return TSL_SUCCESS;
    if (ga->buf && tsl_buffer_size(ga->buf) >= ga->peak) return TSL_SUCCESS;
    if (ga->buf) {
        galloc_forget(ga);
        tsl_buffer_free(ga->buf);
        ga->buf = NULL;
    }
    tsl_error be_err;
    tsl_error_clear(&be_err);
    ga->buf = tsl_buffer_alloc(ga->be, ga->peak, &be_err);
    if (ga->buf) return TSL_SUCCESS;
    /* A lost device stays lost whatever we asked for; anything else is the
     * memory this graph needs not being there. */
    tsl_status s = be_err.status == TSL_DEVICE_LOST ? TSL_DEVICE_LOST : TSL_ALLOC_FAILED;
    error_set(err, s, galloc_be_name(ga), galloc_be_device(ga), -1, NULL, NULL,
              "graph allocator: could not allocate a buffer of %zu bytes for a graph of %d nodes (%zu bytes "
              "without reuse)%s%s",
              ga->peak, g->n_nodes, ga->total, be_err.message[0] ? ": " : "", be_err.message);
    if (err && be_err.driver_domain[0]) {
        memcpy(err->driver_domain, be_err.driver_domain, sizeof err->driver_domain);
        memcpy(err->driver_text, be_err.driver_text, sizeof err->driver_text);
        err->driver_code = be_err.driver_code;
    }
    return s;
}

/* Point t at root's memory plus its offset (views, and CPY results). */
static void galloc_set_view(galloc_info *e) {
    tsl_tensor *t = (tsl_tensor *)e->t;
    tsl_tensor *r = e->root;
    if (!r->data) return;
    t->data = (char *)r->data + e->root_offs;
    t->buffer = r->buffer;
}

static tsl_status galloc_assign(tsl_gallocr *ga, const tsl_graph *g, tsl_error *err) {
    /* roots first, so every view below finds its root's address */
    for (size_t k = 0; k < ga->map_cap; k++) {
        galloc_info *e = &ga->map[k];
        if (!e->t || e->root != e->t || !e->ours || !e->placed) continue;
        tsl_tensor *t = (tsl_tensor *)e->t;
        t->data = NULL;
        t->buffer = NULL;
        tsl_status s = tsl_buffer_place(ga->buf, t, e->offs, err);
        if (s != TSL_SUCCESS) return s;
    }
    for (size_t k = 0; k < ga->map_cap; k++) {
        galloc_info *e = &ga->map[k];
        if (!e->t || e->root == e->t) continue;
        /* a view follows a root we (re)placed; a view of someone else's
         * memory that already has its address is left as the caller made it */
        const galloc_info *re = galloc_find(ga, e->root);
        if (re->ours || !e->t->data || galloc_is_ours(ga, e->t)) galloc_set_view(e);
    }
    (void)g;
    return TSL_SUCCESS;
}

tsl_status tsl_gallocr_alloc_graph(tsl_gallocr *ga, tsl_graph *g, tsl_error *err) {
    if (!ga)
        return error_set(err, TSL_FAILED, "", "", -1, NULL, NULL, "graph allocator: the allocator is NULL");
    if (!g || g->n_nodes < 0 || g->n_leafs < 0 || (g->n_nodes > 0 && !g->nodes) || (g->n_leafs > 0 && !g->leafs))
        return error_set(err, TSL_FAILED, galloc_be_name(ga), galloc_be_device(ga), -1, NULL, NULL,
                         "graph allocator: the graph is NULL or malformed");

    tsl_status s = galloc_plan(ga, g, err);
    if (s != TSL_SUCCESS) {
        ga->peak = ga->total = 0;
        return s;
    }
    s = galloc_ensure_buffer(ga, g, err);
    if (s != TSL_SUCCESS) return s;
    return galloc_assign(ga, g, err);
}
