/*
 * vk_backend.c - the Vulkan backend: buffers, the resolve pass, parallel
 * encoding into command buffers, submission, and completion under a
 * watchdog.
 *
 * A compute runs in the shape ggml-metal gave GPU backends, with the fault
 * contract of FAULTS.md on top:
 *
 *  1. Resolve (calling thread, before anything is encoded): every tensor
 *     the graph touches must be in a buffer of this device, every compute
 *     node must have a kernel, and that kernel must build. Lookups record
 *     into the compute's ledger (missing buffer: tensor, op, node; kernel:
 *     name and the driver's text); the pass goes through the whole graph so
 *     the ledger's counts are complete, and only a clean ledger lets
 *     encoding start. The encoders then use the resolved handles.
 *  2. Encode and submit: the compute nodes are cut into up to 9 command
 *     buffers. The calling thread encodes a short first one and submits it
 *     at once, so the device starts while persistent worker threads (one
 *     command pool each) encode the rest in parallel; the calling thread
 *     submits those in order as they are ready. Between command buffers it
 *     asks the abort callback. Every encode block points its thread's
 *     ledger sink at this compute; if anything records while encoding, the
 *     command buffers not yet submitted are dropped.
 *  3. Complete: synchronize waits on each command buffer's fence in order,
 *     in bounded slices. A fence that does not signal within the watchdog
 *     allowance (no progress) is a hung GPU: DEVICE_LOST, "GPU hang: no
 *     progress in N s", latched for every backend on the device. Driver
 *     errors go through the VkResult table (phase SUBMIT). Data errors
 *     found by kernels (a get_rows index out of range) come back through
 *     the compute's status words and fail the compute naming the node.
 *
 * Barriers. A command buffer starts with one full compute barrier (it
 * orders the buffer after everything submitted before it on the queue, the
 * previous command buffers of the same graph included). Inside it, a node
 * gets a barrier only when it reads bytes written, or writes bytes read or
 * written, by a node since the last barrier: the byte ranges are tracked per
 * memory block. Independent nodes (the Q, K and V projections of a layer)
 * run concurrently.
 *
 * Descriptors: VK_KHR_push_descriptor where the driver has it (lavapipe,
 * NVIDIA, AMD, Intel do): no pools, nothing to free, seven buffer writes
 * per dispatch (at recording: a command buffer submitted again writes
 * none). Elsewhere each command buffer's encoder allocates sets from its
 * own descriptor pools, reset when the command buffer is reused. One
 * descriptor-set layout and one pipeline layout serve every kernel.
 *
 * Loss and recovery (FAULTS.md section 8). Every wait is bounded, so a
 * hung GPU costs the compute its watchdog allowance and no more; the loss
 * latches in the common layer's device object, which every backend on the
 * VkDevice shares. Recovery (vk_recover) makes a new VkDevice first and
 * moves everything made on the old one to a grave (vk_device.c) that is
 * destroyed only once its fences say it is idle; the common layer then gives
 * every buffer new memory behind its old address and restores the
 * persistent ones.
 *
 * GPU time. Where the compute queue has timestamps, every command buffer
 * writes one when everything before it on the queue is done and one at its
 * end (one query pool per backend, two queries per command buffer, reset
 * inside the command buffer itself, read without waiting once the fences
 * have signaled): tsl_vulkan_stats.last_gpu_us is the span from the first
 * command buffer's start to the last one's end, so a caller can split a
 * compute's time into host encoding and submission (last_encode_us_per_node)
 * and device work.
 *
 * Staging copies (tensor set/get where the host cannot map tensor memory,
 * e.g. a discrete GPU): a copy is cut into chunks that take turns in three
 * parts of one host-visible buffer, each chunk with its own command buffer
 * and fence, so the host fills (or empties) one part while the device copies
 * the others; a large chunk's memcpy is split over a few helper threads.
 * Every wait is bounded by the watchdog. Measured on the H200 (1 GiB,
 * best of five): one synchronous 64 MiB chunk at a time moved 5.0 GB/s up
 * and 5.2 down; the three-part pipeline with one thread 5.5-5.8; with three
 * helpers 23-28 GB/s up and 20-24 down.
 *
 * Fault injection (FAULTS.md section 10) fires where the real faults
 * appear: "nobuf" at each buffer lookup of the resolve pass; "kernel" at
 * each kernel lookup (kernel names as vk.h lists them; the kernel is then
 * failed for this backend, as a real build failure is for the device);
 * "alloc" at buffer allocation (the bytes are the request); "retry" at each
 * queue submission (as VK_ERROR_OUT_OF_DEVICE_MEMORY, which the table makes
 * RETRY); "lost" at each compute's fence (as VK_ERROR_DEVICE_LOST);
 * "copylost" at each staging chunk's fence, where a copy's completion is
 * waited for (as VK_ERROR_DEVICE_LOST there; "copy=N" counts these waits);
 * "abort" where the callback is asked.
 *
 * Where a copy's completion is learned. A copy waited for at once (a read,
 * an upload over VK_XFER_ASYNC_MAX) reports to its own call. A small upload
 * left in flight reports to whichever comes next: the next copy (which
 * waits for chunks in flight before reusing staging) or the next compute
 * (whose command buffers ran after the copy, on what it wrote: its
 * synchronize waits for the copy once its own fences have signaled, so a
 * real loss found by those still names the node). The record names the
 * copy: op "copy", the tensor it was for, no node. A buffer's free and
 * teardown wait for it too but report nothing (they return nothing).
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vulkan/vk.h"

#define VK_DEFAULT_CB 4
#define VK_MAIN_MAX_NODES 64        /* the first command buffer: short, so the device starts early */
#define VK_MIN_CB_NODES 16          /* by default, no command buffer of fewer nodes */
#define VK_WATCHDOG_BASE_S 10.0     /* default allowance per command buffer, plus its work */
#define VK_WATCHDOG_CPU_S 60.0      /* the same on a CPU device (lavapipe), which shares its cores */
#define VK_WATCHDOG_SLICE_NS 50000000ull
/* spin_auto: wake this long (plus 5% of the expected GPU time, up to as
 * much again) before a compute's expected end, and poll from there */
#define VK_SPIN_MARGIN_NS 150000ull
#define VK_LOST_GRACE_NS 1000000000ull /* waiting on a device another backend found lost */
#define VK_TEARDOWN_WAIT_NS 2000000000ull
#define VK_MAX_SPANS 256
/* where the signal words live (vk_wait_edge): one past the column scratch's
 * slot and one past the attention scratch, in bytes no column or partial
 * reaches */
#define VK_SYNC_BYTES ((VkDeviceSize)256)
#define VK_DPOOL_SETS 256
#define VK_PROF_MAX 8192 /* nodes per compute the profile times (TSL_VULKAN_PROFILE) */
#define VK_STAGING_MIN ((size_t)1 << 20)
#define VK_STAGING_MAX ((size_t)64 << 20)
#ifndef VK_XFER_SLOTS
#define VK_XFER_SLOTS 3 /* staging chunks in flight: one filled by the host while the others copy */
#define VK_XFER_ASYNC_MAX ((size_t)256 << 10) /* uploads up to this size return before the copy is done */
#define VK_RB_MAX 32                         /* TSL_FLAG_READBACK outputs copied back by one compute (a step's argmax each) */
#define VK_RB_MAX_BYTES ((size_t)16 << 20)   /* ... in at most this many bytes */
#endif
#define VK_XFER_THREADS 4                  /* host threads moving a chunk into or out of staging */
#define VK_XFER_PAR_MIN ((size_t)4 << 20)  /* below this one thread copies: waking others costs more */

typedef struct vk_span {
    vk_block *blk;
    VkDeviceSize lo, hi;
    bool write;
} vk_span;

/* One chunk of a staging copy in flight. */
typedef struct vk_xslot {
    VkCommandPool pool;
    VkCommandBuffer cb;
    VkFence fence;
    bool pending;   /* submitted, not yet seen signaled */
    size_t at, n;   /* the chunk: bytes [at, at + n) of the copy */
    size_t total;   /* the copy's bytes */
    size_t soff;    /* its part of the staging buffer */
    bool write;     /* into the device */
    bool deferred;  /* a small upload whose tsl_tensor_set returned at submit */
    char tensor[TSL_MAX_NAME]; /* the tensor the copy is for ("" if none): a
                                  deferred copy's error record names it after
                                  its caller's tensor may be gone */
} vk_xslot;

/* One command of a slot's tape: what vk_encode_slot records into the
 * command buffer, kept to tell whether the next compute would record the
 * same (then the command buffer is submitted again as it is). Zeroed before
 * filling, so whole records compare with memcmp. */
enum { VK_REC_BARRIER, VK_REC_DISPATCH, VK_REC_STAMP, VK_REC_READBACK };
typedef struct vk_rec {
    uint32_t kind;
    uint32_t mark;  /* dispatch: its NV checkpoint (node + 1, 0 none); stamp: the query */
    uint32_t level; /* dispatch: 1 where a level of dispatches starts (after a barrier, or the first) */
    int32_t node;   /* dispatch: the node it computes */
    VkPipeline pipe;
    uint32_t sets; /* bound through an ordinary descriptor set (vk_kernel.sets), push descriptors elsewhere */
    VkDescriptorBufferInfo bi[VK_NBIND];
    uint32_t pcsize, grid[3];
    uint32_t pc[VK_PC_WORDS];
} vk_rec;

/* One command buffer of a compute and the thread that encodes it. */
typedef struct vk_slot {
    VkCommandPool pool;
    VkCommandBuffer cb;
    VkFence fence;
    bool fence_pending;        /* submitted, not yet seen signaled */
    int first, count;          /* range of the compute's exec list */
    double work_s;             /* the watchdog's allowance for its work */
    VkDescriptorPool *dpools;  /* without push descriptors */
    int n_dpools, cur_dpool;
    vk_span spans[VK_MAX_SPANS];
    int n_spans;
    /* the column the scratch holds quantized (integer-dot mat-vec): its
     * binding and shape; q_valid until something writes over it */
    bool q_valid;
    vk_bind q_src;
    vk_bind q_at; /* where the column is: the scratch (its binding and first word, eoff) */
    bool zero_cnt; /* an attn_dec1 is recorded: the command buffer zeroes its counters first */
    /* waits instead of barriers (vk_wait_edge): the tape index of the last
     * dispatch where it is a producer alone in its level (-1 otherwise),
     * its workgroups that count themselves in and the push constant word
     * that names its signal word; the counts into the signal words of the
     * column scratch and the attention scratch so far (words this tape
     * uses, zeroed when the command buffer starts: sig_used); the next
     * dispatch's barrier skipped */
    int sig_rec;
    uint32_t sig_n, sig_pc;
    uint32_t sig_count[2];
    bool sig_used[2];
    bool nobar;
    int64_t q_ne[TSL_MAX_DIMS];
    size_t q_nb[TSL_MAX_DIMS];
    /* the activations the F16 scratch holds (a converting product's), as
     * for the column: their binding and shape; h_valid until something
     * writes over them or over the scratch */
    bool h_valid;
    vk_bind h_src;
    int64_t h_ne[TSL_MAX_DIMS];
    size_t h_nb[TSL_MAX_DIMS];
    uint64_t dispatches, barriers;
    uint64_t set_dispatches; /* of those, bound through an ordinary descriptor set (vk_kernel.sets) */
    uint32_t levels; /* dispatches that start a level (after a barrier, or the first) */
    double encode_ms;
    /* the tape being built, and the one the command buffer holds (valid
     * while `recorded`, for the device epoch rec_epoch) */
    vk_rec *tape, *prev;
    int n_tape, cap_tape, n_prev, cap_prev;
    bool recorded, reused;
    uint64_t rec_epoch;
    int rec_first;
    bool rec_q, rec_p;
} vk_slot;

struct vk_backend {
    struct tsl_backend base; /* first: the public handle points here */
    vk_device *dev;
    char name[32];
    char device[96];
    int n_cb;
    bool cb_explicit; /* n_cb was asked for (setter, TSL_VULKAN_CB): no minimum size */
    int watchdog_ms; /* 0: default, scaled to the work */
    /* Waiting: a sleeping wait wakes tens to hundreds of microseconds after
     * the fence signals, a large part of a small decode token. TSL_VULKAN_
     * SPIN_US=N polls every fence N us before sleeping (0: never polls).
     * Unset, a compute submitting the commands of the last (a replay, or
     * every command buffer reused) sleeps until shortly before the last
     * one's GPU time is up, then polls (vk_finish). */
    bool spin_auto;
    uint64_t spin_ns;     /* the fixed polling time, or this wait's (spin_auto) */
    bool same_cmds;       /* the compute in flight submitted the last one's commands */
    uint64_t submit_ns;   /* when its last command buffer was submitted */
    bool no_reuse;   /* record every compute (TSL_VULKAN_REUSE=0, tsl_backend_vulkan_set_reuse) */
    bool no_fuse;    /* one dispatch per node (TSL_VULKAN_FUSE=0) */
    bool no_qfuse;   /* the mat-vec's quantizer always its own dispatch (TSL_VULKAN_FUSE_QUANT=0) */
    bool no_one;     /* decode attention always in two passes (TSL_VULKAN_ATTN_ONE=0) */
    bool no_rfuse;   /* q/k/v ropes and cache stores apart from their product (TSL_VULKAN_FUSE_ROPE=0) */
    int wait;        /* products wait on their producer's signal instead of a barrier (TSL_VULKAN_WAIT: 1 norms, 2 swiglu, 4 attention) */
    uint32_t wait_skew; /* tests: the next wait asks for this many signals more than come (vk_test_wait) */
    /* norms into the products around them (vk_fuse_norms): 0 never
     * (TSL_VULKAN_FUSE_NORM=0), 1 always (=1), 2 (unset) for rows of at
     * most VK_NFUSE_AUTO_MAX values */
    int nfuse;
    /* Q4_0 weights of rows up to this many values split (vk_q4_split;
     * TSL_VULKAN_Q4_SPLIT_MAX_K, default all, 0 none) */
    int q4s_max_k;
    vk_slot slots[VK_MAX_CB];
    vk_exec *exec;
    int exec_cap, n_exec;
    fault_ledger ledger;
    _Atomic int busy;

    /* encoder threads: worker w encodes slot w + 1 */
    pthread_t threads[VK_MAX_WORKERS];
    int n_threads;
    pthread_mutex_t wlock;
    pthread_cond_t wcv, dcv;
    uint64_t wgen;
    bool wquit;
    int job_slots;
    bool done[VK_MAX_CB];

    /* the compute in flight (between compute_async and synchronize) */
    bool pending;
    int n_used, n_submitted;
    uint64_t pend_compute;
    tsl_status pend_status;
    tsl_error pend_err;
    tsl_status last; /* a finished compute's status not yet collected */
    tsl_error last_err;

    /* device scratch: the integer-dot mat-vec's quantized column
     * (VK_QSCR_SLOT bytes; made on first use, again after a recovery) */
    vk_buf *qscr;
    /* decode attention's partials (VK_ASCR_SIZE bytes; made on first use) */
    vk_buf *ascr;
    /* a converting product's F16 activations and weights (at most
     * VK_HSCR_SIZE and VK_WSCR_SIZE bytes; made on first use at the size
     * needed, larger when a compute needs more, again after a recovery) */
    vk_buf *hscr, *wscr;

    /* status words kernels write data errors into (host-visible) */
    VkBuffer sbuf;
    VkDeviceMemory smem;
    uint32_t *swords;

    /* staging copies for tensor set/get: a ring of chunks, each with its
     * own command buffer and fence (vk_transfer) */
    pthread_mutex_t xlock;
    vk_xslot xs[VK_XFER_SLOTS];
    uint64_t n_copies; /* chunk completions waited for: "copy" of the copylost site */
    VkBuffer stage;
    VkDeviceMemory stage_mem;
    void *stage_map;
    size_t stage_size;
    /* Outputs flagged TSL_FLAG_READBACK in tensor memory the host cannot
     * map: the compute's last command buffer copies them into rb, and
     * tsl_tensor_get of (part of) one reads it there once the compute
     * succeeded (rb_valid), with no copy and wait of its own. */
    VkBuffer rb;
    VkDeviceMemory rb_mem;
    void *rb_map;
    size_t rb_size;
    struct {
        const vk_buf *vb;
        size_t off, n;     /* the tensor's bytes within vb */
        size_t at;         /* where they land in rb */
        VkBuffer src;
        VkDeviceSize src_off;
    } rbo[VK_RB_MAX];
    int n_rbo;
    bool rb_valid;
    uint64_t st_rb_reads;

    /* GPU timestamps: queries 2s and 2s+1 are the start and end of command
     * buffer s */
    VkQueryPool qpool;
    /* TSL_VULKAN_PROFILE=1: one more timestamp after every node (query k
     * for exec k), and the GPU time between consecutive timestamps summed
     * per kernel; printed to stderr when the backend is freed */
    VkQueryPool ppool;
    struct {
        double us;
        uint64_t n;
    } prof[VK_K_COUNT];
    /* ... and per matrix product's kernel and weight shape (M x K, type),
     * with the weight bytes it read: the products of one kernel differ a
     * lot in how near the memory's rate they run */
    struct {
        int kernel;
        int64_t m, k;
        size_t bytes;
        double us;
        uint64_t n;
    } prof_mm[32];
    int n_prof_mm;
    bool ts_on;
    double ts_ns;      /* nanoseconds per tick (timestampPeriod) */
    uint64_t ts_mask;  /* the bits a timestamp holds (timestampValidBits) */

    /* helpers for the host side of large staging copies (vk_par_memcpy):
     * part p + 1 of a split memcpy goes to helper p */
    pthread_t xthreads[VK_XFER_THREADS - 1];
    int n_xthreads, xwant;
    pthread_mutex_t xplock;
    pthread_cond_t xpcv, xpdone;
    uint64_t xpgen;
    int xpleft;
    bool xpquit;
    struct {
        char *dst;
        const char *src;
        size_t n;
    } xpart[VK_XFER_THREADS];

    struct vk_backend *dnext; /* the device's list of backends (blist_lock) */

    /* The last compute, when every command buffer of it was recorded and
     * submitted: a graph stamped the same (tsl_graph.stamp), while nothing
     * its commands rest on moved, is submitted again as it is (vk_replay) */
    struct {
        bool ok;
        tsl_tensor **nodes;
        int n, used;
        uint64_t stamp, epoch, mem_gen, support;
        uint32_t gen;
    } rp;

    /* counters */
    _Atomic uint64_t st_computes, st_submits, st_dispatches, st_barriers, st_transfers, st_reused, st_set_dispatches;
    _Atomic uint64_t st_replays;
    double st_encode_ms, last_us_per_node;
    int last_cbs;
    double st_gpu_ms, last_gpu_us;
    uint64_t st_up_bytes;
    double st_up_ms;
};
typedef struct vk_backend vk_backend;

static const tsl_backend_vtable vk_vtable;

static const char *vk_label(const tsl_tensor *t) { return t && t->name[0] ? t->name : "(unnamed)"; }

vk_device *vk_backend_dev(const tsl_backend *b) {
    return b && b->vt == &vk_vtable ? ((const vk_backend *)b)->dev : NULL;
}

/* ---- resolve ------------------------------------------------------------------ */

/* The buffer lookup: t must have data in a buffer of this device. Records
 * into the current sink (the compute's ledger) when not. */
static bool vk_lookup(vk_backend *be, uint64_t compute, int i, const tsl_tensor *node, tsl_tensor *t) {
    fault_site site = {.compute = compute, .node = i, .tensor = t};
    if (fault_plan_fire(be->base.faults, TSL_FAULT_NOBUF, &site) || !backend_tensor_resolve(t) || !t->buffer) {
        ledger_record_nobuf(i, node, t);
        return false;
    }
    const tsl_backend *owner = t->buffer->be;
    if (owner->vt != &vk_vtable || ((const vk_backend *)owner)->dev != be->dev) {
        ledger_record(TSL_FAILED, i, node,
                      "tensor '%s' is in a %s buffer, which %s cannot read (copy it into a buffer of this "
                      "device; the scheduler does): nothing of this graph was submitted",
                      vk_label(t), tsl_backend_name(owner), be->name);
        return false;
    }
    if (((const vk_buf *)t->buffer->handle)->gen != be->dev->gen) {
        ledger_record(TSL_ALLOC_FAILED, i, node,
                      "tensor '%s' is in a buffer that got no memory when the device was recovered; recover again "
                      "or free it",
                      vk_label(t));
        return false;
    }
    return true;
}

/* The binding of t read as es-byte elements. */
static bool vk_bind_tensor(vk_backend *be, int i, const tsl_tensor *node, const tsl_tensor *t, int es, vk_bind *out) {
    const tsl_buffer *buf = t->buffer;
    const vk_buf *vb = buf->handle;
    uintptr_t a = (uintptr_t)t->data, b0 = (uintptr_t)buf->base;
    size_t nb = tsl_nbytes(t);
    if (a < b0 || a - b0 > buf->size || nb > buf->size - (a - b0)) {
        ledger_record(TSL_FAILED, i, node, "tensor '%s' (%zu bytes) lies outside its %zu-byte buffer", vk_label(t), nb,
                      buf->size);
        return false;
    }
    const VkPhysicalDeviceLimits *lim = &be->dev->props.limits;
    VkDeviceSize align = lim->minStorageBufferOffsetAlignment ? lim->minStorageBufferOffsetAlignment : 1;
    VkDeviceSize off = vb->off + (VkDeviceSize)(a - b0);
    VkDeviceSize base = off / align * align, resid = off - base;
    const tsl_tensor *root;
    size_t roff;
    if (backend_q4s(t, &root, &roff)) {
        /* Q4_0 weights in the split layout (backend_impl.h): the kernels
         * find a block's group from its 16-bit word in the binding, so the
         * binding starts on a group of the root, on the device's alignment */
        if (roff % CORE_Q4S_BYTES != 0) {
            ledger_record(TSL_FAILED, i, node,
                          "tensor '%s' views Q4_0 weight '%s' from byte %zu, inside a group of %u blocks of the "
                          "layout %s keeps it in (views of it start on %u-byte groups)",
                          vk_label(t), root->name, roff, CORE_Q4S_BLOCKS, be->name, (unsigned)CORE_Q4S_BYTES);
            return false;
        }
        const VkDeviceSize r0 = off - roff, g = CORE_Q4S_BYTES;
        VkDeviceSize step = g;
        while (step % align) step += g; /* lcm(group, align): align is a power of two */
        if (r0 % align != 0) {
            ledger_record(TSL_FAILED, i, node,
                          "Q4_0 weight '%s' starts at byte %llu of its buffer, not on the device's %llu-byte "
                          "binding alignment its layout needs",
                          root->name, (unsigned long long)(r0 - vb->off), (unsigned long long)align);
            return false;
        }
        base = r0 + (off - r0) / step * step;
        resid = off - base;
    }
    if (resid % (VkDeviceSize)es) {
        ledger_record(TSL_FAILED, i, node,
                      "tensor '%s' starts at byte offset %llu, not a multiple of its %d-byte elements", vk_label(t),
                      (unsigned long long)(a - b0), es);
        return false;
    }
    VkDeviceSize range = (resid + nb + 3) / 4 * 4;
    if (range < 4) range = 4;
    if (range > vb->blk->size - base) range = vb->blk->size - base;
    if (range > lim->maxStorageBufferRange) {
        ledger_record(TSL_FAILED, i, node, "tensor '%s' (%zu bytes) is larger than one kernel binding can see (%u bytes)",
                      vk_label(t), nb, lim->maxStorageBufferRange);
        return false;
    }
    *out = (vk_bind){.blk = vb->blk, .off = base, .range = range, .eoff = (uint32_t)(resid / (VkDeviceSize)es),
                     .lo = off, .hi = off + nb};
    return true;
}

static void vk_types_text(const tsl_tensor *n, char *buf, size_t size) {
    size_t k = (size_t)snprintf(buf, size, "%s", tsl_type_name(n->type));
    for (int j = 0; j < TSL_MAX_SRC && n->src[j] && k < size; j++)
        k += (size_t)snprintf(buf + k, size - k, "%s%s", j ? ", " : " from ", tsl_type_name(n->src[j]->type));
}

/* A build failure of kernel id as a record, from the device's cache (k)
 * or from an injected fault (k NULL). */
static void vk_kernel_record(vk_backend *be, int i, const tsl_tensor *node, int id, const vk_kernel *k, tsl_error *rec) {
    const char *name = vk_kernel_descs[id].name;
    error_set(rec, TSL_FAILED, be->name, be->device, i, node, name, "could not be built");
    snprintf(rec->driver_domain, sizeof rec->driver_domain, "VkResult");
    rec->driver_code = k ? k->fail_code : VK_ERROR_UNKNOWN;
    snprintf(rec->driver_text, sizeof rec->driver_text, "%s",
             k ? k->fail_text : "VK_ERROR_UNKNOWN: kernel build failed (injected fault)");
}

/* A compute's own scratch of sz bytes into *slot, the one there (of a
 * device a recovery replaced, or too small) freed first, through the
 * allocation fault site of node i's kernel kname: false, with aerr, where
 * it is refused. Nothing of this backend runs then (vk_compute finished
 * what was pending). */
static bool vk_scratch_renew(vk_backend *be, vk_buf **slot, VkDeviceSize sz, uint64_t compute, int i,
                             const tsl_tensor *node, const char *kname, tsl_error *aerr) {
    vk_mem_free(be->dev, *slot); /* one of a device recovery replaced: a record only */
    *slot = NULL;
    fault_site site = {.compute = compute, .node = i, .tensor = node, .kernel = kname, .bytes = sz};
    if (fault_plan_fire(be->base.faults, TSL_FAULT_ALLOC, &site)) {
        error_set(aerr, TSL_ALLOC_FAILED, be->name, be->device, -1, NULL, NULL, "injected fault");
        return false;
    }
    *slot = vk_mem_alloc(be->dev, sz, be->name, aerr);
    return *slot != NULL;
}

/* Kernel k, dispatched before node i's own kernel kname (a quantizer, a
 * copy), into *out; its failure to build is kname's, recorded as such. */
static bool vk_prior_kernel(vk_backend *be, int i, tsl_tensor *node, const char *kname, int k, VkPipeline *out) {
    const vk_kernel *fk = NULL;
    *out = vk_kernel_get(be->dev, k, &fk);
    if (*out) return true;
    tsl_error rec;
    vk_kernel_record(be, i, node, k, fk, &rec);
    backend_kernel_fail(&be->base, kname, &rec);
    ledger_record_kernel(i, node, kname, rec.driver_domain, rec.driver_code, rec.driver_text);
    return false;
}

/* Kernel id's pipeline for node i, through the kernel fault site; a
 * failure (injected, or the build's) goes into this backend's failure
 * cache, as a real one, until recovery, and into the compute's record. */
static VkPipeline vk_node_pipe(vk_backend *be, uint64_t compute, int i, tsl_tensor *node, int id) {
    const char *kname = vk_kernel_descs[id].name;
    tsl_error rec;
    fault_site site = {.compute = compute, .node = i, .tensor = node, .kernel = kname};
    const bool inj = fault_plan_fire(be->base.faults, TSL_FAULT_KERNEL, &site);
    const vk_kernel *fk = NULL;
    VkPipeline pipe = inj ? VK_NULL_HANDLE : vk_kernel_get(be->dev, id, &fk);
    if (!pipe) {
        vk_kernel_record(be, i, node, id, inj ? NULL : fk, &rec);
        backend_kernel_fail(&be->base, kname, &rec);
        ledger_record_kernel(i, node, kname, rec.driver_domain, rec.driver_code, rec.driver_text);
    }
    return pipe;
}

/* The kernel lookup of node i: fills the exec entry's kernel and pipeline,
 * or records why there is none. A kernel that fails to build (now, before,
 * on another backend of the device, or by injection) goes into this
 * backend's failure cache, so supports_op answers false for its nodes
 * until recovery rebuilds the kernels. */
static bool vk_resolve_kernel(vk_backend *be, uint64_t compute, int i, tsl_tensor *node, vk_exec *x) {
    vk_device *d = be->dev;
    tsl_error rec;
    int id = vk_kernel_for(d, node, &be->base, true);
    if (id < 0) {
        int failed = vk_kernel_for(d, node, &be->base, false);
        if (failed < 0) {
            char types[96];
            vk_types_text(node, types, sizeof types);
            ledger_record(TSL_FAILED, i, node,
                          "no Vulkan kernel for %s with these types or layout (%s); the scheduler runs it on "
                          "another backend",
                          tsl_op_name(node->op), types);
            return false;
        }
        const char *fname = vk_kernel_descs[failed].name;
        if (!backend_kernel_failed(&be->base, fname, &rec)) {
            vk_kernel_record(be, i, node, failed, &d->k[failed], &rec);
            backend_kernel_fail(&be->base, fname, &rec);
        }
        ledger_record_kernel(i, node, fname, rec.driver_domain, rec.driver_code, rec.driver_text);
        return false;
    }
    const char *kname = vk_kernel_descs[id].name;
    VkPipeline pipe = vk_node_pipe(be, compute, i, node, id);
    if (!pipe) return false;
    x->kernel = id;
    x->pipe = pipe;
    x->pipe2 = VK_NULL_HANDLE;
    x->cvt = x->wcvt = VK_NULL_HANDLE;
    if (vk_mm_conv(id)) {
        /* the copies to F16 run first */
        const bool w = vk_mm_wconv(id);
        const int ck[2] = {VK_K_CPY_F32_F16, node->src[0]->type == TSL_TYPE_Q8_0 ? VK_K_CPY_Q8_0_F16 : VK_K_CPY_Q4_0_F16};
        VkPipeline *cp[2] = {&x->cvt, &x->wcvt};
        vk_buf **scr[2] = {&be->hscr, &be->wscr};
        const uint64_t need[2] = {vk_mm_conv_bytes(node), w ? vk_mm_wconv_bytes(node) : 0};
        for (int j = 0; j < (w ? 2 : 1); j++) {
            if (!vk_prior_kernel(be, i, node, kname, ck[j], cp[j])) return false;
            /* a scratch too small is replaced */
            if (!*scr[j] || (*scr[j])->gen != d->gen || (*scr[j])->size < need[j]) {
                tsl_error aerr;
                const VkDeviceSize sz = (need[j] + ((VkDeviceSize)1 << 20) - 1) & ~(((VkDeviceSize)1 << 20) - 1);
                if (!vk_scratch_renew(be, scr[j], sz, compute, i, node, kname, &aerr)) {
                    ledger_record(TSL_ALLOC_FAILED, i, node, "the scratch of %s (%llu bytes) for kernel '%s': %s",
                                  be->name, (unsigned long long)sz, kname, aerr.message);
                    return false;
                }
            }
        }
    }
    if (vk_mm_needs_quant(id)) {
        /* the column quantizer runs first */
        if (!vk_prior_kernel(be, i, node, kname, VK_K_QUANTIZE_Q8_F32, &x->pipe2)) return false;
        if (!be->qscr || be->qscr->gen != d->gen) {
            tsl_error aerr;
            if (!vk_scratch_renew(be, &be->qscr, VK_QSCR_SLOT + VK_SYNC_BYTES, compute, i, node, kname, &aerr)) {
                ledger_record(TSL_ALLOC_FAILED, i, node, "the scratch of %s (%llu bytes) for kernel '%s': %s",
                              be->name, (unsigned long long)(VK_QSCR_SLOT + VK_SYNC_BYTES), kname, aerr.message);
                return false;
            }
        }
    }
    return true;
}

/* The resolve pass: fills be->exec; everything wrong records into the
 * current sink. Returns the number of compute nodes. */
static int vk_resolve(vk_backend *be, tsl_graph *g, uint64_t compute) {
    int ne = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        tsl_tensor *node = g->nodes[i];
        if (!node) {
            ledger_record(TSL_FAILED, i, NULL, "graph node %d is NULL", i);
            continue;
        }
        bool ok = true;
        for (int j = 0; j < TSL_MAX_SRC; j++)
            if (node->src[j] && !vk_lookup(be, compute, i, node, node->src[j])) ok = false;
        if (!vk_lookup(be, compute, i, node, node)) ok = false;
        if (tsl_op_is_view(node->op) || node->op == TSL_OP_NONE || !ok) continue;
        if (tsl_nelements(node) == 0) continue; /* nothing to compute */
        vk_exec *x = &be->exec[ne];
        memset(x, 0, sizeof *x);
        x->node = node;
        x->index = i;
        if (!vk_resolve_kernel(be, compute, i, node, x)) continue;
        const uint8_t *es = vk_kernel_descs[x->kernel].esize;
        double bytes = 0;
        for (int j = 0; j < 4 && ok; j++) {
            const tsl_tensor *t = j < 3 ? node->src[j] : node;
            if (!es[j] || !t) continue;
            /* a converting product's kernel reads F16 at 1, from the
             * scratch; the node's F32 activations are its copy's source */
            const int e = j == 1 && x->cvt ? 4 : es[j];
            ok = vk_bind_tensor(be, i, node, t, e, &x->b[j]);
            bytes += (double)tsl_nbytes(t);
        }
        if (ok && backend_q4s(node, NULL, NULL)) {
            ledger_record(TSL_FAILED, i, node,
                          "%s writes into Q4_0 weight '%s', which %s keeps in a layout of its own: a weight "
                          "(TSL_FLAG_WEIGHT) is written only through tsl_tensor_set",
                          tsl_op_name(node->op), vk_label(node), be->name);
            ok = false;
        }
        if (!ok) continue;
        x->cost_s = core_node_flops(node) / 1e9 + bytes / 1e9;
        ne++;
    }
    return ne;
}

/* ---- split Q4_0 weights -------------------------------------------------------- */

/* After fusion: the integer-dot products whose weights are held split
 * (backend_q4s) get their kernel's twin that reads that layout (the same
 * code, vk_kernels_mm.h VK_MM_Q4S_SET). A twin that fails to build fails
 * its node, as its kernel would. */
static void vk_q4s_twins(vk_backend *be, uint64_t compute, int n) {
    for (int k = 0; k < n; k++) {
        vk_exec *x = &be->exec[k];
        const int t = x->kernel >= 0 ? vk_mm_q4s_twin(x->kernel) : -1;
        if (t < 0 || !x->node || !backend_q4s(x->node->src[0], NULL, NULL)) continue;
        VkPipeline pipe = vk_node_pipe(be, compute, x->index, x->node, t);
        if (!pipe) continue;
        x->kernel = t;
        x->pipe = pipe;
    }
}

/* ---- fusion ------------------------------------------------------------------- */

/* Is t a plain F32 row of n values (a norm's weight: one row, broadcast)? */
static bool vk_is_weight_row(const tsl_tensor *t, int64_t n) {
    return t && t->type == TSL_TYPE_F32 && t->ne[0] == n && t->ne[1] == 1 && t->ne[2] == 1 && t->ne[3] == 1;
}

/* Same shape and strides? */
static bool vk_same_layout(const tsl_tensor *a, const tsl_tensor *b) {
    return memcmp(a->ne, b->ne, sizeof a->ne) == 0 && memcmp(a->nb, b->nb, sizeof a->nb) == 0;
}

/* Is v a 2-D reshape of the rope output r, [ne0 ne1, ne2] (the tokens as
 * rows), as a decoder hands the rotated keys to its cache? */
static bool vk_rope_rows(const tsl_tensor *v, const tsl_tensor *r) {
    return v && v != r && v->src[0] == r && v->view_src == r && v->view_offs == 0 && v->type == TSL_TYPE_F32 &&
           tsl_is_contiguous(v) && tsl_is_contiguous(r) && r->ne[3] == 1 && v->ne[0] == r->ne[0] * r->ne[1] &&
           v->ne[1] == r->ne[2] && v->ne[2] == 1 && v->ne[3] == 1;
}

/* Can execs k, k + 1 be one dispatch: 1 mul(rms_norm(x), w) (rms_norm_mul),
 * 2 add(r, the integer-dot mat-vec's result) in either order (the mat-vec
 * adds r as it stores), 3 set_rows(cache, reshape(rope(k, pos)), pos, 1)
 * into an F16 cache (rope_set_rows: the rotated keys go straight into the
 * cache rows their positions name); 0 no. Whether the first node's output
 * (and kind 3's reshape) is read by anything else is asked apart
 * (vk_fuse). */
static int vk_fusable(const vk_exec *x, const vk_exec *y) {
    const tsl_tensor *a = x->node, *b = y->node;
    if (a->flags & TSL_FLAG_OUTPUT) return 0;
    if (a->op == TSL_OP_ROPE && b->op == TSL_OP_SET_ROWS && x->kernel == VK_K_ROPE_F32 &&
        y->kernel == VK_K_SET_ROWS_F16 && op_get_i32(b, 0) == 1 && a->src[1] && b->src[1] == a->src[1] &&
        vk_rope_rows(b->src[0], a) && !(b->src[0]->flags & TSL_FLAG_OUTPUT) && b->ne[0] == b->src[0]->ne[0] &&
        b->nb[0] == 2 && b->ne[2] == 1 && b->ne[3] == 1)
        return 3;
    if (a->type != TSL_TYPE_F32 || b->type != TSL_TYPE_F32) return 0;
    if (a->op == TSL_OP_RMS_NORM && b->op == TSL_OP_MUL && b->src[0] == a && x->kernel == VK_K_RMS_NORM_F32 &&
        y->kernel == VK_K_MUL_F32 && vk_is_weight_row(b->src[1], a->ne[0]) && memcmp(b->ne, a->ne, sizeof a->ne) == 0)
        return 1;
    if (a->op == TSL_OP_MUL_MAT && x->pipe2 && b->op == TSL_OP_ADD && y->kernel == VK_K_ADD_F32 &&
        (b->src[0] == a) != (b->src[1] == a)) {
        const tsl_tensor *r = b->src[0] == a ? b->src[1] : b->src[0];
        if (r->type == TSL_TYPE_F32 && vk_same_layout(r, a) && vk_same_layout(b, a)) return 2;
    }
    return 0;
}

/* Are execs k, k + 1, k + 2 attention for a few query columns,
 * mul_mat(V, soft_max(mul_mat(K, q), mask)), that attn_dec.comp and
 * attn_combine.comp compute in two dispatches? Returns attn_dec's kernel,
 * or -1. F16 K [hd, n_kv, hk] and V [n_kv, hdv, hk] (both dense along their
 * first dimension, in one memory block: they are bound as one span), F32 q
 * [hd, N, H] with H a multiple of hk, N <= 8, hd and hdv <= 256, the mask
 * (if any) one [>= n_kv, >= N] matrix, the partials within the scratch.
 * Whether kq and p are read by anything else is asked apart. The output may
 * sit where q was (the graph's memory is planned for the nodes apart, and
 * q is dead once kq exists): the combine pass writes it only after every
 * key range has read q. */
static int vk_attn_fusable(const vk_device *d, const vk_exec *x, const vk_exec *y, const vk_exec *z) {
    const tsl_tensor *kq = x->node, *sm = y->node, *o = z->node;
    if (kq->op != TSL_OP_MUL_MAT || sm->op != TSL_OP_SOFT_MAX || o->op != TSL_OP_MUL_MAT) return -1;
    if (sm->src[0] != kq || o->src[1] != sm || ((kq->flags | sm->flags) & TSL_FLAG_OUTPUT)) return -1;
    const tsl_tensor *kt = kq->src[0], *qt = kq->src[1], *vt = o->src[0], *mt = sm->src[1];
    if (kt->type != TSL_TYPE_F16 || vt->type != TSL_TYPE_F16 || qt->type != TSL_TYPE_F32 || kq->type != TSL_TYPE_F32 ||
        sm->type != TSL_TYPE_F32 || o->type != TSL_TYPE_F32)
        return -1;
    const int64_t hd = kt->ne[0], n_kv = kt->ne[1], hk = kt->ne[2], N = qt->ne[1], H = qt->ne[2], hdv = vt->ne[1];
    if (kt->ne[3] != 1 || qt->ne[3] != 1 || vt->ne[3] != 1 || qt->ne[0] != hd || vt->ne[0] != n_kv ||
        vt->ne[2] != hk || hk <= 0 || H % hk != 0 || N < 1 || N > 8 || hd > 256 || hdv > 256 || n_kv < 1)
        return -1;
    if (kt->nb[0] != 2 || vt->nb[0] != 2 || kt->nb[1] % 2 || kt->nb[2] % 2 || vt->nb[1] % 2 || vt->nb[2] % 2 ||
        qt->nb[0] % 4 || qt->nb[1] % 4 || qt->nb[2] % 4 || o->nb[0] % 4 || o->nb[1] % 4 || o->nb[2] % 4)
        return -1;
    if (o->ne[0] != hdv || o->ne[1] != N || o->ne[2] != H || o->ne[3] != 1) return -1;
    int kernel = VK_K_ATTN_DEC_F16;
    if (mt) {
        if ((mt->type != TSL_TYPE_F32 && mt->type != TSL_TYPE_F16) || mt->ne[0] < n_kv || mt->ne[1] < N ||
            mt->ne[2] != 1 || mt->ne[3] != 1 || mt->nb[0] != tsl_type_block_size(mt->type))
            return -1;
        kernel = mt->type == TSL_TYPE_F32 ? VK_K_ATTN_DEC_F16_MASK_F32 : VK_K_ATTN_DEC_F16_MASK_F16;
    }
    const vk_bind *kb = &x->b[0], *vb = &z->b[0];
    if (!kb->blk || kb->blk != vb->blk) return -1;
    const VkDeviceSize lo = kb->off < vb->off ? kb->off : vb->off;
    const VkDeviceSize hi = kb->off + kb->range > vb->off + vb->range ? kb->off + kb->range : vb->off + vb->range;
    if (hi - lo > d->props.limits.maxStorageBufferRange || (hi - lo) / 2 > UINT32_MAX) return -1;
    /* the partials fit the scratch */
    uint32_t nsplit, klen;
    vk_attn_split(H * N, n_kv, &nsplit, &klen);
    if ((uint64_t)(H * N) * nsplit * (uint64_t)(hdv + 2) * 4 > VK_ASCR_SIZE) return -1;
    return kernel;
}

/* A scratch buffer, as a binding. */
static vk_bind vk_buf_bind(const vk_buf *q) {
    return (vk_bind){.blk = q->blk, .off = q->off, .range = q->size, .eoff = 0, .lo = q->off, .hi = q->off + q->size};
}

/* The span of one memory block that holds bindings a and b, as one binding
 * (element offsets left to the caller). */
static vk_bind vk_span_of(const vk_bind *a, const vk_bind *b) {
    vk_bind s = *a;
    s.off = a->off < b->off ? a->off : b->off;
    s.range = (a->off + a->range > b->off + b->range ? a->off + a->range : b->off + b->range) - s.off;
    s.eoff = 0;
    s.lo = a->lo < b->lo ? a->lo : b->lo;
    s.hi = a->hi > b->hi ? a->hi : b->hi;
    return s;
}

/* The integer-dot mat-vec's column scratch, as a binding. */
static vk_bind vk_qscr_bind(const vk_backend *be) { return vk_buf_bind(be->qscr); }

/* The quantizer into exec m (rms_norm_mul, swiglu): where its output is one
 * dense row of at most max_n values (a multiple of 32) and an integer-dot
 * mat-vec among the next execs (from `from`, not yet fused) reads it, m
 * writes the row quantized into the scratch as well, and the mat-vecs find
 * their column there (vk_encode_node): a dispatch and a level fewer. */
static bool vk_fuse_qout(vk_backend *be, vk_exec *m, int from, int n, int64_t max_n) {
    const tsl_tensor *t = m->node;
    if (be->no_qfuse || !be->qscr || be->qscr->gen != be->dev->gen || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1 ||
        t->ne[0] % 32 != 0 || t->ne[0] > max_n || t->nb[0] != sizeof(float))
        return false;
    bool read = false;
    for (int j = from; j < n && j < from + 64 && !read; j++)
        read = be->exec[j].pipe2 && be->exec[j].node->src[1] == t;
    if (!read) return false;
    m->qout = true;
    m->b[2] = vk_qscr_bind(be);
    return true;
}

/* Does fused attention m (two passes, its output quantized) fit attn_dec1:
 * one column, its partials below the scratch's counters, a counter per
 * head, its quantized output within its part of the scratch, hdv whole
 * Q8_0 blocks, and the output apart from q or exactly over it (or, noout,
 * not written at all)? */
static bool vk_attn1_fits(const vk_exec *m, bool noout) {
    const tsl_tensor *kq = m->fused, *kt = kq->src[0], *qt = kq->src[1], *o = m->node;
    const int64_t H = qt->ne[2], N = qt->ne[1], hdv = o->ne[0];
    if (N != 1 || hdv % 32 != 0 || H > 4096 || H * hdv > (int64_t)(40u << 10)) return false;
    uint32_t nsplit, klen;
    vk_attn_split(H * N, kt->ne[1], &nsplit, &klen);
    if ((uint64_t)H * nsplit * (uint64_t)(hdv + 2) * 4 > (uint64_t)VK_ASCR_CNT_WORD * 4) return false;
    const vk_bind *q = &m->b[1], *out = &m->b[VK_BIND_DST];
    if (noout || !(q->blk == out->blk && q->lo < out->hi && out->lo < q->hi)) return true;
    /* over q (the graph's memory planner may put it there: q is dead once
     * the scores exist), then exactly, head over head: a head's output is
     * written by its last range, after every range of that head read q */
    return q->off + (VkDeviceSize)q->eoff * 4 == out->off + (VkDeviceSize)out->eoff * 4 && qt->ne[0] == hdv &&
           qt->nb[0] == 4 && o->nb[0] == 4 && qt->nb[2] == o->nb[2];
}

/* Is o read by node `reader` alone (itself or through views of it), with
 * neither o nor any view of it a graph output? Then a kernel that hands
 * reader its values another way may leave o unwritten. */
static bool vk_only_reader(const tsl_graph *g, const tsl_tensor *o, const tsl_tensor *reader) {
    if (o->flags & TSL_FLAG_OUTPUT) return false;
    for (int i = 0; i < g->n_nodes; i++) {
        const tsl_tensor *t = g->nodes[i];
        if (!t || t == o) continue;
        if (t->view_src == o) {
            if (t->flags & TSL_FLAG_OUTPUT) return false;
            if (tsl_op_is_view(t->op)) continue; /* a view of o: its readers are checked as o's */
        }
        if (t == reader) continue;
        for (int j = 0; j < TSL_MAX_SRC; j++) {
            const tsl_tensor *s = t->src[j];
            if (s && (s == o || s->view_src == o)) return false;
        }
    }
    return true;
}

/* Does v hold exactly t's elements, in t's order (t itself, or a view of
 * it at its start, both dense)? */
static bool vk_same_row(const tsl_tensor *v, const tsl_tensor *t) {
    if (v == t) return true;
    return v && v->view_src == t && v->view_offs == 0 && v->type == t->type && tsl_is_contiguous(v) &&
           tsl_is_contiguous(t) && tsl_nelements(v) == tsl_nelements(t);
}

/* Slots of an open-addressed table for up to two keys an exec of n execs:
 * a power of two at least four times the keys, so probes stay short. */
static size_t vk_table_size(int n) {
    size_t s = 1024;
    while (s < 8 * (size_t)(n > 0 ? n : 1) + 16) s *= 2;
    return s;
}

/* Tensors the fusion passes ask about, with their readers counted in one
 * pass over the graph, in an open-addressed table keyed by address and
 * sized to the graph's execs (vk_table_size). vk_fuse counts a node once
 * per tensor it reads (its own loop); vk_rc_count, for the fusions that
 * leave a root unwritten (vk_fuse_qkv_ropes, vk_fuse_norms), counts a
 * root's readers as the nodes that read it or a view of it (a node once,
 * however many of its sources do; the views themselves are not readers,
 * and a node that is not a view yet lies in the root's memory counts as
 * one), and `out` says whether it or a view of it is a graph output. */
typedef struct vk_rcount {
    size_t set; /* slots */
    const tsl_tensor **key;
    int *n;
    bool *out;
    int used;
} vk_rcount;

static void vk_rc_free(vk_rcount *rc) {
    if (rc) free(rc->key), free(rc->n), free(rc->out), free(rc);
}

/* A table for the tensors of n execs (NULL: no memory). */
static vk_rcount *vk_rc_new(int n) {
    vk_rcount *rc = calloc(1, sizeof *rc);
    if (!rc) return NULL;
    rc->set = vk_table_size(n);
    rc->key = calloc(rc->set, sizeof *rc->key);
    rc->n = calloc(rc->set, sizeof *rc->n);
    rc->out = calloc(rc->set, sizeof *rc->out);
    if (rc->key && rc->n && rc->out) return rc;
    vk_rc_free(rc);
    return NULL;
}

static int vk_rc_slot(const vk_rcount *rc, const tsl_tensor *t) {
    size_t h = ((uintptr_t)t >> 4) % rc->set;
    while (rc->key[h] && rc->key[h] != t) h = (h + 1) % rc->set;
    return (int)h;
}

/* Add t (false: the table is full). */
static bool vk_rc_add(vk_rcount *rc, const tsl_tensor *t) {
    const int h = vk_rc_slot(rc, t);
    if (rc->key[h]) return true;
    if ((size_t)rc->used >= rc->set / 2 - 1) return false;
    rc->key[h] = t;
    rc->n[h] = 0;
    rc->out[h] = (t->flags & TSL_FLAG_OUTPUT) != 0;
    rc->used++;
    return true;
}

/* Is t in the candidates' set with exactly one reader? */
static bool vk_fuse_once(const vk_rcount *rc, const tsl_tensor *t) {
    const int h = vk_rc_slot(rc, t);
    return rc->key[h] == t && rc->n[h] == 1;
}

/* Can rope exec r (a rope, or rope_set_rows) absorb exec m, the one
 * before it, when m is rms_norm_mul, m's output is r's rope input, and the
 * rope has no frequency factors (w takes their binding)? Whether anything
 * else reads m's output is asked apart. Returns the rope_norm kernel, or
 * -1. */
static int vk_norm_rope(const vk_exec *m, const vk_exec *r) {
    if (m->kernel != VK_K_RMS_NORM_MUL_F32 || m->qout) return -1;
    const int k = r->kernel == VK_K_ROPE_F32            ? VK_K_ROPE_NORM_F32
                  : r->kernel == VK_K_ROPE_F32_FP32     ? VK_K_ROPE_NORM_F32_FP32
                  : r->kernel == VK_K_ROPE_SET_ROWS_F16 ? VK_K_ROPE_NORM_SET_ROWS_F16
                                                        : -1;
    if (k < 0) return -1;
    const tsl_tensor *rope = r->kernel == VK_K_ROPE_SET_ROWS_F16 ? r->fused : r->node;
    const tsl_tensor *mul = m->node, *x = m->fused->src[0];
    if (rope->op != TSL_OP_ROPE || rope->src[0] != mul || rope->src[2] || (mul->flags & TSL_FLAG_OUTPUT)) return -1;
    return memcmp(x->ne, mul->ne, sizeof x->ne) == 0 ? k : -1;
}

/* Rope exec r, about to be the w-th exec: absorb the exec before it (the
 * q or k norm of qwen3, vk_norm_rope) where its output has this one reader
 * and the kernel builds; then r takes its place. pipes/failed cache the
 * three rope_norm kernels for the pass. */
static bool vk_fuse_norm_rope(vk_backend *be, const vk_rcount *rc, vk_exec *r, int w, VkPipeline pipes[3],
                              bool failed[3]) {
    if (w < 1) return false;
    vk_exec *m = &be->exec[w - 1];
    const int k = vk_norm_rope(m, r);
    if (k < 0 || !vk_fuse_once(rc, m->node)) return false;
    _Static_assert(VK_K_ROPE_NORM_F32_FP32 == VK_K_ROPE_NORM_F32 + 1 && VK_K_ROPE_NORM_SET_ROWS_F16 == VK_K_ROPE_NORM_F32 + 2,
                   "the three rope_norm kernels are consecutive (vk.h): pipes[] is indexed by them");
    const int slot = k - VK_K_ROPE_NORM_F32;
    vk_device *d = be->dev;
    if (!pipes[slot] && !failed[slot]) {
        const vk_kernel *fk = NULL;
        if (d->k[k].runnable) pipes[slot] = vk_kernel_get(d, k, &fk);
        failed[slot] = !pipes[slot]; /* a kernel that fails to build leaves them apart */
    }
    if (!pipes[slot]) return false;
    vk_exec f = *r;
    f.kernel = k;
    f.pipe = pipes[slot];
    f.norm = m->fused;
    f.b[0] = m->b[0]; /* the norm's source */
    f.b[2] = m->b[1]; /* w */
    f.cost_s += m->cost_s;
    *m = f;
    return true;
}

/* Pairs of nodes into one dispatch (vk_fusable) where the first node's
 * output is read by the second alone and is no graph output (the scheduler
 * flags tensors other splits read as outputs): the first exec is dropped
 * (rms_norm_mul) or absorbs the second (a mat-vec storing r + its result).
 * Likewise attention's three nodes (vk_attn_fusable) into attn_dec.
 * Off with TSL_VULKAN_FUSE=0. Returns the new number of execs. */
static int vk_fuse(vk_backend *be, const tsl_graph *g, int n) {
    if (be->no_fuse || n < 2) return n;
    VkPipeline rn_pipe[3] = {VK_NULL_HANDLE, VK_NULL_HANDLE, VK_NULL_HANDLE};
    bool rn_failed[3] = {false, false, false};
    vk_device *d = be->dev;
    /* the candidates' first nodes (at most two an exec) with their use
     * counts, in a table sized to the graph */
    vk_rcount *rc = vk_rc_new(n);
    if (!rc) return n; /* no fusion: the nodes apart are always right */
    bool room = true;
    for (int k = 0; k + 1 < n && room; k++) {
        const bool attn = k + 2 < n && vk_attn_fusable(d, &be->exec[k], &be->exec[k + 1], &be->exec[k + 2]) >= 0;
        const int kind = attn ? 0 : vk_fusable(&be->exec[k], &be->exec[k + 1]);
        if (!attn && !kind) continue;
        for (int e = 0; e < (attn || kind == 3 || kind == 1 ? 2 : 1); e++) {
            /* attention: its first two nodes; rope_set_rows: the rope and
             * its reshape; rms_norm_mul: the norm and the MUL (a rope may
             * absorb it: vk_fuse_norm_rope) */
            const tsl_tensor *t = kind == 3 && e == 1 ? be->exec[k + 1].node->src[0] : be->exec[k + e].node;
            room = room && vk_rc_add(rc, t);
        }
    }
    /* the readers: each node once per tensor it reads (a view reads its
     * source as src[0] and as view_src) */
    for (int i = 0; i < g->n_nodes && rc->used > 0; i++) {
        const tsl_tensor *t = g->nodes[i];
        if (!t) continue;
        for (int j = 0; j <= TSL_MAX_SRC; j++) {
            const tsl_tensor *r = j < TSL_MAX_SRC ? t->src[j] : t->view_src;
            bool again = false;
            for (int i2 = 0; i2 < j && !again; i2++) again = t->src[i2] == r;
            if (!r || again) continue;
            const int h = vk_rc_slot(rc, r);
            if (rc->key[h]) rc->n[h]++;
        }
    }
    const vk_kernel *fk = NULL;
    VkPipeline nm_pipe = VK_NULL_HANDLE, sw_pipe = VK_NULL_HANDLE, rs_pipe = VK_NULL_HANDLE, w8_pipe = VK_NULL_HANDLE;
    bool w8_failed = false, sw_failed = false, attn_failed = false, rs_failed = false, one_failed = false;
    int w = 0;
    for (int k = 0; k < n; k++) {
        vk_exec *x = &be->exec[k];
        const int ak = k + 2 < n && !attn_failed ? vk_attn_fusable(d, x, &be->exec[k + 1], &be->exec[k + 2]) : -1;
        if (ak >= 0 && vk_fuse_once(rc, x->node) && vk_fuse_once(rc, be->exec[k + 1].node) &&
            d->k[ak].runnable && d->k[VK_K_ATTN_COMBINE_F32].runnable) {
            /* a kernel that fails to build, or no memory for the partials,
             * leaves the three nodes apart */
            VkPipeline ap = vk_kernel_get(d, ak, &fk);
            VkPipeline cp = ap ? vk_kernel_get(d, VK_K_ATTN_COMBINE_F32, &fk) : VK_NULL_HANDLE;
            attn_failed = !ap || !cp;
            if (!attn_failed && (!be->ascr || be->ascr->gen != d->gen)) {
                tsl_error aerr;
                if (!vk_scratch_renew(be, &be->ascr, VK_ASCR_SIZE + VK_SYNC_BYTES,
                                      atomic_load_explicit(&be->base.n_computes, memory_order_relaxed),
                                      be->exec[k + 2].index, be->exec[k + 2].node, vk_kernel_descs[ak].name, &aerr)) {
                    TSL_LOGW("%s: no memory for attention's scratch (%s); its nodes run apart", be->name, aerr.message);
                    attn_failed = true;
                }
            }
            if (!attn_failed) {
                /* the outer product takes the three nodes' place */
                const vk_exec *y = &be->exec[k + 1], *z = &be->exec[k + 2];
                vk_exec m = *z;
                m.kernel = ak;
                m.pipe = ap;
                m.pipe2 = cp; /* attn_combine, dispatched second (vk_encode_node) */
                m.fused = x->node;
                m.rb = z->b[0];
                const vk_bind *kb = &x->b[0], *vb = &z->b[0];
                m.b[0] = vk_span_of(kb, vb);
                m.b[0].eoff = kb->eoff + (uint32_t)((kb->off - m.b[0].off) / 2);
                m.b[1] = x->b[1];
                m.b[2] = y->node->src[1] ? y->b[1] : (vk_bind){0};
                m.cost_s += x->cost_s + y->cost_s;
                /* one column whose output an integer-dot mat-vec reads next
                 * as one dense row: the combine pass quantizes it too (the
                 * scratch binding is the combine's, vk_encode_node) */
                const tsl_tensor *o = z->node;
                const int64_t total = tsl_nelements(o);
                if (!be->no_qfuse && be->qscr && be->qscr->gen == d->gen && o->ne[1] == 1 && o->ne[0] % 32 == 0 &&
                    tsl_is_contiguous(o) && d->k[VK_K_ATTN_COMBINE_Q_F32].runnable) {
                    bool read = false;
                    int reader = -1;
                    for (int j = k + 3; j < n && j < k + 67 && !read; j++) {
                        read = be->exec[j].pipe2 && vk_same_row(be->exec[j].node->src[1], o) &&
                               be->exec[j].node->src[1]->ne[0] == total;
                        if (read) reader = j;
                    }
                    VkPipeline qp = read ? vk_kernel_get(d, VK_K_ATTN_COMBINE_Q_F32, &fk) : VK_NULL_HANDLE;
                    if (qp) {
                        m.pipe2 = qp;
                        m.qout = true;
                    }
                    /* ... or in one dispatch (attn_dec1: its last range per
                     * head joins them), where the scratch has room and the
                     * output lies over q, if at all, head over head
                     * (vk_attn1_fits) */
                    const int a1 = ak == VK_K_ATTN_DEC_F16           ? VK_K_ATTN_DEC1_F16
                                   : ak == VK_K_ATTN_DEC_F16_MASK_F32 ? VK_K_ATTN_DEC1_F16_MASK_F32
                                                                      : VK_K_ATTN_DEC1_F16_MASK_F16;
                    /* where the output is not over q that way but its one
                     * reader is the mat-vec right after, the output is not
                     * written at all (noout) */
                    const bool fits = vk_attn1_fits(&m, false);
                    const bool noout = !fits && reader == k + 3 && vk_attn1_fits(&m, true) &&
                                       vk_only_reader(g, o, be->exec[reader].node);
                    if (qp && !one_failed && !be->no_one && (fits || noout) && d->k[a1].runnable) {
                        VkPipeline p1 = vk_kernel_get(d, a1, &fk);
                        one_failed = !p1;
                        if (p1) {
                            m.kernel = a1;
                            m.pipe = p1;
                            m.pipe2 = VK_NULL_HANDLE;
                            m.bx = vk_buf_bind(be->ascr);
                            m.noout = noout;
                        }
                    }
                }
                be->exec[w++] = m;
                k += 2;
                continue;
            }
        }
        int kind = k + 1 < n ? vk_fusable(x, &be->exec[k + 1]) : 0;
        if (kind && !vk_fuse_once(rc, x->node)) kind = 0;
        if (kind == 3 && (rs_failed || !vk_fuse_once(rc, be->exec[k + 1].node->src[0]))) kind = 0;
        if (kind == 3 && !rs_pipe) {
            /* a kernel that fails to build leaves the two nodes apart */
            if (d->k[VK_K_ROPE_SET_ROWS_F16].runnable) rs_pipe = vk_kernel_get(d, VK_K_ROPE_SET_ROWS_F16, &fk);
            rs_failed = !rs_pipe;
            if (rs_failed) kind = 0;
        }
        if (kind == 3) {
            /* the SET_ROWS takes the rope's place: the rope's source,
             * positions and factors, its own cache */
            const vk_exec *y = &be->exec[k + 1];
            vk_exec m = *y;
            m.kernel = VK_K_ROPE_SET_ROWS_F16;
            m.pipe = rs_pipe;
            m.fused = x->node;
            for (int j = 0; j < 3; j++) m.b[j] = x->b[j];
            m.cost_s += x->cost_s;
            k++;
            if (vk_fuse_norm_rope(be, rc, &m, w, rn_pipe, rn_failed)) continue;
            be->exec[w++] = m;
            continue;
        }
        if (kind == 1 && !nm_pipe && d->k[VK_K_RMS_NORM_MUL_F32].runnable)
            nm_pipe = vk_kernel_get(d, VK_K_RMS_NORM_MUL_F32, &fk);
        if (kind == 1 && nm_pipe) {
            /* the MUL takes the norm's place: x from the norm, w and the
             * output its own */
            vk_exec m = be->exec[k + 1];
            m.kernel = VK_K_RMS_NORM_MUL_F32;
            m.pipe = nm_pipe;
            m.fused = x->node;
            m.b[0] = x->b[0];
            m.cost_s += x->cost_s;
            /* a row of 4096 .. 8192 quantized by the variant that holds
             * two chunks in registers (Llama 3 70B's 8192), where it builds */
            const vk_bind b2 = m.b[2];
            if (vk_fuse_qout(be, &m, k + 2, n, 8192) && m.node->ne[0] > 4096) {
                if (!w8_pipe && !w8_failed && d->k[VK_K_RMS_NORM_MUL_W8K_F32].runnable)
                    w8_pipe = vk_kernel_get(d, VK_K_RMS_NORM_MUL_W8K_F32, &fk);
                w8_failed = !w8_pipe;
                if (w8_pipe) {
                    m.kernel = VK_K_RMS_NORM_MUL_W8K_F32;
                    m.pipe = w8_pipe;
                } else {
                    m.qout = false; /* the quantizer apart */
                    m.b[2] = b2;
                }
            }
            be->exec[w++] = m;
            k++;
            continue;
        }
        if (kind == 2) {
            /* the mat-vec stores into the ADD's output, adding r */
            const vk_exec *y = &be->exec[k + 1];
            vk_exec m = *x;
            m.fused = y->node;
            m.rb = y->b[y->node->src[0] == x->node ? 1 : 0];
            m.b[VK_BIND_DST] = y->b[VK_BIND_DST];
            m.cost_s += y->cost_s;
            be->exec[w++] = m;
            k++;
            continue;
        }
        if (x->kernel == VK_K_SWIGLU_F32 && !sw_failed) {
            /* swiglu of two dense rows: the variant that quantizes too */
            const tsl_tensor *a = x->node->src[0], *b = x->node->src[1];
            if (tsl_is_contiguous(a) && tsl_is_contiguous(b) && tsl_same_shape(a, b) &&
                tsl_same_shape(a, x->node)) {
                if (!sw_pipe && d->k[VK_K_SWIGLU_Q_F32].runnable) sw_pipe = vk_kernel_get(d, VK_K_SWIGLU_Q_F32, &fk);
                sw_failed = !sw_pipe;
                if (sw_pipe && vk_fuse_qout(be, x, k + 1, n, INT64_MAX)) {
                    x->kernel = VK_K_SWIGLU_Q_F32;
                    x->pipe = sw_pipe;
                }
            }
        }
        if ((x->kernel == VK_K_ROPE_F32 || x->kernel == VK_K_ROPE_F32_FP32) &&
            vk_fuse_norm_rope(be, rc, x, w, rn_pipe, rn_failed))
            continue;
        if (w != k) be->exec[w] = *x;
        w++;
    }
    vk_rc_free(rc);
    return w;
}

/* Is t a dense F32 view of root ne0 x ne1 elements at byte offset offs
 * (views of views included: a view names its root)? */
static bool vk_part_of(const tsl_tensor *t, const tsl_tensor *root, size_t offs, int64_t ne0, int64_t ne1) {
    return t && t->view_src == root && t->view_offs == offs && t->type == TSL_TYPE_F32 && tsl_is_contiguous(t) &&
           t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == 1 && t->ne[3] == 1;
}

static void vk_rc_count(vk_rcount *rc, const tsl_graph *g) {
    if (rc->used == 0) return;
    for (int i = 0; i < g->n_nodes; i++) {
        const tsl_tensor *t = g->nodes[i];
        if (!t) continue;
        if (t->view_src) {
            const int h = vk_rc_slot(rc, t->view_src);
            if (rc->key[h]) {
                if (t->flags & TSL_FLAG_OUTPUT) rc->out[h] = true;
                if (tsl_op_is_view(t->op)) continue; /* a view: its readers are the root's */
                rc->n[h]++;
                continue; /* a node in the root's memory: one reader, whatever it reads */
            }
        }
        for (int j = 0; j < TSL_MAX_SRC; j++) {
            const tsl_tensor *sj = t->src[j];
            if (!sj) continue;
            const tsl_tensor *r = sj->view_src ? sj->view_src : sj;
            bool again = false;
            for (int j2 = 0; j2 < j && !again; j2++)
                again = t->src[j2] && (t->src[j2]->view_src ? t->src[j2]->view_src : t->src[j2]) == r;
            const int h = vk_rc_slot(rc, r);
            if (!again && rc->key[h] && r != t) rc->n[h]++;
        }
    }
}

/* Is root t read by exactly `want` nodes and no graph output (t counted)? */
static bool vk_rc_only(const vk_rcount *rc, const tsl_tensor *t, int want) {
    const int h = vk_rc_slot(rc, t);
    return rc->key[h] == t && !rc->out[h] && rc->n[h] == want;
}

/* Pipeline of kernel id for a fusion pass (cached in pipes[slot]; a kernel
 * that fails to build is remembered in failed[slot], and the pass then
 * leaves its nodes apart), or VK_NULL_HANDLE. */
static VkPipeline vk_pass_pipe(vk_device *d, int id, int slot, VkPipeline *pipes, bool *failed) {
    if (!pipes[slot] && !failed[slot]) {
        const vk_kernel *fk = NULL;
        if (d->k[id].runnable) pipes[slot] = vk_kernel_get(d, id, &fk);
        failed[slot] = !pipes[slot];
    }
    return pipes[slot];
}

/* Integer-dot mat-vec m, the q/k/v product of one token (with its biases
 * added, where it took in their ADD), followed by the three execs that
 * read its parts: rope(q), rope_set_rows (k into its
 * cache) and set_rows (v into its transposed cache), in any order, as a
 * llama-family decoder builds them (src/model/arch.c). Where nothing else
 * reads the product, the ropes need no frequency factors and no YaRN, and
 * the caches are F16 rows in one block, the four become one dispatch of
 * the product's VECQR twin, which rotates and stores its own rows
 * (mul_mat_vecq.comp, ROPE): fills f and returns true. With collect, the
 * product goes into rc's roots instead (and false is returned). */
static bool vk_qkv_rope(vk_backend *be, vk_rcount *rc, bool collect, const vk_exec *m, const vk_exec *const y[3],
                        int kernel, vk_exec *f) {
    const vk_device *d = be->dev;
    /* the product, or the ADD of its biases it took in (qwen2: one row, vk_fuse) */
    const bool bias = m->fused && m->fused->op == TSL_OP_ADD;
    const tsl_tensor *qkv = bias ? m->fused : m->node;
    if ((m->fused && !bias) || m->qout || m->noout || !m->pipe2 || m->cvt || qkv->type != TSL_TYPE_F32 ||
        !tsl_is_contiguous(qkv) || qkv->ne[1] != 1 || qkv->ne[2] != 1 || qkv->ne[3] != 1 ||
        m->node->src[0]->ne[2] != 1 || m->node->src[0]->ne[3] != 1)
        return false;
    const vk_exec *rq = NULL, *rk = NULL, *sv = NULL;
    for (int j = 0; j < 3; j++) {
        const vk_exec *x = y[j];
        if (x->kernel == VK_K_ROPE_F32 && !x->norm && !rq) rq = x;
        else if (x->kernel == VK_K_ROPE_SET_ROWS_F16 && !x->norm && !rk) rk = x;
        else if (x->kernel == VK_K_SET_ROWS_F16 && !sv) sv = x;
        else return false;
    }
    const tsl_tensor *qr = rq->node, *kr = rk->fused, *kst = rk->node, *vst = sv->node;
    const tsl_tensor *pos = qr->src[1];
    if (qr->src[2] || kr->src[2] || kr->src[1] != pos || vst->src[1] != pos || pos->ne[0] != 1 ||
        memcmp(qr->op_params, kr->op_params, sizeof qr->op_params) != 0 || op_get_i32(vst, 0) != 0)
        return false;
    const int n_dims = op_get_i32(qr, 0), mode = op_get_i32(qr, 1);
    if ((mode != TSL_ROPE_NORMAL && mode != TSL_ROPE_NEOX) || op_get_f32(qr, 5) != 0.0f) return false;
    /* the parts: q [hd, nh] at 0, k [hd, nkh] after it, v (transposed: [1, nv]) after k */
    const tsl_tensor *qv = qr->src[0], *kv = kr->src[0], *vv = vst->src[0];
    const int64_t hd = qv->ne[0], nq = hd * qv->ne[1], nk = hd * kv->ne[1], M = qkv->ne[0], nv = M - nq - nk;
    if (hd < 2 || hd % 2 || n_dims < 2 || n_dims > hd || n_dims % 2 || nv < 2 || nv % 2 || nq >= 65536 ||
        nk >= 65536 || hd >= 65536 || kv->ne[0] != hd)
        return false;
    if (!vk_part_of(qv, qkv, 0, hd, qv->ne[1]) || !vk_part_of(kv, qkv, (size_t)nq * 4, hd, kv->ne[1]) ||
        vv->view_src != qkv || vv->view_offs != (size_t)(nq + nk) * 4 || vv->ne[0] != 1 || vv->ne[1] != nv ||
        vv->ne[2] != 1 || vv->ne[3] != 1 || vv->nb[1] != 4)
        return false;
    /* q's rope output dense; the caches F16 rows (K) and columns (V) */
    if (!tsl_is_contiguous(qr) || qr->type != TSL_TYPE_F32 || kst->nb[0] != 2 || vst->nb[0] != 2 ||
        kst->ne[1] != vst->ne[0] || kst->ne[0] < nk || vst->ne[1] < nv || kst->ne[1] > UINT32_MAX)
        return false;
    /* nothing but the three reads the product (their views of it);
     * with the biases' ADD taken in, the product's own output is read by
     * that ADD alone: vk_fuse checked it. A first pass collects the
     * candidates' products for one count of their readers. */
    if (collect) {
        vk_rc_add(rc, qkv);
        return false;
    }
    if (!vk_rc_only(rc, qkv, 3)) return false;
    const vk_bind *kb = &rk->b[VK_BIND_DST], *vb = &sv->b[VK_BIND_DST];
    if (!kb->blk || kb->blk != vb->blk) return false;
    const vk_bind span = vk_span_of(kb, vb);
    const uint64_t ko = (kb->off - span.off) / 2 + kb->eoff, vo = (vb->off - span.off) / 2 + vb->eoff;
    const uint64_t ks = kst->nb[1] / 2, vs = vst->nb[1] / 2;
    if (span.range > d->props.limits.maxStorageBufferRange || span.range / 2 > UINT32_MAX || ko > UINT32_MAX ||
        vo > UINT32_MAX || ks > UINT32_MAX || vs > UINT32_MAX || !vk_mm_fused_fits(d, kernel, m->node))
        return false;
    *f = *m;
    f->kernel = kernel;
    f->fused = qr;
    f->rb = rq->b[1]; /* the positions, at binding 1 (vk_encode_node) */
    f->by = bias ? m->rb : (vk_bind){0}; /* the biases, at binding 6 */
    f->b[VK_BIND_DST] = rq->b[VK_BIND_DST];
    f->bx = span;
    f->cost_s += rq->cost_s + rk->cost_s + sv->cost_s;
    const double theta = pow(op_get_f32(qr, 3), -2.0 / n_dims);
    const float hi = (float)theta, lo = (float)(theta - (double)hi);
    const float fscale = op_get_f32(qr, 4), mscale = op_get_f32(qr, 6);
    const uint32_t w[13] = {(uint32_t)n_dims | (uint32_t)hd << 16,
                            rq->b[1].eoff,
                            (uint32_t)nq | (uint32_t)nk << 16,
                            (uint32_t)kst->ne[1],
                            (uint32_t)rk->index,
                            0,
                            0,
                            0,
                            0,
                            (uint32_t)ko,
                            (uint32_t)ks,
                            (uint32_t)vo,
                            (uint32_t)vs};
    memcpy(f->rope, w, sizeof w);
    memcpy(&f->rope[5], &hi, 4);
    memcpy(&f->rope[6], &lo, 4);
    memcpy(&f->rope[7], &fscale, 4);
    memcpy(&f->rope[8], &mscale, 4);
    f->rope_neox = mode == TSL_ROPE_NEOX;
    f->kstore = kst;
    return true;
}

/* The q/k/v products whose ropes and cache stores can run in their
 * epilogue (vk_qkv_rope), after vk_fuse has made the rope_set_rows and
 * rms_norm_mul execs: one dispatch for four, a level fewer a layer. Off
 * with TSL_VULKAN_FUSE_ROPE=0 (and TSL_VULKAN_FUSE=0). A kernel that fails
 * to build leaves the nodes apart. Returns the new number of execs. */
static int vk_fuse_qkv_ropes(vk_backend *be, const tsl_graph *g, int n) {
    if (be->no_fuse || be->no_rfuse) return n;
    vk_device *d = be->dev;
    VkPipeline pipes[2] = {VK_NULL_HANDLE, VK_NULL_HANDLE};
    bool failed[2] = {false, false};
    vk_rcount *rc = vk_rc_new(n);
    if (!rc) return n; /* no fusion: the nodes apart are always right */
    int w = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) vk_rc_count(rc, g);
        for (int k = 0; k < n; k++) {
            vk_exec *m = &be->exec[k];
            const int slot = m->kernel == VK_K_MUL_MAT_VECQ_Q8_0 ? 0 : m->kernel == VK_K_MUL_MAT_VECQ_Q4_0 ? 1 : -1;
            const int id = slot == 0 ? VK_K_MUL_MAT_VECQ_Q8_0_ROPE : VK_K_MUL_MAT_VECQ_Q4_0_ROPE;
            const vk_exec *y[3] = {k + 1 < n ? &be->exec[k + 1] : NULL, k + 2 < n ? &be->exec[k + 2] : NULL,
                                   k + 3 < n ? &be->exec[k + 3] : NULL};
            vk_exec f;
            if (slot >= 0 && y[2] && !failed[slot] && d->k[id].runnable && vk_qkv_rope(be, rc, pass == 0, m, y, id, &f)) {
                f.pipe = vk_pass_pipe(d, id, slot, pipes, failed);
                if (f.pipe) {
                    be->exec[w++] = f;
                    k += 3;
                    continue;
                }
            }
            if (pass == 0) continue;
            if (w != k) be->exec[w] = *m;
            w++;
        }
    }
    vk_rc_free(rc);
    return w;
}

/* The longest normed row whose norm goes into the products by default. On
 * the H200 the fused products cost more than the norm's level saves where
 * the rows are long: Qwen2.5-0.5B (896) and Qwen3-0.6B (1024) tokens took
 * 7-9% less GPU time with the norms in the products, a Llama-3-8B (4096)
 * token 6-10% more (bench/RESULTS.md, runs 110-114). */
#define VK_NFUSE_AUTO_MAX 2048

/* The _ns twin of a kernel that reads an integer-dot column (the one that
 * takes a VECQN product's column: vk_norm_into), and its slot in the pass's
 * pipeline cache (4..7); -1 for none. */
static int vk_ns_twin(int kernel, int *slot) {
    static const int from[4] = {VK_K_MUL_MAT_VECQ_Q8_0, VK_K_MUL_MAT_VECQ_Q4_0, VK_K_MUL_MAT_VECQ_Q8_0_ROPE,
                                VK_K_MUL_MAT_VECQ_Q4_0_ROPE};
    static const int to[4] = {VK_K_MUL_MAT_VECQ_Q8_0_NS, VK_K_MUL_MAT_VECQ_Q4_0_NS, VK_K_MUL_MAT_VECQ_Q8_0_ROPE_NS,
                              VK_K_MUL_MAT_VECQ_Q4_0_ROPE_NS};
    for (int i = 0; i < 4; i++)
        if (kernel == from[i]) {
            *slot = 4 + i;
            return to[i];
        }
    return -1;
}

/* Is exec x an integer-dot mat-vec with an _ns twin whose column is t? */
static bool vk_reads_column(const vk_exec *x, const tsl_tensor *t) {
    int slot;
    return x->pipe2 && vk_ns_twin(x->kernel, &slot) >= 0 && x->node->op == TSL_OP_MUL_MAT && x->node->src[1] == t &&
           !x->nscale;
}

/* The norm exec at k (rms_norm_mul making an integer-dot mat-vec's column,
 * qout) into the exec before it, the product that makes the norm's x (with
 * its residual, as a decoder's output projections do), where that product
 * is a default integer-dot mat-vec, x one row of whole Q8_0 blocks, and
 * the norm's output read by nothing but the next execs' products (1 to 4
 * of them, through the column): the product becomes its VECQN twin (32
 * rows a workgroup), which writes the column (unscaled) and the blocks'
 * sums of squares into the scratch's upper half, and the products become
 * their _ns twins, which apply the norm's scale to the column's block
 * scales (mul_mat_vecq.comp, NORMQ and NS). The norm's output is never
 * written; the product keeps the products in its command buffer (keep).
 * Returns the number of products, 0 for no fusion; with collect, puts y
 * into rc's roots instead (and returns 0). */
static int vk_norm_into(vk_backend *be, vk_rcount *rc, bool collect, int k, int n, VkPipeline pipes[8],
                        bool failed[8]) {
    vk_device *d = be->dev;
    vk_exec *p = &be->exec[k - 1], *nm = &be->exec[k];
    if (nm->kernel != VK_K_RMS_NORM_MUL_F32 || !nm->qout) return 0;
    const int slot = p->kernel == VK_K_MUL_MAT_VECQ_Q8_0           ? 0
                     : p->kernel == VK_K_MUL_MAT_VECQ_Q8_0_dw128s2 ? 1
                     : p->kernel == VK_K_MUL_MAT_VECQ_Q4_0         ? 2
                     : p->kernel == VK_K_MUL_MAT_VECQ_Q4_0_dw128s2 ? 3
                                                                    : -1;
    if (slot < 0 || failed[slot] || p->qout || p->noout || p->nq_y || p->nscale || p->keep || !p->pipe2) return 0;
    static const int nq[4] = {VK_K_MUL_MAT_VECQ_Q8_0_NQ, VK_K_MUL_MAT_VECQ_Q8_0_NQ_W1024, VK_K_MUL_MAT_VECQ_Q4_0_NQ,
                              VK_K_MUL_MAT_VECQ_Q4_0_NQ_W1024};
    const tsl_tensor *x = p->fused && p->fused->op == TSL_OP_ADD ? p->fused : p->node, *y = nm->node;
    if (be->nfuse == 2 && x->ne[0] > VK_NFUSE_AUTO_MAX) return 0;
    if ((p->fused && p->fused->op != TSL_OP_ADD) || nm->fused->src[0] != x || x->type != TSL_TYPE_F32 ||
        !tsl_is_contiguous(x) || x->ne[1] != 1 || x->ne[2] != 1 || x->ne[3] != 1 || x->ne[0] % 32 != 0 ||
        x->ne[0] / 32 > 65535 || !tsl_is_contiguous(y) || y->ne[0] != x->ne[0] || (y->flags & TSL_FLAG_OUTPUT) ||
        !tsl_is_contiguous(nm->node->src[1]) || p->node->src[0]->ne[2] != 1 || p->node->src[0]->ne[3] != 1)
        return 0;
    /* the column and the sums after it fit the scratch's upper half */
    const uint64_t nb = (uint64_t)x->ne[0] / 32, words = (nb * 10 + 3) / 4 * 4 + nb;
    if (!be->qscr || be->qscr->gen != d->gen || ((uint64_t)VK_QSCR_ALT_WORD + words) * 4 > be->qscr->size) return 0;
    /* the products right after, each reading y as its column */
    int c = 0;
    while (k + 1 + c < n && c < 4 && vk_reads_column(&be->exec[k + 1 + c], y)) c++;
    if (c == 0) return 0;
    /* ... and nothing else reads y (a first pass collects the candidates'
     * rows for one count of their readers) */
    if (collect) {
        vk_rc_add(rc, y);
        return 0;
    }
    if (!vk_rc_only(rc, y, c)) return 0;
    const int id = nq[slot];
    if (!vk_mm_fused_fits(d, id, p->node)) return 0;
    /* the kernels (a kernel that fails to build leaves the norm apart) */
    int tw[4];
    VkPipeline tp[4];
    for (int j = 0; j < c; j++) {
        int ts = 0;
        tw[j] = vk_ns_twin(be->exec[k + 1 + j].kernel, &ts);
        tp[j] = vk_mm_fused_fits(d, tw[j], be->exec[k + 1 + j].node) ? vk_pass_pipe(d, tw[j], ts, pipes, failed)
                                                                        : VK_NULL_HANDLE;
        if (!tp[j]) return 0;
    }
    VkPipeline pp = vk_pass_pipe(d, id, slot, pipes, failed);
    if (!pp) return 0;
    p->kernel = id;
    p->pipe = pp;
    p->bx = vk_qscr_bind(be);
    p->bx.eoff = VK_QSCR_ALT_WORD;
    p->by = nm->b[1]; /* the norm's weight */
    p->nq_y = y;
    p->nq_ybind = nm->b[VK_BIND_DST];
    p->keep = c;
    p->cost_s += nm->cost_s;
    for (int j = 0; j < c; j++) {
        vk_exec *r = &be->exec[k + 1 + j];
        r->kernel = tw[j];
        r->pipe = tp[j];
        r->nscale = true;
        r->ns_eps = op_get_f32(nm->fused, 0);
    }
    return c;
}

/* Every norm vk_norm_into can take into the product before it, after the
 * other fusions. By default only for rows of at most VK_NFUSE_AUTO_MAX
 * values; TSL_VULKAN_FUSE_NORM=1 for any, =0 (or TSL_VULKAN_FUSE=0) for
 * none. Returns the new number of execs. */
static int vk_fuse_norms(vk_backend *be, const tsl_graph *g, int n) {
    if (be->no_fuse || be->nfuse == 0 || n < 3) return n;
    VkPipeline pipes[8] = {VK_NULL_HANDLE};
    bool failed[8] = {false};
    bool any = false;
    vk_rcount *rc = vk_rc_new(n);
    if (!rc) return n; /* no fusion: the norms apart are always right */
    for (int k = 1; k + 1 < n; k++) vk_norm_into(be, rc, true, k, n, pipes, failed);
    vk_rc_count(rc, g);
    for (int k = 1; k + 1 < n; k++)
        if (vk_norm_into(be, rc, false, k, n, pipes, failed) > 0) {
            be->exec[k].kernel = -1; /* the norm: dropped below */
            any = true;
        }
    vk_rc_free(rc);
    if (!any) return n;
    int w = 0;
    for (int k = 0; k < n; k++) {
        if (be->exec[k].kernel < 0) continue;
        if (w != k) be->exec[w] = be->exec[k];
        w++;
    }
    return w;
}

/* ---- encoding ----------------------------------------------------------------- */

static void vk_barrier(VkCommandBuffer cb, VkPipelineStageFlags src_stage, VkAccessFlags src, VkPipelineStageFlags dst_stage,
                       VkAccessFlags dst) {
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = src, .dstAccessMask = dst};
    vkCmdPipelineBarrier(cb, src_stage, dst_stage, 0, 1, &mb, 0, NULL, 0, NULL);
}

/* Do bindings a and b share bytes? */
static bool vk_overlap(const vk_bind *a, const vk_bind *b) {
    return a->blk == b->blk && a->lo < b->hi && b->lo < a->hi;
}

/* Is binding b, read as tensor t's shape, what a scratch's record (src,
 * ne, nb) says its copy was made from? */
static bool vk_holds(const vk_bind *src, const int64_t *ne, const size_t *nb, const vk_bind *b, const tsl_tensor *t) {
    return src->blk == b->blk && src->off == b->off && src->eoff == b->eoff && src->lo == b->lo && src->hi == b->hi &&
           memcmp(ne, t->ne, sizeof t->ne) == 0 && memcmp(nb, t->nb, sizeof t->nb) == 0;
}

static bool vk_spans_hit(const vk_slot *sl, const vk_bind *b, bool against_reads) {
    for (int k = 0; k < sl->n_spans; k++) {
        const vk_span *s = &sl->spans[k];
        if (s->blk != b->blk || (!s->write && !against_reads)) continue;
        if (b->lo < s->hi && s->lo < b->hi) return true;
    }
    return false;
}

/* Does x touch bytes an earlier node since the last barrier wrote (or, for
 * its write, read)? Then it needs a barrier. */
static bool vk_hazard(const vk_slot *sl, const vk_exec *x) {
    if (sl->n_spans + 6 > VK_MAX_SPANS) return true; /* too much to track: a barrier is always safe */
    for (int j = 0; j < 3; j++)
        if (x->b[j].blk && vk_spans_hit(sl, &x->b[j], j == 2 && x->qout)) return true;
    if (x->bx.blk && vk_spans_hit(sl, &x->bx, true)) return true;
    if (x->by.blk && vk_spans_hit(sl, &x->by, false)) return true;
    return vk_spans_hit(sl, &x->b[VK_BIND_DST], true);
}

static void vk_track(vk_slot *sl, const vk_exec *x) {
    for (int j = 0; j < 4; j++) {
        if (!x->b[j].blk) continue;
        const bool write = j == VK_BIND_DST || (j == 2 && x->qout);
        sl->spans[sl->n_spans++] = (vk_span){x->b[j].blk, x->b[j].lo, x->b[j].hi, write};
    }
    if (x->bx.blk) sl->spans[sl->n_spans++] = (vk_span){x->bx.blk, x->bx.lo, x->bx.hi, true};
    if (x->by.blk) sl->spans[sl->n_spans++] = (vk_span){x->by.blk, x->by.lo, x->by.hi, false};
    /* a write over the column the scratch holds quantized, or over the
     * scratch's bytes that hold it: stale */
    const vk_bind *w = &x->b[VK_BIND_DST];
    if (sl->q_valid && vk_overlap(w, &sl->q_src)) sl->q_valid = false;
    /* likewise the activations the F16 scratch holds: a write over them
     * (the scratch itself only their copy writes) */
    if (sl->h_valid && vk_overlap(w, &sl->h_src)) sl->h_valid = false;
    const vk_bind *ws[3] = {w, x->qout ? &x->b[2] : NULL, x->bx.blk ? &x->bx : NULL};
    for (int j = 0; j < 3 && sl->q_valid; j++)
        if (ws[j] && vk_overlap(ws[j], &sl->q_at))
            sl->q_valid = false;
}

/* A descriptor set of layout dsl from the slot's pools (no push
 * descriptors, or a kernel bound through sets). */
static VkResult vk_alloc_set(vk_backend *be, vk_slot *sl, VkDescriptorSetLayout dsl, VkDescriptorSet *set) {
    VkDevice dev = be->dev->dev;
    for (;;) {
        if (sl->cur_dpool == sl->n_dpools) {
            VkDescriptorPool *np = realloc(sl->dpools, (size_t)(sl->n_dpools + 1) * sizeof *np);
            if (!np) return VK_ERROR_OUT_OF_HOST_MEMORY;
            sl->dpools = np;
            VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = VK_DPOOL_SETS * VK_NBIND};
            VkDescriptorPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                             .maxSets = VK_DPOOL_SETS,
                                             .poolSizeCount = 1,
                                             .pPoolSizes = &ps};
            VkResult r = vkCreateDescriptorPool(dev, &pi, NULL, &sl->dpools[sl->n_dpools]);
            if (r != VK_SUCCESS) return r;
            sl->n_dpools++;
        }
        VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                          .descriptorPool = sl->dpools[sl->cur_dpool],
                                          .descriptorSetCount = 1,
                                          .pSetLayouts = &dsl};
        VkResult r = vkAllocateDescriptorSets(dev, &ai, set);
        if (r == VK_SUCCESS) return r;
        if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL) return r;
        sl->cur_dpool++; /* this pool is full: the next one */
    }
}

/* A zeroed record at the end of the slot's tape (NULL: out of host memory). */
static vk_rec *vk_tape_add(vk_slot *sl, uint32_t kind) {
    if (sl->n_tape == sl->cap_tape) {
        int cap = sl->cap_tape ? 2 * sl->cap_tape : 64;
        vk_rec *t = realloc(sl->tape, (size_t)cap * sizeof *t);
        if (!t) return NULL;
        sl->tape = t;
        sl->cap_tape = cap;
    }
    vk_rec *r = &sl->tape[sl->n_tape++];
    memset(r, 0, sizeof *r);
    r->kind = kind;
    return r;
}

/* Was pipe made for an ordinary descriptor set (a kernel with
 * vk_kernel.sets)? Such kernels are few; their built pipelines are
 * compared. */
static bool vk_pipe_uses_sets(vk_device *d, VkPipeline pipe) {
    for (int i = 0; i < d->n_set_ids; i++) {
        const vk_kernel *k = &d->k[d->set_ids[i]];
        if (atomic_load_explicit(&k->state, memory_order_acquire) == VK_KS_READY && k->pipe == pipe) return true;
    }
    return false;
}

/* One dispatch of pipe over x's bindings, onto the slot's tape: a barrier
 * first where x touches what an earlier dispatch since the last one wrote
 * (or writes what it read). */
static VkResult vk_encode_dispatch(vk_backend *be, vk_slot *sl, const vk_exec *x, VkPipeline pipe, const uint32_t *pc,
                                   uint32_t pcsize, const uint32_t grid[3]) {
    vk_device *d = be->dev;
    if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) return VK_SUCCESS;
    if (pcsize > VK_PC_NODE * sizeof *pc) { /* a kernel's parameters over the progress word: a bug, refused */
        TSL_LOGE("%s: kernel %s takes %u bytes of push constants, past the progress word's", be->name,
                 vk_kernel_descs[x->kernel].name, pcsize);
        return VK_ERROR_UNKNOWN;
    }
    bool level = sl->dispatches == 0;
    const bool nobar = sl->nobar;
    sl->nobar = false;
    sl->sig_rec = -1;
    if (!nobar && vk_hazard(sl, x)) {
        if (!vk_tape_add(sl, VK_REC_BARRIER)) return VK_ERROR_OUT_OF_HOST_MEMORY;
        sl->n_spans = 0;
        sl->barriers++;
        level = true;
    }
    vk_track(sl, x);
    vk_rec *r = vk_tape_add(sl, VK_REC_DISPATCH);
    if (!r) return VK_ERROR_OUT_OF_HOST_MEMORY;
    r->pipe = pipe;
    r->sets = d->layout_sets && vk_pipe_uses_sets(d, pipe);
    sl->set_dispatches += r->sets;
    for (int j = 0; j < 4; j++) {
        const vk_bind *b = x->b[j].blk ? &x->b[j] : &x->b[VK_BIND_DST]; /* unused: the destination again */
        r->bi[j] = (VkDescriptorBufferInfo){.buffer = b->blk->buf, .offset = b->off, .range = b->range};
    }
    r->bi[VK_BIND_STATUS] = (VkDescriptorBufferInfo){.buffer = be->sbuf, .offset = 0, .range = VK_WHOLE_SIZE};
    r->bi[VK_BIND_X] = x->bx.blk ? (VkDescriptorBufferInfo){.buffer = x->bx.blk->buf, .offset = x->bx.off, .range = x->bx.range}
                                 : r->bi[VK_BIND_STATUS]; /* unused: the status words as a placeholder */
    r->bi[VK_BIND_Y] = x->by.blk ? (VkDescriptorBufferInfo){.buffer = x->by.blk->buf, .offset = x->by.off, .range = x->by.range}
                                 : r->bi[VK_BIND_STATUS];
    /* the push constants, and in their last word the node for the
     * progress word (common.glsl): every kernel's block ends there */
    if (pcsize) memcpy(r->pc, pc, pcsize);
    r->pc[VK_PC_NODE] = (uint32_t)x->index + 1u;
    r->pcsize = VK_PC_WORDS * sizeof *pc;
    memcpy(r->grid, grid, sizeof r->grid);
    r->node = x->index;
    /* An NV checkpoint where a level starts (every cp_every-th level): the
     * dispatches of one level run together, so a checkpoint between them
     * would name no more than the one before them does, and it costs: it
     * waits for the work before it (on the H200 it serialized independent
     * products, halving their rate). Placed whether or not the device has
     * checkpoints (vk_play_tape records them only where it does). */
    r->mark = 0;
    r->level = level;
    if (level) {
        if (d->cp_every > 0 && sl->levels % (uint32_t)d->cp_every == 0) r->mark = (uint32_t)x->index + 1u;
        sl->levels++;
    }
    sl->dispatches++;
    return VK_SUCCESS;
}

/* Record the slot's tape into its command buffer. */
static VkResult vk_play_tape(vk_backend *be, vk_slot *sl) {
    vk_device *d = be->dev;
    VkCommandBuffer cb = sl->cb;
    VkPipeline bound = VK_NULL_HANDLE;
    bool copied = false;
    for (int i = 0; i < sl->n_tape; i++) {
        const vk_rec *r = &sl->tape[i];
        if (r->kind == VK_REC_BARRIER) {
            vk_barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
            continue;
        }
        if (r->kind == VK_REC_STAMP) {
            vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, be->ppool, r->mark);
            continue;
        }
        if (r->kind == VK_REC_READBACK) {
            /* an output into the readback buffer, after every kernel
             * before it; made visible to the host at the end */
            if (!copied)
                vk_barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                           VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
            copied = true;
            VkBufferCopy region = {.srcOffset = r->bi[0].offset, .dstOffset = r->bi[1].offset, .size = r->bi[0].range};
            vkCmdCopyBuffer(cb, r->bi[0].buffer, r->bi[1].buffer, 1, &region);
            continue;
        }
        if (bound != r->pipe) {
            vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, r->pipe);
            bound = r->pipe;
        }
        const bool push = d->f.push_descriptors && !r->sets;
        const VkPipelineLayout layout = r->sets ? d->layout_sets : d->layout;
        VkDescriptorSet set = VK_NULL_HANDLE;
        if (!push) {
            VkResult res = vk_alloc_set(be, sl, r->sets ? d->dsl_sets : d->dsl, &set);
            if (res != VK_SUCCESS) return res;
        }
        VkWriteDescriptorSet w[VK_NBIND];
        for (int j = 0; j < VK_NBIND; j++)
            w[j] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                          .dstSet = set,
                                          .dstBinding = (uint32_t)j,
                                          .descriptorCount = 1,
                                          .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                          .pBufferInfo = &r->bi[j]};
        if (push) {
            d->push_descriptor_set(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, VK_NBIND, w);
        } else {
            vkUpdateDescriptorSets(d->dev, VK_NBIND, w, 0, NULL);
            vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &set, 0, NULL);
        }
        if (r->pcsize) vkCmdPushConstants(cb, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, r->pcsize, r->pc);
        if (r->mark && d->set_checkpoint) d->set_checkpoint(cb, (void *)(uintptr_t)r->mark);
        vkCmdDispatch(cb, r->grid[0], r->grid[1], r->grid[2]);
    }
    if (copied)
        vk_barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                   VK_ACCESS_HOST_READ_BIT);
    return VK_SUCCESS;
}

static bool vk_is_attn(int kernel) {
    return kernel == VK_K_ATTN_DEC_F16 || kernel == VK_K_ATTN_DEC_F16_MASK_F32 || kernel == VK_K_ATTN_DEC_F16_MASK_F16;
}

/* The scratch holds attention x's output quantized (at `at`), as the one
 * dense column [n, 1, 1, 1] its reader presents. */
static void vk_note_column(vk_slot *sl, const vk_exec *x, vk_bind at) {
    const int64_t total = tsl_nelements(x->node);
    sl->q_valid = true;
    sl->q_src = x->b[VK_BIND_DST];
    sl->q_at = at;
    for (int i = 0; i < TSL_MAX_DIMS; i++) {
        sl->q_ne[i] = i == 0 ? total : 1;
        sl->q_nb[i] = i == 0 ? sizeof(float) : (size_t)total * sizeof(float);
    }
}

/* A product that waits for its producer instead of a barrier. The level
 * before a one-column product is usually one small kernel (a norm on one
 * workgroup, the decode attention, swiglu) that makes the product's
 * quantized column; with a barrier between them the product's weights are
 * not requested until that kernel is done. Here the product is dispatched
 * with no barrier: its workgroups start beside the producer, request their
 * first weights, and wait until the producer's signal word counts the
 * producer's workgroups done (each counts itself in after a device-scope
 * fence; the last range of each head for the attention), then read the
 * column. Why it is safe: the producer is the one dispatch of its level (a
 * barrier before it), so when it is done everything before the product is;
 * the product reads nothing but immutable weights before its wait and
 * writes nothing before it; the column is read from L2 (no first-level
 * cache line of it exists on any SM before the wait, the barrier before the
 * producer having invalidated them). The signal words lie past the
 * scratches' bytes (VK_SYNC_BYTES), one a scratch, zeroed when the command
 * buffer starts; the producers' counts into one accumulate over the command
 * buffer, so the product waits for the running total.
 * vk_note_signal marks the last dispatch as a producer (n workgroups will
 * count themselves in; its push constant word pc_word names the signal
 * word, 0 until a product waits on it). */
static void vk_note_signal(vk_slot *sl, uint32_t n, uint32_t pc_word) {
    if (!sl->tape[sl->n_tape - 1].level) return; /* not alone in its level */
    sl->sig_rec = sl->n_tape - 1;
    sl->sig_n = n;
    sl->sig_pc = pc_word;
}

static void vk_wait_edge(vk_backend *be, vk_slot *sl, vk_exec *x) {
    if (!be->wait || sl->sig_rec < 0 || sl->sig_rec != sl->n_tape - 1) return;
    const vk_mm_info *v = vk_mm_info_of(x->kernel);
    /* the default integer-dot kernels, the q/k/v one with its ropes, and
     * the products that make the next norm's column (VECQN: they read the
     * attention's or swiglu's column as the default ones do); not the _ns
     * kernels, whose word 17 holds the norm's eps */
    if (!v || (v->family != VK_MM_VECQ && v->family != VK_MM_VECQR && v->family != VK_MM_VECQN)) return;
    const vk_bind *c = &x->b[2];
    const vk_buf *scr[2] = {be->qscr, be->ascr};
    const VkDeviceSize area[2] = {VK_QSCR_SLOT, VK_ASCR_SIZE};
    int k = 0;
    while (k < 2 && !(scr[k] && c->blk == scr[k]->blk && c->off == scr[k]->off)) k++;
    if (k == 2 || c->range < area[k] + VK_SYNC_BYTES) return;
    /* one word a scratch: every producer before this one in the command
     * buffer is done (a barrier after each), so the running total of their
     * counts is what this product waits for */
    const uint32_t word = (uint32_t)(area[k] / 4);
    sl->tape[sl->sig_rec].pc[sl->sig_pc] = word;
    sl->sig_count[k] += sl->sig_n;
    sl->sig_used[k] = true;
    x->wait_n = sl->sig_count[k] + be->wait_skew;
    x->wait_word = word;
    be->wait_skew = 0;
    sl->nobar = true;
}

/* Source j (0 the weights, 1 the activations) of converting product x
 * copied to F16, dense, into scratch binding to, by kernel pipe
 * (cpy_f32_f16, cpy_q8_0_f16 or cpy_q4_0_f16). */
static VkResult vk_encode_f16_copy(vk_backend *be, vk_slot *sl, const vk_exec *x, int j, vk_bind to, VkPipeline pipe) {
    uint32_t pc[VK_PC_WORDS], grid[3];
    tsl_tensor h;
    if (j == 0) vk_mm_wconv_tensor(x->node, &h);
    else vk_mm_conv_tensor(x->node, &h);
    const tsl_type st = h.src[0]->type;
    vk_exec xc = *x;
    xc.node = &h;
    xc.kernel = st == TSL_TYPE_Q8_0 ? VK_K_CPY_Q8_0_F16 : st == TSL_TYPE_Q4_0 ? VK_K_CPY_Q4_0_F16 : VK_K_CPY_F32_F16;
    xc.b[0] = x->b[j];
    xc.b[1] = xc.b[2] = xc.bx = (vk_bind){0};
    xc.b[VK_BIND_DST] = to;
    const uint32_t pcsize = vk_op_params(be->dev, &xc, pc, grid);
    return vk_encode_dispatch(be, sl, &xc, pipe, pc, pcsize, grid);
}

static VkResult vk_encode_node(vk_backend *be, vk_slot *sl, const vk_exec *x) {
    vk_device *d = be->dev;
    uint32_t pc[VK_PC_WORDS], grid[3];
    if (vk_is_attn1(x->kernel)) {
        /* attention in one dispatch: the output, and quantized in the
         * scratch, where the mat-vec after it finds its column */
        uint32_t pcsize = vk_op_params(d, x, pc, grid);
        VkResult r = vk_encode_dispatch(be, sl, x, x->pipe, pc, pcsize, grid);
        if (r == VK_SUCCESS) {
            vk_bind at = x->bx;
            at.eoff = x->bx.eoff + VK_ASCR_Q8_WORD;
            vk_note_column(sl, x, at);
            sl->zero_cnt = true;
            /* the last range of each (head, column) counts itself in */
            if (be->wait & 4) vk_note_signal(sl, pc[3] * pc[5], VK_PC_ATTN1_SIGNAL);
        }
        return r;
    }
    if (vk_is_attn(x->kernel)) {
        /* fused attention: the key ranges' partials into the scratch, then
         * the pass that joins them into the output */
        const vk_bind sb = vk_buf_bind(be->ascr);
        vk_exec xa = *x;
        xa.b[VK_BIND_DST] = sb;
        xa.qout = false;
        uint32_t pcsize = vk_op_params(d, &xa, pc, grid);
        VkResult r = vk_encode_dispatch(be, sl, &xa, x->pipe, pc, pcsize, grid);
        if (r != VK_SUCCESS) return r;
        vk_exec xb = *x;
        xb.kernel = x->qout ? VK_K_ATTN_COMBINE_Q_F32 : VK_K_ATTN_COMBINE_F32;
        xb.b[0] = sb;
        xb.b[1] = (vk_bind){0};
        xb.b[2] = x->qout ? vk_qscr_bind(be) : (vk_bind){0};
        pcsize = vk_op_params(d, &xb, pc, grid);
        r = vk_encode_dispatch(be, sl, &xb, x->pipe2, pc, pcsize, grid);
        if (r == VK_SUCCESS && x->qout) vk_note_column(sl, x, xb.b[2]);
        return r;
    }
    if (x->cvt) {
        /* a converting product: the activations (b[1]) copied to F16 into
         * the scratch first, unless it holds them already (a product
         * before this one read the same activations: q, k and v), block
         * weights into theirs (a product's weights are its own: every
         * time), then the product reading the copies */
        const tsl_tensor *b = x->node->src[1];
        const bool have = sl->h_valid && vk_holds(&sl->h_src, sl->h_ne, sl->h_nb, &x->b[1], b);
        vk_exec xp = *x;
        xp.b[1] = vk_buf_bind(be->hscr);
        if (!have) {
            VkResult r = vk_encode_f16_copy(be, sl, x, 1, xp.b[1], x->cvt);
            if (r != VK_SUCCESS) return r;
            sl->h_valid = true;
            sl->h_src = x->b[1];
            memcpy(sl->h_ne, b->ne, sizeof sl->h_ne);
            memcpy(sl->h_nb, b->nb, sizeof sl->h_nb);
        }
        if (x->wcvt) {
            xp.b[0] = vk_buf_bind(be->wscr);
            VkResult r = vk_encode_f16_copy(be, sl, x, 0, xp.b[0], x->wcvt);
            if (r != VK_SUCCESS) return r;
        }
        uint32_t pcsize = vk_op_params(d, &xp, pc, grid);
        return vk_encode_dispatch(be, sl, &xp, x->pipe, pc, pcsize, grid);
    }
    if (!x->pipe2) {
        uint32_t pcsize = vk_op_params(d, x, pc, grid);
        VkResult r = vk_encode_dispatch(be, sl, x, x->pipe, pc, pcsize, grid);
        if (r == VK_SUCCESS && x->qout && (x->kernel == VK_K_RMS_NORM_MUL_F32 || x->kernel == VK_K_RMS_NORM_MUL_W8K_F32) &&
            (be->wait & 1))
            vk_note_signal(sl, grid[0] * grid[1] * grid[2], VK_PC_RMS_SIGNAL);
        if (r == VK_SUCCESS && x->qout && x->kernel == VK_K_SWIGLU_Q_F32 && (be->wait & 2))
            vk_note_signal(sl, grid[0] * grid[1] * grid[2], VK_PC_SWIGLU_SIGNAL);
        if (r == VK_SUCCESS && x->qout) {
            /* the scratch holds this node's row quantized now */
            sl->q_valid = true;
            sl->q_src = x->b[VK_BIND_DST];
            sl->q_at = x->b[2];
            memcpy(sl->q_ne, x->node->ne, sizeof sl->q_ne);
            memcpy(sl->q_nb, x->node->nb, sizeof sl->q_nb);
        }
        return r;
    }
    /* the integer-dot mat-vec: its column quantized into the scratch first,
     * unless the scratch already holds that column (a product before this
     * one read the same activations, and nothing wrote them since) */
    const tsl_tensor *b = x->node->src[1];
    const vk_bind qb = vk_qscr_bind(be);
    vk_exec x2 = *x;
    x2.b[2] = qb;
    if (x->fused) x2.b[1] = x->rb; /* a fused ADD's residual: the mat-vec does not read b itself */
    bool have = sl->q_valid && vk_holds(&sl->q_src, sl->q_ne, sl->q_nb, &x->b[1], b);
    if (!have && x->nscale) {
        /* a norm's column made by the product before this one, in this
         * command buffer (vk_plan keeps them together), and nothing wrote
         * over it since: its F32 row was never written, so it cannot be
         * quantized here. A library bug if it happens; the compute fails. */
        TSL_LOGE("%s: node %d: the normed column it reads is not in its command buffer", be->name, x->index);
        return VK_ERROR_UNKNOWN;
    }
    if (!have) {
        /* the quantizer: reads the activations (b[1]), writes the scratch */
        vk_exec xq = *x;
        xq.b[0] = (vk_bind){0};
        xq.b[2] = qb;
        uint32_t pcsize = vk_mm_quant_params(d, &xq, pc, grid);
        xq.b[2] = (vk_bind){0};
        xq.b[VK_BIND_DST] = qb;
        VkResult r = vk_encode_dispatch(be, sl, &xq, x->pipe2, pc, pcsize, grid);
        if (r != VK_SUCCESS) return r;
        sl->q_valid = true;
        sl->q_src = x->b[1];
        sl->q_at = qb;
        memcpy(sl->q_ne, b->ne, sizeof sl->q_ne);
        memcpy(sl->q_nb, b->nb, sizeof sl->q_nb);
    }
    x2.b[2] = sl->q_at; /* where the column is now (the quantizer's, or the kernel's that made it) */
    if (have) vk_wait_edge(be, sl, &x2);
    uint32_t pcsize = vk_op_params(d, &x2, pc, grid);
    VkResult r = vk_encode_dispatch(be, sl, &x2, x->pipe, pc, pcsize, grid);
    if (r == VK_SUCCESS && x->nq_y) {
        /* it made the next norm's column (VECQN): the products after it
         * find it in the scratch's upper half, as the normed row's */
        sl->q_valid = true;
        sl->q_src = x->nq_ybind;
        sl->q_at = x->bx;
        memcpy(sl->q_ne, x->nq_y->ne, sizeof sl->q_ne);
        memcpy(sl->q_nb, x->nq_y->nb, sizeof sl->q_nb);
    }
    return r;
}

/* Encode slot s (its range of the exec list) into its command buffer. Runs
 * on the calling thread (slot 0) or on worker s - 1. The commands go onto a
 * tape first; where it equals the tape the command buffer already holds
 * (the same graph in the same buffers: a decode step, whose inputs change
 * only in content) and no buffer or pipeline has gone since (the device's
 * epoch), the command buffer is submitted again as it is, which saves the
 * host most of the encoding. be->no_reuse (TSL_VULKAN_REUSE=0,
 * tsl_backend_vulkan_set_reuse) records every time. */
static void vk_encode_slot(vk_backend *be, int s) {
    const bool no_reuse = be->no_reuse;
    uint64_t t0 = core_now_ns();
    vk_slot *sl = &be->slots[s];
    vk_device *d = be->dev;
    const vk_exec *first = &be->exec[sl->first];
    ledger_sink_set(&be->ledger);
    sl->dispatches = sl->barriers = sl->set_dispatches = 0;
    sl->levels = 0;
    sl->n_spans = 0;
    sl->q_valid = false;
    sl->h_valid = false;
    sl->zero_cnt = false;
    sl->sig_rec = -1;
    memset(sl->sig_count, 0, sizeof sl->sig_count);
    memset(sl->sig_used, 0, sizeof sl->sig_used);
    sl->nobar = false;
    sl->n_tape = 0;
    sl->reused = false;
    const char *what = "recording a kernel";
    const vk_exec *at = first;
    VkResult r = VK_SUCCESS;
    for (int k = 0; k < sl->count && r == VK_SUCCESS; k++) {
        at = &be->exec[sl->first + k];
        r = vk_encode_node(be, sl, at);
        if (r == VK_SUCCESS && be->ppool && sl->first + k < VK_PROF_MAX) {
            vk_rec *st = vk_tape_add(sl, VK_REC_STAMP);
            if (st) st->mark = (uint32_t)(sl->first + k);
            else r = VK_ERROR_OUT_OF_HOST_MEMORY;
        }
    }
    /* the last command buffer copies the read-back outputs (part of the
     * tape: a command buffer submitted again copies them again) */
    for (int k = 0; r == VK_SUCCESS && s == be->n_used - 1 && k < be->n_rbo; k++) {
        vk_rec *c = vk_tape_add(sl, VK_REC_READBACK);
        if (!c) {
            r = VK_ERROR_OUT_OF_HOST_MEMORY;
            break;
        }
        c->bi[0] = (VkDescriptorBufferInfo){.buffer = be->rbo[k].src, .offset = be->rbo[k].src_off, .range = be->rbo[k].n};
        c->bi[1] = (VkDescriptorBufferInfo){.buffer = be->rb, .offset = be->rbo[k].at, .range = be->rbo[k].n};
    }
    const uint64_t epoch = atomic_load(&d->epoch);
    if (r == VK_SUCCESS && !no_reuse && sl->recorded && sl->rec_epoch == epoch && sl->rec_first == sl->first &&
        sl->rec_q == (be->qpool != VK_NULL_HANDLE) && sl->rec_p == (be->ppool != VK_NULL_HANDLE) &&
        sl->n_prev == sl->n_tape && memcmp(sl->prev, sl->tape, (size_t)sl->n_tape * sizeof *sl->tape) == 0) {
        sl->reused = true;
        ledger_sink_clear();
        sl->encode_ms = (double)(core_now_ns() - t0) / 1e6;
        return;
    }
    sl->recorded = false;
    if (r == VK_SUCCESS) {
        what = "resetting a command pool";
        at = first;
        r = vkResetCommandPool(d->dev, sl->pool, 0);
    }
    if (r == VK_SUCCESS) {
        what = "beginning a command buffer";
        VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
        r = vkBeginCommandBuffer(sl->cb, &bi);
    }
    if (r == VK_SUCCESS) {
        for (int p = 0; p < sl->n_dpools; p++) vkResetDescriptorPool(d->dev, sl->dpools[p], 0);
        sl->cur_dpool = 0;
        if (be->qpool) vkCmdResetQueryPool(sl->cb, be->qpool, 2u * (uint32_t)s, 2);
        if (be->ppool && sl->first < VK_PROF_MAX) {
            uint32_t n = (uint32_t)(sl->first + sl->count > VK_PROF_MAX ? VK_PROF_MAX - sl->first : sl->count);
            vkCmdResetQueryPool(sl->cb, be->ppool, (uint32_t)sl->first, n);
        }
        /* attn_dec1's counters start at 0 whatever an earlier compute left
         * (the last command buffer to use them ended with a barrier before
         * transfers) */
        if (sl->zero_cnt && be->ascr)
            vkCmdFillBuffer(sl->cb, be->ascr->blk->buf, be->ascr->off + (VkDeviceSize)VK_ASCR_CNT_WORD * 4u,
                            VK_ASCR_CNT_BYTES, 0);
        /* the signal words the waits count on start at 0 too */
        const vk_buf *scr[2] = {be->qscr, be->ascr};
        const VkDeviceSize area[2] = {VK_QSCR_SLOT, VK_ASCR_SIZE};
        for (int k = 0; k < 2; k++)
            if (sl->sig_used[k] && scr[k]) vkCmdFillBuffer(sl->cb, scr[k]->blk->buf, scr[k]->off + area[k], 4, 0);
        /* after everything before it on the queue: earlier command buffers
         * of this graph, uploads, earlier graphs */
        vk_barrier(sl->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                   VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                   VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
        /* the start: written once everything before it on the queue is
         * done, so a compute queued behind other work is not charged for it */
        if (be->qpool) vkCmdWriteTimestamp(sl->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, be->qpool, 2u * (uint32_t)s);
        what = "recording a kernel";
        r = vk_play_tape(be, sl);
        if (r == VK_SUCCESS) {
            /* results become visible to the host (mapped reads, status
             * words) and to transfers once the fence signals */
            vk_barrier(sl->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                       VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
            if (be->qpool)
                vkCmdWriteTimestamp(sl->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, be->qpool, 2u * (uint32_t)s + 1);
            what = "ending a command buffer";
            r = vkEndCommandBuffer(sl->cb);
        }
    }
    if (r == VK_SUCCESS) {
        /* the command buffer holds this tape now */
        vk_rec *t = sl->prev;
        int c = sl->cap_prev;
        sl->prev = sl->tape;
        sl->cap_prev = sl->cap_tape;
        sl->n_prev = sl->n_tape;
        sl->tape = t;
        sl->cap_tape = c;
        sl->n_tape = 0;
        sl->recorded = true;
        sl->rec_epoch = epoch;
        sl->rec_first = sl->first;
        sl->rec_q = be->qpool != VK_NULL_HANDLE;
        sl->rec_p = be->ppool != VK_NULL_HANDLE;
    } else {
        const char *rn = "unknown";
        tsl_status st = tsl_fault_classify("VkResult", (int64_t)r, TSL_PHASE_ALLOC, &rn);
        ledger_record(st == TSL_SUCCESS ? TSL_FAILED : st, at->index, at->node,
                      "%s for command buffer %d: the driver answered %s (VkResult %d); nothing more of this graph "
                      "was submitted",
                      what, s, rn, (int)r);
    }
    /* The block ends: a lookup after this lands in no sink and is only
     * logged (it belongs to no compute). */
    ledger_sink_clear();
    sl->encode_ms = (double)(core_now_ns() - t0) / 1e6;
}

static void *vk_worker_main(void *arg) {
    vk_backend *be = ((void **)arg)[0];
    int w = (int)(intptr_t)((void **)arg)[1];
    /* the generation current when the thread was made: a job posted
     * before this thread first takes the lock is still seen as new */
    uint64_t seen = (uint64_t)(uintptr_t)((void **)arg)[2];
    free(arg);
    pthread_mutex_lock(&be->wlock);
    for (;;) {
        while (!be->wquit && be->wgen == seen) pthread_cond_wait(&be->wcv, &be->wlock);
        if (be->wquit) break;
        seen = be->wgen;
        int s = w + 1;
        bool mine = s < be->job_slots;
        pthread_mutex_unlock(&be->wlock);
        if (mine) vk_encode_slot(be, s);
        pthread_mutex_lock(&be->wlock);
        if (mine) {
            be->done[s] = true;
            pthread_cond_broadcast(&be->dcv);
        }
    }
    pthread_mutex_unlock(&be->wlock);
    return NULL;
}

static bool vk_ensure_threads(vk_backend *be, int n) {
    while (be->n_threads < n) {
        void **arg = malloc(3 * sizeof *arg);
        if (!arg) return false;
        arg[0] = be;
        arg[1] = (void *)(intptr_t)be->n_threads;
        pthread_mutex_lock(&be->wlock);
        arg[2] = (void *)(uintptr_t)be->wgen;
        pthread_mutex_unlock(&be->wlock);
        if (pthread_create(&be->threads[be->n_threads], NULL, vk_worker_main, arg) != 0) {
            free(arg);
            return false;
        }
        be->n_threads++;
    }
    return true;
}

static void vk_wait_done(vk_backend *be, int s) {
    pthread_mutex_lock(&be->wlock);
    while (!be->done[s]) pthread_cond_wait(&be->dcv, &be->wlock);
    pthread_mutex_unlock(&be->wlock);
}

/* ---- completion --------------------------------------------------------------- */

static const char *vk_first_kernel(const vk_backend *be, const vk_slot *sl) {
    return sl->count > 0 ? vk_kernel_descs[be->exec[sl->first].kernel].name : NULL;
}

/* The watchdog's default allowance for a command buffer, before its work. */
static double vk_watchdog_base(const vk_backend *be) {
    return be->dev->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? VK_WATCHDOG_CPU_S : VK_WATCHDOG_BASE_S;
}

/* The last node of the checkpoint span that starts at `node` in the slot's
 * recorded commands: the nodes up to the next checkpoint, any of which may
 * have been running when the checkpoint of `node` was the last one reached
 * (a span is a level, or cp_every levels). -1 when `node` has no
 * checkpoint there. */
static int vk_checkpoint_span(const vk_slot *sl, int node) {
    if (node < 0 || !sl->recorded) return -1;
    int last = -1;
    for (int i = 0; i < sl->n_prev; i++) {
        const vk_rec *r = &sl->prev[i];
        if (r->kind != VK_REC_DISPATCH) continue;
        if (last < 0) {
            if (r->mark == (uint32_t)node + 1u) last = r->node;
        } else if (r->mark) {
            break;
        } else if (r->node > last) {
            last = r->node;
        }
    }
    return last;
}

/* The level of dispatches in the slot's recorded commands that holds
 * node's dispatch: its first and last node; false where the slot records
 * no dispatch of node. */
static bool vk_level_of(const vk_slot *sl, int node, int *first, int *last) {
    if (node < 0 || !sl->recorded) return false;
    bool found = false;
    int start = -1;
    for (int i = 0; i < sl->n_prev; i++) {
        const vk_rec *r = &sl->prev[i];
        if (r->kind != VK_REC_DISPATCH) continue;
        if (r->level) {
            if (found) break; /* the next level */
            start = r->node;
            *last = r->node;
        }
        if (r->node > *last) *last = r->node;
        if (r->node == node) found = true;
    }
    if (found) *first = start;
    return found;
}

/* The last node any kernel of the backend's latest compute started (the
 * progress word, written by the device into mapped memory), -1 for none. */
static int vk_progress_node(const vk_backend *be) {
    return (int)((volatile const uint32_t *)be->swords)[VK_SW_PROGRESS] - 1;
}

/* What the progress word (common.glsl) says of slot s: the level of the
 * last node any kernel of the compute started, where that node is one of
 * the slot's ("nodes a..b were running", into what); -1 where it is not (a
 * kernel of an earlier command buffer, or none: a kernel that does not
 * raise the word, e.g. a test's). Returns the level's first node. */
static int vk_progress_level(const vk_backend *be, const vk_slot *sl, char *what, size_t cap) {
    const int p = vk_progress_node(be);
    int first = -1, last = -1;
    if (!vk_level_of(sl, p, &first, &last)) return -1;
    if (first == last)
        snprintf(what, cap, "node %d was running (the last level of kernels to start)", first);
    else
        snprintf(what, cap, "nodes %d..%d were running (the last level of kernels to start)", first, last);
    return first;
}

/* The exec of node in slot s (the slot's first where none). */
static const vk_exec *vk_slot_exec(const vk_backend *be, const vk_slot *sl, int node) {
    for (int k = 0; k < sl->count; k++)
        if (be->exec[sl->first + k].index == node) return &be->exec[sl->first + k];
    return &be->exec[sl->first];
}

/* Wait for slot s's fence, bounded by the watchdog. */
static tsl_status vk_wait_slot(vk_backend *be, int s, tsl_error *rec) {
    vk_device *d = be->dev;
    vk_slot *sl = &be->slots[s];
    const vk_exec *x = &be->exec[sl->first];
    double allow_s = be->watchdog_ms > 0 ? be->watchdog_ms / 1000.0 : vk_watchdog_base(be) + sl->work_s;
    uint64_t budget = (uint64_t)(allow_s * 1e9), t0 = core_now_ns();
    fault_site site = {.compute = be->pend_compute, .node = x->index, .tensor = x->node,
                       .kernel = vk_first_kernel(be, sl)};
    VkResult r;
    if (fault_plan_fire(be->base.faults, TSL_FAULT_LOST, &site)) {
        r = VK_ERROR_DEVICE_LOST; /* as the driver would answer; the fence is left as it is */
    } else {
        /* TSL_VULKAN_SPIN_US: poll the fence this long before sleeping on
         * it (the wake-up from a sleeping wait can take longer than a small
         * command buffer) */
        r = VK_NOT_READY;
        while (be->spin_ns && core_now_ns() - t0 < be->spin_ns && (r = vkGetFenceStatus(d->dev, sl->fence)) == VK_NOT_READY)
            ;
        t0 = core_now_ns(); /* the watchdog counts the sleeping wait */
        for (; r == VK_NOT_READY || r == VK_TIMEOUT;) {
            uint64_t el = core_now_ns() - t0;
            uint64_t slice = VK_WATCHDOG_SLICE_NS;
            if (atomic_load(&d->hung)) slice = 1000000; /* never sit on a hung device */
            r = vkWaitForFences(d->dev, 1, &sl->fence, VK_TRUE, slice);
            if (r != VK_TIMEOUT) break;
            el = core_now_ns() - t0;
            if (el >= budget) {
                const char *rn = "VK_TIMEOUT";
                tsl_status st = tsl_fault_classify("VkResult", VK_TIMEOUT, TSL_PHASE_SUBMIT, &rn);
                /* the running level, from the progress word */
                char run[128] = "";
                const int node = vk_progress_level(be, sl, run, sizeof run);
                const vk_exec *xr = vk_slot_exec(be, sl, node);
                error_set(rec, st, be->name, be->device, xr->index, xr->node,
                          node >= 0 ? vk_kernel_descs[xr->kernel].name : vk_first_kernel(be, sl),
                          "GPU hang: no progress in %.1f s (command buffer %d of %d, nodes %d..%d, did not finish%s%s)",
                          (double)el / 1e9, s + 1, be->n_used, x->index, be->exec[sl->first + sl->count - 1].index,
                          run[0] ? "; " : "", run);
                if (rec) {
                    snprintf(rec->driver_domain, sizeof rec->driver_domain, "VkResult");
                    rec->driver_code = VK_TIMEOUT;
                    snprintf(rec->driver_text, sizeof rec->driver_text, "%s", rn);
                }
                atomic_store(&d->hung, 1);
                return vk_device_set_lost(d, rec);
            }
            if (vk_device_is_lost(d) && el >= VK_LOST_GRACE_NS) /* another backend found the device lost */
                return vk_device_lost_error(d, rec);
        }
    }
    if (r == VK_SUCCESS) {
        sl->fence_pending = false;
        return TSL_SUCCESS;
    }
    /* the level the progress word says was running (or, without it, the
     * node the NV checkpoints name, where they are on), with its own
     * kernel; else the command buffer's first node */
    char run[128] = "";
    int node = r == VK_ERROR_DEVICE_LOST ? vk_progress_level(be, sl, run, sizeof run) : -1;
    int last = -1;
    if (node < 0 && r == VK_ERROR_DEVICE_LOST) {
        node = vk_device_checkpoint_node(d);
        last = vk_checkpoint_span(sl, node);
        if (last > node) snprintf(run, sizeof run, "the checkpoints place it in nodes %d..%d", node, last);
    }
    const vk_exec *xr = vk_slot_exec(be, sl, node);
    const tsl_tensor *nt = xr->node;
    const char *kname = xr->index == node ? vk_kernel_descs[xr->kernel].name : vk_first_kernel(be, sl);
    if (xr->index != node) node = x->index;
    char what[320];
    snprintf(what, sizeof what, "command buffer %d of %d (nodes %d..%d)%s%s", s + 1, be->n_used, x->index,
             be->exec[sl->first + sl->count - 1].index, run[0] ? "; " : "", run);
    tsl_status st = vk_error(rec, r, TSL_PHASE_SUBMIT, be->name, be->device, node, nt, kname, what);
    if (st == TSL_DEVICE_LOST) vk_device_set_lost(d, rec);
    return st;
}

/* The GPU time of the compute just finished: from the start of its first
 * command buffer to the end of its last. The fences have signaled, so the
 * queries are available and nothing waits. */
static void vk_read_gpu_time(vk_backend *be) {
    uint64_t q[2 * VK_MAX_CB];
    uint32_t nq = 2u * (uint32_t)be->n_used;
    VkResult r = vkGetQueryPoolResults(be->dev->dev, be->qpool, 0, nq, nq * sizeof q[0], q, sizeof q[0],
                                       VK_QUERY_RESULT_64_BIT);
    if (r != VK_SUCCESS) return;
    uint64_t span = 0;
    for (uint32_t i = 1; i < nq; i += 2) {
        uint64_t e = (q[i] - q[0]) & be->ts_mask; /* ticks wrap at the valid bits */
        if (e > span) span = e;
    }
    be->last_gpu_us = (double)span * be->ts_ns / 1e3;
    be->st_gpu_ms += be->last_gpu_us / 1e3;
}

/* TSL_VULKAN_PROFILE: charge each node the GPU time from the timestamp
 * before it (its command buffer's start, or the node before) to its own. */
static void vk_read_profile(vk_backend *be) {
    uint64_t q[2 * VK_MAX_CB];
    uint32_t nq = 2u * (uint32_t)be->n_used;
    if (vkGetQueryPoolResults(be->dev->dev, be->qpool, 0, nq, nq * sizeof q[0], q, sizeof q[0],
                              VK_QUERY_RESULT_64_BIT) != VK_SUCCESS)
        return;
    int n = be->n_exec < VK_PROF_MAX ? be->n_exec : VK_PROF_MAX;
    if (n <= 0) return;
    uint64_t *t = malloc((size_t)n * sizeof *t);
    if (!t) return;
    if (vkGetQueryPoolResults(be->dev->dev, be->ppool, 0, (uint32_t)n, (size_t)n * sizeof *t, t, sizeof *t,
                              VK_QUERY_RESULT_64_BIT) == VK_SUCCESS) {
        for (int s = 0; s < be->n_used; s++) {
            const vk_slot *sl = &be->slots[s];
            uint64_t prev = q[2 * s];
            for (int k = sl->first; k < sl->first + sl->count && k < n; k++) {
                uint64_t d = (t[k] - prev) & be->ts_mask;
                prev = t[k];
                int id = be->exec[k].kernel;
                if (id < 0 || id >= VK_K_COUNT) continue;
                const double us = (double)d * be->ts_ns / 1e3;
                be->prof[id].us += us;
                be->prof[id].n++;
                const tsl_tensor *nd = be->exec[k].node;
                if (nd->op == TSL_OP_MUL_MAT && vk_mm_kernel(id) && nd->src[1] && nd->src[1]->ne[1] == 1) {
                    const tsl_tensor *w = nd->src[0];
                    int j = 0;
                    while (j < be->n_prof_mm && (be->prof_mm[j].kernel != id || be->prof_mm[j].m != w->ne[1] ||
                                                 be->prof_mm[j].k != w->ne[0]))
                        j++;
                    if (j == be->n_prof_mm && j < (int)(sizeof be->prof_mm / sizeof be->prof_mm[0])) {
                        be->prof_mm[j].kernel = id;
                        be->prof_mm[j].m = w->ne[1];
                        be->prof_mm[j].k = w->ne[0];
                        be->prof_mm[j].bytes = tsl_nbytes(w);
                        be->n_prof_mm++;
                    }
                    if (j < be->n_prof_mm) {
                        be->prof_mm[j].us += us;
                        be->prof_mm[j].n++;
                    }
                }
            }
        }
    }
    free(t);
}

static void vk_print_profile(const vk_backend *be) {
    double total = 0;
    int order[VK_K_COUNT], m = 0;
    for (int i = 0; i < VK_K_COUNT; i++)
        if (be->prof[i].n) {
            total += be->prof[i].us;
            order[m++] = i;
        }
    if (!m) return;
    for (int i = 1; i < m; i++) /* by time, largest first */
        for (int j = i; j > 0 && be->prof[order[j]].us > be->prof[order[j - 1]].us; j--) {
            int x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    fprintf(stderr, "%s GPU profile (%s): %.3f ms in all\n  %-36s %10s %12s %10s %6s\n", be->name, be->device,
            total / 1e3, "kernel", "dispatches", "total ms", "mean us", "share");
    for (int i = 0; i < m; i++) {
        const int k = order[i];
        fprintf(stderr, "  %-36s %10llu %12.3f %10.2f %5.1f%%\n", vk_kernel_descs[k].name,
                (unsigned long long)be->prof[k].n, be->prof[k].us / 1e3, be->prof[k].us / (double)be->prof[k].n,
                100.0 * be->prof[k].us / total);
    }
    if (be->n_prof_mm)
        fprintf(stderr, "  one-column products by weight shape:\n  %-36s %12s %10s %10s %10s\n", "kernel", "M x K",
                "calls", "mean us", "GB/s");
    for (int j = 0; j < be->n_prof_mm; j++) {
        char shape[48];
        snprintf(shape, sizeof shape, "%lldx%lld", (long long)be->prof_mm[j].m, (long long)be->prof_mm[j].k);
        const double mean = be->prof_mm[j].us / (double)be->prof_mm[j].n;
        fprintf(stderr, "  %-36s %12s %10llu %10.2f %10.1f\n", vk_kernel_descs[be->prof_mm[j].kernel].name, shape,
                (unsigned long long)be->prof_mm[j].n, mean, (double)be->prof_mm[j].bytes / (mean * 1e3));
    }
}

static tsl_status vk_xfer_reap(vk_backend *be, tsl_error *err);

/* spin_auto: for a compute running the last one's commands, sleep until
 * its expected end (the last GPU time, less a margin), then poll. */
static void vk_wait_plan(vk_backend *be) {
    vk_device *d = be->dev;
    if (!be->spin_auto) return;
    be->spin_ns = 0;
    if (!be->same_cmds || be->last_gpu_us <= 0 || be->n_submitted != be->n_used || be->n_used < 1 ||
        atomic_load(&d->hung) || vk_device_is_lost(d))
        return;
    const uint64_t expect = (uint64_t)(be->last_gpu_us * 1e3);
    const uint64_t margin = VK_SPIN_MARGIN_NS + (expect / 20 < VK_SPIN_MARGIN_NS ? expect / 20 : VK_SPIN_MARGIN_NS);
    const uint64_t now = core_now_ns(), wake = be->submit_ns + expect;
    if (wake > now + margin) /* whatever it answers, the waits below ask again */
        (void)vkWaitForFences(d->dev, 1, &be->slots[be->n_used - 1].fence, VK_TRUE, wake - margin - now);
    be->spin_ns = 2 * margin;
}

/* Finish the compute in flight: wait for what was submitted, collect data
 * errors from the status words, and give its status. */
static tsl_status vk_finish(vk_backend *be, tsl_error *err) {
    tsl_status st = be->pend_status;
    tsl_error rec = be->pend_err;
    vk_wait_plan(be);
    for (int s = 0; s < be->n_used; s++) {
        if (!be->slots[s].fence_pending) continue;
        tsl_error wrec;
        tsl_error_clear(&wrec);
        tsl_status ws = vk_wait_slot(be, s, &wrec);
        if (ws == TSL_SUCCESS) continue;
        if (ws == TSL_DEVICE_LOST || st == TSL_SUCCESS) {
            st = ws;
            rec = wrec;
        }
        if (ws == TSL_DEVICE_LOST) break; /* nothing more to wait for on a lost device */
    }
    /* Copies left in flight before this compute (a small upload) ran before
     * its command buffers, which read what they wrote: their completion is
     * learned here, and a loss found there is this compute's to report.
     * After the compute's own fences, so that a loss found by those keeps
     * the node the checkpoints name (a lost device fails every wait). */
    if (st != TSL_DEVICE_LOST && be->n_submitted > 0) {
        tsl_error xrec;
        tsl_error_clear(&xrec);
        tsl_status xs = vk_xfer_reap(be, &xrec);
        if (xs == TSL_DEVICE_LOST || (xs != TSL_SUCCESS && st == TSL_SUCCESS)) {
            st = xs;
            rec = xrec;
        }
    }
    if (st == TSL_SUCCESS && be->qpool && be->n_submitted == be->n_used) {
        vk_read_gpu_time(be);
        if (be->ppool) vk_read_profile(be);
    }
    if (st == TSL_SUCCESS && be->swords[0] == 2) {
        /* a product's wait for its producer ran past its bound
         * (vk_wait_edge): the device did not run the producer beside it.
         * Nothing is latched; the waits are off for this backend from now
         * on, so the same graph runs again with barriers. */
        const int node = (int)be->swords[1];
        const vk_exec *wx = NULL;
        for (int k = 0; k < be->n_exec; k++)
            if (be->exec[k].index == node) wx = &be->exec[k];
        be->wait = 0;
        st = error_set(&rec, TSL_RETRY, be->name, be->device, node, wx ? wx->node : NULL,
                       wx ? vk_kernel_descs[wx->kernel].name : NULL,
                       "kernel waited past its bound for the workgroups before it (%u of %u counted): this device did "
                       "not run it beside them; waits are off for %s now (barriers instead), run the graph again",
                       be->swords[2], be->swords[3], be->name);
    } else if (st == TSL_SUCCESS && be->swords[0] != 0) {
        int node = (int)be->swords[1];
        const tsl_tensor *nt = NULL;
        for (int k = 0; k < be->n_exec; k++) {
            if (be->exec[k].index == node) nt = be->exec[k].node;
            /* a store the q/k/v product took in (vk_qkv_rope) */
            if (be->exec[k].kstore && (int)be->exec[k].rope[4] == node) nt = be->exec[k].kstore;
        }
        const tsl_tensor *tab = nt ? nt->src[0] : NULL, *idx = nt ? nt->src[1] : NULL;
        if (nt && nt->op == TSL_OP_SET_ROWS) {
            const int dim = op_get_i32(nt, 0);
            st = error_set(&rec, TSL_FAILED, be->name, be->device, node, nt, NULL,
                           "set_rows: index %d at position %u of '%s' is out of range ('%s' has %lld %s)",
                           (int)be->swords[2], be->swords[3], vk_label(idx), vk_label(nt->src[2]),
                           (long long)nt->ne[dim], dim == 1 ? "rows" : "columns");
        } else {
            st = error_set(&rec, TSL_FAILED, be->name, be->device, node, nt, NULL,
                           "get_rows: index %d at position %u of '%s' is out of range (table '%s' has %lld rows)",
                           (int)be->swords[2], be->swords[3], vk_label(idx), vk_label(tab),
                           tab ? (long long)tab->ne[1] : 0LL);
        }
    }
    be->rb_valid = st == TSL_SUCCESS && be->n_rbo > 0 && be->n_submitted == be->n_used;
    if (st != TSL_SUCCESS) be->rp.ok = false; /* a failed compute is resolved and encoded afresh */
    be->pending = false;
    if (st != TSL_SUCCESS && err) *err = rec;
    return st;
}

/* Wait (bounded) until the compute in flight has finished on the device,
 * leaving its status for synchronize. For host access to mapped memory. */
static tsl_status vk_quiesce(vk_backend *be, tsl_error *err) {
    if (!be->pending) return TSL_SUCCESS;
    uint64_t bound = VK_TEARDOWN_WAIT_NS;
    for (int s = 0; s < be->n_used; s++) {
        vk_slot *sl = &be->slots[s];
        if (!sl->fence_pending) continue;
        double allow_s = be->watchdog_ms > 0 ? be->watchdog_ms / 1000.0 : vk_watchdog_base(be) + sl->work_s;
        bound = (uint64_t)(allow_s * 1e9);
        uint64_t t0 = core_now_ns();
        VkResult r;
        do {
            r = vkWaitForFences(be->dev->dev, 1, &sl->fence, VK_TRUE, VK_WATCHDOG_SLICE_NS);
        } while (r == VK_TIMEOUT && core_now_ns() - t0 < bound && !vk_device_is_lost(be->dev));
        if (r != VK_SUCCESS) {
            /* synchronize will say what happened; the data is not there */
            return error_set(err, TSL_DEVICE_LOST, be->name, be->device, -1, NULL, NULL,
                             "the compute in flight did not finish (%s); synchronize for its status",
                             vk_result_name(r, TSL_PHASE_SUBMIT));
        }
    }
    return TSL_SUCCESS;
}

/* ---- compute -------------------------------------------------------------------- */

static bool vk_should_abort(vk_backend *be, uint64_t compute, const vk_exec *next) {
    if (be->base.abort_fn && be->base.abort_fn(be->base.abort_user)) return true;
    fault_site site = {.compute = compute, .node = next->index, .tensor = next->node};
    return fault_plan_fire(be->base.faults, TSL_FAULT_ABORT, &site);
}

/* Cut n compute nodes into command buffers; returns how many are used.
 * By default a command buffer gets at least VK_MIN_CB_NODES nodes (a small
 * graph gains nothing from parallel encoding and pays a submission and a
 * fence per command buffer); a count set explicitly is used as given. */
/* The first place at or after `at` (<= n) where a command buffer may end:
 * not between an exec and those that find their column in its command
 * buffer's state (an attention that leaves its output unwritten and its
 * reader; a product that made a norm's column and the products reading
 * it: vk_exec.noout, .keep). */
static int vk_split_at(const vk_backend *be, int at, int n) {
    for (bool moved = true; moved && at < n;) {
        moved = false;
        for (int e = at - 1; e >= 0 && e >= at - 5; e--) {
            const int keep = be->exec[e].noout ? 1 : be->exec[e].keep;
            if (e + keep >= at) {
                at = e + keep + 1 < n ? e + keep + 1 : n;
                moved = true;
                break;
            }
        }
    }
    return at;
}

static int vk_plan(vk_backend *be, int n, bool one) {
    int ncb = one ? 1 : be->n_cb < n ? be->n_cb : n;
    if (!be->cb_explicit && ncb > 1 && n / ncb < VK_MIN_CB_NODES) ncb = n / VK_MIN_CB_NODES > 1 ? n / VK_MIN_CB_NODES : 1;
    if (ncb <= 1) {
        be->slots[0].first = 0;
        be->slots[0].count = n;
        return 1;
    }
    int main_n = n / ncb;
    if (main_n > VK_MAIN_MAX_NODES) main_n = VK_MAIN_MAX_NODES;
    if (main_n < 1) main_n = 1;
    main_n = vk_split_at(be, main_n, n);
    int rest = n - main_n, per = (rest + ncb - 2) / (ncb - 1);
    be->slots[0].first = 0;
    be->slots[0].count = main_n;
    int used = 1, at = main_n;
    while (at < n) {
        int c = n - at < per ? n - at : per;
        c = vk_split_at(be, at + c, n) - at;
        be->slots[used].first = at;
        be->slots[used].count = c;
        at += c;
        used++;
    }
    return used;
}

/* The outputs this compute copies back itself (TSL_FLAG_READBACK): those in
 * this backend's tensor memory that the host cannot map, contiguous, up to
 * VK_RB_MAX of them in VK_RB_MAX_BYTES; rb grown to hold them. Anything
 * that does not fit, or a readback buffer that cannot be had, is read by
 * tsl_tensor_get's own copy as before. */
static void vk_plan_readback(vk_backend *be, const tsl_graph *g) {
    vk_device *d = be->dev;
    be->n_rbo = 0;
    be->rb_valid = false;
    size_t total = 0;
    for (int i = 0; i < g->n_nodes && be->n_rbo < VK_RB_MAX; i++) {
        const tsl_tensor *t = g->nodes[i];
        const tsl_buffer *buf = t->buffer;
        if (!(t->flags & TSL_FLAG_READBACK) || !buf || buf->be != &be->base || !buf->handle) continue;
        const vk_buf *vb = buf->handle;
        if (!vb->blk || vb->blk->map || vb->gen != d->gen || !tsl_is_contiguous(t)) continue;
        const uintptr_t a = (uintptr_t)t->data, b0 = (uintptr_t)buf->base;
        const size_t n = tsl_nbytes(t);
        if (n == 0 || a < b0 || a - b0 > buf->size || n > buf->size - (a - b0)) continue;
        const size_t at = (total + 255) & ~(size_t)255;
        if (at + n > VK_RB_MAX_BYTES) continue;
        be->rbo[be->n_rbo].vb = vb;
        be->rbo[be->n_rbo].off = a - b0;
        be->rbo[be->n_rbo].n = n;
        be->rbo[be->n_rbo].at = at;
        be->rbo[be->n_rbo].src = vb->blk->buf;
        be->rbo[be->n_rbo].src_off = vb->off + (a - b0);
        be->n_rbo++;
        total = at + n;
    }
    if (be->n_rbo == 0 || be->rb_size >= total) return;
    /* a larger buffer: command buffers recorded with the old one are not
     * submitted again (the device's epoch) */
    if (be->rb) {
        atomic_fetch_add(&d->epoch, 1);
        vk_host_buffer_free(d, &be->rb, &be->rb_mem, &be->rb_map);
        be->rb_size = 0;
    }
    const size_t want = total < ((size_t)1 << 20) ? (size_t)1 << 20 : total;
    tsl_error e;
    tsl_error_clear(&e);
    if (vk_host_buffer(d, want, &be->rb, &be->rb_mem, &be->rb_map, &e, be->name) == TSL_SUCCESS) {
        be->rb_size = want;
    } else {
        TSL_LOGI("%s: no readback buffer (%s); outputs are read by their own copies", be->name, e.message);
        be->n_rbo = 0;
    }
}

/* Is g the last compute's graph, stamped unchanged since (tsl_graph.stamp)? */
static bool vk_repeated(const vk_backend *be, const tsl_graph *g) {
    return be->rp.ok && g->stamp != 0 && g->stamp == be->rp.stamp && g->nodes == be->rp.nodes && g->n_nodes == be->rp.n;
}

/* May g be submitted again as the last compute recorded it, without
 * resolving or encoding? Only for a graph its caller stamped unchanged
 * since then (tsl_graph.stamp), while no pipeline or tensor memory of the
 * device went or came (epoch, mem_gen, gen), no kernel failed or was
 * forgiven, and no fault rule is set (rules fire in the resolve). */
static bool vk_replay(const vk_backend *be, const tsl_graph *g) {
    const vk_device *d = be->dev;
    if (!vk_repeated(be, g) || be->no_reuse || !fault_plan_empty(be->base.faults)) return false;
    if (be->rp.used > 1 && !be->cb_explicit) return false; /* recorded once more, into one (vk_compute) */
    if (atomic_load(&d->epoch) != be->rp.epoch || atomic_load(&d->mem_gen) != be->rp.mem_gen || d->gen != be->rp.gen ||
        backend_support_gen(&be->base) != be->rp.support)
        return false;
    for (int s = 0; s < be->rp.used; s++)
        if (!be->slots[s].recorded || be->slots[s].rec_epoch != be->rp.epoch) return false;
    return true;
}

static tsl_status vk_compute(vk_backend *be, tsl_graph *g, tsl_error *err) {
    vk_device *d = be->dev;
    if (be->pending) {
        /* a compute nobody synchronized: finish it; its failure has no one
         * left to report to but the log */
        tsl_error old;
        tsl_error_clear(&old);
        if (vk_finish(be, &old) != TSL_SUCCESS) {
            char line[512];
            tsl_error_format(&old, line, sizeof line);
            TSL_LOGW("a compute that was never synchronized failed: %s", line);
        }
    }
    be->last = TSL_SUCCESS;
    if (vk_device_is_lost(d)) return vk_device_lost_error(d, err);
    uint64_t compute = atomic_load_explicit(&be->base.n_computes, memory_order_relaxed);
    if (g->n_nodes > be->exec_cap) {
        int cap = g->n_nodes < 64 ? 64 : g->n_nodes;
        vk_exec *ex = realloc(be->exec, (size_t)cap * sizeof *ex);
        if (!ex)
            return error_set(err, TSL_ALLOC_FAILED, be->name, be->device, -1, NULL, NULL,
                             "could not allocate the node list for %d nodes", g->n_nodes);
        be->exec = ex;
        be->exec_cap = cap;
    }

    /* 1. resolve (or the last compute's, for a graph stamped unchanged) */
    uint64_t tr = core_now_ns();
    /* A graph stamped like the last compute's is being repeated: its
     * commands go into one command buffer (recorded once more if the last
     * compute split them), and later computes replay that. Several command
     * buffers let the GPU start while the rest is encoded; a replay encodes
     * nothing, and each boundary costs the GPU a drain (8B decode on the
     * H200: 3.90 ms of GPU time a token in one, 3.99 in four; run 50). */
    const bool again = vk_repeated(be, g) && !be->cb_explicit;
    const bool replay = vk_replay(be, g);
    be->rp.ok = false; /* armed again below once this compute is all submitted */
    ledger_begin(&be->ledger, be->name, be->device);
    int n = be->n_exec;
    if (!replay) {
        ledger_sink_set(&be->ledger);
        n = vk_resolve(be, g, compute);
        if (!ledger_failed(&be->ledger)) n = vk_fuse_norms(be, g, vk_fuse_qkv_ropes(be, g, vk_fuse(be, g, n)));
        if (!ledger_failed(&be->ledger)) vk_q4s_twins(be, compute, n);
        ledger_sink_clear(); /* lookups after this land in no sink and are only logged */
    }
    atomic_store_explicit(&be->base.resolve_ns, core_now_ns() - tr, memory_order_relaxed);
    be->n_exec = n;
    if (ledger_failed(&be->ledger)) return ledger_result(&be->ledger, err);
    if (vk_device_is_lost(d)) return vk_device_lost_error(d, err); /* a build found the device lost */
    if (n == 0) return TSL_SUCCESS;

    /* 2. encode and submit */
    if (replay)
        be->rb_valid = false; /* the read-back outputs are the last compute's */
    else
        vk_plan_readback(be, g);
    uint64_t t0 = core_now_ns();
    atomic_fetch_add_explicit(&be->st_computes, 1, memory_order_relaxed);
    if (replay) atomic_fetch_add_explicit(&be->st_replays, 1, memory_order_relaxed);
    int used = replay ? be->rp.used : vk_plan(be, n, again);
    for (int s = 0; s < used; s++) {
        vk_slot *sl = &be->slots[s];
        sl->work_s = 0;
        for (int k = 0; k < sl->count; k++) sl->work_s += be->exec[sl->first + k].cost_s;
        sl->fence_pending = false;
    }
    memset(be->swords, 0, (VK_SW_PROGRESS + 1) * sizeof *be->swords);
    if (!replay && used > 1 && !vk_ensure_threads(be, used - 1)) {
        TSL_LOGW("%s: could not start encoder threads; encoding on the calling thread", be->name);
        for (int s = 1; s < used; s++) be->slots[0].count += be->slots[s].count;
        used = 1;
    }
    be->n_used = used;
    be->pend_compute = compute;
    const bool workers = !replay && used > 1;
    if (workers) {
        pthread_mutex_lock(&be->wlock);
        be->job_slots = used;
        for (int s = 1; s < used; s++) be->done[s] = false;
        be->wgen++;
        pthread_cond_broadcast(&be->wcv);
        pthread_mutex_unlock(&be->wlock);
    }
    if (replay) {
        for (int s = 0; s < used; s++) {
            be->slots[s].reused = true;
            be->slots[s].encode_ms = 0;
        }
    } else {
        vk_encode_slot(be, 0);
    }

    tsl_status st = TSL_SUCCESS;
    tsl_error rec;
    tsl_error_clear(&rec);
    int submitted = 0;
    for (int s = 0; s < used; s++) {
        vk_slot *sl = &be->slots[s];
        const vk_exec *x = &be->exec[sl->first];
        if (s > 0 && workers) vk_wait_done(be, s);
        if (ledger_failed(&be->ledger)) {
            st = TSL_FAILED; /* the record comes from the ledger once every encoder is done */
            break;
        }
        if (s > 0 && vk_should_abort(be, compute, x)) {
            st = error_set(&rec, TSL_ABORTED, be->name, be->device, x->index, x->node, NULL,
                           "stopped by the abort callback before this node (%d of %d command buffers submitted)",
                           submitted, used);
            break;
        }
        fault_site site = {.compute = compute, .node = x->index, .tensor = x->node, .kernel = vk_first_kernel(be, sl)};
        VkResult r;
        if (fault_plan_fire(be->base.faults, TSL_FAULT_RETRY, &site)) {
            r = VK_ERROR_OUT_OF_DEVICE_MEMORY; /* the driver's answer to work it cannot take now */
        } else {
            VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &sl->cb};
            r = vkResetFences(d->dev, 1, &sl->fence); /* signaled by its last use */
            if (r == VK_SUCCESS) {
                pthread_mutex_lock(&d->qlock);
                r = vkQueueSubmit(d->queue, 1, &si, sl->fence);
                pthread_mutex_unlock(&d->qlock);
            }
        }
        if (r != VK_SUCCESS) {
            char what[160];
            snprintf(what, sizeof what, "submitting command buffer %d of %d (nodes %d..%d; %d submitted before it)",
                     s + 1, used, x->index, be->exec[sl->first + sl->count - 1].index, submitted);
            st = vk_error(&rec, r, TSL_PHASE_SUBMIT, be->name, be->device, x->index, x->node, NULL, what);
            if (st == TSL_DEVICE_LOST) vk_device_set_lost(d, &rec);
            break;
        }
        sl->fence_pending = true;
        submitted++;
    }
    for (int s = 1; workers && s < used; s++) vk_wait_done(be, s); /* every encoder has left its block */
    if (st == TSL_FAILED && ledger_failed(&be->ledger) && rec.status == TSL_SUCCESS)
        st = ledger_result(&be->ledger, &rec);
    atomic_fetch_add_explicit(&be->st_submits, (uint64_t)submitted, memory_order_relaxed);
    be->n_submitted = submitted;
    be->submit_ns = core_now_ns();
    uint64_t disp = 0, bar = 0, sdisp = 0;
    double enc = 0;
    uint64_t reused = 0;
    for (int s = 0; s < used; s++) {
        reused += be->slots[s].reused;
        disp += be->slots[s].dispatches;
        sdisp += be->slots[s].set_dispatches;
        bar += be->slots[s].barriers;
        enc += be->slots[s].encode_ms;
    }
    atomic_fetch_add_explicit(&be->st_dispatches, disp, memory_order_relaxed);
    atomic_fetch_add_explicit(&be->st_set_dispatches, sdisp, memory_order_relaxed);
    atomic_fetch_add_explicit(&be->st_barriers, bar, memory_order_relaxed);
    atomic_fetch_add_explicit(&be->st_reused, reused, memory_order_relaxed);
    be->st_encode_ms += enc;
    be->last_us_per_node = (double)(core_now_ns() - t0) / 1e3 / n;
    be->last_cbs = used;
    be->same_cmds = replay || reused == (uint64_t)used;

    bool all = st == TSL_SUCCESS && submitted == used && !be->no_reuse;
    for (int s = 0; all && s < used; s++) all = be->slots[s].recorded;
    if (all) {
        be->rp.nodes = g->nodes;
        be->rp.n = g->n_nodes;
        be->rp.used = used;
        be->rp.stamp = g->stamp;
        be->rp.epoch = atomic_load(&d->epoch);
        be->rp.mem_gen = atomic_load(&d->mem_gen);
        be->rp.gen = d->gen;
        be->rp.support = backend_support_gen(&be->base);
        be->rp.ok = g->stamp != 0; /* until vk_finish says otherwise */
    }

    be->pending = true;
    be->pend_status = st;
    be->pend_err = rec;
    if (st != TSL_SUCCESS && err) *err = rec;
    return st;
}

static tsl_status vk_graph_compute_async(tsl_backend *b, tsl_graph *g, tsl_error *err) {
    vk_backend *be = (vk_backend *)b;
    if (atomic_exchange_explicit(&be->busy, 1, memory_order_acquire))
        return error_set(err, TSL_FAILED, be->name, be->device, -1, NULL, NULL,
                         "the backend is already computing a graph on another thread; use one backend per thread");
    tsl_status s = vk_compute(be, g, err);
    if (!be->pending) { /* failed before anything was submitted: synchronize repeats it */
        be->last = s;
        if (s != TSL_SUCCESS && err) be->last_err = *err;
        else tsl_error_clear(&be->last_err);
    }
    atomic_store_explicit(&be->busy, 0, memory_order_release);
    return s;
}

static tsl_status vk_synchronize(tsl_backend *b, tsl_error *err) {
    vk_backend *be = (vk_backend *)b;
    if (atomic_exchange_explicit(&be->busy, 1, memory_order_acquire))
        return error_set(err, TSL_FAILED, be->name, be->device, -1, NULL, NULL,
                         "synchronize while the backend is computing on another thread");
    tsl_status s;
    if (be->pending) {
        s = vk_finish(be, err);
    } else {
        s = be->last;
        if (s != TSL_SUCCESS && err) *err = be->last_err;
    }
    be->last = TSL_SUCCESS;
    tsl_error_clear(&be->last_err);
    atomic_store_explicit(&be->busy, 0, memory_order_release);
    return s;
}

/* ---- buffers ---------------------------------------------------------------------- */

static void *vk_buffer_alloc(tsl_backend *b, size_t size, void **base, tsl_error *err) {
    vk_backend *be = (vk_backend *)b;
    fault_site site = {.compute = atomic_load_explicit(&be->base.n_computes, memory_order_relaxed),
                       .node = -1,
                       .bytes = size};
    if (fault_plan_fire(be->base.faults, TSL_FAULT_ALLOC, &site)) {
        char what[96];
        snprintf(what, sizeof what, "allocating a buffer of %zu bytes (injected fault)", size);
        vk_error(err, VK_ERROR_OUT_OF_DEVICE_MEMORY, TSL_PHASE_ALLOC, be->name, be->device, -1, NULL, NULL, what);
        return NULL;
    }
    if (vk_device_is_lost(be->dev)) {
        vk_device_lost_error(be->dev, err);
        return NULL;
    }
    vk_buf *vb = vk_mem_alloc(be->dev, size, be->name, err);
    if (!vb) return NULL;
    vb->owner = be;
    *base = (void *)vb->va;
    return vb;
}

static bool vk_fence_done(vk_device *d, VkFence f, uint64_t bound);

/* Wait (bounded) for every command buffer this backend submitted, also
 * those of a compute already reported (a loss is reported without waiting
 * for the device). True when none is left running. */
static bool vk_drain(vk_backend *be) {
    vk_device *d = be->dev;
    uint64_t bound = VK_TEARDOWN_WAIT_NS;
    if (be->watchdog_ms > 0 && (uint64_t)be->watchdog_ms * 1000000ull > bound)
        bound = (uint64_t)be->watchdog_ms * 1000000ull;
    bool done = true;
    for (int s = 0; s < VK_MAX_CB + VK_XFER_SLOTS; s++) {
        bool xfer = s >= VK_MAX_CB;
        bool pending = xfer ? be->xs[s - VK_MAX_CB].pending : be->slots[s].fence_pending;
        if (!pending) continue;
        /* a device found hung gets no more than a glance */
        if (atomic_load(&d->hung)) bound = 1000000ull;
        if (!vk_fence_done(d, xfer ? be->xs[s - VK_MAX_CB].fence : be->slots[s].fence, bound)) {
            done = false;
            bound = 1000000ull; /* one wait ran out: the device is not finishing */
            continue;
        }
        if (xfer) be->xs[s - VK_MAX_CB].pending = false;
        else if (!be->pending) be->slots[s].fence_pending = false; /* else synchronize still has to see it */
    }
    return done;
}

static void vk_buffer_free(tsl_backend *b, void *handle) {
    vk_backend *be = (vk_backend *)b;
    vk_buf *vb = handle;
    for (int k = 0; k < be->n_rbo; k++)
        if (be->rbo[k].vb == vb) be->n_rbo = 0, be->rb_valid = false; /* its read-back copy goes with it */
    /* Kernels in flight may still use the memory: it goes back only once
     * they are done. On a device that never finishes it is kept (and the
     * device's objects are left allocated at teardown) rather than handed
     * to the next buffer while the GPU may still write it. */
    if (!vk_drain(be)) {
        atomic_store(&be->dev->unclean, 1);
        TSL_LOGW("%s: a buffer was freed while work on %s had not finished; its memory is not reused", be->name,
                 be->device);
        free(vb);
        return;
    }
    vk_mem_free(be->dev, vb);
}

static tsl_status vk_transfer(vk_backend *be, vk_buf *vb, size_t off, void *host, size_t n, bool write,
                              const char *tname, tsl_error *err);

/* Recovery: new memory on the new device, behind the same address, zeroed
 * (whatever is in it afterwards was really restored). */
static tsl_status vk_buffer_recreate(tsl_backend *b, void **handle, size_t size, tsl_error *err) {
    vk_backend *be = (vk_backend *)b;
    vk_buf *vb = *handle;
    fault_site site = {.compute = atomic_load_explicit(&be->base.n_computes, memory_order_relaxed),
                       .node = -1,
                       .bytes = size};
    if (fault_plan_fire(be->base.faults, TSL_FAULT_ALLOC, &site)) {
        char what[96];
        snprintf(what, sizeof what, "reallocating a buffer of %zu bytes (injected fault)", size);
        return vk_error(err, VK_ERROR_OUT_OF_DEVICE_MEMORY, TSL_PHASE_ALLOC, be->name, be->device, -1, NULL, NULL,
                        what);
    }
    vk_buf *nb = vk_mem_alloc(be->dev, size, be->name, err);
    if (!nb) return err ? err->status : TSL_ALLOC_FAILED;
    uintptr_t va = vb->va;
    vk_mem_free(be->dev, vb); /* a range of the old device just goes with its grave */
    nb->va = va;              /* tensors hold base + offset */
    nb->owner = be;
    *handle = nb;
    if (nb->blk->map) {
        memset((char *)nb->blk->map + nb->off, 0, (size_t)nb->size);
        return TSL_SUCCESS;
    }
    return vk_transfer(be, nb, 0, NULL, (size_t)nb->size, true, NULL, err);
}

static size_t vk_buffer_alignment(const tsl_backend *b) { return VK_ALIGN; }

/* ---- host side of staging copies ------------------------------------------------ */

/* One thread copies at about 6-10 GB/s into or out of host memory, well
 * under what a PCIe 5 GPU's copy engine takes (seen on the H200: 6-7 GB/s
 * for a 1 GiB upload with one thread), so a large chunk is split over a few
 * helper threads, made on first need and kept like the encoders. Staging
 * copies are serialized by xlock, so one split runs at a time. */
static void *vk_xhelper_main(void *arg) {
    vk_backend *be = ((void **)arg)[0];
    int p = (int)(intptr_t)((void **)arg)[1];
    uint64_t seen = (uint64_t)(uintptr_t)((void **)arg)[2];
    free(arg);
    pthread_mutex_lock(&be->xplock);
    for (;;) {
        while (!be->xpquit && be->xpgen == seen) pthread_cond_wait(&be->xpcv, &be->xplock);
        if (be->xpquit) break;
        seen = be->xpgen;
        char *dst = be->xpart[p + 1].dst;
        const char *src = be->xpart[p + 1].src;
        size_t n = be->xpart[p + 1].n;
        pthread_mutex_unlock(&be->xplock);
        if (n) memcpy(dst, src, n);
        pthread_mutex_lock(&be->xplock);
        if (--be->xpleft == 0) pthread_cond_signal(&be->xpdone);
    }
    pthread_mutex_unlock(&be->xplock);
    return NULL;
}

static void vk_xhelpers_start(vk_backend *be) {
    while (be->n_xthreads < be->xwant) {
        void **arg = malloc(3 * sizeof *arg);
        if (!arg) break;
        arg[0] = be;
        arg[1] = (void *)(intptr_t)be->n_xthreads;
        pthread_mutex_lock(&be->xplock);
        arg[2] = (void *)(uintptr_t)be->xpgen;
        pthread_mutex_unlock(&be->xplock);
        if (pthread_create(&be->xthreads[be->n_xthreads], NULL, vk_xhelper_main, arg) != 0) {
            free(arg);
            break;
        }
        be->n_xthreads++;
    }
    be->xwant = be->n_xthreads; /* what could not be started is not asked for again */
}

/* memcpy, split over the helpers when large. xlock held. */
static void vk_par_memcpy(vk_backend *be, void *dst, const void *src, size_t n) {
    if (n < VK_XFER_PAR_MIN || be->xwant == 0) {
        memcpy(dst, src, n);
        return;
    }
    if (be->n_xthreads < be->xwant) vk_xhelpers_start(be);
    int parts = be->n_xthreads + 1;
    size_t per = (n / (size_t)parts + 63) / 64 * 64;
    pthread_mutex_lock(&be->xplock);
    for (int p = 0; p < parts; p++) {
        size_t at = (size_t)p * per < n ? (size_t)p * per : n;
        size_t len = n - at < per ? n - at : per;
        be->xpart[p].dst = (char *)dst + at;
        be->xpart[p].src = (const char *)src + at;
        be->xpart[p].n = len;
    }
    be->xpleft = parts - 1;
    be->xpgen++;
    pthread_cond_broadcast(&be->xpcv);
    pthread_mutex_unlock(&be->xplock);
    if (be->xpart[0].n) memcpy(be->xpart[0].dst, be->xpart[0].src, be->xpart[0].n);
    pthread_mutex_lock(&be->xplock);
    while (be->xpleft > 0) pthread_cond_wait(&be->xpdone, &be->xplock);
    pthread_mutex_unlock(&be->xplock);
}

/* A copy's failure in err names the copy: op "copy", and the tensor it
 * was for where one is known. */
static void vk_copy_record(tsl_error *err, const char *tensor) {
    if (!err) return;
    snprintf(err->op, sizeof err->op, "copy");
    snprintf(err->tensor, sizeof err->tensor, "%s", tensor ? tensor : "");
}

/* Wait (bounded) for staging chunk x; a read's bytes then go to the host.
 * A chunk that makes no progress within the watchdog is a hung GPU. This
 * is where a copy's completion is learned, for copies waited for at once
 * and for those left in flight (a small upload, a copy that failed midway)
 * alike; an injected "copylost" fires here and is taken as the driver's
 * VK_ERROR_DEVICE_LOST (the fence is left as it is, as at a compute's).
 * A loss latches whether or not the caller wants the record. xlock held. */
static tsl_status vk_xfer_wait(vk_backend *be, vk_xslot *x, void *host, bool write, tsl_error *err) {
    vk_device *d = be->dev;
    tsl_error own;
    if (!err) err = &own;
    uint64_t t0 = core_now_ns(), bound = (uint64_t)((vk_watchdog_base(be) + (double)x->n / 1e9) * 1e9);
    if (be->watchdog_ms > 0) bound = (uint64_t)be->watchdog_ms * 1000000ull;
    fault_site site = {.compute = atomic_load_explicit(&be->base.n_computes, memory_order_relaxed),
                       .node = -1,
                       .bytes = x->n,
                       .copy = ++be->n_copies,
                       .tensor_name = x->tensor};
    const bool injected = fault_plan_fire(be->base.faults, TSL_FAULT_COPYLOST, &site);
    VkResult r = VK_ERROR_DEVICE_LOST; /* as the driver would answer, when injected */
    if (!injected) {
        do {
            r = vkWaitForFences(d->dev, 1, &x->fence, VK_TRUE, VK_WATCHDOG_SLICE_NS);
        } while (r == VK_TIMEOUT && core_now_ns() - t0 < bound);
    }
    if (r == VK_TIMEOUT) {
        error_set(err, TSL_DEVICE_LOST, be->name, be->device, -1, NULL, NULL,
                  "GPU hang: a copy of %zu bytes made no progress in %.1f s", x->n, (double)bound / 1e9);
        if (err) {
            snprintf(err->driver_domain, sizeof err->driver_domain, "VkResult");
            err->driver_code = VK_TIMEOUT;
            snprintf(err->driver_text, sizeof err->driver_text, "VK_TIMEOUT");
        }
        vk_copy_record(err, x->tensor);
        atomic_store(&d->hung, 1);
        return vk_device_set_lost(d, err);
    }
    if (r != VK_SUCCESS) {
        char what[160], span[64];
        if (x->n < x->total)
            snprintf(span, sizeof span, "bytes %zu..%zu of %zu", x->at, x->at + x->n, x->total);
        else
            snprintf(span, sizeof span, "%zu bytes", x->n);
        snprintf(what, sizeof what, "copying %s %s the device%s", span, x->write ? "into" : "out of",
                 x->deferred ? " (left in flight when tsl_tensor_set returned)" : "");
        tsl_status st = vk_error(err, r, TSL_PHASE_SUBMIT, be->name, be->device, -1, NULL, NULL, what);
        vk_copy_record(err, x->tensor);
        if (injected) {
            size_t len = strlen(err->driver_text);
            snprintf(err->driver_text + len, sizeof err->driver_text - len, " (injected fault at copy completion)");
        }
        if (st == TSL_DEVICE_LOST) vk_device_set_lost(d, err);
        return st;
    }
    x->pending = false;
    if (!write && host) vk_par_memcpy(be, (char *)host + x->at, (char *)be->stage_map + x->soff, x->n);
    return TSL_SUCCESS;
}

/* Wait for every chunk still in flight (a small upload's); the first
 * failure goes to err. For a compute ordered after them. */
static tsl_status vk_xfer_reap(vk_backend *be, tsl_error *err) {
    pthread_mutex_lock(&be->xlock);
    tsl_status st = TSL_SUCCESS;
    for (int i = 0; i < VK_XFER_SLOTS && st != TSL_DEVICE_LOST; i++)
        if (be->xs[i].pending) {
            tsl_error e2;
            tsl_status s2 = vk_xfer_wait(be, &be->xs[i], NULL, true, st == TSL_SUCCESS ? err : &e2);
            if (st == TSL_SUCCESS) st = s2;
        }
    pthread_mutex_unlock(&be->xlock);
    return st;
}

/* Record and submit one chunk: bytes [at, at + c) of the copy for tensor
 * tname (NULL: none), through staging slot x (or a fill with zeros when
 * host is NULL). */
static VkResult vk_xfer_submit(vk_backend *be, vk_xslot *x, vk_buf *vb, size_t off, size_t at, size_t c,
                               size_t total, bool write, bool fill, const char *tname) {
    vk_device *d = be->dev;
    VkResult r = vkResetFences(d->dev, 1, &x->fence);
    if (r == VK_SUCCESS) r = vkResetCommandPool(d->dev, x->pool, 0);
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    if (r == VK_SUCCESS) r = vkBeginCommandBuffer(x->cb, &bi);
    if (r == VK_SUCCESS) {
        /* after kernels and copies before it on the queue */
        vk_barrier(x->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                   VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT,
                   VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
        if (fill) {
            vkCmdFillBuffer(x->cb, vb->blk->buf, vb->off + off + at, (c + 3) / 4 * 4, 0);
        } else {
            VkBufferCopy region = {.srcOffset = write ? x->soff : vb->off + off + at,
                                   .dstOffset = write ? vb->off + off + at : x->soff,
                                   .size = c};
            vkCmdCopyBuffer(x->cb, write ? be->stage : vb->blk->buf, write ? vb->blk->buf : be->stage, 1, &region);
        }
        vk_barrier(x->cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                   VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                   VK_ACCESS_HOST_READ_BIT | VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
        r = vkEndCommandBuffer(x->cb);
    }
    if (r == VK_SUCCESS) {
        VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &x->cb};
        pthread_mutex_lock(&d->qlock);
        r = vkQueueSubmit(d->queue, 1, &si, x->fence);
        pthread_mutex_unlock(&d->qlock);
    }
    if (r == VK_SUCCESS) {
        x->pending = true;
        x->at = at;
        x->n = c;
        x->total = total;
        x->write = write;
        x->deferred = false;
        snprintf(x->tensor, sizeof x->tensor, "%s", tname ? tname : "");
    }
    return r;
}

/* The staging buffer, at least n bytes when n is under the cap (grown,
 * never shrunk). xlock held; no chunk in flight. */
static tsl_status vk_stage_ensure(vk_backend *be, size_t n, tsl_error *err) {
    size_t want = n < VK_STAGING_MIN ? VK_STAGING_MIN : n > VK_STAGING_MAX ? VK_STAGING_MAX : n;
    want = (want + VK_XFER_SLOTS * 256 - 1) / (VK_XFER_SLOTS * 256) * (VK_XFER_SLOTS * 256);
    if (be->stage && be->stage_size >= want) return TSL_SUCCESS;
    vk_device *d = be->dev;
    if (be->stage) {
        vk_host_buffer_free(d, &be->stage, &be->stage_mem, &be->stage_map);
        be->stage_size = 0;
    }
    tsl_status st = vk_host_buffer(d, want, &be->stage, &be->stage_mem, &be->stage_map, err, be->name);
    if (st == TSL_SUCCESS) be->stage_size = want;
    return st;
}

/* A copy of n bytes between host and [off, off + n) of vb through the
 * staging buffer, pipelined: the copy is cut into chunks that take turns in
 * VK_XFER_SLOTS parts of the staging buffer, so the host fills (or empties)
 * one part while the device copies the others, and a GiB-sized upload runs
 * at the slower of memcpy and the bus rather than at their sum. Every wait
 * is bounded by the watchdog; the call returns once every chunk is done,
 * except a small upload's (below). tname: the tensor copied, for records. */
static tsl_status vk_transfer(vk_backend *be, vk_buf *vb, size_t off, void *host, size_t n, bool write,
                              const char *tname, tsl_error *err) {
    pthread_mutex_lock(&be->xlock);
    uint64_t t0 = core_now_ns();
    tsl_status st = TSL_SUCCESS;
    bool fill = write && !host; /* zeros: no staging needed */
    /* chunks an earlier copy left in flight (it failed midway) must be done
     * before their staging is reused */
    for (int i = 0; i < VK_XFER_SLOTS && st == TSL_SUCCESS; i++)
        if (be->xs[i].pending) st = vk_xfer_wait(be, &be->xs[i], NULL, true, err);
    if (st == TSL_SUCCESS && !fill) st = vk_stage_ensure(be, n, err);
    size_t chunk = fill ? n : be->stage_size / VK_XFER_SLOTS;
    int next = 0;
    for (size_t at = 0; at < n && st == TSL_SUCCESS; next = (next + 1) % VK_XFER_SLOTS) {
        vk_xslot *x = &be->xs[next];
        if (x->pending) {
            st = vk_xfer_wait(be, x, host, write, err);
            if (st != TSL_SUCCESS) break;
        }
        size_t c = n - at < chunk ? n - at : chunk;
        x->soff = (size_t)next * chunk;
        if (write && !fill) vk_par_memcpy(be, (char *)be->stage_map + x->soff, (const char *)host + at, c);
        VkResult r = vk_xfer_submit(be, x, vb, off, at, c, n, write, fill, tname);
        if (r != VK_SUCCESS) {
            tsl_error own;
            tsl_error *rec = err ? err : &own; /* a loss latches even without a record asked for */
            st = vk_error(rec, r, TSL_PHASE_SUBMIT, be->name, be->device, -1, NULL, NULL,
                          write ? "submitting a copy into the device" : "submitting a copy out of the device");
            vk_copy_record(rec, tname);
            if (st == TSL_DEVICE_LOST) vk_device_set_lost(be->dev, rec);
            break;
        }
        atomic_fetch_add_explicit(&be->st_transfers, 1, memory_order_relaxed);
        at += c;
    }
    /* the rest, oldest first (the ring's order from next). A small upload
     * (a decode step's inputs) is not waited for: its bytes are in staging
     * already, so the caller's memory is free, and everything that could
     * see the destination comes after it on the queue (a compute's command
     * buffers start with a barrier over earlier transfers, and its
     * synchronize waits for the chunks still pending once its own work is
     * done; the next copy waits for them first; both report any error the
     * driver gives there; a buffer's free and teardown wait for them too).
     * That saves a round trip per step. */
    const bool async = write && host && st == TSL_SUCCESS && n <= VK_XFER_ASYNC_MAX;
    for (int k = 0; k < VK_XFER_SLOTS && async; k++) be->xs[k].deferred = be->xs[k].pending;
    for (int k = 0; k < VK_XFER_SLOTS && !async; k++) {
        vk_xslot *x = &be->xs[(next + k) % VK_XFER_SLOTS];
        if (!x->pending) continue;
        tsl_error e2;
        tsl_status s2 = vk_xfer_wait(be, x, host, write, st == TSL_SUCCESS ? err : &e2);
        if (st == TSL_SUCCESS) st = s2;
        if (s2 == TSL_DEVICE_LOST) break; /* nothing more to wait for */
    }
    if (st == TSL_SUCCESS && write && host) {
        be->st_up_bytes += n;
        be->st_up_ms += (double)(core_now_ns() - t0) / 1e6;
    }
    pthread_mutex_unlock(&be->xlock);
    return st;
}

static tsl_status vk_buffer_io(tsl_backend *b, void *handle, size_t offset, void *host, size_t n, bool write,
                               const tsl_tensor *t, tsl_error *err) {
    vk_backend *be = (vk_backend *)b;
    vk_buf *vb = handle;
    /* (no latch check: the common layer refuses copies on a lost device
     * before they get here, and recovery's restores must get through) */
    if (vb->gen != be->dev->gen)
        return error_set(err, TSL_ALLOC_FAILED, be->name, be->device, -1, NULL, NULL,
                         "the buffer got no memory when the device was recovered; recover again or free it");
    if (offset > vb->size || n > vb->size - offset)
        return error_set(err, TSL_FAILED, be->name, be->device, -1, NULL, NULL,
                         "copy of %zu bytes at offset %zu is outside the %llu-byte buffer", n, offset,
                         (unsigned long long)vb->size);
    if (n == 0) return TSL_SUCCESS;
    if (vb->blk->map) {
        /* unified memory: the device's bytes are the host's, once the work
         * in flight is done with them */
        tsl_status s = vk_quiesce(be, err);
        if (s != TSL_SUCCESS) return s;
        char *p = (char *)vb->blk->map + vb->off + offset;
        uint64_t t0 = core_now_ns();
        if (write) memcpy(p, host, n);
        else memcpy(host, p, n);
        if (write) {
            pthread_mutex_lock(&be->xlock);
            be->st_up_bytes += n;
            be->st_up_ms += (double)(core_now_ns() - t0) / 1e6;
            pthread_mutex_unlock(&be->xlock);
        }
        return TSL_SUCCESS;
    }
    for (int k = 0; k < be->n_rbo; k++) {
        const size_t lo = be->rbo[k].off, hi = lo + be->rbo[k].n;
        if (be->rbo[k].vb != vb || offset + n <= lo || offset >= hi) continue;
        if (write) {
            be->rb_valid = false; /* the device's bytes change: the copy is stale */
        } else if (be->rb_valid && !be->pending && offset >= lo && offset + n <= hi) {
            /* copied back by the compute that made it */
            memcpy(host, (const char *)be->rb_map + be->rbo[k].at + (offset - lo), n);
            be->st_rb_reads++;
            return TSL_SUCCESS;
        }
    }
    return vk_transfer(be, vb, offset, host, n, write, t ? t->name : NULL, err);
}

static tsl_status vk_buffer_set(tsl_backend *b, void *handle, size_t offset, const void *src, size_t n,
                                const tsl_tensor *t, tsl_error *err) {
    return vk_buffer_io(b, handle, offset, (void *)(uintptr_t)src, n, true, t, err);
}

static tsl_status vk_buffer_get(tsl_backend *b, void *handle, size_t offset, void *dst, size_t n,
                                const tsl_tensor *t, tsl_error *err) {
    return vk_buffer_io(b, handle, offset, dst, n, false, t, err);
}

/* ---- the rest of the vtable ------------------------------------------------------- */

static const char *vk_name(const tsl_backend *b) { return ((const vk_backend *)b)->name; }

static const char *vk_device_name(const tsl_backend *b) { return ((const vk_backend *)b)->device; }

static bool vk_supports_op(const tsl_backend *b, const tsl_tensor *node) {
    const vk_backend *be = (const vk_backend *)b;
    if (tsl_op_is_view(node->op) || node->op == TSL_OP_NONE) return true;
    return vk_kernel_for(be->dev, node, (tsl_backend *)&be->base, true) >= 0;
}

/* Wait (bounded) for fence; true when it signaled. */
static bool vk_fence_done(vk_device *d, VkFence f, uint64_t bound) {
    if (!f) return true;
    uint64_t t0 = core_now_ns();
    VkResult r;
    do {
        r = vkWaitForFences(d->dev, 1, &f, VK_TRUE, VK_WATCHDOG_SLICE_NS);
    } while (r == VK_TIMEOUT && core_now_ns() - t0 < bound);
    return r == VK_SUCCESS;
}

/* The backend's own Vulkan objects: destroyed (gr NULL), or parked in the
 * grave of the device recovery replaced, with the fences still pending. */
static void vk_backend_objects_drop(vk_backend *be, vk_grave *gr) {
    VkDevice dev = be->dev->dev;
#define VK_DROP(kind, h, destroy, pending)                                   \
    do {                                                                     \
        if (h) {                                                             \
            if (gr)                                                          \
                vk_grave_add(gr, kind, (uint64_t)(uintptr_t)(h), pending);   \
            else                                                             \
                destroy(dev, h, NULL);                                       \
        }                                                                    \
        (h) = VK_NULL_HANDLE;                                                \
    } while (0)
    for (int s = 0; s < VK_MAX_CB; s++) {
        vk_slot *sl = &be->slots[s];
        for (int p = 0; p < sl->n_dpools; p++) VK_DROP(VK_GO_DPOOL, sl->dpools[p], vkDestroyDescriptorPool, false);
        sl->n_dpools = sl->cur_dpool = 0;
        VK_DROP(VK_GO_FENCE, sl->fence, vkDestroyFence, sl->fence_pending);
        VK_DROP(VK_GO_CMDPOOL, sl->pool, vkDestroyCommandPool, false);
        sl->cb = VK_NULL_HANDLE;
        sl->fence_pending = false;
    }
    for (int i = 0; i < VK_XFER_SLOTS; i++) {
        vk_xslot *x = &be->xs[i];
        VK_DROP(VK_GO_FENCE, x->fence, vkDestroyFence, x->pending);
        VK_DROP(VK_GO_CMDPOOL, x->pool, vkDestroyCommandPool, false);
        x->cb = VK_NULL_HANDLE;
        x->pending = false;
    }
    VK_DROP(VK_GO_QUERYPOOL, be->qpool, vkDestroyQueryPool, false);
    VK_DROP(VK_GO_QUERYPOOL, be->ppool, vkDestroyQueryPool, false);
    VK_DROP(VK_GO_BUFFER, be->stage, vkDestroyBuffer, false);
    VK_DROP(VK_GO_MEMORY, be->stage_mem, vkFreeMemory, false);
    be->stage_size = 0;
    be->stage_map = NULL;
    VK_DROP(VK_GO_BUFFER, be->rb, vkDestroyBuffer, false);
    VK_DROP(VK_GO_MEMORY, be->rb_mem, vkFreeMemory, false);
    be->rb_size = 0;
    be->rb_map = NULL;
    be->n_rbo = 0;
    be->rb_valid = false;
    VK_DROP(VK_GO_BUFFER, be->sbuf, vkDestroyBuffer, false);
    VK_DROP(VK_GO_MEMORY, be->smem, vkFreeMemory, false);
    be->swords = NULL;
#undef VK_DROP
}

static void vk_free(tsl_backend *b) {
    vk_backend *be = (vk_backend *)b;
    vk_device *d = be->dev;
    if (be->ppool) vk_print_profile(be);
    pthread_mutex_lock(&be->wlock);
    be->wquit = true;
    pthread_cond_broadcast(&be->wcv);
    pthread_mutex_unlock(&be->wlock);
    for (int t = 0; t < be->n_threads; t++) pthread_join(be->threads[t], NULL);
    pthread_mutex_lock(&be->xplock);
    be->xpquit = true;
    pthread_cond_broadcast(&be->xpcv);
    pthread_mutex_unlock(&be->xplock);
    for (int t = 0; t < be->n_xthreads; t++) pthread_join(be->xthreads[t], NULL);

    /* Work still on the device must finish before its objects go; on a
     * hung device it never will, and everything is left allocated. */
    be->pending = false;
    bool clean = vk_drain(be);
    if (!clean) {
        atomic_store(&d->unclean, 1);
        TSL_LOGW("%s: work submitted to %s never finished; its command buffers are left allocated", be->name,
                 be->device);
    } else {
        vk_backend_objects_drop(be, NULL);
    }
    if (be->ascr) {
        if (clean) vk_mem_free(d, be->ascr);
        else free(be->ascr); /* its memory stays with the unfinished work */
        be->ascr = NULL;
    }
    if (be->qscr) {
        if (clean) vk_mem_free(d, be->qscr);
        else free(be->qscr); /* its memory stays with the unfinished work */
        be->qscr = NULL;
    }
    vk_buf **scr[2] = {&be->hscr, &be->wscr};
    for (int j = 0; j < 2; j++)
        if (*scr[j]) {
            if (clean) vk_mem_free(d, *scr[j]);
            else free(*scr[j]); /* its memory stays with the unfinished work */
            *scr[j] = NULL;
        }
    for (int s = 0; s < VK_MAX_CB; s++) {
        free(be->slots[s].dpools);
        free(be->slots[s].tape);
        free(be->slots[s].prev);
    }
    pthread_mutex_lock(&d->blist_lock);
    for (vk_backend **pp = &d->backends; *pp; pp = &(*pp)->dnext)
        if (*pp == be) {
            *pp = be->dnext;
            break;
        }
    pthread_mutex_unlock(&d->blist_lock);
    vk_device_release(d);
    pthread_mutex_destroy(&be->wlock);
    pthread_cond_destroy(&be->wcv);
    pthread_cond_destroy(&be->dcv);
    pthread_mutex_destroy(&be->xlock);
    pthread_mutex_destroy(&be->xplock);
    pthread_cond_destroy(&be->xpcv);
    pthread_cond_destroy(&be->xpdone);
    free(be->exec);
    backend_common_fini(&be->base);
    free(be);
}

static void vk_vt_kernel_name(const tsl_backend *b, const tsl_tensor *node, char *buf, size_t n);
static tsl_status vk_recover(tsl_backend *b, bool lost, tsl_error *err);
static tsl_status vk_backend_objects(vk_backend *be, tsl_error *err);
static uint64_t vk_support_gen(const tsl_backend *b) {
    return atomic_load_explicit(&((const vk_backend *)b)->dev->kfail_gen, memory_order_acquire);
}

/* Which Q4_0 weights go to the split layout (backend_impl.h): rows of at
 * most TSL_VULKAN_Q4_SPLIT_MAX_K elements (default: all; 0: none; the
 * buffer's backend decides, so one tensor has one answer). In groups of 8
 * blocks (144 bytes, not whole 128-byte lines) the layout took 7% off a
 * Qwen2.5-0.5B token's GPU time on the H100 but added 1-2% to a
 * Llama-3-8B one's (run 167); in groups of 64 (whole lines) both gain
 * (run 168). */
static bool vk_q4_split(const tsl_backend *b, const tsl_tensor *t) {
    return t->ne[0] <= ((const vk_backend *)b)->q4s_max_k;
}

static const tsl_backend_vtable vk_vtable = {
    .name = vk_name,
    .device = vk_device_name,
    .free = vk_free,
    .buffer_alloc = vk_buffer_alloc,
    .buffer_free = vk_buffer_free,
    .buffer_alignment = vk_buffer_alignment,
    .buffer_is_host = false,
    .buffer_set = vk_buffer_set,
    .buffer_get = vk_buffer_get,
    .buffer_recreate = vk_buffer_recreate,
    .q4_split = vk_q4_split,
    .supports_op = vk_supports_op,
    .graph_compute_async = vk_graph_compute_async,
    .synchronize = vk_synchronize,
    .kernel_name = vk_vt_kernel_name,
    .build_kernels = vk_backend_build_kernels,
    .recover = vk_recover,
    .support_gen = vk_support_gen,
};

/* ---- kernels, all at once ----------------------------------------------------------- */

/* tsl_backend_build_kernels: every kernel this device can run, built now
 * and reported in table order (a failure cached on this backend is reported
 * as it was, not rebuilt). The build boundary's "kernel" injection fires
 * here too. Kernels needing a feature the device lacks are not this
 * device's kernels: they are skipped, not failed. */
int vk_backend_build_kernels(tsl_backend *b, tsl_kernel_fn fn, void *user) {
    vk_backend *be = (vk_backend *)b;
    vk_device *d = be->dev;
    uint64_t compute = atomic_load_explicit(&be->base.n_computes, memory_order_relaxed);
    int failed = 0;
    for (int id = 0; id < VK_K_COUNT; id++) {
        const char *name = vk_kernel_descs[id].name;
        if (!d->k[id].runnable) continue;
        tsl_error rec;
        tsl_error_clear(&rec);
        bool ok = !backend_kernel_failed(b, name, &rec);
        if (ok) {
            fault_site site = {.compute = compute, .node = -1, .kernel = name};
            const vk_kernel *fk = NULL;
            if (fault_plan_fire(be->base.faults, TSL_FAULT_KERNEL, &site)) {
                vk_kernel_record(be, -1, NULL, id, NULL, &rec);
                ok = false;
            } else if (!vk_kernel_get(d, id, &fk)) {
                vk_kernel_record(be, -1, NULL, id, fk, &rec);
                ok = false;
            }
            if (!ok) backend_kernel_fail(b, name, &rec);
        }
        if (!ok) failed++;
        if (fn) fn(name, ok ? TSL_SUCCESS : TSL_FAILED, ok ? NULL : &rec, user);
    }
    return failed;
}

static void vk_vt_kernel_name(const tsl_backend *b, const tsl_tensor *node, char *buf, size_t n) {
    const vk_backend *be = (const vk_backend *)b;
    int id = vk_kernel_for(be->dev, node, (tsl_backend *)b, true);
    if (id < 0) id = vk_kernel_for(be->dev, node, (tsl_backend *)b, false);
    const int tw = id >= 0 && backend_q4s(node->src[0], NULL, NULL) ? vk_mm_q4s_twin(id) : -1;
    if (tw >= 0) id = tw; /* what runs (vk_q4s_twins) */
    snprintf(buf, n, "%s", id >= 0 ? vk_kernel_descs[id].name : "vulkan_none");
}

/* Recovery (tsl_backend_recover, FAULTS.md section 8). Without a loss:
 * kernels that failed to build are built again on next use (the common
 * layer drops this backend's failure cache; the device's is dropped here).
 * After a loss: a new VkDevice is made first (nothing changes if it cannot
 * be had); the old one, its kernels, memory and every backend's command
 * pools go to a grave that is destroyed once its fences say it is idle, and
 * never waited on (a hung GPU never is); every backend on the device gets
 * new command pools, and the common layer then gives every buffer new
 * memory behind its old address (vk_buffer_recreate) and restores the
 * persistent ones. */
static tsl_status vk_recover(tsl_backend *b, bool lost, tsl_error *err) {
    vk_backend *be = (vk_backend *)b;
    if (!lost) {
        vk_pipeline_reset_failed(be->dev);
        return TSL_SUCCESS;
    }
    vk_device *d = be->dev;
    pthread_mutex_lock(&d->blist_lock);
    /* every backend on the device is quiet for the swap: none may be
     * encoding with the old device's objects (they refuse to compute on a
     * lost device, but one may be just returning) */
    vk_backend *held = NULL;
    tsl_status s = TSL_SUCCESS;
    for (vk_backend *b2 = d->backends; b2; b2 = b2->dnext) {
        if (atomic_exchange_explicit(&b2->busy, 1, memory_order_acquire)) {
            s = error_set(err, TSL_FAILED, be->name, be->device, -1, NULL, NULL,
                          "recover: %s is computing on another thread; recover once it returns", b2->name);
            held = b2;
            break;
        }
    }
    vk_grave *gr = NULL;
    if (s == TSL_SUCCESS) s = vk_device_reopen(d, &gr, err);
    if (s == TSL_SUCCESS) {
        for (vk_backend *b2 = d->backends; b2; b2 = b2->dnext) {
            /* the old device's objects go to its grave (not waited on); the
             * work in flight there is forgotten: the loss was reported */
            vk_backend_objects_drop(b2, gr);
            b2->pending = false;
            b2->last = TSL_SUCCESS;
            tsl_error_clear(&b2->last_err);
            tsl_status s2 = vk_backend_objects(b2, err);
            if (s2 != TSL_SUCCESS && s == TSL_SUCCESS) s = s2;
        }
    }
    for (vk_backend *b2 = d->backends; b2 && b2 != held; b2 = b2->dnext)
        atomic_store_explicit(&b2->busy, 0, memory_order_release);
    pthread_mutex_unlock(&d->blist_lock);
    if (s == TSL_SUCCESS) vk_graves_collect(d, false); /* an old device already idle goes now */
    return s;
}

/* ---- creation and settings ----------------------------------------------------------- */

static int vk_env_int(const char *name, int lo, int hi, int def) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (!end || *end || x < lo || x > hi) {
        TSL_LOGW("%s=%s is not a number in [%d, %d]; using %d", name, v, lo, hi, def);
        return def;
    }
    return (int)x;
}

/* Can the compute queue write timestamps? Then every compute is timed on
 * the GPU (tsl_vulkan_stats.gpu_ms), at the cost of three commands per
 * command buffer. */
static void vk_timestamps_probe(vk_backend *be) {
    vk_device *d = be->dev;
    uint32_t n = 0, bits = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(d->pd, &n, NULL);
    VkQueueFamilyProperties *q = n ? calloc(n, sizeof *q) : NULL;
    if (q) {
        vkGetPhysicalDeviceQueueFamilyProperties(d->pd, &n, q);
        if (d->qfam < n) bits = q[d->qfam].timestampValidBits;
        free(q);
    }
    be->ts_on = bits > 0 && d->props.limits.timestampPeriod > 0;
    be->ts_ns = d->props.limits.timestampPeriod;
    be->ts_mask = bits >= 64 ? ~0ull : bits ? (1ull << bits) - 1 : 0;
}

/* A command pool with one primary command buffer and a fence: what each
 * encoding slot and each staging slot submits with. On failure the pool is
 * left NULL or made (the caller's drop path frees what exists). */
static VkResult vk_cmd_objects(vk_device *d, const VkCommandPoolCreateInfo *pi, const VkFenceCreateInfo *fi,
                               VkCommandPool *pool, VkCommandBuffer *cb, VkFence *fence) {
    VkResult r = vkCreateCommandPool(d->dev, pi, NULL, pool);
    if (r != VK_SUCCESS) {
        *pool = VK_NULL_HANDLE;
        return r;
    }
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                      .commandPool = *pool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                      .commandBufferCount = 1};
    r = vkAllocateCommandBuffers(d->dev, &ai, cb);
    if (r == VK_SUCCESS) r = vkCreateFence(d->dev, fi, NULL, fence);
    return r;
}

static tsl_status vk_backend_objects(vk_backend *be, tsl_error *err) {
    vk_device *d = be->dev;
    VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                  .flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT,
                                  .queueFamilyIndex = d->qfam};
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkResult r = VK_SUCCESS;
    for (int s = 0; s < VK_MAX_CB && r == VK_SUCCESS; s++)
        r = vk_cmd_objects(d, &pi, &fi, &be->slots[s].pool, &be->slots[s].cb, &be->slots[s].fence);
    for (int i = 0; i < VK_XFER_SLOTS && r == VK_SUCCESS; i++) {
        r = vk_cmd_objects(d, &pi, &fi, &be->xs[i].pool, &be->xs[i].cb, &be->xs[i].fence);
        be->xs[i].pending = false;
    }
    if (r == VK_SUCCESS && be->ts_on) {
        VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                    .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                    .queryCount = 2 * VK_MAX_CB};
        r = vkCreateQueryPool(d->dev, &qi, NULL, &be->qpool);
        if (r != VK_SUCCESS) be->qpool = VK_NULL_HANDLE;
        r = VK_SUCCESS; /* timing is optional */
        const char *prof = getenv("TSL_VULKAN_PROFILE");
        if (be->qpool && prof && *prof && strcmp(prof, "0") != 0) {
            qi.queryCount = VK_PROF_MAX;
            if (vkCreateQueryPool(d->dev, &qi, NULL, &be->ppool) != VK_SUCCESS) be->ppool = VK_NULL_HANDLE;
        }
    }
    if (r != VK_SUCCESS)
        return vk_error(err, r, TSL_PHASE_ALLOC, be->name, be->device, -1, NULL, NULL, "creating command pools");
    void *map = NULL;
    tsl_status s = vk_host_buffer(d, 256, &be->sbuf, &be->smem, &map, err, be->name);
    be->swords = map;
    return s;
}

tsl_backend *tsl_backend_vulkan_new(int device_index, tsl_error *err) {
    if (device_index < 0) {
        device_index = vk_device_pick(err);
        if (device_index < 0) return NULL;
    }
    vk_backend *be = calloc(1, sizeof *be);
    if (!be) {
        error_set(err, TSL_ALLOC_FAILED, "vulkan", "", -1, NULL, NULL, "out of host memory creating the backend");
        return NULL;
    }
    if (backend_common_init(&be->base, &vk_vtable, err) != TSL_SUCCESS) { /* e.g. a malformed TSL_FAULT */
        free(be);
        return NULL;
    }
    pthread_mutex_init(&be->wlock, NULL);
    pthread_cond_init(&be->wcv, NULL);
    pthread_cond_init(&be->dcv, NULL);
    pthread_mutex_init(&be->xlock, NULL);
    pthread_mutex_init(&be->xplock, NULL);
    pthread_cond_init(&be->xpcv, NULL);
    pthread_cond_init(&be->xpdone, NULL);
    atomic_init(&be->busy, 0);
    be->last = TSL_SUCCESS;
    tsl_error_clear(&be->last_err);
    be->dev = vk_device_acquire(device_index, err);
    if (!be->dev) {
        pthread_mutex_destroy(&be->wlock);
        pthread_cond_destroy(&be->wcv);
        pthread_cond_destroy(&be->dcv);
        pthread_mutex_destroy(&be->xlock);
        pthread_mutex_destroy(&be->xplock);
        pthread_cond_destroy(&be->xpcv);
        pthread_cond_destroy(&be->xpdone);
        backend_common_fini(&be->base);
        free(be);
        return NULL;
    }
    /* one loss latch and one buffer list for every backend on the device */
    backend_set_dev(&be->base, be->dev->bdev);
    snprintf(be->name, sizeof be->name, "vulkan%d", device_index);
    snprintf(be->device, sizeof be->device, "%s", be->dev->name);
    be->n_cb = vk_env_int("TSL_VULKAN_CB", 1, VK_MAX_CB, VK_DEFAULT_CB);
    be->cb_explicit = getenv("TSL_VULKAN_CB") != NULL;
    be->no_reuse = getenv("TSL_VULKAN_REUSE") && strcmp(getenv("TSL_VULKAN_REUSE"), "0") == 0;
    be->no_fuse = getenv("TSL_VULKAN_FUSE") && strcmp(getenv("TSL_VULKAN_FUSE"), "0") == 0;
    be->no_one = getenv("TSL_VULKAN_ATTN_ONE") && strcmp(getenv("TSL_VULKAN_ATTN_ONE"), "0") == 0;
    be->no_rfuse = getenv("TSL_VULKAN_FUSE_ROPE") && strcmp(getenv("TSL_VULKAN_FUSE_ROPE"), "0") == 0;
    /* products waiting on their producers instead of barriers: by default
     * where the driver is known to start a dispatch's workgroups in order
     * behind the one before it (NVIDIA's; lavapipe runs dispatches one
     * after another), TSL_VULKAN_WAIT=0 off, 1-7 which edges elsewhere */
    {
        const char *we = getenv("TSL_VULKAN_WAIT");
        const bool known = be->dev->props.vendorID == 0x10DE || be->dev->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
        be->wait = we && *we ? vk_env_int("TSL_VULKAN_WAIT", 0, 7, 0) : known ? 7 : 0;
    }
    {
        const char *nf = getenv("TSL_VULKAN_FUSE_NORM");
        be->nfuse = !nf || !*nf ? 2 : strcmp(nf, "0") == 0 ? 0 : 1;
    }
    be->q4s_max_k = vk_env_int("TSL_VULKAN_Q4_SPLIT_MAX_K", 0, INT_MAX, INT_MAX);
    be->no_qfuse = getenv("TSL_VULKAN_FUSE_QUANT") && strcmp(getenv("TSL_VULKAN_FUSE_QUANT"), "0") == 0;
    const int spin = vk_env_int("TSL_VULKAN_SPIN_US", -1, 1000000, -1);
    /* (not on a CPU device: polling takes a core from the kernels) */
    be->spin_auto = spin < 0 && be->dev->props.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU;
    be->spin_ns = spin > 0 ? (uint64_t)spin * 1000u : 0;
    be->watchdog_ms = vk_env_int("TSL_VULKAN_WATCHDOG_MS", 0, INT_MAX, 0);
    vk_timestamps_probe(be);
    /* helpers for staging copies: only on a device that stages (tensor
     * memory the host cannot map), at most one per spare core */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    be->xwant = be->dev->dev_mapped ? 0 : ncpu > VK_XFER_THREADS ? VK_XFER_THREADS - 1 : ncpu > 1 ? (int)ncpu - 1 : 0;
    pthread_mutex_lock(&be->dev->blist_lock);
    be->dnext = be->dev->backends;
    be->dev->backends = be;
    pthread_mutex_unlock(&be->dev->blist_lock);
    if (vk_backend_objects(be, err) != TSL_SUCCESS) {
        vk_free(&be->base);
        return NULL;
    }
    return &be->base;
}

bool tsl_backend_is_vulkan(const tsl_backend *b) { return b && b->vt == &vk_vtable; }

tsl_status tsl_backend_vulkan_info(const tsl_backend *b, tsl_vulkan_device_info *info, tsl_error *err) {
    if (!tsl_backend_is_vulkan(b) || !info)
        return error_set(err, TSL_FAILED, b ? tsl_backend_name(b) : "", b ? tsl_backend_device(b) : "", -1, NULL, NULL,
                         "vulkan_info: %s", info ? "not a Vulkan backend" : "info is NULL");
    *info = ((const vk_backend *)b)->dev->info;
    return TSL_SUCCESS;
}

tsl_status tsl_backend_vulkan_set_command_buffers(tsl_backend *b, int n, tsl_error *err) {
    if (!tsl_backend_is_vulkan(b))
        return error_set(err, TSL_FAILED, b ? tsl_backend_name(b) : "", b ? tsl_backend_device(b) : "", -1, NULL, NULL,
                         "vulkan_set_command_buffers: not a Vulkan backend");
    vk_backend *be = (vk_backend *)b;
    if (n < 1 || n > VK_MAX_CB)
        return error_set(err, TSL_FAILED, be->name, be->device, -1, NULL, NULL,
                         "vulkan_set_command_buffers: %d is not in [1, %d]", n, VK_MAX_CB);
    be->n_cb = n;
    be->cb_explicit = true;
    return TSL_SUCCESS;
}

void tsl_backend_vulkan_set_reuse(tsl_backend *b, bool on) {
    if (tsl_backend_is_vulkan(b)) ((vk_backend *)b)->no_reuse = !on;
}

void tsl_backend_vulkan_set_watchdog_ms(tsl_backend *b, int ms) {
    if (!tsl_backend_is_vulkan(b)) return;
    ((vk_backend *)b)->watchdog_ms = ms > 0 ? ms : 0;
}

tsl_status tsl_backend_vulkan_stats(const tsl_backend *b, tsl_vulkan_stats *out) {
    if (!tsl_backend_is_vulkan(b) || !out) return TSL_FAILED;
    const vk_backend *be = (const vk_backend *)b;
    memset(out, 0, sizeof *out);
    out->computes = atomic_load(&be->st_computes);
    out->submits = atomic_load(&be->st_submits);
    out->dispatches = atomic_load(&be->st_dispatches);
    out->last_resolve_us = (double)atomic_load_explicit(&be->base.resolve_ns, memory_order_relaxed) / 1e3;
    out->set_dispatches = atomic_load(&be->st_set_dispatches);
    out->barriers = atomic_load(&be->st_barriers);
    out->reused_command_buffers = atomic_load(&be->st_reused);
    out->replays = atomic_load(&be->st_replays);
    out->transfers = atomic_load(&be->st_transfers);
    out->encode_ms = be->st_encode_ms;
    out->last_encode_us_per_node = be->last_us_per_node;
    out->last_command_buffers = be->last_cbs;
    out->validation_errors = vk_validation_errors();
    out->gpu_timing = be->qpool != VK_NULL_HANDLE;
    out->gpu_ms = be->st_gpu_ms;
    out->last_gpu_us = be->last_gpu_us;
    out->upload_bytes = be->st_up_bytes;
    out->readback_reads = be->st_rb_reads;
    out->upload_ms = be->st_up_ms;
    return TSL_SUCCESS;
}

int vk_test_wait(tsl_backend *b, int mask, uint32_t skew) {
    if (!vk_backend_dev(b)) return -1;
    vk_backend *be = (vk_backend *)b;
    const int was = be->wait;
    if (mask >= 0) be->wait = mask & 7;
    be->wait_skew = skew;
    return was;
}

int vk_test_levels(tsl_backend *b, int s, int *first, int *last, int cap) {
    if (!vk_backend_dev(b)) return -1;
    const vk_backend *be = (const vk_backend *)b;
    if (s < 0 || s >= be->n_used || !be->slots[s].recorded) return -1;
    const vk_slot *sl = &be->slots[s];
    int n = 0;
    for (int i = 0; i < sl->n_prev; i++) {
        const vk_rec *r = &sl->prev[i];
        if (r->kind != VK_REC_DISPATCH || !r->level) continue;
        if (n < cap) vk_level_of(sl, r->node, &first[n], &last[n]);
        n++;
    }
    return n;
}

int vk_test_progress(tsl_backend *b) {
    if (!vk_backend_dev(b)) return -1;
    return vk_progress_node((const vk_backend *)b);
}

tsl_status vk_test_set_kernel(tsl_backend *b, const char *name, const uint32_t *spv, size_t size, const char *entry,
                              tsl_error *err) {
    vk_device *d = vk_backend_dev(b);
    if (!d) return error_set(err, TSL_FAILED, "", "", -1, NULL, NULL, "vk_test_set_kernel: not a Vulkan backend");
    for (int id = 0; id < VK_K_COUNT; id++)
        if (name && strcmp(vk_kernel_descs[id].name, name) == 0) return vk_kernel_override(d, id, spv, size, entry, err);
    return error_set(err, TSL_FAILED, ((vk_backend *)b)->name, ((vk_backend *)b)->device, -1, NULL, NULL,
                     "vk_test_set_kernel: no kernel named '%s'", name ? name : "(null)");
}
