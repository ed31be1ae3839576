/*
 * core.h - private declarations shared by the core and the backends.
 *
 * The op_params layout of every op lives here, so that the shape rules
 * (ops.c) and each backend's kernels read the same slots. Floats are stored
 * bit-for-bit in the int32 slots (op_get_f32 / op_set_f32).
 */
#ifndef TSL_CORE_H
#define TSL_CORE_H

#include <string.h>

#include "tensile/tensile.h"

/* ---- op_params layout --------------------------------------------------
 *  SCALE      [0] f32 scale
 *  RMS_NORM   [0] f32 eps
 *  NORM       [0] f32 eps
 *  SOFT_MAX   [0] f32 scale            src0 = a, src1 = mask or NULL
 *  ROPE       [0] n_dims [1] mode [2] n_ctx_orig
 *             [3] f32 freq_base [4] f32 freq_scale [5] f32 ext_factor
 *             [6] f32 attn_factor [7] f32 beta_fast [8] f32 beta_slow
 *                                      src0 = a, src1 = pos (I32), src2 = freq_factors or NULL
 *  CONCAT     [0] dim                  src0 = a, src1 = b
 *  VIEW       (none) data = view_src->data + view_offs; ne/nb set
 *  PERMUTE    [0..3] axes
 *  CPY        src0 = from, src1 = to (the result is a view of src1, view_src = src1)
 *  DUP        src0 = from; result type is the target type
 *  GET_ROWS   src0 = table, src1 = indices (I32)
 *  MUL_MAT    src0 = a (weights), src1 = b (activations)
 *  OUT_PROD   src0 = a, src1 = b
 *  SWIGLU     src0 = gate, src1 = up
 *  CROSS_ENTROPY_LOSS  src0 = logits, src1 = labels
 *  ADD/SUB/MUL/DIV      src0 = a, src1 = b (broadcast to a)
 * ------------------------------------------------------------------------ */

static inline float op_get_f32(const tsl_tensor *t, int i) {
    float f;
    memcpy(&f, &t->op_params[i], sizeof f);
    return f;
}
static inline void op_set_f32(tsl_tensor *t, int i, float f) { memcpy(&t->op_params[i], &f, sizeof f); }
static inline int32_t op_get_i32(const tsl_tensor *t, int i) { return t->op_params[i]; }

/* One element of a plain float type (F32, F16, BF16) at p, as a float, and
 * back; any other type is read and written as F32. Shared by the host
 * accessors (context.c) and the CPU copy kernels. */
static inline float core_load_f32(tsl_type t, const void *p) {
    if (t == TSL_TYPE_F16 || t == TSL_TYPE_BF16) {
        uint16_t h;
        memcpy(&h, p, sizeof h);
        return t == TSL_TYPE_F16 ? tsl_fp16_to_fp32(h) : tsl_bf16_to_fp32(h);
    }
    float f;
    memcpy(&f, p, sizeof f);
    return f;
}
static inline void core_store_f32(tsl_type t, void *p, float f) {
    if (t == TSL_TYPE_F16 || t == TSL_TYPE_BF16) {
        uint16_t h = t == TSL_TYPE_F16 ? tsl_fp32_to_fp16(f) : tsl_fp32_to_bf16(f);
        memcpy(p, &h, sizeof h);
        return;
    }
    memcpy(p, &f, sizeof f);
}

/* Size in bytes of one element for non-block types, of one block otherwise. */
size_t core_type_size(tsl_type t);

/* The arena allocator under a context (used by graphs and higher layers for
 * metadata that must live as long as the context). Returns NULL and sets the
 * ctx error when full. Memory is 16-byte aligned (align = 0) or aligned to
 * `align` (a power of two). */
void *ctx_arena_alloc(tsl_context *ctx, size_t size, size_t align);

/* A new tensor without data regardless of no_alloc (for views). */
tsl_tensor *ctx_new_tensor_meta(tsl_context *ctx, tsl_type type, const int64_t ne[4], const size_t nb[4]);

/* A tensor in ctx; `who` (an op name, or NULL) prefixes error messages such
 * as "add: arena full: ...". nb NULL means contiguous strides; with_data asks
 * for arena data (ignored when the context is no_alloc). Validates the type
 * and byte-size overflow; the caller validates the shape. */
tsl_tensor *ctx_tensor_new(tsl_context *ctx, const char *who, tsl_type type, const int64_t ne[4],
                           const size_t nb[4], bool with_data);

/* Shape text "[a, b, c, d] type" into buf. */
const char *core_shape_str(const tsl_tensor *t, char *buf, size_t n);
/* The monotonic clock in nanoseconds (timings, watchdogs). */
uint64_t core_now_ns(void);

/* FLOPs of one node (0 for metadata ops). */
double core_node_flops(const tsl_tensor *t);

/* Can the op write its result over src0's memory (same size, element-wise)? */
bool core_op_can_inplace(tsl_op op);

/* Q4_0 blocks to and from the split layout (backend_impl.h, backend_q4s):
 * n groups of CORE_Q4S_BLOCKS blocks (CORE_Q4S_BYTES each) from src to dst
 * (not overlapping). A group is 64 blocks, 1152 bytes: nine 128-byte lines,
 * so every group starts on a line where its tensor does. */
#define CORE_Q4S_BLOCKS 64u
#define CORE_Q4S_BYTES (18u * CORE_Q4S_BLOCKS)
void tsl_q4_0_split(const void *src, void *dst, size_t n);
void tsl_q4_0_unsplit(const void *src, void *dst, size_t n);

/* Logging helpers used across modules. */
#define TSL_LOGD(...) tsl_log(TSL_LOG_DEBUG, __VA_ARGS__)
#define TSL_LOGI(...) tsl_log(TSL_LOG_INFO, __VA_ARGS__)
#define TSL_LOGW(...) tsl_log(TSL_LOG_WARN, __VA_ARGS__)
#define TSL_LOGE(...) tsl_log(TSL_LOG_ERROR, __VA_ARGS__)

/* Fill an error record's fields in one call (strings may be NULL). Returns
 * the status, so callers can `return error_set(...)`. Defined in src/fault/. */
tsl_status error_set(tsl_error *e, tsl_status s, const char *backend, const char *device, int node,
                     const tsl_tensor *t, const char *kernel, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 8, 9)))
#endif
    ;
/* Set the hint matching the status ("fix the graph", "retry later", ...). */
void error_default_hint(tsl_error *e);

#endif /* TSL_CORE_H */
