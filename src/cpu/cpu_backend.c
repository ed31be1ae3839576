/*
 * cpu_backend.c - the CPU backend: host buffers, the resolve pass and the
 * compute loop over the thread pool.
 *
 * A compute has two phases, in the shape every backend follows (FAULTS.md
 * section 5):
 *
 *  1. Resolve, on the calling thread, before anything runs: every node and
 *     every source must have data (a view whose data was never set gets its
 *     address from its source now, see backend.c), every compute node must
 *     have a kernel, and the scratch the largest node needs must be had. The
 *     first problem fails the whole compute with a record naming the node,
 *     its op and the tensor at fault, and no kernel runs: outputs are left
 *     exactly as they were.
 *  2. Run: all threads walk the same list of compute nodes (views run
 *     nothing and are dropped from the list), each doing its share of a node
 *     and meeting at a barrier after it. Thread 0 polls the abort callback
 *     between nodes and publishes the answer before the barrier, so every
 *     thread stops after the same node; a kernel reports a data error
 *     (cpu_kernel_fail) the same way. The per-node cost is one indirect call
 *     and one barrier.
 *
 * Small nodes run on thread 0 alone. A barrier costs ~0.1 us when every
 * thread has a core, but several microseconds once the machine is shared
 * and a waiting thread has to be scheduled back in; for a node of a few
 * thousand elements that is more than the work. So consecutive nodes below
 * CPU_SERIAL_WORK run back to back on thread 0 (as with one thread), and the
 * others meet it at a single barrier after the run. This changes no result:
 * every kernel computes the same bytes with any thread count.
 *
 * The CPU computes synchronously: compute_async runs the graph and returns
 * its status, which synchronize returns once more (and then forgets), so a
 * caller using either call alone sees every failure. Nothing is latched.
 *
 * Fault injection (FAULTS.md section 10) hooks the same boundaries the real
 * faults cross, so an injected fault takes the real path: "nobuf" at each
 * data lookup of the resolve pass, "kernel" at each kernel lookup (kernel
 * names are cpu_<op>, e.g. cpu_mul_mat), "alloc" at host buffer and scratch
 * allocations, "abort" where the abort callback is polled (the site's node
 * is the node that would run next), and "retry" when a compute starts (a CPU
 * never refuses work by itself, but callers' retry paths need exercising).
 * The CPU has no device to lose, so "lost" rules never fire here. With no
 * rules, each site costs one relaxed load.
 */
#include <ctype.h>
#include <limits.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/sysinfo.h>
#endif

#include "backend/backend_impl.h"
#include "cpu/cpu.h"
#include "fault/fault.h"


#define CPU_ALIGN 64
#define CPU_MAX_THREADS 512
/* Nodes with less work than this (in FLOPs, or elements touched) run on
 * thread 0 alone: below it a barrier can cost more than the node. */
#define CPU_SERIAL_WORK 16384.0

typedef struct cpu_exec {
    tsl_tensor *node;
    cpu_kernel_fn fn;
    int index;   /* index in the graph's nodes */
    int run_end; /* for a small node: end (exclusive) of its run of small nodes, else 0 */
} cpu_exec;

typedef struct cpu_backend {
    struct tsl_backend base; /* first: the public handle points here */
    int n_threads;
    cpu_pool *pool;
    cpu_pool *solo; /* a pool of one (no threads): the barrier of thread 0 running alone */
    void *wdata; /* scratch shared by all threads, grown on demand */
    size_t wsize;
    cpu_exec *exec; /* compute nodes of the current graph */
    int exec_cap;
    _Atomic int busy;      /* a compute is running (one at a time per backend) */
    tsl_status last;       /* status of the last compute, for synchronize */
    tsl_error last_err;
    char model[64];
    char device[96];
} cpu_backend;

/* Shared by all threads of one compute. */
typedef struct cpu_run {
    const cpu_exec *exec;
    int n;
    cpu_pool *pool;
    cpu_pool *solo;
    void *wdata;
    size_t wsize;
    tsl_abort_fn abort_fn;
    void *abort_user;
    fault_plan *faults;  /* "abort" injection, polled with the callback */
    uint64_t compute;    /* this compute's number, for injection sites */
    _Atomic int fail;    /* a kernel reported a data error */
    _Atomic int abort;   /* thread 0 saw the callback say stop */
    _Atomic int stop_at; /* exec index after which every thread stops; INT_MAX: none */
    char fail_msg[256];
} cpu_run;

static const tsl_backend_vtable cpu_vtable;

void cpu_kernel_fail(const cpu_params *p, const char *fmt, ...) {
    int expect = 0;
    if (!atomic_compare_exchange_strong_explicit(p->fail, &expect, 1, memory_order_acq_rel, memory_order_relaxed))
        return;
    /* readers look only after the barrier that ends this node */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->fail_msg, 256, fmt, ap);
    va_end(ap);
}

/* Thread 0, between nodes: the callback, or an injected abort at the node
 * that would run next. */
static bool cpu_should_abort(cpu_run *r, int next) {
    if (r->abort_fn && r->abort_fn(r->abort_user)) return true;
    fault_site site = {.compute = r->compute, .node = r->exec[next].index, .tensor = r->exec[next].node};
    return fault_plan_fire(r->faults, TSL_FAULT_ABORT, &site);
}

/* Record that every thread stops after exec index i (first decision wins).
 *
 * Why stop_at carries a node index rather than being a flag: a thread that
 * leaves a barrier late may look at the shared state only after a faster
 * thread already ran the next node and flagged something there. A bare flag
 * would make the late thread stop one barrier early while the others wait
 * for it at the next one. Stopping is decided before the barrier that
 * closes node i (every thread is still at or before it then, so whatever it
 * sees was raised in node i or its run) and recorded as i; a later node's
 * decision can never look like an earlier one's. */
static void cpu_stop_at(cpu_run *r, int i) {
    int none = INT_MAX;
    atomic_compare_exchange_strong_explicit(&r->stop_at, &none, i, memory_order_relaxed, memory_order_relaxed);
}

/* After node i (thread 0 only for a small node's run): stop for a kernel
 * failure or an abort? Records the stop before the barrier that follows. */
static bool cpu_check_stop(cpu_run *r, int ith, int i) {
    bool stop = atomic_load_explicit(&r->fail, memory_order_relaxed) != 0;
    /* asked between nodes only: after the last one there is nothing to skip */
    if (ith == 0 && !stop && i + 1 < r->n && cpu_should_abort(r, i + 1)) {
        atomic_store_explicit(&r->abort, 1, memory_order_relaxed);
        stop = true;
    }
    if (stop) cpu_stop_at(r, i);
    return stop;
}

static void cpu_run_job(int ith, int nth, void *arg) {
    cpu_run *r = arg;
    cpu_params p = {
        .ith = ith,
        .nth = nth,
        .wdata = r->wdata,
        .wsize = r->wsize,
        .pool = r->pool,
        .fail = &r->fail,
        .fail_msg = r->fail_msg,
    };
    cpu_params solo = p; /* thread 0 running a small node by itself */
    solo.nth = 1;
    solo.pool = r->solo;
    for (int i = 0; i < r->n;) {
        int last = i; /* the node the next barrier closes */
        if (r->exec[i].run_end) {
            last = r->exec[i].run_end - 1;
            if (ith == 0)
                for (int k = i; k <= last; k++) {
                    r->exec[k].fn(&solo, r->exec[k].node);
                    if (cpu_check_stop(r, ith, k)) break;
                }
        } else {
            r->exec[i].fn(&p, r->exec[i].node);
            cpu_check_stop(r, ith, i);
        }
        cpu_pool_barrier(r->pool);
        /* the barrier orders every store made before it before this load */
        if (atomic_load_explicit(&r->stop_at, memory_order_relaxed) <= last) return;
        i = last + 1;
    }
}

/* ---- records ---------------------------------------------------------- */

static void cpu_kernel_name(const tsl_tensor *node, char *buf, size_t n) {
    int w = snprintf(buf, n, "cpu_%s", tsl_op_name(node->op));
    for (int i = 4; i < w && (size_t)i < n; i++) buf[i] = (char)tolower((unsigned char)buf[i]);
}

static const char *cpu_label(const tsl_tensor *t) { return t->name[0] ? t->name : "(unnamed)"; }

/* FAILED at node i, naming `bad` (the node itself or one of its sources). */
static tsl_status cpu_fail_node(cpu_backend *be, tsl_error *err, int i, const tsl_tensor *node,
                                const tsl_tensor *bad, const char *msg) {
    error_set(err, TSL_FAILED, "cpu", be->device, i, node, NULL, "%s", msg);
    if (err && bad && bad != node) snprintf(err->tensor, sizeof err->tensor, "%s", bad->name);
    return TSL_FAILED;
}

/* Memory the CPU can read: arena memory, or a host buffer of any backend. */
static bool cpu_host_readable(const tsl_tensor *t) {
    return !t->buffer || t->buffer->be->vt->buffer_is_host;
}

/* ---- host memory ------------------------------------------------------- */

/* 64-byte aligned host memory, or NULL. A request larger than the machine's
 * RAM and swap together is refused here instead of being left to overcommit:
 * it would "succeed" and then get the process killed when touched, which is
 * exactly the failure mode this library exists to avoid. */
static void *cpu_host_alloc(cpu_backend *be, size_t size) {
    fault_site site = {.compute = atomic_load_explicit(&be->base.n_computes, memory_order_relaxed),
                       .node = -1,
                       .bytes = size};
    if (fault_plan_fire(be->base.faults, TSL_FAULT_ALLOC, &site)) return NULL;
    size_t sz = size < CPU_ALIGN ? CPU_ALIGN : (size + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    if (sz < size || size > (size_t)PTRDIFF_MAX) return NULL;
#if defined(__linux__)
    struct sysinfo si;
    if (sysinfo(&si) == 0) {
        unsigned long long unit = si.mem_unit ? si.mem_unit : 1;
        unsigned long long total = ((unsigned long long)si.totalram + si.totalswap) * unit;
        if (total > 0 && (unsigned long long)sz > total) return NULL;
    }
#endif
    return aligned_alloc(CPU_ALIGN, sz);
}

/* ---- compute ---------------------------------------------------------- */

/* Work of a node for the small-node decision: its FLOPs, or the elements it
 * reads and writes when that is more (copies, gathers). */
static double cpu_node_work(const tsl_tensor *node) {
    double w = core_node_flops(node), e = (double)tsl_nelements(node);
    for (int j = 0; j < TSL_MAX_SRC; j++)
        if (node->src[j]) e += (double)tsl_nelements(node->src[j]);
    return w > e ? w : e;
}

/* The data lookup of the resolve pass: a view gets its address now; an
 * injected "nobuf" makes the tensor look unplaced. */
static bool cpu_lookup(cpu_backend *be, uint64_t compute, int i, tsl_tensor *t) {
    fault_site site = {.compute = compute, .node = i, .tensor = t};
    if (fault_plan_fire(be->base.faults, TSL_FAULT_NOBUF, &site)) return false;
    return backend_tensor_resolve(t);
}

static tsl_status cpu_resolve(cpu_backend *be, tsl_graph *g, int *n_exec, size_t *wsize, tsl_error *err) {
    char msg[256], types[96], kname[64];
    int nth = be->n_threads, ne = 0;
    size_t ws = 0;
    uint64_t compute = atomic_load_explicit(&be->base.n_computes, memory_order_relaxed);
    bool inject = !fault_plan_empty(be->base.faults);
    for (int i = 0; i < g->n_nodes; i++) {
        tsl_tensor *node = g->nodes[i];
        if (!node) {
            error_set(err, TSL_FAILED, "cpu", be->device, i, NULL, NULL, "graph node %d is NULL", i);
            return TSL_FAILED;
        }
        for (int j = 0; j < TSL_MAX_SRC; j++) {
            tsl_tensor *src = node->src[j];
            if (!src) continue;
            if (!cpu_lookup(be, compute, i, src)) {
                snprintf(msg, sizeof msg,
                         "input %d '%s' of '%s' has no data (not allocated: place it in a buffer or run the "
                         "graph allocator); nothing was computed",
                         j, cpu_label(src), cpu_label(node));
                return cpu_fail_node(be, err, i, node, src, msg);
            }
            if (!cpu_host_readable(src)) {
                snprintf(msg, sizeof msg, "input %d '%s' of '%s' is in a %s buffer the CPU cannot read", j,
                         cpu_label(src), cpu_label(node), tsl_backend_name(src->buffer->be));
                return cpu_fail_node(be, err, i, node, src, msg);
            }
        }
        if (!cpu_lookup(be, compute, i, node)) {
            snprintf(msg, sizeof msg,
                     "'%s' has no data (not allocated: place it in a buffer or run the graph allocator); "
                     "nothing was computed",
                     cpu_label(node));
            return cpu_fail_node(be, err, i, node, node, msg);
        }
        if (!cpu_host_readable(node)) {
            snprintf(msg, sizeof msg, "'%s' is in a %s buffer the CPU cannot write", cpu_label(node),
                     tsl_backend_name(node->buffer->be));
            return cpu_fail_node(be, err, i, node, node, msg);
        }
        if (tsl_op_is_view(node->op) || node->op == TSL_OP_NONE) continue;
        kname[0] = 0;
        if (inject) { /* the name costs a formatted print: only for drills and failures */
            cpu_kernel_name(node, kname, sizeof kname);
            fault_site site = {.compute = compute, .node = i, .tensor = node, .kernel = kname};
            if (fault_plan_fire(be->base.faults, TSL_FAULT_KERNEL, &site)) {
                snprintf(msg, sizeof msg, "kernel could not be had (injected fault)");
                cpu_fail_node(be, err, i, node, node, msg);
                if (err) snprintf(err->kernel, sizeof err->kernel, "%s", kname);
                return TSL_FAILED;
            }
        }
        cpu_kernel_fn fn = cpu_kernel_for(node);
        if (!fn) {
            size_t k = (size_t)snprintf(types, sizeof types, "%s", tsl_type_name(node->type));
            for (int j = 0; j < TSL_MAX_SRC && node->src[j] && k < sizeof types; j++)
                k += (size_t)snprintf(types + k, sizeof types - k, "%s%s", j ? ", " : " from ",
                                      tsl_type_name(node->src[j]->type));
            snprintf(msg, sizeof msg, "no CPU kernel for %s with these types or layout (%s)",
                     tsl_op_name(node->op), types);
            cpu_fail_node(be, err, i, node, node, msg);
            if (err) cpu_kernel_name(node, err->kernel, sizeof err->kernel);
            return TSL_FAILED;
        }
        be->exec[ne].node = node;
        be->exec[ne].fn = fn;
        be->exec[ne].index = i;
        be->exec[ne].run_end = 0;
        size_t w = cpu_op_wsize(node, nth);
        if (nth > 1 && cpu_node_work(node) < CPU_SERIAL_WORK) {
            be->exec[ne].run_end = -1; /* small: linked into runs below */
            size_t w1 = cpu_op_wsize(node, 1);
            if (w1 > w) w = w1;
        }
        ne++;
        if (w > ws) ws = w;
    }
    /* each small node learns where its run of small nodes ends */
    for (int k = ne - 1, end = 0; k >= 0; k--) {
        if (be->exec[k].run_end == 0) {
            end = 0;
            continue;
        }
        if (end == 0) end = k + 1;
        be->exec[k].run_end = end;
    }
    *n_exec = ne;
    *wsize = ws;
    return TSL_SUCCESS;
}

static tsl_status cpu_compute(cpu_backend *be, tsl_graph *g, tsl_error *err) {
    uint64_t compute = atomic_load_explicit(&be->base.n_computes, memory_order_relaxed);
    fault_site site = {.compute = compute, .node = -1};
    if (fault_plan_fire(be->base.faults, TSL_FAULT_RETRY, &site))
        return error_set(err, TSL_RETRY, "cpu", be->device, -1, NULL, NULL,
                         "the work was refused (injected fault); nothing was computed");
    if (g->n_nodes > be->exec_cap) {
        int cap = g->n_nodes < 64 ? 64 : g->n_nodes;
        cpu_exec *ex = realloc(be->exec, (size_t)cap * sizeof *ex);
        if (!ex)
            return error_set(err, TSL_ALLOC_FAILED, "cpu", be->device, -1, NULL, NULL,
                             "could not allocate the node list for %d nodes", g->n_nodes);
        be->exec = ex;
        be->exec_cap = cap;
    }
    int n = 0;
    size_t ws = 0;
    tsl_status s = cpu_resolve(be, g, &n, &ws, err);
    if (s != TSL_SUCCESS) return s;
    if (ws > be->wsize) {
        void *w = cpu_host_alloc(be, ws);
        if (!w)
            return error_set(err, TSL_ALLOC_FAILED, "cpu", be->device, -1, NULL, NULL,
                             "could not allocate %zu bytes of scratch for the graph; nothing was computed", ws);
        free(be->wdata);
        be->wdata = w;
        be->wsize = ws;
    }
    if (n == 0) return TSL_SUCCESS;

    cpu_run r;
    memset(&r, 0, sizeof r);
    r.exec = be->exec;
    r.n = n;
    r.pool = be->pool;
    r.solo = be->solo;
    r.wdata = be->wdata;
    r.wsize = be->wsize;
    r.abort_fn = be->base.abort_fn;
    r.abort_user = be->base.abort_user;
    r.faults = be->base.faults;
    r.compute = compute;
    atomic_init(&r.fail, 0);
    atomic_init(&r.abort, 0);
    atomic_init(&r.stop_at, INT_MAX);
    cpu_pool_run(be->pool, cpu_run_job, &r);

    int stop = atomic_load_explicit(&r.stop_at, memory_order_acquire);
    if (stop == INT_MAX) return TSL_SUCCESS;
    if (atomic_load_explicit(&r.fail, memory_order_acquire)) {
        const cpu_exec *x = &be->exec[stop];
        error_set(err, TSL_FAILED, "cpu", be->device, x->index, x->node, NULL, "%s", r.fail_msg);
        if (err) cpu_kernel_name(x->node, err->kernel, sizeof err->kernel);
        return TSL_FAILED;
    }
    const cpu_exec *x = &be->exec[stop + 1]; /* the callback is not asked after the last node */
    return error_set(err, TSL_ABORTED, "cpu", be->device, x->index, x->node, NULL,
                     "stopped by the abort callback before this node (%d of %d compute nodes done)", stop + 1, n);
}

static tsl_status cpu_graph_compute_async(tsl_backend *b, tsl_graph *g, tsl_error *err) {
    cpu_backend *be = (cpu_backend *)b;
    if (atomic_exchange_explicit(&be->busy, 1, memory_order_acquire))
        return error_set(err, TSL_FAILED, "cpu", be->device, -1, NULL, NULL,
                         "the backend is already computing a graph on another thread; use one backend per thread");
    tsl_error rec;
    tsl_error_clear(&rec);
    tsl_status s = cpu_compute(be, g, &rec);
    be->last = s;
    be->last_err = rec;
    if (err) *err = rec;
    atomic_store_explicit(&be->busy, 0, memory_order_release);
    return s;
}

static tsl_status cpu_synchronize(tsl_backend *b, tsl_error *err) {
    cpu_backend *be = (cpu_backend *)b;
    tsl_status s = be->last;
    if (err) *err = be->last_err;
    be->last = TSL_SUCCESS;
    tsl_error_clear(&be->last_err);
    return s;
}

/* ---- buffers: plain aligned host memory ---------------------------------- */

static void *cpu_buffer_alloc(tsl_backend *b, size_t size, void **base, tsl_error *err) {
    cpu_backend *be = (cpu_backend *)b;
    void *p = cpu_host_alloc(be, size);
    if (!p) {
        error_set(err, TSL_ALLOC_FAILED, "cpu", be->device, -1, NULL, NULL,
                  "could not allocate a host buffer of %zu bytes", size);
        return NULL;
    }
    *base = p;
    return p;
}

static void cpu_buffer_free(tsl_backend *b, void *handle) { free(handle); }

static size_t cpu_buffer_alignment(const tsl_backend *b) { return CPU_ALIGN; }

static tsl_status cpu_buffer_set(tsl_backend *b, void *handle, size_t offset, const void *src, size_t n,
                                 tsl_error *err) {
    memcpy((char *)handle + offset, src, n);
    return TSL_SUCCESS;
}

static tsl_status cpu_buffer_get(tsl_backend *b, void *handle, size_t offset, void *dst, size_t n,
                                 tsl_error *err) {
    memcpy(dst, (const char *)handle + offset, n);
    return TSL_SUCCESS;
}

/* ---- the rest of the vtable ---------------------------------------------- */

static const char *cpu_name(const tsl_backend *b) { return "cpu"; }

static const char *cpu_device(const tsl_backend *b) { return ((const cpu_backend *)b)->device; }

static bool cpu_supports_op(const tsl_backend *b, const tsl_tensor *node) {
    if (tsl_op_is_view(node->op) || node->op == TSL_OP_NONE) return true;
    return cpu_kernel_for(node) != NULL;
}

static void cpu_free(tsl_backend *b) {
    cpu_backend *be = (cpu_backend *)b;
    cpu_pool_free(be->pool);
    cpu_pool_free(be->solo);
    free(be->wdata);
    free(be->exec);
    backend_common_fini(&be->base);
    free(be);
}

static const tsl_backend_vtable cpu_vtable = {
    .name = cpu_name,
    .device = cpu_device,
    .free = cpu_free,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .buffer_alignment = cpu_buffer_alignment,
    .buffer_is_host = true,
    .buffer_set = cpu_buffer_set,
    .buffer_get = cpu_buffer_get,
    .supports_op = cpu_supports_op,
    .graph_compute_async = cpu_graph_compute_async,
    .synchronize = cpu_synchronize,
};

/* ---- creation ------------------------------------------------------------- */

/* The CPU's model name from /proc/cpuinfo ("AMD EPYC 9654 96-Core
 * Processor"), or "CPU" where that file does not exist. */
static void cpu_read_model(char *buf, size_t n) {
    snprintf(buf, n, "CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) continue;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        size_t len = strcspn(v, "\n");
        while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == '\t')) len--;
        if (len > 0) snprintf(buf, n, "%.*s", (int)len, v);
        break;
    }
    fclose(f);
}

static void cpu_update_device(cpu_backend *be) {
    snprintf(be->device, sizeof be->device, "%s (%d thread%s, %s)", be->model, be->n_threads,
             be->n_threads == 1 ? "" : "s", tsl_cpu_simd_name());
}

static int cpu_default_threads(int n) {
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    return n > CPU_MAX_THREADS ? CPU_MAX_THREADS : n;
}

tsl_backend *tsl_backend_cpu_new(int n_threads, tsl_error *err) {
    n_threads = cpu_default_threads(n_threads);
    cpu_backend *be = calloc(1, sizeof *be);
    if (!be) {
        error_set(err, TSL_ALLOC_FAILED, "cpu", "", -1, NULL, NULL, "out of memory creating the CPU backend");
        return NULL;
    }
    if (backend_common_init(&be->base, &cpu_vtable, err) != TSL_SUCCESS) { /* e.g. a malformed TSL_FAULT */
        free(be);
        return NULL;
    }
    be->n_threads = n_threads;
    atomic_init(&be->busy, 0);
    be->last = TSL_SUCCESS;
    tsl_error_clear(&be->last_err);
    cpu_read_model(be->model, sizeof be->model);
    cpu_update_device(be);
    be->pool = cpu_pool_new(n_threads);
    be->solo = cpu_pool_new(1);
    if (!be->pool || !be->solo) {
        cpu_pool_free(be->pool);
        cpu_pool_free(be->solo);
        error_set(err, TSL_FAILED, "cpu", be->device, -1, NULL, NULL, "could not start %d worker threads",
                  n_threads);
        backend_common_fini(&be->base);
        free(be);
        return NULL;
    }
    return &be->base;
}

int tsl_backend_cpu_threads(const tsl_backend *b) {
    if (!b || b->vt != &cpu_vtable) return 0;
    return ((const cpu_backend *)b)->n_threads;
}

tsl_status tsl_backend_cpu_set_threads(tsl_backend *b, int n_threads, tsl_error *err) {
    if (!b || b->vt != &cpu_vtable)
        return error_set(err, TSL_FAILED, b ? tsl_backend_name(b) : "", b ? tsl_backend_device(b) : "", -1, NULL,
                         NULL, "cpu_set_threads: not a CPU backend");
    cpu_backend *be = (cpu_backend *)b;
    n_threads = cpu_default_threads(n_threads);
    if (n_threads == be->n_threads) return TSL_SUCCESS;
    if (atomic_exchange_explicit(&be->busy, 1, memory_order_acquire))
        return error_set(err, TSL_FAILED, "cpu", be->device, -1, NULL, NULL,
                         "cpu_set_threads: the backend is computing a graph on another thread");
    /* start the new pool before stopping the old one: a failure changes nothing */
    cpu_pool *pool = cpu_pool_new(n_threads);
    if (!pool) {
        atomic_store_explicit(&be->busy, 0, memory_order_release);
        return error_set(err, TSL_FAILED, "cpu", be->device, -1, NULL, NULL,
                         "could not start %d worker threads; still running on %d", n_threads, be->n_threads);
    }
    cpu_pool_free(be->pool);
    be->pool = pool;
    be->n_threads = n_threads;
    cpu_update_device(be);
    atomic_store_explicit(&be->busy, 0, memory_order_release);
    return TSL_SUCCESS;
}
