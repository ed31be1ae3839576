/*
 * context.c - contexts (one arena each), tensor creation and the plain
 * metadata helpers every layer uses (sizes, contiguity, shapes, host access).
 *
 * A context is one calloc'd block carved front to back by a bump pointer.
 * Tensor structs, their data (unless no_alloc) and graph arrays all live in
 * it and die with it; nothing is freed one by one. The trade-off is ggml's:
 * building a graph costs no malloc per tensor and teardown is one free, at
 * the price of having to size the arena up front. When it runs out we say
 * exactly how much was needed and how much was there, because "arena full"
 * alone sends people guessing.
 *
 * calloc rather than malloc: large blocks come from mmap as zero pages, so
 * tensors start at zero for free and results do not depend on leftovers.
 *
 * Each tensor is preceded by nothing and followed by a link pointer (the
 * tensor is the first member of ctx_object), so a tensor pointer is also its
 * list node and iteration in creation order needs no side table.
 *
 * Errors: the first graph-build error is kept as one sentence in the
 * context; later ones are dropped, since they are usually consequences of
 * the first (an op given the NULL that a failed op returned).
 */
#include <math.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/core.h"

#define CTX_ERROR_LEN 512
#define CTX_DATA_ALIGN 64

typedef struct ctx_object {
    tsl_tensor tensor; /* first: a tensor pointer is its object pointer */
    struct ctx_object *next;
} ctx_object;

struct tsl_context {
    char *mem;
    size_t size;
    size_t used;
    bool no_alloc;
    bool has_error;
    ctx_object *first, *last;
    char error[CTX_ERROR_LEN];
};

/* ---- context ------------------------------------------------------------- */

tsl_context *tsl_ctx_new(tsl_ctx_params params) {
    tsl_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return NULL;
    ctx->mem = calloc(1, params.mem_size ? params.mem_size : 1);
    if (!ctx->mem) {
        free(ctx);
        return NULL;
    }
    ctx->size = params.mem_size;
    ctx->no_alloc = params.no_alloc;
    return ctx;
}

void tsl_ctx_free(tsl_context *ctx) {
    if (!ctx) return;
    free(ctx->mem);
    free(ctx);
}

const char *tsl_ctx_error(const tsl_context *ctx) { return ctx && ctx->has_error ? ctx->error : NULL; }

void tsl_ctx_clear_error(tsl_context *ctx) {
    if (!ctx) return;
    ctx->has_error = false;
    ctx->error[0] = '\0';
}

static void ctx_vfail(tsl_context *ctx, const char *fmt, va_list ap) {
    if (!ctx || ctx->has_error) return;
    vsnprintf(ctx->error, sizeof ctx->error, fmt, ap);
    ctx->has_error = true;
    TSL_LOGD("%s", ctx->error);
}

tsl_tensor *tsl_ctx_fail(tsl_context *ctx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ctx_vfail(ctx, fmt, ap);
    va_end(ap);
    return NULL;
}

size_t tsl_ctx_used(const tsl_context *ctx) { return ctx ? ctx->used : 0; }
size_t tsl_ctx_size(const tsl_context *ctx) { return ctx ? ctx->size : 0; }
bool tsl_ctx_no_alloc(const tsl_context *ctx) { return ctx ? ctx->no_alloc : false; }

tsl_tensor *tsl_ctx_first_tensor(const tsl_context *ctx) {
    return ctx && ctx->first ? &ctx->first->tensor : NULL;
}

tsl_tensor *tsl_ctx_next_tensor(const tsl_context *ctx, const tsl_tensor *t) {
    if (!ctx || !t || t->ctx != ctx) return NULL;
    const ctx_object *o = (const ctx_object *)t;
    return o->next ? &o->next->tensor : NULL;
}

tsl_tensor *tsl_ctx_get_tensor(const tsl_context *ctx, const char *name) {
    if (!ctx || !name) return NULL;
    for (ctx_object *o = ctx->first; o; o = o->next)
        if (strcmp(o->tensor.name, name) == 0) return &o->tensor;
    return NULL;
}

/* ---- arena ----------------------------------------------------------------- */

/* Offset of the first address >= mem + off that is aligned to align, or
 * SIZE_MAX on overflow. Alignment is of the real address, so the arena
 * block itself needs no special alignment. */
static size_t arena_align(const tsl_context *ctx, size_t off, size_t align) {
    uintptr_t p = (uintptr_t)ctx->mem + off;
    size_t pad = (size_t)((align - (p & (align - 1))) & (align - 1));
    return off > SIZE_MAX - pad ? SIZE_MAX : off + pad;
}

static void *arena_fail(tsl_context *ctx, const char *who, size_t need) {
    tsl_ctx_fail(ctx, "%s%sarena full: need %zu bytes, %zu of %zu used; create the context with a larger mem_size",
                 who ? who : "", who ? ": " : "", need, ctx->used, ctx->size);
    return NULL;
}

static void *arena_alloc(tsl_context *ctx, const char *who, size_t size, size_t align) {
    if (align == 0) align = 16;
    if (align & (align - 1)) {
        tsl_ctx_fail(ctx, "%s%sarena alignment %zu is not a power of two", who ? who : "", who ? ": " : "", align);
        return NULL;
    }
    size_t off = arena_align(ctx, ctx->used, align);
    if (off == SIZE_MAX || size > ctx->size || off > ctx->size - size) return arena_fail(ctx, who, size);
    ctx->used = off + size;
    return ctx->mem + off;
}

void *ctx_arena_alloc(tsl_context *ctx, size_t size, size_t align) {
    if (!ctx) return NULL;
    return arena_alloc(ctx, NULL, size, align);
}

/* ---- tensors --------------------------------------------------------------- */

/* Checked size arithmetic: false on overflow. */
static bool mul_ok(size_t a, size_t b, size_t *r) {
    if (a != 0 && b > SIZE_MAX / a) return false;
    *r = a * b;
    return true;
}

/* Contiguous strides for ne, and the total byte size; false on overflow. */
static bool ctx_contig_strides(tsl_type type, const int64_t ne[4], size_t nb[4], size_t *total) {
    size_t ts = tsl_type_block_size(type);
    int64_t bl = tsl_type_block_len(type);
    nb[0] = ts;
    if (!mul_ok(ts, (size_t)(ne[0] / bl), &nb[1])) return false;
    for (int i = 2; i < 4; i++)
        if (!mul_ok(nb[i - 1], (size_t)ne[i - 1], &nb[i])) return false;
    return mul_ok(nb[3], (size_t)ne[3], total);
}

/* Bytes spanned by ne/nb of a tensor of this type (ggml's rule: the last
 * element's offset plus one element or block); SIZE_MAX on overflow. */
static size_t ctx_span(tsl_type type, const int64_t ne[4], const size_t nb[4]) {
    for (int i = 0; i < 4; i++)
        if (ne[i] <= 0) return 0;
    int64_t bl = tsl_type_block_len(type);
    size_t n;
    if (bl <= 0) return 0; /* unknown type: spans nothing we can name */
    if (bl == 1) {
        n = tsl_type_block_size(type);
    } else {
        if (!mul_ok((size_t)(ne[0] / bl), nb[0], &n)) return SIZE_MAX;
    }
    for (int i = bl == 1 ? 0 : 1; i < 4; i++) {
        size_t step;
        if (!mul_ok((size_t)(ne[i] - 1), nb[i], &step) || n > SIZE_MAX - step) return SIZE_MAX;
        n += step;
    }
    return n;
}

/* The one place tensors are made. who prefixes error messages (an op name,
 * or NULL for plain creation); nb NULL means contiguous; with_data asks for
 * arena data unless the context is no_alloc. Shape validity is the caller's
 * job except for overflow, which is checked here because only here are the
 * byte sizes computed. */
tsl_tensor *ctx_tensor_new(tsl_context *ctx, const char *who, tsl_type type, const int64_t ne[4],
                           const size_t nb[4], bool with_data) {
    if (!ctx) return NULL;
    size_t cnb[4], total;
    const char *w = who ? who : "new_tensor";
    if (!tsl_type_valid((int)type)) return tsl_ctx_fail(ctx, "%s: type %d is not a known type", w, (int)type);
    /* bytes past INT64_MAX/2 would let element counts (up to ~1.8 per byte
     * for Q4_0) overflow int64 in tsl_nelements */
    if (!ctx_contig_strides(type, ne, cnb, &total) || total > (size_t)(INT64_MAX / 2)) {
        return tsl_ctx_fail(ctx, "%s: [%lld, %lld, %lld, %lld] %s is too large: its byte size overflows", w,
                            (long long)ne[0], (long long)ne[1], (long long)ne[2], (long long)ne[3],
                            tsl_type_name(type));
    }
    bool alloc = with_data && !ctx->no_alloc;
    size_t obj = arena_align(ctx, ctx->used, alignof(ctx_object));
    size_t end = obj == SIZE_MAX || obj > SIZE_MAX - sizeof(ctx_object) ? SIZE_MAX : obj + sizeof(ctx_object);
    size_t data_off = 0;
    if (alloc && end != SIZE_MAX) {
        data_off = arena_align(ctx, end, CTX_DATA_ALIGN);
        end = data_off == SIZE_MAX || data_off > SIZE_MAX - total ? SIZE_MAX : data_off + total;
    }
    if (end == SIZE_MAX || end > ctx->size) {
        size_t need = sizeof(ctx_object) + (alloc ? total : 0);
        if (alloc && need < total) need = SIZE_MAX;
        return arena_fail(ctx, who, need);
    }
    ctx_object *o = (ctx_object *)(ctx->mem + obj);
    ctx->used = end;
    memset(o, 0, sizeof *o);
    tsl_tensor *t = &o->tensor;
    t->type = type;
    for (int i = 0; i < 4; i++) {
        t->ne[i] = ne[i];
        t->nb[i] = nb ? nb[i] : cnb[i];
    }
    t->op = TSL_OP_NONE;
    t->ctx = ctx;
    if (alloc) t->data = ctx->mem + data_off;
    if (ctx->last)
        ctx->last->next = o;
    else
        ctx->first = o;
    ctx->last = o;
    return t;
}

tsl_tensor *ctx_new_tensor_meta(tsl_context *ctx, tsl_type type, const int64_t ne[4], const size_t nb[4]) {
    return ctx_tensor_new(ctx, NULL, type, ne, nb, false);
}

tsl_tensor *tsl_new_tensor(tsl_context *ctx, tsl_type type, int n_dims, const int64_t *ne) {
    if (!ctx) return NULL;
    if (!tsl_type_valid((int)type)) return tsl_ctx_fail(ctx, "new_tensor: type %d is not a known type", (int)type);
    if (n_dims < 1 || n_dims > TSL_MAX_DIMS)
        return tsl_ctx_fail(ctx, "new_tensor: n_dims %d is not in 1..4", n_dims);
    if (!ne) return tsl_ctx_fail(ctx, "new_tensor: ne is NULL");
    int64_t full[4] = {1, 1, 1, 1};
    for (int i = 0; i < n_dims; i++) {
        if (ne[i] < 0)
            return tsl_ctx_fail(ctx, "new_tensor: ne[%d] is %lld; dimensions must be >= 0", i, (long long)ne[i]);
        full[i] = ne[i];
    }
    int64_t bl = tsl_type_block_len(type);
    if (full[0] % bl != 0)
        return tsl_ctx_fail(ctx, "new_tensor: ne[0] %lld of a %s tensor is not a multiple of its block length %lld",
                            (long long)full[0], tsl_type_name(type), (long long)bl);
    return ctx_tensor_new(ctx, NULL, type, full, NULL, true);
}

tsl_tensor *tsl_new_tensor_1d(tsl_context *ctx, tsl_type type, int64_t ne0) {
    int64_t ne[1] = {ne0};
    return tsl_new_tensor(ctx, type, 1, ne);
}
tsl_tensor *tsl_new_tensor_2d(tsl_context *ctx, tsl_type type, int64_t ne0, int64_t ne1) {
    int64_t ne[2] = {ne0, ne1};
    return tsl_new_tensor(ctx, type, 2, ne);
}
tsl_tensor *tsl_new_tensor_3d(tsl_context *ctx, tsl_type type, int64_t ne0, int64_t ne1, int64_t ne2) {
    int64_t ne[3] = {ne0, ne1, ne2};
    return tsl_new_tensor(ctx, type, 3, ne);
}
tsl_tensor *tsl_new_tensor_4d(tsl_context *ctx, tsl_type type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    int64_t ne[4] = {ne0, ne1, ne2, ne3};
    return tsl_new_tensor(ctx, type, 4, ne);
}

tsl_tensor *tsl_dup_tensor(tsl_context *ctx, const tsl_tensor *a) {
    if (!ctx || !a) return NULL;
    return tsl_new_tensor(ctx, a->type, 4, a->ne);
}

tsl_tensor *tsl_tensor_set_name(tsl_tensor *t, const char *name) {
    if (!t) return NULL;
    snprintf(t->name, sizeof t->name, "%s", name ? name : "");
    return t;
}

tsl_tensor *tsl_tensor_format_name(tsl_tensor *t, const char *fmt, ...) {
    if (!t) return NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    return t;
}

/* ---- metadata helpers -------------------------------------------------- */

int64_t tsl_nelements(const tsl_tensor *t) { return t ? t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3] : 0; }
int64_t tsl_nrows(const tsl_tensor *t) { return t ? t->ne[1] * t->ne[2] * t->ne[3] : 0; }

size_t tsl_nbytes(const tsl_tensor *t) {
    if (!t) return 0;
    size_t n = ctx_span(t->type, t->ne, t->nb);
    return n == SIZE_MAX ? 0 : n;
}

int tsl_n_dims(const tsl_tensor *t) {
    if (!t) return 0;
    for (int i = TSL_MAX_DIMS - 1; i >= 1; i--)
        if (t->ne[i] != 1) return i + 1;
    return 1;
}

/* Strides of dimensions of extent 1 are never multiplied by a non-zero
 * index, so they are not checked: a view that drops a dimension to 1 stays
 * contiguous, as in ggml. */
bool tsl_is_contiguous(const tsl_tensor *t) {
    if (!t) return false;
    size_t ts = tsl_type_block_size(t->type);
    int64_t bl = tsl_type_block_len(t->type);
    if (ts == 0 || t->nb[0] != ts) return false;
    size_t next = ts * (size_t)(t->ne[0] / bl);
    for (int i = 1; i < TSL_MAX_DIMS; i++) {
        if (t->ne[i] == 1) continue;
        if (t->nb[i] != next) return false;
        next *= (size_t)t->ne[i];
    }
    return true;
}

bool tsl_rows_contiguous(const tsl_tensor *t) {
    return t && tsl_type_block_size(t->type) != 0 && t->nb[0] == tsl_type_block_size(t->type);
}

bool tsl_same_shape(const tsl_tensor *a, const tsl_tensor *b) {
    if (!a || !b) return false;
    for (int i = 0; i < TSL_MAX_DIMS; i++)
        if (a->ne[i] != b->ne[i]) return false;
    return true;
}

bool tsl_can_repeat(const tsl_tensor *b, const tsl_tensor *a) {
    if (!a || !b) return false;
    for (int i = 0; i < TSL_MAX_DIMS; i++) {
        if (b->ne[i] == 0) {
            if (a->ne[i] != 0) return false;
        } else if (a->ne[i] % b->ne[i] != 0) {
            return false;
        }
    }
    return true;
}

const char *core_shape_str(const tsl_tensor *t, char *buf, size_t n) {
    if (!buf || n == 0) return "";
    if (!t) {
        snprintf(buf, n, "(null)");
        return buf;
    }
    snprintf(buf, n, "[%lld, %lld, %lld, %lld] %s", (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
             (long long)t->ne[3], tsl_type_name(t->type));
    return buf;
}

const char *tsl_shape_str(const tsl_tensor *t, char *buf, size_t n) { return core_shape_str(t, buf, n); }

/* ---- host element access ----------------------------------------------- */

/* Address of element (i0..i3), or NULL when the tensor has no host data,
 * the index is out of range, or the type is not one we convert. */
static void *ctx_elem(const tsl_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    if (!t || !t->data) return NULL;
    if (t->type != TSL_TYPE_F32 && t->type != TSL_TYPE_F16 && t->type != TSL_TYPE_BF16 && t->type != TSL_TYPE_I32)
        return NULL;
    int64_t ix[4] = {i0, i1, i2, i3};
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        if (ix[i] < 0 || ix[i] >= t->ne[i]) return NULL;
        off += (size_t)ix[i] * t->nb[i];
    }
    return (char *)t->data + off;
}

static void ctx_unravel(const tsl_tensor *t, int64_t i, int64_t ix[4]) {
    int64_t n0 = t->ne[0] > 0 ? t->ne[0] : 1, n1 = t->ne[1] > 0 ? t->ne[1] : 1, n2 = t->ne[2] > 0 ? t->ne[2] : 1;
    ix[0] = i % n0;
    i /= n0;
    ix[1] = i % n1;
    i /= n1;
    ix[2] = i % n2;
    ix[3] = i / n2;
}

float tsl_get_f32_nd(const tsl_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const void *p = ctx_elem(t, i0, i1, i2, i3);
    if (!p) return NAN;
    switch (t->type) {
    case TSL_TYPE_F32:
    case TSL_TYPE_F16:
    case TSL_TYPE_BF16: return core_load_f32(t->type, p);
    case TSL_TYPE_I32: {
        int32_t v;
        memcpy(&v, p, sizeof v);
        return (float)v;
    }
    default: return NAN;
    }
}

void tsl_set_f32_nd(tsl_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3, float v) {
    void *p = ctx_elem(t, i0, i1, i2, i3);
    if (!p) return;
    switch (t->type) {
    case TSL_TYPE_F32:
    case TSL_TYPE_F16:
    case TSL_TYPE_BF16: core_store_f32(t->type, p, v); break;
    case TSL_TYPE_I32: {
        /* out-of-range or NaN values would be undefined behaviour to convert */
        int32_t x = isnan(v) ? 0 : v >= 2147483647.0f ? INT32_MAX : v <= -2147483648.0f ? INT32_MIN : (int32_t)v;
        memcpy(p, &x, sizeof x);
        break;
    }
    default: break;
    }
}

float tsl_get_f32_1d(const tsl_tensor *t, int64_t i) {
    if (!t || i < 0 || i >= tsl_nelements(t)) return NAN;
    int64_t ix[4];
    ctx_unravel(t, i, ix);
    return tsl_get_f32_nd(t, ix[0], ix[1], ix[2], ix[3]);
}

void tsl_set_f32_1d(tsl_tensor *t, int64_t i, float v) {
    if (!t || i < 0 || i >= tsl_nelements(t)) return;
    int64_t ix[4];
    ctx_unravel(t, i, ix);
    tsl_set_f32_nd(t, ix[0], ix[1], ix[2], ix[3], v);
}
