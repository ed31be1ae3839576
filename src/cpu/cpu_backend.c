/*
 * cpu_backend.c - the CPU backend: host buffers, the resolve pass, the
 * compute loop over the thread pool, and the CPU's side of the fault
 * contract (FAULTS.md).
 *
 * A compute has two phases, in the shape every backend follows (FAULTS.md
 * section 5):
 *
 *  1. Resolve, on the calling thread, before anything runs. This is the
 *     compute's encode block: it points the thread's ledger sink at the
 *     compute's own ledger, and every lookup that comes up empty records
 *     there instead of returning: a node or source with no data
 *     (ledger_record_nobuf; a view whose data was never set gets its address
 *     from its source now, see backend.c), a node with no kernel or whose
 *     kernel failed to build (ledger_record_kernel). The pass looks at the
 *     whole graph, so the ledger counts every problem; the record is the
 *     first one, naming its node, op, tensor and kernel. A compute whose
 *     ledger recorded anything runs nothing: outputs stay exactly as they
 *     were. The scratch the largest node needs is allocated after the pass.
 *  2. Run: all threads walk the same list of compute nodes (views run
 *     nothing and are dropped from the list), each doing its share of a node
 *     and meeting at a barrier after it. Each thread's kernels run inside an
 *     encode block on the same ledger, so a lookup made while executing (the
 *     CPU's kernels make none today) would fail this compute and no other.
 *     Thread 0 polls the abort callback between nodes and publishes the
 *     answer before the barrier, so every thread stops after the same node;
 *     a kernel reports a data error (cpu_kernel_fail) the same way. The
 *     per-node cost is one indirect call and one barrier.
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
 * caller using either call alone sees every failure.
 *
 * Kernels. A kernel is named cpu_<op>_<source types>[_<result type> for
 * DUP], e.g. cpu_mul_mat_q4_0_f32, cpu_get_rows_q8_0_i32, cpu_dup_f32_f16.
 * "Building" one on the CPU is choosing its function (cpu_kernel_for); that
 * is cheap, so it happens at every lookup of a kernel not already known to
 * have failed, and that lookup is the kernel-build boundary where an
 * injected "kernel" fault fires. A failed build is cached per backend with
 * its record (recover.c): no compute binds it, supports_op answers false
 * for its nodes, and it stays failed, even once the injection rule is
 * removed, until tsl_backend_recover rebuilds the kernels. A node for which
 * the CPU has no kernel at all (an op/type/layout combination it does not
 * serve) fails the same way but is not cached: the answer depends on the
 * node's layout as well as its types, and supports_op already gives it
 * from cpu_kernel_for. tsl_backend_build_kernels builds every kernel the
 * CPU serves, enumerated from cpu_kernel_for itself (cpu_build_kernels).
 *
 * Device loss. A CPU backend is its own device: losing it affects no other
 * CPU backend. The CPU never loses its device by itself, but an injected
 * "lost" fires where a GPU's fence status comes back (after the nodes ran),
 * and takes the real path: the device latches (recover.c), the compute and
 * every later one return DEVICE_LOST with the original cause. Recovery then
 * restarts the thread pool (the CPU's queue), drops the scratch, and wipes
 * every buffer in place (cpu_buffer_recreate): host memory is not really
 * gone, but the allocation is kept, because tensors point into it, and
 * zeroed, the state fresh device memory starts in, so whatever a recovery
 * leaves in a buffer was really restored from its host source or copy.
 *
 * Fault injection (FAULTS.md section 10) hooks the same boundaries the real
 * faults cross: "nobuf" at each data lookup of the resolve pass, "kernel"
 * at each kernel build, "alloc" at host buffer, scratch and recovery
 * allocations, "abort" where the abort callback is polled (the site's node
 * is the node that would run next), "retry" when a compute starts (a CPU
 * never refuses work by itself, but callers' retry paths need exercising),
 * and "lost" at the completion check. With no rules, each site costs one
 * relaxed load; the cost of the ledger and the checks together is measured
 * by tests/fault/test_status_paths.c (resolve_ns in backend_impl.h).
 */
#include <ctype.h>
#include <limits.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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
    fault_ledger *ledger; /* every thread's encode sink while its kernels run */
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
    ledger_sink_set(r->ledger);
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
        if (atomic_load_explicit(&r->stop_at, memory_order_relaxed) <= last) break;
        i = last + 1;
    }
    /* End of this thread's block: a lookup after it lands in no sink and is
     * only logged (ledger.c), as it belongs to no compute. */
    ledger_sink_clear();
}

/* ---- records ---------------------------------------------------------- */

/* cpu_<op>_<source types>, plus the result type for DUP (the one op whose
 * result type is a free choice): cpu_mul_mat_q4_0_f32, cpu_dup_f32_f16. */
static void cpu_kernel_name(const tsl_tensor *node, char *buf, size_t n) {
    if (n == 0) return;
    int w = snprintf(buf, n, "cpu_%s", tsl_op_name(node->op));
    for (int i = 4; i < w && (size_t)i < n; i++) buf[i] = (char)tolower((unsigned char)buf[i]);
    for (int j = 0; j <= TSL_MAX_SRC; j++) {
        const tsl_tensor *t = j < TSL_MAX_SRC ? node->src[j] : (node->op == TSL_OP_DUP ? node : NULL);
        if (!t) continue;
        if (w < 0 || (size_t)w >= n) return;
        int k = snprintf(buf + w, n - (size_t)w, "_%s", tsl_type_name(t->type));
        if (k < 0) return;
        w += k;
    }
}

static void cpu_vt_kernel_name(const tsl_backend *b, const tsl_tensor *node, char *buf, size_t n) {
    cpu_kernel_name(node, buf, n);
}

static const char *cpu_label(const tsl_tensor *t) { return t->name[0] ? t->name : "(unnamed)"; }

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

/* What one resolve pass checks for, decided once per compute so that a
 * compute with no injection rules and no failed kernel pays nothing per
 * node (rules added while a compute resolves apply from the next one). */
typedef struct cpu_checks {
    uint64_t compute;
    bool inject;  /* the backend has injection rules */
    bool kfailed; /* some kernel is cached as failed */
} cpu_checks;

/* The data lookup of the resolve pass: a view gets its address now; an
 * injected "nobuf" makes the tensor look unplaced. */
static bool cpu_lookup(cpu_backend *be, const cpu_checks *c, int i, tsl_tensor *t) {
    if (c->inject) {
        fault_site site = {.compute = c->compute, .node = i, .tensor = t};
        if (fault_plan_fire(be->base.faults, TSL_FAULT_NOBUF, &site)) return false;
    }
    return backend_tensor_resolve(t);
}

/* Look up t (node i reads it, or it is node i) and check the CPU can use its
 * memory; records into the compute's ledger and returns false if not. */
static bool cpu_resolve_tensor(cpu_backend *be, const cpu_checks *c, int i, tsl_tensor *node, tsl_tensor *t,
                               int src) {
    if (!cpu_lookup(be, c, i, t)) {
        ledger_record_nobuf(i, node, t);
        return false;
    }
    if (!cpu_host_readable(t)) {
        if (src >= 0)
            ledger_record(TSL_FAILED, i, node, "input %d '%s' of '%s' is in a %s buffer the CPU cannot read", src,
                          cpu_label(t), cpu_label(node), tsl_backend_name(t->buffer->be));
        else
            ledger_record(TSL_FAILED, i, node, "'%s' is in a %s buffer the CPU cannot write", cpu_label(t),
                          tsl_backend_name(t->buffer->be));
        return false;
    }
    return true;
}

/* "f32 from f32, i32": the types of a node, for messages. */
static void cpu_types_text(const tsl_tensor *node, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "%s", tsl_type_name(node->type));
    const char *sep = " from ";
    for (int j = 0; j < TSL_MAX_SRC && k < n; j++)
        if (node->src[j]) {
            k += (size_t)snprintf(buf + k, n - k, "%s%s", sep, tsl_type_name(node->src[j]->type));
            sep = ", ";
        }
}

/* Build kernel `name` for node (index i, or -1 outside a compute): the
 * kernel-build boundary, where an injected "kernel" fault fires. A failure
 * is cached with its record; rec (may be NULL) receives it. */
static bool cpu_kernel_build(cpu_backend *be, uint64_t compute, int i, const tsl_tensor *node, const char *name,
                             tsl_error *rec) {
    fault_site site = {.compute = compute, .node = i, .tensor = node, .kernel = name};
    if (!fault_plan_fire(be->base.faults, TSL_FAULT_KERNEL, &site)) return true;
    tsl_error e;
    error_set(&e, TSL_FAILED, "cpu", be->device, i, node, name, "could not be built");
    snprintf(e.driver_domain, sizeof e.driver_domain, "cpu");
    snprintf(e.driver_text, sizeof e.driver_text, "kernel build failed (injected fault)");
    backend_kernel_fail(&be->base, name, &e);
    if (rec) *rec = e;
    return false;
}

/* The kernel of compute node i, or NULL after recording into the ledger why
 * there is none: it failed to build (now or before: the cache), or the CPU
 * has no kernel for this op with these types and layout. Names are only
 * formatted when a rule or a cached failure could need them. */
static cpu_kernel_fn cpu_kernel_get(cpu_backend *be, const cpu_checks *c, int i, tsl_tensor *node) {
    char name[64], why[192];
    name[0] = 0;
    tsl_error rec;
    if (c->inject || c->kfailed) {
        cpu_kernel_name(node, name, sizeof name);
        if (backend_kernel_failed(&be->base, name, &rec)) {
            ledger_record_kernel(i, node, name, rec.driver_domain, rec.driver_code, rec.driver_text);
            return NULL;
        }
    }
    cpu_kernel_fn fn = cpu_kernel_for(node);
    if (!fn) {
        if (!name[0]) cpu_kernel_name(node, name, sizeof name);
        char types[96];
        cpu_types_text(node, types, sizeof types);
        snprintf(why, sizeof why, "no CPU kernel for %s with these types or layout (%s)", tsl_op_name(node->op),
                 types);
        ledger_record_kernel(i, node, name, "cpu", 0, why);
        return NULL;
    }
    if (c->inject && !cpu_kernel_build(be, c->compute, i, node, name, &rec)) {
        ledger_record_kernel(i, node, name, rec.driver_domain, rec.driver_code, rec.driver_text);
        return NULL;
    }
    return fn;
}

/* The resolve pass: one encode block on the calling thread. Fills be->exec
 * with the compute nodes, *wsize with the scratch the largest needs and
 * *ws_node with that node's index. Returns false when the ledger recorded
 * anything (the caller reads the record from it). */
static bool cpu_resolve(cpu_backend *be, tsl_graph *g, uint64_t compute, fault_ledger *led, int *n_exec,
                        size_t *wsize, int *ws_node) {
    int nth = be->n_threads, ne = 0, wn = -1;
    size_t ws = 0;
    const cpu_checks c = {.compute = compute,
                          .inject = !fault_plan_empty(be->base.faults),
                          .kfailed = backend_kernel_any_failed(&be->base)};
    bool failed = false;
    ledger_sink_set(led);
    for (int i = 0; i < g->n_nodes; i++) {
        tsl_tensor *node = g->nodes[i];
        if (!node) {
            ledger_record(TSL_FAILED, i, NULL, "graph node %d is NULL", i);
            failed = true;
            continue;
        }
        bool ok = true;
        for (int j = 0; j < TSL_MAX_SRC; j++)
            if (node->src[j]) ok &= cpu_resolve_tensor(be, &c, i, node, node->src[j], j);
        ok &= cpu_resolve_tensor(be, &c, i, node, node, -1);
        failed |= !ok;
        if (tsl_op_is_view(node->op) || node->op == TSL_OP_NONE) continue;
        cpu_kernel_fn fn = cpu_kernel_get(be, &c, i, node);
        failed |= !fn;
        /* once anything failed nothing will run: keep looking (the ledger
         * counts every problem) but plan nothing more */
        if (failed) continue;
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
        if (w > ws) ws = w, wn = i;
    }
    /* The encode block ends here. A lookup made on this thread after this
     * point lands in no sink and is only logged (ledger.c): it belongs to no
     * compute, so there is no compute to fail. */
    ledger_sink_clear();
    if (failed || ledger_failed(led)) return false;
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
    *ws_node = wn;
    return true;
}


/* The point where a GPU's fence status comes back: the work was submitted
 * and ran. The CPU cannot lose its device, but an injected "lost" fires
 * here and takes the real path: the device latches with this record as the
 * cause every later call returns. */
static bool cpu_completion_lost(cpu_backend *be, uint64_t compute, int n_ran, tsl_error *err) {
    fault_site site = {.compute = compute, .node = -1};
    if (!fault_plan_fire(be->base.faults, TSL_FAULT_LOST, &site)) return false;
    error_set(err, TSL_DEVICE_LOST, "cpu", be->device, -1, NULL, NULL,
              "the device was lost while compute %llu ran (%d nodes submitted); its outputs and every buffer on "
              "the device are undefined until recovery",
              (unsigned long long)compute, n_ran);
    snprintf(err->driver_domain, sizeof err->driver_domain, "cpu");
    snprintf(err->driver_text, sizeof err->driver_text, "device lost (injected fault at the completion check)");
    backend_dev_latch(be->base.dev, err);
    return true;
}

/* err is never NULL here (compute_async passes its own record). */
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
    int n = 0, ws_node = -1;
    size_t ws = 0;
    fault_ledger led;
    ledger_begin(&led, "cpu", be->device);
    uint64_t t0 = core_now_ns();
    bool clean = cpu_resolve(be, g, compute, &led, &n, &ws, &ws_node);
    atomic_store_explicit(&be->base.resolve_ns, core_now_ns() - t0, memory_order_relaxed);
    if (!clean) return ledger_result(&led, err);
    if (ws > be->wsize) {
        void *w = cpu_host_alloc(be, ws);
        if (!w) {
            const tsl_tensor *wn = ws_node >= 0 ? g->nodes[ws_node] : NULL;
            return error_set(err, TSL_ALLOC_FAILED, "cpu", be->device, ws_node, wn, NULL,
                             "could not allocate %zu bytes of scratch (this node needs the most); nothing was "
                             "computed",
                             ws);
        }
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
    r.ledger = &led;
    r.compute = compute;
    atomic_init(&r.fail, 0);
    atomic_init(&r.abort, 0);
    atomic_init(&r.stop_at, INT_MAX);
    cpu_pool_run(be->pool, cpu_run_job, &r);

    int stop = atomic_load_explicit(&r.stop_at, memory_order_acquire);
    if (cpu_completion_lost(be, compute, stop == INT_MAX ? n : stop + 1, err)) return TSL_DEVICE_LOST;
    if (ledger_failed(&led)) return ledger_result(&led, err); /* a lookup made while running */
    if (stop == INT_MAX) return TSL_SUCCESS;
    if (atomic_load_explicit(&r.fail, memory_order_acquire)) {
        const cpu_exec *x = &be->exec[stop];
        error_set(err, TSL_FAILED, "cpu", be->device, x->index, x->node, NULL, "%s", r.fail_msg);
        cpu_kernel_name(x->node, err->kernel, sizeof err->kernel);
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

/* Recovery's reallocation. The allocation is kept, since tensors point into
 * it, and wiped: fresh device memory starts zeroed, and whatever recovery
 * leaves in the buffer afterwards must have been restored, not left over.
 * The allocation boundary's "alloc" injection fires here too, so a recovery
 * that cannot get its memory back can be exercised. */
static tsl_status cpu_buffer_recreate(tsl_backend *b, void **handle, size_t size, tsl_error *err) {
    cpu_backend *be = (cpu_backend *)b;
    fault_site site = {.compute = atomic_load_explicit(&be->base.n_computes, memory_order_relaxed),
                       .node = -1,
                       .bytes = size};
    if (fault_plan_fire(be->base.faults, TSL_FAULT_ALLOC, &site))
        return error_set(err, TSL_ALLOC_FAILED, "cpu", be->device, -1, NULL, NULL,
                         "could not reallocate a host buffer of %zu bytes (injected fault)", size);
    memset(*handle, 0, size);
    return TSL_SUCCESS;
}

static size_t cpu_buffer_alignment(const tsl_backend *b) { return CPU_ALIGN; }

static tsl_status cpu_buffer_set(tsl_backend *b, void *handle, size_t offset, const void *src, size_t n,
                                 const tsl_tensor *t, tsl_error *err) {
    memcpy((char *)handle + offset, src, n);
    return TSL_SUCCESS;
}

static tsl_status cpu_buffer_get(tsl_backend *b, void *handle, size_t offset, void *dst, size_t n,
                                 const tsl_tensor *t, tsl_error *err) {
    memcpy(dst, (const char *)handle + offset, n);
    return TSL_SUCCESS;
}

/* ---- the rest of the vtable ---------------------------------------------- */

static const char *cpu_name(const tsl_backend *b) { return "cpu"; }

static const char *cpu_device(const tsl_backend *b) { return ((const cpu_backend *)b)->device; }

/* Failed builds are refused by the common layer (backend.c), which asks
 * cpu_vt_kernel_name for the node's kernel. */
static bool cpu_supports_op(const tsl_backend *b, const tsl_tensor *node) {
    if (tsl_op_is_view(node->op) || node->op == TSL_OP_NONE) return true;
    return cpu_kernel_for(node) != NULL;
}

/* ---- recovery ------------------------------------------------------------------ */

/* Recreate the CPU's device objects: its queue is the thread pool (a new
 * one is started before the old one stops, so a failure changes nothing)
 * and its scratch is dropped to be allocated again. Without a loss there is
 * nothing to recreate: kernels are functions, rebuilt (looked up) on use
 * once the common layer has dropped the failure cache. */
static tsl_status cpu_recover(tsl_backend *b, bool lost, tsl_error *err) {
    cpu_backend *be = (cpu_backend *)b;
    if (atomic_exchange_explicit(&be->busy, 1, memory_order_acquire))
        return error_set(err, TSL_FAILED, "cpu", be->device, -1, NULL, NULL,
                         "recover: the backend is computing a graph on another thread; recover once it returns");
    if (lost) {
        cpu_pool *pool = cpu_pool_new(be->n_threads);
        if (pool) {
            cpu_pool_free(be->pool);
            be->pool = pool;
        } else {
            TSL_LOGW("cpu: recover: could not start a new thread pool; keeping the old one");
        }
        free(be->wdata);
        be->wdata = NULL;
        be->wsize = 0;
    }
    atomic_store_explicit(&be->busy, 0, memory_order_release);
    return TSL_SUCCESS;
}

/* ---- building every kernel ----------------------------------------------------- */

enum { CPU_CATALOG_MAX = 160 };

/* One node per op/type combination worth asking cpu_kernel_for about, made
 * with the real op constructors in a metadata-only context; the CPU serves
 * those it returns a function for. Deriving the list from cpu_kernel_for
 * keeps it from drifting from what the CPU really runs. */
static int cpu_catalog(tsl_context *ctx, tsl_tensor **out) {
    static const tsl_type T[] = {TSL_TYPE_F32, TSL_TYPE_F16, TSL_TYPE_BF16, TSL_TYPE_Q8_0, TSL_TYPE_Q4_0};
    const int nt = (int)(sizeof T / sizeof T[0]);
    int n = 0;
#define CAT(expr)                                                      \
    do {                                                               \
        tsl_tensor *t_ = (expr);                                       \
        if (t_ && n < CPU_CATALOG_MAX) out[n++] = t_;                  \
        if (!t_) tsl_ctx_clear_error(ctx); /* a combination the op refuses */ \
    } while (0)
    for (int i = 0; i < nt; i++) {
        tsl_tensor *a = tsl_new_tensor_2d(ctx, T[i], 64, 4);
        CAT(tsl_mul_mat(ctx, a, tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 64, 4)));
        CAT(tsl_mul_mat(ctx, a, tsl_new_tensor_2d(ctx, TSL_TYPE_F16, 64, 4)));
        CAT(tsl_out_prod(ctx, a, tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 32, 4)));
        CAT(tsl_get_rows(ctx, tsl_new_tensor_2d(ctx, T[i], 64, 8), tsl_new_tensor_1d(ctx, TSL_TYPE_I32, 4)));
        CAT(tsl_cont(ctx, a));
        for (int j = 0; j < nt; j++) {
            CAT(tsl_dup(ctx, a, T[j]));
            CAT(tsl_cpy(ctx, a, tsl_new_tensor_2d(ctx, T[j], 64, 4)));
        }
    }
    tsl_tensor *x = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 64, 4), *y = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 64, 4);
    tsl_tensor *row = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 64, 1);
    CAT(tsl_add(ctx, x, row));
    CAT(tsl_sub(ctx, x, row));
    CAT(tsl_mul(ctx, x, row));
    CAT(tsl_div(ctx, x, row));
    CAT(tsl_scale(ctx, x, 2.0f));
    CAT(tsl_sqr(ctx, x));
    CAT(tsl_sqrt(ctx, x));
    CAT(tsl_silu(ctx, x));
    CAT(tsl_gelu(ctx, x));
    CAT(tsl_swiglu(ctx, x, y));
    CAT(tsl_sum(ctx, x));
    CAT(tsl_sum_rows(ctx, x));
    CAT(tsl_mean(ctx, x));
    CAT(tsl_argmax(ctx, x));
    CAT(tsl_rms_norm(ctx, x, 1e-5f));
    CAT(tsl_norm(ctx, x, 1e-5f));
    CAT(tsl_cross_entropy_loss(ctx, x, y));
    tsl_tensor *h = tsl_new_tensor_3d(ctx, TSL_TYPE_F32, 16, 4, 4), *pos = tsl_new_tensor_1d(ctx, TSL_TYPE_I32, 4);
    tsl_rope_params rp = tsl_rope_default(16);
    CAT(tsl_rope(ctx, h, pos, NULL, &rp));
    CAT(tsl_rope(ctx, h, pos, tsl_new_tensor_1d(ctx, TSL_TYPE_F32, 8), &rp));
    tsl_tensor *s = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 8, 4);
    CAT(tsl_soft_max(ctx, s, NULL, 1.0f));
    CAT(tsl_soft_max(ctx, s, tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 8, 4), 1.0f));
    CAT(tsl_soft_max(ctx, s, tsl_new_tensor_2d(ctx, TSL_TYPE_F16, 8, 4), 1.0f));
    static const tsl_type C[] = {TSL_TYPE_F32, TSL_TYPE_F16, TSL_TYPE_I32};
    for (int i = 0; i < 3; i++)
        CAT(tsl_concat(ctx, tsl_new_tensor_2d(ctx, C[i], 8, 4), tsl_new_tensor_2d(ctx, C[i], 8, 4), 1));
#undef CAT
    return n;
}

/* tsl_backend_build_kernels: every kernel the CPU serves, each built once
 * (a cached failure is reported as it was, not rebuilt), reported in
 * catalog order. Returns how many failed, or -1 if the catalog cannot be
 * made (out of memory). */
static int cpu_build_kernels(tsl_backend *b, tsl_kernel_fn fn, void *user) {
    cpu_backend *be = (cpu_backend *)b;
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 512 * 1024, .no_alloc = true});
    tsl_tensor **nodes = malloc(CPU_CATALOG_MAX * sizeof *nodes);
    char(*seen)[64] = malloc(CPU_CATALOG_MAX * sizeof *seen);
    if (!ctx || !nodes || !seen) {
        tsl_ctx_free(ctx);
        free(nodes);
        free(seen);
        return -1;
    }
    uint64_t compute = atomic_load_explicit(&be->base.n_computes, memory_order_relaxed);
    int n = cpu_catalog(ctx, nodes), n_seen = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        if (!cpu_kernel_for(nodes[i])) continue; /* not a combination the CPU serves */
        char name[64];
        cpu_kernel_name(nodes[i], name, sizeof name);
        bool dup = false;
        for (int k = 0; k < n_seen && !dup; k++) dup = strcmp(seen[k], name) == 0;
        if (dup) continue;
        memcpy(seen[n_seen++], name, sizeof name);
        tsl_error rec;
        tsl_error_clear(&rec);
        bool ok = !backend_kernel_failed(b, name, &rec) && cpu_kernel_build(be, compute, -1, nodes[i], name, &rec);
        if (!ok) failed++;
        if (fn) fn(name, ok ? TSL_SUCCESS : TSL_FAILED, ok ? NULL : &rec, user);
    }
    tsl_ctx_free(ctx);
    free(nodes);
    free(seen);
    return failed;
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
    .buffer_recreate = cpu_buffer_recreate,
    .supports_op = cpu_supports_op,
    .graph_compute_async = cpu_graph_compute_async,
    .synchronize = cpu_synchronize,
    .kernel_name = cpu_vt_kernel_name,
    .build_kernels = cpu_build_kernels,
    .recover = cpu_recover,
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
