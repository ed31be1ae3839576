/*
 * test_graph.c - graph building: topological order, each tensor once, leafs
 * against nodes, output flags, expanding a graph, a 100k-node chain (the
 * walk must not recurse), and FLOP counts.
 */
#include <stdint.h>

#include "core/core.h"
#include "test.h"

static tsl_context *new_ctx(size_t size, bool no_alloc) {
    tsl_ctx_params p = {size, no_alloc};
    return tsl_ctx_new(p);
}

static int index_in(tsl_tensor **arr, int n, const tsl_tensor *t) {
    for (int i = 0; i < n; i++)
        if (arr[i] == t) return i;
    return -1;
}

/* Every source of every node is a leaf or an earlier node; nothing twice;
 * leafs are exactly the op NONE tensors. */
static bool graph_valid(const tsl_graph *g) {
    bool ok = true;
    for (int i = 0; i < g->n_nodes; i++) {
        tsl_tensor *t = g->nodes[i];
        if (t->op == TSL_OP_NONE) ok = false;
        if (index_in(g->nodes, i, t) >= 0 || index_in(g->leafs, g->n_leafs, t) >= 0) ok = false;
        for (int s = 0; s < TSL_MAX_SRC; s++) {
            tsl_tensor *src = t->src[s];
            if (!src) continue;
            int ni = index_in(g->nodes, g->n_nodes, src);
            if (ni < 0 ? index_in(g->leafs, g->n_leafs, src) < 0 : ni >= i) ok = false;
        }
    }
    for (int i = 0; i < g->n_leafs; i++) {
        if (g->leafs[i]->op != TSL_OP_NONE) ok = false;
        if (index_in(g->leafs, i, g->leafs[i]) >= 0) ok = false;
    }
    return ok;
}

static void test_order(void) {
    tsl_context *ctx = new_ctx(1 << 20, true);
    tsl_tensor *w = tsl_tensor_set_name(tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 16, 8), "w");
    tsl_tensor *x = tsl_tensor_set_name(tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 16, 4), "x");
    tsl_tensor *bias = tsl_tensor_set_name(tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 8), "bias");
    tsl_tensor *unused = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 8);
    tsl_tensor *y = tsl_mul_mat(ctx, w, x);     /* [8, 4] */
    tsl_tensor *z = tsl_add(ctx, y, bias);      /* uses y */
    tsl_tensor *s = tsl_silu(ctx, z);
    tsl_tensor *d = tsl_mul(ctx, s, z);         /* diamond: z reached twice */
    tsl_tensor *t = tsl_transpose(ctx, d);      /* a view node */
    tsl_tensor *c = tsl_cont(ctx, t);
    tsl_tensor *kv = tsl_new_tensor_2d(ctx, TSL_TYPE_F16, 4, 8);
    tsl_tensor *cp = tsl_cpy(ctx, c, kv);       /* CPY is a node, kv a leaf */
    CHECK(cp != NULL);
    tsl_tensor *outs[2] = {cp, s};
    tsl_graph *g = tsl_graph_build(ctx, outs, 2);
    CHECK(g != NULL);
    if (!g) goto done;
    CHECK(g->ctx == ctx);
    CHECK(graph_valid(g));
    /* nodes in depth-first post-order, sources in src[] order */
    tsl_tensor *want_nodes[] = {y, z, s, d, t, c, cp};
    CHECK(g->n_nodes == 7);
    for (int i = 0; i < 7 && i < g->n_nodes; i++) CHECKF(g->nodes[i] == want_nodes[i], "node %d", i);
    tsl_tensor *want_leafs[] = {w, x, bias, kv};
    CHECK(g->n_leafs == 4);
    for (int i = 0; i < 4 && i < g->n_leafs; i++) CHECKF(g->leafs[i] == want_leafs[i], "leaf %d", i);
    CHECK(index_in(g->leafs, g->n_leafs, unused) < 0);
    /* outputs flagged, nothing else */
    CHECK((cp->flags & TSL_FLAG_OUTPUT) && (s->flags & TSL_FLAG_OUTPUT));
    CHECK(!(z->flags & TSL_FLAG_OUTPUT) && !(w->flags & TSL_FLAG_OUTPUT) && !(d->flags & TSL_FLAG_OUTPUT));
    CHECK(tsl_graph_node_index(g, y) == 0 && tsl_graph_node_index(g, cp) == 6);
    CHECK(tsl_graph_node_index(g, w) == -1 && tsl_graph_node_index(g, unused) == -1);
    CHECK(tsl_graph_node_index(NULL, y) == -1 && tsl_graph_node_index(g, NULL) == -1);
    /* the same output twice is one node */
    tsl_tensor *twice[3] = {s, s, z};
    tsl_graph *g2 = tsl_graph_build(ctx, twice, 3);
    CHECK(g2 && g2->n_nodes == 3 && g2->n_leafs == 3 && graph_valid(g2));
    /* a leaf as the output */
    tsl_graph *g3 = tsl_graph_build(ctx, &w, 1);
    CHECK(g3 && g3->n_nodes == 0 && g3->n_leafs == 1 && g3->leafs[0] == w);
    CHECK(w->flags & TSL_FLAG_OUTPUT);
done:
    CHECK(tsl_ctx_error(ctx) == NULL);
    tsl_ctx_free(ctx);
}

static void test_expand(void) {
    tsl_context *ctx = new_ctx(1 << 20, true);
    tsl_tensor *a = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 8);
    tsl_tensor *b = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 8);
    tsl_tensor *c = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 8);
    tsl_tensor *s1 = tsl_add(ctx, a, b);
    tsl_tensor *s2 = tsl_mul(ctx, s1, c);
    tsl_tensor *s3 = tsl_sqr(ctx, s1);
    tsl_graph *g = tsl_graph_build(ctx, &s2, 1);
    CHECK(g && g->n_nodes == 2 && g->n_leafs == 3);
    if (!g) goto done;
    CHECK(tsl_graph_expand(g, s3));
    CHECK(g->n_nodes == 3 && g->nodes[0] == s1 && g->nodes[1] == s2 && g->nodes[2] == s3);
    CHECK(g->n_leafs == 3);
    CHECK(s3->flags & TSL_FLAG_OUTPUT);
    /* expanding with something already there changes nothing */
    CHECK(tsl_graph_expand(g, s1));
    CHECK(g->n_nodes == 3 && g->n_leafs == 3);
    /* many expansions grow the arrays; earlier content is kept */
    tsl_tensor *prev = s3;
    for (int i = 0; i < 200; i++) {
        tsl_tensor *n = tsl_add(ctx, prev, tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 8));
        CHECK(tsl_graph_expand(g, n));
        prev = n;
    }
    CHECK(g->n_nodes == 203 && g->n_leafs == 203 && g->capacity >= 203);
    CHECK(g->nodes[0] == s1 && g->nodes[202] == prev && graph_valid(g));
    /* NULL output */
    CHECK(!tsl_graph_expand(g, NULL));
    CHECK_STR_CONTAINS(tsl_ctx_error(ctx), "graph_expand");
    CHECK(!tsl_graph_expand(NULL, s1));
done:
    tsl_ctx_free(ctx);
}

static void test_long_chain(void) {
    enum { N = 100000 };
    tsl_context *ctx = new_ctx((size_t)200 << 20, true);
    tsl_tensor *x = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 4);
    tsl_tensor *first = NULL, *t = x;
    for (int i = 0; i < N; i++) {
        t = (i % 2) ? tsl_scale(ctx, t, 0.5f) : tsl_add(ctx, t, x);
        if (i == 0) first = t;
    }
    CHECK(t != NULL);
    tsl_graph *g = tsl_graph_build(ctx, &t, 1);
    CHECK(g != NULL);
    if (g) {
        CHECK(g->n_nodes == N && g->n_leafs == 1 && g->leafs[0] == x);
        CHECK(g->nodes[0] == first && g->nodes[N - 1] == t);
        bool ordered = true;
        for (int i = 1; i < g->n_nodes; i++) ordered &= g->nodes[i]->src[0] == g->nodes[i - 1];
        CHECK(ordered);
        CHECK(tsl_graph_flops(g) == (double)N * 4);
    }
    CHECK(tsl_ctx_error(ctx) == NULL);
    tsl_ctx_free(ctx);
}

static void test_flops(void) {
    tsl_context *ctx = new_ctx(1 << 20, true);
    const int K = 128, M = 64, N = 10;
    tsl_tensor *w = tsl_new_tensor_2d(ctx, TSL_TYPE_Q8_0, K, M);
    tsl_tensor *x = tsl_new_tensor_3d(ctx, TSL_TYPE_F32, K, N, 2);
    tsl_tensor *y = tsl_mul_mat(ctx, w, x);               /* [M, N, 2]: 2*M*N*2*K */
    tsl_tensor *v = tsl_reshape_2d(ctx, y, M, N * 2);     /* view: 0 */
    tsl_tensor *b = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, M);
    tsl_tensor *z = tsl_add(ctx, v, b);                    /* M*N*2 */
    tsl_graph *g = tsl_graph_build(ctx, &z, 1);
    CHECK(g && g->n_nodes == 3);
    double want = 2.0 * M * N * 2 * K + (double)M * N * 2;
    CHECK(g && tsl_graph_flops(g) == want);
    CHECK(core_node_flops(v) == 0.0 && core_node_flops(w) == 0.0);
    CHECK(tsl_graph_flops(NULL) == 0.0);
    tsl_ctx_free(ctx);
}

static void test_arena_full(void) {
    /* room for the tensors but not for the graph's arrays */
    tsl_context *ctx = new_ctx(1 << 14, true);
    tsl_tensor *t = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 4);
    while (tsl_ctx_used(ctx) + 2 * sizeof(tsl_tensor) + 256 < tsl_ctx_size(ctx)) t = tsl_sqr(ctx, t);
    CHECK(t != NULL && tsl_ctx_error(ctx) == NULL);
    CHECK(tsl_graph_build(ctx, &t, 1) == NULL);
    CHECK_STR_CONTAINS(tsl_ctx_error(ctx), "arena full");
    tsl_ctx_free(ctx);
}

int main(void) {
    RUN(test_order);
    RUN(test_expand);
    RUN(test_long_chain);
    RUN(test_flops);
    RUN(test_arena_full);
    return test_summary();
}
