/*
 * gguf.c - GGUF files: a zero-copy reader that validates everything before
 * it hands anything out, and a writer that replaces files atomically.
 *
 * Reader. The parser works on a (pointer, size) pair; tsl_gguf_open only maps
 * the file (read-only, MAP_PRIVATE) and hands the mapping over, so the fuzz
 * target and the file path run the same code. Every read goes through one
 * bounds-checked cursor, and every length or count is compared with the bytes
 * that remain before it is used: a count that would need more bytes than the
 * file has is refused before anything is allocated, and arrays grow only as
 * entries are really parsed, so memory stays proportional to what the file
 * holds, not to what its header claims. Array nesting is bounded (recursion
 * depth), and duplicate detection uses hash tables, so the work is linear in
 * the file size whatever the input.
 *
 * The trade-off is strictness. We refuse what ggml would accept silently or
 * assert on (a bool that is not 0/1, a key with a NUL byte, overlapping
 * tensors, a general.alignment that is not a u32 power of two), because a
 * file that breaks those rules is damaged and the user is better served by
 * one precise sentence - field, index, name, byte offset - than by a crash
 * or a wrong answer later. We are more lenient than ggml in one way: tensors
 * may sit anywhere in the data section (aligned, inside the file, disjoint),
 * not only packed in order.
 *
 * Keys, tensor names and string values are copied once into one pool with a
 * NUL after each, so callers get C strings; numeric arrays and tensor data are
 * not copied (pointers into the mapping). Lookups by key or name go through
 * hash tables built after the parse.
 *
 * Writer. Keys and values are encoded when they are set (so a copied pair is
 * just bytes), tensors are referenced and read at write time, and the file is
 * written to a temporary name in the destination directory, synced, and
 * renamed over the destination: readers never see a half-written model, and
 * a failure leaves nothing behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "tensile/model.h"

#define GGUF_KEY_ALIGNMENT "general.alignment"
#define GGUF_MAX_KEY_LEN 65535u
/* Smallest encodings, to bound counts by the bytes that remain: a pair is a
 * key length (8), a key of at least one byte, a value type (4) and a value
 * of at least one byte; a tensor info is a name length (8), a name of at
 * least one byte, n_dims (4), one dimension (8), a type (4), an offset (8). */
#define GGUF_MIN_KV_BYTES 14u
#define GGUF_MIN_TENSOR_BYTES 33u
/* Longest name or path quoted in a message, so the message keeps its end. */
#define GGUF_QUOTE_MAX 40u

/* ------------------------------------------------------------------------ */
/* Types                                                                     */
/* ------------------------------------------------------------------------ */

static const char *const GGUF_TYPE_NAMES[TSL_GGUF_TYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64",
};

const char *tsl_gguf_type_name(tsl_gguf_type t) {
    return t >= 0 && t < TSL_GGUF_TYPE_COUNT ? GGUF_TYPE_NAMES[t] : "?";
}

static bool gguf_type_ok(uint32_t t) { return t < TSL_GGUF_TYPE_COUNT; }

/* Bytes of one value of a fixed-size type; 0 for STRING and ARRAY. */
static size_t gguf_fixed_size(uint32_t t) {
    switch (t) {
    case TSL_GGUF_U8: case TSL_GGUF_I8: case TSL_GGUF_BOOL: return 1;
    case TSL_GGUF_U16: case TSL_GGUF_I16: return 2;
    case TSL_GGUF_U32: case TSL_GGUF_I32: case TSL_GGUF_F32: return 4;
    case TSL_GGUF_U64: case TSL_GGUF_I64: case TSL_GGUF_F64: return 8;
    default: return 0;
    }
}

/* Smallest encoding of one value of type t (an empty string or array). */
static size_t gguf_min_size(uint32_t t) {
    if (t == TSL_GGUF_STRING) return 8;
    if (t == TSL_GGUF_ARRAY) return 12;
    return gguf_fixed_size(t);
}

/* Names of ggml tensor types tensile does not know, so a refusal can say
 * "q4_K is not supported" rather than "type 12 is unknown". */
static const char *gguf_ggml_type_name(uint32_t t) {
    static const struct { uint32_t id; const char *name; } NAMES[] = {
        {3, "q4_1"},     {6, "q5_0"},     {7, "q5_1"},    {9, "q8_1"},    {10, "q2_K"},  {11, "q3_K"},
        {12, "q4_K"},    {13, "q5_K"},    {14, "q6_K"},   {15, "q8_K"},   {16, "iq2_xxs"}, {17, "iq2_xs"},
        {18, "iq3_xxs"}, {19, "iq1_s"},   {20, "iq4_nl"}, {21, "iq3_s"},  {22, "iq2_s"}, {23, "iq4_xs"},
        {29, "iq1_m"},   {34, "tq1_0"},   {35, "tq2_0"},  {39, "mxfp4"},
    };
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (NAMES[i].id == t) return NAMES[i].name;
    return NULL;
}

static uint32_t gguf_rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t gguf_rd64(const uint8_t *p) { return (uint64_t)gguf_rd32(p) | (uint64_t)gguf_rd32(p + 4) << 32; }

/* FNV-1a: short keys, no adversary can make it quadratic beyond the probe
 * length, which the load factor (<= 1/2) keeps short on average. */
static uint64_t gguf_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Printable quote of bytes for messages: non-printables become '?', long
 * text keeps its head and ends with "...". */
static const char *gguf_quote(char *dst, size_t n, const void *src, size_t len, size_t max) {
    const uint8_t *s = src;
    size_t o = 0, lim = len > max ? max : len;
    for (size_t i = 0; i < lim && o + 1 < n; i++) dst[o++] = (s[i] >= 0x20 && s[i] < 0x7f) ? (char)s[i] : '?';
    if (len > max)
        for (int k = 0; k < 3 && o + 1 < n; k++) dst[o++] = '.';
    if (n) dst[o < n ? o : n - 1] = '\0';
    return dst;
}

/* A path for messages: the tail when it is long (the file name matters most). */
static const char *gguf_quote_path(char *dst, size_t n, const char *path) {
    size_t len = strlen(path);
    if (len <= GGUF_QUOTE_MAX) return gguf_quote(dst, n, path, len, len);
    char tmp[GGUF_QUOTE_MAX + 1];
    gguf_quote(tmp, sizeof tmp, path + len - (GGUF_QUOTE_MAX - 3), GGUF_QUOTE_MAX - 3, GGUF_QUOTE_MAX);
    snprintf(dst, n, "...%s", tmp);
    return dst;
}

/* ------------------------------------------------------------------------ */
/* The parsed file                                                           */
/* ------------------------------------------------------------------------ */

typedef struct {
    size_t off; /* into the pool */
    size_t len;
} gguf_str;

typedef struct {
    gguf_str key;
    tsl_gguf_type type;
    tsl_gguf_type elem; /* arrays: element type */
    uint64_t n;         /* arrays: element count */
    size_t pos;         /* header offset of the pair (its key length) */
    size_t val_pos;     /* offset of the value (after the type) */
    size_t val_size;    /* encoded bytes of the value */
    size_t data_pos;    /* arrays: offset of the first element */
    size_t str;         /* STRING: index into strs; string arrays: the first element's */
} gguf_kv;

/* Where each tensor info sat, for messages after the parse. */
typedef struct {
    size_t pos;      /* header offset of the tensor info (its name length) */
    size_t off_pos;  /* header offset of its offset field */
    size_t name_off; /* its name in the pool (the pool moves while parsing) */
} gguf_tmeta;

struct tsl_gguf {
    char *name; /* for messages */
    const uint8_t *base;
    size_t size;
    void *map; /* the mapping when we own one */
    uint32_t version;
    size_t alignment;
    size_t data_pos;

    gguf_kv *kv;
    size_t n_kv, cap_kv;
    tsl_gguf_tensor_info *tensors;
    gguf_tmeta *tmeta;
    size_t n_tensors, cap_tensors, cap_tmeta;

    gguf_str *strs;
    size_t n_strs, cap_strs;
    char *pool;
    size_t pool_len, pool_cap;

    size_t *kv_index; /* open addressing: entry i + 1, 0 = empty */
    size_t kv_index_cap;
    size_t *tensor_index;
    size_t tensor_index_cap;
};

static const char *gguf_strp(const tsl_gguf *g, gguf_str s) { return g->pool + s.off; }

/* ------------------------------------------------------------------------ */
/* Parser: a cursor and the item being parsed (for messages)                 */
/* ------------------------------------------------------------------------ */

typedef struct {
    tsl_gguf *g;
    size_t pos;
    tsl_error *err;
    const char *item;    /* "header", "kv", "tensor" */
    size_t index;
    const uint8_t *iname; /* the item's name bytes, once read */
    size_t iname_len;
} gguf_parser;

static void gguf_set_hint(tsl_error *e, const char *hint) {
    if (e) snprintf(e->hint, sizeof e->hint, "%s", hint);
}

/* Record a failure about the current item; `at` is the header offset of the
 * field. Always returns false. */
static bool parse_fail(gguf_parser *p, size_t at, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static bool parse_fail(gguf_parser *p, size_t at, const char *fmt, ...) {
    if (!p->err) return false;
    char what[160], q[GGUF_QUOTE_MAX + 8], path[GGUF_QUOTE_MAX + 8], msg[200];
    if (strcmp(p->item, "header") == 0)
        snprintf(what, sizeof what, "header");
    else if (p->iname)
        snprintf(what, sizeof what, "%s %zu ('%s')", p->item, p->index,
                 gguf_quote(q, sizeof q, p->iname, p->iname_len, GGUF_QUOTE_MAX));
    else
        snprintf(what, sizeof what, "%s %zu", p->item, p->index);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    error_set(p->err, TSL_FAILED, NULL, NULL, -1, NULL, NULL, "gguf '%s': %s: %s at header offset %zu",
              gguf_quote_path(path, sizeof path, p->g->name), what, msg, at);
    gguf_set_hint(p->err, "the file is truncated, damaged or not GGUF: re-download or re-convert it");
    return false;
}

static bool parse_oom(gguf_parser *p, const char *what) {
    char path[GGUF_QUOTE_MAX + 8];
    error_set(p->err, TSL_ALLOC_FAILED, NULL, NULL, -1, NULL, NULL, "gguf '%s': out of memory for %s",
              gguf_quote_path(path, sizeof path, p->g->name), what);
    return false;
}

static size_t parse_left(const gguf_parser *p) { return p->g->size - p->pos; }

static bool parse_need(gguf_parser *p, size_t n, const char *field) {
    if (n <= parse_left(p)) return true;
    return parse_fail(p, p->pos, "file ends inside the %s (needs %zu bytes, %zu left of %zu): truncated", field, n,
                      parse_left(p), p->g->size);
}

static bool parse_u32(gguf_parser *p, uint32_t *v, const char *field) {
    if (!parse_need(p, 4, field)) return false;
    *v = gguf_rd32(p->g->base + p->pos);
    p->pos += 4;
    return true;
}

static bool parse_u64(gguf_parser *p, uint64_t *v, const char *field) {
    if (!parse_need(p, 8, field)) return false;
    *v = gguf_rd64(p->g->base + p->pos);
    p->pos += 8;
    return true;
}

/* A GGUF string: u64 length then bytes. `what` names it ("key", "name",
 * "string"); on success *at is the offset of its bytes. */
static bool parse_str(gguf_parser *p, const char *what, size_t *at, size_t *len) {
    char field[48];
    snprintf(field, sizeof field, "%s length", what);
    size_t lpos = p->pos;
    uint64_t n;
    if (!parse_u64(p, &n, field)) return false;
    if (n > parse_left(p))
        return parse_fail(p, lpos, "%s %llu runs past the end of the file (%zu bytes left)", field,
                          (unsigned long long)n, parse_left(p));
    *at = p->pos;
    *len = (size_t)n;
    p->pos += (size_t)n;
    return true;
}

static bool grow(void **arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap : 16;
    while (nc < need) {
        if (nc > SIZE_MAX / 2 / elem) return false;
        nc *= 2;
    }
    void *a = realloc(*arr, nc * elem);
    if (!a) return false;
    *arr = a;
    *cap = nc;
    return true;
}

/* Copy bytes into the pool (with a NUL after them) and add a string entry. */
static bool parse_keep_str(gguf_parser *p, size_t at, size_t len, size_t *index) {
    tsl_gguf *g = p->g;
    /* len <= file size, so len + 1 + pool_len cannot overflow for any file
     * that fits the address space */
    if (!grow((void **)&g->pool, &g->pool_cap, g->pool_len + len + 1, 1)) return parse_oom(p, "strings");
    if (!grow((void **)&g->strs, &g->cap_strs, g->n_strs + 1, sizeof *g->strs)) return parse_oom(p, "strings");
    if (len) memcpy(g->pool + g->pool_len, g->base + at, len);
    g->pool[g->pool_len + len] = '\0';
    g->strs[g->n_strs] = (gguf_str){g->pool_len, len};
    g->pool_len += len + 1;
    if (index) *index = g->n_strs;
    g->n_strs++;
    return true;
}

/* Validate (and step over) one value of type t. depth is the array nesting
 * level of the array this value sits in (0 for a pair's own value); keep
 * asks for strings to be copied into the pool. */
static bool parse_value(gguf_parser *p, uint32_t t, int depth, bool keep) {
    size_t at = p->pos;
    size_t fs = gguf_fixed_size(t);
    if (fs) {
        char field[40];
        snprintf(field, sizeof field, "%s (%s)", depth ? "array element" : "value", tsl_gguf_type_name((tsl_gguf_type)t));
        if (!parse_need(p, fs, field)) return false;
        if (t == TSL_GGUF_BOOL && p->g->base[at] > 1)
            return parse_fail(p, at, "bool value %u is not 0 or 1", p->g->base[at]);
        p->pos += fs;
        return true;
    }
    if (t == TSL_GGUF_STRING) {
        size_t s, n;
        if (!parse_str(p, "string", &s, &n)) return false;
        return keep ? parse_keep_str(p, s, n, NULL) : true;
    }
    /* ARRAY */
    if (depth + 1 > TSL_GGUF_MAX_DEPTH)
        return parse_fail(p, at, "array nesting depth exceeds %d", TSL_GGUF_MAX_DEPTH);
    uint32_t et;
    uint64_t n;
    size_t et_pos = p->pos;
    if (!parse_u32(p, &et, "array element type")) return false;
    if (!gguf_type_ok(et)) return parse_fail(p, et_pos, "array element type %u is not a GGUF type (0..12)", et);
    size_t n_pos = p->pos;
    if (!parse_u64(p, &n, "array length")) return false;
    size_t min = gguf_min_size(et), left = parse_left(p);
    if (n > left / min)
        return parse_fail(p, n_pos, "array length %llu of %s needs at least %zu bytes each but only %zu bytes are left",
                          (unsigned long long)n, tsl_gguf_type_name((tsl_gguf_type)et), min, left);
    size_t ef = gguf_fixed_size(et);
    if (ef) {
        if (et == TSL_GGUF_BOOL)
            for (size_t i = 0; i < (size_t)n; i++)
                if (p->g->base[p->pos + i] > 1)
                    return parse_fail(p, p->pos + i, "bool array element %zu is %u, not 0 or 1", i,
                                      p->g->base[p->pos + i]);
        p->pos += (size_t)n * ef; /* n * ef <= left, checked above */
        return true;
    }
    for (uint64_t i = 0; i < n; i++)
        if (!parse_value(p, et, depth + 1, keep && depth == 0 && et == TSL_GGUF_STRING)) return false;
    return true;
}

static bool parse_kv(gguf_parser *p, size_t i) {
    tsl_gguf *g = p->g;
    p->item = "kv";
    p->index = i;
    p->iname = NULL;
    size_t pos = p->pos, kat, klen;
    if (!parse_str(p, "key", &kat, &klen)) return false;
    if (klen == 0) return parse_fail(p, pos, "key length is 0: keys must not be empty");
    p->iname = g->base + kat;
    p->iname_len = klen;
    if (klen > GGUF_MAX_KEY_LEN)
        return parse_fail(p, pos, "key length %zu exceeds the %u bytes GGUF allows", klen, GGUF_MAX_KEY_LEN);
    const void *nul = memchr(g->base + kat, 0, klen);
    if (nul) return parse_fail(p, (size_t)((const uint8_t *)nul - g->base), "key contains a NUL byte");
    size_t tpos = p->pos;
    uint32_t t;
    if (!parse_u32(p, &t, "value type")) return false;
    if (!gguf_type_ok(t)) return parse_fail(p, tpos, "value type %u is not a GGUF type (0..12)", t);

    if (!grow((void **)&g->kv, &g->cap_kv, g->n_kv + 1, sizeof *g->kv)) return parse_oom(p, "key/value pairs");
    gguf_kv kv = {.type = (tsl_gguf_type)t, .elem = TSL_GGUF_NONE, .pos = pos, .val_pos = p->pos};
    size_t kidx;
    if (!parse_keep_str(p, kat, klen, &kidx)) return false;
    kv.key = g->strs[kidx];
    kv.str = g->n_strs;
    if (t == TSL_GGUF_ARRAY) {
        /* element type and count are read again here for the record; the
         * validation is parse_value's */
        size_t save = p->pos;
        if (!parse_value(p, t, 0, true)) return false;
        kv.elem = (tsl_gguf_type)gguf_rd32(g->base + save);
        kv.n = gguf_rd64(g->base + save + 4);
        kv.data_pos = save + 12;
    } else {
        if (!parse_value(p, t, 0, true)) return false;
    }
    kv.val_size = p->pos - kv.val_pos;
    g->kv[g->n_kv++] = kv;
    return true;
}

static bool parse_tensor_info(gguf_parser *p, size_t i) {
    tsl_gguf *g = p->g;
    p->item = "tensor";
    p->index = i;
    p->iname = NULL;
    size_t pos = p->pos, nat, nlen;
    if (!parse_str(p, "name", &nat, &nlen)) return false;
    if (nlen == 0) return parse_fail(p, pos, "name length is 0: tensor names must not be empty");
    p->iname = g->base + nat;
    p->iname_len = nlen;
    const void *nul = memchr(g->base + nat, 0, nlen);
    if (nul) return parse_fail(p, (size_t)((const uint8_t *)nul - g->base), "name contains a NUL byte");

    size_t dpos = p->pos;
    uint32_t n_dims;
    if (!parse_u32(p, &n_dims, "n_dims")) return false;
    if (n_dims < 1 || n_dims > TSL_MAX_DIMS) return parse_fail(p, dpos, "n_dims %u is not in 1..4", n_dims);
    int64_t ne[TSL_MAX_DIMS] = {1, 1, 1, 1};
    size_t ne_pos = p->pos;
    for (uint32_t d = 0; d < n_dims; d++) {
        char field[24];
        snprintf(field, sizeof field, "dims[%u]", d);
        size_t at = p->pos;
        uint64_t v;
        if (!parse_u64(p, &v, field)) return false;
        if (v > (uint64_t)INT64_MAX) return parse_fail(p, at, "%s = %llu is too large", field, (unsigned long long)v);
        ne[d] = (int64_t)v;
    }
    size_t tpos = p->pos;
    uint32_t type;
    if (!parse_u32(p, &type, "tensor type")) return false;
    if (!tsl_type_valid((int)type) || tsl_type_block_size((tsl_type)type) == 0) {
        const char *gn = gguf_ggml_type_name(type);
        if (gn) return parse_fail(p, tpos, "tensor type %u (%s) is not supported by tensile", type, gn);
        return parse_fail(p, tpos, "tensor type %u is not a known GGUF tensor type", type);
    }
    size_t opos = p->pos;
    uint64_t offset;
    if (!parse_u64(p, &offset, "offset")) return false;

    /* element count and byte size, overflow-checked */
    int64_t nel = 1;
    for (int d = 0; d < TSL_MAX_DIMS; d++) {
        if (ne[d] != 0 && nel > INT64_MAX / ne[d])
            return parse_fail(p, ne_pos, "element count of dims [%lld, %lld, %lld, %lld] overflows int64",
                              (long long)ne[0], (long long)ne[1], (long long)ne[2], (long long)ne[3]);
        nel *= ne[d];
    }
    int64_t bl = tsl_type_block_len((tsl_type)type);
    if (ne[0] % bl != 0)
        return parse_fail(p, ne_pos, "dims[0] = %lld is not a multiple of the %s block length %lld", (long long)ne[0],
                          tsl_type_name((tsl_type)type), (long long)bl);
    size_t bs = tsl_type_block_size((tsl_type)type);
    uint64_t blocks = (uint64_t)(nel / bl);
    if (blocks > SIZE_MAX / bs || blocks * bs > (uint64_t)(INT64_MAX / 2))
        return parse_fail(p, ne_pos, "byte size of dims [%lld, %lld, %lld, %lld] %s overflows", (long long)ne[0],
                          (long long)ne[1], (long long)ne[2], (long long)ne[3], tsl_type_name((tsl_type)type));

    if (!grow((void **)&g->tensors, &g->cap_tensors, g->n_tensors + 1, sizeof *g->tensors) ||
        !grow((void **)&g->tmeta, &g->cap_tmeta, g->n_tensors + 1, sizeof *g->tmeta))
        return parse_oom(p, "tensor infos");
    size_t nidx;
    if (!parse_keep_str(p, nat, nlen, &nidx)) return false;
    tsl_gguf_tensor_info *ti = &g->tensors[g->n_tensors];
    memset(ti, 0, sizeof *ti);
    ti->name = NULL; /* set once the pool stops moving */
    ti->type = (tsl_type)type;
    ti->n_dims = (int)n_dims;
    memcpy(ti->ne, ne, sizeof ne);
    ti->offset = offset;
    ti->size = (size_t)(blocks * bs);
    g->tmeta[g->n_tensors] = (gguf_tmeta){pos, opos, g->strs[nidx].off};
    g->n_tensors++;
    return true;
}

/* Insert every name into an open-addressing table; on a duplicate report
 * the later one. names(i) gives entry i's string. */
static bool index_build(gguf_parser *p, size_t n, size_t **table, size_t *cap, bool tensors) {
    tsl_gguf *g = p->g;
    size_t c = 16;
    while (c < 2 * n) {
        if (c > SIZE_MAX / 4 / sizeof(size_t)) return parse_oom(p, "the index");
        c *= 2;
    }
    size_t *t = calloc(c, sizeof *t);
    if (!t) return parse_oom(p, "the index");
    *table = t;
    *cap = c;
    for (size_t i = 0; i < n; i++) {
        const char *s = tensors ? g->tensors[i].name : gguf_strp(g, g->kv[i].key);
        size_t len = tensors ? strlen(s) : g->kv[i].key.len;
        size_t h = (size_t)gguf_hash(s, len) & (c - 1);
        for (;;) {
            if (t[h] == 0) {
                t[h] = i + 1;
                break;
            }
            size_t j = t[h] - 1;
            const char *o = tensors ? g->tensors[j].name : gguf_strp(g, g->kv[j].key);
            if (strcmp(o, s) == 0) {
                p->item = tensors ? "tensor" : "kv";
                p->index = i;
                p->iname = (const uint8_t *)s;
                p->iname_len = len;
                return parse_fail(p, tensors ? g->tmeta[i].pos : g->kv[i].pos,
                                  "duplicate %s (first defined as %s %zu)", tensors ? "tensor name" : "key",
                                  p->item, j);
            }
            h = (h + 1) & (c - 1);
        }
    }
    return true;
}

static int64_t index_find(const tsl_gguf *g, const size_t *t, size_t cap, const char *s, bool tensors) {
    if (!t || !s) return -1;
    size_t h = (size_t)gguf_hash(s, strlen(s)) & (cap - 1);
    while (t[h]) {
        size_t j = t[h] - 1;
        const char *o = tensors ? g->tensors[j].name : gguf_strp(g, g->kv[j].key);
        if (strcmp(o, s) == 0) return (int64_t)j;
        h = (h + 1) & (cap - 1);
    }
    return -1;
}

typedef struct {
    uint64_t start, size;
    size_t idx;
} gguf_extent;

static int gguf_extent_cmp(const void *a, const void *b) {
    const gguf_extent *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

static bool parse_header(gguf_parser *p, uint64_t *n_tensors, uint64_t *n_kv) {
    tsl_gguf *g = p->g;
    p->item = "header";
    if (!parse_need(p, 4, "magic")) return false;
    if (memcmp(g->base, "GGUF", 4) != 0) {
        char q[8];
        return parse_fail(p, 0, "bad magic '%s' (%02x %02x %02x %02x): not a GGUF file",
                          gguf_quote(q, sizeof q, g->base, 4, 4), g->base[0], g->base[1], g->base[2], g->base[3]);
    }
    p->pos = 4;
    uint32_t v;
    if (!parse_u32(p, &v, "version")) return false;
    if (v != 2 && v != 3) {
        if ((v & 0xffffu) == 0 && v != 0)
            return parse_fail(p, 4, "version 0x%08x looks byte-swapped: big-endian GGUF files are not supported", v);
        if (v == 1)
            return parse_fail(p, 4, "version 1 is not supported (an obsolete layout; tensile reads GGUF v2 and v3)");
        return parse_fail(p, 4, "version %u is not supported (tensile reads GGUF v2 and v3)", v);
    }
    g->version = v;
    if (!parse_u64(p, n_tensors, "tensor count")) return false;
    if (!parse_u64(p, n_kv, "kv count")) return false;
    size_t left = parse_left(p);
    if (*n_tensors > left / GGUF_MIN_TENSOR_BYTES)
        return parse_fail(p, 8, "tensor count %llu is impossible: each tensor info needs at least %u bytes and only %zu "
                          "bytes follow the header", (unsigned long long)*n_tensors, GGUF_MIN_TENSOR_BYTES, left);
    if (*n_kv > left / GGUF_MIN_KV_BYTES)
        return parse_fail(p, 16, "kv count %llu is impossible: each pair needs at least %u bytes and only %zu bytes "
                          "follow the header", (unsigned long long)*n_kv, GGUF_MIN_KV_BYTES, left);
    /* both bounded by left / 14, so the sum cannot overflow */
    if (*n_tensors * GGUF_MIN_TENSOR_BYTES + *n_kv * GGUF_MIN_KV_BYTES > left)
        return parse_fail(p, 8, "tensor count %llu and kv count %llu need more than the %zu bytes that follow the "
                          "header", (unsigned long long)*n_tensors, (unsigned long long)*n_kv, left);
    return true;
}

static bool parse_alignment(gguf_parser *p) {
    tsl_gguf *g = p->g;
    g->alignment = TSL_GGUF_DEFAULT_ALIGNMENT;
    int64_t i = index_find(g, g->kv_index, g->kv_index_cap, GGUF_KEY_ALIGNMENT, false);
    if (i < 0) return true;
    const gguf_kv *kv = &g->kv[i];
    p->item = "kv";
    p->index = (size_t)i;
    p->iname = (const uint8_t *)GGUF_KEY_ALIGNMENT;
    p->iname_len = strlen(GGUF_KEY_ALIGNMENT);
    if (kv->type != TSL_GGUF_U32)
        return parse_fail(p, kv->val_pos, "general.alignment has type %s; it must be u32",
                          tsl_gguf_type_name(kv->type));
    uint32_t a = gguf_rd32(g->base + kv->val_pos);
    if (a == 0 || (a & (a - 1)) != 0)
        return parse_fail(p, kv->val_pos, "general.alignment %u is not a power of two", a);
    g->alignment = a;
    return true;
}

static bool parse_tensor_data(gguf_parser *p) {
    tsl_gguf *g = p->g;
    /* data section: right after the infos, aligned; may lie past the end of a
     * file without tensor data, which only matters if a tensor points there */
    size_t pad = (g->alignment - p->pos % g->alignment) % g->alignment;
    g->data_pos = p->pos + pad; /* pos <= size and pad < 2^32: no overflow */
    size_t room = g->data_pos <= g->size ? g->size - g->data_pos : 0;
    p->item = "tensor";
    /* alignment first: a wrong general.alignment shows as misaligned
     * offsets, which says more than the extents it also breaks */
    for (size_t i = 0; i < g->n_tensors; i++) {
        tsl_gguf_tensor_info *ti = &g->tensors[i];
        p->index = i;
        p->iname = (const uint8_t *)ti->name;
        p->iname_len = strlen(ti->name);
        if (ti->offset % g->alignment != 0)
            return parse_fail(p, g->tmeta[i].off_pos, "data offset %llu is not a multiple of the alignment %zu",
                              (unsigned long long)ti->offset, g->alignment);
    }
    for (size_t i = 0; i < g->n_tensors; i++) {
        tsl_gguf_tensor_info *ti = &g->tensors[i];
        p->index = i;
        p->iname = (const uint8_t *)ti->name;
        p->iname_len = strlen(ti->name);
        if (g->data_pos > g->size || ti->offset > room || ti->size > room - ti->offset) {
            /* report in file offsets; the sum may exceed 64 bits for a
             * hostile offset, so say so rather than wrap */
            unsigned long long at_file = ti->offset > UINT64_MAX - g->data_pos ? UINT64_MAX : g->data_pos + ti->offset;
            return parse_fail(p, g->tmeta[i].off_pos,
                              "data [offset %llu, %zu bytes] runs past the end of the file (%zu bytes)", at_file, ti->size,
                              g->size);
        }
        ti->data = g->base + g->data_pos + ti->offset;
    }
    if (g->n_tensors < 2) return true;
    gguf_extent *ex = malloc(g->n_tensors * sizeof *ex);
    if (!ex) return parse_oom(p, "the overlap check");
    size_t n = 0;
    for (size_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].size) ex[n++] = (gguf_extent){g->tensors[i].offset, g->tensors[i].size, i};
    qsort(ex, n, sizeof *ex, gguf_extent_cmp);
    for (size_t k = 1; k < n; k++) {
        const gguf_extent *a = &ex[k - 1], *b = &ex[k];
        if (a->start + a->size > b->start) { /* both inside the file: no overflow */
            size_t later = a->idx > b->idx ? a->idx : b->idx, first = a->idx > b->idx ? b->idx : a->idx;
            const tsl_gguf_tensor_info *tl = &g->tensors[later], *tf = &g->tensors[first];
            char q[GGUF_QUOTE_MAX + 8];
            p->index = later;
            p->iname = (const uint8_t *)tl->name;
            p->iname_len = strlen(tl->name);
            bool r = parse_fail(p, g->tmeta[later].off_pos,
                                "data [offset %zu, %zu bytes] overlaps tensor %zu ('%s') [offset %zu, %zu bytes]",
                                g->data_pos + (size_t)tl->offset, tl->size, first,
                                gguf_quote(q, sizeof q, tf->name, strlen(tf->name), 24),
                                g->data_pos + (size_t)tf->offset, tf->size);
            free(ex);
            return r;
        }
    }
    free(ex);
    return true;
}

static bool gguf_parse(tsl_gguf *g, tsl_error *err) {
    gguf_parser p = {.g = g, .err = err, .item = "header"};
    uint64_t n_tensors, n_kv;
    if (!parse_header(&p, &n_tensors, &n_kv)) return false;
    for (uint64_t i = 0; i < n_kv; i++)
        if (!parse_kv(&p, (size_t)i)) return false;
    if (!index_build(&p, g->n_kv, &g->kv_index, &g->kv_index_cap, false)) return false;
    if (!parse_alignment(&p)) return false;
    for (uint64_t i = 0; i < n_tensors; i++)
        if (!parse_tensor_info(&p, (size_t)i)) return false;
    /* the pool no longer moves: turn parked name offsets into pointers */
    for (size_t i = 0; i < g->n_tensors; i++) g->tensors[i].name = g->pool + g->tmeta[i].name_off;
    if (!index_build(&p, g->n_tensors, &g->tensor_index, &g->tensor_index_cap, true)) return false;
    return parse_tensor_data(&p);
}

/* ------------------------------------------------------------------------ */
/* Opening and closing                                                       */
/* ------------------------------------------------------------------------ */

static void gguf_free(tsl_gguf *g) {
    if (!g) return;
    if (g->map) munmap(g->map, g->size);
    free(g->name);
    free(g->kv);
    free(g->tensors);
    free(g->tmeta);
    free(g->strs);
    free(g->pool);
    free(g->kv_index);
    free(g->tensor_index);
    free(g);
}

void tsl_gguf_close(tsl_gguf *g) { gguf_free(g); }

static tsl_gguf *gguf_new(const char *name, tsl_error *err) {
    tsl_gguf *g = calloc(1, sizeof *g);
    if (g) g->name = strdup(name);
    if (!g || !g->name) {
        free(g);
        error_set(err, TSL_ALLOC_FAILED, NULL, NULL, -1, NULL, NULL, "gguf: out of memory opening a file");
        return NULL;
    }
    g->alignment = TSL_GGUF_DEFAULT_ALIGNMENT;
    return g;
}

tsl_gguf *tsl_gguf_open_memory(const void *data, size_t size, const char *name, tsl_error *err) {
    if (!name) name = "<memory>";
    if (!data && size) {
        error_set(err, TSL_FAILED, NULL, NULL, -1, NULL, NULL, "gguf '%s': data is NULL", name);
        return NULL;
    }
    tsl_gguf *g = gguf_new(name, err);
    if (!g) return NULL;
    g->base = data ? data : (const uint8_t *)"";
    g->size = size;
    if (!gguf_parse(g, err)) {
        gguf_free(g);
        return NULL;
    }
    return g;
}

static tsl_gguf *gguf_open_fail(tsl_error *err, tsl_status s, const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static tsl_gguf *gguf_open_fail(tsl_error *err, tsl_status s, const char *path, const char *fmt, ...) {
    char msg[200], q[GGUF_QUOTE_MAX + 8];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    error_set(err, s, NULL, NULL, -1, NULL, NULL, "gguf '%s': %s", gguf_quote_path(q, sizeof q, path), msg);
    gguf_set_hint(err, "check the path and the file");
    return NULL;
}

tsl_gguf *tsl_gguf_open(const char *path, tsl_error *err) {
    if (!path) return gguf_open_fail(err, TSL_FAILED, "(null)", "path is NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return gguf_open_fail(err, TSL_FAILED, path, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return gguf_open_fail(err, TSL_FAILED, path, "cannot stat: %s", strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return gguf_open_fail(err, TSL_FAILED, path, "is not a regular file");
    }
    if (st.st_size == 0) {
        close(fd);
        return gguf_open_fail(err, TSL_FAILED, path, "is empty (0 bytes): not a GGUF file");
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return gguf_open_fail(err, TSL_FAILED, path, "is too large to map (%lld bytes)", (long long)st.st_size);
    }
    size_t size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file */
    if (map == MAP_FAILED)
        return gguf_open_fail(err, e == ENOMEM ? TSL_ALLOC_FAILED : TSL_FAILED, path, "cannot map %zu bytes: %s",
                              size, strerror(e));
    tsl_gguf *g = gguf_new(path, err);
    if (!g) {
        munmap(map, size);
        return NULL;
    }
    g->map = map;
    g->base = map;
    g->size = size;
    if (!gguf_parse(g, err)) {
        gguf_free(g);
        return NULL;
    }
    return g;
}

uint32_t tsl_gguf_version(const tsl_gguf *g) { return g ? g->version : 0; }
size_t tsl_gguf_alignment(const tsl_gguf *g) { return g ? g->alignment : 0; }
size_t tsl_gguf_data_offset(const tsl_gguf *g) { return g ? g->data_pos : 0; }
size_t tsl_gguf_file_size(const tsl_gguf *g) { return g ? g->size : 0; }

/* ------------------------------------------------------------------------ */
/* Key/value access                                                          */
/* ------------------------------------------------------------------------ */

int64_t tsl_gguf_kv_count(const tsl_gguf *g) { return g ? (int64_t)g->n_kv : 0; }

const char *tsl_gguf_key(const tsl_gguf *g, int64_t i) {
    if (!g || i < 0 || (uint64_t)i >= g->n_kv) return NULL;
    return gguf_strp(g, g->kv[i].key);
}

int64_t tsl_gguf_find_key(const tsl_gguf *g, const char *key) {
    return g ? index_find(g, g->kv_index, g->kv_index_cap, key, false) : -1;
}

tsl_gguf_type tsl_gguf_kv_type(const tsl_gguf *g, int64_t i) {
    if (!g || i < 0 || (uint64_t)i >= g->n_kv) return TSL_GGUF_NONE;
    return g->kv[i].type;
}

static tsl_status get_fail(const tsl_gguf *g, tsl_error *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static tsl_status get_fail(const tsl_gguf *g, tsl_error *err, const char *fmt, ...) {
    if (!err) return TSL_FAILED;
    char msg[200], q[GGUF_QUOTE_MAX + 8];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    error_set(err, TSL_FAILED, NULL, NULL, -1, NULL, NULL, "gguf '%s': %s",
              g ? gguf_quote_path(q, sizeof q, g->name) : "(null)", msg);
    gguf_set_hint(err, "the model file lacks this metadata or was made by an incompatible converter");
    return TSL_FAILED;
}

/* The pair for key, checked to exist (and, unless want is NONE, to hold a
 * value of type want). */
static const gguf_kv *get_kv(const tsl_gguf *g, const char *key, tsl_gguf_type want, const void *out,
                             tsl_error *err) {
    char q[GGUF_QUOTE_MAX + 8];
    if (!g || !key || !out) {
        get_fail(g, err, "%s is NULL", !g ? "the file handle" : !key ? "the key" : "the output pointer");
        return NULL;
    }
    int64_t i = tsl_gguf_find_key(g, key);
    if (i < 0) {
        get_fail(g, err, "no key '%s'", gguf_quote(q, sizeof q, key, strlen(key), GGUF_QUOTE_MAX));
        return NULL;
    }
    const gguf_kv *kv = &g->kv[i];
    if (want != TSL_GGUF_NONE && kv->type != want) {
        get_fail(g, err, "key '%s' holds %s, not %s", gguf_quote(q, sizeof q, key, strlen(key), GGUF_QUOTE_MAX),
                 tsl_gguf_type_name(kv->type), tsl_gguf_type_name(want));
        return NULL;
    }
    return kv;
}

#define GGUF_GETTER(fn, ctype, gtype)                                                       \
    tsl_status fn(const tsl_gguf *g, const char *key, ctype *out, tsl_error *err) {         \
        const gguf_kv *kv = get_kv(g, key, gtype, out, err);                                 \
        if (!kv) return TSL_FAILED;                                                          \
        memcpy(out, g->base + kv->val_pos, sizeof *out);                                     \
        return TSL_SUCCESS;                                                                  \
    }
GGUF_GETTER(tsl_gguf_get_u8, uint8_t, TSL_GGUF_U8)
GGUF_GETTER(tsl_gguf_get_i8, int8_t, TSL_GGUF_I8)
GGUF_GETTER(tsl_gguf_get_u16, uint16_t, TSL_GGUF_U16)
GGUF_GETTER(tsl_gguf_get_i16, int16_t, TSL_GGUF_I16)
GGUF_GETTER(tsl_gguf_get_u32, uint32_t, TSL_GGUF_U32)
GGUF_GETTER(tsl_gguf_get_i32, int32_t, TSL_GGUF_I32)
GGUF_GETTER(tsl_gguf_get_u64, uint64_t, TSL_GGUF_U64)
GGUF_GETTER(tsl_gguf_get_i64, int64_t, TSL_GGUF_I64)
GGUF_GETTER(tsl_gguf_get_f32, float, TSL_GGUF_F32)
GGUF_GETTER(tsl_gguf_get_f64, double, TSL_GGUF_F64)
#undef GGUF_GETTER

tsl_status tsl_gguf_get_bool(const tsl_gguf *g, const char *key, bool *out, tsl_error *err) {
    const gguf_kv *kv = get_kv(g, key, TSL_GGUF_BOOL, out, err);
    if (!kv) return TSL_FAILED;
    *out = g->base[kv->val_pos] != 0; /* validated 0/1 at open */
    return TSL_SUCCESS;
}

tsl_status tsl_gguf_get_str(const tsl_gguf *g, const char *key, const char **out, size_t *len, tsl_error *err) {
    const gguf_kv *kv = get_kv(g, key, TSL_GGUF_STRING, out, err);
    if (!kv) return TSL_FAILED;
    *out = gguf_strp(g, g->strs[kv->str]);
    if (len) *len = g->strs[kv->str].len;
    return TSL_SUCCESS;
}

/* Decode one stored value of a numeric type; false for STRING / ARRAY. */
static bool decode_int(tsl_gguf_type t, const uint8_t *p, int64_t *out, bool *too_big) {
    *too_big = false;
    switch (t) {
    case TSL_GGUF_U8: case TSL_GGUF_BOOL: *out = p[0]; return true;
    case TSL_GGUF_I8: *out = (int8_t)p[0]; return true;
    case TSL_GGUF_U16: *out = (uint16_t)(p[0] | p[1] << 8); return true;
    case TSL_GGUF_I16: *out = (int16_t)(uint16_t)(p[0] | p[1] << 8); return true;
    case TSL_GGUF_U32: *out = gguf_rd32(p); return true;
    case TSL_GGUF_I32: *out = (int32_t)gguf_rd32(p); return true;
    case TSL_GGUF_U64: {
        uint64_t v = gguf_rd64(p);
        if (v > (uint64_t)INT64_MAX) {
            *too_big = true;
            return false;
        }
        *out = (int64_t)v;
        return true;
    }
    case TSL_GGUF_I64: *out = (int64_t)gguf_rd64(p); return true;
    default: return false;
    }
}

static bool decode_float(tsl_gguf_type t, const uint8_t *p, double *out) {
    if (t == TSL_GGUF_F32) {
        float f;
        uint32_t u = gguf_rd32(p);
        memcpy(&f, &u, 4);
        *out = f;
        return true;
    }
    if (t == TSL_GGUF_F64) {
        uint64_t u = gguf_rd64(p);
        memcpy(out, &u, 8);
        return true;
    }
    if (t == TSL_GGUF_U64) {
        *out = (double)gguf_rd64(p);
        return true;
    }
    int64_t v;
    bool big = false;
    if (t == TSL_GGUF_BOOL || !decode_int(t, p, &v, &big)) return false;
    *out = (double)v;
    return true;
}

tsl_status tsl_gguf_get_int(const tsl_gguf *g, const char *key, int64_t *out, tsl_error *err) {
    const gguf_kv *kv = get_kv(g, key, TSL_GGUF_NONE, out, err);
    if (!kv) return TSL_FAILED;
    bool big = false;
    int64_t v;
    if (!decode_int(kv->type, g->base + kv->val_pos, &v, &big))
        return get_fail(g, err, "key '%s' holds %s%s, not an integer", key, tsl_gguf_type_name(kv->type),
                        big ? " above INT64_MAX" : "");
    *out = v;
    return TSL_SUCCESS;
}

tsl_status tsl_gguf_get_float(const tsl_gguf *g, const char *key, double *out, tsl_error *err) {
    const gguf_kv *kv = get_kv(g, key, TSL_GGUF_NONE, out, err);
    if (!kv) return TSL_FAILED;
    if (!decode_float(kv->type, g->base + kv->val_pos, out))
        return get_fail(g, err, "key '%s' holds %s, not a number", key, tsl_gguf_type_name(kv->type));
    return TSL_SUCCESS;
}

tsl_status tsl_gguf_get_arr(const tsl_gguf *g, const char *key, tsl_gguf_type *elem_type, uint64_t *n,
                            const void **data, size_t *nbytes, tsl_error *err) {
    const gguf_kv *kv = get_kv(g, key, TSL_GGUF_ARRAY, key, err); /* outputs are optional */
    if (!kv) return TSL_FAILED;
    if (elem_type) *elem_type = kv->elem;
    if (n) *n = kv->n;
    if (data) *data = g->base + kv->data_pos;
    if (nbytes) *nbytes = kv->val_size - 12;
    return TSL_SUCCESS;
}

/* Array pair for key with element i in range. */
static const gguf_kv *get_arr_elem(const tsl_gguf *g, const char *key, uint64_t i, const void *out,
                                   tsl_error *err) {
    const gguf_kv *kv = get_kv(g, key, TSL_GGUF_ARRAY, out, err);
    if (!kv) return NULL;
    if (i >= kv->n) {
        get_fail(g, err, "index %llu is past the end of array '%s' (%llu elements)", (unsigned long long)i, key,
                 (unsigned long long)kv->n);
        return NULL;
    }
    return kv;
}

tsl_status tsl_gguf_get_arr_int(const tsl_gguf *g, const char *key, uint64_t i, int64_t *out, tsl_error *err) {
    const gguf_kv *kv = get_arr_elem(g, key, i, out, err);
    if (!kv) return TSL_FAILED;
    size_t es = gguf_fixed_size(kv->elem);
    bool big = false;
    int64_t v;
    if (!es || !decode_int(kv->elem, g->base + kv->data_pos + (size_t)i * es, &v, &big))
        return get_fail(g, err, "array '%s' holds %s%s, not integers", key, tsl_gguf_type_name(kv->elem),
                        big ? " above INT64_MAX" : "");
    *out = v;
    return TSL_SUCCESS;
}

tsl_status tsl_gguf_get_arr_float(const tsl_gguf *g, const char *key, uint64_t i, double *out, tsl_error *err) {
    const gguf_kv *kv = get_arr_elem(g, key, i, out, err);
    if (!kv) return TSL_FAILED;
    size_t es = gguf_fixed_size(kv->elem);
    if (!es || !decode_float(kv->elem, g->base + kv->data_pos + (size_t)i * es, out))
        return get_fail(g, err, "array '%s' holds %s, not numbers", key, tsl_gguf_type_name(kv->elem));
    return TSL_SUCCESS;
}

tsl_status tsl_gguf_get_arr_str(const tsl_gguf *g, const char *key, uint64_t i, const char **out, size_t *len,
                                tsl_error *err) {
    const gguf_kv *kv = get_arr_elem(g, key, i, out, err);
    if (!kv) return TSL_FAILED;
    if (kv->elem != TSL_GGUF_STRING)
        return get_fail(g, err, "array '%s' holds %s, not str", key, tsl_gguf_type_name(kv->elem));
    gguf_str s = g->strs[kv->str + (size_t)i];
    *out = gguf_strp(g, s);
    if (len) *len = s.len;
    return TSL_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */

int64_t tsl_gguf_tensor_count(const tsl_gguf *g) { return g ? (int64_t)g->n_tensors : 0; }

const tsl_gguf_tensor_info *tsl_gguf_tensor(const tsl_gguf *g, int64_t i) {
    if (!g || i < 0 || (uint64_t)i >= g->n_tensors) return NULL;
    return &g->tensors[i];
}

int64_t tsl_gguf_find_tensor(const tsl_gguf *g, const char *name) {
    return g ? index_find(g, g->tensor_index, g->tensor_index_cap, name, true) : -1;
}

size_t tsl_gguf_data_size(const tsl_gguf *g) {
    size_t s = 0;
    for (size_t i = 0; g && i < g->n_tensors; i++) s += g->tensors[i].size; /* disjoint, inside the file */
    return s;
}

tsl_status tsl_gguf_load_tensors(tsl_gguf *g, tsl_context *ctx, tsl_error *err) {
    char q[GGUF_QUOTE_MAX + 8], path[GGUF_QUOTE_MAX + 8];
    if (!g || !ctx)
        return error_set(err, TSL_FAILED, NULL, NULL, -1, NULL, NULL, "gguf load_tensors: %s is NULL",
                         !g ? "the file handle" : "the context");
    gguf_quote_path(path, sizeof path, g->name);
    for (size_t i = 0; i < g->n_tensors; i++) {
        size_t len = strlen(g->tensors[i].name);
        if (len >= TSL_MAX_NAME)
            return error_set(err, TSL_FAILED, NULL, NULL, -1, NULL, NULL,
                             "gguf '%s': tensor %zu name '%s' is %zu bytes; tensor names hold at most %d", path, i,
                             gguf_quote(q, sizeof q, g->tensors[i].name, len, GGUF_QUOTE_MAX), len, TSL_MAX_NAME - 1);
    }
    bool copy = !tsl_ctx_no_alloc(ctx);
    for (size_t i = 0; i < g->n_tensors; i++) {
        const tsl_gguf_tensor_info *ti = &g->tensors[i];
        tsl_tensor *t = tsl_new_tensor(ctx, ti->type, ti->n_dims, ti->ne);
        if (!t) {
            const char *ce = tsl_ctx_error(ctx);
            error_set(err, TSL_FAILED, NULL, NULL, -1, NULL, NULL, "gguf '%s': tensor %zu ('%s'): %s", path, i,
                      gguf_quote(q, sizeof q, ti->name, strlen(ti->name), GGUF_QUOTE_MAX),
                      ce ? ce : "the context could not make it");
            if (err) snprintf(err->tensor, sizeof err->tensor, "%s", ti->name);
            return TSL_FAILED;
        }
        tsl_tensor_set_name(t, ti->name);
        if (copy) {
            if (ti->size) memcpy(t->data, ti->data, ti->size);
        } else {
            /* zero-copy: the tensor reads the mapping, which is read-only */
            t->data = (void *)(uintptr_t)ti->data;
        }
    }
    return TSL_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Writer                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct {
    char *key;
    size_t key_len;
    uint32_t type;
    uint8_t *val; /* encoded value, without its type */
    size_t val_size;
} gw_kv;

typedef struct {
    char name[TSL_MAX_NAME];
    tsl_type type;
    int n_dims;
    int64_t ne[TSL_MAX_DIMS];
    size_t size;
    const void *data;
    tsl_gguf_fill_fn fn;
    void *user;
} gw_tensor;

struct tsl_gguf_writer {
    gw_kv *kv;
    size_t n_kv, cap_kv;
    gw_tensor *t;
    size_t n_t, cap_t;
    bool failed;
    tsl_error first; /* the first failure of a setter or add */
};

tsl_gguf_writer *tsl_gguf_writer_new(void) {
    tsl_gguf_writer *w = calloc(1, sizeof *w);
    if (w) tsl_error_clear(&w->first);
    return w;
}

void tsl_gguf_writer_free(tsl_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    free(w->kv);
    free(w->t);
    free(w);
}

static tsl_status gw_fail(tsl_gguf_writer *w, tsl_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static tsl_status gw_fail(tsl_gguf_writer *w, tsl_status s, const char *fmt, ...) {
    if (!w || w->failed) return s;
    char msg[220];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    error_set(&w->first, s, NULL, NULL, -1, NULL, NULL, "gguf writer: %s", msg);
    w->failed = true;
    return s;
}

tsl_status tsl_gguf_writer_status(const tsl_gguf_writer *w, tsl_error *err) {
    if (!w) return error_set(err, TSL_FAILED, NULL, NULL, -1, NULL, NULL, "gguf writer: the writer is NULL");
    if (!w->failed) return TSL_SUCCESS;
    if (err) *err = w->first;
    return w->first.status;
}

/* Set key to an encoded value (copied); replaces an existing value in place. */
static tsl_status gw_set(tsl_gguf_writer *w, const char *who, const char *key, uint32_t type, const void *val,
                         size_t val_size) {
    char q[GGUF_QUOTE_MAX + 8];
    if (!w) return TSL_FAILED;
    if (!key) return gw_fail(w, TSL_FAILED, "%s: the key is NULL", who);
    size_t klen = strlen(key);
    if (klen == 0) return gw_fail(w, TSL_FAILED, "%s: the key is empty", who);
    if (klen > GGUF_MAX_KEY_LEN)
        return gw_fail(w, TSL_FAILED, "%s: key '%s' is %zu bytes; GGUF allows %u", who,
                       gguf_quote(q, sizeof q, key, klen, GGUF_QUOTE_MAX), klen, GGUF_MAX_KEY_LEN);
    if (strcmp(key, GGUF_KEY_ALIGNMENT) == 0) {
        uint32_t a = 0;
        if (type == TSL_GGUF_U32) a = gguf_rd32(val);
        if (type != TSL_GGUF_U32 || a == 0 || (a & (a - 1)) != 0)
            return gw_fail(w, TSL_FAILED, "%s: general.alignment must be a u32 power of two", who);
    }
    uint8_t *copy = malloc(val_size ? val_size : 1);
    if (!copy) return gw_fail(w, TSL_ALLOC_FAILED, "%s: out of memory for the value of '%s'", who, key);
    if (val_size) memcpy(copy, val, val_size);
    for (size_t i = 0; i < w->n_kv; i++) {
        if (w->kv[i].key_len == klen && memcmp(w->kv[i].key, key, klen) == 0) {
            free(w->kv[i].val);
            w->kv[i].type = type;
            w->kv[i].val = copy;
            w->kv[i].val_size = val_size;
            return TSL_SUCCESS;
        }
    }
    char *kcopy = strdup(key);
    if (!kcopy || !grow((void **)&w->kv, &w->cap_kv, w->n_kv + 1, sizeof *w->kv)) {
        free(kcopy);
        free(copy);
        return gw_fail(w, TSL_ALLOC_FAILED, "%s: out of memory for key '%s'", who, key);
    }
    w->kv[w->n_kv++] = (gw_kv){kcopy, klen, type, copy, val_size};
    return TSL_SUCCESS;
}

static void gw_le(uint8_t *dst, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = (uint8_t)(v >> (8 * i));
}

#define GW_SETTER(fn, ctype, gtype, bits_expr)                                            \
    tsl_status fn(tsl_gguf_writer *w, const char *key, ctype v) {                          \
        uint8_t b[8];                                                                      \
        gw_le(b, (bits_expr), sizeof(ctype));                                              \
        return gw_set(w, #fn, key, gtype, b, sizeof(ctype));                               \
    }
GW_SETTER(tsl_gguf_writer_set_u8, uint8_t, TSL_GGUF_U8, v)
GW_SETTER(tsl_gguf_writer_set_i8, int8_t, TSL_GGUF_I8, (uint8_t)v)
GW_SETTER(tsl_gguf_writer_set_u16, uint16_t, TSL_GGUF_U16, v)
GW_SETTER(tsl_gguf_writer_set_i16, int16_t, TSL_GGUF_I16, (uint16_t)v)
GW_SETTER(tsl_gguf_writer_set_u32, uint32_t, TSL_GGUF_U32, v)
GW_SETTER(tsl_gguf_writer_set_i32, int32_t, TSL_GGUF_I32, (uint32_t)v)
GW_SETTER(tsl_gguf_writer_set_u64, uint64_t, TSL_GGUF_U64, v)
GW_SETTER(tsl_gguf_writer_set_i64, int64_t, TSL_GGUF_I64, (uint64_t)v)
#undef GW_SETTER

tsl_status tsl_gguf_writer_set_f32(tsl_gguf_writer *w, const char *key, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    uint8_t b[4];
    gw_le(b, u, 4);
    return gw_set(w, "set_f32", key, TSL_GGUF_F32, b, 4);
}

tsl_status tsl_gguf_writer_set_f64(tsl_gguf_writer *w, const char *key, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    uint8_t b[8];
    gw_le(b, u, 8);
    return gw_set(w, "set_f64", key, TSL_GGUF_F64, b, 8);
}

tsl_status tsl_gguf_writer_set_bool(tsl_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return gw_set(w, "set_bool", key, TSL_GGUF_BOOL, &b, 1);
}

tsl_status tsl_gguf_writer_set_str(tsl_gguf_writer *w, const char *key, const char *s) {
    if (!w) return TSL_FAILED;
    if (!s) return gw_fail(w, TSL_FAILED, "set_str: the string for '%s' is NULL", key ? key : "(null)");
    size_t n = strlen(s);
    uint8_t *b = malloc(8 + n);
    if (!b) return gw_fail(w, TSL_ALLOC_FAILED, "set_str: out of memory");
    gw_le(b, n, 8);
    memcpy(b + 8, s, n);
    tsl_status st = gw_set(w, "set_str", key, TSL_GGUF_STRING, b, 8 + n);
    free(b);
    return st;
}

tsl_status tsl_gguf_writer_set_arr(tsl_gguf_writer *w, const char *key, tsl_gguf_type elem_type, const void *data,
                                   uint64_t n) {
    if (!w) return TSL_FAILED;
    size_t es = gguf_type_ok((uint32_t)elem_type) ? gguf_fixed_size((uint32_t)elem_type) : 0;
    if (!es)
        return gw_fail(w, TSL_FAILED, "set_arr: element type %d (%s) is not a fixed-size type; use set_arr_str for "
                       "strings", (int)elem_type, tsl_gguf_type_name(elem_type));
    if (n && !data) return gw_fail(w, TSL_FAILED, "set_arr: data for '%s' is NULL", key ? key : "(null)");
    if (n > (SIZE_MAX - 12) / es) return gw_fail(w, TSL_FAILED, "set_arr: %llu elements overflow", (unsigned long long)n);
    size_t bytes = (size_t)n * es;
    const uint8_t *d = data;
    if (elem_type == TSL_GGUF_BOOL)
        for (size_t i = 0; i < bytes; i++)
            if (d[i] > 1) return gw_fail(w, TSL_FAILED, "set_arr: bool element %zu is %u, not 0 or 1", i, d[i]);
    uint8_t *b = malloc(12 + bytes);
    if (!b) return gw_fail(w, TSL_ALLOC_FAILED, "set_arr: out of memory for %zu bytes", bytes);
    gw_le(b, (uint32_t)elem_type, 4);
    gw_le(b + 4, n, 8);
    /* host order is little-endian on every supported host (see model.h) */
    if (bytes) memcpy(b + 12, d, bytes);
    tsl_status st = gw_set(w, "set_arr", key, TSL_GGUF_ARRAY, b, 12 + bytes);
    free(b);
    return st;
}

tsl_status tsl_gguf_writer_set_arr_str(tsl_gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    if (!w) return TSL_FAILED;
    if (n && !strs) return gw_fail(w, TSL_FAILED, "set_arr_str: strings for '%s' are NULL", key ? key : "(null)");
    size_t bytes = 12;
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i]) return gw_fail(w, TSL_FAILED, "set_arr_str: string %llu of '%s' is NULL", (unsigned long long)i,
                                     key ? key : "(null)");
        size_t l = strlen(strs[i]);
        if (l > SIZE_MAX - 8 - bytes) return gw_fail(w, TSL_FAILED, "set_arr_str: strings overflow");
        bytes += 8 + l;
    }
    uint8_t *b = malloc(bytes);
    if (!b) return gw_fail(w, TSL_ALLOC_FAILED, "set_arr_str: out of memory for %zu bytes", bytes);
    gw_le(b, TSL_GGUF_STRING, 4);
    gw_le(b + 4, n, 8);
    size_t o = 12;
    for (uint64_t i = 0; i < n; i++) {
        size_t l = strlen(strs[i]);
        gw_le(b + o, l, 8);
        memcpy(b + o + 8, strs[i], l);
        o += 8 + l;
    }
    tsl_status st = gw_set(w, "set_arr_str", key, TSL_GGUF_ARRAY, b, bytes);
    free(b);
    return st;
}

tsl_status tsl_gguf_writer_copy_kv(tsl_gguf_writer *w, const tsl_gguf *g, const char *key) {
    if (!w) return TSL_FAILED;
    if (!g || !key) return gw_fail(w, TSL_FAILED, "copy_kv: %s is NULL", !g ? "the file" : "the key");
    int64_t i = tsl_gguf_find_key(g, key);
    if (i < 0) return gw_fail(w, TSL_FAILED, "copy_kv: the file has no key '%s'", key);
    const gguf_kv *kv = &g->kv[i];
    return gw_set(w, "copy_kv", key, kv->type, g->base + kv->val_pos, kv->val_size);
}

tsl_status tsl_gguf_writer_set_alignment(tsl_gguf_writer *w, uint32_t alignment) {
    if (!w) return TSL_FAILED;
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
        return gw_fail(w, TSL_FAILED, "set_alignment: %u is not a power of two", alignment);
    return tsl_gguf_writer_set_u32(w, GGUF_KEY_ALIGNMENT, alignment);
}

static tsl_status gw_add(tsl_gguf_writer *w, const char *who, const char *name, tsl_type type, int n_dims,
                         const int64_t *ne, const void *data, tsl_gguf_fill_fn fn, void *user) {
    char q[GGUF_QUOTE_MAX + 8];
    if (!w) return TSL_FAILED;
    if (!name) return gw_fail(w, TSL_FAILED, "%s: the name is NULL", who);
    size_t nlen = strlen(name);
    const char *qn = gguf_quote(q, sizeof q, name, nlen, GGUF_QUOTE_MAX);
    if (nlen == 0) return gw_fail(w, TSL_FAILED, "%s: the name is empty", who);
    if (nlen >= TSL_MAX_NAME)
        return gw_fail(w, TSL_FAILED, "%s: name '%s' is %zu bytes; at most %d fit", who, qn, nlen, TSL_MAX_NAME - 1);
    if (!tsl_type_valid((int)type) || tsl_type_block_size(type) == 0)
        return gw_fail(w, TSL_FAILED, "%s: tensor '%s' has unknown type %d", who, qn, (int)type);
    if (n_dims < 1 || n_dims > TSL_MAX_DIMS)
        return gw_fail(w, TSL_FAILED, "%s: tensor '%s' n_dims %d is not in 1..4", who, qn, n_dims);
    if (!ne) return gw_fail(w, TSL_FAILED, "%s: tensor '%s' ne is NULL", who, qn);
    if (!data && !fn) return gw_fail(w, TSL_FAILED, "%s: tensor '%s' has no data", who, qn);
    int64_t full[TSL_MAX_DIMS] = {1, 1, 1, 1};
    int64_t nel = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 0) return gw_fail(w, TSL_FAILED, "%s: tensor '%s' ne[%d] = %lld < 0", who, qn, d, (long long)ne[d]);
        full[d] = ne[d];
        if (ne[d] && nel > INT64_MAX / ne[d])
            return gw_fail(w, TSL_FAILED, "%s: tensor '%s' element count overflows", who, qn);
        nel *= ne[d];
    }
    int64_t bl = tsl_type_block_len(type);
    if (full[0] % bl)
        return gw_fail(w, TSL_FAILED, "%s: tensor '%s' ne[0] = %lld is not a multiple of the %s block length %lld",
                       who, qn, (long long)full[0], tsl_type_name(type), (long long)bl);
    uint64_t blocks = (uint64_t)(nel / bl);
    size_t bs = tsl_type_block_size(type);
    if (blocks > (uint64_t)(INT64_MAX / 2) / bs)
        return gw_fail(w, TSL_FAILED, "%s: tensor '%s' byte size overflows", who, qn);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) return gw_fail(w, TSL_FAILED, "%s: duplicate tensor name '%s'", who, qn);
    if (!grow((void **)&w->t, &w->cap_t, w->n_t + 1, sizeof *w->t))
        return gw_fail(w, TSL_ALLOC_FAILED, "%s: out of memory", who);
    gw_tensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    memcpy(t->name, name, nlen + 1);
    t->type = type;
    t->n_dims = n_dims;
    memcpy(t->ne, full, sizeof full);
    t->size = (size_t)(blocks * bs);
    t->data = data;
    t->fn = fn;
    t->user = user;
    return TSL_SUCCESS;
}

tsl_status tsl_gguf_writer_add_tensor(tsl_gguf_writer *w, const char *name, tsl_type type, int n_dims,
                                      const int64_t *ne, const void *data) {
    return gw_add(w, "add_tensor", name, type, n_dims, ne, data, NULL, NULL);
}

tsl_status tsl_gguf_writer_add_tensor_fn(tsl_gguf_writer *w, const char *name, tsl_type type, int n_dims,
                                         const int64_t *ne, tsl_gguf_fill_fn fn, void *user) {
    if (w && !fn) return gw_fail(w, TSL_FAILED, "add_tensor_fn: the fill callback is NULL");
    return gw_add(w, "add_tensor_fn", name, type, n_dims, ne, NULL, fn, user);
}

/* ---- output: a buffered fd that remembers its first error ---- */

#define GW_BUF (1u << 20)

typedef struct {
    int fd;
    uint8_t *buf;
    size_t len;
    uint64_t written; /* bytes handed to the file so far */
    const char *path; /* destination, for messages */
    tsl_error *err;
    bool failed;
    tsl_status status; /* of the first failure */
} gw_out;

static bool out_fail(gw_out *o, tsl_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static bool out_fail(gw_out *o, tsl_status s, const char *fmt, ...) {
    if (o->failed) return false;
    o->failed = true;
    o->status = s;
    char msg[200], q[GGUF_QUOTE_MAX + 8];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    error_set(o->err, s, NULL, NULL, -1, NULL, NULL, "gguf writer '%s': %s", gguf_quote_path(q, sizeof q, o->path),
              msg);
    gguf_set_hint(o->err, "check the destination (directory, permissions, free space)");
    return false;
}

static bool out_raw(gw_out *o, const uint8_t *p, size_t n) {
    while (n) {
        ssize_t r = write(o->fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return out_fail(o, TSL_FAILED, "write failed at byte %llu: %s", (unsigned long long)o->written,
                            r < 0 ? strerror(errno) : "no progress");
        p += r;
        n -= (size_t)r;
        o->written += (uint64_t)r;
    }
    return true;
}

static bool out_flush(gw_out *o) {
    if (o->failed) return false;
    bool ok = out_raw(o, o->buf, o->len);
    o->len = 0;
    return ok;
}

static bool out_put(gw_out *o, const void *p, size_t n) {
    if (o->failed) return false;
    if (n >= GW_BUF) return out_flush(o) && out_raw(o, p, n);
    if (o->len + n > GW_BUF && !out_flush(o)) return false;
    memcpy(o->buf + o->len, p, n);
    o->len += n;
    return true;
}

static bool out_le(gw_out *o, uint64_t v, size_t n) {
    uint8_t b[8];
    gw_le(b, v, n);
    return out_put(o, b, n);
}

static bool out_zeros(gw_out *o, size_t n) {
    static const uint8_t Z[64];
    while (n) {
        size_t k = n < sizeof Z ? n : sizeof Z;
        if (!out_put(o, Z, k)) return false;
        n -= k;
    }
    return true;
}

/* Tensor bytes from the caller's pointer or callback. */
static bool out_tensor(gw_out *o, const gw_tensor *t, uint8_t *chunk, size_t chunk_size) {
    if (!t->fn) return out_put(o, t->data, t->size);
    for (size_t off = 0; off < t->size;) {
        size_t n = t->size - off < chunk_size ? t->size - off : chunk_size;
        tsl_error cb;
        tsl_error_clear(&cb);
        tsl_status s = t->fn(t->user, chunk, off, n, &cb);
        if (s != TSL_SUCCESS) {
            if (cb.status != TSL_SUCCESS && cb.message[0]) {
                if (o->err) *o->err = cb;
                o->failed = true;
                o->status = s;
                return false;
            }
            return out_fail(o, s == TSL_SUCCESS ? TSL_FAILED : s,
                            "the data callback of tensor '%s' returned %s at byte %zu", t->name, tsl_status_str(s), off);
        }
        if (!out_put(o, chunk, n)) return false;
        off += n;
    }
    return true;
}

static size_t gw_pad(uint64_t x, size_t a) { return (size_t)((a - x % a) % a); }

/* The whole file, in order. */
static bool gw_emit(const tsl_gguf_writer *w, gw_out *o, size_t align, const uint64_t *offs, uint8_t *chunk,
                    size_t chunk_size) {
    out_put(o, "GGUF", 4);
    out_le(o, 3, 4);
    out_le(o, w->n_t, 8);
    out_le(o, w->n_kv, 8);
    for (size_t i = 0; i < w->n_kv; i++) {
        out_le(o, w->kv[i].key_len, 8);
        out_put(o, w->kv[i].key, w->kv[i].key_len);
        out_le(o, w->kv[i].type, 4);
        out_put(o, w->kv[i].val, w->kv[i].val_size);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const gw_tensor *t = &w->t[i];
        size_t nl = strlen(t->name);
        out_le(o, nl, 8);
        out_put(o, t->name, nl);
        out_le(o, (uint64_t)t->n_dims, 4);
        for (int d = 0; d < t->n_dims; d++) out_le(o, (uint64_t)t->ne[d], 8);
        out_le(o, (uint64_t)t->type, 4);
        out_le(o, offs[i], 8);
    }
    out_zeros(o, gw_pad(o->written + o->len, align));
    for (size_t i = 0; i < w->n_t && !o->failed; i++) {
        if (!out_tensor(o, &w->t[i], chunk, chunk_size)) return false;
        out_zeros(o, gw_pad(w->t[i].size, align));
    }
    return out_flush(o);
}

/* Directory part of path, for the temporary name and the directory sync. */
static char *gw_dirname(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

tsl_status tsl_gguf_writer_write(const tsl_gguf_writer *w, const char *path, tsl_error *err) {
    if (!w || !path)
        return error_set(err, TSL_FAILED, NULL, NULL, -1, NULL, NULL, "gguf writer: %s is NULL",
                         !w ? "the writer" : "the path");
    if (w->failed) {
        if (err) *err = w->first;
        return w->first.status;
    }
    gw_out o = {.fd = -1, .path = path, .err = err};
    size_t align = TSL_GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, GGUF_KEY_ALIGNMENT) == 0) align = gguf_rd32(w->kv[i].val); /* checked when set */

    /* offsets: each tensor aligned, in order */
    uint64_t *offs = malloc((w->n_t ? w->n_t : 1) * sizeof *offs);
    size_t chunk_size = 0;
    for (size_t i = 0; i < w->n_t; i++)
        if (w->t[i].fn && w->t[i].size > chunk_size) chunk_size = w->t[i].size;
    if (chunk_size > GW_BUF) chunk_size = GW_BUF;
    uint8_t *chunk = chunk_size ? malloc(chunk_size) : NULL;
    o.buf = malloc(GW_BUF);
    char *dir = gw_dirname(path);
    size_t tlen = strlen(path) + 64;
    char *tmp = malloc(tlen);
    if (!offs || !o.buf || !dir || !tmp || (chunk_size && !chunk)) {
        out_fail(&o, TSL_ALLOC_FAILED, "out of memory");
        goto done;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        offs[i] = off;
        off += w->t[i].size + gw_pad(w->t[i].size, align);
    }

    /* the temporary file sits next to the destination so rename is atomic;
     * its name is unique by pid, time and attempt, created exclusively */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    for (int attempt = 0; attempt < 100 && o.fd < 0; attempt++) {
        snprintf(tmp, tlen, "%s.tmp-%ld-%lx-%d", path, (long)getpid(), (unsigned long)ts.tv_nsec, attempt);
        o.fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (o.fd < 0 && errno != EEXIST) break;
    }
    if (o.fd < 0) {
        out_fail(&o, TSL_FAILED, "cannot create a temporary file in '%s': %s", dir, strerror(errno));
        goto done;
    }
    bool ok = gw_emit(w, &o, align, offs, chunk, chunk_size);
    if (ok && fsync(o.fd) != 0) ok = out_fail(&o, TSL_FAILED, "fsync failed: %s", strerror(errno));
    if (close(o.fd) != 0 && ok) ok = out_fail(&o, TSL_FAILED, "close failed: %s", strerror(errno));
    o.fd = -1;
    if (ok && rename(tmp, path) != 0) ok = out_fail(&o, TSL_FAILED, "rename into place failed: %s", strerror(errno));
    if (!ok) {
        unlink(tmp);
        goto done;
    }
    /* make the rename itself durable; the file is complete either way, so a
     * failure here is only logged */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        if (fsync(dfd) != 0) TSL_LOGW("gguf writer: fsync of directory '%s' failed: %s", dir, strerror(errno));
        close(dfd);
    }
done:
    if (o.fd >= 0) {
        close(o.fd);
        unlink(tmp);
    }
    free(offs);
    free(chunk);
    free(o.buf);
    free(dir);
    free(tmp);
    return o.failed ? o.status : TSL_SUCCESS;
}
