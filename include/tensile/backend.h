/*
 * backend.h - backends, buffers, the graph allocator and computing graphs.
 *
 * A backend is a device that computes graphs: the CPU (a persistent thread
 * pool with SIMD kernels) or a GPU (Vulkan). Every compute returns a
 * tsl_status and, when it is not TSL_SUCCESS, fills the caller's tsl_error
 * record (see tensile.h and docs/FAULTS.md). Records are per call: two threads
 * computing on two graphs each get their own.
 *
 * Ownership: the caller owns backends, buffers and graph allocators it
 * creates and frees each with its free call. Freeing a backend while one of
 * its buffers is alive is a bug (asserted).
 */
#ifndef TENSILE_BACKEND_H
#define TENSILE_BACKEND_H

#include "tensile.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsl_backend tsl_backend;
typedef struct tsl_buffer tsl_buffer;

/* Abort callback: return true to stop the compute. Checked between nodes
 * (CPU) or command buffers (GPU); the compute then returns TSL_ABORTED. */
typedef bool (*tsl_abort_fn)(void *user);

/* ------------------------------------------------------------------------ */
/* Backends                                                                  */
/* ------------------------------------------------------------------------ */

/* The CPU backend with n_threads workers (<= 0: one per online core).
 * Returns NULL (and fills err if given) if threads cannot be started. */
tsl_backend *tsl_backend_cpu_new(int n_threads, tsl_error *err);
/* Free a backend; NULL is a no-op. Stops its threads. */
void tsl_backend_free(tsl_backend *be);
/* "cpu", "vulkan0" */
const char *tsl_backend_name(const tsl_backend *be);
/* Human-readable device description ("AMD EPYC, 2 threads, avx512"). */
const char *tsl_backend_device(const tsl_backend *be);
int tsl_backend_cpu_threads(const tsl_backend *be);
/* Alignment (bytes) of every buffer and tensor placement of this backend;
 * 0 for NULL. */
size_t tsl_backend_alignment(const tsl_backend *be);
/* Buffers of this backend alive now, and (if bytes is not NULL) their total
 * size. For leak checks: `tensile drill` compares them around each fault. */
int tsl_backend_n_buffers(const tsl_backend *be, size_t *bytes);
/* Change the CPU backend's thread count (restarts the pool). */
tsl_status tsl_backend_cpu_set_threads(tsl_backend *be, int n_threads, tsl_error *err);
/* Name of the SIMD kernel set in use: "avx512", "avx2", "neon", "generic". */
const char *tsl_cpu_simd_name(void);

/* Can this backend compute this node as built (op, types, layout)? False
 * for NULL arguments, and for a node whose kernel failed to build on this
 * backend (tsl_backend_build_kernels, or a compute that hit the failure)
 * until tsl_backend_recover rebuilds the kernels: a scheduler then sends the
 * op to another backend. It does not look at device loss (that is
 * tsl_backend_is_lost). */
bool tsl_backend_supports_op(const tsl_backend *be, const tsl_tensor *node);

/* Compute every node of g. Every tensor the graph touches must have data
 * (allocated in a context with data, a buffer of this backend, or the graph
 * allocator). Returns TSL_SUCCESS, or a failure status with err filled
 * (err may be NULL; on SUCCESS err is cleared):
 *   FAILED       - the graph cannot run as built: a node or source with no
 *                  data (no buffer), an op/type/layout with no kernel, a
 *                  kernel that failed to build (the failure is cached, see
 *                  tsl_backend_supports_op), an out-of-range get_rows index,
 *                  a NULL or malformed graph. The record names the node, op,
 *                  tensor and kernel. Found before anything runs (except a
 *                  data error found by a kernel): no output is written.
 *   ALLOC_FAILED - the scratch memory the graph needs could not be had (the
 *                  record names the node that needs the most); nothing ran.
 *   ABORTED      - the abort callback said stop (checked between nodes);
 *                  the record names the node it stopped before.
 *   RETRY        - the device refused the work for a passing reason, or the
 *                  availability gate is closed; nothing ran.
 *   DEVICE_LOST  - the device was lost while this compute ran, or earlier:
 *                  the device is latched and every later compute returns
 *                  DEVICE_LOST at once with the original cause in its
 *                  record, until tsl_backend_recover.
 * Only DEVICE_LOST latches: after any other status the next compute starts
 * clean. A lost device or a closed gate refuses the compute before it is
 * counted, so "compute=N" injection rules count computes that started. One
 * compute at a time per backend: a second thread's compute returns FAILED. */
tsl_status tsl_backend_graph_compute(tsl_backend *be, tsl_graph *g, tsl_error *err);
/* Start a compute and return; the status of the work comes from
 * tsl_backend_synchronize, on the call that failed. A failure found before
 * any work was submitted (FAILED, ALLOC_FAILED, RETRY, a latched
 * DEVICE_LOST) comes back from compute_async itself. On CPU the work runs on
 * the calling thread and synchronize returns its status once more.
 * synchronize returns DEVICE_LOST, with the original cause, whenever the
 * device is lost: work on a lost device cannot be vouched for. */
tsl_status tsl_backend_graph_compute_async(tsl_backend *be, tsl_graph *g, tsl_error *err);
tsl_status tsl_backend_synchronize(tsl_backend *be, tsl_error *err);

void tsl_backend_set_abort_callback(tsl_backend *be, tsl_abort_fn fn, void *user);

/* ------------------------------------------------------------------------ */
/* Buffers                                                                   */
/* ------------------------------------------------------------------------ */

/* Allocate a buffer of size bytes on the backend. Returns NULL and fills err
 * with TSL_ALLOC_FAILED when the memory cannot be had, or TSL_DEVICE_LOST
 * (the original cause) while the device is lost. The buffer registers with
 * its device so recovery can restore it. */
tsl_buffer *tsl_buffer_alloc(tsl_backend *be, size_t size, tsl_error *err);
void tsl_buffer_free(tsl_buffer *buf);
size_t tsl_buffer_size(const tsl_buffer *buf);
/* Alignment every tensor placed in this buffer respects (bytes). */
size_t tsl_buffer_alignment(const tsl_buffer *buf);
/* Host address of the buffer if it is host memory, else NULL. */
void *tsl_buffer_host_ptr(const tsl_buffer *buf);
/* Place t (no data yet) at byte offset in buf. Returns FAILED if it does not
 * fit, is misaligned, or t already has data; views are placed by their source. */
tsl_status tsl_buffer_place(tsl_buffer *buf, tsl_tensor *t, size_t offset, tsl_error *err);
/* Allocate one buffer for every tensor of ctx that has no data yet, packed in
 * creation order, and place them. Returns NULL with err filled on failure. */
tsl_buffer *tsl_buffer_alloc_ctx(tsl_backend *be, tsl_context *ctx, tsl_error *err);
/* True when be keeps weight t (flagged TSL_FLAG_WEIGHT, not yet placed) in
 * a layout of its own (TSL_FLAG_WEIGHT): a buffer holding it then does not
 * hold the tensor's bytes as they are, so a host source
 * (tsl_buffer_set_host_source) cannot restore it; its owner uploads it
 * again through tsl_tensor_set instead. False for NULL. */
bool tsl_backend_relays_weight(const tsl_backend *be, const tsl_tensor *t);
/* Mark the buffer's contents as persistent (weights): after device recovery
 * they are restored from their host source (tsl_buffer_set_host_source) or,
 * without one, from a host copy the backend takes now and keeps current
 * with every tsl_tensor_set into the buffer (writes made by graphs do not
 * reach it; the copy costs host memory the size of the buffer; if it cannot
 * be had, a warning is logged and recovery reports the buffer lost). off
 * drops the copy and the source. NULL is a no-op. */
void tsl_buffer_set_persistent(tsl_buffer *buf, bool on);

/* Copy bytes into / out of a tensor's data, whatever its buffer. offset and
 * size are in bytes within tsl_nbytes(t). Returns FAILED (err filled) when t
 * has no data or buffer, or the range is out of bounds, and DEVICE_LOST (the
 * original cause) while the buffer's device is lost; never aborts. src may
 * be reused as soon as tsl_tensor_set returns. On a GPU that copies through
 * staging, a small set (up to 256 KiB) returns once its copy is submitted:
 * every later compute, copy or free is ordered after it, and a device lost
 * meanwhile is reported by the next compute or copy, with a record naming
 * the copy (op "copy", the tensor it was for, node -1; injected with
 * "copylost"). A get of a tensor flagged TSL_FLAG_READBACK after the
 * compute that made it succeeded may be served from the copy that compute
 * made of it (no transfer of its own; tsl_vulkan_stats.readback_reads); a
 * set into it, a later compute or a free makes that copy stale. */
tsl_status tsl_tensor_set(tsl_tensor *t, const void *src, size_t offset, size_t size, tsl_error *err);
tsl_status tsl_tensor_get(const tsl_tensor *t, void *dst, size_t offset, size_t size, tsl_error *err);

/* ------------------------------------------------------------------------ */
/* The graph allocator                                                       */
/* ------------------------------------------------------------------------ */

/* Places every tensor of a graph that has no data into one backend buffer,
 * reusing memory by liveness: a node's output takes the space of inputs whose
 * last reader it was, in place where the op allows it (element-wise ops of the
 * same size). Tensors flagged INPUT or OUTPUT are never reused; leafs without
 * data are allocated and live for the whole graph. Views share their source.
 * The buffer grows to the largest graph seen (re-allocating when needed). */
typedef struct tsl_gallocr tsl_gallocr;

tsl_gallocr *tsl_gallocr_new(tsl_backend *be);
void tsl_gallocr_free(tsl_gallocr *ga);
/* Plan and place g. Returns ALLOC_FAILED (err filled) when the buffer cannot
 * be had; FAILED when a tensor is malformed (e.g. a view of a tensor with no
 * data that is not in the graph). */
tsl_status tsl_gallocr_alloc_graph(tsl_gallocr *ga, tsl_graph *g, tsl_error *err);
/* Bytes of the buffer the last plan needed (its peak). */
size_t tsl_gallocr_peak(const tsl_gallocr *ga);
/* Bytes the last plan would have needed with no reuse (sum of all sizes). */
size_t tsl_gallocr_total(const tsl_gallocr *ga);


/* ------------------------------------------------------------------------ */
/* Faults: classification, injection, transient handling (FAULTS.md 4,7,10)  */
/* ------------------------------------------------------------------------ */

/* When a driver code was returned: classification depends on it (an
 * out-of-memory at submit is transient, at allocation it is ALLOC_FAILED). */
typedef enum tsl_fault_phase {
    TSL_PHASE_ANY = 0,   /* table rows only: matches every phase */
    TSL_PHASE_SUBMIT,    /* submitting or completing work (queue submit, fence, command buffer status) */
    TSL_PHASE_ALLOC,     /* allocating memory */
    TSL_PHASE_BUILD,     /* building a kernel (shader module, pipeline, library, NVRTC) */
} tsl_fault_phase;

/* Map a driver code to a status through the driver's table (domains:
 * "VkResult", "MTLCommandBufferErrorDomain", "IOGPU", "MTLLibraryErrorDomain",
 * "MTLDevice", "CUresult", "nvrtcResult"). An unknown domain or code is
 * TSL_DEVICE_LOST: when unsure, do not trust the device. *name (optional)
 * receives the code's symbolic name, or "unknown". Success codes map to
 * TSL_SUCCESS. */
tsl_status tsl_fault_classify(const char *domain, int64_t code, tsl_fault_phase phase, const char **name);

/* Fault classes that can be injected. */
typedef enum tsl_fault_class {
    TSL_FAULT_RETRY = 0, /* the driver refuses the work for a passing reason */
    TSL_FAULT_LOST,      /* the device is lost */
    TSL_FAULT_NOBUF,     /* a buffer lookup finds nothing */
    TSL_FAULT_KERNEL,    /* a kernel fails to build */
    TSL_FAULT_ALLOC,     /* an allocation fails */
    TSL_FAULT_ABORT,     /* the abort callback says stop */
    TSL_FAULT_COPYLOST,  /* the device is lost, found where a copy's completion is waited for */
    TSL_FAULT_CLASS_COUNT
} tsl_fault_class;
const char *tsl_fault_class_name(tsl_fault_class c); /* "retry", "lost", ... */

/* Add injection rules to a backend, in the TSL_FAULT grammar (also read from
 * the environment variable TSL_FAULT when a backend is created):
 *   spec  := rule (';' rule)*
 *   rule  := class ['@' cond (',' cond)*]        class: retry lost nobuf kernel alloc abort
 *                                                       copylost
 *   cond  := key op value                        op: '=' '>' '<' '%' (every Nth)
 *   keys  := compute (1-based count of computes on this backend), node, tensor
 *            (name), op (op name), name (kernel name), bytes (allocation size;
 *            for copylost the copied chunk's), copy (1-based count of copy
 *            completions the backend waited for), times (fire at most this
 *            many times; the rule stays otherwise)
 * e.g. "retry@compute=3;lost@compute=5;nobuf@tensor=blk.0.attn_q.weight;
 *       kernel@name=mul_mat_f16_f32;alloc@bytes>1e9;nobuf@compute%7;
 *       copylost@copy=2".
 * A fault fires at the boundary where the real one would appear (the driver's
 * answer, the buffer lookup, the kernel build, the allocation) and takes the
 * same handling path. "lost" fires where a compute's completion is waited
 * for; "copylost" where a copy's is (on a GPU that copies through staging:
 * the copy's own call, or, for a small tsl_tensor_set left in flight, the
 * next compute or copy, which waits for it), never on the CPU, whose
 * copies wait for nothing; both latch DEVICE_LOST. Returns FAILED with err
 * naming the bad part (nothing added) on a syntax error. */
tsl_status tsl_backend_inject(tsl_backend *be, const char *spec, tsl_error *err);
/* Remove every injection rule of the backend. */
void tsl_backend_inject_clear(tsl_backend *be);
/* How many injected faults of class c fired on this backend. */
uint64_t tsl_backend_injected(const tsl_backend *be, tsl_fault_class c);

/* Availability gate: fn returns false while the application may not use the
 * device (an app in the background). Computes then return TSL_RETRY at once,
 * submitting nothing and not counted as computes. fn is called once per
 * compute, on the computing thread (a lost device answers DEVICE_LOST
 * first, without asking it). NULL removes the gate. */
typedef bool (*tsl_gate_fn)(void *user);
void tsl_backend_set_gate(tsl_backend *be, tsl_gate_fn fn, void *user);

/* Retry policy for callers who want transient failures handled for them. */
typedef struct tsl_retry_policy {
    int max_attempts;      /* total attempts, >= 1 */
    int backoff_ms;        /* wait before the second attempt */
    double backoff_factor; /* multiply the wait after each attempt (>= 1) */
    int max_backoff_ms;    /* cap on one wait */
    tsl_backend *fallback; /* when set, a graph still RETRY after the attempts
                              runs once on this backend (normally the CPU) */
} tsl_retry_policy;
tsl_retry_policy tsl_retry_default(void); /* 3 attempts, 10 ms, x4, cap 1 s, no fallback */
/* Compute g, retrying RETRY outcomes by policy; other statuses return at
 * once (FAILED would fail the same way, ALLOC_FAILED and DEVICE_LOST need
 * the caller first). The record describes the last attempt (split = -1);
 * after a fallback, the fallback's attempt. */
tsl_status tsl_graph_compute_retry(tsl_backend *be, tsl_graph *g, const tsl_retry_policy *policy, tsl_error *err);

/* ------------------------------------------------------------------------ */
/* Device loss and recovery (FAULTS.md section 8)                            */
/* ------------------------------------------------------------------------ */

/* True while the backend's device is lost: every compute, buffer allocation
 * and tensor copy on it returns TSL_DEVICE_LOST at once, with the original
 * cause in its record, until tsl_backend_recover succeeds. Loss is
 * device-wide: every backend (context) on the same device sees it. Each CPU
 * backend is a device of its own: losing one leaves the others running.
 * False for NULL. */
bool tsl_backend_is_lost(const tsl_backend *be);
/* Recreate the device objects (device, queues, kernels), reallocate every
 * buffer of the device at the same size behind the same addresses, restore
 * persistent buffers from their host source (tsl_buffer_set_host_source) or
 * from the host copy the backend kept of them, and zero the others, marking
 * them lost (tsl_buffer_is_lost) so their owner rebuilds them (a KV cache
 * re-runs its tokens). Tensors keep their placement. Every kernel failure
 * cached on the backend is forgotten (kernels are rebuilt on next use; one
 * still broken fails again then). On a device that is not lost, recovery
 * only does that last part: it rebuilds kernels and touches no buffer.
 * Returns SUCCESS; FAILED if the backend is computing on another thread or
 * be is NULL; ALLOC_FAILED or DEVICE_LOST with err filled if memory or the
 * device cannot be had again, and the device then stays lost (call again).
 * Never blocks on a hung device. Do not compute on the device's other
 * backends while it runs (they would get DEVICE_LOST anyway until it ends).
 * On the CPU, "reallocating" keeps each host allocation (tensors point into
 * it) and wipes it to zero, the state fresh device memory starts in, and
 * restarts the thread pool; so whatever a buffer holds after recovery was
 * really restored. The time it took (also without a loss) is
 * tsl_backend_last_recovery_ms, 0 before the first recovery. */
tsl_status tsl_backend_recover(tsl_backend *be, tsl_error *err);
double tsl_backend_last_recovery_ms(const tsl_backend *be);
/* Persistent buffers: where to restore them from after recovery (size bytes
 * at src, e.g. the memory-mapped model file, restored to the start of the
 * buffer; a larger size is clamped to the buffer, the rest comes back zero;
 * src must outlive the buffer and is read only by recovery). Marks the
 * buffer persistent and drops any host copy. src NULL falls back to a kept
 * host copy (tsl_buffer_set_persistent). NULL buf is a no-op. */
void tsl_buffer_set_host_source(tsl_buffer *buf, const void *src, size_t size);
/* The buffer's contents were lost in the last recovery (zeroed). Cleared by
 * tsl_buffer_clear_lost once the owner has rebuilt it. False for NULL. */
bool tsl_buffer_is_lost(const tsl_buffer *buf);
void tsl_buffer_clear_lost(tsl_buffer *buf);

/* ------------------------------------------------------------------------ */
/* Kernels (FAULTS.md section 6)                                             */
/* ------------------------------------------------------------------------ */

/* Called once per kernel by tsl_backend_build_kernels: its name, the build
 * status (SUCCESS or FAILED) and, on failure, the record with the driver's
 * text. */
typedef void (*tsl_kernel_fn)(const char *name, tsl_status status, const tsl_error *err, void *user);
/* Build every kernel the backend has now (rather than on first use), report
 * each through fn (may be NULL), and return how many failed. A failed build
 * is cached with its record: no encoder binds it, and supports_op answers
 * false for its op and types from then on, until tsl_backend_recover. A
 * kernel already cached as failed is reported with its original record, not
 * rebuilt. Returns -1 (reporting nothing) for a NULL or lost backend, or
 * when the list cannot be made (out of memory).
 * CPU kernels are named cpu_<op>_<source types>[_<result type> for DUP]:
 * cpu_mul_mat_q4_0_f32, cpu_get_rows_q8_0_i32, cpu_rope_f32_i32,
 * cpu_dup_f32_f16; the same names appear in records and match "kernel@name="
 * injection rules. Building a CPU kernel is choosing its function, so a
 * kernel injection rule fires at any lookup of a kernel not yet failed. */
int tsl_backend_build_kernels(tsl_backend *be, tsl_kernel_fn fn, void *user);

/* ------------------------------------------------------------------------ */
/* The scheduler: one graph over several backends                           */
/* ------------------------------------------------------------------------ */

/* Splits a graph into runs of consecutive nodes (splits) each computed on one
 * backend: a node goes to the first backend, in the order given, that
 * supports it (tsl_backend_supports_op, which turns false for kernels that
 * failed to build) and, among those, preferably the one holding its weights;
 * the last backend is the fallback (normally the CPU) and must support every
 * op. Inputs a split reads from another backend's memory are copied into
 * memory of the split's backend; activations are placed by one graph
 * allocator per backend. A failure names the split and its backend in the
 * record (err->split).
 * Nodes without data, or holding an address from an earlier compute, are
 * placed by the scheduler and their results are valid until the next
 * tsl_sched_compute on it; a node its owner placed (arena memory, or a
 * live buffer of one of the scheduler's backends) keeps its memory and runs
 * on a backend that can use it. The caller's tensors keep their sources;
 * only nodes' data and buffer are set. Host-memory backends share one
 * graph allocator. At most 16 backends; one thread at a time. */
typedef struct tsl_sched tsl_sched;

typedef struct tsl_sched_params {
    bool retry_on_fallback; /* a split that returns RETRY runs again on the fallback backend */
} tsl_sched_params;

/* backends: n >= 1, in priority order; the scheduler does not own them. */
tsl_sched *tsl_sched_new(tsl_backend **backends, int n, tsl_sched_params params, tsl_error *err);
void tsl_sched_free(tsl_sched *s);
/* Plan (split, place, copy) and compute g. Returns the first failure with
 * err->split and err->backend naming where it happened. */
tsl_status tsl_sched_compute(tsl_sched *s, tsl_graph *g, tsl_error *err);
/* The last plan: number of splits, each split's backend and node range. */
int tsl_sched_n_splits(const tsl_sched *s);
tsl_backend *tsl_sched_split_backend(const tsl_sched *s, int split, int *first_node, int *n_nodes);
/* Copies made into other backends' memory by the last compute. */
int tsl_sched_n_copies(const tsl_sched *s);
/* Host time of the last compute's planning (assignment, splits, copies,
 * placement), in microseconds: the part of tsl_sched_compute before any
 * backend runs. */
double tsl_sched_plan_us(const tsl_sched *s);
/* Computes that ran the plan kept from the compute before (the same graph,
 * unchanged, on backends whose supported ops had not changed). */
uint64_t tsl_sched_n_reused(const tsl_sched *s);

/* ------------------------------------------------------------------------ */
/* Vulkan                                                                    */
/* ------------------------------------------------------------------------ */

/* The Vulkan backend runs on any Vulkan 1.2 driver: a GPU, or Mesa's
 * lavapipe (a CPU device) where there is none. It is present when the
 * library was built with Vulkan (TSL_HAVE_VULKAN defined); otherwise
 * tsl_vulkan_device_count() is 0 and tsl_backend_vulkan_new fails saying so.
 *
 * Environment:
 *   TSL_VULKAN_DEVICE=i      the device tsl_backend_vulkan_new(-1) picks
 *   TSL_VULKAN_VALIDATE=1    load the Khronos validation layer; its reports
 *                            go to the log (errors at ERROR level)
 *   TSL_VULKAN_WATCHDOG_MS=n no progress for n ms is a hang (DEVICE_LOST);
 *                            default: 10 s (60 s on a CPU device) plus time
 *                            for the work at a floor of 1 GFLOP/s and 1 GB/s,
 *                            per command buffer
 *   TSL_VULKAN_CB=n          command buffers per compute (1..9, default 4)
 *   TSL_VULKAN_CHECKED=1     robust buffer access: out-of-bounds accesses by
 *                            kernels are contained by the driver
 *   TSL_VULKAN_STAGING=1     copy through staging buffers even where device
 *                            memory is host-visible (testing the GPU path)
 *   TSL_VULKAN_NO_PUSH_DESCRIPTORS=1  use descriptor pools even where
 *                            VK_KHR_push_descriptor exists
 *   TSL_VULKAN_PROFILE=1     time every node on the GPU (a timestamp after
 *                            each) and print the time per kernel to stderr
 *                            when the backend is freed (where the queue has
 *                            timestamps)
 *   TSL_VULKAN_CHECKPOINTS=N also an NV diagnostic checkpoint where every
 *                            N-th level of kernels starts (the kernels
 *                            between two barriers); default 0, none. A hang
 *                            or a device loss is named without them: every
 *                            kernel first raises its compute's progress
 *                            word (in host memory) to its node, so the last
 *                            level to start is known; checkpoints cost 13%
 *                            of an 8B model's decode on an H200 at N = 1
 *   TSL_VULKAN_REUSE=0       record every compute's command buffers (by
 *                            default a compute whose commands equal the
 *                            last ones submits those again; a graph stamped
 *                            unchanged, tsl_graph.stamp, is not even
 *                            resolved or encoded again)
 *   TSL_VULKAN_SPIN_US=n     poll a compute's fences n us before sleeping
 *                            on them (0: never poll). Unset: a compute
 *                            submitting the last one's commands sleeps
 *                            until 150-300 us before its expected end
 *                            (the last GPU time) and polls from there;
 *                            never on a CPU device
 *   TSL_VULKAN_FUSE=0        no fused nodes (mul(rms_norm(x), w); add(r, an
 *                            integer-dot mat-vec); decode attention,
 *                            mul_mat(V, soft_max(mul_mat(K, q), mask))):
 *                            one dispatch per node
 *   TSL_VULKAN_FUSE_QUANT=0  the integer-dot mat-vec's column quantizer
 *                            always its own dispatch (by default a norm, a
 *                            swiglu or decode attention's combine pass that
 *                            makes the column writes it too)
 *   TSL_VULKAN_FUSE_ROPE=0   a decode step's q/k/v ropes and cache stores
 *                            always their own dispatches (by default, where
 *                            the q/k/v product is an integer-dot mat-vec
 *                            and the ropes need no frequency factors or
 *                            YaRN, its epilogue does them)
 *   TSL_VULKAN_FUSE_NORM=0|1 a decode step's norms (mul(rms_norm(x), w)
 *                            between an integer-dot product with its
 *                            residual and the integer-dot products reading
 *                            the normed row) never (0) or always (1) done
 *                            inside those products; unset, for rows of at
 *                            most 2048 values (where it is faster)
 *   TSL_VULKAN_ATTN_ONE=0    decode attention always in two dispatches (by
 *                            default, where its output is an integer-dot
 *                            mat-vec's column, one: the last key range of
 *                            each head joins the ranges)
 *   TSL_VULKAN_WAIT=0..7     one-column products that wait on the one
 *                            kernel of the level before them (1 norms, 2
 *                            swiglu, 4 decode attention) instead of a
 *                            barrier; 0 never. Unset: all (7) on NVIDIA's
 *                            driver and CPU devices, none elsewhere. A wait
 *                            past its bound fails the compute with RETRY
 *                            and turns the backend's waits off
 *   TSL_VULKAN_NO_INTEGER_DOT=1  leave VK_KHR_shader_integer_dot_product off:
 *                            Q8_0/Q4_0 mat-vec in F32 activations
 *   TSL_VULKAN_NO_FLOAT64=1  leave shaderFloat64 off: the kernels that form
 *                            angles in double (rope) take their float
 *                            variants, as on a device without it
 *   TSL_VULKAN_PIPELINE_STATS=1  log (at INFO) the driver's statistics of
 *                            every pipeline built (registers, memory), where
 *                            the driver has VK_KHR_pipeline_executable_properties */

/* Number of usable Vulkan devices (Vulkan 1.2 or later); 0 when there is no
 * loader, no driver, or the library was built without Vulkan. */
int tsl_vulkan_device_count(void);

/* What a device is and which features the backend found, for `tensile
 * doctor`. Plain data. */
typedef struct tsl_vulkan_device_info {
    int index;
    char name[96];             /* "NVIDIA H200", "llvmpipe (LLVM 15.0.6, 256 bits)" */
    char type[16];             /* "discrete", "integrated", "virtual", "cpu", "other" */
    char driver[96];           /* driver name and version text */
    uint32_t api_version;      /* VK_MAKE_API_VERSION layout */
    uint32_t vendor_id, device_id;
    uint64_t device_local_bytes;     /* largest device-local heap */
    uint64_t max_allocation_bytes;   /* maxMemoryAllocationSize */
    uint64_t max_storage_buffer_range; /* the largest tensor one kernel binding can see */
    uint32_t max_shared_memory;      /* maxComputeSharedMemorySize */
    uint32_t subgroup_size;
    bool subgroup_arithmetic;  /* subgroup reductions in compute shaders */
    bool storage_16bit;        /* VK_KHR_16bit_storage (F16 and block-format kernels need it) */
    bool float16;              /* shaderFloat16 */
    bool int8;                 /* shaderInt8 */
    bool float64;              /* shaderFloat64 (rope angles in double) */
    bool push_descriptors;     /* VK_KHR_push_descriptor */
    bool timeline_semaphore;
    bool cooperative_matrix;   /* VK_KHR_cooperative_matrix */
    bool cooperative_matrix2;  /* VK_NV_cooperative_matrix2 with workgroup scope (F16 mul_mat kernels) */
    bool device_fault;         /* VK_EXT_device_fault */
    bool nv_checkpoints;       /* VK_NV_device_diagnostic_checkpoints */
    bool robustness2;          /* VK_EXT_robustness2 */
    bool integer_dot;          /* VK_KHR_shader_integer_dot_product (the Q8_0/Q4_0 mat-vec kernels) */
    bool integer_dot_fast;     /* ... with 4x8-bit signed dot products in hardware */
    bool buffer_device_address; /* bufferDeviceAddress (kernels may use GL_EXT_buffer_reference) */
} tsl_vulkan_device_info;

/* Fill *info for device index (0 .. count-1). Returns FAILED with err filled
 * for an index out of range or a build without Vulkan. */
tsl_status tsl_vulkan_device_info_get(int index, tsl_vulkan_device_info *info, tsl_error *err);

/* A Vulkan backend on device device_index, or with -1 the one
 * TSL_VULKAN_DEVICE names, else the first discrete GPU, else the first
 * integrated, virtual or CPU device. Backends on the same device share one
 * VkDevice, its kernels and its loss: DEVICE_LOST latches for all of them.
 * Returns NULL with err filled: FAILED when there is no such device or the
 * library was built without Vulkan; ALLOC_FAILED / DEVICE_LOST when the
 * driver refuses to create the device (classified through the VkResult
 * table). The name is "vulkan<index>". */
tsl_backend *tsl_backend_vulkan_new(int device_index, tsl_error *err);
/* True for a backend made by tsl_backend_vulkan_new. */
bool tsl_backend_is_vulkan(const tsl_backend *be);
/* The device's features (as tsl_vulkan_device_info_get), for a backend. */
tsl_status tsl_backend_vulkan_info(const tsl_backend *be, tsl_vulkan_device_info *info, tsl_error *err);
/* How many command buffers a compute is encoded into (1 .. 9): the calling
 * thread encodes and submits the first while up to 8 worker threads encode
 * the rest. Results do not depend on it. By default (up to 4) a small graph
 * uses fewer, so that none has under 16 nodes; a count set here or by
 * TSL_VULKAN_CB is used as given (one per node at most). Returns FAILED for
 * a value out of range or a non-Vulkan backend. */
tsl_status tsl_backend_vulkan_set_command_buffers(tsl_backend *be, int n, tsl_error *err);
/* Whether a compute whose commands equal the last compute's (the same graph
 * in the same buffers) submits the command buffers recorded then instead of
 * recording them again (default on; TSL_VULKAN_REUSE=0 starts it off).
 * Results do not depend on it. */
void tsl_backend_vulkan_set_reuse(tsl_backend *be, bool on);
/* The watchdog: a compute that makes no progress for ms milliseconds is a
 * hang and ends DEVICE_LOST ("GPU hang: no progress in N s"). 0 restores
 * the default (scaled to the work). */
void tsl_backend_vulkan_set_watchdog_ms(tsl_backend *be, int ms);

/* Counters since the backend was made (for benchmarks and tests). */
typedef struct tsl_vulkan_stats {
    uint64_t computes;         /* computes that reached encoding */
    uint64_t submits;          /* command buffers submitted to the queue */
    uint64_t dispatches;       /* kernels recorded */
    uint64_t set_dispatches;   /* of those, bound through an ordinary descriptor set on a device
                                  with push descriptors (kernels the driver runs faster so:
                                  mul_mat_cm2_*; TSL_VULKAN_SET_KERNELS adds others) */
    uint64_t barriers;         /* pipeline barriers recorded between nodes */
    uint64_t reused_command_buffers; /* submitted again as recorded before (the same
                                        commands: a graph run again in the same buffers) */
    uint64_t replays;          /* computes submitted again as recorded without resolving or
                                  encoding: a graph stamped unchanged (tsl_graph.stamp) */
    uint64_t transfers;        /* staging copies for tensor set/get */
    double encode_ms;          /* host time spent encoding, summed over threads */
    double last_encode_us_per_node; /* last compute: wall time of encoding and
                                       submitting, per compute node */
    double last_resolve_us;    /* last compute: host time choosing its kernels and fusions,
                                  before encoding (not in last_encode_us_per_node) */
    int last_command_buffers;  /* last compute: command buffers used */
    uint64_t validation_errors; /* validation-layer errors reported so far
                                   (process-wide; 0 without TSL_VULKAN_VALIDATE) */
    /* GPU time, from timestamps the device writes at the start and end of
     * every command buffer (where its compute queue has timestamps; see
     * gpu_timing). It leaves out host work: encoding, submission, waiting. */
    bool gpu_timing;           /* the device writes timestamps: the two below are measured */
    double gpu_ms;             /* GPU time of every compute that succeeded, summed */
    double last_gpu_us;        /* last successful compute: from the start of its first
                                  command buffer to the end of its last (0 without
                                  timestamps) */
    uint64_t upload_bytes;     /* bytes copied host -> device by tensor set */
    uint64_t readback_reads;   /* tensor gets served from the copy a compute made of its
                                  TSL_FLAG_READBACK outputs (no copy of their own) */
    double upload_ms;          /* host time those copies took, start to finish */
} tsl_vulkan_stats;
tsl_status tsl_backend_vulkan_stats(const tsl_backend *be, tsl_vulkan_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* TENSILE_BACKEND_H */
