/*
 * test_sched.c - the scheduler (backend.h): splits, copies across memory
 * kinds, placement, records that name the split, RETRY fallback, and kernel
 * failures routed to the CPU.
 *
 * The device here is a test backend ("dev0") whose buffers are not host
 * memory: its tensors get made-up device addresses that nothing on the host
 * may dereference (the CPU backend refuses them), and the bytes live in
 * malloc'd blocks reached only through the backend's set/get calls. It
 * computes by running the CPU kernels of an internal CPU backend over those
 * blocks, so a graph split between dev0 and the CPU must give exactly the
 * bytes the CPU alone gives. It refuses some ops, as a GPU lacking kernels
 * would, and it accepts only tensors in its own memory, so every copy the
 * scheduler forgets shows up as a failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "fault/fault.h"
#include "tensile/backend.h"
#include "test.h"

/* ---- the test device ------------------------------------------------------ */

typedef struct dev_block {
    unsigned char *mem;
    size_t size;
    uintptr_t base; /* made-up device address of byte 0 */
} dev_block;

typedef struct dev_backend {
    struct tsl_backend base;
    tsl_backend *cpu;  /* runs the kernels */
    uint64_t refuse;   /* bit per tsl_op this device has no kernel for */
    uintptr_t next;    /* next device address to hand out */
    tsl_status last;
    tsl_error last_err;
    int n_run;         /* computes that reached the kernels */
} dev_backend;

static const char *dev_name(const tsl_backend *b) { return "dev0"; }
static const char *dev_device(const tsl_backend *b) { return "test device (memory not host-readable)"; }

static void *dev_buffer_alloc(tsl_backend *b, size_t size, void **base, tsl_error *err) {
    dev_backend *d = (dev_backend *)b;
    fault_site site = {.compute = d->base.n_computes, .node = -1, .bytes = size};
    dev_block *blk = calloc(1, sizeof *blk);
    if (!blk || fault_plan_fire(d->base.faults, TSL_FAULT_ALLOC, &site) || !(blk->mem = calloc(1, size ? size : 1))) {
        free(blk);
        error_set(err, TSL_ALLOC_FAILED, "dev0", dev_device(b), -1, NULL, NULL, "no device memory for %zu bytes",
                  size);
        return NULL;
    }
    blk->size = size;
    blk->base = d->next;
    d->next += (size + 2 * 4096) / 4096 * 4096; /* a gap between blocks */
    *base = (void *)blk->base;
    return blk;
}

static void dev_buffer_free(tsl_backend *b, void *handle) {
    dev_block *blk = handle;
    free(blk->mem);
    free(blk);
}

static size_t dev_buffer_alignment(const tsl_backend *b) { return 64; }

static tsl_status dev_buffer_set(tsl_backend *b, void *handle, size_t offset, const void *src, size_t n,
                                 const tsl_tensor *t, tsl_error *err) {
    dev_block *blk = handle;
    memcpy(blk->mem + offset, src, n);
    return TSL_SUCCESS;
}

static tsl_status dev_buffer_get(tsl_backend *b, void *handle, size_t offset, void *dst, size_t n,
                                 const tsl_tensor *t, tsl_error *err) {
    dev_block *blk = handle;
    memcpy(dst, blk->mem + offset, n);
    return TSL_SUCCESS;
}

static bool dev_supports_op(const tsl_backend *b, const tsl_tensor *node) {
    const dev_backend *d = (const dev_backend *)b;
    if (tsl_op_is_view(node->op) || node->op == TSL_OP_NONE) return true;
    if (d->refuse & (1ull << node->op)) return false;
    return tsl_backend_supports_op(d->cpu, node);
}

/* Where a tensor of ours really is on the host, or NULL if it is not ours. */
static unsigned char *dev_real(const dev_backend *d, const tsl_tensor *t) {
    if (!t->data || !t->buffer || t->buffer->be != &d->base) return NULL;
    const dev_block *blk = t->buffer->handle;
    uintptr_t a = (uintptr_t)t->data;
    if (a < blk->base || a - blk->base + tsl_nbytes(t) > blk->size) return NULL;
    return blk->mem + (a - blk->base);
}

typedef struct dev_map {
    const tsl_tensor **from;
    tsl_tensor *to;
    int n, cap;
} dev_map;

/* The host twin of t: same metadata, data at the real bytes, sources
 * mapped for nodes of the graph. */
static tsl_tensor *dev_twin(dev_map *m, const dev_backend *d, const tsl_tensor *t) {
    for (int i = 0; i < m->n; i++)
        if (m->from[i] == t) return &m->to[i];
    if (m->n == m->cap) return NULL;
    tsl_tensor *h = &m->to[m->n];
    *h = *t;
    h->data = dev_real(d, t);
    h->buffer = NULL;
    h->view_src = NULL;
    h->view_offs = 0;
    h->extra = NULL;
    for (int j = 0; j < TSL_MAX_SRC; j++) h->src[j] = NULL;
    m->from[m->n++] = t;
    return h;
}

static tsl_status dev_compute(dev_backend *d, tsl_graph *g, tsl_error *err) {
    uint64_t compute = atomic_load(&d->base.n_computes);
    fault_site site = {.compute = compute, .node = -1};
    if (fault_plan_fire(d->base.faults, TSL_FAULT_RETRY, &site))
        return error_set(err, TSL_RETRY, "dev0", dev_device(&d->base), -1, NULL, NULL,
                         "the device refused the work (injected fault)");
    /* resolve: every tensor must be in this device's memory */
    for (int i = 0; i < g->n_nodes; i++) {
        tsl_tensor *node = g->nodes[i];
        for (int j = 0; j <= TSL_MAX_SRC; j++) {
            tsl_tensor *t = j < TSL_MAX_SRC ? node->src[j] : node;
            if (!t) continue;
            fault_site ls = {.compute = compute, .node = i, .tensor = t};
            bool found = !fault_plan_fire(d->base.faults, TSL_FAULT_NOBUF, &ls) && backend_tensor_resolve(t);
            if (!found || !dev_real(d, t)) {
                error_set(err, TSL_FAILED, "dev0", dev_device(&d->base), i, node, NULL,
                          "'%s' is not in device memory", t->name);
                snprintf(err->tensor, sizeof err->tensor, "%s", t->name);
                return TSL_FAILED;
            }
        }
        if (!dev_supports_op(&d->base, node))
            return error_set(err, TSL_FAILED, "dev0", dev_device(&d->base), i, node, NULL,
                             "the device has no kernel for %s", tsl_op_name(node->op));
    }
    /* run the CPU kernels over the device blocks */
    int cap = g->n_nodes * (TSL_MAX_SRC + 1) + 1;
    dev_map m = {.from = malloc((size_t)cap * sizeof *m.from), .to = malloc((size_t)cap * sizeof *m.to), .cap = cap};
    tsl_tensor **nodes = malloc((size_t)g->n_nodes * sizeof *nodes);
    tsl_status st = TSL_SUCCESS;
    if (!m.from || !m.to || !nodes) {
        st = error_set(err, TSL_ALLOC_FAILED, "dev0", dev_device(&d->base), -1, NULL, NULL, "out of host memory");
        goto out;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        tsl_tensor *h = dev_twin(&m, d, g->nodes[i]);
        for (int j = 0; j < TSL_MAX_SRC; j++)
            if (g->nodes[i]->src[j]) h->src[j] = dev_twin(&m, d, g->nodes[i]->src[j]);
        nodes[i] = h;
    }
    tsl_graph hg = {.n_nodes = g->n_nodes, .nodes = nodes, .capacity = g->n_nodes};
    tsl_error rec;
    st = tsl_backend_graph_compute(d->cpu, &hg, &rec);
    if (st != TSL_SUCCESS && err) {
        *err = rec;
        snprintf(err->backend, sizeof err->backend, "dev0");
    }
    d->n_run++;
out:
    free(m.from);
    free(m.to);
    free(nodes);
    return st;
}

static tsl_status dev_graph_compute_async(tsl_backend *b, tsl_graph *g, tsl_error *err) {
    dev_backend *d = (dev_backend *)b;
    tsl_error_clear(&d->last_err);
    d->last = dev_compute(d, g, &d->last_err);
    if (err) *err = d->last_err;
    return d->last;
}

static tsl_status dev_synchronize(tsl_backend *b, tsl_error *err) {
    dev_backend *d = (dev_backend *)b;
    tsl_status s = d->last;
    if (err) *err = d->last_err;
    d->last = TSL_SUCCESS;
    return s;
}

static void dev_free(tsl_backend *b) {
    dev_backend *d = (dev_backend *)b;
    tsl_backend_free(d->cpu);
    backend_common_fini(&d->base);
    free(d);
}

static const tsl_backend_vtable dev_vtable = {
    .name = dev_name,
    .device = dev_device,
    .free = dev_free,
    .buffer_alloc = dev_buffer_alloc,
    .buffer_free = dev_buffer_free,
    .buffer_alignment = dev_buffer_alignment,
    .buffer_is_host = false,
    .buffer_set = dev_buffer_set,
    .buffer_get = dev_buffer_get,
    .supports_op = dev_supports_op,
    .graph_compute_async = dev_graph_compute_async,
    .synchronize = dev_synchronize,
};

static tsl_backend *dev_new(uint64_t refuse) {
    dev_backend *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    if (backend_common_init(&d->base, &dev_vtable, NULL) != TSL_SUCCESS) {
        free(d);
        return NULL;
    }
    d->cpu = tsl_backend_cpu_new(2, NULL);
    d->refuse = refuse;
    d->next = (uintptr_t)1 << 44;
    if (!d->cpu) {
        backend_common_fini(&d->base);
        free(d);
        return NULL;
    }
    return &d->base;
}

#define OPBIT(op) (1ull << (op))

/* ---- a small llama-shaped block --------------------------------------------- */

enum { E = 64, NH = 4, HD = 16, T = 8, FF = 96, V = 40 };

typedef struct model {
    tsl_context *wctx, *ictx, *gctx;
    tsl_buffer *wbuf;
    tsl_tensor *tok_embd, *wq, *wk, *wv, *wo, *gate, *up, *down;
    tsl_tensor *norm, *tokens, *pos, *mask;
    tsl_tensor *q, *q3, *qr, *kq, *sm, *out;
    tsl_graph *g;
} model;

static tsl_tensor *named(tsl_tensor *t, const char *name) { return tsl_tensor_set_name(t, name); }

static void fill_weight(tsl_tensor *w, unsigned long long seed) {
    int64_t n = tsl_nelements(w);
    float *f = malloc((size_t)n * sizeof *f);
    void *q = malloc(tsl_nbytes(w));
    float r = 1.0f / sqrtf((float)w->ne[0]);
    for (int64_t i = 0; i < n; i++) f[i] = test_rand_f(&seed, -r, r);
    CHECK(tsl_quantize(w->type, f, q, n) == tsl_nbytes(w));
    CHECK(tsl_tensor_set(w, q, 0, tsl_nbytes(w), NULL) == TSL_SUCCESS);
    free(f);
    free(q);
}

/* Weights in a buffer of wbe (NULL: host arena); inputs and the norm weight
 * in a host arena; the graph in a no_alloc context. */
static bool model_init(model *m, tsl_backend *wbe) {
    memset(m, 0, sizeof *m);
    m->wctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = wbe != NULL});
    m->ictx = tsl_ctx_new((tsl_ctx_params){.mem_size = 64u << 10, .no_alloc = false});
    m->gctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    if (!m->wctx || !m->ictx || !m->gctx) return false;
    tsl_context *w = m->wctx;
    m->tok_embd = named(tsl_new_tensor_2d(w, TSL_TYPE_F32, E, V), "token_embd.weight");
    m->wq = named(tsl_new_tensor_2d(w, TSL_TYPE_Q8_0, E, E), "attn_q.weight");
    m->wk = named(tsl_new_tensor_2d(w, TSL_TYPE_F16, E, E), "attn_k.weight");
    m->wv = named(tsl_new_tensor_2d(w, TSL_TYPE_F32, E, E), "attn_v.weight");
    m->wo = named(tsl_new_tensor_2d(w, TSL_TYPE_Q8_0, E, E), "attn_output.weight");
    m->gate = named(tsl_new_tensor_2d(w, TSL_TYPE_F16, E, FF), "ffn_gate.weight");
    m->up = named(tsl_new_tensor_2d(w, TSL_TYPE_Q8_0, E, FF), "ffn_up.weight");
    m->down = named(tsl_new_tensor_2d(w, TSL_TYPE_F32, FF, E), "ffn_down.weight");
    if (tsl_ctx_error(w)) return false;
    if (wbe) {
        m->wbuf = tsl_buffer_alloc_ctx(wbe, w, NULL);
        if (!m->wbuf) return false;
    }
    unsigned long long seed = 42;
    for (tsl_tensor *t = tsl_ctx_first_tensor(w); t; t = tsl_ctx_next_tensor(w, t)) fill_weight(t, seed++);

    tsl_context *ic = m->ictx;
    m->norm = named(tsl_new_tensor_1d(ic, TSL_TYPE_F32, E), "attn_norm.weight");
    m->tokens = named(tsl_new_tensor_1d(ic, TSL_TYPE_I32, T), "tokens");
    m->pos = named(tsl_new_tensor_1d(ic, TSL_TYPE_I32, T), "pos");
    m->mask = named(tsl_new_tensor_2d(ic, TSL_TYPE_F32, T, T), "kq_mask");
    if (tsl_ctx_error(ic)) return false;
    for (int i = 0; i < E; i++) tsl_set_f32_1d(m->norm, i, 1.0f + 0.01f * (float)(i % 7));
    for (int i = 0; i < T; i++) {
        ((int32_t *)m->tokens->data)[i] = (i * 7 + 3) % V;
        ((int32_t *)m->pos->data)[i] = i;
        for (int j = 0; j < T; j++) tsl_set_f32_nd(m->mask, j, i, 0, 0, j <= i ? 0.0f : -INFINITY);
    }

    tsl_context *c = m->gctx;
    tsl_rope_params rp = tsl_rope_default(HD);
    tsl_tensor *x = named(tsl_get_rows(c, m->tok_embd, m->tokens), "inp_embd");
    tsl_tensor *h = named(tsl_mul(c, named(tsl_rms_norm(c, x, 1e-5f), "attn_rms"), m->norm), "attn_normed");
    m->q = named(tsl_mul_mat(c, m->wq, h), "q");
    tsl_tensor *k = named(tsl_mul_mat(c, m->wk, h), "k");
    tsl_tensor *v = named(tsl_mul_mat(c, m->wv, h), "v");
    m->q3 = named(tsl_reshape_3d(c, m->q, HD, NH, T), "q3");
    m->qr = named(tsl_rope(c, m->q3, m->pos, NULL, &rp), "q_rope");
    tsl_tensor *kr = named(tsl_rope(c, named(tsl_reshape_3d(c, k, HD, NH, T), "k3"), m->pos, NULL, &rp), "k_rope");
    tsl_tensor *Q = named(tsl_permute(c, m->qr, 0, 2, 1, 3), "Q");
    tsl_tensor *K = named(tsl_permute(c, kr, 0, 2, 1, 3), "K");
    m->kq = named(tsl_mul_mat(c, K, Q), "kq");
    m->sm = named(tsl_soft_max(c, m->kq, m->mask, 1.0f / sqrtf((float)HD)), "kq_soft_max");
    tsl_tensor *vT = named(
        tsl_cont(c, named(tsl_permute(c, named(tsl_reshape_3d(c, v, HD, NH, T), "v3"), 1, 2, 0, 3), "vT_view")),
        "vT");
    tsl_tensor *kqv = named(tsl_mul_mat(c, vT, m->sm), "kqv");
    tsl_tensor *o = named(tsl_cont(c, named(tsl_permute(c, kqv, 0, 2, 1, 3), "kqv_perm")), "kqv_merged");
    o = named(tsl_reshape_2d(c, o, E, T), "kqv_2d");
    o = named(tsl_mul_mat(c, m->wo, o), "attn_out");
    tsl_tensor *f = named(tsl_add(c, o, x), "ffn_inp");
    tsl_tensor *fn = named(tsl_mul(c, named(tsl_rms_norm(c, f, 1e-5f), "ffn_rms"), m->norm), "ffn_normed");
    tsl_tensor *gt = named(tsl_mul_mat(c, m->gate, fn), "ffn_gate");
    tsl_tensor *u = named(tsl_mul_mat(c, m->up, fn), "ffn_up");
    tsl_tensor *sw = named(tsl_swiglu(c, gt, u), "ffn_swiglu");
    tsl_tensor *dn = named(tsl_mul_mat(c, m->down, sw), "ffn_down");
    m->out = named(tsl_add(c, dn, f), "out");
    if (!m->out) {
        fprintf(stderr, "graph: %s\n", tsl_ctx_error(c));
        return false;
    }
    m->g = tsl_graph_build(c, &m->out, 1);
    return m->g != NULL;
}

static void model_free(model *m) {
    tsl_buffer_free(m->wbuf);
    tsl_ctx_free(m->wctx);
    tsl_ctx_free(m->ictx);
    tsl_ctx_free(m->gctx);
}

static void print_err(const char *what, const tsl_error *e) {
    char line[700];
    tsl_error_format(e, line, sizeof line);
    fprintf(stderr, "  %s: %s\n", what, line);
}

static float *read_out(const model *m) {
    size_t n = tsl_nbytes(m->out);
    float *r = malloc(n);
    if (r && tsl_tensor_get(m->out, r, 0, n, NULL) != TSL_SUCCESS) {
        free(r);
        return NULL;
    }
    return r;
}

static const size_t OUT_BYTES = sizeof(float) * E * T;

/* The CPU alone, weights in host memory, through the graph allocator. */
static float *reference(void) {
    model m;
    float *r = NULL;
    tsl_backend *cpu = tsl_backend_cpu_new(2, NULL);
    tsl_gallocr *ga = cpu ? tsl_gallocr_new(cpu) : NULL;
    if (ga && model_init(&m, NULL)) {
        tsl_error err;
        if (tsl_gallocr_alloc_graph(ga, m.g, &err) == TSL_SUCCESS &&
            tsl_backend_graph_compute(cpu, m.g, &err) == TSL_SUCCESS)
            r = read_out(&m);
        else
            print_err("reference", &err);
    }
    model_free(&m);
    tsl_gallocr_free(ga);
    tsl_backend_free(cpu);
    return r;
}

static float *g_ref;

/* Split k of s holding node index i, or -1. */
static int split_of(const tsl_sched *s, int i) {
    for (int k = 0; k < tsl_sched_n_splits(s); k++) {
        int first, n;
        tsl_sched_split_backend(s, k, &first, &n);
        if (i >= first && i < first + n) return k;
    }
    return -1;
}

static tsl_backend *backend_of(const tsl_sched *s, const tsl_graph *g, const tsl_tensor *t) {
    return tsl_sched_split_backend(s, split_of(s, tsl_graph_node_index(g, t)), NULL, NULL);
}

/* The plan covers every node once, in order, and neighbouring splits differ. */
static void check_plan(const tsl_sched *s, const tsl_graph *g) {
    int next = 0;
    tsl_backend *prev = NULL;
    for (int k = 0; k < tsl_sched_n_splits(s); k++) {
        int first = -1, n = -1;
        tsl_backend *be = tsl_sched_split_backend(s, k, &first, &n);
        CHECK(be != NULL);
        CHECK(first == next && n > 0);
        CHECK(be != prev);
        next = first + n;
        prev = be;
    }
    CHECK(next == g->n_nodes);
    CHECK(tsl_sched_split_backend(s, tsl_sched_n_splits(s), NULL, NULL) == NULL);
    CHECK(tsl_sched_split_backend(s, -1, NULL, NULL) == NULL);
}

/* Every node's sources and view source, to check they come back unchanged. */
static void snapshot(const tsl_graph *g, tsl_tensor **out) {
    for (int i = 0; i < g->n_nodes; i++) {
        for (int j = 0; j < TSL_MAX_SRC; j++) out[i * (TSL_MAX_SRC + 1) + j] = g->nodes[i]->src[j];
        out[i * (TSL_MAX_SRC + 1) + TSL_MAX_SRC] = g->nodes[i]->view_src;
    }
}

/* ---- tests ------------------------------------------------------------------ */

/* dev0 lacks rope, soft_max and swiglu; weights live in dev0's memory and
 * the inputs in host memory: the graph bounces between the two, and the
 * result is the CPU's, bit for bit. */
static void test_device_split_matches_cpu(void) {
    tsl_backend *dev = dev_new(OPBIT(TSL_OP_ROPE) | OPBIT(TSL_OP_SOFT_MAX) | OPBIT(TSL_OP_SWIGLU));
    tsl_backend *cpu = tsl_backend_cpu_new(2, NULL);
    CHECK(dev && cpu && g_ref);
    model m;
    CHECK(model_init(&m, dev));
    tsl_backend *list[2] = {dev, cpu};
    tsl_error err;
    tsl_sched *s = tsl_sched_new(list, 2, (tsl_sched_params){0}, &err);
    CHECK(s != NULL);
    int nsrc = m.g->n_nodes * (TSL_MAX_SRC + 1);
    tsl_tensor **before = malloc((size_t)nsrc * sizeof *before), **after = malloc((size_t)nsrc * sizeof *after);
    snapshot(m.g, before);
    for (int round = 0; round < 2; round++) {
        tsl_status st = tsl_sched_compute(s, m.g, &err);
        CHECKF(st == TSL_SUCCESS, "round %d: %s", round, err.message);
        if (st != TSL_SUCCESS) print_err("sched", &err);
        float *r = read_out(&m);
        CHECK(r && g_ref && memcmp(r, g_ref, OUT_BYTES) == 0);
        free(r);
        check_plan(s, m.g);
        CHECK(tsl_sched_n_splits(s) >= 5);
        CHECK(tsl_sched_n_copies(s) > 0);
        /* refused ops on the CPU, weight-bound ops and views of device results on dev0 */
        CHECK(backend_of(s, m.g, m.qr) == cpu);
        CHECK(backend_of(s, m.g, m.sm) == cpu);
        CHECK(backend_of(s, m.g, m.q) == dev);
        CHECK(backend_of(s, m.g, m.q3) == dev);
        CHECK(backend_of(s, m.g, m.out) == dev);
    }
    snapshot(m.g, after);
    CHECK(memcmp(before, after, (size_t)nsrc * sizeof *before) == 0);
    free(before);
    free(after);
    tsl_sched_free(s);
    model_free(&m);
    tsl_backend_free(cpu);
    tsl_backend_free(dev);
}

/* A backend later in the list still gets the ops whose weights it holds. */
static void test_weights_pull_ops(void) {
    tsl_backend *dev = dev_new(0);
    tsl_backend *cpu = tsl_backend_cpu_new(2, NULL);
    model m;
    CHECK(model_init(&m, dev));
    tsl_backend *list[2] = {cpu, dev};
    tsl_error err;
    tsl_sched *s = tsl_sched_new(list, 2, (tsl_sched_params){0}, &err);
    tsl_status st = tsl_sched_compute(s, m.g, &err);
    CHECK(st == TSL_SUCCESS);
    if (st != TSL_SUCCESS) print_err("sched", &err);
    float *r = read_out(&m);
    CHECK(r && g_ref && memcmp(r, g_ref, OUT_BYTES) == 0);
    free(r);
    check_plan(s, m.g);
    CHECK(backend_of(s, m.g, m.q) == dev);
    CHECK(backend_of(s, m.g, m.sm) == cpu); /* no weight: the first backend */
    CHECK(backend_of(s, m.g, m.kq) == cpu);
    tsl_sched_free(s);
    model_free(&m);
    tsl_backend_free(cpu);
    tsl_backend_free(dev);
}

/* Host-memory backends read each other's memory: no copies. */
static void test_host_backends_need_no_copies(void) {
    tsl_backend *a = tsl_backend_cpu_new(2, NULL), *b = tsl_backend_cpu_new(1, NULL);
    model m;
    CHECK(model_init(&m, b)); /* weights in b's buffer pull the matmuls there */
    tsl_backend *list[2] = {a, b};
    tsl_error err;
    tsl_sched *s = tsl_sched_new(list, 2, (tsl_sched_params){0}, &err);
    tsl_status st = tsl_sched_compute(s, m.g, &err);
    CHECK(st == TSL_SUCCESS);
    float *r = read_out(&m);
    CHECK(r && g_ref && memcmp(r, g_ref, OUT_BYTES) == 0);
    free(r);
    check_plan(s, m.g);
    CHECK(tsl_sched_n_splits(s) > 2);
    CHECK(tsl_sched_n_copies(s) == 0);
    CHECK(backend_of(s, m.g, m.q) == b);
    CHECK(backend_of(s, m.g, m.sm) == a);
    tsl_sched_free(s);

    /* one backend: one split */
    s = tsl_sched_new(list, 1, (tsl_sched_params){0}, &err);
    CHECK(tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS);
    CHECK(tsl_sched_n_splits(s) == 1 && tsl_sched_n_copies(s) == 0);
    r = read_out(&m);
    CHECK(r && g_ref && memcmp(r, g_ref, OUT_BYTES) == 0);
    free(r);
    tsl_sched_free(s);
    model_free(&m);
    tsl_backend_free(a);
    tsl_backend_free(b);
}

/* A failure names the split, its backend and the node of the caller's graph;
 * the next compute is clean. */
static void test_failure_names_split(void) {
    tsl_backend *dev = dev_new(OPBIT(TSL_OP_ROPE) | OPBIT(TSL_OP_SOFT_MAX) | OPBIT(TSL_OP_SWIGLU));
    tsl_backend *cpu = tsl_backend_cpu_new(2, NULL);
    model m;
    CHECK(model_init(&m, dev));
    tsl_backend *list[2] = {dev, cpu};
    tsl_error err;
    tsl_sched *s = tsl_sched_new(list, 2, (tsl_sched_params){0}, &err);

    /* on the device: a source of a later split */
    CHECK(tsl_backend_inject(dev, "nobuf@tensor=attn_out", NULL) == TSL_SUCCESS);
    tsl_status st = tsl_sched_compute(s, m.g, &err);
    CHECK(st == TSL_FAILED);
    int at = tsl_graph_node_index(m.g, tsl_ctx_get_tensor(m.gctx, "attn_out"));
    CHECK(at > 0 && err.node == at);
    CHECK(err.split >= 0 && err.split == split_of(s, at));
    CHECK(tsl_sched_split_backend(s, err.split, NULL, NULL) == dev);
    CHECK(strcmp(err.backend, "dev0") == 0);
    CHECK(strcmp(err.tensor, "attn_out") == 0);
    char line[700];
    tsl_error_format(&err, line, sizeof line);
    CHECK_STR_CONTAINS(line, "dev0");
    CHECK_STR_CONTAINS(line, "split");
    CHECK_STR_CONTAINS(line, "attn_out");
    tsl_backend_inject_clear(dev);

    /* on the CPU */
    CHECK(tsl_backend_inject(cpu, "nobuf@tensor=kq_soft_max", NULL) == TSL_SUCCESS);
    st = tsl_sched_compute(s, m.g, &err);
    CHECK(st == TSL_FAILED);
    CHECK(err.node == tsl_graph_node_index(m.g, m.sm));
    CHECK(err.split == split_of(s, err.node));
    CHECK(tsl_sched_split_backend(s, err.split, NULL, NULL) == cpu);
    CHECK(strcmp(err.op, "SOFT_MAX") == 0);
    tsl_backend_inject_clear(cpu);

    st = tsl_sched_compute(s, m.g, &err);
    CHECK(st == TSL_SUCCESS);
    float *r = read_out(&m);
    CHECK(r && g_ref && memcmp(r, g_ref, OUT_BYTES) == 0);
    free(r);
    tsl_sched_free(s);
    model_free(&m);
    tsl_backend_free(cpu);
    tsl_backend_free(dev);
}

/* RETRY: reported with its split, or run on the fallback when asked. */
static void test_retry(void) {
    tsl_backend *dev = dev_new(OPBIT(TSL_OP_ROPE) | OPBIT(TSL_OP_SOFT_MAX));
    tsl_backend *cpu = tsl_backend_cpu_new(2, NULL);
    model m;
    CHECK(model_init(&m, dev));
    tsl_backend *list[2] = {dev, cpu};
    tsl_error err;

    tsl_sched *s = tsl_sched_new(list, 2, (tsl_sched_params){.retry_on_fallback = false}, &err);
    uint64_t base = atomic_load(&dev->n_computes);
    char rule[64];
    snprintf(rule, sizeof rule, "retry@compute=%llu", (unsigned long long)base + 2);
    CHECK(tsl_backend_inject(dev, rule, NULL) == TSL_SUCCESS);
    tsl_status st = tsl_sched_compute(s, m.g, &err);
    CHECK(st == TSL_RETRY);
    /* the second device split */
    int seen = 0, want = -1;
    for (int k = 0; k < tsl_sched_n_splits(s) && want < 0; k++)
        if (tsl_sched_split_backend(s, k, NULL, NULL) == dev && ++seen == 2) want = k;
    CHECK(want > 0 && err.split == want);
    CHECK(strcmp(err.backend, "dev0") == 0);
    st = tsl_sched_compute(s, m.g, &err);
    CHECK(st == TSL_SUCCESS);
    float *r = read_out(&m);
    CHECK(r && g_ref && memcmp(r, g_ref, OUT_BYTES) == 0);
    free(r);
    tsl_backend_inject_clear(dev);
    tsl_sched_free(s);

    /* every device split refused: each runs on the CPU through copies */
    s = tsl_sched_new(list, 2, (tsl_sched_params){.retry_on_fallback = true}, &err);
    CHECK(tsl_backend_inject(dev, "retry", NULL) == TSL_SUCCESS);
    int ran = ((dev_backend *)dev)->n_run;
    st = tsl_sched_compute(s, m.g, &err);
    CHECK(st == TSL_SUCCESS);
    if (st != TSL_SUCCESS) print_err("fallback", &err);
    CHECK(((dev_backend *)dev)->n_run == ran); /* the device ran nothing */
    CHECK(tsl_backend_injected(dev, TSL_FAULT_RETRY) >= 3);
    r = read_out(&m);
    CHECK(r && g_ref && memcmp(r, g_ref, OUT_BYTES) == 0);
    free(r);
    tsl_backend_inject_clear(dev);
    tsl_sched_free(s);
    model_free(&m);

    /* a host backend refused: the same split runs on the fallback CPU */
    tsl_backend *a = tsl_backend_cpu_new(1, NULL);
    CHECK(model_init(&m, NULL));
    list[0] = a;
    s = tsl_sched_new(list, 2, (tsl_sched_params){.retry_on_fallback = true}, &err);
    CHECK(tsl_backend_inject(a, "retry", NULL) == TSL_SUCCESS);
    st = tsl_sched_compute(s, m.g, &err);
    CHECK(st == TSL_SUCCESS);
    CHECK(tsl_backend_injected(a, TSL_FAULT_RETRY) == 1);
    r = read_out(&m);
    CHECK(r && g_ref && memcmp(r, g_ref, OUT_BYTES) == 0);
    free(r);
    tsl_sched_free(s);
    model_free(&m);
    tsl_backend_free(a);
    tsl_backend_free(cpu);
    tsl_backend_free(dev);
}

/* A kernel that fails on backend A: the first compute fails naming it; the
 * failure is cached, supports_op turns false, and the next compute runs that
 * op on the CPU fallback with the right result. */
static void test_kernel_failure_moves_op(void) {
    tsl_backend *a = tsl_backend_cpu_new(2, NULL), *cpu = tsl_backend_cpu_new(2, NULL);
    model m;
    CHECK(model_init(&m, NULL));
    tsl_backend *list[2] = {a, cpu};
    tsl_error err;
    tsl_sched *s = tsl_sched_new(list, 2, (tsl_sched_params){0}, &err);
    CHECK(tsl_backend_inject(a, "kernel@op=SOFT_MAX", NULL) == TSL_SUCCESS);
    tsl_status st = tsl_sched_compute(s, m.g, &err);
    CHECK(st == TSL_FAILED);
    int sm = tsl_graph_node_index(m.g, m.sm);
    CHECK(err.node == sm);
    CHECK(strcmp(err.op, "SOFT_MAX") == 0);
    CHECK(err.kernel[0] != 0);
    CHECK(err.split >= 0 && tsl_sched_split_backend(s, err.split, NULL, NULL) == a);
    CHECK(!tsl_backend_supports_op(a, m.sm));
    CHECK(tsl_backend_supports_op(cpu, m.sm));

    st = tsl_sched_compute(s, m.g, &err);
    CHECK(st == TSL_SUCCESS);
    if (st != TSL_SUCCESS) print_err("after the kernel failure", &err);
    CHECK(backend_of(s, m.g, m.sm) == cpu);
    CHECK(backend_of(s, m.g, m.kq) == a);
    CHECK(tsl_sched_n_splits(s) == 3);
    float *r = read_out(&m);
    CHECK(r && g_ref && memcmp(r, g_ref, OUT_BYTES) == 0);
    free(r);
    tsl_sched_free(s);
    model_free(&m);
    tsl_backend_free(cpu);
    tsl_backend_free(a);
}

/* A node its owner placed keeps its memory, and runs where that memory can
 * be used; results of an earlier compute in a buffer freed since (the
 * allocator grew for a bigger graph) are placed afresh, never followed. */
static void test_placed_nodes_and_stale_addresses(void) {
    tsl_backend *dev = dev_new(OPBIT(TSL_OP_ROPE) | OPBIT(TSL_OP_SOFT_MAX));
    tsl_backend *cpu = tsl_backend_cpu_new(2, NULL);
    model m;
    CHECK(model_init(&m, dev));
    tsl_backend *list[2] = {dev, cpu};
    tsl_error err;
    tsl_sched *s = tsl_sched_new(list, 2, (tsl_sched_params){0}, &err);

    /* the output in a host buffer of the caller's: dev0 could add, but
     * cannot write there, so the last node runs on the CPU */
    tsl_buffer *ob = tsl_buffer_alloc(cpu, tsl_nbytes(m.out), &err);
    CHECK(ob && tsl_buffer_place(ob, m.out, 0, &err) == TSL_SUCCESS);
    void *where = m.out->data;
    for (int round = 0; round < 2; round++) {
        tsl_status st = tsl_sched_compute(s, m.g, &err);
        CHECK(st == TSL_SUCCESS);
        if (st != TSL_SUCCESS) print_err("placed output", &err);
        CHECK(m.out->data == where && m.out->buffer == ob);
        CHECK(backend_of(s, m.g, m.out) == cpu);
        CHECK(memcmp(tsl_buffer_host_ptr(ob), g_ref, OUT_BYTES) == 0);
    }

    /* a graph sharing nodes with that one (graph_build takes every node a
     * result needs) computes them again in its own plan */
    float *q0 = malloc(tsl_nbytes(m.q));
    CHECK(q0 && tsl_tensor_get(m.q, q0, 0, tsl_nbytes(m.q), NULL) == TSL_SUCCESS);
    tsl_context *c2 = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    tsl_tensor *z = tsl_sqr(c2, m.q);
    tsl_graph *g2 = tsl_graph_build(c2, &z, 1);
    CHECK(g2 && g2->n_nodes > 3);
    CHECK(tsl_sched_compute(s, g2, &err) == TSL_SUCCESS);
    float zz[4];
    CHECK(tsl_tensor_get(z, zz, 0, sizeof zz, NULL) == TSL_SUCCESS);
    for (int i = 0; q0 && i < 4; i++) CHECK(zz[i] == q0[i] * q0[i]);
    free(q0);
    tsl_ctx_free(c2);

    /* a bigger graph makes the allocators grow (their old buffers are freed) */
    tsl_context *big = tsl_ctx_new((tsl_ctx_params){.mem_size = 8u << 20, .no_alloc = false});
    tsl_context *bg = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    tsl_tensor *x = tsl_new_tensor_2d(big, TSL_TYPE_F32, 4096, 64);
    for (int64_t i = 0; i < tsl_nelements(x); i++) tsl_set_f32_1d(x, i, (float)(i % 13) - 6.0f);
    tsl_tensor *y = tsl_scale(bg, tsl_sqr(bg, x), 0.5f);
    tsl_graph *gb = tsl_graph_build(bg, &y, 1);
    CHECK(tsl_sched_compute(s, gb, &err) == TSL_SUCCESS);
    float v = 0;
    CHECK(tsl_tensor_get(y, &v, 5 * sizeof(float), sizeof v, NULL) == TSL_SUCCESS && v == 0.5f * 1.0f);

    /* the first graph again: its nodes point into freed buffers */
    CHECK(tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS);
    CHECK(m.out->data == where);
    CHECK(memcmp(tsl_buffer_host_ptr(ob), g_ref, OUT_BYTES) == 0);
    float *q = malloc(tsl_nbytes(m.q));
    CHECK(q && tsl_tensor_get(m.q, q, 0, tsl_nbytes(m.q), NULL) == TSL_SUCCESS);
    free(q);

    tsl_sched_free(s);
    tsl_ctx_free(bg);
    tsl_ctx_free(big);
    tsl_buffer_free(ob);
    model_free(&m);
    tsl_backend_free(cpu);
    tsl_backend_free(dev);
}

/* Forget the activations' addresses, as a caller keeping a graph for its
 * next compute does (they are placed again). */
static void clear_activations(const tsl_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) {
        tsl_tensor *t = g->nodes[i];
        const tsl_tensor *root = t->view_src ? t->view_src : t;
        if (root->op == TSL_OP_NONE) continue;
        t->data = NULL;
        t->buffer = NULL;
    }
}

/* The plan of a compute that succeeded is kept: the same graph, unchanged,
 * runs it again (with its copies, so new inputs are seen); a changed node,
 * another graph, a failed compute or a kernel failure found elsewhere on a
 * backend plans afresh, and every result is the CPU's. */
static void test_plan_kept(void) {
    tsl_backend *dev = dev_new(OPBIT(TSL_OP_ROPE) | OPBIT(TSL_OP_SOFT_MAX) | OPBIT(TSL_OP_SWIGLU));
    tsl_backend *cpu = tsl_backend_cpu_new(2, NULL);
    model m;
    CHECK(dev && cpu && g_ref && model_init(&m, dev));
    tsl_backend *list[2] = {dev, cpu};
    tsl_error err;
    tsl_sched *s = tsl_sched_new(list, 2, (tsl_sched_params){0}, &err);
    CHECK(s != NULL);
    for (int round = 0; round < 3; round++) {
        CHECKF(tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS, "round %d: %s", round, err.message);
        CHECK(tsl_sched_n_reused(s) == (uint64_t)round);
        CHECK(tsl_sched_n_splits(s) >= 5 && tsl_sched_n_copies(s) > 0);
        check_plan(s, m.g);
        CHECK(backend_of(s, m.g, m.sm) == cpu && backend_of(s, m.g, m.q) == dev);
        float *r = read_out(&m);
        CHECK(r && memcmp(r, g_ref, OUT_BYTES) == 0);
        free(r);
    }

    /* new inputs through the kept plan: seen (its copies are made again) */
    int32_t *tok = m.tokens->data;
    const int32_t t0 = tok[0];
    tok[0] = (t0 + 5) % V;
    CHECK(tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS && tsl_sched_n_reused(s) == 3);
    float *r = read_out(&m);
    CHECK(r && memcmp(r, g_ref, OUT_BYTES) != 0);
    free(r);
    tok[0] = t0;
    clear_activations(m.g); /* placed again by the kept plan */
    CHECK(tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS && tsl_sched_n_reused(s) == 4);
    r = read_out(&m);
    CHECK(r && memcmp(r, g_ref, OUT_BYTES) == 0);
    free(r);

    /* a changed node: planned afresh, and its change computed */
    tsl_tensor *normed = NULL;
    for (int i = 0; i < m.g->n_nodes; i++)
        if (strcmp(m.g->nodes[i]->name, "attn_normed") == 0) normed = m.g->nodes[i];
    CHECK(normed && normed->src[1] == m.norm);
    tsl_tensor *norm2 = tsl_new_tensor_1d(m.ictx, TSL_TYPE_F32, E);
    CHECK(norm2 != NULL);
    for (int i = 0; norm2 && i < E; i++) tsl_set_f32_1d(norm2, i, 0.5f);
    if (normed && norm2) {
        normed->src[1] = norm2;
        CHECK(tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS && tsl_sched_n_reused(s) == 4);
        r = read_out(&m);
        CHECK(r && memcmp(r, g_ref, OUT_BYTES) != 0);
        free(r);
        normed->src[1] = m.norm;
        CHECK(tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS && tsl_sched_n_reused(s) == 4);
        r = read_out(&m);
        CHECK(r && memcmp(r, g_ref, OUT_BYTES) == 0);
        free(r);
        /* a leaf changed in place (not a node): planned afresh too */
        norm2->data = m.norm->data;
        tsl_tensor keep = *m.norm;
        m.norm->ne[0] = E; /* unchanged metadata: reused */
        CHECK(tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS && tsl_sched_n_reused(s) == 5);
        m.norm->flags ^= TSL_FLAG_INPUT;
        CHECK(tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS && tsl_sched_n_reused(s) == 5);
        *m.norm = keep;
        CHECK(tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS && tsl_sched_n_reused(s) == 5);
        CHECK(tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS && tsl_sched_n_reused(s) == 6);
    }

    /* a failed compute: the next is planned afresh */
    CHECK(tsl_backend_inject(dev, "retry@compute>0", NULL) == TSL_SUCCESS);
    CHECK(tsl_sched_compute(s, m.g, &err) == TSL_RETRY && tsl_sched_n_reused(s) == 7); /* ran the kept plan */
    tsl_backend_inject_clear(dev);
    CHECK(tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS && tsl_sched_n_reused(s) == 7);
    CHECK(tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS && tsl_sched_n_reused(s) == 8);
    /* a node changed past its address (its name), or its address half
     * cleared (its data, not its buffer): planned afresh; its activations
     * cleared and all else the same: reused */
    if (normed) {
        char name[TSL_MAX_NAME];
        memcpy(name, normed->name, sizeof name);
        tsl_tensor_set_name(normed, "attn_normed2");
        CHECK(tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS && tsl_sched_n_reused(s) == 8);
        tsl_tensor_set_name(normed, name);
        CHECK(tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS && tsl_sched_n_reused(s) == 8);
        normed->data = NULL;
        CHECK(tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS && tsl_sched_n_reused(s) == 8);
        clear_activations(m.g);
        CHECK(tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS && tsl_sched_n_reused(s) == 9);
        r = read_out(&m);
        CHECK(r && memcmp(r, g_ref, OUT_BYTES) == 0);
        free(r);
    }
    tsl_sched_free(s);

    /* a kernel failure cached on a backend by a compute of another graph:
     * the kept plan would send the op there; it is planned afresh and the
     * op runs on the fallback */
    tsl_backend *a = tsl_backend_cpu_new(2, NULL);
    tsl_backend *list2[2] = {a, cpu};
    s = tsl_sched_new(list2, 2, (tsl_sched_params){0}, &err);
    CHECK(s && tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS && tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS);
    CHECK(tsl_sched_n_reused(s) == 1 && backend_of(s, m.g, m.sm) == a);
    tsl_context *c2 = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = false});
    tsl_tensor *x = tsl_new_tensor_2d(c2, TSL_TYPE_F32, 8, 4);
    for (int i = 0; x && i < 32; i++) tsl_set_f32_1d(x, i, (float)i);
    tsl_tensor *mk = tsl_new_tensor_2d(c2, TSL_TYPE_F32, 8, 4); /* the same kernel as kq_soft_max's */
    for (int i = 0; mk && i < 32; i++) tsl_set_f32_1d(mk, i, 0.0f);
    tsl_tensor *y = tsl_soft_max(c2, x, mk, 1.0f);
    tsl_graph *g2 = tsl_graph_build(c2, &y, 1);
    CHECK(g2 && tsl_backend_inject(a, "kernel@op=SOFT_MAX", NULL) == TSL_SUCCESS);
    CHECK(tsl_backend_graph_compute(a, g2, &err) == TSL_FAILED && !tsl_backend_supports_op(a, m.sm));
    tsl_backend_inject_clear(a);
    tsl_status st = tsl_sched_compute(s, m.g, &err);
    CHECKF(st == TSL_SUCCESS, "after a kernel failure elsewhere: %s", err.message);
    CHECK(tsl_sched_n_reused(s) == 1 && backend_of(s, m.g, m.sm) == cpu);
    r = read_out(&m);
    CHECK(r && memcmp(r, g_ref, OUT_BYTES) == 0);
    free(r);
    /* recovery forgets the failure: planned afresh, the op back on a */
    CHECK(tsl_backend_recover(a, NULL) == TSL_SUCCESS);
    CHECK(tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS && tsl_sched_n_reused(s) == 1);
    CHECK(backend_of(s, m.g, m.sm) == a);
    CHECK(tsl_sched_compute(s, m.g, &err) == TSL_SUCCESS && tsl_sched_n_reused(s) == 2);
    tsl_ctx_free(c2);
    tsl_sched_free(s);
    model_free(&m);
    tsl_backend_free(a);
    tsl_backend_free(cpu);
    tsl_backend_free(dev);
}

static void test_bad_arguments(void) {
    tsl_error err;
    CHECK(tsl_sched_new(NULL, 1, (tsl_sched_params){0}, &err) == NULL && err.status == TSL_FAILED);
    tsl_backend *cpu = tsl_backend_cpu_new(1, NULL);
    tsl_backend *list[2] = {cpu, NULL};
    CHECK(tsl_sched_new(list, 0, (tsl_sched_params){0}, &err) == NULL && err.status == TSL_FAILED);
    CHECK(tsl_sched_new(list, 2, (tsl_sched_params){0}, &err) == NULL && err.status == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "backend 1");
    list[1] = cpu;
    CHECK(tsl_sched_new(list, 2, (tsl_sched_params){0}, &err) == NULL);
    CHECK_STR_CONTAINS(err.message, "twice");
    tsl_sched *s = tsl_sched_new(list, 1, (tsl_sched_params){0}, &err);
    CHECK(s != NULL);
    CHECK(tsl_sched_compute(s, NULL, &err) == TSL_FAILED && err.split == -1);
    CHECK(tsl_sched_compute(NULL, NULL, &err) == TSL_FAILED);
    CHECK(tsl_sched_n_splits(NULL) == 0 && tsl_sched_n_copies(NULL) == 0);
    tsl_tensor *nodes[1] = {NULL};
    tsl_graph bad = {.n_nodes = 1, .nodes = nodes, .capacity = 1};
    CHECK(tsl_sched_compute(s, &bad, &err) == TSL_FAILED && err.node == 0);
    /* an input with no data: reported by the planner, nothing runs */
    tsl_context *c = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 16, .no_alloc = true});
    tsl_tensor *x = named(tsl_new_tensor_1d(c, TSL_TYPE_F32, 16), "x_unplaced");
    tsl_tensor *y = tsl_sqr(c, x);
    tsl_graph *g = tsl_graph_build(c, &y, 1);
    CHECK(tsl_sched_compute(s, g, &err) == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "x_unplaced");
    tsl_sched_free(s);
    tsl_sched_free(NULL);
    tsl_ctx_free(c);
    tsl_backend_free(cpu);
}

int main(void) {
    g_ref = reference();
    CHECK(g_ref != NULL);
    RUN(test_device_split_matches_cpu);
    RUN(test_weights_pull_ops);
    RUN(test_host_backends_need_no_copies);
    RUN(test_failure_names_split);
    RUN(test_retry);
    RUN(test_kernel_failure_moves_op);
    RUN(test_placed_nodes_and_stale_addresses);
    RUN(test_plan_kept);
    RUN(test_bad_arguments);
    free(g_ref);
    return test_summary();
}
