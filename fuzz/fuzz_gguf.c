/*
 * fuzz_gguf.c - libFuzzer target for the GGUF reader (and, for what it
 * accepts, the writer).
 *
 * Each input is parsed in place with tsl_gguf_open_memory, which runs the
 * same parser as tsl_gguf_open without the file system, so the fuzzer runs at
 * parser speed. An input that is refused must come with a message. An input
 * that is accepted is walked completely through the public getters (every
 * typed getter on every key, every array element, every tensor byte), loaded
 * into a no_alloc context, and then copied through the writer into a file and
 * read back: what the reader accepts, the writer must reproduce, with the
 * same pairs (byte for byte) and the same tensor bytes. Sanitizers (address,
 * undefined) turn any read outside the input into a crash.
 *
 * The write-back goes to $FUZZ_GGUF_DIR, or /dev/shm, or /tmp, and is done for
 * inputs of at most 64 KiB, so the file system does not dominate the run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensile/model.h"

static uint64_t fuzz_sum(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void fuzz_walk(const tsl_gguf *g) {
    for (int64_t i = 0; i < tsl_gguf_kv_count(g); i++) {
        const char *k = tsl_gguf_key(g, i);
        if (!k || tsl_gguf_find_key(g, k) != i) abort();
        uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
        uint64_t u64; int64_t i64; float f32; double f64; bool b; const char *s; size_t len;
        int ok = 0;
        ok += tsl_gguf_get_u8(g, k, &u8, NULL) == TSL_SUCCESS;
        ok += tsl_gguf_get_i8(g, k, &i8, NULL) == TSL_SUCCESS;
        ok += tsl_gguf_get_u16(g, k, &u16, NULL) == TSL_SUCCESS;
        ok += tsl_gguf_get_i16(g, k, &i16, NULL) == TSL_SUCCESS;
        ok += tsl_gguf_get_u32(g, k, &u32, NULL) == TSL_SUCCESS;
        ok += tsl_gguf_get_i32(g, k, &i32, NULL) == TSL_SUCCESS;
        ok += tsl_gguf_get_u64(g, k, &u64, NULL) == TSL_SUCCESS;
        ok += tsl_gguf_get_i64(g, k, &i64, NULL) == TSL_SUCCESS;
        ok += tsl_gguf_get_f32(g, k, &f32, NULL) == TSL_SUCCESS;
        ok += tsl_gguf_get_f64(g, k, &f64, NULL) == TSL_SUCCESS;
        ok += tsl_gguf_get_bool(g, k, &b, NULL) == TSL_SUCCESS;
        if (tsl_gguf_get_str(g, k, &s, &len, NULL) == TSL_SUCCESS) {
            ok++;
            if (s[len] != '\0') abort();
            fuzz_sum(s, len);
        }
        tsl_gguf_get_int(g, k, &i64, NULL);
        tsl_gguf_get_float(g, k, &f64, NULL);
        tsl_gguf_type et;
        uint64_t n;
        const void *data;
        size_t nbytes;
        if (tsl_gguf_get_arr(g, k, &et, &n, &data, &nbytes, NULL) == TSL_SUCCESS) {
            ok++;
            fuzz_sum(data, nbytes);
            for (uint64_t j = 0; j < n; j++) {
                tsl_gguf_get_arr_int(g, k, j, &i64, NULL);
                tsl_gguf_get_arr_float(g, k, j, &f64, NULL);
                if (tsl_gguf_get_arr_str(g, k, j, &s, &len, NULL) == TSL_SUCCESS && s[len] != '\0') abort();
            }
            tsl_gguf_get_arr_int(g, k, n, &i64, NULL); /* one past the end: an error, not a read */
        }
        if (ok != 1) abort(); /* exactly one typed getter matches each pair */
    }
    for (int64_t i = 0; i < tsl_gguf_tensor_count(g); i++) {
        const tsl_gguf_tensor_info *ti = tsl_gguf_tensor(g, i);
        if (!ti || tsl_gguf_find_tensor(g, ti->name) != i) abort();
        fuzz_sum(ti->data, ti->size);
    }
}

/* Copy everything through the writer and check the copy reads back equal. */
static void fuzz_rewrite(const tsl_gguf *g) {
    const char *dir = getenv("FUZZ_GGUF_DIR");
    if (!dir) dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    char path[512];
    snprintf(path, sizeof path, "%s/fuzz_gguf_%ld.gguf", dir, (long)getpid());
    tsl_gguf_writer *w = tsl_gguf_writer_new();
    if (!w) return;
    for (int64_t i = 0; i < tsl_gguf_kv_count(g); i++) tsl_gguf_writer_copy_kv(w, g, tsl_gguf_key(g, i));
    for (int64_t i = 0; i < tsl_gguf_tensor_count(g); i++) {
        const tsl_gguf_tensor_info *ti = tsl_gguf_tensor(g, i);
        tsl_gguf_writer_add_tensor(w, ti->name, ti->type, ti->n_dims, ti->ne, ti->size ? ti->data : "");
    }
    tsl_error err;
    if (tsl_gguf_writer_status(w, &err) != TSL_SUCCESS) {
        /* only a name too long for a tensile tensor is refused by the writer
         * after the reader accepted it */
        if (!strstr(err.message, "fit")) abort();
        tsl_gguf_writer_free(w);
        return;
    }
    if (tsl_gguf_writer_write(w, path, &err) != TSL_SUCCESS) abort();
    tsl_gguf_writer_free(w);
    tsl_gguf *h = tsl_gguf_open(path, &err);
    if (!h) abort();
    if (tsl_gguf_kv_count(h) != tsl_gguf_kv_count(g) || tsl_gguf_tensor_count(h) != tsl_gguf_tensor_count(g)) abort();
    if (tsl_gguf_alignment(h) != tsl_gguf_alignment(g)) abort();
    for (int64_t i = 0; i < tsl_gguf_kv_count(g); i++) {
        const char *k = tsl_gguf_key(g, i);
        if (strcmp(k, tsl_gguf_key(h, i)) != 0 || tsl_gguf_kv_type(g, i) != tsl_gguf_kv_type(h, i)) abort();
        const void *a, *b;
        size_t na, nb;
        if (tsl_gguf_get_arr(g, k, NULL, NULL, &a, &na, NULL) == TSL_SUCCESS) {
            if (tsl_gguf_get_arr(h, k, NULL, NULL, &b, &nb, NULL) != TSL_SUCCESS || na != nb || memcmp(a, b, na))
                abort();
        }
    }
    for (int64_t i = 0; i < tsl_gguf_tensor_count(g); i++) {
        const tsl_gguf_tensor_info *x = tsl_gguf_tensor(g, i), *y = tsl_gguf_tensor(h, i);
        if (strcmp(x->name, y->name) || x->type != y->type || x->size != y->size ||
            memcmp(x->ne, y->ne, sizeof x->ne) || (x->size && memcmp(x->data, y->data, x->size)))
            abort();
    }
    tsl_gguf_close(h);
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tsl_error err;
    tsl_error_clear(&err);
    tsl_gguf *g = tsl_gguf_open_memory(data, size, "fuzz", &err);
    if (!g) {
        if (err.status == TSL_SUCCESS || err.message[0] == '\0') abort();
        return 0;
    }
    fuzz_walk(g);
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){1 << 16, true});
    if (ctx) {
        if (tsl_gguf_load_tensors(g, ctx, &err) == TSL_SUCCESS) {
            int64_t i = 0;
            for (tsl_tensor *t = tsl_ctx_first_tensor(ctx); t; t = tsl_ctx_next_tensor(ctx, t), i++)
                if (t->data != tsl_gguf_tensor(g, i)->data) abort();
        }
        tsl_ctx_free(ctx);
    }
    if (size <= 65536) fuzz_rewrite(g);
    tsl_gguf_close(g);
    return 0;
}
