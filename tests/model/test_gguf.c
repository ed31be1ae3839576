/*
 * test_gguf.c - the GGUF reader and writer.
 *
 * A file with every value type and several tensor types is written with the
 * writer and read back (values, shapes, bytes, zero-copy pointers into the
 * mapping, tensors loaded into contexts). Then a broken-file corpus made by
 * mutating a hand-built file, whose field offsets are known: truncation at
 * every byte, bad magic and versions, impossible counts and lengths, bad
 * types, shapes, offsets, overlaps, duplicates, alignments and a nesting
 * bomb; each must fail with a message naming the field, and none may crash
 * (the ASan build runs the same). The writer's failures must leave nothing at
 * the destination.
 *
 * Modes used by tests/python/test_gguf_compat.py and the fuzz seeds:
 *   --dump FILE          print keys, types, values and tensor infos with a
 *                        checksum of each tensor's bytes, in a stable text form
 *   --write-sample FILE  write the sample file the round-trip test checks
 *   --write-corpus DIR   write small valid files to seed the fuzzer
 */
#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "tensile/model.h"
#include "test.h"

static char tmpdir[256];

static void path_in_tmp(char *dst, size_t n, const char *name) { snprintf(dst, n, "%s/%s", tmpdir, name); }

static float pat(int64_t i, int seed) { return (float)(((i * 7 + seed * 3) % 23) - 11) * 0.125f; }

static uint64_t fnv64(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

static uint8_t *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    if (b && n > 0 && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return b;
}

static bool write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* ------------------------------------------------------------------------ */
/* A byte builder for hand-made files                                        */
/* ------------------------------------------------------------------------ */

typedef struct {
    uint8_t *b;
    size_t n, cap;
} bb;

static void bb_put(bb *B, const void *p, size_t n) {
    if (B->n + n > B->cap) {
        B->cap = (B->n + n) * 2 + 64;
        B->b = realloc(B->b, B->cap);
    }
    memcpy(B->b + B->n, p, n);
    B->n += n;
}
static void bb_le(bb *B, uint64_t v, size_t n) {
    uint8_t t[8];
    for (size_t i = 0; i < n; i++) t[i] = (uint8_t)(v >> (8 * i));
    bb_put(B, t, n);
}
static void bb_u32(bb *B, uint32_t v) { bb_le(B, v, 4); }
static void bb_u64(bb *B, uint64_t v) { bb_le(B, v, 8); }
static void bb_str(bb *B, const char *s) {
    bb_u64(B, strlen(s));
    bb_put(B, s, strlen(s));
}
static void bb_zeros(bb *B, size_t n) {
    for (size_t i = 0; i < n; i++) bb_le(B, 0, 1);
}
static void patch_le(uint8_t *b, size_t off, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; i++) b[off + i] = (uint8_t)(v >> (8 * i));
}

/* Field map of the hand-built file: offset, length, and the text a message
 * about a truncation inside it must contain. */
typedef struct {
    size_t off, len;
    const char *expect;
} field;

#define MAX_FIELDS 256
static field fields[MAX_FIELDS];
static int n_fields;

static void mark(size_t off, size_t len, const char *expect) {
    if (n_fields < MAX_FIELDS) fields[n_fields++] = (field){off, len, expect};
}

/* Offsets in the base file that mutations patch. */
typedef struct {
    size_t version, tcount, kvcount;
    size_t align_type, align_val;
    size_t key_len_u8, key_u8_char;
    size_t bool_val, str_len, type_f64;
    size_t arr_i16_elem_type, arr_i16_len, arr_str_len, arr_u64_len;
    size_t dup_b_char;
    size_t t_name_len[3], t_name_last[3], t_ndims[3], t_dims[3], t_type[3], t_offset[3];
    size_t data_pos;
    uint64_t min_after_header; /* n_tensors * 33 + n_kv * 14 */
} base_offs;

/* A string field: its length (reported as "<what> length") and its bytes. */
static void mark_str(bb *B, const char *s, const char *len_expect) {
    mark(B->n, 8, len_expect);
    size_t at = B->n + 8;
    bb_str(B, s);
    if (strlen(s)) mark(at, strlen(s), len_expect);
}

static void kv_head(bb *B, const char *key, uint32_t type, size_t *type_at) {
    mark_str(B, key, "key length");
    if (type_at) *type_at = B->n;
    mark(B->n, 4, "value type");
    bb_u32(B, type);
}

/* The base file: 11 pairs (one of them a legal array of arrays), 3 tensors
 * packed without trailing padding, so every strict prefix is broken. */
static bb build_base(base_offs *o) {
    bb B = {0};
    n_fields = 0;
    memset(o, 0, sizeof *o);
    mark(0, 4, "magic");
    bb_put(&B, "GGUF", 4);
    o->version = B.n;
    mark(B.n, 4, "version");
    bb_u32(&B, 3);
    o->tcount = B.n;
    mark(B.n, 8, "tensor count");
    bb_u64(&B, 3);
    o->kvcount = B.n;
    mark(B.n, 8, "kv count");
    bb_u64(&B, 11);
    o->min_after_header = 3 * 33 + 11 * 14;

    kv_head(&B, "general.alignment", TSL_GGUF_U32, &o->align_type);
    o->align_val = B.n;
    mark(B.n, 4, "value (u32)");
    bb_u32(&B, 32);

    o->key_len_u8 = B.n;
    o->key_u8_char = B.n + 8 + 2;
    kv_head(&B, "k.u8", TSL_GGUF_U8, NULL);
    mark(B.n, 1, "value (u8)");
    bb_le(&B, 7, 1);

    kv_head(&B, "k.bool", TSL_GGUF_BOOL, NULL);
    o->bool_val = B.n;
    mark(B.n, 1, "value (bool)");
    bb_le(&B, 1, 1);

    kv_head(&B, "k.str", TSL_GGUF_STRING, NULL);
    o->str_len = B.n;
    mark_str(&B, "hello", "string length");

    kv_head(&B, "k.arr_i16", TSL_GGUF_ARRAY, NULL);
    o->arr_i16_elem_type = B.n;
    mark(B.n, 4, "array element type");
    bb_u32(&B, TSL_GGUF_I16);
    o->arr_i16_len = B.n;
    mark(B.n, 8, "array length");
    bb_u64(&B, 3);
    mark(B.n, 6, "array element (i16)");
    bb_le(&B, 1, 2);
    bb_le(&B, (uint16_t)-2, 2);
    bb_le(&B, 3, 2);

    kv_head(&B, "k.arr_str", TSL_GGUF_ARRAY, NULL);
    mark(B.n, 4, "array element type");
    bb_u32(&B, TSL_GGUF_STRING);
    o->arr_str_len = B.n;
    mark(B.n, 8, "array length");
    bb_u64(&B, 2);
    mark_str(&B, "a", "string length");
    mark_str(&B, "bc", "string length");

    kv_head(&B, "k.arr_u64", TSL_GGUF_ARRAY, NULL);
    mark(B.n, 4, "array element type");
    bb_u32(&B, TSL_GGUF_U64);
    o->arr_u64_len = B.n;
    mark(B.n, 8, "array length");
    bb_u64(&B, 2);
    mark(B.n, 16, "array element (u64)");
    bb_u64(&B, 1);
    bb_u64(&B, 2);

    /* [[1, 2] i32, ["x"] str]; inside an array whose elements do not fit in
     * what is left, the enclosing array's length is what is reported */
    kv_head(&B, "k.nested", TSL_GGUF_ARRAY, NULL);
    mark(B.n, 4, "array element type");
    bb_u32(&B, TSL_GGUF_ARRAY);
    mark(B.n, 8, "array length");
    bb_u64(&B, 2);
    mark(B.n, 4, "array length 2 of arr");
    bb_u32(&B, TSL_GGUF_I32);
    mark(B.n, 8, "array length 2 of arr");
    bb_u64(&B, 2);
    mark(B.n, 8, "array length 2 of arr");
    bb_u32(&B, 1);
    bb_u32(&B, 2);
    mark(B.n, 4, "array length 2 of arr");
    bb_u32(&B, TSL_GGUF_STRING);
    mark(B.n, 8, "array length"); /* the outer bound passed; this one is cut */
    bb_u64(&B, 1);
    mark(B.n, 8, "array length 1 of str");
    mark(B.n + 8, 1, "string length 1 runs past");
    bb_str(&B, "x");

    kv_head(&B, "k.f64", TSL_GGUF_F64, &o->type_f64);
    mark(B.n, 8, "value (f64)");
    bb_le(&B, 0x400921fb54442d18ull, 8);

    kv_head(&B, "dup.a", TSL_GGUF_U8, NULL);
    mark(B.n, 1, "value (u8)");
    bb_le(&B, 1, 1);
    o->dup_b_char = B.n + 8 + 4;
    kv_head(&B, "dup.b", TSL_GGUF_U8, NULL);
    mark(B.n, 1, "value (u8)");
    bb_le(&B, 2, 1);

    /* tensors: w.0 f32 [8, 2] at 0 (64 B), w.1 q8_0 [32, 1] at 64 (34 B),
     * w.2 f16 [4] at 128 (8 B) */
    static const struct {
        const char *name;
        uint32_t type, n_dims;
        uint64_t ne[2], offset;
    } T[3] = {{"w.0", TSL_TYPE_F32, 2, {8, 2}, 0}, {"w.1", TSL_TYPE_Q8_0, 2, {32, 1}, 64},
              {"w.2", TSL_TYPE_F16, 1, {4, 1}, 128}};
    for (int i = 0; i < 3; i++) {
        o->t_name_len[i] = B.n;
        o->t_name_last[i] = B.n + 8 + 2;
        mark_str(&B, T[i].name, "name length");
        o->t_ndims[i] = B.n;
        mark(B.n, 4, "n_dims");
        bb_u32(&B, T[i].n_dims);
        o->t_dims[i] = B.n;
        for (uint32_t d = 0; d < T[i].n_dims; d++) {
            mark(B.n, 8, d == 0 ? "dims[0]" : "dims[1]");
            bb_u64(&B, T[i].ne[d]);
        }
        o->t_type[i] = B.n;
        mark(B.n, 4, "tensor type");
        bb_u32(&B, T[i].type);
        o->t_offset[i] = B.n;
        mark(B.n, 8, "offset");
        bb_u64(&B, T[i].offset);
    }
    bb_zeros(&B, (32 - B.n % 32) % 32);
    o->data_pos = B.n;
    mark(B.n, 136, "runs past the end");
    for (int i = 0; i < 136; i++) bb_le(&B, (uint64_t)(i * 13 + 5), 1);
    return B;
}

/* ------------------------------------------------------------------------ */
/* The sample file (written with the writer)                                 */
/* ------------------------------------------------------------------------ */

typedef struct {
    float f32[64 * 3];
    uint16_t f16[32 * 4];
    uint8_t q8[2 * 2 * 34];
    uint8_t q4[3 * 18];
    int32_t i32[3];
    uint16_t bf16[16];
} sample_data;

static tsl_status fill_norm(void *user, void *dst, size_t offset, size_t n, tsl_error *err) {
    (void)err;
    int *calls = user;
    (*calls)++;
    float v[5];
    for (int i = 0; i < 5; i++) v[i] = pat(i, 9);
    memcpy(dst, (const uint8_t *)v + offset, n);
    return TSL_SUCCESS;
}

/* Nested arrays come in through copy_kv from a hand-built file. */
static bb build_nested_source(void) {
    bb B = {0};
    bb_put(&B, "GGUF", 4);
    bb_u32(&B, 3);
    bb_u64(&B, 0);
    bb_u64(&B, 1);
    bb_str(&B, "t.nested");
    bb_u32(&B, TSL_GGUF_ARRAY);
    bb_u32(&B, TSL_GGUF_ARRAY);
    bb_u64(&B, 3);
    bb_u32(&B, TSL_GGUF_I32); /* [1, -2] */
    bb_u64(&B, 2);
    bb_u32(&B, 1);
    bb_u32(&B, (uint32_t)-2);
    bb_u32(&B, TSL_GGUF_I32); /* [] */
    bb_u64(&B, 0);
    bb_u32(&B, TSL_GGUF_I32); /* [7] */
    bb_u64(&B, 1);
    bb_u32(&B, 7);
    return B;
}

static void make_sample_data(sample_data *d) {
    for (int i = 0; i < 64 * 3; i++) d->f32[i] = pat(i, 1);
    for (int i = 0; i < 32 * 4; i++) d->f16[i] = tsl_fp32_to_fp16(pat(i, 2));
    float q[64 * 2];
    for (int i = 0; i < 64 * 2; i++) q[i] = pat(i, 3);
    tsl_quantize(TSL_TYPE_Q8_0, q, d->q8, 64 * 2);
    for (int i = 0; i < 32 * 3; i++) q[i] = pat(i, 4);
    tsl_quantize(TSL_TYPE_Q4_0, q, d->q4, 32 * 3);
    d->i32[0] = -5;
    d->i32[1] = 0;
    d->i32[2] = 123456;
    for (int i = 0; i < 16; i++) d->bf16[i] = tsl_fp32_to_bf16(pat(i, 5));
}

static const char *const SAMPLE_STRS[] = {"alpha", "", "\xce\xb3 gamma"};

/* Build the sample writer: every value type, arrays of every fixed-size type,
 * strings, an empty array, a nested array, alignment 64, seven tensors of six
 * types (one produced by a callback). */
static tsl_gguf_writer *make_sample_writer(const sample_data *d, int *fill_calls) {
    tsl_gguf_writer *w = tsl_gguf_writer_new();
    tsl_gguf_writer_set_str(w, "general.architecture", "tensile-test");
    tsl_gguf_writer_set_str(w, "general.name", "sample \xc3\xbcn\xc3\xaf" "code");
    tsl_gguf_writer_set_alignment(w, 64);
    tsl_gguf_writer_set_u8(w, "t.u8", 200);
    tsl_gguf_writer_set_i8(w, "t.i8", -100);
    tsl_gguf_writer_set_u16(w, "t.u16", 60000);
    tsl_gguf_writer_set_i16(w, "t.i16", -30000);
    tsl_gguf_writer_set_u32(w, "t.u32", 4000000000u);
    tsl_gguf_writer_set_i32(w, "t.i32", -2000000000);
    tsl_gguf_writer_set_u64(w, "t.u64", 9223372036854775813ull);
    tsl_gguf_writer_set_i64(w, "t.i64", -4611686018427387907ll);
    tsl_gguf_writer_set_f32(w, "t.f32", 3.14159f);
    tsl_gguf_writer_set_f64(w, "t.f64", -2.718281828459045);
    tsl_gguf_writer_set_bool(w, "t.bool", true);
    tsl_gguf_writer_set_str(w, "t.str_empty", "");
    static const uint8_t a_u8[] = {0, 1, 255};
    static const int8_t a_i8[] = {-128, 0, 127};
    static const uint16_t a_u16[] = {1, 65535};
    static const int16_t a_i16[] = {-32768, 5, 32767};
    static const uint32_t a_u32[] = {7, 4294967295u};
    static const int32_t a_i32[] = {-2147483647 - 1, 0, 2147483647};
    static const uint64_t a_u64[] = {18446744073709551615ull, 3};
    static const int64_t a_i64[] = {-9223372036854775807ll - 1, 9223372036854775807ll};
    static const float a_f32[] = {0.5f, -1.25f, 1e-30f};
    static const double a_f64[] = {1e300, -0.0};
    static const bool a_bool[] = {true, false, true};
    tsl_gguf_writer_set_arr(w, "t.arr.u8", TSL_GGUF_U8, a_u8, 3);
    tsl_gguf_writer_set_arr(w, "t.arr.i8", TSL_GGUF_I8, a_i8, 3);
    tsl_gguf_writer_set_arr(w, "t.arr.u16", TSL_GGUF_U16, a_u16, 2);
    tsl_gguf_writer_set_arr(w, "t.arr.i16", TSL_GGUF_I16, a_i16, 3);
    tsl_gguf_writer_set_arr(w, "t.arr.u32", TSL_GGUF_U32, a_u32, 2);
    tsl_gguf_writer_set_arr(w, "t.arr.i32", TSL_GGUF_I32, a_i32, 3);
    tsl_gguf_writer_set_arr(w, "t.arr.u64", TSL_GGUF_U64, a_u64, 2);
    tsl_gguf_writer_set_arr(w, "t.arr.i64", TSL_GGUF_I64, a_i64, 2);
    tsl_gguf_writer_set_arr(w, "t.arr.f32", TSL_GGUF_F32, a_f32, 3);
    tsl_gguf_writer_set_arr(w, "t.arr.f64", TSL_GGUF_F64, a_f64, 2);
    tsl_gguf_writer_set_arr(w, "t.arr.bool", TSL_GGUF_BOOL, a_bool, 3);
    tsl_gguf_writer_set_arr(w, "t.arr.empty", TSL_GGUF_U32, NULL, 0);
    tsl_gguf_writer_set_arr_str(w, "t.arr.str", SAMPLE_STRS, 3);
    bb nested = build_nested_source();
    tsl_gguf *ng = tsl_gguf_open_memory(nested.b, nested.n, "nested", NULL);
    tsl_gguf_writer_copy_kv(w, ng, "t.nested");
    tsl_gguf_close(ng);
    free(nested.b);

    tsl_gguf_writer_add_tensor(w, "tok_embd.weight", TSL_TYPE_F32, 2, (int64_t[]){64, 3}, d->f32);
    tsl_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", TSL_TYPE_F16, 2, (int64_t[]){32, 4}, d->f16);
    tsl_gguf_writer_add_tensor(w, "blk.0.ffn_up.weight", TSL_TYPE_Q8_0, 2, (int64_t[]){64, 2}, d->q8);
    tsl_gguf_writer_add_tensor(w, "blk.0.ffn_down.weight", TSL_TYPE_Q4_0, 3, (int64_t[]){32, 3, 1}, d->q4);
    tsl_gguf_writer_add_tensor_fn(w, "output_norm.weight", TSL_TYPE_F32, 1, (int64_t[]){5}, fill_norm, fill_calls);
    tsl_gguf_writer_add_tensor(w, "pos.i32", TSL_TYPE_I32, 1, (int64_t[]){3}, d->i32);
    tsl_gguf_writer_add_tensor(w, "emb.bf16", TSL_TYPE_BF16, 4, (int64_t[]){4, 2, 1, 2}, d->bf16);
    return w;
}

static tsl_status write_sample(const char *path, tsl_error *err) {
    sample_data *d = calloc(1, sizeof *d);
    make_sample_data(d);
    int calls = 0;
    tsl_gguf_writer *w = make_sample_writer(d, &calls);
    tsl_status s = tsl_gguf_writer_write(w, path, err);
    tsl_gguf_writer_free(w);
    free(d);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Round trip                                                                */
/* ------------------------------------------------------------------------ */

static void test_roundtrip(void) {
    char path[512];
    path_in_tmp(path, sizeof path, "sample.gguf");
    sample_data *d = calloc(1, sizeof *d);
    make_sample_data(d);
    int calls = 0;
    tsl_gguf_writer *w = make_sample_writer(d, &calls);
    tsl_error err;
    CHECK(tsl_gguf_writer_status(w, &err) == TSL_SUCCESS);
    tsl_status s = tsl_gguf_writer_write(w, path, &err);
    CHECKF(s == TSL_SUCCESS, "%s", err.message);
    CHECK(calls == 1); /* 20 bytes: one chunk */
    tsl_gguf_writer_free(w);

    tsl_gguf *g = tsl_gguf_open(path, &err);
    CHECKF(g != NULL, "%s", err.message);
    if (!g) {
        free(d);
        return;
    }
    CHECK(tsl_gguf_version(g) == 3);
    CHECK(tsl_gguf_alignment(g) == 64);
    CHECK(tsl_gguf_data_offset(g) % 64 == 0);
    CHECK(tsl_gguf_kv_count(g) == 29);
    CHECK(strcmp(tsl_gguf_key(g, 0), "general.architecture") == 0);
    CHECK(strcmp(tsl_gguf_key(g, 2), "general.alignment") == 0);
    CHECK(tsl_gguf_key(g, 29) == NULL && tsl_gguf_key(g, -1) == NULL);
    CHECK(tsl_gguf_kv_type(g, 3) == TSL_GGUF_U8);
    CHECK(tsl_gguf_kv_type(g, 99) == TSL_GGUF_NONE);
    CHECK(tsl_gguf_find_key(g, "t.f64") == 12);
    CHECK(tsl_gguf_find_key(g, "t.nope") == -1);
    CHECK(tsl_gguf_find_key(g, NULL) == -1);

    const char *str;
    size_t len;
    CHECK(tsl_gguf_get_str(g, "general.architecture", &str, &len, &err) == TSL_SUCCESS);
    CHECK(strcmp(str, "tensile-test") == 0 && len == 12);
    CHECK(tsl_gguf_get_str(g, "general.name", &str, NULL, &err) == TSL_SUCCESS);
    CHECK(strcmp(str, "sample \xc3\xbcn\xc3\xaf" "code") == 0);
    CHECK(tsl_gguf_get_str(g, "t.str_empty", &str, &len, &err) == TSL_SUCCESS);
    CHECK(str[0] == '\0' && len == 0);

    uint8_t u8 = 0;
    int8_t i8 = 0;
    uint16_t u16 = 0;
    int16_t i16 = 0;
    uint32_t u32 = 0;
    int32_t i32 = 0;
    uint64_t u64 = 0;
    int64_t i64 = 0;
    float f32 = 0;
    double f64 = 0;
    bool b = false;
    CHECK(tsl_gguf_get_u8(g, "t.u8", &u8, NULL) == TSL_SUCCESS && u8 == 200);
    CHECK(tsl_gguf_get_i8(g, "t.i8", &i8, NULL) == TSL_SUCCESS && i8 == -100);
    CHECK(tsl_gguf_get_u16(g, "t.u16", &u16, NULL) == TSL_SUCCESS && u16 == 60000);
    CHECK(tsl_gguf_get_i16(g, "t.i16", &i16, NULL) == TSL_SUCCESS && i16 == -30000);
    CHECK(tsl_gguf_get_u32(g, "t.u32", &u32, NULL) == TSL_SUCCESS && u32 == 4000000000u);
    CHECK(tsl_gguf_get_i32(g, "t.i32", &i32, NULL) == TSL_SUCCESS && i32 == -2000000000);
    CHECK(tsl_gguf_get_u64(g, "t.u64", &u64, NULL) == TSL_SUCCESS && u64 == 9223372036854775813ull);
    CHECK(tsl_gguf_get_i64(g, "t.i64", &i64, NULL) == TSL_SUCCESS && i64 == -4611686018427387907ll);
    CHECK(tsl_gguf_get_f32(g, "t.f32", &f32, NULL) == TSL_SUCCESS && f32 == 3.14159f);
    CHECK(tsl_gguf_get_f64(g, "t.f64", &f64, NULL) == TSL_SUCCESS && f64 == -2.718281828459045);
    CHECK(tsl_gguf_get_bool(g, "t.bool", &b, NULL) == TSL_SUCCESS && b);
    CHECK(tsl_gguf_get_u32(g, "general.alignment", &u32, NULL) == TSL_SUCCESS && u32 == 64);

    /* lenient getters */
    CHECK(tsl_gguf_get_int(g, "t.u16", &i64, NULL) == TSL_SUCCESS && i64 == 60000);
    CHECK(tsl_gguf_get_int(g, "t.i8", &i64, NULL) == TSL_SUCCESS && i64 == -100);
    CHECK(tsl_gguf_get_int(g, "t.u32", &i64, NULL) == TSL_SUCCESS && i64 == 4000000000ll);
    CHECK(tsl_gguf_get_int(g, "t.bool", &i64, NULL) == TSL_SUCCESS && i64 == 1);
    i64 = 42;
    CHECK(tsl_gguf_get_int(g, "t.u64", &i64, &err) == TSL_FAILED && i64 == 42); /* above INT64_MAX */
    CHECK_STR_CONTAINS(err.message, "INT64_MAX");
    CHECK(tsl_gguf_get_int(g, "t.f32", &i64, &err) == TSL_FAILED && i64 == 42);
    CHECK(tsl_gguf_get_float(g, "t.f32", &f64, NULL) == TSL_SUCCESS && f64 == (double)3.14159f);
    CHECK(tsl_gguf_get_float(g, "t.i32", &f64, NULL) == TSL_SUCCESS && f64 == -2000000000.0);
    CHECK(tsl_gguf_get_float(g, "general.name", &f64, &err) == TSL_FAILED);

    /* wrong type, missing key, NULL arguments: an error, value untouched */
    u32 = 77;
    CHECK(tsl_gguf_get_u32(g, "t.u16", &u32, &err) == TSL_FAILED && u32 == 77);
    CHECK(err.status == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "'t.u16' holds u16, not u32");
    CHECK(tsl_gguf_get_u32(g, "t.missing", &u32, &err) == TSL_FAILED && u32 == 77);
    CHECK_STR_CONTAINS(err.message, "no key 't.missing'");
    CHECK(tsl_gguf_get_u32(g, "t.u32", NULL, &err) == TSL_FAILED);
    CHECK(tsl_gguf_get_u32(g, NULL, &u32, &err) == TSL_FAILED);
    CHECK(tsl_gguf_get_u32(NULL, "t.u32", &u32, &err) == TSL_FAILED);
    CHECK(tsl_gguf_get_str(g, "t.u8", &str, NULL, &err) == TSL_FAILED);
    CHECK(tsl_gguf_get_f32(g, "t.arr.f32", &f32, NULL) == TSL_FAILED);
    CHECK(tsl_gguf_get_arr(g, "t.u8", NULL, NULL, NULL, NULL, &err) == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "holds u8, not arr");

    /* arrays */
    tsl_gguf_type et;
    uint64_t n;
    const void *data;
    size_t nbytes;
    CHECK(tsl_gguf_get_arr(g, "t.arr.i16", &et, &n, &data, &nbytes, &err) == TSL_SUCCESS);
    CHECK(et == TSL_GGUF_I16 && n == 3 && nbytes == 6);
    int16_t i16s[3];
    memcpy(i16s, data, 6);
    CHECK(i16s[0] == -32768 && i16s[1] == 5 && i16s[2] == 32767);
    CHECK(tsl_gguf_get_arr_int(g, "t.arr.u8", 2, &i64, NULL) == TSL_SUCCESS && i64 == 255);
    CHECK(tsl_gguf_get_arr_int(g, "t.arr.i8", 0, &i64, NULL) == TSL_SUCCESS && i64 == -128);
    CHECK(tsl_gguf_get_arr_int(g, "t.arr.u16", 1, &i64, NULL) == TSL_SUCCESS && i64 == 65535);
    CHECK(tsl_gguf_get_arr_int(g, "t.arr.u32", 1, &i64, NULL) == TSL_SUCCESS && i64 == 4294967295ll);
    CHECK(tsl_gguf_get_arr_int(g, "t.arr.i32", 0, &i64, NULL) == TSL_SUCCESS && i64 == -2147483647 - 1);
    CHECK(tsl_gguf_get_arr_int(g, "t.arr.i64", 1, &i64, NULL) == TSL_SUCCESS && i64 == 9223372036854775807ll);
    CHECK(tsl_gguf_get_arr_int(g, "t.arr.u64", 1, &i64, NULL) == TSL_SUCCESS && i64 == 3);
    CHECK(tsl_gguf_get_arr_int(g, "t.arr.u64", 0, &i64, &err) == TSL_FAILED); /* 2^64-1 */
    CHECK(tsl_gguf_get_arr_int(g, "t.arr.bool", 1, &i64, NULL) == TSL_SUCCESS && i64 == 0);
    CHECK(tsl_gguf_get_arr_int(g, "t.arr.bool", 2, &i64, NULL) == TSL_SUCCESS && i64 == 1);
    CHECK(tsl_gguf_get_arr_float(g, "t.arr.f32", 1, &f64, NULL) == TSL_SUCCESS && f64 == -1.25);
    CHECK(tsl_gguf_get_arr_float(g, "t.arr.f32", 2, &f64, NULL) == TSL_SUCCESS && f64 == (double)1e-30f);
    CHECK(tsl_gguf_get_arr_float(g, "t.arr.f64", 0, &f64, NULL) == TSL_SUCCESS && f64 == 1e300);
    CHECK(tsl_gguf_get_arr_float(g, "t.arr.f64", 1, &f64, NULL) == TSL_SUCCESS && f64 == 0.0 && signbit(f64));
    CHECK(tsl_gguf_get_arr_float(g, "t.arr.i16", 0, &f64, NULL) == TSL_SUCCESS && f64 == -32768.0);
    CHECK(tsl_gguf_get_arr_float(g, "t.arr.f32", 3, &f64, &err) == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "index 3 is past the end of array 't.arr.f32' (3 elements)");
    CHECK(tsl_gguf_get_arr_int(g, "t.arr.f32", 0, &i64, &err) == TSL_FAILED);
    CHECK(tsl_gguf_get_arr_int(g, "t.arr.str", 0, &i64, &err) == TSL_FAILED);
    CHECK(tsl_gguf_get_arr_str(g, "t.arr.i32", 0, &str, NULL, &err) == TSL_FAILED);
    CHECK(tsl_gguf_get_arr(g, "t.arr.str", &et, &n, NULL, NULL, NULL) == TSL_SUCCESS);
    CHECK(et == TSL_GGUF_STRING && n == 3);
    for (uint64_t i = 0; i < 3; i++) {
        CHECK(tsl_gguf_get_arr_str(g, "t.arr.str", i, &str, &len, NULL) == TSL_SUCCESS);
        CHECK(strcmp(str, SAMPLE_STRS[i]) == 0 && len == strlen(SAMPLE_STRS[i]));
    }
    CHECK(tsl_gguf_get_arr(g, "t.arr.empty", &et, &n, NULL, &nbytes, NULL) == TSL_SUCCESS);
    CHECK(et == TSL_GGUF_U32 && n == 0 && nbytes == 0);
    CHECK(tsl_gguf_get_arr_int(g, "t.arr.empty", 0, &i64, &err) == TSL_FAILED);
    /* the nested array arrived verbatim: 3 sub-arrays, 12 + 8 + 12 + 12 + 4 bytes */
    CHECK(tsl_gguf_get_arr(g, "t.nested", &et, &n, &data, &nbytes, NULL) == TSL_SUCCESS);
    CHECK(et == TSL_GGUF_ARRAY && n == 3 && nbytes == 48);
    if (nbytes == 48) {
        const uint8_t *p = data;
        CHECK(p[0] == TSL_GGUF_I32 && p[4] == 2 && p[12] == 1 && p[16] == 0xfe && p[44] == 7);
    }
    CHECK(tsl_gguf_get_arr_int(g, "t.nested", 0, &i64, &err) == TSL_FAILED);

    /* tensors: shapes, offsets, bytes, zero-copy */
    CHECK(tsl_gguf_tensor_count(g) == 7);
    CHECK(tsl_gguf_tensor(g, 7) == NULL && tsl_gguf_tensor(g, -1) == NULL);
    CHECK(tsl_gguf_find_tensor(g, "output_norm.weight") == 4);
    CHECK(tsl_gguf_find_tensor(g, "nope") == -1);
    static const struct {
        const char *name;
        tsl_type type;
        int n_dims;
        int64_t ne[4];
        size_t size;
    } E[7] = {
        {"tok_embd.weight", TSL_TYPE_F32, 2, {64, 3, 1, 1}, 64 * 3 * 4},
        {"blk.0.attn_q.weight", TSL_TYPE_F16, 2, {32, 4, 1, 1}, 32 * 4 * 2},
        {"blk.0.ffn_up.weight", TSL_TYPE_Q8_0, 2, {64, 2, 1, 1}, 4 * 34},
        {"blk.0.ffn_down.weight", TSL_TYPE_Q4_0, 3, {32, 3, 1, 1}, 3 * 18},
        {"output_norm.weight", TSL_TYPE_F32, 1, {5, 1, 1, 1}, 20},
        {"pos.i32", TSL_TYPE_I32, 1, {3, 1, 1, 1}, 12},
        {"emb.bf16", TSL_TYPE_BF16, 4, {4, 2, 1, 2}, 32},
    };
    const void *src[7] = {d->f32, d->f16, d->q8, d->q4, NULL, d->i32, d->bf16};
    float norm[5];
    for (int i = 0; i < 5; i++) norm[i] = pat(i, 9);
    src[4] = norm;
    size_t fsize;
    uint8_t *file = read_file(path, &fsize);
    CHECK(file != NULL && fsize == tsl_gguf_file_size(g));
    long page = sysconf(_SC_PAGESIZE);
    const uint8_t *section = NULL;
    uint64_t expect_off = 0;
    for (int i = 0; i < 7; i++) {
        const tsl_gguf_tensor_info *ti = tsl_gguf_tensor(g, i);
        CHECK(strcmp(ti->name, E[i].name) == 0);
        CHECK(ti->type == E[i].type && ti->n_dims == E[i].n_dims);
        CHECK(memcmp(ti->ne, E[i].ne, sizeof ti->ne) == 0);
        CHECK(ti->size == E[i].size);
        CHECK(ti->offset == expect_off); /* packed in order, each aligned to 64 */
        expect_off += (ti->size + 63) / 64 * 64;
        CHECK(memcmp(ti->data, src[i], ti->size) == 0);
        CHECK(file && memcmp(file + tsl_gguf_data_offset(g) + ti->offset, ti->data, ti->size) == 0);
        /* zero-copy: every pointer is the same page-aligned mapping plus the
         * file offset, so it is not a copy */
        const uint8_t *base = (const uint8_t *)ti->data - ti->offset;
        if (!section) section = base;
        CHECK(base == section);
        CHECK((uintptr_t)(base - tsl_gguf_data_offset(g)) % (uintptr_t)page == 0);
        CHECK((uintptr_t)ti->data % 64 == 0);
    }
    /* the file ends padded to the alignment, as the gguf package writes */
    CHECK(fsize == tsl_gguf_data_offset(g) + expect_off);
    CHECK(tsl_gguf_data_size(g) == 768 + 256 + 136 + 54 + 20 + 12 + 32);
    free(file);

    /* zero-copy load into a no_alloc context */
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){1 << 16, true});
    CHECK(tsl_gguf_load_tensors(g, ctx, &err) == TSL_SUCCESS);
    int count = 0;
    for (tsl_tensor *t = tsl_ctx_first_tensor(ctx); t; t = tsl_ctx_next_tensor(ctx, t), count++) {
        const tsl_gguf_tensor_info *ti = tsl_gguf_tensor(g, count);
        if (!ti) break;
        CHECK(strcmp(t->name, ti->name) == 0);
        CHECK(t->type == ti->type && memcmp(t->ne, ti->ne, sizeof t->ne) == 0);
        CHECK(t->data == ti->data);
        CHECK(tsl_nbytes(t) == ti->size);
    }
    CHECK(count == 7);
    tsl_tensor *te = tsl_ctx_get_tensor(ctx, "tok_embd.weight");
    CHECK(te && tsl_get_f32_nd(te, 5, 2, 0, 0) == pat(2 * 64 + 5, 1));
    tsl_ctx_free(ctx);

    /* a context with data gets copies */
    ctx = tsl_ctx_new((tsl_ctx_params){1 << 16, false});
    CHECK(tsl_gguf_load_tensors(g, ctx, &err) == TSL_SUCCESS);
    tsl_tensor *q = tsl_ctx_get_tensor(ctx, "blk.0.ffn_up.weight");
    const tsl_gguf_tensor_info *qi = tsl_gguf_tensor(g, 2);
    CHECK(q && q->data != qi->data && memcmp(q->data, qi->data, qi->size) == 0);
    tsl_ctx_free(ctx);

    /* an arena too small: a clear error naming the tensor */
    ctx = tsl_ctx_new((tsl_ctx_params){sizeof(tsl_tensor) * 2, true});
    CHECK(tsl_gguf_load_tensors(g, ctx, &err) == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "tensor ");
    CHECK(err.tensor[0] != '\0');
    tsl_ctx_free(ctx);
    CHECK(tsl_gguf_load_tensors(NULL, NULL, &err) == TSL_FAILED);
    tsl_gguf_close(g);
    tsl_gguf_close(NULL);
    free(d);
}

/* The same bytes through open_memory give the same view. */
static void test_open_memory(void) {
    char path[512];
    path_in_tmp(path, sizeof path, "sample.gguf");
    tsl_error err;
    CHECK(write_sample(path, &err) == TSL_SUCCESS);
    size_t n;
    uint8_t *b = read_file(path, &n);
    tsl_gguf *g = tsl_gguf_open_memory(b, n, "mem.gguf", &err);
    CHECKF(g != NULL, "%s", err.message);
    if (g) {
        CHECK(tsl_gguf_kv_count(g) == 29 && tsl_gguf_tensor_count(g) == 7);
        const tsl_gguf_tensor_info *ti = tsl_gguf_tensor(g, 3);
        CHECK((const uint8_t *)ti->data == b + tsl_gguf_data_offset(g) + ti->offset);
        tsl_gguf_close(g);
    }
    free(b);
    CHECK(tsl_gguf_open_memory(NULL, 10, NULL, &err) == NULL);
    CHECK(tsl_gguf_open_memory(NULL, 0, NULL, &err) == NULL);
    CHECK_STR_CONTAINS(err.message, "magic");
}

/* A file with no pairs and no tensors is valid (24 bytes); one with tensors
 * of zero elements too. */
static void test_minimal_files(void) {
    bb B = {0};
    bb_put(&B, "GGUF", 4);
    bb_u32(&B, 3);
    bb_u64(&B, 0);
    bb_u64(&B, 0);
    tsl_error err;
    tsl_gguf *g = tsl_gguf_open_memory(B.b, B.n, "min", &err);
    CHECKF(g != NULL, "%s", err.message);
    CHECK(tsl_gguf_kv_count(g) == 0 && tsl_gguf_tensor_count(g) == 0 && tsl_gguf_alignment(g) == 32);
    tsl_gguf_close(g);
    /* version 2 reads the same */
    patch_le(B.b, 4, 2, 4);
    g = tsl_gguf_open_memory(B.b, B.n, "v2", &err);
    CHECK(g != NULL && tsl_gguf_version(g) == 2);
    tsl_gguf_close(g);
    free(B.b);

    /* writer: no pairs, no tensors, then a zero-element tensor */
    char path[512];
    path_in_tmp(path, sizeof path, "empty.gguf");
    tsl_gguf_writer *w = tsl_gguf_writer_new();
    CHECK(tsl_gguf_writer_write(w, path, &err) == TSL_SUCCESS);
    g = tsl_gguf_open(path, &err);
    CHECK(g != NULL && tsl_gguf_kv_count(g) == 0);
    tsl_gguf_close(g);
    CHECK(tsl_gguf_writer_add_tensor(w, "z", TSL_TYPE_F32, 2, (int64_t[]){0, 4}, "") == TSL_SUCCESS);
    CHECK(tsl_gguf_writer_add_tensor(w, "one", TSL_TYPE_F32, 1, (int64_t[]){1}, "abcd") == TSL_SUCCESS);
    CHECK(tsl_gguf_writer_write(w, path, &err) == TSL_SUCCESS);
    g = tsl_gguf_open(path, &err);
    CHECKF(g != NULL, "%s", err.message);
    if (g) {
        CHECK(tsl_gguf_tensor(g, 0)->size == 0 && tsl_gguf_tensor(g, 0)->ne[1] == 4);
        CHECK(memcmp(tsl_gguf_tensor(g, 1)->data, "abcd", 4) == 0);
        tsl_gguf_close(g);
    }
    tsl_gguf_writer_free(w);
}

/* ------------------------------------------------------------------------ */
/* The broken corpus                                                         */
/* ------------------------------------------------------------------------ */

/* Open bytes that must be refused; the message must contain expect. */
static void expect_refused(const uint8_t *b, size_t n, const char *expect, const char *what) {
    tsl_error err;
    tsl_error_clear(&err);
    tsl_gguf *g = tsl_gguf_open_memory(b, n, "broken.gguf", &err);
    CHECKF(g == NULL, "%s: opened", what);
    if (g) {
        tsl_gguf_close(g);
        return;
    }
    CHECKF(err.status == TSL_FAILED, "%s: status %d", what, (int)err.status);
    CHECKF(strstr(err.message, "gguf 'broken.gguf'") != NULL, "%s: %s", what, err.message);
    CHECKF(strstr(err.message, expect) != NULL, "%s: expected '%s' in: %s", what, expect, err.message);
    CHECKF(strstr(err.message, "at header offset") != NULL, "%s: %s", what, err.message);
}

/* Patch a copy of the base file and expect a refusal. */
static void mutate(const bb *base, size_t off, uint64_t v, size_t width, const char *expect, const char *what) {
    uint8_t *b = malloc(base->n);
    memcpy(b, base->b, base->n);
    patch_le(b, off, v, width);
    expect_refused(b, base->n, expect, what);
    free(b);
}

static void test_base_is_valid(void) {
    base_offs o;
    bb B = build_base(&o);
    tsl_error err;
    tsl_gguf *g = tsl_gguf_open_memory(B.b, B.n, "base", &err);
    CHECKF(g != NULL, "%s", err.message);
    if (g) {
        CHECK(tsl_gguf_kv_count(g) == 11 && tsl_gguf_tensor_count(g) == 3);
        CHECK(tsl_gguf_data_offset(g) == o.data_pos);
        tsl_gguf_type et;
        uint64_t n;
        CHECK(tsl_gguf_get_arr(g, "k.nested", &et, &n, NULL, NULL, NULL) == TSL_SUCCESS);
        CHECK(et == TSL_GGUF_ARRAY && n == 2);
        const char *s;
        CHECK(tsl_gguf_get_arr_str(g, "k.arr_str", 1, &s, NULL, NULL) == TSL_SUCCESS && strcmp(s, "bc") == 0);
        tsl_gguf_close(g);
    }
    free(B.b);
}

/* Every strict prefix is refused; inside each field the message names it. */
static void test_truncation(void) {
    base_offs o;
    bb B = build_base(&o);
    for (size_t L = 0; L < B.n; L++) {
        tsl_error err;
        tsl_gguf *g = tsl_gguf_open_memory(B.b, L, "broken.gguf", &err);
        CHECKF(g == NULL, "prefix %zu opened", L);
        tsl_gguf_close(g);
        if (!g) CHECKF(strstr(err.message, "gguf 'broken.gguf'") != NULL, "prefix %zu: %s", L, err.message);
    }
    int checked = 0;
    for (int f = 0; f < n_fields; f++) {
        size_t ends[2] = {fields[f].off, fields[f].off + fields[f].len - 1};
        for (int k = 0; k < 2; k++) {
            size_t L = ends[k];
            char what[64];
            snprintf(what, sizeof what, "truncated at %zu", L);
            /* before the counts fit, the header check refuses first */
            const char *expect = L < 24 + o.min_after_header && L >= 24 ? "count" : fields[f].expect;
            if (L < 24 && f >= 3) continue;
            expect_refused(B.b, L, expect, what);
            checked++;
        }
    }
    CHECK(checked > 100);
    /* and through files: empty, one byte, mid-header, mid-data */
    size_t lens[] = {0, 1, 20, o.data_pos + 70};
    const char *expect[] = {"empty (0 bytes)", "magic", "kv count", "runs past the end"};
    for (int i = 0; i < 4; i++) {
        char path[512];
        path_in_tmp(path, sizeof path, "trunc.gguf");
        CHECK(write_bytes(path, B.b, lens[i]));
        tsl_error err;
        tsl_gguf *g = tsl_gguf_open(path, &err);
        CHECK(g == NULL);
        tsl_gguf_close(g);
        CHECK_STR_CONTAINS(err.message, expect[i]);
        CHECK_STR_CONTAINS(err.message, "trunc.gguf");
    }
    tsl_error err;
    CHECK(tsl_gguf_open("/nonexistent/x.gguf", &err) == NULL);
    CHECK_STR_CONTAINS(err.message, "cannot open");
    CHECK(tsl_gguf_open(tmpdir, &err) == NULL);
    CHECK_STR_CONTAINS(err.message, "not a regular file");
    CHECK(tsl_gguf_open(NULL, &err) == NULL);
    free(B.b);
}

static void test_mutations(void) {
    base_offs o;
    bb B = build_base(&o);
    const uint64_t HUGE = 1ull << 63;
    mutate(&B, 0, 0x4c4d4747, 4, "bad magic 'GGML'", "magic");
    mutate(&B, o.version, 1, 4, "version 1 is not supported", "version 1");
    mutate(&B, o.version, 99, 4, "version 99 is not supported", "version 99");
    mutate(&B, o.version, 0x03000000, 4, "big-endian", "byte-swapped version");
    mutate(&B, o.tcount, HUGE, 8, "tensor count 9223372036854775808 is impossible", "tensor count 2^63");
    mutate(&B, o.tcount, UINT64_MAX, 8, "tensor count", "tensor count 2^64-1");
    mutate(&B, o.tcount, 4, 8, "tensor 3", "one tensor too many");
    mutate(&B, o.kvcount, HUGE, 8, "kv count 9223372036854775808 is impossible", "kv count 2^63");
    mutate(&B, o.kvcount, 10, 8, "tensor 0", "one kv too few"); /* the last key is read as a tensor name */
    mutate(&B, o.key_len_u8, HUGE, 8, "key length 9223372036854775808 runs past", "key length 2^63");
    mutate(&B, o.key_len_u8, 0, 8, "key length is 0", "empty key");
    mutate(&B, o.key_u8_char, 0, 1, "key contains a NUL byte", "NUL in key");
    mutate(&B, o.str_len, HUGE, 8, "string length 9223372036854775808 runs past", "string length 2^63");
    mutate(&B, o.str_len, UINT64_MAX, 8, "string length", "string length 2^64-1");
    mutate(&B, o.arr_i16_len, HUGE, 8, "array length 9223372036854775808", "array length 2^63");
    mutate(&B, o.arr_u64_len, 1ull << 61, 8, "array length 2305843009213693952", "array length * 8 overflows");
    mutate(&B, o.arr_str_len, UINT64_MAX, 8, "array length", "string array length");
    mutate(&B, o.arr_i16_elem_type, 99, 4, "array element type 99", "array element type");
    mutate(&B, o.type_f64, 13, 4, "value type 13 is not a GGUF type", "value type 13");
    mutate(&B, o.type_f64, 0x80000000u, 4, "value type", "value type 2^31");
    mutate(&B, o.bool_val, 2, 1, "bool value 2 is not 0 or 1", "bool 2");
    mutate(&B, o.dup_b_char, 'a', 1, "duplicate key (first defined as kv 9)", "duplicate key");
    mutate(&B, o.align_val, 0, 4, "general.alignment 0 is not a power of two", "alignment 0");
    mutate(&B, o.align_val, 3, 4, "general.alignment 3 is not a power of two", "alignment 3");
    mutate(&B, o.align_type, TSL_GGUF_I32, 4, "general.alignment has type i32", "alignment i32");
    mutate(&B, o.align_val, 128, 4, "tensor 1 ('w.1'): data offset 64 is not a multiple of the alignment 128", "alignment 128");
    mutate(&B, o.t_name_len[1], 0, 8, "name length is 0", "empty tensor name");
    mutate(&B, o.t_name_len[1], HUGE, 8, "name length 9223372036854775808 runs past", "name length 2^63");
    mutate(&B, o.t_name_last[2], '0', 1, "duplicate tensor name (first defined as tensor 0)", "duplicate name");
    mutate(&B, o.t_ndims[0], 0, 4, "n_dims 0 is not in 1..4", "n_dims 0");
    mutate(&B, o.t_ndims[0], 5, 4, "n_dims 5 is not in 1..4", "n_dims 5");
    mutate(&B, o.t_type[1], 200, 4, "tensor type 200 is not a known GGUF tensor type", "type 200");
    mutate(&B, o.t_type[1], 12, 4, "tensor type 12 (q4_K) is not supported", "type q4_K");
    mutate(&B, o.t_dims[0], HUGE, 8, "dims[0] = 9223372036854775808 is too large", "dim 2^63");
    mutate(&B, o.t_dims[1], 33, 8, "dims[0] = 33 is not a multiple of the q8_0 block length 32", "q8_0 ne0 33");
    {
        uint8_t *b = malloc(B.n);
        memcpy(b, B.b, B.n);
        patch_le(b, o.t_dims[0], 1ull << 40, 8);
        patch_le(b, o.t_dims[0] + 8, 1ull << 40, 8);
        expect_refused(b, B.n, "element count of dims [1099511627776, 1099511627776, 1, 1] overflows", "overflow");
        patch_le(b, o.t_dims[0], 1ull << 31, 8);
        patch_le(b, o.t_dims[0] + 8, 1ull << 31, 8);
        expect_refused(b, B.n, "byte size of dims", "byte size overflow");
        free(b);
    }
    mutate(&B, o.t_dims[0], 9, 8, "data [offset 608, 34 bytes] overlaps tensor 0 ('w.0') [offset 544, 72 bytes]", "tensor grows past its room");
    mutate(&B, o.t_offset[1], 4, 8, "data offset 4 is not a multiple of the alignment 32", "misaligned");
    mutate(&B, o.t_offset[2], 1 << 20, 8, "data [offset 1049120, 8 bytes] runs past the end of the file (680 bytes)", "past end");
    mutate(&B, o.t_offset[2], UINT64_MAX - 31, 8, "runs past the end of the file", "offset near 2^64");
    mutate(&B, o.t_offset[1], 0, 8,
           "tensor 1 ('w.1'): data [offset 544, 34 bytes] overlaps tensor 0 ('w.0') [offset 544, 64 bytes]", "overlap");
    mutate(&B, o.t_offset[2], 32, 8,
           "tensor 2 ('w.2'): data [offset 576, 8 bytes] overlaps tensor 0 ('w.0') [offset 544, 64 bytes]",
           "overlap, inside");
    mutate(&B, o.t_offset[0], 32, 8, "tensor 1 ('w.1'): data [offset 608, 34 bytes] overlaps tensor 0", "overlap, tail");
    free(B.b);
}

/* An array nested deeper than allowed is refused before recursion runs away;
 * the deepest allowed nesting opens. */
static void test_nesting(void) {
    static const int depths[] = {TSL_GGUF_MAX_DEPTH, TSL_GGUF_MAX_DEPTH + 1, 5000};
    for (int di = 0; di < 3; di++) {
        int depth = depths[di];
        bb B = {0};
        bb_put(&B, "GGUF", 4);
        bb_u32(&B, 3);
        bb_u64(&B, 0);
        bb_u64(&B, 1);
        bb_str(&B, "bomb");
        bb_u32(&B, TSL_GGUF_ARRAY);
        for (int i = 1; i < depth; i++) {
            bb_u32(&B, TSL_GGUF_ARRAY);
            bb_u64(&B, 1);
        }
        bb_u32(&B, TSL_GGUF_U8);
        bb_u64(&B, 1);
        bb_le(&B, 9, 1);
        tsl_error err;
        tsl_gguf *g = tsl_gguf_open_memory(B.b, B.n, "broken.gguf", &err);
        if (depth == TSL_GGUF_MAX_DEPTH) {
            CHECKF(g != NULL, "%s", err.message);
        } else {
            CHECK(g == NULL);
            CHECK_STR_CONTAINS(err.message, "array nesting depth exceeds 16");
        }
        tsl_gguf_close(g);
        free(B.b);
    }
}

/* Random byte flips of the base and sample files: nothing crashes, every
 * refusal has a message, and what opens can be walked. */
static void walk_all(const tsl_gguf *g) {
    for (int64_t i = 0; i < tsl_gguf_kv_count(g); i++) {
        const char *k = tsl_gguf_key(g, i);
        int64_t iv;
        double dv;
        const char *s;
        tsl_gguf_get_int(g, k, &iv, NULL);
        tsl_gguf_get_float(g, k, &dv, NULL);
        tsl_gguf_get_str(g, k, &s, NULL, NULL);
        uint64_t n = 0;
        if (tsl_gguf_get_arr(g, k, NULL, &n, NULL, NULL, NULL) == TSL_SUCCESS)
            for (uint64_t j = 0; j < n && j < 64; j++) {
                tsl_gguf_get_arr_int(g, k, j, &iv, NULL);
                tsl_gguf_get_arr_float(g, k, j, &dv, NULL);
                tsl_gguf_get_arr_str(g, k, j, &s, NULL, NULL);
            }
    }
    for (int64_t i = 0; i < tsl_gguf_tensor_count(g); i++) {
        const tsl_gguf_tensor_info *ti = tsl_gguf_tensor(g, i);
        volatile uint64_t h = fnv64(ti->data, ti->size);
        (void)h;
    }
}

static void test_random_flips(void) {
    base_offs o;
    bb B = build_base(&o);
    char path[512];
    path_in_tmp(path, sizeof path, "sample.gguf");
    tsl_error err;
    CHECK(write_sample(path, &err) == TSL_SUCCESS);
    size_t sn;
    uint8_t *sample = read_file(path, &sn);
    unsigned long long seed = 0x9e3779b97f4a7c15ull;
    int opened = 0, refused = 0;
    for (int round = 0; round < 4000; round++) {
        const uint8_t *src = round % 2 ? sample : B.b;
        size_t n = round % 2 ? sn : B.n;
        uint8_t *b = malloc(n);
        memcpy(b, src, n);
        int flips = 1 + (int)(test_rand_u64(&seed) % 4);
        for (int k = 0; k < flips; k++) {
            size_t at = (size_t)(test_rand_u64(&seed) % n);
            b[at] = (uint8_t)test_rand_u64(&seed);
        }
        size_t len = test_rand_u64(&seed) % 8 == 0 ? (size_t)(test_rand_u64(&seed) % n) : n;
        tsl_gguf *g = tsl_gguf_open_memory(b, len, "flip", &err);
        if (g) {
            walk_all(g);
            tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){1 << 14, true});
            tsl_gguf_load_tensors(g, ctx, NULL);
            tsl_ctx_free(ctx);
            tsl_gguf_close(g);
            opened++;
        } else {
            CHECK(err.message[0] != '\0');
            refused++;
        }
        free(b);
    }
    CHECK(opened > 100 && refused > 100); /* both paths exercised */
    free(sample);
    free(B.b);
}

/* ------------------------------------------------------------------------ */
/* Writer failures                                                           */
/* ------------------------------------------------------------------------ */

static int count_tmp_leftovers(void) {
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp-")) n++;
    if (d) closedir(d);
    return n;
}

static tsl_status fill_fail(void *user, void *dst, size_t offset, size_t n, tsl_error *err) {
    (void)user;
    memset(dst, 0, n);
    if (offset + n < 3u << 20) return TSL_SUCCESS; /* fail after a few chunks have been written */
    error_set(err, TSL_FAILED, NULL, NULL, -1, NULL, NULL, "source tensor unreadable at %zu", offset);
    return TSL_FAILED;
}

static tsl_status fill_fail_silent(void *user, void *dst, size_t offset, size_t n, tsl_error *err) {
    (void)user, (void)dst, (void)offset, (void)n, (void)err;
    return TSL_RETRY;
}

static void test_writer_errors(void) {
    char path[512];
    path_in_tmp(path, sizeof path, "atomic.gguf");
    tsl_error err;

    /* setters record the first failure; write refuses with it */
    tsl_gguf_writer *w = tsl_gguf_writer_new();
    CHECK(tsl_gguf_writer_status(w, &err) == TSL_SUCCESS);
    CHECK(tsl_gguf_writer_set_alignment(w, 3) == TSL_FAILED);
    CHECK(tsl_gguf_writer_set_u32(w, "x", 1) == TSL_SUCCESS); /* later calls still run */
    CHECK(tsl_gguf_writer_status(w, &err) == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "3 is not a power of two");
    CHECK(tsl_gguf_writer_write(w, path, &err) == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "3 is not a power of two");
    CHECK(access(path, F_OK) != 0);
    tsl_gguf_writer_free(w);

#define BAD(call, expect)                                                      \
    do {                                                                       \
        tsl_gguf_writer *w_ = tsl_gguf_writer_new();                           \
        tsl_gguf_writer *w = w_;                                               \
        CHECK((call) != TSL_SUCCESS);                                          \
        CHECK(tsl_gguf_writer_status(w_, &err) == TSL_FAILED);                 \
        CHECK_STR_CONTAINS(err.message, expect);                               \
        tsl_gguf_writer_free(w_);                                              \
    } while (0)
    static const float f4[4] = {1, 2, 3, 4};
    BAD(tsl_gguf_writer_set_alignment(w, 0), "0 is not a power of two");
    BAD(tsl_gguf_writer_set_u32(w, "general.alignment", 48), "general.alignment must be a u32 power of two");
    BAD(tsl_gguf_writer_set_i32(w, "general.alignment", 32), "general.alignment must be a u32 power of two");
    BAD(tsl_gguf_writer_set_u8(w, "", 1), "the key is empty");
    BAD(tsl_gguf_writer_set_u8(w, NULL, 1), "the key is NULL");
    BAD(tsl_gguf_writer_set_str(w, "s", NULL), "is NULL");
    BAD(tsl_gguf_writer_set_arr(w, "a", TSL_GGUF_STRING, f4, 1), "not a fixed-size type");
    BAD(tsl_gguf_writer_set_arr(w, "a", (tsl_gguf_type)42, f4, 1), "not a fixed-size type");
    BAD(tsl_gguf_writer_set_arr(w, "a", TSL_GGUF_BOOL, "\x01\x02", 2), "bool element 1 is 2");
    BAD(tsl_gguf_writer_set_arr(w, "a", TSL_GGUF_U8, NULL, 2), "is NULL");
    BAD(tsl_gguf_writer_set_arr_str(w, "a", (const char *const[]){"x", NULL}, 2), "string 1 of 'a' is NULL");
    BAD(tsl_gguf_writer_copy_kv(w, NULL, "k"), "the file is NULL");
    BAD(tsl_gguf_writer_add_tensor(w, "t", TSL_TYPE_F32, 0, (int64_t[]){4}, f4), "n_dims 0");
    BAD(tsl_gguf_writer_add_tensor(w, "t", TSL_TYPE_F32, 5, (int64_t[]){4, 1, 1, 1, 1}, f4), "n_dims 5");
    BAD(tsl_gguf_writer_add_tensor(w, "t", (tsl_type)12, 1, (int64_t[]){4}, f4), "unknown type 12");
    BAD(tsl_gguf_writer_add_tensor(w, "t", TSL_TYPE_Q8_0, 1, (int64_t[]){4}, f4), "not a multiple of the q8_0");
    BAD(tsl_gguf_writer_add_tensor(w, "t", TSL_TYPE_F32, 1, (int64_t[]){-1}, f4), "ne[0] = -1");
    BAD(tsl_gguf_writer_add_tensor(w, "t", TSL_TYPE_F32, 2, ((int64_t[]){1ll << 40, 1ll << 40}), f4), "overflows");
    BAD(tsl_gguf_writer_add_tensor(w, "", TSL_TYPE_F32, 1, (int64_t[]){4}, f4), "the name is empty");
    BAD(tsl_gguf_writer_add_tensor(w, "t", TSL_TYPE_F32, 1, (int64_t[]){4}, NULL), "has no data");
    BAD(tsl_gguf_writer_add_tensor(w, "a-name-that-is-far-too-long-for-a-tensor-name-in-tensile-or-ggml-xx",
                                   TSL_TYPE_F32, 1, (int64_t[]){4}, f4),
        "at most 63 fit");
    BAD(tsl_gguf_writer_add_tensor_fn(w, "t", TSL_TYPE_F32, 1, (int64_t[]){4}, NULL, NULL), "callback is NULL");
    {
        tsl_gguf_writer *w2 = tsl_gguf_writer_new();
        CHECK(tsl_gguf_writer_add_tensor(w2, "t", TSL_TYPE_F32, 1, (int64_t[]){4}, f4) == TSL_SUCCESS);
        CHECK(tsl_gguf_writer_add_tensor(w2, "t", TSL_TYPE_F32, 1, (int64_t[]){4}, f4) == TSL_FAILED);
        CHECK(tsl_gguf_writer_status(w2, &err) == TSL_FAILED);
        CHECK_STR_CONTAINS(err.message, "duplicate tensor name 't'");
        tsl_gguf_writer_free(w2);
    }
#undef BAD

    /* setting a key again replaces it in place */
    w = tsl_gguf_writer_new();
    tsl_gguf_writer_set_u32(w, "a", 1);
    tsl_gguf_writer_set_str(w, "b", "x");
    tsl_gguf_writer_set_str(w, "a", "replaced");
    CHECK(tsl_gguf_writer_write(w, path, &err) == TSL_SUCCESS);
    tsl_gguf *g = tsl_gguf_open(path, &err);
    const char *s = NULL;
    CHECK(g && tsl_gguf_kv_count(g) == 2 && strcmp(tsl_gguf_key(g, 0), "a") == 0);
    CHECK(g && tsl_gguf_get_str(g, "a", &s, NULL, NULL) == TSL_SUCCESS && strcmp(s, "replaced") == 0);
    tsl_gguf_close(g);
    tsl_gguf_writer_free(w);

    /* a callback that fails after megabytes were written: the old file at
     * the destination is untouched and no temporary remains */
    size_t before_n;
    uint8_t *before = read_file(path, &before_n);
    w = tsl_gguf_writer_new();
    tsl_gguf_writer_set_str(w, "general.name", "doomed");
    CHECK(tsl_gguf_writer_add_tensor_fn(w, "big", TSL_TYPE_F32, 2, (int64_t[]){1024, 1024}, fill_fail, NULL) ==
          TSL_SUCCESS);
    CHECK(tsl_gguf_writer_write(w, path, &err) == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "source tensor unreadable at 2097152");
    size_t after_n;
    uint8_t *after = read_file(path, &after_n);
    CHECK(before && after && before_n == after_n && memcmp(before, after, before_n) == 0);
    CHECK(count_tmp_leftovers() == 0);
    free(before);
    free(after);
    tsl_gguf_writer_free(w);

    /* a callback failing without a message: ours names the tensor, and the
     * callback's status comes back; nothing is created at a new path */
    char path2[512];
    path_in_tmp(path2, sizeof path2, "never.gguf");
    w = tsl_gguf_writer_new();
    tsl_gguf_writer_add_tensor_fn(w, "quiet", TSL_TYPE_F32, 1, (int64_t[]){8}, fill_fail_silent, NULL);
    CHECK(tsl_gguf_writer_write(w, path2, &err) == TSL_RETRY);
    CHECK_STR_CONTAINS(err.message, "the data callback of tensor 'quiet' returned RETRY at byte 0");
    CHECK(tsl_gguf_writer_write(w, path2, NULL) == TSL_RETRY);
    CHECK(access(path2, F_OK) != 0);
    CHECK(count_tmp_leftovers() == 0);
    tsl_gguf_writer_free(w);

    /* a directory that does not exist */
    w = tsl_gguf_writer_new();
    char path3[512];
    path_in_tmp(path3, sizeof path3, "no/such/dir/x.gguf");
    CHECK(tsl_gguf_writer_write(w, path3, &err) == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "cannot create a temporary file");
    CHECK(tsl_gguf_writer_write(NULL, path3, &err) == TSL_FAILED);
    CHECK(tsl_gguf_writer_write(w, NULL, &err) == TSL_FAILED);
    tsl_gguf_writer_free(w);
    tsl_gguf_writer_free(NULL);

    /* load_tensors refuses a name longer than tensor names hold, before
     * creating anything */
    bb B = {0};
    bb_put(&B, "GGUF", 4);
    bb_u32(&B, 3);
    bb_u64(&B, 2);
    bb_u64(&B, 0);
    bb_str(&B, "ok");
    bb_u32(&B, 1);
    bb_u64(&B, 1);
    bb_u32(&B, TSL_TYPE_F32);
    bb_u64(&B, 0);
    bb_str(&B, "a-name-that-is-far-too-long-for-a-tensor-name-in-tensile-or-ggml-xx");
    bb_u32(&B, 1);
    bb_u64(&B, 1);
    bb_u32(&B, TSL_TYPE_F32);
    bb_u64(&B, 32);
    bb_zeros(&B, (32 - B.n % 32) % 32 + 36);
    g = tsl_gguf_open_memory(B.b, B.n, "long", &err);
    CHECKF(g != NULL, "%s", err.message);
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){1 << 12, true});
    CHECK(tsl_gguf_load_tensors(g, ctx, &err) == TSL_FAILED);
    CHECK_STR_CONTAINS(err.message, "tensor names hold at most 63");
    CHECK(tsl_ctx_first_tensor(ctx) == NULL);
    tsl_ctx_free(ctx);
    tsl_gguf_close(g);
    free(B.b);
}

/* ------------------------------------------------------------------------ */
/* --dump                                                                    */
/* ------------------------------------------------------------------------ */

static void dump_hex(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) printf("%02x", p[i]);
}

/* Print one encoded value of type t at *p (bounded by end; the file was
 * validated, the bounds are a second guard); advance *p. */
static bool dump_value(uint32_t t, const uint8_t **p, const uint8_t *end) {
    const uint8_t *q = *p;
#define NEED(k)                                         \
    do {                                                \
        if ((size_t)(end - q) < (size_t)(k)) return false; \
    } while (0)
    uint64_t u = 0;
    switch (t) {
    case TSL_GGUF_U8: case TSL_GGUF_BOOL: NEED(1); printf("%u", q[0]); q += 1; break;
    case TSL_GGUF_I8: NEED(1); printf("%d", (int8_t)q[0]); q += 1; break;
    case TSL_GGUF_U16: NEED(2); printf("%u", (unsigned)(q[0] | q[1] << 8)); q += 2; break;
    case TSL_GGUF_I16: NEED(2); printf("%d", (int16_t)(uint16_t)(q[0] | q[1] << 8)); q += 2; break;
    case TSL_GGUF_U32: case TSL_GGUF_I32: case TSL_GGUF_F32:
        NEED(4);
        memcpy(&u, q, 4);
        if (t == TSL_GGUF_U32) printf("%u", (uint32_t)u);
        else if (t == TSL_GGUF_I32) printf("%d", (int32_t)(uint32_t)u);
        else printf("0x%08x", (uint32_t)u);
        q += 4;
        break;
    case TSL_GGUF_U64: case TSL_GGUF_I64: case TSL_GGUF_F64:
        NEED(8);
        memcpy(&u, q, 8);
        if (t == TSL_GGUF_U64) printf("%llu", (unsigned long long)u);
        else if (t == TSL_GGUF_I64) printf("%lld", (long long)(int64_t)u);
        else printf("0x%016llx", (unsigned long long)u);
        q += 8;
        break;
    case TSL_GGUF_STRING:
        NEED(8);
        memcpy(&u, q, 8);
        q += 8;
        NEED(u);
        printf("s:");
        dump_hex(q, (size_t)u);
        q += u;
        break;
    case TSL_GGUF_ARRAY: {
        NEED(12);
        uint32_t et;
        memcpy(&et, q, 4);
        memcpy(&u, q + 4, 8);
        q += 12;
        printf("[%s;%llu;", tsl_gguf_type_name((tsl_gguf_type)et), (unsigned long long)u);
        for (uint64_t i = 0; i < u; i++) {
            if (i) printf(",");
            if (!dump_value(et, &q, end)) return false;
        }
        printf("]");
        break;
    }
    default: return false;
    }
#undef NEED
    *p = q;
    return true;
}

static int dump(const char *path) {
    tsl_error err;
    tsl_gguf *g = tsl_gguf_open(path, &err);
    if (!g) {
        char line[512];
        tsl_error_format(&err, line, sizeof line);
        fprintf(stderr, "%s\n", line);
        return 1;
    }
    printf("version\t%u\n", tsl_gguf_version(g));
    printf("alignment\t%zu\n", tsl_gguf_alignment(g));
    printf("data_offset\t%zu\n", tsl_gguf_data_offset(g));
    printf("kv_count\t%lld\n", (long long)tsl_gguf_kv_count(g));
    int rc = 0;
    for (int64_t i = 0; i < tsl_gguf_kv_count(g); i++) {
        const char *k = tsl_gguf_key(g, i);
        tsl_gguf_type t = tsl_gguf_kv_type(g, i);
        printf("kv\t%s\t%s\t", k, tsl_gguf_type_name(t));
        /* values through the public getters, re-encoded for printing */
        bb B = {0};
        switch (t) {
        case TSL_GGUF_U8: { uint8_t v; tsl_gguf_get_u8(g, k, &v, NULL); bb_le(&B, v, 1); break; }
        case TSL_GGUF_I8: { int8_t v; tsl_gguf_get_i8(g, k, &v, NULL); bb_le(&B, (uint8_t)v, 1); break; }
        case TSL_GGUF_U16: { uint16_t v; tsl_gguf_get_u16(g, k, &v, NULL); bb_le(&B, v, 2); break; }
        case TSL_GGUF_I16: { int16_t v; tsl_gguf_get_i16(g, k, &v, NULL); bb_le(&B, (uint16_t)v, 2); break; }
        case TSL_GGUF_U32: { uint32_t v; tsl_gguf_get_u32(g, k, &v, NULL); bb_le(&B, v, 4); break; }
        case TSL_GGUF_I32: { int32_t v; tsl_gguf_get_i32(g, k, &v, NULL); bb_le(&B, (uint32_t)v, 4); break; }
        case TSL_GGUF_U64: { uint64_t v; tsl_gguf_get_u64(g, k, &v, NULL); bb_le(&B, v, 8); break; }
        case TSL_GGUF_I64: { int64_t v; tsl_gguf_get_i64(g, k, &v, NULL); bb_le(&B, (uint64_t)v, 8); break; }
        case TSL_GGUF_F32: { float v; uint32_t u; tsl_gguf_get_f32(g, k, &v, NULL); memcpy(&u, &v, 4); bb_le(&B, u, 4); break; }
        case TSL_GGUF_F64: { double v; uint64_t u; tsl_gguf_get_f64(g, k, &v, NULL); memcpy(&u, &v, 8); bb_le(&B, u, 8); break; }
        case TSL_GGUF_BOOL: { bool v; tsl_gguf_get_bool(g, k, &v, NULL); bb_le(&B, v, 1); break; }
        case TSL_GGUF_STRING: {
            const char *s;
            size_t n;
            tsl_gguf_get_str(g, k, &s, &n, NULL);
            bb_u64(&B, n);
            bb_put(&B, s, n);
            break;
        }
        case TSL_GGUF_ARRAY: {
            tsl_gguf_type et;
            uint64_t n;
            const void *data;
            size_t nbytes;
            tsl_gguf_get_arr(g, k, &et, &n, &data, &nbytes, NULL);
            bb_u32(&B, (uint32_t)et);
            bb_u64(&B, n);
            if (et == TSL_GGUF_STRING) {
                /* through the element getter, to test it */
                for (uint64_t j = 0; j < n; j++) {
                    const char *s;
                    size_t sl;
                    tsl_gguf_get_arr_str(g, k, j, &s, &sl, NULL);
                    bb_u64(&B, sl);
                    bb_put(&B, s, sl);
                }
            } else {
                bb_put(&B, data, nbytes);
            }
            break;
        }
        default: break;
        }
        const uint8_t *p = B.b;
        if (!dump_value((uint32_t)t, &p, B.b + B.n) || p != B.b + B.n) {
            printf("?");
            rc = 1;
        }
        printf("\n");
        free(B.b);
    }
    printf("tensor_count\t%lld\n", (long long)tsl_gguf_tensor_count(g));
    for (int64_t i = 0; i < tsl_gguf_tensor_count(g); i++) {
        const tsl_gguf_tensor_info *ti = tsl_gguf_tensor(g, i);
        printf("tensor\t%s\t%s\t%d\t", ti->name, tsl_type_name(ti->type), ti->n_dims);
        for (int d = 0; d < ti->n_dims; d++) printf("%s%lld", d ? "," : "", (long long)ti->ne[d]);
        printf("\t%llu\t%zu\t%016llx\n", (unsigned long long)ti->offset, ti->size,
               (unsigned long long)fnv64(ti->data, ti->size));
    }
    tsl_gguf_close(g);
    return rc;
}

static int write_corpus(const char *dir) {
    char path[1024];
    tsl_error err;
    snprintf(path, sizeof path, "%s/sample.gguf", dir);
    if (write_sample(path, &err) != TSL_SUCCESS) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    base_offs o;
    bb B = build_base(&o);
    snprintf(path, sizeof path, "%s/base.gguf", dir);
    bool ok = write_bytes(path, B.b, B.n);
    free(B.b);
    B = build_nested_source();
    snprintf(path, sizeof path, "%s/nested.gguf", dir);
    ok = write_bytes(path, B.b, B.n) && ok;
    free(B.b);
    return ok ? 0 : 1;
}

static void remove_tmpdir(void) {
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    char p[1024];
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(tmpdir);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--dump") == 0) return dump(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0) return write_corpus(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--write-sample") == 0) {
        tsl_error err;
        if (write_sample(argv[2], &err) == TSL_SUCCESS) return 0;
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: %s [--dump FILE | --write-sample FILE | --write-corpus DIR]\n", argv[0]);
        return 2;
    }
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/tsl_gguf_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_roundtrip);
    RUN(test_open_memory);
    RUN(test_minimal_files);
    RUN(test_base_is_valid);
    RUN(test_truncation);
    RUN(test_mutations);
    RUN(test_nesting);
    RUN(test_random_flips);
    RUN(test_writer_errors);
    remove_tmpdir();
    return test_summary();
}
