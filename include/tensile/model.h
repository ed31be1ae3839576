/*
 * model.h - models: GGUF files (read and write), and llama-family LLM
 * inference on them (the LLM section at the end).
 *
 * The GGUF section below reads and writes GGUF v3 files (v2 is read too: it
 * has the same layout for little-endian files). The reader memory-maps the
 * file, validates every byte of the header before it returns, and hands out
 * tensor data as pointers into the mapping (zero-copy). The writer builds a
 * file from key/value pairs and tensors and writes it atomically.
 *
 * Failure behaviour: nothing here aborts on a bad file or bad arguments.
 * Calls that can fail return NULL or a tsl_status and, when given a
 * tsl_error, fill it with a message naming the field and its byte offset,
 * for example
 *   gguf 'x.gguf': tensor 3 ('blk.0.attn_q.weight') data [offset 4096,
 *   8192 bytes] runs past the end of the file (10000 bytes) at header
 *   offset 612
 * Status is TSL_FAILED for a bad file or argument, TSL_ALLOC_FAILED when
 * memory could not be had.
 *
 * Threads: an open tsl_gguf is immutable, so any number of threads may read
 * it at once. A writer is used by one thread at a time.
 *
 * Byte order: files are little-endian; big-endian GGUF files are refused.
 * Array data and tensor data are handed out as stored, i.e. in the host's
 * order on little-endian hosts (every host tensile builds for).
 */
#ifndef TENSILE_MODEL_H
#define TENSILE_MODEL_H

#include "backend.h"
#include "tensile.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* GGUF                                                                      */
/* ======================================================================== */

/* Value types of GGUF key/value pairs; the values are the file's ids. */
typedef enum tsl_gguf_type {
    TSL_GGUF_NONE = -1, /* returned for "no such key / index" */
    TSL_GGUF_U8 = 0,
    TSL_GGUF_I8 = 1,
    TSL_GGUF_U16 = 2,
    TSL_GGUF_I16 = 3,
    TSL_GGUF_U32 = 4,
    TSL_GGUF_I32 = 5,
    TSL_GGUF_F32 = 6,
    TSL_GGUF_BOOL = 7,   /* one byte, 0 or 1 (other values are rejected) */
    TSL_GGUF_STRING = 8, /* u64 length + bytes, no NUL in the file */
    TSL_GGUF_ARRAY = 9,  /* u32 element type + u64 count + elements */
    TSL_GGUF_U64 = 10,
    TSL_GGUF_I64 = 11,
    TSL_GGUF_F64 = 12,
    TSL_GGUF_TYPE_COUNT = 13,
} tsl_gguf_type;

/* Deepest array nesting the reader accepts (an array of arrays is depth 2). */
#define TSL_GGUF_MAX_DEPTH 16
/* Alignment of the data section and of every tensor when the file has no
 * general.alignment key. */
#define TSL_GGUF_DEFAULT_ALIGNMENT 32

/* "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64",
 * "i64", "f64"; "?" for anything else. */
const char *tsl_gguf_type_name(tsl_gguf_type t);

/* ---- reading ------------------------------------------------------------ */

typedef struct tsl_gguf tsl_gguf;

/* One tensor of the file. Owned by the tsl_gguf; valid until it is closed. */
typedef struct tsl_gguf_tensor_info {
    const char *name;          /* NUL-terminated */
    tsl_type type;
    int n_dims;                /* 1..4, as stored in the file */
    int64_t ne[TSL_MAX_DIMS];  /* elements per dimension, ne[0] innermost; 1 past n_dims */
    uint64_t offset;           /* byte offset within the data section */
    size_t size;               /* bytes of data */
    const void *data;          /* the data, inside the mapping (read-only memory) */
} tsl_gguf_tensor_info;

/* Map the file at path read-only and validate all of it: magic, version,
 * counts (bounded by the file size before anything is allocated), every key
 * and value (types, lengths, array nesting up to TSL_GGUF_MAX_DEPTH, bools
 * that are 0 or 1), general.alignment (a u32 power of two), and every tensor
 * info (name, n_dims 1..4, a shape whose size does not overflow - a
 * dimension may be 0, as in ggml -, a type tensile knows, an aligned offset,
 * data inside the file, no overlap with another tensor). Duplicate keys and
 * duplicate tensor names are refused. Returns NULL with err filled on any
 * problem: one message naming the field and its byte offset. The file must
 * not be truncated by someone else while it is open (the mapping would fault). */
tsl_gguf *tsl_gguf_open(const char *path, tsl_error *err);
/* The same over bytes the caller owns (which must outlive the handle and not
 * change). name appears in messages (NULL: "<memory>"). Tensor data pointers
 * are aligned to the file's alignment only if data is. */
tsl_gguf *tsl_gguf_open_memory(const void *data, size_t size, const char *name, tsl_error *err);
/* Unmap and free. Tensor data pointers (and tensors loaded zero-copy by
 * tsl_gguf_load_tensors) die with it. NULL is a no-op. */
void tsl_gguf_close(tsl_gguf *g);

uint32_t tsl_gguf_version(const tsl_gguf *g);
/* Data alignment in bytes (general.alignment or 32). */
size_t tsl_gguf_alignment(const tsl_gguf *g);
/* File offset of the data section (tensor offsets are relative to it). */
size_t tsl_gguf_data_offset(const tsl_gguf *g);
/* File size in bytes. */
size_t tsl_gguf_file_size(const tsl_gguf *g);

/* ---- key/value pairs ---- */

int64_t tsl_gguf_kv_count(const tsl_gguf *g);
/* Key of pair i (NUL-terminated; keys never contain NUL), or NULL if i is out
 * of range. */
const char *tsl_gguf_key(const tsl_gguf *g, int64_t i);
/* Index of key, or -1. */
int64_t tsl_gguf_find_key(const tsl_gguf *g, const char *key);
/* Type of pair i's value, or TSL_GGUF_NONE if i is out of range. */
tsl_gguf_type tsl_gguf_kv_type(const tsl_gguf *g, int64_t i);

/* Getters by key. On success they store the value in *out and return
 * TSL_SUCCESS. When the key is missing or its value has another type they
 * leave *out untouched and return TSL_FAILED with err (if given) naming the
 * key, the type found and the type asked for; so a caller can pre-set a
 * default and pass err = NULL for optional keys. */
tsl_status tsl_gguf_get_u8(const tsl_gguf *g, const char *key, uint8_t *out, tsl_error *err);
tsl_status tsl_gguf_get_i8(const tsl_gguf *g, const char *key, int8_t *out, tsl_error *err);
tsl_status tsl_gguf_get_u16(const tsl_gguf *g, const char *key, uint16_t *out, tsl_error *err);
tsl_status tsl_gguf_get_i16(const tsl_gguf *g, const char *key, int16_t *out, tsl_error *err);
tsl_status tsl_gguf_get_u32(const tsl_gguf *g, const char *key, uint32_t *out, tsl_error *err);
tsl_status tsl_gguf_get_i32(const tsl_gguf *g, const char *key, int32_t *out, tsl_error *err);
tsl_status tsl_gguf_get_u64(const tsl_gguf *g, const char *key, uint64_t *out, tsl_error *err);
tsl_status tsl_gguf_get_i64(const tsl_gguf *g, const char *key, int64_t *out, tsl_error *err);
tsl_status tsl_gguf_get_f32(const tsl_gguf *g, const char *key, float *out, tsl_error *err);
tsl_status tsl_gguf_get_f64(const tsl_gguf *g, const char *key, double *out, tsl_error *err);
tsl_status tsl_gguf_get_bool(const tsl_gguf *g, const char *key, bool *out, tsl_error *err);
/* A string value: *out is NUL-terminated and owned by g; *len (if len is not
 * NULL) is its length in bytes (a string may hold NUL bytes). */
tsl_status tsl_gguf_get_str(const tsl_gguf *g, const char *key, const char **out, size_t *len, tsl_error *err);
/* Lenient numeric getters for model hyper-parameters that converters write
 * with varying widths: any integer type (or bool) whose value fits int64, and
 * any integer or float type as a double. */
tsl_status tsl_gguf_get_int(const tsl_gguf *g, const char *key, int64_t *out, tsl_error *err);
tsl_status tsl_gguf_get_float(const tsl_gguf *g, const char *key, double *out, tsl_error *err);

/* An array value: its element type, element count, and its encoded elements
 * (a pointer into the file: for fixed-size element types the n values packed
 * little-endian, possibly unaligned - copy them with memcpy; for strings and
 * nested arrays their GGUF encoding) and their byte size. Any out pointer may
 * be NULL. Fails (as the scalar getters) when key is missing or not an array. */
tsl_status tsl_gguf_get_arr(const tsl_gguf *g, const char *key, tsl_gguf_type *elem_type, uint64_t *n,
                            const void **data, size_t *nbytes, tsl_error *err);
/* Element i of an array of integers (or bools) whose value fits int64. */
tsl_status tsl_gguf_get_arr_int(const tsl_gguf *g, const char *key, uint64_t i, int64_t *out, tsl_error *err);
/* Element i of an array of integers or floats, as a double. */
tsl_status tsl_gguf_get_arr_float(const tsl_gguf *g, const char *key, uint64_t i, double *out, tsl_error *err);
/* Element i of an array of strings: NUL-terminated, owned by g; len may be NULL. */
tsl_status tsl_gguf_get_arr_str(const tsl_gguf *g, const char *key, uint64_t i, const char **out, size_t *len,
                                tsl_error *err);

/* ---- tensors ---- */

int64_t tsl_gguf_tensor_count(const tsl_gguf *g);
/* Tensor i, or NULL if i is out of range. */
const tsl_gguf_tensor_info *tsl_gguf_tensor(const tsl_gguf *g, int64_t i);
/* Index of the tensor with this name, or -1. */
int64_t tsl_gguf_find_tensor(const tsl_gguf *g, const char *name);
/* Sum of the data sizes of all tensors (what a context with data needs for
 * them, before per-tensor alignment). */
size_t tsl_gguf_data_size(const tsl_gguf *g);

/* Create one tensor in ctx per tensor of the file, in file order, named as
 * in the file. In a no_alloc context each tensor's data points straight into
 * the mapping (zero-copy; the memory is read-only and lives until
 * tsl_gguf_close); otherwise the data is copied into the context's arena.
 * Returns FAILED with err filled when a name does not fit TSL_MAX_NAME - 1
 * bytes (nothing is created then) or the context's arena runs out (tensors
 * made before that stay in ctx). */
tsl_status tsl_gguf_load_tensors(tsl_gguf *g, tsl_context *ctx, tsl_error *err);

/* ---- writing ------------------------------------------------------------ */

typedef struct tsl_gguf_writer tsl_gguf_writer;

/* A new, empty writer; NULL only if memory cannot be had. */
tsl_gguf_writer *tsl_gguf_writer_new(void);
/* Free the writer and its copies of keys and values (never tensor data). */
void tsl_gguf_writer_free(tsl_gguf_writer *w);

/* Setters. Keys are non-empty, NUL-terminated, at most 65535 bytes; setting a
 * key again replaces its value in place. Each returns TSL_SUCCESS, or FAILED /
 * ALLOC_FAILED; the first failure is also kept in the writer, later calls
 * still run, and tsl_gguf_writer_write refuses with that first failure, so a
 * caller may check once at the end. */
tsl_status tsl_gguf_writer_set_u8(tsl_gguf_writer *w, const char *key, uint8_t v);
tsl_status tsl_gguf_writer_set_i8(tsl_gguf_writer *w, const char *key, int8_t v);
tsl_status tsl_gguf_writer_set_u16(tsl_gguf_writer *w, const char *key, uint16_t v);
tsl_status tsl_gguf_writer_set_i16(tsl_gguf_writer *w, const char *key, int16_t v);
tsl_status tsl_gguf_writer_set_u32(tsl_gguf_writer *w, const char *key, uint32_t v);
tsl_status tsl_gguf_writer_set_i32(tsl_gguf_writer *w, const char *key, int32_t v);
tsl_status tsl_gguf_writer_set_u64(tsl_gguf_writer *w, const char *key, uint64_t v);
tsl_status tsl_gguf_writer_set_i64(tsl_gguf_writer *w, const char *key, int64_t v);
tsl_status tsl_gguf_writer_set_f32(tsl_gguf_writer *w, const char *key, float v);
tsl_status tsl_gguf_writer_set_f64(tsl_gguf_writer *w, const char *key, double v);
tsl_status tsl_gguf_writer_set_bool(tsl_gguf_writer *w, const char *key, bool v);
tsl_status tsl_gguf_writer_set_str(tsl_gguf_writer *w, const char *key, const char *s);
/* An array of n fixed-size elements (any type but STRING and ARRAY) packed in
 * host order; bools as bytes 0 or 1. The values are copied. n may be 0. */
tsl_status tsl_gguf_writer_set_arr(tsl_gguf_writer *w, const char *key, tsl_gguf_type elem_type, const void *data,
                                   uint64_t n);
/* An array of n NUL-terminated strings (copied). */
tsl_status tsl_gguf_writer_set_arr_str(tsl_gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
/* Copy the pair `key` of an open file verbatim (any type, nested arrays too). */
tsl_status tsl_gguf_writer_copy_kv(tsl_gguf_writer *w, const tsl_gguf *g, const char *key);
/* Data alignment (a power of two); written as general.alignment (u32).
 * Without it the file uses 32 and has no general.alignment key. */
tsl_status tsl_gguf_writer_set_alignment(tsl_gguf_writer *w, uint32_t alignment);

/* Add a tensor: name (non-empty, at most TSL_MAX_NAME - 1 bytes, unique),
 * type, 1..4 dimensions with ne[0] a multiple of the type's block length, and
 * its bytes (contiguous, tsl_row_size(type, ne[0]) * ne[1] * ne[2] * ne[3] of
 * them), which are read at write time: data must stay valid until then. */
tsl_status tsl_gguf_writer_add_tensor(tsl_gguf_writer *w, const char *name, tsl_type type, int n_dims,
                                      const int64_t *ne, const void *data);
/* Or let a callback produce the bytes at write time, in order, in chunks:
 * fill dst with bytes [offset, offset + n) of the tensor and return
 * TSL_SUCCESS; any other status aborts the write (err, if filled, is passed
 * on to the caller of tsl_gguf_writer_write). */
typedef tsl_status (*tsl_gguf_fill_fn)(void *user, void *dst, size_t offset, size_t n, tsl_error *err);
tsl_status tsl_gguf_writer_add_tensor_fn(tsl_gguf_writer *w, const char *name, tsl_type type, int n_dims,
                                         const int64_t *ne, tsl_gguf_fill_fn fn, void *user);

/* The first failure recorded by a setter or add call (SUCCESS if none);
 * fills err when given. */
tsl_status tsl_gguf_writer_status(const tsl_gguf_writer *w, tsl_error *err);

/* Write a GGUF v3 file: header, pairs in the order first set, tensor infos
 * and data in the order added, each tensor at an offset aligned to the
 * alignment and padded after. The bytes go to a temporary file next to path,
 * which is synced and then renamed over path: on any failure (an earlier
 * setter's, I/O, a callback's) nothing is left at path (an existing file
 * there is untouched) and no temporary file remains. The writer can be
 * written again. */
tsl_status tsl_gguf_writer_write(const tsl_gguf_writer *w, const char *path, tsl_error *err);

/* ======================================================================== */
/* LLM                                                                       */
/* ======================================================================== */
/*
 * Llama-family language models from GGUF files: loading (tsl_model), an
 * inference context with its KV cache (tsl_llm_ctx), the tokenizer, and a
 * sampler (tsl_sampler).
 *
 * Architectures: "llama" (Llama 1-3 and other files of that architecture),
 * "qwen2" (Qwen 1.5/2/2.5: q/k/v biases, NEOX rope) and "qwen3" (per-head
 * q/k RMS norms, head size from attention.key_length). Hyper-parameters
 * are read by the key names llama.cpp writes ("{arch}.embedding_length",
 * ...); tensors by its names ("blk.N.attn_q.weight", ...).
 *
 * Memory: on the CPU the weights stay in the file's read-only mapping
 * (zero-copy). A context on a GPU (a backend whose memory the host cannot
 * address: Vulkan) reads them from a copy in that device's memory, which
 * the model makes when the first context on the device is created
 * (uploading once, with a progress bar like loading's) and shares with
 * every later context on the same device, whichever backend object they
 * use; it lives until tsl_model_free. The copy is laid out as the file
 * where the file's tensor offsets allow (multiples of the device's buffer
 * alignment: `tensile gen-model` writes such files), so recovery after a
 * device loss restores it from the mapping by itself; otherwise the next
 * decode uploads it again. Either way no second host copy of the weights
 * is kept, and the pages of the mapping the upload read are released. A
 * context owns its KV cache (on its backend), a small buffer for the
 * graph inputs, and the activation memory the graph allocator sizes to the
 * largest graph seen; attention spans the positions in use rounded up to
 * 256, so that memory grows once per 256 tokens, never per token.
 *
 * Devices: a context on a GPU runs each graph through the scheduler
 * (backend.h) over its backend and a CPU backend of its own (n_threads
 * threads): an op or type the device lacks, or whose kernel failed to
 * build, runs on the CPU and the decode goes on (a kernel found broken by
 * a compute is moved and the graph planned again at once). Inputs go in
 * with one tsl_tensor_set per batch and the logits come back with one
 * tsl_tensor_get, whatever the backend.
 *
 * Failure behaviour follows the rest of the library: a call that can fail
 * returns NULL or a tsl_status and fills the caller's tsl_error (which may be
 * NULL). A bad file gives TSL_FAILED with a message naming the key or tensor
 * and what was expected and found; decode returns the compute's own status
 * and record (RETRY, ABORTED, FAILED, ALLOC_FAILED, DEVICE_LOST). Nothing
 * aborts.
 *
 * Threads: a loaded model is immutable and may be shared by contexts on any
 * number of threads; one context (and one sampler) is used by one thread at a
 * time.
 */

typedef struct tsl_model tsl_model;
typedef struct tsl_llm_ctx tsl_llm_ctx;
typedef struct tsl_sampler tsl_sampler;

typedef enum tsl_llm_arch {
    TSL_ARCH_LLAMA = 0,
    TSL_ARCH_QWEN2 = 1,
    TSL_ARCH_QWEN3 = 2,
} tsl_llm_arch;

/* "llama", "qwen2", "qwen3"; "?" otherwise. */
const char *tsl_llm_arch_name(tsl_llm_arch a);

typedef struct tsl_model_params {
    bool prefetch; /* read every weight page in before returning, so the first tokens do not pay
                      for page faults (default true) */
    bool progress; /* draw a progress bar on stderr while prefetching, and while the weights are
                      uploaded to a device, only when stderr is a terminal (default true; false
                      for --quiet) */
} tsl_model_params;

tsl_model_params tsl_model_default_params(void);

/* Load a model: open and validate the GGUF file (tsl_gguf_open), read
 * general.architecture and the hyper-parameters, find every tensor the
 * architecture needs and check its type and shape against them, and build
 * the tokenizer from the tokenizer.ggml.* keys. p may be NULL (defaults).
 * Returns NULL with err filled (TSL_FAILED, or TSL_ALLOC_FAILED) on any
 * problem; messages name the file and the part at fault, e.g.
 *   model 'm.gguf': tensor 'blk.3.attn_k.weight' has shape [896, 256], expected
 *   [896, 128] (n_embd, n_head_kv * head_dim)
 *   model 'm.gguf': architecture 'gpt2' is not supported (llama, qwen2, qwen3)
 * The model keeps the file mapped until tsl_model_free. */
tsl_model *tsl_model_load(const char *path, const tsl_model_params *p, tsl_error *err);
/* Free the model, its device copies of the weights, and unmap its file.
 * Every context made from it must be freed first (the backends they used
 * may be freed before or after). NULL is a no-op. */
void tsl_model_free(tsl_model *m);

/* What a loaded model is (all fields read-only, valid until tsl_model_free). */
typedef struct tsl_model_info {
    tsl_llm_arch arch;
    const char *arch_name;  /* "llama", ... */
    const char *name;       /* general.name, or the file name */
    int32_t n_vocab;
    int32_t n_ctx_train;    /* {arch}.context_length */
    int32_t n_embd, n_layer, n_ff;
    int32_t n_head, n_head_kv;
    int32_t head_dim;       /* key/query head size */
    int32_t head_dim_v;     /* value head size */
    int32_t n_rot;          /* rotated dimensions per head */
    float rms_eps;
    float rope_base;
    float rope_freq_scale; /* 1 / scaling factor; 1 when unscaled */
    const char *rope_scaling; /* "none", "linear", "yarn" */
    bool tied_output;       /* the output projection is token_embd */
    tsl_type weight_type;   /* the type holding most weight bytes */
    uint64_t n_params;      /* elements of all tensors */
    uint64_t weight_bytes;  /* bytes of all tensors */
    uint64_t decode_bytes;  /* bytes of weights one decoded token reads: every tensor except
                               token_embd, which only counts when it is also the output */
    uint64_t file_bytes;
} tsl_model_info;

const tsl_model_info *tsl_model_get_info(const tsl_model *m);

/* ---- tokenizer ----------------------------------------------------------- */

/* Text to ids with the model's vocabulary (see src/model/tokenizer.h):
 * add_special adds BOS/EOS as the vocabulary asks; parse_special turns
 * special tokens written in the text ("<|im_end|>") into their ids. Writes
 * at most cap ids and returns the number needed (> cap: call again with a
 * larger out); -1 on bad arguments. */
int32_t tsl_llm_tokenize(const tsl_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                         int32_t *out, int32_t cap);
/* Ids to text. Returns the full byte length (>= cap: out was too small; out is
 * NUL-terminated when there is room); -1 on an id out of range. */
int64_t tsl_llm_detokenize(const tsl_model *m, const int32_t *ids, size_t n, bool skip_special, char *out,
                           size_t cap);
/* The bytes one token adds to a streamed text (may end inside a UTF-8
 * character); control tokens give nothing. Same return convention. */
int64_t tsl_llm_token_piece(const tsl_model *m, int32_t id, char *out, size_t cap);
int32_t tsl_llm_token_bos(const tsl_model *m); /* -1 when none */
int32_t tsl_llm_token_eos(const tsl_model *m);
/* True for the tokens that end a generation: EOS, EOT, and the control tokens
 * chat templates end a turn with (<|im_end|>, <|eot_id|>, <|endoftext|>, ...). */
bool tsl_llm_token_is_eog(const tsl_model *m, int32_t id);

/* ---- inference contexts ---------------------------------------------------- */

typedef struct tsl_llm_params {
    int32_t n_ctx;        /* positions in the KV cache; 0: the model's context length, at most 4096 */
    int32_t n_batch;      /* tokens per graph; a longer decode is split; 0: 512 */
    tsl_backend *backend; /* borrowed, outlives the context; NULL: the context makes
                                    and owns a CPU backend with n_threads threads. A
                                    Vulkan backend puts the cache and activations in
                                    device memory and reads the model's device copy */
    int32_t n_threads;    /* for that CPU backend, or the CPU fallback of a GPU context;
                             <= 0: one per online core */
    tsl_type kv_type;     /* TSL_TYPE_F16 (default) or TSL_TYPE_F32 */
    bool logits_all;      /* keep the logits of every token of a decode call, not just the last */
    int32_t retry_attempts; /* attempts per compute for RETRY outcomes (tsl_graph_compute_retry,
                               default backoff); 1: no retry; 0: the default policy (3) */
    int32_t n_steps;      /* tsl_llm_generate_greedy: decode steps per graph, 1..TSL_LLM_MAX_STEPS; 0: 1 */
} tsl_llm_params;

/* The most decode steps one graph holds (tsl_llm_params.n_steps). */
#define TSL_LLM_MAX_STEPS 32

tsl_llm_params tsl_llm_default_params(void);

/* A context on model m: its KV cache (allocated on the backend, n_layer x
 * n_ctx x n_head_kv x (head_dim + head_dim_v) elements of kv_type, zeroed)
 * and its token history. On a GPU backend the first context on that device
 * also makes the model's device copy of the weights (see above); later
 * ones share it. Returns NULL with err filled when a parameter is out of
 * range, the backend cannot be made, the backend's memory is neither host
 * memory nor a Vulkan device's (FAILED), or the cache or the weights cannot
 * be allocated (TSL_ALLOC_FAILED, naming the size). */
tsl_llm_ctx *tsl_llm_ctx_new(tsl_model *m, const tsl_llm_params *p, tsl_error *err);
/* Free the context, its cache, and its backend if it made one. NULL is a no-op. */
void tsl_llm_ctx_free(tsl_llm_ctx *c);

/* Run n tokens through the model at the next n positions (after the ones
 * already decoded), in batches of n_batch, writing their keys and values to
 * the cache and keeping the logits (of the last token, or of every token with
 * logits_all). RETRY outcomes are retried by the context's policy
 * (retry_attempts). Returns TSL_SUCCESS or the first failure, with err filled:
 * FAILED for bad arguments (n < 1, a token id out of range, the cache full:
 * the message says how many positions are left) or a graph that cannot run;
 * otherwise the compute's own status. A failed call changes nothing the
 * caller can see: the cache positions of its tokens are not counted (the
 * position rolls back to where the call started), the history keeps only the
 * tokens decoded before it, and the previous logits are gone (tsl_llm_logits
 * gives NULL). After RETRY or ABORTED the same call can simply be made again.
 * After DEVICE_LOST the cache is known lost: recover the backend
 * (tsl_backend_recover on it or any backend of the same device), and the
 * next decode first uploads again any weights recovery could not restore
 * itself, then re-runs the token history (as tsl_llm_rebuild does), and the
 * result is the one a fault-free run gives. */
tsl_status tsl_llm_decode(tsl_llm_ctx *c, const int32_t *tokens, int32_t n, tsl_error *err);

/* tsl_llm_decode, then the greedy choice for the next token: *next = the id
 * of the last token's largest logit (the first of equal ones; NaN never
 * chosen), what tsl_sampler_sample gives with temp <= 0 and no repetition
 * penalty. The choice is made where the logits are (an ARGMAX node in the
 * graph), and on a GPU only its id comes back: no n_vocab floats to read
 * and scan a token. So the call keeps no logits (tsl_llm_logits gives
 * NULL after it), whatever logits_all says. FAILED, with *next = -1, when
 * next is NULL or no logit is above -inf (the sampler's -1); otherwise as
 * tsl_llm_decode (a device loss is rebuilt from the history the same way). */
tsl_status tsl_llm_decode_greedy(tsl_llm_ctx *c, const int32_t *tokens, int32_t n, int32_t *next, tsl_error *err);

/* Greedy generation of n tokens after `token`, several decode steps to a
 * graph: the same as n calls of tsl_llm_decode_greedy, the first on token,
 * each later one on the token the one before chose, out[i] the choice of
 * call i; bit for bit the same tokens, cache and history (each step runs
 * the kernels a single-token decode runs, over the same attention span).
 * One graph holds up to n_steps (tsl_llm_params) steps: step s + 1 embeds
 * step s's argmax on the device, so only the n_steps ids come back, and
 * the per-compute costs (inputs, scheduling, submission, the wait for the
 * GPU, the read) are paid once per n_steps tokens. n positions are used:
 * token and out[0..n-2] join the history, out[n-1] is not yet decoded (pass
 * it as the next call's token). A caller that stops at an end-of-generation
 * token out[i] drops what came after it with tsl_llm_truncate(c, n_past_before
 * + i + 1). FAILED, out[] all -1 and nothing changed, for bad arguments (out
 * NULL, n < 1, token outside the vocabulary, fewer than n positions left:
 * the message says how many) or no logit above -inf at some step; a
 * compute's failure is all-or-nothing as tsl_llm_decode's is (n_past and
 * the history back where the call started, out[] all -1; after
 * DEVICE_LOST the next call rebuilds the cache first). */
tsl_status tsl_llm_generate_greedy(tsl_llm_ctx *c, int32_t token, int32_t n, int32_t *out, tsl_error *err);

/* Logits (n_vocab floats) of token i of the last successful decode call: -1
 * (or the last index) is its last token; other indices need logits_all.
 * NULL when there are none for i. Valid until the next decode, truncate,
 * clear or rebuild. */
const float *tsl_llm_logits(const tsl_llm_ctx *c, int32_t i);
/* How many tokens' logits the last decode kept (0, 1, or n with logits_all). */
int32_t tsl_llm_n_logits(const tsl_llm_ctx *c);

int32_t tsl_llm_n_ctx(const tsl_llm_ctx *c);
/* Decode steps per graph of tsl_llm_generate_greedy (n_steps, its 0 resolved). */
int32_t tsl_llm_n_steps(const tsl_llm_ctx *c);
/* Positions in use: the number of tokens decoded so far. */
int32_t tsl_llm_n_past(const tsl_llm_ctx *c);
/* The tokens decoded so far, in order (tsl_llm_n_past of them). */
const int32_t *tsl_llm_history(const tsl_llm_ctx *c);
/* Forget everything from position n_keep on (0 <= n_keep <= n_past), e.g. to
 * reuse a common prompt prefix. Returns FAILED for n_keep out of range. */
tsl_status tsl_llm_truncate(tsl_llm_ctx *c, int32_t n_keep, tsl_error *err);
/* Forget every position (same as truncate to 0). */
void tsl_llm_clear(tsl_llm_ctx *c);
/* Re-run the whole token history into the cache: what a context does after
 * its cache was lost (device recovery; decode does it by itself after a
 * DEVICE_LOST). On success the logits are those of the last history token.
 * On failure n_past still counts the history and the rebuild is pending:
 * the next decode or rebuild tries again. */
tsl_status tsl_llm_rebuild(tsl_llm_ctx *c, tsl_error *err);
/* The backend the context computes on. */
tsl_backend *tsl_llm_backend(const tsl_llm_ctx *c);
const tsl_model *tsl_llm_model(const tsl_llm_ctx *c);

/* ---- sampling ------------------------------------------------------------------ */

/*
 * A sampler picks the next token from logits. The chain is llama.cpp's: the
 * repetition penalty over the last repeat_last_n accepted tokens, then top-k,
 * top-p and min-p (on the probabilities at temperature 1), then the
 * temperature, then a draw from what is left. temp <= 0 is greedy: the
 * largest logit after the penalty (first index on ties). A filter at its
 * neutral value does nothing: top_k <= 0, top_p >= 1, min_p <= 0,
 * repeat_penalty == 1. The draw uses the sampler's own PRNG (xoshiro256**
 * seeded from seed through splitmix64), so a seed gives the same tokens on
 * every run and machine for the same logits.
 */
typedef struct tsl_sampler_params {
    float temp;           /* default 0.8 */
    int32_t top_k;        /* default 40 */
    float top_p;          /* default 0.95 */
    float min_p;          /* default 0.05 */
    float repeat_penalty; /* default 1.0 (off); > 1 discourages repeats */
    int32_t repeat_last_n; /* window of accepted tokens the penalty looks at; default 64; 0: none */
    uint64_t seed;        /* default 0 */
} tsl_sampler_params;

tsl_sampler_params tsl_sampler_default_params(void);
/* Returns NULL with err filled (FAILED) for a parameter out of range (NaN,
 * top_p or min_p outside [0, 1], repeat_penalty <= 0, repeat_last_n < 0), or
 * ALLOC_FAILED. p NULL: defaults. */
tsl_sampler *tsl_sampler_new(const tsl_sampler_params *p, tsl_error *err);
void tsl_sampler_free(tsl_sampler *s);
/* Pick a token from n_vocab logits (not modified). Returns its id, or -1 when
 * no logit is finite or larger than -inf, or on bad arguments. Does not
 * record the token: call tsl_sampler_accept for it (and for prompt tokens,
 * so the penalty sees them). */
int32_t tsl_sampler_sample(tsl_sampler *s, const float *logits, int32_t n_vocab);
/* Record a token in the penalty window. */
void tsl_sampler_accept(tsl_sampler *s, int32_t token);
/* Empty the window and reseed the PRNG from the seed given at creation. */
void tsl_sampler_reset(tsl_sampler *s);

/* ======================================================================== */
/* (end of GGUF)                                                             */
/* ======================================================================== */

#ifdef __cplusplus
}
#endif
#endif /* TENSILE_MODEL_H */
