/*
 * test_alloc.c - the graph allocator's plan: reuse, in place, pins, errors.
 *
 * The central check rebuilds liveness independently of the allocator: for a
 * 4-layer llama-shaped forward graph it derives, from the graph alone, when
 * each tensor is born and when it is last read (through any view), then
 *  - computes the largest live set, a lower bound any allocator must meet,
 *    and holds the plan's peak to within 25% of it;
 *  - checks every pair of tensors alive at the same time for overlapping
 *    memory, allowing only the one legitimate case (an in-place node over the
 *    source it was the last reader of).
 * Small hand-ordered graphs pin down the free list exactly (best fit,
 * coalescing, folding back into the end) with byte-exact expected peaks.
 * No compute happens here; tests/cpu/test_alloc_compute.c runs the graphs.
 */
#include <stdint.h>

#include "core/core.h"
#include "tensile/backend.h"
#include "test.h"

#include "lm_graph.h"

/* ---- liveness, rebuilt from the graph alone ------------------------------ */

static const tsl_tensor *root_of(const tsl_tensor *t) {
    while (t->view_src) t = t->view_src;
    return t;
}

typedef struct live_t {
    const tsl_tensor *t;
    int start, end; /* steps (node indices) where the tensor holds a value */
    size_t size;    /* bytes reserved for it: nbytes rounded to the alignment */
} live_t;

typedef struct live_set {
    live_t *v;
    int n;
} live_set;

static int live_find(const live_set *ls, const tsl_tensor *t) {
    for (int i = 0; i < ls->n; i++)
        if (ls->v[i].t == t) return i;
    return -1;
}

/* planned[]: the non-view tensors of g that had no data before the plan.
 * Leafs and INPUT tensors live from the start, OUTPUT tensors to the end;
 * everything else from the node that makes it to the last node reading it
 * or any view of it. */
static live_set live_build(const tsl_graph *g, const tsl_tensor *const *planned, int n_planned, size_t align) {
    live_set ls = {calloc((size_t)n_planned, sizeof(live_t)), n_planned};
    for (int i = 0; i < n_planned; i++) {
        const tsl_tensor *t = planned[i];
        live_t *l = &ls.v[i];
        l->t = t;
        size_t nb = tsl_nbytes(t) ? tsl_nbytes(t) : 1;
        l->size = (nb + align - 1) / align * align;
        int idx = tsl_graph_node_index(g, t);
        l->start = (idx < 0 || (t->flags & TSL_FLAG_INPUT)) ? 0 : idx;
        l->end = l->start;
        if (idx < 0 || (t->flags & (TSL_FLAG_INPUT | TSL_FLAG_OUTPUT))) l->end = g->n_nodes - 1;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const tsl_tensor *n = g->nodes[i];
        for (int j = 0; j < TSL_MAX_SRC; j++) {
            if (!n->src[j]) continue;
            int k = live_find(&ls, root_of(n->src[j]));
            if (k >= 0 && ls.v[k].end < i) ls.v[k].end = i;
        }
        /* an OUTPUT view keeps its root to the end */
        if (n->view_src && (n->flags & TSL_FLAG_OUTPUT)) {
            int k = live_find(&ls, root_of(n));
            if (k >= 0) ls.v[k].end = g->n_nodes - 1;
        }
    }
    return ls;
}

static size_t live_max_set(const live_set *ls, int n_steps) {
    size_t best = 0;
    for (int s = 0; s < n_steps; s++) {
        size_t sum = 0;
        for (int i = 0; i < ls->n; i++)
            if (ls->v[i].start <= s && s <= ls->v[i].end) sum += ls->v[i].size;
        if (sum > best) best = sum;
    }
    return best;
}

/* Is b an in-place result over a: made at the step where a is last read,
 * from a as its first operand, at a's address? */
static bool is_inplace_pair(const live_t *a, const live_t *b) {
    return b->t->src[0] == a->t && a->end == b->start && b->t->data == a->t->data;
}

/* The same largest live set, but counting an in-place pair once at the step
 * they share: the least memory any placement with those in-place choices
 * needs. A plan peak below it would mean live tensors overlap. */
static size_t live_max_occupied(const live_set *ls, int n_steps) {
    size_t best = 0;
    for (int s = 0; s < n_steps; s++) {
        size_t sum = 0;
        for (int i = 0; i < ls->n; i++) {
            const live_t *b = &ls->v[i];
            if (b->start > s || s > b->end) continue;
            sum += b->size;
            if (b->start != s || !b->t->src[0]) continue;
            for (int j = 0; j < ls->n; j++)
                if (j != i && is_inplace_pair(&ls->v[j], b)) sum -= b->size;
        }
        if (sum > best) best = sum;
    }
    return best;
}

/* Count pairs alive at the same step whose memory overlaps (other than an
 * in-place pair). */
static int live_overlaps(const live_set *ls) {
    int bad = 0;
    for (int i = 0; i < ls->n; i++) {
        for (int j = i + 1; j < ls->n; j++) {
            const live_t *a = &ls->v[i], *b = &ls->v[j];
            if (a->end < b->start || b->end < a->start) continue;
            if (is_inplace_pair(a, b) || is_inplace_pair(b, a)) continue;
            const char *pa = a->t->data, *pb = b->t->data;
            if (pa < pb + tsl_nbytes(b->t) && pb < pa + tsl_nbytes(a->t)) {
                if (bad < 5)
                    fprintf(stderr, "  overlap: '%s' [%d,%d] and '%s' [%d,%d]\n", a->t->name, a->start, a->end,
                            b->t->name, b->start, b->end);
                bad++;
            }
        }
    }
    return bad;
}

static tsl_backend *new_cpu(void) {
    tsl_error err;
    tsl_backend *be = tsl_backend_cpu_new(1, &err);
    if (!be) {
        char line[512];
        tsl_error_format(&err, line, sizeof line);
        fprintf(stderr, "cpu backend: %s\n", line);
    }
    return be;
}

/* ---- the llama graph ----------------------------------------------------- */

static void test_llama_plan(void) {
    lm_dims d = {256, 8, 4, 688, 32, 1000, 4};
    lm_model m;
    CHECK(lm_model_init(&m, d));
    lm_graph G;
    tsl_ctx_params gp = {4 * 1024 * 1024, true};
    CHECK(lm_graph_build(&G, &m, gp));
    tsl_backend *be = new_cpu();
    CHECK(be != NULL);
    if (!G.g || !be) goto done;

    tsl_graph *g = G.g;
    /* what the plan will own: non-view tensors without data */
    int cap = g->n_nodes + g->n_leafs;
    const tsl_tensor **planned = calloc((size_t)cap, sizeof *planned);
    void **weights_before = calloc((size_t)g->n_leafs, sizeof *weights_before);
    int n_planned = 0;
    for (int i = 0; i < g->n_leafs; i++) {
        weights_before[i] = g->leafs[i]->data;
        if (!g->leafs[i]->data && !g->leafs[i]->view_src) planned[n_planned++] = g->leafs[i];
    }
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i]->data && !g->nodes[i]->view_src) planned[n_planned++] = g->nodes[i];

    tsl_gallocr *ga = tsl_gallocr_new(be);
    tsl_error err;
    tsl_error_clear(&err);
    tsl_status s = tsl_gallocr_alloc_graph(ga, g, &err);
    CHECKF(s == TSL_SUCCESS, "%s: %s", tsl_status_str(s), err.message);
    if (s != TSL_SUCCESS) goto out;

    /* every tensor has memory; weights did not move; views sit on their roots */
    tsl_buffer *buf = NULL;
    for (int i = 0; i < g->n_leafs; i++) {
        CHECK(g->leafs[i]->data != NULL);
        if (weights_before[i]) CHECK(g->leafs[i]->data == weights_before[i]);
    }
    for (int i = 0; i < g->n_nodes; i++) {
        tsl_tensor *t = g->nodes[i];
        CHECKF(t->data != NULL, "node %d '%s' has no data", i, t->name);
        if (t->view_src && t->data) {
            size_t offs = 0;
            const tsl_tensor *r = t;
            while (r->view_src) offs += r->view_offs, r = r->view_src;
            CHECKF((char *)t->data == (char *)r->data + offs, "view '%s' is not at its root + offset", t->name);
        }
    }
    for (int i = 0; i < n_planned; i++) {
        if (!buf) buf = planned[i]->buffer;
        CHECKF(planned[i]->buffer == buf && buf != NULL, "'%s' is not in the allocator's buffer", planned[i]->name);
    }
    if (!buf) goto out;
    size_t align = tsl_buffer_alignment(buf);
    size_t peak = tsl_gallocr_peak(ga), total = tsl_gallocr_total(ga);
    CHECK(tsl_buffer_size(buf) >= peak);
    for (int i = 0; i < n_planned; i++) {
        size_t off = (size_t)((const char *)planned[i]->data - (const char *)tsl_buffer_host_ptr(buf));
        CHECKF(off % align == 0, "'%s' at offset %zu is not %zu-aligned", planned[i]->name, off, align);
        CHECKF(off + tsl_nbytes(planned[i]) <= peak, "'%s' ends past the peak", planned[i]->name);
    }

    live_set ls = live_build(g, planned, n_planned, align);
    size_t bound = live_max_set(&ls, g->n_nodes);
    size_t occupied = live_max_occupied(&ls, g->n_nodes);
    size_t sum = 0;
    for (int i = 0; i < ls.n; i++) sum += ls.v[i].size;
    printf("  llama 4L: %d nodes, %d planned tensors; peak %zu bytes, largest live set %zu bytes (peak %.3fx), "
           "with in-place sharing %zu bytes (peak %.3fx), total without reuse %zu bytes\n",
           g->n_nodes, n_planned, peak, bound, (double)peak / (double)bound, occupied,
           (double)peak / (double)occupied, total);
    CHECK(total == sum);
    CHECK(peak < total);
    CHECKF((double)peak <= 1.25 * (double)bound, "peak %zu vs bound %zu", peak, bound);
    CHECKF(peak >= occupied && (double)peak <= 1.25 * (double)occupied, "peak %zu vs occupied %zu", peak, occupied);
    CHECK(live_overlaps(&ls) == 0);

    /* in place: some node writes over its first operand */
    int n_inplace = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const tsl_tensor *t = g->nodes[i];
        if (!t->view_src && t->src[0] && !t->src[0]->view_src && t->src[0]->data == t->data) {
            CHECK(core_op_can_inplace(t->op));
            n_inplace++;
        }
    }
    printf("  %d nodes computed in place\n", n_inplace);
    CHECK(n_inplace >= 1);

    /* a second plan of the same graph lands on the same addresses */
    void **addr = calloc((size_t)g->n_nodes, sizeof *addr);
    for (int i = 0; i < g->n_nodes; i++) addr[i] = g->nodes[i]->data;
    s = tsl_gallocr_alloc_graph(ga, g, &err);
    CHECK(s == TSL_SUCCESS);
    CHECK(tsl_gallocr_peak(ga) == peak);
    CHECK(tsl_gallocr_total(ga) == total);
    for (int i = 0; i < g->n_nodes; i++) CHECK(g->nodes[i]->data == addr[i]);
    free(addr);
    free(ls.v);
out:
    tsl_gallocr_free(ga);
    free(planned);
    free(weights_before);
done:
    tsl_backend_free(be);
    tsl_ctx_free(G.ctx);
    tsl_ctx_free(m.ctx);
}

/* ---- hand-ordered graphs with exact layouts ------------------------------ */

#define MAXN 32
typedef struct hand_graph {
    tsl_tensor *nodes[MAXN], *leafs[MAXN];
    tsl_graph g;
} hand_graph;

static void hand_push(hand_graph *h, tsl_tensor *t) { h->nodes[h->g.n_nodes++] = t; }
static void hand_init(hand_graph *h) {
    memset(h, 0, sizeof *h);
    h->g.nodes = h->nodes;
    h->g.leafs = h->leafs;
    h->g.capacity = MAXN;
}

static size_t off_of(const tsl_tensor *t) {
    return (size_t)((const char *)t->data - (const char *)tsl_buffer_host_ptr(t->buffer));
}

/* x -> c1 -> c2 -> c3 -> c4 (cont copies: never in place). c3 must reuse
 * c1's block, and c4 the space c2 gave back at the end. */
static void test_chain_reuse(void) {
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){64 * 1024, true});
    tsl_backend *be = new_cpu();
    if (!be) { CHECK(be != NULL); tsl_ctx_free(ctx); return; }
    hand_graph h;
    hand_init(&h);
    const size_t S = 4096;
    tsl_tensor *x = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, (int64_t)(S / 4));
    x->flags |= TSL_FLAG_INPUT;
    h.leafs[h.g.n_leafs++] = x;
    tsl_tensor *c[5] = {x};
    for (int i = 1; i <= 4; i++) hand_push(&h, c[i] = tsl_cont(ctx, c[i - 1]));
    c[4]->flags |= TSL_FLAG_OUTPUT;

    tsl_gallocr *ga = tsl_gallocr_new(be);
    tsl_error err;
    CHECK(tsl_gallocr_alloc_graph(ga, &h.g, &err) == TSL_SUCCESS);
    CHECK(tsl_gallocr_total(ga) == 5 * S);
    CHECK(tsl_gallocr_peak(ga) == 3 * S);
    CHECK(off_of(x) == 0);
    CHECK(off_of(c[1]) == S);
    CHECK(off_of(c[2]) == 2 * S);
    CHECK(off_of(c[3]) == S);      /* c1's block, freed when c2 was made */
    CHECK(off_of(c[4]) == 2 * S);  /* c2's block, folded back into the end */
    tsl_gallocr_free(ga);
    tsl_backend_free(be);
    tsl_ctx_free(ctx);
}

/* Freed neighbours merge into one block, and a request takes the smallest
 * block it fits in rather than the first. Offsets in KiB: x [0,4) pinned. */
static void test_best_fit_and_coalesce(void) {
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){64 * 1024, true});
    tsl_backend *be = new_cpu();
    if (!be) { CHECK(be != NULL); tsl_ctx_free(ctx); return; }
    const size_t K = 1024;
    tsl_gallocr *ga = tsl_gallocr_new(be);
    tsl_error err;

    /* coalescing: a [4,5) and b [5,6) die together; f (2 KiB) fits only in
     * their merged block */
    {
        hand_graph h;
        hand_init(&h);
        tsl_tensor *x = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 1024);
        h.leafs[h.g.n_leafs++] = x;
        tsl_tensor *va = tsl_view_1d(ctx, x, 256, 0), *vb = tsl_view_1d(ctx, x, 256, K);
        tsl_tensor *vc = tsl_view_1d(ctx, x, 512, 2 * K);
        tsl_tensor *a = tsl_cont(ctx, va), *b = tsl_cont(ctx, vb), *cc = tsl_cont(ctx, vc);
        tsl_tensor *e = tsl_concat(ctx, a, b, 0); /* not in place: made before a, b die */
        tsl_tensor *f = tsl_cont(ctx, cc);
        tsl_tensor *out = tsl_concat(ctx, e, f, 0);
        out->flags |= TSL_FLAG_OUTPUT;
        tsl_tensor *order[] = {va, vb, vc, a, b, cc, e, f, out};
        for (size_t i = 0; i < sizeof order / sizeof *order; i++) hand_push(&h, order[i]);
        CHECK(tsl_gallocr_alloc_graph(ga, &h.g, &err) == TSL_SUCCESS);
        CHECK(off_of(a) == 4 * K && off_of(b) == 5 * K && off_of(cc) == 6 * K);
        CHECK(off_of(e) == 8 * K);
        CHECK(off_of(f) == 4 * K); /* the merged [4,6) */
        CHECK(off_of(out) == 10 * K);
        CHECK(tsl_gallocr_peak(ga) == 14 * K);
        CHECK(va->data == x->data && (char *)vb->data == (char *)x->data + K);
    }
    /* best fit: holes of 2 KiB at [4,6) and 1 KiB at [7,8); r (1 KiB) goes to
     * the 1 KiB hole */
    {
        hand_graph h;
        hand_init(&h);
        tsl_tensor *x = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 1024);
        h.leafs[h.g.n_leafs++] = x;
        tsl_tensor *v2 = tsl_view_1d(ctx, x, 512, 0), *v1 = tsl_view_1d(ctx, x, 256, 0);
        tsl_tensor *a = tsl_cont(ctx, v2), *k1 = tsl_cont(ctx, v1), *b = tsl_cont(ctx, v1), *k2 = tsl_cont(ctx, v1);
        tsl_tensor *n1 = tsl_concat(ctx, a, tsl_concat(ctx, b, b, 0), 0);
        tsl_tensor *bb = n1->src[1];
        tsl_tensor *r = tsl_cont(ctx, k1);
        tsl_tensor *o2 = tsl_concat(ctx, r, k2, 0);
        n1->flags |= TSL_FLAG_OUTPUT;
        o2->flags |= TSL_FLAG_OUTPUT;
        /* x[0,4) a[4,6) k1[6,7) b[7,8) k2[8,9) bb[9,11); b dies (both reads
         * were bb's); n1 (4 KiB) fits no hole: [11,15); then a and bb die.
         * r (1 KiB) must take b's [7,8), the smallest hole, not a's [4,6);
         * then k1 dies and merges with [4,6) into [4,7); o2 (2 KiB) takes
         * bb's exact [9,11) over the larger, earlier [4,7) */
        tsl_tensor *order[] = {v2, v1, a, k1, b, k2, bb, n1, r, o2};
        for (size_t i = 0; i < sizeof order / sizeof *order; i++) hand_push(&h, order[i]);
        CHECK(tsl_gallocr_alloc_graph(ga, &h.g, &err) == TSL_SUCCESS);
        CHECK(off_of(a) == 4 * K && off_of(k1) == 6 * K && off_of(b) == 7 * K && off_of(k2) == 8 * K);
        CHECK(off_of(bb) == 9 * K && off_of(n1) == 11 * K);
        CHECK(off_of(r) == 7 * K);
        CHECK(off_of(o2) == 9 * K);
        CHECK(tsl_gallocr_peak(ga) == 15 * K);
    }
    tsl_gallocr_free(ga);
    tsl_backend_free(be);
    tsl_ctx_free(ctx);
}

/* In place happens exactly when the node is the last reader of a plain,
 * unpinned, same-size first operand that no other operand aliases. */
static void test_inplace_rules(void) {
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){64 * 1024, true});
    tsl_backend *be = new_cpu();
    if (!be) { CHECK(be != NULL); tsl_ctx_free(ctx); return; }
    tsl_gallocr *ga = tsl_gallocr_new(be);
    tsl_error err;
    tsl_tensor *x = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 256, 4);
    x->flags |= TSL_FLAG_INPUT;

    tsl_tensor *a = tsl_cont(ctx, x);
    tsl_tensor *s1 = tsl_scale(ctx, a, 2.0f);      /* last reader of a: in place */
    tsl_tensor *s2 = tsl_sqr(ctx, s1);             /* s1 is read again below: not in place */
    tsl_tensor *s3 = tsl_add(ctx, s2, s1);         /* last reader of s2 and s1: in place over s2 */
    tsl_tensor *row = tsl_view_1d(ctx, s3, 256, 0);
    tsl_tensor *s4 = tsl_add(ctx, s3, row);        /* b aliases a's block: not in place */
    tsl_tensor *s5 = tsl_scale(ctx, x, 3.0f);      /* x is an INPUT: not in place */
    tsl_tensor *s6 = tsl_add(ctx, s4, s5);         /* in place over s4 (an OUTPUT result is fine) */
    s6->flags |= TSL_FLAG_OUTPUT;
    hand_graph h;
    hand_init(&h);
    h.leafs[h.g.n_leafs++] = x;
    tsl_tensor *order[] = {a, s1, s2, s3, row, s4, s5, s6};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++) hand_push(&h, order[i]);
    CHECK(tsl_gallocr_alloc_graph(ga, &h.g, &err) == TSL_SUCCESS);
    CHECK(s1->data == a->data);
    CHECK(s2->data != s1->data);
    CHECK(s3->data == s2->data);
    CHECK(row->data == s3->data);
    CHECK(s4->data != s3->data);
    CHECK(s5->data != x->data);
    CHECK(s6->data == s4->data);
    /* x [0,4K) a=s1 [4K,8K) s2=s3 [8K,12K); s4 takes s1's freed block and
     * s5 the end that s3 gave back: never more than three blocks */
    CHECK(tsl_gallocr_peak(ga) == 3 * 4096);
    tsl_gallocr_free(ga);
    tsl_backend_free(be);
    tsl_ctx_free(ctx);
}

/* Tensors with data are not touched; views of them are resolved; an output
 * is never reused, even once its last reader has run. */
static void test_external_and_pins(void) {
    tsl_context *wctx = tsl_ctx_new((tsl_ctx_params){64 * 1024, false});
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){64 * 1024, true});
    tsl_backend *be = new_cpu();
    if (!be) { CHECK(be != NULL); tsl_ctx_free(ctx); tsl_ctx_free(wctx); return; }
    tsl_tensor *w = tsl_new_tensor_2d(wctx, TSL_TYPE_F32, 256, 4);
    void *wdata = w->data;
    tsl_tensor *wv = tsl_view_1d(ctx, w, 256, 1024); /* made in a no_alloc ctx, of a tensor with data */
    tsl_tensor *a = tsl_cont(ctx, wv);
    tsl_tensor *o1 = tsl_cont(ctx, a);              /* an output that is also read */
    o1->flags |= TSL_FLAG_OUTPUT;
    tsl_tensor *b = tsl_cont(ctx, o1);
    tsl_tensor *c = tsl_cont(ctx, b);
    c->flags |= TSL_FLAG_OUTPUT;
    hand_graph h;
    hand_init(&h);
    h.leafs[h.g.n_leafs++] = w;
    tsl_tensor *order[] = {wv, a, o1, b, c};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++) hand_push(&h, order[i]);
    tsl_gallocr *ga = tsl_gallocr_new(be);
    tsl_error err;
    CHECK(tsl_gallocr_alloc_graph(ga, &h.g, &err) == TSL_SUCCESS);
    CHECK(w->data == wdata && w->buffer == NULL);
    CHECK((char *)wv->data == (char *)wdata + 1024);
    /* a [0,1K) o1 [1K,2K); a dies; b takes [0,1K); o1 outlives its reader b,
     * so c goes to fresh space rather than o1's block */
    CHECK(off_of(a) == 0 && off_of(o1) == 1024 && off_of(b) == 0);
    CHECK(off_of(c) == 2048);
    CHECK(tsl_gallocr_peak(ga) == 3 * 1024);
    CHECK(tsl_gallocr_total(ga) == 4 * 1024);
    tsl_gallocr_free(ga);
    tsl_backend_free(be);
    tsl_ctx_free(ctx);
    tsl_ctx_free(wctx);
}

/* Malformed graphs fail with FAILED and a record; nothing aborts. */
static void test_malformed(void) {
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){64 * 1024, true});
    tsl_backend *be = new_cpu();
    if (!be) { CHECK(be != NULL); tsl_ctx_free(ctx); return; }
    tsl_gallocr *ga = tsl_gallocr_new(be);
    tsl_error err;

    CHECK(tsl_gallocr_new(NULL) == NULL);
    CHECK(tsl_gallocr_alloc_graph(NULL, NULL, &err) == TSL_FAILED);
    CHECK(err.status == TSL_FAILED);
    CHECK(tsl_gallocr_alloc_graph(ga, NULL, &err) == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "graph");
    CHECK(tsl_gallocr_alloc_graph(ga, NULL, NULL) == TSL_FAILED); /* no record: still no crash */

    /* a view of a tensor that has no data and is not in the graph */
    tsl_tensor *hidden = tsl_tensor_set_name(tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 64), "hidden");
    tsl_tensor *v = tsl_tensor_set_name(tsl_view_1d(ctx, hidden, 32, 0), "hidden_view");
    tsl_tensor *y = tsl_tensor_set_name(tsl_scale(ctx, v, 2.0f), "y");
    hand_graph h;
    hand_init(&h);
    hand_push(&h, v);
    hand_push(&h, y);
    tsl_error_clear(&err);
    CHECK(tsl_gallocr_alloc_graph(ga, &h.g, &err) == TSL_FAILED);
    CHECK(err.status == TSL_FAILED);
    CHECK(err.node == 0);
    CHECK_STR_CONTAINS(err.message, "hidden");
    CHECK(y->data == NULL);

    /* a source read before it is computed (order not topological) */
    tsl_tensor *x = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 64);
    tsl_tensor *p = tsl_tensor_set_name(tsl_cont(ctx, x), "p");
    tsl_tensor *q = tsl_tensor_set_name(tsl_cont(ctx, p), "q");
    hand_init(&h);
    h.leafs[h.g.n_leafs++] = x;
    hand_push(&h, q);
    hand_push(&h, p);
    CHECK(tsl_gallocr_alloc_graph(ga, &h.g, &err) == TSL_FAILED);
    CHECK(err.node == 0);
    CHECK_STR_CONTAINS(err.message, "'p'");
    CHECK_STR_CONTAINS(err.tensor, "q");

    /* a view whose offset was corrupted to lie outside its root */
    tsl_tensor *vv = tsl_tensor_set_name(tsl_view_1d(ctx, x, 32, 0), "vv");
    tsl_tensor *z = tsl_cont(ctx, vv);
    vv->view_offs = 4096;
    hand_init(&h);
    h.leafs[h.g.n_leafs++] = x;
    hand_push(&h, vv);
    hand_push(&h, z);
    CHECK(tsl_gallocr_alloc_graph(ga, &h.g, &err) == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "vv");
    CHECK_STR_CONTAINS(err.message, "4096");

    /* a cyclic view chain */
    tsl_tensor *c1 = tsl_view_1d(ctx, x, 16, 0), *c2 = tsl_view_1d(ctx, x, 16, 0);
    c1->view_src = c2;
    c2->view_src = c1;
    hand_init(&h);
    hand_push(&h, c1);
    CHECK(tsl_gallocr_alloc_graph(ga, &h.g, &err) == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "cyclic");
    c1->view_src = x;
    c2->view_src = x;

    /* and after all that, a good graph still plans */
    hand_init(&h);
    h.leafs[h.g.n_leafs++] = x;
    hand_push(&h, p);
    hand_push(&h, q);
    CHECK(tsl_gallocr_alloc_graph(ga, &h.g, &err) == TSL_SUCCESS);
    CHECK(x->data && p->data && q->data);
    tsl_gallocr_free(ga);
    tsl_backend_free(be);
    tsl_ctx_free(ctx);
}

int main(void) {
    RUN(test_chain_reuse);
    RUN(test_best_fit_and_coalesce);
    RUN(test_inplace_rules);
    RUN(test_external_and_pins);
    RUN(test_malformed);
    RUN(test_llama_plan);
    return test_summary();
}
