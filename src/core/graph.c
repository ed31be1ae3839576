/*
 * graph.c - graphs: the topological order of everything some outputs need.
 *
 * A graph is two arrays in the context's arena: nodes (tensors to compute,
 * views and CPY included, in an order where every source comes first) and
 * leafs (op NONE tensors: inputs, weights, constants). The order is the
 * depth-first post-order from the outputs, sources visited in src[] order,
 * which is ggml's order and keeps producers next to their consumers.
 *
 * The walk is iterative with an explicit stack: a model graph is shallow, but
 * a training unroll or a long chain of small ops can be 100k deep and the C
 * stack would not survive recursion. "Seen" is an open-addressing pointer set
 * in malloc'd scratch (freed before returning), so the arena holds only the
 * result; expanding a graph rebuilds the set from the arrays, which is linear
 * and keeps the graph struct plain data with nothing to free.
 *
 * Arrays grow by doubling; the old arrays stay in the arena as dead space
 * (an arena cannot free), which the doubling bounds to the size of the final
 * arrays.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/core.h"

/* ---- pointer set ------------------------------------------------------------ */

typedef struct {
    const tsl_tensor **slots;
    size_t cap; /* power of two */
    size_t n;
} graph_set;

static size_t graph_hash(const tsl_tensor *t) {
    uint64_t x = (uint64_t)(uintptr_t)t;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

static bool graph_set_init(graph_set *s, size_t want) {
    size_t cap = 64;
    while (cap < want * 2) cap *= 2;
    s->slots = calloc(cap, sizeof *s->slots);
    s->cap = cap;
    s->n = 0;
    return s->slots != NULL;
}

static bool graph_set_grow(graph_set *s) {
    graph_set g;
    if (!graph_set_init(&g, s->cap)) return false;
    for (size_t i = 0; i < s->cap; i++) {
        const tsl_tensor *t = s->slots[i];
        if (!t) continue;
        size_t h = graph_hash(t) & (g.cap - 1);
        while (g.slots[h]) h = (h + 1) & (g.cap - 1);
        g.slots[h] = t;
        g.n++;
    }
    free(s->slots);
    *s = g;
    return true;
}

/* Insert t; returns 1 if newly added, 0 if already present, -1 on OOM. */
static int graph_set_add(graph_set *s, const tsl_tensor *t) {
    if ((s->n + 1) * 2 > s->cap && !graph_set_grow(s)) return -1;
    size_t h = graph_hash(t) & (s->cap - 1);
    while (s->slots[h]) {
        if (s->slots[h] == t) return 0;
        h = (h + 1) & (s->cap - 1);
    }
    s->slots[h] = t;
    s->n++;
    return 1;
}

/* ---- growable arrays in the arena -------------------------------------------- */

static bool graph_reserve(tsl_graph *g, int need) {
    if (need <= g->capacity) return true;
    int cap = g->capacity > 0 ? g->capacity : 16;
    while (cap < need) {
        if (cap > INT32_MAX / 2) {
            tsl_ctx_fail(g->ctx, "graph_build: more than %d tensors in one graph", INT32_MAX / 2);
            return false;
        }
        cap *= 2;
    }
    tsl_tensor **nodes = ctx_arena_alloc(g->ctx, (size_t)cap * sizeof *nodes, 0);
    if (!nodes) return false;
    tsl_tensor **leafs = ctx_arena_alloc(g->ctx, (size_t)cap * sizeof *leafs, 0);
    if (!leafs) return false;
    if (g->n_nodes) memcpy(nodes, g->nodes, (size_t)g->n_nodes * sizeof *nodes);
    if (g->n_leafs) memcpy(leafs, g->leafs, (size_t)g->n_leafs * sizeof *leafs);
    g->nodes = nodes;
    g->leafs = leafs;
    g->capacity = cap;
    return true;
}

/* ---- the walk ------------------------------------------------------------------- */

typedef struct {
    tsl_tensor *t;
    int next_src; /* the next src[] slot to visit */
} graph_frame;

typedef struct {
    graph_frame *frames;
    size_t n, cap;
} graph_stack;

static bool graph_push(graph_stack *st, tsl_tensor *t) {
    if (st->n == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 256;
        graph_frame *f = realloc(st->frames, cap * sizeof *f);
        if (!f) return false;
        st->frames = f;
        st->cap = cap;
    }
    st->frames[st->n].t = t;
    st->frames[st->n].next_src = 0;
    st->n++;
    return true;
}

/* Append to the graph everything `out` needs that is not yet in `seen`, in
 * post-order. Returns false (ctx error set) on arena or memory exhaustion. */
static bool graph_visit(tsl_graph *g, graph_set *seen, graph_stack *st, tsl_tensor *out) {
    int r = graph_set_add(seen, out);
    if (r < 0) goto oom;
    if (r == 0) return true;
    st->n = 0;
    if (!graph_push(st, out)) goto oom;
    while (st->n > 0) {
        graph_frame *f = &st->frames[st->n - 1];
        tsl_tensor *t = f->t;
        if (f->next_src < TSL_MAX_SRC) {
            tsl_tensor *s = t->src[f->next_src++];
            if (!s) continue;
            r = graph_set_add(seen, s);
            if (r < 0) goto oom;
            if (r == 1 && !graph_push(st, s)) goto oom;
            continue;
        }
        st->n--;
        if (t->op == TSL_OP_NONE) {
            if (!graph_reserve(g, g->n_leafs + 1)) return false;
            g->leafs[g->n_leafs++] = t;
        } else {
            if (!graph_reserve(g, g->n_nodes + 1)) return false;
            g->nodes[g->n_nodes++] = t;
        }
    }
    return true;
oom:
    tsl_ctx_fail(g->ctx, "graph_build: out of memory while walking the graph");
    return false;
}

/* Adds outputs [0, n) to g. Shared by build and expand. */
static bool graph_add(tsl_graph *g, tsl_tensor **outputs, int n) {
    graph_set seen;
    if (!graph_set_init(&seen, (size_t)g->n_nodes + (size_t)g->n_leafs + 64)) {
        tsl_ctx_fail(g->ctx, "graph_build: out of memory while walking the graph");
        return false;
    }
    bool ok = true;
    for (int i = 0; i < g->n_nodes && ok; i++) ok = graph_set_add(&seen, g->nodes[i]) >= 0;
    for (int i = 0; i < g->n_leafs && ok; i++) ok = graph_set_add(&seen, g->leafs[i]) >= 0;
    if (!ok) tsl_ctx_fail(g->ctx, "graph_build: out of memory while walking the graph");
    graph_stack st = {0};
    for (int i = 0; i < n && ok; i++) {
        outputs[i]->flags |= TSL_FLAG_OUTPUT;
        ok = graph_visit(g, &seen, &st, outputs[i]);
    }
    free(st.frames);
    free(seen.slots);
    return ok;
}

tsl_graph *tsl_graph_build(tsl_context *ctx, tsl_tensor **outputs, int n) {
    if (!ctx) return NULL;
    if (n <= 0 || !outputs) {
        tsl_ctx_fail(ctx, "graph_build: %d outputs given; a graph needs at least one", outputs ? n : 0);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        if (outputs[i]) continue;
        /* When an op in ctx failed, its message is the one to keep (first
         * wins); it names the real cause, the NULL is only its echo. */
        const char *prev = tsl_ctx_error(ctx);
        if (prev)
            TSL_LOGD("graph_build: output %d is NULL (an op before it failed: %s)", i, prev);
        else
            tsl_ctx_fail(ctx, "graph_build: output %d is NULL (no op in this context recorded a failure; was it "
                              "built in another context?)",
                         i);
        return NULL;
    }
    tsl_graph *g = ctx_arena_alloc(ctx, sizeof *g, 0);
    if (!g) return NULL;
    memset(g, 0, sizeof *g);
    g->ctx = ctx;
    if (!graph_add(g, outputs, n)) return NULL;
    return g;
}

bool tsl_graph_expand(tsl_graph *g, tsl_tensor *output) {
    if (!g) return false;
    if (!output) {
        if (!tsl_ctx_error(g->ctx)) tsl_ctx_fail(g->ctx, "graph_expand: the output is NULL");
        return false;
    }
    return graph_add(g, &output, 1);
}

int tsl_graph_node_index(const tsl_graph *g, const tsl_tensor *t) {
    if (!g || !t) return -1;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i] == t) return i;
    return -1;
}

double tsl_graph_flops(const tsl_graph *g) {
    if (!g) return 0.0;
    double f = 0.0;
    for (int i = 0; i < g->n_nodes; i++) f += core_node_flops(g->nodes[i]);
    return f;
}
