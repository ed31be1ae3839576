/*
 * tensile.h - the core public API: types, tensors, contexts, ops, graphs,
 * the graph allocator, statuses and error records.
 *
 * The model is ggml's: a context owns an arena; tensor metadata is plain data
 * (type, up to 4 dimensions, byte strides); ops build a DAG lazily and nothing
 * runs until a backend computes a graph (see backend.h).
 *
 * Failure behaviour, for every call in this header:
 *  - A graph-build error (shape mismatch, wrong type, bad parameter, arena
 *    full) sets an error on the context and the op returns NULL. Any op given
 *    a NULL operand returns NULL without touching the error. The caller checks
 *    once, at the end: tsl_ctx_error() gives the first failure as one sentence
 *    naming the op and the shapes.
 *  - Nothing in this library aborts the process on bad input, or on a device,
 *    driver or resource failure. A broken internal invariant (a bug) may assert.
 *
 * Dimension order is ggml's: ne[0] is the innermost (row length), ne[1] the
 * number of rows, ne[2] and ne[3] batch dimensions. nb[i] is the byte stride
 * of dimension i; for quantized types nb[0] is the block size in bytes and
 * ne[0] must be a multiple of the block length.
 */
#ifndef TENSILE_H
#define TENSILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TSL_VERSION_MAJOR 0
#define TSL_VERSION_MINOR 1
#define TSL_VERSION_PATCH 0
#define TSL_VERSION_STRING "0.1.0"

#define TSL_MAX_DIMS 4
#define TSL_MAX_SRC 4
#define TSL_MAX_OP_PARAMS 16 /* int32 slots */
#define TSL_MAX_NAME 64

/* ------------------------------------------------------------------------ */
/* Statuses and error records (the fault contract, FAULTS.md sections 1-3)   */
/* ------------------------------------------------------------------------ */

/* Positive values are interruptions, negative values are errors. Only
 * TSL_DEVICE_LOST latches (device-wide, until tsl_backend_recover). */
typedef enum tsl_status {
    TSL_SUCCESS = 0,       /* outputs are valid */
    TSL_ABORTED = 1,       /* the abort callback stopped the compute; run again when wanted */
    TSL_RETRY = 2,         /* transient refusal; nothing latched; run again later or elsewhere */
    TSL_FAILED = -1,       /* this graph cannot run as built; same graph fails the same way */
    TSL_ALLOC_FAILED = -2, /* memory could not be had; free memory or shrink, then run again */
    TSL_DEVICE_LOST = -3,  /* device gone or corrupt; latched until recovered */
} tsl_status;

/* The name of a status ("SUCCESS", "RETRY", ...). Never NULL; an unknown value
 * gives "UNKNOWN". */
const char *tsl_status_str(tsl_status s);

/* An error record. Plain fixed-size data so it can be copied, stored, and sent
 * across a process boundary (isolated workers) as bytes. Strings are always
 * NUL-terminated; an empty string means "not known / not applicable".
 * node is -1 when the failure is not tied to a graph node. */
typedef struct tsl_error {
    tsl_status status;
    char backend[32];       /* "cpu", "vulkan0" */
    char device[96];        /* "AMD EPYC (2 threads)", "NVIDIA H200" */
    int32_t node;           /* graph node index, -1 if none */
    int32_t split;          /* scheduler split index, -1 if none */
    char op[24];            /* "MUL_MAT" */
    char tensor[TSL_MAX_NAME];  /* tensor name */
    char kernel[64];        /* kernel / pipeline name */
    char driver_domain[32]; /* "VkResult", "CUresult", "MTLCommandBufferErrorDomain" */
    int64_t driver_code;
    char driver_text[128];  /* "VK_ERROR_DEVICE_LOST" or the driver's message */
    char message[256];      /* one line a person can act on */
    char hint[128];         /* "retry later", "recover the backend", "fix the graph" */
} tsl_error;

/* Reset a record to "no error" (status SUCCESS, node/split -1, strings empty). */
void tsl_error_clear(tsl_error *e);

/* Format a record as the one line that logs, HTTP errors and CLI messages
 * print, e.g.
 *   cpu (AMD EPYC): FAILED at node 17 MUL_MAT 'blk.3.ffn_up': kernel
 *   mul_mat_q4_0_f32 could not be built (VkResult -13: ...) - fix the graph
 * Writes at most n bytes including the NUL; returns the length the full line
 * would have (snprintf semantics). buf may be NULL when n is 0. */
size_t tsl_error_format(const tsl_error *e, char *buf, size_t n);

/* ------------------------------------------------------------------------ */
/* Types                                                                     */
/* ------------------------------------------------------------------------ */

/* Values are the GGUF/ggml type ids, so files map directly. */
typedef enum tsl_type {
    TSL_TYPE_F32 = 0,
    TSL_TYPE_F16 = 1,
    TSL_TYPE_Q4_0 = 2,
    TSL_TYPE_Q8_0 = 8,
    TSL_TYPE_I8 = 24,
    TSL_TYPE_I16 = 25,
    TSL_TYPE_I32 = 26,
    TSL_TYPE_I64 = 27,
    TSL_TYPE_F64 = 28,
    TSL_TYPE_BF16 = 30,
    TSL_TYPE_COUNT = 40, /* upper bound of ids; not every id below is supported */
} tsl_type;

/* Block layouts, bit-exact with GGUF. */
#define TSL_QK8_0 32
#define TSL_QK4_0 32
typedef uint16_t tsl_fp16_t; /* IEEE binary16 bits */
typedef uint16_t tsl_bf16_t; /* bfloat16 bits */
typedef struct { tsl_fp16_t d; int8_t qs[TSL_QK8_0]; } tsl_block_q8_0;       /* 34 bytes */
typedef struct { tsl_fp16_t d; uint8_t qs[TSL_QK4_0 / 2]; } tsl_block_q4_0;  /* 18 bytes */

/* True for the types this library knows (the enum values above). */
bool tsl_type_valid(int type);
/* "f32", "f16", "bf16", "q8_0", "q4_0", "i32", ...; "?" for an unknown id. */
const char *tsl_type_name(tsl_type t);
/* Parse a name as above (case-insensitive); returns -1 if unknown. */
int tsl_type_from_name(const char *name);
/* Elements per block (1 for plain types, 32 for Q8_0/Q4_0). 0 if unknown. */
int64_t tsl_type_block_len(tsl_type t);
/* Bytes per block (4 for F32, 34 for Q8_0, 18 for Q4_0). 0 if unknown. */
size_t tsl_type_block_size(tsl_type t);
bool tsl_type_is_quantized(tsl_type t);
/* Bytes of one row of n elements; 0 if n is not a multiple of the block length. */
size_t tsl_row_size(tsl_type t, int64_t n);

/* Scalar conversions (round-to-nearest-even, as ggml and numpy do). */
tsl_fp16_t tsl_fp32_to_fp16(float f);
float tsl_fp16_to_fp32(tsl_fp16_t h);
tsl_bf16_t tsl_fp32_to_bf16(float f);
float tsl_bf16_to_fp32(tsl_bf16_t h);

/* Quantize n floats (n a multiple of the block length) into dst, in the GGUF
 * layout, producing the same bytes as llama.cpp's reference quantizer and the
 * `gguf` Python package. Works for every float-or-quantized type (F32 copies,
 * F16/BF16 convert). Returns bytes written, or 0 if the type is not a
 * float/quantized type or n is not a multiple of the block length. */
size_t tsl_quantize(tsl_type t, const float *src, void *dst, int64_t n);
/* The inverse. Returns bytes written (n * sizeof(float)), or 0 on the same
 * conditions. */
size_t tsl_dequantize(tsl_type t, const void *src, float *dst, int64_t n);
/* Row-wise dot product of two rows of n elements: a of type t, b of the
 * type tsl_vec_dot_type(t) (F32 for F32, F16 for F16, BF16 for BF16, Q8_0 for
 * Q8_0 and Q4_0). Uses the fastest kernel this CPU has. */
float tsl_vec_dot(tsl_type t, int64_t n, const void *a, const void *b);
/* (tsl_vec_dot returns 0 for n == 0, and NAN for an unknown type, a NULL row,
 * n < 0 or n not a multiple of the block length.) */
/* The type b must have for tsl_vec_dot; TSL_TYPE_COUNT for a type with no
 * dot product. */
tsl_type tsl_vec_dot_type(tsl_type t);

/* ------------------------------------------------------------------------ */
/* Ops                                                                       */
/* ------------------------------------------------------------------------ */

typedef enum tsl_op {
    TSL_OP_NONE = 0, /* a leaf: input, weight, constant */
    TSL_OP_DUP,      /* copy into a new contiguous tensor of a (possibly other) type */
    TSL_OP_CPY,      /* copy src0 into src1 (converting types); result views src1 */
    TSL_OP_ADD,
    TSL_OP_SUB,
    TSL_OP_MUL,
    TSL_OP_DIV,
    TSL_OP_SCALE,
    TSL_OP_SQR,
    TSL_OP_SQRT,
    TSL_OP_SUM,
    TSL_OP_SUM_ROWS,
    TSL_OP_MEAN,
    TSL_OP_ARGMAX,
    TSL_OP_GET_ROWS,
    TSL_OP_MUL_MAT,
    TSL_OP_OUT_PROD,
    TSL_OP_RMS_NORM,
    TSL_OP_NORM,
    TSL_OP_ROPE,
    TSL_OP_SOFT_MAX,
    TSL_OP_SILU,
    TSL_OP_GELU,
    TSL_OP_SWIGLU,
    TSL_OP_CONCAT,
    TSL_OP_CROSS_ENTROPY_LOSS,
    TSL_OP_SET_ROWS, /* writes into its destination (a view of it), like CPY */
    /* metadata-only ops: no kernel, the result aliases its source */
    TSL_OP_VIEW,
    TSL_OP_RESHAPE,
    TSL_OP_PERMUTE,
    TSL_OP_TRANSPOSE,
    TSL_OP_CONT, /* has a kernel: copies into a contiguous tensor */
    TSL_OP_COUNT
} tsl_op;

/* "ADD", "MUL_MAT", ...; "?" for an unknown value. */
const char *tsl_op_name(tsl_op op);
/* True for VIEW, RESHAPE, PERMUTE, TRANSPOSE (no kernel runs). */
bool tsl_op_is_view(tsl_op op);

/* Tensor flags */
#define TSL_FLAG_INPUT 1u      /* set by the caller before compute; allocator never reuses it */
#define TSL_FLAG_OUTPUT 2u     /* read after compute; allocator never reuses it */
#define TSL_FLAG_PARAM 4u      /* trainable parameter */
#define TSL_FLAG_PERSISTENT 8u /* restored from its host source after device recovery */
/* read by the host after every compute (e.g. logits): a backend whose tensor
 * memory the host cannot map may copy it to host-visible memory within the
 * compute itself, so tsl_tensor_get needs no copy of its own */
#define TSL_FLAG_READBACK 16u
/* a read-only weight, written only through tsl_tensor_set: a device backend
 * may keep it in a layout its kernels read faster (the Vulkan backend keeps
 * Q4_0 weights of whole groups of 64 blocks with each group's quants before
 * its scales). tsl_tensor_set/get convert, so callers always see the file's
 * bytes; copies then cover whole groups (1152 bytes for Q4_0), and views
 * start on one. Set it before the tensor's data is first written. */
#define TSL_FLAG_WEIGHT 32u

struct tsl_buffer;
struct tsl_context;

/* A tensor. Plain data: read any field; change only name (tsl_tensor_set_name)
 * and flags. data is where element (0,0,0,0) lives: a host address for host
 * buffers and arena tensors; for device buffers an opaque address inside the
 * buffer's range (base + offset). data is NULL for a tensor not yet allocated. */
typedef struct tsl_tensor {
    tsl_type type;
    uint32_t flags;
    int64_t ne[TSL_MAX_DIMS];  /* elements per dimension */
    size_t nb[TSL_MAX_DIMS];   /* bytes per step in each dimension */
    tsl_op op;
    int32_t op_params[TSL_MAX_OP_PARAMS]; /* layout per op: see src/core/core.h */
    struct tsl_tensor *src[TSL_MAX_SRC];
    struct tsl_tensor *view_src; /* the tensor this one aliases (views), else NULL */
    size_t view_offs;            /* byte offset into view_src */
    void *data;
    struct tsl_buffer *buffer;   /* the backend buffer holding data, or NULL (arena/host) */
    struct tsl_context *ctx;     /* the context that made it */
    void *extra;                 /* backend-private */
    char name[TSL_MAX_NAME];
} tsl_tensor;

/* ------------------------------------------------------------------------ */
/* Contexts                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct tsl_context tsl_context;

typedef struct tsl_ctx_params {
    size_t mem_size; /* arena bytes for tensor metadata (and data unless no_alloc) */
    bool no_alloc;   /* true: tensors get no data here (a backend buffer or the
                        graph allocator provides it) */
} tsl_ctx_params;

/* Create a context. Returns NULL only if the arena itself cannot be allocated. */
tsl_context *tsl_ctx_new(tsl_ctx_params params);
/* Free the context, its arena and every tensor and graph made in it. NULL is a no-op. */
void tsl_ctx_free(tsl_context *ctx);
/* The first graph-build error as one sentence, or NULL if none. Owned by ctx. */
const char *tsl_ctx_error(const tsl_context *ctx);
/* Forget the error so the context can build again. */
void tsl_ctx_clear_error(tsl_context *ctx);
/* Record an error on the context (first one wins); printf-style. Returns NULL
 * so ops can `return tsl_ctx_fail(...)`. Used by higher layers too. */
tsl_tensor *tsl_ctx_fail(tsl_context *ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Bytes of arena used so far, and its size. */
size_t tsl_ctx_used(const tsl_context *ctx);
size_t tsl_ctx_size(const tsl_context *ctx);
bool tsl_ctx_no_alloc(const tsl_context *ctx);
/* Iterate over tensors made in ctx, in creation order (NULL starts / ends). */
tsl_tensor *tsl_ctx_first_tensor(const tsl_context *ctx);
tsl_tensor *tsl_ctx_next_tensor(const tsl_context *ctx, const tsl_tensor *t);
/* Find a tensor by name (first made wins), or NULL. */
tsl_tensor *tsl_ctx_get_tensor(const tsl_context *ctx, const char *name);

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */

/* A new contiguous tensor. n_dims 1..4; every ne >= 0 (ne >= 1 in dims past
 * n_dims); ne[0] a multiple of the type's block length; the total byte size
 * must not overflow. Returns NULL and sets the ctx error otherwise. */
tsl_tensor *tsl_new_tensor(tsl_context *ctx, tsl_type type, int n_dims, const int64_t *ne);
tsl_tensor *tsl_new_tensor_1d(tsl_context *ctx, tsl_type type, int64_t ne0);
tsl_tensor *tsl_new_tensor_2d(tsl_context *ctx, tsl_type type, int64_t ne0, int64_t ne1);
tsl_tensor *tsl_new_tensor_3d(tsl_context *ctx, tsl_type type, int64_t ne0, int64_t ne1, int64_t ne2);
tsl_tensor *tsl_new_tensor_4d(tsl_context *ctx, tsl_type type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);
/* A new tensor with a's type and shape (data not copied). */
tsl_tensor *tsl_dup_tensor(tsl_context *ctx, const tsl_tensor *a);

/* Name (truncated to TSL_MAX_NAME-1 bytes). Both return t; NULL-safe. */
tsl_tensor *tsl_tensor_set_name(tsl_tensor *t, const char *name);
tsl_tensor *tsl_tensor_format_name(tsl_tensor *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

int64_t tsl_nelements(const tsl_tensor *t);
int64_t tsl_nrows(const tsl_tensor *t); /* ne[1]*ne[2]*ne[3] */
/* Bytes spanned by the tensor's data (max offset + one element/block). */
size_t tsl_nbytes(const tsl_tensor *t);
/* Number of dimensions, ignoring trailing 1s (at least 1). */
int tsl_n_dims(const tsl_tensor *t);
/* Rows stored densely in order (nb[0] = block size, nb[i] = nb[i-1]*ne[i-1]). */
bool tsl_is_contiguous(const tsl_tensor *t);
/* Each row is dense (nb[0] = block size) even if rows are strided. */
bool tsl_rows_contiguous(const tsl_tensor *t);
bool tsl_same_shape(const tsl_tensor *a, const tsl_tensor *b);
/* b can be broadcast to a: a->ne[i] % b->ne[i] == 0 for every i. */
bool tsl_can_repeat(const tsl_tensor *b, const tsl_tensor *a);
/* "[4096, 32, 1, 1] f32" style text, for messages. Writes into buf. */
const char *tsl_shape_str(const tsl_tensor *t, char *buf, size_t n);

/* Host access for tensors whose data is host memory (arena or host buffer).
 * For backend buffers use tsl_tensor_set/tsl_tensor_get from backend.h. */
float tsl_get_f32_1d(const tsl_tensor *t, int64_t i);     /* flat index, F32/F16/BF16/I32 */
void tsl_set_f32_1d(tsl_tensor *t, int64_t i, float v);
float tsl_get_f32_nd(const tsl_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3);
void tsl_set_f32_nd(tsl_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3, float v);

/* ------------------------------------------------------------------------ */
/* Views (metadata only; the result aliases a)                               */
/* ------------------------------------------------------------------------ */

/* Views with explicit strides and a byte offset into a. The view must lie
 * within a's bytes. */
tsl_tensor *tsl_view_1d(tsl_context *ctx, tsl_tensor *a, int64_t ne0, size_t offset);
tsl_tensor *tsl_view_2d(tsl_context *ctx, tsl_tensor *a, int64_t ne0, int64_t ne1, size_t nb1, size_t offset);
tsl_tensor *tsl_view_3d(tsl_context *ctx, tsl_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2,
                        size_t nb1, size_t nb2, size_t offset);
tsl_tensor *tsl_view_4d(tsl_context *ctx, tsl_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                        size_t nb1, size_t nb2, size_t nb3, size_t offset);
/* Same elements, new shape; a must be contiguous and the counts must match. */
tsl_tensor *tsl_reshape_1d(tsl_context *ctx, tsl_tensor *a, int64_t ne0);
tsl_tensor *tsl_reshape_2d(tsl_context *ctx, tsl_tensor *a, int64_t ne0, int64_t ne1);
tsl_tensor *tsl_reshape_3d(tsl_context *ctx, tsl_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2);
tsl_tensor *tsl_reshape_4d(tsl_context *ctx, tsl_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);
/* Dimension i of a becomes dimension axisi of the result (ggml semantics);
 * the axes must be a permutation of 0..3. */
tsl_tensor *tsl_permute(tsl_context *ctx, tsl_tensor *a, int axis0, int axis1, int axis2, int axis3);
/* Swap dimensions 0 and 1. */
tsl_tensor *tsl_transpose(tsl_context *ctx, tsl_tensor *a);
/* A contiguous copy of a (same type). */
tsl_tensor *tsl_cont(tsl_context *ctx, tsl_tensor *a);

/* ------------------------------------------------------------------------ */
/* Compute ops. Unless stated, inputs and result are F32.                    */
/* Broadcasting: b is repeated to a's shape (a->ne[i] % b->ne[i] == 0).      */
/* ------------------------------------------------------------------------ */

/* A new contiguous tensor of `type` holding a converted to it. a may be any
 * float or quantized type; type F32/F16/BF16/Q8_0/Q4_0 (quantized needs
 * ne[0] a multiple of the block length). */
tsl_tensor *tsl_dup(tsl_context *ctx, tsl_tensor *a, tsl_type type);
/* Copy a into b (same element count; b may be a strided view, e.g. a KV cache
 * slot), converting types. Returns a view of b that depends on the copy.
 * When a or b is quantized and a->ne[0] != b->ne[0], both must be contiguous
 * with ne[0] a multiple of the block length; otherwise NULL and a ctx error. */
tsl_tensor *tsl_cpy(tsl_context *ctx, tsl_tensor *a, tsl_tensor *b);

tsl_tensor *tsl_add(tsl_context *ctx, tsl_tensor *a, tsl_tensor *b);
tsl_tensor *tsl_sub(tsl_context *ctx, tsl_tensor *a, tsl_tensor *b);
tsl_tensor *tsl_mul(tsl_context *ctx, tsl_tensor *a, tsl_tensor *b);
tsl_tensor *tsl_div(tsl_context *ctx, tsl_tensor *a, tsl_tensor *b);
tsl_tensor *tsl_scale(tsl_context *ctx, tsl_tensor *a, float s);
tsl_tensor *tsl_sqr(tsl_context *ctx, tsl_tensor *a);
tsl_tensor *tsl_sqrt(tsl_context *ctx, tsl_tensor *a);
/* Sum of all elements: a [1] tensor. */
tsl_tensor *tsl_sum(tsl_context *ctx, tsl_tensor *a);
/* Sum / mean of each row: [1, ne1, ne2, ne3]. */
tsl_tensor *tsl_sum_rows(tsl_context *ctx, tsl_tensor *a);
tsl_tensor *tsl_mean(tsl_context *ctx, tsl_tensor *a);
/* Index of the largest element of each row of a 2-D a: I32 [ne1]. First wins
 * ties; NaN and -inf never win (a row with nothing above -inf gives 0). */
tsl_tensor *tsl_argmax(tsl_context *ctx, tsl_tensor *a);
/* Rows of a (any float or quantized type, rows dense: a->nb[0] == block
 * size) picked by I32 indices:
 * a [ne0, nrows, ne2, ne3], idx [n, ne2, ne3]  -> F32 [ne0, n, ne2, ne3].
 * An index out of range is an error reported by the compute (FAILED). */
tsl_tensor *tsl_get_rows(tsl_context *ctx, tsl_tensor *a, tsl_tensor *idx);
/* Write src into dst at I32 positions along dim (0 or 1), converting F32 to
 * dst's type (F32 or F16, round to nearest even): dim 1, row idx[j] of dst
 * gets row j of src; dim 0, element idx[j] of every row of dst gets element
 * j of that row of src. src is dst's shape but idx->ne[0] along dim, any
 * strides; idx is 1-D. Returns a view of dst that depends on the write, as
 * tsl_cpy does; the positions are data, so a graph that writes a cache row
 * per token stays the same graph. An index out of range is an error
 * reported by the compute (FAILED), and nothing is written for it. */
tsl_tensor *tsl_set_rows(tsl_context *ctx, tsl_tensor *dst, tsl_tensor *src, tsl_tensor *idx, int dim);
/* Matrix product, ggml semantics: a [K, M, A2, A3] (any float or quantized
 * type, rows dense), b [K, N, B2, B3] (F32; or F16 when a is F16), with
 * B2 % A2 == 0 and B3 % A3 == 0; b's batch (i2, i3) uses a's batch
 * (i2 / (B2/A2), i3 / (B3/A3)), as grouped-query attention needs:
 * result F32 [M, N, B2, B3], r[m, n] = sum_k a[k, m] * b[k, n]. */
tsl_tensor *tsl_mul_mat(tsl_context *ctx, tsl_tensor *a, tsl_tensor *b);
/* Outer-product accumulation: a [M, K, A2, A3], b [N, K, B2, B3] (F32, a may
 * be F16/BF16/quantized), broadcast as mul_mat: result F32 [M, N, B2, B3],
 * r[m, n] = sum_k a[m, k] * b[n, k]. */
tsl_tensor *tsl_out_prod(tsl_context *ctx, tsl_tensor *a, tsl_tensor *b);
/* Per row: x / sqrt(mean(x^2) + eps). eps > 0. */
tsl_tensor *tsl_rms_norm(tsl_context *ctx, tsl_tensor *a, float eps);
/* Per row: (x - mean) / sqrt(var + eps). eps > 0. */
tsl_tensor *tsl_norm(tsl_context *ctx, tsl_tensor *a, float eps);

/* RoPE. mode: TSL_ROPE_NORMAL rotates adjacent pairs (x[2i], x[2i+1]) as
 * llama does; TSL_ROPE_NEOX rotates (x[i], x[i + n_dims/2]) as qwen and
 * GPT-NeoX do. Dimensions past n_dims are copied through. */
#define TSL_ROPE_NORMAL 0
#define TSL_ROPE_NEOX 2
typedef struct tsl_rope_params {
    int n_dims;        /* rotated dims (even, <= ne0) */
    int mode;          /* TSL_ROPE_NORMAL or TSL_ROPE_NEOX */
    int n_ctx_orig;    /* original training context (YaRN), 0 if unused */
    float freq_base;   /* theta base, e.g. 10000 or 1e6 */
    float freq_scale;  /* 1 / linear scaling factor; 1 for none */
    float ext_factor;  /* YaRN extrapolation mix; 0 disables YaRN */
    float attn_factor; /* magnitude scale; 1 normally */
    float beta_fast;   /* YaRN ramp; 32 typical */
    float beta_slow;   /* YaRN ramp; 1 typical */
} tsl_rope_params;
/* Default parameters: NORMAL mode, base 10000, no scaling. */
tsl_rope_params tsl_rope_default(int n_dims);
/* a [head_dim, n_head, n_tokens, 1] F32, pos I32 [n_tokens]; freq_factors
 * (may be NULL) F32 [n_dims/2] divides each frequency (llama3 rope scaling).
 * theta_i = pos * freq_scale * base^(-2i/n_dims) / ff[i], with YaRN
 * correction when ext_factor != 0 (same formula as ggml's rope_yarn). */
tsl_tensor *tsl_rope(tsl_context *ctx, tsl_tensor *a, tsl_tensor *pos, tsl_tensor *freq_factors,
                     const tsl_rope_params *p);

/* softmax(a * scale + mask) along rows. mask may be NULL; else F32 or F16
 * [ne0, >= ne1, m2, m3] with a->ne[2] % m2 == 0, a->ne[3] % m3 == 0 (row
 * (i1, i2, i3) of a uses mask row (i1, i2 % m2, i3 % m3)). -INFINITY in the mask excludes an element; a row
 * that excludes everything gives zeros. */
tsl_tensor *tsl_soft_max(tsl_context *ctx, tsl_tensor *a, tsl_tensor *mask, float scale);
tsl_tensor *tsl_silu(tsl_context *ctx, tsl_tensor *a);
/* GELU, tanh approximation (as ggml and GPT-2). */
tsl_tensor *tsl_gelu(tsl_context *ctx, tsl_tensor *a);
/* silu(gate) * up, same shapes. */
tsl_tensor *tsl_swiglu(tsl_context *ctx, tsl_tensor *gate, tsl_tensor *up);
/* Join a and b along dim (0..3); other dims equal; same type (F32/F16/I32). */
tsl_tensor *tsl_concat(tsl_context *ctx, tsl_tensor *a, tsl_tensor *b, int dim);
/* Mean over rows of -sum(labels * log_softmax(logits)): a [1] tensor.
 * logits and labels F32 of the same shape (labels are probabilities). */
tsl_tensor *tsl_cross_entropy_loss(tsl_context *ctx, tsl_tensor *logits, tsl_tensor *labels);

/* ------------------------------------------------------------------------ */
/* Graphs                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct tsl_graph {
    int n_nodes;         /* tensors to compute, in a valid execution order */
    int n_leafs;         /* tensors the graph reads but does not compute (op NONE) */
    tsl_tensor **nodes;  /* includes metadata-only ops (views), which run no kernel */
    tsl_tensor **leafs;
    int capacity;
    struct tsl_context *ctx;
    /* 0, or a promise by the caller: a later compute of a graph with the same
     * stamp, the same nodes array and node count is of the same graph,
     * unchanged (every node and every tensor it reads: metadata, placement,
     * buffers), so a backend may submit again what it recorded for it
     * without looking. The scheduler stamps the split graphs of a kept plan;
     * graphs that tsl_graph_build makes have 0. */
    uint64_t stamp;
} tsl_graph;

/* Build the graph of everything the outputs need, in topological order, each
 * tensor once. The outputs are flagged TSL_FLAG_OUTPUT. Returns NULL and sets
 * the ctx error when an output is NULL, n is not positive, or the arena is
 * full. The graph lives in ctx's arena. */
tsl_graph *tsl_graph_build(tsl_context *ctx, tsl_tensor **outputs, int n);
/* Add more outputs to an existing graph (their dependencies too). */
bool tsl_graph_expand(tsl_graph *g, tsl_tensor *output);
/* Index of t among g's nodes, or -1. */
int tsl_graph_node_index(const tsl_graph *g, const tsl_tensor *t);
/* Total FLOPs of the graph's compute nodes (for benchmarks). */
double tsl_graph_flops(const tsl_graph *g);

/* ------------------------------------------------------------------------ */
/* Logging                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum tsl_log_level { TSL_LOG_DEBUG = 0, TSL_LOG_INFO, TSL_LOG_WARN, TSL_LOG_ERROR } tsl_log_level;
typedef void (*tsl_log_fn)(tsl_log_level level, const char *line, void *user);
/* Route library log lines (no trailing newline) to fn, which receives every
 * level (filter there); NULL restores the default: stderr, WARN and above,
 * TSL_LOG=debug|info|warn|error|off overrides the threshold. */
void tsl_log_set(tsl_log_fn fn, void *user);
void tsl_log(tsl_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif /* TENSILE_H */
